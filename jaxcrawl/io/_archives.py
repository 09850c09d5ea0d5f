"""Crawl histories from crawl archives: CDX/CDXJ indexes (:func:`read_cdx`) and WARC files
(:func:`read_warc`).

Every capture becomes a few numbers -- its page (a 64-bit hash of the SURT key), its time
(int64 microseconds since the epoch), a 64-bit hash of its payload digest, whether it was
a success -- and the captures of all files are sorted by page then time and paired
(:func:`_pair`): consecutive successful captures of a page give one observation, the
interval between them and whether their digests differ.  The rules:

- success: status 200, or a revisit record (CDX mime ``warc/revisit``, ``WARC-Type:
  revisit``) with status ``-``, 200 or 304.  A revisit carries the digest of the payload it
  repeats; one without a digest repeats the page's previous successful capture.
- redirects (3xx), errors (4xx, 5xx, other) and a missing status (``-``) give no
  observation and do not break the interval: the next success pairs with the previous one.
- several captures of a page at one time count once: a response before a revisit, then the
  smallest digest hash (``same_time_conflicts`` counts times whose digests differ).
- the order of lines and files does not matter; a page's history starts at its first
  success.  Pages with fewer than two successes have no observation and are left out
  (``pages_without_observation``).

CDX and CDXJ files are parsed in blocks of bytes with NumPy, two blocks at a time (NumPy
releases the GIL): the line ends are found 8 bytes at a time, the fields in each line's
first bytes (CDXJ: the keys ``url``, ``mime``, ``status``, ``digest`` in any order, the pywb /
Common Crawl layout by one search per value), and timestamps, statuses and hashes are read
as 8-byte words at the fields' offsets.  Lines the block parser does not settle (a JSON
escape, a field past the first 4 KiB, a malformed line) are parsed one at a time with
``json``, which names the error.  Captures read in page-then-time order (one CDXJ file, as
indexes are sorted) are paired where they lie, without sorting the captures.
"""
from __future__ import annotations

import base64
import datetime as _dt
import hashlib
import json
import os
from collections import deque
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple
from urllib.parse import urlsplit

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from .._src.fileio import open_read
from .._src.timeunits import unit_seconds
from ._histories import Histories
from ._schema import RowError, RowLog, TableError

__all__ = ["read_cdx", "read_warc"]

_BLOCK = 1 << 22  # bytes per parsed block (its temporaries stay in the caches)
_THREADS = 2  # blocks parsed at once
_PAD = 4096  # bytes after a block, so that fixed-width windows never run off its end
_MISSING = np.uint64(0)  # the digest hash of "no digest"
_M1, _M2 = np.uint64(0x9E3779B97F4A7C15), np.uint64(0xBF58476D1CE4E5B9)
_CDX_LETTERS = {"N": "key", "b": "timestamp", "a": "url", "m": "mime", "s": "status", "k": "digest"}
_DEFAULT_CDX = ("key", "timestamp", "url", "mime", "status", "digest")  # urlkey timestamp original mimetype ...


class ArchiveReport(NamedTuple):
    """What was read from crawl archives (the ``report`` of :func:`read_cdx` / :func:`read_warc`).

    Attributes:
      path: the files read, joined by ``", "``.
      rows_read: captures accepted (lines of a CDX, records of a WARC).
      rows_skipped: malformed lines or records skipped (``errors="skip"``).
      skipped_by_reason: ``{reason: count}`` of those.
      blank_lines: empty lines.
      header_lines: CDX header and ``!`` meta lines.
      examples: up to 10 ``"file:line: message"`` strings for skipped lines.
      captures: ``{kind: count}``: ``ok`` (status 200), ``revisit``, ``redirect``, ``error``
        (4xx, 5xx, ``-``, other), ``duplicate`` (a page's further successes at one time),
        ``same_time_conflicts``, ``revisit_without_reference`` (a revisit without digest
        before any success: dropped), ``pages_without_observation``.
    """

    path: str
    rows_read: int
    rows_skipped: int
    skipped_by_reason: dict[str, int]
    blank_lines: int
    header_lines: int
    examples: tuple[str, ...]
    captures: dict[str, int]


# ------------------------------------------------------------------------ hashing and values
def _mix(h: np.ndarray) -> np.ndarray:
    h = h ^ (h >> np.uint64(31))
    h = h * _M2
    return h ^ (h >> np.uint64(29))


def _words(buf: np.ndarray) -> np.ndarray:
    """The little-endian 8-byte word at every byte offset of ``buf`` (a view, no copy)."""
    return np.ndarray((buf.size - 7,), "<u8", buf, 0, (1,))


_KEEP = np.array([(1 << 8 * r) - 1 for r in range(9)], np.uint64)  # the low r bytes of a word


def _hash_segments(buf: np.ndarray, start: np.ndarray, length: np.ndarray) -> np.ndarray:
    """A 64-bit hash (never 0) of each byte segment ``buf[start:start + length]``: its bytes
    read as 8-byte words (zero after its length, up to its :func:`_width`), folded with a
    multiply-xorshift step.  Segments of one width are hashed together, a word at a time."""
    out = np.empty(start.size, np.uint64)
    width = _width(length)
    groups = np.flatnonzero(np.bincount(width >> 3))
    words = _words(buf)
    for w8 in groups.tolist():
        sel = None if groups.size == 1 else np.flatnonzero(width == w8 * 8)
        s, n = (start, length) if sel is None else (start[sel], length[sel])
        h = n.astype(np.uint64) * _M1
        shifted = np.empty_like(h)
        at = s.copy()
        full = int(n.min()) // 8  # words wholly inside every segment
        for j in range(w8):
            if j < full:
                word = words[at]
            else:
                word = words[np.minimum(at, words.size - 1)] & _KEEP[np.clip(n - 8 * j, 0, 8)]
            h ^= word
            h *= _M1
            h ^= np.right_shift(h, np.uint64(29), out=shifted)
            at += 8
        if sel is None:
            out = _mix(h)
        else:
            out[sel] = _mix(h)
    out[out == 0] = 1
    return out


def _width(length: np.ndarray) -> np.ndarray:
    """The matrix width of each segment: its length rounded up to 8 bytes (at least 8) up to
    64, then to a power of two."""
    width = np.maximum(8, (length + 7) & ~7)
    long = np.flatnonzero(length > 64)
    if long.size:
        width[long] = 1 << np.ceil(np.log2(length[long])).astype(np.int64)
    return width


def _gather(buf: np.ndarray, start: np.ndarray, length: np.ndarray, w: int) -> np.ndarray:
    """``(n, w)`` bytes of each segment, zero after its length."""
    if start.size and int(start.max()) + w <= buf.size:
        mat = sliding_window_view(buf, w)[start]
    else:
        mat = buf[np.minimum(start[:, None] + np.arange(w), buf.size - 1)]
    np.multiply(mat, np.arange(w)[None, :] < length[:, None], out=mat, casting="unsafe")
    return mat


def _texts(buf: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """The segments' bytes as an object array of ``bytes``."""
    out = np.empty(start.size, object)
    length = end - start
    width = _width(length)
    for w in np.flatnonzero(np.bincount(width >> 3)).tolist():
        sel = np.flatnonzero(width == w * 8)
        w *= 8
        out[sel] = _gather(buf, start[sel], length[sel], w).view(f"S{w}").ravel().astype(object)
    return out


def _hash_values(values: Sequence[bytes]) -> np.ndarray:
    """:func:`_hash_segments` of byte strings (the same hash as of the same bytes in a block)."""
    if not values:
        return np.zeros(0, np.uint64)
    length = np.fromiter(map(len, values), np.int64, count=len(values))
    start = np.concatenate([[0], np.cumsum(length)[:-1]])
    buf = np.frombuffer(b"".join(values) + bytes(_PAD), np.uint8)
    return _hash_segments(buf, start, length)


def _windows(buf: np.ndarray, start: np.ndarray, width: int) -> np.ndarray:
    """``(n, width)`` bytes at each start (the padded block keeps them inside ``buf``)."""
    return sliding_window_view(buf, width)[np.minimum(start, buf.size - width)]


def _equals(buf: np.ndarray, start: np.ndarray, end: np.ndarray, text: bytes) -> np.ndarray:
    """Whether each segment is exactly ``text``."""
    lit = np.frombuffer(text, np.uint8)
    out = (end - start) == lit.size
    if lit.size == 1:
        return out & (buf[np.clip(start, 0, buf.size - 1)] == lit[0])
    at = np.flatnonzero(out)
    out[at] = np.all(_windows(buf, start[at], lit.size) == lit, axis=1)
    return out


_ONES = np.uint64(0x0101010101010101)


def _all_digits(word: np.ndarray) -> np.ndarray:
    """Whether every byte of each 8-byte word is an ASCII digit."""
    high = np.uint64(0xF0) * _ONES
    return ((word & high) == np.uint64(0x30) * _ONES) & (((word + np.uint64(6) * _ONES) & high) == np.uint64(0x30) * _ONES)


def _digit_pairs(word: np.ndarray, first: int = 0) -> list[np.ndarray]:
    """The two-digit numbers ``first``-3 of each word of 8 ASCII digits (first digit most
    significant)."""
    x = word - np.uint64(0x30) * _ONES
    x = (x * np.uint64(10) + (x >> np.uint64(8))) & np.uint64(0x00FF00FF00FF00FF)
    return [((x >> np.uint64(16 * i)) & np.uint64(0xFF)).astype(np.int64) for i in range(first, 4)]


def _days_to(year: np.ndarray) -> np.ndarray:
    """Days from 1970-01-01 to January 1st of each year (proleptic Gregorian)."""
    y = year - 1
    return 365 * y + y // 4 - y // 100 + y // 400 - 719162


_YEAR_DAY = _days_to(np.arange(10000))  # by year 0-9999
_LEAP = (np.arange(10000) % 4 == 0) & ((np.arange(10000) % 100 != 0) | (np.arange(10000) % 400 == 0))
_MONTH_DAY = np.array([0, 0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334])  # days before month 1-12
_MONTH_LEN = np.array([31, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31])


def _epoch_us(date: np.ndarray, clock: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Microseconds since the epoch of ``YYYYMMDDhhmmss`` given as two little-endian 8-byte
    words, its bytes 0-7 and 6-13, and whether each is a valid date and time (every byte a
    digit, month 1-12, day within the month, 00:00:00-23:59:59)."""
    ok = _all_digits(date) & _all_digits(clock)
    century, yy, mo, day = _digit_pairs(date)
    hh, mi, ss = _digit_pairs(clock, 1)
    y = np.clip(century * 100 + yy, 0, 9999)  # (out of range: not all digits)
    m = np.clip(mo, 0, 12)
    leap = _LEAP[y]
    ok &= (y >= 1) & (mo >= 1) & (mo <= 12) & (day >= 1) & (day <= _MONTH_LEN[m] + (leap & (m == 2)))
    ok &= (hh < 24) & (mi < 60) & (ss < 60)
    days = _YEAR_DAY[y] + _MONTH_DAY[m] + (leap & (m > 2)) + day - 1
    return (days * 86400 + hh * 3600 + mi * 60 + ss) * 1_000_000, ok


def _text_epoch_us(stamps: Sequence[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_epoch_us` of 14-byte timestamps."""
    words = _words(np.frombuffer(b"".join(stamps) + bytes(8), np.uint8))
    at = 14 * np.arange(len(stamps))
    return _epoch_us(words[at], words[at + 6])


class _Segs(NamedTuple):
    """Byte segments ``[s, e)`` of each line's fields in a block."""

    key: tuple
    ts: np.ndarray  # start of the 14 timestamp digits
    ts_len: np.ndarray
    url: tuple
    mime: tuple | None
    status: tuple
    digest: tuple


def _values(buf: np.ndarray, g: _Segs) -> tuple[dict, np.ndarray]:
    """The capture columns of segments, and which lines pass every rule (the others are
    parsed again, one at a time, for their error)."""
    words = _words(buf)
    ts = np.clip(g.ts, 0, words.size - 7)
    t, ok = _epoch_us(words[ts], words[ts + 6])
    ok &= g.ts_len == 14
    ok &= g.key[1] > g.key[0]
    ok &= g.url[1] > g.url[0]
    s0, s1 = g.status
    word = words[np.clip(s0, 0, words.size - 1)]
    three = (word & np.uint64(0xFFFFFF)) | np.uint64(0x3030303030000000)  # its first 3 bytes, then digits
    digits = (s1 - s0 == 3) & _all_digits(three)
    ok &= digits | ((s1 - s0 == 1) & (word & np.uint64(0xFF) == 45))  # or "-"
    x = (three - np.uint64(0x30) * _ONES).astype(np.int64)
    status = np.where(digits, (x & 0xFF) * 100 + (x >> 8 & 0xFF) * 10 + (x >> 16 & 0xFF), -1)
    d0, d1 = g.digest
    ok &= d1 > d0
    revisit = (_equals(buf, g.mime[0], g.mime[1], b"warc/revisit") if g.mime is not None
               else np.zeros(s0.size, bool))
    nodigest = _equals(buf, d0, d1, b"-")
    ok &= ~(nodigest & (status == 200) & ~revisit)  # a 200 response must name its payload digest
    return dict(time=t, status=status, revisit=revisit, nodigest=nodigest), ok


# ------------------------------------------------------------------------ one line at a time
def _field(obj: dict, name: str) -> bytes:
    v = obj.get(name, "-")
    if not isinstance(v, (str, int)):
        raise RowError(f"bad {name}", f"{name} must be text; got {v!r}", name)
    return str(v).encode()


def _check(key: bytes, ts: bytes, url: bytes, mime: bytes, status: bytes, digest: bytes) -> tuple:
    """The rules of a capture's fields (the block parser's, with a message)."""
    if not key:
        raise RowError("bad key", "the SURT key (first field) is empty", "key")
    if len(ts) != 14 or not ts.isdigit():
        raise RowError("bad timestamp", f"timestamp must be 14 digits YYYYMMDDhhmmss; got {ts[:40]!r}", "timestamp")
    try:
        _dt.datetime(int(ts[:4]), int(ts[4:6]), int(ts[6:8]), int(ts[8:10]), int(ts[10:12]), int(ts[12:14]))
    except ValueError:
        raise RowError("bad timestamp", f"timestamp {ts.decode()} is not a valid date and time (UTC)",
                       "timestamp") from None
    if not url:
        raise RowError("bad url", "url is empty", "url")
    if not (status == b"-" or (len(status) == 3 and status.isdigit())):
        raise RowError("bad status", f"status must be a 3-digit HTTP status or -; got {status[:40]!r}", "status")
    if not digest:
        raise RowError("bad digest", "digest is empty (write - for none)", "digest")
    if digest == b"-" and status == b"200" and mime != b"warc/revisit":
        raise RowError("missing digest", "a status-200 capture must have a payload digest; got -", "digest")
    return key, ts, url, mime, status, digest


def _parse_cdxj(line: bytes) -> tuple:
    parts = line.split(b" ", 2)
    if len(parts) < 3 or not parts[2].startswith(b"{"):
        raise RowError("wrong number of fields", "a CDXJ line is SURTKEY TIMESTAMP {json}", None)
    try:
        obj = json.loads(parts[2])
    except ValueError as err:
        raise RowError("bad json", f"the JSON block does not parse ({err})", None) from None
    if not isinstance(obj, dict):
        raise RowError("bad json", "the JSON block must be an object", None)
    if "url" not in obj:
        raise RowError("bad url", "the JSON block has no url", "url")
    return _check(parts[0], parts[1], *(_field(obj, k) for k in ("url", "mime", "status", "digest")))


def _parse_cdx(line: bytes, fields: tuple, exact: bool) -> tuple:
    parts = line.split(b" ")
    if (len(parts) != len(fields)) if exact else (len(parts) < len(fields)):
        raise RowError("wrong number of fields", f"expected {'' if exact else 'at least '}{len(fields)} "
                       f"space-separated fields ({' '.join(fields)}); got {len(parts)}", None)
    v = dict(zip(fields, parts))
    return _check(v["key"], v["timestamp"], v["url"], v.get("mime", b""), v["status"], v["digest"])


# ------------------------------------------------------------------------ blocks
def _newlines(buf: np.ndarray, n: int) -> np.ndarray:
    """``np.flatnonzero(buf[:n] == 10)``, searched a word of 8 bytes at a time: a word holding
    one newline gives it by a bit count, the rare word holding several its bytes."""
    is_nl = np.zeros(-(-n // 8) * 8, bool)
    np.equal(buf[:n], 10, out=is_nl[:n])
    words = is_nl.view("<u8")
    at = np.flatnonzero(words != 0)
    x = words[at]
    one = np.uint64(1)
    pos = at * 8 + (np.bitwise_count((x & (~x + one)) - one) >> np.uint8(3))  # its lowest 0x01 byte
    several = np.flatnonzero(x & (x - one))
    if several.size:
        row, col = np.nonzero(is_nl.reshape(-1, 8)[at[several]])
        pos = np.sort(np.concatenate([np.delete(pos, several), at[several][row] * 8 + col]))
    return pos


def _line_bounds(buf: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    ends = _newlines(buf, n)
    starts = np.concatenate([[0], ends[:-1] + 1]).astype(np.int64)
    cr = (ends > starts) & (buf[np.maximum(ends - 1, 0)] == 13)
    return starts, ends - cr


_WIDTHS = (384, 1024, 4096)  # the line prefixes searched: most lines in the first, long URLs later


def _prefixes(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Each line's first ``width`` bytes as an ``S{width}`` array, and each line's length in it."""
    win = sliding_window_view(buf, width)[starts]
    return np.ascontiguousarray(win).view(f"S{width}").ravel(), np.minimum(ends - starts, width)


def _find(a: np.ndarray, text: bytes, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    return np.strings.find(a, text, start, end)


def _by_width(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, find_fields) -> tuple[dict, np.ndarray]:
    """Run ``find_fields(prefixes, line_length, width)`` -> ``({name: (s, e)}, fit)`` on the lines'
    prefixes of each width in turn (lines not yet fitted only), in absolute positions."""
    n = starts.size
    seg: dict = {}
    fit = np.zeros(n, bool)
    todo = np.arange(n)
    for width in _WIDTHS:
        if not todo.size:
            break
        a, end = _prefixes(buf, starts[todo], ends[todo], width)
        got, ok = find_fields(a, end, ends[todo] - starts[todo] <= width)
        if width == _WIDTHS[0]:  # every line: positions kept as they are
            seg = {name: (starts + s, starts + e) for name, (s, e) in got.items()}
            fit = ok
        else:
            for name, (s, e) in got.items():
                seg[name][0][todo] = starts[todo] + s
                seg[name][1][todo] = starts[todo] + e
            fit[todo] = ok
        todo = np.flatnonzero(~fit)
    return seg, fit


def _value(a: np.ndarray, end: np.ndarray, name: bytes, after: np.ndarray, json_start: np.ndarray) -> tuple:
    """``(start, end)`` of the string value of JSON key ``name``: right after ``after`` (the
    previous value's closing quote) in the common key order, else found after ``after``,
    else anywhere in the object; -1 where absent."""
    key = b'"' + name + b'": "'
    v0 = np.where(np.strings.startswith(a, b", " + key, after + 1, end), after + 3 + len(key), -1)
    for lo in (after, json_start):
        miss = np.flatnonzero(v0 < 0)
        if not miss.size:
            break
        at = _find(a[miss], key, lo[miss], end[miss])
        v0[miss] = np.where(at >= 0, at + len(key), -1)
    v1 = _find(a, b'"', v0, end)
    return np.where(v0 < 0, 0, v0), np.where(v0 < 0, -1, v1)


_LAYOUT = (b' {"url": "', b', "mime": "', b', "status": "', b', "digest": "')  # each key's text before its value


def _cdxj_fields(a: np.ndarray, end: np.ndarray, whole: np.ndarray) -> tuple[dict, np.ndarray]:
    """Where each field of CDXJ lines is (columns in the prefixes ``a``), and which lines the
    search settles: the JSON keys url, mime, status, digest found, with no backslash (a JSON
    escape) up to the last of them.  Lines in the pywb / Common Crawl layout (those keys
    first, in that order, Common Crawl's ``mime-detected`` between mime and status) are
    settled by one search per value; the others by :func:`_cdxj_fields_any`."""
    url, mime, status, digest = _LAYOUT
    sp = _find(a, b" ", 0, end)  # the key's end; the timestamp follows, then the url
    u1 = _find(a, b'"', sp + 15 + len(url), end)
    m1 = _find(a, b'"', u1 + 1 + len(mime), end)
    detected = np.strings.startswith(a, b', "mime-detected": "', m1 + 1, end)
    at = np.flatnonzero(detected)
    if at.size == a.size:  # the end of the value before status
        s_after = _find(a, b'"', m1 + 21, end)
    else:
        s_after = m1.copy()
        if at.size:
            s_after[at] = _find(a[at], b'"', m1[at] + 21, end[at])
    s1 = _find(a, b'"', s_after + 1 + len(status), end)
    d1 = _find(a, b'"', s1 + 1 + len(digest), end)
    ok = ((sp > 0) & (u1 >= 0) & (m1 >= 0) & (s_after >= 0) & (s1 >= 0) & (d1 >= 0)
          & np.strings.startswith(a, url, sp + 15, end) & np.strings.startswith(a, mime, u1 + 1, end)
          & np.strings.startswith(a, status, s_after + 1, end) & np.strings.startswith(a, digest, s1 + 1, end))
    ok &= _find(a, b"\\", 0, np.maximum(d1, 0)) < 0
    got = {"key": (np.zeros_like(sp), sp), "timestamp": (sp + 1, sp + 15), "url": (sp + 15 + len(url), u1),
           "mime": (u1 + 1 + len(mime), m1), "status": (s_after + 1 + len(status), s1),
           "digest": (s1 + 1 + len(digest), d1)}
    other = np.flatnonzero(~ok)
    if other.size:
        more, ok[other] = _cdxj_fields_any(a[other], end[other])
        for name, (s, e) in more.items():
            got[name][0][other] = s
            got[name][1][other] = e
    return got, ok


def _cdxj_fields_any(a: np.ndarray, end: np.ndarray) -> tuple[dict, np.ndarray]:
    """:func:`_cdxj_fields` of lines in any key order: each key found after the previous
    value (first tried right after it), else anywhere in the object."""
    sp = _find(a, b" ", 0, end)
    ok = (sp > 0) & np.strings.startswith(a, b" {", sp + 15, end)
    j = sp + 16
    got = {"key": (np.zeros_like(sp), sp), "timestamp": (sp + 1, sp + 15)}
    first = np.strings.startswith(a, b'{"url": "', j, end)
    u0 = np.where(first, j + 9, -1)
    miss = np.flatnonzero(~first)
    if miss.size:
        at = _find(a[miss], b'"url": "', j[miss], end[miss])
        u0[miss] = np.where(at >= 0, at + 8, -1)
    u1 = np.where(u0 < 0, -1, _find(a, b'"', np.maximum(u0, 0), end))
    got["url"] = (u0, u1)
    prev, last = u1, u1
    for name in (b"mime", b"status", b"digest"):
        v0, v1 = _value(a, end, name, np.maximum(prev, j), j)
        got[name.decode()] = (v0, v1)
        prev = np.where(v1 >= 0, v1, prev)
        last = np.maximum(last, v1)
        ok &= v1 >= 0
    ok &= (u1 >= 0) & (_find(a, b"\\", 0, np.maximum(last, 0)) < 0)
    return got, ok


def _cdx_fields(fields: tuple, exact: bool):
    """The field finder of space-separated CDX lines with ``fields`` in order."""
    need = max(fields.index(f) for f in ("key", "timestamp", "url", "status", "digest", "mime") if f in fields)

    def find_fields(a: np.ndarray, end: np.ndarray, whole: np.ndarray) -> tuple[dict, np.ndarray]:
        count = np.strings.count(a, b" ", 0, end) + 1
        ok = whole & ((count == len(fields)) if exact else (count >= len(fields)))
        got, prev = {}, np.zeros(a.size, np.int64)
        for j in range(need + 1):
            nxt = _find(a, b" ", prev, end)
            nxt = np.where(nxt < 0, end, nxt)
            ok &= nxt > prev
            got[fields[j]] = (prev, nxt)
            prev = nxt + 1
        return got, ok
    return find_fields


def _segments(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, finder) -> tuple[_Segs, np.ndarray]:
    seg, fit = _by_width(buf, starts, ends, finder)
    ts = seg["timestamp"]
    return _Segs(key=seg["key"], ts=ts[0], ts_len=ts[1] - ts[0], url=seg["url"], mime=seg.get("mime"),
                 status=seg["status"], digest=seg["digest"]), fit


def _compact(status: np.ndarray, revisit: np.ndarray, columns, urls) -> tuple:
    """``(kinds, columns, firsts)`` of captures: counts by kind, the columns of the successes
    (``columns(index)``: the key hash, time and digest hash of the captures at ``index``), and
    the candidates for each page's earliest success with their URL (``urls(index)``)."""
    success = (status == 200) | (revisit & ((status == -1) | (status == 304)))
    redirect = (status >= 300) & (status < 400)
    kinds = {"ok": int(np.sum(success & ~revisit)), "revisit": int(np.sum(success & revisit)),
             "redirect": int(np.sum(~success & redirect)), "error": int(np.sum(~success & ~redirect))}
    idx = np.flatnonzero(success)
    if not idx.size:
        return kinds, None, None
    k, t, digest = columns(idx)
    # a page's earliest capture in a run of its captures starts the run or is earlier than the one before
    head = np.flatnonzero(np.concatenate([[True], (k[1:] != k[:-1]) | (t[1:] < t[:-1])]))
    return kinds, (k, t, digest, revisit[idx]), (k[head], t[head], urls(idx[head]))


class _Captures:
    """The compact columns of every successful capture read so far, and per page the URL of
    its earliest one."""

    def __init__(self):
        self.cols: list[list] = [[], [], [], []]  # key, time, digest, revisit: one array per block
        self.firsts: list[tuple] = []
        self.kinds = {"ok": 0, "revisit": 0, "redirect": 0, "error": 0}
        self.pending = self.merged = 0

    def add(self, key: np.ndarray, time: np.ndarray, digest: np.ndarray, status: np.ndarray,
            revisit: np.ndarray, urls) -> None:
        """``urls(index)``: the URL text of the captures at ``index``."""
        self.extend(_compact(status, revisit, lambda i: (key[i], time[i], digest[i]), urls))

    def extend(self, part: tuple) -> None:
        """Add a :func:`_compact` result."""
        kinds, cols, firsts = part
        for k, v in kinds.items():
            self.kinds[k] += v
        if cols is None:
            return
        for parts, col in zip(self.cols, cols):
            parts.append(col)
        self.firsts.append(firsts)
        self.pending += firsts[0].size
        if self.pending > max(self.merged, 1 << 20):
            self.merge_firsts()

    def merge_firsts(self) -> None:
        """Keep one earliest URL per page (bounded: text once per page)."""
        if self.pending:
            k, t, u = (np.concatenate(c) for c in zip(*self.firsts))
            order, k_sorted, _ = _by_key_then_time(k, t)
            head = order[np.concatenate([[True], k_sorted[1:] != k_sorted[:-1]])]
            self.firsts = [(k[head], t[head], u[head])]
        self.merged = sum(f[0].size for f in self.firsts)
        self.pending = 0


def _decode(values: np.ndarray) -> np.ndarray:
    """UTF-8 text (invalid bytes replaced) of an object array of ``bytes``: all of them decoded
    as one string, split at a separator none of them holds (else one at a time)."""
    items = values.tolist()
    text = b"\n".join(items).decode("utf-8", errors="replace").split("\n")
    if len(text) != len(items):
        text = [b.decode("utf-8", errors="replace") for b in items]
    arr = np.empty(len(items), object)
    arr[:] = text
    return arr


def _blocks(fh, block: int, buffers: int = 1) -> Iterable[tuple[np.ndarray, int]]:
    """``(buffer, n)``: the file's bytes read into ``buffers`` buffers in turn, ``buffer[:n]``
    whole lines (the last given a final newline), followed by at least ``_PAD`` bytes (that
    fixed-width windows stay inside it); a buffer is overwritten ``buffers`` blocks later."""
    ring = [np.zeros(block + _PAD, np.uint8) for _ in range(buffers)]
    turn = 0
    arr = ring[0]
    have, eof = 0, False
    while not eof:
        if have >= block:  # one line longer than a block: a larger buffer
            arr = np.concatenate([arr[:have], np.zeros(block + _PAD, np.uint8)])
            block = arr.size - _PAD
        while have < block:
            got = fh.readinto(memoryview(arr)[have:block])
            if not got:
                eof = True
                break
            have += got
        if eof:
            if have and arr[have - 1] != 10:
                arr[have] = 10
                have += 1
            cut = have
        else:
            lo = max(0, have - 65536)
            nl = np.flatnonzero(arr[lo:have] == 10)
            if not nl.size:
                nl = np.flatnonzero(arr[:have] == 10)
                lo = 0
            if not nl.size:
                continue
            cut = lo + int(nl[-1]) + 1
        if cut:
            yield arr, cut
        rest = have - cut
        turn = (turn + 1) % buffers
        nxt = ring[turn] if ring[turn].size >= arr.size else np.zeros(arr.size, np.uint8)
        ring[turn] = nxt
        nxt[:rest] = arr[cut:have]
        arr, have = nxt, rest
        block = arr.size - _PAD


def _sniff(path: str) -> tuple[str, tuple, bool]:
    """The file's kind: ``("cdxj", ...)`` or ``("cdx", fields, exact)`` from its first line."""
    with open_read(path) as fh:
        head = fh.read(65536)
    for raw in head.split(b"\n"):
        line = raw.rstrip(b"\r")
        if not line.strip() or line.startswith(b"!"):
            continue
        if line.startswith((b" CDX ", b"CDX ")):
            letters = line.split()[1:]
            fields = tuple(_CDX_LETTERS.get(c.decode("latin-1"), f"_{j}") for j, c in enumerate(letters))
            missing = [c for c, f in _CDX_LETTERS.items() if f not in fields and c != "m"]
            if missing:
                raise TableError(path, 1, f"the CDX header {line.decode('latin-1')!r} lacks the field letters "
                                 f"{' '.join(missing)} (N key, b timestamp, a url, s status, k digest)",
                                 reason="bad header")
            return "cdx", fields, True
        parts = line.split(b" ", 2)
        if len(parts) == 3 and parts[2].startswith(b"{"):
            return "cdxj", (), False
        return "cdx", _DEFAULT_CDX, False
    return "cdxj", (), False


def _parse_block(buf: np.ndarray, size: int, kind: str, finder) -> tuple:
    """The block-parsed captures of ``buf[:size]`` (a :func:`_compact` result), its line
    bounds, counts of blank and header lines, and the lines left to the line parser."""
    starts, ends = _line_bounds(buf, size)
    blank = ends == starts
    meta = (buf[starts] == 33) & ~blank
    if kind == "cdx":
        meta |= ~blank & (_equals(buf, starts, starts + 4, b" CDX") | _equals(buf, starts, starts + 4, b"CDX "))
    g, fit = _segments(buf, starts, ends, finder)
    v, ok = _values(buf, g)
    ok &= fit & ~blank & ~meta
    fast = np.flatnonzero(ok)
    slow = np.flatnonzero(~ok & ~blank & ~meta)

    def take(a):  # the block-parsed lines' values (all of them, as a rule)
        return a if fast.size == starts.size else a[fast]
    k0, k1, d0, d1, time, nodigest = (take(a) for a in (*g.key, *g.digest, v["time"], v["nodigest"]))

    def columns(i):  # the hashes of the successes only
        dig = _hash_segments(buf, d0[i], d1[i] - d0[i])
        return _hash_segments(buf, k0[i], k1[i] - k0[i]), time[i], np.where(nodigest[i], _MISSING, dig)
    us, ue = take(g.url[0]), take(g.url[1])
    part = _compact(take(v["status"]), take(v["revisit"]), columns, lambda i: _decode(_texts(buf, us[i], ue[i])))
    return part, starts.size, int(blank.sum()), int(meta.sum()), fast.size, starts[slow], ends[slow], slow


def _read_cdx_file(path: str, log: RowLog, caps: _Captures, block: int) -> None:
    """Blocks are parsed by two threads (NumPy releases the GIL) while the next is read;
    their results are taken in file order, with the lines left to the line parser."""
    kind, fields, exact = _sniff(path)
    finder = _cdxj_fields if kind == "cdxj" else _cdx_fields(fields, exact)
    line_no = 0
    pending: deque = deque()

    def finish():
        nonlocal line_no
        future, buf = pending.popleft()
        part, nlines, blank, meta, fast, s0, s1, slow = future.result()
        log.blank += blank
        log.header += meta
        log.rows_read += fast
        caps.extend(part)
        if slow.size:
            _slow_lines(memoryview(buf), s0, s1, line_no + 1 + slow, kind, fields, exact, log, caps)
        line_no += nlines

    with open_read(path) as fh, ThreadPoolExecutor(_THREADS) as pool:
        try:
            for buf, size in _blocks(fh, block, _THREADS + 1):
                pending.append((pool.submit(_parse_block, buf, size, kind, finder), buf))
                if len(pending) >= _THREADS:
                    finish()
            while pending:
                finish()
        finally:
            for future, _ in pending:
                future.cancel()
    caps.merge_firsts()


def _slow_lines(data, starts, ends, lines, kind, fields, exact, log, caps) -> None:
    """The lines the block parser did not take: parsed one at a time (an error names the line)."""
    got = []
    for s, e, n in zip(starts.tolist(), ends.tolist(), lines.tolist()):
        line = bytes(data[s:e])
        try:
            got.append(_parse_cdxj(line) if kind == "cdxj" else _parse_cdx(line, fields, exact))
        except RowError as err:
            log.bad(n, err)
    if got:
        log.rows_read += len(got)
        _add_values(caps, got)


def _add_values(caps: _Captures, got: list[tuple]) -> None:
    """Captures of parsed fields ``(key, timestamp, url, mime, status, digest)`` (bytes); the
    timestamp may be int64 microseconds already."""
    key, ts, url, mime, status, digest = zip(*got)
    if isinstance(ts[0], bytes):
        time, _ = _text_epoch_us(ts)
    else:
        time = np.asarray(ts, np.int64)
    st = np.array([-1 if s == b"-" else int(s) for s in status], np.int64)
    dig = np.where(np.array([d == b"-" for d in digest]), _MISSING, _hash_values(digest))
    revisit = np.array([m == b"warc/revisit" for m in mime], bool)
    urls = np.empty(len(url), object)
    urls[:] = url
    caps.add(_hash_values(key), time, dig, st, revisit, lambda i: _decode(urls[i]))


# ------------------------------------------------------------------------ pairing
def _stable_argsort(key: np.ndarray) -> np.ndarray:
    """``np.argsort(key, kind="stable")``, sorting only the first of each run of equal keys
    (a file sorted by SURT key holds each page's captures in one run)."""
    head = np.flatnonzero(np.concatenate([[True], key[1:] != key[:-1]]))
    if head.size > key.size // 2:
        return np.argsort(key, kind="stable")
    runs = np.argsort(key[head], kind="stable")
    length = np.diff(np.append(head, key.size))[runs]
    first = np.cumsum(length) - length  # where each run lands
    order = np.repeat(head[runs] - first, length)
    order += np.arange(key.size)
    return order


def _by_key_then_time(key: np.ndarray, time: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``order = np.lexsort((time, key))`` by stable sorts (by key alone when that leaves each
    key's times in order: captures read in time order, one file or files given oldest first),
    and ``key[order]``, ``time[order]``."""
    order = _stable_argsort(key)
    k, t = key[order], time[order]
    if np.any((k[1:] == k[:-1]) & (t[1:] < t[:-1])):
        order = np.argsort(time, kind="stable")
        order = order[np.argsort(key[order], kind="stable")]
        k, t = key[order], time[order]
    return order, k, t


def _pair(caps: _Captures, unit: str, dtype) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict]:
    """Page order, intervals, changes and offsets of the successful captures (module docstring)."""
    counts: dict[str, int] = dict(caps.kinds)
    dtypes = (np.uint64, np.int64, np.uint64, bool)

    def column(j):  # one column of every block, the blocks' arrays freed as it is built
        parts, caps.cols[j] = caps.cols[j], []
        return np.concatenate(parts) if parts else np.zeros(0, dtypes[j])

    firsts_k, firsts_t, firsts_u = (np.concatenate(c) for c in zip(*caps.firsts)) if caps.firsts else (
        np.zeros(0, np.uint64), np.zeros(0, np.int64), np.zeros(0, object))
    key, time = column(0), column(1)
    same_page = key[1:] == key[:-1]
    # as read: each page's captures one run (as many runs as pages, firsts being merged), in time order
    as_read = caps.pending == 0 and np.count_nonzero(~same_page) + min(key.size, 1) == firsts_k.size and not (
        np.any(same_page & (time[1:] < time[:-1])))
    if as_read:  # pages in the order read (sorted by key below)
        dig, rev = column(2), column(3)
    else:
        order, key, time = _by_key_then_time(key, time)
        dig = column(2)[order]
        rev = column(3)[order]
        del order
    del same_page
    dup = np.concatenate([[False], (key[1:] == key[:-1]) & (time[1:] == time[:-1])])
    counts["duplicate"] = int(dup.sum())
    counts["same_time_conflicts"] = 0
    if counts["duplicate"]:  # captures at one time: a response first, a missing digest last, then by digest
        group = np.cumsum(~dup) - 1  # each page and time
        tied = np.flatnonzero(dup | np.concatenate([dup[1:], [False]]))
        sub = tied[np.lexsort((dig[tied], dig[tied] == _MISSING, rev[tied], group[tied]))]
        dig[tied] = dig[sub]
        head_dig = dig[np.flatnonzero(~dup)][group]
        conflict = dup & (dig != head_dig) & (dig != _MISSING) & (head_dig != _MISSING)
        counts["same_time_conflicts"] = int(np.unique(group[conflict]).size)
        key, time, dig = key[~dup], time[~dup], dig[~dup]
    del rev
    counts["revisit_without_reference"] = 0
    if np.any(dig == _MISSING):  # a revisit without digest repeats the page's previous success
        new_page = np.concatenate([[True], key[1:] != key[:-1]])
        page_start = np.maximum.accumulate(np.where(new_page, np.arange(key.size), 0))
        ref = np.maximum.accumulate(np.where(dig != _MISSING, np.arange(key.size), -1))
        resolved = ref >= page_start
        counts["revisit_without_reference"] = int(np.sum(~resolved))
        key, time, dig = key[resolved], time[resolved], dig[ref[resolved]]
    prev = np.flatnonzero(key[1:] == key[:-1])  # a capture before one of its page
    obs = prev + 1
    changed = dig[obs] != dig[prev]
    gap = time[obs]
    gap -= time[prev]
    del prev
    interval = np.divide(gap, unit_seconds(unit) * 1e6, out=gap.view(np.float64)).astype(dtype, copy=False)
    del gap
    obs_key = key[obs]  # each page's observations are one run
    del key, time, dig
    first_obs = np.flatnonzero(np.concatenate([[True], obs_key[1:] != obs_key[:-1]])) if obs.size else obs
    pages = obs_key[first_obs]
    count = np.diff(np.concatenate([first_obs, [obs.size]]))
    del obs, obs_key
    if as_read:  # the pages by key, as sorted captures give them
        by_key = np.argsort(pages)
        pages, first_obs, count = pages[by_key], first_obs[by_key], count[by_key]
        del by_key
    at = np.searchsorted(firsts_k, pages)  # merge_firsts leaves them sorted by key
    # pages in order of their first success (ties by key hash)
    counts["pages_without_observation"] = int(firsts_k.size - pages.size)
    page_order = np.argsort(firsts_t[at], kind="stable")  # pages are sorted: ties by key hash
    offsets = np.concatenate([[0], np.cumsum(count[page_order])]).astype(np.int64)
    # observations of each page are contiguous: gather them page by page order
    src = np.repeat(first_obs[page_order], count[page_order]) + (
        np.arange(offsets[-1]) - np.repeat(offsets[:-1], count[page_order]))
    return firsts_u[at[page_order]], interval[src], changed[src], offsets, counts


def _histories(caps: _Captures, log_reports: list, paths: list[str], unit: str, dtype) -> Histories:
    page_id, interval, changed, offsets, counts = _pair(caps, unit, dtype)
    reasons: dict[str, int] = {}
    for r in log_reports:
        for k, v in r.reasons.items():
            reasons[k] = reasons.get(k, 0) + v
    report = ArchiveReport(", ".join(paths), sum(r.rows_read for r in log_reports),
                           sum(r.rows_skipped for r in log_reports), reasons, sum(r.blank for r in log_reports),
                           sum(r.header for r in log_reports),
                           tuple(e for r in log_reports for e in r.examples)[:10], counts)
    n = page_id.size
    return Histories(page_id, np.full(n, np.nan), interval, changed, offsets, np.zeros(n, bool),
                     np.full(n, np.nan), report.path, report)


def _paths(paths) -> list[str]:
    paths = [os.fspath(paths)] if isinstance(paths, (str, os.PathLike)) else [os.fspath(p) for p in paths]
    if not paths:
        raise ValueError("no archive files given")
    for p in paths:
        if not os.path.exists(p):
            raise ValueError(f"{p}: no such file")
        if os.path.isdir(p):
            raise ValueError(f"{p}: is a directory; give the archive files")
    return paths


def read_cdx(paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], *, errors: str = "raise",
             unit: str = "days", dtype: type = np.float64, hint: str = "",
             block_bytes: int = _BLOCK) -> Histories:
    """Crawl histories from CDXJ or classic CDX capture indexes (``.gz`` too).

    A CDXJ line is ``SURTKEY YYYYMMDDhhmmss {json}`` with ``url``, ``status``, ``digest``
    and ``mime`` (pywb, Common Crawl); a classic CDX file is space-separated, with the
    fields named by a header line `` CDX N b a m s k ...`` (``N`` key, ``b`` timestamp,
    ``a`` url, ``m`` mime, ``s`` status, ``k`` digest) or, without one, in the order
    ``urlkey timestamp original mimetype statuscode digest ...``.  Several files (crawls)
    are merged; the pairing rules are the module's (redirects and errors give no
    observation, revisits repeat a digest, one capture per page and time).

    Args:
      paths: one file or several.
      errors: ``"raise"``: a malformed line raises :class:`~jaxcrawl.io.TableError`
        ``file:line: message`` naming the field and the rule; ``"skip"``: such lines are
        counted by reason in ``report`` and left out.
      unit: the unit of the intervals (``seconds``, ``minutes``, ``hours``, ``days``).
      dtype: float dtype of the intervals.
      hint: appended to a malformed line's error.
      block_bytes: bytes parsed at a time (memory: a few times this, plus 25 bytes per
        successful capture and the URL of each page).

    Returns:
      :class:`~jaxcrawl.io.Histories`: ``page_id`` the URL of each page's first success,
      pages in order of their first success; ``report`` an ``ArchiveReport`` (a
      ``FileReport``'s counts over all files, and ``captures``: counts by kind).
    """
    paths = _paths(paths)
    unit_seconds(unit)
    caps, logs = _Captures(), []
    for p in paths:
        log = RowLog(p, errors, hint or "(pass errors='skip' to count and skip malformed lines)")
        _read_cdx_file(p, log, caps, max(int(block_bytes), 1024))
        logs.append(log)
    return _histories(caps, logs, paths, unit, dtype)


# ------------------------------------------------------------------------ WARC
def _surt_key(url: str) -> str:
    """The SURT key of a URL (lowercase, scheme, ``www.`` and the default port dropped,
    host labels reversed, query arguments sorted): ``http://www.Example.com/a?b=1&a=2`` ->
    ``com,example)/a?a=2&b=1``."""
    u = urlsplit(url.strip())
    host = (u.hostname or "").rstrip(".")
    labels = host.split(".")
    if len(labels) > 2 and labels[0].startswith("www") and (labels[0][3:] == "" or labels[0][3:].isdigit()):
        labels = labels[1:]
    try:
        port = u.port
    except ValueError:
        port = None
    keep_port = port is not None and port != {"http": 80, "https": 443}.get(u.scheme.lower())
    query = "&".join(sorted(u.query.split("&"))) if u.query else ""
    return (",".join(reversed(labels)) + (f":{port}" if keep_port else "") + ")" + (u.path or "/")
            + (f"?{query}" if query else "")).lower()


def _warc_records(path: str, log: RowLog, counts: dict) -> list[tuple]:
    from warcio.archiveiterator import ArchiveIterator

    got = []
    with open(path, "rb") as fh:
        records = ArchiveIterator(fh)
        for number, rec in enumerate(records, 1):
            kind = rec.rec_type
            if kind not in ("response", "revisit"):
                counts[kind] = counts.get(kind, 0) + 1
                continue
            h = rec.rec_headers
            try:
                uri, date = h.get_header("WARC-Target-URI"), h.get_header("WARC-Date")
                if not uri:
                    raise RowError("missing WARC-Target-URI", "the record has no WARC-Target-URI", "WARC-Target-URI")
                try:
                    when = _dt.datetime.fromisoformat(date.replace("Z", "+00:00"))
                except (ValueError, AttributeError):
                    raise RowError("bad WARC-Date", f"WARC-Date must be ISO 8601 UTC; got {date!r}",
                                   "WARC-Date") from None
                if when.tzinfo is None:
                    when = when.replace(tzinfo=_dt.timezone.utc)
                status = rec.http_headers.get_statuscode() if rec.http_headers is not None else None
                status = (status or "-").encode()
                digest = h.get_header("WARC-Payload-Digest")
                if not digest and kind == "response":
                    digest = "sha1:" + base64.b32encode(hashlib.sha1(rec.content_stream().read()).digest()).decode()
                mime = b"warc/revisit" if kind == "revisit" else b""
                key = _surt_key(uri).encode()
                us = int((when - _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)) / _dt.timedelta(microseconds=1))
                got.append(_check_warc(key, us, uri.encode(), mime, status, (digest or "-").encode()))
                log.rows_read += 1
            except RowError as err:
                if log.errors == "raise":
                    raise TableError(path, None, f"record {number} ({kind}, at byte {records.get_record_offset()}): "
                                     f"{err.message}", column=err.column, reason=err.reason, hint=log.hint) from None
                log.bad(number, err)
    return got


def _check_warc(key, us, url, mime, status, digest) -> tuple:
    if not (status == b"-" or (len(status) == 3 and status.isdigit())):
        raise RowError("bad status", f"HTTP status must be 3 digits; got {status[:40]!r}", "status")
    return key, us, url, mime, status, digest


def read_warc(paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], *, errors: str = "raise",
              unit: str = "days", dtype: type = np.float64, hint: str = "") -> Histories:
    """Crawl histories from WARC files (``.warc``, ``.warc.gz``; needs the ``archives`` extra,
    warcio).

    ``response`` and ``revisit`` records are captures: the page is the SURT key of
    ``WARC-Target-URI`` (:func:`_surt_key`), the time ``WARC-Date`` (to the microsecond), the
    status the record's HTTP status line (``-`` without one), the digest
    ``WARC-Payload-Digest`` (the SHA-1 of the payload when a response lacks it).  Other
    records are counted in ``report.captures`` and passed over.  The pairing rules are
    :func:`read_cdx`'s.  Arguments as :func:`read_cdx`.
    """
    try:
        import warcio  # noqa: F401
    except ImportError:
        raise ImportError('reading WARC files needs warcio: pip install "jaxcrawl[archives]"') from None
    paths = _paths(paths)
    unit_seconds(unit)
    caps, logs, other = _Captures(), [], {}
    for p in paths:
        log = RowLog(p, errors, hint or "(pass errors='skip' to count and skip malformed records)", unit="record")
        got = _warc_records(p, log, other)
        if got:
            _add_values(caps, got)
        caps.merge_firsts()
        logs.append(log)
    h = _histories(caps, logs, paths, unit, dtype)
    h.report.captures.update({f"{k}_records": v for k, v in other.items()})
    return h
