"""The observation-level sampler (jaxcrawl.simulate.observe_window) against the event-level
simulator, its use by the crawling learners, and compile counts.

The law tests, the compile counts and the learner comparisons are ``long`` (own step of
``.ci/run``); the default selection keeps the recorder equivalence and the overflow flags.

The law tests draw the same pages many times with each sampler and compare, by
two-sample tests at significance ALPHA (deterministic seeds: a failure is a difference in
law or a 1-in-1/ALPHA draw), the crawl gaps, the changed fraction per gap length, the
crawl and change-signal counts of completely observed pages, and the state carried across
windows.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from jaxcrawl import CrawlProblem, learners, synthetic
from jaxcrawl import simulate as sim
from jaxcrawl._src.observations import OBSERVATION, Observations, Observed
from jaxcrawl.learners import _history as lh
from jaxcrawl.learners import run_learner
from jaxcrawl.simulate._schedules import PERIODIC, POISSON, SIGNAL
from jaxcrawl.simulate._state import stationary_state

import helpers

ALPHA = 1e-4  # significance of every two-sample test below
COPIES = 6000  # draws of each page type per sampler
WINDOW = 1.5
NUM_WINDOWS = 2


def _problem():
    """Four page types, each repeated COPIES times: partially observed Poisson pages (slow and
    fast changing), a completely observed page crawled on signals, and one crawled as a
    Poisson process (BLCε crawls complete pages so)."""
    lam = np.array([0.7, 3.0, 2.0, 1.2])
    rho = np.array([1.1, 0.8, 0.0, 0.9])
    prob = np.array([0.0, 0.0, 0.6, 0.0])
    complete = np.array([False, False, True, True])
    kind = np.array([POISSON, POISSON, SIGNAL, POISSON])
    rep = lambda a: np.repeat(a, COPIES)  # noqa: E731
    problem = CrawlProblem(jnp.ones(4 * COPIES, jnp.float32), jnp.asarray(rep(lam), jnp.float32),
                           jnp.float32(4.0 * COPIES), jnp.asarray(rep(complete)))
    schedule = sim.Schedule(jnp.asarray(rep(kind), jnp.int32), jnp.asarray(rep(rho), jnp.float32),
                            jnp.asarray(rep(prob), jnp.float32), jnp.full(4 * COPIES, jnp.inf, jnp.float32),
                            jnp.zeros(4 * COPIES, jnp.float32))
    return problem, schedule, np.repeat(np.arange(4), COPIES)


@pytest.fixture(scope="module")
def draws():
    problem, schedule, ptype = _problem()
    state0 = stationary_state(jax.random.key(0), problem, schedule)
    # start half of the pages stale with a known time since the last crawl (carried state)
    state0 = state0._replace(since_crawl=state0.since_crawl.at[::2].set(0.4),
                             num_changes=state0.num_changes.at[::2].set(2))
    ev_cfg = sim.config_for(problem, schedule, WINDOW, requests=False)
    ob_cfg = sim.observe_config(problem, WINDOW, max_crawl_rate=schedule.rate + schedule.prob * problem.change_rate)

    @jax.jit  # the problem is an argument (a constant would be folded at compile time)
    def event(key, problem, schedule, state0):
        def body(state, k):
            state, win = sim.simulate_window(k, state, problem, schedule, ev_cfg)
            o = win.observations
            return state, (o.intervals, o.changed > 0, o.mask, win.num_crawls, win.num_changes, win.overflow)
        return jax.lax.scan(body, state0, jax.random.split(key, NUM_WINDOWS))

    @jax.jit
    def observe(key, problem, schedule, state0):
        def body(state, k):
            state, o = sim.observe_window(k, state, problem, schedule, ob_cfg)
            iv, ch, mk, lost = sim.padded_observations(o, ev_cfg.crawl_capacity)
            return state, (iv, ch > 0, mk, o.num_crawls, o.num_changes, o.overflow | lost)
        return jax.lax.scan(body, state0, jax.random.split(key, NUM_WINDOWS))

    out = {}
    for name, fn, seed in (("event", event, 1), ("observe", observe, 2)):
        state, per_window = fn(jax.random.key(seed), problem, schedule, state0)
        out[name] = (jax.tree_util.tree_map(np.asarray, state), [np.asarray(a) for a in per_window])
    return out, ptype


def _gaps(per_window, ptype, types, window=None, first=None):
    iv, ch, mk = per_window[:3]
    sel = np.isin(ptype, types)[None, :, None] & mk
    if window is not None:
        sel = sel & (np.arange(NUM_WINDOWS) == window)[:, None, None]
    if first is not None:
        sel = sel & ((np.arange(mk.shape[-1]) == 0) == first)[None, None, :]
    return iv[sel], ch[sel]


def _same_counts(a, b):
    """Chi-square two-sample test of two samples of counts (tail bins merged to >= 5 expected)."""
    top = int(max(a.max(), b.max()))
    ha = np.bincount(a, minlength=top + 1)
    hb = np.bincount(b, minlength=top + 1)
    keep = np.cumsum((ha + hb)[::-1])[::-1] >= 10
    cut = int(np.flatnonzero(keep)[-1])
    ta = np.append(ha[:cut], ha[cut:].sum())
    tb = np.append(hb[:cut], hb[cut:].sum())
    used = (ta + tb) > 0
    return stats.chi2_contingency(np.stack([ta[used], tb[used]]))[1]


@pytest.mark.long
def test_no_overflow_and_shapes(draws):
    out, _ = draws
    for name in ("event", "observe"):
        assert not out[name][1][5].any(), name


@pytest.mark.long
@pytest.mark.parametrize("types", [[0], [1]])
def test_gap_laws_match_the_event_simulator(draws, types):
    """Crawl intervals (KS), and changed fraction per interval length (χ² on the joint table
    of interval decile × changed), for first crawls (carried state) and later ones."""
    out, ptype = draws
    for first in (True, False):
        ia, ca = _gaps(out["event"][1], ptype, types, first=first)
        ib, cb = _gaps(out["observe"][1], ptype, types, first=first)
        assert min(ia.size, ib.size) > 1000
        assert stats.ks_2samp(ia, ib).pvalue > ALPHA
        edges = np.quantile(np.concatenate([ia, ib]), np.linspace(0, 1, 11)[1:-1])
        table = np.stack([np.bincount(np.digitize(i, edges) * 2 + c, minlength=20) for i, c in ((ia, ca), (ib, cb))])
        table = table[:, table.sum(0) > 0]  # (first crawls after a stale start always see a change)
        assert stats.chi2_contingency(table)[1] > ALPHA
    ib, cb = _gaps(out["observe"][1], ptype, types, first=False)
    lam = [0.7, 3.0][types[0]]
    expected = 1 - np.exp(-lam * ib)
    z = (cb.sum() - expected.sum()) / np.sqrt(np.sum(expected * (1 - expected)))
    assert abs(z) < stats.norm.isf(ALPHA / 2)


@pytest.mark.long
def test_crawl_and_signal_counts_match(draws):
    """Per page-window: crawls (every type) and change signals (complete pages), χ²."""
    out, ptype = draws
    ka, kb = out["event"][1][3], out["observe"][1][3]
    ua, ub = out["event"][1][4], out["observe"][1][4]
    for t in range(4):
        assert _same_counts(ka[:, ptype == t].ravel(), kb[:, ptype == t].ravel()) > ALPHA, t
    for t in (2, 3):
        assert _same_counts(ua[:, ptype == t].ravel(), ub[:, ptype == t].ravel()) > ALPHA, t
    # partially observed pages send no signals at the observation level
    assert np.all(ub[:, ptype < 2] == 0)


@pytest.mark.long
def test_carried_state_matches(draws):
    """The state after the windows: time since the last crawl (KS) and uncrawled changes (χ²)."""
    out, ptype = draws
    sa, sb = out["event"][0], out["observe"][0]
    for t in range(4):
        sel = ptype == t
        assert stats.ks_2samp(sa.since_crawl[sel], sb.since_crawl[sel]).pvalue > ALPHA, t
        assert _same_counts(sa.num_changes[sel], sb.num_changes[sel]) > ALPHA, t
    assert np.allclose(sa.time, sb.time)


_start = jax.jit(lh.start_epoch)
_record_window = jax.jit(lh.record_window)
_record_observed = jax.jit(lh.record_observed)
_padded = jax.jit(sim.padded_observations, static_argnums=1)


def test_record_observed_equals_record_window():
    """The flat recorder gives the same compressed history as the padded one (K19 Alg. 4's
    ring buffer, epoch columns and signals), with a ring small enough to wrap."""
    rng = np.random.RandomState(0)
    n, k, cap = 7, 6, 5
    hist_a = lh.empty_history(n, cap, 3, jnp.float32)
    hist_b = hist_a
    for epoch in range(4):
        hist_a = _start(hist_a, epoch)
        hist_b = _start(hist_b, epoch)
        cnt = rng.randint(0, k + 1, n)
        mask = np.arange(k)[None, :] < cnt[:, None]
        iv = np.where(mask, rng.exponential(0.5, (n, k)) + 1e-3, 0.0).astype(np.float32)
        ch = mask & (rng.uniform(size=(n, k)) < 0.5)
        signals = rng.randint(0, 4, n)
        obs = Observations(jnp.asarray(iv), jnp.asarray(ch, jnp.float32), jnp.asarray(mask),
                               jnp.asarray(ch, jnp.int32), jnp.full((n, k), jnp.inf))
        hist_a = _record_window(hist_a, obs, jnp.asarray(signals), epoch)
        pool = 40
        page = np.repeat(np.arange(n), cnt)
        flat = lambda a, fill: np.concatenate([a[mask], np.full(pool - cnt.sum(), fill)])  # noqa: E731
        observed = Observed(
            page=jnp.asarray(np.concatenate([page, np.full(pool - cnt.sum(), n)]), jnp.int32),
            interval=jnp.asarray(flat(iv, 0.0), jnp.float32), changed=jnp.asarray(flat(ch, False)),
            valid=jnp.asarray(np.arange(pool) < cnt.sum()),
            rank=jnp.asarray(flat(np.broadcast_to(np.arange(k), (n, k)), 0), jnp.int32),
            num_crawls=jnp.asarray(cnt, jnp.int32), num_changes=jnp.asarray(signals, jnp.int32),
            partial=jnp.ones(n, bool), overflow=jnp.zeros(n, bool), fresh_time=jnp.zeros(n))
        hist_b = _record_observed(hist_b, observed, epoch)
        helpers.assert_tree_allclose(hist_b, hist_a, rtol=1e-6, atol=1e-6)
        # padded_observations inverts the flattening
        piv, pch, pmk, lost = _padded(observed, k)
        assert np.array_equal(np.asarray(pmk), mask) and not np.any(np.asarray(lost))
        np.testing.assert_allclose(np.asarray(piv), iv)
        np.testing.assert_array_equal(np.asarray(pch) > 0, ch)
    assert np.any(np.asarray(hist_a.dropped_epoch) >= 0)  # the ring wrapped


def test_unsupported_and_capacity_overflows_are_flagged():
    """Periodic pages are not simulated at the observation level, and a pool too small for
    the crawls: both flagged, never silent."""
    problem = CrawlProblem(jnp.ones(4), jnp.full(4, 1.0), jnp.float32(40.0))
    schedule = sim.poisson_schedule(jnp.full(4, 10.0))
    schedule = schedule._replace(kind=schedule.kind.at[0].set(PERIODIC), period=schedule.period.at[0].set(0.5))
    cfg = sim.ObserveConfig(window=1.0, pool_capacity=4)
    state, obs = jax.jit(lambda k: sim.observe_window(k, sim.init_state(problem), problem, schedule, cfg))(
        jax.random.key(0))
    over = np.asarray(obs.overflow)
    assert over[0] and np.asarray(state.num_changes)[0] == 0
    assert over[1:].any()  # about 30 crawls in 4 slots
    with pytest.raises(ValueError, match="window"):
        sim.ObserveConfig(window=0.0, pool_capacity=4)
    with pytest.raises(ValueError, match="pool_capacity"):
        sim.ObserveConfig(window=1.0, pool_capacity=0)
    with pytest.raises(ValueError, match="max_crawl_rate"):
        sim.observe_config(problem, 1.0, max_crawl_rate=-1.0)


# ---------------------------------------------------------------------- learners
def _small_llc(sampler, n=300):
    problem = synthetic(jax.random.key(3), n)
    settings = learners.llc_settings(problem, "harmonic", events_per_window=48.0, sampler=sampler)
    return problem, learners.lambda_learn_and_crawl("harmonic", **settings)


@pytest.mark.long
def test_learners_choose_the_sampler_and_say_so():
    """llc_settings / phased_settings / online_settings pick the observation level unless
    told 'event'; info.sampler reports it."""
    problem = synthetic(jax.random.key(3), 200)
    assert learners.llc_settings(problem, "harmonic")["observe"] is not None
    assert learners.llc_settings(problem, "harmonic", sampler="event")["observe"] is None
    assert learners.phased_settings(problem, 2.0, 3)["observe"] is not None
    assert learners.online_settings(problem)["observe"] is not None
    with pytest.raises(ValueError, match="sampler"):
        learners.llc_settings(problem, "harmonic", sampler="fast")
    settings = learners.llc_settings(problem, "harmonic")
    wrong = settings | dict(observe=sim.ObserveConfig(window=settings["observe"].window / 2, pool_capacity=8))
    with pytest.raises(ValueError, match="observe.window"):
        learners.lambda_learn_and_crawl("harmonic", **wrong)


def _compiles_once(learner, problem, params=None):
    """Two runs of a learner (other keys): the driver compiles once, the second run not."""
    with helpers.count_compiles() as log:
        _, info = run_learner(jax.random.key(0), learner, problem, 3, params)
        jax.block_until_ready(info)
        first = log.compiles("run_learner")
        _, info = run_learner(jax.random.key(1), learner, problem, 3, params)
        jax.block_until_ready(info)
    assert first == 1 and log.compiles("run_learner") == 1
    return info


@pytest.mark.long
def test_llc_compiles_once_and_reports_the_observation_sampler():
    problem, learner = _small_llc("auto")
    info = _compiles_once(learner, problem)
    assert np.all(np.asarray(info.sampler) == OBSERVATION)
    assert int(np.asarray(info.overflow).sum()) == 0


@pytest.mark.long
def test_phased_eps_greedy_compiles_once():
    problem = synthetic(jax.random.key(4), 200)
    settings = learners.phased_settings(problem, 3.0, 3)
    info = _compiles_once(learners.phased_epsilon_greedy(**settings), problem)
    assert np.all(np.asarray(info.sampler) == OBSERVATION)


@pytest.mark.long
def test_online_loop_compiles_once():
    problem = synthetic(jax.random.key(4), 200)
    settings = learners.online_settings(problem, observations_per_round=5.0)
    info = _compiles_once(learners.online_learn_and_crawl("sa", **settings), problem)
    assert np.all(np.asarray(info.sampler) == OBSERVATION)
    assert int(np.asarray(info.overflow).sum()) == 0


@pytest.mark.long
def test_learners_end_at_the_same_cost_with_either_sampler():
    """LLC (K19 Alg. 4), phased ε-greedy (L2C §6.2) and the online SA loop (Avrachenkov §5)
    run with each sampler over many seeds: the mean final costs agree within 4.5 standard
    errors of their difference (Welch), and both runs have no overflow."""
    seeds = 24
    keys = jax.random.split(jax.random.key(11), seeds)
    problem = synthetic(jax.random.key(3), 400)

    def compare(build, metric):
        means = []
        finals = []
        for sampler in ("event", "observation"):
            learner, steps = build(sampler)
            run = jax.jit(jax.vmap(lambda k: run_learner(k, learner, problem, steps)[1]))
            info = jax.tree_util.tree_map(np.asarray, run(keys))
            assert int(info.overflow.sum()) == 0
            assert np.all(info.sampler == (sampler == "observation"))
            finals.append(np.asarray(metric(info), np.float64))
            means.append(finals[-1].mean())
        a, b = finals
        se = np.sqrt(a.var(ddof=1) / a.size + b.var(ddof=1) / b.size)
        assert abs(a.mean() - b.mean()) <= 4.5 * se + 1e-6 * abs(a.mean()), (a.mean(), b.mean(), se)
        return means

    compare(lambda s: (learners.lambda_learn_and_crawl("harmonic", **learners.llc_settings(
        problem, "harmonic", events_per_window=48.0, sampler=s)), 4), lambda i: i.harmonic_cost[:, -1])
    compare(lambda s: (learners.phased_epsilon_greedy(**learners.phased_settings(problem, 2.0, 4, sampler=s)), 4),
            lambda i: i.freshness[:, -1])
    compare(lambda s: (learners.online_learn_and_crawl("sa", **learners.online_settings(
        problem, observations_per_round=10.0, sampler=s)), 3), lambda i: i.freshness[:, -1])


@pytest.mark.long
def test_reproduce_quick_compiles_each_program_once(tmp_path):
    """`jaxcrawl reproduce neurips19_fig3 --quick`: the experiment's runner (three learners
    over the episodes, one program) compiles once, and no function other than JAX's own
    eager primitives (which compile per shape) compiles twice (jax.monitoring events)."""
    import collections

    from jaxcrawl.cli import main

    with helpers.count_compiles() as log:
        assert main(["reproduce", "neurips19_fig3", "--quick", "--out", str(tmp_path), "--no-progress"]) == 0
    assert log.compiles("one") == 1
    counts = collections.Counter(log.names())
    eager = {"threefry2x32", "random_bits", "random_seed", "random_wrap", "random_unwrap", "iota"}
    repeated = {name: c for name, c in counts.items()
                if c > 1 and not hasattr(jax.lax, f"{name}_p") and name not in eager}
    assert not repeated, repeated
