"""Reading and writing jaxcrawl's files.

=====================================  =====================================================
file                                   functions
=====================================  =====================================================
any table (CSV, Parquet, JSON Lines)   :func:`read_table` against a :class:`Schema`,
                                       :func:`write_table`
page table                             :func:`read_problem`, :func:`write_problem`
                                       (:class:`PageTable`); ``.npy`` directory for streamed
                                       solves: :func:`write_page_table`
plan, timetable                        :func:`read_plan`, :func:`write_plan` (:class:`Plan`),
                                       :func:`read_timetable`, :func:`write_timetable`
crawl histories, estimates             :func:`read_histories` (:class:`Histories`),
                                       :func:`write_estimates`
NeurIPS-19 data set                    :func:`load_crawl_dataset` (:class:`CrawlDataset`)
host caps, crawl delays                :func:`read_host_caps`, :func:`read_crawl_delays`
crawler queues                         :func:`write_urlfrontier`, :func:`write_nutch_seeds`
any output                             :func:`atomic_write`, :func:`check_output`,
                                       :class:`CheckpointStore`
=====================================  =====================================================

A malformed row is a :class:`TableError` ``path:line: message`` naming the column and the
rule.  :mod:`jaxcrawl.io.synthetic` draws problems shaped like the NeurIPS-19 data set.
"""
from .._src.fileio import atomic_write as atomic_write
from . import synthetic as synthetic
from ._checkpoint import CheckpointStore as CheckpointStore
from ._crawler import write_nutch_seeds as write_nutch_seeds
from ._crawler import write_urlfrontier as write_urlfrontier
from ._formats import write_table as write_table
from ._histories import Histories as Histories
from ._histories import read_histories as read_histories
from ._histories import write_estimates as write_estimates
from ._hosts import read_crawl_delays as read_crawl_delays
from ._hosts import read_host_caps as read_host_caps
from ._neurips19 import CrawlDataset as CrawlDataset
from ._neurips19 import load_crawl_dataset as load_crawl_dataset
from ._plans import Plan as Plan
from ._plans import read_plan as read_plan
from ._plans import read_timetable as read_timetable
from ._plans import write_plan as write_plan
from ._plans import write_timetable as write_timetable
from ._problems import PageTable as PageTable
from ._problems import read_problem as read_problem
from ._problems import write_page_table as write_page_table
from ._problems import write_problem as write_problem
from ._rows import read_local_rows as read_local_rows
from ._schema import Column as Column
from ._schema import Schema as Schema
from ._schema import Table as Table
from ._schema import TableError as TableError
from ._tables import check_output as check_output
from ._tables import read_table as read_table

__all__ = [
    "synthetic",
    # tables
    "Column", "Schema", "Table", "TableError", "read_table", "write_table", 
    # page tables, plans, timetables, histories, the data set
    "PageTable", "read_problem", "write_problem", "write_page_table", "read_local_rows",
    "Plan", "read_plan", "write_plan", "read_timetable", "write_timetable",
    "Histories", "read_histories", "write_estimates",
    "CrawlDataset", "load_crawl_dataset",
    # hosts and crawlers
    "read_host_caps", "read_crawl_delays", "write_urlfrontier", "write_nutch_seeds",
    # writing outputs
    "atomic_write", "check_output", "CheckpointStore",
]
