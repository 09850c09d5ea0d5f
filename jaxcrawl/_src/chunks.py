"""The one solve over pages streamed chunk by chunk (a table on disk, one or several processes).

The steps of :func:`jaxcrawl._src.pipeline.solve_pages` -- the exact change of units, the
pages' limits, the bracket from the marginals at a feasible point, the safeguarded Newton
iteration of :mod:`jaxcrawl._src.rootfind` (``root_init`` / ``root_update``), the residual
before the closing correction, the log-gap re-solve from an origin page
(:mod:`jaxcrawl._src.gap`), the closing correction and the checks -- with each pass over
the pages a host loop over chunks: every chunk's partial sums (one jitted program, chunks
padded to one size) are added on the host and, across processes, combined by ``comm``
(exact all-gathers reduced in process order, so every process takes the same steps).
Memory is O(chunk); each pass reads the table once.
"""
from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from . import budget as _budget
from . import gap as _gap
from . import rootfind
from .pipeline import Pages


class Comm(NamedTuple):
    """How a streamed solve combines host values across processes (identity for one)."""

    multi: bool
    add: Any        # list of floats -> their sums over processes
    big: Any        # list of floats -> their maxima over processes
    allgather: Any  # array -> stacked over processes
    barrier: Any    # name -> None
    process_index: int


class Chunked(NamedTuple):
    """The streamed solve's result, in the caller's units (``rate``: this process's rows)."""

    rate: Any
    prob: Any
    on_signal: Any
    dual: float
    residual: float
    num_steps: int
    num_passes: int
    converged: bool
    start: int


def _pad(a, size, fill):
    if a.shape[0] == size:
        return a
    return np.concatenate([a, np.full(size - a.shape[0], fill, dtype=a.dtype)])


def _row_chunks(table, chunk_size: int, start: int, stop: int):
    for a in range(start, stop, chunk_size):
        b = min(a + chunk_size, stop)
        yield (a, np.asarray(table.importance[a:b]), np.asarray(table.change_rate[a:b]),
               np.asarray(table.complete[a:b]).astype(bool))


def _log(v: float) -> float:
    return float(np.log(v)) if v > 0 else -np.inf


def _best(pair: tuple[float, int], comm, pick) -> tuple[float, int]:
    """The ``(value, global row)`` pair with the largest (``pick=max``) or smallest
    (``pick=min``) value over the processes (ties: the lowest process)."""
    if not comm.multi:
        return pair
    g = comm.allgather(np.asarray(pair, np.float64))
    j = int(np.argmax(g[:, 0]) if pick is max else np.argmin(g[:, 0]))
    return float(g[j, 0]), int(g[j, 1])


class _GapFound(NamedTuple):
    nu: float
    residual: float
    slope: float
    converged: bool
    steps: int
    passes: int
    write: Any


def _stream_gap_solve(gap, table, n, size, load, chunk_parts, row_chunks, add, comm, budget, nu, residual,
                      t_top, k_top, max_steps, tol, dtype) -> _GapFound:
    """:func:`jaxcrawl.solve`'s log-gap re-solve (``_src/gap.py``), chunk by chunk: the budget
    solve on ``tau = -log log(m_k / nu)`` from an origin page ``k`` -- the page whose marginal
    at zero is nearest above the plain dual, or the top page (first when the plain dual sits
    at the top page's marginal or did not converge), the other origin when the first fails.
    Every pass reads the table once; the origin's row is read on its own.  ``tol``: the
    plain solve's absolute budget tolerance."""
    grate = _gap.gap_rate_function(gap)
    budget_f = float(budget)
    counts = [0, 0]  # passes, steps

    @jax.jit
    def own_of(m, l, c):
        params, _, _ = chunk_parts(m, l, c)
        own = jax.tree_util.tree_map(lambda v: jnp.asarray(v)[..., 0], params)
        return own, gap.top(own)

    def rates(m, l, c, valid, pos, own, big, t0, s):
        params, lo, hi = chunk_parts(m, l, c)
        live = valid & jnp.isfinite(gap.top(params))
        d = _gap.log_ratios(gap, params, own, big, live, jnp.arange(m.shape[0]) == pos)
        return _budget.eval_pages(grate, (params, d, t0), s, lo, hi)[:2] + (lo, hi)

    @jax.jit
    def sums(m, l, c, valid, pos, own, big, t0, s):
        x, dx, _, _ = rates(m, l, c, valid, pos, own, big, t0, s)
        return jnp.sum(jnp.where(valid, x, 0.0)), jnp.sum(jnp.where(valid, dx, 0.0))

    @jax.jit
    def final(m, l, c, valid, pos, own, big, t0, s, factor):
        x, dx, lo, hi = rates(m, l, c, valid, pos, own, big, t0, s)
        return jnp.clip(x + factor * dx, lo, hi)

    @jax.jit
    def nearest(m, l, c, valid, log_nu):
        params, _, _ = chunk_parts(m, l, c)
        top = gap.top(params)
        t = jnp.where(valid & jnp.isfinite(top) & _gap.at_or_above(top, log_nu), top, jnp.inf)
        return jnp.min(t), jnp.argmin(t)

    def pos_in(k, start):
        return jnp.asarray(k - start if 0 <= k - start < size else -1, jnp.int32)

    def total(k, own, big, t0, s, label):
        f = df = 0.0
        for chunk in row_chunks(label):
            start, _, m, l, c, valid = load(chunk)
            s_, ds = sums(m, l, c, valid, pos_in(k, start), own, big, t0, jnp.asarray(s, dtype))
            f, df = f + float(s_), df + float(ds)
        counts[0] += 1
        f, df = add([f, df])
        return float(f), float(df)

    def nearest_page():
        best = (np.inf, -1)
        log_nu = jnp.asarray(_log(nu), dtype)
        for chunk in row_chunks("log-gap origin"):
            start, _, m, l, c, valid = load(chunk)
            t, i = nearest(m, l, c, valid, log_nu)
            if float(t) < best[0]:
                best = (float(t), start + int(i))
        counts[0] += 1
        t, k = _best(best, comm, min)
        return k if np.isfinite(t) else k_top

    def attempt(k):
        _, _, m, l, c, _ = load(next(_row_chunks(table, size, k, k + 1)))
        own, big = own_of(m, l, c)
        a, b = _gap.origin_bracket(gap, own, budget, n)
        # iterate on s = tau - t0 (as _src/gap.gap_allocation: linear, not log, mode)
        t0 = a
        a, b = 0.0, float(b - t0)
        # widen until total(a) >= budget >= total(b), as _budget.expand_bracket (a pass a test)
        for _ in range(64):
            if total(k, own, big, t0, a, "log-gap bracket")[0] >= budget_f:
                break
            a = a / 4.0 if a > 0 else a - 2.0 * max(abs(b - a), 1.0)
        for _ in range(64):
            if total(k, own, big, t0, b, "log-gap bracket")[0] <= budget_f:
                break
            b = b * 4.0 if b > 0 else b + 2.0 * max(abs(b - a), 1.0)
        state, log_mode = rootfind.root_init(jnp.asarray(a, dtype), jnp.asarray(b, dtype))
        start_steps = counts[1]
        while not bool(state.done) and int(state.k) < max_steps:
            s = rootfind.root_value(state, log_mode)
            f, df = total(k, own, big, t0, s, f"log-gap step {int(state.k) + 1}")
            state = rootfind.root_update(state, jnp.asarray(f - budget_f, dtype), jnp.asarray(df, dtype),
                                         log_mode, tol)
        counts[1] = start_steps + int(state.k)
        s = rootfind.root_value(state, log_mode)
        f, df = total(k, own, big, t0, s, "log-gap residual")
        res = f - budget_f

        def write(start, m, l, c, *, factor):
            valid = jnp.ones(m.shape, bool)
            return final(m, l, c, valid, pos_in(k, start), own, big, t0, s, factor)

        ok = bool(state.done) and bool(np.isfinite(res)) and abs(res) <= 4.0 * tol
        return _GapFound(float(_gap.dual_of(big, s + t0)), res, df, ok, 0, 0, write)

    top_first = not (t_top - _log(nu) >= _gap.TOP_FIRST) or not np.isfinite(residual)
    first_k = k_top if top_first else nearest_page()
    found = attempt(first_k)
    if not found.converged:
        other = nearest_page() if top_first else k_top
        if other != first_k:
            found = attempt(other)
    return found._replace(steps=counts[1], passes=counts[0])


def solve_chunks(table, bandwidth, utility, dtype, n, comm, first, last, size, budget, min_rate, max_rate,
                   out_path, max_steps, rtol, bar, add, big_, tscale):
    """The passes of :func:`solve_table` over the table (``bar`` advances by chunk), in
    units where rates are divided by ``tscale`` and importances by the largest one (found
    by the first pass; page bounds of a homogeneous utility do not depend on it)."""
    iscale = [1.0]

    def units(v, scale):
        return v if scale == 1.0 else np.asarray(v, np.float64) / scale

    def row_chunks(label):
        bar.set_description(f"stream_solve: {label}", refresh=False)
        for chunk in _row_chunks(table, size, first, last):
            yield chunk
            bar.update(1)

    extra = [None if b is None else (np.asarray(b, np.float64) if np.ndim(b) == 0 else b)
             for b in (min_rate, max_rate)]
    for name, b in zip(("min_rate", "max_rate"), extra):
        if b is not None and np.ndim(b) and np.shape(b) != (n,):
            raise ValueError(f"{name} must be a scalar or have shape ({n},); got {np.shape(b)}")

    def bound_chunk(b, start, k, fill):
        if b is None:
            return None
        part = np.broadcast_to(b, (k,)) if np.ndim(b) == 0 else np.asarray(b[start:start + k], np.float64)
        return jnp.asarray(_pad(np.asarray(part, np.float64) / tscale, size, fill), dtype)

    def load(chunk):
        start, m, l, c = chunk
        k = m.shape[0]
        bounds = (bound_chunk(extra[0], start, k, 0.0), bound_chunk(extra[1], start, k, np.inf))
        return (start, k, jnp.asarray(_pad(units(m, iscale[0]), size, 1.0), dtype),
                jnp.asarray(_pad(units(l, tscale), size, 1.0), dtype),
                (jnp.asarray(_pad(c, size, False)), bounds), jnp.asarray(np.arange(size) < k))

    def chunk_parts(m, l, cb):
        c, (b_lo, b_hi) = cb
        params = utility.params(Pages(m, l, budget, c))
        lo, hi = utility.page_bounds(params, budget, n, dtype)
        lo, hi = jnp.broadcast_to(lo, m.shape), jnp.broadcast_to(hi, m.shape)
        if b_lo is not None:
            lo = jnp.maximum(lo, b_lo)
        if b_hi is not None:
            hi = jnp.minimum(hi, b_hi)
        return params, lo, hi

    @jax.jit
    def stats(m, l, c, valid):
        _, lo, hi = chunk_parts(m, l, c)
        width = hi - lo
        finite = jnp.isfinite(width) & valid
        return (jnp.sum(jnp.where(finite, width, 0.0)), jnp.sum((~finite) & valid),
                jnp.max(jnp.where(finite, width, 0.0)), jnp.sum(jnp.where(valid & jnp.isfinite(hi), hi, 0.0)),
                jnp.sum(jnp.where(valid, lo, 0.0)),
                jnp.argmax(valid & (lo > hi)), jnp.any(valid & (lo > hi)), jnp.max(jnp.where(valid, m, 0.0)))

    gap = utility.gap

    @jax.jit
    def bracket(m, l, c, valid, slack, big, total):
        params, lo, hi = chunk_parts(m, l, c)
        width = hi - lo
        xbar = lo + slack * jnp.where(jnp.isfinite(width), width, big) / total
        a, b = _budget.marginal_range(utility.marginal, params, xbar, valid & (width > 0))
        if gap is None:
            return a, b, -jnp.inf, 0
        top = jnp.where(valid, gap.top(params), -jnp.inf)  # the log marginals at zero (GapForm)
        return a, b, jnp.max(top), jnp.argmax(top)

    @jax.jit
    def sums(m, l, c, valid, nu):
        params, lo, hi = chunk_parts(m, l, c)
        x, dx, *_ = _budget.eval_pages(utility.rate, params, nu, lo, hi)
        return jnp.sum(jnp.where(valid, x, 0.0)), jnp.sum(jnp.where(valid, dx, 0.0))

    @jax.jit
    def signals(m, l, c):
        params, _, _ = chunk_parts(m, l, c)
        return utility.signal_mask(params, m.shape)

    @jax.jit
    def _final(m, l, c, nu, factor):
        params, lo, hi = chunk_parts(m, l, c)
        x, dx, *_ = _budget.eval_pages(utility.rate, params, nu, lo, hi)
        return jnp.clip(x + factor * dx, lo, hi)

    def final(start, m, l, c, *, nu, factor):
        return _final(m, l, c, nu, factor)

    def total_sums(nu, label):
        f = df = 0.0
        for chunk in row_chunks(label):
            _, _, m, l, c, valid = load(chunk)
            s_, ds = sums(m, l, c, valid, nu)
            f, df = f + float(s_), df + float(ds)
        f, df = add([f, df])
        return float(f), float(df)

    passes = 0
    sw = ninf = mw = su = sl = top = 0.0
    for chunk in row_chunks("bounds"):
        start, _, m, l, c, valid = load(chunk)
        a, b_, cmax, d, e, first_bad, any_bad, mmax = stats(m, l, c, valid)
        top = max(top, float(mmax))
        if bool(any_bad):
            raise ValueError(f"page {start + int(first_bad)}: its lower rate bound exceeds its upper "
                             "bound (min_rate > max_rate, or above a complete page's change rate)")
        sw, ninf, mw, su, sl = sw + float(a), ninf + float(b_), max(mw, float(cmax)), su + float(d), sl + float(e)
    sw, ninf, su, sl = (float(v) for v in add([sw, ninf, su, sl]))
    mw, top = (float(v) for v in big_([mw, top]))
    passes += 1
    if utility.homogeneous and np.isfinite(top) and top > 0:
        iscale[0] = top  # from now on, importances in units of the largest
    if ninf == 0 and float(budget) >= su:
        raise ValueError(f"bandwidth {bandwidth} exceeds what the problem can use ({su * tscale}): every page "
                         "is bounded above (e.g. every page is complete)")
    if float(budget) < sl * (1 - 1e-12):
        raise ValueError(f"bandwidth {bandwidth} is below the sum of the pages' lower bounds ({sl * tscale})")

    slack = float(budget) - sl
    big = max(slack, mw) if max(slack, mw) > 0 else 1.0
    total = sw + ninf * big
    lo_nu, hi_nu = np.inf, -np.inf
    highest = (-np.inf, -1)  # the largest log marginal at zero and its page (GapForm utilities)
    for chunk in row_chunks("bracket"):
        start, _, m, l, c, valid = load(chunk)
        a, b_, t, i = bracket(m, l, c, valid, slack, big, total)
        lo_nu, hi_nu = min(lo_nu, float(a)), max(hi_nu, float(b_))
        if float(t) > highest[0]:
            highest = (float(t), start + int(i))
    lo_nu, hi_nu = (float(v) for v in big_([-lo_nu, hi_nu]) * np.array([-1.0, 1.0]))
    passes += 1
    if not (np.isfinite(lo_nu) and np.isfinite(hi_nu)):
        lo_nu = hi_nu = 1.0
    state, log_mode = rootfind.root_init(jnp.asarray(lo_nu, dtype), jnp.asarray(hi_nu, dtype))
    tol = (rootfind.default_rtol(dtype) if rtol is None else rtol) * float(budget)
    while not bool(state.done) and int(state.k) < max_steps:
        nu = rootfind.root_value(state, log_mode)
        f, df = total_sums(nu, f"step {int(state.k) + 1}")
        passes += 1
        bar.set_postfix(budget_off=f"{(f - float(budget)) / float(budget):.1e}", refresh=False)
        state = rootfind.root_update(state, jnp.asarray(f - float(budget), dtype), jnp.asarray(df, dtype),
                                     log_mode, tol)
    nu = rootfind.root_value(state, log_mode)
    # the sums at the final dual: the residual before the closing correction
    f, df = total_sums(nu, "residual")
    passes += 1
    residual = f - float(budget)
    # as jaxcrawl.allocate: the dual the iteration stopped at must itself (nearly) meet the
    # budget, or the closing correction would pass off a bracket collapsed on a jump of the
    # sum (uniform freshness far below the change rates: 1e10 of the budget) as converged
    converged = bool(state.done) and bool(np.isfinite(residual)) and abs(residual) <= 4.0 * tol
    steps = int(state.k)
    write = functools.partial(final, nu=nu)
    if gap is not None:
        t_top, k_top = _best(highest, comm, max)
        if not converged or not (t_top - _log(float(nu)) >= _gap.SWITCH):
            found = _stream_gap_solve(gap, table, n, size, load, chunk_parts, row_chunks, add, comm, budget,
                                      float(nu), residual, t_top, k_top, max_steps, tol, dtype)
            passes += found.passes
            steps += found.steps
            if found.converged or not converged:  # the plain answer stands where the re-solve fails
                nu, residual, df, converged = found.nu, found.residual, found.slope, found.converged
                write = found.write
    factor = -residual / df if df < 0 else 0.0  # x + factor*dx == x + r * w / sum(w), w = -dx
    if out_path and comm.multi:  # process 0 creates the file, then every process writes its rows
        if comm.process_index == 0:
            np.lib.format.open_memmap(out_path, mode="w+", dtype=dtype, shape=(n,)).flush()
        comm.barrier("jaxcrawl.stream_solve.create")
        full = np.lib.format.open_memmap(out_path, mode="r+")
        out = full[first:last]
    else:
        out = (np.lib.format.open_memmap(out_path, mode="w+", dtype=dtype, shape=(n,)) if out_path
               else np.empty(last - first, dtype=dtype))
    # in memory (no out_path), the pages crawled on their signals and their probabilities too
    signal = None if out_path else np.zeros(last - first, bool)
    prob = None if out_path else np.zeros(last - first, dtype)
    written = 0.0
    for chunk in row_chunks("writing rates"):
        start, k, m, l, c, valid = load(chunk)
        x = np.asarray(write(start, m, l, c, factor=jnp.asarray(factor, dtype)))[:k]
        written += float(np.sum(x, dtype=np.float64))
        out[start - first:start - first + k] = x if tscale == 1.0 else np.asarray(x, np.float64) * tscale
        if signal is not None:
            on = np.asarray(signals(m, l, c))[:k]
            signal[start - first:start - first + k] = on
            prob[start - first:start - first + k] = np.where(on, np.minimum(x / np.asarray(l)[:k], 1.0), 0.0)
    passes += 1
    # ... and the plan written meets the budget to the tolerance and is finite
    written = float(add([written])[0])
    converged = converged and np.isfinite(written) and abs(written - float(budget)) <= tol
    if out_path:
        out.flush()
        if comm.multi:
            del full
            comm.barrier("jaxcrawl.stream_solve.written")
            out = np.load(out_path, mmap_mode="r")[first:last]
    nu, a = float(nu), iscale[0]  # back to the caller's units: nu * a / tscale, in an order that stays finite
    dual = next((v for v in (nu * (a / tscale), (nu * a) / tscale, (nu / tscale) * a) if np.isfinite(v) and v != 0),
                nu * (a / tscale))
    return Chunked(out, prob, signal, dual, float(residual) * tscale, steps, passes, bool(converged), first)


def solve_table(table, bandwidth: float, obj, opts, *, lower, upper, dtype, chunk_size: int, out_path,
                bar, comm: Comm, first: int, last: int) -> Chunked:
    """Solve ``obj`` over the rows ``[first, last)`` of ``table`` (an object with 1-D
    ``importance``, ``change_rate``, ``complete`` arrays, e.g. memory maps), every other
    process streaming its own rows.  ``lower``/``upper``: scalars or ``(n,)`` arrays of rate
    bounds (``None``: none), read chunk by chunk.  Validation of ``bandwidth`` and the
    limits is done here (one pass); the options are already checked."""
    n = table.num_pages
    size = max(min(chunk_size, last - first), 1)
    # the change of units of solve_pages: mean rate R/n and (after the first pass has seen
    # them all) the largest importance at 1; rate bounds scale like R
    tscale = float(bandwidth) / n if obj.homogeneous else 1.0
    budget = jnp.asarray(float(bandwidth) / tscale, dtype)
    return solve_chunks(table, bandwidth, obj, dtype, n, comm, first, last, size, budget, lower, upper, out_path,
                        opts.max_steps, opts.rtol, bar, comm.add, comm.big, tscale)
