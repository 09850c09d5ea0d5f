"""Pages streamed chunk by chunk: a table on disk, in one or several processes.

:class:`ChunkPages` implements the passes of :mod:`jaxcrawl._src.passes` with a host loop
over chunks: every chunk's partial reduction is one jitted program (chunks padded to one
size, padding rows neutral), the partials are combined on the host in float64 and, across
processes, by ``comm`` (exact all-gathers reduced in process order, so every process takes
the same steps).  :func:`solve_table` runs the one solve -- :func:`jaxcrawl._src.budget.plain`
and :func:`jaxcrawl._src.gap.resolve`, the same code as in memory -- over them: memory is
O(chunk) and each pass reads the table once.
"""
from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from . import budget as _budget
from . import gap as _gap
from .fileio import output_memmap
from .passes import NEUTRAL, View, reduce_array
from .pipeline import Pages, page_limits
from .rootfind import default_rtol


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
    a = np.asarray(a)
    if a.shape[0] == size:
        return a
    return np.concatenate([a, np.full(size - a.shape[0], fill, dtype=a.dtype)])


class _Plan(NamedTuple):
    """A plan not yet written: ``fn(view, *args)`` per chunk."""

    fn: Any
    args: tuple


_LABELS = {"stats": "bounds", "marginals": "bracket", "clipped": "bracket", "residual": "residual",
           "origins": "log-gap origins"}


class ChunkPages:
    """The rows ``[first, last)`` of ``table`` as chunks of ``size`` pages, in the solve's units
    (importances over ``iscale``, rates over ``tscale``)."""

    def __init__(self, table, obj, dtype, budget, n, size, first, last, lower, upper, tscale, comm, bar,
                 out_path, derived=()):
        self.table, self.obj, self.dtype, self.budget, self.n = table, obj, dtype, budget, n
        self.size, self.first, self.last = size, first, last
        self.lower, self.upper, self.tscale, self.comm, self.bar = lower, upper, tscale, comm, bar
        self.out_path, self.derived = out_path, derived
        self.iscale = 1.0
        self.stats = None
        self.passes = [0]
        self.sink = {}  # the plan as last written: rate, prob, on_signal (shared with derived pages)
        self.top = None  # the largest log marginal at zero (objectives with a GapForm), from the first pass
        self._steps = 0
        self._programs = {}

    # ----------------------------------------------------------------- reading
    def _bound(self, b, start, k, fill, size):
        if b is None:
            return None
        part = np.broadcast_to(b, (k,)) if np.ndim(b) == 0 else np.asarray(b[start:start + k], np.float64)
        return jnp.asarray(_pad(np.asarray(part, np.float64) / self.tscale, size, fill), self.dtype)

    def _chunk(self, start, stop, size=None):
        """Rows ``[start, stop)`` padded to ``size`` (default: the chunk size), in the solve's units."""
        t, k, size = self.table, stop - start, self.size if size is None else size
        m = np.asarray(t.importance[start:stop], np.float64) / self.iscale
        lam = np.asarray(t.change_rate[start:stop], np.float64) / self.tscale
        comp = np.asarray(t.complete[start:stop]).astype(bool)
        return (jnp.asarray(_pad(m, size, 1.0), self.dtype), jnp.asarray(_pad(lam, size, 1.0), self.dtype),
                jnp.asarray(_pad(comp, size, False)), self._bound(self.lower, start, k, 0.0, size),
                self._bound(self.upper, start, k, np.inf, size), jnp.asarray(start + np.arange(size)),
                jnp.asarray(np.arange(size) < k))

    def _label(self, fn) -> str:
        if fn.__name__ == "sums":
            self._steps += 1
            label = f"step {self._steps}"
        else:
            label = _LABELS.get(fn.__name__, fn.__name__)
        return ("log-gap " + label) if self.derived and fn.__name__ != "origins" else label

    def _chunks(self, label):
        self.passes[0] += 1
        self.bar.set_description(f"stream: {label}", refresh=False)
        for start in range(self.first, self.last, self.size):
            yield start, min(start + self.size, self.last) - start, self._chunk(start, min(start + self.size, self.last))
            self.bar.update(1)

    def view(self, m, lam, comp, b_lo, b_hi, index, *, base=False):
        """The chunk as the passes see it (traced inside a chunk program); ``base``: before
        the derived parameters."""
        budget = jnp.asarray(self.budget, self.dtype)
        params = self.obj.params(Pages(m, lam, budget, comp))
        lo, hi = page_limits(self.obj, params, budget, self.n, self.dtype, b_lo, b_hi, m.shape)
        v = View(params, lo, hi, index, m)
        for fn in () if base else self.derived:
            v = v._replace(params=fn(v))
        return v

    def _program(self, fn, ops):
        key = (fn, ops)
        if key not in self._programs:
            def run(data, *args):
                *cols, valid = data
                out = []
                for o, op in zip(fn(self.view(*cols), *args), ops):
                    o = jnp.where(valid, jnp.broadcast_to(o, valid.shape), NEUTRAL[op])
                    value = reduce_array(o, "max" if op == "argmax" else "min" if op == "argmin" else op)
                    out.append((value, cols[-1][reduce_array(o, op)]) if op.startswith("arg") else value)
                return out
            self._programs[key] = jax.jit(run)
        return self._programs[key]

    # ----------------------------------------------------------------- the passes
    def reduce(self, fn, ops, *args):
        program = self._program(fn, tuple(ops))
        acc = [[NEUTRAL[op], -1] if op.startswith("arg") else NEUTRAL[op] for op in ops]
        for _, _, data in self._chunks(self._label(fn)):
            for i, (op, part) in enumerate(zip(ops, program(data, *args))):
                if op == "sum":
                    acc[i] += float(part)
                elif op in ("max", "min"):
                    acc[i] = (max if op == "max" else min)(acc[i], float(part))
                else:
                    v, j = float(part[0]), int(part[1])
                    if (v > acc[i][0]) if op == "argmax" else (v < acc[i][0]):
                        acc[i] = [v, j]
        return tuple(self._combine(op, a) for op, a in zip(ops, acc))

    def _combine(self, op, a):
        c = self.comm
        if op == "sum":
            return jnp.asarray(c.add([a])[0] if c.multi else a, self.dtype)
        if op == "max":
            return jnp.asarray(c.big([a])[0] if c.multi else a, self.dtype)
        if op == "min":
            return jnp.asarray(-c.big([-a])[0] if c.multi else a, self.dtype)
        v, j = a
        if c.multi:  # the best over processes (ties: the lowest process)
            g = c.allgather(np.asarray([v, j], np.float64))
            p = int(np.argmax(g[:, 0]) if op == "argmax" else np.argmin(g[:, 0]))
            j = int(g[p, 1])
        return jnp.asarray(j)

    def map(self, fn, *args):
        return _Plan(fn, args)

    def total(self, plan):
        """Write ``plan`` (this process's rows, in the caller's units) and return its sum in
        the solve's units."""
        out = self._output()
        signal = prob = None
        if not self.out_path:
            signal, prob = np.zeros(self.last - self.first, bool), np.zeros(self.last - self.first, self.dtype)
        self.sink.update(prob=prob, on_signal=signal)
        write = self._writer(plan.fn)
        written = 0.0
        for start, k, data in self._chunks("log-gap writing rates" if self.derived else "writing rates"):
            x, on = write(data[:-1], *plan.args)
            x, on = np.asarray(x)[:k], np.asarray(on)[:k]
            written += float(np.sum(x, dtype=np.float64))
            rows = slice(start - self.first, start - self.first + k)
            out[rows] = x if self.tscale == 1.0 else np.asarray(x, np.float64) * self.tscale
            if signal is not None:
                signal[rows] = on
                prob[rows] = np.where(on, np.minimum(x / np.asarray(data[1])[:k], 1.0), 0.0)
        return jnp.asarray(self.comm.add([written])[0] if self.comm.multi else written, self.dtype)

    def _writer(self, fn):
        key = ("write", fn)
        if key not in self._programs:
            def run(cols, *args):
                return fn(self.view(*cols), *args), self.obj.signal_mask(self.view(*cols, base=True).params,
                                                                         cols[0].shape)
            self._programs[key] = jax.jit(run)
        return self._programs[key]

    def _output(self):
        if self.sink.get("rate") is None:
            c, n = self.comm, self.n
            if self.out_path and c.multi:  # process 0 creates the file, then every process writes its rows
                if c.process_index == 0:  # its disk space allocated first (a full disk: OSError, not SIGBUS)
                    output_memmap(self.out_path, self.dtype, n).flush()
                c.barrier("jaxcrawl.stream.create")
                self.sink["rate"] = output_memmap(self.out_path, self.dtype, n, create=False)[self.first:self.last]
            elif self.out_path:
                self.sink["rate"] = output_memmap(self.out_path, self.dtype, n)
            else:
                self.sink["rate"] = np.empty(self.last - self.first, self.dtype)
        return self.sink["rate"]

    def limits(self):
        return self.stats

    def page(self, k):
        """Page ``k``'s parameters (read from the table, whichever process owns the row)."""
        k = int(k)
        *cols, _ = self._chunk(k, k + 1, size=1)
        return jax.tree_util.tree_map(lambda v: v[0], jax.jit(lambda c: self.view(*c).params)(tuple(cols)))

    def derive(self, fn):
        other = ChunkPages(self.table, self.obj, self.dtype, self.budget, self.n, self.size, self.first, self.last,
                           self.lower, self.upper, self.tscale, self.comm, self.bar, self.out_path,
                           self.derived + (fn,))
        other.iscale, other.stats, other.passes, other.sink = self.iscale, self.stats, self.passes, self.sink
        return other

    @staticmethod
    def loop(cond, body, init):
        s = init
        while bool(cond(s)):
            s = body(s)
        return s

    @staticmethod
    def first_of(attempt, ks, wanted, init):
        out, steps = None, 0
        for k, want in zip(ks, wanted):
            if bool(want) and (out is None or not bool(out[4])):
                out = attempt(int(k))
                steps += int(out[3])
        return out[0], out[1], out[2], steps, out[4]

    def solve(self, rate_fn, marginal_fn, budget, bracket, opts):
        rtol = default_rtol(self.dtype) if opts["rtol"] is None else opts["rtol"]
        x, nu, residual, converged, steps = _budget.plain(self, rate_fn, marginal_fn, budget, bracket,
                                                          opts["max_steps"], rtol)
        converged = _budget.checked(self, x, budget, residual, converged, rtol)
        return x, nu, residual, int(steps), converged


def solve_table(table, bandwidth: float, obj, opts, *, lower, upper, dtype, chunk_size: int, out_path,
                bar, comm: Comm, first: int, last: int) -> Chunked:
    """Solve ``obj`` over the rows ``[first, last)`` of ``table`` (1-D ``importance``,
    ``change_rate``, ``complete`` arrays, e.g. memory maps), every other process streaming
    its own rows.  ``lower``/``upper``: scalars or ``(n,)`` arrays of rate bounds (``None``:
    none), read chunk by chunk.  A first pass checks the limits and finds the largest
    importance; then the one solve, in units where the mean rate and the largest importance
    are 1 for a homogeneous objective."""
    n = table.num_pages
    size = max(min(chunk_size, last - first), 1)
    tscale = float(bandwidth) / n if obj.homogeneous else 1.0
    budget = float(bandwidth) / tscale
    pages = ChunkPages(table, obj, dtype, budget, n, size, first, last, lower, upper, tscale, comm, bar, out_path)
    _check_limits(pages, bandwidth)
    budget = jnp.asarray(budget, dtype)
    gopts = dict(max_steps=opts.max_steps, rtol=opts.rtol, adjoint=opts.adjoint)
    x, nu, residual, steps, converged = pages.solve(obj.rate, obj.marginal, budget, None, gopts)
    gap = obj.gap
    if gap is not None:  # the log-gap re-solve where the plain dual cannot resolve the answer
        if not bool(converged) or not bool(pages.top - jnp.log(nu) >= _gap.SWITCH):
            _, nu, residual, steps, converged = _gap.resolve(pages, gap, gopts, budget, n, x, nu, residual, steps,
                                                             converged)
    rate, prob, signal = (pages.sink[k] for k in ("rate", "prob", "on_signal"))
    if out_path:
        rate.flush()
        if comm.multi:
            comm.barrier("jaxcrawl.stream.written")
            rate = np.load(out_path, mmap_mode="r")[first:last]
    nu, a = float(nu), pages.iscale  # back to the caller's units: nu a / tscale, in an order that stays finite
    dual = next((v for v in (nu * (a / tscale), (nu * a) / tscale, (nu / tscale) * a) if np.isfinite(v) and v != 0),
                nu * (a / tscale))
    return Chunked(rate, prob, signal, dual, float(residual) * tscale, int(steps), pages.passes[0],
                   bool(converged), first)


def _check_limits(pages, bandwidth) -> None:
    """The first pass: every page's lower bound at most its upper, the bandwidth within what
    the limits allow; the largest importance (the unit of importance) and the limits'
    statistics of the bracket."""
    def stats(v):
        width = v.hi - v.lo
        fin = jnp.isfinite(width)
        fw = jnp.where(fin, width, 0.0)
        bad = jnp.where(v.lo > v.hi, 1.0, 0.0)
        top = pages.obj.gap.top(v.params) if pages.obj.gap is not None else jnp.zeros_like(fw)
        return (v.lo, fw, jnp.where(fin, 0.0, 1.0), fw, jnp.where(jnp.isfinite(v.hi), v.hi, 0.0), bad, bad,
                jnp.abs(v.importance), top)

    s = pages.reduce(stats, ("sum", "sum", "sum", "max", "sum", "max", "argmax", "max", "max"))
    sum_lo, sum_w, n_inf, max_w, sum_hi, any_bad, first_bad, top, log_m = (np.asarray(v) for v in s)
    if float(any_bad) > 0:
        raise ValueError(f"bounds: page {int(first_bad)}'s lower rate bound exceeds its upper bound (a lower "
                         "bound above the upper, or above a complete page's change rate)")
    budget, tscale = pages.budget, pages.tscale
    if float(n_inf) == 0 and budget >= float(sum_hi):
        raise ValueError(f"bandwidth {bandwidth} exceeds what the problem can use ({float(sum_hi) * tscale}): every "
                         "page is bounded above (e.g. every page is complete)")
    if budget < float(sum_lo) * (1 - 1e-12):
        raise ValueError(f"bandwidth {bandwidth} is below the sum of the pages' lower bounds "
                         f"({float(sum_lo) * tscale})")
    top = float(top)
    if pages.obj.homogeneous and np.isfinite(top) and top > 0:
        pages.iscale = float(top)  # from now on, importances in units of the largest
    # a homogeneous objective's marginals scale with the importance: its largest log marginal
    # at zero in the new units is the one read less log(iscale)
    pages.top = jnp.asarray(float(log_m) - np.log(pages.iscale), pages.dtype)
    pages.stats = tuple(jnp.asarray(v, pages.dtype) for v in (sum_lo, sum_w, n_inf, max_w))
