r"""Freshness measured from the server's truth, and the closed forms' prediction beside it.

:func:`measure` takes every page's true change times and the times a crawler fetched it and
integrates, exactly, the papers' two objectives over a window ``[start, end]``:

* harmonic staleness (NeurIPS-19 eq. 1-2): :math:`\frac1n\sum_i\mu_i\frac1{T}\int H(N_i(t))\,dt`,
  :math:`N_i(t)` the number of changes since the last fetch before :math:`t` and
  :math:`H(n)=\sum_{k\le n}1/k` -- the page average of :func:`jaxcrawl.harmonic_cost`;
* binary freshness (L2C eq. 5, App. H): :math:`\frac1n\sum_i\mu_i\frac1T\int 1\{N_i(t)=0\}\,dt`,
  the fraction of time a page's copy is current -- :func:`jaxcrawl.binary_freshness` divided by
  the number of pages.

:func:`predict` gives the same two numbers for pages crawled at given rates, from the closed
forms: periodic crawls (a timetable, :func:`jaxcrawl.timetable.periodic_harmonic_cost` and
:func:`~jaxcrawl.timetable.periodic_binary_cost`), Poisson crawls (:func:`jaxcrawl.harmonic_cost`,
:func:`jaxcrawl.binary_cost`), and pages crawled on their change signals (NeurIPS-19 Prop. 4 and
supplement eq. 13).
"""
from __future__ import annotations

import os
import sqlite3
from collections.abc import Mapping, Sequence

import jax.numpy as jnp
import numpy as np

from ..core.objectives import binary_cost, harmonic_cost
from ..core.problem import CrawlProblem
from ..timetable import periodic_binary_cost, periodic_harmonic_cost

__all__ = ["measure", "predict", "read_fetches"]

#: statuses of a fetch that leaves the crawler holding the page's current version
OK_STATUSES = (200, 304)


def read_fetches(state: str | os.PathLike, urls: Sequence[str] | None = None) -> dict[str, np.ndarray]:
    """``{url: sorted fetch times}`` of the successful fetches (status 200 or 304) in the
    ``fetches`` table of a crawl state (SQLite); ``urls`` fixes the keys (a url never fetched
    gets an empty array).  The database is opened read-only."""
    path = os.fspath(state)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"crawl state {path!r} does not exist")
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = con.execute(
            "SELECT url, fetched_at FROM fetches WHERE status IN (?, ?) ORDER BY url, fetched_at", OK_STATUSES
        ).fetchall()
    except sqlite3.DatabaseError as err:
        raise ValueError(f"crawl state {path!r} has no readable fetches table: {err}") from None
    finally:
        con.close()
    out: dict[str, list] = {} if urls is None else {u: [] for u in urls}
    for url, at in rows:
        if urls is None or url in out:
            out.setdefault(url, []).append(at)
    return {u: np.asarray(t, np.float64) for u, t in out.items()}


def _align(name, value, keys, n):
    if isinstance(value, Mapping):
        if keys is None:
            raise ValueError(f"{name} is a mapping by url, so truth must be one too")
        unknown = set(value).difference(keys)
        if unknown:
            raise ValueError(f"{name} has urls that truth does not, e.g. {sorted(unknown)[0]!r}")
        return [np.asarray(value.get(k, ()), np.float64).ravel() for k in keys]
    seq = [np.asarray(v, np.float64).ravel() for v in value]
    if len(seq) != n:
        raise ValueError(f"{name} must hold one array per page ({n}); got {len(seq)}")
    return seq


def _flatten(arrays):
    counts = np.array([a.shape[0] for a in arrays], np.int64)
    flat = np.concatenate(arrays) if arrays else np.zeros(0)
    return flat, np.repeat(np.arange(len(arrays)), counts)


def measure(truth, fetches, *, start: float, end: float, importance=None) -> dict:
    r"""Time-averaged harmonic staleness and binary freshness of a crawl over ``[start, end]``.

    Args:
      truth: every page's change times -- ``{url: times}`` (e.g. :meth:`LocalWeb.truth`) or a
        sequence of arrays, one per page.
      fetches: every page's successful fetch times -- ``{url: times}``, a sequence aligned
        with ``truth``, or the path of a crawl state (read by :func:`read_fetches`).
      start, end: the window (same clock as the times), ``start < end``.
      importance: optional ``(n,)`` page weights :math:`\mu` (default 1).

    Before its first fetch a page's copy is taken as its initial version (every change so
    far counts): start the window after every page has been fetched to measure a
    crawler's steady state.  The integrals are exact (piecewise constant between events).

    Returns:
      dict with ``harmonic_staleness`` and ``binary_freshness`` (page averages, the
      normalisation of :func:`jaxcrawl.harmonic_cost` and :func:`jaxcrawl.binary_freshness`
      ``/ n``), ``harmonic_per_page`` and ``fresh_per_page`` (unweighted per-page time
      averages), ``fetches_per_page`` (fetches inside the window) and ``num_fetches``.
    """
    if not (np.isfinite(start) and np.isfinite(end) and start < end):
        raise ValueError(f"start and end must be finite with start < end; got {start}, {end}")
    keys = list(truth) if isinstance(truth, Mapping) else None
    n = len(truth)
    if n == 0:
        raise ValueError("truth must hold at least one page")
    changes = _align("truth", truth.values() if keys is not None else truth, None, n)
    if isinstance(fetches, (str, os.PathLike)):
        if keys is None:
            raise ValueError("fetches is a crawl state (by url), so truth must be a mapping by url")
        fetches = read_fetches(fetches, keys)
    fetched = _align("fetches", fetches, keys, n)
    mu = np.ones(n) if importance is None else np.asarray(importance, np.float64)
    if mu.shape != (n,) or not np.all(np.isfinite(mu) & (mu >= 0)):
        raise ValueError(f"importance must be ({n},) finite values >= 0; got shape {mu.shape}")
    ct, cp = _flatten(changes)
    ft, fp = _flatten(fetched)
    if not (np.all(np.isfinite(ct)) and np.all(np.isfinite(ft))):
        raise ValueError("change and fetch times must be finite")
    pages = np.arange(n)
    # events: changes (kind 0, ordered before a fetch at the same instant), fetches (1) and a
    # marker at start and at end for every page (2), so that every page's window is covered
    time = np.concatenate([ct, ft, np.full(n, float(start)), np.full(n, float(end))])
    page = np.concatenate([cp, fp, pages, pages])
    kind = np.concatenate([np.zeros(ct.shape, np.int8), np.ones(ft.shape, np.int8), np.full(2 * n, 2, np.int8)])
    order = np.lexsort((kind, time, page))
    time, page, kind = time[order], page[order], kind[order]
    is_change = (kind == 0).astype(np.int64)
    total = np.cumsum(is_change)
    first = np.ones(page.shape, bool)
    first[1:] = page[1:] != page[:-1]
    # N after each event: changes since the page's last fetch (or since its first event)
    reset = np.where(kind == 1, total, np.where(first, total - is_change, -1))
    unseen = total - np.maximum.accumulate(reset)
    last = np.ones(page.shape, bool)
    last[:-1] = page[1:] != page[:-1]
    nxt = np.where(last, time, np.roll(time, -1))
    dur = np.clip(np.minimum(nxt, end) - np.maximum(time, start), 0.0, None)
    harmonic_table = np.concatenate([[0.0], np.cumsum(1.0 / np.arange(1, max(int(unseen.max()), 1) + 1))])
    span = float(end) - float(start)
    harm = np.bincount(page, harmonic_table[unseen] * dur, minlength=n) / span
    fresh = np.bincount(page, (unseen == 0) * dur, minlength=n) / span
    inside = (ft >= start) & (ft <= end)
    per_fetch = np.bincount(fp[inside], minlength=n)
    return {
        "harmonic_staleness": float(np.mean(mu * harm)),
        "binary_freshness": float(np.mean(mu * fresh)),
        "harmonic_per_page": harm,
        "fresh_per_page": fresh,
        "fetches_per_page": per_fetch,
        "num_fetches": int(per_fetch.sum()),
    }


def predict(change_rate, rate, *, importance=None, on_signal=None, schedule: str = "periodic") -> dict:
    r"""The closed forms' harmonic staleness and binary freshness of pages crawled at ``rate``.

    Args:
      change_rate: ``(n,)`` Poisson change rates (> 0), per unit time.
      rate: ``(n,)`` crawl rates (>= 0) in the same unit; for a page crawled on its change
        signals, its rate of crawls (``prob * change_rate``).
      importance: optional ``(n,)`` page weights (default 1).
      on_signal: optional ``(n,)`` bool mask of pages crawled on their change signals
        (NeurIPS-19 Prop. 4, supplement eq. 13: :math:`-\mu\ln p` and :math:`\mu p`,
        signals acted on at once).
      schedule: ``"periodic"`` -- the other pages crawled every ``1/rate`` (a timetable:
        :func:`jaxcrawl.timetable.periodic_harmonic_cost`, L2C App. H) -- or ``"poisson"``
        (NeurIPS-19 Prop. 1: :math:`\mu\ln(1+\lambda/\rho)`, supplement eq. 12).

    Returns:
      dict with ``harmonic_staleness`` and ``binary_freshness`` in :func:`measure`'s
      normalisation, and the per-page values ``harmonic_per_page`` and ``fresh_per_page``
      (unweighted).  A page at rate 0 has infinite harmonic staleness.
    """
    lam = np.asarray(change_rate, np.float64)
    rho = np.asarray(rate, np.float64)
    n = lam.shape[0] if lam.ndim == 1 else -1
    if lam.ndim != 1 or n == 0 or not np.all(np.isfinite(lam) & (lam > 0)):
        raise ValueError("change_rate must be a non-empty (n,) array of finite rates > 0")
    if rho.shape != (n,) or not np.all(np.isfinite(rho) & (rho >= 0)):
        raise ValueError(f"rate must be ({n},) finite crawl rates >= 0; got shape {rho.shape}")
    sig = np.zeros(n, bool) if on_signal is None else np.asarray(on_signal, bool)
    if sig.shape != (n,):
        raise ValueError(f"on_signal must be an ({n},) bool mask; got shape {sig.shape}")
    mu = np.ones(n) if importance is None else np.asarray(importance, np.float64)
    if mu.shape != (n,) or not np.all(np.isfinite(mu) & (mu > 0)):
        raise ValueError(f"importance must be ({n},) finite values > 0")
    if schedule not in ("periodic", "poisson"):
        raise ValueError(f"schedule must be 'periodic' or 'poisson'; got {schedule!r}")
    dtype = jnp.result_type(float)
    # the bandwidth is not used by the costs (any value the problem accepts)
    problem = CrawlProblem(jnp.ones(n, dtype), jnp.asarray(lam, dtype), 0.5 * float(lam.min()), complete=sig)
    policy = jnp.asarray(rho, dtype)
    if schedule == "periodic":
        harm = periodic_harmonic_cost(problem, policy, per_page=True)
        stale = periodic_binary_cost(problem, policy, per_page=True)
    else:
        harm = harmonic_cost(problem, policy, per_page=True)
        stale = binary_cost(problem, policy, per_page=True)
    harm = np.asarray(harm, np.float64)
    fresh = 1.0 - np.asarray(stale, np.float64)
    return {
        "harmonic_staleness": float(np.mean(mu * harm)),
        "binary_freshness": float(np.mean(mu * fresh)),
        "harmonic_per_page": harm,
        "fresh_per_page": fresh,
    }
