"""jaxcrawl: optimal freshness crawl scheduling in JAX.

The papers' vocabulary is unified: ``importance`` (ζ, μ, w), ``change_rate`` (ξ, λ, Δ),
``rate`` (ρ, p, r), ``bandwidth`` (R, B), ``complete`` (W° pages with change signals),
``dual`` (the bandwidth multiplier).
"""
# first, before anything imports JAX: when this process is the ``jaxcrawl`` command, Ctrl-C
# and SIGTERM while it imports are recorded for the command to act on (jaxcrawl/_src/interrupts.py)
from ._src import interrupts as _interrupts

_interrupts.install_early()

from importlib.metadata import PackageNotFoundError as _PackageNotFoundError
from importlib.metadata import version as _version

from . import estimators as estimators
from . import io as io
from . import politeness as politeness
from . import scale as scale
from . import simulate as simulate
from . import sync_bandits as sync_bandits
from . import timetable as timetable
from . import utilities as utilities
from ._src.checks import NonConvergenceError as NonConvergenceError
from .allocate import Allocation as Allocation
from .allocate import allocate as allocate
from .io.synthetic import synthetic as synthetic
from .objectives import (
    accumulated_delay as accumulated_delay,
)
from .objectives import (
    binary_cost as binary_cost,
)
from .objectives import (
    binary_freshness as binary_freshness,
)
from .objectives import (
    harmonic_cost as harmonic_cost,
)
from .objectives import (
    uniform_interval_freshness as uniform_interval_freshness,
)
from .problem import CrawlProblem as CrawlProblem
from .problem import Policy as Policy
from .problem import make_policy as make_policy
from .solvers import (
    accumulated_delay_crawl as accumulated_delay_crawl,
)
from .solvers import (
    binary_lambda_crawl as binary_lambda_crawl,
)
from .solvers import (
    change_rate_crawl as change_rate_crawl,
)
from .solvers import (
    lambda_crawl as lambda_crawl,
)
from .solvers import (
    lambda_crawl_approx as lambda_crawl_approx,
)
from .solvers import (
    uniform_crawl as uniform_crawl,
)
from .solvers import (
    uniform_interval_crawl as uniform_interval_crawl,
)
from .utilities import (
    GapForm as GapForm,
)
from .utilities import (
    Utility as Utility,
)
from .utilities import (
    get_utility as get_utility,
)
from .utilities import (
    register_utility as register_utility,
)
from .utilities import (
    solve as solve,
)
from .utilities import (
    utility_names as utility_names,
)

try:
    __version__ = _version("jaxcrawl")
except _PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0+unknown"
