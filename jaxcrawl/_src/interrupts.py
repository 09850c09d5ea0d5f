"""SIGINT and SIGTERM for the ``jaxcrawl`` command: recorded first, raised where it is safe.

Python runs a signal handler in the main thread between two bytecodes, wherever that thread
is.  When it is inside a garbage-collector callback (JAX registers one, which runs during
ordinary allocation), an exception the handler raises is *unraisable*: Python prints it and
carries on, so a Ctrl-C raised there is lost and the command would finish and write its
output as if nothing had happened (found in CI: a ``jaxcrawl solve`` signalled while reading
its table exited 0).  So the command's handlers first *record* the signal, then raise; and
the places that make a command's work permanent ask :func:`raise_if_received` first:

* :func:`jaxcrawl.io.atomic_write` before it renames a finished temporary file over
  an output (a plan is never replaced after an interrupt, raised or lost);
* :class:`jaxcrawl.io.CheckpointStore` just *after* storing a chunk (finished work
  is kept, and a long ``reproduce`` stops at its next chunk);
* :func:`jaxcrawl.cli.main` when the command returns (status 130/143 rather than 0).

Before the command's handlers exist, the process spends a second or two importing JAX, with
Python's default handler (whose ``KeyboardInterrupt`` can be lost the same way).
:func:`install_early` -- called by ``jaxcrawl/__init__.py`` before anything imports JAX,
and only when the process *is* the command (``jaxcrawl ...`` or ``python -m jaxcrawl.cli``)
-- records the signals of that window without raising; :func:`handlers` then raises at once.

Outside a command nothing is recorded and :func:`raise_if_received` does nothing, so library
callers of ``atomic_write`` see no change.  Standard library only: this module is imported
before JAX.
"""
from __future__ import annotations

import _thread
import contextlib
import gc
import os
import signal
import sys
import threading
from collections.abc import Iterator

__all__ = ["Terminated", "install_early", "handlers", "received", "raise_if_received", "rearm"]

_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_received: list[int] = []  # signals received while armed (the first decides the status)
_armed = False  # a command's handlers (early or full) are installed
_early_previous: dict[int, object] = {}  # the handlers install_early replaced
_raised: list[int] = []  # the signal the running command raised (by its handler or a check)
_closing = False  # the command's handlers are being removed: a late signal is only recorded
_lock = threading.Lock()  # orders a deferred signal's second delivery against the handlers' removal


class Terminated(KeyboardInterrupt):
    """Raised in the main thread when SIGTERM arrives during a command (exit status 143).

    A ``KeyboardInterrupt`` so that every clean-up that handles Ctrl-C (atomic writes,
    checkpoint stores, ``reproduce``'s resumable chunks) handles SIGTERM the same way."""


def _interrupt_for(signum: int) -> KeyboardInterrupt:
    return Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


def received() -> int | None:
    """The first signal received by the running command, or None."""
    return _received[0] if _received else None


def raise_if_received() -> None:
    """Raise the running command's interrupt (``KeyboardInterrupt`` or :class:`Terminated`)
    if a signal was received -- also one whose exception was lost where it was raised."""
    if _armed and _received:
        _raised.append(_received[0])
        raise _interrupt_for(_received[0])


def _is_command(argv: list[str], script: str | None = None) -> bool:
    """Whether this interpreter was started as the ``jaxcrawl`` command (the console script
    -- ``argv[0]``, or ``script`` (``sys.argv[0]``) when the interpreter runs the script
    file -- or ``python -m jaxcrawl.cli``/``jaxcrawl.cli.__main__``)."""
    names = ("jaxcrawl", "jaxcrawl.exe", "jaxcrawl-script.py")
    if any(x and os.path.basename(x) in names for x in (argv[0] if argv else None, script)):
        return True
    for i, arg in enumerate(argv[:-1]):
        if arg == "-m":
            return argv[i + 1] in ("jaxcrawl.cli", "jaxcrawl.cli.__main__")
    return False


def _record(signum, frame) -> None:
    _received.append(signum)


def install_early() -> None:
    """Record (without raising) SIGINT/SIGTERM from now until :func:`handlers` takes over,
    when this process is the ``jaxcrawl`` command; otherwise do nothing.  Signals the parent
    set to be ignored stay ignored."""
    global _armed
    if _armed or threading.current_thread() is not threading.main_thread():
        return
    if not _is_command(list(getattr(sys, "orig_argv", sys.argv)), sys.argv[0] if sys.argv else None):
        return
    for sig in _SIGNALS:
        if signal.getsignal(sig) is not signal.SIG_IGN:
            _early_previous[sig] = signal.signal(sig, _record)
    _armed = True


@contextlib.contextmanager
def handlers() -> Iterator[list[int]]:
    """The command's handlers: SIGINT raises ``KeyboardInterrupt`` and SIGTERM
    :class:`Terminated` in the main thread, after recording the signal (the context yields
    the list of signals received).  Only the first signal raises: a second one while the
    first unwinds (removing a temporary file, say) is recorded and ignored, so the clean-up
    finishes.  One that arrives inside a garbage-collector callback, where its exception
    would be unraisable, is delivered again once the collection is over.  A signal recorded
    by :func:`install_early` stays recorded (the command calls
    :func:`raise_if_received` before it starts).  The handlers in
    place before the command -- before :func:`install_early`'s, if it ran -- are restored on
    exit.  Outside the main thread (where handlers cannot be installed) nothing changes."""
    global _armed, _closing
    if threading.current_thread() is not threading.main_thread():
        yield []
        return
    early = dict(_early_previous)
    _early_previous.clear()
    pending = list(_received)
    del _received[:]
    _raised[:] = pending  # a signal received while importing is raised by the command's first check
    _closing = False

    def handler(signum, frame):
        _received.append(signum)
        if _raised or _closing:
            return
        if _in_gc_callback(frame):  # raised here it would be unraisable (printed and lost)
            threading.Timer(0.01, _again, (signum,)).start()  # after the collection
            return
        _raised.append(signum)
        raise _interrupt_for(signum)

    previous = {}
    for sig in _SIGNALS:
        current = signal.getsignal(sig)
        if current is signal.SIG_IGN:
            continue
        previous[sig] = early.get(sig, current)
        signal.signal(sig, handler)
    _armed = True
    _received.extend(pending)  # received while importing: raised by the command's first check
    watchdog = _Watchdog() if previous else None
    try:
        yield _received
    finally:
        # a signal can still raise at the first of these lines (the body has ended, but
        # nothing marked it so yet); what follows it runs all the same, so the watchdog is
        # stopped and the previous handlers are back whatever is raised
        try:
            with _lock:  # no deferred signal is delivered again from here on
                _closing = True
        finally:
            try:
                if watchdog is not None:
                    watchdog.stop()
            finally:
                for sig, old in previous.items():
                    signal.signal(sig, old)  # runs a pending handler first: ours, which only records
                del _received[:]
                del _raised[:]
                _armed = False


def _again(signum: int) -> None:
    """Deliver ``signum`` again while the handlers that deferred it are in place and nothing
    was raised for it since (``interrupt_main`` marks it pending in the main thread before
    returning, so the handlers' removal, which takes the lock, finds it pending)."""
    with _lock:
        if _armed and not _raised and not _closing:
            _thread.interrupt_main(signum)


def _in_gc_callback(frame) -> bool:
    """Whether ``frame`` runs inside a garbage-collector callback (JAX registers one)."""
    codes = {getattr(getattr(cb, "__func__", cb), "__code__", None) for cb in gc.callbacks}
    while frame is not None:
        if frame.f_code in codes:
            return True
        frame = frame.f_back
    return False


def rearm() -> None:
    """Take SIGINT/SIGTERM back from native code that installed its own handlers (e.g. a
    runtime's preemption notifier, which would swallow SIGTERM): the Python-level handler
    in place -- the command's, or the default -- is installed again.  Main thread only."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in _SIGNALS:
        current = signal.getsignal(sig)
        if current is not None:
            signal.signal(sig, current)


#: Seconds a command has, after SIGINT/SIGTERM, to end by itself before it is ended from
#: outside (the main thread may be inside compiled code, where no Python handler runs).
GRACE_SECONDS = float(os.environ.get("JAXCRAWL_SIGNAL_GRACE", "5"))
#: Clean-ups run before a command is ended from outside (registered by the file writers).
cleanups: list = []


class _Watchdog:
    """Honours a signal on every path: Python runs signal handlers only between bytecodes of
    the main thread, so a command inside a long compiled computation would not notice one.
    The C-level handler also writes the signal number to a pipe (``signal.set_wakeup_fd``);
    this thread wakes on it and, if the command has not ended :data:`GRACE_SECONDS` later,
    runs :data:`cleanups` (temporary outputs removed), says so on stderr and ends the
    process with ``128 + signal`` (no output is renamed: renames happen in the main thread
    only, after a check for a received signal)."""

    def __init__(self):
        self.done = threading.Event()
        self.read_fd, self.write_fd = os.pipe()
        os.set_blocking(self.write_fd, False)
        try:
            self.previous_fd = signal.set_wakeup_fd(self.write_fd, warn_on_full_buffer=False)
        except ValueError:  # not the main thread, or the fd cannot be used
            self.previous_fd = None
            os.close(self.read_fd)
            os.close(self.write_fd)
            self.thread = None
            return
        self.thread = threading.Thread(target=self._watch, name="jaxcrawl-signal-watchdog", daemon=True)
        self.thread.start()

    def _watch(self) -> None:
        while True:
            try:
                data = os.read(self.read_fd, 64)
            except OSError:
                return
            if self.done.is_set() or not data:
                return
            signums = [b for b in data if b in _SIGNALS]
            if not signums:
                continue
            if self.done.wait(GRACE_SECONDS):
                return
            for fn in list(cleanups):
                try:
                    fn()
                except Exception:  # noqa: BLE001 - ending anyway
                    pass
            sig = _received[0] if _received else signums[0]
            try:
                os.write(2, f"jaxcrawl: {signal.Signals(sig).name} not handled within {GRACE_SECONDS:g} s "
                            "(inside compiled code); ending the process, no output written\n".encode())
            finally:
                os._exit(128 + sig)

    def stop(self) -> None:
        if self.thread is None:
            return
        self.done.set()
        try:
            signal.set_wakeup_fd(self.previous_fd if self.previous_fd is not None else -1)
        except ValueError:
            pass
        try:
            os.write(self.write_fd, b"\0")
        except OSError:
            pass
        self.thread.join(timeout=1.0)
        for fd in (self.read_fd, self.write_fd):
            try:
                os.close(fd)
            except OSError:
                pass
