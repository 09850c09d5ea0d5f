"""``jaxcrawl solve``: optimal crawl rates for a page table (CSV) or the synthetic default.

Reads ``page_id,importance,change_rate[,complete]`` (:func:`jaxcrawl.io.read_problem_csv`)
or draws :func:`jaxcrawl.synthetic.synthetic`, solves with :func:`jaxcrawl.solve` for the
``--objective`` (any name of :func:`jaxcrawl.utility_names`; per-host caps through
:func:`jaxcrawl.politeness.solver_from_caps_file`), and writes the plan
``page_id,rate,prob`` (:func:`jaxcrawl.io.write_plan_csv`).  A solve that did not converge,
produced non-finite rates, or whose rates miss the bandwidth by more than the tolerance
exits with status 3 and writes no plan.
"""
from __future__ import annotations

import argparse
import json
import math
import time
from typing import Any

import numpy as np

from . import multiprocess

__all__ = ["register", "run", "check_plan"]


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``solve`` subcommand to an ``argparse`` subparsers object."""
    from jaxcrawl.utilities import utility_names

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
    p.add_argument("--input", "-i", help="CSV page table (default: synthetic problem)")
    p.add_argument("--output", "-o", help="plan CSV to write (page_id,rate,prob); never the input")
    p.add_argument("--num-pages", type=int, default=100_000, help="synthetic problem size (default 100000)")
    p.add_argument("--seed", type=int, default=0, help="synthetic problem seed (default 0)")
    bw = p.add_mutually_exclusive_group()
    bw.add_argument("--bandwidth", type=float, help="total crawls per unit time R")
    bw.add_argument("--bandwidth-fraction", type=float, default=None,
                    help="R as a fraction of the number of pages (default 0.2)")
    p.add_argument("--objective", choices=utility_names(), default="harmonic",
                   help="a registered utility (jaxcrawl.utility_names()): harmonic: LambdaCrawl; "
                        "harmonic-approx: LambdaCrawlApprox; binary: BinaryLambdaCrawl; binary-epsilon: "
                        "BLC-epsilon; delay: accumulated delay; uniform: uniform-interval freshness")
    p.add_argument("--epsilon", type=float, default=0.4,
                   help="binary-epsilon: the floor fraction (every page gets >= epsilon*R/n; default 0.4)")
    p.add_argument("--host-caps", help="CSV host_id,cap of per-host crawl-rate caps (see docs/cli.md)")
    p.add_argument("--max-steps", type=int, default=100,
                   help="root-finding step cap (default 100); a solve stopped by it exits with status 3")
    p.add_argument("--rtol", type=float, default=None,
                   help="relative budget tolerance of the root-find (default 4 eps^0.75 of the dtype)")
    p.add_argument("--x64", action="store_true", help="solve in float64")
    multiprocess.add_arguments(p)  # --coordinator/--num-processes/--process-id: jaxcrawl.cli.multiprocess
    p.set_defaults(func=run)


def _number(x: Any) -> float | None:
    """A float for the JSON summary (None when not finite, so the line stays valid JSON)."""
    v = float(x)
    return v if math.isfinite(v) else None


def check_plan(rate: np.ndarray, prob: np.ndarray, bandwidth: float, converged: bool,
               residual_before: float, num_steps: int, tolerance: float, page_id: np.ndarray) -> str | None:
    """Why a solved plan must not be written (None when it may be).

    Rejects a root-find that did not converge, non-finite rates or probabilities, and a
    plan whose rates (summed in float64) miss ``bandwidth`` by more than ``tolerance``.
    """
    if not converged:
        return (f"the solve did not converge: the root-find stopped after {num_steps} steps with the "
                f"budget off by {residual_before:.3g} ({abs(residual_before) / bandwidth:.2g} of the "
                "bandwidth) before its closing correction; raise --max-steps (or --rtol) or check the input")
    bad = ~(np.isfinite(rate) & np.isfinite(prob))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        return (f"the solve produced non-finite rates for {int(bad.sum())} pages (first: page "
                f"{page_id[i]!r}, rate {rate[i]!r}); check the input")
    off = float(np.sum(rate, dtype=np.float64)) - bandwidth
    if not abs(off) <= tolerance:
        return (f"the plan's rates sum to {bandwidth + off:.10g}, off the bandwidth {bandwidth:.10g} by "
                f"{off:.3g} (tolerance {tolerance:.3g})")
    return None


def _load(args: argparse.Namespace) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, str]:
    import jax

    from jaxcrawl.io import read_problem_csv
    from jaxcrawl.synthetic import synthetic

    if args.input:
        t = read_problem_csv(args.input)
        return t.page_id, t.importance, t.change_rate, t.complete, args.input
    n = args.num_pages
    if n < 1:
        raise ValueError(f"--num-pages must be >= 1; got {n}")
    syn = jax.jit(synthetic, static_argnums=1)(jax.random.key(args.seed), n)  # one compile, not one per op
    return (np.arange(n), np.asarray(syn.importance), np.asarray(syn.change_rate),
            np.asarray(syn.complete), f"synthetic(seed={args.seed}, num_pages={n})")


def run(args: argparse.Namespace) -> int:
    """Run ``jaxcrawl solve``; returns the exit status (raises ``NonConvergenceError``
    for status 3)."""
    import jax
    import jax.numpy as jnp

    import jaxcrawl
    from jaxcrawl import objectives
    from jaxcrawl._src.rootfind import default_rtol
    from jaxcrawl.io import check_output, read_host_caps, write_plan_csv
    from jaxcrawl.utilities import binary_epsilon

    if multiprocess.requested(args):  # several processes: each solves from its own rows
        return multiprocess.run_solve(args)
    if args.max_steps < 1:
        raise ValueError(f"--max-steps must be >= 1; got {args.max_steps}")
    if args.rtol is not None and not (math.isfinite(args.rtol) and 0 < args.rtol < 1):
        raise ValueError(f"--rtol must be in (0, 1); got {args.rtol}")
    if args.host_caps and (args.max_steps != 100 or args.rtol is not None):
        raise ValueError("--max-steps and --rtol apply to solves without --host-caps")
    mapping = read_host_caps(args.host_caps)[2] if args.host_caps else None
    check_output(args.output, args.input, args.host_caps, mapping)
    page_id, imp, lam, comp, source = _load(args)
    n = len(page_id)
    if args.bandwidth is not None:
        bandwidth = args.bandwidth
    else:
        frac = 0.2 if args.bandwidth_fraction is None else args.bandwidth_fraction
        if not frac > 0:
            raise ValueError(f"--bandwidth-fraction must be > 0; got {frac}")
        bandwidth = frac * n
    utility = binary_epsilon(args.epsilon) if args.objective == "binary-epsilon" else args.objective
    dtype = jnp.float64 if args.x64 else jnp.float32
    problem = jaxcrawl.CrawlProblem(jnp.asarray(imp, dtype), jnp.asarray(lam, dtype), bandwidth,
                                    jnp.asarray(comp))
    if args.host_caps:
        from jaxcrawl import politeness

        solve = politeness.solver_from_caps_file(args.host_caps, page_id, args.objective, epsilon=args.epsilon)
    else:
        solve = jax.jit(lambda pr: jaxcrawl.solve(pr, utility, max_steps=args.max_steps, rtol=args.rtol))
    t0 = time.perf_counter()
    policy = jax.block_until_ready(solve(problem))
    first_call = time.perf_counter() - t0
    t0 = time.perf_counter()
    policy = jax.block_until_ready(solve(problem))
    seconds = time.perf_counter() - t0

    rate = np.asarray(policy.rate, np.float64)
    prob = np.asarray(policy.prob, np.float64)
    converged = bool(np.all(np.asarray(policy.converged)))
    eps = float(jnp.finfo(problem.dtype).eps)
    tolerance = max(args.rtol or default_rtol(problem.dtype), 32 * eps) * float(bandwidth)
    residual = float(np.sum(rate, dtype=np.float64)) - float(bandwidth)
    failure = check_plan(rate, prob, float(bandwidth), converged, float(policy.residual),
                         int(policy.num_steps), tolerance, page_id)
    costs = jax.jit(lambda pr, pol: (objectives.harmonic_cost(pr, pol), objectives.binary_cost(pr, pol)))
    harmonic, binary = (float(c) for c in costs(problem, policy))
    summary = {
        "source": source,
        "num_pages": int(n),
        "num_complete": int(np.sum(comp)),
        "bandwidth": float(bandwidth),
        "objective": args.objective,
        "converged": converged,
        "harmonic_cost": _number(harmonic),
        "binary_cost": _number(binary),
        "dual": _number(policy.dual),
        "budget_residual": _number(residual),
        "residual_before_correction": _number(policy.residual),
        "budget_tolerance": tolerance,
        "root_steps": int(policy.num_steps),
        "solve_seconds": seconds,
        "first_call_seconds": first_call,
        "dtype": str(problem.dtype),
    }
    if failure is None and args.output:
        write_plan_csv(args.output, page_id, rate, prob)
        summary["output"] = args.output
    if failure is not None:
        summary["error"] = failure
    print(f"problem      {source}: {n} pages, {summary['num_complete']} complete, bandwidth {bandwidth:g}")
    print(f"objective    {args.objective}")
    print(f"harmonic     {harmonic:.6g}  (page-averaged harmonic staleness, NeurIPS-19 eq. 8)")
    print(f"binary       {binary:.6g}  (page-averaged binary staleness, NeurIPS-19 eq. 12-13)")
    print(f"dual         {float(policy.dual):.6g}  (marginal utility of one more crawl per unit time)")
    print(f"solve time   {seconds * 1e3:.2f} ms after compilation ({first_call:.2f} s first call), "
          f"{summary['root_steps']} root-finding steps, converged: {converged}")
    if "output" in summary:
        print(f"plan         written to {args.output}")
    elif failure is not None and args.output:
        print(f"plan         NOT written ({args.output} left as it was)")
    print(json.dumps(summary))
    if failure is not None:
        raise jaxcrawl.NonConvergenceError(failure + ("; no plan written" if args.output else ""))
    return 0
