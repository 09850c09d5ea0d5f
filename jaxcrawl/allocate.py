r"""The budgeted allocation primitive behind every optimal-rate solver.

Every optimal-rate problem in the papers is

.. math::

   \max_x \sum_i u_i(x_i) \quad\text{s.t.}\quad \sum_i x_i = B,\;
   \ell_i \le x_i \le h_i,

with each :math:`u_i` concave.  Its KKT conditions give every page's allocation as a
function of one dual variable :math:`\nu` (the marginal value of budget):
:math:`x_i(\nu) = \mathrm{clip}(\varphi_i(\nu), \ell_i, h_i)` with
:math:`\varphi_i = (u_i')^{-1}` nonincreasing.  :func:`allocate` finds the :math:`\nu`
with :math:`\sum_i x_i(\nu) = B` by a safeguarded Newton iteration on a bracket (in
:math:`\log\nu` when the bracket is positive), stops at a tolerance or a step cap (so it
jits, vmaps and shards: the only cross-page operation is a sum per pass), and
finishes with one Newton correction on the free pages so the budget holds to rounding.

Derivatives are exact and cheap: a ``jax.custom_jvp`` applies the implicit function
theorem to :math:`\sum_i x_i(\nu, \theta) = B`,

.. math::

   d\nu = \frac{dB - \sum_{i\,\text{clipped}} d(\text{bound}_i)
               - \sum_{i\,\text{free}} \partial_\theta\varphi_i\,d\theta}
              {\sum_{i\,\text{free}} \partial_\nu\varphi_i},
   \qquad dx_i = \partial_\theta\varphi_i\,d\theta + \partial_\nu\varphi_i\,d\nu
   \;(\text{free}),\quad dx_i = d(\text{bound}_i)\;(\text{clipped}),

so forward and reverse mode cost one extra pass over the pages and never unroll the
root-finder (reverse mode is the transpose of this rule).
"""
from __future__ import annotations

import functools
from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from .problem import is_concrete

__all__ = ["Allocation", "allocate"]

RateFn = Callable[[jax.Array, Any], jax.Array]


class Allocation(NamedTuple):
    """Result of :func:`allocate`.

    Attributes:
      x: the allocation, ``clip(rate_fn(dual, params), lower, upper)`` corrected so that
        ``sum(x) == budget`` to rounding.
      dual: the multiplier ν of the budget constraint.
      residual: ``sum(x) - budget``.
      num_steps: root-finding iterations used (each is one pass over the pages).
    """

    x: jax.Array
    dual: jax.Array
    residual: jax.Array
    num_steps: jax.Array


def _default_rtol(dtype) -> float:
    eps = float(jnp.finfo(dtype).eps)
    return 4.0 * eps ** 0.75


def _reference_point(budget, lower, upper, n):
    """A feasible point inside the box that sums to ``budget`` (used for the bracket)."""
    width = upper - lower
    finite = jnp.isfinite(width)
    slack = budget - jnp.sum(lower)
    big = jnp.maximum(slack, jnp.max(jnp.where(finite, width, 0.0)))
    big = jnp.where(big > 0, big, 1.0)
    w = jnp.where(finite, width, big)
    total = jnp.sum(w)
    total = jnp.where(total > 0, total, 1.0)
    return lower + slack * (w / total), width > 0


def _bracket_from_marginals(marginal_fn, params, budget, lower, upper, n):
    """Dual bracket [a, b] with f(a) >= 0 >= f(b), from marginal utilities at a feasible point.

    At ν = max_i u_i'(x̄_i), every page has x_i(ν) <= x̄_i, so the allocation sums to at
    most the budget; symmetrically at ν = min_i u_i'(x̄_i).  Pages with a zero-width box
    are fixed and do not constrain the bracket.
    """
    xbar, movable = _reference_point(budget, lower, upper, n)
    m = marginal_fn(xbar, params)
    m = jnp.broadcast_to(m, xbar.shape)
    ok = movable & jnp.isfinite(m)
    a = jnp.min(jnp.where(ok, m, jnp.inf))
    b = jnp.max(jnp.where(ok, m, -jnp.inf))
    fallback = ~(jnp.isfinite(a) & jnp.isfinite(b))
    a = jnp.where(fallback, 1.0, a)
    b = jnp.where(fallback, 1.0, b)
    return a, b


def _expand_bracket(rate_fn, params, budget, lower, upper, a, b, max_expansions=64):
    """Widen a user bracket until f(a) >= 0 >= f(b) (geometrically when it is positive)."""
    def f(nu):
        x = jnp.clip(rate_fn(nu, params), lower, upper)
        return jnp.sum(x) - budget

    def widen_lo(a, b):
        return jnp.where(a > 0, a / 4.0, a - 2.0 * jnp.maximum(jnp.abs(b - a), 1.0))

    def widen_hi(a, b):
        return jnp.where(b > 0, b * 4.0, b + 2.0 * jnp.maximum(jnp.abs(b - a), 1.0))

    def cond_lo(s):
        a, k = s
        return (f(a) < 0) & (k < max_expansions)

    a, _ = jax.lax.while_loop(cond_lo, lambda s: (widen_lo(s[0], b), s[1] + 1), (a, 0))

    def cond_hi(s):
        b, k = s
        return (f(b) > 0) & (k < max_expansions)

    b, _ = jax.lax.while_loop(cond_hi, lambda s: (widen_hi(a, s[0]), s[1] + 1), (b, 0))
    return a, b


def _eval(rate_fn, params, nu, lower, upper):
    """One pass: clipped allocation, d(phi)/d(nu), and the free mask."""
    phi, dphi = jax.jvp(lambda v: rate_fn(v, params), (nu,), (jnp.ones_like(nu),))
    phi = jnp.broadcast_to(phi, jnp.broadcast_shapes(phi.shape, jnp.shape(lower), jnp.shape(upper)))
    dphi = jnp.broadcast_to(dphi, phi.shape)
    at_lo = phi <= lower
    at_hi = phi >= upper
    free = ~(at_lo | at_hi)
    x = jnp.where(at_lo, lower, jnp.where(at_hi, upper, phi))
    return x, jnp.where(free, dphi, 0.0), free, at_lo, at_hi, phi, dphi


class RootState(NamedTuple):
    """Scalar state of the safeguarded Newton iteration on z (= log ν or ν)."""

    za: jax.Array
    zb: jax.Array
    z: jax.Array
    dz_old: jax.Array
    k: jax.Array
    done: jax.Array


def root_init(a, b) -> tuple:
    """Start the iteration on the dual bracket [a, b]: returns (state, log_mode)."""
    log_mode = a > 0
    za = jnp.where(log_mode, jnp.log(jnp.where(log_mode, a, 1.0)), a)
    zb = jnp.where(log_mode, jnp.log(jnp.where(log_mode, b, 1.0)), b)
    state = RootState(za, zb, 0.5 * (za + zb), jnp.abs(zb - za), jnp.asarray(0, jnp.int32), jnp.asarray(False))
    return state, log_mode


def root_dual(state: RootState, log_mode):
    """The dual ν at the current iterate."""
    return jnp.where(log_mode, jnp.exp(state.z), state.z)


def root_update(state: RootState, f, df_dnu, log_mode, tol) -> RootState:
    """One rtsafe step given f(ν) = Σx(ν) − B and its derivative at the current iterate.

    f is nonincreasing in ν.  The bracket shrinks to the current point, a Newton step (in
    z = log ν when the bracket is positive) is taken when it stays inside the bracket and
    shrinks the step at least by half, bisection otherwise.  Pure elementwise JAX: it runs
    inside ``lax.while_loop`` for in-memory solves, on the host for streamed ones, and on
    vectors of independent roots (one per host in :mod:`jaxcrawl.politeness`).
    """
    za, zb, z, dz_old, k, _ = state
    eps = jnp.finfo(jnp.result_type(z)).eps
    nu = jnp.where(log_mode, jnp.exp(z), z)
    df = df_dnu * jnp.where(log_mode, nu, 1.0)  # df/dz
    za = jnp.where(f > 0, z, za)
    zb = jnp.where(f > 0, zb, z)
    zb = jnp.where(f == 0, z, zb)
    za = jnp.where(f == 0, z, za)
    width = zb - za
    converged = (jnp.abs(f) <= tol) | (width <= 4 * eps * jnp.maximum(jnp.abs(z), 1.0))
    ok_df = (df < 0) & jnp.isfinite(df) & jnp.isfinite(f)
    newton = z - f / jnp.where(ok_df, df, -1.0)
    use_newton = ok_df & (newton > za) & (newton < zb) & (jnp.abs(2.0 * f) <= jnp.abs(dz_old * df))
    znew = jnp.where(use_newton, newton, 0.5 * (za + zb))
    dz = jnp.abs(znew - z)
    znew = jnp.where(converged, z, znew)
    return RootState(za, zb, znew, dz, k + 1, converged)


def _root_find(rate_fn, params, budget, lower, upper, a, b, max_steps, rtol, unrolled=False):
    """Safeguarded Newton (rtsafe) on f(ν) = Σ x_i(ν) − B, in log ν when a > 0.

    ``unrolled=False``: a ``lax.while_loop`` that stops at the tolerance (derivatives come
    from the implicit rule, not from the loop).  ``unrolled=True``: exactly ``max_steps``
    iterations of the same update in a ``lax.scan`` (frozen once converged), which
    reverse-mode autodiff can differentiate step by step — kept only as the baseline that
    the implicit rule is measured against.
    """
    init, log_mode = root_init(a, b)
    tol = rtol * jnp.abs(budget)

    def body(s):
        x, dx, *_ = _eval(rate_fn, params, root_dual(s, log_mode), lower, upper)
        return root_update(s, jnp.sum(x) - budget, jnp.sum(dx), log_mode, tol)

    if unrolled:
        def scan_body(s, _):
            new = body(s)
            frozen = jax.tree_util.tree_map(lambda o, n: jnp.where(s.done, o, n), s, new)
            return frozen, None

        final, _ = jax.lax.scan(scan_body, init, None, length=max_steps)
    else:
        final = jax.lax.while_loop(lambda s: (~s.done) & (s.k < max_steps), body, init)
    return root_dual(final, log_mode), final.k


def _solve_impl(rate_fn, marginal_fn, cfg, params, budget, lower, upper, bracket, unrolled=False):
    max_steps, rtol = cfg
    phi_shape = jax.eval_shape(lambda: rate_fn(bracket[0], params)).shape
    shape = jnp.broadcast_shapes(phi_shape, jnp.shape(lower), jnp.shape(upper))
    # bounds stay scalars when given as scalars: broadcasting them to the pages' shape here
    # would materialise loop-invariant page-sized buffers
    if marginal_fn is not None:
        a, b = _bracket_from_marginals(marginal_fn, params, budget, jnp.broadcast_to(lower, shape),
                                       jnp.broadcast_to(upper, shape), shape[-1])
    else:
        a, b = _expand_bracket(rate_fn, params, budget, lower, upper,
                               jnp.asarray(bracket[0], budget.dtype),
                               jnp.asarray(bracket[1], budget.dtype))
    a = jax.lax.stop_gradient(jnp.asarray(a, budget.dtype))
    b = jax.lax.stop_gradient(jnp.asarray(b, budget.dtype))
    nu, steps = _root_find(rate_fn, params, budget, lower, upper, a, b, max_steps, rtol, unrolled)
    # Final correction: the sums at ν are one fused reduction; the corrected allocation is
    # recomputed elementwise from a barrier copy of ν (so XLA cannot merge the two and
    # materialise x and dx as page-sized temporaries).
    x, dx_free, *_ = _eval(rate_fn, params, nu, lower, upper)
    r = budget - jnp.sum(x)
    sw = -jnp.sum(dx_free)
    c = jnp.where(sw > 0, r / jnp.where(sw > 0, sw, 1.0), 0.0)
    nu_b, c = jax.lax.optimization_barrier((nu, c))
    x, dx_free, *_ = _eval(rate_fn, params, nu_b, lower, upper)
    x = jnp.clip(x - c * dx_free, lower, upper)
    return jnp.broadcast_to(x, shape), nu, steps


@functools.partial(jax.custom_jvp, nondiff_argnums=(0, 1, 2))
def _solve(rate_fn, marginal_fn, cfg, params, budget, lower, upper, bracket):
    x, nu, steps = _solve_impl(rate_fn, marginal_fn, cfg, params, budget, lower, upper, bracket)
    return x, nu, steps.astype(budget.dtype)


@_solve.defjvp
def _solve_jvp(rate_fn, marginal_fn, cfg, primals, tangents):
    params, budget, lower, upper, bracket = primals
    dparams, dbudget, dlower, dupper, _ = tangents
    x, nu, steps = _solve(rate_fn, marginal_fn, cfg, params, budget, lower, upper, bracket)
    nu = jax.lax.stop_gradient(nu)
    shape = x.shape
    lower_b = jnp.broadcast_to(lower, shape)
    upper_b = jnp.broadcast_to(upper, shape)
    _, dphi_dnu, free, at_lo, at_hi, _, _ = _eval(rate_fn, params, nu, lower_b, upper_b)
    _, dphi_dtheta = jax.jvp(lambda p: rate_fn(nu, p), (params,), (dparams,))
    dphi_dtheta = jnp.broadcast_to(dphi_dtheta, shape)
    dlo = jnp.broadcast_to(dlower, shape)
    dhi = jnp.broadcast_to(dupper, shape)
    dx_clip = jnp.where(at_lo, dlo, jnp.where(at_hi, dhi, 0.0))
    denom = jnp.sum(dphi_dnu)  # dphi_dnu is already zero off the free set
    num = dbudget - jnp.sum(dx_clip) - jnp.sum(jnp.where(free, dphi_dtheta, 0.0))
    safe = denom != 0
    dnu = jnp.where(safe, num / jnp.where(safe, denom, 1.0), 0.0)
    dx = jnp.where(free, dphi_dtheta + dphi_dnu * dnu, dx_clip)
    return (x, nu, steps), (dx, dnu, jnp.zeros_like(steps))


# Compiled once per (rate_fn, marginal_fn, cfg) and input shapes: eager callers (and the
# solvers, whose rate functions live at module level) hit the cache.
_solve_jit = jax.jit(_solve, static_argnums=(0, 1, 2))


def allocate(
    rate_fn: RateFn,
    params: Any,
    budget,
    lower=0.0,
    upper=jnp.inf,
    *,
    marginal_fn: Optional[Callable[[jax.Array, Any], jax.Array]] = None,
    bracket=None,
    max_steps: int = 100,
    rtol: Optional[float] = None,
    adjoint: str = "implicit",
) -> Allocation:
    r"""Solve :math:`\max \sum_i u_i(x_i)` s.t. :math:`\sum_i x_i = B`, :math:`\ell \le x \le h`.

    Args:
      rate_fn: ``rate_fn(dual, params) -> phi`` of shape ``(n,)``: the unclipped
        maximiser of :math:`u_i(x) - \nu x` for each page, nonincreasing in ``dual``
        (:math:`\varphi_i = (u_i')^{-1}`).  It may return ``±inf`` (never NaN) inside
        the bracket; it is differentiated with ``jax.jvp`` (w.r.t. the dual and params).
      params: pytree of arrays that ``rate_fn`` depends on (importance, change rates,
        step sizes, ...).  Derivatives flow to every leaf.
      budget: scalar budget B.
      lower, upper: per-page bounds (broadcast to ``(n,)``); ``upper`` may be ``inf``.
      marginal_fn: ``marginal_fn(x, params) -> u'(x)``, used to build the dual bracket
        from the marginal utilities at a feasible point (one pass).  Either this or
        ``bracket`` is required.
      bracket: explicit starting ``(a, b)``; it is widened (geometrically when positive)
        until ``sum(x(a)) >= B >= sum(x(b))``.
      max_steps: cap on root-finding iterations (each is one pass over the pages).
      rtol: stop when ``|sum(x) - B| <= rtol * B`` (default ``4 * eps**0.75`` of the
        dtype); the final correction then makes the budget exact to rounding.
      adjoint: ``"implicit"`` (default): derivatives by the implicit function theorem
        (one extra pass, memory O(pages)).  ``"unrolled"``: run exactly ``max_steps``
        iterations in a ``lax.scan`` and let autodiff differentiate through them
        (memory O(pages × steps)); only useful as a baseline — the bracket is treated
        as a constant and ``bracket=`` widening is not differentiated.

    Returns:
      :class:`Allocation` ``(x, dual, residual, num_steps)``.

    Raises:
      ValueError: (eagerly, for concrete inputs) when the budget is outside
      ``[sum(lower), sum(upper)]`` or neither ``marginal_fn`` nor ``bracket`` is given.
    """
    if marginal_fn is None and bracket is None:
        raise ValueError("allocate needs marginal_fn (to build the dual bracket) or bracket=(a, b)")
    budget = jnp.asarray(budget)
    if not jnp.issubdtype(budget.dtype, jnp.floating):
        budget = budget.astype(jnp.result_type(float))
    if budget.ndim != 0:
        raise ValueError(
            f"allocate solves one problem; budget must be a scalar, got shape {budget.shape} "
            "(use jax.vmap for a batch)"
        )
    lower = jnp.asarray(lower, budget.dtype)
    upper = jnp.asarray(upper, budget.dtype)
    if bracket is None:
        bracket = (jnp.asarray(1.0, budget.dtype), jnp.asarray(1.0, budget.dtype))
    else:
        bracket = (jnp.asarray(bracket[0], budget.dtype), jnp.asarray(bracket[1], budget.dtype))
    if is_concrete(budget, lower, upper):
        shape = jax.eval_shape(lambda: rate_fn(bracket[0], params)).shape
        lo = np.broadcast_to(np.asarray(lower), shape)
        hi = np.broadcast_to(np.asarray(upper), shape)
        b = float(budget)
        if not np.isfinite(b):
            raise ValueError(f"budget must be finite; got {b}")
        if np.any(lo > hi):
            raise ValueError("lower must be <= upper for every page")
        if b < lo.sum() * (1 - 1e-12) or b > hi.sum() * (1 + 1e-12):
            raise ValueError(
                f"budget {b} is infeasible: it must lie in [sum(lower), sum(upper)] = "
                f"[{lo.sum()}, {hi.sum()}]"
            )
    cfg = (int(max_steps), float(_default_rtol(budget.dtype) if rtol is None else rtol))
    if adjoint == "implicit":
        x, nu, steps = _solve_jit(rate_fn, marginal_fn, cfg, params, budget, lower, upper, bracket)
    elif adjoint == "unrolled":
        x, nu, steps = _solve_impl(rate_fn, marginal_fn, cfg, params, budget, lower, upper, bracket,
                                   unrolled=True)
    else:
        raise ValueError(f"adjoint must be 'implicit' or 'unrolled'; got {adjoint!r}")
    residual = jnp.sum(x) - budget
    return Allocation(x=x, dual=nu, residual=jax.lax.stop_gradient(residual),
                      num_steps=jax.lax.stop_gradient(steps).astype(jnp.int32))
