"""Speed of the exact solvers against a vectorised NumPy bisection baseline.

    python benchmarks/solve.py [--sizes 1000 10000 100000 1000000] [--batch 1000x1000]

For each size n (float32, after compilation): the time of the mixed ``lambda_crawl``,
of ``binary_lambda_crawl``, and of a plain vectorised NumPy solver of the same mixed
LambdaCrawl problem (geometric bisection on the dual to float32 precision: 40 passes),
and the ratio.  Then a vmapped batch of problems.  The last line is one JSON object.
"""
import argparse
import json
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import jaxcrawl  # noqa: E402

from _common import best_time  # noqa: E402


def numpy_lambda_crawl(mu, lam, comp, R, iters=40):
    """Vectorised NumPy baseline: bisection on the dual of the mixed problem (Alg. 1-3 KKT)."""
    def total(nu):
        inc = (-lam + np.sqrt(lam * lam + 4 * mu * lam / nu)) / 2
        rate = np.where(comp, np.minimum(lam, mu / nu), inc)
        return rate, rate.sum()
    lo, hi = 1e-12, 1e12
    for _ in range(iters):
        mid = np.sqrt(lo * hi)
        _, s = total(mid)
        lo, hi = (mid, hi) if s > R else (lo, mid)
    return total(np.sqrt(lo * hi))[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10_000, 100_000, 1_000_000])
    ap.add_argument("--batch", default="1000x1000", help="BATCHxPAGES for the vmapped batch")
    args = ap.parse_args()
    results = {}
    lc = jax.jit(jaxcrawl.lambda_crawl)
    blc = jax.jit(jaxcrawl.binary_lambda_crawl)
    print(f"{'pages':>9} {'lambda_crawl':>14} {'steps':>6} {'binary_lc':>12} {'numpy':>12} {'ratio':>8}")
    for n in args.sizes:
        p = jaxcrawl.synthetic(jax.random.key(0), n, dtype=jnp.float32)
        t_lc = best_time(lc, p)
        steps = int(lc(p).num_steps)
        t_blc = best_time(blc, p)
        mu, lam, comp = (np.asarray(a) for a in (p.importance, p.change_rate, p.complete))
        R = float(p.bandwidth)
        t_np = best_time(lambda: numpy_lambda_crawl(mu, lam, comp, R), repeat=3 if n >= 1e6 else 5)
        ref = numpy_lambda_crawl(mu.astype(np.float64), lam.astype(np.float64), comp, R, iters=200)
        err = float(np.max(np.abs(np.asarray(lc(p).rate) - ref) / ref))
        print(f"{n:>9} {t_lc * 1e3:>11.2f} ms {steps:>6} {t_blc * 1e3:>9.2f} ms {t_np * 1e3:>9.2f} ms {t_np / t_lc:>7.1f}x"
              f"   (max rel. deviation from float64 reference {err:.1e})")
        results[f"lambda_crawl_{n}_ms"] = t_lc * 1e3
        results[f"binary_lambda_crawl_{n}_ms"] = t_blc * 1e3
        results[f"numpy_bisection_{n}_ms"] = t_np * 1e3
        results[f"speedup_vs_numpy_{n}"] = t_np / t_lc
        results[f"lambda_crawl_{n}_steps"] = steps
    b, m = (int(v) for v in args.batch.split("x"))
    keys = jax.random.split(jax.random.key(1), b)
    batch = jax.vmap(lambda k: jaxcrawl.synthetic(k, m, dtype=jnp.float32))(keys)
    t_batch = best_time(jax.jit(jax.vmap(jaxcrawl.lambda_crawl)), batch)
    print(f"vmapped batch of {b} problems x {m} pages: {t_batch * 1e3:.1f} ms")
    results[f"batch_{b}x{m}_ms"] = t_batch * 1e3
    results["device"] = str(jax.devices()[0])
    print(json.dumps(results))


if __name__ == "__main__":
    main()
