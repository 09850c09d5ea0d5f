"""Benchmark: 1e5 pages x 100 daily windows of the exact crawl simulator in one compiled call.

Workload: ``jaxcrawl.synthetic`` (NeurIPS-19-like: heavy-tailed importance, change
rates with a long tail, 4% complete pages, bandwidth 20% of the pages) crawled by the
LambdaCrawl policy (Poisson crawls for incomplete pages, crawl-on-signal for complete
ones), 100 windows of one day run by ``jaxcrawl.simulate.simulate`` as one
``jax.lax.scan`` inside one ``jax.jit``.  It reports compile time, run time, CPU time,
and events per second (changes + crawls; the requests, drawn as counts, are reported
separately), against a plain NumPy per-page event loop doing the same work (draw the
changes and crawls, merge them in time order, integrate H(N) and 1{N > 0} exactly, emit
the observations, draw the requests) on a subset of the pages, measured in the same run.

Usage: ``python benchmarks/simulate.py [--pages 100000] [--windows 100]
[--baseline-pages 1000] [--baseline-windows WINDOWS] [--x64]``.  The last line printed is
one JSON object.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import sys
import time

import numpy as np


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def numpy_simulate(rng, xi, zeta, kind, rate, prob, num_windows, window=1.0):
    """Plain NumPy, one page at a time: the same model as ``jaxcrawl.simulate``.

    Returns per-page totals ``(n, 5)``: changes, crawls, requests, ∫H(N), stale time.
    """
    n = xi.shape[0]
    n_unc = np.zeros(n, np.int64)
    since = np.zeros(n)
    tot = np.zeros((n, 5))
    h_table = np.concatenate([[0.0], np.cumsum(1.0 / np.arange(1, 100_000))])
    for _ in range(num_windows):
        for i in range(n):
            changes = np.sort(rng.random(rng.poisson(xi[i] * window))) * window
            if kind[i] == 0:  # Poisson crawls
                crawls = np.sort(rng.random(rng.poisson(rate[i] * window))) * window
                times = np.concatenate([changes, crawls])
                is_chg = np.concatenate([np.ones(changes.size, bool), np.zeros(crawls.size, bool)])
                is_crl = ~is_chg
                order = np.argsort(times, kind="stable")
                times, is_chg, is_crl = times[order], is_chg[order], is_crl[order]
            else:  # crawl on each change signal with probability prob
                times, is_chg = changes, np.ones(changes.size, bool)
                is_crl = rng.random(changes.size) < prob[i]
            nn, t_prev, last, harm, stale = n_unc[i], 0.0, -since[i], 0.0, 0.0
            intervals, counts = [], []
            for t, c, r in zip(times, is_chg, is_crl):
                harm += h_table[nn] * (t - t_prev)
                stale += (nn > 0) * (t - t_prev)
                nn += c
                if r:
                    intervals.append(t - last)
                    counts.append(nn)
                    nn, last = 0, t
                t_prev = t
            harm += h_table[nn] * (window - t_prev)
            stale += (nn > 0) * (window - t_prev)
            n_unc[i] = nn
            since[i] = window - last if last >= 0 else since[i] + window
            req = rng.poisson(zeta[i] * (window - stale)) + rng.poisson(zeta[i] * stale)
            tot[i] += (changes.size, int(is_crl.sum()), req, harm, stale)
    return tot


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=100_000)
    parser.add_argument("--windows", type=int, default=100)
    parser.add_argument("--baseline-pages", type=int, default=1000)
    parser.add_argument("--baseline-windows", type=int, default=None,
                        help="windows of the NumPy baseline (default: --windows)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--x64", action="store_true", help="run in float64")
    args = parser.parse_args(argv)

    import jax

    if args.x64:
        jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    from jaxcrawl import lambda_crawl, synthetic
    from jaxcrawl import simulate as S

    dtype = jnp.float64 if args.x64 else jnp.float32
    problem = synthetic(jax.random.key(0), args.pages, dtype=dtype)
    policy = lambda_crawl(problem)
    schedule = S.schedule_from_policy(problem, policy)
    config = S.config_for(problem, schedule, 1.0)
    state = S.init_state(problem)
    print(f"problem      {args.pages} pages ({jnp.dtype(dtype).name}), "
          f"{int(np.asarray(problem.complete).sum())} complete, max change rate "
          f"{float(problem.change_rate.max()):.1f}/day, max crawl rate {float(policy.rate.max()):.1f}/day")
    print(f"config       {config}")

    def run(key, problem, schedule, state):
        final, totals, _ = S.simulate(key, problem, schedule, state, config, args.windows)
        return final, totals

    fn = jax.jit(run)
    t0, c0 = time.perf_counter(), _cpu()
    compiled = fn.lower(jax.random.key(1), problem, schedule, state).compile()
    compile_seconds, compile_cpu = time.perf_counter() - t0, _cpu() - c0
    times, cpus = [], []
    for r in range(args.repeats):
        t0, c0 = time.perf_counter(), _cpu()
        final, totals = jax.block_until_ready(compiled(jax.random.key(2 + r), problem, schedule, state))
        times.append(time.perf_counter() - t0)
        cpus.append(_cpu() - c0)
    best, best_cpu = min(times), min(cpus)
    changes = float(np.asarray(totals.changes, np.float64).sum())
    crawls = float(np.asarray(totals.crawls, np.float64).sum())
    requests = float(np.asarray(totals.requests, np.float64).sum())
    overflow = int(np.asarray(totals.overflow).sum())
    events = changes + crawls
    jax_rate = events / best
    print(f"jax          {args.pages} pages x {args.windows} windows in {best:.2f} s "
          f"(cpu {best_cpu:.2f} s; compile {compile_seconds:.1f} s, cpu {compile_cpu:.1f} s)")
    print(f"             {changes:.3g} changes + {crawls:.3g} crawls = {jax_rate:.3g} events/s; "
          f"{requests:.3g} requests; overflowed page-windows: {overflow}")

    # NumPy baseline on a subset of pages and windows, same model
    nb = min(args.baseline_pages, args.pages)
    wb = args.windows if args.baseline_windows is None else args.baseline_windows
    xi = np.asarray(problem.change_rate, np.float64)[:nb]
    zeta = np.asarray(problem.importance, np.float64)[:nb]
    kind = (np.asarray(schedule.kind)[:nb] == 2).astype(int)  # 2: signal_schedule's kind
    rate = np.asarray(schedule.rate, np.float64)[:nb]
    prob = np.asarray(schedule.prob, np.float64)[:nb]
    t0 = time.perf_counter()
    base = numpy_simulate(np.random.default_rng(0), xi, zeta, kind, rate, prob, wb)
    base_seconds = time.perf_counter() - t0
    base_rate = (base[:, 0].sum() + base[:, 1].sum()) / base_seconds
    print(f"numpy loop   {nb} pages x {wb} windows in {base_seconds:.2f} s = {base_rate:.3g} events/s")
    ratio = jax_rate / base_rate
    print(f"ratio        jax / numpy events per second: {ratio:.0f}x")
    check = None
    if wb == args.windows:
        # the same pages from the same state over the same horizon: same expectations
        jh = np.asarray(totals.harmonic, np.float64)[:nb]
        js = np.asarray(totals.stale_time, np.float64)[:nb]
        check = {}
        for name, a, b in (("harmonic", jh, base[:, 3]), ("stale_time", js, base[:, 4])):
            se = math.sqrt((a.var(ddof=1) + b.var(ddof=1)) / nb)
            z = (a.mean() - b.mean()) / se
            check[name] = {"jax": float(a.mean()), "numpy": float(b.mean()), "z": round(z, 2)}
            print(f"check        mean {name} per page over the horizon: jax {a.mean():.4f}, "
                  f"numpy {b.mean():.4f} (z = {z:+.2f})")
    result = {
        "benchmark": "simulate",
        "pages": args.pages,
        "windows": args.windows,
        "dtype": jnp.dtype(dtype).name,
        "compile_seconds": round(compile_seconds, 3),
        "run_seconds": round(best, 3),
        "run_cpu_seconds": round(best_cpu, 3),
        "changes": changes,
        "crawls": crawls,
        "requests": requests,
        "events_per_second": round(jax_rate, 1),
        "overflow_page_windows": overflow,
        "numpy_pages": nb,
        "numpy_windows": wb,
        "numpy_seconds": round(base_seconds, 3),
        "numpy_events_per_second": round(base_rate, 1),
        "speedup_events_per_second": round(ratio, 2),
        "page_windows_per_second": round(args.pages * args.windows / best, 1),
        "check_vs_numpy": check,
        "config": {k: getattr(config, k) for k in config.__dataclass_fields__},
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "jax": jax.__version__,
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
