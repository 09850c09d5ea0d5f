r"""Revisit bounds: per-page minimum and maximum intervals between crawls, as rate bounds.

Every production crawler lets an operator say "never refetch this page more often than
every ``min_interval``" (politeness, cost) and "never leave it longer than
``max_interval``" (a freshness floor).  For a crawl rate :math:`x_i` (crawls per unit
time) these are the box constraints

.. math::

   \ell_i = 1/\mathrm{max\_interval}_i \;\le\; x_i \;\le\; h_i = 1/\mathrm{min\_interval}_i,

exactly the ``bounds`` of :func:`jaxcrawl.solve`: every objective's optimum under
them is :math:`x_i = \mathrm{clip}(\varphi_i(\nu), \ell_i, h_i)` with one dual
:math:`\nu` (the KKT conditions of the box-constrained problem), which is what
:func:`jaxcrawl.solve` computes on every path (``bounds=(lower, upper)``).  A periodic timetable
(:mod:`jaxcrawl.timetable`) crawls page :math:`i` every :math:`1/x_i`, so its gaps lie in
``[min_interval, max_interval]``.

A complete page (its changes signalled) is worth at most its change rate :math:`\lambda_i`
of crawls, all on signals.  A floor above it (``max_interval`` shorter than the page's
mean change interval) is honoured, not refused: the page crawls every signal and, beside
them, periodic crawls at rate :math:`\ell_i-\lambda_i`, which the objective does not value
but the budget counts, so its rate is fixed at :math:`x_i=\ell_i`.  In general the
objective's upper bound :math:`u_i` becomes :math:`\max(u_i,\ell_i)`.

The problem is feasible only when :math:`\ell_i\le h_i` for every page and
:math:`\sum_i\ell_i\le R\le\sum_i h_i'` (:math:`h_i'=\min(h_i,\max(u_i,\ell_i))`):
:func:`check_rate_bounds` says which pages make it infeasible, by id.
"""
from __future__ import annotations

import numpy as np
from jax.typing import ArrayLike

__all__ = ["rate_bounds", "check_rate_bounds"]


def rate_bounds(num_pages: int, *, min_interval: ArrayLike | None = None,
                max_interval: ArrayLike | None = None, min_rate: ArrayLike | None = None,
                max_rate: ArrayLike | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per-page ``(lower, upper)`` rate bounds (float64) from intervals and/or rates.

    The tighter of each pair applies: ``lower = max(min_rate, 1/max_interval)`` and
    ``upper = min(max_rate, 1/min_interval)``; missing arguments impose nothing (``0`` and
    ``inf``).  Intervals must be >= 0 (``min_interval = 0``: no bound) and
    ``max_interval > 0`` (``inf``: no bound); rates >= 0.
    """
    lo = np.zeros(num_pages)
    hi = np.full(num_pages, np.inf)
    with np.errstate(divide="ignore"):
        for name, value, is_interval, pick in (("min_interval", min_interval, True, "upper"),
                                               ("max_interval", max_interval, True, "lower"),
                                               ("min_rate", min_rate, False, "lower"),
                                               ("max_rate", max_rate, False, "upper")):
            if value is None:
                continue
            v = np.broadcast_to(np.asarray(value, np.float64), (num_pages,))
            if np.any(np.isnan(v)) or np.any(v < 0):
                i = int(np.flatnonzero(np.isnan(v) | (v < 0))[0])
                raise ValueError(f"{name} must be >= 0 for every page; page {i} has {v[i]!r}")
            if name == "max_interval" and np.any(v == 0):
                raise ValueError(f"max_interval must be > 0 (inf: no bound); page {int(np.flatnonzero(v == 0)[0])} has 0")
            r = 1.0 / v if is_interval else v
            if pick == "lower":
                lo = np.maximum(lo, r)
            else:
                hi = np.minimum(hi, r)
    return lo, hi


def _names(page_id: ArrayLike | None, idx: np.ndarray, limit: int = 5) -> str:
    ids = np.arange(idx.max() + 1) if page_id is None else np.asarray(page_id)
    shown = ", ".join(repr(ids[i].item() if hasattr(ids[i], "item") else ids[i]) for i in idx[:limit])
    more = f" and {idx.size - limit} more" if idx.size > limit else ""
    return shown + more


def check_rate_bounds(lower: ArrayLike, upper: ArrayLike, bandwidth: float, *,
                      page_id: ArrayLike | None = None, objective_upper: ArrayLike | None = None,
                      unit: str = "") -> None:
    """``ValueError`` naming the pages when the bounds make the problem infeasible.

    Checks ``lower <= upper`` page by page, ``sum(lower) <= bandwidth`` (naming the pages
    with the largest minimum rates) and ``bandwidth <= sum(min(upper, max(objective_upper,
    lower)))`` (naming the pages with the smallest maximum rates).  ``objective_upper`` is
    the most rate the objective values (a complete page's change rate); a ``lower`` above
    it is met by periodic crawls beside the signals (see the module docstring).
    """
    lo = np.asarray(lower, np.float64)
    hi = np.asarray(upper, np.float64)
    if objective_upper is not None:  # a floor above the objective's bound: periodic crawls up to it
        obj_hi = np.maximum(np.broadcast_to(np.asarray(objective_upper, np.float64), hi.shape), lo)
        hi_all = np.minimum(hi, obj_hi)
    else:
        hi_all = hi
    per = f" per {unit}" if unit else ""
    bad = np.flatnonzero(lo > hi * (1 + 1e-12))
    if bad.size:
        raise ValueError(
            f"revisit bounds: min rate > max rate (max_interval < min_interval) for {bad.size} "
            f"page(s): {_names(page_id, bad)} (first: min rate {lo[bad[0]]:.6g}, max rate "
            f"{hi[bad[0]]:.6g}{per})")
    total = float(np.sum(lo))
    if total > bandwidth * (1 + 1e-12):
        order = np.argsort(-lo, kind="stable")
        raise ValueError(
            f"revisit bounds are infeasible: the minimum rates (1/max_interval) sum to {total:.6g}"
            f"{per}, more than the bandwidth {bandwidth:.6g}; largest minimum rates: "
            f"{_names(page_id, order)} -- raise the bandwidth or lengthen their max_interval")
    most = float(np.sum(hi_all))
    if bandwidth > most * (1 + 1e-12):
        order = np.argsort(hi_all, kind="stable")
        raise ValueError(
            f"revisit bounds are infeasible: the maximum rates (1/min_interval) sum to {most:.6g}"
            f"{per}, less than the bandwidth {bandwidth:.6g}; smallest maximum rates: "
            f"{_names(page_id, order)} -- lower the bandwidth or shorten their min_interval")


def check_usable_bandwidth(bandwidth: ArrayLike, num_incomplete: ArrayLike, complete_change_rate: ArrayLike) -> None:
    """``ValueError`` when every page is complete and the bandwidth is at least their total
    change rate: a complete page gains nothing from more crawls than it has changes
    (NeurIPS-19 Problem 2 needs ``bandwidth < sum of change rates``), whatever the objective.

    The one rule of every page source -- a :class:`~jaxcrawl.CrawlProblem`, a streamed table,
    rows spread over processes -- from its (global) sums: ``num_incomplete`` pages not
    complete and ``complete_change_rate`` the complete pages' total change rate (arrays of
    a batch's shape: the first problem that breaks it is named).
    """
    bw = np.asarray(bandwidth, np.float64)
    incomplete = np.asarray(num_incomplete)
    usable = np.asarray(complete_change_rate, np.float64)
    shape = np.broadcast_shapes(bw.shape, incomplete.shape, usable.shape)
    bw, incomplete, usable = (np.broadcast_to(a, shape) for a in (bw, incomplete, usable))
    over = (incomplete == 0) & (bw >= usable)
    if np.any(over):
        i = np.flatnonzero(over.reshape(-1))[0]
        b, u = float(bw.reshape(-1)[i]), float(usable.reshape(-1)[i])
        raise ValueError(f"bandwidth exceeds what the problem can use: every page is complete and their total change "
                         f"rate is {u!r}, but bandwidth is {b!r}; a complete page gains nothing from more crawls "
                         "than changes (NeurIPS-19 Problem 2 needs bandwidth < sum of change rates) -- lower the "
                         "bandwidth below the total change rate, or add pages that are not complete")
