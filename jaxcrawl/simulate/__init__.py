r"""Exact, fixed-shape simulation of the crawling world of the papers.

Every page ``i`` changes as a Poisson process of rate ``change_rate`` (ξ, λ) and is
requested as a Poisson process of rate ``importance`` (ζ, μ), independently (Learning to
Crawl [L2C] §2; Kolobov et al. NeurIPS-19 [K19] §2).  The crawler follows one of three
per-page *schedules* (:mod:`jaxcrawl.simulate.schedules`):

* ``POISSON``: crawls form a Poisson process of rate ``rate`` (L2C's class Δ_R, K19's Π⁻,
  eq. 3);
* ``PERIODIC``: crawls at the absolute times ``phase + k * period`` (L2C's deterministic
  class K_R and the uniform-interval policy κ^UI of §5 / App. H);
* ``SIGNAL``: for a page with complete change observations, a crawl right after each
  change signal with probability ``prob`` (K19's Π°, eq. 6).

Time is cut into windows of a fixed length.  In a window ``(t, t + w]`` the simulator
(:mod:`jaxcrawl.simulate.window`) draws, per page, the number of changes (and of Poisson
crawls), their times as sorted uniforms (exponential spacings, no sort needed), the
periodic or signal crawls, and from these it computes *exactly* (no time grid) the
integrals that the policy costs average:

.. math::

   \int_t^{t+w} H(N_i(s))\,ds, \qquad \int_t^{t+w} \mathbf 1\{N_i(s) > 0\}\,ds,

where :math:`N_i(s)` is the number of changes not yet crawled (K19 eq. 1) and
:math:`H(n) = \sum_{j \le n} 1/j` (K19 eq. 2); :math:`N_i` is piecewise constant between
events, so each integral is a finite sum over the segments that start at a change.  The
requests that arrive while the page is fresh and while it is stale are Poisson with means
ζ times the fresh and the stale time (they are independent of the page's path), which
gives L2C eq. 2's count of requests served fresh exactly in distribution.

The crawler's view of the window is returned as the padded histories
:mod:`jaxcrawl.estimators` reads: ``intervals[..., k]`` (time since the previous crawl),
``changed[..., k]`` (0/1, the partial observation of L2C eq. 1, :math:`1 - o_{i,n}`),
``mask[..., k]``, plus ``counts[..., k]`` (number of changes since the previous crawl:
L2C App. K full observation) and ``num_changes`` (the change signals of complete pages,
K19 eq. 11).

A :class:`SimState` (:mod:`jaxcrawl.simulate.state`) carries over between windows
(absolute time, time since each page's last crawl, number of uncrawled changes), so a
learner can call :func:`simulate_window` inside its own ``jax.lax.scan`` and change the
schedule every window; :func:`simulate` (:mod:`jaxcrawl.simulate.runs`) is that scan for
a fixed or precomputed sequence of schedules, and :func:`monte_carlo` / :func:`evaluate`
(:mod:`jaxcrawl.simulate.evaluation`) turn it into the costs with standard errors.

Fixed shapes: each window holds at most ``event_capacity`` random events per page, records at
most ``crawl_capacity`` crawls per page, and stores all pages' events in one flat pool of
``pool_capacity`` slots.  :func:`poisson_capacity` sizes them so that a page-window overflows
with probability below ``tail`` (1e-9 by default); an overflow is flagged per page and
window and counted in every result, never dropped silently (the events past the capacity
are not simulated, so a result with overflows is not exact).

L2C Lemma 1, eq. 10, the transient probability that a page is fresh under Poisson
crawling from a cache state :math:`s`, is
:math:`\rho/(\rho+\xi) + (s - \rho/(\rho+\xi))\,e^{-(\rho+\xi)(t-t_0)}` (times ζ for the
utility), as the lemma's derivation gives; the simulator reproduces it
(``tests/test_simulate.py``).

For learners that only read observations, :mod:`~jaxcrawl.simulate.observe`
(:func:`observe_window`) draws the crawler's view alone -- crawl intervals and changed
bits, change signals, the carried state -- with the same laws and no change events.

Layout: :mod:`~jaxcrawl.simulate.schedules` (what the crawler does),
:mod:`~jaxcrawl.simulate.state` (what carries over, capacities),
:mod:`~jaxcrawl.simulate.window` (one window), :mod:`~jaxcrawl.simulate.runs` (many
windows), :mod:`~jaxcrawl.simulate.evaluation` (costs with standard errors),
:mod:`~jaxcrawl.simulate.drift` (drifting change rates: rate paths, their simulation and
exact expected costs).
"""
from __future__ import annotations

from .._src.special import harmonic_number as harmonic_number
from .drift import DriftTotals as DriftTotals
from .drift import drift_config as drift_config
from .drift import hot_then_cold as hot_then_cold
from .drift import lognormal_walk as lognormal_walk
from .drift import periodic_drift_costs as periodic_drift_costs
from .drift import regime_switch as regime_switch
from .drift import simulate_drift as simulate_drift
from .evaluation import Evaluation as Evaluation
from .evaluation import evaluate as evaluate
from .evaluation import monte_carlo as monte_carlo
from .observe import ObserveConfig as ObserveConfig
from .observe import Observed as Observed
from .observe import observe_config as observe_config
from .observe import observe_window as observe_window
from .observe import padded_observations as padded_observations
from .runs import Totals as Totals
from .runs import history as history
from .runs import simulate as simulate
from .schedules import PERIODIC as PERIODIC
from .schedules import POISSON as POISSON
from .schedules import SIGNAL as SIGNAL
from .schedules import Schedule as Schedule
from .schedules import nominal_rate as nominal_rate
from .schedules import periodic_schedule as periodic_schedule
from .schedules import poisson_schedule as poisson_schedule
from .schedules import schedule_from_policy as schedule_from_policy
from .schedules import signal_schedule as signal_schedule
from .state import SimConfig as SimConfig
from .state import SimState as SimState
from .state import config_for as config_for
from .state import init_state as init_state
from .state import poisson_capacity as poisson_capacity
from .state import stationary_state as stationary_state
from .window import Events as Events
from .window import Observations as Observations
from .window import Window as Window
from .window import simulate_window as simulate_window

__all__ = [
    "POISSON",
    "PERIODIC",
    "SIGNAL",
    "Schedule",
    "poisson_schedule",
    "periodic_schedule",
    "signal_schedule",
    "schedule_from_policy",
    "nominal_rate",
    "SimState",
    "init_state",
    "stationary_state",
    "SimConfig",
    "poisson_capacity",
    "config_for",
    "Observations",
    "Window",
    "Events",
    "Totals",
    "simulate_window",
    "simulate",
    "history",
    "Evaluation",
    "monte_carlo",
    "evaluate",
    "harmonic_number",
    "regime_switch",
    "hot_then_cold",
    "lognormal_walk",
    "drift_config",
    "DriftTotals",
    "simulate_drift",
    "periodic_drift_costs",
    "ObserveConfig",
    "Observed",
    "observe_config",
    "observe_window",
    "padded_observations",
]
