r"""Crawl histories shared by the crawling learners.

* :class:`PaddedHistory` -- every observation in the padded ``(pages, slots)`` format of
  :mod:`jaxcrawl.estimators`, a ring of windows (explore-then-commit, L2C §5);
* :class:`CrawlHistory` -- the compressed history of K19 Alg. 4 (NeurIPS-19): the changed
  crawls in a ring buffer tagged with their epoch, the unchanged time and the change
  signals per epoch column (LambdaLearnAndCrawl, phased ε-greedy).  The likelihood of eq.
  10 (and L2C eq. 6) depends on the intervals of crawls that saw no change only through
  their sum, so :func:`suffix_history` gives an estimator-ready padded history whose MLE is
  exactly the one of the full suffix.  :func:`crawl_epoch` executes a policy for one
  epoch / phase and records it (K19 Alg. 4 lines 5-8).
"""
from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from jaxcrawl._src.observations import EVENT, OBSERVATION, Observed
from jaxcrawl.core.problem import CrawlProblem
from jaxcrawl.simulate import ObserveConfig, SimConfig, SimState, observe_window, simulate_window

__all__ = [
    "PaddedHistory",
    "empty_padded_history",
    "append_window",
    "window_utility",
    "CrawlHistory",
    "empty_history",
    "start_epoch",
    "record_window",
    "in_suffix",
    "suffix_history",
    "EpochStats",
    "crawl_epoch",
    "record_observed",
    "observe_epoch",
    "use_observation",
    "check_observe",
]


# ------------------------------------------------------------------ padded history
class PaddedHistory(NamedTuple):
    """A crawl history in the padded format of :mod:`jaxcrawl.estimators` (``(m, slots)``).

    Window ``j`` of a run writes its ``crawl_capacity`` slots at columns
    ``[j K, (j + 1) K)`` (modulo the buffer: a ring of windows).
    """

    intervals: jax.Array
    changed: jax.Array
    mask: jax.Array


def empty_padded_history(num_pages: int, num_slots: int, dtype: Any) -> PaddedHistory:
    """An empty :class:`PaddedHistory` of ``num_slots`` slots per page."""
    return PaddedHistory(jnp.zeros((num_pages, num_slots), dtype),
                         jnp.zeros((num_pages, num_slots), dtype),
                         jnp.zeros((num_pages, num_slots), bool))


def append_window(hist: PaddedHistory, observations: Any, block: ArrayLike) -> PaddedHistory:
    """Write one window's padded observations at block ``block`` (modulo the ring)."""
    k = observations.mask.shape[-1]
    num_blocks = hist.mask.shape[-1] // k
    col = (block % num_blocks) * k

    def upd(buf, new):
        return jax.lax.dynamic_update_slice_in_dim(buf, new.astype(buf.dtype), col, axis=-1)

    return PaddedHistory(upd(hist.intervals, observations.intervals),
                         upd(hist.changed, observations.changed), upd(hist.mask, observations.mask))


def window_utility(problem: CrawlProblem, window_result: Any, window: ArrayLike) -> jax.Array:
    r"""Simulated utility of one window, :math:`\frac1m\sum_i\zeta_i\times` fresh time: the
    conditional expectation of L2C eq. 2's count of requests served fresh given the change
    and crawl times (Campbell's formula, as in L2C eq. 3)."""
    m = problem.change_rate.shape[-1]
    return jnp.sum(problem.importance * (window - window_result.stale_time), axis=-1) / m


# ------------------------------------------------------------- compressed history
class CrawlHistory(NamedTuple):
    """Compressed crawl history of every page (K19 Alg. 4's ``obs_hist``).

    Attributes:
      changed_interval: ``(n, C)`` ring buffer of the intervals of crawls that saw a change.
      changed_epoch: ``(n, C)`` int32 epoch of each ring entry (-1: empty).
      head: ``(n,)`` int32 number of changed crawls ever written (the write position is
        ``head mod C``).
      dropped_epoch: ``(n,)`` int32 latest epoch with a ring entry that was overwritten
        (-1: none); the page's suffix starts after it.
      unchanged_time: ``(n, E)`` per epoch column, the sum of the intervals of crawls
        that saw no change.
      signals: ``(n, E)`` per epoch column, the number of change signals (complete pages,
        K19 eq. 11).
      column_epoch: ``(E,)`` int32 epoch held by each column (-1: none); epoch ``e`` uses
        column ``e mod E``.
    """

    changed_interval: jax.Array
    changed_epoch: jax.Array
    head: jax.Array
    dropped_epoch: jax.Array
    unchanged_time: jax.Array
    signals: jax.Array
    column_epoch: jax.Array


def empty_history(num_pages: int, capacity: int, num_epochs: int, dtype: Any) -> CrawlHistory:
    """An empty :class:`CrawlHistory` (``capacity`` changed crawls, ``num_epochs`` columns)."""
    n, c, e = int(num_pages), int(capacity), int(num_epochs)
    return CrawlHistory(
        changed_interval=jnp.zeros((n, c), dtype),
        changed_epoch=jnp.full((n, c), -1, jnp.int32),
        head=jnp.zeros((n,), jnp.int32),
        dropped_epoch=jnp.full((n,), -1, jnp.int32),
        unchanged_time=jnp.zeros((n, e), dtype),
        signals=jnp.zeros((n, e), dtype),
        column_epoch=jnp.full((e,), -1, jnp.int32),
    )


def start_epoch(hist: CrawlHistory, epoch: ArrayLike) -> CrawlHistory:
    """Clear the column of ``epoch`` (``epoch mod E``) and tag it with ``epoch``."""
    col = epoch % hist.column_epoch.shape[0]
    return hist._replace(
        unchanged_time=hist.unchanged_time.at[:, col].set(0.0),
        signals=hist.signals.at[:, col].set(0.0),
        column_epoch=hist.column_epoch.at[col].set(epoch),
    )


def record_window(hist: CrawlHistory, observations: Any, num_changes: ArrayLike,
                  epoch: ArrayLike) -> CrawlHistory:
    """Append one window's observations (from :func:`jaxcrawl.simulate.simulate_window`).

    Changed crawls go to the ring buffer (their interval and ``epoch``), unchanged ones
    add their interval to the epoch's column, and ``num_changes`` (the change signals)
    to the signal column.  The column of ``epoch`` must have been started
    (:func:`start_epoch`; the learners do it at the start of each epoch).
    """
    n, cap = hist.changed_interval.shape
    obs = observations
    chg = obs.mask & (obs.changed > 0)
    unc = obs.mask & ~chg
    rank = jnp.cumsum(chg.astype(jnp.int32), axis=-1) - 1
    count = jnp.sum(chg, axis=-1, dtype=jnp.int32)
    pos = jnp.where(chg, (hist.head[:, None] + rank) % cap, cap)  # cap: dropped scatter
    rows = jnp.arange(n)[:, None]
    old = jnp.where(chg, hist.changed_epoch[rows, jnp.minimum(pos, cap - 1)], -1)
    dropped = jnp.maximum(hist.dropped_epoch, jnp.max(old, axis=-1, initial=-1))
    dropped = jnp.where(count > cap, epoch, dropped)  # wrapped onto its own new entries
    col = epoch % hist.column_epoch.shape[0]
    dtype = hist.unchanged_time.dtype
    return hist._replace(
        changed_interval=hist.changed_interval.at[rows, pos].set(
            obs.intervals.astype(dtype), mode="drop"),
        changed_epoch=hist.changed_epoch.at[rows, pos].set(epoch, mode="drop"),
        head=hist.head + count,
        dropped_epoch=dropped,
        unchanged_time=hist.unchanged_time.at[:, col].add(
            jnp.sum(jnp.where(unc, obs.intervals, 0.0), axis=-1).astype(dtype)),
        signals=hist.signals.at[:, col].add(jnp.asarray(num_changes).astype(dtype)),
    )


def in_suffix(tag: jax.Array, epoch: ArrayLike, suffix_epochs: ArrayLike, num_columns: int,
              dropped: jax.Array) -> jax.Array:
    """Epoch tags inside the suffix (epoch - S, epoch], still stored, after ``dropped``."""
    t = tag.astype(jnp.result_type(float))
    s = jnp.minimum(jnp.asarray(suffix_epochs, t.dtype), num_columns)
    return (tag >= 0) & (t > epoch - s) & (tag > dropped)


def suffix_history(hist: CrawlHistory, epoch: ArrayLike,
                   suffix_epochs: ArrayLike) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The history suffix :math:`S(n)` of K19 Alg. 4 as an estimator-ready padded history.

    Returns ``(intervals, changed, mask)`` of shape ``(n, C + E)``: the ring's changed
    crawls, then one unchanged pseudo-observation per epoch column whose interval is
    the epoch's total unchanged time (the likelihood of eq. 10 depends on unchanged
    intervals only through their sum), masked to the last ``suffix_epochs`` epochs up
    to ``epoch`` and after each page's ``dropped_epoch``.
    """
    n, cap = hist.changed_interval.shape
    num_cols = hist.column_epoch.shape[0]
    dropped = hist.dropped_epoch[:, None]
    ring_ok = in_suffix(hist.changed_epoch, epoch, suffix_epochs, num_cols, dropped)
    col_ok = in_suffix(hist.column_epoch[None, :], epoch, suffix_epochs, num_cols, dropped)
    col_ok = col_ok & (hist.unchanged_time > 0)
    intervals = jnp.concatenate([hist.changed_interval, hist.unchanged_time], axis=-1)
    changed = jnp.concatenate([jnp.ones((n, cap), bool), jnp.zeros((n, num_cols), bool)], axis=-1)
    mask = jnp.concatenate([ring_ok, col_ok], axis=-1)
    return intervals, changed, mask


class EpochStats(NamedTuple):
    """Per-window diagnostics of :func:`crawl_epoch` (leading axis: the epoch's windows).

    Attributes:
      utility: :func:`window_utility` of each window.
      overflow: page-windows that overflowed a simulator capacity.
      num_crawls: crawls made in each window (all pages).
    """

    utility: jax.Array
    overflow: jax.Array
    num_crawls: jax.Array


def crawl_epoch(key: jax.Array, sim: SimState, hist: CrawlHistory, problem: CrawlProblem, schedule: Any,
                config: SimConfig, num_windows: int, epoch: ArrayLike) -> tuple[SimState, CrawlHistory, EpochStats]:
    """Execute ``schedule`` for one epoch of ``num_windows`` simulator windows (K19 Alg. 4
    lines 5-8; a phase of L2C §6.2), recording every window's observations in the column
    of ``epoch`` (started here); window ``j`` uses ``jax.random.split(key, num_windows)[j]``."""
    hist = start_epoch(hist, epoch)

    def window(carry, k):
        sim_, h = carry
        sim_, win = simulate_window(k, sim_, problem, schedule, config)
        h = record_window(h, win.observations, win.num_changes, epoch)
        stats = EpochStats(window_utility(problem, win, config.window),
                           jnp.sum(win.overflow, dtype=jnp.int32), jnp.sum(win.num_crawls, dtype=jnp.int32))
        return (sim_, h), stats

    (sim, hist), stats = jax.lax.scan(window, (sim, hist), jax.random.split(key, num_windows))
    return sim, hist, stats


# ------------------------------------------------------- observation-level sampler
def record_observed(hist: CrawlHistory, observed: Observed, epoch: ArrayLike) -> CrawlHistory:
    """:func:`record_window` for the flat observations of
    :func:`jaxcrawl.simulate.observe_window`: the same ring-buffer entries, epoch columns
    and signals as recording the same crawls window by window."""
    n, cap = hist.changed_interval.shape
    obs = observed
    pg = jnp.minimum(obs.page, n - 1)
    chg = obs.valid & obs.changed
    unc = obs.valid & ~obs.changed
    chg_i = chg.astype(jnp.int32)
    count = jax.ops.segment_sum(chg_i, pg, n, indices_are_sorted=True)
    before_page = jnp.cumsum(count) - count  # changed crawls of the pages before
    rank = jnp.cumsum(chg_i) - chg_i - before_page[pg]
    pos = jnp.where(chg, (hist.head[pg] + rank) % cap, cap)  # cap: dropped scatter
    old = jnp.where(chg, hist.changed_epoch[pg, jnp.minimum(pos, cap - 1)], -1)
    dropped = jnp.maximum(hist.dropped_epoch,
                          jax.ops.segment_max(old, pg, n, indices_are_sorted=True))
    dropped = jnp.where(count > cap, epoch, dropped)  # wrapped onto its own new entries
    col = epoch % hist.column_epoch.shape[0]
    dtype = hist.unchanged_time.dtype
    unchanged = jax.ops.segment_sum(jnp.where(unc, obs.interval, 0.0), pg, n, indices_are_sorted=True)
    return hist._replace(
        changed_interval=hist.changed_interval.at[pg, pos].set(obs.interval.astype(dtype), mode="drop"),
        changed_epoch=hist.changed_epoch.at[pg, pos].set(epoch, mode="drop"),
        head=hist.head + count,
        dropped_epoch=dropped,
        unchanged_time=hist.unchanged_time.at[:, col].add(unchanged.astype(dtype)),
        signals=hist.signals.at[:, col].add(obs.num_changes.astype(dtype)),
    )


def observe_epoch(key: jax.Array, sim: SimState, hist: CrawlHistory, problem: CrawlProblem, schedule: Any,
                  config: ObserveConfig, num_windows: int, epoch: ArrayLike, *,
                  signals: ArrayLike | None = None) -> tuple[SimState, CrawlHistory, EpochStats]:
    """:func:`crawl_epoch` with the observation-level sampler
    (:func:`jaxcrawl.simulate.observe_window`, exact in distribution): ``num_windows``
    windows of ``config.window``.  ``stats.utility`` is the conditional expectation of the
    simulated utility given the draws (the observations' ``fresh_time``;
    the same mean).  ``signals``: the completely observed pages (default
    ``problem.complete``)."""
    hist = start_epoch(hist, epoch)
    m = problem.change_rate.shape[-1]

    def window(carry, k):
        sim_, h = carry
        sim_, obs = observe_window(k, sim_, problem, schedule, config, signals=signals)
        h = record_observed(h, obs, epoch)
        stats = EpochStats(jnp.sum(problem.importance * obs.fresh_time, axis=-1) / m,
                           jnp.sum(obs.overflow, dtype=jnp.int32), jnp.sum(obs.num_crawls, dtype=jnp.int32))
        return (sim_, h), stats

    if num_windows == 1:  # one window: no loop (and one hash call fewer)
        (sim, hist), stats = window((sim, hist), key)
        return sim, hist, jax.tree_util.tree_map(lambda v: v[None], stats)
    (sim, hist), stats = jax.lax.scan(window, (sim, hist), jax.random.split(key, num_windows))
    return sim, hist, stats


# ------------------------------------------------------------------ sampler choice
def use_observation(sampler: str) -> bool:
    """``"auto"`` and ``"observation"``: the crawling learners' policies are Poisson or
    signal crawling, which the observation-level sampler simulates exactly."""
    if sampler not in ("auto", "event", "observation"):
        raise ValueError(f"sampler must be 'auto', 'event' or 'observation', got {sampler!r}")
    return sampler != "event"


def check_observe(observe: ObserveConfig | None, duration: float) -> int:
    """The sampler code of a learner built with ``observe`` (None: event level)."""
    if observe is None:
        return EVENT
    if not isinstance(observe, ObserveConfig):
        raise TypeError("observe must be a jaxcrawl.simulate.ObserveConfig or None (see the *_settings helpers)")
    if not math.isclose(observe.window, duration, rel_tol=1e-9):
        raise ValueError(f"observe.window ({observe.window}) must equal the epoch / window length "
                         f"it samples ({duration})")
    return OBSERVATION
