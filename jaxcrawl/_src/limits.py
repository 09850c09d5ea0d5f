"""Sizes a command is asked to allocate, checked against the machine before anything is
allocated: an absurd ``--num-pages`` or ``--horizon`` is an error naming the option and its
limit, not a ``MemoryError``, an XLA ``RESOURCE_EXHAUSTED`` or a process growing until the
kernel kills it."""
from __future__ import annotations

import math
import os


def memory_bytes() -> int:
    """The machine's physical memory in bytes (``$JAXCRAWL_MEMORY_BYTES`` overrides it; 64 GiB
    where the platform does not say)."""
    given = os.environ.get("JAXCRAWL_MEMORY_BYTES")
    if given:
        return int(float(given))
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return 64 << 30


def check_size(option: str, count: float, bytes_each: float, what: str) -> None:
    """``ValueError`` when ``count`` items of ``bytes_each`` bytes (what ``option`` asks for)
    would not fit in the machine's memory (:func:`memory_bytes`); the message names the
    option, the request and the largest count that fits."""
    mem = memory_bytes()
    limit = int(mem // max(bytes_each, 1))
    if not (isinstance(count, (int, float)) and math.isfinite(count)) or count > limit:
        shown = f"{count:.4g}" if isinstance(count, float) else str(count)
        raise ValueError(f"{option}: {shown} {what} need about {bytes_each:g} bytes each, more than this machine's "
                         f"{mem / 2**30:.3g} GiB of memory; the limit here is {limit} {what}")
