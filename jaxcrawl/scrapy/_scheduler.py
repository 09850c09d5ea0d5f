"""The Scrapy scheduler that decides *when* each page is fetched (``SCHEDULER`` setting).

Scrapy's engine asks its scheduler for the next request whenever the downloader has room
(``BaseScheduler``: ``open``, ``close``, ``has_pending_requests``, ``enqueue_request``,
``next_request``).  This one keeps every page of the crawl state in a queue per host, ordered
by each page's next planned fetch; a request leaves when its planned time has come and its
host's gap since the previous request has passed (each host a queue served in planned order,
as :func:`jaxcrawl.timetable.space_crawls` does).  Planned times are the timetable's
(:mod:`jaxcrawl.timetable`): a page's first fetch after a plan is ``max(now, last + 1 / rate)``
(its last *planned* fetch in a running crawl, its last *recorded* fetch after a restart), the
next ones every ``1 / rate``.  A timer wakes the engine when the next fetch is due (Scrapy would
otherwise look again only on its 5 s heartbeat).  Every response of a page is recorded in the
crawl state (one SQLite transaction) by the ``response_received`` signal.
"""
from __future__ import annotations

import hashlib
import heapq
import math
import time
from collections import deque
from typing import NamedTuple

import numpy as np

from ._policy import (
    POLICIES,
    NutchSettings,
    bucket,
    estimate_complete,
    estimate_rates,
    host_caps,
    nutch_scale,
    nutch_update,
    solve_rates,
)
from ._state import OK_STATUS, CrawlState, host_of, observations, signal_history

__all__ = ["Scheduler", "Config", "config_from_settings", "require_scrapy"]

_META_PAGE = "jaxcrawl_page"
_META_PLANNED = "jaxcrawl_planned"
_META_ROBOTS = "jaxcrawl_robots"
_META_SITEMAP = "jaxcrawl_sitemap"
_SITEMAP_NS = "{http://www.sitemaps.org/schemas/sitemap/0.9}"


def require_scrapy():
    """Import scrapy, or raise ``ImportError`` naming the extra."""
    try:
        import scrapy
    except ImportError as err:  # pragma: no cover - scrapy is installed in the test environment
        raise ImportError('the Scrapy component needs Scrapy: pip install "jaxcrawl[scrapy]"') from err
    return scrapy


class Config(NamedTuple):
    """The component's settings (Scrapy settings ``JAXCRAWL_*``)."""

    state: str
    budget: float
    policy: str = "learn"
    seconds_per_day: float = 86400.0
    days: float | None = None
    objective: str = "harmonic"
    epoch_days: float = 1.0
    rates: dict | None = None
    sitemap_days: float = 0.1


def _positive(name, value, *, allow_none=False):
    if value is None and allow_none:
        return None
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number > 0; got {value!r}") from None
    if not (math.isfinite(v) and v > 0):
        raise ValueError(f"{name} must be finite and > 0; got {value!r}")
    return v


def check_config(cfg: Config) -> Config:
    """``cfg`` with numbers checked (``ValueError`` naming the setting)."""
    if not cfg.state:
        raise ValueError("JAXCRAWL_STATE (state): the path of the crawl state is required")
    if cfg.policy not in POLICIES:
        raise ValueError(f"policy must be one of {', '.join(POLICIES)}; got {cfg.policy!r}")
    if cfg.policy == "plan" and not cfg.rates:
        raise ValueError("policy 'plan' needs rates: {url: change rate per day} of every page")
    rates = cfg.rates
    if rates is not None:
        rates = {str(u): _positive(f"rates[{u!r}]", r) for u, r in dict(rates).items()}
    from jaxcrawl import objective_names

    if cfg.objective not in objective_names():
        raise ValueError(f"objective must be one of {', '.join(objective_names())}; got {cfg.objective!r}")
    return cfg._replace(budget=_positive("budget", cfg.budget),
                        seconds_per_day=_positive("seconds_per_day", cfg.seconds_per_day),
                        days=_positive("days", cfg.days, allow_none=True),
                        epoch_days=_positive("epoch_days", cfg.epoch_days), rates=rates,
                        sitemap_days=_positive("sitemap_days", cfg.sitemap_days))


def config_from_settings(settings) -> Config:
    """The :class:`Config` of Scrapy settings ``JAXCRAWL_STATE``, ``JAXCRAWL_BUDGET``,
    ``JAXCRAWL_POLICY``, ``JAXCRAWL_SECONDS_PER_DAY``, ``JAXCRAWL_DAYS``, ``JAXCRAWL_OBJECTIVE``,
    ``JAXCRAWL_EPOCH_DAYS``, ``JAXCRAWL_RATES``, ``JAXCRAWL_SITEMAP_DAYS``."""
    d = Config._field_defaults
    return check_config(Config(
        state=settings.get("JAXCRAWL_STATE"), budget=settings.get("JAXCRAWL_BUDGET"),
        policy=settings.get("JAXCRAWL_POLICY", d["policy"]),
        seconds_per_day=settings.get("JAXCRAWL_SECONDS_PER_DAY", d["seconds_per_day"]),
        days=settings.get("JAXCRAWL_DAYS", None), objective=settings.get("JAXCRAWL_OBJECTIVE", d["objective"]),
        epoch_days=settings.get("JAXCRAWL_EPOCH_DAYS", d["epoch_days"]), rates=settings.get("JAXCRAWL_RATES", None),
        sitemap_days=settings.get("JAXCRAWL_SITEMAP_DAYS", d["sitemap_days"])))


def _header(response, name: bytes):
    value = response.headers.get(name)
    return None if value is None else value.decode("latin-1")


class Scheduler:
    """Scrapy scheduler revisiting the pages of a crawl state by jaxcrawl's plan.

    Turn it on with ``SCHEDULER = "jaxcrawl.scrapy.Scheduler"`` and the ``JAXCRAWL_*``
    settings (docs/scrapy.md).  Requests the spider yields enrol their URLs as pages (their
    callback is kept for the revisits); the pages are then fetched when the plan says.
    """

    def __init__(self, crawler, config: Config):
        self.crawler = crawler
        self.cfg = config
        self.nutch = NutchSettings()
        self.ready: deque = deque()
        self.templates: dict = {}
        self.done = False
        self.error: str | None = None
        self.planned = False
        self.replanning = False
        self.dirty = False
        self.start_time: float | None = None
        self.end_time: float | None = None
        self.next_epoch: float | None = None
        self.requests = 0
        self.fetches = 0
        self.plans: list[bool] = []
        self._wake_call = None
        self._tick = None
        self.scale = 1.0

    @classmethod
    def from_crawler(cls, crawler):
        require_scrapy()
        return cls(crawler, config_from_settings(crawler.settings))

    # ------------------------------------------------------------------------------ lifecycle
    def open(self, spider):
        from scrapy import signals

        self.spider = spider
        self.state = CrawlState(self.cfg.state)
        origin = self.state.get_meta("origin")
        if origin is None:
            origin = time.time()
            self.state.set_meta("origin", origin)
        self.origin = float(origin)
        self._load()
        self.crawler.signals.connect(self._on_response, signal=signals.response_received)
        self.obey = bool(self.crawler.settings.getbool("ROBOTSTXT_OBEY"))
        self.download_delay = float(self.crawler.settings.getfloat("DOWNLOAD_DELAY", 0.0))
        for h in range(len(self.hosts)):
            self._ask_robots(h)
        from twisted.internet import task

        self._tick = task.LoopingCall(self._on_tick)
        self._tick.start(min(0.5, 0.05 * self.cfg.seconds_per_day), now=False)
        return None

    def close(self, reason):
        if self._wake_call is not None and self._wake_call.active():
            self._wake_call.cancel()
        if self._tick is not None and self._tick.running:
            self._tick.stop()
        if not hasattr(self, "urls"):  # open failed before the state was read
            return None
        summary = self.summary(reason)
        self.state.set_meta("last_run", summary)
        self.state.close()
        return None

    def summary(self, reason: str = "") -> dict:
        days = 0.0
        if self.start_time is not None:
            days = (min(time.time(), self.end_time or math.inf) - self.start_time) / self.cfg.seconds_per_day
        return {"policy": self.cfg.policy, "objective": self.cfg.objective, "budget": self.cfg.budget,
                "pages": int(len(self.urls)), "disallowed": int(np.sum(~self.allowed)), "requests": self.requests,
                "fetches": self.fetches, "sitemap_requests": self.sitemap_requests,
                "complete": int(np.sum(self.complete & self.allowed)), "days": days,
                "requests_per_day": self.requests / days if days > 0 else 0.0,
                "epochs": len(self.plans), "converged": bool(all(self.plans)) if self.plans else False,
                "started_at": self.start_time, "reason": reason, "error": self.error}

    def has_pending_requests(self) -> bool:
        return bool(self.ready) or not self.done

    def enqueue_request(self, request) -> bool:
        if _META_PAGE in request.meta or _META_ROBOTS in request.meta or _META_SITEMAP in request.meta:
            self.ready.append(request)  # our own request, back from a wake-up, a retry or a redirect
            return True
        url = request.url
        self.templates[url] = request
        if url not in self.index:
            self._enroll([url])
        return True

    def next_request(self):
        if self.ready:
            return self.ready.popleft()
        if not self.planned or self.done:
            return None
        req = self._pop_due(self._day(time.time()))
        if req is None:
            self._arm_wake()
        return req

    # ------------------------------------------------------------------------------ pages
    def _load(self):
        pages = self.state.pages()
        self.urls = list(pages["url"])
        self.index = {u: i for i, u in enumerate(self.urls)}
        self.hosts: list[str] = []
        self.host_index: dict = {}
        self.scheme: dict = {}
        self.host = np.asarray([self._host_id(host_of(u), u.partition(":")[0].lower()) for u in self.urls], np.int64)
        self.importance = pages["importance"]
        self.allowed = pages["allowed"]
        self.last_digest = list(pages["last_digest"])
        # a restarted crawl continues from each page's last recorded fetch
        self.anchor = np.where(np.isnan(pages["last_fetch"]), -np.inf, self._day(pages["last_fetch"]))
        self.last_fetch = pages["last_fetch"]
        self.last_sent = np.full(len(self.urls), np.nan)
        self.change_rate = pages["change_rate"]
        self.rate = np.nan_to_num(pages["rate"], nan=0.0)
        self.prob = np.nan_to_num(pages["prob"], nan=0.0)
        self.complete = pages["complete"]
        self.watched_from = pages["watched_from"]
        sig = self.state.signals()
        self.lastmod_seen = np.full(len(self.urls), np.nan)
        if sig["url"].size:
            last = np.r_[sig["url"][1:] != sig["url"][:-1], True]  # ordered by url, lastmod
            idx = np.asarray([self.index[u] for u in sig["url"][last]], np.int64)
            self.lastmod_seen[idx] = sig["lastmod"][last]
        self.sitemaps: dict = {}
        self.next_poll: dict = {}
        self.polls_pending: set = set()
        self.sitemap_requests = 0
        self.rng = np.random.default_rng(int(self.origin * 1e6) % (2**32))
        self.nutch_interval = np.where(np.isnan(pages["nutch_interval"]), self.nutch.interval_default,
                                       pages["nutch_interval"])
        self.nutch_modified = pages["nutch_modified"]
        self.nutch_gap = self.nutch_interval.copy()
        self.robots: dict = {}
        self.gap = np.zeros(len(self.hosts))
        self._reset_queues()

    def _host_id(self, host: str, scheme: str = "http") -> int:
        if host not in self.host_index:
            self.scheme[host] = scheme
            self.host_index[host] = len(self.hosts)
            self.hosts.append(host)
            if hasattr(self, "gap"):
                self.gap = np.append(self.gap, 0.0)
                self.hq.append([])
                self.host_ready = np.append(self.host_ready, -np.inf)
                self.hver = np.append(self.hver, 0)
                self._ask_robots(len(self.hosts) - 1)
        return self.host_index[host]

    def _enroll(self, urls):
        self.state.enroll(urls)
        for url in urls:
            self.index[url] = len(self.urls)
            self.urls.append(url)
            self.host = np.append(self.host, self._host_id(host_of(url), url.partition(":")[0].lower()))
            self.last_digest.append(None)
        k = len(urls)
        self.importance = np.append(self.importance, np.ones(k))
        self.allowed = np.append(self.allowed, np.ones(k, bool))
        self.anchor = np.append(self.anchor, np.full(k, -np.inf))
        self.last_fetch = np.append(self.last_fetch, np.full(k, np.nan))
        self.last_sent = np.append(self.last_sent, np.full(k, np.nan))
        self.change_rate = np.append(self.change_rate, np.full(k, np.nan))
        self.rate = np.append(self.rate, np.zeros(k))
        self.prob = np.append(self.prob, np.zeros(k))
        self.complete = np.append(self.complete, np.zeros(k, bool))
        self.watched_from = np.append(self.watched_from, np.full(k, np.nan))
        self.lastmod_seen = np.append(self.lastmod_seen, np.full(k, np.nan))
        self.nutch_interval = np.append(self.nutch_interval, np.full(k, self.nutch.interval_default))
        self.nutch_modified = np.append(self.nutch_modified, np.full(k, np.nan))
        self.nutch_gap = np.append(self.nutch_gap, np.full(k, self.nutch.interval_default))
        self.ver = np.append(self.ver, np.zeros(k, np.int64))
        self.next_t = np.append(self.next_t, np.full(k, np.inf))
        self.dirty = True  # the next tick plans them

    def _day(self, unix):
        return (np.asarray(unix, np.float64) - self.origin) / self.cfg.seconds_per_day

    # ------------------------------------------------------------------------------ robots.txt
    def _ask_robots(self, h: int):
        if not getattr(self, "obey", False) or h in self.robots:
            return
        from scrapy import Request

        host = self.hosts[h]
        scheme = self.scheme.get(host, "http")
        self.robots[h] = None  # pending
        self.ready.append(Request(f"{scheme}://{host}/robots.txt", callback=_no_output, errback=self._robots_failed,
                                  dont_filter=True, priority=100,
                                  meta={_META_ROBOTS: h, "dont_obey_robotstxt": True, "download_slot": host}))

    def _robots_failed(self, failure):
        request = getattr(failure, "request", None)
        h = None if request is None else request.meta.get(_META_ROBOTS)
        if h is not None and self.robots.get(h) is None:
            self._set_robots(h, None, None)  # unreachable robots.txt: everything allowed (as Scrapy does)

    def _set_robots(self, h: int, text: str | None, body: bytes | None):
        from scrapy.utils.misc import load_object

        settings = self.crawler.settings
        agent = settings.get("ROBOTSTXT_USER_AGENT") or settings.get("USER_AGENT") or "*"
        delay = None
        parser = None
        if body is not None:
            parser = load_object(settings.get("ROBOTSTXT_PARSER")).from_crawler(self.crawler, body)
            from protego import Protego

            rules = Protego.parse(text)
            delay = rules.crawl_delay(agent)
            if self.signals_used:
                self.sitemaps[h] = [u for u in rules.sitemaps if host_of(u) == self.hosts[h]][:1]
                if self.sitemaps[h]:
                    self.polls_pending.add(h)
                    self._poll(h)
        self.robots[h] = parser if parser is not None else True
        self.gap[h] = max(float(delay or 0.0), self.download_delay)
        self.state.set_robots(self.hosts[h], text, None if delay is None else float(delay), time.time())
        if parser is not None:
            mine = np.flatnonzero(self.host == h)
            verdict = np.asarray([bool(parser.allowed(self.urls[i], agent)) for i in mine], bool)
            self.allowed[mine] = verdict
            self.state.set_allowed([self.urls[i] for i in mine], verdict)
        self.dirty = True
        self._maybe_start()

    def _robots_pending(self) -> bool:
        """Whether a host's robots.txt or first sitemap is still awaited."""
        return (self.obey and any(v is None for v in self.robots.values())) or bool(self.polls_pending)

    # ------------------------------------------------------------------------------ sitemaps
    @property
    def signals_used(self) -> bool:
        return self.cfg.policy in ("plan", "learn")

    def _poll(self, h: int):
        """Fetch host ``h``'s sitemap (its ``lastmod`` are the complete pages' change signals)."""
        from scrapy import Request

        self.next_poll[h] = math.inf  # until it answers
        self.host_ready[h] = max(self.host_ready[h], float(self._day(time.time()))) + self.gap[h] / \
            self.cfg.seconds_per_day
        self.sitemap_requests += 1
        req = Request(self.sitemaps[h][0], callback=_no_output, errback=self._sitemap_failed, dont_filter=True,
                      priority=50, meta={_META_SITEMAP: h, "download_slot": self.hosts[h]})
        if self.planned:
            self.crawler.engine.crawl(req)
        else:
            self.ready.append(req)

    def _sitemap_failed(self, failure):
        request = getattr(failure, "request", None)
        h = None if request is None else request.meta.get(_META_SITEMAP)
        if h is not None and self.next_poll.get(h) == math.inf:
            self._sitemap_done(h)

    def _sitemap_done(self, h: int):
        announcing = bool(np.any(self.complete[self.host == h]))  # a host with no complete page is not polled again
        self.next_poll[h] = time.time() + self.cfg.sitemap_days * self.cfg.seconds_per_day if announcing else math.inf
        if h in self.polls_pending:
            self.polls_pending.discard(h)
            self._maybe_start()

    def _on_sitemap(self, h: int, body: bytes):
        import xml.etree.ElementTree as ET
        from datetime import datetime

        now = time.time()
        try:
            root = ET.fromstring(body)
        except ET.ParseError:
            return
        locs, mods = [], []
        for entry in root.iter(f"{_SITEMAP_NS}url"):
            loc = entry.findtext(f"{_SITEMAP_NS}loc")
            mod = entry.findtext(f"{_SITEMAP_NS}lastmod")
            if loc is None or loc.strip() not in self.index:
                continue
            try:
                stamp = datetime.fromisoformat(mod.strip()).timestamp() if mod else np.nan
            except ValueError:
                stamp = np.nan
            locs.append(self.index[loc.strip()])
            mods.append(stamp)
        if not locs:
            return
        idx = np.asarray(locs, np.int64)
        mod = np.asarray(mods, np.float64)
        flag = np.isfinite(mod)
        moved = flag != self.complete[idx]
        if moved.any():  # pages that start or stop announcing their changes
            self.complete[idx] = flag
            self.watched_from[idx[moved]] = np.where(flag[moved], now, np.nan)
            self.state.set_complete([self.urls[i] for i in idx[moved]], flag[moved],
                                    [None if not np.isfinite(w) else float(w) for w in self.watched_from[idx[moved]]])
            self.dirty = True
        seen = self.lastmod_seen[idx]
        new = flag & ~(mod <= seen)
        if new.any():
            fresh = idx[new]
            self.state.record_signals([(self.urls[i], float(t), now) for i, t in zip(fresh, mod[new])])
            last = np.nan_to_num(self.anchor_fetch(fresh), nan=-np.inf)
            signal = mod[new] > last  # changed since the copy was fetched
            self.lastmod_seen[fresh] = mod[new]
            go = fresh[signal & (self.rng.random(fresh.size) < self.prob[fresh])]
            if self.planned and not self.done:
                t = float(self._day(now))
                for i in go.tolist():  # crawled on its signal with the plan's probability
                    self._push(i, t)
                self._arm_wake()

    def anchor_fetch(self, pages):
        """Unix seconds of each page's last request sent or fetch recorded (NaN: none): a change
        before it is seen by that fetch."""
        return np.fmax(self.last_fetch[pages], self.last_sent[pages])

    # ------------------------------------------------------------------------------ responses
    def _on_response(self, response, request, spider=None):
        if _META_SITEMAP in request.meta:
            h = request.meta[_META_SITEMAP]
            if response.status == 200:
                self._on_sitemap(h, response.body)
            self._sitemap_done(h)
            return
        if _META_ROBOTS in request.meta:
            h = request.meta[_META_ROBOTS]
            if self.robots.get(h) is None:
                ok = response.status == 200
                self._set_robots(h, response.body.decode("utf-8", "replace") if ok else None,
                                 response.body if ok else None)
            return
        url = request.meta.get(_META_PAGE)
        if url is None or url not in self.index:
            return
        i = self.index[url]
        now = time.time()
        ok = response.status in OK_STATUS
        digest = hashlib.sha1(response.body).hexdigest() if response.status == 200 else None
        previous = self.last_digest[i]
        nutch = None
        if self.cfg.policy == "nutch-adaptive" and ok:
            status = "unknown" if previous is None else ("modified" if digest not in (None, previous) else "unmodified")
            modified = self.nutch_modified[i]
            # the rule's fetch time is the planned one: a response's latency, negligible in real
            # days, would otherwise stretch every accelerated interval
            t = request.meta.get(_META_PLANNED, float(self._day(now)))
            interval, modified, nxt = nutch_update(float(self.nutch_interval[i]),
                                                   float(modified) if np.isfinite(modified) else 0.0,
                                                   float(t), status, self.scale, self.nutch)
            gap = (nxt - t) / self.scale  # the rule's gap to the next fetch (sync_delta makes it < interval)
            if self.allowed[i]:  # keep the sum of the rates 1 / (scale * gap) at the budget
                self.scale += (1.0 / gap - 1.0 / self.nutch_gap[i]) / self.cfg.budget
            self.nutch_interval[i], self.nutch_modified[i], self.nutch_gap[i] = interval, modified, gap
            nutch = (interval, modified)
            if self.planned and not self.done:
                self.rate[i] = 1.0 / (self.scale * gap)
                self._push(i, max(t + self.scale * gap, float(self._day(now))))
        if ok and digest is not None:
            self.last_digest[i] = digest
        self.last_fetch[i] = now
        self.state.record_fetch(url, now, response.status, digest, _header(response, b"ETag"),
                                _header(response, b"Last-Modified"), planned=request.meta.get(_META_PLANNED),
                                nutch=nutch)
        self.fetches += 1

    # ------------------------------------------------------------------------------ plans
    def _maybe_start(self):
        if self.planned or self.replanning or not self.urls or self._robots_pending() or self.error:
            return
        if not hasattr(self, "spider"):
            return
        self._replan(blocking=True)
        if self.error:
            return
        self.planned = True
        self._rebuild()
        self.start_time = time.time()
        # the signals are watched from now on (none were polled while the crawl was down or starting)
        watched = self.complete & ~(self.watched_from >= self.start_time)
        if watched.any():
            self.watched_from[watched] = self.start_time
            self.state.set_complete([self.urls[i] for i in np.flatnonzero(watched)], np.ones(int(watched.sum())),
                                    [self.start_time] * int(watched.sum()))
        self.end_time = None if self.cfg.days is None else self.start_time + self.cfg.days * self.cfg.seconds_per_day
        self.next_epoch = self.start_time + self.cfg.epoch_days * self.cfg.seconds_per_day
        self._arm_wake()

    def _on_tick(self):
        try:
            self._tick_once()
        except Exception as err:  # a failed tick ends the crawl with its reason (else it would never end)
            self._fail(f"{type(err).__name__}: {err}")

    def _tick_once(self):
        now = time.time()
        if self.error or self.done:
            return
        if self.end_time is not None and now >= self.end_time:
            self._finish()
            return
        if not self.planned:
            self._maybe_start()
            return
        for h, due in list(self.next_poll.items()):
            if now >= due and self.host_ready[h] <= float(self._day(now)):
                self._poll(h)
        if self.replanning or self._robots_pending():
            return
        if now >= self.next_epoch:
            epoch = self.cfg.epoch_days * self.cfg.seconds_per_day
            self.next_epoch += epoch * (math.floor((now - self.next_epoch) / epoch) + 1)
            if self.cfg.policy == "learn":  # the other policies' plans change only with the pages
                self._replan(blocking=False)
        if self.cfg.policy == "nutch-adaptive" and abs(self.scale - self.timed_scale) > 0.01 * self.timed_scale:
            self._retime()
        if self.dirty and not self.replanning:
            self._replan(blocking=False)

    def _finish(self):
        self.done = True
        if self._wake_call is not None and self._wake_call.active():
            self._wake_call.cancel()
        self._poke()

    def _fail(self, message: str):
        self.error = message
        self.done = True
        engine = self.crawler.engine
        if hasattr(engine, "close_spider_async"):
            from scrapy.utils.defer import deferred_from_coro

            deferred_from_coro(engine.close_spider_async(reason="jaxcrawl_error"))
        else:  # pragma: no cover - Scrapy before 2.14
            engine.close_spider(self.spider, "jaxcrawl_error")

    def _inputs(self):
        """What a plan needs, copied in the reactor thread."""
        return {"allowed": self.allowed.copy(), "importance": self.importance.copy(),
                "change_rate": self.change_rate.copy(), "host": self.host.copy(), "gap": self.gap.copy(),
                "urls": np.asarray(self.urls, dtype=object), "now": time.time(),
                "interval": self.nutch_gap.copy(), "complete": self.complete.copy(),
                "watched_from": self.watched_from.copy(),
                "polling": np.asarray([bool(self.sitemaps.get(h)) and bool(np.any(self.complete[self.host == h]))
                                       for h in range(len(self.hosts))], bool)}

    def _compute(self, x):
        """The new plan ``(change_rate, rate, converged, scale)``; runs in a worker thread
        (``"learn"`` reads the fetch log through its own connection)."""
        cfg = self.cfg
        polls = np.where(x["polling"], 1.0 / cfg.sitemap_days, 0.0)
        caps = host_caps(x["host"], x["gap"], cfg.seconds_per_day, other=polls)
        if cfg.policy == "nutch-adaptive":
            scale = nutch_scale(x["interval"], x["allowed"], cfg.budget)
            rate = np.where(x["allowed"], 1.0 / (scale * x["interval"]), 0.0)
            return x["change_rate"], rate, np.zeros_like(rate), True, scale
        if cfg.policy == "plan":
            missing = [u for u, a in zip(x["urls"], x["allowed"]) if a and u not in cfg.rates]
            if missing:
                raise ValueError(f"rates: no change rate for {len(missing)} page(s), e.g. {missing[0]!r}")
            change = np.asarray([cfg.rates.get(u, 1.0) for u in x["urls"]], np.float64)
            ok = True
        elif cfg.policy == "learn":
            order = np.argsort(x["urls"])
            with CrawlState(cfg.state) as st:
                log = st.fetches(until=x["now"])
                sig = st.signals()
            w, c, m = observations(log, x["urls"][order], cfg.seconds_per_day)
            est, ok = estimate_rates(w, c, m)
            # complete pages: their signals (NeurIPS-19 eq. 11 with Alg. 4 line 13's imaginary one)
            w, c, m = signal_history(sig, x["urls"][order], x["watched_from"][order], x["now"], cfg.seconds_per_day)
            est = np.where(x["complete"][order], estimate_complete(w, c, m), est)
            change = np.empty_like(est)
            change[order] = est
        else:
            change, ok = x["change_rate"], True
        rate, prob, conv = solve_rates(cfg.policy, importance=x["importance"], change_rate=change, budget=cfg.budget,
                                       allowed=x["allowed"], caps=caps, objective=cfg.objective,
                                       complete=x["complete"] if self.signals_used else None)
        return change, rate, prob, ok and conv, 1.0

    def _phases(self, host):
        from jaxcrawl.timetable import golden_phase

        n = len(host)
        group = np.full(bucket(n), int(host.max(initial=0)) + 1)  # padding pages in a group of their own
        group[:n] = host
        return np.asarray(golden_phase(group.size, group=group), np.float64)[:n]

    def _retime(self):
        """The adaptive rule's pending fetches moved to the present scale (its budget)."""
        now = float(self._day(time.time()))
        self.rate = np.where(self.allowed, 1.0 / (self.scale * self.nutch_gap), 0.0)
        ahead = np.isfinite(self.next_t) & (self.next_t > now)
        # the rule's clock runs 1 / scale as fast: what is left of each wait stretches by the change
        first = np.where(ahead, now + (self.next_t - now) * (self.scale / self.timed_scale), self.next_t)
        self._rebuild(first)
        self._arm_wake()

    def _replan(self, blocking: bool):
        self.dirty = False
        x = self._inputs()
        if blocking:
            try:
                self._apply(x, self._plan(x))
            except Exception as err:  # a plan that cannot be made ends the crawl with its reason
                self._fail(str(err))
            return
        from twisted.internet import threads

        self.replanning = True
        d = threads.deferToThread(self._plan, x)
        d.addCallback(lambda result: self._apply(x, result))
        d.addErrback(lambda f: self._fail(str(f.value)))
        d.addBoth(lambda _: setattr(self, "replanning", False))

    def _plan(self, x):
        return self._compute(x), self._phases(x["host"])

    def _apply(self, x, result):
        (change, rate, prob, converged, scale), phase = result
        self.phase = phase
        n = len(x["urls"])
        self.change_rate[:n] = change
        self.rate[:n] = rate
        self.prob[:n] = prob
        self.scale = scale
        self.plans.append(bool(converged))
        self.state.save_plan(self.urls[:n], change, rate, prob, started_at=x["now"], policy=self.cfg.policy,
                             objective=None if self.cfg.policy == "nutch-adaptive" else self.cfg.objective,
                             budget=self.cfg.budget, converged=converged)
        if self.planned:
            self._rebuild()
            self._arm_wake()

    # ------------------------------------------------------------------------------ queues
    def _reset_queues(self):
        self.hq = [[] for _ in self.hosts]
        self.gq: list = []
        self.host_ready = np.full(len(self.hosts), -np.inf)
        self.hver = np.zeros(len(self.hosts), np.int64)
        self.ver = np.zeros(len(self.urls), np.int64)
        self.next_t = np.full(len(self.urls), np.inf)

    def _rebuild(self, first=None):
        """Every page's next planned fetch (``first``, days; ``inf``: none) or, by default, the
        plan's: ``max(now, anchor + 1 / rate)``, or the grid point ``(k + phase) / rate``
        (:func:`jaxcrawl.timetable.golden_phase` within its host) of a page with no anchor."""
        from jaxcrawl._src.timeunits import first_crawl

        self.timed_scale = self.scale
        ready = self.host_ready.copy()
        self._reset_queues()
        self.host_ready = ready
        n = len(self.urls)
        if first is None:
            rate = np.where(self.allowed & (self.prob == 0), self.rate, 0.0)  # signal pages wait for signals
            phase = np.zeros(n)
            phase[:len(self.phase)] = self.phase[:n]  # pages enrolled since the plan have rate 0 until the next
            now = float(self._day(time.time()))
            first = first_crawl(rate, phase, now, self.anchor)
            # a page crawled on its signals is fetched once at the start when it has no copy yet
            first = np.where(self.allowed & (self.prob > 0) & ~np.isfinite(self.anchor), now, first)
        self.next_t = np.asarray(first, np.float64).copy()
        pages = np.flatnonzero(np.isfinite(first))
        pages = pages[np.lexsort((first[pages], self.host[pages]))]
        self.ver[pages] = 1
        # a sorted list is a heap: each host's queue in one pass
        cuts = np.flatnonzero(np.diff(self.host[pages])) + 1
        for part in np.split(pages, cuts) if pages.size else []:
            h = int(self.host[part[0]])
            self.hq[h] = list(zip(first[part].tolist(), part.tolist(), [1] * part.size))
            self._refresh_host(h)

    def _push(self, i: int, t: float):
        self.next_t[i] = t
        self.ver[i] += 1
        h = int(self.host[i])
        heapq.heappush(self.hq[h], (t, i, int(self.ver[i])))
        self._refresh_host(h)

    def _head(self, h: int):
        q = self.hq[h]
        while q and q[0][2] != self.ver[q[0][1]]:
            heapq.heappop(q)
        return q[0] if q else None

    def _refresh_host(self, h: int):
        head = self._head(h)
        if head is None:
            return
        self.hver[h] += 1
        heapq.heappush(self.gq, (max(head[0], self.host_ready[h]), h, int(self.hver[h])))

    def _pop_due(self, now: float):
        gq = self.gq
        while gq:
            key, h, hv = gq[0]
            if hv != self.hver[h]:
                heapq.heappop(gq)
                continue
            if key > now:
                return None
            heapq.heappop(gq)
            head = self._head(h)
            if head is None:
                continue
            t, i, _ = heapq.heappop(self.hq[h])
            self.host_ready[h] = now + self.gap[h] / self.cfg.seconds_per_day
            self.anchor[i] = t
            self.last_sent[i] = time.time()
            if self.rate[i] > 0 and self.prob[i] == 0:  # the timetable's next grid point (the adaptive rule
                # moves it on response; a page crawled on its signals waits for the next)
                self.ver[i] += 1
                self.next_t[i] = t + 1.0 / self.rate[i]
                heapq.heappush(self.hq[h], (self.next_t[i], i, int(self.ver[i])))
            self._refresh_host(h)
            self.requests += 1
            return self._request(i, t)
        return None

    def _request(self, i: int, planned: float):
        from scrapy import Request

        url = self.urls[i]
        meta = {_META_PAGE: url, _META_PLANNED: planned, "download_slot": self.hosts[int(self.host[i])]}
        tpl = self.templates.get(url)
        if tpl is None:
            return Request(url, dont_filter=True, meta=meta)
        return tpl.replace(dont_filter=True, meta={**tpl.meta, **meta})

    def _first_key(self):
        gq = self.gq
        while gq and gq[0][2] != self.hver[gq[0][1]]:
            heapq.heappop(gq)
        return gq[0][0] if gq else None

    def _arm_wake(self):
        """A timer that hands the engine the next due request when its time comes."""
        from twisted.internet import reactor

        key = self._first_key()
        if key is None or self.done:
            return
        at = self.origin + key * self.cfg.seconds_per_day
        if self._wake_call is not None and self._wake_call.active():
            if self._wake_call.getTime() <= at + 1e-6:
                return
            self._wake_call.cancel()
        self._wake_call = reactor.callLater(max(0.0, at - time.time()) + 1e-4, self._wake)

    def _wake(self):
        self._wake_call = None
        if self.done or not self.planned:
            return
        req = self._pop_due(float(self._day(time.time())))
        if req is None:
            self._arm_wake()
            return
        self.crawler.engine.crawl(req)  # through enqueue_request to the ready queue; wakes the engine

    def _poke(self):
        """Let the engine see at once that the crawl is over (else on its heartbeat)."""
        slot = getattr(self.crawler.engine, "_slot", None)
        nextcall = getattr(slot, "nextcall", None)
        if nextcall is not None:
            nextcall.schedule()


def _no_output(response):
    return None
