r"""Objectives as values: the :class:`Utility` type, the built-in utilities, a registry, and
:func:`solve`.

Every optimal-rate problem of the papers maximises a separable concave utility under the
crawl budget, :math:`\max_x\sum_i u_i(x_i)` s.t. :math:`\sum_i x_i=R`,
:math:`\ell_i\le x_i\le h_i`.  What a solver needs from an objective is small: the per-page
inverse marginal :math:`x_i(\nu)=(u_i')^{-1}(\nu)` (``rate``), the marginal :math:`u_i'`
(``marginal``, for the dual bracket), how to read its parameters from a
:class:`~jaxcrawl.CrawlProblem` (``params``), optional per-page bounds and which pages are
crawled on their change signals.  A :class:`Utility` holds exactly that, and every consumer
takes one: :func:`solve` and the named solvers, the host-capped solves
(:func:`jaxcrawl.politeness.solve_with_host_caps`), streaming from disk
(:func:`jaxcrawl.scale.stream_solve`), the sharded path (any solve on sharded arrays), the
command line's ``--objective`` and the learners' inner solvers.  A user-defined utility
inherits exact gradients (implicit function theorem), host caps, streaming and sharding.

Example -- weighted log utility :math:`u_i(x)=\zeta_i\log x` (proportional fairness)::

    log_utility = jaxcrawl.Utility(
        name="log",
        rate=lambda nu, p: p[0] / nu,           # (u')^{-1}(nu) = zeta / nu
        marginal=lambda x, p: p[0] / x,         # u'(x) = zeta / x
    )
    policy = jaxcrawl.solve(problem, log_utility)

Functions must be module-level (or otherwise kept alive and reused): a :class:`Utility` is
a static argument of the compiled solve, so a new closure per call compiles again.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from ._src import budget as _budget
from ._src import gap as _gap
from ._src import rootfind, special
from ._src.checks import is_concrete, raise_unless_converged
from .allocate import allocate
from .problem import CrawlProblem, Policy, make_policy, raw_problem

__all__ = [
    "Utility",
    "GapForm",
    "solve",
    "register_utility",
    "get_utility",
    "utility_names",
    "default_params",
    "HARMONIC",
    "HARMONIC_APPROX",
    "BINARY",
    "BINARY_EPSILON",
    "DELAY",
    "UNIFORM",
    "binary_epsilon",
    "incomplete_harmonic_rate",
]

Params = Any


def default_params(problem: CrawlProblem) -> Params:
    """``(importance, change_rate)``: the parameters of most utilities."""
    return (problem.importance, problem.change_rate)


class GapForm(NamedTuple):
    r"""A utility's rates and marginals measured from its marginal at zero, for duals so close
    to it that the dual itself cannot tell them apart (a bandwidth far below the change rates).

    For a utility whose marginal at zero :math:`m_i=u_i'(0)` is finite (binary freshness,
    uniform-interval freshness), the optimal dual of a small bandwidth sits just below
    :math:`\max_i m_i`: within :math:`\approx 2R/\lambda` (relative) for binary freshness and
    within :math:`e^{-\lambda/R}` for uniform-interval freshness -- below any dtype's resolution
    long before :math:`R/\lambda` is, so that :math:`\varphi_i(\nu)` is a difference of nearly
    equal numbers or not representable at all.  A :class:`GapForm` gives the same functions in
    the variable

    .. math:: q = -\log g,\qquad g = \log(m_i/\nu) \ge 0,

    (the log of the dual's log-gap below the page's own marginal at zero), which stays
    representable and well conditioned at every bandwidth.  :func:`solve` iterates on
    :math:`\tau = -\log\log(\max_j m_j/\nu)` (the top page's :math:`q`; up to sign and origin
    the same variable as :math:`\log\nu` where the plain form has no trouble).

    Attributes:
      top: ``top(params) -> log m_i`` per page (``-inf`` for a page never worth crawling).
      rate: ``rate(q, params) -> \varphi_i(m_i \exp(-e^{-q}))``, nonincreasing in ``q``, 0 at
        ``q = +inf``; may return ``inf``, never NaN.
      marginal: ``marginal(x, params) -> -log(log(m_i / u_i'(x)))``, the inverse of ``rate``
        (``+inf`` at ``x = 0``).
      log_ratio: optional ``log_ratio(params, top_params) -> log(m_top / m_i) >= 0`` per page,
        ``top_params`` the params of the page with the largest ``top`` (scalar leaves).  Every
        rate depends on this difference, so it should be accurate to a few ulps *absolute*
        (a ratio of the raw parameters, not a difference of two logs); default
        ``top(top_params) - top(params)``.
    """

    top: Callable[[Params], jax.Array]
    rate: Callable[[jax.Array, Params], jax.Array]
    marginal: Callable[[jax.Array, Params], jax.Array]
    log_ratio: Callable[[Params, Params], jax.Array] | None = None


class Utility(NamedTuple):
    r"""A separable concave objective :math:`\sum_i u_i(x_i)`, as a solver sees it.

    Attributes:
      name: registry name (also what the CLI's ``--objective`` takes once registered).
      rate: ``rate(dual, params) -> x``: the per-page inverse marginal
        :math:`(u_i')^{-1}(\nu)`, nonincreasing in the dual; may return ``inf`` (never
        NaN) where a page wants unbounded rate and 0 where none.
      marginal: ``marginal(x, params) -> u'(x)`` (per page); used for the dual bracket
        and host caps.  ``None`` only for non-separable utilities, which give ``bracket``.
      params: ``params(problem) -> pytree`` of per-page arrays (default
        ``(importance, change_rate)``); derivatives flow to every leaf.
      bounds: optional ``bounds(params, bandwidth, num_pages) -> (lower, upper)`` per-page
        rate bounds (default ``0`` and ``inf``).
      on_signal: optional ``on_signal(params) -> bool mask`` of pages crawled on their
        change signals (default: none; every page is crawled as a Poisson process).
      value: optional ``value(x, params) -> u(x)`` per page (for evaluation and tests).
      bracket: optional ``bracket(params, bandwidth) -> (a, b)`` starting dual bracket,
        for utilities without ``marginal``.
      dual: optional ``dual(nu, params) -> reported dual`` (default: ν itself).
      separable: False when ``rate`` couples pages (through sums over them): such a
        utility cannot be host-capped or streamed chunk by chunk.
      homogeneous: True when the optimum is equivariant under the two scalings of the
        model -- importance :math:`\times a` leaves the rates unchanged, change rates,
        bounds and bandwidth :math:`\times c` multiply the rates by :math:`c`, and the dual
        scales by :math:`a/c` -- as for every built-in utility (each :math:`u_i` is
        importance times a function of :math:`x_i/\lambda_i`).  :func:`solve` then solves in
        normalised units (largest importance 1, mean rate 1) and scales back, so any
        problem whose inputs are representable in the working dtype solves to its
        precision (no overflow at bandwidth 1e30, no underflow at 1e-30).  Leave False
        for a utility without these symmetries.
      gap: optional :class:`GapForm` (separable utilities with a finite marginal at zero):
        :func:`solve` then iterates on the dual's log-gap to the largest marginal at zero,
        so a bandwidth far below the change rates solves to the dtype's precision instead
        of being reported as not converged.  Host-capped solves use it where no cap binds
        at the uncapped optimum; the streamed and multi-process solves keep the plain dual.
    """

    name: str
    rate: Callable[[jax.Array, Params], jax.Array]
    marginal: Callable[[jax.Array, Params], jax.Array] | None
    params: Callable[[CrawlProblem], Params] = default_params
    bounds: Callable[[Params, jax.Array, int], tuple] | None = None
    on_signal: Callable[[Params], jax.Array] | None = None
    value: Callable[[jax.Array, Params], jax.Array] | None = None
    bracket: Callable[[Params, jax.Array], tuple] | None = None
    dual: Callable[[jax.Array, Params], jax.Array] | None = None
    separable: bool = True
    homogeneous: bool = False
    gap: GapForm | None = None

    def page_bounds(self, params: Params, bandwidth: ArrayLike, num_pages: int, dtype: Any) -> tuple:
        """``(lower, upper)`` per page (scalars when the utility has no bounds)."""
        if self.bounds is None:
            return jnp.zeros((), dtype), jnp.full((), jnp.inf, dtype)
        lo, hi = self.bounds(params, bandwidth, num_pages)
        return jnp.asarray(lo, dtype), jnp.asarray(hi, dtype)

    def signal_mask(self, params: Params, shape: tuple) -> jax.Array:
        """Pages crawled on their change signals (all False by default)."""
        if self.on_signal is None:
            return jnp.zeros(shape, bool)
        return jnp.broadcast_to(self.on_signal(params), shape)


# ------------------------------------------------------------------------- registry
_REGISTRY: dict[str, Utility] = {}


def register_utility(utility: Utility, *, overwrite: bool = False) -> Utility:
    """Add ``utility`` to the registry under ``utility.name`` (returns it)."""
    if not isinstance(utility, Utility):
        raise TypeError(f"register_utility takes a jaxcrawl.Utility; got {type(utility).__name__}")
    if utility.name in _REGISTRY and not overwrite and _REGISTRY[utility.name] is not utility:
        raise ValueError(f"a utility named {utility.name!r} is already registered (overwrite=True replaces it)")
    _REGISTRY[utility.name] = utility
    return utility


def utility_names() -> tuple[str, ...]:
    """Names of the registered utilities, in registration order."""
    return tuple(_REGISTRY)


def get_utility(utility: str | Utility) -> Utility:
    """The :class:`Utility` of a registry name (or the utility itself)."""
    if isinstance(utility, Utility):
        return utility
    if isinstance(utility, str):
        try:
            return _REGISTRY[utility]
        except KeyError:
            raise ValueError(f"unknown objective {utility!r}; registered: {', '.join(_REGISTRY)}") from None
    raise TypeError(f"utility must be a registry name or a jaxcrawl.Utility; got {type(utility).__name__}")


# -------------------------------------------------------------------------- the solve
def solve(problem: CrawlProblem, utility: str | Utility, *, lower: ArrayLike | None = None,
          upper: ArrayLike | None = None, max_steps: int = 100, rtol: float | None = None,
          adjoint: str = "implicit", throw: bool = False, min_rate: ArrayLike | None = None,
          max_rate: ArrayLike | None = None) -> Policy:
    r"""The optimal policy of ``utility`` for ``problem``: one dual root-find (``allocate``).

    Maximises :math:`\sum_i u_i(x_i)` s.t. :math:`\sum_i x_i = R` and the per-page bounds
    (the utility's, intersected with ``lower``/``upper`` when given).  Leading batch axes of
    the problem are solved with ``jax.vmap``; jit-, vmap-, grad- and shard-safe; derivatives
    are exact (implicit function theorem).

    Args:
      problem: the pages.
      utility: a registry name (``"harmonic"``, ``"harmonic-approx"``, ``"binary"``,
        ``"binary-epsilon"``, ``"delay"``, ``"uniform"``, or one registered with
        :func:`register_utility`) or a :class:`Utility`.
      lower, upper: extra per-page rate bounds (broadcast to the pages), e.g. revisit
        limits; the tighter of these and the utility's own bounds apply.
      max_steps, rtol, adjoint, throw: as in :func:`jaxcrawl.allocate`.
      min_rate, max_rate: revisit bounds as rates, ``1/max_interval`` and
        ``1/min_interval`` (:mod:`jaxcrawl.bounds`); the same as ``lower``/``upper`` (the
        tightest of all applies).  The optimum is exact under them:
        :math:`x_i=\mathrm{clip}(\varphi_i(\nu),\ell_i,h_i)`.  Infeasible bounds raise
        ``ValueError`` eagerly (:func:`jaxcrawl.allocate`).

    Returns:
      :class:`~jaxcrawl.Policy` with ``converged`` and the pre-correction ``residual``.
    """
    u = get_utility(utility)
    if not isinstance(problem, CrawlProblem):
        raise TypeError(f"problem must be a jaxcrawl.CrawlProblem, got {type(problem).__name__}")
    lower = _tighter(lower, min_rate, jnp.maximum)
    upper = _tighter(upper, max_rate, jnp.minimum)
    opts = dict(max_steps=max_steps, rtol=rtol, adjoint=adjoint, throw=throw)
    if problem.importance.ndim > 1:
        batch = problem.importance.shape[:-1]
        flat = raw_problem(problem.importance, problem.change_rate,
                           jnp.broadcast_to(problem.bandwidth, batch), problem.complete)
        shape = problem.importance.shape
        lo = None if lower is None else jnp.broadcast_to(jnp.asarray(lower, problem.dtype), shape)
        hi = None if upper is None else jnp.broadcast_to(jnp.asarray(upper, problem.dtype), shape)
        return jax.vmap(lambda p, lo_, hi_: solve(p, u, lower=lo_, upper=hi_, **opts))(flat, lo, hi)
    return _solve_one(problem, u, lower, upper, **opts)


def normalising_scales(problem: CrawlProblem) -> tuple[jax.Array, jax.Array]:
    r"""``(a, c)``: the importance and time scales :func:`solve` divides out for a
    homogeneous utility -- the largest importance and the mean rate :math:`R/m` (each 1
    when it is 0 or not finite).  Constants for differentiation: the optimum is exactly
    equivariant under the scaling, so its derivatives need no term through them."""
    dtype = problem.dtype
    a = jnp.max(jnp.abs(problem.importance), axis=-1)
    c = jnp.asarray(problem.bandwidth, dtype) / problem.importance.shape[-1]
    return jax.lax.stop_gradient(_budget.unit_scale(a)), jax.lax.stop_gradient(_budget.unit_scale(c))


def _tighter(a, b, pick):
    """The tighter of two optional bounds (None when both are None)."""
    if a is None:
        return b
    if b is None:
        return a
    return pick(jnp.asarray(a), jnp.asarray(b))


def _solve_one(problem, u: Utility, lower, upper, **opts) -> Policy:
    if u.homogeneous:
        # Exact change of units (Utility.homogeneous): solve with the largest importance and
        # the mean rate at 1, then scale rates, dual and residual back.
        a, c = normalising_scales(problem)
        scaled = raw_problem(problem.importance / a, problem.change_rate / c, problem.bandwidth / c,
                             problem.complete)
        low = None if lower is None else jnp.asarray(lower, problem.dtype) / c
        up = None if upper is None else jnp.asarray(upper, problem.dtype) / c
        pol = _solve_units(scaled, u, low, up, **opts)
        params = u.params(problem)
        return make_policy(problem, pol.rate * c, _budget.rescale_dual(pol.dual, a, c), pol.residual * c, pol.num_steps,
                           on_signal=u.signal_mask(params, problem.importance.shape),
                           converged=pol.converged)
    return _solve_units(problem, u, lower, upper, **opts)


def _solve_units(problem, u: Utility, lower, upper, **opts) -> Policy:
    params = u.params(problem)
    n = problem.importance.shape[-1]
    dtype = problem.dtype
    lo, hi = u.page_bounds(params, problem.bandwidth, n, dtype)
    if lower is not None:
        lo = jnp.maximum(lo, jnp.asarray(lower, dtype))
    if upper is not None:
        hi = jnp.minimum(hi, jnp.asarray(upper, dtype))
    if u.marginal is None:
        if u.bracket is None:
            raise ValueError(f"utility {u.name!r} needs marginal or bracket")
        bracket = u.bracket(params, problem.bandwidth)
    else:
        bracket = None
    throw = opts.pop("throw")
    sol = allocate(u.rate, params, problem.bandwidth, lo, hi, marginal_fn=u.marginal, bracket=bracket, **opts)
    x, dual, residual, steps, converged = sol.x, sol.dual, sol.residual, sol.num_steps, sol.converged
    if u.gap is not None and u.separable:
        x, dual, residual, steps, converged = _gap.refine(
            u.gap, tuple(sorted(opts.items())), params, problem.bandwidth, lo, hi, x, dual, residual, steps, converged)
    if throw:
        raise_unless_converged(f"solve({u.name!r})", converged, steps, residual)
    dual = dual if u.dual is None else u.dual(dual, params)
    return make_policy(problem, x, dual, residual, steps,
                       on_signal=u.signal_mask(params, problem.importance.shape),
                       converged=converged)


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
@jax.custom_jvp
def incomplete_harmonic_rate(mu: ArrayLike, lam: ArrayLike, nu: ArrayLike) -> jax.Array:
    r"""Optimal Poisson crawl rate of an incomplete page at multiplier ν (NeurIPS-19 Prop. 2).

    :math:`\rho = (-\lambda + \sqrt{\lambda^2 + 4\mu\lambda/\nu})/2`, computed without
    cancellation as :math:`2q/(\lambda+\sqrt{\lambda^2+4q})`, :math:`q=\mu\lambda/\nu`, with
    numerator and denominator divided by :math:`k=\max(\lambda, 1)`: for :math:`\lambda\ge 1`
    this is :math:`2p/(1+\sqrt{1+4p/\lambda})`, :math:`p=\mu/\nu`, so no square of a large
    change rate overflows (float32's :math:`\lambda^2` does from 1.8e19, as in a solve whose
    bandwidth is 1e-30 of the pages' change rates), and for :math:`\lambda<1` it is the
    textbook form.  Accurate to a few ulps whenever :math:`\mu/\nu`, :math:`q/k` and the rate
    are normal numbers of the dtype; one square root per page, as before.  Its derivative comes from differentiating
    :math:`\rho^2+\lambda\rho=\mu\lambda/\nu` (one division per page instead of
    autodiff through the square root), which keeps each root-finding pass cheap at web scale.
    """
    k = jnp.maximum(lam, 1.0)
    el = lam / k
    q = (mu * (1.0 / nu)) * el
    return 2.0 * q / (el + jnp.sqrt(el * el + 4.0 * (q / k)))


@incomplete_harmonic_rate.defjvp
def _incomplete_harmonic_rate_jvp(primals, tangents):
    mu, lam, nu = primals
    dmu, dlam, dnu = tangents
    r = incomplete_harmonic_rate(mu, lam, nu)
    inv = 1.0 / nu
    # d/dnu: mu lam / nu^2 written as r (r + lam) / nu (Prop. 2's equation), which does not
    # overflow at the tiny duals of normalised solves (1/nu^2 does in float32 below 1e-19)
    dr = (lam * inv * dmu + (mu * inv - r) * dlam - (r * (r + lam)) * inv * dnu) / (2.0 * r + lam)
    return r, dr


def _mixed_params(problem):
    return (problem.importance, problem.change_rate, problem.complete)


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


def _harmonic_value(x, params):
    mu, lam, comp = params
    return jnp.where(comp, mu * jnp.log(jnp.minimum(x / lam, 1.0)), mu * jnp.log(x / (x + lam)))


HARMONIC = register_utility(Utility(
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


HARMONIC_APPROX = register_utility(Utility(
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


BINARY_GAP = GapForm(top=_log_ratio_top, rate=_binary_gap_rate, marginal=_binary_gap_marginal,
                     log_ratio=_log_ratio_pair)

BINARY = register_utility(Utility(
    name="binary", rate=_binary_rate, marginal=_binary_marginal, value=_binary_value, homogeneous=True,
    gap=BINARY_GAP))


@functools.cache
def binary_epsilon(epsilon: float = 0.4) -> Utility:
    r"""BLCε's utility: binary freshness with every page floored at :math:`\varepsilon R/n`
    (NeurIPS-19 supplement §9.3).  Cached per ``epsilon`` (one compilation each)."""
    eps = float(epsilon)
    if not (np.isfinite(eps) and 0.0 <= eps <= 1.0):
        raise ValueError(f"epsilon must be in [0, 1]; got {epsilon}")

    def bounds(params, bandwidth, num_pages):
        return eps * bandwidth / num_pages, jnp.inf

    return Utility(name="binary-epsilon" if eps == 0.4 else f"binary-epsilon({eps:g})",
                   rate=_binary_rate, marginal=_binary_marginal, bounds=bounds, value=_binary_value,
                   homogeneous=True, gap=BINARY_GAP)


BINARY_EPSILON = register_utility(binary_epsilon(0.4))


# ------------------------------------------------------------------- accumulated delay
def _delay_rate(nu, params):
    zeta, xi = params
    return _sqrt_ratio(zeta, xi, nu)


def _delay_marginal(x, params):
    zeta, xi = params
    return zeta * xi / jnp.square(x)


def _delay_value(x, params):
    zeta, xi = params
    return -zeta * xi / x


DELAY = register_utility(Utility(
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


UNIFORM = register_utility(Utility(
    name="uniform", rate=_uniform_rate, marginal=_uniform_marginal, value=_uniform_value,
    homogeneous=True,
    gap=GapForm(top=_log_ratio_top, rate=_uniform_gap_rate, marginal=_uniform_gap_marginal,
                log_ratio=_log_ratio_pair)))


def _check_epsilon(epsilon) -> None:
    if is_concrete(epsilon):
        e = np.asarray(epsilon)
        if not np.all(np.isfinite(e)) or np.any(e < 0) or np.any(e > 1):
            raise ValueError(f"epsilon must be in [0, 1]; got {epsilon}")
