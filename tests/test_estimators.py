"""Tests for jaxcrawl.estimators: mathematical truths checked on data simulated here with NumPy.

x64 is on for the session (tests/conftest.py); float32 paths are exercised by passing
float32 arrays explicitly.
"""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jaxcrawl import estimators as E

# ----------------------------------------------------------------------------------------
# NumPy simulation and references
# ----------------------------------------------------------------------------------------


def simulate_partial(rng, xi, intervals):
    """o_n = 1 iff a Poisson(ξ) process has an event in an interval of length w_n."""
    xi = np.asarray(xi, float)[..., None]
    return rng.random(intervals.shape) < -np.expm1(-xi * intervals)


def ref_mle(w, c, lo, hi):
    """Per-history MLE by plain geometric bisection on the score of L2C eq. 6."""
    w = np.asarray(w, float)
    c = np.asarray(c, bool)
    if c.sum() == 0:
        return lo
    if (~c).sum() == 0:
        return hi

    def score(x):
        return np.sum(w[c] / np.expm1(x * w[c])) - np.sum(w[~c])

    if score(lo) <= 0:
        return lo
    if score(hi) >= 0:
        return hi
    a, b = lo, hi
    for _ in range(400):
        mid = math.sqrt(a * b)
        if score(mid) > 0:
            a = mid
        else:
            b = mid
        if b / a - 1 < 1e-15:
            break
    return math.sqrt(a * b)


def ref_mm(w, c, lo, hi):
    """Per-history moment matching (L2C eq. 7) by plain bisection."""
    w = np.asarray(w, float)
    c = np.asarray(c, bool)
    if c.sum() == 0:
        return lo
    if (~c).sum() == 0:
        return hi
    p_hat = np.mean(~c)
    f = lambda x: np.mean(np.exp(-x * w)) - p_hat
    if f(lo) <= 0:
        return lo
    if f(hi) >= 0:
        return hi
    a, b = lo, hi
    for _ in range(400):
        mid = math.sqrt(a * b)
        if f(mid) > 0:
            a = mid
        else:
            b = mid
        if b / a - 1 < 1e-15:
            break
    return math.sqrt(a * b)


def rel(a, b):
    return np.max(np.abs(np.asarray(a, float) / np.asarray(b, float) - 1))


# ----------------------------------------------------------------------------------------
# Agreement with plain NumPy references
# ----------------------------------------------------------------------------------------


def test_mle_and_mm_match_numpy_bisection_on_irregular_histories():
    rng = np.random.default_rng(0)
    n, k = 300, 40
    xi = np.exp(rng.uniform(np.log(0.02), np.log(20), n))
    w = rng.lognormal(0.0, 1.0, (n, k))
    c = simulate_partial(rng, xi, w)
    lengths = rng.integers(0, k + 1, n)
    mask = np.arange(k)[None, :] < lengths[:, None]
    w_pad = np.where(mask, w, np.nan)  # masked entries may hold anything
    got_mle = np.asarray(E.mle(w_pad, c, mask, min_rate=1e-6, max_rate=1e3))
    got_mm = np.asarray(E.moment_matching(w_pad, c, mask, min_rate=1e-6, max_rate=1e3))
    want_mle = [ref_mle(w[i, m], c[i, m], 1e-6, 1e3) for i, m in enumerate(mask)]
    want_mm = [ref_mm(w[i, m], c[i, m], 1e-6, 1e3) for i, m in enumerate(mask)]
    assert rel(got_mle, want_mle) < 1e-9
    assert rel(got_mm, want_mm) < 1e-9


def test_log_likelihood_matches_numpy_and_is_maximised_by_mle():
    rng = np.random.default_rng(1)
    w = rng.exponential(1.0, (50, 30))
    c = simulate_partial(rng, np.full(50, 1.3), w)
    xi = np.full(50, 0.9)
    want = np.sum(np.where(c, np.log1p(-np.exp(-xi[:, None] * w)), -xi[:, None] * w), axis=1)
    np.testing.assert_allclose(E.log_likelihood(xi, w, c), want, rtol=1e-12)
    r = E.mle(w, c, min_rate=1e-6, max_rate=1e3)
    ll = E.log_likelihood(r, w, c)
    for f in (0.9, 0.99, 0.999, 1.001, 1.01, 1.1):
        assert np.all(ll >= E.log_likelihood(r * f, w, c) - 1e-12)


def test_naive_matches_formula():
    rng = np.random.default_rng(2)
    w = rng.exponential(1.0, (20, 15))
    c = rng.random((20, 15)) < 0.4
    m = rng.random((20, 15)) < 0.8
    want = np.sum(c & m, 1) / np.sum(np.where(m, w, 0), 1)
    np.testing.assert_allclose(E.naive(w, c, m), want, rtol=1e-12)


# ----------------------------------------------------------------------------------------
# MLE == moment matching under equal intervals (L2C §4)
# ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("interval", [0.1, 0.7, 3.0])
def test_mle_equals_moment_matching_under_equal_intervals(interval):
    rng = np.random.default_rng(3)
    n, k = 500, 60
    xi = np.exp(rng.uniform(np.log(0.05), np.log(5), n))
    w = np.full((n, k), interval)
    c = simulate_partial(rng, xi, w)
    a = np.asarray(E.mle(w, c, min_rate=1e-9, max_rate=1e4))
    b = np.asarray(E.moment_matching(w, c, min_rate=1e-9, max_rate=1e4))
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


def _rmse_by_k(estimate, rng, xi, n):
    """RMSE for each k in KS; ``estimate(rng, k, n)`` returns (n,) estimates."""
    out = []
    for k in KS:
        est = np.asarray(estimate(rng, k, n))
        out.append(np.sqrt(np.mean((est - xi) ** 2)))
    return np.array(out)


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

    def est(r, k, n):
        # Complete observations: a signal on every change of a Poisson(ξ) process over
        # [0, T] with T = k / ξ (k signals expected).
        horizon = k / XI
        cap = int(k + 8 * np.sqrt(k) + 20)
        gaps = r.exponential(1 / XI, (n, cap))
        times = np.cumsum(gaps, 1)
        assert np.all(times[:, -1] > horizon)
        mask = times <= horizon
        return E.complete_obs_rate(gaps, np.ones_like(mask), mask, time=horizon)

    rmse = _rmse_by_k(est, rng, XI, N_PAGES)
    _assert_root_k(rmse)


def test_lln_root_k():
    rng = np.random.default_rng(15)
    p = 1.0

    def est(r, k, n):
        w = r.exponential(1 / p, (n, k))
        c = simulate_partial(r, np.full(n, XI), w)
        state, _ = E.run_online(E.lln(), c, p)
        return state.rate

    rmse = _rmse_by_k(est, rng, XI, N_PAGES)
    _assert_root_k(rmse)


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
    hw = np.asarray(E.lemma3_halfwidth(w, delta=delta, min_rate=lo, max_rate=hi))
    # The formula, in NumPy.
    g = np.mean(w * np.exp(-hi * w), 1)
    np.testing.assert_allclose(hw, np.minimum(np.sqrt(np.log(2 / delta) / (2 * k)) / g, hi - lo), rtol=1e-12)
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
    hw = np.asarray(E.lemma8_halfwidth(w, delta=delta, min_rate=lo, max_rate=hi))
    t = hi / lo - 1
    big_m = ((1 + t) * np.log1p(t) - t) / (t * t / 2)
    np.testing.assert_allclose(hw, np.sqrt(2 * hi / (w.sum(1) * big_m) * np.log(2 / delta)), rtol=1e-12)
    assert np.median(hw) < 0.5 * (hi - lo)
    coverage = np.mean(np.abs(est - xi) <= hw)
    assert coverage >= 1 - delta


def test_bennett_psi_is_continuous_at_zero():
    t = jnp.asarray([-1e-4, -1e-6, 0.0, 1e-6, 1e-4, 1e-2])
    got = np.asarray(E._bennett_psi(t))
    tt = np.asarray([-1e-4, -1e-6, 1e-6, 1e-4, 1e-2])
    exact = ((1 + tt) * np.log1p(tt) - tt) / (tt**2 / 2)
    np.testing.assert_allclose(got[[0, 1, 3, 4, 5]], exact, rtol=1e-6)
    assert got[2] == 1.0


# ----------------------------------------------------------------------------------------
# Edge cases: the papers' singularities, handled
# ----------------------------------------------------------------------------------------

LO, HI = 1e-4, 50.0


def _edge_histories():
    k = 5
    w = np.array([[1.0, 2.0, 0.5, 1.0, 3.0]] * 5)
    c = np.array([
        [1, 1, 1, 1, 1],  # all changed
        [0, 0, 0, 0, 0],  # never changed
        [0, 0, 0, 0, 0],  # empty (mask all False)
        [1, 0, 0, 0, 0],  # single observation, changed
        [0, 0, 0, 0, 0],  # single observation, unchanged
    ], bool)
    m = np.ones((5, k), bool)
    m[2] = False
    m[3, 1:] = False
    m[4, 1:] = False
    return w, c, m


@pytest.mark.parametrize("fn", [E.mle, E.moment_matching])
def test_edge_cases_clip_to_documented_bounds(fn):
    w, c, m = _edge_histories()
    r = np.asarray(fn(w, c, m, min_rate=LO, max_rate=HI))
    np.testing.assert_array_equal(r, [HI, LO, LO, HI, LO])


def test_edge_cases_smoothed_estimators_are_finite_and_interior():
    w, c, m = _edge_histories()
    r = np.asarray(E.mle_smoothed(w, c, m, min_rate=LO, max_rate=HI))
    assert np.all(np.isfinite(r)) and np.all((r > LO) & (r < HI))
    # Empty history: s/(e^{sλ}-1) = s  ⇒  λ = ln 2 / s.
    assert abs(r[2] - np.log(2) / 0.5) < 1e-12
    # All-changed with smoothing: the root of the smoothed equation, checked in NumPy.
    ww = np.append(w[0], [0.5, 0.5])
    cc = np.append(c[0], [True, False])
    assert abs(r[0] / ref_mle(ww, cc, LO, HI) - 1) < 1e-9
    n = np.asarray(E.naive(w, c, m))
    np.testing.assert_allclose(n, [5 / 7.5, 0, 0, 1.0, 0])
    f = np.asarray(E.full_observation(w, c.astype(int), m, min_rate=LO, max_rate=HI))
    np.testing.assert_allclose(f, [5 / 7.5, LO, LO, 1.0, LO])
    # Complete observations: (U + 0.5) / T; an empty history has no duration -> max_rate.
    cr = np.asarray(E.complete_obs_rate(w, c, m, min_rate=LO, max_rate=HI))
    np.testing.assert_allclose(cr, [5.5 / 7.5, 0.5 / 7.5, HI, 1.5 / 1.0, 0.5 / 1.0])
    for hw in (E.lemma3_halfwidth(w, m, delta=0.05, min_rate=LO, max_rate=HI),
               E.lemma8_halfwidth(w, m, delta=0.05, min_rate=LO, max_rate=HI)):
        hw = np.asarray(hw)
        assert np.all(np.isfinite(hw)) and hw[2] == HI - LO


def test_default_bounds_are_the_papers():
    w, c, m = _edge_histories()
    r = np.asarray(E.mle(w, c, m))
    np.testing.assert_allclose(r, [25.0, 1e-9, 1e-9, 25.0, 1e-9])


def test_huge_and_tiny_intervals_stay_finite():
    w = np.array([[1e-6, 1e6, 1.0], [1e4, 1e4, 1e4], [1e-8, 1e-8, 1e-8]])
    c = np.array([[1, 0, 1], [1, 0, 1], [1, 1, 0]], bool)
    want = [ref_mle(w[i], c[i], 1e-9, 25.0) for i in range(3)]
    for dt, fns in ((np.float64, (E.mle, E.moment_matching, E.mle_smoothed)), (np.float32, (E.mle,))):
        for fn in fns:
            r = np.asarray(fn(w.astype(dt), c))
            assert np.all(np.isfinite(r)) and np.all(r >= 1e-9) and np.all(r <= 25), (fn, dt, r)
        np.testing.assert_allclose(np.asarray(E.mle(w.astype(dt), c)), want, rtol=1e-9 if dt == np.float64 else 1e-4)


# ----------------------------------------------------------------------------------------
# Smoothed MLE windows, complete-observation rate
# ----------------------------------------------------------------------------------------


def test_mle_smoothed_window_equals_truncated_history():
    rng = np.random.default_rng(30)
    w = rng.exponential(1.0, (30, 25))
    c = simulate_partial(rng, np.full(30, 0.6), w)
    offset, time, window = 2.0, 14.0, 6.0
    t = offset + np.cumsum(w, 1)
    keep = (t <= time) & (t > time - window)
    got = E.mle_smoothed(w, c, window=window, time=time, offset=offset)
    want = [ref_mle(np.append(w[i, keep[i]], [0.5, 0.5]), np.append(c[i, keep[i]], [1, 0]), 1e-9, 25.0)
            for i in range(30)]
    assert rel(got, want) < 1e-9
    # Whole history = no window.
    full = E.mle_smoothed(w, c)
    want_full = [ref_mle(np.append(w[i], [0.5, 0.5]), np.append(c[i], [1, 0]), 1e-9, 25.0) for i in range(30)]
    assert rel(full, want_full) < 1e-9


def test_complete_obs_rate_window():
    w = np.array([[1.0, 1.0, 2.0, 0.5, 1.5]])
    c = np.ones_like(w, bool)
    # Signals at 1, 2, 4, 4.5, 6 (offset 0).  Window (3, 6]: three signals over 3 units.
    r = E.complete_obs_rate(w, c, window=3.0)
    np.testing.assert_allclose(r, [3.5 / 3.0])
    # time beyond the last signal extends T; offset moves the start.
    r = E.complete_obs_rate(w, c, time=8.0, offset=1.0)
    np.testing.assert_allclose(r, [5.5 / 7.0])
    r = E.complete_obs_rate(w, c, smoothing=0.0)
    np.testing.assert_allclose(r, [5 / 6.0])


# ----------------------------------------------------------------------------------------
# dtypes, jit, vmap
# ----------------------------------------------------------------------------------------


def test_float32_paths_agree_with_float64():
    rng = np.random.default_rng(40)
    w = rng.exponential(1.0, (200, 50))
    c = simulate_partial(rng, np.exp(rng.uniform(-2, 1.5, 200)), w)
    w32 = w.astype(np.float32)
    for fn, tol in ((E.mle, 2e-5), (E.moment_matching, 2e-5), (E.naive, 1e-6)):
        r32 = fn(w32, c)
        r64 = fn(w, c)
        assert r32.dtype == jnp.float32 and r64.dtype == jnp.float64
        assert rel(r32, r64) < tol, fn
    for fn in (E.lemma3_halfwidth, E.lemma8_halfwidth):
        h = fn(w32, delta=0.1, min_rate=0.1, max_rate=2.0)
        assert h.dtype == jnp.float32
        np.testing.assert_allclose(h, fn(w, delta=0.1, min_rate=0.1, max_rate=2.0), rtol=1e-5)
    state, rates = E.run_online(E.sam(), c, jnp.float32(1.0))
    assert rates.dtype == jnp.float32


def test_jit_and_vmap_agree_with_batched_call():
    rng = np.random.default_rng(41)
    w = rng.exponential(1.0, (4, 8, 20))  # seeds x pages x observations
    c = simulate_partial(rng, np.full((4, 8), 0.9), w)
    m = rng.random((4, 8, 20)) < 0.9
    batched = E.mle(w, c, m)
    assert batched.shape == (4, 8)
    jitted = jax.jit(E.mle)(w, c, m)
    vmapped = jax.vmap(jax.vmap(E.mle))(w, c, m)
    np.testing.assert_allclose(jitted, batched, rtol=1e-12)
    np.testing.assert_allclose(vmapped, batched, rtol=1e-12)
    loop = np.array([[ref_mle(w[s, i, m[s, i]], c[s, i, m[s, i]], 1e-9, 25.0) for i in range(8)] for s in range(4)])
    assert rel(batched, loop) < 1e-9
    # Per-page bounds broadcast over the leading axes.
    r = E.mle(w, c, m, min_rate=np.full((4, 8), 0.5), max_rate=np.full((4, 8), 1.0))
    assert np.all((r >= 0.5) & (r <= 1.0))


def test_no_recompile_for_new_values_of_the_same_shape():
    rng = np.random.default_rng(42)
    w = rng.exponential(1.0, (7, 9))
    c = rng.random((7, 9)) < 0.5
    E.mle(w, c, min_rate=1e-3, max_rate=10.0)
    size = E._mle_impl._cache_size()
    E.mle(w * 2, ~c, min_rate=1e-2, max_rate=20.0)
    assert E._mle_impl._cache_size() == size


# ----------------------------------------------------------------------------------------
# Validation at the public boundary
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
    with pytest.raises(ValueError, match="delta"):
        E.lemma3_halfwidth(w, delta=1.5)
    with pytest.raises(ValueError, match="counts"):
        E.full_observation(w, np.full((2, 3), 0.5))
    with pytest.raises(ValueError, match="window"):
        E.mle_smoothed(w, c, window=-1.0)
    with pytest.raises(ValueError, match="broadcast"):
        E.naive(np.ones((2, 3)), np.ones((2, 4)))
    with pytest.raises(ValueError, match="crawl_rate"):
        E.lln().init(jnp.asarray([1.0, -1.0]))
    with pytest.raises(ValueError, match="eta"):
        E.sa(eta=-0.5)
    # Masked-out entries are not validated (padding may hold anything).
    E.mle(np.array([[1.0, -5.0]]), np.array([[1, 7]]), np.array([[True, False]]))


# ----------------------------------------------------------------------------------------
# Online estimators (Avrachenkov, Patil, Thoppe 2022)
# ----------------------------------------------------------------------------------------


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


def test_online_recursions_match_numpy_reference():
    rng = np.random.default_rng(50)
    I = rng.random((3, 60)) < 0.7
    p = np.array([1.0, 3.0, 0.5])
    for kind, est, kw in (("lln", E.lln(2.0), dict(alpha=2.0)),
                          ("lln", E.lln(jnp.sqrt), dict(alpha=np.sqrt)),
                          ("sa", E.sa(0.8), dict(eta=0.8)),
                          ("sam", E.sam(1.3, 0.75, 1.0), dict(eta=1.3, beta=0.75, omega=1.0))):
        _, rates = E.run_online(est, I, p, initial_rate=0.3)
        want = np.stack([_numpy_online(I[j].astype(float), p[j], kind, x0=0.3, **kw) for j in range(3)])
        np.testing.assert_allclose(rates, want, rtol=1e-12, atol=1e-12)


def test_online_scan_vmap_and_mask():
    rng = np.random.default_rng(51)
    I = rng.random((5, 40)) < 0.5
    est = E.sam()
    _, batched = E.run_online(est, I, 2.0)
    _, vm = jax.vmap(lambda i: E.run_online(est, i, 2.0))(I)
    np.testing.assert_allclose(vm, batched, rtol=1e-12)
    # Masked steps leave the state unchanged: equal to running on the compacted stream.
    m = rng.random((5, 40)) < 0.6
    for kind, e in (("lln", E.lln()), ("sa", E.sa()), ("sam", E.sam(1.3, 0.75, 1.0))):
        st_masked, _ = E.run_online(e, I, 2.0, m)
        kw = dict(eta=1.3) if kind == "sam" else {}
        for j in range(5):
            want = _numpy_online(I[j][m[j]].astype(float), 2.0, kind, **kw)[-1]
            np.testing.assert_allclose(st_masked.rate[j], want, rtol=1e-12)
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
        _, rates = E.run_online(est, I, p)
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
        _, rates = E.run_online(est, I, p)
        errors[name] = np.mean(np.abs(np.asarray(rates)[:, -1] - delta))
    assert errors["lln"] < errors["sa"]
    assert errors["sam"] < errors["sa"]


def test_sam_with_equal_exponents_and_unit_omega_is_sa():
    """Avrachenkov et al. below eq. 3: β = η and ω = 1 give ζ_k = 0 for k >= 1."""
    rng = np.random.default_rng(54)
    I = rng.random((4, 50)) < 0.6
    _, a = E.run_online(E.sam(0.7, 0.7, 1.0), I, 1.5)
    _, b = E.run_online(E.sa(0.7), I, 1.5)
    np.testing.assert_allclose(a, b, rtol=1e-12)


# ----------------------------------------------------------------------------------------
# Hypothesis property tests (histories padded to a fixed length: one compilation)
# ----------------------------------------------------------------------------------------

K = 12


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


@SETTINGS
@given(histories())
def test_property_mle_within_bounds_and_maximises_likelihood(h):
    w, c, m = h
    r = float(E.mle(w, c, m, **BIG))
    assert 1e-6 <= r <= 1e6
    assert r == pytest.approx(ref_mle(w[m], c[m], 1e-6, 1e6), rel=1e-9)
    ll = float(E.log_likelihood(r, w, c, m))
    for x in np.geomspace(1e-6, 1e6, 25):
        assert ll >= float(E.log_likelihood(x, w, c, m)) - 1e-9 * (1 + abs(ll))


@SETTINGS
@given(histories(min_len=1), st.integers(0, K - 1))
def test_property_more_changes_never_lower_the_estimate(h, j):
    w, c, m = h
    j = j % int(m.sum())
    c2 = c.copy()
    c2[j] = True
    for fn in (E.mle, E.moment_matching, E.mle_smoothed):
        assert float(fn(w, c2, m, **BIG)) >= float(fn(w, c, m, **BIG)) * (1 - 1e-12)


@SETTINGS
@given(histories(min_len=1), st.floats(0.1, 10.0), st.randoms(use_true_random=False))
def test_property_scale_and_permutation(h, scale, rnd):
    w, c, m = h
    r = float(E.mle(w, c, m, **BIG))
    r_scaled = float(E.mle(w * scale, c, m, **BIG))
    if 1e-5 < r < 1e5:
        assert r_scaled == pytest.approx(r / scale, rel=1e-9)
    n = int(m.sum())
    perm = list(range(n))
    rnd.shuffle(perm)
    perm = np.array(perm + list(range(n, K)))
    assert float(E.mle(w[perm], c[perm], m[perm], **BIG)) == pytest.approx(r, rel=1e-9)
    assert float(E.moment_matching(w[perm], c[perm], m[perm], **BIG)) == pytest.approx(
        float(E.moment_matching(w, c, m, **BIG)), rel=1e-9)


@SETTINGS
@given(histories(min_len=1))
def test_property_lemma3_halfwidth_shrinks_with_more_observations(h):
    w, c, m = h
    a = float(E.lemma3_halfwidth(w, m, delta=0.1, min_rate=0.1, max_rate=1.0))
    w2 = np.concatenate([w, w])
    m2 = np.concatenate([m, m])
    b = float(E.lemma3_halfwidth(w2, m2, delta=0.1, min_rate=0.1, max_rate=1.0))
    assert b <= a + 1e-15
    assert 0 < b <= 0.9 + 1e-15
