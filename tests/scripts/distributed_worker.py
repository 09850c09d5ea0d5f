"""One process of a multi-process test job (started by tests/test_distributed.py).

Usage: distributed_worker.py INPUT_DIR OUT_DIR TASK [TASK ...] [--x64] [--chunk-delay S]

Joins the job from the environment (JAX_COORDINATOR_ADDRESS / JAX_NUM_PROCESSES /
JAX_PROCESS_ID, as ``jaxcrawl.cli.launch`` sets them), runs each TASK on its own
rows of the inputs in INPUT_DIR through ``jaxcrawl.solve`` of a ``jaxcrawl.parallel``
page source and writes ``OUT_DIR/TASK.p<I>.npz`` (its rows, its first row's global index,
the dual).  Tasks:

  harmonic    LambdaCrawl of ProcessRows.read of the .npy page table directory INPUT_DIR/table
  blc         BinaryLambdaCrawl(epsilon=0.4) of ProcessRows.read(INPUT_DIR/table.parquet) (row groups)
  capped      LambdaCrawl with host caps (INPUT_DIR/caps.npy, host = page_id // HOST_SIZE)
              of ProcessRows.read(INPUT_DIR/table.csv) (byte ranges)
  bounded     the capped solve with revisit bounds too (INPUT_DIR/lower.npy, upper.npy: every
              page's bounds, this process's rows taken from its start)
  stream      a StreamedTable (harmonic) of INPUT_DIR/table into OUT_DIR/stream_rate.npy
  stream_bounded  the same with the revisit bounds, into OUT_DIR/stream_bounded_rate.npy
  sweep       run_sweep of AsyncMirrorSync, 8 seeds, checkpoints in OUT_DIR/sweep
  sweep_grid  the same with 1 seed (fewer seeds than processes: split by grid chunks of 4,
              so process 0 computes chunk 0 and process 1 chunk 1, the shorter last one)
  far         BinaryLambdaCrawl at 1e-30 of the bandwidth (far below the change rates: the
              log-gap re-solve) from INPUT_DIR/table
  far_stream  a StreamedTable (binary) of the same into OUT_DIR/far_stream_rate.npy
  far_capped  the same solve under host caps that bind (INPUT_DIR/far_caps.npy, host = page // HOST_SIZE):
              the per-segment log-gap solve on the sharded arrays
  mismatch    a solve whose bandwidth differs on process 1 (must be refused)
  simulate    5 windows of the simulator under the LambdaCrawl schedule, pages sharded
              over the processes (global_tree); every per-page total of this process's rows
  learner     4 epochs of LambdaLearnAndCrawl (K19 Alg. 4) with its pages sharded over the
              processes; the per-epoch diagnostics
"""
import sys
import time

import jax

args = sys.argv[1:]
x64 = "--x64" in args
delay = 0.0
if "--chunk-delay" in args:
    i = args.index("--chunk-delay")
    delay = float(args[i + 1])
    del args[i:i + 2]
args = [a for a in args if a != "--x64"]
if x64:
    jax.config.update("jax_enable_x64", True)
inputs, out, *tasks = args

import jaxcrawl  # noqa: E402
from jaxcrawl import parallel  # noqa: E402
from jaxcrawl.parallel import ProcessRows, StreamedTable  # noqa: E402

mesh = parallel.initialize()
import os  # noqa: E402

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

pid = jax.process_index()
HOST_SIZE = 700
_bw = os.path.join(inputs, "bandwidth.npy")
bandwidth = float(np.load(_bw)) if os.path.exists(_bw) else None  # the sweep needs no inputs


def save(task, **arrays):
    np.savez(os.path.join(out, f"{task}.p{pid}.npz"), **arrays)
    print(f"{task} done", flush=True)


def save_policy(task, pol, start, **extra):
    save(task, rate=np.asarray(pol.rate), start=start, dual=pol.dual, converged=pol.converged, **extra)


def bounds(start=None, count=None):
    """The revisit bounds: every page's (the streamed table), or this process's rows."""
    lo, hi = (np.load(os.path.join(inputs, f"{b}.npy")) for b in ("lower", "upper"))
    return (lo, hi) if start is None else (lo[start:start + count], hi[start:start + count])


def table_hosts(src):
    return ((src.start + np.arange(np.shape(src.importance)[0])) // HOST_SIZE).astype(np.int32)


for task in tasks:
    if task == "harmonic":
        src = ProcessRows.read(os.path.join(inputs, "table"), bandwidth)
        pol = jaxcrawl.solve(src, "harmonic")
        save_policy(task, pol, src.start, prob=pol.prob)
    elif task == "blc":
        src = ProcessRows.read(os.path.join(inputs, "table.parquet"), bandwidth)
        save_policy(task, jaxcrawl.solve(src, jaxcrawl.binary(0.4)), src.start)
    elif task in ("capped", "bounded"):
        src = ProcessRows.read(os.path.join(inputs, "table.csv"), bandwidth)
        page_id = np.asarray(src.page_id).astype(np.int64)
        caps = jaxcrawl.HostCaps((page_id // HOST_SIZE).astype(np.int32), np.load(os.path.join(inputs, "caps.npy")))
        rows = bounds(src.start, page_id.size) if task == "bounded" else None
        pol = jaxcrawl.solve(src, "harmonic", caps=caps, bounds=rows)
        save_policy(task, pol, src.start, page_id=page_id, host_dual=pol.host_dual)
    elif task in ("stream", "stream_bounded"):
        src = StreamedTable(os.path.join(inputs, "table"), bandwidth, chunk_size=1500, progress=False,
                            out=os.path.join(out, f"{task}_rate.npy"))
        pol = jaxcrawl.solve(src, "harmonic", bounds=bounds() if task == "stream_bounded" else None)
        save_policy(task, pol, src.start)
    elif task == "far":
        src = ProcessRows.read(os.path.join(inputs, "table"), bandwidth * 1e-30)
        save_policy(task, jaxcrawl.solve(src, "binary"), src.start)
    elif task == "far_capped":
        src = ProcessRows.read(os.path.join(inputs, "table"), bandwidth * 1e-30)
        caps = jaxcrawl.HostCaps(table_hosts(src), np.load(os.path.join(inputs, "far_caps.npy")))
        save_policy(task, jaxcrawl.solve(src, "binary", caps=caps), src.start)
    elif task == "far_stream":
        src = StreamedTable(os.path.join(inputs, "table"), bandwidth * 1e-30, chunk_size=1500, progress=False,
                            out=os.path.join(out, "far_stream_rate.npy"))
        save_policy(task, jaxcrawl.solve(src, "binary"), src.start)
    elif task == "mismatch":
        try:
            parallel.check_consistent(bandwidth=bandwidth + (pid == 1), table="same")
        except ValueError as err:
            save(task, message=str(err))
        else:
            raise SystemExit("a bandwidth mismatch was not refused")
    elif task == "simulate":
        from jaxcrawl import simulate as sim

        n = 4000
        p = jaxcrawl.synthetic(jax.random.key(0), n, dtype=jnp.float64)
        sched = sim.schedule_from_policy(p, jaxcrawl.lambda_crawl(p))
        config = sim.config_for(p, sched)  # capacities from the whole problem: the same on every process
        s, e = parallel.row_range(n)
        rows = jax.tree_util.tree_map(lambda a: np.asarray(a)[..., s:e] if np.ndim(a) else np.asarray(a),
                                      (p, sched, sim.init_state(p)))
        problem, schedule, state = parallel.global_tree(rows)
        totals = jax.jit(lambda k, pr, sc, st: sim.simulate(k, pr, sc, st, config, 5)[1])(
            jax.random.key(3), problem, schedule, state)
        assert totals.stale_time.sharding.spec[-1] == "pages"
        save(task, start=s, **{f: parallel.local_rows(getattr(totals, f)) for f in totals._fields})
    elif task == "learner":
        import jaxcrawl.learners as lc
        from jaxcrawl.learners import run_learner

        n = 2000
        p = jaxcrawl.synthetic(jax.random.key(0), n, dtype=jnp.float64)
        learner = lc.lambda_learn_and_crawl("harmonic", **lc.llc_settings(p, "harmonic"))
        s, e = parallel.row_range(n)
        problem = parallel.global_tree(
            jax.tree_util.tree_map(lambda a: np.asarray(a)[..., s:e] if np.ndim(a) else np.asarray(a), p))
        _, info = jax.jit(lambda k, pr: run_learner(k, learner, pr, 4))(jax.random.key(3), problem)
        save(task, start=s, **{f: parallel.local_rows(getattr(info, f)) for f in info._fields})
    elif task in ("sweep", "sweep_grid"):
        from jaxcrawl.learners import SyncHyperparams, async_mirror_sync, run_sweep
        from jaxcrawl.sync_bandits import polynomial_bandit

        bandits = jax.vmap(lambda k: polynomial_bandit(k, 20))(jax.random.split(jax.random.key(1), 2))
        lr = jnp.asarray([0.05, 0.1, 0.2, 0.4, 0.8, 1.6])
        grid = SyncHyperparams(lr, jnp.full(6, 0.1), jnp.full(6, 2.0))

        def pause(c, _):
            print(f"chunk {c} stored", flush=True)
            time.sleep(delay)

        if task == "sweep":
            res = run_sweep(jax.random.key(7), async_mirror_sync(), bandits, grid, num_seeds=8, num_steps=30,
                            chunk_size=1, out_dir=os.path.join(out, "sweep"), on_chunk=pause)
        else:
            res = run_sweep(jax.random.key(7), async_mirror_sync(), bandits, grid, num_seeds=1, num_steps=30,
                            chunk_size=4, out_dir=os.path.join(out, "sweep_grid"))
        leaves = jax.tree_util.tree_leaves(res.outputs)
        save(task, computed=np.asarray(res.computed_chunks, int), **{f"leaf{j}": a for j, a in enumerate(leaves)})
    else:
        raise SystemExit(f"unknown task {task!r}")
