"""A seeded synthetic crawl problem shaped like the NeurIPS-19 data set.

:func:`synthetic` generates instances whose distributions follow the NeurIPS-19 paper's
description of its data set (supplement §9.1, Figures 4-6; 18.5M URLs crawled daily for
14 weeks): heavily skewed importance with most pages below 1000, change rates mostly
around one change every few days with a long tail, 4% of pages with complete change
observations, and a bandwidth of 20% of the number of pages.  The data set itself, in its
published format, is read by :func:`jaxcrawl.io.load_crawl_dataset`.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from numpy.typing import DTypeLike

from ..core.problem import CrawlProblem

__all__ = ["synthetic", "COMPLETE_SUBSETS"]

#: Named laws of the complete-observation subset, as ``(log-importance shift,
#: log-change-rate shift)`` added to the complete pages' normal means (see :func:`synthetic`):
#: ``"random"`` -- no shift, the complete pages are a random sample of the same law (then
#: LambdaCrawl gives them about their count share of the bandwidth, against NeurIPS-19 §7);
#: ``"neurips19"`` -- calibrated to NeurIPS-19 §7 and Fig. 2 (4% complete, R = 20% of pages):
#: on 10⁶ pages (``jax.random.key(123)``) LambdaCrawl gives the complete pages 8% of the
#: bandwidth, twice their count share, and J_h(LC-IO)/J_h(LC-CO) on them is √10 ≈ 3.16, the
#: geometric mean of the paper's 2x (§7) and "nearly 5-fold" (supplement §9.5).
COMPLETE_SUBSETS = {"random": (0.0, 0.0), "neurips19": (1.94, -0.27)}


def synthetic(
    key: jax.Array,
    num_pages: int = 100_000,
    *,
    complete_fraction: float = 0.04,
    bandwidth_fraction: float = 0.2,
    log_importance_mean: float = 2.0,
    log_importance_std: float = 2.0,
    log_change_rate_mean: float = float(np.log(1.0 / 3.0)),
    log_change_rate_std: float = 1.5,
    correlation: float = 0.3,
    complete_subset: str | tuple[float, float] = "random",
    dtype: DTypeLike | None = None,
) -> CrawlProblem:
    """A seeded synthetic crawl problem shaped like the NeurIPS-19 data set.

    ``log(importance)`` and ``log(change_rate)`` are jointly normal with the given means,
    standard deviations and correlation (importance median e^2 ≈ 7.4, 99th percentile
    ≈ 800: "most pages having importance less than 1000"; change rate median one change
    every 3 days with a long tail both ways: "most URLs change once in a few days").
    A ``complete_fraction`` of pages, chosen at random, has complete change
    observations; bandwidth is ``bandwidth_fraction * num_pages`` (the papers' 20%).

    ``complete_subset`` sets the law of the complete pages: their ``log(importance)`` and
    ``log(change_rate)`` means are shifted by ``(a, b)``, either given as a tuple or by name
    from :data:`COMPLETE_SUBSETS` (``"random"``: no shift, the default; ``"neurips19"``:
    LambdaCrawl gives the 4% complete pages 8% of the bandwidth and crawling them on
    signals cuts their harmonic cost √10-fold, NeurIPS-19 §7 and Fig. 2).  The other pages
    are unchanged.

    Args:
      key: a ``jax.random`` key.
      num_pages: number of pages n.
      complete_fraction: fraction of pages with complete change observations, in [0, 1].
      bandwidth_fraction: bandwidth as a fraction of ``num_pages`` (> 0).
      log_importance_mean, log_importance_std: normal parameters of ``log(importance)``.
      log_change_rate_mean, log_change_rate_std: normal parameters of ``log(change_rate)``.
      correlation: correlation of the two logs, in (-1, 1).
      complete_subset: a name in :data:`COMPLETE_SUBSETS` or a tuple ``(a, b)`` of finite
        shifts of the complete pages' log-importance and log-change-rate means.
      dtype: float dtype (default: JAX's default float, float32 unless x64 is on).

    Returns:
      A validated :class:`~jaxcrawl.CrawlProblem` (traceable: ``jax.vmap`` over keys gives
      a batch).
    """
    if int(num_pages) < 1:
        raise ValueError(f"num_pages must be >= 1; got {num_pages}")
    if not 0.0 <= complete_fraction <= 1.0:
        raise ValueError(f"complete_fraction must be in [0, 1]; got {complete_fraction}")
    if not bandwidth_fraction > 0:
        raise ValueError(f"bandwidth_fraction must be > 0; got {bandwidth_fraction}")
    if not -1.0 < correlation < 1.0:
        raise ValueError(f"correlation must be in (-1, 1); got {correlation}")
    if isinstance(complete_subset, str):
        if complete_subset not in COMPLETE_SUBSETS:
            raise ValueError(f"complete_subset must be one of {sorted(COMPLETE_SUBSETS)} or a tuple "
                             f"(log-importance shift, log-change-rate shift); got {complete_subset!r}")
        shift_imp, shift_rate = COMPLETE_SUBSETS[complete_subset]
    else:
        try:
            shift_imp, shift_rate = (float(v) for v in complete_subset)
        except (TypeError, ValueError):
            raise ValueError("complete_subset must be a name or a tuple of two finite floats "
                             f"(log-importance shift, log-change-rate shift); got {complete_subset!r}") from None
        if not (np.isfinite(shift_imp) and np.isfinite(shift_rate)):
            raise ValueError(f"complete_subset shifts must be finite; got {complete_subset!r}")
    dtype = jnp.result_type(float) if dtype is None else dtype
    key_imp, key_rate, key_complete = jax.random.split(key, 3)
    z1 = jax.random.normal(key_imp, (num_pages,), dtype)
    z2 = jax.random.normal(key_rate, (num_pages,), dtype)
    z2 = correlation * z1 + float(np.sqrt(1.0 - correlation**2)) * z2
    complete = jax.random.uniform(key_complete, (num_pages,)) < complete_fraction
    importance = jnp.exp(log_importance_mean + log_importance_std * z1)
    change_rate = jnp.exp(log_change_rate_mean + log_change_rate_std * z2)
    if shift_imp != 0.0 or shift_rate != 0.0:
        importance = jnp.where(complete, importance * float(np.exp(shift_imp)), importance)
        change_rate = jnp.where(complete, change_rate * float(np.exp(shift_rate)), change_rate)
    bandwidth = jnp.asarray(bandwidth_fraction * num_pages, dtype)
    # keep the problem usable (NeurIPS-19 Problem 2) if every page happened to be complete
    degenerate = jnp.all(complete) & (bandwidth >= jnp.sum(change_rate))
    complete = complete.at[0].set(complete[0] & ~degenerate)
    return CrawlProblem(importance, change_rate, bandwidth, complete)
