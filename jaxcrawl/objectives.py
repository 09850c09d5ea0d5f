r"""Objectives of the crawling papers as pure, differentiable JAX functions.

Each takes a :class:`~jaxcrawl.CrawlProblem` and either a rate array ``(..., n)`` or a
:class:`~jaxcrawl.Policy`.  With a rate array, pages in ``problem.complete`` are taken
to be crawled on change signals with probability ``prob = rate / change_rate`` (capped
at 1: a complete page cannot be crawled more often than it signals) and all others are
crawled as Poisson processes.  With a Policy, its ``on_signal`` mask decides (e.g.
BinaryLambdaCrawl and the heuristics crawl every page as a Poisson process even when
change signals exist, as in the NeurIPS-19 baselines).

NeurIPS-19 (Kolobov et al.) costs are *page-averaged* (divided by the number of pages),
as that paper's experiments report them; Learning-to-Crawl (Upadhyay et al.) utilities
are *sums* over pages, as in that paper.  All functions reduce over the last axis and
keep leading (batch) axes; ``per_page=True`` returns the per-page terms instead.

Infinite costs where the papers say so (a page with zero crawl rate under harmonic
staleness or accumulated delay) are returned as ``inf``, never NaN, and gradients at
those points are finite (the double-``where`` trick).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from ._src.special import gamma2_cdf
from .problem import CrawlProblem, Policy

__all__ = [
    "harmonic_cost",
    "binary_cost",
    "binary_freshness",
    "accumulated_delay",
    "uniform_interval_freshness",
    "gamma2_cdf",
]

RateLike = jax.Array | Policy


def _rate_and_signal(problem: CrawlProblem, rate: RateLike):
    if isinstance(rate, Policy):
        return rate.rate, rate.on_signal
    return jnp.asarray(rate), problem.complete


def _reduce(per_page, per_page_flag, average):
    if per_page_flag:
        return per_page
    return jnp.mean(per_page, axis=-1) if average else jnp.sum(per_page, axis=-1)


def _safe_pos(x):
    """(x > 0 mask, x with non-positive entries replaced by 1) for gradient-safe logs/divisions."""
    pos = x > 0
    return pos, jnp.where(pos, x, jnp.ones_like(x))


def harmonic_cost(problem: CrawlProblem, rate: RateLike, *, per_page: bool = False) -> jax.Array:
    r"""Harmonic staleness penalty :math:`J^\pi_h` (NeurIPS-19 eq. 1-2), page-averaged.

    Incomplete pages crawled as Poisson(:math:`\rho`) (Prop. 1):
    :math:`\mu \ln\frac{\lambda+\rho}{\rho}`; complete pages crawled on each change
    signal with probability :math:`p=\rho/\lambda` (Prop. 4): :math:`-\mu\ln p`; the
    mixed policy cost is their sum (eq. 8), divided here by the number of pages.
    A page with :math:`\rho = 0` has infinite cost.

    Args:
      problem: the pages (importance μ, change_rate λ, complete mask).
      rate: crawl rates ``(..., n)`` or a :class:`Policy`.
      per_page: return the per-page terms (not divided by n) instead of the average.
    """
    rate, on_signal = _rate_and_signal(problem, rate)
    mu, lam = problem.importance, problem.change_rate
    pos, r = _safe_pos(rate)
    incomplete = mu * jnp.log1p(lam / r)
    prob = jnp.minimum(r / lam, 1.0)
    complete = -mu * jnp.log(prob)
    cost = jnp.where(on_signal, complete, incomplete)
    cost = jnp.where(pos, cost, jnp.inf)
    return _reduce(cost, per_page, average=True)


def binary_cost(problem: CrawlProblem, rate: RateLike, *, per_page: bool = False) -> jax.Array:
    r"""Binary staleness penalty :math:`J^\pi_b` (NeurIPS-19 supplement eq. 12-13), page-averaged.

    Incomplete pages (eq. 12): :math:`\mu\lambda/(\lambda+\rho)`; complete pages crawled
    on signal with probability :math:`p = \min(\rho/\lambda, 1)` (eq. 13):
    :math:`\mu(1-p)`.
    """
    rate, on_signal = _rate_and_signal(problem, rate)
    mu, lam = problem.importance, problem.change_rate
    incomplete = mu * lam / (lam + rate)
    complete = mu * (1.0 - jnp.minimum(rate / lam, 1.0))
    return _reduce(jnp.where(on_signal, complete, incomplete), per_page, average=True)


def binary_freshness(problem: CrawlProblem, rate: RateLike, *, per_page: bool = False) -> jax.Array:
    r"""Expected rate of requests served fresh, :math:`F(\rho;\xi)=\sum_i \zeta_i\rho_i/(\rho_i+\xi_i)`.

    Learning to Crawl eq. 5 (Azar et al.'s objective); every page is crawled as a
    Poisson process (the paper has no change signals).  A sum over pages, not averaged.
    """
    rate, _ = _rate_and_signal(problem, rate)
    zeta, xi = problem.importance, problem.change_rate
    return _reduce(zeta * rate / (rate + xi), per_page, average=False)


def accumulated_delay(problem: CrawlProblem, rate: RateLike, *, per_page: bool = False) -> jax.Array:
    r"""Accumulated delay (Sia, Cho & Cho), :math:`\sum_i \zeta_i\xi_i/\rho_i`.

    Learning to Crawl App. F eq. 25 writes the utility :math:`J = -\sum_i
    \zeta_i\xi_i/\rho_i`; this returns the (positive) delay, to be minimised.
    Infinite for a page with zero crawl rate.
    """
    rate, _ = _rate_and_signal(problem, rate)
    zeta, xi = problem.importance, problem.change_rate
    pos, r = _safe_pos(rate)
    return _reduce(jnp.where(pos, zeta * xi / r, jnp.inf), per_page, average=False)


def uniform_interval_freshness(problem: CrawlProblem, rate: RateLike, *, per_page: bool = False) -> jax.Array:
    r"""Freshness of uniform-interval (periodic) crawling, :math:`G(\rho;\xi)`.

    Learning to Crawl App. H / I.2: a page refreshed every :math:`1/\rho_i` time units
    serves requests fresh at rate
    :math:`\zeta_i\,\frac{1-e^{-\xi_i/\rho_i}}{\xi_i/\rho_i}`; summed over pages.
    Zero for a page that is never crawled.
    """
    rate, _ = _rate_and_signal(problem, rate)
    zeta, xi = problem.importance, problem.change_rate
    pos, r = _safe_pos(rate)
    u = xi / r
    val = zeta * (-jnp.expm1(-u)) / u
    return _reduce(jnp.where(pos, val, 0.0), per_page, average=False)
