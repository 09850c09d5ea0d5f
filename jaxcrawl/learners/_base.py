"""The learner protocol and its driver."""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp


class Learner(NamedTuple):
    """A learner: ``init(env, params=None) -> state`` and ``step(key, state, env) -> (state, info)``.

    ``env`` is a :class:`~jaxcrawl.CrawlProblem` or a :class:`~jaxcrawl.sync_bandits.SyncBandit`;
    ``params`` holds the swept values as arrays (vmapping over them does not retrace).
    ``synchronous``: one step is a round whose length the environment fixes (MirrorSync,
    ICML-20 Alg. 1).  Hashable, a static argument of :func:`run_learner`: build it once.
    """

    init: Callable[..., Any]
    step: Callable[..., tuple[Any, Any]]
    name: str
    synchronous: bool = False


@functools.partial(jax.jit, static_argnames=("learner", "num_steps"))
def run_learner(key: jax.Array, learner: Learner, problem: Any, num_steps: int,
                params: Any = None) -> tuple[Any, Any]:
    """``num_steps`` steps of ``learner`` on ``problem`` by ``jax.lax.scan``; step ``i`` uses
    ``jax.random.fold_in(key, i)``, so a longer run extends a shorter one.  Returns
    ``(final_state, info)`` with ``info`` stacked over the steps (``params=None``: defaults).
    """
    state = learner.init(problem, params)

    def body(st, i):
        return learner.step(jax.random.fold_in(key, i), st, problem)

    return jax.lax.scan(body, state, jnp.arange(num_steps))
