"""Online learners, each an ``(init, step)`` pair driven by ``jax.lax.scan``.

* :mod:`jaxcrawl.learners.mirror_sync` -- MirrorSync, AsyncMirrorSync, AsyncPSGDSync
  (Kolobov, Bubeck & Zimmert, ICML-20) on synchronization bandits.
* :mod:`jaxcrawl.learners.explore_commit` -- explore-then-commit and phased ε-greedy
  (Upadhyay et al., Learning to Crawl, AAAI-20).
* :mod:`jaxcrawl.learners.learn_and_crawl` -- LambdaLearnAndCrawl and its variants
  (Kolobov et al., NeurIPS-19 Alg. 4) and online-estimator-driven crawling
  (Avrachenkov et al. §5).
* :mod:`jaxcrawl.learners.sweep` -- seeds × instances × hyperparameters in one call,
  written incrementally so an interrupted sweep resumes.
"""
from .mirror_sync import (  # noqa: F401
    APP_B_GRIDS,
    AsyncSyncState,
    GridSearchResult,
    MirrorSyncState,
    SyncHyperparams,
    SyncInfo,
    SyncLearner,
    async_mirror_sync,
    async_psgd_sync,
    barrier_rates,
    grid_search,
    mirror_descent_step,
    mirror_sync,
    num_learner_steps,
    projected_sgd_step,
    run_sync_learner,
)

from .explore_commit import *  # noqa: F401,F403  (names listed in its __all__)
from .learn_and_crawl import *  # noqa: F401,F403
from .sweep import *  # noqa: F401,F403
