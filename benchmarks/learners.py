"""LambdaLearnAndCrawl at the size of NeurIPS-19 Experiment 3 (Fig. 3), and baselines.

Experiment 3 (Kolobov et al., NeurIPS-19 §9.6): 20 episodes, each on a 100,000-page
instance, 21 daily epochs starting from 1 change/day, for the three learners of Fig. 3
(LLC, LLCA, BLLCε).  This script times

* the whole Fig. 3 workload (the three learners in one compiled program, the inner solver
  a vmapped index as in ``jaxcrawl/experiments/neurips19_fig3.py``; float32; instances from
  ``jaxcrawl.synthetic``; ``--batch`` episodes per call), compilation included, with
  the observation-level sampler the learners choose (``info.sampler``);
* the two samplers alone on the same pages and policy, in the same run: page-days
  simulated per second by the event-level simulator (``crawl_epoch``) and by the
  observation-level one (``observe_epoch``), and a few LLC epochs with each end to end;
* the production revisit heuristics (:func:`jaxcrawl.learners.heuristic`: Nutch,
  StormCrawler, Heritrix) on the same episodes, exact event-driven simulation: page-days
  simulated per second next to the learners' (same run);
* one epoch's estimate + solve (the smoothed MLE of eq. 10 on the compressed history
  suffix, then LambdaCrawl) against a plain NumPy implementation of the same two steps.

The last line printed is one JSON object.

Usage: ``python benchmarks/learners.py [--episodes 20] [--epochs 21] [--pages 100000] [--batch 2]
[--events-per-window 48] [--compare-epochs 3] [--skip-full]``
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
import jaxcrawl  # noqa: E402
import jaxcrawl.learners._learn_and_crawl as lc  # noqa: E402
from jaxcrawl.learners import HEURISTICS, grid_product, heuristic, run_learner  # noqa: E402
from jaxcrawl.learners._history import crawl_epoch, observe_epoch, suffix_history  # noqa: E402
from jaxcrawl.simulate import schedule_from_policy  # noqa: E402

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
    ap.add_argument("--batch", type=int, default=2, help="episodes vmapped per compiled call")
    ap.add_argument("--events-per-window", type=float, default=48.0,
                    help="expected events of the busiest page per event-level simulator window")
    ap.add_argument("--compare-epochs", type=int, default=3,
                    help="LLC epochs run with each sampler for the end-to-end comparison")
    ap.add_argument("--skip-full", action="store_true", help="skip the full Fig. 3 workload")
    args = ap.parse_args()
    if args.episodes % args.batch:
        raise SystemExit("--episodes must be a multiple of --batch")
    print(f"jax {jax.__version__} on {jax.devices()[0].platform}, {os.cpu_count()} CPUs; "
          f"x64={jax.config.jax_enable_x64}")

    keys = jax.random.split(jax.random.key(2019), args.episodes)
    problems = jax.vmap(lambda k: jaxcrawl.synthetic(k, args.pages))(keys)
    family = ("harmonic", "harmonic-approx", "binary-epsilon")
    result = dict(benchmark="learners", device=jax.devices()[0].platform, episodes=args.episodes,
                  epochs=args.epochs, pages=args.pages, episodes_per_call=args.batch)

    # ---- the two samplers alone, same pages and policy (LLC's first epoch)
    problem = jax.tree_util.tree_map(lambda x: x[0], problems)
    one = {s_: lc.llc_settings(problem, "harmonic", events_per_window=args.events_per_window, sampler=s_)
           for s_ in ("event", "observation")}
    ev_settings, ob_settings = one["event"], one["observation"]
    learner0 = lc.lambda_learn_and_crawl(**ob_settings)
    state0 = learner0.init(problem)
    schedule = schedule_from_policy(problem.replace(complete=state0.policy.on_signal), state0.policy)

    @jax.jit
    def event_epoch(key, q, sched, sim_state, hist):
        return crawl_epoch(key, sim_state, hist, q, sched, ev_settings["config"], ev_settings["windows_per_epoch"], 0)[:2]

    @jax.jit
    def observe_epoch_(key, q, sched, sim_state, hist):
        return observe_epoch(key, sim_state, hist, q, sched, ob_settings["observe"], 1, 0)[:2]

    sampler_seconds = {}
    for name, fn in (("event", event_epoch), ("observation", observe_epoch_)):
        sampler_seconds[name] = best_time(fn, jax.random.key(1), problem, schedule, state0.sim, state0.history,
                                          repeat=3)
        print(f"{name}-level sampler: one epoch of {args.pages} pages in {sampler_seconds[name] * 1e3:.1f} ms "
              f"({args.pages / sampler_seconds[name]:.3g} page-days/s)")
    result.update(event_sampler_page_days_per_second=round(args.pages / sampler_seconds["event"]),
                  observation_sampler_page_days_per_second=round(args.pages / sampler_seconds["observation"]),
                  sampler_speedup=round(sampler_seconds["event"] / sampler_seconds["observation"], 2))

    # ---- LLC end to end with each sampler (a few epochs, one episode)
    for name, st in (("event", ev_settings), ("observation", ob_settings)):
        lrn = lc.lambda_learn_and_crawl(**st)
        run1 = jax.jit(lambda k, q, lrn=lrn: run_learner(k, lrn, q, args.compare_epochs)[1])
        t = best_time(run1, jax.random.key(3), problem, repeat=1)
        print(f"LLC with the {name}-level sampler: {t / args.compare_epochs:.3f} s per epoch "
              f"({args.pages * args.compare_epochs / t:.3g} page-days/s end to end)")
        result[f"llc_{name}_seconds_per_epoch"] = round(t / args.compare_epochs, 4)

    # ---- the full Fig. 3 workload: three learners, one compiled program
    if not args.skip_full:
        t_all = time.perf_counter()
        settings = lc.llc_settings(problems, family, epsilon=0.4, events_per_window=args.events_per_window)
        learner = lc.lambda_learn_and_crawl(family, **settings)
        grid = grid_product(lc.LLCParams, solver=[0, 1, 2])

        def episode(k, q):
            return jax.vmap(lambda g: run_learner(jax.random.fold_in(k, 1), learner, q, args.epochs, g)[1])(grid)

        run = jax.jit(jax.vmap(episode))
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
        t_total = time.perf_counter() - t_all
        info = jax.tree_util.tree_map(lambda *x: np.concatenate([np.asarray(v) for v in x]), *infos)
        optimum = np.asarray(jax.jit(jax.vmap(lambda q: jaxcrawl.harmonic_cost(q, jaxcrawl.lambda_crawl(q))))(problems))
        ratio = info.harmonic_cost[:, 0] / optimum[:, None]
        page_days = 3 * args.episodes * args.epochs * args.pages
        print(f"Fig. 3 workload (LLC, LLCA, BLLCε), {args.episodes} episodes x {args.epochs} epochs x {args.pages} "
              f"pages: settings + compile + run {t_total:.1f} s (compile {t_compile:.1f} s, run {t_run:.1f} s; "
              f"{page_days / t_run:.3g} learner page-days/s); sampler: "
              f"{sorted(set(np.asarray(info.sampler).ravel().tolist()))} (1 = observation level)")
        print("LLC mean harmonic cost / LambdaCrawl optimum per epoch:", np.round(ratio.mean(0), 4).tolist())
        print(f"overflowed page-windows: {int(info.overflow.sum())}; inner solves converged: "
              f"{int(info.converged.sum())}/{info.converged.size}")
        result.update(fig3_total_seconds=round(t_total, 1), fig3_compile_seconds=round(t_compile, 1),
                      fig3_run_seconds=round(t_run, 1),
                      fig3_learner_page_days_per_second=round(page_days / t_run),
                      llc_final_cost_over_optimum_mean=round(float(ratio[:, -1].mean()), 5),
                      overflow=int(info.overflow.sum()), inner_solves_converged=bool(info.converged.all()),
                      sampler=int(np.asarray(info.sampler).max()))

    # ---- the production heuristics on the same episodes (exact event-driven simulation)
    h_batches = [(keys[i:i + args.batch], jax.tree_util.tree_map(lambda x: x[i:i + args.batch], problems))
                 for i in range(0, args.episodes, args.batch)]
    h_page_days = args.episodes * args.epochs * args.pages
    learner_rate = result.get("fig3_learner_page_days_per_second")
    heuristic_throughput = {}
    for name in HEURISTICS:
        h_learner = heuristic(name)
        run_h = jax.jit(jax.vmap(lambda k, q, hl=h_learner: run_learner(jax.random.fold_in(k, 1), hl, q,
                                                                         args.epochs)[1]))
        compiled_h = run_h.lower(*h_batches[0]).compile()
        t0 = time.perf_counter()
        h_infos = [jax.block_until_ready(compiled_h(k, q)) for k, q in h_batches]
        t_h = time.perf_counter() - t0
        ok = all(bool(np.all(np.asarray(i.converged))) for i in h_infos)
        heuristic_throughput[name] = round(h_page_days / t_h, 1)
        print(f"{name}: {args.episodes} episodes x {args.epochs} days x {args.pages} pages in {t_h:.2f} s "
              f"({h_page_days / t_h:,.0f} page-days/s; learners of Fig. 3: {learner_rate} page-days/s); "
              f"event loops finished: {ok}")
    result.update(heuristic_page_days_per_second=heuristic_throughput)

    settings = ob_settings
    learner = learner0
    # ---- one epoch's estimate + solve: JAX vs NumPy on the same history
    state, _ = jax.jit(lambda k, q: run_learner(k, learner, q, 5))(keys[0], problem)
    hist = state.history
    epoch = 4

    @jax.jit
    def jax_estimate_solve(h, q, previous):
        est, _ = lc.suffix_estimate(h, q.complete, epoch, jnp.inf, 0.5, 1.0, previous)
        return jaxcrawl.lambda_crawl(q.replace(change_rate=est)).rate

    t_jax = best_time(jax_estimate_solve, hist, problem, state.estimate, repeat=3)
    iv, ch, mk = (np.asarray(a) for a in suffix_history(hist, epoch, jnp.inf))
    comp = np.asarray(problem.complete) != 0
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

    result.update(
        history_capacity=settings["history_capacity"],
        estimate_solve_jax_ms=round(t_jax * 1e3, 2),
        estimate_solve_numpy_ms=round(t_np * 1e3, 2),
        estimate_solve_speedup=round(t_np / t_jax, 2),
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
