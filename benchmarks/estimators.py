"""Benchmark: the MLE change-rate estimator on 200,000 pages x 200 observations in one call.

Compares ``jaxcrawl.estimators.mle`` (Learning to Crawl eq. 6 solved by the shared
elementwise safeguarded Newton from the sufficient-statistics bracket, jitted; also run
as ``jit(vmap(mle))`` over pages) with two plain NumPy per-page loops on 1e3 pages: a
bisection on the likelihood equation (what the NeurIPS-19 reference implementation does
per page) and rtsafe on the log-score in ``log x`` (same tolerance), and reports the time
per page of each, the ratios, the iterations used, the per-page evaluation counts and
whether every page converged.  The JAX result on the
baselines' pages is checked against them.

Then the same benchmark runs once more in a child process with transparent huge pages
for large allocations (``GLIBC_TUNABLES=glibc.malloc.hugetlb=1``, Linux only; skip with
``--no-huge-pages-run``) and its figures are printed beside these: XLA:CPU writes every
large buffer afresh on each call, and the page faults of a 160 MB buffer are a large
part of the solve here (docs/estimators.md, Performance).

Usage: ``python benchmarks/estimators.py [--pages 200000] [--obs 200] [--baseline-pages 1000] [--x64]``.
The last line printed is one JSON object.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import time

import numpy as np


def simulate(num_pages, num_obs, dtype, seed=0):
    """Poisson crawls (rate 1) of Poisson-changing pages (rates log-uniform in [0.05, 10])."""
    rng = np.random.default_rng(seed)
    xi = np.exp(rng.uniform(np.log(0.05), np.log(10.0), num_pages)).astype(dtype)
    w = rng.standard_exponential((num_pages, num_obs), dtype=np.float32).astype(dtype) + dtype(1e-3)
    u = rng.random((num_pages, num_obs), dtype=np.float32)
    changed = u < -np.expm1(-xi[:, None] * w)
    return w, changed


def numpy_mle_page(w, c, lo, hi, rtol, max_steps=60):
    """One page, plain NumPy: the same safeguarded Newton as ``jaxcrawl.estimators.mle``.

    For the score ``psi(x) = log S(x) - log W_unchanged`` of the likelihood equation
    (Learning to Crawl eq. 6; ``S(x) = sum_changed w/(e^{xw}-1)``): from the closed-form
    guess, up to three Newton steps in ``x`` while left of the root, then rtsafe on
    ``z = log x``: Newton inside the shrinking bracket when it at least halves the step,
    bisection otherwise; stop at a Newton step <= ``rtol`` in ``z`` (the Newton point is
    returned) or at a bracket a few ulps wide.
    """
    wc, wu = w[c], w[~c].sum()
    if wc.size == 0:
        return lo
    if wu == 0:
        return hi

    def psi(x):
        """The score and its derivative with respect to z = log x."""
        t = wc / np.expm1(x * wc)
        s = t.sum()
        if not s > 0:
            return -math.inf, math.nan
        return math.log(s) - math.log(wu), -x * (t * (t + wc)).sum() / s

    if not psi(lo)[0] > 0:
        return lo
    if not psi(hi)[0] < 0:
        return hi
    eps = float(np.finfo(w.dtype).eps)
    za, zb = math.log(lo), math.log(hi)
    n, u = w.size, wc.size
    x = min(max(math.log1p((u + 0.5) / max(n - u, 0.5)) / w.mean(), lo * 1.001), hi * 0.999)
    left = min(3, max_steps - 1)
    for _ in range(left):
        f, df = psi(x)
        if f > 0 and df < 0 and math.isfinite(f) and math.isfinite(df):
            x = min(max(x - f * x / df, lo), hi)  # df is d psi / d log x
    z = min(max(math.log(x), za), zb)
    dz_old = zb - za
    for _ in range(max_steps - left):
        f, df = psi(math.exp(z))
        if f > 0:
            za = z
        elif f < 0:
            zb = z
        else:
            return math.exp(z)
        if zb - za <= 4 * eps * max(abs(z), 1.0):
            return math.exp(z)
        ok = df < 0 and math.isfinite(df) and math.isfinite(f)
        newton = z - f / df if ok else math.nan
        if ok and abs(newton - z) <= rtol:
            return math.exp(newton)
        if ok and za < newton < zb and abs(2 * f) <= abs(dz_old * df):
            z_new = newton
        else:
            z_new = 0.5 * (za + zb)
        dz_old, z = abs(z_new - z), z_new
    return math.exp(z)


def numpy_bisection_page(w, c, lo, hi, rtol, max_steps=200):
    """One page, plain NumPy bisection in ``log x`` on the likelihood equation
    ``sum_changed w/(e^{xw}-1) = sum_unchanged w`` until the bracket is ``rtol`` wide
    (relative): the per-page method of the NeurIPS-19 reference implementation."""
    wc, wu = w[c], w[~c].sum()
    if wc.size == 0:
        return lo
    if wu == 0:
        return hi
    za, zb = math.log(lo), math.log(hi)
    for _ in range(max_steps):
        if zb - za <= rtol:
            break
        z = 0.5 * (za + zb)
        if (wc / np.expm1(np.minimum(math.exp(z) * wc, 700.0))).sum() > wu:
            za = z
        else:
            zb = z
    return math.exp(0.5 * (za + zb))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=200_000)
    parser.add_argument("--obs", type=int, default=200)
    parser.add_argument("--baseline-pages", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--x64", action="store_true", help="run in float64")
    parser.add_argument("--no-huge-pages-run", action="store_true",
                        help="skip the second run with transparent huge pages (see below)")
    args = parser.parse_args(argv)

    import jax

    if args.x64:
        jax.config.update("jax_enable_x64", True)
    from jaxcrawl import estimators as E

    dtype = np.float64 if args.x64 else np.float32
    lo, hi = 1e-9, 25.0  # the estimators' default clip range (L2C §6)
    rtol = 4 * float(np.finfo(dtype).eps) ** 0.75  # the estimators' default tolerance (mle's docstring)

    t0 = time.perf_counter()
    w, c = simulate(args.pages, args.obs, dtype)
    gen_seconds = time.perf_counter() - t0
    print(f"data         {args.pages} pages x {args.obs} observations ({np.dtype(dtype).name}), "
          f"simulated in {gen_seconds:.1f} s")

    w_dev, c_dev = jax.device_put(w), jax.device_put(c)
    results = {}
    for name, fn in (
        ("jit(mle)", jax.jit(lambda w, c: E.mle(w, c, return_info=True))),
        ("jit(vmap(mle))", jax.jit(jax.vmap(lambda w, c: E.mle(w, c, return_info=True)))),
    ):
        t0 = time.perf_counter()
        out = jax.block_until_ready(fn(w_dev, c_dev))
        first = time.perf_counter() - t0
        times = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            out = jax.block_until_ready(fn(w_dev, c_dev))
            times.append(time.perf_counter() - t0)
        best = min(times)
        results[name] = (first, best, np.asarray(out.rate), out)
        print(f"{name:14s} {best:.3f} s for {args.pages} pages ({best / args.pages * 1e6:.3f} us/page); "
              f"first call incl. compile {first:.2f} s")

    nb = min(args.baseline_pages, args.pages)
    w64, c64 = w[:nb].astype(np.float64), c[:nb]
    t0 = time.perf_counter()
    base = np.array([numpy_mle_page(w64[i], c64[i], lo, hi, rtol) for i in range(nb)])
    base_seconds = time.perf_counter() - t0
    print(f"numpy rtsafe   {base_seconds:.3f} s for {nb} pages ({base_seconds / nb * 1e6:.1f} us/page)")
    t0 = time.perf_counter()
    bis = np.array([numpy_bisection_page(w64[i], c64[i], lo, hi, rtol) for i in range(nb)])
    bis_seconds = time.perf_counter() - t0
    print(f"numpy bisect   {bis_seconds:.3f} s for {nb} pages ({bis_seconds / nb * 1e6:.1f} us/page)")

    jax_best = results["jit(mle)"][1]
    per_page_jax = jax_best / args.pages
    per_page_np = base_seconds / nb
    ratio = per_page_np / per_page_jax
    ratio_bis = bis_seconds / nb / per_page_jax
    agree_bis = float(np.max(np.abs(results["jit(mle)"][2][:nb] / bis - 1)))
    agree = float(np.max(np.abs(results["jit(mle)"][2][:nb] / base - 1)))
    agree_vmap = float(np.max(np.abs(results["jit(vmap(mle))"][2] / results["jit(mle)"][2] - 1)))
    at_bounds = float(np.mean((results["jit(mle)"][2] <= lo) | (results["jit(mle)"][2] >= hi)))
    info = results["jit(mle)"][3]
    steps = int(info.num_steps)
    converged = bool(np.all(np.asarray(info.converged)))
    print(f"ratio          numpy bisection per-page time / jax per-page time = {ratio_bis:.0f}x "
          f"(numpy rtsafe: {ratio:.0f}x)")
    page_steps = np.asarray(info.steps)
    iterated = page_steps > 0
    frac3 = float(np.mean(page_steps[iterated] <= 3)) if iterated.any() else 1.0
    print(f"convergence    every page converged: {converged}; {steps} iterations; per page evaluations "
          f"(iterated pages) {np.bincount(page_steps[iterated]).tolist()}; <= 3: {frac3:.1%}")
    print(f"agreement      max relative difference vs numpy bisection: {agree_bis:.2e}")
    print(f"agreement      max relative difference vs numpy on {nb} pages: {agree:.2e}; vmap vs batched: {agree_vmap:.2e}")
    summary = {
        "benchmark": "estimators.mle",
        "pages": args.pages,
        "observations": args.obs,
        "dtype": np.dtype(dtype).name,
        "jax_seconds": jax_best,
        "jax_first_call_seconds": results["jit(mle)"][0],
        "jax_vmap_seconds": results["jit(vmap(mle))"][1],
        "jax_us_per_page": per_page_jax * 1e6,
        "numpy_baseline_pages": nb,
        "numpy_seconds": base_seconds,
        "numpy_us_per_page": per_page_np * 1e6,
        "per_page_speedup": ratio,
        "numpy_bisection_seconds": bis_seconds,
        "numpy_bisection_us_per_page": bis_seconds / nb * 1e6,
        "per_page_speedup_vs_bisection": ratio_bis,
        "max_rel_diff_vs_bisection": agree_bis,
        "fraction_within_3_evaluations": frac3,
        "max_evaluations_per_page": int(page_steps.max()),
        "max_rel_diff_vs_numpy": agree,
        "max_rel_diff_vmap_vs_batched": agree_vmap,
        "fraction_at_clip": at_bounds,
        "num_steps": steps,
        "all_converged": converged,
        "devices": [str(d) for d in jax.devices()],
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "jax": jax.__version__,
    }
    huge = _huge_pages_run(argv, args)
    if huge is not None:
        summary["huge_pages_jax_us_per_page"] = huge["jax_us_per_page"]
        summary["huge_pages_numpy_bisection_us_per_page"] = huge["numpy_bisection_us_per_page"]
        summary["huge_pages_speedup_vs_bisection"] = huge["per_page_speedup_vs_bisection"]
        print(f"huge pages     the same run under {HUGE_PAGES}: jax {huge['jax_us_per_page']:.3f} us/page, "
              f"numpy bisection {huge['numpy_bisection_us_per_page']:.1f} us/page, "
              f"ratio {huge['per_page_speedup_vs_bisection']:.0f}x")
    print(json.dumps(summary))
    return 0


#: glibc's tunable that backs large allocations with transparent huge pages (Linux, glibc
#: >= 2.35, THP in "madvise" mode).  XLA:CPU allocates every large buffer afresh on each
#: call, and on this machine writing a fresh 160 MB buffer costs 35-48 ms in page faults
#: with 4 KB pages and ~13 ms with 2 MB ones.  It can only be set when a process starts.
HUGE_PAGES = "GLIBC_TUNABLES=glibc.malloc.hugetlb=1"


def _huge_pages_run(argv, args):
    """The same benchmark in a child process with :data:`HUGE_PAGES` (its JSON summary), or
    None where it does not apply or was asked not to run."""
    if args.no_huge_pages_run or not sys.platform.startswith("linux"):
        return None
    if "hugetlb" in os.environ.get("GLIBC_TUNABLES", ""):
        return None  # this run already is the huge-pages one
    key, value = HUGE_PAGES.split("=", 1)
    env = dict(os.environ, **{key: value})
    cmd = [sys.executable, os.path.abspath(__file__), *(sys.argv[1:] if argv is None else argv),
           "--no-huge-pages-run"]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


if __name__ == "__main__":
    sys.exit(main())
