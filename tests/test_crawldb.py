"""Histories from Nutch CrawlDb dumps (jaxcrawl.io.read_nutch_dumps) against the same fetches
written as a plain history table and read with read_histories."""
import datetime as dt
import gzip
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxcrawl.io import TableError, read_histories, read_nutch_dumps

DAY = 86400
T0 = 1_780_000_000  # 2026-05-28T20:26:40Z
NAMES = {1: "db_unfetched", 2: "db_fetched", 3: "db_gone", 4: "db_redir_temp", 5: "db_redir_perm",
         6: "db_notmodified", 7: "db_duplicate"}


def java_date(epoch_s: float, zone: str = "UTC", hours: float = 0.0) -> str:
    """Java's Date.toString() (EEE MMM dd HH:mm:ss zzz yyyy) in a zone ``hours`` east of UTC."""
    t = dt.datetime.fromtimestamp(epoch_s + hours * 3600, dt.timezone.utc)
    return t.strftime(f"%a %b %d %H:%M:%S {zone} %Y")


def java_float(v: float) -> str:
    """Java's Float.toString of an integral value (scientific from 1e7 on)."""
    if v < 1e7:
        return f"{v:.1f}"
    e = int(math.floor(math.log10(v)))
    return f"{repr(v / 10 ** e)}E{e}"


def text_record(url, status, fetch, interval, sig="null", meta=(), retries=0, zone="UTC", hours=0.0):
    """One record as CrawlDbReader -dump writes it: URL TAB CrawlDatum.toString() LF."""
    out = (f"{url}\tVersion: 7\nStatus: {status} ({NAMES[status]})\nFetch time: {java_date(fetch, zone, hours)}\n"
           f"Modified time: {java_date(0)}\nRetries since fetch: {retries}\n"
           f"Retry interval: {interval} seconds ({interval // DAY} days)\nScore: 1.0\nSignature: {sig}\nMetadata: \n ")
    for k, v in meta:
        out += f"\t{k}={v}\n"
    return out + "\n"


def csv_record(url, status, fetch, interval, sig="null", meta=(), retries=0, zone="UTC", hours=0.0):
    """One line of -format csv."""
    return (f'"{url}",{status},"{NAMES[status]}",{java_date(fetch, zone, hours)},{java_date(0)},{retries},'
            f'{java_float(float(interval))},{java_float(float(interval // DAY))},1.0,"{sig}",'
            f'"{"".join(f"{k}:{v}|||" for k, v in meta)}"\n')


CSV_HEADER = ("Url,Status code,Status name,Fetch Time,Modified Time,Retries since fetch,Retry interval seconds,"
              "Retry interval days,Score,Signature,Metadata\n")


def simulate(seed: int, pages: int = 40, days: int = 12):
    """Dumps (one per day: the records) and the history table of the same fetches.

    Each page is fetched at irregular times (a fetch before a dump is seen in it); its
    content changes at random; some pages are first seen mid-way, some fail a day
    (retried, unfetched), some redirect or are gone."""
    rng = np.random.default_rng(seed)
    dumps = [[] for _ in range(days)]
    rows = []
    for p in range(pages):
        url = f"http://h{p % 7}.example.com/p{p}?q=a,b"
        start = int(rng.integers(0, days // 2))
        interval = int(rng.choice([DAY // 2, DAY, 2 * DAY, 3 * DAY, 200 * DAY]))
        version, last, next_fetch, prev_sig = 0, None, None, None
        kind = rng.choice(["ok", "ok", "ok", "redirect", "gone"])
        for d in range(start, days):
            dump_time = T0 + d * DAY
            fetched = next_fetch is None or next_fetch <= dump_time
            if kind != "ok":
                dumps[d].append((url, 4 if kind == "redirect" else 3, dump_time + interval, interval, "null"))
                continue
            if rng.random() < 0.1:  # a failed fetch: retried, then unfetched
                dumps[d].append((url, 1, dump_time + DAY, interval, prev_sig or "null", (), 1))
                next_fetch = None
                continue
            if fetched:
                fetch_at = dump_time - int(rng.integers(1, 3 * 3600))
                if rng.random() < 0.4:
                    version += 1
                sig = f"{version:032x}"
                if last is not None:
                    rows.append((url, (fetch_at - last) / DAY, int(sig != prev_sig)))
                last, prev_sig = fetch_at, sig
                next_fetch = fetch_at + interval
            status = 2 if fetched and rng.random() < 0.5 else 6 if not fetched else 2
            dumps[d].append((url, status, next_fetch, interval, prev_sig,
                             (("_pst_", "success(1), lastModified=0"), ("Content-Type", "text/html"))))
    return dumps, rows


def write_dumps(tmp_path, dumps, fmt="text", parts=1):
    """Each day's dump as a file (parts == 1) or a directory of part-r-NNNNN files."""
    paths = []
    for d, recs in enumerate(dumps):
        chunks = [recs[i::parts] for i in range(parts)]
        texts = [(CSV_HEADER if fmt == "csv" else "") + "".join(
            (csv_record if fmt == "csv" else text_record)(*r) for r in chunk) for chunk in chunks]
        if parts == 1:
            path = tmp_path / f"dump{d}.txt"
            path.write_text(texts[0])
        else:
            path = tmp_path / f"dump{d}"
            path.mkdir()
            (path / "_SUCCESS").write_text("")
            for i, t in enumerate(texts):
                name = f"part-r-{i:05d}"
                if i % 2:
                    with gzip.open(path / f"{name}.gz", "wt") as fh:
                        fh.write(t)
                else:
                    (path / name).write_text(t)
                (path / f".{name}.crc").write_bytes(b"\0\1")
        paths.append(path)
    return paths


def table_histories(tmp_path, rows):
    path = tmp_path / "table.csv"
    path.write_text("page_id,interval,changed\n" + "".join(f"\"{u}\",{i!r},{c}\n" for u, i, c in rows))
    return read_histories(path)


def assert_same(h, ref):
    order = {u: i for i, u in enumerate(ref.page_id)}
    assert sorted(h.page_id) == sorted(ref.page_id)
    for i, u in enumerate(h.page_id):
        j = order[u]
        got = slice(h.offsets[i], h.offsets[i + 1])
        want = slice(ref.offsets[j], ref.offsets[j + 1])
        np.testing.assert_allclose(h.obs_interval[got], ref.obs_interval[want], rtol=1e-12, atol=1e-9)
        np.testing.assert_array_equal(h.obs_changed[got], ref.obs_changed[want])


@pytest.mark.parametrize("seed,fmt,parts", [(0, "text", 1), (1, "text", 3), (2, "csv", 1), (3, "csv", 2)])
def test_histories_equal_the_table_of_the_same_fetches(tmp_path, seed, fmt, parts):
    dumps, rows = simulate(seed)
    assert len(rows) > 30
    h = read_nutch_dumps(write_dumps(tmp_path, dumps, fmt, parts))
    assert_same(h, table_histories(tmp_path, rows))
    assert h.report.rows_read == sum(map(len, dumps)) and h.report.rows_skipped == 0
    assert not h.complete.any() and np.isnan(h.importance).all()


def test_pages_in_order_of_first_appearance_and_hours(tmp_path):
    dumps = [[("http://b/", 2, T0 + DAY, DAY, "01"), ("http://a/", 2, T0 + DAY, DAY, "01")],
             [("http://a/", 2, T0 + 2 * DAY, DAY, "01"), ("http://b/", 2, T0 + 3 * DAY, DAY, "02")]]
    h = read_nutch_dumps(write_dumps(tmp_path, dumps), unit="hours")
    assert list(h.page_id) == ["http://b/", "http://a/"]
    np.testing.assert_allclose(h.obs_interval, [48.0, 24.0])
    np.testing.assert_array_equal(h.obs_changed, [True, False])


def test_statuses_without_a_fetch_give_no_reading(tmp_path):
    # day 0: fetched; day 1: redirect/gone/duplicate/unfetched/retried/no signature; day 2: fetched again
    others = [(4, "01", 0), (5, "01", 0), (3, "01", 0), (7, "01", 0), (1, "01", 0), (2, "01", 2), (2, "null", 0)]
    dumps = [[], [], []]
    for k, (status, sig, retries) in enumerate(others):
        u = f"http://x/{k}"
        dumps[0].append((u, 2, T0 + DAY, DAY, "01"))
        dumps[1].append((u, status, T0 + 5 * DAY + k, DAY, sig, (), retries))
        dumps[2].append((u, 6, T0 + 4 * DAY, DAY, "01"))
    h = read_nutch_dumps(write_dumps(tmp_path, dumps))
    assert len(h.page_id) == len(others)
    np.testing.assert_allclose(h.obs_interval, 3.0)  # day 0's fetch to day 2's, nothing in between
    assert not h.obs_changed.any()


def test_a_fetch_time_that_did_not_move_is_no_observation(tmp_path):
    # day 1 is the same fetch; day 2 an inject -update changed the interval, not the fetch time
    dumps = [[("http://a/", 2, T0 + DAY, DAY, "01")], [("http://a/", 6, T0 + DAY, DAY, "01")],
             [("http://a/", 2, T0 + DAY, 7 * DAY, "01")], [("http://a/", 2, T0 + 9 * DAY, 7 * DAY, "02")]]
    h = read_nutch_dumps(write_dumps(tmp_path, dumps))
    np.testing.assert_allclose(h.obs_interval, [2.0])  # fetched at T0 (1 day before T0 + DAY), then T0 + 2 days
    np.testing.assert_array_equal(h.obs_changed, [True])
    (tmp_path / "one").mkdir()
    single = read_nutch_dumps(write_dumps(tmp_path / "one", dumps[:1]))
    assert single.page_id.size == 0 and single.offsets.tolist() == [0]


def test_time_zones(tmp_path):
    recs = [[("http://a/", 2, T0 + DAY, DAY, "01", (), 0, "CEST", 2.0)],
            [("http://a/", 2, T0 + 3 * DAY, DAY, "02", (), 0, "GMT+05:30", 5.5)],
            [("http://a/", 2, T0 + 6 * DAY, DAY, "02", (), 0, "IST", 5.5)]]
    paths = write_dumps(tmp_path, recs)
    with pytest.raises(TableError, match=r"dump2\.txt:3: .*'IST' is not a zone"):
        read_nutch_dumps(paths)
    h = read_nutch_dumps(paths, zones={"IST": 5.5})
    np.testing.assert_allclose(h.obs_interval, [2.0, 3.0])
    np.testing.assert_array_equal(h.obs_changed, [True, False])


def test_malformed_records_name_the_file_line_and_rule(tmp_path):
    good = [text_record(f"http://a/{i}", 2, T0 + DAY, DAY, "01") for i in range(3)]
    bad = good[1].replace("Retry interval: 86400 seconds", "Retry interval: soon")
    path = tmp_path / "d.txt"
    path.write_text(good[0] + bad + good[2])
    # record 1 starts on line 11 (records of 10 lines); its Retry interval is its 6th line
    with pytest.raises(TableError, match=r"d\.txt:16: expected 'Retry interval: N seconds \(D days\)'") as err:
        read_nutch_dumps([path])
    assert err.value.line == 16
    h = read_nutch_dumps([path], errors="skip")
    assert h.report.rows_read == 2 and h.report.rows_skipped == 1
    assert h.report.skipped_by_reason == {"malformed record": 1}
    assert h.report.examples[0].startswith(f"{path}:16: ")
    path.write_text("# a comment\n" + good[0])
    with pytest.raises(TableError, match=r"d\.txt:1: expected 'URL<TAB>Version: N' \(a record's first line\)"):
        read_nutch_dumps([path])
    path.write_text(good[0].replace("Thu", "Xyz").replace("Fri", "Xyz").replace("May", "Mai"))
    with pytest.raises(TableError, match=r"d\.txt:3: .* is not a date"):
        read_nutch_dumps([path])


def test_out_of_order_dumps_and_repeated_urls(tmp_path):
    d0 = [("http://a/", 2, T0 + 3 * DAY, DAY, "01"), ("http://b/", 2, T0 + DAY, DAY, "01")]
    d1 = [("http://a/", 2, T0 + DAY, DAY, "02"), ("http://b/", 2, T0 + 2 * DAY, DAY, "02")]
    d2 = [("http://a/", 2, T0 + 5 * DAY, DAY, "03"), ("http://b/", 2, T0 + 4 * DAY, DAY, "02"),
          ("http://b/", 2, T0 + 4 * DAY, DAY, "02")]
    paths = write_dumps(tmp_path, [d0, d1, d2])
    with pytest.raises(TableError, match=r"dump1\.txt:1: 'http://a/': last fetch .* is not after"):
        read_nutch_dumps(paths[:2])
    with pytest.raises(TableError, match=r"dump2\.txt:21: 'http://b/' is in this dump twice"):
        read_nutch_dumps(paths)
    h = read_nutch_dumps(paths, errors="skip")
    assert h.report.skipped_by_reason == {"last fetch not after the previous": 1, "URL twice in a dump": 1}
    assert list(h.page_id) == ["http://a/", "http://b/"]
    np.testing.assert_allclose(h.obs_interval, [2.0, 1.0])  # a: day 0 to day 2 (day 1 left out); b: day 0 to 1
    np.testing.assert_array_equal(h.obs_changed, [True, True])


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="no such file"):
        read_nutch_dumps([tmp_path / "missing"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no part-"):
        read_nutch_dumps([tmp_path / "empty"])
    with pytest.raises(ValueError, match="errors must be"):
        read_nutch_dumps([tmp_path / "missing"], errors="ignore")
    with pytest.raises(ValueError, match="time unit"):
        read_nutch_dumps([tmp_path / "missing"], unit="fortnights")


def test_empty_dumps_and_stray_lines(tmp_path):
    (tmp_path / "e1.txt").write_text("")
    (tmp_path / "e2.txt").write_text("\n")
    h = read_nutch_dumps([tmp_path / "e1.txt", tmp_path / "e2.txt"])
    assert h.page_id.size == 0 and h.offsets.tolist() == [0] and h.report.rows_read == 0
    # blank lines between records are no data; a stray line is its record's error
    rec = [text_record(u, 2, T0 + DAY, DAY, "01") for u in ("http://a/", "http://b/")]
    path = tmp_path / "g.txt"
    path.write_text("\n\n" + rec[0] + "\n" + rec[1] + "junk\n")
    with pytest.raises(TableError, match=r"g\.txt:24: expected tab-indented key=value metadata lines"):
        read_nutch_dumps([path])
    h = read_nutch_dumps([path], errors="skip")
    assert h.report.rows_read == 1 and h.report.skipped_by_reason == {"malformed record": 1}


def reference_observations(dumps):
    """A plain sequential reading of the rules: per URL (in order of first appearance), dump
    by dump, a reading is a fetched/notmodified record with no retries and a signature; one
    whose fetch time equals the previous reading's is dropped; one whose last fetch is not
    after the last kept reading's is counted and dropped; otherwise it gives an observation."""
    order = []
    for recs in dumps:
        for r in recs:
            if r[0] not in order:
                order.append(r[0])
    out, back = {}, 0
    for url in order:
        prev_fetch, kept = None, None
        for recs in dumps:
            for u, status, fetch, interval, sig, _meta, retries in recs:
                if u != url or status not in (2, 6) or retries or sig == "null":
                    continue
                if fetch == prev_fetch:
                    continue
                prev_fetch = fetch
                last = fetch - interval
                if kept is not None and last <= kept[0]:
                    back += 1
                    continue
                if kept is not None:
                    out.setdefault(url, []).append(((last - kept[0]) / DAY, sig != kept[1]))
                kept = (last, sig)
    return out, back


RECORD = st.tuples(st.sampled_from(["http://a/", "http://b/", "http://c/"]), st.sampled_from([1, 2, 2, 3, 6, 6]),
                   st.integers(0, 12), st.sampled_from([DAY // 2, DAY, 3 * DAY]), st.sampled_from(["01", "02", "null"]),
                   st.just(()), st.sampled_from([0, 0, 0, 1]))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(RECORD, max_size=4, unique_by=lambda r: r[0]), min_size=1, max_size=5))
def test_any_sequence_of_dumps_follows_the_rules(tmp_path_factory, days):
    dumps = [[(u, s, T0 + k * DAY // 2, w, sig, m, r) for u, s, k, w, sig, m, r in recs] for recs in days]
    want, back = reference_observations(dumps)
    h = read_nutch_dumps(write_dumps(tmp_path_factory.mktemp("d"), dumps), errors="skip")
    assert list(h.page_id) == list(want)
    got = {u: list(zip(h.obs_interval[h.offsets[i]:h.offsets[i + 1]].tolist(),
                       h.obs_changed[h.offsets[i]:h.offsets[i + 1]].tolist())) for i, u in enumerate(h.page_id)}
    assert got == want
    assert h.report.skipped_by_reason == ({"last fetch not after the previous": back} if back else {})
