"""One process of a multi-process test job (started by tests/test_distributed.py).

Usage: distributed_worker.py INPUT_DIR OUT_DIR TASK [TASK ...] [--x64] [--chunk-delay S]

Joins the job from the environment (JAX_COORDINATOR_ADDRESS / JAX_NUM_PROCESSES /
JAX_PROCESS_ID, as ``jaxcrawl.distributed.launch`` sets them), runs each TASK on its own
rows of the inputs in INPUT_DIR and writes ``OUT_DIR/TASK.p<I>.npz`` (its rows, its first
row's global index, the dual).  Tasks:

  harmonic    LambdaCrawl from the .npy page table directory INPUT_DIR/table
  blc         BinaryLambdaCrawl(epsilon=0.4) from INPUT_DIR/table.parquet (row groups)
  capped      LambdaCrawl with host caps (INPUT_DIR/caps.npy, host = page_id // HOST_SIZE)
              from INPUT_DIR/table.csv (byte ranges)
  stream      stream_solve (harmonic) of INPUT_DIR/table into OUT_DIR/stream_rate.npy
  sweep       run_sweep of AsyncMirrorSync, 8 seeds, checkpoints in OUT_DIR/sweep
  sweep_grid  the same with 1 seed (fewer seeds than processes: split by grid chunks of 4,
              so process 0 computes chunk 0 and process 1 chunk 1, the shorter last one)
  far         BinaryLambdaCrawl at 1e-30 of the bandwidth (far below the change rates: the
              log-gap re-solve) from INPUT_DIR/table
  far_stream  stream_solve (binary) of the same into OUT_DIR/far_stream_rate.npy
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

from jaxcrawl import distributed  # noqa: E402

mesh = distributed.initialize()
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


for task in tasks:
    if task == "harmonic":
        rows = distributed.read_local_rows(os.path.join(inputs, "table"))
        sol = distributed.solve_local_rows(rows.importance, rows.change_rate, rows.complete, bandwidth, "harmonic")
        assert sol.start == rows.start
        save(task, rate=sol.rate, prob=sol.prob, start=sol.start, dual=sol.dual, converged=sol.converged)
    elif task == "blc":
        rows = distributed.read_local_rows(os.path.join(inputs, "table.parquet"))
        sol = distributed.solve_local_rows(rows.importance, rows.change_rate, rows.complete, bandwidth, "binary",
                                           epsilon=0.4)
        save(task, rate=sol.rate, start=sol.start, dual=sol.dual, converged=sol.converged)
    elif task == "capped":
        rows = distributed.read_local_rows(os.path.join(inputs, "table.csv"))
        host = (np.asarray(rows.page_id).astype(np.int64) // HOST_SIZE).astype(np.int32)
        caps = np.load(os.path.join(inputs, "caps.npy"))
        sol = distributed.solve_local_rows(rows.importance, rows.change_rate, rows.complete, bandwidth, "harmonic",
                                           host_id=host, host_cap=caps)
        save(task, rate=sol.rate, start=sol.start, dual=sol.dual, converged=sol.converged,
             page_id=np.asarray(rows.page_id).astype(np.int64))
    elif task == "stream":
        from jaxcrawl.scale import PageTable, stream_solve

        res = stream_solve(PageTable(os.path.join(inputs, "table")), bandwidth, objective="harmonic",
                           chunk_size=1500, out_path=os.path.join(out, "stream_rate.npy"))
        save(task, rate=np.asarray(res.rate), start=res.start, dual=res.dual, converged=res.converged)
    elif task == "far":
        rows = distributed.read_local_rows(os.path.join(inputs, "table"))
        sol = distributed.solve_local_rows(rows.importance, rows.change_rate, rows.complete, bandwidth * 1e-30,
                                           "binary")
        save(task, rate=sol.rate, start=sol.start, dual=sol.dual, converged=sol.converged)
    elif task == "far_capped":
        rows = distributed.read_local_rows(os.path.join(inputs, "table"))
        host = ((rows.start + np.arange(np.shape(rows.importance)[0])) // HOST_SIZE).astype(np.int32)
        sol = distributed.solve_local_rows(rows.importance, rows.change_rate, rows.complete, bandwidth * 1e-30,
                                           "binary", host_id=host, host_cap=np.load(os.path.join(inputs, "far_caps.npy")))
        save(task, rate=sol.rate, start=sol.start, dual=sol.dual, converged=sol.converged)
    elif task == "far_stream":
        from jaxcrawl.scale import PageTable, stream_solve

        res = stream_solve(PageTable(os.path.join(inputs, "table")), bandwidth * 1e-30, objective="binary",
                           chunk_size=1500, out_path=os.path.join(out, "far_stream_rate.npy"))
        save(task, rate=np.asarray(res.rate), start=res.start, dual=res.dual, converged=res.converged)
    elif task == "mismatch":
        try:
            distributed.check_consistent(bandwidth=bandwidth + (pid == 1), table="same")
        except ValueError as err:
            save(task, message=str(err))
        else:
            raise SystemExit("a bandwidth mismatch was not refused")
    elif task == "simulate":
        import jaxcrawl
        from jaxcrawl import simulate as sim

        n = 4000
        p = jaxcrawl.synthetic(jax.random.key(0), n, dtype=jnp.float64)
        sched = sim.schedule_from_policy(p, jaxcrawl.lambda_crawl(p))
        config = sim.config_for(p, sched)  # capacities from the whole problem: the same on every process
        s, e = distributed.row_range(n)
        rows = jax.tree_util.tree_map(lambda a: np.asarray(a)[..., s:e] if np.ndim(a) else np.asarray(a),
                                      (p, sched, sim.init_state(p)))
        problem, schedule, state = distributed.global_tree(rows)
        totals = jax.jit(lambda k, pr, sc, st: sim.simulate(k, pr, sc, st, config, 5)[1])(
            jax.random.key(3), problem, schedule, state)
        assert totals.stale_time.sharding.spec[-1] == "pages"
        save(task, start=s, **{f: distributed.local_rows(getattr(totals, f)) for f in totals._fields})
    elif task == "learner":
        import jaxcrawl
        import jaxcrawl.learners.learn_and_crawl as lc
        from jaxcrawl.learners.base import run_learner

        n = 2000
        p = jaxcrawl.synthetic(jax.random.key(0), n, dtype=jnp.float64)
        learner = lc.lambda_learn_and_crawl("harmonic", **lc.llc_settings(p, "harmonic"))
        s, e = distributed.row_range(n)
        problem = distributed.global_tree(
            jax.tree_util.tree_map(lambda a: np.asarray(a)[..., s:e] if np.ndim(a) else np.asarray(a), p))
        _, info = jax.jit(lambda k, pr: run_learner(k, learner, pr, 4))(jax.random.key(3), problem)
        save(task, start=s, **{f: distributed.local_rows(getattr(info, f)) for f in info._fields})
    elif task in ("sweep", "sweep_grid"):
        from jaxcrawl.learners.mirror_sync import SyncHyperparams, async_mirror_sync
        from jaxcrawl.learners.sweep import run_sweep
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
