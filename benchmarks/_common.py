"""Shared helpers for the benchmarks: timing after compilation."""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import jax


def best_time(fn: Callable[..., Any], *args: Any, repeat: int = 5, number: int = 1) -> float:
    """Best wall time in seconds of ``fn(*args)`` (blocking on the result) over ``repeat``
    runs of ``number`` calls each, after one untimed call that compiles."""
    jax.block_until_ready(fn(*args))
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            out = fn(*args)
        jax.block_until_ready(out)
        best = min(best, (time.perf_counter() - t0) / number)
    return best
