"""Page tables: the pages of a crawl problem in a file, and the ``.npy`` directory that
streamed solves read chunk by chunk."""
from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np
from jax.typing import ArrayLike

from .._src.fileio import write_file
from ._formats import write_table
from ._schema import Column, PathLike, Schema, TableError
from ._tables import read_table

#: Page table: ``page_id,importance,change_rate[,complete][,min_interval][,max_interval]``,
#: one distinct page a row.  The intervals are revisit bounds in the time unit of the
#: rates: crawl at most once per ``min_interval`` (0: no bound) and at least once per
#: ``max_interval`` (``inf``: no bound).
PAGE_TABLE = Schema(
    "page table",
    (Column("page_id"),
     Column("importance", "number", minimum=0.0, exclusive_minimum=True),
     Column("change_rate", "number", minimum=0.0, exclusive_minimum=True),
     Column("complete", "boolean", required=False, default=False),
     Column("min_interval", "number", minimum=0.0, required=False, default=0.0),
     Column("max_interval", "number", minimum=0.0, exclusive_minimum=True, finite=False,
            required=False, default=np.inf)),
    key="page_id", rows="pages",
)

_NPY = ("importance", "change_rate", "complete")


class PageTable:
    """The pages of a crawl problem as read from a file: ids, importance, change rates,
    complete-observation flags and revisit bounds.

    ``PageTable(directory)`` opens the ``.npy`` table of :func:`write_page_table`
    (``importance.npy``, ``change_rate.npy``, ``complete.npy``) as memory maps, so a table
    larger than memory is read chunk by chunk; :func:`read_problem` reads a table file
    (or such a directory); :meth:`from_arrays` wraps arrays in memory.

    Attributes:
      page_id: ``(n,)`` page ids (int64 when every id is a decimal integer, else strings;
        row numbers for a ``.npy`` directory).
      importance, change_rate: ``(n,)`` arrays (memory maps for a directory).
      complete: ``(n,)`` bool (``bool``-valued memory map for a directory).
      min_interval, max_interval: ``(n,)`` revisit bounds, or None when the file has no
        such column (no bound); :meth:`rate_bounds` turns them into rate bounds.
      num_pages: the number of pages n.
      directory: the ``.npy`` directory, or None for a table in memory.
    """

    def __init__(self, directory: PathLike):
        directory = os.fspath(directory)
        arrays = {}
        for name in _NPY:
            path = os.path.join(directory, name + ".npy")
            if not os.path.exists(path):
                raise ValueError(f"{directory}: missing {name}.npy (a page table needs {', '.join(_NPY)})")
            try:
                arrays[name] = np.load(path, mmap_mode="r")
            except (ValueError, OSError, EOFError) as err:  # truncated or not a .npy file: named
                raise ValueError(f"{path}: not a readable .npy array ({err})") from None
        n = arrays["importance"].shape
        for name, a in arrays.items():
            if a.ndim != 1 or a.shape != n:
                raise ValueError(f"{directory}: {name}.npy has shape {a.shape}; every array must be 1-D "
                                 f"of length {n[0] if n else '?'}")
        self._set(None, arrays["importance"], arrays["change_rate"], arrays["complete"], None, None, directory)

    def _set(self, page_id, importance, change_rate, complete, min_interval, max_interval, directory):
        self._page_id = page_id
        self.importance, self.change_rate, self.complete = importance, change_rate, complete
        self.min_interval, self.max_interval = min_interval, max_interval
        self.directory = directory
        self.num_pages = int(importance.shape[0])

    @classmethod
    def from_arrays(cls, page_id: ArrayLike, importance: ArrayLike, change_rate: ArrayLike,
                    complete: ArrayLike | None = None, min_interval: ArrayLike | None = None,
                    max_interval: ArrayLike | None = None) -> PageTable:
        """A table in memory of the given ``(n,)`` arrays (``complete`` default all False)."""
        table = cls.__new__(cls)
        imp = np.asarray(importance)
        comp = np.zeros(imp.shape, bool) if complete is None else np.asarray(complete, bool)
        table._set(np.asarray(page_id), imp, np.asarray(change_rate), comp,
                   None if min_interval is None else np.asarray(min_interval),
                   None if max_interval is None else np.asarray(max_interval), None)
        return table

    @property
    def page_id(self) -> np.ndarray:
        """``(n,)`` page ids (row numbers for a ``.npy`` directory)."""
        return np.arange(self.num_pages) if self._page_id is None else self._page_id

    def __len__(self) -> int:
        return self.num_pages

    def __repr__(self) -> str:
        where = f"directory={self.directory!r}" if self.directory is not None else "in memory"
        return f"PageTable({self.num_pages} pages, {where})"

    def chunks(self, chunk_size: int) -> Iterator[tuple[int, np.ndarray, np.ndarray, np.ndarray]]:
        """Yield ``(start, importance, change_rate, complete)`` blocks of at most ``chunk_size`` pages."""
        for start in range(0, self.num_pages, chunk_size):
            stop = min(start + chunk_size, self.num_pages)
            yield (start, np.asarray(self.importance[start:stop]), np.asarray(self.change_rate[start:stop]),
                   np.asarray(self.complete[start:stop]).astype(bool))

    def check_rows(self, start: int = 0, stop: int | None = None) -> None:
        """Check rows ``start:stop`` (default all; a chunk at a time) by :data:`PAGE_TABLE`'s
        rules, and that the table has a page: :class:`~jaxcrawl.io.TableError` naming the
        table and the row (what :func:`read_problem` checks in a file)."""
        where = self.directory or "page table"
        if self.num_pages < 1:
            raise TableError(where, None, "no pages in the table (every array has length 0)")
        sl = slice(start, self.num_pages if stop is None else stop)
        PAGE_TABLE.check_arrays(where, {"importance": self.importance[sl], "change_rate": self.change_rate[sl],
                                        "complete": self.complete[sl]}, first_row=start + 1)

    def rate_bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """``(min_rate, max_rate) = (1/max_interval, 1/min_interval)`` per page."""
        n = self.num_pages
        lo_i = np.zeros(n) if self.min_interval is None else np.asarray(self.min_interval, np.float64)
        hi_i = np.full(n, np.inf) if self.max_interval is None else np.asarray(self.max_interval, np.float64)
        with np.errstate(divide="ignore"):
            return 1.0 / hi_i, 1.0 / lo_i


def read_problem(path: PathLike, *, errors: str = "raise") -> PageTable:
    """Read a page table: a file (CSV, Parquet or JSON Lines, by name; :func:`read_table`)
    or the ``.npy`` directory of :func:`write_page_table` (memory-mapped).

    Columns ``page_id,importance,change_rate[,complete][,min_interval][,max_interval]``:
    ``importance`` and ``change_rate`` finite and > 0; ``complete`` (default 0) a boolean
    (1/0/true/false/yes/no); ``min_interval`` >= 0 (default 0) and ``max_interval`` > 0
    or ``inf`` (default ``inf``) the revisit bounds, in the rates' time unit; page ids
    distinct (int64 when all are decimal integers, else strings).  An empty cell of an
    optional column (blank in CSV, null in JSON Lines or Parquet) is its default, so a
    spreadsheet's export with blank bounds reads as unbounded pages.  A malformed row raises
    :class:`TableError` (a ``ValueError``) ``path:line: message`` naming the column and the
    rule (``errors="skip"`` counts and drops it).

    Returns:
      :class:`PageTable` (float64 arrays, bool ``complete``).
    """
    if os.path.isdir(path):
        return PageTable(path)
    t = read_table(path, PAGE_TABLE, errors=errors, id_columns=("page_id",))
    return PageTable.from_arrays(t["page_id"], t["importance"], t["change_rate"], t["complete"],
                                 t["min_interval"] if "min_interval" in t.present else None,
                                 t["max_interval"] if "max_interval" in t.present else None)


def write_problem(path: PathLike, page_id: ArrayLike, importance: ArrayLike,
                  change_rate: ArrayLike, complete: ArrayLike | None = None, *,
                  min_interval: ArrayLike | None = None, max_interval: ArrayLike | None = None) -> None:
    """Write a page table atomically in the format of ``path``'s name (what
    :func:`read_problem` and ``jaxcrawl solve --input`` read)."""
    imp = np.asarray(importance, np.float64)
    comp = np.zeros(imp.shape, bool) if complete is None else np.asarray(complete, bool)
    cols = {"page_id": page_id, "importance": imp, "change_rate": np.asarray(change_rate, np.float64),
            "complete": comp.astype(np.int8)}
    if min_interval is not None:
        cols["min_interval"] = np.broadcast_to(np.asarray(min_interval, np.float64), imp.shape)
    if max_interval is not None:
        cols["max_interval"] = np.broadcast_to(np.asarray(max_interval, np.float64), imp.shape)
    write_table(path, cols)


def write_page_table(directory: PathLike, importance: ArrayLike, change_rate: ArrayLike,
                     complete: ArrayLike | None = None) -> PageTable:
    """Write the ``.npy`` page table of a streamed solve (validated like
    :class:`~jaxcrawl.CrawlProblem`) and open it.

    Each array is written atomically (a failed write leaves the previous file); the
    directory is created when missing.
    """
    directory = os.fspath(directory)
    importance = np.asarray(importance)
    change_rate = np.asarray(change_rate)
    complete = np.zeros(importance.shape, bool) if complete is None else np.asarray(complete, bool)
    for name, a in (("importance", importance), ("change_rate", change_rate)):
        if a.ndim != 1:
            raise ValueError(f"{name} must be 1-D; got shape {a.shape}")
        if not np.all(np.isfinite(a)) or np.any(a <= 0):
            raise ValueError(f"{name} must be finite and > 0 for every page")
    if not importance.shape == change_rate.shape == complete.shape:
        raise ValueError("importance, change_rate and complete must have the same shape")
    os.makedirs(directory, exist_ok=True)
    for name, a in (("importance", importance), ("change_rate", change_rate), ("complete", complete)):
        write_file(os.path.join(directory, name + ".npy"), lambda fh, a=a: np.save(fh, a), binary=True)
    return PageTable(directory)
