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


def check_representable(values: Any, name: str, dtype: Any, *, labels: Any = None, source: str | None = None) -> None:
    """``ValueError`` when a finite, nonzero value of ``values`` (e.g. float64 from a file)
    falls outside ``dtype``'s normal range, so that casting would turn it into 0 (or a
    subnormal, flushed to 0 on CPUs) or inf -- the error names ``name``, the value, where it
    is (``labels[i]``, e.g. a page id, and the row of ``source``; else the flat index) and
    the dtype, and suggests float64; without this a page table's importance 1e-300 would be
    reported as "found 0.0" after the cast.  Nothing to check when ``dtype`` is at least as
    wide as the values.
    """
    dt = np.dtype(dtype)
    a = np.asarray(values)
    if dt.kind != "f" or a.dtype.kind != "f" or a.dtype.itemsize <= dt.itemsize or a.size == 0:
        return
    info = np.finfo(dt)
    mag = np.abs(a)
    bad = np.isfinite(a) & (a != 0) & ((mag < info.tiny) | (mag > info.max))
    if not bad.any():
        return
    idx, val = first_bad(a, bad)
    if labels is not None:
        lab = np.ravel(np.asarray(labels))[idx]
        lab = lab.item() if hasattr(lab, "item") else lab
        where = f"page {lab!r} (data row {idx + 1}" + (f" of {source})" if source else ")")
    else:
        where = f"flat index {idx}"
    becomes = "0" if abs(float(val)) < float(info.tiny) else "inf"
    raise ValueError(
        f"{name} {float(val)!r} at {where} is outside {dt.name}'s normal range [{float(info.tiny):.3g}, "
        f"{float(info.max):.3g}] (it would become {becomes}; {int(bad.sum())} values in all); use float64 "
        "(--x64, or jax.config.update('jax_enable_x64', True)) or rescale it")


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
