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
jits, vmaps and shards: the only cross-page operation is a sum per pass), reports whether
it converged and the residual at that point, and finishes with one Newton correction on
the free pages so the budget holds to rounding.

Derivatives are exact and cheap: a ``jax.custom_jvp`` applies the implicit function
theorem to :math:`\sum_i x_i(\nu, \theta) = B`,

.. math::

   d\nu = \frac{dB - \sum_{i\,\text{clipped}} d(\text{bound}_i)
               - \sum_{i\,\text{free}} \partial_\theta\varphi_i\,d\theta}
              {\sum_{i\,\text{free}} \partial_\nu\varphi_i},
   \qquad dx_i = \partial_\theta\varphi_i\,d\theta + \partial_\nu\varphi_i\,d\nu
   \;(\text{free}),\quad dx_i = d(\text{bound}_i)\;(\text{clipped}),

so forward and reverse mode cost one extra pass over the pages and never unroll the
root-finder (reverse mode is the transpose of this rule).  The same rule, with one more
multiplier per binding host, serves the host-capped solves of :mod:`jaxcrawl.politeness`.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from ._src import budget as _budget
from ._src.checks import is_concrete, raise_unless_converged

__all__ = ["Allocation", "allocate", "RateFn", "MarginalFn"]

RateFn = Callable[[jax.Array, Any], jax.Array]
MarginalFn = Callable[[jax.Array, Any], jax.Array]


class Allocation(NamedTuple):
    """Result of :func:`allocate`.

    Attributes:
      x: the allocation, ``clip(rate_fn(dual, params), lower, upper)`` corrected so that
        ``sum(x) == budget`` to rounding.
      dual: the multiplier ν of the budget constraint.
      residual: ``sum(clip(rate_fn(dual))) - budget`` at the returned dual, measured
        *before* the closing correction (so a solve stopped early shows it).
      num_steps: root-finding iterations used (each is one pass over the pages).
      converged: whether the root-find met its tolerance before ``max_steps``.
    """

    x: jax.Array
    dual: jax.Array
    residual: jax.Array
    num_steps: jax.Array
    converged: jax.Array


def check_budget(budget: ArrayLike, lower: ArrayLike, upper: ArrayLike, shape: tuple) -> None:
    """Eager feasibility check: finite budget in ``[sum(lower), sum(upper)]``, ``lower <= upper``."""
    lo = np.broadcast_to(np.asarray(lower), shape)
    hi = np.broadcast_to(np.asarray(upper), shape)
    b = float(budget)
    if not np.isfinite(b):
        raise ValueError(f"budget must be finite; got {b}")
    if np.any(np.isnan(lo)) or np.any(np.isnan(hi)):
        raise ValueError("lower and upper must not be NaN")
    if np.any(lo > hi):
        idx = int(np.flatnonzero(np.ravel(lo > hi))[0])
        raise ValueError(f"lower must be <= upper for every page; page {idx} has "
                         f"lower {np.ravel(lo)[idx]!r} > upper {np.ravel(hi)[idx]!r}")
    if b < lo.sum() * (1 - 1e-12) or b > hi.sum() * (1 + 1e-12):
        raise ValueError(
            f"budget {b} is infeasible: it must lie in [sum(lower), sum(upper)] = "
            f"[{lo.sum()}, {hi.sum()}]")


def allocate(
    rate_fn: RateFn,
    params: Any,
    budget: ArrayLike,
    lower: ArrayLike = 0.0,
    upper: ArrayLike = jnp.inf,
    *,
    marginal_fn: MarginalFn | None = None,
    bracket: tuple[ArrayLike, ArrayLike] | None = None,
    max_steps: int = 100,
    rtol: float | None = None,
    adjoint: str = "implicit",
    throw: bool = False,
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
        (memory O(pages × steps)); only useful as a baseline.
      throw: raise :class:`jaxcrawl.NonConvergenceError` (inside ``jit`` too, through a
        host callback) when the root-find stops at ``max_steps``.

    Returns:
      :class:`Allocation` ``(x, dual, residual, num_steps, converged)``.

    Raises:
      ValueError: (eagerly, for concrete inputs) when the budget is outside
      ``[sum(lower), sum(upper)]`` or neither ``marginal_fn`` nor ``bracket`` is given.
    """
    if marginal_fn is None and bracket is None:
        raise ValueError("allocate needs marginal_fn (to build the dual bracket) or bracket=(a, b)")
    if adjoint not in ("implicit", "unrolled"):
        raise ValueError(f"adjoint must be 'implicit' or 'unrolled'; got {adjoint!r}")
    budget = jnp.asarray(budget)
    if not jnp.issubdtype(budget.dtype, jnp.floating):
        budget = budget.astype(jnp.result_type(float))
    if budget.ndim != 0:
        raise ValueError(
            f"allocate solves one problem; budget must be a scalar, got shape {budget.shape} "
            "(use jax.vmap for a batch)")
    lower = jnp.asarray(lower, budget.dtype)
    upper = jnp.asarray(upper, budget.dtype)
    if bracket is not None:
        bracket = (jnp.asarray(bracket[0], budget.dtype), jnp.asarray(bracket[1], budget.dtype))
    if is_concrete(budget, lower, upper):
        probe = bracket[0] if bracket is not None else jnp.ones((), budget.dtype)
        check_budget(budget, lower, upper, jax.eval_shape(lambda: rate_fn(probe, params)).shape)
    sol = _budget.solve(rate_fn, marginal_fn, params, budget, lower, upper, bracket=bracket,
                        max_steps=max_steps, rtol=rtol, unrolled=adjoint == "unrolled")
    if throw:
        raise_unless_converged("allocate", sol.converged, sol.num_steps, sol.residual)
    return Allocation(x=sol.x, dual=sol.dual, residual=sol.residual,
                      num_steps=jax.lax.stop_gradient(sol.num_steps), converged=sol.converged)
