r"""Special functions, each with one home: series for small arguments, stable forms above.

Every function takes float arrays of any shape and keeps their dtype; the series
cut-offs and term counts are chosen so that float64 results are accurate to a few ulps
(tested against ``scipy.special`` and high-precision references at every cut-off).

* :func:`harmonic_number` -- :math:`H(n)=\sum_{j\le n}1/j`, the NeurIPS-19 eq. 2 penalty;
* :func:`gamma2_cdf` -- :math:`h(u)=1-(1+u)e^{-u}`, the scaled marginal of uniform-interval
  freshness (L2C App. I.2) and of binary-Poisson sync costs (ICML-20 App. C);
* :func:`phi1` -- :math:`\varphi_1(x)=1-(1-e^{-x})/x`, the time-averaged binary staleness
  of periodic crawling and the binary-Poisson mean cost;
* :func:`ein` -- :math:`\mathrm{Ein}(u)=\int_0^u(1-e^{-t})/t\,dt = E[H(N)]`,
  :math:`N\sim\mathrm{Poisson}(u)`; :func:`exp1` -- :math:`E_1(x)` for :math:`x>0`;
* :func:`ein_minus_phi1` -- :math:`\mathrm{Ein}(u)-\varphi_1(u)`, the time-averaged
  harmonic staleness of periodic crawling per unit of importance;
* :func:`u_minus_log1p` -- :math:`k(u)=u-\log(1+u)`.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

EULER_GAMMA = 0.57721566490153286061
_H_TABLE_SIZE = 256


def as_float(x: ArrayLike) -> jax.Array:
    """``x`` as a JAX array of a floating dtype (integers become the default float)."""
    x = jnp.asarray(x)
    if not jnp.issubdtype(x.dtype, jnp.floating):
        x = x.astype(jnp.result_type(float))
    return x


def horner(x: jax.Array, coeffs: Sequence[float]) -> jax.Array:
    r""":math:`\sum_j c_j x^j` for ``coeffs = [c_0, c_1, ...]`` (Horner's rule)."""
    acc = jnp.zeros_like(x) + coeffs[-1]
    for c in coeffs[-2::-1]:
        acc = acc * x + c
    return acc


def _split(x, small, inside, outside):
    """(x where small else inside, x where not small else outside): gradient-safe branches."""
    return jnp.where(small, x, inside), jnp.where(small, outside, x)


def harmonic_number(n: ArrayLike, dtype: Any = None) -> jax.Array:
    r""":math:`H(n)=\sum_{j=1}^n 1/j` (0 for :math:`n\le0`): NeurIPS-19 eq. 2's penalty.

    An exact table for :math:`n<256`; the asymptotic series
    :math:`\ln n+\gamma+1/(2n)-1/(12n^2)+1/(120n^4)` (error below 1e-14) above.
    """
    n = jnp.asarray(n)
    dtype = dtype or jnp.result_type(float)
    table = np.concatenate([[0.0], np.cumsum(1.0 / np.arange(1, _H_TABLE_SIZE))])
    small = jnp.asarray(table, dtype)[jnp.clip(n, 0, _H_TABLE_SIZE - 1)]
    nf = jnp.maximum(n, _H_TABLE_SIZE).astype(dtype)
    inv = 1.0 / nf
    inv2 = inv * inv
    big = jnp.log(nf) + EULER_GAMMA + 0.5 * inv - inv2 / 12.0 + inv2 * inv2 / 120.0
    return jnp.where(n < _H_TABLE_SIZE, small, big).astype(dtype)


# h(u) = 1 - (1 + u) e^{-u} = sum_{k>=2} (-1)^k (k-1) u^k / k!        (u < 1)
_GAMMA2_COEFFS = [0.0, 0.0] + [(-1.0) ** k * (k - 1) / math.factorial(k) for k in range(2, 26)]
# phi1(x) = 1 - (1 - e^{-x})/x = sum_{k>=1} (-1)^{k+1} x^k / (k+1)!  (x < 1)
_PHI1_COEFFS = [0.0] + [(-1.0) ** (k + 1) / math.factorial(k + 1) for k in range(1, 25)]
# Ein(u) = sum_{k>=1} (-1)^{k+1} u^k / (k k!)                          (u <= 2)
_EIN_COEFFS = [0.0] + [(-1.0) ** (k + 1) / (k * math.factorial(k)) for k in range(1, 36)]
# Ein(u) - phi1(u) = sum_{k>=1} (-1)^{k+1} u^k / (k (k+1)!)            (u <= 2)
_EIN_PHI1_COEFFS = [0.0] + [(-1.0) ** (k + 1) / (k * math.factorial(k + 1)) for k in range(1, 36)]
# k(u) = u - log1p(u) = sum_{j>=2} (-1)^j u^j / j                       (u < 0.1)
_K_COEFFS = [0.0, 0.0] + [(-1.0) ** j / j for j in range(2, 20)]


def gamma2_cdf(u: ArrayLike) -> jax.Array:
    r""":math:`h(u) = 1-(1+u)e^{-u}` (the Gamma(2, 1) CDF), accurate for small ``u``.

    The scaled marginal utility of uniform-interval crawling,
    :math:`\partial G/\partial\rho_i = (\zeta_i/\xi_i)\,h(\xi_i/\rho_i)` (L2C App. I.2),
    and of binary-Poisson sync costs (ICML-20 App. C).  Taylor series below ``u = 1``.
    Its derivative :math:`h'(u)=ue^{-u}` is given in closed form (autodiff of the direct
    form cancels for large ``u``).
    """
    return _gamma2_cdf(as_float(u))


@jax.custom_jvp
def _gamma2_cdf(u):
    small = u < 1.0
    us, ul = _split(u, small, 0.0, 1.0)
    return jnp.where(small, horner(us, _GAMMA2_COEFFS), -jnp.expm1(-ul) - ul * jnp.exp(-ul))


@_gamma2_cdf.defjvp
def _gamma2_cdf_jvp(primals, tangents):
    (u,), (du,) = primals, tangents
    return _gamma2_cdf(u), u * jnp.exp(-u) * du


def phi1(x: ArrayLike) -> jax.Array:
    r""":math:`\varphi_1(x) = 1-(1-e^{-x})/x`, stable for every :math:`x\ge0` (0 at 0).

    The time-averaged binary staleness of a page crawled every :math:`1/\rho` with
    :math:`x=\xi/\rho` (L2C App. H), and the binary-Poisson sync cost per unit time.
    Its derivative :math:`\varphi_1'(x)=h(x)/x^2` (:func:`gamma2_cdf`) is given in closed
    form, by its own series below ``x = 1``.
    """
    return _phi1(as_float(x))


@jax.custom_jvp
def _phi1(x):
    small = x < 1.0
    xs, xl = _split(x, small, 0.0, 1.0)
    return jnp.where(small, horner(xs, _PHI1_COEFFS), (xl + jnp.expm1(-xl)) / xl)


@_phi1.defjvp
def _phi1_jvp(primals, tangents):
    (x,), (dx,) = primals, tangents
    small = x < 1.0
    xs, xl = _split(x, small, 0.0, 1.0)
    # h(x)/x^2 = sum_{k>=2} (-1)^k (k-1) x^{k-2} / k!
    deriv = jnp.where(small, horner(xs, _GAMMA2_COEFFS[2:]), _gamma2_cdf(xl) / (xl * xl))
    return _phi1(x), deriv * dx


def exp1(x: ArrayLike) -> jax.Array:
    r"""The exponential integral :math:`E_1(x)=\int_x^\infty e^{-t}/t\,dt` for :math:`x>0`.

    :math:`-\gamma-\ln x+\mathrm{Ein}(x)` for :math:`x\le2`; above, the continued fraction
    :math:`e^{-x}/(x+1-1^2/(x+3-2^2/(x+5-\dots)))` with 48 terms (truncation below 1e-17).
    """
    x = as_float(x)
    small = x <= 2.0
    xs, xl = _split(x, small, 1.0, 4.0)
    return jnp.where(small, horner(xs, _EIN_COEFFS) - jnp.log(xs) - EULER_GAMMA, _exp1_cf(xl))


def _exp1_cf(x, terms: int = 48):
    """E_1(x), x >= 2, by the continued fraction (modified Lentz, fixed number of terms)."""
    tiny = 1e30 if x.dtype != jnp.float64 else 1.0 / float(jnp.finfo(jnp.float64).tiny)
    b = x + 1.0
    c = jnp.full_like(x, tiny)
    d = 1.0 / b
    h = d
    for i in range(1, terms + 1):
        an = -float(i * i)
        b = b + 2.0
        d = 1.0 / (an * d + b)
        c = b + an / c
        h = h * (c * d)
    return h * jnp.exp(-x)


def ein(u: ArrayLike) -> jax.Array:
    r"""The entire exponential integral :math:`\mathrm{Ein}(u)=\int_0^u(1-e^{-t})/t\,dt`.

    :math:`\mathrm{Ein}(u) = E[H(N)]` for :math:`N\sim\mathrm{Poisson}(u)` (harmonic
    staleness of NeurIPS-19 eq. 2 after ``u`` expected changes).  Power series for
    ``u <= 2``; :math:`E_1(u)+\ln u+\gamma` above.
    """
    u = as_float(u)
    small = u <= 2.0
    us, ul = _split(u, small, 1.0, 4.0)
    return jnp.where(small, horner(us, _EIN_COEFFS), _exp1_cf(ul) + jnp.log(ul) + EULER_GAMMA)


def ein_minus_phi1(u: ArrayLike) -> jax.Array:
    r""":math:`\mathrm{Ein}(u)-\varphi_1(u) = \mathrm{Ein}(u)-1+(1-e^{-u})/u`, no cancellation.

    The time-averaged :math:`E[H(N_t)]` over one crawl period with :math:`u=\xi/\rho`
    expected changes per period (periodic harmonic staleness per unit importance).
    """
    u = as_float(u)
    small = u <= 2.0
    us, ul = _split(u, small, 1.0, 4.0)
    big = _exp1_cf(ul) + jnp.log(ul) + EULER_GAMMA - 1.0 + (-jnp.expm1(-ul)) / ul
    return jnp.where(small, horner(us, _EIN_PHI1_COEFFS), big)


def u_minus_log1p(u: ArrayLike) -> jax.Array:
    r""":math:`k(u) = u-\log(1+u)` for :math:`u\ge0` (series below 0.1)."""
    u = as_float(u)
    small = u < 0.1
    us, ul = _split(u, small, 0.0, 1.0)
    return jnp.where(small, horner(us, _K_COEFFS), ul - jnp.log1p(ul))


@jax.custom_jvp
def inv_expm1(y):
    """``1/(e^y - 1)`` for ``y > 0`` (0 where ``e^y`` overflows)."""
    return 1 / jnp.expm1(y)


@inv_expm1.defjvp
def _inv_expm1_jvp(primals, tangents):
    # d/dy 1/(e^y - 1) = -r (1 + r): finite where e^y overflows (the chain rule through
    # expm1 would give inf/inf there).
    (y,), (dy,) = primals, tangents
    r = inv_expm1(y)
    return r, -r * (1 + r) * dy


def log_gap(s: jax.Array, target: jax.Array) -> jax.Array:
    """``log s - log target`` with the limits ``-inf`` (``s = 0``) and ``+inf``
    (``target = 0``) made explicit, so that derivatives stay finite everywhere."""
    ok_s = s > 0
    ok_t = target > 0
    val = jnp.log(jnp.where(ok_s, s, 1)) - jnp.log(jnp.where(ok_t, target, 1))
    return jnp.where(ok_t, jnp.where(ok_s, val, -jnp.inf), jnp.inf)


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
