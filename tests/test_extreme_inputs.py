"""Extreme magnitudes (issue "no silent wrong answer"): every built-in solver and estimator
either returns a correct result -- finite, >= 0, budget met to a few eps, KKT conditions,
``converged=True`` -- or says it did not converge; never NaN/inf or a wrong plan with
``converged=True``.  The objectives are homogeneous (importance x a leaves the plan; change
rates, bandwidth, caps x c scale it by c), so a solve at any representable scale must equal
the unit-scale solve scaled.  float32 lane: scales 1e-30..1e30; x64 lane: 1e-280..1e280.
"""
import os
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import jaxcrawl
from jaxcrawl import estimators
from jaxcrawl.io import write_page_table
from jaxcrawl.parallel import StreamedTable

from helpers import host_capped

OBJECTIVES = ("harmonic", "harmonic-approx", "binary", "binary-epsilon", "delay", "uniform")


def dtype():
    return np.dtype(jnp.result_type(float))


def top_exponent():
    return 280 if dtype() == np.float64 else 30


def solve_rtol():
    """Rates agree to the root-find's tolerance on the dual (4x its default budget rtol,
    4 eps^0.75), not to eps: a rate's relative error follows the dual's."""
    return 16 * float(np.finfo(dtype()).eps) ** 0.75


def utility(name):
    return jaxcrawl.binary(0.4) if name == "binary-epsilon" else name


def pages(seed, n=10):
    rng = np.random.default_rng(seed)
    imp = rng.uniform(0.3, 3.0, n)
    lam = np.exp(rng.uniform(-1.5, 1.5, n))
    comp = np.zeros(n, bool)
    comp[: n // 4] = True
    return imp, lam, comp


def check_policy(problem, pol, name):
    """A converged policy is a correct one: finite rates >= 0, the budget within the
    solve's contract (its default rtol, 4 eps^0.75 of the bandwidth, summed in float64),
    and KKT for separable utilities where the dual is a normal number of the dtype:
    interior pages at marginal = dual (to 1e-3 in float32, 1e-8 in float64)."""
    rate = np.asarray(pol.rate, np.float64)
    R = float(problem.bandwidth)
    eps = float(np.finfo(dtype()).eps)
    assert np.all(np.isfinite(rate)) and np.all(rate >= 0), (name, rate)
    assert abs(rate.sum() - R) <= 4 * eps ** 0.75 * R, (name, rate.sum(), R)
    if not float(np.finfo(dtype()).tiny) < float(pol.dual) < float(np.finfo(dtype()).max):
        return  # e.g. importance 1e-30 over rates 1: the dual (1e-60) is not representable
    u = jaxcrawl.objective(utility(name))
    if not u.separable or u.marginal is None:
        return
    tol = 1e-3 if dtype() == np.float32 else 1e-8
    # the conditions checked in float64 on the returned rates, in units where the largest
    # importance and the mean rate are 1 (the marginal's own products would overflow at 1e280)
    a = float(np.max(np.asarray(problem.importance, np.float64)))
    c = R / rate.size
    with jax.enable_x64(True):
        p64 = jaxcrawl.CrawlProblem(np.asarray(problem.importance, np.float64) / a,
                                    np.asarray(problem.change_rate, np.float64) / c, R / c,
                                    np.asarray(problem.complete))
        params = u.params(p64)
        lo, hi = (np.broadcast_to(np.asarray(v, np.float64), rate.shape)
                  for v in u.page_bounds(params, R / c, rate.size, np.float64))
        x = rate / c
        d = float(pol.dual)  # nu in these units, in the order that stays a normal float
        nu = next((v for v in (d * (c / a), (d * c) / a, (d / a) * c) if 1e-300 < v < 1e300), d * (c / a))
        interior = (x > lo * (1 + 1e-4)) & (x < hi * (1 - 1e-4))
        m = np.asarray(u.marginal(jnp.asarray(x), params), np.float64)
        ok = np.isfinite(m) & (m > 0) & interior  # m = 0: the float64 evaluation of the marginal overflowed
        if ok.any():
            assert np.max(np.abs(m[ok] / nu - 1)) <= tol, (name, m[ok] / nu)


@pytest.mark.parametrize("name", ["binary"] + [pytest.param(n, marks=pytest.mark.long)
                                               for n in ("harmonic", "binary-epsilon", "delay", "uniform")])
def test_host_capped_solve_is_scale_equivariant(name):
    """Host-capped solves at importance x a and change rates, bandwidth, caps x c (a, c from
    the dtype's far ends) equal the unit solve, rates scaled by c and duals by a/c, each
    converged (no wrong plan with converged=True at 1e-30)."""
    imp, lam, comp = pages(1, 12)
    host = np.arange(12) % 3
    caps = np.array([0.3, 0.5, np.inf]) * 4.0
    ref = host_capped(jaxcrawl.CrawlProblem(imp, lam, 4.0, comp), host, caps, utility(name))
    E = top_exponent()
    rtol = solve_rtol()
    for a in (10.0 ** -E, 1.0, 10.0 ** E):
        for c in (10.0 ** -E, 10.0 ** E):
            sol = host_capped(jaxcrawl.CrawlProblem(imp * a, lam * c, 4.0 * c, comp), host, caps * c,
                              utility(name))
            assert bool(sol.policy.converged), (name, a, c)
            np.testing.assert_allclose(np.asarray(sol.policy.rate, np.float64) / c, np.asarray(ref.policy.rate),
                                       rtol=rtol, atol=0, err_msg=f"{name} a={a} c={c}")
            info = np.finfo(dtype())
            if float(info.tiny) < float(ref.policy.dual) * a / c < float(info.max):  # the dual is representable
                np.testing.assert_allclose(float(sol.policy.dual) / a * c, float(ref.policy.dual), rtol=rtol)
            np.testing.assert_allclose(np.asarray(sol.host_rate, np.float64) / c, np.asarray(ref.host_rate),
                                       rtol=rtol)


def _correct_or_flagged(name, seed, e_imp, e_lam, e_bw):
    """Importance, change rates and bandwidth each drawn across the dtype's range
    (independently, so the bandwidth may be 1e-30 of the change rates): a converged solve
    passes check_policy; otherwise ``converged`` is False -- never NaN or a missed budget
    reported as converged."""
    E = top_exponent()
    imp, lam, comp = pages(seed)
    imp, lam, R = imp * 10.0 ** (E * e_imp), lam * 10.0 ** (E * e_lam), 10.0 ** (E * e_bw)
    try:
        problem = jaxcrawl.CrawlProblem(imp, lam, R, comp)
    except ValueError as err:  # every page complete below the bandwidth: a named refusal
        assert "bandwidth exceeds" in str(err)
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        pol = jaxcrawl.solve(problem, utility(name))
    if bool(pol.converged):
        check_policy(problem, pol, name)


DRAWS = dict(name=st.sampled_from(OBJECTIVES), seed=st.integers(0, 3), e_imp=st.floats(-1, 1),
             e_lam=st.floats(-1, 1), e_bw=st.floats(-1, 1))


@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**DRAWS)
def test_solve_is_correct_or_says_it_did_not_converge(name, seed, e_imp, e_lam, e_bw):
    _correct_or_flagged(name, seed, e_imp, e_lam, e_bw)


@pytest.mark.long
@settings(max_examples=int(os.environ.get("JAXCRAWL_EXTREME_EXAMPLES", 300)), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(**DRAWS)
def test_solve_is_correct_or_says_it_did_not_converge_wide(name, seed, e_imp, e_lam, e_bw):
    """The same, 300 draws (the long step)."""
    _correct_or_flagged(name, seed, e_imp, e_lam, e_bw)


@pytest.mark.parametrize("name", ["harmonic", "binary", "delay"])
def test_solve_is_scale_equivariant_at_the_dtype_ends(name):
    """jaxcrawl.solve at importance x a, change rates and bandwidth x c equals the unit solve
    scaled, converged, for a and c at the dtype's far ends."""
    imp, lam, comp = pages(2)
    ref = jaxcrawl.solve(jaxcrawl.CrawlProblem(imp, lam, 3.0, comp), name)
    E = top_exponent()
    for a in (10.0 ** -E, 10.0 ** E):
        for c in (10.0 ** -E, 10.0 ** E):
            pol = jaxcrawl.solve(jaxcrawl.CrawlProblem(imp * a, lam * c, 3.0 * c, comp), name)
            assert bool(pol.converged)
            np.testing.assert_allclose(np.asarray(pol.rate, np.float64) / c, np.asarray(ref.rate),
                                       rtol=solve_rtol())


@settings(max_examples=4, deadline=None)
@given(e=st.floats(-1, 1), seed=st.integers(0, 5))
def test_estimators_are_equivariant_in_time(e, seed):
    """Intervals x s and clip bounds / s give the unit estimates / s (MLE, moment matching,
    naive), converged, at s across the dtype's range -- including all-changed (upper clip)
    and never-changed (lower clip) histories."""
    s = 10.0 ** (top_exponent() * e)
    rng = np.random.default_rng(seed)
    w = rng.uniform(0.2, 3.0, (4, 16))
    c = (rng.uniform(size=(4, 16)) < rng.uniform(0.1, 0.9, (4, 1))).astype(float)
    c[0], c[1] = 1.0, 0.0
    rtol = 1e-4 if dtype() == np.float32 else 1e-10
    for f in (estimators.mle, estimators.moment_matching):
        ref = f(w, c, min_rate=1e-3, max_rate=25.0, return_info=True)
        got = f(w * s, c, min_rate=1e-3 / s, max_rate=25.0 / s, return_info=True)
        assert bool(np.all(got.converged)) and bool(np.all(ref.converged))
        np.testing.assert_allclose(np.asarray(got.rate, np.float64) * s, np.asarray(ref.rate), rtol=rtol)
    np.testing.assert_allclose(np.asarray(estimators.naive(w * s, c), np.float64) * s,
                               np.asarray(estimators.naive(w, c)), rtol=rtol)


@pytest.mark.parametrize("name,scales", [
    pytest.param("harmonic", [(10.0 ** 30, 10.0 ** -30)], marks=pytest.mark.long),
    pytest.param("harmonic", [(a, c) for a in (1e-30, 1e30) for c in (1e-30, 1e-10, 1e10, 1e30)], marks=pytest.mark.long),
    pytest.param("binary", [(a, c) for a in (1e-30, 1e30) for c in (1e-30, 1e-10, 1e10, 1e30)], marks=pytest.mark.long),
])
def test_streamed_solve_is_scale_equivariant(tmp_path, name, scales):
    """A StreamedTable of a float32 page table on disk, importance x a and change rates,
    bandwidth x c: the unit-scale plan scaled, converged (no wrong plan marked converged at
    1e-30)."""
    imp, lam, comp = pages(4, 3000)
    f32 = np.float32
    ref = jaxcrawl.solve(StreamedTable(write_page_table(str(tmp_path / "unit"), imp.astype(f32), lam.astype(f32),
                                                        comp), 600.0, chunk_size=1024, progress=False), name)
    for k, (a, c) in enumerate(scales):
        t = write_page_table(str(tmp_path / f"t{k}"), (imp * a).astype(f32), (lam * c).astype(f32), comp)
        res = jaxcrawl.solve(StreamedTable(t, 600.0 * c, chunk_size=1024, progress=False), name)
        assert res.converged, (name, a, c)
        np.testing.assert_allclose(np.asarray(res.rate, np.float64) / c, np.asarray(ref.rate, np.float64),
                                   rtol=1e-3, err_msg=f"{name} a={a} c={c}")
        assert abs(float(np.sum(np.asarray(res.rate, np.float64))) - 600.0 * c) <= 1e-4 * 600.0 * c
