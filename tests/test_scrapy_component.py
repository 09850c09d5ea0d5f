"""The Scrapy component: its crawl state, the estimates it plans with, and real crawls of a small
web served by this test on 127.0.0.1 (each crawl a ``python -m jaxcrawl.scrapy.run`` process)."""
from __future__ import annotations

import hashlib
import json
import math
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

pytest.importorskip("scrapy")

from jaxcrawl import estimators  # noqa: E402
from jaxcrawl.scrapy import CrawlState, run_crawl  # noqa: E402
from jaxcrawl.scrapy._policy import NutchSettings, nutch_update, solve_rates  # noqa: E402
from jaxcrawl.scrapy._state import observations  # noqa: E402


# ----------------------------------------------------------------------------- a tiny web
class TinyWeb:
    """``num_hosts`` servers on 127.0.0.1 (one port each); page ``i`` on host ``i % num_hosts``
    at ``/p/i``, its version ``floor((now - t0) / change_every[i])``; ``/private/`` disallowed
    by robots.txt.  Every response is logged as ``(url, sent_at, sha1 of the body)``."""

    def __init__(self, change_every, num_hosts=2, crawl_delay=0.0):
        self.change_every = np.asarray(change_every, float)
        self.num_hosts = num_hosts
        self.crawl_delay = np.broadcast_to(np.asarray(crawl_delay, float), (num_hosts,))
        self.log: list = []
        self.lock = threading.Lock()
        self.servers = []

    def __enter__(self):
        web = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                port = self.server.server_address[1]
                if self.path == "/robots.txt":
                    delay = web.crawl_delay[web.ports.index(port)]
                    body = f"User-agent: *\nDisallow: /private/\nCrawl-delay: {delay}\n".encode()
                elif self.path.startswith("/p/"):
                    i = int(self.path[3:])
                    body = f"page {i} version {int((time.time() - web.t0) / web.change_every[i])}".encode()
                else:
                    body = b"secret"
                url = f"http://127.0.0.1:{port}{self.path}"
                with web.lock:  # logged as it is sent
                    web.log.append((url, time.time(), hashlib.sha1(body).hexdigest()))
                self.send_response(200)
                self.send_header("Content-Type", "text/plain" if self.path == "/robots.txt" else "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.t0 = time.time()
        self.ports = []
        for _ in range(self.num_hosts):
            server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
            server.daemon_threads = True
            threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
            self.servers.append(server)
        self.ports = ports = [s.server_address[1] for s in self.servers]
        n = len(self.change_every)
        self.urls = [f"http://127.0.0.1:{ports[i % self.num_hosts]}/p/{i}" for i in range(n)]
        self.private = f"http://127.0.0.1:{ports[0]}/private/x"
        return self

    def __exit__(self, *exc):
        for server in self.servers:
            server.shutdown()
            server.server_close()

    def pages_served(self):
        with self.lock:
            return [r for r in self.log if "/robots.txt" not in r[0]]


def _crawl_cmd(tmp_path, seeds, *, state, policy, budget, spd, days, epoch_days=1.0, rates=None):
    seed_file = tmp_path / "seeds.txt"
    seed_file.write_text("\n".join(seeds))
    cmd = [sys.executable, "-m", "jaxcrawl.scrapy.run", "--state", str(state), "--seeds", str(seed_file),
           "--policy", policy, "--budget", str(budget), "--seconds-per-day", str(spd), "--days", str(days),
           "--epoch-days", str(epoch_days)]
    if rates is not None:
        rate_file = tmp_path / "rates.csv"
        rate_file.write_text("url,rate\n" + "".join(f"{u},{r}\n" for u, r in rates.items()))
        cmd += ["--rates", str(rate_file)]
    return cmd


def _crawl(tmp_path, seeds, **kw):
    out = subprocess.run(_crawl_cmd(tmp_path, seeds, **kw), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _rows(state):
    with CrawlState(state) as st:
        log = st.fetches()
    return list(zip(log["url"].tolist(), log["fetched_at"].tolist(), log["digest"].tolist()))


# ----------------------------------------------------------------------------- the state
def test_state_records_and_reloads(tmp_path):
    path = tmp_path / "s.sqlite"
    with CrawlState(path) as st:
        assert st.enroll(["http://a.test/1", "http://a.test/2", "http://B.test:81/x"]) == 3
        assert st.enroll(["http://a.test/1"]) == 0
        st.record_fetch("http://a.test/1", 10.0, 200, "d1", '"1"', None, planned=0.5)
        st.record_fetch("http://a.test/1", 12.0, 500, None, None, None)
        st.record_fetch("http://a.test/2", 11.0, 200, "d2", None, "Sun, 29 Nov 2026 03:00:00 GMT")
        st.set_meta("origin", 1.5)
    with CrawlState(path) as st:  # a new connection sees every committed fetch
        pages = st.pages()
        log = st.fetches()
        assert st.get_meta("origin") == 1.5
    assert list(pages["url"]) == ["http://B.test:81/x", "http://a.test/1", "http://a.test/2"]
    assert list(pages["host"]) == ["b.test:81", "a.test", "a.test"]
    np.testing.assert_array_equal(pages["last_fetch"], [np.nan, 12.0, 11.0])
    np.testing.assert_array_equal(pages["last_planned"], [np.nan, 0.5, np.nan])
    assert list(pages["last_digest"]) == [None, "d1", "d2"]  # the failed fetch keeps the last good digest
    assert log["status"].tolist() == [200, 500, 200] and log["digest"].tolist() == ["d1", None, "d2"]
    con = sqlite3.connect(path)
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    cols = [r[1] for r in con.execute("PRAGMA table_info(fetches)")]
    assert cols == ["url", "fetched_at", "status", "digest", "etag", "last_modified"]
    con.close()


def test_state_rejects_bad_input(tmp_path):
    with pytest.raises(FileNotFoundError, match="state"):
        CrawlState(tmp_path / "missing" / "s.sqlite")
    (tmp_path / "junk").write_bytes(b"not a database" * 100)
    with pytest.raises(ValueError, match="not a jaxcrawl crawl state"):
        CrawlState(tmp_path / "junk")
    with CrawlState(tmp_path / "s.sqlite") as st, pytest.raises(ValueError, match="absolute http"):
        st.enroll(["/relative"])


def _reference_history(rows, urls, spd, window):
    """Plain loops: per page, intervals (days) between its successful fetches and whether the
    digest changed, the last ``window`` of them."""
    out = []
    for u in urls:
        mine = sorted((t, d) for url, t, status, d in rows if url == u and status == 200)
        obs = [((t1 - t0) / spd, d1 != d0) for (t0, d0), (t1, d1) in zip(mine, mine[1:])]
        out.append(obs[-window:])
    return out


def test_observations_are_the_fetch_intervals(tmp_path):
    rng = np.random.default_rng(3)
    urls = sorted(f"http://h{k % 3}.test/p{k}" for k in range(16))  # 16: the estimator's padded size
    rows = []
    for u in urls:
        t = np.cumsum(rng.exponential(2.0, rng.integers(0, 12)))
        digest = np.cumsum(rng.random(t.size) < 0.4)
        status = np.where(rng.random(t.size) < 0.1, 500, 200)
        rows += [(u, float(a), int(s), f"v{d}" if s == 200 else None) for a, d, s in zip(t, digest, status)]
    with CrawlState(tmp_path / "s.sqlite") as st:
        st.enroll(urls)
        for r in rows:
            st.record_fetch(r[0], r[1], r[2], r[3], None, None)
        log = st.fetches()
    spd, window = 2.0, 4
    w, c, m = observations(log, np.asarray(urls, dtype=object), spd, window=window)
    ref = _reference_history(rows, urls, spd, window)
    for k, obs in enumerate(ref):
        assert m[k].sum() == len(obs)
        np.testing.assert_allclose(w[k, :len(obs)], [o[0] for o in obs], rtol=1e-12)
        assert c[k, :len(obs)].tolist() == [o[1] for o in obs]
    # the plan's estimates are the library's smoothed MLE of those histories
    from jaxcrawl.scrapy._policy import estimate_rates

    est, ok = estimate_rates(w, c, m)
    iv = np.ones((len(urls), window), np.float32)
    ch = np.zeros((len(urls), window), bool)
    mk = np.zeros((len(urls), window), bool)
    for k, obs in enumerate(ref):  # padded by hand, left-aligned, with a mask
        iv[k, :len(obs)] = [o[0] for o in obs]
        ch[k, :len(obs)] = [o[1] for o in obs]
        mk[k, :len(obs)] = True
    np.testing.assert_allclose(est, np.asarray(estimators.mle_smoothed(iv, ch, mk)), rtol=2e-5)
    assert ok


def test_uniform_refuses_a_budget_beyond_the_crawl_delays():
    from jaxcrawl import HostCaps

    with pytest.raises(ValueError, match="crawl delays allow"):
        solve_rates("uniform", importance=np.ones(4), change_rate=np.ones(4), budget=10.0,
                    allowed=np.ones(4, bool), caps=HostCaps(np.zeros(4, int), np.array([5.0])))


@pytest.mark.long
def test_uniform_water_fills_under_host_caps():
    from jaxcrawl import HostCaps

    host = np.array([0, 0, 0, 0, 1, 1, 2])
    caps = HostCaps(host, np.array([2.0, np.inf, np.inf]))
    rate, _, ok = solve_rates("uniform", importance=np.ones(7), change_rate=np.ones(7), budget=10.0,
                              allowed=np.ones(7, bool), caps=caps)
    assert ok
    np.testing.assert_allclose(rate[:4], 0.5, rtol=1e-4)  # host 0 at its cap
    np.testing.assert_allclose(rate[4:], 8.0 / 3, rtol=1e-4)  # the rest share what is left equally
    rate, _, _ = solve_rates("uniform", importance=np.ones(7), change_rate=np.ones(7), budget=7.0,
                             allowed=np.r_[np.ones(6, bool), False], caps=None)
    np.testing.assert_allclose(rate, [7 / 6] * 6 + [0.0], rtol=1e-5)


def test_plan_is_the_library_solve_on_allowed_pages():
    import jaxcrawl

    lam = np.array([0.2, 1.0, 3.0, 0.5])
    rate, prob, ok = solve_rates("plan", importance=np.ones(4), change_rate=lam, budget=3.0,
                                 allowed=np.array([True, True, False, True]))
    want = jaxcrawl.solve(jaxcrawl.CrawlProblem(np.ones(3), lam[[0, 1, 3]], 3.0), "harmonic").rate
    assert ok and rate[2] == 0.0 and not prob.any()
    np.testing.assert_allclose(rate[[0, 1, 3]], np.asarray(want), rtol=1e-5)
    # complete pages: the mixed solve (NeurIPS-19 Alg. 3) crawls them on their signals
    complete = np.array([False, True, True, False])
    rate, prob, ok = solve_rates("plan", importance=np.ones(4), change_rate=lam, budget=3.0,
                                 allowed=np.array([True, True, False, True]), complete=complete)
    pol = jaxcrawl.solve(jaxcrawl.CrawlProblem(np.ones(3), lam[[0, 1, 3]], 3.0, complete[[0, 1, 3]]), "harmonic")
    np.testing.assert_allclose(rate[[0, 1, 3]], np.asarray(pol.rate), rtol=1e-5)
    np.testing.assert_allclose(prob, [0.0, float(pol.prob[1]), 0.0, 0.0], rtol=1e-5)
    assert ok and prob[1] > 0


def test_nutch_rule_at_its_defaults():
    s = NutchSettings()
    # first fetch: the interval is kept, the page counts as modified now
    assert nutch_update(30.0, 0.0, 5.0, "unknown", 1.0) == (30.0, 5.0, 35.0)
    # modified: interval * (1 - 0.2), modified time now, no sync offset
    i, m, nxt = nutch_update(30.0, 5.0, 35.0, "modified", 1.0)
    assert (i, m) == (pytest.approx(24.0), 35.0) and nxt == pytest.approx(59.0)
    # unmodified: interval * 1.4; sync_delta moves the reference back by 0.3 of the time since modified
    i, m, nxt = nutch_update(24.0, 35.0, 59.0, "unmodified", 1.0)
    assert i == pytest.approx(33.6) and m == 35.0 and nxt == pytest.approx(59.0 - 0.3 * 24.0 + 33.6)
    # a long unmodified stretch: the interval becomes the time since modified; clamped to max_interval
    i, _, _ = nutch_update(10.0, 0.0, 400.0, "unmodified", 1.0)
    assert i == s.max_interval
    # the rule's clock scaled: every time scales with it
    i2, _, nxt2 = nutch_update(24.0, 35.0 * 0.01, 59.0 * 0.01, "unmodified", 0.01)
    assert i2 == pytest.approx(33.6) and nxt2 == pytest.approx(nxt * 0.01)


def test_run_crawl_rejects_bad_input(tmp_path):
    kw = dict(state=tmp_path / "s.sqlite", budget=10.0, seconds_per_day=1.0, days=1.0)
    with pytest.raises(ValueError, match="policy must be one of"):
        run_crawl(["http://127.0.0.1:9/p"], policy="fifo", **kw)
    with pytest.raises(ValueError, match="needs rates"):
        run_crawl(["http://127.0.0.1:9/p"], policy="plan", **kw)
    with pytest.raises(ValueError, match="budget must be finite and > 0"):
        run_crawl(["http://127.0.0.1:9/p"], policy="uniform", **{**kw, "budget": -1})
    with pytest.raises(ValueError, match="objective must be one of"):
        run_crawl(["http://127.0.0.1:9/p"], policy="uniform", objective="fresh", **kw)
    with pytest.raises(ValueError, match="seeds"):
        run_crawl([], policy="uniform", **kw)
    assert not (tmp_path / "s.sqlite").exists()  # nothing written for a refused run


# ----------------------------------------------------------------------------- real crawls
@pytest.mark.long
def test_crawl_log_is_complete_and_exact_robots_obeyed_budget_met(tmp_path):
    n, spd, budget, days = 12, 0.5, 12.0, 10.0
    delay = 0.06  # wall seconds between two requests to a host: at most 8.3 per day (spd / delay), 6 used
    with TinyWeb(np.linspace(0.3, 3.0, n), num_hosts=2, crawl_delay=delay) as web:
        summary = _crawl(tmp_path, web.urls + [web.private], state=tmp_path / "s.sqlite", policy="uniform",
                         budget=budget, spd=spd, days=days)
        served = web.pages_served()
    rows = _rows(tmp_path / "s.sqlite")
    assert summary["disallowed"] == 1 and summary["converged"]
    assert not any("/private/" in u for u, _, _ in served)  # robots.txt obeyed: never requested
    # every response the server sent is in the log, with the body's digest, received after it was sent
    assert len(rows) == len(served) == summary["fetches"] == summary["requests"]
    by_url: dict = {}
    for url, sent, digest in sorted(served):
        by_url.setdefault(url, []).append((sent, digest))
    for url, got, digest in rows:
        sent, want = by_url[url].pop(0)
        assert digest == want and sent <= got < sent + 2.0
    # the budget: requests per model day within 2%
    assert summary["requests_per_day"] == pytest.approx(budget, rel=0.02)
    start = summary["started_at"]
    inside = sum(start <= t < start + days * spd for _, t, _ in rows)
    assert inside / days == pytest.approx(budget, rel=0.02)
    # robots.txt Crawl-delay kept between the requests to a host (on the server's clock, which adds the
    # downloader's jitter: any 5 consecutive gaps of a host last 5 delays, less 30 ms)
    for port in {u.split("/")[2] for u in web.urls}:
        sent = np.sort([t for u, t, _ in served if u.split("/")[2] == port])
        assert np.min(sent[5:] - sent[:-5]) >= 5 * delay - 0.03
    # uniform: every page every n / budget days
    t = np.asarray([r[1] for r in rows if r[0] == web.urls[3]])
    np.testing.assert_allclose(np.median(np.diff(t)), n / budget * spd, rtol=0.05)


@pytest.mark.long
def test_restart_after_a_kill_loses_no_fetch_and_refetches_nothing_early(tmp_path):
    n, spd, budget = 10, 0.5, 20.0  # every page every half day: 1/4 s
    state = tmp_path / "s.sqlite"
    with TinyWeb(np.full(n, 0.5), num_hosts=2) as web:
        cmd = _crawl_cmd(tmp_path, web.urls, state=state, policy="uniform", budget=budget, spd=spd, days=200)
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.time() + 120
            while time.time() < deadline and proc.poll() is None:
                if state.exists() and len(_rows(state)) >= 60:
                    break
                time.sleep(0.1)
            assert proc.poll() is None, "the crawl ended before it could be killed"
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
        served_before = web.pages_served()
        before = _rows(state)
        summary = _crawl(tmp_path, web.urls, state=state, policy="uniform", budget=budget, spd=spd, days=4)
    after = _rows(state)
    # nothing the first crawl recorded is lost; what it recorded is what the server sent
    assert set(before) <= set(after)
    sent = {(u, d) for u, _, d in served_before}
    assert all((u, d) in sent for u, _, d in before)
    assert len(served_before) - len(before) <= 16  # at most the requests in flight at the kill
    # the continued crawl fetches no page before its last recorded fetch plus its interval
    period = n / budget * spd
    last = {}
    for u, t, _ in before:
        last[u] = max(last.get(u, -math.inf), t)
    cut = max(t for _, t, _ in before)
    for u in web.urls:
        later = [t for v, t, _ in after if v == u and t > cut]
        assert later, u
        assert min(later) >= last[u] + period - 0.01
    # every page was overdue after the downtime (one fetch each at the start), then the budget:
    # never more; less only by what a loaded machine's late reactor leaves unsent when this
    # two-second crawl ends (the timetable never runs ahead)
    assert budget * 0.85 <= (summary["requests"] - n) / summary["days"] <= budget * 1.02


@pytest.mark.long
@pytest.mark.parametrize("policy", ["plan", "learn", "nutch-adaptive"])
def test_each_policy_meets_the_budget(tmp_path, policy):
    n, spd, budget, days = 12, 0.5, 16.0, 20.0
    every = np.linspace(0.2, 4.0, n)
    # host 0 (4 of the pages, the fastest changing) allows a request every 0.1 s: 5 per day; the
    # adaptive rule knows no caps, so it crawls uncapped hosts
    delay = np.array([0.0 if policy == "nutch-adaptive" else 0.1, 0.0, 0.0])
    with TinyWeb(every, num_hosts=3, crawl_delay=delay) as web:
        rates = {u: spd / e for u, e in zip(web.urls, every)}
        summary = _crawl(tmp_path, web.urls, state=tmp_path / "s.sqlite", policy=policy, budget=budget, spd=spd,
                         days=days, epoch_days=3.0, rates=rates)
        served = web.pages_served()
    if policy == "nutch-adaptive":
        # the rule times each page's next fetch from its response: a response that comes after
        # that time (the reactor late under load) loses the difference, never adds to it
        assert budget * 0.95 <= summary["requests_per_day"] <= budget * 1.02
    else:
        assert summary["requests_per_day"] == pytest.approx(budget, rel=0.02)
    assert summary["converged"]
    if delay[0] > 0:  # the host's cap binds in the solve and its gaps are kept
        host0 = np.sort([t for u, t, _ in served if u.split("/")[2].endswith(f":{web.ports[0]}")])
        assert np.min(host0[5:] - host0[:-5]) >= 5 * delay[0] - 0.03
        assert len(host0) / days == pytest.approx(0.95 * spd / delay[0], rel=0.05)  # 5% kept for jitter
    if policy == "learn":
        assert summary["epochs"] >= 4


@pytest.mark.long
def test_learned_estimates_are_the_estimators_on_the_logged_intervals(tmp_path):
    n, spd, budget, days = 12, 0.5, 12.0, 10.0
    every = np.linspace(0.1, 2.0, n)
    state = tmp_path / "s.sqlite"
    with TinyWeb(every, num_hosts=2) as web:
        summary = _crawl(tmp_path, web.urls, state=state, policy="learn", budget=budget, spd=spd, days=days,
                         epoch_days=2.0)
    assert summary["epochs"] >= 4
    with CrawlState(state) as st:
        epoch = st.epochs()[-1]
        pages = st.pages()
        log = st.fetches(until=epoch["started_at"])
    rows = list(zip(log["url"].tolist(), log["fetched_at"].tolist(), log["status"].tolist(), log["digest"].tolist()))
    ref = _reference_history(rows, list(pages["url"]), spd, 64)
    for k, obs in enumerate(ref):
        assert obs, "every page was fetched more than once"
        want = float(estimators.mle_smoothed(np.asarray([o[0] for o in obs], np.float32),
                                             np.asarray([o[1] for o in obs])))
        np.testing.assert_allclose(pages["change_rate"][k], want, rtol=1e-4)
    # and the plan is the solve of those estimates
    import jaxcrawl

    want = jaxcrawl.solve(jaxcrawl.CrawlProblem(np.ones(n, np.float32), pages["change_rate"].astype(np.float32),
                                                budget), "harmonic").rate
    np.testing.assert_allclose(pages["rate"], np.asarray(want), rtol=1e-4)


@pytest.mark.long
def test_complete_pages_are_crawled_on_their_sitemap_signals(tmp_path):
    from jaxcrawl.scrapy import LocalWeb

    n, hosts, spd, budget, days = 12, 2, 0.5, 16.0, 12.0
    rate = np.linspace(0.3, 2.0, n)
    complete = np.arange(n) % 3 == 0
    state = tmp_path / "s.sqlite"
    with LocalWeb(rate, np.arange(n) % hosts, complete, np.zeros(hosts), seconds_per_day=spd, seed=4,
                  days=days + 30) as web:
        summary = _crawl(tmp_path, web.urls, state=state, policy="plan", budget=budget, spd=spd, days=days,
                         rates=dict(zip(web.urls, rate)))
        truth = web.truth()
    assert summary["complete"] == complete.sum() and summary["sitemap_requests"] > 0
    with CrawlState(state) as st:
        pages = st.pages()
        sig = st.signals()
        log = st.fetches()
    url = list(pages["url"])
    is_complete = np.asarray([complete[web.urls.index(u)] for u in url])
    assert (pages["complete"] == is_complete).all()
    assert ((pages["prob"] > 0) == is_complete).all()  # the mixed solve crawls them on their signals
    # every signal is a true change time of its page (or the web's start: no change yet)
    for u, t in zip(sig["url"].tolist(), sig["lastmod"].tolist()):
        assert np.min(np.abs(np.r_[web.started_at, truth[u]] - t)) < 1e-3
    # after its first fetch, a signal page is fetched only when it changed since its previous fetch
    for u in np.asarray(url)[is_complete]:
        t = np.sort(log["fetched_at"][log["url"] == u])
        for a, b in zip(t[:-1], t[1:]):
            assert np.any((truth[u] > a - 0.05) & (truth[u] < b)), u


def test_state_exports_what_jaxcrawl_schedule_reads(tmp_path):
    from jaxcrawl._src.timeunits import iso_utc
    from jaxcrawl.cli import main
    from jaxcrawl.io import read_timetable

    urls = ["http://a.test/1", "http://a.test/2", "http://b.test/3"]
    start = 1.8e9
    with CrawlState(tmp_path / "s.sqlite") as st:
        st.enroll(urls)
        st.record_fetch(urls[0], start - 3600.0, 200, "d", None, None)
        st.record_fetch(urls[2], start - 2.5 * 86400, 200, "e", None, None)  # overdue at the start
        st.save_plan(urls, [1.0, 2.0, 0.5], [4.0, 2.0, 1.0], [0.0, 0.0, 0.0], started_at=start, policy="plan",
                     objective="harmonic", budget=7.0, converged=True)
        assert st.export(tmp_path / "plan.csv", tmp_path / "last.csv") == 3
    assert main(["schedule", "--plan", str(tmp_path / "plan.csv"), "--last-fetch", str(tmp_path / "last.csv"),
                 "--start", iso_utc(start), "--horizon", "2", "-o", str(tmp_path / "tt.csv")]) == 0
    time_, page_id, absolute = read_timetable(tmp_path / "tt.csv")
    assert absolute
    first = {}
    for pid, t in zip(np.asarray(page_id).tolist(), np.asarray(time_).tolist()):
        first[pid] = min(first.get(pid, math.inf), t)
    # each page continues from its last recorded fetch: last + 1 / rate, or the start when overdue
    assert first[urls[0]] == pytest.approx(start - 3600.0 + 86400 / 4.0)
    assert first[urls[2]] == pytest.approx(start)
    assert urls[1] in first


@pytest.mark.long
def test_a_budget_beyond_the_crawl_delays_stops_the_crawl_with_its_reason(tmp_path):
    with TinyWeb(np.ones(4), num_hosts=2, crawl_delay=0.5) as web:  # 1 request per day per host
        out = subprocess.run(_crawl_cmd(tmp_path, web.urls, state=tmp_path / "s.sqlite", policy="uniform",
                                        budget=10.0, spd=0.5, days=5.0), capture_output=True, text=True, timeout=300)
        served = web.pages_served()
    assert out.returncode == 2 and "crawl delays allow" in out.stderr
    assert served == [] and _rows(tmp_path / "s.sqlite") == []


def test_complete_page_estimates_are_eq11_on_the_signals():
    from jaxcrawl.scrapy._policy import estimate_complete
    from jaxcrawl.scrapy._state import signal_history

    spd, now = 2.0, 100.0
    urls = np.asarray(["http://a.test/1", "http://a.test/2", "http://a.test/3", "http://a.test/4"], dtype=object)
    watched = np.array([10.0, 20.0, np.nan, 50.0])
    sig = {"url": np.asarray(["http://a.test/1"] * 3 + ["http://a.test/2"] * 2 + ["http://a.test/3"], dtype=object),
           "lastmod": np.array([5.0, 30.0, 70.0, 25.0, 90.0, 40.0]), "seen_at": np.zeros(6)}
    w, c, m = signal_history(sig, urls, watched, now, spd, window=4)
    est = estimate_complete(w, c, m)
    # eq. 11 with the imaginary signal: (signals after watched_from + 0.5) / (days watched)
    want = [(2 + 0.5) / ((now - 10) / spd), (2 + 0.5) / ((now - 20) / spd), None, (0 + 0.5) / ((now - 50) / spd)]
    for k in (0, 1, 3):
        np.testing.assert_allclose(est[k], want[k], rtol=1e-5)
    assert not m[2].any()  # not a complete page: no history
    # the window keeps the last signals and counts the time from the first kept one
    many = {"url": np.asarray(["http://a.test/1"] * 6, dtype=object), "lastmod": np.arange(1.0, 7.0) * 10 + 10,
            "seen_at": np.zeros(6)}
    w, c, m = signal_history(many, urls, watched, now, spd, window=4)
    np.testing.assert_allclose(estimate_complete(w, c, m)[0], (3 + 0.5) / ((now - 40) / spd), rtol=1e-5)
