"""Compatibility name for :mod:`jaxcrawl.timetable` (the crawl timetable).

``jaxcrawl.schedule`` was the module's first name; every public name of
:mod:`jaxcrawl.timetable` is re-exported here so that ``import jaxcrawl.schedule`` and
``jaxcrawl.schedule.timetable(...)`` keep working.  New code should use
``jaxcrawl.timetable``.
"""
from __future__ import annotations

from .timetable import CrawlerState as CrawlerState
from .timetable import SpacedTimetable as SpacedTimetable
from .timetable import Timetable as Timetable
from .timetable import crawl_counts as crawl_counts
from .timetable import ein as ein
from .timetable import golden_phase as golden_phase
from .timetable import hashed_phase as hashed_phase
from .timetable import init_crawler as init_crawler
from .timetable import next_crawls as next_crawls
from .timetable import periodic_binary_cost as periodic_binary_cost
from .timetable import periodic_harmonic_cost as periodic_harmonic_cost
from .timetable import space_crawls as space_crawls
from .timetable import timetable as timetable
from .timetable import timetable_from_policy as timetable_from_policy

__all__ = [
    "Timetable",
    "CrawlerState",
    "golden_phase",
    "hashed_phase",
    "crawl_counts",
    "timetable",
    "timetable_from_policy",
    "SpacedTimetable",
    "space_crawls",
    "init_crawler",
    "next_crawls",
    "periodic_binary_cost",
    "periodic_harmonic_cost",
    "ein",
]
