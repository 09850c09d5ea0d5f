"""Range-restricted learner settings of the sync bandits, checked eagerly when concrete
(a clear ValueError naming the setting and its range), and not under tracing."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcrawl import learners, sync_bandits


@pytest.fixture(scope="module")
def bandit():
    return sync_bandits.polynomial_bandit(jax.random.key(0), 4)


@pytest.mark.parametrize("eps", [0.0, -1.0, 1.5, float("nan")])
def test_exploration_outside_its_range_is_refused(bandit, eps):
    rate = jnp.full(4, float(bandit.budget) / 4)
    with pytest.raises(ValueError, match=r"exploration must lie in \(0, 1\]"):
        learners.mirror_sync().init(bandit, learners.SyncHyperparams(0.1, eps, 1.0))
    with pytest.raises(ValueError, match=r"exploration must lie in \(0, 1\]"):
        sync_bandits.interval_gradient_estimate(jax.random.key(1), bandit.costs, rate, jnp.ones(4, int), eps)
    if not eps >= 0:
        with pytest.raises(ValueError, match="exploration must be >= 0"):
            sync_bandits.optimal_policy(bandit, eps)


@pytest.mark.parametrize("bad", [float("nan"), 0.0, -1.0, float("inf")])
def test_grid_search_settings_outside_their_ranges_are_refused(bandit, bad):
    key = jax.random.key(0)
    with pytest.raises(ValueError, match="learning_rates must be finite and > 0"):
        learners.grid_search(key, learners.mirror_sync(), bandit, [0.1, bad])
    with pytest.raises(ValueError, match="update_intervals must be finite and > 0"):
        learners.grid_search(key, learners.async_mirror_sync(), bandit, [0.1], [1.0, bad])
    if not bad > 0:
        with pytest.raises(ValueError, match="horizon_rounds must be > 0"):
            learners.grid_search(key, learners.mirror_sync(), bandit, [0.1], horizon_rounds=bad)


def test_the_checks_are_skipped_under_tracing(bandit):
    """Traced settings are not inspected: the same calls compile (no ValueError)."""
    got = jax.jit(lambda e: sync_bandits.optimal_policy(bandit, e).x)(0.05)
    np.testing.assert_allclose(np.sum(got), float(bandit.budget) / 1.05, rtol=1e-5)
    jax.eval_shape(lambda e: learners.mirror_sync().init(bandit, learners.SyncHyperparams(0.1, e, 1.0)), 0.05)
