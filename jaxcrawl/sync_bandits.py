r"""Synchronization bandits: cost-generating processes, exact policy costs, the optimum.

Kolobov, Bubeck & Zimmert, *Online Learning for Active Cache Synchronization*, ICML 2020
("ICML-20").  Every arm (cached item) ``k`` incurs an instantaneous cost :math:`c_k(\tau)`
that depends on the time :math:`\tau` since the arm was last played in *sync* mode; the
agent observes a cost only when it plays the arm (sync or probe).

* A family of cost processes is any pytree implementing :class:`CostProcess`
  (``mean_cumulative_cost``, ``sample_path``, ``cost``; optionally the closed forms
  ``arm_cost``, ``marginal_value`` and ``kkt_rate``).  Two ship: polynomial costs
  (:func:`polynomial_costs`, App. B) and binary-Poisson costs (:func:`binary_poisson_costs`,
  App. C).
* :func:`policy_cost` is :math:`J(r) = \frac1K\sum_k r_k \bar C_k(1/r_k)` (Lemma 1, eq. 7).
* :func:`optimal_policy` solves Problem 1 (eq. 8) with :func:`jaxcrawl.allocate`.
* :func:`interval_gradient_estimate` averages the unbiased estimator of Lemma 2 over sync
  intervals (the learners' gradient: :func:`jaxcrawl.learners.mirror_sync`).
* :func:`polynomial_bandit` and :func:`binary_poisson_bandit` draw instances with the
  paper's Table 1 / Table 2 defaults (:data:`TABLE1`, :data:`TABLE2`).
"""
from __future__ import annotations

from typing import Any, NamedTuple, Protocol, runtime_checkable

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxcrawl._src.checks import is_concrete
from jaxcrawl._src.rootfind import solve_monotone
from jaxcrawl._src.special import gamma2_cdf, phi1
from jaxcrawl.core.solve import Allocation, allocate

__all__ = [
    "CostProcess",
    "polynomial_costs",
    "binary_poisson_costs",
    "SyncBandit",
    "make_sync_bandit",
    "polynomial_bandit",
    "binary_poisson_bandit",
    "TABLE1",
    "TABLE2",
    "policy_cost",
    "optimal_policy",
    "interval_gradient_estimate",
]

# ICML-20 App. B, Table 1 (polynomial costs, Figures 1-2) and App. C, Table 2
# (binary-Poisson costs, Figures 3-4), with the hyperparameters chosen there.
TABLE1 = dict(
    num_arms=100, budget_fraction=0.4, min_rate=0.025, max_rate=3.0, noise=0.1, scaling=5.0,
    exploration=0.05, horizon_rounds=240, num_instances=150,
    mirror_sync=dict(learning_rate=2.7),
    async_mirror_sync=dict(learning_rate=1.6, update_interval=20.0),
    async_psgd_sync=dict(learning_rate=0.08, update_interval=20.0),
)
TABLE2 = dict(
    num_arms=100, budget_fraction=0.4, min_rate=0.025, max_rate=6.0,
    change_rate_range=(0.005, 5.0), exploration=0.05, horizon_rounds=240, num_instances=150,
    mirror_sync=dict(learning_rate=5.0),
    async_mirror_sync=dict(learning_rate=1.3, update_interval=8.0),
    async_psgd_sync=dict(learning_rate=0.5, update_interval=40.0),
)


# --------------------------------------------------------------------------- protocol
@runtime_checkable
class CostProcess(Protocol):
    r"""The protocol a family of cost-generating processes implements (ICML-20 §2).

    A family is a pytree (e.g. a ``NamedTuple`` of per-arm arrays) describing the K arms'
    processes :math:`c_k(\tau)`.  All methods act elementwise over the arms and must be
    jit/vmap-safe.  See :class:`_PolynomialCosts` for a complete example.
    """

    def mean_cumulative_cost(self, tau):
        r""":math:`\bar C_k(\tau) = \int_0^\tau E[c_k(t)]\,dt` (ICML-20 eq. 3), per arm."""
        ...

    def sample_path(self, key):
        """Per-arm random latents of one inter-sync interval (a pytree shaped like the arms)."""
        ...

    def cost(self, path, tau):
        r"""Instantaneous cost :math:`c_k(\tau)` on ``path``, nondecreasing in ``tau``."""
        ...


def _pos(x):
    return jnp.where(x > 0, x, 1.0)


# ------------------------------------------------------------------ polynomial family
class _PolynomialCosts(NamedTuple):
    r"""Polynomial cost processes :math:`c_k(\tau) = a_k \tau^{p_k}` (ICML-20 §8, App. B).

    At every sync play a fresh multiplier :math:`a_k \sim U[\bar a_k(1-\delta),
    \bar a_k(1+\delta)]` is drawn and held until the next sync play, so
    :math:`\bar c_k(\tau) = \bar a_k\tau^{p_k}`, :math:`\bar C_k(\tau) = \bar a_k
    \tau^{p_k+1}/(p_k+1)`, :math:`J_k(r) = \bar a_k r^{-p_k}/(p_k+1)`.  (The paper notes
    these costs are effectively capped at U = 40 inside its rate box; no cap is applied.)

    Attributes:
      scale: ``(K,)`` mean multipliers :math:`\bar a_k \ge 0`.
      exponent: ``(K,)`` exponents :math:`p_k \ge 0`.
      noise: relative noise :math:`\delta \in [0, 1]` (scalar or ``(K,)``).
    """

    scale: jax.Array
    exponent: jax.Array
    noise: jax.Array

    def mean_cumulative_cost(self, tau):
        r""":math:`\bar C_k(\tau) = \bar a_k \tau^{p_k+1}/(p_k+1)` (ICML-20 eq. 3)."""
        p = self.exponent
        return self.scale * jnp.power(tau, p + 1.0) / (p + 1.0)

    def mean_cost(self, tau):
        r""":math:`\bar c_k(\tau) = \bar a_k \tau^{p_k}`."""
        return self.scale * jnp.power(tau, self.exponent)

    def arm_cost(self, rate):
        r""":math:`J_k(r) = r\bar C_k(1/r) = \bar a_k r^{-p_k}/(p_k+1)` (Lemma 1)."""
        p = self.exponent
        return self.scale * jnp.power(rate, -p) / (p + 1.0)

    def marginal_value(self, rate):
        r""":math:`-J_k'(r) = \bar a_k p_k r^{-p_k-1}/(p_k+1)` (Lemma 1 proof)."""
        p = self.exponent
        return self.scale * p * jnp.power(rate, -p - 1.0) / (p + 1.0)

    def kkt_rate(self, target, lower, upper):
        r"""Closed-form inverse of the marginal value: :math:`r = (\bar a p/((p+1)y))^{1/(p+1)}`.

        Returns the rate with ``marginal_value(rate) == target`` clipped to
        ``[lower, upper]``; ``+inf`` before clipping when ``target <= 0``.
        """
        p = self.exponent
        c = self.scale * p / (p + 1.0)
        ok = (c > 0) & (target > 0)
        log_r = (jnp.log(_pos(c)) - jnp.log(_pos(target))) / (p + 1.0)
        r = jnp.where(ok, jnp.exp(jnp.where(ok, log_r, 0.0)),
                      jnp.where(target > 0, 0.0, jnp.inf))
        return jnp.clip(r, lower, upper)

    def sample_path(self, key):
        """The multiplier :math:`a_k` of one inter-sync interval (App. B)."""
        shape = jnp.broadcast_shapes(jnp.shape(self.scale), jnp.shape(self.exponent),
                                     jnp.shape(self.noise))
        dtype = jnp.result_type(self.scale)
        u = jax.random.uniform(key, shape, dtype, minval=-1.0, maxval=1.0)
        return self.scale * (1.0 + self.noise * u)

    def cost(self, path, tau):
        r""":math:`c_k(\tau) = a_k\tau^{p_k}` on the sampled multiplier (0 at :math:`\tau=0`)."""
        tpos = tau > 0
        return jnp.where(tpos, path * jnp.power(jnp.where(tpos, tau, 1.0), self.exponent), 0.0)


# --------------------------------------------------------------- binary-Poisson family
class _BinaryPoissonCosts(NamedTuple):
    r"""Binary-Poisson cost processes (ICML-20 App. C): importance × 1{at least one change}.

    Arm k's content changes as a Poisson process of rate :math:`\lambda_k`; its cost is
    :math:`c_k(\tau) = w_k\,\mathbb 1\{N_k(\tau)\ge 1\}`.  Hence
    :math:`\bar c_k(\tau) = w_k(1-e^{-\lambda_k\tau})`,
    :math:`\bar C_k(\tau) = w_k(\tau - (1-e^{-\lambda_k\tau})/\lambda_k)` and, with
    :math:`x = \lambda_k/r`, :math:`J_k(r) = w_k(1 - (1-e^{-x})/x)` (the complement of the
    uniform-interval freshness of Learning to Crawl App. H) and
    :math:`-J_k'(r) = (w_k/\lambda_k)(1-(1+x)e^{-x})`.

    Attributes:
      importance: ``(K,)`` weights :math:`w_k \ge 0` (1 in the paper).
      change_rate: ``(K,)`` Poisson change rates :math:`\lambda_k > 0`.
    """

    importance: jax.Array
    change_rate: jax.Array

    def mean_cumulative_cost(self, tau):
        r""":math:`\bar C_k(\tau) = w_k\tau\,(1 - (1-e^{-\lambda_k\tau})/(\lambda_k\tau))`."""
        return self.importance * tau * phi1(self.change_rate * tau)

    def mean_cost(self, tau):
        r""":math:`\bar c_k(\tau) = w_k(1 - e^{-\lambda_k\tau})`."""
        return -self.importance * jnp.expm1(-self.change_rate * tau)

    def arm_cost(self, rate):
        r""":math:`J_k(r) = w_k(1 - (1-e^{-x})/x)`, :math:`x=\lambda_k/r` (Lemma 1, stable)."""
        return self.importance * phi1(self.change_rate / rate)

    def marginal_value(self, rate):
        r""":math:`-J_k'(r) = (w_k/\lambda_k)(1-(1+x)e^{-x})`, :math:`x=\lambda_k/r` (stable)."""
        lam = self.change_rate
        return self.importance / lam * gamma2_cdf(lam / rate)

    def sample_path(self, key):
        r"""Time of the first change after the sync play, :math:`E_k\sim\mathrm{Exp}(\lambda_k)`."""
        shape = jnp.broadcast_shapes(jnp.shape(self.importance), jnp.shape(self.change_rate))
        dtype = jnp.result_type(self.change_rate)
        return jax.random.exponential(key, shape, dtype) / self.change_rate

    def cost(self, path, tau):
        r""":math:`c_k(\tau) = w_k\mathbb 1\{E_k \le \tau\}` (at least one change by ``tau``)."""
        return jnp.where(path <= tau, self.importance, jnp.zeros_like(self.importance))


# ------------------------------------------------------------------- constructors
def _float_leaf(x, name, dtype=None):
    if isinstance(x, jax.core.Tracer):
        return x
    arr = jnp.asarray(x, dtype=dtype)
    if not jnp.issubdtype(arr.dtype, jnp.floating):
        arr = arr.astype(jnp.result_type(float) if dtype is None else dtype)
    return arr


def polynomial_costs(scale: ArrayLike, exponent: ArrayLike, noise: ArrayLike = 0.1) -> _PolynomialCosts:
    r"""Polynomial cost processes :math:`c_k(\tau) = a_k \tau^{p_k}` (ICML-20 §8, App. B).

    At every sync play a multiplier :math:`a_k \sim U[\bar a_k(1-\delta), \bar a_k(1+\delta)]`
    is drawn and held until the next one, so :math:`J_k(r) = \bar a_k r^{-p_k}/(p_k+1)`.
    ``scale`` is :math:`\bar a_k \ge 0`, ``exponent`` :math:`p_k \ge 0`, ``noise``
    :math:`\delta \in [0, 1]` (scalars or ``(K,)``).

    Raises:
      ValueError: (for concrete inputs) if ``scale < 0``, ``exponent < 0``, ``noise`` is
        outside ``[0, 1]``, any value is not finite, or the shapes do not broadcast.
    """
    scale = _float_leaf(scale, "scale")
    exponent = _float_leaf(exponent, "exponent", getattr(scale, "dtype", None))
    noise = _float_leaf(noise, "noise", getattr(scale, "dtype", None))
    if is_concrete(scale, exponent, noise):
        s, p, d = (np.asarray(v) for v in (scale, exponent, noise))
        try:
            np.broadcast_shapes(s.shape, p.shape, d.shape)
        except ValueError:
            raise ValueError(f"scale {s.shape}, exponent {p.shape} and noise {d.shape} "
                             "must broadcast to the arms' shape") from None
        for v, nm in ((s, "scale"), (p, "exponent"), (d, "noise")):
            if not np.all(np.isfinite(v)):
                raise ValueError(f"{nm} must be finite")
        if np.any(s < 0):
            raise ValueError("scale (mean multiplier a_k) must be >= 0 for every arm")
        if np.any(p < 0):
            raise ValueError("exponent p_k must be >= 0 (costs must not decrease, Assumption 3)")
        if np.any((d < 0) | (d > 1)):
            raise ValueError("noise must lie in [0, 1] (ICML-20 App. B)")
    return _PolynomialCosts(scale, exponent, noise)


def binary_poisson_costs(change_rate: ArrayLike, importance: ArrayLike = 1.0) -> _BinaryPoissonCosts:
    r"""Binary-Poisson cost processes (ICML-20 App. C): :math:`c_k(\tau) = w_k\,\mathbb 1\{N_k(\tau)\ge 1\}`
    for arms changing as Poisson processes of rates :math:`\lambda_k > 0`, so
    :math:`J_k(r) = w_k(1 - (1-e^{-x})/x)` with :math:`x = \lambda_k/r`; ``importance``
    :math:`w_k \ge 0` is broadcast to the arms.

    Raises:
      ValueError: (for concrete inputs) if a change rate is not finite and > 0 or an
        importance is not finite and >= 0.
    """
    change_rate = _float_leaf(change_rate, "change_rate")
    importance = _float_leaf(importance, "importance", getattr(change_rate, "dtype", None))
    if is_concrete(change_rate, importance):
        lam, w = np.asarray(change_rate), np.asarray(importance)
        if not np.all(np.isfinite(lam)) or np.any(lam <= 0):
            raise ValueError("change_rate must be finite and > 0 for every arm")
        if not np.all(np.isfinite(w)) or np.any(w < 0):
            raise ValueError("importance must be finite and >= 0 for every arm")
        importance = jnp.broadcast_to(importance, jnp.broadcast_shapes(lam.shape, w.shape))
    return _BinaryPoissonCosts(importance, change_rate)


class SyncBandit(NamedTuple):
    r"""A synchronization-bandit instance: Problem 1 of ICML-20 (eq. 8).

    Attributes:
      costs: the arms' cost-generating processes (a :class:`CostProcess` pytree).
      budget: total sync rate B (the constraint :math:`\|r\|_1 = B`).
      min_rate: :math:`r_{min}` (scalar).
      max_rate: :math:`r_{max}` (scalar).

    All leaves may carry leading batch axes (use ``jax.vmap``, e.g. over the generators).
    """

    costs: Any
    budget: jax.Array
    min_rate: jax.Array
    max_rate: jax.Array

    @property
    def num_arms(self) -> int:
        """Number of arms K (static, from the shape of the cost family)."""
        return _num_arms(self.costs)


def _num_arms(costs: Any) -> int:
    """Number of arms K of a cost family (static: read from the shape of ``mean_cumulative_cost``)."""
    shape = jax.eval_shape(lambda c: c.mean_cumulative_cost(jnp.ones((), jnp.float32)), costs).shape
    if len(shape) == 0:
        raise ValueError("a cost family needs at least one per-arm leaf of shape (K,)")
    return int(shape[-1])


def make_sync_bandit(costs: Any, budget: ArrayLike, min_rate: ArrayLike, max_rate: ArrayLike) -> SyncBandit:
    """Validated :class:`SyncBandit` (ICML-20 Problem 1).

    Raises:
      ValueError: (for concrete inputs) unless ``0 < min_rate <= max_rate`` and
        ``K*min_rate <= budget <= K*max_rate``.
    """
    if not isinstance(costs, CostProcess):
        raise TypeError("costs must implement mean_cumulative_cost, sample_path and cost "
                        "(the jaxcrawl.sync_bandits.CostProcess protocol)")
    dtype = jnp.result_type(*[l for l in jax.tree_util.tree_leaves(costs)][:1] or [float])
    budget, min_rate, max_rate = (_float_leaf(v, n, dtype) for v, n in
                                  ((budget, "budget"), (min_rate, "min_rate"), (max_rate, "max_rate")))
    if is_concrete(budget, min_rate, max_rate):
        k = _num_arms(costs)
        b, lo, hi = float(budget), float(min_rate), float(max_rate)
        if not (np.isfinite(lo) and np.isfinite(hi) and 0 < lo <= hi):
            raise ValueError(f"need 0 < min_rate <= max_rate < inf; got min_rate={lo}, max_rate={hi}")
        if not (k * lo * (1 - 1e-12) <= b <= k * hi * (1 + 1e-12)):
            raise ValueError(f"budget {b} is infeasible: it must lie in [K*min_rate, K*max_rate] = "
                             f"[{k * lo}, {k * hi}]")
    return SyncBandit(costs, budget, min_rate, max_rate)


def _check_generator_args(num_arms_, budget_fraction, min_rate, max_rate):
    if int(num_arms_) != num_arms_ or num_arms_ < 1:
        raise ValueError(f"num_arms must be a positive integer; got {num_arms_}")
    if not (0 < min_rate <= max_rate):
        raise ValueError(f"need 0 < min_rate <= max_rate; got {min_rate}, {max_rate}")
    if not (min_rate <= budget_fraction <= max_rate):
        raise ValueError(f"budget_fraction {budget_fraction} must lie in [min_rate, max_rate] "
                         f"= [{min_rate}, {max_rate}] (budget = budget_fraction * num_arms)")


def polynomial_bandit(key: jax.Array, num_arms: int = 100, *, budget_fraction: float = 0.4,
                      min_rate: float = 0.025, max_rate: float = 3.0, noise: float = 0.1,
                      scaling: float = 5.0, dtype: Any = None) -> SyncBandit:
    r"""A random polynomial-cost instance with ICML-20 Table 1 defaults (App. B).

    :math:`\bar a_k \sim U[0,1]`, :math:`p_k = \sigma(\text{scaling}\cdot U[0,1])`,
    noise 0.1, K = 100, B = 0.4K, :math:`r_{min}=0.025`, :math:`r_{max}=3`.
    ``jax.vmap`` over keys gives many instances.
    """
    _check_generator_args(num_arms, budget_fraction, min_rate, max_rate)
    if not 0 <= noise <= 1:
        raise ValueError(f"noise must lie in [0, 1]; got {noise}")
    dtype = dtype or jnp.result_type(float)
    key_scale, key_exp = jax.random.split(key)
    scale = jax.random.uniform(key_scale, (num_arms,), dtype)
    exponent = jax.nn.sigmoid(scaling * jax.random.uniform(key_exp, (num_arms,), dtype))
    costs = _PolynomialCosts(scale, exponent, jnp.full((num_arms,), noise, dtype))
    return SyncBandit(costs, jnp.asarray(budget_fraction * num_arms, dtype),
                      jnp.asarray(min_rate, dtype), jnp.asarray(max_rate, dtype))


def binary_poisson_bandit(key: jax.Array, num_arms: int = 100, *, budget_fraction: float = 0.4,
                          min_rate: float = 0.025, max_rate: float = 6.0,
                          change_rate_range: tuple[float, float] = (0.005, 5.0), importance: float = 1.0,
                          dtype: Any = None) -> SyncBandit:
    r"""A random binary-Poisson instance with ICML-20 Table 2 defaults (App. C).

    :math:`\lambda_k \sim U[0.005, 5]`, importance 1, K = 100, B = 0.4K,
    :math:`r_{min}=0.025`, :math:`r_{max}=6`.
    """
    _check_generator_args(num_arms, budget_fraction, min_rate, max_rate)
    lo, hi = change_rate_range
    if not 0 < lo <= hi:
        raise ValueError(f"change_rate_range must satisfy 0 < lo <= hi; got {change_rate_range}")
    if not importance >= 0:
        raise ValueError(f"importance must be >= 0; got {importance}")
    dtype = dtype or jnp.result_type(float)
    lam = jax.random.uniform(key, (num_arms,), dtype, minval=lo, maxval=hi)
    costs = _BinaryPoissonCosts(jnp.full((num_arms,), importance, dtype), lam)
    return SyncBandit(costs, jnp.asarray(budget_fraction * num_arms, dtype),
                      jnp.asarray(min_rate, dtype), jnp.asarray(max_rate, dtype))


# ----------------------------------------------------------------- policy cost (Lemma 1)
def _arm_costs(costs: Any, rate: ArrayLike) -> jax.Array:
    r"""Per-arm costs :math:`J_k(r_k) = r_k\bar C_k(1/r_k)` (ICML-20 Lemma 1, eq. 7).

    Uses the family's ``arm_cost`` closed form when it has one.
    """
    fn = getattr(costs, "arm_cost", None)
    if fn is not None:
        return fn(rate)
    return rate * costs.mean_cumulative_cost(1.0 / rate)


def policy_cost(costs: Any, rate: ArrayLike) -> jax.Array:
    r"""Policy cost :math:`J(r) = \frac1K\sum_k r_k \bar C_k(1/r_k)` (ICML-20 Lemma 1, eq. 7).

    Convex and decreasing in each rate; differentiable (``jax.grad``).  Reduces over the
    last axis.

    Raises:
      ValueError: (for concrete inputs) if a rate is not finite and > 0.
    """
    if is_concrete(rate):
        r = np.asarray(rate)
        if not np.all(np.isfinite(r)) or np.any(r <= 0):
            raise ValueError("rate must be finite and > 0 for every arm")
    return jnp.mean(_arm_costs(costs, rate), axis=-1)


def _marginal_values(costs: Any, rate: ArrayLike) -> jax.Array:
    r"""Per-arm marginal values :math:`-J_k'(r_k) = \frac1{r_k}\bar c_k(\frac1{r_k}) - \bar
    C_k(\frac1{r_k}) \ge 0` (ICML-20 Lemma 1 proof), so :math:`\partial J/\partial r_k =
    -\text{marginal}_k/K`.

    Uses the family's ``marginal_value`` closed form when it has one, else forward-mode
    autodiff of :func:`_arm_costs` (elementwise).
    """
    fn = getattr(costs, "marginal_value", None)
    if fn is not None:
        return fn(rate)
    rate = jnp.asarray(rate)
    _, d = jax.jvp(lambda r: _arm_costs(costs, r), (rate,), (jnp.ones_like(rate),))
    return -d


def _log_marginal_gap(rate, params):
    r""":math:`\log m_k(r) - \log y_k`, nonincreasing in r (``-inf`` where :math:`m_k(r) = 0`,
    ``+inf`` where :math:`y_k \le 0`: every rate is then too small)."""
    costs, target = params
    m = _marginal_values(costs, rate)
    pos = m > 0
    ypos = target > 0
    gap = jnp.log(jnp.where(pos, m, 1.0)) - jnp.log(jnp.where(ypos, target, 1.0))
    return jnp.where(ypos, jnp.where(pos, gap, -jnp.inf), jnp.inf)


def _invert_marginal(costs, target, lower, upper):
    r"""Per-arm root of :math:`\log m_k(r) = \log y_k` on ``[lower, upper]`` by the shared
    safeguarded Newton (:func:`jaxcrawl._src.rootfind.solve_monotone`, in log r), started
    at the secant of (log r, log m) over the box (exact for power laws); derivatives by
    the implicit function theorem per arm."""
    target = jnp.asarray(target)
    shape = jnp.broadcast_shapes(jnp.shape(target), jnp.shape(lower), jnp.shape(upper),
                                 jax.eval_shape(lambda c: _marginal_values(c, jnp.ones((), target.dtype)),
                                                costs).shape)
    target = jnp.broadcast_to(target, shape)
    lower = jnp.broadcast_to(jnp.asarray(lower, target.dtype), shape)
    upper = jnp.broadcast_to(jnp.asarray(upper, target.dtype), shape)
    params = (costs, target)
    sg = jax.lax.stop_gradient
    s_lo, s_hi = jnp.log(sg(lower)), jnp.log(sg(upper))
    f_lo = sg(_log_marginal_gap(sg(lower), params))
    f_hi = sg(_log_marginal_gap(sg(upper), params))
    fin = jnp.isfinite(f_lo) & jnp.isfinite(f_hi) & (f_lo > f_hi)
    s0 = jnp.where(fin, s_lo + f_lo * (s_hi - s_lo) / jnp.where(fin, f_lo - f_hi, 1.0),
                   0.5 * (s_lo + s_hi))
    x0 = jnp.exp(jnp.clip(s0, s_lo, s_hi))
    return solve_monotone(_log_marginal_gap, params, lower, upper, x0=x0).x


def _kkt_rate(costs: Any, target: ArrayLike, lower: ArrayLike, upper: ArrayLike) -> jax.Array:
    r"""The rate in ``[lower, upper]`` whose marginal value :math:`-J_k'(r)` equals ``target``.

    This is the per-arm KKT inverse of Problem 1 (ICML-20 eq. 8): a free arm at dual
    :math:`\nu` has :math:`-J_k'(r_k) = K\nu`.  Closed form when the family defines
    ``kkt_rate`` (polynomial costs); otherwise the shared element-wise safeguarded Newton
    (:func:`jaxcrawl._src.rootfind.solve_monotone`) in :math:`\log r` (binary-Poisson and
    user families), with exact derivatives by the implicit function theorem per arm.
    Nonincreasing in ``target``; returns ``upper`` when ``target <= marginal(upper)`` and
    ``lower`` when ``target >= marginal(lower)``.
    """
    fn = getattr(costs, "kkt_rate", None)
    if fn is not None:
        return fn(target, lower, upper)
    return _invert_marginal(costs, target, lower, upper)


def _optimal_rates(costs: Any, budget: ArrayLike, lower: ArrayLike, upper: ArrayLike, *,
                  max_steps: int = 100, rtol: float | None = None,
                  throw: bool = False) -> Allocation:
    r"""Exact optimum of Problem 1: :math:`\min J(r)` s.t. :math:`\|r\|_1 = B`,
    :math:`r \in [r_{min}, r_{max}]^K` (ICML-20 eq. 8).

    Solved by :func:`jaxcrawl.allocate` with the utility :math:`u_k = -J_k/K`:
    the returned ``dual`` is :math:`\nu = -\partial J/\partial r_k` at every free arm
    (the KKT multiplier of the budget; also :math:`-dJ^*/dB`), and each arm's rate is
    :func:`_kkt_rate` at target :math:`K\nu`.  Jit/vmap/grad-safe.

    Args:
      costs: a :class:`CostProcess` family of K arms.
      budget: B.
      lower, upper: :math:`r_{min}`, :math:`r_{max}` (scalars or ``(K,)``).
      max_steps, rtol, throw: as in :func:`jaxcrawl.allocate` (``throw=True``
        raises :class:`jaxcrawl.NonConvergenceError` when the dual root-find stops at
        ``max_steps``).

    Returns:
      :class:`jaxcrawl.Allocation` ``(x, dual, residual, num_steps, converged)``:
      ``converged`` says whether the dual root-find met its tolerance within
      ``max_steps``, and ``residual`` is the budget gap before the closing correction.
    """
    k = _num_arms(costs)
    budget = jnp.asarray(budget)
    if not jnp.issubdtype(budget.dtype, jnp.floating):
        budget = budget.astype(jnp.result_type(float))
    lower = jnp.broadcast_to(jnp.asarray(lower, budget.dtype), (k,))
    upper = jnp.broadcast_to(jnp.asarray(upper, budget.dtype), (k,))
    if is_concrete(lower):
        if np.any(np.asarray(lower) <= 0):
            raise ValueError("lower (r_min) must be > 0: J is undefined at rate 0")

    return allocate(_optimum_rate, (costs, lower, upper), budget, lower, upper,
                    marginal_fn=_optimum_marginal, max_steps=max_steps, rtol=rtol, throw=throw)


# Module-level (not closures), so allocate's compiled solve is reused across calls.
def _optimum_rate(nu, params):
    c, lo, hi = params
    k = lo.shape[-1]
    return _kkt_rate(c, nu * k, lo, hi)


def _optimum_marginal(x, params):
    c, lo, _ = params
    return _marginal_values(c, x) / lo.shape[-1]


def optimal_policy(bandit: SyncBandit, exploration: ArrayLike = 0.0, *, max_steps: int = 100,
                   rtol: float | None = None, throw: bool = False) -> Allocation:
    r"""Exact optimum of a :class:`SyncBandit`: :math:`\min J(r)` s.t. :math:`\|r\|_1 = B`,
    :math:`r \in [r_{min}, r_{max}]^K` (ICML-20 Problem 1, eq. 8).

    With ``exploration = ε > 0``, the optimum over the restricted set
    :math:`\mathcal K_\varepsilon` (budget :math:`B/(1+\varepsilon)`, rates in
    :math:`[r_{min}, r_{max}/(1+\varepsilon)]`; Alg. 1 line 2), whose cost
    :math:`J^*_\varepsilon` is what the learners converge to.  ``min_rate`` and ``max_rate``
    may be per-arm ``(K,)`` arrays.  Jit/vmap/grad-safe.

    Args:
      bandit: the instance (unbatched; ``jax.vmap`` for many).
      exploration: ε.
      max_steps, rtol, throw: as in :func:`jaxcrawl.allocate` (``throw=True`` raises
        :class:`jaxcrawl.NonConvergenceError` when the dual root-find stops at ``max_steps``).

    Returns:
      :class:`jaxcrawl.Allocation` ``(x, dual, residual, num_steps, converged)``: ``dual``
      is :math:`\nu = -\partial J/\partial r_k` at every free arm (also :math:`-dJ^*/dB`).
    """
    if is_concrete(exploration) and not np.all(np.asarray(exploration, np.float64) >= 0):  # NaN too
        raise ValueError(f"exploration must be >= 0; got {np.asarray(exploration)}")
    scale = 1.0 / (1.0 + jnp.asarray(exploration, jnp.result_type(bandit.budget)))
    return _optimal_rates(bandit.costs, bandit.budget * scale, bandit.min_rate,
                          bandit.max_rate * scale, max_steps=max_steps, rtol=rtol, throw=throw)


# ------------------------------------------------------------ gradient estimator (Lemma 2)
def _gradient_estimate(key: jax.Array, costs: Any, rate: ArrayLike, exploration: ArrayLike) -> jax.Array:
    r"""One sample of the unbiased gradient estimator of ICML-20 Lemma 2.

    For each arm: with probability ε a probe play at :math:`t \sim U[0, 1/r_k]` after a
    sync play observes :math:`\hat c^{(\varepsilon)}_k \sim c_k(t)`, and the next sync
    play (at :math:`1/r_k`, same path) observes :math:`\hat c_k \sim c_k(1/r_k)`;

    .. math:: g_k = \frac{\mathbb 1\{\text{probe}\}}{\varepsilon r_k K}
              \left(\hat c^{(\varepsilon)}_k - \hat c_k\right),
              \qquad E[g_k] = \partial J/\partial r_k.

    Args:
      key: PRNG key.
      costs: a :class:`CostProcess` family.
      rate: ``(K,)`` sync rates.
      exploration: ε in (0, 1].
    """
    if is_concrete(exploration) and not 0 < float(exploration) <= 1:
        raise ValueError(f"exploration must lie in (0, 1]; got {float(exploration)}")
    rate = jnp.asarray(rate)
    key_probe, key_time, key_path = jax.random.split(key, 3)
    probe = jax.random.bernoulli(key_probe, exploration, rate.shape)
    u = jax.random.uniform(key_time, rate.shape, rate.dtype)
    path = costs.sample_path(key_path)
    tau = 1.0 / rate
    diff = costs.cost(path, u * tau) - costs.cost(path, tau)
    k = rate.shape[-1]
    return jnp.where(probe, diff / (exploration * rate * k), 0.0)


class _ProbeGradient(NamedTuple):
    r"""Result of :func:`interval_gradient_estimate`.

    Attributes:
      grad: ``(K,)`` per-arm average of the Lemma 2 samples over the arm's sync intervals,
        in units of :math:`J_k'(r_k) = K\,\partial J/\partial r_k` (0 for arms with no
        interval).
      num_probes: total number of probe plays drawn.
    """

    grad: jax.Array
    num_probes: jax.Array


def _gather_arms(costs, idx):
    return jax.tree_util.tree_map(lambda x: x[idx] if jnp.ndim(x) >= 1 else x, costs)


def interval_gradient_estimate(key: jax.Array, costs: Any, rate: ArrayLike, num_intervals: ArrayLike,
                               exploration: ArrayLike, *,
                               chunk_size: int | None = None) -> _ProbeGradient:
    r"""Average of the Lemma 2 samples over ``num_intervals[k]`` sync intervals of each arm.

    Each of arm k's intervals (length :math:`1/r_k`, a fresh path each) independently holds
    a probe play with probability ε; a probed interval contributes
    :math:`(\hat c^{(\varepsilon)} - \hat c)/(\varepsilon r_k)`, an unprobed one 0, and the
    arm's estimate is the mean over its intervals (ICML-20 Alg. 2 lines 17-28; the authors'
    experiments average MirrorSync's intervals the same way).  Its expectation is
    :math:`J_k'(r_k)` for every arm with at least one interval.

    Only the probes are simulated: their positions in the concatenated interval sequence
    are drawn by geometric gaps, ``chunk_size`` at a time, until all intervals are covered,
    so the result is exact for any number of intervals and costs O(#probes).

    Args:
      key: PRNG key.
      costs: a :class:`CostProcess` family of K arms.
      rate: ``(K,)`` sync rates (the rates the intervals were scheduled with).
      num_intervals: ``(K,)`` nonnegative integer interval counts.
      exploration: ε in (0, 1].
      chunk_size: probes simulated per pass (static; default ``max(128, K)``).
    """
    if is_concrete(exploration) and not np.all((np.asarray(exploration, np.float64) > 0)
                                               & (np.asarray(exploration, np.float64) <= 1)):  # NaN too
        raise ValueError(f"exploration must lie in (0, 1]; got {np.asarray(exploration)}")
    rate = jnp.asarray(rate)
    k = rate.shape[-1]
    p = int(chunk_size) if chunk_size is not None else max(128, k)
    n = jnp.maximum(jnp.asarray(num_intervals).astype(jnp.int32), 0)
    cum = jnp.cumsum(n)
    total = cum[-1]
    dtype = rate.dtype
    exploration = jnp.asarray(exploration, dtype)
    log_q = jnp.log1p(-exploration)
    tau = 1.0 / rate
    big = total + 1
    # each probe's arm: a comparison with every arm's running count (one fused kernel) for a
    # few hundred arms, a binary search (a loop of gathers) beyond
    search = "compare_all" if k * p <= 1 << 17 else "scan"

    def cond(st):
        i, start, sums, count = st
        return start < total

    def body(st):
        i, start, sums, count = st
        key_u, key_path = jax.random.split(jax.random.fold_in(key, i))
        u = jax.random.uniform(key_u, (2, p), dtype)
        gap = jnp.floor(jnp.log1p(-u[0]) / log_q) + 1.0  # Geometric(ε) gaps, u[0] in [0, 1)
        gap = jnp.clip(jnp.where(jnp.isfinite(gap), gap, big), 1, big).astype(jnp.int32)
        # 1-based positions of the probed intervals.  Gaps are <= total + 1, so an int32
        # wrap-around can only happen after a position already passed `total`; the
        # running count of decreases marks everything from the wrap on as invalid.
        pos = start + jnp.cumsum(gap)
        wrapped = jnp.cumsum(jnp.concatenate([jnp.zeros((1,), jnp.int32),
                                              (pos[1:] < pos[:-1]).astype(jnp.int32)])) > 0
        valid = (pos <= total) & (pos > start) & ~wrapped
        arm = jnp.clip(jnp.searchsorted(cum, pos, side="left", method=search), 0, k - 1)
        arm = jnp.where(valid, arm, k - 1)
        sub = _gather_arms(costs, arm)
        path = sub.sample_path(key_path)
        t_arm = tau[arm]
        t_probe = u[1] * t_arm
        g = (sub.cost(path, t_probe) - sub.cost(path, t_arm)) / (exploration * rate[arm])
        g = jnp.where(valid, g, 0.0)
        sums = sums + jax.ops.segment_sum(g, arm, num_segments=k, indices_are_sorted=True)
        count = count + jnp.sum(valid, dtype=jnp.int32)
        last = jnp.where(valid[-1], pos[-1], big)  # all valid: continue after the last probe
        return i + 1, last, sums, count

    init = (jnp.asarray(0, jnp.int32), jnp.asarray(0, jnp.int32), jnp.zeros((k,), dtype),
            jnp.asarray(0, jnp.int32))
    _, _, sums, count = jax.lax.while_loop(cond, body, init)
    grad = jnp.where(n > 0, sums / jnp.maximum(n, 1).astype(dtype), 0.0)
    return _ProbeGradient(grad=grad, num_probes=count)
