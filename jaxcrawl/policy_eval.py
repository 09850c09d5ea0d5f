r"""One policy, one report: what a crawl policy costs on given pages and how far it is from
the optimum at the same crawl volume (the library behind ``jaxcrawl evaluate``).

:func:`evaluate_policy` takes a :class:`~jaxcrawl.CrawlProblem` (true or estimated rates)
and a policy -- a plan's :class:`~jaxcrawl.Policy` (e.g. read from a plan file), an
optimal objective by registry name (:func:`jaxcrawl.objective_names`, solved at the
problem's bandwidth), a crawler's revisit rule (:data:`jaxcrawl.learners.HEURISTICS`,
with the crawler's defaults; ``"<name>@matched"``: matched to the bandwidth with the best
setting inside the crawler's documented ranges, :func:`~jaxcrawl.learners.match_in_range`,
its settings and whether the bandwidth was reached in ``notes``, costed by the long run
the match is made on, :func:`~jaxcrawl.learners.long_run`; ``"<name>@growth"``: the
growth factor raised to a power by :func:`~jaxcrawl.learners.match_budget`, **outside the
documented ranges** for the adaptive rules) or a learner (``"llc"``,
``"llc-forget"``: LambdaLearnAndCrawl, NeurIPS-19 Alg. 4, without and with forgetting) --
and returns a :class:`PolicyReport`:

Every policy gets two costs, each with its own reference at the policy's crawl volume:

* **Poisson** -- ``harmonic_cost``, ``binary_cost`` (page-averaged harmonic and binary
  staleness, NeurIPS-19 eq. 8 with Prop. 1 and 4; supplement eq. 12-13) and
  ``fresh_fraction`` (the fraction of requests, Poisson at rates ``importance``, served
  fresh, :math:`1-\sum_i\mu_i s_i/\sum_i\mu_i`): the papers' objective, every page's crawls
  a Poisson process at its rate.  Closed forms for a stationary policy (a plan or an
  optimal objective); a crawler's rule is costed at the per-page crawl rates it used
  (measured over the horizon, or from the long run of its fetch chains, standard errors
  over seeds); a learner by the closed-form cost of the policies it held.  Reference:
  ``optimal_harmonic`` / ``optimal_binary``, the optimum over Poisson schedules
  (LambdaCrawl, ``"harmonic"``; BinaryLambdaCrawl, ``"binary"``), and the gaps.
* **Executed** -- ``executed_*``: the policy as it runs.  A plan or an optimal objective as
  ``jaxcrawl schedule`` executes it: each page crawled periodically at its rate
  (:func:`jaxcrawl.timetable.periodic_harmonic_cost`, :func:`~jaxcrawl.timetable.periodic_binary_cost`),
  complete pages on their signals (plus a plan's ``periodic_rate``); the crawl-delay
  spacing of a timetable, which moves a few crawls later, is not in the closed form.  A
  crawler's rule as simulated (exact event-driven simulation, or its long run).
  Reference: ``executed_reference_*``, **the Poisson-optimal plans at the same volume
  executed periodically** -- not the optimum over periodic schedules, which is a
  different problem.  Learners are not costed this way (``None``).
* ``crawl_rate`` -- crawls used per unit time.

For a stationary policy ``monte_carlo=True`` adds the simulator's estimates
(:func:`jaxcrawl.simulate.evaluate`, with standard errors) next to the closed forms.
"""
from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ._src.checks import NonConvergenceError
from .core.objectives import binary_cost, harmonic_cost, objective, objective_names
from .core.problem import CrawlProblem, Policy
from .core.solve import HostCaps, solve
from .learners import (
    HEURISTICS,
    HeuristicParams,
    LLCParams,
    heuristic,
    lambda_learn_and_crawl,
    llc_settings,
    long_run,
    match_budget,
    match_in_range,
    run_learner,
)
from .simulate import evaluate as simulate_evaluate
from .timetable import periodic_binary_cost, periodic_harmonic_cost

__all__ = ["PolicyReport", "Constraints", "plan_policy", "evaluate_policy", "optimal_costs"]

_LEARNERS = ("llc", "llc-forget")


class PolicyReport(NamedTuple):
    """What :func:`evaluate_policy` reports (plain Python floats; ``*_se`` is ``None`` for
    a closed form).

    Two costs, each against its own reference at the policy's crawl volume:

    * **Poisson** (``harmonic_cost``, ``binary_cost``, ``fresh_fraction``): the papers'
      objective, every page's crawls a Poisson process at its rate (complete pages crawled
      on their signals); the reference ``optimal_*`` is the optimum over such schedules
      (LambdaCrawl, BinaryLambdaCrawl; under the constraints when given).  A crawler's rule
      or a learner is costed at the per-page crawl rates it used.
    * **Executed** (``executed_*``): the policy as it runs -- a plan as ``jaxcrawl schedule``
      executes it (each page crawled periodically at its planned rate, a complete page on
      its signals plus its ``periodic_rate``), a crawler's rule as simulated; the reference
      ``executed_reference_*`` is **the Poisson-optimal plan at the same volume executed
      periodically** (not the optimum over periodic schedules, a different problem).

    Attributes:
      policy: the policy's name.
      method: how the Poisson figures were obtained: ``"closed form"``, ``"monte carlo"``
        (a rule's measured per-page rates, or a learner's held policies) or ``"long run"``
        (a matched rule's per-page rates from its fetch chains,
        :func:`~jaxcrawl.learners.long_run`).
      harmonic_cost, harmonic_cost_se, binary_cost, binary_cost_se, fresh_fraction,
        fresh_fraction_se: the Poisson costs (module docstring).
      crawl_rate, crawl_rate_se: crawls used per unit time.
      optimal_harmonic, optimal_binary: the Poisson optima at ``crawl_rate``.
      harmonic_gap, binary_gap: Poisson cost minus optimum (absolute).
      monte_carlo: for a closed-form row with ``monte_carlo=True``, the simulator's
        ``dict`` of the Poisson figures with standard errors; else ``None``.
      notes: extra facts (a matched heuristic's settings, whether they are inside the
        crawler's documented ranges and reach the bandwidth).
      executed_method: how the executed figures were obtained (``"periodic closed
        form"``, ``"simulated rule"``, ``"long run"``), ``None`` when not costed (learners).
      executed_harmonic_cost, ..., executed_fresh_fraction_se: the executed costs.
      executed_reference_harmonic, executed_reference_binary: the Poisson-optimal plans
        (LambdaCrawl, BinaryLambdaCrawl) at ``crawl_rate``, executed periodically.
      executed_harmonic_gap, executed_binary_gap: executed cost minus that reference.
    """

    policy: str
    method: str
    harmonic_cost: float
    harmonic_cost_se: float | None
    binary_cost: float
    binary_cost_se: float | None
    fresh_fraction: float
    fresh_fraction_se: float | None
    crawl_rate: float
    crawl_rate_se: float | None
    optimal_harmonic: float
    optimal_binary: float
    harmonic_gap: float
    binary_gap: float
    monte_carlo: dict | None = None
    notes: dict | None = None
    executed_method: str | None = None
    executed_harmonic_cost: float | None = None
    executed_harmonic_cost_se: float | None = None
    executed_binary_cost: float | None = None
    executed_binary_cost_se: float | None = None
    executed_fresh_fraction: float | None = None
    executed_fresh_fraction_se: float | None = None
    executed_reference_harmonic: float | None = None
    executed_reference_binary: float | None = None
    executed_harmonic_gap: float | None = None
    executed_binary_gap: float | None = None


def _policy_names() -> tuple[str, ...]:
    """Every policy name :func:`evaluate_policy` accepts (``"<heuristic>@matched"`` and
    ``"@growth"`` too)."""
    return tuple(objective_names()) + tuple(HEURISTICS) + _LEARNERS


def plan_policy(problem: CrawlProblem, rate: Any, prob: Any, periodic_rate: Any = None) -> Policy:
    """The :class:`~jaxcrawl.Policy` of a plan (``rate``, ``prob``, ``periodic_rate`` per page,
    as ``jaxcrawl solve`` writes it): pages with ``prob > 0`` are crawled on change signals
    (they must be ``complete``) at ``prob * change_rate`` under the problem's rates, plus
    their ``periodic_rate`` (a page pinned at a revisit floor above its change rate, ``prob``
    = 1: its crawls beside the signals; ``None``: none); the others are crawled at ``rate``.
    The policy's ``rate`` is each page's total, so the plan's volume is ``sum(rate)``; the
    costs of a signal page take ``min(rate / change_rate, 1)`` as its signal probability
    (exact for ``prob`` = 1, where every change is crawled and the cost is 0)."""
    rate = np.asarray(rate, np.float64)
    prob = np.asarray(prob, np.float64)
    periodic = np.zeros_like(rate) if periodic_rate is None else np.asarray(periodic_rate, np.float64)
    if rate.shape != np.shape(problem.change_rate) or prob.shape != rate.shape or periodic.shape != rate.shape:
        raise ValueError(f"the plan has {rate.shape} rates for {np.shape(problem.change_rate)} pages")
    if np.any(~np.isfinite(periodic)) or np.any(periodic < 0):
        raise ValueError("the plan's periodic_rate must be finite and >= 0")
    signal = prob > 0
    comp = np.asarray(problem.complete) != 0
    if np.any(signal & ~comp):
        i = int(np.flatnonzero(signal & ~comp)[0])
        raise ValueError(f"the plan crawls page {i} on change signals (prob {prob[i]}) but the page table "
                         "does not mark it complete")
    if np.any(~np.isfinite(rate)) or np.any(rate < 0):
        raise ValueError("the plan's rates must be finite and >= 0")
    dtype = problem.change_rate.dtype
    lam = np.asarray(problem.change_rate, np.float64)
    executed = np.where(signal, prob * lam + periodic, rate)
    return Policy(jnp.asarray(executed, dtype), jnp.asarray(np.where(signal, prob, 0.0), dtype),
                  jnp.asarray(signal), jnp.asarray(jnp.nan, dtype),
                  jnp.asarray(executed.sum() - float(problem.bandwidth), dtype), jnp.asarray(0, jnp.int32),
                  jnp.asarray(True))


def _fresh(problem: CrawlProblem, per_page_binary):
    """The fraction of requests served fresh from the per-page binary costs μ_i s_i."""
    mu = jnp.broadcast_to(problem.importance, per_page_binary.shape)
    return 1.0 - jnp.sum(per_page_binary, -1) / jnp.sum(mu, -1)


@jax.jit
def _closed_forms(problem: CrawlProblem, policy: Policy):
    """Poisson ``(harmonic, binary, fresh)``, the volume, and the periodic execution's
    ``(harmonic, binary, fresh)``."""
    per_page = binary_cost(problem, policy, per_page=True)  # μ_i s_i
    periodic = periodic_binary_cost(problem, policy, per_page=True)
    return (harmonic_cost(problem, policy), jnp.mean(per_page), _fresh(problem, per_page), jnp.sum(policy.rate),
            periodic_harmonic_cost(problem, policy), jnp.mean(periodic), _fresh(problem, periodic))


@jax.jit
def _poisson_of_rates(problem: CrawlProblem, rates):
    """Poisson ``(harmonic, binary, fresh)`` of per-page crawl rates ``(..., n)`` with no page
    crawled on signals (a crawler's rule ignores them)."""
    q = problem.replace(complete=jnp.zeros_like(problem.complete))
    per_page = binary_cost(q, rates, per_page=True)
    return harmonic_cost(q, rates), jnp.mean(per_page, -1), _fresh(q, per_page)


@jax.jit
def _optima(problem: CrawlProblem, volume):
    q = problem.replace(bandwidth=jnp.asarray(volume, problem.change_rate.dtype))
    h = solve(q, "harmonic")
    b = solve(q, "binary")
    return (harmonic_cost(q, h), binary_cost(q, b), periodic_harmonic_cost(q, h), periodic_binary_cost(q, b),
            h.converged & b.converged)


class Constraints(NamedTuple):
    """Per-page revisit bounds (rates; ``None``: none) and per-host caps (``host_cap``
    ``(H,)`` indexed by ``host_id`` ``(n,)``, ``-1`` for no host) that the optimum honours
    and a policy is checked against."""

    min_rate: Any = None
    max_rate: Any = None
    host_id: Any = None
    host_cap: Any = None

    @property
    def any(self) -> bool:
        return any(v is not None for v in self)


def _constrained_solve(problem: CrawlProblem, utility, c: Constraints) -> Policy:
    """The optimum of ``utility`` under ``c`` (a plain solve when ``c`` is empty)."""
    caps = None if c.host_cap is None else HostCaps(c.host_id, c.host_cap)
    return solve(problem, utility, caps=caps, bounds=(c.min_rate, c.max_rate))


def _violations(rate: Any, c: Constraints, page_id: Any = None) -> dict:
    """What a policy's per-page ``rate`` breaks of ``c`` (to 8 eps of float32 relative): the
    number of pages below ``min_rate`` / above ``max_rate`` and of hosts over their cap,
    with the first of each; ``{}`` when it keeps every constraint."""
    rate = np.asarray(rate, np.float64)
    ids = np.arange(rate.size) if page_id is None else np.asarray(page_id)
    slack = 8 * float(np.finfo(np.float32).eps)
    out = {}
    for label, bound, bad in (("below_min_rate", c.min_rate, lambda r, b: r < b * (1 - slack)),
                              ("above_max_rate", c.max_rate, lambda r, b: r > b * (1 + slack))):
        if bound is None:
            continue
        b = np.broadcast_to(np.asarray(bound, np.float64), rate.shape)
        hit = bad(rate, b)
        if hit.any():
            i = int(np.flatnonzero(hit)[0])
            first = ids[i].item() if hasattr(ids[i], "item") else ids[i]
            out[f"pages_{label}"] = int(hit.sum())
            out[f"first_page_{label}"] = f"{first!r}: rate {rate[i]:.6g}, bound {b[i]:.6g}"
    if c.host_cap is not None:
        host = np.asarray(c.host_id, np.int64)
        cap = np.asarray(c.host_cap, np.float64)
        has = host >= 0
        total = np.bincount(host[has], weights=rate[has], minlength=cap.size)
        over = total > cap * (1 + slack)
        if over.any():
            h = int(np.argmax(np.where(over, total / cap, -np.inf)))
            out["hosts_over_cap"] = int(over.sum())
            out["worst_host"] = f"#{h}: total rate {total[h]:.6g}, cap {cap[h]:.6g}"
    return out


def optimal_costs(problem: CrawlProblem, volume: float, constraints: Constraints | None = None) -> tuple[float, float]:
    """``(harmonic, binary)``: the optimal page-averaged costs at bandwidth ``volume``
    (LambdaCrawl, NeurIPS-19 Alg. 3; BinaryLambdaCrawl / Azar et al.), under
    ``constraints`` (revisit bounds, host caps) when given.  Raises
    :class:`jaxcrawl.NonConvergenceError` if a solve did not converge."""
    return _references(problem, volume, constraints)[:2]


def _references(problem: CrawlProblem, volume: float, constraints: Constraints | None = None) -> tuple[float, ...]:
    """``(harmonic, binary, periodic harmonic, periodic binary)``: :func:`optimal_costs` and
    the same optimal plans executed periodically (:func:`jaxcrawl.timetable.periodic_harmonic_cost`
    of LambdaCrawl's plan, :func:`~jaxcrawl.timetable.periodic_binary_cost` of
    BinaryLambdaCrawl's)."""
    if constraints is not None and constraints.any:
        q = problem.replace(bandwidth=jnp.asarray(float(volume), problem.change_rate.dtype))
        h_pol, b_pol = (_constrained_solve(q, u, constraints) for u in ("harmonic", "binary"))
        ok = bool(np.all(np.asarray(h_pol.converged)) and np.all(np.asarray(b_pol.converged)))
        if not ok:
            raise NonConvergenceError(f"the constrained optimal solve at crawl volume {volume:g} did not converge")
        return (float(harmonic_cost(q, h_pol)), float(binary_cost(q, b_pol)), float(periodic_harmonic_cost(q, h_pol)),
                float(periodic_binary_cost(q, b_pol)))
    *costs, ok = _optima(problem, float(volume))
    if not bool(ok):
        raise NonConvergenceError(f"the optimal solve at crawl volume {volume:g} did not converge")
    return tuple(float(c) for c in costs)


def _report(name, method, poisson, vol, volse, problem, mc=None, notes=None, constraints=None,
            executed=None, executed_method=None) -> PolicyReport:
    """A row: ``poisson`` and ``executed`` are ``(h, h_se, b, b_se, fresh, fresh_se)``."""
    oh, ob, eh, eb = _references(problem, vol, constraints)
    h, hse, b, bse, fr, frse = poisson
    row = PolicyReport(name, method, float(h), hse, float(b), bse, float(fr), frse, float(vol), volse,
                       oh, ob, float(h) - oh, float(b) - ob, mc, notes)
    if executed is None:
        return row
    xh, xhse, xb, xbse, xfr, xfrse = executed
    return row._replace(executed_method=executed_method, executed_harmonic_cost=float(xh),
                        executed_harmonic_cost_se=xhse, executed_binary_cost=float(xb), executed_binary_cost_se=xbse,
                        executed_fresh_fraction=float(xfr), executed_fresh_fraction_se=xfrse,
                        executed_reference_harmonic=eh, executed_reference_binary=eb,
                        executed_harmonic_gap=float(xh) - eh, executed_binary_gap=float(xb) - eb)


def _mean_se(x: np.ndarray) -> tuple[float, float]:
    """Mean over seeds of per-seed means, and its standard error across seeds."""
    x = np.asarray(x, np.float64)
    with np.errstate(invalid="ignore"):  # inf - inf: an infinite cost has no standard error (nan)
        return float(x.mean()), float(x.std(ddof=1) / math.sqrt(x.shape[0]))


def evaluate_policy(problem: CrawlProblem, policy: str | Policy, *, key: jax.Array | None = None,
                    horizon: float = 60.0, burn_in: float = 120.0, num_seeds: int = 4, monte_carlo: bool = True,
                    name: str | None = None, half_life: float = 7.0,
                    constraints: Constraints | None = None, page_id: Any = None,
                    time_unit_seconds: float = 86400.0) -> PolicyReport:
    """Evaluate one policy on ``problem`` (module docstring).

    Args:
      problem: the pages (concrete values); its bandwidth is used to solve the named
        optimal objectives, to match ``"<heuristic>@matched"`` / ``"@growth"`` and by the
        learners.
      policy: a :class:`~jaxcrawl.Policy` (e.g. :func:`plan_policy`) or a name of
        the names of the module docstring (or ``"<heuristic>@matched"``, ``"@growth"``).
      key: PRNG key of the Monte Carlo (default ``PRNGKey(0)``).
      horizon: measured time per seed (Monte Carlo; whole days).
      burn_in: simulated time before the measurement for heuristics and learners (Nutch
        starts every page at 30 days and needs about 100 days to adapt).
      num_seeds: independent seeds / replicates (>= 2, for standard errors).
      monte_carlo: add the simulator's estimates to a closed-form row.
      name: the row's name (default: the policy's).
      half_life: the forgetting half-life of ``"llc-forget"``.
      constraints: revisit bounds and host caps (:class:`Constraints`): a named optimal
        objective is solved under them, the optimum at the policy's volume is the
        constrained one, and a stationary policy's rates are checked against them
        (``notes["violations"]``: what it breaks, ``{}`` when nothing; Monte-Carlo
        policies, which have no per-page rates, are not checked -- their notes say so).
      page_id: page ids naming the first violating page (default: indices).
      time_unit_seconds: the problem's time unit in seconds (the crawlers' settings are in
        seconds or minutes; default a day).

    Returns:
      :class:`PolicyReport`.
    """
    key = jax.random.PRNGKey(0) if key is None else key
    if not (isinstance(num_seeds, int) and num_seeds >= 2):
        raise ValueError(f"num_seeds must be an int >= 2 (standard errors need two), got {num_seeds!r}")
    days = int(round(horizon))
    warm = int(round(burn_in))
    if days < 1 or abs(days - horizon) > 1e-9 or warm < 0 or abs(warm - burn_in) > 1e-9:
        raise ValueError(f"horizon must be a positive and burn_in a nonnegative whole number of time units; got "
                         f"horizon={horizon!r}, burn_in={burn_in!r}")
    c = constraints if constraints is not None and constraints.any else None
    if isinstance(policy, Policy):
        return _stationary(problem, policy, name or "plan", key, days, num_seeds, monte_carlo, c, page_id)
    if not isinstance(policy, str):
        raise TypeError("policy must be a jaxcrawl.Policy or a policy name")
    base, _, suffix = policy.partition("@")
    if base in objective_names() and not suffix:
        utility = objective(base)
        pol = (jax.jit(lambda pr: solve(pr, utility))(problem) if c is None
               else _constrained_solve(problem, utility, c))
        if not bool(np.all(np.asarray(pol.converged))):
                    raise NonConvergenceError(f"the {base!r} solve did not converge")
        return _stationary(problem, pol, name or policy, key, days, num_seeds, monte_carlo, c, page_id)
    if base in HEURISTICS and suffix in ("", "matched", "growth"):
        rep = _heuristic(problem, base, suffix, name or policy, key, days, warm, num_seeds, c,
                         float(time_unit_seconds))
    elif base in _LEARNERS and not suffix:
        rep = _learner(problem, base, name or policy, key, days, warm, num_seeds, half_life, c)
    else:
        rep = None
    if rep is not None:
        if c is not None:
            rep = rep._replace(notes=dict(rep.notes or {}, violations="not checked (a Monte-Carlo policy has no "
                                                                        "per-page rates); the optimum is constrained"))
        return rep
    raise ValueError(f"unknown policy {policy!r}; use one of {', '.join(_policy_names())} "
                     "(a heuristic may end in '@matched' or '@growth')")


def _stationary(problem, policy, name, key, days, num_seeds, monte_carlo, c=None, page_id=None) -> PolicyReport:
    h, b, fr, vol, xh, xb, xfr = (float(v) for v in _closed_forms(problem, policy))
    mc = None
    if monte_carlo:
        ev = simulate_evaluate(key, problem, policy, horizon=float(days), num_replicates=num_seeds)
        mc = {f: float(getattr(ev, f)) for f in ("harmonic_cost", "harmonic_cost_se", "binary_cost",
                                                    "binary_cost_se", "fresh_fraction", "fresh_fraction_se",
                                                    "crawl_rate", "crawl_rate_se")}
        mc["overflow"] = int(np.sum(np.asarray(ev.overflow)))
    notes = None if c is None else {"violations": _violations(policy.rate, c, page_id)}
    return _report(name, "closed form", (h, None, b, None, fr, None), vol, None, problem, mc, notes, c,
                   (xh, None, xb, None, xfr, None), "periodic closed form")


#: Pages of the even sample on which ``"<rule>@matched"`` searches the documented settings
#: (:func:`~jaxcrawl.learners.match_in_range`'s ``sample_pages``); the chosen setting is then
#: run on every page.
MATCH_SAMPLE_PAGES = 4096


def _seed_figures(*arrays) -> list[tuple[float, float]]:
    return [_mean_se(np.asarray(a)) for a in arrays]


def _heuristic(problem, base, mode, name, key, days, warm, num_seeds, c=None, tu=86400.0) -> PolicyReport:
    settings: dict = {"time_unit_seconds": tu}
    params = HeuristicParams()
    notes = {}
    key_match, key_run = jax.random.split(key)
    if mode == "matched":
        bw = float(np.asarray(problem.bandwidth))
        m = match_in_range(key_match, base, problem, [bw], shrink_points=6, scale_points=16, burn_in_fetches=32,
                           num_fetches=128, sample_pages=MATCH_SAMPLE_PAGES, **settings)
        found = {k: float(np.asarray(v).reshape(-1)[0]) for k, v in m.settings.items()}
        settings.update(found)
        notes = dict(matching="documented range", in_range=True, reached=bool(np.asarray(m.reached)[0]),
                     ranges=m.ranges, **found,
                     scaled_defaults_reached=bool(np.asarray(m.scaled_reached)[0]),
                     scaled_defaults_interval_scale=float(np.asarray(m.interval_scale)[0]))
        # the long run the match was made on (fetch chains; num_seeds independent replicates), every page
        lam = jnp.asarray(problem.change_rate)
        reps = jnp.broadcast_to(lam, (num_seeds,) + lam.shape)
        mu = jnp.broadcast_to(jnp.asarray(problem.importance, lam.dtype), reps.shape)
        lr = long_run(key_run, base, CrawlProblem(mu, reps, problem.bandwidth), burn_in_fetches=64,
                      num_fetches=128, per_page=True, **settings)
        mu_total = jnp.sum(jnp.asarray(problem.importance, lam.dtype) * jnp.ones_like(lam))
        executed = _seed_figures(jnp.mean(lr.harmonic_cost, -1), jnp.mean(lr.binary_cost, -1),
                                 1.0 - jnp.sum(lr.binary_cost, -1) / mu_total)
        poisson = _seed_figures(*_poisson_of_rates(problem, lr.crawl_rate))
        (vol, volse), = _seed_figures(jnp.sum(lr.crawl_rate, -1))
        return _report(name, "long run", _flat(poisson), vol, volse, problem, notes=notes, constraints=c,
                       executed=_flat(executed), executed_method="long run")
    learner = heuristic(base, **settings)
    if mode == "growth":
        m = match_budget(key_match, learner, problem, burn_in=warm, num_epochs=days, num_seeds=num_seeds)
        params = m.params
        notes = dict(matching="growth power (outside the documented range)", in_range=base == "nutch-default",
                     budget_scale=float(m.budget_scale), raw_crawl_rate=float(m.raw_crawl_rate),
                     raw_crawl_rate_se=float(m.raw_crawl_rate_se), matched=bool(m.converged))

    @jax.jit
    def run(keys):
        def one(k):
            # run_learner's steps (key fold_in(k, i)), split at the burn-in to count each page's measured crawls
            def body(st, i):
                return learner.step(jax.random.fold_in(k, i), st, problem)

            st_warm, _ = jax.lax.scan(body, learner.init(problem, params), jnp.arange(warm))
            st, info = jax.lax.scan(body, st_warm, jnp.arange(warm, warm + days))
            dtype = st.time.dtype
            rates = (st.crawls - st_warm.crawls).astype(dtype) / (st.time - st_warm.time)
            return (jnp.mean(info.harmonic_cost), jnp.mean(info.binary_cost), jnp.mean(info.fresh_fraction),
                    jnp.mean(info.num_crawls.astype(dtype)), jnp.all(info.converged), jnp.sum(rates == 0),
                    *_poisson_of_rates(problem, rates))
        return jax.vmap(one)(keys)

    h, b, fr, vol, ok, idle, ph, pb, pfr = run(jax.random.split(key_run, num_seeds))
    if not bool(np.all(np.asarray(ok))):
        raise ValueError(f"{base}: the event loop hit its iteration cap (raise max_events_per_epoch)")
    idle = int(np.max(np.asarray(idle)))
    if idle:  # a page not crawled in the measurement has rate 0: an infinite Poisson harmonic cost
        notes = dict(notes, pages_not_crawled_in_horizon=idle)
    (vol, volse), = _seed_figures(vol)
    return _report(name, "monte carlo", _flat(_seed_figures(ph, pb, pfr)), vol, volse, problem,
                   notes=notes or None, constraints=c, executed=_flat(_seed_figures(h, b, fr)),
                   executed_method="simulated rule")


def _flat(pairs) -> tuple:
    return tuple(v for pair in pairs for v in pair)


def _learner(problem, base, name, key, days, warm, num_seeds, half_life, c=None) -> PolicyReport:
    settings = llc_settings(problem, history_epochs=max(21, min(warm + days, 64)))
    forgetting = base == "llc-forget"
    learner = lambda_learn_and_crawl(**settings, forgetting=forgetting)
    params = LLCParams(half_life=half_life if forgetting else float("inf"))
    mu_total = float(np.sum(np.asarray(problem.importance)))

    @jax.jit
    def run(keys):
        def one(k):
            st, info = run_learner(k, learner, problem, warm + days, params)
            sl = slice(warm, None)
            per_page_b = info.binary_cost[sl] * problem.change_rate.shape[-1]
            return (jnp.mean(info.harmonic_cost[sl]), jnp.mean(info.binary_cost[sl]),
                    1.0 - jnp.mean(per_page_b) / mu_total, jnp.mean(info.num_crawls[sl].astype(st.estimate.dtype)),
                    jnp.all(info.converged), jnp.sum(info.overflow))
        return jax.vmap(one)(keys)

    h, b, fr, vol, ok, over = run(jax.random.split(key, num_seeds))
    if not bool(np.all(np.asarray(ok))):
        raise NonConvergenceError(f"{base}: an inner solve did not converge")
    (h, hse), (b, bse), (fr, frse), (vol, volse) = (_mean_se(x) for x in (h, b, fr, vol))
    notes = dict(overflow=int(np.sum(np.asarray(over))),
                 executed="not costed: the learner's plan changes every epoch (its Poisson cost is the closed form "
                          "of the plans it held)")
    if forgetting:
        notes["half_life"] = half_life
    return _report(name, "monte carlo", (h, hse, b, bse, fr, frse), vol, volse, problem, notes=notes, constraints=c)
