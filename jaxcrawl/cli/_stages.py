"""Per-stage wall times of a command, and one progress line per stage for logs.

A long command (``solve``, ``schedule``, ``evaluate``) runs as named stages (read, solve,
write, ...).  :class:`Stages` times each one; when stderr is not a terminal (a cron job's
log) and the command is not ``--quiet``, it prints one line per finished stage,
``jaxcrawl solve: read 1.23 s``, as soon as the stage ends.  On a terminal the progress bars
of :func:`jaxcrawl._src.fileio.progress_bar` show the work instead.  ``seconds()`` gives the
report's itemised times: every stage's seconds plus ``other`` (the wall time of the command
not inside a stage), so that the times add up to the whole.
"""
from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from typing import TextIO


class Stages:
    """Times the named stages of one command run.

    Args:
      command: the command's name, printed at the start of each line.
      quiet: no lines at all.
      stream: where the lines go (default ``sys.stderr``, read when a stage ends).
      force: print the lines even when the stream is a terminal.
    """

    def __init__(self, command: str, *, quiet: bool = False, stream: TextIO | None = None, force: bool = False):
        self.command = command
        self.quiet = quiet
        self.force = force
        self._stream = stream
        self._start = time.perf_counter()
        self._seconds: dict[str, float] = {}

    def _out(self) -> TextIO:
        return self._stream if self._stream is not None else sys.stderr

    def _lines(self) -> bool:
        if self.quiet:
            return False
        out = self._out()
        return self.force or not (hasattr(out, "isatty") and out.isatty())

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time the ``with`` block as stage ``name`` (a repeated name adds up)."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            dt = time.perf_counter() - t0
            self._seconds[name] = self._seconds.get(name, 0.0) + dt
        if self._lines():
            print(f"jaxcrawl {self.command}: {name} {dt:.2f} s", file=self._out(), flush=True)

    def add(self, name: str, seconds: float) -> None:
        """Record ``seconds`` measured elsewhere as (part of) stage ``name``."""
        self._seconds[name] = self._seconds.get(name, 0.0) + float(seconds)

    def total(self) -> float:
        """Seconds since the command started."""
        return time.perf_counter() - self._start

    def seconds(self) -> dict[str, float]:
        """Every stage's seconds, then ``other`` (the rest of the wall time) and ``total``."""
        total = self.total()
        out = dict(self._seconds)
        out["other"] = max(total - sum(self._seconds.values()), 0.0)
        out["total"] = total
        return out
