"""File formats: page tables, crawl histories, plans, host files, the on-disk page table
and the atomic checkpoint store that sweeps and reproductions share."""
from . import checkpoint as checkpoint
from .checkpoint import CheckpointStore as CheckpointStore, atomic_write as atomic_write
