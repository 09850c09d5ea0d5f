r"""Change-rate estimators: offline over padded histories, online as ``(init, update)`` pairs.

A crawler never sees a page's change rate ξ.  It sees, at each crawl, one bit: did the
page change since the previous crawl?  (Some pages -- sitemaps, feeds -- also signal
every change.)  This package turns such histories into rate estimates, following
Learning to Crawl (L2C: Upadhyay et al., AAAI 2020), NeurIPS-19 (Kolobov et al.) and
Avrachenkov, Patil & Thoppe (Performance Evaluation 2022).

**Histories** are padded arrays with the observations on the last axis and any leading
axes (pages, seeds, instances)::

    intervals[..., k]  time since the previous crawl (w_n, a_j, τ_k in the papers), > 0
    changed[..., k]    0/1: did the page change during that interval (o_n, z_j, I_k)
    mask[..., k]       True where an observation exists (default: all True)

Masked-out entries are ignored whatever they contain (NaN included).

* Offline, ``f(intervals, changed, mask=None, ...) -> rates``: :func:`naive`
  (Avrachenkov et al. §3.4), :func:`mle` (L2C eq. 6, NeurIPS-19 eq. 10, Avrachenkov
  eq. 16), :func:`moment_matching` (L2C eq. 7), :func:`mle_smoothed` (NeurIPS-19 Alg. 4
  line 11), :func:`complete_obs_rate` (NeurIPS-19 eq. 11, Alg. 4 line 13),
  :func:`full_observation` (L2C App. K eq. 32), :func:`log_likelihood` (L2C eq. 6).
  The likelihood-based ones are clipped to ``[min_rate, max_rate]`` (defaults ``1e-9``
  and ``25`` per unit time, the values of L2C §6); the clip is what makes the papers'
  singular cases finite.  The iterating ones (MLE, moment matching, smoothed MLE) report
  convergence (``return_info=True`` -> :class:`Estimate`, ``throw=True``) and are
  differentiable in forward and reverse mode by the implicit function theorem.
* Forgetting, for drifting rates: :func:`discounted_mle` (the MLE with observations
  discounted by a half-life), :func:`weighted_mle`, :func:`discount_weights`; a sliding
  window is :func:`mle_smoothed`'s ``window=``.
* Confidence intervals: :func:`lemma3_halfwidth` (L2C Lemma 3) and
  :func:`lemma8_halfwidth` (L2C App. K Lemma 8).
* Online: :func:`lln`, :func:`lln_rate_weighted`, :func:`sa`, :func:`sam` (Avrachenkov et
  al. eq. 1-3) as :class:`OnlineEstimator` ``(init, update)`` pairs over small NamedTuple
  states, and :func:`run_online`, their ``jax.lax.scan``.

All functions work in the dtype of their floating inputs (float32 by default, float64
when ``jax_enable_x64`` is on and float64 arrays are passed).  Inputs are validated
eagerly (``ValueError`` naming the argument) when their values are concrete; inside
``jit`` the documented guards keep results finite instead.
"""
from __future__ import annotations

from .._src.likelihood import Estimate as Estimate
from ._confidence import lemma3_halfwidth as lemma3_halfwidth
from ._confidence import lemma8_halfwidth as lemma8_halfwidth
from ._forgetting import discount_weights as discount_weights
from ._forgetting import discounted_mle as discounted_mle
from ._forgetting import weighted_mle as weighted_mle
from ._offline import complete_obs_rate as complete_obs_rate
from ._offline import full_observation as full_observation
from ._offline import log_likelihood as log_likelihood
from ._offline import mle as mle
from ._offline import mle_smoothed as mle_smoothed
from ._offline import moment_matching as moment_matching
from ._offline import naive as naive
from ._online import OnlineEstimator as OnlineEstimator
from ._online import lln as lln
from ._online import lln_rate_weighted as lln_rate_weighted
from ._online import run_online as run_online
from ._online import sa as sa
from ._online import sam as sam

__all__ = [
    "Estimate",
    "naive",
    "mle",
    "moment_matching",
    "mle_smoothed",
    "complete_obs_rate",
    "full_observation",
    "log_likelihood",
    "lemma3_halfwidth",
    "lemma8_halfwidth",
    "OnlineEstimator",
    "lln",
    "lln_rate_weighted",
    "sa",
    "sam",
    "run_online",
    "discount_weights",
    "weighted_mle",
    "discounted_mle",
]
