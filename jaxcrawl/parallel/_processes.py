r"""Several processes, one job: JAX's multi-controller runtime (``jax.distributed``).

Every process runs the same program (one per host or GPU).  :func:`initialize` joins the
job; each process reads its own contiguous rows (:func:`row_range`) and the solve runs on
global arrays assembled with ``jax.make_array_from_process_local_data`` (no process holds
another's rows), so the dual's sums become all-reduces (gloo on CPU, NCCL on GPU) and every
process gets the same dual and its own rows of the plan.  Host values (streamed partial
sums, counts, fingerprints) are combined by :func:`allgather_host` -- an exact byte-level
all-gather reduced in process order on every process, so every process computes
bit-identical results.  A dead process stops the job within the coordination service's
heartbeat timeout (:func:`initialize` sets it short); inputs that differ between processes
are refused at start-up (:func:`check_consistent`).
"""
from __future__ import annotations

import contextlib
import functools
import os
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from .._src import interrupts
from .._src import pipeline as _pipeline
from .._src.checks import _raise_unless_converged
from .._src.partition import fingerprint
from ..core.bounds import check_usable_bandwidth
from ..core.problem import Policy
from ..io import read_local_rows
from ._sharding import page_mesh

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
        # no preemption notifier: it takes SIGTERM over (the process would swallow it and exit 0)
        jax.config.update("jax_enable_preemption_service", False)
        jax.distributed.initialize(coordinator_address=coordinator_address, num_processes=num_processes,
                                   process_id=process_id, initialization_timeout=initialization_timeout,
                                   heartbeat_timeout_seconds=heartbeat_timeout_seconds, **kwargs)
        interrupts.rearm()  # the runtime may have installed its own signal handlers
    return page_mesh(jax.devices(), axis_name)


def is_multiprocess() -> bool:
    """True when this process is one of several of a ``jax.distributed`` job."""
    return jax.process_count() > 1


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
    with _peers_alive("an all-gather"):
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

        with _peers_alive(f"the barrier {name!r}"):
            multihost_utils.sync_global_devices(name)


@contextlib.contextmanager
def _peers_alive(what: str):
    """A collective whose peer process ended (it failed alone, or was stopped) is a
    ``ConnectionError`` (an ``OSError``: the command's error, status 2, and its temporary
    outputs removed), not a runtime traceback."""
    try:
        yield
    except jax.errors.JaxRuntimeError as err:
        text = str(err)
        if "RESOURCE_EXHAUSTED" in text:
            raise
        first = text.strip().splitlines()[0] if text.strip() else type(err).__name__
        raise ConnectionError(f"process {jax.process_index()}: another process of the job ended during {what} "
                              f"({first[:300]}); see that process's messages") from None


# --------------------------------------------------------- consistency checks
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


# ------------------------------------------------------------------ the page source
class ProcessRows(_pipeline.PageSource):
    """The pages of one problem spread over the processes: each passes its own rows.

    The rows of process 0, then 1, ... form the global problem.  :func:`jaxcrawl.solve` runs
    the one pipeline on global arrays sharded over every device of every process (its sums
    are cross-process all-reduces) and returns this process's rows of the plan, equal to
    the single-process solve of the concatenated rows to rounding.  Uneven splits are padded
    to equal blocks with pages pinned at rate 0; bounds that depend on the page count (BLCε's
    floor) use the true count.  Host caps (``HostCaps(host_id, cap)``: this process's
    ``(k,)`` host ids, every host's ``(H,)`` caps) and bounds (this process's rows, or
    scalars) work when a host's pages span processes.  Bad input on any process is an error
    on every process.

    Args:
      importance, change_rate, complete: this process's ``(k,)`` rows (``k`` may be 0).
      bandwidth: the global bandwidth (the same on every process).
      dtype: computation dtype (default float64 with ``jax_enable_x64``, else float32).
      mesh: the page mesh (default: every device of every process).
      page_id: this process's ``(k,)`` page ids: checked distinct across every process's
        rows (a repeat is an error on every process naming the id and both rows).
      min_interval, max_interval: this process's ``(k,)`` revisit bounds (a page table's
        columns): the rate bounds ``[1/max_interval, 1/min_interval]`` apply together with
        the ``bounds`` of the solve (the tighter of each).
      host_names: the ``(H,)`` names of the hosts of ``HostCaps.cap`` (the same on every
        process), used by the messages about a host (default: its index into ``cap``).

    Attributes:
      start: global index of this process's first row; ``num_pages``: the global count.
    """

    def __init__(self, importance: Any, change_rate: Any, complete: Any, bandwidth: float, *,
                 dtype: Any = None, mesh: Mesh | None = None, page_id: Any = None, min_interval: Any = None,
                 max_interval: Any = None, host_names: Any = None):
        bandwidth = float(bandwidth)
        self.host_names = None if host_names is None else [str(h) for h in host_names]
        self.dtype = np.dtype(dtype or (np.float64 if jax.config.jax_enable_x64 else np.float32))
        self.importance = np.asarray(importance, self.dtype)
        self.change_rate = np.asarray(change_rate, self.dtype)
        self.complete = np.asarray(complete, bool)
        self.bandwidth = bandwidth
        self.mesh = page_mesh() if mesh is None else mesh
        k = self.importance.shape[0] if self.importance.ndim else 0
        self.block, counts = _block(k)
        self.start = int(counts[: jax.process_index()].sum())
        self.num_pages = int(counts.sum())
        if self.num_pages == 0:
            raise ValueError("no pages: every process's rows are empty")
        if not np.isfinite(bandwidth) or bandwidth <= 0:
            raise ValueError(f"bandwidth must be finite and > 0; got {bandwidth}")
        self.page_id = None if page_id is None else np.asarray(page_id)
        if self.page_id is not None:
            raise_together(None if self.page_id.shape == (k,) else
                           f"page_id must have shape ({k},); got {self.page_id.shape}")
            raise_together(_repeated_id(self.page_id, counts))
        with np.errstate(divide="ignore"):  # a table's revisit bounds as rate bounds
            self.rate_bounds = (None if max_interval is None else 1.0 / np.asarray(max_interval, np.float64),
                                None if min_interval is None else 1.0 / np.asarray(min_interval, np.float64))

    def solve(self, obj, caps, bounds, opts):
        if not obj.separable or obj.marginal is None:
            raise ValueError(f"objective {obj.name!r} couples pages (not separable), so it has no multi-process "
                             "form; gather the pages on one process and call jaxcrawl.solve")
        if opts.adjoint != "implicit":
            raise ValueError("adjoint='unrolled' is not available across processes (its plan is numpy rows)")
        imp, lam, comp, dtype = self.importance, self.change_rate, self.complete, self.dtype
        k = imp.shape[0]
        capped = caps is not None
        hid = np.full(k, -1, np.int32) if not capped else np.asarray(caps.host_id, np.int32)
        cap = (np.full(1, np.inf, dtype) if not capped or np.size(caps.cap) == 0
               else np.asarray(caps.cap, dtype))
        lower, upper = (None if b is None else np.broadcast_to(np.asarray(b, dtype), (k,))
                        for b in _tighter(bounds or (None, None), self.rate_bounds))
        raise_together(_check_rows(imp, lam, comp, hid, cap, capped, self.start, lower, upper))
        _check_feasible(obj, imp, lam, comp, hid, cap, capped, self.bandwidth, self.num_pages, dtype, lower, upper,
                        page_id=self.page_id, host_names=self.host_names)
        extra = [(b, 0.0) for b in (lower, upper) if b is not None]
        g = global_pages(self.mesh, self.block, (imp, 1.0), (lam, 1.0), (comp, False), (np.ones(k, bool), False),
                         (hid, -1), *extra)
        imp_g, lam_g, comp_g, valid, host = g[:5]
        rest = iter(g[5:])
        lo_g, hi_g = (None if b is None else next(rest) for b in (lower, upper))
        out = _solve_global(obj, opts._replace(throw=False), self.num_pages, capped, imp_g, lam_g, comp_g, valid, host,
                            replicated(self.mesh, cap), replicated(self.mesh, np.asarray(self.bandwidth, dtype)),
                            lo_g, hi_g)
        converged = bool(np.asarray(out.converged.addressable_data(0)))
        if opts.throw:  # on the host, as an eager solve in memory raises it
            _raise_unless_converged(f"solve({obj.name!r})", converged, _scalar(out.num_steps), _scalar(out.residual))
        host_dual = None
        if capped:
            host_dual = np.asarray(out.host_dual.addressable_data(0))[: np.size(caps.cap)]
        return Policy(rate=local_rows(out.rate, k), prob=local_rows(out.prob, k),
                      on_signal=local_rows(out.on_signal, k), dual=_scalar(out.dual), residual=_scalar(out.residual),
                      num_steps=int(_scalar(out.num_steps)), converged=converged,
                      host_dual=host_dual)

    @classmethod
    def read(cls, path: str, bandwidth: float, **kwargs: Any) -> ProcessRows:
        """This process's rows of a page table file (``.npy`` directory, Parquet row groups or
        CSV byte ranges aligned to line starts; :func:`row_range`), with its ``page_id``."""
        error = rows = None
        try:
            rows = read_local_rows(path)
        except ValueError as err:  # a bad row on one process stops every process cleanly
            error = str(err)
        raise_together(error)
        src = cls(rows.importance, rows.change_rate, rows.complete, bandwidth, page_id=rows.page_id,
                  min_interval=rows.min_interval, max_interval=rows.max_interval, **kwargs)
        src.fingerprint = rows.fingerprint
        return src


def _tighter(bounds, table_bounds):
    """The larger lower and the smaller upper of two ``(lower, upper)`` rate bounds (None: none)."""
    lo = [b for b in (bounds[0], table_bounds[0]) if b is not None]
    hi = [b for b in (bounds[1], table_bounds[1]) if b is not None]
    return (np.maximum(*lo) if len(lo) == 2 else (lo[0] if lo else None),
            np.minimum(*hi) if len(hi) == 2 else (hi[0] if hi else None))


def _id_hashes(ids: np.ndarray, chunk: int = 1 << 18) -> np.ndarray:
    """``(n, 2)`` uint64: two 64-bit polynomial hashes of each id's text (int64 ids as their
    decimal text, so ``17`` and ``"17"`` agree), vectorised over the ids' UTF-8 bytes,
    ``chunk`` ids at a time (memory O(chunk))."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = ids.shape[0]
    out = np.empty((n, 2), np.uint64)
    for s in range(0, n, chunk):
        part = ids[s:s + chunk]
        if part.dtype != object:
            arr = pa.array(part)
        else:
            try:  # object arrays of str, converted by Arrow (no Python loop)
                arr = pa.array(part, pa.large_string())
            except (pa.ArrowInvalid, pa.ArrowTypeError):
                arr = pa.array([str(x) for x in part.tolist()], pa.large_string())
        out[s:s + chunk] = _text_hashes(pc.cast(arr, pa.large_string()))
    return out


def _text_hashes(text) -> np.ndarray:
    m = len(text)
    offs = np.frombuffer(text.buffers()[1], np.int64, m + 1, text.offset)
    data = np.frombuffer(text.buffers()[2], np.uint8)[offs[0]:offs[-1]].astype(np.uint64) + np.uint64(1)
    offs = offs - offs[0]
    length = np.diff(offs)
    pos = np.arange(data.size) - np.repeat(offs[:-1], length)
    nz = length > 0
    out = np.empty((m, 2), np.uint64)
    with np.errstate(over="ignore"):
        for j, base in enumerate((np.uint64(0x100000001B3), np.uint64(0x9E3779B97F4A7C15))):
            powers = np.cumprod(np.full(max(int(length.max(initial=0)), 1), base, np.uint64))
            h = np.zeros(m, np.uint64)
            if data.size:
                h[nz] = np.add.reduceat(data * powers[pos], offs[:-1][nz])
            out[:, j] = h ^ (length.astype(np.uint64) * np.uint64(0xBF58476D1CE4E5B9))
    return out


def _repeated_id(page_id: np.ndarray, counts: np.ndarray) -> str | None:
    """This process's message for a page id that is also on another row (of any process),
    else None.  The ids' two 64-bit hashes are gathered (16 bytes a page) and sorted; a
    repeated pair names the later row's id (two different ids of this process that share
    both hashes are told apart by their text)."""
    h = _id_hashes(page_id)
    size = int(counts.max()) if counts.size else 0
    padded = np.zeros((size, 2), np.uint64)
    padded[: h.shape[0]] = h
    every = allgather_host(padded)  # (P, size, 2)
    rows = np.concatenate([every[p, : int(c)] for p, c in enumerate(counts)])
    order = np.lexsort((rows[:, 1], rows[:, 0]))
    srt = rows[order]
    same = np.all(srt[1:] == srt[:-1], axis=1)
    if not same.any():
        return None
    start = int(counts[: jax.process_index()].sum())
    for i in np.flatnonzero(same).tolist():
        a, b = sorted((int(order[i]), int(order[i + 1])))
        if start <= b < start + page_id.shape[0]:  # this process holds the later row
            if a >= start and str(page_id[a - start]) != str(page_id[b - start]):
                continue  # a hash collision of two different ids on this process
            return (f"duplicate page_id {page_id[b - start]!r}: rows {a + 1} and {b + 1} of the table "
                    "(page ids must be distinct)")
    return None


@functools.partial(jax.jit, static_argnums=(0, 1, 2, 3))
def _solve_global(obj, opts, num_pages, capped, imp, lam, comp, valid, host, cap, budget, lower, upper):
    pages = _pipeline.Pages(imp, lam, budget, comp)
    return _pipeline.solve_pages(obj, pages, lower, upper, host if capped else None, cap if capped else None,
                                 opts, valid=valid, num_pages=num_pages)


def _check_rows(imp, lam, comp, hid, cap, capped, start, lower, upper) -> str | None:
    k = imp.shape[0]
    if imp.ndim != 1 or lam.shape != (k,) or comp.shape != (k,):
        return (f"importance, change_rate and complete must be 1-D of one length; got {imp.shape}, {lam.shape}, "
                f"{comp.shape}")
    for name, a in (("importance", imp), ("change_rate", lam)):
        ok = np.isfinite(a) & (a > 0)
        if not ok.all():
            i = int(np.flatnonzero(~ok)[0])
            return f"{name} must be finite and > 0 for every page; page {start + i} has {a[i]!r}"
    if capped:
        if hid.shape != (k,) or np.any((hid < -1) | (hid >= cap.shape[0])):
            return f"caps: host_id must have shape ({k},) with values in [-1, {cap.shape[0]})"
        if np.any(np.isnan(cap)) or np.any(cap <= 0):
            return "caps: cap must be > 0 for every host (inf = uncapped)"
    for name, b in (("lower", lower), ("upper", upper)):
        if b is not None and (np.any(np.isnan(b)) or np.any(b < 0)):
            return f"bounds: {name} must be >= 0 for every page"
    return None


def _check_feasible(obj, imp, lam, comp, hid, cap, capped, bandwidth, n, dtype, lower, upper, page_id=None,
                    host_names=None) -> None:
    """The budget between the global sums of the pages' limits (host caps included); a
    refusal within ``dtype``'s rounding of the inputs suggests solving in float64."""
    p = _pipeline.Pages(jnp.asarray(imp), jnp.asarray(lam), jnp.asarray(bandwidth, dtype), jnp.asarray(comp))
    lo, hi = (np.asarray(v, np.float64) for v in _pipeline.page_limits(
        obj, obj.params(p), p.bandwidth, n, dtype, lower, upper, imp.shape))
    local = None
    if np.any(lo > hi):
        i = int(np.flatnonzero(lo > hi)[0])
        local = (f"bounds: lower must be <= upper for every page; {_pipeline._page_label(page_id, i)} "
                 f"{'(a row of this process) ' if page_id is None else ''}has lower {float(lo[i])!r} > upper "
                 f"{float(hi[i])!r} (its revisit bounds, or an upper bound below the objective's own floor)")
    raise_together(local)
    usable = allreduce_sum([np.sum(~comp), np.sum(np.where(comp, lam, 0.0), dtype=np.float64)])
    check_usable_bandwidth(bandwidth, usable[0], usable[1])  # the rule of every page source (core.bounds)
    H = cap.shape[0]
    has = (hid >= 0) if capped else np.zeros(imp.shape, bool)
    lo_h = np.bincount(hid[has], weights=lo[has], minlength=H)
    inf_h = np.bincount(hid[has], weights=~np.isfinite(hi[has]), minlength=H)
    fin_h = np.bincount(hid[has], weights=np.where(np.isfinite(hi[has]), hi[has], 0.0), minlength=H)
    free_hi = hi[~has]
    free_inf = float(np.sum(~np.isfinite(free_hi)))
    free_fin = float(np.sum(np.where(np.isfinite(free_hi), free_hi, 0.0)))
    count_h = np.bincount(hid[has], minlength=H)
    tot = allreduce_sum(np.concatenate([[np.sum(lo), free_fin, free_inf], lo_h, inf_h, fin_h, count_h]))
    sum_lo, free_fin, free_inf = tot[:3]
    lo_h, inf_h, fin_h, count_h = (tot[3 + k * H:3 + (k + 1) * H] for k in range(4))
    hi_h = np.where(inf_h > 0, np.inf, fin_h)
    free_hi = np.inf if free_inf > 0 else free_fin
    if capped and np.any(lo_h > cap * (1 + 1e-12)):
        h = int(np.flatnonzero(lo_h > cap * (1 + 1e-12))[0])
        host = (f"host {host_names[h]!r}" if host_names is not None and h < len(host_names)
                else f"host {h} (its index into caps.cap)")
        raise ValueError(f"caps: {host}'s cap {float(cap[h])!r} is below the sum of its pages' lower bounds "
                         f"{float(lo_h[h])!r} (e.g. BLC-epsilon floors): infeasible"
                         + _pipeline.rounding_hint(dtype, lo_h[h], float(cap[h]), count_h[h]))
    most = free_hi + (np.sum(np.minimum(cap, hi_h)) if capped else 0.0)
    if (bandwidth > most * (1 + 1e-12)) if capped else (bandwidth >= most):
        raise ValueError(f"bandwidth {bandwidth} exceeds what the problem can use ({most}: the pages' upper "
                         "bounds, each capped host at most its cap); lower the bandwidth or raise the caps"
                         + _pipeline.rounding_hint(dtype, bandwidth, most, n))
    if bandwidth < sum_lo * (1 - 1e-12):
        raise ValueError(f"bandwidth {bandwidth} is below the sum of the pages' lower bounds ({sum_lo})"
                         + _pipeline.rounding_hint(dtype, sum_lo, bandwidth, n))
