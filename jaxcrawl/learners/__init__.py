"""Online learners: one protocol (:class:`Learner`, an ``(init, step)`` pair) and one driver
(:func:`run_learner`, ``jax.lax.scan``).

* :mod:`jaxcrawl.learners.base` -- :class:`Learner` (= ``SyncLearner``) and
  :func:`run_learner` (= ``run_sync_learner``).
* :mod:`jaxcrawl.learners.mirror_sync` -- MirrorSync, AsyncMirrorSync, AsyncPSGDSync
  (Kolobov, Bubeck & Zimmert, ICML-20) on synchronization bandits.
* :mod:`jaxcrawl.learners.explore_commit` -- explore-then-commit and phased ε-greedy
  (Upadhyay et al., Learning to Crawl, AAAI-20).
* :mod:`jaxcrawl.learners.learn_and_crawl` -- LambdaLearnAndCrawl and its variants
  (Kolobov et al., NeurIPS-19 Alg. 4), with any :class:`jaxcrawl.Utility` as the inner
  solver, and online-estimator-driven crawling (Avrachenkov et al. §5).
* :mod:`jaxcrawl.learners.heuristics` -- the revisit heuristics of production crawlers
  (Nutch DefaultFetchSchedule / AdaptiveFetchSchedule, StormCrawler AdaptiveScheduler,
  Heritrix WaitEvaluator), budget matching, and :func:`run_on_path` for drifting pages.
* :mod:`jaxcrawl.learners.sweep` -- seeds × instances × hyperparameters in one call,
  written incrementally so an interrupted sweep resumes.

The package attribute ``mirror_sync`` is the MirrorSync factory; import the module by its
path (``from jaxcrawl.learners.mirror_sync import ...``).
"""
from .base import Learner, SyncLearner, run_learner, run_sync_learner  # noqa: F401
from .explore_commit import *  # noqa: F401,F403  (names listed in its __all__)
from .heuristics import *  # noqa: F401,F403
from .learn_and_crawl import *  # noqa: F401,F403
from .mirror_sync import (  # noqa: F401
    APP_B_GRIDS,
    AsyncSyncState,
    GridSearchResult,
    MirrorSyncState,
    SyncHyperparams,
    SyncInfo,
    async_mirror_sync,
    async_psgd_sync,
    barrier_rates,
    grid_search,
    mirror_descent_step,
    mirror_sync,
    num_learner_steps,
    projected_sgd_step,
)
from .sweep import *  # noqa: F401,F403
