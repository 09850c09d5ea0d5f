r"""Crawl histories from Apache Nutch CrawlDb dumps taken day after day.

``bin/nutch readdb CRAWLDB -dump DIR`` (Nutch 1.x ``CrawlDbReader``) writes one record per
URL -- ``URL<TAB>`` followed by ``CrawlDatum.toString()`` and a line break::

    http://example.com/a	Version: 7
    Status: 2 (db_fetched)
    Fetch time: Sun Nov 29 02:53:48 UTC 2026
    Modified time: Sat Nov 28 02:53:48 UTC 2026
    Retries since fetch: 0
    Retry interval: 86400 seconds (1 days)
    Score: 1.0
    Signature: 5d41402abc4b2a76b9719d911017c592
    Metadata:
     	_pst_=success(1), lastModified=0
    	Content-Type=text/html

(``Metadata: \n `` then a tab before each ``key=value``; a record ends with a blank line, or
with a line holding one space when it has no metadata).  ``-format csv`` writes the same
fields as one CSV line each under the header ``Url,Status code,...``; both are read.  A
dump is the file, or the directory of ``part-*`` files (``.gz`` too) Nutch writes.  The
dates are Java's ``Date.toString()`` in the JVM's time zone: ``UTC``, ``GMT``, ``GMT+hh:mm``
and a few unambiguous zone names are known; give others as ``zones`` (or run ``readdb``
with ``-Duser.timezone=UTC``).

**From dumps to observations.**  ``Fetch time`` in the CrawlDb is the *next* scheduled fetch:
after a successful fetch Nutch's fetch schedule sets it to the fetch's time plus ``Retry
interval`` (``DefaultFetchSchedule``; ``AdaptiveFetchSchedule`` with
``db.fetch.schedule.adaptive.sync_delta=false``).  So a record's *last fetch* is ``Fetch time
- Retry interval``, read from records with status ``db_fetched`` (2) or ``db_notmodified`` (6),
no retries since the fetch and a signature (any other record -- unfetched, gone, redirects,
duplicates, retried fetches, no signature -- is no reading).  Per URL, in the dumps' order,
readings whose ``Fetch time`` equals the previous reading's are the same fetch seen again
(an inject with ``-update`` that changes the interval keeps the fetch time, and is skipped
too) and are dropped; each later reading then gives one observation: the interval between
the two last fetches, and whether the signature changed.  A last fetch that does not
advance is an error (dumps out of order).  With the adaptive schedule's ``sync_delta``
(its default) each next fetch is moved earlier by a fraction of the time since the page's
last modification, so an interval read this way is off by the difference of two such shifts.
"""
from __future__ import annotations

import gzip
import os
import re
from collections.abc import Sequence

import numpy as np

from .._src.timeunits import unit_seconds
from ._histories import Histories
from ._schema import FileReport, PathLike, TableError

#: Zone names of Java's ``Date.toString()`` read without ``zones`` (hours east of UTC); names
#: Java gives to several zones (``CST``, ``IST``, ``BST``...) must be given.
ZONES = {"UTC": 0.0, "GMT": 0.0, "UT": 0.0, "Z": 0.0, "CET": 1.0, "CEST": 2.0, "EET": 2.0, "EEST": 3.0,
         "WET": 0.0, "WEST": 1.0, "MSK": 3.0, "JST": 9.0, "KST": 9.0, "HKT": 8.0, "SGT": 8.0,
         "AEST": 10.0, "AEDT": 11.0, "NZST": 12.0, "NZDT": 13.0, "EST": -5.0, "EDT": -4.0, "CDT": -5.0,
         "MST": -7.0, "MDT": -6.0, "PST": -8.0, "PDT": -7.0, "AKST": -9.0, "AKDT": -8.0, "HST": -10.0}

# Each line of a text record after its first (``URL<TAB>Version: N``): its pattern (RE2, named
# groups extracted; a plain prefix where nothing is) and its rule in words (for errors).
_TEXT_FIELDS = (
    (r"^Status: (?P<status>\d+) \([^)]*\)$", "'Status: CODE (name)'"),
    (r"^Fetch time: \w{3} (?P<md>\w{3} \d\d \d\d:\d\d:\d\d) (?P<zone>[^ ]+) (?P<year>\d{4,})$",
     "'Fetch time: ' and a Java Date (EEE MMM dd HH:mm:ss zzz yyyy)"),
    ("Modified time: ", "'Modified time: DATE'"),
    (r"^Retries since fetch: (?P<retries>\d+)$", "'Retries since fetch: N'"),
    (r"^Retry interval: (?P<interval>-?\d+) seconds \(.*\)$", "'Retry interval: N seconds (D days)'"),
    ("Score: ", "'Score: S'"),
    (r"^Signature: (?P<sig>.*)$", "'Signature: HEX' (or null)"),
    ("Metadata:", "'Metadata: ' followed by tab-indented key=value lines"),
)
_START = r"^(?P<url>[^\t]+)\tVersion: \d+$"
_CSV = (r'^"(?P<url>.*)",(?P<status>\d+),"[^"]*",\w{3} (?P<md>\w{3} \d\d \d\d:\d\d:\d\d) (?P<zone>[^ ,]+) '
        r'(?P<year>\d{4,}),[^,]*,(?P<retries>\d+),(?P<interval>[-+.0-9Ee]+),[^,]*,[^,]*,"(?P<sig>[^"]*)",".*"$')
_CSV_HEADER = "Url,Status code,Status name,Fetch Time,"
_CSV_RULE = ('a readdb -dump -format csv line "URL",CODE,"name",FETCH TIME,MODIFIED TIME,RETRIES,INTERVAL,DAYS,'
             'SCORE,"SIGNATURE","METADATA"')
_FETCHED = (2, 6)  # db_fetched, db_notmodified
_CHUNK = 1 << 25  # characters parsed at a time


class _Log:
    """Error policy and counts over several files."""

    def __init__(self, errors: str):
        if errors not in ("raise", "skip"):
            raise ValueError(f"errors must be 'raise' or 'skip'; got {errors!r}")
        self.errors, self.read, self.skipped, self.reasons, self.examples = errors, 0, 0, {}, []

    def bad(self, path: str, line: int, reason: str, message: str, count: int = 1) -> None:
        if self.errors == "raise":
            raise TableError(path, line, message, reason=reason,
                             hint="(pass errors='skip' to count and skip such records)")
        self.skipped += count
        self.reasons[reason] = self.reasons.get(reason, 0) + count
        if len(self.examples) < 10:
            self.examples.append(f"{path}:{line}: {message}")


def _dump_files(dump: PathLike) -> list[str]:
    path = os.fspath(dump)
    if os.path.isdir(path):
        names = sorted(n for n in os.listdir(path) if n.startswith("part-") and not n.endswith(".crc"))
        if not names:
            raise ValueError(f"{path}: a directory with no part-* files (the output of readdb -dump)")
        return [os.path.join(path, n) for n in names]
    if not os.path.exists(path):
        raise ValueError(f"{path}: no such file or directory")
    return [path]


def _chunks(path: str):
    """``(text, first_line)`` pieces of the file, each ending at a record boundary (before the
    line of a record's start; -format csv: at a line break)."""
    opener = gzip.open if path.lower().endswith(".gz") else open
    line, carry = 1, ""
    with opener(path, "rt", encoding="utf-8", errors="replace", newline="\n") as fh:
        while True:
            block = fh.read(_CHUNK)
            text = carry + block
            if not block:
                if text:
                    yield text, line
                return
            cut = text.rfind("\tVersion: ")
            cut = text.rfind("\n", 0, cut) + 1 if cut >= 0 else text.rfind("\n") + 1
            if cut > 0:
                yield text[:cut], line
                line += text.count("\n", 0, cut)
            carry = text[cut:]


def _lines(text: str):
    import pyarrow as pa
    import pyarrow.compute as pc

    lines = pc.split_pattern(pa.array([text], pa.large_string()), "\n").flatten()
    return lines.slice(0, len(lines) - 1) if text.endswith("\n") else lines


def _parse_file(path: str, log: _Log, zones: dict) -> dict:
    """The readings of one dump file: Arrow columns url, sig; NumPy status, fetch (epoch ms),
    retries, interval (s), line."""
    import pyarrow as pa
    import pyarrow.compute as pc

    out: dict[str, list] = {k: [] for k in ("url", "sig", "status", "fetch", "retries", "interval", "line")}
    csv = None
    for text, first in _chunks(path):
        lines = _lines(text)
        if csv is None:
            csv = text.startswith(_CSV_HEADER)
        if csv:
            rows = np.flatnonzero(~pc.or_(pc.starts_with(lines, _CSV_HEADER),
                                          pc.match_substring_regex(lines, r"^\s*$")).to_numpy(zero_copy_only=False))
            got = pc.extract_regex(lines.take(pa.array(rows)), _CSV)
            ok = got.is_valid().to_numpy(zero_copy_only=False)
            for i in rows[~ok][:1 if log.errors == "raise" else None].tolist():
                log.bad(path, first + i, "malformed record", f"expected {_CSV_RULE}; got {lines[i].as_py()[:60]!r}")
            rows, fields = rows[ok], got.filter(pa.array(ok))
            date_line = rows
        else:
            rows, fields = _text_records(lines, path, first, log)
            date_line = rows + 2
        if rows.size == 0:
            continue
        f = {name: fields.field(name) for name in ("url", "status", "md", "zone", "year", "retries", "interval",
                                                   "sig")}
        good, fetch = _dates(f, zones, path, first + date_line, log)
        take = pa.array(np.flatnonzero(good))
        out["url"].append(f["url"].take(take))
        out["sig"].append(f["sig"].take(take))
        out["status"].append(_ints(f["status"])[good])
        out["fetch"].append(fetch[good])
        out["retries"].append(_ints(f["retries"])[good])
        interval = pc.cast(f["interval"], pa.float64()).to_numpy(zero_copy_only=False)
        out["interval"].append(np.rint(interval[good]).astype(np.int64))
        out["line"].append(first + rows[good])
        log.read += int(good.sum())
    if not out["url"]:
        return {"url": pa.array([], pa.large_string()), "sig": pa.array([], pa.large_string()),
                **{k: np.zeros(0, np.int64) for k in ("status", "fetch", "retries", "interval", "line")}}
    return {k: (pa.concat_arrays(v) if k in ("url", "sig") else np.concatenate(v)) for k, v in out.items()}


def _ints(column) -> np.ndarray:
    import pyarrow as pa
    import pyarrow.compute as pc

    return pc.cast(column, pa.int64()).to_numpy(zero_copy_only=False)


def _text_records(lines, path: str, first: int, log: _Log):
    """``(record start rows, struct of the fields)`` of the well-formed text records of one
    chunk's lines; a malformed record is raised, or counted and left out."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = len(lines)
    start = np.flatnonzero(pc.match_substring(lines, "\tVersion: ").to_numpy(zero_copy_only=False))
    start_struct = pc.extract_regex(lines.take(pa.array(start)), _START)
    start = start[start_struct.is_valid().to_numpy(zero_copy_only=False)]
    start_struct = start_struct.drop_null()
    bad_at = np.full(start.size, np.iinfo(np.int64).max)  # each record's first bad line
    rule = np.full(start.size, -1)
    columns = {"url": start_struct.field("url")}
    in_record = np.zeros(n, bool)
    in_record[start] = True
    for k, (pattern, _) in enumerate(_TEXT_FIELDS, 1):
        at = start + k
        has = at < n
        field = lines.take(pa.array(np.minimum(at, n - 1)))
        if pattern.startswith("^"):
            got = pc.extract_regex(field, pattern)
        else:  # a plain prefix
            got = pc.if_else(pc.starts_with(field, pattern), True, None)
        ok = has & got.is_valid().to_numpy(zero_copy_only=False) & ~np.isin(at, start)
        in_record[at[has]] = True
        fail = ~ok & (bad_at == np.iinfo(np.int64).max)
        bad_at[fail], rule[fail] = at[fail], k - 1
        for name in got.type.names if pa.types.is_struct(got.type) else ():
            columns[name] = got.field(name)
    # the other lines: metadata (tab-indented), the blank line (or one space) ending a record
    other = np.flatnonzero(~in_record)
    rest = lines.take(pa.array(other))
    fine = pc.or_(pc.or_(pc.starts_with(rest, "\t"), pc.starts_with(rest, " \t")),
                  pc.or_(pc.equal(rest, ""), pc.equal(rest, " ")))
    stray = other[~fine.to_numpy(zero_copy_only=False)]
    owner = np.searchsorted(start, stray, side="right") - 1
    if (owner < 0).any():
        i = int(stray[owner < 0][0])
        log.bad(path, first + i, "malformed record",
                f"expected 'URL<TAB>Version: N' (a record's first line); got {lines[i].as_py()[:60]!r}")
    owner, stray = owner[owner >= 0], stray[owner >= 0]
    first_stray = np.full(start.size, np.iinfo(np.int64).max)
    np.minimum.at(first_stray, owner, stray)
    meta_bad = first_stray < bad_at
    bad_at = np.minimum(bad_at, first_stray)
    bad = np.flatnonzero(bad_at < np.iinfo(np.int64).max)
    for r in bad[np.argsort(bad_at[bad])][:1 if log.errors == "raise" else None].tolist():
        i = int(bad_at[r])
        got = repr(lines[i].as_py()[:60]) if i < n else "the end of the file"
        what = ("tab-indented key=value metadata lines, then a blank line" if meta_bad[r]
                else _TEXT_FIELDS[rule[r]][1])
        log.bad(path, first + i, "malformed record", f"expected {what}; got {got} (the form of Nutch's readdb -dump)")
    good = np.ones(start.size, bool)
    good[bad] = False
    names = list(columns)
    fields = pa.StructArray.from_arrays([columns[k] for k in names], names=names).filter(pa.array(good))
    return start[good], fields


def _dates(f, zones: dict, path: str, line: np.ndarray, log: _Log) -> tuple[np.ndarray, np.ndarray]:
    """``(valid, epoch ms)`` of Java ``Date.toString()`` fields (``md``: month, day and time;
    ``zone``; ``year``), in C (Arrow); a bad date or unknown zone is counted or raised."""
    import pyarrow as pa
    import pyarrow.compute as pc

    text = pc.binary_join_element_wise(f["md"], f["year"], pa.scalar(" ", pa.large_string()))
    stamp = pc.strptime(text, format="%b %d %H:%M:%S %Y", unit="s", error_is_null=True)
    valid = stamp.is_valid().to_numpy(zero_copy_only=False)
    seconds = pc.cast(stamp.fill_null(0), pa.int64()).to_numpy(zero_copy_only=False)
    enc = pc.dictionary_encode(f["zone"])
    names = enc.dictionary.to_pylist()
    hours = np.asarray([_zone_hours(z, zones) for z in names], np.float64)[
        enc.indices.to_numpy(zero_copy_only=False)] if names else np.zeros(0)
    ok = valid & np.isfinite(hours)
    for i in np.flatnonzero(~ok)[:1 if log.errors == "raise" else None].tolist():
        if not valid[i]:
            message = f"Fetch time: {f['md'][i].as_py()} {f['year'][i].as_py()!r} is not a date"
        else:
            message = (f"Fetch time: {f['zone'][i].as_py()!r} is not a zone this reader knows (give zones={{name: "
                       "hours east of UTC}}, or dump with -Duser.timezone=UTC)")
        log.bad(path, int(line[i]), "bad fetch time", message)
    return ok, (seconds - np.rint(np.where(ok, hours, 0) * 3600).astype(np.int64)) * 1000


def _zone_hours(name: str, zones: dict) -> float:
    if name in zones:
        return float(zones[name])
    if name in ZONES:
        return ZONES[name]
    m = re.fullmatch(r"(?:GMT|UTC)([+-])(\d\d):?(\d\d)", name)
    if m:
        return (1 if m.group(1) == "+" else -1) * (int(m.group(2)) + int(m.group(3)) / 60)
    return np.nan


def read_nutch_dumps(paths: Sequence[PathLike], *, errors: str = "raise", unit: str = "days",
                     zones: dict[str, float] | None = None, dtype: type = np.float64) -> Histories:
    """Crawl histories from Nutch CrawlDb dumps (``readdb -dump``, text or ``-format csv``)
    taken one after another (module docstring: a URL's readings in consecutive dumps give
    one observation each time its fetch time moved).

    Args:
      paths: the dumps in the order they were taken, each a file or a ``part-*`` directory.
      errors: ``"raise"``: a malformed record, a URL twice in one dump or a last fetch that
        goes back raises :class:`~jaxcrawl.io.TableError` ``file:line: message``;
        ``"skip"``: they are counted by reason in ``report`` and left out.
      unit: the intervals' time unit (``days``, ``hours``, ``minutes``, ``seconds``).
      zones: extra time-zone names of the dates, as hours east of UTC (e.g. ``{"IST": 5.5}``).
      dtype: float dtype of the intervals.

    Returns:
      :class:`~jaxcrawl.io.Histories` of the URLs with at least one observation, in order of
      first appearance; ``importance`` NaN, ``complete`` False; ``report`` a ``FileReport``
      (``rows_read``: records read).
    """
    if isinstance(paths, (str, bytes, os.PathLike)):
        paths = [paths]
    if not paths:
        raise ValueError("read_nutch_dumps needs at least one dump")
    log = _Log(errors)
    scale = unit_seconds(unit)
    zones = dict(zones or {})
    parts, files = [], []
    for d, dump in enumerate(paths):
        for f in _dump_files(dump):
            cols = _parse_file(f, log, zones)
            cols["dump"] = np.full(len(cols["url"]), d, np.int64)
            cols["file"] = np.full(len(cols["url"]), len(files), np.int64)
            files.append(f)
            parts.append(cols)
    import pyarrow as pa

    c = {k: pa.concat_arrays([p[k] for p in parts]) if k in ("url", "sig") else np.concatenate([p[k] for p in parts])
         for k in parts[0]}
    code, first_seen, dictionary = _codes(c.pop("url"))
    sig, _, sig_names = _codes(c.pop("sig"))
    order = np.lexsort((c["dump"], code))  # by URL, then dump
    c = {k: v[order] for k, v in c.items()}
    code, sig = code[order], sig[order]
    same = (code[1:] == code[:-1]) & (c["dump"][1:] == c["dump"][:-1])
    for i in np.flatnonzero(same)[:1 if errors == "raise" else None].tolist():
        log.bad(files[c["file"][i + 1]], int(c["line"][i + 1]), "URL twice in a dump",
                f"{dictionary[code[i + 1]]!r} is in this dump twice (a CrawlDb holds one record per URL)")
    null = np.asarray([name == "null" for name in sig_names], bool)
    valid = (np.isin(c["status"], _FETCHED) & (c["retries"] == 0) & ~null[sig] & (c["interval"] >= 0)
             & ~np.concatenate([same, [False]]) & ~np.concatenate([[False], same]))
    v = np.flatnonzero(valid)
    vc, fetch = code[v], c["fetch"][v]
    repeat = np.concatenate([np.zeros(min(v.size, 1), bool), (vc[1:] == vc[:-1]) & (fetch[1:] == fetch[:-1])])
    v = v[~repeat]
    while True:  # observations between consecutive readings; a last fetch going back is left out
        vc = code[v]
        last = c["fetch"][v] - 1000 * c["interval"][v]
        pair = vc[1:] == vc[:-1]
        back = np.flatnonzero(pair & (last[1:] <= last[:-1])) + 1
        if back.size == 0:
            break
        back = back[np.concatenate([[True], np.diff(back) > 1])]  # the first of each run; then look again
        for i in back[:1 if errors == "raise" else None].tolist():
            j = v[i]
            log.bad(files[c["file"][j]], int(c["line"][j]), "last fetch not after the previous",
                    f"{dictionary[code[j]]!r}: last fetch (Fetch time - Retry interval) is not after its last fetch "
                    "in the dump before; give the dumps in the order they were taken")
        keep = np.ones(v.size, bool)
        keep[back] = False
        v = v[keep]
    obs = np.flatnonzero(pair)
    obs_code = vc[1:][obs]
    interval = (last[1:][obs] - last[:-1][obs]) / (1000.0 * scale)
    changed = sig[v][1:][obs] != sig[v][:-1][obs]
    pages = np.unique(obs_code)  # codes are in order of first appearance
    rank = np.empty(first_seen.size, np.int64)
    rank[pages] = np.arange(pages.size)
    by_page = np.argsort(rank[obs_code], kind="stable")
    counts = np.bincount(rank[obs_code], minlength=pages.size)
    source = ", ".join(os.fspath(p) for p in paths)
    report = FileReport(source, log.read, log.skipped, dict(log.reasons), 0, 0, tuple(log.examples))
    return Histories(np.asarray(dictionary, object)[pages], np.full(pages.size, np.nan),
                     interval[by_page].astype(dtype), np.asarray(changed, bool)[by_page],
                     np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
                     np.zeros(pages.size, bool), np.full(pages.size, np.nan), source, report)


def _codes(text) -> tuple[np.ndarray, np.ndarray, list]:
    """``(code of each value, position of each code's first row, the distinct values)``
    (codes in order of first appearance)."""
    import pyarrow.compute as pc

    enc = pc.dictionary_encode(text)
    code = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    first = np.full(len(enc.dictionary), code.size, np.int64)
    np.minimum.at(first, code, np.arange(code.size))
    return code, first, enc.dictionary.to_pylist()
