"""StormCrawler status documents (jaxcrawl.io.write_stormcrawler, schedule --stormcrawler),
read back as StormCrawler's OpenSearch status index declares them (apache/incubator-stormcrawler
external/opensearch: status.mapping -- url, status and key keywords, nextFetchDate a date in
date_optional_time format, metadata.* keyword arrays -- and StatusUpdaterBolt.store: metadata
names with '.' written '%2E', the routing field "key", document id sha256Hex(url))."""
import datetime as dt
import hashlib
import json
import math
import os
import re

import numpy as np
import pytest

import jaxcrawl.io as jio
from jaxcrawl.cli import main
from jaxcrawl.io import _crawler

STATUSES = {"DISCOVERED", "FETCHED", "FETCH_ERROR", "REDIRECTION", "ERROR"}  # persistence.Status
ISO_MS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
DAY = 86400.0
EPOCH = 1767571200.0  # 2026-01-05T00:00:00Z


def epoch_ms(text: str) -> int:
    """Milliseconds since 1970 of a date_optional_time text with milliseconds and Z."""
    assert ISO_MS.match(text), text
    t = dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.timezone.utc)
    return round((t - dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)).total_seconds() * 1000)


def parse_documents(path, bulk=False, index="status"):
    """The documents of a --stormcrawler file (and, for bulk, each action line checked against
    its document): ``[(url, key, metadata, next fetch ms)]``."""
    lines = open(path, encoding="utf-8").read().splitlines()
    if bulk:
        assert len(lines) % 2 == 0
        actions, lines = lines[0::2], lines[1::2]
    out = []
    for i, line in enumerate(lines):
        doc = json.loads(line)
        assert list(doc) == ["url", "status", "metadata", "key", "nextFetchDate"]
        assert isinstance(doc["url"], str) and doc["status"] in STATUSES and doc["status"] == "DISCOVERED"
        assert isinstance(doc["key"], str) and doc["key"]
        meta = doc["metadata"]
        assert all("." not in name and isinstance(v, list) and all(isinstance(x, str) for x in v)
                   for name, v in meta.items())
        if bulk:
            action = json.loads(actions[i])
            assert action == {"index": {"_index": index, "_id": hashlib.sha256(doc["url"].encode()).hexdigest(),
                                        "routing": doc["key"]}}
        out.append((doc["url"], doc["key"], meta, epoch_ms(doc["nextFetchDate"])))
    return out


def test_documents_hold_the_fields_the_status_mapping_declares(tmp_path):
    urls = np.asarray(["https://WWW.Example.com:443/a", "http://b.example:8080/é?q=\"x\"", "urn:isbn:123",
                       "https://c.example/zero", "https://c.example/tiny"], object)
    rate = np.asarray([2.0, 0.25, 1.0, 0.0, 1e-300])
    due = np.asarray([EPOCH + 0.0004, EPOCH + 12.5, EPOCH + DAY, EPOCH, math.inf])
    k = jio.write_stormcrawler(tmp_path / "s.jsonl", urls, rate, due, on_signal=[False, True, False, False, False])
    assert k == (4, 1)
    docs = parse_documents(tmp_path / "s.jsonl")
    assert [d[0] for d in docs] == [urls[i] for i in (0, 1, 2, 4)]  # rate 0 left out
    assert [d[1] for d in docs] == ["www.example.com", "b.example:8080", "_DEFAULT_", "c.example"]
    assert [d[3] for d in docs] == [math.ceil((EPOCH + 0.0004) * 1000), (EPOCH + 12.5) * 1000, (EPOCH + DAY) * 1000,
                                    253402300799999]
    for (_, _, meta, _), i in zip(docs, (0, 1, 2, 4)):
        assert meta == {"jaxcrawl%2Erate": [repr(float(rate[i]))],
                        "jaxcrawl%2Einterval_seconds": [repr(float(DAY / rate[i]))],
                        **({"jaxcrawl%2Eon_signal": ["true"]} if i == 1 else {}), "jaxcrawl%2Etime_unit": ["days"]}
    # given keys win; an empty one is the URL's host
    jio.write_stormcrawler(tmp_path / "k.jsonl", urls[:2], rate[:2], due[:2], key=np.asarray(["q1", ""], object))
    assert [d[1] for d in parse_documents(tmp_path / "k.jsonl")] == ["q1", "b.example:8080"]


def test_bulk_lines_are_action_then_document(tmp_path):
    urls = np.asarray([f"https://h{i % 3}.example/p{i}" for i in range(7)], object)
    rate, due = np.linspace(0.5, 3, 7), EPOCH + np.arange(7) * 1000.25
    jio.write_stormcrawler(tmp_path / "plain.jsonl", urls, rate, due, unit="hours")
    jio.write_stormcrawler(tmp_path / "bulk.jsonl.gz", urls, rate, due, unit="hours", bulk=True, index="crawl-status")
    import gzip

    (tmp_path / "bulk.jsonl").write_bytes(gzip.decompress((tmp_path / "bulk.jsonl.gz").read_bytes()))
    lines = (tmp_path / "bulk.jsonl").read_text().splitlines()
    assert lines[1::2] == (tmp_path / "plain.jsonl").read_text().splitlines()
    assert parse_documents(tmp_path / "bulk.jsonl", bulk=True, index="crawl-status") == parse_documents(
        tmp_path / "plain.jsonl")
    assert lines[0] == ('{"index":{"_index":"crawl-status","_id":"'
                        + hashlib.sha256(b"https://h0.example/p0").hexdigest() + '","routing":"h0.example"}}')


def test_bad_input_writes_nothing(tmp_path):
    out = tmp_path / "s.jsonl"
    with pytest.raises(ValueError, match="rate must be finite"):
        jio.write_stormcrawler(out, ["https://a/"], [-1.0], [EPOCH])
    with pytest.raises(ValueError, match=r"'https://a/': next fetch nan s is not a StormCrawler nextFetchDate"):
        jio.write_stormcrawler(out, ["https://a/"], [1.0], [math.nan])
    with pytest.raises(ValueError, match="before|from 1970"):
        jio.write_stormcrawler(out, ["https://a/"], [1.0], [-5.0])
    assert not out.exists()


def _plan(tmp_path, n=40, seed=0):
    """A plan of ``n`` URLs on 4 hosts (the first 3 pages crawled on change signals only), a
    crawl delay that makes h0 defer crawls, and a --hosts table putting h3's pages in one queue."""
    rng = np.random.default_rng(seed)
    ids = np.asarray([f"https://h{i % 4}.example/p{i}" for i in range(n)], object)
    rate = 1.0 / rng.uniform(0.3, 3.0, n)
    prob = np.zeros(n)
    prob[:3] = 0.5
    jio.write_plan(str(tmp_path / "plan.csv"), ids, rate, prob, periodic_rate=np.zeros(n))
    load = np.sum(rate[4::4])
    (tmp_path / "delays.csv").write_text(f"host,crawl_delay\nh0.example,{float(DAY / (0.85 * load))!r}\nshard-3,60\n")
    (tmp_path / "hosts.csv").write_text("page_id,host_id\n" + "".join(
        f"{u},{'shard-3' if u.startswith('https://h3.') else u.split('/')[2]}\n" for u in ids))
    return ids, rate, prob


def _schedule(tmp_path, capsys, *args):
    code = main(["schedule", "-p", str(tmp_path / "plan.csv"), "-q", "--crawl-delays", str(tmp_path / "delays.csv"),
                 "--hosts", str(tmp_path / "hosts.csv"), *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.long
def test_schedule_writes_documents_that_agree_with_the_urlfrontier_file_day_after_day(tmp_path, capsys):
    ids, rate, prob = _plan(tmp_path)
    (tmp_path / "real").mkdir()  # day 1's file through a symlink: written through, the link kept
    os.symlink(tmp_path / "real" / "s0.jsonl", tmp_path / "s0.jsonl")
    code, out, _ = _schedule(tmp_path, capsys, "--start", "2026-01-05T00:00:00Z", "--horizon", "1",
                             "-o", tmp_path / "d0.csv", "--stormcrawler", tmp_path / "s0.jsonl")
    assert code == 0
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["stormcrawler"] == {"path": str(tmp_path / "s0.jsonl"), "num_urls": 40, "num_clamped": 0,
                                       "bulk": False}
    assert f"stormcrawler 40 URLs written to {tmp_path / 's0.jsonl'}" in out
    assert os.path.islink(tmp_path / "s0.jsonl") and sorted(os.listdir(tmp_path / "real")) == ["s0.jsonl"]
    assert len(parse_documents(tmp_path / "real" / "s0.jsonl")) == 40
    # day 2 continues from day 1's timetable; every crawler file says the same next fetches
    code, out, _ = _schedule(tmp_path, capsys, "--start", "2026-01-06T00:00:00Z", "--horizon", "1",
                             "--after", tmp_path / "d0.csv", "-o", tmp_path / "d1.csv",
                             "--urlfrontier", tmp_path / "f1.jsonl", "--stormcrawler", tmp_path / "s1.jsonl",
                             "--stormcrawler-bulk")
    assert code == 0
    assert json.loads(out.strip().splitlines()[-1])["stormcrawler"]["bulk"] is True
    docs = parse_documents(tmp_path / "s1.jsonl", bulk=True)
    front = [json.loads(line)["known"] for line in open(tmp_path / "f1.jsonl")]
    assert [d[0] for d in docs] == [f["info"]["url"] for f in front] == ids.tolist()
    assert [d[1] for d in docs] == [f["info"]["key"] for f in front]
    assert {d[1] for d in docs} == {"h0.example", "h1.example", "h2.example", "shard-3"}
    for (_, _, meta, due_ms), f, i in zip(docs, front, range(len(ids))):
        assert math.ceil(due_ms / 1000) == int(f["refetchableFromDate"])  # the same instant, in ms
        assert meta["jaxcrawl%2Erate"] == f["info"]["metadata"]["jaxcrawl.rate"]["values"]
        assert ("jaxcrawl%2Eon_signal" in meta) == (prob[i] > 0)
    # each page's first crawl in day 2's timetable is its nextFetchDate
    t, p, _ = jio.read_timetable(tmp_path / "d1.csv")
    p = np.asarray([str(x) for x in p.tolist()], object)
    for url, _, _, due_ms in docs:
        mine = t[p == url]
        if mine.size:
            assert due_ms == math.ceil(mine.min() * 1000 - 1e-3)
        else:
            assert due_ms >= (EPOCH + DAY) * 1000


def test_schedule_stormcrawler_checks(tmp_path, capsys):
    _plan(tmp_path, n=8)
    code, _, err = _schedule(tmp_path, capsys, "--start", "0", "--stormcrawler", tmp_path / "s.jsonl")
    assert code == 2 and "--stormcrawler needs an ISO 8601 --start" in err
    code, _, err = _schedule(tmp_path, capsys, "--start", "2026-01-05", "--stormcrawler-bulk", "-o", tmp_path / "t.csv")
    assert code == 2 and "--stormcrawler-bulk needs --stormcrawler" in err
    code, _, err = _schedule(tmp_path, capsys, "--start", "2026-01-05", "-o", tmp_path / "t.csv",
                             "--stormcrawler", tmp_path / "t.csv")
    assert code == 2 and "must be different files" in err
    code, _, err = _schedule(tmp_path, capsys, "--start", "2026-01-05", "--stormcrawler", tmp_path / "plan.csv")
    assert code == 2 and "plan.csv" in err
    assert not (tmp_path / "s.jsonl").exists() and not (tmp_path / "t.csv").exists()
    assert _crawler.MAX_NEXT_FETCH_DATE == 253402300799.999
