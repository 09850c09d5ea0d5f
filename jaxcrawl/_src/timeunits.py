"""Time units, durations and absolute times of the command line.

Rates are "per unit time"; the unit is that of the input's ``change_rate``
(``--time-unit``).  Absolute times are kept on the host as float64 seconds since the Unix
epoch (UTC) -- never in the JAX dtype -- and written as ISO 8601 UTC text.
"""
from __future__ import annotations

import datetime as _dt
import math
import re

import numpy as np
from jax.typing import ArrayLike

#: Seconds in each ``--time-unit``.
TIME_UNITS = {"seconds": 1.0, "minutes": 60.0, "hours": 3600.0, "days": 86400.0}
_ALIASES = {"s": "seconds", "sec": "seconds", "second": "seconds", "m": "minutes", "min": "minutes",
            "minute": "minutes", "h": "hours", "hour": "hours", "d": "days", "day": "days",
            "w": "weeks", "week": "weeks", "weeks": "weeks"}
_SUFFIXES = ("s", "m", "h", "d", "w")  # what a duration's error lists; the long names are accepted too
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
        if not m or (m.group(2) and m.group(2).lower() not in {**_ALIASES, **TIME_UNITS}):
            raise ValueError(f"{name} must be a number (in --time-unit) or a number with one of the suffixes "
                             f"{', '.join(_SUFFIXES)} (e.g. 90s, 15m, 6h, 2d, 1w); got {text!r}")
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


def first_crawl(rate: ArrayLike, phase: ArrayLike, start: ArrayLike, last: ArrayLike | None = None) -> np.ndarray:
    """Each page's first crawl at or after ``start`` (a time, or one per page; float64, on the
    host, in the rates' unit of absolute time): the grid point ``(k + phase) / rate`` (the
    grid anchored at absolute time 0, :mod:`jaxcrawl.timetable`), or, for a page with a
    finite ``last`` crawl, ``max(start, last + 1 / rate)``; ``inf`` for rate 0."""
    r = np.asarray(rate, np.float64)
    p = np.broadcast_to(np.asarray(phase, np.float64), r.shape)
    s = np.asarray(start, np.float64)
    pos = r > 0
    rr = np.where(pos, r, 1.0)
    x0 = s * rr - p
    first = s + (np.ceil(x0) - x0) / rr
    if last is not None:
        lc = np.broadcast_to(np.asarray(last, np.float64), r.shape)
        has = np.isfinite(lc)
        first = np.where(has, np.maximum(s, np.where(has, lc, 0.0) + 1.0 / rr), first)
    return np.where(pos, first, np.inf)


def next_fetch(rate: ArrayLike, phase: ArrayLike, start_epoch: float, unit: float, *,
               last_fetch: ArrayLike | None = None) -> np.ndarray:
    """Epoch seconds of each page's first crawl at or after ``start_epoch``: its grid point
    ``(k + phase) / rate`` units after 1970-01-01T00:00:00Z (the grid of
    :mod:`jaxcrawl.timetable`, anchored at the epoch, not at ``start_epoch``, so consecutive
    runs continue one grid), or with a finite ``last_fetch`` (epoch seconds)
    ``max(start_epoch, last_fetch + unit / rate)``; ``inf`` for rate 0 (:func:`first_crawl`).
    Computed in float64 on the host."""
    last = None if last_fetch is None else np.asarray(last_fetch, np.float64) / unit
    return unit * first_crawl(rate, phase, float(start_epoch) / unit, last)
