"""``jaxcrawl schedule``: a crawl plan (rates) in, a crawl timetable out.

Reads the plan CSV that ``jaxcrawl solve --output`` writes (header ``page_id,rate,prob``)
and writes ``time,page_id`` rows, sorted by time, for every crawl in
``[--start, --start + --horizon)``: page ``i`` is crawled at ``(k + phase_i) / rate_i``
(:func:`jaxcrawl.schedule.timetable`), so its gaps are ``1 / rate_i`` and its count in
any window is within ±1 of ``rate_i`` times the window's length.

Rows with ``prob > 0`` are pages crawled on change signals (NeurIPS-19 Π°): their crawls
follow the signals, so they are left out of the timetable (and counted) unless
``--include-signal-pages``.
"""
from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import os
import time
from typing import NamedTuple

import numpy as np

__all__ = ["register", "run", "read_plan_csv", "Plan"]

PHASES = ("golden", "hash", "zero")


def register(subparsers) -> None:
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
    p.add_argument("--output", "-o", help="timetable CSV to write (time,page_id)")
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


class Plan(NamedTuple):
    page_id: np.ndarray
    rate: np.ndarray
    prob: np.ndarray


def read_plan_csv(path: str) -> Plan:
    """Read ``page_id,rate,prob`` (header required).

    Every malformed line raises ``ValueError`` naming the file and line number: wrong
    number of fields, an empty page id, a rate that is not a finite number >= 0, a prob
    that is not a number in [0, 1].
    """
    if not os.path.exists(path):
        raise ValueError(f"{path}: no such file")
    ids, rates, probs = [], [], []
    with open(path, newline="") as fh:
        reader = csv.reader(fh)
        try:
            header = next(reader)
        except StopIteration:
            raise ValueError(f"{path}: the file is empty (expected a header page_id,rate,prob)") from None
        if [h.strip().lower() for h in header] != ["page_id", "rate", "prob"]:
            raise ValueError(f"{path}:1: header must be 'page_id,rate,prob', got {','.join(header)!r}")
        for lineno, row in enumerate(reader, start=2):
            if not row or (len(row) == 1 and not row[0].strip()):
                continue
            if len(row) != 3:
                raise ValueError(f"{path}:{lineno}: expected 3 fields, got {len(row)}: {row!r}")
            pid = row[0].strip()
            if not pid:
                raise ValueError(f"{path}:{lineno}: empty page_id")
            try:
                r = float(row[1])
            except ValueError:
                raise ValueError(f"{path}:{lineno}: rate {row[1]!r} is not a number") from None
            if not math.isfinite(r) or r < 0:
                raise ValueError(f"{path}:{lineno}: rate must be finite and >= 0, got {row[1]!r}")
            try:
                q = float(row[2])
            except ValueError:
                raise ValueError(f"{path}:{lineno}: prob {row[2]!r} is not a number") from None
            if not (0.0 <= q <= 1.0):
                raise ValueError(f"{path}:{lineno}: prob must be in [0, 1], got {row[2]!r}")
            ids.append(pid)
            rates.append(r)
            probs.append(q)
    if not ids:
        raise ValueError(f"{path}: no pages after the header")
    return Plan(np.asarray(ids, dtype=object), np.asarray(rates), np.asarray(probs))


def _page_keys(page_id) -> np.ndarray:
    """Stable 32-bit integer keys of string page ids (BLAKE2b), for hashed phases."""
    out = np.empty(len(page_id), np.uint32)
    for i, pid in enumerate(page_id):
        out[i] = int.from_bytes(hashlib.blake2b(str(pid).encode(), digest_size=4).digest(),
                                "little")
    return out


def _write_timetable(path, times, pages, page_id, digits, chunk=1 << 16):
    fmt = f"{{:.{digits}g}},{{}}\n"
    with open(path, "w", newline="") as fh:
        fh.write("time,page_id\n")
        for s in range(0, times.shape[0], chunk):
            buf = io.StringIO()
            for t, i in zip(times[s:s + chunk].tolist(), pages[s:s + chunk].tolist()):
                buf.write(fmt.format(t, page_id[i]))
            fh.write(buf.getvalue())


def run(args) -> int:
    import jax

    if args.x64:
        jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    from . import schedule

    if not (math.isfinite(args.horizon) and args.horizon > 0):
        raise ValueError(f"--horizon must be finite and > 0; got {args.horizon}")
    if not math.isfinite(args.start):
        raise ValueError(f"--start must be finite; got {args.start}")
    plan = read_plan_csv(args.plan)
    signal = plan.prob > 0
    rate = np.where(signal & ~args.include_signal_pages, 0.0, plan.rate)
    dtype = jnp.float64 if args.x64 else jnp.float32
    rate_j = jnp.asarray(rate, dtype)
    if args.phase == "golden":
        phase = schedule.golden_phase(len(rate), dtype=dtype)
    elif args.phase == "hash":
        phase = schedule.hashed_phase(jnp.asarray(_page_keys(plan.page_id)), seed=args.seed,
                                      dtype=dtype)
    else:
        phase = jnp.zeros_like(rate_j)
    t0 = time.perf_counter()
    tt = schedule.timetable(rate_j, args.horizon, start=args.start, phase=phase)
    jax.block_until_ready(tt)
    seconds = time.perf_counter() - t0
    mask = np.asarray(tt.mask)
    times = np.asarray(tt.time)[mask]
    digits = 9 if times.dtype == np.float32 else 17  # enough to round-trip the dtype
    times = times.astype(np.float64)
    pages = np.asarray(tt.page)[mask]
    counts = np.bincount(pages, minlength=len(rate))
    dev = np.abs(counts - rate * args.horizon)
    summary = {
        "plan": args.plan,
        "num_pages": int(len(rate)),
        "num_timetabled_pages": int(np.sum(rate > 0)),
        "num_signal_pages_left_out": int(np.sum(signal & ~args.include_signal_pages)),
        "horizon": float(args.horizon),
        "start": float(args.start),
        "phase": args.phase,
        "num_crawls": int(times.shape[0]),
        "expected_crawls": float(np.sum(rate) * args.horizon),
        "max_count_deviation": float(dev.max()) if dev.size else 0.0,
        "overflow": int(tt.overflow),
        "timetable_seconds": seconds,
        "dtype": str(np.dtype(dtype)),
    }
    if args.output:
        _write_timetable(args.output, times, pages, plan.page_id, digits)
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
