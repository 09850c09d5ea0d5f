"""The allocation primitive: closed forms, references, derivatives, batching."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxcrawl import allocate


def inv_rate(nu, a):  # u(x) = a log x  ->  x = a / nu
    return a / nu


def inv_marginal(x, a):
    return a / x


def proj_rate(nu, y):  # u(x) = -(x - y)^2 / 2  ->  x = y - nu (dual may be negative)
    return y - nu


def proj_marginal(x, y):
    return y - x


def simplex_box_projection_ref(y, budget, lo, hi):
    """Euclidean projection onto {lo <= x <= hi, sum x = budget} by plain bisection on the shift."""
    a, b = np.min(y - hi) - 1.0, np.max(y - lo) + 1.0
    for _ in range(200):
        m = (a + b) / 2
        if np.clip(y - m, lo, hi).sum() > budget:
            a = m
        else:
            b = m
    return np.clip(y - (a + b) / 2, lo, hi)


@pytest.mark.x64
def test_closed_form_proportional():
    a = jnp.array([1.0, 2.0, 3.0, 4.0])
    sol = allocate(inv_rate, a, 5.0, marginal_fn=inv_marginal)
    np.testing.assert_allclose(sol.dual, 10.0 / 5.0, rtol=1e-12)
    np.testing.assert_allclose(sol.x, a * 0.5, rtol=1e-12)
    assert abs(float(sol.residual)) <= 1e-12 * 5


@pytest.mark.x64
@pytest.mark.parametrize("seed", range(5))
def test_projection_negative_duals_matches_reference(seed):
    rng = np.random.default_rng(seed)
    n = 50
    y = rng.normal(size=n) * 3
    lo = rng.uniform(-1, 0, n)
    hi = lo + rng.uniform(0.1, 2, n)
    budget = float(lo.sum() + 0.37 * (hi - lo).sum())
    sol = allocate(proj_rate, jnp.asarray(y), budget, lo, hi, marginal_fn=proj_marginal)
    ref = simplex_box_projection_ref(y, budget, lo, hi)
    np.testing.assert_allclose(sol.x, ref, atol=1e-10)
    assert abs(float(jnp.sum(sol.x)) - budget) <= 1e-9 * abs(budget) + 1e-12
    assert np.all(np.asarray(sol.x) >= lo - 1e-15) and np.all(np.asarray(sol.x) <= hi + 1e-15)


@pytest.mark.x64
def test_explicit_bracket_is_widened():
    a = jnp.array([1.0, 2.0, 3.0])
    sol = allocate(inv_rate, a, 6.0, bracket=(50.0, 60.0))  # true dual is 1
    np.testing.assert_allclose(sol.dual, 1.0, rtol=1e-12)


def test_infeasible_budget_raises():
    with pytest.raises(ValueError, match="infeasible"):
        allocate(proj_rate, jnp.zeros(3), 10.0, 0.0, 1.0, marginal_fn=proj_marginal)
    with pytest.raises(ValueError, match="infeasible"):
        allocate(proj_rate, jnp.zeros(3), 1.0, 0.5, 1.0, marginal_fn=proj_marginal)
    with pytest.raises(ValueError, match="marginal_fn"):
        allocate(proj_rate, jnp.zeros(3), 1.0)
    with pytest.raises(ValueError, match="scalar"):
        allocate(proj_rate, jnp.zeros(3), jnp.ones(2), marginal_fn=proj_marginal)


@pytest.mark.x64
def test_vmap_equals_python_loop():
    rng = np.random.default_rng(3)
    A = jnp.asarray(rng.lognormal(size=(7, 20)))
    B = jnp.asarray(rng.uniform(1, 5, 7))
    lo = 0.01
    batched = jax.vmap(lambda a, b: allocate(inv_rate, a, b, lo, 2.0, marginal_fn=inv_marginal))(A, B)
    for i in range(7):
        single = allocate(inv_rate, A[i], B[i], lo, 2.0, marginal_fn=inv_marginal)
        np.testing.assert_allclose(batched.x[i], single.x, rtol=1e-12)
        np.testing.assert_allclose(batched.dual[i], single.dual, rtol=1e-12)


def _fd_check(f, args, argnum, h=1e-6, rtol=1e-6, atol=1e-9):
    g = jax.jacrev(f, argnums=argnum)(*args)
    jf = jax.jacfwd(f, argnums=argnum)(*args)
    np.testing.assert_allclose(g, jf, rtol=1e-9, atol=1e-12)
    x = np.asarray(args[argnum], dtype=float)
    flat = x.reshape(-1)
    for i in range(flat.size):
        e = np.zeros_like(flat)
        e[i] = h
        up = list(args)
        up[argnum] = jnp.asarray((flat + e).reshape(x.shape))
        dn = list(args)
        dn[argnum] = jnp.asarray((flat - e).reshape(x.shape))
        fd = (np.asarray(f(*up)) - np.asarray(f(*dn))) / (2 * h)
        np.testing.assert_allclose(np.asarray(g)[..., i] if x.ndim else g, fd, rtol=rtol, atol=atol)


@pytest.mark.long
@pytest.mark.x64
def test_derivatives_with_active_bounds_match_finite_differences():
    rng = np.random.default_rng(4)
    n = 8
    a = jnp.asarray(rng.lognormal(size=n))
    lo = jnp.asarray(np.full(n, 0.05))
    hi = jnp.asarray(rng.uniform(0.3, 1.0, n))
    budget = jnp.asarray(2.5)

    @jax.jit
    def f(a, budget, lo, hi):
        sol = allocate(inv_rate, a, budget, lo, hi, marginal_fn=inv_marginal)
        return jnp.concatenate([sol.x, sol.dual[None]])

    x = f(a, budget, lo, hi)[:-1]
    assert np.any(np.isclose(x, hi)) and np.any(~np.isclose(x, hi) & ~np.isclose(x, lo))
    for argnum in range(4):
        _fd_check(f, (a, budget, lo, hi), argnum)


@pytest.mark.x64
def test_clipped_page_derivative_is_zero_and_dual_uses_free_pages():
    a = jnp.array([10.0, 1.0, 1.0])
    hi = jnp.array([0.5, 10.0, 10.0])
    f = lambda a: allocate(inv_rate, a, 2.5, 0.0, hi, marginal_fn=inv_marginal).x
    J = jax.jacobian(f)(a)
    np.testing.assert_allclose(J[0], 0.0, atol=1e-14)  # page 0 sits at its upper bound
    # free pages share the remaining budget 2.0 in proportion to a: x_i = 2 a_i / (a_1 + a_2)
    np.testing.assert_allclose(J[1, 1:], [2 * 1.0 / 4.0, -2 * 1.0 / 4.0], rtol=1e-10)


def test_float32_budget_at_a_million_pages():
    rng = np.random.default_rng(5)
    a = jnp.asarray(rng.lognormal(0, 2, 1_000_000), jnp.float32)
    budget = jnp.float32(2e5)
    sol = jax.jit(lambda a: allocate(inv_rate, a, budget, 0.0, 1.0, marginal_fn=inv_marginal))(a)
    assert sol.x.dtype == jnp.float32
    total = float(np.sum(np.asarray(sol.x, dtype=np.float64)))
    assert abs(total - 2e5) <= 1e-5 * 2e5


def test_no_recompilation_on_second_call():
    f = jax.jit(lambda a, b: allocate(inv_rate, a, b, marginal_fn=inv_marginal).x)
    a = jnp.ones(10)
    f(a, 1.0)
    n0 = f._cache_size()
    f(a * 2, 3.0)
    assert f._cache_size() == n0


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    n=st.sampled_from([1, 2, 17, 40]),
    frac=st.floats(0.01, 0.99),
    dtype=st.sampled_from([jnp.float32, jnp.float64]),
)
@pytest.mark.x64
def test_property_budget_bounds_and_monotone_kkt(seed, n, frac, dtype):
    rng = np.random.default_rng(seed)
    y = rng.normal(size=n) * 10 ** rng.uniform(-3, 3)
    lo = np.zeros(n)
    hi = rng.uniform(0.1, 3.0, n)
    budget = frac * hi.sum()
    sol = allocate(proj_rate, jnp.asarray(y, dtype), jnp.asarray(budget, dtype), jnp.asarray(lo, dtype),
                   jnp.asarray(hi, dtype), marginal_fn=proj_marginal)
    x = np.asarray(sol.x, np.float64)
    tol = 1e-5 if dtype == jnp.float32 else 1e-9
    assert np.all(np.isfinite(x))
    assert abs(x.sum() - budget) <= tol * max(budget, 1e-3) + 10 * np.finfo(dtype).eps * hi.sum()
    assert np.all(x >= -1e-6) and np.all(x <= hi * (1 + 1e-6))
    # KKT: free pages have marginal y - x equal to the dual; pages at the bounds are on the right side.
    nu = float(sol.dual)
    m = y - x
    free = (x > 1e-5 * hi) & (x < hi * (1 - 1e-5))
    scale = np.abs(y).max() + 1
    assert np.all(np.abs(m[free] - nu) <= (1e-3 if dtype == jnp.float32 else 1e-7) * scale)
