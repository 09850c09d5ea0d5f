"""Synchronization bandits (ICML-20): cost processes, J(r), the optimum, Lemma 2, the learners.

Every check is a mathematical truth: closed forms against Monte-Carlo within stated
standard errors, KKT conditions, agreement with slow NumPy references written here,
argmin certificates, and the paper's convergence claims at reduced size.
"""
from typing import NamedTuple

import importlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from jaxcrawl import sync_bandits as sb
# By module path, so a package-level re-export of the `mirror_sync` factory cannot shadow it.
ms = importlib.import_module("jaxcrawl.learners.mirror_sync")

Z = 4.0  # standard errors allowed in Monte-Carlo comparisons


# ----------------------------------------------------------------------------- helpers
def poly_family(k=6, seed=0):
    rng = np.random.RandomState(seed)
    return sb.polynomial_costs(rng.uniform(0.1, 1.0, k), 1 / (1 + np.exp(-5 * rng.uniform(size=k))), 0.1)


def poisson_family(k=6, seed=0):
    rng = np.random.RandomState(seed)
    return sb.binary_poisson_costs(rng.uniform(0.005, 5.0, k), rng.uniform(0.5, 2.0, k))


FAMILIES = {"polynomial": poly_family, "binary_poisson": poisson_family}

# Jitted entry points: compiled once per shape and family, shared by the tests.
OPTIMUM = jax.jit(sb.optimal_policy)
MD_STEP = jax.jit(ms.mirror_descent_step)
PG_STEP = jax.jit(ms.projected_sgd_step)
AMS = ms.async_mirror_sync()  # one learner object: run_sync_learner compiles once per shape


@pytest.fixture(scope="module")
def bandit20():
    return sb.polynomial_bandit(jax.random.key(4), 20, dtype=jnp.float32)


def np_marginal(costs):
    """-J_k'(r) written independently in NumPy (ICML-20 Lemma 1 proof)."""
    if isinstance(costs, sb.PolynomialCosts):
        a, p = np.asarray(costs.scale), np.asarray(costs.exponent)
        return lambda r: a * p * r ** (-p - 1) / (p + 1)
    w, lam = np.asarray(costs.importance), np.asarray(costs.change_rate)

    def m(r):
        x = lam / r
        return w / lam * (-np.expm1(-x) - x * np.exp(-x))

    return m


def np_policy_cost(costs, r):
    """J(r) = mean_k r_k Cbar_k(1/r_k), written independently in NumPy."""
    if isinstance(costs, sb.PolynomialCosts):
        a, p = np.asarray(costs.scale), np.asarray(costs.exponent)
        tau = 1 / r
        return np.mean(r * a * tau ** (p + 1) / (p + 1))
    w, lam = np.asarray(costs.importance), np.asarray(costs.change_rate)
    tau = 1 / r
    return np.mean(r * w * (tau - (1 - np.exp(-lam * tau)) / lam))


def ref_optimum(marginal, k, budget, lo, hi):
    """Slow independent solver for Problem 1: geometric bisection on the marginal value y,
    each arm's rate by bisection on log r (no Newton, no closed forms)."""

    def rates(y):
        a, b = np.full(k, np.log(lo)), np.full(k, np.log(hi))
        for _ in range(90):
            mid = 0.5 * (a + b)
            up = marginal(np.exp(mid)) > y  # marginal too high: the rate must grow
            a, b = np.where(up, mid, a), np.where(up, b, mid)
        r = np.exp(0.5 * (a + b))
        r = np.where(marginal(np.full(k, hi)) >= y, hi, r)
        return np.where(marginal(np.full(k, lo)) <= y, lo, r)

    ylo, yhi = 1e-14, 1e8
    for _ in range(80):
        mid = np.sqrt(ylo * yhi)
        if rates(mid).sum() > budget:
            ylo = mid
        else:
            yhi = mid
    return rates(np.sqrt(ylo * yhi))


# ----------------------------------------------------------------- J(r) vs Monte-Carlo
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_policy_cost_matches_monte_carlo_of_periodic_policy(family):
    """Lemma 1: the time-average cost of the periodic policy equals J(r).

    Each arm is synced every 1/r_k for N intervals; within each interval the cost process
    follows one sampled path, and its time average is estimated with M stratified uniform
    times (unbiased).  Intervals are i.i.d., which gives the standard errors."""
    costs = FAMILIES[family]()
    k = 6
    rate = jnp.array([0.05, 0.2, 0.5, 1.0, 2.0, 4.0])
    n, m = 40000, 8

    @jax.jit
    def simulate(key):
        key_path, key_time = jax.random.split(key)
        paths = jax.vmap(costs.sample_path)(jax.random.split(key_path, n))  # (N, K)
        u = jax.random.uniform(key_time, (m, n, k))
        t = (jnp.arange(m)[:, None, None] + u) / m / rate  # (M, N, K), stratified in [0, 1/r)
        return jnp.mean(costs.cost(paths, t), axis=0)  # (N, K): time average per interval

    per_interval = np.asarray(simulate(jax.random.key(1)))
    mean_k = per_interval.mean(0)
    se_k = per_interval.std(0, ddof=1) / np.sqrt(n)
    exact_k = np.asarray(sb.arm_costs(costs, rate))
    assert np.all(np.abs(mean_k - exact_k) <= Z * se_k + 1e-12), (mean_k, exact_k, se_k)
    j_mc, j_se = mean_k.mean(), np.sqrt(np.sum(se_k**2)) / k
    assert abs(j_mc - float(sb.policy_cost(costs, rate))) <= Z * j_se
    # and the closed form agrees with an independent NumPy formula
    np.testing.assert_allclose(float(sb.policy_cost(costs, rate)), np_policy_cost(costs, np.asarray(rate)),
                               rtol=1e-12)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_marginal_and_mean_costs_are_consistent(family):
    """-J_k' equals jax.grad of J (×K), equals c̄(1/r)/r - C̄(1/r); C̄' = c̄ (ICML-20 eq. 3)."""
    costs = FAMILIES[family](8)
    rate = jnp.linspace(0.03, 5.0, 8)
    grad = jax.grad(sb.policy_cost, argnums=1)(costs, rate)
    np.testing.assert_allclose(-grad * 8, sb.marginal_values(costs, rate), rtol=1e-10)
    tau = 1 / rate
    lemma1 = costs.mean_cost(tau) * tau - costs.mean_cumulative_cost(tau)
    np.testing.assert_allclose(sb.marginal_values(costs, rate), lemma1, rtol=1e-9)
    _, dC = jax.jvp(costs.mean_cumulative_cost, (tau,), (jnp.ones_like(tau),))
    np.testing.assert_allclose(dC, costs.mean_cost(tau), rtol=1e-10)
    np.testing.assert_allclose(sb.marginal_values(costs, rate), np_marginal(costs)(np.asarray(rate)), rtol=1e-9)


def test_binary_poisson_is_accurate_in_float32_for_slowly_changing_arms():
    """Small λ/r is where the naive formulas cancel; float32 must still be accurate."""
    lam = np.array([0.005, 0.01, 0.05, 0.3, 0.9, 1.1, 5.0])
    rate = np.full(7, 6.0)
    c64 = sb.binary_poisson_costs(lam)
    c32 = sb.binary_poisson_costs(lam.astype(np.float32))
    r32 = jnp.asarray(rate, jnp.float32)
    np.testing.assert_allclose(sb.arm_costs(c32, r32), sb.arm_costs(c64, rate), rtol=2e-6)
    np.testing.assert_allclose(sb.marginal_values(c32, r32), sb.marginal_values(c64, rate), rtol=2e-6)


# -------------------------------------------------------------- Lemma 2 (unbiasedness)
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_gradient_estimator_is_unbiased(family):
    costs = FAMILIES[family]()
    rate = jnp.array([0.05, 0.2, 0.5, 1.0, 2.0, 4.0])
    eps = 0.1
    n = 200_000
    g = jax.jit(jax.vmap(lambda k: sb.gradient_estimate(k, costs, rate, eps)))(jax.random.split(jax.random.key(2), n))
    g = np.asarray(g)
    truth = np.asarray(jax.grad(sb.policy_cost, argnums=1)(costs, rate))
    se = g.std(0, ddof=1) / np.sqrt(n)
    assert np.all(np.abs(g.mean(0) - truth) <= Z * se), (g.mean(0), truth, se)
    assert np.mean(g != 0) < 0.12  # nonzero only on probe plays (prob ε)


@pytest.mark.parametrize("family,chunk_size", [("polynomial", None), ("binary_poisson", None),
                                               ("binary_poisson", 7)])
def test_interval_average_estimator_is_unbiased(family, chunk_size):
    """The per-arm average of Lemma 2 samples over n_k intervals estimates J_k'(r_k);
    chunk_size=7 forces many passes of the probe sampler."""
    costs = FAMILIES[family]()
    rate = jnp.array([0.05, 0.2, 0.5, 1.0, 2.0, 4.0])
    counts = jnp.array([0, 1, 3, 17, 60, 250])
    eps, reps = 0.05, 20_000
    f = jax.jit(jax.vmap(lambda k: sb.interval_gradient_estimate(k, costs, rate, counts, eps, chunk_size=chunk_size)))
    out = f(jax.random.split(jax.random.key(3), reps))
    g = np.asarray(out.grad)
    assert np.all(g[:, 0] == 0)
    truth = -np.asarray(sb.marginal_values(costs, rate))
    se = g.std(0, ddof=1) / np.sqrt(reps)
    assert np.all(np.abs(g.mean(0)[1:] - truth[1:]) <= Z * se[1:]), (g.mean(0), truth, se)
    probes = np.asarray(out.num_probes)
    total = int(counts.sum())
    assert probes.max() <= total
    assert abs(probes.mean() - eps * total) <= Z * np.sqrt(total * eps * (1 - eps) / reps)


# -------------------------------------------------------------------------- optimum
def kkt_violation(costs, alloc, lo, hi, k):
    r = np.asarray(alloc.x)
    m = np.asarray(sb.marginal_values(costs, alloc.x)) / k  # -dJ/dr_k
    nu = float(alloc.dual)
    free = (r > lo * (1 + 1e-12)) & (r < hi * (1 - 1e-12))
    scale = max(abs(nu), 1e-300)
    v_free = np.max(np.abs(m[free] - nu) / scale, initial=0.0)
    v_lo = np.max((m[r <= lo * (1 + 1e-12)] - nu) / scale, initial=0.0)  # at r_min: -dJ/dr <= ν
    v_hi = np.max((nu - m[r >= hi * (1 - 1e-12)]) / scale, initial=0.0)  # at r_max: -dJ/dr >= ν
    return v_free, v_lo, v_hi, free


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_optimum_kkt_reference_and_random_feasible_points(family, seed):
    gen = sb.polynomial_bandit if family == "polynomial" else sb.binary_poisson_bandit
    k = 30
    bandit = gen(jax.random.key(seed), k, budget_fraction=[0.4, 0.1, 1.5][seed])
    lo, hi, budget = float(bandit.min_rate), float(bandit.max_rate), float(bandit.budget)
    alloc = OPTIMUM(bandit)
    r = np.asarray(alloc.x)
    assert np.all(r >= lo) and np.all(r <= hi)
    assert abs(r.sum() - budget) <= 1e-12 * budget
    v_free, v_lo, v_hi, free = kkt_violation(bandit.costs, alloc, lo, hi, k)
    assert free.any()
    assert v_free < 1e-9 and v_lo < 1e-9 and v_hi < 1e-9
    # slow independent solver (float64)
    ref = ref_optimum(np_marginal(bandit.costs), k, budget, lo, hi)
    np.testing.assert_allclose(r, ref, rtol=1e-8, atol=1e-10)
    # at least as good as random feasible points (box + budget)
    j_opt = np_policy_cost(bandit.costs, r)
    rng = np.random.RandomState(seed)
    for _ in range(200):
        w = rng.dirichlet(np.full(k, rng.choice([0.3, 1.0, 5.0])))
        x = np.asarray(PG_STEP(jnp.full(k, budget / k), -w * budget, 1.0, budget, lo, hi).x)
        assert abs(x.sum() - budget) < 1e-9 * budget and x.min() >= lo and x.max() <= hi
        assert j_opt <= np_policy_cost(bandit.costs, x) + 1e-14
        # and better than nearby feasible points in the direction of any other point
        y = r + 1e-3 * (x - r)
        assert j_opt <= np_policy_cost(bandit.costs, y) + 1e-15


def test_optimum_envelope_and_float32():
    """dJ*/dB = -ν (envelope theorem, by forward-mode through allocate's implicit
    derivative, and by finite differences); a float32 solve stays in the box, meets the
    budget to float32 precision and agrees with float64."""
    bandit = sb.polynomial_bandit(jax.random.key(5), 40)

    @jax.jit
    def envelope(budget):
        def jstar(b):
            return sb.policy_cost(bandit.costs, sb.optimal_rates(bandit.costs, b, bandit.min_rate, bandit.max_rate).x)
        _, dj = jax.jvp(jstar, (budget,), (jnp.ones_like(budget),))
        return dj, (jstar(budget + 1e-4) - jstar(budget - 1e-4)) / 2e-4

    nu = OPTIMUM(bandit).dual
    dj, fd = envelope(bandit.budget)
    np.testing.assert_allclose(dj, -nu, rtol=1e-8)
    np.testing.assert_allclose(fd, -nu, rtol=1e-6)
    b32 = jax.tree_util.tree_map(lambda x: jnp.asarray(x, jnp.float32), bandit)
    a32 = OPTIMUM(b32)
    assert a32.x.dtype == jnp.float32
    x = np.asarray(a32.x, np.float64)
    assert x.min() >= float(b32.min_rate) and x.max() <= float(b32.max_rate)
    assert abs(x.sum() - float(b32.budget)) <= 1e-5 * float(b32.budget)
    np.testing.assert_allclose(x, np.asarray(OPTIMUM(bandit).x), rtol=1e-4)


class LinearCosts(NamedTuple):
    """A user-defined family with only the three protocol methods: c(τ) = a·τ."""

    a: jax.Array

    def mean_cumulative_cost(self, tau):
        return 0.5 * self.a * tau**2

    def sample_path(self, key):
        return self.a * jax.random.uniform(key, jnp.shape(self.a), minval=0.5, maxval=1.5)

    def cost(self, path, tau):
        return path * tau


def test_user_defined_family_uses_generic_paths():
    """The protocol suffices: autodiff marginals and the generic per-arm Newton inverse
    reproduce the polynomial family's closed forms (p = 1)."""
    a = np.random.RandomState(0).uniform(0.05, 2.0, 25)
    user = LinearCosts(jnp.asarray(a))
    poly = sb.polynomial_costs(a, np.ones(25), 0.5)
    assert isinstance(user, sb.CostProcess)
    r = jnp.linspace(0.05, 3.0, 25)
    y = jnp.geomspace(1e-3, 1e3, 25)
    bandit = sb.make_sync_bandit(user, 10.0, 0.025, 3.0)

    @jax.jit
    def closed_forms(costs):
        return dict(
            cost=sb.policy_cost(costs, r),
            marginal=sb.marginal_values(costs, r),
            kkt=sb.kkt_rate(costs, y, 0.025, 3.0),
            dkkt=jax.grad(lambda c: jnp.sum(sb.kkt_rate(c, y, 0.025, 3.0)))(costs)[0],
            opt=sb.optimal_policy(bandit._replace(costs=costs)).x,
        )

    got, want = closed_forms(user), closed_forms(poly)
    np.testing.assert_allclose(got["cost"], want["cost"], rtol=1e-13)
    np.testing.assert_allclose(got["marginal"], want["marginal"], rtol=1e-12)
    np.testing.assert_allclose(got["kkt"], want["kkt"], rtol=1e-12)
    # the generic inverse differentiates exactly (per-arm implicit function theorem)
    np.testing.assert_allclose(got["dkkt"], want["dkkt"], rtol=1e-9, atol=1e-14)
    np.testing.assert_allclose(got["opt"], want["opt"], rtol=1e-10)
    # the learners' gradient estimator works on it, unbiased
    counts = jnp.arange(25) % 4
    est = jax.jit(jax.vmap(lambda kk: sb.interval_gradient_estimate(kk, user, r, counts, 0.2).grad))
    g = np.asarray(est(jax.random.split(jax.random.key(8), 4000)))[:, np.asarray(counts) > 0]
    truth = -np.asarray(want["marginal"])[np.asarray(counts) > 0]
    assert np.all(np.abs(g.mean(0) - truth) <= Z * g.std(0, ddof=1) / np.sqrt(4000))


# --------------------------------------------------------- mirror step / projection
def md_objective(x, r, g, eta):
    return eta * np.dot(x, g) + np.sum(-np.log(x / r) + x / r - 1)


def md_grad(x, r, g, eta):
    return eta * g - 1 / x + 1 / r


def pg_objective(x, r, g, eta):
    return np.sum((x - (r - eta * g)) ** 2)


def pg_grad(x, r, g, eta):
    return 2 * (x - (r - eta * g))


def golden(f, a, b, iters=90):
    """Plain golden-section minimisation of a convex 1-D function on [a, b]."""
    phi = (np.sqrt(5) - 1) / 2
    c, d = b - phi * (b - a), a + phi * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(iters):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - phi * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + phi * (b - a)
            fd = f(d)
    return 0.5 * (a + b)


def brute_force_k3(obj, budget, lo, hi):
    """argmin over {x in box, sum x = budget} for K = 3 by nested golden-section search."""

    def inner(x1):
        a = max(lo[1], budget - x1 - hi[2])
        b = min(hi[1], budget - x1 - lo[2])
        x2 = golden(lambda x2: obj(np.array([x1, x2, budget - x1 - x2])), a, b)
        return x2, obj(np.array([x1, x2, budget - x1 - x2]))

    a1 = max(lo[0], budget - hi[1] - hi[2])
    b1 = min(hi[0], budget - lo[1] - lo[2])
    x1 = golden(lambda x1: inner(x1)[1], a1, b1)
    x2 = inner(x1)[0]
    return np.array([x1, x2, budget - x1 - x2])


def bisect_k2(grad_fn, budget, lo, hi):
    """argmin for K = 2 by bisection on the (monotone) derivative along x1 + x2 = budget."""
    a = max(lo[0], budget - hi[1])
    b = min(hi[0], budget - lo[1])
    d = lambda x1: (lambda gr: gr[0] - gr[1])(grad_fn(np.array([x1, budget - x1])))
    if d(a) >= 0:
        return np.array([a, budget - a])
    if d(b) <= 0:
        return np.array([b, budget - b])
    for _ in range(200):
        mid = 0.5 * (a + b)
        if d(mid) > 0:
            b = mid
        else:
            a = mid
    x1 = 0.5 * (a + b)
    return np.array([x1, budget - x1])


STEPS = {
    "mirror": (MD_STEP, md_objective, md_grad),
    "psgd": (PG_STEP, pg_objective, pg_grad),
}


def random_step_problem(rng, k):
    lo = rng.uniform(0.02, 0.2, k)
    hi = lo + rng.uniform(0.1, 3.0, k)
    r = lo + rng.uniform(0, 1, k) * (hi - lo)
    budget = float(np.sum(lo + rng.uniform(0.05, 0.95, k) * (hi - lo)))
    g = rng.normal(0, 1, k) * rng.choice([0.1, 1.0, 10.0])
    eta = float(rng.choice([0.1, 1.0, 3.0]))
    return r, g, eta, budget, lo, hi


@pytest.mark.parametrize("kind", sorted(STEPS))
def test_steps_equal_brute_force_argmin_small_k(kind):
    step, obj, grad = STEPS[kind]
    rng = np.random.RandomState(7)
    for trial in range(12):
        r, g, eta, budget, lo, hi = random_step_problem(rng, 2)
        x = np.asarray(step(r, g, eta, budget, lo, hi).x)
        ref = bisect_k2(lambda z: grad(z, r, g, eta), budget, lo, hi)
        np.testing.assert_allclose(x, ref, rtol=1e-10, atol=1e-12)
    for trial in range(6):
        r, g, eta, budget, lo, hi = random_step_problem(rng, 3)
        x = np.asarray(step(r, g, eta, budget, lo, hi).x)
        ref = brute_force_k3(lambda z: obj(z, r, g, eta), budget, lo, hi)
        np.testing.assert_allclose(x, ref, atol=2e-5)
        assert obj(x, r, g, eta) <= obj(ref, r, g, eta) + 1e-12


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), kind=st.sampled_from(sorted(STEPS)), f32=st.booleans())
def test_steps_are_argmins_in_box_on_budget(seed, kind, f32):
    """Variational-inequality certificate: moving mass from any arm above its lower bound
    to any arm below its upper bound cannot decrease the objective; box and budget hold
    to float precision (float32 and float64), for duals of either sign."""
    step, obj, grad = STEPS[kind]
    rng = np.random.RandomState(seed)
    k = 9  # one shape: the jitted steps compile once per dtype
    r, g, eta, budget, lo, hi = random_step_problem(rng, k)
    dtype = np.float32 if f32 else np.float64
    cast = lambda v: jnp.asarray(v, dtype)
    alloc = step(cast(r), cast(g), cast(eta), cast(budget), cast(lo), cast(hi))
    x = np.asarray(alloc.x)
    assert x.dtype == dtype
    assert np.all(x >= cast(lo)) and np.all(x <= cast(hi))
    eps = np.finfo(dtype).eps
    assert abs(np.sum(x.astype(np.float64)) - budget) <= 8 * k * eps * budget
    if not f32:
        gr = grad(x, r, g, eta)
        can_give = x > lo * (1 + 1e-12)
        can_take = x < hi * (1 - 1e-12)
        if can_give.any() and can_take.any():
            scale = 1 + np.max(np.abs(gr))
            assert np.max(gr[can_give]) <= np.min(gr[can_take]) + 1e-8 * scale


@pytest.mark.parametrize("kind", sorted(STEPS))
def test_masked_step_updates_only_active_arms(kind):
    """Alg. 2 lines 31-33: arms outside A_i are held fixed (lower = upper = r) and the
    active arms solve their own problem with their current total rate as the budget."""
    step = STEPS[kind][0]
    rng = np.random.RandomState(3)
    k = 10
    r = rng.uniform(0.05, 2.0, k)
    r = r / r.sum() * 8.0
    g = -rng.uniform(0, 2, k)
    active = rng.uniform(size=k) < 0.6
    lo, hi = 0.025, 2.5
    full = step(r, g, 1.3, r.sum(), np.where(active, lo, r), np.where(active, hi, r)).x
    sub = step(r[active], g[active], 1.3, r[active].sum(), lo, hi).x
    np.testing.assert_array_equal(np.asarray(full)[~active], r[~active])
    np.testing.assert_allclose(np.asarray(full)[active], sub, rtol=1e-12)


def test_zero_gradient_mirror_step_is_identity_and_barrier_init_is_uniform():
    r = np.array([0.3, 0.5, 1.2, 0.025])
    x = ms.mirror_descent_step(r, np.zeros(4), 2.0, r.sum(), 0.025, 3.0).x
    np.testing.assert_allclose(x, r, rtol=1e-12)
    init = ms.barrier_rates(40.0 / 1.05, 0.025, 3.0 / 1.05, 100).x
    np.testing.assert_allclose(init, np.full(100, 40.0 / 1.05 / 100), rtol=1e-12)
    clipped = ms.barrier_rates(5.0, np.array([0.5, 2.0, 0.1]), 4.0, 3).x  # arm 2 forced up
    np.testing.assert_allclose(clipped, [1.5, 2.0, 1.5], rtol=1e-12)


# -------------------------------------------------------------------------- learners
def _run_family(family, num_instances=16, rounds=60):
    """All three learners with the paper's hyperparameters on fresh instances (float32),
    in one jitted call; returns normalised suboptimality curves and final states."""
    table = sb.TABLE1 if family == "polynomial" else sb.TABLE2
    gen = sb.polynomial_bandit if family == "polynomial" else sb.binary_poisson_bandit
    learners = {
        "mirror_sync": (ms.mirror_sync(**table["mirror_sync"]), None),
        "async_mirror_sync": (ms.async_mirror_sync(**table["async_mirror_sync"]),
                              table["async_mirror_sync"]["update_interval"]),
        "async_psgd_sync": (ms.async_psgd_sync(**table["async_psgd_sync"]),
                            table["async_psgd_sync"]["update_interval"]),
    }
    steps = {n: ms.num_learner_steps(L, table["min_rate"], rounds, l) for n, (L, l) in learners.items()}

    @jax.jit
    def go(key):
        bandits = jax.vmap(lambda kk: gen(kk, 100, dtype=jnp.float32))(jax.random.split(key, num_instances))
        jeps = jax.vmap(lambda b: sb.policy_cost(b.costs, sb.optimal_policy(b, table["exploration"]).x))(bandits)
        out = {}
        for i, (name, (L, _)) in enumerate(learners.items()):
            keys = jax.random.split(jax.random.fold_in(key, i), num_instances)
            j0 = jax.vmap(lambda b: sb.policy_cost(b.costs, L.init(b).rate))(bandits)
            out[name] = (j0,) + jax.vmap(lambda kk, b: ms.run_sync_learner(kk, L, b, steps[name]))(keys, bandits)
        return jeps, out

    jeps, out = go(jax.random.key(11))
    curves = {}
    for name, (j0, state, info) in out.items():
        gap0 = float(jnp.mean(j0 - jeps))
        gap = np.asarray(jnp.mean(info.policy_cost - jeps[:, None], axis=0)) / gap0
        rounds_axis = np.asarray(info.time[0]) * table["min_rate"]
        curves[name] = (rounds_axis, gap, state, info)
    return curves, table


def first_round_below(curve, threshold):
    rounds, gap = curve[:2]
    hit = np.flatnonzero(gap <= threshold)
    return rounds[hit[0]] if hit.size else np.inf


@pytest.mark.parametrize("family", ["polynomial", "binary_poisson"])
def test_learners_converge_and_async_mirror_beats_psgd(family):
    """ICML-20 Figs. 1-4 at reduced size (16 instances, 60 of the 240 rounds, the paper's
    hyperparameters, float32): all three algorithms shrink J(r) - J*_ε; AsyncMirrorSync
    reaches a given suboptimality in fewer rounds than AsyncPSGDSync (Figs. 2, 4), and
    MirrorSync and AsyncMirrorSync behave alike (Figs. 1, 3).  Rates stay in K_ε."""
    curves, table = _run_family(family)
    final_bound, threshold = (0.5, 0.6) if family == "polynomial" else (0.85, 0.8)
    eps = table["exploration"]
    budget = table["budget_fraction"] * 100 / (1 + eps)
    hi = table["max_rate"] / (1 + eps)
    for name, (rounds, gap, state, info) in curves.items():
        assert np.all(np.isfinite(gap))
        assert gap[-1] < final_bound, (name, gap[-1])
        q = len(gap) // 4
        assert gap[-q:].mean() < gap[:q].mean(), name  # decreasing trend
        assert rounds[-1] == pytest.approx(60.0)
        r = np.asarray(state.rate, np.float64)
        assert r.min() >= table["min_rate"] and r.max() <= hi * (1 + 1e-6), name
        np.testing.assert_allclose(r.sum(axis=1), budget, rtol=1e-4)
        assert np.all(np.asarray(info.num_updated) <= 100)
    r_ams = first_round_below(curves["async_mirror_sync"], threshold)
    r_psgd = first_round_below(curves["async_psgd_sync"], threshold)
    assert r_ams < r_psgd, (r_ams, r_psgd)
    r_ms = first_round_below(curves["mirror_sync"], threshold)
    assert abs(r_ms - r_ams) <= 10, (r_ms, r_ams)


def test_grid_search_is_one_vmapped_call_matching_single_runs(bandit20):
    """The vmapped grid equals single scan runs row by row (vmap over hyperparameters
    matches the unbatched learner), with one static scan length for all intervals."""
    res = ms.grid_search(jax.random.key(0), AMS, bandit20, [0.5, 1.6], [10.0, 20.0], horizon_rounds=10)
    assert res.policy_cost.shape == (4, 40)  # 10 rounds * 40 time units / 10 for the finest interval
    assert np.asarray(res.active).sum(axis=1).tolist() == [40, 20, 40, 20]
    _, info = ms.run_sync_learner(jax.random.key(0), AMS, bandit20, 20)  # η = 1.6, l = 20
    row = 3
    assert float(res.learning_rate[row]) == pytest.approx(1.6) and float(res.update_interval[row]) == 20.0
    np.testing.assert_allclose(np.asarray(res.policy_cost[row])[:20], info.policy_cost, rtol=1e-5)
    np.testing.assert_allclose(res.final_cost[row], info.policy_cost[-1], rtol=1e-5)
    assert int(res.best) == int(np.argmin(np.asarray(res.tail_cost)))


def test_mirror_sync_first_sample_only_uses_one_interval_per_arm(bandit20):
    """Alg. 1 line 18 as written: one Lemma 2 sample per arm and round, so the probes per
    round are Binomial(K, ε); the default averages all ⌊r_k/r_min⌋ intervals."""
    k, eps, rounds = 20, 0.05, 400
    first = ms.mirror_sync(first_sample_only=True)
    state, info = ms.run_sync_learner(jax.random.key(3), first, bandit20, rounds)
    probes = np.asarray(info.num_probes)
    assert probes.max() <= k
    assert abs(probes.mean() - eps * k) <= Z * np.sqrt(k * eps * (1 - eps) / rounds)
    r = np.asarray(state.rate, np.float64)
    np.testing.assert_allclose(r.sum(), float(bandit20.budget) / (1 + eps), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(info.time), 40.0 * np.arange(1, rounds + 1), rtol=1e-6)
    assert np.all(np.isfinite(np.asarray(info.policy_cost)))


def test_public_boundary_errors():
    with pytest.raises(ValueError, match="noise"):
        sb.polynomial_costs([1.0], [0.5], noise=1.5)
    with pytest.raises(ValueError, match="exponent"):
        sb.polynomial_costs([1.0], [-0.5])
    with pytest.raises(ValueError, match="change_rate"):
        sb.binary_poisson_costs([0.0, 1.0])
    with pytest.raises(ValueError, match="budget"):
        sb.make_sync_bandit(sb.binary_poisson_costs([1.0, 2.0]), 10.0, 0.1, 3.0)
    with pytest.raises(ValueError, match="rate"):
        sb.policy_cost(sb.binary_poisson_costs([1.0, 2.0]), jnp.array([1.0, 0.0]))
    with pytest.raises(ValueError, match="exploration"):
        sb.gradient_estimate(jax.random.key(0), sb.binary_poisson_costs([1.0]), jnp.ones(1), 0.0)
    bandit = sb.polynomial_bandit(jax.random.key(0), 10)
    with pytest.raises(ValueError, match="exploration"):
        ms.async_mirror_sync(exploration=1.5).init(bandit)
    with pytest.raises(ValueError, match="K_eps"):
        ms.mirror_sync().init(bandit._replace(budget=jnp.asarray(0.2)))
    with pytest.raises(ValueError, match="budget_fraction"):
        sb.polynomial_bandit(jax.random.key(0), 10, budget_fraction=5.0)
    with pytest.raises(ValueError, match="lower"):
        ms.mirror_descent_step(jnp.ones(3), jnp.zeros(3), 1.0, 3.0, 0.0, 2.0)
    with pytest.raises(ValueError, match="learning_rates"):
        ms.grid_search(jax.random.key(0), AMS, bandit, [0.0], [20.0])
