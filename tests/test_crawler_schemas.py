"""The crawler files checked against the crawlers' own definitions.

URLFrontier: every line parsed strictly by protobuf's ``json_format`` (the Python twin of the
``JsonFormat.parser()`` the reference client's ``PutURLs`` uses) into ``URLItem`` messages
built here from crawler-commons/url-frontier ``API/src/main/protobuf/urlfrontier.proto``
(release 2.6, commit 874daf8), then printed back canonically and compared.

Nutch: every line read by a transcription of the injector's parsing rules (apache/nutch
``src/java/org/apache/nutch/crawl/Injector.java`` at 1.23-SNAPSHOT, commit 7906941: the
job's ``KeyValueTextInputFormat`` (line 422) splits each line at its first tab; ``map``
(lines 240-258) trims the URL, skips empty and ``#`` lines and trims the metadata;
``processMetaData`` (lines 198-233) splits it at tabs, skips parts without ``=``, and reads
``nutch.fetchInterval`` with ``Integer.parseInt``, logging and ignoring a bad number).
"""
import datetime as dt
import gzip
import json
import re

import numpy as np
import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory

from jaxcrawl import io as jio
from jaxcrawl.cli import main
from jaxcrawl.io import _crawler

F = descriptor_pb2.FieldDescriptorProto
JAVA_INT_MAX = 2**31 - 1


def _field(name, number, kind, *, message=None, repeated=False, oneof=None):
    f = F(name=name, number=number, type=kind, label=F.LABEL_REPEATED if repeated else F.LABEL_OPTIONAL)
    if message:
        f.type_name = ".urlfrontier." + message
    if oneof is not None:
        f.oneof_index = oneof
    return f


def _urlfrontier_item_class():
    """``urlfrontier.URLItem`` and the messages it holds, as urlfrontier.proto declares them."""
    fd = descriptor_pb2.FileDescriptorProto(name="urlfrontier.proto", package="urlfrontier", syntax="proto3")
    # message StringList { repeated string values = 1; }
    fd.message_type.add(name="StringList").field.append(_field("values", 1, F.TYPE_STRING, repeated=True))
    # message URLInfo { string url = 1; string key = 2; map<string, StringList> metadata = 3;
    #                   string crawlID = 4; }
    info = fd.message_type.add(name="URLInfo")
    entry = info.nested_type.add(name="MetadataEntry")  # what protoc makes of the map field
    entry.options.map_entry = True
    entry.field.extend([_field("key", 1, F.TYPE_STRING), _field("value", 2, F.TYPE_MESSAGE, message="StringList")])
    info.field.extend([_field("url", 1, F.TYPE_STRING), _field("key", 2, F.TYPE_STRING),
                       _field("metadata", 3, F.TYPE_MESSAGE, message="URLInfo.MetadataEntry", repeated=True),
                       _field("crawlID", 4, F.TYPE_STRING)])
    # message KnownURLItem { URLInfo info = 1; uint64 refetchable_from_date = 2; }
    fd.message_type.add(name="KnownURLItem").field.extend(
        [_field("info", 1, F.TYPE_MESSAGE, message="URLInfo"), _field("refetchable_from_date", 2, F.TYPE_UINT64)])
    # message DiscoveredURLItem { URLInfo info = 1; }
    fd.message_type.add(name="DiscoveredURLItem").field.append(_field("info", 1, F.TYPE_MESSAGE, message="URLInfo"))
    # message URLItem { oneof item { DiscoveredURLItem discovered = 1; KnownURLItem known = 2; }
    #                   string ID = 3; uint64 creation_date = 4; }
    item = fd.message_type.add(name="URLItem")
    item.oneof_decl.add(name="item")
    item.field.extend([_field("discovered", 1, F.TYPE_MESSAGE, message="DiscoveredURLItem", oneof=0),
                       _field("known", 2, F.TYPE_MESSAGE, message="KnownURLItem", oneof=0),
                       _field("ID", 3, F.TYPE_STRING), _field("creation_date", 4, F.TYPE_UINT64)])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("urlfrontier.URLItem"))


URL_ITEM = _urlfrontier_item_class()


def parse_urlfrontier(path):
    """Every line a ``URLItem`` (strict: unknown fields and wrong types refused) holding a
    ``KnownURLItem``, written in canonical proto3 JSON (printing the message back gives the
    line's object); ``[(url, key, {name: values}, refetchable_from_date)]``."""
    items = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            msg = json_format.Parse(line, URL_ITEM())
            assert msg.WhichOneof("item") == "known"
            assert json_format.MessageToDict(msg) == json.loads(line)  # canonical: names, uint64 as text, defaults
            info = msg.known.info
            items.append((info.url, info.key, {k: list(v.values) for k, v in info.metadata.items()},
                          msg.known.refetchable_from_date))
    return items


def _java_parse_int(text):
    """``Integer.parseInt``: an optional sign and decimal digits, within a Java int."""
    if not re.fullmatch(r"[+-]?[0-9]+", text) or not -(2**31) <= int(text) <= JAVA_INT_MAX:
        raise ValueError(f"NumberFormatException: {text!r}")
    return int(text)


def parse_nutch(path, *, metadata=False):
    """``{url: fetch interval}`` as the injector reads the seed file (module docstring);
    a line the injector would skip, or a number it would log and ignore, fails the test.
    With ``metadata``: ``{url: (fetch interval, {name: value} of the other metadata)}`` (the
    injector keeps other ``name=value`` parts as the page's metadata)."""
    out = {}
    with open(path, encoding="utf-8", newline="") as fh:
        text = fh.read()
    assert text.endswith("\n")
    for line in re.split(r"\r\n|\r|\n", text)[:-1]:   # Hadoop's LineReader
        key, _, value = line.partition("\t")          # KeyValueLineRecordReader, separator '\t'
        url = key.strip("".join(map(chr, range(33))))  # String.trim()
        assert url and not url.startswith("#") and url == key
        meta = {}
        for part in value.strip("".join(map(chr, range(33)))).split("\t"):
            if "=" in part:
                name, _, v = part.partition("=")
                meta[name] = v
        assert "nutch.fetchInterval" in meta and set(meta) <= {"nutch.fetchInterval", "jaxcrawl.on_signal"}
        interval = _java_parse_int(meta.pop("nutch.fetchInterval"))
        out[url] = (interval, meta) if metadata else interval
    return out


def test_the_parser_refuses_what_the_proto_does_not_declare():
    good = ('{"known":{"info":{"url":"https://a.example/","metadata":{"m":{"values":["1"]}}},'
            '"refetchableFromDate":"1767736892"}}')
    assert json_format.Parse(good, URL_ITEM()).known.refetchable_from_date == 1767736892
    for bad in (good.replace('{"values":["1"]}', '["1"]'),          # a bare list is not a StringList
                good.replace("refetchableFromDate", "refetchable_date"),
                good.replace('"1767736892"', '"-1"'),                 # uint64
                good.replace('"1767736892"', '"18446744073709551616"')):
        with pytest.raises(json_format.ParseError):
            json_format.Parse(bad, URL_ITEM())


def test_schedule_writes_urlfrontier_items_and_nutch_seeds_the_crawlers_parse(tmp_path, capsys):
    ids = [f"https://h{i % 3}.example/p{i}?q=é,\"{i}\"" for i in range(12)] + ["https://h0.example/tiny"]
    rate = np.r_[np.linspace(0.5, 6.0, 12), 1e-300]  # crawls per hour; the last overflows every date
    prob = np.zeros(13)
    prob[3] = 0.5  # crawled on change signals only: in the queue at its signal-driven rate, flagged
    jio.write_plan(str(tmp_path / "plan.csv"), np.asarray(ids, object), rate, prob)
    # h0's delay (15 min: 4 crawls an hour) is below its pages' rates (8.75 an hour): crawls moved and
    # deferred; h2 has no delay (its URLs' host is still its queue key)
    (tmp_path / "delays.csv").write_text("host,crawl_delay\nh0.example,900\nh1.example,1\n")
    front, seeds, table = tmp_path / "f.jsonl.gz", tmp_path / "seeds.txt", tmp_path / "t.csv"
    assert main(["schedule", "--plan", str(tmp_path / "plan.csv"), "--time-unit", "hours", "--horizon", "2",
                 "--start", "2026-01-05T06:00:00Z", "--crawl-delays", str(tmp_path / "delays.csv"),
                 "-o", str(table), "--urlfrontier", str(front), "--nutch", str(seeds), "--quiet"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["urlfrontier"]["num_clamped"] == 1 and summary["nutch"]["num_clamped"] == 1
    # the report names the hosts whose crawls the delays moved (h1's pages share grid points),
    # the most deferred first, and its counts add up to the timetable's and the totals
    rows = summary["crawl_delay_hosts"]
    assert [r["host"] for r in rows] == ["h0.example", "h1.example"] and summary["num_hosts_moved_or_deferred"] == 2
    lines = table.read_text().splitlines()[1:]
    for r in rows:
        kept = sum(1 for line in lines if f"//{r['host']}/" in line)
        assert r["crawls"] == kept and r["deferred"] == r["planned_crawls"] - kept
        assert r["cap"] == 3600 / r["crawl_delay"]
    assert rows[0]["crawls"] <= 2 * 4 + 1 and rows[0]["deferred"] > 0 and rows[1]["deferred"] == 0
    # every deferred crawl was moved (past the window's end); "moved" counts the kept ones
    assert sum(r["moved"] + r["deferred"] for r in rows) == summary["crawls_moved_for_crawl_delays"]
    assert sum(r["deferred"] for r in rows) == summary["crawls_deferred_past_horizon"]
    plain = tmp_path / "f.jsonl"
    plain.write_bytes(gzip.decompress(front.read_bytes()))
    items = parse_urlfrontier(plain)
    keep = list(range(13))  # every page with a rate > 0, the signal-only one too
    assert [u for u, *_ in items] == [ids[i] for i in keep]
    start = dt.datetime(2026, 1, 5, 6, tzinfo=dt.timezone.utc).timestamp()
    crawl_t, crawl_p, _ = jio.read_timetable(table)
    crawl_p = np.asarray([str(x) for x in crawl_p.tolist()], object)
    for (url, key, meta, due), i in zip(items, keep):
        assert key == url.split("/")[2]
        assert meta == {"jaxcrawl.rate": [repr(float(rate[i]))], "jaxcrawl.interval_seconds": [repr(3600 / float(rate[i]))],
                        "jaxcrawl.time_unit": ["hours"], **({"jaxcrawl.on_signal": ["true"]} if prob[i] else {})}
        mine = crawl_t[crawl_p == ids[i]]
        if mine.size:  # its first crawl in the window
            assert due == int(np.ceil(mine.min() - 1e-6))
        elif rate[i] > 1e-9 and prob[i] == 0 and url.startswith("https://h0."):  # deferred: due after the window
            assert due >= start + 2 * 3600
        elif rate[i] > 1e-9:  # its first crawl on its grid
            assert start <= due <= start + 3600 / rate[i] + 1
        else:
            assert due == _crawler.MAX_REFETCH_DATE
    nutch = parse_nutch(seeds, metadata=True)
    assert list(nutch) == [ids[i] for i in keep]
    assert [nutch[ids[i]][0] for i in keep] == [min(round(3600 / rate[i]), JAVA_INT_MAX) for i in keep]
    assert [nutch[ids[i]][1] for i in keep] == [{"jaxcrawl.on_signal": "true"} if prob[i] else {} for i in keep]


def test_solve_writes_crawler_files_that_parse(tmp_path, capsys):
    pages = tmp_path / "pages.csv"
    ids = [f"https://h{i % 3}.example/p{i}" for i in range(30)]
    rng = np.random.default_rng(1)
    jio.write_problem(str(pages), np.asarray(ids, object), rng.lognormal(size=30), rng.lognormal(size=30),
                      max_interval=np.full(30, 5.0))
    front, seeds = tmp_path / "f.jsonl", tmp_path / "seeds.txt"
    assert main(["solve", "--input", str(pages), "--bandwidth", "12", "--time-unit", "hours",
                 "--start", "2026-01-05T06:00:00+01:00", "--output", str(tmp_path / "plan.csv"),
                 "--urlfrontier", str(front), "--nutch", str(seeds), "--quiet"]) == 0
    plan = jio.read_plan(str(tmp_path / "plan.csv"))
    start = dt.datetime(2026, 1, 5, 5, tzinfo=dt.timezone.utc).timestamp()
    items = parse_urlfrontier(front)
    assert [u for u, *_ in items] == ids
    for (url, key, meta, due), rate in zip(items, plan.rate):
        assert key == url.split("/")[2]
        assert float(meta["jaxcrawl.rate"][0]) == pytest.approx(rate) and meta["jaxcrawl.time_unit"] == ["hours"]
        assert start <= due <= start + 3600 / rate + 1  # the first crawl, rounded up to the second
        assert rate >= 1 / 5 * (1 - 1e-6)  # --max-interval column: at least every 5 hours
    nutch = parse_nutch(seeds)
    assert list(nutch) == ids
    np.testing.assert_allclose([nutch[u] for u in ids], 3600 / plan.rate, atol=0.5 + 1e-9)


def test_writers_clamp_int_fields_and_refuse_dates_the_frontier_reads_otherwise(tmp_path):
    url = np.array(["https://a.example/1", "https://a.example/2", "https://b.example/3", "https://b.example/4"])
    rate = np.array([1e-300, 5e-324, 2.0, 1e9])  # per day
    start = 1767571200.0
    with np.errstate(over="ignore"):
        due = start + 86400 * 0.5 / rate
    out = jio.write_urlfrontier(tmp_path / "f.jsonl", url, rate, due, crawl_id="crawl-7")
    assert out == (4, 2)
    items = [json_format.Parse(line, URL_ITEM()) for line in open(tmp_path / "f.jsonl")]
    assert [m.known.refetchable_from_date for m in items] == [_crawler.MAX_REFETCH_DATE] * 2 + [
        int(np.ceil(start + 86400 * 0.25)), int(np.ceil(start + 86400 * 0.5 / 1e9 - 1e-6))]
    assert {m.known.info.crawlID for m in items} == {"crawl-7"}
    for bad, page in (([start, start, np.nan, start], 2), ([start, -5.0, start, start], 1)):
        with pytest.raises(ValueError, match=re.escape(f"page {str(url[page])!r}: next fetch")):
            jio.write_urlfrontier(tmp_path / "g.jsonl", url, rate, bad)
    for writer, extra in ((jio.write_urlfrontier, ([start] * 4,)), (jio.write_nutch_seeds, ())):
        for r in (np.nan, -1.0, np.inf):
            with pytest.raises(ValueError, match=re.escape(f"page {str(url[2])!r} has")):
                writer(tmp_path / "g.jsonl", url, [1.0, 1.0, r, 1.0], *extra)
    long_id = "page-" + "x" * 251  # no host: the id is its queue key, 256 characters
    with pytest.raises(ValueError, match="longer than 255 characters"):
        jio.write_urlfrontier(tmp_path / "g.jsonl", [long_id], [1.0], [start])
    assert not (tmp_path / "g.jsonl").exists()
    assert jio.write_urlfrontier(tmp_path / "g.jsonl", [long_id[:-1]], [1.0], [start]) == (1, 0)
    out = jio.write_nutch_seeds(tmp_path / "s.txt", url, rate)
    assert out == (4, 2)
    assert list(parse_nutch(tmp_path / "s.txt").values()) == [JAVA_INT_MAX, JAVA_INT_MAX, 43200, 1]
    for u in (" https://a.example/", "https://a.example/\x0b", "#x", "https://a.example/\tx"):
        with pytest.raises(ValueError, match="cannot be a Nutch seed URL"):
            jio.write_nutch_seeds(tmp_path / "t.txt", [u], [1.0])
    assert not (tmp_path / "t.txt").exists()


def test_queue_keys_are_the_url_hosts():
    """The writer's queue key is the host rule's key of the URL (``url_host``: a regular
    expression for plain URLs), equal to the key of ``urllib.parse.urlsplit``'s network
    location; else the URL itself."""
    import urllib.parse

    from jaxcrawl._src import hostmap
    from jaxcrawl._src.hostmap import url_host

    def reference(u):  # urlsplit's netloc through the host rule, no fast path
        parts = urllib.parse.urlsplit(u)
        return hostmap._canonical_netloc(parts.netloc, u) if parts.hostname else None

    tricky = ["https://WWW.Site.example/a", "http://h.example", "http://h.example:8080/x", "http://h.example:/x",
              "https://u:p@h.example/x", "http://[::1]:80/x", "http://h.example:80abc/", "https:///x", "h.example/x",
              "ftp://h.example?q", "http://h.example#f", " http://h.example/", "http://h.exa\tmple/", "x://-a.b-/",
              "http://h_e.example/", "HTTP://É.example/", "1http://h.example/", "http://h.example\\x/", "p17", "",
              "http://h.example.:80/", "https://h.example:443", "http://h.example:08080/"]
    rng = np.random.default_rng(5)
    parts = (["http", "HTTPS", "ftp", "1x", "h-t+p", "", " http"], ["://", ":/", "//"],
             None, ["", ":", ":80", ":8a", "@h", ":443", ":8080"], ["", "/", "/x", "?q", "#f", "\\x", " /", "\t", "/é"])
    plain, odd = list("aZ09.-"), list("aZ09.-_é@[]: ")
    for k in range(3000):
        host = "".join(rng.choice(plain if k % 2 else odd, rng.integers(0, 7)))
        tricky.append("".join(str(rng.choice(p)) if p is not None else host for p in parts))
    refused = 0
    for u in tricky:
        try:
            want = url_host(u) or u
        except ValueError:  # not a URL urlsplit accepts, or a host the rule refuses: refused, naming it
            refused += 1
            with pytest.raises(ValueError, match=re.escape(f"page {u!r}")):
                _crawler._queue_key(u)
            continue
        assert _crawler._queue_key(u) == want, u
        if "://" in u:
            assert want == (reference(u) or u), u
    fast = sum(hostmap._PLAIN_URL.match(u) is not None for u in tricky)
    assert 0 < refused < len(tricky) // 2 and fast > 50  # both paths exercised


@pytest.mark.parametrize("block", [3, 1 << 20])
def test_crawler_files_match_a_line_by_line_reference_across_blocks(tmp_path, monkeypatch, block):
    """The writers build lines column-wise, a block of pages at a time; each written line is
    the item a plain per-page ``json.dumps`` gives (given keys as an array or by host, keys
    from the URL's host, host-less ids, signal pages, pages with rate 0 left out)."""
    import pyarrow as pa

    from jaxcrawl._src.hostmap import url_host

    monkeypatch.setattr(_crawler, "BLOCK_PAGES", block)
    rng = np.random.default_rng(3)
    n = 40
    url = np.array([f"https://H{i % 4}.example/p{i}" if i % 7 else f"page-{i}" for i in range(n)], object)
    rate = np.where(rng.random(n) < 0.2, 0.0, rng.lognormal(0.0, 2.0, n))
    due = 1767571200.0 + rng.uniform(0, 86400, n)
    sig = rng.random(n) < 0.3
    names = ["q0", "", "q2"]
    hidx = np.where(rng.random(n) < 0.5, rng.integers(0, 3, n), 3)
    by_host = pa.DictionaryArray.from_arrays(pa.array(hidx.astype(np.int32)), pa.array(names + [""]))
    plain = np.array([(names + [""])[h] for h in hidx], object)
    for key in (None, plain, by_host):
        got = jio.write_urlfrontier(tmp_path / "f.jsonl", url, rate, due, key=key, on_signal=sig)
        lines = open(tmp_path / "f.jsonl").read().splitlines()
        keep = np.flatnonzero(rate > 0)
        assert got == (keep.size, 0) and len(lines) == keep.size
        for line, i in zip(lines, keep.tolist()):
            k = "" if key is None else str(plain[i])
            meta = {"jaxcrawl.rate": {"values": [repr(float(rate[i]))]},
                    "jaxcrawl.interval_seconds": {"values": [repr(86400.0 / float(rate[i]))]}}
            if sig[i]:
                meta["jaxcrawl.on_signal"] = {"values": ["true"]}
            meta["jaxcrawl.time_unit"] = {"values": ["days"]}
            info = {"url": url[i], "key": k or url_host(url[i]) or url[i], "metadata": meta}
            want = {"known": {"info": info, "refetchableFromDate": str(int(np.ceil(due[i] - 1e-6)))}}
            assert line == json.dumps(want, separators=(",", ":")), i
        json_format.Parse(lines[0], URL_ITEM())
    got = jio.write_nutch_seeds(tmp_path / "s.txt", url, rate, on_signal=sig)
    want = [f"{url[i]}\tnutch.fetchInterval={int(np.clip(np.rint(86400 / rate[i]), 1, JAVA_INT_MAX))}"
            + ("\tjaxcrawl.on_signal=true" if sig[i] else "") for i in np.flatnonzero(rate > 0).tolist()]
    assert got.num_urls == len(want) and open(tmp_path / "s.txt").read().splitlines() == want
    ids = np.arange(n) * 1000  # integer ids: their decimal text
    jio.write_nutch_seeds(tmp_path / "i.txt", ids, np.ones(n))
    assert [line.split("\t")[0] for line in open(tmp_path / "i.txt")] == [str(i) for i in ids.tolist()]
