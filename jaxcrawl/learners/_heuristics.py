r"""Open-source crawlers' adaptive revisit rules, as :class:`~jaxcrawl.learners.Learner` objects.

Where a crawler revisits pages adaptively, it adapts each page's *fetch interval* to what
its fetches see: shrink it when a fetch finds the page changed, grow it when unchanged,
clamp it.  None of them knows or estimates a change rate.  **Which rule runs where:**
Nutch's default schedule (``db.fetch.schedule.class``) is ``DefaultFetchSchedule``, a
fixed interval; ``AdaptiveFetchSchedule`` is opt-in.  StormCrawler's default
``scheduler.class`` is ``DefaultScheduler`` (fixed intervals); ``AdaptiveScheduler`` is
opt-in.  Heritrix's ``WaitEvaluator`` exists only in Heritrix 1.x (last released 2009),
as part of the experimental ``AdaptiveRevisitFrontier``; Heritrix 3 has no such rule.
This module transcribes each rule from the crawler's Java source, at every fetch
including the first, in continuous time (the crawlers' truncation of intervals to whole
seconds, minutes or milliseconds is left out), with each crawler's own parameter names,
units and defaults:

``"nutch-default"`` -- Nutch ``DefaultFetchSchedule`` (:func:`nutch_default`)
    The next fetch is ``fetchTime + fetchInterval``, whatever the page did; the interval
    is ``db.fetch.interval.default`` (``nutch-default.xml``: 2592000 s = 30 days).

``"nutch-adaptive"`` -- Nutch ``AdaptiveFetchSchedule.setFetchSchedule`` (:func:`nutch_adaptive`)
    Properties ``db.fetch.schedule.adaptive.inc_rate`` (0.4), ``.dec_rate`` (0.2; both
    documented "should not exceed 0.5"), ``.min_interval`` (60 s), ``.max_interval``
    (365 days), ``.sync_delta`` (true), ``.sync_delta_rate`` (0.3), initial interval
    ``db.fetch.interval.default`` (30 days).  At a fetch at time :math:`t`, with
    modifiedTime :math:`m` (the last fetch that found a change; the first fetch sets
    :math:`m=t`): the status is *unknown* on a page's first fetch (no previous signature:
    the interval is kept), else *modified* (:math:`I \leftarrow I(1-\text{dec}),\ m
    \leftarrow t`) or *not modified* (:math:`I\leftarrow I(1+\text{inc})`).  With
    ``sync_delta``: :math:`\delta = t-m`; :math:`I\leftarrow\delta` if :math:`\delta > I`;
    offset :math:`o=\text{sync\_delta\_rate}\,\delta`, and if :math:`o` exceeds
    ``max_interval`` the source sets :math:`o \leftarrow \lfloor o/\delta\rfloor\cdot
    \text{max\_interval}` (integer division of milliseconds: 0 for a rate below 1); the
    reference time is :math:`t-o`.  Then :math:`I` is clamped to ``[min_interval,
    max_interval]`` and the next fetch is at :math:`t - o + I`.
    **Both Nutch rules** inherit ``AbstractFetchSchedule.shouldFetch``: the generator
    re-schedules a page whose next fetch lies more than ``db.fetch.interval.max``
    (7776000 s = 90 days) after the generate time -- the page is fetched in that cycle and,
    if its interval exceeds the maximum, the interval becomes 0.9 times the maximum.  The
    generator runs once per crawl cycle (``cycle``, default one day); the check is made at
    the first generate after each fetch, one cycle later.

``"stormcrawler-adaptive"`` -- StormCrawler ``AdaptiveScheduler.schedule`` (:func:`stormcrawler_adaptive`)
    Keys ``fetchInterval.default`` (1440 min), ``scheduler.adaptive.fetchInterval.min``
    (60 min), ``.fetchInterval.max`` (20160 min = 2 weeks), ``.fetchInterval.rate.incr``
    and ``.rate.decr`` (0.5 each; documented :math:`0<\text{rate}\le1`).  First fetch (no
    old signature): ``DefaultScheduler``'s default interval, unclamped.  Changed:
    :math:`I \leftarrow (1-\text{decr})I + \text{decr}\cdot\min`; unchanged: :math:`I
    \leftarrow \min(I(1+\text{incr}), \max)`; next fetch at :math:`t + I`.

``"heritrix-wait"`` -- Heritrix 1.x ``WaitEvaluator.innerProcess`` (:func:`heritrix_wait`)
    Attributes ``initial-wait-interval-seconds`` (86400), ``min-wait-interval-seconds``
    (3600), ``max-wait-interval-seconds`` (2419200 = 4 weeks), ``unchanged-factor`` and
    ``changed-factor`` (1.5 each; "a value of 1 leaves it unchanged").  First visit: the
    initial wait; changed: :math:`I \leftarrow I/\text{changed}`; unchanged: :math:`I
    \leftarrow I\cdot\text{unchanged}`; clamped to ``[min, max]`` every time; next fetch at
    :math:`t + I`.

Sources read: Apache Nutch ``AdaptiveFetchSchedule``, ``DefaultFetchSchedule``,
``AbstractFetchSchedule``, ``CrawlDbReducer`` and ``conf/nutch-default.xml``; Apache
StormCrawler ``AdaptiveScheduler`` and ``crawler-default.yaml``; Heritrix 1.x
``org.archive.crawler.postprocessor.WaitEvaluator``.

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

**Long-run figures** on stationary pages (:func:`long_run`) need no clock: each page's
fetches form a Markov chain, simulated fetch by fetch for a fixed number of fetches per
page (every page in step, however fast it changes).  The bit of a fetch after an interval
:math:`\tau` is drawn with :math:`P = 1-e^{-\lambda\tau}`, and the interval's cost is its
conditional expectation given the bit (0 if unchanged, else :math:`\tau\,(\mathrm{Ein}(
\lambda\tau)-\varphi_1(\lambda\tau))/P` harmonic and :math:`\tau\varphi_1(\lambda\tau)/P`
binary): the schedule is exact in law and the costs unbiased given it.  Long-run rates
are the ratio of totals to elapsed time over the measured fetches (renewal-reward).

**Time units.**  The problem's time unit is set by ``time_unit_seconds`` (default 86400:
rates per day, as in NeurIPS-19); the factories take the crawlers' own units (seconds,
minutes) and convert.

**Budget.**  A rule has no bandwidth: its crawl volume is whatever its settings produce.
:func:`match_in_range` matches it to a bandwidth with settings an operator could choose
within the crawler's documented ranges (its best cost over a grid of them, and its cost at
the defaults with only the interval settings scaled), or says that no such setting
reaches the bandwidth.  :func:`match_budget` is the older knob, **outside the documented
ranges** for the adaptive rules: it raises the growth factor to a power :math:`c`
(``budget_scale``; at the matched :math:`c` of a few percent of the pages per day that is
a Nutch ``inc_rate`` or StormCrawler ``rate.incr`` far above the documented bounds) and
multiplies the ceilings by :math:`\max(c,1)`; for the fixed rule it multiplies the interval.
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
from jaxcrawl._src.special import _EIN_PHI1_COEFFS, EULER_GAMMA, harmonic_number, horner, phi1
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
    r"""A rule's settings in the problem's time unit (arrays: ``jax.vmap`` sweeps them).

    ``None`` fields take the factory's values (the crawler's defaults or what was passed
    to the factory), so ``HeuristicParams(shrink=s)`` changes one setting only.

    Attributes:
      initial_interval: the interval before the first fetch (Nutch
        ``db.fetch.interval.default``, StormCrawler ``fetchInterval.default``, Heritrix
        ``initial-wait-interval-seconds``); the fixed rule's interval.
      min_interval, max_interval: the clamp.
      grow: factor on an unchanged fetch (Nutch ``1 + inc_rate``, StormCrawler
        ``1 + rate.incr``, Heritrix ``unchanged-factor``).
      shrink: factor on a changed fetch (Nutch ``1 - dec_rate``, StormCrawler
        ``1 - rate.decr``, Heritrix ``1 / changed-factor``).
      sync_delta_rate: Nutch's ``sync_delta_rate`` (negative: ``sync_delta`` off; the
        other rules ignore it).
      fetch_interval_max: Nutch's ``db.fetch.interval.max`` (``inf`` for the others).
      cycle: time from a fetch to the next generate that checks ``fetch_interval_max``
        (Nutch's crawl cycle; the others ignore it).
      budget_scale: :math:`c` of :func:`match_budget`, **outside the documented ranges**
        for the adaptive rules (1: off): the fixed rule's interval is multiplied by it,
        the adaptive rules' growth factor raised to it and their ceilings multiplied by
        ``max(c, 1)``.
    """

    initial_interval: Any = None
    min_interval: Any = None
    max_interval: Any = None
    grow: Any = None
    shrink: Any = None
    sync_delta_rate: Any = None
    fetch_interval_max: Any = None
    cycle: Any = None
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
      crawls: ``(n,)`` int32 fetches of each page since ``init`` (the difference of two
        states is each page's crawl count between them).
    """

    time: jax.Array
    interval: jax.Array
    next_fetch: jax.Array
    modified: jax.Array
    num_changes: jax.Array
    epoch: jax.Array
    params: HeuristicParams
    crawls: jax.Array


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
      interval: the interval before the fetch (Nutch's stored interval at a first fetch;
        StormCrawler and Heritrix then take ``initial_interval``).
      fetch_time: when the fetch happened.
      modified: the last fetch time that found a change, or the first fetch's time;
        ``-inf`` marks a page's first fetch (its bit is not used: the crawlers have no
        previous signature to compare).
      changed: whether this fetch found the page changed.

    Returns:
      ``(interval, next_fetch, modified)`` after the fetch.
    """
    p = params
    interval = jnp.asarray(interval)
    dtype = interval.dtype
    t = jnp.asarray(fetch_time, dtype)
    modified = jnp.asarray(modified, dtype)
    first = ~jnp.isfinite(modified)
    changed = jnp.asarray(changed, bool) & ~first
    mod = jnp.where(changed | first, t, modified)
    scale = jnp.asarray(p.budget_scale, dtype)
    ceiling = jnp.maximum(scale, 1.0)
    grow = jnp.asarray(p.grow, dtype) ** scale
    lo, hi = jnp.asarray(p.min_interval, dtype), jnp.asarray(p.max_interval, dtype) * ceiling
    factor = jnp.where(first, 1.0, jnp.where(changed, jnp.asarray(p.shrink, dtype), grow))
    if rule == FIXED:
        new, nxt = interval, t + interval
    elif rule == NUTCH:
        new = interval * factor
        rate = jnp.asarray(p.sync_delta_rate, dtype)
        sync_on = rate >= 0
        delta = t - mod
        new = jnp.where(sync_on & (delta > new), delta, new)
        offset = jnp.maximum(rate, 0.0) * delta
        # the source's guard divides milliseconds as integers: floor(offset / delta)
        whole = jnp.floor(offset / jnp.where(delta > 0, delta, 1.0))
        offset = jnp.where((delta > 0) & (offset > hi), whole * hi, offset)
        ref = jnp.where(sync_on, t - offset, t)
        new = jnp.clip(new, lo, hi)
        nxt = ref + new
    elif rule == STORMCRAWLER:
        dec = 1.0 - p.shrink
        new = jnp.where(first, jnp.asarray(p.initial_interval, dtype),
                        jnp.where(changed, p.shrink * interval + dec * lo, jnp.minimum(interval * grow, hi)))
        nxt = t + new
    elif rule == HERITRIX:
        new = jnp.clip(jnp.where(first, jnp.asarray(p.initial_interval, dtype), interval * factor), lo, hi)
        nxt = t + new
    else:
        raise ValueError(f"rule must be one of {sorted(_RULE_NAMES)}, got {rule!r}")
    if rule in (FIXED, NUTCH):
        # AbstractFetchSchedule.shouldFetch at the next generate, one cycle after the fetch
        fmax = jnp.asarray(p.fetch_interval_max, dtype) * ceiling
        gen = t + jnp.asarray(p.cycle, dtype)
        far = nxt - gen > fmax
        new = jnp.where(far & (new > fmax), 0.9 * fmax, new)
        nxt = jnp.where(far, gen, nxt)
    return new, nxt, mod


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
        if np.any(~(a["grow"] >= 1)) or np.any(~((a["shrink"] >= 0) & (a["shrink"] <= 1))):
            raise ValueError(f"need grow >= 1 and 0 <= shrink <= 1; got grow={a['grow']}, shrink={a['shrink']}")
        if np.any(~np.isfinite(a["budget_scale"])) or np.any(a["budget_scale"] <= 0):
            raise ValueError(f"budget_scale must be finite and > 0; got {a['budget_scale']}")
        if np.any(~np.isfinite(a["sync_delta_rate"])) or np.any(a["sync_delta_rate"] > 1):
            raise ValueError(f"sync_delta_rate must be <= 1 (negative: off); got {a['sync_delta_rate']}")
        if np.any(~(a["fetch_interval_max"] > 0)):
            raise ValueError(f"fetch_interval_max must be > 0 (inf: none); got {a['fetch_interval_max']}")
        if np.any(~np.isfinite(a["cycle"])) or np.any(a["cycle"] <= 0):
            raise ValueError(f"cycle must be finite and > 0; got {a['cycle']}")
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
                              jnp.zeros((n,), jnp.int32), jnp.zeros((), jnp.int32), prm, jnp.zeros((n,), jnp.int32))

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
        new = HeuristicState(t1, interval, nxt_fetch, modified, num, state.epoch + 1, prm, state.crawls + crawls)
        info = HeuristicInfo(harm_cost, bin_cost, fresh, jnp.sum(crawls), jnp.sum(changes),
                             jnp.mean(interval), state.epoch + 1, jnp.all(t_end >= t1))
        return new, info

    return Learner(init, step, name or _RULE_NAMES[rule])


def _unit(time_unit_seconds: float) -> float:
    if not (math.isfinite(time_unit_seconds) and time_unit_seconds > 0):
        raise ValueError(f"time_unit_seconds must be finite and > 0, got {time_unit_seconds!r}")
    return float(time_unit_seconds)


_LEARNER_KEYS = ("epoch_length", "max_events_per_epoch", "name")


def _nutch_default_params(*, interval_default: float = 2592000.0, fetch_interval_max: float = 7776000.0,
                          cycle: float = 86400.0, time_unit_seconds: float = 86400.0) -> HeuristicParams:
    u = _unit(time_unit_seconds)
    i0 = interval_default / u
    return HeuristicParams(i0, i0, i0, 1.0, 1.0, -1.0, fetch_interval_max / u, cycle / u, 1.0)


def _nutch_adaptive_params(*, inc_rate: float = 0.4, dec_rate: float = 0.2, min_interval: float = 60.0,
                           max_interval: float = 31536000.0, sync_delta: bool = True, sync_delta_rate: float = 0.3,
                           interval_default: float = 2592000.0, fetch_interval_max: float = 7776000.0,
                           cycle: float = 86400.0, time_unit_seconds: float = 86400.0) -> HeuristicParams:
    u = _unit(time_unit_seconds)
    if not (0 <= inc_rate and 0 <= dec_rate < 1):
        raise ValueError(f"need inc_rate >= 0 and 0 <= dec_rate < 1; got {inc_rate}, {dec_rate}")
    if sync_delta and not (0 <= sync_delta_rate <= 1):
        raise ValueError(f"sync_delta_rate must be in [0, 1]; got {sync_delta_rate}")
    return HeuristicParams(interval_default / u, min_interval / u, max_interval / u, 1.0 + inc_rate,
                           1.0 - dec_rate, float(sync_delta_rate) if sync_delta else -1.0, fetch_interval_max / u,
                           cycle / u, 1.0)


def _stormcrawler_params(*, fetch_interval_default: float = 1440.0, fetch_interval_min: float = 60.0,
                         fetch_interval_max: float = 20160.0, rate_incr: float = 0.5, rate_decr: float = 0.5,
                         time_unit_seconds: float = 86400.0) -> HeuristicParams:
    u = _unit(time_unit_seconds) / 60.0
    if not (0 < rate_incr <= 1 and 0 < rate_decr <= 1):
        raise ValueError(f"rates must be in (0, 1] (StormCrawler's rule); got {rate_incr}, {rate_decr}")
    return HeuristicParams(fetch_interval_default / u, fetch_interval_min / u, fetch_interval_max / u,
                           1.0 + rate_incr, 1.0 - rate_decr, -1.0, math.inf, 1.0, 1.0)


def _heritrix_params(*, initial_wait_interval_seconds: float = 86400.0, min_wait_interval_seconds: float = 3600.0,
                     max_wait_interval_seconds: float = 2419200.0, unchanged_factor: float = 1.5,
                     changed_factor: float = 1.5, time_unit_seconds: float = 86400.0) -> HeuristicParams:
    u = _unit(time_unit_seconds)
    if not (unchanged_factor >= 1 and changed_factor >= 1):
        raise ValueError(f"unchanged_factor and changed_factor must be >= 1; got {unchanged_factor}, "
                         f"{changed_factor}")
    return HeuristicParams(initial_wait_interval_seconds / u, min_wait_interval_seconds / u,
                           max_wait_interval_seconds / u, float(unchanged_factor), 1.0 / changed_factor, -1.0,
                           math.inf, 1.0, 1.0)


def _split(settings: dict) -> tuple[dict, dict]:
    rule_kw = {k: v for k, v in settings.items() if k not in _LEARNER_KEYS}
    return rule_kw, {k: v for k, v in settings.items() if k in _LEARNER_KEYS}


def nutch_default(**settings) -> Learner:
    """Apache Nutch ``DefaultFetchSchedule``: every page every ``interval_default``
    seconds (``db.fetch.interval.default``, 2592000 = 30 days), with the generator's
    ``fetch_interval_max`` (``db.fetch.interval.max``, 7776000 s) checked one ``cycle``
    (seconds, default 86400) after each fetch.  The learner's options go to :func:`rule_learner`."""
    rule_kw, kw = _split(settings)
    return rule_learner(FIXED, _nutch_default_params(**rule_kw), **kw)


def nutch_adaptive(**settings) -> Learner:
    """Apache Nutch ``AdaptiveFetchSchedule`` with the properties ``inc_rate``,
    ``dec_rate``, ``min_interval``, ``max_interval``, ``sync_delta``, ``sync_delta_rate``
    (``db.fetch.schedule.adaptive.*``), ``interval_default`` and ``fetch_interval_max``
    (``db.fetch.interval.{default, max}``), all in seconds with the defaults of
    ``nutch-default.xml``, and the crawl ``cycle`` (seconds, default 86400).  The
    learner's options go to :func:`rule_learner`."""
    rule_kw, kw = _split(settings)
    return rule_learner(NUTCH, _nutch_adaptive_params(**rule_kw), **kw)


def stormcrawler_adaptive(**settings) -> Learner:
    """StormCrawler ``AdaptiveScheduler`` with the keys ``fetch_interval_default``,
    ``fetch_interval_min``, ``fetch_interval_max`` (minutes) and ``rate_incr``,
    ``rate_decr`` (its documented defaults).  The learner's options go to :func:`rule_learner`."""
    rule_kw, kw = _split(settings)
    return rule_learner(STORMCRAWLER, _stormcrawler_params(**rule_kw), **kw)


def heritrix_wait(**settings) -> Learner:
    """Heritrix 1.x ``WaitEvaluator`` with its attributes ``initial_wait_interval_seconds``,
    ``min_wait_interval_seconds``, ``max_wait_interval_seconds``, ``unchanged_factor`` and
    ``changed_factor`` (documented defaults).  The learner's options go to :func:`rule_learner`."""
    rule_kw, kw = _split(settings)
    return rule_learner(HERITRIX, _heritrix_params(**rule_kw), **kw)


#: The heuristics' names (``jaxcrawl evaluate``'s policy names).
HEURISTICS = ("nutch-default", "nutch-adaptive", "stormcrawler-adaptive", "heritrix-wait")
_FACTORIES = dict(zip(HEURISTICS, (nutch_default, nutch_adaptive, stormcrawler_adaptive, heritrix_wait)))
_RULES = dict(zip(HEURISTICS, (FIXED, NUTCH, STORMCRAWLER, HERITRIX)))
_PARAMS = dict(zip(HEURISTICS, (_nutch_default_params, _nutch_adaptive_params, _stormcrawler_params,
                                _heritrix_params)))


def _rule_settings(crawler: str, /, **settings: Any) -> tuple[int, HeuristicParams]:
    """``(rule, params)`` of a crawler's rule with ``settings`` (:func:`heuristic`'s, without
    the learner's options), in the problem's time unit."""
    if crawler not in _PARAMS:
        raise ValueError(f"unknown heuristic {crawler!r}; use one of {', '.join(HEURISTICS)}")
    return _RULES[crawler], _PARAMS[crawler](**settings)


def heuristic(crawler: str, /, **settings: Any) -> Learner:
    """An open-source crawler's revisit rule as a :class:`~jaxcrawl.learners.Learner`.

    Args:
      crawler: one of :data:`HEURISTICS` (module docstring for each rule):

        * ``"nutch-default"``: ``interval_default``, ``fetch_interval_max``, ``cycle``
          (seconds);
        * ``"nutch-adaptive"``: ``inc_rate``, ``dec_rate``, ``min_interval``,
          ``max_interval``, ``sync_delta``, ``sync_delta_rate``, ``interval_default``,
          ``fetch_interval_max``, ``cycle`` (seconds; Nutch's
          ``db.fetch.schedule.adaptive.*`` and ``db.fetch.interval.*`` properties);
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
    r"""The ``budget_scale`` that makes a heuristic's long-run crawl volume equal ``bandwidth``
    -- for the adaptive rules a growth factor raised to a power, **outside the crawlers'
    documented ranges** (module docstring); :func:`match_in_range` stays inside them.

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


# --------------------------------------------------------------- long-run figures
class LongRun(NamedTuple):
    """Long-run figures of a rule on stationary pages (:func:`long_run`), per setting and
    page set: shape ``params batch shape + problem leading axes``.

    Attributes:
      crawl_rate: crawls per unit time, all pages.
      harmonic_cost, binary_cost: page-averaged, importance-weighted staleness (as
        :func:`jaxcrawl.harmonic_cost` / :func:`~jaxcrawl.binary_cost`).
      fresh_fraction: fraction of requests (Poisson at rates ``importance``) served fresh.
    """

    crawl_rate: jax.Array
    harmonic_cost: jax.Array
    binary_cost: jax.Array
    fresh_fraction: jax.Array


def _ein_minus_phi1(m):
    r""":math:`\mathrm{Ein}(m)-\varphi_1(m)` for the chains: the series below 2, above it
    :math:`E_1` by Abramowitz-Stegun 5.1.56 (relative error below 5e-5 on :math:`E_1`, below
    3e-6 on the result), far cheaper than the continued fraction."""
    small = m <= 2.0
    ms = jnp.where(small, m, 1.0)
    ml = jnp.where(small, 4.0, m)
    e1 = jnp.exp(-ml) / ml * (ml * (ml + 2.334733) + 0.250621) / (ml * (ml + 3.330657) + 1.681534)
    big = e1 + jnp.log(ml) + (EULER_GAMMA - 1.0) - jnp.expm1(-ml) / ml
    return jnp.where(small, horner(ms, _EIN_PHI1_COEFFS), big)


def _chain(rule, prm, lam, mu, key, burn, num, per_page=False):
    """One page set's fetch chains (module docstring, "Long-run figures"); ``per_page``: each
    page's crawl rate and its importance-weighted harmonic and binary cost and fresh time
    fraction, ``(n,)``, instead of the page set's totals."""
    dtype = lam.dtype
    n = lam.shape[-1]
    start = prm.initial_interval * (prm.budget_scale if rule == FIXED else 1.0)
    interval = jnp.ones((n,), dtype) * start
    nxt = jnp.mod(jnp.arange(n, dtype=dtype) * jnp.asarray(_GOLDEN, dtype), 1.0) * interval
    zero = jnp.zeros((n,), dtype)

    def fetch(k, interval, nxt, prev, modified):
        tau = nxt - prev
        m = lam * tau
        p = -jnp.expm1(-m)
        changed = jax.random.uniform(jax.random.fold_in(key, k), (n,), dtype) < p
        new_i, new_next, new_mod = update_interval(rule, prm, interval, nxt, modified, changed)
        return (new_i, new_next, nxt, new_mod), (tau, m, p, changed)

    def warm(k, c):   # the burn-in fetches (k <= burn): no costs booked
        return fetch(k, *c)[0]

    def measured(k, c):
        interval, nxt, prev, modified, harm, stale = c
        state, (tau, m, p, changed) = fetch(k, interval, nxt, prev, modified)
        pp = jnp.where(changed, p, 1.0)
        harm = harm + jnp.where(changed, tau * _ein_minus_phi1(m) / pp, 0.0)
        stale = stale + jnp.where(changed, tau * phi1(m) / pp, 0.0)
        return state + (harm, stale)

    # t0: the fetch of step ``burn``, the measurement's start
    interval, nxt, t0, modified = jax.lax.fori_loop(0, burn + 1, warm,
                                                    (interval, nxt, zero, jnp.full((n,), -jnp.inf, dtype)))
    _, _, last, _, harm, stale = jax.lax.fori_loop(burn + 1, burn + num + 1, measured,
                                                   (interval, nxt, t0, modified, zero, zero))
    span = last - t0
    rate = num / span
    h_i, b_i = mu * harm / span, mu * stale / span
    if per_page:
        return LongRun(rate, h_i, b_i, 1.0 - stale / span)
    h = jnp.sum(h_i) / n
    b = jnp.sum(b_i) / n
    fresh = 1.0 - jnp.sum(b_i) / jnp.maximum(jnp.sum(mu), jnp.finfo(dtype).tiny)
    return LongRun(jnp.sum(rate), h, b, fresh)


@functools.partial(jax.jit, static_argnames=("rule", "burn", "num", "per_page"))
def _long_run(key, rule, prm, lam, mu, *, burn, num, per_page=False):
    """``prm`` fields ``(G,)``, ``lam``/``mu`` ``(P, n)``: figures ``(G, P)`` (``(G, P, n)`` per
    page); one key per page set, shared by the settings (common random numbers)."""
    keys = jax.random.split(key, lam.shape[0])
    per_set = jax.vmap(lambda p, l, m, k: _chain(rule, p, l, m, k, burn, num, per_page), (None, 0, 0, 0))
    return jax.vmap(lambda p: per_set(p, lam, mu, keys))(prm)


def long_run(key: jax.Array, crawler: str, problem: CrawlProblem, params: HeuristicParams | None = None, *,
             burn_in_fetches: int = 64, num_fetches: int = 256, per_page: bool = False,
             **settings: Any) -> LongRun:
    r"""Long-run crawl rate and costs of a crawler's rule on stationary pages.

    Every page's fetches are simulated as a chain (module docstring, "Long-run figures"):
    ``burn_in_fetches`` fetches from the first, then ``num_fetches`` measured, all pages in
    step; one compiled program for every setting and page set.

    Args:
      key: PRNG key (one stream per page set, shared by the settings: common random numbers).
      crawler: one of :data:`HEURISTICS`.
      problem: the pages; ``change_rate`` and ``importance`` may carry leading axes (page
        sets of equal size, e.g. independent draws).
      params: :class:`HeuristicParams` overrides; fields may be arrays of one common
        shape (a grid of settings); ``None`` fields take ``settings``' values.
      burn_in_fetches, num_fetches: fetches per page before and in the measurement.
      per_page: each page's figures instead of the page set's: its crawl rate, its
        importance-weighted harmonic and binary cost (their mean over pages is the
        page-averaged cost) and the fraction of time it is fresh.
      **settings: the crawler's settings (:func:`heuristic`, in its units).

    Returns:
      :class:`LongRun` of shape ``grid shape + problem leading axes`` (``+ (n,)`` per page).
    """
    for name, v, low in (("burn_in_fetches", burn_in_fetches, 0), ("num_fetches", num_fetches, 1)):
        if not isinstance(v, (int, np.integer)) or v < low:
            raise ValueError(f"{name} must be an int >= {low}, got {v!r}")
    lam = jnp.asarray(problem.change_rate)
    mu = jnp.broadcast_to(jnp.asarray(problem.importance, lam.dtype), lam.shape)
    return _long_run_arrays(key, crawler, lam, mu, params, burn_in_fetches, num_fetches, settings, bool(per_page))


def _long_run_arrays(key, crawler, lam, mu, params, burn_in_fetches, num_fetches, settings, per_page=False):
    rule, defaults = _rule_settings(crawler, **settings)
    prm = _full_params(params, defaults, lam.dtype)
    grid_shape = jnp.broadcast_shapes(*(jnp.shape(v) for v in prm))
    prm = HeuristicParams(*(jnp.broadcast_to(v, grid_shape).reshape(-1) for v in prm))
    lead = lam.shape[:-1]
    out = _long_run(key, rule, prm, lam.reshape(-1, lam.shape[-1]), mu.reshape(-1, lam.shape[-1]),
                    burn=int(burn_in_fetches), num=int(num_fetches), per_page=per_page)
    tail = lam.shape[-1:] if per_page else ()
    return LongRun(*(v.reshape(grid_shape + lead + tail) for v in out))


# ------------------------------------------------------- matching inside the ranges
# Each adaptive rule's documented knobs, as a grid: growth values x ceiling multipliers (on
# the maximum interval settings) x shrink values, each a line over floors (the minimum
# interval: the default, then 6 hours to 64 days; the volume falls along it); interval
# settings are documented as any positive value.  The shrink knob stops at 0.05
# (changed-factor 1.05): below it a page needs thousands of fetches to leave its initial
# interval, so no chain of a few hundred fetches measures its long run.
_GRIDS = {
    "nutch-adaptive": dict(grow=("inc_rate", (0.1, 0.3, 0.5)), shrink=("dec_rate", (0.05, 0.5)),
                           ceilings=(1.0, 8.0), ranges="inc_rate, dec_rate <= 0.5 (nutch-default.xml); "
                           "min_interval, max_interval, db.fetch.interval.max > 0"),
    "stormcrawler-adaptive": dict(grow=("rate_incr", (0.25, 0.5, 1.0)), shrink=("rate_decr", (0.05, 1.0)),
                                  ceilings=(1.0, 8.0), ranges="0 < rate.incr, rate.decr <= 1; "
                                  "fetchInterval.min, fetchInterval.max > 0"),
    "heritrix-wait": dict(grow=("unchanged_factor", (1.25, 1.5, 2.5)), shrink=("changed_factor", (1.05, 4.0)),
                          ceilings=(1.0, 8.0), ranges="unchanged-factor, changed-factor >= 1; "
                          "min-wait-interval-seconds, max-wait-interval-seconds > 0"),
}


def _knobs(crawler, grow, shrink):
    """HeuristicParams grow/shrink factors from the crawler's own knob values."""
    if crawler == "heritrix-wait":
        return grow, 1.0 / shrink
    return 1.0 + grow, 1.0 - shrink


class RangeMatch(NamedTuple):
    """Result of :func:`match_in_range`; arrays of shape ``problem leading axes + (B,)``.

    Attributes:
      bandwidth: ``(B,)`` the bandwidths.
      reached: some documented setting reaches the bandwidth (else the figures are at the
        grid point whose volume is closest to it, and ``crawl_rate`` says where).
      harmonic_cost, binary_cost: the lowest cost over the documented settings at the
        bandwidth, each objective's own best (module docstring of :func:`match_in_range`).
      crawl_rate: the volume of the harmonic-best setting (the bandwidth when reached).
      settings: the harmonic-best setting as :func:`heuristic`'s keyword arguments (the
        crawler's own names and units; ``dict`` of arrays, the shrink knob interpolated),
        every value inside the documented ranges.
      scaled_reached, scaled_harmonic_cost, scaled_binary_cost, scaled_crawl_rate: the same
        at the crawler's defaults with only the interval settings (initial, minimum,
        maximum; Nutch's ``db.fetch.interval.max`` too) multiplied by one factor.
      interval_scale: that factor (harmonic).
      ranges: the documented ranges searched, in words.
    """

    bandwidth: Any
    reached: Any
    harmonic_cost: Any
    binary_cost: Any
    crawl_rate: Any
    settings: dict
    scaled_reached: Any
    scaled_harmonic_cost: Any
    scaled_binary_cost: Any
    scaled_crawl_rate: Any
    interval_scale: Any
    ranges: str


def _bracket(vol, bw):
    """Where each bandwidth ``(B,)`` falls along the last axis of ``vol`` (falling): ``(reached,
    j, w, near)`` of shape ``vol.shape[:-1] + (B,)``: the crossing between ``j`` and ``j + 1``
    at log-weight ``w``; ``near`` the point of the volume closest to the bandwidth."""
    lv = np.log(np.maximum(vol, 1e-300))[..., None, :]
    lb = np.log(bw)[:, None]
    above = lv >= lb
    cross = above[..., :-1] & ~above[..., 1:]
    j = np.argmax(cross, -1)
    v0, v1 = _at(vol, j), _at(vol, j + 1)
    l0, l1 = np.log(np.maximum(v0, 1e-300)), np.log(np.maximum(v1, 1e-300))
    den = l1 - l0
    ok = np.isfinite(den) & (den != 0)  # elsewhere no crossing (or a flat step): the weight is unused
    w = np.clip(np.where(ok, (lb[..., 0] - l0) / np.where(ok, den, 1.0), 0.0), 0.0, 1.0)
    return cross.any(-1), j, w, np.argmin(np.abs(lv - lb), -1)


def _at(a, idx):
    """``a[..., idx]`` per bandwidth: ``a`` ``(..., S)``, ``idx`` ``(..., B)``."""
    a = np.broadcast_to(np.asarray(a)[..., None, :], idx.shape + np.shape(a)[-1:])
    return np.take_along_axis(a, idx[..., None], -1)[..., 0]


def _lerp(a0, a1, w):
    return np.exp(np.log(np.maximum(a0, 1e-300)) * (1 - w) + np.log(np.maximum(a1, 1e-300)) * w)


def _refined(bw, ends, mid):
    """Log-log interpolation at the bandwidth of ``(x, volume, harmonic, binary)`` in the half
    of the bracket ``ends`` (two tuples) that the measured midpoint ``mid`` leaves it in."""
    lo, hi = ends
    upper = mid[1] >= bw            # the midpoint still crawls too much: the bandwidth is beyond it
    a = tuple(np.where(upper, m, e) for m, e in zip(mid, lo))
    b = tuple(np.where(upper, e, m) for m, e in zip(mid, hi))
    la, lb_ = np.log(np.maximum(a[1], 1e-300)), np.log(np.maximum(b[1], 1e-300))
    w = np.clip((np.log(bw) - la) / np.where(lb_ != la, lb_ - la, 1.0), 0.0, 1.0)
    return tuple(_lerp(u, v, w) for u, v in zip(a, b))


@functools.partial(jax.jit, static_argnames=("rule", "burn", "num"))
def _long_run_paired(keys, rule, prm, lam, mu, *, burn, num):
    """``prm`` fields and ``keys`` ``(P, K)`` with ``lam``/``mu`` ``(P, n)``: setting ``[p, k]``
    on page set ``p`` with key ``[p, k]``."""
    one = lambda p, l, m, k: _chain(rule, p, l, m, k, burn, num)  # noqa: E731
    return jax.vmap(jax.vmap(one, (0, None, None, 0)), (0, 0, 0, 0))(prm, lam, mu, keys)


def match_in_range(key: jax.Array, crawler: str, problem: CrawlProblem, bandwidths: ArrayLike, *,
                   shrink_points: int = 6, floor_points: int = 10, scale_points: int = 25,
                   scale_range: tuple[float, float] = (1 / 64, 4096.0),
                   burn_in_fetches: int = 64, num_fetches: int = 256, sample_pages: int | None = None,
                   **settings: Any) -> RangeMatch:
    r"""Match a crawler's rule to bandwidths with settings inside its documented ranges.

    A rule's long-run volume and costs do not depend on the bandwidth, so one
    :func:`long_run` over a grid of settings serves every bandwidth: the documented grid
    (``"nutch-adaptive"``: ``inc_rate`` x ``dec_rate`` in (0, 0.5];
    ``"stormcrawler-adaptive"``: ``rate.incr`` x ``rate.decr`` in (0, 1];
    ``"heritrix-wait"``: ``unchanged-factor`` x ``changed-factor`` >= 1; the shrink knob on
    ``shrink_points`` log-spaced values from 0.05, as slower shrinking needs thousands of
    fetches to leave the initial interval; each x ceilings (the maximum interval settings
    times 1 and 8) x floors (the minimum interval: the default, then ``floor_points - 1``
    log-spaced values from 6 hours to 64 days) -- interval settings are documented as any
    positive value) and the defaults with the interval settings scaled by ``scale_points``
    log-spaced factors over ``scale_range``.  Along each line of the grid (the floor, or
    the scale) the volume falls; the bandwidth is
    bracketed, the bracket's log-interpolated setting is run once more (same random
    numbers) and the figures are log-log interpolated in the half-bracket that holds the
    bandwidth.  The best is the lowest cost over the grid's lines and the scaled defaults,
    for each objective (``settings``: the harmonic-best).  ``"nutch-default"`` has one knob, its
    interval: its best is its scaled default.

    With ``sample_pages`` (``m``, smaller than the number of pages ``n``) the search runs on
    ``m`` pages of each page set, taken evenly along the order of their change rates (the
    page at each ``(j + 1/2) n/m``-th rank; a rule's volume and costs depend on a page
    through its change rate and importance), their volumes scaled by ``n/m``: the grid's
    work falls by ``n/m``, and the figures returned are the sample's estimates (run the
    chosen ``settings`` on every page with :func:`long_run` for the page set's own).

    Args:
      key: PRNG key.
      crawler: one of :data:`HEURISTICS`.
      problem: the pages (leading axes: independent page sets, matched separately).
      bandwidths: crawls per unit time to match, ``(B,)``.
      shrink_points, floor_points, scale_points, scale_range: the grids.
      burn_in_fetches, num_fetches: :func:`long_run`'s Monte Carlo.
      sample_pages: search on this many pages of each page set (above); ``None``: every page.
      **settings: the crawler's base settings (default: its documented defaults).

    Returns:
      ``RangeMatch`` (fields: ``bandwidth``; ``reached``, ``harmonic_cost``, ``binary_cost``,
      ``crawl_rate`` and ``settings`` -- the crawler's own names and units -- of the best
      documented setting; ``scaled_reached``, ``scaled_harmonic_cost``,
      ``scaled_binary_cost``, ``scaled_crawl_rate`` and ``interval_scale`` of the scaled
      defaults; ``ranges``, in words), arrays of shape ``problem leading axes + (B,)``.
      An unreached bandwidth's figures are those of the setting whose volume is closest.
    """
    bw = np.atleast_1d(np.asarray(bandwidths, np.float64))
    if bw.ndim != 1 or np.any(~np.isfinite(bw)) or np.any(bw <= 0):
        raise ValueError(f"bandwidths must be finite and > 0, got {bandwidths!r}")
    if not all(isinstance(v, int) and v >= 2 for v in (shrink_points, floor_points, scale_points)):
        raise ValueError("shrink_points, floor_points and scale_points must be ints >= 2")
    lo, hi = (float(v) for v in scale_range)
    if not (0 < lo < hi and math.isfinite(hi)):
        raise ValueError(f"scale_range must be 0 < low < high < inf, got {scale_range!r}")
    rule, base = _rule_settings(crawler, **settings)
    for name, v, low in (("burn_in_fetches", burn_in_fetches, 0), ("num_fetches", num_fetches, 1)):
        if not isinstance(v, (int, np.integer)) or v < low:
            raise ValueError(f"{name} must be an int >= {low}, got {v!r}")
    tu = float(settings.get("time_unit_seconds", 86400.0))
    lam = jnp.asarray(problem.change_rate)
    dtype = lam.dtype
    lead, n = lam.shape[:-1], lam.shape[-1]
    mu = jnp.broadcast_to(jnp.asarray(problem.importance, dtype), lam.shape).reshape(-1, n)
    lam = lam.reshape(-1, n)
    scale_volume = 1.0
    if sample_pages is not None:
        if not isinstance(sample_pages, (int, np.integer)) or sample_pages < 2:
            raise ValueError(f"sample_pages must be an int >= 2 (or None), got {sample_pages!r}")
        if sample_pages < n:
            lam, mu = _even_sample(lam, mu, int(sample_pages))
            scale_volume = n / int(sample_pages)
    k_scaled, k_grid = jax.random.split(key)
    # ---- the scaled defaults: one line over the factor c
    c = np.geomspace(lo, hi, scale_points)
    scaled = HeuristicParams(initial_interval=base.initial_interval * c, min_interval=base.min_interval * c,
                             max_interval=base.max_interval * c, fetch_interval_max=base.fetch_interval_max * c)
    run = _long_run_arrays(k_scaled, crawler, lam, mu, scaled, burn_in_fetches, num_fetches, settings)
    vs, hs, bs = (np.asarray(a, np.float64).T for a in run[:3])                       # (P, C)
    vs = vs * scale_volume
    rs, js, ws, ns = _bracket(vs, bw)                                                  # (P, B)
    ends_s = [tuple(_at(a, js + i) for a in (np.broadcast_to(c, vs.shape), vs, hs, bs)) for i in (0, 1)]
    xs_mid = np.where(rs, _lerp(ends_s[0][0], ends_s[1][0], ws), _at(c, ns))
    cand = [HeuristicParams(initial_interval=base.initial_interval * xs_mid, min_interval=base.min_interval * xs_mid,
                            max_interval=base.max_interval * xs_mid,
                            fetch_interval_max=base.fetch_interval_max * xs_mid)]
    g = _GRIDS.get(crawler)
    if g is not None:
        # ---- the documented grid: lines (grow, ceiling, floor) over the shrink knob
        (gname, gvals), (sname, (s_lo, s_hi)) = g["grow"], g["shrink"]
        if crawler == "heritrix-wait":   # changed-factor - 1, log-spaced
            shrink_k = 1.0 + np.geomspace(s_hi - 1.0, s_lo - 1.0, shrink_points)
        else:
            shrink_k = np.geomspace(s_hi, s_lo, shrink_points)
        lo_i = float(base.min_interval)
        floor = np.concatenate([[lo_i], np.maximum(np.geomspace(0.25, 64.0, floor_points - 1) * 86400.0 / tu, lo_i)])
        # lines (grow, ceiling, shrink) along the floor, the minimum interval: the volume falls along each
        G, C, S, F = np.meshgrid(np.asarray(gvals, np.float64), np.asarray(g["ceilings"], np.float64), shrink_k,
                                 floor, indexing="ij")
        grow_f, shrink_f = _knobs(crawler, G, S)
        grid = HeuristicParams(grow=grow_f, shrink=shrink_f, min_interval=F,
                               max_interval=np.maximum(float(base.max_interval) * C, F),   # a ceiling above its floor
                               fetch_interval_max=base.fetch_interval_max * C)
        run = _long_run_arrays(k_grid, crawler, lam, mu, grid, burn_in_fetches, num_fetches, settings)
        L = G[..., 0].size
        vg, hg, bg = (np.moveaxis(np.asarray(a, np.float64).reshape(L, floor.size, -1), -1, 0)
                      for a in run[:3])                                                # (P, L, K)
        vg = vg * scale_volume
        rg, jg, wg, ng = _bracket(vg, bw)                                              # (P, L, B)
        miss = np.abs(np.log(_at(vg, ng) / bw))
        rows = np.arange(vg.shape[0])[:, None]
        xg_all = np.broadcast_to(F.reshape(L, floor.size)[None], vg.shape)
        lines = []
        for cost in (hg, bg):   # the best line for each objective
            c_line = np.where(rg, _lerp(_at(cost, jg), _at(cost, jg + 1), wg), np.inf)
            best = np.where(rg.any(-2), np.argmin(c_line, -2), np.argmin(miss, -2))          # (P, B)
            pick = lambda a, best=best: np.take_along_axis(a, best[..., None, :], -2)[..., 0, :]  # noqa: E731
            jb, wb, nb = pick(jg), pick(wg), pick(ng)
            gl, cl, sl = (a[..., 0].reshape(-1)[best] for a in (G, C, S))
            curves = [a[rows, best] for a in (xg_all, vg, hg, bg)]                      # (P, B, K)
            ends = [tuple(np.take_along_axis(a, (jb + i)[..., None], -1)[..., 0] for a in curves) for i in (0, 1)]
            nearest = tuple(np.take_along_axis(a, nb[..., None], -1)[..., 0] for a in curves)
            x_mid = np.where(rg.any(-2), _lerp(ends[0][0], ends[1][0], wb), nearest[0])
            grow_m, shrink_m = _knobs(crawler, gl, sl)
            cand.append(HeuristicParams(grow=grow_m, shrink=shrink_m, min_interval=x_mid,
                                        max_interval=np.maximum(float(base.max_interval) * cl, x_mid),
                                        fetch_interval_max=base.fetch_interval_max * cl))
            lines.append((ends, nearest, x_mid, gl, cl, sl))
        rb = rg.any(-2)
    # ---- the bracket's midpoints, run once more on the same random numbers
    full = [_full_params(p, base, dtype) for p in cand]
    both = HeuristicParams(*(jnp.concatenate([jnp.broadcast_to(getattr(p, f), (lam.shape[0], bw.size))
                                              for p in full], -1) for f in HeuristicParams._fields))
    # the page sets' keys of the grids (the same random numbers as the brackets' ends)
    keys = jnp.concatenate([jnp.repeat(jax.random.split(k, lam.shape[0])[:, None], bw.size, 1)
                            for k in (k_scaled, k_grid, k_grid)[:len(full)]], 1)
    mid = _long_run_paired(keys, rule, both, lam, mu, burn=int(burn_in_fetches), num=int(num_fetches))
    mid = [np.asarray(a, np.float64) for a in mid[:3]]                                  # (P, K * B)
    mid[0] = mid[0] * scale_volume
    nb_s = tuple(_at(a, ns) for a in (np.broadcast_to(c, vs.shape), vs, hs, bs))
    sc = _refined(bw, ends_s, (xs_mid,) + tuple(m[:, :bw.size] for m in mid))
    sc = tuple(np.where(rs, a, z) for a, z in zip(sc, nb_s))
    out_s = (rs, sc[2], sc[3], sc[1], sc[0])
    if g is None:
        shape = lambda a: a.reshape(lead + (bw.size,))  # noqa: E731
        rs_, h_, b_, v_, x_ = (shape(a) for a in out_s)
        return RangeMatch(bw, rs_, h_, b_, v_, {"interval_default": x_ * float(base.initial_interval) * tu},
                          rs_, h_, b_, v_, x_,
                          "interval_default > 0 (one knob: the scaled default is the best)")
    refined = []
    for i, (ends, nearest, x_mid, _, _, _) in enumerate(lines):
        r = _refined(bw, ends, (x_mid,) + tuple(m[:, (i + 1) * bw.size:(i + 2) * bw.size] for m in mid))
        refined.append(tuple(np.where(rb, a, z) for a, z in zip(r, nearest)))
    gr, grb = refined
    _, _, _, gl, cl, sl = lines[0]
    use = rs & (~rb | (sc[2] < gr[2]))
    reached = rs | rb
    best_binary = np.where(rs & (~rb | (sc[3] < grb[3])), sc[3], grb[3])
    init_name, min_name, max_name = {
        "nutch-adaptive": ("interval_default", "min_interval", "max_interval"),
        "stormcrawler-adaptive": ("fetch_interval_default", "fetch_interval_min", "fetch_interval_max"),
        "heritrix-wait": ("initial_wait_interval_seconds", "min_wait_interval_seconds", "max_wait_interval_seconds"),
    }[crawler]
    unit = tu / (60.0 if crawler == "stormcrawler-adaptive" else 1.0)
    dflt_g, dflt_s = _defaults_in_units(crawler, base)
    chosen = {gname: np.where(use, dflt_g, gl), sname: np.where(use, dflt_s, sl),
              min_name: np.where(use, float(base.min_interval) * sc[0], gr[0]) * unit,
              max_name: np.where(use, float(base.max_interval) * sc[0],
                                 np.maximum(float(base.max_interval) * cl, gr[0])) * unit,
              init_name: np.where(use, sc[0], 1.0) * float(base.initial_interval) * unit}
    if crawler == "nutch-adaptive":
        chosen["fetch_interval_max"] = np.where(use, sc[0], cl) * float(base.fetch_interval_max) * tu
    shape = lambda a: np.reshape(a, lead + (bw.size,))  # noqa: E731
    return RangeMatch(bw, shape(reached), shape(np.where(use, sc[2], gr[2])), shape(best_binary),
                      shape(np.where(use, sc[1], gr[1])), {k: shape(v) for k, v in chosen.items()},
                      *(shape(a) for a in out_s), g["ranges"])


def _even_sample(lam, mu, m):
    """``m`` pages of each page set ``(P, n)``, evenly along the order of the change rates:
    the page of rank ``floor((j + 1/2) n / m)``, ``j < m``."""
    n = lam.shape[-1]
    order = np.argsort(np.asarray(lam), axis=-1, kind="stable")
    rank = np.floor((np.arange(m) + 0.5) * (n / m)).astype(np.int64)
    idx = jnp.asarray(order[:, rank])
    return jnp.take_along_axis(lam, idx, -1), jnp.take_along_axis(mu, idx, -1)


def _defaults_in_units(crawler, base):
    """The grow and shrink knobs of ``base`` in the crawler's own names' units."""
    grow, shrink = float(base.grow), float(base.shrink)
    if crawler == "heritrix-wait":
        return grow, 1.0 / shrink
    return grow - 1.0, 1.0 - shrink
