r"""One safeguarded Newton iteration for every monotone equation in jaxcrawl.

:func:`root_update` is the single step (rtsafe: Newton inside a shrinking bracket,
bisection when Newton leaves it or stalls), written elementwise so that the same code
runs

* on the scalar dual of the budget constraint (:mod:`jaxcrawl._src.budget`, in memory or
  driven from the host chunk by chunk for streamed tables),
* on a vector of independent host duals (host-capped solves),
* on per-element equations (:func:`solve_monotone`: the estimators' likelihood equations,
  the per-arm KKT inverses of sync bandits, the uniform-interval inverse).

The iteration works on ``z = log x`` when the bracket is positive (the roots span many
decades) and on ``x`` otherwise.  Every loop has a step cap and reports whether it
converged: nothing downstream may hide a stop at the cap.

:func:`solve_monotone` carries the implicit derivative of its roots
(:math:`dx = -(\partial_\theta f\,d\theta)/\partial_x f` for interior roots, the bound's
tangent for clipped ones), so loops are never differentiated, in forward or reverse mode.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np


def default_rtol(dtype: Any) -> float:
    """Default relative tolerance of a root: ``4 eps**0.75`` of the dtype."""
    eps = float(jnp.finfo(dtype).eps)
    return 4.0 * eps ** 0.75


class RootState(NamedTuple):
    """State of the safeguarded Newton iteration on ``z`` (``log x`` or ``x``), elementwise.

    ``[za, zb]`` is the bracket (``f(za) >= 0 >= f(zb)`` for nonincreasing ``f``), ``z`` the
    iterate, ``dz_old`` the previous step, ``k`` the step count, ``done`` the per-element
    convergence flag.
    """

    za: jax.Array
    zb: jax.Array
    z: jax.Array
    dz_old: jax.Array
    k: jax.Array
    done: jax.Array


def root_init(a: jax.Array, b: jax.Array, z0: jax.Array | None = None,
              done: jax.Array | None = None, linear: bool = False) -> tuple[RootState, jax.Array]:
    """Start on the bracket ``[a, b]`` of ``x``: returns ``(state, log_mode)``.

    ``log_mode`` (elementwise) is ``a > 0``: then the iteration runs on ``log x``;
    ``linear=True`` (static) says that ``a <= 0`` is known, so ``log_mode`` is the constant
    False (the compiler drops the log-mode arithmetic).
    ``z0`` optionally gives the starting ``x`` (default: the bracket's (geometric) middle);
    ``done`` marks elements that need no iteration.
    """
    a = jnp.asarray(a)
    b = jnp.asarray(b)
    log_mode = jnp.zeros(jnp.shape(a), bool) if linear else a > 0
    za = to_z(a, log_mode)
    zb = to_z(b, log_mode)
    z = 0.5 * (za + zb) if z0 is None else jnp.clip(to_z(jnp.asarray(z0, a.dtype), log_mode), za, zb)
    done = jnp.zeros(jnp.shape(z), bool) if done is None else jnp.asarray(done)
    state = RootState(za, zb, z, jnp.abs(zb - za), jnp.asarray(0, jnp.int32), done)
    return state, log_mode


def to_z(x: jax.Array, log_mode: jax.Array) -> jax.Array:
    """The iteration variable of ``x``: ``log x`` where ``log_mode`` else ``x``."""
    return jnp.where(log_mode, jnp.log(jnp.where(log_mode, x, 1.0)), x)


def root_value(state: RootState, log_mode: jax.Array) -> jax.Array:
    """The current iterate as ``x`` (``exp z`` in log mode)."""
    return jnp.where(log_mode, jnp.exp(state.z), state.z)


def root_update(state: RootState, f: jax.Array, df_dx: jax.Array, log_mode: jax.Array, tol: Any,
                ztol: Any = 0.0) -> RootState:
    """One rtsafe step given ``f(x)`` (nonincreasing) and ``df/dx`` at the current iterate.

    The bracket shrinks to the current point; a Newton step (on ``z``) is taken when it
    stays inside the bracket and at least halves the step, bisection otherwise.  An
    element converges when ``|f| <= tol``, when its bracket is a few ulps wide, or when a
    Newton step is at most ``ztol`` (then the Newton point is accepted).  Converged
    elements keep their iterate.  Pure elementwise JAX.
    """
    za, zb, z, dz_old, k, _ = state
    eps = jnp.finfo(jnp.result_type(z)).eps
    x = jnp.where(log_mode, jnp.exp(z), z)
    df = df_dx * jnp.where(log_mode, x, 1.0)  # df/dz
    za = jnp.where(f > 0, z, za)
    zb = jnp.where(f > 0, zb, z)
    zb = jnp.where(f == 0, z, zb)
    za = jnp.where(f == 0, z, za)
    width = zb - za
    converged = (jnp.abs(f) <= tol) | (width <= 4 * eps * jnp.maximum(jnp.abs(z), 1.0))
    ok_df = (df < 0) & jnp.isfinite(df) & jnp.isfinite(f)
    newton = z - f / jnp.where(ok_df, df, -1.0)
    small = ok_df & (jnp.abs(newton - z) <= ztol)
    use_newton = ok_df & (((newton > za) & (newton < zb) & (jnp.abs(2.0 * f) <= jnp.abs(dz_old * df)))
                          | small)
    znew = jnp.where(use_newton, newton, 0.5 * (za + zb))
    dz = jnp.abs(znew - z)
    znew = jnp.where(converged, z, znew)
    return RootState(za, zb, znew, dz, k + 1, converged | small)


def freeze(old: RootState, new: RootState) -> RootState:
    """Keep finished elements of ``old`` unchanged (the step count always advances)."""
    keep = lambda n, o: jnp.where(old.done, o, n)  # noqa: E731
    return RootState(keep(new.za, old.za), keep(new.zb, old.zb), keep(new.z, old.z),
                     keep(new.dz_old, old.dz_old), new.k, old.done | new.done)


def iterate(f_and_df: Callable, state: RootState, log_mode: jax.Array, tol: Any, max_steps: int,
            ztol: Any = 0.0, loop: Callable = jax.lax.while_loop) -> RootState:
    """Run :func:`root_update` until every element converged or ``max_steps`` steps;
    ``f_and_df(x) -> (f, df/dx)`` elementwise; ``loop`` is ``lax.while_loop`` or a host loop
    with its signature."""

    def body(s):
        f, df = f_and_df(root_value(s, log_mode))
        return freeze(s, root_update(s, f, df, log_mode, tol, ztol))

    if loop is jax.lax.while_loop and jnp.ndim(state.z) == 0 and max_steps < 2 ** 24:
        # one scalar root (a budget's dual): its whole state carried as one vector, so that
        # XLA:CPU computes a step's state in one kernel instead of one per scalar
        v = loop(lambda v: (v[5] == 0) & (v[4] < max_steps), lambda v: _pack(body(_unpack(v))), _pack(state))
        return _unpack(v)
    return loop(lambda s: jnp.any(~s.done) & (s.k < max_steps), body, state)


def _pack(s: RootState, *extra: jax.Array) -> jax.Array:
    """A scalar root's state (and ``extra`` scalars) as one vector, the step count and the
    flag as exact floats (the same values as the state's own fields)."""
    dtype = jnp.result_type(s.z)
    return jnp.stack([s.za, s.zb, s.z, s.dz_old, s.k.astype(dtype), s.done.astype(dtype), *extra], axis=-1)


def _unpack(v: jax.Array) -> RootState:
    """The state of :func:`_pack`'s vector."""
    return RootState(v[0], v[1], v[2], v[3], v[4].astype(jnp.int32), v[5] > 0)


def iterate_evaluated(f_and_df: Callable, state: RootState, log_mode: jax.Array, tol: Any,
                      max_steps: int, ztol: Any = 0.0) -> tuple[RootState, jax.Array, jax.Array]:
    """:func:`iterate` for one scalar root in a ``lax.while_loop`` (``max_steps >= 1``) that
    also returns the last evaluation: ``(state, f, df)`` with ``state.z`` the last point
    ``f_and_df`` was evaluated at and ``(f, df)`` its values.  A converged iteration stops
    on the point it evaluated, so that is its root; the last step allowed by ``max_steps``
    keeps its point (the bracket still shrinks to it) rather than moving to an untried one.
    The caller needs no pass to know the residual at the root it reports."""
    if jnp.ndim(state.z) != 0 or not 1 <= max_steps < 2 ** 24:
        raise ValueError("iterate_evaluated solves one scalar root with 1 <= max_steps < 2**24")
    def body(v):
        s = _unpack(v)
        f, df = f_and_df(root_value(s, log_mode))
        new = freeze(s, root_update(s, f, df, log_mode, tol, ztol))
        return _pack(new._replace(z=jnp.where(new.k >= max_steps, s.z, new.z)), f, df)

    nan = jnp.full((), jnp.nan, jnp.result_type(state.z))
    v = jax.lax.while_loop(lambda v: (v[5] == 0) & (v[4] < max_steps), body, _pack(state, nan, nan))
    return _unpack(v), v[6], v[7]


# --------------------------------------------------------------- per-element monotone roots
class Roots(NamedTuple):
    """Result of :func:`solve_monotone`.

    Attributes:
      x: the roots, clipped to ``[lower, upper]`` (an equation whose root lies outside
        gets the bound on that side: for a monotone function that is the clipped root).
      converged: per-element bool (clipped elements are converged).
      num_steps: int32 scalar, iterations used.
      steps: per-element int32, the evaluations of ``fn`` the element needed before it
        met its tolerance (the last one confirms it; 0 for elements decided by the
        bounds without iterating).
    """

    x: jax.Array
    converged: jax.Array
    num_steps: jax.Array
    steps: Any = None


def solve_monotone(fn: Callable[[jax.Array, Any], jax.Array], params: Any, lower: Any, upper: Any, *,
                   x0: Any | None = None, max_steps: int = 64, rtol: float | None = None,
                   ftol: float = 0.0, bracket: tuple[Any, Any] | None = None,
                   take: Callable[[Any, jax.Array, tuple], Any] | None = None, unroll: int = 0,
                   compact: int = 16, probe_first: bool = False, keep_start: bool = False) -> Roots:
    r"""Elementwise roots of ``fn(x, params) = 0``, ``fn`` nonincreasing in ``x``, on a box.

    Each element of ``x`` has its own equation (``fn`` maps an array ``x`` of shape ``S``
    to values of shape ``S``, element ``i`` depending only on ``x[i]``).  The iteration
    is :func:`root_update` on ``log x`` when ``lower > 0``; it stops per element at a
    relative step ``rtol`` (default ``4 eps^0.75``), at ``|f| <= ftol``, or at a bracket
    of a few ulps, and globally at ``max_steps``.  ``x0`` (optional, not differentiated)
    is the starting point.

    ``bracket = (a, b)`` (optional, not differentiated) is a known bracket of the
    *unclipped* root, ``a <= root <= b`` (e.g. from bounds on the equation's sufficient
    statistics): then ``fn`` is not evaluated at ``lower`` and ``upper`` (two passes
    saved), the roots at or beyond a bound are decided from the bracket (``b <= lower``:
    ``lower``; ``a >= upper``: ``upper``), and the iteration starts on the bracket
    intersected with ``[lower, upper]``.  A wrong bracket gives a wrong root: use it
    only with proven bounds.

    ``take(params, idx, shape)`` (optional) returns the params of the elements ``idx`` of
    the flattened ``shape`` (e.g. :func:`take_rows` when every leaf of ``params`` has the
    elements' shape as its leading axes).  With it, once at most 1/16 of the elements are
    still iterating, those stragglers are gathered and finish on their own, so the last
    iterations cost a sixteenth of a pass over all elements (the same iteration; the
    roots agree to rounding: the two programs may sum in another order).  ``compact``
    (static, default 16) sets that fraction to ``1/compact``: a smaller divisor gathers
    earlier, worth it when a pass is expensive and most elements finish together.

    ``probe_first`` (static; with ``bracket``): an element whose bracket crosses a bound
    starts its iteration on that bound instead of having the bound evaluated in a separate
    pass over all elements before the loop (a pass saved whenever any element crosses; the
    first evaluation on the bound decides whether the root is clipped, as the separate pass
    did, and otherwise steps from it).  The roots are the same to the tolerance.

    ``keep_start`` (static; with ``probe_first`` and ``x0``): an element whose bracket
    crosses the upper bound starts at ``x0`` when ``x0`` lies below the bound (a start
    known to be close to the root), and its next iterate is the bound only when the
    Newton step from ``x0`` reaches it.

    ``unroll`` (static) takes the first steps outside the loop (same result; faster on
    XLA:CPU for large arrays, see :func:`_iterate_counting`).

    Derivatives with respect to ``params``, ``lower`` and ``upper`` are exact by the
    implicit function theorem (a ``jax.custom_jvp``; reverse mode is its transpose).
    """
    lower = jnp.asarray(lower)
    upper = jnp.asarray(upper)
    dtype = jnp.result_type(lower.dtype, upper.dtype)
    if not jnp.issubdtype(dtype, jnp.floating):
        dtype = jnp.result_type(float)
    shape = jnp.broadcast_shapes(jnp.shape(lower), jnp.shape(upper),
                                 () if x0 is None else jnp.shape(x0))
    shape = jnp.broadcast_shapes(shape, jax.eval_shape(
        lambda: fn(jnp.broadcast_to(lower.astype(dtype), shape), params)).shape)
    lower = jnp.broadcast_to(lower.astype(dtype), shape)
    upper = jnp.broadcast_to(upper.astype(dtype), shape)
    if x0 is not None:
        x0 = jax.lax.stop_gradient(jnp.broadcast_to(jnp.asarray(x0, dtype), shape))
    if int(compact) < 2:
        raise ValueError(f"compact must be >= 2; got {compact}")
    if int(np.prod(shape)) <= 1:
        # one element (e.g. one history per call under vmap): nothing to compact, and the
        # gather of its params would copy them once per batch element
        take = None
    cfg = (int(max_steps), float(default_rtol(dtype) if rtol is None else rtol), float(ftol), take, int(unroll),
           int(compact), bool(probe_first), bool(keep_start))
    if bracket is not None:
        bracket = tuple(jax.lax.stop_gradient(jnp.broadcast_to(jnp.asarray(v, dtype), shape)) for v in bracket)
    x, converged, steps, element_steps = _monotone(fn, cfg, params, lower, upper, x0, bracket)
    return Roots(x, converged, steps, element_steps)


def _iterate_counting(f_and_df: Callable, state: RootState, log_mode: jax.Array, tol: Any, max_steps: int,
                      ztol: Any, unroll: int = 0, count: jax.Array | None = None,
                      leave: int = 0) -> tuple[RootState, jax.Array]:
    """:func:`iterate` that also counts, per element, the evaluations before it converged
    (added to ``count``), until at most ``leave`` elements are left (default: all done).

    The first ``unroll`` steps are taken outside the ``while_loop``, each under a ``cond``
    on the loop's own condition (so the result is the same): XLA:CPU runs top-level
    computations on all cores but a while loop's body on one, which matters when each
    step is a pass over a large array and few steps are needed."""

    def body(carry):
        s, c = carry
        f, df = f_and_df(root_value(s, log_mode))
        return freeze(s, root_update(s, f, df, log_mode, tol, ztol)), c + (~s.done).astype(jnp.int32)

    def cond(c):
        return jnp.any(~c[0].done) & (c[0].k < max_steps)

    carry = (state, jnp.zeros(jnp.shape(state.z), jnp.int32) if count is None else count)
    for _ in range(min(int(unroll), int(max_steps))):
        carry = jax.lax.cond(cond(carry), body, lambda c: c, carry)
    if leave:
        return jax.lax.while_loop(lambda c: (jnp.sum(~c[0].done) > leave) & (c[0].k < max_steps), body, carry)
    if max_steps < 2 ** (jnp.finfo(jnp.result_type(state.z)).nmant + 1):
        # the elements' state and counts carried as one array (the counts exact in its
        # dtype): a step's update is one kernel (XLA:CPU compiles each separately written
        # page-sized output as its own)
        def packed_body(kv):
            k, v = kv
            s, c = body((_unpack_rows(v, k), v[..., 5].astype(jnp.int32)))
            return s.k, _pack_rows(s, c)

        k, v = jax.lax.while_loop(lambda kv: jnp.any(kv[1][..., 4] == 0) & (kv[0] < max_steps), packed_body,
                                  (carry[0].k, _pack_rows(*carry)))
        return _unpack_rows(v, k), v[..., 5].astype(jnp.int32)
    return jax.lax.while_loop(cond, body, carry)


def _pack_rows(s: RootState, count: jax.Array) -> jax.Array:
    """Elementwise state and counts as one array ``(*shape, 6)`` (flag and count as exact
    floats).  The six values of an element are its last axis: under ``vmap`` the batch axes
    come first, and a leading axis of six would lie between them and the elements, so
    that the step's kernel would also transpose them."""
    dtype = jnp.result_type(s.z)
    return jnp.stack([s.za, s.zb, s.z, s.dz_old, s.done.astype(dtype), count.astype(dtype)], axis=-1)


def _unpack_rows(v: jax.Array, k: jax.Array) -> RootState:
    return RootState(v[..., 0], v[..., 1], v[..., 2], v[..., 3], k, v[..., 4] > 0)


def take_rows(params: Any, idx: jax.Array, shape: tuple) -> Any:
    """``take`` for :func:`solve_monotone` when every leaf of ``params`` has the elements'
    ``shape`` as its leading axes (per-element data, e.g. ``(pages, observations)``)."""
    size = int(np.prod(shape))
    return jax.tree_util.tree_map(lambda a: jnp.reshape(a, (size,) + jnp.shape(a)[len(shape):])[idx], params)


def _iterate_compacting(fn: Callable, params: Any, take: Callable, state: RootState, log_mode: jax.Array,
                        tol: Any, max_steps: int, ztol: Any, unroll: int = 0,
                        compact: int = 16, count: jax.Array | None = None) -> tuple[RootState, jax.Array]:
    """:func:`_iterate_counting` in two phases: all elements until at most ``1/compact``
    (default a sixteenth) are left, then those stragglers gathered (with their params, by ``take``) and iterated on
    their own to the end, and scattered back.  Elementwise equations only."""
    shape = jnp.shape(state.z)
    size = int(np.prod(shape))
    small = max(size // int(compact), 1)

    def f_and_df(p):
        return lambda x: jax.jvp(lambda v: fn(v, p), (x,), (jnp.ones_like(x),))

    state, count = _iterate_counting(f_and_df(params), state, log_mode, tol, max_steps, ztol, unroll, count,
                                     leave=small)
    left = ~state.done.reshape(-1)
    idx = jnp.nonzero(left, size=small, fill_value=0)[0]
    real = jnp.arange(small) < jnp.sum(left)
    flat = lambda a: jnp.reshape(a, (size,))[idx]  # noqa: E731
    sub = RootState(flat(state.za), flat(state.zb), flat(state.z), flat(state.dz_old), state.k,
                    flat(state.done) | ~real)
    sub, sub_count = _iterate_counting(f_and_df(take(params, idx, shape)), sub, flat(log_mode), tol, max_steps,
                                       ztol, count=flat(count))
    dest = jnp.where(real, idx, size)
    put = lambda full, part: jnp.reshape(full, (size,)).at[dest].set(part, mode="drop").reshape(shape)  # noqa: E731
    state = RootState(put(state.za, sub.za), put(state.zb, sub.zb), put(state.z, sub.z),
                      put(state.dz_old, sub.dz_old), sub.k, put(state.done, sub.done))
    return state, put(count, sub_count)


def _monotone_impl(fn, cfg, params, lower, upper, x0, bracket):
    max_steps, rtol, ftol, take, unroll, compact, probe_first, keep_start = cfg

    def f_and_df(x):
        return jax.jvp(lambda v: fn(v, params), (x,), (jnp.ones_like(x),))

    if bracket is None:
        f_lo, _ = f_and_df(lower)
        f_hi, _ = f_and_df(upper)
        at_lo = ~(f_lo > 0)                 # root at or below the lower bound (or f(lower) NaN)
        at_hi = (~at_lo) & ~(f_hi < 0)      # root at or above the upper bound
        a, b = lower, upper
    else:
        a, b = bracket
        at_lo = ~(b > lower)                # the root is at most b <= lower (or b NaN)
        at_hi = (~at_lo) & ~(a < upper)     # the root is at least a >= upper
        # a bracket across a bound: one pass at that bound (the upper one first) decides
        # whether the root is clipped, instead of bisecting towards the bound
        across_hi = ~(at_lo | at_hi) & (b > upper)
        across_lo = ~(at_lo | at_hi | across_hi) & (a < lower)
    if bracket is not None and probe_first:
        # the bound is the element's first iterate instead of a separate pass over every
        # element: its first evaluation there either closes the bracket on the bound (the
        # root is clipped) or makes the bound the bracket's end with a Newton step from it
        a = jnp.clip(a, lower, upper)
        b = jnp.clip(b, a, upper)
        start = a if x0 is None else x0
        on_hi = across_hi & ~(keep_start & (start < upper)) if x0 is not None else across_hi
        x0 = jnp.where(on_hi, upper, jnp.where(across_lo, lower, start))
        started_hi = on_hi
        below_hi = across_hi & ~on_hi
    elif bracket is not None:
        probe = jnp.where(across_hi, upper, lower)
        f_probe, df_probe = jax.lax.cond(jnp.any(across_hi | across_lo), lambda: f_and_df(probe),
                                         lambda: (jnp.zeros_like(probe), jnp.zeros_like(probe)))
        at_hi = at_hi | (across_hi & ~(f_probe < 0))
        at_lo = at_lo | (across_lo & ~(f_probe > 0))
        a = jnp.where(across_hi | across_lo, jnp.where(across_hi, a, lower), a)
        b = jnp.where(across_hi, upper, b)
        a = jnp.clip(a, lower, upper)
        b = jnp.clip(b, a, upper)
    interior = ~(at_lo | at_hi)
    a, b = jnp.where(interior, a, lower), jnp.where(interior, b, upper)
    state, log_mode = root_init(a, b, x0, ~interior)

    def near_upper(z, s):
        """Within a factor 2 of the bracket's upper end (half the bracket in linear mode)."""
        return z > s.zb - jnp.where(log_mode, jnp.log(2.0), 0.5 * (s.zb - s.za))

    if bracket is not None:  # the bracket may be narrow: let the first Newton step be any size inside it
        state = state._replace(dz_old=jnp.full_like(state.dz_old, jnp.inf))
    if bracket is not None and not probe_first:
        # a root between the left end and the upper bound: the Newton point from the bound
        # (f < 0 there, known from the probe) when it lies inside the bracket within a
        # factor 2 of the bound (near the bound the estimators' scores are concave in
        # log x, where Newton from the right approaches the root monotonically)
        dz = df_probe * jnp.where(log_mode, upper, 1.0)
        ok = across_hi & interior & (dz < 0) & jnp.isfinite(dz) & jnp.isfinite(f_probe)
        z_hi = state.zb - f_probe / jnp.where(ok, dz, -1.0)
        near = near_upper(z_hi, state)
        state = state._replace(z=jnp.where(ok & near & (z_hi > state.za) & (z_hi < state.zb), z_hi, state.z))
    count = None
    if bracket is not None and probe_first and max_steps > 0:
        # the first step, taken here: an element that started on the upper bound and found
        # the root below it keeps the Newton point from the bound only within a factor 2 of
        # it (near the bound the estimators' scores are concave in log x, where Newton from
        # the right approaches the root monotonically); otherwise it restarts from the
        # bracket's left end, the warm start, rather than from the bisection point
        f, df = f_and_df(root_value(state, log_mode))
        new = root_update(state, f, df, log_mode, ftol, rtol)
        restart = started_hi & ~new.done & ~near_upper(new.z, state)
        new = new._replace(z=jnp.where(restart, new.za, new.z),
                           dz_old=jnp.where(restart, jnp.inf, new.dz_old))
        if keep_start:  # kept below a crossed upper bound: the bound next if Newton reaches it
            df_z = df * jnp.where(log_mode, root_value(state, log_mode), 1.0)
            ok = (df_z < 0) & jnp.isfinite(df_z) & jnp.isfinite(f)
            reach = below_hi & ~new.done & (f > 0) & ~(state.z - f / jnp.where(ok, df_z, -1.0) < new.zb)
            new = new._replace(z=jnp.where(reach, new.zb, new.z))
        count = (~state.done).astype(jnp.int32)
        state = freeze(state, new)
    if take is None:
        final, count = _iterate_counting(f_and_df, state, log_mode, ftol, max_steps, rtol, unroll, count)
    else:
        final, count = _iterate_compacting(fn, params, take, state, log_mode, ftol, max_steps, rtol, unroll,
                                           compact, count)
    inside = jnp.clip(root_value(final, log_mode), lower, upper)
    if probe_first:  # an iterate that stopped on a bound is that bound exactly (not exp(log bound))
        inside = jnp.where(final.z >= to_z(upper, log_mode), upper,
                           jnp.where(final.z <= to_z(lower, log_mode), lower, inside))
    x = jnp.where(at_lo, lower, jnp.where(at_hi, upper, inside))
    return x, final.done, final.k, count


@functools.partial(jax.custom_jvp, nondiff_argnums=(0, 1))
def _monotone(fn, cfg, params, lower, upper, x0, bracket):
    return _monotone_impl(fn, cfg, params, lower, upper, x0, bracket)


@_monotone.defjvp
def _monotone_jvp(fn, cfg, primals, tangents):
    params, lower, upper, x0, bracket = primals
    dparams, dlower, dupper, _, _ = tangents
    x, converged, steps, element_steps = _monotone(fn, cfg, params, lower, upper, x0, bracket)
    at_lo = x <= lower
    at_hi = (x >= upper) & ~at_lo
    interior = ~(at_lo | at_hi)
    _, df_dx = jax.jvp(lambda v: fn(v, params), (x,), (jnp.ones_like(x),))
    _, df_dth = jax.jvp(lambda p: fn(x, p), (params,), (dparams,))
    ok = interior & (df_dx != 0) & jnp.isfinite(df_dx)
    dx_int = -df_dth / jnp.where(ok, df_dx, 1.0)
    dx = jnp.where(at_lo, dlower, jnp.where(at_hi, dupper, jnp.where(ok, dx_int, 0.0)))
    return (x, converged, steps, element_steps), (dx, *float0_tangents((converged, steps, element_steps)))


def float0_tangents(like: tuple) -> tuple:
    """Zero tangents (dtype float0) for integer / bool outputs."""
    return tuple(np.zeros(jnp.shape(v), dtype=jax.dtypes.float0) for v in like)


def iterate_unrolled(f_and_df: Callable, state: RootState, log_mode: jax.Array, tol: Any, max_steps: int,
                     ztol: Any = 0.0) -> RootState:
    """Exactly ``max_steps`` steps of :func:`root_update` in a ``lax.scan`` (finished
    elements frozen): reverse-mode autodiff can differentiate through it step by step.
    Kept only as the baseline the implicit rule is measured against."""

    def body(s, _):
        f, df = f_and_df(root_value(s, log_mode))
        return freeze(s, root_update(s, f, df, log_mode, tol, ztol)), None

    final, _ = jax.lax.scan(body, state, None, length=max_steps)
    return final
