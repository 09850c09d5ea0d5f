"""Crawl plans and timetables on disk.

A plan is what ``jaxcrawl solve --output`` writes and ``jaxcrawl schedule --plan`` reads:
a CSV ``page_id,rate,prob`` with one row per page (``rate`` in crawls per unit time,
``prob`` the probability of crawling on a change signal, NeurIPS-19 Π°).  A timetable is a
CSV ``time,page_id`` with one row per crawl, sorted by time.  Every write is atomic
(:func:`jaxcrawl.io.tables.write_csv`).
"""
from __future__ import annotations

import hashlib
import os
from typing import NamedTuple, Union

import numpy as np
from jax.typing import ArrayLike

from .tables import Column, Schema, read_table, write_csv

__all__ = ["PLAN", "Plan", "read_plan_csv", "write_plan_csv", "write_timetable_csv", "page_keys"]

PathLike = Union[str, "os.PathLike[str]"]

#: Plan CSV: ``page_id,rate,prob``, one distinct page a row.
PLAN = Schema(
    "crawl plan",
    (Column("page_id"),
     Column("rate", "number", minimum=0.0),
     Column("prob", "number", minimum=0.0, maximum=1.0)),
    key="page_id", rows="pages",
)


class Plan(NamedTuple):
    """A crawl plan read from disk: page ids, rates and signal-crawl probabilities."""

    page_id: np.ndarray
    rate: np.ndarray
    prob: np.ndarray


def read_plan_csv(path: PathLike) -> Plan:
    """Read a plan ``page_id,rate,prob`` (header required).

    ``rate`` must be finite and >= 0, ``prob`` in [0, 1], page ids distinct.  A malformed
    row raises :class:`~jaxcrawl.io.tables.TableError` (a ``ValueError``)
    ``path:line: message`` naming the column and the rule.
    """
    t = read_table(path, PLAN)
    return Plan(t["page_id"], t["rate"], t["prob"])


def write_plan_csv(path: PathLike, page_id: ArrayLike, rate: ArrayLike, prob: ArrayLike,
                   chunk: int = 1 << 16) -> None:
    """Write a crawl plan ``page_id,rate,prob`` (one row per page) atomically, in chunks."""
    write_csv(path, ("page_id", "rate", "prob"),
              (np.asarray(page_id), np.asarray(rate, np.float64), np.asarray(prob, np.float64)),
              (None, ".10g", ".10g"), chunk=chunk)


def write_timetable_csv(path: PathLike, time: ArrayLike, page: ArrayLike, page_id: ArrayLike,
                        *, digits: int = 17, chunk: int = 1 << 16) -> None:
    """Write a timetable ``time,page_id`` atomically: crawl ``j`` of page ``page_id[page[j]]``
    at ``time[j]`` (rows in the given order), times with ``digits`` significant digits."""
    ids = np.asarray(page_id)
    write_csv(path, ("time", "page_id"),
              (np.asarray(time, np.float64), ids[np.asarray(page, np.int64)]),
              (f".{int(digits)}g", None), chunk=chunk)


def page_keys(page_id: ArrayLike) -> np.ndarray:
    """Stable 32-bit keys of page ids (BLAKE2b of their text), e.g. for
    :func:`jaxcrawl.timetable.hashed_phase`: a page's key does not depend on the others."""
    ids = np.asarray(page_id).tolist()
    out = np.empty(len(ids), np.uint32)
    for i, pid in enumerate(ids):
        out[i] = int.from_bytes(hashlib.blake2b(str(pid).encode(), digest_size=4).digest(), "little")
    return out
