"""Many windows in one ``jax.lax.scan``: :func:`simulate`, its per-page :class:`Totals`,
and :func:`history` (stacked observations as one padded crawl history)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .._src.observations import Observations
from ..core.problem import CrawlProblem
from ._schedules import Schedule
from ._state import SimConfig, SimState
from ._validate import check_schedule
from ._window import Window, simulate_window


class Totals(NamedTuple):
    r"""Per-page sums over the windows of :func:`simulate` (all ``(..., n)``).

    Attributes:
      harmonic: :math:`\int H(N(s))\,ds` (K19 eq. 1-2, unweighted).
      stale_time: :math:`\int 1\{N(s) > 0\}\,ds`.
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


def _zero_totals(shape: tuple[int, ...], dtype) -> Totals:
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
    key: jax.Array,
    problem: CrawlProblem,
    schedule: Schedule,
    state: SimState,
    config: SimConfig,
    num_windows: int,
    *,
    schedule_per_window: bool = False,
    record_fn: Callable[[Window], Any] | None = None,
) -> tuple[SimState, Totals, Any]:
    """Run ``num_windows`` windows of :func:`~jaxcrawl.simulate.simulate_window` in one
    ``jax.lax.scan`` (the model of L2C §2 and K19 §2; costs K19 eq. 1-2, L2C eq. 2).

    Args:
      key: PRNG key.
      problem: the pages.
      schedule: a :class:`~jaxcrawl.simulate.Schedule`, or with
        ``schedule_per_window=True`` one whose leaves have a leading axis of length
        ``num_windows`` (a policy per window).
      state: the initial :class:`~jaxcrawl.simulate.SimState`
        (:func:`~jaxcrawl.simulate.init_state`, :func:`~jaxcrawl.simulate.stationary_state`).
      config: static :class:`~jaxcrawl.simulate.SimConfig`.
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
    check_schedule(
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
    happened: the padded-history format of :mod:`jaxcrawl.estimators` (the partial
    observations of L2C eq. 1, the full ones of App. K).  ``crawl_times`` stays relative
    to each window's start.
    """

    def merge(a):
        a = jnp.moveaxis(a, 0, -2)
        return a.reshape(a.shape[:-2] + (a.shape[-2] * a.shape[-1],))

    return jax.tree_util.tree_map(merge, records)
