"""The files a crawler ingests: URLFrontier JSON Lines and Apache Nutch injector seed lists
(one line per page, pages with rate 0 left out and counted).

* **URLFrontier** (crawler-commons' URL Frontier API, ``urlfrontier.proto`` of release 2.6):
  each line is the canonical proto3 JSON of a ``URLItem`` holding a ``KnownURLItem`` (what
  the reference client's ``PutURLs`` parses with ``JsonFormat.parser()``)::

      {"known":{"info":{"url":URL,"key":QUEUE_KEY,"metadata":{NAME:{"values":[TEXT]},...}},
                "refetchableFromDate":"EPOCH_SECONDS"}}

  ``refetchableFromDate`` (the proto's ``uint64 refetchable_from_date``; proto3 JSON writes
  64-bit integers as decimal strings) is the page's next fetch from the plan, in whole
  seconds of UTC time since 1970-01-01, rounded up so a page is never due early, and at
  most ``MAX_REFETCH_DATE``; ``key`` is the queue (the URL's host, or the page's host
  id); ``metadata`` maps a name to a ``StringList``: ``jaxcrawl.rate`` (crawls per unit),
  ``jaxcrawl.interval_seconds`` (the revisit interval) and ``jaxcrawl.time_unit``.  Fields
  at their proto3 default (an empty ``crawlID``: the default crawl) are left out, as the
  canonical printer leaves them out.
* **Nutch seed list** (``bin/nutch inject``'s URL files, Nutch 1.x ``Injector``): ``URL <TAB>
  nutch.fetchInterval=SECONDS`` -- one URL a line followed by tab-separated ``key=value``
  metadata; ``nutch.fetchInterval`` is the page's custom fetch interval, a Java ``int``
  number of seconds (``1 / rate`` in seconds, rounded to the nearest second, in
  ``[1, MAX_FETCH_INTERVAL]``).
"""
from __future__ import annotations

import gzip
import json
import os
import re
from typing import NamedTuple

import numpy as np
from jax.typing import ArrayLike

from .._src.fileio import atomic_write
from .._src.hostmap import url_host
from .._src.timeunits import iso_utc, unit_seconds
from ._schema import PathLike

#: The latest ``refetchable_from_date`` written, 9999999999 s (2286-11-20T17:46:39Z): the
#: frontier services hold the date in a Java ``long`` and the RocksDB service orders its
#: queues by the date's decimal text padded to 10 digits, so a later date would be served
#: first.  Later next fetches (tiny rates) are written as this date and counted.
MAX_REFETCH_DATE = 9_999_999_999

#: The largest ``nutch.fetchInterval`` written, Java's ``Integer.MAX_VALUE`` seconds (about
#: 68 years): the injector reads it with ``Integer.parseInt`` and ignores a larger value
#: (keeping ``db.fetch.interval.default``).  Longer intervals are written as this and counted.
MAX_FETCH_INTERVAL = 2**31 - 1


#: The longest queue key (Java characters) the URLFrontier services accept; they skip an item
#: with a longer one.
MAX_KEY_LENGTH = 255


class CrawlerFile(NamedTuple):
    """What a crawler-file writer wrote: ``num_urls`` lines, ``num_clamped`` of them with a
    date or interval clamped to the format's largest value."""

    num_urls: int
    num_clamped: int


def _write_lines(path: PathLike, lines, gz: bool) -> None:
    def write(tmp: str) -> None:
        with (gzip.open(tmp, "wt", encoding="utf-8", newline="") if gz
              else open(tmp, "w", encoding="utf-8", newline="")) as fh:
            for block in lines:
                fh.write(block)

    atomic_write(path, write)


def _text_ids(ids: ArrayLike) -> list[str]:
    return [str(x) for x in np.asarray(ids).tolist()]


def _check_rates(rate: np.ndarray, ids: list[str]) -> None:
    """Rates must be finite and >= 0, one per page (``ValueError`` naming the first bad page)."""
    if rate.shape != (len(ids),):
        raise ValueError(f"rate must have one value per URL, shape ({len(ids)},); got {rate.shape}")
    bad = np.flatnonzero(~(np.isfinite(rate) & (rate >= 0)))
    if bad.size:
        raise ValueError(f"rate must be finite and >= 0; page {ids[bad[0]]!r} has {float(rate[bad[0]])!r} "
                         f"({bad.size} such pages)")


def _string_list(value: str) -> str:
    return '{"values":[' + _quote(value) + "]}"


_quote = json.encoder.encode_basestring_ascii  # json.dumps of one string, without the call's overhead

# a URL whose host ``urllib.parse.urlsplit`` reads as written: scheme://host[:port] then /, ?, #
# or the end, the host of letters, digits, dots and dashes, no whitespace anywhere
_PLAIN_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://([A-Za-z0-9.-]+)(?::[0-9]*)?(?:[/?#]|\Z)")
_SPACE = re.compile(r"[\x00-\x20]")


def _queue_key(url: str) -> str:
    """The URL's lower-cased host name (``url_host``, without ``urlsplit`` for plain URLs), or
    the URL itself when it has none; ``ValueError`` naming a URL ``urlsplit`` refuses."""
    m = _PLAIN_URL.match(url)
    if m is not None and _SPACE.search(url) is None:
        return m.group(1).lower()
    try:
        return url_host(url) or url
    except ValueError as err:  # urlsplit: e.g. an unclosed IPv6 bracket
        raise ValueError(f"{err}; give its queue key (--hosts)") from None  # err names the page


def write_urlfrontier(path: PathLike, url: ArrayLike, rate: ArrayLike, next_epoch: ArrayLike, *,
                      unit: str = "days", key: ArrayLike | None = None, crawl_id: str = "",
                      chunk: int = 1 << 16) -> CrawlerFile:
    """Write a URLFrontier JSON Lines file (module docstring): one ``KnownURLItem`` per page
    with rate > 0, atomically.

    Args:
      path: the file (``.gz``: gzip).
      url: ``(n,)`` page URLs (page ids).
      rate: ``(n,)`` crawl rates per ``unit``.
      next_epoch: ``(n,)`` next fetch time, epoch seconds (float64); ``inf`` (a rate too
        small for a finite date) or any date past ``MAX_REFETCH_DATE`` is written as
        ``MAX_REFETCH_DATE``.
      unit: the rates' time unit.
      key: ``(n,)`` queue keys (default, and for an empty key: the URL's host name, or the URL
        itself).
      crawl_id: the ``crawlID`` of every item (default ``""``, the frontier's default crawl).

    Returns:
      a ``CrawlerFile`` ``(num_urls, num_clamped)``.

    Raises:
      ValueError: a rate that is not finite and >= 0, a next fetch that is NaN or before
        1970-01-01T00:00:01Z (``0`` means "never refetch" to the frontier), or a queue key
        longer than ``MAX_KEY_LENGTH``, naming the page; nothing is written.
    """
    r = np.asarray(rate, np.float64)
    t = np.asarray(next_epoch, np.float64)
    ids = _text_ids(url)
    _check_rates(r, ids)
    keep = np.flatnonzero(r > 0)
    keys = _text_ids(key) if key is not None else None
    tk = t[keep]
    with np.errstate(invalid="ignore"):
        bad = np.flatnonzero(~(np.ceil(tk - 1e-6) >= 1))
    if bad.size:
        i = int(keep[bad[0]])
        when = f"{t[i]!r} s" + (f" ({iso_utc(np.asarray([t[i]]))[0]})" if abs(t[i]) < 1e11 else "")
        raise ValueError(f"page {ids[i]!r}: next fetch {when} is not a URLFrontier refetchable_from_date "
                         f"(whole seconds >= 1 since 1970-01-01 UTC; 0 means never) -- {bad.size} such pages; "
                         "give a later --start")
    clamped = ~(tk <= MAX_REFETCH_DATE)
    due = np.where(clamped, MAX_REFETCH_DATE, np.ceil(np.minimum(tk, MAX_REFETCH_DATE) - 1e-6)).astype(np.int64)
    with np.errstate(divide="ignore", over="ignore"):
        interval = unit_seconds(unit) / r[keep]
    tail = ("}," if not crawl_id else ',"crawlID":' + json.dumps(str(crawl_id)) + "},")
    unit_meta = ',"jaxcrawl.time_unit":' + _string_list(unit) + "}"

    queue = [(keys[i] if keys is not None else "") or _queue_key(ids[i]) for i in keep.tolist()]
    for i, k in zip(keep.tolist(), queue):
        if len(k) > MAX_KEY_LENGTH // 2 and len(k.encode("utf-16-le")) > 2 * MAX_KEY_LENGTH:
            raise ValueError(f"page {ids[i]!r}: queue key {k[:40]!r}... is longer than {MAX_KEY_LENGTH} characters, "
                             "which the URLFrontier services skip; give the pages' hosts (--hosts)")

    def blocks():
        for s in range(0, keep.size, chunk):
            out = []
            for j in range(s, min(s + chunk, keep.size)):
                i = int(keep[j])
                u, k = ids[i], queue[j]
                out.append(
                    '{"known":{"info":{"url":' + _quote(u) + (',"key":' + _quote(k) if k else "")
                    + ',"metadata":{"jaxcrawl.rate":' + _string_list(repr(float(r[i])))
                    + ',"jaxcrawl.interval_seconds":' + _string_list(repr(float(interval[j])))
                    + unit_meta + tail + '"refetchableFromDate":"' + str(int(due[j])) + '"}}\n')
            yield "".join(out)

    _write_lines(path, blocks(), os.fspath(path).lower().endswith(".gz"))
    return CrawlerFile(int(keep.size), int(np.sum(clamped)))


def _java_trim(text: str) -> str:
    """``String.trim()``: strips every character <= U+0020 at both ends."""
    return text.strip("".join(map(chr, range(33))))


def write_nutch_seeds(path: PathLike, url: ArrayLike, rate: ArrayLike, *, unit: str = "days",
                      chunk: int = 1 << 16) -> CrawlerFile:
    """Write an Apache Nutch injector seed list (module docstring): ``URL<TAB>nutch.fetchInterval=S``
    for every page with rate > 0, atomically; ``S`` is clamped to ``[1, MAX_FETCH_INTERVAL]``.

    Returns a ``CrawlerFile`` ``(num_urls, num_clamped)`` (``num_clamped``: intervals
    longer than ``MAX_FETCH_INTERVAL``).  A rate that is not finite and >= 0, or a URL the
    injector would read differently -- holding a tab or a line break, empty, starting with
    ``#`` or with leading or trailing whitespace (the injector trims it) -- is a
    ``ValueError`` naming the page.
    """
    r = np.asarray(rate, np.float64)
    ids = _text_ids(url)
    _check_rates(r, ids)
    keep = np.flatnonzero(r > 0)
    with np.errstate(divide="ignore", over="ignore"):
        exact = np.rint(unit_seconds(unit) / r[keep])
    clamped = ~(exact <= MAX_FETCH_INTERVAL)
    seconds = np.clip(np.where(clamped, MAX_FETCH_INTERVAL, exact), 1, MAX_FETCH_INTERVAL).astype(np.int64)
    for i in keep.tolist():
        u = ids[i]
        if "\t" in u or "\n" in u or "\r" in u or not u or _java_trim(u) != u or u.startswith("#"):
            raise ValueError(f"page id {u!r} cannot be a Nutch seed URL (the injector splits lines at line breaks "
                             "and the URL at the first tab, trims whitespace, and skips empty and '#' lines)")

    def blocks():
        for s in range(0, keep.size, chunk):
            yield "".join(f"{ids[int(keep[j])]}\tnutch.fetchInterval={int(seconds[j])}\n"
                          for j in range(s, min(s + chunk, keep.size)))

    _write_lines(path, blocks(), os.fspath(path).lower().endswith(".gz"))
    return CrawlerFile(int(keep.size), int(np.sum(clamped)))
