"""Real time and crawler-native output: time units, ISO 8601 start times, durations, and the
files a crawler ingests (URLFrontier JSON Lines, Apache Nutch injector seed lists).

Time.  jaxcrawl's rates are "per unit time"; the unit is that of the input's
``change_rate`` (``--time-unit``: seconds, minutes, hours or days).  Absolute times are
kept on the host as float64 seconds since the Unix epoch (UTC) -- never in the JAX dtype --
and written as ISO 8601 UTC text (``2026-01-05T06:00:00.000Z``) or integer epoch seconds.

Crawler formats (one line per page, pages with rate 0 left out and counted):

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

import datetime as _dt
import math
import os
import re
from typing import Union

import numpy as np
from jax.typing import ArrayLike

from .checkpoint import atomic_write

__all__ = [
    "TIME_UNITS",
    "unit_seconds",
    "parse_duration",
    "parse_start",
    "iso_utc",
    "next_fetch",
    "write_urlfrontier",
    "write_nutch_seeds",
]

PathLike = Union[str, "os.PathLike[str]"]

#: Seconds in each ``--time-unit``.
TIME_UNITS = {"seconds": 1.0, "minutes": 60.0, "hours": 3600.0, "days": 86400.0}
_ALIASES = {"s": "seconds", "sec": "seconds", "second": "seconds", "m": "minutes", "min": "minutes",
            "minute": "minutes", "h": "hours", "hour": "hours", "d": "days", "day": "days",
            "w": "weeks", "week": "weeks", "weeks": "weeks"}
_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?|inf)\s*([a-zA-Z]*)\s*$")


def unit_seconds(unit: str) -> float:
    """Seconds in ``unit`` (``seconds``, ``minutes``, ``hours``, ``days``; ``s``/``m``/``h``/``d``)."""
    name = _ALIASES.get(str(unit).strip().lower(), str(unit).strip().lower())
    if name == "weeks":
        return 7 * 86400.0
    if name not in TIME_UNITS:
        raise ValueError(f"time unit must be one of {', '.join(TIME_UNITS)}; got {unit!r}")
    return TIME_UNITS[name]


def parse_duration(text: str | float, unit: str = "days", *, name: str = "duration") -> float:
    """A duration in ``unit``: a bare number is already in ``unit``; a suffix names its own
    unit (``90s``, ``15m``, ``6h``, ``2d``, ``1w``); ``inf`` is no bound."""
    if isinstance(text, (int, float)):
        value = float(text)
    else:
        m = _DURATION.match(str(text))
        if not m:
            raise ValueError(f"{name} must be a number or a number with a unit (90s, 15m, 6h, 2d, 1w); "
                             f"got {text!r}")
        value = float(m.group(1))
        if m.group(2):
            value *= unit_seconds(m.group(2)) / unit_seconds(unit)
    if math.isnan(value) or value < 0:
        raise ValueError(f"{name} must be >= 0; got {text!r}")
    return value


def parse_start(text: str) -> float:
    """Seconds since the Unix epoch (float, UTC) of an ISO 8601 date or date-time.

    ``2026-01-05``, ``2026-01-05T06:00``, ``2026-01-05T06:00:00Z``,
    ``2026-01-05T07:00:00+01:00``; a time without an offset is UTC.
    """
    raw = str(text).strip()
    s = raw[:-1] + "+00:00" if raw.endswith(("Z", "z")) else raw
    try:
        t = _dt.datetime.fromisoformat(s)
    except ValueError:
        raise ValueError(f"--start must be an ISO 8601 date or date-time (e.g. 2026-01-05T06:00:00Z); "
                         f"got {text!r}") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=_dt.timezone.utc)
    return t.timestamp()


def iso_utc(epoch_seconds: ArrayLike, unit: str = "ms") -> np.ndarray:
    """ISO 8601 UTC text (``...Z``) of epoch seconds, vectorised (NumPy ``datetime64``)."""
    e = np.asarray(epoch_seconds, np.float64)
    scale = {"s": 1, "ms": 1_000, "us": 1_000_000}[unit]
    ticks = np.round(e * scale).astype(np.int64).astype(f"datetime64[{unit}]")
    return np.datetime_as_string(ticks, unit=unit, timezone="UTC")


def next_fetch(rate: ArrayLike, phase: ArrayLike, start_epoch: float, unit: float) -> np.ndarray:
    """Epoch seconds of each page's first crawl at or after ``start_epoch``: ``phase / rate``
    units after it (the timetable's ``k = 0`` crawl, :mod:`jaxcrawl.timetable`); ``inf``
    for rate 0.  Computed in float64 on the host."""
    r = np.asarray(rate, np.float64)
    p = np.asarray(phase, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(r > 0, start_epoch + unit * p / np.where(r > 0, r, 1.0), np.inf)


def _write_lines(path: PathLike, lines, gz: bool) -> None:
    import gzip

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
      next_epoch: ``(n,)`` next fetch time, epoch seconds (float64; :func:`next_fetch`).
      unit: the rates' time unit.
      key: ``(n,)`` queue keys (default: each URL's host name, or the URL itself).
      crawl_id: the ``crawlID`` of every item (default ``""``, the frontier's default crawl).
    """
    import json

    from .hosts import url_host

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
