"""``jaxcrawl evaluate``: what a crawl policy costs on a page table, and its gap to the
optimum at the same crawl volume.

Reads ``page_id,importance,change_rate[,complete]`` (:func:`jaxcrawl.io.read_problem`)
or draws the synthetic default (:func:`jaxcrawl.synthetic`), and evaluates a
plan file (``--plan``, as ``jaxcrawl solve --output`` writes it; :func:`jaxcrawl.io.read_plan`)
and/or named policies (``--policy NAME``, ``--compare a,b,c``: optimal objectives,
crawlers' revisit rules -- ``NAME@matched`` inside their documented ranges, with the
settings used in the notes --, learners) with
:func:`jaxcrawl.policy_eval.evaluate_policy`, under the revisit bounds, host caps and crawl
delays ``jaxcrawl solve`` takes (the same options).  Prints a table with two costs per
policy -- the Poisson cost (the papers' objective) against the Poisson optimum, and the
cost as executed (a plan as ``jaxcrawl schedule`` runs it, periodically; a crawler's rule as
simulated) against the Poisson-optimal plans executed periodically -- with crawls used and
the fraction of requests served fresh (``±`` a standard error for Monte-Carlo figures), one
progress line per stage when stderr is not a terminal, and, last, one JSON line.
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
from jaxcrawl._src.checks import check_representable
from jaxcrawl._src.fileio import progress_bar, write_file
from jaxcrawl._src.hostmap import merge_host_caps
from jaxcrawl._src.limits import check_size
from jaxcrawl._src.timeunits import TIME_UNITS, unit_seconds
from jaxcrawl.core.bounds import check_rate_bounds, rate_bounds
from jaxcrawl.io import PageTable, read_plan, read_problem
from jaxcrawl.io.synthetic import synthetic
from jaxcrawl.policy_eval import Constraints, evaluate_policy, optimal_costs, plan_policy

from ._options import add_host_arguments, bandwidth_from_args, host_caps, host_gaps, revisit_intervals
from ._stages import Stages

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
            "learner (llc, llc-forget). Reports, at each policy's crawl volume, its Poisson cost (the papers' "
            "objective) and its gap to the Poisson optimum, and its cost as executed (a plan as jaxcrawl schedule "
            "runs it: periodic crawls at the planned rate, periodic_rate included; a crawler's rule as simulated) "
            "and its gap to the Poisson-optimal plans executed periodically: closed forms where they exist, "
            "Monte Carlo with standard errors otherwise. Revisit bounds, host caps and crawl delays as for "
            "jaxcrawl solve. The last line printed is one JSON object."
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
    p.add_argument("--time-unit", choices=tuple(TIME_UNITS), default="days",
                   help="the unit of time of the rates, --horizon and --burn-in (as for jaxcrawl solve; default days)")
    p.add_argument("--min-interval", help="revisit bound for every page, as for jaxcrawl solve (a number in "
                   "--time-unit, or 90s/15m/6h/2d/1w); the input's min_interval column per page, the larger applies")
    p.add_argument("--max-interval", help="revisit bound for every page (same forms); the input's max_interval "
                   "column per page, the smaller applies")
    add_host_arguments(p)
    p.add_argument("--x64", action="store_true", help="evaluate in float64")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress lines")
    p.set_defaults(func=run)


def _load(args):
    """``(table, source)``: the page table (:class:`jaxcrawl.io.PageTable`) or the synthetic default."""
    if args.input:
        return read_problem(args.input), args.input
    n = args.num_pages
    if n < 1:
        raise ValueError(f"--num-pages must be >= 1; got {n}")
    check_size("--num-pages", n, 64, "pages")  # before anything is allocated
    syn = jax.jit(synthetic, static_argnums=1)(jax.random.key(args.seed), n)
    return (PageTable.from_arrays(np.arange(n), np.asarray(syn.importance), np.asarray(syn.change_rate),
                                  np.asarray(syn.complete)),
            f"synthetic(seed={args.seed}, num_pages={n})")


def _bounds(args, rows, n):
    """The revisit bounds as rates (the table's columns and ``--min/--max-interval``, the
    tighter of each, as ``jaxcrawl solve``), or None when no page is bounded."""
    min_iv, max_iv = revisit_intervals(args)
    if all(v is None for v in (rows.min_interval, rows.max_interval, min_iv, max_iv)):
        return None
    lo, hi = rows.rate_bounds()
    a_lo, a_hi = rate_bounds(n, min_interval=min_iv, max_interval=max_iv)
    lo, hi = np.maximum(lo, a_lo), np.minimum(hi, a_hi)
    return (lo, hi) if bool(np.any(lo > 0) or np.any(np.isfinite(hi))) else None


def _caps(args, page_id):
    """``(host_index, cap)`` from ``--host-caps`` and/or the crawl delays (``1 / delay`` per
    ``--time-unit``; the smaller of the two applies), as ``jaxcrawl solve``; None without either."""
    gaps = host_gaps(args, page_id)
    if gaps is None:
        return host_caps(args, page_id) if args.host_caps else None
    hidx, delay, names = gaps
    with np.errstate(divide="ignore"):
        cap = np.where(delay > 0, unit_seconds(args.time_unit) / np.where(delay > 0, delay, 1.0), np.inf)
    if args.host_caps:
        c_idx, c_cap = host_caps(args, page_id)
        hidx, cap = merge_host_caps(c_idx, c_cap, hidx, cap, page_id=page_id,
                                    what=(f"--host-caps {args.host_caps}", "the crawl delays' hosts"),
                                    names=(None, names))
    return hidx, cap


def _aligned_plan(plan, page_id):
    """The plan's rate, prob and periodic_rate in the page table's order (every page exactly once)."""
    table = np.asarray(page_id).astype(str)
    ids = np.asarray(plan.page_id).astype(str)
    order = np.argsort(table, kind="stable")
    pos = np.minimum(np.searchsorted(table[order], ids), max(table.size - 1, 0))
    known = table[order][pos] == ids
    if not known.all():
        raise ValueError(f"--plan: page {np.asarray(plan.page_id)[~known][0]!r} is not in the page table")
    at = order[pos]
    seen = np.zeros(table.size, bool)
    seen[at] = True
    if not seen.all():
        missing = np.asarray(page_id)[~seen][:3].tolist()
        raise ValueError(f"--plan: {int((~seen).sum())} pages of the table have no rate in the plan (first: {missing})")
    out = [np.zeros(table.size) for _ in range(3)]
    for a, col in zip(out, (plan.rate, plan.prob, plan.periodic_rate)):
        a[at] = np.asarray(col, np.float64)
    return tuple(out)


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


#: The two costs, as the report explains them (one line each).
_LEGEND = (
    "Poisson   the papers' objective: every page's crawls a Poisson process at its rate (complete pages on their "
    "signals); gap: to the optimum over Poisson schedules at the same crawl volume (LambdaCrawl / BinaryLambdaCrawl)",
    "executed  as the policy runs: a plan as `jaxcrawl schedule` executes it (periodic crawls at the planned rate, "
    "signal crawls for complete pages; closed form), a crawler's rule as simulated; gap: to the Poisson-optimal "
    "plans at the same crawl volume executed periodically (not the optimum over periodic schedules)",
)


def run(args: argparse.Namespace) -> int:
    """Run ``jaxcrawl evaluate``; returns the exit status."""
    stages = Stages("evaluate", quiet=args.quiet)
    names = list(args.policy) + [s.strip() for s in args.compare.split(",") if s.strip()]
    if not names and not args.plan:
        raise ValueError("give --plan and/or --policy NAME / --compare a,b,c")
    if args.seeds < 2:
        raise ValueError(f"--seeds must be >= 2 (standard errors need two); got {args.seeds}")
    for flag, v in (("--horizon", args.horizon), ("--burn-in", args.burn_in)):
        if not (math.isfinite(v) and v >= 0):
            raise ValueError(f"{flag} must be a finite number of time units >= 0; got {v}")
    with stages.stage("read"):
        rows, source = _load(args)
        page_id, imp, lam, comp = rows.page_id, rows.importance, rows.change_rate, rows.complete
        n = len(page_id)
        check_size("--seeds", float(args.seeds) * n, 64, "simulated pages (seeds x pages)")
        bandwidth = bandwidth_from_args(args, n)
        constraints = Constraints()
        bounds = _bounds(args, rows, n)
        if bounds is not None:
            check_rate_bounds(bounds[0], bounds[1], float(bandwidth), page_id=page_id, unit=args.time_unit[:-1])
            constraints = constraints._replace(min_rate=bounds[0], max_rate=bounds[1])
        caps = _caps(args, page_id)
        if caps is not None:
            constraints = constraints._replace(host_id=caps[0], host_cap=caps[1])
        dtype = jnp.float64 if args.x64 else jnp.float32
        plan = None
        if args.plan:
            raw = read_plan(args.plan)
            for name in ("rate", "periodic_rate"):  # cast to dtype: a rate past its range would become inf
                col = np.asarray(getattr(raw, name), np.float64)  # (a tiny one becomes 0: never crawled either way)
                check_representable(np.where(col > 1.0, col, 0.0), name, dtype, labels=raw.page_id, source=args.plan)
            plan = _aligned_plan(raw, page_id)
    problem = jaxcrawl.CrawlProblem(jnp.asarray(imp, dtype), jnp.asarray(lam, dtype), bandwidth, jnp.asarray(comp))
    key = jax.random.PRNGKey(args.mc_seed)
    opts = dict(horizon=args.horizon, burn_in=args.burn_in, num_seeds=args.seeds,
                monte_carlo=not args.no_monte_carlo, half_life=args.half_life, constraints=constraints,
                page_id=page_id, time_unit_seconds=unit_seconds(args.time_unit))
    reports = []
    if plan is not None:
        with stages.stage("plan"), progress_bar(None, "evaluating the plan", quiet=args.quiet, unit="policy"):
            reports.append(evaluate_policy(problem, plan_policy(problem, *plan), key=key,
                                           name=f"plan:{args.plan}", **opts))
    for name in names:
        with stages.stage(name), progress_bar(None, f"evaluating {name}", quiet=args.quiet, unit="policy"):
            reports.append(evaluate_policy(problem, name, key=key, **opts))
    if args.figure:
        with stages.stage("figure"):
            _figure(args.figure, problem, reports, n)

    unit = args.time_unit[:-1]
    print(f"problem  {source}: {n} pages, {int(np.sum(comp))} complete, bandwidth {bandwidth:g} crawls per {unit}"
          + ("; revisit bounds" if bounds is not None else "") + ("; host caps" if caps is not None else ""))
    for line in _LEGEND:
        print(f"cost     {line}")
    head = ("policy", "method", "crawls/unit", "Poisson harm.", "gap", "Poisson bin.", "gap", "executed harm.", "gap",
            "executed bin.", "gap", "fresh req. (executed)")
    rows_out = []
    for r in reports:
        ex = r.executed_method is not None
        rows_out.append((r.policy, r.method + (f" / {r.executed_method}" if ex else ""),
                         _fmt(r.crawl_rate, r.crawl_rate_se, 5),
                         _fmt(r.harmonic_cost, r.harmonic_cost_se), _pct(r.harmonic_gap, r.optimal_harmonic),
                         _fmt(r.binary_cost, r.binary_cost_se), _pct(r.binary_gap, r.optimal_binary),
                         _fmt(r.executed_harmonic_cost, r.executed_harmonic_cost_se) if ex else "n/a",
                         _pct(r.executed_harmonic_gap, r.executed_reference_harmonic) if ex else "",
                         _fmt(r.executed_binary_cost, r.executed_binary_cost_se) if ex else "n/a",
                         _pct(r.executed_binary_gap, r.executed_reference_binary) if ex else "",
                         _fmt(r.executed_fresh_fraction, r.executed_fresh_fraction_se, 3) if ex else "n/a"))
        if r.monte_carlo is not None:
            mc = r.monte_carlo
            rows_out.append(("  (simulated)", "monte carlo (Poisson)", _fmt(mc["crawl_rate"], mc["crawl_rate_se"], 5),
                             _fmt(mc["harmonic_cost"], mc["harmonic_cost_se"]), "",
                             _fmt(mc["binary_cost"], mc["binary_cost_se"]), "", "", "", "", "", ""))
    widths = [max(len(str(row[i])) for row in [head] + rows_out) for i in range(len(head))]
    for row in [head] + rows_out:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip())
    for r in reports:
        print(f"optimum  {r.policy} at {r.crawl_rate:.6g} crawls per {unit}: Poisson optimum harmonic "
              f"{_fmt(r.optimal_harmonic)}, binary {_fmt(r.optimal_binary)}"
              + (f"; Poisson-optimal plans executed periodically: harmonic {_fmt(r.executed_reference_harmonic)}, "
                 f"binary {_fmt(r.executed_reference_binary)}" if r.executed_method is not None else ""))
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

    seconds = stages.seconds()
    print("time     " + ", ".join(f"{k} {v:.2f} s" for k, v in seconds.items()))
    summary = dict(source=source, num_pages=int(n), bandwidth=float(bandwidth), time_unit=args.time_unit,
                   dtype=str(jnp.dtype(dtype)), horizon=args.horizon, burn_in=args.burn_in, seeds=args.seeds,
                   costs={"poisson": _LEGEND[0].split(None, 1)[1], "executed": _LEGEND[1].split(None, 1)[1]},
                   results=[{k: clean(v) for k, v in r._asdict().items()} for r in reports],
                   seconds={k: round(v, 3) for k, v in seconds.items()})
    if args.figure:
        summary["figure"] = args.figure
    print(json.dumps(summary))
    return 0
