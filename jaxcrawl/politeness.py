r"""Optimal crawl rates under per-host politeness caps (nested duals, solved exactly).

Kolobov et al. (SIGIR-19, "Optimal Freshness Crawl Under Politeness Constraints") add to
the bandwidth constraint of the freshness problems one constraint per *host*: a host
``h`` lets the crawler fetch its pages at most ``C_h`` times per unit time,

.. math::

   \max_x \sum_i u_i(x_i)\quad\text{s.t.}\quad \sum_i x_i = R,\qquad
   \sum_{i\in h} x_i \le C_h\ (h = 1..H),\qquad \ell_i\le x_i\le h_i,

with :math:`u_i` the page utility of the objective (harmonic staleness: NeurIPS-19
Prop. 1/4 and Alg. 1-3; binary freshness: Azar et al., L2C eq. 5; any
:class:`~jaxcrawl.Utility`).  The KKT conditions below are derived directly.  With a global
multiplier :math:`\nu` and host multipliers :math:`\kappa_h\ge0`,

.. math::

   x_i = \mathrm{clip}\big(\varphi_i(\nu + \kappa_{h(i)}), \ell_i, h_i\big),\qquad
   \kappa_h\Big(C_h - \sum_{i\in h}x_i\Big) = 0,\qquad \sum_i x_i = R,

where :math:`\varphi_i = (u_i')^{-1}` is the unconstrained solver's per-page rate function
(the :class:`~jaxcrawl.Utility`'s ``rate``), nonincreasing; pages without a host (or on an
uncapped host) use :math:`\kappa = 0`.

**Solving it.**  For a fixed :math:`\nu`, let :math:`S_h(\nu)=\sum_{i\in h}x_i(\nu)`.  If
:math:`S_h(\nu)\le C_h` then :math:`\kappa_h=0`; otherwise :math:`\kappa_h>0` solves the
1-D monotone equation :math:`S_h(\nu+\kappa_h)=C_h`.  Either way the host then receives
exactly :math:`\min(S_h(\nu), C_h)`, so the outer equation on the global budget is

.. math::

   G(\nu) = \sum_{i\notin\text{capped}} x_i(\nu) + \sum_h \min\big(S_h(\nu), C_h\big) = R,

continuous and nonincreasing in :math:`\nu` -- it needs no inner solve at all.  So the
nested problem is solved exactly with one safeguarded Newton/bisection in
:math:`\log\nu` (one pass over the pages and one ``jax.ops.segment_sum`` per step), then
*one* vectorised root-find for all binding hosts at once: each host's
:math:`\mu_h=\nu+\kappa_h` solves :math:`S_h(\mu_h)=C_h` by its own safeguarded Newton in
:math:`\log\mu_h` on the bracket :math:`[\nu, \bar\mu_h]`, every step one pass over the
pages plus segment sums.  Both loops have fixed iteration caps, so the solver jits and
vmaps; a final Newton correction per binding host and over the other pages makes every
cap and the budget hold to rounding.

**Far below the change rates** (utilities with a :class:`~jaxcrawl.GapForm`: binary,
BLCε, uniform-interval freshness), the duals sit so close to the pages' marginals at zero
that the plain duals cannot resolve the rates.  There, given the binding hosts, the KKT
conditions split into independent budget problems (each binding host's pages share its
cap, the others share :math:`R-\sum_{\text{binding}}C_h`), each solved on its own log-gap
dual from its own top page; the binding set is corrected until consistent
(:math:`\kappa_h\ge0`, every cap held).  A dual whose final bracket collapsed on a jump of
its sum (a uniform page at its threshold) is interpolated across the jump, and the duals
are tested before the closing corrections (docs/utilities.md).

Derivatives are exact: a ``jax.custom_jvp`` applies the implicit function theorem to the
active constraints (each binding host's cap and the global budget), so forward and
reverse mode never unroll the root-finders.

Files (used by ``jaxcrawl solve --host-caps FILE``): see :func:`read_host_caps` and
:func:`read_page_hosts`.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from ._src import budget as _budget
from ._src import gap as _gap
from ._src.checks import is_concrete, raise_unless_converged
from .io.hosts import host_index as host_index
from .io.hosts import hosts_from_dataset as hosts_from_dataset
from .io.hosts import load_host_caps
from .io.hosts import read_host_caps as read_host_caps
from .io.hosts import read_page_hosts as read_page_hosts
from .problem import CrawlProblem, Policy, make_policy, raw_problem
from .utilities import BINARY, Utility, binary_epsilon, get_utility, normalising_scales

__all__ = [
    "HostCapSolution",
    "lambda_crawl_with_host_caps",
    "binary_lambda_crawl_with_host_caps",
    "solve_with_host_caps",
    "read_host_caps",
    "read_page_hosts",
    "host_index",
    "hosts_from_dataset",
    "solver_from_caps_file",
]


class HostCapSolution(NamedTuple):
    """Result of a host-capped solve.

    Attributes:
      policy: the :class:`~jaxcrawl.problem.Policy` (``dual`` is the global multiplier ν:
        the marginal utility of one more unit of global bandwidth).
      host_dual: ``(..., H)`` host multipliers κ_h >= 0: the marginal utility of one more
        unit of host h's cap; 0 for hosts whose cap does not bind.
      host_rate: ``(..., H)`` total crawl rate of each host's pages.
      binding: ``(..., H)`` bool, hosts whose cap binds (κ_h > 0 or total at the cap).
      num_steps: ``(...)`` int32 root-finding passes: outer (global ν) plus inner (all
        hosts at once).
    """

    policy: Policy
    host_dual: jax.Array
    host_rate: jax.Array
    binding: jax.Array
    num_steps: jax.Array


def _check_hosts(problem, host_id, host_cap, lower, upper):
    """Eager validation of host ids, caps and feasibility (concrete values only)."""
    n = problem.importance.shape[-1]
    hid = np.asarray(host_id)
    cap = np.asarray(host_cap, np.float64)
    if hid.shape != (n,):
        raise ValueError(f"host_id must have shape ({n},) (one host per page); got {hid.shape}")
    if not np.issubdtype(hid.dtype, np.integer):
        raise ValueError(f"host_id must be an integer array; got dtype {hid.dtype}")
    if cap.ndim < 1:
        raise ValueError("host_cap must be an array with one cap per host (last axis)")
    H = cap.shape[-1]
    if np.any(hid < -1) or np.any(hid >= H):
        bad = hid[(hid < -1) | (hid >= H)][0]
        raise ValueError(
            f"host_id must be -1 (no host) or in [0, {H}) for {H} caps; found {bad}")
    if np.any(np.isnan(cap)) or np.any(cap <= 0):
        raise ValueError("host_cap must be > 0 for every host (inf = uncapped); found "
                         f"{cap[np.isnan(cap) | (cap <= 0)].ravel()[0]!r}")
    lo = np.broadcast_to(np.asarray(lower, np.float64), problem.importance.shape)
    hi = np.broadcast_to(np.asarray(upper, np.float64), problem.importance.shape)
    R = np.broadcast_to(np.asarray(problem.bandwidth, np.float64), problem.importance.shape[:-1])
    rows = int(np.prod(problem.importance.shape[:-1], dtype=np.int64))
    lo2 = lo.reshape(rows, n)
    hi2 = hi.reshape(rows, n)
    cap2 = np.broadcast_to(cap, problem.importance.shape[:-1] + (H,)).reshape(rows, H)
    has = hid >= 0
    for l, u, c, r in zip(lo2, hi2, cap2, R.reshape(-1)):
        lo_h = np.bincount(hid[has], weights=l[has], minlength=H)
        hi_h = np.bincount(hid[has], weights=u[has], minlength=H)  # inf where unbounded
        if np.any(lo_h > c * (1 + 1e-12)):
            h = int(np.flatnonzero(lo_h > c * (1 + 1e-12))[0])
            raise ValueError(
                f"host {h}: cap {c[h]!r} is below the sum of its pages' lower bounds "
                f"{lo_h[h]!r} (e.g. BLC-epsilon floors): infeasible")
        most = np.sum(np.where(has, 0.0, u)) + np.sum(np.minimum(c, hi_h))
        if r > most * (1 + 1e-12):
            raise ValueError(
                f"bandwidth {r!r} exceeds the most the host caps allow ({most!r}: uncapped "
                "pages' upper bounds plus each host's min(cap, sum of its pages' upper "
                "bounds)); lower the bandwidth or raise the caps")
        if r < np.sum(l) * (1 - 1e-12):
            raise ValueError(f"bandwidth {r!r} is below the sum of the lower bounds {np.sum(l)!r}")


def _batched_solve(utility: Utility, params, budget, lower, upper, host, cap, opts):
    cfg = (opts["max_steps"], opts["rtol"])

    def plain(p, b, lo, up, c):
        return _budget.solve(utility.rate, utility.marginal, p, b, lo, up, hosts=(host, c), **opts)

    def fix(sol, p, b, lo, up, c):
        return _gap.capped_fallback(utility.gap, cfg, p, b, lo, up, host, c, sol)

    if lower.ndim == 1:
        args = (params, budget, lower, upper, cap)
        sol = plain(*args)
    else:
        batch, n, H = lower.shape[:-1], lower.shape[-1], cap.shape[-1]
        flat = lambda a, tail: jnp.broadcast_to(a, batch + tail).reshape((-1,) + tail)  # noqa: E731
        args = (jax.tree_util.tree_map(lambda a: flat(a, (n,)), params),
                flat(budget, ()), flat(lower, (n,)), flat(upper, (n,)), flat(cap, (H,)))
        sol = jax.vmap(plain)(*args)
        fix = jax.vmap(fix)
    # the log-gap fallback only where the capped solve did not converge or a dual is too
    # close to its pages' marginals at zero: decided on the host for an eager solve (nothing
    # compiled otherwise), inside the program under a trace
    if utility.gap is not None and utility.separable:
        if not is_concrete(sol, *args):
            sol = fix(sol, *args)
        else:
            needed = (_gap.capped_needed(utility.gap, args[0], host, args[4], sol) if lower.ndim == 1 else
                      jax.vmap(lambda p, c, s: _gap.capped_needed(utility.gap, p, host, c, s))(
                          args[0], args[4], sol))
            if bool(np.any(np.asarray(needed))):
                sol = fix(sol, *args)
    if lower.ndim == 1:
        return sol
    return jax.tree_util.tree_map(lambda a: a.reshape(batch + a.shape[1:]), sol)


def _capped_utility(objective, epsilon, dtype, bandwidth, n):
    """(utility, extra lower bound) of an objective name or Utility for host-capped solves."""
    if objective == "binary-epsilon":
        if is_concrete(epsilon):
            e = np.asarray(epsilon)
            if e.ndim == 0:
                return binary_epsilon(float(e)), None
        return BINARY, jnp.asarray(epsilon, dtype) * jnp.asarray(bandwidth, dtype) / n
    u = get_utility(objective)
    if not u.separable or u.marginal is None:
        raise ValueError(
            f"objective {u.name!r} is not a separable per-page optimum (its rates couple pages), "
            "so it has no host-capped form")
    return u, None


def solve_with_host_caps(problem: CrawlProblem, host_id: ArrayLike, host_cap: ArrayLike,
                         objective: str | Utility = "harmonic", *, epsilon: ArrayLike = 0.4,
                         lower: ArrayLike | None = None, upper: ArrayLike | None = None,
                         max_steps: int = 100, inner_steps: int = 100,
                         rtol: float | None = None, throw: bool = False,
                         min_rate: ArrayLike | None = None,
                         max_rate: ArrayLike | None = None) -> HostCapSolution:
    r"""Optimal crawl rates for ``objective`` under the bandwidth and per-host caps.

    Solves SIGIR-19's politeness-constrained problem (module docstring) exactly, by the
    nested KKT conditions :math:`x_i=\mathrm{clip}(\varphi_i(\nu+\kappa_{h(i)}))`, for any
    separable :class:`~jaxcrawl.Utility` (a registry name or a user-defined one):

    * ``"harmonic"``: LambdaCrawl (NeurIPS-19 Alg. 1-3; Prop. 2 and 5 rate functions),
      complete pages crawled on signals with :math:`x_i\le\lambda_i`;
    * ``"binary"`` / ``"binary-epsilon"``: BinaryLambdaCrawl / BLCε (Azar et al.; L2C
      eq. 5; NeurIPS-19 §9.3), floor :math:`\varepsilon R/n` per page;
    * ``"delay"``: accumulated delay (L2C App. F eq. 25-26), :math:`\varphi=\sqrt{\zeta\xi/\nu}`;
    * ``"uniform"``: uniform-interval freshness G (L2C App. H, I.2).

    Args:
      problem: the pages; leading batch axes are vmapped (``host_id`` is shared,
        ``host_cap`` may carry the same batch axes).
      host_id: ``(n,)`` int host index of every page in ``[0, H)``, or ``-1`` for pages
        with no host constraint.
      host_cap: ``(H,)`` (or ``(..., H)``) cap on each host's total crawl rate, > 0;
        ``inf`` = uncapped.
      objective: a registry name or a :class:`~jaxcrawl.Utility`.
      epsilon: BLCε floor fraction (``"binary-epsilon"`` only).
      lower, upper: extra per-page rate bounds (intersected with the utility's).
      min_rate, max_rate: revisit bounds as rates (``1/max_interval``, ``1/min_interval``;
        :mod:`jaxcrawl.bounds`), the same as ``lower``/``upper`` (the tightest applies).
      max_steps, inner_steps: iteration caps of the global and the per-host root-finds.
      rtol: stop when the budget (caps) residual is within ``rtol`` of the budget (cap);
        default ``4 eps^0.75``.  The final Newton correction makes them exact to rounding.
      throw: raise :class:`~jaxcrawl.NonConvergenceError` when a root-find stops at its cap.

    Returns:
      :class:`HostCapSolution` (its policy says whether both root-finds ``converged``).

    Raises:
      ValueError: (eagerly) bad shapes or ids, a cap <= 0 or NaN, an infeasible problem
      (a cap below its pages' floors, or a bandwidth above what the caps allow).
    """
    if not isinstance(problem, CrawlProblem):
        raise TypeError(f"problem must be a jaxcrawl.CrawlProblem, got {type(problem).__name__}")
    dtype = problem.importance.dtype
    n = problem.importance.shape[-1]
    if min_rate is not None:
        lower = min_rate if lower is None else jnp.maximum(jnp.asarray(lower), jnp.asarray(min_rate))
    if max_rate is not None:
        upper = max_rate if upper is None else jnp.minimum(jnp.asarray(upper), jnp.asarray(max_rate))
    if objective == "binary-epsilon" and is_concrete(epsilon):
        e = np.asarray(epsilon)
        if not np.all(np.isfinite(e)) or np.any(e < 0) or np.any(e > 1):
            raise ValueError(f"epsilon must be in [0, 1]; got {epsilon}")
    utility, _ = _capped_utility(objective, epsilon, dtype, problem.bandwidth, n)
    opts = dict(max_steps=max_steps, inner_steps=inner_steps, rtol=rtol, throw=throw)
    if not utility.homogeneous:
        return _host_caps_in_units(problem, host_id, host_cap, objective, epsilon, lower, upper, **opts)
    # The change of units of jaxcrawl.solve (Utility.homogeneous): largest importance and mean
    # rate 1; caps and rate bounds scale like the bandwidth, the duals (nu, kappa) by a / c.
    a, c = normalising_scales(problem)
    a_, c_ = a[..., None], c[..., None]
    scaled = raw_problem(problem.importance / a_, problem.change_rate / c_, problem.bandwidth / c,
                         problem.complete)
    cap = jnp.asarray(host_cap).astype(dtype)
    if is_concrete(problem, host_id, cap, lower, upper):  # validated in the caller's units (its messages)
        floor = _capped_utility(objective, epsilon, dtype, problem.bandwidth, n)[1]
        _, lo, hi = _page_limits(problem, utility, floor, lower, upper)
        _check_hosts(problem, jnp.asarray(host_id), cap, lo, hi)
    div = (lambda v: None if v is None else jnp.asarray(v, dtype) / c_)  # noqa: E731
    sol = _host_caps_in_units(scaled, host_id, cap / c_, objective, epsilon, div(lower), div(upper), **opts,
                              check=False)
    pol = sol.policy
    policy = make_policy(problem, pol.rate * c_, _budget.rescale_dual(pol.dual, a, c), pol.residual * c, pol.num_steps,
                         on_signal=pol.on_signal, converged=pol.converged)
    return HostCapSolution(policy=policy, host_dual=_budget.rescale_dual(sol.host_dual, a_, c_),
                           host_rate=sol.host_rate * c_, binding=sol.binding, num_steps=sol.num_steps)


def _page_limits(problem, utility, floor, lower, upper):
    """(params, lo, hi): the utility's parameters and each page's rate bounds (the utility's,
    the BLC-epsilon floor and the extra ``lower``/``upper``), broadcast to the pages."""
    dtype = problem.importance.dtype
    n = problem.importance.shape[-1]
    params = (jax.vmap(utility.params) if problem.importance.ndim > 1 else utility.params)(problem)
    shape = problem.importance.shape
    lo, hi = utility.page_bounds(params, jnp.asarray(problem.bandwidth, dtype)[..., None], n, dtype)
    lo = jnp.broadcast_to(lo, shape)
    hi = jnp.broadcast_to(hi, shape)
    for extra, pick in ((floor, jnp.maximum), (lower, jnp.maximum)):
        if extra is not None:
            lo = pick(lo, jnp.broadcast_to(jnp.asarray(extra, dtype)[..., None] if extra is floor
                                           else jnp.asarray(extra, dtype), shape))
    if upper is not None:
        hi = jnp.minimum(hi, jnp.asarray(upper, dtype))
    return params, lo, hi


def _host_caps_in_units(problem, host_id, host_cap, objective, epsilon, lower, upper, *, max_steps,
                        inner_steps, rtol, throw, check=True) -> HostCapSolution:
    """:func:`solve_with_host_caps` in the problem's own units (no change of units);
    ``check``: validate hosts, caps and feasibility (eagerly) here."""
    dtype = problem.importance.dtype
    n = problem.importance.shape[-1]
    shape = problem.importance.shape
    utility, floor = _capped_utility(objective, epsilon, dtype, problem.bandwidth, n)
    params, lo, hi = _page_limits(problem, utility, floor, lower, upper)
    host = jnp.asarray(host_id)
    cap = jnp.asarray(host_cap)
    if not jnp.issubdtype(cap.dtype, jnp.floating):
        cap = cap.astype(dtype)
    cap = cap.astype(dtype)
    if check and is_concrete(problem, host, cap, lo, hi):
        _check_hosts(problem, host, cap, lo, hi)
    host = host.astype(jnp.int32)
    no_hosts = cap.shape[-1] == 0
    if no_hosts:  # one uncapped dummy host keeps the gathers well-formed
        cap = jnp.full(cap.shape[:-1] + (1,), jnp.inf, dtype)
    budget = jnp.asarray(problem.bandwidth, dtype)
    opts = dict(max_steps=max_steps, inner_steps=inner_steps, rtol=rtol)
    sol = _batched_solve(utility, params, budget, lo, hi, host, cap, opts)
    x, nu, kappa = sol.x, sol.dual, sol.host_dual
    if throw:
        raise_unless_converged("solve_with_host_caps", sol.converged, sol.num_steps, sol.residual)
    H = cap.shape[-1]
    seg = jnp.where((host >= 0) & (host < H), host, H)
    host_rate = jax.ops.segment_sum(jnp.moveaxis(x, -1, 0), seg, num_segments=H + 1)[:H]
    host_rate = jnp.moveaxis(host_rate, 0, -1)
    steps = jax.lax.stop_gradient(sol.num_steps)
    on_signal = (jax.vmap(utility.signal_mask, (0, None)) if x.ndim > 1 else utility.signal_mask)(
        params, (n,)) if utility.on_signal is not None else jnp.zeros(shape, bool)
    policy = make_policy(problem, x, nu, sol.residual, steps, on_signal=on_signal,
                         converged=sol.converged)
    binding = (kappa > 0) | (host_rate >= cap * (1 - 4 * jnp.finfo(dtype).eps))
    if no_hosts:
        kappa, host_rate, binding = (a[..., :0] for a in (kappa, host_rate, binding))
    return HostCapSolution(policy=policy, host_dual=kappa, host_rate=host_rate,
                           binding=binding, num_steps=steps)


def lambda_crawl_with_host_caps(problem: CrawlProblem, host_id: ArrayLike, host_cap: ArrayLike, *,
                                max_steps: int = 100, inner_steps: int = 100,
                                rtol: float | None = None) -> HostCapSolution:
    r"""LambdaCrawl (NeurIPS-19 Alg. 1-3, harmonic staleness) under per-host caps.

    Maximises NeurIPS-19 eq. 8's utility
    :math:`\sum_{W^-}\mu\ln\frac{\rho}{\lambda+\rho}+\sum_{W^\circ}\mu\ln p` subject to
    :math:`\sum\rho=R` and :math:`\sum_{i\in h}\rho_i\le C_h` (SIGIR-19's politeness
    constraints).  KKT: :math:`\rho_i=\varphi_i(\nu+\kappa_{h(i)})` with Prop. 2's
    :math:`\varphi` for incomplete pages and Prop. 5's :math:`\min(\lambda,\mu/\cdot)` for
    complete ones (the ``"harmonic"`` utility).  With no binding cap it equals
    :func:`jaxcrawl.lambda_crawl`.  See :func:`solve_with_host_caps` for the arguments.
    """
    return solve_with_host_caps(problem, host_id, host_cap, "harmonic", max_steps=max_steps,
                                inner_steps=inner_steps, rtol=rtol)


def binary_lambda_crawl_with_host_caps(problem: CrawlProblem, host_id: ArrayLike, host_cap: ArrayLike,
                                       epsilon: ArrayLike = 0.0,
                                       *, max_steps: int = 100, inner_steps: int = 100,
                                       rtol: float | None = None) -> HostCapSolution:
    r"""BinaryLambdaCrawl / BLCε (Azar et al.; L2C eq. 5; NeurIPS-19 §9.3) under per-host caps.

    Maximises :math:`\sum_i\zeta_i\rho_i/(\rho_i+\xi_i)` s.t. :math:`\sum\rho=R`,
    :math:`\sum_{i\in h}\rho_i\le C_h`, :math:`\rho_i\ge\varepsilon R/n`.  KKT:
    :math:`\rho_i=\max(\varepsilon R/n, \sqrt{\zeta_i\xi_i/(\nu+\kappa_{h(i)})}-\xi_i)`.
    With no binding cap it equals :func:`jaxcrawl.binary_lambda_crawl`.
    """
    objective = "binary-epsilon" if not (is_concrete(epsilon) and np.all(np.asarray(epsilon) == 0)) \
        else "binary"
    return solve_with_host_caps(problem, host_id, host_cap, objective, epsilon=epsilon,
                                max_steps=max_steps, inner_steps=inner_steps, rtol=rtol)


# --------------------------------------------------------------------------- files
# The file readers live in jaxcrawl.io.hosts (re-exported above).


def solver_from_caps_file(path: str, page_id: ArrayLike, objective: str | Utility = "harmonic", *,
                          pages_path: str | None = None, epsilon: float = 0.4,
                          unknown_pages: str = "error", **solve_options) -> Callable[[CrawlProblem], Policy]:
    """A ``problem -> Policy`` solver honouring the host caps in ``path`` (``solve --host-caps``).

    The caps file is :func:`read_host_caps`'s ``host_id,cap`` CSV.  Pages are mapped to
    hosts by, in order: ``pages_path`` if given; else the file named by a
    ``# pages: FILE`` comment in the caps file (:func:`read_page_hosts`'s
    ``page_id,host_id`` CSV); else, when every page id is a URL, its host name
    (lower-cased), so a caps file keyed by host names needs no mapping.  Pages whose host
    has no cap row (or an ``inf`` cap) are uncapped.

    Args:
      path: the caps CSV.
      page_id: ``(n,)`` the problem's page ids, in problem order.
      objective: a separable utility's registry name (``"harmonic"``, ``"binary"``,
        ``"binary-epsilon"``, ``"delay"``, ``"uniform"``, ...) or a :class:`~jaxcrawl.Utility`.
      epsilon: floor fraction for ``"binary-epsilon"``.
      unknown_pages: a mapping row whose page is not in ``page_id``: ``"error"`` (default,
        ValueError naming file and line) or ``"ignore"``.
      **solve_options: passed to :func:`solve_with_host_caps` (``max_steps``, ``rtol``, ...).

    Returns:
      A callable ``problem -> Policy`` (the host arrays are bound to it; the solve
      itself is compiled once per shape).
    """
    _capped_utility(objective, epsilon, jnp.float32, 1.0, 1)  # raises for unknown / non-separable
    hidx, hcap = load_host_caps(path, page_id, pages_path=pages_path, unknown_pages=unknown_pages)
    host_arr = jnp.asarray(hidx)
    cap_arr = np.asarray(hcap)

    def solve(problem: CrawlProblem) -> Policy:
        c = jnp.asarray(cap_arr, problem.importance.dtype)
        if c.shape[0] == 0:
            c = jnp.zeros((0,), problem.importance.dtype)
        return solve_with_host_caps(problem, host_arr, c, objective, epsilon=epsilon,
                                    **solve_options).policy

    return solve
