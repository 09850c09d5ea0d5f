"""``jaxcrawl stream``: optimal crawl rates for a page table on disk, chunk by chunk.

Solves any separable objective from a page-table directory (``importance.npy``,
``change_rate.npy``, ``complete.npy``; :func:`jaxcrawl.io.write_page_table`) as a
:class:`jaxcrawl.parallel.StreamedTable` with :func:`jaxcrawl.solve`: memory O(chunk), one sequential read of the table per
root-finding step, the rates written to one ``.npy`` file.  With several processes
(``--num-processes``/``--coordinator``/``--process-id``, ``jaxcrawl launch``, or a cluster
with ``--distributed``) each process streams its own row range and the sums are combined
across processes; every process writes its rows of the one output file (a shared
filesystem).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import time

import jax
import numpy as np

import jaxcrawl
from jaxcrawl import objective_names
from jaxcrawl import parallel as dist
from jaxcrawl._src.fileio import check_not_input, new_temporary, stage
from jaxcrawl.io import PageTable, check_output
from jaxcrawl.parallel import StreamedTable

from ._options import (
    add_process_arguments,
    bandwidth_from_args,
    budget_tolerance,
    check_result,
    join,
    objective_from_args,
)

__all__ = ["register", "run"]


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``stream`` subcommand to an ``argparse`` subparsers object."""


    p = subparsers.add_parser(
        "stream", help="optimal crawl rates for a page table on disk, streamed chunk by chunk",
        description=("Solve a separable objective for a page-table directory (importance.npy, "
                     "change_rate.npy, complete.npy) without loading it: per-chunk sums per root-finding "
                     "step. Writes the rates to --output (.npy). The last line printed is one JSON object; "
                     "exit status 3 when the root-find did not converge."))
    p.add_argument("--table", "-t", required=True, help="page-table directory")
    p.add_argument("--output", "-o", help="rates .npy file to write (default: none)")
    bw = p.add_mutually_exclusive_group()
    bw.add_argument("--bandwidth", type=float, help="total crawls per unit time R")
    bw.add_argument("--bandwidth-fraction", type=float, default=None,
                    help="R as a fraction of the number of pages (default 0.2)")
    p.add_argument("--objective", choices=objective_names(), default="harmonic", help="a separable objective")
    p.add_argument("--epsilon", type=float, default=None,
                   help="with --objective binary-epsilon only: the floor fraction (default 0.4)")
    p.add_argument("--chunk-size", type=int, default=1 << 20, help="pages per chunk (default 1048576)")
    p.add_argument("--max-steps", type=int, default=100, help="root-finding step cap (default 100)")
    p.add_argument("--rtol", type=float, default=None, help="relative budget tolerance of the root-find")
    p.add_argument("--x64", action="store_true", help="solve in float64")
    p.add_argument("--quiet", "-q", action="store_true",
                   help="no progress bar (one is shown on a terminal when the run takes more than a second)")
    add_process_arguments(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run ``jaxcrawl stream``; returns the exit status."""




    join(args)
    if args.chunk_size < 1:
        raise ValueError(f"--chunk-size must be >= 1; got {args.chunk_size}")
    table = PageTable(args.table)
    if table.num_pages == 0:
        table.check_rows()  # a table without pages: named, before the bandwidth is derived from the count
    bandwidth = bandwidth_from_args(args, table.num_pages)
    obj = objective_from_args(args)
    # the rates go to a temporary file next to the output (one name: every process writes its
    # rows; its space allocated before it is mapped); only a result that passes the final guard
    # is renamed over the output, with the command's other outputs (jaxcrawl._src.fileio)
    if args.output:
        check_output(args.output, args.table)
        check_not_input(args.output, [args.table])  # nor inside the table's directory
    partial = new_temporary(args.output, ".partial.npy") if args.output else None  # a name of this run's own
    dtype = np.float64 if args.x64 else np.float32
    t0 = time.perf_counter()
    staged = False
    try:
        src = StreamedTable(table, float(bandwidth), chunk_size=args.chunk_size, dtype=np.dtype(dtype).name,
                            out=partial, progress=False if args.quiet else None)
        res = jaxcrawl.solve(src, obj, max_steps=args.max_steps, rtol=args.rtol)
        seconds = time.perf_counter() - t0
        rate = np.asarray(res.rate)
        multi = jax.process_count() > 1
        local = [float(np.sum(rate, dtype=np.float64)), float(np.sum(~np.isfinite(rate)))]
        total, bad_total = (dist.allreduce_sum(local) if multi else local)
        failure = check_result({"rates": rate}, np.arange(src.start, src.start + len(rate)), converged=res.converged,
                               num_steps=res.num_steps, residual_before=res.residual, bandwidth=float(bandwidth),
                               total=float(total), tolerance=budget_tolerance(args.rtol, dtype, float(bandwidth)),
                               dtype=dtype, what="the streamed solve", nonfinite_total=int(bad_total))
        nrows = int(len(rate))
        del rate
        res = res._replace(rate=None)  # the memory map is closed before the rename
        if multi:
            dist.barrier("jaxcrawl.stream.written")
        if partial and jax.process_index() == 0 and failure is None:
            stage(partial, args.output)
            staged = True
        if multi:
            dist.barrier("jaxcrawl.stream.renamed")
    finally:
        if partial and jax.process_index() == 0 and not staged and os.path.exists(partial):
            os.unlink(partial)
    summary = dict(table=args.table, num_pages=table.num_pages, bandwidth=float(bandwidth), objective=args.objective,
                   converged=res.converged, dual=res.dual if math.isfinite(res.dual) else None,
                   residual_before_correction=res.residual, root_steps=res.num_steps, passes=src.num_passes,
                   solve_seconds=seconds, process=jax.process_index(), num_processes=jax.process_count(),
                   rows=[src.start, nrows],
                   output=args.output if failure is None else None)
    if failure is not None:
        summary["error"] = failure
    print(f"stream       {table.num_pages} pages, dual {res.dual:.10g}, {res.num_steps} root-finding steps, "
          f"{src.num_passes} passes, {seconds:.2f} s, converged: {res.converged}")
    print(json.dumps(summary))
    if failure is not None:
        raise jaxcrawl.NonConvergenceError(failure + ("; no rates written" if args.output else ""))
    return 0
