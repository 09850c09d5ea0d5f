"""Monte-Carlo costs with standard errors: :func:`monte_carlo` (jittable) and
:func:`evaluate` (eager, validating), estimating K19 Prop. 1 and 4, K19 supplement eq.
12-13 and L2C eq. 2-4 / App. H."""
from __future__ import annotations

import dataclasses
import functools
import math
import warnings
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .._src.checks import is_concrete
from ..core.problem import CrawlProblem, Policy, raw_problem
from ._runs import simulate
from ._schedules import Schedule, schedule_from_policy
from ._state import SimConfig, SimState, config_for, stationary_state
from ._validate import check_schedule


class Evaluation(NamedTuple):
    """Monte-Carlo costs of a schedule, page-averaged and time-averaged, with standard errors.

    Every ``*_se`` is the standard error of the estimate above it: pages are independent,
    so it pools each page's variance across the independent replicates,
    ``se = sqrt(sum_i s_i^2 / R) / n`` (``n(R - 1)`` degrees of freedom); the ratio's uses
    the delta method.

    Attributes:
      harmonic_cost: (1/n) Σ μ_i (1/T) ∫ H(N_i) (K19 eq. 1 with eq. 2, normalised per page
        as K19 §9.2); compare with K19 Prop. 1 / Prop. 4.
      binary_cost: (1/n) Σ μ_i (1/T) ∫ 1{N_i > 0} (K19 supplement eq. 12-13).
      freshness: (1/n) Σ ζ_i (1/T) ∫ 1{N_i = 0}: expected requests served fresh per unit
        time, from the fresh time (L2C eq. 3-4; App. H for uniform intervals).
      fresh_requests: (1/n) (1/T) Σ requests served fresh, counted (L2C eq. 2 / T).
      fresh_fraction: served-fresh requests / all requests.
      crawl_rate: crawls per unit time, summed over pages (compare with the bandwidth).
      overflow: number of page-windows that overflowed a capacity (must be 0 for exact
        results).
      num_page_windows: pages × windows × replicates simulated.
    """

    harmonic_cost: jax.Array
    harmonic_cost_se: jax.Array
    binary_cost: jax.Array
    binary_cost_se: jax.Array
    freshness: jax.Array
    freshness_se: jax.Array
    fresh_requests: jax.Array
    fresh_requests_se: jax.Array
    fresh_fraction: jax.Array
    fresh_fraction_se: jax.Array
    crawl_rate: jax.Array
    crawl_rate_se: jax.Array
    overflow: jax.Array
    num_page_windows: jax.Array


def _mean_se(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """x: (R, ..., n) per replicate and page; mean over both and pooled standard error."""
    r, n = x.shape[0], x.shape[-1]
    mean = jnp.mean(x, axis=(0, -1))
    var_page = jnp.var(x, axis=0, ddof=1)  # (..., n)
    se = jnp.sqrt(jnp.sum(var_page, axis=-1) / r) / n
    return mean, se


def monte_carlo(
    key: jax.Array,
    problem: CrawlProblem,
    schedule: Schedule,
    config: SimConfig,
    num_windows: int,
    *,
    num_replicates: int = 4,
    initial: SimState | None = None,
) -> Evaluation:
    """Monte-Carlo costs of ``schedule`` over ``num_windows * config.window`` time units.

    Runs ``num_replicates`` independent replicates of :func:`~jaxcrawl.simulate.simulate`
    (as one problem with the pages repeated, since pages are independent; ``config`` is
    for one copy and its pool is scaled), each from ``initial`` or, by default, from a
    draw of :func:`~jaxcrawl.simulate.stationary_state` (then every estimate is unbiased
    for the long-run closed forms: K19 Prop. 1 and 4, K19 supplement eq. 12-13, L2C eq. 4
    and App. H).  Jittable with ``config``, ``num_windows`` and ``num_replicates`` static.
    """
    if not isinstance(num_replicates, int) or num_replicates < 2:
        raise ValueError("num_replicates must be an int >= 2 (standard errors need two)")
    key_init, key_sim = jax.random.split(key)
    state = _replicated_state(key_init, problem, schedule, num_replicates, initial)
    return _monte_carlo_core(key_sim, problem, schedule, state, config, num_windows, num_replicates)


def _tile(a: ArrayLike, shape: tuple[int, ...], r: int) -> jax.Array:
    """Repeat the pages r times along the last axis: (..., n) -> (..., r * n)."""
    a = jnp.broadcast_to(a, shape)
    return jnp.concatenate([a] * r, axis=-1)


def _tiled_problem(problem: CrawlProblem, schedule: Schedule,
                   r: int) -> tuple[CrawlProblem, Schedule]:
    shape = jnp.shape(problem.change_rate)
    tiled = raw_problem(
        _tile(problem.importance, shape, r), _tile(problem.change_rate, shape, r),
        problem.bandwidth, _tile(problem.complete, shape, r),
    )
    return tiled, jax.tree_util.tree_map(lambda a: _tile(a, shape, r), schedule)


def _replicated_state(key: jax.Array, problem: CrawlProblem, schedule: Schedule, r: int,
                      initial: SimState | None) -> SimState:
    """Initial states of r replicates, pages repeated: independent stationary draws, or
    ``initial`` repeated."""
    tiled, sched = _tiled_problem(problem, schedule, r)
    if initial is None:
        return stationary_state(key, tiled, sched)
    shape = jnp.shape(problem.change_rate)
    return SimState(
        time=initial.time,
        since_crawl=_tile(initial.since_crawl, shape, r),
        num_changes=_tile(initial.num_changes, shape, r),
    )


def _monte_carlo_core(key: jax.Array, problem: CrawlProblem, schedule: Schedule,
                      state: SimState, config: SimConfig, num_windows: int,
                      r: int) -> Evaluation:
    """Pages are independent, so r replicates of n pages are one problem of r * n pages
    (no vmap: one flat pool, one compilation of the window)."""
    dtype = problem.change_rate.dtype
    horizon = jnp.asarray(num_windows * config.window, dtype)
    shape = jnp.shape(problem.change_rate)
    tiled, sched = _tiled_problem(problem, schedule, r)
    cfg = dataclasses.replace(
        config,
        pool_capacity=config.pool_capacity * r,
        heavy_pages=config.heavy_pages * r,
        heavy_event_pages=config.heavy_event_pages * r,
    )
    _, tot, _ = simulate(key, tiled, sched, state, cfg, num_windows)

    def split(a):  # (..., r * n) -> (r, ..., n)
        return jnp.moveaxis(a.reshape(shape[:-1] + (r, shape[-1])), -2, 0)

    tot = jax.tree_util.tree_map(split, tot)
    mu = jnp.broadcast_to(problem.importance, jnp.shape(problem.change_rate))
    harm, harm_se = _mean_se(mu * tot.harmonic / horizon)
    binc, bin_se = _mean_se(mu * tot.stale_time / horizon)
    fr, fr_se = _mean_se(mu * (horizon - tot.stale_time) / horizon)
    fq, fq_se = _mean_se(tot.fresh_requests / horizon)
    n = problem.change_rate.shape[-1]
    cr, cr_se = _mean_se(tot.crawls / horizon)
    total_req = jnp.sum(tot.requests, axis=(0, -1))
    frac = jnp.sum(tot.fresh_requests, axis=(0, -1)) / jnp.maximum(total_req, 1.0)
    lin = tot.fresh_requests - frac[..., None] * tot.requests  # delta-method linearisation
    var_lin = jnp.sum(jnp.var(lin, axis=0, ddof=1), axis=-1)
    frac_se = jnp.sqrt(var_lin * r) / jnp.maximum(total_req, 1.0)
    return Evaluation(
        harmonic_cost=harm,
        harmonic_cost_se=harm_se,
        binary_cost=binc,
        binary_cost_se=bin_se,
        freshness=fr,
        freshness_se=fr_se,
        fresh_requests=fq,
        fresh_requests_se=fq_se,
        fresh_fraction=frac,
        fresh_fraction_se=frac_se,
        crawl_rate=cr * n,
        crawl_rate_se=cr_se * n,
        overflow=jnp.sum(tot.overflow, axis=(0, -1)),
        num_page_windows=jnp.asarray(r * num_windows * n),
    )


@functools.lru_cache(maxsize=64)
def _compiled_mc(config: SimConfig, num_windows: int, num_replicates: int):
    """One compiled program per (config, num_windows, num_replicates) and input shapes."""

    def monte_carlo_program(key, problem, schedule, state):
        return _monte_carlo_core(key, problem, schedule, state, config, num_windows, num_replicates)

    return jax.jit(monte_carlo_program)


@functools.lru_cache(maxsize=64)
def _compiled_initial(num_replicates: int, stationary: bool):
    def initial_states(key, problem, schedule, initial):
        return _replicated_state(key, problem, schedule, num_replicates,
                                 None if stationary else initial)

    return jax.jit(initial_states)


def evaluate(
    key: jax.Array,
    problem: CrawlProblem,
    policy: Policy | Schedule,
    *,
    horizon: float,
    window: float = 1.0,
    num_replicates: int = 4,
    initial: str | SimState = "stationary",
    incomplete: str = "poisson",
    phase: ArrayLike = 0.0,
    tail: float = 1e-9,
    config: SimConfig | None = None,
) -> Evaluation:
    """Monte-Carlo evaluation of a policy: the eager, validating front door of :func:`monte_carlo`.

    Estimates the long-run costs of K19 Prop. 1 and 4 (harmonic), K19 supplement
    eq. 12-13 (binary) and L2C eq. 4 / App. H (freshness), or with a deterministic
    ``initial`` state the transient ones (L2C Lemma 1, eq. 10).

    Args:
      key: PRNG key.
      problem: the pages (concrete values).
      policy: a solver's :class:`~jaxcrawl.problem.Policy` (run by
        :func:`~jaxcrawl.simulate.schedule_from_policy` with ``incomplete`` and
        ``phase``) or a :class:`~jaxcrawl.simulate.Schedule`.
      horizon: simulated time per replicate; a whole number of windows.
      window: window length.
      num_replicates: independent replicates (>= 2) for the standard errors.
      initial: ``"stationary"`` (default: unbiased for long-run costs) or a
        :class:`~jaxcrawl.simulate.SimState` (transient costs, e.g. L2C Lemma 1).
      incomplete: how pages not crawled on signals run a Policy: ``"poisson"`` or
        ``"periodic"``.
      phase: the periodic crawls' phase, for ``incomplete="periodic"``.
      tail: per-page-window overflow probability the capacities are sized for.
      config: explicit :class:`~jaxcrawl.simulate.SimConfig` (overrides ``window`` and
        ``tail``).

    Returns:
      :class:`Evaluation`.  Warns (``RuntimeWarning``) if any page-window overflowed.
    """
    if isinstance(policy, Policy):
        schedule = schedule_from_policy(problem, policy, incomplete=incomplete, phase=phase)
    elif isinstance(policy, Schedule):
        schedule = policy
    else:
        raise TypeError("policy must be a jaxcrawl Policy or a simulate.Schedule")
    if not is_concrete(problem, schedule):
        raise ValueError("evaluate needs concrete values; inside jit use monte_carlo")
    check_schedule(problem, schedule)
    if config is None:
        config = config_for(problem, schedule, window, tail=tail)
    if not config.requests:
        raise ValueError("evaluate needs a config with requests=True (it reports requests served fresh)")
    w = config.window
    nw = horizon / w
    num_windows = int(round(nw))
    if not (math.isfinite(nw) and num_windows >= 1 and abs(nw - num_windows) < 1e-6 * max(1, nw)):
        raise ValueError(
            f"horizon must be a positive whole number of windows; got horizon={horizon!r}, "
            f"window={w!r}"
        )
    r = int(num_replicates)
    if r < 2:
        raise ValueError("num_replicates must be an int >= 2 (standard errors need two)")
    if isinstance(initial, str):
        if initial != "stationary":
            raise ValueError("initial must be 'stationary' or a SimState")
        init = None
    elif isinstance(initial, SimState):
        init = initial
    else:
        raise TypeError("initial must be 'stationary' or a SimState")
    key_init, key_sim = jax.random.split(key)
    state = _compiled_initial(r, init is None)(key_init, problem, schedule, init)
    res = _compiled_mc(config, num_windows, r)(key_sim, problem, schedule, state)
    n_over = int(np.sum(np.asarray(res.overflow)))
    if n_over > 0:
        warnings.warn(
            f"{n_over} page-windows overflowed the capacities of {config}; the events "
            "past a capacity were not simulated or not recorded, so the result is not exact",
            RuntimeWarning,
            stacklevel=2,
        )
    return res
