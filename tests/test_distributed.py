"""Real multi-process jobs on 127.0.0.1 (jax.distributed, CPU collectives over gloo).

Each test starts 2 or 3 separate Python processes (tests/scripts/distributed_worker.py)
through :func:`jaxcrawl.cli.launch`; every process reads only its own rows of the
inputs (:class:`jaxcrawl.parallel.ProcessRows`, :class:`jaxcrawl.parallel.StreamedTable`),
and the plan they produce together through :func:`jaxcrawl.solve` must equal the
single-process solve computed here (float64: <= 1e-12 relative in rates and dual), host caps
and revisit bounds included.  3 processes catch even-split
assumptions (10_007 pages split 3335/3336/3336, CSV split by bytes, Parquet by row groups).
"""
import io
import json
import os
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

import jaxcrawl
from jaxcrawl import parallel
from jaxcrawl._src.partition import fingerprint
from jaxcrawl.cli import _launch as launcher
from jaxcrawl.io import read_local_rows, read_problem, write_page_table, write_problem

import helpers
from helpers import host_capped

WORKER = os.path.join(os.path.dirname(__file__), "scripts", "distributed_worker.py")
N = 10_007
HOST_SIZE = 700
TIMEOUT = 240  # seconds for one job (a hang fails the test instead of the suite)


_env = helpers.subprocess_env


def run_job(num_processes, inputs, out, *tasks, x64=True, expect=0):
    os.makedirs(out, exist_ok=True)
    log = io.StringIO()
    cmd = [sys.executable, WORKER, str(inputs), str(out), *tasks] + (["--x64"] if x64 else [])
    status = launcher.launch(cmd, num_processes, env=_env(), timeout=TIMEOUT, stream=log)
    assert status == expect, log.getvalue()[-4000:]
    return log.getvalue()


def gather(out, task, num_processes):
    parts = [dict(np.load(os.path.join(out, f"{task}.p{i}.npz"))) for i in range(num_processes)]
    assert [int(p["start"]) for p in parts] == sorted(int(p["start"]) for p in parts)
    assert all(bool(p["converged"]) for p in parts)
    duals = {float(p["dual"]) for p in parts}
    assert len(duals) == 1, duals  # every process has the same dual
    return np.concatenate([p["rate"] for p in parts]), duals.pop(), parts


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b) / np.maximum(np.abs(b), 1e-300)))


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """One float64 problem in three formats, revisit bounds that bind, and the references."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    d = tmp_path_factory.mktemp("inputs")
    with jax.enable_x64(True):
        p = jaxcrawl.synthetic(jax.random.key(5), N, dtype=np.float64)
        imp, lam = (np.asarray(a) for a in (p.importance, p.change_rate))
        comp = np.asarray(p.complete).astype(bool)
    bandwidth = 0.2 * N
    np.save(d / "bandwidth.npy", bandwidth)
    write_page_table(str(d / "table"), imp, lam, comp)
    pq.write_table(pa.table({"page_id": np.arange(N), "importance": imp, "change_rate": lam, "complete": comp}),
                   str(d / "table.parquet"), row_group_size=1000)
    write_problem(str(d / "table.csv"), np.arange(N), imp, lam, comp)
    # revisit bounds active both ways: a floor above the free optimum on some incomplete pages
    # of uncapped hosts (every third host is capped), a ceiling below it on others
    with jax.enable_x64(True):
        free = np.asarray(jaxcrawl.lambda_crawl(jaxcrawl.CrawlProblem(imp, lam, bandwidth, comp)).rate)
    rng = np.random.default_rng(0)
    pick = rng.random(N)
    floor = (pick < 0.1) & ~comp & ((np.arange(N) // HOST_SIZE) % 3 != 0)
    ceiling = pick > 0.9
    np.save(d / "lower.npy", np.where(floor, 1.5 * free, 0.0))
    np.save(d / "upper.npy", np.where(ceiling, 0.5 * free, np.inf))
    return d, (imp, lam, comp, bandwidth)


def _reference(inputs, task):
    d, (imp, lam, comp, bandwidth) = inputs
    bounds = (np.load(d / "lower.npy"), np.load(d / "upper.npy"))
    with jax.enable_x64(True):
        if task == "harmonic" or task == "stream":
            pol = jaxcrawl.lambda_crawl(jaxcrawl.CrawlProblem(imp, lam, bandwidth, comp))
        elif task == "stream_bounded":
            pol = jaxcrawl.lambda_crawl(jaxcrawl.CrawlProblem(imp, lam, bandwidth, comp), bounds=bounds)
            rate = np.asarray(pol.rate)
            assert np.sum(rate <= bounds[0]) >= 100 and np.sum(rate >= bounds[1]) >= 100  # both bind
        elif task == "blc":
            pol = jaxcrawl.binary_lambda_crawl(jaxcrawl.CrawlProblem(imp, lam, bandwidth, comp), 0.4)
        else:  # capped (bounded: and the bounds): the CSV's (10-digit) values, hosts of HOST_SIZE pages
            t = read_problem(str(d / "table.csv"))
            problem = jaxcrawl.CrawlProblem(t.importance, t.change_rate, bandwidth, t.complete)
            host = (np.asarray(t.page_id).astype(np.int64) // HOST_SIZE).astype(np.int32)
            free = np.asarray(jaxcrawl.lambda_crawl(problem).rate)
            totals = np.bincount(host, weights=free)
            caps = np.where(np.arange(totals.size) % 3 == 0, 0.6 * totals, np.inf)  # every third host binds
            np.save(d / "caps.npy", caps)
            sol = host_capped(problem, host, caps, "harmonic", bounds=bounds if task == "bounded" else None)
            assert np.asarray(sol.binding).sum() >= 4
            pol = sol.policy
        return np.asarray(pol.rate), float(pol.dual)


def _check(inputs, out, task, num_processes):
    rate, dual, parts = gather(out, task, num_processes)
    ref_rate, ref_dual = _reference(inputs, task)
    assert rate.shape == ref_rate.shape
    assert rel(rate, ref_rate) <= 1e-12, (task, rel(rate, ref_rate))
    assert abs(dual - ref_dual) <= 1e-12 * abs(ref_dual), (task, dual, ref_dual)
    sizes = [p["rate"].shape[0] for p in parts]
    assert min(sizes) > 0 and sum(sizes) == N
    return parts


@pytest.mark.long
def test_two_process_solve_equals_single_process(inputs, tmp_path):
    """The quick check (default selection): 2 processes, each reading its half of a .npy
    page table, solve LambdaCrawl together; their rows and the shared dual equal the
    single-process solve."""
    run_job(2, inputs[0], tmp_path, "harmonic")
    parts = _check(inputs, tmp_path, "harmonic", 2)
    assert [int(p["start"]) for p in parts] == [0, N // 2]


@pytest.mark.long
@pytest.mark.parametrize("num_processes", [2, 3])
def test_solves_equal_single_process(inputs, tmp_path, num_processes):
    """LambdaCrawl (.npy rows), BinaryLambdaCrawl(eps=0.4) (Parquet row groups), a
    host-capped solve whose hosts straddle processes (CSV byte ranges), with and without
    revisit bounds, and a StreamedTable with and without the bounds each equal the
    single-process result to 1e-12; a mismatched bandwidth is refused."""
    d = inputs[0]
    _reference(inputs, "capped")
    run_job(num_processes, d, tmp_path, "harmonic", "blc", "capped", "bounded", "stream", "stream_bounded",
            "mismatch")
    for task in ("harmonic", "blc", "stream", "stream_bounded", "bounded"):
        _check(inputs, tmp_path, task, num_processes)
    parts = _check(inputs, tmp_path, "capped", num_processes)
    # hosts straddle the processes: some host has pages on two processes
    hosts = [set((p["page_id"] // HOST_SIZE).tolist()) for p in parts]
    assert any(hosts[i] & hosts[i + 1] for i in range(num_processes - 1))
    # the streamed solves: every process wrote its rows into one plan file
    for task in ("stream", "stream_bounded"):
        ref_rate, _ = _reference(inputs, task)
        assert rel(np.load(tmp_path / f"{task}_rate.npy"), ref_rate) <= 1e-12, task
    for i in range(num_processes):
        msg = str(np.load(tmp_path / f"mismatch.p{i}.npz")["message"])
        assert "bandwidth (processes [1] differ from process 0)" in msg, msg


@pytest.mark.long
def test_far_below_the_change_rates_across_processes(inputs, tmp_path):
    """BinaryLambdaCrawl at 1e-30 of the bandwidth (the dual within ~1e-33 of the largest
    marginal at zero: the log-gap re-solve), from 2 processes' rows (the second padded) and
    streamed by both: converged, the same dual everywhere, and the single-process plan; and
    the same solve under host caps that bind there (the per-segment log-gap solve on the
    sharded arrays) equals the in-memory capped solve."""
    d, (imp, lam, comp, bandwidth) = inputs
    R = bandwidth * 1e-30
    host = (np.arange(N) // HOST_SIZE).astype(np.int32)
    caps = np.full(host.max() + 1, np.inf)
    order = np.argsort(-(imp / lam))  # binary freshness: the marginal at zero is importance / change rate
    caps[host[order[0]]] = 0.3 * R
    caps[host[order[np.argmax(host[order] != host[order[0]])]]] = 0.2 * R
    np.save(d / "far_caps.npy", caps)
    run_job(2, d, tmp_path, "far", "far_stream", "far_capped")
    with jax.enable_x64(True):
        capped = host_capped(jaxcrawl.CrawlProblem(imp, lam, R, comp), host, caps, "binary")
    assert bool(capped.policy.converged) and int(np.asarray(capped.binding).sum()) == 2
    rate, _, _ = gather(tmp_path, "far_capped", 2)
    assert abs(rate.sum() / R - 1) <= 1e-12
    assert np.max(np.abs(rate - np.asarray(capped.policy.rate))) <= 1e-9 * R
    with jax.enable_x64(True):
        ref = jaxcrawl.solve(jaxcrawl.CrawlProblem(imp, lam, bandwidth * 1e-30, comp), "binary")
    assert bool(ref.converged)
    for task in ("far", "far_stream"):
        rate, dual, _ = gather(tmp_path, task, 2)
        assert abs(rate.sum() / R - 1) <= 1e-12, (task, rate.sum() / R)
        assert np.max(np.abs(rate - np.asarray(ref.rate))) <= 1e-9 * R, task
        assert abs(dual / float(ref.dual) - 1) <= 1e-12, (task, dual, float(ref.dual))
    assert np.max(np.abs(np.load(tmp_path / "far_stream_rate.npy") - np.asarray(ref.rate))) <= 1e-9 * R


@pytest.mark.long
def test_simulator_and_learner_sharded_over_processes_equal_single_process(tmp_path):
    """The simulator (5 windows, LambdaCrawl's schedule) with its pages sharded over 2
    processes gives every per-page total of the single-process run, exactly (the random
    draws do not depend on the sharding: partitionable threefry); LambdaLearnAndCrawl
    (K19 Alg. 4: simulate, estimate, solve per epoch) sharded the same way gives the same
    per-epoch crawl counts, duals and (to rounding) costs."""
    import jaxcrawl.learners as lc
    from jaxcrawl import simulate as sim
    from jaxcrawl.learners import run_learner

    run_job(2, os.path.dirname(WORKER), tmp_path, "simulate", "learner")
    with jax.enable_x64(True):
        p = jaxcrawl.synthetic(jax.random.key(0), 2000, dtype=np.float64)
        learner = lc.lambda_learn_and_crawl("harmonic", **lc.llc_settings(p, "harmonic"))
        _, info = jax.jit(lambda k, pr: run_learner(k, learner, pr, 4))(jax.random.key(3), p)
    got = [np.load(tmp_path / f"learner.p{i}.npz") for i in range(2)]
    for f in info._fields:
        ref = np.asarray(getattr(info, f))
        for g in got:  # per-epoch diagnostics: the same on every process
            if np.issubdtype(ref.dtype, np.floating):
                np.testing.assert_allclose(g[f], ref, rtol=1e-12, atol=1e-12 * np.max(np.abs(ref)))
            else:
                np.testing.assert_array_equal(g[f], ref)
    assert np.asarray(info.num_crawls).sum() > 0
    parts = [np.load(tmp_path / f"simulate.p{i}.npz") for i in range(2)]
    with jax.enable_x64(True):
        p = jaxcrawl.synthetic(jax.random.key(0), 4000, dtype=np.float64)
        sched = sim.schedule_from_policy(p, jaxcrawl.lambda_crawl(p))
        ref = jax.jit(lambda k, pr, sc, st: sim.simulate(k, pr, sc, st, sim.config_for(p, sched), 5)[1])(
            jax.random.key(3), p, sched, sim.init_state(p))
    assert [int(q["start"]) for q in parts] == [0, 2000]
    for f in ref._fields:
        np.testing.assert_array_equal(np.concatenate([q[f] for q in parts], axis=-1), np.asarray(getattr(ref, f)))
    assert np.asarray(ref.changes).sum() > 0 and np.asarray(ref.overflow).sum() == 0


def _sweep_reference(num_seeds=8, chunk_size=1):
    import jax.numpy as jnp

    from jaxcrawl.learners import SyncHyperparams, async_mirror_sync, run_sweep
    from jaxcrawl.sync_bandits import polynomial_bandit

    with jax.enable_x64(False):  # the workers' dtype (float32) in the x64 lane too
        bandits = jax.vmap(lambda k: polynomial_bandit(k, 20))(jax.random.split(jax.random.key(1), 2))
        lr = jnp.asarray([0.05, 0.1, 0.2, 0.4, 0.8, 1.6])
        grid = SyncHyperparams(lr, jnp.full(6, 0.1), jnp.full(6, 2.0))
        res = run_sweep(jax.random.key(7), async_mirror_sync(), bandits, grid, num_seeds=num_seeds, num_steps=30,
                        chunk_size=chunk_size)
        return [np.asarray(v) for v in jax.tree_util.tree_leaves(res.outputs)]


def _check_sweep(out, num_processes, reference, task="sweep"):
    for i in range(num_processes):
        got = np.load(os.path.join(out, f"{task}.p{i}.npz"))
        assert len(reference) == len([k for k in got.files if k.startswith("leaf")])
        for j, ref in enumerate(reference):
            np.testing.assert_array_equal(got[f"leaf{j}"], np.asarray(ref))  # exactly
    return [np.load(os.path.join(out, f"{task}.p{i}.npz"))["computed"] for i in range(num_processes)]


@pytest.mark.long
def test_sweep_over_two_processes_equals_single_process(tmp_path):
    """8 seeds split over 2 processes (4 each, per-process checkpoint chunks): every
    process returns the whole sweep, exactly equal to the single-process sweep.  With 1
    seed the grid chunks are split instead (chunk 0 on process 0, chunk 1 on process 1)."""
    run_job(2, os.path.join(os.path.dirname(WORKER)), tmp_path, "sweep", "sweep_grid", x64=False)
    computed = _check_sweep(tmp_path, 2, _sweep_reference())
    assert all(list(c) == list(range(6)) for c in computed)
    computed = _check_sweep(tmp_path, 2, _sweep_reference(num_seeds=1, chunk_size=4), "sweep_grid")
    assert [list(c) for c in computed] == [[0], [1]]
    names = sorted(os.listdir(tmp_path / "sweep"))
    assert "manifest.p0of2.json" in names and "chunk_00005.p1of2.npz" in names


def _finished(path):
    try:
        with open(path) as f:
            return len(json.load(f)["finished"])
    except (OSError, ValueError):
        return 0


@pytest.mark.long
def test_killed_process_stops_the_job_and_rerun_resumes(tmp_path):
    """Killing one process mid-sweep makes the other exit non-zero within 60 s (the
    coordination service's heartbeat timeout); rerunning the same command resumes from
    the finished checkpoint chunks and completes with the single-process result."""
    env = _env()
    port = launcher.free_port()
    script_dir = os.path.dirname(WORKER)
    procs = []
    try:
        for i in range(2):
            e = dict(env, JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{port}", JAX_NUM_PROCESSES="2", JAX_PROCESS_ID=str(i))
            procs.append(subprocess.Popen([sys.executable, WORKER, script_dir, str(tmp_path), "sweep",
                                           "--chunk-delay", "1.5"], env=e, stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, text=True))
        manifest = tmp_path / "sweep" / "manifest.p1of2.json"
        deadline = time.monotonic() + TIMEOUT
        while _finished(manifest) < 2:
            assert time.monotonic() < deadline, "the sweep did not start"
            assert procs[1].poll() is None, procs[1].stdout.read()
            time.sleep(0.2)
        procs[1].send_signal(signal.SIGKILL)
        procs[1].wait(10)
        t0 = time.monotonic()
        try:
            status = procs[0].wait(90)
        except subprocess.TimeoutExpired:
            pytest.fail("the surviving process did not stop within 90 s of its peer's death")
        elapsed = time.monotonic() - t0
        output = procs[0].stdout.read()
        assert status != 0, output
        assert elapsed <= 60, elapsed
        assert "another task died" in output or "unhealthy" in output, output[-2000:]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    finished = [_finished(tmp_path / "sweep" / f"manifest.p{i}of2.json") for i in range(2)]
    assert 2 <= finished[1] < 6
    run_job(2, script_dir, tmp_path, "sweep", x64=False)
    computed = _check_sweep(tmp_path, 2, _sweep_reference())
    for i in range(2):  # only the chunks missing from each process's checkpoints were computed
        assert len(computed[i]) == 6 - finished[i]


# ------------------------------------------------------ single-process building blocks
def test_row_range_partitions_rows():
    """Process ranges tile [0, n) in order, sizes differ by at most one (n < P: empty ones)."""
    for n in (0, 1, 2, 5, 10_007):
        for num in (1, 2, 3, 7):
            ranges = [parallel.row_range(n, num, i) for i in range(num)]
            assert ranges[0][0] == 0 and ranges[-1][1] == n
            assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
            sizes = [e - s for s, e in ranges]
            assert max(sizes) - min(sizes) <= 1
    with pytest.raises(ValueError, match="process_id must be in"):
        parallel.row_range(10, 2, 2)


@pytest.mark.parametrize("fmt", ["table", "table.parquet", "table.csv"])
@pytest.mark.parametrize("num", [2, 3, 7])
def test_local_readers_partition_the_table(inputs, fmt, num):
    """Every row is read by exactly one process, in order, for .npy tables (row ranges),
    Parquet (row groups) and CSV (byte ranges aligned to line starts)."""
    d, (imp, lam, comp, _) = inputs
    parts = [read_local_rows(str(d / fmt), i, num) for i in range(num)]
    got_imp = np.concatenate([p.importance for p in parts])
    ids = np.concatenate([np.asarray(p.page_id).astype(np.int64) for p in parts])
    np.testing.assert_array_equal(ids, np.arange(N))
    np.testing.assert_allclose(got_imp, imp, rtol=1e-9 if fmt.endswith(".csv") else 0)
    np.testing.assert_array_equal(np.concatenate([p.complete for p in parts]), comp)
    assert len({p.fingerprint for p in parts}) == 1
    starts = [p.start for p in parts]
    if fmt != "table.csv":
        assert starts == list(np.cumsum([0] + [len(p.importance) for p in parts[:-1]]))


def test_csv_part_errors_name_the_file_and_line(tmp_path):
    """A malformed row in another process's byte range is reported with the real file
    and line number (not the part's)."""
    path = tmp_path / "bad.csv"
    write_problem(str(path), np.arange(100), np.ones(100), np.ones(100))
    lines = path.read_text().splitlines()
    lines[80] = "79,-1,1,0"  # line 81 of the file, in process 1's half
    path.write_text("\n".join(lines) + "\n")
    assert len(read_local_rows(str(path), 0, 2).importance) == 51
    with pytest.raises(ValueError, match=r"bad\.csv:81: importance must be finite and > 0"):
        read_local_rows(str(path), 1, 2)


def test_host_collectives_with_one_process():
    x = np.array([1.5, -2.0, np.inf])
    np.testing.assert_array_equal(parallel.allgather_host(x), x[None])
    np.testing.assert_array_equal(parallel.allreduce_sum(x), x)
    parallel.check_consistent(bandwidth=1.0)  # one process: nothing to compare
    with pytest.raises(ValueError, match="bad rows"):
        parallel.raise_together("bad rows")
    assert fingerprint({"a": np.arange(3)}) != fingerprint({"a": np.arange(4)})


def test_launch_stops_the_job_when_one_process_fails():
    """A failing process's status is returned and its peers are stopped (no JAX needed)."""
    code = ("import os, sys, time; i = int(os.environ['JAX_PROCESS_ID']); "
            "print('up', os.environ['JAX_NUM_PROCESSES'], flush=True); time.sleep(0.2 if i == 1 else 60); "
            "sys.exit(5 if i == 1 else 0)")
    log = io.StringIO()
    status = launcher.launch([sys.executable, "-c", code], 3, stream=log, timeout=50, stop_grace_seconds=2)
    assert status == 5  # not 124: the sleeping peers were stopped, not waited for
    lines = sorted(log.getvalue().splitlines())
    assert lines == ["[0] up 3", "[1] up 3", "[2] up 3"]
    ok = launcher.launch([sys.executable, "-c", "pass"], 2, stream=log, timeout=50)
    assert ok == 0


@pytest.mark.long
def test_cli_launch_solve_stream_sweep(inputs, tmp_path, capsys):
    """``jaxcrawl launch -n 3 -- solve`` (CSV byte ranges, host caps, --gather-output),
    ``launch -n 2 -- stream`` and ``launch -n 2 -- sweep`` give the single-process
    commands' results (the plan CSV's 10 digits; the stream's .npy; the sweep's JSON)."""
    from jaxcrawl.cli import main

    d = inputs[0]
    _reference(inputs, "capped")
    caps = np.load(d / "caps.npy")
    with open(tmp_path / "hosts.csv", "w") as f:
        f.write("page_id,host_id\n" + "".join(f"{i},h{i // HOST_SIZE}\n" for i in range(N)))
    with open(tmp_path / "caps.csv", "w") as f:
        f.write("# pages: hosts.csv\nhost_id,cap\n" + "".join(f"h{h},{float(c)!r}\n" for h, c in enumerate(caps)
                                                              if np.isfinite(c)))
    common = ["--input", str(d / "table.csv"), "--host-caps", str(tmp_path / "caps.csv"), "--x64"]
    assert main(["solve", *common, "--output", str(tmp_path / "ref.csv")]) == 0

    def launch(n, *args):
        cmd = [sys.executable, "-m", "jaxcrawl.cli", "launch", "-n", str(n), "--timeout", str(TIMEOUT), "--", *args]
        proc = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=TIMEOUT + 30)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        return proc.stdout

    launch(3, "solve", *common, "--output", str(tmp_path / "plan.csv"), "--gather-output")
    ref = np.genfromtxt(tmp_path / "ref.csv", delimiter=",", names=True)
    got = np.genfromtxt(tmp_path / "plan.csv", delimiter=",", names=True)
    np.testing.assert_array_equal(got["page_id"], ref["page_id"])
    np.testing.assert_allclose(got["rate"], ref["rate"], rtol=2e-9)
    assert not list(tmp_path.glob("plan.part*"))  # the parts were joined and removed

    out = launch(2, "stream", "--table", str(d / "table"), "--x64", "--chunk-size", "3000",
                 "--output", str(tmp_path / "rate.npy"))
    ref_rate, ref_dual = _reference(inputs, "stream")
    assert rel(np.load(tmp_path / "rate.npy"), ref_rate) <= 1e-12
    duals = [json.loads(ln.split("] ", 1)[1])["dual"] for ln in out.splitlines() if ln[3:5] == " {"]
    assert len(duals) == 2 and all(abs(x - ref_dual) <= 1e-12 * ref_dual for x in duals)

    sweep = ["sweep", "--seeds", "4", "--steps", "12", "--learning-rates", "0.1,0.4,1.6"]
    capsys.readouterr()
    with jax.enable_x64(False):  # the launched processes' dtype (float32) in the x64 lane too
        assert main([*sweep, "--out-dir", str(tmp_path / "one")]) == 0
    one = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    out = launch(2, *sweep, "--out-dir", str(tmp_path / "two"))
    two = [json.loads(ln.split("] ", 1)[1]) for ln in out.splitlines() if ln[3:5] == " {"]
    assert len(two) == 2
    for t in two:
        # the same sweep, split over 2 processes: equal to float32 rounding (a chunk computed by
        # another process has differed from the single-process run by ~1e-7 relative)
        np.testing.assert_allclose(t["final_cost_mean"], one["final_cost_mean"], rtol=1e-6)
        assert t["num_processes"] == 2


@pytest.mark.long
def test_multiprocess_solve_failing_the_guard_writes_nothing(tmp_path):
    """A multi-process solve that fails the final guard (here: one root-finding step, so
    ``converged`` is False in every process) exits non-zero in every process with the
    guard's message, writes no part file and leaves an existing plan byte-identical."""
    plan = tmp_path / "plan.csv"
    plan.write_text("page_id,rate,prob\n0,1.0,1.0\n")
    before = plan.read_bytes()
    cmd = [sys.executable, "-m", "jaxcrawl.cli", "launch", "-n", "2", "--timeout", str(TIMEOUT), "--",
           "solve", "--num-pages", "2000", "--max-steps", "1", "--output", str(plan), "--gather-output"]
    proc = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=TIMEOUT + 30)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 3, out[-3000:]
    for pid in (0, 1):
        assert f"the solve (process {pid}) did not converge" in out, out[-3000:]
    summaries = [json.loads(ln.split("] ", 1)[1]) for ln in proc.stdout.splitlines() if ln[3:5] == " {"]
    assert len(summaries) == 2 and not any(s["converged"] for s in summaries)
    assert all("error" in s and "output" not in s for s in summaries)
    assert plan.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.csv"]  # no part, no temporary file


def test_cli_requests_a_job_from_flags_or_cluster_environment(monkeypatch):
    """srun / mpirun launches need no flag; one process never joins a job."""
    import argparse

    from jaxcrawl.cli import _options as multiprocess

    for var in ("JAX_NUM_PROCESSES", "SLURM_STEP_NUM_TASKS", "OMPI_COMM_WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)
    ns = argparse.Namespace(num_processes=None, distributed=False)
    assert not multiprocess.requested(ns)
    assert multiprocess.requested(argparse.Namespace(num_processes=None, distributed=True))
    assert multiprocess.requested(argparse.Namespace(num_processes=2, distributed=False))
    assert not multiprocess.requested(argparse.Namespace(num_processes=1, distributed=False))
    for var in ("JAX_NUM_PROCESSES", "SLURM_STEP_NUM_TASKS", "OMPI_COMM_WORLD_SIZE"):
        monkeypatch.setenv(var, "4")
        assert multiprocess.requested(ns)
        monkeypatch.setenv(var, "1")
        assert not multiprocess.requested(ns)
    assert multiprocess.part_path("out/plan.csv", 1, 3) == "out/plan.part00001-of-00003.csv"


def test_multiprocess_solve_refuses_options_it_does_not_implement():
    """The multi-process `jaxcrawl solve` path does not take crawl delays, real time or
    crawler outputs: it refuses them by name instead of ignoring them."""
    from jaxcrawl.cli import build_parser
    from jaxcrawl.cli._solve import run_solve

    base = ["solve", "--num-processes", "2", "--process-id", "0", "--coordinator", "127.0.0.1:1"]
    for extra, flag in ((["--hosts", "hosts.csv"], "--hosts"), (["--time-unit", "hours"], "--time-unit"),
                        (["--nutch", "seeds.txt"], "--nutch")):
        args = build_parser().parse_args(base + extra)
        with pytest.raises(ValueError, match=flag):
            run_solve(args)


def _launch_cli(n, *args, env=None):
    cmd = [sys.executable, "-m", "jaxcrawl.cli", "launch", "-n", str(n), "--timeout", str(TIMEOUT), "--", *args]
    return subprocess.run(cmd, env=env or _env(), capture_output=True, text=True, timeout=TIMEOUT + 30)


@pytest.mark.long
def test_multiprocess_solve_checks_ids_across_processes_and_applies_interval_columns(tmp_path):
    """A page id repeated in two processes' rows is an error on every process (status 2), and
    the table's min_interval/max_interval columns bound the multi-process plan as they bound
    the single-process one."""
    n = 60
    rng = np.random.default_rng(1)
    imp, lam = rng.uniform(0.5, 2, n), rng.uniform(0.1, 3, n)
    ids = np.asarray([f"p{i}" for i in range(n)], object)
    ids[-1] = ids[0]  # the first and the last row: different processes
    write_problem(str(tmp_path / "dup.csv"), ids, imp, lam)
    proc = _launch_cli(2, "solve", "--input", str(tmp_path / "dup.csv"), "--bandwidth", "10")
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "duplicate page_id 'p0': rows 1 and 60" in proc.stdout + proc.stderr
    lo_iv = np.where(np.arange(n) % 3 == 0, 4.0, 0.0)
    write_problem(str(tmp_path / "t.csv"), np.arange(n), imp, lam, min_interval=lo_iv)
    args = ["solve", "--input", str(tmp_path / "t.csv"), "--bandwidth", "30", "--x64"]
    proc = _launch_cli(2, *args, "--output", str(tmp_path / "plan.csv"), "--gather-output")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert jaxcrawl.cli.main([*args, "--output", str(tmp_path / "ref.csv")]) == 0
    got = np.genfromtxt(tmp_path / "plan.csv", delimiter=",", names=True)
    ref = np.genfromtxt(tmp_path / "ref.csv", delimiter=",", names=True)
    assert np.all(got["rate"][lo_iv > 0] <= 0.25 * (1 + 1e-9))
    np.testing.assert_allclose(got["rate"], ref["rate"], rtol=1e-7)


@pytest.mark.long
def test_sigterm_to_one_worker_stops_it_with_143(tmp_path):
    """SIGTERM to one process of a job is not swallowed (JAX's preemption notifier is off):
    that process ends with 143, and the job with it."""
    env = dict(_env(), JAXCRAWL_SIGNAL_GRACE="2")
    cmd = [sys.executable, "-m", "jaxcrawl.cli", "launch", "-n", "2", "--timeout", str(TIMEOUT), "--", "sweep",
           "--steps", "20000", "--seeds", "16", "--instances", "4",  # within the size check; minutes of work
           "--learning-rates", ",".join(f"{0.05 + 0.01 * i:.2f}" for i in range(16))]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        children = []
        deadline = time.time() + 120
        while len(children) < 2 and time.time() < deadline:
            time.sleep(0.5)
            with open(f"/proc/{proc.pid}/task/{proc.pid}/children") as fh:
                children = [int(x) for x in fh.read().split()]
        assert len(children) == 2
        time.sleep(15)  # joined the job and inside the sweep
        os.kill(children[1], signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 143, out[-3000:]


_FAIL_ONE_PART = """
import sys

import jax

from jaxcrawl import cli
from jaxcrawl.cli import _solve

real = _solve.write_plan


def write_plan(path, *args, **kwargs):  # process 1 fails alone, after the job started
    if jax.process_index() == 1:
        raise OSError(28, "No space left on device (process 1's part)")
    return real(path, *args, **kwargs)


_solve.write_plan = write_plan
sys.argv = ["jaxcrawl", *sys.argv[1:]]
sys.exit(cli.main())
"""


@pytest.mark.long
@pytest.mark.parametrize("separately", [False, True])
def test_a_process_failing_alone_ends_the_job_and_leaves_no_part(tmp_path, separately):
    """One process fails after the start (its part cannot be written) while the other waits for
    it in a collective: the failing process ends at once (not in jax.distributed's shutdown
    barrier), the other ends with an error naming the cause, and no part is left -- through
    ``launch`` and with the processes started one by one (no launcher to stop the other)."""
    script = tmp_path / "fail_one_part.py"
    script.write_text(_FAIL_ONE_PART)
    (tmp_path / "pages.csv").write_text("page_id,importance,change_rate\n"
                                        + "".join(f"p{i},1,{1 + i % 5}\n" for i in range(400)))
    args = ["solve", "--input", str(tmp_path / "pages.csv"), "--bandwidth", "100",
            "--output", str(tmp_path / "plan.jsonl"), "--gather-output"]
    limit = 150  # without the fix, the job waits out this limit
    if not separately:
        log = io.StringIO()
        status = launcher.launch([sys.executable, str(script), *args], 2, env=_env(), timeout=limit, stream=log)
        out = log.getvalue()
        assert status == 2, out[-3000:]
    else:
        port = launcher.free_port()
        procs = []
        for i in range(2):
            env = dict(_env(), JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{port}", JAX_NUM_PROCESSES="2",
                       JAX_PROCESS_ID=str(i))
            procs.append(subprocess.Popen([sys.executable, str(script), *args], env=env, stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, text=True))
        try:
            outs = [p.communicate(timeout=limit)[0] for p in procs]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        out = "\n".join(outs)
        assert [p.returncode for p in procs] == [2, 2], out[-3000:]
        assert "process 0: another process of the job ended during the barrier 'jaxcrawl.solve.parts'" in outs[0]
    assert "No space left on device (process 1's part)" in out
    assert "Traceback" not in out, out[-3000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fail_one_part.py", "pages.csv"]  # no part, no plan
