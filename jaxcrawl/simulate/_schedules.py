"""Per-page crawl schedules: what the simulated crawler does in a window.

Three kinds (Learning to Crawl [L2C] §2 and §5; Kolobov et al. NeurIPS-19 [K19] §2-3):
Poisson crawling at a rate (L2C Δ_R, K19 Π⁻ eq. 3), periodic crawling at absolute times
``phase + k * period`` (L2C K_R, κ^UI of App. H), and crawling on change signals with a
probability (K19 Π°, eq. 6).  A :class:`Schedule` holds one kind per page; stack it along
a leading axis to change it between windows.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .._src.checks import is_concrete
from .._src.special import as_float
from ..core.problem import CrawlProblem, Policy

POISSON = 0
"""Schedule kind: crawl as a Poisson process of rate ``rate`` (L2C Δ_R, K19 Π⁻)."""
PERIODIC = 1
"""Schedule kind: crawl at absolute times ``phase + k * period`` (L2C K_R, κ^UI)."""
SIGNAL = 2
"""Schedule kind: crawl on each change signal with probability ``prob`` (K19 Π°)."""


class Schedule(NamedTuple):
    """Per-page crawl schedule for one window (a pytree: stack it to vary it over windows).

    Only the fields of a page's own ``kind`` are read; the others are ignored.

    Attributes:
      kind: ``(..., n)`` int32, one of :data:`POISSON`, :data:`PERIODIC`, :data:`SIGNAL`.
      rate: ``(..., n)`` Poisson crawl rate (``POISSON`` pages), >= 0.
      prob: ``(..., n)`` probability of crawling on each change signal (``SIGNAL``
        pages, which must be ``complete``), in [0, 1].
      period: ``(..., n)`` time between crawls (``PERIODIC`` pages), > 0; ``inf`` means
        never crawl.
      phase: ``(..., n)`` absolute time of one of the periodic crawls: the crawls are at
        ``phase + k * period`` for integers ``k``.
    """

    kind: jax.Array
    rate: jax.Array
    prob: jax.Array
    period: jax.Array
    phase: jax.Array


def _filled(like: jax.Array, value: float) -> jax.Array:
    return jnp.full(jnp.shape(like), value, dtype=jnp.result_type(like))


def _check_nonneg_finite(x: ArrayLike, name: str) -> None:
    a = np.asarray(x)
    if np.any(~np.isfinite(a)) or np.any(a < 0):
        raise ValueError(f"{name} must be finite and >= 0 for every page")


def poisson_schedule(rate: ArrayLike) -> Schedule:
    """Poisson crawling at ``rate`` per page (L2C §2 class Δ_R; K19 eq. 3, Π⁻)."""
    rate = as_float(rate)
    if is_concrete(rate):
        _check_nonneg_finite(rate, "rate")
    return Schedule(
        kind=jnp.full(rate.shape, POISSON, jnp.int32),
        rate=rate,
        prob=jnp.zeros_like(rate),
        period=_filled(rate, jnp.inf),
        phase=jnp.zeros_like(rate),
    )


def periodic_schedule(period: ArrayLike, phase: ArrayLike = 0.0) -> Schedule:
    """Crawls every ``period`` at absolute times ``phase + k * period``.

    The deterministic class K_R of L2C §5 (κ_i = period); the uniform-interval exploration
    policy κ^UI of L2C §5 / App. H is ``period = m / R`` for every page.  Use phases spread
    over ``[0, period)`` to spread the load, or :func:`~jaxcrawl.simulate.stationary_state`
    with random phases for a stationary start.
    """
    period = as_float(period)
    phase = jnp.broadcast_to(jnp.asarray(phase, dtype=period.dtype), period.shape)
    if is_concrete(period, phase):
        p = np.asarray(period)
        if np.any(np.isnan(p)) or np.any(p <= 0):
            raise ValueError("period must be > 0 for every page (inf means never crawl)")
        if not np.all(np.isfinite(np.asarray(phase))):
            raise ValueError("phase must be finite")
    return Schedule(
        kind=jnp.full(period.shape, PERIODIC, jnp.int32),
        rate=jnp.zeros_like(period),
        prob=jnp.zeros_like(period),
        period=period,
        phase=phase,
    )


def signal_schedule(prob: ArrayLike) -> Schedule:
    """Crawl on each change signal with probability ``prob`` (K19 eq. 6, Π°).

    Only valid for pages with complete change observations (``problem.complete``).
    """
    prob = as_float(prob)
    if is_concrete(prob):
        p = np.asarray(prob)
        if np.any(~np.isfinite(p)) or np.any(p < 0) or np.any(p > 1):
            raise ValueError("prob must be in [0, 1] for every page")
    return Schedule(
        kind=jnp.full(prob.shape, SIGNAL, jnp.int32),
        rate=jnp.zeros_like(prob),
        prob=prob,
        period=_filled(prob, jnp.inf),
        phase=jnp.zeros_like(prob),
    )


def schedule_from_policy(
    problem: CrawlProblem, policy: Policy, *, incomplete: str = "poisson", phase: ArrayLike = 0.0
) -> Schedule:
    """The schedule that executes a solver's :class:`~jaxcrawl.problem.Policy`.

    Pages with ``policy.on_signal`` (complete pages under LambdaCrawl) crawl on each
    change signal with probability ``policy.prob`` (K19 Π°, Prop. 4); every other page
    crawls as a Poisson process of rate ``policy.rate`` (K19 Π⁻, Prop. 1;
    ``incomplete="poisson"``) or every ``1 / policy.rate`` at ``phase`` (L2C K_R;
    ``incomplete="periodic"``; a zero rate never crawls).  A policy without an
    ``on_signal`` field uses ``problem.complete``.
    """
    if incomplete not in ("poisson", "periodic"):
        raise ValueError(f"incomplete must be 'poisson' or 'periodic', got {incomplete!r}")
    rate = jnp.asarray(policy.rate)
    on_signal = getattr(policy, "on_signal", None)
    on_signal = problem.complete if on_signal is None else on_signal
    sig = jnp.broadcast_to(jnp.asarray(on_signal, bool), rate.shape)
    prob = jnp.where(sig, jnp.asarray(policy.prob, rate.dtype), 0.0)
    if is_concrete(prob, rate):
        p = np.asarray(prob)
        if np.any(~np.isfinite(p)) or np.any(p < 0) or np.any(p > 1 + 1e-6):
            raise ValueError("policy.prob must be in [0, 1] for pages crawled on signals")
        _check_nonneg_finite(rate, "policy.rate")
    prob = jnp.clip(prob, 0.0, 1.0)  # removes rounding above 1 only (checked above)
    inc_kind = POISSON if incomplete == "poisson" else PERIODIC
    kind = jnp.where(sig, SIGNAL, inc_kind).astype(jnp.int32)
    if incomplete == "periodic":
        safe = jnp.where(rate > 0, rate, 1.0)
        period = jnp.where(rate > 0, 1.0 / safe, jnp.inf)
        pois_rate = jnp.zeros_like(rate)
    else:
        period = jnp.full_like(rate, jnp.inf)
        pois_rate = rate
    return Schedule(
        kind=kind,
        rate=jnp.where(sig, 0.0, pois_rate),
        prob=prob,
        period=jnp.where(sig, jnp.inf, period),
        phase=jnp.broadcast_to(jnp.asarray(phase, rate.dtype), rate.shape),
    )


def nominal_rate(problem: CrawlProblem, schedule: Schedule) -> jax.Array:
    r"""Long-run crawl rate of each page: ``rate``, ``1 / period`` or ``prob * change_rate``.

    The crawl rate a Poisson (K19 eq. 3), periodic (L2C K_R) or signal (K19 eq. 6,
    :math:`p_i\xi_i`) schedule spends, to compare with the bandwidth R.
    """
    safe = jnp.where(jnp.isfinite(schedule.period), schedule.period, 1.0)
    per = jnp.where(jnp.isfinite(schedule.period), 1.0 / safe, 0.0)
    return jnp.where(
        schedule.kind == POISSON,
        schedule.rate,
        jnp.where(schedule.kind == PERIODIC, per, schedule.prob * problem.change_rate),
    )
