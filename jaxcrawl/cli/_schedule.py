"""``jaxcrawl schedule``: a crawl plan (rates) in, a crawl timetable or a crawler's queue out.

Reads the plan that ``jaxcrawl solve --output`` writes (``page_id,rate,prob``;
:func:`jaxcrawl.io.read_plan`) and writes ``time,page_id`` rows (with an ISO 8601
``--start``: ``time,epoch_seconds,page_id`` in UTC; a planned-time column last with crawl
delays), sorted by time, for every crawl in
``[--start, --start + --horizon)`` (:func:`jaxcrawl.io.write_timetable`); with crawl
delays, :func:`jaxcrawl.timetable.space_crawls` keeps every host's fetches apart:
page ``i`` is crawled at ``(k + phase_i) / rate_i`` (:func:`jaxcrawl.timetable.timetable`),
a grid anchored at the Unix epoch (0 for a numeric ``--start``), so its gaps are
``1 / rate_i``, its count in any window is within ±1 of ``rate_i`` times the window's
length, and consecutive windows continue one grid.  A page with a last fetch (``--after``:
a previous window's timetable; ``--last-fetch``: a crawler's ``page_id,last_fetch``)
continues from it instead: next fetch ``max(start, last + 1 / rate_i)``, then every
``1 / rate_i``.  With crawl delays each host is a queue served in planned order; the
timetable then has a last column, each crawl's planned time, and a page of a crawl-delay
host continues from the planned time of its last fetch, the crawls the ``--after`` windows
planned but could not fit opening this window's queue of its host (so k windows keep the
queues of one window k times as long).

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
from jaxcrawl._src.timeunits import first_crawl, iso_utc, parse_duration, parse_start, unit_seconds
from jaxcrawl.io import (
    check_output,
    read_last_fetch,
    read_plan,
    read_timetable,
    write_nutch_seeds,
    write_stormcrawler,
    write_timetable,
    write_urlfrontier,
)

from ._options import add_host_arguments, check_result, host_gaps
from ._stages import Stages

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
            "(k + phase)/rate since the Unix epoch (0 for a numeric --start), so over any window its number "
            "of crawls is within 1 of rate x window and consecutive windows continue one grid; with --after "
            "(the previous window's timetable) or --last-fetch each page continues from its last fetch. "
            "With crawl delays (--crawl-delays/--robots) no host is crawled twice within its delay: crawls are "
            "moved later as needed. Pages with prob > 0 are crawled on "
            "change signals and are left out unless --include-signal-pages, except for their periodic_rate "
            "(periodic crawls beside the signals), which is timetabled. --urlfrontier, "
            "--nutch and --stormcrawler write crawler-native queue files. The last line printed is one JSON object."
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
    p.add_argument("--after", metavar="TIMETABLE", action="append",
                   help="a previous window's timetable (what this command wrote for it; repeatable): each page's "
                        "last crawl in it is its last fetch, and the page continues from it (next fetch = last "
                        "fetch + 1/rate, or this window's start when overdue); with crawl delays each host's "
                        "last fetch is kept its delay apart from this window's first, and the crawls its "
                        "'planned' column shows were not fitted open this window's queue of their host")
    p.add_argument("--last-fetch", metavar="TABLE",
                   help="a crawler's state page_id,last_fetch (ISO 8601 UTC, or a number: epoch seconds with an "
                        "ISO --start, else the plan's unit): each page continues from its last fetch as with --after")
    p.add_argument("--urlfrontier", help="also write a URLFrontier JSON Lines file (each page's next fetch as "
                   "refetchable_from_date, epoch seconds; needs an ISO --start)")
    p.add_argument("--nutch", help="also write a Nutch injector seed list (url<TAB>nutch.fetchInterval=<s>)")
    p.add_argument("--stormcrawler", help="also write StormCrawler status documents (url, status, nextFetchDate, "
                   "metadata, key) as JSON Lines; needs an ISO --start")
    p.add_argument("--stormcrawler-bulk", action="store_true",
                   help="write --stormcrawler as an OpenSearch/Elasticsearch _bulk body (an index action line, "
                        "_id the URL's SHA-256, before each document)")
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

    stages = Stages("schedule", quiet=args.quiet)
    horizon = parse_duration(args.horizon, args.time_unit, name="--horizon")
    if not (math.isfinite(horizon) and horizon > 0):
        raise ValueError(f"--horizon must be finite and > 0; got {args.horizon}")
    start, epoch = _start(args.start)
    unit = unit_seconds(args.time_unit)
    # the window's start on the absolute time line of the grids (plan units since time 0:
    # the Unix epoch for an ISO --start), so consecutive windows continue one grid
    origin = start if epoch is None else epoch / unit
    if (args.urlfrontier) and epoch is None:
        raise ValueError("--urlfrontier needs an ISO 8601 --start (absolute time)")
    if args.stormcrawler and epoch is None:
        raise ValueError("--stormcrawler needs an ISO 8601 --start (absolute time)")
    if args.stormcrawler_bulk and not args.stormcrawler:
        raise ValueError("--stormcrawler-bulk needs --stormcrawler FILE")
    outputs = [o for o in (args.output, args.urlfrontier, args.nutch, args.stormcrawler) if o]
    for out in outputs:
        check_output(out, args.plan, args.crawl_delays, args.hosts, *(args.after or ()),
                     *([args.last_fetch] if args.last_fetch else []))
    if len(set(map(os.path.realpath, outputs))) < len(outputs):
        raise ValueError("--output, --urlfrontier, --nutch and --stormcrawler must be different files")
    with stages.stage("read"):
        plan = read_plan(args.plan)
        gaps = host_gaps(args, plan.page_id)
        last, planned_last, state = _last_fetches(args, plan.page_id, epoch, unit, outputs)
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
    phase64 = np.asarray(phase, np.float64)
    # the grids are those of the rates in the working dtype (what the timetable computes with):
    # near an epoch-day origin (2e4 days) a float32 rate's rounding moves a grid by ~1e-3 periods
    rate = np.asarray(rate_j, np.float64)
    # each page's first crawl at or after the window's start (float64, plan units since 0):
    # its grid point, or the next point of its own sequence after its last fetch
    last_group = None  # each crawl-delay host's last fetch (real fetches only)
    if gaps is not None and last is not None:
        hidx = gaps[0]
        last_group = np.full(len(gaps[2]), -np.inf)
        on = (hidx >= 0) & np.isfinite(last)
        np.maximum.at(last_group, hidx[on], last[on] - origin)
    seq_last, pending = _continue_sequences(rate, phase64, origin, last, planned_last, state,
                                            None if gaps is None else gaps[0])
    first = first_crawl(rate, phase64, origin, seq_last)
    # each page's first planned crawl of this window: its first carried-over crawl, else ``first``
    nominal0 = first if pending is None else np.where(pending[1] > 0, pending[0], first)
    check_size("--horizon", float(np.sum(np.asarray(rate, np.float64)) * horizon) + len(rate), 32,
               "crawls in the window")  # the timetable's size, before it is allocated
    t0 = time.perf_counter()
    with progress_bar(None, "timetable", quiet=args.quiet, unit="step"), stages.stage("timetable"):
        # times since --start (exact in the working dtype over the window); the window's place
        # on each page's grid is computed in float64 (timetable's eager path)
        table = jax.block_until_ready(tt.timetable(rate_j, horizon, start=origin, phase=phase, relative=True,
                                                   last_crawl=seq_last))
        if pending is not None and np.any(pending[1] > 0):
            table = _with_carried_crawls(table, pending, rate, origin)
    spaced = None
    if gaps is not None:
        with progress_bar(None, "crawl delays", quiet=args.quiet, unit="step"), stages.stage("crawl delays"):
            hidx, delay, _ = gaps
            plain = table
            spaced = tt.space_crawls(table, hidx, delay / unit, end=horizon, last_group=last_group)
            table = jax.block_until_ready(spaced.timetable)
    seconds = time.perf_counter() - t0
    with stages.stage("check"):
        mask = np.asarray(table.mask)
        rel = np.asarray(table.time)[mask].astype(np.float64)
        times = start + rel
        pages = np.asarray(table.page)[mask]
        failure = check_result({"crawl times": times}, plan.page_id[pages] if pages.size else plan.page_id,
                               dtype=dtype, what="the timetable")
        if failure is not None:
            raise ValueError(failure + "; no timetable written")
        counts = np.bincount(pages, minlength=len(rate))
        dev = np.abs(counts - rate * horizon)
        if spaced is None:
            _check_periodic(rel, pages, rate, first - origin, horizon, dtype, plan.page_id)
        # each page's next fetch after this window's start: its first kept crawl, else the time
        # a crawl delay pushed its first crawl to (past the window), else its first crawl
        due = first - origin
        if spaced is not None:
            kept = np.full(len(rate), np.inf)
            np.minimum.at(kept, pages, rel)
            pushed = np.asarray(spaced.first_deferred, np.float64)
            due = np.where(np.isfinite(kept), kept, np.where(np.isfinite(pushed), np.maximum(pushed, horizon), due))
        late = _late_pages(due, last, origin, rate)
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
        "num_pages_overdue": 0,
        **state,
        "num_pages_later_than_last_fetch_plus_interval": late,
        "timetable_seconds": seconds,
        "dtype": str(np.dtype(dtype)),
    }
    if spaced is not None:
        with stages.stage("report"):
            hidx, delay, names = gaps
            summary["num_crawl_delay_hosts"] = int(delay.size)
            summary["crawls_moved_for_crawl_delays"] = int(spaced.moved)
            summary["crawls_deferred_past_horizon"] = int(spaced.deferred)
            summary["max_move"] = float(spaced.max_delay)
            h = hidx[pages]
            order = np.lexsort((times, h))
            hs, ts = h[order], times[order]
            same = (hs[1:] == hs[:-1]) & (hs[1:] >= 0)
            gaps_seen = (ts[1:] - ts[:-1])[same] * unit
            need = delay[hs[1:][same]]
            summary["min_host_gap_over_delay"] = float(np.min(gaps_seen / np.where(need > 0, need, np.inf))) \
                if gaps_seen.size else None
            summary.update(_delay_hosts(plain, table, hidx, delay, names, horizon, unit))
    if args.output:
        with progress_bar(times.shape[0], "writing timetable", quiet=args.quiet) as bar, stages.stage("write"):
            shift = start if epoch is not None else 0.0
            planned = None  # never after the crawl (the float32 times round within a few ms of the grid)
            if spaced is not None:
                planned = np.minimum(start + _planned_times(pages, nominal0, rate, origin), times) - shift
            write_timetable(args.output, times - shift, pages, plan.page_id, start_epoch=epoch,
                            unit=args.time_unit, planned=planned, progress=bar)
        summary["output"] = args.output
    if args.urlfrontier or args.nutch or args.stormcrawler:
        with stages.stage("crawler files"):
            # signal-only pages (no periodic crawls) are told their planned signal-driven rate:
            # due on that rate's grid (or one interval after their last fetch), flagged on_signal
            only_signal = left_out & (rate == 0) & (plan.rate > 0)
            files_rate = np.where(only_signal, plan.rate, np.where(left_out, plan.periodic_rate, plan.rate))
            with np.errstate(over="ignore"):
                signal_rate = np.asarray(plan.rate).astype(jnp.dtype(dtype)).astype(np.float64)
            files_due = np.where(only_signal, first_crawl(signal_rate, phase64, origin, last) - origin, due)
            key = None
            if gaps is not None:
                hidx, _, names = gaps
                if names.size:
                    key = np.where(hidx >= 0, names[np.maximum(hidx, 0)], "")  # "": the URL's host
            if args.urlfrontier:
                k = write_urlfrontier(args.urlfrontier, plan.page_id, files_rate, epoch + files_due * unit,
                                      unit=args.time_unit, key=key, on_signal=signal)
                summary["urlfrontier"] = {"path": args.urlfrontier, "num_urls": k.num_urls,
                                          "num_clamped": k.num_clamped}
            if args.nutch:
                k = write_nutch_seeds(args.nutch, plan.page_id, files_rate, unit=args.time_unit, on_signal=signal)
                summary["nutch"] = {"path": args.nutch, "num_urls": k.num_urls, "num_clamped": k.num_clamped}
            if args.stormcrawler:
                k = write_stormcrawler(args.stormcrawler, plan.page_id, files_rate, epoch + files_due * unit,
                                       unit=args.time_unit, key=key, on_signal=signal, bulk=args.stormcrawler_bulk)
                summary["stormcrawler"] = {"path": args.stormcrawler, "num_urls": k.num_urls,
                                           "num_clamped": k.num_clamped, "bulk": bool(args.stormcrawler_bulk)}
            summary["num_signal_only_pages_in_crawler_files"] = int(np.sum(only_signal))
    summary["seconds"] = stages.seconds()
    print(f"plan         {args.plan}: {summary['num_pages']} pages, "
          f"{summary['num_timetabled_pages']} timetabled, "
          f"{summary['num_signal_pages_left_out']} crawled on change signals (left out"
          + (f"; {summary['num_signal_pages_with_periodic_crawls']} of them timetabled at their periodic_rate"
             if summary["num_signal_pages_with_periodic_crawls"] else "") + ")")
    if last is not None:
        print(f"last fetches {summary['num_pages_with_last_fetch']} pages continue from their last fetch "
              f"({summary['num_pages_overdue']} overdue: crawled at the window's start); the others keep their grid")
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
    secs = summary["seconds"]
    print(f"time         {secs['total']:.3f} s: " + ", ".join(f"{k} {v:.3f}" for k, v in secs.items() if k != "total")
          + " (including compilation)")
    if args.output:
        print(f"written to   {args.output}")
    report_crawler_files(summary)
    print(json.dumps(summary))
    return 0


def _continue_sequences(rate, phase, origin: float, last, planned_last, state: dict, hidx):
    """Each page's crawl sequence continued into this window from the ``--after`` /
    ``--last-fetch`` state: ``(seq_last, pending)``.

    ``seq_last`` is what :func:`jaxcrawl.timetable.timetable` takes as each page's last crawl
    (first crawl ``max(start, seq_last + 1 / rate)``): the *planned* time of its last fetch,
    so that a crawl-delay move does not shift the page's later crawls.  ``pending`` is
    ``(first, count)`` per page, or None: the crawls of crawl-delay hosts that the previous
    windows planned but the delays pushed past their end.  One long window keeps them in its
    hosts' queues, in the order of their planned times; so does this window, which starts each
    host's queue with them (planned times before its start).  A page of such a host continues
    its own sequence after its last fetch; one without a fetch in the ``--after`` files
    continues from the latest planned time its host was served up to (everything planned
    before it was fetched), else from where those files begin (their earliest crawl).  A page of any other host with
    a grid point inside the ``--after`` windows but no crawl in them is overdue once (crawled
    at this window's start)."""
    lo = state.pop("after_from", None)
    planned_from = state.pop("planned_from", None)
    if last is None:
        return None, None
    seq_last = planned_last.copy()
    pos = rate > 0
    r = np.where(pos, rate, 1.0)
    overdue = pos & np.isfinite(seq_last) & (seq_last + 1.0 / r < origin)
    state["num_pages_overdue"] = int(np.sum(overdue))
    if lo is None:
        return seq_last, None
    delay_page = np.zeros(len(rate), bool) if hidx is None else (hidx >= 0) & pos
    grid_prev = first_crawl(rate, phase, origin) - 1.0 / r
    carried = pos & ~delay_page & ~np.isfinite(seq_last) & (grid_prev >= lo) & (grid_prev < origin)
    seq_last = np.where(carried, origin - 1.0 / r, seq_last)
    state["num_pages_carried_over"] = int(np.sum(carried))
    state["num_crawls_carried_over"] = int(np.sum(carried))
    state["num_pages_overdue"] = int(np.sum(overdue | carried))
    if not delay_page.any():
        return seq_last, None
    has = delay_page & np.isfinite(seq_last)
    served = np.full(int(hidx.max()) + 1, -np.inf)  # each host's latest planned time served
    np.maximum.at(served, hidx[has], seq_last[has])
    since = np.where(delay_page, served[np.maximum(hidx, 0)], -np.inf)
    since = np.where(np.isfinite(since), since, lo)
    nxt = np.where(has, seq_last + 1.0 / r, first_crawl(rate, phase, since))
    count = np.where(delay_page & (nxt >= planned_from) & (nxt < origin), np.ceil((origin - nxt) * r), 0.0)
    count = count.astype(np.int64)
    seq_last = np.where(delay_page, np.where(count > 0, nxt + (count - 1) / r, nxt - 1.0 / r), seq_last)
    state["num_pages_carried_over"] += int(np.sum(count > 0))
    state["num_crawls_carried_over"] += int(np.sum(count))
    state["num_pages_overdue"] = int(np.sum(overdue | carried | (count > 0)))
    return seq_last, (nxt, count)


def _with_carried_crawls(table, pending, rate, origin: float):
    """``table`` with the carried-over crawls first: each at this window's start (time 0),
    ordered by planned time then page, so that the crawl-delay spacing (which keeps each
    host's crawls in table order among equal times) serves them as one long window would."""
    nxt, count = pending
    page = np.repeat(np.arange(len(count), dtype=np.int64), count)
    k = np.arange(page.size) - np.repeat(np.cumsum(count) - count, count)
    planned = nxt[page] + k / rate[page] - origin
    order = np.lexsort((page, planned))
    num = page.size
    dtype = table.time.dtype
    return tt.Timetable(jnp.concatenate([jnp.zeros((num,), dtype), table.time]),
                        jnp.concatenate([jnp.asarray(page[order], jnp.int32), table.page]),
                        jnp.concatenate([jnp.ones((num,), bool), table.mask]),
                        table.num_crawls + num, table.overflow)


def _planned_times(pages, nominal0, rate, origin: float) -> np.ndarray:
    """Each timetabled crawl's planned time (since the window's start): a page's crawls keep
    their order, so its ``k``-th crawl here is its ``k``-th planned one, ``nominal0 + k / rate``."""
    order = np.argsort(pages, kind="stable")
    ps = pages[order]
    starts = np.flatnonzero(np.r_[True, ps[1:] != ps[:-1]]) if ps.size else np.zeros(0, np.int64)
    sizes = np.diff(np.r_[starts, ps.size])
    rank = np.empty(ps.size, np.int64)
    rank[order] = np.arange(ps.size) - np.repeat(starts, sizes)
    return nominal0[pages] - origin + rank / rate[pages]


def _late_pages(due, last, origin, rate) -> int:
    """Pages whose next fetch (``due``, since the window's start) is later than their last
    fetch plus their interval -- only a crawl-delay deferral can do that (reported)."""
    if last is None:
        return 0
    pos = (rate > 0) & np.isfinite(last)
    r = np.where(pos, rate, 1.0)
    bound = np.maximum(last + 1.0 / r - origin, 0.0)
    return int(np.sum(pos & (due > bound + 1e-9 * (1.0 + np.abs(bound)))))


def _match(page_id: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Index of each of ``ids`` among the plan's ``page_id`` (-1: not in the plan); one sort."""
    a, b = np.asarray(page_id), np.asarray(ids)
    if a.dtype.kind != b.dtype.kind:
        a, b = a.astype(str), b.astype(str)
    if not a.size or not b.size:
        return np.full(b.shape, -1, np.int64)
    order = np.argsort(a, kind="stable")
    pos = np.minimum(np.searchsorted(a[order], b), a.size - 1)
    idx = order[pos]
    return np.where(a[idx] == b, idx, -1).astype(np.int64)


def _last_fetches(args: argparse.Namespace, page_id: np.ndarray, epoch: float | None, unit: float,
                  outputs: list[str]) -> tuple[np.ndarray | None, np.ndarray | None, dict]:
    """Each page's last fetch before this window (absolute, plan units since time 0; NaN:
    none) from ``--after`` timetables (each page's latest crawl in them) and ``--last-fetch``
    (a crawler's ``page_id,last_fetch``), the latest of them; the planned time of that fetch
    (a timetable's ``planned`` column, else the fetch itself); and the summary's counts (with
    ``after_from``: the earliest crawl in the ``--after`` files, where the windows they cover
    are taken to begin -- they end at this window's start -- and ``planned_from``: their
    earliest planned time).  ``None`` when neither is
    given."""

    sources = list(args.after or ())
    if not sources and not args.last_fetch:
        return None, None, {}
    outs = {os.path.realpath(o) for o in outputs}
    last = np.full(len(page_id), -np.inf)
    after_last = np.full(len(page_id), -np.inf)
    after_planned = np.full(len(page_id), -np.inf)
    unmatched = 0
    after_from = planned_from = None
    for path in sources + ([args.last_fetch] if args.last_fetch else []):
        if os.path.realpath(path) in outs:
            flag = "--after" if path in sources else "--last-fetch"
            raise ValueError(f"{flag} {path} is also an output of this run; give the previous window's file")
        planned = None
        if path in sources:
            t, ids, absolute, planned = read_timetable(path, planned=True)
            if absolute != (epoch is not None):
                have, need = ("epoch_seconds", "plan-unit times") if absolute else ("plan-unit times", "epoch_seconds")
                raise ValueError(f"--after {path} has {have} but this run's --start gives {need}; schedule both "
                                 "windows with the same kind of --start (ISO 8601 or a number)")
        else:
            t, ids, absolute = read_last_fetch(path)
            if absolute and epoch is None:
                raise ValueError(f"--last-fetch {path} has ISO 8601 dates but this run's --start is a number; give "
                                 "an ISO 8601 --start or last fetches in the plan's unit")
            absolute = epoch is not None  # a number with an ISO --start: epoch seconds
        t = t / unit if absolute else t
        idx = _match(page_id, ids)
        ok = idx >= 0
        unmatched += int(np.sum(~ok))
        np.maximum.at(last, idx[ok], t[ok])
        if planned is not None:
            planned = np.minimum(planned / unit if absolute else planned, t)
            if planned.size:
                after_from = min(float(t.min()), after_from if after_from is not None else np.inf)
                planned_from = min(float(planned.min()), planned_from if planned_from is not None else np.inf)
            np.maximum.at(after_last, idx[ok], t[ok])
            np.maximum.at(after_planned, idx[ok], planned[ok])  # a page's crawls keep their planned order
    has = np.isfinite(last)
    last = np.where(has, last, np.nan)
    planned_last = np.where(has & (after_last >= last), after_planned, last)
    return last, planned_last, {"num_pages_with_last_fetch": int(np.sum(has)),
                                "num_last_fetch_rows_not_in_plan": unmatched, "after_from": after_from,
                                "planned_from": planned_from}


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
    """Print the report lines of the crawler files in ``summary`` (``urlfrontier``, ``nutch``,
    ``stormcrawler``)."""

    limits = {"urlfrontier": "next fetches after 2286-11-20T17:46:39Z written as that date",
              "nutch": "fetch intervals longer than 2^31 - 1 s written as 2147483647",
              "stormcrawler": "next fetches after 9999-12-31T23:59:59.999Z written as that date"}
    for key in ("urlfrontier", "nutch", "stormcrawler"):
        if key in summary:
            entry = summary[key]
            clamped = f" ({entry['num_clamped']} {limits[key]})" if entry["num_clamped"] else ""
            print(f"{key:<12} {entry['num_urls']} URLs written to {entry['path']}{clamped}")


def _check_periodic(rel, pages, rate, first, horizon, dtype, page_id) -> None:
    """The final guard of a periodic timetable (no crawl-delay spacing), recomputed in float64:
    every crawl in ``[0, horizon)`` (times since the window's start) on its page's grid
    ``first_i + k / rate_i`` (``first``: each page's first crawl since the start, from its grid
    or its last fetch), and each page's count ``max(ceil(horizon rate - first rate), 0)`` (one
    more or one fewer where the window's end falls within the working dtype's rounding, over
    the window's length, of a crawl).  ``ValueError`` naming the first bad page, suggesting
    ``--x64`` in float32."""
    eps = float(np.finfo(dtype).eps)
    hint = "; --x64 (float64) may help" if np.dtype(dtype).itemsize < 8 else ""
    outside = (rel < -4 * eps * horizon) | (rel >= horizon * (1 + 4 * eps))
    if outside.any():
        i = int(np.flatnonzero(outside)[0])
        raise ValueError(f"the timetable has {int(outside.sum())} crawls outside the window (first: page "
                         f"{page_id[pages[i]]!r} at {rel[i]:.17g} after its start){hint}; no timetable written")
    pos = rate > 0
    r = np.where(pos, rate, 1.0)
    delta = np.where(pos & np.isfinite(first), first * r, 0.0)  # the first crawl, in periods after the start
    x = rel * r[pages] - delta[pages]
    off = np.abs(x - np.round(x))
    # a thousandth of the crawl interval, or the dtype's rounding over the window
    tol = 1e-3 + 16 * eps * (1 + r[pages] * horizon + delta[pages])
    bad = (off > tol) | (x < -tol)
    if bad.any():
        i = int(np.argmax(np.where(bad, off + np.maximum(-x, 0), -1.0)))
        raise ValueError(f"the timetable's crawl times of {int(np.unique(pages[bad]).size)} pages are off their "
                         f"period (first: page {page_id[pages[i]]!r}, {off[i]:.3g} of its crawl interval off) "
                         f"-- the working dtype cannot resolve these times{hint}; no timetable written")
    counts = np.bincount(pages, minlength=len(rate))
    span = horizon * r - delta
    slack = 16 * eps * (1 + r * horizon + delta)
    fewest, most = np.maximum(np.ceil(span - slack), 0), np.maximum(np.ceil(span + slack), 0)
    wrong = ((counts < fewest) | (counts > most)) & pos
    if wrong.any():
        i = int(np.flatnonzero(wrong)[0])
        raise ValueError(f"the timetable gives {int(wrong.sum())} pages the wrong number of crawls (first: page "
                         f"{page_id[i]!r}, {int(counts[i])} crawls where its period gives "
                         f"{int(max(np.ceil(span[i]), 0))}){hint}; no timetable written")


def _page_keys(page_id) -> np.ndarray:
    """Stable 32-bit keys of page ids (BLAKE2b of their text) for
    :func:`jaxcrawl.timetable.hashed_phase`: a page's key does not depend on the others."""
    ids = np.asarray(page_id).tolist()
    out = np.empty(len(ids), np.uint32)
    for i, pid in enumerate(ids):
        out[i] = int.from_bytes(hashlib.blake2b(str(pid).encode(), digest_size=4).digest(), "little")
    return out
