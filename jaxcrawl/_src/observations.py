"""The crawler's view of simulated windows: :class:`Observations` (padded per page, from
:func:`jaxcrawl.simulate.simulate_window`), :class:`Observed` (flat per crawl, from
:func:`jaxcrawl.simulate.observe_window`), and the codes of the two samplers."""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

__all__ = ["EVENT", "OBSERVATION", "SAMPLERS", "Observations", "Observed", "padded_observations"]

#: Sampler codes reported by the learners' info (``info.sampler``).
EVENT = 0
OBSERVATION = 1
SAMPLERS = {EVENT: "event", OBSERVATION: "observation"}


class Observations(NamedTuple):
    """A window's crawls per page, padded to ``crawl_capacity`` (``(..., n, K)``; the format
    of :mod:`jaxcrawl.estimators`): ``intervals`` since the previous crawl (across windows),
    ``changed`` (1.0 if the page changed since it, L2C eq. 1's ``1 - o``), ``mask``, the
    ``counts`` of changes (L2C App. K) and ``crawl_times`` from the window's start; masked
    slots hold 0 (``inf`` for the times)."""

    intervals: jax.Array
    changed: jax.Array
    mask: jax.Array
    counts: jax.Array
    crawl_times: jax.Array


class Observed(NamedTuple):
    """A window's crawls of partially observed pages, flat (``(pool_capacity,)``, each
    page's crawls contiguous and in time order): ``page`` (``n`` when unused),
    ``interval`` since the previous crawl, ``changed``, ``valid``, ``rank`` within the
    page; and per page ``(n,)``: ``num_crawls``, ``num_changes`` (the change signals of
    complete pages, K19 eq. 11), ``partial`` (crawls observed), ``overflow`` (a capacity
    was hit or the schedule is periodic) and ``fresh_time``, the expected fresh time given
    the draws (0 for complete pages)."""

    page: jax.Array
    interval: jax.Array
    changed: jax.Array
    valid: jax.Array
    rank: jax.Array
    num_crawls: jax.Array
    num_changes: jax.Array
    partial: jax.Array
    overflow: jax.Array
    fresh_time: jax.Array


def padded_observations(obs: Observed, num_slots: int) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """The flat observations of one problem as the padded ``(n, num_slots)`` histories of
    :mod:`jaxcrawl.estimators`: ``(intervals, changed, mask, lost)`` with ``lost`` the
    pages that had more crawls than ``num_slots`` (their later crawls are dropped)."""
    n = obs.num_crawls.shape[-1]
    keep = obs.valid & (obs.rank < num_slots)
    dest = jnp.where(keep, obs.page * num_slots + obs.rank, n * num_slots)

    def scatter(values, fill):
        flat = jnp.full((n * num_slots,), fill, values.dtype).at[dest].set(values, mode="drop")
        return flat.reshape(n, num_slots)

    lost = obs.partial & (obs.num_crawls > num_slots)
    return (scatter(obs.interval, 0.0), scatter(obs.changed.astype(obs.interval.dtype), 0.0),
            scatter(keep, False), lost)
