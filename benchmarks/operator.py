"""The operator's path at crawl-database scale: ``jaxcrawl solve``, ``schedule`` and ``evaluate``
on one generated table, each against a baseline measured in the same run.

    python benchmarks/operator.py [--small] [--num-pages N] [--dir DIR] [--skip schedule,evaluate] [--timeout S]

1. One page table is generated (not timed): ``--num-pages`` pages (default 1,000,000;
   ``--small``: 100,000) with URL page ids over a skewed set of hosts, importance,
   change rates, 4 % complete (signalling) pages and revisit bounds (``min_interval``,
   ``max_interval`` columns), written as Parquet; beside it a host caps file (a cap on a
   fifth of the hosts, some of them binding) and a crawl-delays file (a delay on another
   fifth).
2. ``jaxcrawl solve`` reads it with ``--host-caps``, ``--crawl-delays`` and
   ``--max-interval 60d`` and writes the plan (Parquet), the JSON report, a URLFrontier
   file and a Nutch seed list, in a fresh process with a warm compile cache (one untimed
   run fills the cache).  Its report's itemised stages are printed.  Baselines:
   pyarrow alone reading the table and writing a plan-shaped Parquet file, and the
   library's in-memory :func:`jaxcrawl.solve` of the same problem (compiled, timed after).
3. ``jaxcrawl schedule --plan … --horizon 1d`` with the crawl delays (fresh process),
   against the solve's own wall time.
4. ``jaxcrawl evaluate`` of the first 50,000 pages with ``--policy nutch-adaptive@matched`` (a
   crawler's rule matched to the bandwidth), against the solve's wall time.

Prints one table (seconds and the ratio to its baseline; the solve's peak resident memory,
the limit at 18.5M pages) and, last, one JSON object.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

DAY = 86400.0


def make_table(n: int, directory: str, seed: int = 0) -> dict[str, str]:
    """Write the page table (Parquet), the host caps and the crawl delays under ``directory``;
    returns their paths (``pages``, ``caps``, ``delays``)."""
    import pyarrow as pa
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    num_hosts = max(n // 50, 4)
    # a skewed host size: a few hosts with many pages, a long tail with few
    weight = 1.0 / np.arange(1, num_hosts + 1) ** 0.9
    host = rng.choice(num_hosts, size=n, p=weight / weight.sum())
    host[:num_hosts] = np.arange(num_hosts)  # every host has a page
    names = np.char.add(np.char.add("www.site", np.char.zfill(np.arange(num_hosts).astype(str), 6)), ".example")
    urls = np.char.add(np.char.add(np.char.add("https://", names[host]), "/p"), np.arange(n).astype(str))
    imp = rng.lognormal(0.0, 1.0, n)
    lam = rng.lognormal(np.log(0.3), 1.0, n)
    complete = rng.random(n) < 0.04
    min_iv = np.where(rng.random(n) < 0.1, 1.0 / 24, 0.0)  # a tenth: at most hourly
    max_iv = np.where(rng.random(n) < 0.05, 30.0, np.inf)  # a twentieth: at least monthly
    pages = os.path.join(directory, "pages.parquet")
    pq.write_table(pa.table({"page_id": pa.array(urls.tolist(), pa.string()), "importance": imp,
                             "change_rate": lam, "complete": complete.astype(np.int8),
                             "min_interval": min_iv, "max_interval": max_iv}), pages)
    count = np.bincount(host, minlength=num_hosts)
    order = rng.permutation(num_hosts)
    capped, delayed = order[: num_hosts // 5], order[num_hosts // 5: 2 * num_hosts // 5]
    # caps around the hosts' share of the bandwidth (0.2 crawls per page per day): about half bind
    cap = np.maximum(count[capped] * 0.2 * rng.uniform(0.5, 1.5, capped.size), 0.5)
    caps = os.path.join(directory, "caps.csv")
    pcsv.write_csv(pa.table({"host_id": names[capped].tolist(), "cap": np.round(cap, 3)}), caps,
                   pcsv.WriteOptions(quoting_style="none"))
    delay = np.round(DAY / np.maximum(count[delayed] * 0.2 * rng.uniform(0.5, 1.5, delayed.size), 0.5))
    delays = os.path.join(directory, "delays.csv")
    pcsv.write_csv(pa.table({"host": names[delayed].tolist(), "crawl_delay": delay}), delays,
                   pcsv.WriteOptions(quoting_style="none"))
    return {"pages": pages, "caps": caps, "delays": delays}


def _run(cmd: list[str], env: dict, timeout: float | None = None) -> tuple[float | None, str, float]:
    """Wall seconds, stdout and peak resident memory (GB, the process's own ``ru_maxrss``)
    of ``cmd`` (None seconds when it ran past ``timeout``)."""
    t0 = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        p = subprocess.Popen(cmd, env=env, stdout=out, stderr=err, text=True)
        deadline = None if timeout is None else t0 + timeout
        while True:
            pid, status, usage = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if deadline is not None and time.perf_counter() > deadline:
                p.kill()
                os.wait4(p.pid, 0)
                return None, "", float("nan")
            time.sleep(0.02)
        dt = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {p.returncode}:\n{stderr[-3000:]}")
    return dt, stdout, usage.ru_maxrss / 1e6  # kilobytes on Linux


def _last_json(stdout: str) -> dict:
    return json.loads(stdout.strip().splitlines()[-1])


def _pyarrow_alone(pages: str, out: str) -> float:
    """pyarrow reading the page table and writing a plan-shaped Parquet file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    t0 = time.perf_counter()
    t = pq.read_table(pages)
    n = t.num_rows
    pq.write_table(pa.table({"page_id": t["page_id"], "rate": np.zeros(n), "prob": np.zeros(n),
                             "periodic_rate": np.zeros(n)}), out)
    return time.perf_counter() - t0


def _library_solve(paths: dict[str, str]) -> float:
    """The library's in-memory capped, bounded solve of the same problem (compiled first)."""
    import jax
    import jax.numpy as jnp

    import jaxcrawl
    from jaxcrawl.io import read_crawl_delays, read_host_caps, read_problem

    rows = read_problem(paths["pages"])
    n = len(rows.page_id)
    lo, hi = rows.rate_bounds()
    lo = np.maximum(lo, 1.0 / 60.0)
    problem = jaxcrawl.CrawlProblem(jnp.asarray(rows.importance, jnp.float32),
                                    jnp.asarray(rows.change_rate, jnp.float32), 0.2 * n,
                                    jnp.asarray(rows.complete))
    hidx, delay, _ = read_crawl_delays(paths["delays"], rows.page_id)
    c_idx, c_cap = read_host_caps(paths["caps"], rows.page_id)
    from jaxcrawl._src.hostmap import merge_host_caps

    cap = np.where(delay > 0, DAY / np.where(delay > 0, delay, 1.0), np.inf)
    hidx, cap = merge_host_caps(c_idx, c_cap, hidx, cap, page_id=rows.page_id)
    caps = jaxcrawl.HostCaps(jnp.asarray(hidx), jnp.asarray(cap, jnp.float32))
    bounds = (jnp.asarray(lo, jnp.float32), jnp.asarray(hi, jnp.float32))

    def solve():
        return jaxcrawl.solve(problem, jaxcrawl.objective("harmonic"), caps=caps, bounds=bounds)

    jax.block_until_ready(solve())
    t0 = time.perf_counter()
    jax.block_until_ready(solve())
    return time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--num-pages", type=int, default=None, help="pages (default 1,000,000; --small 100,000)")
    ap.add_argument("--small", action="store_true", help="100,000 pages: a quick run")
    ap.add_argument("--dir", help="work directory (default: a temporary one)")
    ap.add_argument("--skip", default="", help="comma-separated: schedule, evaluate")
    ap.add_argument("--timeout", type=float, default=600.0,
                    help="seconds after which schedule or evaluate is stopped and reported as such (default 600)")
    args = ap.parse_args(argv)
    n = args.num_pages or (100_000 if args.small else 1_000_000)
    skip = {s for s in args.skip.split(",") if s}
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        env = dict(os.environ, JAXCRAWL_CACHE_DIR=os.path.join(tmp, "cache"))
        env.pop("JAXCRAWL_COMPILE_CACHE", None)
        t0 = time.perf_counter()
        paths = make_table(n, tmp)
        gen = time.perf_counter() - t0
        plan = os.path.join(tmp, "plan.parquet")
        solve = [sys.executable, "-m", "jaxcrawl.cli", "solve", "-i", paths["pages"], "-o", plan,
                 "--host-caps", paths["caps"], "--crawl-delays", paths["delays"], "--max-interval", "60d",
                 "--urlfrontier", os.path.join(tmp, "frontier.jsonl"), "--nutch", os.path.join(tmp, "seeds.txt"),
                 "--start", "2026-01-01T00:00:00Z", "--quiet"]
        _run(solve, env)  # fills the compile cache
        solve_s, out, solve_gb = _run(solve, env)
        report = _last_json(out)
        stages = report.get("seconds", {})
        base_io = _pyarrow_alone(paths["pages"], os.path.join(tmp, "plain.parquet"))
        base_lib = _library_solve(paths)
        results = {"solve_seconds": round(solve_s, 2), "solve_peak_rss_gb": round(solve_gb, 2),
                   "solve_stages": {k: round(v, 2) for k, v in stages.items()},
                   "pyarrow_read_write_seconds": round(base_io, 2), "library_solve_seconds": round(base_lib, 3)}
        if "schedule" not in skip:
            sched = [sys.executable, "-m", "jaxcrawl.cli", "schedule", "--plan", plan, "--horizon", "1d",
                     "--crawl-delays", paths["delays"], "-o", os.path.join(tmp, "timetable.parquet"),
                     "--start", "2026-01-01T00:00:00Z", "--quiet"]
            sched_s, _, sched_gb = _run(sched, env, args.timeout)
            results["schedule_seconds"] = None if sched_s is None else round(sched_s, 2)
            results["schedule_peak_rss_gb"] = None if sched_s is None else round(sched_gb, 2)
        if "evaluate" not in skip:
            import pyarrow.parquet as pq

            small = os.path.join(tmp, "pages50k.parquet")
            pq.write_table(pq.read_table(paths["pages"]).slice(0, 50_000), small)
            ev = [sys.executable, "-m", "jaxcrawl.cli", "evaluate", "-i", small, "--policy",
                  "nutch-adaptive@matched", "--quiet"]
            ev_s, _, _ = _run(ev, env, args.timeout)
            results["evaluate_50k_seconds"] = None if ev_s is None else round(ev_s, 2)
    print(f"jaxcrawl operator path, {n:,} pages (table generated in {gen:.1f} s; {os.cpu_count()} CPUs)")
    print(f"{'what':<44} {'seconds':>9} {'baseline':>28} {'ratio':>7}")
    print(f"{'solve (whole process, warm cache)':<44} {solve_s:>9.2f} {'pyarrow read+write':>28} "
          f"{solve_s / base_io:>7.1f}")
    print(f"{'':<44} {'':>9} {'library solve in memory':>28} {solve_s / base_lib:>7.1f}")
    print(f"{'  peak resident memory, GB':<44} {solve_gb:>9.2f}")
    for k, v in stages.items():
        print(f"{'  ' + k:<44} {v:>9.2f}")
    for key, what in (("schedule_seconds", "schedule --horizon 1d, crawl delays"),
                      ("evaluate_50k_seconds", "evaluate 50k pages, nutch-adaptive@matched")):
        if key in results:
            v = results[key]
            if v is None:
                print(f"{what:<44} {'> ' + format(args.timeout, 'g'):>9} {'solve (whole process)':>28}")
            else:
                print(f"{what:<44} {v:>9.2f} {'solve (whole process)':>28} {v / solve_s:>7.1f}")
    print(json.dumps(dict(benchmark="operator", num_pages=n, cpu_count=os.cpu_count(), **results)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
