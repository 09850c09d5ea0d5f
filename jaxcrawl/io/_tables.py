"""The one table reader and the CSV writer.

:func:`read_table` reads a file into a :class:`Table` against a :class:`Schema`: every
malformed row becomes a ``path:line: message`` error naming the column and the rule
(:class:`TableError`), or, with ``errors="skip"``, is counted by reason in the table's
:class:`FileReport` -- never dropped silently.  The reader takes rows from a *source*
chosen by the file's suffix: CSV (the default) and JSON Lines are built in, columnar reading
goes through pyarrow first (:mod:`._formats`), and another format is added with
:func:`register_format`.  :func:`write_csv` writes atomically, ``chunk`` rows at a time.
"""
from __future__ import annotations

import csv
import io
import json
import math
import os
from collections.abc import Callable, Iterator, Sequence
from typing import IO, Any

import numpy as np
from jax.typing import ArrayLike

from .._src.fileio import same_file, write_file
from ._formats import (
    RepeatedKeyError,
    file_format,
    ids_to_numpy,
    open_text,
    read_arrow,
    repeated_key_error,
    unique_keys,
)
from ._schema import (
    Batch,
    PathLike,
    RowError,
    RowLog,
    Schema,
    Source,
    Table,
    TableError,
    check_groups,
)

Opener = Callable[[str, bool], Source]
_FORMATS: dict[str, Opener] = {}


def register_format(suffixes: str | Sequence[str], opener: Opener) -> None:
    """Read files ending in ``suffixes`` (e.g. ``".parquet"``) with ``opener``.

    ``opener(path, comments) -> Source`` opens the file and returns its header and a
    ``batches(size)`` generator of :class:`Batch` es (``comments``: whether ``#`` lines are
    comments, for text formats).  Validation, errors and reports stay :func:`read_table`'s.
    """
    for s in [suffixes] if isinstance(suffixes, str) else suffixes:
        _FORMATS[s.lower()] = opener


def format_for(path: PathLike) -> Opener:
    """The opener of ``path``'s format (by suffix; CSV when none is registered)."""
    name = os.fspath(path).lower()
    for suffix in sorted(_FORMATS, key=len, reverse=True):
        if name.endswith(suffix):
            return _FORMATS[suffix]
    return _open_csv


def _open_csv(path: str, comments: bool) -> Source:
    """CSV (RFC 4180 quoting, UTF-8 with or without BOM): the first line that is not blank
    (or a ``#`` comment, when comments are on) is the header."""
    fh = open_text(path)

    def text_lines() -> Iterator[str]:
        for lineno, raw in enumerate(fh, start=1):  # decoded line by line: errors name the line
            try:
                yield raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError as err:
                raise TableError(path, lineno, f"not valid UTF-8 text ({err.reason})") from None

    reader = csv.reader(text_lines())
    src = Source(path, None, 0, lambda size: iter(()), close=fh.close)

    def rows() -> Iterator[tuple[int, list[str]]]:
        while True:
            try:
                row = next(reader)
            except StopIteration:
                return
            except csv.Error as err:
                raise TableError(path, reader.line_num, f"not valid CSV ({err})") from None
            line = reader.line_num
            if not row or (len(row) == 1 and not row[0].strip()):
                src.blank_lines += 1
                continue
            if comments and src.header is None and row[0].lstrip().startswith("#"):  # before the header only
                src.comments.append((line, ",".join(row).strip()[1:].strip()))
                continue
            yield line, row

    it = rows()
    try:
        src.header_line, src.header = next(it)
    except StopIteration:
        pass
    except BaseException:
        fh.close()
        raise

    def batches(size: int) -> Iterator[Batch]:
        ncols = len(src.header or ())
        while True:
            lines: list[int] = []
            cols: list[list[str]] = [[] for _ in range(ncols)]
            bad: list[tuple[int, RowError]] = []
            for line, row in it:
                if len(row) != ncols:
                    bad.append((line, RowError("wrong number of fields",
                                               f"expected {ncols} fields, got {len(row)}")))
                    continue
                lines.append(line)
                for j in range(ncols):
                    cols[j].append(row[j])
                if len(lines) >= size:
                    break
            if not lines and not bad:
                return
            yield Batch(np.asarray(lines, np.int64), cols, bad)

    src.batches = batches
    return src


register_format(".csv", _open_csv)


def _open_jsonl(path: str, comments: bool) -> Source:
    """JSON Lines, line by line (the exact reader behind :mod:`jaxcrawl.io.formats`): one
    JSON object a line; the keys of the first object are the header; blank lines are
    ignored (counted)."""
    fh = open_text(path)
    src = Source(path, None, 0, lambda size: iter(()), close=fh.close)

    def records() -> Iterator[tuple[int, Any]]:
        for lineno, raw in enumerate(fh, start=1):
            try:
                text = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError as err:
                raise TableError(path, lineno, f"not valid UTF-8 text ({err.reason})") from None
            if not text.strip():
                src.blank_lines += 1
                continue
            try:
                obj = json.loads(text, object_pairs_hook=unique_keys)
            except RepeatedKeyError as err:  # one duplicate-key rule for every format
                yield lineno, repeated_key_error(err.key)
                continue
            except ValueError as err:
                yield lineno, RowError("not JSON", f"not a JSON object ({err.msg})")
                continue
            if not isinstance(obj, dict):
                yield lineno, RowError("not JSON", f"not a JSON object: {text.strip()[:60]!r}")
                continue
            yield lineno, obj

    it = records()
    pending: list[tuple[int, Any]] = []
    try:
        for lineno, obj in it:
            pending.append((lineno, obj))
            if isinstance(obj, dict):
                src.header, src.header_line = list(obj), lineno
                break
    except BaseException:
        fh.close()
        raise

    def batches(size: int) -> Iterator[Batch]:
        keys = src.header or []
        stream = _chain(pending, it)
        while True:
            lines: list[int] = []
            cols: list[list[Any]] = [[] for _ in keys]
            bad: list[tuple[int, RowError]] = []
            for line, obj in stream:
                if isinstance(obj, RowError):
                    bad.append((line, obj))
                    continue
                if set(obj) != set(keys):
                    missing = [k for k in keys if k not in obj]
                    extra = [k for k in obj if k not in keys]
                    bad.append((line, RowError("wrong fields", (
                        f"missing field {missing[0]!r}" if missing else f"unexpected field {extra[0]!r}")
                        + f" (every line must have the fields {','.join(keys)})")))
                    continue
                lines.append(line)
                for j, k in enumerate(keys):
                    v = obj[k]
                    cols[j].append(v)
                if len(lines) >= size:
                    break
            if not lines and not bad:
                return
            yield Batch(np.asarray(lines, np.int64), cols, bad)

    src.batches = batches
    return src


def _chain(first, rest):
    yield from first
    yield from rest


register_format((".jsonl", ".ndjson", ".jsonl.gz", ".ndjson.gz"), _open_jsonl)


def read_table(path: PathLike, schema: Schema, *, errors: str = "raise", hint: str = "",
               batch_size: int = 1 << 16, id_columns: tuple[str, ...] = ()) -> Table:
    """Read and validate the table at ``path`` against ``schema``.

    The header names the columns (any order, case-insensitive, aliases accepted; unknown
    or repeated columns and missing required ones are an error at the header's line).
    Every row is checked: the number of fields, each value against its column's rule,
    the key's distinctness and the columns that must be constant within a group.  Blank
    lines are ignored (counted).  An empty cell of an optional column (a CSV cell with
    nothing but spaces, a JSON or Parquet null) is that column's default.

    Args:
      path: the file; its format is chosen by suffix (:func:`format_for`; CSV by default).
      schema: the :class:`Schema`.
      errors: ``"raise"`` (default): the first malformed row raises :class:`TableError`
        (``path:line: message``).  ``"skip"``: malformed rows are counted by reason in
        ``table.report`` (with up to 10 examples) and left out.
      hint: text appended to the error raised for a malformed row.
      batch_size: rows validated at once (line-by-line reader).
      id_columns: text columns returned as int64 when every value is a canonical
        decimal integer (:func:`jaxcrawl.io.formats.ids_to_numpy`), e.g. page ids.

    CSV, JSON Lines (``.jsonl``) and Parquet (``.parquet``), gzipped text (``.gz``), are
    read column-wise through pyarrow (:func:`jaxcrawl.io.formats.read_arrow`); a text file
    whose line numbers pyarrow cannot give (blank lines, line breaks in values,
    unconvertible cells) is read line by line instead, with the same result and messages.
    Parquet errors name the row (``path: row N: message``, rows from 1).

    Returns:
      :class:`Table`.

    Raises:
      TableError: (a ``ValueError``) a missing or empty file, a bad header, too few rows,
        or (``errors="raise"``) a malformed row.
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise TableError(path, None, "no such file")
    if os.path.isdir(path):
        raise TableError(path, None, f"is a directory (expected a {schema.name} file)")
    opener = format_for(path)
    if opener in (_open_csv, _open_jsonl) or file_format(path)[0] == "parquet":
        log = RowLog(path, errors, hint, unit="row" if file_format(path)[0] == "parquet" else "line")
        got = read_arrow(path, schema, log, id_columns=id_columns)
        if got is not None:
            cols, lines, present = got
            return _finish(path, schema, cols, lines, present, (), log)
    log = RowLog(path, errors, hint)
    src = opener(path, schema.comments)
    try:
        if src.header is None:
            raise TableError(path, None, f"empty file (expected a header {schema.header_text})")
        log.header = 0 if opener is _open_jsonl else 1
        try:
            header_cols = schema.match_header(src.header)
        except ValueError as err:
            raise TableError(path, src.header_line,
                             f"header must be {schema.header_text!r} ({err}), "
                             f"got {','.join(map(str, src.header))!r}") from None
        parts: dict[str, list[np.ndarray]] = {c.name: [] for c in header_cols if c is not None}
        blank_is_null = opener is _open_csv
        line_parts: list[np.ndarray] = []
        firsts: dict[str, dict] = {}
        for batch in src.batches(batch_size):
            bad_rows: list[tuple[int, RowError]] = list(batch.malformed)
            m = batch.lines.shape[0]
            ok = np.ones(m, bool)
            cols: dict[str, np.ndarray] = {}
            for c, raw in zip(header_cols, batch.fields):
                if any(x is None or (blank_is_null and not x.strip()) for x in raw):
                    # JSON null, or a blank CSV cell (a spreadsheet's empty cell): an optional
                    # column's default
                    raw = [(c.default if not c.required else "")
                           if x is None or (blank_is_null and not x.strip()) else x for x in raw]
                vals, bad = c.parse_many(raw)
                cols[c.name] = vals
                first_bad = bad & ok
                for i in np.flatnonzero(first_bad).tolist():
                    try:
                        c.parse(raw[i])
                    except RowError as err:
                        bad_rows.append((int(batch.lines[i]), err))
                    else:  # pragma: no cover - parse and parse_many always agree
                        raise AssertionError(f"{c.name}: parse accepted {raw[i]!r}")
                ok &= ~bad
            check_groups(schema, cols, batch.lines, ok, firsts, bad_rows)
            for line, err in sorted(bad_rows, key=lambda e: e[0]):
                log.bad(line, err)
            log.rows_read += int(ok.sum())
            line_parts.append(batch.lines[ok])
            for name, vals in cols.items():
                parts[name].append(vals[ok])
        log.blank = src.blank_lines
        comments = tuple(src.comments)
    finally:
        src.close()
    cols = {name: (np.concatenate(p) if p else np.zeros(0, schema.column(name).dtype))
            for name, p in parts.items()}
    for name in id_columns:
        if name in cols and cols[name].dtype == object:
            cols[name] = _ids_from_text(cols[name])
    lines = np.concatenate(line_parts) if line_parts else np.zeros(0, np.int64)
    return _finish(path, schema, cols, lines, tuple(parts), comments, log)


def _ids_from_text(ids: np.ndarray) -> np.ndarray:
    """Text ids as int64 when every one is a canonical decimal integer (as the columnar
    reader returns them; :func:`jaxcrawl.io.formats.ids_to_numpy`)."""
    import pyarrow as pa

    return ids_to_numpy(pa.array(ids.tolist(), pa.string())) if ids.size else ids


def _finish(path, schema, cols, lines, present, comments, log) -> Table:
    n = log.rows_read
    if n < schema.min_rows:
        where = "in the file" if log.unit == "row" else "after the header"
        raise TableError(path, None, f"no {schema.rows} {where}" if n == 0 else
                         f"{n} {schema.rows}; at least {schema.min_rows} needed")
    columns: dict[str, np.ndarray] = {}
    for c in schema.columns:
        if c.name in cols:
            columns[c.name] = cols[c.name]
        else:  # a read-only view: no memory for a column the file does not have
            columns[c.name] = np.broadcast_to(np.asarray(c.default, dtype=c.dtype), (n,))
    return Table(path, columns, lines, tuple(c.name for c in schema.columns if c.name in present),
                 tuple(comments), log.report())


# ------------------------------------------------------------------------ writing
Format = str | Callable[[Any], str] | None


def _format_column(values: Sequence[Any], spec: Format) -> list[str]:
    if spec is None:
        return [str(v) for v in values]
    if callable(spec):
        return [spec(v) for v in values]
    return [format(v, spec) for v in values]


def write_csv(path: PathLike, header: Sequence[str], columns: Sequence[ArrayLike],
              formats: Sequence[Format] | None = None, *, chunk: int = 1 << 16) -> None:
    """Write a CSV table atomically (:func:`write_file`), ``chunk`` rows at a time.

    Args:
      path: the file to write.
      header: the column names.
      columns: one ``(n,)`` array per column.
      formats: per column, a format spec for :func:`format` (``".10g"``), a callable
        ``value -> str``, or None (``str``); default all None.  Fields are quoted when
        they contain a comma, a quote or a newline.
    """
    cols = [np.asarray(c) for c in columns]
    if len(cols) != len(header):
        raise ValueError(f"{len(header)} header names but {len(cols)} columns")
    n = cols[0].shape[0] if cols else 0
    if any(c.shape != (n,) for c in cols):
        raise ValueError(f"every column must have shape ({n},); got {[c.shape for c in cols]}")
    specs = list(formats) if formats is not None else [None] * len(cols)

    def fill(fh: IO) -> None:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(header)
        for start in range(0, n, chunk):
            buf = io.StringIO()
            csv.writer(buf, lineterminator="\n").writerows(zip(*[
                _format_column(c[start:start + chunk].tolist(), s) for c, s in zip(cols, specs)]))
            fh.write(buf.getvalue())

    write_file(path, fill)


def check_output(output: PathLike | None, *inputs: PathLike | None) -> None:
    """``ValueError`` when ``output`` names the same file as one of ``inputs`` (writing it
    would destroy the input) or is a directory; None entries are ignored."""
    if output is None:
        return
    out = os.fspath(output)
    if os.path.isdir(out):
        raise ValueError(f"{out}: the output is a directory")
    for inp in inputs:
        if inp is not None and same_file(out, inp):
            raise ValueError(f"{out}: the output is the input file {os.fspath(inp)}; refusing to overwrite it "
                             "(choose another output path)")


def finite_or_blank(value: float, spec: str = ".10g") -> str:
    """``format(value, spec)``, or an empty field when ``value`` is NaN or infinite."""
    return format(value, spec) if math.isfinite(value) else ""
