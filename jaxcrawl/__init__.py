"""jaxcrawl: optimal freshness crawl scheduling in JAX.

The papers' vocabulary is unified: ``importance`` (ζ, μ, w), ``change_rate`` (ξ, λ, Δ),
``rate`` (ρ, p, r), ``bandwidth`` (R, B), ``complete`` (W° pages with change signals),
``dual`` (the bandwidth multiplier).
"""
# first, before anything imports JAX: when this process is the ``jaxcrawl`` command (and only
# then), Ctrl-C and SIGTERM while it imports are recorded for the command to act on
from ._src import interrupts as _interrupts

_interrupts.install_early()

from importlib.metadata import PackageNotFoundError as _PackageNotFoundError  # noqa: E402
from importlib.metadata import version as _version  # noqa: E402
from typing import TYPE_CHECKING as _TYPE_CHECKING  # noqa: E402

from ._src.checks import NonConvergenceError as NonConvergenceError
from ._src.checks import library_errors as library_errors
from .compile_cache import enable_compile_cache as enable_compile_cache
from .core.bounds import check_rate_bounds as check_rate_bounds
from .core.bounds import rate_bounds as rate_bounds
from .core.objectives import GapForm as GapForm
from .core.objectives import Objective as Objective
from .core.objectives import accumulated_delay as accumulated_delay
from .core.objectives import binary as binary
from .core.objectives import binary_cost as binary_cost
from .core.objectives import binary_freshness as binary_freshness
from .core.objectives import delay as delay
from .core.objectives import harmonic as harmonic
from .core.objectives import harmonic_approx as harmonic_approx
from .core.objectives import harmonic_cost as harmonic_cost
from .core.objectives import objective as objective
from .core.objectives import objective_names as objective_names
from .core.objectives import register_objective as register_objective
from .core.objectives import uniform as uniform
from .core.objectives import uniform_interval_freshness as uniform_interval_freshness
from .core.problem import CrawlProblem as CrawlProblem
from .core.problem import Policy as Policy
from .core.problem import make_policy as make_policy
from .core.problem import stack as stack
from .core.solve import Allocation as Allocation
from .core.solve import HostCaps as HostCaps
from .core.solve import accumulated_delay_crawl as accumulated_delay_crawl
from .core.solve import allocate as allocate
from .core.solve import binary_lambda_crawl as binary_lambda_crawl
from .core.solve import change_rate_crawl as change_rate_crawl
from .core.solve import lambda_crawl as lambda_crawl
from .core.solve import lambda_crawl_approx as lambda_crawl_approx
from .core.solve import solve as solve
from .core.solve import uniform_crawl as uniform_crawl
from .core.solve import uniform_interval_crawl as uniform_interval_crawl
from .io.synthetic import synthetic as synthetic

# the subpackages are imported on first use (``jaxcrawl.learners``, ``from jaxcrawl import
# io``), so that a solver-only ``import jaxcrawl`` loads neither optax (and its contrib),
# pyarrow nor tqdm
_SUBPACKAGES = ("debug", "estimators", "io", "learners", "optim", "parallel", "policy_eval", "simulate",
                "sync_bandits", "timetable")
if _TYPE_CHECKING:  # static analysers see the eager imports
    from . import debug as debug
    from . import estimators as estimators
    from . import io as io
    from . import learners as learners
    from . import optim as optim
    from . import parallel as parallel
    from . import policy_eval as policy_eval
    from . import simulate as simulate
    from . import sync_bandits as sync_bandits
    from . import timetable as timetable


def __getattr__(name):
    if name in _SUBPACKAGES:
        import importlib

        module = importlib.import_module(f".{name}", __name__)
        globals()[name] = module
        return module
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_SUBPACKAGES))


__all__ = [
    # an opt-in persistent cache of compiled programs
    "enable_compile_cache",
    # the problem and the plan
    "CrawlProblem", "Policy", "make_policy", "stack", "synthetic",
    # objectives as values
    "Objective", "GapForm", "harmonic", "harmonic_approx", "binary", "delay", "uniform",
    "objective", "register_objective", "objective_names",
    "harmonic_cost", "binary_cost", "binary_freshness", "accumulated_delay", "uniform_interval_freshness",
    # the solve
    "solve", "HostCaps", "rate_bounds", "check_rate_bounds", "NonConvergenceError", "library_errors", "allocate",
    "Allocation",
    # the papers' solvers
    "lambda_crawl", "lambda_crawl_approx", "binary_lambda_crawl", "uniform_interval_crawl",
    "accumulated_delay_crawl", "uniform_crawl", "change_rate_crawl",
    # subpackages
    "parallel", "estimators", "simulate", "learners", "optim", "sync_bandits", "policy_eval", "timetable", "io",
    "debug",
]

try:
    __version__ = _version("jaxcrawl")
except _PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0+unknown"
