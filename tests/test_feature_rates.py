"""The feature-model experiment (``jaxcrawl reproduce feature_rates``): its losses, their gradients,
its histories and statistics, and its quick run.

Default lane: the decision-focused loss's gradient through LambdaCrawl against central finite
differences (float64, linear and MLP models) and its stationarity at the true rates; the likelihood
loss against a NumPy transcription of L2C eq. 6 and its stationarity at the per-page MLE; the
truncated histories, the Student-t quantile against SciPy, the worlds' feature layout.
``reproduce`` lane: the quick run, its table with intervals and its checked claims.
"""
from __future__ import annotations

import json
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcrawl import estimators
from jaxcrawl.experiments import feature_rates as fr

import reference
from helpers import fd_jvp


def _pages(key, n):
    """A small problem: importance, true change rates (float64 under x64)."""
    k1, k2 = jax.random.split(key)
    lam = jnp.exp(-1.0 + jax.random.normal(k1, (n,)))
    imp = jnp.exp(jax.random.normal(k2, (n,)))
    return imp, lam


@pytest.mark.x64
def test_decision_loss_is_stationary_at_the_true_rates_and_its_gradient_is_exact():
    """With one indicator feature per page (and a shared one) the model can state the true rates;
    the plan is then the oracle's, so the loss equals the optimal cost and its gradient vanishes (the
    plan is optimal for the rates it is costed under: the budget-preserving moves are orthogonal to
    the cost's gradient).  Away from them the gradient through LambdaCrawl's implicit derivative
    matches central finite differences."""
    n = 12
    imp, lam = _pages(jax.random.key(4), n)
    x = jnp.concatenate([jnp.eye(n), jnp.ones((n, 1))], axis=1)
    value_and_grad = jax.jit(jax.value_and_grad(lambda p: fr.decision_loss(p, x, imp, lam, 3.0), has_aux=True))
    mu, xi = np.asarray(imp, np.float64), np.asarray(lam, np.float64)
    optimal = reference.harmonic_cost_ref(mu, xi, reference.lambda_crawl_incomplete_ref(mu, xi, 3.0), False)
    truth = {"w": jnp.append(jnp.log(lam) - 0.5, 0.5), "b": jnp.zeros(())}
    (value, converged), g = value_and_grad(truth)
    assert bool(converged)
    assert abs(float(value) - optimal) <= 1e-10 * optimal
    assert float(jnp.max(jnp.abs(g["w"]))) <= 1e-9 * optimal and abs(float(g["b"])) <= 1e-9 * optimal

    away = {"w": truth["w"] + 0.5 * jnp.sin(jnp.arange(n + 1.0)), "b": jnp.asarray(0.2)}
    (value, converged), g = value_and_grad(away)
    assert bool(converged)
    assert float(value) > optimal * (1 + 1e-6) and float(jnp.max(jnp.abs(g["w"]))) > 1e-6
    for seed in range(2):
        kw, kb = jax.random.split(jax.random.key(10 + seed))
        v = {"w": jax.random.normal(kw, (n + 1,), jnp.float64), "b": jax.random.normal(kb, (), jnp.float64)}
        exact = float(jnp.vdot(g["w"], v["w"]) + g["b"] * v["b"])
        approx = float(fd_jvp(lambda p: value_and_grad(p)[0][0], away, v, eps=1e-6))
        assert abs(exact - approx) <= 1e-6 * max(1e-3, abs(approx)), (seed, exact, approx)


def _history(seed, n, k):
    rng = np.random.default_rng(seed)
    w = rng.exponential(2.0, (n, k))
    c = rng.random((n, k)) < 0.5
    m = rng.random((n, k)) < 0.8
    m[:, :2] = True
    c[:, 0], c[:, 1] = True, False  # every page has a change and a no-change: interior MLE
    return w, c, m


def test_likelihood_loss_is_l2c_equation_6():
    w, c, m = _history(0, 5, 7)
    x = np.random.default_rng(1).normal(size=(5, 2))
    params = {"w": jnp.array([0.3, -0.2]), "b": jnp.array(-0.7)}
    xi = np.exp(x @ np.array([0.3, -0.2]) - 0.7)[:, None]
    ll = np.where(m, np.where(c, np.log1p(-np.exp(-xi * w)), -xi * w), 0.0).sum()
    expected = -ll / m.sum()
    got = float(fr.likelihood_loss(params, jnp.asarray(x), jnp.asarray(w), jnp.asarray(c), jnp.asarray(m)))
    assert abs(got - expected) <= 1e-5 * abs(expected)


@pytest.mark.x64
def test_likelihood_gradient_vanishes_at_the_per_page_mle():
    w, c, m = (jnp.asarray(a) for a in _history(2, 1, 9))
    rate = estimators.mle(w, c, m, return_info=True)
    assert bool(rate.converged[0])
    x = jnp.zeros((1, 1))
    grad = jax.jit(jax.grad(fr.likelihood_loss))

    def grad_b(b):
        return float(grad({"w": jnp.zeros(1), "b": b}, x, w, c, m)["b"])

    b = jnp.log(rate.rate[0])
    assert abs(grad_b(b)) <= 1e-9
    assert grad_b(b - 0.3) < -1e-4 and grad_b(b + 0.3) > 1e-4   # a minimum, not a flat loss


def test_first_days_keeps_the_crawls_of_the_first_days():
    w = jnp.array([[1.0, 2.0, 3.0, 4.0], [5.0, 1.0, 1.0, 1.0], [0.5, 0.5, 9.0, 0.1]])
    m = jnp.array([[True, True, True, False], [True, True, True, True], [True, False, True, True]])
    got = np.asarray(fr.first_days(w, m, 3.0))
    expected = np.array([[True, True, False, False], [False, False, False, False], [True, False, False, False]])
    np.testing.assert_array_equal(got, expected)


def test_t_quantile_and_interval_match_scipy():
    stats = pytest.importorskip("scipy.stats")
    for dof in (1, 2, 5, 9, 10, 15, 30, 100):
        assert abs(fr.t_quantile_975(dof) - stats.t.ppf(0.975, dof)) < 2e-4
    v = np.array([1.0, 1.5, 0.7, 1.2, 0.9])
    mean, lo, hi = fr.mean_ci(v)
    ref = stats.t.interval(0.95, len(v) - 1, loc=v.mean(), scale=stats.sem(v))
    assert abs(mean - v.mean()) < 1e-12 and abs(lo - ref[0]) < 1e-3 and abs(hi - ref[1]) < 1e-3
    with pytest.raises(ValueError, match="at least 2"):
        fr.mean_ci([1.0])


@pytest.mark.parametrize("world", fr.WORLDS)
def test_worlds_have_the_feature_layout(world):
    imp, lam, x = fr.draw_pages(jax.random.key(0), jax.random.key(1), world=world, num_pages=500)
    assert x.shape == (500, fr.NUM_HOSTS + 5)
    np.testing.assert_array_equal(np.asarray(x[:, :fr.NUM_HOSTS].sum(1)), 1.0)      # one host each
    assert np.all((np.asarray(lam) >= fr.MIN_RATE) & (np.asarray(lam) <= fr.MAX_RATE))
    assert np.all(np.asarray(imp) > 0)
    # the features explain part of the log rate: least squares on them beats the constant
    y = np.log(np.asarray(lam, np.float64))
    a = np.asarray(x, np.float64)   # the host one-hot spans the constant
    resid = y - a @ np.linalg.lstsq(a, y, rcond=None)[0]
    assert np.mean(resid**2) < 0.7 * np.var(y)


@pytest.mark.reproduce
def test_quick_run_reports_its_table_and_checks_its_claims(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "jaxcrawl.cli", "reproduce", "feature_rates", "--quick", "--out",
                           str(tmp_path), "--no-progress"], capture_output=True, text=True, timeout=1800, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["passed"] is True and summary["failed"] == []
    record = json.loads((tmp_path / "feature_rates.json").read_text())
    for world in fr.WORLDS:
        res = record["results"][world]
        assert set(res["relative_cost"]) == set(fr.METHODS)
        for method, row in res["relative_cost"].items():
            per_draw = res["relative_cost_per_draw"][method]
            assert len(per_draw) == record["params"]["draws"] >= 2
            assert row["lower"] <= row["mean"] <= row["upper"]
            assert abs(row["mean"] - np.mean(per_draw)) < 1e-9
            assert min(per_draw) >= 1 - 1e-4, method   # no plan beats the oracle's
        for name in ("decision_focused_vs_likelihood", "features_beat_short_histories",
                     "features_beat_no_information", "solves_converged"):
            assert record["claims"][f"{world}_{name}"] is True
    assert (tmp_path / "feature_rates.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
