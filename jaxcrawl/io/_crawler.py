"""The files a crawler ingests: URLFrontier JSON Lines and Apache Nutch injector seed lists
(one line per page, pages with rate 0 left out and counted).

* **URLFrontier** (crawler-commons' URL Frontier API, ``urlfrontier.proto``): each line is
  a JSON ``URLItem`` holding a ``KnownURLItem``::

      {"known": {"info": {"url": URL, "key": QUEUE_KEY, "metadata": {...}, "crawlID": ""},
                 "refetchable_from_date": EPOCH_SECONDS}}

  ``refetchable_from_date`` is the page's next fetch time from the plan, in whole seconds
  of UTC time since 1970-01-01 (uint64, rounded up so a page is never due early);
  ``key`` is the queue (the URL's host, or the page's host id); ``metadata`` values are
  string lists, as the proto's ``StringList``: ``jaxcrawl.rate`` (crawls per unit),
  ``jaxcrawl.interval_seconds`` (the revisit interval) and ``jaxcrawl.time_unit``.
* **Nutch seed list** (``bin/nutch inject``'s URL files): ``URL <TAB>
  nutch.fetchInterval=SECONDS`` -- one URL a line followed by tab-separated ``key=value``
  metadata; ``nutch.fetchInterval`` is the page's custom fetch interval, an integer number
  of seconds (``1 / rate`` in seconds, rounded to the nearest second, at least 1).
"""
from __future__ import annotations

import gzip
import json
import os

import numpy as np
from jax.typing import ArrayLike

from .._src.fileio import atomic_write
from .._src.hostmap import url_host
from .._src.timeunits import unit_seconds
from ._schema import PathLike


def _write_lines(path: PathLike, lines, gz: bool) -> None:
    def write(tmp: str) -> None:
        with (gzip.open(tmp, "wt", encoding="utf-8", newline="") if gz
              else open(tmp, "w", encoding="utf-8", newline="")) as fh:
            for block in lines:
                fh.write(block)

    atomic_write(path, write)


def _text_ids(ids: ArrayLike) -> list[str]:
    return [str(x) for x in np.asarray(ids).tolist()]


def write_urlfrontier(path: PathLike, url: ArrayLike, rate: ArrayLike, next_epoch: ArrayLike, *,
                      unit: str = "days", key: ArrayLike | None = None, crawl_id: str = "",
                      chunk: int = 1 << 16) -> int:
    """Write a URLFrontier JSON Lines file (module docstring): one ``KnownURLItem`` per page
    with rate > 0, atomically.  Returns the number of pages written.

    Args:
      path: the file (``.gz``: gzip).
      url: ``(n,)`` page URLs (page ids).
      rate: ``(n,)`` crawl rates per ``unit``.
      next_epoch: ``(n,)`` next fetch time, epoch seconds (float64).
      unit: the rates' time unit.
      key: ``(n,)`` queue keys (default: each URL's host name, or the URL itself).
      crawl_id: the ``crawlID`` of every item (default ``""``, the frontier's default crawl).
    """
    r = np.asarray(rate, np.float64)
    t = np.asarray(next_epoch, np.float64)
    ids = _text_ids(url)
    keep = np.flatnonzero((r > 0) & np.isfinite(t))
    keys = _text_ids(key) if key is not None else None
    sec = unit_seconds(unit)
    due = np.ceil(t[keep] - 1e-6).astype(np.int64)
    interval = sec / r[keep]
    crawl = json.dumps(str(crawl_id))
    unit_json = json.dumps([unit])

    def blocks():
        for s in range(0, keep.size, chunk):
            out = []
            for j in range(s, min(s + chunk, keep.size)):
                i = int(keep[j])
                u = ids[i]
                k = keys[i] if keys is not None else (url_host(u) or u)
                out.append(
                    '{"known":{"info":{"url":' + json.dumps(u) + ',"key":' + json.dumps(k)
                    + ',"metadata":{"jaxcrawl.rate":[' + json.dumps(repr(float(r[i])))
                    + '],"jaxcrawl.interval_seconds":[' + json.dumps(repr(float(interval[j])))
                    + '],"jaxcrawl.time_unit":' + unit_json + '},"crawlID":' + crawl
                    + '},"refetchable_from_date":' + str(int(due[j])) + "}}\n")
            yield "".join(out)

    _write_lines(path, blocks(), os.fspath(path).lower().endswith(".gz"))
    return int(keep.size)


def write_nutch_seeds(path: PathLike, url: ArrayLike, rate: ArrayLike, *, unit: str = "days",
                      chunk: int = 1 << 16) -> int:
    """Write an Apache Nutch injector seed list (module docstring): ``URL<TAB>nutch.fetchInterval=S``
    for every page with rate > 0, atomically.  Returns the number of pages written.

    URLs holding a tab or a line break cannot be written in this format (``ValueError``).
    """
    r = np.asarray(rate, np.float64)
    ids = _text_ids(url)
    keep = np.flatnonzero(r > 0)
    seconds = np.maximum(np.rint(unit_seconds(unit) / r[keep]), 1).astype(np.int64)
    for i in keep.tolist():
        u = ids[i]
        if "\t" in u or "\n" in u or "\r" in u or not u.strip() or u.lstrip().startswith("#"):
            raise ValueError(f"page id {u!r} cannot be a Nutch seed URL (tab, line break, empty or '#')")

    def blocks():
        for s in range(0, keep.size, chunk):
            yield "".join(f"{ids[int(keep[j])]}\tnutch.fetchInterval={int(seconds[j])}\n"
                          for j in range(s, min(s + chunk, keep.size)))

    _write_lines(path, blocks(), os.fspath(path).lower().endswith(".gz"))
    return int(keep.size)
