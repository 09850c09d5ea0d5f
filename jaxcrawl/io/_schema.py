"""The types of the table reader: a :class:`Schema` of typed :class:`Column` s, the rows a
format yields (:class:`Batch` from a :class:`Source`), the validated :class:`Table`, and
malformed rows as ``path:line: message`` errors (:class:`TableError`) or counts
(:class:`RowLog`, :class:`FileReport`)."""
from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Union

import numpy as np

PathLike = Union[str, "os.PathLike[str]"]

#: Words accepted as True / False by a ``boolean`` column (case-insensitive).
TRUE_WORDS = frozenset({"1", "true", "t", "yes", "y"})
FALSE_WORDS = frozenset({"0", "false", "f", "no", "n", ""})
_MAX_EXAMPLES = 10
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
#: What ``str.strip`` removes (``str.isspace``), as a regular-expression class: the
#: columnar reader finds the same blanks around an id as the exact one.
BLANKS = (r"\t\n\x0b\x0c\r\x1c-\x1f \x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}"
          r"\x{205f}\x{3000}")


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
      strip: ``text``: blanks around a value are removed and any value is taken as its
        text (True), or -- the default, for ids -- the value must be text or an integer
        and blanks around it are refused (ids are used exactly as written, never silently
        changed).
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
    strip: bool = False

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
            if not self.strip and (isinstance(value, bool) or not isinstance(value, (str, int))):
                raise self._error(f"{name} must be text or an integer, got {value!r}")
            text = str(value)
            if not text.strip():
                raise self._error(f"empty {name}")
            if self.strip:
                return text.strip()
            if text != text.strip():
                raise self._error(f"{name} {text!r} has leading or trailing blanks (ids are used as written: "
                                  "remove them)")
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
                v = int(str(value).strip())
            except ValueError:
                raise self._error(f"{name} {value!r} is not an integer") from None
            if not INT64_MIN <= v <= INT64_MAX:
                raise self._error(f"{name} {value!r} is out of range (a 64-bit integer: {INT64_MIN} to {INT64_MAX})")
            return v
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
            out[:] = [(x if isinstance(x, str) else str(x)).strip() if self.strip else
                      (x if isinstance(x, str) else str(x)) for x in values]
            bad = [not str(x).strip() if self.strip else
                   (not (isinstance(x, str) or (isinstance(x, int) and not isinstance(x, bool)))
                    or not str(x).strip() or str(x) != str(x).strip()) for x in values]
            return out, np.asarray(bad, dtype=bool).reshape(m)
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
      comments: lines before the header whose first character is ``#`` are comments
        (kept in :attr:`Table.comments`), not data; after the header such a line is data
        (an id may start with ``#``).
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

    def check_arrays(self, path: PathLike, columns: dict[str, Any], *, first_row: int = 1,
                     chunk: int = 1 << 22) -> None:
        """Check whole arrays (e.g. the memory maps of a ``.npy`` table, or one process's
        rows) against the rules of their columns, ``chunk`` rows at a time:
        :class:`TableError` ``path: row N: message`` for the first value that breaks one
        (rows numbered from ``first_row``), the same message as a malformed cell of a file."""
        for name, values in columns.items():
            if values is None:
                continue
            c = self.column(name)
            for start in range(0, len(values), chunk):
                v = np.asarray(values[start:start + chunk])
                ok = c._ok(v.astype(np.float64)) if c.kind == "number" else (
                    (v == 0) | (v == 1) if c.kind in ("boolean", "binary") and v.dtype != bool else None)
                if ok is not None and not np.all(ok):
                    i = int(np.flatnonzero(~np.asarray(ok))[0])
                    value = v[i].item()
                    try:
                        c.parse(value if c.kind == "number" else str(value))
                    except RowError as err:
                        raise TableError(path, first_row + start + i, err.message, column=c.name, reason=err.reason,
                                         unit="row") from None
                    raise TableError(path, first_row + start + i, f"{c.name} must be {c.rule}, got {value!r}",
                                     column=c.name, unit="row")

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
