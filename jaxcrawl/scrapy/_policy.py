"""How the Scrapy component chooses crawl rates: the four policies, host caps, the adaptive rule.

* ``"plan"`` -- :func:`jaxcrawl.solve` of the given change rates (the oracle when they are
  the true ones), solved once;
* ``"learn"`` -- LambdaLearnAndCrawl (NeurIPS-19 Alg. 4): every epoch the change rates are
  re-estimated from the fetch log by the smoothed MLE (Alg. 4 line 11,
  :func:`jaxcrawl.estimators.mle_smoothed`) and the plan re-solved;
* ``"uniform"`` -- every page at the same rate ``budget / n`` (hosts whose caps bind get their
  cap, the rest share what is left equally);
* ``"nutch-adaptive"`` -- Apache Nutch ``AdaptiveFetchSchedule`` at its defaults (the rule of
  :func:`jaxcrawl.learners.heuristic`), its intervals scaled by one factor per epoch so that
  the pages' rates sum to the budget.

Host caps (Kolobov et al., SIGIR-19) come from each host's gap between requests, the larger
of robots.txt ``Crawl-delay`` and Scrapy's ``DOWNLOAD_DELAY``: at most ``seconds_per_day /
gap`` crawls of the host per day.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

POLICIES = ("plan", "learn", "uniform", "nutch-adaptive")


class NutchSettings(NamedTuple):
    """``db.fetch.schedule.adaptive.*`` and ``db.fetch.interval.default`` of
    ``nutch-default.xml``, intervals in days."""

    inc_rate: float = 0.4
    dec_rate: float = 0.2
    min_interval: float = 60.0 / 86400.0
    max_interval: float = 365.0
    sync_delta: bool = True
    sync_delta_rate: float = 0.3
    interval_default: float = 30.0


def _float():
    """The working dtype: float64 when ``jax_enable_x64`` is on, else float32."""
    import jax

    return np.float64 if jax.config.jax_enable_x64 else np.float32


#: The share of a host's request capacity the plan may use: the rest absorbs timing jitter (a host
#: planned at its full capacity could never catch up on a late request).
CAP_SHARE = 0.95


def host_caps(host: np.ndarray, gap_seconds: np.ndarray, seconds_per_day: float, other=None):
    """:class:`jaxcrawl.HostCaps` of pages on hosts with a gap > 0 (``CAP_SHARE`` of
    ``seconds_per_day / gap`` per day, less ``other`` requests per day of the host such as its
    sitemap polls), or ``None`` when no host has a gap."""
    from jaxcrawl import HostCaps

    gap = np.asarray(gap_seconds, np.float64)
    if not np.any(gap > 0):
        return None
    cap = np.where(gap > 0, CAP_SHARE * seconds_per_day / np.where(gap > 0, gap, 1.0), np.inf)
    if other is not None:
        cap = cap - np.where(gap > 0, other, 0.0)
    if np.any(cap <= 0):
        h = int(np.flatnonzero(cap <= 0)[0])
        raise ValueError(f"crawl delay: host {h}'s gap of {gap[h]:g} s leaves no room for page requests beside "
                         "its sitemap polls; poll less often (sitemap_days)")
    return HostCaps(np.asarray(host, np.int32), cap)


def _check_capacity(caps, allowed, budget):
    if caps is None:
        return
    cap = np.asarray(caps.cap)
    used = np.unique(np.asarray(caps.host_id)[allowed])
    total = float(np.sum(cap[used]))
    if total <= budget:
        raise ValueError(f"budget: {budget:g} crawls per day exceeds what the hosts' crawl delays allow "
                         f"({total:g} per day in all); lower the budget or the delays")


def bucket(n: int) -> int:
    """The padded size of ``n`` pages or hosts: the next power of two, at least 8, so that a
    growing crawl compiles its solve and estimator a few times, not at every new page."""
    return max(8, 1 << max(int(n) - 1, 0).bit_length())


def solve_rates(policy: str, *, importance, change_rate, budget: float, allowed, caps=None,
                objective: str = "harmonic", complete=None):
    """``(rate, prob, converged)`` of every page (rate 0 for pages robots.txt disallows) for a
    ``"plan"``, ``"learn"`` (the solve of the estimates) or ``"uniform"`` policy; ``prob > 0``
    marks a page crawled on its change signals with that probability (NeurIPS-19 Π°, a
    ``complete`` page when the objective uses signals).  The pages are padded to
    :func:`bucket` with pages held at rate 0 by their bounds."""
    import jaxcrawl

    allowed = np.asarray(allowed, bool)
    n_all = allowed.size
    n = int(allowed.sum())
    rate = np.zeros(n_all, np.float64)
    if n == 0:
        return rate, np.zeros(n_all), True
    _check_capacity(caps, allowed, budget)
    if policy == "uniform" and (caps is None or np.all(
            np.bincount(np.asarray(caps.host_id)[allowed], minlength=len(caps.cap)) * budget / n
            <= np.asarray(caps.cap))):
        return np.where(allowed, budget / n, 0.0), np.zeros(n_all), True  # UniformCrawl: R / n each
    m = bucket(n_all)
    dtype = _float()
    imp = np.ones(m, dtype)
    lam = np.ones(m, dtype)
    hi = np.zeros(m, dtype)
    comp = np.zeros(m, dtype)
    if complete is not None and policy != "uniform":
        comp[:n_all] = np.asarray(complete, bool) & allowed
    hi[:n_all] = np.where(allowed, np.inf, 0.0)
    if policy != "uniform":
        imp[:n_all] = np.where(allowed, np.asarray(importance, np.float64), 1.0)
        lam[:n_all] = np.where(allowed, np.asarray(change_rate, np.float64), 1.0)
    padded_caps = None
    if caps is not None:
        host = np.full(m, -1, np.int32)
        host[:n_all] = np.asarray(caps.host_id)
        cap = np.full(bucket(len(caps.cap)), np.inf)
        cap[:len(caps.cap)] = np.asarray(caps.cap)
        padded_caps = jaxcrawl.HostCaps(host, cap.astype(dtype))
    # uniform under binding caps: equal rates water-filled, the capped optimum of sum(-1/x) (objective "delay")
    pol = jaxcrawl.solve(jaxcrawl.CrawlProblem(imp, lam, float(budget), comp),
                         "delay" if policy == "uniform" else objective, caps=padded_caps, bounds=(None, hi))
    rate = np.where(allowed, np.asarray(pol.rate, np.float64)[:n_all], 0.0)
    prob = np.where(allowed & np.asarray(pol.on_signal)[:n_all], np.asarray(pol.prob, np.float64)[:n_all], 0.0)
    return rate, prob, bool(np.all(np.asarray(pol.converged)))


def _padded(intervals, changed, mask):
    """The observations with their rows padded to :func:`bucket` (empty histories)."""
    n, k = np.shape(intervals)
    m = bucket(n)
    w = np.ones((m, k), _float())
    c = np.zeros((m, k), bool)
    mk = np.zeros((m, k), bool)
    w[:n], c[:n], mk[:n] = intervals, changed, mask
    return w, c, mk


def estimate_rates(intervals, changed, mask):
    """Change rates per day from padded observations: the smoothed MLE of NeurIPS-19 Alg. 4
    line 11 (:func:`jaxcrawl.estimators.mle_smoothed`, imaginary intervals of half a day).  The
    rows are padded to :func:`bucket` (empty histories)."""
    from jaxcrawl import estimators

    n = np.shape(intervals)[0]
    w, c, mk = _padded(intervals, changed, mask)
    est = estimators.mle_smoothed(w, c, mk, return_info=True)
    return np.asarray(est.rate, np.float64)[:n], bool(np.all(np.asarray(est.converged)[:n]))


def estimate_complete(intervals, changed, mask):
    """Change rates per day of complete pages from their signal histories: NeurIPS-19 eq. 11
    with Alg. 4 line 13's imaginary signal (:func:`jaxcrawl.estimators.complete_obs_rate`)."""
    from jaxcrawl import estimators

    n = np.shape(intervals)[0]
    w, c, mk = _padded(intervals, changed, mask)
    return np.asarray(estimators.complete_obs_rate(w, c, mk), np.float64)[:n]


def nutch_scale(interval, allowed, budget: float) -> float:
    """The factor ``c`` that makes the rates ``1 / (c * interval)`` of the allowed pages sum
    to ``budget`` per day."""
    inv = np.where(allowed, 1.0 / np.asarray(interval, np.float64), 0.0)
    return float(np.sum(inv) / budget) if np.any(allowed) else 1.0


def nutch_update(interval: float, modified: float, t: float, status: str, scale: float,
                 s: NutchSettings | None = None):
    """One fetch of Nutch ``AdaptiveFetchSchedule.setFetchSchedule`` in days: ``status`` is
    ``"unknown"`` (first fetch), ``"modified"`` or ``"unmodified"``; the rule's own clock runs
    ``scale`` times slower than the crawl's.  Returns ``(interval, modified, next_fetch)``
    (``next_fetch`` in the crawl's days)."""
    s = NutchSettings() if s is None else s
    if status == "modified":
        interval, modified = interval * (1.0 - s.dec_rate), t
    elif status == "unmodified":
        interval = interval * (1.0 + s.inc_rate)
    else:
        modified = t
    ref = t
    if s.sync_delta:
        delta = (t - modified) / scale
        if delta > interval:
            interval = delta
        offset = s.sync_delta_rate * delta
        if offset > s.max_interval:
            offset = math.floor(offset / delta) * s.max_interval
        ref = t - scale * offset
    interval = min(max(interval, s.min_interval), s.max_interval)
    return interval, modified, ref + scale * interval
