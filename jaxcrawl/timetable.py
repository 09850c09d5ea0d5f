r"""From crawl rates to a crawl timetable: deterministic, near-periodic derandomisation.

A solver returns a *rate* per page; a crawler needs to know *which URL to fetch when*.
NeurIPS-19 (Kolobov et al., §4.1) optimises over Poisson crawl policies and notes, after
Azar et al., that any of them "can be de-randomized into a deterministic policy that is
approximately periodic".  This module is that step.  Page :math:`i` with rate
:math:`\rho_i > 0` and phase :math:`\varphi_i\in[0,1)` is crawled at

.. math::

   t_{i,k} = \frac{k + \varphi_i}{\rho_i}, \qquad k\in\mathbb Z,

so its gaps are exactly :math:`1/\rho_i` (periodic, up to the float resolution of the
times) and its number of crawls in *any* window :math:`[a, b)` is
:math:`\lceil b\rho_i-\varphi_i\rceil-\lceil a\rho_i-\varphi_i\rceil`, which lies strictly
within :math:`\pm1` of :math:`\rho_i(b-a)`.  The timetable over a horizon is all these
times merged by one sort (fixed capacity plus a mask, so it jits).

Why periodic: for a page whose changes are Poisson(:math:`\lambda`), a crawl process with
i.i.d. gaps :math:`G` (mean :math:`1/\rho`) has long-run staleness
:math:`E[\int_0^G c(\lambda t)\,dt]/E[G]` for an increasing per-age cost :math:`c`; the
integral is convex in :math:`G`, so by Jensen's inequality constant gaps (periodic) beat
exponential ones (Poisson) at the same rate -- Learning to Crawl App. H shows it for
binary freshness.  :func:`periodic_binary_cost` and :func:`periodic_harmonic_cost` give
the exact long-run costs of the timetable:

* binary (NeurIPS-19 supplement eq. 12 for the Poisson analogue):
  :math:`\mu\,[1-\rho(1-e^{-\lambda/\rho})/\lambda]` (L2C App. H, eq. 29-30);
* harmonic (NeurIPS-19 eq. 1-2): with :math:`E[H(N)] = \mathrm{Ein}(m)` for
  :math:`N\sim\mathrm{Poisson}(m)` (from :math:`H(n)=\int_0^1 (1-s^n)/(1-s)\,ds`) and
  :math:`\int_0^M\mathrm{Ein} = M\,\mathrm{Ein}(M) - M + 1 - e^{-M}`, the time average over
  one period is :math:`\mu\,[\mathrm{Ein}(u) - 1 + (1-e^{-u})/u]`, :math:`u=\lambda/\rho`,
  against Prop. 1's :math:`\mu\ln(1+u)` for Poisson crawling.

Phases decide how the pages' crawls interleave: :func:`golden_phase` (Kronecker sequence
:math:`\varphi_i=\{i\,g\}`, :math:`g=(\sqrt5-1)/2`, so pages with equal rates spread
evenly -- three-distance theorem -- optionally ranked within a group such as a host, for
politeness), :func:`hashed_phase` (a hash of a page id: a page's timetable does not move
when other pages are added or removed), or any array.

Two ways to use it:

* :func:`timetable` -- every crawl in ``[start, start + horizon)``, sorted by time;
* :func:`init_crawler` / :func:`next_crawls` -- an ``(init, step)`` generator of the next
  ``K`` crawls from a :class:`CrawlerState`, for a crawler that pulls work in batches.
  Concatenated batches are exactly the timetable.

Times are in the same unit as the rates.  In float32 the times resolve about 7 digits:
use x64 when ``rate * horizon`` (or ``rate * time`` for the generator's absolute times)
exceeds ~1e4 and the gaps must be exact to better than a percent.
"""
from __future__ import annotations

import functools
import math
import warnings
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike, DTypeLike

from ._src.checks import is_concrete
from ._src.special import ein_minus_phi1, phi1
from .core.problem import CrawlProblem, Policy

__all__ = [
    "timetable",
    "golden_phase",
    "hashed_phase",
    "space_crawls",
    "init_crawler",
    "next_crawls",
    "periodic_binary_cost",
    "periodic_harmonic_cost",
]

#: round(2**32 * (sqrt(5) - 1) / 2): the golden ratio's fractional part in 32-bit fixed point.
_GOLDEN_32 = 0x9E3779B9


# --------------------------------------------------------------------------- phases
def _unit_from_bits(bits, dtype):
    """uint32 -> [0, 1) in ``dtype`` without rounding up to 1."""
    dtype = jnp.dtype(dtype)
    if jnp.finfo(dtype).nmant >= 32:
        return bits.astype(dtype) * jnp.asarray(2.0 ** -32, dtype)
    keep = jnp.finfo(dtype).nmant + 1
    return (bits >> (32 - keep)).astype(dtype) * jnp.asarray(2.0 ** -keep, dtype)


def _rank_in_group(group):
    """0-based rank of each element among the elements with the same group value (by index)."""
    n = group.shape[-1]
    order = jnp.argsort(group, stable=True)
    g_sorted = group[order]
    pos = jnp.arange(n)
    start = jnp.concatenate([jnp.ones((1,), bool), g_sorted[1:] != g_sorted[:-1]])
    first = jax.lax.cummax(jnp.where(start, pos, 0), axis=0)
    return jnp.zeros((n,), jnp.int32).at[order].set((pos - first).astype(jnp.int32))


def golden_phase(num_pages: int, *, group: ArrayLike | None = None,
                 dtype: DTypeLike | None = None) -> jax.Array:
    r"""Golden-ratio (Kronecker) phases :math:`\varphi_i = \{(r_i + 1)\,g\}`, :math:`g=(\sqrt5-1)/2`.

    ``r_i`` is the page index, or with ``group`` (e.g. host ids) the page's rank within its
    group, so that each group's pages spread evenly over the period.  By the
    three-distance theorem the first ``m`` points of the sequence cut the circle into gaps
    of at most three lengths, all within a bounded factor of ``1/m`` (the golden ratio is
    badly approximable), so ``m`` pages with equal rates give an aggregate load within
    :math:`O(\log m)` crawls of its mean in every window: the phases of NeurIPS-19 §4.1's
    periodic derandomisation.  Computed in 32-bit fixed point (exact for any index), then
    kept to the resolution of ``dtype`` (all 32 bits in float64, 24 in float32).

    Args:
      num_pages: number of pages n (static).
      group: optional ``(n,)`` integer array of group ids.
      dtype: float dtype (default: JAX's default float).

    Returns:
      ``(n,)`` phases in ``[0, 1)``.
    """
    dtype = jnp.result_type(float) if dtype is None else dtype
    if group is None:
        rank = jnp.arange(num_pages, dtype=jnp.uint32)
    else:
        group = jnp.asarray(group)
        if group.shape != (num_pages,):
            raise ValueError(f"group must have shape ({num_pages},); got {group.shape}")
        rank = _rank_in_group(group).astype(jnp.uint32)
    bits = (rank + jnp.uint32(1)) * jnp.uint32(_GOLDEN_32)  # wraps mod 2**32
    return _unit_from_bits(bits, dtype)


def _mix32(x):
    """A 32-bit integer finaliser (xor-shift-multiply; good avalanche)."""
    x = x ^ (x >> 16)
    x = x * jnp.uint32(0x7FEB352D)
    x = x ^ (x >> 15)
    x = x * jnp.uint32(0x846CA68B)
    return x ^ (x >> 16)


def hashed_phase(page_key: ArrayLike, *, seed: int = 0, dtype: DTypeLike | None = None) -> jax.Array:
    """Phases from a hash of integer page keys: stable under adding or removing pages.

    The per-page phases of the derandomised, periodic crawl policy (NeurIPS-19 §4.1), for
    a crawler whose page set changes: a page's crawl times depend on its own key only.

    Args:
      page_key: ``(n,)`` integer page ids (for string ids, hash them to integers first,
        e.g. as ``jaxcrawl schedule`` does with BLAKE2b).
      seed: integer salt (different seeds give independent-looking phases).
      dtype: float dtype.

    Returns:
      ``(n,)`` phases in ``[0, 1)``, a deterministic function of ``(page_key, seed)``.
    """
    dtype = jnp.result_type(float) if dtype is None else dtype
    key = jnp.asarray(page_key)
    if not jnp.issubdtype(key.dtype, jnp.integer):
        raise ValueError(f"page_key must be an integer array; got dtype {key.dtype}")
    if key.dtype.itemsize > 4:
        lo = (key & 0xFFFFFFFF).astype(jnp.uint32)
        hi = (key >> 32).astype(jnp.uint32)
    else:
        lo = key.astype(jnp.uint32)
        hi = jnp.zeros_like(lo)
    s = jnp.uint32(int(seed) & 0xFFFFFFFF)
    x = _mix32(lo ^ _mix32(hi + s + jnp.uint32(_GOLDEN_32)))
    return _unit_from_bits(x, dtype)


# --------------------------------------------------------------------------- counting
def _as_rate(rate):
    rate = jnp.asarray(rate)
    if not jnp.issubdtype(rate.dtype, jnp.floating):
        rate = rate.astype(jnp.result_type(float))
    return rate


def _check_rate_phase(rate, phase):
    if rate.ndim != 1:
        raise ValueError(f"rate must be a 1-D array of per-page rates; got shape {rate.shape}")
    if phase.shape != rate.shape:
        raise ValueError(f"phase must have the rates' shape {rate.shape}; got {phase.shape}")
    if is_concrete(rate, phase):
        r = np.asarray(rate)
        if np.any(~np.isfinite(r)) or np.any(r < 0):
            raise ValueError("rate must be finite and >= 0 for every page (0 = never crawl)")
        p = np.asarray(phase)
        if np.any(~np.isfinite(p)) or np.any(p < 0) or np.any(p >= 1):
            raise ValueError("phase must lie in [0, 1) for every page")


def _resolve_phase(phase, rate):
    if phase is None or (isinstance(phase, str) and phase == "golden"):
        return golden_phase(rate.shape[-1], dtype=rate.dtype)
    if isinstance(phase, str):
        if phase == "zero":
            return jnp.zeros_like(rate)
        raise ValueError(f"phase must be 'golden', 'zero' or an array; got {phase!r}")
    return jnp.asarray(phase, rate.dtype)


def _window_first(rate, phase, start, horizon, last=None):
    """First crawl index k0, offset of the first crawl (in periods) and count in the window.

    With ``last`` (each page's last crawl before the window, absolute; ``-inf`` or NaN:
    none) a page's first crawl is ``max(start, last + 1 / rate)`` instead of its grid point
    (its offset may then exceed one period, and ``k0`` is meaningless for it)."""
    pos = rate > 0
    r = jnp.where(pos, rate, 1.0)
    x0 = start * r - phase
    x1 = (start + horizon) * r - phase
    k0 = jnp.ceil(x0)
    k1 = jnp.ceil(x1)
    count = jnp.where(pos, k1 - k0, 0.0)
    delta = k0 - x0  # in [0, 1)
    if last is not None:
        has = jnp.isfinite(last) & pos
        own = jnp.maximum((jnp.where(has, last, start) - start) * r + 1.0, 0.0)
        delta = jnp.where(has, own, delta)
        count = jnp.where(has, jnp.maximum(jnp.ceil(horizon * r - own), 0.0), count)
    return k0, delta, count.astype(jnp.int32)


def _crawl_counts(rate: ArrayLike, phase: ArrayLike, start: ArrayLike, end: ArrayLike) -> jax.Array:
    r"""Exact number of crawls of each page in ``[start, end)``.

    :math:`\lceil \mathrm{end}\,\rho_i-\varphi_i\rceil-\lceil\mathrm{start}\,\rho_i-\varphi_i\rceil`:
    the integers ``k`` with ``start <= (k + phase_i) / rate_i < end``; always strictly
    within ±1 of ``rate_i * (end - start)``, so the periodic timetable spends each page's
    Poisson-optimal rate (NeurIPS-19 §4.1) to within one crawl in every window.
    Vectorised, jittable.
    """
    rate = _as_rate(rate)
    phase = jnp.asarray(phase, rate.dtype)
    start = jnp.asarray(start, rate.dtype)
    end = jnp.asarray(end, rate.dtype)
    return _window_first(rate, phase, start, end - start)[2]


# --------------------------------------------------------------------------- expansion
def _expand(counts, capacity):
    """Lay ``counts[i]`` slots for page ``i`` out in a ``(capacity,)`` buffer.

    Returns (page of each slot, index of the slot within its page, valid mask, total).
    Pages with a zero count get no slot.  O(capacity + n): one scatter and one cumsum.
    """
    n = counts.shape[0]
    ends = jnp.cumsum(counts)
    offsets = ends - counts
    total = ends[-1] if n else jnp.asarray(0, counts.dtype)
    marks = jnp.zeros((capacity,), jnp.int32).at[offsets].add(1, mode="drop")
    page = jnp.cumsum(marks) - 1
    slot = jnp.arange(capacity, dtype=counts.dtype)
    valid = slot < total
    page = jnp.clip(page, 0, max(n - 1, 0))
    j = slot - offsets[page]
    return page, j, valid, total


class Timetable(NamedTuple):
    """A crawl timetable: crawls sorted by time, in a fixed-size buffer.

    Attributes:
      time: ``(capacity,)`` crawl times, nondecreasing; ``inf`` in the padding.
      page: ``(capacity,)`` int32 page index (position in the rate vector); ``-1`` in the
        padding.  Ties in time are ordered by page index.
      mask: ``(capacity,)`` True for real crawls.
      num_crawls: total number of crawls in the window (int32), including any that did not
        fit.
      overflow: crawls that did not fit in the buffer (int32); 0 means the timetable is
        complete.  Never silently dropped: the eager entry points warn.
    """

    time: jax.Array
    page: jax.Array
    mask: jax.Array
    num_crawls: jax.Array
    overflow: jax.Array


def _sorted_events(time, page, valid):
    """Sort events by time; ties keep the buffer order, which is by page index (the
    buffers are laid out page by page), so ties are ordered by page."""
    inf = jnp.asarray(jnp.inf, time.dtype)
    time = jnp.where(valid, time, inf)
    page = jnp.where(valid, page, jnp.iinfo(jnp.int32).max).astype(jnp.int32)
    time, page = jax.lax.sort((time, page), num_keys=1, is_stable=True)
    mask = page != jnp.iinfo(jnp.int32).max
    return time, jnp.where(mask, page, -1), mask


def _window_first_host(rate, phase, start, horizon, dtype, last=None):
    """:func:`_window_first`'s offset and count computed on the host in float64 (eager
    calls): the window's start enters only through ``start * rate - phase``, which float64
    resolves to a fraction of a period even for epoch-second starts, while the working dtype
    (float32: 128 s apart near 1.7e9) cannot.  The count is ``ceil(horizon * rate - delta)``
    (equal to ``ceil(x1) - ceil(x0)``), so it depends on the window's length, not on its
    absolute position."""
    r = np.asarray(rate, np.float64)
    pos = r > 0
    r = np.where(pos, r, 1.0)
    x0 = float(start) * r - np.asarray(phase, np.float64)
    delta = np.ceil(x0) - x0  # [0, 1)
    count = np.where(pos, np.ceil(float(horizon) * r - delta), 0.0)
    below_one = np.nextafter(np.asarray(1.0, dtype), np.asarray(0.0, dtype))  # never round up to a whole period
    delta = np.minimum(delta, float(below_one))
    if last is not None:  # a last crawl: the first is max(start, last + 1 / rate), then every 1 / rate
        last = np.broadcast_to(np.asarray(last, np.float64), r.shape)
        has = np.isfinite(last) & pos
        own = np.maximum((np.where(has, last, float(start)) - float(start)) * r + 1.0, 0.0)
        delta = np.where(has, own, delta)
        count = np.where(has, np.maximum(np.ceil(float(horizon) * r - own), 0.0), count)
    return jnp.asarray(delta.astype(dtype), dtype), jnp.asarray(count.astype(np.int32))


@functools.partial(jax.jit, static_argnames=("capacity", "relative"))
def _timetable_impl(rate, phase, start, horizon, *, capacity, relative=False, delta=None, count=None, last=None):
    if delta is None:
        _, delta, count = _window_first(rate, phase, start, horizon, last)
    page, j, valid, total = _expand(count, capacity)
    r = jnp.where(rate > 0, rate, 1.0)
    rel = (j.astype(rate.dtype) + delta[page]) / r[page]  # >= 0: time since start
    time, page, mask = _sort_by_rank(rel, page, valid)
    if not relative:
        time = start + time
    overflow = jnp.maximum(total - capacity, 0).astype(jnp.int32)
    return Timetable(time, page, mask, total.astype(jnp.int32), overflow)


def _sort_by_rank(rel, page, valid, max_tie: int = 16):
    """Sort events (nonnegative times) by time, ties by buffer (= page) order.

    The bit patterns of nonnegative floats order like the floats, and XLA sorts a single
    integer array far faster than (time, page) pairs.  So: sort the integer keys alone;
    each event's rank is the start of its key's run in the sorted keys (a binary search)
    plus its position among the events with the same key in buffer order (resolved one
    per pass, smallest slot first: as many passes as the longest run of equal times);
    one scatter then puts every event in place.  When some time is shared by more than
    ``max_tie`` events (e.g. equal rates with equal phases), the stable pair sort is used
    instead (``lax.cond``: only the branch taken runs).
    """
    n = rel.shape[0]
    itype = jnp.int32 if rel.dtype == jnp.float32 else jnp.int64
    big = jnp.iinfo(itype).max
    key = jnp.where(valid, jax.lax.bitcast_convert_type(rel, itype), big)
    sorted_key = jnp.sort(key)
    slot = jnp.arange(n, dtype=jnp.int32)
    new_run = jnp.concatenate([jnp.ones((1,), bool), sorted_key[1:] != sorted_key[:-1]])
    run_start = jax.lax.cummax(jnp.where(new_run, slot, 0), axis=0)
    longest = jnp.max(jnp.where(sorted_key != big, slot - run_start + 1, 0))

    def by_rank(_):
        first = jnp.searchsorted(sorted_key, key, side="left", method="scan").astype(jnp.int32)

        def resolve(state):
            final, it = state
            open_ = valid & (final < 0)
            target = jnp.where(open_, first + it, n)
            winner = jnp.full((n + 1,), n, jnp.int32).at[target].min(slot)
            won = open_ & (winner[target] == slot)
            return jnp.where(won, first + it, final), it + 1

        final, _ = jax.lax.while_loop(lambda s: s[1] < longest, resolve,
                                      (jnp.full((n,), -1, jnp.int32), jnp.asarray(0, jnp.int32)))
        rank = jnp.where(valid, final, slot)
        t = jnp.zeros_like(rel).at[rank].set(jnp.where(valid, rel, jnp.inf), unique_indices=True)
        p = jnp.zeros((n,), jnp.int32).at[rank].set(jnp.where(valid, page, -1).astype(jnp.int32),
                                                    unique_indices=True)
        return t, p, slot < jnp.sum(valid)

    def by_sort(_):
        return _sorted_events(rel, page, valid)

    return jax.lax.cond(longest > max_tie, by_sort, by_rank, None)


def _bucket(m: int) -> int:
    """Smallest size >= max(m, 1024) of the form q * 2**k with 8 <= q < 16 (above 1024 at
    most 12.5% padding), so repeated timetables of similar size -- and every small one --
    reuse one compilation."""
    m = max(int(m), 1024)
    k = max(m.bit_length() - 4, 0)
    q = -(-m // (1 << k))
    return q << k


def timetable(
    rate: ArrayLike | Policy,
    horizon: ArrayLike,
    *,
    start: ArrayLike = 0.0,
    phase: ArrayLike | str | None = None,
    capacity: int | None = None,
    relative: bool = False,
    include_signal_pages: bool = False,
    last_crawl: ArrayLike | None = None,
) -> Timetable:
    r"""Every crawl in ``[start, start + horizon)``, page ``i`` at ``(k + phase_i) / rate_i``.

    The derandomisation of a Poisson crawl policy (NeurIPS-19 §4.1, after Azar et al.):
    per page, gaps of exactly ``1 / rate_i`` and, in every window ``[a, b)``, a number of
    crawls strictly within ±1 of ``rate_i * (b - a)`` (see :func:`_crawl_counts`).
    Consecutive windows join seamlessly (the crawl times depend only on absolute time).

    Vectorised: per-page counts, one scatter + cumsum to lay the crawls out in a buffer,
    one sort.  Jittable with ``capacity`` static.

    Args:
      rate: ``(n,)`` crawl rates (>= 0; 0 = never crawled), or a solver's
        :class:`~jaxcrawl.Policy` of one problem.  A policy's pages crawled on change
        signals (``on_signal``, NeurIPS-19 Π°) are crawled when their signals arrive,
        which no timetable can know in advance, so they are left out (rate 0) unless
        ``include_signal_pages`` (then they are timetabled at their rate).
      horizon: window length (> 0).
      start: window start.
      phase: ``(n,)`` phases in ``[0, 1)``, ``"golden"`` (default, :func:`golden_phase`)
        or ``"zero"``.
      capacity: buffer size (static).  Default (eager only): the exact number of crawls,
        rounded up to a size bucket (<= 12.5% padding).
      relative: ``time`` holds each crawl's time since ``start`` (in ``[0, horizon)``)
        instead of its absolute time.
      include_signal_pages: with a Policy, timetable its signal pages too.
      last_crawl: optional ``(n,)`` absolute time of each page's last crawl before the
        window (``-inf`` or NaN: none, the page keeps its grid).  A page with a last crawl
        continues from it: its first crawl in the window is at
        ``max(start, last_crawl_i + 1 / rate_i)`` (at ``start`` when it is overdue) and the
        next ones every ``1 / rate_i`` after that, so its next crawl is never later than
        its last plus its interval.  Without last crawls the grid is anchored at absolute
        time 0, so consecutive windows tile: the crawls of ``[a, b)`` and ``[b, c)`` are
        those of ``[a, c)``, and passing the first window's last crawl of each page
        (on the grid) gives the same crawls again.

    Returns:
      :class:`Timetable`.  Warns (``RuntimeWarning``) eagerly if crawls did not fit.

    Absolute time.  Called eagerly, the window's position on each page's grid
    (``start * rate_i - phase_i``) is computed in float64 on the host whatever the working
    dtype, so the crawls are those of the exact grid even for a ``start`` in epoch seconds
    (pass it as a Python float: a float32 array has already rounded it to 128 s near 1.7e9).
    The times within the window are then exact to the working dtype's precision over the
    window's length; with ``relative=True`` they stay that exact, and ``start + time`` in
    float64 gives absolute times (what ``jaxcrawl schedule`` writes).  With
    ``relative=False`` the returned absolute times are rounded to the working dtype near
    ``start``.  Under ``jit`` the position is computed in the working dtype.
    """
    if isinstance(rate, Policy):
        on_signal = rate.on_signal
        rate = jnp.asarray(rate.rate)
        if not include_signal_pages:
            rate = jnp.where(on_signal, jnp.zeros_like(rate), rate)
    rate = _as_rate(rate)
    phase = _resolve_phase(phase, rate)
    _check_rate_phase(rate, phase)
    if last_crawl is not None:
        if np.shape(last_crawl) != tuple(rate.shape):
            raise ValueError(f"last_crawl must have one time per page, shape {tuple(rate.shape)}; "
                             f"got {np.shape(last_crawl)}")
    concrete = is_concrete(rate, phase, start, horizon) and (last_crawl is None or is_concrete(last_crawl))
    start64 = float(np.asarray(start, np.float64)) if concrete else None  # before any rounding
    horizon64 = float(np.asarray(horizon, np.float64)) if concrete else None
    start = jnp.asarray(start, rate.dtype)
    horizon = jnp.asarray(horizon, rate.dtype)
    if concrete:
        h = float(horizon)
        if not (math.isfinite(h) and h > 0):
            raise ValueError(f"horizon must be finite and > 0; got {h}")
        if not math.isfinite(start64):
            raise ValueError(f"start must be finite; got {start64}")
    if capacity is None:
        if not concrete:
            raise ValueError("timetable under jit needs a static capacity= (the buffer size)")
        if float(np.max(np.asarray(rate, np.float64))) * h >= 2 ** 30:
            raise ValueError("rate * horizon must be < 2**30 for every page (int32 crawl counts)")
    window = {}
    if concrete:
        last64 = None if last_crawl is None else np.asarray(last_crawl, np.float64)  # not rounded to the dtype
        delta, count = _window_first_host(rate, phase, start64, horizon64, rate.dtype, last=last64)
        window = dict(delta=delta, count=count)
    elif last_crawl is not None:
        window = dict(last=jnp.asarray(last_crawl, rate.dtype))
    if capacity is None:
        total = int(np.asarray(count).astype(np.int64).sum())
        if total >= 2 ** 31 - 1:
            raise ValueError(f"the timetable has {total} crawls, more than an int32 buffer holds")
        capacity = _bucket(total)
    capacity = int(capacity)
    if capacity < 1:
        raise ValueError(f"capacity must be >= 1; got {capacity}")
    out = _timetable_impl(rate, phase, start, horizon, capacity=capacity, relative=bool(relative), **window)
    if concrete and int(out.overflow) > 0:
        warnings.warn(
            f"timetable: {int(out.overflow)} of {int(out.num_crawls)} crawls did not fit in "
            f"capacity={capacity}; the timetable is incomplete",
            RuntimeWarning,
            stacklevel=2,
        )
    return out


# ------------------------------------------------------------------ politeness gaps
class SpacedTimetable(NamedTuple):
    """A timetable after :func:`space_crawls`.

    Attributes:
      timetable: the :class:`Timetable` with the moved crawls, sorted by time; crawls moved
        past the window's end are dropped from it (``mask`` False) and counted in
        ``deferred``.
      moved: crawls whose time changed (int32).
      deferred: crawls pushed to or past the window's end (int32): the next window takes
        them.
      max_delay: the largest move (in time units).
      last_group: ``(H,)`` time of each group's last kept crawl (``-inf``: none yet): pass
        it, shifted into the next window's time coordinates, as the next window's
        ``last_group`` so that the gaps also hold across the windows' boundary.
      last_page: ``(n,)`` the same for pages.
      first_deferred: ``(n,)`` time each page's first deferred crawl was pushed to (at or
        past the window's end; ``inf``: none deferred): the page's next fetch when the
        window keeps none of its crawls.  Without page gaps the host's deferred crawls
        queue on past the end, each its gap after the one before.
    """

    timetable: Timetable
    moved: jax.Array
    deferred: jax.Array
    max_delay: jax.Array
    last_group: jax.Array
    last_page: jax.Array
    first_deferred: jax.Array


@jax.jit
def _space_impl(time, page, mask, group, group_gap, page_gap, end, last_group, last_page):
    n_groups = group_gap.shape[0]
    neg = jnp.asarray(-jnp.inf, time.dtype)
    slack = 2 * jnp.finfo(time.dtype).eps

    def step(carry, ev):
        last_g, last_p = carry
        t, p, m = ev
        p = jnp.maximum(p, 0)
        g = group[p]
        gi = jnp.clip(g, 0, max(n_groups - 1, 0))
        has_g = (g >= 0) & (n_groups > 0)
        # + 2 ulp of (previous time + gap): the gap holds after rounding too
        lg, lp = last_g[gi], last_p[p]
        lg0, lp0 = jnp.where(lg > neg, lg, 0.0), jnp.where(lp > neg, lp, 0.0)
        from_g = jnp.where(has_g & (lg > neg), lg + group_gap[gi] + slack * (jnp.abs(lg0) + group_gap[gi]), neg)
        from_p = jnp.where(lp > neg, lp + page_gap[p] + slack * (jnp.abs(lp0) + page_gap[p]), neg)
        t2 = jnp.where(m, jnp.maximum(t, jnp.maximum(from_g, from_p)), t)
        # only crawls kept in the window are remembered (one pushed to or past the end is
        # dropped; every later crawl of its host is then at or past the end too)
        kept = m & (t2 < end)
        last_g = last_g.at[gi].set(jnp.where(kept & has_g, t2, last_g[gi]))
        last_p = last_p.at[p].set(jnp.where(kept, t2, last_p[p]))
        return (last_g, last_p), t2

    init = (last_group, last_page)
    (out_g, out_p), new = jax.lax.scan(step, init, (time, page, mask))
    moved = mask & (new > time)
    keep = mask & (new < end)
    deferred = jnp.sum(mask & ~keep).astype(jnp.int32)
    t_sorted, p_sorted, m_sorted = _sorted_events(new, page, keep)
    delay = jnp.max(jnp.where(mask, new - time, 0.0), initial=0.0)
    first = _first_deferred(new, page, mask & ~keep, last_page.shape[0])
    return t_sorted, p_sorted, m_sorted, jnp.sum(moved).astype(jnp.int32), deferred, delay, out_g, out_p, first


def _first_deferred(new, page, dropped, n):
    """Each page's earliest time among its dropped crawls (``inf``: none)."""
    inf = jnp.asarray(jnp.inf, new.dtype)
    return jnp.full((n,), inf).at[jnp.maximum(page, 0)].min(jnp.where(dropped, new, inf))


def _segmented_cummax(flag, value):
    """Running maximum of ``value`` restarted where ``flag`` is True (an associative scan)."""

    def combine(a, b):
        fa, va = a
        fb, vb = b
        return fa | fb, jnp.where(fb, vb, jnp.maximum(va, vb))

    return jax.lax.associative_scan(combine, (flag, value))[1]


@jax.jit
def _space_hosts(time, page, mask, group, group_gap, end, last_group, last_page):
    """:func:`space_crawls` without page gaps, vectorised: within a host the recurrence
    ``t'_j = max(t_j, t'_{j-1} + g)`` (a max-plus linear recurrence) has the closed form
    ``t'_j = max(t_j, j g + max_{i <= j} (t_i - i g))`` over the host's crawls in time order
    (the host's last crawl before the window enters as ``i = -1``), so one sort by host, one
    segmented running maximum (an associative scan) and one sort by time give every move:
    O(E log E), no sequential pass.  ``g`` carries a margin of a few ulps of the largest time
    so that the gaps hold after rounding."""
    n_groups = group_gap.shape[0]
    dtype = time.dtype
    e = time.shape[0]
    neg, inf = jnp.asarray(-jnp.inf, dtype), jnp.asarray(jnp.inf, dtype)
    p = jnp.maximum(page, 0)
    g = group[p]
    has_g = mask & (g >= 0) & (n_groups > 0)
    gi = jnp.clip(g, 0, max(n_groups - 1, 0))
    lp = last_page[p]
    t0 = jnp.where(mask & (lp > neg), jnp.maximum(time, lp), time)  # a crawl never before its page's last
    hkey = jnp.where(has_g, gi, n_groups).astype(jnp.int32)
    idx = jnp.arange(e, dtype=jnp.int32)
    hk, ts, order = jax.lax.sort((hkey, t0, idx), num_keys=2, is_stable=True)
    pos = jnp.arange(e, dtype=jnp.int32)
    first = jnp.concatenate([jnp.ones((1,), bool), hk[1:] != hk[:-1]])
    rank = (pos - jax.lax.cummax(jnp.where(first, pos, 0), axis=0)).astype(dtype)
    on = hk < n_groups
    hg = jnp.clip(hk, 0, max(n_groups - 1, 0))
    finite = lambda x: jnp.where(jnp.isfinite(x), jnp.abs(x), 0.0)  # noqa: E731
    big = jnp.maximum(jnp.max(finite(ts), initial=0.0), jnp.max(finite(last_group), initial=0.0))
    big = jnp.maximum(big, finite(end))
    gap = jnp.where(on, group_gap[hg], 0.0)
    gap = gap + 8 * jnp.finfo(dtype).eps * (big + gap)
    lg = jnp.where(on, last_group[hg], neg)
    b = ts - rank * gap
    b = jnp.where(first & (lg > neg), jnp.maximum(b, lg + gap), b)
    b = jnp.where(on, b, neg)
    run = _segmented_cummax(first, b)
    t2s = jnp.where(on, jnp.maximum(ts, run + rank * gap), ts)
    new = jnp.zeros_like(time).at[order].set(t2s, unique_indices=True)
    new = jnp.where(mask, new, inf)
    moved = mask & (new > time)
    keep = mask & (new < end)
    deferred = jnp.sum(mask & ~keep).astype(jnp.int32)
    out_g = jnp.maximum(last_group, jnp.full_like(last_group, neg).at[gi].max(jnp.where(keep & has_g, new, neg)))
    out_p = jnp.maximum(last_page, jnp.full_like(last_page, neg).at[p].max(jnp.where(keep, new, neg)))
    t_sorted, p_sorted, m_sorted = _sorted_events(new, page, keep)
    delay = jnp.max(jnp.where(mask, new - time, 0.0), initial=0.0)
    first_def = _first_deferred(new, page, mask & ~keep, last_page.shape[0])
    return t_sorted, p_sorted, m_sorted, jnp.sum(moved).astype(jnp.int32), deferred, delay, out_g, out_p, first_def


def _round_up(x, dtype):
    """``x`` in ``dtype``, rounded up (not to nearest) when concrete: a gap never shrinks."""
    if not is_concrete(x):
        return jnp.asarray(x, dtype)
    x64 = np.asarray(x, np.float64)
    xd = x64.astype(dtype)
    return jnp.asarray(np.where(xd.astype(np.float64) < x64, np.nextafter(xd, np.asarray(np.inf, dtype)), xd), dtype)


def space_crawls(table: Timetable, group: ArrayLike, group_gap: ArrayLike, *,
                 page_gap: ArrayLike | None = None, end: ArrayLike = jnp.inf,
                 last_group: ArrayLike | None = None, last_page: ArrayLike | None = None) -> SpacedTimetable:
    r"""Move crawls later so that no group (host) is crawled twice within its gap.

    A crawler's politeness rule -- a host's ``Crawl-delay`` -- is a minimum time between
    two fetches of the same host.  Host caps (:func:`jaxcrawl.politeness.solve_with_host_caps`
    with cap :math:`1/\text{delay}`) keep each host's *rate* within it, but a periodic
    timetable can still put two of a host's pages close together.  This pass walks the
    crawls in time order and sets each one to

    .. math::

       t'_j = \max\big(t_j,\; t'_{\text{prev. crawl of its host}} + \text{gap}_h,\;
       t'_{\text{prev. crawl of its page}} + \text{page\_gap}_i\big),

    so, by construction, consecutive crawls of a host are at least its gap apart and
    consecutive crawls of a page at least ``page_gap`` apart (e.g. its ``min_interval``).
    Crawls only move later; crawls moved to or past ``end`` are dropped and counted
    (``deferred``).  Without page gaps (``page_gap`` None or all 0, what ``jaxcrawl
    schedule`` uses) each host's recurrence is solved in closed form, vectorised: one sort
    by host, one segmented running maximum (associative scan), one sort by time --
    O(E log E) for E crawls.  With page gaps the hosts and pages interact, and one
    ``lax.scan`` walks the crawls in time order (E sequential steps).

    Args:
      table: a :class:`Timetable` (times sorted, e.g. from :func:`timetable`).
      group: ``(n,)`` int group (host) of every page, ``-1`` for none.
      group_gap: ``(H,)`` minimum time between two crawls of a group, >= 0.
      page_gap: ``(n,)`` minimum time between two crawls of a page (default 0).
      end: the window's end (``start + horizon``).
      last_group: ``(H,)`` time of each group's last crawl before this window, in this
        window's time coordinates (``-inf``: none; default).  Consecutive windows keep the
        gaps across their boundary when each passes the previous window's ``last_group``
        (and ``last_page``), shifted by the window's length if the times are relative
        (``timetable(..., relative=True)``): ``prev.last_group - horizon``.
      last_page: ``(n,)`` the same for pages.

    Returns:
      :class:`SpacedTimetable`; its ``last_group`` / ``last_page`` are the times of each
      group's / page's last crawl kept so far (this window's, else the ones passed in).
    """
    time = jnp.asarray(table.time)
    group = jnp.asarray(group, jnp.int32)
    n = group.shape[0]
    gap = _round_up(group_gap, time.dtype)
    pg = jnp.zeros((n,), time.dtype) if page_gap is None else jnp.broadcast_to(_round_up(page_gap, time.dtype), (n,))
    if is_concrete(group, gap, pg):
        g = np.asarray(group)
        if np.any(g >= gap.shape[0]) or np.any(g < -1):
            raise ValueError(f"group must be -1 or in [0, {gap.shape[0]}) for every page")
        if np.any(~(np.asarray(gap) >= 0)) or np.any(~(np.asarray(pg) >= 0)):
            raise ValueError("group_gap and page_gap must be >= 0 (and not NaN)")
    n_groups = max(gap.shape[0], 1)
    lg = (jnp.full((n_groups,), -jnp.inf, time.dtype) if last_group is None
          else jnp.asarray(last_group, time.dtype))
    lp = jnp.full((n,), -jnp.inf, time.dtype) if last_page is None else jnp.asarray(last_page, time.dtype)
    if lp.shape != (n,):
        raise ValueError(f"last_page must have one time per page, shape {(n,)}; got {lp.shape}")
    if lg.shape != (n_groups,):
        if gap.shape[0] == 0 and lg.shape == (0,):
            lg = jnp.full((1,), -jnp.inf, time.dtype)
        else:
            raise ValueError(f"last_group must have one time per group, shape {(gap.shape[0],)}; got {lg.shape}")
    if is_concrete(lg, lp) and (np.any(np.isnan(np.asarray(lg))) or np.any(np.isnan(np.asarray(lp)))):
        raise ValueError("last_group and last_page must not be NaN (-inf: no earlier crawl)")
    end = jnp.asarray(end, time.dtype)
    no_page_gaps = page_gap is None or (is_concrete(pg) and not np.any(np.asarray(pg) > 0))
    if no_page_gaps:
        gap1 = gap if gap.shape[0] else jnp.zeros((1,), time.dtype)
        t, p, m, moved, deferred, delay, out_g, out_p, first = _space_hosts(
            time, jnp.asarray(table.page), jnp.asarray(table.mask), group, gap1, end, lg, lp)
    else:
        t, p, m, moved, deferred, delay, out_g, out_p, first = _space_impl(
            time, jnp.asarray(table.page), jnp.asarray(table.mask), group, gap, pg, end, lg, lp)
    out = Timetable(t, p, m, table.num_crawls, table.overflow)
    return SpacedTimetable(out, moved, deferred, delay, out_g[:gap.shape[0]], out_p, first)


# --------------------------------------------------------------------------- generator
class CrawlerState(NamedTuple):
    """State of the crawl generator.

    Attributes:
      next_index: ``(n,)`` int32: page ``i``'s next crawl is its ``k``-th,
        at ``(next_index_i + phase_i) / rate_i`` (absolute time).
      time: time of the last emitted crawl (or the start time).
    """

    next_index: jax.Array
    time: jax.Array


def init_crawler(rate: ArrayLike, phase: ArrayLike | str | None = None,
                 start: ArrayLike = 0.0) -> CrawlerState:
    """Generator state whose first crawls are the timetable's crawls at or after ``start``.

    The ``init`` of the crawl generator (:func:`next_crawls` is its ``step``) of the
    periodic derandomised policy (NeurIPS-19 §4.1).

    Args:
      rate: ``(n,)`` crawl rates.
      phase: as for :func:`timetable`.
      start: absolute start time.
    """
    rate = _as_rate(rate)
    phase = _resolve_phase(phase, rate)
    _check_rate_phase(rate, phase)
    start = jnp.asarray(start, rate.dtype)
    k0, _, _ = _window_first(rate, phase, start, jnp.zeros_like(start))
    return CrawlerState(next_index=k0.astype(jnp.int32), time=start)


def _pending(rate, phase, next_index, tau, cap):
    """Crawls of each page strictly before ``tau`` not yet emitted, clipped to ``[0, cap]``.

    Computed in floating point and clipped before the integer cast, so far-off ``tau``
    cannot overflow int32 (only the comparison of the sum with ``cap`` matters there).
    """
    pos = rate > 0
    r = jnp.where(pos, rate, 1.0)
    c = jnp.ceil(tau * r - phase) - next_index.astype(rate.dtype)
    c = jnp.clip(jnp.where(pos, c, 0.0), 0.0, cap)
    return c.astype(jnp.int32)


@functools.partial(jax.jit, static_argnames=("num_crawls", "max_steps"))
def _next_impl(state, rate, phase, *, num_crawls, max_steps=200):
    K = num_crawls
    dtype = rate.dtype
    pos = rate > 0
    r = jnp.where(pos, rate, 1.0)
    k = state.next_index
    nxt = jnp.where(pos, (k.astype(dtype) + phase) / r, jnp.inf)
    n_pos = jnp.sum(pos)
    total_rate = jnp.sum(jnp.where(pos, rate, 0.0))
    total_rate = jnp.where(total_rate > 0, total_rate, 1.0)
    eps = jnp.finfo(dtype).eps
    count = lambda tau: jnp.sum(_pending(rate, phase, k, tau, K), dtype=jnp.int32)  # noqa: E731
    t_min = jnp.min(nxt)
    # strictly below every pending crawl, with room for the rounding of (k + phase) / rate
    lo = t_min - 8.0 * eps * jnp.abs(t_min) - jnp.finfo(dtype).tiny
    # Every pending crawl is at most one period after the last emitted one, so the window
    # [t_min, t_min + (K + 2 n) / R) holds >= K crawls; max(next) + K / R always does.
    t_max = jnp.max(jnp.where(pos, nxt, -jnp.inf))
    hi_safe = t_max + K / total_rate
    hi_safe = hi_safe + 8.0 * eps * jnp.abs(hi_safe)
    hi_fast = t_min + (K + 2.0 * n_pos) / total_rate
    hi_fast = hi_fast + 8.0 * eps * jnp.abs(hi_fast)
    c_fast = count(hi_fast)
    hi = jnp.where((c_fast >= K) & (hi_fast < hi_safe), hi_fast, hi_safe)
    c_hi = jnp.where((c_fast >= K) & (hi_fast < hi_safe), c_fast, count(hi))
    c_lo = jnp.asarray(0, jnp.int32)

    # Safeguarded interpolation on the step function count(tau) (two interpolation steps,
    # aiming between the K-th and the (K+1)-th crawl, then one bisection step), keeping
    # count(lo) < K <= count(hi); stop when count(hi) == K or lo, hi are adjacent floats.
    def cond(s):
        lo, hi, c_lo, c_hi, it = s
        mid = lo + 0.5 * (hi - lo)
        return (c_hi != K) & (mid > lo) & (mid < hi) & (it < max_steps)

    def body(s):
        lo, hi, c_lo, c_hi, it = s
        w = hi - lo
        frac = (K - 0.5 - c_lo) / jnp.maximum(c_hi - c_lo, 1).astype(dtype)
        interp = lo + jnp.clip(frac, 0.001, 0.999) * w
        mid = jnp.where(it % 3 == 2, lo + 0.5 * w, interp)
        mid = jnp.where((mid > lo) & (mid < hi), mid, lo + 0.5 * w)
        c = count(mid)
        enough = c >= K
        return (jnp.where(enough, lo, mid), jnp.where(enough, mid, hi),
                jnp.where(enough, c_lo, c), jnp.where(enough, c, c_hi), it + 1)

    lo, hi, c_lo, c_hi, _ = jax.lax.while_loop(
        cond, body, (lo, hi, c_lo, c_hi, jnp.asarray(0, jnp.int32)))
    before = _pending(rate, phase, k, lo, K)  # sum < K
    upto = _pending(rate, phase, k, hi, K)
    # Exactly K crawls before hi: take them.  Otherwise lo, hi are adjacent floats and the
    # crawls in [lo, hi) tie in time (to rounding): take the first ones by page index.
    is_cand = upto > before
    need = K - jnp.sum(before)
    chosen = is_cand & (jnp.cumsum(is_cand.astype(jnp.int32)) <= need)
    emit = jnp.where(c_hi == K, upto, before + chosen.astype(jnp.int32))
    page, j, valid, total = _expand(emit, K)
    t = ((k[page] + j).astype(dtype) + phase[page]) / r[page]
    time, page, mask = _sorted_events(t, page, valid)
    new_index = k + emit
    last = jnp.max(jnp.where(mask, time, -jnp.inf))
    new_state = CrawlerState(new_index, jnp.where(jnp.any(mask), last, state.time))
    tt = Timetable(time, page, mask, total.astype(jnp.int32),
                   jnp.maximum(total - K, 0).astype(jnp.int32))
    return new_state, tt


def next_crawls(state: CrawlerState, rate: ArrayLike, phase: ArrayLike | str | None = None, *,
                num_crawls: int) -> tuple[CrawlerState, Timetable]:
    """The next ``num_crawls`` crawls of the timetable after ``state``: ``(state, Timetable)``.

    Page ``i``'s crawls are at ``(k + phase_i) / rate_i`` (NeurIPS-19 §4.1's periodic
    derandomisation, as in :func:`timetable`).

    The ``step`` of an ``(init, step)`` pair (:func:`init_crawler`): a crawler pulls its
    work in batches, and the concatenated batches are exactly :func:`timetable`'s crawls
    (ties in time ordered by page index; crawls whose times differ only by rounding may
    be split across batches by page index).  The K-th crawl time is located by a
    safeguarded interpolation/bisection on the exact pending-crawl count (one pass over
    the pages per step, a few steps), then the crawls are laid out and sorted in a
    ``(K,)`` buffer.  O(n) per step plus O(K log K); jittable with ``num_crawls`` static.

    If every page has rate 0 the batch is empty (``mask`` all False).
    """
    rate = _as_rate(rate)
    phase = _resolve_phase(phase, rate)
    _check_rate_phase(rate, phase)
    if not isinstance(num_crawls, int) or num_crawls < 1:
        raise ValueError(f"num_crawls must be a positive int; got {num_crawls!r}")
    if state.next_index.shape != rate.shape:
        raise ValueError("state.next_index must have the rates' shape")
    return _next_impl(state, rate, phase, num_crawls=num_crawls)


# --------------------------------------------------------------------------- costs
def _rate_signal(problem, rate):
    if isinstance(rate, Policy):
        return rate.rate, rate.on_signal
    return jnp.asarray(rate), problem.complete.astype(bool)


def periodic_binary_cost(problem: CrawlProblem, rate: ArrayLike | Policy, *,
                         per_page: bool = False) -> jax.Array:
    r"""Long-run binary staleness of crawling every page periodically at its rate, page-averaged.

    A page crawled every :math:`1/\rho` is stale a fraction
    :math:`1-\rho(1-e^{-\lambda/\rho})/\lambda` of the time (Learning to Crawl App. H,
    eq. 29-30); the cost is :math:`\mu` times that, the periodic counterpart of
    NeurIPS-19 supplement eq. 12 (:func:`jaxcrawl.binary_cost`), and never larger than it.
    Pages crawled on change signals (a Policy's ``on_signal``, or ``problem.complete`` for
    a rate array) keep eq. 13's cost :math:`\mu(1-p)`.  A page with rate 0 costs
    :math:`\mu`.
    """
    rate, on_signal = _rate_signal(problem, rate)
    mu, lam = problem.importance, problem.change_rate
    pos = rate > 0
    r = jnp.where(pos, rate, 1.0)
    per = mu * phi1(lam / r)
    per = jnp.where(pos, per, mu)
    sig = mu * (1.0 - jnp.minimum(rate / lam, 1.0))
    cost = jnp.where(on_signal, sig, per)
    return cost if per_page else jnp.mean(cost, axis=-1)


def periodic_harmonic_cost(problem: CrawlProblem, rate: ArrayLike | Policy, *,
                           per_page: bool = False) -> jax.Array:
    r"""Long-run harmonic staleness of crawling every page periodically at its rate, page-averaged.

    NeurIPS-19 eq. 1-2 for a page crawled every :math:`1/\rho`: the time average of
    :math:`E[H(N(t))]`, :math:`N(t)\sim\mathrm{Poisson}(\lambda t)`, over
    :math:`t\in[0,1/\rho)`, is :math:`\mu\,[\mathrm{Ein}(u)-1+(1-e^{-u})/u]` with
    :math:`u=\lambda/\rho` (see the module docstring); never larger than Prop. 1's
    Poisson cost :math:`\mu\ln(1+u)` (:func:`jaxcrawl.harmonic_cost`).  Pages crawled on
    change signals keep Prop. 4's cost :math:`-\mu\ln p`.  Rate 0 costs ``inf``.
    """
    rate, on_signal = _rate_signal(problem, rate)
    mu, lam = problem.importance, problem.change_rate
    pos = rate > 0
    r = jnp.where(pos, rate, 1.0)
    per = mu * ein_minus_phi1(lam / r)
    prob = jnp.minimum(r / lam, 1.0)
    sig = -mu * jnp.log(prob)
    cost = jnp.where(on_signal, sig, per)
    cost = jnp.where(pos, cost, jnp.inf)
    return cost if per_page else jnp.mean(cost, axis=-1)
