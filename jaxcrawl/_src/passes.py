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

import jax
import jax.numpy as jnp
import numpy as np

from .search import on_host_loops


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
    reductions, and on a CPU a pass of sums and extremes of one dtype of at most
    :data:`TREE_ELEMENTS` is one (:func:`tree_reduce`).  Passes larger than
    :data:`STACK_ELEMENTS` keep one reduction each."""
    given = list(values)
    values = [jnp.asarray(v) for v in values]
    out = [None] * len(values)
    # an extreme asked with its position (the same floating array under "max" and "argmax",
    # or "min" and "argmin"): the position's reduction gives the value too
    extreme_of = {}
    for i, op in enumerate(ops):
        if op in ("argmax", "argmin") and jnp.issubdtype(values[i].dtype, jnp.floating):
            j = next((j for j, o in enumerate(ops) if o == op[3:] and given[j] is given[i]
                      and j not in extreme_of), None)
            if j is not None:
                extreme_of[j] = i
    groups = {}
    for i, (v, op) in enumerate(zip(values, ops)):
        kind = {"sum": "sum", "max": "max", "min": "max", "argmax": "argmax", "argmin": "argmax"}.get(op)
        if kind is None:
            raise ValueError(op)
        if i not in extreme_of:
            groups.setdefault((kind, v.dtype), []).append(i)

    def set_extremes(arg_idx, best):
        """The paired extremes of the positions ``arg_idx`` from their rows' best values."""
        for j, i in extreme_of.items():
            if i in arg_idx:
                b = best[arg_idx.index(i)]
                out[j] = -b if ops[j] == "min" else b

    def rows(idx, shape):
        return [jnp.broadcast_to(-values[i] if ops[i] in ("min", "argmin") else values[i], shape) for i in idx]

    def common(idx):
        """The rows' common shape and its number of elements."""
        shape = jnp.broadcast_shapes(*(values[i].shape for i in idx))
        return shape, int(np.prod(shape, dtype=np.int64))

    for kind, dtype in list(groups):
        if kind != "sum" or ("max", dtype) not in groups or not jnp.issubdtype(dtype, jnp.floating) \
                or not on_host_loops():
            continue
        s_idx, m_idx = groups[("sum", dtype)], groups[("max", dtype)]
        shape, size = common(s_idx + m_idx)
        if size * 2 * max(len(s_idx), len(m_idx)) > TREE_ELEMENTS:
            continue
        sums, maxima = tree_reduce(jnp.stack(rows(s_idx, shape)).reshape(len(s_idx), -1),
                                   jnp.stack(rows(m_idx, shape)).reshape(len(m_idx), -1))
        for j, i in enumerate(s_idx):
            out[i] = sums[j]
        for j, i in enumerate(m_idx):
            out[i] = -maxima[j] if ops[i] == "min" else maxima[j]
        del groups[("sum", dtype)], groups[("max", dtype)]
    for (kind, dtype), idx in groups.items():
        shape, size = common(idx)
        if len(idx) == 1 or size * len(idx) > STACK_ELEMENTS or (kind != "sum" and not jnp.issubdtype(dtype, jnp.floating)):
            for i in idx:
                if kind == "argmax" and i in extreme_of.values():
                    best, pos = max_and_argmax(rows([i], values[i].shape)[0].reshape(1, -1))
                    out[i] = pos[0]
                    set_extremes([i], best)
                else:
                    out[i] = reduce_array(values[i], ops[i])
            continue
        stacked = jnp.stack(rows(idx, shape))
        if kind == "argmax":
            best, red = max_and_argmax(stacked.reshape(len(idx), -1))
            set_extremes(idx, best)
        else:
            red = (jnp.sum if kind == "sum" else jnp.max)(stacked, axis=tuple(range(1, len(shape) + 1)))
        for j, i in enumerate(idx):
            out[i] = -red[j] if ops[i] == "min" else red[j]
    return tuple(out)


@jax.custom_jvp
def max_and_argmax(rows: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Row maxima of ``rows`` ``(k, n)`` and their first positions, as one two-operand
    reduction (``jnp.argmax``'s own, which also carries the values): NaN counts as the
    largest, as in ``jnp.max`` and ``jnp.argmax``.  A maximum's derivative is its row's
    tangent at the position (the reduction itself has no differentiation rule)."""
    dtype = rows.dtype

    def better(a, b):
        (va, ia), (vb, ib) = a, b
        take_a = (va > vb) | (va != va)
        take_ia = take_a | ((va == vb) & (ia < ib))
        return jnp.where(take_a, va, vb), jnp.where(take_ia, ia, ib)

    pos = jax.lax.broadcasted_iota(jnp.int32, rows.shape, 1)
    return jax.lax.reduce((rows, pos), (jnp.array(-jnp.inf, dtype), jnp.array(0, jnp.int32)), better, (1,))


@max_and_argmax.defjvp
def _max_and_argmax_jvp(primals, tangents):
    (rows,), (drows,) = primals, tangents
    best, pos = max_and_argmax(rows)
    dbest = jnp.take_along_axis(drows, pos[:, None], axis=1)[:, 0]
    return (best, pos), (dbest, np.zeros(pos.shape, jax.dtypes.float0))


#: the width of each level of :func:`tree_reduce`
TREE_WIDTH = 32
#: the most elements (both operands) of a :func:`tree_reduce`: XLA:CPU runs a two-operand
#: reduction element by element, where it vectorises a plain one, so above this (or a few
#: dozen problems of it under ``vmap``) the kernels saved no longer pay for the time
TREE_ELEMENTS = 1 << 12


def tree_reduce(sums: jax.Array, maxima: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Row sums of ``sums`` ``(k, n)`` and row maxima of ``maxima`` ``(j, n)`` as one
    two-operand reduction per level: blocks of :data:`TREE_WIDTH` first, then blocks of
    their results, until one is left (pairwise-like summation, as XLA's own split of a long
    sum).  XLA:CPU compiles each level as one kernel (the first with the pass's per-page
    work inside it), where the two stacked reductions would take six.  NaN propagates
    through the maxima as through ``jnp.max``."""
    dtype = sums.dtype
    inits = (jnp.zeros((), dtype), jnp.full((), -jnp.inf, dtype))

    def both(a, b):
        return a[0] + b[0], jax.lax.max(a[1], b[1])

    k, j = sums.shape[0], maxima.shape[0]  # (a variadic reduction's operands share one shape)
    ops = tuple(jnp.pad(o, ((0, max(k, j) - o.shape[0]), (0, 0)), constant_values=init)
                for o, init in zip((sums, maxima), inits))
    n = sums.shape[1]
    while n > TREE_WIDTH:
        m = -(-n // TREE_WIDTH)
        ops = tuple(jnp.pad(o, ((0, 0), (0, m * TREE_WIDTH - n)), constant_values=init).reshape(o.shape[0], m,
                                                                                                  TREE_WIDTH)
                    for o, init in zip(ops, inits))
        ops = jax.lax.reduce(ops, inits, both, (2,))
        n = m
    total, top = jax.lax.reduce(ops, inits, both, (1,))
    return total[:k], top[:j]
