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

from .._src.fileio import progress_bar
from ._schema import Column, FileReport, RowError, RowLog, TableError

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
      FILES: (class attribute) the data set's file names, by role.
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

    #: The data set's file names, by role (``urls``, ``hosts``, ``importance``,
    #: ``history``, ``complete``).
    FILES = FILES


# The columns of the data set's files (one rule each, shared with every jaxcrawl table).
_URL_ID = Column("URL_ID", "integer")
_HOST_ID = Column("Host_ID", "integer")
_URL = Column("URL", strip=True)
_HOST_URL = Column("Host_URL", strip=True)
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


def _duplicates(ids: np.ndarray, lines: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(keep, repeats)``: the indices of the first occurrence of each id (ascending), and a
    ``(k, 3)`` array of ``(id, line, first line)`` for every later occurrence."""
    if ids.size == 0 or np.all(ids[1:] > ids[:-1]):  # sorted without repeats: the usual file
        return np.arange(ids.size), np.zeros((0, 3), np.int64)
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    dup = np.zeros(ids.size, dtype=bool)
    dup[1:] = sorted_ids[1:] == sorted_ids[:-1]
    first_pos = np.maximum.accumulate(np.where(~dup, np.arange(ids.size), 0))
    later = np.flatnonzero(dup)
    repeats = np.stack([ids[order[later]], lines[order[later]], lines[order[first_pos[later]]]], axis=1)
    return np.sort(order[~dup]), repeats.astype(np.int64)


def _report_repeats(repeats: np.ndarray, state: RowLog, what: str) -> None:
    """Each repeated id as a malformed row, in the order of the ids (then of the lines)."""
    if not repeats.size:
        return
    repeats = repeats[np.lexsort((repeats[:, 1], repeats[:, 0]))]
    for i, line, first in repeats.tolist():
        state.rows_read -= 1
        state.bad(int(line), RowError(f"duplicate {what}", f"duplicate {what} {int(i)} (first at line {int(first)})"))


def _dedupe(ids: np.ndarray, lines: np.ndarray, state: RowLog | None, what: str) -> np.ndarray:
    """Indices of the first occurrence of each id; later duplicates are malformed rows."""
    keep, repeats = _duplicates(ids, lines)
    _report_repeats(repeats, state, what)
    return keep


def _scatter_histories(blocks, n: int, lookup, dtype, max_observations: int | None, state: RowLog) -> tuple:
    """The history file's blocks, each scattered into the padded arrays as it is read (so the
    file's observations are never held twice).  The width grows when a longer history
    appears (a copy; the first block usually sets it).  A URL_ID seen before -- in this
    block or an earlier one -- is a duplicate (the first wins), reported with the others
    once the file is read.  Returns ``(lengths, offset, intervals, changed, mask, joins)``."""
    first_line = np.zeros(n, np.int64)  # line of each page's history row; 0: none (yet)
    lengths = np.zeros(n, np.int64)
    offset = np.zeros(n, np.float64)
    intervals = np.zeros((n, 0), dtype)
    changed = np.zeros((n, 0), bool)
    mask = np.zeros((n, 0), bool)
    strays: list[tuple] = []  # (ids, lines) of rows whose URL_ID is not a page
    repeats: list[np.ndarray] = []
    truncated = dropped_total = 0
    for lines, ids, offs, (pairs, w, z) in blocks:
        page = lookup(ids)
        stray = page < 0
        if stray.any():
            strays.append((ids[stray], lines[stray]))
        rows = np.flatnonzero(~stray)
        pg = page[rows]
        keep, rep = _duplicates(pg, lines[rows])  # repeats within the block, by page
        if rep.size:  # name them by URL_ID (the block's lines are ascending)
            rep[:, 0] = ids[rows][np.searchsorted(lines[rows], rep[:, 1])]
            repeats.append(rep)
        rows, pg = rows[keep], pg[keep]
        earlier = first_line[pg] > 0  # repeats of an earlier block's row
        if earlier.any():
            repeats.append(np.stack([ids[rows[earlier]], lines[rows[earlier]], first_line[pg[earlier]]], axis=1))
            rows, pg = rows[~earlier], pg[~earlier]
        p = pairs[rows]
        first_line[pg] = lines[rows]
        offset[pg] = offs[rows]
        first_kept = np.maximum(p - int(max_observations), 0) if max_observations is not None else np.zeros_like(p)
        truncated += int(np.count_nonzero(first_kept))
        kept = p - first_kept
        lengths[pg] = kept
        need = int(kept.max()) if kept.size else 0
        if need > intervals.shape[1]:
            old = intervals.shape[1]
            intervals = np.concatenate([intervals, np.zeros((n, need - old), dtype)], axis=1)
            changed = np.concatenate([changed, np.zeros((n, need - old), bool)], axis=1)
            mask = np.concatenate([mask, np.zeros((n, need - old), bool)], axis=1)
        # the observations of the accepted rows
        if rows.size == pairs.size and p.size and np.all(p == p[0]) and not first_kept.any():
            k = int(p[0])  # every row kept whole, all of one length (a machine-written file):
            if k:          # whole rows at once instead of one observation at a time
                intervals[pg, :k] = w.reshape(-1, k)
                changed[pg, :k] = z.reshape(-1, k).astype(bool)
                mask[pg, :k] = True
            continue
        obs_start = np.zeros(pairs.size, np.int64)
        np.cumsum(pairs[:-1], out=obs_start[1:])
        total = int(p.sum())
        obs_row = np.repeat(np.arange(rows.size), p)
        col = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(p) - p, p)
        src = np.repeat(obs_start[rows], p) + col
        obs_page = pg[obs_row]
        fk = first_kept[obs_row]
        dropped = col < fk
        if dropped.any():
            offset += np.bincount(obs_page[dropped], weights=w[src[dropped]].astype(np.float64), minlength=n)
            dropped_total += int(dropped.sum())
            kp = ~dropped
            obs_page, col, src, fk = obs_page[kp], col[kp], src[kp], fk[kp]
        col = col - fk
        intervals[obs_page, col] = w[src]
        changed[obs_page, col] = z[src].astype(bool)
        mask[obs_page, col] = True
        del obs_row, col, src, obs_page, fk, dropped
    stray_ids = np.concatenate([a for a, _ in strays]) if strays else np.zeros(0, np.int64)
    stray_lines = np.concatenate([b for _, b in strays]) if strays else np.zeros(0, np.int64)
    keep, rep = _duplicates(stray_ids, stray_lines)
    if rep.size:
        repeats.append(rep)
    _report_repeats(np.concatenate(repeats) if repeats else np.zeros((0, 3), np.int64), state, "URL_ID")
    joins = {"history_without_importance": int(keep.size),
             "pages_without_history": int(n - np.count_nonzero(first_line)),
             "truncated_histories": truncated, "dropped_observations": dropped_total}
    return lengths, offset, intervals, changed, mask, joins


# ------------------------------------------------------------------ vectorised reading
_INT_RE = r"^[0-9]{1,18}$"
_NUM = r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
_NUM_RE = r"^" + _NUM + r"$"
_JSON_NUM = r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?"  # a history is JSON: its numbers too
_PAIR = r"\[\s*" + _JSON_NUM + r"\s*,\s*" + _JSON_NUM + r"\s*\]"
_HISTORY_RE = r"^\s*\[\s*(?:" + _PAIR + r"(?:\s*,\s*" + _PAIR + r")*)?\s*\]\s*$"


def _pa():
    import pyarrow as pa
    import pyarrow.compute as pc

    return pa, pc


def _line_blocks(path: str, block_size: int, progress=None):
    """``(first_line_number, raw, ends)`` blocks of a text file: ``raw`` the block's bytes
    (uint8, whole lines, each ending in a line feed) and ``ends`` the positions of its line
    feeds.  :func:`_block_lines` makes Arrow lines of them when they are needed."""
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
            yield lineno, raw, ends
            lineno += ends.size


def _block_lines(path: str, first: int, raw: np.ndarray, ends: np.ndarray, idx: np.ndarray | None = None):
    """The lines ``idx`` (default: all) of a block as an Arrow string array without their
    line breaks, built from the bytes without Python per line.  Bytes that are not valid
    UTF-8 raise naming the line."""
    pa, pc = _pa()
    n = ends.size
    offsets = np.empty(n + 1, np.int64)
    offsets[0] = 0
    offsets[1:] = ends + 1
    binary = pa.LargeBinaryArray.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(offsets),
                                                                      pa.py_buffer(raw)])
    if idx is not None:
        binary = pc.take(binary, pa.array(idx))
    try:
        lines = pc.cast(binary, pa.large_string())
    except pa.ArrowInvalid:
        rows = np.arange(n) if idx is None else np.asarray(idx)
        for i in rows.tolist():
            try:
                raw[offsets[i]:offsets[i + 1]].tobytes().decode("utf-8")
            except UnicodeDecodeError as err:
                raise TableError(path, first + i, f"not valid UTF-8 text ({err.reason})") from None
        raise
    return pc.utf8_rtrim(lines, characters="\r\n")


def _as_np(arr, dtype):
    return np.asarray(arr.to_numpy(zero_copy_only=False), dtype)


_MAX_PLAIN_ID_DIGITS = 15  # a decimal integer of at most 15 digits is exact in float64

# The separators of plain lines (what lies between two numbers), by type, and the roles of
# the numbers: a number's role is fixed by the separator before it, and the pair of
# separators around each number is checked against its role -- a local grammar, so the
# whole block is checked with a few array operations and no per-line state.
_SEP_NONE, _SEP_START, _SEP_NL, _SEP_TAB, _SEP_OPEN, _SEP_EMPTY, _SEP_COMMA, _SEP_NEXT, _SEP_CLOSE = range(9)
_SEPARATORS = {
    _SEP_NL: ("\n", "\r\n"),
    _SEP_TAB: ("\t",),
    _SEP_OPEN: ("\t[[", "\t[ ["),           # the history's first pair opens
    _SEP_EMPTY: ("\t[]\n", "\t[]\r\n"),     # an empty history ends the line
    _SEP_COMMA: (", ", ","),                 # inside a pair
    _SEP_NEXT: ("], [", "],[", "] ,["),      # between pairs
    _SEP_CLOSE: ("]]\n", "]]\r\n", "] ]\n"),  # the last pair and the history close, the line ends
}
_SEP_BYTES = 7
_LOW_BYTES = np.array([(1 << (8 * k)) - 1 for k in range(9)], np.uint64)  # masks of the k low bytes


def _sep_code(text: str) -> int:
    raw = text.encode()
    return sum(b << (8 * j) for j, b in enumerate(raw)) | (len(raw) << 56)


_SEP_CODES = np.array(sorted((_sep_code(t), k) for k, ts in _SEPARATORS.items() for t in ts), np.uint64)
_SEP_CODE = np.ascontiguousarray(_SEP_CODES[:, 0])
_SEP_TYPE = _SEP_CODES[:, 1].astype(np.int8)
_LINE_ENDS = (_SEP_START, _SEP_NL, _SEP_EMPTY, _SEP_CLOSE)


def _role_table(has_hist: bool) -> np.ndarray:
    """``table[prev, next]``: the role (1 id, 2 number, 3 interval, 4 change) of a number
    between separators of those types, 0 when that pair cannot surround a number."""
    t = np.zeros((9, 9), np.int8)
    for prev in _LINE_ENDS:
        t[prev, _SEP_TAB] = 1
    for nxt in ((_SEP_OPEN, _SEP_EMPTY) if has_hist else (_SEP_NL,)):
        t[_SEP_TAB, nxt] = 2
    if has_hist:
        for prev in (_SEP_OPEN, _SEP_NEXT):
            t[prev, _SEP_COMMA] = 3
        for nxt in (_SEP_NEXT, _SEP_CLOSE):
            t[_SEP_COMMA, nxt] = 4
    return t


_ROLES = {False: _role_table(False), True: _role_table(True)}


def _parse_tokens(stream: np.ndarray) -> np.ndarray:
    """The numbers of a byte stream of plain decimals separated by line feeds (Arrow's CSV
    reader: C++, correctly rounded; empty lines skipped)."""
    import io

    import pyarrow.csv as pcsv

    pa, _ = _pa()
    if stream.size == 0:
        return np.zeros(0)
    table = pcsv.read_csv(io.BytesIO(memoryview(stream)),
                          read_options=pcsv.ReadOptions(column_names=["v"]),
                          parse_options=pcsv.ParseOptions(quote_char=False, ignore_empty_lines=True),
                          convert_options=pcsv.ConvertOptions(column_types={"v": pa.float64()}))
    return _as_np(table["v"], np.float64)


def _select_lines(flags: np.ndarray, starts: np.ndarray, ends: np.ndarray, size: int) -> np.ndarray:
    """A byte mask: True on the bytes (line feed included) of the lines where ``flags``."""
    idx = np.flatnonzero(flags)
    if idx.size * 8 < flags.size:
        out = np.zeros(size, bool)
        for i in idx.tolist():
            out[starts[i]:ends[i] + 1] = True
        return out
    return np.repeat(flags, ends - starts + 1)


def _has_dot_or_minus(padded: np.ndarray, start: np.ndarray, length: np.ndarray) -> np.ndarray:
    """Whether each run ``padded[start:start + length]`` (length <= 16) holds a '.' or a '-':
    two 8-byte words per run, each byte compared at once (a zero-byte test on the word
    XOR the byte; a false hit can only sit above a true one, so within the run's bytes the
    answer is exact)."""
    window = np.ndarray((padded.size - 7,), dtype="<u8", buffer=padded, strides=(1,))
    ones, highs = np.uint64(0x0101010101010101), np.uint64(0x8080808080808080)
    hit = np.zeros(start.size, bool)
    for half in (0, 1):
        word = window[start + 8 * half]
        keep = _LOW_BYTES[np.clip(length - 8 * half, 0, 8)]
        for byte in (0x2E, 0x2D):
            y = word ^ (ones * np.uint64(byte))
            hit |= ((y - ones) & ~y & highs & keep) != 0
    return hit


def _json_numbers(raw: np.ndarray, ts: np.ndarray, te: np.ndarray) -> np.ndarray:
    """Whether each run ``raw[ts:te]`` of digits, '.' and '-' can be a JSON number as far as
    its first and last bytes tell: no '.' first (after a '-') or last, no leading zero
    before a digit (the rest of the grammar is :func:`_bad_numbers`')."""
    last = raw.size - 1
    neg = raw[ts] == 45
    lead = np.where(neg, raw[np.minimum(ts + 1, last)], raw[ts])
    after = raw[np.minimum(ts + 1 + neg, last)]
    more = te - ts > 1 + neg
    zero_digit = (lead == 48) & more & ((after - np.uint8(48)) < 10)
    return ~((lead == 46) | (raw[te - 1] == 46) | zero_digit)


def _bad_numbers(raw: np.ndarray, ts: np.ndarray, te: np.ndarray) -> np.ndarray:
    """Numbers (runs of digits, '.' and '-') that are not -?digits[.digits] or -?.digits."""
    tlen = te - ts
    dots = np.zeros(ts.size, np.int64)
    dpos = np.flatnonzero(raw == 46)
    if dpos.size:
        np.add.at(dots, np.searchsorted(ts, dpos, side="right") - 1, 1)
    minus = np.zeros(ts.size, np.int64)
    bad = np.zeros(ts.size, bool)
    mpos = np.flatnonzero(raw == 45)
    if mpos.size:
        owner = np.searchsorted(ts, mpos, side="right") - 1
        np.add.at(minus, owner, 1)
        bad[owner[mpos != ts[owner]]] = True  # a '-' inside a number
    return bad | (dots > 1) | (tlen - dots - minus < 1)


def _plain_numbers(raw, ends, starts, isnum, ts, te, role, bad) -> tuple:
    """``(plain, role, values)``: the plain lines (a number in each, none refused), the roles
    of their numbers and the numbers, parsed (every other byte a line feed; one-digit
    numbers -- the change indicators -- read straight from their byte)."""
    n = ends.size
    if bad.any() or np.count_nonzero(role == 1) != n:
        tline = np.searchsorted(ends, ts)
        plain = np.bincount(tline, minlength=n) > 0  # lines without a number are not plain
        plain[tline[bad]] = False
        keep = plain[tline]
        role, ts, te = role[keep], ts[keep], te[keep]
    else:
        plain = np.ones(n, bool)
    digit = raw[ts] - np.uint8(48)
    one = (te - ts == 1) & (digit < 10)
    # the stream Arrow parses: each longer number's bytes and one line feed after it
    keep = isnum.copy()
    keep[ts[one]] = False
    keep[te[~one]] = True
    if not plain.all():  # lines that are not plain are left out
        keep &= _select_lines(plain, starts, ends, raw.size)
    stream = np.where(isnum, raw, np.uint8(10))[keep]
    vals = np.empty(ts.size)
    vals[one] = digit[one]
    vals[~one] = _parse_tokens(stream)
    return plain, role, vals


def _plain_rows(raw: np.ndarray, ends: np.ndarray, kinds: tuple, rules: list, hist_dtype) -> tuple:
    """The block's *plain* lines, parsed from the bytes in a few array passes.

    For files of ``id <TAB> number`` or ``id <TAB> number <TAB> [[w, z], ...]`` lines.  A
    line is plain when its numbers are separated exactly as JSON writes them (``", "`` or
    ``","`` inside a pair, ``"], ["`` between pairs; LF or CRLF line ends), its id is a
    decimal integer of at most 15 digits, its numbers have the form ``-?digits[.digits]``
    (or ``.digits``), and every value is within its rule.  Any other line (a header, a
    blank line, an exponent, a ``+`` sign, other blanks, a value out of range, text that
    is not ASCII, ...) is not plain and is left to the general path, which accepts every
    valid spelling and names the line of any error.  Returns ``(plain, values)``: a bool
    per line, and per field the plain lines' values (int64 ids, float64 numbers,
    ``(pairs, w, z)`` for a history).

    Work: three comparisons per byte, one scan for the number boundaries, one for the
    byte stream Arrow parses; everything else is per number.
    """
    n = ends.size
    has_hist = len(kinds) == 3
    isnum = ((raw - np.uint8(48)) < 10) | (raw == 46) | (raw == 45)  # digits, '.', '-'
    edges = np.flatnonzero(isnum[1:] != isnum[:-1]) + 1
    if isnum[0]:
        edges = np.concatenate([[0], edges])
    ts, te = edges[0::2], edges[1::2]  # the block ends in a line feed: every number ends
    del edges
    nt = ts.size
    # each separator's type from its bytes (up to _SEP_BYTES): the run after every number
    sep_start = te
    sep_len = np.empty(nt, np.int64)
    sep_len[:-1] = ts[1:] - te[:-1]
    if nt:
        sep_len[-1] = raw.size - te[-1]
    # eight bytes from each separator's start at once (an unaligned uint64 view of the
    # bytes), cut to the separator's length
    padded = np.concatenate([raw, np.zeros(16, np.uint8)])
    window = np.ndarray((raw.size + 1,), dtype="<u8", buffer=padded, strides=(1,))
    length = np.minimum(sep_len, _SEP_BYTES)  # longer runs keep a length no separator has
    code = (window[sep_start] & _LOW_BYTES[length]) | (length.astype(np.uint64) << np.uint64(56))
    del window, length
    pos = np.minimum(np.searchsorted(_SEP_CODE, code), _SEP_CODE.size - 1)
    after = np.where(_SEP_CODE[pos] == code, _SEP_TYPE[pos], np.int8(_SEP_NONE))
    del code, pos
    before = np.empty(nt, np.int8)
    before[1:] = after[:-1]
    if nt:
        # the first number starts its line when nothing or a line feed is right before it
        before[0] = _SEP_START if ts[0] == 0 or raw[ts[0] - 1] == 10 else _SEP_NONE
    role = _ROLES[has_hist][before, after]
    del before, after
    # ids: digits only, at most 15 (eight bytes at a time); other numbers' grammar is left
    # to Arrow's parser, which accepts exactly -?digits[.digits] or -?.digits over these
    # bytes -- and if it refuses a number, the block is checked number by number
    bad = role == 0
    ident = np.flatnonzero(role == 1)
    id_len = te[ident] - ts[ident]
    bad[ident[(id_len > _MAX_PLAIN_ID_DIGITS) | _has_dot_or_minus(padded, ts[ident], id_len)]] = True
    hist = np.flatnonzero(role >= 3)  # a history's numbers are JSON numbers (what the exact parser reads)
    bad[hist[~_json_numbers(raw, ts[hist], te[hist])]] = True
    del ident, id_len, padded
    starts = np.empty(n, np.int64)
    starts[:1] = 0
    starts[1:] = ends[:-1] + 1
    try:
        plain, role, vals = _plain_numbers(raw, ends, starts, isnum, ts, te, role, bad)
    except _pa()[0].ArrowInvalid:
        bad |= _bad_numbers(raw, ts, te)
        plain, role, vals = _plain_numbers(raw, ends, starts, isnum, ts, te, role, bad)
    del isnum, ts, te, bad
    lines_idx = np.flatnonzero(plain)
    m = lines_idx.size
    first = np.flatnonzero(role == 1)
    ids = vals[first].astype(np.int64)
    num = vals[first + 1]
    bad_line = ~rules[1]._ok(num)
    values: list = [ids, num]
    if has_hist:
        nxt = np.append(first[1:], role.size)
        p = (nxt - first - 2) // 2
        w, z = vals[role == 3], vals[role == 4]
        bad_obs = ~(np.isfinite(w) & (w > 0) & ((z == 0) | (z == 1)))
        if bad_obs.any():
            bad_line[np.repeat(np.arange(m), p)[bad_obs]] = True
        values.append((p, w, z))
    if bad_line.any():  # values out of range: the general path names them
        plain[lines_idx[bad_line]] = False
        ok = ~bad_line
        values[0], values[1] = ids[ok], num[ok]
        if has_hist:
            keep_obs = np.repeat(ok, p)
            values[2] = (p[ok], w[keep_obs], z[keep_obs])
    if has_hist:
        p, w, z = values[2]
        values[2] = (p, w.astype(hist_dtype), z.astype(np.uint8))
    return plain, values


def _arrow_rows(lines, line_no: np.ndarray, state: RowLog, num_fields: int, kinds: tuple, rules: list,
                exact_row: Callable[[list[str], int], tuple | None], hist_dtype) -> list:
    """The general path over some lines of a block (Arrow kernels per field; the exact per-row
    parser for odd rows).  Returns ``[(lines, values), ...]`` parts (see :func:`_merge_parts`)."""
    pa, pc = _pa()
    n = len(lines)
    keep = np.ones(n, bool)
    blank = _as_np(pc.equal(pc.utf8_length(pc.utf8_trim_whitespace(lines)), 0), bool)
    state.blank += int(blank.sum())
    keep &= ~blank
    if n and line_no[0] == 1 and not blank[0] and state.header == 0:
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
    return [(line_no[fast_idx], values), (np.asarray(odd_lines, np.int64), _rows_to_values(kinds, values, odd_vals))]


def _rows_to_values(kinds, like, rows):
    """Per-row tuples of the exact parser -> per-field values (as the bulk paths give)."""
    out: list = []
    for j, kind in enumerate(kinds):
        if kind in ("id", "num"):
            out.append(np.asarray([r[j] for r in rows], np.int64 if kind == "id" else np.float64))
        elif kind == "history":
            hd = like[j][1].dtype if like[j] is not None else np.float64
            ws = [np.asarray(r[j][0], hd) for r in rows]
            out.append((np.asarray([a.size for a in ws], np.int64),
                        np.concatenate(ws) if ws else np.zeros(0, hd),
                        np.concatenate([np.asarray(r[j][1], np.uint8) for r in rows]) if rows
                        else np.zeros(0, np.uint8)))
        else:
            out.append(None)
    return out


def _merge_parts(kinds, parts):
    """``(lines, *values)`` of the parts' rows together, in line order (each part's rows are
    in line order; parts may interleave)."""
    nonempty = [p for p in parts if p[0].size]
    if len(nonempty) <= 1:
        lines, values = nonempty[0] if nonempty else parts[0]
        return (lines, *values)
    lines = np.concatenate([p[0] for p in nonempty])
    order = np.argsort(lines, kind="stable")
    merged = []
    for j, kind in enumerate(kinds):
        if kind in ("id", "num"):
            merged.append(np.concatenate([p[1][j] for p in nonempty])[order])
        elif kind == "history":
            all_pairs = np.concatenate([p[1][j][0] for p in nonempty])
            all_w = np.concatenate([p[1][j][1] for p in nonempty])
            all_z = np.concatenate([p[1][j][2] for p in nonempty])
            starts = np.concatenate([[0], np.cumsum(all_pairs)[:-1]]).astype(np.int64)
            p2 = all_pairs[order]
            idx = np.repeat(starts[order], p2) + (np.arange(int(p2.sum())) - np.repeat(np.cumsum(p2) - p2, p2))
            merged.append((p2, all_w[idx], all_z[idx]))
        else:
            merged.append(None)
    return (lines[order], *merged)


def _iter_vectorised(path: str, state: RowLog, num_fields: int, kinds: tuple,
                     exact_row: Callable[[list[str], int], tuple | None], *,
                     block_size: int = 1 << 24, progress=None, hist_dtype=np.float64):
    """Read a tab-separated file of ``num_fields`` fields in blocks, column-wise; yields each
    block's rows as ``[lines, *columns]`` in line order.

    ``kinds`` names each field's fast rule: ``"id"`` (a decimal integer; ``("id", col)``:
    also 0 or 1), ``("num", col)`` (a plain decimal number within ``col``'s rule),
    ``"text"`` (non-empty), ``"history"`` (a list of ``[interval, change]`` pairs).  Three
    tiers, each taking what the one before it left: for files of ids, numbers and a
    history, the plain lines are parsed straight from the bytes (:func:`_plain_rows`); the
    rest, and every line of a file with text fields, by Arrow kernels field by field when
    every field has a plain form; every other row (a wrong number of fields, an odd
    spelling, a value out of range) by ``exact_row(fields, line)`` -- the per-row parser
    with the exact messages -- which returns the row's values (or raises
    :class:`RowError`).  A history column is given as ``(lengths, intervals, changes)``.
    """
    rules = [k[1] if isinstance(k, tuple) else None for k in kinds]
    kinds = tuple(k[0] if isinstance(k, tuple) else k for k in kinds)
    bytes_path = kinds in (("id", "num"), ("id", "num", "history")) and rules[0] is None
    blocks = _line_blocks(path, block_size, progress)
    if bytes_path:  # the plain lines of the next blocks are parsed on the other cores meanwhile
        blocks = _ahead(blocks, lambda blk: _plain_rows(blk[1], blk[2], kinds, rules, hist_dtype)
                        if blk[2].size else None)
    else:
        blocks = ((blk, None) for blk in blocks)
    try:
        yield from _merge_blocks(path, blocks, state, num_fields, kinds, rules, exact_row, hist_dtype)
    finally:  # stop the readers ahead here and now (not whenever the generator is collected)
        blocks.close()


def _merge_blocks(path, blocks, state, num_fields, kinds, rules, exact_row, hist_dtype):
    """The rows of each block: the plain path's, then the general path's for the rest."""
    pa, pc = _pa()
    for (first, raw, ends), plain_values in blocks:
        n = ends.size
        line_no = np.arange(first, first + n, dtype=np.int64)
        parts = []
        rest = np.arange(n)
        if plain_values is not None:
            plain, values = plain_values
            state.rows_read += int(plain.sum())
            parts.append((line_no[plain], values))
            rest = np.flatnonzero(~plain)
        del plain_values
        if rest.size:  # Arrow lines only for what the plain path left
            sub = _block_lines(path, first, raw, ends, None if rest.size == n else rest)
            parts += _arrow_rows(sub, line_no[rest], state, num_fields, kinds, rules, exact_row, hist_dtype)
            del sub
        del raw, ends
        yield list(_merge_parts(kinds, parts))
        del parts
        _release_arrow_memory()


def _workers() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def _ahead(items, work):
    """``(item, work(item))`` in order, with ``work`` running on a thread pool up to one item
    per core ahead (numpy and Arrow release the GIL in their loops).  Bounded: at most that
    many items are held at once."""
    import collections
    from concurrent.futures import ThreadPoolExecutor

    depth = _workers()
    if depth == 1:
        for item in items:
            yield item, work(item)
        return
    pool = ThreadPoolExecutor(max_workers=depth, thread_name_prefix="jaxcrawl-load")
    pending: collections.deque = collections.deque()
    try:
        for item in items:
            pending.append((item, pool.submit(work, item)))
            if len(pending) >= depth:
                item0, fut = pending.popleft()
                yield item0, fut.result()
        while pending:
            item0, fut = pending.popleft()
            yield item0, fut.result()
    finally:  # an error or an early stop: drop the work not started, never wait on a worker
        pool.shutdown(wait=False, cancel_futures=True)


def _read_vectorised(*args, **kwargs) -> list[list]:
    """Every block of :func:`_iter_vectorised`, in a list."""
    return list(_iter_vectorised(*args, **kwargs))


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
    block_size: int = 1 << 24,
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
        :class:`~jaxcrawl.io.TableError` naming the file and line), missing
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

    keep = _dedupe(imp_ids, imp_lines, states["importance"], "URL_ID")
    del imp_lines
    imp_ids_a, imp_vals_a = imp_ids[keep], imp_vals[keep]
    del imp_ids, imp_vals, keep
    order = np.argsort(imp_ids_a, kind="stable") if not np.all(imp_ids_a[1:] > imp_ids_a[:-1]) else None
    url_id = imp_ids_a if order is None else imp_ids_a[order]
    importance = imp_vals_a if order is None else imp_vals_a[order]
    del imp_ids_a, imp_vals_a, order
    n = url_id.size
    joins: dict[str, int] = {}

    def lookup(keys):
        """Page index of each key, -1 where the key is not a page."""
        pos = np.searchsorted(url_id, keys)
        pos_c = np.minimum(pos, max(n - 1, 0))
        found = (pos < n) & (url_id[pos_c] == keys) if n else np.zeros(keys.shape, bool)
        return np.where(found, pos_c, -1)

    # --- histories, scattered block by block into the padded arrays --------------------
    st = states["history"] = RowLog(paths["history"], errors, _SKIP_HINT)
    blocks = _iter_vectorised(paths["history"], st, 3, ("id", ("num", _OFFSET), "history"),
                              lambda f, ln: (_URL_ID.parse(f[0]), _OFFSET.parse(f[1]), _parse_history(f[2])),
                              block_size=block_size, progress=bar, hist_dtype=h_w_dtype)
    histories = _scatter_histories(blocks, n, lookup, dtype, max_observations, st)

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
    if "complete" in states:
        keep = _dedupe(c_ids_a, c_lines_a, states["complete"], "URL_ID")
        c_ids_a, c_rates_a = c_ids_a[keep], c_rates_a[keep]
    if "urls" in states:
        keep = _dedupe(u_ids_a, u_lines_a, states["urls"], "URL_ID")
        u_ids_a, u_hosts_a = u_ids_a[keep], u_hosts_a[keep]
    if "hosts" in states:
        keep = _dedupe(hc_ids_a, hc_lines_a, states["hosts"], "Host_ID")
        hc_ids_a, hc_flags_a = hc_ids_a[keep], hc_flags_a[keep]

    lengths, offset, intervals, changed, mask, hist_joins = histories
    joins.update(hist_joins)

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
