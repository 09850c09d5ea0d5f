"""``jaxcrawl solve``: optimal crawl rates for a page table or the synthetic default.

Reads ``page_id,importance,change_rate[,complete][,min_interval][,max_interval]``
(:func:`jaxcrawl.io.read_problem`; CSV, Parquet or JSON Lines by the file's name) or draws
:func:`jaxcrawl.synthetic`, solves with :func:`jaxcrawl.solve` for the
``--objective`` (any name of :func:`jaxcrawl.objective_names`) under the revisit bounds
(the file's interval columns and ``--min-interval``/``--max-interval``) and host caps
(``--host-caps`` and/or ``1/crawl-delay`` from ``--crawl-delays``/``--robots``: the smaller applies), and writes
the plan ``page_id,rate,prob`` (:func:`jaxcrawl.io.write_plan`), optionally a URLFrontier
JSON Lines file and a Nutch seed list (:func:`jaxcrawl.io.write_urlfrontier`).  A solve that did not converge,
produced non-finite rates, or whose rates miss the bandwidth by more than the tolerance
exits with status 3 and writes no plan.
"""
from __future__ import annotations

import argparse
import functools
import json
import math
import os
import time
from typing import Any

import numpy as np

from . import multiprocess

__all__ = ["register", "run", "check_plan"]


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``solve`` subcommand to an ``argparse`` subparsers object."""
    from jaxcrawl import objective_names

    p = subparsers.add_parser(
        "solve",
        help="optimal crawl rates for a page table (CSV) or the synthetic default",
        description=(
            "Solve for optimal crawl rates. Input: a CSV with header "
            "page_id,importance,change_rate[,complete]; without --input, a seeded synthetic "
            "problem shaped like the NeurIPS-19 data set. Writes a plan CSV page_id,rate,prob "
            "and prints the harmonic and binary cost of the plan, the dual and the solve time; "
            "the last line printed is one JSON object. Exit status 3 (and no plan written) when "
            "the solve did not converge, produced non-finite rates or missed the bandwidth."
        ),
    )
    p.add_argument("--input", "-i", help="page table: .csv, .parquet or .jsonl (.gz for gzip text); "
                   "default: synthetic problem")
    p.add_argument("--output", "-o", help="plan to write (page_id,rate,prob; format by name: .csv, .parquet, "
                   ".jsonl); never the input")
    p.add_argument("--num-pages", type=int, default=100_000, help="synthetic problem size (default 100000)")
    p.add_argument("--seed", type=int, default=0, help="synthetic problem seed (default 0)")
    bw = p.add_mutually_exclusive_group()
    bw.add_argument("--bandwidth", type=float, help="total crawls per unit time R")
    bw.add_argument("--bandwidth-fraction", type=float, default=None,
                    help="R as a fraction of the number of pages (default 0.2)")
    p.add_argument("--objective", choices=objective_names(), default="harmonic",
                   help="a registered objective (jaxcrawl.objective_names()): harmonic: LambdaCrawl; "
                        "harmonic-approx: LambdaCrawlApprox; binary: BinaryLambdaCrawl; binary-epsilon: "
                        "BLC-epsilon; delay: accumulated delay; uniform: uniform-interval freshness")
    p.add_argument("--epsilon", type=float, default=None,
                   help="with --objective binary-epsilon only: the floor fraction (every page gets >= "
                        "epsilon*R/n; default 0.4)")
    p.add_argument("--host-caps", help="CSV host_id,cap of per-host crawl-rate caps (see docs/cli.md)")
    p.add_argument("--max-steps", type=int, default=100,
                   help="root-finding step cap (default 100); a solve stopped by it exits with status 3")
    p.add_argument("--rtol", type=float, default=None,
                   help="relative budget tolerance of the root-find (default 4 eps^0.75 of the dtype)")
    p.add_argument("--x64", action="store_true", help="solve in float64")
    multiprocess.add_arguments(p)  # --coordinator/--num-processes/--process-id: jaxcrawl.cli.multiprocess
    add_time_arguments(p)
    p.add_argument("--min-interval", help="revisit bound for every page: never crawl a page more often than "
                   "this (a number in --time-unit, or 90s/15m/6h/2d/1w); the input's min_interval column "
                   "per page, the larger applies")
    p.add_argument("--max-interval", help="revisit bound for every page: crawl each page at least this often "
                   "(same forms); the input's max_interval column per page, the smaller applies")
    add_host_arguments(p)
    p.add_argument("--urlfrontier", help="also write a URLFrontier JSON Lines file (one KnownURLItem per page, "
                   "refetchable_from_date in epoch seconds); see docs/io.md")
    p.add_argument("--nutch", help="also write an Apache Nutch injector seed list "
                   "(url<TAB>nutch.fetchInterval=<seconds>)")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bars")
    p.set_defaults(func=run)



def bandwidth_from_args(args: argparse.Namespace, num_pages: int) -> float:
    """``--bandwidth``, else ``--bandwidth-fraction`` (default 0.2) times the number of pages."""
    if args.bandwidth is not None:
        if not (math.isfinite(args.bandwidth) and args.bandwidth > 0):
            raise ValueError(f"--bandwidth must be finite and > 0; got {args.bandwidth}")
        return args.bandwidth
    frac = 0.2 if args.bandwidth_fraction is None else args.bandwidth_fraction
    if not (math.isfinite(frac) and frac > 0):
        raise ValueError(f"--bandwidth-fraction must be finite and > 0; got {frac}")
    return frac * num_pages


def budget_tolerance(rtol: float | None, dtype: Any, bandwidth: float) -> float:
    """The absolute budget tolerance of the final guard: ``bandwidth`` times the solve's
    relative tolerance (``--rtol``, else the dtype's default), at least 32 ulps of the dtype."""
    from jaxcrawl._src.rootfind import default_rtol

    return max(rtol or default_rtol(dtype), 32 * float(np.finfo(dtype).eps)) * float(bandwidth)

def add_time_arguments(p: argparse.ArgumentParser) -> None:
    """``--time-unit`` and ``--start`` (shared by solve and schedule)."""
    from jaxcrawl._src.timeunits import TIME_UNITS

    p.add_argument("--time-unit", choices=tuple(TIME_UNITS), default="days",
                   help="the unit of time of the rates: the input's change_rate is changes per this unit, "
                        "and the plan's rate crawls per this unit (default days)")
    p.add_argument("--start", help="ISO 8601 UTC start of the schedule (e.g. 2026-01-05T06:00:00Z; "
                   "default: now): crawler outputs and timetables carry absolute times from it")


def add_host_arguments(p: argparse.ArgumentParser) -> None:
    """``--hosts``, ``--crawl-delays``, ``--robots`` and ``--user-agent``."""
    p.add_argument("--hosts", help="page -> host mapping (page_id,host_id); default: the host of URL page ids")
    delays = p.add_mutually_exclusive_group()
    delays.add_argument("--crawl-delays", help="table host,crawl_delay (seconds between two fetches of a host)")
    delays.add_argument("--robots", help="directory of robots.txt files (HOST.txt or HOST/robots.txt); "
                        "their Crawl-delay (or Request-rate) for --user-agent")
    p.add_argument("--user-agent", default="*", help="user agent whose robots.txt rules apply (default *)")


def host_gaps(args: argparse.Namespace, page_id: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """``(host_index, delay_seconds, host_names)`` of the pages from ``--crawl-delays`` /
    ``--robots`` (None when neither is given)."""
    from jaxcrawl.io import read_crawl_delays

    if not (args.crawl_delays or args.robots):
        if getattr(args, "hosts", None):
            raise ValueError("--hosts maps pages to hosts for --crawl-delays or --robots; give one of them")
        return None
    if args.robots and not os.path.isdir(args.robots):
        raise ValueError(f"{args.robots}: not a directory (expected robots.txt files named HOST.txt "
                         "or HOST/robots.txt)")
    return read_crawl_delays(args.crawl_delays or args.robots, page_id, pages_path=args.hosts,
                             user_agent=args.user_agent)


def start_epoch(args: argparse.Namespace) -> float:
    """``--start`` as epoch seconds (now, to the second, when not given)."""
    import time as _time

    from jaxcrawl._src.timeunits import parse_start

    return parse_start(args.start) if args.start else float(int(_time.time()))


def _number(x: Any) -> float | None:
    """A float for the JSON summary (None when not finite, so the line stays valid JSON)."""
    v = float(x)
    return v if math.isfinite(v) else None


def check_plan(rate: np.ndarray, prob: np.ndarray, bandwidth: float, converged: bool,
               residual_before: float, num_steps: int, tolerance: float, page_id: np.ndarray,
               dtype: Any = None) -> str | None:
    """Why a solved plan must not be written (None when it may be).

    Rejects a root-find that did not converge, non-finite rates or probabilities, and a
    plan whose rates (summed in float64) miss ``bandwidth`` by more than ``tolerance``
    (:func:`jaxcrawl.cli.check_result`, the guard every command shares).
    """
    from . import check_result

    return check_result({"rates": rate, "probabilities": prob}, page_id, converged=converged, num_steps=num_steps,
                        residual_before=residual_before, bandwidth=bandwidth, tolerance=tolerance,
                        dtype=dtype)


def objective_from_args(args: argparse.Namespace):
    """The objective of ``--objective`` (with ``--epsilon``: the floor of ``binary-epsilon`` only)."""
    import jaxcrawl

    if args.objective == "binary-epsilon":
        return jaxcrawl.binary(0.4 if args.epsilon is None else args.epsilon)
    if getattr(args, "epsilon", None) is not None:
        raise ValueError(f"--epsilon applies to --objective binary-epsilon only (got --objective {args.objective})")
    return jaxcrawl.objective(args.objective)


def _load(args: argparse.Namespace) -> tuple[Any, str]:
    import jax

    from jaxcrawl.io import PageTable, read_problem
    from jaxcrawl.io.synthetic import synthetic

    if args.input:
        t = read_problem(args.input)
        return t, args.input
    n = args.num_pages
    if n < 1:
        raise ValueError(f"--num-pages must be >= 1; got {n}")
    syn = jax.jit(synthetic, static_argnums=1)(jax.random.key(args.seed), n)  # one compile, not one per op
    return (PageTable.from_arrays(np.arange(n), np.asarray(syn.importance), np.asarray(syn.change_rate),
                                  np.asarray(syn.complete)), f"synthetic(seed={args.seed}, num_pages={n})")


def run(args: argparse.Namespace) -> int:
    """Run ``jaxcrawl solve``; returns the exit status (raises ``NonConvergenceError``
    for status 3)."""
    import jax
    import jax.numpy as jnp

    import jaxcrawl
    from jaxcrawl import check_rate_bounds, rate_bounds
    from jaxcrawl._src.fileio import progress_bar
    from jaxcrawl._src.hostmap import caps_pages_path
    from jaxcrawl._src.timeunits import parse_duration, unit_seconds
    from jaxcrawl.io import check_output, write_plan

    if multiprocess.requested(args):  # several processes: each solves from its own rows
        return multiprocess.run_solve(args)
    if args.max_steps < 1:
        raise ValueError(f"--max-steps must be >= 1; got {args.max_steps}")
    if args.rtol is not None and not (math.isfinite(args.rtol) and 0 < args.rtol < 1):
        raise ValueError(f"--rtol must be in (0, 1); got {args.rtol}")
    obj = objective_from_args(args)
    min_iv = None if args.min_interval is None else parse_duration(args.min_interval, args.time_unit,
                                                                   name="--min-interval")
    max_iv = None if args.max_interval is None else parse_duration(args.max_interval, args.time_unit,
                                                                   name="--max-interval")
    if max_iv == 0:
        raise ValueError("--max-interval must be > 0")
    mapping = caps_pages_path(args.host_caps) if args.host_caps else None
    outputs = [o for o in (args.output, args.urlfrontier, args.nutch) if o]
    for out in outputs:
        check_output(out, args.input, args.host_caps, mapping, args.crawl_delays, args.hosts)
    if len(set(map(os.path.realpath, outputs))) < len(outputs):
        raise ValueError("--output, --urlfrontier and --nutch must be different files")
    start = start_epoch(args) if (args.urlfrontier or args.nutch) else None
    t_read = time.perf_counter()
    rows, source = _load(args)
    read_seconds = time.perf_counter() - t_read
    page_id, imp, lam, comp = rows.page_id, rows.importance, rows.change_rate, rows.complete
    n = len(page_id)
    bandwidth = bandwidth_from_args(args, n)
    # revisit bounds: the file's columns and the arguments, the tighter of each applies
    bounded = any(v is not None for v in (rows.min_interval, rows.max_interval, min_iv, max_iv))
    lo = hi = None
    if bounded:
        lo, hi = rows.rate_bounds()
        a_lo, a_hi = rate_bounds(n, min_interval=min_iv, max_interval=max_iv)
        lo, hi = np.maximum(lo, a_lo), np.minimum(hi, a_hi)
        bounded = bool(np.any(lo > 0) or np.any(np.isfinite(hi)))
    if bounded:
        obj_hi = np.where(comp, lam, np.inf) if args.objective in ("harmonic", "harmonic-approx") else None
        check_rate_bounds(lo, hi, float(bandwidth), page_id=page_id, objective_upper=obj_hi,
                          unit=args.time_unit[:-1])
    dtype = jnp.float64 if args.x64 else jnp.float32
    from jaxcrawl._src.checks import check_representable

    for name, col in (("importance", imp), ("change_rate", lam)):  # validated in the dtype they are used in
        check_representable(col, name, dtype, labels=page_id, source=args.input)
    problem = jaxcrawl.CrawlProblem(jnp.asarray(imp, dtype), jnp.asarray(lam, dtype), bandwidth,
                                    jnp.asarray(comp))
    bounds = (jnp.asarray(lo, dtype), jnp.asarray(hi, dtype)) if bounded else None
    gaps = host_gaps(args, page_id)
    num_delay_hosts = 0
    caps = None
    if args.host_caps and gaps is None:
        from jaxcrawl.io import read_host_caps

        hidx, hcap = read_host_caps(args.host_caps, page_id)
        caps = jaxcrawl.HostCaps(jnp.asarray(hidx), jnp.asarray(hcap, dtype))
    elif gaps is not None:
        hidx, delay, names = gaps
        num_delay_hosts = int(delay.size)
        with np.errstate(divide="ignore"):
            cap = np.where(delay > 0, unit_seconds(args.time_unit) / np.where(delay > 0, delay, 1.0), np.inf)
        if args.host_caps:  # both: each host's cap is the smaller of its file cap and 1 / its crawl delay
            from jaxcrawl._src.hostmap import merge_host_caps
            from jaxcrawl.io import read_host_caps

            c_idx, c_cap = read_host_caps(args.host_caps, page_id)
            hidx, cap = merge_host_caps(c_idx, c_cap, hidx, cap, page_id=page_id,
                                        what=(f"--host-caps {args.host_caps}", "the crawl delays' hosts"),
                                        names=(None, names))
        caps = jaxcrawl.HostCaps(jnp.asarray(hidx), jnp.asarray(cap, dtype))
    options = dict(max_steps=args.max_steps, rtol=args.rtol)
    if caps is None:
        solve = functools.partial(jax.jit(lambda pr, b: jaxcrawl.solve(pr, obj, bounds=b, **options)), b=bounds)
    else:  # eager: the capped log-gap fallback is compiled only where a plan needs it
        solve = functools.partial(jaxcrawl.solve, objective=obj, caps=caps, bounds=bounds, **options)
    if getattr(args, "check", False):  # debug mode: inputs and rates checked by page (jaxcrawl.debug)
        from jaxcrawl.debug import checked

        solve = checked(solve)
    t0 = time.perf_counter()
    with progress_bar(None, "solving", quiet=args.quiet, unit="pass"):
        policy = jax.block_until_ready(solve(problem))
    seconds = time.perf_counter() - t0

    rate = np.asarray(policy.rate, np.float64)
    prob = np.asarray(policy.prob, np.float64)
    converged = bool(np.all(np.asarray(policy.converged)))
    eps = float(jnp.finfo(problem.dtype).eps)
    tolerance = budget_tolerance(args.rtol, problem.dtype, float(bandwidth))
    residual = float(np.sum(rate, dtype=np.float64)) - float(bandwidth)
    failure = check_plan(rate, prob, float(bandwidth), converged, float(policy.residual),
                         int(policy.num_steps), tolerance, page_id, dtype=problem.dtype)
    if failure is None and bounded:
        slack = 8 * eps
        off = np.flatnonzero((rate < lo * (1 - slack)) | (rate > hi * (1 + slack)))
        if off.size:
            failure = (f"the plan misses the revisit bounds of {off.size} pages (first: page "
                       f"{page_id[off[0]]!r}, rate {rate[off[0]]!r} outside [{lo[off[0]]!r}, {hi[off[0]]!r}])")
    costs = jax.jit(lambda pr, pol: (jaxcrawl.harmonic_cost(pr, pol), jaxcrawl.binary_cost(pr, pol)))
    harmonic, binary = (float(c) for c in costs(problem, policy))
    summary = {
        "source": source,
        "num_pages": int(n),
        "num_complete": int(np.sum(comp)),
        "bandwidth": float(bandwidth),
        "time_unit": args.time_unit,
        "objective": args.objective,
        "converged": converged,
        "harmonic_cost": _number(harmonic),
        "binary_cost": _number(binary),
        "dual": _number(policy.dual),
        "budget_residual": _number(residual),
        "residual_before_correction": _number(policy.residual),
        "budget_tolerance": tolerance,
        "root_steps": int(policy.num_steps),
        "num_pages_at_min_rate": int(np.sum((lo > 0) & (rate <= lo * (1 + 1e-5)))) if bounded else 0,
        "num_pages_at_max_rate": int(np.sum(np.isfinite(hi) & (rate >= hi * (1 - 1e-5)))) if bounded else 0,
        "num_crawl_delay_hosts": num_delay_hosts,
        "read_seconds": read_seconds,
        "solve_seconds": seconds,
        "first_call_seconds": seconds,
        "dtype": str(problem.dtype),
    }
    t_write = time.perf_counter()
    if failure is None and args.output:
        with progress_bar(n, "writing plan", quiet=args.quiet) as bar:
            write_plan(args.output, page_id, rate, prob, progress=bar)
        summary["output"] = args.output
    if failure is None and (args.urlfrontier or args.nutch):
        _write_crawler_files(args, page_id, rate, start, summary, gaps)
    summary["write_seconds"] = time.perf_counter() - t_write
    if failure is not None:
        summary["error"] = failure
    print(f"problem      {source}: {n} pages, {summary['num_complete']} complete, bandwidth {bandwidth:g} "
          f"crawls per {args.time_unit[:-1]}")
    print(f"objective    {args.objective}")
    print(f"harmonic     {harmonic:.6g}  (page-averaged harmonic staleness, NeurIPS-19 eq. 8)")
    print(f"binary       {binary:.6g}  (page-averaged binary staleness, NeurIPS-19 eq. 12-13)")
    print(f"dual         {float(policy.dual):.6g}  (marginal utility of one more crawl per unit time)")
    if bounded:
        print(f"bounds       {summary['num_pages_at_min_rate']} pages at their minimum rate (1/max_interval), "
              f"{summary['num_pages_at_max_rate']} at their maximum (1/min_interval)")
    print(f"solve time   {seconds:.2f} s including compilation, {summary['root_steps']} root-finding steps, "
          f"converged: {converged}")
    if "output" in summary:
        print(f"plan         written to {args.output}: page_id, rate (crawls per {args.time_unit[:-1]}), "
              "prob (chance of crawling a complete page on each change signal)")
    elif failure is not None and args.output:
        print(f"plan         NOT written ({args.output} left as it was)")
    for key in ("urlfrontier", "nutch"):
        if key in summary:
            print(f"{key:<12} {summary[key]['num_urls']} URLs written to {summary[key]['path']}")
    print(json.dumps(summary))
    if failure is not None:
        raise jaxcrawl.NonConvergenceError(failure + ("; no plan written" if args.output else ""))
    return 0


def _write_crawler_files(args, page_id, rate, start, summary, gaps) -> None:
    """The URLFrontier / Nutch outputs of a plan (``rate`` per ``--time-unit``)."""
    from jaxcrawl import timetable as tt
    from jaxcrawl._src.timeunits import iso_utc, next_fetch, unit_seconds
    from jaxcrawl.io import write_nutch_seeds, write_urlfrontier

    summary["start"] = str(iso_utc(np.asarray([start]))[0])
    if args.urlfrontier:
        phase = np.asarray(tt.golden_phase(len(rate), dtype=np.float32), np.float64)
        due = next_fetch(rate, phase, start, unit_seconds(args.time_unit))
        key = None
        if gaps is not None:
            hidx, _, names = gaps
            key = np.where(hidx >= 0, names[np.maximum(hidx, 0)] if names.size else "", np.asarray(page_id, object))
        k = write_urlfrontier(args.urlfrontier, page_id, rate, due, unit=args.time_unit, key=key)
        summary["urlfrontier"] = {"path": args.urlfrontier, "num_urls": k}
    if args.nutch:
        k = write_nutch_seeds(args.nutch, page_id, rate, unit=args.time_unit)
        summary["nutch"] = {"path": args.nutch, "num_urls": k}
