"""jaxcrawl: optimal freshness crawl scheduling in JAX.

The papers' vocabulary is unified: ``importance`` (ζ, μ, w), ``change_rate`` (ξ, λ, Δ),
``rate`` (ρ, p, r), ``bandwidth`` (R, B), ``complete`` (W° pages with change signals),
``dual`` (the bandwidth multiplier).
"""
from importlib.metadata import PackageNotFoundError as _PackageNotFoundError
from importlib.metadata import version as _version

from ._src.checks import NonConvergenceError as NonConvergenceError
from .problem import CrawlProblem as CrawlProblem, Policy as Policy, make_policy as make_policy
from .allocate import allocate as allocate, Allocation as Allocation
from .utilities import (
    Utility as Utility,
    solve as solve,
    register_utility as register_utility,
    get_utility as get_utility,
    utility_names as utility_names,
)
from .objectives import (
    harmonic_cost as harmonic_cost,
    binary_cost as binary_cost,
    binary_freshness as binary_freshness,
    accumulated_delay as accumulated_delay,
    uniform_interval_freshness as uniform_interval_freshness,
)
from .solvers import (
    lambda_crawl as lambda_crawl,
    lambda_crawl_approx as lambda_crawl_approx,
    binary_lambda_crawl as binary_lambda_crawl,
    uniform_crawl as uniform_crawl,
    change_rate_crawl as change_rate_crawl,
    accumulated_delay_crawl as accumulated_delay_crawl,
    uniform_interval_crawl as uniform_interval_crawl,
)
from . import utilities as utilities
from . import data as data
from . import estimators as estimators
from . import simulate as simulate
from . import sync_bandits as sync_bandits
from . import schedule as schedule
from . import politeness as politeness
from . import scale as scale

try:
    __version__ = _version("jaxcrawl")
except _PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0+unknown"
