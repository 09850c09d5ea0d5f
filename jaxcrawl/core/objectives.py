r"""Objectives as values: the :class:`Objective` type, the built-in objectives and their costs.

Every optimal-rate problem of the papers maximises a separable concave utility under the
crawl budget, :math:`\max_x\sum_i u_i(x_i)` s.t. :math:`\sum_i x_i=R`,
:math:`\ell_i\le x_i\le h_i`.  A solve needs from an objective only the per-page inverse
marginal :math:`x_i(\nu)=(u_i')^{-1}(\nu)` (``rate``), the marginal :math:`u_i'`
(``marginal``, for the dual bracket), how to read its parameters from a
:class:`~jaxcrawl.CrawlProblem` (``params``), optional per-page bounds and which pages are
crawled on their change signals.  An :class:`Objective` holds exactly that, with its
per-page value; the built-ins are made by small constructors (:func:`harmonic`,
:func:`harmonic_approx`, :func:`binary`, :func:`delay`, :func:`uniform`), and the cost
functions of this module (:func:`harmonic_cost`, :func:`binary_freshness`,
:func:`accumulated_delay`, :func:`uniform_interval_freshness`) evaluate the same per-page
definitions.  :func:`jaxcrawl.solve` takes any objective, built-in or your own.

Example -- weighted log utility :math:`u_i(x)=\zeta_i\log x` (proportional fairness)::

    log_utility = jaxcrawl.Objective(
        name="log",
        rate=lambda nu, p: p[0] / nu,           # (u')^{-1}(nu) = zeta / nu
        marginal=lambda x, p: p[0] / x,         # u'(x) = zeta / x
    )
    policy = jaxcrawl.solve(problem, log_utility)

An objective is a static argument of the compiled solve: define its functions at module
level (a new closure per call compiles again).  It is a pytree with no leaves (its whole
value is static aux data), so it also passes through ``jax.jit`` as a plain argument and
``tree_map`` does not visit its functions.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .._src import rootfind, special
from .._src.special import incomplete_harmonic_rate
from .problem import CrawlProblem, Policy

__all__ = [
    "Objective",
    "GapForm",
    "objective",
    "register_objective",
    "objective_names",
    "harmonic",
    "harmonic_approx",
    "binary",
    "delay",
    "uniform",
    "harmonic_cost",
    "binary_cost",
    "binary_freshness",
    "accumulated_delay",
    "uniform_interval_freshness",
]

Params = Any


def _default_params(problem: CrawlProblem) -> Params:
    """``(importance, change_rate)``: the parameters of most objectives."""
    return (problem.importance, problem.change_rate)


class GapForm(NamedTuple):
    r"""An objective's rates and marginals measured from its marginal at zero, for duals so
    close to it that the dual itself cannot tell them apart (a bandwidth far below the
    change rates).

    For an objective whose marginal at zero :math:`m_i=u_i'(0)` is finite (binary
    freshness, uniform-interval freshness), the optimal dual of a small bandwidth sits just
    below :math:`\max_i m_i`: within :math:`\approx 2R/\lambda` (relative) for binary
    freshness and within :math:`e^{-\lambda/R}` for uniform-interval freshness.  A
    :class:`GapForm` gives the same functions in the variable

    .. math:: q = -\log g,\qquad g = \log(m_i/\nu) \ge 0,

    which stays representable and well conditioned at every bandwidth; the solve then
    iterates on :math:`\tau = -\log\log(m_k/\nu)` from an origin page :math:`k`.

    Attributes:
      top: ``top(params) -> log m_i`` per page (``-inf`` for a page never worth crawling).
      rate: ``rate(q, params) -> \varphi_i(m_i \exp(-e^{-q}))``, nonincreasing in ``q``, 0 at
        ``q = +inf``; may return ``inf``, never NaN.
      marginal: ``marginal(x, params) -> -log(log(m_i / u_i'(x)))``, the inverse of ``rate``.
      log_ratio: optional ``log_ratio(params, top_params) -> log(m_top / m_i) >= 0`` per page,
        accurate to a few ulps absolute; default ``top(top_params) - top(params)``.
    """

    top: Callable[[Params], jax.Array]
    rate: Callable[[jax.Array, Params], jax.Array]
    marginal: Callable[[jax.Array, Params], jax.Array]
    log_ratio: Callable[[Params, Params], jax.Array] | None = None


class Objective(NamedTuple):
    r"""A separable concave objective :math:`\sum_i u_i(x_i)`, as the solve sees it.

    Attributes:
      name: registry name (what the CLI's ``--objective`` takes once registered).
      rate: ``rate(dual, params) -> x``: the per-page inverse marginal
        :math:`(u_i')^{-1}(\nu)`, nonincreasing in the dual; may return ``inf`` (never
        NaN) where a page wants unbounded rate and 0 where none.
      marginal: ``marginal(x, params) -> u'(x)`` (per page), for the dual bracket and host
        caps.  ``None`` only for non-separable objectives, which give ``bracket``.
      params: ``params(problem) -> pytree`` of per-page arrays (default
        ``(importance, change_rate)``); derivatives flow to every leaf.
      bounds: optional ``bounds(params, bandwidth, num_pages) -> (lower, upper)`` per-page
        rate bounds (default ``0`` and ``inf``).
      on_signal: optional ``on_signal(params) -> bool mask`` of pages crawled on their
        change signals (default: none).
      value: optional ``value(x, params) -> u(x)`` per page.
      bracket: optional ``bracket(params, bandwidth) -> (a, b)`` starting dual bracket,
        for objectives without ``marginal``.
      dual: optional ``dual(nu, params) -> reported dual`` (default: ν itself).
      separable: False when ``rate`` couples pages (through sums over them): such an
        objective cannot be host-capped, streamed or spread over processes.
      homogeneous: True when the optimum is equivariant under the model's two scalings
        (importance :math:`\times a` leaves the rates unchanged; change rates, bounds and
        bandwidth :math:`\times c` multiply the rates by :math:`c`; the dual scales by
        :math:`a/c`), as for every built-in.  The solve then works in units where the
        largest importance (of a sample, for a large problem) and the mean rate are 1, and
        solves a problem of 65,536 pages or more in memory by a search on the log of the
        dual (Solvers, Large problems): its utilities must be increasing (a dual > 0).
      gap: optional :class:`GapForm`: the solve then re-solves on the dual's log-gap where
        the plain dual cannot resolve the answer.
    """

    name: str
    rate: Callable[[jax.Array, Params], jax.Array]
    marginal: Callable[[jax.Array, Params], jax.Array] | None
    params: Callable[[CrawlProblem], Params] = _default_params
    bounds: Callable[[Params, jax.Array, int], tuple] | None = None
    on_signal: Callable[[Params], jax.Array] | None = None
    value: Callable[[jax.Array, Params], jax.Array] | None = None
    bracket: Callable[[Params, jax.Array], tuple] | None = None
    dual: Callable[[jax.Array, Params], jax.Array] | None = None
    separable: bool = True
    homogeneous: bool = False
    gap: GapForm | None = None

    def page_bounds(self, params: Params, bandwidth: ArrayLike, num_pages: int, dtype: Any) -> tuple:
        """``(lower, upper)`` per page (scalars when the objective has no bounds)."""
        if self.bounds is None:
            return jnp.zeros((), dtype), jnp.full((), jnp.inf, dtype)
        lo, hi = self.bounds(params, bandwidth, num_pages)
        return jnp.asarray(lo, dtype), jnp.asarray(hi, dtype)

    def signal_mask(self, params: Params, shape: tuple) -> jax.Array:
        """Pages crawled on their change signals (all False by default)."""
        if self.on_signal is None:
            return jnp.zeros(shape, bool)
        return jnp.broadcast_to(self.on_signal(params), shape)


def _static_node(cls):
    """Register ``cls`` (a NamedTuple of functions, names and flags) as a pytree node with no
    leaves whose whole value is its static aux data: an objective passes through ``jax.jit``
    as a plain argument (hashed and compared, never traced), and ``tree_map`` over a pytree
    holding one does not visit its functions -- the role of equinox's static fields."""
    jax.tree_util.register_pytree_node(cls, lambda obj: ((), obj), lambda obj, _: obj)
    return cls


_static_node(GapForm)
_static_node(Objective)


# ------------------------------------------------------------------------- registry
_REGISTRY: dict[str, Objective] = {}


def register_objective(obj: Objective, *, overwrite: bool = False) -> Objective:
    """Add ``obj`` to the registry under ``obj.name`` (returns it)."""
    if not isinstance(obj, Objective):
        raise TypeError(f"register_objective takes a jaxcrawl.Objective; got {type(obj).__name__}")
    if obj.name in _REGISTRY and not overwrite and _REGISTRY[obj.name] is not obj:
        raise ValueError(f"an objective named {obj.name!r} is already registered (overwrite=True replaces it)")
    _REGISTRY[obj.name] = obj
    return obj


def objective_names() -> tuple[str, ...]:
    """Names of the registered objectives, in registration order."""
    return tuple(_REGISTRY)


def objective(name: str | Objective) -> Objective:
    """The :class:`Objective` of a registry name (or the objective itself)."""
    if isinstance(name, Objective):
        return name
    if isinstance(name, str):
        try:
            return _REGISTRY[name]
        except KeyError:
            raise ValueError(f"unknown objective {name!r}; registered: {', '.join(_REGISTRY)}") from None
    raise TypeError(f"objective must be a registry name or a jaxcrawl.Objective; got {type(name).__name__}")


_LOG2 = float(np.log(2.0))  # Python floats: weakly typed, so float32 stays float32 under x64
_SQRT2 = float(np.sqrt(2.0))


def _log_ratio_top(params):
    """``log(zeta / xi)``: the log of the marginal at zero of binary and uniform freshness."""
    zeta, xi = params
    return special.log_gap(zeta, xi)


def _log_ratio_pair(params, top_params):
    """``log((zeta_t / xi_t) / (zeta_i / xi_i))`` as one log of a product of ratios (a few ulps
    absolute; the difference of the two logs where the product leaves the normal range)."""
    zeta, xi = params
    zt, xt = top_params
    prod = (zt / zeta) * (xi / xt)
    tiny = jnp.finfo(jnp.result_type(prod)).tiny
    ok = jnp.isfinite(prod) & (prod > tiny)
    return jnp.where(ok, jnp.log(jnp.where(ok, prod, 1.0)), _log_ratio_top(top_params) - _log_ratio_top(params))


# ---------------------------------------------------------------- harmonic staleness
def _mixed_params(problem):
    return (problem.importance, problem.change_rate, jnp.asarray(problem.complete).astype(bool))


def _mixed_bounds(params, bandwidth, num_pages):
    _, lam, comp = params
    return 0.0, jnp.where(comp, lam, jnp.inf)


def _mixed_signal(params):
    return params[2]


def _harmonic_rate(nu, params):
    mu, lam, comp = params
    # Incomplete (Prop. 2) and complete (Prop. 5 relaxation: rho = p lam = mu / nu, capped
    # at lam by the bounds) pages share the multiplier.
    return jnp.where(comp, mu * (1.0 / nu), incomplete_harmonic_rate(mu, lam, nu))


def _harmonic_marginal(x, params):
    mu, lam, comp = params
    return jnp.where(comp, mu / x, mu * lam / (x * (x + lam)))


def _harmonic_staleness(rate, mu, lam, on_signal):
    """Per-page harmonic staleness penalty (NeurIPS-19 Prop. 1 and 4): ``mu log(1 + lam/rate)``
    for a Poisson-crawled page, ``-mu log(min(rate/lam, 1))`` for one crawled on its signals;
    ``inf`` at rate 0, with finite gradients there (double ``where``)."""
    pos = rate > 0
    r = jnp.where(pos, rate, jnp.ones_like(rate))
    cost = jnp.where(on_signal, -mu * jnp.log(jnp.minimum(r / lam, 1.0)), mu * jnp.log1p(lam / r))
    return jnp.where(pos, cost, jnp.inf)


def _harmonic_value(x, params):
    mu, lam, comp = params
    return -_harmonic_staleness(x, mu, lam, comp)


_HARMONIC = register_objective(Objective(
    name="harmonic", rate=_harmonic_rate, marginal=_harmonic_marginal, params=_mixed_params,
    bounds=_mixed_bounds, on_signal=_mixed_signal, value=_harmonic_value, homogeneous=True))


# --------------------------------------------------------------- LambdaCrawlApprox
def _lca_vprime(d, params):
    r"""Marginal harmonic utility of the incomplete group's bandwidth when it is spread by
    Prop. 9 (:math:`\rho_w=\mu_w/d`): :math:`(1/M)\sum\mu\lambda d^2/(\mu+\lambda d)`."""
    mu, lam, comp = params
    inc = ~comp
    m_inc = jnp.sum(jnp.where(inc, mu, 0.0))
    has_inc = m_inc > 0
    terms = jnp.where(inc, mu * lam * d * d / (mu + lam * d), 0.0)
    return jnp.where(has_inc, jnp.sum(terms) / jnp.where(has_inc, m_inc, 1.0), d)


def _lca_rate(d, params):
    mu, _, comp = params
    return jnp.where(comp, mu / _lca_vprime(d, params), mu / d)


def _lca_bracket(params, bandwidth):
    mu, _, comp = params
    m_inc = jnp.sum(jnp.where(comp, 0.0, mu))
    d0 = jnp.where(m_inc > 0, m_inc / bandwidth, jnp.sum(mu) / bandwidth)
    return d0, 2.0 * d0


_HARMONIC_APPROX = register_objective(Objective(
    name="harmonic-approx", rate=_lca_rate, marginal=None, params=_mixed_params,
    bounds=_mixed_bounds, on_signal=_mixed_signal, value=_harmonic_value, bracket=_lca_bracket,
    dual=_lca_vprime, separable=False, homogeneous=True))


# ------------------------------------------------------------------ binary freshness
@jax.custom_jvp
def _sqrt_ratio(zeta, xi, nu):
    """sqrt(zeta xi / nu), with the derivative s/2 (dzeta/zeta + dxi/xi - dnu/nu): autodiff
    goes through 1/nu^2, which overflows float32 at the tiny duals of a bandwidth far below
    the change rates (the closing correction then had no slope to use)."""
    return jnp.sqrt(zeta * xi * (1.0 / nu))


@_sqrt_ratio.defjvp
def _sqrt_ratio_jvp(primals, tangents):
    zeta, xi, nu = primals
    dzeta, dxi, dnu = tangents
    s = _sqrt_ratio(zeta, xi, nu)
    return s, 0.5 * s * (dzeta / zeta + dxi / xi - dnu / nu)


def _binary_rate(nu, params):
    zeta, xi = params
    return _sqrt_ratio(zeta, xi, nu) - xi


def _binary_marginal(x, params):
    zeta, xi = params
    return zeta * xi / jnp.square(x + xi)


def _binary_value(x, params):
    """Per-page binary freshness ``zeta x / (x + xi)`` (L2C eq. 5)."""
    zeta, xi = params
    return zeta * x / (x + xi)


def _binary_gap_rate(q, params):
    # sqrt(zeta xi / nu) - xi at nu = (zeta / xi) exp(-e^{-q})
    zeta, xi = params
    return xi * jnp.expm1(0.5 * jnp.exp(-q))


def _binary_gap_marginal(x, params):
    # -log log(u'(0) / u'(x)) = -log(2 log(1 + x / xi))
    zeta, xi = params
    return -jnp.log(2.0 * jnp.log1p(x / xi))


_BINARY_GAP = GapForm(top=_log_ratio_top, rate=_binary_gap_rate, marginal=_binary_gap_marginal,
                     log_ratio=_log_ratio_pair)

_BINARY = register_objective(Objective(
    name="binary", rate=_binary_rate, marginal=_binary_marginal, value=_binary_value, homogeneous=True,
    gap=_BINARY_GAP))


@functools.cache
def _binary_epsilon(eps: float) -> Objective:
    def bounds(params, bandwidth, num_pages):
        return eps * bandwidth / num_pages, jnp.inf

    return Objective(name="binary-epsilon" if eps == 0.4 else f"binary-epsilon({eps:g})",
                     rate=_binary_rate, marginal=_binary_marginal, bounds=bounds, value=_binary_value,
                     homogeneous=True, gap=_BINARY_GAP)


register_objective(_binary_epsilon(0.4))


# ------------------------------------------------------------------- accumulated delay
def _delay_rate(nu, params):
    zeta, xi = params
    return _sqrt_ratio(zeta, xi, nu)


def _delay_marginal(x, params):
    zeta, xi = params
    return zeta * xi / jnp.square(x)


def _delay_terms(rate, zeta, xi):
    """Per-page accumulated delay ``zeta xi / rate`` (L2C App. F eq. 25), ``inf`` at rate 0."""
    pos = rate > 0
    return jnp.where(pos, zeta * xi / jnp.where(pos, rate, jnp.ones_like(rate)), jnp.inf)


def _delay_value(x, params):
    zeta, xi = params
    return -_delay_terms(x, zeta, xi)


_DELAY = register_objective(Objective(
    name="delay", rate=_delay_rate, marginal=_delay_marginal, value=_delay_value, homogeneous=True))


# ------------------------------------------------------- uniform-interval freshness
def _k_residual(u, a):
    return a - special.u_minus_log1p(u)


def _k_inverse(a):
    """``u >= 0`` with ``u - log1p(u) = a`` (``a >= 0``), by the shared safeguarded Newton on
    the bracket ``[sqrt(2a), a + sqrt(a^2 + 2a)]`` (``u^2/(2(1+u)) <= k(u) <= u^2/2``)."""
    lo = jnp.sqrt(2.0 * a)
    big = a > 1.0  # a (1 + sqrt(1 + 2/a)): no a^2 to overflow
    hi = jnp.where(big, a * (1.0 + jnp.sqrt(1.0 + 2.0 / jnp.where(big, a, 1.0))), a + jnp.sqrt(a * a + 2.0 * a))
    return rootfind.solve_monotone(_k_residual, a, lo, jnp.maximum(hi, lo), x0=hi, max_steps=32).x


def _uniform_rate(nu, params):
    zeta, xi = params
    # dG/drho = (zeta/xi) h(xi/rho), h(u) = 1 - (1+u) e^{-u}; solve h(u) = c = nu xi / zeta,
    # i.e. u - log1p(u) = -log1p(-c).  c >= 1: the page is not worth crawling.
    c = nu * xi / zeta
    valid = c < 1.0
    u = _k_inverse(-jnp.log1p(-jnp.where(valid, c, 0.5)))
    us = jnp.where(valid & (u > 0), u, 1.0)
    # Far below the page's threshold (h(u) = u^2/2 (1 + O(u)), so u = sqrt(2c) to within u/3
    # relative): x = xi/u = sqrt(zeta xi / (2 nu)), formed from square roots so that c may
    # underflow (a page changing far slower than it is crawled) without x becoming inf.
    root_c = jnp.sqrt(nu) * jnp.sqrt(xi) / jnp.sqrt(zeta)
    tiny = root_c < jnp.finfo(root_c.dtype).eps
    far = jnp.sqrt(zeta) * jnp.sqrt(xi) / (jnp.sqrt(2.0) * jnp.sqrt(nu))
    return jnp.where(valid, jnp.where(tiny, far, jnp.where(u > 0, xi / us, jnp.inf)), 0.0)


def _uniform_marginal(x, params):
    zeta, xi = params
    r = xi / x
    # P(2, r) = r^2/2 (1 - 2r/3 + O(r^2)): for a page crawled far more often than it
    # changes, (zeta/x)(r/2)(1 - 2r/3) keeps the marginal from underflowing through r^2.
    small = r < jnp.sqrt(jnp.finfo(jnp.result_type(r)).eps)
    series = (zeta / x) * (0.5 * r) * (1.0 - (2.0 / 3.0) * r)
    return jnp.where(small, series, zeta / xi * special.gamma2_cdf(jnp.where(small, 1.0, r)))


def _uniform_value(x, params):
    """Per-page uniform-interval freshness ``zeta (1 - e^{-u}) / u``, ``u = xi / x`` (L2C App. H);
    0 for a page never crawled."""
    zeta, xi = params
    pos = x > 0
    u = xi / jnp.where(pos, x, 1.0)
    return jnp.where(pos, zeta * (-jnp.expm1(-u)) / u, 0.0)


@jax.custom_jvp
def _neg_log_one_minus_exp_neg(q):
    """``-log(1 - e^{-s})`` at ``s = e^{-q}`` (equal to ``q`` where ``s`` underflows)."""
    dtype = jnp.result_type(q)
    s = jnp.exp(-q)
    small = s < _LOG2
    # small s: q - log((1 - e^{-s}) / s), the ratio 1 to rounding once s is tiny; large s: log1p
    ss = jnp.where(small & (s > jnp.finfo(dtype).tiny), s, 1.0)
    ratio = jnp.where(s > jnp.finfo(dtype).tiny, -jnp.expm1(-ss) / ss, 1.0)
    sl = jnp.where(small, 1.0, s)
    return jnp.where(small, q - jnp.log(ratio), -jnp.log1p(-jnp.exp(-sl)))


@_neg_log_one_minus_exp_neg.defjvp
def _neg_log_one_minus_exp_neg_jvp(primals, tangents):
    # d/dq = s / (e^s - 1): 1 where s underflows (autodiff of the ratio goes through 1/s^2)
    (q,), (dq,) = primals, tangents
    s = jnp.exp(-q)
    pos = s > 0
    slope = jnp.where(pos, jnp.where(pos, s, 1.0) * special.inv_expm1(jnp.where(pos, s, 1.0)), 1.0)
    return _neg_log_one_minus_exp_neg(q), slope * dq


@jax.custom_jvp
def _quotient(a, b):
    """``a / b`` with the derivative ``(da - (a/b) db) / b`` (autodiff's ``a db / b^2`` overflows
    where ``b`` is large)."""
    return a / b


@_quotient.defjvp
def _quotient_jvp(primals, tangents):
    (a, b), (da, db) = primals, tangents
    r = _quotient(a, b)
    return r, (da - r * db) / b


def _uniform_gap_rate(q, params):
    # _uniform_rate at nu = (zeta / xi) e^{-s}, s = e^{-q}: c = e^{-s}, u - log1p(u) = a = -log(1 - e^{-s})
    zeta, xi = params
    dtype = jnp.result_type(q)
    s = jnp.exp(-q)
    a = _neg_log_one_minus_exp_neg(q)
    ok = a > 0
    u = _k_inverse(jnp.where(ok, a, 1.0))
    # far below the page's threshold (sqrt(c) < eps): x = sqrt(zeta xi / (2 nu)) = xi e^{s/2} / sqrt(2)
    far = s > -2.0 * float(np.log(np.finfo(dtype).eps))
    near = _quotient(xi, jnp.where(ok & (u > 0), u, 1.0))
    return jnp.where(far, xi * (jnp.exp(0.5 * jnp.where(far, s, 0.0)) / _SQRT2),
                     jnp.where(ok & (u > 0), near, jnp.inf))


def _uniform_gap_marginal(x, params):
    # -log g, g = -log P(2, r), r = xi / x: u'(x) = (zeta / xi) P(2, xi / x), u'(0) = zeta / xi
    zeta, xi = params
    dtype = jnp.result_type(x, xi)
    eps = np.finfo(dtype).eps
    pos = x > 0
    r = xi / jnp.where(pos, x, 1.0)
    small = r < float(np.sqrt(eps))
    huge = r > -2.0 * float(np.log(eps))  # g = (1 + r) e^{-r} to rounding: q = r - log(1 + r)
    large = (r >= 1.0) & ~huge
    rs = jnp.where(small, r, 1.0)
    rl = jnp.where(large, r, 1.0)
    rm = jnp.where(small | large | huge, 0.5, r)
    g_small = _LOG2 - 2.0 * jnp.log(rs) + (2.0 / 3.0) * rs  # P(2, r) = r^2/2 (1 - 2r/3 + O(r^2))
    g_large = -jnp.log1p(-(1.0 + rl) * jnp.exp(-rl))
    g_mid = -jnp.log(special.gamma2_cdf(rm))
    g = jnp.where(small, g_small, jnp.where(large, g_large, g_mid))
    q = jnp.where(huge, special.u_minus_log1p(jnp.where(huge, r, 1.0)), -jnp.log(g))
    return jnp.where(pos, q, jnp.inf)


_UNIFORM = register_objective(Objective(
    name="uniform", rate=_uniform_rate, marginal=_uniform_marginal, value=_uniform_value,
    homogeneous=True,
    gap=GapForm(top=_log_ratio_top, rate=_uniform_gap_rate, marginal=_uniform_gap_marginal,
                log_ratio=_log_ratio_pair)))


# ---------------------------------------------------------------------- constructors
def harmonic() -> Objective:
    r"""Harmonic staleness under mixed observability: LambdaCrawl (NeurIPS-19 Alg. 1-3).

    :math:`u_w(\rho)=\mu_w\ln\frac{\rho}{\lambda_w+\rho}` for incomplete pages (Prop. 1) and
    :math:`\mu_w\ln p_w` for complete ones crawled on their signals (Prop. 4), one dual for
    both: :math:`\rho_w=(-\lambda_w+\sqrt{\lambda_w^2+4\mu_w\lambda_w/\nu})/2` (Prop. 2) and
    :math:`p_w\lambda_w=\min(\lambda_w,\mu_w/\nu)` (Prop. 5).  Registry name ``"harmonic"``."""
    return _HARMONIC


def harmonic_approx() -> Objective:
    r"""LambdaCrawlApprox (NeurIPS-19 Prop. 9, supplement §9.3): incomplete pages at
    :math:`\rho_w=\mu_w R^-/\sum_{W^-}\mu`, the split of :math:`R` where both groups' marginal
    values agree.  Couples pages (not separable).  Registry name ``"harmonic-approx"``."""
    return _HARMONIC_APPROX


def binary(epsilon: float = 0.0) -> Objective:
    r"""Binary freshness :math:`\sum_i\zeta_i\rho_i/(\rho_i+\xi_i)` (L2C eq. 5; Azar et al.):
    BinaryLambdaCrawl, :math:`\rho_i=\max(\ell,\sqrt{\zeta_i\xi_i/\nu}-\xi_i)`.

    ``epsilon > 0`` is BLCε (NeurIPS-19 supplement §9.3): every page is floored at
    :math:`\ell=\varepsilon R/n` and the rest re-optimised (the exact optimum with the floor
    as a constraint).  Registry names ``"binary"`` (ε = 0) and ``"binary-epsilon"`` (ε = 0.4,
    the paper's).  ``epsilon`` is a Python float in [0, 1] (one compilation per value)."""
    eps = float(epsilon)
    if not (np.isfinite(eps) and 0.0 <= eps <= 1.0):
        raise ValueError(f"epsilon must be in [0, 1]; got {epsilon}")
    return _BINARY if eps == 0.0 else _binary_epsilon(eps)


def delay() -> Objective:
    r"""Accumulated delay :math:`-\sum_i\zeta_i\xi_i/\rho_i` (L2C App. F eq. 25; Sia et al.):
    :math:`\rho_i=\sqrt{\zeta_i\xi_i/\nu}`, eq. 26's closed form reached by one root-find.
    Registry name ``"delay"``."""
    return _DELAY


def uniform() -> Objective:
    r"""Uniform-interval (periodic) freshness G (L2C App. H, I.2): the KKT condition
    :math:`(\zeta_i/\xi_i)h(\xi_i/\rho_i)=\nu`, :math:`h(u)=1-(1+u)e^{-u}`, inverted per page.
    Registry name ``"uniform"``."""
    return _UNIFORM


# ----------------------------------------------------------------------------- costs
RateLike = jax.Array | Policy


def _rate_and_signal(problem: CrawlProblem, rate: RateLike):
    if isinstance(rate, Policy):
        return rate.rate, rate.on_signal
    return jnp.asarray(rate), problem.complete.astype(bool)


def _reduce(per_page, per_page_flag, average):
    if per_page_flag:
        return per_page
    return jnp.mean(per_page, axis=-1) if average else jnp.sum(per_page, axis=-1)


def harmonic_cost(problem: CrawlProblem, rate: RateLike, *, per_page: bool = False) -> jax.Array:
    r"""Harmonic staleness penalty :math:`J^\pi_h` (NeurIPS-19 eq. 1-2), page-averaged: the
    negated per-page value of :func:`harmonic`.

    A rate array crawls the pages of ``problem.complete`` on their signals
    (``prob = min(rate / change_rate, 1)``) and the rest as Poisson processes; a
    :class:`~jaxcrawl.Policy` decides by its ``on_signal``.  Infinite for a page at rate 0.
    ``per_page=True`` returns the per-page terms (not divided by n).  Leading axes are kept.
    """
    rate, on_signal = _rate_and_signal(problem, rate)
    cost = _harmonic_staleness(rate, problem.importance, problem.change_rate, on_signal)
    return _reduce(cost, per_page, average=True)


def binary_cost(problem: CrawlProblem, rate: RateLike, *, per_page: bool = False) -> jax.Array:
    r"""Binary staleness penalty :math:`J^\pi_b` (NeurIPS-19 supplement eq. 12-13),
    page-averaged: :math:`\mu\lambda/(\lambda+\rho)` for a Poisson-crawled page (its importance
    less its binary freshness) and :math:`\mu(1-p)` for one crawled on its signals."""
    rate, on_signal = _rate_and_signal(problem, rate)
    mu, lam = problem.importance, problem.change_rate
    incomplete = mu * lam / (lam + rate)
    complete = mu * (1.0 - jnp.minimum(rate / lam, 1.0))
    return _reduce(jnp.where(on_signal, complete, incomplete), per_page, average=True)


def binary_freshness(problem: CrawlProblem, rate: RateLike, *, per_page: bool = False) -> jax.Array:
    r"""Expected rate of requests served fresh, :math:`F(\rho;\xi)=\sum_i\zeta_i\rho_i/(\rho_i+\xi_i)`
    (L2C eq. 5): the value of :func:`binary`, summed over pages; every page Poisson-crawled."""
    rate, _ = _rate_and_signal(problem, rate)
    return _reduce(_binary_value(rate, (problem.importance, problem.change_rate)), per_page, average=False)


def accumulated_delay(problem: CrawlProblem, rate: RateLike, *, per_page: bool = False) -> jax.Array:
    r"""Accumulated delay :math:`\sum_i\zeta_i\xi_i/\rho_i` (L2C App. F eq. 25; Sia et al.), to be
    minimised: the negated value of :func:`delay`.  Infinite for a page at rate 0."""
    rate, _ = _rate_and_signal(problem, rate)
    return _reduce(_delay_terms(rate, problem.importance, problem.change_rate), per_page, average=False)


def uniform_interval_freshness(problem: CrawlProblem, rate: RateLike, *, per_page: bool = False) -> jax.Array:
    r"""Freshness of uniform-interval (periodic) crawling, :math:`G(\rho;\xi)` (L2C App. H, I.2):
    the value of :func:`uniform`, summed over pages; 0 for a page never crawled."""
    rate, _ = _rate_and_signal(problem, rate)
    return _reduce(_uniform_value(rate, (problem.importance, problem.change_rate)), per_page, average=False)
