"""Which rows a process owns, and cheap fingerprints of inputs (host-side, standard library + NumPy)."""
from __future__ import annotations

import hashlib
import os
from typing import Any

import jax
import numpy as np


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
