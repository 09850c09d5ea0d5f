"""Columnar reading and writing through pyarrow: CSV, Parquet and JSON Lines, gzip or not.

The format of a file is chosen by its name:

==========================================  ==========================================
name ends with                              format
==========================================  ==========================================
``.parquet``, ``.pq``                       Parquet (row numbers in errors: ``row N``)
``.jsonl``, ``.ndjson`` (``+ .gz``)         JSON Lines: one JSON object a line
``.csv`` or anything else (``+ .gz``)       CSV (RFC 4180 quoting, UTF-8)
==========================================  ==========================================

Reading (:func:`read_arrow`) is what :func:`jaxcrawl.io.read_table` does first:
pyarrow parses the file into columns, and every rule of the schema is checked on whole
columns at once (no Python per row).  Only rows found malformed are looked at one by one,
to build the ``path:line: message`` of the exact reader.  A blank CSV cell of an optional
column (a spreadsheet's empty cell) is a null there, hence the column's default, as a JSON
or Parquet null is.  When a text file's line numbers
cannot be known from the rows alone (blank lines, a value holding a line break, a cell
pyarrow cannot convert, a header not on the first line), :func:`read_arrow` returns None
and the line-by-line reader of :func:`jaxcrawl.io.read_table` reads the file instead, so the
result and every message are the same either way; only the speed differs.

Writing (:func:`write_table`) goes through :func:`jaxcrawl.io.atomic_write`
(a temporary file in the same directory, fsynced, renamed over the destination): CSV by
pyarrow's CSV writer (fields quoted only when a text column needs it; floats in their
shortest round-trip form), Parquet by pyarrow, JSON Lines built column-wise (non-finite
numbers as ``null``).
"""
from __future__ import annotations

import csv
import io
import json
import os
import re
from collections.abc import Mapping
from typing import Any, Union

import numpy as np

from .._src.fileio import atomic_write, open_read, read_once
from ._schema import BLANKS, FALSE_WORDS, INT64_MAX, TRUE_WORDS, RowError, TableError, check_groups

PathLike = Union[str, "os.PathLike[str]"]

_PARQUET = (".parquet", ".pq")
_JSONL = (".jsonl", ".ndjson")


def file_format(path: PathLike) -> tuple[str, bool]:
    """``(format, gzipped)`` of ``path`` by its name: ``"parquet"``, ``"jsonl"`` or ``"csv"``."""
    name = os.fspath(path).lower()
    gz = name.endswith(".gz")
    if gz:
        name = name[:-3]
    if name.endswith(_PARQUET):
        if gz:
            raise ValueError(f"{os.fspath(path)}: a Parquet file is compressed inside; drop the .gz")
        return "parquet", False
    if name.endswith(_JSONL):
        return "jsonl", gz
    return "csv", gz


def open_text(path: PathLike, mode: str = "rb"):
    """Open ``path`` for reading (bytes), through gzip when its name ends in ``.gz`` (a
    truncated or corrupt gzip file: ``ValueError`` naming it)."""
    if mode != "rb":
        raise ValueError(f"open_text reads bytes (mode 'rb'); got {mode!r}")
    return open_read(path)


def _pa():
    # pyarrow is imported on first use: `import jaxcrawl` stays fast
    import pyarrow as pa
    import pyarrow.compute as pc

    return pa, pc


# ------------------------------------------------------------------------------ reading
def _first_line(path: str) -> bytes | None:
    with open_text(path) as fh:
        line = fh.readline()
    return line if line else None


def _read_csv_arrow(path: str, schema) -> tuple[Any, np.ndarray] | None:
    """The file as an Arrow table of strings and the line of every row, or None when the
    line numbers are not those of the rows (the exact reader takes over)."""
    import csv

    import pyarrow.csv as pcsv

    pa, pc = _pa()
    first = _first_line(path)
    if first is None:
        return None
    try:
        header = next(csv.reader([first.decode("utf-8-sig")]))
    except (UnicodeDecodeError, csv.Error, StopIteration):
        return None
    if not header or not "".join(header).strip():
        return None  # a blank first line: the header is further down
    try:
        columns = schema.match_header(header)
    except ValueError:
        return None
    types = {h: pa.string() for h in header}
    try:
        table = pcsv.read_csv(
            path if read_once(path) is None else open_read(path),  # a pipe: its bytes, read once
            read_options=pcsv.ReadOptions(use_threads=True, block_size=1 << 24),
            parse_options=pcsv.ParseOptions(ignore_empty_lines=False),
            convert_options=pcsv.ConvertOptions(column_types=types, strings_can_be_null=False,
                                                quoted_strings_can_be_null=False,
                                                check_utf8=True),
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError, OSError, UnicodeDecodeError):
        return None
    if table.column_names != header:
        return None
    n = table.num_rows
    for name in table.column_names:  # a line break inside a value shifts the line numbers
        col = table[name]
        if n and pc.any(pc.match_substring_regex(col, r"[\r\n]")).as_py():
            return None
    if n and len(header) >= 1:
        empty = None
        for name in table.column_names:
            e = pc.equal(pc.utf8_length(table[name]), 0)
            empty = e if empty is None else pc.and_(empty, e)
        if pc.any(empty).as_py():  # a blank line (or a row of empty fields): exact reader
            return None
    for i, c in enumerate(columns):  # a blank cell of an optional column (a spreadsheet's empty cell) is null:
        if c is not None and not c.required and n:  # its default, as in the exact reader
            col = table.column(i)
            blank = pc.match_substring_regex(col, f"^[{BLANKS}]*$")
            if pc.any(blank).as_py():
                table = table.set_column(i, table.field(i), pc.if_else(blank, pa.scalar(None, pa.string()), col))
    return table, np.arange(2, n + 2, dtype=np.int64)


def _newline_count(path: str) -> tuple[int, bool]:
    """Number of line breaks in the file and whether its last line lacks one."""
    count, last = 0, b"\n"
    with open_text(path) as fh:
        while True:
            block = fh.read(1 << 24)
            if not block:
                break
            count += block.count(b"\n")
            last = block[-1:]
    return count, last != b"\n"


def _read_jsonl_arrow(path: str) -> tuple[Any, np.ndarray] | None:
    import pyarrow.json as pjson

    pa, _ = _pa()
    try:
        with open_text(path) as fh:
            table = pjson.read_json(fh)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OSError):
        return None
    breaks, unterminated = _newline_count(path)
    if table.num_rows != breaks + unterminated:  # blank lines: row != line - 1
        return None
    for name in table.column_names:
        t = table[name].type
        if pa.types.is_struct(t) or pa.types.is_list(t) or pa.types.is_large_list(t):
            return None  # nested values: the exact reader names them
    return table, np.arange(1, table.num_rows + 1, dtype=np.int64)


def _read_parquet(path: str):
    import pyarrow.parquet as pq

    pa, _ = _pa()
    data = read_once(path)  # a pipe or FIFO: its bytes, read once
    try:  # ParquetFile keeps two columns of one name (read_table's dataset cannot): the header rule names them
        table = pq.ParquetFile(path if data is None else pa.BufferReader(data)).read()
    except (pa.ArrowInvalid, OSError) as err:
        raise TableError(path, None, f"not a readable Parquet file ({err})") from None
    for name, typ in zip(table.column_names, table.schema.types):
        if pa.types.is_nested(typ):  # a list, struct or map per row: named, not broadcast
            raise TableError(path, None, f"column {name!r} holds {typ} values; every column must hold one "
                             f"value per row (a number, a boolean or a text)", column=name, reason="nested column")
    return table, np.arange(1, table.num_rows + 1, dtype=np.int64)


class RepeatedKeyError(ValueError):
    """A JSON object naming one key twice (:func:`unique_keys`)."""

    def __init__(self, key: str):
        super().__init__(f"field {key!r} appears twice")
        self.key = key


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook`` of the JSON readers: the object, or :class:`RepeatedKeyError`
    when a key repeats -- the rule of a CSV header (a column named twice is an error),
    never "the last one wins"."""
    obj: dict[str, Any] = {}
    for k, v in pairs:
        if k in obj:
            raise RepeatedKeyError(k)
        obj[k] = v
    return obj


def repeated_key_error(key: str) -> RowError:
    """The row error of a JSON Lines object that names ``key`` twice."""
    return RowError("repeated field", f"field {key!r} appears twice (every field once, as every column of a "
                    f"CSV header)", column=key)


def raw_cell(col, i: int) -> Any:
    """Cell ``i`` of an Arrow column as the exact reader would see it ('' for null)."""
    v = col[i].as_py()
    return "" if v is None else v


_INT_TEXT = re.compile(r"^-?[1-9][0-9]{0,17}$|^0$")


def ids_to_numpy(col) -> np.ndarray:
    """An Arrow column of ids as NumPy: int64 when every id is a canonical decimal integer
    (``0``, ``17``, ``-3``; no sign ``+``, no leading zeros, < 10**18), else an object
    array of ``str``."""
    pa, pc = _pa()
    if pa.types.is_integer(col.type):
        if pa.types.is_uint64(col.type) and len(col) and pc.max(col).as_py() > INT64_MAX:
            return _as_text(col)  # ids past int64: text, never wrapped to negative numbers
        return np.asarray(col.to_numpy(zero_copy_only=False), np.int64)
    if len(col) and pc.all(pc.match_substring_regex(col, _INT_TEXT.pattern)).as_py():
        return np.asarray(pc.cast(col, pa.int64()).to_numpy(zero_copy_only=False), np.int64)
    out = np.empty(len(col), object)
    out[:] = col.to_numpy(zero_copy_only=False) if len(col) else []
    return out


def column_values(c, col, kind_ids: bool):
    """``(values, bad, raw_fn)`` of one column: NumPy values in the column's dtype, the
    bad mask and a function giving a bad cell's raw value (for its message)."""
    pa, pc = _pa()
    n = len(col)
    col = col.combine_chunks() if hasattr(col, "combine_chunks") else col
    typ = col.type
    null = np.asarray(col.is_null().to_numpy(zero_copy_only=False), bool) if col.null_count else np.zeros(n, bool)
    if c.kind in ("number", "integer"):
        target = pa.float64() if c.kind == "number" else pa.int64()
        src = col
        if pa.types.is_string(typ) or pa.types.is_large_string(typ):
            src = pc.utf8_trim_whitespace(col)
        elif not (pa.types.is_integer(typ) or pa.types.is_floating(typ) or pa.types.is_null(typ)):
            return None
        try:
            if c.kind == "integer" and pa.types.is_floating(typ):
                return None  # 1.5 must be named: the exact reader does it
            vals = pc.cast(src, target, safe=True)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return None
        v = vals.to_numpy(zero_copy_only=False)
        if c.kind == "number":
            v = np.asarray(v, np.float64)
            if col.null_count:
                bad = null | ~c._ok(np.where(null, 0.0, v))
                v = np.where(null, np.nan, v)
            else:
                bad = ~c._ok(v) if n else np.zeros(0, bool)
        else:
            v = np.asarray(np.where(null, 0, v) if col.null_count else v, np.int64)
            bad = null
        return v, bad
    if c.kind == "text":
        if pa.types.is_integer(typ):
            return ids_to_numpy(col) if kind_ids else _as_text(col), null
        if not (pa.types.is_string(typ) or pa.types.is_large_string(typ)):
            return None
        if c.strip:
            col = pc.utf8_trim_whitespace(col)
        # empty, or blanks around the text (Column.parse's rule: str.isspace's characters)
        blank = pc.match_substring_regex(col, f"^[{BLANKS}]*$" if c.strip else f"^[{BLANKS}]*$|^[{BLANKS}]|[{BLANKS}]$")
        bad = null | np.asarray(blank.fill_null(True).to_numpy(zero_copy_only=False), bool)
        return (ids_to_numpy(col) if kind_ids else _as_text(col)), bad
    # boolean / binary
    if pa.types.is_boolean(typ):
        v = np.asarray(col.fill_null(False).to_numpy(zero_copy_only=False), bool)
        return v, (null if c.kind == "binary" else np.zeros(n, bool))
    if pa.types.is_integer(typ) or pa.types.is_floating(typ):
        raw = np.asarray(pc.cast(col, pa.float64()).fill_null(np.nan).to_numpy(zero_copy_only=False))
        bad = ~((raw == 0) | (raw == 1))
        if c.kind == "boolean":
            bad &= ~null
        return raw == 1, bad
    if not (pa.types.is_string(typ) or pa.types.is_large_string(typ)):
        return None
    low = pc.utf8_lower(pc.utf8_trim_whitespace(col.fill_null("")))
    if c.kind == "binary":
        true = np.asarray(pc.equal(low, "1").to_numpy(zero_copy_only=False), bool)
        false = np.asarray(pc.equal(low, "0").to_numpy(zero_copy_only=False), bool)
    else:
        true = np.asarray(pc.is_in(low, value_set=pa.array(sorted(TRUE_WORDS))).to_numpy(zero_copy_only=False), bool)
        false = np.asarray(pc.is_in(low, value_set=pa.array(sorted(FALSE_WORDS))).to_numpy(zero_copy_only=False), bool)
    return true, ~(true | false)


def _as_text(col) -> np.ndarray:
    pa, pc = _pa()
    if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
        col = pc.cast(col, pa.string())
    out = np.empty(len(col), object)
    if len(col):
        out[:] = col.to_numpy(zero_copy_only=False)
    return out


def _duplicates(keys: np.ndarray, ok: np.ndarray) -> bool:
    """Whether the ``ok`` entries of ``keys`` repeat (vectorised)."""
    k = keys if ok.all() else keys[ok]
    if k.size < 2:
        return False
    if k.dtype != object and bool(np.all(k[1:] > k[:-1])):  # increasing (e.g. a dump sorted by id)
        return False
    if k.dtype == object:
        pa, pc = _pa()
        arr = pa.array(k, pa.string())
        return len(pc.unique(arr)) < len(arr)  # hashed: a pass, where sorting strings took several
    s = np.sort(k)
    return bool(np.any(s[1:] == s[:-1]))


def _same_within_ok(groups: np.ndarray, values: np.ndarray, ok: np.ndarray) -> bool:
    """Whether ``values`` is constant within every group of ``groups`` (``ok`` rows)."""
    g, v = groups[ok], values[ok]
    if g.size < 2:
        return True
    _, inv = np.unique(g, return_inverse=True)
    inv = inv.reshape(-1)
    first = np.full(inv.max() + 1, -1, np.int64)
    first[inv[::-1]] = np.arange(inv.size)[::-1]
    ref = v[first[inv]]
    same = (ref == v) | (np.asarray(ref != ref) & np.asarray(v != v))  # NaN == NaN here
    return bool(np.all(same))


def read_arrow(path: str, schema, log, *, id_columns: tuple[str, ...] = ()):
    """Read and validate ``path`` column-wise (module docstring).

    Returns ``(columns, lines, present)`` -- or None when the exact line-by-line reader
    must read the file (a text file whose line numbers are not those of its rows, or a
    cell pyarrow cannot convert).  Malformed rows go through ``log.bad`` (raise, or count
    and skip) with the messages of :meth:`jaxcrawl.io.Column.parse`.
    """
    fmt, _ = file_format(path)
    if fmt == "csv":
        if schema.comments:
            return None
        got = _read_csv_arrow(path, schema)
    elif fmt == "jsonl":
        got = _read_jsonl_arrow(path)
    else:
        got = _read_parquet(path)
    if got is None:
        return None
    table, lines = got
    names = table.column_names
    if fmt != "csv":
        try:
            header_cols = schema.match_header(names)
        except ValueError as err:
            raise TableError(path, None, f"columns must be {schema.header_text!r} ({err}), "
                             f"got {','.join(names)!r}") from None
    else:
        header_cols = schema.match_header(names)
    log.header = 1 if fmt == "csv" else 0
    n = table.num_rows
    ok = np.ones(n, bool)
    cols: dict[str, np.ndarray] = {}
    bad_rows: list[tuple[int, RowError]] = []
    for c, name in zip(header_cols, names):
        got_col = column_values(c, table[name], c.name in id_columns)
        if got_col is None:
            if fmt != "parquet":  # e.g. JSON ids past int64 that Arrow read as doubles: the exact reader
                return None
            raw_col = table[name].to_pylist()
            vals, bad = c.parse_many(["" if x is None else x for x in raw_col])
        else:
            vals, bad = got_col
        col_nulls = table[name].null_count
        if col_nulls and not c.required:  # JSON null / Parquet null in an optional column: its default
            null = np.asarray(table[name].is_null().to_numpy(zero_copy_only=False), bool)
            vals = np.array(vals, copy=True)
            vals[null] = c.default
            bad = bad & ~null
        cols[c.name] = vals
        first_bad = bad & ok
        if first_bad.any():
            column = table[name]
            for i in np.flatnonzero(first_bad).tolist():
                try:
                    c.parse(raw_cell(column, i))
                except RowError as err:
                    bad_rows.append((int(lines[i]), err))
                else:  # the vectorised rule and the exact one disagree: let the exact reader decide
                    if fmt == "csv":
                        return None
                    raise AssertionError(f"{c.name}: parse accepted {raw_cell(column, i)!r}")
        ok &= ~bad
    # table-wide rules: vectorised checks; the exact (per-row) pass only when one fails
    needs_exact = False
    if schema.key is not None and schema.key in cols:
        needs_exact |= _duplicates(cols[schema.key], ok)
    for c in schema.columns:
        if c.same_within is not None and c.name in cols and c.same_within in cols:
            needs_exact |= not _same_within_ok(cols[c.same_within], cols[c.name], ok)
    if needs_exact:
        check_groups(schema, cols, lines, ok, {}, bad_rows, unit=log.unit)
    for line, err in sorted(bad_rows, key=lambda e: e[0]):
        log.bad(line, err)
    log.rows_read += int(ok.sum())
    if not ok.all():
        cols = {k: v[ok] for k, v in cols.items()}
        lines = lines[ok]
    return cols, lines, tuple(c.name for c in header_cols)


# ------------------------------------------------------------------------------ writing
def as_arrow(values: Any):
    """A NumPy array, list or Arrow array as an Arrow array (object arrays as strings)."""
    pa, _ = _pa()
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        return values
    a = np.asarray(values)
    if a.dtype == object or a.dtype.kind in "US":
        return pa.array([str(x) for x in a.tolist()] if a.dtype == object else a.astype(str), pa.string())
    if a.dtype.kind == "M":
        return pa.array(a)
    return pa.array(a)


def _csv_bytes_quoting(table) -> str:
    """``"none"`` when no text cell holds a comma, quote or line break (fields written
    bare), else ``"needed"`` (text fields quoted)."""
    pa, pc = _pa()
    for name in table.column_names:
        col = table[name]
        if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
            if len(col) and pc.any(pc.match_substring_regex(col, r'[,"\r\n]')).as_py():
                return "needed"
    return "none"


def _json_column(col) -> Any:
    """One column as JSON text per row (Arrow string array)."""
    pa, pc = _pa()
    t = col.type
    if pa.types.is_boolean(t):
        return pc.if_else(col, "true", "false")
    if pa.types.is_integer(t):
        return pc.cast(col, pa.string())
    if pa.types.is_floating(t):
        finite = pc.is_finite(col)
        text = pc.cast(pc.cast(col, pa.float64()), pa.string())
        return pc.if_else(pc.and_(finite, pc.invert(pc.is_null(col))), text, "null")
    text = pc.cast(col, pa.string())
    if len(text) and pc.any(pc.match_substring_regex(text, r'[\\"\x00-\x1f\x7f]')).as_py():
        return pa.array([json.dumps(x) for x in text.to_pylist()], pa.string())
    return pc.binary_join_element_wise('"', text, '"', "")


def _jsonl_lines(table) -> Any:
    pa, pc = _pa()
    n = table.num_rows
    pieces = []
    for k, name in enumerate(table.column_names):
        key = ("{" if k == 0 else ",") + json.dumps(name) + ":"
        pieces += [key, _json_column(table[name].combine_chunks()
                                     if hasattr(table[name], "combine_chunks") else table[name])]
    pieces.append("}\n")
    if n == 0:
        return pa.array([], pa.string())
    return pc.binary_join_element_wise(*pieces, "")


def write_table(path: PathLike, columns: Mapping[str, Any], *, chunk: int = 1 << 20,
                  progress: Any = None) -> None:
    """Write a table atomically in the format of ``path``'s name (module docstring).

    Args:
      path: the file (``.csv``, ``.parquet``, ``.jsonl``; ``.gz`` for gzip text).
      columns: ``{name: (n,) array}`` (NumPy arrays, lists or Arrow arrays; object arrays
        are written as text, datetimes as timestamps).
      chunk: rows written at a time.
      progress: an optional ``tqdm``-like object whose ``update(rows)`` is called.
    """
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    pa, _ = _pa()
    path = os.fspath(path)
    if os.path.isdir(path):
        raise ValueError(f"{path}: is a directory")
    fmt, gz = file_format(path)
    table = pa.table({k: as_arrow(v) for k, v in columns.items()})
    n = table.num_rows

    def write(tmp: str) -> None:
        if fmt == "parquet":
            pq.write_table(table, tmp, row_group_size=max(chunk, 1 << 16))
            if progress is not None:
                progress.update(n)
            return
        raw = pa.OSFile(tmp, "wb")
        sink = pa.CompressedOutputStream(raw, "gzip") if gz else raw
        try:
            if fmt == "csv":
                quoting = _csv_bytes_quoting(table)
                head = io.StringIO()
                csv.writer(head, lineterminator="\n").writerow(table.column_names)
                sink.write(head.getvalue().encode())
                opts = pcsv.WriteOptions(include_header=False, quoting_style=quoting)
                with pcsv.CSVWriter(sink, table.schema, write_options=opts) as w:
                    for start in range(0, n, chunk):
                        w.write_table(table.slice(start, chunk))
                        if progress is not None:
                            progress.update(min(chunk, n - start))
            else:
                for start in range(0, max(n, 1), chunk):
                    part = table.slice(start, chunk)
                    if part.num_rows:
                        lines = _jsonl_lines(part)
                        buf = lines.buffers()[2]
                        offs = np.frombuffer(lines.buffers()[1], np.int32, len(lines) + 1,
                                             lines.offset * 4)
                        sink.write(memoryview(buf)[offs[0]:offs[-1]])
                        if progress is not None:
                            progress.update(part.num_rows)
        finally:
            sink.close()
            if gz and not raw.closed:
                raw.close()

    atomic_write(path, write)
