"""Crawl timetables (jaxcrawl.timetable): counts within ±1 over any window, periodic gaps,
the crawl generator, phases and the periodic-cost closed forms.
The simulator's confirmation that the timetable beats Poisson
crawling at the same rates is in ``tests/test_simulate.py`` (it shares that file's
compiled Monte-Carlo program).

Times are compared up to the float resolution of the times themselves (a few units in
the last place of the largest time, :func:`time_tol`): the lane's float dtype (float32 by
default, float64 in the x64 lane) decides how tight every check is.
"""
import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.integrate
import scipy.special
from hypothesis import given, settings
from hypothesis import strategies as st

import jaxcrawl
from jaxcrawl import CrawlProblem
from jaxcrawl import timetable as S
from jaxcrawl._src.special import ein

EULER_GAMMA = 0.5772156649015329


def float_dtype():
    """The float dtype arrays get by default in this lane (at call time: x64 tests run
    inside ``jax.enable_x64``)."""
    return np.dtype(jnp.result_type(float))


def eps():
    return float(np.finfo(float_dtype()).eps)


def time_tol(t_max, ulps=8):
    """``ulps`` units in the last place of ``t_max`` in the lane's float dtype."""
    return ulps * float(np.spacing(np.asarray(abs(t_max), float_dtype())))


def six_orders_rates(rng, n, lo=-3.0, hi=3.0):
    """Rates log-uniform over six orders of magnitude, 1e-3 .. 1e3 per unit time."""
    return 10.0 ** rng.uniform(lo, hi, n)


# One compiled timetable for (almost) every test: the rates padded with never-crawled
# pages (rate 0, no crawls) to N_PAD pages and a fixed capacity.  The crawls are exactly
# those of the unpadded timetable: golden phases depend on the page index only, and the
# padding pages come last.  The default capacity (size buckets) is tested on its own.
N_PAD = 1024
CAPACITY = 1 << 16


def pad(x):
    x = np.asarray(x)
    assert x.shape[0] <= N_PAD
    return np.concatenate([x, np.zeros(N_PAD - x.shape[0], x.dtype)])


def padded_phase(phase):
    return phase if isinstance(phase, str) else pad(phase)


def timetable(rate, horizon, *, start=0.0, phase="golden"):
    """``S.timetable(rate, horizon, ...)`` through the shared compiled program."""
    tt = S.timetable(pad(rate), horizon, start=start, phase=padded_phase(phase),
                     capacity=CAPACITY)
    assert int(tt.overflow) == 0
    return tt


# jitted entry points: one compilation per shape instead of one per operation and shape
crawl_counts = jax.jit(S._crawl_counts)
golden_phase = jax.jit(S.golden_phase, static_argnames=("num_pages", "dtype"))
periodic_harmonic_cost = jax.jit(S.periodic_harmonic_cost, static_argnames="per_page")
periodic_binary_cost = jax.jit(S.periodic_binary_cost, static_argnames="per_page")


def per_page_times(tt, n):
    mask = np.asarray(tt.mask)
    t = np.asarray(tt.time)[mask]
    p = np.asarray(tt.page)[mask]
    return [t[p == i] for i in range(n)], t, p


def window_counts(times_by_page, a, b):
    return np.array([np.searchsorted(ti, b, "left") - np.searchsorted(ti, a, "left")
                     for ti in times_by_page])


# ----------------------------------------------------------------- counts and gaps
@pytest.mark.parametrize("seed", range(3))
def test_counts_within_one_over_random_windows_six_orders(seed):
    rng = np.random.default_rng(seed)
    n, horizon, start = 80, 4.0, float(rng.uniform(-5, 5))
    rate = six_orders_rates(rng, n)
    tt = timetable(rate, horizon, start=start)
    times, t_all, _ = per_page_times(tt, n)
    assert np.all(np.diff(t_all) >= 0)  # sorted
    assert t_all.min() >= start and t_all.max() < start + horizon
    worst = 0.0
    for _ in range(300):
        a, b = np.sort(rng.uniform(start, start + horizon, 2))
        if rng.random() < 0.3:  # also tiny windows
            b = a + (b - a) * 1e-4
        dev = window_counts(times, a, b) - rate * (b - a)
        assert np.all(np.abs(dev) < 1.0), (a, b, np.abs(dev).max())
        worst = max(worst, np.abs(dev).max())
    assert worst > 0.5  # the bound is attained, not vacuous
    # the exact count formula agrees with the timetable on whole windows
    for _ in range(20):
        a, b = np.sort(rng.uniform(start, start + horizon, 2))
        np.testing.assert_array_equal(
            window_counts(times, a, b),
            np.asarray(crawl_counts(rate, S.golden_phase(n), a, b)))


def test_counts_within_one_float32_up_to_time_resolution():
    rng = np.random.default_rng(7)
    n, horizon = 60, 3.0
    rate = six_orders_rates(rng, n).astype(np.float32)
    tt = timetable(rate, horizon, start=1.0)
    assert tt.time.dtype == jnp.float32
    times, _, _ = per_page_times(tt, n)
    ulp = np.spacing(np.float32(4.0))
    for _ in range(200):
        a, b = np.sort(rng.uniform(1.0, 4.0, 2)).astype(np.float32)
        dev = window_counts(times, a, b) - rate.astype(np.float64) * (float(b) - float(a))
        # an event may move across an edge by the rounding of the times
        assert np.all(np.abs(dev) < 1.0 + rate * 8 * ulp)
    for i in range(n):
        if len(times[i]) > 1:
            g = np.diff(times[i].astype(np.float64))
            assert np.all(np.abs(g - 1.0 / rate[i]) <= 8 * ulp), i


@pytest.mark.parametrize("seed", range(2))
def test_gaps_are_periodic(seed):
    rng = np.random.default_rng(seed)
    n = 50
    rate = six_orders_rates(rng, n)
    tt = timetable(rate, 10.0, start=2.5)
    times, _, _ = per_page_times(tt, n)
    tol = time_tol(12.5)  # the times' own resolution
    for i in range(n):
        ti = times[i].astype(np.float64)
        if len(ti) > 1:
            np.testing.assert_allclose(np.diff(ti), 1.0 / rate[i], rtol=0, atol=tol)
        # the first crawl is within one period of the start, the last within one of the end
        if len(ti):
            assert ti[0] - 2.5 < 1.0 / rate[i] + tol
            assert 12.5 - ti[-1] <= 1.0 / rate[i] + tol


def test_consecutive_windows_join_seamlessly():
    rng = np.random.default_rng(3)
    n = 40
    rate = six_orders_rates(rng, n, -1, 2)
    whole = timetable(rate, 2.0, start=0.0)
    a = timetable(rate, 1.0, start=0.0)
    b = timetable(rate, 1.0, start=1.0)
    m = lambda tt: (np.asarray(tt.time)[np.asarray(tt.mask)], np.asarray(tt.page)[np.asarray(tt.mask)])  # noqa: E731
    (tw, pw), (ta, pa), (tb, pb) = m(whole), m(a), m(b)
    np.testing.assert_array_equal(np.concatenate([pa, pb]), pw)
    np.testing.assert_allclose(np.concatenate([ta, tb]), tw, rtol=0, atol=time_tol(2.0))


def test_zero_rates_padding_overflow_and_errors():
    rate = np.array([0.0, 2.0, 0.0, 5.0])
    tt = S.timetable(rate, 1.0, phase="zero")
    mask = np.asarray(tt.mask)
    assert int(tt.num_crawls) == 7 and mask.sum() == 7
    assert set(np.asarray(tt.page)[mask]) == {1, 3}
    assert np.all(np.asarray(tt.page)[~mask] == -1) and np.all(np.isinf(np.asarray(tt.time)[~mask]))
    # the default capacity (a size bucket) and a static one give the same crawls
    assert len(tt.time) < CAPACITY
    padded = timetable(rate, 1.0, phase="zero")
    pm = np.asarray(padded.mask)
    np.testing.assert_array_equal(np.asarray(padded.page)[pm], np.asarray(tt.page)[mask])
    np.testing.assert_array_equal(np.asarray(padded.time)[pm], np.asarray(tt.time)[mask])
    with pytest.warns(RuntimeWarning, match="did not fit"):
        small = S.timetable(rate, 1.0, phase="zero", capacity=4)
    assert int(small.overflow) == 3
    with pytest.raises(ValueError, match="rate"):
        S.timetable(np.array([1.0, -1.0]), 1.0)
    with pytest.raises(ValueError, match="phase"):
        S.timetable(np.array([1.0, 1.0]), 1.0, phase=np.array([0.0, 1.0]))
    with pytest.raises(ValueError, match="horizon"):
        S.timetable(np.array([1.0]), 0.0)
    with pytest.raises(ValueError, match="capacity"):
        jax.jit(lambda r: S.timetable(r, 1.0))(jnp.ones(3))


def test_timetable_jit_and_vmap_with_static_capacity():
    rng = np.random.default_rng(0)
    rates = six_orders_rates(rng, 3 * 20, -1, 1.5).reshape(3, 20)
    f = jax.jit(jax.vmap(lambda r: S.timetable(r, 1.0, phase=S.golden_phase(20), capacity=1024)))
    out = f(jnp.asarray(rates))
    for k in range(3):
        ref = timetable(rates[k], 1.0)
        m, rm = np.asarray(out.mask[k]), np.asarray(ref.mask)
        assert int(out.overflow[k]) == 0 and m.sum() == rm.sum()
        np.testing.assert_array_equal(np.asarray(out.page[k])[m], np.asarray(ref.page)[rm])
        np.testing.assert_array_equal(np.asarray(out.time[k])[m], np.asarray(ref.time)[rm])


@pytest.fixture(scope="module")
def lc_plan():
    """A synthetic NeurIPS-19-like problem (4% complete pages) and its LambdaCrawl policy."""
    prob = jaxcrawl.synthetic(jax.random.key(0), N_PAD, dtype=float_dtype())
    return prob, jaxcrawl.lambda_crawl(prob)


def test_timetable_of_a_policy_leaves_signal_pages_out(lc_plan):
    p, pol = lc_plan
    comp = np.asarray(p.complete) != 0
    assert comp.any()
    tt = S.timetable(pol, 5.0, capacity=CAPACITY)
    assert int(tt.overflow) == 0
    pages = set(np.asarray(tt.page)[np.asarray(tt.mask)].tolist())
    assert not (pages & set(np.flatnonzero(comp).tolist()))
    tt2 = S.timetable(pol, 5.0, include_signal_pages=True, capacity=CAPACITY)
    assert int(tt2.num_crawls) > int(tt.num_crawls)


# ----------------------------------------------------------------- generator
@pytest.mark.parametrize("phase", ["golden", "zero"])
def test_generator_batches_concatenate_to_the_timetable(phase):
    rng = np.random.default_rng(11)
    n = 60
    rate = six_orders_rates(rng, n, -2, 2)
    if phase == "zero":  # many exact ties: broken by page index in both
        rate[::3] = 1.0
        rate[1::3] = 4.0
    start, horizon = 0.7, 3.0
    tt = timetable(rate, horizon, start=start, phase=phase)
    m = np.asarray(tt.mask)
    t_ref, p_ref = np.asarray(tt.time)[m], np.asarray(tt.page)[m]
    rate, phase = pad(rate), padded_phase(phase)
    state = S.init_crawler(rate, phase, start)
    ts, ps = [], []
    while sum(len(x) for x in ts) < len(t_ref):
        state, batch = S.next_crawls(state, rate, phase, num_crawls=97)
        bm = np.asarray(batch.mask)
        assert bm.all() and int(batch.overflow) == 0
        ts.append(np.asarray(batch.time)[bm])
        ps.append(np.asarray(batch.page)[bm])
        assert float(state.time) == ts[-1][-1]
    t_gen = np.concatenate(ts)[: len(t_ref)]
    p_gen = np.concatenate(ps)[: len(t_ref)]
    np.testing.assert_array_equal(p_gen, p_ref)
    np.testing.assert_allclose(t_gen, t_ref, rtol=0, atol=time_tol(start + horizon))


def test_generator_under_scan_matches_python_loop():
    rng = np.random.default_rng(5)
    n = 25
    rate = jnp.asarray(pad(six_orders_rates(rng, n, -1, 1)))
    phase = S.golden_phase(N_PAD)
    state0 = S.init_crawler(rate, phase, 0.0)

    def step(s, _):
        s, b = S.next_crawls(s, rate, phase, num_crawls=97)
        return s, (b.time, b.page)

    _, (times, pages) = jax.lax.scan(step, state0, None, length=6)
    s = state0
    for k in range(6):
        s, b = S.next_crawls(s, rate, phase, num_crawls=97)
        np.testing.assert_array_equal(np.asarray(b.page), np.asarray(pages[k]))
        np.testing.assert_allclose(np.asarray(b.time), np.asarray(times[k]), rtol=1e-15)


def test_generator_all_zero_rates_is_empty():
    state = S.init_crawler(jnp.zeros(4), "zero", 0.0)
    state, b = S.next_crawls(state, jnp.zeros(4), "zero", num_crawls=5)
    assert not np.asarray(b.mask).any()


# ----------------------------------------------------------------- phases
def circular_discrepancy(points):
    """max over arcs of |#points in the arc - m * length| (points on the unit circle)."""
    s = np.sort(points)
    d = np.arange(len(s)) / len(s) - s
    return len(s) * (d.max() - d.min())


def test_golden_phases_spread_equal_rate_pages_evenly():
    # the phases are the 32-bit fixed-point sequence kept to the dtype's resolution
    # 2^-bits: exact in float64 (bits = 32), truncated to 24 bits in float32
    bits = min(32, np.finfo(float_dtype()).nmant + 1)
    for n in (10, 100, 1000, 10000):
        ph = np.asarray(golden_phase(n))
        assert np.all((ph >= 0) & (ph < 1))
        # three-distance theorem: the gaps take at most three values (exactly, in units
        # of 2^-bits, when bits = 32; each within one unit when the phases are truncated)
        gaps = np.diff(np.concatenate([np.sort(ph), [np.sort(ph)[0] + 1]]).astype(np.float64))
        units = np.unique(np.round(gaps * 2.0 ** bits).astype(np.int64))
        clusters = np.split(units, np.flatnonzero(np.diff(units) > 1) + 1)
        assert len(clusters) <= 3
        assert all(c[-1] - c[0] <= (0 if bits == 32 else 1) for c in clusters)
        assert circular_discrepancy(ph) <= 1 + 0.5 * math.log(n)
    # consequence: the aggregate load of 1000 equal-rate pages over any window is within
    # 1 + log(n)/2 + 1 of its mean
    n, rho = 1000, 3.0
    tt = timetable(np.full(n, rho), 2.0)
    t = np.asarray(tt.time)[np.asarray(tt.mask)]
    rng = np.random.default_rng(0)
    for _ in range(200):
        a, b = np.sort(rng.uniform(0, 2, 2))
        c = np.searchsorted(t, b) - np.searchsorted(t, a)
        assert abs(c - n * rho * (b - a)) <= 2 + 0.5 * math.log(n)


def test_golden_phases_within_groups():
    rng = np.random.default_rng(2)
    group = rng.integers(0, 7, 3000)
    ph = np.asarray(golden_phase(3000, group=jnp.asarray(group)))
    golden = (math.sqrt(5) - 1) / 2
    for g in range(7):
        sel = ph[group == g]  # in page order: ranks 0, 1, 2, ... within the group
        np.testing.assert_allclose(sel, np.mod(np.arange(1, len(sel) + 1) * golden, 1.0), atol=1e-6)
        assert circular_discrepancy(sel) <= 1 + 0.5 * math.log(len(sel))


def test_hashed_phase_is_stable_and_uniform():
    keys = np.arange(20000, dtype=np.int64) * 7919 + 3
    ph = np.asarray(S.hashed_phase(keys))
    assert np.all((ph >= 0) & (ph < 1))
    # depends on the key only, not on the other pages
    np.testing.assert_array_equal(np.asarray(S.hashed_phase(keys[5000:6000])), ph[5000:6000])
    # Kolmogorov-Smirnov at the 0.1% level: sup |ECDF - x| < 1.95 / sqrt(n)
    s = np.sort(ph)
    n = len(s)
    ks = max(np.max(np.arange(1, n + 1) / n - s), np.max(s - np.arange(n) / n))
    assert ks < 1.95 / math.sqrt(n)
    assert not np.allclose(np.asarray(S.hashed_phase(keys, seed=1)), ph)


# ----------------------------------------------------------------- closed forms
def ein_ref(u):
    """Ein(u) in float64: its Taylor series sum (-1)^{k+1} u^k / (k k!) below 1 (summed
    exactly with math.fsum), else E1(u) + log(u) + gamma (no cancellation there)."""
    u = np.asarray(u, np.float64)
    us = np.minimum(u, 1.0)
    series = np.array([math.fsum((-1.0) ** (k + 1) * x ** k / (k * math.factorial(k))
                                 for k in range(1, 30)) for x in np.ravel(us)]).reshape(u.shape)
    ul = np.maximum(u, 1.0)
    return np.where(u < 1.0, series, scipy.special.exp1(ul) + np.log(ul) + EULER_GAMMA)


def test_ein_is_expected_harmonic_number_of_a_poisson_count():
    k = np.arange(0, 400)
    harmonic = np.concatenate([[0.0], np.cumsum(1.0 / np.arange(1, 400))])
    for m in [1e-6, 1e-3, 0.1, 0.7, 1.9, 2.0, 2.1, 5.0, 30.0, 150.0]:
        pmf = np.exp(k * np.log(m) - m - scipy.special.gammaln(k + 1))
        expected = np.sum(pmf * harmonic)
        # the float64 pmf sum is itself good to ~1e-13 (log-pmf roundings at large m)
        np.testing.assert_allclose(float(ein(m)), expected, rtol=max(16 * eps(), 1e-13))
        np.testing.assert_allclose(float(ein(m)), ein_ref(m), rtol=16 * eps())


@pytest.mark.parametrize("u", [1e-5, 0.01, 0.5, 1.99, 2.01, 7.0, 60.0, 1e4])
def test_periodic_harmonic_closed_form_is_the_time_average(u):
    # time average of E[H(Poisson(lam t))] = Ein(lam t) over one period 1/rho, by quadrature
    lam, rho = u, 1.0
    avg = scipy.integrate.quad(lambda t: float(ein_ref(lam * t)), 0, 1 / rho, limit=200,
                               epsabs=0, epsrel=1e-13)[0] * rho
    p = CrawlProblem(np.array([1.0]), np.array([lam]), 1.0)
    lam_rounded = float(np.asarray(p.change_rate)[0])  # u as the lane's dtype holds it
    rtol = max(32 * eps(), 1e-12) + 2 * abs(lam_rounded - lam) / lam  # 1e-12: quadrature
    np.testing.assert_allclose(float(periodic_harmonic_cost(p, np.array([rho]))), avg,
                               rtol=rtol)
    stale = scipy.integrate.quad(lambda t: -math.expm1(-lam * t), 0, 1 / rho,
                                 epsabs=0, epsrel=1e-13)[0] * rho
    np.testing.assert_allclose(float(periodic_binary_cost(p, np.array([rho]))), stale,
                               rtol=rtol)


def test_periodic_costs_never_exceed_poisson():
    u = np.logspace(-6, 6, 241)
    p = CrawlProblem(np.ones_like(u), u, 1.0)
    u = np.asarray(p.change_rate, np.float64)  # as the lane's dtype holds it
    rate = np.ones_like(u)
    ph = np.asarray(periodic_harmonic_cost(p, rate, per_page=True), np.float64)
    pb = np.asarray(periodic_binary_cost(p, rate, per_page=True), np.float64)
    qh = np.log1p(u)  # NeurIPS-19 Prop. 1
    qb = u / (1 + u)  # NeurIPS-19 supplement eq. 12
    # never larger (the gap closes to O(1/u^2) for binary at large u: up to rounding)
    tol = 1 + 4 * eps()
    assert np.all(ph <= qh * tol) and np.all(pb <= qb * tol)
    # small u: both halve (periodic ~ u/2 vs Poisson ~ u); large u: harmonic gap -> 1 - gamma
    np.testing.assert_allclose(ph[:5] / qh[:5], 0.5, rtol=1e-5)
    np.testing.assert_allclose(qh[-1] - ph[-1], 1 - EULER_GAMMA, rtol=1e-4)


@pytest.mark.x64
def test_periodic_costs_are_accurate_in_float32():
    """float32 costs within a few float32 ulps of the float64 ones over 12 orders of u."""
    u = np.logspace(-6, 6, 241)
    p = CrawlProblem(np.ones_like(u), u, 1.0)
    rate = np.ones_like(u)
    ph = np.asarray(periodic_harmonic_cost(p, rate, per_page=True))
    pb = np.asarray(periodic_binary_cost(p, rate, per_page=True))
    assert ph.dtype == np.float64
    p32 = CrawlProblem(np.ones_like(u, np.float32), u.astype(np.float32), 1.0)
    ph32 = np.asarray(periodic_harmonic_cost(p32, np.ones_like(u, np.float32), per_page=True))
    pb32 = np.asarray(periodic_binary_cost(p32, np.ones_like(u, np.float32), per_page=True))
    np.testing.assert_allclose(ph32, ph, rtol=2e-6)
    np.testing.assert_allclose(pb32, pb, rtol=2e-6)


def test_periodic_cost_gain_on_lambda_crawl_rates(lc_plan):
    """Same rates, periodic instead of Poisson: the harmonic and binary gains (reported)."""
    prob, pol = lc_plan
    poisson_h = float(jaxcrawl.harmonic_cost(prob, pol))
    periodic_h = float(S.periodic_harmonic_cost(prob, pol))
    poisson_b = float(jaxcrawl.binary_cost(prob, pol))
    periodic_b = float(S.periodic_binary_cost(prob, pol))
    assert periodic_h < poisson_h and periodic_b < poisson_b
    # signal-crawled pages keep their cost: the gain is all on the timetabled pages
    inc = np.asarray(prob.complete) == 0
    gain_pages = (np.asarray(jaxcrawl.harmonic_cost(prob, pol, per_page=True))
                  - np.asarray(S.periodic_harmonic_cost(prob, pol, per_page=True)))
    assert np.all(gain_pages[~inc] == 0) and np.all(gain_pages[inc] >= 0)
    print(f"\nharmonic: Poisson {poisson_h:.4f} -> periodic {periodic_h:.4f} "
          f"({100 * (1 - periodic_h / poisson_h):.1f}% lower); binary: Poisson {poisson_b:.4f} "
          f"-> periodic {periodic_b:.4f} ({100 * (1 - periodic_b / poisson_b):.1f}% lower)")


# ----------------------------------------------------------------- property test
@settings(max_examples=40, deadline=None)
@given(
    log_rates=st.lists(st.floats(-3, 3), min_size=8, max_size=8),
    phases=st.lists(st.floats(0, 0.999999), min_size=8, max_size=8),
    start=st.floats(-100, 100),
    a=st.floats(0, 1),
    length=st.floats(0, 1),
)
def test_property_counts_within_one(log_rates, phases, start, a, length):
    rate = 10.0 ** np.asarray(log_rates)
    phase = np.asarray(phases)
    horizon = 2.0
    tt = timetable(rate, horizon, start=start, phase=phase)
    times, _, _ = per_page_times(tt, 8)
    lo = start + a * horizon
    hi = lo + length * (start + horizon - lo)
    dev = window_counts(times, lo, hi) - rate * (hi - lo)
    # a crawl may cross an edge by the rounding of its time (~ eps |t|); |dev| < 1 exactly,
    # but 1 - rate * (hi - lo) rounds to 1.0 when the window holds a crawl at its start and
    # is far shorter than the period (<=, not <)
    slack = 16 * eps() * rate * (abs(start) + horizon)
    assert np.all(np.abs(dev) <= 1.0 + slack)
    formula = np.asarray(crawl_counts(rate, phase, lo, hi))
    assert np.all(np.abs(formula - rate * (hi - lo)) <= 1.0 + slack)


# ----------------------------------------------------------------- the CLI
@pytest.mark.x64  # the CLI's --x64 times against the library's float64 timetable
def test_cli_schedule_roundtrip(tmp_path, capsys):
    from jaxcrawl.cli import main

    rng = np.random.default_rng(0)
    n = 40
    rate = six_orders_rates(rng, n, -2, 1.5)
    prob = np.where(np.arange(n) % 10 == 0, 0.5, 0.0)  # every 10th page is signal-crawled
    plan = tmp_path / "plan.csv"
    plan.write_text("page_id,rate,prob\n" + "".join(
        f"url{i},{float(rate[i])!r},{float(prob[i])!r}\n" for i in range(n)))
    out = tmp_path / "tt.csv"
    assert main(["schedule", "-p", str(plan), "-o", str(out), "--horizon", "3", "--start", "1",
                 "--x64"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    rows = np.genfromtxt(out, delimiter=",", names=True, dtype=None, encoding=None)
    t, pid = rows["time"], rows["page_id"]
    assert np.all(np.diff(t) >= 0) and t.min() >= 1 and t.max() < 4
    assert summary["num_crawls"] == len(t) and summary["num_signal_pages_left_out"] == 4
    assert summary["max_count_deviation"] < 1
    idx = np.array([int(s[3:]) for s in pid])
    assert not np.any(idx % 10 == 0)
    counts = np.bincount(idx, minlength=n)
    timetabled = np.arange(n) % 10 != 0
    assert np.all(np.abs(counts[timetabled] - 3 * rate[timetabled]) < 1)
    # the written times are the library's timetable (golden phases by row order)
    ref = S.timetable(np.where(timetabled, rate, 0.0), 3.0, start=1.0)
    np.testing.assert_allclose(t, np.asarray(ref.time)[np.asarray(ref.mask)], rtol=1e-15)
    # hashed phases: a page's times do not depend on the other rows (here: on its row;
    # hashed_phase's own test removes rows)
    out2, plan2 = tmp_path / "tt2.csv", tmp_path / "plan2.csv"
    plan2.write_text("page_id,rate,prob\n" + "".join(
        f"url{i},{float(rate[i])!r},{float(prob[i])!r}\n" for i in reversed(range(n))))
    assert main(["schedule", "-p", str(plan), "-o", str(out), "--horizon", "3", "--phase", "hash",
                 "--x64"]) == 0
    assert main(["schedule", "-p", str(plan2), "-o", str(out2), "--horizon", "3", "--phase", "hash",
                 "--x64"]) == 0
    capsys.readouterr()
    a = np.genfromtxt(out, delimiter=",", names=True, dtype=None, encoding=None)
    b = np.genfromtxt(out2, delimiter=",", names=True, dtype=None, encoding=None)
    assert len(a) == len(b)
    for k in range(1, n, 3):
        np.testing.assert_array_equal(a["time"][a["page_id"] == f"url{k}"],
                                      b["time"][b["page_id"] == f"url{k}"])


@pytest.mark.parametrize("text,msg", [
    ("page,rate,prob\n", ":1: header"),
    ("page_id,rate,prob\na,1\n", ":2: expected 3 fields"),
    ("page_id,rate,prob\na,1,0\nb,-1,0\n", ":3: rate must be finite and >= 0"),
    ("page_id,rate,prob\na,x,0\n", ":2: rate 'x' is not a number"),
    ("page_id,rate,prob\na,1,2\n", ":2: prob must be in"),
    ("page_id,rate,prob\n", "no pages"),
])
def test_cli_schedule_malformed_plan(tmp_path, capsys, text, msg):
    from jaxcrawl.cli import main

    plan = tmp_path / "plan.csv"
    plan.write_text(text)
    assert main(["schedule", "-p", str(plan), "--horizon", "1"]) == 2
    err = capsys.readouterr().err
    assert str(plan) in err and msg in err


# ------------------------------------------------------------------ crawl delays
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_space_crawls_never_fetches_a_host_within_its_gap(seed):
    """Per-host minimum gaps (crawl delays) and per-page minimum gaps hold by construction;
    crawls only move later and none is lost (kept + deferred = all)."""
    rng = np.random.default_rng(seed)
    n, H = 60, 5
    rate = rng.uniform(0.2, 3.0, n)
    host = rng.integers(-1, H, n)
    gap = rng.uniform(0.01, 0.1, H)
    page_gap = 0.5 / rate
    horizon = 8.0
    table = S.timetable(jnp.asarray(rate, jnp.float32), horizon)
    out = S.space_crawls(table, host, gap, page_gap=page_gap, end=horizon)
    m = np.asarray(out.timetable.mask)
    t = np.asarray(out.timetable.time)[m].astype(np.float64)
    p = np.asarray(out.timetable.page)[m]
    assert np.all(np.diff(t) >= 0) and np.all(t < horizon)
    assert t.size + int(out.deferred) == int(table.num_crawls)
    for h in range(H):
        th = np.sort(t[host[p] == h])
        assert np.all(np.diff(th) >= gap[h]), h
    t0 = np.asarray(table.time)[np.asarray(table.mask)]
    p0 = np.asarray(table.page)[np.asarray(table.mask)]
    for i in range(n):
        new, old = np.sort(t[p == i]), np.sort(t0[p0 == i])
        assert np.all(np.diff(new) >= page_gap[i] * (1 - 1e-6))
        assert np.all(new >= old[:new.size])  # the k-th crawl of a page only moves later
    assert int(out.moved) > 0


@pytest.mark.long
def test_schedule_cli_keeps_robots_crawl_delays_in_absolute_time(tmp_path, capsys):
    from jaxcrawl import io as jio
    from jaxcrawl.cli import main

    robots = tmp_path / "robots"
    robots.mkdir()
    delays = {"a.example": 600, "b.example": 1800}
    for h, d in delays.items():
        (robots / f"{h}.txt").write_text(f"User-agent: *\nCrawl-delay: {d}\n")
    ids = np.asarray([f"https://{'a' if i % 2 else 'b'}.example/{i}" for i in range(20)], object)
    jio.write_plan(str(tmp_path / "plan.csv"), ids, np.full(20, 4.0), np.zeros(20))  # 4 a day each
    out = tmp_path / "tt.parquet"
    assert main(["schedule", "--plan", str(tmp_path / "plan.csv"), "--start", "2026-01-05T00:00:00Z",
                 "--horizon", "2d", "--robots", str(robots), "--output", str(out), "--quiet"]) == 0
    import pyarrow.parquet as pq

    t = pq.read_table(str(out)).to_pydict()
    epoch, pid = np.asarray(t["epoch_seconds"]), np.asarray(t["page_id"], object)
    assert epoch.min() >= 1767571200.0 and epoch.max() < 1767571200.0 + 2 * 86400
    for h, d in delays.items():
        e = np.sort(epoch[[u.split("/")[2] == h for u in pid]])
        assert e.size > 10 and np.all(np.diff(e) >= d - 1e-3)


@pytest.mark.parametrize("start", [1e6, 1.7e9, -3.3e8])
def test_epoch_second_starts_place_crawls_on_the_exact_grid(start):
    """A window far from 0 (epoch seconds) in the lane's dtype: the crawls are those of the
    exact grid ``(k + phase_i) / rate_i`` in ``[start, start + horizon)`` -- the same pages
    and counts as a float64 transcription, times since ``start`` within the dtype's rounding
    over the window (not over the absolute time); absolute times from ``start + time``."""
    rng = np.random.default_rng(3)
    n, horizon = 50, 4.0
    rate = np.exp(rng.uniform(np.log(0.05), np.log(20.0), n)).astype(float_dtype())
    phase = rng.uniform(0, 1, n).astype(float_dtype())
    tt = S.timetable(rate, horizon, start=start, phase=phase, relative=True)
    m = np.asarray(tt.mask)
    got_t, got_p = np.asarray(tt.time, np.float64)[m], np.asarray(tt.page)[m]
    assert int(tt.overflow) == 0 and got_t.min() >= 0 and got_t.max() < horizon
    # plain float64 reference, page by page
    ref_t, ref_p = [], []
    for i in range(n):
        r, p = float(rate[i]), float(phase[i])
        k = math.ceil(start * r - p)
        while (k + p) / r - start < horizon:
            ref_t.append((k + p) / r - start)
            ref_p.append(i)
            k += 1
    ref_t, ref_p = np.asarray(ref_t), np.asarray(ref_p)
    # float64 itself rounds (k + p) / r near |start|: allow that plus the lane's rounding over the window
    tol = 8 * np.finfo(np.float64).eps * abs(start) + time_tol(horizon, 16)
    near_edge = np.minimum(ref_t, horizon - ref_t) <= tol  # a crawl within rounding of an edge may go either way
    assert abs(len(got_t) - len(ref_t)) <= int(near_edge.sum())
    for i in range(n):
        g, r = np.sort(got_t[got_p == i]), np.sort(ref_t[ref_p == i])
        if len(g) == len(r):
            np.testing.assert_allclose(g, r, rtol=0, atol=tol)
        else:
            assert abs(len(g) - len(r)) == 1 and near_edge[ref_p == i].any()
    # relative=False is the same crawls at start + time (rounded to the dtype near start)
    ab = S.timetable(rate, horizon, start=start, phase=phase)
    np.testing.assert_array_equal(np.asarray(ab.page), np.asarray(tt.page))
    np.testing.assert_allclose(np.asarray(ab.time, np.float64)[m], start + got_t, rtol=0,
                               atol=float(np.spacing(np.asarray(abs(start) + horizon, float_dtype()))) + tol)


def test_space_crawls_keeps_gaps_across_consecutive_windows():
    """Three consecutive windows, each spaced on its own relative timetable and given the
    previous window's last crawl times (shifted by the window's length): joined, no host is
    crawled twice within its gap and no page within its page gap, across the boundaries
    too; ``last_group`` / ``last_page`` are each host's / page's last kept crawl.  Without
    the carry the boundaries are violated (the test can fail)."""
    rng = np.random.default_rng(7)
    n, H, horizon = 40, 4, 1.0
    rate = jnp.asarray(rng.uniform(1.0, 6.0, n), jnp.float32)
    host = rng.integers(0, H, n)
    gap = rng.uniform(0.05, 0.15, H)
    page_gap = 0.5 / np.asarray(rate, np.float64)

    def run(carry):
        times, pages, last_g, last_p = [], [], None, None
        for w in range(3):
            table = S.timetable(rate, horizon, start=w * horizon, relative=True)
            out = S.space_crawls(table, host, gap, page_gap=page_gap, end=horizon,
                                 last_group=None if last_g is None else last_g - horizon,
                                 last_page=None if last_p is None else last_p - horizon)
            if carry:
                last_g, last_p = out.last_group, out.last_page
            m = np.asarray(out.timetable.mask)
            t = np.asarray(out.timetable.time, np.float64)[m]
            p = np.asarray(out.timetable.page)[m]
            for h in range(H):  # the carry is the last kept crawl
                th = t[host[p] == h]
                if th.size:
                    assert float(out.last_group[h]) == th.max()
            times.append(w * horizon + t)
            pages.append(p)
        t, p = np.concatenate(times), np.concatenate(pages)
        eps32 = 4 * np.finfo(np.float32).eps * 3 * horizon  # float32 rounding of the window offsets
        ok_host = all(np.all(np.diff(np.sort(t[host[p] == h])) >= gap[h] - eps32) for h in range(H))
        ok_page = all(np.all(np.diff(np.sort(t[p == i])) >= page_gap[i] - eps32) for i in range(n))
        return ok_host and ok_page

    assert run(carry=True)
    assert not run(carry=False)
    with pytest.raises(ValueError, match="last_page"):
        S.space_crawls(S.timetable(rate, horizon), host, gap, last_page=np.zeros(3))
