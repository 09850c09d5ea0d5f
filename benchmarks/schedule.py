"""Speed of the crawl timetable and of the host-capped solver, against NumPy baselines.

    python benchmarks/schedule.py [--pages 1000000] [--bandwidth-fraction 1.0]
                                  [--heap-pages 20000] [--hosts 10000]
                                  [--cli-pages 500000] [--only-cli]

1. A one-day timetable for ``--pages`` pages (synthetic NeurIPS-19-like problem, LambdaCrawl
   rates, bandwidth ``--bandwidth-fraction`` x pages crawls per day, float32): time after
   compilation (and the first call, with compilation), time per crawl.
2. Baselines measured in the same run: the classic priority-queue scheduler (Python
   ``heapq``: pop the earliest crawl, push the page's next one) on ``--heap-pages`` pages,
   and a vectorised NumPy timetable (``np.repeat`` + ``argsort``) on all pages; ratios per
   crawl.
3. The crawl generator: one batch of the next 65536 crawls from a state.
4. The gain of the timetable over Poisson crawling at the same rates (closed forms,
   float64): harmonic and binary staleness.
5. LambdaCrawl with ``--hosts`` host caps (half of the hosts capped at half their
   unconstrained load) against the uncapped ``lambda_crawl``.
6. The operator's command, ``jaxcrawl schedule --horizon 1d`` with crawl delays (one host per
   100 pages, delays of 10 s to 5 min, a Parquet plan of ``n`` crawls a day, an ISO start,
   a CSV timetable out), at ``n = --cli-pages`` and ``2n``: wall time of a separate process
   each (after one untimed run that fills the compilation cache), its per-stage seconds, and
   the ratio of the two (O(n log n): about 2.1 when doubling; quadratic: 4).

The last line printed is one JSON object.
"""
import argparse
import heapq
import json
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import jaxcrawl  # noqa: E402
from jaxcrawl import timetable  # noqa: E402

from _common import best_time  # noqa: E402


def heap_timetable(rate, phase, horizon):
    """Priority-queue baseline: every crawl in [0, horizon), in time order."""
    heap = [((phase[i]) / rate[i], i) for i in range(len(rate)) if rate[i] > 0]
    heapq.heapify(heap)
    times, pages = [], []
    while heap and heap[0][0] < horizon:
        t, i = heapq.heappop(heap)
        times.append(t)
        pages.append(i)
        heapq.heappush(heap, (t + 1.0 / rate[i], i))
    return np.asarray(times), np.asarray(pages)


def numpy_timetable(rate, phase, horizon):
    """Vectorised NumPy baseline: counts, np.repeat, times, one argsort."""
    pos = rate > 0
    r = np.where(pos, rate, 1.0)
    count = np.where(pos, np.ceil(horizon * r - phase) - np.ceil(-phase), 0).astype(np.int64)
    page = np.repeat(np.arange(len(rate)), count)
    first = np.cumsum(count) - count
    j = np.arange(page.shape[0]) - first[page]
    t = (j + np.ceil(-phase)[page] + phase[page]) / r[page]
    order = np.argsort(t, kind="stable")
    return t[order], page[order]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pages", type=int, default=1_000_000)
    ap.add_argument("--bandwidth-fraction", type=float, default=1.0,
                    help="crawls per day as a fraction of the number of pages (default 1.0)")
    ap.add_argument("--heap-pages", type=int, default=20_000)
    ap.add_argument("--hosts", type=int, default=10_000)
    ap.add_argument("--cli-pages", type=int, default=500_000,
                    help="pages of the smaller `jaxcrawl schedule` run (the other has twice as many)")
    ap.add_argument("--only-cli", action="store_true", help="run section 6 only")
    args = ap.parse_args()
    n = args.pages
    res = {"pages": n, "device": str(jax.devices()[0])}
    if args.only_cli:
        res.update(schedule_command(args.cli_pages))
        print(json.dumps(res))
        return

    # ---- 1. the timetable
    prob = jaxcrawl.synthetic(jax.random.key(0), n, bandwidth_fraction=args.bandwidth_fraction,
                                   dtype=jnp.float32)
    pol = jax.jit(jaxcrawl.lambda_crawl)(prob)
    rate = jnp.where(pol.on_signal, 0.0, pol.rate)
    phase = timetable.golden_phase(n, dtype=jnp.float32)
    t0 = time.perf_counter()
    tt = jax.block_until_ready(timetable.timetable(rate, 1.0, phase=phase))
    first = time.perf_counter() - t0
    cap = int(tt.time.shape[0])
    crawls = int(tt.num_crawls)
    t_tt = best_time(lambda: timetable.timetable(rate, 1.0, phase=phase, capacity=cap), repeat=5)
    print(f"timetable     {n} pages, one day: {crawls} crawls in {t_tt:.3f} s after compilation "
          f"({first:.2f} s first call); {t_tt / crawls * 1e9:.0f} ns per crawl")
    res.update(timetable_seconds=t_tt, timetable_first_call_seconds=first, crawls=crawls,
               timetable_ns_per_crawl=t_tt / crawls * 1e9)

    # ---- 2. baselines
    rate_np = np.asarray(rate, np.float64)
    phase_np = np.asarray(phase, np.float64)
    m = min(args.heap_pages, n)
    t0 = time.perf_counter()
    ht, hp = heap_timetable(rate_np[:m], phase_np[:m], 1.0)
    t_heap = time.perf_counter() - t0
    heap_ns = t_heap / max(len(ht), 1) * 1e9
    # the baselines produce the same timetable (on the heap's pages)
    sub = timetable.timetable(jnp.asarray(rate_np[:m]), 1.0, phase=jnp.asarray(phase_np[:m]))
    same = int(sub.num_crawls) == len(ht) and np.array_equal(
        np.sort(np.asarray(sub.page)[np.asarray(sub.mask)]), np.sort(hp))
    t_np = best_time(lambda: numpy_timetable(rate_np, phase_np, 1.0), repeat=3)
    print(f"heapq         {m} pages: {len(ht)} crawls in {t_heap:.3f} s, {heap_ns:.0f} ns per crawl "
          f"-> timetable is {heap_ns / res['timetable_ns_per_crawl']:.1f}x faster per crawl "
          f"(same crawls: {same})")
    print(f"numpy         vectorised, {n} pages: {t_np:.3f} s -> timetable is {t_np / t_tt:.1f}x faster")
    res.update(heap_pages=m, heap_crawls=len(ht), heap_ns_per_crawl=heap_ns,
               speedup_per_crawl_vs_heap=heap_ns / res["timetable_ns_per_crawl"],
               numpy_vectorised_seconds=t_np, speedup_vs_numpy_vectorised=t_np / t_tt,
               heap_matches_timetable=bool(same))

    # ---- 3. generator
    state = timetable.init_crawler(rate, phase, 0.0)
    jax.block_until_ready(timetable.next_crawls(state, rate, phase, num_crawls=65536))
    t_gen = best_time(lambda: timetable.next_crawls(state, rate, phase, num_crawls=65536), repeat=5)
    print(f"generator     next 65536 crawls of {n} pages: {t_gen * 1e3:.1f} ms")
    res["generator_65536_ms"] = t_gen * 1e3

    # ---- 4. the gain of periodic over Poisson at the same rates (closed forms, float64)
    with jax.enable_x64(True):
        p64 = jaxcrawl.CrawlProblem(np.asarray(prob.importance, np.float64),
                                    np.asarray(prob.change_rate, np.float64),
                                    float(prob.bandwidth), np.asarray(prob.complete))
        pol64 = jaxcrawl.lambda_crawl(p64)
        gains = {}
        for name, poisson, periodic in (
                ("harmonic", jaxcrawl.harmonic_cost, timetable.periodic_harmonic_cost),
                ("binary", jaxcrawl.binary_cost, timetable.periodic_binary_cost)):
            a, b = float(poisson(p64, pol64)), float(periodic(p64, pol64))
            gains[name] = (a, b)
            print(f"gain          {name}: Poisson {a:.4f} -> timetable {b:.4f} "
                  f"({100 * (1 - b / a):.1f}% lower, same rates)")
            res[f"{name}_cost_poisson"] = a
            res[f"{name}_cost_timetable"] = b
            res[f"{name}_gain_percent"] = 100 * (1 - b / a)

    # ---- 5. host caps
    rng = np.random.default_rng(0)
    H = args.hosts
    host = rng.integers(0, H, n).astype(np.int32)
    host[rng.random(n) < 0.2] = -1
    x = np.asarray(pol.rate, np.float64)
    load = np.bincount(host[host >= 0], weights=x[host >= 0], minlength=H)
    caps = np.where(np.arange(H) % 2 == 0, 0.5 * load, np.inf).astype(np.float32)
    caps = np.where(caps > 0, caps, np.inf).astype(np.float32)
    t0 = time.perf_counter()
    capped = jaxcrawl.HostCaps(host, caps)
    sol = jax.block_until_ready(jaxcrawl.solve(prob, "harmonic", caps=capped))
    first_caps = time.perf_counter() - t0
    t_caps = best_time(lambda: jaxcrawl.solve(prob, "harmonic", caps=capped), repeat=3)
    t_lc = best_time(jax.jit(jaxcrawl.lambda_crawl), prob, repeat=3)
    xs = np.asarray(sol.rate, np.float64)
    tot = np.bincount(host[host >= 0], weights=xs[host >= 0], minlength=H)
    viol = float(np.max(np.where(np.isfinite(caps), tot / caps - 1, -1)))
    print(f"host caps     {n} pages, {H} hosts ({int(np.sum(np.isfinite(caps)))} capped): "
          f"{t_caps * 1e3:.1f} ms ({int(sol.num_steps)} passes; {first_caps:.1f} s first call) vs "
          f"lambda_crawl {t_lc * 1e3:.1f} ms; worst cap excess {viol:.1e} (relative), "
          f"budget residual {float(sol.residual):.1e}")
    res.update(host_caps_ms=t_caps * 1e3, host_caps_first_call_seconds=first_caps,
               lambda_crawl_ms=t_lc * 1e3, host_caps_passes=int(sol.num_steps),
               host_caps_worst_relative_excess=viol, hosts=H)
    res.update(schedule_command(args.cli_pages))
    print(json.dumps(res))


def _operator_files(folder, n, seed=0):
    """A plan of ``n`` URLs (``n`` crawls a day, lognormal rates) on ``n // 100`` hosts and
    their crawl delays."""
    rng = np.random.default_rng(seed)
    hosts = max(n // 100, 1)
    host = rng.integers(0, hosts, n)
    ids = np.char.add(np.char.add(np.char.add("https://h", host.astype(str)), ".example/p"),
                      np.arange(n).astype(str)).astype(object)
    rate = rng.lognormal(0.0, 1.0, n)
    rate *= n / rate.sum()
    plan = os.path.join(folder, f"plan{n}.parquet")
    jaxcrawl.io.write_plan(plan, ids, rate, np.zeros(n))
    delays = os.path.join(folder, f"delays{n}.csv")
    with open(delays, "w") as fh:
        fh.write("host,crawl_delay\n")
        fh.writelines(f"h{h}.example,{d}\n" for h, d in enumerate(rng.choice([10, 30, 60, 300], hosts)))
    return plan, delays


def schedule_command(n):
    """Section 6: ``jaxcrawl schedule --horizon 1d`` with crawl delays at n and 2n pages."""
    import subprocess
    import tempfile

    out = {}
    with tempfile.TemporaryDirectory() as folder:
        for m in (n, 2 * n):
            plan, delays = _operator_files(folder, m)
            cmd = ["jaxcrawl", "schedule", "--plan", plan, "--start", "2026-01-05T00:00:00Z", "--horizon", "1d",
                   "--crawl-delays", delays, "-o", os.path.join(folder, "timetable.csv"), "-q"]
            subprocess.run(cmd, check=True, capture_output=True)  # fills the compilation cache
            t0 = time.perf_counter()
            done = subprocess.run(cmd, check=True, capture_output=True, text=True)
            wall = time.perf_counter() - t0
            summary = json.loads(done.stdout.strip().splitlines()[-1])
            stages = {k: round(v, 3) for k, v in summary["seconds"].items()}
            print(f"schedule      {m} pages, {summary['num_crawls']} crawls, "
                  f"{summary['num_crawl_delay_hosts']} crawl-delay hosts: {wall:.2f} s wall ({stages})")
            out[f"schedule_{m}_pages_wall_seconds"] = wall
            out[f"schedule_{m}_pages_stage_seconds"] = stages
    ratio = out[f"schedule_{2 * n}_pages_wall_seconds"] / out[f"schedule_{n}_pages_wall_seconds"]
    print(f"schedule      doubling the pages: {ratio:.2f}x the wall time")
    out["schedule_doubling_ratio"] = ratio
    return out


if __name__ == "__main__":
    main()
