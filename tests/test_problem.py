import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxcrawl
from jaxcrawl import CrawlProblem


def test_valid_problem_defaults():
    p = CrawlProblem([1.0, 2.0], [0.5, 0.1], 1.0)
    assert p.num_pages == 2
    assert p.complete.dtype == p.importance.dtype and not bool(p.complete.any())  # a float mask
    assert p.importance.dtype == p.change_rate.dtype


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(importance=[1.0, -1.0], change_rate=[1.0, 1.0], bandwidth=1.0), "importance must be > 0"),
        (dict(importance=[1.0, 0.0], change_rate=[1.0, 1.0], bandwidth=1.0), "importance must be > 0"),
        (dict(importance=[1.0, 1.0], change_rate=[1.0, 0.0], bandwidth=1.0), "change_rate must be > 0"),
        (dict(importance=[1.0, np.nan], change_rate=[1.0, 1.0], bandwidth=1.0), "importance must be finite"),
        (dict(importance=[1.0, 1.0], change_rate=[np.inf, 1.0], bandwidth=1.0), "change_rate must be finite"),
        (dict(importance=[1.0, 1.0], change_rate=[1.0, 1.0, 1.0], bandwidth=1.0), "same shape"),
        (dict(importance=[1.0, 1.0], change_rate=[1.0, 1.0], bandwidth=0.0), "bandwidth must be finite and > 0"),
        (dict(importance=[1.0, 1.0], change_rate=[1.0, 1.0], bandwidth=-2.0), "bandwidth must be finite and > 0"),
        (dict(importance=[1.0, 1.0], change_rate=[1.0, 1.0], bandwidth=np.nan), "bandwidth must be finite and > 0"),
        (dict(importance=[1.0, 1.0], change_rate=[1.0, 1.0], bandwidth=1.0, complete=[True]), "complete must have"),
        (dict(importance=[1.0, 1.0], change_rate=[1.0, 1.0], bandwidth=1.0, complete=[2, 0]), "boolean"),
        (dict(importance=[1.0, 1.0], change_rate=[1.0, 1.0], bandwidth=2.0, complete=[True, True]),
         "bandwidth exceeds what the problem can use"),
        (dict(importance=[], change_rate=[], bandwidth=1.0), "empty"),
        (dict(importance=[[1.0, 1.0]], change_rate=[[1.0, 1.0]], bandwidth=[1.0, 2.0]), "bandwidth"),
    ],
)
def test_bad_input_is_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        CrawlProblem(**kwargs)


def test_all_complete_below_total_change_rate_is_fine():
    p = CrawlProblem([1.0, 1.0], [1.0, 1.0], 1.999, complete=[True, True])
    pol = jaxcrawl.lambda_crawl(p)
    assert np.all(np.asarray(pol.prob) <= 1.0 + 1e-12)


def test_string_dtype_rejected():
    with pytest.raises(TypeError, match="importance"):
        CrawlProblem(np.array(["a", "b"]), [1.0, 1.0], 1.0)


def test_pytree_roundtrip_under_jit_and_vmap():
    p = CrawlProblem(np.ones((3, 4)), np.full((3, 4), 0.5), np.array([1.0, 2.0, 3.0]))
    leaves, tree = jax.tree_util.tree_flatten(p)
    q = jax.tree_util.tree_unflatten(tree, leaves)
    assert isinstance(q, CrawlProblem)
    out = jax.vmap(lambda pr: jnp.sum(pr.importance) * pr.bandwidth)(p)
    np.testing.assert_allclose(out, [4.0, 8.0, 12.0])
    out = jax.jit(lambda pr: pr.replace(bandwidth=pr.bandwidth * 2).bandwidth)(p)
    np.testing.assert_allclose(out, [2.0, 4.0, 6.0])


def test_replace_revalidates():
    p = CrawlProblem([1.0], [1.0], 1.0)
    with pytest.raises(ValueError, match="bandwidth"):
        p.replace(bandwidth=-1.0)


@pytest.mark.parametrize("field,value,becomes", [("importance", 1e-300, "0"), ("change_rate", 1e39, "inf"),
                                                  ("bandwidth", 1e-45, "0")])
def test_host_values_are_validated_in_the_working_dtype(field, value, becomes):
    """A float64 value valid in itself but outside the working dtype's normal range (float32
    by default) is an error naming the argument, the value, the index and the dtype --
    not "found 0.0" after the cast; in the x64 lane the same values are valid."""
    imp, lam, bw = np.array([1.0, 2.0]), np.array([0.5, 3.0]), 1.0
    if field == "bandwidth":
        bw = value
    else:
        (imp if field == "importance" else lam)[1 if field == "change_rate" else 0] = value
    dt = jnp.result_type(float)
    if dt == jnp.float64:
        p = CrawlProblem(imp, lam, bw)
        assert float(np.asarray(getattr(p, field)).ravel()[-1 if field == "change_rate" else 0]) == value
        return
    with pytest.raises(ValueError, match=rf"{field} .* outside float32's normal range .* would become {becomes}"):
        CrawlProblem(imp, lam, bw)
