"""Each process's own rows of a page table (``.npy`` directory, Parquet or CSV), read without
reading the rest."""
from __future__ import annotations

import os
import tempfile
from typing import NamedTuple

import jax
import numpy as np
import pyarrow.parquet as pq

from .._src.partition import file_fingerprint, row_range
from ._problems import PageTable, read_problem
from ._schema import TableError


class LocalRows(NamedTuple):
    """This process's rows of a page table.

    Attributes:
      page_id: ``(k,)`` page ids (row numbers for ``.npy`` tables without ids).
      importance, change_rate: ``(k,)`` float64.
      complete: ``(k,)`` bool.
      start: global index of the first row (``None`` for CSV, known after a count exchange).
      fingerprint: a cheap fingerprint of the whole table (same on every process).
    """

    page_id: np.ndarray
    importance: np.ndarray
    change_rate: np.ndarray
    complete: np.ndarray
    start: int | None
    fingerprint: str


def _csv_rows(path: str, process_id: int, num_processes: int) -> LocalRows:
    """Rows of a ``page_id,importance,change_rate[,complete]`` CSV whose lines start in this
    process's byte range (every line belongs to exactly one process)."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        header = f.readline()
        body = len(header)
        lo = body + (size - body) * process_id // num_processes
        hi = body + (size - body) * (process_id + 1) // num_processes

        def line_start(b):  # first line starting at or after byte b
            if b <= body:
                return body
            f.seek(b - 1)
            f.readline()  # finishes the line holding byte b-1 (ends at or after b)
            return f.tell()

        s, e = line_start(lo), line_start(hi)
        f.seek(s)
        data = f.read(max(e - s, 0))
    # parse with the project's validating CSV reader (file:line errors) on a temporary file
    with tempfile.TemporaryDirectory() as d:
        part = os.path.join(d, os.path.basename(path))
        with open(part, "wb") as g:
            g.write(header + data)
        if data.strip():
            try:
                t = read_problem(part)
            except TableError as err:  # name the real file and line (count the lines before this part)
                before = 0
                with open(path, "rb") as f:
                    while f.tell() < s:
                        before += f.read(min(1 << 20, s - f.tell())).count(b"\n")
                raise TableError(path, None if err.line is None else err.line + before - 1, err.message,
                                 column=err.column, reason=err.reason, hint=err.hint) from None
            out = (t.page_id, t.importance, t.change_rate, t.complete)
        else:
            out = (np.zeros(0, object), np.zeros(0), np.zeros(0), np.zeros(0, bool))
    return LocalRows(*out, start=None, fingerprint=file_fingerprint(path))


def read_local_rows(path: str, process_id: int | None = None, num_processes: int | None = None) -> LocalRows:
    """Read only this process's rows of a page table.

    * a directory of ``importance.npy``, ``change_rate.npy``, ``complete.npy``
      (:class:`~jaxcrawl.io.PageTable`): memory-mapped, rows :func:`jaxcrawl.parallel.row_range`;
    * ``.parquet``: columns ``importance, change_rate[, complete][, page_id]``, the row
      groups whose first row falls in :func:`jaxcrawl.parallel.row_range` (whole row groups per process);
    * ``.csv``: ``page_id,importance,change_rate[,complete]``, the lines starting in this
      process's share of the file's bytes (aligned to line starts).
    """
    num_processes = jax.process_count() if num_processes is None else num_processes
    process_id = jax.process_index() if process_id is None else process_id
    if os.path.isdir(path):
        t = PageTable(path)
        s, e = row_range(t.num_pages, num_processes, process_id)
        return LocalRows(np.arange(s, e), np.asarray(t.importance[s:e], np.float64),
                         np.asarray(t.change_rate[s:e], np.float64), np.asarray(t.complete[s:e]).astype(bool),
                         s, file_fingerprint(path))
    if path.endswith(".parquet"):
        f = pq.ParquetFile(path)
        sizes = [f.metadata.row_group(g).num_rows for g in range(f.num_row_groups)]
        starts = np.concatenate([[0], np.cumsum(sizes)])[:-1].astype(int)
        s, e = row_range(int(sum(sizes)), num_processes, process_id)
        groups = [g for g in range(len(sizes)) if s <= starts[g] < e]
        names = set(f.schema_arrow.names)
        for need in ("importance", "change_rate"):
            if need not in names:
                raise ValueError(f"{path}: missing column {need!r} (a page table needs importance, change_rate)")
        cols = [c for c in ("page_id", "importance", "change_rate", "complete") if c in names]
        tab = f.read_row_groups(groups, columns=cols) if groups else None
        first = int(starts[groups[0]]) if groups else 0
        k = 0 if tab is None else tab.num_rows

        def col(name, default):
            if tab is None or name not in names:
                return default
            return tab.column(name).to_numpy(zero_copy_only=False)

        imp = np.asarray(col("importance", np.zeros(0)), np.float64)
        lam = np.asarray(col("change_rate", np.zeros(0)), np.float64)
        for name, a in (("importance", imp), ("change_rate", lam)):
            if not np.all(np.isfinite(a) & (a > 0)):
                i = int(np.flatnonzero(~(np.isfinite(a) & (a > 0)))[0])
                raise ValueError(f"{path}: row {first + i}: {name} must be finite and > 0; got {a[i]!r}")
        return LocalRows(col("page_id", np.arange(first, first + k)), imp, lam,
                         np.asarray(col("complete", np.zeros(k, bool)), bool), first, file_fingerprint(path))
    if path.endswith(".csv"):
        return _csv_rows(path, process_id, num_processes)
    raise ValueError(f"{path}: a page table is a .npy directory, a .parquet or a .csv file")
