r"""Optimal-rate solvers for known change rates, all built on :func:`jaxcrawl.allocate`.

Every solver is ``solver(problem, ...) -> Policy``.  A problem with leading batch axes
(``importance.shape == (..., n)``) is solved page-set by page-set with ``jax.vmap``;
every solver works under ``jax.jit``, ``jax.vmap`` and ``jax.grad`` (derivatives through
the dual root-find are exact, by the implicit function theorem in ``allocate``).  The
root-finding solvers are :func:`jaxcrawl.solve` with a built-in :class:`~jaxcrawl.Utility`
(:mod:`jaxcrawl.utilities`); they take ``max_steps``, ``rtol``, ``adjoint`` and ``throw``
as :func:`jaxcrawl.allocate` does, and their :class:`~jaxcrawl.Policy` says whether the
root-find ``converged``.

==========================  ===============================================  =============================
solver                      objective (maximised utility)                    paper
==========================  ===============================================  =============================
``lambda_crawl``            harmonic staleness, mixed observability          NeurIPS-19 Alg. 1, 2, 3
``lambda_crawl_approx``     Prop. 9 for incomplete pages + optimal split     NeurIPS-19 Prop. 9, §9.3
``binary_lambda_crawl``     binary freshness (Azar et al.), ε floor          NeurIPS-19 §9.3, L2C eq. 5
``uniform_crawl``           equal rates R/n                                  NeurIPS-19 §9.3 (UC)
``change_rate_crawl``       rates proportional to change rate                NeurIPS-19 §9.3 (CC)
``accumulated_delay_crawl`` accumulated delay (Sia et al.)                   L2C App. F eq. 26
``uniform_interval_crawl``  uniform-interval freshness G                     L2C App. H, I.2
==========================  ===============================================  =============================
"""
from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .problem import CrawlProblem, Policy, make_policy, raw_problem
from .utilities import (
    BINARY,
    HARMONIC,
    HARMONIC_APPROX,
    UNIFORM,
    _check_epsilon,
    incomplete_harmonic_rate,
    solve,
)

__all__ = [
    "lambda_crawl",
    "lambda_crawl_approx",
    "binary_lambda_crawl",
    "uniform_crawl",
    "change_rate_crawl",
    "accumulated_delay_crawl",
    "uniform_interval_crawl",
    "incomplete_harmonic_rate",
]


def _batched(solver: Callable) -> Callable:
    """Apply a single-problem closed-form solver over leading batch axes with ``jax.vmap``."""

    @functools.wraps(solver)
    def wrapper(problem: CrawlProblem, *args, **kwargs) -> Policy:
        if not isinstance(problem, CrawlProblem):
            raise TypeError(f"problem must be a jaxcrawl.CrawlProblem, got {type(problem).__name__}")
        if problem.importance.ndim == 1:
            return solver(problem, *args, **kwargs)
        batch = problem.importance.shape[:-1]
        flat = raw_problem(problem.importance, problem.change_rate,
                           jnp.broadcast_to(problem.bandwidth, batch), problem.complete)
        return jax.vmap(lambda p: wrapper(p, *args, **kwargs))(flat)

    return wrapper


def lambda_crawl(problem: CrawlProblem, *, max_steps: int = 100, rtol: float | None = None,
                 adjoint: str = "implicit", throw: bool = False,
                 min_rate: ArrayLike | None = None, max_rate: ArrayLike | None = None) -> Policy:
    r"""LambdaCrawl: the optimal harmonic-staleness policy under mixed observability.

    Kolobov et al., NeurIPS-19, Algorithms 1 (incomplete pages), 2 (complete pages) and
    3 (both).  Maximises (eq. 8 / Problem 3)

    .. math::

       \sum_{w\in W^-}\mu_w\ln\frac{\rho_w}{\lambda_w+\rho_w}
       + \sum_{w\in W^\circ}\mu_w\ln p_w
       \quad\text{s.t.}\quad \sum_{W^-}\rho_w + \sum_{W^\circ}p_w\lambda_w = R,\;
       0 < p_w \le 1.

    The KKT conditions give, with one multiplier ν for both page groups,
    :math:`\rho_w = (-\lambda_w+\sqrt{\lambda_w^2+4\mu_w\lambda_w/\nu})/2` (Prop. 2) and
    :math:`p_w\lambda_w = \min(\lambda_w, \mu_w/\nu)` (Prop. 5 with the active
    constraints of Alg. 2).  So the mixed problem is one root-find on ν — no
    golden-section search over the split of R (Alg. 3), and the result is exact.
    ``solve(problem, "harmonic")``.

    Returns:
      :class:`Policy` with ``on_signal = problem.complete``; ``dual`` is ν, and
      ``d harmonic_cost / d bandwidth = -dual / n`` at the optimum.
    """
    return solve(problem, HARMONIC, max_steps=max_steps, rtol=rtol, adjoint=adjoint, throw=throw,
                 min_rate=min_rate, max_rate=max_rate)


def lambda_crawl_approx(problem: CrawlProblem, *, max_steps: int = 100, rtol: float | None = None,
                        adjoint: str = "implicit", throw: bool = False,
                        min_rate: ArrayLike | None = None, max_rate: ArrayLike | None = None) -> Policy:
    r"""LambdaCrawlApprox: Prop. 9's change-rate-free rates for incomplete pages.

    Kolobov et al., NeurIPS-19, Prop. 9 and supplement §9.3.  If
    :math:`\mu_w/\lambda_w` is constant over :math:`W^-`, the optimal incomplete-page
    rates are :math:`\rho_w = \mu_w R^-/\sum_{W^-}\mu`, whatever the change rates;
    LCA uses these rates for the incomplete pages and LambdaCrawl-ComplObs (Alg. 2) for
    the complete ones.  The split :math:`R = R^- + R^\circ` is the one that minimises
    the true harmonic cost (eq. 8) given that structure (what Alg. 3's search over the
    split finds with Split-Eval-J using Prop. 9): since the cost is concave in the
    split, it is where the marginal values of both groups agree, found by one
    root-find on the scale :math:`d = \sum_{W^-}\mu/R^-` (``solve(problem, "harmonic-approx")``).

    Returns:
      :class:`Policy`; ``dual`` is the common marginal value of bandwidth.
    """
    return solve(problem, HARMONIC_APPROX, max_steps=max_steps, rtol=rtol, adjoint=adjoint, throw=throw,
                 min_rate=min_rate, max_rate=max_rate)


def binary_lambda_crawl(problem: CrawlProblem, epsilon: ArrayLike = 0.0, *, max_steps: int = 100,
                        rtol: float | None = None, adjoint: str = "implicit",
                        throw: bool = False, min_rate: ArrayLike | None = None,
                        max_rate: ArrayLike | None = None) -> Policy:
    r"""BinaryLambdaCrawl (Azar et al.'s optimum of binary freshness), and BLCε.

    Maximises :math:`\sum_i \zeta_i\rho_i/(\rho_i+\xi_i)` (Learning to Crawl eq. 5;
    equivalently minimises the binary cost of NeurIPS-19 eq. 12) subject to
    :math:`\sum_i\rho_i = R`.  KKT: :math:`\rho_i = \max(\ell,
    \sqrt{\zeta_i\xi_i/\nu}-\xi_i)`; with ``epsilon = 0`` (BLC) pages with
    :math:`\nu \ge \zeta_i/\xi_i` are starved (rate 0).  With ``epsilon > 0`` this is
    BLCε (NeurIPS-19 supplement §9.3): every page gets at least
    :math:`\ell = \varepsilon R/n`, and the rest is re-optimised — the fixed point of
    the supplement's "clamp and re-solve" procedure, i.e. the exact optimum with the
    floor as a constraint.

    Like the NeurIPS-19 baseline, complete pages are treated as incomplete ones
    (``on_signal`` is all False).

    Args:
      epsilon: fraction of the bandwidth spread uniformly as a floor, in [0, 1]
        (an array: differentiable and vmappable).
    """
    _check_epsilon(epsilon)
    n = problem.importance.shape[-1]
    bw = jnp.asarray(problem.bandwidth, problem.dtype)
    lower = (jnp.asarray(epsilon, problem.dtype) * bw / n)[..., None]
    return solve(problem, BINARY, lower=lower, max_steps=max_steps, rtol=rtol, adjoint=adjoint,
                 throw=throw, min_rate=min_rate, max_rate=max_rate)


def uniform_interval_crawl(problem: CrawlProblem, *, max_steps: int = 100, rtol: float | None = None,
                           adjoint: str = "implicit", throw: bool = False,
                           min_rate: ArrayLike | None = None, max_rate: ArrayLike | None = None) -> Policy:
    r"""Optimal uniform-interval (periodic) crawl rates for the utility G.

    Learning to Crawl App. H and I.2: refreshing page i every :math:`1/\rho_i` serves
    requests fresh at rate :math:`G_i = \zeta_i\rho_i(1-e^{-\xi_i/\rho_i})/\xi_i`,
    concave in :math:`\rho_i`.  KKT: :math:`(\zeta_i/\xi_i)\,h(\xi_i/\rho_i) = \nu` with
    :math:`h(u) = 1-(1+u)e^{-u}`, inverted per page (the shared safeguarded Newton on
    :math:`u-\log(1+u) = -\log(1-\nu\xi_i/\zeta_i)`); pages with
    :math:`\nu\ge\zeta_i/\xi_i` get rate 0.  Every page is crawled periodically
    (``on_signal`` all False); evaluate with :func:`uniform_interval_freshness`.
    ``solve(problem, "uniform")``.
    """
    return solve(problem, UNIFORM, max_steps=max_steps, rtol=rtol, adjoint=adjoint, throw=throw,
                 min_rate=min_rate, max_rate=max_rate)


# ------------------------------------------------------------------- closed forms
@_batched
def uniform_crawl(problem: CrawlProblem) -> Policy:
    r"""UniformCrawl: :math:`\rho_w = R/n` for every page (NeurIPS-19 supplement §9.3).

    Every page is crawled as a Poisson process.  ``dual`` is :math:`n/R`, the
    multiplier of the proportional-fairness problem :math:`\max\sum\ln\rho_w` that
    this allocation solves.
    """
    n = problem.importance.shape[-1]
    rate = jnp.full_like(problem.importance, 1.0) * (problem.bandwidth / n)
    return make_policy(problem, rate, n / problem.bandwidth,
                       on_signal=jnp.zeros_like(problem.complete))


@_batched
def change_rate_crawl(problem: CrawlProblem) -> Policy:
    r"""ChangeRateCrawl: :math:`\rho_w = \lambda_w R/\sum\lambda` (NeurIPS-19 §9.3, Cho & Garcia-Molina).

    Every page is crawled as a Poisson process.  ``dual`` is :math:`\sum\lambda/R`, the
    multiplier of :math:`\max\sum\lambda_w\ln\rho_w`, which this allocation solves.
    """
    lam = problem.change_rate
    total = jnp.sum(lam)
    rate = lam * (problem.bandwidth / total)
    return make_policy(problem, rate, total / problem.bandwidth,
                       on_signal=jnp.zeros_like(problem.complete))


@_batched
def accumulated_delay_crawl(problem: CrawlProblem) -> Policy:
    r"""Optimal rates for accumulated delay (Sia, Cho & Cho; Learning to Crawl App. F).

    Minimises :math:`\sum_i\zeta_i\xi_i/\rho_i` s.t. :math:`\sum\rho_i=R`; the closed
    form is eq. 26, :math:`\rho_i^* = R\sqrt{\zeta_i\xi_i}/\sum_j\sqrt{\zeta_j\xi_j}`,
    with optimal value eq. 27, :math:`(\sum_j\sqrt{\zeta_j\xi_j})^2/R`.  ``dual`` is
    :math:`(\sum_j\sqrt{\zeta_j\xi_j})^2/R^2`.  (``solve(problem, "delay")`` reaches the
    same optimum by the root-find, and takes host caps and bounds.)
    """
    root = jnp.sqrt(problem.importance) * jnp.sqrt(problem.change_rate)
    total = jnp.sum(root)
    rate = root * (problem.bandwidth / total)
    return make_policy(problem, rate, jnp.square(total / problem.bandwidth),
                       on_signal=jnp.zeros_like(problem.complete))
