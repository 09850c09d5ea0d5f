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
* **StormCrawler status index** (Apache StormCrawler's OpenSearch/Elasticsearch
  ``StatusUpdaterBolt`` and its ``status.mapping``): one document per line, as the bolt
  builds it::

      {"url":URL,"status":"DISCOVERED","metadata":{NAME:[TEXT],...},"key":HOST,
       "nextFetchDate":"2026-01-05T06:00:00.000Z"}

  ``status`` is ``DISCOVERED`` (what injected URLs get); ``nextFetchDate`` (a ``date`` in
  ``date_optional_time`` format) is the page's next fetch in UTC, rounded up to the
  millisecond, at most ``MAX_NEXT_FETCH_DATE``; ``key`` is the routing field
  (``status.routing.fieldname: "key"``): the host, as its ``URLPartitioner`` in ``byHost``
  mode gives it (a URL with no host: ``_DEFAULT_``); metadata names have their periods
  written ``%2E`` as the bolt writes them (``jaxcrawl%2Erate``...).  With ``bulk=True`` each
  document follows its ``_bulk`` action line ``{"index":{"_index":"status","_id":ID,
  "routing":HOST}}``, ``ID`` the SHA-256 hex of the URL (the bolt's document id), so a
  ``POST _bulk`` replaces the pages' status documents.
"""
from __future__ import annotations

import gzip
import json
import os
from typing import NamedTuple

import numpy as np
from jax.typing import ArrayLike

from .._src.bulk_text import arrow_text, first_match, float_repr, json_strings, url_host_codes, utf8_blocks
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


#: The latest ``nextFetchDate`` written, 9999-12-31T23:59:59.999Z (the last date of its
#: ``date_optional_time`` format); later next fetches are written as this date and counted.
MAX_NEXT_FETCH_DATE = 253_402_300_799.999

#: The routing key StormCrawler gives a URL whose host it cannot read.
DEFAULT_KEY = "_DEFAULT_"

#: The longest queue key (Java characters) the URLFrontier services accept; they skip an item
#: with a longer one.
MAX_KEY_LENGTH = 255


class CrawlerFile(NamedTuple):
    """What a crawler-file writer wrote: ``num_urls`` lines, ``num_clamped`` of them with a
    date or interval clamped to the format's largest value."""

    num_urls: int
    num_clamped: int


def _write_lines(path: PathLike, lines, gz: bool) -> None:
    def write(tmp: str) -> None:  # blocks of text: str, or UTF-8 bytes written as they are
        with gzip.open(tmp, "wb") if gz else open(tmp, "wb") as fh:
            for block in lines:
                fh.write(block if isinstance(block, bytes) else block.encode("utf-8"))

    atomic_write(path, write)


def _text_array(ids: ArrayLike, what: str = "url"):
    """An Arrow string array of ``str(x)`` for each id (:func:`arrow_text`); a
    ``pyarrow.DictionaryArray`` of strings is returned as it is (queue keys by host).  A
    missing URL is a ``ValueError`` naming the page."""
    import pyarrow as pa

    if isinstance(ids, pa.ChunkedArray):
        ids = ids.combine_chunks()
    if isinstance(ids, pa.DictionaryArray):
        if not pa.types.is_string(ids.dictionary.type):
            raise ValueError(f"{what} must be strings; got a dictionary of {ids.dictionary.type}")
        return ids
    text = arrow_text(ids, what)
    if what == "url" and text.null_count:
        first = int(np.flatnonzero(text.is_null().to_numpy(zero_copy_only=False))[0])
        raise ValueError(f"url: page {first} (counting from 0) has no URL (a missing value)")
    return text


def _check_rates(rate: np.ndarray, ids) -> None:
    """Rates must be finite and >= 0, one per page (``ValueError`` naming the first bad page)."""
    if rate.shape != (len(ids),):
        raise ValueError(f"rate must have one value per URL, shape ({len(ids)},); got {rate.shape}")
    bad = np.flatnonzero(~(np.isfinite(rate) & (rate >= 0)))
    if bad.size:
        raise ValueError(f"rate must be finite and >= 0; page {ids[int(bad[0])].as_py()!r} has "
                         f"{float(rate[bad[0]])!r} ({bad.size} such pages)")


def _string_list(value: str) -> str:
    return '{"values":[' + _quote(value) + "]}"


_quote = json.encoder.encode_basestring_ascii  # json.dumps of one string, without the call's overhead

def _queue_key(url: str) -> str:
    """The URL's host key (:func:`~jaxcrawl.io.canonical_host`, the host rule of caps, crawl
    delays and robots.txt: ``HTTP://WWW.Example.com.:80/`` is ``www.example.com``, a
    non-default port stays, ``example.com:8080``), or the URL itself when it has none;
    ``ValueError`` naming a URL that cannot be read."""
    try:
        return url_host(url) or url
    except ValueError as err:  # e.g. an unclosed IPv6 bracket, an empty label
        raise ValueError(f"{err}; give its queue key (--hosts)") from None  # err names the page


def _frontier_inputs(url, rate, next_epoch, key):
    """``(rate, next_epoch, url text, pages kept (rate > 0), key text or None)`` of a queue
    file's arguments, checked: rates finite and >= 0, one key per URL."""
    r = np.asarray(rate, np.float64)
    t = np.asarray(next_epoch, np.float64)
    ids = _text_array(url)
    _check_rates(r, ids)
    keys = _text_array(key, "key") if key is not None else None
    if keys is not None and len(keys) != len(ids):
        raise ValueError(f"key must have one value per URL, shape ({len(ids)},); got ({len(keys)},)")
    return r, t, ids, np.flatnonzero(r > 0), keys


def write_urlfrontier(path: PathLike, url: ArrayLike, rate: ArrayLike, next_epoch: ArrayLike, *,
                      unit: str = "days", key: ArrayLike | None = None, crawl_id: str = "",
                      on_signal: ArrayLike | None = None, chunk: int = 1 << 16) -> CrawlerFile:
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
      on_signal: ``(n,)`` True for a page crawled on its change signals (NeurIPS-19 Π°):
        its item carries ``"jaxcrawl.on_signal": ["true"]`` (its ``rate`` is then the
        planned rate of its signal-driven crawls, or its periodic crawls beside them).

    Returns:
      a ``CrawlerFile`` ``(num_urls, num_clamped)``.

    Raises:
      ValueError: a rate that is not finite and >= 0, a next fetch that is NaN or before
        1970-01-01T00:00:01Z (``0`` means "never refetch" to the frontier), or a queue key
        longer than ``MAX_KEY_LENGTH``, naming the page; nothing is written.
    """
    r, t, ids, keep, keys = _frontier_inputs(url, rate, next_epoch, key)
    pa, pc = _arrow()
    sig = np.zeros(len(ids), bool) if on_signal is None else np.broadcast_to(np.asarray(on_signal, bool), r.shape)
    tk = t[keep]
    with np.errstate(invalid="ignore"):
        bad = np.flatnonzero(~(np.ceil(tk - 1e-6) >= 1))
    if bad.size:
        i = int(keep[bad[0]])
        when = f"{t[i]!r} s" + (f" ({iso_utc(np.asarray([t[i]]))[0]})" if abs(t[i]) < 1e11 else "")
        raise ValueError(f"page {ids[i].as_py()!r}: next fetch {when} is not a URLFrontier refetchable_from_date "
                         f"(whole seconds >= 1 since 1970-01-01 UTC; 0 means never) -- {bad.size} such pages; "
                         "give a later --start")
    clamped = ~(tk <= MAX_REFETCH_DATE)
    due = np.where(clamped, MAX_REFETCH_DATE, np.ceil(np.minimum(tk, MAX_REFETCH_DATE) - 1e-6)).astype(np.int64)
    with np.errstate(divide="ignore", over="ignore"):
        interval = unit_seconds(unit) / r[keep]
    tail = ("}," if not crawl_id else ',"crawlID":' + json.dumps(str(crawl_id)) + "},")
    unit_meta = ',"jaxcrawl.time_unit":' + _string_list(unit) + "}"
    signal_meta = ',"jaxcrawl.on_signal":' + _string_list("true")
    if keys is not None:  # the given keys, checked once per distinct key
        given_keys = keys if isinstance(keys, pa.DictionaryArray) else pc.dictionary_encode(keys)
        _check_key_lengths(given_keys.dictionary.to_pylist(),
                           lambda k: int(np.flatnonzero(pc.equal(given_keys, k).to_numpy(zero_copy_only=False))[0]),
                           ids)
    else:
        given_keys = None

    def block_lines(part: slice):
        """The lines of the written pages ``keep[part]``, built column-wise
        (jaxcrawl._src.bulk_text); the queue keys (a few per host) found, checked and
        written once per distinct key of the block."""
        rows = keep[part]
        url_text = ids.take(pa.array(rows))
        keys, code, given = _block_keys(rows, url_text, given_keys)
        _check_key_lengths(keys[given:], lambda k: int(rows[np.flatnonzero(np.asarray(keys, object)[code] == k)[0]]),
                           ids)
        key_json = pc.take(pa.array([',"key":' + _quote(k) if k else "" for k in keys], pa.string()), pa.array(code))
        return pc.binary_join_element_wise(
            '{"known":{"info":{"url":', json_strings(url_text), key_json,
            ',"metadata":{"jaxcrawl.rate":{"values":["', float_repr(r[rows]),
            '"]},"jaxcrawl.interval_seconds":{"values":["', float_repr(interval[part]), '"]}',
            pc.if_else(pa.array(sig[rows]), signal_meta, ""), unit_meta + tail + '"refetchableFromDate":"',
            pc.cast(pa.array(due[part]), pa.string()), '"}}\n', "")

    _write_lines(path, _blocks(keep.size, block_lines, chunk), os.fspath(path).lower().endswith(".gz"))
    return CrawlerFile(int(keep.size), int(np.sum(clamped)))


def _block_keys(rows: np.ndarray, url_text, given_keys, hostless: str | None = None) -> tuple[list, np.ndarray, int]:
    """``(keys, code, given)``: the distinct queue keys of the written pages ``rows`` (their
    URLs ``url_text``) and each page's index into them.  A page's key is its given key
    (``given_keys``, a dictionary array over all pages; the first ``given`` keys are its
    dictionary), else its URL's host (:func:`_queue_key`'s rule); a URL with no host is its own
    key, or ``hostless`` when given.  Hosts are found once per distinct host of the block."""
    pa, pc = _arrow()
    if given_keys is None:
        dictionary, indices = [""], np.zeros(rows.size, np.int64)
    else:
        dictionary = given_keys.dictionary.to_pylist()
        indices = given_keys.indices.take(pa.array(rows)).fill_null(len(dictionary)).to_numpy(zero_copy_only=False)
        dictionary = dictionary + [""]  # a missing key: the URL's host
    need = np.asarray([not k for k in dictionary], bool)[indices]  # no key given: the URL's host, or the URL
    need_rows = np.flatnonzero(need)
    try:
        codes, hosts = url_host_codes(url_text.take(pa.array(need_rows)), url_host)
    except ValueError as err:  # e.g. an unclosed IPv6 bracket, an empty label
        raise ValueError(f"{err}; give its queue key (--hosts)") from None  # err names the page
    for c in np.flatnonzero(np.asarray([not h for h in hosts], bool)).tolist():  # no host
        at = np.flatnonzero(codes == c)
        hosts[c] = hostless if hostless is not None else url_text[int(need_rows[at[0]])].as_py()
        if at.size > 1 and hostless is None:  # several URLs behind one host-less prefix: each its own key
            codes[at[1:]] = len(hosts) + np.arange(at.size - 1)
            hosts += [url_text[int(need_rows[j])].as_py() for j in at[1:].tolist()]
    code = np.asarray(indices, np.int64).copy()
    code[need_rows] = len(dictionary) + codes
    return dictionary + hosts, code, len(dictionary)


#: Pages whose lines are built together (the memory of one block's text columns, about
#: half a kilobyte a page, bounds a writer's memory whatever the number of pages).
BLOCK_PAGES = 1 << 20


def _blocks(n: int, lines_of, chunk: int):
    """The UTF-8 blocks of the lines ``lines_of(part)`` of ``n`` written pages, built
    :data:`BLOCK_PAGES` at a time (``part``: a slice of the written pages)."""
    for s in range(0, n, BLOCK_PAGES):
        yield from utf8_blocks(lines_of(slice(s, min(s + BLOCK_PAGES, n))), chunk)


def _check_key_lengths(distinct: list, first_page_of, ids) -> None:
    """``ValueError`` naming a page whose queue key is longer than the services accept."""
    for k in distinct:
        if k and len(k) > MAX_KEY_LENGTH // 2 and len(k.encode("utf-16-le")) > 2 * MAX_KEY_LENGTH:
            raise ValueError(f"page {ids[first_page_of(k)].as_py()!r}: queue key {k[:40]!r}... is longer than "
                             f"{MAX_KEY_LENGTH} characters, which the URLFrontier services skip; give the "
                             "pages' hosts (--hosts)")


def _arrow():
    import pyarrow as pa
    import pyarrow.compute as pc

    return pa, pc


def _java_trim(text: str) -> str:
    """``String.trim()``: strips every character <= U+0020 at both ends."""
    return text.strip("".join(map(chr, range(33))))


def write_nutch_seeds(path: PathLike, url: ArrayLike, rate: ArrayLike, *, unit: str = "days",
                      on_signal: ArrayLike | None = None, chunk: int = 1 << 16) -> CrawlerFile:
    """Write an Apache Nutch injector seed list (module docstring): ``URL<TAB>nutch.fetchInterval=S``
    for every page with rate > 0, atomically; ``S`` is clamped to ``[1, MAX_FETCH_INTERVAL]``.
    A page flagged in ``on_signal`` (crawled on its change signals) also carries
    ``jaxcrawl.on_signal=true``, which the injector keeps as the page's metadata.

    Returns a ``CrawlerFile`` ``(num_urls, num_clamped)`` (``num_clamped``: intervals
    longer than ``MAX_FETCH_INTERVAL``).  A rate that is not finite and >= 0, or a URL the
    injector would read differently -- holding a tab or a line break, empty, starting with
    ``#`` or with leading or trailing whitespace (the injector trims it) -- is a
    ``ValueError`` naming the page.
    """
    r = np.asarray(rate, np.float64)
    pa, pc = _arrow()
    ids = _text_array(url)
    _check_rates(r, ids)
    keep = np.flatnonzero(r > 0)
    with np.errstate(divide="ignore", over="ignore"):
        exact = np.rint(unit_seconds(unit) / r[keep])
    clamped = ~(exact <= MAX_FETCH_INTERVAL)
    seconds = np.clip(np.where(clamped, MAX_FETCH_INTERVAL, exact), 1, MAX_FETCH_INTERVAL).astype(np.int64)
    sig = np.zeros(len(ids), bool) if on_signal is None else np.broadcast_to(np.asarray(on_signal, bool), r.shape)
    # a tab or line break anywhere, empty, a leading '#', or a character <= U+0020 at either end
    bad = first_match(ids.take(pa.array(keep)) if keep.size < len(ids) else ids,
                      r"[\t\n\r]|^$|^#|^[\x00-\x20]|[\x00-\x20]$")
    if bad is not None:
        u = ids[int(keep[bad])].as_py()
        raise ValueError(f"page id {u!r} cannot be a Nutch seed URL (the injector splits lines at line breaks "
                         "and the URL at the first tab, trims whitespace, and skips empty and '#' lines)")

    def block_lines(part: slice):
        rows = keep[part]
        return pc.binary_join_element_wise(
            ids.take(pa.array(rows)), "\tnutch.fetchInterval=", pc.cast(pa.array(seconds[part]), pa.string()),
            pc.if_else(pa.array(sig[rows]), "\tjaxcrawl.on_signal=true\n", "\n"), "")

    _write_lines(path, _blocks(keep.size, block_lines, chunk), os.fspath(path).lower().endswith(".gz"))
    return CrawlerFile(int(keep.size), int(np.sum(clamped)))


def write_stormcrawler(path: PathLike, url: ArrayLike, rate: ArrayLike, next_epoch: ArrayLike, *,
                       unit: str = "days", key: ArrayLike | None = None, on_signal: ArrayLike | None = None,
                       bulk: bool = False, index: str = "status", chunk: int = 1 << 16) -> CrawlerFile:
    """Write StormCrawler status documents as JSON Lines (module docstring), one per page
    with rate > 0, atomically; with ``bulk`` each after its ``_bulk`` action line.

    Args:
      path: the file (``.gz``: gzip).
      url: ``(n,)`` page URLs.
      rate: ``(n,)`` crawl rates per ``unit``.
      next_epoch: ``(n,)`` next fetch time, epoch seconds (float64); ``inf`` or any date past
        ``MAX_NEXT_FETCH_DATE`` is written as ``MAX_NEXT_FETCH_DATE``.
      unit: the rates' time unit.
      key: ``(n,)`` routing keys (default, and for an empty key: the URL's host, the host rule
        of the URLFrontier writer; a URL with no host: ``DEFAULT_KEY``).
      on_signal: ``(n,)`` True for a page crawled on its change signals: its document carries
        ``"jaxcrawl%2Eon_signal": ["true"]``.
      bulk: write the ``_bulk`` action line before each document.
      index: the status index's name in the action lines.

    Returns:
      a ``CrawlerFile`` ``(num_urls, num_clamped)``.

    Raises:
      ValueError: a rate that is not finite and >= 0 or a next fetch that is NaN or before
        1970-01-01, naming the page; nothing is written.
    """
    import hashlib

    r, t, ids, keep, keys = _frontier_inputs(url, rate, next_epoch, key)
    pa, pc = _arrow()
    given_keys = None if keys is None else keys if isinstance(keys, pa.DictionaryArray) else pc.dictionary_encode(keys)
    sig = np.zeros(len(ids), bool) if on_signal is None else np.broadcast_to(np.asarray(on_signal, bool), r.shape)
    tk = t[keep]
    bad = np.flatnonzero(~(tk >= 0))
    if bad.size:
        i = int(keep[bad[0]])
        raise ValueError(f"page {ids[i].as_py()!r}: next fetch {float(t[i])!r} s is not a StormCrawler nextFetchDate "
                         f"(a date from 1970-01-01 UTC on) -- {bad.size} such pages; give a later --start")
    clamped = ~(tk <= MAX_NEXT_FETCH_DATE)
    with np.errstate(invalid="ignore"):
        ms = np.where(clamped, np.floor(MAX_NEXT_FETCH_DATE * 1000), np.ceil(tk * 1000 - 1e-3))
    with np.errstate(divide="ignore", over="ignore"):
        interval = unit_seconds(unit) / r[keep]
    meta_tail = ',"jaxcrawl%2Etime_unit":[' + _quote(unit) + ']},"key":'
    signal_meta = ',"jaxcrawl%2Eon_signal":["true"]'
    action = '{"index":{"_index":' + _quote(str(index)) + ',"_id":"'

    def block_lines(part: slice):
        rows = keep[part]
        url_text = ids.take(pa.array(rows))
        names, code, _ = _block_keys(rows, url_text, given_keys, hostless=DEFAULT_KEY)
        key_json = pc.take(pa.array([_quote(k) for k in names], pa.string()), pa.array(code))
        date = pa.array(iso_utc(ms[part] / 1000.0, "ms").astype(object), pa.string())
        doc = pc.binary_join_element_wise(
            '{"url":', json_strings(url_text), ',"status":"DISCOVERED","metadata":{"jaxcrawl%2Erate":["',
            float_repr(r[rows]), '"],"jaxcrawl%2Einterval_seconds":["', float_repr(interval[part]), '"]',
            pc.if_else(pa.array(sig[rows]), signal_meta, ""), meta_tail, key_json, ',"nextFetchDate":"', date,
            '"}\n', "")
        if not bulk:
            return doc
        # the bolt's document id, DigestUtils.sha256Hex(url); no vectorised SHA-256 is at hand
        digest = pa.array([hashlib.sha256(u.encode("utf-8", "surrogatepass")).hexdigest()
                           for u in url_text.to_pylist()], pa.string())
        return pc.binary_join_element_wise(action, digest, '","routing":', key_json, "}}\n", doc, "")

    _write_lines(path, _blocks(keep.size, block_lines, chunk), os.fspath(path).lower().endswith(".gz"))
    return CrawlerFile(int(keep.size), int(np.sum(clamped)))
