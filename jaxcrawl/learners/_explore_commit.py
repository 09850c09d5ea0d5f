r"""Explore-then-commit and phased ε-greedy crawling with unknown change rates.

Upadhyay, Busa-Fekete, Kotłowski, Pál & Szörényi, *Learning to Crawl*, AAAI 2020 ("L2C").
m pages change as Poisson processes of unknown rates ξ and are requested at known rates
ζ; the crawler has bandwidth R.  The utility of a policy over ``[t1, t2]`` is the number
of requests served fresh divided by m (eq. 2); the regret compares it with the best
stationary Poisson policy ρ* (Azar et al.'s optimum of eq. 5,
:func:`jaxcrawl.binary_lambda_crawl`).

**Explore-then-commit** (§5, Thm 1): crawl every page every :math:`m/R` (the uniform-
interval policy κ^UI) until τ, estimate ξ by moment matching (eq. 7,
:func:`jaxcrawl.estimators.moment_matching`), then crawl at
:math:`\hat\rho = \arg\max_\rho F(\rho;\hat\xi)` until T.  Its expected regret is
computed exactly, as in L2C §6.1:

.. math::

   R(T) = \frac{T}{m}F(\rho^*;\xi) - \underbrace{\frac{\tau}{m}\sum_i\zeta_i
   \frac{1-e^{-\xi_i m/R}}{\xi_i m/R}}_{\text{App. H, eq. 29-30}}
   - \underbrace{\frac{T-\tau}{m}F(\hat\rho;\xi)}_{\text{eq. 4}},

with :math:`F(\rho;\xi) = \sum_i\zeta_i\rho_i/(\rho_i+\xi_i)` (eq. 5).  Eq. 4 is the
stationary approximation of the commit phase; its exact transient (Lemma 1, eq. 10,
integrated from the fresh state at τ) is reported as ``commit_transient`` and a
simulation of the whole run (:func:`simulate_etc`) checks both.

The exploration is simulated once up to the largest τ of a grid and every τ of the grid
commits from its own prefix of the same history (common random numbers across τ, so the
regret curve in τ is smooth); :func:`run_etc` vmaps the commit over the grid.
:func:`tau_star` is Thm 1's :math:`\tau^* = \sqrt{B T/A}` and :func:`etc_regret_bound`
its bound (eq. 9).

**Phased ε-greedy** (§6.2): phases of the Lemma 1 length
(:func:`lemma1_phase_length`); the first phase crawls at :math:`\rho^{UR} = R/m`, every
later phase at :math:`\rho^\varepsilon = (1-\varepsilon)\hat\rho + \varepsilon R/m` for
the estimates from all observations so far.  Each phase's expected utility is eq. 4
(Lemma 1: the phase is long enough for it to hold up to the tolerance).

Both learners are :class:`~jaxcrawl.learners.Learner` ``(init, step)`` pairs; the optimum
for the estimates is ``jaxcrawl.solve(problem, "binary")``.
"""
from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxcrawl import estimators
from jaxcrawl._src.checks import is_concrete
from jaxcrawl._src.history import DEFAULT_MAX_RATE, DEFAULT_MIN_RATE
from jaxcrawl._src.observations import OBSERVATION
from jaxcrawl._src.sampling import poisson_capacity
from jaxcrawl.core.objectives import binary, binary_freshness, uniform_interval_freshness
from jaxcrawl.core.problem import CrawlProblem
from jaxcrawl.core.solve import solve
from jaxcrawl.simulate import (
    ObserveConfig,
    SimConfig,
    SimState,
    config_for,
    init_state,
    observe_config,
    periodic_schedule,
    poisson_schedule,
    simulate,
    simulate_window,
)

from ._base import Learner, run_learner
from ._history import (
    CrawlHistory,
    PaddedHistory,
    append_window,
    check_observe,
    crawl_epoch,
    empty_history,
    empty_padded_history,
    observe_epoch,
    suffix_history,
    use_observation,
    window_utility,
)

#: Estimators the learners can use (L2C eq. 7 and eq. 6).
ESTIMATORS = {"moment_matching": estimators.moment_matching, "mle": estimators.mle}


# ------------------------------------------------------------------ closed forms
def tau_star(horizon: ArrayLike, num_pages: ArrayLike, bandwidth: ArrayLike, min_change_rate: ArrayLike,
             max_change_rate: ArrayLike, delta: ArrayLike = 0.05) -> jax.Array:
    r"""Thm 1's exploration horizon :math:`\tau^* = \sqrt{B/A}\,\sqrt T` (L2C §5, eq. 9).

    .. math:: \tau^* = \sqrt{\frac{e^{2\xi_{\max}m/R}\,R\,\log(2m/\delta)}{2m\,\xi_{\min}^2}}\;\sqrt T,

    the minimiser of the regret bound :math:`A\tau + BT/\tau - B` with
    :math:`A = \frac1m\sum\zeta_i` and
    :math:`B = \sum\zeta_i\,e^{2\xi_{\max}m/R}R\log(2m/\delta)/(2m^2\xi_{\min}^2)`
    (the importances cancel).  Grows as :math:`\sqrt T`.  Works elementwise on arrays.
    """
    if is_concrete(horizon, num_pages, bandwidth, min_change_rate, max_change_rate, delta):
        _check_bound_args(horizon, num_pages, bandwidth, min_change_rate, max_change_rate, delta)
    m = jnp.asarray(num_pages, jnp.result_type(float))
    ratio = (jnp.exp(2.0 * max_change_rate * m / bandwidth) * bandwidth * jnp.log(2.0 * m / delta)
             / (2.0 * m * jnp.square(min_change_rate)))
    return jnp.sqrt(ratio) * jnp.sqrt(jnp.asarray(horizon, m.dtype))


def etc_regret_bound(horizon: ArrayLike, tau: ArrayLike, importance: ArrayLike, bandwidth: ArrayLike,
                     min_change_rate: ArrayLike, max_change_rate: ArrayLike,
                     delta: ArrayLike = 0.05) -> jax.Array:
    r"""Thm 1's bound on the expected regret of ETC (holds with probability 1 − δ):

    .. math:: R(T) \le \Big(\frac{\tau}{m} + \frac{T-\tau}{\tau}
              \frac{e^{2\xi_{\max}m/R}R\log(2m/\delta)}{2m^2\xi_{\min}^2}\Big)\sum_i\zeta_i .
    """
    zeta = jnp.asarray(importance)
    m = zeta.shape[-1]
    if is_concrete(horizon, tau, bandwidth, min_change_rate, max_change_rate, delta):
        _check_bound_args(horizon, m, bandwidth, min_change_rate, max_change_rate, delta)
        if np.any(np.asarray(tau) <= 0):
            raise ValueError("tau must be > 0")
    c = (jnp.exp(2.0 * max_change_rate * m / bandwidth) * bandwidth * jnp.log(2.0 * m / delta)
         / (2.0 * m * m * jnp.square(min_change_rate)))
    return (tau / m + (horizon - tau) / tau * c) * jnp.sum(zeta, axis=-1)


def _check_bound_args(horizon, m, bandwidth, xi_min, xi_max, delta):
    if np.any(np.asarray(horizon) <= 0):
        raise ValueError("horizon must be > 0")
    if np.any(np.asarray(m) < 1):
        raise ValueError("num_pages must be >= 1")
    if np.any(np.asarray(bandwidth) <= 0):
        raise ValueError("bandwidth must be > 0")
    if np.any(np.asarray(xi_min) <= 0) or np.any(np.asarray(xi_max) < np.asarray(xi_min)):
        raise ValueError("need 0 < min_change_rate <= max_change_rate")
    d = np.asarray(delta)
    if np.any(d <= 0) or np.any(d >= 1):
        raise ValueError("delta must be in (0, 1)")


def lemma1_phase_length(importance: ArrayLike, min_change_rate: ArrayLike, tolerance: ArrayLike) -> jax.Array:
    r"""L2C Lemma 1's burn-in time :math:`\frac{1}{\xi_{\min}}\log\frac{2\sum_j\zeta_j}{\varepsilon}`.

    After this long under a fixed Poisson policy, the expected utility rate is within
    ``tolerance`` of its stationary value (eq. 4), whatever the initial cache state; the
    phases of phased ε-greedy (§6.2) last this long.
    """
    zeta = jnp.asarray(importance)
    if is_concrete(zeta, min_change_rate, tolerance):
        if np.any(np.asarray(min_change_rate) <= 0) or np.any(np.asarray(tolerance) <= 0):
            raise ValueError("min_change_rate and tolerance must be > 0")
    return jnp.log(2.0 * jnp.sum(zeta, axis=-1) / tolerance) / min_change_rate


def exploration_utility(problem: CrawlProblem, tau: ArrayLike) -> jax.Array:
    r"""Expected utility of uniform-interval exploration over ``[0, τ]`` (L2C App. H, eq. 29-30).

    .. math:: E\,U([0,\tau],\kappa^{UI}) = \frac{\tau}{m}\sum_i\zeta_i
              \frac{1-e^{-\xi_i m/R}}{\xi_i m/R}
              = \frac{\tau}{m}\,G(R/m;\xi)

    for τ a multiple of :math:`m/R` and every page fresh at time 0 (it was crawled then).
    """
    m = problem.change_rate.shape[-1]
    rate = jnp.full_like(problem.change_rate, 1.0) * (jnp.asarray(problem.bandwidth)[..., None] / m)
    return jnp.asarray(tau) / m * uniform_interval_freshness(problem, rate)


def commit_transient(problem: CrawlProblem, rate: ArrayLike, duration: ArrayLike,
                     fresh: ArrayLike = True) -> jax.Array:
    r"""Exact transient of a Poisson policy's utility (L2C Lemma 1, eq. 10, integrated).

    From cache state :math:`s_i` (1: fresh) at :math:`t_0`, page i is fresh at
    :math:`t_0 + t` with probability :math:`\frac{\rho}{\rho+\xi} + (s - \frac{\rho}{\rho+\xi})
    e^{-(\rho+\xi)t}`; integrating over a duration D and weighting by ζ/m, the utility is
    eq. 4's :math:`\frac{D}{m}F(\rho;\xi)` plus

    .. math:: \frac1m\sum_i\zeta_i\Big(s_i-\frac{\rho_i}{\rho_i+\xi_i}\Big)
              \frac{1-e^{-(\rho_i+\xi_i)D}}{\rho_i+\xi_i},

    which this returns (positive from a fresh cache, bounded as D grows).
    """
    zeta, xi = problem.importance, problem.change_rate
    rate = jnp.asarray(rate, xi.dtype)
    s = jnp.asarray(fresh, xi.dtype)
    tot = rate + xi
    d = jnp.asarray(duration, xi.dtype)[..., None]
    term = zeta * (s - rate / tot) * (-jnp.expm1(-tot * d)) / tot
    return jnp.sum(term, axis=-1) / xi.shape[-1]


# ------------------------------------------------------------ explore-then-commit
class ETCParams(NamedTuple):
    r"""Hyperparameters of explore-then-commit (arrays: ``jax.vmap`` sweeps them).

    The horizon τ is not one of them: every τ of a grid commits from the same
    exploration (:func:`run_etc`, :func:`etc_grid_transform`).

    Attributes:
      min_rate, max_rate: the clip of the estimates, L2C's known bounds
        :math:`[\xi_{\min}, \xi_{\max}]` (§2, Lemma 3); ``None``: the learner's
        defaults (L2C §6: 1e-9 and 25).
    """

    min_rate: float | None = None
    max_rate: float | None = None


class ETCState(NamedTuple):
    """Explore-then-commit state during exploration.

    Attributes:
      sim: the simulator state.
      history: :class:`PaddedHistory` of the exploration crawls.
      num_windows: windows explored.
      time: time explored.
      params: :class:`ETCParams` (arrays).
    """

    sim: SimState
    history: PaddedHistory
    num_windows: jax.Array
    time: jax.Array
    params: ETCParams


class ETCInfo(NamedTuple):
    r"""Diagnostics of one exploration window.

    Attributes:
      utility: simulated utility of the window, :math:`\frac1m\sum_i\zeta_i \times`
        fresh time (the conditional expectation of eq. 2's count given the change and
        crawl times, by Campbell's formula as in eq. 3).
      num_crawls: crawls in the window.
      overflow: page-windows that overflowed a simulator capacity.
      time: time explored after the window.
    """

    utility: jax.Array
    num_crawls: jax.Array
    overflow: jax.Array
    time: jax.Array


class ETCOutcome(NamedTuple):
    r"""What committing after τ gives (all exact expectations except ``estimate``/``rate``).

    Attributes:
      tau: the exploration horizon used, ``num_rounds * m / R``.
      num_rounds: exploration rounds N (observations per page).
      estimate: ``(m,)`` moment-matching estimates from the first N rounds.
      rate: ``(m,)`` committed rates :math:`\hat\rho` (Azar et al.'s optimum for the estimates).
      optimal_freshness: :math:`F(\rho^*;\xi)` (eq. 5).
      commit_freshness: :math:`F(\hat\rho;\xi)`.
      exploration_freshness: :math:`G(R/m;\xi)` (App. H), the exploration utility rate × m.
      num_pages: m (as a float).

    :func:`etc_regret` gives the regret at any horizon, :func:`commit_transient` the
    Lemma 1 correction of the commit phase.
    """

    tau: jax.Array
    num_rounds: jax.Array
    estimate: jax.Array
    rate: jax.Array
    optimal_freshness: jax.Array
    commit_freshness: jax.Array
    exploration_freshness: jax.Array
    num_pages: jax.Array


class ETC(NamedTuple):
    """Explore-then-commit: a :class:`~jaxcrawl.learners.Learner` (``init``, ``step``,
    ``name``) whose steps are exploration windows, plus the commit.

    Attributes:
      init, step, name: the learner (``init(problem, params: ETCParams = None)``).
      commit: ``commit(state, problem, tau) -> ETCOutcome`` (:func:`commit`).
      config: the simulator config of the exploration windows.
      num_windows: exploration windows the history holds (``run_etc`` runs them all).
      rounds_per_window: exploration rounds (crawls per page) per window.
      commit_rates: ``(history, problem, tau, min_rate=, max_rate=) -> (tau, N, estimate,
        rate)``, the part of the commit that depends on τ.
      commit_estimates: ``(history, problem, tau, min_rate=, max_rate=) -> (tau, N,
        estimate)``, its estimation part (:func:`run_etc` estimates at every τ, then solves
        for all of them and the true rates in one batched solve).
    """

    init: Callable
    step: Callable
    name: str
    commit: Callable
    config: SimConfig
    num_windows: int
    rounds_per_window: int
    commit_rates: Callable
    commit_estimates: Callable | None = None


def _exploration_period(problem):
    m = problem.change_rate.shape[-1]
    return m / jnp.asarray(problem.bandwidth, problem.change_rate.dtype)


def etc_settings(problem: CrawlProblem, max_tau: float, *, events_per_window: float = 24.0,
                 tail: float = 1e-9) -> dict:
    """Static settings of :func:`explore_then_commit` for exploring up to ``max_tau`` (eager).

    Windows hold a whole number of exploration rounds (:math:`m/R` each) with about
    ``events_per_window`` expected changes for the fastest-changing page; enough windows
    to reach ``max_tau``.  Needs one exploration period :math:`m/R` for the batch.

    Returns:
      ``dict(config=..., num_windows=..., rounds_per_window=...)``.
    """
    if not is_concrete(problem):
        raise ValueError("etc_settings needs concrete values")
    period = np.unique(np.asarray(problem.change_rate.shape[-1] / np.asarray(problem.bandwidth, float)))
    if period.size != 1:
        raise ValueError("all problems of a batch must share the exploration period m/R")
    w = float(period[0])
    if not max_tau >= w:
        raise ValueError(f"max_tau must be >= one exploration round m/R = {w}")
    xi_max = float(np.max(np.asarray(problem.change_rate)))
    rounds = max(1, int(events_per_window // max(xi_max * w, 1e-12)))
    total_rounds = int(math.ceil(max_tau / w - 1e-9))
    rounds = min(rounds, total_rounds)
    window = rounds * w
    num_windows = int(math.ceil(total_rounds / rounds))
    sched = periodic_schedule(jnp.full_like(problem.change_rate, w))
    config = config_for(problem, sched, window, tail=tail, requests=False)
    return dict(config=config, num_windows=num_windows, rounds_per_window=rounds)


def _commit_estimates(history: PaddedHistory, problem: CrawlProblem, tau, estimator: str, min_rate, max_rate):
    """(τ used, N, estimates) from the first N = floor(τR/m) rounds (L2C eq. 7 or eq. 6)."""
    dtype = problem.change_rate.dtype
    w = _exploration_period(problem)
    n_rounds = jnp.clip(jnp.floor(jnp.asarray(tau, dtype) / w * (1 + 1e-9)), 1, None)
    idx = jnp.cumsum(history.mask.astype(jnp.int32), axis=-1)
    prefix = history.mask & (idx.astype(dtype) <= n_rounds)
    n_rounds = jnp.minimum(n_rounds, jnp.min(jnp.sum(prefix, axis=-1)).astype(dtype))
    est = ESTIMATORS[estimator](history.intervals, history.changed, prefix,
                                min_rate=min_rate, max_rate=max_rate)
    return n_rounds * w, n_rounds, est.astype(dtype)


def _optimal_rates(problem: CrawlProblem, change_rate):
    """Azar et al.'s optimum (L2C eq. 5, ``solve(problem, "binary")``) for the given rates."""
    return solve(problem.replace(change_rate=change_rate), binary()).rate


def _commit_rates(history: PaddedHistory, problem: CrawlProblem, tau, estimator: str, min_rate, max_rate):
    """Estimates from the first floor(τR/m) rounds and Azar et al.'s optimum for them."""
    tau_eff, n_rounds, est = _commit_estimates(history, problem, tau, estimator, min_rate, max_rate)
    return tau_eff, n_rounds, est, _optimal_rates(problem, est)


def _reference_freshness(problem: CrawlProblem):
    """(F(ρ*; ξ), G(R/m; ξ)): Azar et al.'s optimum (eq. 5) and uniform intervals (App. H)."""
    m = problem.change_rate.shape[-1]
    opt = solve(problem, binary()).rate
    uni = jnp.full_like(problem.change_rate, 1.0) * (problem.bandwidth / m)
    return binary_freshness(problem, opt), uniform_interval_freshness(problem, uni)


def _outcome(problem, tau, n_rounds, est, rate, f_star, g_ui):
    dtype = problem.change_rate.dtype
    return ETCOutcome(tau=tau, num_rounds=n_rounds, estimate=est, rate=rate,
                      optimal_freshness=f_star, commit_freshness=binary_freshness(problem, rate),
                      exploration_freshness=g_ui,
                      num_pages=jnp.asarray(problem.change_rate.shape[-1], dtype))


def commit(state: ETCState, problem: CrawlProblem, tau: ArrayLike, *,
           estimator: str = "moment_matching") -> ETCOutcome:
    r"""Commit after exploring until ``tau`` (L2C §5): estimate, solve, and the exact utilities.

    Uses the first :math:`N = \lfloor\tau R/m\rfloor` observations of every page (the
    uniform-interval crawls up to τ; at most the explored ones), the estimator of eq. 7
    (or eq. 6) clipped to ``state.params``' ``[min_rate, max_rate]``, and Azar et al.'s
    optimum for the estimates.  ``tau`` may be traced (vmap over a grid).
    """
    tau_eff, n_rounds, est, rate = _commit_rates(state.history, problem, tau, estimator,
                                                 state.params.min_rate, state.params.max_rate)
    f_star, g_ui = _reference_freshness(problem)
    return _outcome(problem, tau_eff, n_rounds, est, rate, f_star, g_ui)


def etc_regret(outcome: ETCOutcome, horizon: ArrayLike) -> jax.Array:
    r"""Expected regret of ETC at horizon T (L2C §6.1): eq. 4 for the commit phase, App. H
    for the exploration.

    .. math:: R(T) = \frac{\tau}{m}(F^* - G) + \frac{T-\tau}{m}(F^* - F(\hat\rho)).

    Broadcasts ``horizon`` against the outcome's leading axes (e.g. a τ grid).
    """
    t = outcome.tau
    return (t * (outcome.optimal_freshness - outcome.exploration_freshness)
            + (horizon - t) * (outcome.optimal_freshness - outcome.commit_freshness)) / outcome.num_pages


def explore_then_commit(*, config: SimConfig, num_windows: int, rounds_per_window: int,
                        estimator: str = "moment_matching",
                        min_rate: float = DEFAULT_MIN_RATE,
                        max_rate: float = DEFAULT_MAX_RATE) -> ETC:
    r"""Explore-then-commit (L2C §5, Thm 1) as an ``(init, step)`` learner plus ``commit``.

    ``step`` explores for one window with the uniform-interval policy κ^UI (every page
    every :math:`m/R`, all pages fresh and just crawled at time 0, so τ counts whole
    rounds as App. H assumes) and appends the crawls to the history; ``commit(state,
    problem, tau)`` is :func:`commit` with this learner's estimator and clip.  Use
    :func:`run_etc` for a whole τ grid.

    Args:
      config: static simulator config with a window that is a whole number of rounds
        (:func:`etc_settings`).
      num_windows: exploration windows kept in the history (the largest τ).
      rounds_per_window: exploration rounds (crawls per page) per window,
        ``config.window / (m/R)``; :func:`run_etc` uses it to commit from short
        prefixes without scanning the whole history.
      estimator: ``"moment_matching"`` (eq. 7, Thm 1) or ``"mle"`` (eq. 6).
      min_rate, max_rate: the default clip of the estimates (L2C §6: 1e-9 and 25);
        :class:`ETCParams` overrides it per run.
    """
    if estimator not in ESTIMATORS:
        raise ValueError(f"estimator must be one of {sorted(ESTIMATORS)}, got {estimator!r}")
    if not (0 < min_rate < max_rate < np.inf):
        raise ValueError("need 0 < min_rate < max_rate < inf")
    for name, v in (("num_windows", num_windows), ("rounds_per_window", rounds_per_window)):
        if not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    if config.crawl_capacity < rounds_per_window:
        raise ValueError("config.crawl_capacity is smaller than rounds_per_window: the "
                         "window does not hold its exploration crawls")
    slots = num_windows * config.crawl_capacity

    def etc_params(problem: CrawlProblem, params: ETCParams | None) -> ETCParams:
        dtype = problem.change_rate.dtype
        given = params or ETCParams()
        prm = ETCParams(jnp.asarray(min_rate if given.min_rate is None else given.min_rate, dtype),
                        jnp.asarray(max_rate if given.max_rate is None else given.max_rate, dtype))
        if is_concrete(prm):
            lo, hi = np.asarray(prm.min_rate), np.asarray(prm.max_rate)
            if np.any(~(lo > 0)) or np.any(~(hi > lo)) or np.any(~np.isfinite(hi)):
                raise ValueError(f"need 0 < min_rate < max_rate < inf; got {lo}, {hi}")
        return prm

    def init(problem: CrawlProblem, params: ETCParams | None = None) -> ETCState:
        dtype = problem.change_rate.dtype
        prm = etc_params(problem, params)
        sim = init_state(problem)
        n = problem.change_rate.shape[-1]
        zero = jnp.zeros((), dtype)
        return ETCState(sim, empty_padded_history(n, slots, dtype), jnp.zeros((), jnp.int32), zero, prm)

    init.check = lambda problem, params=None: etc_params(problem, params) and None

    def step(key, state: ETCState, problem: CrawlProblem):
        w = _exploration_period(problem)
        schedule = periodic_schedule(jnp.broadcast_to(w, problem.change_rate.shape))
        sim, win = simulate_window(key, state.sim, problem, schedule, config)
        hist = append_window(state.history, win.observations, state.num_windows)
        new = ETCState(sim, hist, state.num_windows + 1, state.time + config.window, state.params)
        info = ETCInfo(window_utility(problem, win, config.window), jnp.sum(win.num_crawls),
                       jnp.sum(win.overflow, dtype=jnp.int32), new.time)
        return new, info

    commit_fn = functools.partial(commit, estimator=estimator)
    rates_fn = functools.partial(_commit_rates, estimator=estimator)
    estimates_fn = functools.partial(_commit_estimates, estimator=estimator)
    return ETC(init, step, f"etc_{estimator}", commit_fn, config, int(num_windows),
               int(rounds_per_window), rates_fn, estimates_fn)


def _grid_commit(state: ETCState, problem: CrawlProblem, learner: ETC, taus, group_ratio: int):
    """Commit at every τ of a concrete grid, in groups of similar history prefixes."""
    taus = np.asarray(taus, dtype=float).ravel()
    if taus.size == 0 or np.any(~np.isfinite(taus)) or np.any(taus <= 0):
        raise ValueError("taus must be a non-empty grid of positive, finite horizons")
    if not (isinstance(group_ratio, (int, np.integer)) and group_ratio >= 2):
        raise ValueError(f"group_ratio must be an int >= 2, got {group_ratio!r}")
    window = learner.config.window
    explored = learner.num_windows * window
    if np.any(taus > explored * (1 + 1e-9)):
        raise ValueError(f"every tau must be <= the explored time {explored} "
                         "(num_windows * config.window)")
    need = np.clip(np.ceil(taus / window * (1 - 1e-9)), 1, learner.num_windows).astype(int)
    level = np.ceil(np.log(need) / np.log(group_ratio) - 1e-9).astype(int)
    width = np.minimum(group_ratio ** level, learner.num_windows)
    k = learner.config.crawl_capacity
    lo, hi = state.params.min_rate, state.params.max_rate
    estimate_fn = learner.commit_estimates
    if estimate_fn is None:  # an ETC built by hand: estimate through commit_rates
        def estimate_fn(h, q, t, min_rate, max_rate):
            return learner.commit_rates(h, q, t, min_rate=min_rate, max_rate=max_rate)[:3]
    parts, order = [], []
    for wd in np.unique(width):
        idx = np.flatnonzero(width == wd)
        short = jax.tree_util.tree_map(lambda a: a[..., : wd * k], state.history)
        grid = jnp.asarray(taus[idx], problem.change_rate.dtype)
        parts.append(jax.vmap(lambda t: estimate_fn(short, problem, t, min_rate=lo, max_rate=hi))(grid))
        order.append(idx)
    order = np.concatenate(order)
    inverse = np.empty_like(order)
    inverse[order] = np.arange(order.size)
    tau_eff, n_rounds, est = jax.tree_util.tree_map(lambda *xs: jnp.concatenate(xs, axis=0)[inverse], *parts)
    # one batched solve for every τ's estimates and for the true rates (the reference ρ*)
    rates = jax.vmap(lambda r: _optimal_rates(problem, r))(
        jnp.concatenate([est, problem.change_rate[None].astype(est.dtype)], axis=0))
    rate, opt = rates[:-1], rates[-1]
    m = problem.change_rate.shape[-1]
    uni = jnp.full_like(problem.change_rate, 1.0) * (problem.bandwidth / m)
    f_star, g_ui = binary_freshness(problem, opt), uniform_interval_freshness(problem, uni)
    return jax.vmap(lambda t, n, e, r: _outcome(problem, t, n, e, r, f_star, g_ui))(
        tau_eff, n_rounds, est, rate)


def run_etc(key: jax.Array, learner: ETC, problem: CrawlProblem, taus: ArrayLike,
            params: ETCParams | None = None, *, group_ratio: int = 4) -> tuple[ETCOutcome, ETCInfo]:
    """Explore once for ``learner.num_windows`` windows, then commit at every τ of ``taus``.

    All τ share the same simulated exploration (common random numbers across the grid,
    so the regret curve in τ is smooth).  The commits are vmapped over τ in groups that
    need about the same number of exploration windows (within a factor ``group_ratio``),
    each group reading only its prefix of the history, so a log-spaced grid costs a few
    passes over the history, not one per τ (fewer groups compile faster, more run faster).

    Args:
      key: PRNG key (the exploration's steps use ``fold_in(key, i)``).
      learner: an :class:`ETC` from :func:`explore_then_commit`.
      problem: one problem (vmap this function over keys / problems for more).
      taus: concrete 1-D grid of exploration horizons (multiples of m/R; at most the
        explored time ``num_windows * config.window``).
      params: :class:`ETCParams` (the clip of the estimates).
      group_ratio: see above.

    Returns:
      ``(outcome, info)``: an :class:`ETCOutcome` with leading axis ``len(taus)`` (in the
      order given) and the exploration's :class:`ETCInfo` per window.  :func:`etc_regret`
      turns the outcome into regrets for any horizons.
    """
    if not is_concrete(taus):
        raise ValueError("taus must be concrete (a list or NumPy array): it sets static shapes")
    grid = np.asarray(taus, dtype=float)  # validated before simulating
    if grid.size == 0 or np.any(~(grid > 0)) or np.any(~np.isfinite(grid)):
        raise ValueError("taus must be a non-empty grid of positive, finite horizons")
    explored = learner.num_windows * learner.config.window
    if np.any(grid > explored * (1 + 1e-9)):
        raise ValueError(f"every tau must be <= the explored time {explored} "
                         "(num_windows * config.window)")
    state, info = run_learner(key, learner, problem, learner.num_windows, params)
    return _grid_commit(state, problem, learner, taus, group_ratio), info


class _GridTransform:
    """Hashable ``transform`` for :func:`~jaxcrawl.learners.run_sweep` (see
    :func:`etc_grid_transform`)."""

    def __init__(self, learner, taus, group_ratio, clips):
        self.learner, self.taus, self.group_ratio = learner, tuple(float(t) for t in taus), int(group_ratio)
        self.clips = None if clips is None else tuple((float(a), float(b)) for a, b in clips)
        self.__qualname__ = (f"etc_grid_transform[{len(self.taus)} taus, ratio {self.group_ratio}, "
                             f"clips {self.clips}]")

    def __call__(self, final_state, info, problem, params):
        if self.clips is None:
            return _grid_commit(final_state, problem, self.learner, self.taus, self.group_ratio), info
        dtype = problem.change_rate.dtype
        lo, hi = (jnp.asarray(v, dtype) for v in zip(*self.clips))

        def one(a, b):
            return _grid_commit(final_state._replace(params=ETCParams(a, b)), problem, self.learner,
                                self.taus, self.group_ratio)

        return jax.vmap(one)(lo, hi), info

    def _key(self):
        return (id(self.learner), self.taus, self.group_ratio, self.clips)

    def __hash__(self):
        return hash(self._key())

    def __eq__(self, other):
        return isinstance(other, _GridTransform) and other._key() == self._key()


def etc_grid_transform(learner: ETC, taus: ArrayLike, *, group_ratio: int = 4,
                       clips: Sequence[tuple[float, float]] | None = None) -> Callable[..., Any]:
    """A :func:`~jaxcrawl.learners.run_sweep` ``transform`` that commits at every τ.

    ``run_sweep(key, learner, problems, params, num_seeds=S, num_steps=learner.num_windows,
    transform=etc_grid_transform(learner, taus))`` returns ``(outcome, info)`` with an
    :class:`ETCOutcome` of shape ``(G, P, S, len(taus), ...)``: :func:`run_etc` for every
    grid point × instance × seed in one compiled call.  With ``clips`` (a list of
    ``(min_rate, max_rate)``) every exploration commits once per clip instead of with its
    ``params`` clip, and the outcome gets an axis ``len(clips)`` before the τ axis (the
    clips then share each exploration: common random numbers).
    """
    taus = np.asarray(taus, dtype=float).ravel()
    if taus.size == 0 or np.any(~(taus > 0)) or np.any(~np.isfinite(taus)):
        raise ValueError("taus must be a non-empty grid of positive, finite horizons")
    if clips is not None:
        clips = [(float(a), float(b)) for a, b in clips]
        if not clips or any(not (0 < a < b < np.inf) for a, b in clips):
            raise ValueError("clips must be a non-empty list of (min_rate, max_rate) with 0 < min < max < inf")
    return _GridTransform(learner, taus, group_ratio, clips)


@functools.partial(jax.jit, static_argnames=("learner", "tau_windows", "commit_windows", "commit_config"))
def simulate_etc(key: jax.Array, learner: ETC, problem: CrawlProblem, tau_windows: int,
                 commit_windows: int, commit_config: SimConfig) -> tuple[jax.Array, jax.Array, ETCOutcome]:
    r"""Simulate a whole ETC run: explore ``tau_windows`` windows, commit for ``commit_windows``.

    Returns ``(simulated_utility, exact_utility, outcome)`` where the simulated utility
    of eq. 2 over ``[0, T]`` is :math:`\frac1m\sum_i\zeta_i\times` fresh time (its
    conditional expectation given the change and crawl times), and the exact one is App.
    H for the exploration plus eq. 4 and the Lemma 1 transient (:func:`commit_transient`,
    from the fresh state at τ) for the commit phase, given this run's :math:`\hat\rho`.
    Their difference has mean zero over seeds (the tests check it).  ``commit_config``
    must allow Poisson crawling at the committed rates (e.g. ``config_for(problem, window,
    max_crawl_rate=R, requests=False)``).
    """
    key_explore, key_commit = jax.random.split(key)
    state, info = run_learner(key_explore, learner, problem, tau_windows)
    tau = tau_windows * learner.config.window
    out = learner.commit(state, problem, tau)
    _, totals, _ = simulate(key_commit, problem, poisson_schedule(out.rate), state.sim,
                            commit_config, commit_windows)
    duration = commit_windows * commit_config.window
    m = problem.change_rate.shape[-1]
    commit_sim = jnp.sum(problem.importance * (duration - totals.stale_time), axis=-1) / m
    simulated = jnp.sum(info.utility) + commit_sim
    exact = (exploration_utility(problem, out.tau) + duration / m * out.commit_freshness
             + commit_transient(problem, out.rate, duration))
    return simulated, exact, out


# ------------------------------------------------------------------ phased ε-greedy
class EpsGreedyParams(NamedTuple):
    r"""Hyperparameters of phased ε-greedy (arrays: ``jax.vmap`` sweeps them).

    Attributes:
      epsilon: the uniform share ε of :math:`\rho^\varepsilon = (1-\varepsilon)\hat\rho + \varepsilon R/m`.
    """

    epsilon: float = 0.1


class EpsGreedyState(NamedTuple):
    """Phased ε-greedy state.

    Attributes:
      sim: the simulator state.
      history: the compressed :class:`CrawlHistory`
        of all crawls so far (one column per phase).
      rate: ``(m,)`` the policy of the next phase.
      estimate: ``(m,)`` the latest estimates (NaN before the first phase ends).
      phase: phases completed.
      params: :class:`EpsGreedyParams`.
    """

    sim: SimState
    history: CrawlHistory
    rate: jax.Array
    estimate: jax.Array
    phase: jax.Array
    params: EpsGreedyParams


class PhaseInfo(NamedTuple):
    r"""Diagnostics of one phase (of the policy executed during it).

    Attributes:
      duration: the phase length L.
      utility: expected utility of the phase by eq. 4, :math:`\frac{L}{m}F(\rho;\xi)`.
      simulated_utility: :math:`\frac1m\sum_i\zeta_i\times` simulated fresh time.
      freshness: :math:`F(\rho;\xi)` of the executed rates.
      rate: ``(m,)`` the executed rates.
      estimate: ``(m,)`` the estimates at the end of the phase.
      overflow: page-windows that overflowed a simulator capacity.
      truncated: pages whose history was shortened by the ring buffer.
      sampler: 0 (event-level simulator) or 1 (observation-level; ``simulated_utility``
        is then the conditional expectation of the simulated one given the draws).
    """

    duration: jax.Array
    utility: jax.Array
    simulated_utility: jax.Array
    freshness: jax.Array
    rate: jax.Array
    estimate: jax.Array
    overflow: jax.Array
    truncated: jax.Array
    sampler: Any = 0


def phased_settings(problem: CrawlProblem, phase_length: float, num_phases: int, *,
                    epsilon: float = 0.01, events_per_window: float = 24.0, safety: float = 2.0,
                    max_crawl_rate: float | None = None, history_capacity: int | None = None,
                    tail: float = 1e-9, sampler: str = "auto") -> dict:
    """Static settings of :func:`phased_epsilon_greedy` (eager).

    Phases of ``phase_length`` cut into windows with about ``events_per_window``
    expected events for the busiest page; crawl rates bounded by ``max_crawl_rate``
    (default R: no page can be crawled faster than the whole bandwidth).  The ring
    buffer of changed crawls holds, per page, ``safety`` times the expected number of
    changed crawls over all phases of the busiest page under the optimal ε-policy (at
    tail ``tail``), unless ``history_capacity`` is given.

    Returns:
      ``dict(config=..., windows_per_phase=..., num_phases=..., history_capacity=...,
      observe=...)``; ``sampler``: ``"auto"``/``"observation"`` add the
      observation-level sampler's config for one window per phase (the phases crawl as
      Poisson processes, which it simulates exactly), ``"event"`` gives ``observe=None``.
    """
    if not is_concrete(problem):
        raise ValueError("phased_settings needs concrete values")
    if not phase_length > 0:
        raise ValueError("phase_length must be > 0")
    if not (isinstance(num_phases, (int, np.integer)) and num_phases >= 1):
        raise ValueError(f"num_phases must be a positive int, got {num_phases!r}")
    bw = float(np.max(np.asarray(problem.bandwidth)))
    m = problem.change_rate.shape[-1]
    rho = bw if max_crawl_rate is None else float(max_crawl_rate)
    lam = np.asarray(problem.change_rate, np.float64)
    busiest = float(lam.max()) + rho
    windows = max(1, int(math.ceil(busiest * phase_length / events_per_window)))
    config = config_for(problem, None, phase_length / windows,
                        max_crawl_rate=rho, total_crawl_rate=bw, tail=tail, requests=False)
    if history_capacity is None:
        opt = np.asarray(solve(problem, binary()).rate, np.float64)
        eps_rate = (1 - epsilon) * opt + epsilon * bw / m
        uniform = np.full_like(lam, bw / m)
        changed = max(float((r * lam / (r + lam)).max()) for r in (eps_rate, uniform))
        cap = poisson_capacity(safety * changed * phase_length * num_phases, tail)
        history_capacity = int(-(-cap // 8) * 8)
    observe = None
    if use_observation(sampler):
        observe = observe_config(problem, phase_length, max_crawl_rate=rho, total_crawl_rate=bw, tail=tail)
    return dict(config=config, windows_per_phase=windows, num_phases=int(num_phases),
                history_capacity=int(history_capacity), observe=observe)


def phased_epsilon_greedy(*, config: SimConfig, windows_per_phase: int, num_phases: int,
                          history_capacity: int,
                          min_rate: float = DEFAULT_MIN_RATE,
                          max_rate: float = DEFAULT_MAX_RATE,
                          observe: ObserveConfig | None = None) -> Learner:
    r"""Phased ε-greedy crawling (L2C §6.2) as a :class:`~jaxcrawl.learners.Learner`.

    One ``step`` is one phase of ``windows_per_phase * config.window`` time units (the
    Lemma 1 length, :func:`lemma1_phase_length`): crawl as Poisson processes at the
    current rates (:math:`\rho^{UR} = R/m` in the first phase), append the observations,
    estimate every rate from all of them by maximum likelihood (eq. 6,
    :func:`jaxcrawl.estimators.mle`, clipped to ``[min_rate, max_rate]`` as in L2C §6;
    L2C App. J finds it performs like eq. 7), and set the next phase's rates to
    :math:`\rho^\varepsilon = (1-\varepsilon)\hat\rho + \varepsilon R/m` with
    :math:`\hat\rho` Azar et al.'s optimum for the estimates.

    The crawls are Poisson, so their intervals differ; the likelihood depends on the
    intervals of unchanged crawls only through their sum, so the history is the
    compressed :class:`CrawlHistory` (changed crawls
    in a ring of ``history_capacity`` per page, unchanged time per phase) and the
    estimate is exactly the MLE of the full history (a page whose ring overflows keeps
    its most recent complete phases; ``info.truncated`` counts them).

    Args:
      config: static simulator config (:func:`phased_settings`).
      windows_per_phase: simulator windows per phase.
      num_phases: phases the history holds (a longer run forgets the oldest phases).
      history_capacity: changed crawls kept per page.
      min_rate, max_rate: the estimator's clip (L2C §6: 1e-9 and 25).
      observe: the observation-level sampler's config (:func:`phased_settings`): when
        given, each phase is drawn in one window by
        :func:`jaxcrawl.simulate.observe_window` (exact in distribution), else by the
        event-level simulator.  ``info.sampler`` says which.

    Returns:
      :class:`Learner` named ``"phased_eps_greedy"``; ``init(problem, params: EpsGreedyParams = None)``.
    """
    for name, v in (("windows_per_phase", windows_per_phase), ("num_phases", num_phases),
                    ("history_capacity", history_capacity)):
        if not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    phase_length = windows_per_phase * config.window
    sampler = check_observe(observe, phase_length)

    def eps_params(problem: CrawlProblem, params: EpsGreedyParams | None) -> EpsGreedyParams:
        prm = EpsGreedyParams(*(jnp.asarray(v, problem.change_rate.dtype) for v in (params or EpsGreedyParams())))
        if is_concrete(prm) and not np.all((np.asarray(prm.epsilon) >= 0) & (np.asarray(prm.epsilon) <= 1)):
            raise ValueError(f"epsilon must be in [0, 1]; got {prm.epsilon}")
        return prm

    def init(problem: CrawlProblem, params: EpsGreedyParams | None = None) -> EpsGreedyState:
        dtype = problem.change_rate.dtype
        prm = eps_params(problem, params)
        n = problem.change_rate.shape[-1]
        uniform = jnp.full((n,), 1.0, dtype) * (problem.bandwidth / n)
        sim = init_state(problem)
        hist = empty_history(n, history_capacity, num_phases, dtype)
        return EpsGreedyState(sim, hist, uniform, jnp.full((n,), jnp.nan, dtype),
                              jnp.zeros((), jnp.int32), prm)

    def step(key, state: EpsGreedyState, problem: CrawlProblem):
        phase = state.phase
        if sampler == OBSERVATION:  # every page's crawls observed (L2C: no change signals)
            sim, hist, stats = observe_epoch(key, state.sim, state.history, problem, poisson_schedule(state.rate),
                                             observe, 1, phase,
                                             signals=jnp.zeros(problem.change_rate.shape, bool))
        else:
            sim, hist, stats = crawl_epoch(key, state.sim, state.history, problem, poisson_schedule(state.rate),
                                           config, windows_per_phase, phase)
        fresh, overflow = stats.utility, stats.overflow
        intervals, changed, mask = suffix_history(hist, phase, jnp.inf)
        est = estimators.mle(intervals, changed, mask, min_rate=min_rate, max_rate=max_rate)
        # a page whose ring wrapped inside this phase has no complete phase left: keep its estimate
        empty = hist.dropped_epoch >= phase
        est = jnp.where(empty & ~jnp.isnan(state.estimate), state.estimate, est)
        rho_hat = solve(problem.replace(change_rate=est.astype(problem.dtype)), binary()).rate
        n = problem.change_rate.shape[-1]
        eps = state.params.epsilon
        rate = (1.0 - eps) * rho_hat + eps * problem.bandwidth / n
        f_exec = binary_freshness(problem, state.rate)
        truncated = jnp.sum(hist.dropped_epoch >= 0, dtype=jnp.int32)
        info = PhaseInfo(jnp.asarray(phase_length, f_exec.dtype), phase_length / n * f_exec,
                         jnp.sum(fresh), f_exec, state.rate, est, jnp.sum(overflow), truncated,
                         jnp.asarray(sampler, jnp.int32))
        return EpsGreedyState(sim, hist, rate, est, phase + 1, state.params), info

    init.check = lambda problem, params=None: eps_params(problem, params) and None

    return Learner(init, step, "phased_eps_greedy")


def phased_regret(problem: CrawlProblem, info: PhaseInfo) -> jax.Array:
    r"""Cumulative expected regret of a phased learner after each phase (eq. 4 per phase):

    :math:`\sum_{k\le K}\big(\frac{L}{m}F(\rho^*;\xi) - \text{utility}_k\big)`, with ρ*
    Azar et al.'s optimum.  ``info`` is stacked over phases (last axis of ``utility``).
    """
    m = problem.change_rate.shape[-1]
    f_star = binary_freshness(problem, solve(problem, binary()))
    return jnp.cumsum(info.duration / m * f_star[..., None] - info.utility, axis=-1)
