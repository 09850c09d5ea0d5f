"""``run_crawl``: one Scrapy crawl of a set of pages by the component, to its end, in this process."""
from __future__ import annotations

import argparse
import csv
import json
import os
import sys

from ._scheduler import Config, check_config, require_scrapy
from ._state import CrawlState

__all__ = ["run_crawl", "main"]

#: Scrapy settings of a run (a project's own ``settings`` override all but the component's).
DEFAULT_SETTINGS = {
    "ROBOTSTXT_OBEY": True,
    "TELNETCONSOLE_ENABLED": False,
    "LOG_LEVEL": "WARNING",
    "RETRY_ENABLED": False,
    "COOKIES_ENABLED": False,
    "DOWNLOAD_DELAY": 0.0,
    "CONCURRENT_REQUESTS": 64,
    "CONCURRENT_REQUESTS_PER_DOMAIN": 8,
    "CONCURRENT_ITEMS": 1,  # the spider yields nothing: no 100 idle item workers per response
}


def _spider_class():
    scrapy = require_scrapy()

    class RevisitSpider(scrapy.Spider):
        """The pages come from the crawl state; their responses need no parsing."""

        name = "jaxcrawl"

        async def start(self):
            return
            yield

        def start_requests(self):
            return []

        def parse(self, response):
            return None

    return RevisitSpider


def run_crawl(seeds, *, state, policy: str, budget: float, seconds_per_day: float, days: float,
              objective: str = "harmonic", rates: dict | None = None, epoch_days: float = 1.0,
              importance=None, sitemap_days: float = 0.1, settings: dict | None = None) -> dict:
    """Crawl the pages ``seeds`` (URLs) for ``days`` model days of ``seconds_per_day`` wall
    seconds, revisiting them by ``policy`` at ``budget`` crawls per day, with the crawl state
    in the SQLite file ``state`` (continued when it exists).

    Runs a Scrapy ``CrawlerProcess`` to its end in this process (Twisted's reactor cannot
    start twice: one call per process; ``python -m jaxcrawl.scrapy.run`` runs one from the
    command line).  ``policy``: ``"plan"`` (the solve of ``rates`` = ``{url: change rate per
    day}``), ``"learn"``, ``"uniform"``, ``"nutch-adaptive"``; ``objective``: any registered
    objective name; ``epoch_days``: days between re-plans; ``importance``: one weight per
    seed (default 1); ``sitemap_days``: days between two polls of a host's sitemap (its
    ``lastmod`` are the change signals of the complete pages, for ``"plan"`` and ``"learn"``);
    ``settings``: more Scrapy settings.

    Returns the run's summary: ``requests`` (page requests sent), ``fetches`` (responses
    recorded), ``sitemap_requests``, ``days``, ``requests_per_day``, ``epochs`` (plans made),
    ``converged`` (every plan's solve converged), ``pages``, ``disallowed``, ``complete`` (pages
    whose sitemap entry has a ``lastmod``) and ``started_at``.  A plan that cannot
    be made (e.g. a budget beyond the hosts' crawl delays) raises ``ValueError``.
    """
    require_scrapy()
    cfg = check_config(Config(state=os.fspath(state), budget=budget, policy=policy,
                              seconds_per_day=seconds_per_day, days=days, objective=objective,
                              epoch_days=epoch_days, rates=rates, sitemap_days=sitemap_days))
    seeds = [str(u) for u in seeds]
    if not seeds:
        raise ValueError("seeds: at least one URL is needed")
    with CrawlState(cfg.state) as st:
        st.enroll(seeds, importance)
        st.set_meta("last_run", None)
    from scrapy.crawler import CrawlerProcess

    own = {"SCHEDULER": "jaxcrawl.scrapy.Scheduler", "JAXCRAWL_STATE": cfg.state, "JAXCRAWL_BUDGET": cfg.budget,
           "JAXCRAWL_POLICY": cfg.policy, "JAXCRAWL_SECONDS_PER_DAY": cfg.seconds_per_day, "JAXCRAWL_DAYS": cfg.days,
           "JAXCRAWL_OBJECTIVE": cfg.objective, "JAXCRAWL_EPOCH_DAYS": cfg.epoch_days, "JAXCRAWL_RATES": cfg.rates,
           "JAXCRAWL_SITEMAP_DAYS": cfg.sitemap_days}
    process = CrawlerProcess({**DEFAULT_SETTINGS, **(settings or {}), **own})
    process.crawl(_spider_class())
    process.start()
    with CrawlState(cfg.state) as st:
        summary = st.get_meta("last_run")
    if summary is None:
        raise RuntimeError("the crawl ended before its scheduler opened (see Scrapy's log)")
    if summary.get("error"):
        raise ValueError(summary["error"])
    return summary


def _read_lines(path: str) -> list[str]:
    with open(path, encoding="utf-8") as f:
        return [line.strip() for line in f if line.strip()]


def _read_rates(path: str) -> dict:
    with open(path, encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f))
    if rows and rows[0] and rows[0][0] == "url":
        rows = rows[1:]
    out = {}
    for k, row in enumerate(rows, 1):
        if len(row) != 2:
            raise ValueError(f"{path}: row {k} must be url,rate; got {row!r}")
        out[row[0]] = float(row[1])
    return out


def main(argv=None) -> int:
    """``python -m jaxcrawl.scrapy.run``: :func:`run_crawl` from the command line; prints the
    summary as one JSON object on the last line."""
    p = argparse.ArgumentParser(prog="python -m jaxcrawl.scrapy.run", description=run_crawl.__doc__.split("\n")[0])
    p.add_argument("--state", required=True, help="the crawl state (SQLite file)")
    p.add_argument("--seeds", required=True, help="file of page URLs, one per line")
    p.add_argument("--policy", required=True, choices=("plan", "learn", "uniform", "nutch-adaptive"))
    p.add_argument("--budget", required=True, type=float, help="crawls per day")
    p.add_argument("--seconds-per-day", type=float, default=86400.0)
    p.add_argument("--days", required=True, type=float)
    p.add_argument("--objective", default="harmonic")
    p.add_argument("--rates", help="CSV url,rate: change rates per day (policy plan)")
    p.add_argument("--epoch-days", type=float, default=1.0)
    p.add_argument("--sitemap-days", type=float, default=0.1)
    p.add_argument("--set", action="append", default=[], metavar="KEY=JSON", help="a Scrapy setting")
    args = p.parse_args(argv)
    try:
        settings = {}
        for item in args.set:
            key, sep, value = item.partition("=")
            if not sep:
                raise ValueError(f"--set {item!r}: must be KEY=VALUE")
            try:
                settings[key] = json.loads(value)
            except json.JSONDecodeError:
                settings[key] = value
        summary = run_crawl(_read_lines(args.seeds), state=args.state, policy=args.policy, budget=args.budget,
                            seconds_per_day=args.seconds_per_day, days=args.days, objective=args.objective,
                            rates=_read_rates(args.rates) if args.rates else None, epoch_days=args.epoch_days,
                            sitemap_days=args.sitemap_days, settings=settings)
    except (ValueError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(json.dumps(summary))
    return 0
