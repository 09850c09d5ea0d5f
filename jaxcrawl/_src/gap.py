r"""The log-gap re-solve behind :func:`jaxcrawl.solve` and the host-capped solves.

For a utility with a :class:`jaxcrawl.GapForm` (finite marginal at zero :math:`m_i`), a
bandwidth far below the change rates puts the optimal dual so close to :math:`\max_i m_i`
that the plain dual cannot resolve the rates (or is not representable).  :func:`refine`
keeps the plain solve's answer where it is accurate and otherwise re-solves on
:math:`\tau = -\log\log(m_k/\nu)` from an origin page :math:`k` (:func:`gap_allocation`).

The decision is made on the host when the inputs are concrete (an eager solve: nothing of
the re-solve is compiled or run when it is not needed), and by ``lax.cond`` under a trace
(jit, vmap -- where the cond becomes a select for the whole batch -- or grad).
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from . import budget as _budget
from .checks import is_concrete
from .rootfind import default_rtol

__all__ = ["SWITCH", "TOP_FIRST", "at_or_above", "refine", "needed", "gap_allocation", "gap_rate_function", "log_ratios", "origin_bracket",
           "dual_of", "masked", "uncapped_where_no_cap_binds"]

SWITCH = 0.5  # log(m_top / nu) below which the plain dual is replaced by the log-gap re-solve
TOP_FIRST = 1e-2  # log(m_top / nu) below which the top page is the first origin tried


def at_or_above(top, log_nu) -> jax.Array:
    """Pages whose log marginal at zero ``top`` is at or above the plain dual's ``log_nu``
    (within 16 eps: the plain solve stops at a page's threshold to rounding)."""
    slack = 16.0 * jnp.finfo(top.dtype).eps * jnp.maximum(jnp.abs(log_nu), 1.0)
    return top >= log_nu - slack


def _needs(gap, params, dual, converged):
    log_nu = jax.lax.stop_gradient(jnp.log(dual))
    t_top = jax.lax.stop_gradient(jnp.max(gap.top(params)) - log_nu)
    return ~converged | ~(t_top >= SWITCH), log_nu, t_top


@functools.partial(jax.jit, static_argnums=(0,))
def needed(gap, params, dual, converged) -> jax.Array:
    """Whether the plain solve's ``dual`` must be replaced: not converged, or within
    ``e^SWITCH`` of the largest marginal at zero (one reduction over the pages)."""
    return _needs(gap, params, dual, converged)[0]


def refine(gap, opts: tuple, params, bandwidth, lo, hi, x, dual, residual, steps, converged):
    """``(x, dual, residual, steps, converged)``: the plain solve's, or the log-gap re-solve's
    where the plain dual cannot resolve the answer.  ``opts``: sorted ``(name, value)`` pairs
    of ``max_steps``, ``rtol`` and ``adjoint``.  The re-solve's passes are added to ``steps``."""
    plain = (x, dual, residual, steps, converged)
    if is_concrete(params, bandwidth, lo, hi, dual, converged):
        if not bool(needed(gap, params, dual, converged)):
            return plain
        return _re_solve(gap, opts, params, bandwidth, lo, hi, *plain)
    return _fallback(gap, opts, params, bandwidth, lo, hi, *plain)


def _gap_solve(gap, opts, params, bandwidth, lo, hi, x, dual, residual, steps, converged):
    _, log_nu, t_top = _needs(gap, params, dual, converged)
    top = gap.top(params)
    live = jnp.isfinite(top)
    highest = jax.lax.stop_gradient(jnp.argmax(jnp.where(live, top, -jnp.inf)))
    # The origin: the page whose marginal at zero is nearest above the plain dual (the plain
    # solve stopped at its threshold: a jump of the sum in this dtype); if that fails or no
    # page is above, the top page (the plain dual failed near the largest marginal: a
    # bandwidth far below the change rates) -- the top page first when the plain dual sits at
    # it or is not a number.
    above = live & at_or_above(top, log_nu)
    nearest = jax.lax.stop_gradient(
        jnp.where(jnp.any(above), jnp.argmin(jnp.where(above, top, jnp.inf)), highest))
    top_first = ~(t_top >= TOP_FIRST) | ~jnp.isfinite(residual)
    first_k = jnp.where(top_first, highest, nearest)
    other_k = jnp.where(top_first, nearest, highest)

    # The two origins as a two-step scan, so the re-solve appears once in the program (half
    # the compilation of writing it twice); the second runs only when the first failed.
    def attempt(carry, origin):
        k, wanted = origin
        run = wanted & ~carry[4]
        out = jax.lax.cond(run, lambda: gap_allocation(gap, params, bandwidth, lo, hi, live, k, dict(opts)),
                           lambda: carry[:5])
        return (*out[:4], out[4], carry[5] + jnp.where(run, out[3], 0)), None

    zero = jnp.zeros_like(steps)
    init = (x, dual, residual, zero, jnp.zeros_like(converged), zero)
    origins = (jnp.stack([first_k, other_k]), jnp.stack([jnp.array(True), first_k != other_k]))
    (gx, gnu, gres, _, gconv, gsteps), _ = jax.lax.scan(attempt, init, origins)
    return gx, gnu, gres, steps + gsteps, gconv


@functools.partial(jax.jit, static_argnums=(0, 1))
def _re_solve(gap, opts, params, bandwidth, lo, hi, x, dual, residual, steps, converged):
    """The log-gap re-solve, unconditionally (the host decided it is needed)."""
    return _gap_solve(gap, opts, params, bandwidth, lo, hi, x, dual, residual, steps, converged)


@functools.partial(jax.jit, static_argnums=(0, 1))
def _fallback(gap, opts, params, bandwidth, lo, hi, x, dual, residual, steps, converged):
    """The same decision under a trace: ``lax.cond`` on :func:`needed`."""
    need = _needs(gap, params, dual, converged)[0]
    return jax.lax.cond(
        need,
        lambda a: _gap_solve(gap, opts, a[0], bandwidth, a[1], a[2], x, dual, residual, steps, converged),
        lambda a: (x, dual, residual, steps, converged),
        (params, lo, hi))


def gap_allocation(gap, params, bandwidth, lo, hi, live, k, opts: dict):
    """The budget solve on the dual ``tau = -log log(m_k / nu)`` of the GapForm ``gap``
    (origin: page ``k``'s marginal at zero ``m_k``), for a dual below ``m_k``:
    ``(x, nu, residual, steps, converged)`` with ``nu`` on the plain scale.

    ``nu = m_k exp(-e^{-tau})`` moves with page ``k``'s parameters; every page's rate is
    written through the same map (``d_i = log(m_k / m_i)`` keeps page ``k``'s params
    differentiable), so the implicit rule of the budget solve differentiates it exactly.
    The bracket starts where page ``k`` alone takes the whole bandwidth and where it takes
    ``1/n`` of it, and is widened geometrically until it holds the root.
    """
    top = gap.top(params)
    big = jnp.where(live[k], top[k], 0.0)
    own = jax.tree_util.tree_map(lambda v: jnp.asarray(v)[..., k], params)
    d = log_ratios(gap, params, own, big, live, jnp.arange(top.shape[-1]) == k)
    own = jax.lax.stop_gradient(own)
    budget = jnp.asarray(bandwidth, d.dtype)
    a, b = origin_bracket(gap, own, budget, d.shape[-1])
    # iterate on s = tau - t0 from the bracket's left end: tau is large far below the change
    # rates (~70 at 1e-30), where the root-finder's log mode (a > 0) would resolve it only to
    # ~ulp(log tau) * tau, a few times 1e-5 in float32 -- coarser than the budget's tolerance
    t0 = jax.lax.stop_gradient(a)
    sol = _budget.solve(gap_rate_function(gap), None, (params, d, t0), budget, jnp.asarray(lo, d.dtype),
                        jnp.asarray(hi, d.dtype), bracket=(a - t0, b - t0), max_steps=opts["max_steps"],
                        rtol=opts["rtol"], unrolled=opts.get("adjoint", "implicit") == "unrolled")
    nu = dual_of(big, sol.dual + t0)
    return sol.x, nu, sol.residual, jax.lax.stop_gradient(sol.num_steps), sol.converged


def log_ratios(gap, params, own, big, live, is_origin) -> jax.Array:
    """``d_i = log(m_k / m_i)`` of every page against the origin ``k`` (params ``own``, log
    marginal at zero ``big``): ``inf`` for pages not ``live``, exactly 0 (with a zero
    tangent) where ``is_origin``."""
    d = big - gap.top(params) if gap.log_ratio is None else gap.log_ratio(params, own)
    d = jnp.where(live, d, jnp.inf)
    return jnp.where(is_origin, 0.0 * d, d)


def origin_bracket(gap, own, budget, n) -> tuple[jax.Array, jax.Array]:
    """The starting bracket of ``tau``: where the origin page alone takes the whole
    ``budget`` and where it takes ``budget / n`` (``(0.5, 1)`` when those are not usable;
    either way the caller widens it until it holds the root)."""
    a = gap.marginal(budget, own)
    b = gap.marginal(budget / n, own)
    ok = jnp.isfinite(a) & jnp.isfinite(b) & (b >= a)
    return jnp.where(ok, a, 0.5), jnp.where(ok, b, 1.0)


def dual_of(big, tau) -> jax.Array:
    """The plain dual ``nu = m_k exp(-e^{-tau})`` of the log-gap dual ``tau``."""
    return jnp.exp(big - jnp.exp(-tau))


@functools.cache
def gap_rate_function(gap) -> Callable[[Any, Any], jax.Array]:
    """The rate of ``gap`` in the dual ``tau = -log log(m_k / nu)``, as a function of
    ``s = tau - t0`` with params ``(params, d, t0)``, ``d_i = log(m_k / m_i)`` (negative for
    pages above the origin; cached: one compilation).  Page ``i``'s ``q`` is
    ``-log(e^{-tau} - d_i) = tau - log(1 - d_i e^tau)`` (``tau`` itself at the origin), and it
    is not crawled once ``d_i e^tau >= 1``."""

    def rate(s, p):
        params, d, t0 = p
        tau = s + t0
        mag = jnp.abs(d)
        nz = mag > 0
        log_mag = jnp.log(jnp.where(nz, mag, 1.0))
        # below the origin (d > 0): w = d e^tau formed in logs (d may be tiny and e^tau huge),
        # q = tau - log(1 - w), crawled while w < 1; the origin: q = tau (with d's tangent);
        # above it (d < 0): q = -log(e^{-tau} + |d|), always crawled
        w = jnp.where(d > 0, jnp.exp(log_mag + tau), d)
        crawled = w < 1.0
        below = tau - jnp.log1p(-jnp.where(crawled & (d >= 0), w, 0.0))
        above = -jnp.logaddexp(-tau, log_mag)
        q = jnp.where(d < 0, above, below)
        return jnp.where(crawled, gap.rate(jnp.where(crawled, q, 0.0), params), 0.0)

    return rate


@functools.cache
def masked(gap):
    """``gap`` on params ``(params, valid)``: pages where ``valid`` is False (the padding
    rows of a sharded solve) have ``top = -inf``, so they are never an origin and take no
    rate.  Cached per ``gap`` (one compilation)."""
    from ..utilities import GapForm

    log_ratio = None if gap.log_ratio is None else (lambda p, own: gap.log_ratio(p[0], own[0]))
    return GapForm(top=lambda p: jnp.where(p[1], gap.top(p[0]), -jnp.inf),
                   rate=lambda q, p: gap.rate(q, p[0]),
                   marginal=lambda x, own: gap.marginal(x, own[0]),
                   log_ratio=log_ratio)


@functools.partial(jax.jit, static_argnums=(0, 1))
def uncapped_where_no_cap_binds(gap, cfg: tuple, params, budget, lower, upper, host, cap,
                                sol: _budget.BudgetSolution) -> _budget.BudgetSolution:
    """A capped solve that did not converge, replaced by the uncapped optimum (with
    :func:`jaxcrawl.solve`'s log-gap re-solve on the GapForm ``gap``) when that optimum
    keeps every host within its cap: it then satisfies the capped problem's KKT conditions
    with every host multiplier 0, so it is the capped optimum.  This solves a bandwidth far
    below the change rates (where the capped iteration on the plain dual cannot resolve the
    rates) whenever the caps do not bind there; a binding cap stays reported as not
    converged."""
    max_steps, rtol = cfg
    gap_opts = tuple(sorted(dict(max_steps=max_steps, rtol=rtol, adjoint="implicit").items()))
    x, nu, residual, steps, converged = refine(
        gap, gap_opts, params, budget, lower, upper, sol.x, sol.dual, sol.residual, sol.num_steps,
        sol.converged)
    H = cap.shape[-1]
    seg = jnp.where((host >= 0) & (host < H), host, H)
    sums = jax.ops.segment_sum(x, seg, num_segments=H + 1)[:H]
    tol = 4.0 * (default_rtol(cap.dtype) if rtol is None else rtol)
    fits = jnp.all(sums <= cap * (1.0 + tol))
    use = ~sol.converged & converged & fits
    return _budget.BudgetSolution(
        x=jnp.where(use, x, sol.x), dual=jnp.where(use, nu, sol.dual),
        host_dual=jnp.where(use, jnp.zeros_like(sol.host_dual), sol.host_dual),
        residual=jnp.where(use, residual, sol.residual), converged=sol.converged | use,
        num_steps=jnp.where(use, steps, sol.num_steps))
