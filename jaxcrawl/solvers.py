r"""Optimal-rate solvers for known change rates, all built on :func:`jaxcrawl.allocate`.

Every solver is ``solver(problem, ...) -> Policy``.  A problem with leading batch axes
(``importance.shape == (..., n)``) is solved page-set by page-set with ``jax.vmap``;
every solver works under ``jax.jit``, ``jax.vmap`` and ``jax.grad`` (derivatives through
the dual root-find are exact, by the implicit function theorem in ``allocate``).

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

import jax
import jax.numpy as jnp
import numpy as np

from .allocate import allocate
from .problem import CrawlProblem, Policy, is_concrete, make_policy

__all__ = [
    "lambda_crawl",
    "lambda_crawl_approx",
    "binary_lambda_crawl",
    "uniform_crawl",
    "change_rate_crawl",
    "accumulated_delay_crawl",
    "uniform_interval_crawl",
]


def _raw_problem(importance, change_rate, bandwidth, complete):
    """Build a CrawlProblem without validation (for already-validated, traced data)."""
    return jax.tree_util.tree_unflatten(
        jax.tree_util.tree_structure(CrawlProblem(jnp.ones(1), jnp.ones(1), 1.0)),
        [importance, change_rate, bandwidth, complete],
    )


def _batched(solver):
    """Apply a single-problem solver over any leading batch axes with ``jax.vmap``."""

    @functools.wraps(solver)
    def wrapper(problem: CrawlProblem, *args, **kwargs) -> Policy:
        if not isinstance(problem, CrawlProblem):
            raise TypeError(f"problem must be a jaxcrawl.CrawlProblem, got {type(problem).__name__}")
        if problem.importance.ndim == 1:
            return solver(problem, *args, **kwargs)
        batch = problem.importance.shape[:-1]
        bw = jnp.broadcast_to(problem.bandwidth, batch)
        flat = _raw_problem(problem.importance, problem.change_rate, bw, problem.complete)
        return jax.vmap(lambda p: wrapper(p, *args, **kwargs))(flat)

    return wrapper


def _sqrt_ratio(a, b, nu):
    """sqrt(a * b / nu) with one square root per page (products stay far from overflow:
    importance * change_rate <= 1e9 * 1e3 and nu >= 1e-30 in every tested range)."""
    return jnp.sqrt(a * b * (1.0 / nu))


@jax.custom_jvp
def incomplete_harmonic_rate(mu, lam, nu):
    r"""Optimal Poisson crawl rate of an incomplete page at multiplier ν (NeurIPS-19 Prop. 2).

    :math:`ho = (-\lambda + \sqrt{\lambda^2 + 4\mu\lambda/
u})/2`, computed without
    cancellation as :math:`2q/(\lambda+\sqrt{\lambda^2+4q})`, :math:`q=\mu\lambda/
u`.
    Its derivative comes from differentiating :math:`ho^2+\lambdaho=\mu\lambda/
u`
    (one division per page instead of autodiff through the square root), which keeps
    each root-finding pass cheap at web scale.
    """
    q = mu * lam * (1.0 / nu)
    return 2.0 * q / (lam + jnp.sqrt(lam * lam + 4.0 * q))


@incomplete_harmonic_rate.defjvp
def _incomplete_harmonic_rate_jvp(primals, tangents):
    mu, lam, nu = primals
    dmu, dlam, dnu = tangents
    r = incomplete_harmonic_rate(mu, lam, nu)
    inv = 1.0 / nu
    dr = (lam * inv * dmu + (mu * inv - r) * dlam - mu * lam * inv * inv * dnu) / (2.0 * r + lam)
    return r, dr


# --------------------------------------------------------------------- LambdaCrawl
def _lc_rate(nu, params):
    mu, lam, comp = params
    # Incomplete (Prop. 2) and complete (Prop. 5 relaxation: rho = p * lam = mu / nu,
    # capped at lam by the box) pages share the multiplier.
    return jnp.where(comp, mu * (1.0 / nu), incomplete_harmonic_rate(mu, lam, nu))


def _lc_marginal(x, params):
    mu, lam, comp = params
    return jnp.where(comp, mu / x, mu * lam / (x * (x + lam)))


@_batched
def lambda_crawl(problem: CrawlProblem, *, max_steps: int = 100, rtol=None,
                 adjoint: str = "implicit") -> Policy:
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

    Returns:
      :class:`Policy` with ``on_signal = problem.complete``; ``dual`` is ν, and
      ``d harmonic_cost / d bandwidth = -dual / n`` at the optimum.
    """
    mu, lam, comp = problem.importance, problem.change_rate, problem.complete
    upper = jnp.where(comp, lam, jnp.inf)
    sol = allocate(_lc_rate, (mu, lam, comp), problem.bandwidth, 0.0, upper,
                   marginal_fn=_lc_marginal, max_steps=max_steps, rtol=rtol, adjoint=adjoint)
    return make_policy(problem, sol.x, sol.dual, sol.residual, sol.num_steps)


# -------------------------------------------------------------- LambdaCrawlApprox
def _lca_parts(d, mu, lam, comp):
    inc = ~comp
    m_inc = jnp.sum(jnp.where(inc, mu, 0.0))
    has_inc = m_inc > 0
    m_safe = jnp.where(has_inc, m_inc, 1.0)
    # V'(s) at s = 1/d: marginal harmonic utility of the incomplete group's bandwidth when
    # it is spread by Prop. 9 (rho_w = mu_w s):  (1/M) sum mu lam d^2 / (mu + lam d).
    terms = jnp.where(inc, mu * lam * d * d / (mu + lam * d), 0.0)
    vprime = jnp.where(has_inc, jnp.sum(terms) / m_safe, d)
    return vprime


def _lca_rate(d, params):
    mu, lam, comp = params
    vprime = _lca_parts(d, mu, lam, comp)
    return jnp.where(comp, mu / vprime, mu / d)


@_batched
def lambda_crawl_approx(problem: CrawlProblem, *, max_steps: int = 100, rtol=None,
                        adjoint: str = "implicit") -> Policy:
    r"""LambdaCrawlApprox: Prop. 9's change-rate-free rates for incomplete pages.

    Kolobov et al., NeurIPS-19, Prop. 9 and supplement §9.3.  If
    :math:`\mu_w/\lambda_w` is constant over :math:`W^-`, the optimal incomplete-page
    rates are :math:`\rho_w = \mu_w R^-/\sum_{W^-}\mu`, whatever the change rates;
    LCA uses these rates for the incomplete pages and LambdaCrawl-ComplObs (Alg. 2) for
    the complete ones.  The split :math:`R = R^- + R^\circ` is the one that minimises
    the true harmonic cost (eq. 8) given that structure (what Alg. 3's search over the
    split finds with Split-Eval-J using Prop. 9): since the cost is concave in the
    split, it is where the marginal values of both groups agree, found here by one
    root-find on the scale :math:`s = R^-/\sum_{W^-}\mu` (through ``allocate``).

    Returns:
      :class:`Policy`; ``dual`` is the common marginal value of bandwidth.
    """
    mu, lam, comp = problem.importance, problem.change_rate, problem.complete
    R = problem.bandwidth
    m_inc = jnp.sum(jnp.where(comp, 0.0, mu))
    d0 = jnp.where(m_inc > 0, m_inc / R, jnp.sum(mu) / R)
    upper = jnp.where(comp, lam, jnp.inf)
    sol = allocate(_lca_rate, (mu, lam, comp), R, 0.0, upper,
                   bracket=(d0, 2.0 * d0), max_steps=max_steps, rtol=rtol, adjoint=adjoint)
    dual = _lca_parts(sol.dual, mu, lam, comp)
    return make_policy(problem, sol.x, dual, sol.residual, sol.num_steps)


# ------------------------------------------------------------ BinaryLambdaCrawl
def _blc_rate(nu, params):
    zeta, xi = params
    return _sqrt_ratio(zeta, xi, nu) - xi


def _blc_marginal(x, params):
    zeta, xi = params
    return zeta * xi / jnp.square(x + xi)


@_batched
def binary_lambda_crawl(problem: CrawlProblem, epsilon=0.0, *, max_steps: int = 100,
                        rtol=None, adjoint: str = "implicit") -> Policy:
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
      epsilon: fraction of the bandwidth spread uniformly as a floor, in [0, 1].
    """
    if is_concrete(epsilon):
        e = np.asarray(epsilon)
        if not np.all(np.isfinite(e)) or np.any(e < 0) or np.any(e > 1):
            raise ValueError(f"epsilon must be in [0, 1]; got {epsilon}")
    zeta, xi = problem.importance, problem.change_rate
    n = zeta.shape[-1]
    lower = jnp.asarray(epsilon, zeta.dtype) * problem.bandwidth / n
    sol = allocate(_blc_rate, (zeta, xi), problem.bandwidth, lower, jnp.inf,
                   marginal_fn=_blc_marginal, max_steps=max_steps, rtol=rtol, adjoint=adjoint)
    return make_policy(problem, sol.x, sol.dual, sol.residual, sol.num_steps,
                       on_signal=jnp.zeros_like(problem.complete))


# ------------------------------------------------------------------- heuristics
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
    :math:`(\sum_j\sqrt{\zeta_j\xi_j})^2/R^2`.
    """
    root = jnp.sqrt(problem.importance) * jnp.sqrt(problem.change_rate)
    total = jnp.sum(root)
    rate = root * (problem.bandwidth / total)
    return make_policy(problem, rate, jnp.square(total / problem.bandwidth),
                       on_signal=jnp.zeros_like(problem.complete))


# ------------------------------------------------------- uniform-interval optimum
def _k_series(u):
    # k(u) = u - log1p(u) = sum_{j>=2} (-1)^j u^j / j, for |u| < 0.1
    acc = jnp.zeros_like(u)
    for j in range(18, 1, -1):
        acc = (acc + ((-1.0) ** j) / j) * u
    return acc * u


def _k(u):
    small = u < 0.1
    us = jnp.where(small, u, 0.0)
    ul = jnp.where(small, 1.0, u)
    return jnp.where(small, _k_series(us), ul - jnp.log1p(ul))


@jax.custom_jvp
def _k_inverse(a):
    """u >= 0 with u - log1p(u) = a (a >= 0), by Newton from above (monotone: k is convex)."""
    u = a + jnp.sqrt(a * a + 2.0 * a)
    for _ in range(12):
        us = jnp.where(u > 0, u, 1.0)
        u = jnp.where(u > 0, u - (_k(u) - a) * (1.0 + us) / us, 0.0)
    return u


@_k_inverse.defjvp
def _k_inverse_jvp(primals, tangents):
    (a,), (da,) = primals, tangents
    u = _k_inverse(a)
    us = jnp.where(u > 0, u, 1.0)
    return u, jnp.where(u > 0, da * (1.0 + us) / us, 0.0)


def _ui_rate(nu, params):
    zeta, xi = params
    # dG/drho = (zeta/xi) h(xi/rho) with h(u) = 1 - (1+u) e^{-u}; solve h(u) = c = nu xi / zeta,
    # i.e. u - log1p(u) = -log1p(-c).  c >= 1 means the page is not worth crawling.
    c = nu * xi / zeta
    valid = c < 1.0
    cs = jnp.where(valid, c, 0.5)
    u = _k_inverse(-jnp.log1p(-cs))
    us = jnp.where(valid & (u > 0), u, 1.0)
    return jnp.where(valid, jnp.where(u > 0, xi / us, jnp.inf), 0.0)


def _ui_marginal(x, params):
    from .objectives import gamma2_cdf

    zeta, xi = params
    return zeta / xi * gamma2_cdf(xi / x)


@_batched
def uniform_interval_crawl(problem: CrawlProblem, *, max_steps: int = 100, rtol=None,
                           adjoint: str = "implicit") -> Policy:
    r"""Optimal uniform-interval (periodic) crawl rates for the utility G.

    Learning to Crawl App. H and I.2: refreshing page i every :math:`1/\rho_i` serves
    requests fresh at rate :math:`G_i = \zeta_i\rho_i(1-e^{-\xi_i/\rho_i})/\xi_i`,
    concave in :math:`\rho_i`.  KKT: :math:`(\zeta_i/\xi_i)\,h(\xi_i/\rho_i) = \nu` with
    :math:`h(u) = 1-(1+u)e^{-u}`, inverted per page inside ``allocate`` (Newton on
    :math:`u-\log(1+u) = -\log(1-\nu\xi_i/\zeta_i)`); pages with
    :math:`\nu\ge\zeta_i/\xi_i` get rate 0.  Every page is crawled periodically
    (``on_signal`` all False); evaluate with :func:`uniform_interval_freshness`.
    """
    zeta, xi = problem.importance, problem.change_rate
    sol = allocate(_ui_rate, (zeta, xi), problem.bandwidth, 0.0, jnp.inf,
                   marginal_fn=_ui_marginal, max_steps=max_steps, rtol=rtol, adjoint=adjoint)
    return make_policy(problem, sol.x, sol.dual, sol.residual, sol.num_steps,
                       on_signal=jnp.zeros_like(problem.complete))


_SOLVER_OPTIONS_DOC = """
All root-finding solvers take ``max_steps`` (cap on passes), ``rtol`` (budget tolerance of
the root-find before the final correction) and ``adjoint`` (``"implicit"``: exact
derivatives by the implicit function theorem; ``"unrolled"``: differentiate through a fixed
number of iterations — a baseline only; see :func:`jaxcrawl.allocate`).
"""
