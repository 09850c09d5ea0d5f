"""A complete page pinned at a revisit floor above its change rate: the plan's
``periodic_rate`` column and the periodic crawls ``jaxcrawl schedule`` timetables beside
its signals."""
from __future__ import annotations

import json

import numpy as np
import pytest

import jaxcrawl.io as jio
from jaxcrawl.cli import main


def _last_json(capsys) -> dict:
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def _pages(path, host_of=lambda i: f"h{i % 3}.example"):
    """Eight pages on three hosts; page 0 is complete, changes every 10 days, and must be
    crawled every 2 days (floor 0.5 > change rate 0.1): pinned at 0.5, periodic 0.4."""
    rows = ["page_id,importance,change_rate,complete,max_interval"]
    for i in range(8):
        comp, lam, cap = (1, 0.1, 2) if i == 0 else (int(i == 1), 0.5 + i, "")
        rows.append(f"https://{host_of(i)}/p{i},1,{lam},{comp},{cap}")
    path.write_text("\n".join(rows) + "\n")


def test_plan_carries_periodic_rate_and_schedule_timetables_it(tmp_path, capsys):
    pages, plan, out = tmp_path / "pages.csv", tmp_path / "plan.csv", tmp_path / "tt.csv"
    _pages(pages)
    assert main(["solve", "--input", str(pages), "--bandwidth", "6", "-o", str(plan), "--quiet"]) == 0
    capsys.readouterr()
    p = jio.read_plan(str(plan))
    lam = np.array([0.1] + [0.5 + i for i in range(1, 8)])
    complete = np.arange(8) < 2
    # the column is where(complete, max(rate - change_rate, 0), 0); page 0 pinned at its floor
    np.testing.assert_allclose(p.periodic_rate, np.where(complete, np.maximum(p.rate - lam, 0), 0), atol=1e-12)
    assert p.prob[0] == 1.0 and p.rate[0] == pytest.approx(0.5, rel=1e-5)
    assert p.periodic_rate[0] == pytest.approx(0.4, rel=1e-4) and np.all(p.periodic_rate[1:] == 0)

    horizon = 50.0
    assert main(["schedule", "-p", str(plan), "-o", str(out), "--horizon", str(horizon), "--quiet"]) == 0
    summary = _last_json(capsys)
    t = jio.read_timetable(str(out))
    ids = np.asarray(t[1]).astype(str)
    page_ids = np.asarray(p.page_id).astype(str)
    counts = np.array([np.sum(ids == pid) for pid in page_ids])
    # every timetabled rate: a signal page's periodic_rate, a Poisson page's rate
    timetabled = np.where(p.prob > 0, p.periodic_rate, p.rate)
    assert np.all(np.abs(counts - timetabled * horizon) < 1)  # page 0: 20 crawls in 50 days
    assert counts[0] in (19, 20, 21) and counts[1] == 0  # page 1: signals only
    assert summary["num_crawls"] == len(ids) == counts.sum()
    assert summary["expected_crawls"] == pytest.approx(timetabled.sum() * horizon, rel=1e-6)
    assert summary["num_signal_pages_left_out"] == 2
    assert summary["num_signal_pages_with_periodic_crawls"] == 1
    assert summary["num_timetabled_pages"] == 7

    # the same plan without the column (as older plans are) reads with no periodic crawls
    old = tmp_path / "old.csv"
    jio.write_plan(str(old), p.page_id, p.rate, p.prob)
    assert "periodic_rate" not in old.read_text().splitlines()[0]
    np.testing.assert_array_equal(jio.read_plan(str(old)).periodic_rate, np.zeros(8))


@pytest.mark.long
def test_periodic_crawls_keep_their_hosts_crawl_delay(tmp_path, capsys):
    """The periodic crawls share their host's politeness gap with its other pages."""
    pages, plan = tmp_path / "pages.csv", tmp_path / "plan.csv"
    _pages(pages)
    assert main(["solve", "--input", str(pages), "--bandwidth", "6", "-o", str(plan), "--quiet"]) == 0
    capsys.readouterr()
    page_ids = np.asarray(jio.read_plan(str(plan)).page_id).astype(str)

    delays, spaced = tmp_path / "delays.csv", tmp_path / "spaced.csv"
    delays.write_text("host,crawl_delay\nh0.example,14400\nh1.example,60\nh2.example,60\n")  # h0: 6 a day
    assert main(["schedule", "-p", str(plan), "-o", str(spaced), "--horizon", "10", "--quiet",
                 "--crawl-delays", str(delays)]) == 0
    summary = _last_json(capsys)
    time, ids, _ = jio.read_timetable(str(spaced))
    ids = np.asarray(ids).astype(str)
    on_h0 = np.char.startswith(ids, "https://h0.example/")
    assert np.sum(ids == page_ids[0]) >= 3  # the pinned page's periodic crawls are there ...
    assert np.diff(np.sort(time[on_h0])).min() >= 14400 / 86400 * (1 - 1e-6)  # ... spaced with its host's
    assert summary["min_host_gap_over_delay"] >= 1 - 1e-6 and summary["crawls_moved_for_crawl_delays"] > 0


def test_plan_periodic_rate_column_rules(tmp_path):
    # a periodic_rate above the page's rate is refused, naming the column and the page
    bad = tmp_path / "bad.csv"
    bad.write_text("page_id,rate,prob,periodic_rate\na,0.5,1,0.75\n")
    with pytest.raises(ValueError, match=r"periodic_rate.*at most 'rate'.*'a'"):
        jio.read_plan(str(bad))
    # every format round-trips the column
    for name in ("plan.parquet", "plan.jsonl"):
        jio.write_plan(str(tmp_path / name), ["a", "b"], [0.5, 2.0], [1.0, 0.0], periodic_rate=[0.25, 0.0])
        np.testing.assert_array_equal(jio.read_plan(str(tmp_path / name)).periodic_rate, [0.25, 0.0])
