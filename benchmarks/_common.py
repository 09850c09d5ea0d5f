"""Shared helpers for the benchmarks: timing after compilation."""
import time

import jax


def best_time(fn, *args, repeat=5, number=1):
    """Best wall time of ``fn(*args)`` (blocking on the result) over ``repeat`` runs."""
    jax.block_until_ready(fn(*args))
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            out = fn(*args)
        jax.block_until_ready(out)
        best = min(best, (time.perf_counter() - t0) / number)
    return best
