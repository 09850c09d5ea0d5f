r"""Observation-level simulation: draw only what a crawler sees, exactly in distribution.

The event-level simulator (:func:`jaxcrawl.simulate.simulate_window`) draws every change
and every crawl of a window and integrates the staleness between them.  A learner that
only *reads its observations* (and evaluates its policies with closed forms) needs far
less; this module draws exactly that, with the same laws:

**Partially observed pages** (K19 :math:`W^-`, every page of L2C), crawled as a Poisson
process of rate ρ (L2C Δ_R, K19 eq. 3).  Crawls and changes are independent Poisson
processes, so in a window ``(t, t + w]``

* the number of crawls is :math:`k \sim \text{Poisson}(\rho w)`, and given ``k`` the
  ``k + 1`` spacings of the crawl times (window start to the first crawl, ..., the last
  crawl to the window end) are :math:`w\,(E_1, \dots, E_{k+1})/\sum_j E_j` with i.i.d.
  :math:`E_j \sim \text{Exp}(1)` (uniform spacings, the Dirichlet(1, ..., 1) law);
* the crawl ending a gap of length :math:`g` inside the window sees a change with
  probability :math:`1 - e^{-\lambda g}`, independently across gaps (the change counts of
  disjoint intervals are independent); the first crawl's interval is the carried time
  since the last crawl plus its spacing, and it also sees a change when changes were
  left uncrawled at the window start (the carried count :math:`N_0 > 0`);
* the state carried to the next window is the last spacing (time since the last crawl),
  or the carried time plus ``w`` when the page was not crawled, and the uncrawled change
  count :math:`\text{Poisson}(\lambda \cdot \text{that spacing})` (plus :math:`N_0` when
  the page was not crawled).

**Completely observed pages** (K19 :math:`W^\circ`: a signal on every change), either
crawled on each signal with probability ``p`` (K19 eq. 6, schedule ``SIGNAL``) or as a
Poisson process of rate ρ.  Thinning splits the changes into two independent Poisson
processes, crawled (rate :math:`c = p\lambda`; ``c = ρ`` for Poisson crawls, independent
of the changes) and uncrawled (:math:`u = (1-p)\lambda`; ``u = λ``).  The crawler sees
the number of crawls :math:`k \sim \text{Poisson}(c w)` and the number of change signals
(K19 eq. 11); with the last crawl's spacing to the window end
:math:`r = w\,(1 - V^{1/k})` (the maximum of ``k`` uniforms), the uncrawled changes
after it, :math:`\text{Poisson}(u r)`, and before it, :math:`\text{Poisson}(u (w - r))`,
are independent, and the signals are ``k`` (signal crawls) plus both.

So the draws are per page (counts) and per crawl of a partially observed page (one
exponential and one uniform), stored flat: crawl ``j`` of page ``i`` is slot
``start_i + j`` of one pool of ``pool_capacity`` slots, in time order.  Nothing scales
with the changes.  The laws are the event-level simulator's (``tests/test_observe.py``
checks them against it by two-sample tests).  What it does not give: the staleness
integrals and request counts (use the event level to *simulate* costs), the individual
change counts per crawl, the crawl observations of completely observed pages (their
estimate uses the signals, K19 eq. 11), and periodic schedules (the crawl times are not
random; such pages are flagged as overflow and not simulated).

The learners (:mod:`jaxcrawl.learners`) use it whenever their configuration allows
(their ``*_settings`` helpers build an :class:`ObserveConfig`), and say so in their info.
"""
from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .._src.checks import is_concrete
from .._src.observations import Observed
from .._src.sampling import (
    LIGHT_CAP,
    LIGHT_MEAN,
    cumsum,
    fine_from_bits,
    open_uniform_from_bits,
    poisson_counts,
    poisson_upper_quantile,
)
from ..core.problem import CrawlProblem
from ._schedules import POISSON, SIGNAL, Schedule
from ._state import SimState


@dataclasses.dataclass(frozen=True)
class ObserveConfig:
    """Static settings of :func:`observe_window` (hashable: they fix the buffers' shapes).

    Attributes:
      window: window length w (time units).
      pool_capacity: crawl slots per window for all partially observed pages together
        (one per crawl).  Pages whose crawls do not fit are flagged as overflow.
      count_capacity: largest count drawn by inversion for means up to 16 (counts past it
        are flagged).
      heavy_crawl_pages: how many pages may expect more than 16 crawls per window (their
        counts are drawn by transformed rejection); more are flagged.
      heavy_change_pages: the same for the pages expecting more than 16 changes.
    """

    window: float
    pool_capacity: int
    count_capacity: int = LIGHT_CAP
    heavy_crawl_pages: int = 0
    heavy_change_pages: int = 0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.window) and self.window > 0):
            raise ValueError(f"window must be finite and > 0, got {self.window!r}")
        for name, low in (("pool_capacity", 1), ("count_capacity", 1), ("heavy_crawl_pages", 0),
                          ("heavy_change_pages", 0)):
            v = getattr(self, name)
            if int(v) != v or v < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {v!r}")


def observe_config(problem: CrawlProblem, window: float, *, max_crawl_rate: ArrayLike,
                   total_crawl_rate: float | None = None, tail: float = 1e-9) -> ObserveConfig:
    """Capacities of :func:`observe_window` for ``problem`` (eager, concrete values).

    Args:
      problem: the pages (a batch of problems: maxima over the batch).
      window: window length.
      max_crawl_rate: a bound on each page's crawl rate (Poisson rate, or ``p λ`` for a
        signal page): a scalar or per page ``(..., n)``.
      total_crawl_rate: a bound on the sum of the Poisson crawl rates (default: the
        bandwidth).
      tail: per-window overflow probability of the pool and of each count.

    The pool holds the Poisson((total crawl rate) w) quantile at ``tail``; the heavy page
    counts are the pages whose bound times ``w`` exceeds 16.
    """
    if not is_concrete(problem, max_crawl_rate):
        raise ValueError("observe_config needs concrete values: call it outside jit")
    w = float(window)
    if not (math.isfinite(w) and w > 0):
        raise ValueError(f"window must be finite and > 0, got {window!r}")
    if not (0 < tail < 1):
        raise ValueError(f"tail must be in (0, 1), got {tail!r}")
    xi = np.asarray(problem.change_rate, np.float64)
    n = xi.shape[-1]
    rows = xi.reshape(-1, n)
    bound = np.broadcast_to(np.asarray(max_crawl_rate, np.float64), xi.shape).reshape(-1, n)
    if np.any(~np.isfinite(bound)) or np.any(bound < 0):
        raise ValueError("max_crawl_rate must be finite and >= 0 for every page")
    if total_crawl_rate is None:
        total_crawl_rate = float(np.max(np.asarray(problem.bandwidth, np.float64)))
    if not (math.isfinite(total_crawl_rate) and total_crawl_rate >= 0):
        raise ValueError(f"total_crawl_rate must be finite and >= 0, got {total_crawl_rate!r}")
    pool = poisson_upper_quantile(total_crawl_rate * w, tail)
    light = min(LIGHT_MEAN, float(max(bound.max(), rows.max())) * w)
    return ObserveConfig(
        window=w,
        pool_capacity=int(max(pool, 1)),
        count_capacity=int(poisson_upper_quantile(light, tail)),
        heavy_crawl_pages=int((bound * w > LIGHT_MEAN).sum(-1).max()),
        heavy_change_pages=int((rows * w > LIGHT_MEAN).sum(-1).max()),
    )


def _fresh_given_change(rate, g):
    """E[time to the first change | a change in (0, g]] = 1/λ − g/(e^{λg} − 1), stable."""
    x = rate * g
    safe = x > 1e-3
    xs = jnp.where(safe, x, 1.0)
    big = (1.0 / xs - 1.0 / jnp.expm1(xs)) * g
    return jnp.where(safe, big, g * (0.5 - x / 12.0))


def expected_fresh_time(rate: jax.Array, length: jax.Array, changed: jax.Array) -> jax.Array:
    r"""E[time fresh in a stretch of length ``g`` that starts fresh | whether it saw a change].

    ``g`` if no change, :math:`1/\lambda - g/(e^{\lambda g}-1)` (the mean of the first change
    time given that it falls in the stretch) if one.  Used for :attr:`Observed.fresh_time`.
    """
    return jnp.where(changed, _fresh_given_change(rate, length), length)


def _observe_kernel(key, state: SimState, xi, kind, rate, prob, signals, config: ObserveConfig):
    dtype = xi.dtype
    n = xi.shape[0]
    w = jnp.asarray(config.window, dtype)
    npool = config.pool_capacity
    # every uniform of the window from one call of the hash: each call site of the threefry
    # hash is compiled on its own (tenths of a second apiece on XLA:CPU)
    per = 1 if jnp.finfo(dtype).bits <= 32 else 2
    heavy_draws = config.heavy_crawl_pages > 0 or config.heavy_change_pages > 0
    key_bits, key_k, key_n = jax.random.split(key, 3) if heavy_draws else (key, None, None)
    sizes = (per * npool, per * npool, per * n, per * n, 2 * n, 4 * n)  # e, u, last, v, k, counts
    bits = jax.random.bits(key_bits, (sum(sizes),), jnp.uint32)
    cuts = np.cumsum((0,) + sizes)
    word = [bits[cuts[i]:cuts[i + 1]] for i in range(len(sizes))]
    shaped = (lambda b: b) if per == 1 else (lambda b: b.reshape(2, -1))
    u_e, u_u, u_last, u_v = (open_uniform_from_bits(shaped(b), dtype) for b in word[:4])
    u_k = fine_from_bits(word[4].reshape(2, n), dtype)
    u_n = fine_from_bits(word[5].reshape(2, 2, n), dtype)
    pois, sig = kind == POISSON, kind == SIGNAL
    supported = pois | sig
    complete = sig | (pois & signals)
    partial = pois & ~signals
    crawl_rate = jnp.where(pois, rate, jnp.where(sig, prob * xi, 0.0))
    crawl_rate = jnp.maximum(crawl_rate, 0.0)
    uncrawled_rate = jnp.where(sig, (1.0 - prob) * xi, xi)
    cap = config.count_capacity
    # crawls of the window
    mean_k = crawl_rate * w
    k, over_k = poisson_counts(key_k, mean_k, mean_k > LIGHT_MEAN, cap, config.heavy_crawl_pages, u=u_k)
    k = jnp.where(supported, jnp.where(mean_k > LIGHT_MEAN, k, jnp.minimum(k, cap)), 0)  # capped: flagged
    # partially observed pages: each crawl a slot of the flat pool
    kp = jnp.where(partial, k, 0)
    end = cumsum(kp)
    start = end - kp
    slot = jnp.arange(npool, dtype=jnp.int32)
    page = jnp.searchsorted(end, slot, side="right").astype(jnp.int32)
    valid = slot < jnp.minimum(end[-1], npool)
    pg = jnp.minimum(page, n - 1)
    rank = slot - start[pg]
    e = jnp.where(valid, -jnp.log(u_e), 0.0)
    e_last = -jnp.log(u_last)
    total = jax.ops.segment_sum(e, pg, n, indices_are_sorted=True) + e_last
    spacing = w * e / total[pg]
    residual_partial = w * e_last / total
    first = rank == 0
    interval = spacing + jnp.where(first, state.since_crawl[pg], 0.0)
    u = u_u
    p_change = -jnp.expm1(-xi[pg] * spacing)
    changed = valid & ((u < p_change) | (first & (state.num_changes[pg] > 0)))
    # the last crawl's spacing to the window end, for completely observed pages
    v = u_v
    kf = jnp.maximum(k, 1).astype(dtype)
    residual_complete = -w * jnp.expm1(jnp.log(v) / kf)
    crawled = k > 0
    residual = jnp.where(crawled, jnp.where(partial, residual_partial, residual_complete), w)
    residual = jnp.clip(residual, 0.0, w)
    # uncrawled changes after the last crawl (carried) and before it (signals only)
    means = jnp.stack([uncrawled_rate * residual,
                       jnp.where(complete & crawled, uncrawled_rate * (w - residual), 0.0)])
    heavy = xi * w > LIGHT_MEAN  # covers every mean above 16 (both are at most λ w)
    counts, over_n = poisson_counts(key_n, means, heavy, cap, config.heavy_change_pages, u=u_n)
    counts = jnp.where(means > LIGHT_MEAN, counts, jnp.minimum(counts, cap))  # capped: flagged
    after, before = counts[0], counts[1]
    num_changes = jnp.where(complete, jnp.where(sig, k, 0) + after + before, 0)
    num_changes = jnp.where(supported, num_changes, 0)
    since = jnp.where(crawled, residual, state.since_crawl + w)
    carried = after + jnp.where(crawled, 0, state.num_changes)
    over_pool = partial & (end > npool)
    overflow = over_k | over_n | over_pool | ~supported
    # conditional expected fresh time (partial pages): first stretch, gaps, last stretch
    n0_fresh = state.num_changes[pg] == 0
    fresh_slot = jnp.where(first, jnp.where(n0_fresh, expected_fresh_time(xi[pg], spacing, changed), 0.0),
                           expected_fresh_time(xi[pg], spacing, changed))
    fresh_slots = jax.ops.segment_sum(jnp.where(valid, fresh_slot, 0.0), pg, n, indices_are_sorted=True)
    tail_fresh = expected_fresh_time(xi, residual, after > 0)
    tail_fresh = jnp.where(crawled | (state.num_changes == 0), tail_fresh, 0.0)
    fresh_time = jnp.where(partial, fresh_slots + tail_fresh, 0.0)
    new_state = SimState(time=state.time + w, since_crawl=since.astype(dtype),
                         num_changes=jnp.where(supported, carried, state.num_changes).astype(jnp.int32))
    obs = Observed(page=jnp.where(valid, page, n), interval=jnp.where(valid, interval, 0.0),
                   changed=changed, valid=valid, rank=jnp.where(valid, rank, 0),
                   num_crawls=k.astype(jnp.int32), num_changes=num_changes.astype(jnp.int32),
                   partial=partial, overflow=overflow, fresh_time=fresh_time)
    return new_state, obs


def observe_window(key: jax.Array, state: SimState, problem: CrawlProblem, schedule: Schedule,
                   config: ObserveConfig, *, signals: ArrayLike | None = None) -> tuple[SimState, Observed]:
    """One window ``(t, t + w]`` at the observation level: ``(new_state, Observed)``.

    Exact in distribution (see the module docstring for the laws), with the event-level
    simulator's :class:`~jaxcrawl.simulate.SimState` carried in and out, so the two
    samplers can be chained.  ``signals`` (default ``problem.complete``) marks the
    completely observed pages: for them the change signals and crawl counts are drawn,
    for the other Poisson pages the crawls' intervals and changed bits.  ``SIGNAL``
    pages are always completely observed; ``PERIODIC`` pages are not supported (flagged
    in ``overflow``, state unchanged but for the clock).

    Pure and jittable; ``config`` is static (close over it).  Leading batch axes of the
    problem are vmapped; vmap over keys for seeds.
    """
    xi = problem.change_rate
    shape = jnp.shape(xi)
    batch = shape[:-1]
    sched = jax.tree_util.tree_map(lambda a: jnp.broadcast_to(a, shape), schedule)
    sig = problem.complete if signals is None else signals
    sig = jnp.broadcast_to(jnp.asarray(sig, bool), shape)
    state = SimState(time=jnp.broadcast_to(jnp.asarray(state.time, xi.dtype), batch),
                     since_crawl=state.since_crawl, num_changes=state.num_changes)

    def fn(k, s, x, kind, r, p, g):
        return _observe_kernel(k, s, x, kind, r.astype(x.dtype), p.astype(x.dtype), g, config)

    for _ in batch:
        fn = jax.vmap(fn)
    keys = jax.random.split(key, math.prod(batch)).reshape(batch) if batch else key
    return fn(keys, state, xi, sched.kind, sched.rate, sched.prob, sig)
