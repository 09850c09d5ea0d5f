"""The problem model: :class:`CrawlProblem` and :class:`Policy`.

One vocabulary is used throughout jaxcrawl (the papers' symbols in brackets):

* ``importance`` -- request rate / weight of a page (ζ in Learning to Crawl, μ in
  Kolobov et al. NeurIPS-19, w in Avrachenkov et al.);
* ``change_rate`` -- Poisson rate of meaningful changes (ξ, λ, Δ);
* ``bandwidth`` -- total crawl rate allowed (R, B);
* ``complete`` -- 0/1 mask of pages that send a signal on every change (W° vs W⁻),
  stored as floats of the problem's dtype so that every leaf is differentiable;
* ``rate`` -- crawl rate of a page (ρ, p_i, r_k); for a complete page ``rate = prob *
  change_rate`` where ``prob`` is the probability of crawling on each change signal;
* ``dual`` -- the Lagrange multiplier of the bandwidth constraint: the marginal
  *utility* of one more crawl per unit time, for the un-averaged utility the solver
  maximises.

Both containers are pytrees, so they pass through ``jax.jit`` and ``jax.vmap``.  Every
leaf of a :class:`CrawlProblem` is a float array, so ``jax.grad``, ``jax.jacfwd`` and
``optax.apply_updates`` take a whole problem (the cotangent of ``complete`` is zero: it
only selects a branch).  A :class:`Policy` is a solver's result and keeps its status
leaves (``on_signal``, ``num_steps``, ``converged``) as bools and integers; differentiate
through its ``rate``.  Validation happens once, at construction, when values are concrete;
inside traced code (where leaves are tracers) it is skipped.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .._src.checks import check_positive_finite, check_precision, check_representable, is_concrete
from .bounds import check_usable_bandwidth

__all__ = ["CrawlProblem", "Policy", "make_policy", "stack"]


def _as_float_array(x, name):
    """``x`` as a JAX float array (integers become the default float); refuses booleans,
    complex and non-numeric values, and floats narrower than float32 (under ``jit`` too)."""
    if not isinstance(x, jax.core.Tracer | jax.Array):
        x = np.asarray(x)
        if x.dtype == object:
            try:
                x = x.astype(float)
            except (TypeError, ValueError):
                raise TypeError(f"{name} must be a real-valued array") from None
    dt = jnp.dtype(x.dtype)  # jnp knows bfloat16 and the float8s, np.issubdtype does not
    if dt == jnp.bool_ or not (jnp.issubdtype(dt, jnp.floating) or jnp.issubdtype(dt, jnp.integer)):
        raise TypeError(f"{name} must be a real-valued array, got dtype {dt}")
    check_precision(dt, name)
    if isinstance(x, jax.core.Tracer):
        return x
    if not isinstance(x, jax.Array):  # a host array: validated in the dtype it is used in
        check_representable(x, name, jnp.result_type(float) if np.issubdtype(dt, np.floating) else dt)
    arr = jnp.asarray(x)
    if not jnp.issubdtype(arr.dtype, jnp.floating):
        arr = arr.astype(jnp.result_type(float))
    return arr


@dataclasses.dataclass(frozen=True)
class CrawlProblem:
    """A freshness crawl-scheduling problem with known change rates.

    Args:
      importance: ``(..., n)`` positive weights / request rates of the pages (ζ, μ).
      change_rate: ``(..., n)`` positive Poisson change rates (ξ, λ).
      bandwidth: positive total crawl rate R; scalar, or shape ``(...)`` for a batch.
      complete: optional ``(..., n)`` mask of pages with complete change
        observations (NeurIPS-19 W°): bools or 0/1 values, stored as 0./1. in the
        dtype of ``importance``.  Default: no complete pages.

    Validation (eager, with concrete values): importance and change_rate are finite
    and > 0 and have the same shape; bandwidth is finite and > 0 and broadcasts
    against the leading (batch) axes; ``complete`` has the pages' shape.

    Bandwidth the problem cannot use: a complete page gains nothing from more crawls
    than it has changes, so its rate is at most its change rate (NeurIPS-19 Problem 2).
    When *every* page is complete and ``bandwidth >= sum(change_rate)`` the problem
    is degenerate and construction raises ``ValueError`` (no silent cap).  With at
    least one incomplete page any bandwidth is usable.
    """

    importance: jax.Array
    change_rate: jax.Array
    bandwidth: jax.Array
    complete: jax.Array

    def __init__(self, importance, change_rate, bandwidth, complete=None):
        if _is_axis_spec(importance, change_rate, bandwidth, complete):
            _set_fields(self, (importance, change_rate, bandwidth, complete))
            return
        importance = _as_float_array(importance, "importance")
        change_rate = _as_float_array(change_rate, "change_rate")
        if is_concrete(importance, change_rate):
            dtype = jnp.result_type(importance.dtype, change_rate.dtype)
            importance = importance.astype(dtype)
            change_rate = change_rate.astype(dtype)
        if hasattr(bandwidth, "dtype"):
            check_precision(bandwidth.dtype, "bandwidth")
        if not isinstance(bandwidth, jax.core.Tracer):
            if not isinstance(bandwidth, jax.Array):
                check_representable(np.asarray(bandwidth, np.float64), "bandwidth", importance.dtype)
            bandwidth = jnp.asarray(bandwidth, dtype=importance.dtype)
        if complete is None:
            complete = jnp.zeros(jnp.shape(importance), dtype=importance.dtype)
        elif isinstance(complete, jax.core.Tracer):
            complete = complete.astype(importance.dtype)
        else:
            c = np.asarray(complete)
            if c.dtype != np.bool_ and not np.all((c == 0) | (c == 1)):
                raise ValueError("complete must be a boolean mask (or 0/1 values)")
            complete = jnp.asarray(c, dtype=importance.dtype)
        object.__setattr__(self, "importance", importance)
        object.__setattr__(self, "change_rate", change_rate)
        object.__setattr__(self, "bandwidth", bandwidth)
        object.__setattr__(self, "complete", complete)
        if is_concrete(importance, change_rate, bandwidth, complete):
            self._validate()

    def _validate(self):
        imp, lam = self.importance, self.change_rate
        if imp.ndim == 0:
            raise ValueError("importance must have at least one axis (the pages); for a vmap in_axes prefix "
                             "write CrawlProblem.in_axes(importance=0, ...) (None: not mapped)")
        if imp.shape != lam.shape:
            raise ValueError(
                f"importance and change_rate must have the same shape; got {imp.shape} and {lam.shape}"
            )
        if self.complete.shape != imp.shape:
            raise ValueError(
                f"complete must have the pages' shape {imp.shape}; got {self.complete.shape}"
            )
        check_positive_finite(imp, "importance")
        check_positive_finite(lam, "change_rate")
        bw = np.asarray(self.bandwidth)
        batch = imp.shape[:-1]
        try:
            ok = np.broadcast_shapes(bw.shape, batch) == batch
        except ValueError:
            ok = False
        if not ok:
            raise ValueError(
                f"bandwidth of shape {bw.shape} does not broadcast to the problem's batch shape {batch}"
            )
        if not np.all(np.isfinite(bw)) or np.any(bw <= 0):
            raise ValueError(f"bandwidth must be finite and > 0; got {bw}")
        comp = np.asarray(self.complete) != 0
        if np.any(comp.all(axis=-1)):  # the one rule of every page source (core.bounds)
            check_usable_bandwidth(np.broadcast_to(bw, batch), np.sum(~comp, axis=-1),
                                   np.where(comp, np.asarray(lam, np.float64), 0.0).sum(axis=-1))

    @classmethod
    def in_axes(cls, importance: int | None = None, change_rate: int | None = None, bandwidth: int | None = None,
                complete: int | None = None) -> CrawlProblem:
        """A ``jax.vmap`` ``in_axes`` / ``out_axes`` prefix for problems: each field is the axis
        that field is mapped over, or ``None`` (not mapped, the default)::

            axes = CrawlProblem.in_axes(importance=0, change_rate=0, complete=0)
            jax.vmap(f, in_axes=(axes, None))(problems, x)

        maps over the leading axis of the pages' fields of a batch of problems that share one
        scalar bandwidth (``in_axes=0`` would ask for a bandwidth axis too).  The same object
        comes from ``CrawlProblem(0, None, None, None)``: a construction whose fields are all
        ints or ``None``, with ``None`` among the first three, is a prefix and is not
        validated.  No leaf of a prefix is an array: pass it only as an axis specification.
        """
        fields = (importance, change_rate, bandwidth, complete)
        for name, v in zip(_FIELDS, fields):
            if not (v is None or _is_int(v)):
                raise TypeError(f"CrawlProblem.in_axes: {name} must be an int axis or None; got {v!r}")
        obj = object.__new__(cls)
        _set_fields(obj, fields)
        return obj

    # ------------------------------------------------------------------ helpers
    @property
    def num_pages(self) -> int:
        """Number of pages ``n`` (the last axis)."""
        return self.importance.shape[-1]

    @property
    def dtype(self) -> Any:
        return self.importance.dtype

    def replace(self, **changes) -> CrawlProblem:
        """A copy with some fields replaced (validated again when concrete)."""
        fields = dict(
            importance=self.importance,
            change_rate=self.change_rate,
            bandwidth=self.bandwidth,
            complete=self.complete,
        )
        fields.update(changes)
        return CrawlProblem(**fields)

    def as_incomplete(self) -> CrawlProblem:
        """The same pages with every page treated as incomplete (Poisson-crawled)."""
        return CrawlProblem(
            self.importance, self.change_rate, self.bandwidth, jnp.zeros_like(self.complete)
        )

    def __repr__(self):
        if not hasattr(self.importance, "shape"):  # an in_axes prefix
            return "CrawlProblem.in_axes(" + ", ".join(
                f"{k}={getattr(self, k)!r}" for k in _FIELDS) + ")"
        return (
            f"CrawlProblem(num_pages={self.importance.shape[-1]}, batch={self.importance.shape[:-1]}, "
            f"dtype={self.importance.dtype}, bandwidth={self.bandwidth!r})"
        )


_FIELDS = ("importance", "change_rate", "bandwidth", "complete")
_KEYS = tuple(jax.tree_util.GetAttrKey(name) for name in _FIELDS)


def _is_int(v) -> bool:
    return isinstance(v, int | np.integer) and not isinstance(v, bool | np.bool_)


def _is_axis_spec(*fields) -> bool:
    """Fields of a ``vmap`` axis prefix: all ints or ``None``, a ``None`` among the first three
    (a real problem needs arrays there; ``CrawlProblem(1, 2, 3)`` stays an error)."""
    return all(v is None or _is_int(v) for v in fields) and any(v is None for v in fields[:3])


def _set_fields(obj, values) -> None:
    for name, value in zip(_FIELDS, values):
        object.__setattr__(obj, name, value)


def _flatten(p: CrawlProblem):
    return (p.importance, p.change_rate, p.bandwidth, p.complete), None


def _flatten_with_keys(p: CrawlProblem):
    return tuple(zip(_KEYS, (p.importance, p.change_rate, p.bandwidth, p.complete))), None


def _unflatten(_, leaves):
    obj = object.__new__(CrawlProblem)
    _set_fields(obj, leaves)
    return obj


# keyed, so that ``jax.tree_util.tree_flatten_with_path`` names the fields (``.importance``)
jax.tree_util.register_pytree_with_keys(CrawlProblem, _flatten_with_keys, _unflatten, _flatten)


class Policy(NamedTuple):
    r"""A stationary crawl policy, as returned by every solver.

    Attributes:
      rate: ``(..., n)`` crawl rate of every page (crawls per unit time).  For a
        complete page this is ``prob * change_rate``.
      prob: ``(..., n)`` for pages crawled on change signals, the probability of
        crawling on each signal (``rate / change_rate``); 0 for Poisson-crawled pages.
      on_signal: ``(..., n)`` bool: pages crawled on change signals (NeurIPS-19 Π°).
        ``lambda_crawl`` sets it to ``problem.complete``; BinaryLambdaCrawl and the
        heuristics crawl every page as a Poisson process (all False), as the
        NeurIPS-19 baselines do.  The objectives read it when given a Policy.
      dual: the bandwidth multiplier: the marginal gain in the solver's (un-averaged)
        utility per extra unit of bandwidth.  For the harmonic objective,
        ``d(harmonic_cost)/d(bandwidth) = -dual / n`` at the optimum (envelope
        theorem); heuristics report the dual of the proportional-allocation
        problem they solve (see each solver's docstring).
      residual: for root-finding solvers, ``sum(rate) - bandwidth`` at the returned
        dual *before* the closing correction (``|residual| <= rtol * bandwidth`` when
        converged); for closed forms, ``sum(rate) - bandwidth``.
      num_steps: root-finding iterations used (0 for closed forms).
      converged: whether the root-find met its tolerance (True for closed forms); per
        problem when batched.  Pass ``throw=True`` to a solver to make False an error.
      host_dual: with host caps, ``(..., H)`` each host's multiplier :math:`\kappa_h\ge0`
        (the marginal value of one more unit of its cap; 0 where the cap does not bind);
        ``None`` without caps.
    """

    rate: jax.Array
    prob: jax.Array
    on_signal: jax.Array
    dual: jax.Array
    residual: jax.Array
    num_steps: jax.Array
    converged: jax.Array = True
    host_dual: jax.Array | None = None


def raw_problem(importance: ArrayLike, change_rate: ArrayLike, bandwidth: ArrayLike,
                complete: ArrayLike) -> CrawlProblem:
    """A :class:`CrawlProblem` from already-validated (or traced) arrays, without checks
    (a bool ``complete`` becomes the float mask)."""
    complete = jnp.asarray(complete)
    if not jnp.issubdtype(complete.dtype, jnp.floating):
        complete = complete.astype(jnp.result_type(importance))
    return _unflatten(None, (importance, change_rate, bandwidth, complete))


def stack(problems: Sequence[CrawlProblem]) -> CrawlProblem:
    """Stack same-shaped problems into one batched :class:`CrawlProblem` (a new leading axis).

    Each problem's bandwidth is broadcast to its batch shape first, so the result has
    ``importance.shape == (len(problems),) + problems[0].importance.shape`` and a bandwidth
    of shape ``(len(problems),) + batch``; every solver, objective and learner takes it as a
    batch (``jax.vmap`` over its leading axis).  Works under ``jit`` (shapes are static).

    Raises ``ValueError`` for an empty sequence or problems whose shapes differ, and
    ``TypeError`` for anything that is not a :class:`CrawlProblem`.
    """
    problems = list(problems)
    if not problems:
        raise ValueError("stack needs at least one CrawlProblem")
    for i, p in enumerate(problems):
        if not isinstance(p, CrawlProblem):
            raise TypeError(f"stack takes CrawlProblems; problems[{i}] is a {type(p).__name__}")
    shape = problems[0].importance.shape
    for i, p in enumerate(problems[1:], start=1):
        if p.importance.shape != shape:
            raise ValueError(f"stack needs problems of one shape: problems[0] has pages of shape {shape}, "
                             f"problems[{i}] has {p.importance.shape}")
    batch = shape[:-1]
    dtype = jnp.result_type(*(p.importance.dtype for p in problems))
    fields = [[p.importance, p.change_rate, jnp.broadcast_to(p.bandwidth, batch), p.complete] for p in problems]
    return raw_problem(*(jnp.stack([f[k] for f in fields]).astype(dtype) for k in range(4)))


def make_policy(problem: CrawlProblem, rate: ArrayLike, dual: ArrayLike, residual: ArrayLike | None = None,
                num_steps: ArrayLike = 0, on_signal: ArrayLike | None = None,
                converged: ArrayLike = True) -> Policy:
    """Assemble a :class:`Policy` from rates (computes ``prob`` and the residual).

    ``on_signal`` defaults to ``problem.complete`` (as a bool mask).
    """
    comp = problem.complete if on_signal is None else on_signal
    comp = jnp.broadcast_to(jnp.asarray(comp).astype(bool), jnp.shape(rate))
    # rate <= change_rate for signal-crawled pages (their bound); a scaled-back solve may
    # land one ulp above it, which must not become a probability above 1
    prob = jnp.where(comp, jnp.minimum(rate / problem.change_rate, 1.0), jnp.zeros_like(rate))
    if residual is None:
        residual = jnp.sum(rate, axis=-1) - problem.bandwidth
    dual = jnp.asarray(dual, dtype=rate.dtype)
    return Policy(rate=rate, prob=prob, on_signal=comp, dual=dual, residual=residual,
                  num_steps=jnp.asarray(num_steps, dtype=jnp.int32),
                  converged=jnp.broadcast_to(jnp.asarray(converged, bool), jnp.shape(dual)))
