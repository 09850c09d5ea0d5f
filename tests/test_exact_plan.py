"""The plan ``jaxcrawl solve`` writes is exact where the model is: ``periodic_rate`` is 0 unless
a revisit floor is above the page's change rate, rates sit on their bounds (rounding below a
floor is clipped, a real miss fails), capped hosts' written loads honour their caps, and the
report's binding hosts are the same in float32 and float64."""
import json
import math
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxcrawl.cli import main
from jaxcrawl.cli._solve import exact_plan
from jaxcrawl.io import read_plan, write_problem

import helpers

F32, F64 = float(np.finfo(np.float32).eps), float(np.finfo(np.float64).eps)
RTOL32 = 4 * F32 ** 0.75


def _last_json(capsys) -> dict:
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


# ------------------------------------------------------------------ exact_plan on arrays
def test_periodic_rate_is_zero_unless_the_floor_is_above_the_change_rate():
    rng = np.random.default_rng(0)
    n = 400
    lam = rng.uniform(0.1, 2.0, n)
    complete = rng.random(n) < 0.5
    lo = np.where(rng.random(n) < 0.3, rng.uniform(0.0, 3.0, n), 0.0)
    # solver-like rates: signal pages at their change rate with float32 noise either side, others free
    rate = np.where(complete, lam * (1 + rng.uniform(-3, 3, n) * F32), rng.uniform(0.0, 3.0, n))
    rate = np.maximum(rate, lo * (1 - F32))
    prob = np.where(complete, 1.0, 0.0)
    out, periodic, miss = exact_plan(rate, prob, lam, complete, lo, None, rtol=RTOL32, eps=F32)
    assert miss is None
    above = complete & (lo > lam)
    assert np.all(periodic[~above] == 0.0)  # exactly, not to a tolerance
    np.testing.assert_array_equal(periodic[above], out[above] - lam[above])
    assert np.all(periodic[above] > 0)
    assert np.all(out >= lo)  # on or above the floor, exactly
    assert np.all(out[complete & ~above] <= lam[complete & ~above])  # a signal page: at most its signals


def test_a_page_without_signal_crawls_has_no_periodic_rate():
    # objectives that ignore the signals (prob 0) leave a complete page's rate as its plain rate
    lam = np.asarray([0.5, 0.5])
    out, periodic, miss = exact_plan(np.asarray([2.0, 2.0]), np.zeros(2), lam, np.asarray([True, True]),
                                     np.asarray([1.0, 0.0]), None, rtol=RTOL32, eps=F32)
    assert miss is None and np.all(periodic == 0.0)
    np.testing.assert_array_equal(out, [2.0, 2.0])


@pytest.mark.parametrize("eps", [F32, F64])
def test_rates_ulps_below_their_floor_pass_and_are_clipped_onto_it(eps):
    rtol = 4 * eps ** 0.75
    lo = np.asarray([1 / 60, 0.5, 2.0, 0.25])
    hi = np.asarray([np.inf, 1.0, 4.0, 0.25])
    rate = np.asarray([lo[0] * (1 - 27 * eps), 1.0 * (1 + 4 * eps), 2.0 * (1 - 3 * eps), 0.25 * (1 - eps)])
    out, _, miss = exact_plan(rate, np.zeros(4), np.ones(4), np.zeros(4, bool), lo, hi, rtol=rtol, eps=eps)
    assert miss is None
    np.testing.assert_array_equal(out, [lo[0], 1.0, 2.0, 0.25])


@pytest.mark.parametrize("eps", [F32, F64])
def test_a_rate_below_its_floor_by_more_than_rounding_fails(eps):
    rtol = 4 * eps ** 0.75
    lo = np.asarray([0.5, 0.5])
    rate = np.asarray([0.5, 0.5 * (1 - 100 * rtol)])
    _, _, miss = exact_plan(rate, np.zeros(2), np.ones(2), np.zeros(2, bool), lo, None, rtol=rtol, eps=eps)
    assert miss is not None and miss.pages.tolist() == [1]


@pytest.mark.parametrize("eps", [F32, F64])
def test_written_capped_loads_honour_their_caps(eps):
    rng = np.random.default_rng(1)
    rtol = 4 * eps ** 0.75
    H, n = 5, 5000
    host = rng.integers(-1, H, n)
    lo = np.where(rng.random(n) < 0.2, 0.01, 0.0)
    cap = np.asarray([10.0, 20.0, np.inf, 7.5, 400.0])
    rate = rng.uniform(0.0, 1.0, n) + lo
    for h in range(H):  # each host filled to its cap, then off by its dtype's rounding of a long sum
        on = host == h
        if np.isfinite(cap[h]):
            rate[on] = lo[on] + (rate[on] - lo[on]) * (cap[h] - lo[on].sum()) / (rate[on] - lo[on]).sum()
            rate[on] *= 1 + 0.5 * eps * on.sum() ** 0.5
    out, _, miss = exact_plan(rate, np.zeros(n), np.ones(n), np.zeros(n, bool), lo, None, host, cap,
                              rtol=rtol, eps=eps)
    assert miss is None
    assert np.all(out >= lo)
    for h in range(H):
        if np.isfinite(cap[h]):
            load = math.fsum(out[host == h].tolist())
            assert load <= cap[h] * (1 + 1e-12), (h, load, cap[h])
            assert load == pytest.approx(cap[h], rel=1e-12)
    np.testing.assert_array_equal(out[host == 2], rate[host == 2])  # uncapped: untouched


def test_no_finite_cap_leaves_the_rates_as_they_are():
    rate = np.asarray([1.0, 2.0])
    out, _, miss = exact_plan(rate, np.zeros(2), np.ones(2), np.zeros(2, bool), None, None, np.asarray([-1, -1]),
                              np.zeros(0), rtol=RTOL32, eps=F32)
    assert miss is None
    np.testing.assert_array_equal(out, rate)


def test_a_host_above_its_cap_by_more_than_rounding_fails():
    host = np.asarray([0, 0, 1])
    rate = np.asarray([3.0, 3.0, 1.0])
    _, _, miss = exact_plan(rate, np.zeros(3), np.ones(3), np.zeros(3, bool), None, None, host,
                            np.asarray([5.0, 2.0]), rtol=RTOL32, eps=F32)
    assert miss is not None and miss.hosts.tolist() == [0]


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 300), num_hosts=st.integers(1, 6),
       noise=st.sampled_from([0.0, 1.0, 8.0]), x64=st.booleans())
def test_exact_plan_invariants(seed, n, num_hosts, noise, x64):
    """Whatever the rounding of the solver's rates (up to ``noise`` ulps of the dtype off their
    bounds and caps), the written plan lies within its bounds, honours every cap, and has
    periodic crawls exactly where a signal page's floor is above its change rate."""
    eps = F64 if x64 else F32
    rtol = 4 * eps ** 0.75
    rng = np.random.default_rng(seed)
    lam = rng.uniform(0.05, 3.0, n)
    complete = rng.random(n) < 0.4
    prob = np.where(complete, rng.choice([0.0, 0.5, 1.0], n), 0.0)
    lo = np.where(rng.random(n) < 0.3, rng.uniform(0.0, 2.0, n), 0.0)
    hi = np.where(rng.random(n) < 0.2, lo + rng.uniform(0.0, 2.0, n), np.inf)
    host = rng.integers(-1, num_hosts, n)
    rate = np.clip(rng.uniform(0.0, 3.0, n), lo, hi)
    cap = np.where(rng.random(num_hosts) < 0.8, 0.0, np.inf)
    for h in range(num_hosts):  # a finite cap: the host's load, so that it binds
        on = host == h
        if np.isfinite(cap[h]):
            cap[h] = max(float(rate[on].sum()), 1.0)
    rate = rate * (1 + noise * eps * rng.uniform(-1, 1, n))  # the solver's rounding
    out, periodic, miss = exact_plan(rate, prob, lam, complete, lo, hi, host, cap, rtol=rtol, eps=eps)
    assert miss is None
    assert np.all((out >= lo) & (out <= hi))
    above = complete & (prob > 0) & (lo > lam)
    assert np.all(periodic[~above] == 0.0)
    np.testing.assert_array_equal(periodic[above], np.maximum(out[above] - lam[above], 0.0))
    for h in range(num_hosts):
        if np.isfinite(cap[h]) and np.any(host == h):
            assert math.fsum(out[host == h].tolist()) <= cap[h] * (1 + 1e-12)


# ------------------------------------------------------------------ the command
def _table(tmp_path, n=1200, seed=0):
    rng = np.random.default_rng(seed)
    ids = np.asarray([f"https://h{i % 6}.example/p{i}" for i in range(n)], object)
    imp, lam = rng.lognormal(0, 1, n), rng.lognormal(np.log(0.3), 1, n)
    comp = rng.random(n) < 0.3
    path = tmp_path / "pages.csv"
    write_problem(str(path), ids, imp, lam, comp)
    return path, ids, lam, comp


@pytest.mark.long
@pytest.mark.parametrize("x64", [False, True])
def test_solve_writes_periodic_rate_exactly_zero_without_floors_above_change_rates(tmp_path, capsys, x64):
    path, ids, lam, comp = _table(tmp_path)
    out = tmp_path / "plan.csv"
    assert main(["solve", "-i", str(path), "-o", str(out), "--quiet", *(["--x64"] if x64 else [])]) == 0
    plan = read_plan(str(out))
    assert np.all(plan.periodic_rate == 0.0)
    signal = comp & (plan.prob > 0)
    assert signal.any() and np.all(plan.rate[signal] <= lam[signal])
    # with a floor of one crawl in 10 days: exactly the complete pages changing less often get periodic crawls
    out2 = tmp_path / "plan2.csv"
    assert main(["solve", "-i", str(path), "-o", str(out2), "--quiet", "--max-interval", "10d",
                 *(["--x64"] if x64 else [])]) == 0
    plan = read_plan(str(out2))
    above = comp & (lam < 0.1) & (plan.prob > 0)
    assert above.any()
    np.testing.assert_array_equal(plan.periodic_rate[above], plan.rate[above] - lam[above])
    assert np.all(plan.periodic_rate[~above] == 0.0)
    assert np.all(plan.rate >= 0.1)
    capsys.readouterr()


def _capped_table(tmp_path, seed=3):
    """Hosts of 3,000, 400 and 100 pages and small ones; the big host's cap just under its
    unconstrained load (it binds by 0.2 %), one cap far under, one far over."""
    rng = np.random.default_rng(seed)
    sizes = {"big.example": 3000, "mid.example": 400, "small.example": 100, "free.example": 500}
    ids = np.asarray([f"https://{h}/p{i}" for h, k in sizes.items() for i in range(k)], object)
    n = ids.size
    imp, lam = rng.lognormal(0, 1, n), rng.lognormal(np.log(0.3), 1, n)
    comp = rng.random(n) < 0.1
    path = tmp_path / "pages.csv"
    write_problem(str(path), ids, imp, lam, comp)
    return path, ids


def _host_loads(plan, ids):
    hosts = np.asarray([u.split("/")[2] for u in ids.tolist()])
    rate = dict(zip(plan.page_id.tolist(), plan.rate.tolist()))
    return {h: math.fsum(rate[u] for u, g in zip(ids.tolist(), hosts) if g == h) for h in set(hosts.tolist())}


@pytest.mark.long
def test_float32_and_float64_reports_list_the_same_binding_hosts(tmp_path, capsys):
    path, ids = _capped_table(tmp_path)
    bw = 0.2 * ids.size
    assert main(["solve", "-i", str(path), "-o", str(tmp_path / "free.csv"), "--bandwidth", str(bw),
                 "--quiet", "--x64"]) == 0
    capsys.readouterr()
    free = _host_loads(read_plan(str(tmp_path / "free.csv")), ids)
    caps = {"big.example": free["big.example"] * 0.998, "mid.example": free["mid.example"] * 0.5,
            "small.example": free["small.example"] * 3}
    (tmp_path / "caps.csv").write_text("host_id,cap\n" + "".join(f"{h},{c!r}\n" for h, c in caps.items()))
    reports, plans = {}, {}
    for x64 in (False, True):
        out = tmp_path / f"plan{int(x64)}.csv"
        assert main(["solve", "-i", str(path), "-o", str(out), "--bandwidth", str(bw), "--host-caps",
                     str(tmp_path / "caps.csv"), "--quiet", *(["--x64"] if x64 else [])]) == 0
        reports[x64], plans[x64] = _last_json(capsys), read_plan(str(out))
    for x64 in (False, True):
        rep = reports[x64]
        assert [h["host"] for h in rep["binding_hosts"]] == ["mid.example", "big.example"], x64
        assert rep["num_binding_hosts"] == 2
        loads = _host_loads(plans[x64], ids)
        for h, c in caps.items():  # the written loads honour the caps (docs/io.md: to 1e-9 of the cap)
            assert loads[h] <= c * (1 + 1e-9), (x64, h, loads[h], c)
        for h in rep["binding_hosts"]:
            assert h["cap"] == caps[h["host"]]  # the file's cap, not its float32 rounding
            assert h["load"] == pytest.approx(h["cap"], rel=1e-9 if x64 else 4 * RTOL32)
    assert reports[False]["bandwidth_held_back_by_host_caps"] == pytest.approx(
        reports[True]["bandwidth_held_back_by_host_caps"], rel=1e-3)


# ------------------------------------------------------------------ the real command line at size
@pytest.mark.long
def test_a_large_table_through_the_command_line(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    rng = np.random.default_rng(7)
    n, num_hosts = 100_000, 2000
    host = rng.integers(0, num_hosts, n)
    ids = np.char.add(np.char.add(np.char.add("https://www.site", host.astype(str)), ".example/p"),
                      np.arange(n).astype(str))
    lam = rng.lognormal(np.log(0.3), 1, n)
    comp = rng.random(n) < 0.05
    min_iv = np.where(rng.random(n) < 0.1, 1 / 24, 0.0)
    pq.write_table(pa.table({"page_id": ids.tolist(), "importance": rng.lognormal(0, 1, n), "change_rate": lam,
                             "complete": comp.astype(np.int8), "min_interval": min_iv}), tmp_path / "pages.parquet")
    count = np.bincount(host, minlength=num_hosts)
    capped = np.arange(0, num_hosts, 5)
    caps = {f"www.site{h}.example": float(0.1 * count[h]) for h in capped.tolist()}
    (tmp_path / "caps.csv").write_text("host_id,cap\n" + "".join(f"{h},{c!r}\n" for h, c in caps.items()))
    delayed = np.arange(1, num_hosts, 5)
    (tmp_path / "delays.csv").write_text("host,crawl_delay\n" + "".join(
        f"www.site{h}.example,{86400 / (0.15 * count[h]):.0f}\n" for h in delayed.tolist()))
    cmd = [sys.executable, "-m", "jaxcrawl.cli", "solve", "-i", str(tmp_path / "pages.parquet"),
           "-o", str(tmp_path / "plan.parquet"), "--host-caps", str(tmp_path / "caps.csv"),
           "--crawl-delays", str(tmp_path / "delays.csv"), "--max-interval", "60d",
           "--urlfrontier", str(tmp_path / "frontier.jsonl"), "--nutch", str(tmp_path / "seeds.txt"),
           "--start", "2026-01-01T00:00:00Z"]
    proc = subprocess.run(cmd, env=helpers.subprocess_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    # one progress line per stage on a stderr that is not a terminal, and the seconds add up
    stages = [k for k in report["seconds"] if k not in ("other", "total")]
    assert {"read", "hosts", "solve", "write plan", "write urlfrontier", "write nutch"} <= set(stages)
    assert report["seconds"]["start-up"] > 0  # the process's start (Python, the imports), before any line
    for k in stages:
        assert k == "start-up" or f"jaxcrawl solve: {k} " in proc.stderr
    assert math.isclose(sum(v for k, v in report["seconds"].items() if k != "total"), report["seconds"]["total"],
                        rel_tol=1e-9)
    plan = read_plan(str(tmp_path / "plan.parquet"))
    assert plan.page_id.tolist() == ids.tolist()
    assert np.all(plan.rate >= 1 / 60) and np.all(plan.rate <= np.where(min_iv > 0, 24.0, np.inf))
    assert math.fsum(plan.rate.tolist()) == pytest.approx(0.2 * n, rel=1e-4)
    lo = np.maximum(1 / 60, 0)
    assert np.all(plan.periodic_rate[~(comp & (lam < lo))] == 0.0)
    load = np.bincount(host, weights=plan.rate, minlength=num_hosts)
    for h in capped.tolist():
        assert load[h] <= 0.1 * count[h] * (1 + 1e-9)
    for h in delayed.tolist():
        assert load[h] <= 86400 / round(86400 / (0.15 * count[h])) * (1 + 1e-9)
    assert report["num_binding_hosts"] > 0
    assert sum(1 for _ in open(tmp_path / "frontier.jsonl")) == n == report["urlfrontier"]["num_urls"]
    seeds = (tmp_path / "seeds.txt").read_text().splitlines()
    assert len(seeds) == n and seeds[0].split("\t")[0] == ids[0]

    # the operator's daily cron on that plan: three 1-day windows, each continuing from the
    # previous day's timetable (--after), give every page the crawls of one 3-day window within
    # one, and every host keeps its crawl delay across the midnights; read back with Arrow's CSV
    # reader, as a consumer would
    import pyarrow.csv as pacsv

    def schedule(start, horizon, out, *after):
        cmd = [sys.executable, "-m", "jaxcrawl.cli", "schedule", "-p", str(tmp_path / "plan.parquet"), "-q",
               "--start", start, "--horizon", horizon, "--crawl-delays", str(tmp_path / "delays.csv"),
               "-o", str(tmp_path / out), *after]
        proc = subprocess.run(cmd, env=helpers.subprocess_env(), capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        t = pacsv.read_csv(tmp_path / out)
        assert t.column_names == ["time", "epoch_seconds", "page_id", "planned_epoch_seconds"]
        return json.loads(proc.stdout.strip().splitlines()[-1]), t

    days, tables = [], []
    for d in range(3):
        after = ["--after", str(tmp_path / f"day{d - 1}.csv")] if d else []
        s, t = schedule(f"2026-01-0{d + 1}T00:00:00Z", "1d", f"day{d}.csv", *after)
        days.append(s)
        tables.append(t)
    whole, long = schedule("2026-01-01T00:00:00Z", "3d", "long.csv")
    assert all(s["crawls_deferred_past_horizon"] > 0 for s in days)  # the delays bind every day
    assert days[1]["num_crawls_carried_over"] > 0 and days[2]["num_crawls_carried_over"] > 0
    ids_d = np.concatenate([np.asarray(t["page_id"].to_pylist(), object) for t in tables])
    where = {u: i for i, u in enumerate(ids.tolist())}
    pages_d = np.asarray([where[u] for u in ids_d.tolist()])
    pages_l = np.asarray([where[u] for u in long["page_id"].to_pylist()])
    diff = np.bincount(pages_d, minlength=n) - np.bincount(pages_l, minlength=n)
    assert np.abs(diff).max() <= 1, np.abs(diff).max()
    by_host = np.bincount(host[pages_d], minlength=num_hosts) - np.bincount(host[pages_l], minlength=num_hosts)
    assert np.abs(by_host).max() <= 1
    times = np.concatenate([np.asarray(t["epoch_seconds"]) for t in tables])
    planned = np.concatenate([np.asarray(t["planned_epoch_seconds"]) for t in tables])
    assert np.all(planned <= times)
    moved = planned < times - 1.0
    assert np.all(np.isin(host[pages_d[moved]], delayed))  # only crawl delays move a crawl
    for h in delayed.tolist():
        mine = np.sort(times[host[pages_d] == h])
        assert np.all(np.diff(mine) >= 86400 / (0.15 * count[h]) - 1.0)
