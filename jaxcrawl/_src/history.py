"""Padded crawl histories: validation at the public boundary, sanitising, clip bounds.

Used by :mod:`jaxcrawl.estimators` and :mod:`jaxcrawl._src.likelihood` (users do not call
these).  The format is the one of every estimator (Learning to Crawl eq. 6, NeurIPS-19
eq. 10, Avrachenkov et al. eq. 1-3)::

    intervals[..., k]  time since the previous crawl (w_n, a_j, tau_k), > 0
    changed[..., k]    0/1: did the page change during that interval (o_n, z_j, I_k)
    mask[..., k]       True where an observation exists (default: all True)
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxcrawl._src.checks import check_precision, is_concrete

__all__ = [
    "DEFAULT_MIN_RATE",
    "DEFAULT_MAX_RATE",
    "float_dtype",
    "validate_history",
    "validate_bounds",
    "validate_delta",
    "validate_window",
    "prepare",
    "clip_bounds",
    "suffix_mask",
]

#: Default lower clip of the likelihood-based estimators (Learning to Crawl §6: ξ_min = 1e-9).
DEFAULT_MIN_RATE = 1e-9
#: Default upper clip of the likelihood-based estimators (Learning to Crawl §6: ξ_max = 25).
DEFAULT_MAX_RATE = 25.0


def float_dtype(*xs: Any) -> Any:
    """The floating dtype the estimators compute in: that of the inputs, or JAX's default
    float when they are integer or boolean."""
    dt = jnp.result_type(*[x for x in xs if x is not None])
    if not jnp.issubdtype(dt, jnp.floating):
        dt = jnp.result_type(float)
    return dt


def _first_bad(a: np.ndarray, bad: np.ndarray) -> tuple[tuple[int, ...], Any]:
    idx = np.unravel_index(int(np.flatnonzero(bad.ravel())[0]), a.shape)
    return tuple(int(i) for i in idx), a[idx]


def validate_history(intervals: ArrayLike, changed: ArrayLike, mask: ArrayLike | None, *,
                     changed_name: str = "changed", counts: bool = False) -> None:
    """Eager checks of a history (skipped for tracers): ``ValueError`` naming the argument.

    Intervals must be finite and > 0 under the mask; ``changed`` 0/1 (or, with
    ``counts=True``, non-negative integer counts, L2C App. K); the arrays must broadcast.
    """
    if hasattr(intervals, "dtype"):  # eager and traced alike: no float16 / bfloat16 histories
        check_precision(intervals.dtype, "intervals")
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


def validate_bounds(min_rate: ArrayLike, max_rate: ArrayLike) -> None:
    """Eager check of the clip range ``0 < min_rate < max_rate < inf`` (L2C §6)."""
    if not is_concrete(min_rate, max_rate):
        return
    lo = np.asarray(min_rate, dtype=float)
    hi = np.asarray(max_rate, dtype=float)
    if not (np.all(np.isfinite(lo)) and np.all(lo > 0)):
        raise ValueError(f"min_rate must be finite and > 0; got {min_rate!r}")
    if not (np.all(np.isfinite(hi)) and np.all(hi > lo)):
        raise ValueError(f"max_rate must be finite and > min_rate; got max_rate={max_rate!r}, min_rate={min_rate!r}")


def validate_delta(delta: ArrayLike) -> None:
    """Eager check of a failure probability δ in (0, 1) (L2C Lemma 3 and Lemma 8)."""
    if not is_concrete(delta):
        return
    d = np.asarray(delta, dtype=float)
    if not np.all((d > 0) & (d < 1)):
        raise ValueError(f"delta must lie in (0, 1); got {delta!r}")


def validate_window(window: ArrayLike | None, smoothing: ArrayLike, *,
                    zero_smoothing_ok: bool = False) -> None:
    """Eager checks of a history suffix length (the S(n) of NeurIPS-19 Alg. 4) and of the
    smoothing (> 0, or >= 0 with ``zero_smoothing_ok``)."""
    if window is not None and is_concrete(window):
        if not np.all(np.asarray(window, dtype=float) > 0):
            raise ValueError(f"window must be > 0 (a history suffix length in time units); got {window!r}")
    if is_concrete(smoothing):
        s = np.asarray(smoothing, dtype=float)
        ok = np.all(np.isfinite(s)) and (np.all(s >= 0) if zero_smoothing_ok else np.all(s > 0))
        if not ok:
            rule = ">= 0" if zero_smoothing_ok else "> 0"
            raise ValueError(f"smoothing must be finite and {rule}; got {smoothing!r}")


def broadcast_history(intervals: ArrayLike, changed: ArrayLike, mask: ArrayLike | None,
                      dtype: Any = None) -> tuple[jax.Array, jax.Array, jax.Array | None]:
    """``(w, c, m)`` broadcast to one shape, the intervals cast to ``dtype`` (default
    :func:`float_dtype`), nothing sanitised (``m`` stays None when ``mask`` is)."""
    intervals = jnp.asarray(intervals)
    changed = jnp.asarray(changed)
    if dtype is None:
        dtype = float_dtype(intervals)
    shape = jnp.broadcast_shapes(intervals.shape, changed.shape,
                                 () if mask is None else jnp.shape(mask))
    w = jnp.broadcast_to(intervals, shape).astype(dtype)
    m = None if mask is None else jnp.broadcast_to(jnp.asarray(mask), shape)
    return w, jnp.broadcast_to(changed, shape), m


def observed(w: jax.Array, mask: jax.Array | None) -> jax.Array:
    """Where a slot holds an observation: under the mask (if any), with a finite positive
    interval (the guard of :func:`prepare`; non-positive or non-finite intervals count as
    masked out)."""
    valid = jnp.isfinite(w) & (w > 0)
    return valid if mask is None else valid & mask.astype(bool)


def prepare(intervals: ArrayLike, changed: ArrayLike, mask: ArrayLike | None, *,
            counts: bool = False, dtype: Any = None) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Broadcast, sanitise masked entries and cast a history (the ``w_n, o_n`` of L2C
    eq. 6, or the counts ``x_n`` of L2C App. K eq. 32 with ``counts=True``): ``(w, c, m)``
    with ``w = 0`` and ``c = 0`` off the mask (``c`` boolean, or float counts).

    Guard (documented): non-positive or non-finite intervals are treated as masked out,
    so results stay finite inside ``jit`` where nothing can be raised.
    """
    w, c, mask = broadcast_history(intervals, changed, mask, dtype)
    dtype = w.dtype
    m = observed(w, mask)
    w = jnp.where(m, w, jnp.zeros((), dtype))
    if counts:
        c = jnp.where(m, jnp.nan_to_num(c.astype(dtype)), jnp.zeros((), dtype))
        c = jnp.maximum(c, 0)
    else:
        c = m & (c != 0)
    return w, c, m


def clip_bounds(min_rate: ArrayLike, max_rate: ArrayLike, dtype: Any,
                batch_shape: tuple[int, ...]) -> tuple[jax.Array, jax.Array]:
    """``(lo, hi)`` of the clip range (ξ_min, ξ_max of L2C §6) broadcast to the histories'
    leading axes."""
    lo = jnp.broadcast_to(jnp.asarray(min_rate, dtype), batch_shape)
    hi = jnp.broadcast_to(jnp.asarray(max_rate, dtype), batch_shape)
    return lo, hi


def suffix_mask(w: jax.Array, m: jax.Array, offset: ArrayLike, time: ArrayLike | None,
                window: ArrayLike | None) -> tuple[jax.Array, jax.Array]:
    """The history suffix S(n) of NeurIPS-19 Alg. 4: observations whose crawl time
    ``t_j = offset + sum_{i<=j} w_i`` lies in ``(time - window, time]``.

    Returns ``(keep, end)``: the suffix mask and its end time (``time``, or the last crawl
    when ``time`` is None).
    """
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
