"""Write crawl archives of pages with KNOWN change rates: one WARC file a day, as a crawler
that keeps its fetches in WARC files would have them (needs warcio: pip install
"jaxcrawl[archives]").

    python examples/make_archives.py --out archives --truth archives/truth.csv

Seeded, so the files are the same every time.  ``--pages`` pages on ``--hosts`` hosts
(``https://www.siteNN.example/pageNNNN.html``), each changing as a Poisson process at its
own rate (changes per day, log-uniform in [0.1, 1.5]); each page is fetched at irregular
times (gaps exponential around its own mean of 0.4-1 days; some pages first fetched
mid-way), over ``--days`` days from 2026-01-01T00:00:00Z.  A fetch finds the page's current
version (its content names the version); a fetch whose content did not change since the
page's previous capture is written as a ``revisit`` record (as a deduplicating crawler
writes it) half of the time; 3% of the fetches are a 503 error or a 302 redirect
(no observation).  ``truth.csv`` holds ``page_id,change_rate``.
"""
from __future__ import annotations

import argparse
import datetime as dt
import io
import os

import numpy as np

START = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


def schedule(pages: int = 200, hosts: int = 10, days: int = 40, seed: int = 2026):
    """``(urls, change rates, captures)``: ``captures`` is a list of ``(time in days, page,
    kind, version)`` in time order; ``kind`` is ``"ok"``, ``"error"`` or ``"redirect"``."""
    rng = np.random.default_rng(seed)
    urls = [f"https://www.site{i % hosts:02d}.example/page{i:04d}.html" for i in range(pages)]
    rate = np.exp(rng.uniform(np.log(0.1), np.log(1.5), pages))
    captures = []
    for p in range(pages):
        changes = np.cumsum(rng.exponential(1.0 / rate[p], int(rate[p] * days * 3) + 20))
        mean_gap = rng.uniform(0.4, 1.0)
        t = rng.uniform(0.0, days / 3) if rng.random() < 0.2 else rng.uniform(0.0, mean_gap)
        while t < days:
            kind = rng.choice(["ok", "error", "redirect"], p=[0.97, 0.02, 0.01])
            captures.append((float(t), p, str(kind), int(np.searchsorted(changes, t))))
            t += rng.exponential(mean_gap)
    captures.sort()
    return urls, rate, captures


def write_archives(out: str, pages: int = 200, hosts: int = 10, days: int = 40, seed: int = 2026,
                   truth: str | None = None) -> list[str]:
    """Write ``out/crawl-YYYYMMDD.warc.gz`` (one a day) and, when given, the truth table;
    returns the WARC paths."""
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    urls, rate, captures = schedule(pages, hosts, days, seed)
    rng = np.random.default_rng(seed + 1)
    os.makedirs(out, exist_ok=True)
    last = {}  # page -> (version, digest, uri, date) of its last 200 capture
    paths, handles = [], {}
    for t, p, kind, version in captures:
        when = START + dt.timedelta(days=t)
        day = when.strftime("%Y%m%d")
        if day not in handles:
            path = os.path.join(out, f"crawl-{day}.warc.gz")
            paths.append(path)
            handles[day] = (open(path, "wb"),)
            handles[day] = (handles[day][0], WARCWriter(handles[day][0], gzip=True))
        writer = handles[day][1]
        date = when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        uri = urls[p]
        if kind != "ok":
            status, extra = ("503 Service Unavailable", []) if kind == "error" else (
                "302 Found", [("Location", uri + "?moved")])
            http = StatusAndHeaders(status, [("Content-Type", "text/html")] + extra, protocol="HTTP/1.1")
            writer.write_record(writer.create_warc_record(uri, "response", payload=io.BytesIO(b""), http_headers=http,
                                                          warc_headers_dict={"WARC-Date": date}))
            continue
        prev = last.get(p)
        if prev is not None and prev[0] == version and rng.random() < 0.5:
            http = StatusAndHeaders("200 OK", [("Content-Type", "text/html")], protocol="HTTP/1.1")
            writer.write_record(writer.create_revisit_record(uri, prev[1], prev[2], prev[3], http_headers=http,
                                                             warc_headers_dict={"WARC-Date": date}))
            continue
        body = f"<html><body>{uri} version {version}</body></html>\n".encode()
        http = StatusAndHeaders("200 OK", [("Content-Type", "text/html"), ("Content-Length", str(len(body)))],
                                protocol="HTTP/1.1")
        record = writer.create_warc_record(uri, "response", payload=io.BytesIO(body), http_headers=http,
                                           warc_headers_dict={"WARC-Date": date})
        writer.write_record(record)
        last[p] = (version, record.rec_headers.get_header("WARC-Payload-Digest"), uri, date)
    for fh, _ in handles.values():
        fh.close()
    if truth:
        with open(truth, "w") as fh:
            fh.write("page_id,change_rate\n" + "".join(f"{u},{r!r}\n" for u, r in zip(urls, rate.tolist())))
    return paths


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="archives", help="directory of the WARC files (default archives)")
    p.add_argument("--truth", help="also write the pages' true change rates (page_id,change_rate)")
    p.add_argument("--pages", type=int, default=200)
    p.add_argument("--hosts", type=int, default=10)
    p.add_argument("--days", type=int, default=40)
    p.add_argument("--seed", type=int, default=2026)
    args = p.parse_args()
    paths = write_archives(args.out, args.pages, args.hosts, args.days, args.seed, args.truth)
    print(f"{len(paths)} WARC files in {args.out}")


if __name__ == "__main__":
    main()
