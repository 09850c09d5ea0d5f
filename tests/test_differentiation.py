"""Exact derivatives through every solver (implicit function theorem on the dual)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxcrawl
from jaxcrawl import CrawlProblem

SOLVERS = {
    "lambda_crawl": jaxcrawl.lambda_crawl,
    "lambda_crawl_approx": jaxcrawl.lambda_crawl_approx,
    "binary_lambda_crawl": lambda p: jaxcrawl.binary_lambda_crawl(p, 0.0),
    "binary_lambda_crawl_eps": lambda p: jaxcrawl.binary_lambda_crawl(p, 0.4),
    "uniform_crawl": jaxcrawl.uniform_crawl,
    "change_rate_crawl": jaxcrawl.change_rate_crawl,
    "accumulated_delay_crawl": jaxcrawl.accumulated_delay_crawl,
    "uniform_interval_crawl": jaxcrawl.uniform_interval_crawl,
}


def make(seed, n=12, complete_fraction=0.3, bw=0.3):
    rng = np.random.default_rng(seed)
    mu = rng.lognormal(0, 1.5, n)
    lam = rng.lognormal(0, 1.0, n)
    comp = rng.random(n) < complete_fraction
    comp[0], comp[1] = True, False
    return mu, lam, bw * n, comp


def active_bounds(name, pol, p):
    rate = np.asarray(pol.rate)
    if name == "lambda_crawl":
        return np.any((np.asarray(p.complete) != 0) & np.isclose(rate, np.asarray(p.change_rate), rtol=1e-12))
    if name in ("binary_lambda_crawl", "uniform_interval_crawl"):
        return np.any(rate == 0)
    if name == "binary_lambda_crawl_eps":
        return np.any(np.isclose(rate, 0.4 * float(p.bandwidth) / p.num_pages, rtol=1e-12))
    return None


@pytest.mark.x64
# these solvers' derivative programs take 5-20 s to compile: the long step
@pytest.mark.parametrize("name", [pytest.param(s, marks=pytest.mark.long) if s in ("uniform_interval_crawl", "binary_lambda_crawl_eps", "binary_lambda_crawl", "lambda_crawl_approx") else s
                                  for s in SOLVERS])
@pytest.mark.parametrize("seed,bw", [(0, 0.3), pytest.param(1, 0.05, marks=pytest.mark.long),
                                     pytest.param(2, 2.0, marks=pytest.mark.long)])
def test_gradients_and_jvps_match_finite_differences(name, seed, bw):
    solver = SOLVERS[name]
    mu, lam, R, comp = make(seed, bw=bw)
    n = len(mu)
    weights = jnp.asarray(np.random.default_rng(100 + seed).normal(size=n))

    def f(theta):  # theta = (importance, change_rate, bandwidth) flattened
        pol = solver(CrawlProblem(theta[:n], theta[n:2 * n], theta[2 * n], comp))
        return jnp.concatenate([pol.rate, pol.dual[None]])

    theta = jnp.concatenate([jnp.asarray(mu), jnp.asarray(lam), jnp.asarray([R])])
    m = theta.shape[0]
    def scalar(th):
        out = f(th)  # one solve in the traced program (two would compile it twice)
        return jnp.dot(out[:-1], weights) + 0.1 * out[-1]

    grad = jax.jit(jax.grad(scalar))(theta)
    J = jax.jit(jax.jacfwd(f))(theta)  # forward mode
    # central differences for every coordinate and one random direction, in one vmapped call
    h = 1e-6 * jnp.maximum(1.0, jnp.abs(theta))
    t = jnp.asarray(np.random.default_rng(7).normal(size=m)) * jnp.maximum(1.0, jnp.abs(theta))
    eps = 1e-7
    pts = jnp.concatenate([theta + jnp.diag(h), theta - jnp.diag(h), (theta + eps * t)[None], (theta - eps * t)[None]])
    # eager solves, one per point: cheaper here than compiling the vmapped program
    vals = jnp.stack([f(pt) for pt in pts])
    scale = max(1.0, float(jnp.max(jnp.abs(vals))))
    fd = (vals[:m] - vals[m:2 * m]) / (2 * h[:, None])  # (coordinate, output)
    fd_scalar = fd[:, :-1] @ weights + 0.1 * fd[:, -1]
    np.testing.assert_allclose(grad, fd_scalar, rtol=1e-6, atol=1e-8 * scale, err_msg=f"{name}: reverse mode")
    fd_dir = (vals[-2] - vals[-1]) / (2 * eps)
    np.testing.assert_allclose(J @ t, fd_dir, rtol=1e-6, atol=1e-8 * scale, err_msg=f"{name}: forward mode")
    np.testing.assert_allclose(J, fd.T, rtol=1e-5, atol=1e-7 * scale, err_msg=f"{name}: Jacobian")


@pytest.mark.long
@pytest.mark.x64
@pytest.mark.parametrize("name", ["lambda_crawl", "binary_lambda_crawl", "binary_lambda_crawl_eps"])
def test_active_bounds_present_and_clipped_pages_have_zero_derivative(name):
    mu, lam, R, comp = make(3, n=40, complete_fraction=0.5, bw=0.4)
    if name == "lambda_crawl":
        lam = lam.copy()
        lam[comp] *= 0.05  # make complete pages hit their cap p = 1
    p = CrawlProblem(mu, lam, R, comp)
    pol = SOLVERS[name](p)
    assert active_bounds(name, pol, p)
    J = jax.jacfwd(lambda m: SOLVERS[name](p.replace(importance=m)).rate)(jnp.asarray(mu))
    Jr = jax.jacrev(lambda m: SOLVERS[name](p.replace(importance=m)).rate)(jnp.asarray(mu))
    np.testing.assert_allclose(J, Jr, rtol=1e-10, atol=1e-14)
    rate = np.asarray(pol.rate)
    if name == "lambda_crawl":
        clipped = np.asarray(comp) & np.isclose(rate, lam, rtol=1e-12)
    elif name == "binary_lambda_crawl":
        clipped = rate == 0
    else:
        clipped = np.isclose(rate, 0.4 * R / len(mu), rtol=1e-12)
    np.testing.assert_allclose(J[clipped], 0.0, atol=1e-14)
    # the budget is constant, so the columns of the Jacobian sum to zero
    np.testing.assert_allclose(J.sum(axis=0), 0.0, atol=1e-10 * np.abs(J).max())


@pytest.mark.long
@pytest.mark.x64
def test_vmap_of_grad_equals_loop():
    mus, lams = np.random.default_rng(0).lognormal(size=(2, 5, 20))
    p = lambda m, l: CrawlProblem(m, l, 4.0)
    g = lambda m, l: jax.grad(lambda l: jaxcrawl.harmonic_cost(p(m, l), jaxcrawl.lambda_crawl(p(m, l))))(l)
    batched = jax.jit(jax.vmap(g))(mus, lams)
    for i in range(5):
        np.testing.assert_allclose(batched[i], g(mus[i], lams[i]), rtol=1e-10)


@pytest.mark.long
@pytest.mark.x64
def test_hessian_vector_products_are_finite():
    mu, lam, R, comp = make(5, n=10)
    f = lambda l: jaxcrawl.harmonic_cost(CrawlProblem(mu, l, R, comp), jaxcrawl.lambda_crawl(CrawlProblem(mu, l, R, comp)))
    H = jax.jacfwd(jax.grad(f))(jnp.asarray(lam))
    assert np.all(np.isfinite(np.asarray(H)))
    np.testing.assert_allclose(H, H.T, rtol=1e-6, atol=1e-9 * np.abs(H).max())


def _temp_bytes(adjoint, max_steps, n):
    p = jaxcrawl.synthetic(jax.random.key(0), n, dtype=jnp.float32)

    def loss(lam):
        q = p.replace(change_rate=lam)
        return jaxcrawl.harmonic_cost(q, jaxcrawl.lambda_crawl(q, adjoint=adjoint, max_steps=max_steps))

    compiled = jax.jit(jax.grad(loss)).lower(p.change_rate).compile()
    return compiled.memory_analysis().temp_size_in_bytes


@pytest.mark.long
def test_reverse_mode_memory_does_not_grow_with_iterations():
    n = 20_000
    implicit = [_temp_bytes("implicit", s, n) for s in (10, 40)]
    unrolled = [_temp_bytes("unrolled", s, n) for s in (10, 40)]
    page_bytes = 4 * n
    # implicit rule: a handful of page-sized buffers, independent of the iteration cap
    assert implicit[0] == implicit[1]
    assert implicit[1] <= 64 * page_bytes
    # differentiating through the loop stores residuals for every iteration
    assert unrolled[1] > 3 * unrolled[0] and unrolled[1] > 20 * implicit[1]
