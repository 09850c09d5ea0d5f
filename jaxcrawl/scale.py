"""Scale: sharding page arrays over devices and hosts, and streaming solves from disk.

**Many devices.** Every solver is a fixed sequence of elementwise maps and global sums
over the pages, so it partitions over a ``jax.sharding.Mesh`` with no code change: put
the page arrays on the mesh (:func:`shard_pages`) and call the same public function; XLA
turns each pass's sum into one all-reduce and returns results with the pages' sharding.
Sweeps shard their leading (seed / instance / hyperparameter) axis with
:func:`shard_leading`.  Several processes or hosts: call :func:`initialize_distributed`
once per process (:func:`jaxcrawl.distributed.initialize`), then see below.

**Bigger than memory.** :func:`stream_solve` solves LambdaCrawl / BinaryLambdaCrawl from a
page table on disk (:class:`PageTable`, ``.npy`` files read by memory map) chunk by chunk:
the dual needs only per-chunk sums, so each root-finding step is one sequential read of
the table, and the plan is written chunk by chunk.  It runs the same safeguarded Newton
iteration as :func:`jaxcrawl.allocate` (shared code: ``root_init`` / ``root_update``) and
produces the same plan as the in-memory solve.

**Several processes.** In a ``jax.distributed`` job (:mod:`jaxcrawl.distributed`), the
same calls work across processes: :func:`jaxcrawl.distributed.solve_local_rows` solves
from each process's own rows, and :func:`stream_solve` streams each process's row range
of the table and combines the per-chunk sums across processes (every process gets the
same dual; each writes its own rows of the plan).
"""
from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from ._src import budget as _budget
from ._src import gap as _gap
from ._src import rootfind
from .io.page_table import PageTable as PageTable
from .io.page_table import write_page_table as write_page_table
from .problem import raw_problem
from .utilities import Utility, binary_epsilon, get_utility

__all__ = [
    "page_mesh",
    "shard_pages",
    "shard_leading",
    "initialize_distributed",
    "PageTable",
    "write_page_table",
    "StreamResult",
    "stream_solve",
]


# ------------------------------------------------------------------ sharding
def page_mesh(devices: Sequence | None = None, axis_name: str = "pages") -> Mesh:
    """A one-dimensional mesh over ``devices`` (default: all devices of all processes)."""
    devices = jax.devices() if devices is None else list(devices)
    return Mesh(np.asarray(devices), (axis_name,))


def _check_divisible(n, size, what):
    if n % size:
        raise ValueError(
            f"{what}: the sharded axis has length {n}, which is not a multiple of the mesh size {size}; "
            f"pad it to a multiple of {size} (e.g. pages with a tiny importance) or use a mesh of a divisor"
        )


def _shard(tree, mesh: Mesh, axis_name: str | None, axis: int, what: str):
    """Put every array of ``tree`` on ``mesh`` with array axis ``axis`` sharded (scalars replicated)."""
    axis_name = mesh.axis_names[0] if axis_name is None else axis_name
    size = mesh.shape[axis_name]

    def put(x):
        x = jnp.asarray(x)
        if x.ndim == 0:
            return jax.device_put(x, NamedSharding(mesh, PartitionSpec()))
        _check_divisible(x.shape[axis], size, what)
        spec = [None] * x.ndim
        spec[axis] = axis_name
        return jax.device_put(x, NamedSharding(mesh, PartitionSpec(*spec)))

    return jax.tree_util.tree_map(put, tree)


def shard_pages(tree: Any, mesh: Mesh, axis_name: str | None = None) -> Any:
    """Place every array of ``tree`` with its last (pages) axis sharded over ``mesh``.

    Scalars (e.g. the bandwidth) are replicated.  Works on a :class:`CrawlProblem`, a
    :class:`Policy`, any pytree whose arrays end with the pages axis.  The page count
    must be a multiple of the mesh size (``ValueError`` otherwise).
    """
    return _shard(tree, mesh, axis_name, -1, "shard_pages")


def shard_leading(tree: Any, mesh: Mesh, axis_name: str | None = None) -> Any:
    """Place every array of ``tree`` with its first axis sharded: seeds, instances,
    hyperparameters of a sweep, or the pages axis of padded histories ``(pages, k)``."""
    return _shard(tree, mesh, axis_name, 0, "shard_leading")


def initialize_distributed(coordinator_address: str | None = None, num_processes: int | None = None,
                           process_id: int | None = None, axis_name: str = "pages", **kwargs) -> Mesh:
    """Join a multi-process JAX job and return a page mesh over every device of every process.

    The same as :func:`jaxcrawl.distributed.initialize` (``jax.distributed.initialize``
    with gloo CPU collectives and a short heartbeat timeout, so a dead peer stops the job;
    on managed clusters -- SLURM, Kubernetes, Open MPI, TPU pods -- the arguments may be
    omitted).  Run the same script on every process; afterwards
    :func:`jaxcrawl.distributed.solve_local_rows`, :func:`stream_solve` and
    :func:`jaxcrawl.learners.sweep.run_sweep` split their work over the processes.
    Calling it again in a process that is already initialised just returns the mesh.
    """
    from .distributed import initialize

    return initialize(coordinator_address, num_processes, process_id, axis_name=axis_name, **kwargs)


# ----------------------------------------------------------------- streaming
# PageTable and write_page_table live in jaxcrawl.io.page_table (re-exported above).


class StreamResult(NamedTuple):
    """Result of :func:`stream_solve`.

    Attributes:
      rate: the plan's rates (a memory map when ``out_path`` is given).
      dual: the budget multiplier ν.
      residual: ``sum(x(ν)) - bandwidth`` at the returned dual, before the closing correction.
      num_steps: root-finding steps.
      num_passes: full reads of the page table.
      converged: whether the root-find met its tolerance before ``max_steps`` and the plan
        meets the budget (see :func:`stream_solve`).
      start: the global index of ``rate[0]`` (0 unless several processes each returned
        their own rows).
    """

    rate: np.ndarray
    dual: float
    residual: float
    num_steps: int
    num_passes: int
    converged: bool = True
    start: int = 0


def _pad(a, size, fill):
    if a.shape[0] == size:
        return a
    return np.concatenate([a, np.full(size - a.shape[0], fill, dtype=a.dtype)])


def _stream_utility(objective, epsilon) -> Utility:
    if objective == "binary" and epsilon:
        return binary_epsilon(float(epsilon))
    if epsilon and objective != "binary-epsilon":
        raise ValueError("epsilon applies to objective='binary' only")
    u = get_utility(objective)
    if not u.separable or u.marginal is None:
        raise ValueError(f"objective {u.name!r} couples pages (not separable), so it cannot be "
                         "solved chunk by chunk; load the table and call jaxcrawl.solve")
    return u


def _row_chunks(table: PageTable, chunk_size: int, start: int, stop: int):
    for a in range(start, stop, chunk_size):
        b = min(a + chunk_size, stop)
        yield (a, np.asarray(table.importance[a:b]), np.asarray(table.change_rate[a:b]),
               np.asarray(table.complete[a:b]).astype(bool))


def _log(v: float) -> float:
    return float(np.log(v)) if v > 0 else -np.inf


def _best(pair: tuple[float, int], multi: bool, pick) -> tuple[float, int]:
    """The ``(value, global row)`` pair with the largest (``pick=max``) or smallest
    (``pick=min``) value over the processes (ties: the lowest process)."""
    if not multi:
        return pair
    from . import distributed as _dist

    g = _dist.allgather_host(np.asarray(pair, np.float64))
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


def _stream_gap_solve(gap, table, n, size, load, chunk_parts, row_chunks, add, multi, budget, nu, residual,
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
        t, k = _best(best, multi, min)
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


def stream_solve(table: PageTable, bandwidth: float, *, objective: str | Utility = "harmonic",
                 epsilon: float = 0.0, chunk_size: int = 1 << 20, dtype: Any = None,
                 out_path: str | None = None, max_steps: int = 100,
                 rtol: float | None = None, min_rate: Any = None,
                 max_rate: Any = None, progress: bool | None = None) -> StreamResult:
    """Solve any separable :class:`~jaxcrawl.Utility` from a page table on disk.

    The same optimum as :func:`jaxcrawl.solve` (e.g. LambdaCrawl, NeurIPS-19 Alg. 1-3, for
    ``"harmonic"``; BLC/BLCε, Azar et al. / supplement §9.3, for ``"binary"``), computed
    from per-chunk sums: one pass for the bounds' statistics, one for the dual bracket,
    one per root-finding step (the same :func:`root_update` as the in-memory solve,
    driven from the host), one for the residual at the final dual, and one to write the
    plan.  Memory is O(chunk_size).  For a utility with a :class:`~jaxcrawl.GapForm`
    (binary, BLCε, uniform freshness), where the plain dual cannot resolve the answer (a
    bandwidth far below the change rates) the solve continues on the dual's log-gap, as
    :func:`jaxcrawl.solve` does: a few more passes, only then.

    Args:
      table: the page table.
      bandwidth: total crawl rate R (> 0; for an all-complete table below their total rate).
      objective: a registry name or a separable :class:`~jaxcrawl.Utility`.
      epsilon: BLCε floor fraction (with ``objective="binary"``).
      chunk_size: pages per chunk (chunks are padded to this size, so one compilation).
      dtype: float dtype of the computation (default: the table's, or float32).
      out_path: write the rates to this ``.npy`` file (memory map) instead of returning an array.
      max_steps, rtol: as in :func:`jaxcrawl.allocate`.
      min_rate, max_rate: revisit bounds as rates (:mod:`jaxcrawl.bounds`): scalars or
        ``(num_pages,)`` arrays (memory maps are read chunk by chunk); intersected with
        the utility's own bounds.
      progress: a progress bar (tqdm, stderr) over the chunks read, naming the pass and
        the root-finding step: ``None`` (default) when stderr is a terminal and the run
        takes more than a second, ``True`` always, ``False`` never.

    Several processes (``jax.process_count() > 1``, :mod:`jaxcrawl.distributed`): each
    process streams only its :func:`~jaxcrawl.distributed.row_range` of the table and the
    per-chunk sums are combined across processes (exact all-gathers, reduced in process
    order), so every process takes the same root-finding steps; inputs that differ between
    processes are refused at the start.  ``rate`` then holds this process's rows (from
    ``StreamResult.start``), and ``out_path`` (on a filesystem every process sees) receives
    every process's rows: one ``.npy`` file of the whole plan.

    Returns:
      :class:`StreamResult` (with the pre-correction residual; ``converged`` requires the
      root-find to stop within ``max_steps``, that residual within 4 × the tolerance and the
      written plan's sum within it).
    """
    if not np.isfinite(bandwidth) or bandwidth <= 0:
        raise ValueError(f"bandwidth must be finite and > 0; got {bandwidth}")
    if not 0 <= epsilon <= 1:
        raise ValueError(f"epsilon must be in [0, 1]; got {epsilon}")
    utility = _stream_utility(objective, epsilon)
    dtype = jnp.dtype(dtype or (table.importance.dtype if jnp.dtype(table.importance.dtype).kind == "f" else jnp.float32))
    if dtype == jnp.float64 and not jax.config.jax_enable_x64:
        dtype = jnp.dtype(jnp.float32)
    n = table.num_pages
    multi = jax.process_count() > 1
    if multi:
        from . import distributed as _dist

        _dist.check_consistent(table=_dist.file_fingerprint(table.directory), bandwidth=float(bandwidth),
                               objective=utility.name, epsilon=float(epsilon), dtype=str(dtype),
                               chunk_size=int(chunk_size), max_steps=int(max_steps), rtol=rtol,
                               out_path=out_path)
        first, last = _dist.row_range(n)
        add, big_ = _dist.allreduce_sum, _dist.allreduce_max
    else:
        first, last = 0, n
        add = big_ = np.asarray
    size = max(min(chunk_size, last - first), 1)
    # Utility.homogeneous: the change of units of jaxcrawl.solve -- mean rate R/n and (after
    # the first pass has seen them all) the largest importance at 1; rate bounds scale like R
    tscale = float(bandwidth) / n if utility.homogeneous else 1.0
    budget = jnp.asarray(float(bandwidth) / tscale, dtype)
    from .io.progress import progress_bar

    bar = progress_bar(None, "stream_solve", quiet=progress is False, unit="chunk", force=progress is True)
    try:
        return _stream_passes(table, bandwidth, utility, dtype, n, multi, first, last, size, budget, min_rate,
                              max_rate, out_path, max_steps, rtol, bar, add, big_, tscale)
    finally:
        bar.close()


def _stream_passes(table, bandwidth, utility, dtype, n, multi, first, last, size, budget, min_rate, max_rate,
                   out_path, max_steps, rtol, bar, add, big_, tscale):
    """The passes of :func:`stream_solve` over the table (``bar`` advances by chunk), in
    units where rates are divided by ``tscale`` and importances by the largest one (found
    by the first pass; page bounds of a homogeneous utility do not depend on it)."""
    iscale = [1.0]

    def units(v, scale):
        return v if scale == 1.0 else np.asarray(v, np.float64) / scale

    if multi:
        from . import distributed as _dist

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
        params = utility.params(raw_problem(m, l, budget, c))
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
        t_top, k_top = _best(highest, multi, max)
        if not converged or not (t_top - _log(float(nu)) >= _gap.SWITCH):
            found = _stream_gap_solve(gap, table, n, size, load, chunk_parts, row_chunks, add, multi, budget,
                                      float(nu), residual, t_top, k_top, max_steps, tol, dtype)
            passes += found.passes
            steps += found.steps
            if found.converged or not converged:  # the plain answer stands where the re-solve fails
                nu, residual, df, converged = found.nu, found.residual, found.slope, found.converged
                write = found.write
    factor = -residual / df if df < 0 else 0.0  # x + factor*dx == x + r * w / sum(w), w = -dx
    if out_path and multi:  # process 0 creates the file, then every process writes its rows
        if jax.process_index() == 0:
            np.lib.format.open_memmap(out_path, mode="w+", dtype=dtype, shape=(n,)).flush()
        _dist.barrier("jaxcrawl.stream_solve.create")
        full = np.lib.format.open_memmap(out_path, mode="r+")
        out = full[first:last]
    else:
        out = (np.lib.format.open_memmap(out_path, mode="w+", dtype=dtype, shape=(n,)) if out_path
               else np.empty(last - first, dtype=dtype))
    written = 0.0
    for chunk in row_chunks("writing rates"):
        start, k, m, l, c, valid = load(chunk)
        x = np.asarray(write(start, m, l, c, factor=jnp.asarray(factor, dtype)))[:k]
        written += float(np.sum(x, dtype=np.float64))
        out[start - first:start - first + k] = x if tscale == 1.0 else np.asarray(x, np.float64) * tscale
    passes += 1
    # ... and the plan written meets the budget to the tolerance and is finite
    written = float(add([written])[0])
    converged = converged and np.isfinite(written) and abs(written - float(budget)) <= tol
    if out_path:
        out.flush()
        if multi:
            del full
            _dist.barrier("jaxcrawl.stream_solve.written")
            out = np.load(out_path, mmap_mode="r")[first:last]
    nu, a = float(nu), iscale[0]  # back to the caller's units: nu * a / tscale, in an order that stays finite
    dual = next((v for v in (nu * (a / tscale), (nu * a) / tscale, (nu / tscale) * a) if np.isfinite(v) and v != 0),
                nu * (a / tscale))
    return StreamResult(rate=out, dual=dual, residual=float(residual) * tscale, num_steps=steps,
                        num_passes=passes, converged=converged, start=first)
