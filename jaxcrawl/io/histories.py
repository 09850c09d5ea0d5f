"""Crawl histories as tables, and the change-rate estimates written from them.

A history CSV has the header ``page_id,interval,changed[,importance]`` (``url_id`` is
accepted for ``page_id``): one row per observation, in time order within each page;
``interval`` is the time since the page's previous crawl (> 0), ``changed`` whether the
page changed in it (0/1), ``importance`` an optional score that must be the same on every
row of a page.  :func:`read_history_csv` pads the observations of every page into the
``(pages, k)`` arrays the estimators take; :func:`histories_from_dataset` gives the same
view of a NeurIPS-19 data set directory (:mod:`jaxcrawl.io.neurips19`).
"""
from __future__ import annotations

import os
from typing import NamedTuple

import numpy as np
from jax.typing import ArrayLike

from .neurips19 import FILES, CrawlDataset, LoadReport, load_crawl_dataset
from .tables import Column, FileReport, Schema, finite_or_blank, read_table, write_csv

__all__ = [
    "HISTORY",
    "Histories",
    "read_history_csv",
    "histories_from_dataset",
    "read_histories",
    "input_files",
    "write_estimates_csv",
]

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
    """Every page's crawl history, padded, ready for :mod:`jaxcrawl.estimators`.

    Attributes:
      page_id: ``(n,)`` page ids (strings from a CSV, integer URL_IDs from a data set).
      importance: ``(n,)`` float64 importance, NaN where unknown.
      intervals: ``(n, k)`` intervals between crawls, padded with 0.
      changed: ``(n, k)`` bool change indicators, padded with False.
      mask: ``(n, k)`` bool, True where an observation exists (left-aligned).
      complete: ``(n,)`` bool, pages with complete change observations (data sets only).
      complete_change_rate: ``(n,)`` their given change rate, NaN elsewhere.
      source: the file or directory read.
      report: the :class:`~jaxcrawl.io.tables.FileReport` of a CSV, or the
        :class:`~jaxcrawl.io.neurips19.LoadReport` of a data set.
    """

    page_id: np.ndarray
    importance: np.ndarray
    intervals: np.ndarray
    changed: np.ndarray
    mask: np.ndarray
    complete: np.ndarray
    complete_change_rate: np.ndarray
    source: str
    report: FileReport | LoadReport


def read_history_csv(path: str | os.PathLike[str], *, errors: str = "raise",
                     dtype: type = np.float64, hint: str = "") -> Histories:
    """Read a history CSV ``page_id,interval,changed[,importance]`` (module docstring).

    Pages are in order of first appearance; each page's observations keep their order.

    Args:
      path: the CSV.
      errors: ``"raise"``: a malformed row raises
        :class:`~jaxcrawl.io.tables.TableError` ``path:line: message``; ``"skip"``:
        malformed rows are counted by reason in ``report`` and left out.
      dtype: float dtype of the padded intervals.
      hint: appended to the error of a malformed row (default: how to skip them).

    Returns:
      :class:`Histories` (``complete`` all False).
    """
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
    k = int(counts.max())
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    by_page = np.argsort(page, kind="stable")
    col = np.empty(page.size, np.int64)
    col[by_page] = np.arange(page.size) - starts[page[by_page]]
    intervals = np.zeros((n, k), dtype)
    changed = np.zeros((n, k), bool)
    mask = np.zeros((n, k), bool)
    intervals[page, col] = t["interval"]
    changed[page, col] = t["changed"]
    mask[page, col] = True
    first_rows = first[order]
    return Histories(ids[first_rows], t["importance"][first_rows], intervals, changed, mask,
                     np.zeros(n, bool), np.full(n, np.nan), t.path, t.report)


def histories_from_dataset(ds: CrawlDataset, source: str = "") -> Histories:
    """The :class:`Histories` view of a loaded NeurIPS-19 data set."""
    return Histories(ds.url_id, ds.importance, ds.intervals, ds.changed, ds.mask, ds.complete,
                     ds.complete_change_rate, source, ds.report)


def read_histories(path: str | os.PathLike[str], *, errors: str = "raise",
                   dtype: type = np.float64, max_observations: int | None = None,
                   hint: str = "", quiet: bool = True) -> Histories:
    """Histories from a NeurIPS-19 data set directory or a history CSV (by what ``path`` is).

    ``max_observations`` (data sets only) keeps each page's most recent observations.
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise ValueError(f"{path}: no such file or directory")
    if os.path.isdir(path):
        ds = load_crawl_dataset(path, errors=errors, max_observations=max_observations, dtype=dtype,
                                quiet=quiet)
        return histories_from_dataset(ds, path)
    if max_observations is not None:
        raise ValueError("max_observations applies to data set directories only")
    return read_history_csv(path, errors=errors, dtype=dtype, hint=hint)


def input_files(path: str | os.PathLike[str]) -> list[str]:
    """The files :func:`read_histories` reads for ``path`` (to keep outputs off them)."""
    path = os.fspath(path)
    if os.path.isdir(path):
        return [os.path.join(path, name) for name in FILES.values()]
    return [path]


def write_estimates_csv(path: str | os.PathLike[str], page_id: ArrayLike,
                        importance: ArrayLike, change_rate: ArrayLike, half_width: ArrayLike,
                        num_observations: ArrayLike, complete: ArrayLike) -> None:
    """Write ``page_id,importance,change_rate,half_width,num_observations,complete``
    atomically (unknown importance or half-width: an empty CSV field; ``null`` in Parquet
    and JSON Lines, chosen by ``path``'s name)."""
    from .formats import file_format, write_columns

    if file_format(path)[0] != "csv":
        imp, half = np.asarray(importance, np.float64), np.asarray(half_width, np.float64)
        import pyarrow as pa

        write_columns(path, {
            "page_id": page_id, "importance": pa.array(imp, mask=~np.isfinite(imp)),
            "change_rate": np.asarray(change_rate, np.float64),
            "half_width": pa.array(half, mask=~np.isfinite(half)),
            "num_observations": np.asarray(num_observations, np.int64),
            "complete": np.asarray(complete, bool).astype(np.int8)})
        return
    write_csv(path, ("page_id", "importance", "change_rate", "half_width", "num_observations", "complete"),
              (np.asarray(page_id), np.asarray(importance, np.float64), np.asarray(change_rate, np.float64),
               np.asarray(half_width, np.float64), np.asarray(num_observations, np.int64),
               np.asarray(complete, bool).astype(np.int8)),
              (None, finite_or_blank, ".10g", finite_or_blank, None, None))
