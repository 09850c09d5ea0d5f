"""``jaxcrawl evaluate``: what a crawl policy costs on a page table, and its gap to the
optimum at the same crawl volume.

Reads ``page_id,importance,change_rate[,complete]`` (:func:`jaxcrawl.io.read_problem`)
or draws the synthetic default (:func:`jaxcrawl.synthetic`), and evaluates a
plan file (``--plan``, as ``jaxcrawl solve --output`` writes it; :func:`jaxcrawl.io.read_plan`)
and/or named policies (``--policy NAME``, ``--compare a,b,c``: optimal objectives,
crawlers' revisit rules -- ``NAME@matched`` inside their documented ranges, with the
settings used in the notes --, learners) with
:func:`jaxcrawl.policy_eval.evaluate_policy`.  Prints a table (harmonic cost, binary
cost, fraction of requests served fresh, crawls used, the optima at the same volume and
the gaps; ``±`` a standard error for Monte-Carlo figures) and, last, one JSON line.
``--figure PATH`` draws cost against crawl volume: the optimal curves and every policy.
"""
from __future__ import annotations

import argparse
import json
import math

import jax
import jax.numpy as jnp
import numpy as np

import jaxcrawl
from jaxcrawl._src.fileio import write_file
from jaxcrawl._src.limits import check_size
from jaxcrawl.core.bounds import check_rate_bounds
from jaxcrawl.io import read_host_caps, read_plan, read_problem
from jaxcrawl.io.synthetic import synthetic
from jaxcrawl.policy_eval import Constraints, evaluate_policy, optimal_costs, plan_policy

from ._options import (
    bandwidth_from_args,
)

__all__ = ["register", "run"]


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``evaluate`` subcommand to an ``argparse`` subparsers object."""
    p = subparsers.add_parser(
        "evaluate",
        help="costs of a plan or named policies, and their gap to the optimum at the same crawl volume",
        description=(
            "Evaluate crawl policies on a page table (CSV page_id,importance,change_rate[,complete]; "
            "without --input, a seeded synthetic problem shaped like the NeurIPS-19 data set). Policies: "
            "--plan (a plan CSV page_id,rate,prob) and/or --policy/--compare names: an optimal objective "
            "(harmonic, binary, ...), a crawler's revisit rule (nutch-default, nutch-adaptive, "
            "stormcrawler-adaptive, heritrix-wait, at the crawler's defaults; NAME@matched: matched to the "
            "bandwidth with the best setting inside the crawler's documented ranges, its settings and whether "
            "it reaches the bandwidth in the notes; NAME@growth: the growth factor raised to a power, outside "
            "the documented ranges) or a "
            "learner (llc, llc-forget). Reports harmonic cost, binary cost, fraction of requests served "
            "fresh, crawls used and the gap to the optimum at the same crawl volume: closed forms where "
            "they exist, Monte Carlo with standard errors otherwise. The last line printed is one JSON object."
        ),
    )
    p.add_argument("--input", "-i", help="CSV page table (default: synthetic problem)")
    p.add_argument("--num-pages", type=int, default=10_000, help="synthetic problem size (default 10000)")
    p.add_argument("--seed", type=int, default=0, help="synthetic problem seed (default 0)")
    bw = p.add_mutually_exclusive_group()
    bw.add_argument("--bandwidth", type=float, help="total crawls per unit time R")
    bw.add_argument("--bandwidth-fraction", type=float, default=None,
                    help="R as a fraction of the number of pages (default 0.2)")
    p.add_argument("--plan", "-p", help="plan CSV page_id,rate,prob to evaluate (its page ids must match the table)")
    p.add_argument("--policy", action="append", default=[], help="a policy name (repeatable)")
    p.add_argument("--compare", default="", help="comma-separated policy names, e.g. harmonic,nutch-adaptive,llc")
    p.add_argument("--horizon", type=float, default=60.0, help="Monte-Carlo time measured per seed (default 60)")
    p.add_argument("--burn-in", type=float, default=120.0,
                   help="time simulated before measuring heuristics and learners (default 120)")
    p.add_argument("--seeds", type=int, default=4, help="independent Monte-Carlo seeds (default 4, >= 2)")
    p.add_argument("--mc-seed", type=int, default=0, help="seed of the Monte Carlo (default 0)")
    p.add_argument("--no-monte-carlo", action="store_true",
                   help="closed forms only for plans and optimal objectives (no simulation)")
    p.add_argument("--half-life", type=float, default=7.0, help="llc-forget: forgetting half-life (default 7)")
    p.add_argument("--figure", help="PNG path: cost against crawl volume (optimal curves and the policies)")
    p.add_argument("--host-caps", help="CSV host_id,cap of per-host crawl-rate caps (as for jaxcrawl solve): the "
                   "optimum honours them and a plan over a cap is reported")
    p.add_argument("--x64", action="store_true", help="evaluate in float64")
    p.set_defaults(func=run)


def _load(args):


    if args.input:
        t = read_problem(args.input)
        bounds = None
        if t.min_interval is not None or t.max_interval is not None:
            lo, hi = t.rate_bounds()
            if np.any(lo > 0) or np.any(np.isfinite(hi)):
                bounds = (lo, hi)
        return t.page_id, t.importance, t.change_rate, t.complete, args.input, bounds
    n = args.num_pages
    if n < 1:
        raise ValueError(f"--num-pages must be >= 1; got {n}")
    check_size("--num-pages", n, 64, "pages")  # before anything is allocated
    syn = jax.jit(synthetic, static_argnums=1)(jax.random.key(args.seed), n)
    return (np.arange(n), np.asarray(syn.importance), np.asarray(syn.change_rate), np.asarray(syn.complete),
            f"synthetic(seed={args.seed}, num_pages={n})", None)


def _aligned_plan(plan, page_id):
    """The plan's rate and prob in the page table's order (every page exactly once)."""
    index = {str(p): i for i, p in enumerate(np.asarray(page_id).tolist())}
    rate = np.full(len(index), np.nan)
    prob = np.zeros(len(index))
    seen = np.zeros(len(index), bool)
    for pid, r, q in zip(np.asarray(plan.page_id).tolist(), plan.rate, plan.prob):
        i = index.get(str(pid))
        if i is None:
            raise ValueError(f"--plan: page {pid!r} is not in the page table")
        rate[i], prob[i], seen[i] = r, q, True
    if not seen.all():
        missing = np.asarray(page_id)[~seen][:3].tolist()
        raise ValueError(f"--plan: {int((~seen).sum())} pages of the table have no rate in the plan (first: {missing})")
    return rate, prob


def _fmt(v, se=None, digits=4):
    if v is None or not math.isfinite(v):
        return "inf" if v is not None and v > 0 else "n/a"
    s = f"{v:.{digits}g}"
    return s if se is None else f"{s} ± {se:.2g}"


def _pct(gap, optimum):
    v = 100 * gap / optimum
    return f"{v:+.1f}%" if math.isfinite(v) else "inf"


def _figure(path, problem, reports, n):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt


    vols = [r.crawl_rate for r in reports]
    lo = max(1e-3 * n, 0.5 * min(vols))
    hi = 1.5 * max(vols)
    grid = np.geomspace(lo, hi, 24)
    curve = np.array([optimal_costs(problem, float(v)) for v in grid])
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for j, (ax, label) in enumerate(zip(axes, ("harmonic cost", "binary cost"))):
        ax.plot(grid, curve[:, j], "k-", label="optimum at the same volume")
        for r in reports:
            y = r.harmonic_cost if j == 0 else r.binary_cost
            ax.plot([r.crawl_rate], [y], "o", label=r.policy)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("crawls per unit time")
        ax.set_ylabel(f"{label} (per page)")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle(f"{n} pages, bandwidth {float(jnp.asarray(problem.bandwidth)):g}")
    fig.tight_layout()
    write_file(path, lambda fh: fig.savefig(fh, dpi=110, format="png"), binary=True)  # the output rule
    plt.close(fig)


def run(args: argparse.Namespace) -> int:
    """Run ``jaxcrawl evaluate``; returns the exit status."""


    names = list(args.policy) + [s.strip() for s in args.compare.split(",") if s.strip()]
    if not names and not args.plan:
        raise ValueError("give --plan and/or --policy NAME / --compare a,b,c")
    if args.seeds < 2:
        raise ValueError(f"--seeds must be >= 2 (standard errors need two); got {args.seeds}")
    for flag, v in (("--horizon", args.horizon), ("--burn-in", args.burn_in)):
        if not (math.isfinite(v) and v >= 0):
            raise ValueError(f"{flag} must be a finite number of time units >= 0; got {v}")
    page_id, imp, lam, comp, source, bounds = _load(args)
    n = len(page_id)
    check_size("--seeds", float(args.seeds) * n, 64, "simulated pages (seeds x pages)")

    bandwidth = bandwidth_from_args(args, n)
    constraints = Constraints()
    if bounds is not None:

        check_rate_bounds(bounds[0], bounds[1], float(bandwidth), page_id=page_id)
        constraints = constraints._replace(min_rate=bounds[0], max_rate=bounds[1])
    if args.host_caps:

        hidx, hcap = read_host_caps(args.host_caps, page_id)
        constraints = constraints._replace(host_id=hidx, host_cap=hcap)
    dtype = jnp.float64 if args.x64 else jnp.float32
    problem = jaxcrawl.CrawlProblem(jnp.asarray(imp, dtype), jnp.asarray(lam, dtype), bandwidth, jnp.asarray(comp))
    key = jax.random.PRNGKey(args.mc_seed)
    opts = dict(horizon=args.horizon, burn_in=args.burn_in, num_seeds=args.seeds,
                monte_carlo=not args.no_monte_carlo, half_life=args.half_life, constraints=constraints,
                page_id=page_id)
    reports = []
    if args.plan:
        rate, prob = _aligned_plan(read_plan(args.plan), page_id)
        reports.append(evaluate_policy(problem, plan_policy(problem, rate, prob), key=key, name=f"plan:{args.plan}",
                                       **opts))
    for name in names:
        reports.append(evaluate_policy(problem, name, key=key, **opts))
    if args.figure:
        _figure(args.figure, problem, reports, n)

    print(f"problem  {source}: {n} pages, {int(np.sum(comp))} complete, bandwidth {bandwidth:g}"
          + ("; revisit bounds" if bounds is not None else "") + ("; host caps" if args.host_caps else ""))
    head = ("policy", "method", "harmonic", "binary", "fresh req.", "crawls/unit", "opt. harm.", "harm. gap",
            "opt. bin.", "bin. gap")
    rows = []
    for r in reports:
        rows.append((r.policy, r.method, _fmt(r.harmonic_cost, r.harmonic_cost_se),
                     _fmt(r.binary_cost, r.binary_cost_se), _fmt(r.fresh_fraction, r.fresh_fraction_se, 3),
                     _fmt(r.crawl_rate, r.crawl_rate_se, 5), _fmt(r.optimal_harmonic),
                     _pct(r.harmonic_gap, r.optimal_harmonic), _fmt(r.optimal_binary),
                     _pct(r.binary_gap, r.optimal_binary)))
        if r.monte_carlo is not None:
            mc = r.monte_carlo
            rows.append(("  (simulated)", "monte carlo", _fmt(mc["harmonic_cost"], mc["harmonic_cost_se"]),
                         _fmt(mc["binary_cost"], mc["binary_cost_se"]),
                         _fmt(mc["fresh_fraction"], mc["fresh_fraction_se"], 3),
                         _fmt(mc["crawl_rate"], mc["crawl_rate_se"], 5), "", "", "", ""))
    widths = [max(len(str(row[i])) for row in [head] + rows) for i in range(len(head))]
    for row in [head] + rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip())
    for r in reports:
        if r.notes:
            print(f"note     {r.policy}: " + ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                                                     for k, v in r.notes.items()))
    if args.figure:
        print(f"figure   {args.figure}")

    def clean(v):
        if isinstance(v, float) and not math.isfinite(v):
            return None
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items()}
        return v

    summary = dict(source=source, num_pages=int(n), bandwidth=float(bandwidth), dtype=str(jnp.dtype(dtype)),
                   horizon=args.horizon, burn_in=args.burn_in, seeds=args.seeds,
                   results=[{k: clean(v) for k, v in r._asdict().items()} for r in reports])
    if args.figure:
        summary["figure"] = args.figure
    print(json.dumps(summary))
    return 0
