"""Input checks shared by the public boundary: concrete-value detection, named errors,
and the in-``jit`` convergence check behind every ``throw=True`` option."""
from __future__ import annotations

from typing import Any

import jax
import numpy as np


class NonConvergenceError(RuntimeError):
    """An iterative solve stopped at its step cap (or on a non-finite value) before its
    tolerance; raised when a caller asked for ``throw=True``."""


def is_concrete(*xs: Any) -> bool:
    """True when none of ``xs`` is a JAX tracer (so values can be checked eagerly)."""
    return not any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves(xs))


def first_bad(a: np.ndarray, bad: np.ndarray) -> tuple[int, Any]:
    """(flat index, value) of the first True of ``bad`` in ``a``."""
    idx = int(np.flatnonzero(np.ravel(bad))[0])
    return idx, np.ravel(a)[idx]


def check_positive_finite(arr: Any, name: str) -> None:
    """``ValueError`` naming ``name``, the rule and the first bad index unless every
    entry is finite and > 0 (and there is at least one)."""
    a = np.asarray(arr)
    if a.size == 0:
        raise ValueError(f"{name} is empty: a crawl problem needs at least one page")
    bad = ~np.isfinite(a)
    if bad.any():
        idx, val = first_bad(a, bad)
        raise ValueError(f"{name} must be finite; found {val!r} at flat index {idx}")
    nonpos = a <= 0
    if nonpos.any():
        idx, val = first_bad(a, nonpos)
        raise ValueError(
            f"{name} must be > 0 for every page; found {val!r} at flat index {idx}"
            " (a page that never changes or is never requested need not be tracked)")


def _raise_unless_converged(what: str, converged, num_steps, residual) -> None:
    ok = np.asarray(converged)
    if not np.all(ok):
        bad = int(np.size(ok) - np.count_nonzero(ok))
        raise NonConvergenceError(
            f"{what} did not converge ({bad} of {np.size(ok)} entries): stopped after "
            f"{np.max(np.asarray(num_steps))} steps with residual {np.asarray(residual).ravel()[:4]} "
            "(for budget solves: before the closing correction); raise max_steps or check the inputs")


def raise_unless_converged(what: str, converged: jax.Array, num_steps: jax.Array, residual: jax.Array) -> None:
    """Raise :class:`NonConvergenceError` (through a host callback, so it works inside
    ``jit`` and ``vmap``) when any entry of ``converged`` is False.

    A ``jax.debug.callback`` is used rather than ``jax.experimental.checkify``: it needs no
    functionalisation by the caller (``throw=True`` works inside any user ``jit``), and its
    cost -- one boolean copied to the host per solve -- is paid only when asked for.  The
    error surfaces as a ``jax.errors.JaxRuntimeError`` whose message contains this text
    when the result is computed.
    """
    jax.debug.callback(lambda c, k, r: _raise_unless_converged(what, c, k, r),
                       converged, num_steps, residual)
