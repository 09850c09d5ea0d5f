"""The ``jaxcrawl`` command line.

``jaxcrawl solve``     optimal crawl rates for a CSV of pages, or the synthetic default.
Other subcommands (``estimate``, ``schedule``, ``reproduce``) are registered by their
modules, each exposing ``register(subparsers)``.
"""
from __future__ import annotations

import argparse
import importlib
import json
import sys
import time

__all__ = ["main"]

_SUBCOMMAND_MODULES = (
    "jaxcrawl._cli_estimate",
    "jaxcrawl._cli_schedule",
    "jaxcrawl._cli_reproduce",
)

OBJECTIVES = ("harmonic", "harmonic-approx", "binary", "binary-epsilon", "delay", "uniform")


def _register_solve(sub):
    p = sub.add_parser(
        "solve",
        help="optimal crawl rates for a page table (CSV) or the synthetic default",
        description=(
            "Solve for optimal crawl rates. Input: a CSV with header "
            "page_id,importance,change_rate[,complete]; without --input, a seeded synthetic "
            "problem shaped like the NeurIPS-19 data set. Writes a plan CSV page_id,rate,prob "
            "and prints the harmonic and binary cost of the plan, the dual and the solve time; "
            "the last line printed is one JSON object."
        ),
    )
    p.add_argument("--input", "-i", help="CSV page table (default: synthetic problem)")
    p.add_argument("--output", "-o", help="plan CSV to write (page_id,rate,prob)")
    p.add_argument("--num-pages", type=int, default=100_000, help="synthetic problem size (default 100000)")
    p.add_argument("--seed", type=int, default=0, help="synthetic problem seed (default 0)")
    bw = p.add_mutually_exclusive_group()
    bw.add_argument("--bandwidth", type=float, help="total crawls per unit time R")
    bw.add_argument("--bandwidth-fraction", type=float, default=None,
                    help="R as a fraction of the number of pages (default 0.2)")
    p.add_argument("--objective", choices=OBJECTIVES, default="harmonic",
                   help="harmonic: LambdaCrawl; harmonic-approx: LambdaCrawlApprox; binary: BinaryLambdaCrawl; "
                        "binary-epsilon: BLC-epsilon; delay: accumulated delay; uniform: uniform-interval freshness")
    p.add_argument("--epsilon", type=float, default=0.4, help="BLC-epsilon floor fraction (default 0.4)")
    p.add_argument("--host-caps", help="CSV of per-host crawl-rate caps (requires politeness support)")
    p.add_argument("--x64", action="store_true", help="solve in float64")
    p.set_defaults(func=_run_solve)


def _solver_for(name, epsilon):
    from . import solvers

    return {
        "harmonic": solvers.lambda_crawl,
        "harmonic-approx": solvers.lambda_crawl_approx,
        "binary": lambda pr: solvers.binary_lambda_crawl(pr, 0.0),
        "binary-epsilon": lambda pr: solvers.binary_lambda_crawl(pr, epsilon),
        "delay": solvers.accumulated_delay_crawl,
        "uniform": solvers.uniform_interval_crawl,
    }[name]


def _run_solve(args) -> int:
    import jax

    if args.x64:
        jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    import numpy as np

    from . import data, objectives
    from .problem import CrawlProblem

    if args.input:
        table = data.read_problem_csv(args.input)
        page_id = table.page_id
        n = len(page_id)
        imp, lam, comp = table.importance, table.change_rate, table.complete
        source = args.input
    else:
        n = args.num_pages
        if n < 1:
            raise ValueError(f"--num-pages must be >= 1; got {n}")
        syn = data.synthetic(jax.random.key(args.seed), n)
        imp, lam, comp = np.asarray(syn.importance), np.asarray(syn.change_rate), np.asarray(syn.complete)
        page_id = np.arange(n)
        source = f"synthetic(seed={args.seed}, num_pages={n})"
    if args.bandwidth is not None:
        bandwidth = args.bandwidth
    else:
        frac = 0.2 if args.bandwidth_fraction is None else args.bandwidth_fraction
        if not frac > 0:
            raise ValueError(f"--bandwidth-fraction must be > 0; got {frac}")
        bandwidth = frac * n
    dtype = jnp.float64 if args.x64 else jnp.float32
    problem = CrawlProblem(jnp.asarray(imp, dtype), jnp.asarray(lam, dtype), bandwidth, jnp.asarray(comp))
    if args.host_caps:
        try:
            from . import politeness
        except ImportError:
            raise ValueError("--host-caps: politeness constraints are not available in this build") from None
        solve = politeness.solver_from_caps_file(args.host_caps, page_id, args.objective, epsilon=args.epsilon)
    else:
        solve = jax.jit(_solver_for(args.objective, args.epsilon))
    t0 = time.perf_counter()
    policy = jax.block_until_ready(solve(problem))
    compile_and_run = time.perf_counter() - t0
    t0 = time.perf_counter()
    policy = jax.block_until_ready(solve(problem))
    seconds = time.perf_counter() - t0
    harmonic = float(objectives.harmonic_cost(problem, policy))
    binary = float(objectives.binary_cost(problem, policy))
    summary = {
        "source": source,
        "num_pages": int(n),
        "num_complete": int(np.sum(comp)),
        "bandwidth": float(bandwidth),
        "objective": args.objective,
        "harmonic_cost": harmonic,
        "binary_cost": binary,
        "dual": float(policy.dual),
        "budget_residual": float(policy.residual),
        "root_steps": int(policy.num_steps),
        "solve_seconds": seconds,
        "first_call_seconds": compile_and_run,
        "dtype": str(problem.dtype),
    }
    if args.output:
        data.write_plan_csv(args.output, page_id, np.asarray(policy.rate), np.asarray(policy.prob))
        summary["output"] = args.output
    print(f"problem      {source}: {n} pages, {summary['num_complete']} complete, bandwidth {bandwidth:g}")
    print(f"objective    {args.objective}")
    print(f"harmonic     {harmonic:.6g}  (page-averaged harmonic staleness, NeurIPS-19 eq. 8)")
    print(f"binary       {binary:.6g}  (page-averaged binary staleness, NeurIPS-19 eq. 12-13)")
    print(f"dual         {summary['dual']:.6g}  (marginal utility of one more crawl per unit time)")
    print(f"solve time   {seconds * 1e3:.2f} ms after compilation ({compile_and_run:.2f} s first call), "
          f"{summary['root_steps']} root-finding steps")
    if args.output:
        print(f"plan         written to {args.output}")
    print(json.dumps(summary))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="jaxcrawl", description="Optimal freshness crawl scheduling in JAX.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    _register_solve(sub)
    for mod_name in _SUBCOMMAND_MODULES:
        try:
            mod = importlib.import_module(mod_name)
        except ModuleNotFoundError as err:
            if err.name == mod_name:
                continue
            raise
        mod.register(sub)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except (ValueError, OSError) as err:
        print(f"jaxcrawl {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
