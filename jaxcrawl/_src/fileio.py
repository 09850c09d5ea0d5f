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

Every temporary has a name of its own (``mkstemp``: the process id and a random part), so
two runs writing one output never share a temporary; the last to finish wins, whole.

Outputs that are not regular files (:func:`output_target`): a symlink is written through
-- its target is replaced atomically in the target's own directory and the link is kept;
a FIFO, a character device (``/dev/stdout``, ``/dev/null``) or a ``/proc/*/fd`` name is
written through directly: the content is still finished in a temporary file (in the
system's temporary directory), then streamed into it, in append mode (so a shell's
``>>`` redirection is honoured), only when the command succeeded -- it is never replaced
by a regular file.  A block device or a socket is refused.

Inputs that cannot be read twice (a pipe, a FIFO, ``/dev/stdin``, a character device) are
read once: :func:`open_read` (and :func:`input_source`) keep their bytes in memory for the
rest of the command, so a reader that looks at a file twice (a header sniff, then the
parse) sees the same bytes both times.
"""
from __future__ import annotations

import contextlib
import errno
import gzip
import io
import json
import os
import secrets
import stat
import sys
import tempfile
import threading
import zlib
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any

import jax
import numpy as np

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


def output_target(path: PathLike) -> tuple[str, bool]:
    """``(file, streamed)``: where an output named ``path`` is written (module docstring).

    A regular file (or a new name) is replaced atomically: ``(path, False)``; a symlink
    (also a dangling one) is written through: ``(its final target, False)``; a FIFO, a
    character device or a ``/proc/*/fd`` name is streamed into: ``(path, True)``.  A block
    device or a socket is ``ValueError`` naming ``path``.
    """
    path = os.fspath(path)
    try:
        st = os.stat(path)  # follows links (also /dev/stdout's /proc/self/fd/1)
    except OSError:
        st = None
    if st is not None and not stat.S_ISREG(st.st_mode) and not stat.S_ISDIR(st.st_mode):
        if stat.S_ISFIFO(st.st_mode) or stat.S_ISCHR(st.st_mode):
            return path, True
        kind = "block device" if stat.S_ISBLK(st.st_mode) else "socket" if stat.S_ISSOCK(st.st_mode) else \
            "special file"
        raise ValueError(f"{path}: is a {kind}; refusing to write it (an output must be a regular file, "
                         f"a symlink to one, a FIFO or a character device such as /dev/stdout)")
    if st is not None and _names_a_descriptor(path):  # /dev/stdout redirected to a file: written where
        return path, True  # the descriptor points (the shell's file), not by replacing the file
    return (os.path.realpath(path) if os.path.islink(path) else path), False


def _names_a_descriptor(path: str) -> bool:
    """Whether ``path`` or a link on the way to its file is a descriptor's name (``/proc/*/fd/N``,
    ``/dev/fd/N``), as ``/dev/stdout`` is."""
    p = os.path.abspath(path)
    for _ in range(40):
        if p.startswith(("/proc/", "/dev/fd/")):
            return True
        if not os.path.islink(p):
            return False
        p = os.path.normpath(os.path.join(os.path.dirname(p), os.readlink(p)))
    return False


def _temporary(directory: str, suffix: str) -> str:
    """A new, empty temporary file in ``directory`` with a name of its own (``.tmp_`` + the
    process id + a random part, never shared with another run).  The name is registered for
    removal (:data:`_TEMPORARIES`) *before* the file is created, so an interrupt at any
    point leaves either no file or a registered one; the caller removes it (and discards the
    name) when it is done with it."""
    for _ in range(100):
        name = os.path.join(directory, f".tmp_{os.getpid()}_{secrets.token_hex(6)}{suffix}")
        _TEMPORARIES.add(name)
        try:
            os.close(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600))
            return name
        except FileExistsError:
            _TEMPORARIES.discard(name)
        except BaseException:  # an interrupt (or an error) on the way: nothing of ours is left
            with contextlib.suppress(OSError):
                os.remove(name)
            _TEMPORARIES.discard(name)
            raise
    raise OSError(errno.EEXIST, f"no unused temporary name in {directory}")


def _install(tmp: str, dest: str) -> str:
    """Put the finished temporary ``tmp`` in place of the output ``dest`` (:func:`output_target`):
    renamed over the file (or the symlink's target), or streamed into a FIFO/device (then
    removed).  Returns the directory to fsync ('' for none)."""
    target, streamed = output_target(dest)
    if streamed:
        for stream in (sys.stdout, sys.stderr):  # what this process printed comes first
            with contextlib.suppress(Exception):
                stream.flush()
        try:
            fd = os.open(target, os.O_WRONLY | os.O_APPEND)
        except OSError as err:
            raise OSError(err.errno, f"{dest}: cannot write the output ({os.strerror(err.errno or 0)})") from None
        try:
            with open(fd, "wb", closefd=True) as out, open(tmp, "rb") as src:
                while True:
                    block = src.read(1 << 20)
                    if not block:
                        break
                    out.write(block)
                out.flush()
                for own in (1, 2):  # our own stdout/stderr is that file: what it prints next goes after
                    with contextlib.suppress(OSError):
                        if os.path.samestat(os.fstat(own), os.fstat(out.fileno())):
                            os.lseek(own, 0, os.SEEK_END)
        except OSError as err:
            raise OSError(err.errno, f"{dest}: cannot write the output ({os.strerror(err.errno or 0)})") from None
        finally:
            with contextlib.suppress(OSError):
                os.remove(tmp)
        return ""
    try:
        os.replace(tmp, target)
    except OSError as err:
        if err.errno != errno.EXDEV:  # a symlink to another file system: copy next to the target first
            raise
        near = None
        try:
            import shutil

            near = _temporary(os.path.dirname(target) or ".", os.path.splitext(target)[1])
            shutil.copyfile(tmp, near)
            shutil.copymode(tmp, near)
            os.replace(near, target)
        finally:
            if near is not None:
                _TEMPORARIES.discard(near)
                with contextlib.suppress(OSError):
                    os.remove(near)
        os.remove(tmp)
    return os.path.dirname(target) or "."


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
                dirs.append(_install(tmp, dest))
                _TEMPORARIES.discard(tmp)
            self.pending.clear()
        for d in dict.fromkeys(dirs):
            if d:
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
    for out in _flat(outputs):
        output_target(out)  # a block device or socket: refused before the work
    outs = _Outputs(inputs)
    _ACTIVE.append(outs)
    try:
        yield
        outs.commit()
    finally:
        outs.discard()
        _ACTIVE.remove(outs)
        if not _ACTIVE:
            _READ_ONCE.clear()


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


def remove_leftovers() -> None:
    """At a command's end (no command's outputs open any more): remove the temporaries still
    registered -- one an interrupt caught between its creation and its owner's clean-up."""
    if not _ACTIVE:
        remove_pending()


@contextlib.contextmanager
def transient(path: PathLike) -> Iterator[None]:
    """``path`` (written already, e.g. one process's part of a multi-process plan) is removed
    when the block ends in an error or the command is ended by a signal inside it
    (:func:`remove_pending`); kept when the block ends normally."""
    path = os.fspath(path)
    _TEMPORARIES.add(path)
    ok = False
    try:
        yield
        ok = True
    finally:
        _TEMPORARIES.discard(path)
        if not ok:
            with contextlib.suppress(OSError):
                os.remove(path)


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
    d = _install(tmp, path)
    if d:
        _fsync_directory(d)


def new_temporary(path: PathLike, suffix: str = "") -> str:
    """A new, empty temporary file for the output ``path``, in the directory it will be
    renamed in (a symlink's target's; the system's temporary directory for a FIFO or
    device), with a name no other run shares (the process id and a random part); removed
    on a forced exit.  In a multi-process job process 0 creates it and every process gets
    its name (every process must call this)."""
    path = os.fspath(path)
    name, error = "", None
    if jax.process_index() == 0:
        try:
            target, streamed = output_target(path)
            d = tempfile.gettempdir() if streamed else os.path.dirname(target) or "."
            try:
                name = _temporary(d, suffix)
            except OSError as err:
                why = "no such directory" if not os.path.isdir(d) else os.strerror(err.errno or 0)
                raise OSError(err.errno, f"{path}: cannot write the output ({why}: {d})") from None
        except (OSError, ValueError) as err:
            if jax.process_count() == 1:
                raise
            error = str(err)
    if jax.process_count() > 1:  # the name (or process 0's error), to every process
        from jax.experimental import multihost_utils

        raw = np.zeros(8192, np.uint8)
        encoded = (b"E" + error.encode() if error is not None else b"N" + name.encode())[:raw.size]
        raw[:len(encoded)] = np.frombuffer(encoded, np.uint8)
        got = np.asarray(multihost_utils.broadcast_one_to_all(raw), np.uint8).tobytes().rstrip(b"\0")
        if got[:1] == b"E":
            raise OSError(f"process {jax.process_index()}: " + got[1:].decode(errors="replace"))
        name = got[1:].decode()
    return name


def write_error(path: str, err: OSError) -> OSError:
    """``err`` (raised while writing the output ``path``) as an ``OSError`` naming ``path``
    and the reason (the same errno), never the temporary's name or a bare ``[Errno 27]``."""
    if err.errno == errno.EFBIG:
        why = "file too large: the process's file-size limit (ulimit -f) or the file system's was reached"
    elif err.errno == errno.ENOSPC:
        why = "no space left on the device"
    elif err.errno is not None:
        why = os.strerror(err.errno)
    else:
        why = str(err)
    failure = OSError(f"{path}: cannot write the output ({why})")
    failure.errno = err.errno
    return failure


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
    target, streamed = output_target(path)
    d = tempfile.gettempdir() if streamed else os.path.dirname(target) or "."
    mode = 0o600 if streamed else _new_file_mode(target)
    tmp = None
    staged = False
    try:
        try:
            tmp = _temporary(d, os.path.splitext(path)[1])
        except OSError as err:  # named by the output, not by the temporary's random name
            why = "no such directory" if not os.path.isdir(d) else os.strerror(err.errno or 0)
            failure = OSError(f"{path}: cannot write the output ({why}: {d})")
            failure.errno = err.errno
            raise failure from None
        try:
            write_fn(tmp)
            os.chmod(tmp, mode)
            with open(tmp, "rb+") as fh:
                os.fsync(fh.fileno())
        except OSError as err:  # a full disk, a file-size limit (ulimit -f): named by the output
            raise write_error(path, err) from None
        outs = None if keep_if_interrupted else _active()
        if outs is not None:
            outs.pending.append((tmp, path))
            staged = True
            _TEMPORARIES.add(tmp)
            return
        if not keep_if_interrupted:
            interrupts.raise_if_received()
        synced = _install(tmp, path)
        if synced:
            _fsync_directory(synced)
        interrupts.raise_if_received()
    finally:
        if not staged and tmp is not None:
            with contextlib.suppress(FileNotFoundError):
                os.remove(tmp)
            _TEMPORARIES.discard(tmp)


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

    def __init__(self, source, path: str):
        self._path = path
        self._gz = gzip.open(source, "rb")

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


_READ_ONCE: dict[tuple[str, int, int], bytes] = {}  # the bytes of inputs that cannot be read twice


def read_once(path: PathLike) -> bytes | None:
    """The bytes of ``path`` when it cannot be read twice (a pipe, a FIFO, ``/dev/stdin``, a
    character device): read at its first use and kept until the command ends (or for the
    process, outside a command); None for a regular file (read it as often as needed)."""
    path = os.fspath(path)
    try:
        st = os.stat(path)
    except OSError:
        return None
    if stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode):
        return None
    key = (path, st.st_dev, st.st_ino)
    if key not in _READ_ONCE:
        with open(path, "rb") as fh:
            _READ_ONCE[key] = fh.read()
    return _READ_ONCE[key]


def input_source(path: PathLike):
    """What a reader that opens files by name (pyarrow) should open: ``path`` itself for a
    regular file, else an in-memory copy of its bytes (:func:`read_once`)."""
    data = read_once(path)
    return os.fspath(path) if data is None else io.BytesIO(data)


def open_read(path: PathLike, text: bool = False):
    """Open ``path`` for reading (binary, or UTF-8 text with a BOM dropped), through gzip
    when its name ends in ``.gz``; a truncated or corrupt gzip file raises ``ValueError``
    naming the file.  A pipe or FIFO is read once (:func:`read_once`): every opening of it
    in one command sees the same bytes."""
    path = os.fspath(path)
    data = read_once(path)
    if path.lower().endswith(".gz"):
        raw = io.BufferedReader(_GzipRaw(path if data is None else io.BytesIO(data), path))
        return io.TextIOWrapper(raw, encoding="utf-8-sig") if text else raw
    if data is not None:
        raw = io.BytesIO(data)
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
    from tqdm.auto import tqdm  # imported where used: import jaxcrawl stays light

    disable = quiet or not (force or (hasattr(sys.stderr, "isatty") and sys.stderr.isatty()))
    return tqdm(total=total, desc=desc, unit=unit, unit_scale=True, disable=disable, delay=0.0 if force else 1.0,
                leave=False, file=sys.stderr)
