"""Hyperparameter validation of the learners: eager before the compiled driver, a flag under a trace,
and the opt-in persistent compile cache."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxcrawl
import jaxcrawl.compile_cache as cc
import jaxcrawl.sync_bandits as sb
from jaxcrawl.learners import LLCParams, SyncHyperparams, grid_product, mirror_sync, run_learner, run_sweep
from jaxcrawl.learners import _learn_and_crawl as lc


@pytest.fixture(scope="module")
def bandit():
    return sb.polynomial_bandit(jax.random.key(0), 12)


@pytest.mark.parametrize("hp, field", [
    (SyncHyperparams(-1.0, 0.05, 1.0), "learning_rate"),
    (SyncHyperparams(1.0, 0.0, 1.0), "exploration"),
    (SyncHyperparams(1.0, 0.05, float("nan")), "update_interval"),
])
def test_run_learner_refuses_invalid_hyperparameters_before_compiling(bandit, hp, field):
    with pytest.raises(ValueError, match=field):
        run_learner(jax.random.key(1), mirror_sync(), bandit, 2, hp)


@pytest.mark.long
def test_traced_hyperparameters_are_reported_in_converged(bandit):
    learner = mirror_sync()

    @jax.jit
    def run(eta):
        return run_learner(jax.random.key(1), learner, bandit, 3, SyncHyperparams(eta, 0.05, 1.0))[1].converged

    ok = np.asarray(run(jnp.float32(1.0)))
    bad = np.asarray(run(jnp.float32(-1.0)))
    assert ok.all()
    assert not bad.any()


def test_run_sweep_refuses_an_invalid_grid_point(bandit):
    bandits = jax.tree_util.tree_map(lambda a: jnp.stack([a, a]), bandit)
    grid = SyncHyperparams(jnp.asarray([1.0, -2.0]), jnp.full(2, 0.05), jnp.ones(2))
    with pytest.raises(ValueError, match="learning_rate"):
        run_sweep(jax.random.key(0), mirror_sync(), bandits, grid, num_seeds=1, num_steps=1)


@pytest.fixture(scope="module")
def llc():
    q = jaxcrawl.synthetic(jax.random.key(3), 6)
    return q, lc.lambda_learn_and_crawl(**lc.llc_settings(q))


@pytest.mark.long
@pytest.mark.parametrize("params, field", [
    (LLCParams(smoothing=-1.0), "smoothing"),
    (LLCParams(epsilon=2.0), "epsilon"),
    (LLCParams(initial_rate=0.0), "initial_rate"),
    (LLCParams(solver="binary-epsilon"), "not one of this learner"),
])
def test_llc_refuses_invalid_params_before_compiling(llc, params, field):
    q, learner = llc
    with pytest.raises(ValueError, match=field):
        run_learner(jax.random.key(0), learner, q, 1, params)


@pytest.mark.long
def test_llc_sweep_refuses_an_invalid_grid(llc):
    q, learner = llc
    qs = jax.tree_util.tree_map(lambda a: jnp.stack([a]), q.replace(bandwidth=jnp.asarray(q.bandwidth)))
    with pytest.raises(ValueError, match="suffix_epochs"):
        run_sweep(jax.random.key(0), learner, qs, grid_product(LLCParams, suffix_epochs=[2.0, 0.5]),
                  num_seeds=1, num_steps=1)


@pytest.mark.long
def test_llc_traced_invalid_params_are_flagged(llc):
    q, learner = llc

    @jax.jit
    def run(smoothing):
        return run_learner(jax.random.key(0), learner, q, 2, LLCParams(smoothing=smoothing))[1].converged

    assert np.asarray(run(0.5)).all()
    assert not np.asarray(run(-1.0)).any()


def test_enable_compile_cache_sets_and_respects_the_switch(tmp_path, monkeypatch):
    names = ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs",
             "jax_persistent_cache_min_entry_size_bytes")
    before = {n: getattr(jax.config, n) for n in names}
    try:
        monkeypatch.setenv("JAXCRAWL_COMPILE_CACHE", "0")
        assert cc.enable_compile_cache(tmp_path / "off") is None
        assert jax.config.jax_compilation_cache_dir == before["jax_compilation_cache_dir"]
        monkeypatch.delenv("JAXCRAWL_COMPILE_CACHE")
        path = cc.enable_compile_cache(tmp_path / "xla", min_compile_seconds=0.5)
        assert path == tmp_path / "xla" and path.is_dir()
        assert jax.config.jax_compilation_cache_dir == str(path)
        assert jax.config.jax_persistent_cache_min_compile_time_secs == 0.5
        assert cc.enable_compile_cache(tmp_path / "other", override=False) is None  # one is configured
        assert jax.config.jax_compilation_cache_dir == str(path)
        with pytest.raises(ValueError, match="min_compile_seconds"):
            cc.enable_compile_cache(tmp_path / "neg", min_compile_seconds=-1.0)
        monkeypatch.setenv("JAXCRAWL_CACHE_DIR", str(tmp_path / "env"))
        assert cc.compile_cache_dir() == tmp_path / "env"
    finally:
        for n, v in before.items():
            jax.config.update(n, v)
