r"""Forgetting change-rate estimators: the MLE with an exponentially discounted history.

The offline estimators of :mod:`jaxcrawl.estimators` weigh every observation of a
history equally, so after a page's change rate moves (a redesign, a news article going
cold; :func:`jaxcrawl.simulate.simulate_drift`) they keep averaging the old regime in.  Two ways to
forget, one parameter each:

* **sliding window** -- only the observations of the last ``window`` time units:
  :func:`jaxcrawl.estimators.mle_smoothed` with ``window=`` (NeurIPS-19 Alg. 4's suffix
  :math:`S(n)`; LambdaLearnAndCrawl's ``suffix_epochs``);
* **exponential discount** -- every observation weighted by
  :math:`a_j = 2^{-(t-t_j)/h}`, with :math:`t_j` its crawl time, :math:`t` the present and
  :math:`h` the ``half_life`` (this module; LambdaLearnAndCrawl's ``half_life``).

The discounted MLE maximises the weighted log-likelihood of L2C eq. 6,
:math:`\sum_j a_j\,[o_j\log(1-e^{-\xi w_j}) - (1-o_j)\xi w_j]`, whose score equation is
NeurIPS-19 eq. 10 with weights,

.. math::

   \sum_{j:o_j=1}\frac{a_j w_j}{e^{\xi w_j}-1} + \frac{s}{e^{\xi s}-1}
   = \sum_{j:o_j=0} a_j w_j + s,

with NeurIPS-19 Alg. 4's imaginary changed and unchanged intervals of length ``s``
(``smoothing``; 0 for none).  The left side decreases in ξ, so it is solved per history by
the shared safeguarded Newton (:func:`jaxcrawl._src.rootfind.solve_monotone`, on
:math:`\log\xi`) and clipped to ``[min_rate, max_rate]`` like :func:`~jaxcrawl.estimators.mle`.
With ``half_life = inf`` (all weights 1) and ``smoothing = 0`` it is the MLE.  The
discount keeps the estimator's effective sample at about :math:`h/\ln 2` time units of
observations, so its variance stops shrinking: the price of following drift.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .._src.checks import is_concrete
from .._src.history import (
    DEFAULT_MAX_RATE,
    DEFAULT_MIN_RATE,
    clip_bounds,
    prepare,
    validate_bounds,
    validate_history,
)
from .._src.likelihood import Estimate
from .._src.rootfind import solve_monotone
from .._src.special import inv_expm1 as _inv_expm1


def discount_weights(age: ArrayLike, half_life: ArrayLike) -> jax.Array:
    r"""Exponential-discount weights :math:`2^{-\text{age}/h}` (``half_life = inf``: 1)."""
    age = jnp.asarray(age)
    h = jnp.asarray(half_life, age.dtype if jnp.issubdtype(age.dtype, jnp.floating) else None)
    finite = jnp.isfinite(h)
    return jnp.where(finite, jnp.exp2(-jnp.maximum(age, 0.0) / jnp.where(finite, h, 1.0)), 1.0)


def _check_half_life(half_life: ArrayLike) -> None:
    if is_concrete(half_life):
        h = np.asarray(half_life, float)
        if np.any(np.isnan(h)) or np.any(h <= 0):
            raise ValueError(f"half_life must be > 0 (inf: no forgetting); got {half_life!r}")


def _weighted_score(x, params):
    r"""log(weighted changed side) - log(weighted unchanged side), nonincreasing in x."""
    w, c, a, s, unchanged = params
    xw = x[..., None] * jnp.where(c, w, 1.0)
    changed = jnp.sum(jnp.where(c, a * w * _inv_expm1(xw), 0.0), axis=-1)
    s_ok = s > 0
    changed = changed + jnp.where(s_ok, jnp.where(s_ok, s, 1.0) * _inv_expm1(x * jnp.where(s_ok, s, 1.0)), 0.0)
    lhs_ok = changed > 0
    return jnp.where(lhs_ok, jnp.log(jnp.where(lhs_ok, changed, 1.0)), -jnp.inf) - jnp.log(
        jnp.where(unchanged > 0, unchanged, 1.0)) + jnp.where(unchanged > 0, 0.0, jnp.inf)


@functools.partial(jax.jit, static_argnames=("max_steps",))
def _weighted_impl(intervals, changed, mask, weights, smoothing, min_rate, max_rate, *, max_steps):
    w, c, m = prepare(intervals, changed, mask)
    dtype = w.dtype
    a = jnp.where(m, jnp.broadcast_to(jnp.asarray(weights, dtype), w.shape), 0.0)
    c = c & (a > 0)
    batch = w.shape[:-1]
    s = jnp.broadcast_to(jnp.asarray(smoothing, dtype), batch)
    unchanged = jnp.sum(jnp.where(m & ~c, a * w, 0.0), axis=-1) + s
    lo, hi = clip_bounds(min_rate, max_rate, dtype, batch)
    has_changed = jnp.any(c, axis=-1) | (s > 0)
    has_unchanged = unchanged > 0
    lower = jnp.where(has_unchanged, lo, hi)  # never unchanged: +inf -> max_rate
    upper = jnp.where(has_changed, hi, lo)    # never changed: 0 -> min_rate
    roots = solve_monotone(_weighted_score, (w, c, a, s, unchanged), lower, upper, x0=jnp.sqrt(lo * hi),
                           max_steps=max_steps)
    return Estimate(roots.x, roots.converged, roots.num_steps)


def weighted_mle(intervals: ArrayLike, changed: ArrayLike, mask: ArrayLike | None = None, *,
                 weights: ArrayLike, smoothing: ArrayLike = 0.0,
                 min_rate: ArrayLike = DEFAULT_MIN_RATE, max_rate: ArrayLike = DEFAULT_MAX_RATE,
                 max_steps: int = 80, return_info: bool = False) -> jax.Array | Estimate:
    r"""The MLE with one nonnegative weight per observation (module docstring's equation).

    Args:
      intervals, changed, mask: the padded history (``(..., k)``), as in
        :func:`~jaxcrawl.estimators.mle`.
      weights: ``(..., k)`` weights :math:`a_j \ge 0` (e.g. :func:`discount_weights`).
      smoothing: length of NeurIPS-19 Alg. 4's imaginary changed and unchanged intervals
        (weight 1); 0 for none.
      min_rate, max_rate: the clip range.
      max_steps: cap on the Newton iterations.
      return_info: return an :class:`~jaxcrawl.estimators.Estimate` (``converged`` per
        history) instead of the rates.

    Returns:
      ``(...)`` rates, or an :class:`~jaxcrawl.estimators.Estimate`.
    """
    validate_history(intervals, changed, mask)
    validate_bounds(min_rate, max_rate)
    if is_concrete(weights):
        wt = np.asarray(weights, float)
        if np.any(~np.isfinite(wt)) or np.any(wt < 0):
            raise ValueError("weights must be finite and >= 0 for every observation")
    _check_smoothing_and_steps(smoothing, max_steps)
    est = _weighted_impl(intervals, changed, mask, weights, smoothing, min_rate, max_rate,
                         max_steps=int(max_steps))
    return est if return_info else est.rate


def _check_smoothing_and_steps(smoothing, max_steps) -> None:
    """Shared argument checks of :func:`weighted_mle` and :func:`discounted_mle`."""
    if is_concrete(smoothing):
        s = np.asarray(smoothing, float)
        if np.any(~np.isfinite(s)) or np.any(s < 0):
            raise ValueError(f"smoothing must be finite and >= 0; got {smoothing!r}")
    if int(max_steps) < 1:
        raise ValueError(f"max_steps must be >= 1; got {max_steps}")


def discounted_mle(intervals: ArrayLike, changed: ArrayLike, mask: ArrayLike | None = None, *,
                   half_life: ArrayLike, time: ArrayLike | None = None, offset: ArrayLike = 0.0,
                   smoothing: ArrayLike = 0.5, min_rate: ArrayLike = DEFAULT_MIN_RATE,
                   max_rate: ArrayLike = DEFAULT_MAX_RATE, max_steps: int = 80,
                   return_info: bool = False) -> jax.Array | Estimate:
    r"""The forgetting estimator: the MLE with observation :math:`j` weighted by
    :math:`2^{-(t - t_j)/h}` (module docstring).

    Args:
      intervals, changed, mask: the padded history; crawl :math:`j` happened at
        :math:`t_j` = ``offset`` + the sum of the intervals up to it (as in
        :func:`~jaxcrawl.estimators.mle_smoothed`).
      half_life: :math:`h` (> 0; ``inf``: no forgetting), scalar or per history.
      time: the present :math:`t`; observations after it are ignored (``None``: the
        last crawl).
      offset: time of the start of the history.
      smoothing: NeurIPS-19 Alg. 4's imaginary intervals (0.5; 0 for none).
      min_rate, max_rate, max_steps, return_info: as in :func:`weighted_mle`.

    Returns:
      ``(...)`` rates, or an :class:`~jaxcrawl.estimators.Estimate`.
    """
    _check_half_life(half_life)
    validate_history(intervals, changed, mask)
    validate_bounds(min_rate, max_rate)
    _check_smoothing_and_steps(smoothing, max_steps)
    est = _discounted_impl(intervals, changed, mask, half_life, time, offset, smoothing, min_rate, max_rate,
                           max_steps=int(max_steps))
    return est if return_info else est.rate


@functools.partial(jax.jit, static_argnames=("max_steps",))
def _discounted_impl(intervals, changed, mask, half_life, time, offset, smoothing, min_rate, max_rate, *,
                     max_steps):
    w, c, m = prepare(intervals, changed, mask)
    dtype = w.dtype
    t = jnp.asarray(offset, dtype)[..., None] + jnp.cumsum(w, axis=-1)
    if time is None:
        now = jnp.asarray(offset, dtype) + jnp.sum(w, axis=-1)
    else:
        now = jnp.broadcast_to(jnp.asarray(time, dtype), w.shape[:-1])
        m = m & (t <= now[..., None])
    h = jnp.asarray(half_life, dtype)
    a = discount_weights(now[..., None] - t, h[..., None] if h.ndim else h)
    return _weighted_impl(w, c, m, a, smoothing, min_rate, max_rate, max_steps=max_steps)
