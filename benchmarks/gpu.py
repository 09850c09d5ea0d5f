"""The prepared accelerator run: the solve, estimator and batch workloads at web scale, then
the test lanes or the full-size reproductions, as one table per machine.

    PYTHONPATH=. python benchmarks/gpu.py                  # part 1: workloads + long and reproduce lanes
    PYTHONPATH=. python benchmarks/gpu.py --part reproduce # part 2: jaxcrawl reproduce all, full size
    JAX_PLATFORMS=cpu python benchmarks/gpu.py --small     # the CPU mode CI runs (small sizes, no lanes)

Each part is sized for one device call (part 1 meant to finish within 4 minutes, part 2 within 6).  For every
workload the table gives the time after compilation (best of a few runs; arrays passed as
arguments, never closed over), the passes over the pages or the evaluations it took, the
bytes one pass reads, and the ratio of the time to the *memory floor*: one pass over the
same arrays measured in the same run (a fused reduction of importance, change rate and the
complete mask).  Then the card and the jax version.  ``--out FILE`` also writes the table
as Markdown (for docs/performance.md).  The last line printed is one JSON object.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import jax
import jax.numpy as jnp

sys.path.insert(0, os.path.dirname(__file__))
import jaxcrawl  # noqa: E402
from jaxcrawl import estimators  # noqa: E402

from _common import best_time  # noqa: E402

FULL = {"pages": 18_500_000, "small_pages": (100_000, 1_000_000), "batch": (1_000, 1_000),
        "big_batch": (10_000, 1_000), "mle_obs": 8, "mle_wide": (200_000, 200)}
SMALL = {"pages": 200_000, "small_pages": (10_000, 100_000), "batch": (100, 1_000),
         "big_batch": (200, 1_000), "mle_obs": 8, "mle_wide": (20_000, 50)}


def memory_pass(problem):
    """Seconds of one fused pass over the problem's page arrays (the memory floor)."""
    f = jax.jit(lambda mu, lam, c: jnp.sum(mu * lam + c.astype(mu.dtype)))
    return best_time(f, problem.importance, problem.change_rate, problem.complete, repeat=5)


def bytes_per_pass(problem):
    return sum(int(a.size) * a.dtype.itemsize for a in (problem.importance, problem.change_rate, problem.complete))


def solve_rows(sizes, rows):
    for name, solver in (("lambda_crawl", jaxcrawl.lambda_crawl), ("binary_lambda_crawl", jaxcrawl.binary_lambda_crawl)):
        for dtype in (jnp.float32,) + ((jnp.float64,) if jax.config.jax_enable_x64 else ()):
            p = jaxcrawl.synthetic(jax.random.key(0), sizes["pages"], dtype=dtype)
            floor = memory_pass(p)
            f = jax.jit(solver)
            sol = f(p)
            t = best_time(f, p, repeat=5)
            rows.append(dict(workload=f"{name}, {sizes['pages']:,} pages, {jnp.dtype(dtype).name}", seconds=t,
                             work=f"{int(sol.num_steps) + 1} passes", converged=bool(sol.converged),
                             bytes=bytes_per_pass(p), floor=floor))
            del p, sol
    for n in sizes["small_pages"]:
        p = jaxcrawl.synthetic(jax.random.key(0), n)
        f = jax.jit(jaxcrawl.lambda_crawl)
        sol = f(p)
        rows.append(dict(workload=f"lambda_crawl, {n:,} pages", seconds=best_time(f, p, repeat=20),
                         work=f"{int(sol.num_steps) + 1} passes" if n >= 65536 else f"{int(sol.num_steps)} steps",
                         converged=bool(sol.converged), bytes=bytes_per_pass(p), floor=memory_pass(p)))
    for key in ("batch", "big_batch"):
        b, n = sizes[key]
        keys = jax.random.split(jax.random.key(1), b)
        batch = jax.vmap(lambda k: jaxcrawl.synthetic(k, n))(keys)
        f = jax.jit(jax.vmap(jaxcrawl.lambda_crawl))
        sol = f(batch)
        rows.append(dict(workload=f"vmap(lambda_crawl), {b:,} x {n:,} pages", seconds=best_time(f, batch, repeat=10),
                         work=f"<= {int(sol.num_steps.max())} steps", converged=bool(sol.converged.all()),
                         bytes=bytes_per_pass(batch), floor=memory_pass(batch)))


def mle_rows(sizes, rows):
    n, k = sizes["pages"], sizes["mle_obs"]
    lam = jaxcrawl.synthetic(jax.random.key(0), n).change_rate
    kw, kc = jax.random.split(jax.random.key(1))
    w = jax.random.exponential(kw, (n, k), jnp.float32) + 1e-6
    changed = jax.random.uniform(kc, (n, k)) < -jnp.expm1(-lam[:, None] * w)
    f = jax.jit(lambda w, c: estimators.mle(w, c, return_info=True))
    info = f(w, changed)
    floor = best_time(jax.jit(lambda w, c: jnp.sum(w * c)), w, changed, repeat=5)
    rows.append(dict(workload=f"mle, {n:,} pages x {k} obs", seconds=best_time(f, w, changed, repeat=3),
                     work=f"{int(info.num_steps)} iterations", converged=bool(info.converged.all()),
                     bytes=int(w.size) * 5, floor=floor))
    del w, changed, info
    n, k = sizes["mle_wide"]
    w = jax.random.exponential(kw, (n, k), jnp.float32) + 1e-6
    changed = jax.random.uniform(kc, (n, k)) < 0.3
    floor = best_time(jax.jit(lambda w, c: jnp.sum(w * c)), w, changed, repeat=5)
    for label, fn in (("jit(mle)", jax.jit(estimators.mle)),
                      ("jit(vmap(mle))", jax.jit(jax.vmap(estimators.mle)))):
        rows.append(dict(workload=f"{label}, {n:,} pages x {k} obs", seconds=best_time(fn, w, changed, repeat=3),
                         work="", converged=None, bytes=int(w.size) * 5, floor=floor))


def lane_rows(rows, workers):
    for lane in ("long", "reproduce"):
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", lane, "-rf", "-n", str(workers)],
                              capture_output=True, text=True)
        tail = [ln for ln in proc.stdout.strip().splitlines() if ln.strip()][-12:]
        print("\n".join(tail))
        rows.append(dict(workload=f"pytest -m {lane} -n {workers}", seconds=time.perf_counter() - t0,
                         work=tail[-1] if tail else "", converged=proc.returncode == 0, bytes=None, floor=None))


def reproduce_rows(rows, small):
    t0 = time.perf_counter()
    args = [sys.executable, "-m", "jaxcrawl.cli", "reproduce", "all", "--no-progress", "--out", "reproduce-out"]
    if small:
        args.append("--quick")
    proc = subprocess.run(args, capture_output=True, text=True)
    tail = [ln for ln in proc.stdout.strip().splitlines() if ln.strip()][-20:]
    print("\n".join(tail))
    rows.append(dict(workload="jaxcrawl reproduce all" + (" --quick" if small else ""),
                     seconds=time.perf_counter() - t0, work=tail[-1][:80] if tail else "",
                     converged=proc.returncode == 0, bytes=None, floor=None))


def table(rows):
    dev = jax.devices()[0]
    head = f"card: {dev.device_kind} ({dev.platform}), jax {jax.__version__}, {jax.device_count()} device(s)"
    lines = [head, "", "| workload | time | passes / work | ok | bytes per pass | memory floor | ratio |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        t = r["seconds"]
        shown = f"{t * 1e3:.3f} ms" if t < 1 else f"{t:.1f} s"
        floor = "" if r["floor"] is None else f"{r['floor'] * 1e3:.3f} ms"
        ratio = "" if r["floor"] is None else f"{t / r['floor']:.1f}x"
        size = "" if r["bytes"] is None else f"{r['bytes'] / 1e6:.1f} MB"
        ok = "" if r["converged"] is None else ("yes" if r["converged"] else "NO")
        lines.append(f"| {r['workload']} | {shown} | {r['work']} | {ok} | {size} | {floor} | {ratio} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", choices=("workloads", "reproduce"), default="workloads",
                    help="workloads (and the long and reproduce lanes) or the full-size reproductions")
    ap.add_argument("--small", action="store_true", help="small sizes, no test lanes (the CPU mode)")
    ap.add_argument("--no-lanes", action="store_true", help="skip the long and reproduce test lanes")
    ap.add_argument("--workers", type=int, default=8, help="pytest-xdist workers for the lanes")
    ap.add_argument("--out", help="also write the table (Markdown) to this file")
    args = ap.parse_args()
    sizes = SMALL if args.small else FULL
    rows = []
    if args.part == "workloads":
        solve_rows(sizes, rows)
        mle_rows(sizes, rows)
        if not (args.small or args.no_lanes):
            lane_rows(rows, args.workers)
    else:
        reproduce_rows(rows, args.small)
    text = table(rows)
    print(text)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text + "\n")
    bad = [r["workload"] for r in rows if r["converged"] is False]
    print(json.dumps({"device": jax.devices()[0].device_kind, "jax": jax.__version__, "part": args.part,
                      "small": args.small, "failed": bad,
                      "rows": [{k: v for k, v in r.items()} for r in rows]}))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
