r"""The budgeted allocation: one root-find on the dual, one implicit rule, host caps optional.

Solves

.. math::

   \max_x \sum_i u_i(x_i)\quad\text{s.t.}\quad \sum_i x_i = B,\qquad
   \sum_{i\in h} x_i \le C_h\ (h=1..H),\qquad \ell_i\le x_i\le h_i

through the per-page inverse marginal :math:`\varphi_i=(u_i')^{-1}` (``rate_fn``): with a
global multiplier :math:`\nu` and host multipliers :math:`\kappa_h\ge0`,
:math:`x_i=\mathrm{clip}(\varphi_i(\nu+\kappa_{h(i)}),\ell_i,h_i)`.

Without hosts this is the plain budget problem: one safeguarded Newton iteration on
:math:`f(\nu)=\sum_i x_i(\nu)-B` (:mod:`jaxcrawl._src.rootfind`).  With hosts, for a fixed
:math:`\nu` a host whose pages want :math:`S_h(\nu)=\sum_{i\in h}x_i(\nu)>C_h` receives exactly
:math:`C_h` (its :math:`\kappa_h>0` solves :math:`S_h(\nu+\kappa_h)=C_h`), so the outer equation
:math:`G(\nu)=\sum_{i\notin\text{hosts}}x_i(\nu)+\sum_h\min(S_h(\nu),C_h)=B` is continuous,
nonincreasing and needs no inner solve; afterwards one vectorised root-find gives every
binding host's :math:`\mu_h=\nu+\kappa_h`.

A closing Newton correction on the free pages makes the budget (and every binding cap)
hold to rounding.  The residual and the ``converged`` flag are measured *before* it: the
correction never hides a solve that stopped at its cap.

Derivatives: one ``jax.custom_jvp`` applies the implicit function theorem to the active
constraints (the budget and every binding cap),

.. math::

   d\mu_h = \frac{dC_h-\sum_{i\in h}\text{fixed}_i}{\sum_{i\in h,\,\text{free}}\partial_\nu\varphi_i},\qquad
   d\nu = \frac{dB-\sum_h dC_h-\sum_{i\,\text{elsewhere}}\text{fixed}_i}
              {\sum_{i\,\text{elsewhere, free}}\partial_\nu\varphi_i},

with :math:`\text{fixed}_i=\partial_\theta\varphi_i\,d\theta` on free pages and the bound's
tangent on clipped ones; :math:`dx_i=\text{fixed}_i+\partial_\nu\varphi_i\,d(\text{dual}_i)`.
Forward and reverse mode (its transpose) cost one pass over the pages; loops are never
differentiated.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from . import rootfind
from . import search as _search
from .passes import View, reduce_array, reduce_arrays


class BudgetSolution(NamedTuple):
    """Raw result of :func:`solve`: allocation, duals, pre-correction residual, status."""

    x: jax.Array
    dual: jax.Array
    host_dual: jax.Array | None
    residual: jax.Array
    converged: jax.Array
    num_steps: jax.Array
    side: tuple = ()


def eval_pages(rate_fn: Callable, params: Any, nu: jax.Array, lower: jax.Array, upper: jax.Array) -> tuple:
    """One pass at per-page (or scalar) duals ``nu``: clipped allocation ``x``, its
    derivative in the dual on free pages (0 elsewhere), and the masks ``free``,
    ``at_lo``, ``at_hi``."""
    phi, dphi = jax.jvp(lambda v: rate_fn(v, params), (nu,), (jnp.ones_like(nu),))
    shape = jnp.broadcast_shapes(phi.shape, jnp.shape(lower), jnp.shape(upper))
    phi = jnp.broadcast_to(phi, shape)
    dphi = jnp.broadcast_to(dphi, shape)
    at_lo = phi <= lower
    at_hi = (phi >= upper) & ~at_lo
    free = ~(at_lo | at_hi)
    if jnp.ndim(lower) == 0 and jnp.ndim(upper) == 0:
        x = jnp.minimum(jnp.maximum(phi, lower), upper)  # scalar limits: the clip, no select
    else:
        x = jnp.where(at_lo, lower, jnp.where(at_hi, upper, phi))
    return x, jnp.where(free & jnp.isfinite(dphi), dphi, 0.0), free, at_lo, at_hi


#: the reductions of :func:`limit_values`
LIMIT_OPS = ("sum", "sum", "sum", "max")


def limit_values(v) -> tuple:
    """Per page of the view ``v``: its lower limit, its finite width (0 if infinite), 1 if
    its width is infinite, its finite width again; reduced by :data:`LIMIT_OPS`."""
    shape = jnp.broadcast_shapes(jnp.shape(v.lo), jnp.shape(v.hi), jnp.shape(v.index))
    v = v._replace(lo=jnp.broadcast_to(v.lo, shape), hi=jnp.broadcast_to(v.hi, shape))
    width = v.hi - v.lo
    fin = jnp.isfinite(width)
    fw = jnp.where(fin, width, 0.0)
    return v.lo, fw, jnp.where(fin, 0.0, 1.0).astype(fw.dtype), fw


def limit_stats(pages) -> tuple:
    """``(sum lower, sum of finite widths, number of infinite widths, largest finite width)``
    of the pages' limits: one pass."""
    return pages.reduce(limit_values, LIMIT_OPS)


def _at_reference(v, marginal_fn, slack, big, total):
    """The marginal utilities at the feasible point ``lo + slack w / sum(w)`` (``w`` the width,
    ``big`` where infinite), as ``(min, max)`` candidates over the movable pages."""
    shape = jnp.broadcast_shapes(jnp.shape(v.lo), jnp.shape(v.hi), jnp.shape(v.index))
    lo, hi = jnp.broadcast_to(v.lo, shape), jnp.broadcast_to(v.hi, shape)
    width = hi - lo
    xbar = lo + slack * (jnp.where(jnp.isfinite(width), width, big) / total)
    m = jnp.broadcast_to(marginal_fn(xbar, v.params), xbar.shape)
    ok = (width > 0) & jnp.isfinite(m)
    return jnp.where(ok, m, jnp.inf), jnp.where(ok, m, -jnp.inf)


def bracket_from_marginals(pages, marginal_fn: Callable, budget: jax.Array) -> tuple[jax.Array, jax.Array]:
    r"""Dual bracket ``[a, b]`` with ``f(a) >= 0 >= f(b)``, from the marginal utilities at a
    feasible point: at :math:`\nu=\max_i u_i'(\bar x_i)` every page has
    :math:`x_i(\nu)\le\bar x_i` (sum at most the budget), symmetrically at the min.  The
    limits' statistics (:meth:`limits`) and one pass."""
    sum_lo, sum_w, n_inf, max_w = pages.limits()
    slack = budget - sum_lo
    big = jnp.maximum(slack, max_w)
    big = jnp.where(big > 0, big, 1.0)
    total = sum_w + n_inf * big
    total = jnp.where(total > 0, total, 1.0)
    def marginals(v, slack, big, total):
        return _at_reference(v, marginal_fn, slack, big, total)

    a, b = pages.reduce(marginals, ("min", "max"), slack, big, total)
    fallback = ~(jnp.isfinite(a) & jnp.isfinite(b))
    return jnp.where(fallback, 1.0, a), jnp.where(fallback, 1.0, b)


def expand_bracket(totals_fn: Callable, budget: jax.Array, a: jax.Array, b: jax.Array, loop=jax.lax.while_loop,
                   max_expansions: int = 64) -> tuple[jax.Array, jax.Array]:
    """Widen ``[a, b]`` (geometrically when positive) until ``total(a) >= B >= total(b)``;
    ``totals_fn(a, b) -> (total(a), total(b))`` is one pass for both ends, so the loop takes
    one pass per widening of either end (and one to confirm)."""
    def body(s):
        a, b, _, k = s
        ta, tb = totals_fn(a, b)
        grow_a, grow_b = ta < budget, tb > budget
        a2 = jnp.where(grow_a, jnp.where(a > 0, a / 4.0, a - 2.0 * jnp.maximum(jnp.abs(b - a), 1.0)), a)
        b2 = jnp.where(grow_b, jnp.where(b > 0, b * 4.0, b + 2.0 * jnp.maximum(jnp.abs(b - a), 1.0)), b)
        return a2, b2, grow_a | grow_b, k + 1

    a, b, _, _ = loop(lambda s: s[2] & (s[3] < max_expansions), body, (a, b, jnp.asarray(True), 0))
    return a, b


#: the name scope of every pass over the pages in memory (its reductions are found by it)
PASS_SCOPE = "jaxcrawl_pass"


class ArrayPages(NamedTuple):
    """Pages in memory (traced or concrete; the sums of sharded arrays are all-reduces):
    the passes of :mod:`jaxcrawl._src.passes` as ``jnp`` reductions and ``lax`` loops."""

    params: Any
    lo: jax.Array
    hi: jax.Array
    n: int = 0  # the number of pages (``lo`` and ``hi`` may be scalars)
    known_limits: Any = None  # the limits' statistics when a pass already reduced them

    def view(self):
        return View(self.params, self.lo, self.hi, jnp.arange(self.n))

    def reduce(self, fn, ops, *args):
        with jax.named_scope(PASS_SCOPE):
            return self._reduce(fn, ops, *args)

    def _reduce(self, fn, ops, *args):
        return reduce_arrays(fn(*self._pass_view(args)), ops)

    def _pass_view(self, args):
        """``(view, *args)`` of a pass with arguments: the pages tied to those arguments by
        one barrier, so that nothing of the per-page work is loop-invariant to the compiler
        (a pass in a loop would otherwise have its dual-free parts hoisted out of the loop,
        each a kernel of its own writing a page-sized array)."""
        if not args:
            return (self.view(),)
        params, lo, hi, args = jax.lax.optimization_barrier((self.params, self.lo, self.hi, args))
        return (View(params, lo, hi, jnp.arange(self.n)), *args)

    def map(self, fn, *args):
        with jax.named_scope(PASS_SCOPE):
            return fn(self.view(), *args)

    def total(self, x):
        with jax.named_scope(PASS_SCOPE):
            return jnp.sum(x)

    def limits(self):
        return limit_stats(self) if self.known_limits is None else self.known_limits

    def page(self, k):
        return jax.tree_util.tree_map(lambda v: jnp.asarray(v)[..., k], self.params)

    def derive(self, fn):
        return self._replace(params=fn(self.view()))

    loop = staticmethod(jax.lax.while_loop)

    @staticmethod
    def first_of(attempt, ks, wanted, init):
        """``attempt(k)`` for each wanted ``k`` until one converges, as a two-step scan (the
        attempt appears once in the program); returns the last run attempt's result with the
        attempts' steps added up."""
        def step(carry, kw):
            k, want = kw
            run = want & ~carry[4]
            out = jax.lax.cond(run, lambda: attempt(k), lambda: carry[:5])
            return (*out[:5], carry[5] + jnp.where(run, out[3], 0)), None

        zero = jnp.zeros_like(init[3])
        (x, nu, res, _, conv, steps), _ = jax.lax.scan(
            step, (*init[:3], zero, jnp.zeros_like(init[4]), zero), (jnp.stack(ks), jnp.stack(wanted)))
        return x, nu, res, steps, conv

    def solve(self, rate_fn, marginal_fn, budget, bracket, opts):
        sol = solve(rate_fn, marginal_fn, self.params, budget, self.lo, self.hi, bracket=bracket,
                    max_steps=opts["max_steps"], rtol=opts["rtol"], unrolled=opts.get("adjoint") == "unrolled")
        return sol.x, sol.dual, sol.residual, jax.lax.stop_gradient(sol.num_steps), sol.converged


class BuiltPages:
    """Pages in memory whose parameters and limits are built from the raw inputs inside every
    pass (``build(raw) -> (params, lower, upper)``): nothing derived from the inputs (units,
    masks, limits) is written as a page-sized array between passes.  The passes of
    :class:`ArrayPages`."""

    def __init__(self, build, raw, n):
        self.build, self.raw, self.n = build, raw, n

    def view(self):
        # a copy of the raw inputs per pass: the pass's parameters are its own, not shared
        # with (and written for) another pass or the caller
        return self._view_of(jax.lax.optimization_barrier(self.raw))

    def _view_of(self, raw):
        params, lo, hi = self.build(raw)
        return View(params, lo, hi, jnp.arange(self.n))

    def _pass_view(self, args):
        return (self.view(), *args)

    def _reduce(self, fn, ops, *args):
        if len(ops) > 1 and args and _separate_reductions():
            # XLA:CPU vectorises a reduction (an XNNPACK fusion) only with its operands
            # inside it: reductions sharing a scalar get a materialised page-sized broadcast
            # of it.  Each reduction its own copy of the operands (recomputing the shared
            # per-page work costs less than those arrays).
            copies = jax.lax.optimization_barrier(((self.raw, args),) * len(ops))
            return tuple(reduce_array(fn(self._view_of(copies[i][0]), *copies[i][1])[i], op)
                         for i, op in enumerate(ops))
        return ArrayPages._reduce(self, fn, ops, *args)

    reduce = ArrayPages.reduce
    map = ArrayPages.map
    total = ArrayPages.total
    loop = staticmethod(jax.lax.while_loop)


def _separate_reductions() -> bool:
    """Whether a multi-output pass is written as one reduction per output (XLA:CPU; the
    backend as :mod:`jaxcrawl._src.search` sees it)."""
    return _search.on_host_loops()


class _Hosts(NamedTuple):
    """Segment bookkeeping of host-capped solves."""

    has_host: jax.Array
    seg: jax.Array
    hidx: jax.Array
    num: int

    def sum(self, v):
        return jax.ops.segment_sum(v, self.seg, num_segments=self.num + 1)[: self.num]


def _hosts(host, num_hosts):
    has_host = (host >= 0) & (host < num_hosts)
    return _Hosts(has_host, jnp.where(has_host, host, num_hosts), jnp.where(has_host, host, 0), num_hosts)


def plain(pages, rate_fn: Callable, marginal_fn: Callable | None, budget, bracket, max_steps: int, rtol: float,
          unrolled: bool = False) -> tuple:
    """The budget solve over ``pages`` (any :mod:`jaxcrawl._src.passes` reducer): bracket,
    safeguarded Newton iteration, residual before the closing correction, the corrected
    plan.  ``bracket`` (without ``marginal_fn``): ``(a, b)``, widened until it holds the
    root, or ``(a, b, start)`` with ``a <= 0``, known to hold it (not evaluated): the iteration
    then runs on the dual itself (not its log) from ``start``.
    Returns ``(x, nu, residual, converged, steps)``; ``converged`` is the iteration's
    (see :func:`checked`)."""
    def clipped(v, *duals):
        return tuple(jnp.clip(rate_fn(nu, v.params), v.lo, v.hi) for nu in duals)

    def sums(v, nu):
        return eval_pages(rate_fn, v.params, nu, v.lo, v.hi)[:2]

    dtype = jnp.result_type(budget)
    start = None
    if marginal_fn is not None:
        a, b = bracket_from_marginals(pages, marginal_fn, budget)
    elif len(bracket) == 3:  # a bracket known to hold the root, and where to start in it
        a, b, start = bracket
        start = jax.lax.stop_gradient(jnp.asarray(start, dtype))
    else:
        a, b = expand_bracket(lambda a, b: pages.reduce(clipped, ("sum", "sum"), a, b), budget, bracket[0],
                              bracket[1], loop=pages.loop)
    a = jax.lax.stop_gradient(jnp.asarray(a, dtype))
    b = jax.lax.stop_gradient(jnp.asarray(b, dtype))
    state, log_mode = rootfind.root_init(a, b, start, linear=start is not None)

    def f_and_df(nu):
        s, ds = pages.reduce(sums, ("sum", "sum"), nu)
        return s - budget, ds

    if not unrolled and pages.loop is jax.lax.while_loop and jnp.ndim(state.z) == 0 and max_steps >= 1:
        # the dual the iteration last evaluated, with its residual and slope: no pass for them
        final, residual, ds = rootfind.iterate_evaluated(f_and_df, state, log_mode, rtol * jnp.abs(budget),
                                                         max_steps)
        nu = rootfind.root_value(final, log_mode)
    else:
        if unrolled:
            final = rootfind.iterate_unrolled(f_and_df, state, log_mode, rtol * jnp.abs(budget), max_steps)
        else:
            final = rootfind.iterate(f_and_df, state, log_mode, rtol * jnp.abs(budget), max_steps, loop=pages.loop)
        nu = rootfind.root_value(final, log_mode)
        # the residual at nu (one fused reduction with its slope; a pass of its own name)
        def residual(v, nu):
            return sums(v, nu)

        s, ds = pages.reduce(residual, ("sum", "sum"), nu)
        residual = s - budget
    x = corrected_plan(pages, rate_fn, nu, residual, ds)
    return x, nu, residual, final.done & jnp.isfinite(residual), final.k


def corrected_plan(pages, rate_fn: Callable, nu, residual, slope):
    """The plan at the dual ``nu`` with the closing correction: one Newton step on the free
    pages (``x - c dx``, clipped) that makes the budget hold to rounding, given the sum's
    ``residual`` at ``nu`` and its ``slope`` in the dual.  One pass: the allocation is
    recomputed elementwise from a barrier copy of ``nu`` (so XLA does not materialise ``x``
    and ``dx`` as page-sized temporaries)."""
    sw = -slope
    c = jnp.where(sw > 0, -residual / jnp.where(sw > 0, sw, 1.0), 0.0)
    nu_b, c = jax.lax.optimization_barrier((nu, c))

    def corrected(v, nu, c):
        x, dx, *_ = eval_pages(rate_fn, v.params, nu, v.lo, v.hi)
        return jnp.clip(x - c * dx, v.lo, v.hi)

    return pages.map(corrected, nu_b, c)


def checked(pages, x, budget, residual, converged, rtol: float, *, capped: bool = False):
    """The result, not only the iteration, must be right: the corrected allocation meets the
    budget to the tolerance and is finite (rates are >= 0, so a finite sum means every rate
    is); without host caps the dual the iteration stopped at must itself (nearly) meet it, or
    a bracket a few ulps wide around a jump of the sum (a page whose rate the dtype cannot
    resolve at the dual) would pass through the closing correction as converged.  (With caps
    the residual before the corrections is not a test of the duals.)"""
    total = pages.total(x)
    converged = converged & jnp.isfinite(total) & (jnp.abs(total - budget) <= rtol * jnp.abs(budget))
    if not capped:
        converged = converged & (jnp.abs(residual) <= 4.0 * rtol * jnp.abs(budget))
    return converged


def first_pass(pages, side_fn, side_args, extra_fn, extra_ops) -> tuple:
    """``(side, extra, limits)``: the side statistics of ``side_fn`` (as :func:`solve` takes
    them), ``extra_fn(view) -> values`` reduced by ``extra_ops``, and the pages'
    :func:`limit_stats`, in one pass (for :func:`solve`'s ``limits``); not differentiated."""
    side_ops = side_fn(None)[1]

    def values(v, *a):  # (no tangent enters the reductions)
        return jax.lax.stop_gradient((*side_fn(v, *a)[0], *extra_fn(v), *limit_values(v)))

    out = pages.reduce(values, side_ops + tuple(extra_ops) + LIMIT_OPS, *side_args)
    k, e = len(side_ops), len(extra_ops)
    return out[:k], out[k:k + e], out[k + e:]


def _side_pass(side_fn, side_args, params, lower, upper, n):
    """The side statistics as their own pass (where the search does not fold them in)."""
    if side_fn is None:
        return ()
    pages = ArrayPages(params, lower, upper, n)
    return pages.reduce(lambda v, *a: side_fn(v, *a)[0], side_fn(None)[1], *side_args)


def _solve_plain(rate_fn, marginal_fn, cfg, params, budget, lower, upper, bracket, unrolled, side_args=(),
                 raw=(), limits=None):
    max_steps, _, rtol, side_fn, build = cfg
    probe = bracket[0] if bracket is not None else jnp.ones((), budget.dtype)
    shape = jax.eval_shape(lambda: rate_fn(probe, params)).shape
    shape = jnp.broadcast_shapes(shape, jnp.shape(lower), jnp.shape(upper))
    if build is not None and _search.applies(shape[-1], marginal_fn, unrolled):
        return _solve_fast(rate_fn, marginal_fn, cfg, budget, shape[-1], side_args, raw)
    pages = ArrayPages(params, lower, upper, shape[-1], limits)
    if side_fn is not None and marginal_fn is not None and limits is None:
        # the side statistics and the limits' (for the bracket) in one pass
        side, _, limits = first_pass(pages, side_fn, side_args, lambda v: (), ())
        pages = pages._replace(known_limits=limits)
    else:
        side = _side_pass(side_fn, side_args, params, lower, upper, shape[-1])
    x, nu, residual, converged, steps = plain(pages, rate_fn, marginal_fn, budget, bracket, max_steps, rtol, unrolled)
    return x, nu, None, residual, converged, steps, side


def _solve_fast(rate_fn, marginal_fn, cfg, budget, n, side_args, raw):
    """The budget solve of a large problem by :func:`jaxcrawl._src.search.search` over the
    pages ``build(raw)`` (``cfg``'s builder): a start from a sample's dual, a few
    multi-candidate passes (the side statistics folded into the first), the write with the
    closing correction.  Returns :func:`_solve_plain`'s tuple; the steps are the search's
    passes (the write is one more)."""
    max_steps, _, rtol, side_fn, build = cfg
    m = _search.SAMPLE
    sample = ArrayPages(*build(_search.sample(raw, n, m)), m)
    budget_s = budget * (m / n)

    def eval_fn(v, nu):
        x, dx, *_ = eval_pages(rate_fn, v.params, nu, v.lo, v.hi)
        return x, dx

    if _search.on_host_loops():
        _, nu_s, *_ = plain(sample, rate_fn, marginal_fn, budget_s, None, 40, 1e-3)
        ok = jnp.isfinite(nu_s) & (nu_s > 0)
        z0 = jnp.log(jnp.where(ok, nu_s, 1.0))
    else:  # no loop: the sample's bracket, then a few wide passes over the sample
        a, b = bracket_from_marginals(sample, marginal_fn, budget_s)
        ok = (a > 0) & (b >= a) & jnp.isfinite(b)
        za = jnp.log(jnp.where(ok, a, 1.0))
        zb = jnp.log(jnp.where(ok, b, 1.0))
        z0 = _search.fixed_search(sample, eval_fn, budget_s, za, jnp.maximum(zb, za + 1e-3), 3, 16)
        z0 = jnp.where(ok & jnp.isfinite(z0), z0, 0.0)
    z0 = jax.lax.stop_gradient(z0)
    pages = BuiltPages(build, raw, n)

    state, side = _search.search(pages, eval_fn, budget, z0, max_steps, rtol * jnp.abs(budget),
                                 _search.strategy(), side=side_fn, side_args=side_args,
                                 unroll=_search.backend_unroll())
    nu = jnp.exp(state.z)
    x = corrected_plan(pages, rate_fn, nu, state.f, state.df)
    return x, nu, None, state.f, state.done & jnp.isfinite(state.f), state.k, side


def _solve_capped(rate_fn, marginal_fn, cfg, params, budget, lower, upper, host, cap, side_args=()):
    max_steps, inner_steps, rtol, side_fn, _ = cfg
    dtype = budget.dtype
    n = lower.shape[-1]
    hs = _hosts(host, cap.shape[-1])
    tiny = jnp.finfo(dtype).tiny

    def at(d):
        return eval_pages(rate_fn, params, d, lower, upper)

    def global_parts(nu):
        x, dx, *_ = at(jnp.full((n,), nu, dtype))
        s, ds = hs.sum(x), hs.sum(dx)
        bind = s > cap
        g = jnp.sum(jnp.where(hs.has_host, 0.0, x)) + jnp.sum(jnp.where(bind, cap, s))
        dg = jnp.sum(jnp.where(hs.has_host, 0.0, dx)) + jnp.sum(jnp.where(bind, 0.0, ds))
        return g - budget, dg

    # outer bracket [a, b] with G(a) >= B >= G(b); caps only lower G, so only a may move
    a, b = bracket_from_marginals(ArrayPages(params, lower, upper, n), marginal_fn, budget)
    a = jnp.maximum(jnp.asarray(a, dtype), tiny)
    b = jnp.maximum(jnp.asarray(b, dtype), a)
    a, _ = jax.lax.while_loop(
        lambda s: (global_parts(s[0])[0] < 0) & (s[1] < 64) & (s[0] > 16 * tiny),
        lambda s: (s[0] / 16.0, s[1] + 1), (a, 0))
    state, log_mode = rootfind.root_init(a, b)
    outer = rootfind.iterate(global_parts, state, log_mode, rtol * jnp.abs(budget), max_steps)
    nu = rootfind.root_value(outer, log_mode)

    # inner: every binding host's mu_h = nu + kappa_h, all at once, on [nu, max marginal]
    x_nu, *_ = at(jnp.full((n,), nu, dtype))
    bind = hs.sum(x_nu) > cap
    share = (cap - hs.sum(lower)) / jnp.maximum(hs.sum(jnp.ones((n,), dtype)), 1.0)
    xbar = lower + jnp.where(hs.has_host, share[hs.hidx], 0.0)
    movable = hs.has_host & (xbar < upper)
    m = marginal_fn(jnp.where(movable, xbar, 1.0), params)
    m = jnp.where(movable & jnp.isfinite(m), m, -jnp.inf)
    mu_hi = jax.ops.segment_max(m, hs.seg, num_segments=hs.num + 1)[: hs.num]
    mu_hi = jnp.maximum(jnp.where(jnp.isfinite(mu_hi), mu_hi, nu), nu)
    bind_page = hs.has_host & bind[hs.hidx]

    def inner_f(muh):
        x, dx, *_ = at(jnp.where(bind_page, muh[hs.hidx], nu))
        return hs.sum(x) - cap, hs.sum(dx)

    state_h, log_h = rootfind.root_init(jnp.full((hs.num,), nu), mu_hi, done=~bind)
    inner = rootfind.iterate(inner_f, state_h, log_h, rtol * jnp.where(bind, cap, 1.0), inner_steps)
    mu = jnp.where(bind, rootfind.root_value(inner, log_h), nu)

    x, dx, *_ = at(jnp.where(bind_page, mu[hs.hidx], nu))
    x = _across_jumps(at, hs, outer, log_mode, inner, log_h, bind, bind_page, x, budget, cap,
                      rtol)
    residual = jnp.sum(x) - budget
    r_h = cap - hs.sum(x)

    # closing corrections: each binding host to its cap, the other pages to the budget
    w = -dx
    w_h = hs.sum(jnp.where(bind_page, w, 0.0))
    corr_h = jnp.where(bind & (w_h > 0), r_h / jnp.where(w_h > 0, w_h, 1.0), 0.0)
    x = x + jnp.where(bind_page, corr_h[hs.hidx] * w, 0.0)
    r = budget - jnp.sum(x)
    w_g = jnp.sum(jnp.where(bind_page, 0.0, w))
    corr = jnp.where(w_g > 0, r / jnp.where(w_g > 0, w_g, 1.0), 0.0)
    x = x + jnp.where(bind_page, 0.0, corr * w)
    # The test of the duals (the corrections must not hide a dual that stopped on the wrong
    # side of a page's jump): each binding cap and the budget met before the corrections to
    # the iteration's tolerance, or by a correction that moves the dual by less than its
    # resolution in this dtype (a page so steep there that it takes the rest).
    res_ok = lambda r, target: jnp.abs(r) <= 4.0 * rtol * jnp.abs(target)  # noqa: E731
    ulps = lambda d: 16.0 * jnp.finfo(dtype).eps * jnp.maximum(jnp.abs(jnp.log(d)), 1.0) * d  # noqa: E731
    duals_ok = (res_ok(residual, budget) | (jnp.abs(corr) <= ulps(nu))) & jnp.all(
        ~bind | res_ok(r_h, cap) | (jnp.abs(corr_h) <= ulps(mu)))
    x = jnp.clip(x, lower, upper)
    s = hs.sum(x)
    scale = jnp.where(s > cap, cap / jnp.where(s > 0, s, 1.0), 1.0)
    x = jnp.where(hs.has_host, x * scale[hs.hidx], x)
    kappa = jnp.where(bind, mu - nu, 0.0)
    converged = outer.done & jnp.all(inner.done | ~bind) & jnp.isfinite(residual) & duals_ok
    side = _side_pass(side_fn, side_args, params, lower, upper, n)
    return x, nu, kappa, residual, converged, outer.k + inner.k, side


def _collapsed(state, log_mode, tol_f, f):
    """Where the iteration stopped on a bracket a few ulps wide with ``|f|`` above its
    tolerance: the root lies on a jump of the sum that the dtype cannot resolve."""
    eps = jnp.finfo(state.z.dtype).eps
    width = state.zb - state.za
    return (width <= 8.0 * eps * jnp.maximum(jnp.abs(state.z), 1.0)) & (jnp.abs(f) > tol_f)


def _across_jumps(at, hs, outer, log_mode, inner, log_h, bind, bind_page, x, budget, cap, rtol):
    r"""Where a dual's bracket collapsed on a jump of its sum, the allocation between the
    bracket's ends that meets the target.

    Every rate is nonincreasing in its dual, so with the dual in ``[a, b]`` each page's
    rate lies in ``[x_i(b), x_i(a)]``.  A bracket a few ulps wide whose sums still straddle
    the target by more than the tolerance holds a page whose rate jumps there in this dtype
    (uniform-interval freshness at its threshold falls to 0 like
    :math:`\lambda/\log(1/(1-\nu/m))`: by ~λ/17 within one float32 ulp of the dual).  The
    target is met by ``x(b) + θ (x(a) - x(b))``: the pages that do not jump stay at their
    rate to the dual's resolution, and a single jumping page receives exactly what the
    budget (or its host's cap) leaves — its exact optimum.  Several pages whose jumps fall
    in the same ulps share it in proportion to their jumps (their split is below the
    dtype's resolution of the dual).  Binding hosts first (their caps), then the other
    pages (the budget less the binding caps).  Two extra passes over the pages.
    """
    value = lambda z, lm: jnp.where(lm, jnp.exp(z), z)  # noqa: E731
    nu_a, nu_b = value(outer.za, log_mode), value(outer.zb, log_mode)
    mu_a = jnp.where(bind, value(inner.za, log_h), nu_a)
    mu_b = jnp.where(bind, value(inner.zb, log_h), nu_b)
    x_a = at(jnp.where(bind_page, mu_a[hs.hidx], nu_a))[0]
    x_b = at(jnp.where(bind_page, mu_b[hs.hidx], nu_b))[0]

    def blend(target, lo_sum, hi_sum, go):
        span = hi_sum - lo_sum
        theta = jnp.clip((target - lo_sum) / jnp.where(span > 0, span, 1.0), 0.0, 1.0)
        return go & (span > 0), theta

    # binding hosts: to their caps
    s_h = hs.sum(x)
    go_h = bind & _collapsed(inner, log_h, rtol * cap, s_h - cap)
    go_h, th_h = blend(cap, hs.sum(x_b), hs.sum(x_a), go_h)
    on_h = bind_page & go_h[hs.hidx]
    x = jnp.where(on_h, x_b + th_h[hs.hidx] * (x_a - x_b), x)
    # the other pages: to the budget less what the binding hosts take
    rest = ~bind_page
    target = budget - jnp.sum(jnp.where(rest, 0.0, x))
    s = jnp.sum(jnp.where(rest, x, 0.0))
    go = _collapsed(outer, log_mode, rtol * jnp.abs(budget), s - target)
    go, th = blend(target, jnp.sum(jnp.where(rest, x_b, 0.0)), jnp.sum(jnp.where(rest, x_a, 0.0)), go)
    return jnp.where(rest & go, x_b + th * (x_a - x_b), x)


def _impl(rate_fn, marginal_fn, cfg, params, budget, lower, upper, bracket, hosts, extra, unrolled=False):
    side_args, raw, limits = extra
    if hosts is None:
        out = _solve_plain(rate_fn, marginal_fn, cfg, params, budget, lower, upper, bracket, unrolled, side_args,
                           raw, limits)
    else:
        out = _solve_capped(rate_fn, marginal_fn, cfg, params, budget, lower, upper, *hosts, side_args)
    x, nu, kappa, residual, converged, steps, side = out
    converged = checked(ArrayPages(None, lower, upper, x.shape[-1]), x, budget, residual, converged, cfg[2],
                        capped=hosts is not None)
    shape = jnp.broadcast_shapes(x.shape, jnp.shape(lower), jnp.shape(upper))
    side = tuple(jax.lax.stop_gradient(jnp.asarray(v, jnp.result_type(budget))) for v in side)
    return jnp.broadcast_to(x, shape), nu, kappa, residual, converged, steps.astype(jnp.int32), side


@functools.partial(jax.custom_jvp, nondiff_argnums=(0, 1, 2))
def _solve(rate_fn, marginal_fn, cfg, params, budget, lower, upper, bracket, hosts, extra):
    return _impl(rate_fn, marginal_fn, cfg, params, budget, lower, upper, bracket, hosts, extra)


@_solve.defjvp
def _solve_jvp(rate_fn, marginal_fn, cfg, primals, tangents):
    params, budget, lower, upper, bracket, hosts, extra = primals
    dparams, dbudget, dlower, dupper, _, dhosts, _ = tangents
    out = _solve(rate_fn, marginal_fn, cfg, params, budget, lower, upper, bracket, hosts, extra)
    x, nu, kappa, residual, converged, steps, side = out
    nu = jax.lax.stop_gradient(nu)
    shape = x.shape
    if hosts is None:
        d = nu
        bind_page = jnp.zeros(shape, bool)
    else:
        host, cap = hosts
        hs = _hosts(host, cap.shape[-1])
        kappa = jax.lax.stop_gradient(kappa)
        bind = kappa > 0
        bind_page = hs.has_host & bind[hs.hidx]
        d = jnp.where(bind_page, (nu + kappa)[hs.hidx], nu)
    _, dphi_dd, free, at_lo, at_hi = eval_pages(rate_fn, params, d, jnp.broadcast_to(lower, shape),
                                                jnp.broadcast_to(upper, shape))
    _, dphi_dth = jax.jvp(lambda p: rate_fn(d, p), (params,), (dparams,))
    dphi_dth = jnp.where(free, jnp.broadcast_to(dphi_dth, shape), 0.0)
    dbound = jnp.where(at_lo, jnp.broadcast_to(dlower, shape),
                       jnp.where(at_hi, jnp.broadcast_to(dupper, shape), 0.0))
    fixed = dbound + dphi_dth  # the part of dx that does not move with the duals
    elsewhere = ~bind_page
    num = dbudget - jnp.sum(jnp.where(elsewhere, fixed, 0.0))
    den = jnp.sum(jnp.where(elsewhere, dphi_dd, 0.0))
    if hosts is not None:
        dcap = jnp.where(bind, dhosts[1], 0.0)
        num_h = dcap - hs.sum(jnp.where(bind_page, fixed, 0.0))
        den_h = hs.sum(jnp.where(bind_page, dphi_dd, 0.0))
        dmu = jnp.where(bind & (den_h != 0), num_h / jnp.where(den_h != 0, den_h, 1.0), 0.0)
        num = num - jnp.sum(dcap)
    dnu = jnp.where(den != 0, num / jnp.where(den != 0, den, 1.0), 0.0)
    if hosts is None:
        dd, dkappa = dnu, None
    else:
        dd = jnp.where(bind_page, dmu[hs.hidx], dnu)
        dkappa = jnp.where(bind, dmu - dnu, 0.0)
    dx = jnp.where(free, dphi_dth + dphi_dd * dd, dbound)
    zeros = rootfind.float0_tangents((converged, steps))
    return out, (dx, dnu, dkappa, jnp.zeros_like(residual), *zeros, tuple(jnp.zeros_like(v) for v in side))


# One compilation per (rate_fn, marginal_fn, cfg) and input shapes: eager callers hit the cache.
_solve_jit = jax.jit(_solve, static_argnums=(0, 1, 2))


def solve(rate_fn: Callable, marginal_fn: Callable | None, params: Any, budget: jax.Array, lower: jax.Array,
          upper: jax.Array, *, bracket: tuple | None = None, hosts: tuple | None = None,
          max_steps: int = 100, inner_steps: int = 100, rtol: float | None = None,
          unrolled: bool = False, side: tuple | None = None, built: tuple | None = None,
          limits: tuple | None = None) -> BudgetSolution:
    """Solve one budget problem (no validation: the public wrappers check their inputs).

    ``hosts`` is ``None`` or ``(host, cap)``; ``unrolled=True`` runs exactly ``max_steps``
    iterations in a differentiable scan (the baseline the implicit rule is measured
    against; no host caps).  ``bracket`` is required when ``marginal_fn`` is None.

    ``built = (build, raw)`` (optional): ``build(raw) -> (params, lower, upper)``, the
    same values as the arguments, rebuilt from ``raw`` inside every pass: with it a large
    problem is solved by the search of :mod:`jaxcrawl._src.search` (its duals must be
    positive: the caller's to know), without it by the plain iteration.

    ``side = (side_fn, side_args)`` (optional): statistics of the pages reduced with the
    solve -- ``side_fn(view, *side_args)`` gives ``(values, ops)`` per page (``side_fn(None)``
    must give the ops), folded into the first pass of a large solve
    (:mod:`jaxcrawl._src.search`), their own pass otherwise; returned as ``side``.

    ``limits`` (optional): the pages' :func:`limit_stats` when the caller already reduced
    them (with its own first pass, :func:`first_pass`); the plain solve then takes no pass
    for them.
    """
    if bracket is None:
        bracket = (jnp.ones((), budget.dtype), jnp.ones((), budget.dtype))
    side_fn, side_args = (None, ()) if side is None else side
    build, raw = (None, ()) if built is None else built
    cfg = (int(max_steps), int(inner_steps),
           float(rootfind.default_rtol(budget.dtype) if rtol is None else rtol), side_fn, build)
    if unrolled:
        if hosts is not None:
            raise ValueError("the unrolled adjoint has no host-capped form")
        out = _impl(rate_fn, marginal_fn, cfg, params, budget, lower, upper, bracket, None, (side_args, raw, limits),
                    True)
    else:
        out = _solve_jit(rate_fn, marginal_fn, cfg, params, budget, lower, upper, bracket, hosts,
                         (side_args, raw, limits))
    x, nu, kappa, residual, converged, steps, side_out = out
    return BudgetSolution(x, nu, kappa, jax.lax.stop_gradient(residual), converged, steps, side_out)


def unit_scale(v):
    """``v`` where it is a usable unit (finite and > 0), else 1: the importance and time
    scales of the exact change of units (``utilities.normalising_scales``)."""
    return jnp.where(jnp.isfinite(v) & (v > 0), v, jnp.ones_like(v))


def rescale_dual(dual, a, c):
    """``dual * a / c`` in the order that stays finite (a/c alone may overflow)."""
    first = dual * (a / c)
    second = (dual * a) / c
    return jnp.where(jnp.isfinite(first), first, jnp.where(jnp.isfinite(second), second, (dual / c) * a))
