r"""Exact, fixed-shape simulation of the crawling world of the papers.

Every page changes as a Poisson process of rate ``change_rate`` (ξ) and is requested as
a Poisson process of rate ``importance`` (ζ) (Learning to Crawl [L2C] §2; NeurIPS-19
[K19] §2).  The crawler follows a :class:`Schedule` per page: :func:`poisson_schedule`
(L2C's Δ_R, K19's Π⁻, eq. 3), :func:`periodic_schedule` (L2C's K_R and the
uniform-interval policy of App. H), :func:`signal_schedule` (a crawl after each change
signal with probability ``prob``, K19's Π°, eq. 6), or :func:`schedule_from_policy`.

:func:`simulate_window` simulates one window ``(t, t + w]`` exactly (no time grid): the
changes, crawls and requests, the integrals :math:`\int H(N(s))\,ds` and
:math:`\int 1\{N(s)>0\}\,ds` of K19 eq. 1-2, and the crawler's padded observations (the
format of :mod:`jaxcrawl.estimators`).  A :class:`SimState` (:func:`init_state`) carries
over between windows, so a learner can call it inside its own ``jax.lax.scan``;
:func:`simulate` is that scan for a fixed schedule, :func:`monte_carlo` and
:func:`evaluate` turn it into costs with standard errors.  :func:`observe_window`
(:func:`observe_config`, :class:`ObserveConfig`) draws the crawler's view alone, with
the same laws; :func:`padded_observations` pads it for the estimators.  Drift:
:func:`regime_switch`, :func:`hot_then_cold` and :func:`lognormal_walk` build rate paths,
:func:`simulate_drift` runs them, :func:`periodic_drift_costs` gives their exact costs.

Fixed shapes: the capacities of a :class:`SimConfig` (:func:`config_for`) are sized so
that a page-window overflows with probability below ``tail``; overflows are counted in
every result, never dropped silently.
"""
from __future__ import annotations

from .._src.observations import padded_observations as padded_observations
from ._drift import hot_then_cold as hot_then_cold
from ._drift import lognormal_walk as lognormal_walk
from ._drift import periodic_drift_costs as periodic_drift_costs
from ._drift import regime_switch as regime_switch
from ._drift import simulate_drift as simulate_drift
from ._evaluation import evaluate as evaluate
from ._evaluation import monte_carlo as monte_carlo
from ._observe import ObserveConfig as ObserveConfig
from ._observe import observe_config as observe_config
from ._observe import observe_window as observe_window
from ._runs import simulate as simulate
from ._schedules import Schedule as Schedule
from ._schedules import periodic_schedule as periodic_schedule
from ._schedules import poisson_schedule as poisson_schedule
from ._schedules import schedule_from_policy as schedule_from_policy
from ._schedules import signal_schedule as signal_schedule
from ._state import SimConfig as SimConfig
from ._state import SimState as SimState
from ._state import config_for as config_for
from ._state import init_state as init_state
from ._window import simulate_window as simulate_window

__all__ = [
    "Schedule",
    "poisson_schedule",
    "periodic_schedule",
    "signal_schedule",
    "schedule_from_policy",
    "SimState",
    "init_state",
    "SimConfig",
    "config_for",
    "simulate_window",
    "simulate",
    "monte_carlo",
    "evaluate",
    "ObserveConfig",
    "observe_config",
    "observe_window",
    "padded_observations",
    "regime_switch",
    "hot_then_cold",
    "lognormal_walk",
    "simulate_drift",
    "periodic_drift_costs",
]
