r"""Drifting pages: change rates that move over time, simulated exactly and costed exactly.

The papers' pages change as *homogeneous* Poisson processes (Learning to Crawl [L2C] §2,
Kolobov et al. NeurIPS-19 [K19] §2).  Real pages drift: a news article is hot for a few
days and then goes cold, a site is redesigned, a page's activity wanders.  This module
models drift as a change rate that is **piecewise constant in time, constant within each
simulator window** (a non-homogeneous Poisson process with a step intensity), given as a
*rate path*: an array ``(num_windows, ..., n)`` whose row ``w`` is every page's change
rate during window ``w``.  Three profiles build paths:

* :func:`regime_switch` -- piecewise-constant regimes: multipliers of the base rate that
  switch at given times (a redesign, a page going dormant);
* :func:`hot_then_cold` -- the news profile: ``hot_factor`` times the base rate for
  ``hot_days`` after each page's start time, ``cold_factor`` times it before and after;
* :func:`lognormal_walk` -- a slow log-normal random walk,
  :math:`\log\lambda_{w+1}=\log\lambda_w+\sigma\sqrt{h}\,\varepsilon_w-\sigma^2h/2`
  (:math:`h` the window length, :math:`\varepsilon_w` standard normal): a positive
  martingale, so :math:`E[\lambda_w]=\lambda_0`.

**Simulation** (:func:`simulate_drift`): the window kernel
(:func:`~jaxcrawl.simulate.simulate_window`) is already exact for a constant rate, so
running window ``w`` on the problem with ``change_rate = path[w]`` simulates the
non-homogeneous process exactly (the uncrawled-change count carries over between windows
in the :class:`~jaxcrawl.simulate.SimState`); the costs are still the exact integrals
:math:`\int H(N(s))ds` and :math:`\int 1\{N(s)>0\}ds` (K19 eq. 1-2) summed from the events.

**Exact expected costs** (:func:`periodic_drift_costs`): for a page crawled at fixed
times (periodic crawling, L2C's class :math:`K_R`; the revisit heuristics of
:func:`jaxcrawl.learners.heuristic` between their updates), given the last crawl at
:math:`c` and the cumulative intensity :math:`\Lambda`, the number of uncrawled changes at
:math:`s` is Poisson with mean :math:`m(s)=\Lambda(s)-\Lambda(c)`, so

.. math::

   E\,H(N(s)) = \mathrm{Ein}(m(s)), \qquad P(N(s)>0) = 1-e^{-m(s)}

(:math:`\mathrm{Ein}(u)=\int_0^u(1-e^{-t})/t\,dt`, the harmonic staleness of K19 eq. 2
after :math:`u` expected changes), and on each piece where the rate is constant
:math:`m` is linear in time.  The binary integral is in closed form; the harmonic one is
integrated by 8-point Gauss-Legendre on each piece (Ein is smooth, so this is exact to the
working precision).  The tests compare :func:`simulate_drift` with these within 4
standard errors.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .._src.checks import is_concrete
from .._src.special import ein
from ..core.problem import CrawlProblem
from ._schedules import Schedule
from ._state import SimConfig, SimState
from ._window import simulate_window


def _check_path_args(base_rate, num_windows: int, window: float) -> jax.Array:
    if not isinstance(num_windows, (int, np.integer)) or num_windows < 1:
        raise ValueError(f"num_windows must be a positive int, got {num_windows!r}")
    if not (math.isfinite(window) and window > 0):
        raise ValueError(f"window must be finite and > 0, got {window!r}")
    base = jnp.asarray(base_rate)
    if not jnp.issubdtype(base.dtype, jnp.floating):
        base = base.astype(jnp.result_type(float))
    if is_concrete(base):
        b = np.asarray(base)
        if np.any(~np.isfinite(b)) or np.any(b <= 0):
            raise ValueError("base_rate must be finite and > 0 for every page")
    return base


def _window_starts(num_windows: int, window: float, dtype) -> jax.Array:
    return jnp.arange(num_windows, dtype=dtype) * jnp.asarray(window, dtype)


def regime_switch(base_rate: ArrayLike, multipliers: ArrayLike, switch_times: ArrayLike, *,
                  num_windows: int, window: float = 1.0) -> jax.Array:
    r"""A piecewise-constant rate path: ``multipliers[j] * base_rate`` from
    ``switch_times[j-1]`` to ``switch_times[j]``.

    Args:
      base_rate: ``(..., n)`` change rates.
      multipliers: ``(k + 1,)`` or ``(k + 1, ..., n)`` factors of the ``k + 1`` regimes
        (> 0).
      switch_times: ``(k,)`` increasing times of the switches; each must be a multiple of
        ``window`` (the rate is constant within a window).
      num_windows, window: the path's length in windows and the window length.

    Returns:
      ``(num_windows, ..., n)`` rate path.
    """
    base = _check_path_args(base_rate, num_windows, window)
    mult = jnp.asarray(multipliers, base.dtype)
    times = jnp.atleast_1d(jnp.asarray(switch_times, base.dtype))
    if is_concrete(mult, times):
        m, t = np.asarray(mult), np.asarray(times, np.float64)
        if m.shape[:1] != (t.shape[0] + 1,):
            raise ValueError(f"multipliers needs one entry per regime: {t.shape[0] + 1} for "
                             f"{t.shape[0]} switch_times, got shape {m.shape}")
        if np.any(~np.isfinite(m)) or np.any(m <= 0):
            raise ValueError("multipliers must be finite and > 0")
        if np.any(np.diff(t) <= 0):
            raise ValueError("switch_times must be strictly increasing")
        k = t / window
        if np.any(np.abs(k - np.round(k)) > 1e-6 * np.maximum(1.0, np.abs(k))):
            raise ValueError(f"switch_times must be multiples of window={window} (the rate is constant "
                             f"within a window); got {t}")
    starts = _window_starts(num_windows, window, base.dtype)
    # regime of window w: number of switches at or before its start (half a window of slack)
    regime = jnp.sum(starts[:, None] + 0.5 * window >= times[None, :], axis=-1)
    m = mult[regime]  # (W,) or (W, ..., n)
    if m.ndim == 1:
        m = m.reshape((num_windows,) + (1,) * base.ndim)
    return m * base[None]


def hot_then_cold(base_rate: ArrayLike, *, hot_days: float, hot_factor: float, cold_factor: float = 1.0,
                  start: ArrayLike = 0.0, num_windows: int, window: float = 1.0) -> jax.Array:
    r"""The news profile: ``hot_factor * base_rate`` during ``[start, start + hot_days)``,
    ``cold_factor * base_rate`` before and after.

    A window is hot when its midpoint lies in the hot period (so the hot period is
    rounded to whole windows); ``start`` is per page (``(..., n)``) or shared, so staggered
    publication times give a crawl load that stays level while each page goes cold.

    Returns:
      ``(num_windows, ..., n)`` rate path.
    """
    base = _check_path_args(base_rate, num_windows, window)
    if not (hot_days > 0 and hot_factor > 0 and cold_factor > 0):
        raise ValueError("need hot_days > 0, hot_factor > 0 and cold_factor > 0")
    st = jnp.broadcast_to(jnp.asarray(start, base.dtype), base.shape)
    mid = _window_starts(num_windows, window, base.dtype) + 0.5 * window
    mid = mid.reshape((num_windows,) + (1,) * base.ndim)
    hot = (mid >= st[None]) & (mid < st[None] + hot_days)
    return jnp.where(hot, hot_factor, cold_factor).astype(base.dtype) * base[None]


def lognormal_walk(key: jax.Array, base_rate: ArrayLike, *, volatility: float, num_windows: int,
                   window: float = 1.0) -> jax.Array:
    r"""A slow log-normal random walk of every page's rate, one step per window:
    :math:`\log\lambda_{w+1}=\log\lambda_w+\sigma\sqrt h\,\varepsilon_w-\sigma^2h/2`, with
    :math:`\lambda_0` the base rate and :math:`\sigma` = ``volatility`` per square-root
    time unit (0.1: a page's rate moves by about 10% in a day, 50% in a month).  The
    :math:`-\sigma^2h/2` drift makes :math:`\lambda_w` a martingale (:math:`E\lambda_w =
    \lambda_0`).

    Returns:
      ``(num_windows, ..., n)`` rate path.
    """
    base = _check_path_args(base_rate, num_windows, window)
    if not (math.isfinite(volatility) and volatility >= 0):
        raise ValueError(f"volatility must be finite and >= 0, got {volatility!r}")
    h = float(window)
    eps = jax.random.normal(key, (num_windows - 1,) + base.shape, base.dtype)
    steps = volatility * math.sqrt(h) * eps - 0.5 * volatility**2 * h
    log_path = jnp.concatenate([jnp.zeros((1,) + base.shape, base.dtype), jnp.cumsum(steps, axis=0)])
    return base[None] * jnp.exp(log_path)


class DriftTotals(NamedTuple):
    r"""Per-page sums over the windows of :func:`simulate_drift` (all ``(..., n)``).

    Attributes:
      harmonic: :math:`\int H(N(s))\,ds` (K19 eq. 1-2, unweighted), exact from the events.
      stale_time: :math:`\int 1\{N(s)>0\}\,ds`.
      crawls: number of crawls.
      changes: number of changes.
      overflow: windows in which the page overflowed a simulator capacity.
    """

    harmonic: jax.Array
    stale_time: jax.Array
    crawls: jax.Array
    changes: jax.Array
    overflow: jax.Array


def simulate_drift(key: jax.Array, problem: CrawlProblem, schedule: Schedule, state: SimState,
                   config: SimConfig, rates: ArrayLike) -> tuple[SimState, DriftTotals]:
    """Simulate ``schedule`` on drifting pages: window ``w`` runs with ``change_rate =
    rates[w]`` (one ``jax.lax.scan``; window ``w`` uses ``jax.random.split(key, W)[w]``).

    Args:
      key: PRNG key.
      problem: the pages (its ``change_rate`` is replaced window by window).
      schedule: the crawl :class:`~jaxcrawl.simulate.Schedule` (fixed over the run).
      state: initial :class:`~jaxcrawl.simulate.SimState`.
      config: static :class:`~jaxcrawl.simulate.SimConfig` sized for the path's peak rates:
        ``config_for(problem.replace(change_rate=rates.max(0)), schedule, window)``.
      rates: ``(num_windows, ..., n)`` rate path (:func:`regime_switch`,
        :func:`hot_then_cold`, :func:`lognormal_walk`, or any positive array).

    Returns:
      ``(final_state, DriftTotals)``.
    """
    rates = jnp.asarray(rates, problem.change_rate.dtype)
    if rates.ndim != problem.change_rate.ndim + 1 or rates.shape[1:] != problem.change_rate.shape:
        raise ValueError(f"rates must have shape (num_windows, *pages) = (W, {problem.change_rate.shape}); "
                         f"got {rates.shape}")
    num_windows = rates.shape[0]
    dtype = problem.change_rate.dtype
    shape = problem.change_rate.shape

    def body(carry, xs):
        st, tot = carry
        k, lam = xs
        st, win = simulate_window(k, st, problem.replace(change_rate=lam), schedule, config)
        tot = DriftTotals(tot.harmonic + win.harmonic, tot.stale_time + win.stale_time,
                          tot.crawls + win.num_crawls.astype(dtype), tot.changes + win.num_changes.astype(dtype),
                          tot.overflow + win.overflow.astype(jnp.int32))
        return (st, tot), None

    z = jnp.zeros(shape, dtype)
    zero = DriftTotals(z, z, z, z, jnp.zeros(shape, jnp.int32))
    (final, tot), _ = jax.lax.scan(body, (state, zero), (jax.random.split(key, num_windows), rates))
    return final, tot


# Gauss-Legendre nodes and weights on [0, 1] (8 points: exact for polynomials of degree 15)
_GL_X, _GL_W = np.polynomial.legendre.leggauss(8)
_GL_X = 0.5 * (_GL_X + 1.0)
_GL_W = 0.5 * _GL_W


def _piece_integrals(m0: jax.Array, lam: jax.Array, length: jax.Array) -> tuple[jax.Array, jax.Array]:
    r""":math:`\int_0^L \mathrm{Ein}(m_0+\lambda x)dx` and :math:`\int_0^L(1-e^{-(m_0+\lambda x)})dx`."""
    dtype = m0.dtype
    x = jnp.asarray(_GL_X, dtype)
    wts = jnp.asarray(_GL_W, dtype)
    m = m0[..., None] + (lam * length)[..., None] * x
    harm = length * jnp.sum(wts * ein(m), axis=-1)
    u = lam * length
    safe = jnp.where(u > 0, u, 1.0)
    phi = jnp.where(u > 1e-6, -jnp.expm1(-safe) / safe, 1.0 - 0.5 * u)  # (1 - e^{-u}) / u
    binary = length - jnp.exp(-m0) * length * phi
    return harm, binary


def periodic_drift_costs(rates: ArrayLike, window: float, period: ArrayLike, phase: ArrayLike = 0.0,
                         *, max_crawls_per_window: int | None = None) -> tuple[jax.Array, jax.Array]:
    r"""Exact expected :math:`\int H(N(s))ds` and :math:`\int 1\{N(s)>0\}ds` of every page
    over the rate path, for periodic crawling at ``phase + k * period``.

    The page starts at time 0 just crawled (no uncrawled change: the state of
    :func:`~jaxcrawl.simulate.init_state` with its defaults), and window ``w`` has change
    rate ``rates[w]``.  Between crawls the uncrawled changes are Poisson with mean
    :math:`m(s)`, the intensity accumulated since the last crawl, so the expected
    integrands are :math:`\mathrm{Ein}(m(s))` and :math:`1-e^{-m(s)}` (module docstring);
    they are integrated piece by piece (a piece: between two events among window
    boundaries and crawls, where :math:`m` is linear).

    Args:
      rates: ``(W, ..., n)`` rate path.
      window: window length.
      period: ``(..., n)`` crawl period (> 0; ``inf``: never crawled).
      phase: ``(..., n)`` time of one crawl.
      max_crawls_per_window: static bound on crawls of one page in one window (default:
        ``ceil(window / min period) + 1``, computed eagerly).

    Returns:
      ``(harmonic, stale_time)``, each ``(..., n)``: the expectations of
      :class:`DriftTotals` ``.harmonic`` and ``.stale_time``.
    """
    rates = jnp.asarray(rates)
    dtype = rates.dtype
    period = jnp.broadcast_to(jnp.asarray(period, dtype), rates.shape[1:])
    phase = jnp.broadcast_to(jnp.asarray(phase, dtype), rates.shape[1:])
    if max_crawls_per_window is None:
        if not is_concrete(period):
            raise ValueError("pass max_crawls_per_window inside jit")
        p = np.asarray(period, np.float64)
        if np.any(np.isnan(p)) or np.any(p <= 0):
            raise ValueError("period must be > 0 (inf: never crawled)")
        pmin = float(p.min())
        max_crawls_per_window = int(math.ceil(window / pmin)) + 1 if math.isfinite(pmin) else 1
    kmax = int(max_crawls_per_window)
    wd = jnp.asarray(window, dtype)
    per_ok = jnp.isfinite(period)
    per = jnp.where(per_ok, period, 1.0)
    j = jnp.arange(kmax, dtype=dtype)

    def body(carry, xs):
        m_start, harm, stale = carry
        w_idx, lam = xs
        t0 = w_idx * wd
        first = per - jnp.mod(t0 - phase, per)  # first crawl after t0, in (0, period]
        crawl = first[..., None] + j * per[..., None]  # (..., n, K) offsets in the window
        valid = per_ok[..., None] & (crawl <= wd)
        crawl = jnp.where(valid, crawl, wd)
        # pieces: [0, c_1], [c_1, c_2], ..., [c_K, w]; the first starts at m_start, the others at 0
        starts = jnp.concatenate([jnp.zeros_like(crawl[..., :1]), crawl], axis=-1)
        ends = jnp.concatenate([crawl, jnp.broadcast_to(wd, crawl[..., :1].shape)], axis=-1)
        length = jnp.maximum(ends - starts, 0.0)
        m0 = jnp.concatenate([m_start[..., None], jnp.zeros_like(crawl)], axis=-1)
        h, b = _piece_integrals(m0, lam[..., None], length)
        num = jnp.sum(valid, axis=-1)
        m_end = jnp.where(num > 0, lam * (wd - jnp.max(jnp.where(valid, crawl, 0.0), axis=-1)),
                          m_start + lam * wd)
        return (m_end, harm + jnp.sum(h, axis=-1), stale + jnp.sum(b, axis=-1)), None

    z = jnp.zeros(rates.shape[1:], dtype)
    (_, harm, stale), _ = jax.lax.scan(body, (z, z, z), (jnp.arange(rates.shape[0], dtype=dtype), rates))
    return harm, stale
