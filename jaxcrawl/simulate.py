r"""Exact, fixed-shape simulation of the crawling world of the papers.

Every page ``i`` changes as a Poisson process of rate ``change_rate`` (ξ, λ) and is
requested as a Poisson process of rate ``importance`` (ζ, μ), independently (Learning to
Crawl [L2C] §2; Kolobov et al. NeurIPS-19 [K19] §2).  The crawler follows one of three
per-page *schedules*:

* ``POISSON``: crawls form a Poisson process of rate ``rate`` (L2C's class Δ_R, K19's Π⁻,
  eq. 3);
* ``PERIODIC``: crawls at the absolute times ``phase + k * period`` (L2C's deterministic
  class K_R and the uniform-interval policy κ^UI of §5 / App. H);
* ``SIGNAL``: for a page with complete change observations, a crawl right after each
  change signal with probability ``prob`` (K19's Π°, eq. 6).

Time is cut into windows of a fixed length.  In a window ``(t, t + w]`` the simulator
draws, per page, the number of changes (and of Poisson crawls), their times as sorted
uniforms (exponential spacings, no sort needed), the periodic or signal crawls, and from
these it computes *exactly* (no time grid) the integrals that the policy costs average:

.. math::

   \int_t^{t+w} H(N_i(s))\,ds, \qquad \int_t^{t+w} \mathbf 1\{N_i(s) > 0\}\,ds,

where :math:`N_i(s)` is the number of changes not yet crawled (K19 eq. 1) and
:math:`H(n) = \sum_{j \le n} 1/j` (K19 eq. 2); :math:`N_i` is piecewise constant between
events, so each integral is a finite sum over the segments that start at a change.  The
requests that arrive while the page is fresh and while it is stale are Poisson with means
ζ times the fresh and the stale time (they are independent of the page's path), which
gives L2C eq. 2's count of requests served fresh exactly in distribution.

The crawler's view of the window is returned as the padded histories
:mod:`jaxcrawl.estimators` reads: ``intervals[..., k]`` (time since the previous crawl),
``changed[..., k]`` (0/1, the partial observation of L2C eq. 1, :math:`1 - o_{i,n}`),
``mask[..., k]``, plus ``counts[..., k]`` (number of changes since the previous crawl:
L2C App. K full observation) and ``num_changes`` (the change signals of complete pages,
K19 eq. 11).

A :class:`SimState` carries over between windows (absolute time, time since each page's
last crawl, number of uncrawled changes), so a learner can call :func:`simulate_window`
inside its own ``jax.lax.scan`` and change the schedule every window; :func:`simulate`
is that scan for a fixed or precomputed sequence of schedules, and :func:`monte_carlo`
/ :func:`evaluate` turn it into the costs with standard errors.

Fixed shapes: each window holds at most ``event_capacity`` random events per page, records at
most ``crawl_capacity`` crawls per page, and stores all pages' events in one flat pool of
``pool_capacity`` slots.  :func:`poisson_capacity` sizes them so that a page-window overflows
with probability below ``tail`` (1e-9 by default); an overflow is flagged per page and
window and counted in every result, never dropped silently (the events past the capacity
are not simulated, so a result with overflows is not exact).

Note on L2C Lemma 1, eq. 10: the extracted text's fourth line reads
``ζρ/(ρ+ξ) + (ζρ/(ρ+ξ) + ζ s) e^{-(ρ+ξ)(t-t0)}``; its third line (and the derivation)
give ``ζρ/(ρ+ξ) + ζ (s - ρ/(ρ+ξ)) e^{-(ρ+ξ)(t-t0)}``, which is what this simulator
reproduces (see ``tests/test_simulate.py``).
"""
from __future__ import annotations

import dataclasses
import functools
import math
import warnings
from typing import Any, Callable, NamedTuple, Optional, Union

import jax
import jax.numpy as jnp
import numpy as np

from .problem import CrawlProblem, Policy, is_concrete

__all__ = [
    "POISSON",
    "PERIODIC",
    "SIGNAL",
    "Schedule",
    "poisson_schedule",
    "periodic_schedule",
    "signal_schedule",
    "schedule_from_policy",
    "nominal_rate",
    "SimState",
    "init_state",
    "stationary_state",
    "SimConfig",
    "poisson_capacity",
    "config_for",
    "Observations",
    "Window",
    "Events",
    "Totals",
    "simulate_window",
    "simulate",
    "history",
    "Evaluation",
    "monte_carlo",
    "evaluate",
    "harmonic_number",
]

POISSON = 0
"""Schedule kind: crawl as a Poisson process of rate ``rate`` (L2C Δ_R, K19 Π⁻)."""
PERIODIC = 1
"""Schedule kind: crawl at absolute times ``phase + k * period`` (L2C K_R, κ^UI)."""
SIGNAL = 2
"""Schedule kind: crawl on each change signal with probability ``prob`` (K19 Π°)."""

_EULER_GAMMA = 0.57721566490153286061


# --------------------------------------------------------------------------- schedules
class Schedule(NamedTuple):
    """Per-page crawl schedule for one window (a pytree: stack it to vary it over windows).

    Only the fields of a page's own ``kind`` are read; the others are ignored.

    Attributes:
      kind: ``(..., n)`` int32, one of :data:`POISSON`, :data:`PERIODIC`, :data:`SIGNAL`.
      rate: ``(..., n)`` Poisson crawl rate (``POISSON`` pages), >= 0.
      prob: ``(..., n)`` probability of crawling on each change signal (``SIGNAL``
        pages, which must be ``complete``), in [0, 1].
      period: ``(..., n)`` time between crawls (``PERIODIC`` pages), > 0; ``inf`` means
        never crawl.
      phase: ``(..., n)`` absolute time of one of the periodic crawls: the crawls are at
        ``phase + k * period`` for integers ``k``.
    """

    kind: jax.Array
    rate: jax.Array
    prob: jax.Array
    period: jax.Array
    phase: jax.Array


def _filled(like, value):
    return jnp.full(jnp.shape(like), value, dtype=jnp.result_type(like))


def _floatify(x):
    x = jnp.asarray(x)
    if not jnp.issubdtype(x.dtype, jnp.floating):
        x = x.astype(jnp.result_type(float))
    return x


def poisson_schedule(rate) -> Schedule:
    """Poisson crawling at ``rate`` per page (L2C §2 class Δ_R; K19 eq. 3, Π⁻)."""
    rate = _floatify(rate)
    if is_concrete(rate):
        _check_nonneg_finite(rate, "rate")
    return Schedule(
        kind=jnp.full(rate.shape, POISSON, jnp.int32),
        rate=rate,
        prob=jnp.zeros_like(rate),
        period=_filled(rate, jnp.inf),
        phase=jnp.zeros_like(rate),
    )


def periodic_schedule(period, phase=0.0) -> Schedule:
    """Crawls every ``period`` at absolute times ``phase + k * period``.

    The deterministic class K_R of L2C §5 (κ_i = period); the uniform-interval exploration
    policy κ^UI of L2C §5 / App. H is ``period = m / R`` for every page.  Use phases spread
    over ``[0, period)`` to spread the load, or :func:`stationary_state` with random
    phases for a stationary start.
    """
    period = _floatify(period)
    phase = jnp.broadcast_to(jnp.asarray(phase, dtype=period.dtype), period.shape)
    if is_concrete(period, phase):
        p = np.asarray(period)
        if np.any(np.isnan(p)) or np.any(p <= 0):
            raise ValueError("period must be > 0 for every page (inf means never crawl)")
        if not np.all(np.isfinite(np.asarray(phase))):
            raise ValueError("phase must be finite")
    return Schedule(
        kind=jnp.full(period.shape, PERIODIC, jnp.int32),
        rate=jnp.zeros_like(period),
        prob=jnp.zeros_like(period),
        period=period,
        phase=phase,
    )


def signal_schedule(prob) -> Schedule:
    """Crawl on each change signal with probability ``prob`` (K19 eq. 6, Π°).

    Only valid for pages with complete change observations (``problem.complete``).
    """
    prob = _floatify(prob)
    if is_concrete(prob):
        p = np.asarray(prob)
        if np.any(~np.isfinite(p)) or np.any(p < 0) or np.any(p > 1):
            raise ValueError("prob must be in [0, 1] for every page")
    return Schedule(
        kind=jnp.full(prob.shape, SIGNAL, jnp.int32),
        rate=jnp.zeros_like(prob),
        prob=prob,
        period=_filled(prob, jnp.inf),
        phase=jnp.zeros_like(prob),
    )


def schedule_from_policy(
    problem: CrawlProblem, policy: Policy, *, incomplete: str = "poisson", phase=0.0
) -> Schedule:
    """The schedule that executes a solver's :class:`~jaxcrawl.problem.Policy`.

    Pages with ``policy.on_signal`` (complete pages under LambdaCrawl) crawl on each
    change signal with probability ``policy.prob`` (K19 Π°, Prop. 4); every other page
    crawls as a Poisson process of rate ``policy.rate`` (K19 Π⁻, Prop. 1;
    ``incomplete="poisson"``) or every ``1 / policy.rate`` at ``phase`` (L2C K_R;
    ``incomplete="periodic"``; a zero rate never crawls).  A policy without an
    ``on_signal`` field uses ``problem.complete``.
    """
    if incomplete not in ("poisson", "periodic"):
        raise ValueError(f"incomplete must be 'poisson' or 'periodic', got {incomplete!r}")
    rate = jnp.asarray(policy.rate)
    on_signal = getattr(policy, "on_signal", None)
    on_signal = problem.complete if on_signal is None else on_signal
    sig = jnp.broadcast_to(jnp.asarray(on_signal, bool), rate.shape)
    prob = jnp.where(sig, jnp.asarray(policy.prob, rate.dtype), 0.0)
    if is_concrete(prob, rate):
        p = np.asarray(prob)
        if np.any(~np.isfinite(p)) or np.any(p < 0) or np.any(p > 1 + 1e-6):
            raise ValueError("policy.prob must be in [0, 1] for pages crawled on signals")
        _check_nonneg_finite(rate, "policy.rate")
    prob = jnp.clip(prob, 0.0, 1.0)  # removes rounding above 1 only (checked above)
    inc_kind = POISSON if incomplete == "poisson" else PERIODIC
    kind = jnp.where(sig, SIGNAL, inc_kind).astype(jnp.int32)
    if incomplete == "periodic":
        safe = jnp.where(rate > 0, rate, 1.0)
        period = jnp.where(rate > 0, 1.0 / safe, jnp.inf)
        pois_rate = jnp.zeros_like(rate)
    else:
        period = jnp.full_like(rate, jnp.inf)
        pois_rate = rate
    return Schedule(
        kind=kind,
        rate=jnp.where(sig, 0.0, pois_rate),
        prob=prob,
        period=jnp.where(sig, jnp.inf, period),
        phase=jnp.broadcast_to(jnp.asarray(phase, rate.dtype), rate.shape),
    )


def nominal_rate(problem: CrawlProblem, schedule: Schedule) -> jax.Array:
    """Long-run crawl rate of each page: ``rate``, ``1 / period`` or ``prob * change_rate``."""
    safe = jnp.where(jnp.isfinite(schedule.period), schedule.period, 1.0)
    per = jnp.where(jnp.isfinite(schedule.period), 1.0 / safe, 0.0)
    return jnp.where(
        schedule.kind == POISSON,
        schedule.rate,
        jnp.where(schedule.kind == PERIODIC, per, schedule.prob * problem.change_rate),
    )


def _check_nonneg_finite(x, name):
    a = np.asarray(x)
    if np.any(~np.isfinite(a)) or np.any(a < 0):
        raise ValueError(f"{name} must be finite and >= 0 for every page")


def _check_schedule(problem: CrawlProblem, schedule: Schedule):
    """Eager validation of a schedule against a problem (skipped under tracing)."""
    if not is_concrete(problem, schedule):
        return
    n_shape = np.shape(problem.change_rate)
    kind = np.asarray(schedule.kind)
    for name in Schedule._fields:
        shp = np.shape(getattr(schedule, name))
        try:
            np.broadcast_shapes(shp, n_shape)
        except ValueError:
            raise ValueError(
                f"schedule.{name} has shape {shp}, which does not broadcast to the pages' "
                f"shape {n_shape}"
            ) from None
    if not np.all(np.isin(kind, (POISSON, PERIODIC, SIGNAL))):
        raise ValueError("schedule.kind must be POISSON (0), PERIODIC (1) or SIGNAL (2)")
    kind = np.broadcast_to(kind, n_shape)
    comp = np.asarray(problem.complete)
    if np.any((kind == SIGNAL) & ~comp):
        raise ValueError(
            "schedule.kind is SIGNAL for a page that is not complete: only pages with "
            "complete change observations send change signals (K19 Π°)"
        )
    rate = np.broadcast_to(np.asarray(schedule.rate), n_shape)
    if np.any((kind == POISSON) & (~np.isfinite(rate) | (rate < 0))):
        raise ValueError("schedule.rate must be finite and >= 0 for POISSON pages")
    prob = np.broadcast_to(np.asarray(schedule.prob), n_shape)
    if np.any((kind == SIGNAL) & (~np.isfinite(prob) | (prob < 0) | (prob > 1))):
        raise ValueError("schedule.prob must be in [0, 1] for SIGNAL pages")
    per = np.broadcast_to(np.asarray(schedule.period), n_shape)
    if np.any((kind == PERIODIC) & (np.isnan(per) | (per <= 0))):
        raise ValueError("schedule.period must be > 0 for PERIODIC pages (inf = never)")
    ph = np.broadcast_to(np.asarray(schedule.phase), n_shape)
    if np.any((kind == PERIODIC) & ~np.isfinite(ph)):
        raise ValueError("schedule.phase must be finite for PERIODIC pages")


# --------------------------------------------------------------------------- state
class SimState(NamedTuple):
    """What carries over from one window to the next.

    Attributes:
      time: absolute time at the start of the window, shape ``(...)`` (the problem's
        batch shape).
      since_crawl: ``(..., n)`` time since each page's last crawl.
      num_changes: ``(..., n)`` int32 number of changes since the last crawl (K19's
        N_w(t)); the page is fresh (L2C's FRESH) iff it is 0.
    """

    time: jax.Array
    since_crawl: jax.Array
    num_changes: jax.Array

    @property
    def fresh(self) -> jax.Array:
        """L2C's FRESH(i, t): no change since the last crawl."""
        return self.num_changes == 0


def init_state(
    problem: CrawlProblem, *, fresh=True, since_crawl=0.0, num_changes=None, time=0.0
) -> SimState:
    """A deterministic initial state (L2C Lemma 1's cache state S(t0)).

    Args:
      problem: the pages.
      fresh: bool, scalar or ``(..., n)``: pages that start fresh have no uncrawled
        change; stale ones start with one (unless ``num_changes`` is given).
      since_crawl: time since each page's last crawl (default 0: just crawled).
      num_changes: optional ``(..., n)`` uncrawled change counts; overrides ``fresh``.
      time: absolute start time.
    """
    dtype = problem.change_rate.dtype
    shape = jnp.shape(problem.change_rate)
    if num_changes is None:
        num_changes = jnp.where(jnp.asarray(fresh), 0, 1)
    num_changes = jnp.broadcast_to(jnp.asarray(num_changes), shape).astype(jnp.int32)
    since = jnp.broadcast_to(jnp.asarray(since_crawl, dtype), shape)
    if is_concrete(since, num_changes):
        if np.any(~np.isfinite(np.asarray(since))) or np.any(np.asarray(since) < 0):
            raise ValueError("since_crawl must be finite and >= 0")
        if np.any(np.asarray(num_changes) < 0):
            raise ValueError("num_changes must be >= 0")
    t = jnp.broadcast_to(jnp.asarray(time, dtype), shape[:-1])
    return SimState(time=t, since_crawl=since, num_changes=num_changes)


def stationary_state(key, problem: CrawlProblem, schedule: Schedule, *, time=0.0) -> SimState:
    """A draw from the stationary law of each page's state under ``schedule``.

    Starting here makes every window's expected cost equal to the long-run cost, so
    Monte-Carlo averages over any horizon estimate the closed forms without burn-in bias.

    * ``POISSON`` at rate ρ: time since the last crawl ~ Exp(ρ) (the backward recurrence
      time of a Poisson process), uncrawled changes ~ Poisson(ξ · that time), so that
      P(N >= j) = (ξ / (ξ + ρ))^j (behind K19 Prop. 1);
    * ``PERIODIC``: time since the last crawl is ``(time - phase) mod period`` (random
      phases give a stationary start), changes ~ Poisson(ξ · that time);
    * ``SIGNAL`` with probability p: crawls are a Poisson(pξ) process and uncrawled
      changes an independent Poisson((1 - p)ξ) one (thinning), so the time since the last
      crawl is Exp(pξ) and N ~ Poisson((1 - p)ξ · that time), geometric overall (K19
      Prop. 4).

    Pages that are never crawled (rate 0, prob 0, period inf) have no stationary law;
    they start just crawled and fresh (since_crawl 0, no uncrawled change).
    """
    dtype = problem.change_rate.dtype
    xi = problem.change_rate
    shape = jnp.shape(xi)
    sched = jax.tree_util.tree_map(lambda a: jnp.broadcast_to(a, shape), schedule)
    key_age, key_count = jax.random.split(key)
    e = jax.random.exponential(key_age, shape, dtype)
    kind = sched.kind
    crawl_rate = jnp.where(kind == POISSON, sched.rate, sched.prob * xi)
    pos = crawl_rate > 0
    age_random = jnp.where(pos, e / jnp.where(pos, crawl_rate, 1.0), 0.0)
    per_ok = jnp.isfinite(sched.period)
    per_safe = jnp.where(per_ok, sched.period, 1.0)
    t = jnp.broadcast_to(jnp.asarray(time, dtype), shape[:-1])
    age_periodic = jnp.where(per_ok, jnp.mod(t[..., None] - sched.phase, per_safe), 0.0)
    age = jnp.where(kind == PERIODIC, age_periodic, age_random)
    uncrawled_rate = jnp.where(kind == SIGNAL, (1.0 - sched.prob) * xi, xi)
    mean = uncrawled_rate * age
    n = _poisson_any(key_count, mean)
    return SimState(time=t, since_crawl=age.astype(dtype), num_changes=n)


# --------------------------------------------------------------------------- capacities
@dataclasses.dataclass(frozen=True)
class SimConfig:
    """Static settings of the simulator (hashable; the buffers' shapes depend on them).

    Attributes:
      window: window length w (time units, e.g. days).
      event_capacity: maximum number of random events per page per window: changes,
        plus the crawls of a POISSON page.  A page-window with more is an overflow.
      crawl_capacity: slots per page per window in the returned :class:`Observations`
        (a page-window with more crawls is an overflow; its costs stay exact, the
        observations past the capacity are lost).
      pool_capacity: event slots per window for all pages together (per problem
        instance): every page uses one slot per change and per crawl, plus one.  Events
        are stored flat, so memory and random numbers grow with the events, not with the
        per-page capacities.  Running out is an overflow of the pages that did not fit.
      request_capacity: maximum fresh (and stale) requests per page per window for the
        pages whose requests are drawn by inversion (expected requests per window
        ``ζ w <= 16``).
      heavy_pages: how many pages with ``ζ w > 16`` there may be; their requests are
        drawn by transformed rejection (no capacity).  Extra such pages overflow.
      heavy_event_pages: the same for the event counts: how many pages may expect more
        than 16 events per window.
      requests: simulate the request counts (default).  Learners that never read them
        pass ``False``: ``requests`` and ``fresh_requests`` are then 0 and cost nothing.
    """

    window: float
    event_capacity: int
    crawl_capacity: int
    pool_capacity: int
    request_capacity: int = 1
    heavy_pages: int = 0
    heavy_event_pages: int = 0
    requests: bool = True

    def __post_init__(self):
        if not (math.isfinite(self.window) and self.window > 0):
            raise ValueError(f"window must be finite and > 0, got {self.window!r}")
        for name in ("event_capacity", "crawl_capacity", "pool_capacity"):
            v = getattr(self, name)
            if int(v) != v or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        for name in ("request_capacity", "heavy_pages", "heavy_event_pages"):
            v = getattr(self, name)
            if int(v) != v or v < (1 if name == "request_capacity" else 0):
                raise ValueError(f"{name} must be a nonnegative integer, got {v!r}")


_LIGHT_MEAN = 16.0  # larger expected counts per window go to _poisson_ptrs (rejection)


def poisson_capacity(mean: float, tail: float = 1e-9) -> int:
    """Smallest ``K >= 1`` with ``P(Poisson(mean) > K) < tail``.

    Sizes the per-window event buffers (a page-window overflows with probability below
    ``tail``).  Computed in float64 by summing the upper tail of the probability mass
    function from its small end (no cancellation).
    """
    mean = float(mean)
    if not (math.isfinite(mean) and mean >= 0):
        raise ValueError(f"mean must be finite and >= 0, got {mean!r}")
    if not (0 < tail < 1):
        raise ValueError(f"tail must be in (0, 1), got {tail!r}")
    if mean == 0:
        return 1
    kmax = int(mean + 60.0 * math.sqrt(mean) + 200)
    k = np.arange(kmax + 1, dtype=np.float64)
    lg = np.array([math.lgamma(v + 1.0) for v in k])
    pmf = np.exp(k * math.log(mean) - mean - lg)
    # upper[K] = P(X > K) = sum_{j > K} pmf[j], summed from the small end.
    upper = np.concatenate([np.cumsum(pmf[::-1])[::-1][1:], [0.0]])
    ok = np.flatnonzero(upper < tail)
    return max(1, int(ok[0]))


_LIGHT_CAP = poisson_capacity(_LIGHT_MEAN, 1e-9)


def config_for(
    problem: CrawlProblem,
    schedule: Optional[Schedule] = None,
    window: float = 1.0,
    *,
    max_crawl_rate: Optional[float] = None,
    total_crawl_rate: Optional[float] = None,
    tail: float = 1e-9,
    requests: bool = True,
) -> SimConfig:
    """Capacities for ``problem`` under ``schedule`` (or any schedule within given rates).

    With ``ρ_max`` the largest Poisson or signal crawl rate (``rate``, ``prob · ξ``) of
    ``schedule`` and ``max_crawl_rate``, and ``C`` the total crawl rate
    (``total_crawl_rate``, else the larger of the bandwidth and the schedule's):

    * ``event_capacity``: the Poisson((max ξ + ρ_max) w) quantile at ``tail``, and
      ``heavy_event_pages`` the number of pages with ``(ξ + ρ) w > 16``;
    * ``crawl_capacity``: the Poisson(ρ_max w) quantile, at least ``ceil(w / min
      period) + 1`` for PERIODIC pages;
    * ``pool_capacity``: ``2 n + ceil(C w)`` plus the Poisson((Σ ξ + C) w) quantile
      (one overflow per ``1 / tail`` windows);
    * ``request_capacity``: the Poisson(min(max ζ w, 16)) quantile; ``heavy_pages``:
      the number of pages with ``ζ w > 16`` (drawn by transformed rejection).

    A learner whose schedule changes between windows passes ``max_crawl_rate`` (a bound
    on any page's Poisson or signal crawl rate) and, if its rates may sum to more than
    the bandwidth, ``total_crawl_rate``; one that never reads the requests passes
    ``requests=False``.  Needs concrete values (call it outside ``jit``).

    Pages expecting more than 16 events (or requests) per window are counted in
    ``heavy_event_pages`` (``heavy_pages``): their counts are drawn by
    transformed rejection (PTRS), so any rate works; only the pool and the per-page capacities
    grow with it.
    """
    if not is_concrete(problem, schedule):
        raise ValueError("config_for needs concrete values: call it outside jit")
    w = float(window)
    if not (math.isfinite(w) and w > 0):
        raise ValueError(f"window must be finite and > 0, got {window!r}")
    xi = np.asarray(problem.change_rate, dtype=np.float64)
    xi_rows = xi.reshape(-1, xi.shape[-1])
    n = xi.shape[-1]
    crawl_rates = [0.0]
    periodic_cap = 1
    sched_total = 0.0
    if max_crawl_rate is not None:
        if not (math.isfinite(max_crawl_rate) and max_crawl_rate >= 0):
            raise ValueError("max_crawl_rate must be finite and >= 0")
        crawl_rates.append(float(max_crawl_rate))
    if schedule is not None:
        _check_schedule(problem, schedule)
        shape = xi.shape
        kind = np.broadcast_to(np.asarray(schedule.kind), shape)
        rate = np.broadcast_to(np.asarray(schedule.rate, np.float64), shape)
        prob = np.broadcast_to(np.asarray(schedule.prob, np.float64), shape)
        per = np.broadcast_to(np.asarray(schedule.period, np.float64), shape)
        if np.any(kind == POISSON):
            crawl_rates.append(float(rate[kind == POISSON].max()))
        if np.any(kind == SIGNAL):
            crawl_rates.append(float((prob * xi)[kind == SIGNAL].max()))
        if np.any(kind == PERIODIC):
            pmin = float(per[kind == PERIODIC].min())
            if math.isfinite(pmin):
                periodic_cap = int(math.ceil(w / pmin)) + 1
        with np.errstate(divide="ignore"):
            per_rate = np.where(np.isfinite(per), 1.0 / per, 0.0)
        nominal = np.where(kind == POISSON, rate, np.where(kind == PERIODIC, per_rate, 0.0))
        sched_total = float(nominal.reshape(xi_rows.shape).sum(-1).max())
    rho_max = max(crawl_rates)
    event_cap = poisson_capacity((float(xi.max()) + rho_max) * w, tail)
    page_rate = np.zeros(xi.shape)
    if schedule is not None:
        page_rate = np.where(kind == POISSON, rate, 0.0)
    if max_crawl_rate is not None:
        page_rate = np.maximum(page_rate, float(max_crawl_rate))
    heavy_events = int(((xi + page_rate) * w > _LIGHT_MEAN).reshape(xi_rows.shape).sum(-1).max())
    crawl_cap = max(poisson_capacity(rho_max * w, tail), periodic_cap)
    if total_crawl_rate is None:
        bw = float(np.max(np.asarray(problem.bandwidth, np.float64)))
        total_crawl_rate = max(bw, sched_total)
    elif not (math.isfinite(total_crawl_rate) and total_crawl_rate >= 0):
        raise ValueError("total_crawl_rate must be finite and >= 0")
    row_mean = (float(xi_rows.sum(-1).max()) + float(total_crawl_rate)) * w
    pool_cap = 2 * n + int(math.ceil(total_crawl_rate * w)) + poisson_capacity(row_mean, tail)
    zw = np.broadcast_to(np.asarray(problem.importance, np.float64), xi.shape) * w
    req_cap = poisson_capacity(min(float(zw.max()), _LIGHT_MEAN), tail)
    heavy = int((zw.reshape(xi_rows.shape) > _LIGHT_MEAN).sum(-1).max())
    return SimConfig(
        window=w,
        event_capacity=event_cap,
        crawl_capacity=crawl_cap,
        pool_capacity=int(pool_cap),
        request_capacity=int(req_cap),
        heavy_pages=heavy,
        heavy_event_pages=heavy_events,
        requests=bool(requests),
    )


# --------------------------------------------------------------------------- samplers
def _cumsum(x):
    """Inclusive cumulative sum of a 1-D array."""
    return jnp.cumsum(x)


def _cummax(x):
    """Inclusive cumulative maximum of a 1-D array."""
    return jax.lax.cummax(x, axis=0)


def _segmented_cumsum(x, r, max_len):
    """Inclusive cumulative sum within segments of length <= ``max_len`` (1-D).

    ``r`` is each element's index inside its segment.  A Hillis-Steele scan with
    ``ceil(log2(max_len))`` doubling steps: exact segment by segment (no global running
    sum, so no loss of precision across segments).
    """
    step = 1
    while step < max_len:
        shifted = jnp.concatenate([jnp.zeros((step,), x.dtype), x[:-step]])
        x = x + jnp.where(r >= step, shifted, 0)
        step *= 2
    return x


def _uniform_fine(key, size, dtype):
    """``size`` uniforms on (0, 1) from 64 random bits each, resolving tiny probabilities.

    ``hi · 2^-32 + (lo + 1/2) · 2^-64``: near 0 its resolution is far below 1e-9 (a
    single float32 uniform has 2^-24), near 1 it is rounded to the working precision.
    """
    b = jax.random.bits(key, (2 * size,), jnp.uint32)
    hi = b[:size].astype(dtype) * jnp.asarray(2.0 ** -32, dtype)
    lo = (b[size:].astype(dtype) + 0.5) * jnp.asarray(2.0 ** -64, dtype)
    return hi + lo


def _poisson_inverse(u, mean, cap):
    """Poisson(mean) by inversion of the upper tail: ``#{k <= cap : u < P(X > k)}``.

    The probabilities come from the recursion ``p_k = p_{k-1} mean / k`` from
    ``p_0 = exp(-mean)`` and the upper tails are summed from the far end, so a tail
    probability is accurate to relative working precision however small it is.
    Returns ``cap + 1`` when the count exceeds ``cap`` (an overflow), and also when
    ``exp(-mean)`` would underflow (``mean`` above ``_max_inversion_mean``: flagged
    rather than silently wrong).  ``mean`` may be 0.  Written as a short unrolled loop
    of elementwise operations, which XLA fuses into one pass over the pages.
    """
    dtype = u.dtype
    mean = jnp.maximum(mean, 0.0).astype(dtype)
    pmf = [jnp.exp(-mean)]
    for k in range(1, cap + 2):
        pmf.append(pmf[-1] * mean * (1.0 / k))
    tail = pmf[cap + 1]  # ~ P(X > cap), omitting P(X > cap + 1)
    count = (u < tail).astype(jnp.int32)
    for k in range(cap - 1, -1, -1):
        tail = tail + pmf[k + 1]  # P(X > k)
        count = count + (u < tail).astype(jnp.int32)
    return jnp.where(mean > _max_inversion_mean(dtype), cap + 1, count)


def _max_inversion_mean(dtype) -> float:
    """Largest mean whose ``exp(-mean)`` is a normal number in ``dtype`` (with margin)."""
    return 0.9 * -math.log(float(jnp.finfo(dtype).tiny))


def _poisson_logpmf(k, lam):
    """log P(Poisson(lam) = k) for float ``k >= 0``, ``lam >= 10``, without cancellation.

    For ``k >= 10`` Stirling's series gives
    ``k log1p((lam - k)/k) + (k - lam) - log(2πk)/2 - 1/(12k) + 1/(360k³)``, accurate
    to float precision of the *result* even when ``k log lam`` and ``lgamma(k+1)`` are
    both ~1e5 (where the direct formula loses everything in float32).
    """
    ks = jnp.maximum(k, 10.0)
    stirling = (
        ks * jnp.log1p((lam - ks) / ks) + (ks - lam) - 0.5 * jnp.log(2.0 * jnp.pi * ks)
        - 1.0 / (12.0 * ks) + 1.0 / (360.0 * ks ** 3)
    )
    log_fact = jnp.asarray([math.lgamma(j + 1.0) for j in range(10)], lam.dtype)
    kd = jnp.clip(k, 0.0, 9.0)
    direct = kd * jnp.log(lam) - lam - log_fact[kd.astype(jnp.int32)]
    return jnp.where(k >= 10.0, stirling, direct)


def _poisson_ptrs(key, lam):
    """Poisson(lam) for ``lam >= 10`` by transformed rejection with squeeze (PTRS,
    Hörmann 1993), in a ``while_loop`` until every element is accepted (about 1.15
    proposals each).  Exact in distribution; the acceptance test uses
    :func:`_poisson_logpmf`, so it stays accurate in float32 for large means.  Entries
    with ``lam < 10`` are computed as if ``lam = 10`` (callers mask them).
    """
    dtype = lam.dtype
    lam = jnp.maximum(lam, 10.0)
    slam = jnp.sqrt(lam)
    b = 0.931 + 2.53 * slam
    a = -0.059 + 0.02483 * b
    log_inv_alpha = jnp.log(1.1239 + 1.1328 / (b - 3.4))
    vr = 0.9277 - 3.6224 / (b - 2.0)

    def cond(carry):
        return jnp.any(~carry[2])

    def body(carry):
        k, out, done = carry
        k, sub = jax.random.split(k)
        uv = jax.random.uniform(sub, (2,) + lam.shape, dtype)
        u, v = uv[0] - 0.5, uv[1]
        us = 0.5 - jnp.abs(u)
        us_safe = jnp.maximum(us, jnp.finfo(dtype).tiny)
        kk = jnp.floor((2.0 * a / us_safe + b) * u + lam + 0.43)
        fast = (us >= 0.07) & (v <= vr)
        reject = ~jnp.isfinite(kk) | (kk < 0) | ((us < 0.013) & (v > us))
        ok = jnp.log(jnp.maximum(v, jnp.finfo(dtype).tiny)) + log_inv_alpha - jnp.log(
            a / (us_safe * us_safe) + b
        ) <= _poisson_logpmf(jnp.where(jnp.isfinite(kk), kk, 0.0), lam)
        acc = ~done & (fast | (~reject & ok))
        out = jnp.where(acc, kk, out)
        return k, out, done | acc

    init = (key, jnp.zeros(lam.shape, dtype), jnp.zeros(lam.shape, bool))
    return jax.lax.while_loop(cond, body, init)[1].astype(jnp.int32)


def _poisson_any(key, mean):
    """Poisson(mean) for any finite mean >= 0 (non-finite treated as 0): inversion up to
    16, :func:`_poisson_ptrs` above."""
    key_small, key_large = jax.random.split(key)
    mean = jnp.where(jnp.isfinite(mean), jnp.maximum(mean, 0.0), 0.0)
    small = mean <= _LIGHT_MEAN
    u = _uniform_fine(key_small, int(np.prod(mean.shape)), mean.dtype).reshape(mean.shape)
    count_small = jnp.minimum(_poisson_inverse(u, jnp.where(small, mean, 0.0), _LIGHT_CAP), _LIGHT_CAP)
    count_large = _poisson_ptrs(key_large, jnp.where(small, 10.0, mean))
    return jnp.where(small, count_small, count_large)


def _poisson_counts(key, mean, heavy, cap, num_heavy):
    """Poisson(mean) for every page, with an overflow flag per page.

    ``mean`` is ``(n,)`` or ``(m, n)`` (m counts per page sharing the ``(n,)`` mask
    ``heavy``, which must cover every page with a mean above 16).  Means up to 16 are
    drawn by :func:`_poisson_inverse` with capacity ``cap`` (flagged past it); means
    above 16 of the first ``num_heavy`` heavy pages are gathered and drawn by
    :func:`_poisson_ptrs` (exact for means >= 10) in one loop; heavy pages past them are
    flagged.
    """
    n = mean.shape[-1]
    key_light, key_heavy = jax.random.split(key)
    small = mean <= _LIGHT_MEAN
    u = _uniform_fine(key_light, mean.size, mean.dtype).reshape(mean.shape)
    count = _poisson_inverse(u, jnp.where(small, mean, 0.0), cap)
    lead = tuple(range(mean.ndim - 1))
    rank = _cumsum(heavy.astype(jnp.int32)) - 1
    overflow = (heavy & (rank >= num_heavy)) | jnp.any(~small & ~heavy, axis=lead)
    overflow = overflow | jnp.any(small & (count > cap), axis=lead)
    if num_heavy > 0:
        idx = jnp.nonzero(heavy, size=num_heavy, fill_value=n)[0]
        sel = jnp.minimum(idx, n - 1)
        mh = jnp.where(idx < n, mean[..., sel], 0.0)
        big = mh > _LIGHT_MEAN
        draw = jnp.where(big, _poisson_ptrs(key_heavy, jnp.where(big, mh, 10.0)), count[..., sel])
        count = count.at[..., idx].set(draw, mode="drop")
    return count, overflow


_H_TABLE_SIZE = 256


def harmonic_number(n, dtype=None) -> jax.Array:
    """H(n) = Σ_{j=1}^n 1/j (0 for n <= 0): the K19 eq. 2 staleness penalty.

    A float64 table for n < 256, the asymptotic series ln n + γ + 1/(2n) − 1/(12n²) +
    1/(120n⁴) (error < 1e-14 there) above.
    """
    n = jnp.asarray(n)
    dtype = dtype or jnp.result_type(float)
    table = np.concatenate([[0.0], np.cumsum(1.0 / np.arange(1, _H_TABLE_SIZE))])
    small = jnp.asarray(table, dtype)[jnp.clip(n, 0, _H_TABLE_SIZE - 1)]
    nf = jnp.maximum(n, _H_TABLE_SIZE).astype(dtype)
    inv = 1.0 / nf
    inv2 = inv * inv
    big = jnp.log(nf) + _EULER_GAMMA + 0.5 * inv - inv2 / 12.0 + inv2 * inv2 / 120.0
    return jnp.where(n < _H_TABLE_SIZE, small, big).astype(dtype)


# --------------------------------------------------------------------------- one window
class Observations(NamedTuple):
    """What the crawler sees in one window, padded to ``crawl_capacity`` crawls per page.

    The format of :mod:`jaxcrawl.estimators` (leading axes: pages, then whatever the
    caller vmaps over).

    Attributes:
      intervals: ``(..., n, K)`` time since the previous crawl (the first crawl of a
        window counts from the last crawl of an earlier window, or from the initial
        state's ``since_crawl``); 0 where masked.
      changed: ``(..., n, K)`` 1.0 if the page changed since the previous crawl, else 0.0
        (L2C eq. 1: ``changed = 1 - o_{i,n}``); 0 where masked.
      mask: ``(..., n, K)`` True where a crawl happened.
      counts: ``(..., n, K)`` int32 number of changes since the previous crawl (L2C
        App. K full observation); 0 where masked.
      crawl_times: ``(..., n, K)`` crawl times measured from the window's start; ``inf``
        where masked.
    """

    intervals: jax.Array
    changed: jax.Array
    mask: jax.Array
    counts: jax.Array
    crawl_times: jax.Array


class Events(NamedTuple):
    """The window's events, flat and in time order within each page (``(..., pool)``).

    Page ``i`` owns a contiguous run of slots: its events, then one end-of-window slot.

    Attributes:
      page: page index of each slot (meaningless where ``valid`` is False).
      time: event time from the window's start (``window`` for end slots).
      is_change: the page changed at this time.
      is_crawl: the page was crawled at this time (a signal crawl shares its change's
        slot and happens right after it).
      valid: a real event (not an end-of-window or unused slot).
    """

    page: jax.Array
    time: jax.Array
    is_change: jax.Array
    is_crawl: jax.Array
    valid: jax.Array


class Window(NamedTuple):
    """Everything that happened to every page in one window.

    Attributes:
      observations: the crawls' :class:`Observations`.
      num_changes: ``(..., n)`` int32 changes in the window (the change signals a
        complete page sends, K19 eq. 11; full observation of the change process).
      num_crawls: ``(..., n)`` int32 crawls in the window.
      harmonic: ``(..., n)`` exact ∫ H(N(s)) ds over the window (K19 eq. 1-2).
      stale_time: ``(..., n)`` exact ∫ 1{N(s) > 0} ds (binary staleness).
      requests: ``(..., n)`` number of requests in the window (Poisson(ζ w)).
      fresh_requests: ``(..., n)`` requests that found the page fresh (L2C eq. 2).
      overflow: ``(..., n)`` bool: more events than a capacity allowed (the events past
        it were not simulated or not recorded, so this page-window is not exact).
      events: the flat :class:`Events` (for inspection and tests).
    """

    observations: Observations
    num_changes: jax.Array
    num_crawls: jax.Array
    harmonic: jax.Array
    stale_time: jax.Array
    requests: jax.Array
    fresh_requests: jax.Array
    overflow: jax.Array
    events: Events


def _window_1d(key, time, since, n0, xi, zeta, kind, rate, prob, period, phase, config):
    """One window for one problem instance (pages on axis 0); see :func:`simulate_window`."""
    w = config.window
    ke, kr, npool = config.event_capacity, config.crawl_capacity, config.pool_capacity
    dtype = xi.dtype
    n = xi.shape[0]
    wd = jnp.asarray(w, dtype)
    inf = jnp.asarray(jnp.inf, dtype)
    key_count, key_exp, key_unif, key_req = jax.random.split(key, 4)
    is_pois = kind == POISSON
    is_per = kind == PERIODIC
    is_sig = kind == SIGNAL
    rate = jnp.where(is_pois, rate, 0.0)

    # ---- page level: random event counts, periodic crawl counts, slot ranges
    ev_mean = (xi + rate) * wd  # changes (+ Poisson crawls)
    m_raw, overflow_count = _poisson_counts(
        key_count, ev_mean, ev_mean > _LIGHT_MEAN, min(ke, _LIGHT_CAP), config.heavy_event_pages
    )
    per_ok = is_per & jnp.isfinite(period) & (period > 0)
    per = jnp.where(per_ok, period, 1.0)
    first = per - jnp.mod(time - phase, per)  # first scheduled crawl, in (0, period]
    q = jnp.where(per_ok & (first <= wd), jnp.floor((wd - first) / per) + 1.0, 0.0)
    q = q.astype(jnp.int32)
    length = jnp.minimum(m_raw, ke) + q  # events of the page in this window
    end = _cumsum(length + 1)  # + 1 end-of-window slot
    start = jnp.concatenate([jnp.zeros((1,), end.dtype), end[:-1]])
    # re-derive the counts from the cumulative sum: this materialises them, so XLA does
    # not fuse the inversion's chain of operations into every gather below
    length = end - start - 1
    m = length - q
    overflow = overflow_count | (m_raw > ke) | (end > npool)

    # ---- slot level
    slot = jnp.arange(npool, dtype=jnp.int32)
    seg_start = jnp.zeros(npool, bool).at[start].set(True, mode="drop")
    page = jnp.maximum(_cumsum(seg_start.astype(jnp.int32)) - 1, 0)
    start_s = start[page]
    r = slot - start_s
    in_use = slot < end[-1]
    m_s, len_s = m[page], length[page]
    pois_s, per_s, sig_s = is_pois[page], is_per[page], is_sig[page]

    # sorted times of the m random events: exponential spacings, S_r / S_m
    e = jax.random.exponential(key_exp, (npool,), dtype)
    e = jnp.where(r <= m_s, e, 0.0)
    csum = _segmented_cumsum(e, r, ke + 1)
    total = csum[jnp.clip(start + m, 0, npool - 1)][page]
    total = jnp.where(total > 0, total, 1.0)
    is_rand = (r < m_s) & in_use
    t_rand = jnp.where(is_rand, wd * csum / total, wd)
    # labels: a Poisson page's event is a change w.p. ξ/(ξ+ρ) (superposition), a signal
    # page's change is crawled w.p. prob
    uu = jax.random.uniform(key_unif, (npool,), dtype)
    p_change = (xi / (xi + rate))[page]
    chg_rand = is_rand & jnp.where(pois_s, uu < p_change, True)
    crl_rand = is_rand & jnp.where(pois_s, uu >= p_change, sig_s & (uu < prob[page]))

    # periodic pages: move each change behind the crawls that precede it
    per_page_s, first_s, q_s = per[page], first[page], q[page]
    before = jnp.clip(jnp.ceil((t_rand - first_s) / per_page_s), 0, q_s).astype(jnp.int32)
    target = jnp.where(per_s & is_rand, start_s + r + before, npool)
    p_chg = jnp.zeros(npool, bool).at[target].set(True, mode="drop")
    p_time = jnp.zeros(npool, dtype).at[target].set(t_rand, mode="drop")
    p_cum = _cumsum(p_chg.astype(jnp.int32))
    p_excl = p_cum - p_chg
    k_idx = r - (p_excl - p_excl[start][page])  # index of a periodic crawl slot
    p_crl_time = jnp.minimum(first_s + k_idx.astype(dtype) * per_page_s, wd)
    is_ev = (r < len_s) & in_use
    chg = jnp.where(per_s, p_chg & is_ev, chg_rand)
    crl = jnp.where(per_s, is_ev & ~p_chg, crl_rand)
    t = jnp.where(per_s, jnp.where(p_chg, p_time, p_crl_time), t_rand)
    t = jnp.where(is_ev, t, wd)
    t, chg, crl, is_ev, page, start_s = jax.lax.optimization_barrier(
        (t, chg, crl, is_ev, page, start_s)
    )

    # ---- uncrawled changes after each slot: n = C - C(at last crawl), or n0 + C
    chg_i = chg.astype(jnp.int32)
    cg = _cumsum(chg_i)  # global count of changes up to and including the slot
    cg0 = (cg - chg_i)[start]  # before each page's first slot
    n0_s = n0[page]
    last_crawl = _cummax(jnp.where(crl, slot, -1))
    has = last_crawl >= start_s
    lc = jnp.maximum(last_crawl, 0)
    n_after = jnp.where(has, cg - cg[lc], cg - cg0[page] + n0_s)
    t_next = jnp.concatenate([t[1:], wd[None]])
    dur = jnp.where(is_ev, jnp.maximum(t_next - t, 0.0), 0.0)
    t_first = t[jnp.clip(start, 0, npool - 1)]
    harm = harmonic_number(n0, dtype) * t_first + jax.ops.segment_sum(
        harmonic_number(n_after, dtype) * dur, page, n, indices_are_sorted=True
    )
    stale = jnp.where(n0 > 0, t_first, 0.0) + jax.ops.segment_sum(
        jnp.where(n_after > 0, dur, 0.0), page, n, indices_are_sorted=True
    )
    stale = jnp.clip(stale, 0.0, wd)

    # ---- observations at crawl slots, scattered into (n, kr)
    prev = jnp.concatenate([jnp.full((1,), -1, jnp.int32), last_crawl[:-1]])
    has_prev = prev >= start_s
    pv = jnp.maximum(prev, 0)
    count = jnp.where(has_prev, cg - cg[pv], cg - cg0[page] + n0_s)
    interval = t - jnp.where(has_prev, t[pv], -since[page])
    crl_i = crl.astype(jnp.int32)
    kg = _cumsum(crl_i)
    rank = kg - (kg - crl_i)[start][page] - 1
    rec = crl & (rank < kr)
    dest = jnp.where(rec, page * kr + rank, n * kr)
    lost = jax.ops.segment_max(
        (crl & (rank >= kr)).astype(jnp.int32), page, n, indices_are_sorted=True
    )
    overflow = overflow | (lost > 0)

    def scatter(values, fill):
        flat = jnp.full((n * kr,), fill, values.dtype).at[dest].set(values, mode="drop")
        return flat.reshape(n, kr)

    counts = scatter(count, 0)
    obs = Observations(
        intervals=scatter(interval, 0.0),
        changed=(counts > 0).astype(dtype),
        mask=scatter(rec, False),
        counts=counts,
        crawl_times=scatter(t, inf),
    )

    # ---- carry (from each page's end-of-window slot)
    end_slot = jnp.clip(start + length, 0, npool - 1)
    lc_end = last_crawl[end_slot]
    crawled = lc_end >= start
    num_changes = (cg[end_slot] - cg0).astype(jnp.int32)
    num_crawls = (kg[end_slot] - (kg - crl_i)[start]).astype(jnp.int32)
    since_new = jnp.where(crawled, wd - t[jnp.maximum(lc_end, 0)], since + wd)
    n_new = n_after[end_slot].astype(jnp.int32)

    # ---- requests: an independent Poisson process, split by the fresh / stale time
    fresh_time = wd - stale
    key_fresh = key_req
    if config.requests:
        heavy = zeta * wd > _LIGHT_MEAN
        kq, hp = config.request_capacity, config.heavy_pages
        req, over_req = _poisson_counts(
            key_fresh, zeta * jnp.stack([fresh_time, stale]), heavy, kq, hp
        )
        fresh_req, stale_req = req[0], req[1]
        overflow = overflow | over_req
    else:
        fresh_req = stale_req = jnp.zeros((n,), jnp.int32)
    fresh_req = fresh_req.astype(dtype)
    stale_req = stale_req.astype(dtype)

    new = (time + wd, since_new, n_new)
    out = Window(
        observations=obs,
        num_changes=num_changes,
        num_crawls=num_crawls,
        harmonic=harm,
        stale_time=stale,
        requests=fresh_req + stale_req,
        fresh_requests=fresh_req,
        overflow=overflow,
        events=Events(page=page, time=t, is_change=chg, is_crawl=crl, valid=is_ev),
    )
    return new, out


def simulate_window(
    key, state: SimState, problem: CrawlProblem, schedule: Schedule, config: SimConfig
):
    """Simulate one window ``(t, t + w]`` for every page; returns ``(new_state, Window)``.

    Exact in distribution (up to flagged overflows and the working precision):

    * changes are a Poisson process of rate ξ (L2C §2, K19 §2) and Poisson crawls one of
      rate ρ (L2C Δ_R, K19 Π⁻): for a Poisson page the superposition, Poisson((ξ+ρ)w)
      events at sorted uniform times (exponential spacings), each a change with
      probability ξ/(ξ+ρ) and otherwise a crawl;
    * periodic crawls are at ``phase + k * period`` (L2C K_R, App. H);
    * a signal crawl follows each change with probability ``prob`` (K19 eq. 6, Π°);
    * requests served fresh / stale are Poisson with means ζ × fresh / stale time (the
      request process is an independent Poisson process; L2C eq. 2-3).

    The staleness integrals ∫H(N) and ∫1{N>0} are sums over the segments between events
    (N is piecewise constant), with no time grid.  A change and a crawl never coincide
    except for a signal crawl, which happens right after its change.

    Events are stored flat (each page a contiguous run of ``pool`` slots) and processed
    with global scans, gathers and scatters, so the work grows with the number of
    events, not with ``pages × capacity``.  Pure and jittable; ``config`` is static
    (close over it).  Leading batch axes of the problem are vmapped; vmap over keys for
    seeds.
    """
    xi = problem.change_rate
    shape = jnp.shape(xi)
    batch = shape[:-1]
    sched = jax.tree_util.tree_map(lambda a: jnp.broadcast_to(a, shape), schedule)
    zeta = jnp.broadcast_to(problem.importance, shape).astype(xi.dtype)
    time = jnp.broadcast_to(jnp.asarray(state.time, xi.dtype), batch)
    fn = functools.partial(_window_1d, config=config)
    for _ in batch:
        fn = jax.vmap(fn)
    if batch:
        keys = jax.random.split(key, math.prod(batch)).reshape(batch)
    else:
        keys = key
    (t_new, since_new, n_new), out = fn(
        keys, time, state.since_crawl, state.num_changes, xi, zeta,
        sched.kind, sched.rate.astype(xi.dtype), sched.prob.astype(xi.dtype),
        sched.period.astype(xi.dtype), sched.phase.astype(xi.dtype),
    )
    return SimState(time=t_new, since_crawl=since_new, num_changes=n_new), out


# --------------------------------------------------------------------------- many windows
class Totals(NamedTuple):
    """Per-page sums over the windows of :func:`simulate` (all ``(..., n)``).

    Attributes:
      harmonic: :math:`\\int H(N(s))\\,ds` (K19 eq. 1-2, unweighted).
      stale_time: :math:`\\int 1\\{N(s) > 0\\}\\,ds`.
      requests: number of requests.
      fresh_requests: requests served fresh (L2C eq. 2, unnormalised).
      crawls: number of crawls.
      changes: number of changes.
      overflow: number of windows in which the page overflowed a capacity.
    """

    harmonic: jax.Array
    stale_time: jax.Array
    requests: jax.Array
    fresh_requests: jax.Array
    crawls: jax.Array
    changes: jax.Array
    overflow: jax.Array


def _zero_totals(shape, dtype) -> Totals:
    z = jnp.zeros(shape, dtype)
    zi = jnp.zeros(shape, jnp.int32)
    return Totals(z, z, z, z, z, z, zi)


def _add(tot: Totals, win: Window) -> Totals:
    dtype = tot.harmonic.dtype
    return Totals(
        harmonic=tot.harmonic + win.harmonic,
        stale_time=tot.stale_time + win.stale_time,
        requests=tot.requests + win.requests,
        fresh_requests=tot.fresh_requests + win.fresh_requests,
        crawls=tot.crawls + win.num_crawls.astype(dtype),
        changes=tot.changes + win.num_changes.astype(dtype),
        overflow=tot.overflow + win.overflow.astype(jnp.int32),
    )


def simulate(
    key,
    problem: CrawlProblem,
    schedule: Schedule,
    state: SimState,
    config: SimConfig,
    num_windows: int,
    *,
    schedule_per_window: bool = False,
    record_fn: Optional[Callable[[Window], Any]] = None,
):
    """Run ``num_windows`` windows in one ``jax.lax.scan``.

    Args:
      key: PRNG key.
      problem: the pages.
      schedule: a :class:`Schedule`, or with ``schedule_per_window=True`` one whose
        leaves have a leading axis of length ``num_windows`` (a policy per window).
      state: the initial :class:`SimState` (:func:`init_state`, :func:`stationary_state`).
      config: static :class:`SimConfig`.
      num_windows: number of windows (static).
      record_fn: optional ``Window -> pytree`` whose outputs are stacked over windows
        (e.g. ``lambda w: w.observations`` for the crawl histories; see :func:`history`).
        Default: nothing is stacked, so memory stays O(pages).

    Returns:
      ``(final_state, totals, records)``: the state after the last window, the per-page
      :class:`Totals`, and the stacked records (``None`` without ``record_fn``).
    """
    if not isinstance(num_windows, int) or num_windows < 1:
        raise ValueError(f"num_windows must be a positive int, got {num_windows!r}")
    _check_schedule(
        problem,
        jax.tree_util.tree_map(lambda a: a[0], schedule) if schedule_per_window else schedule,
    )
    keys = jax.random.split(key, num_windows)
    shape = jnp.shape(problem.change_rate)
    dtype = problem.change_rate.dtype

    def body(carry, xs):
        st, tot = carry
        k, sched = xs
        sched = schedule if sched is None else sched
        st, win = simulate_window(k, st, problem, sched, config)
        rec = record_fn(win) if record_fn is not None else None
        return (st, _add(tot, win)), rec

    xs = (keys, schedule if schedule_per_window else None)
    (final, tot), recs = jax.lax.scan(body, (state, _zero_totals(shape, dtype)), xs)
    return final, tot, recs


def history(records: Observations) -> Observations:
    """Concatenate per-window observations stacked by :func:`simulate` into one history.

    ``records`` has leaves ``(T, ..., n, K)`` (from ``record_fn=lambda w: w.observations``);
    the result has leaves ``(..., n, T * K)`` in time order, masked where no crawl
    happened: the padded-history format of :mod:`jaxcrawl.estimators`.  ``crawl_times``
    stays relative to each window's start.
    """

    def merge(a):
        a = jnp.moveaxis(a, 0, -2)
        return a.reshape(a.shape[:-2] + (a.shape[-2] * a.shape[-1],))

    return jax.tree_util.tree_map(merge, records)


# --------------------------------------------------------------------------- Monte Carlo
class Evaluation(NamedTuple):
    """Monte-Carlo costs of a schedule, page-averaged and time-averaged, with standard errors.

    Every ``*_se`` is the standard error of the estimate above it: pages are independent,
    so it pools each page's variance across the independent replicates,
    ``se = sqrt(sum_i s_i^2 / R) / n`` (``n(R - 1)`` degrees of freedom); the ratio's uses
    the delta method.

    Attributes:
      harmonic_cost: (1/n) Σ μ_i (1/T) ∫ H(N_i) (K19 eq. 1 with eq. 2, normalised per page
        as K19 §9.2); compare with K19 Prop. 1 / Prop. 4.
      binary_cost: (1/n) Σ μ_i (1/T) ∫ 1{N_i > 0} (K19 supplement eq. 12-13).
      freshness: (1/n) Σ ζ_i (1/T) ∫ 1{N_i = 0}: expected requests served fresh per unit
        time, from the fresh time (L2C eq. 3-4; App. H for uniform intervals).
      fresh_requests: (1/n) (1/T) Σ requests served fresh, counted (L2C eq. 2 / T).
      fresh_fraction: served-fresh requests / all requests.
      crawl_rate: crawls per unit time, summed over pages (compare with the bandwidth).
      overflow: number of page-windows that overflowed a capacity (must be 0 for exact
        results).
      num_page_windows: pages × windows × replicates simulated.
    """

    harmonic_cost: jax.Array
    harmonic_cost_se: jax.Array
    binary_cost: jax.Array
    binary_cost_se: jax.Array
    freshness: jax.Array
    freshness_se: jax.Array
    fresh_requests: jax.Array
    fresh_requests_se: jax.Array
    fresh_fraction: jax.Array
    fresh_fraction_se: jax.Array
    crawl_rate: jax.Array
    crawl_rate_se: jax.Array
    overflow: jax.Array
    num_page_windows: jax.Array


def _mean_se(x):
    """x: (R, ..., n) per replicate and page; mean over both and pooled standard error."""
    r, n = x.shape[0], x.shape[-1]
    mean = jnp.mean(x, axis=(0, -1))
    var_page = jnp.var(x, axis=0, ddof=1)  # (..., n)
    se = jnp.sqrt(jnp.sum(var_page, axis=-1) / r) / n
    return mean, se


def monte_carlo(
    key,
    problem: CrawlProblem,
    schedule: Schedule,
    config: SimConfig,
    num_windows: int,
    *,
    num_replicates: int = 4,
    initial: Optional[SimState] = None,
) -> Evaluation:
    """Monte-Carlo costs of ``schedule`` over ``num_windows * config.window`` time units.

    Runs ``num_replicates`` independent replicates of :func:`simulate` (as one problem
    with the pages repeated, since pages are independent; ``config`` is for one copy and
    its pool is scaled), each from ``initial`` or, by default, from a draw of
    :func:`stationary_state` (then
    every estimate is unbiased for the long-run closed forms: K19 Prop. 1 and 4, K19
    supplement eq. 12-13, L2C eq. 4 and App. H).  Jittable with ``config``,
    ``num_windows`` and ``num_replicates`` static.
    """
    if not isinstance(num_replicates, int) or num_replicates < 2:
        raise ValueError("num_replicates must be an int >= 2 (standard errors need two)")
    key_init, key_sim = jax.random.split(key)
    state = _replicated_state(key_init, problem, schedule, num_replicates, initial)
    return _monte_carlo_core(key_sim, problem, schedule, state, config, num_windows, num_replicates)


def _tile(a, shape, r):
    """Repeat the pages r times along the last axis: (..., n) -> (..., r * n)."""
    a = jnp.broadcast_to(a, shape)
    return jnp.concatenate([a] * r, axis=-1)


def _tiled_problem(problem, schedule, r):
    shape = jnp.shape(problem.change_rate)
    tiled = CrawlProblem(
        _tile(problem.importance, shape, r), _tile(problem.change_rate, shape, r),
        problem.bandwidth, _tile(problem.complete, shape, r),
    )
    return tiled, jax.tree_util.tree_map(lambda a: _tile(a, shape, r), schedule)


def _replicated_state(key, problem, schedule, r, initial):
    """Initial states of r replicates, pages repeated: independent stationary draws, or
    ``initial`` repeated."""
    tiled, sched = _tiled_problem(problem, schedule, r)
    if initial is None:
        return stationary_state(key, tiled, sched)
    shape = jnp.shape(problem.change_rate)
    return SimState(
        time=initial.time,
        since_crawl=_tile(initial.since_crawl, shape, r),
        num_changes=_tile(initial.num_changes, shape, r),
    )


def _monte_carlo_core(key, problem, schedule, state, config, num_windows, r):
    """Pages are independent, so r replicates of n pages are one problem of r * n pages
    (no vmap: one flat pool, one compilation of the window)."""
    dtype = problem.change_rate.dtype
    horizon = jnp.asarray(num_windows * config.window, dtype)
    shape = jnp.shape(problem.change_rate)
    num_replicates = r
    tiled, sched = _tiled_problem(problem, schedule, r)
    cfg = dataclasses.replace(
        config,
        pool_capacity=config.pool_capacity * r,
        heavy_pages=config.heavy_pages * r,
        heavy_event_pages=config.heavy_event_pages * r,
    )
    _, tot, _ = simulate(key, tiled, sched, state, cfg, num_windows)

    def split(a):  # (..., r * n) -> (r, ..., n)
        return jnp.moveaxis(a.reshape(shape[:-1] + (r, shape[-1])), -2, 0)

    tot = jax.tree_util.tree_map(split, tot)
    mu = jnp.broadcast_to(problem.importance, jnp.shape(problem.change_rate))
    harm, harm_se = _mean_se(mu * tot.harmonic / horizon)
    binc, bin_se = _mean_se(mu * tot.stale_time / horizon)
    fr, fr_se = _mean_se(mu * (horizon - tot.stale_time) / horizon)
    fq, fq_se = _mean_se(tot.fresh_requests / horizon)
    n = problem.change_rate.shape[-1]
    cr, cr_se = _mean_se(tot.crawls / horizon)
    total_req = jnp.sum(tot.requests, axis=(0, -1))
    frac = jnp.sum(tot.fresh_requests, axis=(0, -1)) / jnp.maximum(total_req, 1.0)
    lin = tot.fresh_requests - frac[..., None] * tot.requests  # delta-method linearisation
    var_lin = jnp.sum(jnp.var(lin, axis=0, ddof=1), axis=-1)
    frac_se = jnp.sqrt(var_lin * num_replicates) / jnp.maximum(total_req, 1.0)
    return Evaluation(
        harmonic_cost=harm,
        harmonic_cost_se=harm_se,
        binary_cost=binc,
        binary_cost_se=bin_se,
        freshness=fr,
        freshness_se=fr_se,
        fresh_requests=fq,
        fresh_requests_se=fq_se,
        fresh_fraction=frac,
        fresh_fraction_se=frac_se,
        crawl_rate=cr * n,
        crawl_rate_se=cr_se * n,
        overflow=jnp.sum(tot.overflow, axis=(0, -1)),
        num_page_windows=jnp.asarray(num_replicates * num_windows * n),
    )


@functools.lru_cache(maxsize=64)
def _compiled_mc(config: SimConfig, num_windows: int, num_replicates: int):
    def fn(key, problem, schedule, state):
        return _monte_carlo_core(key, problem, schedule, state, config, num_windows, num_replicates)

    return jax.jit(fn)


@functools.lru_cache(maxsize=64)
def _compiled_initial(num_replicates: int, stationary: bool):
    if stationary:
        fn = lambda key, problem, schedule, initial: _replicated_state(  # noqa: E731
            key, problem, schedule, num_replicates, None)
    else:
        fn = lambda key, problem, schedule, initial: _replicated_state(  # noqa: E731
            key, problem, schedule, num_replicates, initial)
    return jax.jit(fn)


def evaluate(
    key,
    problem: CrawlProblem,
    policy: Union[Policy, Schedule],
    *,
    horizon: float,
    window: float = 1.0,
    num_replicates: int = 4,
    initial: Union[str, SimState] = "stationary",
    incomplete: str = "poisson",
    phase=0.0,
    tail: float = 1e-9,
    config: Optional[SimConfig] = None,
) -> Evaluation:
    """Monte-Carlo evaluation of a policy: the eager, validating front door of :func:`monte_carlo`.

    Args:
      key: PRNG key.
      problem: the pages (concrete values).
      policy: a solver's :class:`~jaxcrawl.problem.Policy` (run by
        :func:`schedule_from_policy` with ``incomplete`` and ``phase``) or a
        :class:`Schedule`.
      horizon: simulated time per replicate; a whole number of windows.
      window: window length.
      num_replicates: independent replicates (>= 2) for the standard errors.
      initial: ``"stationary"`` (default: unbiased for long-run costs) or a
        :class:`SimState` (transient costs, e.g. L2C Lemma 1).
      tail: per-page-window overflow probability the capacities are sized for.
      config: explicit :class:`SimConfig` (overrides ``window`` and ``tail``).

    Returns:
      :class:`Evaluation`.  Warns (``RuntimeWarning``) if any page-window overflowed.
    """
    if isinstance(policy, Policy):
        schedule = schedule_from_policy(problem, policy, incomplete=incomplete, phase=phase)
    elif isinstance(policy, Schedule):
        schedule = policy
    else:
        raise TypeError("policy must be a jaxcrawl Policy or a simulate.Schedule")
    if not is_concrete(problem, schedule):
        raise ValueError("evaluate needs concrete values; inside jit use monte_carlo")
    _check_schedule(problem, schedule)
    if config is None:
        config = config_for(problem, schedule, window, tail=tail)
    if not config.requests:
        raise ValueError("evaluate needs a config with requests=True (it reports requests served fresh)")
    w = config.window
    nw = horizon / w
    num_windows = int(round(nw))
    if not (math.isfinite(nw) and num_windows >= 1 and abs(nw - num_windows) < 1e-6 * max(1, nw)):
        raise ValueError(
            f"horizon must be a positive whole number of windows; got horizon={horizon!r}, "
            f"window={w!r}"
        )
    r = int(num_replicates)
    if r < 2:
        raise ValueError("num_replicates must be an int >= 2 (standard errors need two)")
    if isinstance(initial, str):
        if initial != "stationary":
            raise ValueError("initial must be 'stationary' or a SimState")
        init = None
    elif isinstance(initial, SimState):
        init = initial
    else:
        raise TypeError("initial must be 'stationary' or a SimState")
    key_init, key_sim = jax.random.split(key)
    state = _compiled_initial(r, init is None)(key_init, problem, schedule, init)
    res = _compiled_mc(config, num_windows, r)(key_sim, problem, schedule, state)
    n_over = int(np.sum(np.asarray(res.overflow)))
    if n_over > 0:
        warnings.warn(
            f"{n_over} page-windows overflowed the capacities of {config}; the events "
            "past a capacity were not simulated or not recorded, so the result is not exact",
            RuntimeWarning,
            stacklevel=2,
        )
    return res
