"""File formats: page tables, crawl histories, plans, host files, the on-disk page table
and the atomic checkpoint store that sweeps and reproductions share.

=======================  ===============================================================
module                   what it reads and writes
=======================  ===============================================================
:mod:`.formats`          CSV / Parquet / JSON Lines (``.gz``) through pyarrow, by name
:mod:`.crawler`          time units, ISO 8601 starts, URLFrontier and Nutch seed files
:mod:`.tables`           the one table reader (``path:line`` errors naming the column and
                         the rule; formats by extension) and atomic CSV writer; page
                         tables ``page_id,importance,change_rate[,complete]``
:mod:`.histories`        crawl histories ``page_id,interval,changed[,importance]`` and
                         the change-rate estimates written from them
:mod:`.plans`            plans ``page_id,rate,prob`` and timetables ``time,page_id``
:mod:`.hosts`            host caps ``host_id,cap`` and page -> host mappings
:mod:`.neurips19`        the NeurIPS-19 crawl-history data set's tab-separated files
:mod:`.page_table`       the memory-mapped ``.npy`` page table of streamed solves
:mod:`.checkpoint`       :func:`atomic_write` and the :class:`CheckpointStore`
=======================  ===============================================================
"""
from . import checkpoint, crawler, formats, histories, hosts, neurips19, page_table, plans, tables
from .checkpoint import CheckpointStore, atomic_write, write_json
from .histories import Histories, read_history_csv
from .hosts import load_host_caps, read_host_caps, read_page_hosts
from .neurips19 import CrawlDataset, load_crawl_dataset
from .page_table import PageTable, write_page_table
from .plans import Plan, read_plan, read_plan_csv, write_plan, write_plan_csv, write_timetable, write_timetable_csv
from .tables import (
    Column,
    FileReport,
    PageRows,
    Schema,
    Table,
    TableError,
    check_output,
    read_problem,
    read_problem_csv,
    read_table,
    register_format,
    write_csv,
    write_problem,
    write_problem_csv,
)

__all__ = [
    # modules
    "checkpoint", "crawler", "formats", "histories", "hosts", "neurips19", "page_table", "plans", "tables",
    # atomic writing and checkpoints
    "CheckpointStore", "atomic_write", "write_json", "write_csv", "check_output",
    # the table reader
    "Column", "Schema", "Table", "TableError", "FileReport", "read_table", "register_format",
    # page tables, histories, plans, hosts, the data set, the on-disk page table
    "PageRows", "read_problem", "write_problem", "read_problem_csv", "write_problem_csv",
    "Histories", "read_history_csv",
    "Plan", "read_plan", "write_plan", "write_timetable", "read_plan_csv", "write_plan_csv",
    "write_timetable_csv",
    "read_host_caps", "read_page_hosts", "load_host_caps",
    "CrawlDataset", "load_crawl_dataset",
    "PageTable", "write_page_table",
]
