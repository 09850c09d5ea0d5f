"""What a JAX user expects of the library's values: one precision policy, keyed pytrees, an
``in_axes`` prefix, static objectives and learners, the library's own error under ``jit``, and
a light import."""
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxcrawl
from jaxcrawl import CrawlProblem

LOW = [jnp.float16, jnp.bfloat16]


def problem(batch=()):
    rng = np.random.default_rng(0)
    shape = batch + (5,)
    return CrawlProblem(rng.uniform(0.5, 2.0, shape), rng.uniform(0.2, 3.0, shape), 2.5)


def assert_harmonic_optimum(p, policy):
    """KKT of harmonic staleness (NeurIPS-19 Prop. 2): every page's marginal utility
    mu lam / (x (x + lam)) equals the dual, and the rates spend the bandwidth."""
    x, mu, lam = (np.asarray(a, np.float64) for a in (policy.rate, p.importance, p.change_rate))
    dual = np.asarray(policy.dual, np.float64)[..., None]
    tol = 1e-3 if p.dtype == jnp.float32 else 1e-8
    np.testing.assert_allclose(mu * lam / (x * (x + lam)), np.broadcast_to(dual, x.shape), rtol=tol)
    np.testing.assert_allclose(x.sum(-1), np.broadcast_to(np.asarray(p.bandwidth), x.shape[:-1]), rtol=tol)


# ------------------------------------------------------------------ precision
@pytest.mark.parametrize("dtype", LOW)
def test_low_precision_refused_eagerly_and_under_jit(dtype):
    x = jnp.ones(4, dtype)
    with pytest.raises(TypeError, match=r"importance has dtype .*float32 or float64 only"):
        CrawlProblem(x, jnp.ones(4), 1.0)
    with pytest.raises(TypeError, match=r"change_rate has dtype .*float32 or float64 only"):
        jax.jit(lambda c: CrawlProblem(jnp.ones(4), c, 1.0).importance)(x)
    with pytest.raises(TypeError, match=r"bandwidth has dtype .*float32 or float64 only"):
        jax.jit(lambda b: CrawlProblem(jnp.ones(4), jnp.ones(4), b).importance)(jnp.asarray(1.0, dtype))
    # a problem cast leaf by leaf (no constructor) is refused by the solve, eager and traced
    cast = jax.tree_util.tree_map(lambda a: a.astype(dtype), problem())
    with pytest.raises(TypeError, match=r"the problem has dtype .*float32 or float64 only"):
        jaxcrawl.solve(cast)
    with pytest.raises(TypeError, match=r"the problem has dtype .*float32 or float64 only"):
        jax.jit(lambda p: jaxcrawl.lambda_crawl(p).rate)(cast)


@pytest.mark.parametrize("dtype", LOW)
def test_low_precision_histories_refused_eagerly_and_under_jit(dtype):
    changed = jnp.ones((2, 3), bool)
    with pytest.raises(TypeError, match=r"intervals has dtype .*float32 or float64 only"):
        jaxcrawl.estimators.mle(jnp.ones((2, 3), dtype), changed)
    with pytest.raises(TypeError, match=r"intervals has dtype .*float32 or float64 only"):
        jax.jit(lambda w: jaxcrawl.estimators.moment_matching(w, changed))(jnp.ones((2, 3), dtype))


def test_integer_inputs_still_promote_to_the_default_float():
    p = CrawlProblem(np.array([1, 2, 3]), [1, 1, 2], 2)
    assert p.dtype == jnp.result_type(float)
    assert p.bandwidth.dtype == p.dtype


# --------------------------------------------------------------------- pytrees
def test_problem_and_policy_paths_name_their_fields():
    p = problem()
    paths = [jax.tree_util.keystr(k) for k, _ in jax.tree_util.tree_flatten_with_path(p)[0]]
    assert paths == [".importance", ".change_rate", ".bandwidth", ".complete"]
    pol = jaxcrawl.make_policy(p, p.importance, 1.0)
    paths = [jax.tree_util.keystr(k) for k, _ in jax.tree_util.tree_flatten_with_path(pol)[0]]
    assert paths[:3] == [".rate", ".prob", ".on_signal"]
    # flatten / unflatten round trip keeps every leaf
    leaves, tree = jax.tree_util.tree_flatten(p)
    back = jax.tree_util.tree_unflatten(tree, leaves)
    for a, b in zip(jax.tree_util.tree_leaves(back), leaves):
        assert a is b


def test_in_axes_prefix_maps_the_pages_and_shares_the_bandwidth():
    batch = problem((3,))
    axes = CrawlProblem(0, 0, None, 0)
    assert axes == CrawlProblem.in_axes(importance=0, change_rate=0, complete=0)
    mapped = jax.jit(jax.vmap(lambda q: jaxcrawl.solve(q), in_axes=(axes,)))(batch)
    assert mapped.rate.shape == (3, 5) and mapped.dual.shape == (3,)
    assert_harmonic_optimum(batch, mapped)
    # as an out_axes prefix too: the problems come back batched, the bandwidth shared
    built = jax.vmap(lambda i, c: CrawlProblem(i, c, batch.bandwidth), out_axes=axes)(batch.importance,
                                                                                     batch.change_rate)
    assert built.importance.shape == (3, 5) and built.bandwidth.shape == ()
    assert "in_axes(importance=0" in repr(axes)


def test_prefix_needs_ints_or_none_and_a_scalar_problem_is_still_an_error():
    assert CrawlProblem(0, None, None, None).change_rate is None
    with pytest.raises(TypeError, match="int axis or None"):
        CrawlProblem.in_axes(importance=0.5)
    with pytest.raises(ValueError, match="at least one axis.*in_axes"):
        CrawlProblem(1, 2, 3)


@pytest.mark.parametrize("make", [jaxcrawl.harmonic, lambda: jaxcrawl.binary(0.4), jaxcrawl.uniform])
def test_objective_is_a_static_pytree_without_leaves(make):
    obj = make()
    assert jax.tree_util.tree_leaves(obj) == []
    assert len(jax.tree_util.tree_leaves({"o": obj, "x": jnp.ones(2)})) == 1
    assert hash(make()) == hash(obj) and make() == obj
    assert jax.tree_util.tree_map(lambda a: a, obj) is obj
    assert jax.tree_util.tree_leaves(obj.gap) == []


def test_objective_is_a_plain_jit_argument():
    p = problem()
    assert_harmonic_optimum(p, jax.jit(lambda q, o: jaxcrawl.solve(q, o))(p, jaxcrawl.harmonic()))


def test_learner_is_a_static_jit_argument():
    learner = jaxcrawl.learners.mirror_sync()
    assert jax.tree_util.tree_leaves(learner) == []
    # its state's paths are field names all the way down
    bandit = jaxcrawl.sync_bandits.polynomial_bandit(jax.random.key(0), 4, dtype=jnp.float32)
    paths = [path for path, _ in jax.tree_util.tree_flatten_with_path(learner.init(bandit))[0]]
    assert paths and all(isinstance(k, jax.tree_util.GetAttrKey) for path in paths for k in path)
    assert jax.jit(lambda lr, x: x + len(lr.name))(learner, 1.0) == 1.0 + len(learner.name)
    assert jax.tree_util.tree_map(lambda a: a, learner) is learner


# ------------------------------------------------------------- throw under jit
def test_throw_under_jit_is_the_library_error_and_prints_nothing(capfd):
    p = problem()
    solve = jax.jit(lambda q: jaxcrawl.solve(q, max_steps=1, throw=True).rate)
    with pytest.raises(jaxcrawl.NonConvergenceError, match=r"solve\('harmonic'\) did not converge"):
        with jaxcrawl.library_errors():
            jax.block_until_ready(solve(p))
    # ... and as a decorator
    run = jaxcrawl.library_errors()(lambda q: jax.block_until_ready(solve(q)))
    with pytest.raises(jaxcrawl.NonConvergenceError, match="did not converge"):
        run(p)
    # without the context manager the runtime's wrapper still carries the message
    with pytest.raises(jax.errors.JaxRuntimeError, match="did not converge"):
        jax.block_until_ready(solve(p))
    out, err = capfd.readouterr()
    assert "Traceback" not in err and "callback failed" not in err
    # other errors pass through unchanged
    with pytest.raises(ValueError, match="other"):
        with jaxcrawl.library_errors():
            raise ValueError("other")


@pytest.mark.parametrize("batch", [(), pytest.param((2,), marks=pytest.mark.long)])
def test_throw_eager_and_vmapped_is_the_library_error(capfd, batch):
    with pytest.raises(jaxcrawl.NonConvergenceError, match="did not converge"):
        jaxcrawl.solve(problem(batch), max_steps=1, throw=True)
    assert "Traceback" not in capfd.readouterr().err


def test_estimator_throw_is_the_library_error(capfd):
    intervals = jnp.asarray([[0.3, 1.2, 0.7, 2.0, 0.1]])
    changed = jnp.asarray([[True, False, True, True, False]])
    with pytest.raises(jaxcrawl.NonConvergenceError, match="estimators.mle did not converge"):
        jaxcrawl.estimators.mle(intervals, changed, max_steps=1, throw=True)
    assert "Traceback" not in capfd.readouterr().err


# ----------------------------------------------------------------- light import
def test_import_loads_no_table_reader_progress_bar_or_optimiser():
    heavy = "('pyarrow', 'tqdm', 'optax', 'optax.contrib', 'matplotlib', 'jaxcrawl.learners', 'jaxcrawl.io._rows')"
    code = (f"import sys, jaxcrawl; print(*[m for m in {heavy} if m in sys.modules]); "
            # the subpackages and the io names come on first use
            "jaxcrawl.learners.run_learner; jaxcrawl.io.read_table; print(jaxcrawl.optim.__name__)")
    out = subprocess.run([sys.executable, "-c", code], check=True, timeout=120, capture_output=True, text=True)
    assert out.stdout.splitlines() == ["", "jaxcrawl.optim"]
