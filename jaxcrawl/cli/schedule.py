"""``jaxcrawl schedule``: a crawl plan (rates) in, a crawl timetable out.

Reads the plan CSV that ``jaxcrawl solve --output`` writes (header ``page_id,rate,prob``;
:func:`jaxcrawl.io.read_plan_csv`) and writes ``time,page_id`` rows, sorted by time, for
every crawl in ``[--start, --start + --horizon)`` (:func:`jaxcrawl.io.write_timetable_csv`):
page ``i`` is crawled at ``(k + phase_i) / rate_i`` (:func:`jaxcrawl.timetable.timetable`),
so its gaps are ``1 / rate_i`` and its count in any window is within ±1 of ``rate_i``
times the window's length.

Rows with ``prob > 0`` are pages crawled on change signals (NeurIPS-19 Π°): their crawls
follow the signals, so they are left out of the timetable (and counted) unless
``--include-signal-pages``.
"""
from __future__ import annotations

import argparse
import json
import math
import time

import numpy as np

__all__ = ["register", "run", "PHASES"]

#: The ``--phase`` choices.
PHASES = ("golden", "hash", "zero")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``schedule`` subcommand to an ``argparse`` subparsers object."""
    p = subparsers.add_parser(
        "schedule",
        help="turn a crawl plan (page_id,rate,prob) into a timetable (time,page_id)",
        description=(
            "Derandomise a crawl plan into a deterministic, periodic timetable. Input: the plan "
            "CSV of `jaxcrawl solve --output` (header page_id,rate,prob; rate in crawls per unit "
            "time). Output: a CSV time,page_id with every crawl in [start, start + horizon), "
            "sorted by time. Each page is crawled every 1/rate, at times (k + phase)/rate, so "
            "over any window its number of crawls is within 1 of rate x window. Pages with "
            "prob > 0 are crawled on change signals and are left out unless "
            "--include-signal-pages. The last line printed is one JSON object."
        ),
    )
    p.add_argument("--plan", "-p", required=True, help="plan CSV page_id,rate,prob")
    p.add_argument("--output", "-o", help="timetable CSV to write (time,page_id); never the plan")
    p.add_argument("--horizon", type=float, default=1.0,
                   help="length of the timetable, in the plan's time unit (default 1)")
    p.add_argument("--start", type=float, default=0.0, help="start time (default 0)")
    p.add_argument("--phase", choices=PHASES, default="golden",
                   help="golden: golden-ratio phases by row order (default; equal-rate pages spread "
                        "evenly); hash: phases from a hash of each page_id (a page's crawl times do "
                        "not move when other pages are added or removed); zero: all phases 0")
    p.add_argument("--seed", type=int, default=0, help="salt of the hashed phases (default 0)")
    p.add_argument("--include-signal-pages", action="store_true",
                   help="also timetable pages with prob > 0, periodically at their rate")
    p.add_argument("--x64", action="store_true", help="compute the times in float64")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run ``jaxcrawl schedule``; returns the exit status."""
    import jax
    import jax.numpy as jnp

    from jaxcrawl import timetable as tt
    from jaxcrawl.io import check_output, read_plan_csv, write_timetable_csv
    from jaxcrawl.io.plans import page_keys

    if not (math.isfinite(args.horizon) and args.horizon > 0):
        raise ValueError(f"--horizon must be finite and > 0; got {args.horizon}")
    if not math.isfinite(args.start):
        raise ValueError(f"--start must be finite; got {args.start}")
    check_output(args.output, args.plan)
    plan = read_plan_csv(args.plan)
    signal = plan.prob > 0
    left_out = signal & ~args.include_signal_pages
    rate = np.where(left_out, 0.0, plan.rate)
    dtype = jnp.float64 if args.x64 else jnp.float32
    rate_j = jnp.asarray(rate, dtype)
    if args.phase == "golden":
        phase = tt.golden_phase(len(rate), dtype=dtype)
    elif args.phase == "hash":
        phase = tt.hashed_phase(jnp.asarray(page_keys(plan.page_id)), seed=args.seed, dtype=dtype)
    else:
        phase = jnp.zeros_like(rate_j)
    t0 = time.perf_counter()
    table = jax.block_until_ready(tt.timetable(rate_j, args.horizon, start=args.start, phase=phase))
    seconds = time.perf_counter() - t0
    mask = np.asarray(table.mask)
    times = np.asarray(table.time)[mask]
    digits = 9 if times.dtype == np.float32 else 17  # enough to round-trip the dtype
    pages = np.asarray(table.page)[mask]
    counts = np.bincount(pages, minlength=len(rate))
    dev = np.abs(counts - rate * args.horizon)
    summary = {
        "plan": args.plan,
        "num_pages": int(len(rate)),
        "num_timetabled_pages": int(np.sum(rate > 0)),
        "num_signal_pages_left_out": int(np.sum(left_out)),
        "horizon": float(args.horizon),
        "start": float(args.start),
        "phase": args.phase,
        "num_crawls": int(times.shape[0]),
        "expected_crawls": float(np.sum(rate) * args.horizon),
        "max_count_deviation": float(dev.max()) if dev.size else 0.0,
        "overflow": int(table.overflow),
        "timetable_seconds": seconds,
        "dtype": str(np.dtype(dtype)),
    }
    if args.output:
        write_timetable_csv(args.output, times.astype(np.float64), pages, plan.page_id, digits=digits)
        summary["output"] = args.output
    print(f"plan         {args.plan}: {summary['num_pages']} pages, "
          f"{summary['num_timetabled_pages']} timetabled, "
          f"{summary['num_signal_pages_left_out']} crawled on change signals (left out)")
    print(f"timetable    {summary['num_crawls']} crawls in [{args.start:g}, {args.start + args.horizon:g}) "
          f"(sum of rate x horizon = {summary['expected_crawls']:.6g}); "
          f"largest |count - rate x horizon| per page {summary['max_count_deviation']:.3g} (< 1)")
    print(f"time         {seconds:.3f} s (including compilation)")
    if args.output:
        print(f"written to   {args.output}")
    print(json.dumps(summary))
    return 0
