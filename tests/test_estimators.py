"""Tests for jaxcrawl.estimators: mathematical truths checked on data simulated here with NumPy.

The default lane computes in float32 (NumPy float64 inputs are cast on the way in); the x64
lane in float64.  Comparisons with the float64 NumPy references use tolerances derived
from the dtype's eps and the conditioning of each estimating equation
(:func:`root_tol`), so they check the math in both lanes.  Tests that need float64 to
mean anything (1e-9 identities, finite differences) are marked ``x64``.
"""
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import jaxcrawl
from jaxcrawl import estimators as E
from jaxcrawl._src.history import DEFAULT_MAX_RATE, DEFAULT_MIN_RATE
from jaxcrawl.estimators._confidence import bennett_psi

from helpers import count_compiles, fd_grad

# ----------------------------------------------------------------------------------------
# NumPy simulation and references
# ----------------------------------------------------------------------------------------


def simulate_partial(rng, xi, intervals):
    """o_n = 1 iff a Poisson(ξ) process has an event in an interval of length w_n."""
    xi = np.asarray(xi, float)[..., None]
    return rng.random(intervals.shape) < -np.expm1(-xi * intervals)


def ref_roots(kind, w, c, m, lo, hi):
    """Float64 NumPy references, one per row of the padded ``(rows, k)`` history: the MLE
    (``kind="mle"``, the score of L2C eq. 6) or moment matching (``"mm"``, L2C eq. 7) by
    plain geometric bisection on ``[lo, hi]``, all rows at once."""
    w = np.where(m, np.asarray(w, float), 0.0)
    c = np.asarray(c, bool) & m
    n, u = m.sum(1), c.sum(1)
    lo = np.broadcast_to(np.asarray(lo, float), n.shape)
    hi = np.broadcast_to(np.asarray(hi, float), n.shape)

    def f(x):
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            if kind == "mle":
                t = np.where(c, w / np.expm1(x[:, None] * np.where(c, w, 1.0)), 0.0)
                return t.sum(1) - np.where(c, 0.0, w).sum(1)
            e = np.where(m, np.exp(-x[:, None] * w), 0.0)
            return (e.sum(1) - (m & ~c).sum(1)) / np.maximum(n, 1)

    a, b = lo.copy(), hi.copy()
    for _ in range(200):
        mid = np.sqrt(a * b)
        pos = f(mid) > 0
        a, b = np.where(pos, mid, a), np.where(pos, b, mid)
        if np.all(b / a - 1 < 1e-15):
            break
    root = np.sqrt(a * b)
    root = np.where(f(lo) <= 0, lo, np.where(f(hi) >= 0, hi, root))
    return np.where(u == 0, lo, np.where(u == n, hi, root))


def ref_mle(w, c, lo, hi):
    """The MLE of one history (:func:`ref_roots`)."""
    return float(ref_roots("mle", np.atleast_2d(w), np.atleast_2d(c), np.ones((1, np.size(w)), bool), lo, hi)[0])


def ref_mm(w, c, lo, hi):
    """Moment matching on one history (:func:`ref_roots`)."""
    return float(ref_roots("mm", np.atleast_2d(w), np.atleast_2d(c), np.ones((1, np.size(w)), bool), lo, hi)[0])


def root_tol(kind, x, w, c, eps):
    """Relative accuracy to expect of a root of L2C eq. 6 (``kind="mle"``) or eq. 7
    (``"mm"``) computed in a dtype with machine epsilon ``eps``, at the root ``x``.

    The score ψ is a log-ratio of sums of ``k`` positive terms, so rounding moves it by at
    most ``(2k + 8) eps``; casting the intervals to the dtype moves it by ``eps * sens``
    (``sens`` = Σ|w ∂ψ/∂w|); a change δψ moves the root by ``δψ / |x ψ'(x)|`` relative.
    The root-finder stops at a bracket of ``4 eps max(|log x|, 1)`` in log space at worst,
    and the result is rounded once.  The float64 reference carries the same error at
    eps = 2.2e-16, covered by a factor 4.
    """
    w = np.asarray(w, float)
    c = np.asarray(c, bool)
    k = max(w.size, 1)
    step = 4 * max(abs(math.log(x)), 1.0) + 1
    if c.sum() == 0 or (~c).sum() == 0:
        return 4 * eps * step
    if kind == "mle":
        xw = x * w[c]
        t = w[c] / np.expm1(xw)
        s = t.sum()
        if not s > 0:
            return 4 * eps * step
        slope = x * np.sum(t * (t + w[c])) / s                 # |x ψ'(x)|
        dlogt = np.abs(1 - xw * np.exp(xw) / np.expm1(xw))     # |d log t / d log w|
        sens = 1 + np.sum(t * dlogt) / s
    else:
        e = np.exp(-x * w)
        s = e.sum()
        if not s > 0:
            return 4 * eps * step
        slope = x * np.sum(w * e) / s
        sens = slope
    if not slope > 0:
        return 4 * eps * step
    return 4 * eps * ((2 * k + 8 + sens) / slope + step)


def rel(a, b):
    return np.max(np.abs(np.asarray(a, float) / np.asarray(b, float) - 1))


def eps_of(a):
    return float(np.finfo(np.asarray(a).dtype).eps)


# ----------------------------------------------------------------------------------------
# Shared data, in a few fixed shapes: every estimator compiles once per shape and dtype
# ----------------------------------------------------------------------------------------

ROWS, K = 8, 12  # the small padded shape of the edge-case, gradient and property tests


def small(w, c, m=None):
    """Histories padded into the ``(ROWS, K)`` shape (extra rows empty)."""
    w = np.atleast_2d(np.asarray(w))
    c = np.atleast_2d(np.asarray(c, bool))
    m = np.ones(w.shape, bool) if m is None else np.atleast_2d(np.asarray(m, bool))
    rows, k = w.shape
    wp = np.ones((ROWS, K), w.dtype)
    cp = np.zeros((ROWS, K), bool)
    mp = np.zeros((ROWS, K), bool)
    wp[:rows, :k], cp[:rows, :k], mp[:rows, :k] = w, c, m
    return wp, cp, mp


@functools.cache
def irregular():
    """300 histories of up to 40 irregular intervals (rates 0.02-20), NaN in the padding,
    with their float64 NumPy reference estimates in [1e-6, 1e3]."""
    rng = np.random.default_rng(0)
    n, k = 300, 40
    xi = np.exp(rng.uniform(np.log(0.02), np.log(20), n))
    w = rng.lognormal(0.0, 1.0, (n, k))
    c = simulate_partial(rng, xi, w)
    mask = np.arange(k)[None, :] < rng.integers(0, k + 1, n)[:, None]
    w_pad = np.where(mask, w, np.nan)  # masked entries may hold anything
    ref = {kind: ref_roots(kind, w, c, mask, 1e-6, 1e3) for kind in ("mle", "mm")}
    return w, w_pad, c, mask, ref


IRR = dict(min_rate=1e-6, max_rate=1e3)


def assert_close_to(kind, got, want, w, c, mask):
    """Per history: |got / want - 1| <= root_tol (``want`` the float64 references)."""
    got = np.asarray(got)
    eps = float(np.finfo(got.dtype).eps)
    for i, (g, x) in enumerate(zip(got.ravel(), want)):
        wi, ci = w[i][mask[i]], c[i][mask[i]]
        assert abs(float(g) / x - 1) <= root_tol(kind, x, wi, ci, eps), (kind, i, float(g), x)


# ----------------------------------------------------------------------------------------
# Agreement with plain NumPy references
# ----------------------------------------------------------------------------------------


@pytest.mark.long
def test_mle_and_mm_match_numpy_bisection_on_irregular_histories():
    w, w_pad, c, mask, ref = irregular()
    assert_close_to("mle", E.mle(w_pad, c, mask, **IRR), ref["mle"], w, c, mask)
    assert_close_to("mm", E.moment_matching(w_pad, c, mask, **IRR), ref["mm"], w, c, mask)


@pytest.mark.long
@pytest.mark.x64
def test_mle_and_mm_match_numpy_bisection_to_1e9_in_float64():
    w, w_pad, c, mask, ref = irregular()
    got_mle = np.asarray(E.mle(w_pad, c, mask, **IRR))
    assert got_mle.dtype == np.float64
    assert rel(got_mle, ref["mle"]) < 1e-9
    assert rel(E.moment_matching(w_pad, c, mask, **IRR), ref["mm"]) < 1e-9


@pytest.mark.x64
def test_float32_paths_agree_with_float64():
    """float32 inputs stay float32 with x64 on.  (The iterating estimators: float32 runs
    of the property and huge/tiny tests below, against float64 references.)"""
    w, w_pad, c, mask, _ = irregular()
    w32 = w_pad.astype(np.float32)
    r32, r64 = E.naive(w32, c, mask), E.naive(w_pad, c, mask)
    assert r32.dtype == jnp.float32
    np.testing.assert_allclose(r32, r64, rtol=4 * (40 + 2) * eps_of(r32))
    for fn in (E.lemma3_halfwidth, E.lemma8_halfwidth):
        h = fn(w32, mask, delta=0.1, min_rate=0.1, max_rate=2.0)
        assert h.dtype == jnp.float32
        np.testing.assert_allclose(h, fn(w_pad, mask, delta=0.1, min_rate=0.1, max_rate=2.0),
                                   rtol=4 * (40 + 8) * eps_of(h))
    state, rates = E.run_online(E.sam(), c, jnp.float32(1.0))
    assert rates.dtype == jnp.float32


def test_log_likelihood_matches_numpy_and_is_maximised_by_mle():
    w, w_pad, c, mask, _ = irregular()
    k = w.shape[1]

    def terms(x):
        x = np.asarray(x, float)[:, None]
        return np.where(mask, np.where(c, np.log1p(-np.exp(-x * w)), -x * w), 0.0)

    xi = np.full(len(w), 0.9)
    got = E.log_likelihood(xi, w_pad, c, mask)
    eps = eps_of(got)
    # Rounding of a sum of k terms is relative to Σ|terms|.
    assert np.all(np.abs(np.asarray(got) - terms(xi).sum(1)) <= 4 * (k + 4) * eps * np.abs(terms(xi)).sum(1))
    r = np.asarray(E.mle(w_pad, c, mask, **IRR))
    ll = np.asarray(E.log_likelihood(r, w_pad, c, mask), float)
    tol = 4 * (k + 4) * eps * (1 + np.abs(terms(r)).sum(1))
    for f in (0.9, 0.99, 0.999, 1.001, 1.01, 1.1):
        inside = (r * f >= IRR["min_rate"]) & (r * f <= IRR["max_rate"])  # the MLE maximises over the clip range
        assert np.all((ll >= np.asarray(E.log_likelihood(r * f, w_pad, c, mask)) - tol)[inside])


def test_naive_matches_formula():
    rng = np.random.default_rng(2)
    w = rng.exponential(1.0, (20, 15))
    c = rng.random((20, 15)) < 0.4
    m = rng.random((20, 15)) < 0.8
    want = np.sum(c & m, 1) / np.sum(np.where(m, w, 0), 1)
    got = E.naive(w, c, m)
    np.testing.assert_allclose(got, want, rtol=4 * (15 + 2) * eps_of(got))


# ----------------------------------------------------------------------------------------
# MLE == moment matching under equal intervals (L2C §4)
# ----------------------------------------------------------------------------------------


@pytest.mark.x64
@pytest.mark.parametrize("interval", [0.1, 0.7, 3.0])
def test_mle_equals_moment_matching_under_equal_intervals(interval):
    rng = np.random.default_rng(3)
    n, k = 300, 40  # the shape of irregular(): no new compilation
    xi = np.exp(rng.uniform(np.log(0.05), np.log(5), n))
    w = np.full((n, k), interval)
    c = simulate_partial(rng, xi, w)
    m = np.ones((n, k), bool)
    a = np.asarray(E.mle(w, c, m, min_rate=1e-9, max_rate=1e4))
    b = np.asarray(E.moment_matching(w, c, m, min_rate=1e-9, max_rate=1e4))
    assert a.dtype == np.float64
    assert rel(a, b) < 1e-9
    # ... and both equal the closed form log(N / (N - U)) / w.
    u = c.sum(1)
    inner = (u > 0) & (u < k)
    closed = np.log(k / (k - u[inner])) / interval
    assert rel(a[inner], np.minimum(closed, 1e4)) < 1e-9


# ----------------------------------------------------------------------------------------
# Consistency: errors shrink like 1/sqrt(k)
# ----------------------------------------------------------------------------------------

KS = (100, 400, 1600)


def _padded(make, rng, n):
    """Histories for every k in KS, padded to max(KS): one array, one compilation.

    ``make(rng, k, n)`` returns a tuple of (n, k) arrays; returns the (len(KS), n, K) padded
    versions and the mask.
    """
    kmax = max(KS)
    parts, masks = [], []
    for k in KS:
        arrays = make(rng, k, n)
        parts.append([np.pad(a, ((0, 0), (0, kmax - k)), constant_values=1 if a.dtype.kind == "f" else 0)
                      for a in arrays])
        masks.append(np.arange(kmax)[None, :] < k + np.zeros((n, 1), int))
    stacked = [np.stack([p[i] for p in parts]) for i in range(len(parts[0]))]
    return stacked, np.stack(masks)


def _rmse_padded(estimator, make, rng, xi, n):
    arrays, mask = _padded(make, rng, n)
    est = np.asarray(estimator(*arrays, mask))
    return np.sqrt(np.mean((est - xi) ** 2, axis=1))


def _assert_root_k(rmse):
    ratios = rmse[:-1] / rmse[1:]
    # Quadrupling k halves the error: ratios 2 with a Monte-Carlo error of a few percent.
    assert np.all((ratios > 1.6) & (ratios < 2.5)), (rmse, ratios)


XI = 0.8
N_PAGES = 400


def _irregular(rng, k, n):
    w = rng.exponential(1.0, (n, k))
    return w, simulate_partial(rng, np.full(n, XI), w)


def test_mle_root_k_and_fisher_information():
    rng = np.random.default_rng(10)
    rmse = _rmse_padded(lambda w, c, m: E.mle(w, c, m, max_rate=100.0), _irregular, rng, XI, N_PAGES)
    _assert_root_k(rmse)
    # Asymptotic variance 1/(k I), with I = E[w² e^{-ξw} / (1 - e^{-ξw})], w ~ Exp(1).
    x = np.linspace(1e-9, 60, 600_001)
    dens = np.exp(-x)
    info = np.trapezoid(x**2 * np.exp(-XI * x) / -np.expm1(-XI * x) * dens, x)
    predicted = 1 / np.sqrt(KS[-1] * info)
    assert abs(rmse[-1] / predicted - 1) < 0.15


def test_moment_matching_root_k_and_delta_method():
    rng = np.random.default_rng(11)
    rmse = _rmse_padded(lambda w, c, m: E.moment_matching(w, c, m, max_rate=100.0), _irregular, rng, XI, N_PAGES)
    _assert_root_k(rmse)
    # Delta method with w ~ Exp(1): Var = E[e(1-e)] / (k E[w e]^2), e = e^{-ξw}.
    e_var = 1 / (1 + XI) - 1 / (1 + 2 * XI)
    e_slope = 1 / (1 + XI) ** 2
    predicted = np.sqrt(e_var / (KS[-1] * e_slope**2))
    assert abs(rmse[-1] / predicted - 1) < 0.15


def test_mle_smoothed_root_k():
    rng = np.random.default_rng(12)
    rmse = _rmse_padded(E.mle_smoothed, _irregular, rng, XI, N_PAGES)
    _assert_root_k(rmse)


def test_full_observation_root_k_and_exact_variance():
    rng = np.random.default_rng(13)

    def make(r, k, n):
        w = r.uniform(0.5, 1.5, (n, k))
        return w, r.poisson(XI * w)

    rmse = _rmse_padded(lambda w, x, m: E.full_observation(w, x, m, max_rate=100.0), make, rng, XI, N_PAGES)
    _assert_root_k(rmse)
    # Σx ~ Poisson(ξ y_N) with y_N ≈ k: the standard deviation is sqrt(ξ / k).
    assert abs(rmse[-1] / np.sqrt(XI / KS[-1]) - 1) < 0.12


def test_complete_obs_rate_root_k():
    rng = np.random.default_rng(14)
    rmse = []
    for k in KS:
        # Complete observations: a signal on every change of a Poisson(ξ) process over
        # [0, T] with T = k / ξ (k signals expected), padded to one shape.
        horizon = k / XI
        cap = int(KS[-1] + 8 * np.sqrt(KS[-1]) + 20)
        gaps = rng.exponential(1 / XI, (N_PAGES, cap))
        times = np.cumsum(gaps, 1)
        assert np.all(times[:, -1] > horizon)
        mask = times <= horizon
        est = np.asarray(E.complete_obs_rate(gaps, np.ones_like(mask), mask, time=horizon))
        rmse.append(np.sqrt(np.mean((est - XI) ** 2)))
    _assert_root_k(np.array(rmse))


def test_lln_root_k():
    rng = np.random.default_rng(15)
    p = 1.0

    def make(r, k, n):
        w = r.exponential(1 / p, (n, k))
        return (simulate_partial(r, np.full(n, XI), w),)

    (c,), mask = _padded(make, rng, N_PAGES)
    state, _ = run_online(E.lln(), c, p, mask)  # masked steps leave the state unchanged
    _assert_root_k(np.sqrt(np.mean((np.asarray(state.rate) - XI) ** 2, axis=1)))


def test_naive_converges_to_its_bias_limit_not_to_the_rate():
    rng = np.random.default_rng(16)
    delta, p = 5.0, 3.0
    n, k = 40, 20_000
    w = rng.exponential(1 / p, (n, k))
    c = simulate_partial(rng, np.full(n, delta), w)
    q = np.asarray(E.naive(w, c))
    limit = p * delta / (delta + p)
    se = np.std(q) / np.sqrt(n)
    assert abs(q.mean() - limit) < 4 * se + 1e-3
    assert np.all(np.abs(q - delta) > 2.5)  # nowhere near the true rate 5
    # The MLE on the same data is consistent.
    assert abs(np.mean(E.mle(w, c, max_rate=100.0)) - delta) < 0.1


# ----------------------------------------------------------------------------------------
# Confidence intervals: coverage over 2,000 simulated pages
# ----------------------------------------------------------------------------------------


def test_lemma3_interval_covers_moment_matching_estimate():
    rng = np.random.default_rng(20)
    n, k, delta = 2000, 200, 0.1
    lo, hi = 0.1, 1.0  # L2C App. J
    xi = rng.uniform(lo, hi, n)
    w = rng.exponential(1 / 0.75, (n, k))  # crawl times from a Poisson process, rho = 0.75
    c = simulate_partial(rng, xi, w)
    est = np.asarray(E.moment_matching(w, c, min_rate=lo, max_rate=hi))
    hw = E.lemma3_halfwidth(w, delta=delta, min_rate=lo, max_rate=hi)
    # The formula, in NumPy (a mean of k positive terms: rounding ≤ (k + 8) eps).
    g = np.mean(w * np.exp(-hi * w), 1)
    want = np.minimum(np.sqrt(np.log(2 / delta) / (2 * k)) / g, hi - lo)
    np.testing.assert_allclose(hw, want, rtol=(k + 8) * eps_of(hw))
    hw = np.asarray(hw)
    assert np.median(hw) < 0.5 * (hi - lo)  # not the trivial bound
    coverage = np.mean(np.abs(est - xi) <= hw)
    assert coverage >= 1 - delta


def test_lemma8_interval_covers_full_observation_estimate():
    rng = np.random.default_rng(21)
    n, k, delta = 2000, 500, 0.1
    lo, hi = 0.1, 1.0
    xi = rng.uniform(lo, hi, n)
    w = rng.uniform(0.5, 1.5, (n, k))
    counts = rng.poisson(xi[:, None] * w)
    est = np.asarray(E.full_observation(w, counts, min_rate=lo, max_rate=hi))
    hw = E.lemma8_halfwidth(w, delta=delta, min_rate=lo, max_rate=hi)
    t = hi / lo - 1
    big_m = ((1 + t) * np.log1p(t) - t) / (t * t / 2)
    want = np.sqrt(2 * hi / (w.sum(1) * big_m) * np.log(2 / delta))
    np.testing.assert_allclose(hw, want, rtol=(k + 8) * eps_of(hw))
    hw = np.asarray(hw)
    assert np.median(hw) < 0.5 * (hi - lo)
    coverage = np.mean(np.abs(est - xi) <= hw)
    assert coverage >= 1 - delta


def _bennett_reference(t):
    """ψ(t) in Python floats: the alternating series below 0.9 (200 terms, math.fsum),
    the closed form above (no cancellation there)."""
    if abs(t) < 0.9:
        return math.fsum(2 * (-t) ** j / ((j + 1) * (j + 2)) for j in range(200))
    return ((1 + t) * math.log1p(t) - t) / (t * t / 2)


def test_bennett_psi_is_accurate_on_both_sides_of_its_series_cutoff():
    ts = [-0.9, -0.5, -0.4999, -1e-4, -1e-6, 0.0, 1e-6, 1e-4, 1e-2, 0.3, 0.4999, 0.5, 0.5001, 3.0,
          1e3, 2.5e10]
    got = jax.jit(bennett_psi)(jnp.asarray(ts))
    dt = np.asarray(got).dtype
    want = [_bennett_reference(float(np.asarray(t, dt))) for t in ts]
    assert rel(got, want) <= 8 * eps_of(got)
    assert float(got[ts.index(0.0)]) == 1.0


# ----------------------------------------------------------------------------------------
# Edge cases: the papers' singularities, handled
# ----------------------------------------------------------------------------------------

LO, HI = 1e-4, 50.0


def _edge_histories():
    w = np.array([[1.0, 2.0, 0.5, 1.0, 3.0]] * 5)
    c = np.array([
        [1, 1, 1, 1, 1],  # all changed
        [0, 0, 0, 0, 0],  # never changed
        [0, 0, 0, 0, 0],  # empty (mask all False)
        [1, 0, 0, 0, 0],  # single observation, changed
        [0, 0, 0, 0, 0],  # single observation, unchanged
    ], bool)
    m = np.ones((5, 5), bool)
    m[2] = False
    m[3, 1:] = False
    m[4, 1:] = False
    return small(w, c, m)


@pytest.mark.parametrize("fn", [E.mle, E.moment_matching])
def test_edge_cases_clip_to_documented_bounds(fn):
    w, c, m = _edge_histories()
    est = fn(w, c, m, min_rate=LO, max_rate=HI, return_info=True)
    r = np.asarray(est.rate)[:5]
    np.testing.assert_array_equal(r, np.asarray([HI, LO, LO, HI, LO], r.dtype))
    assert np.all(np.asarray(est.converged))


def test_edge_cases_smoothed_estimators_are_finite_and_interior():
    w, c, m = _edge_histories()
    r = np.asarray(E.mle_smoothed(w, c, m, min_rate=LO, max_rate=HI))
    eps = eps_of(r)
    assert np.all(np.isfinite(r)) and np.all((r > LO) & (r < HI))
    # Empty history: s/(e^{sλ}-1) = s  ⇒  λ = ln 2 / s.
    assert abs(r[2] / (np.log(2) / 0.5) - 1) <= root_tol("mle", np.log(2) / 0.5, [0.5, 0.5], [1, 0], eps)
    # All-changed with smoothing: the root of the smoothed equation, checked in NumPy.
    ww = np.append(w[0, :5], [0.5, 0.5])
    cc = np.append(c[0, :5], [True, False])
    want = ref_mle(ww, cc, LO, HI)
    assert abs(r[0] / want - 1) <= root_tol("mle", want, ww, cc, eps)
    n = np.asarray(E.naive(w, c, m))[:5]
    np.testing.assert_allclose(n, [5 / 7.5, 0, 0, 1.0, 0], rtol=16 * eps)
    f = np.asarray(E.full_observation(w, c.astype(int), m, min_rate=LO, max_rate=HI))[:5]
    np.testing.assert_allclose(f, [5 / 7.5, LO, LO, 1.0, LO], rtol=16 * eps)
    # Complete observations: (U + 0.5) / T; an empty history has no duration -> max_rate.
    cr = np.asarray(E.complete_obs_rate(w, c, m, min_rate=LO, max_rate=HI))[:5]
    np.testing.assert_allclose(cr, [5.5 / 7.5, 0.5 / 7.5, HI, 1.5 / 1.0, 0.5 / 1.0], rtol=16 * eps)
    for hw in (E.lemma3_halfwidth(w, m, delta=0.05, min_rate=LO, max_rate=HI),
               E.lemma8_halfwidth(w, m, delta=0.05, min_rate=LO, max_rate=HI)):
        hw = np.asarray(hw)
        assert np.all(np.isfinite(hw)) and hw[2] == np.asarray(HI, hw.dtype) - np.asarray(LO, hw.dtype)


def test_default_bounds_are_the_papers():
    w, c, m = _edge_histories()
    r = np.asarray(E.mle(w, c, m))[:5]
    np.testing.assert_array_equal(r, np.asarray([25.0, 1e-9, 1e-9, 25.0, 1e-9], r.dtype))
    assert (DEFAULT_MIN_RATE, DEFAULT_MAX_RATE) == (1e-9, 25.0)


@pytest.mark.long
@pytest.mark.parametrize("dt", [np.float32, pytest.param(np.float64, marks=pytest.mark.x64)])
def test_huge_and_tiny_intervals_stay_finite(dt):
    w0 = np.array([[1e-6, 1e6, 1.0], [1e4, 1e4, 1e4], [1e-8, 1e-8, 1e-8]]).astype(dt)
    c0 = np.array([[1, 0, 1], [1, 0, 1], [1, 1, 0]], bool)
    w, c, m = small(w0, c0)
    for fn, kind in ((E.mle, "mle"), (E.moment_matching, "mm"), (E.mle_smoothed, None)):
        est = fn(w, c, m, return_info=True)
        r = np.asarray(est.rate)
        assert r.dtype == dt
        assert np.all(np.isfinite(r)) and np.all(r >= dt(1e-9)) and np.all(r <= 25), (fn, dt, r)
        assert np.all(np.asarray(est.converged)), fn
        if kind is not None:
            want = ref_roots(kind, w0, c0, np.ones((3, 3), bool), 1e-9, 25.0)
            assert_close_to(kind, r[:3], want, w0, c0, np.ones((3, 3), bool))


# ----------------------------------------------------------------------------------------
# Smoothed MLE windows, complete-observation rate
# ----------------------------------------------------------------------------------------


def test_mle_smoothed_window_equals_truncated_history():
    rng = np.random.default_rng(30)
    w = rng.exponential(1.0, (ROWS, K))
    c = simulate_partial(rng, np.full(ROWS, 0.6), w)
    m = np.ones((ROWS, K), bool)
    offset, time, window = 2.0, 9.0, 4.0
    t = offset + np.cumsum(w, 1)
    keep = (t <= time) & (t > time - window)
    got = E.mle_smoothed(w, c, m, window=window, time=time, offset=offset)
    full = E.mle_smoothed(w, c, m)  # whole history = no window
    eps = eps_of(got)
    for i in range(ROWS):
        for g, sel in ((got, keep[i]), (full, m[i])):
            ww = np.append(w[i, sel], [0.5, 0.5])
            cc = np.append(c[i, sel], [True, False])
            want = ref_mle(ww, cc, 1e-9, 25.0)
            assert abs(float(g[i]) / want - 1) <= root_tol("mle", want, ww, cc, eps), i


def test_complete_obs_rate_window():
    w = np.array([[1.0, 1.0, 2.0, 0.5, 1.5]])
    c = np.ones_like(w, bool)
    # Signals at 1, 2, 4, 4.5, 6 (offset 0).  Window (3, 6]: three signals over 3 units.
    r = E.complete_obs_rate(w, c, window=3.0)
    tol = 16 * eps_of(r)
    np.testing.assert_allclose(r, [3.5 / 3.0], rtol=tol)
    # time beyond the last signal extends T; offset moves the start.
    r = E.complete_obs_rate(w, c, time=8.0, offset=1.0)
    np.testing.assert_allclose(r, [5.5 / 7.0], rtol=tol)
    r = E.complete_obs_rate(w, c, smoothing=0.0)
    np.testing.assert_allclose(r, [5 / 6.0], rtol=tol)


# ----------------------------------------------------------------------------------------
# jit, vmap, compilations
# ----------------------------------------------------------------------------------------


def test_jit_and_vmap_agree_with_batched_call():
    rng = np.random.default_rng(41)
    w = rng.exponential(1.0, (4, 8, 20))  # seeds x pages x observations
    c = simulate_partial(rng, np.full((4, 8), 0.9), w)
    m = rng.random((4, 8, 20)) < 0.9
    # Under jit, with per-page bounds that broadcast over the leading axes.
    jitted = jax.jit(lambda w, c, m, lo, hi: E.mle(w, c, m, min_rate=lo, max_rate=hi))
    batched = jitted(w, c, m, np.full((4, 8), 1e-9), np.full((4, 8), 25.0))
    assert batched.shape == (4, 8)
    eps = eps_of(batched)
    r = jitted(w, c, m, np.full((4, 8), 0.5), np.full((4, 8), 1.0))
    assert np.all((np.asarray(r) >= np.asarray(0.5, r.dtype)) & (np.asarray(r) <= 1.0))
    flat = (w.reshape(32, 20), c.reshape(32, 20), m.reshape(32, 20))
    assert_close_to("mle", r, ref_roots("mle", *flat, 0.5, 1.0), *flat)
    # vmap, with return_info: converged per history, one step count per batch element.
    info = jax.vmap(jax.vmap(lambda w, c, m: E.mle(w, c, m, return_info=True)))(w, c, m)
    np.testing.assert_allclose(info.rate, batched, rtol=4 * eps)
    assert info.converged.shape == (4, 8) and info.num_steps.shape == (4, 8)
    assert bool(jnp.all(info.converged))
    assert_close_to("mle", batched, ref_roots("mle", *flat, 1e-9, 25.0), *flat)


def test_no_recompile_for_new_values_of_the_same_shape():
    rng = np.random.default_rng(42)
    w, c, m = small(rng.exponential(1.0, (7, 9)), rng.random((7, 9)) < 0.5)
    calls = (E.mle, E.moment_matching, E.mle_smoothed)
    for fn in calls:
        fn(w, c, m, min_rate=1e-3, max_rate=10.0)
    with count_compiles() as log:
        for fn in calls:
            fn(w * 2, ~c, m, min_rate=1e-2, max_rate=20.0)
    assert log.compiles() == 0, log.names()


# ----------------------------------------------------------------------------------------
# Honest convergence: return_info, max_steps, throw
# ----------------------------------------------------------------------------------------


@pytest.mark.long
@pytest.mark.parametrize("fn", [E.mle, E.moment_matching, E.mle_smoothed])
def test_max_steps_one_reports_not_converged(fn):
    w, w_pad, c, mask, _ = irregular()
    stopped = fn(w_pad, c, mask, max_steps=1, return_info=True, **IRR)
    assert isinstance(stopped, E.Estimate)
    assert int(stopped.num_steps) == 1
    u, n = (c & mask).sum(1), mask.sum(1)
    interior = (u > 0) & (u < n) if fn is not E.mle_smoothed else np.ones(len(u), bool)
    assert interior.sum() > 100
    conv = np.asarray(stopped.converged)
    if fn is E.moment_matching:
        assert not np.any(conv[interior])
    else:
        # the likelihood's warm start (the sufficient-statistics bracket) can already be the
        # root to the tolerance (one changed interval, or ξ w small): one evaluation
        # confirms it -- and then it is the full solve's root; most are not converged
        assert conv[interior].mean() < 0.5
        full = fn(w_pad, c, mask, **IRR)
        np.testing.assert_allclose(np.asarray(stopped.rate)[conv], np.asarray(full)[conv], rtol=1e-5)
    assert np.all(conv[~interior])  # decided by the clip: converged
    if fn is not E.mle_smoothed:  # (its default convergence: the property tests below)
        done = fn(w_pad, c, mask, return_info=True, **IRR)
        assert np.all(np.asarray(done.converged)) and 1 < int(done.num_steps) <= 20
        np.testing.assert_array_equal(np.asarray(done.rate), np.asarray(fn(w_pad, c, mask, **IRR)))


@pytest.mark.long
def test_throw_raises_inside_jit_only_when_not_converged():
    w, w_pad, c, mask, _ = irregular()
    with pytest.raises(Exception, match="estimators.mle did not converge"):
        jax.block_until_ready(jax.jit(lambda w: E.mle(w, c, mask, max_steps=1, throw=True, **IRR))(w_pad))
    jax.block_until_ready(E.mle(w_pad, c, mask, throw=True, **IRR))
    assert issubclass(jaxcrawl.NonConvergenceError, RuntimeError)


@st.composite
def scaled_histories(draw):
    """``(ROWS, K)`` histories whose intervals are O(1) × 10^s with s drawn in [-6, 6] per
    row: the rates then span 12 orders of magnitude."""
    w = np.ones((ROWS, K))
    c = np.zeros((ROWS, K), bool)
    m = np.zeros((ROWS, K), bool)
    for i in range(ROWS):
        n = draw(st.integers(0, K))
        s = draw(st.floats(-6.0, 6.0))
        w[i, :n] = np.asarray(draw(st.lists(st.floats(0.05, 20.0), min_size=n, max_size=n))) * 10.0 ** s
        c[i, :n] = draw(st.lists(st.booleans(), min_size=n, max_size=n))
        m[i, :n] = True
    return w, c, m


WIDE = dict(min_rate=1e-9, max_rate=1e9)


def _check_default_converges(h, dtype):
    w, c, m = h
    w = w.astype(dtype)
    for fn, kind in ((E.mle, "mle"), (E.moment_matching, "mm"), (E.mle_smoothed, None)):
        est = fn(w, c, m, return_info=True, **WIDE)
        r = np.asarray(est.rate)
        assert r.dtype == dtype
        assert np.all(np.asarray(est.converged)), (fn, w, c, m)
        assert np.all(np.isfinite(r)) and np.all((r >= dtype(1e-9)) & (r <= dtype(1e9)))
        if kind is not None:
            want = ref_roots(kind, w, c, m, 1e-9, 1e9)
            assert_close_to(kind, r, want, w, c, m)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scaled_histories())
def test_property_default_converges_over_12_decades_float32(h):
    _check_default_converges(h, np.float32)


@pytest.mark.x64
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scaled_histories())
def test_property_default_converges_over_12_decades_float64(h):
    _check_default_converges(h, np.float64)


# ----------------------------------------------------------------------------------------
# Differentiability: the implicit rule, forward and reverse
# ----------------------------------------------------------------------------------------


def _grad_histories():
    """Interior histories, one never changed (-> min_rate), one always changed
    (-> max_rate), one whose root lies above max_rate = 3, masked entries."""
    rng = np.random.default_rng(70)
    w = rng.exponential(1.0, (ROWS, K)) + 0.1
    c = rng.random((ROWS, K)) < 0.5
    c[:, 0], c[:, 1] = True, False  # at least one of each
    c[5] = False                      # never changed
    c[6] = True                       # always changed
    c[7] = True                       # 11 of 12 changed at w = 0.2: root log(12)/0.2 > 3
    c[7, -1] = False
    w[7] = 0.2
    m = np.ones((ROWS, K), bool)
    m[2, 6:] = False
    return w, c, m


GRAD_WEIGHTS = np.random.default_rng(71).normal(size=ROWS)


@pytest.mark.x64
@pytest.mark.parametrize("fn", [E.mle, E.moment_matching, E.mle_smoothed])
def test_reverse_mode_gradient_matches_central_differences(fn):
    w, c, m = _grad_histories()

    def f(w, lo, hi):
        return jnp.sum(GRAD_WEIGHTS * jnp.log(fn(w, c, m, min_rate=lo, max_rate=hi)))

    def f_np(w, lo=1e-3, hi=3.0):  # the same function, evaluated by the public estimator
        return float(np.sum(GRAD_WEIGHTS * np.log(np.asarray(fn(w, c, m, min_rate=lo, max_rate=hi)))))

    v = np.random.default_rng(72).normal(size=w.shape)

    @jax.jit
    def reverse_and_forward(w, v):
        return jax.grad(f, argnums=(0, 1, 2))(w, 1e-3, 3.0), jax.jvp(lambda w: f(w, 1e-3, 3.0), (w,), (v,))[1]

    (g, g_lo, g_hi), fwd = reverse_and_forward(w, v)
    g = np.asarray(g)
    assert abs(float(fwd) - np.vdot(g, v)) <= 1e-12 * np.vdot(np.abs(g), np.abs(v))  # forward = reverse
    fd = fd_grad(f_np, w, eps=1e-6, relative=True)
    assert np.max(np.abs(g - fd)) <= 1e-6 * np.max(np.abs(fd))
    assert np.all(g[2, 6:] == 0)  # masked entries do not move the estimate
    if fn is not E.mle_smoothed:
        assert np.all(g[5:] == 0)  # clipped estimates depend on their bound only
    fd_lo = fd_grad(lambda lo: f_np(w, lo=float(lo[0])), np.array([1e-3]), eps=1e-6, relative=True)[0]
    fd_hi = fd_grad(lambda hi: f_np(w, hi=float(hi[0])), np.array([3.0]), eps=1e-6, relative=True)[0]
    np.testing.assert_allclose([g_lo, g_hi], [fd_lo, fd_hi], rtol=1e-6, atol=1e-9)


def test_forward_mode_equals_reverse_mode_in_the_lane_dtype():
    fn = E.mle  # (all three estimators, in float64: the finite-difference test above)
    w, c, m = _grad_histories()
    w = jnp.asarray(w)
    v = jnp.asarray(np.random.default_rng(72).normal(size=w.shape), w.dtype)

    def f(w):
        return jnp.sum(jnp.asarray(GRAD_WEIGHTS, w.dtype) * fn(w, c, m, min_rate=1e-3, max_rate=3.0))

    @jax.jit
    def both(w, v):
        fwd = jax.jvp(f, (w,), (v,))[1]
        g = jax.grad(f)(w)
        return fwd, jnp.vdot(g, v), jnp.vdot(jnp.abs(g), jnp.abs(v))

    fwd, rev, scale = (float(x) for x in both(w, v))
    assert math.isfinite(fwd) and scale > 0
    assert abs(fwd - rev) <= 64 * eps_of(w) * scale


# ----------------------------------------------------------------------------------------
# Validation at the public boundary; the package's public names
# ----------------------------------------------------------------------------------------


def test_bad_inputs_raise_value_errors_naming_the_argument():
    w = np.ones((2, 3))
    c = np.zeros((2, 3), bool)
    with pytest.raises(ValueError, match="intervals"):
        E.mle(-w, c)
    with pytest.raises(ValueError, match="changed"):
        E.mle(w, np.full((2, 3), 2))
    with pytest.raises(ValueError, match="min_rate"):
        E.mle(w, c, min_rate=0.0)
    with pytest.raises(ValueError, match="max_rate"):
        E.moment_matching(w, c, min_rate=1.0, max_rate=0.5)
    with pytest.raises(ValueError, match="max_steps"):
        E.mle(w, c, max_steps=0)
    with pytest.raises(ValueError, match="delta"):
        E.lemma3_halfwidth(w, delta=1.5)
    with pytest.raises(ValueError, match="counts"):
        E.full_observation(w, np.full((2, 3), 0.5))
    with pytest.raises(ValueError, match="window"):
        E.mle_smoothed(w, c, window=-1.0)
    with pytest.raises(ValueError, match="smoothing"):
        E.complete_obs_rate(w, c, smoothing=-0.5)
    with pytest.raises(ValueError, match="broadcast"):
        E.naive(np.ones((2, 3)), np.ones((2, 4)))
    with pytest.raises(ValueError, match="crawl_rate"):
        E.lln().init(jnp.asarray([1.0, -1.0]))
    with pytest.raises(ValueError, match="eta"):
        E.sa(eta=-0.5)
    # Masked-out entries are not validated (padding may hold anything).
    E.mle(np.array([[1.0, -5.0]]), np.array([[1, 7]]), np.array([[True, False]]))


def test_public_names_are_the_package_all():
    for name in E.__all__:
        assert getattr(E, name) is not None, name
    assert len(set(E.__all__)) == len(E.__all__) <= 20
    for sub in ("offline", "online", "confidence", "forgetting"):
        assert not hasattr(E, sub), sub


# ----------------------------------------------------------------------------------------
# Online estimators (Avrachenkov, Patil, Thoppe 2022)
# ----------------------------------------------------------------------------------------

#: run_online under one jit per estimator and shape (instead of one compilation per op).
run_online = jax.jit(E.run_online, static_argnums=0)


def _numpy_online(I, p, kind, eta=0.75, beta=0.75, omega=1.0, alpha=1.0, x0=0.0):
    out = []
    if kind == "lln":
        ihat = 0
        for k, i in enumerate(I, start=1):
            ihat += i
            a = alpha(k) if callable(alpha) else alpha
            out.append(p * ihat / (k + a - ihat))
    elif kind == "sa":
        y = x0
        for k, i in enumerate(I):
            y = y + (k + 1) ** -eta * (i * (y + p) - y)
            out.append(y)
    else:
        z, zp = x0, x0
        for k, i in enumerate(I):
            e = (k + 1) ** -eta
            zeta = 0.0 if k == 0 else ((k + 1) ** -beta - omega * e) / k ** -beta
            z, zp = z + e * (i * (z + p) - z) + zeta * (z - zp), z
            out.append(z)
    return np.array(out)


def _online_tol(rates, steps):
    """Each recursion step rounds a handful of operations: ``8 eps`` per step, accumulated."""
    return 8 * steps * eps_of(rates)


def test_online_recursions_match_numpy_reference():
    rng = np.random.default_rng(50)
    I = rng.random((3, 60)) < 0.7
    p = np.array([1.0, 3.0, 0.5])
    for kind, est, kw in (("lln", E.lln(2.0), dict(alpha=2.0)),
                          ("lln", E.lln(jnp.sqrt), dict(alpha=np.sqrt)),
                          ("sa", E.sa(0.8), dict(eta=0.8)),
                          ("sam", E.sam(1.3, 0.75, 1.0), dict(eta=1.3, beta=0.75, omega=1.0))):
        _, rates = run_online(est, I, p, initial_rate=0.3)
        want = np.stack([_numpy_online(I[j].astype(float), p[j], kind, x0=0.3, **kw) for j in range(3)])
        tol = _online_tol(rates, 60)
        np.testing.assert_allclose(rates, want, rtol=tol, atol=tol)


def test_online_scan_vmap_and_mask():
    rng = np.random.default_rng(51)
    I = rng.random((5, 40)) < 0.5
    est = E.sam()
    _, batched = run_online(est, I, 2.0)
    _, vm = jax.jit(jax.vmap(lambda i: E.run_online(est, i, 2.0)))(I)
    np.testing.assert_allclose(vm, batched, rtol=4 * eps_of(batched))
    # Masked steps leave the state unchanged: equal to running on the compacted stream.
    m = rng.random((5, 40)) < 0.6
    for kind, e in (("lln", E.lln()), ("sa", E.sa()), ("sam", E.sam(1.3, 0.75, 1.0))):
        st_masked, _ = run_online(e, I, 2.0, m)
        kw = dict(eta=1.3) if kind == "sam" else {}
        for j in range(5):
            want = _numpy_online(I[j][m[j]].astype(float), 2.0, kind, **kw)[-1]
            np.testing.assert_allclose(st_masked.rate[j], want, rtol=_online_tol(st_masked.rate, 40))
    # A single update works under jit with per-page crawl rates.
    state = est.init(jnp.asarray([1.0, 2.0, 3.0]))
    state = jax.jit(est.update)(state, jnp.asarray([1, 0, 1]))
    assert state.rate.shape == (3,) and int(state.num_obs[0]) == 1


def _simulate_indicators(rng, delta, p, n, k):
    tau = rng.exponential(1 / p, (n, k))
    return simulate_partial(rng, np.full(n, delta), tau)


def test_online_estimators_all_converge():
    """Avrachenkov et al. §4.2.1 setting (Δ = 5, p = 3, their step sizes)."""
    rng = np.random.default_rng(52)
    delta, p = 5.0, 3.0
    I = _simulate_indicators(rng, delta, p, 200, 4000)
    for est in (E.lln(), E.sa(0.75), E.sam(1.3, 0.75, 1.0)):
        _, rates = run_online(est, I, p)
        err = np.mean(np.abs(np.asarray(rates) - delta), axis=0)
        assert err[3999] < 0.1 * delta, est
        assert err[3999] < 0.5 * err[99], est


def test_lln_and_sam_beat_sa_when_crawling_is_rare():
    """Avrachenkov et al. §4.2.2 (Fig. 3): Δ = 500, p = 3, η = 0.8, β = 0.5, ω = 1."""
    rng = np.random.default_rng(53)
    delta, p = 500.0, 3.0
    I = _simulate_indicators(rng, delta, p, 200, 1000)
    errors = {}
    for name, est in (("lln", E.lln(1.0)), ("sa", E.sa(0.8)), ("sam", E.sam(0.8, 0.5, 1.0))):
        _, rates = run_online(est, I, p)
        errors[name] = np.mean(np.abs(np.asarray(rates)[:, -1] - delta))
    assert errors["lln"] < errors["sa"]
    assert errors["sam"] < errors["sa"]


def test_sam_with_equal_exponents_and_unit_omega_is_sa():
    """Avrachenkov et al. below eq. 3: β = η and ω = 1 give ζ_k = 0 for k >= 1."""
    rng = np.random.default_rng(54)
    I = rng.random((4, 50)) < 0.6
    _, a = run_online(E.sam(0.7, 0.7, 1.0), I, 1.5)
    _, b = run_online(E.sa(0.7), I, 1.5)
    np.testing.assert_allclose(a, b, rtol=4 * eps_of(a))


# ----------------------------------------------------------------------------------------
# Hypothesis property tests (one history in row 0 of the (ROWS, K) shape: no recompiles)
# ----------------------------------------------------------------------------------------


@st.composite
def histories(draw, min_len=0):
    n = draw(st.integers(min_len, K))
    w = draw(st.lists(st.floats(0.05, 20.0), min_size=n, max_size=n))
    c = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    wp = np.ones(K)
    cp = np.zeros(K, bool)
    mp = np.zeros(K, bool)
    wp[:n] = w
    cp[:n] = c
    mp[:n] = True
    return wp, cp, mp


SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
BIG = dict(min_rate=1e-6, max_rate=1e6)


def first(fn, w, c, m, *args, **kw):
    """``fn`` on the one history ``(w, c, m)`` padded to ``(ROWS, K)``: (value, eps)."""
    out = fn(*args, *small(w, c, m), **kw)
    return float(np.asarray(out)[0]), eps_of(out)


@SETTINGS
@given(histories())
def test_property_mle_within_bounds_and_maximises_likelihood(h):
    w, c, m = h
    r, eps = first(E.mle, w, c, m, **BIG)
    assert 1e-6 * (1 - eps) <= r <= 1e6 * (1 + eps)
    want = ref_mle(w[m], c[m], 1e-6, 1e6)
    assert abs(r / want - 1) <= root_tol("mle", want, w[m], c[m], eps)
    ll, _ = first(E.log_likelihood, w, c, m, np.full(ROWS, r))
    # The likelihood at r is within rounding (k terms) of its maximum over the grid.
    terms = np.where(c[m], np.log1p(-np.exp(-r * w[m])), -r * w[m])
    tol = 4 * (K + 4) * eps * (1 + np.sum(np.abs(terms)))
    for x in np.geomspace(1e-6, 1e6, 25):
        assert ll >= first(E.log_likelihood, w, c, m, np.full(ROWS, x))[0] - tol


@SETTINGS
@given(histories(min_len=1), st.integers(0, K - 1))
def test_property_more_changes_never_lower_the_estimate(h, j):
    w, c, m = h
    j = j % int(m.sum())
    c2 = c.copy()
    c2[j] = True
    for fn, kind in ((E.mle, "mle"), (E.moment_matching, "mm"), (E.mle_smoothed, "mle")):
        a, eps = first(fn, w, c, m, **BIG)
        b, _ = first(fn, w, c2, m, **BIG)
        # Monotone up to the accuracy of each root (root_tol of the unchanged history).
        ww, cc = (w[m], c[m]) if fn is not E.mle_smoothed else (np.append(w[m], [0.5, 0.5]),
                                                               np.append(c[m], [True, False]))
        assert b >= a * (1 - 2 * root_tol(kind, a, ww, cc, eps))


@SETTINGS
@given(histories(min_len=1), st.floats(0.1, 10.0), st.randoms(use_true_random=False))
def test_property_scale_and_permutation(h, scale, rnd):
    w, c, m = h
    r, eps = first(E.mle, w, c, m, **BIG)
    tol = 2 * root_tol("mle", r, w[m], c[m], eps)
    r_scaled, _ = first(E.mle, w * scale, c, m, **BIG)
    if 1e-5 < r < 1e5:
        assert abs(r_scaled / (r / scale) - 1) <= tol + 4 * eps
    n = int(m.sum())
    perm = list(range(n))
    rnd.shuffle(perm)
    perm = np.array(perm + list(range(n, K)))
    assert abs(first(E.mle, w[perm], c[perm], m[perm], **BIG)[0] / r - 1) <= tol
    r_mm, _ = first(E.moment_matching, w, c, m, **BIG)
    tol_mm = 2 * root_tol("mm", r_mm, w[m], c[m], eps)
    assert abs(first(E.moment_matching, w[perm], c[perm], m[perm], **BIG)[0] / r_mm - 1) <= tol_mm


@SETTINGS
@given(histories(min_len=1))
def test_property_lemma3_halfwidth_shrinks_with_more_observations(h):
    w, c, m = h
    kw = dict(delta=0.1, min_rate=0.1, max_rate=1.0)
    a = E.lemma3_halfwidth(*small(w, c, m)[::2], **kw)
    eps = eps_of(a)
    a = float(a[0])
    # Twice the observations: the history repeated, in a (ROWS, 2K) array.
    w2, _, m2 = small(w, c, m)
    b = float(E.lemma3_halfwidth(np.concatenate([w2, w2], 1), np.concatenate([m2, m2], 1), **kw)[0])
    assert b <= a * (1 + 4 * K * eps)
    assert 0 < b <= 0.9 * (1 + eps)


# ----------------------------------------------------------------------------------------
# Warm start of the likelihood equation: same roots, few Newton steps
# ----------------------------------------------------------------------------------------
from jaxcrawl._src import history as _eh  # noqa: E402
from jaxcrawl._src import likelihood as _off  # noqa: E402


def _sentinel_params(w, c):
    """``(v, W_u)`` of the likelihood score for a prepared history (``w = 0``, ``c = False``
    off the mask): the changed intervals with ``finfo.max`` elsewhere, the unchanged time."""
    return jnp.where(c, w, jnp.finfo(w.dtype).max), jnp.sum(jnp.where(c, 0, w), axis=-1)


@functools.partial(jax.jit, static_argnames=("smoothed",))
def _cold_and_warm(w, c, m, lo, hi, smoothed=False):
    """The likelihood root without the warm start (the previous iteration: equal-interval
    guess, Newton steps from the left, both bounds evaluated) and with it."""
    w, c, m = _eh.prepare(w, c, m)
    if smoothed:
        s = jnp.full(w.shape[:-1] + (1,), 0.5, w.dtype)
        w = jnp.concatenate([w, s, s], -1)
        c = jnp.concatenate([c, jnp.ones_like(s, bool), jnp.zeros_like(s, bool)], -1)
        m = jnp.concatenate([m, jnp.ones_like(s, bool), jnp.ones_like(s, bool)], -1)
    args = (_off.sentinel_score, _sentinel_params(w, c), w, c, m, lo, hi, 60, None, False, "t")
    cold = _off.solve_equation(*args)
    # the public path: the bracket of the sufficient statistics, the sentinel-interval score
    warm = _off.solve_likelihood(w, c, m, lo, hi, 60, None, False, "t")
    return cold, warm


@pytest.mark.long
@pytest.mark.x64
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scaled_histories(), st.booleans())
def test_warm_started_mle_equals_the_cold_one(h, smoothed):
    """Hypothesis-drawn histories (rates over 12 decades): the warm-started root equals the
    previous iteration's to 1e-6 relative (both converged), and E.mle / E.mle_smoothed use it."""
    _check_warm_equals_cold(h, smoothed)


def _check_warm_equals_cold(h, smoothed):
    w, c, m = h
    cold, warm = _cold_and_warm(w, c, m, 1e-9, 1e9, smoothed=smoothed)
    assert np.all(np.asarray(cold.converged)) and np.all(np.asarray(warm.converged))
    np.testing.assert_allclose(np.asarray(warm.rate), np.asarray(cold.rate), rtol=1e-6)
    public = (E.mle_smoothed if smoothed else E.mle)(w, c, m, min_rate=1e-9, max_rate=1e9)
    np.testing.assert_array_equal(np.asarray(public), np.asarray(warm.rate))


@pytest.mark.long
def test_warm_start_float32_agrees_and_needs_few_steps():
    """Simulated Poisson-crawl histories (NeurIPS-19 / L2C: intervals Exp(ρ), changed with
    probability 1 - e^{-λ w}) in float32: the warm-started MLE equals the cold one to float32
    accuracy, most histories need at most 3 evaluations of the likelihood equation (the
    last one confirming convergence), none more than 6, and the whole solve takes fewer
    passes than before."""
    rng = np.random.default_rng(7)
    for num_obs in (8, 200):
        n = 2000
        lam, rho = np.exp(rng.normal(-1, 1.5, n)), np.exp(rng.normal(-1, 1.5, n))
        w = rng.exponential(1 / rho[:, None], (n, num_obs)).astype(np.float32)
        c = simulate_partial(rng, lam, w)
        m = np.ones_like(c)
        cold, warm = _cold_and_warm(w, c, m, np.float32(1e-9), np.float32(25.0))
        assert np.all(np.asarray(warm.converged))
        np.testing.assert_allclose(np.asarray(warm.rate), np.asarray(cold.rate), rtol=4e-6)
        steps = np.asarray(warm.steps)
        iterated = steps > 0
        assert iterated.mean() > 0.5  # the others are decided by the clip (never / always changed)
        assert np.mean(steps[iterated] <= 3) >= 0.7, np.bincount(steps[iterated])
        assert steps.max() <= 6 and int(warm.num_steps) <= 6
        assert int(warm.num_steps) < int(cold.num_steps) + 2  # + the cold start's two bound passes
        public = E.mle(w, c, return_info=True)  # statistics shared; 200 obs: compaction at 1/4
        assert np.all(np.asarray(public.steps) == steps)
        np.testing.assert_allclose(np.asarray(public.rate), np.asarray(warm.rate), rtol=4e-6)
        assert np.all(np.asarray(public.converged))


@pytest.mark.long
@pytest.mark.parametrize("compact", [16, 4])
def test_straggler_compaction_gives_the_same_roots_and_counts(compact):
    """`solve_monotone(take=take_rows)`: once at most 1/16 (``compact=4``: 1/4, the long
    histories' setting of the likelihood solve) of the elements iterate, they finish
    gathered on their own -- the same roots, convergence, iteration count and per-element
    evaluation counts as iterating every element to the end, on likelihood
    equations whose evaluation counts spread (a few histories need many more steps) -- up
    to rounding (two compiled programs may sum in another order)."""
    from jaxcrawl._src.rootfind import default_rtol, solve_monotone, take_rows

    rng = np.random.default_rng(8)
    n, k = 600, 12
    w = jnp.asarray(np.exp(rng.uniform(-6, 4, (n, k))), jnp.result_type(float))
    c = jnp.asarray(rng.random((n, k)) < rng.uniform(0.05, 0.95, (n, 1)))
    params = _sentinel_params(w, c)
    lo, hi = jnp.full(n, 1e-6, w.dtype), jnp.full(n, 1e6, w.dtype)

    def roots(take):
        return solve_monotone(_off.sentinel_score, params, lo, hi, max_steps=60, take=take, compact=compact)

    a, b = roots(None), roots(take_rows)
    steps = np.asarray(a.steps)
    assert np.sum(steps > np.median(steps) + 2) > 0  # there are stragglers
    # the same iteration; the two compiled programs may round a sum differently (an ulp)
    tol = default_rtol(w.dtype)
    np.testing.assert_allclose(np.asarray(b.x), np.asarray(a.x), rtol=tol)
    assert np.all(np.asarray(a.converged)) and np.all(np.asarray(b.converged))
    assert np.mean(steps == np.asarray(b.steps)) > 0.99
    assert abs(int(a.num_steps) - int(b.num_steps)) <= 1


def _float64_likelihood_root(w, c, m, lo, hi):
    """Plain NumPy float64 reference: bisection in log ξ on Σ_changed w/(e^{ξw}-1) = Σ_unchanged w,
    to a bracket 1e-13 wide, clipped to [lo, hi] (never changed -> lo, always -> hi)."""
    out = np.empty(len(w))
    for i in range(len(w)):
        wi = w[i][m[i]].astype(np.float64)
        ci = c[i][m[i]]
        wc, wu = wi[ci], wi[~ci].sum()
        if wc.size == 0:
            out[i] = lo
            continue
        if wu == 0:
            out[i] = hi
            continue
        za, zb = math.log(lo), math.log(hi)
        while zb - za > 1e-13:
            z = 0.5 * (za + zb)
            if (wc / np.expm1(np.minimum(math.exp(z) * wc, 700.0))).sum() > wu:
                za = z
            else:
                zb = z
        out[i] = math.exp(0.5 * (za + zb))
    return out


def test_fast_mle_matches_a_float64_numpy_root():
    """The float32 MLE (arithmetic-mask passes, unrolled first steps) equals a float64 NumPy
    bisection root to 1e-5 relative on padded, partly masked Poisson-crawl histories; every
    history reports convergence."""
    rng = np.random.default_rng(16)
    n, k = 400, 24
    lam, rho = np.exp(rng.uniform(-3, 2, n)), np.exp(rng.uniform(-2, 2, n))
    w = rng.exponential(1 / rho[:, None], (n, k)).astype(np.float32) + np.float32(1e-4)
    c = simulate_partial(rng, lam, w)
    m = np.arange(k)[None, :] < rng.integers(0, k + 1, n)[:, None]
    est = E.mle(w, c, m, return_info=True)
    assert np.all(np.asarray(est.converged))
    ref = _float64_likelihood_root(w, c, m, DEFAULT_MIN_RATE, DEFAULT_MAX_RATE)
    np.testing.assert_allclose(np.asarray(est.rate, np.float64), ref, rtol=1e-5)


@pytest.mark.long
@pytest.mark.parametrize("probe_first", [False, True])
def test_brackets_across_the_clip_bounds_start_on_the_bound(probe_first):
    """`solve_monotone(bracket=, probe_first=True)` (long histories' likelihood solve): a
    bracket that crosses a clip bound starts on that bound instead of a separate pass at
    the bounds.  Same roots as the pass (to the root tolerance), every one converged, a
    clipped root exactly its bound, with the bound's derivative; both bounds crossed."""
    from jaxcrawl._src.rootfind import solve_monotone, take_rows

    lo, hi, params, bracket, crossing_hi = _clip_crossing_case(21)
    assert np.sum(np.asarray((bracket[0] < lo) & (bracket[1] > lo))) >= 3

    def roots(pf, lo, hi):
        return solve_monotone(_off.sentinel_score, params, lo, hi, x0=bracket[0], bracket=bracket,
                              take=take_rows, compact=4, probe_first=pf)

    ref, got = roots(False, lo, hi), roots(probe_first, lo, hi)
    assert np.all(np.asarray(got.converged))
    np.testing.assert_allclose(np.asarray(got.x), np.asarray(ref.x), rtol=1e-5)
    x = np.asarray(got.x)
    assert np.sum(x == np.float32(0.25)) > 0
    _check_clipped_at_the_upper_bound(lambda h: roots(probe_first, lo, h).x, hi, x, np.asarray(ref.x))


def _clip_crossing_case(seed):
    """300 histories of 40 crawls (rate 1) of pages changing at rates 0.02-60, the clip
    range [0.25, 8], the sentinel params, the statistics' bracket and where it crosses the
    upper bound (asserted: more than 10 histories)."""
    rng = np.random.default_rng(seed)
    n, k = 300, 40
    lam = np.exp(rng.uniform(np.log(0.02), np.log(60.0), n))
    w = rng.exponential(1.0, (n, k)).astype(np.float32) + np.float32(1e-3)
    c = simulate_partial(rng, lam, w)
    lo, hi = jnp.full(n, 0.25, jnp.float32), jnp.full(n, 8.0, jnp.float32)
    stats = _off.sentinel_stats(jnp.asarray(w), jnp.asarray(c), None)
    bracket = _off.bracket_from_stats(stats, jnp.float32)
    crossing_hi = np.asarray((bracket[1] > hi) & (bracket[0] < hi))
    assert crossing_hi.sum() > 10
    return lo, hi, (stats.v, stats.w_u), bracket, crossing_hi


def _check_clipped_at_the_upper_bound(roots_of_hi, hi, x, ref):
    """Some roots clipped at the upper bound 8, the same ones as ``ref``'s; a clipped root
    moves with the bound (derivative 1), an interior one does not (0)."""
    assert np.sum(x == 8.0) > 0 and np.array_equal(x == 8.0, ref == 8.0)
    d_hi = jax.jvp(roots_of_hi, (hi,), (jnp.ones_like(hi),))[1]
    np.testing.assert_allclose(np.asarray(d_hi)[x == 8.0], 1.0)
    np.testing.assert_allclose(np.asarray(d_hi)[(x > 0.26) & (x < 7.9)], 0.0)


# ----------------------------------------------------------------------------------------
# Long histories: blocks that stay in cache, and the third-order start
# ----------------------------------------------------------------------------------------
@st.composite
def long_histories(draw):
    """``(6, 40)`` histories (long: the block and Taylor-start path), each with its own
    rate and crawl scale over 8 decades, some padded (NaN beyond the mask)."""
    rows, k = 6, 40
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    lam = 10.0 ** rng.uniform(-3, 2, rows)
    scale = 10.0 ** rng.uniform(-3, 3, rows)
    w = rng.exponential(scale[:, None], (rows, k)) + 1e-3 * scale[:, None]
    c = simulate_partial(rng, lam * draw(st.floats(0.05, 20.0)) / scale, w)
    n = draw(st.lists(st.integers(0, k), min_size=rows, max_size=rows))
    m = np.arange(k)[None, :] < np.asarray(n)[:, None]
    return np.where(m, w, np.nan), c, m


@jax.jit
def _taylor_ends(w, c, m, lo, hi):
    stats = _off.sentinel_stats(w, c, m)
    bracket = _off.bracket_from_stats(stats, w.dtype)
    lo, hi = _eh.clip_bounds(lo, hi, w.dtype, w.shape[:-1])
    return _off.taylor_start((stats.v, stats.w_u), bracket, lo, hi)


@pytest.mark.long
@pytest.mark.x64
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(long_histories(), st.sampled_from([np.float32, np.float64]))
def test_taylor_start_ends_contain_the_root(h, dtype):
    """`_taylor_start`: from one evaluation at the bracket's left end (S, S', S''), the
    Newton point in ξ and the smaller root of the upper quadratic (S''' <= 0: completely
    monotone terms) are proven ends; computed in the working dtype with their rounding
    margin they still contain the float64 root of the same data, the start lies between
    them, and the MLE from there equals the float64 root (float32 and float64 data)."""
    w, c, m = h
    w = w.astype(dtype)
    lo, hi = 1e-9, 1e9
    (a, b), start, evaluated = _taylor_ends(w, c, m, lo, hi)
    a, b, start, evaluated = map(np.asarray, (a, b, start, evaluated))
    root = _float64_likelihood_root(np.where(m, w, 1.0), c & m, m, lo, hi)
    inside = evaluated & (root > lo) & (root < hi)
    # the statistics' left end itself is proven up to its own rounding (a few ulps), and
    tol = max(32 * float(jnp.finfo(dtype).eps), 1e-12)  # the reference bisects to 1e-13
    assert np.all(a[inside] <= root[inside] * (1 + tol)), (a, root)
    assert np.all(root[inside] <= b[inside] * (1 + tol)), (root, b)
    assert np.all((a <= start) & (start <= b))
    est = E.mle(w, c, m, min_rate=lo, max_rate=hi, return_info=True)
    assert np.all(np.asarray(est.converged))
    np.testing.assert_allclose(np.asarray(est.rate, np.float64), root, rtol=2e-5 if dtype == np.float32 else 1e-9)


def _blocked_case():
    """39 long histories on (3, 13) leading axes (masked, NaN-padded, per-history upper
    bounds) and their solve in one block or in blocks of 5 (the last one overlapping)."""
    rng = np.random.default_rng(31)
    lead, k = (3, 13), 40
    n = math.prod(lead)
    lam = np.exp(rng.uniform(np.log(0.01), np.log(40.0), n))
    w = rng.exponential(1.0, (n, k)).astype(np.float32) + np.float32(1e-3)
    c = simulate_partial(rng, lam, w)
    m = np.arange(k)[None, :] < rng.integers(0, k + 1, n)[:, None]
    w = np.where(m, w, np.nan).reshape(lead + (k,))
    c, m = jnp.asarray(c.reshape(lead + (k,))), jnp.asarray(m.reshape(lead + (k,)))
    hi = jnp.asarray(rng.uniform(5.0, 30.0, lead), jnp.float32)

    def solve(w, hi, blocks):
        block = 5 * k if blocks else 0
        return _off.solve_likelihood(w, c, m, 1e-6, hi, 60, None, False, "t", block=block)

    return jnp.asarray(w), m, hi, solve


@pytest.mark.long
@pytest.mark.x64
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(long_histories(), st.booleans())
def test_warm_started_mle_equals_the_cold_one_on_long_histories(h, smoothed):
    """As `test_warm_started_mle_equals_the_cold_one`, on long histories (the blocks'
    statistics, the third-order start and the kept start below a crossed bound): the
    public root equals the previous iteration's to 1e-6 relative, both converged."""
    _check_warm_equals_cold(h, smoothed)


@pytest.mark.long
def test_blocked_solve_equals_one_solve():
    """`_solve_likelihood(block=)`: long histories solved a few at a time by a `lax.map`
    over blocks (the last block overlapping the one before: 39 histories in blocks of 5)
    give the roots, convergence and evaluation counts of one solve over all of them, on
    (3, 13) leading axes with per-history clip bounds, a mask and NaN padding."""
    w, m, hi, solve = _blocked_case()
    one = jax.jit(functools.partial(solve, blocks=False))(w, hi)
    blocks = jax.jit(functools.partial(solve, blocks=True))(w, hi)
    assert np.all(np.asarray(one.converged)) and np.all(np.asarray(blocks.converged))
    np.testing.assert_allclose(np.asarray(blocks.rate), np.asarray(one.rate), rtol=1e-6)
    assert np.asarray(blocks.rate).shape == hi.shape
    assert np.mean(np.asarray(blocks.steps) == np.asarray(one.steps)) > 0.9
    assert np.sum(np.asarray(one.rate) == np.asarray(hi)) > 0  # some roots at the clip


@pytest.mark.long
def test_blocked_solve_derivatives():
    """Derivatives through the blocks' `lax.map`: the gradient of Σ log rate in the
    intervals equals that of one solve, and the forward-mode derivative in the upper
    bounds is 1 exactly at the roots clipped there and 0 elsewhere."""
    w, m, hi, solve = _blocked_case()
    wz = jnp.where(m, w, 1.0)
    at_hi = np.asarray(solve(wz, hi, False).rate) == np.asarray(hi)
    assert at_hi.sum() > 0
    t_blocks = jax.jvp(lambda h: solve(wz, h, True).rate, (hi,), (jnp.ones_like(hi),))[1]
    np.testing.assert_allclose(np.asarray(t_blocks), at_hi.astype(np.float32), atol=1e-7)

    def total(w, blocks):
        return jnp.sum(jnp.log(solve(w, hi, blocks).rate))

    g_one = jax.grad(functools.partial(total, blocks=False))(wz)
    g_blocks = jax.grad(functools.partial(total, blocks=True))(wz)
    assert np.any(np.asarray(g_one) != 0)
    np.testing.assert_allclose(np.asarray(g_blocks), np.asarray(g_one), rtol=1e-4, atol=1e-6)


@pytest.mark.long
def test_kept_start_below_a_crossed_upper_bound():
    """`solve_monotone(probe_first=True, keep_start=True)`: a history whose bracket crosses
    the upper clip bound starts at the given start when it lies below the bound (the
    bound is the next iterate only when the Newton step reaches it): the same roots as
    starting on the bound, a clipped root exactly its bound with the bound's derivative,
    and fewer evaluations where the start is close."""
    from jaxcrawl._src.rootfind import solve_monotone, take_rows

    lo, hi, params, bracket, crossing_hi = _clip_crossing_case(22)

    def roots(keep, hi):
        x0 = jnp.sqrt(bracket[0] * jnp.minimum(bracket[1], 2 * hi))  # below, inside or above hi
        return solve_monotone(_off.sentinel_score, params, lo, hi, x0=x0, bracket=bracket,
                              take=take_rows, compact=4, probe_first=True, keep_start=keep)

    ref, got = roots(False, hi), roots(True, hi)
    assert np.all(np.asarray(got.converged))
    np.testing.assert_allclose(np.asarray(got.x), np.asarray(ref.x), rtol=1e-5)
    x = np.asarray(got.x)
    _check_clipped_at_the_upper_bound(lambda h: roots(True, h).x, hi, x, np.asarray(ref.x))
    # the kept starts below the bound save the evaluation on the bound for interior roots
    kept = crossing_hi & (x < 7.9)
    assert np.mean(np.asarray(got.steps)[kept]) < np.mean(np.asarray(ref.steps)[kept])


def test_likelihood_blocks_by_backend():
    """The MLE's cache blocking is XLA:CPU's; an accelerator solves every history at once
    (the roots of both forms agree: `test_blocked_solve_equals_one_solve`)."""
    assert _off.default_block("cpu") == _off._BLOCK
    assert _off.default_block("gpu") is None and _off.default_block("tpu") is None
