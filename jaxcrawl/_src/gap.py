r"""The log-gap re-solve behind :func:`jaxcrawl.solve` and the host-capped solves.

For a utility with a :class:`jaxcrawl.GapForm` (finite marginal at zero :math:`m_i`), a
bandwidth far below the change rates puts the optimal dual so close to :math:`\max_i m_i`
that the plain dual cannot resolve the rates (or is not representable).  :func:`refine`
keeps the plain solve's answer where it is accurate and otherwise re-solves on
:math:`\tau = -\log\log(m_k/\nu)` from an origin page :math:`k` (:func:`resolve`, :func:`allocation`).

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
import numpy as np

from . import budget as _budget
from . import rootfind
from .checks import is_concrete
from .rootfind import default_rtol

__all__ = ["SWITCH", "TOP_FIRST", "at_or_above", "refine", "needed", "resolve", "allocation", "gap_rate_function", "log_ratios", "origin_bracket",
           "dual_of", "masked", "capped_needed", "capped_fallback", "capped_on_log_gap"]

SWITCH = 0.5  # log(m_top / nu) below which the plain dual is replaced by the log-gap re-solve
TOP_FIRST = 1e-2  # log(m_top / nu) below which the top page is the first origin tried


def at_or_above(top, log_nu) -> jax.Array:
    """Pages whose log marginal at zero ``top`` is at or above the plain dual's ``log_nu``
    (within 16 eps: the plain solve stops at a page's threshold to rounding)."""
    slack = 16.0 * jnp.finfo(top.dtype).eps * jnp.maximum(jnp.abs(log_nu), 1.0)
    return top >= log_nu - slack


def _needs(gap, params, dual, converged, top_max=None):
    log_nu = jax.lax.stop_gradient(jnp.log(dual))
    if top_max is None:
        top_max = jnp.max(gap.top(params))
    t_top = jax.lax.stop_gradient(top_max - log_nu)
    return ~converged | ~(t_top >= SWITCH), log_nu, t_top


@functools.partial(jax.jit, static_argnums=(0,))
def needed(gap, params, dual, converged, top_max=None) -> jax.Array:
    """Whether the plain solve's ``dual`` must be replaced: not converged, or within
    ``e^SWITCH`` of the largest marginal at zero (``top_max``: that largest log marginal, when
    the solve already reduced it; else one reduction over the pages)."""
    return _needs(gap, params, dual, converged, top_max)[0]


def refine(gap, opts: tuple, params, bandwidth, lo, hi, x, dual, residual, steps, converged, top_max=None,
           built=None):
    """``(x, dual, residual, steps, converged)``: the plain solve's, or the log-gap re-solve's
    where the plain dual cannot resolve the answer.  ``opts``: sorted ``(name, value)`` pairs
    of ``max_steps``, ``rtol`` and ``adjoint``; ``top_max``: the pages' largest log marginal at
    zero when known (no pass for the test); ``built = (build, raw)``: ``(params, lo, hi) =
    build(raw)``, so that under a trace the re-solve's branch builds them from the raw inputs
    instead of taking them written as page-sized arrays.  The re-solve's passes are added to
    ``steps``."""
    plain = (x, dual, residual, steps, converged)
    if is_concrete(params, bandwidth, lo, hi, dual, converged):
        if not bool(needed(gap, params, dual, converged, top_max)):
            return plain
        return _re_solve(gap, opts, params, bandwidth, lo, hi, *plain)
    build, operands = (_as_given, (params, lo, hi)) if built is None else built
    return _fallback(gap, opts, build, bandwidth, *plain, top_max, operands)


def resolve(pages, gap, opts: dict, budget, n: int, x, dual, residual, steps, converged) -> tuple:
    """The log-gap re-solve over ``pages`` (any :mod:`jaxcrawl._src.passes` reducer):
    ``(x, dual, residual, steps, converged)`` of the budget solve on
    ``tau = -log log(m_k / nu)`` from an origin page ``k`` -- the page whose marginal at zero is
    nearest above the plain dual (the plain solve stopped at its threshold: a jump of the sum
    in this dtype), else the top page (the plain dual failed near the largest marginal: a
    bandwidth far below the change rates); the top page first when the plain dual sits at it
    or is not a number; the other origin when the first fails.  One pass finds both."""
    log_nu = jax.lax.stop_gradient(jnp.log(dual))

    def origins(v, log_nu):
        top = gap.top(v.params)
        live = jnp.isfinite(top)
        ranked = jnp.where(live, top, -jnp.inf)
        above = jnp.where(live & at_or_above(top, log_nu), top, jnp.inf)
        return ranked, ranked, above, above

    t_max, highest, t_near, near = jax.lax.stop_gradient(
        pages.reduce(origins, ("max", "argmax", "min", "argmin"), log_nu))
    nearest = jnp.where(jnp.isfinite(t_near), near, highest)
    top_first = ~(t_max - log_nu >= TOP_FIRST) | ~jnp.isfinite(residual)
    first_k = jnp.where(top_first, highest, nearest)
    other_k = jnp.where(top_first, nearest, highest)
    gx, gnu, gres, gsteps, gconv = pages.first_of(
        lambda k: allocation(pages, gap, budget, n, k, opts), (first_k, other_k),
        (jnp.array(True), first_k != other_k), (x, dual, residual, steps, converged))
    return gx, gnu, gres, steps + gsteps, gconv


def _gap_solve(gap, opts, params, bandwidth, lo, hi, x, dual, residual, steps, converged):
    shape = jnp.shape(x)
    pages = _budget.ArrayPages(params, lo, hi, shape[-1])
    return resolve(pages, gap, dict(opts), bandwidth, shape[-1], x, dual, residual, steps, converged)


@functools.partial(jax.jit, static_argnums=(0, 1))
def _re_solve(gap, opts, params, bandwidth, lo, hi, x, dual, residual, steps, converged):
    """The log-gap re-solve, unconditionally (the host decided it is needed)."""
    return _gap_solve(gap, opts, params, bandwidth, lo, hi, x, dual, residual, steps, converged)


def _as_given(operands):
    """The ``build`` of :func:`_fallback` when its operands are ``(params, lo, hi)`` themselves."""
    return operands


@functools.partial(jax.jit, static_argnums=(0, 1, 2))
def _fallback(gap, opts, build, bandwidth, x, dual, residual, steps, converged, top_max, operands):
    """The same decision under a trace: ``lax.cond`` on :func:`needed`.  The re-solve's branch
    takes ``(params, lo, hi) = build(operands)``: the solve's raw inputs (nothing page-sized is
    written for the branch) or, with :func:`_as_given`, those arrays."""
    if top_max is None:
        top_max = jnp.max(gap.top(build(operands)[0]))
    need = _needs(gap, None, dual, converged, top_max)[0]

    def resolve_branch(operands):
        params, lo, hi = build(operands)
        return _gap_solve(gap, opts, params, bandwidth, lo, hi, x, dual, residual, steps, converged)

    return jax.lax.cond(need, resolve_branch, lambda _: (x, dual, residual, steps, converged), operands)


def allocation(pages, gap, budget, n: int, k, opts: dict) -> tuple:
    """The budget solve on the dual ``tau = -log log(m_k / nu)`` of the GapForm ``gap``
    (origin: page ``k``'s marginal at zero ``m_k``), for a dual below ``m_k``:
    ``(x, nu, residual, steps, converged)`` with ``nu`` on the plain scale.

    ``nu = m_k exp(-e^{-tau})`` moves with page ``k``'s parameters; every page's rate is
    written through the same map (``d_i = log(m_k / m_i)`` keeps page ``k``'s params
    differentiable), so the implicit rule of the budget solve differentiates it exactly.
    The iteration's bracket is every ``tau`` the dtype represents (:func:`tau_range`: it
    holds the root of every problem this origin can serve, so nothing is evaluated to find
    it), its start the middle of the origin bracket (:func:`origin_bracket`: where page ``k``
    alone takes the whole bandwidth and where it takes ``1/n`` of it); it runs on
    ``tau - t0`` from that bracket's left end ``t0`` (linear, not log, mode: ``tau`` is large
    far below the change rates, where a log-mode iteration would resolve it only coarsely).
    A root beyond the range (the pages above the origin take more than the bandwidth at
    ``nu = m_k``: another origin's problem) ends on its edge with the budget unmet, which
    the solve's check reports as not converged."""
    own = pages.page(k)
    top_k = gap.top(own)
    big = jnp.where(jnp.isfinite(top_k), top_k, 0.0)
    a, b = origin_bracket(gap, jax.lax.stop_gradient(own), budget, n)
    t0 = jax.lax.stop_gradient(a)

    def gap_params(v):
        live = jnp.isfinite(gap.top(v.params))
        return v.params, log_ratios(gap, v.params, own, big, live, v.index == k), t0

    lo, hi = tau_range(jnp.result_type(t0))
    lo, hi = jnp.minimum(lo - t0, 0.0), jnp.maximum(hi - t0, b - t0)
    x, s, residual, steps, converged = pages.derive(gap_params).solve(
        gap_rate_function(gap), None, jnp.asarray(budget), (lo, hi, 0.5 * (b - t0)), opts)
    return x, dual_of(big, s + t0), residual, steps, converged


def tau_range(dtype) -> tuple[float, float]:
    """Every ``tau`` of a dual the dtype represents: ``log(m_k / nu)`` is below twice the
    log of the dtype's range (``tau`` above the left end) and, where ``e^{-tau}`` is below
    its smallest normal number, the origin page takes no rate the dtype holds."""
    fi = jnp.finfo(dtype)
    span = float(np.log(fi.max)) - float(np.log(fi.tiny))
    return -float(np.log(2.0 * span)), -float(np.log(fi.tiny)) + 1.0


def log_ratios(gap, params, own, big, live, is_origin) -> jax.Array:
    """``d_i = log(m_k / m_i)`` of every page against the origin ``k`` (params ``own``, log
    marginal at zero ``big``): ``inf`` for pages not ``live``, exactly 0 (with a zero
    tangent) where ``is_origin``."""
    d = big - gap.top(params) if gap.log_ratio is None else gap.log_ratio(params, own)
    d = jnp.where(live, d, jnp.inf)
    return jnp.where(is_origin, 0.0 * d, d)


def origin_bracket(gap, own, budget, n) -> tuple[jax.Array, jax.Array]:
    """Where the iteration on ``tau`` starts: between where the origin page alone takes
    the whole ``budget`` and where it takes ``budget / n`` (``(0.5, 1)`` when those are not
    usable)."""
    ab = gap.marginal(jnp.stack([budget, budget / n]), own)  # both ends one kernel
    a, b = ab[0], ab[1]
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
    log_ratio = None if gap.log_ratio is None else (lambda p, own: gap.log_ratio(p[0], own[0]))
    return gap._replace(top=lambda p: jnp.where(p[1], gap.top(p[0]), -jnp.inf),
                   rate=lambda q, p: gap.rate(q, p[0]),
                   marginal=lambda x, own: gap.marginal(x, own[0]),
                   log_ratio=log_ratio)


def _near_top(gap, params, host, cap, sol):
    """Whether some segment's dual (``nu``, or ``nu + kappa_h`` on a binding host) is within
    ``e^SWITCH`` of the largest marginal at zero of its pages, where the plain duals cannot
    resolve the rates (the capped analogue of :func:`needed`)."""
    H = cap.shape[-1]
    g = _segments(_budget._hosts(host, H), sol.host_dual > 0)
    top = jax.lax.stop_gradient(gap.top(params))
    best = jax.ops.segment_max(jnp.where(jnp.isfinite(top), top, -jnp.inf), g, num_segments=H + 1)
    dual = jax.lax.stop_gradient(jnp.concatenate([sol.dual + sol.host_dual, sol.dual[None]]))
    t = best - jnp.log(dual)
    return jnp.any(jnp.isfinite(best) & ~(t >= SWITCH))


@functools.partial(jax.jit, static_argnums=(0,))
def capped_needed(gap, params, host, cap, sol: _budget.BudgetSolution) -> jax.Array:
    """Whether :func:`capped_fallback` may change the capped solve ``sol``: not converged, or
    a segment's dual too close to its pages' marginals at zero (one pass over the pages)."""
    return ~sol.converged | _near_top(gap, params, host, cap, sol)


@functools.partial(jax.jit, static_argnums=(0, 1))
def capped_fallback(gap, cfg: tuple, params, budget, lower, upper, host, cap,
                    sol: _budget.BudgetSolution) -> _budget.BudgetSolution:
    """The host-capped solve ``sol`` (the capped iteration on the plain duals), replaced by
    :func:`capped_on_log_gap` (every segment on its own log-gap dual, starting from the
    hosts ``sol`` puts at their caps) where the plain duals cannot resolve the answer --
    ``sol`` not converged, or a segment's dual within ``e^SWITCH`` of its pages' largest
    marginal at zero (a bandwidth or cap far below the change rates).  The replacement is
    taken only if it converged: a converged ``sol`` is kept where it fails."""
    rtol = cfg[1]
    hs = _budget._hosts(host, cap.shape[-1])
    tol = 4.0 * (default_rtol(cap.dtype) if rtol is None else rtol)

    def replace(sol):
        sums = hs.sum(jax.lax.stop_gradient(sol.x))
        # from the hosts a converged plain solve puts at their caps; from none (the uncapped
        # problem, hosts bound as they exceed their caps) when it did not converge
        bind0 = sol.converged & ((sums >= cap * (1.0 - tol)) | (sol.host_dual > 0))
        return _prefer_converged(sol, capped_on_log_gap(gap, cfg, params, budget, lower, upper, host, cap, bind0))

    return jax.lax.cond(capped_needed(gap, params, host, cap, sol), replace, lambda s: s, sol)


def _prefer_converged(old, new):
    """``new`` where it converged, else ``old``."""
    return jax.tree_util.tree_map(lambda a, b: jnp.where(new.converged, b, a), old, new)


# --------------------------------------------------------------- host caps on the log-gap
def _segments(hs, bind):
    """Segment of every page: its host where that host binds, else ``H`` (the other pages)."""
    return jnp.where(hs.has_host & bind[hs.hidx], hs.hidx, hs.num)


def _segment_origins(top, live, group, num):
    """Per segment, the live page with the largest ``top`` (the first of ties), and whether
    the segment has one."""
    n = top.shape[-1]
    t = jnp.where(live, top, -jnp.inf)
    best = jax.ops.segment_max(t, group, num_segments=num)
    idx = jnp.arange(n)
    cand = jnp.where(live & (t >= best[group]), idx, n)
    k = jax.ops.segment_min(cand, group, num_segments=num)
    has = (k < n) & (k >= 0)
    return jnp.where(has, k, 0), has


def _grouped_setup(gap, params, live, group, num):
    """Origins and offsets of a grouped log-gap solve: each segment's top page ``k_g``
    (params ``own_g``, log marginal at zero ``big_g``) and every page's
    ``d_i = log(m_{k_g(i)} / m_i)``, differentiable in every page's params (the origins'
    included, as in :func:`allocation`)."""
    top = gap.top(params)
    n = top.shape[-1]
    k, has = _segment_origins(jax.lax.stop_gradient(top), live, group, num)
    own_g = jax.tree_util.tree_map(lambda v: jnp.broadcast_to(jnp.asarray(v), top.shape)[k], params)
    big_g = jnp.where(has, top[k], 0.0)
    own = jax.tree_util.tree_map(lambda v: v[group], own_g)
    d = log_ratios(gap, params, own, big_g[group], live, jnp.arange(n) == k[group])
    return k, has, jax.lax.stop_gradient(own_g), big_g, d


def _grouped_impl(gap, cfg, params, budgets, lo, hi, live, group):
    """The per-segment budget problems ``sum_{i in g} x_i = B_g`` (each its own dual
    ``tau_g`` from its own origin), one vectorised safeguarded iteration on
    ``s_g = tau_g - t0_g`` with segment sums, then a closing correction per segment.
    Returns ``(x, tau, residual, converged, steps, big, has)``; ``residual`` and
    ``converged`` per segment, before the correction; ``big`` and ``has``: each segment's
    origin's log marginal at zero and whether it has a live page."""
    max_steps, rtol = cfg
    num = budgets.shape[-1]
    rtol = default_rtol(budgets.dtype) if rtol is None else rtol
    _, has, own_g, big, d = _grouped_setup(gap, params, live, group, num)
    count = jax.ops.segment_sum(live.astype(budgets.dtype), group, num_segments=num)
    rate = gap_rate_function(gap)
    segsum = lambda v: jax.ops.segment_sum(v, group, num_segments=num)  # noqa: E731
    active = has & (budgets > 0)
    a, b = origin_bracket(gap, own_g, budgets, jnp.maximum(count, 1.0))

    def sums(tau):
        return segsum(jnp.clip(rate(tau[group], (params, d, 0.0)), lo, hi))

    def widen(s):  # rates fall with tau: sums(a) >= B_g >= sums(b), geometrically in width
        a, b, i = s
        step = 2.0 * jnp.maximum(jnp.abs(b - a), 1.0)
        low, high = sums(a) < budgets, sums(b) > budgets
        return jnp.where(active & low, a - step, a), jnp.where(active & high, b + step, b), i + 1

    def unbracketed(s):
        a, b, i = s
        return jnp.any(active & ((sums(a) < budgets) | (sums(b) > budgets))) & (i < 64)

    a, b, _ = jax.lax.while_loop(unbracketed, widen, (a, b, 0))
    t0 = jax.lax.stop_gradient(a)
    p = (params, d, t0[group])

    def f_and_df(s):
        x, dx, *_ = _budget.eval_pages(rate, p, s[group], lo, hi)
        return segsum(x) - budgets, segsum(dx)

    state, log_mode = rootfind.root_init(jnp.zeros_like(a), b - t0, done=~active)
    final = rootfind.iterate(f_and_df, state, log_mode, rtol * budgets, max_steps)
    s = rootfind.root_value(final, log_mode)
    x, dx, *_ = _budget.eval_pages(rate, p, s[group], lo, hi)
    residual = segsum(x) - budgets
    slope = segsum(dx)
    c = jnp.where(slope < 0, -residual / jnp.where(slope < 0, slope, -1.0), 0.0)
    x = jnp.clip(x + c[group] * dx, lo, hi)
    ok = final.done & jnp.isfinite(residual) & (jnp.abs(residual) <= 4.0 * rtol * budgets)
    converged = jnp.where(active, ok, jnp.abs(segsum(x) - budgets) <= rtol * budgets)
    return x, s + t0, residual, converged, final.k, big, has


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def _with_implicit_tangents(gap, params, budgets, lo, hi, live, group, x, tau):
    """``(x, tau)`` (a converged grouped solve at ``params``, computed without derivatives)
    with the implicit rule per segment as their derivative: ``dx_i = fixed_i + phi_i' ds_g``,
    ``ds_g = (dB_g - sum_g fixed) / sum_g phi'`` (``fixed``: the params' and bounds' part,
    the origins' params included).  So the solve runs once and the loops are never
    differentiated."""
    return x, tau


@_with_implicit_tangents.defjvp
def _implicit_tangents_jvp(gap, primals, tangents):
    params, budgets, lo, hi, live, group, x, tau = primals
    dparams, dbudgets, dlo, dhi = tangents[:4]
    num = budgets.shape[-1]
    rate = gap_rate_function(gap)
    t = jax.lax.stop_gradient(tau)[group]

    d, dd = jax.jvp(lambda p: _grouped_setup(gap, p, live, group, num)[4], (params,), (dparams,))
    _, dphi_dth = jax.jvp(lambda p, dv: rate(t, (p, dv, 0.0)), (params, d), (dparams, dd))
    _, dphi_ds, free, at_lo, at_hi = _budget.eval_pages(rate, (params, d, 0.0), t, lo, hi)
    shape = x.shape
    dphi_dth = jnp.where(free, jnp.broadcast_to(dphi_dth, shape), 0.0)
    dbound = jnp.where(at_lo, jnp.broadcast_to(dlo, shape), jnp.where(at_hi, jnp.broadcast_to(dhi, shape), 0.0))
    fixed = dbound + dphi_dth
    segsum = lambda v: jax.ops.segment_sum(v, group, num_segments=num)  # noqa: E731
    den = segsum(dphi_ds)
    ds = jnp.where(den != 0, (dbudgets - segsum(fixed)) / jnp.where(den != 0, den, 1.0), 0.0)
    return (x, tau), (jnp.where(free, dphi_dth + dphi_ds * ds[group], dbound), ds)


def _log_dual_gap(big_h, tau_h, big_r, tau_r):
    """``log(mu_h / nu)`` of two log-gap duals from different origins, without cancelling
    the tiny gaps against the origins' logs."""
    return (big_h - big_r) + (jnp.exp(-tau_r) - jnp.exp(-tau_h))


def capped_on_log_gap(gap, cfg: tuple, params, budget, lower, upper, host, cap, bind0):
    r"""The host-capped optimum on the log-gap (caps that bind far below the change rates).

    Given the set of binding hosts, the capped KKT conditions split into independent budget
    problems: each binding host's pages share its cap :math:`C_h` (dual :math:`\mu_h`), the
    other pages share :math:`B-\sum_{\text{binding}}C_h` (dual :math:`\nu`).  Each is solved on
    its own log-gap dual from its own top page (:func:`_grouped_impl`, one vectorised iteration
    with segment sums), so every segment's rates are resolved however close its dual is to
    its pages' marginals at zero.  The binding set starts at ``bind0`` and is corrected (a
    binding host with :math:`\mu_h<\nu` is released, a free host over its cap is bound) until
    it is consistent -- then the KKT conditions hold: every host within its cap, every
    binding host's multiplier :math:`\kappa_h=\mu_h-\nu\ge0`.  At most 8 corrections; an
    inconsistent set is reported as not converged.  Derivatives: the implicit rule per
    segment (the binding set is locally constant).
    """
    max_steps, rtol = cfg
    dtype = budget.dtype
    rtol_ = default_rtol(dtype) if rtol is None else rtol
    H = cap.shape[-1]
    hs = _budget._hosts(host, H)
    live = jnp.isfinite(gap.top(params))
    fixed_params = jax.lax.stop_gradient(params)
    slack = 16.0 * jnp.finfo(dtype).eps

    def groups(bind):
        taken = jnp.where(bind, cap, 0.0)
        return _segments(hs, bind), jnp.concatenate([taken, (budget - jnp.sum(taken))[None]])

    def consistent(bind, x, tau, g, big, has):
        diff = _log_dual_gap(big[:H], tau[:H], big[H], tau[H])
        drop = bind & has[H] & (diff < -slack * jnp.maximum(jnp.abs(big[H]), 1.0))
        add = ~bind & (hs.sum(x) > cap * (1.0 + 4.0 * rtol_))
        # binding caps that leave the other pages less than their floors: start over from none
        rest_lo = jnp.sum(jnp.where(g == H, lower, 0.0))
        over = jnp.sum(jnp.where(bind, cap, 0.0)) > (budget - rest_lo) * (1.0 + 4.0 * rtol_)
        new = jnp.where(over, jnp.zeros_like(bind), (bind & ~drop) | add)
        return new, ~jnp.any(new != bind), diff

    def step(s):
        bind, _, i, steps, *_ = s
        g, budgets = groups(bind)
        x, tau, residual, conv, k, big, has = _grouped_impl(gap, cfg, fixed_params, budgets, lower, upper, live, g)
        new, same, diff = consistent(bind, x, tau, g, big, has)
        # the solve of this set is kept with its set; the next set is solved only if it differs
        return jnp.where(same, bind, new), same, i + 1, steps + k, bind, x, tau, residual, conv, diff

    n = lower.shape[-1]
    init = (bind0, jnp.array(False), 0, jnp.asarray(0, jnp.int32), bind0, jnp.zeros((n,), dtype),
            jnp.zeros((H + 1,), dtype), jnp.zeros((H + 1,), dtype), jnp.zeros((H + 1,), bool),
            jnp.zeros((H,), dtype))
    _, same, _, steps, bind, x, tau, residual, conv, diff = jax.lax.while_loop(
        lambda s: ~s[1] & (s[2] < 8), step, init)
    g, budgets = groups(bind)
    x, tau = _with_implicit_tangents(gap, params, budgets, lower, upper, live, g, x, tau)
    big = _grouped_setup(gap, params, live, g, H + 1)[3]  # with the origins' tangents (the dual's)
    nu = dual_of(big[H], tau[H])
    kappa = jnp.where(bind, nu * jnp.expm1(jnp.maximum(diff, 0.0)), 0.0)
    total = jnp.sum(x)
    converged = (jnp.all(conv) & same & jnp.isfinite(total)
                 & (jnp.abs(total - budget) <= rtol_ * jnp.abs(budget)))
    return _budget.BudgetSolution(x=x, dual=nu, host_dual=kappa, residual=jnp.sum(residual),
                                  converged=converged, num_steps=steps)
