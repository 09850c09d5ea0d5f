r"""The learner protocol and its driver.

A :class:`Learner` is two pure functions over NamedTuple states: ``init(env, params=None)``
and ``step(key, state, env) -> (state, info)``.  ``env`` is a :class:`~jaxcrawl.CrawlProblem`
or a :class:`~jaxcrawl.sync_bandits.SyncBandit`; ``params`` holds the swept values as arrays
(``jax.vmap`` over them does not retrace); shape-determining settings are closed over by the
factory, as in optax and blackjax.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp


class Learner(NamedTuple):
    """A learner: ``init(env, params=None) -> state`` and ``step(key, state, env) -> (state, info)``.

    Hashable (it is passed to ``jax.jit`` as a static argument): build it once and reuse
    the same object, or every call compiles again.

    Attributes:
      init: ``init(env, params=None) -> state``.
      step: ``step(key, state, env) -> (state, info)``.
      name: identifies the algorithm (for manifests and reports; nothing dispatches on it).
      synchronous: True when one step is one synchronous round whose length the
        environment fixes (MirrorSync, ICML-20 Alg. 1: rounds of :math:`1/r_{min}` with free
        resets), False when a step's length is a hyperparameter (the asynchronous
        learners' update interval, ICML-20 Alg. 2) or set by the factory (the crawling
        learners' epochs, phases and windows).
    """

    init: Callable[..., Any]
    step: Callable[..., tuple[Any, Any]]
    name: str
    synchronous: bool = False


@functools.partial(jax.jit, static_argnames=("learner", "num_steps"))
def run_learner(key: jax.Array, learner: Learner, problem: Any, num_steps: int,
                params: Any = None) -> tuple[Any, Any]:
    """Run ``num_steps`` steps of ``learner`` with ``jax.lax.scan``.

    Args:
      key: PRNG key; step ``i`` uses ``jax.random.fold_in(key, i)``.
      learner: a :class:`Learner` (static: build it once).
      problem: the (unbatched) environment the learner acts on; ``jax.vmap`` this function
        over environments for instances, over keys for seeds, over ``params`` for a grid.
      num_steps: number of steps (static).
      params: the learner's hyperparameters (``None``: its defaults).

    Returns:
      ``(final_state, info)`` with every leaf of ``info`` stacked over the steps; a longer
      run extends a shorter one, and a vmapped sweep (:func:`run_sweep`) equals single runs.
    """
    state = learner.init(problem, params)

    def body(st, i):
        return learner.step(jax.random.fold_in(key, i), st, problem)

    return jax.lax.scan(body, state, jnp.arange(num_steps))

