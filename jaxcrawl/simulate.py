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
draws, per page, the change times (cumulative sums of exponential gaps, so they come out
sorted, no sort needed), the crawl times, and from these it computes *exactly* (no time
grid) the integrals that the policy costs average:

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

Fixed shapes: each window holds at most ``change_capacity`` changes and ``crawl_capacity``
crawls per page.  :func:`poisson_capacity` sizes them so that a page-window overflows
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

    Complete pages crawl on signals with ``policy.prob`` (K19 Π°, Prop. 4); incomplete
    pages crawl as a Poisson process of rate ``policy.rate`` (K19 Π⁻, Prop. 1;
    ``incomplete="poisson"``) or every ``1 / policy.rate`` at ``phase`` (L2C K_R;
    ``incomplete="periodic"``; a zero rate never crawls).
    """
    if incomplete not in ("poisson", "periodic"):
        raise ValueError(f"incomplete must be 'poisson' or 'periodic', got {incomplete!r}")
    rate = jnp.asarray(policy.rate)
    comp = jnp.broadcast_to(problem.complete, rate.shape)
    prob = jnp.where(comp, jnp.asarray(policy.prob, rate.dtype), 0.0)
    if is_concrete(prob):
        p = np.asarray(prob)
        if np.any(~np.isfinite(p)) or np.any(p < 0) or np.any(p > 1 + 1e-6):
            raise ValueError("policy.prob must be in [0, 1] for complete pages")
        _check_nonneg_finite(rate, "policy.rate")
    prob = jnp.clip(prob, 0.0, 1.0)  # removes rounding above 1 only (checked above)
    inc_kind = POISSON if incomplete == "poisson" else PERIODIC
    kind = jnp.where(comp, SIGNAL, inc_kind).astype(jnp.int32)
    if incomplete == "periodic":
        safe = jnp.where(rate > 0, rate, 1.0)
        period = jnp.where(rate > 0, 1.0 / safe, jnp.inf)
        pois_rate = jnp.zeros_like(rate)
    else:
        period = jnp.full_like(rate, jnp.inf)
        pois_rate = rate
    return Schedule(
        kind=kind,
        rate=jnp.where(comp, 0.0, pois_rate),
        prob=prob,
        period=jnp.where(comp, jnp.inf, period),
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
    n = jax.random.poisson(key_count, mean, shape).astype(jnp.int32)
    return SimState(time=t, since_crawl=age.astype(dtype), num_changes=n)


# --------------------------------------------------------------------------- capacities
@dataclasses.dataclass(frozen=True)
class SimConfig:
    """Static settings of the simulator (hashable; the buffers' shapes depend on them).

    Attributes:
      window: window length w (time units, e.g. days).
      change_capacity: maximum number of changes per page per window.
      crawl_capacity: maximum number of crawls per page per window.
      pool_capacity: number of exponential variates drawn per window (per problem
        instance) and shared out among the pages by their event counts, so the random
        numbers drawn scale with the events, not with the capacities.
      request_capacity: maximum fresh (and stale) requests per page per window when
        requests are drawn by inversion; 0 draws them with ``jax.random.poisson`` (no
        capacity).
    """

    window: float
    change_capacity: int
    crawl_capacity: int
    pool_capacity: int
    request_capacity: int = 0

    def __post_init__(self):
        if not (math.isfinite(self.window) and self.window > 0):
            raise ValueError(f"window must be finite and > 0, got {self.window!r}")
        for name in ("change_capacity", "crawl_capacity", "pool_capacity"):
            v = getattr(self, name)
            if int(v) != v or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        v = self.request_capacity
        if int(v) != v or v < 0:
            raise ValueError(f"request_capacity must be an integer >= 0, got {v!r}")


_MAX_INVERSION_CAPACITY = 96


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


def config_for(
    problem: CrawlProblem,
    schedule: Optional[Schedule] = None,
    window: float = 1.0,
    *,
    max_crawl_rate: Optional[float] = None,
    total_crawl_rate: Optional[float] = None,
    tail: float = 1e-9,
    requests: str = "auto",
) -> SimConfig:
    """Capacities for ``problem`` under ``schedule`` (or any schedule within given rates).

    * ``change_capacity``: the Poisson(max ξ · w) quantile at ``tail``;
    * ``crawl_capacity``: the largest of the Poisson quantile of the largest crawl rate
      over POISSON pages (``rate``), SIGNAL pages (``prob · ξ``) and ``max_crawl_rate``,
      and ``ceil(w / min period) + 1`` over PERIODIC pages;
    * ``pool_capacity``: ``2 n`` plus the Poisson quantiles (each at ``tail / 2``) of
      ``(Σ ξ + C) w`` and ``Σ_complete ξ w``, where ``C`` is ``total_crawl_rate`` or else
      the larger of the bandwidth and the schedule's total Poisson rate;
    * ``request_capacity``: the Poisson(max ζ · w) quantile when it is at most 96
      (``requests="auto"`` or ``"inversion"``), else 0 (``jax.random.poisson``).

    A learner whose schedule changes between windows passes ``max_crawl_rate`` (a bound
    on any page's Poisson or signal crawl rate) and, if its rates may sum to more than
    the bandwidth, ``total_crawl_rate``.  Needs concrete values (call it outside ``jit``).
    """
    if not is_concrete(problem, schedule):
        raise ValueError("config_for needs concrete values: call it outside jit")
    if requests not in ("auto", "inversion", "poisson"):
        raise ValueError("requests must be 'auto', 'inversion' or 'poisson'")
    w = float(window)
    if not (math.isfinite(w) and w > 0):
        raise ValueError(f"window must be finite and > 0, got {window!r}")
    xi = np.asarray(problem.change_rate, dtype=np.float64)
    if xi.ndim > 1:
        xi_rows = xi.reshape(-1, xi.shape[-1])
    else:
        xi_rows = xi[None]
    n = xi.shape[-1]
    comp = np.broadcast_to(np.asarray(problem.complete), xi.shape).reshape(xi_rows.shape)
    change_cap = poisson_capacity(float(xi.max()) * w, tail)
    crawl_rates = [0.0]
    periodic_cap = 1
    pois_total = 0.0
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
            pois_total = float(
                np.where(kind == POISSON, rate, 0.0).reshape(xi_rows.shape).sum(-1).max()
            )
        if np.any(kind == SIGNAL):
            crawl_rates.append(float((prob * xi)[kind == SIGNAL].max()))
        if np.any(kind == PERIODIC):
            pmin = float(per[kind == PERIODIC].min())
            if math.isfinite(pmin):
                periodic_cap = int(math.ceil(w / pmin)) + 1
    crawl_cap = max(poisson_capacity(max(crawl_rates) * w, tail), periodic_cap)
    if total_crawl_rate is None:
        bw = float(np.max(np.asarray(problem.bandwidth, np.float64)))
        total_crawl_rate = max(bw, pois_total)
    elif not (math.isfinite(total_crawl_rate) and total_crawl_rate >= 0):
        raise ValueError("total_crawl_rate must be finite and >= 0")
    row_mean = float((xi_rows.sum(-1)).max() + total_crawl_rate) * w
    sig_mean = float(np.where(comp, xi_rows, 0.0).sum(-1).max()) * w
    pool_cap = 2 * n + poisson_capacity(row_mean, tail / 2)
    if sig_mean > 0:
        pool_cap += poisson_capacity(sig_mean, tail / 2)
    zeta_max = float(np.max(np.asarray(problem.importance, np.float64))) * w
    req_cap = poisson_capacity(zeta_max, tail)
    if requests == "poisson" or (requests == "auto" and req_cap > _MAX_INVERSION_CAPACITY):
        req_cap = 0
    return SimConfig(
        window=w,
        change_capacity=change_cap,
        crawl_capacity=crawl_cap,
        pool_capacity=int(pool_cap),
        request_capacity=int(req_cap),
    )


# --------------------------------------------------------------------------- samplers
def _cumsum(x):
    """Inclusive cumulative sum along the last axis (an associative scan: fast on CPU)."""
    return jax.lax.associative_scan(jnp.add, x, axis=x.ndim - 1)


def _reverse_cumsum(x):
    return jax.lax.associative_scan(jnp.add, x, axis=x.ndim - 1, reverse=True)


def _uniform_fine(key, shape, dtype):
    """Uniform on (0, 1) with 64 random bits, so tiny tail probabilities are resolved.

    ``hi · 2^-32 + (lo + 1/2) · 2^-64``: near 0 its resolution is far below 1e-9, which a
    single float32 uniform (resolution 2^-24) cannot give; near 1 it is rounded to the
    working precision.
    """
    b = jax.random.bits(key, shape + (2,), jnp.uint32)
    hi = b[..., 0].astype(dtype) * jnp.asarray(2.0 ** -32, dtype)
    lo = (b[..., 1].astype(dtype) + 0.5) * jnp.asarray(2.0 ** -64, dtype)
    return hi + lo


def _poisson_inverse(u, mean, cap):
    """Poisson(mean) by inversion of the upper tail: ``#{k <= cap : u < P(X > k)}``.

    Exact in distribution up to the working precision for counts ``<= cap``; returns
    ``cap + 1`` when the count exceeds ``cap`` (an overflow).  ``mean`` may be 0.
    """
    dtype = u.dtype
    k = jnp.arange(cap + 2, dtype=dtype)
    lgam = jax.lax.lgamma(k + 1.0)
    m = mean[..., None]
    pos = m > 0
    logm = jnp.log(jnp.where(pos, m, 1.0))
    pmf = jnp.where(pos, jnp.exp(k * logm - m - lgam), (k == 0).astype(dtype))
    upper = _reverse_cumsum(pmf[..., 1:])  # entry k: sum_{j=k+1}^{cap+1} pmf_j ~ P(X > k)
    return jnp.sum(u[..., None] < upper, axis=-1, dtype=jnp.int32)


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


class Window(NamedTuple):
    """Everything that happened to every page in one window.

    Attributes:
      observations: the crawls' :class:`Observations`.
      num_changes: ``(..., n)`` int32 changes in the window (the change signals a
        complete page sends, K19 eq. 11; full observation of the change process).
      num_crawls: ``(..., n)`` int32 crawls in the window.
      change_times: ``(..., n, change_capacity)`` change times from the window's start,
        ``inf`` past the last one.
      harmonic: ``(..., n)`` exact ∫ H(N(s)) ds over the window (K19 eq. 1-2).
      stale_time: ``(..., n)`` exact ∫ 1{N(s) > 0} ds (binary staleness).
      requests: ``(..., n)`` number of requests in the window (Poisson(ζ w)).
      fresh_requests: ``(..., n)`` requests that found the page fresh (L2C eq. 2).
      overflow: ``(..., n)`` bool: more events than a capacity allowed (the extra events
        were not simulated, so this page-window is not exact).
    """

    observations: Observations
    num_changes: jax.Array
    num_crawls: jax.Array
    change_times: jax.Array
    harmonic: jax.Array
    stale_time: jax.Array
    requests: jax.Array
    fresh_requests: jax.Array
    overflow: jax.Array


def _take(a, idx):
    return jnp.take_along_axis(a, idx, axis=-1)


def _spacings(pool, start, count, slots, kmax):
    """Sorted uniforms on (0, 1) from exponential spacings taken out of the pool.

    Page ``i`` reads ``count_i + 1`` exponentials ``E_0..E_count`` at ``pool[start_i:]``;
    ``S_j / S_count`` (``S`` the partial sums) for ``j < count`` are distributed as the
    order statistics of ``count`` uniforms.  Returns ``(..., kmax)`` with ``inf`` past
    ``count``.
    """
    p = pool.shape[-1]
    idx = jnp.clip(start[..., None] + slots[: kmax + 1], 0, p - 1)
    e = jnp.take_along_axis(pool[..., None, :], idx, axis=-1) if pool.ndim > 1 else pool[idx]
    e = jnp.where(slots[: kmax + 1] <= count[..., None], e, 0.0)
    s = _cumsum(e)
    total = _take(s, count[..., None])
    total = jnp.where(total > 0, total, 1.0)
    frac = s[..., :kmax] / total
    return jnp.where(slots[:kmax] < count[..., None], frac, jnp.inf), e


def simulate_window(
    key, state: SimState, problem: CrawlProblem, schedule: Schedule, config: SimConfig
):
    """Simulate one window ``(t, t + w]`` for every page; returns ``(new_state, Window)``.

    Exact in distribution (up to flagged overflows and the working precision):

    * the number of changes is Poisson(ξw) and, given it, the change times are sorted
      uniforms (from exponential spacings): a Poisson process of rate ξ (L2C §2, K19 §2);
      the same for Poisson crawls at rate ρ (L2C Δ_R, K19 Π⁻);
    * periodic crawls are at ``phase + k * period`` (L2C K_R, App. H);
    * a signal crawl follows each change with probability ``prob`` (K19 eq. 6, Π°);
    * requests served fresh / stale are Poisson with means ζ × fresh / stale time
      (the request process is an independent Poisson process; L2C eq. 2-3).

    The staleness integrals are sums over the segments between events (no time grid).
    A change and a crawl never coincide except for a signal crawl, which happens right
    after its change (so that change is crawled).

    Counts are drawn by inverting the Poisson upper tail with a 64-bit uniform, and the
    event times from one shared pool of exponentials, so the random numbers drawn grow
    with the events, not with the capacities.  Pure and jittable; ``config`` is static
    (close over it).  Works for any leading batch axes of the problem; vmap over keys
    for seeds.
    """
    w = config.window
    kc, kr = config.change_capacity, config.crawl_capacity
    xi = problem.change_rate
    dtype = xi.dtype
    shape = jnp.shape(xi)
    batch = shape[:-1]
    sched = jax.tree_util.tree_map(lambda a: jnp.broadcast_to(a, shape), schedule)
    zeta = jnp.broadcast_to(problem.importance, shape)
    inf = jnp.asarray(jnp.inf, dtype)
    wd = jnp.asarray(w, dtype)
    key_count, key_pool, key_fresh, key_stale = jax.random.split(key, 4)
    is_pois = sched.kind == POISSON
    is_per = sched.kind == PERIODIC
    is_sig = sched.kind == SIGNAL
    slots = jnp.arange(max(kc, kr) + 2)

    # ---- how many changes and Poisson crawls
    u = _uniform_fine(key_count, shape + (2,), dtype)
    n_c_raw = _poisson_inverse(u[..., 0], xi * wd, kc)
    rate = jnp.where(is_pois, sched.rate, 0.0)
    n_p_raw = _poisson_inverse(u[..., 1], rate * wd, kr)
    overflow_c = n_c_raw > kc
    n_c = jnp.minimum(n_c_raw, kc)
    n_p = jnp.minimum(n_p_raw, kr)

    # ---- their times, from one pool of exponentials shared out by the counts
    need = (n_c + 1) + jnp.where(is_pois, n_p + 1, 0) + jnp.where(is_sig, n_c, 0)
    end = _cumsum(need)
    start = end - need
    pool = jax.random.exponential(key_pool, batch + (config.pool_capacity,), dtype)
    overflow_pool = end > config.pool_capacity
    frac_c, _ = _spacings(pool, start, n_c, slots, kc)
    c = frac_c * wd  # (..., kc), inf past n_c
    valid_c = slots[:kc] < n_c[..., None]
    start2 = start + n_c + 1
    kx = max(kr, kc)
    frac_p, e2 = _spacings(pool, start2, jnp.where(is_pois, n_p, kx), slots, kx)
    y_pois = jnp.where(slots[:kr] < n_p[..., None], frac_p[..., :kr] * wd, inf)

    # ---- periodic crawls at phase + k * period
    per = sched.period
    per_ok = jnp.isfinite(per) & (per > 0)
    per_safe = jnp.where(per_ok, per, 1.0)
    t0 = jnp.broadcast_to(state.time, batch)[..., None]
    first = per_safe - jnp.mod(t0 - sched.phase, per_safe)  # in (0, period]
    y_per_all = first[..., None] + slots[: kr + 1].astype(dtype) * per_safe[..., None]
    y_per_all = jnp.where(per_ok[..., None], y_per_all, inf)
    overflow_per = is_per & (y_per_all[..., kr] <= wd)
    y_per = jnp.where(y_per_all[..., :kr] <= wd, y_per_all[..., :kr], inf)

    # ---- signal crawls: each change is crawled with probability prob
    u_sig = -jnp.expm1(-e2[..., :kc])  # uniforms from the (unused by signal pages) spacings
    flagged = valid_c & (u_sig < sched.prob[..., None]) & is_sig[..., None]
    cum = _cumsum(flagged.astype(jnp.int32))
    n_s = cum[..., -1]
    overflow_sig = is_sig & (n_s > kr)
    # index of the (k+1)-th flagged change = number of changes whose running count <= k
    idx = jnp.sum(cum[..., :, None] <= slots[:kr], axis=-2, dtype=jnp.int32)
    y_sig = jnp.where(slots[:kr] < n_s[..., None], _take(c, jnp.minimum(idx, kc - 1)), inf)

    kind = sched.kind[..., None]
    y = jnp.where(kind == POISSON, y_pois, jnp.where(kind == PERIODIC, y_per, y_sig))
    valid_y = y <= wd
    y = jnp.where(valid_y, y, inf)
    n_crawl = jnp.sum(valid_y, axis=-1, dtype=jnp.int32)
    overflow = (
        overflow_c | overflow_pool | (is_pois & (n_p_raw > kr)) | overflow_per | overflow_sig
    )

    # ---- merge by comparison: lt[i, k] = crawl k strictly before change i
    lt = y[..., None, :] < c[..., :, None]  # (..., kc, kr)
    crawls_before = jnp.sum(lt, axis=-1, dtype=jnp.int32)  # J_i
    # changes at or before crawl k (a signal crawl follows its own change)
    chg_upto = jnp.sum(valid_c[..., :, None] & ~lt, axis=-2, dtype=jnp.int32)  # M_k

    n0 = state.num_changes
    rank = jnp.arange(1, kc + 1, dtype=jnp.int32)
    start_grp = _take(chg_upto, jnp.clip(crawls_before - 1, 0, kr - 1))
    n_after = jnp.where(crawls_before > 0, rank - start_grp, n0[..., None] + rank)
    c_next = jnp.concatenate([c[..., 1:], jnp.full(shape + (1,), inf)], axis=-1)
    y_ext = jnp.concatenate([y, jnp.full(shape + (1,), inf)], axis=-1)
    y_next = _take(y_ext, crawls_before)
    seg_end = jnp.minimum(jnp.minimum(c_next, y_next), wd)
    seg = jnp.where(valid_c, seg_end - c, 0.0)
    d0 = jnp.minimum(jnp.minimum(c[..., 0], y[..., 0]), wd)
    harm = harmonic_number(n0, dtype) * d0 + jnp.sum(
        harmonic_number(n_after, dtype) * seg, axis=-1
    )
    stale = jnp.where(n0 > 0, d0, 0.0) + jnp.sum(jnp.where(n_after > 0, seg, 0.0), axis=-1)
    stale = jnp.clip(stale, 0.0, wd)

    # ---- observations
    prev_upto = jnp.concatenate([jnp.zeros(shape + (1,), jnp.int32), chg_upto[..., :-1]], axis=-1)
    counts = chg_upto - prev_upto
    counts = counts.at[..., 0].add(n0)
    counts = jnp.where(valid_y, counts, 0)
    y_prev = jnp.concatenate([-state.since_crawl[..., None], y[..., :-1]], axis=-1)
    intervals = jnp.where(valid_y, y - y_prev, 0.0)
    obs = Observations(
        intervals=intervals,
        changed=(counts > 0).astype(dtype),
        mask=valid_y,
        counts=counts,
        crawl_times=y,
    )

    # ---- requests (an independent Poisson process, split by the fresh / stale time)
    fresh_time = wd - stale
    if config.request_capacity > 0:
        kq = config.request_capacity
        uq = _uniform_fine(key_fresh, shape + (2,), dtype)
        fresh_req = _poisson_inverse(uq[..., 0], zeta * fresh_time, kq)
        stale_req = _poisson_inverse(uq[..., 1], zeta * stale, kq)
        overflow = overflow | (fresh_req > kq) | (stale_req > kq)
        fresh_req = fresh_req.astype(dtype)
        stale_req = stale_req.astype(dtype)
    else:
        fresh_req = jax.random.poisson(key_fresh, zeta * fresh_time, shape).astype(dtype)
        stale_req = jax.random.poisson(key_stale, zeta * stale, shape).astype(dtype)

    # ---- carry
    last = jnp.maximum(n_crawl - 1, 0)[..., None]
    y_last = _take(y, last)[..., 0]
    m_last = _take(chg_upto, last)[..., 0]
    crawled = n_crawl > 0
    n_chg = n_c
    new_state = SimState(
        time=state.time + wd,
        since_crawl=jnp.where(crawled, wd - y_last, state.since_crawl + wd),
        num_changes=jnp.where(crawled, n_chg - m_last, n0 + n_chg).astype(jnp.int32),
    )
    out = Window(
        observations=obs,
        num_changes=n_chg,
        num_crawls=n_crawl,
        change_times=c,
        harmonic=harm,
        stale_time=stale,
        requests=fresh_req + stale_req,
        fresh_requests=fresh_req,
        overflow=overflow,
    )
    return new_state, out


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

    Runs ``num_replicates`` independent replicates (vmapped) of :func:`simulate`, each
    from ``initial`` or, by default, from a fresh draw of :func:`stationary_state` (then
    every estimate is unbiased for the long-run closed forms: K19 Prop. 1 and 4, K19
    supplement eq. 12-13, L2C eq. 4 and App. H).  Jittable with ``config``,
    ``num_windows`` and ``num_replicates`` static.
    """
    if not isinstance(num_replicates, int) or num_replicates < 2:
        raise ValueError("num_replicates must be an int >= 2 (standard errors need two)")
    dtype = problem.change_rate.dtype
    horizon = jnp.asarray(num_windows * config.window, dtype)

    def one(k):
        k_init, k_sim = jax.random.split(k)
        st = stationary_state(k_init, problem, schedule) if initial is None else initial
        _, tot, _ = simulate(k_sim, problem, schedule, st, config, num_windows)
        return tot

    tot = jax.vmap(one)(jax.random.split(key, num_replicates))
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
def _compiled_mc(config: SimConfig, num_windows: int, num_replicates: int, has_initial: bool):
    if has_initial:
        fn = lambda key, problem, schedule, initial: monte_carlo(  # noqa: E731
            key, problem, schedule, config, num_windows,
            num_replicates=num_replicates, initial=initial,
        )
    else:
        fn = lambda key, problem, schedule, initial: monte_carlo(  # noqa: E731
            key, problem, schedule, config, num_windows, num_replicates=num_replicates
        )
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
    w = config.window
    nw = horizon / w
    num_windows = int(round(nw))
    if not (math.isfinite(nw) and num_windows >= 1 and abs(nw - num_windows) < 1e-6 * max(1, nw)):
        raise ValueError(
            f"horizon must be a positive whole number of windows; got horizon={horizon!r}, "
            f"window={w!r}"
        )
    if isinstance(initial, str):
        if initial != "stationary":
            raise ValueError("initial must be 'stationary' or a SimState")
        fn = _compiled_mc(config, num_windows, int(num_replicates), False)
        res = fn(key, problem, schedule, None)
    else:
        fn = _compiled_mc(config, num_windows, int(num_replicates), True)
        res = fn(key, problem, schedule, initial)
    n_over = int(np.sum(np.asarray(res.overflow)))
    if n_over > 0:
        warnings.warn(
            f"{n_over} page-windows overflowed the event capacities "
            f"(change_capacity={config.change_capacity}, crawl_capacity={config.crawl_capacity}); "
            "their events past the capacity were not simulated",
            RuntimeWarning,
            stacklevel=2,
        )
    return res
