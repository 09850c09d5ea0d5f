"""The on-disk page table that :func:`jaxcrawl.scale.stream_solve` reads chunk by chunk.

A directory with ``importance.npy``, ``change_rate.npy`` and ``complete.npy`` (1-D, one
entry per page), opened as memory maps, so a table larger than memory is read in chunks.
"""
from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Union

import numpy as np
from jax.typing import ArrayLike

from .tables import write_file

__all__ = ["PageTable", "write_page_table"]

PathLike = Union[str, "os.PathLike[str]"]


class PageTable:
    """A page table on disk: ``importance.npy``, ``change_rate.npy``, ``complete.npy`` in a
    directory.

    Arrays are opened as memory maps, so a table larger than memory is read chunk by chunk.

    Attributes:
      directory: the directory.
      importance, change_rate, complete: the memory-mapped ``(num_pages,)`` arrays.
      num_pages: number of pages.
    """

    FILES = ("importance", "change_rate", "complete")

    def __init__(self, directory: PathLike):
        directory = os.fspath(directory)
        self.directory = directory
        arrays = {}
        for name in self.FILES:
            path = os.path.join(directory, name + ".npy")
            if not os.path.exists(path):
                raise ValueError(f"{directory}: missing {name}.npy (a page table needs {', '.join(self.FILES)})")
            arrays[name] = np.load(path, mmap_mode="r")
        n = arrays["importance"].shape
        for name, a in arrays.items():
            if a.ndim != 1 or a.shape != n:
                raise ValueError(f"{directory}: {name}.npy has shape {a.shape}; every array must be 1-D "
                                 f"of length {n[0] if n else '?'}")
        self.importance, self.change_rate, self.complete = (arrays[k] for k in self.FILES)
        self.num_pages = int(n[0])

    def chunks(self, chunk_size: int) -> Iterator[tuple[int, np.ndarray, np.ndarray, np.ndarray]]:
        """Yield ``(start, importance, change_rate, complete)`` blocks of at most ``chunk_size`` pages."""
        for start in range(0, self.num_pages, chunk_size):
            stop = min(start + chunk_size, self.num_pages)
            yield (start, np.asarray(self.importance[start:stop]), np.asarray(self.change_rate[start:stop]),
                   np.asarray(self.complete[start:stop]).astype(bool))


def write_page_table(directory: PathLike, importance: ArrayLike, change_rate: ArrayLike,
                     complete: ArrayLike | None = None) -> PageTable:
    """Write a page table (validated like :class:`~jaxcrawl.CrawlProblem`) and open it.

    Each array is written atomically (a failed write leaves the previous file); the
    directory is created when missing.
    """
    directory = os.fspath(directory)
    importance = np.asarray(importance)
    change_rate = np.asarray(change_rate)
    complete = np.zeros(importance.shape, bool) if complete is None else np.asarray(complete, bool)
    for name, a in (("importance", importance), ("change_rate", change_rate)):
        if a.ndim != 1:
            raise ValueError(f"{name} must be 1-D; got shape {a.shape}")
        if not np.all(np.isfinite(a)) or np.any(a <= 0):
            raise ValueError(f"{name} must be finite and > 0 for every page")
    if not importance.shape == change_rate.shape == complete.shape:
        raise ValueError("importance, change_rate and complete must have the same shape")
    os.makedirs(directory, exist_ok=True)
    for name, a in (("importance", importance), ("change_rate", change_rate), ("complete", complete)):
        write_file(os.path.join(directory, name + ".npy"), lambda fh, a=a: np.save(fh, a), binary=True)
    return PageTable(directory)
