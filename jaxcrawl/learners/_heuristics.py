r"""The revisit heuristics production crawlers run today, as :class:`~jaxcrawl.learners.Learner` objects.

Every open-source crawler that revisits pages adapts each page's *fetch interval* to what
its fetches see: shrink it when a fetch finds the page changed, grow it when unchanged,
clamp it to ``[min, max]``.  None of them knows or estimates a change rate.  This module
transcribes the documented rules (the rules, in continuous time, not the code: the
crawlers' truncation of intervals to whole seconds or minutes is left out), with each
crawler's own parameter names, units and defaults:

``"nutch-default"`` -- Apache Nutch ``DefaultFetchSchedule`` (:func:`nutch_default`)
    The next fetch is ``fetchTime + fetchInterval``, whatever the page did; the interval
    is ``db.fetch.interval.default`` (``nutch-default.xml``: 2592000 s = 30 days).

``"nutch-adaptive"`` -- Apache Nutch ``AdaptiveFetchSchedule`` (:func:`nutch_adaptive`)
    With the properties of ``nutch-default.xml``: ``db.fetch.schedule.adaptive.inc_rate``
    (0.4), ``.dec_rate`` (0.2), ``.min_interval`` (60.0 s), ``.max_interval``
    (31536000.0 s = 365 days), ``.sync_delta`` (true), ``.sync_delta_rate`` (0.3), and
    the initial interval ``db.fetch.interval.default`` (30 days).  At a fetch at time
    :math:`t`: if the page was modified, :math:`I \leftarrow I(1-\text{dec\_rate})` and the
    modified time becomes :math:`t`; if not, :math:`I \leftarrow I(1+\text{inc\_rate})`.
    With ``sync_delta``: :math:`\delta = t - \text{modifiedTime}`, :math:`I \leftarrow
    \max(I, \delta)` and the reference time is :math:`t - \text{sync\_delta\_rate}\,\delta`
    instead of :math:`t`.  Then :math:`I` is clamped to ``[min_interval, max_interval]``
    and the next fetch is at reference time + :math:`I`.  (The crawler has no Last-Modified
    header here, so modifiedTime is the last fetch that detected a change, as Nutch
    records it from the signature; a first fetch sets it to the fetch time.)  Nutch's
    javadoc warns that rates above 0.4-0.5 destabilise the schedule.

``"stormcrawler-adaptive"`` -- StormCrawler ``AdaptiveScheduler`` (:func:`stormcrawler_adaptive`)
    Configuration keys ``fetchInterval.default`` (1440 min = 1 day),
    ``scheduler.adaptive.fetchInterval.min`` (60 min), ``.fetchInterval.max``
    (20160 min = 2 weeks), ``.fetchInterval.rate.incr`` (0.5), ``.fetchInterval.rate.decr``
    (0.5).  Changed (signature differs): :math:`I \leftarrow (1-\text{decr})I +
    \text{decr}\cdot\min` (the decrease slows down near the minimum); unchanged:
    :math:`I \leftarrow \min(I(1+\text{incr}), \max)`; next fetch at :math:`t + I`.

``"heritrix-wait"`` -- Heritrix ``WaitEvaluator`` (adaptive revisiting; :func:`heritrix_wait`)
    Properties ``initialWaitIntervalSeconds`` (86400 = 1 day), ``minWaitIntervalSeconds``
    (3600), ``maxWaitIntervalSeconds`` (2419200 = 4 weeks), ``unchangedFactor`` (1.5),
    ``changedFactor`` (1.5).  Changed: :math:`I \leftarrow I/\text{changedFactor}`;
    unchanged: :math:`I \leftarrow I\cdot\text{unchangedFactor}`; clamp to ``[min, max]``;
    next fetch at :math:`t + I`.

Sources read: Apache Nutch ``nutch-default.xml`` and the javadoc of
``org.apache.nutch.crawl.AdaptiveFetchSchedule`` / ``DefaultFetchSchedule``; StormCrawler
``AdaptiveScheduler`` javadoc (``com.digitalpebble.stormcrawler.persistence``); Heritrix
``org.archive.crawler.postprocessor.WaitEvaluator`` (property documentation).

**The world.**  Pages change as Poisson processes at the problem's ``change_rate`` (K19
§2; the rate may move between steps: :func:`run_on_path` with a rate path of
:func:`jaxcrawl.simulate.simulate_drift`).  One ``step`` is an epoch of ``epoch_length`` time
units, simulated exactly and event by event per page (a page's next event is its next
change, its next fetch or the epoch's end; the next change is redrawn at each epoch
start, exact by memorylessness), in one ``jax.lax.while_loop`` over all pages at once.
Each fetch sees one bit, *changed since the previous fetch* (L2C eq. 1), and the rule
sets the next fetch.  The costs are the exact integrals :math:`\int H(N(s))ds` and
:math:`\int 1\{N(s)>0\}ds` (K19 eq. 1-2, :math:`N` the uncrawled changes) from the events,
weighted by importance and averaged over pages as in
:func:`jaxcrawl.harmonic_cost` / :func:`~jaxcrawl.binary_cost`.
Complete pages' change signals are ignored (these crawlers do not use them).

**Time units.**  The problem's time unit is set by ``time_unit_seconds`` (default 86400:
rates per day, as in NeurIPS-19); the factories take the crawlers' own units (seconds,
minutes) and convert.

**Budget.**  A heuristic has no bandwidth: its crawl volume is whatever its rule
produces.  :func:`match_budget` finds the ``budget_scale`` that makes the long-run volume
equal a bandwidth (Monte Carlo), the fair comparison with an optimal policy at the same
volume.  For ``"nutch-default"`` the scale multiplies the interval.  The adaptive rules
are *scale-free*: multiplying every interval by :math:`c` leaves the long-run volume
unchanged (the interval settles where the probability of a change per fetch balances
the growth and the shrink factors, :math:`P^* = \log g_u/(\log g_u - \log g_c)`, about
0.6 for Nutch's defaults), so for them the scale is the exponent of the growth factor,
:math:`g_u \to g_u^{c}`: :math:`c > 1` grows intervals faster and lowers the volume; a
scale above 1 also multiplies the ceiling ``max_interval`` by :math:`c` (with the
crawlers' ceilings of two to four weeks a volume of a few percent of the pages per day
is otherwise out of reach: an engineer lowering the volume raises the ceiling too).
"""
from __future__ import annotations

import functools
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxcrawl._src.checks import is_concrete
from jaxcrawl._src.special import harmonic_number
from jaxcrawl.core.problem import CrawlProblem

from ._base import Learner, run_learner

FIXED = 0
"""Rule: fixed interval (Nutch ``DefaultFetchSchedule``)."""
NUTCH = 1
"""Rule: Nutch ``AdaptiveFetchSchedule``."""
STORMCRAWLER = 2
"""Rule: StormCrawler ``AdaptiveScheduler``."""
HERITRIX = 3
"""Rule: Heritrix ``WaitEvaluator``."""

_RULE_NAMES = {FIXED: "nutch-default", NUTCH: "nutch-adaptive", STORMCRAWLER: "stormcrawler-adaptive",
               HERITRIX: "heritrix-wait"}


class HeuristicParams(NamedTuple):
    r"""A heuristic's settings in the problem's time unit (arrays: ``jax.vmap`` sweeps them).

    ``None`` fields take the factory's values (the crawler's defaults or what was passed
    to the factory), so ``HeuristicParams(budget_scale=c)`` changes the scale only.

    Attributes:
      initial_interval: the interval before the first fetch (Nutch
        ``db.fetch.interval.default``, StormCrawler ``fetchInterval.default``, Heritrix
        ``initialWaitIntervalSeconds``); the fixed rule's interval.
      min_interval, max_interval: the clamp.
      grow: factor on an unchanged fetch (Nutch ``1 + inc_rate``, StormCrawler
        ``1 + rate.incr``, Heritrix ``unchangedFactor``).
      shrink: factor on a changed fetch (Nutch ``1 - dec_rate``, StormCrawler
        ``1 - rate.decr``, Heritrix ``1 / changedFactor``).
      sync_delta_rate: Nutch's ``sync_delta_rate`` (0 with ``sync_delta`` off; -1 turns
        the whole sync-delta step off, the others ignore it).
      budget_scale: :math:`c` of :func:`match_budget` (1: the crawler's own settings):
        the fixed rule's interval is multiplied by it, the adaptive rules' growth factor
        raised to it and their ``max_interval`` multiplied by ``max(c, 1)``.
    """

    initial_interval: Any = None
    min_interval: Any = None
    max_interval: Any = None
    grow: Any = None
    shrink: Any = None
    sync_delta_rate: Any = None
    budget_scale: Any = None


class HeuristicState(NamedTuple):
    """State of a heuristic learner (pages on the last axis).

    Attributes:
      time: start of the next epoch.
      interval: ``(n,)`` each page's current fetch interval (the rule's own).
      next_fetch: ``(n,)`` absolute time of each page's next fetch.
      modified: ``(n,)`` time of the last fetch that found the page modified (Nutch's
        modifiedTime; ``-inf`` before the first fetch).
      num_changes: ``(n,)`` int32 changes since the last fetch (K19 N(t)).
      epoch: epochs completed.
      params: :class:`HeuristicParams` (arrays).
    """

    time: jax.Array
    interval: jax.Array
    next_fetch: jax.Array
    modified: jax.Array
    num_changes: jax.Array
    epoch: jax.Array
    params: HeuristicParams


class HeuristicInfo(NamedTuple):
    r"""Diagnostics of one epoch, exact from the simulated events.

    Attributes:
      harmonic_cost: :math:`\frac1n\sum_i\mu_i\frac1L\int H(N_i(s))ds` over the epoch
        (the simulated counterpart of :func:`jaxcrawl.harmonic_cost`).
      binary_cost: :math:`\frac1n\sum_i\mu_i\frac1L\int 1\{N_i(s)>0\}ds`.
      fresh_fraction: expected fraction of requests (Poisson at rates μ) served fresh,
        :math:`1-\sum_i\mu_i\int 1\{N_i>0\}/(L\sum_i\mu_i)`.
      num_crawls: fetches in the epoch (all pages).
      num_changes: changes in the epoch (all pages).
      mean_interval: mean over pages of the current interval at the epoch's end.
      epoch: epochs completed.
      converged: the event loop finished within its iteration cap (else the epoch was
        cut short and its figures are not exact).
    """

    harmonic_cost: jax.Array
    binary_cost: jax.Array
    fresh_fraction: jax.Array
    num_crawls: jax.Array
    num_changes: jax.Array
    mean_interval: jax.Array
    epoch: jax.Array
    converged: jax.Array


def update_interval(rule: int, params: HeuristicParams, interval: ArrayLike, fetch_time: ArrayLike,
                    modified: ArrayLike, changed: ArrayLike) -> tuple[jax.Array, jax.Array, jax.Array]:
    r"""One fetch's update of a page's schedule under ``rule`` (elementwise; module docstring).

    Args:
      rule: :data:`FIXED`, :data:`NUTCH`, :data:`STORMCRAWLER` or :data:`HERITRIX` (static).
      params: complete :class:`HeuristicParams` (no ``None``).
      interval: the interval before the fetch.
      fetch_time: when the fetch happened.
      modified: the last fetch time that found a change (``-inf``: none yet).
      changed: whether this fetch found the page changed.

    Returns:
      ``(interval, next_fetch, modified)`` after the fetch.  (A Nutch next fetch earlier
      than ``fetch_time + min_interval``, possible only when the sync-delta shift exceeds
      a clamped interval, is moved there.)
    """
    p = params
    interval = jnp.asarray(interval)
    t = jnp.asarray(fetch_time, interval.dtype)
    changed = jnp.asarray(changed, bool)
    scale = jnp.asarray(p.budget_scale, interval.dtype)
    grow = jnp.asarray(p.grow, interval.dtype) ** scale
    lo, hi = p.min_interval, p.max_interval * jnp.maximum(scale, 1.0)
    if rule == FIXED:
        return interval, t + interval, jnp.where(changed, t, modified)
    if rule == NUTCH:
        mod = jnp.where(changed | ~jnp.isfinite(modified), t, modified)
        new = jnp.where(changed, interval * p.shrink, interval * grow)
        sync_on = p.sync_delta_rate >= 0
        delta = t - mod
        new = jnp.where(sync_on, jnp.maximum(new, delta), new)
        ref = jnp.where(sync_on, t - jnp.maximum(p.sync_delta_rate, 0.0) * delta, t)
        new = jnp.clip(new, lo, hi)
        return new, jnp.maximum(ref + new, t + lo), mod
    if rule == STORMCRAWLER:
        dec = 1.0 - p.shrink
        new = jnp.where(changed, p.shrink * interval + dec * lo, jnp.minimum(interval * grow, hi))
        return new, t + new, jnp.where(changed, t, modified)
    if rule == HERITRIX:
        new = jnp.clip(jnp.where(changed, interval * p.shrink, interval * grow), lo, hi)
        return new, t + new, jnp.where(changed, t, modified)
    raise ValueError(f"rule must be one of {sorted(_RULE_NAMES)}, got {rule!r}")


def _full_params(given: HeuristicParams | None, defaults: HeuristicParams, dtype) -> HeuristicParams:
    given = HeuristicParams() if given is None else given
    if not isinstance(given, HeuristicParams):
        raise TypeError("params must be a HeuristicParams (None fields take the factory's values)")
    vals = {f: (getattr(defaults, f) if getattr(given, f) is None else getattr(given, f))
            for f in HeuristicParams._fields}
    prm = HeuristicParams(**{f: jnp.asarray(v, dtype) for f, v in vals.items()})
    if is_concrete(prm):
        a = {f: np.asarray(getattr(prm, f), np.float64) for f in HeuristicParams._fields}
        if np.any(~(a["min_interval"] > 0)) or np.any(~(a["max_interval"] >= a["min_interval"])):
            raise ValueError("need 0 < min_interval <= max_interval "
                             f"(got {a['min_interval']}, {a['max_interval']})")
        if np.any(~np.isfinite(a["initial_interval"])) or np.any(a["initial_interval"] <= 0):
            raise ValueError(f"initial_interval must be finite and > 0; got {a['initial_interval']}")
        if np.any(~(a["grow"] >= 1)) or np.any(~((a["shrink"] > 0) & (a["shrink"] <= 1))):
            raise ValueError(f"need grow >= 1 and 0 < shrink <= 1; got grow={a['grow']}, shrink={a['shrink']}")
        if np.any(~np.isfinite(a["budget_scale"])) or np.any(a["budget_scale"] <= 0):
            raise ValueError(f"budget_scale must be finite and > 0; got {a['budget_scale']}")
        if np.any(~np.isfinite(a["sync_delta_rate"])) or np.any(a["sync_delta_rate"] > 1):
            raise ValueError(f"sync_delta_rate must be <= 1 (negative: off); got {a['sync_delta_rate']}")
    return prm


_GOLDEN = 0.6180339887498949


def rule_learner(rule: int, defaults: HeuristicParams, *, epoch_length: float = 1.0,
                 max_events_per_epoch: int = 1_000_000, name: str | None = None) -> Learner:
    r"""A revisit rule as a :class:`~jaxcrawl.learners.Learner` (module docstring); the
    public face is :func:`heuristic`, which takes the crawlers' parameter names and units.

    Args:
      rule: :data:`FIXED`, :data:`NUTCH`, :data:`STORMCRAWLER` or :data:`HERITRIX`.
      defaults: complete :class:`HeuristicParams` in the problem's time unit.
      epoch_length: simulated time per ``step``.
      max_events_per_epoch: cap on the event loop's iterations per epoch (the busiest
        page's changes plus fetches in one epoch); hitting it is reported in
        :attr:`HeuristicInfo.converged`.
      name: the learner's name (default: the rule's registry name).

    Returns:
      :class:`~jaxcrawl.learners.Learner`; ``init(problem, params: HeuristicParams = None)``,
      ``step(key, state, problem) -> (state, HeuristicInfo)``.  The first fetches are
      spread over the initial interval (page ``i`` at ``frac(i φ) × initial_interval``);
      every page starts fresh at time 0.
    """
    if rule not in _RULE_NAMES:
        raise ValueError(f"rule must be one of {sorted(_RULE_NAMES)}, got {rule!r}")
    if not (math.isfinite(epoch_length) and epoch_length > 0):
        raise ValueError(f"epoch_length must be finite and > 0, got {epoch_length!r}")
    if not isinstance(max_events_per_epoch, (int, np.integer)) or max_events_per_epoch < 1:
        raise ValueError(f"max_events_per_epoch must be a positive int, got {max_events_per_epoch!r}")
    if any(v is None for v in defaults):
        raise ValueError("defaults must set every HeuristicParams field")
    _full_params(defaults, defaults, jnp.result_type(float))  # validates eagerly

    def init(problem: CrawlProblem, params: HeuristicParams | None = None) -> HeuristicState:
        dtype = problem.change_rate.dtype
        prm = _full_params(params, defaults, dtype)
        n = problem.change_rate.shape[-1]
        first = prm.initial_interval * (prm.budget_scale if rule == FIXED else 1.0)
        interval = jnp.full((n,), 1.0, dtype) * first
        frac = jnp.mod(jnp.arange(n, dtype=dtype) * jnp.asarray(_GOLDEN, dtype), 1.0)
        next_fetch = frac * interval
        return HeuristicState(jnp.zeros((), dtype), interval, next_fetch, jnp.full((n,), -jnp.inf, dtype),
                              jnp.zeros((n,), jnp.int32), jnp.zeros((), jnp.int32), prm)

    def step(key, state: HeuristicState, problem: CrawlProblem):
        prm = state.params
        dtype = state.interval.dtype
        lam = jnp.asarray(problem.change_rate, dtype)
        mu = jnp.broadcast_to(jnp.asarray(problem.importance, dtype), lam.shape)
        t0 = state.time
        t1 = t0 + jnp.asarray(epoch_length, dtype)
        pos = lam > 0
        inv = jnp.where(pos, 1.0 / jnp.where(pos, lam, 1.0), jnp.inf)
        key0, key_loop = jax.random.split(key)
        next_change = t0 + jax.random.exponential(key0, lam.shape, dtype) * inv
        zero = jnp.zeros_like(lam)
        carry0 = (jnp.zeros((), jnp.int32), jnp.broadcast_to(t0, lam.shape), state.num_changes, next_change,
                  state.interval, state.next_fetch, state.modified, zero, zero,
                  jnp.zeros(lam.shape, jnp.int32), jnp.zeros(lam.shape, jnp.int32))

        def cond(c):
            it, t = c[0], c[1]
            return (it < max_events_per_epoch) & jnp.any(t < t1)

        def body(c):
            it, t, num, nxt_chg, interval, nxt_fetch, modified, harm, stale, crawls, changes = c
            active = t < t1
            e = jnp.minimum(jnp.minimum(nxt_chg, nxt_fetch), t1)
            dt = jnp.where(active, e - t, 0.0)
            harm = harm + harmonic_number(num, dtype) * dt
            stale = stale + jnp.where(num > 0, dt, 0.0)
            is_change = active & (nxt_chg <= nxt_fetch) & (nxt_chg < t1)
            is_fetch = active & (nxt_fetch < nxt_chg) & (nxt_fetch < t1)
            num = num + is_change.astype(jnp.int32)
            draw = jax.random.exponential(jax.random.fold_in(key_loop, it), lam.shape, dtype) * inv
            nxt_chg = jnp.where(is_change, e + draw, nxt_chg)
            new_i, new_next, new_mod = update_interval(rule, prm, interval, e, modified, num > 0)
            interval = jnp.where(is_fetch, new_i, interval)
            nxt_fetch = jnp.where(is_fetch, new_next, nxt_fetch)
            modified = jnp.where(is_fetch, new_mod, modified)
            num = jnp.where(is_fetch, 0, num)
            crawls = crawls + is_fetch.astype(jnp.int32)
            changes = changes + is_change.astype(jnp.int32)
            return (it + 1, jnp.where(active, e, t), num, nxt_chg, interval, nxt_fetch, modified, harm, stale,
                    crawls, changes)

        out = jax.lax.while_loop(cond, body, carry0)
        _, t_end, num, _, interval, nxt_fetch, modified, harm, stale, crawls, changes = out
        length = jnp.asarray(epoch_length, dtype)
        n = lam.shape[-1]
        harm_cost = jnp.sum(mu * harm) / (n * length)
        bin_cost = jnp.sum(mu * stale) / (n * length)
        fresh = 1.0 - jnp.sum(mu * stale) / (length * jnp.maximum(jnp.sum(mu), jnp.finfo(dtype).tiny))
        new = HeuristicState(t1, interval, nxt_fetch, modified, num, state.epoch + 1, prm)
        info = HeuristicInfo(harm_cost, bin_cost, fresh, jnp.sum(crawls), jnp.sum(changes),
                             jnp.mean(interval), state.epoch + 1, jnp.all(t_end >= t1))
        return new, info

    return Learner(init, step, name or _RULE_NAMES[rule])


def _unit(time_unit_seconds: float) -> float:
    if not (math.isfinite(time_unit_seconds) and time_unit_seconds > 0):
        raise ValueError(f"time_unit_seconds must be finite and > 0, got {time_unit_seconds!r}")
    return float(time_unit_seconds)


def nutch_default(*, interval_default: float = 2592000.0, time_unit_seconds: float = 86400.0,
                  **kwargs) -> Learner:
    """Apache Nutch ``DefaultFetchSchedule``: every page every ``db.fetch.interval.default``
    seconds (``nutch-default.xml``: 2592000 = 30 days).  ``kwargs`` go to :func:`rule_learner`."""
    u = _unit(time_unit_seconds)
    i0 = interval_default / u
    return rule_learner(FIXED, HeuristicParams(i0, i0, i0, 1.0, 1.0, -1.0, 1.0), **kwargs)


def nutch_adaptive(*, inc_rate: float = 0.4, dec_rate: float = 0.2, min_interval: float = 60.0,
                   max_interval: float = 31536000.0, sync_delta: bool = True, sync_delta_rate: float = 0.3,
                   interval_default: float = 2592000.0, time_unit_seconds: float = 86400.0,
                   **kwargs) -> Learner:
    """Apache Nutch ``AdaptiveFetchSchedule`` with the properties
    ``db.fetch.schedule.adaptive.{inc_rate, dec_rate, min_interval, max_interval,
    sync_delta, sync_delta_rate}`` and ``db.fetch.interval.default`` (seconds; defaults of
    ``nutch-default.xml``).  ``kwargs`` go to :func:`rule_learner`."""
    u = _unit(time_unit_seconds)
    if not (0 <= inc_rate and 0 <= dec_rate < 1):
        raise ValueError(f"need inc_rate >= 0 and 0 <= dec_rate < 1; got {inc_rate}, {dec_rate}")
    if sync_delta and not (0 <= sync_delta_rate <= 1):
        raise ValueError(f"sync_delta_rate must be in [0, 1]; got {sync_delta_rate}")
    prm = HeuristicParams(interval_default / u, min_interval / u, max_interval / u, 1.0 + inc_rate,
                          1.0 - dec_rate, float(sync_delta_rate) if sync_delta else -1.0, 1.0)
    return rule_learner(NUTCH, prm, **kwargs)


def stormcrawler_adaptive(*, fetch_interval_default: float = 1440.0, fetch_interval_min: float = 60.0,
                          fetch_interval_max: float = 20160.0, rate_incr: float = 0.5, rate_decr: float = 0.5,
                          time_unit_seconds: float = 86400.0, **kwargs) -> Learner:
    """StormCrawler ``AdaptiveScheduler`` with the keys ``fetchInterval.default``,
    ``scheduler.adaptive.fetchInterval.{min, max}`` (minutes) and
    ``scheduler.adaptive.fetchInterval.rate.{incr, decr}`` (its documented defaults).
    ``kwargs`` go to :func:`rule_learner`."""
    u = _unit(time_unit_seconds) / 60.0
    if not (0 < rate_incr <= 1 and 0 < rate_decr <= 1):
        raise ValueError(f"rates must be in (0, 1] (StormCrawler's rule); got {rate_incr}, {rate_decr}")
    prm = HeuristicParams(fetch_interval_default / u, fetch_interval_min / u, fetch_interval_max / u,
                          1.0 + rate_incr, 1.0 - rate_decr, -1.0, 1.0)
    return rule_learner(STORMCRAWLER, prm, **kwargs)


def heritrix_wait(*, initial_wait_interval_seconds: float = 86400.0, min_wait_interval_seconds: float = 3600.0,
                  max_wait_interval_seconds: float = 2419200.0, unchanged_factor: float = 1.5,
                  changed_factor: float = 1.5, time_unit_seconds: float = 86400.0, **kwargs) -> Learner:
    """Heritrix ``WaitEvaluator`` with its properties ``initialWaitIntervalSeconds``,
    ``minWaitIntervalSeconds``, ``maxWaitIntervalSeconds``, ``unchangedFactor`` and
    ``changedFactor`` (documented defaults).  ``kwargs`` go to :func:`rule_learner`."""
    u = _unit(time_unit_seconds)
    if not (unchanged_factor >= 1 and changed_factor >= 1):
        raise ValueError(f"unchanged_factor and changed_factor must be >= 1; got {unchanged_factor}, "
                         f"{changed_factor}")
    prm = HeuristicParams(initial_wait_interval_seconds / u, min_wait_interval_seconds / u,
                          max_wait_interval_seconds / u, float(unchanged_factor), 1.0 / changed_factor, -1.0, 1.0)
    return rule_learner(HERITRIX, prm, **kwargs)


#: The heuristics' names (``jaxcrawl evaluate``'s policy names).
HEURISTICS = ("nutch-default", "nutch-adaptive", "stormcrawler-adaptive", "heritrix-wait")
_FACTORIES = dict(zip(HEURISTICS, (nutch_default, nutch_adaptive, stormcrawler_adaptive, heritrix_wait)))


def heuristic(crawler: str, /, **settings: Any) -> Learner:
    """A production crawler's revisit heuristic as a :class:`~jaxcrawl.learners.Learner`.

    Args:
      crawler: one of :data:`HEURISTICS` (module docstring for each rule):

        * ``"nutch-default"``: ``interval_default`` (seconds);
        * ``"nutch-adaptive"``: ``inc_rate``, ``dec_rate``, ``min_interval``,
          ``max_interval``, ``sync_delta``, ``sync_delta_rate``, ``interval_default``
          (seconds; Nutch's ``db.fetch.schedule.adaptive.*`` properties);
        * ``"stormcrawler-adaptive"``: ``fetch_interval_default``, ``fetch_interval_min``,
          ``fetch_interval_max`` (minutes), ``rate_incr``, ``rate_decr``;
        * ``"heritrix-wait"``: ``initial_wait_interval_seconds``,
          ``min_wait_interval_seconds``, ``max_wait_interval_seconds``,
          ``unchanged_factor``, ``changed_factor``.
      **settings: the crawler's settings above (default: its documented defaults), and
        for every crawler ``time_unit_seconds`` (the problem's time unit, default 86400),
        ``epoch_length`` (time per ``step``, default 1), ``max_events_per_epoch`` (the
        event loop's cap, reported in ``info.converged``) and ``name``.

    Returns:
      ``init(problem, params: HeuristicParams = None)``, ``step(key, state, problem) ->
      (state, info)`` with ``info`` the epoch's exact ``harmonic_cost``, ``binary_cost``,
      ``fresh_fraction``, ``num_crawls``, ``num_changes``, ``mean_interval``, ``epoch``
      and ``converged``.  The first fetches are spread over the initial interval; every
      page starts fresh at time 0.
    """
    if crawler not in _FACTORIES:
        raise ValueError(f"unknown heuristic {crawler!r}; use one of {', '.join(HEURISTICS)}")
    return _FACTORIES[crawler](**settings)


@functools.partial(jax.jit, static_argnames=("learner",))
def run_on_path(key: jax.Array, learner: Learner, problem: CrawlProblem, rates: jax.Array,
                params: Any = None) -> tuple[Any, Any]:
    """Run any :class:`~jaxcrawl.learners.Learner` on drifting pages: step ``i`` sees
    the problem with ``change_rate = rates[i]`` (a rate path of
    :func:`jaxcrawl.simulate.simulate_drift`, one row per step) and key ``fold_in(key, i)``, as
    :func:`~jaxcrawl.learners.run_learner` (which it equals for a constant path).

    Returns:
      ``(final_state, info)`` with ``info`` stacked over the steps.
    """
    state = learner.init(problem, params)

    def body(st, xs):
        i, lam = xs
        return learner.step(jax.random.fold_in(key, i), st, problem.replace(change_rate=lam))

    return jax.lax.scan(body, state, (jnp.arange(rates.shape[0]), rates))


# --------------------------------------------------------------------- budget matching
class BudgetMatch(NamedTuple):
    """Result of :func:`match_budget`.

    Attributes:
      params: the :class:`HeuristicParams` with the matched ``budget_scale`` (pass to
        ``init``).
      budget_scale: the scale :math:`c`.
      crawl_rate, crawl_rate_se: long-run crawls per unit time at :math:`c` (mean over
        seeds of the measured epochs) and its standard error across seeds.
      raw_crawl_rate, raw_crawl_rate_se: the same for the crawler's own settings
        (:math:`c = 1`).
      converged: ``|crawl_rate - bandwidth| <= rtol * bandwidth``.
    """

    params: HeuristicParams
    budget_scale: jax.Array
    crawl_rate: jax.Array
    crawl_rate_se: jax.Array
    raw_crawl_rate: jax.Array
    raw_crawl_rate_se: jax.Array
    converged: jax.Array


@functools.partial(jax.jit, static_argnames=("learner", "burn_in", "num_epochs", "num_seeds"))
def crawl_volume(key: jax.Array, learner: Learner, problem: CrawlProblem, params: HeuristicParams, *,
                 burn_in: int, num_epochs: int, num_seeds: int) -> tuple[jax.Array, jax.Array]:
    """Monte-Carlo long-run crawl rate (crawls per unit time, all pages) of a heuristic:
    ``num_seeds`` runs of ``burn_in + num_epochs`` epochs, the last ``num_epochs``
    measured.  Returns ``(mean over seeds, standard error across seeds)``."""
    def one(k):
        st, info = run_learner(k, learner, problem, burn_in + num_epochs, params)
        length = (st.time / st.epoch.astype(st.time.dtype))
        return jnp.mean(info.num_crawls[burn_in:].astype(st.time.dtype)) / length

    vols = jax.vmap(one)(jax.random.split(key, num_seeds))
    return jnp.mean(vols), jnp.std(vols, ddof=1) / jnp.sqrt(num_seeds)


@functools.partial(jax.jit, static_argnames=("learner", "burn_in", "num_epochs", "num_seeds", "num_bisections"))
def _bisect(key, learner, problem, base, bandwidth, log_lo, log_hi, *, burn_in, num_epochs, num_seeds,
            num_bisections):
    """Bisection on log c of the (common-random-number) volume; returns the bracket's midpoint."""
    dtype = problem.change_rate.dtype

    def halve(_, bracket):
        lo, hi = bracket
        mid = 0.5 * (lo + hi)
        vol, _ = crawl_volume(key, learner, problem, base._replace(budget_scale=jnp.exp(mid)),
                              burn_in=burn_in, num_epochs=num_epochs, num_seeds=num_seeds)
        too_many = vol > bandwidth  # volume decreases in c: go up
        return jnp.where(too_many, mid, lo), jnp.where(too_many, hi, mid)

    lo, hi = jax.lax.fori_loop(0, num_bisections, halve,
                               (jnp.asarray(log_lo, dtype), jnp.asarray(log_hi, dtype)))
    return jnp.exp(0.5 * (lo + hi))


def match_budget(key: jax.Array, learner: Learner, problem: CrawlProblem, bandwidth: float | None = None, *,
                 params: HeuristicParams | None = None, burn_in: int = 60, num_epochs: int = 60,
                 num_seeds: int = 4, num_bisections: int = 28, scale_range: tuple[float, float] = (1e-3, 1e3),
                 rtol: float = 0.02) -> BudgetMatch:
    r"""The ``budget_scale`` that makes a heuristic's long-run crawl volume equal ``bandwidth``.

    Bisection on :math:`\log c` over ``scale_range`` of the Monte-Carlo volume
    (:func:`crawl_volume`, the same key at every step: common random numbers make the
    volume a monotone step function of :math:`c`), ``num_bisections`` halvings, then the
    volume at the matched scale and at the crawler's own settings (:math:`c = 1`) with
    their standard errors.  The volume decreases in :math:`c` (module docstring).

    Args:
      key: PRNG key.
      learner: a heuristic learner (its ``init`` takes :class:`HeuristicParams`).
      problem: the pages; ``bandwidth`` defaults to ``problem.bandwidth``.
      params: base settings (``None``: the factory's); only ``budget_scale`` is changed.
      burn_in, num_epochs, num_seeds: the Monte Carlo of :func:`crawl_volume`.
      num_bisections: halvings of the log-scale bracket.
      scale_range: the bracket of :math:`c`.
      rtol: relative tolerance of :attr:`BudgetMatch.converged`.

    Returns:
      :class:`BudgetMatch`.
    """
    if not is_concrete(problem):
        raise ValueError("match_budget needs concrete values: call it outside jit")
    bw = float(np.asarray(problem.bandwidth) if bandwidth is None else bandwidth)
    if not (math.isfinite(bw) and bw > 0):
        raise ValueError(f"bandwidth must be finite and > 0, got {bandwidth!r}")
    lo, hi = (float(v) for v in scale_range)
    if not (0 < lo < hi and math.isfinite(hi)):
        raise ValueError(f"scale_range must be 0 < low < high < inf, got {scale_range!r}")
    for name, v in (("burn_in", burn_in), ("num_epochs", num_epochs), ("num_bisections", num_bisections)):
        if not isinstance(v, (int, np.integer)) or v < (0 if name == "burn_in" else 1):
            raise ValueError(f"{name} must be a {'nonnegative' if name == 'burn_in' else 'positive'} int, got {v!r}")
    if not isinstance(num_seeds, (int, np.integer)) or num_seeds < 2:
        raise ValueError(f"num_seeds must be an int >= 2 (standard errors need two), got {num_seeds!r}")
    base = HeuristicParams() if params is None else params
    dtype = problem.change_rate.dtype
    opts = dict(burn_in=int(burn_in), num_epochs=int(num_epochs), num_seeds=int(num_seeds))
    key_search, key_check = jax.random.split(key)

    def volume(c, k):
        return crawl_volume(k, learner, problem, base._replace(budget_scale=jnp.asarray(c, dtype)), **opts)

    c = float(_bisect(key_search, learner, problem, base, jnp.asarray(bw, dtype), math.log(lo), math.log(hi),
                      num_bisections=int(num_bisections), **opts))
    vol, se = volume(c, key_check)
    raw, raw_se = volume(1.0, key_check)
    matched = base._replace(budget_scale=jnp.asarray(c, dtype))
    return BudgetMatch(matched, jnp.asarray(c, dtype), vol, se, raw, raw_se,
                       jnp.abs(vol - bw) <= rtol * bw)
