"""Crawling learners: explore-then-commit, phased ε-greedy, LambdaLearnAndCrawl, Avrachenkov §5, sweeps.

Every check is a mathematical truth or a paper's claim at reduced size: closed forms
against quadrature and Monte-Carlo within stated standard errors, the compressed
history against the estimator on the uncompressed one, vmapped sweeps against single
runs, and the papers' convergence / scaling claims (L2C Thm 1 and Fig. 1-2, NeurIPS-19
Fig. 3, Avrachenkov et al. Fig. 6).

Compilation dominates the run time, so each learner is compiled once, in a module-scoped
fixture (one run_sweep call per learner), and every test reads its results; the sweep's
own mechanics (keys, chunks, resume) are tested on a toy learner that compiles in a blink.
"""
import functools
import json
import os
import re
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jaxcrawl
import jaxcrawl.learners._explore_commit as ec
import jaxcrawl.learners._history as lh
import jaxcrawl.learners._learn_and_crawl as lc
import jaxcrawl.learners._sweep as sw
from jaxcrawl import CrawlProblem, estimators
from jaxcrawl._src.rootfind import default_rtol
from jaxcrawl.learners import Learner, run_learner
from jaxcrawl.simulate import config_for

Z = 4.0  # standard errors allowed in Monte-Carlo comparisons


# ------------------------------------------------------------------------ instances
def l2c_instance(seed, m=10, bandwidth=10.0, sigma=1.2, xi_range=(0.5, 1.5)):
    """m pages with log-normal importance and log-uniform change rates (L2C §2 model)."""
    rng = np.random.RandomState(seed)
    zeta = np.exp(rng.normal(0.0, sigma, m))
    xi = np.exp(rng.uniform(np.log(xi_range[0]), np.log(xi_range[1]), m))
    return CrawlProblem(zeta, xi, bandwidth)


def loglog_slope(x, y):
    return float(np.polyfit(np.log(x), np.log(y), 1)[0])


# ------------------------------------------------------------------- closed forms
@pytest.mark.x64
@settings(max_examples=25, deadline=None)
@given(m=st.integers(2, 50), r=st.floats(1.0, 50.0), xmin=st.floats(0.05, 1.0),
       spread=st.floats(1.0, 4.0), delta=st.floats(0.01, 0.5), t=st.floats(1e2, 1e6),
       frac=st.floats(0.01, 100.0))
def test_tau_star_minimises_thm1_bound(m, r, xmin, spread, delta, t, frac):
    """Thm 1: the bound is Aτ + BT/τ − B (eq. 9); τ* solves Aτ² = BT (its minimiser)."""
    xmax = xmin * spread
    zeta = np.linspace(0.5, 2.0, m)
    a = zeta.sum() / m
    b = zeta.sum() * np.exp(2 * xmax * m / r) * r * np.log(2 * m / delta) / (2 * m**2 * xmin**2)
    ts = float(ec.tau_star(t, m, r, xmin, xmax, delta))
    assert np.isclose(a * ts**2, b * t, rtol=1e-9)
    assert np.isclose(float(ec.tau_star(4 * t, m, r, xmin, xmax, delta)), 2 * ts, rtol=1e-9)
    tau = frac * ts
    assert np.isclose(float(ec.etc_regret_bound(t, tau, zeta, r, xmin, xmax, delta)),
                      a * tau + b * t / tau - b, rtol=1e-9)


def test_commit_transient_is_integral_of_lemma1():
    """∫ of L2C Lemma 1's P(fresh) (eq. 10) minus eq. 4's stationary part, by quadrature."""
    p = l2c_instance(0, m=4)
    rate = np.array([0.3, 1.0, 2.5, 0.05])
    zeta, xi = np.asarray(p.importance), np.asarray(p.change_rate)
    for fresh in (1.0, 0.0):
        for d in (0.5, 3.0, 40.0):
            t = np.linspace(0.0, d, 20001)
            stat = rate / (rate + xi)
            prob = stat[:, None] + (fresh - stat[:, None]) * np.exp(-(rate + xi)[:, None] * t)
            integral = np.trapezoid(zeta[:, None] * (prob - stat[:, None]), t, axis=-1).sum() / 4
            got = float(ec.commit_transient(p, rate, d, fresh=fresh))
            assert np.isclose(got, integral, rtol=2e-5, atol=1e-9)  # trapezoid error


def test_exploration_utility_is_app_h():
    """App. H: τ/m Σ ζ (1 − e^{−ξ m/R})/(ξ m/R) = (1/m) ∫_0^τ Σ ζ e^{−ξ (t mod m/R)} dt."""
    p = l2c_instance(1, m=6, bandwidth=3.0)
    zeta, xi = np.asarray(p.importance), np.asarray(p.change_rate)
    w = 6 / 3.0
    h = 5 * w / 50000
    t = (np.arange(50000) + 0.5) * h  # midpoint rule (the integrand jumps at every crawl)
    fresh = np.exp(-xi[:, None] * np.mod(t, w))
    ref = (zeta[:, None] * fresh).sum() * h / 6
    assert np.isclose(float(ec.exploration_utility(p, 5 * w)), ref, rtol=1e-6)


def test_lemma1_phase_length():
    zeta = np.array([1.0, 2.0, 3.0])
    assert np.isclose(float(ec.lemma1_phase_length(zeta, 0.5, 0.1)), np.log(120.0) / 0.5)
    with pytest.raises(ValueError, match="tolerance"):
        ec.lemma1_phase_length(zeta, 0.5, 0.0)


# ------------------------------------------------------------- explore-then-commit
ETC_NMAX = 1500   # exploration rounds simulated (τ up to 1500 · m/R)
ETC_SEEDS = 48
EPS_PHASES = 200  # phases of the ε-greedy runs
EPS_SEEDS = 16


def rtol_for(x, t64):
    """``t64`` for float64 results, 100 units of roundoff for float32 ones."""
    return max(t64, 100 * float(np.finfo(np.asarray(x).dtype).eps))


@pytest.fixture(scope="module")
def instances():
    """Two L2C instances with m = 10, R = 10 (m/R = 1) and ξ ∈ [0.5, 1.5]: A (importance
    σ = 1.2) for Fig. 1, B (σ = 2.0, so the optimum is far from uniform) for Fig. 2."""
    a, b = l2c_instance(3), l2c_instance(0, sigma=2.0)
    both = CrawlProblem(jnp.stack([a.importance, b.importance]), jnp.stack([a.change_rate, b.change_rate]),
                        jnp.asarray([10.0, 10.0]))
    return dict(a=a, b=b, both=both)


CLIPS = ((1e-9, 25.0), (0.5, 1.5))  # L2C §6's clip; the known bounds of ξ (L2C §2)


class WithHistory(NamedTuple):
    """A run_sweep transform: ``etc_grid_transform``'s outputs plus each run's history."""

    inner: Any

    def __call__(self, final_state, info, problem, params):
        return self.inner(final_state, info, problem, params) + (final_state.history,)


@pytest.fixture(scope="module")
def etc_sweep(instances):
    """ETC on A and B through run_sweep (one compiled call); each seed explores once and
    commits at every τ of a log grid, once per clip of the estimates (CLIPS)."""
    settings_ = ec.etc_settings(instances["both"], float(ETC_NMAX))
    learner = ec.explore_then_commit(**settings_)
    taus = np.unique(np.round(np.logspace(0, np.log10(ETC_NMAX), 40)))  # m/R = 1
    transform = ec.etc_grid_transform(learner, taus, group_ratio=10, clips=CLIPS)
    key = jax.random.key(0)
    res = sw.run_sweep(key, learner, instances["both"], None, num_seeds=ETC_SEEDS,
                       num_steps=learner.num_windows, transform=WithHistory(transform))
    outcome, info, history = res.outputs  # outcome: (1, P, seeds, clips, taus, ...)
    return dict(learner=learner, taus=taus, outcome=outcome, info=info, history=history, key=key)


def _pick(outcome, problem, clip):
    """(seeds, taus, ...) outcome of one instance and clip."""
    return jax.tree_util.tree_map(lambda x: np.asarray(x)[0, problem, :, clip], outcome)


def _etc_optimum(outcome, horizon):
    reg = np.asarray(ec.etc_regret(outcome, horizon), np.float64)  # (seeds, taus)
    tau = np.asarray(outcome.tau)[0]
    mean = np.where(tau <= horizon, reg.mean(0), np.inf)
    i = int(np.argmin(mean))
    return tau, reg, i


@pytest.mark.long
def test_etc_commits_from_the_right_prefix(etc_sweep, instances):
    """Every τ used exactly τR/m observations, and under equal intervals moment matching
    is the closed form log(N/(N−U))/w, clipped (L2C §4); the grouped grid commit equals
    a direct commit at τ; no simulator overflow."""
    out = _pick(etc_sweep["outcome"], 0, 0)
    assert np.array_equal(np.asarray(out.num_rounds)[0], etc_sweep["taus"])
    assert int(np.sum(etc_sweep["info"].overflow)) == 0
    seed = 5
    history = jax.tree_util.tree_map(lambda x: x[0, 0, seed], etc_sweep["history"])
    h = jax.tree_util.tree_map(np.asarray, history)
    estimate = np.asarray(out.estimate)
    for j in (0, 17, len(etc_sweep["taus"]) - 1):
        n = int(etc_sweep["taus"][j])
        use = h.mask & (np.cumsum(h.mask, axis=-1) <= n)
        u = (h.changed * use).sum(-1)
        assert np.all(use.sum(-1) == n) and np.allclose(h.intervals[use], 1.0)
        with np.errstate(divide="ignore"):
            ref = np.clip(np.log(n / (n - u)), 1e-9, 25.0)
        np.testing.assert_allclose(estimate[seed, j], ref, rtol=rtol_for(estimate, 1e-8))
    j = 20
    state = ec.ETCState(None, history, None, None, ec.ETCParams(*(jnp.asarray(c, history.intervals.dtype)
                                                                    for c in CLIPS[0])))
    one = jax.jit(etc_sweep["learner"].commit)(state, instances["a"], etc_sweep["taus"][j])
    np.testing.assert_allclose(np.asarray(one.estimate), estimate[seed, j], rtol=rtol_for(estimate, 1e-10))
    np.testing.assert_allclose(np.asarray(one.rate), out.rate[seed, j], rtol=rtol_for(estimate, 1e-8), atol=1e-12)
    np.testing.assert_allclose(float(one.commit_freshness), out.commit_freshness[seed, j],
                               rtol=rtol_for(estimate, 1e-10))


@pytest.mark.long
def test_etc_exploration_utility_matches_app_h(etc_sweep, instances):
    """Simulated utility of the uniform-interval exploration = App. H (within 4 SE)."""
    window = etc_sweep["learner"].config.window
    sims = np.asarray(etc_sweep["info"].utility, np.float64)[0, 0, :, :10].sum(-1)  # first 10 windows, A
    exact = float(ec.exploration_utility(instances["a"], 10 * window))
    se = sims.std(ddof=1) / np.sqrt(sims.size)
    assert abs(sims.mean() - exact) < Z * se


@pytest.mark.long
def test_etc_regret_has_interior_minimum(etc_sweep):
    """L2C Fig. 1a: at T = 10^4 the regret in τ is smallest strictly inside the grid."""
    tau, reg, i = _etc_optimum(_pick(etc_sweep["outcome"], 0, 0), 1e4)
    mean, se = reg.mean(0), reg.std(0, ddof=1) / np.sqrt(reg.shape[0])
    last = np.flatnonzero(tau <= 1e4)[-1]
    assert 0 < i < last
    assert mean[0] - mean[i] > Z * np.hypot(se[0], se[i])
    assert mean[last] - mean[i] > Z * np.hypot(se[last], se[i])


@pytest.mark.long
def test_etc_tau_star_grows_as_sqrt_T_and_regret_as_sqrt_T(etc_sweep):
    """L2C Fig. 1b-c / Thm 1: empirical τ* ∝ T^{1/2}, regret/T ∝ T^{-1/2} over T = 1e2..1e5."""
    horizons = np.array([1e2, 1e3, 1e4, 1e5])
    taus, regrets = [], []
    for t in horizons:
        tau, reg, i = _etc_optimum(_pick(etc_sweep["outcome"], 0, 0), t)
        taus.append(tau[i])
        regrets.append(reg.mean(0)[i])
    assert 0.35 <= loglog_slope(horizons, taus) <= 0.65
    assert -0.65 <= loglog_slope(horizons, np.array(regrets) / horizons) <= -0.35


# -------------------------------------------------------------------- phased ε-greedy
@pytest.fixture(scope="module")
def eps_sweep(instances):
    """Phased ε-greedy on B (ε ∈ {0.005, 0.03}, estimates clipped to the known bounds as
    ETC's clip 1), phases of the Lemma 1 length for tolerance Σζ/2, through run_sweep."""
    b = instances["b"]
    zeta = np.asarray(b.importance)
    length = float(ec.lemma1_phase_length(zeta, 0.5, zeta.sum() / 2))
    settings_ = ec.phased_settings(b, length, EPS_PHASES)
    learner = ec.phased_epsilon_greedy(**settings_, min_rate=0.5, max_rate=1.5)
    problems = jax.tree_util.tree_map(lambda x: x[1:], instances["both"])
    grid = ec.EpsGreedyParams(epsilon=jnp.asarray([0.005, 0.03]))
    res = sw.run_sweep(jax.random.key(1), learner, problems, grid, num_seeds=EPS_SEEDS, num_steps=EPS_PHASES)
    return dict(learner=learner, result=res, length=length)


@pytest.mark.long
def test_phased_eps_greedy_beats_etc_with_enough_phases(eps_sweep, etc_sweep, instances):
    """L2C Fig. 2: with few phases ETC (best τ) has the lower regret, with enough phases
    phased ε-greedy does (expected regrets: eq. 4 per phase, App. H + eq. 4 for ETC)."""
    b = instances["b"]
    info = eps_sweep["result"].outputs
    regret = np.asarray(ec.phased_regret(b, info), np.float64)[0, 0]  # ε = 0.005: (seeds, phases)
    etc_out = _pick(etc_sweep["outcome"], 1, 1)  # instance B, known-bounds clip
    assert int(np.sum(info.overflow)) == 0 and int(np.max(info.truncated)) == 0
    for phases, eps_better in ((25, False), (EPS_PHASES, True)):
        horizon = phases * eps_sweep["length"]
        r_eps = regret[:, phases - 1]
        _, r_etc, i = _etc_optimum(etc_out, horizon)
        diff = r_eps.mean() - r_etc[:, i].mean()
        se = np.hypot(r_eps.std(ddof=1) / np.sqrt(r_eps.size), r_etc[:, i].std(ddof=1) / np.sqrt(r_etc.shape[0]))
        assert (-diff if eps_better else diff) > Z * se, (phases, r_eps.mean(), r_etc[:, i].mean())


@pytest.mark.long
def test_phased_regret_is_eq4_per_phase(eps_sweep, instances):
    """The per-phase utility is eq. 4 for the executed rates, which are ρ^UR first and
    then (1 − ε)ρ̂ + εR/m for Azar et al.'s optimum ρ̂ of the previous estimates."""
    b = instances["b"]
    info = jax.tree_util.tree_map(lambda x: np.asarray(x)[1, 0, 0], eps_sweep["result"].outputs)
    f = np.asarray(jaxcrawl.binary_freshness(b, jnp.asarray(info.rate)))
    np.testing.assert_allclose(info.utility, eps_sweep["length"] / 10 * f, rtol=rtol_for(f, 1e-7))
    np.testing.assert_allclose(info.rate[0], 1.0, rtol=rtol_for(f, 1e-12))
    rho_hat = np.asarray(jaxcrawl.solve(b.replace(change_rate=jnp.asarray(info.estimate[7])), "binary").rate)
    np.testing.assert_allclose(info.rate[8], 0.97 * rho_hat + 0.03 * 1.0, rtol=rtol_for(f, 1e-6), atol=1e-6)


# ------------------------------------------------------------------------ sweeps
class ToyParams(NamedTuple):
    scale: float = 1.0


class ToyState(NamedTuple):
    x: jax.Array
    scale: jax.Array


def _toy_init(problem, params=None):
    scale = (params or ToyParams()).scale
    return ToyState(jnp.zeros_like(problem.change_rate), jnp.asarray(scale, problem.change_rate.dtype))


def _toy_step(key, state, problem):
    """A random walk whose steps depend on the key, the params and the problem."""
    x = state.x + state.scale * problem.change_rate * jax.random.normal(key, state.x.shape, state.x.dtype)
    return state._replace(x=x), jnp.sum(x * problem.importance)


TOY = Learner(_toy_init, _toy_step, "toy")
TOY_GRID = sw.grid_product(ToyParams, scale=[0.5, 1.0, 2.0])


def toy_problems():
    a, b = l2c_instance(3), l2c_instance(0, sigma=2.0)
    return jax.tree_util.tree_map(lambda *x: jnp.stack([jnp.asarray(v) for v in x]), a, b)


def test_sweep_matches_single_runs_seed_by_seed():
    """Row [g, p, s] of a chunked, padded, vmapped sweep equals run_learner with
    sweep_key(key, p, s) and grid point g alone, seed by seed."""
    problems, key = toy_problems(), jax.random.key(3)
    res = sw.run_sweep(key, TOY, problems, TOY_GRID, num_seeds=3, num_steps=6, chunk_size=2)
    assert res.num_chunks == 2 and np.shape(res.outputs) == (3, 2, 3, 6)
    for g, p, s in [(0, 0, 0), (2, 1, 2), (1, 1, 0)]:
        q = jax.tree_util.tree_map(lambda x: x[p], problems)
        prm = jax.tree_util.tree_map(lambda x: x[g], TOY_GRID)
        _, info = run_learner(sw.sweep_key(key, p, s), TOY, q, 6, prm)
        np.testing.assert_allclose(res.outputs[g, p, s], np.asarray(info), rtol=rtol_for(info, 1e-12))
    assert not np.allclose(res.outputs[0, 0, 0], res.outputs[0, 0, 1])  # seeds differ


class _Interrupt(Exception):
    pass


def test_sweep_resumes_without_recomputing(tmp_path):
    """A sweep interrupted after its first chunk resumes from disk (atomic
    checkpoint files) and computes only the rest; the result equals the
    uninterrupted sweep; load_sweep reads the chunks; a different sweep is refused."""
    problems, key = toy_problems(), jax.random.key(4)
    kwargs = dict(num_seeds=3, num_steps=6, chunk_size=2)  # the shapes above: no new compilation
    full = sw.run_sweep(key, TOY, problems, TOY_GRID, **kwargs)
    out_dir = str(tmp_path / "sweep")

    def stop(index, _):
        raise _Interrupt(index)

    with pytest.raises(_Interrupt):
        sw.run_sweep(key, TOY, problems, TOY_GRID, on_chunk=stop, out_dir=out_dir, **kwargs)
    with open(os.path.join(out_dir, sw.MANIFEST)) as f:
        assert list(json.load(f)["finished"]) == ["0"]
    assert sorted(os.listdir(out_dir)) == ["chunk_00000.npz", sw.MANIFEST]  # no temporary files left
    first = os.path.join(out_dir, "chunk_00000.npz")
    stamp = os.stat(first).st_mtime_ns
    res = sw.run_sweep(key, TOY, problems, TOY_GRID, out_dir=out_dir, **kwargs)
    assert res.computed_chunks == (1,) and res.num_chunks == 2
    assert os.stat(first).st_mtime_ns == stamp
    np.testing.assert_array_equal(res.outputs, full.outputs)
    again = sw.run_sweep(key, TOY, problems, TOY_GRID, out_dir=out_dir, **kwargs)
    assert again.computed_chunks == ()
    manifest, chunks = sw.load_sweep(out_dir)
    assert manifest["num_chunks"] == 2 and sorted(chunks) == [0, 1]
    np.testing.assert_array_equal(np.concatenate([chunks[0][0], chunks[1][0]]), full.outputs)
    treedef = jax.tree_util.tree_structure(full.outputs)
    assert np.array_equal(sw.load_sweep(out_dir, treedef)[1][1], full.outputs[2:])
    with pytest.raises(ValueError, match="different sweep"):
        sw.run_sweep(jax.random.key(2), TOY, problems, TOY_GRID, out_dir=out_dir, **kwargs)


def test_grid_product_and_sweep_validation():
    g = sw.grid_product(lc.LLCParams, suffix_epochs=[3, 7], smoothing=[0.25, 0.5, 1.0])
    assert np.asarray(g.suffix_epochs).tolist() == [3, 3, 3, 7, 7, 7]
    assert np.asarray(g.smoothing).tolist() == [0.25, 0.5, 1.0] * 2
    assert np.allclose(np.asarray(g.epsilon), 0.4)
    with pytest.raises(ValueError, match="unknown fields"):
        sw.grid_product(lc.LLCParams, nope=[1])
    p = l2c_instance(3)
    with pytest.raises(ValueError, match="leading instance axis"):
        sw.run_sweep(jax.random.key(0), TOY, p, None, num_seeds=1, num_steps=1)
    assert jaxcrawl.learners.Learner is Learner and sw.run_learner is run_learner  # one protocol, one driver


# -------------------------------------------------------- LambdaLearnAndCrawl family
FAMILY = ("harmonic", "harmonic-approx", "binary-epsilon")  # LLC, LLCA, BLLCε (K19 §9.3)
EPOCHS = 21


@pytest.fixture(scope="module")
def llc_runs():
    """LLC, LLCA and BLLCε (one compiled program, the inner utility as a swept index) on two
    2,000-page synthetic instances, 21 daily epochs (NeurIPS-19 Experiment 3, reduced),
    through run_sweep."""
    keys = jax.random.split(jax.random.key(5), 2)
    problems = jax.vmap(lambda k: jaxcrawl.synthetic(k, 2000))(keys)
    settings_ = lc.llc_settings(problems, FAMILY, events_per_window=48.0)
    learner = lc.lambda_learn_and_crawl(FAMILY, **settings_)
    grid = sw.grid_product(lc.LLCParams, solver=list(FAMILY))
    res = sw.run_sweep(jax.random.key(6), learner, problems, grid, num_seeds=1, num_steps=EPOCHS)
    info = jax.tree_util.tree_map(lambda x: np.swapaxes(x[:, :, 0], 0, 1), res.outputs)  # (P, G, epochs)

    @jax.jit
    def optimum(qs):
        return dict(llc=jaxcrawl.harmonic_cost(qs, jaxcrawl.solve(qs, "harmonic")),
                    llca=jaxcrawl.harmonic_cost(qs, jaxcrawl.solve(qs, "harmonic-approx")),
                    bllc=jaxcrawl.binary_cost(qs, jaxcrawl.binary_lambda_crawl(qs, 0.4)))

    return dict(info=info, settings=settings_, learner=learner,
                problem=jax.tree_util.tree_map(lambda x: x[0], problems),
                optimum={k: np.asarray(v, np.float64) for k, v in optimum(problems).items()})


@pytest.mark.long
def test_llc_converges_to_lambda_crawl_optimum(llc_runs):
    """LLC's policy cost after 21 epochs is within 2% of LambdaCrawl's optimum for the true
    rates; every inner solve converged."""
    info, opt = llc_runs["info"], llc_runs["optimum"]
    assert llc_runs["learner"].name == "llc+llca+bllc"
    assert int(info.overflow.sum()) == 0 and np.all(info.converged) and np.all(info.estimate_converged)
    final = info.harmonic_cost[:, 0, -1]
    assert np.all(final >= opt["llc"] * (1 - rtol_for(final, 1e-6)))  # never below the optimum
    assert np.all(final <= 1.02 * opt["llc"])
    assert np.all(info.harmonic_cost[:, 0, -1] < info.harmonic_cost[:, 0, 0])


@pytest.mark.long
def test_llca_converges_faster_but_higher_and_bllc_slowest(llc_runs):
    """NeurIPS-19 Fig. 3: LLCA is near its limit after one epoch (LLC is not) but its
    limit is costlier than LLC's; BLLCε keeps the largest share of its first-epoch gap.

    Each learner's gap is measured in its own objective (harmonic for LLC / LLCA,
    binary for BLLCε) against its inner solver at the true rates."""
    info, opt = llc_runs["info"], llc_runs["optimum"]
    gap_llc = info.harmonic_cost[:, 0] / opt["llc"][:, None] - 1
    gap_llca = info.harmonic_cost[:, 1] / opt["llca"][:, None] - 1
    gap_bllc = info.binary_cost[:, 2] / opt["bllc"][:, None] - 1
    assert np.all(gap_llca[:, 0] < 0.5 * gap_llc[:, 0])         # faster in the first epochs
    assert np.all(gap_llca[:, 2] < 0.5 * gap_llc[:, 2])
    assert np.all(info.harmonic_cost[:, 1, -1] > info.harmonic_cost[:, 0, -1] * 1.03)  # higher cost
    remaining = lambda g: g[:, -1] / g[:, 0]
    assert np.all(remaining(gap_bllc) > remaining(gap_llc))   # slowest
    assert np.all(remaining(gap_bllc) > remaining(gap_llca))


def test_executed_policy_uses_probabilities_under_true_rates():
    """A complete page executes p = ρ̂/λ̂; under the true λ its rate is pλ and its cost −μ log p."""
    p = jaxcrawl.synthetic(jax.random.key(2), 16, complete_fraction=0.5)
    est = p.change_rate * 1.7
    pol = jaxcrawl.lambda_crawl(p.replace(change_rate=est))
    ex = lc.executed_policy(p, pol)
    comp = np.asarray(p.complete) != 0
    assert np.allclose(np.asarray(ex.rate)[comp], np.asarray(pol.prob * p.change_rate)[comp])
    assert np.allclose(np.asarray(ex.rate)[~comp], np.asarray(pol.rate)[~comp])
    h = np.asarray(jaxcrawl.harmonic_cost(p, ex, per_page=True))
    mu = np.asarray(p.importance)
    assert np.allclose(h[comp], -mu[comp] * np.log(np.asarray(pol.prob)[comp]))


def _random_windows(rng, n, num_windows, k):
    """Observations of a few windows (padded (n, k) like simulate_window's)."""
    from jaxcrawl._src.observations import Observations
    out = []
    for _ in range(num_windows):
        cnt = rng.randint(0, k + 1, n)
        mask = np.arange(k)[None, :] < cnt[:, None]
        iv = np.where(mask, rng.exponential(0.4, (n, k)) + 1e-3, 0.0)
        ch = np.where(mask, rng.uniform(size=(n, k)) < 0.45, False).astype(float)
        out.append(Observations(jnp.asarray(iv), jnp.asarray(ch), jnp.asarray(mask),
                                jnp.asarray(ch.astype(np.int32)), jnp.full((n, k), jnp.inf)))
    return out


_record = jax.jit(lh.record_window)
_start = jax.jit(lh.start_epoch)
_suffix_estimate = jax.jit(lc.suffix_estimate)


@pytest.mark.long
@pytest.mark.x64
@pytest.mark.parametrize("capacity", [64, 9])
@pytest.mark.parametrize("flat", ["auto", None, 3])
def test_compressed_history_gives_the_full_history_mle(capacity, flat):
    """The LLC estimate equals mle_smoothed on the uncompressed suffix (NeurIPS-19 eq. 10 +
    Alg. 4 line 11); with a small ring each page uses its last complete epochs.  The same
    from the flat packing of the ring's valid entries (``"auto"``), from the padded suffix
    (``None``) and with a flat capacity of 3 entries (the rest packed and summed chunk by chunk)."""
    rng = np.random.RandomState(0)
    n, k, epochs, per_epoch, suffix = 6, 5, 5, 3, 3
    hist = lh.empty_history(n, capacity, 4, jnp.float64)
    windows = []
    for e in range(epochs):
        hist = _start(hist, e)
        for obs in _random_windows(rng, n, per_epoch, k):
            hist = _record(hist, obs, jnp.zeros(n, jnp.int32), e)
            windows.append((e, obs))
    est, truncated = jax.jit(functools.partial(lc.suffix_estimate, flat_capacity=flat))(
        hist, jnp.zeros(n, bool), epochs - 1, suffix, 0.5, 1.0, jnp.ones(n))
    dropped = np.asarray(hist.dropped_epoch)
    # the uncompressed reference: every observation of the page's suffix, padded
    iv = np.stack([np.asarray(o.intervals) for _, o in windows], axis=1).reshape(n, -1)
    ch = np.stack([np.asarray(o.changed) for _, o in windows], axis=1).reshape(n, -1)
    mk = np.stack([np.asarray(o.mask) for _, o in windows], axis=1).reshape(n, -1)
    ep = np.repeat([e for e, _ in windows], k)
    first = np.maximum(epochs - suffix, dropped + 1)
    use = mk & (ep[None, :] >= first[:, None])
    ref = np.asarray(estimators.mle_smoothed(iv, ch, use, smoothing=0.5, max_rate=1e3))
    kept = dropped < epochs - 1  # a ring wrapped inside the last epoch keeps the previous estimate
    np.testing.assert_allclose(np.asarray(est)[kept], ref[kept], rtol=1e-7)
    assert np.all(np.asarray(est)[~kept] == 1.0)
    if capacity == 64:
        assert not np.any(np.asarray(truncated)) and np.all(dropped == -1)
    else:
        assert np.any(np.asarray(truncated))


@pytest.mark.parametrize("size", [None, 7, 200])
def test_flat_ring_estimate_equals_the_padded_estimator(size):
    """`ring_mle_smoothed` equals `estimators.mle_smoothed` on the same entries padded, to the
    root-finder's tolerance, on rings of random fill, wrap and content -- on the ring itself
    (the default capacity of so small a ring), with 200 flat slots (every entry packed, a
    segment sum per Newton pass) and with 7 (the rest packed and summed in further chunks);
    every root converged."""
    from jaxcrawl._src.ring_mle import flat_capacity, ring_mle_smoothed

    rng = np.random.default_rng(4)
    n, c = 40, 6
    dt = jnp.result_type(float)
    ring = rng.lognormal(-0.5, 1.0, (n, c))
    count = rng.integers(0, c + 1, n)
    head = count + rng.integers(0, 3 * c, n)  # anywhere on the ring, wrapped or not
    unchanged = np.where(rng.random(n) < 0.2, 0.0, rng.exponential(3.0, n))
    pos = (head[:, None] - count[:, None] + np.arange(c)[None, :]) % c
    valid = np.arange(c)[None, :] < count[:, None]
    iv = np.concatenate([np.take_along_axis(ring, pos, axis=1), unchanged[:, None]], axis=1)
    ch = np.concatenate([valid, np.zeros((n, 1), bool)], axis=1)
    mk = np.concatenate([valid, (unchanged > 0)[:, None]], axis=1)
    ref = estimators.mle_smoothed(jnp.asarray(iv, dt), ch, mk, smoothing=0.5, max_rate=1e3, return_info=True)
    k = flat_capacity(n, c) if size is None else size
    assert (k == n * c) == (size is None)
    est, overflow = jax.jit(functools.partial(ring_mle_smoothed, size=k))(
        jnp.asarray(ring, dt), jnp.asarray(head), jnp.asarray(count), jnp.asarray(unchanged, dt), 0.5,
        lc.DEFAULT_MIN_RATE, 1e3)
    assert bool(overflow) == (count.sum() > k)
    assert np.all(np.asarray(est.converged)) and np.all(np.asarray(ref.converged))
    tol = 4 * default_rtol(dt)
    np.testing.assert_allclose(np.asarray(est.rate), np.asarray(ref.rate), rtol=tol)


def test_dense_ring_estimate_has_the_padded_estimators_derivatives():
    """On the ring itself (its changed-interval sum has a derivative rule of its own), the
    derivatives of the estimates in the ring's intervals, the unchanged time and the
    smoothing equal those of `estimators.mle_smoothed` on the same entries padded; and the
    rule's first and second derivatives match finite differences."""
    from jax.test_util import check_grads

    from jaxcrawl._src.ring_mle import _masked_sum, flat_capacity, ring_mle_smoothed

    rng = np.random.default_rng(5)
    n, c = 30, 5
    dt = jnp.result_type(float)
    ring = jnp.asarray(rng.lognormal(-0.5, 1.0, (n, c)), dt)
    count = rng.integers(0, c + 1, n)
    head = jnp.asarray(count + rng.integers(0, 3 * c, n))
    unchanged = jnp.asarray(rng.exponential(3.0, n) + 0.1, dt)
    pos = jnp.asarray((np.asarray(head)[:, None] - count[:, None] + np.arange(c)[None, :]) % c)
    valid = np.arange(c)[None, :] < count[:, None]
    weights = jnp.asarray(rng.normal(size=n), dt)

    def flat(ring, unchanged, s):
        est, _ = ring_mle_smoothed(ring, head, jnp.asarray(count), unchanged, s, lc.DEFAULT_MIN_RATE, 1e3,
                                   size=flat_capacity(n, c))
        return jnp.sum(weights * est.rate)

    def padded(ring, unchanged, s):
        iv = jnp.concatenate([jnp.take_along_axis(ring, pos, axis=1), unchanged[:, None]], axis=1)
        ch = np.concatenate([valid, np.zeros((n, 1), bool)], axis=1)
        mk = np.concatenate([valid, np.ones((n, 1), bool)], axis=1)
        return jnp.sum(weights * estimators.mle_smoothed(iv, ch, mk, smoothing=s, max_rate=1e3))

    assert flat_capacity(n, c) == n * c
    args = (ring, unchanged, jnp.asarray(0.5, dt))
    got = jax.grad(flat, argnums=(0, 1, 2))(*args)
    want = jax.grad(padded, argnums=(0, 1, 2))(*args)
    tol = 1e-9 if dt == jnp.float64 else 2e-3
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=tol, atol=tol * float(jnp.max(jnp.abs(w))))
    if dt == jnp.float64:
        x = jnp.asarray(rng.uniform(0.1, 3.0, n), dt)
        check_grads(lambda x, w: _masked_sum(x, w, jnp.asarray(valid)), (x, ring), order=2, modes=("fwd", "rev"))


@pytest.mark.x64
def test_complete_pages_use_signal_rate():
    """NeurIPS-19 eq. 11 with Alg. 4 line 13: (U + 0.5)/(T + 0.5) over the suffix's signals
    (the default complete_interval; tests/test_readings.py checks the option)."""
    n = 3
    hist = lh.empty_history(n, 8, 6, jnp.float64)
    signals = np.array([[3, 0, 5, 2], [0, 0, 0, 0], [10, 12, 9, 11]])
    empty = _random_windows(np.random.RandomState(1), n, 1, 2)[0]._replace(
        mask=jnp.zeros((n, 2), bool))
    for e in range(4):
        hist = _start(hist, e)
        hist = _record(hist, empty, jnp.asarray(signals[:, e]), e)
    est, _ = _suffix_estimate(hist, jnp.ones(n, bool), 3, 2, 0.5, 0.5, jnp.ones(n))
    ref = (signals[:, 2:].sum(-1) + 0.5) / (2 * 0.5 + 0.5)
    assert np.allclose(np.asarray(est), ref)


@pytest.mark.parametrize("flat_capacity", ["auto", None])
@pytest.mark.parametrize("smoothing", [0.0, -0.5, float("nan")])
def test_suffix_estimate_refuses_bad_smoothing_eagerly(flat_capacity, smoothing):
    """Both estimate paths name the argument and the rule (the flat one had no eager check)."""
    n = 3
    hist = _start(lh.empty_history(n, 8, 6, jnp.float32), 0)
    with pytest.raises(ValueError, match="smoothing must be finite and > 0"):
        lc.suffix_estimate(hist, jnp.zeros(n, bool), 1, 2, smoothing, 1.0, jnp.ones(n), flat_capacity=flat_capacity)


@pytest.mark.parametrize("mode", [pytest.param("auto", marks=pytest.mark.long), None, "forget"])
def test_suffix_estimate_reports_its_convergence(mode):
    """``return_converged=True`` adds each page's likelihood-solve flag (flat, padded and
    discounted paths) without changing the estimates."""
    rng = np.random.RandomState(4)
    n = 6
    hist = lh.empty_history(n, 8, 6, jnp.float32)
    for e, w in enumerate(_random_windows(rng, n, 4, 3)):
        hist = _record(_start(hist, e), w, jnp.asarray(rng.randint(0, 3, n)), e)
    kw = dict(half_life=5.0) if mode == "forget" else dict(flat_capacity=mode)
    args = (hist, jnp.asarray(np.arange(n) % 3 == 0), 4, 3, 0.5, 1.0, jnp.ones(n))
    est, trunc = lc.suffix_estimate(*args, **kw)
    est2, trunc2, ok = lc.suffix_estimate(*args, **kw, return_converged=True)
    np.testing.assert_array_equal(np.asarray(est), np.asarray(est2))
    np.testing.assert_array_equal(np.asarray(trunc), np.asarray(trunc2))
    assert ok.shape == (n,) and ok.dtype == jnp.bool_ and bool(np.all(np.asarray(ok)))


@pytest.fixture(scope="module")
def llc_small():
    """LLC settings and a problem at test size (no run): for the validation tests."""
    problems = jax.vmap(lambda k: jaxcrawl.synthetic(k, 64))(jax.random.split(jax.random.key(5), 2))
    return dict(settings=lc.llc_settings(problems, FAMILY, events_per_window=48.0), problems=problems,
                problem=jax.tree_util.tree_map(lambda x: x[0], problems))


def test_llc_param_validation(llc_small):
    s = llc_small["settings"]
    p = llc_small["problem"]
    learner = lc.lambda_learn_and_crawl(**s)
    with pytest.raises(ValueError, match="epsilon"):
        learner.init(p, lc.LLCParams(epsilon=1.5))
    with pytest.raises(ValueError, match="suffix_epochs"):
        learner.init(p, lc.LLCParams(suffix_epochs=0.0))
    with pytest.raises(ValueError, match="solver"):
        lc.lambda_learn_and_crawl("uniform_crawl", **s)
    with pytest.raises(ValueError, match="windows_per_epoch"):
        lc.lambda_learn_and_crawl(config=s["config"], windows_per_epoch=0)


def _while_loops(compiled) -> int:
    """The number of while loops in a compiled program."""
    return len(re.findall(r"^\s*(?:ROOT )?%\S+ = .*\swhile\(", compiled.as_text(), re.M))


@pytest.mark.long
def test_llc_run_compiles_the_inner_solve_once(llc_small):
    """run_learner starts LLC from ``init.pending`` (init's state without its inner solve),
    whose first step solves for the initial estimate with the step's own solver: the compiled
    run has exactly init's while loops (the inner solver's) fewer than the same run started
    from ``init``, and the same results bit for bit."""
    learner = lc.lambda_learn_and_crawl(**llc_small["settings"])
    p = llc_small["problem"]
    assert int(learner.init.pending(p).epoch) == -1

    def init(problem, params=None):  # without init.pending: run_learner scans the steps from init
        return learner.init(problem, params)

    from_init = Learner(init, learner.step, learner.name)
    key = jax.random.key(3)
    pending_run, init_run = (jax.jit(lambda k, lrn=lrn: run_learner(k, lrn, p, 3)).lower(key).compile()
                             for lrn in (learner, from_init))
    init_loops = _while_loops(jax.jit(learner.init).lower(p).compile())
    assert init_loops >= 1
    assert _while_loops(pending_run) == _while_loops(init_run) - init_loops
    for a, b in zip(jax.tree_util.tree_leaves(pending_run(key)), jax.tree_util.tree_leaves(init_run(key))):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def log_rate(nu, params):
    return params[0] / nu


def log_marginal(x, params):
    return params[0] / x


LOG_UTILITY = jaxcrawl.Objective(name="log", rate=log_rate, marginal=log_marginal)


@pytest.mark.long
def test_inner_solvers_are_utilities(llc_small):
    """K19 Alg. 4 line 4 takes any Objective: registry names map to the registry's objectives,
    BLCε takes its floor from the (traced) params.epsilon, and a user-defined objective
    (weighted log, rates ∝ importance) is solved by jaxcrawl.solve."""
    assert lc.inner_utility("harmonic") is jaxcrawl.harmonic()
    assert lc.inner_utility("harmonic-approx") is jaxcrawl.harmonic_approx()
    assert lc.inner_utility("binary-epsilon") is jaxcrawl.binary(0.4)
    assert lc.inner_utility(LOG_UTILITY) is LOG_UTILITY
    p = jaxcrawl.synthetic(jax.random.key(2), 64)
    est = p.change_rate * 1.3
    blc = lc.inner_solve("binary-epsilon", p, est, 0.2)
    ref = jaxcrawl.binary_lambda_crawl(p.replace(change_rate=est), 0.2)
    np.testing.assert_allclose(blc.rate, ref.rate, rtol=rtol_for(ref.rate, 1e-12))
    assert float(jnp.min(blc.rate)) >= 0.2 * float(p.bandwidth) / 64 * (1 - rtol_for(ref.rate, 1e-12))
    learner = lc.lambda_learn_and_crawl(LOG_UTILITY, **llc_small["settings"])
    assert learner.name == "llc[log]"
    policy = learner.init(p).policy  # init solves for the initial estimate (K19 Alg. 4 line 4)
    mu = np.asarray(p.importance, np.float64)
    np.testing.assert_allclose(policy.rate, mu / mu.sum() * float(p.bandwidth), rtol=rtol_for(policy.rate, 1e-9))
    assert bool(policy.converged)


def test_learner_factories_validate_their_settings(instances):
    etc_learner = ec.explore_then_commit(**ec.etc_settings(instances["both"], float(ETC_NMAX)))
    cfg = etc_learner.config
    with pytest.raises(ValueError, match="estimator"):
        lc.online_learn_and_crawl("mle", config=cfg, windows_per_round=2)
    with pytest.raises(ValueError, match="windows_per_round"):
        lc.online_learn_and_crawl("sa", config=cfg, windows_per_round=0)
    with pytest.raises(ValueError, match="omega"):
        lc.online_learn_and_crawl("sam", config=cfg, windows_per_round=2, omega=0.0)
    with pytest.raises(ValueError, match="estimator"):
        ec.explore_then_commit(config=cfg, num_windows=2, rounds_per_window=1, estimator="naive")
    with pytest.raises(ValueError, match="min_rate"):
        etc_learner.init(l2c_instance(3), ec.ETCParams(0.0, 1.0))
    with pytest.raises(ValueError, match="tau"):
        ec.run_etc(jax.random.key(0), etc_learner, l2c_instance(3), [1e9])
    with pytest.raises(ValueError, match="history_capacity"):
        ec.phased_epsilon_greedy(config=cfg, windows_per_phase=1, num_phases=2, history_capacity=0)
    with pytest.raises(ValueError, match="clips"):
        ec.etc_grid_transform(etc_learner, [1.0], clips=[(2.0, 1.0)])


# ------------------------------------------------------------------------ slow versions
def avrachenkov_problem():
    """Avrachenkov et al. §5: N = 50 pages, 7 hot pages with 90% of the changes
    (Δ = 4.5/7, weight 2), the others Δ = 0.5/43 (weight 1), bandwidth B = 5."""
    hot = np.arange(50) < 7
    return CrawlProblem(np.where(hot, 2.0, 1.0), np.where(hot, 4.5 / 7, 0.5 / 43), 5.0)


@pytest.mark.slow
@pytest.mark.parametrize("estimator", ["sa", "sam", "lln"])
def test_online_resolving_approaches_azar_optimum(estimator):
    """Avrachenkov §5 / Fig. 6: re-solving Azar et al.'s problem every 50 observations per
    page drives the rates to the optimum for the true rates (SA, SAM closest; LLN, whose
    counts restart each round, within 2%)."""
    p = avrachenkov_problem()
    opt = np.asarray(jaxcrawl.binary_lambda_crawl(p).rate)
    f_star = float(jaxcrawl.binary_freshness(p, opt))
    learner = lc.online_learn_and_crawl(estimator, **lc.online_settings(p))
    info = jax.jit(jax.vmap(lambda k: sw.run_learner(k, learner, p, 20)[1]))(
        jax.random.split(jax.random.key(7), 4))
    assert int(np.sum(info.overflow)) == 0
    ratio = np.asarray(info.freshness)[:, -5:].mean() / f_star
    assert ratio > (0.98 if estimator == "lln" else 0.995)
    rates = np.asarray(info.rate)[:, -5:].mean((0, 1))
    tol = 0.25 if estimator == "lln" else 0.1
    assert np.allclose(rates[:7].mean(), opt[:7].mean(), rtol=tol)
    assert np.allclose(rates[7:].mean(), opt[7:].mean(), rtol=tol)


@pytest.mark.slow
def test_simulated_etc_matches_exact_expected_utility():
    """simulate_etc: the simulated utility of a whole ETC run equals App. H + eq. 4 + the
    Lemma 1 transient for the committed rates, in expectation over seeds (4 SE)."""
    p = l2c_instance(3)
    learner = ec.explore_then_commit(**ec.etc_settings(p, 220.0))
    cfg = config_for(p, None, 10.0, max_crawl_rate=10.0, requests=False)
    run = jax.jit(jax.vmap(lambda k: ec.simulate_etc(k, learner, p, 2, 20, cfg)[:2]))
    sim, exact = (np.asarray(a) for a in run(jax.random.split(jax.random.key(3), 256)))
    diff = sim - exact
    assert abs(diff.mean()) < Z * diff.std(ddof=1) / np.sqrt(diff.size)


@pytest.mark.slow
def test_llc_float32_converges():
    """The same LLC claim in float32 (the library's default precision)."""
    q = jaxcrawl.synthetic(jax.random.key(11), 2000)
    p = CrawlProblem(q.importance.astype(jnp.float32), q.change_rate.astype(jnp.float32),
                     jnp.float32(q.bandwidth), q.complete)
    learner = lc.lambda_learn_and_crawl(**lc.llc_settings(p))
    _, info = sw.run_learner(jax.random.key(12), learner, p, EPOCHS)
    opt = float(jaxcrawl.harmonic_cost(p, jaxcrawl.lambda_crawl(p)))
    assert int(np.sum(info.overflow)) == 0
    assert float(info.harmonic_cost[-1]) <= 1.02 * opt
