"""A CrawlProblem is a differentiable pytree: ``jax.grad``, ``jax.jacfwd`` and
``optax.apply_updates`` take the whole problem; ``jaxcrawl.stack`` batches problems; LLC's
inner solver is chosen by name."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import jaxcrawl
from jaxcrawl import CrawlProblem
from jaxcrawl import learners as lc
from jaxcrawl.learners import _learn_and_crawl as llc

from helpers import fd_grad


def _problem(seed=0, n=8, dtype=None):
    rng = np.random.default_rng(seed)
    comp = np.zeros(n, bool)
    comp[:3] = True
    dtype = dtype or jnp.result_type(float)
    return CrawlProblem(rng.lognormal(0, 1, n).astype(dtype), rng.lognormal(0, 0.7, n).astype(dtype),
                        np.asarray(0.4 * n, dtype), comp)


def _optimal_cost(p):
    return jaxcrawl.harmonic_cost(p, jaxcrawl.lambda_crawl(p))


_cost = jax.jit(_optimal_cost)
_grad = jax.jit(jax.grad(_optimal_cost))


def test_every_leaf_is_a_float_of_the_problems_dtype():
    p = _problem()
    assert all(leaf.dtype == p.dtype for leaf in jax.tree_util.tree_leaves(p))
    np.testing.assert_array_equal(np.asarray(p.complete), [1, 1, 1, 0, 0, 0, 0, 0])
    q = CrawlProblem(p.importance, p.change_rate, p.bandwidth, np.asarray(p.complete))  # 0/1 floats accepted
    np.testing.assert_array_equal(np.asarray(q.complete), np.asarray(p.complete))
    with pytest.raises(ValueError, match="complete must be a boolean mask"):
        CrawlProblem(p.importance, p.change_rate, p.bandwidth, 0.5 * np.asarray(p.complete))


@pytest.mark.x64
def test_grad_of_a_problem_matches_finite_differences():
    """d cost*/d(importance, change_rate, bandwidth) of the optimal LambdaCrawl plan against
    central differences; the mask's cotangent is zero."""
    p = _problem()
    g = _grad(p)
    assert isinstance(g, CrawlProblem)
    np.testing.assert_array_equal(np.asarray(g.complete), 0.0)
    for field in ("importance", "change_rate", "bandwidth"):
        fd = fd_grad(lambda v, f=field: _cost(p.replace(**{f: v})), getattr(p, field), eps=1e-6, relative=True)
        np.testing.assert_allclose(np.asarray(getattr(g, field)), fd, rtol=1e-6, atol=1e-9, err_msg=field)
    # the envelope theorem: d cost*/dR = -dual / n
    np.testing.assert_allclose(float(g.bandwidth), -float(jaxcrawl.lambda_crawl(p).dual) / p.num_pages, rtol=1e-9)


@pytest.mark.x64
def test_jacfwd_of_a_problem_equals_jacrev():
    p = _problem(1, n=6)
    rates = jax.jit(lambda q: jaxcrawl.lambda_crawl(q).rate)
    fwd, rev = jax.jacfwd(rates)(p), jax.jacrev(rates)(p)
    assert fwd.importance.shape == (6, 6) and fwd.bandwidth.shape == (6,)
    for a, b in zip(jax.tree_util.tree_leaves(fwd), jax.tree_util.tree_leaves(rev)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(np.asarray(fwd.complete), 0.0)
    # the rates spend the bandwidth: each Jacobian column sums to 0, the bandwidth's to 1
    np.testing.assert_allclose(np.asarray(fwd.importance).sum(0), 0.0, atol=1e-10)
    np.testing.assert_allclose(float(np.asarray(fwd.bandwidth).sum()), 1.0, rtol=1e-10)


def test_optax_updates_a_problem_and_keeps_its_mask():
    p = _problem(2)
    g = _grad(p)
    opt = optax.sgd(1e-3)
    updates, _ = opt.update(g, opt.init(p))
    q = optax.apply_updates(p, updates)
    assert isinstance(q, CrawlProblem)
    np.testing.assert_array_equal(np.asarray(q.complete), np.asarray(p.complete))
    np.testing.assert_allclose(np.asarray(q.importance), np.asarray(p.importance - 1e-3 * g.importance), rtol=1e-6)
    assert float(_cost(q)) < float(_cost(p))  # a descent step


def test_stack_batches_problems_and_vmap_solve_equals_each_solve():
    ps = [_problem(s) for s in range(3)]
    ps[1] = ps[1].replace(bandwidth=1.7)
    batch = jaxcrawl.stack(ps)
    assert batch.importance.shape == (3, 8) and batch.bandwidth.shape == (3,)
    assert batch.complete.dtype == batch.dtype
    stacked = jax.vmap(jaxcrawl.lambda_crawl)(batch)
    for i, p in enumerate(ps):
        one = jaxcrawl.lambda_crawl(p)
        np.testing.assert_allclose(np.asarray(stacked.rate[i]), np.asarray(one.rate), rtol=1e-5)
        np.testing.assert_allclose(float(stacked.dual[i]), float(one.dual), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(jaxcrawl.lambda_crawl(batch).rate), np.asarray(stacked.rate), rtol=1e-5)
    # a stack of batches broadcasts each bandwidth to its batch
    two = jaxcrawl.stack([batch, batch])
    assert two.importance.shape == (2, 3, 8) and two.bandwidth.shape == (2, 3)


def test_stack_names_its_errors():
    with pytest.raises(ValueError, match="at least one"):
        jaxcrawl.stack([])
    with pytest.raises(ValueError, match=r"problems\[1\] has \(5,\)"):
        jaxcrawl.stack([_problem(n=8), _problem(n=5)])
    with pytest.raises(TypeError, match=r"problems\[0\]"):
        jaxcrawl.stack([_problem().importance])


FAMILY = ("harmonic", "harmonic-approx", "binary-epsilon")


def test_llc_solver_names_resolve_to_the_old_indices():
    """A name (or Objective) picks the position the float index used to give; a grid of
    names keeps arrays (jit and vmap take it) and maps its labels to the learner's order."""
    utilities = llc._utilities(FAMILY)
    for k, name in enumerate(FAMILY):
        assert llc._solver_index(utilities, lc.LLCParams(solver=name)) == k
    assert llc._solver_index(utilities, lc.LLCParams(solver=jaxcrawl.harmonic_approx())) == 1
    numeric = lc.grid_product(lc.LLCParams, solver=[0, 1, 2])
    np.testing.assert_array_equal(np.asarray(llc._solver_index(utilities, numeric)), [0.0, 1.0, 2.0])
    grid = lc.grid_product(lc.LLCParams, solver=["binary-epsilon", "harmonic", "harmonic-approx"],
                           smoothing=[0.25, 0.5])
    assert grid.solver_names == ("binary-epsilon", "harmonic", "harmonic-approx")
    np.testing.assert_array_equal(np.asarray(grid.solver), [0, 0, 1, 1, 2, 2])
    picked = jax.jit(jax.vmap(lambda g: llc._solver_index(utilities, g)))(grid)
    np.testing.assert_array_equal(np.asarray(picked), [2, 2, 0, 0, 1, 1])
    # a name is static: no string leaf, and jit retraces per name
    named = lc.LLCParams(solver="harmonic-approx")
    assert all(not isinstance(x, str) for x in jax.tree_util.tree_leaves(named))
    assert jax.jit(lambda prm: prm)(named).solver == "harmonic-approx"
    with pytest.raises(ValueError, match=r"'binary' is not one of this learner's inner solvers"):
        llc._solver_index(utilities, lc.LLCParams(solver="binary"))
    with pytest.raises(ValueError, match="not one of this learner's"):
        llc._solver_index(utilities, lc.LLCParams(solver="no-such-objective"))
    with pytest.raises(ValueError, match="takes numbers"):
        lc.grid_product(lc.LLCParams, smoothing=["a", "b"])


@pytest.fixture(scope="module")
def family_learner():
    p = _problem(3, n=12)
    settings = lc.llc_settings(p, FAMILY, sampler="observation")
    return p, lc.lambda_learn_and_crawl(FAMILY, **settings)


@pytest.mark.long
def test_llc_solver_by_name_equals_its_index(family_learner):
    """A named inner solver picks the same branch as its old float index, alone and in a
    grid of names (vmapped: one program)."""
    p, learner = family_learner
    init_rate = jax.jit(lambda prm: learner.init(p, prm).policy.rate)
    by_index = jax.vmap(init_rate)(lc.grid_product(lc.LLCParams, solver=[0, 1, 2]))  # the float index
    for k, name in enumerate(FAMILY):
        np.testing.assert_allclose(np.asarray(init_rate(lc.LLCParams(solver=name))), np.asarray(by_index[k]),
                                   rtol=1e-5)
    assert not np.allclose(np.asarray(by_index[0]), np.asarray(by_index[2]))  # the branches differ
    grid = lc.grid_product(lc.LLCParams, solver=["binary-epsilon", "harmonic", "harmonic-approx"])
    np.testing.assert_array_equal(np.asarray(jax.vmap(init_rate)(grid)), np.asarray(by_index[jnp.array([2, 0, 1])]))
    with pytest.raises(ValueError, match=r"'binary' is not one of this learner's inner solvers"):
        learner.init(p, lc.LLCParams(solver="binary"))


@pytest.mark.long
def test_llc_run_by_name_equals_run_by_index(family_learner):
    p, learner = family_learner
    key = jax.random.key(0)
    _, by_name = lc.run_learner(key, learner, p, 3, lc.LLCParams(solver="harmonic-approx"))
    _, by_index = lc.run_learner(key, learner, p, 3, lc.LLCParams(solver=1.0))
    for a, b in zip(jax.tree_util.tree_leaves(by_name), jax.tree_util.tree_leaves(by_index)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5)  # one branch compiled vs a switch
