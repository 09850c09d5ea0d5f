"""The checkpoint store that sweeps and reproductions share: chunks of finished work, each
written atomically, reused when their fingerprints match."""
from __future__ import annotations

import hashlib
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import numpy as np

from .._src.fileio import atomic_write
from ._schema import PathLike


def _to_numpy_tree(tree):
    return jax.tree_util.tree_map(lambda a: np.asarray(a) if isinstance(a, jax.Array) else a, tree)


class CheckpointStore:
    """Chunks of finished work, pickled one file per chunk, reused when fingerprints match.

    Each file holds ``{"fingerprint": str, "chunk": str, "value": value}`` and is written
    with :func:`atomic_write`, so a run killed mid-write leaves no broken chunk.
    ``reused``/``computed`` count the chunks of this run.
    """

    def __init__(self, directory: PathLike, fingerprint: str, *, enabled: bool = True):
        self.directory = Path(directory)
        self.fingerprint = fingerprint
        self.enabled = enabled
        self.reused = 0
        self.computed = 0

    def _path(self, chunk: str) -> Path:
        safe = "".join(c if c.isalnum() or c in "-_.=" else "_" for c in chunk)
        digest = hashlib.sha1(chunk.encode()).hexdigest()[:8]
        return self.directory / f"{safe[:80]}-{digest}.pkl"

    def load(self, chunk: str) -> tuple[bool, Any]:
        """``(True, value)`` if a matching chunk is stored, else ``(False, None)``."""
        if not self.enabled:
            return False, None
        path = self._path(chunk)
        if not path.is_file():
            return False, None
        try:
            with open(path, "rb") as fh:
                stored = pickle.load(fh)
        except Exception:  # a corrupt or foreign file: recompute
            return False, None
        if stored.get("fingerprint") != self.fingerprint or stored.get("chunk") != chunk:
            return False, None
        return True, stored["value"]

    def save(self, chunk: str, value: Any) -> None:
        """Store ``value`` as ``chunk`` (atomically)."""
        if not self.enabled:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        record = {"fingerprint": self.fingerprint, "chunk": chunk, "value": value}

        def write(tmp):
            with open(tmp, "wb") as fh:
                pickle.dump(record, fh, protocol=pickle.HIGHEST_PROTOCOL)

        atomic_write(self._path(chunk), write, keep_if_interrupted=True)

    def get_or_compute(self, chunk: str, fn: Callable[[], Any]) -> Any:
        """The stored value of ``chunk``, or ``fn()`` (converted to NumPy, then stored)."""
        ok, value = self.load(chunk)
        if ok:
            self.reused += 1
            return value
        value = _to_numpy_tree(fn())
        self.save(chunk, value)
        self.computed += 1
        return value
