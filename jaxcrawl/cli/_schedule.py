"""``jaxcrawl schedule``: a crawl plan (rates) in, a crawl timetable or a crawler's queue out.

Reads the plan that ``jaxcrawl solve --output`` writes (``page_id,rate,prob``;
:func:`jaxcrawl.io.read_plan`) and writes ``time,page_id`` rows (with an ISO 8601
``--start``: ``time,epoch_seconds,page_id`` in UTC), sorted by time, for every crawl in
``[--start, --start + --horizon)`` (:func:`jaxcrawl.io.write_timetable`); with crawl
delays, :func:`jaxcrawl.timetable.space_crawls` keeps every host's fetches apart:
page ``i`` is crawled at ``(k + phase_i) / rate_i`` (:func:`jaxcrawl.timetable.timetable`),
so its gaps are ``1 / rate_i`` and its count in any window is within ±1 of ``rate_i``
times the window's length.

Rows with ``prob > 0`` are pages crawled on change signals (NeurIPS-19 Π°): their crawls
follow the signals, so they are left out of the timetable (and counted) unless
``--include-signal-pages`` -- all but their ``periodic_rate`` (a complete page pinned at its
revisit floor above its change rate crawls every signal plus periodically at that rate),
which is timetabled, spaced for crawl delays and written to the crawler files like any
page's rate.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxcrawl import timetable as tt
from jaxcrawl._src.fileio import progress_bar
from jaxcrawl._src.limits import check_size
from jaxcrawl._src.timeunits import iso_utc, next_fetch, parse_duration, parse_start, unit_seconds
from jaxcrawl.io import (
    check_output,
    read_crawl_delays,
    read_plan,
    read_timetable,
    write_nutch_seeds,
    write_timetable,
    write_urlfrontier,
)

from ._options import add_host_arguments, check_result, host_gaps

__all__ = ["register", "run", "PHASES"]

#: The ``--phase`` choices.
PHASES = ("golden", "hash", "zero")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``schedule`` subcommand to an ``argparse`` subparsers object."""

    p = subparsers.add_parser(
        "schedule",
        help="turn a crawl plan (page_id,rate,prob) into a timetable or a crawler's queue",
        description=(
            "Derandomise a crawl plan into a deterministic, periodic timetable. Input: the plan "
            "of `jaxcrawl solve --output` (page_id,rate,prob; rate in crawls per --time-unit; CSV, "
            "Parquet or JSON Lines). Output: a table time,page_id with every crawl in "
            "[start, start + horizon), sorted by time (with an ISO 8601 --start: "
            "time,epoch_seconds,page_id in UTC). Each page is crawled every 1/rate, at times "
            "(k + phase)/rate after the start, so over any window its number of crawls is within 1 "
            "of rate x window. With crawl delays (--crawl-delays/--robots) no host is crawled twice "
            "within its delay: crawls are moved later as needed. Pages with prob > 0 are crawled on "
            "change signals and are left out unless --include-signal-pages, except for their periodic_rate "
            "(periodic crawls beside the signals), which is timetabled. --urlfrontier and "
            "--nutch write crawler-native queue files. The last line printed is one JSON object."
        ),
    )
    p.add_argument("--plan", "-p", required=True, help="plan page_id,rate,prob (.csv, .parquet, .jsonl)")
    p.add_argument("--output", "-o", help="timetable to write (format by name); never the plan")
    p.add_argument("--horizon", default="1",
                   help="length of the timetable: a number in --time-unit, or 90s/15m/6h/2d/1w (default 1)")
    p.add_argument("--start", default=None,
                   help="ISO 8601 UTC start (e.g. 2026-01-05T06:00:00Z): times are absolute UTC; or a "
                        "number: a start in the plan's time unit, times relative (default 0)")
    p.add_argument("--time-unit", choices=("seconds", "minutes", "hours", "days"), default="days",
                   help="the time unit of the plan's rates (default days)")
    p.add_argument("--phase", choices=PHASES, default="golden",
                   help="golden: golden-ratio phases by row order (default; equal-rate pages spread "
                        "evenly); hash: phases from a hash of each page_id (a page's crawl times do "
                        "not move when other pages are added or removed); zero: all phases 0")
    p.add_argument("--seed", type=int, default=0, help="salt of the hashed phases (default 0)")
    p.add_argument("--include-signal-pages", action="store_true",
                   help="also timetable pages with prob > 0, periodically at their whole rate")
    add_host_arguments(p)
    p.add_argument("--after", metavar="TIMETABLE",
                   help="the previous window's timetable (what this command wrote for it): with crawl delays, "
                        "its last fetch of each host is kept its delay apart from this window's first")
    p.add_argument("--urlfrontier", help="also write a URLFrontier JSON Lines file (each page's next fetch as "
                   "refetchable_from_date, epoch seconds; needs an ISO --start)")
    p.add_argument("--nutch", help="also write a Nutch injector seed list (url<TAB>nutch.fetchInterval=<s>)")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bars")
    p.add_argument("--x64", action="store_true", help="compute the times in float64")
    p.set_defaults(func=run)


def _start(text: str | None) -> tuple[float, float | None]:
    """``(start in plan units, start epoch seconds or None)`` of ``--start``."""

    if text is None:
        return 0.0, None
    try:
        value = float(text)
    except ValueError:
        return 0.0, parse_start(text)
    if not math.isfinite(value):
        raise ValueError(f"--start must be finite; got {text}")
    return value, None


def run(args: argparse.Namespace) -> int:
    """Run ``jaxcrawl schedule``; returns the exit status."""



    horizon = parse_duration(args.horizon, args.time_unit, name="--horizon")
    if not (math.isfinite(horizon) and horizon > 0):
        raise ValueError(f"--horizon must be finite and > 0; got {args.horizon}")
    start, epoch = _start(args.start)
    if (args.urlfrontier) and epoch is None:
        raise ValueError("--urlfrontier needs an ISO 8601 --start (absolute time)")
    outputs = [o for o in (args.output, args.urlfrontier, args.nutch) if o]
    for out in outputs:
        check_output(out, args.plan, args.crawl_delays, args.hosts)
    if len(set(map(os.path.realpath, outputs))) < len(outputs):
        raise ValueError("--output, --urlfrontier and --nutch must be different files")
    plan = read_plan(args.plan)
    signal = plan.prob > 0
    left_out = signal & ~args.include_signal_pages
    # a signal page's crawls follow its signals; its periodic crawls beside them (a complete
    # page pinned at its revisit floor) are timetabled like any page's
    rate = np.where(left_out, plan.periodic_rate, plan.rate)
    dtype = jnp.float64 if args.x64 else jnp.float32
    with np.errstate(over="ignore"):  # a rate beyond the dtype's range becomes inf: the guard below names it
        rate_j = jnp.asarray(np.asarray(rate).astype(jnp.dtype(dtype)))

    failure = check_result({"rates": np.asarray(rate_j)}, plan.page_id, dtype=dtype,
                           what=f"the plan {args.plan} in {jnp.dtype(dtype).name}")
    if failure is not None:
        raise ValueError(failure + "; no timetable written")
    if args.phase == "golden":
        phase = tt.golden_phase(len(rate), dtype=dtype)
    elif args.phase == "hash":
        phase = tt.hashed_phase(jnp.asarray(_page_keys(plan.page_id)), seed=args.seed, dtype=dtype)
    else:
        phase = jnp.zeros_like(rate_j)
    gaps = host_gaps(args, plan.page_id)
    last_group = None
    if args.after:
        if gaps is None:
            raise ValueError("--after carries crawl-delay gaps from the previous window; give --crawl-delays "
                             "or --robots (without them the timetable does not depend on earlier windows)")
        last_group = _last_host_fetch(args, gaps, epoch, start)
    check_size("--horizon", float(np.sum(np.asarray(rate, np.float64)) * horizon) + len(rate), 32,
               "crawls in the window")  # the timetable's size, before it is allocated
    t0 = time.perf_counter()
    with progress_bar(None, "timetable", quiet=args.quiet, unit="step"):
        # times since --start (exact in the working dtype over the window); the window's place
        # on each page's grid is computed in float64 (timetable's eager path), and --start is
        # added back in float64 below, so epoch-second starts keep float32's precision
        table = jax.block_until_ready(tt.timetable(rate_j, horizon, start=start, phase=phase, relative=True))
        spaced = None
        if gaps is not None:
            hidx, delay, _ = gaps
            gap = delay / unit_seconds(args.time_unit)
            plain = table
            spaced = tt.space_crawls(table, hidx, gap, end=horizon, last_group=last_group)
            table = jax.block_until_ready(spaced.timetable)
    seconds = time.perf_counter() - t0
    mask = np.asarray(table.mask)
    times = start + np.asarray(table.time)[mask].astype(np.float64)
    pages = np.asarray(table.page)[mask]
    failure = check_result({"crawl times": times}, plan.page_id[pages] if pages.size else plan.page_id,
                           dtype=dtype, what="the timetable")
    if failure is not None:
        raise ValueError(failure + "; no timetable written")
    counts = np.bincount(pages, minlength=len(rate))
    dev = np.abs(counts - rate * horizon)
    if spaced is None:
        _check_periodic(times, pages, rate, np.asarray(phase, np.float64), start, horizon, dtype, plan.page_id)
    summary = {
        "plan": args.plan,
        "num_pages": int(len(rate)),
        "num_timetabled_pages": int(np.sum(rate > 0)),
        "num_signal_pages_left_out": int(np.sum(left_out)),
        "num_signal_pages_with_periodic_crawls": int(np.sum(left_out & (rate > 0))),
        "time_unit": args.time_unit,
        "horizon": float(horizon),
        "start": float(start) if epoch is None else str(iso_utc(np.asarray([epoch]))[0]),
        "phase": args.phase,
        "num_crawls": int(times.shape[0]),
        "expected_crawls": float(np.sum(rate) * horizon),
        "max_count_deviation": float(dev.max()) if dev.size else 0.0,
        "overflow": int(table.overflow),
        "timetable_seconds": seconds,
        "dtype": str(np.dtype(dtype)),
    }
    if spaced is not None:
        hidx, delay, names = gaps
        summary["num_crawl_delay_hosts"] = int(delay.size)
        summary["crawls_moved_for_crawl_delays"] = int(spaced.moved)
        summary["crawls_deferred_past_horizon"] = int(spaced.deferred)
        summary["max_move"] = float(spaced.max_delay)
        h = hidx[pages]
        order = np.lexsort((times, h))
        hs, ts = h[order], times[order]
        same = (hs[1:] == hs[:-1]) & (hs[1:] >= 0)
        gaps_seen = (ts[1:] - ts[:-1])[same] * unit_seconds(args.time_unit)
        need = delay[hs[1:][same]]
        summary["min_host_gap_over_delay"] = float(np.min(gaps_seen / np.where(need > 0, need, np.inf))) \
            if gaps_seen.size else None
        summary.update(_delay_hosts(plain, table, hidx, delay, names, horizon, unit_seconds(args.time_unit)))
    if args.output:
        with progress_bar(times.shape[0], "writing timetable", quiet=args.quiet) as bar:
            write_timetable(args.output, times - (start if epoch is not None else 0.0), pages, plan.page_id,
                            start_epoch=epoch, unit=args.time_unit, progress=bar)
        summary["output"] = args.output
    if args.urlfrontier:
        phase64 = np.asarray(phase, np.float64)
        due = next_fetch(rate, phase64, epoch, unit_seconds(args.time_unit))
        if gaps is not None and pages.size:  # the first timetabled (spaced) crawl of each page
            first = np.full(len(rate), np.inf)
            np.minimum.at(first, pages, epoch + times * unit_seconds(args.time_unit))
            due = np.where(np.isfinite(first), first, due)
        key = None
        if gaps is not None:
            hidx, _, names = gaps
            if names.size:
                key = np.where(hidx >= 0, names[np.maximum(hidx, 0)], "")  # "": the URL's host
        k = write_urlfrontier(args.urlfrontier, plan.page_id, rate, due, unit=args.time_unit, key=key)
        summary["urlfrontier"] = {"path": args.urlfrontier, "num_urls": k.num_urls, "num_clamped": k.num_clamped}
    if args.nutch:
        k = write_nutch_seeds(args.nutch, plan.page_id, rate, unit=args.time_unit)
        summary["nutch"] = {"path": args.nutch, "num_urls": k.num_urls, "num_clamped": k.num_clamped}
    print(f"plan         {args.plan}: {summary['num_pages']} pages, "
          f"{summary['num_timetabled_pages']} timetabled, "
          f"{summary['num_signal_pages_left_out']} crawled on change signals (left out"
          + (f"; {summary['num_signal_pages_with_periodic_crawls']} of them timetabled at their periodic_rate"
             if summary["num_signal_pages_with_periodic_crawls"] else "") + ")")
    window = (f"[{summary['start']}, + {horizon:g} {args.time_unit})" if epoch is not None
              else f"[{start:g}, {start + horizon:g})")
    print(f"timetable    {summary['num_crawls']} crawls in {window} "
          f"(sum of rate x horizon = {summary['expected_crawls']:.6g}); "
          f"largest |count - rate x horizon| per page {summary['max_count_deviation']:.3g}"
          + (" (< 1)" if summary["max_count_deviation"] < 1 else ""))
    if spaced is not None:
        print(f"crawl delays {summary['num_crawl_delay_hosts']} hosts: {summary['crawls_moved_for_crawl_delays']} "
              f"crawls moved later, {summary['crawls_deferred_past_horizon']} past the horizon; "
              "no host fetched twice within its delay")
        rows = summary["crawl_delay_hosts"]
        if rows:
            print(f"             {'host':<28} {'delay s':>8} {'cap':>9} {'planned':>8} {'crawls':>7} {'moved':>6} "
                  f"{'deferred':>8}")
        for h in rows[:10]:
            print(f"             {h['host']:<28} {h['crawl_delay']:>8g} {h['cap']:>9.4g} {h['planned_crawls']:>8} "
                  f"{h['crawls']:>7} {h['moved']:>6} {h['deferred']:>8}")
        if summary["num_hosts_moved_or_deferred"] > 10:
            print(f"             ... {summary['num_hosts_moved_or_deferred'] - 10} more (the JSON line lists up to "
                  f"{MAX_LISTED_HOSTS})")
    print(f"time         {seconds:.3f} s (including compilation)")
    if args.output:
        print(f"written to   {args.output}")
    report_crawler_files(summary)
    print(json.dumps(summary))
    return 0


#: Crawl-delay hosts listed in the JSON line (the most deferred first); the report shows ten.
MAX_LISTED_HOSTS = 1000


def _delay_hosts(plain, spaced, hidx, delay, names, horizon: float, unit: float) -> dict:
    """The crawl-delay hosts whose crawls the spacing moved or deferred: for each, its delay,
    its cap (``unit / delay`` crawls per unit), the plan's crawls of it in the window
    (``planned_crawls``, before spacing), the crawls kept (``crawls``), how many of those were
    moved later (``moved``) and how many were deferred past the window (``deferred``).  Spacing keeps each host's crawls in their
    order, so its kept crawls are its first planned ones and are compared one to one."""

    num_hosts = int(delay.size)

    def by_host(table):
        m = np.asarray(table.mask)
        h = hidx[np.asarray(table.page)[m]]
        t = np.asarray(table.time)[m]
        on = h >= 0
        order = np.lexsort((t[on], h[on]))
        return h[on][order], t[on][order]

    h0, t0 = by_host(plain)
    h1, t1 = by_host(spaced)
    planned = np.bincount(h0, minlength=num_hosts)
    kept = np.bincount(h1, minlength=num_hosts)
    rank = np.arange(h0.size) - (np.cumsum(planned) - planned)[h0]
    first = rank < kept[h0]
    moved = np.bincount(h1[t1 > t0[first]], minlength=num_hosts)
    deferred = planned - kept
    hit = np.flatnonzero((moved > 0) | (deferred > 0))
    hit = hit[np.lexsort((-moved[hit], -deferred[hit]))]
    rows = [{"host": str(names[h]), "crawl_delay": float(delay[h]),
             "cap": float(unit / delay[h]) if delay[h] > 0 else None, "planned_crawls": int(planned[h]),
             "crawls": int(kept[h]), "moved": int(moved[h]), "deferred": int(deferred[h])}
            for h in hit[:MAX_LISTED_HOSTS].tolist()]
    return {"num_hosts_moved_or_deferred": int(hit.size), "crawl_delay_hosts": rows}


def report_crawler_files(summary: dict) -> None:
    """Print the report lines of the crawler files in ``summary`` (``urlfrontier``, ``nutch``)."""

    limits = {"urlfrontier": "next fetches after 2286-11-20T17:46:39Z written as that date",
              "nutch": "fetch intervals longer than 2^31 - 1 s written as 2147483647"}
    for key in ("urlfrontier", "nutch"):
        if key in summary:
            entry = summary[key]
            clamped = f" ({entry['num_clamped']} {limits[key]})" if entry["num_clamped"] else ""
            print(f"{key:<12} {entry['num_urls']} URLs written to {entry['path']}{clamped}")


def _last_host_fetch(args: argparse.Namespace, gaps, epoch: float | None, start: float) -> np.ndarray:
    """Each crawl-delay host's last fetch in the ``--after`` timetable, in this window's
    time coordinates (time since ``--start`` in the plan's unit; ``-inf``: none)."""

    if os.path.realpath(args.after) in {os.path.realpath(o) for o in (args.output, args.urlfrontier, args.nutch) if o}:
        raise ValueError(f"--after {args.after} is also an output of this run; give the previous window's file")
    time, page_id, absolute = read_timetable(args.after)
    if absolute != (epoch is not None):
        have, need = ("epoch_seconds", "plan-unit times") if absolute else ("plan-unit times", "epoch_seconds")
        raise ValueError(f"--after {args.after} has {have} but this run's --start gives {need}; schedule both "
                         "windows with the same kind of --start (ISO 8601 or a number)")
    rel = (time - epoch) / unit_seconds(args.time_unit) if absolute else time - start
    hidx, _, names = gaps
    last = np.full(len(names), -np.inf)
    if time.size and len(names):
        where = {str(x): i for i, x in enumerate(names.tolist())}
        idx, _, seen = read_crawl_delays(args.crawl_delays or args.robots, page_id, pages_path=args.hosts,
                                         user_agent=args.user_agent, unknown_pages="ignore")
        to_gaps = np.asarray([where.get(str(x), -1) for x in seen.tolist()] + [-1], np.int64)
        h = to_gaps[idx]
        ok = h >= 0
        np.maximum.at(last, h[ok], rel[ok])
    return last


def _check_periodic(times, pages, rate, phase, start, horizon, dtype, page_id) -> None:
    """The final guard of a periodic timetable (no crawl-delay spacing), recomputed in float64:
    every crawl in ``[start, start + horizon)`` on its page's grid ``(k + phase) / rate``, and
    each page's count ``ceil(rate (start + horizon) - phase) - ceil(rate start - phase)``
    (one more or one fewer where a window end falls within the working dtype's rounding --
    over the window's length, not the absolute time -- of a grid point).  ``ValueError`` naming the first bad page, suggesting ``--x64`` in float32."""
    eps = float(np.finfo(dtype).eps)
    hint = "; --x64 (float64) may help" if np.dtype(dtype).itemsize < 8 else ""
    end = start + horizon
    outside = (times < start - 4 * eps * abs(start)) | (times >= end + 4 * eps * abs(end))
    if outside.any():
        i = int(np.flatnonzero(outside)[0])
        raise ValueError(f"the timetable has {int(outside.sum())} crawls outside [{start:g}, {end:g}) (first: page "
                         f"{page_id[pages[i]]!r} at {times[i]:.17g}){hint}; no timetable written")
    r = rate[pages]
    x = times * r - phase[pages]
    off = np.abs(x - np.round(x))
    # a thousandth of the crawl interval, or the dtype's rounding over the window (not over
    # the absolute time: a --start far from 0 must not excuse a coarse grid)
    tol = 1e-3 + 16 * eps * (1 + r * horizon)
    bad = off > tol
    if bad.any():
        i = int(np.argmax(np.where(bad, off, -1.0)))
        raise ValueError(f"the timetable's crawl times of {int(np.unique(pages[bad]).size)} pages are off their "
                         f"period (first: page {page_id[pages[i]]!r}, {off[i]:.3g} of its crawl interval off) "
                         f"-- the working dtype cannot resolve times near --start {start:g}{hint}; "
                         "no timetable written")
    counts = np.bincount(pages, minlength=len(rate))
    hi, lo = rate * end - phase, rate * start - phase
    slack = 16 * eps * (1 + rate * horizon) + 4 * np.finfo(np.float64).eps * np.maximum(np.abs(hi), np.abs(lo))
    # a window end within rounding of a grid point may count that crawl or not: one either way
    fewest, most = np.ceil(hi - slack) - np.ceil(lo + slack), np.ceil(hi + slack) - np.ceil(lo - slack)
    exact = np.ceil(hi) - np.ceil(lo)
    wrong = ((counts < fewest) | (counts > most)) & (rate > 0)
    if wrong.any():
        i = int(np.flatnonzero(wrong)[0])
        raise ValueError(f"the timetable gives {int(wrong.sum())} pages the wrong number of crawls (first: page "
                         f"{page_id[i]!r}, {int(counts[i])} crawls where its period gives {int(exact[i])}){hint}; "
                         "no timetable written")


def _page_keys(page_id) -> np.ndarray:
    """Stable 32-bit keys of page ids (BLAKE2b of their text) for
    :func:`jaxcrawl.timetable.hashed_phase`: a page's key does not depend on the others."""
    ids = np.asarray(page_id).tolist()
    out = np.empty(len(ids), np.uint32)
    for i, pid in enumerate(ids):
        out[i] = int.from_bytes(hashlib.blake2b(str(pid).encode(), digest_size=4).digest(), "little")
    return out
