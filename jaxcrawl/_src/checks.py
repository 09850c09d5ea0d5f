"""Input checks shared by the public boundary: concrete-value detection, named errors,
and the in-``jit`` convergence check behind every ``throw=True`` option."""
from __future__ import annotations

import contextlib
import functools
import logging
import threading
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


class NonConvergenceError(RuntimeError):
    """An iterative solve stopped at its step cap (or on a non-finite value) before its
    tolerance; raised when a caller asked for ``throw=True`` (inside your own ``jax.jit``,
    wrap the call in :func:`jaxcrawl.library_errors` to receive it as this type)."""


#: the floating dtypes jaxcrawl computes in (its solves, derivatives and estimators)
SUPPORTED_FLOATS = ("float32", "float64")


def check_precision(dtype: Any, name: str) -> None:
    """``TypeError`` naming ``name`` for a floating dtype narrower than float32 (float16,
    bfloat16, the float8s): refused eagerly and under ``jit`` alike (a dtype is static).

    The dual root-find, its closing correction and the implicit derivatives need float32's
    range and bits: in float16 the solve can report ``converged=True`` while every
    derivative is NaN or inf, and a bfloat16 budget misses by a few tenths of a percent.
    """
    dt = jnp.dtype(dtype)
    if jnp.issubdtype(dt, jnp.floating) and jnp.finfo(dt).bits < 32:
        raise TypeError(
            f"{name} has dtype {dt.name}: jaxcrawl computes in {' or '.join(SUPPORTED_FLOATS)} only "
            f"({dt.name} has too few bits for the dual root-find and its derivatives); cast it first, "
            f"e.g. jnp.asarray(x, jnp.float32), and cast the results back if you need {dt.name}")


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


def outside_normal_range(values: np.ndarray, dtype: Any) -> np.ndarray | None:
    """The finite, nonzero entries of ``values`` outside ``dtype``'s normal range (cast to
    ``dtype`` they would become 0, a flushed subnormal, or inf), as a bool mask; None when
    there is nothing to check (``dtype`` not a float narrower than the values)."""
    dt = np.dtype(dtype)
    a = np.asarray(values)
    if dt.kind != "f" or a.dtype.kind != "f" or a.dtype.itemsize <= dt.itemsize or a.size == 0:
        return None
    info = np.finfo(dt)
    mag = np.abs(a)
    return np.isfinite(a) & (a != 0) & ((mag < info.tiny) | (mag > info.max))


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
    bad = outside_normal_range(a, dt)
    if bad is None or not bad.any():
        return
    info = np.finfo(dt)
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


# the errors the host callback raised lately, so that :func:`library_errors` can hand the
# caller the library's own exception in place of the runtime's wrapper (the callback may run
# on another thread than the caller: a short list under a lock, matched by message)
_RAISED: list[NonConvergenceError] = []
_RAISED_LOCK = threading.Lock()
_KEEP = 16
_CALLBACK_LOGGERS = ("jax._src.debugging", "jax._src.callback")


class _QuietOwnErrors(logging.Filter):
    """Drops the runtime's log record of a :class:`NonConvergenceError` raised in a host
    callback: the caller gets the error itself, so its traceback is not printed first."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, NonConvergenceError)


_QUIET = _QuietOwnErrors()


def _quiet_callback_logs() -> None:
    for name in _CALLBACK_LOGGERS:
        log = logging.getLogger(name)
        if _QUIET not in log.filters:
            log.addFilter(_QUIET)


def _callback_check(what: str, converged, num_steps, residual) -> None:
    try:
        _raise_unless_converged(what, converged, num_steps, residual)
    except NonConvergenceError as err:
        with _RAISED_LOCK:
            _RAISED.append(err)
            del _RAISED[:-_KEEP]
        raise


def raise_unless_converged(what: str, converged: jax.Array, num_steps: jax.Array, residual: jax.Array) -> None:
    """Raise :class:`NonConvergenceError` when any entry of ``converged`` is False.

    Concrete values (an eager call) are checked on the host at once.  Traced values (inside
    ``jit``, ``vmap``, ``scan``) are checked by a ``jax.debug.callback`` when the result is
    computed: no functionalisation by the caller is needed (``throw=True`` works inside any
    user ``jit``), and its cost -- one boolean copied to the host per solve -- is paid only
    when asked for.  Where the library runs the computation (an eager or vmapped call) the
    caller gets :class:`NonConvergenceError` itself; inside the caller's own ``jit`` the
    runtime wraps it in a ``jax.errors.JaxRuntimeError``, which :func:`library_errors` turns
    back into :class:`NonConvergenceError`.  The runtime's log record of the failed callback
    is dropped (nothing is printed before the error).
    """
    if is_concrete(converged, num_steps, residual):
        _raise_unless_converged(what, converged, num_steps, residual)
        return
    _quiet_callback_logs()
    jax.debug.callback(functools.partial(_callback_check, what), converged, num_steps, residual)


def _library_error(err: BaseException) -> NonConvergenceError | None:
    """The :class:`NonConvergenceError` a runtime error of a host callback wraps, if any."""
    text = str(err)
    if "NonConvergenceError" not in text:
        return None
    with _RAISED_LOCK:
        for own in reversed(_RAISED):
            if str(own) in text:
                _RAISED.remove(own)
                return own
    return NonConvergenceError(text.strip().splitlines()[-1].partition("NonConvergenceError: ")[2] or text)


@contextlib.contextmanager
def library_errors():
    """Context manager (and decorator) that re-raises a ``throw=True`` failure inside your own
    ``jax.jit`` as :class:`NonConvergenceError` (the runtime reports it as a
    ``jax.errors.JaxRuntimeError``); every other error passes unchanged::

        with jaxcrawl.library_errors():
            policy = jax.jit(lambda p: jaxcrawl.solve(p, throw=True))(problem)
            jax.block_until_ready(policy)
    """
    try:
        yield
    except jax.errors.JaxRuntimeError as err:
        own = _library_error(err)
        if own is None:
            raise
        own.__cause__ = None
        own.__suppress_context__ = True
        raise own from None
