"""The learner-based reproductions (L2C Fig. 1-2, NeurIPS-19 Fig. 3) at --quick size: every claim
has its expected outcome (the scripts hold the tolerances), and the JSON/PNG are written; the
L2C claims are read from their maps at the stated readings."""
import json
import subprocess
import sys

import numpy as np
import pytest

pytestmark = pytest.mark.reproduce

NAMES = ["l2c_fig1", "l2c_fig2", "neurips19_fig3"]


def _check_l2c_fig1(record):
    amap = record["results"]["fig1a_map"]
    units = amap["time_unit_days"]
    holds = np.asarray(amap["interior_minimum"], bool)
    depth = np.asarray(amap["depth_se"], float)
    assert holds.shape == depth.shape == (len(units), 2)
    assert np.array_equal(holds, depth > 4.0)
    # the claims are the map's cells at the stated unit, and they are expected to hold
    u = units.index(record["params"]["time_unit_days"])
    names = [f"interior_minimum_R{r}" for r in record["params"]["bandwidths"]]
    assert [record["claims"][n] for n in names] == holds[u].tolist()
    assert all(record["claim_details"][n]["expected"] for n in names)
    # the minimum is inside [m/R, T] wherever the map says it holds
    tau = np.asarray(amap["tau"], float)
    tau_min = np.asarray(amap["tau_min"], float)
    assert np.all((tau_min > tau[:, 0]) & (tau_min < tau[:, -1]) | ~holds)


def _check_l2c_fig2(record):
    amap = record["results"]["fig2c_map"]
    shape = (len(amap["time_unit_days"]), 2, len(amap["phase_multiples"]), len(amap["epsilons"]))
    ratio = np.asarray(amap["regret_ratio_last_phase"], float)
    late = np.asarray(amap["eps_greedy_ahead_after_last_phase"], bool)
    crossing = np.asarray(amap["phases_from_which_eps_greedy_stays_ahead"], int)
    assert ratio.shape == late.shape == crossing.shape == shape
    assert np.all(ratio[late] < 1.0) and np.all((crossing > 0) == late)
    assert np.all((crossing >= 1) & (crossing <= amap["num_phases"]) | ~late)
    for r in record["params"]["bandwidths"]:
        for name in (f"etc_better_with_few_phases_R{r}", f"eps_greedy_beats_best_etc_with_enough_phases_R{r}"):
            assert record["claims"][name] is True and record["claim_details"][name]["expected"] is True
            assert name in record["results"]["other_readings"]
    # the map holds the claims' reading's neighbourhood: somewhere in Fig. 1's unit ε-greedy overtakes ETC
    assert late[amap["time_unit_days"].index(min(amap["time_unit_days"]))].any()


def test_learner_figures_quick(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "jaxcrawl.cli", "reproduce", *NAMES, "--quick", "--out", str(tmp_path),
                           "--no-progress"], capture_output=True, text=True, timeout=2400, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["passed"] is True and summary["failed"] == [] and set(summary["experiments"]) == set(NAMES)
    for name in NAMES:
        record = json.loads((tmp_path / f"{name}.json").read_text())
        assert record["claims"]
        assert (tmp_path / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    _check_l2c_fig1(json.loads((tmp_path / "l2c_fig1.json").read_text()))
    _check_l2c_fig2(json.loads((tmp_path / "l2c_fig2.json").read_text()))
