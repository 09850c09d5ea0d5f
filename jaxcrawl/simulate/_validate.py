"""Eager validation of a :class:`~jaxcrawl.simulate.Schedule` against a problem."""
from __future__ import annotations

import numpy as np

from .._src.checks import is_concrete
from ..core.problem import CrawlProblem
from ._schedules import PERIODIC, POISSON, SIGNAL, Schedule


def check_schedule(problem: CrawlProblem, schedule: Schedule) -> None:
    """``ValueError`` unless ``schedule`` fits ``problem`` (skipped under tracing)."""
    if not is_concrete(problem, schedule):
        return
    n_shape = np.shape(problem.change_rate)
    kind = np.asarray(schedule.kind)
    for name in Schedule._fields:
        shp = np.shape(getattr(schedule, name))
        try:
            np.broadcast_shapes(shp, n_shape)
        except ValueError:
            raise ValueError(
                f"schedule.{name} has shape {shp}, which does not broadcast to the pages' "
                f"shape {n_shape}"
            ) from None
    if not np.all(np.isin(kind, (POISSON, PERIODIC, SIGNAL))):
        raise ValueError("schedule.kind must be POISSON (0), PERIODIC (1) or SIGNAL (2)")
    kind = np.broadcast_to(kind, n_shape)
    comp = np.asarray(problem.complete) != 0
    if np.any((kind == SIGNAL) & ~comp):
        raise ValueError(
            "schedule.kind is SIGNAL for a page that is not complete: only pages with "
            "complete change observations send change signals (K19 Π°)"
        )
    rate = np.broadcast_to(np.asarray(schedule.rate), n_shape)
    if np.any((kind == POISSON) & (~np.isfinite(rate) | (rate < 0))):
        raise ValueError("schedule.rate must be finite and >= 0 for POISSON pages")
    prob = np.broadcast_to(np.asarray(schedule.prob), n_shape)
    if np.any((kind == SIGNAL) & (~np.isfinite(prob) | (prob < 0) | (prob > 1))):
        raise ValueError("schedule.prob must be in [0, 1] for SIGNAL pages")
    per = np.broadcast_to(np.asarray(schedule.period), n_shape)
    if np.any((kind == PERIODIC) & (np.isnan(per) | (per <= 0))):
        raise ValueError("schedule.period must be > 0 for PERIODIC pages (inf = never)")
    ph = np.broadcast_to(np.asarray(schedule.phase), n_shape)
    if np.any((kind == PERIODIC) & ~np.isfinite(ph)):
        raise ValueError("schedule.phase must be finite for PERIODIC pages")
