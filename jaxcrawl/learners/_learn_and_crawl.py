r"""LambdaLearnAndCrawl (LLC, LLCA, BLLCε) and Avrachenkov et al.'s online re-solving loop.

**LambdaLearnAndCrawl** (Kolobov et al., NeurIPS-19 Alg. 4; "K19") learns change rates
while it crawls, in epochs of length :math:`T_{epoch}`:

1. (line 4) solve for the policy optimal for the current estimates with the inner solver,
   an :class:`~jaxcrawl.Objective` solved by :func:`jaxcrawl.solve`: ``"harmonic"``
   (LambdaCrawl: LLC), ``"harmonic-approx"`` (LambdaCrawlApprox, Prop. 9: LLCA),
   ``"binary-epsilon"`` (BLCε with ``params.epsilon``, 0.4 in the paper: BLLCε), or any
   registered or user-defined objective;
2. (lines 5-8) execute it for one epoch -- Poisson crawls for pages in :math:`W^-`, crawls
   on change signals with probability :math:`p_w` for pages in :math:`W^\circ` -- and
   record the observations;
3. (lines 10-13) re-estimate every rate from the last :math:`S(n)` epochs: pages in
   :math:`W^-` by the smoothed MLE of eq. 10 (imaginary intervals of length 0.5), pages in
   :math:`W^\circ` by eq. 11 with the imaginary observation, :math:`(U + 0.5)/(T + c)`.

The initial estimate is 1 change per unit time (K19 Experiment 3).  After every epoch the
new policy is evaluated under the *true* rates in closed form (harmonic cost, K19 Prop. 1
and 4 / eq. 8; binary cost, supplement eq. 12-13), as in K19 Fig. 3.

The likelihood of eq. 10 depends on the intervals of crawls that saw no change only
through their sum, so the history keeps that sum per epoch and the changed crawls in a ring
buffer: the estimate is exactly the MLE of the full suffix in O(pages × (capacity +
epochs)) memory.  A page whose ring overwrites part of its suffix is estimated from the
complete epochs it still holds (``info.truncated`` counts them).

**Online re-solving** (Avrachenkov, Patil & Thoppe 2022 §5): every page is crawled as a
Poisson process at its current rate; an online estimator (LLN eq. 1, SA eq. 2, SAM eq. 3)
consumes each observation, and every round the estimates go to Azar et al.'s solver
(``solve(problem, "binary")``) for new rates.
"""
from __future__ import annotations

import functools
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxcrawl import estimators
from jaxcrawl._src.checks import is_concrete
from jaxcrawl._src.history import DEFAULT_MAX_RATE, DEFAULT_MIN_RATE
from jaxcrawl._src.observations import OBSERVATION
from jaxcrawl._src.ring_mle import flat_capacity as default_flat_capacity
from jaxcrawl._src.ring_mle import ring_mle_smoothed
from jaxcrawl._src.sampling import poisson_capacity
from jaxcrawl.core.objectives import (
    Objective,
    binary,
    binary_cost,
    binary_freshness,
    harmonic,
    harmonic_approx,
    harmonic_cost,
    objective,
    objective_names,
)
from jaxcrawl.core.problem import CrawlProblem, Policy
from jaxcrawl.core.solve import solve
from jaxcrawl.simulate import (
    ObserveConfig,
    SimConfig,
    SimState,
    config_for,
    init_state,
    observe_config,
    observe_window,
    padded_observations,
    poisson_schedule,
    schedule_from_policy,
    simulate_window,
)

from ._base import Learner
from ._history import (
    CrawlHistory,
    check_observe,
    crawl_epoch,
    empty_history,
    in_suffix,
    observe_epoch,
    suffix_history,
    use_observation,
)

_LEARNER_NAMES = {harmonic(): "llc", harmonic_approx(): "llca", binary(0.4): "bllc"}

Solver = str | Objective


def inner_utility(solver: Solver) -> Objective:
    """The :class:`~jaxcrawl.Objective` of an inner solver: a registry name
    (:func:`jaxcrawl.objective_names`) or an :class:`~jaxcrawl.Objective` itself."""
    try:
        return objective(solver)
    except (ValueError, TypeError):
        raise ValueError(
            f"solver must be a registered objective name, a jaxcrawl.Objective, or a tuple of these; "
            f"got {solver!r}") from None


def _utilities(solver: Solver | tuple) -> tuple[Objective, ...]:
    names = solver if isinstance(solver, tuple) and not isinstance(solver, Objective) else (solver,)
    if not names:
        raise ValueError("solver must not be an empty tuple")
    return tuple(inner_utility(s) for s in names)


def _estimated_problem(problem: CrawlProblem, estimate: ArrayLike) -> CrawlProblem:
    return problem.replace(change_rate=jnp.asarray(estimate, problem.change_rate.dtype))


def _solve_utility(utility: Objective, problem: CrawlProblem, epsilon: ArrayLike) -> Policy:
    if utility is binary(0.4):
        # BLCε's floor ε R / n comes from the learner's (traced, sweepable) params.epsilon.
        n = problem.importance.shape[-1]
        floor = jnp.asarray(epsilon, problem.dtype) * jnp.asarray(problem.bandwidth, problem.dtype) / n
        return solve(problem, binary(), bounds=(floor[..., None], None))
    return solve(problem, utility)


def inner_solve(solver: Solver | tuple, problem: CrawlProblem, estimate: ArrayLike,
                epsilon: ArrayLike = 0.4, index: ArrayLike = 0) -> Policy:
    r"""K19 Alg. 4 line 4: the inner solver's optimal policy for the estimated change rates.

    ``solver`` is an inner solver (:func:`inner_utility`) or a tuple of them, of which the
    one at ``index`` (traced: ``jax.lax.switch``) is used.  The registry's
    ``"binary-epsilon"`` (BLCε, K19 §9.3) takes its floor :math:`\varepsilon R/n` from
    ``epsilon`` (an array: vmappable); every other utility is ``jaxcrawl.solve(problem,
    utility)`` on the problem with ``change_rate = estimate``.
    """
    utilities = _utilities(solver)
    est = _estimated_problem(problem, estimate)
    if len(utilities) == 1:
        return _solve_utility(utilities[0], est, epsilon)
    branches = [lambda q, eps, u=u: _solve_utility(u, q, eps) for u in utilities]
    idx = jnp.clip(jnp.asarray(index).astype(jnp.int32), 0, len(utilities) - 1)
    return jax.lax.switch(idx, branches, est, epsilon)


# ------------------------------------------------------------------- evaluation
def executed_policy(problem: CrawlProblem, policy: Policy) -> Policy:
    r"""The policy a crawler executes, expressed under the *true* change rates.

    A solver run on estimated rates :math:`\hat\lambda` returns, for a page crawled on
    change signals, the probability :math:`p_w` of crawling on each signal and the rate
    :math:`p_w\hat\lambda_w` it *expects*; the crawler executes :math:`p_w`, so under the
    true rate the page is crawled at :math:`p_w\lambda_w` (K19 eq. 6, Prop. 4).  Poisson
    pages keep their rate.  Use this before evaluating a learned policy with
    :func:`jaxcrawl.harmonic_cost` or :func:`~jaxcrawl.binary_cost`.
    """
    rate = jnp.where(policy.on_signal, policy.prob * problem.change_rate, policy.rate)
    return policy._replace(rate=rate, residual=jnp.sum(rate, axis=-1) - problem.bandwidth)


def policy_costs(problem: CrawlProblem, policy: Policy) -> tuple[jax.Array, jax.Array]:
    """``(harmonic, binary)`` page-averaged costs of ``policy`` under the true rates.

    K19 eq. 8 with Prop. 1 and 4 (harmonic) and supplement eq. 12-13 (binary), of the
    :func:`executed_policy`.
    """
    ex = executed_policy(problem, policy)
    return harmonic_cost(problem, ex), binary_cost(problem, ex)


# ---------------------------------------------------------------------- history
def suffix_estimate(hist: CrawlHistory, complete: ArrayLike, epoch: ArrayLike, suffix_epochs: ArrayLike,
                    smoothing: ArrayLike, epoch_length: ArrayLike, previous: ArrayLike, *,
                    min_rate: float = DEFAULT_MIN_RATE,
                    max_rate: float = 1e3, half_life: ArrayLike | None = None,
                    complete_interval: ArrayLike = 0.5,
                    flat_capacity: int | str | None = "auto", return_converged: bool = False) -> tuple:
    r"""K19 Alg. 4 lines 10-13: change-rate estimates from the history suffix.

    Incomplete pages: :func:`jaxcrawl.estimators.mle_smoothed` (eq. 10 with imaginary
    changed and unchanged intervals of length ``smoothing``) on :func:`suffix_history`
    (the :class:`CrawlHistory` of ``record_window``).
    Complete pages: eq. 11 with the imaginary observation, :math:`(U + s)/(T + c)` with U
    the change signals of the suffix, T its duration, s ``smoothing`` and c
    ``complete_interval`` (default 0.5: the imaginary observation comes with an imaginary
    interval of the same length as the incomplete pages' smoothing, as in the authors'
    code; 0 gives :math:`(U + s)/T`, the other reading of Alg. 4 line 13).  A page whose
    suffix is empty because its ring buffer wrapped inside the current epoch keeps its
    ``previous`` estimate.

    Forgetting: with ``half_life`` (time units; ``None``: off) every observation of epoch
    ``e`` is weighted by :math:`2^{-(\text{epoch}-e)\,T_{epoch}/h}`
    (:func:`_discounted_suffix_estimate`: :func:`jaxcrawl.estimators.weighted_mle` for
    incomplete pages, :math:`(\sum_e a_e U_e + s)/(\sum_e a_e T_{epoch} + c)` for complete
    ones), so the estimates follow drifting rates (:func:`jaxcrawl.simulate.simulate_drift`);
    ``half_life = inf`` gives the undiscounted estimates.

    Work: by default (``flat_capacity="auto"``) the incomplete pages' equation is solved on
    the ring's valid entries packed into a flat array
    (:func:`jaxcrawl._src.ring_mle.ring_mle_smoothed`; four entries per page on
    average, more summed exactly chunk by chunk), not on the padded ``(n, C + E)`` suffix
    most of which is empty.
    An integer sets the flat capacity; ``None`` solves on the padded suffix.

    Returns:
      ``(estimate, truncated)``: ``(n,)`` rates, and ``(n,)`` bool for pages whose suffix
      was shortened by the ring buffer; with ``return_converged=True`` also ``(n,)`` bool:
      whether each incomplete page's likelihood solve met its tolerance (True for complete
      pages and kept estimates, which are closed forms).
    """
    if is_concrete(smoothing):  # every path (the padded one checks inside mle_smoothed, the flat one here)
        s = np.asarray(smoothing, dtype=float)
        if not (np.all(np.isfinite(s)) and np.all(s > 0)):
            raise ValueError(f"smoothing must be finite and > 0 (the imaginary observations' length); got {smoothing!r}")
    complete = jnp.asarray(complete).astype(bool)  # a bool mask or a problem's 0/1 floats
    if half_life is not None:
        out = _discounted_suffix_estimate(hist, complete, epoch, suffix_epochs, smoothing, epoch_length, previous,
                                          half_life, min_rate=min_rate, max_rate=max_rate,
                                          complete_interval=complete_interval)
        return out if return_converged else out[:2]
    dtype = hist.unchanged_time.dtype
    n, cap = hist.changed_interval.shape
    num_cols = hist.column_epoch.shape[0]
    if flat_capacity is None:  # the padded suffix (the reference the flat path is tested against)
        intervals, changed, mask = suffix_history(hist, epoch, suffix_epochs)
        solved = estimators.mle_smoothed(intervals, changed, mask, smoothing=smoothing,
                                         min_rate=min_rate, max_rate=max_rate, return_info=True)
        inc, inc_ok = solved.rate, solved.converged
    else:  # the same equation on the ring's valid entries only (jaxcrawl._src.ring_mle)
        dropped = hist.dropped_epoch[:, None]
        count = jnp.sum(in_suffix(hist.changed_epoch, epoch, suffix_epochs, num_cols, dropped), axis=-1,
                        dtype=jnp.int32)  # the ring's newest entries (a ring keeps time order)
        col_ok = in_suffix(hist.column_epoch[None, :], epoch, suffix_epochs, num_cols, dropped)
        unchanged = jnp.sum(jnp.where(col_ok & (hist.unchanged_time > 0), hist.unchanged_time, 0), axis=-1)
        est, _ = ring_mle_smoothed(hist.changed_interval, hist.head, count, unchanged, smoothing, min_rate, max_rate,
                                   size=default_flat_capacity(n, cap) if flat_capacity == "auto"
                                   else int(flat_capacity))
        inc, inc_ok = est.rate, est.converged
    no_drop = jnp.full((1,), -1, jnp.int32)
    col_ok = in_suffix(hist.column_epoch, epoch, suffix_epochs, num_cols, no_drop)
    duration = jnp.sum(col_ok).astype(dtype) * jnp.asarray(epoch_length, dtype)
    signals = jnp.sum(jnp.where(col_ok, hist.signals, 0), axis=-1).astype(dtype)  # U over the suffix
    total = duration + jnp.asarray(complete_interval, dtype)                       # T + c
    # (U + s)/(T + c); T + c = 0 (an empty suffix read with c = 0) gives max_rate, as s/0 did
    comp = jnp.clip((signals + jnp.asarray(smoothing, dtype)) / jnp.where(total > 0, total, 0.0),
                    min_rate, max_rate)
    s_eff = jnp.minimum(jnp.asarray(suffix_epochs, dtype), num_cols)
    truncated = ~complete & (hist.dropped_epoch >= 0) & (hist.dropped_epoch.astype(dtype) > epoch - s_eff)
    empty = ~complete & (hist.dropped_epoch >= epoch)
    est = jnp.where(complete, comp, jnp.where(empty, previous, inc))
    if return_converged:
        return est.astype(dtype), truncated, complete | empty | inc_ok
    return est.astype(dtype), truncated


def _discounted_suffix_estimate(hist: CrawlHistory, complete, epoch, suffix_epochs, smoothing, epoch_length, previous,
                                half_life, *, min_rate, max_rate, complete_interval=0.5):
    """:func:`suffix_estimate` with exponentially discounted epochs (the forgetting option)."""
    dtype = hist.unchanged_time.dtype
    n, cap = hist.changed_interval.shape
    num_cols = hist.column_epoch.shape[0]
    intervals, changed, mask = suffix_history(hist, epoch, suffix_epochs)
    tags = jnp.concatenate([hist.changed_epoch, jnp.broadcast_to(hist.column_epoch, (n, num_cols))], axis=-1)
    length = jnp.asarray(epoch_length, dtype)
    age = (jnp.asarray(epoch, dtype) - tags.astype(dtype)) * length
    weights = estimators.discount_weights(age, jnp.asarray(half_life, dtype))
    solved = estimators.weighted_mle(intervals, changed, mask, weights=weights, smoothing=smoothing,
                                     min_rate=min_rate, max_rate=max_rate, return_info=True)
    inc = solved.rate
    no_drop = jnp.full((1,), -1, jnp.int32)
    col_ok = in_suffix(hist.column_epoch, epoch, suffix_epochs, num_cols, no_drop)
    col_w = jnp.where(col_ok, weights[0, cap:], 0.0)
    duration = jnp.sum(col_w) * length
    signals = jnp.sum(hist.signals * col_w, axis=-1)
    comp = jnp.clip((signals + jnp.asarray(smoothing, dtype)) / (duration + jnp.asarray(complete_interval, dtype)),
                    min_rate, max_rate)
    s_eff = jnp.minimum(jnp.asarray(suffix_epochs, dtype), num_cols)
    truncated = ~complete & (hist.dropped_epoch >= 0) & (hist.dropped_epoch.astype(dtype) > epoch - s_eff)
    empty = ~complete & (hist.dropped_epoch >= epoch)
    est = jnp.where(complete, comp, jnp.where(empty, previous, inc))
    return est.astype(dtype), truncated, complete | empty | solved.converged


# -------------------------------------------------------------------- LLC proper
class LLCParams(NamedTuple):
    """Hyperparameters of LambdaLearnAndCrawl (arrays, so ``jax.vmap`` sweeps them).

    Attributes:
      epsilon: BLCε's uniform floor fraction (K19 §9.3: 0.4); only the registry's
        ``"binary-epsilon"`` inner solver (BLLCε) reads it.
      suffix_epochs: :math:`S(n)`, the history suffix in epochs (``inf``: all the
        ``history_epochs`` kept; K19 Prop. 8 needs the whole history asymptotically).
      smoothing: length of the imaginary intervals / count (K19 Alg. 4: 0.5).
      initial_rate: the initial change-rate estimate (K19 Experiment 3: 1 per day).
      solver: for a learner built with several inner solvers, the one to use: its name
        or :class:`~jaxcrawl.Objective` (e.g. ``"harmonic-approx"``; static, resolved
        by the learner to its position, ``ValueError`` if it is not one of them), or
        a number: a position in ``solver_names`` when they are given, else in the
        learner's tuple (an array, so one compiled program sweeps LLC, LLCA and
        BLLCε).  A learner with one inner solver accepts its own name (or any number).
      solver_names: the labels of a numeric ``solver`` (static): ``solver = k`` picks
        ``solver_names[k]``.  :func:`~jaxcrawl.learners.grid_product` fills it for an
        axis of names, ``grid_product(LLCParams, solver=["harmonic", "binary-epsilon"])``.
      half_life: the forgetting option's half-life in time units (exponential discount
        of older epochs, :func:`suffix_estimate`); read only by a learner built with
        ``forgetting=True`` (``inf``: no discount).
      complete_interval: the imaginary interval added to the observed time T of a
        complete page's estimate, :math:`(U + s)/(T + c)` (K19 Alg. 4 line 13, garbled in
        the paper): 0.5 (default, the authors' code: the imaginary observation of length
        0.5, as for the incomplete pages) or 0 (:math:`(U + s)/T`).  See
        :func:`suffix_estimate`.
    """

    epsilon: float = 0.4
    suffix_epochs: float = float("inf")
    smoothing: float = 0.5
    initial_rate: float = 1.0
    solver: float | str | Objective = 0.0
    half_life: float = float("inf")
    complete_interval: float = 0.5
    solver_names: tuple = ()


def _solver_label(solver):
    """A static solver choice (a name or an Objective; a registered Objective by its name,
    so that sweep fingerprints stay stable), or ``None`` for a number."""
    if isinstance(solver, str):
        return solver
    if isinstance(solver, Objective):
        return solver.name if solver.name in objective_names() and objective(solver.name) == solver else solver
    return None


def _flatten_llc(p: LLCParams):
    label = _solver_label(p.solver)
    names = tuple(_solver_label(n) if _solver_label(n) is not None else n for n in p.solver_names)
    children = tuple(None if f == "solver" and label is not None else v
                     for f, v in zip(LLCParams._fields[:-1], p[:-1]))
    return children, (label, names)


def _unflatten_llc(aux, children):
    label, names = aux
    fields = list(children)
    if label is not None:
        fields[LLCParams._fields.index("solver")] = label
    return LLCParams(*fields, names)


jax.tree_util.register_pytree_node(LLCParams, _flatten_llc, _unflatten_llc)


def _solver_position(utilities: tuple, solver) -> int:
    """The position of a named inner solver among a learner's ``utilities``."""
    try:
        u = inner_utility(solver)
    except ValueError:
        u = None
    if u is None or u not in utilities:
        raise ValueError(f"params.solver {solver!r} is not one of this learner's inner solvers "
                         f"{[x.name for x in utilities]}")
    return utilities.index(u)


def _solver_index(utilities: tuple, params: LLCParams) -> Any:
    """``params.solver`` as a position in the learner's ``utilities`` (a Python int for a
    name; an int32 array for a number, looked up in ``params.solver_names`` when given)."""
    label = _solver_label(params.solver)
    if label is not None:
        return _solver_position(utilities, label)
    if not params.solver_names:
        return params.solver
    table = jnp.asarray([_solver_position(utilities, n) for n in params.solver_names], jnp.int32)
    k = jnp.clip(jnp.asarray(params.solver).astype(jnp.int32), 0, len(params.solver_names) - 1)
    return table[k]


class LLCState(NamedTuple):
    r"""LambdaLearnAndCrawl state.

    Attributes:
      estimate: ``(n,)`` current change-rate estimates :math:`\hat\lambda_n`.
      policy: the :class:`~jaxcrawl.Policy` to execute in the next epoch
        (optimal for ``estimate``).
      sim: the simulator's :class:`~jaxcrawl.simulate.SimState` (the world).
      history: :class:`CrawlHistory`.
      epoch: epochs completed.
      params: :class:`LLCParams`.
    """

    estimate: jax.Array
    policy: Policy
    sim: SimState
    history: CrawlHistory
    epoch: jax.Array
    params: LLCParams


class LLCInfo(NamedTuple):
    r"""Diagnostics of one epoch (the policy is the one computed at the epoch's end).

    Attributes:
      harmonic_cost: K19 eq. 8 (Prop. 1, 4) of the new policy under the true rates.
      binary_cost: K19 supplement eq. 12-13 of the new policy under the true rates.
      estimate_error: mean over pages of :math:`|\log(\hat\lambda/\lambda)|`.
      num_crawls: crawls made during the epoch (all pages).
      overflow: page-windows of the epoch that overflowed a simulator capacity (0 for
        an exact simulation).
      truncated: pages whose suffix was shortened by the ring buffer.
      dual: the new policy's bandwidth multiplier.
      epoch: epochs completed.
      converged: whether the inner solve's root-find met its tolerance
        (:attr:`jaxcrawl.Policy.converged`); False on every epoch when the hyperparameters
        are outside their domain (traced hyperparameters are not refused: this flag
        reports them).
      sampler: which simulator made the epoch's observations:
        ``EVENT`` (0, every change simulated) or
        ``OBSERVATION`` (1, observations only).
      estimate_converged: whether every page's change-rate estimate (the likelihood
        solve of :func:`suffix_estimate`) met its tolerance this epoch.
    """

    harmonic_cost: jax.Array
    binary_cost: jax.Array
    estimate_error: jax.Array
    num_crawls: jax.Array
    overflow: jax.Array
    truncated: jax.Array
    dual: jax.Array
    epoch: jax.Array
    converged: Any = True
    sampler: Any = 0
    estimate_converged: Any = True


def _params(params, cls, dtype):
    if params is None:
        params = cls()
    return cls(*(jnp.asarray(v, dtype) for v in params))


def _llc_params(params, dtype) -> LLCParams:
    """Every numeric field as an array of ``dtype``; a named solver and the labels stay static."""
    p = LLCParams() if params is None else params
    if not isinstance(p, LLCParams):
        raise TypeError(f"params must be a jaxcrawl.learners.LLCParams; got {type(p).__name__}")
    static = _solver_label(p.solver) is not None
    return LLCParams(*(v if f == "solver" and static else jnp.asarray(v, dtype)
                       for f, v in zip(LLCParams._fields[:-1], p[:-1])), tuple(p.solver_names))


def _llc_params_valid(p: LLCParams) -> jax.Array:
    """In-graph: the hyperparameters lie in the domain :func:`_check_llc_params` checks eagerly
    (False for a NaN); what a traced run reports in ``info.converged``."""
    eps, s, sm, r0 = p[:4]
    return ((p.half_life > 0) & (p.complete_interval >= 0) & jnp.isfinite(p.complete_interval)
            & (eps >= 0) & (eps <= 1) & (s >= 1) & (sm > 0) & jnp.isfinite(sm) & (r0 > 0) & jnp.isfinite(r0))


def _check_llc_params(p: LLCParams):
    if not is_concrete(p):
        return
    eps, s, sm, r0 = (np.asarray(v) for v in p[:4])
    if np.any(np.isnan(np.asarray(p.half_life))) or np.any(np.asarray(p.half_life) <= 0):
        raise ValueError(f"half_life must be > 0 (inf: no forgetting); got {np.asarray(p.half_life)}")
    ci = np.asarray(p.complete_interval)
    if np.any(~np.isfinite(ci)) or np.any(ci < 0):
        raise ValueError(f"complete_interval must be finite and >= 0; got {ci}")
    if np.any(~np.isfinite(eps)) or np.any(eps < 0) or np.any(eps > 1):
        raise ValueError(f"epsilon must be in [0, 1]; got {eps}")
    if np.any(np.isnan(s)) or np.any(s < 1):
        raise ValueError(f"suffix_epochs must be >= 1 (inf: the whole kept history); got {s}")
    if np.any(~np.isfinite(sm)) or np.any(sm <= 0):
        raise ValueError(f"smoothing must be finite and > 0; got {sm}")
    if np.any(~np.isfinite(r0)) or np.any(r0 <= 0):
        raise ValueError(f"initial_rate must be finite and > 0; got {r0}")


def lambda_learn_and_crawl(solver: Solver | tuple = "harmonic", *, config: SimConfig,
                           windows_per_epoch: int,
                           history_capacity: int = 64, history_epochs: int = 21,
                           min_rate: float = DEFAULT_MIN_RATE,
                           max_rate: float = 1e3, forgetting: bool = False,
                           observe: ObserveConfig | None = None) -> Learner:
    r"""LambdaLearnAndCrawl (K19 Alg. 4) with a given inner solver, as a :class:`Learner`.

    One ``step`` is one epoch of length ``windows_per_epoch * config.window``: execute
    the current policy in the simulator, record the observations, re-estimate from the
    suffix (:func:`suffix_estimate`), re-solve (K19 Alg. 4 line 4) and evaluate the new
    policy under the true rates (:class:`LLCInfo`).

    Args:
      solver: the inner solver, a :class:`~jaxcrawl.Objective` or its registry name:
        ``"harmonic"`` (LLC), ``"harmonic-approx"`` (LLCA), ``"binary-epsilon"`` (BLLCε
        with ``params.epsilon``) or any other registered or
        user-defined utility (solved with :func:`jaxcrawl.solve`); or a tuple of these,
        of which ``params.solver`` picks one (all share one compiled program; under
        ``jax.vmap`` every listed solver is evaluated and the chosen one kept).
      config: the simulator's static :class:`~jaxcrawl.simulate.SimConfig` (see
        :func:`llc_settings`, which sizes it for the learner's policies).
      windows_per_epoch: simulator windows per epoch.
      history_capacity: changed crawls kept per page (the ring buffer ``C``).
      history_epochs: epoch columns kept (``E``): the longest possible suffix.
      min_rate, max_rate: clip range of the estimates (the smoothing keeps them finite;
        the clip only guards the solvers).
      forgetting: discount older epochs by ``params.half_life`` (:func:`suffix_estimate`)
        so the learner follows drifting rates; the name gets a ``"-forget"`` suffix.
      observe: the observation-level sampler's config (:func:`llc_settings` builds it):
        when given, each epoch is drawn in one window by
        :func:`jaxcrawl.simulate.observe_window` (exact in distribution: the learner reads
        only crawl intervals, changed bits and change signals, and evaluates its policies
        in closed form), else by the event-level simulator in ``windows_per_epoch``
        windows of ``config``.  ``info.sampler`` says which.

    Returns:
      :class:`Learner` named ``"llc"``, ``"llca"``, ``"bllc"`` or ``"llc[<utility name>]"``
      (names joined by ``+`` for a tuple); ``init(problem, params: LLCParams = None)``.
    """
    utilities = _utilities(solver)
    if not isinstance(config, SimConfig):
        raise TypeError("config must be a jaxcrawl.simulate.SimConfig (see llc_settings)")
    for name, v in (("windows_per_epoch", windows_per_epoch), ("history_capacity", history_capacity),
                    ("history_epochs", history_epochs)):
        if not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    if not (0 < min_rate < max_rate):
        raise ValueError("need 0 < min_rate < max_rate")
    epoch_length = config.window * windows_per_epoch
    sampler = check_observe(observe, epoch_length)

    def solve_for(problem, estimate, prm):
        return inner_solve(utilities, problem, estimate, prm.epsilon, _solver_index(utilities, prm))

    def unsolved(problem: CrawlProblem, params: LLCParams | None, epoch: int) -> LLCState:
        dtype = problem.change_rate.dtype
        prm = _llc_params(params, dtype)
        _check_llc_params(prm)
        n = problem.change_rate.shape[-1]
        estimate = jnp.broadcast_to(prm.initial_rate, (n,)).astype(dtype)
        if epoch == 0:
            policy = solve_for(problem, estimate, prm)
        else:  # a placeholder of the solve's structure (traced only for its shapes), replaced by the first step
            shapes = jax.eval_shape(solve_for, problem, estimate, prm)
            policy = jax.tree_util.tree_map(lambda x: jnp.zeros(x.shape, x.dtype), shapes)
        sim = init_state(problem)
        hist = empty_history(n, history_capacity, history_epochs, dtype)
        return LLCState(estimate, policy, sim, hist, jnp.full((), epoch, jnp.int32), prm)

    def init(problem: CrawlProblem, params: LLCParams | None = None) -> LLCState:
        return unsolved(problem, params, 0)

    def check(problem: CrawlProblem, params: LLCParams | None = None) -> None:
        prm = _llc_params(params, problem.change_rate.dtype)
        _check_llc_params(prm)
        if _solver_label(prm.solver) is not None or prm.solver_names:
            _solver_index(utilities, prm)

    init.check = check
    # ``run_learner`` starts from ``init.pending``'s state: init's without its inner solve
    # (epoch -1), which the first step completes by the step's own solve, so that the
    # compiled run holds the inner solver once (see ``Learner``)
    init.pending = lambda problem, params=None: unsolved(problem, params, -1)

    def epoch_estimate(key, state: LLCState, problem: CrawlProblem):
        """Lines 5-13: execute the policy for an epoch, then the suffix's estimates."""
        prm = state.params
        epoch = state.epoch
        schedule = schedule_from_policy(problem.replace(complete=state.policy.on_signal), state.policy)
        if sampler == OBSERVATION:
            sim, hist, stats = observe_epoch(key, state.sim, state.history, problem, schedule, observe, 1, epoch)
        else:
            sim, hist, stats = crawl_epoch(key, state.sim, state.history, problem, schedule, config,
                                           windows_per_epoch, epoch)
        estimate, truncated, est_ok = suffix_estimate(
            hist, problem.complete, epoch, prm.suffix_epochs, prm.smoothing, epoch_length,
            state.estimate, min_rate=min_rate, max_rate=max_rate,
            half_life=prm.half_life if forgetting else None, complete_interval=prm.complete_interval,
            return_converged=True)
        return (sim, hist, estimate, jnp.sum(stats.num_crawls), jnp.sum(stats.overflow),
                jnp.sum(truncated, dtype=jnp.int32), jnp.all(est_ok))

    def keep(key, state: LLCState, problem: CrawlProblem):
        """A pending state (epoch -1) runs no epoch: its estimate is the initial one."""
        none = jnp.zeros((0,), jnp.int32)  # empty sums: zeros of the sums' dtypes
        return (state.sim, state.history, state.estimate, jnp.sum(none), jnp.sum(none),
                jnp.sum(none, dtype=jnp.int32), jnp.all(none == 0))

    def step(key, state: LLCState, problem: CrawlProblem):
        prm = state.params
        # a real branch where the state's epoch is not batched (run_learner, also under vmap)
        sim, hist, estimate, crawls, overflow, truncated, est_ok = jax.lax.cond(
            state.epoch < 0, keep, epoch_estimate, key, state, problem)
        policy = solve_for(problem, estimate, prm)
        harm, binc = policy_costs(problem, policy)
        err = jnp.mean(jnp.abs(jnp.log(estimate / problem.change_rate)))
        new_epoch = state.epoch + 1  # a pending state's step ends at epoch 0, init's
        new = LLCState(estimate, policy, sim, hist, new_epoch, prm)
        info = LLCInfo(harm, binc, err, crawls, overflow, truncated, policy.dual, new_epoch,
                       policy.converged & _llc_params_valid(prm), jnp.asarray(sampler, jnp.int32), est_ok)
        return new, info

    name = "+".join(_LEARNER_NAMES.get(u, f"llc[{u.name}]") for u in utilities)
    return Learner(init, step, name + ("-forget" if forgetting else ""))


@functools.partial(jax.jit, static_argnums=0)
def _pilot_rates(utilities: tuple, problem: CrawlProblem, estimates: jax.Array, epsilon: jax.Array) -> jax.Array:
    """Executed crawl rates of the inner solver(s) for several candidate estimates, in one
    compiled call: ``(num_utilities, num_estimates, *problem.shape)``."""
    return jnp.stack([
        jax.vmap(lambda e, u=u: executed_policy(problem, inner_solve(u, problem, e, epsilon)).rate)(estimates)
        for u in utilities])


def llc_settings(problem: CrawlProblem, solver: Solver | tuple = "harmonic", *,
                 epoch_length: float = 1.0,
                 epsilon: float = 0.4, initial_rate: float = 1.0, safety: float = 2.0,
                 events_per_window: float = 24.0, history_epochs: int = 21,
                 history_capacity: int | None = None, tail: float = 1e-9,
                 sampler: str = "auto") -> dict:
    """Static settings for :func:`lambda_learn_and_crawl` sized for ``problem`` (eager).

    Pilot policies (the inner solver(s) at the initial estimate and at the true rates)
    bound each page's crawl rate: ``safety`` times the larger of its pilot rates and
    R/n (a page crawled on signals: at least its change rate).  The epoch is cut into
    windows with about ``events_per_window`` expected events for the busiest page, and
    the simulator's capacities come from :func:`jaxcrawl.simulate.config_for` with these
    per-page bounds (so only truly busy pages take the simulator's slow path).
    Overflows, if the learner goes beyond the bounds, are counted in
    :attr:`LLCInfo.overflow`.  The
    default ``history_capacity`` holds the expected changed crawls of the busiest page
    over one epoch (times ``safety``) at tail ``tail``, at least 16.

    Returns:
      ``dict(config=..., windows_per_epoch=..., history_capacity=..., history_epochs=...,
      observe=...)`` to pass to :func:`lambda_learn_and_crawl` as keyword arguments.  Works
      for a batch of problems (the bounds are maxima over the batch).  ``sampler``:
      ``"auto"`` or ``"observation"`` add the observation-level sampler's config
      (``observe``, one window per epoch with the same per-page bounds; LLC's policies
      are Poisson or signal crawling, which it simulates exactly), ``"event"`` leaves it
      out (``observe=None``: the event-level simulator).
    """
    if not is_concrete(problem):
        raise ValueError("llc_settings needs concrete values: call it outside jit")
    utilities = _utilities(solver)
    if not (epoch_length > 0 and safety >= 1 and events_per_window > 0):
        raise ValueError("need epoch_length > 0, safety >= 1 and events_per_window > 0")
    batch = problem.importance.shape[:-1]
    n = problem.importance.shape[-1]
    flat = CrawlProblem(problem.importance.reshape(-1, n), problem.change_rate.reshape(-1, n),
                        jnp.broadcast_to(problem.bandwidth, batch).reshape(-1),
                        problem.complete.reshape(-1, n))  # (rows, n), also for one problem
    lam = np.asarray(flat.change_rate, np.float64)
    init_est = jnp.full_like(flat.change_rate, initial_rate)
    pilot_rates = _pilot_rates(utilities, flat, jnp.stack([init_est, flat.change_rate]),
                               jnp.asarray(epsilon, flat.change_rate.dtype))
    pilots = list(np.asarray(pilot_rates, np.float64).reshape((-1,) + flat.change_rate.shape))
    comp = np.asarray(flat.complete) != 0
    bw = np.broadcast_to(np.asarray(flat.bandwidth, np.float64), lam.shape[:-1])
    # per-page crawl-rate bound: safety x the pilots' rates (at least safety x R/n); a
    # page crawled on signals is crawled at most at its change rate
    bound = safety * np.maximum(np.max(np.stack(pilots), axis=0), bw[:, None] / n)
    bound = np.where(comp, np.maximum(bound, lam), bound)
    changed = max(float((r * lam / (r + lam)).max()) for r in pilots)
    busiest = float((lam + bound).max())
    windows = max(1, int(math.ceil(busiest * epoch_length / events_per_window)))
    window = epoch_length / windows
    total = float(np.max(bw + np.where(comp, lam, 0.0).sum(-1))) * safety
    shape = np.shape(problem.change_rate)
    sizing = poisson_schedule(jnp.asarray(bound.reshape(shape), problem.change_rate.dtype))
    config = config_for(problem, sizing, window, total_crawl_rate=total, tail=tail, requests=False)
    if history_capacity is None:
        cap = poisson_capacity(safety * changed * epoch_length, tail)
        history_capacity = int(max(16, -(-cap // 8) * 8))
    observe = None
    if use_observation(sampler):
        observe = observe_config(problem, epoch_length, max_crawl_rate=bound.reshape(shape),
                                 total_crawl_rate=float(np.max(bw)) * safety, tail=tail)
    return dict(config=config, windows_per_epoch=windows, history_capacity=int(history_capacity),
                history_epochs=int(history_epochs), observe=observe)


# ---------------------------------------------------------- Avrachenkov et al. §5
class OnlineParams(NamedTuple):
    r"""Hyperparameters of :func:`online_learn_and_crawl` (arrays: ``jax.vmap`` sweeps them).

    ``None`` fields take the estimator's paper defaults (Avrachenkov et al. §5: LLN
    α_k ≡ 1; SA η = 0.75; SAM η = 1.3, β = 0.75).

    Attributes:
      alpha: LLN's constant :math:`\alpha_k` (eq. 1).
      eta: exponent of :math:`\eta_k = (k+1)^{-\eta}` (SA eq. 2, SAM eq. 3).
      beta: exponent of :math:`\beta_k = (k+1)^{-\beta}` (SAM eq. 3).
      epsilon: BLCε floor of the re-solve (0: Azar et al.'s Algorithm 2, as §5).
      initial_rate: the estimators' starting value before any observation.
    """

    alpha: float | None = None
    eta: float | None = None
    beta: float | None = None
    epsilon: float = 0.0
    initial_rate: float = 0.0


_ONLINE_DEFAULTS = {
    "lln": dict(alpha=1.0, eta=0.75, beta=0.75),
    "sa": dict(alpha=1.0, eta=0.75, beta=0.75),
    "sam": dict(alpha=1.0, eta=1.3, beta=0.75),
}


class OnlineState(NamedTuple):
    """State of :func:`online_learn_and_crawl`.

    Attributes:
      estimator: the online estimator's state (``LLNState``,
        ``SAState`` or ``SAMState``); ``estimator.rate`` is the current estimate.
      rate: ``(n,)`` current crawl rates :math:`p_i`.
      sim: the simulator's state.
      round: rounds completed.
      params: :class:`OnlineParams` (all fields arrays).
    """

    estimator: NamedTuple
    rate: jax.Array
    sim: SimState
    round: jax.Array
    params: OnlineParams


class OnlineInfo(NamedTuple):
    r"""Diagnostics of one round.

    Attributes:
      rate: ``(n,)`` the re-solved crawl rates.
      estimate: ``(n,)`` the estimates handed to the solver (clipped).
      freshness: :math:`F(p;\Delta) = \sum_i w_i p_i/(p_i+\Delta_i)` of the new rates
        under the true rates (Avrachenkov eq. 17 / L2C eq. 5).
      num_observations: observations made during the round (all pages).
      overflow: page-windows that overflowed a simulator capacity.
      sampler: 0 (event-level simulator) or 1 (observation-level), as in :class:`LLCInfo`.
    """

    rate: jax.Array
    estimate: jax.Array
    freshness: jax.Array
    num_observations: jax.Array
    overflow: jax.Array
    sampler: Any = 0


def _online_estimator(kind: str, prm: OnlineParams, omega: float):
    if kind == "lln":
        return estimators.lln(lambda k: jnp.full_like(k, prm.alpha))
    if kind == "sa":
        return estimators.sa(lambda k: (k + 1.0) ** (-prm.eta))
    return estimators.sam(lambda k: (k + 1.0) ** (-prm.eta), lambda k: (k + 1.0) ** (-prm.beta), omega)


def online_learn_and_crawl(estimator: str = "sa", *, config: SimConfig, windows_per_round: int,
                           omega: float = 1.0, min_rate: float = 1e-3,
                           max_rate: float = DEFAULT_MAX_RATE,
                           observe: ObserveConfig | None = None) -> Learner:
    r"""Online estimates re-solved with Azar et al.'s algorithm (Avrachenkov et al. §5).

    Start with :math:`p_i = B/N`.  One ``step`` is a round of ``windows_per_round``
    simulator windows: every page is crawled as a Poisson process at :math:`p_i`, and
    the online estimator (``"lln"``: eq. 1, ``"sa"``: eq. 2, ``"sam"``: eq. 3) is
    updated with every observation, in time order.  At the end of the round the
    estimates, clipped to ``[min_rate, max_rate]`` (a starved page's estimate can be 0),
    go to Azar et al.'s binary-freshness solver (``solve(problem, "binary")`` with the floor
    :math:`\varepsilon B/N` of ``params.epsilon``; Azar et al.'s Algorithm 2 when
    ``epsilon = 0``) for new rates.  §5 re-solves every 50 observations per page; make
    the round last ``K N / B`` time units (:func:`online_settings`) for an average of K.

    The estimators assume one known crawl rate p; SA and SAM continue across rounds with
    the new p (their fixed point, :math:`E[I](y+p) = y`, is the true rate for any p),
    while LLN's ratio :math:`p\hat I_k/(k+\alpha_k-\hat I_k)` holds for a single p, so
    its counts restart every round from the previous estimate.

    Args:
      estimator: ``"lln"``, ``"sa"`` or ``"sam"``.
      config: the simulator's static config.
      windows_per_round: simulator windows per round.
      omega: SAM's ω (static).
      min_rate, max_rate: clip of the estimates handed to the solver.
      observe: the observation-level sampler's config for one window
        (:func:`online_settings` builds it): when given, each window's observations are
        drawn by :func:`jaxcrawl.simulate.observe_window` (exact in distribution, no
        change events) and laid out as ``config.crawl_capacity`` columns per page, else by
        the event-level simulator.  ``info.sampler`` says which.

    Returns:
      :class:`Learner` named ``"online_<estimator>"``; ``init(problem, params: OnlineParams = None)``.
    """
    if estimator not in _ONLINE_DEFAULTS:
        raise ValueError(f"estimator must be 'lln', 'sa' or 'sam', got {estimator!r}")
    if not isinstance(windows_per_round, (int, np.integer)) or windows_per_round < 1:
        raise ValueError(f"windows_per_round must be a positive int, got {windows_per_round!r}")
    if not (0 < min_rate < max_rate):
        raise ValueError("need 0 < min_rate < max_rate")
    omega = float(omega)
    if not omega > 0:
        raise ValueError(f"omega must be > 0, got {omega!r}")
    sampler = check_observe(observe, config.window)

    def full_params(params, dtype):
        given = OnlineParams() if params is None else params
        d = {f: getattr(given, f) for f in OnlineParams._fields}
        for f, v in _ONLINE_DEFAULTS[estimator].items():
            if d[f] is None:
                d[f] = v
        prm = OnlineParams(**{f: jnp.asarray(d[f], dtype) for f in OnlineParams._fields})
        if is_concrete(prm):
            a, e, b, eps, r0 = (np.asarray(v) for v in prm)
            if np.any(~(a > 0)) or np.any(~(e > 0)) or np.any(~(b > 0)):
                raise ValueError("alpha, eta and beta must be > 0")
            if np.any(~((eps >= 0) & (eps <= 1))):
                raise ValueError(f"epsilon must be in [0, 1]; got {eps}")
            if np.any(~np.isfinite(r0)) or np.any(r0 < 0):
                raise ValueError(f"initial_rate must be finite and >= 0; got {r0}")
        return prm

    def init(problem: CrawlProblem, params: OnlineParams | None = None) -> OnlineState:
        dtype = problem.change_rate.dtype
        prm = full_params(params, dtype)
        n = problem.change_rate.shape[-1]
        rate = jnp.full((n,), 1.0, dtype) * (problem.bandwidth / n)
        est = _online_estimator(estimator, prm, omega)
        est_state = est.init(rate, prm.initial_rate)
        sim = init_state(problem)
        return OnlineState(est_state, rate, sim, jnp.zeros((), jnp.int32), prm)

    init.check = lambda problem, params=None: full_params(params, problem.change_rate.dtype) and None

    def step(key, state: OnlineState, problem: CrawlProblem):
        prm = state.params
        est = _online_estimator(estimator, prm, omega)
        schedule = poisson_schedule(state.rate)
        window_keys = jax.random.split(key, windows_per_round)

        def window(carry, k):
            sim, es = carry
            if sampler == OBSERVATION:
                no_signals = jnp.zeros(problem.change_rate.shape, bool)
                sim, seen = observe_window(k, sim, problem, schedule, observe, signals=no_signals)
                _, changed, mask, lost = padded_observations(seen, config.crawl_capacity)
                over = seen.overflow | lost
            else:
                sim, win = simulate_window(k, sim, problem, schedule, config)
                changed, mask, over = win.observations.changed, win.observations.mask, win.overflow

            def update(s, slot):
                c, m = slot
                return est.update(s, c, m), None

            es, _ = jax.lax.scan(update, es, (jnp.moveaxis(changed, -1, 0), jnp.moveaxis(mask, -1, 0)))
            return (sim, es), (jnp.sum(over, dtype=jnp.int32), jnp.sum(mask, dtype=jnp.int32))

        (sim, es), (overflow, num_obs) = jax.lax.scan(window, (state.sim, state.estimator), window_keys)
        estimate = jnp.clip(es.rate, min_rate, max_rate)
        new_rate = inner_solve(binary(0.4), problem, estimate, prm.epsilon).rate
        es = es._replace(crawl_rate=new_rate)
        if estimator == "lln":  # restart the counts; the estimate carries over
            es = es._replace(num_obs=jnp.zeros_like(es.num_obs), num_changes=jnp.zeros_like(es.num_changes))
        info = OnlineInfo(new_rate, estimate, binary_freshness(problem, new_rate),
                          jnp.sum(num_obs), jnp.sum(overflow), jnp.asarray(sampler, jnp.int32))
        return OnlineState(es, new_rate, sim, state.round + 1, prm), info

    return Learner(init, step, f"online_{estimator}")


def online_settings(problem: CrawlProblem, *, observations_per_round: float = 50.0,
                    events_per_window: float = 24.0, safety: float = 3.0,
                    max_crawl_rate: float | None = None, tail: float = 1e-9,
                    sampler: str = "auto") -> dict:
    """Static settings for :func:`online_learn_and_crawl` (eager).

    A round lasts ``observations_per_round * n / B`` time units (on average that many
    observations per page; Avrachenkov et al. §5 re-solve every 50), cut into windows
    with about ``events_per_window`` expected events for the busiest page.  Crawl rates
    are bounded by ``max_crawl_rate`` (default: ``safety`` times the largest of B/n and
    Azar et al.'s optimal rates for the true change rates); rates beyond it are counted
    as overflows in :attr:`OnlineInfo.overflow`.

    Returns:
      ``dict(config=..., windows_per_round=..., observe=...)``; ``sampler`` as in
      :func:`llc_settings` (the loop crawls every page as a Poisson process).
    """
    if not is_concrete(problem):
        raise ValueError("online_settings needs concrete values: call it outside jit")
    n = problem.change_rate.shape[-1]
    bw = float(np.max(np.asarray(problem.bandwidth)))
    round_length = observations_per_round * n / bw
    if max_crawl_rate is None:
        opt = float(np.max(np.asarray(solve(problem, binary()).rate)))
        max_crawl_rate = safety * max(bw / n, opt)
    rho = min(float(max_crawl_rate), bw)
    busiest = float(np.max(np.asarray(problem.change_rate))) + rho
    windows = max(1, int(math.ceil(busiest * round_length / events_per_window)))
    config = config_for(problem, None, round_length / windows,
                        max_crawl_rate=rho, total_crawl_rate=bw, tail=tail, requests=False)
    observe = None
    if use_observation(sampler):
        observe = observe_config(problem, config.window, max_crawl_rate=rho, total_crawl_rate=bw, tail=tail)
    return dict(config=config, windows_per_round=windows, observe=observe)
