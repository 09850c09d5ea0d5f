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

import json
import os
from array import array
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
from numpy.typing import DTypeLike

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


def load_crawl_dataset(
    directory: str | os.PathLike[str],
    *,
    errors: str = "raise",
    dtype: DTypeLike = np.float32,
    max_observations: int | None = None,
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

    # --- importance ------------------------------------------------------------------
    st = states["importance"] = RowLog(paths["importance"], errors, _SKIP_HINT)
    imp_ids, imp_vals, imp_lines = array("q"), array("d"), array("q")

    def row_importance(f, lineno):
        uid = _URL_ID.parse(f[0])
        v = _IMPORTANCE.parse(f[1])
        imp_ids.append(uid)
        imp_vals.append(v)
        imp_lines.append(lineno)

    _stream(paths["importance"], st, 2, row_importance)

    # --- histories -------------------------------------------------------------------
    st = states["history"] = RowLog(paths["history"], errors, _SKIP_HINT)
    h_ids, h_offsets, h_lens, h_lines = array("q"), array("d"), array("q"), array("q")
    h_w = array("f" if np.dtype(dtype).itemsize <= 4 else "d")
    h_z = array("B")
    h_w_dtype = np.float32 if h_w.typecode == "f" else np.float64

    def row_history(f, lineno):
        uid = _URL_ID.parse(f[0])
        off = _OFFSET.parse(f[1])
        w, z = _parse_history(f[2])
        h_ids.append(uid)
        h_offsets.append(off)
        h_lens.append(len(w))
        h_lines.append(lineno)
        h_w.frombytes(w.astype(h_w_dtype).tobytes())
        h_z.frombytes(z.tobytes())

    _stream(paths["history"], st, 3, row_history)

    # --- complete observations ---------------------------------------------------------
    c_ids, c_rates, c_lines = array("q"), array("d"), array("q")
    if os.path.isfile(paths["complete"]):
        st = states["complete"] = RowLog(paths["complete"], errors, _SKIP_HINT)

        def row_complete(f, lineno):
            uid = _URL_ID.parse(f[0])
            v = _CHANGE_RATE.parse(f[1])
            c_ids.append(uid)
            c_rates.append(v)
            c_lines.append(lineno)

        _stream(paths["complete"], st, 2, row_complete)

    # --- url -> host -------------------------------------------------------------------
    u_ids, u_hosts, u_lines = array("q"), array("q"), array("q")
    if os.path.isfile(paths["urls"]):
        st = states["urls"] = RowLog(paths["urls"], errors, _SKIP_HINT)

        def row_url(f, lineno):
            _URL.parse(f[0])
            uid = _URL_ID.parse(f[1])
            hid = _HOST_ID.parse(f[2])
            u_ids.append(uid)
            u_hosts.append(hid)
            u_lines.append(lineno)

        _stream(paths["urls"], st, 3, row_url)

    # --- host constraints ----------------------------------------------------------------
    hc_ids, hc_flags, hc_lines = array("q"), array("B"), array("q")
    if os.path.isfile(paths["hosts"]):
        st = states["hosts"] = RowLog(paths["hosts"], errors, _SKIP_HINT)

        def row_host(f, lineno):
            _HOST_URL.parse(f[0])
            hid = _HOST_ID.parse(f[1])
            flag = _CONSTRAINED.parse(f[2])
            hc_ids.append(hid)
            hc_flags.append(int(flag))
            hc_lines.append(lineno)

        _stream(paths["hosts"], st, 3, row_host)

    # --- duplicates (raise or skip like any malformed line) ----------------------------------
    def arr(a, dt):
        return np.frombuffer(a, dtype=dt) if len(a) else np.zeros(0, dtype=dt)

    imp_ids_a, imp_vals_a = arr(imp_ids, np.int64), arr(imp_vals, np.float64)
    keep = _dedupe(imp_ids_a, arr(imp_lines, np.int64), states["importance"], "URL_ID")
    imp_ids_a, imp_vals_a = imp_ids_a[keep], imp_vals_a[keep]

    h_ids_a = arr(h_ids, np.int64)
    h_lens_a = arr(h_lens, np.int64)
    h_off_a = arr(h_offsets, np.float64)
    h_keep = _dedupe(h_ids_a, arr(h_lines, np.int64), states["history"], "URL_ID")

    c_ids_a, c_rates_a = arr(c_ids, np.int64), arr(c_rates, np.float64)
    if "complete" in states:
        keep = _dedupe(c_ids_a, arr(c_lines, np.int64), states["complete"], "URL_ID")
        c_ids_a, c_rates_a = c_ids_a[keep], c_rates_a[keep]
    u_ids_a, u_hosts_a = arr(u_ids, np.int64), arr(u_hosts, np.int64)
    if "urls" in states:
        keep = _dedupe(u_ids_a, arr(u_lines, np.int64), states["urls"], "URL_ID")
        u_ids_a, u_hosts_a = u_ids_a[keep], u_hosts_a[keep]
    hc_ids_a, hc_flags_a = arr(hc_ids, np.int64), arr(hc_flags, np.uint8)
    if "hosts" in states:
        keep = _dedupe(hc_ids_a, arr(hc_lines, np.int64), states["hosts"], "Host_ID")
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
    row_start = np.concatenate([[0], np.cumsum(h_lens_a)])[:-1] if h_lens_a.size else np.zeros(0, np.int64)
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

    w_flat = np.frombuffer(h_w, dtype=np.float32 if h_w.typecode == "f" else np.float64) if len(h_w) else np.zeros(0, dtype)
    z_flat = arr(h_z, np.uint8)
    obs_row = np.repeat(np.arange(h_ids_a.size), h_lens_a)
    obs_col = np.arange(w_flat.size) - np.repeat(row_start, h_lens_a)
    obs_page = page_of_row[obs_row] if obs_row.size else np.zeros(0, np.int64)
    sel = obs_page >= 0
    obs_page, obs_col, obs_row = obs_page[sel], obs_col[sel], obs_row[sel]
    w_sel, z_sel = w_flat[sel], z_flat[sel]
    obs_len = h_lens_a[obs_row]
    dropped = np.zeros(obs_page.size, dtype=bool)
    if max_observations is not None:
        first_kept = np.maximum(obs_len - int(max_observations), 0)
        dropped = obs_col < first_kept
        offset += np.bincount(obs_page[dropped], weights=w_sel[dropped].astype(np.float64), minlength=n)
        joins["truncated_histories"] = int(np.sum(lengths > max_observations))
        joins["dropped_observations"] = int(dropped.sum())
        obs_col = obs_col - first_kept
        lengths = np.minimum(lengths, int(max_observations))
    else:
        joins["truncated_histories"] = 0
        joins["dropped_observations"] = 0
    k = int(lengths.max()) if n else 0
    intervals = np.zeros((n, k), dtype=dtype)
    changed = np.zeros((n, k), dtype=bool)
    mask = np.zeros((n, k), dtype=bool)
    keep_obs = ~dropped
    intervals[obs_page[keep_obs], obs_col[keep_obs]] = w_sel[keep_obs]
    changed[obs_page[keep_obs], obs_col[keep_obs]] = z_sel[keep_obs].astype(bool)
    mask[obs_page[keep_obs], obs_col[keep_obs]] = True

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
