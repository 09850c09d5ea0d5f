"""Options and checks shared by the commands: bandwidth, time, hosts, objective, several
processes (``jax.distributed``), and the final guard before a command writes its result."""
from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
import time as _time
import warnings
from typing import Any

import jax
import numpy as np

import jaxcrawl
from jaxcrawl._src.rootfind import default_rtol
from jaxcrawl._src.timeunits import TIME_UNITS, parse_duration, parse_start
from jaxcrawl.io import read_crawl_delays, read_host_caps
from jaxcrawl.parallel import initialize


def check_result(values: dict, page_id: Any, *, converged: bool = True, num_steps: int | None = None,
                 residual_before: float | None = None, bandwidth: float | None = None, total: float | None = None,
                 tolerance: float | None = None, dtype: Any = None, what: str = "the solve",
                 nonfinite_total: int = 0) -> str | None:
    """The final guard of every command that writes rates or estimates: why its result must
    not be written, or None when it may be.

    ``values`` maps a plural noun for the message (``"rates"``, ``"probabilities"``,
    ``"change rates"``, ...) to one value per page of ``page_id``.  A failure is, in this order: ``converged`` false (a
    root-find stopped by its step cap after ``num_steps`` with the budget off by
    ``residual_before``); a non-finite value in any column (the message gives how many
    pages and the first page id); rates summing (``total``, default the float64 sum of
    ``values["rates"]``) off ``bandwidth`` by more than ``tolerance``.  When ``dtype`` is a
    32-bit float and the failure is one that more precision or range can cure (non-finite
    values, a missed budget), the message suggests ``--x64``.  In a job of several processes,
    ``nonfinite_total`` is the non-finite count summed over every process (so that all reach
    the same verdict): a process whose own values are finite still fails when it is not 0.
    """

    hint = ""
    if dtype is not None and np.dtype(dtype).itemsize < 8:
        hint = "; --x64 (float64) may help"
    if not converged:
        off = "" if residual_before is None else f" with the budget off by {residual_before:.3g}" + (
            f" ({abs(residual_before) / bandwidth:.2g} of the bandwidth)" if bandwidth else "")
        steps = "" if num_steps is None else f" after {num_steps} steps"
        return (f"{what} did not converge: the root-find stopped{steps}{off} before its closing correction; "
                "raise --max-steps (or --rtol) or check the input")
    for name, v in values.items():
        v = np.asarray(v)
        bad = ~np.isfinite(v)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            first = page_id[i].item() if hasattr(page_id[i], "item") else page_id[i]  # 'b', not np.str_('b')
            return (f"{what} produced non-finite {name} for {int(bad.sum())} pages (first: page "
                    f"{first!r}, value {float(v[i])!r}, of {v.size} pages){hint}; check the input")
    if nonfinite_total:
        return f"{what} produced non-finite values for {int(nonfinite_total)} pages in other processes{hint}"
    if bandwidth is not None and tolerance is not None:
        if total is None:
            total = float(np.sum(np.asarray(values["rates"]), dtype=np.float64))
        off = total - bandwidth
        if not abs(off) <= tolerance:
            return (f"the plan's rates sum to {total:.10g}, off the bandwidth {bandwidth:.10g} by {off:.3g} "
                    f"(tolerance {tolerance:.3g}){hint}")
    return None


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

    return max(rtol or default_rtol(dtype), 32 * float(np.finfo(dtype).eps)) * float(bandwidth)


def add_time_arguments(p: argparse.ArgumentParser) -> None:
    """``--time-unit`` and ``--start`` (shared by solve and schedule)."""

    p.add_argument("--time-unit", choices=tuple(TIME_UNITS), default="days",
                   help="the unit of time of the rates: the input's change_rate is changes per this unit, "
                        "and the plan's rate crawls per this unit (default days)")
    p.add_argument("--start", help="ISO 8601 UTC start of the schedule (e.g. 2026-01-05T06:00:00Z; "
                   "default: now): crawler outputs and timetables carry absolute times from it")


def add_host_arguments(p: argparse.ArgumentParser) -> None:
    """``--hosts``, ``--crawl-delays``, ``--robots``, ``--user-agent`` and ``--unmatched-hosts``."""
    p.add_argument("--hosts", help="page -> host mapping (page_id,host_id); default: the host of URL page ids")
    delays = p.add_mutually_exclusive_group()
    delays.add_argument("--crawl-delays", help="table host,crawl_delay (seconds between two fetches of a host)")
    delays.add_argument("--robots", help="directory of robots.txt files (HOST.txt or HOST/robots.txt); "
                        "their Crawl-delay (or Request-rate) for --user-agent")
    p.add_argument("--user-agent", default="*", help="user agent whose robots.txt rules apply (default *)")
    p.add_argument("--unmatched-hosts", choices=("error", "warn"), default="error",
                   help="a host caps or crawl-delay row whose host has no page: an error naming the row "
                        "(default), or a warning and the row ignored")


@contextlib.contextmanager
def host_warnings():
    """Warnings of the host readers (a row whose host has no page, ``--unmatched-hosts warn``)
    printed to stderr as ``jaxcrawl: warning: FILE:LINE: ...``, one line each."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UserWarning)
        try:
            yield
        finally:
            for w in caught:
                if issubclass(w.category, UserWarning):
                    print(f"jaxcrawl: warning: {w.message}", file=sys.stderr)
                else:
                    warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


def host_caps(args: argparse.Namespace, page_id: np.ndarray):
    """:func:`jaxcrawl.io.read_host_caps` of ``--host-caps`` for the pages, under
    ``--unmatched-hosts``."""
    with host_warnings():
        return read_host_caps(args.host_caps, page_id, unmatched=getattr(args, "unmatched_hosts", "error"))


def host_gaps(args: argparse.Namespace, page_id: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """``(host_index, delay_seconds, host_names)`` of the pages from ``--crawl-delays`` /
    ``--robots`` (None when neither is given), under ``--unmatched-hosts``."""

    if not (args.crawl_delays or args.robots):
        if getattr(args, "hosts", None):
            raise ValueError("--hosts maps pages to hosts for --crawl-delays or --robots; give one of them")
        return None
    if args.robots and not os.path.isdir(args.robots):
        raise ValueError(f"{args.robots}: not a directory (expected robots.txt files named HOST.txt "
                         "or HOST/robots.txt)")
    with host_warnings():
        return read_crawl_delays(args.crawl_delays or args.robots, page_id, pages_path=args.hosts,
                                 user_agent=args.user_agent, unmatched=getattr(args, "unmatched_hosts", "error"))


def start_epoch(args: argparse.Namespace) -> float:
    """``--start`` as epoch seconds (now, to the second, when not given)."""


    return parse_start(args.start) if args.start else float(int(_time.time()))


def objective_from_args(args: argparse.Namespace):
    """The objective of ``--objective`` (with ``--epsilon``: the floor of ``binary-epsilon`` only)."""

    if args.objective == "binary-epsilon":
        return jaxcrawl.binary(0.4 if args.epsilon is None else args.epsilon)
    if getattr(args, "epsilon", None) is not None:
        raise ValueError(f"--epsilon applies to --objective binary-epsilon only (got --objective {args.objective})")
    return jaxcrawl.objective(args.objective)


def add_process_arguments(p: argparse.ArgumentParser) -> None:
    """Add the multi-process options to a subcommand's parser."""
    g = p.add_argument_group("several processes (jax.distributed; one command per process, the same arguments)")
    g.add_argument("--coordinator", metavar="HOST:PORT",
                   help="address of process 0's coordinator (default: $JAX_COORDINATOR_ADDRESS)")
    g.add_argument("--num-processes", type=int, metavar="N", help="processes in the job (default: $JAX_NUM_PROCESSES)")
    g.add_argument("--process-id", type=int, metavar="I", help="this process's index (default: $JAX_PROCESS_ID)")
    g.add_argument("--distributed", action="store_true",
                   help="join a job whose settings JAX detects from the cluster (SLURM, Open MPI, Kubernetes)")
    g.add_argument("--gather-output", action="store_true",
                   help="with several processes: process 0 joins the plan's parts into the one --output file")


def _env_count(name: str) -> int:
    try:
        return int(os.environ.get(name, "1") or 1)
    except ValueError:
        return 1


def requested(args: argparse.Namespace) -> bool:
    """Whether the options or the environment ask for a job of several processes.

    Yes with ``--distributed``, ``--num-processes N > 1``, ``JAX_NUM_PROCESSES > 1``
    (``jaxcrawl launch``), inside an ``srun`` step of several tasks
    (``SLURM_STEP_NUM_TASKS > 1``) or an ``mpirun`` of several ranks
    (``OMPI_COMM_WORLD_SIZE > 1``) -- so SLURM and Open MPI launches need no flags.
    """
    if getattr(args, "num_processes", None) is not None:
        return args.num_processes > 1 or bool(getattr(args, "distributed", False))
    return (bool(getattr(args, "distributed", False)) or _env_count("JAX_NUM_PROCESSES") > 1
            or _env_count("SLURM_STEP_NUM_TASKS") > 1 or _env_count("OMPI_COMM_WORLD_SIZE") > 1)


def join(args: argparse.Namespace) -> bool:
    """Start ``jax.distributed`` when :func:`requested`; returns whether several processes run."""

    if not requested(args):
        return False

    if args.x64 if hasattr(args, "x64") else False:
        jax.config.update("jax_enable_x64", True)
    initialize(args.coordinator, args.num_processes, args.process_id)
    return jax.process_count() > 1


def part_path(output: str, process: int, num_processes: int) -> str:
    """``plan.csv`` -> ``plan.part00001-of-00002.csv``: one process's part of a plan."""
    root, ext = os.path.splitext(output)
    return f"{root}.part{process:05d}-of-{num_processes:05d}{ext}"


def revisit_intervals(args: argparse.Namespace) -> tuple[float | None, float | None]:
    """``--min-interval`` and ``--max-interval`` in ``--time-unit`` (None where not given);
    ``--max-interval 0`` is refused."""
    min_iv = None if args.min_interval is None else parse_duration(args.min_interval, args.time_unit,
                                                                   name="--min-interval")
    max_iv = None if args.max_interval is None else parse_duration(args.max_interval, args.time_unit,
                                                                   name="--max-interval")
    if max_iv == 0:
        raise ValueError("--max-interval must be > 0")
    return min_iv, max_iv
