"""Revisit bounds (min/max intervals = max/min rates): exact optima under the bounds for every
separable objective, host caps and streaming, against a NumPy clip-aware dual bisection;
infeasible bounds rejected with the pages named."""
import jax.numpy as jnp
import numpy as np
import pytest

import jaxcrawl
from jaxcrawl import check_rate_bounds, rate_bounds
from jaxcrawl.io import write_page_table
from jaxcrawl.parallel import StreamedTable

from helpers import host_capped
from reference import clipped_allocation_ref, harmonic_incomplete_rate

N = 300


def _problem(seed=0, n=N):
    rng = np.random.default_rng(seed)
    imp = rng.lognormal(size=n)
    lam = rng.lognormal(size=n)
    comp = rng.random(n) < 0.2
    lo = np.where(rng.random(n) < 0.3, 0.25, 0.0)
    lo = np.where(comp, np.minimum(lo, 0.5 * lam), lo)
    hi = np.where(rng.random(n) < 0.3, 0.6, np.inf)
    hi = np.maximum(hi, lo * 1.5)
    return imp, lam, comp, lo, hi


def _phi(objective, imp, lam, comp):
    """The objectives' inverse marginals written from their formulas (NumPy)."""
    if objective == "harmonic":
        return lambda nu: np.where(comp, np.minimum(imp / nu, lam), harmonic_incomplete_rate(nu, imp, lam))
    if objective == "binary":
        return lambda nu: np.maximum(np.sqrt(imp * lam / nu) - lam, 0.0)
    if objective == "delay":
        return lambda nu: np.sqrt(imp * lam / nu)
    raise KeyError(objective)


@pytest.mark.parametrize("objective", ["harmonic", "binary", "delay"])
def test_bounded_optimum_matches_numpy_clip_aware_bisection(objective):
    imp, lam, comp, lo, hi = _problem()
    R = 0.5 * N
    problem = jaxcrawl.CrawlProblem(jnp.asarray(imp, jnp.float32), jnp.asarray(lam, jnp.float32), R,
                                    jnp.asarray(comp))
    pol = jaxcrawl.solve(problem, objective, bounds=(lo, hi))
    assert bool(pol.converged)
    rate = np.asarray(pol.rate, np.float64)
    c = comp if objective == "harmonic" else np.zeros(N, bool)
    ref, nu = clipped_allocation_ref(_phi(objective, imp, lam, c), lo, hi, R)
    np.testing.assert_allclose(rate, ref, rtol=2e-4, atol=2e-5 * R / N)
    # bounds honoured exactly (to float32 rounding), budget met, some bounds active both ways
    assert np.all(rate >= lo * (1 - 1e-6)) and np.all(rate <= hi * (1 + 1e-6))
    assert abs(rate.sum() - R) <= 1e-4 * R
    assert np.any(np.isclose(ref, lo) & (lo > 0)) and np.any(np.isclose(ref, hi) & np.isfinite(hi))


def test_solver_wrappers_take_the_same_bounds():
    imp, lam, comp, lo, hi = _problem(1)
    problem = jaxcrawl.CrawlProblem(jnp.asarray(imp, jnp.float32), jnp.asarray(lam, jnp.float32), 0.5 * N,
                                    jnp.asarray(comp))
    a = jaxcrawl.lambda_crawl(problem, bounds=(lo, hi))
    b = jaxcrawl.solve(problem, "harmonic", bounds=(lo, hi))
    np.testing.assert_array_equal(np.asarray(a.rate), np.asarray(b.rate))
    c = jaxcrawl.binary_lambda_crawl(problem, 0.1, bounds=(lo, hi))
    assert np.all(np.asarray(c.rate) >= np.maximum(lo, 0.1 * 0.5) * (1 - 1e-6))
    assert np.all(np.asarray(c.rate) <= hi * (1 + 1e-6))


def test_host_caps_honour_the_bounds():
    imp, lam, comp, lo, hi = _problem(2)
    R = 0.5 * N
    problem = jaxcrawl.CrawlProblem(jnp.asarray(imp, jnp.float32), jnp.asarray(lam, jnp.float32), R,
                                    jnp.asarray(comp))
    host = np.arange(N) % 5
    cap = np.full(5, 0.12 * N)
    sol = host_capped(problem, host, cap, "binary", bounds=(lo, hi))
    r = np.asarray(sol.policy.rate, np.float64)
    assert bool(np.all(sol.policy.converged))
    assert np.all(r >= lo * (1 - 1e-6)) and np.all(r <= hi * (1 + 1e-6))
    assert np.all(np.bincount(host, r) <= cap * (1 + 1e-5)) and abs(r.sum() - R) <= 1e-4 * R
    # KKT with host multipliers: free pages of one host share phi^{-1} = nu + kappa_h
    mu = np.asarray(sol.policy.dual) + np.asarray(sol.host_dual)[host]
    free = (r > lo * (1 + 1e-4)) & (r < hi * (1 - 1e-4))
    expect = np.maximum(np.sqrt(imp * lam / mu) - lam, 0.0)
    np.testing.assert_allclose(r[free], expect[free], rtol=1e-3, atol=1e-5)


@pytest.mark.long
def test_streaming_honours_the_bounds():
    """A StreamedTable from disk: the same bounded optimum as the in-memory solve."""
    imp, lam, comp, lo, hi = _problem(2)
    R = 0.5 * N
    problem = jaxcrawl.CrawlProblem(jnp.asarray(imp, jnp.float32), jnp.asarray(lam, jnp.float32), R,
                                    jnp.asarray(comp))
    table = write_page_table(_tmp_dir(), imp, lam, comp)
    res = jaxcrawl.solve(StreamedTable(table, R, chunk_size=N // 2, progress=False), "harmonic", bounds=(lo, hi))
    mem = np.asarray(jaxcrawl.solve(problem, "harmonic", bounds=(lo, hi)).rate)
    assert res.converged
    np.testing.assert_allclose(res.rate, mem, rtol=2e-4, atol=1e-6)


def _tmp_dir():
    import tempfile

    return tempfile.mkdtemp(prefix="jaxcrawl-bounds-")


def test_rate_bounds_from_intervals():
    lo, hi = rate_bounds(3, min_interval=[0.0, 2.0, 4.0], max_interval=[np.inf, 10.0, 5.0], max_rate=0.4)
    np.testing.assert_allclose(lo, [0.0, 0.1, 0.2])
    np.testing.assert_allclose(hi, [0.4, 0.4, 0.25])
    with pytest.raises(ValueError, match="max_interval must be > 0"):
        rate_bounds(2, max_interval=[1.0, 0.0])


def test_infeasible_bounds_name_the_pages():
    ids = np.array(["a", "b", "c"], object)
    with pytest.raises(ValueError, match=r"min rate > max rate .* for 1 page\(s\): 'b'"):
        check_rate_bounds([0.0, 2.0, 0.0], [1.0, 1.0, np.inf], 1.5, page_id=ids)
    with pytest.raises(ValueError, match=r"minimum rates .* sum to 3.*largest minimum rates: 'c', 'a'"):
        check_rate_bounds([1.0, 0.0, 2.0], [np.inf] * 3, 2.0, page_id=ids)
    with pytest.raises(ValueError, match=r"maximum rates .* sum to 0.6.*smallest maximum rates: 'b'"):
        check_rate_bounds([0.0] * 3, [0.3, 0.1, 0.2], 1.0, page_id=ids)
    # a floor above the objective's bound (a complete page's change rate) is met by periodic
    # crawls: feasible, and the page's most is its floor
    check_rate_bounds([0.0, 0.5, 0.0], [1.0] * 3, 2.5, page_id=ids, objective_upper=[1.0, 0.4, 1.0])
    with pytest.raises(ValueError, match=r"maximum rates .* sum to 2.5.*smallest maximum rates: 'b'"):
        check_rate_bounds([0.0, 0.5, 0.0], [1.0] * 3, 2.6, page_id=ids, objective_upper=[1.0, 0.4, 1.0])
    # the library solve rejects them too (eagerly, naming the page index)
    problem = jaxcrawl.CrawlProblem(jnp.ones(3), jnp.ones(3), 1.0)
    with pytest.raises(ValueError, match="infeasible"):
        jaxcrawl.solve(problem, "binary", bounds=([0.5, 0.5, 0.5], None))
