"""Confidence half-widths of the clipped estimators (L2C Lemma 3 and App. K Lemma 8), capped
at ``max_rate - min_rate`` (the estimate and the true rate both lie in the clip range)."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .._src.history import (
    DEFAULT_MAX_RATE,
    DEFAULT_MIN_RATE,
    prepare,
    validate_bounds,
    validate_delta,
    validate_history,
)
from .._src.special import as_float, horner

_BENNETT_CUT = 0.5
_BENNETT_COEFFS = [2.0 * (-1.0) ** j / ((j + 1) * (j + 2)) for j in range(48)]


def lemma3_halfwidth(intervals: ArrayLike, mask: ArrayLike | None = None, *, delta: ArrayLike,
                     min_rate: ArrayLike = DEFAULT_MIN_RATE,
                     max_rate: ArrayLike = DEFAULT_MAX_RATE) -> jax.Array:
    r"""Half-width of the L2C Lemma 3 confidence interval (partial observations).

    For the clipped moment-matching estimate :math:`\hat\xi` (:func:`moment_matching`,
    L2C eq. 7) from N observations at intervals :math:`w_n` fixed in advance, and a true
    rate in ``[min_rate, max_rate]``,

    .. math:: P\Big(|\hat\xi-\xi| \ge \Big(\frac1N\sum_n w_n e^{-\xi_{\max} w_n}\Big)^{-1}
              \sqrt{\frac{\log(2/\delta)}{2N}}\Big) \le \delta .

    Since both :math:`\hat\xi` and ξ lie in the clip range, ``max_rate - min_rate`` is also
    a (trivial) bound; the returned half-width is the smaller of the two, so it is finite
    for every history (an empty one gives ``max_rate - min_rate``).  The bound holds for the
    MLE too when the intervals are equal (the estimators coincide, L2C §4).

    Args:
      intervals: ``(..., k)`` intervals between crawls.
      mask: optional ``(..., k)`` bool.
      delta: failure probability δ in (0, 1).
      min_rate, max_rate: the clip range of the estimator.

    Returns:
      ``(...)`` half-widths.
    """
    validate_bounds(min_rate, max_rate)
    validate_delta(delta)
    validate_history(intervals, np.zeros((), bool), mask)
    return _lemma3_impl(intervals, mask, delta, min_rate, max_rate)


@jax.jit
def _lemma3_impl(intervals, mask, delta, min_rate, max_rate):
    w, _, m = prepare(intervals, jnp.zeros((), bool), mask)
    dtype = w.dtype
    n = jnp.sum(m, axis=-1).astype(dtype)
    hi = jnp.asarray(max_rate, dtype)
    lo = jnp.asarray(min_rate, dtype)
    g = jnp.sum(jnp.where(m, w * jnp.exp(-hi[..., None] * w), 0), axis=-1) / jnp.maximum(n, 1)
    eps = jnp.sqrt(jnp.log(2 / jnp.asarray(delta, dtype)) / (2 * jnp.maximum(n, 1)))
    ok = (n > 0) & (g > 0)
    bound = jnp.where(ok, eps / jnp.where(ok, g, 1), jnp.inf)
    return jnp.minimum(bound, hi - lo)


def bennett_psi(t: ArrayLike) -> jax.Array:
    r"""Bennett's function :math:`\psi(t) = ((1+t)\log(1+t) - t)/(t^2/2)`, :math:`\psi(0) = 1`,
    the :math:`\mathcal M` of L2C App. K Lemma 8, for :math:`t > -1`.

    For :math:`|t| < 1/2` it is the series
    :math:`\psi(t) = \sum_{j\ge0} 2(-t)^j/((j+1)(j+2))` (48 terms, exact to rounding
    in float64), which avoids the cancellation of the closed form near 0; beyond, the
    closed form loses at most a few ulps.
    """
    t = as_float(t)
    small = jnp.abs(t) < _BENNETT_CUT
    ts = jnp.where(small, t, 0.0)
    tl = jnp.where(small, 1.0, t)
    exact = ((1 + tl) * jnp.log1p(tl) - tl) / (tl * tl / 2)
    return jnp.where(small, horner(ts, _BENNETT_COEFFS), exact)


def lemma8_halfwidth(intervals: ArrayLike, mask: ArrayLike | None = None, *, delta: ArrayLike,
                     min_rate: ArrayLike = DEFAULT_MIN_RATE,
                     max_rate: ArrayLike = DEFAULT_MAX_RATE) -> jax.Array:
    r"""Half-width of the L2C Lemma 8 confidence interval (full observations, App. K).

    For the clipped full-observation estimate :math:`\hat\xi` (:func:`full_observation`,
    L2C App. K eq. 32) over a total observed time :math:`y_N = \sum_n w_n`, and a true rate
    in ``[min_rate, max_rate]``,

    .. math:: P\Big(|\hat\xi-\xi| > \sqrt{\frac{2\xi_{\max}}{y_N\,\mathcal M}\log\frac2\delta}\Big) < \delta,
              \qquad \mathcal M = \psi\Big(\frac{\xi_{\max}}{\xi_{\min}} - 1\Big),

    with Bennett's :math:`\psi` (:func:`bennett_psi`).  As for :func:`lemma3_halfwidth`,
    the result is capped at ``max_rate - min_rate`` (so an empty history gives that finite
    trivial bound).

    Args:
      intervals: ``(..., k)`` intervals between crawls (only their sum matters).
      mask: optional ``(..., k)`` bool.
      delta: failure probability δ in (0, 1).
      min_rate, max_rate: the clip range of the estimator.

    Returns:
      ``(...)`` half-widths.
    """
    validate_bounds(min_rate, max_rate)
    validate_delta(delta)
    validate_history(intervals, np.zeros((), bool), mask)
    return _lemma8_impl(intervals, mask, delta, min_rate, max_rate)


@jax.jit
def _lemma8_impl(intervals, mask, delta, min_rate, max_rate):
    w, _, m = prepare(intervals, jnp.zeros((), bool), mask)
    dtype = w.dtype
    y = jnp.sum(w, axis=-1)
    hi = jnp.asarray(max_rate, dtype)
    lo = jnp.asarray(min_rate, dtype)
    big_m = bennett_psi(hi / lo - 1)
    ok = y > 0
    bound = jnp.sqrt(2 * hi / (jnp.where(ok, y, 1) * big_m) * jnp.log(2 / jnp.asarray(delta, dtype)))
    bound = jnp.where(ok, bound, jnp.inf)
    return jnp.minimum(bound, hi - lo)
