"""Scrapy revisiting pages by jaxcrawl's plan, and the live local web its freshness is measured on.

``scrapy`` itself is imported only by the modules that need it (``pip install "jaxcrawl[scrapy]"``);
:class:`LocalWeb`, :func:`measure` and :func:`predict` need only the standard library, NumPy and jaxcrawl.
"""
from __future__ import annotations

from ._localweb import LocalWeb as LocalWeb
from ._measure import measure as measure
from ._measure import predict as predict
from ._run import run_crawl as run_crawl
from ._scheduler import Scheduler as Scheduler
from ._state import CrawlState as CrawlState

__all__ = ["LocalWeb", "measure", "predict", "run_crawl", "Scheduler", "CrawlState"]
