"""Parallel execution: pages sharded over devices, streamed from disk, spread over processes.

The solve is the same on every path (:func:`jaxcrawl.solve`); what differs is how a pass
over the pages is reduced.  Page arrays on a :func:`page_mesh` (:func:`shard_pages`) are
solved as they are; a :class:`StreamedTable` reads a table from disk chunk by chunk;
:class:`ProcessRows` spreads one problem's pages over the processes of a
``jax.distributed`` job (:func:`initialize`).
"""
from .._src.partition import file_fingerprint as file_fingerprint
from .._src.partition import row_range as row_range
from ._processes import ProcessRows as ProcessRows
from ._processes import allgather_host as allgather_host
from ._processes import allreduce_sum as allreduce_sum
from ._processes import barrier as barrier
from ._processes import check_consistent as check_consistent
from ._processes import global_tree as global_tree
from ._processes import initialize as initialize
from ._processes import local_rows as local_rows
from ._processes import raise_together as raise_together
from ._sharding import page_mesh as page_mesh
from ._sharding import shard_leading as shard_leading
from ._sharding import shard_pages as shard_pages
from ._streaming import StreamedTable as StreamedTable

__all__ = [
    "page_mesh",
    "shard_pages",
    "shard_leading",
    "StreamedTable",
    "ProcessRows",
    "initialize",
    "row_range",
    "global_tree",
    "local_rows",
    "allgather_host",
    "allreduce_sum",
    "barrier",
    "check_consistent",
    "file_fingerprint",
    "raise_together",
]
