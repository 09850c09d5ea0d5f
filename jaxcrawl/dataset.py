"""Compatibility name for :mod:`jaxcrawl.io.neurips19` (the NeurIPS-19 data set loader).

``from jaxcrawl.dataset import load_crawl_dataset`` keeps working; new code should import
from :mod:`jaxcrawl.io` (or :mod:`jaxcrawl.io.neurips19`).
"""
from __future__ import annotations

from .io.neurips19 import FILES as FILES
from .io.neurips19 import CrawlDataset as CrawlDataset
from .io.neurips19 import FileReport as FileReport
from .io.neurips19 import LoadReport as LoadReport
from .io.neurips19 import load_crawl_dataset as load_crawl_dataset

__all__ = ["CrawlDataset", "FileReport", "LoadReport", "load_crawl_dataset", "FILES"]
