"""``jaxcrawl solve``: optimal crawl rates for a page table or the synthetic default.

Reads ``page_id,importance,change_rate[,complete][,min_interval][,max_interval]``
(:func:`jaxcrawl.io.read_problem`; CSV, Parquet or JSON Lines by the file's name) or draws
:func:`jaxcrawl.synthetic`, solves with :func:`jaxcrawl.solve` for the
``--objective`` (any name of :func:`jaxcrawl.objective_names`) under the revisit bounds
(the file's interval columns and ``--min-interval``/``--max-interval``) and host caps
(``--host-caps`` and/or ``1/crawl-delay`` from ``--crawl-delays``/``--robots``: the smaller applies), and writes
the plan ``page_id,rate,prob,periodic_rate`` (:func:`jaxcrawl.io.write_plan`), optionally a URLFrontier
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
import sys
import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

import jaxcrawl
from jaxcrawl import check_rate_bounds, objective_names, rate_bounds
from jaxcrawl import parallel as dist
from jaxcrawl import timetable as tt
from jaxcrawl._src.checks import check_representable
from jaxcrawl._src.fileio import immediate, progress_bar, transient, write_json
from jaxcrawl._src.hostmap import PageHosts, caps_pages_path, merge_host_caps, url_host, url_page_hosts
from jaxcrawl._src.limits import check_size
from jaxcrawl._src.rootfind import default_rtol
from jaxcrawl._src.timeunits import iso_utc, next_fetch, parse_duration, unit_seconds
from jaxcrawl.core.solve import check_solvable
from jaxcrawl.debug import checked
from jaxcrawl.io import (
    Column,
    PageTable,
    Schema,
    check_output,
    read_host_caps_rows,
    read_local_rows,
    read_plan,
    read_problem,
    read_table,
    write_nutch_seeds,
    write_plan,
    write_urlfrontier,
)
from jaxcrawl.io.synthetic import synthetic

from ._options import (
    add_host_arguments,
    add_process_arguments,
    add_time_arguments,
    bandwidth_from_args,
    budget_tolerance,
    check_result,
    host_caps,
    host_gaps,
    host_warnings,
    join,
    objective_from_args,
    part_path,
    requested,
    revisit_intervals,
    start_epoch,
)
from ._schedule import report_crawler_files
from ._stages import Stages

__all__ = ["register", "run", "check_plan"]


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``solve`` subcommand to an ``argparse`` subparsers object."""

    p = subparsers.add_parser(
        "solve",
        help="optimal crawl rates for a page table (CSV) or the synthetic default",
        description=(
            "Solve for optimal crawl rates. Input: a page table with columns "
            "page_id,importance,change_rate[,complete][,min_interval][,max_interval] (the optional "
            "revisit bounds per page in --time-unit: min_interval >= 0, max_interval > 0 or inf; an "
            "empty cell is no bound); without --input, a seeded synthetic "
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
    p.add_argument("--host-caps", help="CSV host_id,cap of per-host crawl-rate caps (crawls per unit time; "
                   "inf = uncapped); pages map to hosts by a '# pages: FILE' line (page_id,host_id) before "
                   "the header, else by their URL's host")
    p.add_argument("--max-steps", type=int, default=100,
                   help="root-finding step cap (default 100); a solve stopped by it exits with status 3")
    p.add_argument("--rtol", type=float, default=None,
                   help="relative budget tolerance of the root-find (default 4 eps^0.75 of the dtype)")
    p.add_argument("--x64", action="store_true", help="solve in float64")
    add_process_arguments(p)  # --coordinator/--num-processes/--process-id
    add_time_arguments(p)
    p.add_argument("--min-interval", help="revisit bound for every page: never crawl a page more often than "
                   "this (a number in --time-unit, or 90s/15m/6h/2d/1w); the input's min_interval column "
                   "per page, the larger applies")
    p.add_argument("--max-interval", help="revisit bound for every page: crawl each page at least this often "
                   "(same forms); the input's max_interval column per page, the smaller applies")
    add_host_arguments(p)
    p.add_argument("--urlfrontier", help="also write a URLFrontier JSON Lines file (one KnownURLItem per page, "
                   "refetchable_from_date in epoch seconds)")
    p.add_argument("--nutch", help="also write an Apache Nutch injector seed list "
                   "(url<TAB>nutch.fetchInterval=<seconds>)")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bars")
    p.set_defaults(func=run)














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

    return check_result({"rates": rate, "probabilities": prob}, page_id, converged=converged, num_steps=num_steps,
                        residual_before=residual_before, bandwidth=bandwidth, tolerance=tolerance,
                        dtype=dtype)




def _load(args: argparse.Namespace) -> tuple[Any, str]:


    if args.input:
        t = read_problem(args.input)
        return t, args.input
    n = args.num_pages
    if n < 1:
        raise ValueError(f"--num-pages must be >= 1; got {n}")
    check_size("--num-pages", n, 64, "pages")  # before anything is allocated
    syn = jax.jit(synthetic, static_argnums=1)(jax.random.key(args.seed), n)  # one compile, not one per op
    return (PageTable.from_arrays(np.arange(n), np.asarray(syn.importance), np.asarray(syn.change_rate),
                                  np.asarray(syn.complete)), f"synthetic(seed={args.seed}, num_pages={n})")


def _startup_seconds() -> float | None:
    """Seconds from this process's start to now (Python, the imports of JAX and jaxcrawl),
    when the process is the ``jaxcrawl`` command itself and Linux's ``/proc`` says when it
    started; else None (e.g. ``jaxcrawl.cli.main`` called from a Python program)."""
    prog = os.path.basename(sys.argv[0]) if sys.argv else ""
    if prog not in ("jaxcrawl", "__main__.py") or (prog == "__main__.py" and "jaxcrawl" not in sys.argv[0]):
        return None
    try:
        with open("/proc/self/stat") as fh:
            start_ticks = int(fh.read().rsplit(")", 1)[1].split()[19])  # field 22, starttime
        with open("/proc/uptime") as fh:
            uptime = float(fh.read().split()[0])
        return max(uptime - start_ticks / os.sysconf("SC_CLK_TCK"), 0.0)
    except (OSError, ValueError, IndexError):
        return None


def _url_hosts(args, page_id) -> PageHosts | None:
    """The hosts of URL page ids, found once for the caps, the crawl delays and the
    URLFrontier queue keys (None when nothing needs them, or when a URL has no readable
    host: then the file that needs it says so, or ``--hosts`` maps it)."""
    if not (args.host_caps or args.crawl_delays or args.robots or args.urlfrontier):
        return None
    try:
        return url_page_hosts(page_id)
    except ValueError:
        return None


def _ids(page_id):
    return page_id.page_id if isinstance(page_id, PageHosts) else page_id


def _read_caps(args, page_id, dtype):
    """The pages' host caps: ``(gaps, caps, cap64, num_delay_hosts)`` -- the crawl delays
    (:func:`host_gaps`), the :class:`~jaxcrawl.HostCaps` in ``dtype`` (None: uncapped), the caps in
    float64 (the files' values, what the written plan honours) and the number of crawl-delay hosts."""

    gaps = host_gaps(args, page_id)
    cap64 = None
    num_delay_hosts = 0
    caps = None
    if args.host_caps and gaps is None:
        hidx, hcap = host_caps(args, page_id)
        cap64 = np.asarray(hcap, np.float64)
        caps = jaxcrawl.HostCaps(jnp.asarray(hidx), jnp.asarray(hcap, dtype))
    elif gaps is not None:
        hidx, delay, names = gaps
        num_delay_hosts = int(delay.size)
        with np.errstate(divide="ignore"):
            cap = np.where(delay > 0, unit_seconds(args.time_unit) / np.where(delay > 0, delay, 1.0), np.inf)
        if args.host_caps:  # both: each host's cap is the smaller of its file cap and 1 / its crawl delay
            c_idx, c_cap = host_caps(args, page_id)
            hidx, cap = merge_host_caps(c_idx, c_cap, hidx, cap, page_id=_ids(page_id),
                                        what=(f"--host-caps {args.host_caps}", "the crawl delays' hosts"),
                                        names=(None, names))
        cap64 = np.asarray(cap, np.float64)
        caps = jaxcrawl.HostCaps(jnp.asarray(hidx), jnp.asarray(cap, dtype))
    return gaps, caps, cap64, num_delay_hosts


def run(args: argparse.Namespace) -> int:
    """Run ``jaxcrawl solve``; returns the exit status (raises ``NonConvergenceError``
    for status 3)."""


    if requested(args):  # several processes: each solves from its own rows
        return run_solve(args)
    stages = Stages("solve", quiet=args.quiet)
    startup = _startup_seconds()
    if startup is not None:  # the command is its own process: its total counts from the process's start
        stages._start -= startup
        stages.add("start-up", startup)
    if args.max_steps < 1:
        raise ValueError(f"--max-steps must be >= 1; got {args.max_steps}")
    if args.rtol is not None and not (math.isfinite(args.rtol) and 0 < args.rtol < 1):
        raise ValueError(f"--rtol must be in (0, 1); got {args.rtol}")
    obj = objective_from_args(args)
    min_iv, max_iv = revisit_intervals(args)
    mapping = caps_pages_path(args.host_caps) if args.host_caps else None
    outputs = [o for o in (args.output, args.urlfrontier, args.nutch) if o]
    for out in outputs:
        check_output(out, args.input, args.host_caps, mapping, args.crawl_delays, args.hosts)
    if len(set(map(os.path.realpath, outputs))) < len(outputs):
        raise ValueError("--output, --urlfrontier and --nutch must be different files")
    start = start_epoch(args) if (args.urlfrontier or args.nutch) else None
    with stages.stage("read"):
        rows, source = _load(args)
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

    for name, col in (("importance", imp), ("change_rate", lam)):  # validated in the dtype they are used in
        check_representable(col, name, dtype, labels=page_id, source=args.input)
    problem = jaxcrawl.CrawlProblem(jnp.asarray(imp, dtype), jnp.asarray(lam, dtype), bandwidth,
                                    jnp.asarray(comp))
    bounds = (jnp.asarray(lo, dtype), jnp.asarray(hi, dtype)) if bounded else None
    with stages.stage("hosts"):
        hosts = _url_hosts(args, page_id)
        gaps, caps, cap64, num_delay_hosts = _read_caps(args, page_id if hosts is None else hosts, dtype)
    # the solve's feasibility checks, eagerly and naming pages and hosts (the jitted solve cannot run them)
    check_solvable(problem, obj, caps=caps, bounds=bounds, page_id=page_id)
    options = dict(max_steps=args.max_steps, rtol=args.rtol)
    if caps is None:
        solve = functools.partial(jax.jit(lambda pr, b: jaxcrawl.solve(pr, obj, bounds=b, **options)), b=bounds)
    else:  # eager: the capped log-gap fallback is compiled only where a plan needs it
        solve = functools.partial(jaxcrawl.solve, objective=obj, caps=caps, bounds=bounds, **options)
    if getattr(args, "check", False):  # debug mode: inputs and rates checked by page (jaxcrawl.debug)

        solve = checked(solve)
    with stages.stage("solve"), progress_bar(None, "solving", quiet=args.quiet, unit="pass"):
        policy = jax.block_until_ready(solve(problem))
    seconds = stages.seconds()["solve"]

    with stages.stage("check"):
        prob = np.asarray(policy.prob, np.float64)
        converged = bool(np.all(np.asarray(policy.converged)))
        eps = float(jnp.finfo(problem.dtype).eps)
        rtol = args.rtol or default_rtol(problem.dtype)
        tolerance = budget_tolerance(args.rtol, problem.dtype, float(bandwidth))
        rate = np.asarray(policy.rate, np.float64)
        failure = check_plan(rate, prob, float(bandwidth), converged, float(policy.residual),
                             int(policy.num_steps), tolerance, page_id, dtype=problem.dtype)
        periodic = None
        if failure is None:  # the written plan: bounds, signal pages and caps exact (exact_plan)
            host = None if caps is None else np.asarray(caps.host_id, np.int64)
            rate, periodic, miss = exact_plan(rate, prob, lam, comp, lo, hi, host, cap64, rtol=rtol, eps=eps)
            if miss is not None:
                failure = _miss_message(miss, rate, lo, hi, host, cap64, page_id,
                                        lambda pages: _host_names(args, page_id, pages, gaps))
        residual = float(np.sum(rate, dtype=np.float64)) - float(bandwidth)
    with stages.stage("report"):
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
            "num_pages_at_min_rate": 0,
            "num_pages_at_max_rate": 0,
            "num_crawl_delay_hosts": num_delay_hosts,
            "read_seconds": stages.seconds()["read"],
            "solve_seconds": seconds,
            "first_call_seconds": seconds,
            "dtype": str(problem.dtype),
        }
        explained = _explain(args, problem, obj, policy, rate, lo, hi, caps, cap64, gaps, page_id) \
            if failure is None and (caps is not None or bounded) else None
        if explained is not None:
            summary.update(explained)
    if failure is None and args.output:
        with stages.stage("write plan"), progress_bar(n, "writing plan", quiet=args.quiet) as bar:
            write_plan(args.output, page_id, rate, prob, periodic_rate=periodic, progress=bar)
        summary["output"] = args.output
    if failure is None and (args.urlfrontier or args.nutch):
        _write_crawler_files(args, page_id if hosts is None else hosts, rate, start, summary, gaps, stages)
    summary["write_seconds"] = sum(v for k, v in stages.seconds().items() if k.startswith("write "))
    if failure is not None:
        summary["error"] = failure
    summary["seconds"] = stages.seconds()
    print(f"problem      {source}: {n} pages, {summary['num_complete']} complete, bandwidth {bandwidth:g} "
          f"crawls per {args.time_unit[:-1]}")
    print(f"objective    {args.objective}")
    print(f"harmonic     {harmonic:.6g}  (page-averaged harmonic staleness, NeurIPS-19 eq. 8)")
    print(f"binary       {binary:.6g}  (page-averaged binary staleness, NeurIPS-19 eq. 12-13)")
    print(f"dual         {float(policy.dual):.6g}  (marginal utility of one more crawl per unit time)")
    if explained is not None:
        _report_constraints(summary, args.time_unit[:-1])
    print(f"solve time   {seconds:.2f} s including compilation, {summary['root_steps']} root-finding steps, "
          f"converged: {converged}")
    print("time         " + ", ".join(f"{k} {v:.2f} s" for k, v in summary["seconds"].items()))
    if "output" in summary:
        print(f"plan         written to {args.output}: page_id, rate (crawls per {args.time_unit[:-1]}), "
              "prob (chance of crawling a complete page on each change signal), periodic_rate (a complete "
              "page's periodic crawls beside its signals)")
    elif failure is not None and args.output:
        print(f"plan         NOT written ({args.output} left as it was)")
    report_crawler_files(summary)
    print(json.dumps(summary))
    if failure is not None:
        raise jaxcrawl.NonConvergenceError(failure + ("; no plan written" if args.output else ""))
    return 0


class PlanMiss(NamedTuple):
    """Where a solved plan misses its constraints by more than rounding (:func:`exact_plan`):
    the pages outside their revisit bounds and the hosts above their caps (indices)."""

    pages: np.ndarray
    hosts: np.ndarray


def exact_plan(rate, prob, change_rate, complete, lo=None, hi=None, host=None, cap=None, *,
               rtol: float, eps: float, reduce=None) -> tuple[np.ndarray, np.ndarray, PlanMiss | None]:
    """The plan as written: ``(rate, periodic_rate, miss)``, float64, from the solver's rates.

    The solver meets its constraints to its tolerance in its dtype; the written plan meets
    them exactly where the model is exact, by corrections of rounding size only:

    * **revisit bounds**: a rate outside its bounds by at most ``slack`` (relative) is set onto the bound,
      where ``slack`` is ``4 rtol`` (the tolerance to which the solve meets its budget and
      caps) plus, for a page of a capped host, ``eps`` times the host's number of pages (the
      rounding of the host's sum in the solve's dtype, which the solver's final per-host
      scaling carries into its pages' rates);
    * **signal pages** (``complete`` and ``prob > 0``): the rate is at most ``change_rate``
      unless the page's floor ``lo`` is above ``change_rate``; ``periodic_rate`` is
      ``rate - change_rate`` for a signal page whose floor is above its change rate and
      exactly 0 for every other page, by construction;
    * **host caps**: a host whose load (its pages' rates summed in float64) is above its cap
      ``cap`` (float64, the files' values) has its pages' rates above their floors scaled by
      one factor so that the load is the cap (to float64 rounding).

    A page outside its bounds, or a host above its cap, by more than its ``slack`` is not
    rounding: it is returned in ``miss`` (None when there is none) and the plan must not be
    written.  ``reduce`` (a job of several processes: the all-reduce sum over processes)
    makes the hosts' page counts and loads global; every process then calls it equally often.
    """
    reduce = reduce if reduce is not None else (lambda a: a)
    rate = np.array(rate, np.float64)
    lam = np.asarray(change_rate, np.float64)
    n = rate.size
    lo = np.zeros(n) if lo is None else np.broadcast_to(np.asarray(lo, np.float64), (n,))
    hi = np.full(n, np.inf) if hi is None else np.broadcast_to(np.asarray(hi, np.float64), (n,))
    slack = np.full(n, 4.0 * rtol)
    capped = None
    if host is not None and cap is not None and np.size(cap):
        host = np.asarray(host, np.int64)
        cap = np.asarray(cap, np.float64)
        on = host >= 0
        count = np.asarray(reduce(np.bincount(host[on], minlength=cap.size).astype(np.float64)))
        host_slack = 4.0 * rtol + eps * count
        capped = on & np.isfinite(cap[np.maximum(host, 0)])
        slack = np.where(capped, host_slack[np.maximum(host, 0)], slack)
    off = np.flatnonzero((rate < lo * (1 - slack)) | (rate > hi * (1 + slack)))
    rate = np.clip(rate, lo, hi)
    signal = np.asarray(complete, bool) & (np.asarray(prob) > 0)
    floor_above = signal & (lo > lam)
    rate = np.where(signal & ~floor_above, np.minimum(rate, lam), rate)
    over_hosts = np.zeros(0, np.int64)
    if capped is not None:
        h = host[capped]
        sums = np.asarray(reduce(np.concatenate([np.bincount(h, weights=rate[capped], minlength=cap.size),
                                                 np.bincount(h, weights=lo[capped], minlength=cap.size)])))
        host_load, base = sums[:cap.size], sums[cap.size:]
        over = host_load > cap
        over_hosts = np.flatnonzero(host_load > cap * (1 + host_slack))
        if over.any():
            with np.errstate(divide="ignore", invalid="ignore"):
                factor = np.where(over, np.clip((cap - base) / (host_load - base), 0.0, 1.0), 1.0)
            f = factor[h]
            rate[capped] = np.clip(lo[capped] + (rate[capped] - lo[capped]) * f, lo[capped], hi[capped])
    periodic = np.where(floor_above, np.maximum(rate - lam, 0.0), 0.0)
    miss = PlanMiss(off, over_hosts) if off.size or over_hosts.size else None
    return rate, periodic, miss


def _miss_message(miss: PlanMiss, rate, lo, hi, host, cap, page_id, host_names) -> str:
    """What :func:`exact_plan` found beyond rounding, naming the first page or host."""
    parts = []
    if miss.pages.size:
        i = int(miss.pages[0])
        lo_i = 0.0 if lo is None else float(np.broadcast_to(lo, rate.shape)[i])
        hi_i = math.inf if hi is None else float(np.broadcast_to(hi, rate.shape)[i])
        parts.append(f"the plan misses the revisit bounds of {miss.pages.size} pages (first: page "
                     f"{page_id[i]!r}, rate outside [{lo_i!r}, {hi_i!r}] by more than rounding)")
    if miss.hosts.size:
        h = int(miss.hosts[0])
        first = int(np.flatnonzero(np.asarray(host) == h)[0])
        parts.append(f"the plan exceeds the caps of {miss.hosts.size} hosts by more than rounding (first: host "
                     f"{host_names(np.asarray([first]))[0]!r}, cap {float(cap[h])!r})")
    return "; ".join(parts)


#: Binding hosts listed in the JSON line (the most held back first); the text report shows the first ten.
MAX_LISTED_HOSTS = 1000


def _explain(args, problem, obj, policy, rate, lo, hi, caps, cap, gaps, page_id) -> dict:
    """What bound the plan (docs/io.md, "What bound the plan"): the hosts at their cap and
    the pages at their revisit bounds, each with the bandwidth it moves against the
    *unconstrained plan* -- the same solve (objective, bandwidth) without host caps and
    revisit bounds.  A host binds when its multiplier ``Policy.host_dual`` is > 0
    (:func:`_binding`); ``load`` is the sum of its pages' written rates ``rate``, ``cap`` its
    float64 cap ``cap``, ``held_back`` its load in the unconstrained plan minus its load in
    this one."""

    n = rate.size
    at_lo, at_hi = _at_bounds(rate, lo, hi)
    out: dict[str, Any] = {"num_pages_at_min_rate": int(at_lo.sum()), "num_pages_at_max_rate": int(at_hi.sum())}
    binding = np.zeros(0, np.int64)
    if caps is not None:
        hidx = np.asarray(caps.host_id, np.int64)
        on = hidx >= 0
        host_load = np.bincount(hidx[on], weights=rate[on], minlength=cap.size)
        kappa = None if policy.host_dual is None else np.asarray(policy.host_dual, np.float64)
        binding = _binding(cap, kappa)
        out["num_capped_hosts"] = int(np.sum(np.isfinite(cap)))
        out["num_binding_hosts"] = int(binding.size)
    x0 = None
    if binding.size or at_lo.any() or at_hi.any():
        t0 = time.perf_counter()
        ref = jax.jit(lambda pr: jaxcrawl.solve(pr, obj, max_steps=args.max_steps, rtol=args.rtol))(problem)
        out["unconstrained_converged"] = bool(np.all(np.asarray(ref.converged)))
        out["unconstrained_solve_seconds"] = time.perf_counter() - t0
        x0 = np.asarray(ref.rate, np.float64)
    out["bandwidth_to_min_rate_pages"] = float(np.sum((rate - x0)[at_lo])) if x0 is not None else 0.0
    out["bandwidth_held_back_by_max_rate"] = float(np.sum((x0 - rate)[at_hi])) if x0 is not None else 0.0
    if caps is None:
        return out
    kappa = np.zeros(cap.size) if kappa is None else kappa
    free = np.bincount(hidx[on], weights=x0[on], minlength=cap.size) if x0 is not None else host_load
    held = free - host_load
    out["bandwidth_held_back_by_host_caps"] = float(np.sum(held[binding]))
    binding = binding[np.argsort(-held[binding], kind="stable")]
    first = np.full(cap.size, n, np.int64)
    np.minimum.at(first, hidx[on], np.flatnonzero(on))
    count = np.bincount(hidx[on], minlength=cap.size)
    listed = binding[:MAX_LISTED_HOSTS]
    names = _host_names(args, page_id, first[listed], gaps)
    hosts = []
    for h, name in zip(listed.tolist(), names):
        delay = None
        if gaps is not None and gaps[0][first[h]] >= 0:
            delay = float(gaps[1][gaps[0][first[h]]])
        hosts.append({"host": name, "cap": float(cap[h]), "crawl_delay": delay, "load": float(host_load[h]),
                      "multiplier": float(kappa[h]), "unconstrained_load": float(free[h]),
                      "held_back": float(held[h]), "num_pages": int(count[h])})
    out["binding_hosts"] = hosts
    return out


def _at_bounds(rate, lo, hi) -> tuple[np.ndarray, np.ndarray]:
    """The pages at their minimum rate and at their maximum (``None``: no such bound)."""
    at_lo = (lo > 0) & (rate <= lo * (1 + 1e-5)) if lo is not None else np.zeros(rate.size, bool)
    at_hi = np.isfinite(hi) & (rate >= hi * (1 - 1e-5)) if hi is not None else np.zeros(rate.size, bool)
    return at_lo, at_hi


def _binding(cap, kappa) -> np.ndarray:
    """The capped hosts that bind: those whose multiplier (``Policy.host_dual``, the solver's
    own verdict that the host's unconstrained load at the global dual is above its cap) is
    > 0.  Decided by the multipliers, not by comparing a sum of rates with the cap, so
    that float32 and float64 solves of one table list the same hosts (a sum of thousands of
    float32 rates misses its cap by more than any fixed tolerance)."""
    cap = np.asarray(cap, np.float64)
    if kappa is None:
        return np.zeros(0, np.int64)
    return np.flatnonzero(np.isfinite(cap) & (np.asarray(kappa, np.float64) > 0))


def _host_names(args, page_id, pages, gaps) -> list[str]:
    """The host name of each of ``pages`` (indices): its crawl-delay host, else its host in the
    page -> host table (``--hosts`` or the caps file's ``# pages:``), else its URL's host."""

    ids = np.asarray(page_id)[pages].tolist()
    names: list[str | None] = [None] * len(ids)
    if gaps is not None:
        g = gaps[0][pages]
        names = [str(gaps[2][k]) if k >= 0 else None for k in g.tolist()]
    mapping = args.hosts or (caps_pages_path(args.host_caps) if args.host_caps else None)
    if mapping is not None and any(x is None for x in names):
        table = read_table(mapping, _PAGE_HOSTS)
        want = {str(p): i for i, p in enumerate(ids)}
        for p, h in zip(table["page_id"].tolist(), table["host_id"].tolist()):
            i = want.get(str(p))
            if i is not None and names[i] is None:
                names[i] = str(h)
    return [x if x is not None else (url_host(str(p)) or str(p)) for x, p in zip(names, ids)]


_PAGE_HOSTS = Schema("page -> host mapping", (Column("page_id"), Column("host_id")), rows="pages")


def _report_constraints(summary: dict, unit: str) -> None:
    """The report's lines on the binding host caps and revisit bounds (:func:`_explain`;
    without the unconstrained comparison of a multi-process solve, :func:`_explain_processes`,
    its columns and figures are left out)."""

    compared = "bandwidth_to_min_rate_pages" in summary
    if summary.get("num_binding_hosts") == 0:
        print(f"host caps    none of the {summary['num_capped_hosts']} capped hosts at its cap")
    elif "num_binding_hosts" in summary:
        print(f"host caps    {summary['num_binding_hosts']} of {summary['num_capped_hosts']} capped hosts at their cap"
              + (f"; they hold back {summary['bandwidth_held_back_by_host_caps']:.4g} crawls per {unit} of the "
                 "unconstrained plan (no caps, no bounds)" if compared else ""))
        if summary["binding_hosts"]:
            print(f"             {'host':<28} {'cap':>9} {'delay s':>8} {'load':>9} {'multiplier':>10}"
                  + (f" {'uncapped':>9} {'held back':>9}" if compared else ""))
        for h in summary["binding_hosts"][:10]:
            delay = "-" if h["crawl_delay"] is None else f"{h['crawl_delay']:g}"
            print(f"             {h['host']:<28} {h['cap']:>9.4g} {delay:>8} {h['load']:>9.4g} {h['multiplier']:>10.4g}"
                  + (f" {h['unconstrained_load']:>9.4g} {h['held_back']:>9.4g}" if compared else ""))
        if summary["num_binding_hosts"] > 10:
            print(f"             ... {summary['num_binding_hosts'] - 10} more (the JSON line lists up to "
                  f"{MAX_LISTED_HOSTS})")
    if summary["num_pages_at_min_rate"] or summary["num_pages_at_max_rate"] or "num_binding_hosts" not in summary:
        if not compared:
            print(f"bounds       {summary['num_pages_at_min_rate']} pages at their minimum rate (1/max_interval), "
                  f"{summary['num_pages_at_max_rate']} at their maximum (1/min_interval)")
            return
        print(f"bounds       {summary['num_pages_at_min_rate']} pages at their minimum rate (1/max_interval), "
              f"{summary['bandwidth_to_min_rate_pages']:.4g} crawls per {unit} more than the unconstrained plan "
              f"gives them; {summary['num_pages_at_max_rate']} at their maximum (1/min_interval), "
              f"{summary['bandwidth_held_back_by_max_rate']:.4g} held back")


def _write_crawler_files(args, page_id, rate, start, summary, gaps, stages=None) -> None:
    """The URLFrontier / Nutch outputs of a plan (``rate`` per ``--time-unit``), each timed
    as a stage of ``stages`` when given."""

    stages = stages if stages is not None else Stages("solve", quiet=True)
    summary["start"] = str(iso_utc(np.asarray([start]))[0])
    if args.urlfrontier:
        with stages.stage("write urlfrontier"):
            _write_urlfrontier(args, page_id, rate, start, summary, gaps)
    if args.nutch:
        with stages.stage("write nutch"):
            k = write_nutch_seeds(args.nutch, _ids(page_id), rate, unit=args.time_unit)
        summary["nutch"] = {"path": args.nutch, "num_urls": k.num_urls, "num_clamped": k.num_clamped}


def _write_urlfrontier(args, page_id, rate, start, summary, gaps) -> None:
    """The URLFrontier file of a plan: each page's next fetch from its rate and golden phase."""
    phase = np.asarray(tt.golden_phase(len(rate), dtype=np.float32), np.float64)
    due = next_fetch(rate, phase, start, unit_seconds(args.time_unit))
    import pyarrow as pa

    key = None
    known: list[str] = []
    code = None
    if isinstance(page_id, PageHosts):  # the URLs' hosts, found already ("": the writer finds it)
        known, code = list(page_id.values), page_id.codes
        page_id = page_id.page_id
    if gaps is not None or code is not None:  # by host, without a string per page
        index = np.full(len(rate), -1, np.int64) if code is None else code
        if gaps is not None:
            hidx, _, names = gaps
            index = np.where(hidx >= 0, len(known) + hidx, index)
            known = known + [str(x) for x in names.tolist()]
        key = pa.DictionaryArray.from_arrays(pa.array(np.where(index >= 0, index, len(known)).astype(np.int32)),
                                             pa.array(known + [""], pa.string()))
    k = write_urlfrontier(args.urlfrontier, page_id, rate, due, unit=args.time_unit, key=key)
    summary["urlfrontier"] = {"path": args.urlfrontier, "num_urls": k.num_urls, "num_clamped": k.num_clamped}


def _host_ids(args: argparse.Namespace, page_id: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """``(host_id, host_cap, names)``: global host indices (the caps file's order, finite caps
    only) of this process's pages, every host's cap and its name (as the caps row writes it).

    A caps row is unmatched when no process of the job has a page of its host (each holds
    part of the pages): an error naming its row on every process, or, under
    ``--unmatched-hosts warn``, one warning per row (from process 0)."""
    error = caps = None
    try:
        caps, matched, report = read_host_caps_rows(args.host_caps, page_id, unknown_pages="ignore", all_hosts=True)
    except ValueError as err:
        error = str(err)
    dist.raise_together(error)
    anywhere = dist.allreduce_sum(matched.astype(np.float64)) > 0 if matched.size else matched
    unmatched = getattr(args, "unmatched_hosts", "error")
    if unmatched == "warn" and jax.process_index() != 0:
        unmatched = "ignore"  # the same rows on every process: warned once
    with host_warnings():
        report(~anywhere, unmatched, stacklevel=2)  # the same verdict on every process
    table = read_table(args.host_caps, _HOST_CAPS)
    names = [str(h) for h, c in zip(table["host_id"].tolist(), table["cap"].tolist()) if np.isfinite(c)]
    return caps.host_id, caps.cap, names


def run_solve(args: argparse.Namespace) -> int:
    """``jaxcrawl solve`` in a job of several processes (called by :func:`run`)."""



    # Command options that only the single-process command implements (crawler files, real
    # time, crawl delays): refused rather than silently ignored.
    unsupported = [flag for flag, attr, default in (
        ("--hosts", "hosts", None), ("--crawl-delays", "crawl_delays", None), ("--robots", "robots", None),
        ("--urlfrontier", "urlfrontier", None), ("--nutch", "nutch", None), ("--start", "start", None),
        ("--time-unit", "time_unit", "days")) if getattr(args, attr, default) != default]
    if unsupported:
        raise ValueError(f"{', '.join(unsupported)}: only in a job of one process "
                         "(run the solve in one process, or without these options)")
    obj = objective_from_args(args)
    if not join(args):
        raise ValueError("--num-processes/--distributed: this job has one process; run without them")
    pid, nproc = jax.process_index(), jax.process_count()

    check_output(args.output, args.input, args.host_caps)
    dtype = np.float64 if args.x64 else np.float32
    if args.input:
        rows, error = None, None
        try:
            rows = read_local_rows(args.input)
        except ValueError as err:  # a bad row on one process stops every process cleanly
            error = str(err)
        dist.raise_together(error)
        page_id, imp, lam, comp = rows.page_id, rows.importance, rows.change_rate, rows.complete
        source, table_fp = args.input, rows.fingerprint
    else:  # the synthetic default: every process draws it and keeps its rows

        n = args.num_pages
        if n < 1:
            raise ValueError(f"--num-pages must be >= 1; got {n}")
        check_size("--num-pages", n, 64, "pages")  # before anything is allocated
        s, e = dist.row_range(n)
        with jax.default_device(jax.local_devices()[0]):
            syn = jax.jit(synthetic, static_argnums=1)(jax.random.key(args.seed), n)
            page_id = np.arange(s, e)
            imp, lam, comp = (np.asarray(a)[s:e] for a in (syn.importance, syn.change_rate, syn.complete))
        source, table_fp = f"synthetic(seed={args.seed}, num_pages={n})", None
    num_pages = int(dist.allreduce_sum([len(imp)])[0])

    bandwidth = float(bandwidth_from_args(args, num_pages))
    host_id = host_cap = host_names = None
    if args.host_caps:
        host_id, host_cap, host_names = _host_ids(args, page_id)

    intervals = [None if v is None else parse_duration(v, "days", name=flag)
                 for flag, v in (("--min-interval", args.min_interval), ("--max-interval", args.max_interval))]
    if intervals[1] == 0:
        raise ValueError("--max-interval must be > 0")
    bounds = (None if intervals[1] is None else 1.0 / intervals[1],
              None if not intervals[0] else 1.0 / intervals[0])
    dist.check_consistent(table=table_fp, source=source, bandwidth=bandwidth, objective=obj.name,
                          caps=None if host_cap is None else host_cap, bounds=bounds,
                          max_steps=args.max_steps, rtol=args.rtol, x64=bool(args.x64), output=args.output)
    t0 = time.perf_counter()
    src = dist.ProcessRows(imp, lam, comp, bandwidth, dtype=dtype, page_id=page_id,  # ids distinct across processes
                           min_interval=rows.min_interval if args.input else None,
                           max_interval=rows.max_interval if args.input else None, host_names=host_names)
    caps = None if host_cap is None else jaxcrawl.HostCaps(host_id, host_cap)
    sol = jaxcrawl.solve(src, obj, caps=caps, bounds=bounds, max_steps=args.max_steps, rtol=args.rtol)
    seconds = time.perf_counter() - t0
    total = float(dist.allreduce_sum([np.sum(sol.rate, dtype=np.float64)])[0])
    tolerance = budget_tolerance(args.rtol, dtype, bandwidth)
    # the final guard (jaxcrawl.cli.check_result), on the same verdict in every process: the
    # non-finite count is summed over processes so that none writes while another refuses

    bad_total = int(dist.allreduce_sum([float(np.sum(~np.isfinite(sol.rate)) + np.sum(~np.isfinite(sol.prob)))])[0])
    failure = check_result({"rates": sol.rate, "probabilities": sol.prob}, page_id, converged=sol.converged,
                           num_steps=sol.num_steps, residual_before=sol.residual, bandwidth=bandwidth,
                           total=total, tolerance=tolerance, dtype=dtype, what=f"the solve (process {pid})",
                           nonfinite_total=bad_total)
    summary = dict(source=source, num_pages=num_pages, bandwidth=bandwidth, objective=args.objective,
                   converged=sol.converged, dual=sol.dual, residual_before_correction=sol.residual,
                   budget_residual=total - bandwidth, root_steps=sol.num_steps, solve_seconds=seconds,
                   dtype=np.dtype(dtype).name, process=pid, num_processes=nproc, rows=[src.start, len(sol.rate)])
    explained = None
    rate, periodic = np.asarray(sol.rate, np.float64), None
    if failure is None:  # the written plan (exact_plan, global over the processes), then the report
        lo, hi = _process_bounds(bounds, src, rate.size)
        rate, periodic, miss = exact_plan(
            rate, sol.prob, lam, comp, lo, hi, host_id, host_cap, rtol=args.rtol or default_rtol(dtype),
            eps=float(np.finfo(dtype).eps), reduce=dist.allreduce_sum)
        num_off = int(dist.allreduce_sum([0.0 if miss is None else float(miss.pages.size)])[0])
        if num_off or (miss is not None and miss.hosts.size):
            local = miss if miss is not None else PlanMiss(np.zeros(0, np.int64), np.zeros(0, np.int64))
            failure = (f"the plan misses the revisit bounds of {num_off} pages or exceeds "
                       f"{local.hosts.size} host caps by more than rounding"
                       + (f" (first here: page {page_id[local.pages[0]]!r})" if local.pages.size else ""))
        summary["budget_residual"] = float(dist.allreduce_sum([np.sum(rate)])[0]) - bandwidth
    if failure is None:  # every process takes part in the report's all-reduces
        explained = _explain_processes(args, sol, rate, lo, hi, host_id, host_cap, dtype)
        summary.update(explained)
    if failure is None and args.output:

        part = part_path(args.output, pid, nproc)
        with immediate():  # the parts are read by process 0 before the command ends
            write_plan(part, page_id, rate, sol.prob, periodic_rate=periodic)
        with transient(part):  # removed if the job fails (or is stopped) before the plan is whole
            dist.barrier("jaxcrawl.solve.parts")
            if pid == 0:
                parts = [part_path(args.output, i, nproc) for i in range(nproc)]
                if args.gather_output:
                    _join_parts(parts, args.output)
                    summary["output"] = args.output
                else:
                    manifest = dict(summary, parts=[os.path.basename(p) for p in parts])
                    write_json(args.output + ".manifest.json", manifest, sort_keys=False)
                    summary["output"] = args.output + ".manifest.json"
            dist.barrier("jaxcrawl.solve.written")
    if failure is not None:
        summary["error"] = failure
    print(f"process {pid}/{nproc}: rows {src.start}..{src.start + len(sol.rate)} of {num_pages}, dual {sol.dual:.10g}, "
          f"{sol.num_steps} root-finding steps, converged: {sol.converged}, solve {seconds:.3f} s")
    if explained is not None and pid == 0:
        print(f"dual         {float(sol.dual):.6g}  (marginal utility of one more crawl per unit time)")
        _report_constraints(summary, "day")
    print(json.dumps(summary))
    if failure is not None:
        raise jaxcrawl.NonConvergenceError(failure)
    return 0


_HOST_CAPS = Schema("host caps", (Column("host_id"), Column("cap", "number", minimum=0.0, exclusive_minimum=True,
                                                              finite=False)), key="host_id", rows="hosts", min_rows=0,
                    comments=True)


def _process_bounds(bounds, src, k: int) -> tuple[np.ndarray, np.ndarray]:
    """This process's pages' rate bounds ``(lo, hi)`` (float64): the arguments' and the rows'."""
    lo, hi = np.zeros(k), np.full(k, np.inf)
    for (b_lo, b_hi) in (bounds, src.rate_bounds):
        if b_lo is not None:
            lo = np.maximum(lo, np.broadcast_to(np.asarray(b_lo, np.float64), (k,)))
        if b_hi is not None:
            hi = np.minimum(hi, np.broadcast_to(np.asarray(b_hi, np.float64), (k,)))
    return lo, hi


def _explain_processes(args, sol, rate, lo, hi, host_id, host_cap, dtype) -> dict:
    """What bound a multi-process plan, global over the processes (all-reduces; the same on
    every process): the pages at their revisit bounds and the hosts at their cap, with
    each host's load and multiplier -- :func:`_explain` without the comparison with the
    unconstrained plan (no second solve across the processes): the ``held_back`` and
    ``bandwidth_*`` fields are absent."""

    k = rate.size
    at_lo, at_hi = _at_bounds(rate, lo, hi)
    H = 0 if host_cap is None else int(np.size(host_cap))
    on = (np.asarray(host_id) >= 0) if H else np.zeros(k, bool)
    hidx = np.asarray(host_id, np.int64)[on] if H else np.zeros(0, np.int64)
    tot = dist.allreduce_sum(np.concatenate([[at_lo.sum(), at_hi.sum()], np.bincount(hidx, rate[on], H),
                                             np.bincount(hidx, minlength=H)]))
    out: dict[str, Any] = {"num_pages_at_min_rate": int(tot[0]), "num_pages_at_max_rate": int(tot[1])}
    if not H:
        return out
    cap = np.asarray(host_cap, np.float64)
    host_load, count = tot[2:2 + H], tot[2 + H:]
    kappa = None if sol.host_dual is None else np.asarray(sol.host_dual, np.float64)
    binding = _binding(cap, kappa)
    kappa = np.zeros(H) if kappa is None else kappa
    binding = binding[np.argsort(-kappa[binding], kind="stable")]  # the largest multiplier first
    table = read_table(args.host_caps, _HOST_CAPS)
    names = [str(h) for h, c in zip(table["host_id"].tolist(), table["cap"].tolist()) if np.isfinite(c)]
    out.update(num_capped_hosts=int(np.sum(np.isfinite(cap))), num_binding_hosts=int(binding.size),
               binding_hosts=[{"host": names[h], "cap": float(cap[h]), "crawl_delay": None,
                               "load": float(host_load[h]), "multiplier": float(kappa[h]),
                               "num_pages": int(count[h])} for h in binding[:MAX_LISTED_HOSTS].tolist()])
    return out


def _join_parts(parts: list[str], output: str) -> None:
    """The parts' plans, in process order, as one plan ``output`` (CSV, Parquet or JSON Lines,
    by its name, as the parts), written atomically; then the parts are removed.  Each part is
    read as a plan (:func:`jaxcrawl.io.read_plan`), so a format's header (or its absence) is
    the reader's business, never a line count."""

    plans = [read_plan(p) for p in parts]
    write_plan(output, np.concatenate([p.page_id for p in plans]), np.concatenate([p.rate for p in plans]),
               np.concatenate([p.prob for p in plans]),
               periodic_rate=np.concatenate([p.periodic_rate for p in plans]))
    for p in parts:
        os.remove(p)
