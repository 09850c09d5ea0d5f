"""Each process's own rows of a page table (``.npy`` directory, Parquet or CSV), read without
reading the rest, and checked by the page table's rules."""
from __future__ import annotations

import os
import tempfile
from typing import NamedTuple

import jax
import numpy as np
import pyarrow.parquet as pq

from .._src.partition import file_fingerprint, row_range
from ._formats import column_values, file_format, raw_cell
from ._problems import PAGE_TABLE, PageTable, read_problem
from ._schema import RowError, TableError


class LocalRows(NamedTuple):
    """This process's rows of a page table, validated by the page table's rules
    (:func:`jaxcrawl.io.read_problem`'s, :class:`~jaxcrawl.io.Schema.check_arrays`).

    Attributes:
      page_id: ``(k,)`` page ids (row numbers for ``.npy`` tables without ids).
      importance, change_rate: ``(k,)`` float64.
      complete: ``(k,)`` bool.
      start: global index of the first row (``None`` for CSV, known after a count exchange).
      fingerprint: a cheap fingerprint of the whole table (same on every process).
      min_interval, max_interval: ``(k,)`` revisit bounds (float64), or None when the
        table has no such column.
    """

    page_id: np.ndarray
    importance: np.ndarray
    change_rate: np.ndarray
    complete: np.ndarray
    start: int | None
    fingerprint: str
    min_interval: np.ndarray | None = None
    max_interval: np.ndarray | None = None


def record_start(f, b: int, body: int) -> int:
    """The first byte at or after ``b`` that starts a CSV record of the open file ``f``
    (binary) whose records begin at byte ``body``: a line start outside quotes (RFC 4180:
    a line break inside a quoted value does not end the record; the quotes before ``b``
    are counted to know whether it is inside one)."""
    if b <= body:
        return body
    f.seek(body)
    left, quotes = b - 1 - body, 0  # the quotes before byte b - 1, where the scan starts
    while left > 0:
        block = f.read(min(1 << 24, left))
        if not block:
            return f.tell()
        quotes += block.count(b'"')
        left -= len(block)
    inside = quotes % 2 == 1
    f.seek(b - 1)
    pos = b - 1
    while True:
        block = f.read(1 << 20)
        if not block:
            return pos
        i = 0
        while True:
            q, nl = block.find(b'"', i), block.find(b"\n", i)
            if nl < 0 and q < 0:
                break
            if q >= 0 and (nl < 0 or q < nl):
                inside = not inside
                i = q + 1
                continue
            if not inside and pos + nl + 1 >= b:
                return pos + nl + 1
            i = nl + 1
        pos += len(block)


def _csv_rows(path: str, process_id: int, num_processes: int) -> LocalRows:
    """Rows of a ``page_id,importance,change_rate[,complete][,min_interval][,max_interval]``
    CSV whose records start in this process's byte range (every record, also one with a
    quoted line break, belongs to exactly one process)."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        header = f.readline()
        body = len(header)
        lo = body + (size - body) * process_id // num_processes
        hi = body + (size - body) * (process_id + 1) // num_processes
        s, e = record_start(f, lo, body), record_start(f, hi, body)
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
            bounds = (t.min_interval, t.max_interval)
        else:
            out = (np.zeros(0, object), np.zeros(0), np.zeros(0), np.zeros(0, bool))
            bounds = (None, None)
    return LocalRows(*out, start=None, fingerprint=file_fingerprint(path), min_interval=bounds[0],
                     max_interval=bounds[1])


def _parquet_rows(path: str, process_id: int, num_processes: int) -> LocalRows:
    """The row groups whose first row falls in this process's :func:`row_range`, validated
    column-wise by the page table's rules (the columnar reader's)."""
    try:
        f = pq.ParquetFile(path)
    except (OSError, ValueError) as err:
        raise TableError(path, None, f"not a readable Parquet file ({err})") from None
    sizes = [f.metadata.row_group(g).num_rows for g in range(f.num_row_groups)]
    starts = np.concatenate([[0], np.cumsum(sizes)])[:-1].astype(int)
    s, e = row_range(int(sum(sizes)), num_processes, process_id)
    groups = [g for g in range(len(sizes)) if s <= starts[g] < e]
    names = f.schema_arrow.names
    try:  # the page table's header; without page_id the ids are the row numbers
        header = PAGE_TABLE.match_header(names if "page_id" in (n.lower() for n in names) else names + ["page_id"])
    except ValueError as err:
        raise TableError(path, None, f"columns must be {PAGE_TABLE.header_text!r} ({err}), "
                         f"got {','.join(names)!r}") from None
    tab = f.read_row_groups(groups) if groups else f.schema_arrow.empty_table()
    first = int(starts[groups[0]]) if groups else 0
    k = tab.num_rows
    cols: dict[str, np.ndarray] = {}
    for name, c in zip(names, header):
        got = column_values(c, tab[name], c.name == "page_id")
        if got is None:
            vals, bad = c.parse_many([raw_cell(tab[name], i) for i in range(k)])
        else:
            vals, bad = got
        if tab[name].null_count and not c.required:
            null = np.asarray(tab[name].is_null().to_numpy(zero_copy_only=False), bool)
            vals = np.where(null, c.default, vals)
            bad = bad & ~null
        if np.any(bad):
            i = int(np.flatnonzero(bad)[0])
            try:
                c.parse(raw_cell(tab[name], i))
            except RowError as err:
                raise TableError(path, first + i + 1, err.message, column=c.name, reason=err.reason,
                                 unit="row") from None
            raise TableError(path, first + i + 1, f"{c.name} must be {c.rule}", column=c.name, unit="row")
        cols[c.name] = vals
    page_id = cols.get("page_id", np.arange(first, first + k))
    return LocalRows(page_id, np.asarray(cols["importance"], np.float64), np.asarray(cols["change_rate"], np.float64),
                     np.asarray(cols.get("complete", np.zeros(k, bool)), bool), first, file_fingerprint(path),
                     cols.get("min_interval"), cols.get("max_interval"))


def read_local_rows(path: str, process_id: int | None = None, num_processes: int | None = None) -> LocalRows:
    """Read only this process's rows of a page table, checked by the page table's rules.

    * a directory of ``importance.npy``, ``change_rate.npy``, ``complete.npy``
      (:class:`~jaxcrawl.io.PageTable`): memory-mapped, rows :func:`jaxcrawl.parallel.row_range`;
    * ``.parquet``: columns ``importance, change_rate[, complete][, page_id][, min_interval]
      [, max_interval]``, the row groups whose first row falls in
      :func:`jaxcrawl.parallel.row_range` (whole row groups per process);
    * ``.csv``: ``page_id,importance,change_rate[,complete][,min_interval][,max_interval]``,
      the records starting in this process's share of the file's bytes (aligned to record
      starts).

    A value that breaks a rule is a :class:`TableError` naming the file and the row; page
    ids are checked distinct across processes by :class:`jaxcrawl.parallel.ProcessRows`.
    """
    num_processes = jax.process_count() if num_processes is None else num_processes
    process_id = jax.process_index() if process_id is None else process_id
    path = os.fspath(path)
    if os.path.isdir(path):
        t = PageTable(path)
        s, e = row_range(t.num_pages, num_processes, process_id)
        t.check_rows(s, e)
        imp, lam, comp = t.importance[s:e], t.change_rate[s:e], t.complete[s:e]
        return LocalRows(np.arange(s, e), np.asarray(imp, np.float64), np.asarray(lam, np.float64),
                         np.asarray(comp).astype(bool), s, file_fingerprint(path))
    if not os.path.exists(path):
        raise TableError(path, None, "no such file")
    fmt, gz = file_format(path)
    if fmt == "parquet":
        return _parquet_rows(path, process_id, num_processes)
    if fmt == "csv" and not gz:
        return _csv_rows(path, process_id, num_processes)
    raise ValueError(f"{path}: a page table read by several processes is a .npy directory, a .parquet or a "
                     ".csv file")
