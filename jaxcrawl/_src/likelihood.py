"""Numerics of the likelihood-based change-rate estimators: the estimating equations of
Learning to Crawl eq. 6-7 and NeurIPS-19 eq. 10, and their per-history solve.

Shared by :mod:`jaxcrawl.estimators` and by the ring-buffer MLE of
:mod:`jaxcrawl._src.ring_mle`.  Each equation is written as a score ``psi(xi)``, nonincreasing
in ξ, and solved per history by :func:`jaxcrawl._src.rootfind.solve_monotone` on ``log xi``,
clipped to ``[min_rate, max_rate]``; derivatives come from the implicit function theorem.
"""
from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.custom_derivatives import SymbolicZero

from .checks import raise_unless_converged
from .history import clip_bounds, observed
from .rootfind import solve_monotone, take_rows
from .special import log_gap as _log_gap

__all__ = [
    "Estimate",
    "STATIC",
    "bracket_from_stats",
    "moment_score",
    "newton_rtol",
    "sentinel_score",
    "sentinel_stats",
    "solve_equation",
    "solve_likelihood",
    "solve_options",
    "taylor_start",
]

class Estimate(NamedTuple):
    """Result of the iterating estimators with ``return_info=True``: :func:`mle`
    (L2C eq. 6), :func:`moment_matching` (L2C eq. 7), :func:`mle_smoothed` (NeurIPS-19
    Alg. 4 line 11).

    Attributes:
      rate: ``(...)`` estimated rates, clipped to ``[min_rate, max_rate]``.
      converged: ``(...)`` bool, per history: the root of the estimating equation met its
        tolerance before ``max_steps`` (histories decided by the clip -- never changed,
        always changed, empty -- are converged).
      num_steps: int32, iterations used (one pass over all histories each; per batch
        element under ``vmap``).
      steps: ``(...)`` int32, per history, the evaluations of the estimating equation it
        needed (the last one confirms convergence; 0 for histories decided by the clip).
    """

    rate: jax.Array
    converged: jax.Array
    num_steps: jax.Array
    steps: jax.Array | None = None


# ---------------------------------------------------------------------------------------
# Estimating equations, solved per history by the shared safeguarded Newton
# ---------------------------------------------------------------------------------------


def _own_pass(f, *args):
    """``f(*args)`` as its own XLA computation (a ``cond`` whose branches are both ``f``,
    on an opaque always-true predicate that is never batched under ``vmap``): XLA then
    cannot fuse its reduction with a sibling one over the same operands into a
    multi-output reduction, which XLA:CPU runs more slowly than separate ones."""
    return jax.lax.cond(jax.lax.optimization_barrier(jnp.bool_(True)), f, f, *args)


def _count(b):
    """Number of True entries on the last axis (summed as uint8 -> int32: XLA:CPU is slow
    on boolean operands)."""
    return jnp.sum(b.astype(jnp.uint8).astype(jnp.int32), axis=-1)


def _log_gap_jvp(s, ds, w_unchanged, dwu):
    """``(ψ, dψ)`` of ``ψ = log s - log W_u`` from ``s``, its tangent ``ds`` and the
    unchanged time's tangent ``dwu`` (a ``SymbolicZero`` or an array)."""
    ok_s, ok_t = s > 0, w_unchanged > 0
    dpsi = ds * jnp.where(ok_s, 1 / jnp.where(ok_s, s, 1), 0)
    if not isinstance(dwu, SymbolicZero):
        dpsi = dpsi - jnp.where(ok_t, dwu / jnp.where(ok_t, w_unchanged, 1), 0)
    return _log_gap(s, w_unchanged), dpsi


# ------------------------------------ the likelihood score on sentinel intervals (fast path)
@jax.custom_jvp
def sentinel_score(x, params):
    r"""Score of L2C eq. 6 (NeurIPS-19 eq. 10) as a log-ratio, elementwise in ``x``,
    nonincreasing and convex in ξ:

    .. math:: \psi(\xi) = \log\sum_{o_n=1}\frac{w_n}{e^{\xi w_n}-1} - \log\sum_{o_n=0} w_n
              = \log\sum_n \frac{v_n}{e^{\xi v_n}-1} - \log W_u,

    on one array: ``params = (v, w_unchanged)`` with ``v`` the changed crawls' intervals
    and ``finfo.max`` on every other slot (unchanged, masked or padded;
    :func:`sentinel_stats`), and the unchanged time ``W_u`` (summed once).

    A sentinel slot's term is exactly 0 (``ξ·finfo.max`` overflows, ``expm1`` gives
    ``inf``) for every ξ at or above :func:`_sentinel_floor`, so each pass reads one
    array and needs neither the change flags nor a mask."""
    v, w_unchanged = params
    return _log_gap(_sentinel_sum(x, v), w_unchanged)


def _sentinel_terms(x, v):
    """``t = v/(e^{ξv} - 1)`` per slot (0 on sentinels): one ``expm1`` per slot."""
    return v / jnp.expm1(x[..., None] * v)


def _sentinel_sum(x, v):
    """``S(ξ) = Σ t`` over the slots (:func:`_sentinel_terms`): one pass."""
    return jnp.sum(_sentinel_terms(x, v), axis=-1)


def _written_terms(x, v):
    """``(t, S, -S')``: the terms written once (their own pass) and ``S = Σ t`` and
    ``-dS/dξ = Σ t (v + t)`` as two single-output reductions over them."""
    t = _own_pass(_sentinel_terms, x, v)
    s = _own_pass(lambda t: jnp.sum(t, axis=-1), t)
    slope = _own_pass(lambda t, v: jnp.sum(t * (v + t), axis=-1), t, v)
    return t, s, slope


@functools.partial(sentinel_score.defjvp, symbolic_zeros=True)
def _sentinel_score_jvp(primals, tangents):
    # dS/dξ = -Σ t (v + t) and dS/dv = r - ξ t (1 + r) with t = v r, r = 1/(e^{ξv} - 1);
    # the tangent of a sentinel slot is 0 (v is a select of w).  The terms are written once
    # and the score and its slope are two reductions over them (one expm1 per slot).
    x, (v, w_unchanged) = primals
    dx, (dv, dwu) = tangents
    if isinstance(dx, SymbolicZero):
        s = _sentinel_sum(x, v)
        ds = jnp.zeros_like(s)
    else:
        _, s, slope = _written_terms(x, v)
        ds = -slope * dx
    if not isinstance(dv, SymbolicZero):
        r = 1 / jnp.expm1(x[..., None] * v)
        t = v * r
        ds = ds + jnp.sum((r - x[..., None] * t * (1 + r)) * dv, axis=-1)
    return _log_gap_jvp(s, ds, w_unchanged, dwu)


def _sentinel_floor(dtype) -> float:
    """Smallest rate at which every sentinel term of :func:`sentinel_score` is exactly 0:
    ``ξ·finfo.max`` must overflow ``expm1`` (``1024/finfo.max``: 3.0e-36 in float32,
    5.7e-306 in float64).  The likelihood solve iterates at or above it."""
    return 1024.0 / float(jnp.finfo(dtype).max)


def moment_score(x, params):
    r"""Moment equation of L2C eq. 7 as a log-ratio, elementwise in ``x``:

    .. math:: \psi(\xi) = \log\sum_n e^{-\xi w_n} - \log\#\{n: o_n = 0\},

    nonincreasing and convex in ξ.  ``params = (w, m, n_unchanged)``."""
    w, m, n_unchanged = params
    e = jnp.where(m, jnp.exp(-x[..., None] * w), 0)
    return _log_gap(jnp.sum(e, axis=-1), n_unchanged)


def _initial_guess(w, c, m, lo, hi):
    """Equal-interval closed form of L2C §4 with the mean interval, log(N/(N-U)) / mean(w)
    (smoothed by 1/2 so it is finite), clipped strictly inside the clip range."""
    dtype = w.dtype
    n = jnp.sum(m, axis=-1).astype(dtype)
    u = jnp.sum(c, axis=-1).astype(dtype)
    total = jnp.sum(w, axis=-1)
    mean_w = total / jnp.maximum(n, 1)
    ratio = (u + 0.5) / jnp.maximum(n - u, 0.5)
    guess = jnp.log1p(ratio) / jnp.where(mean_w > 0, mean_w, 1)
    guess = jnp.where(jnp.isfinite(guess) & (guess > 0), guess, jnp.sqrt(lo * hi))
    a, b = lo * (1 + 1e-3), hi * (1 - 1e-3)
    return jnp.where(a < b, jnp.clip(guess, a, b), jnp.sqrt(lo * hi))


#: Newton steps in ξ from the left before the log-space iteration (part of ``max_steps``).
_LEFT_STEPS = 3


def _refine_from_left(score, params, x0, lo, hi, steps):
    """``steps`` Newton steps in ξ from the initial guess, taken only where it lies left of
    the root (``score > 0``).  The scores are convex and decreasing in ξ, so these steps
    approach the root monotonically without passing it, which the log-space iteration
    that follows cannot do from the left where the score is concave in log ξ (large ξw)."""

    def step(_, x):
        f, df = jax.jvp(lambda v: score(v, params), (x,), (jnp.ones_like(x),))
        ok = (f > 0) & (df < 0) & jnp.isfinite(f) & jnp.isfinite(df)
        return jnp.clip(x - jnp.where(ok, f / jnp.where(ok, df, -1.0), 0.0), lo, hi)

    return jax.lax.fori_loop(0, steps, step, x0)


def solve_equation(score, params, w, c, m, min_rate, max_rate, max_steps, rtol, throw, what,
                    bracket=None, unroll=0, singular=None, compact=16, start=None):
    """Root of the nonincreasing ``score`` per history, clipped to ``[min_rate, max_rate]``.

    The papers' singular cases are decided by the bounds of the box handed to the
    root-finder: a history without a change (or without observations) has the box
    ``[min_rate, min_rate]``, one where every observation saw a change
    ``[max_rate, max_rate]``; so the estimate and its derivative (that of the bound) come
    out of the same solve.  ``singular = (never, always)`` (optional) gives those two
    cases when the caller already knows them (then ``c`` and ``m`` are not read again).
    ``start`` (optional, with ``bracket``): the first iterate instead of the bracket's left
    end, kept below a crossed upper bound (``solve_monotone(keep_start=True)``).
    """
    lo, hi = clip_bounds(min_rate, max_rate, w.dtype, w.shape[:-1])
    if rtol is None:
        rtol = newton_rtol(w.dtype)
    if singular is None:
        n = _own_pass(_count, m)
        u = _own_pass(_count, c)
        never = u == 0                   # never changed, or empty: the MLE is 0
        always = (u == n) & (n > 0)      # always changed: the MLE is +inf
    else:
        never, always = singular
    lower = jnp.where(always, hi, lo)
    upper = jnp.where(never, lo, hi)
    sg = jax.lax.stop_gradient
    if bracket is not None:  # warm start: Newton from the bracket's left end (or ``start``), no bound passes
        x0 = bracket[0] if start is None else start
        left_steps = 0
    else:
        x0 = _initial_guess(w, c, m, sg(lo), sg(hi))
        left_steps = min(_LEFT_STEPS, max_steps - 1)
        x0 = _refine_from_left(score, sg(params), x0, sg(lo), sg(hi), left_steps)
    roots = solve_monotone(score, params, lower, upper, x0=x0, max_steps=max_steps - left_steps, rtol=rtol,
                           bracket=bracket, take=take_rows, unroll=unroll, compact=compact,
                           probe_first=bracket is not None and w.shape[-1] >= _LONG,
                           keep_start=start is not None)
    num_steps = sg(roots.num_steps) + left_steps
    if throw:
        residual = jnp.where(roots.converged, 0, score(sg(roots.x), sg(params)))
        raise_unless_converged(what, roots.converged, num_steps, residual)
    steps = jnp.where(roots.steps > 0, roots.steps + left_steps, 0)
    return Estimate(roots.x, roots.converged, num_steps, steps)


# ------------------------------------------------- warm start of the likelihood equation
def _singular(stats):
    """``(never, always)`` of :func:`solve_equation` from the statistics: no changed crawl
    (or no crawl), and changed crawls without unchanged time (intervals are positive, so
    ``w_u = 0`` exactly when no crawl was unchanged)."""
    return stats.u == 0, (stats.u > 0) & ~(stats.w_u > 0)


def bracket_from_stats(stats, dtype):
    r"""A bracket of the likelihood equation's root from its sufficient statistics
    (:func:`sentinel_stats`), the warm start of the likelihood solve.

    With :math:`U` changed crawls of total interval :math:`S_c` and unchanged time
    :math:`W_u`, the root of :math:`A(\xi) = \sum_{o_n=1} w_n/(e^{\xi w_n}-1) = W_u` lies in

    .. math:: \Big[\frac{U}{S_c}\log\big(1 + \frac{S_c}{W_u}\big),\ \frac{U}{W_u}\Big]:

    :math:`w \mapsto w/(e^{\xi w}-1)` is convex, so by Jensen
    :math:`A(\xi) \ge U\bar w/(e^{\xi\bar w}-1)` with :math:`\bar w = S_c/U`, which is
    :math:`W_u` at the left end (so :math:`A \ge W_u` there: the root is right of it; the
    left end is the exact root when all changed intervals are equal); each term is at
    most the sum, so the shortest changed interval's term gives another left end,
    :math:`\log(1 + w_{\min}/W_u)/w_{\min}`, and the larger of the two is used; and
    :math:`e^x - 1 \ge x` gives :math:`A(\xi) \le U/\xi`, which is :math:`W_u` at the
    right end.  Newton (on :math:`\log\xi`) starts from the left end; histories of at
    least ``_LONG`` observations start from :func:`taylor_start` instead.  Histories
    without a changed or an unchanged crawl give ``(0, 0)`` and ``(inf, inf)``: decided by
    the clip.
    """
    u, s_c, w_u, w_min = stats.u, stats.s_c, stats.w_u, stats.w_min
    has_c, has_u = (u > 0) & (s_c > 0), w_u > 0
    ratio = s_c / jnp.where(has_u, w_u, 1)
    left = jnp.log1p(ratio) * u / jnp.where(has_c, s_c, 1)
    right = u / jnp.where(has_u, w_u, 1)
    inf = jnp.asarray(jnp.inf, dtype)
    # each term is at most the sum: the shortest changed interval's term alone gives a
    # second left end, far better than Jensen's when ξ w is large and the intervals spread
    big = jnp.finfo(dtype).max
    w_min = jnp.where(has_c & (w_min < big), w_min, 1)
    left = jnp.maximum(left, jnp.log1p(w_min / jnp.where(has_u, w_u, 1)) / w_min)
    left = jnp.where(has_c, jnp.where(has_u, left, inf), 0)
    right = jnp.where(has_c, jnp.where(has_u, jnp.maximum(right, left), inf), 0)
    return jax.lax.stop_gradient(left), jax.lax.stop_gradient(right)


#: Newton steps of the warm-started likelihood solve taken outside the while loop
#: (``solve_monotone(unroll=)``); 0 keeps every step in the loop.
_UNROLL = 0
#: Straggler compaction (``solve_monotone(compact=)``): in each block of histories the
#: pages still iterating are gathered once at most a quarter of them are left, so the last
#: evaluations run on the stragglers alone.
_COMPACT = 4
#: Histories of at least ``_LONG`` observations start a root whose bracket crosses a clip
#: bound on that bound (``solve_monotone(probe_first=True)``) and take their first
#: evaluation in :func:`taylor_start`.  Short histories, whose brackets often cross the
#: upper bound, keep the separate pass at the bounds and start at the bracket's left end.
_LONG = 32


def newton_rtol(dtype) -> float:
    r"""Default tolerance of the likelihood estimators: stop at a Newton step of at most
    :math:`\sqrt{\varepsilon}` in :math:`\log\xi` and take the Newton point.  Newton
    converges quadratically, so that point is within :math:`C\varepsilon` of the root
    (:math:`C=|\psi''/2\psi'|` in :math:`\log\xi`, O(1) for these scores): the dtype's own
    resolution, one evaluation earlier than a tighter tolerance on the step would stop."""
    return float(jnp.finfo(dtype).eps) ** 0.5


def solve_options(max_steps: int, rtol: float | None) -> tuple[int, float | None]:
    max_steps = int(max_steps)
    if max_steps < 1:
        raise ValueError(f"max_steps must be >= 1; got {max_steps}")
    return max_steps, None if rtol is None else float(rtol)


STATIC = ("max_steps", "rtol", "throw")


class _SentinelStats(NamedTuple):
    """Sufficient statistics of the likelihood equation, per history: the sentinel
    intervals ``v`` of :func:`sentinel_score`, the number ``u`` of changed crawls, their
    total interval ``s_c``, the unchanged time ``w_u`` and the shortest changed interval
    ``w_min`` (``finfo.max`` without a change)."""

    v: jax.Array
    u: jax.Array
    s_c: jax.Array
    w_u: jax.Array
    w_min: jax.Array


def sentinel_stats(w, c, m):
    """The sentinel intervals and the sufficient statistics of a history given raw:
    ``w`` the intervals (any values; non-finite or non-positive ones count as masked out,
    like :func:`prepare`), ``c`` the flags, ``m`` the mask or None.

    One array is written, ``v`` (a select on the raw arrays); the unchanged time is a
    select-sum over the raw arrays, and ``u``, ``s_c`` and ``w_min`` are reductions over
    ``v`` (a changed crawl is a slot below the sentinel).  Within a block that stays in
    cache (:func:`solve_likelihood`) selects and comparisons are cheap while converting
    the one-byte flags to floats costs a pass, so the flags are read only here and no
    sanitised copy of the intervals is written."""
    dtype = w.dtype
    big = jnp.finfo(dtype).max
    raw = (w, c) if m is None else (w, c, m)

    def flags(w, c, m=None):  # recomputed inside each pass: no bool array is written
        valid = observed(w, m)
        return valid, valid & (c != 0)

    def unchanged_time(*a):
        valid, changed = flags(*a)
        return jnp.sum(jnp.where(valid & ~changed, a[0], 0), axis=-1)

    v = _own_pass(lambda *a: jnp.where(flags(*a)[1], a[0], big), *raw)
    w_u = _own_pass(unchanged_time, *raw)
    u = _own_pass(lambda v: jnp.sum(jnp.where(v < big, 1, 0).astype(dtype), axis=-1), v)
    s_c = _own_pass(lambda v: jnp.sum(jnp.where(v < big, v, 0), axis=-1), v)
    w_min = _own_pass(lambda v: jnp.min(v, axis=-1), v)
    return _SentinelStats(v, u, s_c, w_u, w_min)


#: Elements (histories x observations) per block of the likelihood solve
#: (:func:`solve_likelihood`): a block's intervals (4 MB in float32) and the arrays the
#: solve writes for it fit in a CPU's last-level cache, so every pass after the first
#: reads cache instead of memory and no large buffer is allocated afresh.
_BLOCK = 1 << 20


def default_block(backend: str | None = None) -> int | None:
    """Slots per block of :func:`solve_likelihood` on ``backend`` (default: JAX's default):
    :data:`_BLOCK` on XLA:CPU (a block's passes read the cache); ``None`` (every history at
    once) on an accelerator, where a ``lax.map`` would run the blocks one after another,
    each filling a fraction of the device."""
    backend = jax.default_backend() if backend is None else backend
    return _BLOCK if backend == "cpu" else None


def solve_likelihood(w, c, m, min_rate, max_rate, max_steps, rtol, throw, what, block=None):
    """The likelihood equation of a history (raw or prepared; ``m`` may be None), solved
    from the bracket of its sufficient statistics (each statistic computed once: the
    params, the bracket and the singular cases share them).

    The histories are solved ``block`` slots at a time (default :func:`default_block`, whole
    histories per block; ``0``: all at once) by a ``lax.map`` over blocks: the roots are those of one solve over all
    histories (each history's iteration is its own; only the stragglers' gathered sums may
    round in another order), and the derivatives pass through the map."""
    lead, k = w.shape[:-1], w.shape[-1]
    pages = math.prod(lead)
    block = default_block() if block is None else (int(block) or None)
    size = pages if block is None else max(block // k, 1)
    args = (max_steps, rtol, throw, what)
    if pages <= size:
        return _solve_block(w, c, m, min_rate, max_rate, *args)
    flat = [None if a is None else a.reshape((pages, k)) for a in (w, c, m)]

    def per_history(b):  # scalar bounds stay scalars; others one per history
        b = jnp.asarray(b, w.dtype)
        return b if b.ndim == 0 else jnp.broadcast_to(b, lead).reshape(pages)

    bounds = [per_history(min_rate), per_history(max_rate)]
    count = -(-pages // size)
    # the last blocks end at the last history (they overlap the ones before when the blocks
    # do not divide the histories): no padded copy of the arrays is made
    starts = [min(i * size, pages - size) for i in range(count)]
    owned = [(i, max(start, starts[i - 1] + size if i else 0) - start) for i, start in enumerate(starts)]

    def one(start):
        def cut(a):
            if a is None or a.ndim == 0:
                return a
            return jax.lax.dynamic_slice_in_dim(a, start, size, 0)
        return _solve_block(*(cut(a) for a in flat + bounds), *args)

    est = jax.lax.map(one, jnp.asarray(starts))

    def join(a):
        return jnp.concatenate([a[i, skip:] for i, skip in owned if skip < size]).reshape(lead)

    return Estimate(join(est.rate), join(est.converged), jnp.max(est.num_steps), join(est.steps))


def _solve_block(w, c, m, min_rate, max_rate, max_steps, rtol, throw, what):
    """:func:`solve_likelihood` of one block (every history at once)."""
    stats = sentinel_stats(w, c, m)
    params = (stats.v, stats.w_u)
    min_rate = jnp.maximum(jnp.asarray(min_rate, w.dtype), _sentinel_floor(w.dtype))
    bracket = bracket_from_stats(stats, w.dtype)
    start, first = None, None
    if w.shape[-1] >= _LONG and max_steps > 1:
        lo, hi = clip_bounds(min_rate, max_rate, w.dtype, w.shape[:-1])
        bracket, start, first = taylor_start(jax.lax.stop_gradient(params), bracket,
                                              jax.lax.stop_gradient(lo), jax.lax.stop_gradient(hi))
        max_steps -= 1
    est = solve_equation(sentinel_score, params, w, c, m, min_rate, max_rate,
                          max_steps, rtol, throw, what, bracket=bracket,
                          unroll=_UNROLL, singular=_singular(stats),
                          compact=_COMPACT, start=start)
    if first is not None:  # the evaluation of taylor_start is the first one
        est = est._replace(num_steps=est.num_steps + 1, steps=est.steps + first.astype(est.steps.dtype))
    return est


def taylor_start(params, bracket, lo, hi):
    r"""The first evaluation of the likelihood equation, at the bracket's left end clipped
    to the clip range, and the start it gives: ``(bracket, start, evaluated)``.

    With :math:`t_n = v_n/(e^{\xi v_n}-1)` the sum :math:`S(\xi) = \sum_n t_n` has
    :math:`S' = -\sum t(v+t)` and :math:`S'' = \sum t(v+t)(v+2t)`, three reductions over
    one ``expm1`` per slot.  Each term is completely monotone in ξ (a sum of decaying
    exponentials), so :math:`S''' \le 0` and, from :math:`a` with :math:`h \ge 0`,

    .. math:: S(a) + S'(a)h \;\le\; S(a+h) \;\le\; S(a) + S'(a)h + \tfrac12 S''(a)h^2 .

    So the root of :math:`S = W_u` lies between the Newton point in ξ and the smaller root
    of the right-hand quadratic: the bracket shrinks to them (computed with a margin for
    the sums' rounding, ``tests/test_estimators.py`` checks them against float64 roots).
    The iteration starts at the root of the second-order model of
    :math:`\psi = \log S - \log W_u` in :math:`\log\xi` (clipped into the new bracket),
    whose error is of third order in the step, so most histories stop at their next
    evaluation (its Newton step is below the tolerance).  A root at or below the lower clip bound closes the bracket there.  Histories
    without a finite positive left end below ``hi`` are left as they were (their
    evaluation here is not counted)."""
    v, w_u = params
    a, b = bracket
    evaluated = (a > 0) & jnp.isfinite(a) & (a < hi) & (b > lo)
    x = jnp.where(evaluated, jnp.clip(a, lo, hi), lo)
    t, s0, s1 = _written_terms(x, v)
    s2 = _own_pass(lambda t, v: jnp.sum(t * (v + t) * (v + 2 * t), axis=-1), t, v)
    gap = s0 - w_u
    right = gap > 0  # the root is right of x
    usable = evaluated & right & (s1 > 0) & (s0 > 0) & jnp.isfinite(s2)
    # proven ends, made safe against rounding: the gap widened by tau (the sums' rounding,
    # k eps of their size, with a factor 8 to spare) and the steps by 1e-3 relative
    tau = 8 * v.shape[-1] * jnp.finfo(v.dtype).eps * (s0 + w_u)
    s1_ = jnp.where(s1 > 0, s1, 1)
    disc = s1 * s1 - 2 * s2 * (gap + tau)
    x_q = x + 2 * (gap + tau) / (s1 + jnp.sqrt(jnp.maximum(disc, 0))) * (1 + 1e-3)
    x_q = jnp.where(usable & (disc >= 0) & jnp.isfinite(x_q), x_q, b)
    x_n = x + jnp.maximum(gap - tau, 0) / s1_ * (1 - 1e-3)
    x_n = jnp.where(usable & jnp.isfinite(x_n), x_n, a)
    # the start: the root of the second-order model of ψ = log S - log W_u in log ξ
    psi = jnp.log(s0) - jnp.log(jnp.where(w_u > 0, w_u, 1))
    d1 = -x * s1 / s0
    d2 = d1 + x * x * s2 / s0 - d1 * d1
    disc_z = d1 * d1 - 2 * d2 * psi
    dz = jnp.where(disc_z >= 0, 2 * psi / (-d1 + jnp.sqrt(jnp.maximum(disc_z, 0))), -psi / d1)
    b = jnp.minimum(b, x_q)
    a = jnp.maximum(a, jnp.minimum(x_n, b))
    guess = x * jnp.exp(dz)
    start = jnp.clip(jnp.where(usable & jnp.isfinite(guess), guess, a), a, b)
    start = jnp.where(evaluated, start, a)
    # a root at or below the lower clip bound is decided (the bracket closes there)
    at_lo = evaluated & ~right & (x <= lo)
    b = jnp.where(at_lo, lo, b)
    return (a, b), start, evaluated

