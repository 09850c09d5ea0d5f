"""LambdaLearnAndCrawl at the size of NeurIPS-19 Experiment 3, and a NumPy baseline.

Experiment 3 (Kolobov et al., NeurIPS-19 §9.6): 20 episodes, each on a 100,000-page
instance, 21 daily epochs of LLC starting from 1 change/day.  This script times that
whole workload (LLC, float32, the pages' instances from ``jaxcrawl.data.synthetic``),
episodes run ``--batch`` at a time with ``jax.vmap`` in one compiled program, and times
one epoch's estimate + solve (the smoothed MLE of eq. 10 on the compressed history
suffix, then LambdaCrawl) against a plain NumPy implementation of the same two steps
measured in the same run.  The production revisit heuristics
(:mod:`jaxcrawl.learners.heuristics`: Nutch, StormCrawler, Heritrix) run the same episodes
in the same run, and both throughputs are reported as page-days simulated per second.
The last line printed is one JSON object.

Usage: ``python benchmarks/learners.py [--episodes 20] [--epochs 21] [--pages 100000] [--batch 4]
[--events-per-window 64]``
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import jaxcrawl.learners.learn_and_crawl as lc  # noqa: E402
from jaxcrawl import data, objectives, solvers  # noqa: E402
from jaxcrawl.learners import heuristics, run_learner  # noqa: E402

from _common import best_time  # noqa: E402


# ------------------------------------------------------------------ NumPy baseline
def np_mle_smoothed(intervals, changed, mask, smoothing=0.5, lo=1e-9, hi=1e3, iters=60):
    """Smoothed MLE (NeurIPS-19 eq. 10 + Alg. 4 line 11) by bisection in log space."""
    w = np.where(mask, intervals, 0.0)
    c = mask & (changed > 0)
    w_unchanged = np.where(mask & ~c, w, 0.0).sum(-1) + smoothing
    a = np.full(w.shape[0], np.log(lo))
    b = np.full(w.shape[0], np.log(hi))
    for _ in range(iters):
        mid = 0.5 * (a + b)
        x = np.exp(mid)[:, None]
        xw = np.where(c, np.minimum(x * w, 700.0), 1.0)
        terms = np.where(c, w / np.expm1(xw), 0.0).sum(-1)
        lhs = terms + smoothing / np.expm1(np.exp(mid) * smoothing)
        up = lhs > w_unchanged  # the root is to the right
        a = np.where(up, mid, a)
        b = np.where(up, b, mid)
    return np.exp(0.5 * (a + b))


def np_lambda_crawl(mu, lam, comp, bandwidth, iters=100):
    """LambdaCrawl (NeurIPS-19 Alg. 1-3) by bisection on the dual ν in log space."""
    def rates(nu):
        s2 = mu * lam / nu
        inc = 2.0 * s2 / (lam + np.sqrt(lam * lam + 4.0 * s2))
        return np.where(comp, np.minimum(lam, mu / nu), inc)

    a, b = np.log(1e-12), np.log(1e12)
    for _ in range(iters):
        mid = 0.5 * (a + b)
        if rates(np.exp(mid)).sum() > bandwidth:
            a = mid
        else:
            b = mid
    return rates(np.exp(0.5 * (a + b)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--epochs", type=int, default=21)
    ap.add_argument("--pages", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=4, help="episodes vmapped per compiled call")
    ap.add_argument("--events-per-window", type=float, default=64.0,
                    help="expected events of the busiest page per simulator window")
    args = ap.parse_args()
    if args.episodes % args.batch:
        raise SystemExit("--episodes must be a multiple of --batch")
    print(f"jax {jax.__version__} on {jax.devices()[0].platform}, {os.cpu_count()} CPUs; "
          f"x64={jax.config.jax_enable_x64}")

    keys = jax.random.split(jax.random.key(2019), args.episodes)
    problems = jax.vmap(lambda k: data.synthetic(k, args.pages))(keys)
    t0 = time.perf_counter()
    settings = lc.llc_settings(problems, "harmonic", events_per_window=args.events_per_window)
    t_settings = time.perf_counter() - t0
    print(f"settings ({t_settings:.1f} s): {settings}")
    learner = lc.llc(**settings)
    run = jax.jit(jax.vmap(lambda k, q: run_learner(jax.random.fold_in(k, 1), learner, q, args.epochs)[1]))

    batches = [(keys[i:i + args.batch], jax.tree_util.tree_map(lambda x: x[i:i + args.batch], problems))
               for i in range(0, args.episodes, args.batch)]
    t0 = time.perf_counter()
    compiled = run.lower(*batches[0]).compile()
    t_compile = time.perf_counter() - t0
    infos = []
    t0 = time.perf_counter()
    for k, q in batches:
        infos.append(jax.block_until_ready(compiled(k, q)))
    t_run = time.perf_counter() - t0
    info = jax.tree_util.tree_map(lambda *x: np.concatenate([np.asarray(v) for v in x]), *infos)
    optimum = np.asarray(jax.vmap(lambda q: objectives.harmonic_cost(q, solvers.lambda_crawl(q)))(problems))
    ratio = info.harmonic_cost / optimum[:, None]
    print(f"LLC, {args.episodes} episodes x {args.epochs} epochs x {args.pages} pages: "
          f"compile {t_compile:.1f} s, run {t_run:.1f} s "
          f"({t_run / (args.episodes * args.epochs):.3f} s per page-set epoch)")
    print("mean harmonic cost / LambdaCrawl optimum per epoch:", np.round(ratio.mean(0), 4).tolist())
    print(f"overflowed page-windows: {int(info.overflow.sum())}; pages with a shortened suffix "
          f"at the end: {int(info.truncated[:, -1].sum())}; inner solves converged: "
          f"{int(info.converged.sum())}/{info.converged.size}")

    # ---- the production heuristics on the same episodes (exact event-driven simulation)
    page_days = args.episodes * args.epochs * args.pages
    llc_throughput = page_days / t_run
    heuristic_throughput = {}
    for name, factory in heuristics.HEURISTICS.items():
        h_learner = factory()
        run_h = jax.jit(jax.vmap(lambda k, q, hl=h_learner: run_learner(jax.random.fold_in(k, 1), hl, q,
                                                                         args.epochs)[1]))
        compiled_h = run_h.lower(*batches[0]).compile()
        t0 = time.perf_counter()
        h_infos = [jax.block_until_ready(compiled_h(k, q)) for k, q in batches]
        t_h = time.perf_counter() - t0
        ok = all(bool(np.all(np.asarray(i.converged))) for i in h_infos)
        heuristic_throughput[name] = round(page_days / t_h, 1)
        print(f"{name}: {args.episodes} episodes x {args.epochs} days x {args.pages} pages in {t_h:.2f} s "
              f"({page_days / t_h:,.0f} page-days/s; LLC {llc_throughput:,.0f}); event loops finished: {ok}")

    # ---- one epoch's estimate + solve: JAX vs NumPy on the same history
    problem = jax.tree_util.tree_map(lambda x: x[0], problems)
    state, _ = jax.jit(lambda k, q: run_learner(k, learner, q, 5))(keys[0], problem)
    hist = state.history
    epoch = 4

    @jax.jit
    def jax_estimate_solve(h, q, previous):
        est, _ = lc.suffix_estimate(h, q.complete, epoch, jnp.inf, 0.5, 1.0, previous)
        return solvers.lambda_crawl(q.replace(change_rate=est)).rate

    t_jax = best_time(jax_estimate_solve, hist, problem, state.estimate, repeat=3)
    iv, ch, mk = (np.asarray(a) for a in lc.suffix_history(hist, epoch, jnp.inf))
    comp = np.asarray(problem.complete)
    mu, bw = np.asarray(problem.importance, np.float64), float(problem.bandwidth)
    cols = (np.asarray(hist.column_epoch) >= 0) & (np.asarray(hist.column_epoch) <= epoch)
    signals = np.asarray(hist.signals, np.float64)

    def numpy_estimate_solve():
        est = np_mle_smoothed(iv.astype(np.float64), ch, mk)
        signal_rate = (signals[:, cols].sum(-1) + 0.5) / (cols.sum() * 1.0)  # eq. 11 + 0.5
        est = np.where(comp, signal_rate, est)
        return np_lambda_crawl(mu, est, comp, bw)

    t0 = time.perf_counter()
    ref_rates = numpy_estimate_solve()
    t_np = time.perf_counter() - t0
    jax_rates = np.asarray(jax_estimate_solve(hist, problem, state.estimate))
    inc = ~comp
    agree = float(np.median(np.abs(jax_rates[inc] - ref_rates[inc]) / np.maximum(ref_rates[inc], 1e-6)))
    print(f"one epoch's estimate + solve on {args.pages} pages (history width {iv.shape[-1]}): "
          f"JAX {t_jax * 1e3:.1f} ms, NumPy {t_np * 1e3:.1f} ms, speedup {t_np / t_jax:.1f}x "
          f"(median relative rate difference {agree:.2e})")

    result = dict(
        benchmark="learners",
        device=jax.devices()[0].platform,
        episodes=args.episodes,
        epochs=args.epochs,
        pages=args.pages,
        episodes_per_call=args.batch,
        llc_compile_seconds=round(t_compile, 2),
        llc_run_seconds=round(t_run, 2),
        llc_seconds_per_epoch=round(t_run / (args.episodes * args.epochs), 4),
        windows_per_epoch=settings["windows_per_epoch"],
        history_capacity=settings["history_capacity"],
        final_cost_over_optimum_mean=round(float(ratio[:, -1].mean()), 5),
        final_cost_over_optimum_max=round(float(ratio[:, -1].max()), 5),
        overflow=int(info.overflow.sum()),
        inner_solves_converged=bool(info.converged.all()),
        estimate_solve_jax_ms=round(t_jax * 1e3, 2),
        estimate_solve_numpy_ms=round(t_np * 1e3, 2),
        estimate_solve_speedup=round(t_np / t_jax, 2),
        llc_page_days_per_second=round(llc_throughput, 1),
        heuristic_page_days_per_second=heuristic_throughput,
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
