r"""MirrorSync, AsyncMirrorSync and AsyncPSGDSync as ``(init, step)`` learners.

Kolobov, Bubeck & Zimmert, *Online Learning for Active Cache Synchronization*, ICML 2020
("ICML-20"): Alg. 1 (MirrorSync), Alg. 2 (AsyncMirrorSync) and its projected-SGD variant
AsyncPSGDSync (§8), on the synchronization bandits of :mod:`jaxcrawl.sync_bandits`.

All three keep sync rates :math:`r` in

.. math:: \mathcal K_\varepsilon = \{x \in [r_{min}, r_{max}/(1+\varepsilon)]^K :
          \|x\|_1 = B/(1+\varepsilon)\}

(Alg. 1 line 2), spending the remaining :math:`\varepsilon B/(1+\varepsilon)` of the
bandwidth on probe plays, start at the log-barrier minimiser (line 3), estimate
:math:`\partial J/\partial r_k` with Lemma 2 from probe and sync plays, and update by

* the log-barrier mirror-descent step (Alg. 1 lines 42-45), :func:`jaxcrawl.optim.mirror_descent`

  .. math:: r^+ = \arg\min_{x\in\mathcal K} \eta\langle x, g\rangle +
            \sum_k \Big(-\log\frac{x_k}{r_k} + \frac{x_k}{r_k} - 1\Big),
            \qquad x_k(\nu) = \frac{1}{1/r_k + \eta g_k + \nu},

* or the Euclidean projection of a gradient step (AsyncPSGDSync), :func:`jaxcrawl.optim.projected_sgd`

  .. math:: r^+ = \arg\min_{x\in\mathcal K} \|x - (r - \eta g)\|^2,
            \qquad x_k(\nu) = r_k - \eta g_k - \nu,

both ``optax`` transformations whose update is the exact projection of
:mod:`jaxcrawl.optim` (clipped to the box per arm given the dual ν, which may be
negative).  Hyperparameters live in the state (:class:`SyncHyperparams`), so
``jax.vmap`` over ``init``'s ``hparams`` sweeps them without retracing.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.typing import ArrayLike

from jaxcrawl._src.checks import is_concrete
from jaxcrawl.core.solve import Allocation
from jaxcrawl.optim import mirror_descent, project_simplex, project_simplex_log_barrier, projected_sgd
from jaxcrawl.sync_bandits import TABLE1, SyncBandit, interval_gradient_estimate, policy_cost

from ._base import Learner
from ._sweep import run_sweep

# Hyperparameter grids for the App. B search: l_upd over the divisors of 1/r_min = 40 in
# App. B's range [8, 40]; learning rates bracketing the values App. B reports (Table 1;
# App. B does not list its grids).
APP_B_GRIDS = dict(
    mirror_sync=dict(learning_rates=(0.5, 1.0, 1.6, 2.7, 4.0, 6.0, 9.0)),
    async_mirror_sync=dict(learning_rates=(0.5, 1.0, 1.6, 3.0, 6.0, 9.0),
                           update_intervals=(8.0, 10.0, 20.0, 40.0)),
    async_psgd_sync=dict(learning_rates=(0.04, 0.06, 0.08, 0.1, 0.2, 0.3, 0.4),
                         update_intervals=(8.0, 10.0, 20.0, 40.0)),
)


class SyncHyperparams(NamedTuple):
    """Hyperparameters carried in a learner's state (arrays, so they can be vmapped).

    Attributes:
      learning_rate: η.
      exploration: ε, the probability of a probe play per sync interval.
      update_interval: :math:`l_{upd}`, time between asynchronous updates (Alg. 2's
        schedule S); MirrorSync ignores it (its round is :math:`1/r_{min}`, Alg. 1 line 1).
    """

    learning_rate: jax.Array
    exploration: jax.Array
    update_interval: jax.Array


class MirrorSyncState(NamedTuple):
    r"""MirrorSync state (ICML-20 Alg. 1).

    Attributes:
      rate: ``(K,)`` current sync rates, in :math:`\mathcal K_\varepsilon`.
      hparams: :class:`SyncHyperparams`.
      time: simulated time (rounds × :math:`1/r_{min}`).
      num_updates: mirror-descent steps taken.
    """

    rate: jax.Array
    hparams: SyncHyperparams
    time: jax.Array
    num_updates: jax.Array


class AsyncSyncState(NamedTuple):
    """AsyncMirrorSync / AsyncPSGDSync state (ICML-20 Alg. 2).

    Attributes:
      rate: ``(K,)`` current sync rates.
      last_sync: ``(K,)`` time of each arm's latest scheduled sync play, relative to
        ``time`` (negative: in the past; positive: the rescheduled sync after an update).
      hparams: :class:`SyncHyperparams`.
      time: simulated time of the latest update attempt.
      num_updates: update attempts so far.
    """

    rate: jax.Array
    last_sync: jax.Array
    hparams: SyncHyperparams
    time: jax.Array
    num_updates: jax.Array


class SyncInfo(NamedTuple):
    r"""Diagnostics of one step.

    Attributes:
      policy_cost: exact :math:`J(r)` after the update (ICML-20 Lemma 1).
      time: simulated time after the step.
      num_updated: arms updated (K for MirrorSync; :math:`|\mathcal A_i|` for Alg. 2).
      num_probes: probe plays whose samples entered the gradient.
      dual: multiplier ν of the step's budget constraint.
      num_steps: Newton steps of the step's projection (0 for the Euclidean one, a finite
        algorithm).
      converged: whether the step's projection converged
        (:attr:`jaxcrawl.optim.ProjectionState.converged`; True when no arm was updated),
        and False on every step when the hyperparameters are outside their domain (traced
        hyperparameters are not refused: this flag reports them).
    """

    policy_cost: jax.Array
    time: jax.Array
    num_updated: jax.Array
    num_probes: jax.Array
    dual: jax.Array
    num_steps: jax.Array
    converged: Any = True


# ------------------------------------------------------------------ exact update steps
def _check_step_inputs(rate, budget, lower, upper, name):
    if is_concrete(rate, budget, lower, upper):
        r = np.asarray(rate)
        if r.ndim != 1:
            raise ValueError(f"{name}: rate must have shape (K,), got {r.shape}")
        if not np.all(np.isfinite(r)) or np.any(r <= 0):
            raise ValueError(f"{name}: rate must be finite and > 0 for every arm")
        if np.any(np.asarray(lower) <= 0):
            raise ValueError(f"{name}: lower must be > 0 (rates stay in the log-barrier domain)")


def barrier_rates(budget: ArrayLike, lower: ArrayLike, upper: ArrayLike, num_arms_: int) -> Allocation:
    r"""Minimiser of the log barrier :math:`-\sum_k\log r_k` over the box with
    :math:`\|r\|_1 = B` (ICML-20 Alg. 1 line 3, Alg. 2 line 2): :math:`r_k = \mathrm{clip}(1/\nu)`,
    the log-barrier projection of mirror point 0 (:func:`jaxcrawl.optim.project_simplex_log_barrier`).
    """
    budget = jnp.asarray(budget)
    if not jnp.issubdtype(budget.dtype, jnp.floating):
        budget = budget.astype(jnp.result_type(float))
    return project_simplex_log_barrier(jnp.zeros((num_arms_,), budget.dtype), budget, lower, upper)


def mirror_descent_step(rate: ArrayLike, grad: ArrayLike, learning_rate: ArrayLike, budget: ArrayLike,
                        lower: ArrayLike, upper: ArrayLike) -> Allocation:
    r"""Exact log-barrier mirror-descent step (ICML-20 Alg. 1 lines 42-45).

    .. math:: \arg\min_{x \in [\ell, h],\ \|x\|_1 = B}\ \eta\langle x, g\rangle
              + \sum_k\Big(-\log\frac{x_k}{r_k} + \frac{x_k}{r_k} - 1\Big).

    KKT: :math:`\eta g_k - 1/x_k + 1/r_k + \nu = 0` on free arms, so
    :math:`x_k(\nu) = 1/(1/r_k + \eta g_k + \nu)` (``+inf`` when the denominator is
    :math:`\le 0`), clipped to the box: the log-barrier projection of the mirror point
    :math:`-1/r - \eta g` (:func:`jaxcrawl.optim.project_simplex_log_barrier`), with ν of
    either sign.  An arm with ``lower == upper`` is held fixed (that is how Alg. 2 updates
    only a subset of arms).

    Args:
      rate: ``(K,)`` current rates :math:`r > 0`.
      grad: ``(K,)`` gradient estimate :math:`g`.
      learning_rate: η.
      budget: B (``sum(lower) <= B <= sum(upper)``).
      lower, upper: box (scalars or ``(K,)``), ``lower > 0``.

    Returns:
      :class:`jaxcrawl.Allocation`; ``x`` is the new rate vector, ``converged``
      says whether the projection's Newton iteration converged.
    """
    _check_step_inputs(rate, budget, lower, upper, "mirror_descent_step")
    rate = jnp.asarray(rate)
    theta = -1.0 / rate - jnp.asarray(learning_rate, rate.dtype) * jnp.asarray(grad, rate.dtype)
    return project_simplex_log_barrier(theta, budget, lower, upper)


def projected_sgd_step(rate: ArrayLike, grad: ArrayLike, learning_rate: ArrayLike, budget: ArrayLike,
                       lower: ArrayLike, upper: ArrayLike) -> Allocation:
    r"""Exact projected-SGD step of AsyncPSGDSync (ICML-20 §8).

    .. math:: \arg\min_{x \in [\ell, h],\ \|x\|_1 = B}\ \|x - (r - \eta g)\|_2^2,
              \qquad x_k(\nu) = \mathrm{clip}(r_k - \eta g_k - \nu, \ell_k, h_k),

    with ν (of either sign) from :func:`jaxcrawl.optim.project_simplex`.  Arms with
    ``lower == upper`` are held fixed.  Same arguments and result as
    :func:`mirror_descent_step`.
    """
    if is_concrete(rate) and (np.ndim(rate) != 1 or not np.all(np.isfinite(np.asarray(rate)))):
        raise ValueError("projected_sgd_step: rate must be a finite (K,) vector")
    rate = jnp.asarray(rate)
    return project_simplex(rate - jnp.asarray(learning_rate, rate.dtype) * jnp.asarray(grad, rate.dtype),
                           budget, lower, upper)


# ----------------------------------------------------------------------- learners
def _hparams(bandit, hparams, defaults):
    dtype = jnp.result_type(bandit.budget)
    if hparams is None:
        hparams = SyncHyperparams(*defaults)
    hp = SyncHyperparams(*(jnp.asarray(v, dtype) for v in hparams))
    if is_concrete(hp, bandit.budget, bandit.min_rate, bandit.max_rate):
        eta, eps, l = (np.asarray(v) for v in hp)
        if not np.all(np.isfinite(eta)) or np.any(eta <= 0):
            raise ValueError(f"learning_rate must be finite and > 0; got {eta}")
        if not np.all((eps > 0) & (eps <= 1)):  # NaN too
            raise ValueError(f"exploration must lie in (0, 1]; got {eps}")
        if not np.all(np.isfinite(l)) or np.any(l <= 0):
            raise ValueError(f"update_interval must be finite and > 0; got {l}")
        k = bandit.num_arms
        b = float(bandit.budget) / (1 + eps)
        lo, hi = float(bandit.min_rate), float(bandit.max_rate) / (1 + eps)
        if np.any(b < k * lo * (1 - 1e-9)) or np.any(b > k * hi * (1 + 1e-9)):
            raise ValueError(
                "the restricted set K_eps is empty: need K*min_rate <= budget/(1+exploration) "
                f"<= K*max_rate/(1+exploration); got K={k}, budget={float(bandit.budget)}, "
                f"min_rate={lo}, max_rate={float(bandit.max_rate)}, exploration={eps}")
    return hp


def _hparams_check(defaults):
    """``init.check``: the eager validation of :func:`_hparams` (no-op on traced values)."""
    def check(bandit, hparams=None):
        _hparams(bandit, hparams, defaults)
    return check


def _hparams_valid(bandit, hp):
    """In-graph: the hyperparameters lie in the domain :func:`_hparams` checks eagerly (False
    for a NaN); what a traced run reports in ``info.converged``."""
    eta, eps, l = hp
    b = bandit.budget / (1 + eps)
    k = bandit.num_arms
    ok = (jnp.isfinite(eta) & (eta > 0) & (eps > 0) & (eps <= 1) & jnp.isfinite(l) & (l > 0)
          & (b >= k * bandit.min_rate * (1 - 1e-6)) & (b <= k * bandit.max_rate / (1 + eps) * (1 + 1e-6)))
    return ok


def _restricted_set(bandit, eps):
    scale = 1.0 / (1.0 + eps)
    return bandit.budget * scale, bandit.min_rate, bandit.max_rate * scale


def _initial_rates(bandit, eps):
    """Alg. 1 line 3: the log-barrier minimiser; uniform B/((1+ε)K) for scalar bounds."""
    budget, lo, hi = _restricted_set(bandit, eps)
    k = bandit.num_arms
    if jnp.ndim(lo) == 0 and jnp.ndim(hi) == 0:
        # K*lo <= budget <= K*hi (checked in init), so equal rates are feasible and optimal.
        return jnp.full((k,), budget / k, jnp.result_type(budget))
    return barrier_rates(budget, lo, hi, k).x


def mirror_sync(learning_rate: float = TABLE1["mirror_sync"]["learning_rate"],
                exploration: float = TABLE1["exploration"], *,
                first_sample_only: bool = False,
                chunk_size: int | None = None) -> Learner:
    r"""MirrorSync (ICML-20 Alg. 1) as an ``(init, step)`` learner; one step = one round.

    Each round (length :math:`T = 1/r_{min}`, line 1) starts with every arm freshly
    synced (the "free reset" assumption), plays each arm in sync mode every
    :math:`1/r_k` with a probe in each interval with probability ε, forms the Lemma 2
    estimate :math:`\hat g_k` and takes the exact log-barrier mirror-descent step on
    :math:`\mathcal K_\varepsilon` (line 20).

    Args:
      learning_rate: η (Table 1: 2.7; Table 2: 5).
      exploration: ε (0.05 in the paper's experiments).
      first_sample_only: use only each arm's first interval of the round, as Alg. 1
        line 18 states.  Default ``False``: average the Lemma 2 samples of all the
        round's :math:`\lfloor T r_k\rfloor` complete intervals (also unbiased; this is
        the estimator the paper's experiments ran with, for which η = 2.7 was tuned).
      chunk_size: probes simulated per pass (see
        :func:`jaxcrawl.sync_bandits.interval_gradient_estimate`).
    """
    defaults = (learning_rate, exploration, 1.0)

    def init(bandit: SyncBandit, hparams: SyncHyperparams | None = None) -> MirrorSyncState:
        hp = _hparams(bandit, hparams, defaults)
        rate = _initial_rates(bandit, hp.exploration)
        zero = jnp.zeros((), rate.dtype)
        return MirrorSyncState(rate, hp, zero, jnp.zeros((), jnp.int32))

    init.check = _hparams_check(defaults)

    def step(key, state: MirrorSyncState, bandit: SyncBandit):
        hp = state.hparams
        eps, eta = hp.exploration, hp.learning_rate
        rate = state.rate
        k = rate.shape[-1]
        dtype = rate.dtype
        round_len = 1.0 / bandit.min_rate
        if first_sample_only:
            n = jnp.ones((k,), jnp.int32)
        else:
            fuzz = 1.0 + 8 * jnp.finfo(dtype).eps
            n = jnp.maximum(jnp.floor(round_len * rate * fuzz), 1.0).astype(jnp.int32)
        pg = interval_gradient_estimate(key, bandit.costs, rate, n, eps, chunk_size=chunk_size)
        grad = pg.grad / k  # Lemma 2 scale: estimates dJ/dr_k
        budget, lo, hi = _restricted_set(bandit, eps)
        tx = mirror_descent(eta, budget, lo, hi)                      # line 20
        updates, proj = tx.update(grad, tx.init(rate), rate)
        new_rate = optax.apply_updates(rate, updates)
        count = state.num_updates + 1
        new = MirrorSyncState(new_rate, hp, count.astype(dtype) * round_len, count)
        info = SyncInfo(policy_cost(bandit.costs, new_rate), new.time,
                        jnp.asarray(k, jnp.int32), pg.num_probes, proj.dual, proj.num_steps,
                        proj.converged & _hparams_valid(bandit, hp))
        return new, info

    return Learner(init, step, "mirror_sync", synchronous=True)


def _async_learner(transformation, defaults, name, chunk_size):
    def init(bandit: SyncBandit, hparams: SyncHyperparams | None = None) -> AsyncSyncState:
        hp = _hparams(bandit, hparams, defaults)
        rate = _initial_rates(bandit, hp.exploration)
        zero = jnp.zeros((), rate.dtype)
        return AsyncSyncState(rate, jnp.zeros_like(rate), hp, zero, jnp.zeros((), jnp.int32))

    init.check = _hparams_check(defaults)

    def step(key, state: AsyncSyncState, bandit: SyncBandit):
        hp = state.hparams
        eps, eta, interval = hp.exploration, hp.learning_rate, hp.update_interval
        rate, last = state.rate, state.last_sync
        k = rate.shape[-1]
        dtype = rate.dtype
        key_grad, key_free = jax.random.split(key)
        # Complete sync intervals (length 1/r_k, probe chance ε each) ending by the update
        # time (ScheduleArmPlays, Alg. 1 lines 27-40 as used by Alg. 2).
        fuzz = 1.0 + 8 * jnp.finfo(dtype).eps
        n = jnp.maximum(jnp.floor((interval - last) * rate * fuzz), 0.0).astype(jnp.int32)
        pg = interval_gradient_estimate(key_grad, bandit.costs, rate, n, eps, chunk_size=chunk_size)
        active = n > 0                                   # A_i (Alg. 2 lines 26-27)
        num_active = jnp.sum(active, dtype=jnp.int32)
        grad = jnp.where(active, pg.grad / jnp.maximum(num_active, 1).astype(dtype), 0.0)  # line 30
        _, lo, hi = _restricted_set(bandit, eps)
        lower = jnp.where(active, lo, rate)              # other arms held fixed
        upper = jnp.where(active, hi, rate)
        budget = jnp.sum(rate)                           # local budget: their current total (line 32)
        tx = transformation(eta, budget, lower, upper)
        updates, proj = tx.update(grad, tx.init(rate), rate)
        new_rate = jnp.where(active & (num_active > 0), optax.apply_updates(rate, updates), rate)
        # Reschedule updated arms (lines 34-38): with prob. ε sync now, else at
        # max(last sync + 1/r_new, now).  The interval spanning the update holds no probe.
        last_done = last + n.astype(dtype) / rate
        free = jax.random.bernoulli(key_free, eps, (k,))
        resched = jnp.where(free, interval, jnp.maximum(last_done + 1.0 / new_rate, interval))
        new_last = jnp.where(active, resched, last_done) - interval
        count = state.num_updates + 1  # time = count * l_upd (no float drift over long runs)
        new = AsyncSyncState(new_rate, new_last, hp, count.astype(dtype) * interval, count)
        dual = jnp.where(num_active > 0, proj.dual, 0.0)
        info = SyncInfo(policy_cost(bandit.costs, new_rate), new.time, num_active,
                        pg.num_probes, dual, proj.num_steps,
                        jnp.where(num_active > 0, proj.converged, True) & _hparams_valid(bandit, hp))
        return new, info

    return Learner(init, step, name)


def async_mirror_sync(learning_rate: float = TABLE1["async_mirror_sync"]["learning_rate"],
                      exploration: float = TABLE1["exploration"],
                      update_interval: float = TABLE1["async_mirror_sync"]["update_interval"], *,
                      chunk_size: int | None = None) -> Learner:
    r"""AsyncMirrorSync (ICML-20 Alg. 2) as an ``(init, step)`` learner; one step = one update time.

    Arms are never reset for free.  Between update times :math:`t_i = i\,l_{upd}` every
    arm plays sync every :math:`1/r_k` with a probe in each interval with probability ε.
    At :math:`t_i` the arms :math:`\mathcal A_i` that completed at least one interval
    since :math:`t_{i-1}` average their Lemma 2 samples (lines 17-28), the averages are
    divided by :math:`|\mathcal A_i|` (line 30), and only those arms take the exact
    log-barrier mirror-descent step with their current total rate as the budget (lines
    31-33).  Each updated arm then syncs immediately with probability ε (line 36) or at
    :math:`\max(t_{last} + 1/r_k^{new}, t_i)` (line 37); the interval spanning an update
    holds no probe.  Arms not in :math:`\mathcal A_i` keep their schedule (their rate did
    not change), so arms with :math:`1/r_k > l_{upd}` still complete intervals.

    Args:
      learning_rate: η (Table 1: 1.6; Table 2: 1.3).
      exploration: ε (0.05).
      update_interval: :math:`l_{upd}` (Table 1: 20; Table 2: 8).
      chunk_size: probes simulated per pass.
    """
    return _async_learner(mirror_descent,
                          (learning_rate, exploration, update_interval),
                          "async_mirror_sync", chunk_size)


def async_psgd_sync(learning_rate: float = TABLE1["async_psgd_sync"]["learning_rate"],
                    exploration: float = TABLE1["exploration"],
                    update_interval: float = TABLE1["async_psgd_sync"]["update_interval"], *,
                    chunk_size: int | None = None) -> Learner:
    r"""AsyncPSGDSync (ICML-20 §8): :func:`async_mirror_sync` with the mirror-descent step
    replaced by the exact Euclidean projection of :math:`r - \eta\bar g` onto the local
    constraint set (:func:`jaxcrawl.optim.projected_sgd`).  The arguments are those of
    :func:`async_mirror_sync`; the paper's values are η = 0.08, :math:`l_{upd}` = 20
    (Table 1) and η = 0.5, :math:`l_{upd}` = 40 (Table 2), with ε = 0.05.
    """
    return _async_learner(projected_sgd, (learning_rate, exploration, update_interval),
                          "async_psgd_sync", chunk_size)


# ------------------------------------------------------------------------- drivers
def num_learner_steps(learner: Learner, min_rate: float, horizon_rounds: float,
                      update_interval: float | None = None) -> int:
    """Steps covering ``horizon_rounds`` MirrorSync rounds of :math:`1/r_{min}` time each.

    A ``synchronous`` learner (MirrorSync, ICML-20 Alg. 1) takes one step per round; an
    asynchronous one (Alg. 2) one step per ``update_interval`` (ICML-20 App. B:
    ``horizon * (1/r_min) / l_upd`` updates).
    """
    if learner.synchronous:
        return int(math.ceil(horizon_rounds - 1e-9))
    if update_interval is None:
        raise ValueError("update_interval is required for an asynchronous learner")
    return int(math.ceil(horizon_rounds / (float(min_rate) * float(update_interval)) - 1e-9))


class GridSearchResult(NamedTuple):
    """Result of :func:`grid_search` (one row per hyperparameter combination).

    Attributes:
      learning_rate, update_interval: ``(G,)`` the grid.
      policy_cost: ``(G, S)`` J(r) after each step (held after the horizon).
      time: ``(G, S)`` simulated time after each step (held after the horizon).
      active: ``(G, S)`` whether the step fell inside the horizon.
      final_cost: ``(G,)`` J at the horizon.
      tail_cost: ``(G,)`` mean J over the last ``tail_fraction`` of the horizon.
      best: index of the combination with the lowest ``tail_cost``.
    """

    learning_rate: jax.Array
    update_interval: jax.Array
    policy_cost: jax.Array
    time: jax.Array
    active: jax.Array
    final_cost: jax.Array
    tail_cost: jax.Array
    best: jax.Array


class _HorizonHold(NamedTuple):
    """:func:`~jaxcrawl.learners.run_sweep` transform of :func:`grid_search`: every run
    held at its state after the last step inside the horizon (hashable: one compilation
    per learner and horizon)."""

    learner: Learner
    horizon_time: float

    def __call__(self, final_state, info, bandit, hparams):
        active = info.time <= self.horizon_time * (1 + 1e-6)  # a prefix: time increases
        last = jnp.sum(active, dtype=jnp.int32) - 1
        held = jnp.minimum(jnp.arange(active.shape[0]), last)
        start = self.learner.init(bandit, hparams)
        cost = jnp.where(held >= 0, info.policy_cost[jnp.maximum(held, 0)],
                         policy_cost(bandit.costs, start.rate))
        time = jnp.where(held >= 0, info.time[jnp.maximum(held, 0)], start.time)
        return cost, time, active, cost[-1]


def grid_search(key: jax.Array, learner: Learner, bandit: SyncBandit,
                learning_rates: Sequence[float], update_intervals: Sequence[float] | None = None,
                *, exploration: float = TABLE1["exploration"],
                horizon_rounds: float = TABLE1["horizon_rounds"],
                tail_fraction: float = 0.25) -> GridSearchResult:
    """The ICML-20 App. B hyperparameter search, as one :func:`~jaxcrawl.learners.run_sweep` call.

    Every combination of ``learning_rates`` × ``update_intervals`` runs once, with the
    same key (common random numbers, as App. B's fixed seed: run_sweep's
    ``sweep_key(key, 0, 0)``), for the simulated time of ``horizon_rounds`` MirrorSync
    rounds (``horizon * (1/r_min) / l_upd`` updates each).  All combinations share one
    static scan length, that of the finest interval; the steps past a combination's
    horizon are dropped (its cost and time are held).  A ``synchronous`` learner
    (MirrorSync) ignores ``update_intervals``.  Row ``g`` equals
    ``run_learner(sweep_key(key, 0, 0), learner, bandit, n_g, hparams_g)`` over its
    ``n_g`` steps inside the horizon.

    Args:
      key: PRNG key.
      learner: a :class:`~jaxcrawl.learners.Learner` of this module (its own
        hyperparameters are overridden).
      bandit: one (unbatched) :class:`jaxcrawl.sync_bandits.SyncBandit`.
      learning_rates: η grid.
      update_intervals: :math:`l_{upd}` grid (asynchronous learners).
      exploration: ε.
      horizon_rounds: horizon in MirrorSync rounds (240 in the paper).
      tail_fraction: fraction of the horizon averaged into ``tail_cost``.
    """
    if len(learning_rates) == 0:
        raise ValueError("learning_rates must not be empty")
    if not all(0 < float(v) < np.inf for v in learning_rates):  # NaN too
        raise ValueError(f"learning_rates must be finite and > 0; got {list(learning_rates)}")
    if not 0 < float(exploration) <= 1:
        raise ValueError(f"exploration must lie in (0, 1]; got {exploration}")
    if not horizon_rounds > 0:  # NaN too
        raise ValueError(f"horizon_rounds must be > 0; got {horizon_rounds}")
    min_rate = float(bandit.min_rate)
    horizon_time = horizon_rounds / min_rate
    if learner.synchronous:
        intervals = [1.0 / min_rate]
    else:
        if not update_intervals:
            raise ValueError("update_intervals is required for an asynchronous learner")
        intervals = [float(v) for v in update_intervals]
        if not all(0 < v < np.inf for v in intervals):  # NaN too
            raise ValueError(f"update_intervals must be finite and > 0; got {intervals}")
    eta_grid, l_grid = np.meshgrid(np.asarray(learning_rates, float), np.asarray(intervals, float),
                                   indexing="ij")
    eta_grid, l_grid = eta_grid.ravel(), l_grid.ravel()
    num_steps = num_learner_steps(learner, min_rate, horizon_rounds, min(intervals))
    dtype = jnp.result_type(bandit.budget)
    hp = SyncHyperparams(jnp.asarray(eta_grid, dtype), jnp.full(eta_grid.shape, exploration, dtype),
                         jnp.asarray(l_grid, dtype))
    one_instance = jax.tree_util.tree_map(lambda x: jnp.asarray(x)[None], bandit)
    res = run_sweep(key, learner, one_instance, hp, num_seeds=1, num_steps=num_steps,
                    transform=_HorizonHold(learner, float(horizon_time)))
    cost, time, active, final = (jnp.asarray(a[:, 0, 0]) for a in res.outputs)
    tail_start = (1.0 - tail_fraction) * horizon_time
    in_tail = active & (time >= tail_start * (1 - 1e-9))
    tail = jnp.sum(jnp.where(in_tail, cost, 0.0), axis=1) / jnp.maximum(jnp.sum(in_tail, axis=1), 1)
    return GridSearchResult(hp.learning_rate, hp.update_interval, cost, time, active, final, tail,
                            jnp.argmin(tail))
