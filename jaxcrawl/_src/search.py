r"""The budget root-find of large in-memory problems in a few passes over the pages.

The plain iteration (:func:`jaxcrawl._src.budget.plain`) reads every page for its bracket,
once per Newton step, for the residual and for the write.  Whether a pass costs memory
bandwidth (an accelerator, where arithmetic is nearly free next to it) or arithmetic (a
CPU), the passes are the cost.  This search takes few:

1. **A start from a sample.**  A strided sample of :data:`SAMPLE` pages (no pass) is solved
   for its share of the budget; its dual estimates the whole problem's to a few percent.
   On a CPU by the plain iteration; on an accelerator by a few wide passes over the sample
   without a loop (:func:`fixed_search`: a loop step waits on the host there).
2. **Several candidate duals per pass.**  A pass evaluates the sum :math:`S(\nu)` and its
   slope at ``K`` duals at once: the first around the sample's dual, each later one around
   the root predicted from what the passes so far measured.
3. **A root from both ends of the bracket.**  The two candidates that bracket the budget,
   with their sums and slopes, define the cubic Hermite interpolant of
   :math:`g(z)=\log(S(e^z)/B)` (nearly linear in :math:`z=\log\nu` for the built-in
   objectives); its root is the next candidate.  The error falls like the fourth power of
   the bracket's width: from a bracket of ±12.5% around the sample's dual, the next
   candidate is within ~1e-7 of the root.  One-sided, a Newton step on :math:`g` from the
   known end (a quarter further, so that it brackets); no progress, bisection.
4. **The write pass** evaluates the allocation at the best candidate with the closing
   correction of the plain solve.

The tolerance and the ``converged`` flag are the plain iteration's: a candidate's residual
:math:`|S(\nu)-B|\le` ``rtol B`` before the correction, or a bracket a few ulps wide (then
:func:`jaxcrawl._src.budget.checked` asks the residual to be within 4 ``rtol B``).  On the
NeurIPS-19-shaped problem float32 takes 2 search passes and float64 3 (with the write, 3
and 4 passes over the pages).

``K`` is chosen by backend (:func:`strategy`): on a CPU each candidate costs its arithmetic
on every page, so 2 candidates in the first pass and 1 after; on an accelerator 16 and 8.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

#: pages in the sample the search starts from
SAMPLE = 1 << 14
#: the fewest pages the search is used for (smaller problems: the plain iteration)
MIN_PAGES = 1 << 16
#: the first pass's candidates around the sample's dual, ``z0 + SPREAD * offset``
SPREAD = 0.125


class Strategy(NamedTuple):
    """Candidates per pass: ``first`` (around the sample's dual) and ``next``; ``offsets``:
    the first pass's, in units of :data:`SPREAD`."""

    first: int
    next: int
    offsets: tuple


#: the backend whose choices the search makes (``None``: JAX's default backend); the tests
#: set ``"gpu"`` to run an accelerator's choices on a CPU
BACKEND: str | None = None


def _backend(backend: str | None) -> str:
    return backend or BACKEND or jax.default_backend()


def strategy(backend: str | None = None) -> Strategy:
    """The candidates per pass on ``backend`` (default: :data:`BACKEND`, else JAX's default)."""
    if _backend(backend) == "cpu":
        return Strategy(2, 1, (-1.0, 1.0))
    wide = (1 / 64, 1 / 16, 1 / 4, 1.0, 4.0, 16.0, 64.0)
    return Strategy(16, 8, (0.0, *wide, *(-w for w in wide), 256.0))


def applies(n: int, marginal_fn, unrolled: bool) -> bool:
    """Whether a problem of ``n`` pages is solved by this search."""
    return marginal_fn is not None and not unrolled and n >= MIN_PAGES


def sample(tree: Any, n: int, m: int = SAMPLE) -> Any:
    """Every ``n // m``-th page of the page-sized leaves of ``tree`` (the first ``m``);
    other leaves (scalars) as they are."""
    stride = n // m

    def take(v):
        v = jnp.asarray(v)
        if v.ndim and v.shape[-1] == n:
            return v[..., ::stride][..., :m]
        return v

    return jax.tree_util.tree_map(take, tree)


class State(NamedTuple):
    """Bracket ends ``a`` (``S >= B``) and ``b`` (``S <= B``) in ``z = log nu`` with their
    sums and slopes ``dS/dz``; the best candidate (least ``|S - B|``) with ``dS/dnu``;
    passes taken; whether done; the best ``|F|`` before the last pass; the one-sided step."""

    za: jax.Array
    sa: jax.Array
    ga: jax.Array
    zb: jax.Array
    sb: jax.Array
    gb: jax.Array
    z: jax.Array
    f: jax.Array
    df: jax.Array
    k: jax.Array
    done: jax.Array
    prev: jax.Array
    step: jax.Array


def _init(dtype, z0) -> State:
    inf = jnp.asarray(jnp.inf, dtype)
    zero = jnp.zeros((), dtype)
    nan = jnp.asarray(jnp.nan, dtype)
    return State(-inf, nan, nan, inf, nan, nan, z0, nan, nan, jnp.asarray(0, jnp.int32), jnp.asarray(False),
                 inf, jnp.asarray(SPREAD, dtype) + zero)


def _update(s: State, zs, sums, slopes, budget, tol) -> State:
    """Fold the candidates ``zs`` (their sums and ``dS/dnu``) into the state."""
    f = sums - budget
    g = slopes * jnp.exp(zs)  # dS/dz
    finite = jnp.isfinite(f) & jnp.isfinite(zs)
    up = finite & (f >= 0)
    down = finite & (f <= 0)
    ia = jnp.argmax(jnp.where(up, zs, -jnp.inf))
    ib = jnp.argmin(jnp.where(down, zs, jnp.inf))
    new_a = jnp.any(up) & (zs[ia] > s.za)
    new_b = jnp.any(down) & (zs[ib] < s.zb)
    ibest = jnp.argmin(jnp.where(finite, jnp.abs(f), jnp.inf))
    better = finite[ibest] & ~(jnp.abs(f[ibest]) >= jnp.abs(s.f))
    pick = lambda c, i, new, old: jnp.where(c, new[i], old)  # noqa: E731
    za, sa, ga = pick(new_a, ia, zs, s.za), pick(new_a, ia, sums, s.sa), pick(new_a, ia, g, s.ga)
    zb, sb, gb = pick(new_b, ib, zs, s.zb), pick(new_b, ib, sums, s.sb), pick(new_b, ib, g, s.gb)
    z, fb, dfb = pick(better, ibest, zs, s.z), pick(better, ibest, f, s.f), pick(better, ibest, slopes, s.df)
    eps = jnp.finfo(zs.dtype).eps
    collapsed = jnp.isfinite(za) & jnp.isfinite(zb) & (zb - za <= 4 * eps * jnp.maximum(jnp.abs(z), 1.0))
    done = (jnp.abs(fb) <= tol) | collapsed
    return State(za, sa, ga, zb, sb, gb, z, fb, dfb, s.k + 1, s.done | done, jnp.abs(s.f), s.step)


def _hermite_root(za, ha, da, zb, hb, db):
    """Root in ``[za, zb]`` of the cubic Hermite interpolant of ``h`` (values ``ha >= 0 >= hb``,
    slopes ``da``, ``db``): a few safeguarded Newton steps on the cubic from the secant point."""
    L = zb - za
    span = ha - hb
    t = jnp.where(span > 0, ha / jnp.where(span > 0, span, 1.0), 0.5)
    for _ in range(6):
        t2, t3 = t * t, t * t * t
        p = ((2 * t3 - 3 * t2 + 1) * ha + (t3 - 2 * t2 + t) * L * da + (3 * t2 - 2 * t3) * hb
             + (t3 - t2) * L * db)
        dp = (6 * t2 - 6 * t) * (ha - hb) + (3 * t2 - 4 * t + 1) * L * da + (3 * t2 - 2 * t) * L * db
        ok = jnp.isfinite(dp) & (dp < 0)
        t = jnp.clip(jnp.where(ok, t - p / jnp.where(ok, dp, -1.0), t), 0.0, 1.0)
    return za + t * L


def _next(s: State, budget, count: int) -> tuple[jax.Array, State]:
    """The next pass's ``count`` candidates and the state's one-sided step."""
    two = jnp.isfinite(s.za) & jnp.isfinite(s.zb)
    # g = log(S / B): nearly linear in z; its slope dS/dz / S
    pos = (s.sa > 0) & (s.sb > 0) & jnp.isfinite(s.ga) & jnp.isfinite(s.gb)
    ha = jnp.where(pos, jnp.log(jnp.where(pos, s.sa, 1.0) / budget), s.sa - budget)
    hb = jnp.where(pos, jnp.log(jnp.where(pos, s.sb, 1.0) / budget), s.sb - budget)
    da = jnp.where(pos, s.ga / jnp.where(pos, s.sa, 1.0), s.ga)
    db = jnp.where(pos, s.gb / jnp.where(pos, s.sb, 1.0), s.gb)
    za_, zb_ = jnp.where(two, s.za, 0.0), jnp.where(two, s.zb, 1.0)
    mid = 0.5 * (za_ + zb_)
    herm = _hermite_root(za_, ha, jnp.where(jnp.isfinite(da), da, 0.0), zb_, hb,
                         jnp.where(jnp.isfinite(db), db, 0.0))
    stalled = ~(jnp.abs(s.f) * 2.0 <= s.prev) & jnp.isfinite(s.prev)
    inside = jnp.isfinite(herm) & (herm > za_) & (herm < zb_)
    z2 = jnp.where(inside & ~stalled, herm, mid)
    # one-sided: a Newton step on g from the known end, a quarter further (to bracket),
    # at least the current step; growing geometrically while it does not bracket
    from_a = jnp.isfinite(s.za)
    z_end = jnp.where(from_a, s.za, s.zb)
    s_end = jnp.where(from_a, s.sa, s.sb)
    g_end = jnp.where(from_a, s.ga, s.gb)
    h_end = jnp.where(s_end > 0, jnp.log(jnp.where(s_end > 0, s_end, 1.0) / budget), jnp.nan)
    newton = -h_end * s_end / g_end
    sign = jnp.where(from_a, 1.0, -1.0)
    ok = jnp.isfinite(newton) & (newton * sign > 0)
    move = jnp.where(ok, jnp.maximum(1.25 * jnp.abs(newton), s.step), s.step)
    z1 = z_end + sign * move
    none = ~(jnp.isfinite(s.za) | jnp.isfinite(s.zb))
    z1 = jnp.where(none, s.z + s.step, z1)
    step = jnp.where(two, s.step, 4.0 * s.step)
    centre = jnp.where(two, z2, z1)
    if count == 1:
        return centre[None], s._replace(step=step)
    # more candidates: geometrically closer to the centre, towards both ends (or, one-sided,
    # further out)
    half = (count - 1) // 2
    frac = jnp.asarray([4.0 ** -(j + 1) for j in range(half)], centre.dtype)
    left = centre - (centre - za_) * frac
    right = centre + (zb_ - centre) * frac
    out = centre + sign * move * jnp.asarray([2.0 ** (j + 1) for j in range(2 * half)], centre.dtype)
    around = jnp.concatenate([left, right])
    extra = jnp.where(two, around, out)
    zs = jnp.concatenate([centre[None], extra])
    if zs.shape[0] < count:
        zs = jnp.concatenate([zs, jnp.full((count - zs.shape[0],), centre, centre.dtype)])
    return zs, s._replace(step=step)


def candidate_sums(pages, eval_fn: Callable, zs, dtype, side: Callable | None = None, side_args: tuple = ()):
    """One pass over ``pages``: the sums of the rates and of their slopes at the duals
    ``exp(zs)`` (``eval_fn(view, nu) -> (x, dx)`` per page) and, with ``side``, its statistics
    (``side(view, *side_args) -> (values, ops)``).  Returns ``(sums, slopes, side_values)``."""
    count = zs.shape[0]
    extra_ops = () if side is None else tuple(side(None)[1])

    def fn(v, zs, *extra):
        out = []
        for j in range(count):
            out += list(eval_fn(v, jnp.exp(zs[j])))
        if side is not None:
            out += list(side(v, *extra)[0])
        return tuple(out)

    vals = pages.reduce(fn, ("sum",) * (2 * count) + extra_ops, zs, *(side_args if side is not None else ()))
    sums = jnp.stack([jnp.asarray(v, dtype) for v in vals[0:2 * count:2]])
    slopes = jnp.stack([jnp.asarray(v, dtype) for v in vals[1:2 * count:2]])
    return sums, slopes, vals[2 * count:]


def search(pages, eval_fn: Callable, budget, z0, max_steps: int, tol, plan: Strategy,
           side: Callable | None = None, side_args: tuple = (), unroll: int = 0):
    """The search over ``pages`` (a :mod:`jaxcrawl._src.passes` reducer) from ``z0`` (log of the
    estimated dual).  ``eval_fn(view, nu) -> (x, dx)`` per page.  ``side(view, *side_args)``
    (optional): extra ``(values, ops)`` reduced in the first pass, returned.  Returns
    ``(state, side_values)``."""
    dtype = jnp.result_type(budget)
    state = _init(dtype, jnp.asarray(z0, dtype))
    zs = state.z + SPREAD * jnp.asarray(plan.offsets, dtype)
    sums, slopes, side_vals = candidate_sums(pages, eval_fn, zs, dtype, side, side_args)
    state = _update(state, zs, sums, slopes, budget, tol)

    def body(s):
        zs, s = _next(s, budget, plan.next)
        return _update(s, zs, *candidate_sums(pages, eval_fn, zs, dtype)[:2], budget, tol)

    def cond(s):
        return ~s.done & (s.k < max_steps)

    for _ in range(unroll):
        state = jax.lax.cond(cond(state), body, lambda s: s, state)
    state = pages.loop(cond, body, state)
    return state, side_vals


def backend_unroll(backend: str | None = None) -> int:
    """Passes taken outside the ``while_loop`` (each under a ``cond``): XLA:CPU runs a loop's
    body on one core, a top-level computation on all; on an accelerator a ``cond`` costs a
    host round trip like a loop step, so none."""
    return 2 if _backend(backend) == "cpu" else 0


def on_host_loops(backend: str | None = None) -> bool:
    """Whether the sample is solved by the plain iteration (its ``while_loop``: cheap on a
    CPU) rather than by a fixed number of passes without a loop (an accelerator, where
    every loop step waits on the host)."""
    return _backend(backend) == "cpu"


def fixed_search(pages, eval_fn: Callable, budget, za, zb, passes: int, count: int):
    """The best dual's ``z`` found by ``passes`` passes of ``count`` candidates from the
    bracket ``[za, zb]`` of ``z = log nu`` (the first pass spread evenly over it, each later
    one around the Hermite root of the bracket its predecessors left), with no loop: an
    estimate (the sample's), not a checked root."""
    dtype = jnp.result_type(budget)
    state = _init(dtype, 0.5 * (za + zb))
    zs = za + (zb - za) * jnp.linspace(0.0, 1.0, count, dtype=dtype)
    for k in range(passes):
        if k:
            zs, state = _next(state, budget, count)
        state = _update(state, zs, *candidate_sums(pages, eval_fn, zs, dtype)[:2], budget, 0.0)
    return state.z


def sample_scale(values: jax.Array, n: int) -> jax.Array:
    """The largest ``|value|`` of the sample (the importance unit of a homogeneous objective;
    any positive unit is exact, this one needs no pass)."""
    return jnp.max(jnp.abs(sample(values, n)), axis=-1)


__all__ = ["SAMPLE", "MIN_PAGES", "SPREAD", "BACKEND", "Strategy", "strategy", "applies", "sample", "candidate_sums", "search",
           "backend_unroll", "on_host_loops", "fixed_search", "sample_scale"]
