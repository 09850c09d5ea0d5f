"""Online learners: one protocol (:class:`Learner`, an ``(init, step)`` pair over NamedTuple
states) and one driver (:func:`run_learner`, ``jax.lax.scan``).

* Explore-then-commit and phased ε-greedy (Upadhyay et al., *Learning to Crawl*, AAAI-20).
* LambdaLearnAndCrawl (Kolobov et al., NeurIPS-19 Alg. 4) with any
  :class:`jaxcrawl.Objective` as the inner solver, and online-estimator-driven crawling
  (Avrachenkov et al. §5).
* The adaptive revisit rules of open-source crawlers (Nutch, StormCrawler, Heritrix 1.x),
  their long-run figures, budget matching inside their documented ranges, and
  :func:`run_on_path` for drifting pages.
* MirrorSync, AsyncMirrorSync and AsyncPSGDSync (Kolobov, Bubeck & Zimmert, ICML-20) on the
  synchronization bandits of :mod:`jaxcrawl.sync_bandits`.
* :func:`run_sweep`: seeds × instances × hyperparameters in one call, resumable on disk.
"""
import jax as _jax

from ._base import Learner as Learner
from ._base import run_learner as run_learner
from ._explore_commit import ETC as _ETC
from ._explore_commit import EpsGreedyParams as EpsGreedyParams
from ._explore_commit import ETCOutcome as ETCOutcome
from ._explore_commit import ETCParams as ETCParams
from ._explore_commit import etc_grid_transform as etc_grid_transform
from ._explore_commit import etc_regret as etc_regret
from ._explore_commit import etc_regret_bound as etc_regret_bound
from ._explore_commit import etc_settings as etc_settings
from ._explore_commit import explore_then_commit as explore_then_commit
from ._explore_commit import lemma1_phase_length as lemma1_phase_length
from ._explore_commit import phased_epsilon_greedy as phased_epsilon_greedy
from ._explore_commit import phased_regret as phased_regret
from ._explore_commit import phased_settings as phased_settings
from ._explore_commit import run_etc as run_etc
from ._explore_commit import tau_star as tau_star
from ._heuristics import HEURISTICS as HEURISTICS
from ._heuristics import HeuristicParams as HeuristicParams
from ._heuristics import heuristic as heuristic
from ._heuristics import long_run as long_run
from ._heuristics import match_budget as match_budget
from ._heuristics import match_in_range as match_in_range
from ._heuristics import run_on_path as run_on_path
from ._learn_and_crawl import LLCParams as LLCParams
from ._learn_and_crawl import OnlineParams as OnlineParams
from ._learn_and_crawl import executed_policy as executed_policy
from ._learn_and_crawl import lambda_learn_and_crawl as lambda_learn_and_crawl
from ._learn_and_crawl import llc_settings as llc_settings
from ._learn_and_crawl import online_learn_and_crawl as online_learn_and_crawl
from ._learn_and_crawl import online_settings as online_settings
from ._mirror_sync import APP_B_GRIDS as APP_B_GRIDS
from ._mirror_sync import SyncHyperparams as SyncHyperparams
from ._mirror_sync import async_mirror_sync as async_mirror_sync
from ._mirror_sync import async_psgd_sync as async_psgd_sync
from ._mirror_sync import grid_search as grid_search
from ._mirror_sync import mirror_sync as mirror_sync
from ._mirror_sync import num_learner_steps as num_learner_steps
from ._sweep import grid_product as grid_product
from ._sweep import load_sweep as load_sweep
from ._sweep import run_sweep as run_sweep
from ._sweep import sweep_key as sweep_key

# explore-then-commit's value (a Learner plus its commit and settings) is static like a Learner:
# a plain jit argument with no leaves
_jax.tree_util.register_pytree_node(_ETC, lambda etc: ((), etc), lambda etc, _: etc)

__all__ = [
    "Learner", "run_learner",
    # explore-then-commit and phased ε-greedy (AAAI-20)
    "explore_then_commit", "etc_settings", "ETCParams", "ETCOutcome", "run_etc", "etc_regret",
    "etc_grid_transform", "tau_star", "etc_regret_bound", "lemma1_phase_length",
    "phased_epsilon_greedy", "phased_settings", "EpsGreedyParams", "phased_regret",
    # LambdaLearnAndCrawl (NeurIPS-19) and online re-solving (Avrachenkov et al.)
    "lambda_learn_and_crawl", "llc_settings", "LLCParams", "executed_policy",
    "online_learn_and_crawl", "online_settings", "OnlineParams",
    # crawlers' revisit rules
    "heuristic", "HEURISTICS", "HeuristicParams", "match_budget", "run_on_path", "long_run",
    "match_in_range",
    # synchronization bandits (ICML-20)
    "mirror_sync", "async_mirror_sync", "async_psgd_sync", "SyncHyperparams", "grid_search",
    "num_learner_steps", "APP_B_GRIDS",
    # sweeps
    "run_sweep", "grid_product", "sweep_key", "load_sweep",
]
