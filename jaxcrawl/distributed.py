r"""Several processes, one solve: JAX's multi-controller runtime for pages beyond one machine.

Every process runs the same program (``jax.distributed``: one process per host or per
GPU).  Each reads only its own contiguous row range of the page table
(:func:`row_range`; Parquet row groups, ``.npy`` memory maps, CSV byte ranges aligned to
line starts -- :func:`read_local_rows`), builds its shard of the global page arrays with
``jax.make_array_from_process_local_data`` (:func:`global_pages`), and calls the same
solver as on one device: the dual root-find's sums over pages become all-reduces across
processes (gloo on CPU, NCCL on GPU), so every process gets the same dual and its own rows
of the plan (:func:`solve_local_rows`).  Host caps work unchanged when a host's pages
span processes: the per-host totals are segment sums over the global (sharded) page axis.

Uneven splits (``n`` not a multiple of the process count) are padded to equal blocks with
pages pinned at rate 0 (lower = upper = 0), which add nothing to any sum; bounds that
depend on the page count (BLCε's floor :math:`\varepsilon R/n`) use the true ``n``.

Host-side values that must be combined across processes (streaming solves' per-chunk
sums, row counts, fingerprints) go through :func:`allgather_host` -- an exact byte-level
all-gather (float64 survives even with ``jax_enable_x64`` off) -- and are reduced on every
process in process order, so every process computes bit-identical results.

Faults.  :func:`initialize` sets JAX's coordination-service heartbeat timeout (default
10 s here, JAX's own is 100 s): when a process dies, the coordination service notices
within that time and every other process is terminated with a non-zero status (JAX logs
the missing task), instead of hanging in the next collective.  Inputs that differ between
processes (a different table, bandwidth or option) are refused at start-up by
:func:`check_consistent`.

Launching: ``jaxcrawl launch -n N -- solve ...`` starts N local processes (CPU, gloo);
``jaxcrawl solve|stream|sweep --coordinator HOST:PORT --num-processes N --process-id I``
joins one process to a job; on SLURM (and the other clusters JAX auto-detects) no flags are
needed beyond ``--distributed``.  See docs/scale.md.
"""
from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

__all__ = [
    "DEFAULT_HEARTBEAT_SECONDS",
    "initialize",
    "is_multiprocess",
    "row_range",
    "allgather_host",
    "allreduce_sum",
    "allreduce_max",
    "barrier",
    "raise_together",
    "fingerprint",
    "check_consistent",
    "file_fingerprint",
    "global_pages",
    "replicated",
    "global_tree",
    "local_rows",
    "LocalRows",
    "read_local_rows",
    "LocalSolution",
    "solve_local_rows",
    "free_port",
    "launch",
]

#: Heartbeat timeout of the coordination service set by :func:`initialize` (seconds): a
#: process that stops sending heartbeats this long is declared dead and the job stops.
DEFAULT_HEARTBEAT_SECONDS = 10


# ------------------------------------------------------------------- start-up
def initialize(coordinator_address: str | None = None, num_processes: int | None = None,
               process_id: int | None = None, *, heartbeat_timeout_seconds: int = DEFAULT_HEARTBEAT_SECONDS,
               initialization_timeout: int = 120, cpu_collectives: str | None = "gloo",
               axis_name: str = "pages", **kwargs: Any) -> Mesh:
    """Join a multi-process JAX job (``jax.distributed.initialize``) and return the page mesh.

    Arguments as ``jax.distributed.initialize``; ``None`` ones are taken from the
    environment JAX reads (``JAX_COORDINATOR_ADDRESS``; SLURM, Open MPI, Kubernetes, Cloud
    TPU auto-detection), and ``JAX_NUM_PROCESSES`` / ``JAX_PROCESS_ID`` (read here).  A
    job of one process is not initialised at all (the mesh is over the local devices).
    Sets CPU collectives to ``cpu_collectives`` (gloo: cross-process sums on CPU) before
    the backend starts, and a short heartbeat timeout so a dead peer stops the job within
    about ``heartbeat_timeout_seconds``.  Calling it again returns the mesh.

    Must run before anything else touches a JAX device in this process.
    """
    from .scale import page_mesh

    if num_processes is None and os.environ.get("JAX_NUM_PROCESSES"):
        num_processes = int(os.environ["JAX_NUM_PROCESSES"])
    if process_id is None and os.environ.get("JAX_PROCESS_ID"):
        process_id = int(os.environ["JAX_PROCESS_ID"])
    if num_processes is not None and num_processes < 1:
        raise ValueError(f"num_processes must be >= 1; got {num_processes}")
    if process_id is not None and num_processes is not None and not 0 <= process_id < num_processes:
        raise ValueError(f"process_id must be in [0, num_processes={num_processes}); got {process_id}")
    if num_processes == 1:
        return page_mesh(jax.devices(), axis_name)
    if not jax.distributed.is_initialized():
        if cpu_collectives:
            jax.config.update("jax_cpu_collectives_implementation", cpu_collectives)
        jax.distributed.initialize(coordinator_address=coordinator_address, num_processes=num_processes,
                                   process_id=process_id, initialization_timeout=initialization_timeout,
                                   heartbeat_timeout_seconds=heartbeat_timeout_seconds, **kwargs)
    return page_mesh(jax.devices(), axis_name)


def is_multiprocess() -> bool:
    """True when this process is one of several of a ``jax.distributed`` job."""
    return jax.process_count() > 1


def row_range(num_rows: int, num_processes: int | None = None, process_id: int | None = None) -> tuple[int, int]:
    """``(start, stop)``: the contiguous rows of ``num_rows`` that process ``process_id`` owns.

    Balanced: process ``i`` of ``P`` gets rows ``[floor(i n / P), floor((i+1) n / P))``
    (sizes differ by at most one; empty ranges when ``n < P``).  Defaults: this process.
    """
    num_processes = jax.process_count() if num_processes is None else int(num_processes)
    process_id = jax.process_index() if process_id is None else int(process_id)
    if num_rows < 0:
        raise ValueError(f"num_rows must be >= 0; got {num_rows}")
    if not 0 <= process_id < num_processes:
        raise ValueError(f"process_id must be in [0, {num_processes}); got {process_id}")
    return num_rows * process_id // num_processes, num_rows * (process_id + 1) // num_processes


# ------------------------------------------------------- host-side collectives
def allgather_host(values: Any) -> np.ndarray:
    """Every process's ``values`` (a NumPy array of the same shape and dtype everywhere),
    stacked along a new leading process axis, on every process.

    Exact: the bytes are gathered (so float64 stays float64 with ``jax_enable_x64`` off).
    With one process it just adds the axis.
    """
    a = np.ascontiguousarray(np.asarray(values))
    if jax.process_count() == 1:
        return a[None]
    from jax.experimental import multihost_utils

    raw = a.reshape(-1).view(np.uint8)
    got = np.asarray(multihost_utils.process_allgather(raw, tiled=False))
    return np.ascontiguousarray(got).view(a.dtype).reshape((jax.process_count(),) + a.shape)


def allreduce_sum(values: Any) -> np.ndarray:
    """The sum over processes of ``values`` (float64; in process order, identical everywhere)."""
    g = allgather_host(np.asarray(values, np.float64))
    out = g[0].copy()
    for row in g[1:]:
        out = out + row
    return out


def allreduce_max(values: Any) -> np.ndarray:
    """The elementwise maximum over processes of ``values`` (float64)."""
    return np.max(allgather_host(np.asarray(values, np.float64)), axis=0)


def barrier(name: str) -> None:
    """Wait until every process reaches the barrier ``name`` (no-op with one process)."""
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(name)


# --------------------------------------------------------- consistency checks
def fingerprint(value: Any) -> str:
    """A SHA-256 hex digest of ``value`` (arrays by dtype, shape and bytes; others by repr)."""
    h = hashlib.sha256()

    def add(v):
        if isinstance(v, np.ndarray | jax.Array):
            a = np.ascontiguousarray(np.asarray(v))
            h.update(f"array{a.dtype.str}{a.shape}".encode())
            h.update(a.tobytes())
        elif isinstance(v, dict):
            for k in sorted(v):
                h.update(repr(k).encode())
                add(v[k])
        elif isinstance(v, list | tuple):
            h.update(f"seq{len(v)}".encode())
            for x in v:
                add(x)
        else:
            h.update(repr(v).encode())

    add(value)
    return h.hexdigest()


def file_fingerprint(path: str, probe: int = 1 << 16) -> str:
    """A cheap fingerprint of a file (or of every file of a directory): size plus the
    hash of its first and last ``probe`` bytes -- enough to tell two different tables
    apart at start-up without any process reading a whole table."""
    if os.path.isdir(path):
        return fingerprint({name: file_fingerprint(os.path.join(path, name), probe)
                            for name in sorted(os.listdir(path)) if not name.startswith(".")})
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(probe)
        f.seek(max(0, size - probe))
        tail = f.read(probe)
    return fingerprint((size, head, tail))


def check_consistent(**fields: Any) -> None:
    """Refuse to start when the processes were given different inputs.

    Each keyword (e.g. ``table=file_fingerprint(path), bandwidth=R, options=...``) is
    fingerprinted on every process and compared with process 0's; a mismatch raises
    ``ValueError`` naming the fields and the processes that differ, on every process.
    No-op with one process.
    """
    if jax.process_count() == 1 or not fields:
        return
    names = sorted(fields)
    digests = np.stack([np.frombuffer(bytes.fromhex(fingerprint(fields[k])), np.uint8) for k in names])
    got = allgather_host(digests)  # (P, F, 32)
    bad = []
    for j, name in enumerate(names):
        differ = [p for p in range(got.shape[0]) if not np.array_equal(got[p, j], got[0, j])]
        if differ:
            bad.append(f"{name} (processes {differ} differ from process 0)")
    if bad:
        raise ValueError("the processes of this job were given different inputs: " + "; ".join(bad)
                         + "; every process must run the same command on the same table")


def raise_together(error: str | None) -> None:
    """Raise ``ValueError`` on every process when any process found an error.

    A process that raised alone would leave the others waiting in their next collective
    (until the heartbeat timeout stops them); this exchanges one flag per process first,
    so bad input on one process is a clean error everywhere (the failing process reports
    its own message, the others name it).
    """
    if jax.process_count() == 1:
        if error:
            raise ValueError(error)
        return
    flags = allgather_host(np.asarray([0 if error is None else 1], np.int32))[:, 0]
    if error is not None:
        raise ValueError(f"process {jax.process_index()}: {error}")
    if flags.any():
        raise ValueError(f"bad input on process(es) {np.flatnonzero(flags).tolist()} (see their error messages)")


# -------------------------------------------------------------- global arrays
def _pad(a: np.ndarray, size: int, fill: Any) -> np.ndarray:
    a = np.asarray(a)
    if a.shape[0] == size:
        return a
    pad = np.full((size - a.shape[0],) + a.shape[1:], fill, dtype=a.dtype)
    return np.concatenate([a, pad])


def _block(local_count: int) -> tuple[int, np.ndarray]:
    """(padded rows per process, every process's row count)."""
    counts = allgather_host(np.asarray([local_count], np.int64))[:, 0]
    per = jax.local_device_count()
    block = max(int(counts.max()), 1)
    return -(-block // per) * per, counts


def global_pages(mesh: Mesh, block: int, *arrays: tuple[np.ndarray, Any]) -> list[jax.Array]:
    """This process's rows of each ``(array, fill)`` padded to ``block`` rows with ``fill``,
    assembled into global arrays of ``block * process_count`` pages sharded over ``mesh``
    (``jax.make_array_from_process_local_data``: no process holds another's rows)."""
    sharding = NamedSharding(mesh, PartitionSpec(mesh.axis_names[0]))
    size = block * jax.process_count()
    return [jax.make_array_from_process_local_data(sharding, _pad(a, block, fill), (size,) + np.shape(a)[1:])
            for a, fill in arrays]


def global_tree(tree: Any, mesh: Mesh | None = None) -> Any:
    """A pytree of this process's rows (per-page leaves, pages on the last axis) as global
    arrays sharded over the pages of ``mesh``; scalar leaves (the same on every process)
    are replicated.

    For computations other than the solve -- the simulator
    (:func:`jaxcrawl.simulate.simulate`), estimators, learners -- whose random draws must
    not see padding: every process must hold the same number of rows (a page count
    divisible by the number of processes; ``ValueError`` otherwise).  Results equal the
    single-process run (JAX's partitionable threefry makes random draws independent of the
    sharding).
    """
    from .scale import page_mesh

    mesh = page_mesh() if mesh is None else mesh
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    sizes = {np.shape(x)[-1] for x in leaves if np.ndim(x)}
    if len(sizes) > 1:
        raise ValueError(f"global_tree: per-page leaves have different page counts {sorted(sizes)}")
    k = sizes.pop() if sizes else 0
    counts = allgather_host(np.asarray([k], np.int64))[:, 0]
    if np.any(counts != k) or k % jax.local_device_count():
        raise ValueError(f"global_tree: every process must hold the same number of pages (a multiple of its "
                         f"{jax.local_device_count()} devices); got {counts.tolist()} -- use a page count "
                         "divisible by the number of processes")
    axis = mesh.axis_names[0]

    def put(x):
        x = np.asarray(x)
        if x.ndim == 0:
            return replicated(mesh, x)
        spec = PartitionSpec(*([None] * (x.ndim - 1) + [axis]))
        shape = x.shape[:-1] + (k * jax.process_count(),)
        return jax.make_array_from_process_local_data(NamedSharding(mesh, spec), x, shape)

    return jax.tree_util.tree_unflatten(treedef, [put(x) for x in leaves])


def replicated(mesh: Mesh, value: Any) -> jax.Array:
    """``value`` (the same on every process) as a global array replicated over ``mesh``."""
    a = np.asarray(value)
    return jax.make_array_from_process_local_data(NamedSharding(mesh, PartitionSpec()), a, a.shape)


def local_rows(x: jax.Array, count: int | None = None) -> np.ndarray:
    """This process's first ``count`` pages (default: all it holds) of a page-sharded
    global array (pages on the last axis): its own rows; a replicated array as is."""
    if x.ndim == 0 or not x.sharding.spec or all(a is None for a in x.sharding.spec):
        return np.asarray(x.addressable_data(0))
    shards = sorted(x.addressable_shards, key=lambda s: s.index[-1].start or 0)
    out = np.concatenate([np.asarray(s.data) for s in shards], axis=-1)
    return out if count is None else out[..., :count]


def _scalar(x: jax.Array) -> float:
    return float(np.asarray(x.addressable_data(0)))


# ------------------------------------------------------------------ reading
class LocalRows(NamedTuple):
    """This process's rows of a page table.

    Attributes:
      page_id: ``(k,)`` page ids (row numbers for ``.npy`` tables without ids).
      importance, change_rate: ``(k,)`` float64.
      complete: ``(k,)`` bool.
      start: global index of the first row (``None`` for CSV, known after a count exchange).
      fingerprint: a cheap fingerprint of the whole table (same on every process).
    """

    page_id: np.ndarray
    importance: np.ndarray
    change_rate: np.ndarray
    complete: np.ndarray
    start: int | None
    fingerprint: str


def _csv_rows(path: str, process_id: int, num_processes: int) -> LocalRows:
    """Rows of a ``page_id,importance,change_rate[,complete]`` CSV whose lines start in this
    process's byte range (every line belongs to exactly one process)."""
    import tempfile

    from .io.tables import TableError, read_problem_csv

    size = os.path.getsize(path)
    with open(path, "rb") as f:
        header = f.readline()
        body = len(header)
        lo = body + (size - body) * process_id // num_processes
        hi = body + (size - body) * (process_id + 1) // num_processes

        def line_start(b):  # first line starting at or after byte b
            if b <= body:
                return body
            f.seek(b - 1)
            f.readline()  # finishes the line holding byte b-1 (ends at or after b)
            return f.tell()

        s, e = line_start(lo), line_start(hi)
        f.seek(s)
        data = f.read(max(e - s, 0))
    # parse with the project's validating CSV reader (file:line errors) on a temporary file
    with tempfile.TemporaryDirectory() as d:
        part = os.path.join(d, os.path.basename(path))
        with open(part, "wb") as g:
            g.write(header + data)
        if data.strip():
            try:
                t = read_problem_csv(part)
            except TableError as err:  # name the real file and line (count the lines before this part)
                before = 0
                with open(path, "rb") as f:
                    while f.tell() < s:
                        before += f.read(min(1 << 20, s - f.tell())).count(b"\n")
                raise TableError(path, None if err.line is None else err.line + before - 1, err.message,
                                 column=err.column, reason=err.reason, hint=err.hint) from None
            out = (t.page_id, t.importance, t.change_rate, t.complete)
        else:
            out = (np.zeros(0, object), np.zeros(0), np.zeros(0), np.zeros(0, bool))
    return LocalRows(*out, start=None, fingerprint=file_fingerprint(path))


def read_local_rows(path: str, process_id: int | None = None, num_processes: int | None = None) -> LocalRows:
    """Read only this process's rows of a page table.

    * a directory of ``importance.npy``, ``change_rate.npy``, ``complete.npy``
      (:class:`~jaxcrawl.io.page_table.PageTable`): memory-mapped, rows :func:`row_range`;
    * ``.parquet``: columns ``importance, change_rate[, complete][, page_id]``, the row
      groups whose first row falls in :func:`row_range` (whole row groups per process);
    * ``.csv``: ``page_id,importance,change_rate[,complete]``, the lines starting in this
      process's share of the file's bytes (aligned to line starts).
    """
    num_processes = jax.process_count() if num_processes is None else num_processes
    process_id = jax.process_index() if process_id is None else process_id
    if os.path.isdir(path):
        from .io.page_table import PageTable

        t = PageTable(path)
        s, e = row_range(t.num_pages, num_processes, process_id)
        return LocalRows(np.arange(s, e), np.asarray(t.importance[s:e], np.float64),
                         np.asarray(t.change_rate[s:e], np.float64), np.asarray(t.complete[s:e]).astype(bool),
                         s, file_fingerprint(path))
    if path.endswith(".parquet"):
        import pyarrow.parquet as pq

        f = pq.ParquetFile(path)
        sizes = [f.metadata.row_group(g).num_rows for g in range(f.num_row_groups)]
        starts = np.concatenate([[0], np.cumsum(sizes)])[:-1].astype(int)
        s, e = row_range(int(sum(sizes)), num_processes, process_id)
        groups = [g for g in range(len(sizes)) if s <= starts[g] < e]
        names = set(f.schema_arrow.names)
        for need in ("importance", "change_rate"):
            if need not in names:
                raise ValueError(f"{path}: missing column {need!r} (a page table needs importance, change_rate)")
        cols = [c for c in ("page_id", "importance", "change_rate", "complete") if c in names]
        tab = f.read_row_groups(groups, columns=cols) if groups else None
        first = int(starts[groups[0]]) if groups else 0
        k = 0 if tab is None else tab.num_rows

        def col(name, default):
            if tab is None or name not in names:
                return default
            return tab.column(name).to_numpy(zero_copy_only=False)

        imp = np.asarray(col("importance", np.zeros(0)), np.float64)
        lam = np.asarray(col("change_rate", np.zeros(0)), np.float64)
        for name, a in (("importance", imp), ("change_rate", lam)):
            if not np.all(np.isfinite(a) & (a > 0)):
                i = int(np.flatnonzero(~(np.isfinite(a) & (a > 0)))[0])
                raise ValueError(f"{path}: row {first + i}: {name} must be finite and > 0; got {a[i]!r}")
        return LocalRows(col("page_id", np.arange(first, first + k)), imp, lam,
                         np.asarray(col("complete", np.zeros(k, bool)), bool), first, file_fingerprint(path))
    if path.endswith(".csv"):
        return _csv_rows(path, process_id, num_processes)
    raise ValueError(f"{path}: a page table is a .npy directory, a .parquet or a .csv file")


# -------------------------------------------------------------------- solving
class LocalSolution(NamedTuple):
    """This process's part of a multi-process solve.

    Attributes:
      rate, prob: ``(k,)`` this process's rows of the plan.
      dual: the global dual ν (identical on every process).
      residual: ``sum(rate) - bandwidth`` before the closing correction (global).
      num_steps: root-finding steps.
      converged: whether the root-find met its tolerance.
      start: global index of this process's first row.
      num_pages: the global page count.
    """

    rate: np.ndarray
    prob: np.ndarray
    dual: float
    residual: float
    num_steps: int
    converged: bool
    start: int
    num_pages: int


@functools.partial(jax.jit, static_argnames=("utility", "num_pages", "capped", "max_steps", "rtol"))
def _global_solve(imp, lam, comp, valid, host, cap, budget, *, utility, num_pages, capped, max_steps, rtol):
    from ._src import budget as _budget
    from ._src import gap as _gap
    from .problem import make_policy, raw_problem

    problem = raw_problem(imp, lam, budget, comp)
    a = c = 1.0
    if utility.homogeneous:
        # jaxcrawl.solve's exact change of units: the largest importance and the mean rate at
        # 1 (host caps scale like the bandwidth), then rates, dual and residual scaled back
        a = _budget.unit_scale(jnp.max(jnp.where(valid, jnp.abs(imp), 0.0)))
        c = _budget.unit_scale(budget / num_pages)
    params = utility.params(raw_problem(imp / a, lam / c, budget / c, comp))
    lo, hi = utility.page_bounds(params, budget / c, num_pages, budget.dtype)
    lo = jnp.where(valid, jnp.broadcast_to(lo, imp.shape), 0.0)
    hi = jnp.where(valid, jnp.broadcast_to(hi, imp.shape), 0.0)
    sol = _budget.solve(utility.rate, utility.marginal, params, budget / c, lo, hi,
                        hosts=(host, cap / c) if capped else None, max_steps=max_steps, inner_steps=max_steps,
                        rtol=rtol)
    x, dual, residual, steps, converged = sol.x, sol.dual, sol.residual, sol.num_steps, sol.converged
    # jaxcrawl.solve's log-gap re-solve where the plain dual cannot resolve the answer (a
    # bandwidth far below the change rates; the padding rows are never its origin); with
    # host caps, as politeness.solve_with_host_caps: the uncapped log-gap optimum where the
    # capped solve failed and that optimum keeps every host within its cap
    if utility.gap is not None and not capped:
        opts = (("adjoint", "implicit"), ("max_steps", max_steps), ("rtol", rtol))
        x, dual, residual, steps, converged = _gap.refine(
            _gap.masked(utility.gap), opts, (params, valid), budget / c, lo, hi, x, dual, residual, steps,
            converged)
    elif utility.gap is not None:
        sol = _gap.capped_fallback(_gap.masked(utility.gap), (max_steps, rtol), (params, valid),
                                   budget / c, lo, hi, host, cap / c, sol)
        x, dual, residual, steps, converged = sol.x, sol.dual, sol.residual, sol.num_steps, sol.converged
    dual = dual if utility.dual is None else utility.dual(dual, params)
    policy = make_policy(problem, x * c, _budget.rescale_dual(dual, a, c), residual * c, steps,
                         on_signal=utility.signal_mask(params, imp.shape) & valid, converged=converged)
    return policy.rate, policy.prob, policy.dual, policy.residual, policy.num_steps, policy.converged


def _check_rows(imp, lam, comp, hid, cap, capped, start) -> str | None:
    k = imp.shape[0]
    if imp.ndim != 1 or lam.shape != (k,) or comp.shape != (k,):
        return f"importance, change_rate and complete must be 1-D of one length; got {imp.shape}, {lam.shape}, {comp.shape}"
    for name, a in (("importance", imp), ("change_rate", lam)):
        ok = np.isfinite(a) & (a > 0)
        if not ok.all():
            i = int(np.flatnonzero(~ok)[0])
            return f"{name} must be finite and > 0 for every page; page {start + i} has {a[i]!r}"
    if capped:
        if hid.shape != (k,) or np.any((hid < -1) | (hid >= cap.shape[0])):
            return f"host_id must have shape ({k},) with values in [-1, {cap.shape[0]})"
        if np.any(np.isnan(cap)) or np.any(cap <= 0):
            return "host_cap must be > 0 for every host (inf = uncapped)"
    return None


def _check_feasible(utility, imp, lam, comp, hid, cap, capped, bandwidth, n, dtype) -> None:
    """The budget between the global sums of the pages' bounds (host caps included)."""
    from .problem import raw_problem

    params = utility.params(raw_problem(jnp.asarray(imp), jnp.asarray(lam), jnp.asarray(bandwidth, dtype),
                                        jnp.asarray(comp)))
    lo, hi = (np.broadcast_to(np.asarray(b, np.float64), imp.shape)
              for b in utility.page_bounds(params, jnp.asarray(bandwidth, dtype), n, dtype))
    H = cap.shape[0]
    has = (hid >= 0) if capped else np.zeros(imp.shape, bool)
    lo_h = np.bincount(hid[has], weights=lo[has], minlength=H)
    hi_h = np.bincount(hid[has], weights=hi[has], minlength=H) if np.all(np.isfinite(hi[has])) else \
        np.where(np.bincount(hid[has], weights=~np.isfinite(hi[has]), minlength=H) > 0, np.inf,
                 np.bincount(hid[has], weights=np.where(np.isfinite(hi[has]), hi[has], 0), minlength=H))
    free_hi = hi[~has]
    free_hi = np.inf if np.any(~np.isfinite(free_hi)) else float(np.sum(free_hi))
    tot = allreduce_sum(np.concatenate([[np.sum(lo), free_hi], lo_h, hi_h]))
    sum_lo, free_hi, lo_h, hi_h = tot[0], tot[1], tot[2:2 + H], tot[2 + H:]
    if capped and np.any(lo_h > cap * (1 + 1e-12)):
        h = int(np.flatnonzero(lo_h > cap * (1 + 1e-12))[0])
        raise ValueError(f"host {h}: cap {cap[h]!r} is below the sum of its pages' lower bounds {lo_h[h]!r} "
                         "(e.g. BLC-epsilon floors): infeasible")
    most = free_hi + (np.sum(np.minimum(cap, hi_h)) if capped else 0.0)
    if (bandwidth > most * (1 + 1e-12)) if capped else (bandwidth >= most):
        raise ValueError(f"bandwidth {bandwidth} exceeds what the problem can use ({most}: the pages' upper "
                         "bounds, each capped host at most its cap); lower the bandwidth or raise the caps")
    if bandwidth < sum_lo * (1 - 1e-12):
        raise ValueError(f"bandwidth {bandwidth} is below the sum of the pages' lower bounds ({sum_lo})")


@functools.lru_cache(maxsize=16)
def _blc_epsilon(epsilon: float):
    """One BLCε utility per ε (a static argument of the compiled solve: no recompiles)."""
    from .utilities import binary_epsilon

    return binary_epsilon(epsilon)


def solve_local_rows(importance: Any, change_rate: Any, complete: Any, bandwidth: float,
                     objective: Any = "harmonic", *, epsilon: float = 0.0, host_id: Any = None,
                     host_cap: Any = None, max_steps: int = 100, rtol: float | None = None,
                     dtype: Any = None, mesh: Mesh | None = None) -> LocalSolution:
    """Solve a problem whose pages are spread over the processes: each passes its own rows.

    The rows of process 0, then 1, ... form the global problem (in that order).  The dual
    root-find is :func:`jaxcrawl.solve`'s (the same ``_src`` code) on global arrays sharded
    over every device of every process, so its sums are cross-process all-reduces; the
    result equals the single-process solve of the concatenated rows to rounding.  As there,
    a homogeneous utility is solved in units where the largest importance and the mean rate
    are 1, and a utility with a :class:`~jaxcrawl.GapForm` re-solves on the dual's log-gap
    where the plain dual cannot resolve the answer (with host caps: where the capped solve
    fails and the uncapped answer keeps every host within its cap, as
    :func:`jaxcrawl.politeness.solve_with_host_caps`).

    Args:
      importance, change_rate, complete: this process's ``(k,)`` rows (``k`` may differ
        between processes, and may be 0).
      bandwidth: the global bandwidth R (the same on every process).
      objective: a separable utility's registry name or :class:`~jaxcrawl.Utility`;
        ``"binary-epsilon"`` or ``("binary", epsilon > 0)`` is BLCε.
      host_id: optional ``(k,)`` int host index of this process's pages (``-1``: none);
        a host's pages may sit on several processes.
      host_cap: ``(H,)`` caps of every host (the same on every process).
      max_steps, rtol: as in :func:`jaxcrawl.allocate` (``max_steps`` also caps the
        per-host root-find).
      dtype: computation dtype (default float64 with ``jax_enable_x64``, else float32).
      mesh: the page mesh (default: every device of every process).

    Returns:
      :class:`LocalSolution` (this process's rows of the plan, the global dual).
    """
    from .scale import page_mesh
    from .utilities import get_utility

    if not np.isfinite(bandwidth) or bandwidth <= 0:
        raise ValueError(f"bandwidth must be finite and > 0; got {bandwidth}")
    if objective == "binary-epsilon":
        objective, epsilon = "binary", epsilon or 0.4
    utility = _blc_epsilon(float(epsilon)) if objective == "binary" and epsilon else get_utility(objective)
    if not utility.separable or utility.marginal is None:
        raise ValueError(f"objective {utility.name!r} couples pages (not separable) or has no marginal, so it has "
                         "no multi-process form; gather the pages on one process and call jaxcrawl.solve")
    mesh = page_mesh() if mesh is None else mesh
    dtype = jnp.dtype(dtype or (jnp.float64 if jax.config.jax_enable_x64 else jnp.float32))
    imp = np.asarray(importance, dtype)
    k = imp.shape[0]
    block, counts = _block(k)
    start = int(counts[: jax.process_index()].sum())
    n = int(counts.sum())
    capped = host_cap is not None
    hid = np.full(k, -1, np.int32) if host_id is None else np.asarray(host_id, np.int32)
    cap = np.full(1, np.inf, dtype) if not capped or np.size(host_cap) == 0 else np.asarray(host_cap, dtype)
    lam = np.asarray(change_rate, dtype)
    comp = np.asarray(complete, bool)
    raise_together(_check_rows(imp, lam, comp, hid, cap, capped, start))
    _check_feasible(utility, imp, lam, comp, hid, cap, capped, float(bandwidth), n, dtype)
    g = global_pages(mesh, block, (imp, 1.0), (lam, 1.0), (comp, False), (np.ones(k, bool), False), (hid, -1))
    out = _global_solve(*g, replicated(mesh, cap), replicated(mesh, np.asarray(bandwidth, dtype)), utility=utility,
                        num_pages=n, capped=capped, max_steps=int(max_steps), rtol=rtol)
    rate, prob, dual, residual, steps, converged = out
    return LocalSolution(local_rows(rate, k), local_rows(prob, k), _scalar(dual), _scalar(residual),
                         int(_scalar(steps)), bool(np.asarray(converged.addressable_data(0))), start, n)


# ------------------------------------------------------------------ launching
def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on ``host`` a moment ago (for a local coordinator)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def launch(command: Sequence[str], num_processes: int, *, port: int | None = None,
           env: dict[str, str] | None = None, timeout: float | None = None, prefix: bool = True,
           stop_grace_seconds: float = 5.0, stream: Any = None) -> int:
    """Run ``command`` as ``num_processes`` local processes of one ``jax.distributed`` job.

    Each process gets ``JAX_COORDINATOR_ADDRESS=127.0.0.1:PORT``, ``JAX_NUM_PROCESSES`` and
    ``JAX_PROCESS_ID`` in its environment (what :func:`initialize` and the CLI's
    ``--coordinator`` / ``--num-processes`` / ``--process-id`` defaults read).  Their output
    is forwarded line by line with a ``[i]`` prefix.  When one process fails (non-zero
    status) the others are stopped (SIGTERM, then SIGKILL after ``stop_grace_seconds``);
    after ``timeout`` seconds all are stopped.

    Returns:
      0 when every process succeeded; else the first failure's status (``128 + signal``
      for a process killed by a signal; 124 on timeout).
    """
    import signal
    import subprocess
    import sys
    import threading
    import time

    if num_processes < 1:
        raise ValueError(f"num_processes must be >= 1; got {num_processes}")
    if not command:
        raise ValueError("launch needs a command")
    stream = sys.stdout if stream is None else stream
    port = free_port() if port is None else int(port)
    lock = threading.Lock()
    procs = []
    base = dict(os.environ if env is None else env)
    for i in range(num_processes):
        e = dict(base, JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{port}", JAX_NUM_PROCESSES=str(num_processes),
                 JAX_PROCESS_ID=str(i), PYTHONUNBUFFERED="1")
        procs.append(subprocess.Popen(list(command), env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True, errors="replace"))

    def forward(i, p):
        for line in p.stdout:
            with lock:
                stream.write((f"[{i}] " if prefix else "") + line)
                stream.flush()

    threads = [threading.Thread(target=forward, args=(i, p), daemon=True) for i, p in enumerate(procs)]
    for t in threads:
        t.start()

    def stop_all():
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        end = time.monotonic() + stop_grace_seconds
        for p in procs:
            try:
                p.wait(max(end - time.monotonic(), 0.01))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    status = 0
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        while True:
            codes = [p.poll() for p in procs]
            failed = [c for c in codes if c not in (None, 0)]
            if failed:
                c = failed[0]
                status = 128 - c if c < 0 else c
                stop_all()
                break
            if all(c == 0 for c in codes):
                break
            if deadline is not None and time.monotonic() > deadline:
                status = 124
                stop_all()
                break
            time.sleep(0.05)
    except KeyboardInterrupt:
        stop_all()
        status = 130
    for t in threads:
        t.join(timeout=5)
    return status
