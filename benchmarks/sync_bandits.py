"""Benchmark: the whole ICML-20 Figure 1 + Figure 2 workload, and the App. B grid search.

Figure 1 + 2 (Kolobov, Bubeck & Zimmert, ICML 2020, §8 and App. B, Table 1): 150 random
polynomial-cost instances (K = 100, B = 0.4K, r_min = 0.025, r_max = 3, noise 0.1,
scaling 5), MirrorSync (η = 2.7, 240 rounds), AsyncMirrorSync (η = 1.6, l_upd = 20, 480
updates) and AsyncPSGDSync (η = 0.08, l_upd = 20, 480 updates), ε = 0.05, plus the exact
optima J* and J*_ε of every instance.  All of it is one jitted, vmapped call; the timing
includes compilation.  The App. B grid search (η × l_upd) runs as one vmapped call per
algorithm (``grid_search``, on ``run_sweep``).

A plain NumPy implementation of the same three algorithms (vectorised over arms, loops
over instances and updates, bisection for the exact steps) is timed on a few instances in
the same run and extrapolated to 150 instances for the speed ratio.

Usage: python benchmarks/sync_bandits.py [--instances 150] [--numpy-instances 2] [--no-grid]
The last line printed is one JSON object.
"""
from __future__ import annotations

import argparse
import importlib
import json
import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxcrawl import sync_bandits as sb

# By module path, so a package-level re-export of the `mirror_sync` factory cannot shadow it.
ms = importlib.import_module("jaxcrawl.learners")

T1 = sb.TABLE1


# ------------------------------------------------------------------ the JAX workload
def make_workload(num_instances: int, horizon: int):
    eps = T1["exploration"]
    learners = {
        "mirror_sync": ms.mirror_sync(**T1["mirror_sync"]),
        "async_mirror_sync": ms.async_mirror_sync(**T1["async_mirror_sync"]),
        "async_psgd_sync": ms.async_psgd_sync(**T1["async_psgd_sync"]),
    }
    steps = {
        "mirror_sync": ms.num_learner_steps(learners["mirror_sync"], T1["min_rate"], horizon),
        "async_mirror_sync": ms.num_learner_steps(learners["async_mirror_sync"], T1["min_rate"], horizon,
                                                  T1["async_mirror_sync"]["update_interval"]),
        "async_psgd_sync": ms.num_learner_steps(learners["async_psgd_sync"], T1["min_rate"], horizon,
                                                T1["async_psgd_sync"]["update_interval"]),
    }

    @jax.jit
    def workload(key):
        key_inst, key_run = jax.random.split(key)
        bandits = jax.vmap(lambda k: sb.polynomial_bandit(k, T1["num_arms"], dtype=jnp.float32))(
            jax.random.split(key_inst, num_instances))
        j_star = jax.vmap(lambda b: sb.policy_cost(b.costs, sb.optimal_policy(b).x))(bandits)
        j_eps = jax.vmap(lambda b: sb.policy_cost(b.costs, sb.optimal_policy(b, eps).x))(bandits)
        out = {}
        for i, (name, learner) in enumerate(learners.items()):
            keys = jax.random.split(jax.random.fold_in(key_run, i), num_instances)
            j0 = jax.vmap(lambda b: sb.policy_cost(b.costs, learner.init(b).rate))(bandits)
            _, info = jax.vmap(lambda k, b: ms.run_learner(k, learner, b, steps[name]))(keys, bandits)
            out[name] = dict(j0=j0, cost=info.policy_cost, time=info.time[0],
                             probes=info.num_probes, iters=info.num_steps, converged=info.converged)
        return dict(bandits=bandits, j_star=j_star, j_eps=j_eps, runs=out)

    return workload, steps


# ---------------------------------------------------------------- NumPy baseline
def np_bisect_step(kind, r, g, eta, budget, lo, hi, iters=100):
    """Exact mirror-descent / projection step by plain bisection on the dual."""
    if kind == "md":
        base = 1 / r + eta * g

        def x_of(nu):
            d = base + nu
            return np.clip(np.where(d > 0, 1 / np.where(d > 0, d, 1), np.inf), lo, hi)

        a, b = np.min(1 / hi - base), np.max(1 / lo - base)
    else:
        y = r - eta * g

        def x_of(nu):
            return np.clip(y - nu, lo, hi)

        a, b = np.min(y - hi), np.max(y - lo)
    for _ in range(iters):
        mid = 0.5 * (a + b)
        if x_of(mid).sum() > budget:
            a = mid
        else:
            b = mid
    return x_of(0.5 * (a + b))


def np_grad(rng, a_bar, p, noise, rate, n, eps):
    """Per-arm mean of Lemma 2 samples over n_k intervals (NumPy)."""
    k = rate.size
    m = rng.binomial(n, eps)
    arm = np.repeat(np.arange(k), m)
    tau = 1 / rate[arm]
    a = a_bar[arm] * (1 + noise * rng.uniform(-1, 1, arm.size))
    u = rng.uniform(size=arm.size)
    g = a * tau ** p[arm] * (u ** p[arm] - 1) / (eps * rate[arm])
    sums = np.bincount(arm, weights=g, minlength=k)
    return np.where(n > 0, sums / np.maximum(n, 1), 0.0)


def np_policy_cost(a_bar, p, rate):
    return np.mean(a_bar * rate ** (-p) / (p + 1))


def np_run(kind, a_bar, p, seed, horizon):
    rng = np.random.RandomState(seed)
    k, eps = a_bar.size, T1["exploration"]
    lo, hi, budget = T1["min_rate"], T1["max_rate"] / (1 + eps), T1["budget_fraction"] * k / (1 + eps)
    r = np.full(k, budget / k)
    costs = []
    if kind == "mirror_sync":
        eta = T1["mirror_sync"]["learning_rate"]
        for _ in range(horizon):
            n = np.maximum(np.floor(r / lo * (1 + 1e-12)), 1).astype(int)
            g = np_grad(rng, a_bar, p, T1["noise"], r, n, eps) / k
            r = np_bisect_step("md", r, g, eta, budget, lo, hi)
            costs.append(np_policy_cost(a_bar, p, r))
        return np.array(costs)
    cfg = T1[kind]
    eta, interval = cfg["learning_rate"], cfg["update_interval"]
    last = np.zeros(k)
    for _ in range(int(round(horizon / lo / interval))):
        n = np.maximum(np.floor((interval - last) * r * (1 + 1e-12)), 0).astype(int)
        mean = np_grad(rng, a_bar, p, T1["noise"], r, n, eps)
        act = n > 0
        if act.any():
            g = mean[act] / act.sum()
            new = r.copy()
            new[act] = np_bisect_step("md" if kind == "async_mirror_sync" else "pg",
                                      r[act], g, eta, r[act].sum(), lo, hi)
        else:
            new = r
        done = last + n / r
        free = rng.uniform(size=k) < eps
        resched = np.where(free, interval, np.maximum(done + 1 / new, interval))
        last = np.where(act, resched, done) - interval
        r = new
        costs.append(np_policy_cost(a_bar, p, r))
    return np.array(costs)


# ------------------------------------------------------------------------ main
def first_round_below(rounds, gap, threshold):
    hit = np.flatnonzero(gap <= threshold)
    return float(rounds[hit[0]]) if hit.size else float("inf")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--instances", type=int, default=T1["num_instances"])
    ap.add_argument("--horizon", type=int, default=T1["horizon_rounds"])
    ap.add_argument("--numpy-instances", type=int, default=2)
    ap.add_argument("--no-grid", action="store_true")
    args = ap.parse_args()
    print(f"jax {jax.__version__}, devices {jax.devices()}, float32")

    workload, steps = make_workload(args.instances, args.horizon)
    key = jax.random.key(0)
    t0 = time.perf_counter()
    out = jax.block_until_ready(workload(key))
    total = time.perf_counter() - t0
    t0 = time.perf_counter()
    jax.block_until_ready(workload(jax.random.key(1)))
    steady = time.perf_counter() - t0

    n_inst = args.instances
    md_steps = n_inst * (steps["mirror_sync"] + steps["async_mirror_sync"])
    pg_steps = n_inst * steps["async_psgd_sync"]
    print(f"\nFigure 1 + 2 workload: {n_inst} instances x K={T1['num_arms']}, "
          f"{args.horizon} MirrorSync-round equivalents, 3 algorithms")
    print(f"  steps per instance: {steps}")
    print(f"  total (compile + run): {total:7.2f} s")
    print(f"  run only (2nd call):   {steady:7.2f} s")
    print(f"  mirror-descent steps: {md_steps}, projection steps: {pg_steps}")
    print(f"  mirror-descent steps per second: {md_steps / total:,.0f} (incl. compile), "
          f"{md_steps / steady:,.0f} (run only)")
    print(f"  all exact update steps per second (run only): {(md_steps + pg_steps) / steady:,.0f}")

    j_star = np.asarray(out["j_star"])
    j_eps = np.asarray(out["j_eps"])
    print(f"\n  mean J* = {j_star.mean():.5f}, mean J*_eps = {j_eps.mean():.5f}")
    checkpoints = [0, 30, 60, 120, 240]
    curves, summary = {}, {}
    for name, run in out["runs"].items():
        cost = np.asarray(run["cost"])
        rounds = np.asarray(run["time"]) * T1["min_rate"]
        gap0 = float(np.mean(np.asarray(run["j0"]) - j_eps))
        gap = (cost - j_eps[:, None]).mean(0) / gap0
        curves[name] = (rounds, gap)
        at = {c: (float(np.asarray(run["j0"]).mean()) if c == 0 else
                  float(cost[:, np.argmin(np.abs(rounds - c))].mean())) for c in checkpoints if c <= args.horizon}
        line = "  ".join(f"r{c}: {v:.5f}" for c, v in at.items())
        print(f"  {name:18s} mean J  {line}   probes/step {np.asarray(run['probes']).mean():.1f}, "
              f"root-find iters/step {np.asarray(run['iters']).mean():.1f}")
        summary[name] = dict(final_cost=float(cost[:, -1].mean()), final_gap=float(gap[-1]),
                             steps_converged=bool(np.asarray(run["converged"]).all()),
                             rounds_to_half_gap=first_round_below(rounds, gap, 0.5),
                             rounds_to_quarter_gap=first_round_below(rounds, gap, 0.25))
    claims = dict(
        all_reduce_cost=all(s["final_gap"] < 0.5 for s in summary.values()),
        ams_faster_than_psgd=summary["async_mirror_sync"]["rounds_to_half_gap"]
        < summary["async_psgd_sync"]["rounds_to_half_gap"],
        ms_close_to_ams=abs(summary["mirror_sync"]["rounds_to_half_gap"]
                            - summary["async_mirror_sync"]["rounds_to_half_gap"]) <= 10,
    )
    print("  rounds to halve J - J*_eps: " + ", ".join(f"{n} {s['rounds_to_half_gap']:.1f}" for n, s in summary.items()))
    print(f"  claims: {claims}")

    # ---------------------------------------------------------------- NumPy baseline
    n_np = max(1, args.numpy_instances)
    bandits = out["bandits"]
    t0 = time.perf_counter()
    np_final = {}
    for i in range(n_np):
        a_bar = np.asarray(bandits.costs.scale[i], np.float64)
        p = np.asarray(bandits.costs.exponent[i], np.float64)
        for name in ("mirror_sync", "async_mirror_sync", "async_psgd_sync"):
            c = np_run(name, a_bar, p, i, args.horizon)
            np_final.setdefault(name, []).append(c[-1])
    np_time = time.perf_counter() - t0
    np_extrap = np_time / n_np * n_inst
    print(f"\nNumPy baseline (same algorithms, bisection steps): {np_time:.2f} s for {n_np} instances "
          f"-> {np_extrap:.1f} s extrapolated to {n_inst}")
    print(f"  speed-up: {np_extrap / total:.1f}x incl. compile, {np_extrap / steady:.1f}x run only")
    for name, vals in np_final.items():
        jx = np.asarray(out['runs'][name]['cost'])[:n_np, -1]
        print(f"  {name:18s} final J numpy {np.mean(vals):.5f} vs jax {jx.mean():.5f} (same instances, "
              "different random streams)")

    # ---------------------------------------------------------------- grid search
    grid_info = {}
    if not args.no_grid:
        print("\nApp. B grid search (one vmapped call per algorithm, seed 0, one instance):")
        bandit = sb.polynomial_bandit(jax.random.key(0), T1["num_arms"], dtype=jnp.float32)
        j_eps0 = float(sb.policy_cost(bandit.costs, sb.optimal_policy(bandit, T1["exploration"]).x))
        grid_total = 0.0
        for name, factory in (("mirror_sync", ms.mirror_sync), ("async_mirror_sync", ms.async_mirror_sync),
                              ("async_psgd_sync", ms.async_psgd_sync)):
            grid = ms.APP_B_GRIDS[name]
            t0 = time.perf_counter()
            res = ms.grid_search(jax.random.key(0), factory(), bandit, grid["learning_rates"],
                                 grid.get("update_intervals"), horizon_rounds=args.horizon)
            jax.block_until_ready(res)
            dt = time.perf_counter() - t0
            grid_total += dt
            b = int(res.best)
            n_cfg = int(res.learning_rate.shape[0])
            n_upd = int(np.asarray(res.active).sum())
            print(f"  {name:18s} {n_cfg:2d} configs, {n_upd} updates in {dt:5.2f} s (incl. compile); best "
                  f"eta={float(res.learning_rate[b]):g}, l_upd={float(res.update_interval[b]):g}: "
                  f"tail J {float(res.tail_cost[b]):.5f} (J*_eps {j_eps0:.5f})")
            grid_info[name] = dict(configs=n_cfg, seconds=dt, best_learning_rate=float(res.learning_rate[b]),
                                   best_update_interval=float(res.update_interval[b]),
                                   best_tail_cost=float(res.tail_cost[b]))
        grid_info["total_seconds"] = grid_total
        print(f"  grid search total: {grid_total:.2f} s")

    result = dict(
        benchmark="sync_bandits",
        total_seconds=round(total, 3),
        run_seconds=round(steady, 3),
        instances=n_inst,
        num_arms=T1["num_arms"],
        horizon_rounds=args.horizon,
        mirror_descent_steps=md_steps,
        projection_steps=pg_steps,
        md_steps_per_second=round(md_steps / total, 1),
        md_steps_per_second_run_only=round(md_steps / steady, 1),
        numpy_seconds_extrapolated=round(np_extrap, 2),
        speedup_vs_numpy=round(np_extrap / total, 2),
        speedup_vs_numpy_run_only=round(np_extrap / steady, 2),
        mean_j_star=float(j_star.mean()),
        mean_j_star_eps=float(j_eps.mean()),
        algorithms=summary,
        claims=claims,
        grid_search=grid_info,
        target_met=total <= 60.0,
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
