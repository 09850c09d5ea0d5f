"""Atomic file writing and the checkpoint store shared by sweeps and reproductions.

Every file jaxcrawl writes goes through :func:`atomic_write`: the content is written to a
temporary file in the destination's directory, flushed to disk, and renamed over the
destination in one step.  A run killed mid-write leaves the previous complete file (or
none), never a truncated one; a failed write leaves no temporary file behind.
"""
from __future__ import annotations

import hashlib
import json
import os
import pickle
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import numpy as np

from jaxcrawl._src import interrupts

__all__ = ["atomic_write", "same_file", "write_json", "save_tree", "load_tree", "CheckpointStore"]

PathLike = str | os.PathLike


def _new_file_mode(path: str) -> int:
    """Permissions for a new version of ``path``: the old file's, else ``0o666 & ~umask``."""
    try:
        return os.stat(path).st_mode & 0o7777
    except OSError:
        mask = os.umask(0)
        os.umask(mask)
        return 0o666 & ~mask


def same_file(a: PathLike, b: PathLike) -> bool:
    """Whether two paths name one file: the same path, another spelling, a symlink or a
    hard link (the last only when both exist)."""
    a, b = os.fspath(a), os.fspath(b)
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    return os.path.exists(a) and os.path.exists(b) and os.path.samefile(a, b)


def atomic_write(path: PathLike, write_fn: Callable[[str], None], *,
                 inputs: tuple[PathLike | None, ...] = (), keep_if_interrupted: bool = False) -> None:
    """Write ``path`` atomically: ``write_fn(tmp_path)`` fills a temporary file in the same
    directory, which is fsynced, given the old file's permissions (or the umask's default
    for a new file) and renamed over ``path`` (the directory is then fsynced where the
    platform allows); on any error (or interrupt) it is removed and ``path`` is untouched.

    ``inputs``: files the run reads; ``ValueError`` (before anything is written) when
    ``path`` names one of them -- the same path, another spelling, a symlink or a hard
    link -- so a run never replaces its own input.

    Inside the ``jaxcrawl`` command, a SIGINT/SIGTERM received during the write -- also one
    whose exception was lost where Python raised it (``jaxcrawl/_src/interrupts.py``) --
    raises before the rename, so an interrupted command never replaces an output;
    ``keep_if_interrupted=True`` (finished work: checkpoints) renames first, then raises.
    """
    path = os.fspath(path)
    for inp in inputs:
        if inp is not None and same_file(path, inp):
            raise ValueError(f"{path}: the output is the input file {os.fspath(inp)}; refusing to overwrite it")
    d = os.path.dirname(path) or "."
    mode = _new_file_mode(path)
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp_", suffix=os.path.splitext(path)[1])
    os.close(fd)
    try:
        write_fn(tmp)
        os.chmod(tmp, mode)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        if not keep_if_interrupted:
            interrupts.raise_if_received()
        os.replace(tmp, path)
        _fsync_directory(d)
        interrupts.raise_if_received()
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def _fsync_directory(directory: str) -> None:
    """Make a rename durable: fsync the directory (skipped where directories cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_json(path: PathLike, obj: Any, **dump_kwargs) -> None:
    """``json.dump(obj)`` to ``path`` atomically (``indent=1, sort_keys=True`` by default)."""
    dump_kwargs.setdefault("indent", 1)
    dump_kwargs.setdefault("sort_keys", True)

    def write(tmp):
        with open(tmp, "w") as fh:
            json.dump(obj, fh, **dump_kwargs)
            fh.write("\n")

    atomic_write(path, write)


def save_tree(path: PathLike, tree: Any) -> None:
    """Save the leaves of a pytree as an ``.npz`` file, atomically (``load_tree`` restores it
    given the tree structure)."""
    leaves, _ = jax.tree_util.tree_flatten(tree)
    arrays = {f"leaf_{i:04d}": np.asarray(a) for i, a in enumerate(leaves)}

    def write(tmp):
        with open(tmp, "wb") as fh:
            np.savez(fh, **arrays)

    atomic_write(path, write)


def load_tree(path: PathLike, treedef) -> Any:
    """The pytree saved by :func:`save_tree`, with structure ``treedef``."""
    with np.load(path) as z:
        leaves = [z[f"leaf_{i:04d}"] for i in range(len(z.files))]
    return jax.tree_util.tree_unflatten(treedef, leaves)


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
