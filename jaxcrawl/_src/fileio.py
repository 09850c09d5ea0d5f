"""Atomic file writing, pytree and JSON files, and the progress bar of the commands.

Every file jaxcrawl writes goes through :func:`atomic_write`: the content is written to a
temporary file in the destination's directory, flushed to disk, and renamed over the
destination in one step, so a run killed mid-write leaves the previous complete file (or
none), never a truncated one.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Callable
from typing import IO, Any

import jax
import numpy as np
from tqdm.auto import tqdm

from . import interrupts

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


def write_file(path: PathLike, fill: Callable[[IO], None], *, binary: bool = False) -> None:
    """Write ``path`` atomically (:func:`atomic_write`): ``fill(fh)`` writes into the
    temporary file, opened as text (UTF-8, no newline translation) or ``binary``."""
    path = os.fspath(path)
    if os.path.isdir(path):
        raise ValueError(f"{path}: is a directory")

    def write(tmp: str) -> None:
        with open(tmp, "wb" if binary else "w", **({} if binary else {"newline": "", "encoding": "utf-8"})) as fh:
            fill(fh)

    atomic_write(path, write)


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
    """Save the leaves of a pytree as an ``.npz`` file, atomically (:func:`load_tree`
    restores it given the tree structure)."""
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


def progress_bar(total: int | None, desc: str, *, quiet: bool = False, unit: str = "rows",
                 force: bool = False) -> Any:
    """A ``tqdm`` bar on stderr, disabled when ``quiet`` or (unless ``force``) stderr is not
    a terminal, shown only after one second (``update(k)`` advances it; use it as a
    context manager)."""
    disable = quiet or not (force or (hasattr(sys.stderr, "isatty") and sys.stderr.isatty()))
    return tqdm(total=total, desc=desc, unit=unit, unit_scale=True, disable=disable, delay=0.0 if force else 1.0,
                leave=False, file=sys.stderr)
