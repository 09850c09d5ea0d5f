r"""One window ``(t, t + w]`` of the simulated world: :func:`simulate_window`.

The kernel runs per problem instance (pages on axis 0) as a chain of small steps, each a
pure function of NamedTuples:

1. :func:`_draw_counts` -- per page, the number of random events (changes, and the crawls
   of a Poisson page: Poisson((ξ+ρ)w), L2C §2, K19 eq. 3) and of periodic crawls (L2C
   K_R), and each page's run of slots in the flat event pool;
2. :func:`_index_slots` -- the page, and the position within its page, of every slot;
3. :func:`_place_events` -- event times (sorted uniforms from exponential spacings),
   change / crawl labels (superposition for Poisson pages, thinning for signal pages,
   K19 eq. 6), periodic crawls merged in time order;
4. :func:`_count_changes` -- running counts of changes and crawls, the uncrawled
   changes N(s) after every event (K19 eq. 1);
5. :func:`_integrate_staleness` -- exact :math:`\int H(N)` (K19 eq. 2) and
   :math:`\int 1\{N>0\}` over the window;
6. :func:`_observe` -- the crawler's observations (L2C eq. 1, App. K) per page;
7. :func:`_carry` -- the :class:`~jaxcrawl.simulate.SimState` of the next window;
8. :func:`_draw_requests` -- requests served fresh and stale (L2C eq. 2).
"""
from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from .._src.observations import Observations
from .._src.sampling import LIGHT_CAP, LIGHT_MEAN, cummax, cumsum, poisson_counts, segmented_cumsum
from .._src.special import harmonic_number
from ..core.problem import CrawlProblem
from ._schedules import PERIODIC, POISSON, SIGNAL, Schedule
from ._state import SimConfig, SimState


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


# --------------------------------------------------------------------------- kernel state
class _Pages(NamedTuple):
    """One instance's pages (``(n,)`` each): the problem and the window's schedule."""

    change_rate: jax.Array
    importance: jax.Array
    kind: jax.Array
    rate: jax.Array
    prob: jax.Array
    period: jax.Array
    phase: jax.Array


class _Layout(NamedTuple):
    """Per page (``(n,)``): event counts and the page's run of slots in the pool."""

    num_random: jax.Array  # random events simulated (changes + Poisson crawls)
    num_periodic: jax.Array  # periodic crawls in the window
    length: jax.Array  # events of the page: num_random + num_periodic
    start: jax.Array  # first slot of the page
    end: jax.Array  # one past the page's end-of-window slot
    period: jax.Array  # period of a periodic page (1 elsewhere)
    first: jax.Array  # first periodic crawl from the window's start, in (0, period]
    overflow: jax.Array  # a capacity was exceeded


class _Slots(NamedTuple):
    """Per slot (``(pool,)``): which page it belongs to and where in the page's run."""

    slot: jax.Array
    page: jax.Array
    offset: jax.Array  # index of the slot within its page's run
    page_start: jax.Array  # first slot of the page
    in_use: jax.Array  # before the end of the last page's run


class _Placed(NamedTuple):
    """Per slot: the events in time order within each page."""

    time: jax.Array
    is_change: jax.Array
    is_crawl: jax.Array
    valid: jax.Array
    page: jax.Array
    page_start: jax.Array


class _Running(NamedTuple):
    """Per slot: running counts over the pool (global cumulative sums)."""

    changes: jax.Array  # changes up to and including the slot
    changes_before_page: jax.Array  # (n,) changes before each page's first slot
    crawls: jax.Array  # crawls up to and including the slot
    crawls_before_page: jax.Array  # (n,) crawls before each page's first slot
    last_crawl: jax.Array  # slot of the latest crawl at or before the slot (-1: none)
    uncrawled: jax.Array  # N(s) right after the slot's event


# --------------------------------------------------------------------------- steps
def _draw_counts(key: jax.Array, state: SimState, pages: _Pages, config: SimConfig) -> _Layout:
    """Random event counts (Poisson((ξ+ρ)w)), periodic crawl counts and slot ranges."""
    dtype = pages.change_rate.dtype
    wd = jnp.asarray(config.window, dtype)
    ke, npool = config.event_capacity, config.pool_capacity
    ev_mean = (pages.change_rate + pages.rate) * wd  # changes (+ Poisson crawls)
    m_raw, overflow_count = poisson_counts(
        key, ev_mean, ev_mean > LIGHT_MEAN, min(ke, LIGHT_CAP), config.heavy_event_pages
    )
    per_ok = (pages.kind == PERIODIC) & jnp.isfinite(pages.period) & (pages.period > 0)
    per = jnp.where(per_ok, pages.period, 1.0)
    first = per - jnp.mod(state.time - pages.phase, per)  # first scheduled crawl, in (0, period]
    q = jnp.where(per_ok & (first <= wd), jnp.floor((wd - first) / per) + 1.0, 0.0)
    q = q.astype(jnp.int32)
    length = jnp.minimum(m_raw, ke) + q
    end = cumsum(length + 1)  # + 1 end-of-window slot
    start = jnp.concatenate([jnp.zeros((1,), end.dtype), end[:-1]])
    # re-derive the counts from the cumulative sum: this materialises them, so XLA does
    # not fuse the inversion's chain of operations into every gather below
    length = end - start - 1
    overflow = overflow_count | (m_raw > ke) | (end > npool)
    return _Layout(num_random=length - q, num_periodic=q, length=length, start=start, end=end,
                   period=per, first=first, overflow=overflow)


def _index_slots(layout: _Layout, config: SimConfig) -> _Slots:
    """Page and position of every slot of the flat pool."""
    npool = config.pool_capacity
    slot = jnp.arange(npool, dtype=jnp.int32)
    seg_start = jnp.zeros(npool, bool).at[layout.start].set(True, mode="drop")
    page = jnp.maximum(cumsum(seg_start.astype(jnp.int32)) - 1, 0)
    page_start = layout.start[page]
    return _Slots(slot=slot, page=page, offset=slot - page_start, page_start=page_start,
                  in_use=slot < layout.end[-1])


def _place_events(key_time: jax.Array, key_label: jax.Array, pages: _Pages, layout: _Layout,
                  slots: _Slots, config: SimConfig) -> _Placed:
    """Event times and labels, in time order within each page.

    Random events sit at sorted uniform times (exponential spacings ``S_r / S_m``); a
    Poisson page's event is a change with probability ξ/(ξ+ρ) and otherwise a crawl
    (superposition), a signal page's change is crawled with probability ``prob`` (K19
    eq. 6).  A periodic page's changes are moved behind the crawls that precede them.
    """
    dtype = pages.change_rate.dtype
    wd = jnp.asarray(config.window, dtype)
    ke, npool = config.event_capacity, config.pool_capacity
    page, r, start_s, start = slots.page, slots.offset, slots.page_start, layout.start
    m_s, len_s = layout.num_random[page], layout.length[page]
    pois_s = (pages.kind == POISSON)[page]
    per_s = (pages.kind == PERIODIC)[page]
    sig_s = (pages.kind == SIGNAL)[page]

    # sorted times of the m random events: exponential spacings, S_r / S_m
    e = jax.random.exponential(key_time, (npool,), dtype)
    e = jnp.where(r <= m_s, e, 0.0)
    csum = segmented_cumsum(e, r, ke + 1)
    total = csum[jnp.clip(start + layout.num_random, 0, npool - 1)][page]
    total = jnp.where(total > 0, total, 1.0)
    is_rand = (r < m_s) & slots.in_use
    t_rand = jnp.where(is_rand, wd * csum / total, wd)
    # labels: superposition for Poisson pages, thinning for signal pages
    uu = jax.random.uniform(key_label, (npool,), dtype)
    p_change = (pages.change_rate / (pages.change_rate + pages.rate))[page]
    chg_rand = is_rand & jnp.where(pois_s, uu < p_change, True)
    crl_rand = is_rand & jnp.where(pois_s, uu >= p_change, sig_s & (uu < pages.prob[page]))

    # periodic pages: move each change behind the crawls that precede it
    per_page_s, first_s, q_s = layout.period[page], layout.first[page], layout.num_periodic[page]
    before = jnp.clip(jnp.ceil((t_rand - first_s) / per_page_s), 0, q_s).astype(jnp.int32)
    target = jnp.where(per_s & is_rand, start_s + r + before, npool)
    p_chg = jnp.zeros(npool, bool).at[target].set(True, mode="drop")
    p_time = jnp.zeros(npool, dtype).at[target].set(t_rand, mode="drop")
    p_cum = cumsum(p_chg.astype(jnp.int32))
    p_excl = p_cum - p_chg
    k_idx = r - (p_excl - p_excl[start][page])  # index of a periodic crawl slot
    p_crl_time = jnp.minimum(first_s + k_idx.astype(dtype) * per_page_s, wd)
    is_ev = (r < len_s) & slots.in_use
    chg = jnp.where(per_s, p_chg & is_ev, chg_rand)
    crl = jnp.where(per_s, is_ev & ~p_chg, crl_rand)
    t = jnp.where(per_s, jnp.where(p_chg, p_time, p_crl_time), t_rand)
    t = jnp.where(is_ev, t, wd)
    t, chg, crl, is_ev, page, start_s = jax.lax.optimization_barrier(
        (t, chg, crl, is_ev, page, start_s)
    )
    return _Placed(time=t, is_change=chg, is_crawl=crl, valid=is_ev, page=page,
                   page_start=start_s)


def _count_changes(placed: _Placed, layout: _Layout, slots: _Slots, state: SimState) -> _Running:
    """Uncrawled changes after each slot: ``C - C(at the last crawl)``, or ``N0 + C``."""
    start, page = layout.start, placed.page
    chg_i = placed.is_change.astype(jnp.int32)
    cg = cumsum(chg_i)  # global count of changes up to and including the slot
    cg0 = (cg - chg_i)[start]  # before each page's first slot
    last_crawl = cummax(jnp.where(placed.is_crawl, slots.slot, -1))
    has = last_crawl >= placed.page_start
    lc = jnp.maximum(last_crawl, 0)
    n_after = jnp.where(has, cg - cg[lc], cg - cg0[page] + state.num_changes[page])
    crl_i = placed.is_crawl.astype(jnp.int32)
    kg = cumsum(crl_i)
    return _Running(changes=cg, changes_before_page=cg0, crawls=kg,
                    crawls_before_page=(kg - crl_i)[start], last_crawl=last_crawl,
                    uncrawled=n_after)


def _integrate_staleness(placed: _Placed, running: _Running, layout: _Layout, state: SimState,
                         config: SimConfig) -> tuple[jax.Array, jax.Array]:
    """Exact ∫H(N(s))ds (K19 eq. 1-2) and ∫1{N(s)>0}ds: sums over the segments between
    events, where N is constant."""
    t, page = placed.time, placed.page
    dtype = t.dtype
    n = layout.start.shape[0]
    wd = jnp.asarray(config.window, dtype)
    n0 = state.num_changes
    t_next = jnp.concatenate([t[1:], wd[None]])
    dur = jnp.where(placed.valid, jnp.maximum(t_next - t, 0.0), 0.0)
    t_first = t[jnp.clip(layout.start, 0, config.pool_capacity - 1)]
    harm = harmonic_number(n0, dtype) * t_first + jax.ops.segment_sum(
        harmonic_number(running.uncrawled, dtype) * dur, page, n, indices_are_sorted=True
    )
    stale = jnp.where(n0 > 0, t_first, 0.0) + jax.ops.segment_sum(
        jnp.where(running.uncrawled > 0, dur, 0.0), page, n, indices_are_sorted=True
    )
    return harm, jnp.clip(stale, 0.0, wd)


def _observe(placed: _Placed, running: _Running, layout: _Layout, state: SimState,
             config: SimConfig) -> tuple[Observations, jax.Array]:
    """Each crawl's interval and change count (L2C eq. 1, App. K), scattered into
    ``(n, crawl_capacity)``; also the pages that had more crawls than slots."""
    t, page, crl = placed.time, placed.page, placed.is_crawl
    dtype = t.dtype
    n, kr = layout.start.shape[0], config.crawl_capacity
    cg, cg0 = running.changes, running.changes_before_page
    prev = jnp.concatenate([jnp.full((1,), -1, jnp.int32), running.last_crawl[:-1]])
    has_prev = prev >= placed.page_start
    pv = jnp.maximum(prev, 0)
    count = jnp.where(has_prev, cg - cg[pv], cg - cg0[page] + state.num_changes[page])
    interval = t - jnp.where(has_prev, t[pv], -state.since_crawl[page])
    rank = running.crawls - running.crawls_before_page[page] - 1
    rec = crl & (rank < kr)
    dest = jnp.where(rec, page * kr + rank, n * kr)
    lost = jax.ops.segment_max(
        (crl & (rank >= kr)).astype(jnp.int32), page, n, indices_are_sorted=True
    )

    def scatter(values, fill):
        flat = jnp.full((n * kr,), fill, values.dtype).at[dest].set(values, mode="drop")
        return flat.reshape(n, kr)

    counts = scatter(count, 0)
    obs = Observations(
        intervals=scatter(interval, 0.0),
        changed=(counts > 0).astype(dtype),
        mask=scatter(rec, False),
        counts=counts,
        crawl_times=scatter(t, jnp.asarray(jnp.inf, dtype)),
    )
    return obs, lost > 0


def _carry(placed: _Placed, running: _Running, layout: _Layout, state: SimState,
           config: SimConfig) -> tuple[SimState, jax.Array, jax.Array]:
    """The next window's state, read at each page's end-of-window slot, and the window's
    change and crawl counts."""
    start = layout.start
    wd = jnp.asarray(config.window, placed.time.dtype)
    end_slot = jnp.clip(start + layout.length, 0, config.pool_capacity - 1)
    lc_end = running.last_crawl[end_slot]
    crawled = lc_end >= start
    num_changes = (running.changes[end_slot] - running.changes_before_page).astype(jnp.int32)
    num_crawls = (running.crawls[end_slot] - running.crawls_before_page).astype(jnp.int32)
    since_new = jnp.where(crawled, wd - placed.time[jnp.maximum(lc_end, 0)],
                          state.since_crawl + wd)
    new = SimState(time=state.time + wd, since_crawl=since_new,
                   num_changes=running.uncrawled[end_slot].astype(jnp.int32))
    return new, num_changes, num_crawls


def _draw_requests(key: jax.Array, importance: jax.Array, stale: jax.Array,
                   config: SimConfig) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Requests that found the page fresh and stale: Poisson(ζ × fresh time) and
    Poisson(ζ × stale time), the request process being independent of the page's path
    (L2C eq. 2-3).  Zeros when ``config.requests`` is off."""
    dtype = stale.dtype
    wd = jnp.asarray(config.window, dtype)
    n = stale.shape[0]
    if not config.requests:
        zero = jnp.zeros((n,), jnp.int32).astype(dtype)
        return zero, zero, jnp.zeros((n,), bool)
    fresh_time = wd - stale
    heavy = importance * wd > LIGHT_MEAN
    req, overflow = poisson_counts(
        key, importance * jnp.stack([fresh_time, stale]), heavy, config.request_capacity,
        config.heavy_pages,
    )
    return req[0].astype(dtype), req[1].astype(dtype), overflow


def _window_kernel(key: jax.Array, state: SimState, pages: _Pages,
                   config: SimConfig) -> tuple[SimState, Window]:
    """One window for one problem instance (pages on axis 0); see :func:`simulate_window`."""
    key_count, key_time, key_label, key_req = jax.random.split(key, 4)
    pages = pages._replace(rate=jnp.where(pages.kind == POISSON, pages.rate, 0.0))
    layout = _draw_counts(key_count, state, pages, config)
    slots = _index_slots(layout, config)
    placed = _place_events(key_time, key_label, pages, layout, slots, config)
    running = _count_changes(placed, layout, slots, state)
    harmonic, stale = _integrate_staleness(placed, running, layout, state, config)
    obs, lost = _observe(placed, running, layout, state, config)
    new_state, num_changes, num_crawls = _carry(placed, running, layout, state, config)
    fresh_req, stale_req, over_req = _draw_requests(key_req, pages.importance, stale, config)
    out = Window(
        observations=obs,
        num_changes=num_changes,
        num_crawls=num_crawls,
        harmonic=harmonic,
        stale_time=stale,
        requests=fresh_req + stale_req,
        fresh_requests=fresh_req,
        overflow=layout.overflow | lost | over_req,
        events=Events(page=placed.page, time=placed.time, is_change=placed.is_change,
                      is_crawl=placed.is_crawl, valid=placed.valid),
    )
    return new_state, out


def simulate_window(
    key: jax.Array, state: SimState, problem: CrawlProblem, schedule: Schedule, config: SimConfig
) -> tuple[SimState, Window]:
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

    The staleness integrals ∫H(N) and ∫1{N>0} (K19 eq. 1-2) are sums over the segments
    between events (N is piecewise constant), with no time grid.  A change and a crawl
    never coincide except for a signal crawl, which happens right after its change.

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
    pages = _Pages(
        change_rate=xi,
        importance=jnp.broadcast_to(problem.importance, shape).astype(xi.dtype),
        kind=sched.kind,
        rate=sched.rate.astype(xi.dtype),
        prob=sched.prob.astype(xi.dtype),
        period=sched.period.astype(xi.dtype),
        phase=sched.phase.astype(xi.dtype),
    )
    state = SimState(time=jnp.broadcast_to(jnp.asarray(state.time, xi.dtype), batch),
                     since_crawl=state.since_crawl, num_changes=state.num_changes)
    fn = functools.partial(_window_kernel, config=config)
    for _ in batch:
        fn = jax.vmap(fn)
    keys = jax.random.split(key, math.prod(batch)).reshape(batch) if batch else key
    return fn(keys, state, pages)
