"""What carries over between windows (:class:`SimState`) and the simulator's static
capacities (:class:`SimConfig`, :func:`config_for`).

The state is L2C Lemma 1's cache state S(t) extended by K19's uncrawled-change count
N(t) (eq. 1); :func:`stationary_state` draws it from its long-run law (K19 Prop. 1 and
Prop. 4), so Monte-Carlo averages estimate the closed forms without burn-in bias.
"""
from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .._src.checks import is_concrete
from .._src.sampling import LIGHT_MEAN, poisson_any, poisson_capacity
from ..core.problem import CrawlProblem
from ._schedules import PERIODIC, POISSON, SIGNAL, Schedule
from ._validate import check_schedule


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
    problem: CrawlProblem,
    *,
    fresh: ArrayLike = True,
    since_crawl: ArrayLike = 0.0,
    num_changes: ArrayLike | None = None,
    time: ArrayLike = 0.0,
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


def stationary_state(
    key: jax.Array, problem: CrawlProblem, schedule: Schedule, *, time: ArrayLike = 0.0
) -> SimState:
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
    n = poisson_any(key_count, mean)
    return SimState(time=t, since_crawl=age.astype(dtype), num_changes=n)


@dataclasses.dataclass(frozen=True)
class SimConfig:
    """Static settings of the simulator (hashable; the buffers' shapes depend on them).

    Attributes:
      window: window length w (time units, e.g. days).
      event_capacity: maximum number of random events per page per window: changes,
        plus the crawls of a POISSON page.  A page-window with more is an overflow.
      crawl_capacity: slots per page per window in the returned
        :class:`~jaxcrawl.simulate.Observations` (a page-window with more crawls is an
        overflow; its costs stay exact, the observations past the capacity are lost).
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

    def __post_init__(self) -> None:
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


def config_for(
    problem: CrawlProblem,
    schedule: Schedule | None = None,
    window: float = 1.0,
    *,
    max_crawl_rate: float | None = None,
    total_crawl_rate: float | None = None,
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
        check_schedule(problem, schedule)
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
    heavy_events = int(((xi + page_rate) * w > LIGHT_MEAN).reshape(xi_rows.shape).sum(-1).max())
    crawl_cap = max(poisson_capacity(rho_max * w, tail), periodic_cap)
    if total_crawl_rate is None:
        bw = float(np.max(np.asarray(problem.bandwidth, np.float64)))
        total_crawl_rate = max(bw, sched_total)
    elif not (math.isfinite(total_crawl_rate) and total_crawl_rate >= 0):
        raise ValueError("total_crawl_rate must be finite and >= 0")
    row_mean = (float(xi_rows.sum(-1).max()) + float(total_crawl_rate)) * w
    pool_cap = 2 * n + int(math.ceil(total_crawl_rate * w)) + poisson_capacity(row_mean, tail)
    zw = np.broadcast_to(np.asarray(problem.importance, np.float64), xi.shape) * w
    req_cap = poisson_capacity(min(float(zw.max()), LIGHT_MEAN), tail)
    heavy = int((zw.reshape(xi_rows.shape) > LIGHT_MEAN).sum(-1).max())
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
