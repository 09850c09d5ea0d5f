"""Tests for jaxcrawl.dataset (the NeurIPS-19 data set loader) and `jaxcrawl estimate`.

Every test writes its own small files in the data set's tab-separated format.
"""
import argparse
import csv
import json
import os

import numpy as np
import pytest

from jaxcrawl import estimators as E
from jaxcrawl.cli import _estimate as cli_estimate
from jaxcrawl.io import CrawlDataset, load_crawl_dataset

FILES = CrawlDataset.FILES


def write_dataset(d, *, urls=None, hosts=None, imp=None, hist=None, comp=None):
    """Write the five files (None -> a small default; False -> leave the file out)."""
    os.makedirs(d, exist_ok=True)
    defaults = {
        "urls": ["http://a.com/x\t5\t1", "http://b.com/y\t7\t2", "http://a.com/z\t9\t1", "http://c.com/\t3\t4"],
        "hosts": ["http://a.com\t1\t1", "http://b.com\t2\t0"],
        "importance": ["5\t1.5", "7\t0.25", "9\t3", "11\t2", "3\t0"],
        "history": [
            "5\t5.5143\t[[1.10396990740741, 0], [1.47311342592593, 1], [2.0, 1]]",
            "7\t0.5\t[]",
            "12\t1\t[[1, 1]]",
            "3\t2.25\t[[0.5, 1], [0.25, 0]]",
        ],
        "complete": ["9\t0.7", "13\t0.1"],
    }
    given = {"urls": urls, "hosts": hosts, "importance": imp, "history": hist, "complete": comp}
    for role, lines in given.items():
        path = os.path.join(d, FILES[role])
        if lines is False:
            if os.path.exists(path):
                os.remove(path)
            continue
        lines = defaults[role] if lines is None else lines
        with open(path, "w") as fh:
            fh.write("".join(line + "\n" for line in lines))
    return d


def test_loads_and_joins_the_tables(tmp_path):
    ds = load_crawl_dataset(write_dataset(str(tmp_path)), dtype=np.float64)
    np.testing.assert_array_equal(ds.url_id, [3, 5, 7, 9, 11])  # importance file, sorted
    np.testing.assert_array_equal(ds.importance, [0, 1.5, 0.25, 3, 2])
    np.testing.assert_array_equal(ds.offset, [2.25, 5.5143, 0.5, 0, 0])
    np.testing.assert_array_equal(ds.num_observations, [2, 3, 0, 0, 0])
    assert ds.intervals.shape == (5, 3) and ds.intervals.dtype == np.float64
    np.testing.assert_array_equal(ds.intervals[1], [1.10396990740741, 1.47311342592593, 2.0])
    np.testing.assert_array_equal(ds.changed[1], [False, True, True])
    np.testing.assert_array_equal(ds.mask[0], [True, True, False])
    np.testing.assert_array_equal(ds.intervals[0], [0.5, 0.25, 0.0])
    assert not ds.mask[2:].any()
    np.testing.assert_array_equal(ds.complete, [False, False, False, True, False])
    np.testing.assert_array_equal(np.isnan(ds.complete_change_rate), [True, True, True, False, True])
    assert ds.complete_change_rate[3] == 0.7
    np.testing.assert_array_equal(ds.host_id, [4, 1, 2, 1, -1])
    np.testing.assert_array_equal(ds.host_constrained, [False, True, False, True, False])
    rep = ds.report
    assert rep.files["importance"].rows_read == 5 and rep.files["history"].rows_read == 4
    assert rep.rows_skipped == 0 and rep.missing_files == ()
    assert rep.joins["history_without_importance"] == 1  # URL 12
    assert rep.joins["complete_without_importance"] == 1  # URL 13
    assert rep.joins["pages_without_history"] == 2  # 9 and 11 (7 has an empty history row)
    assert rep.joins["pages_without_host"] == 1  # 11
    assert rep.joins["hosts_without_constraint_row"] == 1  # host 4
    assert "urlid_imp.txt: read 5 rows" in rep.summary()
    # The histories feed the estimators directly.
    r = E.mle(ds.intervals, ds.changed, ds.mask, min_rate=1e-3, max_rate=10.0)
    assert r.shape == (5,) and np.all(np.isfinite(r))


def test_default_dtype_is_float32(tmp_path):
    ds = load_crawl_dataset(write_dataset(str(tmp_path)))
    assert ds.intervals.dtype == np.float32


@pytest.mark.parametrize(
    "role, line, reason",
    [
        ("history", "5\t1.0\t[[1.0, 0], [2.0, 2]]", "bad change indicator"),
        ("history", "5\t1.0\t[[1.0, 0], [-2.0, 1]]", "bad interval"),
        ("history", "5\t1.0\t[[1.0, 0], [0, 1]]", "bad interval"),
        ("history", "5\t1.0\t[[1.0, 0], [NaN, 1]]", "bad interval"),
        ("history", "5\t1.0\t[[1.0, 0], [2.0, 1]", "bad history"),
        ("history", "5\t1.0\t[[1.0, 0, 3]]", "bad history"),
        ("history", "5\t1.0\t[[1.0, true]]", "bad change indicator"),
        ("history", "5\t1.0\t[[1.0, 0.5]]", "bad change indicator"),
        ("history", "5\t1.0\t[[\"1.0\", 0]]", "bad interval"),
        ("history", "5\t1.0\t[[1e999, 0]]", "bad interval"),
        ("history", "5\t1.0\t[[[1.0, 0], [2.0, 1]]]", "bad interval"),
        ("history", "5\t1.0\t{\"a\": 1}", "bad history"),
        ("history", "5\t1.0", "wrong number of fields"),
        ("history", "x5\t1.0\t[]", "bad URL_ID"),
        ("history", "5\tinf\t[]", "bad first-crawl offset"),
        ("importance", "5\tabc", "bad importance"),
        ("importance", "5\t-1", "bad importance"),
        ("complete", "9\t0.7\t3", "wrong number of fields"),
        ("hosts", "http://a.com\t1\t2", "bad Is_constrained"),
        ("urls", "http://a.com/x\t5", "wrong number of fields"),
    ],
)
def test_malformed_line_raises_with_file_and_line_or_is_counted(tmp_path, role, line, reason):
    defaults = {"history": ["7\t0.5\t[]"], "importance": ["7\t1"], "complete": ["7\t0.2"],
                "hosts": ["http://b.com\t2\t0"], "urls": ["http://b.com/y\t7\t2"]}
    lines = list(defaults[role])
    lines.insert(1, line)  # the bad line is line 2
    lines.append(defaults[role][0].replace("7", "8", 1) if role != "hosts" else "http://c.com\t3\t1")
    d = write_dataset(str(tmp_path), **{ {"history": "hist", "importance": "imp", "complete": "comp",
                                          "hosts": "hosts", "urls": "urls"}[role]: lines })
    with pytest.raises(ValueError) as err:
        load_crawl_dataset(d)
    msg = str(err.value)
    assert f"{FILES[role]}:2:" in msg
    ds = load_crawl_dataset(d, errors="skip")
    fr = ds.report.files[role]
    assert fr.rows_skipped == 1 and fr.skipped_by_reason == {reason: 1}
    assert fr.rows_read == 2  # the good lines around it
    assert fr.examples[0].startswith(os.path.join(d, FILES[role]) + ":2:")


def test_duplicate_ids_are_malformed(tmp_path):
    d = write_dataset(str(tmp_path), imp=["5\t1", "7\t2", "5\t3"])
    with pytest.raises(ValueError, match=r"urlid_imp\.txt:3: duplicate URL_ID 5 \(first at line 1\)"):
        load_crawl_dataset(d)
    ds = load_crawl_dataset(d, errors="skip")
    assert ds.report.files["importance"].skipped_by_reason == {"duplicate URL_ID": 1}
    np.testing.assert_array_equal(ds.url_id, [5, 7])
    np.testing.assert_array_equal(ds.importance, [1, 2])  # the first occurrence wins


def test_skip_mode_accounts_for_every_line(tmp_path):
    rng = np.random.default_rng(0)
    hist, imp, n_bad = [], [], 0
    for uid in range(300):
        imp.append(f"{uid}\t{rng.uniform(0, 10):.6f}")
        if rng.random() < 0.1:
            hist.append(f"{uid}\t0\t[[1.0, 5]]")
            n_bad += 1
        else:
            k = rng.integers(0, 8)
            pairs = ", ".join(f"[{rng.uniform(0.1, 3):.5f}, {rng.integers(0, 2)}]" for _ in range(k))
            hist.append(f"{uid}\t{rng.uniform(0, 5):.4f}\t[{pairs}]")
    hist.insert(50, "")  # a blank line
    d = write_dataset(str(tmp_path), imp=imp, hist=hist)
    ds = load_crawl_dataset(d, errors="skip")
    fr = ds.report.files["history"]
    assert fr.rows_skipped == n_bad and fr.rows_read == 300 - n_bad and fr.blank_lines == 1
    assert fr.rows_read + fr.rows_skipped + fr.blank_lines == len(hist)
    assert ds.report.joins["pages_without_history"] == n_bad


def test_header_line_is_recognised_and_counted(tmp_path):
    d = write_dataset(str(tmp_path), imp=["URL_ID\tImportance_score", "5\t1", "7\t2"])
    ds = load_crawl_dataset(d)
    assert ds.report.files["importance"].header_lines == 1
    np.testing.assert_array_equal(ds.url_id, [5, 7])
    # A non-header garbage first line is an error, not silently treated as a header.
    d2 = write_dataset(str(tmp_path / "b"), imp=["5\tabc", "7\t2"])
    with pytest.raises(ValueError, match=r"urlid_imp\.txt:1:"):
        load_crawl_dataset(d2)


def test_missing_files(tmp_path):
    d = write_dataset(str(tmp_path), urls=False, hosts=False, comp=False)
    ds = load_crawl_dataset(d)
    assert set(ds.report.missing_files) == {FILES["urls"], FILES["hosts"], FILES["complete"]}
    assert np.all(ds.host_id == -1) and not ds.complete.any() and not ds.host_constrained.any()
    write_dataset(str(tmp_path), hist=False)
    with pytest.raises(ValueError, match="required file is missing"):
        load_crawl_dataset(d)
    with pytest.raises(ValueError, match="not a directory"):
        load_crawl_dataset(str(tmp_path / "nope"))
    with pytest.raises(ValueError, match="errors"):
        load_crawl_dataset(d, errors="ignore")


def test_max_observations_keeps_the_most_recent_and_moves_the_offset(tmp_path):
    d = write_dataset(str(tmp_path))
    ds = load_crawl_dataset(d, dtype=np.float64, max_observations=2)
    np.testing.assert_array_equal(ds.intervals[1], [1.47311342592593, 2.0])
    np.testing.assert_array_equal(ds.changed[1], [True, True])
    assert ds.offset[1] == pytest.approx(5.5143 + 1.10396990740741, rel=1e-14)
    assert ds.report.joins["truncated_histories"] == 1 and ds.report.joins["dropped_observations"] == 1
    np.testing.assert_array_equal(ds.num_observations, [2, 2, 0, 0, 0])


def test_round_trip_of_simulated_histories(tmp_path):
    """Histories written in the format come back exactly, and the MLE on them is the MLE."""
    rng = np.random.default_rng(1)
    n = 200
    xi = np.exp(rng.uniform(-2, 1, n))
    lengths = rng.integers(0, 30, n)
    rows, want = [], {}
    for uid in range(n):
        w = rng.exponential(1.0, lengths[uid]).round(6) + 1e-3
        c = rng.random(lengths[uid]) < -np.expm1(-xi[uid] * w)
        want[uid] = (w, c)
        rows.append(f"{uid}\t0\t" + json.dumps([[float(a), int(b)] for a, b in zip(w, c)]))
    d = write_dataset(str(tmp_path), imp=[f"{u}\t1" for u in range(n)], hist=rows, urls=False, hosts=False, comp=False)
    ds = load_crawl_dataset(d, dtype=np.float64)
    for i, uid in enumerate(ds.url_id):
        w, c = want[uid]
        np.testing.assert_array_equal(ds.intervals[i, : len(w)], w)
        np.testing.assert_array_equal(ds.changed[i, : len(c)], c)
        assert ds.num_observations[i] == len(w)
    # The padded histories give the same MLE as the same histories padded independently.
    k = ds.intervals.shape[1]
    w_ref = np.ones((n, k))
    c_ref = np.zeros((n, k), bool)
    m_ref = np.zeros((n, k), bool)
    for i, uid in enumerate(ds.url_id):
        w, c = want[uid]
        w_ref[i, : len(w)], c_ref[i, : len(c)], m_ref[i, : len(w)] = w, c, True
    r = np.asarray(E.mle(ds.intervals, ds.changed, ds.mask, min_rate=1e-3, max_rate=50.0))
    np.testing.assert_array_equal(r, E.mle(w_ref, c_ref, m_ref, min_rate=1e-3, max_rate=50.0))


# ----------------------------------------------------------------------------------------
# jaxcrawl estimate
# ----------------------------------------------------------------------------------------


def run_estimate(argv):
    parser = argparse.ArgumentParser(prog="jaxcrawl")
    cli_estimate.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["estimate"] + argv)
    return args.func(args)


def read_csv(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.mark.x64
def test_cli_estimate_from_dataset_directory(tmp_path, capsys):
    d = write_dataset(str(tmp_path / "ds"))
    out = str(tmp_path / "rates.csv")
    assert run_estimate([d, "-o", out, "--x64", "--estimator", "mle", "--min-rate", "0.01", "--max-rate", "10",
                         "--delta", "0.1"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["num_pages"] == 5 and summary["num_complete"] == 1
    rows = read_csv(out)
    assert [r["page_id"] for r in rows] == ["3", "5", "7", "9", "11"]
    ds = load_crawl_dataset(d, dtype=np.float64)
    want = np.array(E.mle(ds.intervals, ds.changed, ds.mask, min_rate=0.01, max_rate=10.0))
    want[3] = 0.7  # complete page keeps its given rate
    np.testing.assert_allclose([float(r["change_rate"]) for r in rows], want, rtol=1e-9)
    hw3 = np.asarray(E.lemma3_halfwidth(ds.intervals, ds.mask, delta=0.1, min_rate=0.01, max_rate=10.0))
    np.testing.assert_allclose(float(rows[1]["half_width"]), hw3[1], rtol=1e-9)
    assert [int(r["num_observations"]) for r in rows] == [2, 3, 0, 0, 0]
    assert [int(r["complete"]) for r in rows] == [0, 0, 0, 1, 0]


def test_cli_problem_columns_feed_jaxcrawl_solve(tmp_path, capsys):
    import jaxcrawl.io

    d = write_dataset(str(tmp_path / "ds"))
    out = str(tmp_path / "problem.csv")
    assert run_estimate([d, "-o", out, "--columns", "problem"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["pages_left_out_nonpositive_importance"] == 1  # URL 3 has importance 0
    table = jaxcrawl.io.read_problem(out)
    assert list(table.page_id) == [5, 7, 9, 11]  # decimal ids read back as int64
    np.testing.assert_array_equal(table.complete, [False, False, True, False])
    assert np.all(table.change_rate > 0)


@pytest.mark.long
@pytest.mark.x64
def test_cli_estimate_from_history_csv(tmp_path, capsys):
    rng = np.random.default_rng(2)
    path = str(tmp_path / "h.csv")
    hist = {}
    with open(path, "w") as fh:
        fh.write("page_id,interval,changed,importance\n")
        for pid in ("a", "b", "c"):
            w = rng.exponential(1.0, 20).round(4) + 0.01
            c = rng.random(20) < 0.5
            hist[pid] = (w, c)
            for a, b in zip(w, c):
                fh.write(f"{pid},{a},{int(b)},2.5\n")
    out = str(tmp_path / "o.csv")
    assert run_estimate([path, "-o", out, "--estimator", "mle-smoothed", "--x64"]) == 0
    rows = read_csv(out)
    for r in rows:
        w, c = hist[r["page_id"]]
        assert float(r["change_rate"]) == pytest.approx(float(E.mle_smoothed(w, c)), rel=1e-9)
        assert float(r["importance"]) == 2.5
    # A malformed line names the file and the line.
    with open(path, "a") as fh:
        fh.write("d,-1,0,2.5\n")
    with pytest.raises(ValueError, match=r"h\.csv:62: interval must be finite and > 0"):
        run_estimate([path, "-o", out])
    assert run_estimate([path, "-o", out, "--errors", "skip"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["rows_skipped"] == 1 and summary["num_pages"] == 3


def test_cli_rejects_bad_arguments(tmp_path):
    d = write_dataset(str(tmp_path / "ds"))
    with pytest.raises(ValueError, match="--delta"):
        run_estimate([d, "--delta", "2"])
    with pytest.raises(ValueError, match="--max-rate"):
        run_estimate([d, "--min-rate", "1", "--max-rate", "0.5"])
    with pytest.raises(ValueError, match="--window"):
        run_estimate([d, "--estimator", "mle", "--window", "3"])
    with pytest.raises(ValueError, match="no such file"):
        run_estimate([str(tmp_path / "missing.csv")])


def test_columnar_loader_is_independent_of_block_size_and_spelling(tmp_path):
    """Blocks of any size (down to a few lines, cutting lines in half) give the same arrays;
    odd spellings (spaces, '+', CRLF, exponents) take the exact per-row parser and agree."""
    rng = np.random.default_rng(3)
    n = 300
    hist, imp = [], []
    for i in range(n):
        k = int(rng.integers(0, 6))
        pairs = ", ".join(f"[{rng.uniform(0.1, 3):.6g}, {int(rng.random() < 0.5)}]" for _ in range(k))
        sep = "\t" if i % 7 else " \t"  # a trailing space on the id: the exact parser's path
        hist.append(f"{i}{sep}{rng.uniform(0, 5):.5g}\t[{pairs}]" + ("\r" if i % 11 == 0 else ""))
        imp.append(f"{i}\t{'+' if i % 13 == 0 else ''}{rng.lognormal():.6e}")
    d = write_dataset(str(tmp_path / "d"), imp=imp, hist=hist, urls=False, hosts=False, comp=False)
    big = load_crawl_dataset(d, dtype=np.float64)
    small = load_crawl_dataset(d, dtype=np.float64, block_size=97)
    for a, b in zip(big[:-1], small[:-1]):
        np.testing.assert_array_equal(a, b)
    assert big.report.files["history"].rows_read == n and big.num_observations.sum() == big.mask.sum()
    # each page's history is its line's pairs, in order
    i = 17
    pairs = json.loads(hist[i].split("\t")[2].strip())
    np.testing.assert_allclose(big.intervals[i, :len(pairs)], [p[0] for p in pairs])
    np.testing.assert_array_equal(big.changed[i, :len(pairs)], [bool(p[1]) for p in pairs])


def test_columnar_loader_names_the_line_of_a_bad_value_in_any_block(tmp_path):
    hist = [f"{i}\t1\t[[1.5, 0], [2, 1]]" for i in range(200)]
    hist[150] = "150\t1e999\t[[1.5, 0]]"      # an offset that is not finite
    hist[170] = "170\t1\t[[1.5, 2]]"          # a change indicator that is not 0/1
    d = write_dataset(str(tmp_path / "d"), imp=[f"{i}\t1" for i in range(200)], hist=hist,
                      urls=False, hosts=False, comp=False)
    with pytest.raises(ValueError, match=r"urlid_offset_history\.txt:151: first-crawl offset"):
        load_crawl_dataset(d, block_size=64)
    ds = load_crawl_dataset(d, errors="skip", block_size=1000)
    rep = ds.report.files["history"]
    assert rep.rows_read == 198 and rep.rows_skipped == 2
    assert any(":171: history entry 0: change indicator must be 0 or 1" in e for e in rep.examples)


# ------------------------------------------------- the loader's plain fast path vs the general one
_TOKENS = ["1", "0", "7", "12", "1.5", "0.25", "-2", "-0", ".5", "5.", "1e5", "+1", "1.2.3", "--1", "-", ".",
           "", "nan", "inf", "0.0", "3-", "12345678901234567", "123456789012345", "2"]
_SEPS = ["\t", "\t", "\t[[", "\t[ [", ", ", ",", " , ", "], [", "],[", "] ,[", "]]", "] ]", "\t[]", " ", "[", "]",
         "\r", "x", "\t[[ ", "é", ",,", "\t\t"]


def _plain_line(rng):
    k = int(rng.integers(0, 4))
    pairs = "], [".join(f"{rng.choice(['1.5', '0.25', '2', '.5', '3.'])}, {rng.choice(['0', '1'])}" for _ in range(k))
    hist = f"[[{pairs}]]" if k else "[]"
    page = rng.choice(["5", "7", "3", "9", "11", "12", "013", "12345678901234567"])
    return f"{page}\t{rng.choice(['0.5', '-1', '2', '.5'])}\t{hist}"


def _near_miss(rng, line):
    """One change to a plain line: a number or a separator swapped for an odd one, or a
    character inserted or deleted."""
    import re

    pieces = re.split(r"([0-9.\-]+)", line)  # alternating separators and numbers
    i = int(rng.integers(0, len(pieces)))
    how = rng.random()
    if how < 0.35:
        pieces[i] = rng.choice(_TOKENS) if i % 2 else rng.choice(_SEPS)
    elif how < 0.7:
        j = int(rng.integers(0, len(pieces[i]) + 1))
        pieces[i] = pieces[i][:j] + rng.choice(list("0.-+e ,[]\tx\r")) + pieces[i][j:]
    elif pieces[i]:
        j = int(rng.integers(0, len(pieces[i])))
        pieces[i] = pieces[i][:j] + pieces[i][j + 1:]
    return "".join(pieces)


def _random_line(rng):
    kind = rng.random()
    if kind < 0.35:
        return _plain_line(rng) + ("\r" if rng.random() < 0.1 else "")
    if kind < 0.45:
        return rng.choice(["", "   ", "URL_ID\tOffset\tHistory"])
    if kind < 0.9:
        return _near_miss(rng, _plain_line(rng))
    parts = []  # a random mix of numbers and separators
    for i in range(int(rng.integers(1, 12))):
        parts.append(rng.choice(_TOKENS) if i % 2 == 0 else rng.choice(_SEPS))
    return "".join(parts)


def _without_plain_path(monkeypatch):
    import jaxcrawl.io._neurips19 as N

    def none_plain(raw, ends, kinds, rules, hist_dtype):
        empty = [np.zeros(0, np.int64), np.zeros(0)]
        if len(kinds) == 3:
            empty.append((np.zeros(0, np.int64), np.zeros(0, hist_dtype), np.zeros(0, np.uint8)))
        return np.zeros(ends.size, bool), empty

    monkeypatch.setattr(N, "_plain_rows", none_plain)


@pytest.mark.parametrize("seed", range(6))
def test_plain_fast_path_equals_the_general_path_on_odd_lines(tmp_path, monkeypatch, seed):
    """The bytes-level path takes only the lines it can read exactly: on random mixes of
    well-formed lines in several spellings and near misses (exponents, signs, blanks, stray
    brackets, non-ASCII, too many digits, CRLF, headers, blank lines), loading with it gives
    the same arrays, counts, messages and errors as loading without it, in both modes and
    at block sizes that cut lines."""
    rng = np.random.default_rng(seed)
    hist = [_random_line(rng) for _ in range(300)]
    imp = [f"{i}\t{rng.choice(['1', '0.5', '2e-3', '-1', '.25', '+1', 'x', '3.'])}"
           for i in (3, 5, 7, 9, 11, 12, 13, 12345678901234567)]
    imp += [_near_miss(rng, f"{rng.choice([17, 18, 19])}\t{rng.choice(['1', '0.5'])}") for _ in range(20)]
    imp += [rng.choice(["5\t1", "", "14\t1 ", " 15\t1", "16\t1\t2", "20", "21\t", "22\t1\n23"])]
    d = write_dataset(str(tmp_path / "d"), imp=imp, hist=hist, urls=False, hosts=False, comp=False)

    def load(**kw):
        try:
            return load_crawl_dataset(d, dtype=np.float64, **kw)
        except ValueError as err:
            return str(err)

    fast = [load(errors="skip"), load(errors="skip", block_size=61), load(errors="raise")]
    with monkeypatch.context() as m:
        _without_plain_path(m)
        slow = [load(errors="skip"), load(errors="skip", block_size=61), load(errors="raise")]
    for a, b in zip(fast, slow):
        assert type(a) is type(b)
        if isinstance(a, str):
            assert a == b
            continue
        for x, y in zip(a[:-1], b[:-1]):
            np.testing.assert_array_equal(x, y)
        assert a.report == b.report


def test_plain_fast_path_reads_plain_files_exactly(tmp_path):
    """A machine-written file (every line plain) is read entirely by the bytes-level path and
    equals the per-line JSON reading of each line."""
    import jaxcrawl.io._neurips19 as N

    rng = np.random.default_rng(11)
    hist = []
    for i in range(500):
        k = int(rng.integers(0, 7))
        pairs = [[round(float(rng.uniform(0.6, 30)), int(rng.integers(0, 12))), int(rng.random() < 0.5)]
                 for _ in range(k)]
        hist.append(f"{1000 + 3 * i}\t{rng.uniform(-5, 5):.9f}\t{json.dumps(pairs)}")
    imp = [f"{1000 + 3 * i}\t{rng.lognormal():.8f}" for i in range(500)]
    d = write_dataset(str(tmp_path / "d"), imp=imp, hist=hist, urls=False, hosts=False, comp=False)
    raw = np.frombuffer(open(os.path.join(d, FILES["history"]), "rb").read(), np.uint8)
    plain, _ = N._plain_rows(raw, np.flatnonzero(raw == 10), ("id", "num", "history"), [None, N._OFFSET, None],
                             np.float64)
    assert plain.all()
    ds = load_crawl_dataset(d, dtype=np.float64)
    for i, line in enumerate(hist):
        f = line.split("\t")
        pairs = json.loads(f[2])
        assert ds.url_id[i] == int(f[0]) and ds.offset[i] == float(f[1]) and ds.num_observations[i] == len(pairs)
        np.testing.assert_array_equal(ds.intervals[i, :len(pairs)], [p[0] for p in pairs])
        np.testing.assert_array_equal(ds.changed[i, :len(pairs)], [p[1] == 1 for p in pairs])
    np.testing.assert_array_equal(ds.importance, [float(x.split("\t")[1]) for x in imp])


def test_word_at_a_time_byte_search_equals_a_plain_search():
    """`_has_dot_or_minus` (two 8-byte words per run, every byte compared at once) finds a
    '.' or '-' in a run exactly when Python's `in` does, for runs of 1-16 bytes anywhere."""
    import jaxcrawl.io._neurips19 as N

    rng = np.random.default_rng(5)
    raw = rng.choice(np.frombuffer(b"0123456789.-\t[],", np.uint8), size=4000,
                     p=[0.08] * 10 + [0.04] * 2 + [0.03] * 4).astype(np.uint8)
    padded = np.concatenate([raw, np.zeros(16, np.uint8)])
    start = rng.integers(0, raw.size - 16, 3000)
    length = rng.integers(1, 17, 3000)
    got = N._has_dot_or_minus(padded, start, length)
    want = [(b"." in raw[s:s + n].tobytes()) or (b"-" in raw[s:s + n].tobytes()) for s, n in zip(start, length)]
    np.testing.assert_array_equal(got, want)
    assert 0.1 < np.mean(want) < 0.9
