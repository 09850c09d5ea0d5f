"""Closed forms of the objectives against their definitions."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxcrawl
from jaxcrawl import CrawlProblem
from jaxcrawl._src.special import gamma2_cdf


def harmonic_numbers(K):
    return np.concatenate([[0.0], np.cumsum(1.0 / np.arange(1, K + 1))])


@pytest.mark.x64
@pytest.mark.parametrize("lam,rho", [(0.3, 1.0), (2.0, 0.5), (5.0, 20.0), (0.01, 3.0)])
def test_harmonic_prop1_against_sum_over_uncrawled_changes(lam, rho):
    # Under Poisson(rho) crawling, the time since the last crawl is Exp(rho) and the number of
    # uncrawled changes N | A ~ Poisson(lam A); integrating gives P(N=k) = rho lam^k / (rho+lam)^(k+1).
    K = 20000
    k = np.arange(K + 1)
    logp = np.log(rho) + k * np.log(lam) - (k + 1) * np.log(rho + lam)
    expected_H = np.sum(np.exp(logp) * harmonic_numbers(K))
    expected_B = 1.0 - np.exp(logp[0])
    p = CrawlProblem([1.7], [lam], 1.0)
    np.testing.assert_allclose(jaxcrawl.harmonic_cost(p, jnp.array([rho])), 1.7 * expected_H, rtol=1e-10)
    np.testing.assert_allclose(jaxcrawl.binary_cost(p, jnp.array([rho])), 1.7 * expected_B, rtol=1e-12)


@pytest.mark.x64
@pytest.mark.parametrize("prob", [0.05, 0.3, 0.9, 1.0])
def test_harmonic_prop4_complete_pages(prob):
    # Crawling on each change with probability p: uncrawled changes are geometric, P(N=k) = p (1-p)^k.
    K = 20000
    k = np.arange(K + 1)
    pk = prob * (1 - prob) ** k
    lam = 2.5
    p = CrawlProblem([3.0], [lam], 1.0, complete=[True])
    rate = jnp.array([prob * lam])
    np.testing.assert_allclose(jaxcrawl.harmonic_cost(p, rate), 3.0 * np.sum(pk * harmonic_numbers(K)), rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(jaxcrawl.binary_cost(p, rate), 3.0 * (1 - pk[0]), rtol=1e-12, atol=1e-14)


@pytest.mark.x64
def test_page_averaging_and_mixed_sum():
    mu = np.array([1.0, 2.0, 3.0])
    lam = np.array([0.5, 1.0, 2.0])
    comp = np.array([False, True, False])
    rate = np.array([0.4, 0.5, 1.1])
    p = CrawlProblem(mu, lam, 2.0, comp)
    terms = np.where(comp, -mu * np.log(rate / lam), mu * np.log((lam + rate) / rate))
    np.testing.assert_allclose(jaxcrawl.harmonic_cost(p, rate), terms.mean(), rtol=1e-13)
    np.testing.assert_allclose(jaxcrawl.harmonic_cost(p, rate, per_page=True), terms, rtol=1e-13)
    bterms = np.where(comp, mu * (1 - rate / lam), mu * lam / (lam + rate))
    np.testing.assert_allclose(jaxcrawl.binary_cost(p, rate), bterms.mean(), rtol=1e-13)


@pytest.mark.x64
def test_learning_to_crawl_sums():
    zeta = np.array([1.0, 4.0])
    xi = np.array([0.5, 2.0])
    rho = np.array([1.0, 3.0])
    p = CrawlProblem(zeta, xi, 4.0)
    np.testing.assert_allclose(jaxcrawl.binary_freshness(p, rho), np.sum(zeta * rho / (rho + xi)), rtol=1e-13)
    np.testing.assert_allclose(jaxcrawl.accumulated_delay(p, rho), np.sum(zeta * xi / rho), rtol=1e-13)


@pytest.mark.x64
@pytest.mark.parametrize("xi,rho", [(0.5, 1.0), (3.0, 0.2), (1e-4, 10.0), (50.0, 1.0)])
def test_uniform_interval_against_integral(xi, rho):
    # App. H: refreshing every 1/rho, the page is fresh at time t in [0, 1/rho) w.p. e^{-xi t};
    # requests served fresh per unit time = zeta * rho * int_0^{1/rho} e^{-xi t} dt.
    t = np.linspace(0.0, 1.0 / rho, 200001)
    f = np.exp(-xi * t)
    integral = np.sum((f[1:] + f[:-1]) / 2 * np.diff(t))
    p = CrawlProblem([2.0], [xi], 1.0)
    np.testing.assert_allclose(jaxcrawl.uniform_interval_freshness(p, jnp.array([rho])), 2.0 * rho * integral, rtol=1e-8)


def test_uniform_interval_beats_poisson_app_h():
    rng = np.random.default_rng(0)
    zeta, xi, rho = rng.lognormal(size=(3, 200))
    p = CrawlProblem(zeta, xi, float(rho.sum()))
    assert float(jaxcrawl.uniform_interval_freshness(p, rho)) >= float(jaxcrawl.binary_freshness(p, rho))


def test_zero_rate_gives_inf_not_nan_and_safe_gradients():
    p = CrawlProblem([1.0, 2.0], [1.0, 1.0], 1.0, complete=[False, True])
    for rate in (jnp.array([0.0, 0.5]), jnp.array([0.5, 0.0])):
        assert np.isinf(float(jaxcrawl.harmonic_cost(p, rate)))
        assert np.isinf(float(jaxcrawl.accumulated_delay(p, rate)))
        assert np.isfinite(float(jaxcrawl.binary_cost(p, rate)))
        assert float(jaxcrawl.uniform_interval_freshness(p, rate)) >= 0
        for fn in (jaxcrawl.harmonic_cost, jaxcrawl.binary_cost, jaxcrawl.accumulated_delay,
                   jaxcrawl.uniform_interval_freshness, jaxcrawl.binary_freshness):
            g = jax.grad(lambda r: fn(p, r))(rate)
            assert not np.any(np.isnan(np.asarray(g))), fn.__name__


@pytest.mark.parametrize("fn", [jaxcrawl.harmonic_cost, jaxcrawl.binary_cost, jaxcrawl.binary_freshness,
                                jaxcrawl.accumulated_delay, jaxcrawl.uniform_interval_freshness])
@pytest.mark.x64
def test_gradients_match_finite_differences(fn):
    rng = np.random.default_rng(1)
    mu, lam, rate = rng.lognormal(size=(3, 6))
    comp = np.array([False, True, False, True, False, False])
    lam = np.where(comp, rate * 2, lam)  # keep complete pages' prob < 1

    def f(mu, lam, rate):
        return fn(CrawlProblem(mu, lam, 1.0, comp), rate)

    grads = jax.grad(f, argnums=(0, 1, 2))(mu, lam, rate)
    h = 1e-6
    for arg, g in enumerate(grads):
        for i in range(6):
            args = [mu.copy(), lam.copy(), rate.copy()]
            args[arg][i] += h
            up = float(f(*args))
            args[arg][i] -= 2 * h
            down = float(f(*args))
            np.testing.assert_allclose(g[i], (up - down) / (2 * h), rtol=1e-6, atol=1e-9)


@pytest.mark.x64
def test_gamma2_cdf_series_and_direct_agree():
    u = np.array([1e-8, 1e-3, 0.1, 0.49, 0.5, 0.51, 2.0, 30.0])
    ref = np.array([float(np.float64(1) - (1 + x) * np.exp(-x)) if x > 0.3 else
                    sum((-1) ** k * (k - 1) * x**k / np.prod(np.arange(1, k + 1, dtype=float)) for k in range(2, 30))
                    for x in u])
    np.testing.assert_allclose(gamma2_cdf(jnp.asarray(u)), ref, rtol=1e-12)


def test_batched_objectives_keep_leading_axes():
    p = CrawlProblem(np.ones((2, 3)), np.ones((2, 3)), np.array([1.0, 2.0]))
    rate = np.full((2, 3), 0.5)
    assert jaxcrawl.harmonic_cost(p, rate).shape == (2,)
    assert jaxcrawl.binary_freshness(p, rate).shape == (2,)
