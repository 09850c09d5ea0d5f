"""The learner-based reproductions (L2C Fig. 1-2, NeurIPS-19 Fig. 3) at --quick size: every claim
has its expected outcome (the scripts hold the tolerances), and the JSON/PNG are written."""
import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.reproduce

NAMES = ["l2c_fig1", "l2c_fig2", "neurips19_fig3"]


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
