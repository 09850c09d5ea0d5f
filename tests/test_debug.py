"""jaxcrawl.debug.checked: the first bad value inside jit/vmap, by problem and page index.

A batch of 6 problems of 40 pages (one compiled shape reused); each test plants one bad
value at a known (problem, page) and asserts the message names exactly that position and
rule, and that a clean batch passes through unchanged (the wrapped solve's rates are the
unwrapped solve's, and meet each problem's budget).
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxcrawl
from jaxcrawl.debug import CheckError, check_array, checked

B, N = 6, 40


@jax.jit
def solve_arrays(importance, change_rate, bandwidth):
    one = lambda i, c, b: jaxcrawl.solve(jaxcrawl.CrawlProblem(i, c, b), "harmonic")  # noqa: E731
    return jax.vmap(one)(importance, change_rate, bandwidth)


solve_problems = jax.jit(jax.vmap(lambda p: jaxcrawl.solve(p, "harmonic")))


def _batch():
    rng = np.random.default_rng(0)
    imp, lam = rng.lognormal(size=(2, B, N)).astype(np.float32)
    return jnp.asarray(imp), jnp.asarray(lam), jnp.asarray(np.linspace(2.0, 12.0, B), jnp.float32)


def _problem(imp, lam, bw):
    """A batched CrawlProblem whose arrays bypass the eager validation (as under jit)."""
    good = jaxcrawl.CrawlProblem(*_batch())
    leaves = jax.tree_util.tree_leaves(good)
    return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(good), [imp, lam, bw, leaves[3]])


@pytest.mark.long
def test_clean_batch_passes_unchanged():
    imp, lam, bw = _batch()
    ref = solve_arrays(imp, lam, bw)
    got = checked(solve_arrays)(imp, lam, bw)
    np.testing.assert_array_equal(got.rate, ref.rate)
    np.testing.assert_allclose(np.sum(np.asarray(got.rate, np.float64), -1), bw, rtol=1e-5)
    unchecked = solve_problems(_problem(imp, lam, bw))
    got = checked(solve_problems)(_problem(imp, lam, bw))
    np.testing.assert_array_equal(got.rate, unchecked.rate)
    # the same solves written as another program: equal to its rounding
    np.testing.assert_allclose(got.rate, ref.rate, rtol=4 * float(np.finfo(np.asarray(ref.rate).dtype).eps))


@pytest.mark.parametrize("where", [(3, 17), pytest.param((0, 0), marks=pytest.mark.long),
                                   pytest.param((5, 39), marks=pytest.mark.long)])
def test_nan_importance_array_reported_by_problem_and_page(where):
    imp, lam, bw = _batch()
    bad = imp.at[where].set(jnp.nan)
    unchecked = solve_arrays(bad, lam, bw)  # what a user sees without the debug mode: NaN, no error
    assert not np.all(np.isfinite(np.asarray(unchecked.rate)))
    with pytest.raises(CheckError, match=rf"argument 0 must not be NaN: problem {where[0]}, page {where[1]}, "
                                         r"value nan"):
        checked(solve_arrays)(bad, lam, bw)


@pytest.mark.parametrize("field,value,rule", [("importance", -1.0, "finite and > 0"),
                                              pytest.param("change_rate", 0.0, "finite and > 0",
                                                           marks=pytest.mark.long),
                                              pytest.param("change_rate", jnp.inf, "finite and > 0",
                                                           marks=pytest.mark.long)])
def test_problem_rules_by_problem_and_page(field, value, rule):
    imp, lam, bw = _batch()
    arrays = dict(importance=imp, change_rate=lam)
    arrays[field] = arrays[field].at[4, 9].set(value)
    with pytest.raises(CheckError, match=rf"argument 0: {field} must be {rule}: problem 4, page 9, value"):
        checked(solve_problems)(_problem(arrays["importance"], arrays["change_rate"], bw))


@pytest.mark.long
def test_bandwidth_reported_by_problem():
    imp, lam, bw = _batch()
    with pytest.raises(CheckError, match=r"argument 0: bandwidth must be finite and > 0: problem 2, value -1"):
        checked(solve_problems)(_problem(imp, lam, bw.at[2].set(-1.0)))


@pytest.mark.long
def test_bad_result_rate_reported():
    imp, lam, bw = _batch()

    def broken(i, c, b):  # a "solver" that produces one NaN rate
        pol = solve_arrays(i, c, b)
        return pol._replace(rate=pol.rate.at[1, 30].set(jnp.nan))

    with pytest.raises(CheckError, match=r"result\.rate must be finite and >= 0: problem 1, page 30, value nan"):
        checked(broken)(imp, lam, bw)


def test_check_array_rules_and_bad_rule():
    f = jax.jit(lambda x: check_array(x, "x", "finite, >= 0"))
    from jax.experimental import checkify

    err, _ = checkify.checkify(f)(jnp.array([1.0, 0.0, -2.0]))
    assert "x must be finite and >= 0: page 2, value -2" in err.get()
    err, _ = checkify.checkify(f)(jnp.array([1.0, 0.0]))
    assert err.get() is None
    with pytest.raises(ValueError, match="rule must be one of"):
        check_array(jnp.ones(2), "x", "positive")
