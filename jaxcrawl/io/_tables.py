"""One reader for every table jaxcrawl reads, and one writer for the tables it writes.

A file format is read into a :class:`Table` by :func:`read_table` against a
:class:`Schema`: named, typed :class:`Column` s with their rules (a number's range, a
non-empty text, a boolean), an optional key whose values must be distinct, and columns
whose value must not change within a group of rows.  Every malformed row becomes a
``path:line: message`` error naming the column and the rule (:class:`TableError`), or,
with ``errors="skip"``, is counted by reason in the table's :class:`FileReport` -- never
dropped silently.  The page tables (:func:`read_problem_csv`), plans
(:func:`jaxcrawl.io.plans.read_plan_csv`), crawl histories
(:func:`jaxcrawl.io.histories.read_history_csv`) and host files
(:mod:`jaxcrawl.io.hosts`) are all schemas of this one reader.

Formats.  The reader takes rows from a *source* chosen by the file's suffix: CSV (the
default, any suffix not registered otherwise) is built in; another format is added with
:func:`register_format` by a function that opens the file and yields batches of columns
(:class:`Batch`), so a columnar format (Parquet, JSON Lines) plugs in without touching the
validation.

Writing.  :func:`write_csv` writes a table in chunks through
:func:`jaxcrawl.io.checkpoint.atomic_write`: an error or Ctrl-C never leaves a truncated
file and an existing file is untouched until the new one is complete.
:func:`check_output` refuses an output path that names one of the inputs.
"""
from __future__ import annotations

import csv
import io
import json
import math
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import IO, Any, NamedTuple, Union

import numpy as np
from jax.typing import ArrayLike

from .checkpoint import atomic_write, same_file
from .formats import file_format, read_arrow, write_columns

__all__ = [
    "Column",
    "Schema",
    "Table",
    "Batch",
    "FileReport",
    "RowError",
    "TableError",
    "RowLog",
    "read_table",
    "register_format",
    "format_for",
    "write_csv",
    "write_file",
    "check_output",
    "PAGE_TABLE",
    "PageRows",
    "read_problem_csv",
    "write_problem_csv",
    "read_problem",
    "write_problem",
    "finite_or_blank",
]

PathLike = Union[str, "os.PathLike[str]"]

#: Words accepted as True / False by a ``boolean`` column (case-insensitive).
TRUE_WORDS = frozenset({"1", "true", "t", "yes", "y"})
FALSE_WORDS = frozenset({"0", "false", "f", "no", "n", ""})
_MAX_EXAMPLES = 10


# ------------------------------------------------------------------------- errors
class RowError(Exception):
    """One malformed row: ``reason`` (a short category for counting, e.g. ``"bad cap"``)
    and a message naming the column and the rule."""

    def __init__(self, reason: str, message: str, column: str | None = None):
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.column = column


class TableError(ValueError):
    """A malformed table file, reported as ``path:line: message [hint]``.

    Attributes:
      path: the file.
      line: the 1-based line (row) number, or None for a whole-file problem.
      message: what is wrong (names the column and the rule for a malformed value).
      column: the offending column, when there is one.
      reason: the short category (``"bad importance"``, ``"wrong number of fields"``...).
      hint: appended advice (e.g. how to skip malformed rows), may be empty.
    """

    def __init__(self, path: PathLike, line: int | None, message: str, *,
                 column: str | None = None, reason: str | None = None, hint: str = "",
                 unit: str = "line"):
        self.path = os.fspath(path)
        self.line = line
        self.message = message
        self.column = column
        self.reason = reason
        self.hint = hint
        self.unit = unit
        where = _where(self.path, line, unit)
        super().__init__(f"{where}: {message}" + (f" {hint}" if hint else ""))

    def with_hint(self, hint: str) -> TableError:
        """The same error with another hint."""
        return TableError(self.path, self.line, self.message, column=self.column,
                          reason=self.reason, hint=hint, unit=self.unit)


def _where(path: str, line: int | None, unit: str = "line") -> str:
    """``path:line`` for text files, ``path: row N`` for Parquet (row numbers from 1)."""
    if line is None:
        return path
    return f"{path}:{line}" if unit == "line" else f"{path}: row {line}"


class FileReport(NamedTuple):
    """What was read from one file.

    Attributes:
      path: the file.
      rows_read: data rows accepted.
      rows_skipped: malformed rows skipped (only with ``errors="skip"``).
      skipped_by_reason: ``{reason: count}`` of the skipped rows.
      blank_lines: empty lines (ignored; not data).
      header_lines: 1 if the file has a column header line, else 0.
      examples: up to 10 ``"file:line: message"`` strings for skipped rows.
    """

    path: str
    rows_read: int
    rows_skipped: int
    skipped_by_reason: dict[str, int]
    blank_lines: int
    header_lines: int
    examples: tuple[str, ...]


class RowLog:
    """The error policy and counts of one file being read.

    ``bad(line, err)`` raises :class:`TableError` when ``errors == "raise"``; with
    ``errors == "skip"`` it counts the row by ``err.reason`` and keeps up to 10 examples.
    """

    def __init__(self, path: PathLike, errors: str = "raise", hint: str = "", unit: str = "line"):
        if errors not in ("raise", "skip"):
            raise ValueError(f"errors must be 'raise' or 'skip'; got {errors!r}")
        self.path = os.fspath(path)
        self.unit = unit
        self.errors = errors
        self.hint = hint
        self.rows_read = 0
        self.rows_skipped = 0
        self.reasons: dict[str, int] = {}
        self.blank = 0
        self.header = 0
        self.examples: list[str] = []

    def bad(self, line: int, err: RowError) -> None:
        """Handle one malformed row (raise, or count and skip)."""
        if self.errors == "raise":
            raise TableError(self.path, line, err.message, column=err.column, reason=err.reason,
                             hint=self.hint, unit=self.unit)
        self.rows_skipped += 1
        self.reasons[err.reason] = self.reasons.get(err.reason, 0) + 1
        if len(self.examples) < _MAX_EXAMPLES:
            self.examples.append(f"{_where(self.path, line, self.unit)}: {err.message}")

    def report(self) -> FileReport:
        """The counts so far as a :class:`FileReport`."""
        return FileReport(self.path, self.rows_read, self.rows_skipped, dict(self.reasons),
                          self.blank, self.header, tuple(self.examples))


# ------------------------------------------------------------------------ columns
_KINDS = ("text", "number", "integer", "boolean", "binary")
_DTYPES = {"text": object, "number": np.float64, "integer": np.int64, "boolean": bool, "binary": bool}


@dataclass(frozen=True)
class Column:
    """A named, typed column and its rule.

    Attributes:
      name: the header name (matched case-insensitively).
      kind: ``"text"`` (non-empty after stripping), ``"number"`` (a float),
        ``"integer"``, ``"boolean"`` (1/0/true/false/t/f/yes/no/y/n, empty = false) or
        ``"binary"`` (exactly 0 or 1).
      minimum, maximum: the range of a number (``None``: unbounded).
      exclusive_minimum: the number must be ``> minimum`` (else ``>= minimum``).
      finite: a number must be finite (NaN is always rejected); ``False`` admits ``inf``.
      required: the header must have it; an optional column missing from the file is
        filled with ``default``.
      default: value of a missing optional column.
      aliases: other header names accepted for this column.
      same_within: the name of a column that groups rows (e.g. ``"page_id"``): this
        column's value must be the same on every row of a group.
    """

    name: str
    kind: str = "text"
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: bool = False
    finite: bool = True
    required: bool = True
    default: Any = None
    aliases: tuple[str, ...] = ()
    same_within: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise ValueError(f"Column kind must be one of {_KINDS}; got {self.kind!r}")

    @property
    def dtype(self) -> np.dtype:
        """NumPy dtype of the parsed column."""
        return np.dtype(_DTYPES[self.kind])

    @property
    def rule(self) -> str:
        """The rule a value must satisfy, in words (as used in error messages)."""
        if self.kind == "text":
            return "non-empty"
        if self.kind == "integer":
            return "an integer"
        if self.kind == "boolean":
            return "a boolean (1/0/true/false/yes/no)"
        if self.kind == "binary":
            return "0 or 1"
        lo, hi = self.minimum, self.maximum
        if lo is not None and hi is not None:
            return f"in {'(' if self.exclusive_minimum else '['}{lo:g}, {hi:g}]"
        parts = ["finite"] if self.finite else []
        if lo is not None:
            parts.append(f"{'>' if self.exclusive_minimum else '>='} {lo:g}")
        if hi is not None:
            parts.append(f"<= {hi:g}")
        rule = " and ".join(parts) or "a number"
        return rule + ("" if self.finite or hi is not None else " (or inf)")

    def _error(self, message: str) -> RowError:
        return RowError(f"bad {self.name}", message, self.name)

    def _ok(self, v: Any) -> Any:
        """Does a parsed number (a float, or elementwise an array) satisfy the rule?  Plain
        operators only, so the scalar and the batch paths are one rule."""
        ok = v == v  # not NaN
        if self.finite:
            ok = ok & (abs(v) < math.inf)
        if self.minimum is not None:
            ok = ok & ((v > self.minimum) if self.exclusive_minimum else (v >= self.minimum))
        if self.maximum is not None:
            ok = ok & (v <= self.maximum)
        return ok

    def parse(self, value: Any) -> Any:
        """The value of one cell, or :class:`RowError` naming the column and the rule."""
        name = self.name
        if self.kind == "text":
            text = str(value).strip()
            if not text:
                raise self._error(f"empty {name}")
            return text
        if self.kind == "number":
            try:
                v = float(value)
            except (TypeError, ValueError):
                raise self._error(f"{name} {value!r} is not a number") from None
            if not self._ok(v):
                shown = value.strip() if isinstance(value, str) else value
                raise self._error(f"{name} must be {self.rule}, got {shown!r}")
            return v
        if self.kind == "integer":
            try:
                if isinstance(value, (bool, float)):
                    raise ValueError
                return int(str(value).strip())
            except ValueError:
                raise self._error(f"{name} {value!r} is not an integer") from None
        text = str(value).strip().lower() if not isinstance(value, bool) else str(int(value))
        if self.kind == "binary":
            if text not in ("0", "1"):
                raise self._error(f"{name} must be 0 or 1, got {value!r}")
            return text == "1"
        if text in TRUE_WORDS:
            return True
        if text in FALSE_WORDS:
            return False
        raise self._error(f"{name} must be {self.rule}, got {value!r}")

    def parse_many(self, values: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
        """``(parsed, bad)`` for a batch of cells: vectorised where it can be, and in exact
        agreement with :meth:`parse` on which cells are bad."""
        m = len(values)
        if self.kind == "number":
            try:
                v = np.asarray(values, dtype=np.float64)
            except (TypeError, ValueError):
                v = np.empty(m, np.float64)
                for i, x in enumerate(values):
                    try:
                        v[i] = float(x)
                    except (TypeError, ValueError):
                        v[i] = np.nan
            return v, ~self._ok(v)
        if self.kind == "text":
            out = np.empty(m, object)
            out[:] = [str(x).strip() for x in values]
            return out, np.asarray([not x for x in out.tolist()], dtype=bool).reshape(m)
        out = np.zeros(m, self.dtype)
        bad = np.zeros(m, bool)
        for i, x in enumerate(values):
            try:
                out[i] = self.parse(x)
            except RowError:
                bad[i] = True
        return out, bad


@dataclass(frozen=True)
class Schema:
    """The columns of one kind of table and its table-wide rules.

    Attributes:
      name: what the file holds (``"page table"``), for messages.
      columns: the :class:`Column` s, in their canonical order.
      key: a column whose values must be distinct (a repeat is a malformed row naming the
        line of the first occurrence), or None.
      rows: the noun of a row, for "no pages after the header".
      min_rows: fewest data rows accepted.
      comments: lines whose first character is ``#`` are comments (kept in
        :attr:`Table.comments`), not data.
    """

    name: str
    columns: tuple[Column, ...]
    key: str | None = None
    rows: str = "rows"
    min_rows: int = 1
    comments: bool = False

    def column(self, name: str) -> Column:
        """The column called ``name``."""
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(name)

    @property
    def header_text(self) -> str:
        """The header as documented: ``page_id,importance,change_rate[,complete]``."""
        req = ",".join(c.name for c in self.columns if c.required)
        return req + "".join(f"[,{c.name}]" for c in self.columns if not c.required)

    def match_header(self, header: Sequence[str]) -> list[Column | None]:
        """The column of every header field (raises ``ValueError`` with the reason)."""
        names: dict[str, Column] = {}
        for c in self.columns:
            for n in (c.name, *c.aliases):
                names[n.lower()] = c
        found: list[Column | None] = []
        seen: set[str] = set()
        for h in header:
            c = names.get(str(h).strip().lower())
            if c is None:
                raise ValueError(f"unknown column {str(h).strip()!r}")
            if c.name in seen:
                raise ValueError(f"column {c.name!r} appears twice")
            seen.add(c.name)
            found.append(c)
        missing = [c.name for c in self.columns if c.required and c.name not in seen]
        if missing:
            raise ValueError(f"missing column {missing[0]!r}")
        return found


# ------------------------------------------------------------------------ sources
class Batch(NamedTuple):
    """A batch of rows from a source, column by column.

    Attributes:
      lines: ``(m,)`` line (or row) numbers of the rows, for messages.
      fields: one sequence of ``m`` raw values per header column (strings for text
        formats; typed values are accepted too).
      malformed: ``(line, RowError)`` of rows the format itself rejected (e.g. a wrong
        number of fields); they are not in ``lines``.
    """

    lines: np.ndarray
    fields: list[Sequence[Any]]
    malformed: list[tuple[int, RowError]]


@dataclass
class Source:
    """An opened table file: its header, then batches of rows.

    A format's opener (see :func:`register_format`) returns one.  ``header`` is None for
    an empty file; ``comments`` and ``blank_lines`` are filled while the batches are read.
    """

    path: str
    header: list[str] | None
    header_line: int
    batches: Callable[[int], Iterator[Batch]]
    comments: list[tuple[int, str]] = field(default_factory=list)
    blank_lines: int = 0
    close: Callable[[], None] = lambda: None


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
    from .formats import open_text

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
            if comments and row[0].lstrip().startswith("#"):
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
    from .formats import open_text

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
                obj = json.loads(text)
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


# ------------------------------------------------------------------------- tables
@dataclass(frozen=True)
class Table:
    """A validated table: its columns as NumPy arrays, in file order.

    Attributes:
      path: the file.
      columns: ``{name: (n,) array}`` for every column of the schema (a missing optional
        column is a read-only array of its default).
      line: ``(n,)`` line number of every row.
      present: the schema columns the file has.
      comments: ``(line, text)`` of ``#`` comment lines (schemas with comments).
      report: the :class:`FileReport` (rows read and skipped by reason).
    """

    path: str
    columns: dict[str, np.ndarray]
    line: np.ndarray
    present: tuple[str, ...]
    comments: tuple[tuple[int, str], ...]
    report: FileReport

    def __getitem__(self, name: str) -> np.ndarray:
        return self.columns[name]

    def __len__(self) -> int:
        return int(self.line.shape[0])


def check_groups(schema: Schema, cols: dict[str, np.ndarray], lines: np.ndarray, ok: np.ndarray,
                  firsts: dict[str, dict], errors: list[tuple[int, RowError]], unit: str = "line") -> None:
    """Key uniqueness and constant-within-group columns, in row order (updates ``ok``)."""
    checks = []
    if schema.key is not None and schema.key in cols:
        checks.append(("key", schema.key, None))
    for c in schema.columns:
        if c.same_within is not None and c.name in cols and c.same_within in cols:
            checks.append(("same", c.same_within, c.name))
    for kind, group, name in checks:
        seen = firsts.setdefault(f"{kind}:{group}:{name}", {})
        keys = cols[group].tolist()
        vals = cols[name].tolist() if name else None
        for i in np.flatnonzero(ok).tolist():
            k = keys[i]
            if kind == "key":
                if k in seen:
                    ok[i] = False
                    errors.append((int(lines[i]), RowError(
                        f"duplicate {group}", f"duplicate {group} {k!r} (first on {unit} {seen[k]})", group)))
                else:
                    seen[k] = int(lines[i])
            else:
                v = vals[i]
                first = seen.setdefault(k, (v, int(lines[i])))
                if first[0] != v:
                    ok[i] = False
                    errors.append((int(lines[i]), RowError(
                        f"inconsistent {name}",
                        f"{name} must be the same on every row of {group} {k!r}: got {v!r}, "
                        f"{first[0]!r} on {unit} {first[1]}", name)))


def read_table(path: PathLike, schema: Schema, *, errors: str = "raise", hint: str = "",
               batch_size: int = 1 << 16, id_columns: tuple[str, ...] = ()) -> Table:
    """Read and validate the table at ``path`` against ``schema``.

    The header names the columns (any order, case-insensitive, aliases accepted; unknown
    or repeated columns and missing required ones are an error at the header's line).
    Every row is checked: the number of fields, each value against its column's rule,
    the key's distinctness and the columns that must be constant within a group.  Blank
    lines are ignored (counted).

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
        line_parts: list[np.ndarray] = []
        firsts: dict[str, dict] = {}
        for batch in src.batches(batch_size):
            bad_rows: list[tuple[int, RowError]] = list(batch.malformed)
            m = batch.lines.shape[0]
            ok = np.ones(m, bool)
            cols: dict[str, np.ndarray] = {}
            for c, raw in zip(header_cols, batch.fields):
                if any(x is None for x in raw):  # JSON null: an optional column's default
                    raw = [(c.default if not c.required else "") if x is None else x for x in raw]
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

    from .formats import ids_to_numpy

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
def write_file(path: PathLike, fill: Callable[[IO], None], *, binary: bool = False) -> None:
    """Write ``path`` atomically: ``fill(fh)`` writes into a temporary file that replaces
    ``path`` only once complete (:func:`jaxcrawl.io.checkpoint.atomic_write`); on an error
    or interrupt ``path`` is untouched.  The file gets the old file's permissions (or the
    umask's default for a new file)."""
    path = os.fspath(path)
    if os.path.isdir(path):
        raise ValueError(f"{path}: is a directory")
    def write(tmp: str) -> None:
        with open(tmp, "wb" if binary else "w", **({} if binary else {"newline": "", "encoding": "utf-8"})) as fh:
            fill(fh)

    atomic_write(path, write)


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


# -------------------------------------------------------------------- page tables
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


class PageRows(NamedTuple):
    """Pages read from a page table file: their ids and the arrays of a problem.

    ``min_interval``/``max_interval`` are the per-page revisit bounds (None when the file
    has no such column: no bound); :meth:`rate_bounds` turns them into rate bounds.
    (``jaxcrawl.data.PageTable`` is this type's former name.)
    """

    page_id: np.ndarray
    importance: np.ndarray
    change_rate: np.ndarray
    complete: np.ndarray
    min_interval: np.ndarray | None = None
    max_interval: np.ndarray | None = None

    def rate_bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """``(min_rate, max_rate) = (1/max_interval, 1/min_interval)`` per page."""
        n = self.importance.shape[0]
        lo_i = np.zeros(n) if self.min_interval is None else np.asarray(self.min_interval, np.float64)
        hi_i = np.full(n, np.inf) if self.max_interval is None else np.asarray(self.max_interval, np.float64)
        with np.errstate(divide="ignore"):
            return 1.0 / hi_i, 1.0 / lo_i


def read_problem(path: PathLike, *, errors: str = "raise") -> PageRows:
    """Read a page table (CSV, Parquet or JSON Lines, by name; :func:`read_table`).

    Columns ``page_id,importance,change_rate[,complete][,min_interval][,max_interval]``:
    ``importance`` and ``change_rate`` finite and > 0; ``complete`` (default 0) a boolean
    (1/0/true/false/yes/no); ``min_interval`` >= 0 (default 0) and ``max_interval`` > 0
    or ``inf`` (default ``inf``) the revisit bounds, in the rates' time unit; page ids
    distinct (int64 when all are decimal integers, else strings).  A malformed row raises
    :class:`TableError` (a ``ValueError``) ``path:line: message`` naming the column and the
    rule (``errors="skip"`` counts and drops it).

    Returns:
      :class:`PageRows` (float64 arrays, bool ``complete``).
    """
    t = read_table(path, PAGE_TABLE, errors=errors, id_columns=("page_id",))
    return PageRows(t["page_id"], t["importance"], t["change_rate"], t["complete"],
                    t["min_interval"] if "min_interval" in t.present else None,
                    t["max_interval"] if "max_interval" in t.present else None)


def read_problem_csv(path: PathLike) -> PageRows:
    """:func:`read_problem` (any supported format, despite the name)."""
    return read_problem(path)


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
    write_columns(path, cols)


def write_problem_csv(path: PathLike, page_id: ArrayLike, importance: ArrayLike,
                      change_rate: ArrayLike, complete: ArrayLike | None = None) -> None:
    """:func:`write_problem` (the format follows ``path``'s name)."""
    write_problem(path, page_id, importance, change_rate, complete)


def finite_or_blank(value: float, spec: str = ".10g") -> str:
    """``format(value, spec)``, or an empty field when ``value`` is NaN or infinite."""
    return format(value, spec) if math.isfinite(value) else ""
