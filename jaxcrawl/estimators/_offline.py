"""Offline change-rate estimators over padded histories (L2C eq. 6-7 and App. K eq. 32,
NeurIPS-19 eq. 10-11 and Alg. 4, Avrachenkov et al. §3.4); the equations are solved in
:mod:`jaxcrawl._src.likelihood`."""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._src.checks import library_errors
from .._src.history import (
    DEFAULT_MAX_RATE,
    DEFAULT_MIN_RATE,
    broadcast_history,
    clip_bounds,
    prepare,
    suffix_mask,
    validate_bounds,
    validate_history,
    validate_window,
)
from .._src.likelihood import (
    STATIC,
    Estimate,
    moment_score,
    solve_equation,
    solve_likelihood,
    solve_options,
)


def naive(intervals: ArrayLike, changed: ArrayLike, mask: ArrayLike | None = None) -> jax.Array:
    r"""Naive estimator: detected changes per unit time monitored (Avrachenkov et al. §3.4).

    .. math:: \hat\xi = \frac{\sum_n o_n}{\sum_n w_n}

    It ignores changes missed between crawls, so it is biased: with Poisson crawls at rate
    :math:`p` it converges to :math:`p\xi/(\xi+p) < \xi`.  The history is as in
    :func:`mle`; an empty history gives 0.
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



def mle(intervals: ArrayLike, changed: ArrayLike, mask: ArrayLike | None = None, *,
        min_rate: ArrayLike = DEFAULT_MIN_RATE, max_rate: ArrayLike = DEFAULT_MAX_RATE,
        max_steps: int = 60, rtol: float | None = None, return_info: bool = False,
        throw: bool = False) -> jax.Array | Estimate:
    r"""Maximum-likelihood change rate from partial observations, clipped (L2C eq. 6).

    Solves the likelihood equation (L2C eq. 6 differentiated; NeurIPS-19 eq. 10;
    Avrachenkov et al. eq. 16)

    .. math:: \sum_{n:o_n=1} \frac{w_n}{e^{\xi w_n}-1} = \sum_{n:o_n=0} w_n

    for every history at once, written as ``log LHS − log RHS`` (convex and decreasing in
    ξ), by a safeguarded Newton iteration on ``log ξ`` from a bracket of the root, and
    clips the root to ``[min_rate, max_rate]`` (the same as maximising the likelihood over
    that interval).  The clip decides the singular cases: every observation changed ->
    ``max_rate``; none changed, or an empty history -> ``min_rate``.  Under equal
    intervals ``w`` the root is ``log(N/(N-U))/w``, as for :func:`moment_matching` (L2C §4).
    Derivatives with respect to ``intervals``, ``min_rate`` and ``max_rate`` are exact, in
    forward and reverse mode, by the implicit function theorem (a clipped estimate has
    the derivative of its bound).

    Args:
      intervals: ``(..., k)`` time since the previous crawl, > 0 where observed.
      changed: ``(..., k)`` 0/1 change indicators.
      mask: optional ``(..., k)`` bool, True where an observation exists.
      min_rate, max_rate: the clip range ``0 < min_rate < max_rate`` (scalars or arrays
        broadcasting against the leading axes).  Defaults 1e-9 and 25 (L2C §6).
      max_steps: cap on Newton iterations (each is one pass over the histories).
      rtol: the Newton step in ``log ξ`` at which a history stops; default ``sqrt(eps)``
        of the dtype (the Newton point is then within a few eps of the root).
      return_info: return an :class:`Estimate` instead of the rates alone.
      throw: raise :class:`jaxcrawl.NonConvergenceError` (inside ``jit`` too) when a
        history stops at ``max_steps`` before its tolerance.

    Returns:
      ``(...)`` estimated rates in the dtype of ``intervals``, or an :class:`Estimate`.
    """
    validate_history(intervals, changed, mask)
    validate_bounds(min_rate, max_rate)
    max_steps, rtol = solve_options(max_steps, rtol)
    with library_errors():  # a throw=True failure of the compiled solve as NonConvergenceError
        est = _mle_impl(intervals, changed, mask, min_rate, max_rate, max_steps=max_steps, rtol=rtol,
                        throw=bool(throw))
    return est if return_info else est.rate


@functools.partial(jax.jit, static_argnames=STATIC)
def _mle_impl(intervals, changed, mask, min_rate, max_rate, *, max_steps, rtol, throw):
    # broadcast only: the solve sanitises the raw intervals on the way (sentinel_stats)
    w, c, m = broadcast_history(intervals, changed, mask)
    return solve_likelihood(w, c, m, min_rate, max_rate, max_steps, rtol, throw, "estimators.mle")



def moment_matching(intervals: ArrayLike, changed: ArrayLike, mask: ArrayLike | None = None, *,
                    min_rate: ArrayLike = DEFAULT_MIN_RATE, max_rate: ArrayLike = DEFAULT_MAX_RATE,
                    max_steps: int = 60, rtol: float | None = None, return_info: bool = False,
                    throw: bool = False) -> jax.Array | Estimate:
    r"""Moment-matching estimator of L2C eq. 7, clipped.

    With :math:`\hat p = \frac1N\sum_n (1-o_n)` the fraction of crawls that saw no change,
    :math:`\tilde\xi` solves

    .. math:: \hat p = \frac1N \sum_{n=1}^N e^{-\tilde\xi w_n}

    and is clipped to ``[min_rate, max_rate]`` (covered by :func:`lemma3_halfwidth`; equal
    to :func:`mle` under equal intervals).  The clip resolves :math:`\hat p \in \{0, 1\}`
    as for :func:`mle`.  Solved and differentiated as :func:`mle` is.

    Args:
      intervals, changed, mask, min_rate, max_rate, max_steps, rtol, return_info, throw:
        as in :func:`mle`.

    Returns:
      ``(...)`` estimated rates, or an :class:`Estimate` with ``return_info=True``.
    """
    validate_history(intervals, changed, mask)
    validate_bounds(min_rate, max_rate)
    max_steps, rtol = solve_options(max_steps, rtol)
    with library_errors():
        est = _mm_impl(intervals, changed, mask, min_rate, max_rate, max_steps=max_steps, rtol=rtol,
                       throw=bool(throw))
    return est if return_info else est.rate


@functools.partial(jax.jit, static_argnames=STATIC)
def _mm_impl(intervals, changed, mask, min_rate, max_rate, *, max_steps, rtol, throw):
    w, c, m = prepare(intervals, changed, mask)
    n_unchanged = jnp.sum(m & ~c, axis=-1).astype(w.dtype)
    return solve_equation(moment_score, (w, m, n_unchanged), w, c, m, min_rate, max_rate,
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
    The smoothing keeps the root finite and positive (an empty history gives
    :math:`\ln 2/s`); it is clipped to ``[min_rate, max_rate]`` and solved, differentiated
    (also with respect to ``smoothing``) and reported as :func:`mle` is.

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
    max_steps, rtol = solve_options(max_steps, rtol)
    with library_errors():
        est = _mle_smoothed_impl(intervals, changed, mask, window, time, offset, smoothing, min_rate,
                                 max_rate, max_steps=max_steps, rtol=rtol, throw=bool(throw))
    return est if return_info else est.rate


@functools.partial(jax.jit, static_argnames=STATIC)
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
    return solve_likelihood(w, c, keep, min_rate, max_rate, max_steps, rtol, throw, "estimators.mle_smoothed")


def complete_obs_rate(intervals: ArrayLike, changed: ArrayLike, mask: ArrayLike | None = None, *,
                      window: ArrayLike | None = None, time: ArrayLike | None = None,
                      offset: ArrayLike = 0.0, smoothing: ArrayLike = 0.5,
                      min_rate: ArrayLike = DEFAULT_MIN_RATE,
                      max_rate: ArrayLike = DEFAULT_MAX_RATE) -> jax.Array:
    r"""Change rate of a page with complete change observations (NeurIPS-19 eq. 11, Alg. 4 line 13).

    Every change of a complete-observation page arrives as a signal: the rate is the
    number U of signals in the history suffix over its duration T (eq. 11), with Alg. 4
    line 13's imaginary count ``s`` added:

    .. math:: \hat\lambda = \frac{U + s}{T}

    ``changed`` marks the observations that carried a signal; the suffix
    ``(time - window, time]`` is as in :func:`mle_smoothed` and
    ``T = time - max(offset, time - window)``.  Clipped to ``[min_rate, max_rate]``; a
    suffix of zero duration gives ``max_rate``; ``smoothing=0`` (>= 0 allowed) is eq. 11.
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
