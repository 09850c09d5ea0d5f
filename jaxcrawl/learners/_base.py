r"""The one learner protocol and the one driver shared by every learner of the package.

A learner is a :class:`Learner`: two pure functions over NamedTuple states,

* ``state = init(env, params=None)`` -- ``env`` is what the learner acts on (a
  :class:`~jaxcrawl.CrawlProblem` for the crawling learners, a
  :class:`~jaxcrawl.sync_bandits.SyncBandit` for the synchronization-bandit learners);
  ``params`` holds the values one sweeps (τ clips, ε, suffix lengths, learning rates, ...)
  as arrays, so ``jax.vmap`` over them does not retrace;
* ``state, info = step(key, state, env)`` -- one epoch / phase / window / round of the
  learner,

plus a ``name`` and the facts a driver needs about the learner (``synchronous``).
Everything shape-determining (capacities, epochs, windows per epoch) is closed over by the
factory that builds the learner (:mod:`.learn_and_crawl`, :mod:`.explore_commit`,
:mod:`.mirror_sync`), as in optax and blackjax.

:func:`run_learner` is the driver: ``jax.lax.scan`` of ``step`` with the key of step ``i``
equal to ``jax.random.fold_in(key, i)``, so a longer run extends a shorter one and a
vmapped sweep (:func:`jaxcrawl.learners.sweep.run_sweep`) equals single runs.
``SyncLearner`` and :func:`run_sync_learner` are the same protocol and driver under the
names of ICML-20's learners.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

__all__ = ["Learner", "SyncLearner", "run_learner", "run_sync_learner"]


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


#: The synchronization-bandit learners (ICML-20) use the same protocol.
SyncLearner = Learner


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
      ``(final_state, info)`` with every leaf of ``info`` stacked over the steps.
    """
    state = learner.init(problem, params)

    def body(st, i):
        return learner.step(jax.random.fold_in(key, i), st, problem)

    return jax.lax.scan(body, state, jnp.arange(num_steps))


def run_sync_learner(key: jax.Array, learner: Learner, bandit: Any, num_steps: int,
                     hparams: Any | None = None) -> tuple[Any, Any]:
    """:func:`run_learner` for a synchronization-bandit learner (ICML-20), with the names
    of :mod:`jaxcrawl.learners.mirror_sync`: ``run_learner(key, learner, bandit,
    num_steps, hparams)`` (the same compiled program).

    Returns:
      ``(final_state, info)``; ``info`` is a :class:`~jaxcrawl.learners.mirror_sync.SyncInfo`
      of ``(num_steps,)`` arrays.
    """
    return run_learner(key, learner, bandit, num_steps, hparams)

