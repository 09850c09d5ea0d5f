"""Atomic file writing, the output rule of the commands, pytree and JSON files, and the
progress bar.

Every file jaxcrawl writes goes through :func:`atomic_write`: the content is written to a
temporary file in the destination's directory, flushed to disk, and renamed over the
destination in one step, so a run killed mid-write leaves the previous complete file (or
none), never a truncated one.

The output rule of a command (:func:`command_outputs`, entered by :func:`jaxcrawl.cli.main`
around every command): no output may be an input of the command, another name of one, or a
path inside an input directory; every output is written to its temporary file and the
temporaries are renamed over their destinations together, only after the command finished
without an error -- an error in a later output leaves every earlier output untouched, and a
failure removes the temporaries.  Memory-mapped outputs get their disk space before they
are mapped (:func:`output_memmap`), so a full disk is an ``OSError`` naming the file rather
than a ``SIGBUS`` in the middle of the run.
"""
from __future__ import annotations

import contextlib
import errno
import gzip
import io
import json
import os
import sys
import tempfile
import threading
import zlib
from collections.abc import Callable, Iterable, Iterator
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


def input_clash(output: PathLike, inp: PathLike) -> str | None:
    """Why ``output`` may not be written by a command reading ``inp`` (None when it may):
    it is the input (any spelling, symlink or hard link) or lies inside the input directory
    (also through symlinks)."""
    out, inp = os.fspath(output), os.fspath(inp)
    if same_file(out, inp):
        return f"the output is the input file {inp}"
    real_in = os.path.realpath(inp)
    if os.path.isdir(real_in):
        real_out = os.path.realpath(out)
        if os.path.commonpath([real_in, real_out]) == real_in:
            return f"the output is inside the input directory {inp}"
    return None


def check_not_input(output: PathLike, inputs: Iterable[PathLike | None]) -> None:
    """``ValueError`` naming the rule when ``output`` clashes with one of ``inputs``
    (:func:`input_clash`); None entries are ignored."""
    for inp in inputs:
        why = None if inp is None else input_clash(output, inp)
        if why:
            raise ValueError(f"{os.fspath(output)}: {why}; refusing to overwrite it (choose another output path)")


class _Outputs:
    """The outputs of one command: its inputs, and the temporaries waiting to be renamed."""

    def __init__(self, inputs: Iterable[PathLike]):
        self.inputs: list[str] = [os.fspath(p) for p in inputs]
        self.pending: list[tuple[str, str]] = []  # (temporary, destination)
        self.immediate = 0

    def check(self, path: str) -> None:
        check_not_input(path, self.inputs)
        for _, dest in self.pending:
            if same_file(dest, path):
                raise ValueError(f"{path}: written twice by one command (two outputs name the same file)")

    def discard(self) -> None:
        for tmp, _ in self.pending:
            _TEMPORARIES.discard(tmp)
            with contextlib.suppress(OSError):
                os.remove(tmp)
        self.pending.clear()

    def commit(self) -> None:
        for _, dest in self.pending:  # inputs named while the command ran are checked too
            check_not_input(dest, self.inputs)
        interrupts.raise_if_received()
        with _COMMIT_LOCK:
            dirs = []
            for tmp, dest in self.pending:
                os.replace(tmp, dest)
                _TEMPORARIES.discard(tmp)
                dirs.append(os.path.dirname(dest) or ".")
            self.pending.clear()
        for d in dict.fromkeys(dirs):
            _fsync_directory(d)


_ACTIVE: list[_Outputs] = []
_COMMIT_LOCK = threading.Lock()


def _active() -> _Outputs | None:
    return _ACTIVE[-1] if _ACTIVE and not _ACTIVE[-1].immediate else None


@contextlib.contextmanager
def command_outputs(inputs: Iterable[PathLike | None] = (), outputs: Iterable[PathLike | None] = (),
                    directories: Iterable[PathLike | None] = ()) -> Iterator[None]:
    """The output rule of one command (module docstring): ``outputs`` (the files the
    command was told to write: their directory must exist) and ``directories`` (output
    directories it may create) are checked against ``inputs`` at once; inside the context,
    every :func:`atomic_write` (and :func:`stage`) refuses a destination that is, or lies
    inside, one of ``inputs`` (or of the inputs added by :func:`add_input`) and keeps its
    finished temporary; on a normal exit they are all renamed over their destinations
    (after a last check for a received interrupt), on an exception all are removed."""
    inputs = [p for p in inputs if p is not None]
    for out in _flat(outputs):
        check_not_input(out, inputs)
        parent = os.path.dirname(os.fspath(out))
        if parent and not os.path.isdir(parent):
            raise ValueError(f"{os.fspath(out)}: cannot write the output (no such directory: {parent})")
    for out in _flat(directories):
        check_not_input(out, inputs)
    outs = _Outputs(inputs)
    _ACTIVE.append(outs)
    try:
        yield
        outs.commit()
    finally:
        outs.discard()
        _ACTIVE.remove(outs)


def add_input(path: PathLike | None) -> None:
    """Name one more input of the running command (a file read on the way, e.g. a mapping
    a caps file names): no output may clash with it.  No-op outside a command."""
    if path is not None and _ACTIVE:
        _ACTIVE[-1].inputs.append(os.fspath(path))
        for _, dest in _ACTIVE[-1].pending:
            check_not_input(dest, [path])


def command_inputs(values: Iterable[object]) -> list[str]:
    """The paths among ``values`` (strings, path-likes, or lists of them) that exist: the
    inputs of a command, from the values of its options other than its outputs."""
    return [os.fspath(v) for v in _flat(values) if os.path.exists(os.fspath(v))]


def _flat(values: Iterable[object]) -> Iterator[str | os.PathLike]:
    for v in values:
        if isinstance(v, (list, tuple)):
            yield from _flat(v)
        elif isinstance(v, (str, os.PathLike)) and os.fspath(v):
            yield v


@contextlib.contextmanager
def immediate() -> Iterator[None]:
    """Inside a command, write files at once rather than at the command's end (finished work
    other processes read, or results kept when a later step is interrupted); the input
    rule still holds."""
    if not _ACTIVE:
        yield
        return
    _ACTIVE[-1].immediate += 1
    try:
        yield
    finally:
        _ACTIVE[-1].immediate -= 1


_TEMPORARIES: set[str] = set()  # temporaries being written or waiting (removed on a forced exit)


def remove_pending() -> None:
    """Remove every temporary being written or waiting to be renamed (the clean-up of a
    command ended from outside, :mod:`jaxcrawl._src.interrupts`)."""
    with _COMMIT_LOCK:
        for outs in list(_ACTIVE):
            outs.discard()
        for tmp in list(_TEMPORARIES):
            with contextlib.suppress(OSError):
                os.remove(tmp)
        _TEMPORARIES.clear()


interrupts.cleanups.append(remove_pending)


def _check_output(path: str, inputs: tuple[PathLike | None, ...]) -> None:
    check_not_input(path, inputs)
    if _ACTIVE:
        _ACTIVE[-1].check(path)


def stage(tmp: PathLike, path: PathLike) -> None:
    """Rename the finished temporary ``tmp`` over ``path`` -- at the end of the running
    command with its other outputs (:func:`command_outputs`), at once outside one."""
    tmp, path = os.fspath(tmp), os.fspath(path)
    _check_output(path, ())
    _TEMPORARIES.discard(tmp)
    outs = _active()
    if outs is not None:
        outs.pending.append((tmp, path))
        _TEMPORARIES.add(tmp)
        return
    interrupts.raise_if_received()
    os.replace(tmp, path)
    _fsync_directory(os.path.dirname(path) or ".")


def atomic_write(path: PathLike, write_fn: Callable[[str], None], *,
                 inputs: tuple[PathLike | None, ...] = (), keep_if_interrupted: bool = False) -> None:
    """Write ``path`` atomically: ``write_fn(tmp_path)`` fills a temporary file in the same
    directory, which is fsynced, given the old file's permissions (or the umask's default
    for a new file) and renamed over ``path`` (the directory is then fsynced where the
    platform allows); on any error (or interrupt) it is removed and ``path`` is untouched.

    ``inputs``: files the run reads; ``ValueError`` (before anything is written) when
    ``path`` is one of them or lies inside one (:func:`input_clash`), so a run never
    replaces its own input.  Inside a command (:func:`command_outputs`) its inputs count
    too, and the rename waits for the command's end (all outputs together).

    Inside the ``jaxcrawl`` command, a SIGINT/SIGTERM received during the write -- also one
    whose exception was lost where Python raised it (``jaxcrawl/_src/interrupts.py``) --
    raises before the rename, so an interrupted command never replaces an output;
    ``keep_if_interrupted=True`` (finished work: checkpoints) renames at once, then raises.
    """
    path = os.fspath(path)
    _check_output(path, inputs)
    d = os.path.dirname(path) or "."
    mode = _new_file_mode(path)
    try:
        fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp_", suffix=os.path.splitext(path)[1])
    except OSError as err:  # named by the output, not by the temporary's random name
        why = "no such directory" if not os.path.isdir(d) else os.strerror(err.errno or 0)
        failure = OSError(f"{path}: cannot write the output ({why}: {d})")
        failure.errno = err.errno
        raise failure from None
    os.close(fd)
    _TEMPORARIES.add(tmp)
    staged = False
    try:
        write_fn(tmp)
        os.chmod(tmp, mode)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        outs = None if keep_if_interrupted else _active()
        if outs is not None:
            outs.pending.append((tmp, path))
            staged = True
            _TEMPORARIES.add(tmp)
            return
        if not keep_if_interrupted:
            interrupts.raise_if_received()
        os.replace(tmp, path)
        _fsync_directory(d)
        interrupts.raise_if_received()
    finally:
        if not staged:
            _TEMPORARIES.discard(tmp)
            if os.path.exists(tmp):
                os.remove(tmp)


def output_memmap(path: PathLike, dtype, n: int, *, create: bool = True) -> np.memmap:
    """A writable ``(n,)`` ``.npy`` memory map at ``path`` whose disk space is allocated
    before it is mapped (``posix_fallocate``, else ordinary writes of zeros): a full disk
    is an ``OSError`` naming the file (the file removed) instead of a ``SIGBUS`` when a
    page of the map is first written.  ``create=False`` opens a file another process
    created."""
    path = os.fspath(path)
    if not create:
        return np.lib.format.open_memmap(path, mode="r+")
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)),
                                                  "fortran_order": False, "shape": (int(n),)})
    size = header.tell() + int(n) * np.dtype(dtype).itemsize
    _TEMPORARIES.add(path)
    try:
        with open(path, "wb") as fh:
            fh.write(header.getvalue())
            fh.flush()
            _allocate(fh, size)
    except OSError as err:
        with contextlib.suppress(OSError):
            os.remove(path)
        raise OSError(err.errno, f"{path}: cannot allocate {size} bytes for the output "
                                 f"({os.strerror(err.errno) if err.errno else err})") from None
    return np.lib.format.open_memmap(path, mode="r+")


def _allocate(fh, size: int) -> None:
    """Give the open file ``size`` bytes of disk space (its content past the end: zeros)."""
    try:
        os.posix_fallocate(fh.fileno(), 0, size)
        return
    except AttributeError:
        pass
    except OSError as err:
        if err.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            raise
    fh.seek(0, os.SEEK_END)
    left = size - fh.tell()
    block = b"\0" * (1 << 20)
    while left > 0:
        fh.write(block[:min(left, len(block))])
        left -= min(left, len(block))
    fh.flush()
    os.fsync(fh.fileno())


class _GzipRaw(io.RawIOBase):
    """The decompressed bytes of a gzip file, with a truncated or corrupt file reported as
    ``ValueError`` naming it (not ``EOFError``/``zlib.error`` from deep inside a reader)."""

    def __init__(self, path: str):
        self._path = path
        self._gz = gzip.open(path, "rb")

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        try:
            return self._gz.readinto(b)
        except (EOFError, zlib.error, gzip.BadGzipFile) as err:
            raise ValueError(f"{self._path}: truncated or corrupt gzip file ({err})") from None

    def close(self) -> None:
        self._gz.close()
        super().close()


def open_read(path: PathLike, text: bool = False):
    """Open ``path`` for reading (binary, or UTF-8 text with a BOM dropped), through gzip
    when its name ends in ``.gz``; a truncated or corrupt gzip file raises ``ValueError``
    naming the file."""
    path = os.fspath(path)
    if path.lower().endswith(".gz"):
        raw = io.BufferedReader(_GzipRaw(path))
        return io.TextIOWrapper(raw, encoding="utf-8-sig") if text else raw
    return open(path, encoding="utf-8-sig") if text else open(path, "rb")


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
