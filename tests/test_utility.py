"""An Objective defined here, not in the package, gets every capability of the built-ins.

The test utility is "water-filling" log utility  u_i(x) = ζ_i log(1 + x/ξ_i):
u_i'(x) = ζ_i/(ξ_i + x), so x_i(ν) = max(0, ζ_i/ν − ξ_i).  Every result is compared with a
plain NumPy reference written here (bisection), and gradients with finite differences.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jaxcrawl
from jaxcrawl._src.special import incomplete_harmonic_rate
from jaxcrawl.io import write_page_table
from jaxcrawl.parallel import StreamedTable

from helpers import host_capped
from reference import bisect_dual


def _fill_rate(nu, params):
    zeta, xi = params
    return zeta / nu - xi


def _fill_marginal(x, params):
    zeta, xi = params
    return zeta / (xi + x)


def _fill_value(x, params):
    zeta, xi = params
    return zeta * jnp.log1p(x / xi)


FILL = jaxcrawl.Objective(name="test-water-filling", rate=_fill_rate, marginal=_fill_marginal,
                          value=_fill_value)


# ----------------------------------------------------------------- NumPy references
def fill_ref(zeta, xi, budget):
    x_of = lambda nu: np.maximum(zeta / nu - xi, 0.0)  # noqa: E731
    nu = bisect_dual(x_of, budget)
    return x_of(nu), nu


def fill_capped_ref(zeta, xi, budget, host, cap):
    """Nested reference: for each nu, a host over its cap gets exactly its cap (its own
    multiplier mu_h >= nu by bisection); outer bisection on the global budget."""
    x_of = lambda d: np.maximum(zeta / d - xi, 0.0)  # noqa: E731
    H = len(cap)

    def allocation(nu):
        d = np.full(zeta.shape, nu)
        for h in range(H):
            on = host == h
            if x_of(nu)[on].sum() > cap[h]:
                mu = bisect_dual(lambda v: x_of(v)[on], cap[h], lo=nu)
                d[on] = mu
        return x_of(d)

    nu = bisect_dual(allocation, budget)
    return allocation(nu), nu


def _problem(n=400, seed=0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    zeta = np.exp(rng.normal(0.0, 1.5, n)).astype(dtype)
    xi = np.exp(rng.normal(-1.0, 1.0, n)).astype(dtype)
    return zeta, xi, dtype(0.3 * n)


# --------------------------------------------------------------------------- solve
@pytest.mark.x64
def test_user_utility_solves_to_the_numpy_reference():
    zeta, xi, R = _problem()
    policy = jaxcrawl.solve(jaxcrawl.CrawlProblem(zeta, xi, R), FILL)
    x_ref, nu_ref = fill_ref(zeta, xi, R)
    assert bool(policy.converged)
    np.testing.assert_allclose(policy.rate, x_ref, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(float(policy.dual), nu_ref, rtol=1e-9)
    np.testing.assert_allclose(float(jnp.sum(policy.rate)), R, rtol=1e-12)
    assert not bool(jnp.any(policy.on_signal))
    # KKT: u'(x) = nu on crawled pages, u'(0) <= nu on starved ones
    m = np.asarray(_fill_marginal(policy.rate, (zeta, xi)))
    free = np.asarray(policy.rate) > 0
    np.testing.assert_allclose(m[free], float(policy.dual), rtol=1e-8)
    assert np.all(m[~free] <= float(policy.dual) * (1 + 1e-9))
    assert (~free).any() and free.any()


def test_user_utility_float32_meets_budget_and_kkt():
    zeta, xi, R = _problem(dtype=np.float32)
    policy = jaxcrawl.solve(jaxcrawl.CrawlProblem(zeta, xi, R), FILL)
    assert policy.rate.dtype == jnp.float32 and bool(policy.converged)
    x_ref, nu_ref = fill_ref(zeta.astype(np.float64), xi.astype(np.float64), float(R))
    np.testing.assert_allclose(float(policy.dual), nu_ref, rtol=1e-4)
    np.testing.assert_allclose(policy.rate, x_ref, rtol=1e-3, atol=1e-3 * float(R) / len(zeta))
    np.testing.assert_allclose(float(jnp.sum(policy.rate)), float(R), rtol=1e-5)


def test_registered_user_utility_is_solved_by_name():
    jaxcrawl.register_objective(FILL, overwrite=True)
    assert FILL.name in jaxcrawl.objective_names()
    zeta, xi, R = _problem(n=50, dtype=np.float32)
    p = jaxcrawl.CrawlProblem(zeta, xi, R)
    np.testing.assert_array_equal(jaxcrawl.solve(p, FILL.name).rate, jaxcrawl.solve(p, FILL).rate)
    with pytest.raises(ValueError, match="already registered"):
        jaxcrawl.register_objective(FILL._replace(rate=_fill_marginal))
    with pytest.raises(ValueError, match="unknown objective 'no-such'"):
        jaxcrawl.solve(p, "no-such")


def test_batched_and_jitted_user_utility_equals_a_loop():
    zs, xs = zip(*[_problem(n=60, seed=s, dtype=np.float32)[:2] for s in range(3)])
    zeta, xi = np.stack(zs), np.stack(xs)
    R = np.array([10.0, 18.0, 25.0], np.float32)
    batched = jax.jit(lambda p: jaxcrawl.solve(p, FILL))(jaxcrawl.CrawlProblem(zeta, xi, R))
    for i in range(3):
        one = jaxcrawl.solve(jaxcrawl.CrawlProblem(zeta[i], xi[i], R[i]), FILL)
        np.testing.assert_allclose(batched.rate[i], one.rate, rtol=2e-6, atol=1e-6)
        assert bool(batched.converged[i])


# --------------------------------------------------------------------- gradients
@pytest.mark.x64
def test_user_utility_gradient_matches_finite_differences():
    zeta, xi, R = _problem(n=120, seed=3)
    w = np.random.default_rng(9).uniform(0.5, 2.0, zeta.shape)

    def f(zeta_, xi_, R_):
        x = jaxcrawl.solve(jaxcrawl.CrawlProblem(zeta_, xi_, R_), FILL).rate
        return jnp.sum(w * x * x)

    g = jax.grad(f, argnums=(0, 1, 2))(zeta, xi, R)
    for arg, grad in zip(range(3), g):
        base = [zeta, xi, R]
        direction = np.random.default_rng(arg).normal(size=np.shape(base[arg]))
        h = 1e-6 * (np.max(np.abs(base[arg])) if np.ndim(base[arg]) else R)
        plus, minus = list(base), list(base)
        plus[arg] = base[arg] + h * direction
        minus[arg] = base[arg] - h * direction
        fd = (float(f(*plus)) - float(f(*minus))) / (2 * h)
        np.testing.assert_allclose(float(np.sum(np.asarray(grad) * direction)), fd, rtol=1e-6)


# --------------------------------------------------------------------- host caps
def _hosts(n, num_hosts, seed=1):
    rng = np.random.default_rng(seed)
    host = rng.integers(-1, num_hosts, n)  # -1: no host constraint
    return host.astype(np.int32)


@pytest.mark.long
@pytest.mark.x64
def test_user_utility_respects_host_caps_like_the_nested_reference():
    zeta, xi, R = _problem(n=300, seed=4)
    host = _hosts(300, 6)
    x_free, _ = fill_ref(zeta, xi, R)
    load = np.array([x_free[host == h].sum() for h in range(6)])
    cap = np.where(np.arange(6) % 2 == 0, 0.5 * load, np.inf)  # half the hosts bind
    sol = host_capped(jaxcrawl.CrawlProblem(zeta, xi, R), host, cap, FILL)
    x_ref, nu_ref = fill_capped_ref(zeta, xi, R, host, cap)
    assert bool(sol.policy.converged)
    np.testing.assert_allclose(sol.policy.rate, x_ref, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(float(sol.policy.dual), nu_ref, rtol=1e-8)
    rate_h = np.array([np.asarray(sol.policy.rate)[host == h].sum() for h in range(6)])
    assert np.all(rate_h <= cap * (1 + 1e-12))
    np.testing.assert_array_equal(np.asarray(sol.binding), np.arange(6) % 2 == 0)
    np.testing.assert_allclose(float(jnp.sum(sol.policy.rate)), R, rtol=1e-12)

    # exact derivative of the capped optimum w.r.t. a binding cap and the importance
    def f(cap_, zeta_):
        s = host_capped(jaxcrawl.CrawlProblem(zeta_, xi, R), host, cap_, FILL)
        return jnp.sum(jnp.sqrt(s.policy.rate + 1.0))

    g_cap, g_zeta = jax.grad(f, argnums=(0, 1))(jnp.asarray(np.where(np.isinf(cap), 1e300, cap)), zeta)
    capf = np.where(np.isinf(cap), 1e300, cap)
    h = 1e-6 * capf[0]
    e0 = np.zeros(6)
    e0[0] = h
    fd = (float(f(capf + e0, zeta)) - float(f(capf - e0, zeta))) / (2 * h)
    np.testing.assert_allclose(float(g_cap[0]), fd, rtol=1e-6)
    d = np.random.default_rng(5).normal(size=zeta.shape)
    hz = 1e-6
    fdz = (float(f(capf, zeta + hz * d)) - float(f(capf, zeta - hz * d))) / (2 * hz)
    np.testing.assert_allclose(float(np.sum(np.asarray(g_zeta) * d)), fdz, rtol=1e-6)


# --------------------------------------------------------------------- streaming
@pytest.mark.x64
def test_user_utility_streams_from_disk_to_the_in_memory_optimum(tmp_path):
    zeta, xi, R = _problem(n=1000, seed=6)
    table = write_page_table(str(tmp_path / "pages"), zeta, xi)
    res = jaxcrawl.solve(StreamedTable(table, float(R), chunk_size=128, dtype=jnp.float64,
                                       out=str(tmp_path / "plan.npy"), progress=False), FILL)
    x_ref, nu_ref = fill_ref(zeta, xi, R)
    assert res.converged
    np.testing.assert_allclose(np.asarray(res.rate), x_ref, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(res.dual, nu_ref, rtol=1e-9)
    assert abs(res.residual) <= 4 * np.finfo(np.float64).eps ** 0.75 * R
    in_memory = jaxcrawl.solve(jaxcrawl.CrawlProblem(zeta, xi, R), FILL)
    np.testing.assert_allclose(np.load(tmp_path / "plan.npy"), in_memory.rate, rtol=1e-10, atol=1e-13)


def test_non_separable_utility_is_refused_by_host_caps_and_streaming(tmp_path):
    zeta, xi, R = _problem(n=20, dtype=np.float32)
    p = jaxcrawl.CrawlProblem(zeta, xi, R)
    with pytest.raises(ValueError, match="separable"):
        jaxcrawl.solve(p, "harmonic-approx", caps=jaxcrawl.HostCaps(np.zeros(20, np.int32), np.array([5.0])))
    table = write_page_table(str(tmp_path / "t"), zeta, xi)
    with pytest.raises(ValueError, match="separable"):
        jaxcrawl.solve(StreamedTable(table, float(R), progress=False), "harmonic-approx")


# ----------------------------------------------------------- honest convergence
@pytest.fixture(scope="module")
def big_problem():
    return jaxcrawl.synthetic(jax.random.key(0), 10_000)


def test_max_steps_one_reports_not_converged(big_problem, tmp_path):
    good = jaxcrawl.lambda_crawl(big_problem)
    bad = jaxcrawl.lambda_crawl(big_problem, max_steps=1)
    assert bool(good.converged) and not bool(bad.converged)
    # the residual is measured before the closing correction: it shows the early stop
    R = float(big_problem.bandwidth)
    assert abs(float(good.residual)) <= 4 * np.finfo(np.float32).eps ** 0.75 * R
    assert abs(float(bad.residual)) > 0.01 * R


@pytest.mark.long
def test_max_steps_one_reports_not_converged_everywhere(big_problem, tmp_path):
    """Every registered objective, host caps and streaming report an early stop."""
    R = float(big_problem.bandwidth)
    for name in jaxcrawl.objective_names():
        if name == FILL.name:
            continue
        assert bool(jaxcrawl.solve(big_problem, name).converged), name
        assert not bool(jaxcrawl.solve(big_problem, name, max_steps=1).converged), name
    host = np.arange(10_000, dtype=np.int32) % 7
    caps = np.where(np.arange(7) < 3, 0.05 * R, np.inf)  # three hosts bind
    hc = jaxcrawl.HostCaps(host, caps)
    assert bool(jaxcrawl.solve(big_problem, caps=hc).converged)
    assert not bool(jaxcrawl.solve(big_problem, caps=hc, max_steps=1).converged)
    table = write_page_table(str(tmp_path / "t"), big_problem.importance, big_problem.change_rate,
                             big_problem.complete)
    src = StreamedTable(table, R, chunk_size=4096, progress=False)
    assert jaxcrawl.solve(src).converged
    assert not jaxcrawl.solve(src, max_steps=1).converged


def test_throw_raises_inside_jit(big_problem):
    with pytest.raises(Exception, match="did not converge"):
        jax.block_until_ready(jax.jit(lambda p: jaxcrawl.lambda_crawl(p, max_steps=1, throw=True))(big_problem))
    jax.block_until_ready(jax.jit(lambda p: jaxcrawl.lambda_crawl(p, throw=True))(big_problem))


_mag = st.floats(-6.0, 6.0)


@pytest.mark.long
@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**31 - 1), _mag, _mag, st.floats(-3.0, 3.0), st.sampled_from(["harmonic", "binary", "uniform", "delay", "test-water-filling"]))
def test_default_converges_over_twelve_orders_of_magnitude_float32(seed, log_imp, log_lam, log_frac, name):
    jaxcrawl.register_objective(FILL, overwrite=True)
    rng = np.random.default_rng(seed)
    n = 64
    imp = (10.0 ** (log_imp + rng.uniform(-3, 3, n))).astype(np.float32)
    lam = (10.0 ** (log_lam + rng.uniform(-3, 3, n))).astype(np.float32)
    R = float(np.float32(10.0 ** log_frac * np.sum(lam)))
    p = jaxcrawl.CrawlProblem(imp, lam, R)
    pol = jaxcrawl.solve(p, name)
    assert bool(pol.converged)
    assert np.all(np.isfinite(np.asarray(pol.rate))) and np.all(np.asarray(pol.rate) >= 0)
    np.testing.assert_allclose(float(jnp.sum(pol.rate)), R, rtol=2e-5)


@pytest.mark.long
@pytest.mark.x64
@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**31 - 1), _mag, _mag, st.floats(-3.0, 3.0), st.sampled_from(["harmonic", "binary", "uniform", "delay"]))
def test_default_converges_over_twelve_orders_of_magnitude_float64(seed, log_imp, log_lam, log_frac, name):
    rng = np.random.default_rng(seed)
    n = 64
    imp = 10.0 ** (log_imp + rng.uniform(-3, 3, n))
    lam = 10.0 ** (log_lam + rng.uniform(-3, 3, n))
    R = 10.0 ** log_frac * np.sum(lam)
    pol = jaxcrawl.solve(jaxcrawl.CrawlProblem(imp, lam, R), name)
    assert bool(pol.converged)
    assert pol.rate.dtype == jnp.float64
    np.testing.assert_allclose(float(jnp.sum(pol.rate)), R, rtol=1e-11)


@pytest.mark.long
@pytest.mark.parametrize("name", ["harmonic", "harmonic-approx", "binary", "binary-epsilon", "delay", "uniform"])
def test_float32_solve_agrees_with_float64(big_problem, name):
    """The users' default dtype: every built-in utility in float32 is within a few float32
    ulps of conditioning of the float64 optimum, meets the budget and reports convergence."""
    arrays = [np.asarray(a) for a in (big_problem.importance, big_problem.change_rate, big_problem.complete)]
    p32 = jaxcrawl.CrawlProblem(arrays[0].astype(np.float32), arrays[1].astype(np.float32),
                                np.float32(big_problem.bandwidth), arrays[2])
    pol32 = jaxcrawl.solve(p32, name)
    with jax.enable_x64(True):
        p64 = jaxcrawl.CrawlProblem(arrays[0].astype(np.float64), arrays[1].astype(np.float64),
                                    float(big_problem.bandwidth), arrays[2])
        pol64 = jaxcrawl.solve(p64, name)
        rate64, dual64 = np.asarray(pol64.rate), float(pol64.dual)
    assert pol32.rate.dtype == jnp.float32 and bool(pol32.converged)
    R = float(big_problem.bandwidth)
    np.testing.assert_allclose(float(jnp.sum(pol32.rate)), R, rtol=1e-5)
    np.testing.assert_allclose(float(pol32.dual), dual64, rtol=1e-4)
    np.testing.assert_allclose(np.asarray(pol32.rate), rate64, rtol=1e-3, atol=1e-5 * R / rate64.size)


# ------------------------------------------------------------- units and dynamic range
HOMOGENEOUS = ["harmonic", "harmonic-approx", "binary", "binary-epsilon", "delay", "uniform"]


@pytest.mark.long  # test_extreme_inputs.py keeps a default-suite check of the same equivariance
@settings(max_examples=30, deadline=None)
@given(st.sampled_from(HOMOGENEOUS), st.floats(-30.0, 30.0), st.floats(-30.0, 30.0))
def test_optimum_is_equivariant_far_outside_unit_scale_float32(name, log_a, log_c):
    """Every built-in objective is homogeneous (Objective.homogeneous): importance × a leaves the
    rates unchanged, change rates and bandwidth × c scale them by c, the dual by a/c.  The
    solve normalises both scales, so a float32 problem at a = 10^±30, c = 10^±30 (sums of
    10^30-sized rates near the top of float32's range) gives the unit-scale optimum,
    converged, budget met, with no inf or NaN."""
    p = data_problem()
    a, c = np.float32(10.0 ** log_a), np.float32(10.0 ** log_c)
    q = jaxcrawl.CrawlProblem(p.importance * a, p.change_rate * c, p.bandwidth * c, p.complete)
    base, pol = jaxcrawl.solve(p, name), jaxcrawl.solve(q, name)
    rate = np.asarray(pol.rate, np.float64)
    assert bool(pol.converged) and np.all(np.isfinite(rate))
    R = float(q.bandwidth)
    assert abs(rate.sum() - R) <= 64 * np.finfo(np.float32).eps * R
    ref = np.asarray(base.rate, np.float64) * float(c)
    np.testing.assert_allclose(rate, ref, rtol=1e-5, atol=1e-6 * R / rate.size)
    dual = float(base.dual) * float(a) / float(c)
    if np.finfo(np.float32).tiny < dual < np.finfo(np.float32).max:  # the dual itself is representable
        np.testing.assert_allclose(float(pol.dual), dual, rtol=1e-5)


def data_problem(n=512):
    return jaxcrawl.synthetic(jax.random.key(11), n)


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.long) if n == "uniform" else n for n in HOMOGENEOUS])
def test_converged_means_budget_met_at_every_bandwidth_float32(name):
    """Honest convergence across 60 decades of bandwidth (float32, natural change rates):
    at every bandwidth the solve either meets the budget to its tolerance with finite rates
    and says converged, or says not converged -- never a missed budget reported as
    converged.  From 1e-3 to 1e30 the budget is met (the normalised solve)."""
    p = data_problem()
    rtol = 4 * np.finfo(np.float32).eps ** 0.75
    solve = jax.jit(lambda R: jaxcrawl.solve(p.replace(bandwidth=R), name))
    for log_r in range(-30, 31, 3):
        R = np.float32(10.0 ** log_r)
        pol = solve(R)
        rate = np.asarray(pol.rate, np.float64)
        met = np.all(np.isfinite(rate)) and abs(rate.sum() - float(R)) <= rtol * float(R)
        if bool(pol.converged):
            assert met, (log_r, rate.sum(), float(R))
        if log_r >= -3:
            assert bool(pol.converged) and met, (log_r, rate.sum(), float(R))


@settings(max_examples=60, deadline=None)
@given(st.floats(-30, 30), st.floats(-30, 30), st.floats(-30, 30))
def test_incomplete_harmonic_rate_has_no_overflow_across_magnitudes(log_mu, log_lam, log_nu):
    """NeurIPS-19 Prop. 2's rate in the lane's dtype over 1e-30..1e30 in each of mu, lambda
    and nu (lambda^2 overflows float32 from 1.8e19): equal to the exact root of
    rho^2 + lambda rho = mu lambda / nu (Python floats, a stable form) to a few ulps
    wherever that root, mu / nu and mu / nu * min(lambda, 1) are normal numbers of the
    dtype."""
    dt = np.dtype(jnp.result_type(float))
    mu, lam, nu = 10.0 ** log_mu, 10.0 ** log_lam, 10.0 ** log_nu
    got = float(incomplete_harmonic_rate(*(jnp.asarray(v, dt) for v in (mu, lam, nu))))
    # the positive root, without cancellation: 2 (mu/nu) / (1 + sqrt(1 + 4 mu / (nu lam)))
    p = mu / nu
    exact = 2 * p / (1 + np.sqrt(1 + 4 * (p / lam)))
    info = np.finfo(dt)
    if all(info.tiny * 1e3 < v < info.max / 1e3 for v in (exact, p, p * min(lam, 1.0))):
        assert abs(got - exact) <= 16 * float(info.eps) * exact, (mu, lam, nu, got, exact)
