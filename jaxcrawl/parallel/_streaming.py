"""A page table on disk solved chunk by chunk (memory O(chunk), one read of the table a pass)."""
from __future__ import annotations

import os
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._src import chunks as _chunks
from .._src import pipeline as _pipeline
from .._src.checks import NonConvergenceError
from .._src.fileio import progress_bar
from .._src.partition import file_fingerprint, row_range
from ..core.bounds import check_usable_bandwidth
from ..core.problem import Policy
from ..io import PageTable
from . import _processes as _proc


class StreamedTable(_pipeline.PageSource):
    """The pages of a table on disk (:class:`~jaxcrawl.io.PageTable`, ``.npy`` memory maps),
    read chunk by chunk by :func:`jaxcrawl.solve`.

    The same pipeline as in memory -- units, bracket, Newton iteration, log-gap re-solve,
    closing correction, checks -- with each pass over the pages a sequential read of the
    table (one jitted program per chunk, chunks padded to one size): one pass for the
    limits, one for the bracket, one per root-finding step, one for the residual, one to
    write the plan.  Host caps and ``adjoint='unrolled'`` are refused (named).  In a
    ``jax.distributed`` job each process streams its :func:`row_range` and the partial sums
    are combined across processes; ``rate`` then holds this process's rows (from
    :attr:`start`), and ``out`` (on a filesystem every process sees) receives every row.

    Args:
      table: a :class:`~jaxcrawl.io.PageTable` or its directory.
      bandwidth: the total crawl rate R (> 0).
      chunk_size: pages per chunk.
      dtype: computation dtype (default: the table's when it is a float type, else float32).
      out: write the rates to this ``.npy`` file (a memory map) instead of memory; the
        policy's ``prob`` and ``on_signal`` are then ``None`` (they follow from the rates and
        the table's ``complete`` column for the objective's signal-crawled pages).
      progress: a tqdm bar on stderr over the chunks read: ``None`` when stderr is a
        terminal and the run takes over a second, ``True`` always, ``False`` never.

    Attributes:
      start: global index of this process's first row; ``num_passes``: reads of the table
        by the last solve.
    """

    def __init__(self, table: PageTable | str | os.PathLike, bandwidth: float, *, chunk_size: int = 1 << 20,
                 dtype: Any = None, out: str | None = None, progress: bool | None = None):
        self.table = table if isinstance(table, PageTable) else PageTable(table)
        bandwidth = float(bandwidth)
        if not np.isfinite(bandwidth) or bandwidth <= 0:
            raise ValueError(f"bandwidth must be finite and > 0; got {bandwidth}")
        if isinstance(chunk_size, bool) or int(chunk_size) != chunk_size or chunk_size < 1:
            raise ValueError(f"chunk_size must be an integer >= 1; got {chunk_size!r}")
        self.bandwidth = bandwidth
        self.chunk_size = int(chunk_size)
        kind = jnp.dtype(self.table.importance.dtype)
        dtype = jnp.dtype(dtype or (kind if kind.kind == "f" else jnp.float32))
        if dtype == jnp.float64 and not jax.config.jax_enable_x64:
            dtype = jnp.dtype(jnp.float32)
        self.dtype = dtype
        self.out = None if out is None else os.fspath(out)
        self.progress = progress
        self.start, self.stop = (row_range(self.table.num_pages) if jax.process_count() > 1
                                 else (0, self.table.num_pages))
        error = None
        try:  # the page table's rules on this process's rows (a chunk at a time), before any output
            self.table.check_rows(self.start, self.stop)
            self._check_representable()
        except ValueError as err:
            error = str(err)
        _proc.raise_together(error)
        # the rule every page source shares: all pages complete and the bandwidth at least their
        # total change rate is refused, whatever the objective (core.bounds.check_usable_bandwidth)
        sums = self._signal_sums()
        if jax.process_count() > 1:
            sums = _proc.allreduce_sum(sums)
        check_usable_bandwidth(bandwidth, sums[0], sums[1])
        self.num_passes = 0

    def _signal_sums(self, chunk: int = 1 << 22) -> np.ndarray:
        """``[pages not complete, total change rate of the complete pages]`` of this process's
        rows (float64), a chunk at a time."""
        incomplete = usable = 0.0
        for start in range(self.start, self.stop, chunk):
            stop = min(start + chunk, self.stop)
            comp = np.asarray(self.table.complete[start:stop]) != 0
            incomplete += float(np.sum(~comp))
            usable += float(np.sum(np.asarray(self.table.change_rate[start:stop])[comp], dtype=np.float64))
        return np.asarray([incomplete, usable], np.float64)

    def _check_representable(self, chunk: int = 1 << 22) -> None:
        """``ValueError`` for a value that is valid but not a finite number > 0 in the
        computation dtype (e.g. 1e-300 in float32, which would be read as 0)."""
        if self.dtype == jnp.float64:
            return
        for name in ("importance", "change_rate"):
            col = getattr(self.table, name)
            for start in range(self.start, self.stop, chunk):
                v = np.asarray(col[start:min(start + chunk, self.stop)])
                with np.errstate(over="ignore", under="ignore"):
                    cast = v.astype(self.dtype)
                bad = ~(np.isfinite(cast) & (cast > 0))
                if bad.any():
                    i = int(np.flatnonzero(bad)[0])
                    raise ValueError(f"{self.table.directory}: row {start + i + 1}: {name} {float(v[i])!r} is not a "
                                     f"finite number > 0 in {jnp.dtype(self.dtype).name}; solve in float64 "
                                     "(--x64, with jax_enable_x64)")

    @property
    def num_pages(self) -> int:
        return self.table.num_pages

    def solve(self, obj, caps, bounds, opts):
        if caps is not None:
            raise ValueError("caps: host caps are not available on a streamed table; load the pages and solve "
                             "in memory (or across processes with jaxcrawl.parallel.ProcessRows)")
        if opts.adjoint != "implicit":
            raise ValueError("adjoint='unrolled': a streamed table's plan is written to numpy rows, which have "
                             "no derivatives")
        if not obj.separable or obj.marginal is None:
            raise ValueError(f"objective {obj.name!r} couples pages (not separable), so it cannot be solved chunk "
                             "by chunk; load the table and call jaxcrawl.solve")
        n = self.num_pages
        lower, upper = ((None if b is None else (np.asarray(b, np.float64) if np.ndim(b) == 0 else b))
                        for b in bounds)
        for name, b in (("lower", lower), ("upper", upper)):
            if b is not None and np.ndim(b) and np.shape(b) != (n,):
                raise ValueError(f"bounds: {name} must be a scalar or have shape ({n},); got {np.shape(b)}")
        multi = jax.process_count() > 1
        if multi:
            _proc.check_consistent(table=file_fingerprint(self.table.directory), bandwidth=self.bandwidth,
                                   objective=obj.name, dtype=str(self.dtype), chunk_size=self.chunk_size,
                                   options=tuple(opts), out=self.out)
            comm = _chunks.Comm(True, _proc.allreduce_sum, _proc.allreduce_max, _proc.allgather_host,
                                _proc.barrier, jax.process_index())
        else:
            comm = _chunks.Comm(False, np.asarray, np.asarray, lambda a: np.asarray(a)[None], lambda name: None, 0)
        bar = progress_bar(None, "stream", quiet=self.progress is False, unit="chunk", force=self.progress is True)
        try:
            res = _chunks.solve_table(self.table, self.bandwidth, obj, opts, lower=lower, upper=upper,
                                      dtype=self.dtype, chunk_size=self.chunk_size, out_path=self.out, bar=bar,
                                      comm=comm, first=self.start, last=self.stop)
        finally:
            bar.close()
        self.num_passes = res.num_passes
        if opts.throw and not res.converged:
            raise NonConvergenceError(f"solve({obj.name!r}) on a streamed table did not converge: stopped after "
                                      f"{res.num_steps} steps with residual {res.residual} (before the closing "
                                      "correction); raise max_steps or check the inputs")
        return Policy(rate=res.rate, prob=res.prob, on_signal=res.on_signal, dual=res.dual, residual=res.residual,
                      num_steps=res.num_steps, converged=res.converged)
