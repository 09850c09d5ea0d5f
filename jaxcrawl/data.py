"""Problem instances: the seeded synthetic generator, CSV I/O for crawl plans.

The NeurIPS-19 data set (18.5M URLs crawled daily for 14 weeks) is not reachable from
here; :func:`synthetic` generates instances whose distributions follow that paper's
description (supplement §9.1, Figures 4-6): heavily skewed importance with most pages
below 1000, change rates mostly around one change every few days with a long tail,
4% of pages with complete change observations, and a bandwidth of 20% of the number
of pages.  The loader for the data set's own format is
:func:`jaxcrawl.dataset.load_crawl_dataset`.
"""
from __future__ import annotations

import csv
import io
import os
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from .problem import CrawlProblem
from .dataset import load_crawl_dataset  # noqa: F401  (re-export: jaxcrawl.data.load_crawl_dataset)

__all__ = ["synthetic", "read_problem_csv", "write_plan_csv", "PageTable", "load_crawl_dataset"]


def synthetic(
    key: jax.Array,
    num_pages: int = 100_000,
    *,
    complete_fraction: float = 0.04,
    bandwidth_fraction: float = 0.2,
    log_importance_mean: float = 2.0,
    log_importance_std: float = 2.0,
    log_change_rate_mean: float = float(np.log(1.0 / 3.0)),
    log_change_rate_std: float = 1.5,
    correlation: float = 0.3,
    dtype=None,
) -> CrawlProblem:
    """A seeded synthetic crawl problem shaped like the NeurIPS-19 data set.

    ``log(importance)`` and ``log(change_rate)`` are jointly normal with the given means,
    standard deviations and correlation (importance median e^2 ≈ 7.4, 99th percentile
    ≈ 800: "most pages having importance less than 1000"; change rate median one change
    every 3 days with a long tail both ways: "most URLs change once in a few days").
    A ``complete_fraction`` of pages, chosen at random, has complete change
    observations; bandwidth is ``bandwidth_fraction * num_pages`` (the papers' 20%).

    Args:
      key: a ``jax.random`` key.
      num_pages: number of pages n.
      dtype: float dtype (default: JAX's default float, float32 unless x64 is on).

    Returns:
      A validated :class:`CrawlProblem` (traceable: ``jax.vmap`` over keys gives a batch).
    """
    if int(num_pages) < 1:
        raise ValueError(f"num_pages must be >= 1; got {num_pages}")
    if not 0.0 <= complete_fraction <= 1.0:
        raise ValueError(f"complete_fraction must be in [0, 1]; got {complete_fraction}")
    if not bandwidth_fraction > 0:
        raise ValueError(f"bandwidth_fraction must be > 0; got {bandwidth_fraction}")
    if not -1.0 < correlation < 1.0:
        raise ValueError(f"correlation must be in (-1, 1); got {correlation}")
    dtype = jnp.result_type(float) if dtype is None else dtype
    key_imp, key_rate, key_complete = jax.random.split(key, 3)
    z1 = jax.random.normal(key_imp, (num_pages,), dtype)
    z2 = jax.random.normal(key_rate, (num_pages,), dtype)
    z2 = correlation * z1 + float(np.sqrt(1.0 - correlation**2)) * z2
    importance = jnp.exp(log_importance_mean + log_importance_std * z1)
    change_rate = jnp.exp(log_change_rate_mean + log_change_rate_std * z2)
    complete = jax.random.uniform(key_complete, (num_pages,)) < complete_fraction
    bandwidth = jnp.asarray(bandwidth_fraction * num_pages, dtype)
    # keep the problem usable (NeurIPS-19 Problem 2) if every page happened to be complete
    degenerate = jnp.all(complete) & (bandwidth >= jnp.sum(change_rate))
    complete = complete.at[0].set(complete[0] & ~degenerate)
    return CrawlProblem(importance, change_rate, bandwidth, complete)


class PageTable(NamedTuple):
    """Pages read from a CSV: their ids (strings) and the arrays of a problem."""

    page_id: np.ndarray
    importance: np.ndarray
    change_rate: np.ndarray
    complete: np.ndarray


_TRUE = {"1", "true", "t", "yes", "y"}
_FALSE = {"0", "false", "f", "no", "n", ""}


def read_problem_csv(path: str) -> PageTable:
    """Read ``page_id,importance,change_rate[,complete]`` (header required) from a CSV.

    Every malformed line raises ``ValueError`` naming the file and the line number:
    wrong number of fields, a non-numeric, non-finite or non-positive importance or
    change rate, a ``complete`` value that is not a boolean (1/0/true/false/yes/no).
    """
    if not os.path.exists(path):
        raise ValueError(f"{path}: no such file")
    ids, imp, lam, comp = [], [], [], []
    with open(path, newline="") as fh:
        reader = csv.reader(fh)
        try:
            header = next(reader)
        except StopIteration:
            raise ValueError(f"{path}: the file is empty (expected a header page_id,importance,change_rate[,complete])") from None
        header = [h.strip().lower() for h in header]
        if header[:3] != ["page_id", "importance", "change_rate"] or len(header) > 4 or (
            len(header) == 4 and header[3] != "complete"
        ):
            raise ValueError(
                f"{path}:1: header must be 'page_id,importance,change_rate[,complete]', got {','.join(header)!r}"
            )
        ncols = len(header)
        for lineno, row in enumerate(reader, start=2):
            if not row or (len(row) == 1 and not row[0].strip()):
                continue
            if len(row) != ncols:
                raise ValueError(f"{path}:{lineno}: expected {ncols} fields, got {len(row)}: {row!r}")
            ids.append(row[0].strip())
            for name, text, out in (("importance", row[1], imp), ("change_rate", row[2], lam)):
                try:
                    v = float(text)
                except ValueError:
                    raise ValueError(f"{path}:{lineno}: {name} {text!r} is not a number") from None
                if not np.isfinite(v) or v <= 0:
                    raise ValueError(f"{path}:{lineno}: {name} must be finite and > 0, got {text!r}")
                out.append(v)
            if ncols == 4:
                t = row[3].strip().lower()
                if t in _TRUE:
                    comp.append(True)
                elif t in _FALSE:
                    comp.append(False)
                else:
                    raise ValueError(f"{path}:{lineno}: complete must be a boolean (1/0/true/false), got {row[3]!r}")
            else:
                comp.append(False)
    if not ids:
        raise ValueError(f"{path}: no pages after the header")
    return PageTable(np.asarray(ids, dtype=object), np.asarray(imp), np.asarray(lam), np.asarray(comp, dtype=bool))


def write_plan_csv(path: str, page_id, rate, prob, chunk: int = 1 << 16) -> None:
    """Write a crawl plan ``page_id,rate,prob`` (one row per page), in chunks."""
    rate = np.asarray(rate)
    prob = np.asarray(prob)
    page_id = np.asarray(page_id)
    with open(path, "w", newline="") as fh:
        fh.write("page_id,rate,prob\n")
        for start in range(0, rate.shape[0], chunk):
            stop = start + chunk
            buf = io.StringIO()
            for pid, r, p in zip(page_id[start:stop], rate[start:stop], prob[start:stop]):
                buf.write(f"{pid},{r:.10g},{p:.10g}\n")
            fh.write(buf.getvalue())
