"""Histories from crawl archives (:func:`jaxcrawl.io.read_cdx`, :func:`jaxcrawl.io.read_warc`,
``jaxcrawl estimate --from-cdx/--from-warc``).

The plain reference: the same captures paired page by page in Python by the documented rules,
written as a history table and read with :func:`jaxcrawl.io.read_histories`.
"""
from __future__ import annotations

import base64
import csv
import gzip
import hashlib
import importlib.util
import io
import json
import random
import sys
import time
from typing import NamedTuple

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jaxcrawl.io import TableError, read_cdx, read_histories, read_warc

from helpers import expect_cli_error, run_cli

T0 = 1_704_067_200  # 2024-01-01T00:00:00Z
DAY = 86400.0


class Cap(NamedTuple):
    surt: str
    url: str
    time: int  # epoch seconds
    status: str = "200"
    digest: str = "A"  # a payload name; "-": none
    revisit: bool = False


def page(i: int) -> tuple[str, str]:
    return f"com,example)/p/{i}", f"http://example.com/p/{i}"


def cap(i: int, day: float, status: str = "200", digest: str = "A", revisit: bool = False) -> Cap:
    surt, url = page(i)
    return Cap(surt, url, T0 + int(round(day * DAY)), status, digest, revisit)


def sha1(name: str) -> str:
    return "sha1:" + base64.b32encode(hashlib.sha1(name.encode()).digest()).decode()


def stamp(t: int) -> str:
    return time.strftime("%Y%m%d%H%M%S", time.gmtime(t))


def cdxj_line(c: Cap, layout: str = "pywb") -> str:
    mime = "warc/revisit" if c.revisit else "text/html"
    digest = c.digest if c.digest == "-" else sha1(c.digest)
    if layout == "pywb":
        obj = {"url": c.url, "mime": mime, "status": c.status, "digest": digest, "length": "100",
               "offset": "0", "filename": "a.warc.gz"}
    elif layout == "cc":
        obj = {"url": c.url, "mime": mime, "mime-detected": mime, "status": c.status, "digest": digest,
               "length": "100", "offset": "0", "filename": "crawl-data/x.warc.gz", "languages": "eng"}
    else:  # another key order, parsed by the line parser
        obj = {"digest": digest, "status": c.status, "filename": "x", "mime": mime, "url": c.url}
    return f"{c.surt} {stamp(c.time)} {json.dumps(obj)}"


def cdx_line(c: Cap) -> str:
    mime = "warc/revisit" if c.revisit else "text/html"
    digest = c.digest if c.digest == "-" else sha1(c.digest)
    return f"{c.surt} {stamp(c.time)} {c.url} {mime} {c.status} {digest} - - 100 0 a.warc.gz"


CDX_HEADER = " CDX N b a m s k r M S V g"


def write_text(path, lines: list[str]) -> str:
    data = ("\n".join(lines) + "\n").encode()
    if str(path).endswith(".gz"):
        data = gzip.compress(data)
    path.write_bytes(data)
    return str(path)


def reference(caps: list[Cap], unit: float = DAY) -> list[tuple[str, float, int]]:
    """History rows ``(page_id, interval, changed)`` of the captures, page by page, by the rules."""
    pages: dict[str, list[Cap]] = {}
    for c in caps:
        pages.setdefault(c.surt, []).append(c)
    rows = []
    for cs in pages.values():
        ok = [c for c in cs if c.status == "200" or (c.revisit and c.status in ("-", "304"))]
        ok.sort(key=lambda c: (c.time, c.revisit, c.digest == "-"))
        kept, digests = [], []
        for c in ok:
            if kept and kept[-1].time == c.time:
                continue  # one capture per time
            d = c.digest
            if d == "-":
                if not digests:
                    continue  # a revisit with nothing to repeat
                d = digests[-1]
            kept.append(c)
            digests.append(d)
        if len(kept) < 2:
            continue
        pid = min(ok, key=lambda c: c.time).url
        for j in range(1, len(kept)):
            rows.append((pid, (kept[j].time - kept[j - 1].time) / unit, int(digests[j] != digests[j - 1])))
    return rows


def reference_histories(tmp_path, caps: list[Cap], unit: float = DAY):
    if not reference(caps, unit):
        return None  # no observation
    path = tmp_path / "reference.csv"
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["page_id", "interval", "changed"])
        for pid, iv, ch in reference(caps, unit):
            w.writerow([pid, repr(iv), ch])
    return read_histories(path)


def by_page(h) -> dict:
    if h is None:
        return {}
    return {str(h.page_id[i]): (h.obs_interval[h.offsets[i]:h.offsets[i + 1]].astype(np.float64),
                                h.obs_changed[h.offsets[i]:h.offsets[i + 1]])
            for i in range(h.page_id.size)}


def assert_same(h, ref) -> None:
    a, b = by_page(h), by_page(ref)
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_allclose(a[k][0], b[k][0], rtol=1e-12, err_msg=k)
        np.testing.assert_array_equal(a[k][1], b[k][1], err_msg=k)
    assert h.offsets[-1] == h.obs_interval.size == h.obs_changed.size == sum(v[0].size for v in a.values())
    assert np.all(np.isnan(h.importance)) and not h.complete.any()


def mixed_captures() -> list[Cap]:
    """Three pages over four crawls, with redirects, errors, revisits and a page first seen
    mid-way."""
    return [
        cap(0, 0, digest="A"), cap(0, 1, status="301", digest="R"), cap(0, 2, digest="A"),
        cap(0, 3, status="404", digest="E"), cap(0, 4.5, digest="B"), cap(0, 6, status="-", digest="-",
                                                                          revisit=True),
        cap(1, 0.25, digest="X"), cap(1, 1.25, digest="X", revisit=True), cap(1, 2.25, status="503", digest="-"),
        cap(1, 3.25, digest="Y"),
        cap(2, 3.5, digest="P"), cap(2, 5.5, digest="Q"), cap(2, 7, digest="Q"),
    ]


# --------------------------------------------------------------------- CDXJ and CDX against the reference
@pytest.mark.parametrize("layout", ["pywb", "cc", "other"])
def test_cdxj_equals_reference(tmp_path, layout):
    caps = mixed_captures()
    f = write_text(tmp_path / "index.cdxj", [cdxj_line(c, layout) for c in sorted(caps)])
    h = read_cdx(f)
    assert_same(h, reference_histories(tmp_path, caps))
    assert h.report.rows_read == len(caps)
    assert h.report.captures["redirect"] == 1 and h.report.captures["error"] == 2


def test_classic_cdx_with_and_without_header(tmp_path):
    caps = mixed_captures()
    ref = reference_histories(tmp_path, caps)
    lines = [cdx_line(c) for c in sorted(caps)]
    with_header = read_cdx(write_text(tmp_path / "a.cdx", [CDX_HEADER] + lines))
    assert with_header.report.header_lines == 1
    assert_same(with_header, ref)
    assert_same(read_cdx(write_text(tmp_path / "b.cdx", lines)), ref)
    # the header names the order: fields moved around
    moved = [" CDX b N s k a m"] + [" ".join(np.array(ln.split())[[1, 0, 4, 5, 2, 3]]) for ln in lines]
    assert_same(read_cdx(write_text(tmp_path / "c.cdx", moved)), ref)


def test_redirects_and_errors_do_not_break_the_interval(tmp_path):
    caps = [cap(0, 0, digest="A"), cap(0, 1, "301"), cap(0, 2, "404"), cap(0, 3, "500"), cap(0, 4, "-", "-"),
            cap(0, 5, digest="B")]
    h = read_cdx(write_text(tmp_path / "i.cdxj", [cdxj_line(c) for c in caps]))
    np.testing.assert_allclose(h.obs_interval, [5.0])
    assert h.obs_changed.tolist() == [True]
    assert h.report.captures == {**h.report.captures, "ok": 2, "redirect": 1, "error": 3}


def test_revisits(tmp_path):
    caps = [cap(0, 0, digest="A"), cap(0, 1, "-", "A", True), cap(0, 2, digest="B"), cap(0, 3, "-", "A", True),
            cap(0, 4, "-", "-", True), cap(0, 5, "304", "-", True),
            cap(1, 0, "-", "-", True), cap(1, 1, digest="C"), cap(1, 2, "-", "-", True)]
    h = read_cdx(write_text(tmp_path / "r.cdxj", [cdxj_line(c) for c in caps]))
    got = by_page(h)
    # a revisit repeats the digest it names (A after B: a change), or the previous success's
    assert got[page(0)[1]][1].tolist() == [False, True, True, False, False]
    assert got[page(1)[1]][1].tolist() == [False]
    assert h.report.captures["revisit_without_reference"] == 1  # page 1's first capture repeats nothing
    assert_same(h, reference_histories(tmp_path, caps))


def test_one_capture_per_time(tmp_path):
    caps = [cap(0, 0, digest="A"), cap(0, 0, digest="A"), cap(0, 1, digest="A"), cap(0, 1, "-", "A", True),
            cap(0, 2, digest="B")]
    h = read_cdx(write_text(tmp_path / "d.cdxj", [cdxj_line(c) for c in caps]))
    np.testing.assert_allclose(h.obs_interval, [1.0, 1.0])
    assert h.obs_changed.tolist() == [False, True]
    assert h.report.captures["duplicate"] == 2 and h.report.captures["same_time_conflicts"] == 0
    # different digests at one second: one of them is kept (one observation), and the conflict counted
    caps = [cap(0, 0, digest="A"), cap(0, 1, digest="A"), cap(0, 1, digest="B")]
    h = read_cdx(write_text(tmp_path / "e.cdxj", [cdxj_line(c) for c in caps]))
    assert h.obs_interval.size == 1 and h.report.captures["same_time_conflicts"] == 1
    again = read_cdx(write_text(tmp_path / "f.cdxj", [cdxj_line(c) for c in caps[::-1]]))
    assert again.obs_changed.tolist() == h.obs_changed.tolist()  # the same one, whatever the order


def test_out_of_order_several_files_gz_first_seen_mid_way(tmp_path):
    caps = mixed_captures()
    ref = reference_histories(tmp_path, caps)
    shuffled = caps[:]
    random.Random(3).shuffle(shuffled)
    assert_same(read_cdx(write_text(tmp_path / "s.cdxj", [cdxj_line(c) for c in shuffled])), ref)
    crawls = [[c for c in caps if k <= (c.time - T0) / DAY < k + 2] for k in (0, 2, 4, 6)]
    files = [write_text(tmp_path / f"crawl{k}.cdxj.gz", [cdxj_line(c, "cc") for c in sorted(cs)])
             for k, cs in enumerate(crawls)]
    h = read_cdx(files[::-1])
    assert_same(h, ref)
    # page 2 is first seen in the third crawl: its history starts at its first capture
    assert by_page(h)[page(2)[1]][0].tolist() == [2.0, 1.5]
    assert h.source == ", ".join(files[::-1])


def test_pages_ordered_by_first_success_and_named_by_its_url(tmp_path):
    caps = [cap(0, 2, digest="A"), cap(0, 3, digest="A"),
            Cap("com,example)/p/1", "https://www.example.com/p/1", T0, "200", "A"),
            Cap("com,example)/p/1", "http://example.com/p/1", T0 + 60, "200", "B")]
    h = read_cdx(write_text(tmp_path / "o.cdxj", [cdxj_line(c) for c in sorted(caps)]))
    assert h.page_id.tolist() == ["https://www.example.com/p/1", page(0)[1]]
    np.testing.assert_allclose(h.obs_interval, [60 / DAY, 1.0])


def test_time_unit_and_dtype(tmp_path):
    caps = [cap(0, 0), cap(0, 0.5, digest="B")]
    f = write_text(tmp_path / "u.cdxj", [cdxj_line(c) for c in caps])
    assert read_cdx(f, unit="hours").obs_interval.tolist() == [12.0]
    assert read_cdx(f, unit="seconds", dtype=np.float32).obs_interval.dtype == np.float32
    with pytest.raises(ValueError, match="time unit"):
        read_cdx(f, unit="fortnights")


def test_small_blocks_long_lines_and_escapes(tmp_path):
    """Lines across block edges, URLs longer than the first prefix searched, JSON escapes."""
    caps = []
    for i in range(40):
        surt, url = page(i)
        if i % 3 == 0:
            surt, url = surt + "/" + "x" * (300 + 20 * i), url + "/" + "x" * (300 + 20 * i)
        if i % 7 == 0:
            url = url + '?q="quoted"'
        caps += [Cap(surt, url, T0 + 3600 * k, "200", "AB"[(i + k) % 3 == 0]) for k in range(4)]
    lines = [cdxj_line(c) for c in caps]
    ref = reference_histories(tmp_path, caps)
    f = write_text(tmp_path / "long.cdxj", lines)
    assert_same(read_cdx(f), ref)
    assert_same(read_cdx(f, block_bytes=1024), ref)
    assert_same(read_cdx(write_text(tmp_path / "long.cdxj.gz", lines), block_bytes=1500), ref)


def test_blank_and_meta_lines(tmp_path):
    caps = mixed_captures()
    lines = ["!meta 0 {\"format\": \"cdxj-gzip-1.0\"}", ""] + [cdxj_line(c) for c in caps] + ["", "\r"]
    h = read_cdx(write_text(tmp_path / "m.cdxj", [ln.rstrip("\r") + ("\r" if i % 2 else "")
                                                   for i, ln in enumerate(lines)]))
    assert_same(h, reference_histories(tmp_path, caps))
    assert h.report.header_lines == 1 and h.report.blank_lines == 3


@pytest.mark.parametrize("bad,needle", [
    ('com,example)/a 2024010100000 {"url": "u", "status": "200", "digest": "d"}', "timestamp must be 14 digits"),
    ('com,example)/a 20241301000000 {"url": "u", "status": "200", "digest": "d"}', "not a valid date"),
    ('com,example)/a 20240101000000 {"url": "u", "status": "2000", "digest": "d"}', "3-digit HTTP status"),
    ('com,example)/a 20240101000000 {"url": "u", "status": "200", "digest": "-"}', "payload digest"),
    ('com,example)/a 20240101000000 {"url": "u", "status": "200", "digest": "d"', "does not parse"),
    ('com,example)/a 20240101000000 {"status": "200", "digest": "d"}', "no url"),
    ("com,example)/a 20240101000000", "SURTKEY TIMESTAMP {json}"),
])
def test_malformed_lines(tmp_path, bad, needle):
    good = [cdxj_line(c) for c in mixed_captures()]
    f = write_text(tmp_path / "bad.cdxj", good[:4] + [bad] + good[4:])
    with pytest.raises(TableError, match=needle) as err:
        read_cdx(f)
    assert str(err.value).startswith(f"{f}:5: ")
    h = read_cdx(f, errors="skip")
    assert h.report.rows_skipped == 1 and sum(h.report.skipped_by_reason.values()) == 1
    assert h.report.examples[0].startswith(f"{f}:5: ")
    assert_same(h, reference_histories(tmp_path, mixed_captures()))


def test_classic_cdx_field_count_and_header(tmp_path):
    lines = [CDX_HEADER] + [cdx_line(c) for c in mixed_captures()]
    f = write_text(tmp_path / "n.cdx", lines[:3] + [lines[3] + " extra"] + lines[4:])
    with pytest.raises(TableError, match=r":4: expected 11 space-separated fields"):
        read_cdx(f)
    with pytest.raises(TableError, match="lacks the field letters k"):
        read_cdx(write_text(tmp_path / "h.cdx", [" CDX N b a m s"] + lines[1:]))
    with pytest.raises(ValueError, match="no such file"):
        read_cdx(tmp_path / "missing.cdxj")


# --------------------------------------------------------------------- a property: order and files do not matter
@st.composite
def captures(draw):
    out = []
    for i in range(draw(st.integers(1, 4))):
        times = draw(st.lists(st.integers(0, 50), min_size=1, max_size=6, unique=True))
        for t in times:
            revisit = draw(st.booleans()) and draw(st.booleans())
            status = draw(st.sampled_from(["-", "200"] if revisit else ["200", "200", "200", "301", "404", "-"]))
            digest = draw(st.sampled_from(["A", "B", "-"] if revisit else ["A", "B", "C"]))
            out.append(cap(i, t / 4, status, digest, revisit))
    return out


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(caps=captures(), seed=st.integers(0, 2**16), files=st.integers(1, 3))
def test_shuffled_lines_and_split_files_give_the_same_histories(tmp_path, caps, seed, files):
    ref = reference_histories(tmp_path, caps)
    lines = [cdxj_line(c, "cc") for c in caps]
    random.Random(seed).shuffle(lines)
    parts = [write_text(tmp_path / f"part{k}.cdxj", lines[k::files]) for k in range(files)]
    h = read_cdx(parts)
    assert_same(h, ref)
    assert h.page_id.tolist() == read_cdx(write_text(tmp_path / "all.cdxj", sorted(lines))).page_id.tolist()


# --------------------------------------------------------------------- WARC
def write_warc(path, caps: list[Cap], drop_digest: frozenset = frozenset()) -> str:
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    with open(path, "wb") as fh:
        w = WARCWriter(fh, gzip=str(path).endswith(".gz"))
        for j, c in enumerate(caps):
            date = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(c.time))
            http = None if c.status == "-" else StatusAndHeaders(f"{c.status} X", [("Content-Type", "text/html")],
                                                                   protocol="HTTP/1.1")
            if c.revisit:
                rec = w.create_revisit_record(c.url, sha1(c.digest) if c.digest != "-" else "x", c.url, date,
                                              http_headers=http, warc_headers_dict={"WARC-Date": date})
                if c.digest == "-":
                    rec.rec_headers.remove_header("WARC-Payload-Digest")
            else:
                rec = w.create_warc_record(c.url, "response", payload=io.BytesIO(c.digest.encode()),
                                           http_headers=http, warc_headers_dict={"WARC-Date": date})
                if j in drop_digest:
                    rec.rec_headers.remove_header("WARC-Payload-Digest")
            w.write_record(rec)
        w.write_record(w.create_warc_record("http://example.com/", "request", payload=io.BytesIO(b"GET /")))
    return str(path)


def test_warc_equals_reference_and_cdx(tmp_path):
    pytest.importorskip("warcio")
    caps = [c for c in mixed_captures() if c.status != "-" or c.revisit]
    ref = reference_histories(tmp_path, caps)
    half = len(caps) // 2
    files = [write_warc(tmp_path / "a.warc.gz", caps[:half], drop_digest=frozenset({0, 2})),
             write_warc(tmp_path / "b.warc", caps[half:])]
    h = read_warc(files)
    assert_same(h, ref)
    assert h.report.captures["request_records"] == 2
    assert_same(read_cdx(write_text(tmp_path / "same.cdxj", [cdxj_line(c) for c in caps])), h)


def test_warc_pages_are_surt_keys(tmp_path):
    pytest.importorskip("warcio")
    same = ["http://www.Example.com/a?b=1&a=2", "https://example.com:443/a?a=2&b=1", "http://example.com./a?a=2&b=1"]
    caps = [Cap("", url, T0 + 3600 * k, "200", "AB"[k % 2]) for k, url in enumerate(same)]
    caps += [Cap("", "http://example.com:8080/a?a=2&b=1", T0 + 60 + 3600 * k, "200", "A") for k in range(2)]
    h = read_warc(write_warc(tmp_path / "s.warc", caps))
    assert h.page_id.tolist() == [same[0], "http://example.com:8080/a?a=2&b=1"]
    assert h.obs_changed.tolist() == [True, True, False]


def test_warc_bad_date_and_missing_extra(tmp_path, monkeypatch):
    pytest.importorskip("warcio")
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    path = tmp_path / "bad.warc"
    with open(path, "wb") as fh:
        w = WARCWriter(fh, gzip=False)
        http = StatusAndHeaders("200 OK", [], protocol="HTTP/1.1")
        w.write_record(w.create_warc_record("http://example.com/", "response", payload=io.BytesIO(b"x"),
                                            http_headers=http, warc_headers_dict={"WARC-Date": "yesterday"}))
    with pytest.raises(TableError, match="record 1 .*WARC-Date must be ISO 8601"):
        read_warc(path)
    assert read_warc(path, errors="skip").report.rows_skipped == 1
    monkeypatch.setitem(sys.modules, "warcio", None)
    with pytest.raises(ImportError, match=r'pip install "jaxcrawl\[archives\]"'):
        read_warc(path)


# --------------------------------------------------------------------- the command line
@pytest.mark.long
def test_cli_from_cdx_equals_estimate_on_the_history_table(tmp_path):
    caps = mixed_captures() + [cap(3, d, digest="AAB"[d % 3]) for d in range(9)]
    ref = tmp_path / "ref.csv"
    with open(ref, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["page_id", "interval", "changed"])
        w.writerows(reference(caps))
    a = write_text(tmp_path / "a.cdxj", [cdxj_line(c) for c in caps[::2]])
    b = write_text(tmp_path / "b.cdx.gz", [CDX_HEADER] + [cdx_line(c) for c in caps[1::2]])
    out, out_ref = tmp_path / "est.csv", tmp_path / "est_ref.csv"
    code, stdout, _ = run_cli(["estimate", "--from-cdx", a, b, "--output", out, "--x64"])
    assert code == 0
    summary = json.loads(stdout.strip().splitlines()[-1])
    assert summary["source"] == "from-cdx" and summary["time_unit"] == "days"
    assert summary["captures"]["redirect"] == 1
    assert run_cli(["estimate", ref, "--output", out_ref, "--x64"])[0] == 0
    got = {r["page_id"]: r for r in csv.DictReader(open(out))}
    want = {r["page_id"]: r for r in csv.DictReader(open(out_ref))}
    assert got.keys() == want.keys() and len(got) == 4
    for k in got:
        assert float(got[k]["change_rate"]) == pytest.approx(float(want[k]["change_rate"]), rel=1e-9)
        assert got[k]["num_observations"] == want[k]["num_observations"]
    rates = {}
    for unit in ("days", "hours"):  # the MLE's rate is per --time-unit
        path = tmp_path / f"{unit}.csv"
        argv = ["estimate", "--from-cdx", a, b, "--time-unit", unit, "--estimator", "mle", "-o", path, "--x64"]
        assert run_cli(argv)[0] == 0
        rates[unit] = {r["page_id"]: float(r["change_rate"]) for r in csv.DictReader(open(path))}
    k = page(3)[1]
    assert rates["hours"][k] == pytest.approx(rates["days"][k] / 24, rel=1e-6)
    if importlib.util.find_spec("warcio") is not None:  # the same captures as WARC records
        warc = write_warc(tmp_path / "all.warc.gz", [c for c in caps if c.status != "-" or c.revisit])
        from_warc = tmp_path / "warc.csv"
        assert run_cli(["estimate", "--from-warc", warc, "--output", from_warc, "--x64"])[0] == 0
        assert {r["page_id"]: r["change_rate"] for r in csv.DictReader(open(from_warc))} == {
            k: r["change_rate"] for k, r in got.items()}


def test_cli_sources(tmp_path):
    a = write_text(tmp_path / "a.cdxj", [cdxj_line(c) for c in mixed_captures()])
    expect_cli_error(["estimate"], "one source", "--from-cdx", "got none")
    expect_cli_error(["estimate", a, "--from-cdx", a], "got INPUT and --from-cdx")
    expect_cli_error(["estimate", "--from-cdx", a, "--from-warc", a], "--from-cdx and --from-warc")
    expect_cli_error(["estimate", a, "--time-unit", "hours"], "--time-unit applies to --from-cdx")
    expect_cli_error(["estimate", "--from-cdx", a, "-o", a], a)
    bad = write_text(tmp_path / "bad.cdxj", [cdxj_line(c) for c in mixed_captures()] + ["x 1 {}"])
    expect_cli_error(["estimate", "--from-cdx", bad], f"{bad}:14:", "--errors skip")
    code, stdout, _ = run_cli(["estimate", "--from-cdx", bad, "--errors", "skip"])
    assert code == 0 and json.loads(stdout.strip().splitlines()[-1])["rows_skipped"] == 1


def test_cli_from_nutch_dumps_reads_what_read_nutch_dumps_reads(tmp_path):
    from jaxcrawl.io import read_nutch_dumps

    def record(url, fetch, sig):
        date = time.strftime("%a %b %d %H:%M:%S UTC %Y", time.gmtime(fetch))
        return (f"{url}\tVersion: 7\nStatus: 2 (db_fetched)\nFetch time: {date}\n"
                f"Modified time: Thu Jan 01 00:00:00 UTC 1970\nRetries since fetch: 0\n"
                f"Retry interval: 86400 seconds (1 days)\nScore: 1.0\nSignature: {sig}\nMetadata: \n \n")

    dumps = []
    for k, sig in enumerate(["aa", "aa", "bb"]):
        path = tmp_path / f"dump{k}"
        path.write_text(record("http://example.com/a", T0 + k * 43200, sig)
                        + record("http://example.com/b", T0 + k * 86400, sig))
        dumps.append(str(path))
    h = read_nutch_dumps(dumps, unit="hours")
    out = tmp_path / "est.csv"
    code, stdout, _ = run_cli(["estimate", "--from-nutch-dumps", *dumps, "--time-unit", "hours", "-o", out,
                               "--estimator", "naive"])
    assert code == 0 and json.loads(stdout.strip().splitlines()[-1])["source"] == "from-nutch-dumps"
    rows = list(csv.DictReader(open(out)))
    assert [r["page_id"] for r in rows] == h.page_id.tolist()
    assert [int(r["num_observations"]) for r in rows] == h.num_observations.tolist()
    for r, i in zip(rows, range(len(rows))):
        iv, ch = h.obs_interval[h.offsets[i]:h.offsets[i + 1]], h.obs_changed[h.offsets[i]:h.offsets[i + 1]]
        assert float(r["change_rate"]) == pytest.approx(max(ch.sum() / iv.sum(), 1e-9), rel=1e-5)
