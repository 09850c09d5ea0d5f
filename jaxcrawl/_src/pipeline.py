r"""The one solve's frame: change units, page limits, checks, the budget root-find, the
log-gap re-solve, the check and the units back.

Every path of :func:`jaxcrawl.solve` runs the same steps -- :func:`jaxcrawl._src.budget.plain`
(bracket, safeguarded Newton iteration, closing correction; from 65,536 pages in memory the
search of :mod:`jaxcrawl._src.search` in its place) and
:func:`jaxcrawl._src.gap.resolve` (log-gap re-solve) -- over a reducer of
:mod:`jaxcrawl._src.passes`: :func:`solve_pages` for pages in memory (one device, sharded over
a mesh, or spread over processes as one global sharded array), and
:func:`jaxcrawl._src.chunks.solve_table` for a table streamed chunk by chunk.  How a pass over
the pages is reduced is the only plug-in.

This module imports nothing public: objectives are duck-typed (``rate``, ``marginal``,
``params``, ``page_bounds``, ``signal_mask``, ``gap``, ``dual``, ``homogeneous``,
``separable``, ``name``) and problems are :class:`Pages` values.
"""
from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from . import budget as _budget
from . import gap as _gap
from . import search as _search
from .checks import is_concrete, raise_unless_converged


class PageSource:
    """Pages that are not one array in memory (a table streamed from disk, rows spread over
    processes): ``solve(objective, caps, bounds, options)`` runs the pipeline over them."""

    def solve(self, obj, caps, bounds, opts):  # pragma: no cover - every source defines it
        raise NotImplementedError


class Options(NamedTuple):
    """The options every path of the solve honours the same way."""

    max_steps: int = 100
    rtol: float | None = None
    adjoint: str = "implicit"
    throw: bool = False


def check_options(max_steps: Any, rtol: Any, adjoint: Any, throw: Any) -> Options:
    """An :class:`Options`, or ``ValueError`` naming the argument and its rule."""
    if isinstance(max_steps, bool) or not isinstance(max_steps, int | np.integer) or max_steps < 1:
        raise ValueError(f"max_steps must be an integer >= 1; got {max_steps!r}")
    if rtol is not None:
        r = float(rtol)
        if not (np.isfinite(r) and 0.0 < r < 1.0):
            raise ValueError(f"rtol must be None or in (0, 1); got {rtol!r}")
        rtol = r
    if adjoint not in ("implicit", "unrolled"):
        raise ValueError(f"adjoint must be 'implicit' or 'unrolled'; got {adjoint!r}")
    if not isinstance(throw, bool | np.bool_):
        raise ValueError(f"throw must be True or False; got {throw!r}")
    return Options(int(max_steps), rtol, str(adjoint), bool(throw))


class Pages(NamedTuple):
    """The fields of a problem an objective's ``params`` reads (a duck-typed problem)."""

    importance: jax.Array
    change_rate: jax.Array
    bandwidth: jax.Array
    complete: jax.Array

    @property
    def dtype(self):
        return self.importance.dtype

    @property
    def num_pages(self) -> int:
        return self.importance.shape[-1]


class Result(NamedTuple):
    """What every path returns (the public face makes it a ``Policy``)."""

    rate: Any
    prob: Any
    on_signal: Any
    dual: Any
    host_dual: Any
    residual: Any
    num_steps: Any
    converged: Any


def probabilities(rate, change_rate, on_signal):
    """``prob``: the chance of crawling a signal-crawled page on each signal (0 elsewhere).
    A scaled-back solve may land one ulp above a page's change rate: capped at 1."""
    return jnp.where(on_signal, jnp.minimum(rate / change_rate, 1.0), jnp.zeros_like(rate))


def unit_scales(max_importance, bandwidth, num_pages):
    """``(a, c)``: the importance and time scales of the exact change of units of a
    homogeneous objective -- the largest importance and the mean rate ``R / n`` (each 1 when
    it is 0 or not finite).  Constants for differentiation: the optimum is equivariant."""
    a = _budget.unit_scale(max_importance)
    c = _budget.unit_scale(jnp.asarray(bandwidth) / num_pages)
    return jax.lax.stop_gradient(a), jax.lax.stop_gradient(c)


def page_limits(obj, params, bandwidth, num_pages, dtype, lower, upper, shape=None):
    """Each page's ``(lower, upper)``: the objective's bounds intersected with the caller's
    (``None``: no bound), broadcast to ``shape`` (``None``: scalars stay scalars, so a solve's
    loops do not carry page-sized constants).

    A caller's floor above the objective's own upper bound (a complete page whose
    ``1/max_interval`` exceeds its change rate) fixes the page at that floor: the objective
    values nothing beyond its bound, so the rate above it is periodic crawls beside the
    signals (``rate - change_rate``), counted in the budget."""
    lo, hi = obj.page_bounds(params, bandwidth, num_pages, dtype)
    if lower is not None:
        floor = jnp.asarray(lower, dtype)
        lo, hi = jnp.maximum(lo, floor), jnp.maximum(hi, floor)
    if upper is not None:
        hi = jnp.minimum(hi, jnp.asarray(upper, dtype))
    if shape is None:
        return lo, hi
    return jnp.broadcast_to(lo, shape), jnp.broadcast_to(hi, shape)


# ------------------------------------------------------------------ pages in memory
def check_feasible(budget, lower, upper, host=None, cap=None, dtype=None, page_id=None) -> None:
    """Eager checks of one problem's limits (concrete values): ``lower <= upper``, the budget
    within ``[sum(lower), sum(upper)]``, and with host caps every cap above its pages'
    floors and the budget within what the caps allow.  ``dtype``: the solve's (default:
    the limits'), for the hint to solve in float64 when a refusal is within its rounding.
    ``page_id``: the pages' ids, to name a page and a host (by a page of it: its URL's host)
    in the messages instead of their indices."""
    dtype = np.result_type(np.asarray(lower), np.asarray(upper)) if dtype is None else np.dtype(dtype)
    lo = np.asarray(lower, np.float64)
    hi = np.asarray(upper, np.float64)
    b = float(budget)
    if not np.isfinite(b):
        raise ValueError(f"bandwidth must be finite; got {b}")
    if np.any(np.isnan(lo)) or np.any(np.isnan(hi)):
        raise ValueError("bounds must not be NaN")
    if np.any(lo > hi):
        idx = int(np.flatnonzero(np.ravel(lo > hi))[0])
        raise ValueError(f"bounds: lower must be <= upper for every page; {_page_label(page_id, idx)} has "
                         f"lower {float(np.ravel(lo)[idx])!r} > upper {float(np.ravel(hi)[idx])!r} (its revisit "
                         "bounds, or an "
                         "upper bound below the objective's own floor, e.g. binary-epsilon's epsilon R / n)"
                         + (f" -- {int(np.sum(lo > hi))} such pages" if np.sum(lo > hi) > 1 else ""))
    if host is None:
        if b < lo.sum() * (1 - 1e-12) or b > hi.sum() * (1 + 1e-12):
            hint = (rounding_hint(dtype, lo.sum(), b, lo.size) if b < lo.sum()
                    else rounding_hint(dtype, b, hi.sum(), hi.size))
            raise ValueError(f"bandwidth {b} is infeasible: it must lie in [sum(lower), sum(upper)] = "
                             f"[{lo.sum()}, {hi.sum()}] (the pages' rate bounds)" + hint)
        return
    hid = np.asarray(host)
    c = np.asarray(cap, np.float64)
    H = c.shape[-1]
    has = hid >= 0
    lo_h = np.bincount(hid[has], weights=lo[has], minlength=H)
    hi_h = np.bincount(hid[has], weights=hi[has], minlength=H)
    if np.any(lo_h > c * (1 + 1e-12)):
        h = int(np.flatnonzero(lo_h > c * (1 + 1e-12))[0])
        raise ValueError(f"caps: the cap {float(c[h])!r} of {_host_label(page_id, hid, h)} is below the sum of its "
                         f"{int(np.sum(hid == h))} pages' lower bounds {float(lo_h[h])!r} (their revisit floors, "
                         "or the objective's, e.g. BLC-epsilon floors): infeasible"
                         + rounding_hint(dtype, lo_h[h], c[h], np.sum(hid == h)))
    most = np.sum(np.where(has, 0.0, hi)) + np.sum(np.minimum(c, hi_h))
    if b > most * (1 + 1e-12):
        raise ValueError(f"bandwidth {b!r} exceeds the most the host caps allow ({most!r}: uncapped pages' "
                         "upper bounds plus each host's min(cap, sum of its pages' upper bounds)); lower the "
                         "bandwidth or raise the caps" + rounding_hint(dtype, b, most, lo.size))
    if b < np.sum(lo) * (1 - 1e-12):
        raise ValueError(f"bandwidth {b!r} is below the sum of the lower bounds {float(np.sum(lo))!r}"
                         + rounding_hint(dtype, np.sum(lo), b, lo.size))


def _page_label(page_id, i: int) -> str:
    """``page 'ID'`` (``page I`` without ids)."""
    if page_id is None:
        return f"page {i}"
    p = np.asarray(page_id, object).reshape(-1)[i]
    return f"page {(p.item() if hasattr(p, 'item') else p)!r}"


def _host_label(page_id, host, h: int) -> str:
    """A host named by its first page: ``host 'example.com' (of page 'ID')``, ``the host of
    page 'ID'`` when the page id is not a URL (``host H`` without ids)."""
    if page_id is None:
        return f"host {h}"
    from .hostmap import url_host  # the host rule; imported on a refusal only

    i = int(np.flatnonzero(np.asarray(host) == h)[0])
    page = _page_label(page_id, i)
    try:
        name = url_host(str(np.asarray(page_id, object).reshape(-1)[i]))
    except ValueError:
        name = None
    return f"host {name!r} (of {page})" if name else f"the host of {page}"


def rounding_hint(dtype, larger, smaller, count) -> str:
    """A hint to solve in float64 when ``larger > smaller`` by no more than the rounding of
    ``count`` values to ``dtype`` and their sum (``(count + 1)`` ulps, relative): in float64
    the two may well be equal (e.g. a cap set to the sum of its pages' floors)."""
    if not np.issubdtype(dtype, np.floating) or np.finfo(dtype).bits >= 64:
        return ""
    if larger - smaller > (int(count) + 1) * np.finfo(dtype).eps * abs(smaller):
        return ""
    name = np.dtype(dtype).name
    return (f" -- {name} rounding makes it infeasible (it is off by no more than the rounding of the inputs to "
            f"{name} and of their sum): solve in float64; --x64 on the command line (jax_enable_x64 and float64 "
            "arrays in Python) solves it when the inputs themselves are feasible")


def check_caps(host, cap, num_pages) -> None:
    """Eager checks of host ids and caps (concrete values)."""
    hid = np.asarray(host)
    c = np.asarray(cap, np.float64)
    if hid.shape != (num_pages,):
        raise ValueError(f"caps: host_id must have shape ({num_pages},) (one host per page); got {hid.shape}")
    if not np.issubdtype(hid.dtype, np.integer):
        raise ValueError(f"caps: host_id must be an integer array; got dtype {hid.dtype}")
    if c.ndim < 1:
        raise ValueError("caps: cap must be an array with one cap per host (last axis)")
    H = c.shape[-1]
    if np.any(hid < -1) or np.any(hid >= H):
        bad = hid[(hid < -1) | (hid >= H)][0]
        raise ValueError(f"caps: host_id must be -1 (no host) or in [0, {H}) for {H} caps; found {bad}")
    if np.any(np.isnan(c)) or np.any(c <= 0):
        raise ValueError("caps: cap must be > 0 for every host (inf = uncapped); found "
                         f"{c[np.isnan(c) | (c <= 0)].ravel()[0]!r}")


def solve_pages(obj, pages: Pages, lower, upper, host, cap, opts: Options, *, valid=None,
                num_pages: int | None = None) -> Result:
    """One problem whose pages are arrays (``(n,)``; under ``jit``, ``vmap``, sharded).

    ``lower``/``upper``: the caller's extra rate bounds (``None``: none); ``host``/``cap``:
    host caps (``None``: none); ``valid``: False on padding rows (pinned at rate 0, never a
    log-gap origin); ``num_pages``: the page count for bounds that depend on it (default:
    the array length).  Validation is the caller's (eager, before this)."""
    dtype = pages.importance.dtype
    shape = pages.importance.shape
    n = shape[-1] if num_pages is None else num_pages
    budget = jnp.asarray(pages.bandwidth, dtype)
    a = c = jnp.ones((), dtype)
    # a large solve (the search of jaxcrawl._src.search) takes its importance unit from its
    # sample (any positive unit is exact) and folds the checks into its first pass
    # (homogeneous objectives: every built-in; their duals are positive, as the search's
    # log-dual needs -- another objective may have a dual <= 0 and keeps the plain iteration)
    fast = (_search.applies(shape[-1], obj.marginal, opts.adjoint == "unrolled") and host is None
            and obj.homogeneous)
    raw = (pages.importance, pages.change_rate, pages.complete, a, c, budget, lower, upper, valid)
    build = _builder(obj, n, tuple(v is None for v in raw[6:]), valid is not None or host is not None)
    raw = tuple(v for v in raw if v is not None)
    gap = obj.gap if obj.separable else None
    if gap is not None and valid is not None:
        gap = _gap.masked(gap)
    side_args = (pages.importance, pages.change_rate, lower, upper, valid)
    side_fn = _side_fn(None if gap is None else gap.top, tuple(v is None for v in side_args))
    side_args = tuple(v for v in side_args if v is not None)
    side = limits = None  # the side statistics and the limits' when reduced before the solve
    if obj.homogeneous:
        imp = pages.importance if valid is None else jnp.where(valid, pages.importance, 0.0)
        c = unit_scales(1.0, budget, n)[1]
        if fast:
            big = _search.sample_scale(imp, shape[-1])
        elif host is None and obj.marginal is not None:
            # one pass over the pages built in importance unit 1 (a homogeneous objective's
            # limits do not depend on that unit) gives the side statistics, the limits and the
            # unit; a log marginal at zero moves by -log(a) with it
            raw1 = raw[:3] + (jnp.ones((), dtype), c) + raw[5:]
            side, (big,), limits = _budget.first_pass(_budget.ArrayPages(*build(raw1), shape[-1]), side_fn,
                                                      side_args, lambda v: (jnp.abs(imp),), ("max",))
        else:
            big = jnp.max(jnp.abs(imp))
        a = unit_scales(big, budget, n)[0]
        raw = raw[:3] + (a, c) + raw[5:]
        if side is not None and gap is not None:
            side = side[:-1] + (side[-1] - jnp.log(a),)
    params, lo, hi = build(raw)
    bracket = None
    if obj.marginal is None:
        if obj.bracket is None:
            raise ValueError(f"objective {obj.name!r} needs marginal or bracket")
        bracket = obj.bracket(params, budget / c)
    rate_fn, marginal_fn = obj.rate, obj.marginal
    if gap is not None and valid is not None:
        rate_fn, marginal_fn = _on_first(rate_fn), _on_first(marginal_fn)
    hosts = None
    if host is not None:
        hosts = (jnp.asarray(host, jnp.int32), jnp.asarray(cap, dtype) / c)
    sol = _budget.solve(rate_fn, marginal_fn, params, budget / c, lo, hi, bracket=bracket, hosts=hosts,
                        max_steps=opts.max_steps, inner_steps=opts.max_steps, rtol=opts.rtol,
                        unrolled=opts.adjoint == "unrolled", side=None if limits is not None else (side_fn, side_args),
                        built=(build, raw) if fast else None, limits=limits)
    if limits is not None:
        sol = sol._replace(side=side)
    ok_inputs = _inputs_ok(sol.side, lower is not None or upper is not None, budget)
    if gap is not None and hosts is None:
        gopts = (("adjoint", opts.adjoint), ("max_steps", opts.max_steps), ("rtol", opts.rtol))
        x, dual, residual, steps, converged = _gap.refine(
            gap, gopts, params, budget / c, lo, hi, sol.x, sol.dual, sol.residual, sol.num_steps, sol.converged,
            top_max=sol.side[-1], built=(build, raw) if fast else None)
        kappa = None
    elif gap is not None:
        sol = _capped_gap(gap, (opts.max_steps, opts.rtol), params, budget / c, lo, hi, *hosts, sol._replace(side=()))
        x, dual, kappa, residual, steps, converged = sol.x, sol.dual, sol.host_dual, sol.residual, \
            sol.num_steps, sol.converged
    else:
        x, dual, kappa, residual, steps, converged = sol.x, sol.dual, sol.host_dual, sol.residual, \
            sol.num_steps, sol.converged
    converged = converged & ok_inputs
    if opts.throw:
        raise_unless_converged(f"solve({obj.name!r})", converged, steps, residual)
    raw_params = params[0] if gap is not None and valid is not None else params
    if obj.dual is not None:
        dual = obj.dual(dual, raw_params)
    on_signal = obj.signal_mask(raw_params, shape)
    if valid is not None:
        on_signal = on_signal & valid
    rate = x * c
    host_dual = None if kappa is None else _budget.rescale_dual(kappa, a, c)
    return Result(rate, probabilities(rate, pages.change_rate, on_signal), on_signal,
                  _budget.rescale_dual(dual, a, c), host_dual, residual * c,
                  jax.lax.stop_gradient(steps), converged)


@functools.cache
def _builder(obj, n: int, absent: tuple, shaped: bool):
    """``build(raw) -> (params, lower, upper)`` of a solve in its units, from ``raw`` =
    ``(importance, change_rate, complete, a, c, bandwidth)`` and those of the caller's
    ``(lower, upper, valid)`` that are not ``absent``; ``shaped``: the limits page-sized
    (padding rows or host caps).  One function (cached per objective and shape of the
    call): the solve builds its arguments with it, and a large solve rebuilds them inside
    every pass instead of writing them between passes."""

    def build(raw):
        imp, lam, comp, a, c, budget, *rest = raw
        it = iter(rest)
        lower, upper, valid = (None if gone else next(it) for gone in absent)
        dtype = imp.dtype
        params = obj.params(Pages(imp / a, lam / c, budget / c, comp))
        div = lambda v: None if v is None else jnp.asarray(v, dtype) / c  # noqa: E731
        lo, hi = page_limits(obj, params, budget / c, n, dtype, div(lower), div(upper),
                             imp.shape if shaped else None)
        if valid is not None:
            lo, hi = jnp.where(valid, lo, 0.0), jnp.where(valid, hi, 0.0)
            if obj.separable and obj.gap is not None:
                params = (params, valid)
        return params, lo, hi

    return build


@functools.cache
def _side_fn(top, absent: tuple):
    """The statistics every in-memory solve reduces with its first pass: the extremes of the
    importance and change rates and the least width of the bounds (the test of
    :func:`_inputs_ok`) and, for a GapForm objective, the
    largest log marginal at zero of the pages (the log-gap re-solve's test).  ``absent``:
    which of ``(importance, change_rate, lower, upper, valid)`` are not passed."""
    has_bounds = not (absent[2] and absent[3])
    ops = ("min", "max", "min", "max") + (("min",) if has_bounds else ()) + (() if top is None else ("max",))

    def side(view, *args):
        if view is None:
            return None, ops
        it = iter(args)
        imp, lam, lower, upper, valid = (None if gone else next(it) for gone in absent)
        if valid is not None:  # padding rows count as valid
            imp, lam = jnp.where(valid, imp, 1.0), jnp.where(valid, lam, 1.0)
        # extremes only (a NaN propagates through min and max): plain reductions of the
        # inputs, no per-page mask written
        out = (imp, imp, lam, lam)
        if has_bounds:
            lo = jnp.zeros((), imp.dtype) if lower is None else jnp.asarray(lower, imp.dtype)
            hi = jnp.full((), jnp.inf, imp.dtype) if upper is None else jnp.asarray(upper, imp.dtype)
            width = jnp.broadcast_to(hi - lo, imp.shape)
            out = out + ((width if valid is None else jnp.where(valid, width, 0.0)),)
        if top is not None:
            # (with padding rows, the masked GapForm's: -inf on them)
            t = top(view.params)
            out = out + (jnp.where(jnp.isfinite(t), t, -jnp.inf),)
        return out, ops

    return side


def _inputs_ok(side, has_bounds, budget):
    """In-graph: are the inputs a problem?  Importance and change rates finite and > 0, the
    bandwidth finite and > 0 and, with bounds, ``upper - lower >= 0`` everywhere (False for a
    NaN anywhere), from the statistics of :func:`_side_fn`.  The eager checks refuse such
    inputs by name; under ``jit`` a solve of them reports ``converged=False`` through this
    (no host round trip)."""
    imp_min, imp_max, lam_min, lam_max = side[:4]
    ok = (imp_min > 0) & (imp_max < jnp.inf) & (lam_min > 0) & (lam_max < jnp.inf)
    if has_bounds:
        ok = ok & (side[4] >= 0)
    return ok & jnp.isfinite(budget) & (budget > 0)


@functools.cache
def _on_first(fn):
    """``fn`` on params ``(params, valid)`` (the padding mask travels with the params for the
    masked log-gap form); cached, so one compilation per objective."""
    if fn is None:
        return None
    return lambda v, p: fn(v, p[0])


def _capped_gap(gap, cfg, params, budget, lo, hi, host, cap, sol):
    """The log-gap fallback of a capped solve: decided on the host for an eager solve
    (nothing compiled when not needed), inside the program under a trace."""
    if is_concrete(sol, params, budget, lo, hi, cap):
        if not bool(np.asarray(_gap.capped_needed(gap, params, host, cap, sol))):
            return sol
    return _gap.capped_fallback(gap, cfg, params, budget, lo, hi, host, cap, sol)
