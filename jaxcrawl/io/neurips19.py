"""Loader for the NeurIPS-19 crawl-history data set (Kolobov et al. 2019).

The data set (about 18.5M URLs crawled daily for 14 weeks by a production crawler) is
tab-separated text, one file per table:

``url_urlid_hostid.txt``
    ``URL <TAB> URL_ID <TAB> Host_ID``
``host_hostid_isconstrained.txt``
    ``Host_URL <TAB> Host_ID <TAB> Is_constrained`` (1 if the host imposes a politeness
    constraint)
``urlid_imp.txt``
    ``URL_ID <TAB> Importance_score``
``urlid_offset_history.txt``
    ``URL_ID <TAB> First_crawl_time_offset <TAB> [[interval_days, change_indicator], ...]``
``urlid_chrate_compl_obs_hist.txt``
    ``URL_ID <TAB> Poisson_change_rate`` for the ~4% of URLs with complete change
    observations.

:func:`load_crawl_dataset` streams these files line by line (the history file of the
real data set has ~18.5M lines), validates every line, joins the tables on URL_ID and
returns padded histories ready for :mod:`jaxcrawl.estimators`.  A malformed line raises
``ValueError`` naming the file and line number; with ``errors="skip"`` it is counted (by
reason) in the returned :class:`LoadReport` instead -- never dropped silently.
"""
from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
from numpy.typing import DTypeLike

from .progress import progress_bar
from .tables import Column, FileReport, RowError, RowLog, TableError

__all__ = ["CrawlDataset", "FileReport", "LoadReport", "load_crawl_dataset", "FILES"]

#: The data set's file names, by role.
FILES = {
    "urls": "url_urlid_hostid.txt",
    "hosts": "host_hostid_isconstrained.txt",
    "importance": "urlid_imp.txt",
    "history": "urlid_offset_history.txt",
    "complete": "urlid_chrate_compl_obs_hist.txt",
}
_REQUIRED = ("importance", "history")
_HEADER_TOKENS = ("url_id", "urlid", "host_id", "hostid", "importance", "offset", "change_rate", "url", "host")
_SKIP_HINT = "(pass errors='skip' to count and skip malformed lines)"


class LoadReport(NamedTuple):
    """Everything :func:`load_crawl_dataset` read, skipped, dropped or could not join.

    Attributes:
      files: ``{role: FileReport}`` for every file that exists (roles are the keys of
        :data:`FILES`).
      missing_files: optional files that were absent (their data is reported as unknown).
      joins: counts from joining the tables on URL_ID:
        ``history_without_importance`` and ``complete_without_importance`` (rows dropped
        because the URL has no importance score), ``pages_without_history`` (pages given
        an empty history), ``pages_without_host`` (host id -1),
        ``hosts_without_constraint_row`` (pages whose host is missing from the host
        table; marked unconstrained), ``truncated_histories`` (histories cut to
        ``max_observations``) and ``dropped_observations`` (observations cut).
    """

    files: dict[str, FileReport]
    missing_files: tuple[str, ...]
    joins: dict[str, int]

    @property
    def rows_read(self) -> int:
        return sum(f.rows_read for f in self.files.values())

    @property
    def rows_skipped(self) -> int:
        return sum(f.rows_skipped for f in self.files.values())

    def summary(self) -> str:
        """A human-readable multi-line summary."""
        lines = []
        for f in self.files.values():
            reasons = ", ".join(f"{k}: {v}" for k, v in sorted(f.skipped_by_reason.items()))
            lines.append(
                f"{os.path.basename(f.path)}: read {f.rows_read} rows, skipped {f.rows_skipped}"
                + (f" ({reasons})" if reasons else "")
                + (f", {f.blank_lines} blank lines" if f.blank_lines else "")
                + (", header line" if f.header_lines else "")
            )
        for name in self.missing_files:
            lines.append(f"{name}: missing (treated as no data)")
        joins = ", ".join(f"{k}: {v}" for k, v in self.joins.items() if v)
        if joins:
            lines.append(f"joins: {joins}")
        return "\n".join(lines)


class CrawlDataset(NamedTuple):
    """The data set as arrays, one row per page (pages = URLs with an importance score,
    sorted by URL_ID).

    Attributes:
      url_id: ``(n,)`` int64 URL ids.
      importance: ``(n,)`` float64 importance scores (as given; may be 0).
      offset: ``(n,)`` float64 first-crawl time offsets (days); 0 for pages without a
        history row.
      intervals: ``(n, k)`` intervals between crawls (days), padded with 0.
      changed: ``(n, k)`` bool change indicators, padded with False.
      mask: ``(n, k)`` bool, True where an observation exists (left-aligned).
      num_observations: ``(n,)`` int64 observations per page.
      complete: ``(n,)`` bool, True for pages with complete change observations.
      complete_change_rate: ``(n,)`` float64 Poisson change rate of complete pages, NaN
        elsewhere.
      host_id: ``(n,)`` int64 host ids, -1 when unknown.
      host_constrained: ``(n,)`` bool, True when the page's host imposes a politeness
        constraint (False when unknown).
      report: the :class:`LoadReport`.
    """

    url_id: np.ndarray
    importance: np.ndarray
    offset: np.ndarray
    intervals: np.ndarray
    changed: np.ndarray
    mask: np.ndarray
    num_observations: np.ndarray
    complete: np.ndarray
    complete_change_rate: np.ndarray
    host_id: np.ndarray
    host_constrained: np.ndarray
    report: LoadReport


# The columns of the data set's files (one rule each, shared with every jaxcrawl table).
_URL_ID = Column("URL_ID", "integer")
_HOST_ID = Column("Host_ID", "integer")
_URL = Column("URL")
_HOST_URL = Column("Host_URL")
_IMPORTANCE = Column("importance", "number", minimum=0.0)
_OFFSET = Column("first-crawl offset", "number")
_CHANGE_RATE = Column("change rate", "number", minimum=0.0)
_CONSTRAINED = Column("Is_constrained", "binary")


def _looks_like_header(fields: list[str]) -> bool:
    low = [f.strip().lower().replace(" ", "_") for f in fields]
    return any(any(tok == f or f.startswith(tok) or f.endswith(tok) for tok in _HEADER_TOKENS) for f in low) and not any(
        _is_number(f) for f in fields
    )


def _is_number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def _stream(path: str, state: RowLog, num_fields: int,
            parse_row: Callable[[list[str], int], None]) -> None:
    """Read ``path`` line by line, calling ``parse_row(fields, lineno)`` on each data line."""
    with open(path, encoding="utf-8", errors="strict", newline="") as fh:
        lineno = 0
        while True:
            try:
                line = fh.readline()
            except UnicodeDecodeError as err:
                raise TableError(path, lineno + 1, f"not valid UTF-8 text ({err.reason})") from None
            if not line:
                break
            lineno += 1
            line = line.rstrip("\r\n")
            if not line.strip():
                state.blank += 1
                continue
            fields = line.split("\t")
            if lineno == 1 and state.header == 0 and len(fields) == num_fields and _looks_like_header(fields):
                state.header = 1
                continue
            try:
                if len(fields) != num_fields:
                    raise RowError(
                        "wrong number of fields",
                        f"expected {num_fields} tab-separated fields, got {len(fields)}",
                    )
                parse_row(fields, lineno)
            except RowError as err:
                state.bad(lineno, err)
                continue
            state.rows_read += 1


_NUMERIC_CHARS = str.maketrans("", "", "0123456789 \t[],.eE+-")


def _parse_history_strict(pairs, text: str) -> tuple[np.ndarray, np.ndarray]:
    """Entry-by-entry validation (slow path: precise error messages, odd inputs)."""
    if not isinstance(pairs, list):
        raise RowError("bad history", f"history must be a list, got {text[:60]!r}")
    intervals: list[float] = []
    changes: list[int] = []
    for j, pair in enumerate(pairs):
        if not (isinstance(pair, list) and len(pair) == 2):
            raise RowError("bad history", f"history entry {j} is not an [interval, change] pair: {pair!r}")
        w, z = pair
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not np.isfinite(w) or w <= 0:
            raise RowError("bad interval", f"history entry {j}: interval must be a finite number > 0, got {w!r}")
        if isinstance(z, bool) or z not in (0, 1):
            raise RowError("bad change indicator", f"history entry {j}: change indicator must be 0 or 1, got {z!r}")
        intervals.append(float(w))
        changes.append(int(z))
    return np.asarray(intervals, dtype=np.float64), np.asarray(changes, dtype=np.uint8)


def _parse_history(text: str) -> tuple[np.ndarray, np.ndarray]:
    """``[[interval, change], ...]`` -> (intervals float64, changes uint8), validated."""
    text = text.strip()
    try:
        pairs = json.loads(text)
    except ValueError:
        raise RowError("bad history", f"history is not a list of [interval, change] pairs: {text[:60]!r}") from None
    # Fast path: plain numbers only (no strings, booleans, null, NaN or Infinity), a
    # rectangular (k, 2) array, all values valid.  Anything else takes the strict path,
    # which names the offending entry.
    if isinstance(pairs, list) and not text.translate(_NUMERIC_CHARS):
        if not pairs:
            return np.zeros(0, np.float64), np.zeros(0, np.uint8)
        try:
            arr = np.array(pairs, dtype=np.float64)
        except (ValueError, TypeError):
            arr = None
        if arr is not None and arr.ndim == 2 and arr.shape[1] == 2:
            w, z = arr[:, 0], arr[:, 1]
            if np.all(np.isfinite(w) & (w > 0)) and np.all((z == 0) | (z == 1)):
                return w, z.astype(np.uint8)
    return _parse_history_strict(pairs, text)


def _dedupe(ids: np.ndarray, lines: np.ndarray, state: RowLog | None, what: str) -> np.ndarray:
    """Indices of the first occurrence of each id; later duplicates are malformed rows."""
    if ids.size == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    dup = np.zeros(ids.size, dtype=bool)
    dup[1:] = sorted_ids[1:] == sorted_ids[:-1]
    if dup.any():
        first_pos = np.maximum.accumulate(np.where(~dup, np.arange(ids.size), 0))
        for pos in np.flatnonzero(dup):
            i, j = order[pos], order[first_pos[pos]]
            err = RowError(f"duplicate {what}", f"duplicate {what} {int(ids[i])} (first at line {int(lines[j])})")
            state.rows_read -= 1
            state.bad(int(lines[i]), err)
    return np.sort(order[~dup])


# ------------------------------------------------------------------ vectorised reading
_INT_RE = r"^[0-9]{1,18}$"
_NUM = r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
_NUM_RE = r"^" + _NUM + r"$"
_PAIR = r"\[\s*" + _NUM + r"\s*,\s*" + _NUM + r"\s*\]"
_HISTORY_RE = r"^\s*\[\s*(?:" + _PAIR + r"(?:\s*,\s*" + _PAIR + r")*)?\s*\]\s*$"


def _pa():
    import pyarrow as pa
    import pyarrow.compute as pc

    return pa, pc


def _line_blocks(path: str, block_size: int, progress=None):
    """``(first_line_number, lines)`` blocks of a text file: ``lines`` an Arrow string array
    of whole lines without their line breaks, built from the bytes without Python per line.
    A block whose bytes are not valid UTF-8 is decoded line by line to name the line."""
    pa, pc = _pa()
    lineno = 1
    carry = b""
    with open(path, "rb") as fh:
        while True:
            data = fh.read(block_size)
            if progress is not None:
                progress.update(len(data))
            if not data:
                if carry:
                    data, carry = carry + b"\n", b""
                else:
                    return
            else:
                data, carry = carry + data, b""
                cut = data.rfind(b"\n")
                if cut < 0:
                    carry = data
                    continue
                data, carry = data[:cut + 1], data[cut + 1:]
            raw = np.frombuffer(data, np.uint8)
            ends = np.flatnonzero(raw == 10)
            n = ends.size
            offsets = np.empty(n + 1, np.int64)
            offsets[0] = 0
            offsets[1:] = ends + 1
            binary = pa.LargeBinaryArray.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(offsets),
                                                                              pa.py_buffer(data)])
            try:
                lines = pc.cast(binary, pa.large_string())
            except pa.ArrowInvalid:
                for i in range(n):
                    try:
                        bytes(data[offsets[i]:offsets[i + 1]]).decode("utf-8")
                    except UnicodeDecodeError as err:
                        raise TableError(path, lineno + i, f"not valid UTF-8 text ({err.reason})") from None
                raise
            yield lineno, pc.utf8_rtrim(lines, characters="\r\n")
            lineno += n


def _as_np(arr, dtype):
    return np.asarray(arr.to_numpy(zero_copy_only=False), dtype)


def _read_vectorised(path: str, state: RowLog, num_fields: int, kinds: tuple,
                     exact_row: Callable[[list[str], int], tuple | None], *,
                     block_size: int = 1 << 26, progress=None, hist_dtype=np.float64) -> list[list]:
    """Read a tab-separated file of ``num_fields`` fields in blocks, column-wise.

    ``kinds`` names each field's fast rule: ``"id"`` (a decimal integer; ``("id", col)``:
    also 0 or 1), ``("num", col)`` (a plain decimal number within ``col``'s rule),
    ``"text"`` (non-empty), ``"history"`` (a list of ``[interval, change]`` pairs).  Rows where every field passes are parsed
    by Arrow kernels; every other row (a wrong number of fields, an odd spelling, a value
    out of range) goes to ``exact_row(fields, line)`` -- the per-row parser with the exact
    messages -- which returns the row's values (or raises :class:`RowError`).  Returns the
    blocks' results: per block a tuple ``(lines, *columns)`` in line order, with a
    history column given as ``(lengths, intervals, changes)``.
    """
    pa, pc = _pa()
    rules = [k[1] if isinstance(k, tuple) else None for k in kinds]
    kinds = tuple(k[0] if isinstance(k, tuple) else k for k in kinds)
    out = []
    for first, lines in _line_blocks(path, block_size, progress):
        n = len(lines)
        line_no = np.arange(first, first + n, dtype=np.int64)
        keep = np.ones(n, bool)
        blank = _as_np(pc.equal(pc.utf8_length(pc.utf8_trim_whitespace(lines)), 0), bool)
        state.blank += int(blank.sum())
        keep &= ~blank
        if first == 1 and n and not blank[0] and state.header == 0:
            f0 = lines[0].as_py().split("\t")
            if len(f0) == num_fields and _looks_like_header(f0):
                state.header = 1
                keep[0] = False
        parts = pc.split_pattern(lines, "\t")
        list_offsets = np.frombuffer(parts.buffers()[1], np.int32 if parts.type == pa.list_(pa.large_string())
                                     else np.int64, n + 1, parts.offset) if n else np.zeros(1, np.int64)
        flat_fields = pc.list_flatten(parts)
        nfields = np.diff(list_offsets.astype(np.int64))
        fast = keep & (nfields == num_fields)
        # field j of every line (fields of lines with another count: a harmless stand-in)
        starts = np.where(fast, list_offsets[:-1], 0).astype(np.int64)
        cols: list = []
        hist = None
        for j, kind in enumerate(kinds):
            if kind == "skip":
                cols.append(None)
                continue
            field = pc.take(flat_fields, pa.array(np.where(fast, starts + j, 0)))
            if kind == "id":
                ok = _as_np(pc.match_substring_regex(pc.utf8_trim_whitespace(field), _INT_RE), bool)
                fast &= ok
                cols.append(field)
            elif kind == "num":
                ok = _as_np(pc.match_substring_regex(pc.utf8_trim_whitespace(field), _NUM_RE), bool)
                fast &= ok
                cols.append(field)
            elif kind == "text":
                fast &= _as_np(pc.greater(pc.utf8_length(pc.utf8_trim_whitespace(field)), 0), bool)
                cols.append(None)
            else:  # history
                fast &= _as_np(pc.match_substring_regex(field, _HISTORY_RE), bool)
                hist = (j, field)
                cols.append(None)
        fast_idx = np.flatnonzero(fast)
        sel = pa.array(fast_idx)
        values: list = []
        bad_rows = np.zeros(fast_idx.size, bool)
        for j, kind in enumerate(kinds):
            if kind == "id":
                v = _as_np(pc.cast(pc.utf8_trim_whitespace(pc.take(cols[j], sel)), pa.int64()), np.int64)
                if rules[j] is not None:
                    bad_rows |= (v != 0) & (v != 1)
            elif kind == "num":
                v = _as_np(pc.cast(pc.utf8_trim_whitespace(pc.take(cols[j], sel)), pa.float64()), np.float64)
                bad_rows |= ~rules[j]._ok(v)  # the column's rule; a failing row is parsed exactly
            else:
                v = None
            values.append(v)
        if bad_rows.any():
            fast[fast_idx[bad_rows]] = False
            values = [v[~bad_rows] if v is not None else None for v in values]
            fast_idx = fast_idx[~bad_rows]
            sel = pa.array(fast_idx)
        if hist is not None:
            j, field = hist
            pairs, flat = _history_numbers(pc.take(field, sel))
            w, z = flat[0::2], flat[1::2]
            good_obs = np.isfinite(w) & (w > 0) & ((z == 0) | (z == 1))
            row_of_obs = np.repeat(np.arange(fast_idx.size), pairs)
            bad_rows = np.zeros(fast_idx.size, bool)
            bad_rows[row_of_obs[~good_obs]] = True
            if bad_rows.any():  # a value out of range: the exact parser names the entry
                fast[fast_idx[bad_rows]] = False
                keep_obs = ~bad_rows[row_of_obs]
                w, z, pairs = w[keep_obs], z[keep_obs], pairs[~bad_rows]
                values = [v[~bad_rows] if v is not None else None for v in values]
                fast_idx = fast_idx[~bad_rows]
            values[j] = (pairs, w.astype(hist_dtype), z.astype(np.uint8))
        # the odd rows, one by one, in line order
        odd = np.flatnonzero(keep & ~fast)
        odd_vals: list[tuple] = []
        odd_lines: list[int] = []
        for i in odd.tolist():
            text = lines[i].as_py()
            fields = text.split("\t")
            try:
                if len(fields) != num_fields:
                    raise RowError("wrong number of fields",
                                   f"expected {num_fields} tab-separated fields, got {len(fields)}")
                row = exact_row(fields, int(line_no[i]))
            except RowError as err:
                state.bad(int(line_no[i]), err)
                continue
            odd_vals.append(row)
            odd_lines.append(int(line_no[i]))
        state.rows_read += int(fast_idx.size) + len(odd_lines)
        out.append(list(_merge_block(kinds, line_no[fast_idx], values, odd_lines, odd_vals)))
        del lines, parts, flat_fields, cols, field, hist
        _release_arrow_memory()
    return out


_COMMA_TO_NL = np.arange(256, dtype=np.uint8)
_COMMA_TO_NL[ord(",")] = 10
_KEEP_BYTE = np.ones(256, bool)
_KEEP_BYTE[[ord("["), ord("]"), ord(" "), ord("\t")]] = False


def _history_numbers(field) -> tuple[np.ndarray, np.ndarray]:
    """``(pairs per row, the numbers in row order)`` of well-formed histories (checked by
    ``_HISTORY_RE``), by byte surgery: brackets and blanks dropped, commas and each row's
    closing bracket turned into line breaks, and the tokens parsed by Arrow's CSV reader
    as one float column."""
    import io

    import pyarrow.csv as pcsv

    pa, pc = _pa()
    if not isinstance(field, pa.LargeStringArray):
        field = pc.cast(field, pa.large_string())
    n = len(field)
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0)
    offs = np.frombuffer(field.buffers()[1], np.int64, n + 1, field.offset)
    raw = np.frombuffer(field.buffers()[2], np.uint8)[offs[0]:offs[-1]]
    offs = offs - offs[0]
    nonempty_rows = offs[1:] > offs[:-1]
    if np.any(raw[(offs[1:] - 1)[nonempty_rows]] != ord("]")):  # trailing blanks: trim first
        return _history_numbers(pc.utf8_trim_whitespace(field))
    pairs = _as_np(pc.count_substring(field, "["), np.int64) - 1
    if not pairs.any():
        return np.maximum(pairs, 0), np.zeros(0)
    out = _COMMA_TO_NL[raw]  # one table lookup per byte
    out[offs[1:][pairs > 0] - 1] = 10  # each non-empty row's closing bracket ends its last token
    tokens = out[_KEEP_BYTE[out]]
    table = pcsv.read_csv(io.BytesIO(tokens.tobytes()),
                          read_options=pcsv.ReadOptions(column_names=["v"]),
                          parse_options=pcsv.ParseOptions(quote_char=False),
                          convert_options=pcsv.ConvertOptions(column_types={"v": pa.float64()}))
    vals = _as_np(table["v"], np.float64)
    return pairs, vals


def _merge_block(kinds, fast_lines, values, odd_lines, odd_vals):
    """One block's rows in line order: the fast rows and the exactly parsed odd ones."""
    if not odd_lines:
        return (fast_lines, *values)
    lines = np.concatenate([fast_lines, np.asarray(odd_lines, np.int64)])
    order = np.argsort(lines, kind="stable")
    merged = []
    for j, kind in enumerate(kinds):
        v = values[j]
        if kind in ("id", "num"):
            extra = np.asarray([r[j] for r in odd_vals], v.dtype)
            merged.append(np.concatenate([v, extra])[order])
        elif kind == "history":
            pairs, w, z = v
            ows = [r[j][0] for r in odd_vals]
            ozs = [r[j][1] for r in odd_vals]
            all_pairs = np.concatenate([pairs, np.asarray([len(a) for a in ows], np.int64)])
            all_w = np.concatenate([w] + [np.asarray(a, np.float64) for a in ows])
            all_z = np.concatenate([z] + [np.asarray(a, np.uint8) for a in ozs])
            starts = np.concatenate([[0], np.cumsum(all_pairs)[:-1]])
            p2 = all_pairs[order]
            idx = np.repeat(starts[order], p2) + (np.arange(int(p2.sum())) - np.repeat(np.cumsum(p2) - p2, p2))
            merged.append((p2, all_w[idx], all_z[idx]))
        else:
            merged.append(None)
    return (lines[order], *merged)


def _cat(blocks, k, dtype):
    """Column ``k`` of every block, concatenated; the blocks' own copies are dropped as it
    goes (``blocks`` holds lists), so the peak is the flat arrays plus one column."""
    parts = [b[k] for b in blocks]
    for b in blocks:
        b[k] = None
    out = np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype)
    del parts
    return out


def _release_arrow_memory() -> None:
    """Give the memory Arrow's allocator keeps for reuse back to the system."""
    pa, _ = _pa()
    pool = pa.default_memory_pool()
    if hasattr(pool, "release_unused"):
        pool.release_unused()


def load_crawl_dataset(
    directory: str | os.PathLike[str],
    *,
    errors: str = "raise",
    dtype: DTypeLike = np.float32,
    max_observations: int | None = None,
    quiet: bool = True,
    block_size: int = 1 << 26,
) -> CrawlDataset:
    """Load the NeurIPS-19 crawl-history data set (Kolobov et al. 2019, §6 and its public
    data release) from ``directory``.

    Pages are the URLs listed in ``urlid_imp.txt`` (sorted by URL_ID).  Their histories
    come from ``urlid_offset_history.txt`` (empty when a page has none), the
    complete-observation change rates from ``urlid_chrate_compl_obs_hist.txt``, host ids
    from ``url_urlid_hostid.txt`` and politeness flags from
    ``host_hostid_isconstrained.txt``.  The first two files are required; a missing
    optional file is listed in ``report.missing_files`` and its data reported as unknown.

    Every line is validated: the number of tab-separated fields; integer ids; finite
    numbers; importance and complete change rates >= 0; offsets finite; each history a
    list of ``[interval, change]`` pairs with interval > 0 and change 0 or 1; the
    constraint flag 0 or 1; no id twice in one file.  A first line made of column names
    is recognised as a header and skipped (counted in the report).  Blank lines are
    ignored (counted).

    Args:
      directory: the folder holding the files.
      errors: ``"raise"`` (default): the first malformed line raises ``ValueError``
        naming the file and line number.  ``"skip"``: malformed lines are skipped and
        counted by reason in the report (with up to 10 examples per file).
      dtype: floating dtype of the padded ``intervals`` (default float32, to keep the
        real data set's ~10^9 observations in memory).
      max_observations: keep at most this many of each page's *most recent*
        observations (the first-crawl offset is moved forward by the dropped intervals);
        cuts are counted in ``report.joins``.  Default: keep all.
      quiet: no progress bar (default True for the library; the command line shows one
        on a terminal).
      block_size: bytes read and parsed at a time (memory for reading is a few times it).

    Reading is column-wise (pyarrow kernels over blocks of lines, no Python per line):
    rows whose every field has the plain form (decimal ids and numbers, a well-formed
    list of pairs) are parsed in bulk; any other row goes through the exact per-row
    parser, so every message and count is as before.

    Returns:
      :class:`CrawlDataset`.

    Raises:
      ValueError: malformed line (``errors="raise"``; a
        :class:`~jaxcrawl.io.tables.TableError` naming the file and line), missing
        directory or required file, or bad arguments.
    """
    if errors not in ("raise", "skip"):
        raise ValueError(f"errors must be 'raise' or 'skip'; got {errors!r}")
    if max_observations is not None and (int(max_observations) != max_observations or max_observations < 1):
        raise ValueError(f"max_observations must be a positive integer or None; got {max_observations!r}")
    if not np.issubdtype(np.dtype(dtype), np.floating):
        raise ValueError(f"dtype must be a floating dtype; got {dtype!r}")
    directory = os.fspath(directory)
    if not os.path.isdir(directory):
        raise ValueError(f"{directory}: not a directory")
    paths = {role: os.path.join(directory, name) for role, name in FILES.items()}
    for role in _REQUIRED:
        if not os.path.isfile(paths[role]):
            raise ValueError(f"{paths[role]}: required file is missing")
    missing = tuple(FILES[r] for r in FILES if r not in _REQUIRED and not os.path.isfile(paths[r]))
    states: dict[str, RowLog] = {}

    total_bytes = sum(os.path.getsize(p) for p in paths.values() if os.path.isfile(p))
    bar = progress_bar(total_bytes, "loading data set", quiet=quiet, unit="B")
    h_w_dtype = np.float32 if np.dtype(dtype).itemsize <= 4 else np.float64
    read = functools.partial(_read_vectorised, block_size=block_size, progress=bar, hist_dtype=h_w_dtype)

    # --- importance ------------------------------------------------------------------
    st = states["importance"] = RowLog(paths["importance"], errors, _SKIP_HINT)
    blocks = read(paths["importance"], st, 2, ("id", ("num", _IMPORTANCE)),
                  lambda f, ln: (_URL_ID.parse(f[0]), _IMPORTANCE.parse(f[1])))
    imp_lines, imp_ids, imp_vals = (_cat(blocks, 0, np.int64), _cat(blocks, 1, np.int64),
                                    _cat(blocks, 2, np.float64))

    # --- histories -------------------------------------------------------------------
    st = states["history"] = RowLog(paths["history"], errors, _SKIP_HINT)
    blocks = read(paths["history"], st, 3, ("id", ("num", _OFFSET), "history"),
                  lambda f, ln: (_URL_ID.parse(f[0]), _OFFSET.parse(f[1]), _parse_history(f[2])))
    h_lines, h_ids, h_offsets = _cat(blocks, 0, np.int64), _cat(blocks, 1, np.int64), _cat(blocks, 2, np.float64)
    hist_parts = [b[3] for b in blocks]
    del blocks
    h_lens_a = np.concatenate([p[0] for p in hist_parts]) if hist_parts else np.zeros(0, np.int64)
    h_w_a = (np.concatenate([p[1].astype(h_w_dtype, copy=False) for p in hist_parts]) if hist_parts
             else np.zeros(0, h_w_dtype))
    h_z_a = np.concatenate([p[2] for p in hist_parts]) if hist_parts else np.zeros(0, np.uint8)
    del hist_parts

    # --- complete observations ---------------------------------------------------------
    c_ids_a, c_rates_a, c_lines_a = np.zeros(0, np.int64), np.zeros(0), np.zeros(0, np.int64)
    if os.path.isfile(paths["complete"]):
        st = states["complete"] = RowLog(paths["complete"], errors, _SKIP_HINT)
        blocks = read(paths["complete"], st, 2, ("id", ("num", _CHANGE_RATE)),
                      lambda f, ln: (_URL_ID.parse(f[0]), _CHANGE_RATE.parse(f[1])))
        c_lines_a, c_ids_a, c_rates_a = _cat(blocks, 0, np.int64), _cat(blocks, 1, np.int64), _cat(blocks, 2, np.float64)

    # --- url -> host -------------------------------------------------------------------
    u_ids_a, u_hosts_a, u_lines_a = np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    if os.path.isfile(paths["urls"]):
        st = states["urls"] = RowLog(paths["urls"], errors, _SKIP_HINT)

        def row_url(f, lineno):
            _URL.parse(f[0])
            return (None, _URL_ID.parse(f[1]), _HOST_ID.parse(f[2]))

        blocks = read(paths["urls"], st, 3, ("text", "id", "id"), row_url)
        u_lines_a, u_ids_a, u_hosts_a = _cat(blocks, 0, np.int64), _cat(blocks, 2, np.int64), _cat(blocks, 3, np.int64)

    # --- host constraints ----------------------------------------------------------------
    hc_ids_a, hc_flags_a, hc_lines_a = np.zeros(0, np.int64), np.zeros(0, np.uint8), np.zeros(0, np.int64)
    if os.path.isfile(paths["hosts"]):
        st = states["hosts"] = RowLog(paths["hosts"], errors, _SKIP_HINT)

        def row_host(f, lineno):
            _HOST_URL.parse(f[0])
            return (None, _HOST_ID.parse(f[1]), int(_CONSTRAINED.parse(f[2])))

        blocks = read(paths["hosts"], st, 3, ("text", "id", ("id", _CONSTRAINED)), row_host)
        hc_lines_a, hc_ids_a = _cat(blocks, 0, np.int64), _cat(blocks, 2, np.int64)
        hc_flags_a = _cat(blocks, 3, np.int64).astype(np.uint8)
    bar.close()

    # --- duplicates (raise or skip like any malformed line) ----------------------------------
    keep = _dedupe(imp_ids, imp_lines, states["importance"], "URL_ID")
    imp_ids_a, imp_vals_a = imp_ids[keep], imp_vals[keep]
    h_ids_a, h_off_a = h_ids, h_offsets
    h_keep = _dedupe(h_ids_a, h_lines, states["history"], "URL_ID")
    if "complete" in states:
        keep = _dedupe(c_ids_a, c_lines_a, states["complete"], "URL_ID")
        c_ids_a, c_rates_a = c_ids_a[keep], c_rates_a[keep]
    if "urls" in states:
        keep = _dedupe(u_ids_a, u_lines_a, states["urls"], "URL_ID")
        u_ids_a, u_hosts_a = u_ids_a[keep], u_hosts_a[keep]
    if "hosts" in states:
        keep = _dedupe(hc_ids_a, hc_lines_a, states["hosts"], "Host_ID")
        hc_ids_a, hc_flags_a = hc_ids_a[keep], hc_flags_a[keep]

    # --- join on URL_ID ------------------------------------------------------------------
    order = np.argsort(imp_ids_a, kind="stable")
    url_id = imp_ids_a[order]
    importance = imp_vals_a[order]
    n = url_id.size
    joins: dict[str, int] = {}

    def lookup(keys):
        """Page index of each key, -1 where the key is not a page."""
        pos = np.searchsorted(url_id, keys)
        pos_c = np.minimum(pos, max(n - 1, 0))
        found = (pos < n) & (url_id[pos_c] == keys) if n else np.zeros(keys.shape, bool)
        return np.where(found, pos_c, -1)

    # histories
    row_start = np.concatenate([[0], np.cumsum(h_lens_a)])[:-1].astype(np.int64) if h_lens_a.size else np.zeros(0, np.int64)
    page_of_row = np.full(h_ids_a.size, -1, dtype=np.int64)
    page_of_row[h_keep] = lookup(h_ids_a[h_keep])
    joins["history_without_importance"] = int(np.sum(page_of_row[h_keep] < 0))
    used = page_of_row >= 0
    lengths = np.zeros(n, dtype=np.int64)
    lengths[page_of_row[used]] = h_lens_a[used]
    offset = np.zeros(n, dtype=np.float64)
    offset[page_of_row[used]] = h_off_a[used]
    has_history = np.zeros(n, dtype=bool)
    has_history[page_of_row[used]] = True
    joins["pages_without_history"] = int(n - has_history.sum())

    # scatter the observations into the padded arrays, rows in blocks (bounded temporaries)
    if max_observations is not None:
        first_kept = np.maximum(lengths - int(max_observations), 0)
        joins["truncated_histories"] = int(np.sum(lengths > max_observations))
    else:
        first_kept = np.zeros(n, np.int64)
        joins["truncated_histories"] = 0
    kept_len = lengths - first_kept
    k = int(kept_len.max()) if n else 0
    intervals = np.zeros((n, k), dtype=dtype)
    changed = np.zeros((n, k), dtype=bool)
    mask = np.zeros((n, k), dtype=bool)
    dropped_total = 0
    rows_per_block = 1 << 20
    for r0 in range(0, h_ids_a.size, rows_per_block):
        r1 = min(r0 + rows_per_block, h_ids_a.size)
        lens = h_lens_a[r0:r1]
        pages = page_of_row[r0:r1]
        base = row_start[r0] if r1 > r0 else 0
        m = int(lens.sum())
        obs_row = np.repeat(np.arange(r1 - r0), lens)
        obs_col = np.arange(m) - np.repeat(np.cumsum(lens) - lens, lens)
        obs_page = pages[obs_row]
        w_blk = h_w_a[base:base + m]
        z_blk = h_z_a[base:base + m]
        sel = obs_page >= 0
        obs_page, obs_col, w_blk, z_blk = obs_page[sel], obs_col[sel], w_blk[sel], z_blk[sel]
        fk = first_kept[obs_page]
        dropped = obs_col < fk
        if dropped.any():
            offset += np.bincount(obs_page[dropped], weights=w_blk[dropped].astype(np.float64), minlength=n)
            dropped_total += int(dropped.sum())
        kp = ~dropped
        col = obs_col[kp] - fk[kp]
        intervals[obs_page[kp], col] = w_blk[kp]
        changed[obs_page[kp], col] = z_blk[kp].astype(bool)
        mask[obs_page[kp], col] = True
    joins["dropped_observations"] = dropped_total
    lengths = kept_len

    # complete observations
    complete = np.zeros(n, dtype=bool)
    complete_rate = np.full(n, np.nan, dtype=np.float64)
    cpage = lookup(c_ids_a)
    joins["complete_without_importance"] = int(np.sum(cpage < 0))
    complete[cpage[cpage >= 0]] = True
    complete_rate[cpage[cpage >= 0]] = c_rates_a[cpage >= 0]

    # hosts
    host_id = np.full(n, -1, dtype=np.int64)
    upage = lookup(u_ids_a)
    host_id[upage[upage >= 0]] = u_hosts_a[upage >= 0]
    joins["pages_without_host"] = int(np.sum(host_id < 0))
    host_constrained = np.zeros(n, dtype=bool)
    known = host_id >= 0
    if hc_ids_a.size:
        horder = np.argsort(hc_ids_a)
        hs, hf = hc_ids_a[horder], hc_flags_a[horder]
        pos = np.searchsorted(hs, host_id)
        pos_c = np.minimum(pos, hs.size - 1)
        found = known & (pos < hs.size) & (hs[pos_c] == host_id)
        host_constrained[found] = hf[pos_c[found]].astype(bool)
    else:
        found = np.zeros(n, dtype=bool)
    joins["hosts_without_constraint_row"] = int(np.sum(known & ~found))

    report = LoadReport({role: s.report() for role, s in states.items()}, missing, joins)
    return CrawlDataset(
        url_id=url_id,
        importance=importance,
        offset=offset,
        intervals=intervals,
        changed=changed,
        mask=mask,
        num_observations=lengths,
        complete=complete,
        complete_change_rate=complete_rate,
        host_id=host_id,
        host_constrained=host_constrained,
        report=report,
    )
