"""Optimal-rate solvers: KKT, independent references, the mixed split, properties."""
import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jaxcrawl
from jaxcrawl import CrawlProblem

from reference import (
    bisect_dual,
    golden_max,
    harmonic_cost_ref,
    lambda_crawl_complete_ref,
    lambda_crawl_incomplete_ref,
)


def random_problem(seed, n=300, complete_fraction=0.1, bw_frac=0.2):
    rng = np.random.default_rng(seed)
    mu = rng.lognormal(1.0, 2.0, n)
    lam = rng.lognormal(-1.0, 1.5, n)
    comp = rng.random(n) < complete_fraction
    return CrawlProblem(mu, lam, bw_frac * n, comp), (mu, lam, comp)


# ----------------------------------------------------------------- LambdaCrawl
@pytest.mark.x64
@pytest.mark.parametrize("seed", range(3))
def test_lambda_crawl_incomplete_matches_alg1_reference(seed):
    p, (mu, lam, _) = random_problem(seed, complete_fraction=0.0)
    pol = jaxcrawl.lambda_crawl(p)
    ref = lambda_crawl_incomplete_ref(mu, lam, float(p.bandwidth))
    np.testing.assert_allclose(pol.rate, ref, rtol=1e-9)
    cost = float(jaxcrawl.harmonic_cost(p, pol))
    np.testing.assert_allclose(cost, harmonic_cost_ref(mu, lam, ref, np.zeros_like(mu, bool)), rtol=1e-10)


@pytest.mark.x64
@pytest.mark.parametrize("seed", range(3))
def test_lambda_crawl_complete_matches_alg2_reference(seed):
    rng = np.random.default_rng(seed)
    n = 200
    mu = rng.lognormal(0, 2, n)
    lam = rng.lognormal(0, 1, n)
    R = 0.3 * lam.sum()
    p = CrawlProblem(mu, lam, R, np.ones(n, bool))
    pol = jaxcrawl.lambda_crawl(p)
    ref = lambda_crawl_complete_ref(mu, lam, R)
    np.testing.assert_allclose(pol.rate, ref, rtol=1e-9)
    assert np.any(np.isclose(np.asarray(pol.prob), 1.0))  # some constraints active
    assert np.all(np.asarray(pol.prob) <= 1 + 1e-12)


@pytest.mark.x64
@pytest.mark.parametrize("seed", range(3))
def test_mixed_lambda_crawl_beats_every_split(seed):
    p, (mu, lam, comp) = random_problem(seed, complete_fraction=0.2)
    R = float(p.bandwidth)
    pol = jaxcrawl.lambda_crawl(p)
    best = float(jaxcrawl.harmonic_cost(p, pol))

    def split_cost(Rc):
        rates = np.zeros_like(mu)
        rates[~comp] = lambda_crawl_incomplete_ref(mu[~comp], lam[~comp], R - Rc)
        rates[comp] = lambda_crawl_complete_ref(mu[comp], lam[comp], Rc)
        return harmonic_cost_ref(mu, lam, rates, comp)

    rc_max = min(R, lam[comp].sum())
    for Rc in np.linspace(1e-3, rc_max * (1 - 1e-9), 25):
        assert best <= split_cost(Rc) + 1e-12
    # Alg. 3 (golden-section over the split) converges to the same optimum.
    rc_star = golden_max(lambda r: -split_cost(r), 1e-9, rc_max * (1 - 1e-12))
    np.testing.assert_allclose(best, split_cost(rc_star), rtol=1e-8)
    np.testing.assert_allclose(np.sum(np.asarray(pol.rate)[comp]), rc_star, rtol=1e-4)


@pytest.mark.x64
@pytest.mark.parametrize("seed", range(3))
def test_lambda_crawl_kkt(seed):
    p, (mu, lam, comp) = random_problem(seed, complete_fraction=0.3, bw_frac=0.5)
    pol = jaxcrawl.lambda_crawl(p)
    rho, nu = np.asarray(pol.rate), float(pol.dual)
    marginal = np.where(comp, mu / rho, mu * lam / (rho * (rho + lam)))
    capped = comp & np.isclose(rho, lam, rtol=1e-12)
    np.testing.assert_allclose(marginal[~capped], nu, rtol=1e-8)
    assert np.all(marginal[capped] >= nu * (1 - 1e-10))
    assert np.all(rho > 0)
    assert abs(rho.sum() - float(p.bandwidth)) <= 1e-9 * float(p.bandwidth)


@pytest.mark.long
@pytest.mark.x64
def test_envelope_theorem_bandwidth_derivative_equals_dual():
    p, _ = random_problem(7, complete_fraction=0.1)
    n = p.num_pages
    value = lambda R: jaxcrawl.harmonic_cost(p, jaxcrawl.lambda_crawl(p.replace(bandwidth=R)))
    g = float(jax.grad(value)(p.bandwidth))
    np.testing.assert_allclose(g, -float(jaxcrawl.lambda_crawl(p).dual) / n, rtol=1e-8)
    value_b = lambda R: jaxcrawl.binary_freshness(p, jaxcrawl.binary_lambda_crawl(p.replace(bandwidth=R), 0.0))
    g = float(jax.grad(value_b)(p.bandwidth))
    np.testing.assert_allclose(g, float(jaxcrawl.binary_lambda_crawl(p, 0.0).dual), rtol=1e-8)
    # BLC-eps: the floor eps R / n moves with R too, so dV/dR = nu + (eps/n) sum_floored (u'(floor) - nu).
    eps = 0.3
    pol = jaxcrawl.binary_lambda_crawl(p, eps)
    zeta, xi, rho, nu = (np.asarray(a) for a in (p.importance, p.change_rate, pol.rate, pol.dual))
    floored = np.isclose(rho, eps * float(p.bandwidth) / n, rtol=1e-12)
    assert floored.any()
    expected = nu + eps / n * np.sum(zeta[floored] * xi[floored] / (rho[floored] + xi[floored]) ** 2 - nu)
    value_e = lambda R: jaxcrawl.binary_freshness(p, jaxcrawl.binary_lambda_crawl(p.replace(bandwidth=R), eps))
    np.testing.assert_allclose(float(jax.grad(value_e)(p.bandwidth)), expected, rtol=1e-8)


# --------------------------------------------------------------------- LCA
@pytest.mark.long
@pytest.mark.x64
@pytest.mark.parametrize("seed", range(3))
def test_lambda_crawl_approx_is_prop9_with_optimal_split(seed):
    p, (mu, lam, comp) = random_problem(seed, complete_fraction=0.15)
    R = float(p.bandwidth)
    pol = jaxcrawl.lambda_crawl_approx(p)
    rho = np.asarray(pol.rate)
    rminus = rho[~comp].sum()
    np.testing.assert_allclose(rho[~comp], mu[~comp] * rminus / mu[~comp].sum(), rtol=1e-10)

    def split_cost(Rc):
        rates = np.zeros_like(mu)
        rates[~comp] = mu[~comp] * (R - Rc) / mu[~comp].sum()
        rates[comp] = lambda_crawl_complete_ref(mu[comp], lam[comp], Rc)
        return harmonic_cost_ref(mu, lam, rates, comp)

    rc_max = min(R, lam[comp].sum())
    rc_star = golden_max(lambda r: -split_cost(r), 1e-9, rc_max * (1 - 1e-12))
    np.testing.assert_allclose(float(jaxcrawl.harmonic_cost(p, pol)), split_cost(rc_star), rtol=1e-8)
    # LCA is never better than the exact optimum, and equal when mu/lam is constant (Prop. 9).
    assert float(jaxcrawl.harmonic_cost(p, pol)) >= float(jaxcrawl.harmonic_cost(p, jaxcrawl.lambda_crawl(p))) - 1e-12
    q = CrawlProblem(mu[~comp], 0.37 * mu[~comp], 0.2 * (~comp).sum())
    np.testing.assert_allclose(jaxcrawl.lambda_crawl_approx(q).rate, jaxcrawl.lambda_crawl(q).rate, rtol=1e-9)


# --------------------------------------------------------------------- BLC
def blc_ref(zeta, xi, R, floor=0.0):
    def x_of(nu):
        return np.maximum(floor, np.sqrt(zeta * xi / nu) - xi)
    nu = bisect_dual(x_of, R)
    return x_of(nu)


def blc_epsilon_clamp_and_resolve(zeta, xi, R, eps):
    """NeurIPS-19 §9.3 literally: solve BLC, clamp pages below eps R/n, re-solve the rest; repeat."""
    n = len(zeta)
    floor = eps * R / n
    fixed = np.zeros(n, bool)
    while True:
        rates = np.full(n, floor)
        free = ~fixed
        rates[free] = blc_ref(zeta[free], xi[free], R - floor * fixed.sum())
        below = free & (rates < floor)
        if not below.any():
            return rates
        fixed |= below


@pytest.mark.x64
@pytest.mark.parametrize("eps", [0.0, 0.1, 0.4])
def test_binary_lambda_crawl_matches_references(eps):
    rng = np.random.default_rng(11)
    n = 250
    zeta = rng.lognormal(0, 2, n)
    xi = rng.lognormal(0, 1.5, n)
    R = 0.2 * n
    p = CrawlProblem(zeta, xi, R)
    pol = jaxcrawl.binary_lambda_crawl(p, eps)
    ref = blc_epsilon_clamp_and_resolve(zeta, xi, R, eps)
    np.testing.assert_allclose(pol.rate, ref, rtol=1e-8, atol=1e-12)
    if eps == 0:
        assert np.sum(np.asarray(pol.rate) == 0) > 0  # BLC starves some pages
        assert np.isinf(float(jaxcrawl.harmonic_cost(p, pol)))
    else:
        assert np.all(np.asarray(pol.rate) >= eps * R / n * (1 - 1e-12))
    # optimal for binary freshness: no random feasible perturbation does better
    f_opt = float(jaxcrawl.binary_freshness(p, pol))
    floor = eps * R / n
    for _ in range(20):
        d = rng.normal(size=n)
        d -= d.mean()
        cand = np.asarray(pol.rate) + 1e-3 * d
        if np.all(cand >= floor):
            assert float(jaxcrawl.binary_freshness(p, cand)) <= f_opt + 1e-12


def test_blc_treats_complete_pages_as_incomplete():
    p, _ = random_problem(2, complete_fraction=0.3)
    pol = jaxcrawl.binary_lambda_crawl(p, 0.4)
    assert not bool(pol.on_signal.any())
    np.testing.assert_allclose(jaxcrawl.harmonic_cost(p, pol), jaxcrawl.harmonic_cost(p.as_incomplete(), pol.rate))


# --------------------------------------------------------------- closed forms
@pytest.mark.x64
def test_heuristics_and_delay():
    p, (mu, lam, comp) = random_problem(4)
    R, n = float(p.bandwidth), p.num_pages
    np.testing.assert_allclose(jaxcrawl.uniform_crawl(p).rate, np.full(n, R / n))
    np.testing.assert_allclose(jaxcrawl.change_rate_crawl(p).rate, lam * R / lam.sum(), rtol=1e-12)
    pol = jaxcrawl.accumulated_delay_crawl(p)
    np.testing.assert_allclose(jaxcrawl.accumulated_delay(p, pol), np.sum(np.sqrt(mu * lam)) ** 2 / R, rtol=1e-12)
    # eq. 26 is optimal: KKT zeta xi / rho^2 = dual for all pages
    np.testing.assert_allclose(mu * lam / np.asarray(pol.rate) ** 2, float(pol.dual), rtol=1e-10)


@pytest.mark.long
def test_uniform_interval_crawl_matches_reference():
    rng = np.random.default_rng(5)
    n = 120
    zeta = rng.lognormal(0, 1.5, n)
    xi = rng.lognormal(0, 1.5, n)
    R = 0.3 * n
    p = CrawlProblem(zeta, xi, R)
    pol = jaxcrawl.uniform_interval_crawl(p)

    def rate_of(nu):  # per-page bisection on dG/drho = nu, with dG/drho = (zeta/xi)(1 - (1+u)e^{-u}), u = xi/rho
        out = np.zeros(n)
        for i in range(n):
            if nu >= zeta[i] / xi[i]:
                continue
            lo, hi = 1e-12, 1e12
            for _ in range(200):
                mid = np.sqrt(lo * hi)
                u = xi[i] / mid
                g = zeta[i] / xi[i] * (-np.expm1(-u) - u * np.exp(-u))
                lo, hi = (mid, hi) if g > nu else (lo, mid)
            out[i] = np.sqrt(lo * hi)
        return out

    nu = bisect_dual(rate_of, R, 1e-8, 1e8, iters=80)
    ref = rate_of(nu)
    np.testing.assert_allclose(pol.rate, ref, rtol=1e-6, atol=1e-9)
    G = lambda r: float(jaxcrawl.uniform_interval_freshness(p, r))
    np.testing.assert_allclose(G(pol.rate), G(ref), rtol=1e-10)
    assert G(pol.rate) >= G(np.full(n, R / n))


# --------------------------------------------------------- batching and types
def _binary_eps(p):
    return jaxcrawl.binary_lambda_crawl(p, 0.4)


ALL_SOLVERS = [
    jaxcrawl.lambda_crawl,
    jaxcrawl.lambda_crawl_approx,
    jaxcrawl.binary_lambda_crawl,
    _binary_eps,
    jaxcrawl.uniform_crawl,
    jaxcrawl.change_rate_crawl,
    jaxcrawl.accumulated_delay_crawl,
    jaxcrawl.uniform_interval_crawl,
]
# the costliest to compile batched: their batched-vs-loop check runs in the long step
_HEAVY = (jaxcrawl.lambda_crawl_approx, jaxcrawl.binary_lambda_crawl, jaxcrawl.uniform_interval_crawl, _binary_eps)


@pytest.mark.x64
@pytest.mark.parametrize("solver", [pytest.param(s, marks=pytest.mark.long) if s in _HEAVY else s for s in ALL_SOLVERS])
def test_batched_vmap_and_jit_equal_loop(solver):
    probs = [random_problem(s, n=64)[0] for s in range(4)]
    stacked = CrawlProblem(
        np.stack([np.asarray(q.importance) for q in probs]),
        np.stack([np.asarray(q.change_rate) for q in probs]),
        np.array([float(q.bandwidth) * (1 + i) for i, q in enumerate(probs)]),
        np.stack([np.asarray(q.complete) for q in probs]),
    )
    batched = solver(stacked)
    vmapped = jax.jit(jax.vmap(solver))(stacked)
    for i, q in enumerate(probs):
        single = solver(q.replace(bandwidth=float(q.bandwidth) * (1 + i)))
        np.testing.assert_allclose(batched.rate[i], single.rate, rtol=1e-10, atol=1e-14)
        np.testing.assert_allclose(vmapped.rate[i], single.rate, rtol=1e-10, atol=1e-14)
        np.testing.assert_allclose(batched.dual[i], single.dual, rtol=1e-10)


@settings(max_examples=12, deadline=None)
@given(
    seed=st.integers(0, 100_000),
    dtype=st.sampled_from([np.float32, np.float64]),
    frac=st.floats(0.001, 5.0),
    solver_idx=st.integers(0, len(ALL_SOLVERS) - 1),
)
@pytest.mark.x64
def test_property_extreme_ranges(seed, dtype, frac, solver_idx):
    rng = np.random.default_rng(seed)
    n = 48
    mu = 10 ** rng.uniform(-6, 6, n)
    lam = 10 ** rng.uniform(-6, 3, n)
    comp = rng.random(n) < 0.2
    R = frac * n
    if comp.all() or R >= lam[comp].sum() and (~comp).sum() == 0:
        comp[0] = False
    p = CrawlProblem(mu.astype(dtype), lam.astype(dtype), R, comp)
    pol = ALL_SOLVERS[solver_idx](p)
    rate = np.asarray(pol.rate, np.float64)
    assert np.all(np.isfinite(rate)) and np.all(rate >= 0)
    assert np.isfinite(float(pol.dual))
    tol = 1e-5 if dtype == np.float32 else 1e-9
    assert abs(rate.sum() - R) <= tol * R
    assert np.all(np.asarray(pol.prob) <= 1 + 1e-5)
