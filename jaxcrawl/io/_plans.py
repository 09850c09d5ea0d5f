"""Crawl plans and timetables on disk.

A plan is what ``jaxcrawl solve --output`` writes and ``jaxcrawl schedule --plan`` reads:
a table ``page_id,rate,prob[,periodic_rate]`` with one row per page (``rate`` in crawls per
unit time, ``prob`` the probability of crawling on a change signal, NeurIPS-19 Π°,
``periodic_rate`` the periodic crawls of a signalling page beside its signals).  A timetable is a
table ``time,page_id`` with one row per crawl, sorted by time.  The format follows the
file's name (CSV, Parquet, JSON Lines) and every write is atomic.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from jax.typing import ArrayLike

from .._src.timeunits import iso_utc, unit_seconds
from ._formats import write_table
from ._schema import Column, PathLike, Schema, TableError
from ._tables import read_table

#: Plan: ``page_id,rate,prob[,periodic_rate]``, one distinct page a row (a plan without
#: ``periodic_rate`` has none: every page's crawls are its signals or its periodic rate).
PLAN = Schema(
    "crawl plan",
    (Column("page_id"),
     Column("rate", "number", minimum=0.0),
     Column("prob", "number", minimum=0.0, maximum=1.0),
     Column("periodic_rate", "number", minimum=0.0, required=False, default=0.0)),
    key="page_id", rows="pages",
)


#: Timetable: ``time,page_id`` (``time`` a number in the plan's unit) or
#: ``time,epoch_seconds,page_id`` (``time`` ISO 8601 UTC), one crawl a row; with crawl delays a
#: last column ``planned`` (``planned_epoch_seconds``): the time the plan gave the crawl before
#: the delays moved it, the crawl state the next window continues from.
TIMETABLE = Schema(
    "timetable",
    (Column("time", strip=True),
     Column("epoch_seconds", "number", required=False, default=float("nan")),
     Column("page_id"),
     Column("planned", "number", required=False, default=float("nan")),
     Column("planned_epoch_seconds", "number", required=False, default=float("nan"))),
    rows="crawls",
)


#: A crawler's state: ``page_id,last_fetch``, one page a row: each page's last fetch, ISO 8601
#: text (UTC without an offset) or a number (epoch seconds for an ISO ``--start``, else the
#: plan's unit).
LAST_FETCH = Schema(
    "last-fetch table",
    (Column("page_id"), Column("last_fetch", strip=True)),
    key="page_id", rows="pages",
)


class Plan(NamedTuple):
    """A crawl plan read from disk: page ids, rates, signal-crawl probabilities and the
    periodic crawls of signalling pages (zeros when the file has no ``periodic_rate``)."""

    page_id: np.ndarray
    rate: np.ndarray
    prob: np.ndarray
    periodic_rate: np.ndarray


def read_plan(path: PathLike, *, errors: str = "raise") -> Plan:
    """Read a plan ``page_id,rate,prob[,periodic_rate]`` (CSV, Parquet or JSON Lines by
    name; other columns such as ``interval`` are an error unless listed in :data:`PLAN`).

    ``rate`` must be finite and >= 0, ``prob`` in [0, 1], ``periodic_rate`` (optional,
    default 0) finite, >= 0 and at most ``rate``, page ids distinct (int64 when all are
    decimal integers).  A malformed row raises
    :class:`~jaxcrawl.io.TableError` (a ``ValueError``) ``path:line: message``
    naming the column and the rule.
    """
    t = read_table(path, PLAN, errors=errors, id_columns=("page_id",))
    rate, periodic = np.asarray(t["rate"], np.float64), np.asarray(t["periodic_rate"], np.float64)
    over = periodic > rate * (1 + 1e-6)
    if over.any():
        i = int(np.flatnonzero(over)[0])
        raise TableError(path, i + 1, f"column 'periodic_rate' must be at most 'rate' (page "
                         f"{t['page_id'][i]!r}: {periodic[i]!r} > {rate[i]!r})", unit="row")
    return Plan(t["page_id"], t["rate"], t["prob"], periodic)


def write_plan(path: PathLike, page_id: ArrayLike, rate: ArrayLike, prob: ArrayLike, *,
               periodic_rate: ArrayLike | None = None, progress=None) -> None:
    """Write a crawl plan ``page_id,rate,prob[,periodic_rate]`` (one row per page)
    atomically, in the format of ``path``'s name (CSV, Parquet, JSON Lines; ``.gz`` for
    gzip text).  ``rate`` is in crawls per unit time (the unit of the input's
    ``change_rate``); ``prob`` is the probability of crawling a complete page on each change
    signal (NeurIPS-19 Π°); ``periodic_rate`` (written when given) the part of ``rate`` a
    complete page is crawled periodically beside its signals (``rate - change_rate`` where its
    revisit floor is above its change rate, else 0)."""
    cols = {"page_id": page_id, "rate": np.asarray(rate, np.float64), "prob": np.asarray(prob, np.float64)}
    if periodic_rate is not None:
        cols["periodic_rate"] = np.asarray(periodic_rate, np.float64)
    write_table(path, cols, progress=progress)


def write_timetable(path: PathLike, time: ArrayLike, page: ArrayLike, page_id: ArrayLike, *,
                    start_epoch: float | None = None, unit: str = "days", planned: ArrayLike | None = None,
                    progress=None) -> None:
    """Write a timetable atomically, one row per crawl in the given order.

    Without ``start_epoch``: columns ``time,page_id`` with ``time`` in the plan's time unit
    (float64).  With ``start_epoch`` (seconds since the Unix epoch, UTC; e.g.
    ``--start``): columns
    ``time,epoch_seconds,page_id`` with ``time`` an ISO 8601 UTC timestamp (milliseconds,
    ``Z``) and ``epoch_seconds`` = ``start_epoch + time * seconds_per_unit`` (float64,
    computed on the host whatever the JAX dtype).  With ``planned`` (each crawl's time before
    crawl delays moved it, in ``time``'s coordinates) a last column ``planned`` (plan units)
    or ``planned_epoch_seconds``.
    """
    ids = np.asarray(page_id)
    t = np.asarray(time, np.float64)
    pid = ids[np.asarray(page, np.int64)]
    if start_epoch is None:
        cols = {"time": t, "page_id": pid}
        if planned is not None:
            cols["planned"] = np.asarray(planned, np.float64)
    else:
        epoch = float(start_epoch) + t * unit_seconds(unit)
        cols = {"time": iso_utc(epoch), "epoch_seconds": epoch, "page_id": pid}
        if planned is not None:
            cols["planned_epoch_seconds"] = float(start_epoch) + np.asarray(planned, np.float64) * unit_seconds(unit)
    write_table(path, cols, progress=progress)


def read_timetable(path: PathLike, *, planned: bool = False) -> tuple:
    """Read a timetable written by :func:`write_timetable`: ``(time, page_id, absolute)``,
    and with ``planned=True`` ``(time, page_id, absolute, planned)``.

    ``time`` is float64: epoch seconds when the file has an ``epoch_seconds`` column
    (``absolute`` True), else the ``time`` column in the plan's unit; ``planned`` the
    ``planned`` (``planned_epoch_seconds``) column in the same coordinates, ``time`` where the
    file has none or leaves a row empty.  A malformed row (a non-numeric time) is a
    :class:`~jaxcrawl.io.TableError` naming the file.
    """
    t = read_table(path, TIMETABLE, id_columns=("page_id",))
    time, absolute = _timetable_times(path, t)
    if not planned:
        return time, t["page_id"], absolute
    column = "planned_epoch_seconds" if absolute else "planned"
    given = np.asarray(t[column], np.float64)
    if np.isinf(given).any():
        bad = int(np.flatnonzero(np.isinf(given))[0])
        raise TableError(path, bad + 1, f"column {column!r} must be finite; got {given[bad]!r}", unit="row")
    return time, t["page_id"], absolute, np.where(np.isnan(given), time, given)


def _timetable_times(path, t) -> tuple[np.ndarray, bool]:
    epoch = np.asarray(t["epoch_seconds"], np.float64)
    if epoch.size and not np.isnan(epoch).all():
        return epoch, True
    text = np.asarray(t["time"]).astype(str)
    try:
        time = text.astype(np.float64)
    except ValueError:
        bad = next(i for i, x in enumerate(text) if not _is_number(x))
        raise TableError(path, bad + 1, "column 'time' must be a number (or give epoch_seconds); "
                         f"got {str(text[bad])!r}", unit="row") from None
    if not np.isfinite(time).all():
        bad = int(np.flatnonzero(~np.isfinite(time))[0])
        raise TableError(path, bad + 1, f"column 'time' must be finite; got {str(text[bad])!r}", unit="row")
    return time, False


def _is_number(x: str) -> bool:
    try:
        float(x)
    except ValueError:
        return False
    return True


def read_last_fetch(path: PathLike) -> tuple[np.ndarray, np.ndarray, bool]:
    """Read a crawler's state ``page_id,last_fetch`` (CSV, Parquet or JSON Lines by name):
    ``(page_id, time, absolute)``.  ``last_fetch`` is either ISO 8601 text on every row
    (``time`` in epoch seconds, ``absolute`` True) or a finite number on every row
    (``absolute`` False: the caller decides the unit); page ids distinct.  A malformed row
    is a :class:`~jaxcrawl.io.TableError` naming the file, line and column."""
    from .._src.timeunits import parse_start

    t = read_table(path, LAST_FETCH, id_columns=("page_id",))
    text = np.asarray(t["last_fetch"]).astype(str)
    numeric = np.asarray([_is_number(x) for x in text.tolist()], bool) if text.size else np.zeros(0, bool)
    if numeric.all():
        time = text.astype(np.float64)
        bad = np.flatnonzero(~np.isfinite(time))
        if bad.size:
            raise TableError(path, int(bad[0]) + 1, f"column 'last_fetch' must be finite; got {text[bad[0]]!r}",
                             unit="row")
        return time, t["page_id"], False
    if numeric.any():
        i = int(np.flatnonzero(numeric)[0])
        raise TableError(path, i + 1, "column 'last_fetch' must be ISO 8601 text on every row or a number on every "
                         f"row; got {text[i]!r} among dates", unit="row")
    plain = np.char.rstrip(np.char.rstrip(text), "Zz")
    try:  # UTC text (what write_timetable writes) in one vectorised pass
        if np.any(np.char.find(plain, "+") >= 0) or np.any(np.char.count(plain, "-") > 2):
            raise ValueError
        time = plain.astype("datetime64[us]").astype(np.int64) / 1e6
    except ValueError:  # offsets or odd spellings: one by one, naming the first bad row
        time = np.empty(text.size)
        for i, x in enumerate(text.tolist()):
            try:
                time[i] = parse_start(x)
            except ValueError:
                raise TableError(path, i + 1, f"column 'last_fetch' must be an ISO 8601 date-time (e.g. "
                                 f"2026-01-05T06:00:00Z) or a number; got {x!r}", unit="row") from None
    return time, t["page_id"], True
