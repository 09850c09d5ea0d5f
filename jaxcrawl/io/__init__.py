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
                                       :func:`read_timetable`, :func:`write_timetable`;
                                       a crawler's last fetches: :func:`read_last_fetch`
crawl histories, estimates             :func:`read_histories` (:class:`Histories`),
                                       :func:`write_estimates`; from Nutch CrawlDb
                                       dumps: :func:`read_nutch_dumps`; from crawl archives:
                                       :func:`read_cdx` (CDX, CDXJ), :func:`read_warc`
NeurIPS-19 data set                    :func:`load_crawl_dataset` (:class:`CrawlDataset`)
host caps, crawl delays                :func:`read_host_caps`, :func:`read_crawl_delays`
                                       (hosts by one rule: :func:`canonical_host`)
crawler queues                         :func:`write_urlfrontier`, :func:`write_nutch_seeds`,
                                       :func:`write_stormcrawler`
any output                             :func:`atomic_write`, :func:`check_output`,
                                       :class:`CheckpointStore`
=====================================  =====================================================

A malformed row is a :class:`TableError` ``path:line: message`` naming the column and the
rule.  :mod:`jaxcrawl.io.synthetic` draws problems shaped like the NeurIPS-19 data set.
"""
# Each name is imported from its module on first use (PEP 562), so that ``import jaxcrawl``
# and ``import jaxcrawl.io.synthetic`` load no table reader (pyarrow) until one is used.
import importlib as _importlib
from typing import TYPE_CHECKING as _TYPE_CHECKING

_LAZY = {
    "atomic_write": (".._src.fileio", "atomic_write"),
    "read_cdx": ("._archives", "read_cdx"),
    "read_warc": ("._archives", "read_warc"),
    "synthetic": (".synthetic", None),
    "CheckpointStore": ("._checkpoint", "CheckpointStore"),
    "write_nutch_seeds": ("._crawler", "write_nutch_seeds"),
    "write_urlfrontier": ("._crawler", "write_urlfrontier"),
    "write_stormcrawler": ("._crawler", "write_stormcrawler"),
    "read_nutch_dumps": ("._crawldb", "read_nutch_dumps"),
    "write_table": ("._formats", "write_table"),
    "Histories": ("._histories", "Histories"),
    "read_histories": ("._histories", "read_histories"),
    "write_estimates": ("._histories", "write_estimates"),
    "read_crawl_delays": ("._hosts", "read_crawl_delays"),
    "read_host_caps": ("._hosts", "read_host_caps"),
    "read_host_caps_rows": ("._hosts", "read_host_caps_rows"),
    "canonical_host": (".._src.hostmap", "canonical_host"),
    "CrawlDataset": ("._neurips19", "CrawlDataset"),
    "load_crawl_dataset": ("._neurips19", "load_crawl_dataset"),
    "Plan": ("._plans", "Plan"),
    "read_last_fetch": ("._plans", "read_last_fetch"),
    "read_plan": ("._plans", "read_plan"),
    "read_timetable": ("._plans", "read_timetable"),
    "write_plan": ("._plans", "write_plan"),
    "write_timetable": ("._plans", "write_timetable"),
    "PageTable": ("._problems", "PageTable"),
    "read_problem": ("._problems", "read_problem"),
    "write_page_table": ("._problems", "write_page_table"),
    "write_problem": ("._problems", "write_problem"),
    "read_local_rows": ("._rows", "read_local_rows"),
    "Column": ("._schema", "Column"),
    "Schema": ("._schema", "Schema"),
    "Table": ("._schema", "Table"),
    "TableError": ("._schema", "TableError"),
    "check_output": ("._tables", "check_output"),
    "read_table": ("._tables", "read_table"),
}

if _TYPE_CHECKING:  # static analysers see the eager imports
    from .._src.fileio import atomic_write as atomic_write
    from .._src.hostmap import canonical_host as canonical_host
    from . import synthetic as synthetic
    from ._archives import read_cdx as read_cdx
    from ._archives import read_warc as read_warc
    from ._checkpoint import CheckpointStore as CheckpointStore
    from ._crawldb import read_nutch_dumps as read_nutch_dumps
    from ._crawler import write_nutch_seeds as write_nutch_seeds
    from ._crawler import write_stormcrawler as write_stormcrawler
    from ._crawler import write_urlfrontier as write_urlfrontier
    from ._formats import write_table as write_table
    from ._histories import Histories as Histories
    from ._histories import read_histories as read_histories
    from ._histories import write_estimates as write_estimates
    from ._hosts import read_crawl_delays as read_crawl_delays
    from ._hosts import read_host_caps as read_host_caps
    from ._hosts import read_host_caps_rows as read_host_caps_rows
    from ._neurips19 import CrawlDataset as CrawlDataset
    from ._neurips19 import load_crawl_dataset as load_crawl_dataset
    from ._plans import Plan as Plan
    from ._plans import read_last_fetch as read_last_fetch
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


def __getattr__(name):
    try:
        module, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    mod = _importlib.import_module(module, __name__)
    value = mod if attr is None else getattr(mod, attr)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "synthetic",
    # tables
    "Column", "Schema", "Table", "TableError", "read_table", "write_table", 
    # page tables, plans, timetables, histories, the data set
    "PageTable", "read_problem", "write_problem", "write_page_table", "read_local_rows",
    "Plan", "read_plan", "write_plan", "read_timetable", "write_timetable", "read_last_fetch",
    "Histories", "read_histories", "write_estimates", "read_nutch_dumps",
    "read_cdx", "read_warc",
    "CrawlDataset", "load_crawl_dataset",
    # hosts and crawlers
    "read_host_caps", "read_host_caps_rows", "read_crawl_delays", "canonical_host",
    "write_urlfrontier", "write_nutch_seeds", "write_stormcrawler",
    # writing outputs
    "atomic_write", "check_output", "CheckpointStore",
]
