"""The report of a multi-process ``jaxcrawl solve``: the pages at their revisit bounds and
the hosts at their cap with their load and multiplier, global over the processes and equal to the
single-process solve's; the plan's ``periodic_rate`` column written by every process."""
import json
import subprocess
import sys

import numpy as np
import pytest

from jaxcrawl.cli import main
from jaxcrawl.io import read_plan, write_problem

import helpers

TIMEOUT = 240  # seconds for the job (a hang fails the test instead of the suite)


_env = helpers.subprocess_env


@pytest.mark.long
def test_multiprocess_solve_reports_its_bounds_and_binding_hosts_as_one_process_does(tmp_path, capsys):
    n = 60
    rng = np.random.default_rng(1)
    imp, lam = rng.uniform(0.5, 2, n), rng.uniform(0.1, 3, n)
    ids = np.asarray([f"https://h{i % 4}.example/p{i}" for i in range(n)], object)
    comp = np.arange(n) % 5 == 0
    max_iv = np.where(np.arange(n) % 7 == 0, 1.0, np.inf)  # a floor of 1 a day on every 7th page
    write_problem(str(tmp_path / "t.csv"), ids, imp, lam, comp, max_interval=max_iv)
    caps = tmp_path / "caps.csv"
    caps.write_text("host_id,cap\nh0.example,3.5\nh1.example,4\nh2.example,inf\nh3.example,100\n")
    args = ["solve", "--input", str(tmp_path / "t.csv"), "--bandwidth", "30", "--host-caps", str(caps), "--x64"]
    cmd = [sys.executable, "-m", "jaxcrawl.cli", "launch", "-n", "2", "--timeout", str(TIMEOUT), "--",
           *args, "--output", str(tmp_path / "plan.csv"), "--gather-output"]
    proc = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=TIMEOUT + 30)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = (proc.stdout + proc.stderr).splitlines()
    got = [json.loads(x.split("] ", 1)[1]) for x in lines if x.startswith("[") and "] {" in x]
    assert len(got) == 2 and got[0]["binding_hosts"] == got[1]["binding_hosts"]  # the same on every process
    assert any("host caps    2 of 3 capped hosts at their cap" in x for x in lines)

    assert main([*args, "--output", str(tmp_path / "ref.csv"), "--quiet"]) == 0
    ref = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    for key in ("num_pages_at_min_rate", "num_pages_at_max_rate", "num_capped_hosts", "num_binding_hosts"):
        assert got[0][key] == ref[key], key
    mp = {h["host"]: h for h in got[0]["binding_hosts"]}
    assert set(mp) == {h["host"] for h in ref["binding_hosts"]} == {"h0.example", "h1.example"}
    for h in ref["binding_hosts"]:
        assert mp[h["host"]]["num_pages"] == h["num_pages"] and mp[h["host"]]["cap"] == h["cap"]
        assert mp[h["host"]]["load"] == pytest.approx(h["load"], rel=1e-7)
        assert mp[h["host"]]["multiplier"] == pytest.approx(h["multiplier"], rel=1e-6)
    # both plans carry periodic_rate = where(complete, max(rate - change_rate, 0), 0)
    plan, one = read_plan(str(tmp_path / "plan.csv")), read_plan(str(tmp_path / "ref.csv"))
    np.testing.assert_allclose(plan.periodic_rate, np.where(comp, np.maximum(plan.rate - lam, 0), 0), atol=1e-12)
    np.testing.assert_allclose(plan.periodic_rate, one.periodic_rate, atol=1e-7)
    assert np.any(plan.periodic_rate > 0)  # a complete page pinned at its floor above its change rate


@pytest.mark.long
@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_multiprocess_gather_output_keeps_every_row_in_every_format(tmp_path, suffix):
    n = 1000
    rng = np.random.default_rng(2)
    ids = np.asarray([f"https://h{i % 3}.example/p{i}" for i in range(n)], object)
    write_problem(str(tmp_path / "t.csv"), ids, rng.uniform(0.5, 2, n), rng.uniform(0.1, 3, n), np.arange(n) % 4 == 0)
    out = tmp_path / f"plan{suffix}"
    cmd = [sys.executable, "-m", "jaxcrawl.cli", "launch", "-n", "2", "--timeout", str(TIMEOUT), "--",
           "solve", "--input", str(tmp_path / "t.csv"), "--output", str(out), "--gather-output"]
    proc = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=TIMEOUT + 30)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    plan = read_plan(str(out))
    assert plan.page_id.tolist() == ids.tolist()  # every part's first row too, in process order
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["t.csv", out.name])  # the parts are gone
