"""Samplers and scans of the simulator: exact Poisson counts in float32, cumulative sums.

Used by :mod:`jaxcrawl.simulate` and the learners.  Poisson counts with means up to
:data:`LIGHT_MEAN` are drawn by inversion of the upper tail (:func:`poisson_inverse`,
one fused pass), larger ones by transformed rejection (:func:`poisson_ptrs`, Hörmann
1993).
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

#: Larger expected counts per window are drawn by transformed rejection (PTRS).
LIGHT_MEAN = 16.0


def poisson_upper_quantile(mean: float, tail: float) -> int:
    """Smallest ``K >= 1`` with ``P(Poisson(mean) > K) < tail`` (float64, no cancellation:
    the upper tail of the probability mass function is summed from its small end)."""
    if mean == 0:
        return 1
    kmax = int(mean + 60.0 * math.sqrt(mean) + 200)
    k = np.arange(kmax + 1, dtype=np.float64)
    lg = np.array([math.lgamma(v + 1.0) for v in k])
    pmf = np.exp(k * math.log(mean) - mean - lg)
    # upper[K] = P(X > K) = sum_{j > K} pmf[j], summed from the small end.
    upper = np.concatenate([np.cumsum(pmf[::-1])[::-1][1:], [0.0]])
    ok = np.flatnonzero(upper < tail)
    return max(1, int(ok[0]))


#: Capacity of the inversion sampler: the Poisson(LIGHT_MEAN) quantile at 1e-9.
LIGHT_CAP = poisson_upper_quantile(LIGHT_MEAN, 1e-9)


def poisson_capacity(mean: float, tail: float = 1e-9) -> int:
    """Smallest ``K >= 1`` with ``P(Poisson(mean) > K) < tail``.

    Sizes the per-window event buffers (a page-window overflows with probability below
    ``tail``).  Computed in float64 by summing the upper tail of the probability mass
    function from its small end (no cancellation).
    """
    mean = float(mean)
    if not (math.isfinite(mean) and mean >= 0):
        raise ValueError(f"mean must be finite and >= 0, got {mean!r}")
    if not (0 < tail < 1):
        raise ValueError(f"tail must be in (0, 1), got {tail!r}")
    return poisson_upper_quantile(mean, tail)


def cumsum(x: jax.Array) -> jax.Array:
    """Inclusive cumulative sum of a 1-D array."""
    return jnp.cumsum(x)


def cummax(x: jax.Array) -> jax.Array:
    """Inclusive cumulative maximum of a 1-D array."""
    return jax.lax.cummax(x, axis=0)


def segmented_cumsum(x: jax.Array, r: jax.Array, max_len: int) -> jax.Array:
    """Inclusive cumulative sum within segments of length <= ``max_len`` (1-D).

    ``r`` is each element's index inside its segment.  A Hillis-Steele scan with
    ``ceil(log2(max_len))`` doubling steps: exact segment by segment (no global running
    sum, so no loss of precision across segments).
    """
    step = 1
    while step < max_len:
        shifted = jnp.concatenate([jnp.zeros((step,), x.dtype), x[:-step]])
        x = x + jnp.where(r >= step, shifted, 0)
        step *= 2
    return x


def uniform_fine(key: jax.Array, size: int, dtype) -> jax.Array:
    """``size`` uniforms on (0, 1) from 64 random bits each, resolving tiny probabilities.

    ``hi · 2^-32 + (lo + 1/2) · 2^-64``: near 0 its resolution is far below 1e-9 (a
    single float32 uniform has 2^-24), near 1 it is rounded to the working precision.
    """
    b = jax.random.bits(key, (2 * size,), jnp.uint32)
    hi = b[:size].astype(dtype) * jnp.asarray(2.0 ** -32, dtype)
    lo = (b[size:].astype(dtype) + 0.5) * jnp.asarray(2.0 ** -64, dtype)
    return hi + lo


def fine_from_bits(bits: jax.Array, dtype) -> jax.Array:
    """:func:`uniform_fine` from ``(2, ...)`` random ``uint32`` words drawn by the caller (one
    ``jax.random.bits`` call for several samplers: every call site of the threefry hash is
    compiled separately, and on XLA:CPU each costs a tenth of a second or more)."""
    return (bits[0].astype(dtype) * jnp.asarray(2.0 ** -32, dtype)
            + (bits[1].astype(dtype) + 0.5) * jnp.asarray(2.0 ** -64, dtype))


def open_uniform_from_bits(bits: jax.Array, dtype) -> jax.Array:
    """Uniforms on the open interval (0, 1) from random ``uint32`` words (one word each for a
    float of at most 32 bits: ``((b >> 9) + 1/2) 2^-23``, exact in float32; two words,
    ``(2, ...)``, for float64: ``((b0 >> 6) 2^26 + (b1 >> 6) + 1/2) 2^-52``) -- never 0, so
    ``-log(u)`` is a finite exponential."""
    if jnp.finfo(dtype).bits <= 32:
        return ((bits >> 9).astype(dtype) + 0.5) * jnp.asarray(2.0 ** -23, dtype)
    hi = (bits[0] >> 6).astype(dtype)   # 26 bits
    lo = (bits[1] >> 6).astype(dtype)   # 26 bits
    return (hi * 2.0 ** 26 + lo + 0.5) * jnp.asarray(2.0 ** -52, dtype)


def max_inversion_mean(dtype) -> float:
    """Largest mean whose ``exp(-mean)`` is a normal number in ``dtype`` (with margin)."""
    return 0.9 * -math.log(float(jnp.finfo(dtype).tiny))


def poisson_inverse(u: jax.Array, mean: jax.Array, cap: int) -> jax.Array:
    """Poisson(mean) by inversion of the upper tail: ``#{k <= cap : u < P(X > k)}``.

    The probabilities come from the recursion ``p_k = p_{k-1} mean / k`` from
    ``p_0 = exp(-mean)`` and the upper tails are summed from the far end, so a tail
    probability is accurate to relative working precision however small it is.
    Returns ``cap + 1`` when the count exceeds ``cap`` (an overflow), and also when
    ``exp(-mean)`` would underflow (``mean`` above :func:`max_inversion_mean`: flagged
    rather than silently wrong).  ``mean`` may be 0.  Written as a short unrolled loop
    of elementwise operations, which XLA fuses into one pass over the pages.
    """
    dtype = u.dtype
    mean = jnp.maximum(mean, 0.0).astype(dtype)
    pmf = [jnp.exp(-mean)]
    for k in range(1, cap + 2):
        pmf.append(pmf[-1] * mean * (1.0 / k))
    tail = pmf[cap + 1]  # ~ P(X > cap), omitting P(X > cap + 1)
    count = (u < tail).astype(jnp.int32)
    for k in range(cap - 1, -1, -1):
        tail = tail + pmf[k + 1]  # P(X > k)
        count = count + (u < tail).astype(jnp.int32)
    return jnp.where(mean > max_inversion_mean(dtype), cap + 1, count)


def poisson_logpmf(k: jax.Array, lam: jax.Array) -> jax.Array:
    """log P(Poisson(lam) = k) for float ``k >= 0``, ``lam >= 10``, without cancellation.

    For ``k >= 10`` Stirling's series gives
    ``k log1p((lam - k)/k) + (k - lam) - log(2πk)/2 - 1/(12k) + 1/(360k³)``, accurate
    to float precision of the *result* even when ``k log lam`` and ``lgamma(k+1)`` are
    both ~1e5 (where the direct formula loses everything in float32).
    """
    ks = jnp.maximum(k, 10.0)
    stirling = (
        ks * jnp.log1p((lam - ks) / ks) + (ks - lam) - 0.5 * jnp.log(2.0 * jnp.pi * ks)
        - 1.0 / (12.0 * ks) + 1.0 / (360.0 * ks ** 3)
    )
    log_fact = jnp.asarray([math.lgamma(j + 1.0) for j in range(10)], lam.dtype)
    kd = jnp.clip(k, 0.0, 9.0)
    direct = kd * jnp.log(lam) - lam - log_fact[kd.astype(jnp.int32)]
    return jnp.where(k >= 10.0, stirling, direct)


def poisson_ptrs(key: jax.Array, lam: jax.Array) -> jax.Array:
    """Poisson(lam) for ``lam >= 10`` by transformed rejection with squeeze (PTRS,
    Hörmann 1993), in a ``while_loop`` until every element is accepted (about 1.15
    proposals each).  Exact in distribution; the acceptance test uses
    :func:`poisson_logpmf`, so it stays accurate in float32 for large means.  Entries
    with ``lam < 10`` are computed as if ``lam = 10`` (callers mask them).
    """
    dtype = lam.dtype
    lam = jnp.maximum(lam, 10.0)
    slam = jnp.sqrt(lam)
    b = 0.931 + 2.53 * slam
    a = -0.059 + 0.02483 * b
    log_inv_alpha = jnp.log(1.1239 + 1.1328 / (b - 3.4))
    vr = 0.9277 - 3.6224 / (b - 2.0)

    def cond(carry):
        return jnp.any(~carry[2])

    def body(carry):
        k, out, done = carry
        k, sub = jax.random.split(k)
        uv = jax.random.uniform(sub, (2,) + lam.shape, dtype)
        u, v = uv[0] - 0.5, uv[1]
        us = 0.5 - jnp.abs(u)
        us_safe = jnp.maximum(us, jnp.finfo(dtype).tiny)
        kk = jnp.floor((2.0 * a / us_safe + b) * u + lam + 0.43)
        fast = (us >= 0.07) & (v <= vr)
        reject = ~jnp.isfinite(kk) | (kk < 0) | ((us < 0.013) & (v > us))
        ok = jnp.log(jnp.maximum(v, jnp.finfo(dtype).tiny)) + log_inv_alpha - jnp.log(
            a / (us_safe * us_safe) + b
        ) <= poisson_logpmf(jnp.where(jnp.isfinite(kk), kk, 0.0), lam)
        acc = ~done & (fast | (~reject & ok))
        out = jnp.where(acc, kk, out)
        return k, out, done | acc

    init = (key, jnp.zeros(lam.shape, dtype), jnp.zeros(lam.shape, bool))
    return jax.lax.while_loop(cond, body, init)[1].astype(jnp.int32)


def poisson_any(key: jax.Array, mean: jax.Array) -> jax.Array:
    """Poisson(mean) for any finite mean >= 0 (non-finite treated as 0): inversion up to
    :data:`LIGHT_MEAN`, :func:`poisson_ptrs` above."""
    key_small, key_large = jax.random.split(key)
    mean = jnp.where(jnp.isfinite(mean), jnp.maximum(mean, 0.0), 0.0)
    small = mean <= LIGHT_MEAN
    u = uniform_fine(key_small, int(np.prod(mean.shape)), mean.dtype).reshape(mean.shape)
    count_small = jnp.minimum(poisson_inverse(u, jnp.where(small, mean, 0.0), LIGHT_CAP), LIGHT_CAP)
    count_large = poisson_ptrs(key_large, jnp.where(small, 10.0, mean))
    return jnp.where(small, count_small, count_large)


def poisson_counts(
    key: jax.Array, mean: jax.Array, heavy: jax.Array, cap: int, num_heavy: int, u: jax.Array | None = None
) -> tuple[jax.Array, jax.Array]:
    """Poisson(mean) for every page, with an overflow flag per page.

    ``mean`` is ``(n,)`` or ``(m, n)`` (m counts per page sharing the ``(n,)`` mask
    ``heavy``, which must cover every page with a mean above 16).  Means up to 16 are
    drawn by :func:`poisson_inverse` with capacity ``cap`` (flagged past it); means
    above 16 of the first ``num_heavy`` heavy pages are gathered and drawn by
    :func:`poisson_ptrs` (exact for means >= 10) in one loop; heavy pages past them are
    flagged.  ``u``: the inversion's uniforms (``mean``'s shape, e.g. :func:`fine_from_bits`),
    drawn by the caller; then ``key`` is used only for the heavy pages (may be ``None`` when
    ``num_heavy`` is 0).
    """
    n = mean.shape[-1]
    small = mean <= LIGHT_MEAN
    if u is None:
        key_light, key_heavy = jax.random.split(key)
        u = uniform_fine(key_light, mean.size, mean.dtype).reshape(mean.shape)
    else:
        key_heavy = key
    light = jnp.where(small, mean, 0.0)
    if mean.ndim == 1:
        count = poisson_inverse(u, light, cap)
    else:  # row by row: an inversion whose consumers read its rows apart (a sum of the rows)
        # is fused into them and runs several times slower than on contiguous rows
        count = jnp.stack([poisson_inverse(u[i], light[i], cap) for i in range(mean.shape[0])])
    lead = tuple(range(mean.ndim - 1))
    rank = cumsum(heavy.astype(jnp.int32)) - 1
    overflow = (heavy & (rank >= num_heavy)) | jnp.any(~small & ~heavy, axis=lead)
    overflow = overflow | jnp.any(small & (count > cap), axis=lead)
    if num_heavy > 0:
        idx = jnp.nonzero(heavy, size=num_heavy, fill_value=n)[0]
        sel = jnp.minimum(idx, n - 1)
        mh = jnp.where(idx < n, mean[..., sel], 0.0)
        big = mh > LIGHT_MEAN
        draw = jnp.where(big, poisson_ptrs(key_heavy, jnp.where(big, mh, 10.0)), count[..., sel])
        count = count.at[..., idx].set(draw, mode="drop")
    return count, overflow
