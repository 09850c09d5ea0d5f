r"""Optimal crawl rates under per-host politeness caps (nested duals, solved exactly).

Kolobov et al. (SIGIR-19, "Optimal Freshness Crawl Under Politeness Constraints") add to
the bandwidth constraint of the freshness problems one constraint per *host*: a host
``h`` lets the crawler fetch its pages at most ``C_h`` times per unit time,

.. math::

   \max_x \sum_i u_i(x_i)\quad\text{s.t.}\quad \sum_i x_i = R,\qquad
   \sum_{i\in h} x_i \le C_h\ (h = 1..H),\qquad \ell_i\le x_i\le h_i,

with :math:`u_i` the page utility of the objective (harmonic staleness: NeurIPS-19
Prop. 1/4 and Alg. 1-3; binary freshness: Azar et al., L2C eq. 5; ...).  The paper is
not available here; the KKT conditions below are derived from scratch.  With a global
multiplier :math:`\nu` and host multipliers :math:`\kappa_h\ge0`,

.. math::

   x_i = \mathrm{clip}\big(\varphi_i(\nu + \kappa_{h(i)}), \ell_i, h_i\big),\qquad
   \kappa_h\Big(C_h - \sum_{i\in h}x_i\Big) = 0,\qquad \sum_i x_i = R,

where :math:`\varphi_i = (u_i')^{-1}` is the unconstrained solver's per-page rate function
(reused from :mod:`jaxcrawl.solvers`), nonincreasing; pages without a host (or on an
uncapped host) use :math:`\kappa = 0`.

**Solving it.**  For a fixed :math:`\nu`, let :math:`S_h(\nu)=\sum_{i\in h}x_i(\nu)`.  If
:math:`S_h(\nu)\le C_h` then :math:`\kappa_h=0`; otherwise :math:`\kappa_h>0` solves the
1-D monotone equation :math:`S_h(\nu+\kappa_h)=C_h`.  Either way the host then receives
exactly :math:`\min(S_h(\nu), C_h)`, so the outer equation on the global budget is

.. math::

   G(\nu) = \sum_{i\notin\text{capped}} x_i(\nu) + \sum_h \min\big(S_h(\nu), C_h\big) = R,

continuous and nonincreasing in :math:`\nu` -- it needs no inner solve at all.  So the
nested problem is solved exactly with one safeguarded Newton/bisection in
:math:`\log\nu` (one pass over the pages and one ``jax.ops.segment_sum`` per step), then
*one* vectorised root-find for all binding hosts at once: each host's
:math:`\mu_h=\nu+\kappa_h` solves :math:`S_h(\mu_h)=C_h` by its own safeguarded Newton in
:math:`\log\mu_h` on the bracket :math:`[\nu, \bar\mu_h]`, every step one pass over the
pages plus segment sums.  Both loops have fixed iteration caps, so the solver jits and
vmaps; a final Newton correction per binding host and over the other pages makes every
cap and the budget hold to rounding.

Derivatives are exact: a ``jax.custom_jvp`` applies the implicit function theorem to the
active constraints (each binding host's cap and the global budget), so forward and
reverse mode never unroll the root-finders.

Files (used by ``jaxcrawl solve --host-caps FILE``): see :func:`read_host_caps` and
:func:`read_page_hosts`.
"""
from __future__ import annotations

import csv
import functools
import os
import urllib.parse
from typing import Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from .allocate import RootState, _bracket_from_marginals, root_update
from .problem import CrawlProblem, Policy, is_concrete, make_policy
from .solvers import (
    _blc_marginal,
    _blc_rate,
    _lc_marginal,
    _lc_rate,
    _ui_marginal,
    _ui_rate,
)

__all__ = [
    "HostCapSolution",
    "lambda_crawl_with_host_caps",
    "binary_lambda_crawl_with_host_caps",
    "solve_with_host_caps",
    "read_host_caps",
    "read_page_hosts",
    "host_index",
    "hosts_from_dataset",
    "solver_from_caps_file",
]


class HostCapSolution(NamedTuple):
    """Result of a host-capped solve.

    Attributes:
      policy: the :class:`~jaxcrawl.problem.Policy` (``dual`` is the global multiplier ν:
        the marginal utility of one more unit of global bandwidth).
      host_dual: ``(..., H)`` host multipliers κ_h >= 0: the marginal utility of one more
        unit of host h's cap; 0 for hosts whose cap does not bind.
      host_rate: ``(..., H)`` total crawl rate of each host's pages.
      binding: ``(..., H)`` bool, hosts whose cap binds (κ_h > 0 or total at the cap).
      num_steps: ``(...)`` int32 root-finding passes: outer (global ν) plus inner (all
        hosts at once).
    """

    policy: Policy
    host_dual: jax.Array
    host_rate: jax.Array
    binding: jax.Array
    num_steps: jax.Array


def _default_rtol(dtype):
    return 8.0 * float(jnp.finfo(dtype).eps)


def _roots(f_and_df, za, zb, done0, max_steps, tol):
    """Vectorised safeguarded Newton (rtsafe) for independent nonincreasing f_j(z_j) = 0.

    ``f(za) >= 0 >= f(zb)`` elementwise; elements with ``done0`` are not iterated.  Each
    step is :func:`jaxcrawl.allocate.root_update` applied elementwise (the same update as
    the global dual's), frozen for finished elements.  The loop stops when every element
    has ``|f| <= tol`` or a bracket of a few ulps, or after ``max_steps`` passes.
    """
    init = RootState(za, zb, jnp.where(done0, za, 0.5 * (za + zb)), jnp.abs(zb - za),
                     jnp.asarray(0, jnp.int32), done0)

    def body(s):
        f, df = f_and_df(s.z)
        new = root_update(s, f, df, False, tol)
        keep = lambda n, o: jnp.where(s.done, o, n)  # noqa: E731
        return RootState(keep(new.za, s.za), keep(new.zb, s.zb), keep(new.z, s.z),
                         keep(new.dz_old, s.dz_old), new.k, s.done | new.done)

    final = jax.lax.while_loop(lambda s: jnp.any(~s.done) & (s.k < max_steps), body, init)
    return final.z, final.k


def _page_eval(rate_fn, params, d, lower, upper):
    """Clipped allocation at per-page duals ``d``, its d/d(dual) (free pages) and masks."""
    phi, dphi = jax.jvp(lambda v: rate_fn(v, params), (d,), (jnp.ones_like(d),))
    at_lo = phi <= lower
    at_hi = phi >= upper
    free = ~(at_lo | at_hi)
    x = jnp.where(at_lo, lower, jnp.where(at_hi, upper, phi))
    dx = jnp.where(free & jnp.isfinite(dphi), dphi, 0.0)
    return x, dx, free, at_lo, at_hi


def _solve_impl(rate_fn, marginal_fn, cfg, params, budget, lower, upper, host, cap):
    max_steps, inner_steps, rtol = cfg
    dtype = budget.dtype
    n = lower.shape[-1]
    H = cap.shape[-1]
    has_host = (host >= 0) & (host < H)
    seg = jnp.where(has_host, host, H)
    hidx = jnp.where(has_host, host, 0)
    tiny = jnp.finfo(dtype).tiny

    def host_sum(v):
        return jax.ops.segment_sum(v, seg, num_segments=H + 1)[:H]

    def global_parts(nu):
        x, dx, *_ = _page_eval(rate_fn, params, jnp.full((n,), nu, dtype), lower, upper)
        s = host_sum(x)
        ds = host_sum(dx)
        bind = s > cap
        g = jnp.sum(jnp.where(has_host, 0.0, x)) + jnp.sum(jnp.where(bind, cap, s))
        dg = jnp.sum(jnp.where(has_host, 0.0, dx)) + jnp.sum(jnp.where(bind, 0.0, ds))
        return g, dg

    # ---- outer bracket: [a, b] in nu with G(a) >= R >= G(b)
    a, b = _bracket_from_marginals(marginal_fn, params, budget, lower, upper, n)
    a = jnp.maximum(jnp.asarray(a, dtype), tiny)
    b = jnp.maximum(jnp.asarray(b, dtype), a)  # caps only lower G, so G(b) <= R still

    def widen_cond(s):
        a, k = s
        return (global_parts(a)[0] < budget) & (k < 64) & (a > 16 * tiny)

    a, _ = jax.lax.while_loop(widen_cond, lambda s: (s[0] / 16.0, s[1] + 1), (a, 0))

    def outer_f(z):
        nu = jnp.exp(z[0])
        g, dg = global_parts(nu)
        return jnp.reshape(g - budget, (1,)), jnp.reshape(dg * nu, (1,))

    tol = rtol * jnp.abs(budget)
    z, k_out = _roots(outer_f, jnp.log(a)[None], jnp.log(b)[None], jnp.zeros((1,), bool),
                      max_steps, tol)
    nu = jnp.exp(z[0])

    # ---- inner: every binding host's mu_h = nu + kappa_h, all at once
    x_nu, *_ = _page_eval(rate_fn, params, jnp.full((n,), nu, dtype), lower, upper)
    s_nu = host_sum(x_nu)
    bind = s_nu > cap
    n_h = host_sum(jnp.ones((n,), dtype))
    lo_h = host_sum(lower)
    share = (cap - lo_h) / jnp.maximum(n_h, 1.0)
    xbar = lower + jnp.where(has_host, share[hidx], 0.0)
    movable = has_host & (xbar < upper)
    m = marginal_fn(jnp.where(movable, xbar, 1.0), params)
    m = jnp.where(movable & jnp.isfinite(m), m, -jnp.inf)
    mu_hi = jax.ops.segment_max(m, seg, num_segments=H + 1)[:H]
    mu_hi = jnp.maximum(jnp.where(jnp.isfinite(mu_hi), mu_hi, nu), nu)
    bind_page = has_host & bind[hidx]

    def inner_f(zh):
        muh = jnp.exp(zh)
        d = jnp.where(bind_page, muh[hidx], nu)
        x, dx, *_ = _page_eval(rate_fn, params, d, lower, upper)
        return host_sum(x) - cap, host_sum(dx) * muh

    z_h, k_in = _roots(inner_f, jnp.full((H,), jnp.log(nu)), jnp.log(mu_hi), ~bind,
                       inner_steps, rtol * jnp.where(bind, cap, 1.0))
    mu = jnp.where(bind, jnp.exp(z_h), nu)

    # ---- final allocation and Newton corrections so that caps and budget hold to rounding
    d = jnp.where(bind_page, mu[hidx], nu)
    x, dx, *_ = _page_eval(rate_fn, params, d, lower, upper)
    w = -dx
    r_h = cap - host_sum(x)
    w_h = host_sum(jnp.where(bind_page, w, 0.0))
    corr_h = jnp.where(bind & (w_h > 0), r_h / jnp.where(w_h > 0, w_h, 1.0), 0.0)
    x = x + jnp.where(bind_page, corr_h[hidx] * w, 0.0)
    r = budget - jnp.sum(x)
    w_g = jnp.sum(jnp.where(bind_page, 0.0, w))
    corr = jnp.where(w_g > 0, r / jnp.where(w_g > 0, w_g, 1.0), 0.0)
    x = x + jnp.where(bind_page, 0.0, corr * w)
    x = jnp.clip(x, lower, upper)
    s = host_sum(x)
    scale = jnp.where(s > cap, cap / jnp.where(s > 0, s, 1.0), 1.0)
    x = jnp.where(has_host, x * scale[hidx], x)
    kappa = jnp.where(bind, mu - nu, 0.0)
    return x, nu, kappa, (k_out + k_in).astype(dtype)


@functools.partial(jax.custom_jvp, nondiff_argnums=(0, 1, 2))
def _solve(rate_fn, marginal_fn, cfg, params, budget, lower, upper, host, cap):
    return _solve_impl(rate_fn, marginal_fn, cfg, params, budget, lower, upper, host, cap)


@_solve.defjvp
def _solve_jvp(rate_fn, marginal_fn, cfg, primals, tangents):
    params, budget, lower, upper, host, cap = primals
    dparams, dbudget, dlower, dupper, _, dcap = tangents
    x, nu, kappa, steps = _solve(rate_fn, marginal_fn, cfg, params, budget, lower, upper,
                                 host, cap)
    nu = jax.lax.stop_gradient(nu)
    kappa = jax.lax.stop_gradient(kappa)
    n = x.shape[-1]
    H = cap.shape[-1]
    has_host = (host >= 0) & (host < H)
    seg = jnp.where(has_host, host, H)
    hidx = jnp.where(has_host, host, 0)
    host_sum = lambda v: jax.ops.segment_sum(v, seg, num_segments=H + 1)[:H]  # noqa: E731
    bind = kappa > 0
    bind_page = has_host & bind[hidx]
    d = jnp.where(bind_page, (nu + kappa)[hidx], nu)
    _, dphi_dd, free, at_lo, at_hi = _page_eval(rate_fn, params, d, lower, upper)
    _, dphi_dth = jax.jvp(lambda p: rate_fn(d, p), (params,), (dparams,))
    dphi_dth = jnp.where(free, jnp.broadcast_to(dphi_dth, (n,)), 0.0)
    dlo = jnp.broadcast_to(dlower, (n,))
    dhi = jnp.broadcast_to(dupper, (n,))
    dbound = jnp.where(at_lo, dlo, jnp.where(at_hi, dhi, 0.0))
    fixed = dbound + dphi_dth  # the part of dx that does not depend on d(dual)
    dcap_b = jnp.where(bind, dcap, 0.0)
    num_h = dcap_b - host_sum(jnp.where(bind_page, fixed, 0.0))
    den_h = host_sum(jnp.where(bind_page, dphi_dd, 0.0))
    dmu = jnp.where(bind & (den_h != 0), num_h / jnp.where(den_h != 0, den_h, 1.0), 0.0)
    num = dbudget - jnp.sum(dcap_b) - jnp.sum(jnp.where(bind_page, 0.0, fixed))
    den = jnp.sum(jnp.where(bind_page, 0.0, dphi_dd))
    dnu = jnp.where(den != 0, num / jnp.where(den != 0, den, 1.0), 0.0)
    dd = jnp.where(bind_page, dmu[hidx], dnu)
    dx = jnp.where(free, dphi_dth + dphi_dd * dd, dbound)
    dkappa = jnp.where(bind, dmu - dnu, 0.0)
    return (x, nu, kappa, steps), (dx, dnu, dkappa, jnp.zeros_like(steps))


_solve_jit = jax.jit(_solve, static_argnums=(0, 1, 2))


# --------------------------------------------------------------------------- objectives
def _delay_rate(nu, params):
    zeta, xi = params
    return jnp.sqrt(zeta) * jnp.sqrt(xi) * jax.lax.rsqrt(nu)


def _delay_marginal(x, params):
    zeta, xi = params
    return zeta * xi / jnp.square(x)


_OBJECTIVES = ("harmonic", "binary", "binary-epsilon", "delay", "uniform")


def _setup(problem, objective, epsilon):
    """(rate_fn, marginal_fn, params, lower, upper, on_signal) of an objective."""
    mu, lam, comp = problem.importance, problem.change_rate, problem.complete
    n = mu.shape[-1]
    if objective == "harmonic":
        return (_lc_rate, _lc_marginal, (mu, lam, comp), jnp.zeros_like(mu),
                jnp.where(comp, lam, jnp.inf), comp)
    no_signal = jnp.zeros_like(comp)
    if objective in ("binary", "binary-epsilon"):
        eps = jnp.asarray(epsilon if objective == "binary-epsilon" else 0.0, mu.dtype)
        lower = jnp.full_like(mu, 1.0) * (eps * problem.bandwidth / n)
        return _blc_rate, _blc_marginal, (mu, lam), lower, jnp.full_like(mu, jnp.inf), no_signal
    if objective == "delay":
        return (_delay_rate, _delay_marginal, (mu, lam), jnp.zeros_like(mu),
                jnp.full_like(mu, jnp.inf), no_signal)
    if objective == "uniform":
        return (_ui_rate, _ui_marginal, (mu, lam), jnp.zeros_like(mu),
                jnp.full_like(mu, jnp.inf), no_signal)
    raise ValueError(
        f"objective must be one of {_OBJECTIVES} with host caps; got {objective!r} "
        "(harmonic-approx is not a separable per-page optimum, so it has no capped form)")


def _check_hosts(problem, host_id, host_cap, lower, upper):
    """Eager validation of host ids, caps and feasibility (concrete values only)."""
    n = problem.importance.shape[-1]
    hid = np.asarray(host_id)
    cap = np.asarray(host_cap, np.float64)
    if hid.shape != (n,):
        raise ValueError(f"host_id must have shape ({n},) (one host per page); got {hid.shape}")
    if not np.issubdtype(hid.dtype, np.integer):
        raise ValueError(f"host_id must be an integer array; got dtype {hid.dtype}")
    if cap.ndim < 1:
        raise ValueError("host_cap must be an array with one cap per host (last axis)")
    H = cap.shape[-1]
    if np.any(hid < -1) or np.any(hid >= H):
        bad = hid[(hid < -1) | (hid >= H)][0]
        raise ValueError(
            f"host_id must be -1 (no host) or in [0, {H}) for {H} caps; found {bad}")
    if np.any(np.isnan(cap)) or np.any(cap <= 0):
        raise ValueError("host_cap must be > 0 for every host (inf = uncapped); found "
                         f"{cap[np.isnan(cap) | (cap <= 0)].ravel()[0]!r}")
    lo = np.broadcast_to(np.asarray(lower, np.float64), problem.importance.shape)
    hi = np.broadcast_to(np.asarray(upper, np.float64), problem.importance.shape)
    R = np.broadcast_to(np.asarray(problem.bandwidth, np.float64), problem.importance.shape[:-1])
    rows = int(np.prod(problem.importance.shape[:-1], dtype=np.int64))
    lo2 = lo.reshape(rows, n)
    hi2 = hi.reshape(rows, n)
    cap2 = np.broadcast_to(cap, problem.importance.shape[:-1] + (H,)).reshape(rows, H)
    has = hid >= 0
    for l, u, c, r in zip(lo2, hi2, cap2, R.reshape(-1)):
        lo_h = np.bincount(hid[has], weights=l[has], minlength=H)
        hi_h = np.bincount(hid[has], weights=u[has], minlength=H)  # inf where unbounded
        if np.any(lo_h > c * (1 + 1e-12)):
            h = int(np.flatnonzero(lo_h > c * (1 + 1e-12))[0])
            raise ValueError(
                f"host {h}: cap {c[h]!r} is below the sum of its pages' lower bounds "
                f"{lo_h[h]!r} (e.g. BLC-epsilon floors): infeasible")
        most = np.sum(np.where(has, 0.0, u)) + np.sum(np.minimum(c, hi_h))
        if r > most * (1 + 1e-12):
            raise ValueError(
                f"bandwidth {r!r} exceeds the most the host caps allow ({most!r}: uncapped "
                "pages' upper bounds plus each host's min(cap, sum of its pages' upper "
                "bounds)); lower the bandwidth or raise the caps")
        if r < np.sum(l) * (1 - 1e-12):
            raise ValueError(f"bandwidth {r!r} is below the sum of the lower bounds {np.sum(l)!r}")


def _batched_solve(rate_fn, marginal_fn, cfg, params, budget, lower, upper, host, cap):
    if lower.ndim == 1:
        return _solve_jit(rate_fn, marginal_fn, cfg, params, budget, lower, upper, host, cap)
    batch = lower.shape[:-1]
    H = cap.shape[-1]
    cap_b = jnp.broadcast_to(cap, batch + (H,))
    budget_b = jnp.broadcast_to(budget, batch)
    params_b = jax.tree_util.tree_map(lambda a: jnp.broadcast_to(a, lower.shape), params)
    flat = lambda a, tail: a.reshape((-1,) + tail)  # noqa: E731
    n = lower.shape[-1]
    out = jax.vmap(lambda p, b, lo, up, c: _solve_jit(rate_fn, marginal_fn, cfg, p, b, lo, up,
                                                      host, c))(
        jax.tree_util.tree_map(lambda a: flat(a, (n,)), params_b), budget_b.reshape(-1),
        flat(lower, (n,)), flat(jnp.broadcast_to(upper, lower.shape), (n,)), flat(cap_b, (H,)))
    x, nu, kappa, steps = out
    return (x.reshape(batch + (n,)), nu.reshape(batch), kappa.reshape(batch + (H,)),
            steps.reshape(batch))


def solve_with_host_caps(problem: CrawlProblem, host_id, host_cap, objective: str = "harmonic",
                         *, epsilon=0.4, max_steps: int = 100, inner_steps: int = 100,
                         rtol: Optional[float] = None) -> HostCapSolution:
    r"""Optimal crawl rates for ``objective`` under the bandwidth and per-host caps.

    Solves SIGIR-19's politeness-constrained problem (module docstring) exactly, by the
    nested KKT conditions :math:`x_i=\mathrm{clip}(\varphi_i(\nu+\kappa_{h(i)}))`:

    * ``"harmonic"``: LambdaCrawl (NeurIPS-19 Alg. 1-3; Prop. 2 and 5 rate functions),
      complete pages crawled on signals with :math:`x_i\le\lambda_i`;
    * ``"binary"`` / ``"binary-epsilon"``: BinaryLambdaCrawl / BLCε (Azar et al.; L2C
      eq. 5; NeurIPS-19 §9.3), floor :math:`\varepsilon R/n` per page;
    * ``"delay"``: accumulated delay (L2C App. F eq. 25-26), :math:`\varphi=\sqrt{\zeta\xi/\nu}`;
    * ``"uniform"``: uniform-interval freshness G (L2C App. H, I.2).

    Args:
      problem: the pages; leading batch axes are vmapped (``host_id`` is shared,
        ``host_cap`` may carry the same batch axes).
      host_id: ``(n,)`` int host index of every page in ``[0, H)``, or ``-1`` for pages
        with no host constraint.
      host_cap: ``(H,)`` (or ``(..., H)``) cap on each host's total crawl rate, > 0;
        ``inf`` = uncapped.
      epsilon: BLCε floor fraction (``"binary-epsilon"`` only).
      max_steps, inner_steps: iteration caps of the global and the per-host root-finds.
      rtol: stop when the budget (caps) residual is within ``rtol`` of the budget (cap);
        default 8 eps.  The final Newton correction makes them exact to rounding.

    Returns:
      :class:`HostCapSolution`.

    Raises:
      ValueError: (eagerly) bad shapes or ids, a cap <= 0 or NaN, an infeasible problem
      (a cap below its pages' floors, or a bandwidth above what the caps allow).
    """
    if not isinstance(problem, CrawlProblem):
        raise TypeError(f"problem must be a jaxcrawl.CrawlProblem, got {type(problem).__name__}")
    rate_fn, marginal_fn, params, lower, upper, on_signal = _setup(problem, objective, epsilon)
    host = jnp.asarray(host_id)
    dtype = problem.importance.dtype
    cap = jnp.asarray(host_cap)
    if not jnp.issubdtype(cap.dtype, jnp.floating):
        cap = cap.astype(dtype)
    cap = cap.astype(dtype)
    if is_concrete(problem, host, cap, lower):
        if objective == "binary-epsilon":
            e = np.asarray(epsilon)
            if not np.all(np.isfinite(e)) or np.any(e < 0) or np.any(e > 1):
                raise ValueError(f"epsilon must be in [0, 1]; got {epsilon}")
        _check_hosts(problem, host, cap, lower, upper)
    host = host.astype(jnp.int32)
    no_hosts = cap.shape[-1] == 0
    if no_hosts:  # one uncapped dummy host keeps the gathers well-formed
        cap = jnp.full(cap.shape[:-1] + (1,), jnp.inf, dtype)
    budget = jnp.asarray(problem.bandwidth, dtype)
    cfg = (int(max_steps), int(inner_steps),
           float(_default_rtol(dtype) if rtol is None else rtol))
    x, nu, kappa, steps = _batched_solve(rate_fn, marginal_fn, cfg, params, budget, lower,
                                         upper, host, cap)
    H = cap.shape[-1]
    has_host = (host >= 0) & (host < H)
    seg = jnp.where(has_host, host, H)
    if x.ndim == 1:
        host_rate = jax.ops.segment_sum(x, seg, num_segments=H + 1)[:H]
    else:
        host_rate = jax.vmap(lambda v: jax.ops.segment_sum(v, seg, num_segments=H + 1)[:H])(
            x.reshape(-1, x.shape[-1])).reshape(x.shape[:-1] + (H,))
    steps = jax.lax.stop_gradient(steps).astype(jnp.int32)
    policy = make_policy(problem, x, nu, num_steps=steps, on_signal=on_signal)
    policy = policy._replace(residual=jax.lax.stop_gradient(policy.residual))
    binding = (kappa > 0) | (host_rate >= cap * (1 - 4 * jnp.finfo(dtype).eps))
    if no_hosts:
        kappa, host_rate, binding = (a[..., :0] for a in (kappa, host_rate, binding))
    return HostCapSolution(policy=policy, host_dual=kappa, host_rate=host_rate,
                           binding=binding, num_steps=steps)


def lambda_crawl_with_host_caps(problem: CrawlProblem, host_id, host_cap, *,
                                max_steps: int = 100, inner_steps: int = 100,
                                rtol: Optional[float] = None) -> HostCapSolution:
    r"""LambdaCrawl (NeurIPS-19 Alg. 1-3, harmonic staleness) under per-host caps.

    Maximises NeurIPS-19 eq. 8's utility
    :math:`\sum_{W^-}\mu\ln\frac{\rho}{\lambda+\rho}+\sum_{W^\circ}\mu\ln p` subject to
    :math:`\sum\rho=R` and :math:`\sum_{i\in h}\rho_i\le C_h` (SIGIR-19's politeness
    constraints).  KKT: :math:`\rho_i=\varphi_i(\nu+\kappa_{h(i)})` with Prop. 2's
    :math:`\varphi` for incomplete pages and Prop. 5's :math:`\min(\lambda,\mu/\cdot)` for
    complete ones (:func:`jaxcrawl.solvers._lc_rate`).  With no binding cap it equals
    :func:`jaxcrawl.lambda_crawl`.  See :func:`solve_with_host_caps` for the arguments.
    """
    return solve_with_host_caps(problem, host_id, host_cap, "harmonic", max_steps=max_steps,
                                inner_steps=inner_steps, rtol=rtol)


def binary_lambda_crawl_with_host_caps(problem: CrawlProblem, host_id, host_cap, epsilon=0.0,
                                       *, max_steps: int = 100, inner_steps: int = 100,
                                       rtol: Optional[float] = None) -> HostCapSolution:
    r"""BinaryLambdaCrawl / BLCε (Azar et al.; L2C eq. 5; NeurIPS-19 §9.3) under per-host caps.

    Maximises :math:`\sum_i\zeta_i\rho_i/(\rho_i+\xi_i)` s.t. :math:`\sum\rho=R`,
    :math:`\sum_{i\in h}\rho_i\le C_h`, :math:`\rho_i\ge\varepsilon R/n`.  KKT:
    :math:`\rho_i=\max(\varepsilon R/n, \sqrt{\zeta_i\xi_i/(\nu+\kappa_{h(i)})}-\xi_i)`.
    With no binding cap it equals :func:`jaxcrawl.binary_lambda_crawl`.
    """
    objective = "binary-epsilon" if not (is_concrete(epsilon) and np.all(np.asarray(epsilon) == 0)) \
        else "binary"
    return solve_with_host_caps(problem, host_id, host_cap, objective, epsilon=epsilon,
                                max_steps=max_steps, inner_steps=inner_steps, rtol=rtol)


# --------------------------------------------------------------------------- files
def _data_lines(path):
    """(line number, fields) of the non-blank, non-comment CSV lines, and the comments."""
    if not os.path.exists(path):
        raise ValueError(f"{path}: no such file")
    rows, comments = [], []
    with open(path, newline="") as fh:
        for lineno, line in enumerate(fh, start=1):
            text = line.strip()
            if not text:
                continue
            if text.startswith("#"):
                comments.append((lineno, text[1:].strip()))
                continue
            rows.append((lineno, next(csv.reader([line]))))
    return rows, comments


def read_host_caps(path: str):
    """Read a host-caps CSV.

    Format: a header line ``host_id,cap``, then one row per host: ``host_id`` any non-empty
    string (matched against the page->host mapping), ``cap`` the host's maximum total
    crawl rate (crawls per unit time, same unit as the bandwidth), a number > 0 or
    ``inf`` (uncapped).  Blank lines and lines starting with ``#`` are ignored, except a
    comment ``# pages: FILE`` which names the page->host mapping file (relative paths are
    relative to the caps file's directory).

    Returns:
      ``(host_ids, caps, pages_path)``: object array of host ids, float64 caps, and the
      mapping path named in the file or None.

    Raises:
      ValueError: naming the file and line, for a missing/wrong header, a wrong number of
      fields, an empty host id, a cap that is not a number > 0, or a duplicate host.
    """
    rows, comments = _data_lines(path)
    pages_path = None
    for lineno, text in comments:
        key, sep, value = text.partition(":")
        if sep and key.strip().lower() == "pages":
            value = value.strip()
            if not value:
                raise ValueError(f"{path}:{lineno}: '# pages:' needs a file name")
            pages_path = value if os.path.isabs(value) else os.path.join(
                os.path.dirname(os.path.abspath(path)), value)
    if not rows:
        raise ValueError(f"{path}: empty file (expected a header host_id,cap)")
    lineno, header = rows[0]
    if [h.strip().lower() for h in header] != ["host_id", "cap"]:
        raise ValueError(f"{path}:{lineno}: header must be 'host_id,cap', got {','.join(header)!r}")
    ids, caps, seen = [], [], {}
    for lineno, row in rows[1:]:
        if len(row) != 2:
            raise ValueError(f"{path}:{lineno}: expected 2 fields host_id,cap, got {len(row)}: {row!r}")
        hid = row[0].strip()
        if not hid:
            raise ValueError(f"{path}:{lineno}: empty host_id")
        try:
            c = float(row[1])
        except ValueError:
            raise ValueError(f"{path}:{lineno}: cap {row[1]!r} is not a number") from None
        if np.isnan(c) or c <= 0:
            raise ValueError(f"{path}:{lineno}: cap must be > 0 (or inf), got {row[1]!r}")
        if hid in seen:
            raise ValueError(f"{path}:{lineno}: duplicate host_id {hid!r} (first on line {seen[hid]})")
        seen[hid] = lineno
        ids.append(hid)
        caps.append(c)
    return np.asarray(ids, dtype=object), np.asarray(caps, np.float64), pages_path


def read_page_hosts(path: str):
    """Read a page->host mapping CSV.

    Format: a header line ``page_id,host_id``, then one row per page; both fields are
    non-empty strings.  Blank lines and ``#`` comments are ignored.  A page may appear
    once.

    Returns:
      ``(page_ids, host_ids)`` object arrays.

    Raises:
      ValueError: naming the file and line, for a wrong header, a wrong number of fields,
      an empty field, or a duplicate page.
    """
    rows, _ = _data_lines(path)
    if not rows:
        raise ValueError(f"{path}: empty file (expected a header page_id,host_id)")
    lineno, header = rows[0]
    if [h.strip().lower() for h in header] != ["page_id", "host_id"]:
        raise ValueError(f"{path}:{lineno}: header must be 'page_id,host_id', got {','.join(header)!r}")
    pages, hosts, seen = [], [], {}
    for lineno, row in rows[1:]:
        if len(row) != 2:
            raise ValueError(f"{path}:{lineno}: expected 2 fields page_id,host_id, got {len(row)}: {row!r}")
        pid, hid = row[0].strip(), row[1].strip()
        if not pid or not hid:
            raise ValueError(f"{path}:{lineno}: empty {'page_id' if not pid else 'host_id'}")
        if pid in seen:
            raise ValueError(f"{path}:{lineno}: duplicate page_id {pid!r} (first on line {seen[pid]})")
        seen[pid] = lineno
        pages.append(pid)
        hosts.append(hid)
    return np.asarray(pages, dtype=object), np.asarray(hosts, dtype=object)


def host_index(page_id, page_host, host_ids, host_caps):
    """Dense host indices for the pages and the caps they index.

    Args:
      page_id: ``(n,)`` the problem's page ids (compared as strings).
      page_host: ``(n,)`` each page's host id (string), or None / "" for no host.
      host_ids, host_caps: from :func:`read_host_caps`.

    Returns:
      ``(host_id, host_cap)``: ``(n,)`` int32 index into ``host_cap`` (``-1``: the page's
      host has no cap row, so it is uncapped), and ``(H,)`` float64 caps of the hosts that
      have at least one page.
    """
    del page_id
    cap_of = {str(h): float(c) for h, c in zip(host_ids, host_caps)}
    used = {}
    idx = np.full(len(page_host), -1, np.int32)
    for i, h in enumerate(page_host):
        if h is None or h == "":
            continue
        h = str(h)
        if h not in cap_of or not np.isfinite(cap_of[h]):
            continue
        j = used.setdefault(h, len(used))
        idx[i] = j
    caps = np.asarray([cap_of[h] for h in used], np.float64)
    return idx, caps


def hosts_from_dataset(host_id, host_constrained, cap):
    """Host constraints from the NeurIPS-19 data set's host table.

    The data set marks each host ``Is_constrained`` (``host_hostid_isconstrained.txt``;
    :class:`jaxcrawl.dataset.CrawlDataset` fields ``host_id`` and ``host_constrained``)
    but gives no cap values, so the caller supplies them.

    Args:
      host_id: ``(n,)`` integer Host_ID per page (-1 unknown).
      host_constrained: ``(n,)`` bool per page.
      cap: a number (the same cap for every constrained host), a dict
        ``{Host_ID: cap}``, or a callable ``(host_ids, pages_per_host) -> caps``.

    Returns:
      ``(host_index, host_cap, host_ids)``: ``(n,)`` int32 dense index (-1 for pages of
      unconstrained or unknown hosts), ``(H,)`` caps and the ``(H,)`` Host_IDs they belong to.
    """
    hid = np.asarray(host_id)
    con = np.asarray(host_constrained, bool)
    if hid.shape != con.shape:
        raise ValueError("host_id and host_constrained must have the same shape")
    sel = con & (hid >= 0)
    ids, inv, counts = np.unique(hid[sel], return_inverse=True, return_counts=True)
    idx = np.full(hid.shape, -1, np.int32)
    idx[sel] = inv.astype(np.int32)
    if callable(cap):
        caps = np.asarray(cap(ids, counts), np.float64)
    elif isinstance(cap, dict):
        missing = [h for h in ids if h not in cap]
        if missing:
            raise ValueError(f"cap: no cap given for constrained host {missing[0]}")
        caps = np.asarray([cap[h] for h in ids], np.float64)
    else:
        caps = np.full(ids.shape, float(cap))
    if caps.shape != ids.shape:
        raise ValueError(f"cap must give one cap per constrained host ({ids.size}); got shape {caps.shape}")
    if np.any(np.isnan(caps)) or np.any(caps <= 0):
        raise ValueError("cap must be > 0 for every constrained host")
    return idx, caps, ids


def _url_host(page_id):
    text = str(page_id)
    if "://" not in text:
        return None
    host = urllib.parse.urlsplit(text).hostname
    return host.lower() if host else None


def solver_from_caps_file(path: str, page_id, objective: str = "harmonic", *,
                          pages_path: Optional[str] = None, epsilon: float = 0.4,
                          unknown_pages: str = "error") -> Callable[[CrawlProblem], Policy]:
    """A ``problem -> Policy`` solver honouring the host caps in ``path`` (``solve --host-caps``).

    The caps file is :func:`read_host_caps`'s ``host_id,cap`` CSV.  Pages are mapped to
    hosts by, in order: ``pages_path`` if given; else the file named by a
    ``# pages: FILE`` comment in the caps file (:func:`read_page_hosts`'s
    ``page_id,host_id`` CSV); else, when every page id is a URL, its host name
    (lower-cased), so a caps file keyed by host names needs no mapping.  Pages whose host
    has no cap row (or an ``inf`` cap) are uncapped.

    Args:
      path: the caps CSV.
      page_id: ``(n,)`` the problem's page ids, in problem order.
      objective: ``"harmonic"``, ``"binary"``, ``"binary-epsilon"``, ``"delay"`` or
        ``"uniform"`` (the names of ``jaxcrawl solve --objective``).
      epsilon: floor fraction for ``"binary-epsilon"``.
      unknown_pages: a mapping row whose page is not in ``page_id``: ``"error"`` (default,
        ValueError naming file and line) or ``"ignore"``.

    Returns:
      A callable ``problem -> Policy`` (the host arrays are bound to it; the solve
      itself is compiled once per shape).
    """
    if objective not in _OBJECTIVES:
        _setup(CrawlProblem(jnp.ones(1), jnp.ones(1), 1.0), objective, epsilon)  # raises
    if unknown_pages not in ("error", "ignore"):
        raise ValueError("unknown_pages must be 'error' or 'ignore'")
    host_ids, caps, named = read_host_caps(path)
    mapping = pages_path or named
    ids = [str(p) for p in np.asarray(page_id).tolist()]
    if mapping is not None:
        m_pages, m_hosts = read_page_hosts(mapping)
        pos = {p: i for i, p in enumerate(ids)}
        page_host = [None] * len(ids)
        rows, _ = _data_lines(mapping)
        for (lineno, _row), p, h in zip(rows[1:], m_pages, m_hosts):
            i = pos.get(p)
            if i is None:
                if unknown_pages == "error":
                    raise ValueError(f"{mapping}:{lineno}: page_id {p!r} is not one of the problem's pages")
                continue
            page_host[i] = h
    else:
        page_host = [_url_host(p) for p in ids]
        if any(h is None for h in page_host):
            raise ValueError(
                f"{path}: no page->host mapping: add a line '# pages: FILE' naming a "
                "page_id,host_id CSV (or use URLs as page ids)")
    hidx, hcap = host_index(ids, page_host, host_ids, caps)
    host_arr = jnp.asarray(hidx)
    cap_arr = np.asarray(hcap)

    def solve(problem: CrawlProblem) -> Policy:
        c = jnp.asarray(cap_arr, problem.importance.dtype)
        if c.shape[0] == 0:
            c = jnp.zeros((0,), problem.importance.dtype)
        return solve_with_host_caps(problem, host_arr, c, objective, epsilon=epsilon).policy

    return solve
