"""jaxcrawl: optimal freshness crawl scheduling in JAX."""
from .problem import CrawlProblem as CrawlProblem, Policy as Policy
from .allocate import allocate as allocate, Allocation as Allocation

__version__ = "0.1.0"
