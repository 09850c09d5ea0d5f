"""Crawl histories as tables, and the change-rate estimates written from them.

A history CSV has the header ``page_id,interval,changed[,importance]`` (``url_id`` is
accepted for ``page_id``): one row per observation, in time order within each page;
``interval`` is the time since the page's previous crawl (> 0), ``changed`` whether the
page changed in it (0/1), ``importance`` an optional score that must be the same on every
row of a page.  :func:`read_histories` keeps the observations flat, page by page
(:class:`Histories`; its padded ``(pages, k)`` view is what the estimators take), from
such a table or from a NeurIPS-19 data set directory (:func:`load_crawl_dataset`).
"""
from __future__ import annotations

import os
from typing import NamedTuple

import numpy as np
from jax.typing import ArrayLike

from .._src.checks import outside_normal_range
from ._formats import file_format, write_table
from ._neurips19 import CrawlDataset, LoadReport, load_crawl_dataset
from ._schema import Column, FileReport, Schema, TableError
from ._tables import finite_or_blank, read_table, write_csv

#: History CSV: ``page_id,interval,changed[,importance]``.
HISTORY = Schema(
    "crawl history",
    (Column("page_id", aliases=("url_id",)),
     Column("interval", "number", minimum=0.0, exclusive_minimum=True),
     Column("changed", "binary"),
     Column("importance", "number", minimum=0.0, required=False, default=np.nan,
            same_within="page_id")),
    rows="observations",
)


class Histories(NamedTuple):
    """Every page's crawl history, stored flat (memory proportional to the number of
    observations, however unequal the pages' history lengths), ready for
    :mod:`jaxcrawl.estimators`.

    Attributes:
      page_id: ``(n,)`` page ids (strings from a CSV, integer URL_IDs from a data set).
      importance: ``(n,)`` float64 importance, NaN where unknown.
      obs_interval: ``(N,)`` every observation's interval since the previous crawl, page
        by page (page ``i``'s are ``obs_interval[offsets[i]:offsets[i + 1]]``, in time order).
      obs_changed: ``(N,)`` bool change indicators, in the same order.
      offsets: ``(n + 1,)`` int64 start of each page's observations (``offsets[-1] == N``).
      complete: ``(n,)`` bool, pages with complete change observations (data sets only).
      complete_change_rate: ``(n,)`` their given change rate, NaN elsewhere.
      source: the file or directory read.
      report: the table's ``FileReport`` (:attr:`jaxcrawl.io.Table.report`), or the
        data set's ``LoadReport`` (:attr:`jaxcrawl.io.CrawlDataset.report`).

    The padded ``(n, k)`` view the estimators take directly (``k`` the longest history) is
    :attr:`intervals` / :attr:`changed` / :attr:`mask`, built on access -- for pages of very
    unequal lengths use :meth:`padded` on groups of similar length, as ``jaxcrawl
    estimate`` does (``jaxcrawl.cli._estimate.estimate_rates``).
    """

    page_id: np.ndarray
    importance: np.ndarray
    obs_interval: np.ndarray
    obs_changed: np.ndarray
    offsets: np.ndarray
    complete: np.ndarray
    complete_change_rate: np.ndarray
    source: str
    report: FileReport | LoadReport

    @property
    def num_observations(self) -> np.ndarray:
        """``(n,)`` int64 number of observations of each page."""
        return np.diff(self.offsets)

    def padded(self, pages: ArrayLike | None = None, width: int | None = None) -> tuple:
        """``(intervals, changed, mask)`` of ``pages`` (default all), left-aligned and padded
        to ``width`` columns (default: their longest history; at least 1)."""
        pages = np.arange(self.offsets.size - 1) if pages is None else np.asarray(pages, np.int64)
        count = self.num_observations[pages]
        k = max(int(count.max()) if count.size else 0, 1) if width is None else int(width)
        if count.size and int(count.max()) > k:
            raise ValueError(f"width {k} is below the longest history ({int(count.max())}) of the pages asked for")
        rows = np.repeat(np.arange(pages.size), count)
        cols = np.arange(rows.size) - np.repeat(np.cumsum(count) - count, count)
        src = np.repeat(self.offsets[pages], count) + cols
        intervals = np.zeros((pages.size, k), self.obs_interval.dtype)
        changed = np.zeros((pages.size, k), bool)
        mask = np.zeros((pages.size, k), bool)
        intervals[rows, cols] = self.obs_interval[src]
        changed[rows, cols] = self.obs_changed[src]
        mask[rows, cols] = True
        return intervals, changed, mask

    @property
    def intervals(self) -> np.ndarray:
        """``(n, k)`` intervals padded with 0 (built on access)."""
        return self.padded()[0]

    @property
    def changed(self) -> np.ndarray:
        """``(n, k)`` change indicators padded with False (built on access)."""
        return self.padded()[1]

    @property
    def mask(self) -> np.ndarray:
        """``(n, k)`` True where an observation exists, left-aligned (built on access)."""
        return self.padded()[2]


def _read_history_table(path: str | os.PathLike[str], *, errors: str = "raise",
                        dtype: type = np.float64, hint: str = "") -> Histories:
    """:func:`read_histories` of a table (``complete`` all False)."""
    hint = hint or "(pass errors='skip' to count and skip malformed rows)"
    t = read_table(path, HISTORY, errors=errors, hint=hint)
    ids = t["page_id"]
    _, first, inv = np.unique(ids, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")  # pages in order of first appearance
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    page = rank[inv.reshape(-1)]
    n = order.size
    counts = np.bincount(page, minlength=n)
    by_page = np.argsort(page, kind="stable")  # rows grouped by page, time order kept
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    first_rows = first[order]
    _check_narrowing(t, "interval", dtype)
    return Histories(ids[first_rows], t["importance"][first_rows],
                     np.asarray(t["interval"], dtype)[by_page], np.asarray(t["changed"], bool)[by_page], offsets,
                     np.zeros(n, bool), np.full(n, np.nan), t.path, t.report)


def _check_narrowing(t, column: str, dtype: type) -> None:
    """:class:`~jaxcrawl.io.TableError` naming the file, the line and ``column`` when a value
    (read in float64) is outside ``dtype``'s normal range: cast, it would become inf or 0 and
    the page's observations would be lost to a non-finite likelihood.  Suggests float64."""
    dt = np.dtype(dtype)
    v = np.asarray(t[column])
    bad = outside_normal_range(v, dt)
    if bad is None or not bad.any():
        return
    info = np.finfo(dt)
    i = int(np.argmax(bad))
    becomes = "0" if abs(v[i]) < info.tiny else "inf"
    raise TableError(t.path, int(t.line[i]),
                     f"{column} {float(v[i])!r} is outside {dt.name}'s normal range [{float(info.tiny):.3g}, "
                     f"{float(info.max):.3g}] (it would become {becomes}; {int(bad.sum())} such "
                     f"value{'s' if bad.sum() > 1 else ''} in all); estimate in "
                     f"float64 (--x64, or dtype=np.float64) or choose another time unit", column=column,
                     reason=f"{column} outside {dt.name}")


def _from_dataset(ds: CrawlDataset, source: str) -> Histories:
    """The :class:`Histories` view of a loaded NeurIPS-19 data set."""
    mask = np.asarray(ds.mask, bool)  # left-aligned: row-major order keeps each page's time order
    offsets = np.concatenate([[0], np.cumsum(mask.sum(axis=1))]).astype(np.int64)
    return Histories(ds.url_id, ds.importance, np.asarray(ds.intervals)[mask], np.asarray(ds.changed, bool)[mask],
                     offsets, ds.complete, ds.complete_change_rate, source, ds.report)


def read_histories(path: str | os.PathLike[str], *, errors: str = "raise",
                   dtype: type = np.float64, max_observations: int | None = None,
                   hint: str = "", quiet: bool = True) -> Histories:
    """Crawl histories from a NeurIPS-19 data set directory (:func:`load_crawl_dataset`)
    or a history table ``page_id,interval,changed[,importance]`` (CSV, Parquet or JSON
    Lines, by name; module docstring), by what ``path`` is.

    Pages are in order of first appearance; each page's observations keep their order.
    The observations are kept flat (:class:`Histories`): memory is proportional to the
    rows, not to pages times the longest history.

    Args:
      path: the table or the data set directory.
      errors: ``"raise"``: a malformed row raises :class:`~jaxcrawl.io.TableError`
        ``path:line: message``; ``"skip"``: malformed rows are counted by reason in
        ``report`` and left out.
      dtype: float dtype of the intervals.
      max_observations: (data sets only) keep each page's most recent observations.
      hint: appended to the error of a malformed table row (default: how to skip them).
      quiet: no progress bar while a data set loads.
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise ValueError(f"{path}: no such file or directory")
    if os.path.isdir(path):
        ds = load_crawl_dataset(path, errors=errors, max_observations=max_observations, dtype=dtype,
                                quiet=quiet)
        return _from_dataset(ds, path)
    if max_observations is not None:
        raise ValueError("max_observations applies to data set directories only")
    return _read_history_table(path, errors=errors, dtype=dtype, hint=hint)


def write_estimates(path: str | os.PathLike[str], page_id: ArrayLike,
                    importance: ArrayLike, change_rate: ArrayLike, half_width: ArrayLike,
                    num_observations: ArrayLike, complete: ArrayLike, clipped: ArrayLike | None = None) -> None:
    """Write ``page_id,importance,change_rate,half_width,num_observations,complete[,clipped]``
    atomically (unknown importance or half-width: an empty CSV field; ``null`` in Parquet
    and JSON Lines, chosen by ``path``'s name).  ``clipped``: per page ``"low"`` or
    ``"high"`` where the estimate is the clip range's bound rather than a root, else ``""``."""
    names = ["page_id", "importance", "change_rate", "half_width", "num_observations", "complete"]
    flags = [] if clipped is None else [np.asarray(clipped, object).astype(str)]
    if flags:
        names.append("clipped")
    if file_format(path)[0] != "csv":
        import pyarrow as pa  # imported on first use: `import jaxcrawl` stays fast

        imp, half = np.asarray(importance, np.float64), np.asarray(half_width, np.float64)
        cols = [page_id, pa.array(imp, mask=~np.isfinite(imp)), np.asarray(change_rate, np.float64),
                pa.array(half, mask=~np.isfinite(half)), np.asarray(num_observations, np.int64),
                np.asarray(complete, bool).astype(np.int8)] + [pa.array(f.tolist(), pa.string()) for f in flags]
        write_table(path, dict(zip(names, cols)))
        return
    write_csv(path, names,
              [np.asarray(page_id), np.asarray(importance, np.float64), np.asarray(change_rate, np.float64),
               np.asarray(half_width, np.float64), np.asarray(num_observations, np.int64),
               np.asarray(complete, bool).astype(np.int8)] + flags,
              [None, finite_or_blank, ".10g", finite_or_blank, None, None] + [None] * len(flags))
