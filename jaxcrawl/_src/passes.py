"""Passes over the pages: the one plug-in of the solve.

The solve (:func:`jaxcrawl._src.budget.plain`, :func:`jaxcrawl._src.gap.resolve`) is written
once against a reducer with ``reduce(fn, ops, *args)`` (``fn(view, *args)`` per-page arrays
reduced by ``"sum"``, ``"max"``, ``"min"``, ``"argmax"``, ``"argmin"``: the last two give the
global index), ``map``, ``total``, ``limits``, ``page(k)``, ``derive(fn)``, ``loop``,
``first_of`` and ``solve``.  In memory: :class:`jaxcrawl._src.budget.ArrayPages` (``jnp``
under ``jit``; :class:`jaxcrawl._src.budget.BuiltPages`, the passes of a large solve, builds
its parameters from the raw inputs in each pass); streamed:
:class:`jaxcrawl._src.chunks.ChunkPages` (a host loop over chunks).
"""
from __future__ import annotations

from typing import Any, NamedTuple

import jax.numpy as jnp
import numpy as np


class View(NamedTuple):
    """The pages a pass sees at once: their parameters, limits and global positions (and,
    streamed, their importance as read)."""

    params: Any
    lo: Any
    hi: Any
    index: Any
    importance: Any = None


#: the value a padding row contributes to each reduction
NEUTRAL = {"sum": 0.0, "max": -np.inf, "min": np.inf, "argmax": -np.inf, "argmin": np.inf}


def reduce_array(v, op):
    """One reduction of a page-sized array (``op`` as in ``reduce``)."""
    if op == "sum":
        return jnp.sum(v)
    if op == "max":
        return jnp.max(v)
    if op == "min":
        return jnp.min(v)
    if op == "argmax":
        return jnp.argmax(v)
    if op == "argmin":
        return jnp.argmin(v)
    raise ValueError(op)


#: the most elements of a stacked reduction (:func:`reduce_arrays`): below it a pass's
#: reductions are one array reduced once per kind; above it each is its own, as large
#: passes want them (a backend vectorises a reduction with its operands inside it)
STACK_ELEMENTS = 1 << 16


def reduce_arrays(values, ops) -> tuple:
    """The reductions of one pass (``reduce_array(v, op)`` of each pair), the same values
    written as few reductions: the sums of a dtype stacked and reduced once, likewise the
    maxima and minima (a minimum as the maximum of the negation) and the arg-extremes (an
    ``argmin`` as the ``argmax`` of the negation: the same first index).  XLA:CPU compiles
    each reduction of more than a few dozen elements as several kernels, so a pass of ``k``
    reductions compiles ``k`` times the code of one; stacked, a pass is at most three
    reductions.  Passes larger than :data:`STACK_ELEMENTS` keep one reduction each."""
    values = [jnp.asarray(v) for v in values]
    out = [None] * len(values)
    groups = {}
    for i, (v, op) in enumerate(zip(values, ops)):
        kind = {"sum": "sum", "max": "max", "min": "max", "argmax": "argmax", "argmin": "argmax"}.get(op)
        if kind is None:
            raise ValueError(op)
        groups.setdefault((kind, v.dtype), []).append(i)
    for (kind, dtype), idx in groups.items():
        shape = jnp.broadcast_shapes(*(values[i].shape for i in idx))
        if len(idx) == 1 or int(np.prod(shape, dtype=np.int64)) * len(idx) > STACK_ELEMENTS \
                or (kind != "sum" and not jnp.issubdtype(dtype, jnp.floating)):
            for i in idx:
                out[i] = reduce_array(values[i], ops[i])
            continue
        flip = [ops[i] in ("min", "argmin") for i in idx]
        stacked = jnp.stack([jnp.broadcast_to(-values[i] if f else values[i], shape) for i, f in zip(idx, flip)])
        if kind == "argmax":
            red = jnp.argmax(stacked.reshape(len(idx), -1), axis=1)
        else:
            red = (jnp.sum if kind == "sum" else jnp.max)(stacked, axis=tuple(range(1, len(shape) + 1)))
        for j, (i, f) in enumerate(zip(idx, flip)):
            out[i] = -red[j] if f and kind == "max" else red[j]
    return tuple(out)
