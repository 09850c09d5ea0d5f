"""Passes over the pages: the one plug-in of the solve.

The solve (:func:`jaxcrawl._src.budget.plain`, :func:`jaxcrawl._src.gap.resolve`) is written
once against this small interface; what differs between pages in memory and pages streamed
from a table is only how a pass over them is reduced and how the host drives the loops.

* ``reduce(fn, ops, *args)``: ``fn(view, *args)`` returns per-page arrays, reduced by
  ``ops`` (``"sum"``, ``"max"``, ``"min"``; ``"argmax"``/``"argmin"`` give the global index).
* ``map(fn, *args)``: the per-page result of ``fn`` (the plan).
* ``page(k)``: page ``k``'s parameters (scalar leaves).
* ``derive(fn)``: the same pages with parameters ``fn(view)``.
* ``loop(cond, body, init)``, ``cond(pred, true_fn, false_fn)``, ``first_of(attempt, ks, init)``.
* ``solve(rate_fn, marginal_fn, budget, bracket, opts)``: the budget solve on these pages
  (in memory: with the implicit-function derivatives).

In memory: :class:`jaxcrawl._src.budget.ArrayPages`; streamed:
:class:`jaxcrawl._src.chunks.ChunkPages`.

A ``view`` is ``(params, lo, hi, index, ...)`` of the pages a pass sees at once (all of them in
memory, one chunk streamed); ``index`` is their global position.
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
