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
