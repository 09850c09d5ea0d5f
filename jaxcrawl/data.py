"""Problem instances and their files: the public compatibility module.

``jaxcrawl.data`` gathers the names that were defined here before the file formats moved
to :mod:`jaxcrawl.io` and the generator to :mod:`jaxcrawl.synthetic`; every one keeps
working:

* :func:`synthetic` -- the seeded generator shaped like the NeurIPS-19 data set (with
  :data:`COMPLETE_SUBSETS`, the named laws of its complete-observation pages);
* :func:`read_problem_csv` / :func:`write_plan_csv` -- page tables and plans (CSV);
* :class:`PageTable` -- what :func:`read_problem_csv` returns (now
  :class:`jaxcrawl.io.PageRows`; not the on-disk :class:`jaxcrawl.io.PageTable`);
* :func:`load_crawl_dataset` -- the NeurIPS-19 data set's own format.
"""
from __future__ import annotations

from . import dataset as dataset  # noqa: F401  (keeps ``jaxcrawl.dataset`` an attribute, as before)
from .io.neurips19 import load_crawl_dataset as load_crawl_dataset
from .io.plans import write_plan_csv as write_plan_csv
from .io.tables import PageRows as PageTable
from .io.tables import read_problem_csv as read_problem_csv
from .synthetic import COMPLETE_SUBSETS as COMPLETE_SUBSETS
from .synthetic import synthetic as synthetic

__all__ = ["synthetic", "COMPLETE_SUBSETS", "read_problem_csv", "write_plan_csv", "PageTable", "load_crawl_dataset"]
