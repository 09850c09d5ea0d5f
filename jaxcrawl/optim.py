r"""Exact projections onto the bandwidth simplex with per-arm bounds, and the learners' steps
as optax transformations.

The feasible set of every allocation in jaxcrawl is

.. math:: \mathcal C = \{x \in \mathbb R^K : \textstyle\sum_k x_k = R,\ \ell_k \le x_k \le u_k\}.

* :func:`project_simplex`: the Euclidean projection :math:`\arg\min_{x\in\mathcal C}\|x-y\|^2`,
  :math:`x_k = \mathrm{clip}(y_k - \nu, \ell_k, u_k)`, by a finite algorithm: the dual
  :math:`\nu` lies between two adjacent ones of the 2K breakpoints (found from
  :math:`\sum_k x_k` tabulated at every breakpoint for K <= 256, by binary search over the
  sorted breakpoints beyond), where :math:`\sum_k x_k` is affine and :math:`\nu` has a closed form.
* :func:`project_simplex_log_barrier`: the Bregman projection for the log barrier
  :math:`\psi(x) = -\sum_k\log x_k` (the potential of MirrorSync, Kolobov, Bubeck & Zimmert,
  ICML 2020, Alg. 1 lines 42-47), :math:`\arg\min_{x\in\mathcal C}\psi(x) - \langle\theta, x\rangle`,
  :math:`x_k = \mathrm{clip}(1/(\nu - \theta_k), \ell_k, u_k)`: the same breakpoint search, then
  a Newton iteration on the concave increasing :math:`1/\sum_{k\,\mathrm{free}} x_k(\nu)`
  started at the left breakpoint (monotone, never overshoots, exact for one free arm),
  run until it stops moving; the result says whether it did.
* :func:`mirror_descent` and :func:`projected_sgd`: ``optax.GradientTransformation``\ s whose
  update is the exact projected step (ICML-20 Alg. 1 line 20 and §8), so that
  ``optax.apply_updates(params, updates)`` lies in :math:`\mathcal C` (to the rounding of
  that one addition).

Both projections return :class:`jaxcrawl.Allocation` ``(x, dual, residual, num_steps,
converged)``, batch over leading axes (the arms are the last axis) and are differentiable:
``jax.jvp`` and ``jax.grad`` use the implicit derivative on the active set (free arms move,
arms at a bound follow the bound, the dual absorbs the budget).
"""
from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.typing import ArrayLike

from jaxcrawl._src.checks import is_concrete
from jaxcrawl.core.solve import Allocation

__all__ = ["project_simplex", "project_simplex_log_barrier", "mirror_descent", "projected_sgd",
           "ProjectionState"]

_MAX_NEWTON = 100
_DENSE_BREAKS = 512  # up to this many breakpoints (2K), Σx is tabulated at all of them at once


# ------------------------------------------------------------------ per-arm maps x_k(ν)
def _euclid_x(nu, y, lo, hi):
    return jnp.clip(y - nu, lo, hi)


def _euclid_breaks(y, lo, hi):
    return y - hi, y - lo  # x_k = hi for nu <= first, lo for nu >= second


def _barrier_x(nu, theta, lo, hi):
    d = nu - theta
    pos = d > 0
    return jnp.where(pos, jnp.clip(1.0 / jnp.where(pos, d, 1.0), lo, hi), hi)


def _barrier_breaks(theta, lo, hi):
    return theta + 1.0 / hi, theta + 1.0 / lo


# ------------------------------------------------------------------ one problem, (K,) arms
def _active_interval(x_fn, breaks, z, total, lo, hi):
    """Breakpoints ``(a, b)`` around the root of ``sum x(ν) = total`` (no breakpoint strictly
    between them) and the arms free, at the lower and at the upper bound on ``(a, b)``;
    ``at_end`` when the root is the last breakpoint (every arm at its lower bound)."""
    first, second = breaks(z, lo, hi)
    b = jnp.concatenate([first, second])
    n = b.shape[0]

    def total_at(nu):
        return jnp.sum(x_fn(nu, z, lo, hi))

    if n <= _DENSE_BREAKS:
        # Σx at every breakpoint at once (an n x K table): the last breakpoint with
        # Σx >= total and the first one after it.
        sums = jnp.sum(x_fn(b[:, None], z, lo, hi), axis=-1)
        above = sums >= total
        a = jnp.max(jnp.where(above, b, -jnp.inf))
        c = jnp.min(jnp.where(above, jnp.inf, b))
        at_end = ~jnp.any(~above)
        c = jnp.where(at_end, jnp.max(b), c)
        a = jnp.where(at_end, c, a)
    else:
        b = jnp.sort(b)

        def halve(_, ij):  # invariant: total_at(b[i]) >= total (b[0]: every arm at its upper bound)
            i, j = ij
            mid = (i + j) // 2
            ok = total_at(b[mid]) >= total
            return jnp.where(ok, mid, i), jnp.where(ok, j, mid)

        num_halvings = max(1, math.ceil(math.log2(max(n - 1, 1))))
        i, j = jax.lax.fori_loop(0, num_halvings, halve, (jnp.asarray(0), jnp.asarray(n - 1)))
        at_end = total_at(b[j]) >= total
        a, c = b[i], b[j]
    at_lower = second <= a
    at_upper = ~at_lower & (first >= c)
    free = ~at_lower & ~at_upper
    return a, c, at_end, free, at_lower, at_upper


def _rest(total, lo, hi, at_lower, at_upper):
    """Budget left to the free arms: total minus the arms held at a bound."""
    return total - jnp.sum(jnp.where(at_upper, hi, 0.0)) - jnp.sum(jnp.where(at_lower, lo, 0.0))


def _feasible(total, lo, hi):
    k = lo.shape[-1]
    slack = 8 * k * jnp.finfo(lo.dtype).eps * (jnp.abs(total) + jnp.sum(jnp.abs(jnp.where(jnp.isfinite(lo), lo, 0))))
    return jnp.all(lo <= hi) & (jnp.sum(lo) <= total + slack) & (jnp.sum(hi) >= total - slack)


def _euclid_solve(y, total, lo, hi):
    a, c, at_end, free, at_lower, at_upper = _active_interval(_euclid_x, _euclid_breaks, y, total, lo, hi)
    num_free = jnp.sum(free)
    rest = _rest(total, lo, hi, at_lower, at_upper)
    nu = (jnp.sum(jnp.where(free, y, 0.0)) - rest) / jnp.maximum(num_free, 1).astype(y.dtype)
    nu = jnp.where(at_end, c, jnp.where(num_free > 0, nu, a))
    steps = jnp.zeros((), y.dtype)
    return nu, steps, _feasible(total, lo, hi)


def _barrier_solve(theta, total, lo, hi):
    a, c, at_end, free, at_lower, at_upper = _active_interval(_barrier_x, _barrier_breaks, theta, total, lo, hi)
    rest = _rest(total, lo, hi, at_lower, at_upper)
    any_free = jnp.any(free) & ~at_end & (rest > 0)

    # Newton on h(ν) = 1/sum_free x_k(ν) - 1/rest, concave and increasing in ν; from the
    # left breakpoint its iterates increase to the root.  With d_k = ν - θ_k and
    # w_k = min_j d_j / d_k (1 at the smallest d, also when it is 0: a pole of x_k),
    # h = d_min/Σw - 1/rest and h' = Σw²/(Σw)².
    def newton(nu):
        d = jnp.where(free, nu - theta, jnp.inf)
        d_min = jnp.maximum(jnp.min(d), 0.0)
        w = jnp.where(free, jnp.where(d <= d_min, 1.0, d_min / jnp.where(free, d, 1.0)), 0.0)
        sw, sw2 = jnp.sum(w), jnp.sum(w * w)
        return nu + (sw * sw / rest - d_min * sw) / sw2

    def cond(st):
        nu, steps, done, failed = st
        return ~done & (steps < _MAX_NEWTON)

    def body(st):
        nu, steps, _, _ = st
        new = jnp.minimum(newton(nu), c)
        stalled = ~(new > nu)  # no further progress (or a NaN step)
        # a step within a few ulps of ν is rounding of h near its root, not progress
        # (in float32 such steps can go on one ulp at a time)
        done = stalled | (new - nu <= 4.0 * jnp.finfo(nu.dtype).eps * jnp.abs(nu))
        return jnp.where(stalled, nu, new), steps + 1, done, jnp.isnan(new)

    nu0 = jnp.where(at_end, c, a)
    no = jnp.zeros((), bool)
    nu, steps, done, failed = jax.lax.while_loop(cond, body, (nu0, jnp.zeros((), jnp.int32), ~any_free, no))
    converged = done & ~failed & jnp.isfinite(nu) & _feasible(total, lo, hi)
    return nu, steps.astype(theta.dtype), converged


# ------------------------------------------------------------------ derivatives
def _masks(x, lo, hi):
    at_lower = x <= lo
    at_upper = ~at_lower & (x >= hi)
    return ~at_lower & ~at_upper, at_lower, at_upper


def _bound_tangent(dt, dlo, dhi, at_lower, at_upper):
    return jnp.sum(jnp.where(at_lower, dlo, 0.0)) + jnp.sum(jnp.where(at_upper, dhi, 0.0)) - dt


@jax.custom_jvp
def _euclid_core(y, total, lo, hi):
    nu, steps, ok = _euclid_solve(y, total, lo, hi)
    return _euclid_x(nu, y, lo, hi), nu, steps, ok.astype(y.dtype)


@_euclid_core.defjvp
def _euclid_core_jvp(primals, tangents):
    y, total, lo, hi = primals
    dy, dt, dlo, dhi = tangents
    out = _euclid_core(y, total, lo, hi)
    x = out[0]
    free, at_lower, at_upper = _masks(x, lo, hi)
    num_free = jnp.sum(free)
    dnu = (jnp.sum(jnp.where(free, dy, 0.0)) + _bound_tangent(dt, dlo, dhi, at_lower, at_upper))
    dnu = jnp.where(num_free > 0, dnu / jnp.maximum(num_free, 1).astype(x.dtype), 0.0)
    dx = jnp.where(free, dy - dnu, jnp.where(at_lower, dlo, dhi))
    zero = jnp.zeros_like(out[2])
    return out, (dx, dnu, zero, zero)


@jax.custom_jvp
def _barrier_core(theta, total, lo, hi):
    nu, steps, ok = _barrier_solve(theta, total, lo, hi)
    return _barrier_x(nu, theta, lo, hi), nu, steps, ok.astype(theta.dtype)


@_barrier_core.defjvp
def _barrier_core_jvp(primals, tangents):
    theta, total, lo, hi = primals
    dtheta, dt, dlo, dhi = tangents
    out = _barrier_core(theta, total, lo, hi)
    x = out[0]
    free, at_lower, at_upper = _masks(x, lo, hi)
    q = jnp.where(free, x * x, 0.0)  # dx_k/dθ_k = -dx_k/dν = x_k² on free arms
    sq = jnp.sum(q)
    dnu = jnp.sum(q * jnp.where(free, dtheta, 0.0)) + _bound_tangent(dt, dlo, dhi, at_lower, at_upper)
    dnu = jnp.where(sq > 0, dnu / jnp.where(sq > 0, sq, 1.0), 0.0)
    dx = jnp.where(free, q * (dtheta - dnu), jnp.where(at_lower, dlo, dhi))
    zero = jnp.zeros_like(out[2])
    return out, (dx, dnu, zero, zero)


# ------------------------------------------------------------------ public projections
def _prepare(name, point_name, z, total, lower, upper, positive_lower, total_name="total"):
    z = jnp.asarray(z)
    if not jnp.issubdtype(z.dtype, jnp.floating):
        z = z.astype(jnp.result_type(float))
    if z.ndim < 1 or z.shape[-1] < 1:
        raise ValueError(f"{name}: {point_name} must have the arms on its last axis, got shape {z.shape}")
    dtype = z.dtype
    total, lower, upper = (jnp.asarray(v, dtype) for v in (total, lower, upper))
    try:
        lower = jnp.broadcast_to(lower, z.shape)
        upper = jnp.broadcast_to(upper, z.shape)
        total = jnp.broadcast_to(total, z.shape[:-1])
    except ValueError:
        raise ValueError(f"{name}: lower {jnp.shape(lower)} and upper {jnp.shape(upper)} must broadcast to "
                         f"{point_name}'s shape {z.shape}, and {total_name} {jnp.shape(total)} to "
                         f"{z.shape[:-1]}") from None
    if is_concrete(z, total, lower, upper):
        _check_values(name, point_name, *(np.asarray(v) for v in (z, total, lower, upper)), positive_lower,
                      total_name)
    return z, total, lower, upper


def _check_values(name, point_name, z, t, lo, hi, positive_lower, total_name):
    if np.isnan(z).any():
        raise ValueError(f"{name}: {point_name} must not be NaN")
    if not np.all(np.isfinite(t)):
        raise ValueError(f"{name}: {total_name} must be finite")
    if np.isnan(lo).any() or np.isnan(hi).any():
        raise ValueError(f"{name}: lower and upper must not be NaN")
    if positive_lower and not np.all((lo > 0) & np.isfinite(lo)):
        raise ValueError(f"{name}: lower must be finite and > 0 for every arm (the log barrier's domain)")
    if np.any(lo > hi):
        i = int(np.flatnonzero(np.ravel(lo > hi))[0])
        raise ValueError(f"{name}: lower must be <= upper for every arm; lower={np.ravel(lo)[i]} > "
                         f"upper={np.ravel(hi)[i]} at flat index {i}")
    if np.any(hi == -np.inf) or np.any(lo == np.inf):
        raise ValueError(f"{name}: upper must be > -inf and lower < inf")
    k = z.shape[-1]
    slack = 8 * k * np.finfo(z.dtype).eps * (np.abs(t) + np.sum(np.abs(np.where(np.isfinite(lo), lo, 0)), -1))
    sum_lo, sum_hi = np.sum(lo, -1), np.sum(hi, -1)
    if np.any(sum_lo > t + slack) or np.any(sum_hi < t - slack):
        raise ValueError(f"{name}: the set is empty: need sum(lower) <= {total_name} <= sum(upper); got "
                         f"{total_name}={t}, sum(lower)={sum_lo}, sum(upper)={sum_hi}")


def _run(core, z, total, lower, upper):
    fn = jnp.vectorize(core, signature="(k),(),(k),(k)->(k),(),(),()")
    x, nu, steps, ok = fn(z, total, lower, upper)
    residual = jax.lax.stop_gradient(jnp.sum(x, -1) - total)
    return Allocation(x=x, dual=nu, residual=residual,
                      num_steps=jax.lax.stop_gradient(steps).astype(jnp.int32),
                      converged=jax.lax.stop_gradient(ok) > 0)


def project_simplex(y: ArrayLike, total: ArrayLike, lower: ArrayLike = 0.0,
                    upper: ArrayLike = jnp.inf) -> Allocation:
    r"""Euclidean projection onto :math:`\{x : \sum_k x_k = R,\ \ell_k \le x_k \le u_k\}`.

    .. math:: x = \arg\min_{\sum_k x_k = R,\ \ell \le x \le u} \|x - y\|_2^2,
              \qquad x_k = \mathrm{clip}(y_k - \nu, \ell_k, u_k).

    Exact by a finite algorithm: of the 2K breakpoints :math:`y_k - u_k`, :math:`y_k - \ell_k`,
    the two adjacent ones around the root are found from :math:`\sum_k x_k(\nu)` at every
    breakpoint (an O(K²) table for K <= 256; a binary search over the sorted breakpoints,
    O(K log K), beyond), and between them :math:`\nu = (\sum_{\rm free} y_k - R + \sum_{\rm bound}x_k)/|\mathrm{free}|`.
    With the defaults (``lower=0``, ``upper=inf``) and ``total=1`` this is the projection onto
    the probability simplex.  Arms with ``lower == upper`` are held there.

    Args:
      y: ``(..., K)`` point to project (leading axes are independent problems).
      total: :math:`R`, broadcast to ``y.shape[:-1]``.
      lower, upper: bounds, broadcast to ``y.shape`` (``-inf``/``inf`` allowed).

    Returns:
      :class:`jaxcrawl.Allocation`: ``x`` the projection, ``dual`` ν, ``residual``
      :math:`\sum x - R`, ``num_steps`` 0 (no iteration), ``converged`` whether the set
      was nonempty.  ``jax.grad``/``jax.jvp`` of ``x`` and ``dual`` are exact away from the
      breakpoints (where the projection has a kink).

    Raises:
      ValueError: for concrete inputs, if ``lower > upper`` for an arm, if
        ``sum(lower) > total`` or ``sum(upper) < total`` (the set is empty), or on NaN.
    """
    y, total, lower, upper = _prepare("project_simplex", "y", y, total, lower, upper, False)
    return _run(_euclid_core, y, total, lower, upper)


def project_simplex_log_barrier(theta: ArrayLike, total: ArrayLike, lower: ArrayLike,
                                upper: ArrayLike = jnp.inf) -> Allocation:
    r"""Bregman projection for the log barrier :math:`\psi(x) = -\sum_k \log x_k` onto
    :math:`\{x : \sum_k x_k = R,\ 0 < \ell_k \le x_k \le u_k\}`, given in mirror coordinates.

    .. math:: x = \arg\min_{x\in\mathcal C}\ \psi(x) - \langle\theta, x\rangle,
              \qquad x_k = \mathrm{clip}\Big(\frac{1}{\nu - \theta_k}, \ell_k, u_k\Big)
              \ (u_k \text{ when } \nu \le \theta_k).

    For a point :math:`y > 0`, ``theta = -1/y`` (:math:`=\nabla\psi(y)`) gives the Bregman
    projection :math:`\arg\min_{x\in\mathcal C} D_\psi(x, y)`,
    :math:`D_\psi(x, y) = \sum_k -\log(x_k/y_k) + x_k/y_k - 1` (ICML-20 Alg. 1 line 45).  Any
    real ``theta`` is allowed: the mirror-descent step from :math:`r` with gradient
    :math:`g` is ``theta = -1/r - eta * g`` (see :func:`mirror_descent`), which may leave
    :math:`\nabla\psi`'s range :math:`(-\infty, 0)`; ``theta = 0`` gives the log-barrier
    minimiser over the set (ICML-20 Alg. 1 line 3).

    The breakpoints :math:`\theta_k + 1/u_k`, :math:`\theta_k + 1/\ell_k` are searched as in
    :func:`project_simplex`; between the two around the root,
    :math:`1/\sum_{\rm free}x_k(\nu)` is concave and increasing, and Newton's method on it,
    started at the left breakpoint, increases monotonically to the root (exact in one
    step when one arm is free).  It stops when an iterate no longer moves (machine
    precision) or after 100 steps.

    Args:
      theta: ``(..., K)`` mirror point (leading axes are independent problems).
      total: :math:`R`, broadcast to ``theta.shape[:-1]``.
      lower: :math:`\ell > 0`, broadcast to ``theta.shape``.
      upper: :math:`u` (``inf`` allowed), broadcast to ``theta.shape``.

    Returns:
      :class:`jaxcrawl.Allocation`: ``x``, ``dual`` ν, ``residual`` :math:`\sum x - R`,
      ``num_steps`` Newton steps, ``converged`` whether the iteration stopped moving
      before the cap on a nonempty set.  Derivatives are exact (implicit, on the active set).

    Raises:
      ValueError: for concrete inputs, if ``lower <= 0``, ``lower > upper``, the set is
        empty (``sum(lower) > total`` or ``sum(upper) < total``), or on NaN.
    """
    theta, total, lower, upper = _prepare("project_simplex_log_barrier", "theta", theta, total, lower, upper,
                                          True)
    return _run(_barrier_core, theta, total, lower, upper)


# ------------------------------------------------------------------ optax transformations
class ProjectionState(NamedTuple):
    """State of :func:`mirror_descent` and :func:`projected_sgd`.

    Attributes:
      count: updates taken (the step of a learning-rate schedule).
      dual: the latest projection's dual ν, per parameter leaf (its shape without the
        last axis).
      num_steps: the latest projection's largest Newton step count (0 for the Euclidean one).
      converged: whether every projection of the latest update converged on a nonempty set.
    """

    count: jax.Array
    dual: Any
    num_steps: jax.Array
    converged: jax.Array


def _check_rate(learning_rate, name):
    if not callable(learning_rate) and is_concrete(learning_rate):
        eta = np.asarray(learning_rate)
        if not np.all(np.isfinite(eta)) or np.any(eta <= 0):
            raise ValueError(f"{name}: learning_rate must be finite and > 0; got {learning_rate}")


def _check_set(name, bandwidth, lower, upper, positive_lower):
    """The set's rules: all of them when the bounds are per arm, else those that do not need
    the number of arms (``init`` checks the rest once the params give it)."""
    if not is_concrete(bandwidth, lower, upper):
        return
    lo, hi, t = (np.asarray(v, np.float64) for v in (lower, upper, bandwidth))
    try:
        shape = np.broadcast_shapes(lo.shape, hi.shape, (1,))
    except ValueError:
        raise ValueError(f"{name}: lower {lo.shape} and upper {hi.shape} must broadcast together") from None
    lo, hi = np.broadcast_to(lo, shape), np.broadcast_to(hi, shape)
    if max(np.ndim(lower), np.ndim(upper)) == 0:  # K unknown: every finite bandwidth passes here
        t = np.clip(t, np.sum(lo, -1), np.sum(hi, -1)) if np.all(np.isfinite(t)) else t
    _check_values(name, "params", np.zeros(shape), t, lo, hi, positive_lower, "bandwidth")


def _projected_step(name: str, point_fn: Callable, project: Callable, learning_rate, bandwidth, lower, upper,
                    positive_lower: bool) -> optax.GradientTransformation:
    _check_rate(learning_rate, name)
    _check_set(name, bandwidth, lower, upper, positive_lower)

    def init(params):
        for p in jax.tree_util.tree_leaves(params):  # the set's rules, now that K is known
            _prepare(name, "params", jnp.zeros_like(p), bandwidth, lower, upper, positive_lower, "bandwidth")
        dual = jax.tree_util.tree_map(lambda p: jnp.zeros(jnp.shape(p)[:-1], jnp.result_type(p)), params)
        return ProjectionState(jnp.zeros((), jnp.int32), dual, jnp.zeros((), jnp.int32), jnp.ones((), bool))

    def update(grads, state, params=None):
        if params is None:
            raise ValueError(f"{name}: update needs params (the step is a projection of the current point)")
        eta = learning_rate(state.count) if callable(learning_rate) else learning_rate
        leaves, treedef = jax.tree_util.tree_flatten(params)
        grad_leaves = treedef.flatten_up_to(grads)
        if positive_lower and is_concrete(leaves) and any(np.any(np.asarray(p) <= 0) for p in leaves):
            raise ValueError(f"{name}: params must be > 0 (the log barrier's domain)")
        sols = [project(point_fn(p, g, jnp.asarray(eta, jnp.result_type(p))), bandwidth, lower, upper)
                for p, g in zip(leaves, grad_leaves)]
        updates = treedef.unflatten([s.x - p for s, p in zip(sols, leaves)])
        dual = treedef.unflatten([s.dual for s in sols])
        steps = functools.reduce(jnp.maximum, [jnp.max(s.num_steps) for s in sols], jnp.zeros((), jnp.int32))
        converged = functools.reduce(jnp.logical_and, [jnp.all(s.converged) for s in sols], jnp.ones((), bool))
        count = optax.safe_increment(state.count)
        return updates, ProjectionState(count, dual, steps, converged)

    return optax.GradientTransformation(init, update)


def _mirror_point(p, g, eta):
    return -1.0 / p - eta * g


def _sgd_point(p, g, eta):
    return p - eta * g


def mirror_descent(learning_rate: float | ArrayLike | Callable, bandwidth: ArrayLike, lower: ArrayLike,
                   upper: ArrayLike = jnp.inf) -> optax.GradientTransformation:
    r"""Log-barrier mirror descent with the exact Bregman projection (ICML-20 Alg. 1 line 20).

    .. math:: x^+ = \arg\min_{x\in\mathcal C}\ \eta\langle g, x\rangle
              + \sum_k\Big(-\log\frac{x_k}{x^{\rm old}_k} + \frac{x_k}{x^{\rm old}_k} - 1\Big)
              = \text{project\_simplex\_log\_barrier}(-1/x^{\rm old} - \eta g, R, \ell, u).

    ``update(grads, state, params)`` returns ``x⁺ - params``, so ``optax.apply_updates``
    lands on :math:`x^+` (feasible up to the rounding of that addition).  The gradients are
    the loss's (it descends); put preprocessing (clipping, averaging) before it in an
    ``optax.chain`` and nothing that rescales the updates after it.  ``params`` is an array
    with the arms on its last axis (leading axes are independent sets) or a pytree of them,
    each projected with the same ``bandwidth``, ``lower`` and ``upper``; it must lie in
    :math:`(0, \infty)`.

    Args:
      learning_rate: η > 0, or an optax schedule ``count -> η``.
      bandwidth: :math:`R` (scalar or per leading index).
      lower: :math:`\ell > 0` (scalar or per arm).
      upper: :math:`u` (scalar or per arm; ``inf`` allowed).

    Returns:
      ``optax.GradientTransformation`` with state :class:`ProjectionState` (whose
      ``converged`` reports the projection's Newton iteration).
    """
    return _projected_step("mirror_descent", _mirror_point, project_simplex_log_barrier, learning_rate,
                           bandwidth, lower, upper, True)


def projected_sgd(learning_rate: float | ArrayLike | Callable, bandwidth: ArrayLike, lower: ArrayLike = 0.0,
                  upper: ArrayLike = jnp.inf) -> optax.GradientTransformation:
    r"""Projected SGD with the exact Euclidean projection (AsyncPSGDSync, ICML-20 §8).

    .. math:: x^+ = \arg\min_{x\in\mathcal C}\|x - (x^{\rm old} - \eta g)\|_2^2
              = \text{project\_simplex}(x^{\rm old} - \eta g, R, \ell, u).

    Same contract as :func:`mirror_descent` (``update`` returns ``x⁺ - params``; any real
    ``params``).

    Args:
      learning_rate: η > 0, or an optax schedule ``count -> η``.
      bandwidth: :math:`R`.
      lower, upper: bounds (scalars or per arm).
    """
    return _projected_step("projected_sgd", _sgd_point, project_simplex, learning_rate, bandwidth, lower,
                           upper, False)
