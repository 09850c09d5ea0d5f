r"""Offline change-rate estimators over padded histories (Learning to Crawl, NeurIPS-19,
Avrachenkov et al.).

Each estimator is ``f(intervals, changed, mask=None, ...) -> rates[...]`` over the padded
format of :mod:`jaxcrawl.estimators` (observations on the last axis).

=========================  ==============================================================
:func:`naive`              changes detected per unit time monitored (Avrachenkov et al. §3.4)
:func:`mle`                maximum likelihood (L2C eq. 6, NeurIPS-19 eq. 10, Avrachenkov eq. 16)
:func:`moment_matching`    L2C eq. 7 (coincides with the MLE under equal intervals)
:func:`mle_smoothed`       NeurIPS-19 Alg. 4 line 11 (imaginary 0.5 intervals, history suffix)
:func:`complete_obs_rate`  NeurIPS-19 eq. 11 with Alg. 4 line 13 smoothing
:func:`full_observation`   L2C App. K eq. 32 (numbers of changes per interval known)
:func:`log_likelihood`     L2C eq. 6
=========================  ==============================================================

The three iterating estimators (:func:`mle`, :func:`moment_matching`,
:func:`mle_smoothed`) solve a monotone equation per history with the shared elementwise
safeguarded Newton (:func:`jaxcrawl._src.rootfind.solve_monotone`, on ``log ξ``), so

* they report convergence: ``return_info=True`` returns an :class:`Estimate`
  ``(rate, converged, num_steps)`` with ``converged`` per history, and ``throw=True``
  raises :class:`jaxcrawl.NonConvergenceError` (inside ``jit`` too) when a history stopped
  at ``max_steps``;
* they are differentiable in forward and reverse mode with respect to the intervals and
  the clip bounds, by the implicit function theorem on the estimating equation (the loop
  is never differentiated).
"""
from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.custom_derivatives import SymbolicZero
from jax.typing import ArrayLike

from jaxcrawl._src.checks import raise_unless_converged
from jaxcrawl._src.rootfind import solve_monotone, take_rows
from jaxcrawl._src.special import log_gap as _log_gap

from ._history import (
    DEFAULT_MAX_RATE,
    DEFAULT_MIN_RATE,
    broadcast_history,
    clip_bounds,
    observed,
    prepare,
    suffix_mask,
    validate_bounds,
    validate_history,
    validate_window,
)

__all__ = [
    "DEFAULT_MIN_RATE",
    "DEFAULT_MAX_RATE",
    "Estimate",
    "naive",
    "log_likelihood",
    "mle",
    "moment_matching",
    "mle_smoothed",
    "complete_obs_rate",
    "full_observation",
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
# Closed-form estimators
# ---------------------------------------------------------------------------------------


def naive(intervals: ArrayLike, changed: ArrayLike, mask: ArrayLike | None = None) -> jax.Array:
    r"""Naive estimator: detected changes per unit time monitored (Avrachenkov et al. §3.4).

    .. math:: \hat\xi = \frac{\sum_n o_n}{\sum_n w_n}

    In the Poisson-crawl setup of Avrachenkov et al. (2022) §3.4 (:math:`q_k = p\hat I_k/k`,
    whose limit :math:`\sum o_n/\sum w_n` shares).  It ignores changes missed between
    crawls, so it is biased and inconsistent: with crawls at Poisson rate :math:`p` it
    converges to :math:`p\xi/(\xi+p) < \xi`.

    Args:
      intervals: ``(..., k)`` time since the previous crawl, > 0 where observed.
      changed: ``(..., k)`` 0/1 change indicators.
      mask: optional ``(..., k)`` bool, True where an observation exists.

    Returns:
      ``(...)`` rates.  A history with no observed time (empty) gives 0.
    """
    validate_history(intervals, changed, mask)
    return _naive_impl(intervals, changed, mask)


@jax.jit
def _naive_impl(intervals, changed, mask):
    w, c, _ = prepare(intervals, changed, mask)
    total = jnp.sum(w, axis=-1)
    u = jnp.sum(c, axis=-1).astype(w.dtype)
    return jnp.where(total > 0, u / jnp.where(total > 0, total, 1), jnp.zeros((), w.dtype))


def log_likelihood(rate: ArrayLike, intervals: ArrayLike, changed: ArrayLike,
                   mask: ArrayLike | None = None) -> jax.Array:
    r"""Log-likelihood of a partially observed history (L2C eq. 6).

    .. math:: \mathcal L(\xi) = \sum_{n:o_n=1}\ln(1-e^{-\xi w_n}) - \sum_{n:o_n=0}\xi w_n

    Args:
      rate: ``(...)`` change rates ξ > 0 (broadcast against the leading axes).
      intervals, changed, mask: the history, as in :func:`mle`.

    Returns:
      ``(...)`` log-likelihoods (computed as ``log(-expm1(-ξw))`` for accuracy).
    """
    validate_history(intervals, changed, mask)
    return _log_likelihood_impl(rate, intervals, changed, mask)


@jax.jit
def _log_likelihood_impl(rate, intervals, changed, mask):
    w, c, _ = prepare(intervals, changed, mask)
    xi = jnp.asarray(rate, w.dtype)[..., None]
    xw = xi * w
    ll_changed = jnp.log(-jnp.expm1(-jnp.where(c, xw, 1)))
    return jnp.sum(jnp.where(c, ll_changed, -xw), axis=-1)


# ---------------------------------------------------------------------------------------
# Estimating equations, solved per history by the shared safeguarded Newton
# ---------------------------------------------------------------------------------------


def _own_pass(f, *args):
    """``f(*args)`` as its own XLA computation (a ``cond`` whose branches are both ``f``,
    on an opaque always-true predicate that is never batched under ``vmap``): XLA then
    cannot fuse its reduction with a sibling one over the same operands into a
    multi-output reduction, which XLA:CPU runs several times slower than separate ones."""
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
def _sentinel_score(x, params):
    r"""Score of L2C eq. 6 (NeurIPS-19 eq. 10) as a log-ratio, elementwise in ``x``,
    nonincreasing and convex in ξ:

    .. math:: \psi(\xi) = \log\sum_{o_n=1}\frac{w_n}{e^{\xi w_n}-1} - \log\sum_{o_n=0} w_n
              = \log\sum_n \frac{v_n}{e^{\xi v_n}-1} - \log W_u,

    on one array: ``params = (v, w_unchanged)`` with ``v`` the changed crawls' intervals
    and ``finfo.max`` on every other slot (unchanged, masked or padded;
    :func:`_sentinel_stats`), and the unchanged time ``W_u`` (summed once).

    A sentinel slot's term is exactly 0 (``ξ·finfo.max`` overflows, ``expm1`` gives
    ``inf``) for every ξ at or above :func:`_sentinel_floor`, so each pass reads one
    array and needs neither the change flags nor a mask: a third fewer bytes and no
    mask arithmetic, and XLA has no loop-invariant conversion of the flags to hoist
    into a materialised float array (which it did with the flags as a mask, issue 16)."""
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


@functools.partial(_sentinel_score.defjvp, symbolic_zeros=True)
def _sentinel_score_jvp(primals, tangents):
    # dS/dξ = -Σ t (v + t) and dS/dv = r - ξ t (1 + r) with t = v r, r = 1/(e^{ξv} - 1);
    # the tangent of a sentinel slot is 0 (v is a select of w).
    # The terms t = v/(e^{ξv} - 1) are written once (one expm1 per slot) and the score and
    # its slope are two reductions over them: in a block of histories that stays in cache
    # (_solve_likelihood) this is cheaper than two passes that each recompute the expm1.
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
    """Smallest rate at which every sentinel term of :func:`_sentinel_score` is exactly 0:
    ``ξ·finfo.max`` must overflow ``expm1`` (``1024/finfo.max``: 3.0e-36 in float32,
    5.7e-306 in float64).  The likelihood solve iterates at or above it."""
    return 1024.0 / float(jnp.finfo(dtype).max)


def _moment_score(x, params):
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


def _solve_equation(score, params, w, c, m, min_rate, max_rate, max_steps, rtol, throw, what,
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
    """``(never, always)`` of :func:`_solve_equation` from the statistics: no changed crawl
    (or no crawl), and changed crawls without unchanged time (intervals are positive, so
    ``w_u = 0`` exactly when no crawl was unchanged)."""
    return stats.u == 0, (stats.u > 0) & ~(stats.w_u > 0)


def _bracket_from_stats(stats, dtype):
    r"""A bracket of the likelihood equation's root from its sufficient statistics
    (:func:`_sentinel_stats`; issue 16's warm start).

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
    right end.  From the left end Newton (on :math:`\log\xi`) needs about three
    evaluations for most histories (``tests/test_estimators.py`` asserts the
    distribution); histories of at least ``_LONG`` observations take
    :func:`_taylor_start` from it instead (two for most).  Histories without a changed or an unchanged crawl give ``(0, 0)`` and
    ``(inf, inf)``: decided by the clip.
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


#: Newton steps of the warm-started likelihood solve taken outside the while loop (see
#: :func:`jaxcrawl._src.rootfind._iterate_counting`).  0: at 18.5M pages x 8 observations
#: four unrolled steps cost 5.2 s against 4.8 s in the loop (one process, load 2.2), while
#: at 200,000 x 200 they gained a few percent; the loop is the safer default.
_UNROLL = 0


#: Straggler compaction of the likelihood solve (``solve_monotone(compact=)``): in each
#: block of histories (:func:`_solve_likelihood`) the pages still iterating are gathered
#: once at most a quarter are left, so the last evaluations run on the stragglers alone.
#: Issue 16, stop 31, in blocks: 200,000 x 200 best at 1/4 (1/2 and 1/8 slower); 18.5M x 8
#: at 1/4 1.80-1.85 s, at 1/16 1.90-1.96 s, at 1/2 1.92-1.99 s (load ~1.5).
_COMPACT = 4
#: Histories of at least ``_LONG`` observations start a root whose bracket crosses a clip
#: bound on that bound (``solve_monotone(probe_first=True)``) instead of a separate pass
#: at the bounds, and take their first evaluation in :func:`_taylor_start`.  Short
#: histories keep the pass and the left end: at 18.5M x 8 many brackets cross the upper
#: bound (a few unchanged crawls) and starting on it cost 2.2-2.5 s against 1.8-1.85 s
#: (up to 13 evaluations instead of 5).
_LONG = 32


def newton_rtol(dtype) -> float:
    r"""Default tolerance of the likelihood estimators: stop at a Newton step of at most
    :math:`\sqrt{\varepsilon}` in :math:`\log\xi` and take the Newton point.  Newton
    converges quadratically, so that point is within :math:`C\varepsilon` of the root
    (:math:`C=|\psi''/2\psi'|` in :math:`\log\xi`, O(1) for these scores): the dtype's own
    resolution, one evaluation earlier than a tolerance of :math:`4\varepsilon^{3/4}`, whose
    Newton point lies far below it (issue 16: 18.5M pages x 8 observations in 5 iterations
    instead of 8, the estimates within 6e-7 relative in float32)."""
    return float(jnp.finfo(dtype).eps) ** 0.5


def _options(max_steps: int, rtol: float | None) -> tuple[int, float | None]:
    max_steps = int(max_steps)
    if max_steps < 1:
        raise ValueError(f"max_steps must be >= 1; got {max_steps}")
    return max_steps, None if rtol is None else float(rtol)


_STATIC = ("max_steps", "rtol", "throw")


def mle(intervals: ArrayLike, changed: ArrayLike, mask: ArrayLike | None = None, *,
        min_rate: ArrayLike = DEFAULT_MIN_RATE, max_rate: ArrayLike = DEFAULT_MAX_RATE,
        max_steps: int = 60, rtol: float | None = None, return_info: bool = False,
        throw: bool = False) -> jax.Array | Estimate:
    r"""Maximum-likelihood change rate from partial observations, clipped (L2C eq. 6).

    Solves the likelihood equation (L2C eq. 6 differentiated; NeurIPS-19 eq. 10;
    Avrachenkov et al. eq. 16)

    .. math:: \sum_{n:o_n=1} \frac{w_n}{e^{\xi w_n}-1} = \sum_{n:o_n=0} w_n

    for every history at once, written as ``log LHS − log RHS`` (convex and decreasing in
    ξ), and clips the root to ``[min_rate, max_rate]``.  From the equal-interval closed
    form, up to three Newton steps in ξ are taken where it lies left of the root
    (convexity makes them monotone), then the shared elementwise safeguarded Newton
    iterates on ``log ξ`` (Newton inside a shrinking bracket, bisection as the fallback).
    Because the score is monotone, clipping the root is the same as maximising the
    likelihood over the interval.

    Edge cases (finite, by the clip):

    * every observation saw a change: the likelihood increases forever -> ``max_rate``;
    * no observation saw a change: the MLE is 0 -> ``min_rate``;
    * empty history (no observation under the mask): flat likelihood -> ``min_rate``;
    * a single observation: ``max_rate`` if it saw a change, else ``min_rate``.

    Under equal intervals ``w`` the root is ``log(N/(N-U))/w``, identical to
    :func:`moment_matching` (L2C §4).

    Derivatives with respect to ``intervals``, ``min_rate`` and ``max_rate`` are exact, in
    forward and reverse mode, by the implicit function theorem on the likelihood equation
    (a clipped estimate has the derivative of its bound).

    Args:
      intervals: ``(..., k)`` time since the previous crawl, > 0 where observed.
      changed: ``(..., k)`` 0/1 change indicators.
      mask: optional ``(..., k)`` bool, True where an observation exists.
      min_rate, max_rate: the clip range ``0 < min_rate < max_rate`` (scalars or arrays
        broadcasting against the leading axes).  Defaults 1e-9 and 25 (L2C §6).
      max_steps: cap on Newton iterations, the steps from the left included (each is one
        pass over the histories); simulated histories need 6-10.
      rtol: the Newton step in ``log ξ`` at which a history stops (the Newton point is
        taken); default ``sqrt(eps)`` of the dtype (:func:`newton_rtol`: the point is then
        within a few eps of the root).
      return_info: return an :class:`Estimate` ``(rate, converged, num_steps)`` instead of
        the rates alone.
      throw: raise :class:`jaxcrawl.NonConvergenceError` (through a host callback, so
        inside ``jit`` too) when a history stops at ``max_steps`` before its tolerance.

    Returns:
      ``(...)`` estimated rates in the dtype of ``intervals`` (float32 unless float64 given
      with x64 enabled), or an :class:`Estimate` with ``return_info=True``.
    """
    validate_history(intervals, changed, mask)
    validate_bounds(min_rate, max_rate)
    max_steps, rtol = _options(max_steps, rtol)
    est = _mle_impl(intervals, changed, mask, min_rate, max_rate, max_steps=max_steps, rtol=rtol,
                    throw=bool(throw))
    return est if return_info else est.rate


@functools.partial(jax.jit, static_argnames=_STATIC)
def _mle_impl(intervals, changed, mask, min_rate, max_rate, *, max_steps, rtol, throw):
    # broadcast and cast only: the solve reads the raw intervals and sanitises them on the
    # way (no sanitised copy of the intervals is written; see _sentinel_stats)
    w, c, m = broadcast_history(intervals, changed, mask)
    return _solve_likelihood(w, c, m, min_rate, max_rate, max_steps, rtol, throw, "estimators.mle")


class _SentinelStats(NamedTuple):
    """Sufficient statistics of the likelihood equation, per history: the sentinel
    intervals ``v`` of :func:`_sentinel_score`, the number ``u`` of changed crawls, their
    total interval ``s_c``, the unchanged time ``w_u`` and the shortest changed interval
    ``w_min`` (``finfo.max`` without a change)."""

    v: jax.Array
    u: jax.Array
    s_c: jax.Array
    w_u: jax.Array
    w_min: jax.Array


def _sentinel_stats(w, c, m):
    """The sentinel intervals and the sufficient statistics of a history given raw:
    ``w`` the intervals (any values; non-finite or non-positive ones count as masked out,
    like :func:`prepare`), ``c`` the flags, ``m`` the mask or None.

    One array is written, ``v`` (a select on the raw arrays); the unchanged time is a
    select-sum over the raw arrays, and ``u``, ``s_c`` and ``w_min`` are reductions over
    ``v`` (a changed crawl is a slot below the sentinel).  This is written for a block of
    histories that stays in cache (:func:`_solve_likelihood`): there a select or a
    comparison costs little, while each conversion of a one-byte flag to a float costs a
    pass (at 200,000 x 200 in blocks: 45 ms for the flag-code statistics of issue 16's
    stop 30, about half with these).  A sanitised copy of the intervals is never
    written."""
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
#: (:func:`_solve_likelihood`): a block's intervals (4 MB in float32) and the arrays the
#: solve writes for it stay in the 32 MB L3 cache of this machine, so every pass after
#: the first reads cache instead of memory, and no large buffer is allocated afresh (the
#: page faults of fresh 160 MB buffers were a third of the solve, stop 30).  Issue 16,
#: stop 31 (load ~1): 200,000 x 200 in one block 0.25 s, in blocks of 2^18 / 2^19 /
#: 2^20 / 2^21 slots 0.16 / 0.14 / 0.13 / 0.15 s (before the Taylor start); 18.5M x 8 in
#: one block 3.2 s, in blocks of 2^20 2.6 s (1.8 s with the block statistics for short
#: histories too).
_BLOCK = 1 << 20


def _solve_likelihood(w, c, m, min_rate, max_rate, max_steps, rtol, throw, what, block=None):
    """The likelihood equation of a history (raw or prepared; ``m`` may be None), solved
    from the bracket of its sufficient statistics (each statistic computed once: the
    params, the bracket and the singular cases share them).

    The histories are solved ``block`` slots at a time (default ``_BLOCK``, whole histories
    per block) by a ``lax.map`` over blocks: the roots are those of one solve over all
    histories (each history's iteration is its own; only the stragglers' gathered sums may
    round in another order), and the derivatives pass through the map."""
    lead, k = w.shape[:-1], w.shape[-1]
    pages = math.prod(lead)
    size = max((_BLOCK if block is None else int(block)) // k, 1)
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
    """:func:`_solve_likelihood` of one block (every history at once)."""
    stats = _sentinel_stats(w, c, m)
    params = (stats.v, stats.w_u)
    min_rate = jnp.maximum(jnp.asarray(min_rate, w.dtype), _sentinel_floor(w.dtype))
    bracket = _bracket_from_stats(stats, w.dtype)
    start, first = None, None
    if w.shape[-1] >= _LONG and max_steps > 1:
        lo, hi = clip_bounds(min_rate, max_rate, w.dtype, w.shape[:-1])
        bracket, start, first = _taylor_start(jax.lax.stop_gradient(params), bracket,
                                              jax.lax.stop_gradient(lo), jax.lax.stop_gradient(hi))
        max_steps -= 1
    est = _solve_equation(_sentinel_score, params, w, c, m, min_rate, max_rate,
                          max_steps, rtol, throw, what, bracket=bracket,
                          unroll=_UNROLL, singular=_singular(stats),
                          compact=_COMPACT, start=start)
    if first is not None:  # the evaluation of _taylor_start is the first one
        est = est._replace(num_steps=est.num_steps + 1, steps=est.steps + first.astype(est.steps.dtype))
    return est


def _taylor_start(params, bracket, lo, hi):
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
    whose error is of third order in the step: most histories then stop at their next
    evaluation (its Newton step is below the tolerance), where the left end needed two or
    three (200,000 x 200: 2 evaluations for 83% of the pages, 3 for the rest, against up to
    5).  A root at or below the lower clip bound closes the bracket there.  Histories
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


def moment_matching(intervals: ArrayLike, changed: ArrayLike, mask: ArrayLike | None = None, *,
                    min_rate: ArrayLike = DEFAULT_MIN_RATE, max_rate: ArrayLike = DEFAULT_MAX_RATE,
                    max_steps: int = 60, rtol: float | None = None, return_info: bool = False,
                    throw: bool = False) -> jax.Array | Estimate:
    r"""Moment-matching estimator of L2C eq. 7, clipped.

    With :math:`\hat p = \frac1N\sum_n (1-o_n)` the fraction of crawls that saw no change,
    :math:`\tilde\xi` solves

    .. math:: \hat p = \frac1N \sum_{n=1}^N e^{-\tilde\xi w_n}

    (its right side decreases in ξ) and :math:`\hat\xi = \max(\xi_{\min},\min(\xi_{\max},\tilde\xi))`.
    This is the estimator that :func:`lemma3_halfwidth` covers.  Under equal intervals it
    coincides with :func:`mle`.  The papers' instabilities (:math:`\hat p = 0` gives
    :math:`\tilde\xi=\infty`, :math:`\hat p = 1` gives 0) are resolved by the clip:
    all-changed -> ``max_rate``; never-changed, empty -> ``min_rate``; a single
    observation -> one of the two.  Solved and differentiated as :func:`mle` is.

    Args:
      intervals, changed, mask, min_rate, max_rate, max_steps, rtol, return_info, throw:
        as in :func:`mle`.

    Returns:
      ``(...)`` estimated rates, or an :class:`Estimate` with ``return_info=True``.
    """
    validate_history(intervals, changed, mask)
    validate_bounds(min_rate, max_rate)
    max_steps, rtol = _options(max_steps, rtol)
    est = _mm_impl(intervals, changed, mask, min_rate, max_rate, max_steps=max_steps, rtol=rtol,
                   throw=bool(throw))
    return est if return_info else est.rate


@functools.partial(jax.jit, static_argnames=_STATIC)
def _mm_impl(intervals, changed, mask, min_rate, max_rate, *, max_steps, rtol, throw):
    w, c, m = prepare(intervals, changed, mask)
    n_unchanged = jnp.sum(m & ~c, axis=-1).astype(w.dtype)
    return _solve_equation(_moment_score, (w, m, n_unchanged), w, c, m, min_rate, max_rate,
                           max_steps, rtol, throw, "estimators.moment_matching")


def mle_smoothed(intervals: ArrayLike, changed: ArrayLike, mask: ArrayLike | None = None, *,
                 window: ArrayLike | None = None, time: ArrayLike | None = None,
                 offset: ArrayLike = 0.0, smoothing: ArrayLike = 0.5,
                 min_rate: ArrayLike = DEFAULT_MIN_RATE, max_rate: ArrayLike = DEFAULT_MAX_RATE,
                 max_steps: int = 60, rtol: float | None = None, return_info: bool = False,
                 throw: bool = False) -> jax.Array | Estimate:
    r"""Smoothed MLE of LambdaLearnAndCrawl (NeurIPS-19 Alg. 4 line 11).

    Adds one imaginary *changed* and one imaginary *unchanged* observation interval of
    length ``smoothing`` (0.5 in the paper) to the likelihood equation (NeurIPS-19 eq. 10)
    and solves

    .. math:: \sum_{j:z_j=1}\frac{a_j}{e^{a_j\lambda}-1} + \frac{s}{e^{s\lambda}-1}
              = \sum_{j:z_j=0} a_j + s

    over the history suffix: the observations whose crawl time
    :math:`t_j = \text{offset} + \sum_{i\le j} a_i` lies in ``(time - window, time]``.
    The smoothing removes the singularities without affecting consistency, so the root is
    always finite and positive: all-changed histories give a finite rate, never-changed
    ones a positive rate, and an empty history gives :math:`\ln 2/s` (``2 ln 2 ≈ 1.386``
    for s = 0.5).  The result is still clipped to ``[min_rate, max_rate]``.  Solved,
    differentiated (also with respect to ``smoothing``) and reported as :func:`mle` is.

    Args:
      intervals, changed, mask: the history, as in :func:`mle`.
      window: length (in time units) of the history suffix to use (the paper's S(n));
        ``None`` uses the whole history.
      time: end of the suffix (e.g. the start of the current epoch); ``None`` means the
        time of the last observation.
      offset: time of the first crawl, ``(...)`` or scalar (the data set's first-crawl
        offsets).  Only matters together with ``time``.
      smoothing: length ``s`` of the imaginary intervals (default 0.5).
      min_rate, max_rate, max_steps, rtol, return_info, throw: as in :func:`mle`.

    Returns:
      ``(...)`` estimated rates, or an :class:`Estimate` with ``return_info=True``.
    """
    validate_history(intervals, changed, mask)
    validate_bounds(min_rate, max_rate)
    validate_window(window, smoothing)
    max_steps, rtol = _options(max_steps, rtol)
    est = _mle_smoothed_impl(intervals, changed, mask, window, time, offset, smoothing, min_rate,
                             max_rate, max_steps=max_steps, rtol=rtol, throw=bool(throw))
    return est if return_info else est.rate


@functools.partial(jax.jit, static_argnames=_STATIC)
def _mle_smoothed_impl(intervals, changed, mask, window, time, offset, smoothing, min_rate,
                       max_rate, *, max_steps, rtol, throw):
    w, c, m = prepare(intervals, changed, mask)
    dtype = w.dtype
    keep, _ = suffix_mask(w, m, offset, time, window)
    w = jnp.where(keep, w, 0)
    c = c & keep
    batch = w.shape[:-1]
    s = jnp.broadcast_to(jnp.asarray(smoothing, dtype), batch)[..., None]
    w = jnp.concatenate([w, s, s], axis=-1)
    c = jnp.concatenate([c, jnp.ones(batch + (1,), bool), jnp.zeros(batch + (1,), bool)], axis=-1)
    keep = jnp.concatenate([keep, jnp.ones(batch + (2,), bool)], axis=-1)
    return _solve_likelihood(w, c, keep, min_rate, max_rate, max_steps, rtol, throw, "estimators.mle_smoothed")


def complete_obs_rate(intervals: ArrayLike, changed: ArrayLike, mask: ArrayLike | None = None, *,
                      window: ArrayLike | None = None, time: ArrayLike | None = None,
                      offset: ArrayLike = 0.0, smoothing: ArrayLike = 0.5,
                      min_rate: ArrayLike = DEFAULT_MIN_RATE,
                      max_rate: ArrayLike = DEFAULT_MAX_RATE) -> jax.Array:
    r"""Change rate of a page with complete change observations (NeurIPS-19 eq. 11, Alg. 4 line 13).

    For a complete-observation page every change arrives as a signal, so the rate is the
    observation rate: the number U of change signals in the history suffix over its
    duration T (eq. 11, the Poisson MLE).  Alg. 4 line 13 adds an imaginary 0.5
    observation to the count so that a period without signals does not give rate 0:

    .. math:: \hat\lambda = \frac{U + s}{T}

    Here the history's ``changed`` entries count the signals (a 1 for each observation
    that carried a change signal), the suffix is ``(time - window, time]`` as in
    :func:`mle_smoothed`, and ``T = time - max(offset, time - window)`` is the part of the
    suffix that was monitored (``time`` defaults to the last observation,
    ``offset + sum(intervals)``).  The result is clipped to ``[min_rate, max_rate]``; a
    suffix of zero duration (e.g. an empty history with ``time=None``) gives ``max_rate``.
    ``smoothing=0`` gives the unsmoothed eq. 11.

    Args:
      intervals, changed, mask: the history of change signals (or crawls).
      window, time, offset: the history suffix, as in :func:`mle_smoothed`.
      smoothing: imaginary count added to U (default 0.5); must be >= 0.
      min_rate, max_rate: the clip range.

    Returns:
      ``(...)`` estimated rates.
    """
    validate_history(intervals, changed, mask)
    validate_bounds(min_rate, max_rate)
    validate_window(window, smoothing, zero_smoothing_ok=True)
    return _complete_obs_impl(intervals, changed, mask, window, time, offset, smoothing, min_rate, max_rate)


@jax.jit
def _complete_obs_impl(intervals, changed, mask, window, time, offset, smoothing, min_rate, max_rate):
    w, c, m = prepare(intervals, changed, mask)
    dtype = w.dtype
    keep, end = suffix_mask(w, m, offset, time, window)
    u = jnp.sum(c & keep, axis=-1).astype(dtype)
    start = jnp.broadcast_to(jnp.asarray(offset, dtype), end.shape)
    if window is not None:
        start = jnp.maximum(start, end - jnp.asarray(window, dtype))
    duration = end - start
    lo, hi = clip_bounds(min_rate, max_rate, dtype, u.shape)
    pos = duration > 0
    rate = (u + jnp.asarray(smoothing, dtype)) / jnp.where(pos, duration, 1)
    rate = jnp.where(pos, rate, hi)
    return jnp.clip(rate, lo, hi)


def full_observation(intervals: ArrayLike, counts: ArrayLike, mask: ArrayLike | None = None, *,
                     min_rate: ArrayLike = DEFAULT_MIN_RATE,
                     max_rate: ArrayLike = DEFAULT_MAX_RATE) -> jax.Array:
    r"""Full-observation estimator (L2C App. K eq. 32), clipped.

    When every crawl reveals the *number* of changes :math:`x_n` since the previous one
    (e.g. RSS/ATOM feeds),

    .. math:: \tilde\xi = \frac{1}{y_N}\sum_{n=1}^N x_n,\qquad y_N = \sum_n w_n,

    and :math:`\hat\xi = \max(\xi_{\min}, \min(\xi_{\max}, \tilde\xi))`.  Covered by
    :func:`lemma8_halfwidth`.  No changes -> ``min_rate``; an empty history -> ``min_rate``.

    Args:
      intervals: ``(..., k)`` time since the previous crawl, > 0 where observed.
      counts: ``(..., k)`` non-negative integer numbers of changes per interval.
      mask: optional ``(..., k)`` bool, True where an observation exists.
      min_rate, max_rate: the clip range.

    Returns:
      ``(...)`` estimated rates.
    """
    validate_history(intervals, counts, mask, changed_name="counts", counts=True)
    validate_bounds(min_rate, max_rate)
    return _full_observation_impl(intervals, counts, mask, min_rate, max_rate)


@jax.jit
def _full_observation_impl(intervals, counts, mask, min_rate, max_rate):
    w, x, _ = prepare(intervals, counts, mask, counts=True)
    total = jnp.sum(w, axis=-1)
    lo, hi = clip_bounds(min_rate, max_rate, w.dtype, total.shape)
    rate = jnp.sum(x, axis=-1) / jnp.where(total > 0, total, 1)
    rate = jnp.where(total > 0, rate, lo)
    return jnp.clip(rate, lo, hi)
