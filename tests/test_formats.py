"""Columnar I/O (CSV / Parquet / JSON Lines, gzip), malformed rows in every format, atomic
writes, crawl delays from tables and robots.txt, real time (the crawler-native outputs:
test_crawler_schemas.py)."""
import csv
import gzip
import json
import os
import re

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jaxcrawl import io as jio
from jaxcrawl._src import timeunits
from jaxcrawl.cli import main
from jaxcrawl.io import _formats

FORMATS = ["csv", "csv.gz", "parquet", "jsonl", "jsonl.gz"]
PAGES = jio.Schema("page table", (jio.Column("page_id"),
                                  jio.Column("importance", "number", minimum=0.0, exclusive_minimum=True),
                                  jio.Column("change_rate", "number", minimum=0.0, exclusive_minimum=True)),
                   key="page_id", rows="pages")
IDS = np.array(["https://a.example/x,1", 'https://b.example/"q"', "https://a.example/plain"], object)


@pytest.mark.parametrize("ext", FORMATS)
def test_page_table_plan_and_timetable_round_trip_in_every_format(tmp_path, ext):
    p = str(tmp_path / f"pages.{ext}")
    jio.write_problem(p, IDS, [1.5, 2.0, 1e-300], [0.25, 1 / 3, 7.0], [0, 1, 0],
                      min_interval=[0.0, 0.5, 2.0], max_interval=[np.inf, 3.0, 10.0])
    rows = jio.read_problem(p)
    assert list(rows.page_id) == list(IDS)
    np.testing.assert_array_equal(rows.importance, [1.5, 2.0, 1e-300])  # exact float64 round trip
    np.testing.assert_array_equal(rows.change_rate, [0.25, 1 / 3, 7.0])
    np.testing.assert_array_equal(rows.complete, [False, True, False])
    np.testing.assert_array_equal(rows.max_interval, [np.inf, 3.0, 10.0])
    lo, hi = rows.rate_bounds()
    np.testing.assert_allclose(lo, [0.0, 1 / 3, 0.1]) and np.testing.assert_allclose(hi, [np.inf, 2.0, 0.5])
    # integer ids come back as int64 in every format
    jio.write_problem(p, np.arange(3) * 7, [1, 2, 3], [1, 1, 1])
    assert jio.read_problem(p).page_id.dtype == np.int64
    plan = str(tmp_path / f"plan.{ext}")
    jio.write_plan(plan, IDS, [0.5, 0.0, 2.5], [0.0, 1.0, 0.25])
    got = jio.read_plan(plan)
    assert list(got.page_id) == list(IDS) and list(got.rate) == [0.5, 0.0, 2.5] and list(got.prob) == [0, 1, 0.25]
    tt = str(tmp_path / f"tt.{ext}")
    jio.write_timetable(tt, [0.0, 0.25, 1.0], [2, 0, 2], IDS, start_epoch=1767592800.0, unit="hours")
    t = pa.Table.from_pylist(_records(tt))
    assert t["time"].to_pylist() == ["2026-01-05T06:00:00.000Z", "2026-01-05T06:15:00.000Z",
                                     "2026-01-05T07:00:00.000Z"]
    assert [float(x) for x in t["epoch_seconds"].to_pylist()] == [1767592800.0, 1767593700.0, 1767596400.0]
    assert t["page_id"].to_pylist() == [IDS[2], IDS[0], IDS[2]]


def _records(path):
    """The rows of a written table, read back by the plain standard library / pyarrow."""
    if path.endswith(".parquet"):
        return pq.read_table(path).to_pylist()
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", newline="") as fh:
        if ".jsonl" in path:
            return [json.loads(line) for line in fh]
        return list(csv.DictReader(fh))


@pytest.mark.parametrize("ext, where", [("csv", "{p}:3:"), ("csv.gz", "{p}:3:"), ("jsonl", "{p}:2:"),
                                        ("jsonl.gz", "{p}:2:"), ("parquet", "{p}: row 2:")])
def test_malformed_rows_in_every_format(tmp_path, ext, where):
    p = str(tmp_path / f"bad.{ext}")
    ids, imp, lam = ["a", "b", "c", "a"], [1.0, -2.0, 1.0, 1.0], [1.0, 1.0, 0.0, 1.0]
    if ext.startswith("csv"):
        text = "page_id,importance,change_rate\n" + "".join(f"{a},{b:g},{c:g}\n" for a, b, c in zip(ids, imp, lam))
        (gzip.open if ext.endswith(".gz") else open)(p, "wt").write(text)
    elif ext.startswith("jsonl"):
        text = "".join(json.dumps({"page_id": a, "importance": b, "change_rate": c}) + "\n"
                       for a, b, c in zip(ids, imp, lam))
        (gzip.open if ext.endswith(".gz") else open)(p, "wt").write(text)
    else:
        pq.write_table(pa.table({"page_id": ids, "importance": imp, "change_rate": lam}), p)
    with pytest.raises(jio.TableError, match="^" + where.format(p=p).replace(".", r"\.") + " importance must be"):
        jio.read_problem(p)
    t = jio.read_table(p, PAGES, errors="skip")
    assert t.report.rows_read == 1 and t.report.rows_skipped == 3
    assert t.report.skipped_by_reason == {"bad importance": 1, "bad change_rate": 1, "duplicate page_id": 1}
    assert list(t["page_id"]) == ["a"]


def test_text_files_pyarrow_cannot_number_fall_back_to_the_exact_reader(tmp_path):
    """Blank lines, a line break inside a quoted id, a JSON value of the wrong type: the
    line-by-line reader takes over and the messages name the right line."""
    p = tmp_path / "t.csv"
    p.write_text('page_id,importance,change_rate\n\n"x\ny",1,1\n\nz,1,-1\n')
    with pytest.raises(jio.TableError, match=r"t\.csv:6: change_rate must be"):
        jio.read_problem(str(p))
    q = tmp_path / "t.jsonl"
    q.write_text('{"page_id":"a","importance":1,"change_rate":1}\n\n'
                 '{"page_id":"b","importance":"two","change_rate":1}\n')
    with pytest.raises(jio.TableError, match=r"t\.jsonl:3: importance 'two' is not a number"):
        jio.read_problem(str(q))
    r = tmp_path / "u.jsonl"
    r.write_text('{"page_id":"a","importance":1,"change_rate":1}\n{"page_id":"b","importance":1}\n')
    with pytest.raises(jio.TableError, match=r"u\.jsonl:2: change_rate"):  # a missing key is a null
        jio.read_problem(str(r))


def test_columnar_and_exact_readers_agree(tmp_path):
    """The same CSV read by pyarrow and by the line-by-line reader (forced by a blank line)."""
    rng = np.random.default_rng(0)
    n = 500
    rows = "".join(f"p{i},{rng.lognormal():.17g},{rng.lognormal():.17g},{i % 3 == 0:d}\n" for i in range(n))
    fast = tmp_path / "fast.csv"
    slow = tmp_path / "slow.csv"
    fast.write_text("page_id,importance,change_rate,complete\n" + rows)
    slow.write_text("page_id,importance,change_rate,complete\n\n" + rows)
    a, b = jio.read_problem(str(fast)), jio.read_problem(str(slow))
    for name in ("page_id", "importance", "change_rate", "complete"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))


def test_an_interrupted_write_leaves_the_previous_output(tmp_path, monkeypatch):
    out = tmp_path / "plan.parquet"
    jio.write_plan(str(out), ["a"], [1.0], [0.0])
    before = out.read_bytes()
    def boom(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(_formats, "_jsonl_lines", boom)
    monkeypatch.setattr(pq, "write_table", boom)
    with pytest.raises(KeyboardInterrupt):
        jio.write_plan(str(out), ["b"], [2.0], [0.0])
    assert out.read_bytes() == before and os.listdir(tmp_path) == ["plan.parquet"]
    j = tmp_path / "plan.jsonl"
    with pytest.raises(KeyboardInterrupt):
        jio.write_plan(str(j), ["b"], [2.0], [0.0])
    assert os.listdir(tmp_path) == ["plan.parquet"]  # no partial or temporary file


# ------------------------------------------------------------------ crawl delays, time
def test_crawl_delays_from_a_table_and_from_robots_txt(tmp_path):
    d = tmp_path / "robots"
    d.mkdir()
    (d / "a.example.txt").write_text("User-agent: *\nCrawl-delay: 30\n\nUser-agent: mybot\nCrawl-delay: 5\n")
    (d / "b.example").mkdir()
    (d / "b.example" / "robots.txt").write_text("User-agent: *\nRequest-rate: 2/60\n")
    (d / "c.example.txt").write_text("User-agent: *\nDisallow: /x\n")
    pages = ["https://a.example/1", "https://c.example/", "https://B.example/2", "https://a.example/3"]
    index, delays, names = jio.read_crawl_delays(str(d), pages)
    assert dict(zip(names, delays)) == {"a.example": 30.0, "b.example": 30.0}
    assert list(names[index[[0, 2, 3]]]) == ["a.example", "b.example", "a.example"] and index[1] == -1
    index, delays, names = jio.read_crawl_delays(str(d), pages, user_agent="mybot")
    assert dict(zip(names, delays))["a.example"] == 5.0
    t = tmp_path / "delays.csv"
    t.write_text("host,crawl_delay\nA.example,12\nb.example,0.5\n")
    index, delays, names = jio.read_crawl_delays(str(t), pages)
    assert list(names) == ["a.example", "b.example"] and list(delays) == [12.0, 0.5]
    np.testing.assert_array_equal(index, [0, -1, 1, 0])
    m = tmp_path / "hosts.csv"
    m.write_text("page_id,host_id\np1,B.example\np2,c.example\n")
    with pytest.raises(jio.TableError, match=r"delays\.csv:2: crawl-delay row host 'A.example' .*matches no page"):
        jio.read_crawl_delays(str(t), ["p1", "p2", "p3"], pages_path=str(m))  # a.example has no page here
    with pytest.warns(UserWarning, match=r"delays\.csv:2: crawl-delay row host 'A.example'"):
        index, delays, names = jio.read_crawl_delays(str(t), ["p1", "p2", "p3"], pages_path=str(m), unmatched="warn")
    np.testing.assert_array_equal(index, [0, -1, -1])
    assert list(delays) == [0.5]
    with pytest.raises(ValueError, match="no page -> host mapping"):
        jio.read_crawl_delays(str(t), ["p1"])
    t.write_text("host,crawl_delay\na.example,-1\n")
    with pytest.raises(jio.TableError, match=r"delays\.csv:2: crawl_delay must be"):
        jio.read_crawl_delays(str(t), pages)


def test_time_units_durations_and_iso_start():
    assert timeunits.parse_duration("6h", "days") == 0.25
    assert timeunits.parse_duration("90s", "minutes") == 1.5
    assert timeunits.parse_duration("2", "hours") == 2.0
    assert timeunits.parse_duration("inf") == np.inf
    with pytest.raises(ValueError, match="--min-interval must be"):
        timeunits.parse_duration("soon", name="--min-interval")
    assert timeunits.parse_start("2026-01-05") == timeunits.parse_start("2026-01-05T01:00:00+01:00") == 1767571200.0
    assert timeunits.parse_start("2026-01-05T06:00:00Z") == 1767592800.0
    with pytest.raises(ValueError, match="ISO 8601"):
        timeunits.parse_start("5 Jan 2026")
    assert list(timeunits.iso_utc([0.0, 1767592800.25])) == ["1970-01-01T00:00:00.000Z", "2026-01-05T06:00:00.250Z"]


def test_atomic_write_refuses_an_input_of_the_same_run(tmp_path):
    from jaxcrawl.io import atomic_write

    src = tmp_path / "in.csv"
    src.write_text("x\n")
    link = tmp_path / "link.csv"
    os.link(src, link)
    for target in (src, link, tmp_path / "." / "in.csv"):
        with pytest.raises(ValueError, match="refusing to overwrite"):
            atomic_write(target, lambda tmp: open(tmp, "w").write("y\n"), inputs=(str(src), None))
    assert src.read_text() == "x\n" and sorted(os.listdir(tmp_path)) == ["in.csv", "link.csv"]
    atomic_write(tmp_path / "out.csv", lambda tmp: open(tmp, "w").write("y\n"), inputs=(str(src),))
    assert (tmp_path / "out.csv").read_text() == "y\n"


@pytest.mark.long
def test_schedule_after_keeps_crawl_delays_across_windows(tmp_path, capsys):
    """Two consecutive days scheduled separately, the second with ``--after`` the first's
    timetable: joined, no host is fetched twice within its crawl delay, across midnight too
    (without ``--after`` the second window does not know the first's fetches: it differs);
    ``--after`` with the other kind of --start is refused."""
    from jaxcrawl.io import read_timetable

    ids = [f"https://{h}.example/p{i}" for h in ("a", "b") for i in range(12)]
    rate = np.linspace(1.0, 3.0, len(ids))  # per day: ~24 fetches a day per host
    (tmp_path / "plan.csv").write_text("page_id,rate,prob\n" + "".join(f"{p},{float(r)!r},0\n" for p, r in zip(ids, rate)))
    (tmp_path / "delays.csv").write_text("host,crawl_delay\na.example,3000\nb.example,2400\n")
    delay = {"a": 3000.0, "b": 2400.0}
    base = ["schedule", "-p", str(tmp_path / "plan.csv"), "--crawl-delays", str(tmp_path / "delays.csv"), "-q",
            "--horizon", "1"]
    assert main(base + ["--start", "2026-01-05T00:00:00Z", "-o", str(tmp_path / "d1.csv")]) == 0

    def joined(*extra):
        assert main(base + ["--start", "2026-01-06T00:00:00Z", "-o", str(tmp_path / "d2.csv"), *extra]) == 0
        t1, p1, _ = read_timetable(tmp_path / "d1.csv")
        t2, p2, _ = read_timetable(tmp_path / "d2.csv")
        t, p = np.concatenate([t1, t2]), np.concatenate([p1, p2])
        host = np.array([str(x)[8] for x in p])
        return min(float(np.min(np.diff(np.sort(t[host == h]))) / delay[h]) for h in delay)

    assert joined("--after", str(tmp_path / "d1.csv")) >= 1 - 1e-9
    with_after = (tmp_path / "d2.csv").read_text()
    joined()
    assert (tmp_path / "d2.csv").read_text() != with_after
    capsys.readouterr()
    assert main(["schedule", "-p", str(tmp_path / "plan.csv"), "-q", "--start", "2026-01-06T00:00:00Z",
                 "--after", str(tmp_path / "d1.csv")]) == 0  # without crawl delays: the pages' last fetches
    capsys.readouterr()
    assert main(base + ["--start", "1", "--after", str(tmp_path / "d1.csv"), "-o", str(tmp_path / "x.csv")]) == 2
    assert "same kind of --start" in capsys.readouterr().err
    assert not (tmp_path / "x.csv").exists()


@pytest.mark.long
def test_solve_with_host_caps_and_crawl_delays_takes_the_smaller_cap(tmp_path, capsys):
    """``--host-caps`` together with ``--crawl-delays``: every host's cap is
    min(file cap, seconds per unit / delay) -- the plan equals the one solved from a caps
    file holding those minima (float64, 1e-9), each host's total rate is within it, and a
    caps file that groups pages differently from the delays is refused naming the clash."""
    import shutil

    from jaxcrawl.io import read_plan

    ex = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")
    for f in ("pages.csv", "caps.csv", "crawl_delays.csv"):
        shutil.copy(os.path.join(ex, f), tmp_path / f)
    caps = dict(line.split(",") for line in (tmp_path / "caps.csv").read_text().splitlines()[1:])
    delays = dict(line.split(",") for line in (tmp_path / "crawl_delays.csv").read_text().splitlines()[1:])
    merged = {h: min(float(caps.get(h, "inf")), 86400.0 / float(d)) for h, d in delays.items()}
    merged.update({h: float(c) for h, c in caps.items() if h not in merged})
    assert any(float(caps[h]) < merged[h] * 1.0001 for h in caps) and any(merged[h] < float(caps[h]) for h in caps)
    (tmp_path / "merged.csv").write_text("host_id,cap\n" + "".join(f"{h},{c!r}\n" for h, c in merged.items()))
    base = ["solve", "--input", str(tmp_path / "pages.csv"), "--x64", "-q"]
    assert main(base + ["--host-caps", str(tmp_path / "caps.csv"), "--crawl-delays",
                        str(tmp_path / "crawl_delays.csv"), "-o", str(tmp_path / "both.csv")]) == 0
    assert main(base + ["--host-caps", str(tmp_path / "merged.csv"), "-o", str(tmp_path / "ref.csv")]) == 0
    both, ref = read_plan(tmp_path / "both.csv"), read_plan(tmp_path / "ref.csv")
    np.testing.assert_array_equal(both.page_id, ref.page_id)
    np.testing.assert_allclose(both.rate, ref.rate, rtol=1e-9, atol=1e-12)
    host = np.array([str(p).split("/")[2] for p in both.page_id])
    for h, c in merged.items():
        assert both.rate[host == h].sum() <= c * (1 + 1e-9)
    # a caps file keyed by other host groups (two sites in one) clashes with the delays' hosts
    (tmp_path / "map.csv").write_text("page_id,host_id\n" + "".join(
        f"{p},{'pair' if h in ('www.site00.example', 'www.site01.example') else h}\n"
        for p, h in zip(both.page_id, host)))
    (tmp_path / "grouped.csv").write_text("# pages: map.csv\nhost_id,cap\npair,50\n")
    capsys.readouterr()
    assert main(base + ["--host-caps", str(tmp_path / "grouped.csv"), "--crawl-delays",
                        str(tmp_path / "crawl_delays.csv"), "-o", str(tmp_path / "x.csv")]) == 2
    err = capsys.readouterr().err
    assert "group the pages differently" in err and "has pages in 2 groups of the crawl delays' hosts" in err, err
    assert "www.site00.example" in err and "www.site01.example" in err, err  # a page of each part
    assert not (tmp_path / "x.csv").exists()


@pytest.mark.parametrize("ext", ["csv", "csv.gz"])
def test_blank_optional_cells_are_defaults_on_the_columnar_path_as_on_the_exact_one(tmp_path, monkeypatch, ext):
    """A spreadsheet's empty cells (nothing, spaces, a tab, NBSP) in optional columns are
    their defaults; the columnar reader keeps the file (no fallback) and gives the exact
    reader's table."""
    import jaxcrawl.io._tables as tables
    from jaxcrawl.io._problems import PAGE_TABLE
    from jaxcrawl.io._schema import RowLog

    text = ("page_id,importance,change_rate,complete,min_interval,max_interval\n"
            "a,1,0.5,,,\n"
            "b,2,0.25,1, ,14\n"
            'c,1.5,2,\t,0.5,""\n'
            "d,1,1,0,\xa0, \n")
    path = tmp_path / f"pages.{ext}"
    data = text.encode()
    path.write_bytes(gzip.compress(data) if ext.endswith(".gz") else data)
    assert _formats.read_arrow(str(path), PAGE_TABLE, RowLog(str(path), "raise")) is not None  # the fast path
    fast = jio.read_problem(str(path))
    # a blank cell of a required column is still refused, naming the line
    required = tmp_path / "required.csv"
    required.write_bytes(b"page_id,importance,change_rate\na,1,0.5\nb, ,1\n")
    with pytest.raises(ValueError, match=r"required.csv:3: .*importance"):
        jio.read_problem(str(required))
    monkeypatch.setattr(tables, "read_arrow", lambda *a, **k: None)
    exact = jio.read_problem(str(path))
    for name in ("page_id", "importance", "change_rate", "complete", "min_interval", "max_interval"):
        np.testing.assert_array_equal(getattr(fast, name), getattr(exact, name), err_msg=name)
    np.testing.assert_array_equal(fast.complete, [False, True, False, False])
    np.testing.assert_array_equal(fast.min_interval, [0.0, 0.0, 0.5, 0.0])
    np.testing.assert_array_equal(fast.max_interval, [np.inf, 14.0, np.inf, np.inf])


def test_a_page_url_urlsplit_refuses_is_named_by_the_host_readers(tmp_path):
    """A page id that looks like a URL but that ``urllib.parse.urlsplit`` refuses (an
    unclosed IPv6 bracket) is named with the way to give its host instead."""
    ids = np.asarray(["https://a.example/x", "https://[::1/y"], object)
    caps, delays = tmp_path / "caps.csv", tmp_path / "delays.csv"
    caps.write_text("host_id,cap\na.example,2\n")
    delays.write_text("host,crawl_delay\na.example,10\n")
    bad = re.escape("page 'https://[::1/y' is not a valid URL (Invalid IPv6 URL): its host is unknown")
    with pytest.raises(ValueError, match=bad + r".*--hosts FILE, or a line '# pages: FILE' in .*caps.csv"):
        jio.read_host_caps(str(caps), ids)
    with pytest.raises(ValueError, match=bad + r".*--hosts FILE"):
        jio.read_crawl_delays(str(delays), ids)
    # with a mapping the page's host comes from it and the URL is never parsed
    hosts = tmp_path / "hosts.csv"
    hosts.write_text("page_id,host_id\nhttps://a.example/x,a.example\nhttps://[::1/y,a.example\n")
    np.testing.assert_array_equal(jio.read_crawl_delays(str(delays), ids, pages_path=str(hosts))[0], [0, 0])
