"""The vmapped maps of the L2C Fig. 1-2 reproductions against plain references: the closed-form
optimum against the library's solver, every grid cell against a single run with the same key, the
best-τ ETC and the interior-minimum statistics against direct loops."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxcrawl
from jaxcrawl import learners as ec
from jaxcrawl.experiments import l2c_fig1, l2c_fig2


def _problems(m=40):
    return [l2c_fig1.instance(jax.random.key(3), m, r, u) for u, r in ((1.0, m // 5), (l2c_fig1.TIME_UNIT, m // 2))]


def _stack(problems):
    return jax.tree.map(lambda *x: jnp.stack(x), *problems)


@pytest.mark.parametrize("spread", [0.0, 3.0])
def test_optimal_rate_is_the_solvers_optimum(spread):
    """Closed-form water filling = ``binary_lambda_crawl`` (rates, budget, KKT), also with estimates clipped to
    [1e-9, 25] as the learners produce them."""
    for m, r, u in ((300, 60, 1.0), (300, 6, l2c_fig1.TIME_UNIT)):
        p = l2c_fig1.instance(jax.random.key(1), m, r, u)
        xi = jnp.clip(p.change_rate * jnp.exp(spread * jax.random.normal(jax.random.key(2), (m,))),
                      l2c_fig1.XI_MIN, l2c_fig1.XI_MAX)
        q = p.replace(change_rate=xi)
        ours = np.asarray(l2c_fig1.optimal_rate(q), np.float64)
        ref = np.asarray(jaxcrawl.binary_lambda_crawl(q).rate, np.float64)
        assert ours.sum() == pytest.approx(r, rel=1e-4)
        np.testing.assert_allclose(ours, ref, rtol=2e-3, atol=1e-5 * r / m)
        # KKT of max Σ ζρ/(ρ+ξ): equal marginals ζξ/(ρ+ξ)² on crawled pages, no larger elsewhere
        zeta, x = np.asarray(q.importance, np.float64), np.asarray(xi, np.float64)
        marginal = zeta * x / (ours + x) ** 2
        on = ours > 1e-6 * r / m
        level = np.median(marginal[on])
        np.testing.assert_allclose(marginal[on], level, rtol=5e-3)
        assert np.all(marginal[~on] <= level * (1 + 5e-3))


@pytest.mark.long
def test_eps_greedy_map_cells_equal_single_runs():
    problems = _problems()
    lengths = np.array([[50.0, 7.0], [900.0, 30.0]])
    eps = np.array([0.05, 0.3])
    key = jax.random.key(7)
    grid = np.asarray(l2c_fig2.eps_greedy_map(key, _stack(problems), jnp.asarray(lengths, jnp.float32),
                                              jnp.asarray(eps, jnp.float32), 6, 3))
    assert grid.shape == (2, 2, 2, 3, 6)
    keys = jax.random.split(key, 2)
    single = jax.jit(l2c_fig2.eps_greedy_regret, static_argnums=(4, 5))
    for p, a, e in ((0, 0, 1), (1, 1, 0), (1, 0, 1)):
        one = np.asarray(single(keys[p], problems[p], jnp.float32(lengths[p, a]), jnp.float32(eps[e]), 6, 3))
        np.testing.assert_allclose(grid[p, a, e], one, rtol=1e-5)
    # phase 1 crawls uniformly whatever the seed: its regret is L/m (F* - F(R/m)) exactly
    prob = problems[0]
    m = prob.change_rate.shape[-1]
    uniform = jnp.full((m,), float(prob.bandwidth) / m)
    f_star = float(jaxcrawl.binary_freshness(prob, jaxcrawl.binary_lambda_crawl(prob).rate))
    first = lengths[0, 0] / m * (f_star - float(jaxcrawl.binary_freshness(prob, uniform)))
    np.testing.assert_allclose(grid[0, 0, :, :, 0], first, rtol=1e-4)
    assert np.all(np.diff(grid, axis=-1) >= -1e-3 * np.abs(grid).max())   # regret never decreases


@pytest.mark.long
def test_regret_map_and_best_etc_against_plain_references():
    problems = _problems()
    m = problems[0].change_rate.shape[-1]
    horizon = 400.0
    bws = [float(p.bandwidth) for p in problems]
    rounds = l2c_fig1.map_rounds(m, bws, horizon, per_decade=4)
    key = jax.random.key(11)
    reg = np.asarray(l2c_fig1.regret_map(key, _stack(problems), jnp.asarray(rounds, jnp.float32), horizon, 4),
                     np.float64)
    keys = jax.random.split(key, 2)
    single = jax.jit(l2c_fig1.commit_freshness, static_argnums=3)
    for p, prob in enumerate(problems):
        w = m / bws[p]
        assert rounds[p, -1] * w == pytest.approx(horizon)
        f_hat = single(keys[p], prob, jnp.asarray(rounds[p], jnp.float32), 4)
        shape = f_hat.shape
        full = lambda v: jnp.broadcast_to(jnp.asarray(v, jnp.float32), shape)
        f_star = jaxcrawl.binary_freshness(prob, jaxcrawl.binary_lambda_crawl(prob).rate)
        g_ui = jaxcrawl.uniform_interval_freshness(prob, jnp.full((m,), 1.0 / w))
        out = ec.ETCOutcome(tau=full(rounds[p] * w), num_rounds=full(rounds[p]), estimate=None, rate=None,
                            optimal_freshness=full(f_star), commit_freshness=f_hat,
                            exploration_freshness=full(g_ui), num_pages=full(m))
        np.testing.assert_allclose(reg[p], np.asarray(ec.etc_regret(out, horizon)), rtol=2e-3,
                                   atol=1e-4 * np.abs(reg[p]).max())
        # best τ <= T for several horizons, against a loop over the grid
        hz = np.array([w / 2, 3 * w, horizon / 3, horizon])
        best = l2c_fig2.best_etc(prob, rounds[p], f_hat, hz)
        for h, t in enumerate(hz):
            cands = [(np.asarray(ec.etc_regret(out, t))[:, g].mean(), g) for g in range(rounds.shape[1])
                     if rounds[p, g] * w <= t]
            if not cands:
                assert best["best"][h] == np.inf
                continue
            value, g = min(cands)
            assert best["best"][h] == pytest.approx(value, rel=2e-3)
            assert best["best_tau"][h] == pytest.approx(rounds[p, g] * w)


def test_interior_minimum_and_crossing_statistics():
    tau = np.linspace(1.0, 9.0, 9)
    noise = np.array([[-1.0], [1.0]]) * 0.1 * np.ones(9)
    bowl = (tau - 5.0) ** 2 + noise                       # (seeds, G): minimum at τ = 5
    edge = tau + noise                                    # minimum at the first τ
    stats = l2c_fig1.interior_minimum(np.stack([bowl, edge]), tau)
    assert stats["tau_min"].tolist() == [5.0, 1.0]
    se = 0.1 * np.sqrt(2) / np.sqrt(2)                    # sd of (-0.1, 0.1) over 2 seeds, / sqrt(2)
    assert stats["z_first"][0] == pytest.approx(16.0 / np.hypot(se, se))
    assert stats["depth"][1] == 0.0
    diff = np.array([[3.0, 1.0, -3.0, 2.0, -3.0, -3.0], [3.0, -3.0, -3.0, -3.0, -3.0, -3.0],
                     [3.0, -3.0, -3.0, -3.0, -3.0, 0.0]])
    few, late, crossing = l2c_fig2.summary(diff, np.ones_like(diff))
    assert few.tolist() == [True, True, True]
    assert late.tolist() == [True, True, False]
    assert crossing.tolist() == [5, 2, 0]
