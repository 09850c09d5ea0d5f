"""The learner protocol and its driver."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp


class Learner(NamedTuple):
    """A learner: ``init(env, params=None) -> state`` and ``step(key, state, env) -> (state, info)``.

    ``env`` is a :class:`~jaxcrawl.CrawlProblem` or a :class:`~jaxcrawl.sync_bandits.SyncBandit`;
    ``params`` holds the swept values as arrays (vmapping over them does not retrace).
    ``synchronous``: one step is a round whose length the environment fixes (MirrorSync,
    ICML-20 Alg. 1).  Hashable, a static argument of :func:`run_learner`: build it once.  A
    pytree with no leaves (its functions are static aux data), so it is also a plain argument
    of ``jax.jit`` and ``tree_map`` passes over it.

    Optional attributes of ``init``: ``check(env, params)`` (:func:`check_learner_params`);
    ``pending(env, params)``, a state whose ``step`` returns ``init``'s, from which
    :func:`run_learner` runs one step more (so LLC's inner solve is compiled once).
    """

    init: Callable[..., Any]
    step: Callable[..., tuple[Any, Any]]
    name: str
    synchronous: bool = False


# a static pytree with no leaves (like an objective): a Learner passes through ``jax.jit`` as a
# plain argument, and ``tree_map`` does not visit its functions
jax.tree_util.register_pytree_node(Learner, lambda learner: ((), learner), lambda learner, _: learner)


def check_learner_params(learner: Learner, problem: Any, params: Any = None) -> None:
    """The eager validation of ``learner``'s hyperparameters (``ValueError`` naming the field
    and its rule) when ``problem`` and ``params`` hold concrete values; nothing under a trace
    (traced hyperparameters, e.g. a grid vmapped inside the caller's own ``jit``, are not
    checked).  A learner whose ``init`` has a ``check(problem, params)`` attribute is checked
    by it; :func:`run_learner` and :func:`~jaxcrawl.learners.run_sweep` call this before
    they enter ``jit``."""
    check = getattr(learner.init, "check", None)
    if check is not None and all(not isinstance(x, jax.core.Tracer)
                                 for x in jax.tree_util.tree_leaves((problem, params))):
        check(problem, params)


def run_learner(key: jax.Array, learner: Learner, problem: Any, num_steps: int,
                params: Any = None) -> tuple[Any, Any]:
    """``num_steps`` steps of ``learner`` on ``problem`` by ``jax.lax.scan``; step ``i`` uses
    ``jax.random.fold_in(key, i)``, so a longer run extends a shorter one.  Returns
    ``(final_state, info)`` with ``info`` stacked over the steps (``params=None``: defaults).

    Compiled (``jit`` with ``learner`` and ``num_steps`` static).  Concrete hyperparameters
    are validated before the compiled call (:func:`check_learner_params`: invalid ones raise
    ``ValueError``); traced ones (inside the caller's ``jit``/``vmap``) are not checked.
    """
    check_learner_params(learner, problem, params)
    return _run_learner(key, learner, problem, num_steps, params)


def _run(key: jax.Array, learner: Learner, problem: Any, num_steps: int, params: Any = None) -> tuple[Any, Any]:
    def body(st, i):
        return learner.step(jax.random.fold_in(key, i), st, problem)

    pending = getattr(learner.init, "pending", None)
    if pending is None:
        return jax.lax.scan(body, learner.init(problem, params), jnp.arange(num_steps))
    final, info = jax.lax.scan(body, pending(problem, params), jnp.arange(-1, num_steps).clip(0))
    return final, jax.tree_util.tree_map(lambda x: x[1:], info)


_run.__name__ = _run.__qualname__ = "run_learner"  # the compiled program's name (logs, compile counts)
_run_learner = jax.jit(_run, static_argnames=("learner", "num_steps"))
