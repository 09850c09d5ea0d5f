"""The live local web (jaxcrawl.scrapy.LocalWeb), the measured freshness and the closed forms' prediction."""
from __future__ import annotations

import bisect
import http.client
import math
import re
import sqlite3
import time
import urllib.robotparser
import xml.etree.ElementTree as ET
from datetime import datetime

import numpy as np
import pytest

from jaxcrawl.scrapy import _localweb

try:  # Scrapy's robots.txt parser, present with the scrapy extra
    import protego
except ImportError:
    protego = None
from jaxcrawl.scrapy._localweb import LocalWeb
from jaxcrawl.scrapy._measure import measure, predict

SM = "{http://www.sitemaps.org/schemas/sitemap/0.9}"


def _web(n=60, hosts=4, seed=0, days=50.0, spd=0.2, rate=None):
    rng = np.random.default_rng(seed)
    rate = rng.gamma(2.0, 1.0, n) if rate is None else rate
    complete = np.arange(n) % 5 == 0
    delay = np.linspace(0.01, 0.05, hosts)
    return LocalWeb(rate, np.arange(n) % hosts, complete, delay, seconds_per_day=spd, seed=seed, days=days)


def _get(port, path, headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        before = time.time()
        conn.request("GET", path, headers=headers or {})
        resp = conn.getresponse()
        body = resp.read()
        return resp.status, dict(resp.getheaders()), body, before, time.time()
    finally:
        conn.close()


def test_binds_loopback_only_and_stops():
    with _web() as web:
        assert len(web.addresses) == 4 and all(addr[0] == "127.0.0.1" for addr in web.addresses)
        assert len(set(web.ports)) == 4
        assert all(url.startswith(f"http://127.0.0.1:{web.ports[i % 4]}/p/{i}") for i, url in enumerate(web.urls))
        assert web.running
    assert not web.running
    with pytest.raises(ConnectionError):
        _get(web.ports[0], "/robots.txt")


def test_stops_itself_after_its_lifetime(monkeypatch):
    monkeypatch.setattr(_localweb, "_GRACE_S", 0.05)
    web = _web(days=1.0, spd=0.05).start()
    try:
        web._thread.join(10.0)
        assert not web.running
    finally:
        web.close()


def test_change_process_is_poisson_at_the_given_rate():
    # 400 pages at rate 2/day over 50 days: the counts are Poisson(100) each; their total is
    # within 4 sd of 40,000 and their dispersion index (var/mean, 1 for Poisson) within 4 sd
    # of 1 (sd sqrt(2/(n-1)) for Poisson counts); given the counts the times are uniform over
    # the lifetime (Kolmogorov-Smirnov distance under its 0.1% critical value 1.95/sqrt(N)) and
    # the gaps have CV 1 (exponential)
    n, lam, days = 400, 2.0, 50.0
    with _web(n=n, hosts=8, days=days, rate=np.full(n, lam)) as web:
        truth = web.truth()
        start, spd = web.started_at, web.seconds_per_day
    counts = np.array([t.shape[0] for t in truth.values()])
    mean = lam * days
    assert abs(counts.sum() - n * mean) < 4 * math.sqrt(n * mean)
    assert abs(counts.var(ddof=1) / counts.mean() - 1.0) < 4 * math.sqrt(2.0 / (n - 1))
    gaps = np.concatenate([np.diff(np.concatenate([[start], t])) / spd for t in truth.values()])
    unit = np.sort(np.concatenate(list(truth.values())) - start) / (days * spd)
    ecdf_gap = np.max(np.maximum(np.arange(1, unit.size + 1) / unit.size - unit, unit - np.arange(unit.size) / unit.size))
    assert ecdf_gap < 1.95 / math.sqrt(unit.size)
    assert abs(gaps.std() / gaps.mean() - 1.0) < 0.05
    assert all(np.all(np.diff(t) >= 0) and np.all(t >= start) and np.all(t <= start + days * spd)
               for t in truth.values())


def test_served_version_is_the_truth_at_fetch_time():
    with _web(n=40, spd=0.05, rate=np.full(40, 20.0)) as web:
        truth = web.truth()
        urls = web.urls
        seen = set()
        for _ in range(3):
            for i, url in enumerate(urls):
                status, headers, body, t0, t1 = _get(web.ports[i % 4], f"/p/{i}")
                assert status == 200
                version = int(re.search(rb"version (\d+)", body).group(1))
                lo, hi = np.searchsorted(truth[url], [t0, t1], side="right")
                assert lo <= version <= hi
                assert headers["ETag"] == f'"{version}"'
                seen.add(version)
            time.sleep(0.1)
        assert len(seen) > 3  # the pages did change while served
        status, headers, _, _, _ = _get(web.ports[0], "/p/0")
        again = _get(web.ports[0], "/p/0", {"If-None-Match": headers["ETag"]})[0]
        assert again in (200, 304)  # 304 unless it changed in between
        assert _get(web.ports[1], "/p/0")[0] == 404  # page 0 lives on host 0
        assert _get(web.ports[0], "/p/999")[0] == 404


def test_robots_and_sitemap_parse_with_the_consumers_parsers():
    with _web() as web:
        truth = web.truth()
        for h, port in enumerate(web.ports):
            parser = urllib.robotparser.RobotFileParser(web.robots_urls[h])
            parser.read()
            assert parser.can_fetch("scrapy", f"http://127.0.0.1:{port}/p/{h}")
            assert not parser.can_fetch("scrapy", f"http://127.0.0.1:{port}/private/x")
            assert parser.site_maps() == [web.sitemap_urls[h]]
            # the standard library reads whole seconds of Crawl-delay only; Scrapy's parser
            # (Protego) reads the fractions an accelerated day needs
            delay = web.crawl_delay[h] * web.seconds_per_day
            if protego is not None:
                robots = protego.Protego.parse(_get(port, "/robots.txt")[2].decode())
                assert robots.crawl_delay("scrapy") == pytest.approx(delay, rel=1e-5)
                assert not robots.can_fetch(f"http://127.0.0.1:{port}/private/x", "scrapy")
            status, _, body, t0, t1 = _get(port, "/sitemap.xml")
            assert status == 200
            root = ET.fromstring(body)
            assert root.tag == SM + "urlset"
            entries = {u.find(SM + "loc").text: u.find(SM + "lastmod") for u in root.findall(SM + "url")}
            mine = [url for i, url in enumerate(web.urls) if web.host[i] == h]
            assert sorted(entries) == sorted(mine)
            for url, lastmod in entries.items():
                page = int(url.rsplit("/", 1)[1])
                assert (lastmod is not None) == bool(web.complete[page])
                if lastmod is not None:
                    # the last change before the request, or one while it was served
                    stamp = datetime.fromisoformat(lastmod.text).timestamp()
                    times = np.concatenate([[web.started_at], truth[url]])
                    lo, hi = np.searchsorted(times, [t0, t1], side="right")
                    assert np.min(np.abs(times[lo - 1:hi] - stamp)) <= 2e-6


@pytest.mark.parametrize("kwargs, match", [
    (dict(change_rate=[1.0, -1.0]), "change_rate"),
    (dict(host=[0, 2]), "host"),
    (dict(complete=[True]), "complete"),
    (dict(crawl_delay=[0.1]), "crawl_delay"),
    (dict(seconds_per_day=0.0), "seconds_per_day"),
])
def test_bad_input_names_the_argument(kwargs, match):
    args = dict(change_rate=[1.0, 2.0], host=[0, 1], complete=[True, False], crawl_delay=[0.1, 0.2],
                seconds_per_day=1.0)
    args.update(kwargs)
    spd = args.pop("seconds_per_day")
    with pytest.raises(ValueError, match=match):
        LocalWeb(**args, seconds_per_day=spd, seed=0)


# ----------------------------------------------------------------------------- measure
def _reference(changes, fetches, start, end):
    """Plain Python: per page, N(t) at the midpoint of every piece between events."""
    harm, fresh = [], []
    for ch, fe in zip(changes, fetches):
        ch, fe = sorted(ch), sorted(fe)
        cuts = sorted({start, end, *[t for t in list(ch) + list(fe) if start < t < end]})
        h = f = 0.0
        for a, b in zip(cuts[:-1], cuts[1:]):
            mid = 0.5 * (a + b)
            k = bisect.bisect_right(fe, mid)
            since = fe[k - 1] if k else -math.inf
            n = sum(1 for t in ch if since < t <= mid)
            h += (b - a) * sum(1.0 / j for j in range(1, n + 1))
            f += (b - a) * (n == 0)
        harm.append(h / (end - start))
        fresh.append(f / (end - start))
    return np.array(harm), np.array(fresh)


@pytest.mark.parametrize("seed", range(4))
def test_measure_equals_a_plain_reference(seed):
    rng = np.random.default_rng(seed)
    n = 12
    changes = [np.sort(rng.uniform(0, 10, rng.integers(0, 15))) for _ in range(n)]
    fetches = [np.sort(rng.uniform(-1, 11, rng.integers(0, 6))) for _ in range(n)]
    weights = rng.uniform(0.5, 2.0, n)
    start, end = 2.0, 8.5
    got = measure(changes, fetches, start=start, end=end, importance=weights)
    harm, fresh = _reference(changes, fetches, start, end)
    np.testing.assert_allclose(got["harmonic_per_page"], harm, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got["fresh_per_page"], fresh, rtol=1e-12, atol=1e-12)
    assert got["harmonic_staleness"] == pytest.approx(np.mean(weights * harm), rel=1e-12)
    assert got["binary_freshness"] == pytest.approx(np.mean(weights * fresh), rel=1e-12)
    assert got["num_fetches"] == sum(int(np.sum((f >= start) & (f <= end))) for f in fetches)


def _synthetic_crawl(rng, lam, rho, horizon, periodic=True):
    changes, fetches = [], []
    for la, r in zip(lam, rho):
        changes.append(np.sort(rng.uniform(0, horizon, rng.poisson(la * horizon))))
        if periodic:
            fetches.append(np.arange(rng.uniform(0, 1 / r), horizon, 1 / r))
        else:
            fetches.append(np.sort(rng.uniform(0, horizon, rng.poisson(r * horizon))))
    return changes, fetches


@pytest.mark.parametrize("schedule", ["periodic", "poisson"])
def test_measure_agrees_with_the_closed_form(schedule):
    # 1500 independent pages: the page average of the measured time averages is within 4
    # standard errors (over pages) of the closed form (a false alarm rate below 1e-4)
    rng = np.random.default_rng(7)
    n, horizon, start = 1500, 40.0, 5.0
    lam = rng.gamma(2.0, 0.5, n)
    rho = rng.gamma(2.0, 0.5, n) + 0.3
    changes, fetches = _synthetic_crawl(rng, lam, rho, horizon, periodic=schedule == "periodic")
    # a Poisson crawl has a stationary start only if its first fetch is not the window's start
    start = start if schedule == "periodic" else 0.0
    if schedule == "poisson":
        fetches = [np.concatenate([[-rng.exponential(1 / r)], f]) for f, r in zip(fetches, rho)]
    got = measure(changes, fetches, start=start, end=horizon)
    want = predict(lam, rho, schedule=schedule)
    for key, per in (("harmonic_staleness", "harmonic_per_page"), ("binary_freshness", "fresh_per_page")):
        se = np.std(got[per] - want[per]) / math.sqrt(n)
        assert abs(got[key] - want[key]) < 4 * se, key
    # and Jensen: periodic crawling is never worse than Poisson at the same rates
    assert predict(lam, rho)["harmonic_staleness"] <= predict(lam, rho, schedule="poisson")["harmonic_staleness"]


def test_predict_pages_crawled_on_signals():
    lam = np.array([2.0, 1.0, 4.0])
    rate = np.array([1.0, 1.0, 4.0])
    out = predict(lam, rate, on_signal=[True, False, True], importance=[1.0, 2.0, 3.0])
    assert out["harmonic_per_page"][0] == pytest.approx(math.log(2.0), rel=1e-5)  # -log p, p = 1/2
    assert out["fresh_per_page"][0] == pytest.approx(0.5, rel=1e-5)
    assert out["harmonic_per_page"][2] == pytest.approx(0.0, abs=1e-6)
    # the periodic page: (1 - e^-u)/u fresh, u = lam / rate
    assert out["fresh_per_page"][1] == pytest.approx(1 - math.exp(-1.0), rel=1e-5)
    assert out["binary_freshness"] == pytest.approx(np.mean([1, 2, 3] * out["fresh_per_page"]), rel=1e-6)
    with pytest.raises(ValueError, match="rate"):
        predict(lam, rate[:2])
    with pytest.raises(ValueError, match="schedule"):
        predict(lam, rate, schedule="weekly")


def test_measure_reads_a_crawl_state(tmp_path):
    db = tmp_path / "state.sqlite"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE fetches(url TEXT NOT NULL, fetched_at REAL NOT NULL, status INTEGER NOT NULL, "
                "digest TEXT, etag TEXT, last_modified TEXT)")
    rows = [("a", 1.0, 200), ("a", 3.0, 500), ("b", 2.0, 304), ("a", 4.0, 200)]
    con.executemany("INSERT INTO fetches(url, fetched_at, status) VALUES (?, ?, ?)", rows)
    con.commit()
    con.close()
    truth = {"a": np.array([0.5, 2.5, 3.5]), "b": np.array([1.5]), "c": np.array([])}
    got = measure(truth, db, start=0.0, end=5.0)
    want = measure(truth, {"a": [1.0, 4.0], "b": [2.0]}, start=0.0, end=5.0)
    np.testing.assert_array_equal(got["harmonic_per_page"], want["harmonic_per_page"])
    # page a: stale on (0.5, 1], (2.5, 4]: 0.5 + 1.5 with one unseen change, then 1 more on (3.5, 4]
    assert got["fresh_per_page"][0] == pytest.approx((5.0 - 2.0) / 5.0)
    assert got["harmonic_per_page"][0] == pytest.approx((0.5 + 1.0 + 0.5 * 1.5) / 5.0)
    assert got["fresh_per_page"][2] == 1.0
    with pytest.raises(FileNotFoundError, match="crawl state"):
        measure(truth, tmp_path / "missing.sqlite", start=0.0, end=1.0)
    with pytest.raises(ValueError, match="start"):
        measure(truth, db, start=1.0, end=1.0)
    with pytest.raises(ValueError, match="urls that truth does not"):
        measure(truth, {"a": [1.0], "z": [2.0]}, start=0.0, end=5.0)


@pytest.mark.long
def test_a_periodic_crawl_over_http_measures_what_the_closed_form_predicts(tmp_path):
    # the benchmark's standard-library fetcher crawls a live LocalWeb by a periodic timetable
    # (80 pages at 1 crawl a day, 20 days of 0.4 s): every page average is within 4 standard
    # errors (over pages) of the closed form, and the fetch log holds the whole timetable
    import json
    import subprocess
    import sys
    from pathlib import Path

    n, days, spd = 80, 20.0, 0.4
    rng = np.random.default_rng(3)
    lam = rng.gamma(1.0, 1.0, n) + 0.1
    rho = np.full(n, 1.0)
    with LocalWeb(lam, np.arange(n) % 4, np.zeros(n, bool), np.zeros(4), seconds_per_day=spd, seed=3,
                  days=days + 20.0) as web:
        spec = {"urls": web.urls, "rates": rho.tolist(), "seconds_per_day": spd, "days": days,
                "state": str(tmp_path / "state.sqlite")}
        script = Path(__file__).resolve().parents[1] / "benchmarks" / "scrapy_loop.py"
        done = subprocess.run([sys.executable, str(script), "--reference-worker"], input=json.dumps(spec),
                              capture_output=True, text=True, timeout=120, check=True)
        truth = web.truth()
    start = json.loads(done.stdout.strip().splitlines()[-1])["started_at"]
    got = measure(truth, tmp_path / "state.sqlite", start=start + 2.0 * spd, end=start + days * spd)
    want = predict(lam, rho)
    assert got["num_fetches"] == pytest.approx(n * (days - 2.0), abs=n)
    for key, per in (("harmonic_staleness", "harmonic_per_page"), ("binary_freshness", "fresh_per_page")):
        se = np.std(got[per] - want[per]) / math.sqrt(n)
        assert abs(got[key] - want[key]) < 4 * se, key
