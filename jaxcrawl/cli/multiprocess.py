"""Shared command-line options for multi-process runs, and ``jaxcrawl solve`` over processes.

:func:`add_arguments` adds ``--coordinator HOST:PORT``, ``--num-processes N``,
``--process-id I`` and ``--distributed`` to a subcommand; :func:`join` starts
``jax.distributed`` from them (or from the environment: ``JAX_COORDINATOR_ADDRESS`` /
``JAX_NUM_PROCESSES`` / ``JAX_PROCESS_ID``, as ``jaxcrawl launch`` sets them; an ``srun``
step or ``mpirun`` of several tasks, detected from SLURM's / Open MPI's variables; or
``--distributed`` for any cluster JAX auto-detects, e.g. Kubernetes).  :func:`run_solve` is ``jaxcrawl solve``
when several processes take part: each reads only its rows of ``--input`` (CSV byte ranges,
Parquet row groups, a ``.npy`` page-table directory), the dual is found by cross-process
reductions, and each process writes its part of the plan (process 0 a manifest), or
process 0 joins the parts into one file with ``--gather-output``.
"""
from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

__all__ = ["add_arguments", "requested", "join", "run_solve", "part_path"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Add the multi-process options to a subcommand's parser."""
    g = p.add_argument_group("several processes (jax.distributed; see docs/scale.md)")
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
    import jax

    if not requested(args):
        return False
    from jaxcrawl.parallel import initialize

    if args.x64 if hasattr(args, "x64") else False:
        jax.config.update("jax_enable_x64", True)
    initialize(args.coordinator, args.num_processes, args.process_id)
    return jax.process_count() > 1


def part_path(output: str, process: int, num_processes: int) -> str:
    """``plan.csv`` -> ``plan.part00001-of-00002.csv``: one process's part of a plan."""
    root, ext = os.path.splitext(output)
    return f"{root}.part{process:05d}-of-{num_processes:05d}{ext}"


def _host_ids(caps_path: str, page_id: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Global host indices (the caps file's order, finite caps only) of this process's pages."""
    from jaxcrawl.io import read_host_caps

    return read_host_caps(caps_path, page_id, unknown_pages="ignore", all_hosts=True)


def run_solve(args: argparse.Namespace) -> int:
    """``jaxcrawl solve`` in a job of several processes (called by :mod:`jaxcrawl.cli.solve`)."""
    import jax

    import jaxcrawl
    from jaxcrawl import parallel as dist
    from jaxcrawl.io import read_local_rows

    from .solve import objective_from_args

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
    from jaxcrawl.io import check_output

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
        from jaxcrawl.io.synthetic import synthetic

        n = args.num_pages
        if n < 1:
            raise ValueError(f"--num-pages must be >= 1; got {n}")
        s, e = dist.row_range(n)
        with jax.default_device(jax.local_devices()[0]):
            syn = jax.jit(synthetic, static_argnums=1)(jax.random.key(args.seed), n)
            page_id = np.arange(s, e)
            imp, lam, comp = (np.asarray(a)[s:e] for a in (syn.importance, syn.change_rate, syn.complete))
        source, table_fp = f"synthetic(seed={args.seed}, num_pages={n})", None
    num_pages = int(dist.allreduce_sum([len(imp)])[0])
    from .solve import bandwidth_from_args, budget_tolerance

    bandwidth = float(bandwidth_from_args(args, num_pages))
    host_id = host_cap = None
    if args.host_caps:
        error = None
        try:
            host_id, host_cap = _host_ids(args.host_caps, page_id)
        except ValueError as err:
            error = str(err)
        dist.raise_together(error)
    from jaxcrawl._src.timeunits import parse_duration

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
    src = dist.ProcessRows(imp, lam, comp, bandwidth, dtype=dtype)
    caps = None if host_cap is None else jaxcrawl.HostCaps(host_id, host_cap)
    sol = jaxcrawl.solve(src, obj, caps=caps, bounds=bounds, max_steps=args.max_steps, rtol=args.rtol)
    seconds = time.perf_counter() - t0
    total = float(dist.allreduce_sum([np.sum(sol.rate, dtype=np.float64)])[0])
    tolerance = budget_tolerance(args.rtol, dtype, bandwidth)
    # the final guard (jaxcrawl.cli.check_result), on the same verdict in every process: the
    # non-finite count is summed over processes so that none writes while another refuses
    from . import check_result

    bad_total = int(dist.allreduce_sum([float(np.sum(~np.isfinite(sol.rate)) + np.sum(~np.isfinite(sol.prob)))])[0])
    failure = check_result({"rates": sol.rate, "probabilities": sol.prob}, page_id, converged=sol.converged,
                           num_steps=sol.num_steps, residual_before=sol.residual, bandwidth=bandwidth,
                           total=total, tolerance=tolerance, dtype=dtype, what=f"the solve (process {pid})",
                           nonfinite_total=bad_total)
    summary = dict(source=source, num_pages=num_pages, bandwidth=bandwidth, objective=args.objective,
                   converged=sol.converged, dual=sol.dual, residual_before_correction=sol.residual,
                   budget_residual=total - bandwidth, root_steps=sol.num_steps, solve_seconds=seconds,
                   dtype=np.dtype(dtype).name, process=pid, num_processes=nproc, rows=[src.start, len(sol.rate)])
    if failure is None and args.output:
        from jaxcrawl.io import write_plan

        part = part_path(args.output, pid, nproc)
        write_plan(part, page_id, sol.rate, sol.prob)
        dist.barrier("jaxcrawl.solve.parts")
        if pid == 0:
            parts = [part_path(args.output, i, nproc) for i in range(nproc)]
            if args.gather_output:
                _join_parts(parts, args.output)
                summary["output"] = args.output
            else:
                manifest = dict(summary, parts=[os.path.basename(p) for p in parts])
                with open(args.output + ".manifest.json", "w") as f:
                    json.dump(manifest, f, indent=1)
                summary["output"] = args.output + ".manifest.json"
        dist.barrier("jaxcrawl.solve.written")
    if failure is not None:
        summary["error"] = failure
    print(f"process {pid}/{nproc}: rows {src.start}..{src.start + len(sol.rate)} of {num_pages}, dual {sol.dual:.10g}, "
          f"{sol.num_steps} root-finding steps, converged: {sol.converged}, solve {seconds:.3f} s")
    print(json.dumps(summary))
    if failure is not None:
        raise jaxcrawl.NonConvergenceError(failure)
    return 0


def _join_parts(parts: list[str], output: str) -> None:
    """Concatenate CSV parts (one header) into ``output`` atomically, then remove them."""
    from jaxcrawl._src.fileio import write_file

    def fill(fh):
        for i, p in enumerate(parts):
            with open(p) as f:
                header = f.readline()
                if i == 0:
                    fh.write(header)
                for line in f:
                    fh.write(line)

    write_file(output, fill)
    for p in parts:
        os.remove(p)
