r"""The smoothed MLE (NeurIPS-19 eq. 10 with Alg. 4 line 11's imaginary intervals) on a
*ring-buffer* history, with work proportional to the observations, not to the buffer.

LambdaLearnAndCrawl keeps, per page, a ring of ``C`` changed-crawl intervals and the
unchanged time per epoch (:class:`jaxcrawl.learners.CrawlHistory`).  ``C`` is sized for
the fastest-changing pages, so at NeurIPS-19 Fig. 3's size (100,000 pages, ``C = 88``)
about 1% of the ring holds an observation of the current suffix, and the padded
estimator spends 99% of every Newton pass on empty slots.  Here the valid entries are
packed once into a flat array of a static capacity ``K`` (each with its page), and every
Newton pass evaluates :math:`\sum w/(e^{\xi w}-1)` on them with a segment sum: the same
equation, the same bracket and the same safeguarded iteration as
:func:`jaxcrawl.estimators.mle_smoothed` on the padded suffix (``suffix_history``), the
root equal to it up to the order of summation.

Exact whatever ``K``: the slots past the capacity are packed and summed chunk by chunk
(``K`` slots at a time) inside a ``while_loop`` that makes no trip in the usual case -- a
conditional that stays one under ``vmap``, where ``lax.cond`` would run both branches --
and whose work depends on the trip, so the compiler cannot hoist it out of the Newton
loop (a whole-ring pass written there was hoisted and ran in every Newton pass).

A ring small enough (:func:`flat_capacity`: at most :data:`DENSE_ELEMENTS` slots and at
most :data:`DENSE_RATIO` times the packed capacity) is solved on itself, its slots outside
the suffix masked: no packing, no segment sum, no chunk loop -- fewer kernels to compile
and, at these sizes, less work per pass than the gathers and scatters of the packing.
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from .likelihood import Estimate
from .rootfind import solve_monotone
from .special import inv_expm1 as _inv_expm1
from .special import log_gap as _log_gap

__all__ = ["DENSE_ELEMENTS", "DENSE_RATIO", "flat_capacity", "ring_mle_smoothed"]


#: the most slots of a ring solved on itself (:func:`flat_capacity`)
DENSE_ELEMENTS = 1 << 20
#: the most slots of a ring solved on itself, in packed capacities
DENSE_RATIO = 8


def flat_capacity(num_pages: int, capacity: int) -> int:
    """Default flat capacity: four observations per page on average (at least 1,024); the
    whole ring (``num_pages * capacity``: solved on itself, masked) when that is at most
    :data:`DENSE_RATIO` times as many slots and at most :data:`DENSE_ELEMENTS`."""
    ring, packed = num_pages * capacity, max(4 * num_pages, 1024)
    return int(ring if ring <= min(DENSE_RATIO * packed, DENSE_ELEMENTS) else packed)


def _pack(ring: jax.Array, head: jax.Array, count: jax.Array, size: int,
          first: Any = 0) -> tuple[jax.Array, jax.Array]:
    """Flat slots ``first .. first + size - 1`` of the valid entries of every page's ring --
    its ``count`` newest, a cyclic run ending at ``head - 1`` -- page after page:
    ``(values, page)`` with padding page ``n``.  A gather per slot (each slot finds its page
    by binary search on the running counts): no pass over the whole ring."""
    n, c = ring.shape
    ends = jnp.cumsum(count)
    k = first + jnp.arange(size, dtype=ends.dtype)
    page = jnp.searchsorted(ends, k, side="right").astype(jnp.int32)  # n past the last entry
    p = jnp.minimum(page, n - 1)
    rank = k - (ends[p] - count[p])
    pos = jnp.mod(head[p] - count[p] + rank, c)
    return jnp.where(page < n, ring[p, pos], 0), page


def _changed_sum(x: jax.Array, w: jax.Array, seg: jax.Array) -> jax.Array:
    """Per page, the sum of ``w / (e^{x w} - 1)`` over its flat slots."""
    n = x.shape[0]
    xs = jnp.concatenate([x, jnp.ones((1,), x.dtype)])[seg]
    t = jnp.where(seg < n, w * _inv_expm1(jnp.where(seg < n, xs * w, 1)), 0)
    return jax.ops.segment_sum(t, seg, num_segments=n + 1)[:n]


def _masked_terms(x: jax.Array, w: jax.Array, valid: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Per slot ``r = 1/(e^{x w} - 1)`` (at ``x w = 1`` outside the suffix) and the term
    ``t = w r`` (0 outside)."""
    r = _inv_expm1(jnp.where(valid, x[:, None] * w, 1))
    return r, jnp.where(valid, w * r, 0)


@jax.custom_jvp
def _masked_sum(x: jax.Array, w: jax.Array, valid: jax.Array) -> jax.Array:
    """Per page (row), the sum of ``w / (e^{x w} - 1)`` over its valid slots."""
    return jnp.sum(_masked_terms(x, w, valid)[1], axis=-1)


def _masked_sum_jvp(primals, tangents):
    # dt/dx = -t (w + t),  dt/dw = r (1 - x (w + t)): both from the one t of the value
    # (autodiff would write the chain rule's factors out as page-by-slot arrays of their
    # own); a tangent known to be zero costs nothing.
    x, w, valid = primals
    dx, dw, _ = tangents
    r, t = _masked_terms(x, w, valid)
    out = jnp.sum(t, axis=-1)
    tangent = jnp.zeros_like(out)
    if not isinstance(dx, jax.custom_derivatives.SymbolicZero):
        tangent = tangent - jnp.sum(t * (w + t), axis=-1) * dx
    if not isinstance(dw, jax.custom_derivatives.SymbolicZero):
        tangent = tangent + jnp.sum(jnp.where(valid, r * (1 - x[:, None] * (w + t)), 0) * dw, axis=-1)
    return out, tangent


_masked_sum.defjvp(_masked_sum_jvp, symbolic_zeros=True)


def _dense_score(x: jax.Array, params: Any) -> jax.Array:
    """:func:`_ring_score` on the whole ring ``(n, C)``, the slots outside the suffix masked."""
    ring_w, valid, s, w_u = params
    return _log_gap(_masked_sum(x, ring_w, valid) + s * _inv_expm1(x * s), w_u)


def _ring_score(x: jax.Array, params: Any) -> jax.Array:
    """The score of eq. 10 (as :func:`jaxcrawl._src.likelihood.sentinel_score`: log
    of the changed-interval sum minus log of the unchanged time), per page."""
    w, seg, s, w_u, ring_w, head, count, chunks = params
    size = w.shape[0]
    total = _changed_sum(x, w, seg) + s * _inv_expm1(x * s)

    def more(carry):  # the slots past the first ``size``: further chunks, packed on the fly
        j, acc = carry
        wj, segj = _pack(ring_w, head, count, size, j * size)
        return j + 1, acc + _changed_sum(x, wj, segj)

    _, total = jax.lax.while_loop(lambda cr: cr[0] < chunks, more, (jnp.int32(1), total))
    return _log_gap(total, w_u)


def ring_mle_smoothed(ring_interval: jax.Array, head: jax.Array, count: jax.Array, unchanged_time: jax.Array,
                      smoothing: Any, min_rate: Any, max_rate: Any, *, size: int,
                      max_steps: int = 60, rtol: float | None = None) -> tuple[Estimate, jax.Array]:
    r"""The smoothed MLE of every page from its ring of changed intervals.

    Args:
      ring_interval: ``(n, C)`` changed-crawl intervals (a ring per page).
      head: ``(n,)`` int, changed crawls ever written (the newest is at ``(head - 1) mod C``).
      count: ``(n,)`` int, how many of the newest entries are in the suffix (``<= C``).
      unchanged_time: ``(n,)`` total unchanged time of the suffix.
      smoothing: the imaginary intervals' length ``s`` (> 0).
      min_rate, max_rate: the clip.
      size: the flat capacity ``K`` (static; :func:`flat_capacity`); ``K >= n * C``
        solves on the ring itself, masked.

    Returns:
      ``(estimate, overflow)``: the :class:`~jaxcrawl.estimators.Estimate` (equal to
      ``mle_smoothed`` on the padded suffix) and whether the entries took more than one
      chunk of ``K`` slots.
    """
    n, c = ring_interval.shape
    dtype = ring_interval.dtype
    head = jnp.asarray(head, jnp.int32)
    count = jnp.asarray(count, jnp.int32)
    s = jnp.broadcast_to(jnp.asarray(smoothing, dtype), (n,))
    w_u = unchanged_time + s
    inf = jnp.asarray(jnp.inf, dtype)
    if size >= n * c:  # the ring itself: slot j holds one of the count newest entries
        valid = jnp.mod(head[:, None] - 1 - jnp.arange(c, dtype=jnp.int32), c) < count[:, None]
        total_c = jnp.sum(jnp.where(valid, ring_interval, 0), axis=-1)
        w_min = jnp.min(jnp.where(valid, ring_interval, inf), axis=-1)
        score, params, overflow = _dense_score, (ring_interval, valid, s, w_u), jnp.zeros((), bool)
    else:
        w, seg = _pack(ring_interval, head, count, size)
        chunks = ((jnp.sum(count) + size - 1) // size).astype(jnp.int32)  # 1 unless the flat capacity overflowed
        overflow = chunks > 1

        def stats(w, seg):
            return (jax.ops.segment_sum(w, seg, num_segments=n + 1)[:n],
                    jax.ops.segment_min(jnp.where(seg < n, w, inf), seg, num_segments=n + 1)[:n])

        def more(carry):
            j, tot, low = carry
            t, m = stats(*_pack(ring_interval, head, count, size, j * size))
            return j + 1, tot + t, jnp.minimum(low, m)

        _, total_c, w_min = jax.lax.while_loop(lambda cr: cr[0] < chunks, more, (jnp.int32(1), *stats(w, seg)))
        score, params = _ring_score, (w, seg, s, w_u, ring_interval, head, count, chunks)
    # the bracket of likelihood.bracket_from_stats from the sufficient statistics (every page
    # has the imaginary changed and unchanged intervals, so both sums are positive)
    u = count.astype(dtype) + 1
    s_c = total_c + s
    w_min = jnp.minimum(w_min, s)
    left = jnp.maximum(jnp.log1p(s_c / w_u) * u / s_c, jnp.log1p(w_min / w_u) / w_min)
    right = jnp.maximum(u / w_u, left)
    bracket = (jax.lax.stop_gradient(left), jax.lax.stop_gradient(right))
    lo = jnp.broadcast_to(jnp.asarray(min_rate, dtype), (n,))
    hi = jnp.broadcast_to(jnp.asarray(max_rate, dtype), (n,))
    roots = solve_monotone(score, params, lo, hi, x0=bracket[0], max_steps=max_steps, rtol=rtol, bracket=bracket)
    return Estimate(roots.x, roots.converged, jax.lax.stop_gradient(roots.num_steps), roots.steps), overflow
