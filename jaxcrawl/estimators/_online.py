r"""Online change-rate estimators (Avrachenkov, Patil, Thoppe 2022, eq. 1-3).

:func:`lln` (eq. 1), :func:`sa` (eq. 2) and :func:`sam` (eq. 3, 10) return an
:class:`OnlineEstimator` ``(init, update)`` over a small NamedTuple state whose fields
broadcast over any leading axes, so ``jax.lax.scan`` runs one over a stream of
observations and ``jax.vmap`` (or plain broadcasting) over pages; :func:`run_online` is
that scan.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .._src.checks import is_concrete

#: A step-size schedule: a positive number (the paper's schedule) or a callable ``k -> value``.
StepSize = float | Callable[[jax.Array], jax.Array]


class OnlineEstimator(NamedTuple):
    """An online change-rate estimator (Avrachenkov et al. eq. 1-3) as a pair of pure functions.

    Attributes:
      init: ``init(crawl_rate, initial_rate=0.0) -> state``.  ``crawl_rate`` is the known
        Poisson crawl rate p of each page (any shape; the state takes that shape).
      update: ``update(state, changed, mask=None) -> state`` for one new observation per
        page; where ``mask`` is False the state is left unchanged.  ``state.rate`` is the
        current estimate.
    """

    init: Callable
    update: Callable


class LLNState(NamedTuple):
    """State of :func:`lln` (Avrachenkov et al. eq. 1): observations k, detected changes
    Î_k, crawl rate p, estimate x_k."""

    num_obs: jax.Array
    num_changes: jax.Array
    crawl_rate: jax.Array
    rate: jax.Array


class SAState(NamedTuple):
    """State of :func:`sa` (Avrachenkov et al. eq. 2): observations k, crawl rate p, estimate y_k."""

    num_obs: jax.Array
    crawl_rate: jax.Array
    rate: jax.Array


class SAMState(NamedTuple):
    """State of :func:`sam` (Avrachenkov et al. eq. 3): observations k, crawl rate p,
    estimates z_k and z_{k-1}."""

    num_obs: jax.Array
    crawl_rate: jax.Array
    rate: jax.Array
    prev_rate: jax.Array


def _as_schedule(value: StepSize, kind: str, name: str) -> Callable[[jax.Array], jax.Array]:
    """A float -> the papers' schedule; a callable k -> value is used as is."""
    if callable(value):
        return value
    v = float(value)
    if kind == "constant":
        if not v > 0:
            raise ValueError(f"{name} must be > 0 (a positive constant α_k); got {value!r}")
        return lambda k: jnp.full_like(k, v)
    if not v > 0:
        raise ValueError(f"{name} must be > 0 (the exponent of (k+1)^-{name}); got {value!r}")
    return lambda k: (k + 1) ** (-v)


def _online_init(crawl_rate: ArrayLike, initial_rate: ArrayLike) -> tuple[jax.Array, jax.Array]:
    p = jnp.asarray(crawl_rate)
    if not jnp.issubdtype(p.dtype, jnp.floating):
        p = p.astype(jnp.result_type(float))
    if is_concrete(p):
        pa = np.asarray(p)
        if not (np.all(np.isfinite(pa)) and np.all(pa > 0)):
            raise ValueError(f"crawl_rate must be finite and > 0; got {crawl_rate!r}")
    x0 = jnp.broadcast_to(jnp.asarray(initial_rate, p.dtype), p.shape)
    if is_concrete(x0) and not np.all(np.isfinite(np.asarray(x0))):
        raise ValueError(f"initial_rate must be finite; got {initial_rate!r}")
    return p, x0


def _obs(changed: ArrayLike, mask: ArrayLike | None, dtype: Any,
         shape: tuple[int, ...]) -> tuple[jax.Array, jax.Array]:
    i = jnp.broadcast_to(jnp.asarray(changed) != 0, shape).astype(dtype)
    m = jnp.ones(shape, bool) if mask is None else jnp.broadcast_to(jnp.asarray(mask), shape).astype(bool)
    return i, m


def lln(alpha: StepSize = 1.0) -> OnlineEstimator:
    r"""Law-of-large-numbers estimator (Avrachenkov et al. eq. 1).

    .. math:: x_k = \frac{p\,\hat I_k}{k + \alpha_k - \hat I_k},\qquad \hat I_k = \sum_{j\le k} I_j

    From :math:`E[I] = \Delta/(\Delta+p)` for crawls at Poisson rate p (their eq. 4-6); the
    :math:`\alpha_k > 0` term removes the blow-up when every crawl saw a change.  Consistent
    when :math:`\alpha_k/k\to0`, with :math:`E|x_k-\Delta| = O(\max(k^{-1/2}, \alpha_k/k))`
    (Theorem 1).  Before any observation the estimate is ``initial_rate``.

    Args:
      alpha: :math:`\alpha_k`: a positive constant (default 1, the paper's experiments) or
        a callable ``k -> α_k`` with k >= 1 a float array (e.g. ``jnp.sqrt``, or
        ``lambda k: 1 + jnp.log(k)`` -- ``jnp.log`` itself is 0 at k = 1).  The values must
        be positive; if ``k + α_k - Î_k <= 0`` anyway, the estimate is left unchanged.

    Returns:
      :class:`OnlineEstimator` over :class:`LLNState`.
    """
    alpha_fn = _as_schedule(alpha, "constant", "alpha")

    def init(crawl_rate: ArrayLike, initial_rate: ArrayLike = 0.0) -> LLNState:
        p, x0 = _online_init(crawl_rate, initial_rate)
        zero = jnp.zeros(p.shape, p.dtype)
        return LLNState(zero, zero, p, x0)

    def update(state: LLNState, changed: ArrayLike, mask: ArrayLike | None = None) -> LLNState:
        dtype = state.rate.dtype
        i, m = _obs(changed, mask, dtype, state.rate.shape)
        k = state.num_obs + 1
        ihat = state.num_changes + i
        den = k + alpha_fn(k) - ihat
        ok = den > 0  # guard: only a non-positive α_k can make it <= 0
        x = state.crawl_rate * ihat / jnp.where(ok, den, 1)
        return LLNState(
            jnp.where(m, k, state.num_obs),
            jnp.where(m, ihat, state.num_changes),
            state.crawl_rate,
            jnp.where(m & ok, x, state.rate),
        )

    return OnlineEstimator(init, update)


# --------------------------------------------- LLN with the rate that generated each count
class LLNRateWeightedState(NamedTuple):
    r"""State of :func:`lln_rate_weighted`: observations k, detected changes Î_k, the
    rate-weighted count :math:`\sum_j p_j I_j`, the current crawl rate p, estimate x_k."""

    num_obs: jax.Array
    num_changes: jax.Array
    weighted_changes: jax.Array
    crawl_rate: jax.Array
    rate: jax.Array


def lln_rate_weighted(alpha: StepSize = 1.0) -> OnlineEstimator:
    r"""LLN (Avrachenkov et al. eq. 1) for counts generated by *changing* crawl rates.

    .. math:: x_k = \frac{\sum_{j\le k} p_j I_j}{k + \alpha_k - \hat I_k}

    where :math:`p_j` is the crawl rate in force when observation j was made.  Eq. 1 is
    derived (their eq. 4-6) from :math:`E[I] = \Delta/(\Delta+p)`, i.e.
    :math:`E[p I - \Delta (1 - I)] = 0`, for *one* rate p; written per observation, the
    same identity holds whatever rate produced each observation, so
    :math:`\sum_j p_j I_j / \sum_j (1 - I_j)` is consistent when the rate changes between
    phases (Avrachenkov et al. §5's re-solving loop), and equals eq. 1 exactly while the
    rate never changes.  :func:`lln` instead multiplies the pooled counts by the *current*
    rate.  Set ``state.crawl_rate`` (``state._replace(crawl_rate=p)``) whenever the crawl
    rate changes; each observation is weighted by the rate in the state when it arrives.

    Args:
      alpha: :math:`\alpha_k`, as in :func:`lln`.

    Returns:
      :class:`OnlineEstimator` over :class:`LLNRateWeightedState`.
    """
    alpha_fn = _as_schedule(alpha, "constant", "alpha")

    def init(crawl_rate: ArrayLike, initial_rate: ArrayLike = 0.0) -> LLNRateWeightedState:
        p, x0 = _online_init(crawl_rate, initial_rate)
        zero = jnp.zeros(p.shape, p.dtype)
        return LLNRateWeightedState(zero, zero, zero, p, x0)

    def update(state: LLNRateWeightedState, changed: ArrayLike,
               mask: ArrayLike | None = None) -> LLNRateWeightedState:
        dtype = state.rate.dtype
        i, m = _obs(changed, mask, dtype, state.rate.shape)
        k = state.num_obs + 1
        ihat = state.num_changes + i
        weighted = state.weighted_changes + state.crawl_rate * i
        den = k + alpha_fn(k) - ihat
        ok = den > 0  # guard: only a non-positive α_k can make it <= 0
        x = weighted / jnp.where(ok, den, 1)
        return LLNRateWeightedState(
            jnp.where(m, k, state.num_obs),
            jnp.where(m, ihat, state.num_changes),
            jnp.where(m, weighted, state.weighted_changes),
            state.crawl_rate,
            jnp.where(m & ok, x, state.rate),
        )

    return OnlineEstimator(init, update)


def sa(eta: StepSize = 0.75) -> OnlineEstimator:
    r"""Stochastic-approximation estimator (Avrachenkov et al. eq. 2).

    .. math:: y_{k+1} = y_k + \eta_k\,[I_{k+1}(y_k + p) - y_k],\qquad \eta_k = (k+1)^{-\eta}

    Converges for :math:`\eta\in(0,1]` with :math:`E|y_k-\Delta| = O(k^{-\eta/2})`
    (Theorem 2).  Default η = 0.75 (their §4.2.1 experiment; §4.2.2 uses 0.8).

    Args:
      eta: exponent η of :math:`\eta_k = (k+1)^{-\eta}`, or a callable ``k -> η_k``
        (k >= 0, float array).

    Returns:
      :class:`OnlineEstimator` over :class:`SAState`; ``initial_rate`` is :math:`y_0`.
    """
    eta_fn = _as_schedule(eta, "power", "eta")

    def init(crawl_rate: ArrayLike, initial_rate: ArrayLike = 0.0) -> SAState:
        p, y0 = _online_init(crawl_rate, initial_rate)
        return SAState(jnp.zeros(p.shape, p.dtype), p, y0)

    def update(state: SAState, changed: ArrayLike, mask: ArrayLike | None = None) -> SAState:
        dtype = state.rate.dtype
        i, m = _obs(changed, mask, dtype, state.rate.shape)
        k = state.num_obs
        y = state.rate
        y_new = y + eta_fn(k) * (i * (y + state.crawl_rate) - y)
        return SAState(jnp.where(m, k + 1, k), state.crawl_rate, jnp.where(m, y_new, y))

    return OnlineEstimator(init, update)


def sam(eta: StepSize = 1.3, beta: StepSize = 0.75, omega: float = 1.0) -> OnlineEstimator:
    r"""Stochastic approximation with heavy-ball momentum (Avrachenkov et al. eq. 3, 10).

    .. math:: z_{k+1} = z_k + \eta_k[I_{k+1}(z_k+p) - z_k] + \zeta_k (z_k - z_{k-1}),
              \qquad \zeta_k = \frac{\beta_k - \omega\eta_k}{\beta_{k-1}},

    with :math:`\eta_k = (k+1)^{-\eta}`, :math:`\beta_k = (k+1)^{-\beta}` and
    :math:`z_{-1} = z_0`; :math:`\zeta_0 = 0` (:math:`\beta_{-1} = \infty`).  Defaults
    η = 1.3, β = 0.75, ω = 1 (their §4.2.1 experiment); §4.2.2 (Δ = 500) uses η = 0.8,
    β = 0.5.  Theorem 3 proves convergence for β ∈ (1/2, 1] with η = 2β or
    1/2 + β < η < 2β.

    Args:
      eta: exponent η of :math:`\eta_k`, or a callable ``k -> η_k`` (k >= 0).
      beta: exponent β of :math:`\beta_k`, or a callable ``k -> β_k`` (called with k and
        k - 1; ζ_0 is forced to 0).
      omega: ω > 0.

    Returns:
      :class:`OnlineEstimator` over :class:`SAMState`; ``initial_rate`` is :math:`z_0`.
    """
    eta_fn = _as_schedule(eta, "power", "eta")
    beta_fn = _as_schedule(beta, "power", "beta")
    if not float(omega) > 0:
        raise ValueError(f"omega must be > 0; got {omega!r}")
    omega = float(omega)

    def init(crawl_rate: ArrayLike, initial_rate: ArrayLike = 0.0) -> SAMState:
        p, z0 = _online_init(crawl_rate, initial_rate)
        return SAMState(jnp.zeros(p.shape, p.dtype), p, z0, z0)

    def update(state: SAMState, changed: ArrayLike, mask: ArrayLike | None = None) -> SAMState:
        dtype = state.rate.dtype
        i, m = _obs(changed, mask, dtype, state.rate.shape)
        k = state.num_obs
        z, z_prev = state.rate, state.prev_rate
        eta_k = eta_fn(k)
        first = k == 0
        beta_prev = beta_fn(jnp.where(first, jnp.ones_like(k), k - 1))
        zeta = jnp.where(first, 0, (beta_fn(k) - omega * eta_k) / beta_prev)
        z_new = z + eta_k * (i * (z + state.crawl_rate) - z) + zeta * (z - z_prev)
        return SAMState(
            jnp.where(m, k + 1, k),
            state.crawl_rate,
            jnp.where(m, z_new, z),
            jnp.where(m, z, z_prev),
        )

    return OnlineEstimator(init, update)


def run_online(estimator: OnlineEstimator, changed: ArrayLike, crawl_rate: ArrayLike,
               mask: ArrayLike | None = None, *,
               initial_rate: ArrayLike = 0.0) -> tuple[Any, jax.Array]:
    """Run an online estimator (Avrachenkov et al. eq. 1-3) over a stream with ``jax.lax.scan``.

    Args:
      estimator: an :class:`OnlineEstimator` (:func:`lln`, :func:`sa`, :func:`sam`).
      changed: ``(..., k)`` 0/1 observations, the stream on the last axis.
      crawl_rate: ``(...)`` (or scalar) known crawl rates p.
      mask: optional ``(..., k)`` bool; masked steps leave the state unchanged.
      initial_rate: the estimate before any observation.

    Returns:
      ``(final_state, rates)`` with ``rates[..., j]`` the estimate after observation j.
    """
    changed = jnp.asarray(changed)
    if changed.ndim == 0:
        raise ValueError("changed must have at least one axis (the stream)")
    batch = changed.shape[:-1]
    p = jnp.asarray(crawl_rate)
    if not jnp.issubdtype(p.dtype, jnp.floating):
        p = p.astype(jnp.result_type(float))
    p = jnp.broadcast_to(p, jnp.broadcast_shapes(batch, p.shape))
    state = estimator.init(p, initial_rate)
    xs = jnp.moveaxis(changed, -1, 0)
    ms = None if mask is None else jnp.moveaxis(jnp.broadcast_to(jnp.asarray(mask), changed.shape), -1, 0)

    def step(s, obs):
        i, mk = obs
        s = estimator.update(s, i, mk)
        return s, s.rate

    if ms is None:
        state, rates = jax.lax.scan(lambda s, i: step(s, (i, None)), state, xs)
    else:
        state, rates = jax.lax.scan(step, state, (xs, ms))
    return state, jnp.moveaxis(rates, 0, -1)
