"""Accuracy across the dtype's range (not a speed benchmark): for every built-in objective,
``num`` problems whose importances, change rates and bandwidth are drawn *independently*
across 10^(±E) (E = 30 in float32, 280 with --x64), solved with ``jaxcrawl.solve``.  Prints,
per objective, how many solves converged, how many of those meet the budget to 16 eps
(summed in float64), the median and worst budget miss in eps, and how many reported
``converged=False`` -- the figures quoted for the "no silent wrong answer" issue.

    python benchmarks/dynamic_range.py [--num 240] [--x64]
"""
from __future__ import annotations

import argparse
import warnings

import numpy as np

OBJECTIVES = ("harmonic", "harmonic-approx", "binary", "binary-epsilon", "delay", "uniform")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--num", type=int, default=240)
    ap.add_argument("--x64", action="store_true")
    args = ap.parse_args()
    import jax

    if args.x64:
        jax.config.update("jax_enable_x64", True)
    import jaxcrawl

    dt = np.dtype(jax.numpy.result_type(float))
    E = 280 if dt == np.float64 else 30
    eps = float(np.finfo(dt).eps)
    rng = np.random.default_rng(0)
    rows = {name: dict(n=0, conv=0, ok=0, miss=[]) for name in OBJECTIVES}
    warnings.simplefilter("ignore", RuntimeWarning)
    for k in range(args.num):
        name = OBJECTIVES[k % len(OBJECTIVES)]
        r = np.random.default_rng(k % 4)
        imp, lam = r.uniform(0.3, 3.0, 10), np.exp(r.uniform(-1.5, 1.5, 10))
        comp = np.arange(10) < 2
        ei, el, eb = rng.uniform(-1, 1, 3)
        try:
            p = jaxcrawl.CrawlProblem(imp * 10.0 ** (E * ei), lam * 10.0 ** (E * el), 10.0 ** (E * eb), comp)
        except ValueError:  # every page complete below the bandwidth: refused by name
            continue
        pol = jaxcrawl.solve(p, jaxcrawl.binary(0.4) if name == "binary-epsilon" else name)
        row = rows[name]
        row["n"] += 1
        if bool(pol.converged):
            R = float(p.bandwidth)
            miss = abs(float(np.sum(np.asarray(pol.rate, np.float64))) - R) / R / eps
            row["conv"] += 1
            row["ok"] += miss <= 16
            row["miss"].append(miss)
    print(f"{dt.name}, exponents within ±{E}, {args.num} draws")
    print(f"{'objective':<16} {'draws':>5} {'converged':>9} {'<=16 eps':>8} {'median eps':>10} {'worst eps':>9} "
          f"{'flagged':>7}")
    for name, row in rows.items():
        m = np.asarray(row["miss"]) if row["miss"] else np.zeros(1)
        print(f"{name:<16} {row['n']:>5} {row['conv']:>9} {row['ok']:>8} {np.median(m):>10.2f} {m.max():>9.1f} "
              f"{row['n'] - row['conv']:>7}")


if __name__ == "__main__":
    main()
