"""Crawl state across runs: ``jaxcrawl schedule`` run every day, each run reading the previous
day's timetable (``--after``) or a crawler's last fetches (``--last-fetch``).

Checked on the real command line with generated plans (hosts, crawl delays, signal pages):
k consecutive windows give each page the crawls of one window k times as long (within one
crawl; exactly the same crawls without crawl delays), for ISO and numeric starts and every
phase rule; a page's next fetch is never later than its last fetch plus its interval (plus
the crawl-delay moves the report gives); the URLFrontier and Nutch files follow the same
state, never carry a "never" date, and parse with the crawlers' own rules.  The library's
pieces are checked against plain references: the vectorised crawl-delay spacing against the
sequential recurrence, and ``timetable(..., last_crawl=...)`` against a loop over each page.
"""
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_crawler_schemas import JAVA_INT_MAX, parse_nutch, parse_urlfrontier

from jaxcrawl import io as jio
from jaxcrawl import timetable as tt
from jaxcrawl._src.timeunits import iso_utc
from jaxcrawl.cli import main
from jaxcrawl.io import _crawler

DAY = 86400.0
EPOCH = 1767571200.0  # 2026-01-05T00:00:00Z


def _plan(tmp_path, n=40, seed=0, signal=0):
    """A plan of ``n`` URLs on 4 hosts, periods of 0.3 to 3 days, the first ``signal`` pages
    crawled on change signals only (``prob`` > 0, ``periodic_rate`` 0)."""
    rng = np.random.default_rng(seed)
    ids = np.asarray([f"https://h{i % 4}.example/p{i}" for i in range(n)], object)
    rate = 1.0 / rng.uniform(0.3, 3.0, n)
    prob = np.zeros(n)
    prob[:signal] = 0.5
    jio.write_plan(str(tmp_path / "plan.csv"), ids, rate, prob, periodic_rate=np.zeros(n))
    # h0 can take 0.85 of its pages' crawls (crawls moved and some deferred); h1 has room
    load = np.sum(np.where(prob[::4] > 0, 0.0, rate[::4]))
    h0 = float(DAY / (0.85 * load))
    (tmp_path / "delays.csv").write_text(f"host,crawl_delay\nh0.example,{h0!r}\nh1.example,600\n")
    return ids, rate, prob


def _rates(tmp_path):
    """The plan's rates as written (and read back by ``schedule``)."""
    return np.asarray(jio.read_plan(str(tmp_path / "plan.csv")).rate, np.float64)


def _run(tmp_path, capsys, *args):
    assert main(["schedule", "-p", str(tmp_path / "plan.csv"), "-q", *map(str, args)]) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def _crawls(path):
    t, p, absolute = jio.read_timetable(path)
    return t, np.asarray([str(x) for x in p.tolist()], object), absolute


def _counts(ids, pages):
    where = {u: i for i, u in enumerate(ids.tolist())}
    return np.bincount([where[u] for u in pages.tolist()], minlength=len(ids))


def _days(tmp_path, capsys, k, start, step, extra=(), carry=True):
    """k consecutive windows, each reading the previous one's timetable; the joined crawls."""
    times, pages, summaries = [], [], []
    for d in range(k):
        out = tmp_path / f"day{d}.csv"
        after = ["--after", tmp_path / f"day{d - 1}.csv"] if d and carry else []
        s = start(d)
        summaries.append(_run(tmp_path, capsys, "--start", s, "--horizon", step, *extra, *after, "-o", out))
        t, p, _ = _crawls(out)
        times.append(t)
        pages.append(p)
    return np.concatenate(times), np.concatenate(pages), summaries


def _iso(d):
    return f"2026-01-{5 + d:02d}T00:00:00Z"


@pytest.mark.long
@pytest.mark.parametrize("phase, kind", [("golden", "iso"), ("hash", "iso"), ("zero", "iso"),
                                         ("hash", "numeric"), ("golden", "numeric"), ("zero", "numeric")])
def test_consecutive_windows_give_the_crawls_of_one_long_window(tmp_path, capsys, phase, kind):
    """Three 1-day windows (each with ``--after`` the previous one) equal one 3-day window:
    the same crawl times without crawl delays; with them, each page within one crawl and
    every host's fetches its delay apart across the midnights too."""
    ids, rate, _ = _plan(tmp_path, signal=3)
    start = _iso if kind == "iso" else (lambda d: 20000 + d)  # a numeric start far from 0
    unit = DAY if kind == "iso" else 1.0
    t3, p3, _ = _days(tmp_path, capsys, 3, start, 1, ["--phase", phase])
    _run(tmp_path, capsys, "--start", start(0), "--horizon", 3, "--phase", phase, "-o", tmp_path / "long.csv")
    tl, pl, _ = _crawls(tmp_path / "long.csv")
    assert sorted(p3.tolist()) == sorted(pl.tolist())
    o3, ol = np.lexsort((t3, p3)), np.lexsort((tl, pl))
    np.testing.assert_allclose(t3[o3], tl[ol], rtol=0, atol=0.1 / (DAY / unit))  # to 0.1 s

    # h0 is a crawl-delay host loaded past its delay: its queue grows every day, and each
    # window starts with the crawls the previous ones planned but could not fit (planned
    # column); four windows keep the one long window's queue crawl for crawl
    ids, rate, _ = _plan(tmp_path, n=160, signal=3)
    delays = ["--crawl-delays", tmp_path / "delays.csv"]
    t3, p3, days = _days(tmp_path, capsys, 4, start, 1, ["--phase", phase, *delays])
    s = _run(tmp_path, capsys, "--start", start(0), "--horizon", 4, "--phase", phase, *delays,
             "-o", tmp_path / "long.csv")
    tl, pl, _ = _crawls(tmp_path / "long.csv")
    diff = _counts(ids, p3) - _counts(ids, pl)
    assert np.max(np.abs(diff)) <= 1
    host_of = np.arange(len(ids)) % 4
    assert np.max(np.abs(np.bincount(host_of, weights=diff, minlength=4))) <= 1  # each host's crawls too
    assert np.all(diff[host_of >= 2] == 0)  # hosts without a delay: exactly the same crawls
    # the same crawls at the same times, up to float32: a page whose crawl sits at a midnight
    # may move across it, and the long window's gaps carry a margin of a few ulps of its
    # largest time (4 days) per crawl of a saturated host's queue (< 2 min over its ~120 crawls)
    assert np.count_nonzero(diff) <= 2
    for i in np.flatnonzero(diff == 0):
        a, b = np.sort(t3[p3 == ids[i]]), np.sort(tl[pl == ids[i]])
        np.testing.assert_allclose(a, b, rtol=0, atol=300.0 / (DAY / unit))
    assert sum(d["crawls_moved_for_crawl_delays"] for d in days) > 0 and s["crawls_deferred_past_horizon"] > 0
    assert all(d["num_pages_carried_over"] > 0 for d in days[1:])
    host = np.asarray([u.split("/")[2] for u in p3.tolist()])
    h0 = float((tmp_path / "delays.csv").read_text().splitlines()[1].split(",")[1])
    for h, delay in (("h0.example", h0), ("h1.example", 600.0)):
        gaps = np.diff(np.sort(t3[host == h])) * (1.0 if kind == "iso" else DAY)
        assert gaps.min() >= delay * (1 - 1e-6)
    # signal-only pages are never timetabled
    assert not set(p3.tolist()) & set(ids[:3].tolist())


@pytest.mark.long
@pytest.mark.parametrize("phase", ["zero", "golden", "hash"])
def test_next_fetch_is_never_later_than_last_fetch_plus_interval(tmp_path, capsys, phase):
    """Across four daily windows with crawl delays, every page's gap between consecutive
    crawls is at most its interval plus the largest crawl-delay move reported that day, and
    the report counts the pages a deferral made later; a page whose only crawl in a window was
    deferred is crawled the next day (overdue: at its start, or as soon as its host allows)."""
    ids, _, _ = _plan(tmp_path, seed=1)
    rate = _rates(tmp_path)
    delays = ["--crawl-delays", tmp_path / "delays.csv"]
    t, p, days = _days(tmp_path, capsys, 4, _iso, 1, ["--phase", phase, *delays])
    slack = sum(d["max_move"] for d in days) * DAY
    where = {u: i for i, u in enumerate(ids.tolist())}
    for u in set(p.tolist()):
        mine = np.sort(t[p == u])
        interval = DAY / rate[where[u]]
        assert np.all(np.diff(mine) <= interval + slack + 0.02), u  # + float32 times over a day
    assert any(d["crawls_deferred_past_horizon"] for d in days[:-1])
    assert sum(d.get("num_pages_overdue", 0) for d in days[1:]) > 0
    # without crawl delays nothing is later than last fetch + interval, and the report says so
    t, p, days = _days(tmp_path, capsys, 3, _iso, 1, ["--phase", phase])
    assert all(d["num_pages_later_than_last_fetch_plus_interval"] == 0 for d in days)
    for u in set(p.tolist()):
        assert np.all(np.diff(np.sort(t[p == u])) <= DAY / rate[where[u]] + 0.02)


def test_without_state_each_run_continues_the_grid_not_its_start(tmp_path, capsys):
    """Without ``--after`` the grid is anchored at the epoch: consecutive daily runs give the
    crawls of one long window too (a page planned every 3 days is not crawled every day), and a
    run starting mid-day gives the long window's crawls after that time."""
    ids, rate, _ = _plan(tmp_path, n=60)
    t3, p3, _ = _days(tmp_path, capsys, 3, _iso, 1, carry=False)
    _run(tmp_path, capsys, "--start", _iso(0), "--horizon", 3, "-o", tmp_path / "long.csv")
    tl, pl, _ = _crawls(tmp_path / "long.csv")
    np.testing.assert_array_equal(_counts(ids, p3), _counts(ids, pl))
    slow = rate < 1 / 2.0  # planned every 2 days or less often: at most 2 crawls in 3 days
    assert np.all(_counts(ids, pl)[slow] <= 2)
    _run(tmp_path, capsys, "--start", "2026-01-05T13:30:00Z", "--horizon", "10.5h", "-o", tmp_path / "mid.csv")
    tm, pm, _ = _crawls(tmp_path / "mid.csv")
    sel = (tl >= EPOCH + 13.5 * 3600) & (tl < EPOCH + DAY)
    assert sorted(pm.tolist()) == sorted(pl[sel].tolist())
    o1, o2 = np.lexsort((tm, pm)), np.lexsort((tl[sel], pl[sel]))
    np.testing.assert_allclose(tm[o1], tl[sel][o2], rtol=0, atol=0.1)


def test_last_fetch_table_is_a_crawlers_state(tmp_path, capsys):
    """``--last-fetch page_id,last_fetch``: a page fetched long ago is overdue and crawled at
    the window's start; one fetched recently continues from that fetch (first crawl exactly
    one interval later); pages not listed keep their grid; rows of pages not in the plan are
    counted; ISO text and epoch seconds give the same timetable."""
    ids, rate, _ = _plan(tmp_path, n=12)
    last = np.full(12, np.nan)
    last[0] = EPOCH - 30 * DAY                 # overdue
    last[1] = EPOCH - 0.25 / rate[1] * DAY     # due 3/4 of an interval into the window
    rows = [(ids[i], last[i]) for i in (0, 1)] + [("https://gone.example/x", EPOCH - DAY)]
    iso = iso_utc(np.asarray([r[1] for r in rows]), unit="us")
    (tmp_path / "state.csv").write_text("page_id,last_fetch\n" + "".join(f"{u},{d}\n" for (u, _), d in zip(rows, iso)))
    (tmp_path / "state2.csv").write_text("page_id,last_fetch\n" + "".join(f"{u},{float(t)!r}\n" for u, t in rows))
    s = _run(tmp_path, capsys, "--start", _iso(0), "--horizon", "1", "--last-fetch", tmp_path / "state.csv",
             "-o", tmp_path / "a.csv", "--urlfrontier", tmp_path / "a.jsonl")
    assert s["num_pages_with_last_fetch"] == 2 and s["num_last_fetch_rows_not_in_plan"] == 1
    assert s["num_pages_overdue"] == 1
    _run(tmp_path, capsys, "--start", _iso(0), "--horizon", "1", "--last-fetch", tmp_path / "state2.csv",
         "-o", tmp_path / "b.csv")
    assert (tmp_path / "a.csv").read_text() == (tmp_path / "b.csv").read_text()
    t, p, _ = _crawls(tmp_path / "a.csv")
    first = {u: t[p == u].min() for u in set(p.tolist())}
    assert first[ids[0]] == pytest.approx(EPOCH, abs=1e-3)
    assert first[ids[1]] == pytest.approx(last[1] + DAY / rate[1], abs=1e-2)
    due = {u: d for u, _, _, d in parse_urlfrontier(tmp_path / "a.jsonl")}
    assert due[ids[0]] == EPOCH and due[ids[1]] == int(np.ceil(first[ids[1]] - 1e-6))
    # the other pages: their grid, as without the table
    _run(tmp_path, capsys, "--start", _iso(0), "--horizon", "1", "-o", tmp_path / "c.csv")
    tc, pc, _ = _crawls(tmp_path / "c.csv")
    rest = ~np.isin(p, ids[:2])
    assert sorted(zip(p[rest].tolist(), t[rest].tolist())) == sorted(
        zip(pc[~np.isin(pc, ids[:2])].tolist(), tc[~np.isin(pc, ids[:2])].tolist()))
    (tmp_path / "bad.csv").write_text("page_id,last_fetch\nhttps://h0.example/p0,yesterday\n")
    assert main(["schedule", "-p", str(tmp_path / "plan.csv"), "-q", "--start", _iso(0), "--last-fetch",
                 str(tmp_path / "bad.csv"), "-o", str(tmp_path / "x.csv")]) == 2
    assert "bad.csv: row 1: column 'last_fetch'" in capsys.readouterr().err and not (tmp_path / "x.csv").exists()


@pytest.mark.long
def test_crawler_files_follow_the_state_and_never_say_never(tmp_path, capsys):
    """Day 2's URLFrontier date of every page is its first crawl in day 2's timetable; a page
    the crawl delays pushed out of the window is due at or after the window's end (never
    inside it); a page with no crawl in the window is due within one interval of its last
    fetch; signal-only pages are written with their planned signal-driven rate, flagged,
    with finite dates and intervals; both files parse as the crawlers read them."""
    ids, rate, prob = _plan(tmp_path, n=48, seed=2, signal=4)
    delays = ["--crawl-delays", tmp_path / "delays.csv"]
    _run(tmp_path, capsys, "--start", _iso(0), "--horizon", "1", *delays, "-o", tmp_path / "d0.csv")
    s = _run(tmp_path, capsys, "--start", _iso(1), "--horizon", "1", *delays, "--after", tmp_path / "d0.csv",
             "-o", tmp_path / "d1.csv", "--urlfrontier", tmp_path / "f.jsonl", "--nutch", tmp_path / "n.txt")
    assert s["crawls_deferred_past_horizon"] > 0
    start, end = EPOCH + DAY, EPOCH + 2 * DAY
    t, p, _ = _crawls(tmp_path / "d1.csv")
    t0, p0, _ = _crawls(tmp_path / "d0.csv")
    items = parse_urlfrontier(tmp_path / "f.jsonl")
    assert [u for u, *_ in items] == ids.tolist()  # every page, signal-only ones too
    for i, (url, _key, meta, due) in enumerate(items):
        assert start <= due < _crawler.MAX_REFETCH_DATE
        assert (meta.get("jaxcrawl.on_signal") == ["true"]) == (prob[i] > 0)
        assert float(meta["jaxcrawl.rate"][0]) == rate[i]
        mine = t[p == url]
        if mine.size:
            assert due == int(np.ceil(mine.min() - 1e-6))
        elif prob[i] > 0:  # not timetabled: due on its signal rate's grid
            assert due <= start + DAY / rate[i] + 1
        elif url.startswith("https://h0.") and due < end:
            pytest.fail(f"{url}: due {due} inside the window but not crawled in it")
        else:
            before = t0[p0 == url]
            bound = (before.max() if before.size else start) + DAY / rate[i]
            assert due >= end - 1 and (due <= bound + 2 or url.startswith("https://h0."))
    seeds = parse_nutch(tmp_path / "n.txt", metadata=True)
    assert list(seeds) == ids.tolist()
    for i, u in enumerate(ids.tolist()):
        assert seeds[u][0] == round(DAY / rate[i]) < JAVA_INT_MAX
        assert seeds[u][1] == ({"jaxcrawl.on_signal": "true"} if prob[i] > 0 else {})


# ------------------------------------------------------------------ library pieces
def _space_reference(time, page, group, gap, end, last_group, chain=False):
    """The sequential recurrence of :func:`jaxcrawl.timetable.space_crawls` (no page gaps);
    ``chain``: crawls pushed past ``end`` are remembered too (the host's queue goes on)."""
    last = dict(enumerate(last_group))
    new = []
    for t, p in zip(time, page):
        g = group[p]
        if g >= 0 and np.isfinite(last[g]):
            t = max(t, last[g] + gap[g])
        if g >= 0 and (t < end or chain):
            last[g] = t
        new.append(t)
    return np.asarray(new)


@pytest.mark.parametrize("seed", [0, pytest.param(1, marks=pytest.mark.long), pytest.param(2, marks=pytest.mark.long)])
def test_vectorised_spacing_equals_the_sequential_recurrence(seed):
    rng = np.random.default_rng(seed)
    n, hosts, horizon = 300, 7, 2.0
    rate = rng.uniform(0.5, 12.0, n)
    group = rng.integers(-1, hosts, n).astype(np.int32)
    gap = rng.choice([0.0, 0.01, 0.05, 0.2], hosts)
    last_group = np.where(rng.random(hosts) < 0.5, -rng.uniform(0, 0.3, hosts), -np.inf)
    table = tt.timetable(jnp.asarray(rate), horizon, relative=True)
    out = tt.space_crawls(table, group, gap, end=horizon, last_group=last_group)
    m = np.asarray(table.mask)
    t0, p0 = np.asarray(table.time, np.float64)[m], np.asarray(table.page)[m]
    ref = _space_reference(t0, p0, group, gap, horizon, last_group)
    keep = ref < horizon
    got_m = np.asarray(out.timetable.mask)
    got_t, got_p = np.asarray(out.timetable.time, np.float64)[got_m], np.asarray(out.timetable.page)[got_m]
    assert int(out.deferred) == int(np.sum(~keep)) and got_t.size == int(np.sum(keep))
    o1, o2 = np.lexsort((ref[keep], p0[keep])), np.lexsort((got_t, got_p))
    np.testing.assert_array_equal(p0[keep][o1], got_p[o2])
    # each crawl of a chain of moves adds a few ulps of margin (so that every gap holds after rounding)
    eps = float(np.finfo(np.asarray(table.time).dtype).eps)
    tol = 16 * eps * (horizon + gap.max()) * (1 + np.bincount(group[p0][group[p0] >= 0]).max())
    np.testing.assert_allclose(got_t[o2], ref[keep][o1], rtol=0, atol=tol)
    assert np.all(np.diff(got_t) >= 0)
    for h in range(hosts):  # the gaps hold exactly, after rounding too
        th = np.sort(np.concatenate([got_t[group[got_p] == h], last_group[h:h + 1][np.isfinite(last_group[h:h + 1])]]))
        assert np.all(np.diff(th) >= gap[h])
    first = np.asarray(out.first_deferred, np.float64)
    chained = _space_reference(t0, p0, group, gap, horizon, last_group, chain=True)
    np.testing.assert_array_equal(chained < horizon, keep)
    for i in range(n):
        dropped = chained[(p0 == i) & ~keep]
        if dropped.size:
            assert first[i] >= horizon and first[i] == pytest.approx(dropped.min(), abs=tol)
        else:
            assert first[i] == np.inf


def test_timetable_continues_each_page_from_its_last_crawl():
    """``timetable(..., last_crawl=...)``: a page with a last crawl is crawled at
    max(start, last + 1/rate) and every 1/rate after (a loop per page); the others keep their
    grid; passing the last crawls of the grid itself changes nothing."""
    rng = np.random.default_rng(3)
    n, start, horizon = 50, 100.0, 3.0
    rate = rng.uniform(0.2, 4.0, n)
    phase = np.asarray(tt.golden_phase(n), np.float64)
    last = np.where(rng.random(n) < 0.6, start - rng.uniform(0, 6, n), np.nan)
    got = tt.timetable(jnp.asarray(rate), horizon, start=start, phase=jnp.asarray(phase), relative=True,
                       last_crawl=last)
    m = np.asarray(got.mask)
    gt, gp = np.asarray(got.time, np.float64)[m] + start, np.asarray(got.page)[m]
    for i in range(n):
        if np.isfinite(last[i]):
            t, want = max(start, last[i] + 1 / rate[i]), []
        else:
            t, want = (np.ceil(start * rate[i] - phase[i]) + phase[i]) / rate[i], []
        while t < start + horizon:
            want.append(t)
            t += 1 / rate[i]
        np.testing.assert_allclose(np.sort(gt[gp == i]), want, rtol=0, atol=1e-4 * horizon)
    # under jit (the window's position in the working dtype): the same crawls
    jitted = jax.jit(lambda r, lc: tt.timetable(r, horizon, start=start, phase=jnp.asarray(phase), relative=True,
                                                 last_crawl=lc, capacity=int(got.time.shape[0])))(
        jnp.asarray(rate), jnp.asarray(last))
    assert int(jitted.num_crawls) == int(got.num_crawls)
    np.testing.assert_array_equal(np.asarray(jitted.page), np.asarray(got.page))
    np.testing.assert_allclose(np.asarray(jitted.time)[m], np.asarray(got.time)[m], atol=1e-3)
    plain = tt.timetable(jnp.asarray(rate), horizon, start=start, phase=jnp.asarray(phase), relative=True)
    grid_last = (np.ceil(start * rate - phase) - 1 + phase) / rate  # each page's last grid point before start
    same = tt.timetable(jnp.asarray(rate), horizon, start=start, phase=jnp.asarray(phase), relative=True,
                        last_crawl=grid_last)
    assert int(same.num_crawls) == int(plain.num_crawls)
    np.testing.assert_array_equal(np.asarray(same.page), np.asarray(plain.page))
    np.testing.assert_allclose(np.asarray(same.time)[np.asarray(same.mask)],
                               np.asarray(plain.time)[np.asarray(plain.mask)], atol=1e-4)


def test_schedule_prints_one_line_per_stage_to_a_log(tmp_path, capsys):
    """stderr not a terminal (a cron log): one line per stage as it ends; the JSON line's
    ``seconds`` itemise the whole wall time (stages + other = total)."""
    _plan(tmp_path, n=12)
    assert main(["schedule", "-p", str(tmp_path / "plan.csv"), "--start", _iso(0), "--crawl-delays",
                 str(tmp_path / "delays.csv"), "-o", str(tmp_path / "t.csv")]) == 0
    out = capsys.readouterr()
    stages = [line.split(": ", 1)[1].rsplit(" ", 2)[0] for line in out.err.splitlines()
              if line.startswith("jaxcrawl schedule: ")]
    assert stages == ["read", "timetable", "crawl delays", "check", "report", "write"]
    seconds = json.loads(out.out.strip().splitlines()[-1])["seconds"]
    assert list(seconds) == stages + ["other", "total"]
    assert sum(v for k, v in seconds.items() if k != "total") == pytest.approx(seconds["total"], rel=1e-9)
