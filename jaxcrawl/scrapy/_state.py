"""The crawl state of the Scrapy component: one SQLite file (standard library), WAL journal.

Tables (the schema is documented in docs/scrapy.md):

* ``fetches`` -- every response of a page request: ``url, fetched_at`` (unix seconds the
  response arrived), ``status``, ``digest`` (sha1 hex of the body), ``etag``,
  ``last_modified``;
* ``pages`` -- every page: host (``netloc``), importance, robots verdict, the last fetch
  (time, planned time, digest, validators), the current change-rate estimate and crawl rate,
  the adaptive rule's interval and modified time;
* ``hosts`` -- robots.txt of every host and its ``Crawl-delay`` (seconds);
* ``signals`` -- every new sitemap ``lastmod`` of a page (a change signal) and when it was seen;
* ``epochs`` -- one row per plan: when, policy, objective, pages, budget, converged;
* ``meta`` -- key/value: the grid origin (unix seconds of day 0), the last run's summary.

Every write is one transaction (``with connection``), so a killed process loses no committed
fetch; a restart reads everything back.
"""
from __future__ import annotations

import csv
import json
import os
import sqlite3
from urllib.parse import urlsplit

import numpy as np

__all__ = ["CrawlState"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS fetches(url TEXT NOT NULL, fetched_at REAL NOT NULL, status INTEGER NOT NULL,
    digest TEXT, etag TEXT, last_modified TEXT);
CREATE INDEX IF NOT EXISTS fetches_by_url ON fetches(url, fetched_at);
CREATE TABLE IF NOT EXISTS pages(url TEXT PRIMARY KEY, host TEXT NOT NULL, importance REAL NOT NULL DEFAULT 1.0,
    allowed INTEGER NOT NULL DEFAULT 1, complete INTEGER NOT NULL DEFAULT 0, watched_from REAL, last_fetch REAL,
    last_planned REAL, last_digest TEXT, etag TEXT,
    last_modified TEXT, change_rate REAL, rate REAL, prob REAL, nutch_interval REAL, nutch_modified REAL);
CREATE TABLE IF NOT EXISTS signals(url TEXT NOT NULL, lastmod REAL NOT NULL, seen_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS hosts(host TEXT PRIMARY KEY, crawl_delay REAL, robots TEXT, fetched_at REAL);
CREATE TABLE IF NOT EXISTS epochs(epoch INTEGER PRIMARY KEY, started_at REAL NOT NULL, policy TEXT NOT NULL,
    objective TEXT, num_pages INTEGER NOT NULL, budget REAL NOT NULL, converged INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""

#: Statuses whose response is a successful fetch (304: the copy is confirmed current).
OK_STATUS = (200, 304)


def host_of(url: str) -> str:
    """The host key of a page: its ``netloc`` (``host:port``), lower-cased; ``ValueError`` when
    the URL has none."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"seed {url!r} must be an absolute http(s) URL")
    return parts.netloc.lower()


class CrawlState:
    """The component's crawl state in the SQLite file ``path`` (created when missing).

    Fetch recording, page enrolment and plans are each one transaction; reading the file
    back (a new :class:`CrawlState` on the same path) restores everything a killed crawl had
    committed.  One instance is used from one thread; a worker thread opens its own.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        folder = os.path.dirname(os.path.abspath(self.path))
        if not os.path.isdir(folder):
            raise FileNotFoundError(f"state: folder {folder!r} of the crawl state does not exist")
        try:
            self.db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self.db.executescript(_SCHEMA)
        except sqlite3.DatabaseError as err:
            raise ValueError(f"state: {self.path!r} is not a jaxcrawl crawl state ({err})") from None

    def close(self) -> None:
        self.db.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _tx(self, statements):
        """Run ``[(sql, params)]`` (params a tuple or a list of tuples) as one transaction."""
        cur = self.db.cursor()
        cur.execute("BEGIN IMMEDIATE")
        try:
            for sql, params in statements:
                if isinstance(params, list):
                    cur.executemany(sql, params)
                else:
                    cur.execute(sql, params)
        except BaseException:
            cur.execute("ROLLBACK")
            raise
        cur.execute("COMMIT")

    # -- meta ----------------------------------------------------------------------------------
    def get_meta(self, key: str, default=None):
        row = self.db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return default if row is None else json.loads(row[0])

    def set_meta(self, key: str, value) -> None:
        self._tx([("INSERT OR REPLACE INTO meta(key, value) VALUES(?, ?)", (key, json.dumps(value)))])

    # -- pages ---------------------------------------------------------------------------------
    def enroll(self, urls, importance=None) -> int:
        """Add pages (URLs not yet known; known ones keep their state, their importance is
        updated when given).  Returns the number of new pages."""
        urls = list(urls)
        hosts = [host_of(u) for u in urls]
        before = self.num_pages()
        if importance is None:
            rows = [(u, h) for u, h in zip(urls, hosts)]
            self._tx([("INSERT OR IGNORE INTO pages(url, host) VALUES(?, ?)", rows)])
        else:
            imp = np.asarray(importance, np.float64)
            if imp.shape != (len(urls),) or not np.all(np.isfinite(imp) & (imp > 0)):
                raise ValueError("importance must be finite and > 0, one per seed")
            rows = [(u, h, float(w)) for u, h, w in zip(urls, hosts, imp.tolist())]
            self._tx([("INSERT INTO pages(url, host, importance) VALUES(?, ?, ?) "
                       "ON CONFLICT(url) DO UPDATE SET importance = excluded.importance", rows)])
        return self.num_pages() - before

    def num_pages(self) -> int:
        return self.db.execute("SELECT COUNT(*) FROM pages").fetchone()[0]

    def pages(self) -> dict:
        """Every page's columns as arrays (sorted by URL): ``url`` (object), ``host``,
        ``importance``, ``allowed``, ``last_fetch``/``last_planned`` (NaN: never),
        ``last_digest``, ``change_rate``/``rate``/``nutch_interval``/``nutch_modified``
        (NaN: none)."""
        cols = ("url", "host", "importance", "allowed", "complete", "watched_from", "last_fetch", "last_planned",
                "last_digest", "change_rate", "rate", "prob", "nutch_interval", "nutch_modified")
        rows = self.db.execute(f"SELECT {', '.join(cols)} FROM pages ORDER BY url").fetchall()
        out = {}
        for j, c in enumerate(cols):
            values = [r[j] for r in rows]
            if c in ("url", "host", "last_digest"):
                out[c] = np.asarray(values, dtype=object).reshape(len(rows))
            elif c in ("allowed", "complete"):
                out[c] = np.asarray(values, dtype=bool).reshape(len(rows))
            else:
                out[c] = np.asarray([np.nan if v is None else v for v in values], np.float64).reshape(len(rows))
        return out

    def set_allowed(self, urls, allowed) -> None:
        rows = [(int(bool(a)), u) for u, a in zip(urls, allowed)]
        self._tx([("UPDATE pages SET allowed = ? WHERE url = ?", rows)])

    def set_complete(self, urls, complete, watched_from) -> None:
        rows = [(int(bool(c)), w, u) for u, c, w in zip(urls, complete, watched_from)]
        self._tx([("UPDATE pages SET complete = ?, watched_from = ? WHERE url = ?", rows)])

    def record_signals(self, rows) -> None:
        """``[(url, lastmod, seen_at)]`` (unix seconds), in one transaction."""
        self._tx([("INSERT INTO signals(url, lastmod, seen_at) VALUES(?, ?, ?)", list(rows))])

    def signals(self) -> dict:
        """The change signals seen (ordered by URL, then lastmod) as arrays."""
        rows = self.db.execute("SELECT url, lastmod, seen_at FROM signals ORDER BY url, lastmod").fetchall()
        return {"url": np.asarray([r[0] for r in rows], dtype=object).reshape(len(rows)),
                "lastmod": np.asarray([r[1] for r in rows], np.float64).reshape(len(rows)),
                "seen_at": np.asarray([r[2] for r in rows], np.float64).reshape(len(rows))}

    # -- hosts ---------------------------------------------------------------------------------
    def set_robots(self, host: str, robots: str | None, crawl_delay: float | None, fetched_at: float) -> None:
        self._tx([("INSERT OR REPLACE INTO hosts(host, crawl_delay, robots, fetched_at) VALUES(?, ?, ?, ?)",
                   (host, crawl_delay, robots, fetched_at))])

    def hosts(self) -> dict:
        """``{host: (crawl_delay seconds or None, robots text or None)}``."""
        return {h: (d, r) for h, d, r in self.db.execute("SELECT host, crawl_delay, robots FROM hosts")}

    # -- fetches -------------------------------------------------------------------------------
    def record_fetch(self, url: str, fetched_at: float, status: int, digest: str | None, etag: str | None,
                     last_modified: str | None, *, planned: float | None = None,
                     nutch: tuple[float, float] | None = None) -> None:
        """One fetch: its ``fetches`` row and the page's last-fetch columns, in one transaction.
        A failed response (no digest) leaves the page's digest and validators as they were."""
        stmts = [("INSERT INTO fetches(url, fetched_at, status, digest, etag, last_modified) "
                  "VALUES(?, ?, ?, ?, ?, ?)", (url, float(fetched_at), int(status), digest, etag, last_modified))]
        ok = int(status) in OK_STATUS
        stmts.append(("UPDATE pages SET last_fetch = ?, last_planned = COALESCE(?, last_planned), "
                      "last_digest = CASE WHEN ? THEN COALESCE(?, last_digest) ELSE last_digest END, "
                      "etag = CASE WHEN ? THEN ? ELSE etag END, "
                      "last_modified = CASE WHEN ? THEN ? ELSE last_modified END WHERE url = ?",
                      (float(fetched_at), planned, ok, digest, ok, etag, ok, last_modified, url)))
        if nutch is not None:
            stmts.append(("UPDATE pages SET nutch_interval = ?, nutch_modified = ? WHERE url = ?",
                          (float(nutch[0]), float(nutch[1]), url)))
        self._tx(stmts)

    def fetches(self, *, until: float | None = None) -> dict:
        """The fetch log (ordered by URL, then time) as arrays."""
        sql = "SELECT url, fetched_at, status, digest FROM fetches"
        params: tuple = ()
        if until is not None:
            sql += " WHERE fetched_at < ?"
            params = (float(until),)
        rows = self.db.execute(sql + " ORDER BY url, fetched_at", params).fetchall()
        return {"url": np.asarray([r[0] for r in rows], dtype=object).reshape(len(rows)),
                "fetched_at": np.asarray([r[1] for r in rows], np.float64).reshape(len(rows)),
                "status": np.asarray([r[2] for r in rows], np.int64).reshape(len(rows)),
                "digest": np.asarray([r[3] for r in rows], dtype=object).reshape(len(rows))}

    def num_fetches(self, since: float | None = None) -> int:
        if since is None:
            return self.db.execute("SELECT COUNT(*) FROM fetches").fetchone()[0]
        return self.db.execute("SELECT COUNT(*) FROM fetches WHERE fetched_at >= ?", (float(since),)).fetchone()[0]

    # -- plans ---------------------------------------------------------------------------------
    def save_plan(self, urls, change_rate, rate, prob, *, started_at: float, policy: str, objective: str | None,
                  budget: float, converged: bool) -> int:
        """The plan's estimates, rates and signal probabilities for ``urls`` and its ``epochs``
        row, in one transaction.  Returns the epoch number."""
        rows = [(None if not np.isfinite(c) else float(c), float(r), float(q), u)
                for u, c, r, q in zip(urls, np.asarray(change_rate, np.float64).tolist(),
                                      np.asarray(rate, np.float64).tolist(), np.asarray(prob, np.float64).tolist())]
        epoch = self.db.execute("SELECT COALESCE(MAX(epoch), -1) + 1 FROM epochs").fetchone()[0]
        self._tx([("UPDATE pages SET change_rate = ?, rate = ?, prob = ? WHERE url = ?", rows),
                  ("INSERT INTO epochs(epoch, started_at, policy, objective, num_pages, budget, converged) "
                   "VALUES(?, ?, ?, ?, ?, ?, ?)",
                   (epoch, float(started_at), policy, objective, len(rows), float(budget), int(bool(converged))))])
        return epoch

    def export(self, plan: str | os.PathLike, last_fetch: str | os.PathLike) -> int:
        """Write the current plan (``page_id,rate,prob``, page ids the URLs, rates per day; pages
        without a plan are left out) and the pages' last fetches (``page_id,last_fetch``, unix
        seconds; pages never fetched are left out): the inputs of ``jaxcrawl schedule --plan
        PLAN --last-fetch LAST_FETCH --start <ISO 8601>``.  Returns the number of plan rows."""
        from jaxcrawl.io import write_plan

        p = self.pages()
        has = np.isfinite(p["rate"])
        write_plan(plan, p["url"][has].astype(str), p["rate"][has], np.nan_to_num(p["prob"][has], nan=0.0))
        done = np.isfinite(p["last_fetch"])
        target = os.fspath(last_fetch)
        tmp = f"{target}.tmp-{os.getpid()}"
        try:
            with open(tmp, "w", encoding="utf-8", newline="") as f:
                writer = csv.writer(f)
                writer.writerow(["page_id", "last_fetch"])
                writer.writerows(zip(p["url"][done].tolist(), [repr(t) for t in p["last_fetch"][done].tolist()]))
            os.replace(tmp, target)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
        return int(has.sum())

    def epochs(self) -> list[dict]:
        cols = ("epoch", "started_at", "policy", "objective", "num_pages", "budget", "converged")
        return [dict(zip(cols, r)) for r in self.db.execute(f"SELECT {', '.join(cols)} FROM epochs ORDER BY epoch")]


def observations(log: dict, urls: np.ndarray, seconds_per_day: float, window: int = 64):
    """The change observations of the fetch log, padded per page: ``(intervals, changed,
    mask)`` of shape ``(len(urls), window)``, each page's last ``window`` intervals in days
    between consecutive successful fetches (``status`` 200 or 304), in time order, ``changed``
    when the body's digest differs from the previous successful fetch's (a 304 repeats the
    previous digest).  ``urls`` sorted.  The fixed width keeps one compiled estimator."""
    ok = np.isin(log["status"], OK_STATUS)
    url = log["url"][ok]
    t = log["fetched_at"][ok]
    digest = log["digest"][ok]
    n = len(urls)
    page = np.searchsorted(urls, url) if url.size else np.zeros(0, np.int64)
    known = (page < n) & (urls[np.minimum(page, max(n - 1, 0))] == url) if n else np.zeros(url.size, bool)
    page, t, digest = page[known], t[known], digest[known]
    # a 304 (no digest) repeats the previous digest of its page: forward fill within each page
    has = np.array([d is not None for d in digest.tolist()], bool).reshape(digest.shape)
    start = np.r_[True, page[1:] != page[:-1]] if page.size else np.zeros(0, bool)
    idx = np.where(has | start, np.arange(page.size), 0)
    idx = np.maximum.accumulate(idx) if idx.size else idx
    filled = digest[idx]
    _, code = np.unique(np.asarray([("" if d is None else d) for d in filled.tolist()], dtype=object),
                        return_inverse=True) if filled.size else (None, np.zeros(0, np.int64))
    code = np.asarray(code).reshape(-1)
    # observations: every fetch but a page's first
    obs = ~start
    prev = np.maximum(np.arange(page.size) - 1, 0)
    interval = (t - t[prev]) / float(seconds_per_day)
    changed = code != code[prev]
    opage = page[obs]
    counts = np.bincount(opage, minlength=n) if n else np.zeros(0, np.int64)
    k = int(window)
    first = np.r_[0, np.cumsum(counts)[:-1]] if n else np.zeros(0, np.int64)
    pos = np.arange(opage.size) - first[opage] if opage.size else np.zeros(0, np.int64)
    pos = pos - np.maximum(counts[opage] - k, 0)  # the last k of a page, in time order
    keep = pos >= 0
    opage, pos = opage[keep], pos[keep]
    intervals = np.ones((n, k), np.float64)
    changes = np.zeros((n, k), bool)
    mask = np.zeros((n, k), bool)
    intervals[opage, pos] = np.maximum(interval[obs][keep], 1e-9)
    changes[opage, pos] = changed[obs][keep]
    mask[opage, pos] = True
    return intervals, changes, mask


def signal_history(sig: dict, urls: np.ndarray, watched_from: np.ndarray, now: float, seconds_per_day: float,
                   window: int = 64):
    """Each complete page's change signals as a history for
    :func:`jaxcrawl.estimators.complete_obs_rate`: ``(intervals, changed, mask)`` of shape
    ``(len(urls), window + 1)``, in days: the gaps between its last ``window`` signals after
    ``watched_from`` (the first sitemap that listed it; the first gap starts there), each
    changed, then the unchanged gap from the last signal to ``now``.  ``urls`` sorted."""
    n = len(urls)
    page = np.searchsorted(urls, sig["url"]) if sig["url"].size else np.zeros(0, np.int64)
    known = (page < n) & (urls[np.minimum(page, max(n - 1, 0))] == sig["url"]) if n else np.zeros(0, bool)
    t, page = sig["lastmod"][known], page[known]
    keep = t > watched_from[page]
    t, page = t[keep], page[keep]
    counts = np.bincount(page, minlength=n)
    first = np.r_[0, np.cumsum(counts)[:-1]]
    pos = np.arange(page.size) - first[page] - np.maximum(counts[page] - window, 0)
    sel = pos >= 0
    t, page, pos = t[sel], page[sel], pos[sel]
    kept = np.minimum(counts, window)
    # each signal's gap from the previous kept one (the first from the window's start)
    prev = np.r_[np.nan, t[:-1]]
    start = np.where(kept[page] < counts[page], np.nan, watched_from[page])
    begin = np.where(pos == 0, start, prev)
    k = window + 1
    intervals = np.ones((n, k), np.float64)
    changed = np.zeros((n, k), bool)
    mask = np.zeros((n, k), bool)
    ok = np.isfinite(begin)
    intervals[page[ok], pos[ok]] = np.maximum((t[ok] - begin[ok]) / seconds_per_day, 1e-9)
    changed[page[ok], pos[ok]] = True
    mask[page[ok], pos[ok]] = True
    last = watched_from.copy()
    np.maximum.at(last, page, t) if page.size else None
    has = np.isfinite(last)
    rows = np.flatnonzero(has)
    cols = kept[rows]
    intervals[rows, cols] = np.maximum((now - last[rows]) / seconds_per_day, 1e-9)
    mask[rows, cols] = True
    return intervals, changed, mask
