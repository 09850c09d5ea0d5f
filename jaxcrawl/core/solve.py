r"""The solve: one entry for every objective, every kind of page source, host caps and bounds.

Every optimal-rate problem of the papers maximises a separable concave objective under the
crawl budget, per-page rate bounds and (optionally) per-host caps,

.. math::

   \max_x \sum_i u_i(x_i)\quad\text{s.t.}\quad \sum_i x_i = R,\qquad
   \ell_i\le x_i\le h_i,\qquad \sum_{i\in h} x_i \le C_h,

whose KKT conditions give every page's rate as a function of one dual :math:`\nu` (plus
one multiplier :math:`\kappa_h\ge0` per binding host):
:math:`x_i=\mathrm{clip}(\varphi_i(\nu+\kappa_{h(i)}),\ell_i,h_i)`,
:math:`\varphi_i=(u_i')^{-1}`.  :func:`solve` finds the duals by a safeguarded Newton
iteration (one pass over the pages a step), re-solves on the dual's log-gap where the
plain dual cannot resolve the answer (a bandwidth far below the change rates), reports
whether it converged and the residual before the closing correction, and differentiates
exactly by the implicit function theorem.  The paper-named solvers below are one-line
conveniences over it.
"""
from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .._src import budget as _budget
from .._src import pipeline as _pipeline
from .._src.checks import check_precision, is_concrete, raise_unless_converged
from . import objectives as _objectives
from .objectives import Objective, binary, delay, harmonic, harmonic_approx, uniform
from .problem import CrawlProblem, Policy, make_policy

__all__ = [
    "HostCaps",
    "solve",
    "lambda_crawl",
    "lambda_crawl_approx",
    "binary_lambda_crawl",
    "uniform_interval_crawl",
    "accumulated_delay_crawl",
    "uniform_crawl",
    "change_rate_crawl",
    "Allocation",
    "allocate",
]

PageSource = _pipeline.PageSource


class HostCaps(NamedTuple):
    """Per-host politeness caps: ``sum of the rates of host h's pages <= cap[h]``
    (Kolobov et al., SIGIR-19).

    Attributes:
      host_id: ``(n,)`` int host index of every page in ``[0, H)``, ``-1`` for a page with
        no host constraint.
      cap: ``(H,)`` (or ``(..., H)`` with the problem's batch axes) cap on each host's total
        crawl rate, > 0; ``inf`` = uncapped.
    """

    host_id: Any
    cap: Any


def solve(pages: CrawlProblem | PageSource, objective: str | Objective = "harmonic", *,
          caps: HostCaps | tuple | None = None, bounds: tuple | None = None, max_steps: int = 100,
          rtol: float | None = None, adjoint: str = "implicit", throw: bool = False) -> Policy:
    r"""The optimal crawl policy of an objective: one dual root-find over the pages.

    Maximises :math:`\sum_i u_i(x_i)` s.t. :math:`\sum_i x_i = R`, the per-page ``bounds``
    (intersected with the objective's own) and the host ``caps``.

    Args:
      pages: a :class:`~jaxcrawl.CrawlProblem` (leading batch axes are vmapped; its arrays
        may be sharded over a mesh), or a page source of :mod:`jaxcrawl.parallel` (a table
        streamed from disk, rows spread over processes).
      objective: a registry name (``"harmonic"``, ``"harmonic-approx"``, ``"binary"``,
        ``"binary-epsilon"``, ``"delay"``, ``"uniform"``) or an :class:`~jaxcrawl.Objective`
        (``jaxcrawl.binary(epsilon=0.2)``, your own).
      caps: :class:`HostCaps` ``(host_id, cap)``: per-host caps (separable objectives).
      bounds: ``(lower, upper)`` per-page rate bounds (scalars or arrays broadcast to the
        pages; ``None`` for either: no bound), e.g. :func:`jaxcrawl.rate_bounds` of revisit
        intervals.  The optimum is exact under them:
        :math:`x_i=\mathrm{clip}(\varphi_i(\nu),\ell_i,h_i)`.
      max_steps: cap on root-finding iterations (each one pass over the pages).
      rtol: stop when the budget residual is within ``rtol`` of the bandwidth (default
        ``4 eps^0.75`` of the dtype); the closing correction then makes it exact to rounding.
      adjoint: ``"implicit"``: derivatives by the implicit function theorem (one extra pass,
        no unrolling); ``"unrolled"``: exactly ``max_steps`` iterations that autodiff goes
        through (a baseline; no host caps).  Paths without derivatives (streamed tables)
        refuse ``"unrolled"``.
      throw: raise :class:`~jaxcrawl.NonConvergenceError` (inside ``jit`` too) when the solve
        did not converge.

    Returns:
      :class:`~jaxcrawl.Policy` with ``converged``, the pre-correction ``residual`` and, with
      caps, ``host_dual`` (each host's :math:`\kappa_h`, 0 where its cap does not bind).

    Raises:
      ValueError: (eagerly) bad options, infeasible bounds or caps, or an option the page
        source cannot honour (named).
    """
    obj = _objectives.objective(objective)
    opts = _pipeline.check_options(max_steps, rtol, adjoint, throw)
    if caps is not None:
        if not isinstance(caps, tuple) or len(caps) != 2:
            raise TypeError("caps must be jaxcrawl.HostCaps(host_id, cap)")
        caps = HostCaps(*caps)
        if not obj.separable or obj.marginal is None:
            raise ValueError(f"caps: objective {obj.name!r} couples pages (not separable), so it has no "
                             "host-capped form")
        if opts.adjoint == "unrolled":
            raise ValueError("adjoint='unrolled' has no host-capped form (caps given); use 'implicit'")
    if bounds is None:
        bounds = (None, None)
    if not isinstance(bounds, tuple | list) or len(bounds) != 2:
        raise TypeError("bounds must be a (lower, upper) pair of rate bounds (None for no bound)")
    if isinstance(pages, PageSource):
        return pages.solve(obj, caps, tuple(bounds), opts)
    if not isinstance(pages, CrawlProblem):
        raise TypeError(f"pages must be a jaxcrawl.CrawlProblem or a page source of jaxcrawl.parallel; "
                        f"got {type(pages).__name__}")
    check_precision(pages.dtype, "the problem")  # also one built by tree_map / tree_unflatten
    return _solve_problem(pages, obj, caps, tuple(bounds), opts)


def check_solvable(problem: CrawlProblem, objective: str | Objective = "harmonic", *,
                   caps: HostCaps | tuple | None = None, bounds: tuple | None = None,
                   page_id: ArrayLike | None = None) -> None:
    """The feasibility checks :func:`solve` runs eagerly on a concrete problem, on their own:
    for a caller that then solves under ``jax.jit`` (where they cannot run, and an infeasible
    problem would only come back not converged), and with ``page_id`` (the pages' ids) so
    that the messages name pages and hosts (a host by its first page's URL host) rather
    than indices.

    Raises:
      ValueError: a page whose lower bound (its revisit floor, or the objective's own floor,
        e.g. binary-epsilon's) is above its upper bound; a bandwidth outside what the bounds
        and caps allow; a cap below the sum of its pages' floors -- with the hint to solve in
        float64 when the refusal is within float32 rounding.
    """
    obj = _objectives.objective(objective)
    if caps is not None:
        caps = HostCaps(*caps)
    pages, lower, upper, host, cap = _prepare(problem, caps, tuple(bounds or (None, None)))
    if not is_concrete(pages, lower, upper, cap):
        raise ValueError("check_solvable needs concrete arrays (call it outside jit)")
    _check_limits(obj, pages, lower, upper, host, cap, page_id=page_id)


def _prepare(problem: CrawlProblem, caps, bounds):
    """The solve's inputs in the problem's dtype: ``(pages, lower, upper, host, cap)``."""
    dtype = problem.dtype
    shape = problem.importance.shape
    batch = shape[:-1]
    lower, upper = (None if b is None else jnp.broadcast_to(jnp.asarray(b, dtype), shape) for b in bounds)
    host = cap = None
    if caps is not None:
        host = jnp.asarray(caps.host_id)
        cap = jnp.asarray(caps.cap)
        cap = cap.astype(dtype) if jnp.issubdtype(cap.dtype, jnp.floating) else cap.astype(dtype)
        if is_concrete(host, cap):
            _pipeline.check_caps(host, cap, shape[-1])
        host = host.astype(jnp.int32)
        if cap.shape[-1] == 0:  # one uncapped dummy host keeps the gathers well-formed
            cap = jnp.full(cap.shape[:-1] + (1,), jnp.inf, dtype)
        cap = jnp.broadcast_to(cap, batch + cap.shape[-1:])
    pages = _pipeline.Pages(problem.importance, problem.change_rate,
                            jnp.broadcast_to(jnp.asarray(problem.bandwidth, dtype), batch), problem.complete)
    return pages, lower, upper, host, cap


def _solve_problem(problem: CrawlProblem, obj: Objective, caps, bounds, opts) -> Policy:
    shape = problem.importance.shape
    batch = shape[:-1]
    pages, lower, upper, host, cap = _prepare(problem, caps, bounds)
    if is_concrete(pages, lower, upper, cap):
        _check_limits(obj, pages, lower, upper, host, cap)

    def one(p, lo, hi, c):
        return _pipeline.solve_pages(obj, p, lo, hi, host, c, opts)

    if batch:
        flat = lambda a, tail: None if a is None else a.reshape((-1,) + tail)  # noqa: E731
        fp = jax.tree_util.tree_map(lambda a: a.reshape((-1,) + a.shape[len(batch):]), pages)
        fc = None if cap is None else flat(cap, cap.shape[-1:])
        res = jax.vmap(one)(fp, flat(lower, shape[-1:]), flat(upper, shape[-1:]), fc)
        res = jax.tree_util.tree_map(lambda a: a.reshape(batch + a.shape[1:]), res)
    else:
        res = one(pages, lower, upper, cap)
    host_dual = res.host_dual
    if caps is not None and np.shape(caps.cap)[-1] == 0:
        host_dual = host_dual[..., :0]
    return Policy(rate=res.rate, prob=res.prob, on_signal=res.on_signal, dual=res.dual, residual=res.residual,
                  num_steps=res.num_steps, converged=res.converged, host_dual=host_dual)


def _check_limits(obj, pages, lower, upper, host, cap, *, page_id=None) -> None:
    """Eager feasibility checks of every problem of a (possibly batched) concrete input: the
    limits of all rows at once (row by row for an objective whose parameters do not batch);
    ``page_id`` names the pages and hosts in the messages."""
    dtype = pages.importance.dtype
    shape = pages.importance.shape
    n = shape[-1]
    rows = int(np.prod(shape[:-1], dtype=np.int64))
    bw = jnp.asarray(pages.bandwidth, dtype)[..., None]
    try:
        params = obj.params(pages._replace(bandwidth=bw))
        lo, hi = _pipeline.page_limits(obj, params, bw, n, dtype, lower, upper, shape)
    except Exception:  # noqa: BLE001 -- an objective whose params reduce over the pages: one row at a time
        flat = [np.asarray(a).reshape((rows,) + np.shape(a)[len(shape) - 1:]) for a in pages]
        lims = [_pipeline.page_limits(obj, obj.params(_pipeline.Pages(*(jnp.asarray(v[i]) for v in flat))),
                                      jnp.asarray(flat[2][i], dtype), n, dtype,
                                      None if lower is None else np.asarray(lower).reshape(rows, n)[i],
                                      None if upper is None else np.asarray(upper).reshape(rows, n)[i], (n,))
                for i in range(rows)]
        lo, hi = np.stack([a for a, _ in lims]), np.stack([b for _, b in lims])
    lo = np.asarray(lo, np.float64).reshape(rows, n)
    hi = np.asarray(hi, np.float64).reshape(rows, n)
    budgets = np.broadcast_to(np.asarray(pages.bandwidth, np.float64), shape[:-1]).reshape(rows)
    if host is None:
        bad = (budgets < lo.sum(-1) * (1 - 1e-12)) | (budgets > hi.sum(-1) * (1 + 1e-12)) | np.any(lo > hi, -1) \
            | ~np.isfinite(budgets)
        rows_to_check = np.flatnonzero(bad)[:1]
    else:
        rows_to_check = range(rows)
    for i in rows_to_check:  # the message of the first bad row (every row with host caps)
        _pipeline.check_feasible(budgets[i], lo[i], hi[i], host,
                                 None if cap is None else np.asarray(cap).reshape(rows, -1)[i], dtype=dtype,
                                 page_id=page_id)


# ------------------------------------------------------------------ paper-named solvers
def lambda_crawl(problem: CrawlProblem, **options) -> Policy:
    r"""LambdaCrawl (NeurIPS-19 Alg. 1-3): ``solve(problem, jaxcrawl.harmonic(), **options)``.

    The optimal harmonic-staleness policy under mixed observability (eq. 8 / Problem 3): one
    dual for incomplete pages (Prop. 2) and complete ones (Prop. 5), so the mixed problem is
    one root-find -- no golden-section search over the split of R -- and exact.  ``on_signal``
    is ``problem.complete``; ``d harmonic_cost / d bandwidth = -dual / n`` at the optimum."""
    return solve(problem, harmonic(), **options)


def lambda_crawl_approx(problem: CrawlProblem, **options) -> Policy:
    r"""LambdaCrawlApprox (NeurIPS-19 Prop. 9, §9.3): ``solve(problem, jaxcrawl.harmonic_approx())``."""
    return solve(problem, harmonic_approx(), **options)


def binary_lambda_crawl(problem: CrawlProblem, epsilon: ArrayLike = 0.0, **options) -> Policy:
    r"""BinaryLambdaCrawl and BLCε (Azar et al.; L2C eq. 5; NeurIPS-19 §9.3):
    ``solve(problem, jaxcrawl.binary(epsilon))``.

    A traced or batched ``epsilon`` (differentiable, vmappable) is applied as the same floor,
    ``bounds=(epsilon R / n, None)``.  Every page is Poisson-crawled (``on_signal`` all
    False), as in the NeurIPS-19 baseline."""
    if is_concrete(epsilon) and np.ndim(epsilon) == 0:
        return solve(problem, binary(float(epsilon)), **options)
    e = jnp.asarray(epsilon, problem.dtype)
    if is_concrete(e) and (not np.all(np.isfinite(e)) or np.any(e < 0) or np.any(e > 1)):
        raise ValueError(f"epsilon must be in [0, 1]; got {epsilon}")
    floor = (e * jnp.asarray(problem.bandwidth, problem.dtype) / problem.num_pages)[..., None]
    lower, upper = options.pop("bounds", None) or (None, None)
    lower = floor if lower is None else jnp.maximum(floor, jnp.asarray(lower, problem.dtype))
    return solve(problem, binary(), bounds=(lower, upper), **options)


def uniform_interval_crawl(problem: CrawlProblem, **options) -> Policy:
    r"""Optimal uniform-interval (periodic) rates for the utility G (L2C App. H, I.2):
    ``solve(problem, jaxcrawl.uniform())``; evaluate with
    :func:`~jaxcrawl.uniform_interval_freshness`."""
    return solve(problem, uniform(), **options)


def accumulated_delay_crawl(problem: CrawlProblem, **options) -> Policy:
    r"""Optimal rates for accumulated delay (Sia et al.; L2C App. F eq. 26,
    :math:`\rho_i^*=R\sqrt{\zeta_i\xi_i}/\sum_j\sqrt{\zeta_j\xi_j}`): ``solve(problem, jaxcrawl.delay())``."""
    return solve(problem, delay(), **options)


def uniform_crawl(problem: CrawlProblem) -> Policy:
    r"""UniformCrawl: :math:`\rho_w = R/n` for every page (NeurIPS-19 supplement §9.3), all
    Poisson-crawled.  ``dual`` is :math:`n/R`, the multiplier of :math:`\max\sum\ln\rho_w`."""
    n = problem.num_pages
    bw = jnp.asarray(problem.bandwidth, problem.dtype)[..., None]
    rate = jnp.ones_like(problem.importance) * (bw / n)
    return make_policy(problem, rate, n / bw[..., 0], on_signal=jnp.zeros_like(problem.complete))


def change_rate_crawl(problem: CrawlProblem) -> Policy:
    r"""ChangeRateCrawl: :math:`\rho_w = \lambda_w R/\sum\lambda` (NeurIPS-19 §9.3; Cho &
    Garcia-Molina), all Poisson-crawled.  ``dual`` is :math:`\sum\lambda/R`."""
    lam = problem.change_rate
    total = jnp.sum(lam, axis=-1)
    bw = jnp.asarray(problem.bandwidth, problem.dtype)
    rate = lam * (bw / total)[..., None]
    return make_policy(problem, rate, total / bw, on_signal=jnp.zeros_like(problem.complete))


# ------------------------------------------------------------------ the primitive
class Allocation(NamedTuple):
    """Result of :func:`allocate`: the allocation ``x``, the dual, the residual before the
    closing correction, the iterations and whether they converged."""

    x: jax.Array
    dual: jax.Array
    residual: jax.Array
    num_steps: jax.Array
    converged: jax.Array


def allocate(rate_fn, params: Any, budget: ArrayLike, lower: ArrayLike = 0.0, upper: ArrayLike = jnp.inf, *,
             marginal_fn=None, bracket: tuple | None = None, max_steps: int = 100, rtol: float | None = None,
             adjoint: str = "implicit", throw: bool = False) -> Allocation:
    r"""The budgeted allocation primitive under :func:`solve`, for a bare rate function:
    :math:`\max\sum_i u_i(x_i)` s.t. :math:`\sum_i x_i=B`, :math:`\ell\le x\le h`.

    Args:
      rate_fn: ``rate_fn(dual, params) -> (n,)`` the unclipped :math:`(u_i')^{-1}(\nu)`,
        nonincreasing in the dual; may return ``±inf`` (never NaN).
      params: pytree the rates depend on (derivatives flow to every leaf).
      budget: scalar :math:`B`.
      lower, upper: per-page bounds (broadcast to ``(n,)``).
      marginal_fn: ``marginal_fn(x, params) -> u'(x)`` for the dual bracket; or ``bracket``.
      bracket: explicit starting ``(a, b)``, widened until it holds the root.
      max_steps, rtol, adjoint, throw: as in :func:`solve`.
    """
    if marginal_fn is None and bracket is None:
        raise ValueError("allocate needs marginal_fn (to build the dual bracket) or bracket=(a, b)")
    opts = _pipeline.check_options(max_steps, rtol, adjoint, throw)
    budget = jnp.asarray(budget)
    if not jnp.issubdtype(budget.dtype, jnp.floating):
        budget = budget.astype(jnp.result_type(float))
    if budget.ndim != 0:
        raise ValueError(f"allocate solves one problem; budget must be a scalar, got shape {budget.shape} "
                         "(use jax.vmap for a batch)")
    lower = jnp.asarray(lower, budget.dtype)
    upper = jnp.asarray(upper, budget.dtype)
    if bracket is not None:
        bracket = (jnp.asarray(bracket[0], budget.dtype), jnp.asarray(bracket[1], budget.dtype))
    if is_concrete(budget, lower, upper):
        probe = bracket[0] if bracket is not None else jnp.ones((), budget.dtype)
        n_shape = jax.eval_shape(lambda: rate_fn(probe, params)).shape
        _pipeline.check_feasible(budget, np.broadcast_to(np.asarray(lower), n_shape),
                                 np.broadcast_to(np.asarray(upper), n_shape))
    sol = _budget.solve(rate_fn, marginal_fn, params, budget, lower, upper, bracket=bracket,
                        max_steps=opts.max_steps, rtol=opts.rtol, unrolled=opts.adjoint == "unrolled")
    if opts.throw:
        raise_unless_converged("allocate", sol.converged, sol.num_steps, sol.residual)
    return Allocation(x=sol.x, dual=sol.dual, residual=sol.residual,
                      num_steps=jax.lax.stop_gradient(sol.num_steps), converged=sol.converged)
