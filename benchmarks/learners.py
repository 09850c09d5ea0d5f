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

``--research`` measures instead what a researcher's sweep costs (and nothing else):
compile times (wall and process CPU) of ``jit(lambda_crawl)``, ``jit(binary_lambda_crawl)``,
one LambdaLearnAndCrawl ``run_learner`` of ``--research-epochs`` epochs and the vmapped
``--seeds``-seed run, each divided by the compile time of a 20-line plain JAX bisection of
the same ``--research-pages``-page problem compiled in the same process (each the least of
``--compile-repeat`` compilations, the baseline's of twice as many, before and after), with each
program's kernel count (XLA fusions: compile time follows it, and it does not vary with the
machine's load); the time of ``llc_settings``; and, at steady state (compiled), the vmapped ``--grid`` × ``--seeds``
sweep against the Python loop of the same runs, for LLC and for MirrorSync (ICML-20
Table 1 bandit).  Usage: ``python benchmarks/learners.py --research [--research-pages 200]
[--research-epochs 10] [--seeds 8] [--grid 8] [--sync-steps 20]``.
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


# ------------------------------------------------------------------ research loop
def plain_bisection(q):
    """LambdaCrawl by 100 bisection steps on log ν: the 20-line baseline a researcher writes."""
    def rates(nu):
        s2 = q.importance * q.change_rate / nu
        inc = 2.0 * s2 / (q.change_rate + jnp.sqrt(q.change_rate ** 2 + 4.0 * s2))
        return jnp.where(q.complete > 0, jnp.minimum(q.change_rate, q.importance / nu), inc)

    def body(_, ab):
        a, b = ab
        mid = 0.5 * (a + b)
        up = rates(jnp.exp(mid)).sum() > q.bandwidth
        return jnp.where(up, mid, a), jnp.where(up, b, mid)

    a, b = jax.lax.fori_loop(0, 100, body, (jnp.log(1e-12), jnp.log(1e12)))
    return rates(jnp.exp(0.5 * (a + b)))


def kernels(compiled) -> int:
    """The compiled program's kernels: XLA fusions in its optimised HLO (each is compiled on
    its own, so compile time follows their count; a steadier figure than the times)."""
    return compiled.as_text().count("fusion(")


def compile_seconds(fn, *args, repeat=1):
    """``(wall, cpu)`` seconds of ``jax.jit(fn).lower(*args).compile()`` -- tracing, lowering
    and XLA's compilation; a new function object each time, so nothing is cached in
    memory -- the least of ``repeat`` compilations (the machine's noise only adds), and the
    compiled program."""
    best = (np.inf, np.inf)
    for _ in range(repeat):
        fresh = lambda *a: fn(*a)  # noqa: E731
        w0, c0 = time.perf_counter(), time.process_time()
        compiled = jax.jit(fresh).lower(*args).compile()
        best = min(best[0], time.perf_counter() - w0), min(best[1], time.process_time() - c0)
    return best[0], best[1], compiled


def research(args):
    from jaxcrawl.learners import LLCParams, SyncHyperparams, mirror_sync
    from jaxcrawl.sync_bandits import polynomial_bandit

    print(f"jax {jax.__version__} on {jax.devices()[0].platform}, {os.cpu_count()} CPUs; "
          f"x64={jax.config.jax_enable_x64}; load average {os.getloadavg()[0]:.1f}")
    q = jaxcrawl.synthetic(jax.random.key(0), args.research_pages)
    result = dict(benchmark="learners-research", device=jax.devices()[0].platform, pages=args.research_pages,
                  epochs=args.research_epochs, seeds=args.seeds, grid=args.grid,
                  load_average=round(os.getloadavg()[0], 1))
    compile_seconds(lambda x: x + 1, 1.0)  # the first compile of a process pays one-off set-up
    rep = args.compile_repeat
    w, c, compiled = compile_seconds(plain_bisection, q, repeat=2 * rep)
    base = dict(wall=w, cpu=c)
    print(f"plain JAX bisection ({args.research_pages} pages): compile {w:.2f} s wall, {c:.2f} s CPU, "
          f"{kernels(compiled)} kernels")
    result.update(bisection_compile_wall=round(w, 3), bisection_compile_cpu=round(c, 3),
                  bisection_kernels=kernels(compiled))

    def report(name, w, c, compiled):
        rw, rc = w / base["wall"], c / base["cpu"]
        print(f"{name}: compile {w:.2f} s wall, {c:.2f} s CPU = {rw:.1f}x / {rc:.1f}x the bisection, "
              f"{kernels(compiled)} kernels")
        result.update({f"{name}_compile_wall": round(w, 3), f"{name}_compile_cpu": round(c, 3),
                       f"{name}_over_bisection_cpu": round(rc, 2), f"{name}_over_bisection_wall": round(rw, 2),
                       f"{name}_kernels": kernels(compiled)})

    for name, fn in (("lambda_crawl", lambda p: jaxcrawl.lambda_crawl(p).rate),
                     ("binary_lambda_crawl", lambda p: jaxcrawl.binary_lambda_crawl(p).rate)):
        report(name, *compile_seconds(fn, q, repeat=rep))

    t0 = time.perf_counter()
    settings = lc.llc_settings(q)
    t_settings = time.perf_counter() - t0
    learner = lc.lambda_learn_and_crawl(**settings)
    print(f"llc_settings + factory: {t_settings:.2f} s (first call in the process)")
    result.update(llc_settings_seconds=round(t_settings, 3))
    epochs = args.research_epochs

    def one(k, prm):
        return run_learner(k, learner, q, epochs, prm)[1].harmonic_cost

    prm0 = LLCParams(smoothing=jnp.float32(0.5))
    w, c, run_one = compile_seconds(one, jax.random.key(1), prm0, repeat=rep)
    report("llc_run", w, c, run_one)
    seeds = jax.random.split(jax.random.key(2), args.seeds)
    report("llc_seed_sweep", *compile_seconds(jax.vmap(one, in_axes=(0, None)), seeds, prm0, repeat=rep))
    w, c, _ = compile_seconds(plain_bisection, q, repeat=rep)  # the baseline again, after: the least of both
    base.update(wall=min(base["wall"], w), cpu=min(base["cpu"], c))
    result.update(bisection_compile_wall=round(base["wall"], 3), bisection_compile_cpu=round(base["cpu"], 3))
    for name in ("lambda_crawl", "binary_lambda_crawl", "llc_run", "llc_seed_sweep"):
        result[f"{name}_over_bisection_cpu"] = round(result[f"{name}_compile_cpu"] / base["cpu"], 2)
        result[f"{name}_over_bisection_wall"] = round(result[f"{name}_compile_wall"] / base["wall"], 2)
    print("ratios to the least bisection compile of the run (wall / CPU): " + ", ".join(
        f"{name} {result[f'{name}_over_bisection_wall']}x / {result[f'{name}_over_bisection_cpu']}x"
        for name in ("lambda_crawl", "binary_lambda_crawl", "llc_run", "llc_seed_sweep")))

    # steady state: grid x seeds vmapped in one program against the Python loop of the runs
    grid = grid_product(LLCParams, smoothing=list(np.linspace(0.25, 1.0, args.grid)))
    _, _, sweep_c = compile_seconds(jax.vmap(jax.vmap(one, in_axes=(0, None)), in_axes=(None, 0)), seeds, grid)
    cells = [(seeds[s], jax.tree_util.tree_map(lambda a, g=g: a[g], grid))
             for g in range(args.grid) for s in range(args.seeds)]

    def loop(compiled, cells):
        return [compiled(k, p) for k, p in cells]

    def steady(name, compiled_sweep, sweep_args, compiled_one, cells):
        t_sweep = best_time(compiled_sweep, *sweep_args, repeat=3)
        t_loop = best_time(loop, compiled_one, cells, repeat=3)
        print(f"{name}: {len(cells)} runs vmapped in {t_sweep * 1e3:.1f} ms, as a Python loop of compiled runs "
              f"{t_loop * 1e3:.1f} ms: the sweep is {t_loop / t_sweep:.2f}x the loop")
        result.update({f"{name}_sweep_ms": round(t_sweep * 1e3, 2), f"{name}_loop_ms": round(t_loop * 1e3, 2),
                       f"{name}_sweep_over_loop": round(t_loop / t_sweep, 2)})

    steady("llc", sweep_c, (seeds, grid), run_one, cells)

    bandit = polynomial_bandit(jax.random.key(0), 100, dtype=jnp.float32)
    ms = mirror_sync()
    steps = args.sync_steps

    def one_sync(k, eta):
        return run_learner(k, ms, bandit, steps, SyncHyperparams(eta, jnp.float32(0.05), jnp.float32(1.0)))[1].policy_cost

    etas = jnp.asarray(np.geomspace(0.5, 9.0, args.grid), jnp.float32)
    _, _, one_sync_c = compile_seconds(one_sync, seeds[0], etas[0])
    _, _, sweep_sync_c = compile_seconds(jax.vmap(jax.vmap(one_sync, in_axes=(0, None)), in_axes=(None, 0)),
                                         seeds, etas)
    steady("mirror_sync", sweep_sync_c, (seeds, etas), one_sync_c,
           [(seeds[s], etas[g]) for g in range(args.grid) for s in range(args.seeds)])
    print(json.dumps(result))


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
    ap.add_argument("--research", action="store_true",
                    help="only the research loop's compile ratios and sweep-vs-loop times")
    ap.add_argument("--research-pages", type=int, default=200)
    ap.add_argument("--research-epochs", type=int, default=10)
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--grid", type=int, default=8)
    ap.add_argument("--sync-steps", type=int, default=20)
    ap.add_argument("--compile-repeat", type=int, default=3,
                    help="compilations of each program in --research (the least is reported)")
    args = ap.parse_args()
    if args.research:
        return research(args)
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
