r"""Change-rate estimators: offline over padded histories, online as ``(init, update)`` pairs.

A crawler never sees a page's change rate ξ.  It sees, at each crawl, one bit: did the
page change since the previous crawl?  (Some pages -- sitemaps, feeds -- also signal
every change.)  This module turns such histories into rate estimates.

**Histories** are padded arrays with the observations on the last axis and any leading
axes (pages, seeds, instances)::

    intervals[..., k]  time since the previous crawl (w_n, a_j, τ_k in the papers), > 0
    changed[..., k]    0/1: did the page change during that interval (o_n, z_j, I_k)
    mask[..., k]       True where an observation exists (default: all True)

Masked-out entries are ignored whatever they contain (NaN included).

**Offline estimators** ``f(intervals, changed, mask=None, ...) -> rates[...]``:

=====================  ==================================================================
:func:`naive`          changes detected per unit time monitored (Avrachenkov et al. §3.4)
:func:`mle`            maximum likelihood (L2C eq. 6, NeurIPS-19 eq. 10, Avrachenkov eq. 16)
:func:`moment_matching`  L2C eq. 7 (coincides with the MLE under equal intervals)
:func:`mle_smoothed`   NeurIPS-19 Alg. 4 line 11 (imaginary 0.5 intervals, history suffix)
:func:`complete_obs_rate`  NeurIPS-19 eq. 11 with Alg. 4 line 13 smoothing
:func:`full_observation`   L2C App. K eq. 32 (numbers of changes per interval known)
=====================  ==================================================================

The likelihood-based ones are clipped to ``[min_rate, max_rate]`` (defaults
``1e-9`` and ``25`` per unit time, the values of L2C §6); the clip is what makes the
papers' singular cases finite (all crawls saw a change: the MLE is +∞ → ``max_rate``;
no crawl saw one: the MLE is 0 → ``min_rate``).

**Confidence intervals**: :func:`lemma3_halfwidth` (partial observations, L2C Lemma 3)
and :func:`lemma8_halfwidth` (full observations, L2C App. K Lemma 8).

**Online estimators** (Avrachenkov et al. eq. 1-3): :func:`lln`, :func:`sa`, :func:`sam`
return an :class:`OnlineEstimator` ``(init, update)`` over a small NamedTuple state whose
fields broadcast over any leading axes, so ``jax.lax.scan`` runs one over a stream of
observations and ``jax.vmap`` (or plain broadcasting) over pages; :func:`run_online`
is that scan.

All functions work in the dtype of their floating inputs (float32 by default, float64
when ``jax_enable_x64`` is on and float64 arrays are passed).  Inputs are validated
eagerly (``ValueError`` naming the argument) when their values are concrete; inside
``jit`` the documented guards keep results finite instead.
"""
from __future__ import annotations

import functools
from typing import Callable, NamedTuple, Optional, Union

import jax
import jax.numpy as jnp
import numpy as np

from .problem import is_concrete

__all__ = [
    "DEFAULT_MIN_RATE",
    "DEFAULT_MAX_RATE",
    "naive",
    "mle",
    "moment_matching",
    "mle_smoothed",
    "complete_obs_rate",
    "full_observation",
    "log_likelihood",
    "lemma3_halfwidth",
    "lemma8_halfwidth",
    "OnlineEstimator",
    "LLNState",
    "SAState",
    "SAMState",
    "lln",
    "sa",
    "sam",
    "run_online",
]

#: Default lower clip of the likelihood-based estimators (L2C §6: ξ_min = 1e-9).
DEFAULT_MIN_RATE = 1e-9
#: Default upper clip of the likelihood-based estimators (L2C §6: ξ_max = 25).
DEFAULT_MAX_RATE = 25.0

Schedule = Union[float, Callable[[jax.Array], jax.Array]]


# ---------------------------------------------------------------------------------------
# Input handling
# ---------------------------------------------------------------------------------------


def _float_dtype(*xs):
    dt = jnp.result_type(*[x for x in xs if x is not None])
    if not jnp.issubdtype(dt, jnp.floating):
        dt = jnp.result_type(float)
    return dt


def _first_bad(a: np.ndarray, bad: np.ndarray):
    idx = np.unravel_index(int(np.flatnonzero(bad.ravel())[0]), a.shape)
    return idx, a[idx]


def _validate_history(intervals, changed, mask, *, changed_name="changed", counts=False):
    """Eager checks at the public boundary (skipped for tracers)."""
    if not is_concrete(intervals, changed, mask):
        return
    w = np.asarray(intervals)
    c = np.asarray(changed)
    if w.ndim == 0:
        raise ValueError("intervals must have at least one axis (the observations)")
    if w.dtype == np.bool_ or not np.issubdtype(w.dtype, np.number):
        raise ValueError(f"intervals must be a real-valued array, got dtype {w.dtype}")
    try:
        shape = np.broadcast_shapes(w.shape, c.shape)
    except ValueError:
        raise ValueError(
            f"intervals of shape {w.shape} and {changed_name} of shape {c.shape} do not broadcast"
        ) from None
    if mask is None:
        m = np.ones(shape, dtype=bool)
    else:
        m = np.asarray(mask)
        if m.dtype != np.bool_:
            if not np.all((m == 0) | (m == 1)):
                raise ValueError("mask must be boolean (or 0/1)")
            m = m.astype(bool)
        try:
            shape = np.broadcast_shapes(shape, m.shape)
        except ValueError:
            raise ValueError(f"mask of shape {m.shape} does not broadcast against the history {shape}") from None
    w = np.broadcast_to(w, shape)
    c = np.broadcast_to(c, shape)
    m = np.broadcast_to(m, shape)
    with np.errstate(invalid="ignore"):
        bad = m & ~(np.isfinite(w) & (w > 0))
    if bad.any():
        idx, v = _first_bad(w, bad)
        raise ValueError(f"intervals must be finite and > 0 where mask is True; found {v!r} at index {idx}")
    if counts:
        with np.errstate(invalid="ignore"):
            badc = m & ~(np.isfinite(c) & (c >= 0) & (np.floor(c) == c))
        if badc.any():
            idx, v = _first_bad(c, badc)
            raise ValueError(
                f"{changed_name} must be non-negative integer counts where mask is True; found {v!r} at index {idx}"
            )
    elif c.dtype != np.bool_:
        with np.errstate(invalid="ignore"):
            badc = m & ~((c == 0) | (c == 1))
        if badc.any():
            idx, v = _first_bad(c, badc)
            raise ValueError(f"{changed_name} must be 0/1 (or boolean) where mask is True; found {v!r} at index {idx}")


def _validate_bounds(min_rate, max_rate):
    if not is_concrete(min_rate, max_rate):
        return
    lo = np.asarray(min_rate, dtype=float)
    hi = np.asarray(max_rate, dtype=float)
    if not (np.all(np.isfinite(lo)) and np.all(lo > 0)):
        raise ValueError(f"min_rate must be finite and > 0; got {min_rate!r}")
    if not (np.all(np.isfinite(hi)) and np.all(hi > lo)):
        raise ValueError(f"max_rate must be finite and > min_rate; got max_rate={max_rate!r}, min_rate={min_rate!r}")


def _validate_delta(delta):
    if not is_concrete(delta):
        return
    d = np.asarray(delta, dtype=float)
    if not np.all((d > 0) & (d < 1)):
        raise ValueError(f"delta must lie in (0, 1); got {delta!r}")


def _prepare(intervals, changed, mask, *, counts=False, dtype=None):
    """Broadcast, sanitise masked entries, and cast: returns (w, c, m) with w=0, c=0 off-mask."""
    intervals = jnp.asarray(intervals)
    changed = jnp.asarray(changed)
    if dtype is None:
        dtype = _float_dtype(intervals)
    shape = jnp.broadcast_shapes(intervals.shape, changed.shape,
                                 () if mask is None else jnp.shape(mask))
    w = jnp.broadcast_to(intervals, shape).astype(dtype)
    if mask is None:
        m = jnp.ones(shape, dtype=bool)
    else:
        m = jnp.broadcast_to(jnp.asarray(mask), shape).astype(bool)
    # Guard (documented): non-positive or non-finite intervals are treated as masked out.
    m = m & jnp.isfinite(w) & (w > 0)
    w = jnp.where(m, w, jnp.zeros((), dtype))
    c = jnp.broadcast_to(changed, shape)
    if counts:
        c = jnp.where(m, jnp.nan_to_num(c.astype(dtype)), jnp.zeros((), dtype))
        c = jnp.maximum(c, 0)
    else:
        c = m & (c != 0)
    return w, c, m


# ---------------------------------------------------------------------------------------
# A vectorised, safeguarded Newton root-finder for decreasing functions of the rate
# ---------------------------------------------------------------------------------------


def _default_rtol(dtype) -> float:
    eps = float(jnp.finfo(dtype).eps)
    return 4.0 * eps ** 0.75


def _solve_decreasing(psi, x0, lo, hi, max_steps, rtol):
    """Elementwise root of a nonincreasing ``psi`` on ``[lo, hi]`` (``lo > 0``).

    ``psi(x) -> (value, derivative)`` acts elementwise on arrays of x.  Entries whose root
    lies outside the bracket get the bound (that *is* the clipped root, because psi is
    monotone).  Newton steps are taken when they stay inside the current bracket; otherwise
    the bracket is bisected at its geometric mean (the rate spans decades).  The loop stops
    when every entry has converged (relative step <= rtol) or after ``max_steps``.

    For the likelihood-type functions used here ``psi`` is convex (log of a mixture of
    exponentials), so Newton from the left of the root converges monotonically; the
    bisection only catches the first overshoot from the right.
    """
    f0, df0 = psi(x0)
    # Resolve the clipped cases with one evaluation at the bound on the root's side.
    bound = jnp.where(f0 > 0, hi, lo)
    fb, _ = psi(bound)
    at_hi = (f0 > 0) & ~(fb < 0)
    at_lo = (f0 < 0) & ~(fb > 0)
    exact = f0 == 0
    lo_b = jnp.where(f0 > 0, x0, jnp.where(f0 < 0, lo, x0))
    hi_b = jnp.where(f0 > 0, hi, jnp.where(f0 < 0, x0, x0))
    done0 = at_hi | at_lo | exact | jnp.isnan(f0)
    x_start = jnp.where(at_hi, hi, jnp.where(at_lo, lo, x0))

    def newton_or_bisect(x, f, df, lo_b, hi_b):
        newton = x - f / df
        finite = jnp.isfinite(newton) & (df < 0)
        # A Newton step below the tolerance means convergence, even when rounding puts
        # it a hair outside the bracket (never bisect away from a converged point).
        small = finite & (jnp.abs(newton - x) <= rtol * x)
        ok = finite & (newton > lo_b) & (newton < hi_b)
        x_new = jnp.where(ok | small, newton, jnp.sqrt(lo_b * hi_b))
        return x_new, small

    # The first move from x0 reuses f0, df0.
    x1, small1 = newton_or_bisect(x0, f0, df0, lo_b, hi_b)
    x1 = jnp.where(done0, x_start, x1)
    done1 = done0 | small1

    def cond(s):
        x, lo_b, hi_b, done, k = s
        return jnp.any(~done) & (k < max_steps)

    def body(s):
        x, lo_b, hi_b, done, k = s
        f, df = psi(x)
        lo_b = jnp.where(f > 0, x, lo_b)
        hi_b = jnp.where(f < 0, x, hi_b)
        x_new, small = newton_or_bisect(x, f, df, lo_b, hi_b)
        conv = (f == 0) | small | ~(hi_b > lo_b * (1 + rtol))
        x_new = jnp.where(f == 0, x, x_new)
        x_new = jnp.where(done, x, x_new)
        return x_new, lo_b, hi_b, done | conv, k + 1

    x, _, _, _, steps = jax.lax.while_loop(cond, body, (x1, lo_b, hi_b, done1, jnp.asarray(0, jnp.int32)))
    return jnp.clip(x, lo, hi), steps


def _initial_guess(w, c, m, lo, hi):
    """Equal-interval closed form with the mean interval: log(N/(N-U)) / mean(w), clipped."""
    dtype = w.dtype
    n = jnp.sum(m, axis=-1).astype(dtype)
    u = jnp.sum(c, axis=-1).astype(dtype)
    total = jnp.sum(w, axis=-1)
    mean_w = total / jnp.maximum(n, 1)
    ratio = (u + 0.5) / jnp.maximum(n - u, 0.5)
    guess = jnp.log1p(ratio) / jnp.where(mean_w > 0, mean_w, 1)
    guess = jnp.where(jnp.isfinite(guess) & (guess > 0), guess, jnp.sqrt(lo * hi))
    # Stay strictly inside the bracket so both sides can be probed.
    a, b = lo * (1 + 1e-3), hi * (1 - 1e-3)
    return jnp.where(a < b, jnp.clip(guess, a, b), jnp.sqrt(lo * hi))


def _bounds(min_rate, max_rate, dtype, batch_shape):
    lo = jnp.broadcast_to(jnp.asarray(min_rate, dtype), batch_shape)
    hi = jnp.broadcast_to(jnp.asarray(max_rate, dtype), batch_shape)
    return lo, hi


# ---------------------------------------------------------------------------------------
# Offline estimators
# ---------------------------------------------------------------------------------------


def naive(intervals, changed, mask=None):
    r"""Naive estimator: detected changes per unit time monitored.

    .. math:: \hat\xi = \frac{\sum_n o_n}{\sum_n w_n}

    Avrachenkov et al. (2022) §3.4 (in their Poisson-crawl setup, :math:`q_k = p\hat I_k/k`,
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
    _validate_history(intervals, changed, mask)
    return _naive_impl(intervals, changed, mask)


@jax.jit
def _naive_impl(intervals, changed, mask):
    w, c, _ = _prepare(intervals, changed, mask)
    total = jnp.sum(w, axis=-1)
    u = jnp.sum(c, axis=-1).astype(w.dtype)
    return jnp.where(total > 0, u / jnp.where(total > 0, total, 1), jnp.zeros((), w.dtype))


def log_likelihood(rate, intervals, changed, mask=None):
    r"""Log-likelihood of a partially observed history (L2C eq. 6).

    .. math:: \mathcal L(\xi) = \sum_{n:o_n=1}\ln(1-e^{-\xi w_n}) - \sum_{n:o_n=0}\xi w_n

    Args:
      rate: ``(...)`` change rates ξ > 0 (broadcast against the leading axes).
      intervals, changed, mask: the history, as in :func:`mle`.

    Returns:
      ``(...)`` log-likelihoods (computed as ``log(-expm1(-ξw))`` for accuracy).
    """
    _validate_history(intervals, changed, mask)
    return _log_likelihood_impl(rate, intervals, changed, mask)


@jax.jit
def _log_likelihood_impl(rate, intervals, changed, mask):
    w, c, _ = _prepare(intervals, changed, mask)
    xi = jnp.asarray(rate, w.dtype)[..., None]
    xw = xi * w
    ll_changed = jnp.log(-jnp.expm1(-jnp.where(c, xw, 1)))
    return jnp.sum(jnp.where(c, ll_changed, -xw), axis=-1)


def _mle_psi(w, c):
    """ψ(ξ) = log Σ_{changed} w/(e^{ξw}-1) − log Σ_{unchanged} w  (nonincreasing, convex)."""
    w_unch = jnp.sum(jnp.where(c, 0, w), axis=-1)
    log_wu = jnp.log(w_unch)

    def psi(x):
        xw = x[..., None] * w
        em1 = jnp.expm1(jnp.where(c, xw, 1))
        t = jnp.where(c, w / em1, 0)  # w / (e^{ξw} − 1); 0 when it underflows
        s = jnp.sum(t, axis=-1)
        ds = -jnp.sum(t * (t + w), axis=-1)  # d/dξ [w/(e^{ξw}-1)] = −t(t+w)
        val = jnp.log(s) - log_wu
        return val, ds / s

    return psi


def _mle_core(w, c, m, min_rate, max_rate, max_steps, rtol):
    dtype = w.dtype
    if rtol is None:
        rtol = _default_rtol(dtype)
    lo, hi = _bounds(min_rate, max_rate, dtype, w.shape[:-1])
    n = jnp.sum(m, axis=-1)
    u = jnp.sum(c, axis=-1)
    x0 = _initial_guess(w, c, m, lo, hi)
    root, _ = _solve_decreasing(_mle_psi(w, c), x0, lo, hi, max_steps, rtol)
    root = jnp.where(u == 0, lo, root)          # never changed (or empty): MLE is 0
    root = jnp.where((u == n) & (n > 0), hi, root)  # always changed: MLE is +inf
    return root


def mle(intervals, changed, mask=None, *, min_rate=DEFAULT_MIN_RATE, max_rate=DEFAULT_MAX_RATE,
        max_steps: int = 60, rtol: Optional[float] = None):
    r"""Maximum-likelihood change rate from partial observations, clipped.

    Solves the likelihood equation (L2C eq. 6 differentiated; NeurIPS-19 eq. 10;
    Avrachenkov et al. eq. 16)

    .. math:: \sum_{n:o_n=1} \frac{w_n}{e^{\xi w_n}-1} = \sum_{n:o_n=0} w_n

    for every history at once by a vectorised, safeguarded Newton iteration on the
    monotone score (written as ``log LHS − log RHS``, which is convex and decreasing in ξ,
    with geometric bisection as the fallback), and clips the root to
    ``[min_rate, max_rate]``.  Because the score is monotone, clipping the root is the
    same as maximising the likelihood over the interval.

    Edge cases (finite, by the clip):

    * every observation saw a change: the likelihood increases forever -> ``max_rate``;
    * no observation saw a change: the MLE is 0 -> ``min_rate``;
    * empty history (no observation under the mask): flat likelihood -> ``min_rate``;
    * a single observation: ``max_rate`` if it saw a change, else ``min_rate``.

    Under equal intervals ``w`` the root is ``log(N/(N-U))/w``, identical to
    :func:`moment_matching` (L2C §4).

    Args:
      intervals: ``(..., k)`` time since the previous crawl, > 0 where observed.
      changed: ``(..., k)`` 0/1 change indicators.
      mask: optional ``(..., k)`` bool, True where an observation exists.
      min_rate, max_rate: the clip range ``0 < min_rate < max_rate`` (scalars or arrays
        broadcasting against the leading axes).  Defaults 1e-9 and 25 (L2C §6).
      max_steps: cap on root-finding iterations (each is one pass over the histories);
        it is reached only in pathological cases (the geometric bisection alone would
        need ~45 steps over the default range in float64).
      rtol: relative tolerance of the root (default ``4 eps^0.75`` of the dtype).

    Returns:
      ``(...)`` estimated rates in the dtype of ``intervals`` (float32 unless float64 given
      with x64 enabled).
    """
    _validate_history(intervals, changed, mask)
    _validate_bounds(min_rate, max_rate)
    return _mle_impl(intervals, changed, mask, min_rate, max_rate, max_steps, rtol)


@functools.partial(jax.jit, static_argnames=("max_steps",))
def _mle_impl(intervals, changed, mask, min_rate, max_rate, max_steps, rtol):
    w, c, m = _prepare(intervals, changed, mask)
    return _mle_core(w, c, m, min_rate, max_rate, max_steps, rtol)


def _mm_psi(w, c, m):
    """ψ(ξ) = log Σ_n e^{−ξ w_n} − log #{unchanged}  (nonincreasing, convex)."""
    log_unch = jnp.log(jnp.sum(m & ~c, axis=-1).astype(w.dtype))

    def psi(x):
        e = jnp.where(m, jnp.exp(-x[..., None] * w), 0)
        s = jnp.sum(e, axis=-1)
        ds = -jnp.sum(w * e, axis=-1)
        return jnp.log(s) - log_unch, ds / s

    return psi


def _mm_core(w, c, m, min_rate, max_rate, max_steps, rtol):
    if rtol is None:
        rtol = _default_rtol(w.dtype)
    lo, hi = _bounds(min_rate, max_rate, w.dtype, w.shape[:-1])
    n = jnp.sum(m, axis=-1)
    u = jnp.sum(c, axis=-1)
    x0 = _initial_guess(w, c, m, lo, hi)
    root, _ = _solve_decreasing(_mm_psi(w, c, m), x0, lo, hi, max_steps, rtol)
    root = jnp.where(u == 0, lo, root)
    root = jnp.where((u == n) & (n > 0), hi, root)
    return root


def moment_matching(intervals, changed, mask=None, *, min_rate=DEFAULT_MIN_RATE,
                    max_rate=DEFAULT_MAX_RATE, max_steps: int = 60, rtol: Optional[float] = None):
    r"""Moment-matching estimator of L2C eq. 7, clipped.

    With :math:`\hat p = \frac1N\sum_n (1-o_n)` the fraction of crawls that saw no change,
    :math:`\tilde\xi` solves

    .. math:: \hat p = \frac1N \sum_{n=1}^N e^{-\tilde\xi w_n}

    (its right side decreases in ξ) and :math:`\hat\xi = \max(\xi_{\min},\min(\xi_{\max},\tilde\xi))`.
    This is the estimator that :func:`lemma3_halfwidth` covers.  Under equal intervals it
    coincides with :func:`mle`.  The papers' instabilities (:math:`\hat p = 0` gives
    :math:`\tilde\xi=\infty`, :math:`\hat p = 1` gives 0) are resolved by the clip:
    all-changed -> ``max_rate``; never-changed, empty -> ``min_rate``; a single
    observation -> one of the two.

    Args:
      intervals, changed, mask, min_rate, max_rate, max_steps, rtol: as in :func:`mle`.

    Returns:
      ``(...)`` estimated rates.
    """
    _validate_history(intervals, changed, mask)
    _validate_bounds(min_rate, max_rate)
    return _mm_impl(intervals, changed, mask, min_rate, max_rate, max_steps, rtol)


@functools.partial(jax.jit, static_argnames=("max_steps",))
def _mm_impl(intervals, changed, mask, min_rate, max_rate, max_steps, rtol):
    w, c, m = _prepare(intervals, changed, mask)
    return _mm_core(w, c, m, min_rate, max_rate, max_steps, rtol)


def _suffix_mask(w, m, offset, time, window):
    """Observations whose crawl time t_j = offset + Σ_{i<=j} w_i lies in (time − window, time]."""
    dtype = w.dtype
    t = jnp.asarray(offset, dtype)[..., None] + jnp.cumsum(w, axis=-1)
    keep = m
    if time is not None:
        keep = keep & (t <= jnp.asarray(time, dtype)[..., None])
        end = jnp.asarray(time, dtype)
    else:
        end = jnp.asarray(offset, dtype) + jnp.sum(w, axis=-1)
    if window is not None:
        keep = keep & (t > (end - jnp.asarray(window, dtype))[..., None])
    return keep, end


def _validate_window(window, smoothing):
    if window is not None and is_concrete(window):
        if not np.all(np.asarray(window, dtype=float) > 0):
            raise ValueError(f"window must be > 0 (a history suffix length in time units); got {window!r}")
    if is_concrete(smoothing):
        s = np.asarray(smoothing, dtype=float)
        if not (np.all(np.isfinite(s)) and np.all(s > 0)):
            raise ValueError(f"smoothing must be finite and > 0; got {smoothing!r}")


def mle_smoothed(intervals, changed, mask=None, *, window=None, time=None, offset=0.0,
                 smoothing=0.5, min_rate=DEFAULT_MIN_RATE, max_rate=DEFAULT_MAX_RATE,
                 max_steps: int = 60, rtol: Optional[float] = None):
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
    for s = 0.5).  The result is still clipped to ``[min_rate, max_rate]``.

    Args:
      intervals, changed, mask: the history, as in :func:`mle`.
      window: length (in time units) of the history suffix to use (the paper's S(n));
        ``None`` uses the whole history.
      time: end of the suffix (e.g. the start of the current epoch); ``None`` means the
        time of the last observation.
      offset: time of the first crawl, ``(...)`` or scalar (the data set's first-crawl
        offsets).  Only matters together with ``time``.
      smoothing: length ``s`` of the imaginary intervals (default 0.5).
      min_rate, max_rate, max_steps, rtol: as in :func:`mle`.

    Returns:
      ``(...)`` estimated rates.
    """
    _validate_history(intervals, changed, mask)
    _validate_bounds(min_rate, max_rate)
    _validate_window(window, smoothing)
    return _mle_smoothed_impl(intervals, changed, mask, window, time, offset, smoothing,
                              min_rate, max_rate, max_steps, rtol)


@functools.partial(jax.jit, static_argnames=("max_steps",))
def _mle_smoothed_impl(intervals, changed, mask, window, time, offset, smoothing,
                       min_rate, max_rate, max_steps, rtol):
    w, c, m = _prepare(intervals, changed, mask)
    dtype = w.dtype
    keep, _ = _suffix_mask(w, m, offset, time, window)
    w = jnp.where(keep, w, 0)
    c = c & keep
    batch = w.shape[:-1]
    s = jnp.broadcast_to(jnp.asarray(smoothing, dtype), batch)[..., None]
    w = jnp.concatenate([w, s, s], axis=-1)
    c = jnp.concatenate([c, jnp.ones(batch + (1,), bool), jnp.zeros(batch + (1,), bool)], axis=-1)
    keep = jnp.concatenate([keep, jnp.ones(batch + (2,), bool)], axis=-1)
    return _mle_core(w, c, keep, min_rate, max_rate, max_steps, rtol)


def complete_obs_rate(intervals, changed, mask=None, *, window=None, time=None, offset=0.0,
                      smoothing=0.5, min_rate=DEFAULT_MIN_RATE, max_rate=DEFAULT_MAX_RATE):
    r"""Change rate of a page with complete change observations (NeurIPS-19 eq. 11, Alg. 4 line 13).

    For a complete-observation page every change arrives as a signal, so the rate is the
    observation rate: the number U of change signals in the history suffix over its
    duration T.  Alg. 4 line 13 adds an imaginary 0.5 observation so that a period
    without signals does not give rate 0:

    .. math:: \hat\lambda = \frac{U + s}{T}

    Here the history's ``changed`` entries count the signals (a 1 for each observation
    that carried a change signal), the suffix is ``(time - window, time]`` as in
    :func:`mle_smoothed`, and ``T = time - max(offset, time - window)`` is the part of the
    suffix that was monitored (``time`` defaults to the last observation,
    ``offset + sum(intervals)``).  The result is clipped to ``[min_rate, max_rate]``; a
    suffix of zero duration (e.g. an empty history with ``time=None``) gives ``max_rate``.

    (The PDF extraction of eq. 11 and line 13 is garbled; this is the reading consistent
    with the text around it: eq. 11 is the Poisson MLE U/T and the smoothing adds 0.5 to
    the count.  ``smoothing=0`` gives the unsmoothed eq. 11.)

    Args:
      intervals, changed, mask: the history of change signals (or crawls).
      window, time, offset: the history suffix, as in :func:`mle_smoothed`.
      smoothing: imaginary count added to U (default 0.5); must be >= 0.
      min_rate, max_rate: the clip range.

    Returns:
      ``(...)`` estimated rates.
    """
    _validate_history(intervals, changed, mask)
    _validate_bounds(min_rate, max_rate)
    if window is not None and is_concrete(window) and not np.all(np.asarray(window, dtype=float) > 0):
        raise ValueError(f"window must be > 0; got {window!r}")
    if is_concrete(smoothing) and not np.all(np.asarray(smoothing, dtype=float) >= 0):
        raise ValueError(f"smoothing must be >= 0; got {smoothing!r}")
    return _complete_obs_impl(intervals, changed, mask, window, time, offset, smoothing, min_rate, max_rate)


@jax.jit
def _complete_obs_impl(intervals, changed, mask, window, time, offset, smoothing, min_rate, max_rate):
    w, c, m = _prepare(intervals, changed, mask)
    dtype = w.dtype
    keep, end = _suffix_mask(w, m, offset, time, window)
    u = jnp.sum(c & keep, axis=-1).astype(dtype)
    start = jnp.broadcast_to(jnp.asarray(offset, dtype), end.shape)
    if window is not None:
        start = jnp.maximum(start, end - jnp.asarray(window, dtype))
    duration = end - start
    lo, hi = _bounds(min_rate, max_rate, dtype, u.shape)
    pos = duration > 0
    rate = (u + jnp.asarray(smoothing, dtype)) / jnp.where(pos, duration, 1)
    rate = jnp.where(pos, rate, hi)
    return jnp.clip(rate, lo, hi)


def full_observation(intervals, counts, mask=None, *, min_rate=DEFAULT_MIN_RATE,
                     max_rate=DEFAULT_MAX_RATE):
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
    _validate_history(intervals, counts, mask, changed_name="counts", counts=True)
    _validate_bounds(min_rate, max_rate)
    return _full_observation_impl(intervals, counts, mask, min_rate, max_rate)


@jax.jit
def _full_observation_impl(intervals, counts, mask, min_rate, max_rate):
    w, x, _ = _prepare(intervals, counts, mask, counts=True)
    total = jnp.sum(w, axis=-1)
    lo, hi = _bounds(min_rate, max_rate, w.dtype, total.shape)
    rate = jnp.sum(x, axis=-1) / jnp.where(total > 0, total, 1)
    rate = jnp.where(total > 0, rate, lo)
    return jnp.clip(rate, lo, hi)


# ---------------------------------------------------------------------------------------
# Confidence intervals
# ---------------------------------------------------------------------------------------


def lemma3_halfwidth(intervals, mask=None, *, delta, min_rate=DEFAULT_MIN_RATE,
                     max_rate=DEFAULT_MAX_RATE):
    r"""Half-width of the L2C Lemma 3 confidence interval (partial observations).

    For the clipped moment-matching estimate :math:`\hat\xi` (:func:`moment_matching`)
    from N observations at intervals :math:`w_n` fixed in advance, and a true rate in
    ``[min_rate, max_rate]``,

    .. math:: P\Big(|\hat\xi-\xi| \ge \Big(\frac1N\sum_n w_n e^{-\xi_{\max} w_n}\Big)^{-1}
              \sqrt{\frac{\log(2/\delta)}{2N}}\Big) \le \delta .

    Since both :math:`\hat\xi` and ξ lie in the clip range, ``max_rate - min_rate`` is also
    a (trivial) bound; the returned half-width is the smaller of the two, so it is finite
    for every history (an empty one gives ``max_rate - min_rate``).  The bound holds for the
    MLE too when the intervals are equal (the estimators coincide).

    Args:
      intervals: ``(..., k)`` intervals between crawls.
      mask: optional ``(..., k)`` bool.
      delta: failure probability δ in (0, 1).
      min_rate, max_rate: the clip range of the estimator.

    Returns:
      ``(...)`` half-widths.
    """
    _validate_bounds(min_rate, max_rate)
    _validate_delta(delta)
    _validate_history(intervals, np.zeros((), bool), mask)
    return _lemma3_impl(intervals, mask, delta, min_rate, max_rate)


@jax.jit
def _lemma3_impl(intervals, mask, delta, min_rate, max_rate):
    w, _, m = _prepare(intervals, jnp.zeros((), bool), mask)
    dtype = w.dtype
    n = jnp.sum(m, axis=-1).astype(dtype)
    hi = jnp.asarray(max_rate, dtype)
    lo = jnp.asarray(min_rate, dtype)
    g = jnp.sum(jnp.where(m, w * jnp.exp(-hi[..., None] * w), 0), axis=-1) / jnp.maximum(n, 1)
    eps = jnp.sqrt(jnp.log(2 / jnp.asarray(delta, dtype)) / (2 * jnp.maximum(n, 1)))
    ok = (n > 0) & (g > 0)
    bound = jnp.where(ok, eps / jnp.where(ok, g, 1), jnp.inf)
    return jnp.minimum(bound, hi - lo)


def _bennett_psi(t):
    """ψ(t) = ((1+t)log(1+t) − t)/(t²/2), ψ(0) = 1 (series near 0 for accuracy)."""
    small = jnp.abs(t) < 1e-3
    ts = jnp.where(small, 1.0, t)
    exact = ((1 + ts) * jnp.log1p(ts) - ts) / (ts * ts / 2)
    series = 1 - t / 3 + t * t / 6
    return jnp.where(small, series, exact)


def lemma8_halfwidth(intervals, mask=None, *, delta, min_rate=DEFAULT_MIN_RATE,
                     max_rate=DEFAULT_MAX_RATE):
    r"""Half-width of the L2C Lemma 8 confidence interval (full observations, App. K).

    For the clipped full-observation estimate :math:`\hat\xi` (:func:`full_observation`)
    over a total observed time :math:`y_N = \sum_n w_n`, and a true rate in
    ``[min_rate, max_rate]``,

    .. math:: P\Big(|\hat\xi-\xi| > \sqrt{\frac{2\xi_{\max}}{y_N\,\mathcal M}\log\frac2\delta}\Big) < \delta,
              \qquad \mathcal M = \psi\Big(\frac{\xi_{\max}}{\xi_{\min}} - 1\Big),

    with Bennett's :math:`\psi(t) = ((1+t)\log(1+t)-t)/(t^2/2)`.  As for
    :func:`lemma3_halfwidth`, the result is capped at ``max_rate - min_rate`` (so an empty
    history gives that finite trivial bound).

    Args:
      intervals: ``(..., k)`` intervals between crawls (only their sum matters).
      mask: optional ``(..., k)`` bool.
      delta: failure probability δ in (0, 1).
      min_rate, max_rate: the clip range of the estimator.

    Returns:
      ``(...)`` half-widths.
    """
    _validate_bounds(min_rate, max_rate)
    _validate_delta(delta)
    _validate_history(intervals, np.zeros((), bool), mask)
    return _lemma8_impl(intervals, mask, delta, min_rate, max_rate)


@jax.jit
def _lemma8_impl(intervals, mask, delta, min_rate, max_rate):
    w, _, m = _prepare(intervals, jnp.zeros((), bool), mask)
    dtype = w.dtype
    y = jnp.sum(w, axis=-1)
    hi = jnp.asarray(max_rate, dtype)
    lo = jnp.asarray(min_rate, dtype)
    big_m = _bennett_psi(hi / lo - 1)
    ok = y > 0
    bound = jnp.sqrt(2 * hi / (jnp.where(ok, y, 1) * big_m) * jnp.log(2 / jnp.asarray(delta, dtype)))
    bound = jnp.where(ok, bound, jnp.inf)
    return jnp.minimum(bound, hi - lo)


# ---------------------------------------------------------------------------------------
# Online estimators (Avrachenkov, Patil, Thoppe 2022)
# ---------------------------------------------------------------------------------------


class OnlineEstimator(NamedTuple):
    """An online change-rate estimator as a pair of pure functions.

    Attributes:
      init: ``init(crawl_rate, initial_rate=0.0) -> state``.  ``crawl_rate`` is the known
        Poisson crawl rate p of each page (any shape; the state takes that shape).
      update: ``update(state, changed, mask=None) -> state`` for one new observation per
        page; where ``mask`` is False the state is left unchanged.  ``state.rate`` is the
        current estimate.
    """

    init: Callable
    update: Callable


class LLNState(NamedTuple):
    """State of :func:`lln`: observations k, detected changes Î_k, crawl rate p, estimate x_k."""

    num_obs: jax.Array
    num_changes: jax.Array
    crawl_rate: jax.Array
    rate: jax.Array


class SAState(NamedTuple):
    """State of :func:`sa`: observations k, crawl rate p, estimate y_k."""

    num_obs: jax.Array
    crawl_rate: jax.Array
    rate: jax.Array


class SAMState(NamedTuple):
    """State of :func:`sam`: observations k, crawl rate p, estimates z_k and z_{k-1}."""

    num_obs: jax.Array
    crawl_rate: jax.Array
    rate: jax.Array
    prev_rate: jax.Array


def _as_schedule(value, kind: str, name: str):
    """A float -> the papers' schedule; a callable k -> value is used as is."""
    if callable(value):
        return value
    v = float(value)
    if kind == "constant":
        if not v > 0:
            raise ValueError(f"{name} must be > 0 (a positive constant α_k); got {value!r}")
        return lambda k: jnp.full_like(k, v)
    if not v > 0:
        raise ValueError(f"{name} must be > 0 (the exponent of (k+1)^-{name}); got {value!r}")
    return lambda k: (k + 1) ** (-v)


def _online_init(crawl_rate, initial_rate):
    p = jnp.asarray(crawl_rate)
    if not jnp.issubdtype(p.dtype, jnp.floating):
        p = p.astype(jnp.result_type(float))
    if is_concrete(p):
        pa = np.asarray(p)
        if not (np.all(np.isfinite(pa)) and np.all(pa > 0)):
            raise ValueError(f"crawl_rate must be finite and > 0; got {crawl_rate!r}")
    x0 = jnp.broadcast_to(jnp.asarray(initial_rate, p.dtype), p.shape)
    if is_concrete(x0) and not np.all(np.isfinite(np.asarray(x0))):
        raise ValueError(f"initial_rate must be finite; got {initial_rate!r}")
    return p, x0


def _obs(changed, mask, dtype, shape):
    i = jnp.broadcast_to(jnp.asarray(changed) != 0, shape).astype(dtype)
    m = jnp.ones(shape, bool) if mask is None else jnp.broadcast_to(jnp.asarray(mask), shape).astype(bool)
    return i, m


def lln(alpha: Schedule = 1.0) -> OnlineEstimator:
    r"""Law-of-large-numbers estimator (Avrachenkov et al. eq. 1).

    .. math:: x_k = \frac{p\,\hat I_k}{k + \alpha_k - \hat I_k},\qquad \hat I_k = \sum_{j\le k} I_j

    From :math:`E[I] = \Delta/(\Delta+p)` for crawls at Poisson rate p (their eq. 4-6); the
    :math:`\alpha_k > 0` term removes the blow-up when every crawl saw a change.  Consistent
    when :math:`\alpha_k/k\to0`, with :math:`E|x_k-\Delta| = O(\max(k^{-1/2}, \alpha_k/k))`
    (Theorem 1).  Before any observation the estimate is ``initial_rate``.

    Args:
      alpha: :math:`\alpha_k`: a positive constant (default 1, the paper's experiments) or
        a callable ``k -> α_k`` with k >= 1 a float array (e.g. ``jnp.sqrt``, or
        ``lambda k: 1 + jnp.log(k)`` -- ``jnp.log`` itself is 0 at k = 1).  The values must
        be positive; if ``k + α_k - Î_k <= 0`` anyway, the estimate is left unchanged.

    Returns:
      :class:`OnlineEstimator` over :class:`LLNState`.
    """
    alpha_fn = _as_schedule(alpha, "constant", "alpha")

    def init(crawl_rate, initial_rate=0.0):
        p, x0 = _online_init(crawl_rate, initial_rate)
        zero = jnp.zeros(p.shape, p.dtype)
        return LLNState(zero, zero, p, x0)

    def update(state, changed, mask=None):
        dtype = state.rate.dtype
        i, m = _obs(changed, mask, dtype, state.rate.shape)
        k = state.num_obs + 1
        ihat = state.num_changes + i
        den = k + alpha_fn(k) - ihat
        ok = den > 0  # guard: only a non-positive α_k can make it <= 0
        x = state.crawl_rate * ihat / jnp.where(ok, den, 1)
        return LLNState(
            jnp.where(m, k, state.num_obs),
            jnp.where(m, ihat, state.num_changes),
            state.crawl_rate,
            jnp.where(m & ok, x, state.rate),
        )

    return OnlineEstimator(init, update)


def sa(eta: Schedule = 0.75) -> OnlineEstimator:
    r"""Stochastic-approximation estimator (Avrachenkov et al. eq. 2).

    .. math:: y_{k+1} = y_k + \eta_k\,[I_{k+1}(y_k + p) - y_k],\qquad \eta_k = (k+1)^{-\eta}

    Converges for :math:`\eta\in(0,1]` with :math:`E|y_k-\Delta| = O(k^{-\eta/2})`
    (Theorem 2).  Default η = 0.75 (their §4.2.1 experiment; §4.2.2 uses 0.8).

    Args:
      eta: exponent η of :math:`\eta_k = (k+1)^{-\eta}`, or a callable ``k -> η_k``
        (k >= 0, float array).

    Returns:
      :class:`OnlineEstimator` over :class:`SAState`; ``initial_rate`` is :math:`y_0`.
    """
    eta_fn = _as_schedule(eta, "power", "eta")

    def init(crawl_rate, initial_rate=0.0):
        p, y0 = _online_init(crawl_rate, initial_rate)
        return SAState(jnp.zeros(p.shape, p.dtype), p, y0)

    def update(state, changed, mask=None):
        dtype = state.rate.dtype
        i, m = _obs(changed, mask, dtype, state.rate.shape)
        k = state.num_obs
        y = state.rate
        y_new = y + eta_fn(k) * (i * (y + state.crawl_rate) - y)
        return SAState(jnp.where(m, k + 1, k), state.crawl_rate, jnp.where(m, y_new, y))

    return OnlineEstimator(init, update)


def sam(eta: Schedule = 1.3, beta: Schedule = 0.75, omega: float = 1.0) -> OnlineEstimator:
    r"""Stochastic approximation with heavy-ball momentum (Avrachenkov et al. eq. 3, 10).

    .. math:: z_{k+1} = z_k + \eta_k[I_{k+1}(z_k+p) - z_k] + \zeta_k (z_k - z_{k-1}),
              \qquad \zeta_k = \frac{\beta_k - \omega\eta_k}{\beta_{k-1}},

    with :math:`\eta_k = (k+1)^{-\eta}`, :math:`\beta_k = (k+1)^{-\beta}` and
    :math:`z_{-1} = z_0`; :math:`\zeta_0 = 0` (:math:`\beta_{-1} = \infty`).  Defaults
    η = 1.3, β = 0.75, ω = 1 (their §4.2.1 experiment); §4.2.2 (Δ = 500) uses η = 0.8,
    β = 0.5.  Theorem 3 proves convergence for β ∈ (1/2, 1] with η = 2β or
    1/2 + β < η < 2β.

    Args:
      eta: exponent η of :math:`\eta_k`, or a callable ``k -> η_k`` (k >= 0).
      beta: exponent β of :math:`\beta_k`, or a callable ``k -> β_k`` (called with k and
        k - 1; ζ_0 is forced to 0).
      omega: ω > 0.

    Returns:
      :class:`OnlineEstimator` over :class:`SAMState`; ``initial_rate`` is :math:`z_0`.
    """
    eta_fn = _as_schedule(eta, "power", "eta")
    beta_fn = _as_schedule(beta, "power", "beta")
    if not float(omega) > 0:
        raise ValueError(f"omega must be > 0; got {omega!r}")
    omega = float(omega)

    def init(crawl_rate, initial_rate=0.0):
        p, z0 = _online_init(crawl_rate, initial_rate)
        return SAMState(jnp.zeros(p.shape, p.dtype), p, z0, z0)

    def update(state, changed, mask=None):
        dtype = state.rate.dtype
        i, m = _obs(changed, mask, dtype, state.rate.shape)
        k = state.num_obs
        z, z_prev = state.rate, state.prev_rate
        eta_k = eta_fn(k)
        first = k == 0
        beta_prev = beta_fn(jnp.where(first, jnp.ones_like(k), k - 1))
        zeta = jnp.where(first, 0, (beta_fn(k) - omega * eta_k) / beta_prev)
        z_new = z + eta_k * (i * (z + state.crawl_rate) - z) + zeta * (z - z_prev)
        return SAMState(
            jnp.where(m, k + 1, k),
            state.crawl_rate,
            jnp.where(m, z_new, z),
            jnp.where(m, z, z_prev),
        )

    return OnlineEstimator(init, update)


def run_online(estimator: OnlineEstimator, changed, crawl_rate, mask=None, *, initial_rate=0.0):
    """Run an online estimator (Avrachenkov et al. eq. 1-3) over a stream with ``jax.lax.scan``.

    Args:
      estimator: an :class:`OnlineEstimator` (:func:`lln`, :func:`sa`, :func:`sam`).
      changed: ``(..., k)`` 0/1 observations, the stream on the last axis.
      crawl_rate: ``(...)`` (or scalar) known crawl rates p.
      mask: optional ``(..., k)`` bool; masked steps leave the state unchanged.
      initial_rate: the estimate before any observation.

    Returns:
      ``(final_state, rates)`` with ``rates[..., j]`` the estimate after observation j.
    """
    changed = jnp.asarray(changed)
    if changed.ndim == 0:
        raise ValueError("changed must have at least one axis (the stream)")
    batch = changed.shape[:-1]
    p = jnp.asarray(crawl_rate)
    if not jnp.issubdtype(p.dtype, jnp.floating):
        p = p.astype(jnp.result_type(float))
    p = jnp.broadcast_to(p, jnp.broadcast_shapes(batch, p.shape))
    state = estimator.init(p, initial_rate)
    xs = jnp.moveaxis(changed, -1, 0)
    ms = None if mask is None else jnp.moveaxis(jnp.broadcast_to(jnp.asarray(mask), changed.shape), -1, 0)

    def step(s, obs):
        i, mk = obs
        s = estimator.update(s, i, mk)
        return s, s.rate

    if ms is None:
        state, rates = jax.lax.scan(lambda s, i: step(s, (i, None)), state, xs)
    else:
        state, rates = jax.lax.scan(step, state, (xs, ms))
    return state, jnp.moveaxis(rates, 0, -1)
