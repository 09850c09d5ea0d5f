"""``jaxcrawl._src.special`` against exact references, on both sides of every series cut-off.

References: Python ``decimal`` at 110 significant digits (the defining formulas and power
series, where any cancellation is absorbed by the precision) and ``fractions`` for the
harmonic numbers; ``scipy.special`` (``exp1``, ``gammainc(2, u)``, ``digamma``, and the
``expm1``/``log1p`` closed forms where they do not cancel) as an independent cross-check.

Each function is evaluated under ``jit`` at points just below, at and just above each of
its cut-offs (one ulp and one per cent away), and over many orders of magnitude, in
float32 (the default lane) and float64 (``@pytest.mark.x64``); the relative error must be
a few ulps of the dtype.  Gradients are compared with central finite differences and with
the closed-form derivatives.
"""
from __future__ import annotations

import functools
import math
from decimal import Decimal, localcontext
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.special as sps

from jaxcrawl._src import special

from helpers import fd_jvp

PREC = 110  # significant digits of the Decimal references


# ------------------------------------------------------------------ exact references
@functools.cache
def _euler_gamma() -> Decimal:
    """γ = Ein(x) - ln x - E1(x) with x = 300, where E1(300) < 1e-132 is below the precision."""
    with localcontext() as ctx:
        ctx.prec = PREC + 140
        x = Decimal(300)
        g = _ein_series(x) - x.ln()
    return +g


def _ein_series(u: Decimal) -> Decimal:
    """Σ_{k≥1} (-1)^{k+1} u^k / (k k!) at the context's precision (caller sets it)."""
    total = Decimal(0)
    term = Decimal(1)  # u^k / k!
    k = 0
    while True:
        k += 1
        term = term * u / k
        contrib = term / k
        total += contrib if k % 2 else -contrib
        if k > 2 * u + 10 and contrib < Decimal(10) ** (-(PREC + 40)):
            return total


def _D(x) -> Decimal:
    """The exact value of the binary floating-point number ``x`` as a Decimal."""
    return Decimal(float(x))


def _small_arg_precision(u: Decimal) -> int:
    """Enough digits for the defining formulas at small ``u``: they cancel as ``u**2``."""
    if u <= 0 or u >= 1:
        return PREC + 10
    return PREC + 10 + 2 * int(-u.log10() + 1)


def ref_gamma2_cdf(u: Decimal) -> Decimal:
    with localcontext() as ctx:
        ctx.prec = _small_arg_precision(u)
        r = 1 - (1 + u) * (-u).exp()
    return +r


def ref_phi1(x: Decimal) -> Decimal:
    if not x:
        return Decimal(0)
    with localcontext() as ctx:
        ctx.prec = _small_arg_precision(x)
        r = 1 - (1 - (-x).exp()) / x
    return +r


def ref_ein(u: Decimal) -> Decimal:
    if u <= 60:
        with localcontext() as ctx:
            ctx.prec = PREC + 40  # the series' terms reach e^60 / 60! * 60^60 ~ 1e23
            r = _ein_series(u)
        return +r
    # E1(u) < e^-60: its float64 value suffices next to ln u + γ
    return _D(sps.exp1(float(u))) + u.ln() + _euler_gamma()


def ref_exp1(x: Decimal) -> Decimal:
    if x <= 60:
        with localcontext() as ctx:
            ctx.prec = PREC + 80  # E1(60) ~ 1e-28 cancels 28 digits of Ein - ln - γ
            r = _ein_series(x) - x.ln() - _euler_gamma()
        return +r
    raise ValueError("no Decimal reference above 60: compare with scipy.special.exp1")


def ref_ein_minus_phi1(u: Decimal) -> Decimal:
    return ref_ein(u) - ref_phi1(u)


def ref_u_minus_log1p(u: Decimal) -> Decimal:
    with localcontext() as ctx:
        ctx.prec = _small_arg_precision(u)
        r = u - (1 + u).ln()
    return +r


def ref_harmonic(n: int) -> Fraction:
    return sum((Fraction(1, j) for j in range(1, n + 1)), Fraction(0))


# ------------------------------------------------------------------ points per cut-off
def _around(c: float, dtype) -> list[float]:
    """Just below, at and just above ``c`` in ``dtype``: one ulp and one per cent away."""
    c_ = np.asarray(c, dtype)
    return [float(c_ * 0.99), float(np.nextafter(c_, dtype(0))), float(c_), float(np.nextafter(c_, dtype(np.inf))),
            float(c_ * 1.01)]


# function, reference, cut-offs, largest argument tested (float32, float64), value at 0
# (None: not defined there)
CASES = {
    "gamma2_cdf": (special.gamma2_cdf, ref_gamma2_cdf, (1.0,), (1e8, 1e8), 0.0),
    "phi1": (special.phi1, ref_phi1, (1.0,), (1e8, 1e8), 0.0),
    "ein": (special.ein, ref_ein, (2.0,), (1e8, 1e8), 0.0),
    # E1 underflows below float32's smallest normal number beyond ~85
    "exp1": (special.exp1, ref_exp1, (2.0,), (60.0, 700.0), None),
    "ein_minus_phi1": (special.ein_minus_phi1, ref_ein_minus_phi1, (2.0,), (1e8, 1e8), 0.0),
    "u_minus_log1p": (special.u_minus_log1p, ref_u_minus_log1p, (0.1,), (1e8, 1e8), 0.0),
}
NAMES = sorted(CASES)

# Allowed relative error in ulps of the dtype (measured worst cases in brackets, float32 /
# float64).  Most functions are within 2 ulps.  u - log1p(u) just above its cut-off at 0.1
# cancels by a factor of 21 (6.3 ulps in float64); E1 above 2 is a 48-term continued
# fraction whose products accumulate about 10 ulps of rounding (9.9 / 10.8 ulps).
ULPS = {
    "gamma2_cdf": 4,       # (1.8 / 1.6)
    "phi1": 4,             # (1.0 / 0.6)
    "ein": 4,              # (0.8 / 0.8)
    "exp1": 16,            # (9.9 / 10.8)
    "ein_minus_phi1": 4,   # (0.6 / 0.8)
    "u_minus_log1p": 16,   # (1.6 / 6.3)
}

# One jitted function per special function and derivative, and one array of points per
# (function, dtype): the tests below share these few compilations.
_JIT = {name: jax.jit(case[0]) for name, case in CASES.items()}
_GRAD = {name: jax.jit(jax.vmap(jax.grad(case[0]))) for name, case in CASES.items()}


def _points(name: str, dtype) -> np.ndarray:
    """Zero (where defined), 1e-30 (float32) or 1e-300 (float64), a log grid up to the upper
    limit (6 points per decade), and each cut-off's neighbourhood."""
    _, _, cutoffs, upper, at_zero = CASES[name]
    hi = upper[0] if dtype == np.float32 else upper[1]
    lo = 1e-30 if dtype == np.float32 else 1e-300
    pts = [lo] + list(np.geomspace(1e-12, hi, 6 * int(round(np.log10(hi) + 12)) + 1))
    pts += [0.25, 0.5, 0.75, 1.5, 2.5, 3.0]
    for c in cutoffs:
        pts += _around(c, dtype)
    if at_zero is not None:
        pts.append(0.0)
    return np.unique(np.asarray(pts, dtype))


@functools.cache
def _evaluated(name: str, dtype_name: str) -> tuple[np.ndarray, np.ndarray]:
    """``(x, f(x))`` for the points of ``name`` in ``dtype`` (float64 needs x64 on)."""
    dtype = np.dtype(dtype_name).type
    x = _points(name, dtype)
    return x, np.asarray(_JIT[name](jnp.asarray(x, dtype)))


def _check_against_decimal(name: str, dtype) -> None:
    x, got = _evaluated(name, np.dtype(dtype).name)
    assert got.dtype == dtype, (name, got.dtype)
    eps = float(np.finfo(dtype).eps)
    tiny = float(np.finfo(dtype).tiny)
    ref = CASES[name][1]
    bad = []
    with localcontext() as ctx:
        ctx.prec = PREC
        for xi, gi in zip(x, got):
            if name == "exp1" and xi > 60:
                continue  # no Decimal reference: test_exp1_matches_scipy covers it
            r = ref(_D(xi))
            err = abs(_D(gi) - r)
            # relative error in ulps, with an absolute floor at the smallest normal number
            # (results below it are flushed to zero)
            ulps = float(err / (abs(r) * Decimal(eps) + Decimal(tiny)))
            if not ulps <= ULPS[name]:
                bad.append(f"x={xi!r}: got {float(gi)!r}, exact {float(r)!r} ({ulps:.1f} ulps)")
    assert not bad, f"{name} in {np.dtype(dtype).name}:\n" + "\n".join(bad)


@pytest.mark.parametrize("name", NAMES)
def test_float32_within_a_few_ulps_across_cutoffs(name):
    _check_against_decimal(name, np.float32)


@pytest.mark.x64
@pytest.mark.parametrize("name", NAMES)
def test_float64_within_a_few_ulps_across_cutoffs(name):
    _check_against_decimal(name, np.float64)


# ------------------------------------------------------------------ scipy cross-checks
@pytest.mark.x64
def test_exp1_matches_scipy_up_to_700():
    x, got = _evaluated("exp1", "float64")
    np.testing.assert_allclose(got, sps.exp1(x), rtol=ULPS["exp1"] * np.finfo(np.float64).eps, atol=0)


@pytest.mark.x64
def test_gamma2_cdf_matches_scipy_gammainc():
    u, got = _evaluated("gamma2_cdf", "float64")
    np.testing.assert_allclose(got, sps.gammainc(2.0, u), rtol=1e-13, atol=1e-300)


@pytest.mark.x64
def test_closed_forms_match_scipy_where_they_do_not_cancel():
    """At and above 2 the expm1/log1p/exp1 closed forms are accurate in float64."""
    g = float(np.euler_gamma)
    forms = {
        "phi1": lambda u: (u + np.expm1(-u)) / u,
        "ein": lambda u: sps.exp1(u) + np.log(u) + g,
        "ein_minus_phi1": lambda u: sps.exp1(u) + np.log(u) + g - 1.0 - np.expm1(-u) / u,
        "u_minus_log1p": lambda u: u - np.log1p(u),
    }
    for name, form in forms.items():
        u, got = _evaluated(name, "float64")
        ok = u >= 2.0
        np.testing.assert_allclose(got[ok], form(u[ok]), rtol=2e-14, err_msg=name)


@pytest.mark.x64
def test_decimal_references_agree_with_scipy():
    """The exact references themselves, checked where scipy's forms are accurate."""
    with localcontext() as ctx:
        ctx.prec = PREC
        assert abs(float(_euler_gamma()) - float(np.euler_gamma)) <= 1e-16
        assert str(_euler_gamma())[:32] == "0.577215664901532860606512090082"
        for x in [0.3, 1.0, 2.0, 5.0, 40.0]:
            assert float(ref_exp1(_D(x))) == pytest.approx(sps.exp1(x), rel=1e-14)
            assert float(ref_gamma2_cdf(_D(x))) == pytest.approx(sps.gammainc(2.0, x), rel=1e-14)
        for x in [3.0, 61.0, 500.0]:
            assert float(ref_ein(_D(x))) == pytest.approx(sps.exp1(x) + math.log(x) + np.euler_gamma, rel=1e-14)


# ------------------------------------------------------------------ harmonic numbers
HARMONIC_N = [-5, -1, 0, 1, 2, 3, 10, 100, 254, 255, 256, 257, 258, 300, 1000, 10**4, 10**6, 10**8, 2 * 10**9]


def _check_harmonic(dtype):
    n = np.asarray(HARMONIC_N, np.int64)
    got = np.asarray(jax.jit(lambda n: special.harmonic_number(n, dtype))(jnp.asarray(n, jnp.int32)))
    assert got.dtype == dtype
    eps = float(np.finfo(dtype).eps)
    for ni, gi in zip(HARMONIC_N, got):
        if ni <= 1000:  # exact rational sums (0 for n <= 0)
            exact = ref_harmonic(ni)
            assert abs(Fraction(float(gi)) - exact) <= 4 * eps * max(exact, Fraction(1)), (ni, float(gi), float(exact))
        else:  # H(n) = digamma(n + 1) + γ
            assert float(gi) == pytest.approx(sps.digamma(ni + 1.0) + np.euler_gamma, rel=4 * eps), ni


def test_harmonic_number_float32_across_table_end():
    _check_harmonic(np.float32)


@pytest.mark.x64
def test_harmonic_number_float64_across_table_end():
    _check_harmonic(np.float64)


# ------------------------------------------------------------------ dtypes
@pytest.mark.parametrize("name", NAMES)
def test_dtype_and_shape_are_kept_and_integers_become_the_default_float(name):
    fn = CASES[name][0]
    for dtype in (jnp.float32, jnp.float64, jnp.float16):
        x = jax.ShapeDtypeStruct((2, 3), dtype)
        with jax.enable_x64(True):
            assert jax.eval_shape(fn, x) == x
    assert jax.eval_shape(fn, jax.ShapeDtypeStruct((4,), jnp.int32)).dtype == jnp.result_type(float)


# ------------------------------------------------------------------ gradients
# closed-form derivatives, evaluated in float64 by NumPy/scipy without cancellation
# (h(x) = gammainc(2, x) is accurate for small x)
def _h_over_x2(x):
    """h(x) / x^2 = φ1'(x), with its series 1/2 - x/3 + x^2/8 where x^2 would underflow."""
    small = x < 1e-4
    xs = np.where(small, 1.0, x)
    return np.where(small, 0.5 - x / 3 + x * x / 8, sps.gammainc(2.0, xs) / xs / xs)


DERIVATIVES = {
    "gamma2_cdf": lambda u: u * np.exp(-u),
    "phi1": _h_over_x2,
    "ein": lambda u: -np.expm1(-u) / u,
    "exp1": lambda x: -np.exp(-x) / x,
    "ein_minus_phi1": lambda u: -np.expm1(-u) / u - _h_over_x2(u),
    "u_minus_log1p": lambda u: u / (1.0 + u),
}
# the derivatives at 0 (the series' linear coefficients): h'(0) = 0, φ1'(0) = 1/2,
# Ein'(0) = 1, (Ein - φ1)'(0) = 1/2, k'(0) = 0
AT_ZERO = {"gamma2_cdf": 0.0, "phi1": 0.5, "ein": 1.0, "ein_minus_phi1": 0.5, "u_minus_log1p": 0.0}


@pytest.mark.x64
@pytest.mark.parametrize("name", NAMES)
def test_float64_gradients_match_closed_forms_and_finite_differences(name):
    x, f = _evaluated(name, "float64")
    grad = np.asarray(_GRAD[name](jnp.asarray(x)))
    pos = x > 0
    with np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore"):
        closed = DERIVATIVES[name](x[pos])
    np.testing.assert_allclose(grad[pos], closed, rtol=1e-12, atol=1e-300, err_msg=f"{name}: grad vs closed form")
    if not pos.all():
        assert grad[~pos] == pytest.approx(AT_ZERO[name], abs=1e-15)
    # The functions act element-wise: a central difference along v = x (relative step 1e-6)
    # gives f'(x) * x at every point at once.  Compared where its rounding error,
    # eps |f| / (1e-6 |x f'|) relative, is below 1e-9.
    step = 1e-6
    fd = np.asarray(fd_jvp(_JIT[name], jnp.asarray(x), jnp.asarray(x), eps=step))
    informative = (pos & (np.abs(f) > 1e-290)  # differences of E1(700) ~ 1e-307 would underflow
                   & (np.finfo(np.float64).eps * np.abs(f) < 1e-9 * step * np.abs(x * grad)))
    assert informative.sum() >= 10
    np.testing.assert_allclose(fd[informative] / x[informative], grad[informative], rtol=1e-7,
                               err_msg=f"{name}: grad vs finite differences")


@pytest.mark.parametrize("name", NAMES)
def test_float32_gradients_are_finite_and_accurate_on_both_branches(name):
    """The untaken branch never poisons the gradient (no NaN/inf from where())."""
    x, _ = _evaluated(name, "float32")
    g = np.asarray(_GRAD[name](jnp.asarray(x, jnp.float32)))
    assert np.all(np.isfinite(g)), {float(a): float(b) for a, b in zip(x, g) if not np.isfinite(b)}
    pos = x > 0
    with np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore"):
        closed = DERIVATIVES[name](x[pos].astype(np.float64))
    np.testing.assert_allclose(g[pos], closed, rtol=1e-5, atol=1e-37, err_msg=name)
    if not pos.all():
        assert g[~pos] == pytest.approx(AT_ZERO[name], abs=1e-7)
