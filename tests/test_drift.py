"""Drifting pages (jaxcrawl.simulate: regime_switch, simulate_drift, periodic_drift_costs) and forgetting estimators.

* The simulated staleness integrals on a drifting path match the exact expected ones of
  :func:`periodic_drift_costs` within 4 standard errors (pages repeated as independent
  copies give the standard errors); the exact formula is itself checked against a plain
  NumPy quadrature.
* The profiles are what their docstrings say (values, martingale mean).
* The exponentially discounted MLE follows a regime switch (its error after the switch
  decays) while the plain MLE on the whole history does not; LambdaLearnAndCrawl with a
  half-life does the same.
"""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxcrawl
from jaxcrawl import CrawlProblem, estimators, learners
from jaxcrawl import simulate as S

Z = 4.0


def _ein_np(u):
    """Ein(u) = ∫_0^u (1 - e^{-t})/t dt by the trapezoid rule on a fine grid (reference)."""
    t = np.linspace(0.0, u, 4001)[1:]
    f = np.concatenate([[1.0], -np.expm1(-t) / t])
    return np.trapezoid(f, dx=u / 4000) if u > 0 else 0.0


def _periodic_reference(rates, window, period, phase, grid=400):
    """Plain NumPy: E∫H(N) and E∫1{N>0} of one page on a fine time grid (midpoint rule)."""
    num_windows = len(rates)
    horizon = num_windows * window
    dt = window / grid
    t = (np.arange(num_windows * grid) + 0.5) * dt
    lam = np.repeat(rates, grid)
    cum = np.concatenate([[0.0], np.cumsum(lam * dt)])
    cum_mid = cum[:-1] + 0.5 * lam * dt
    k = np.floor((t - phase) / period)
    last = np.maximum(phase + k * period, 0.0)  # last crawl at or before t (0: the start)
    last_idx = np.round(last / dt).astype(int)
    m = cum_mid - cum[np.clip(last_idx, 0, len(cum) - 1)]
    ein = np.array([_ein_np(v) for v in m])
    return float(np.sum(ein) * dt), float(np.sum(-np.expm1(-m)) * dt), horizon


@pytest.mark.x64
@pytest.mark.long
def test_periodic_drift_costs_match_a_plain_quadrature():
    rates = np.array([0.3, 0.3, 2.5, 2.5, 0.8, 0.1])
    for period, phase in ((0.7, 0.2), (2.5, 1.0), (0.25, 0.0)):
        h, b = S.periodic_drift_costs(jnp.asarray(rates[:, None]), 1.0, jnp.asarray([period]),
                                      jnp.asarray([phase]))
        h_ref, b_ref, _ = _periodic_reference(rates, 1.0, period, phase)
        assert float(h[0]) == pytest.approx(h_ref, rel=2e-3)
        assert float(b[0]) == pytest.approx(b_ref, rel=2e-3)


@pytest.mark.long
def test_simulated_costs_on_a_regime_switch_match_the_exact_formula():
    """8 page types x 150 independent copies, 12 one-day windows with a switch at day 5."""
    types, copies, num_windows = 8, 150, 12
    rng = np.random.default_rng(3)
    base = rng.uniform(0.2, 2.0, types)
    period = rng.uniform(0.3, 3.0, types)
    phase = rng.uniform(0.0, 1.0, types) * period
    lam = np.tile(base, copies).astype(np.float32)
    per = np.tile(period, copies).astype(np.float32)
    ph = np.tile(phase, copies).astype(np.float32)
    n = lam.size
    problem = CrawlProblem(jnp.ones(n, jnp.float32), jnp.asarray(lam), 1.0, jnp.zeros(n, bool))
    mult = np.tile(rng.uniform(0.2, 4.0, types), copies).astype(np.float32)
    rates = S.regime_switch(problem.change_rate, jnp.stack([jnp.ones(n), jnp.asarray(mult)]), [5.0],
                            num_windows=num_windows)
    assert rates.shape == (num_windows, n)
    np.testing.assert_allclose(np.asarray(rates[4]), lam)
    np.testing.assert_allclose(np.asarray(rates[5]), lam * mult, rtol=1e-6)
    sched = S.periodic_schedule(jnp.asarray(per), jnp.asarray(ph))
    config = S.config_for(problem.replace(change_rate=jnp.max(rates, axis=0)), sched, 1.0, requests=False)
    state = S.init_state(problem)
    _, tot = jax.jit(S.simulate_drift, static_argnames="config")(
        jax.random.PRNGKey(0), problem, sched, state, config, rates)
    assert int(jnp.sum(tot.overflow)) == 0
    h_exact, b_exact = S.periodic_drift_costs(rates, 1.0, jnp.asarray(per), jnp.asarray(ph))
    for sim, exact in ((tot.harmonic, h_exact), (tot.stale_time, b_exact)):
        sim = np.asarray(sim, np.float64).reshape(copies, types)
        exact = np.asarray(exact, np.float64).reshape(copies, types)[0]
        mean = sim.mean(0)
        se = sim.std(0, ddof=1) / math.sqrt(copies)
        assert np.all(np.abs(mean - exact) <= Z * se + 1e-4 * exact), (mean, exact, se)
    # crawls are deterministic: one per scheduled time in (0, 12]
    crawls = np.asarray(tot.crawls).reshape(copies, types)[0]
    expected = np.array([np.sum((phase[i] + period[i] * np.arange(-50, 200) > 0)
                                & (phase[i] + period[i] * np.arange(-50, 200) <= num_windows + 1e-6))
                         for i in range(types)])
    np.testing.assert_array_equal(crawls, expected)


def test_hot_then_cold_and_walk_profiles():
    base = jnp.asarray([1.0, 2.0, 0.5])
    path = S.hot_then_cold(base, hot_days=3, hot_factor=10.0, cold_factor=0.1, start=jnp.asarray([0.0, 2.0, 5.0]),
                           num_windows=10)
    hot = np.asarray(path) > np.asarray(base)
    np.testing.assert_array_equal(hot[:, 0], np.arange(10) < 3)
    np.testing.assert_array_equal(hot[:, 1], (np.arange(10) >= 2) & (np.arange(10) < 5))
    np.testing.assert_array_equal(hot[:, 2], (np.arange(10) >= 5) & (np.arange(10) < 8))
    np.testing.assert_allclose(np.asarray(path)[~hot], (0.1 * np.broadcast_to(base, (10, 3)))[~hot], rtol=1e-6)
    # the log-normal walk is a martingale: E[λ_w] = λ_0 (many pages, one path each)
    base = jnp.full((5000,), 2.0)
    walk = S.lognormal_walk(jax.random.PRNGKey(1), base, volatility=0.2, num_windows=30)
    last = np.asarray(walk[-1], np.float64)
    assert np.all(np.asarray(walk[0]) == 2.0)
    assert abs(last.mean() - 2.0) <= Z * last.std() / math.sqrt(last.size)
    # log increments have standard deviation σ √h
    inc = np.diff(np.log(np.asarray(walk, np.float64)), axis=0)
    assert inc.std() == pytest.approx(0.2, rel=0.03)


def test_profiles_reject_bad_input():
    base = jnp.ones(3)
    with pytest.raises(ValueError, match="multiples of window"):
        S.regime_switch(base, [1.0, 2.0], [2.5], num_windows=5)
    with pytest.raises(ValueError, match="one entry per regime"):
        S.regime_switch(base, [1.0, 2.0, 3.0], [2.0], num_windows=5)
    with pytest.raises(ValueError, match="base_rate"):
        S.hot_then_cold(jnp.asarray([1.0, -1.0]), hot_days=2, hot_factor=3.0, num_windows=4)
    with pytest.raises(ValueError, match="volatility"):
        S.lognormal_walk(jax.random.PRNGKey(0), base, volatility=-1.0, num_windows=4)
    with pytest.raises(ValueError, match="num_windows"):
        S.hot_then_cold(base, hot_days=2, hot_factor=3.0, num_windows=0)


# ------------------------------------------------------------------ forgetting estimators
def _switch_histories(key, num_pages, rate_before, rate_after, switch, horizon, crawl_rate, slots):
    """Poisson crawls at ``crawl_rate``; the change rate switches at ``switch``.  Returns the
    padded history (intervals, changed, mask) and the crawl times."""
    k1, k2 = jax.random.split(key)
    gaps = jax.random.exponential(k1, (num_pages, slots)) / crawl_rate
    times = jnp.cumsum(gaps, axis=-1)
    prev = times - gaps
    mask = times <= horizon
    # intensity accumulated over (prev, t]
    def cum(t):
        return rate_before * jnp.minimum(t, switch) + rate_after * jnp.maximum(t - switch, 0.0)
    p_unchanged = jnp.exp(-(cum(times) - cum(prev)))
    changed = (jax.random.uniform(k2, times.shape) >= p_unchanged).astype(jnp.float32)
    return gaps, changed, mask, times


@pytest.mark.long
def test_discounted_mle_tracks_a_regime_switch_and_the_plain_mle_does_not():
    num_pages, switch = 400, 100.0
    gaps, changed, mask, times = _switch_histories(jax.random.PRNGKey(5), num_pages, 0.3, 2.0, switch,
                                                   200.0, 1.0, 320)
    errs_disc, errs_plain = [], []
    for now in (110.0, 130.0, 160.0, 200.0):
        m = mask & (times <= now)
        disc = estimators.discounted_mle(gaps, changed, m, half_life=7.0, time=now)
        plain = estimators.mle(gaps, changed, m)
        errs_disc.append(float(jnp.median(jnp.abs(jnp.log(disc / 2.0)))))
        errs_plain.append(float(jnp.median(jnp.abs(jnp.log(plain / 2.0)))))
    # the forgetting estimate's error decays after the switch, to near the stationary noise
    assert errs_disc[-1] < 0.5 * errs_disc[0] and errs_disc[-1] < 0.25
    assert all(b <= a + 0.05 for a, b in zip(errs_disc, errs_disc[1:]))
    # the plain MLE on the whole history stays biased towards the old rate
    assert errs_plain[-1] > 0.3 and errs_plain[-1] > 2 * errs_disc[-1]


@pytest.mark.long
def test_discounted_mle_without_forgetting_is_the_mle():
    gaps, changed, mask, _ = _switch_histories(jax.random.PRNGKey(6), 32, 0.7, 0.7, 0.0, 60.0, 1.0, 96)
    a = estimators.discounted_mle(gaps, changed, mask, half_life=jnp.inf, smoothing=0.0)
    b = estimators.mle(gaps, changed, mask)
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-4)
    # weights 1/2 on every observation give the same root (the equation is homogeneous)
    w = jnp.full(gaps.shape, 0.5)
    c = estimators.weighted_mle(gaps, changed, mask, weights=w)
    np.testing.assert_allclose(np.asarray(c), np.asarray(b), rtol=2e-4)
    with pytest.raises(ValueError, match="half_life"):
        estimators.discounted_mle(gaps, changed, mask, half_life=0.0)
    with pytest.raises(ValueError, match="weights"):
        estimators.weighted_mle(gaps, changed, mask, weights=-w)


@pytest.mark.long
def test_llc_with_forgetting_follows_a_regime_switch():
    """LambdaLearnAndCrawl on pages whose rates jump 5x at day 40: with a 4-day half-life the
    estimate error falls back to its own pre-switch level after the switch; without
    forgetting it stays well above its pre-switch level (and above the forgetting one's)."""
    n, num_epochs = 60, 70
    rng = np.random.default_rng(8)
    lam = np.exp(rng.normal(np.log(0.5), 0.5, n)).astype(np.float32)
    problem = CrawlProblem(jnp.asarray(rng.lognormal(0, 1, n), jnp.float32), jnp.asarray(lam), 0.4 * n)
    rates = S.regime_switch(problem.change_rate, [1.0, 5.0], [40.0], num_windows=num_epochs)
    settings = learners.llc_settings(problem.replace(change_rate=5 * problem.change_rate), history_epochs=64)
    plain = learners.lambda_learn_and_crawl(jaxcrawl.harmonic(), **settings)
    forget = learners.lambda_learn_and_crawl(jaxcrawl.harmonic(), **settings, forgetting=True)
    assert forget.name == "llc-forget"
    key = jax.random.PRNGKey(11)
    _, info_plain = learners.run_on_path(key, plain, problem, rates)
    _, info_forget = learners.run_on_path(key, forget, problem, rates, learners.LLCParams(half_life=4.0))
    _, info_inf = learners.run_on_path(key, forget, problem, rates, learners.LLCParams(half_life=jnp.inf))
    # no discount: the same estimates as the plain learner (up to the root-finders' tolerance)
    np.testing.assert_allclose(np.asarray(info_inf.estimate_error), np.asarray(info_plain.estimate_error),
                               rtol=2e-3, atol=2e-3)
    err_p = np.asarray(info_plain.estimate_error)
    err_f = np.asarray(info_forget.estimate_error)
    assert err_f[-5:].mean() <= 1.1 * err_f[30:40].mean()       # back to its stationary level
    assert err_f[-5:].mean() < 0.7 * err_f[41:44].mean()        # decays after the switch
    assert err_p[-5:].mean() >= 1.5 * err_p[30:40].mean()       # plain MLE keeps the old regime
    assert err_p[-5:].mean() >= 1.5 * err_f[-5:].mean()
    with pytest.raises(ValueError, match="half_life"):
        forget.init(problem, learners.LLCParams(half_life=0.0))
