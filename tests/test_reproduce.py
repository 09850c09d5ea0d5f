"""`jaxcrawl reproduce`: the estimator, solver and sync-bandit figures (MINE) at --quick size, the
JSON/PNG each writes, its claims, and checkpoint/resume behaviour.

The paper reproductions are marked ``reproduce`` (deselected by default; run them with
``python -m pytest -m reproduce``, as ``.ci/run`` does after the unit suite).  They run the
experiments once, in one subprocess (as ``jaxcrawl reproduce ... --quick`` does, in the
default float32), and the tests read what it wrote.

The tests of the reproduction machinery (discovery from the package, resume, fingerprints,
exit codes, errors, the ``--data`` reader) stay in the default suite: they use a tiny fake
experiment in a folder of one's own scripts (named by JAXCRAWL_EXPERIMENTS_DIR) and need almost
no JAX work.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
EXPERIMENTS = REPO / "jaxcrawl" / "experiments"
MINE = ("neurips19_fig1", "neurips19_fig2", "l2c_appj_fig3_4", "icml20_fig1_4",
        "avrachenkov_fig2_5", "avrachenkov_fig6")


# the paper reproductions (the quick run of the experiments in MINE, the --data figures)
reproduce = pytest.mark.reproduce


def _run_cli(args, cwd, env_extra=None, timeout=1800):
    env = dict(os.environ)
    env.pop("JAXCRAWL_EXPERIMENTS_DIR", None)
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "jaxcrawl.cli", "reproduce", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def experiments_snapshot(tmp_path_factory):
    """A copy of the package taken when the module starts, first on PYTHONPATH: the checkpoint
    fingerprints hash the experiments' sources, so the quick run and the rerun below must see
    the same files even if the working tree is edited in between."""
    snap = tmp_path_factory.mktemp("package_snapshot")
    shutil.copytree(REPO / "jaxcrawl", snap / "jaxcrawl", ignore=shutil.ignore_patterns("__pycache__"))
    path = os.pathsep.join(p for p in (str(snap), os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": path}


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory, experiments_snapshot):
    out = tmp_path_factory.mktemp("reproduce_quick")
    proc = _run_cli([*MINE, "--quick", "--out", str(out), "--no-progress"], cwd=out, env_extra=experiments_snapshot)
    lines = proc.stdout.strip().splitlines()
    assert lines, proc.stderr[-3000:]
    summary = json.loads(lines[-1])
    return out, proc, summary


def _png_size(path: Path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    return width, height, len(data)


@reproduce
def test_quick_run_exits_zero_and_summarises_every_claim(quick_run):
    out, proc, summary = quick_run
    assert proc.returncode == 0, (proc.stdout[-4000:], proc.stderr[-4000:])
    assert summary["passed"] is True and summary["failed"] == [] and summary["errors"] == {}
    assert summary["quick"] is True and summary["reproduce"] == list(MINE)
    assert set(summary["experiments"]) == set(MINE)
    for name in MINE:
        for claim, holds in summary["experiments"][name]["claims"].items():
            assert summary["claims"][f"{name}/{claim}"] == holds
    # every claim was printed with its status
    for key in summary["claims"]:
        assert f"  PASS  {key}:" in proc.stdout


@reproduce
@pytest.mark.parametrize("name", MINE)
def test_experiment_writes_json_and_png_and_its_claims_hold(quick_run, name):
    out, _, summary = quick_run
    record = json.loads((out / f"{name}.json").read_text())
    for field in ("experiment", "description", "quick", "seed", "versions", "seconds", "params", "results",
                  "claims", "claim_details", "passed", "figure", "checkpoints"):
        assert field in record, field
    assert record["experiment"] == name and record["quick"] is True and record["seed"] == 0
    assert record["versions"]["jaxcrawl"] and record["versions"]["jax"]
    assert record["seconds"] > 0 and record["passed"] is True
    assert len(record["claims"]) >= 3
    for claim, holds in record["claims"].items():
        detail = record["claim_details"][claim]
        assert isinstance(holds, bool) and detail["holds"] == holds
        assert detail["description"] and detail["tolerance"] and detail["paper"]
        # a claim passes when it has its expected outcome; a paper finding that does not
        # reproduce here must say why
        assert detail["passed"] and detail["holds"] == detail["expected"], (claim, detail)
        if not detail["expected"]:
            assert len(detail.get("note", "")) > 40, claim
    assert record["paper_findings_not_reproduced"] == [c for c, h in record["claims"].items() if not h]
    width, height, size = _png_size(out / record["figure"])
    assert width >= 600 and height >= 300 and size > 20_000


@reproduce
def test_quick_results_are_the_papers_numbers_where_closed_forms_exist(quick_run):
    """Spot checks of the numbers behind the claims against closed forms."""
    out, _, _ = quick_run
    avr = json.loads((out / "avrachenkov_fig2_5.json").read_text())
    naive = avr["claim_details"]["naive_biased"]["values"]["values"]
    for v in naive.values():  # the naive estimator's limit pΔ/(Δ+p)
        assert abs(v["naive"] - v["limit"]) <= 0.03 * v["limit"]
    appj = json.loads((out / "l2c_appj_fig3_4.json").read_text())
    assert appj["claim_details"]["bound_matches_closed_form"]["values"]["max_relative_difference"] <= 0.05
    fig1 = json.loads((out / "neurips19_fig1.json").read_text())
    costs = fig1["results"]["costs"]
    assert costs["BLC"]["harmonic"] == "inf"        # strict JSON: infinities as strings
    assert costs["BLC"]["starved_pages"] > 0
    assert all(abs(c["budget_residual"]) <= 1e-3 * fig1["params"]["num_pages"] for c in costs.values())


@reproduce
def test_rerun_reuses_every_checkpoint_and_reproduces_the_numbers(quick_run, experiments_snapshot, tmp_path):
    """A finished run's chunks are reused; deleting one recomputes exactly that one."""
    out, _, _ = quick_run
    work = tmp_path / "rerun"
    shutil.copytree(out, work)
    name = "neurips19_fig2"
    first = json.loads((work / f"{name}.json").read_text())
    chunk_dir = work / ".checkpoints" / name
    assert len(list(chunk_dir.glob("*.pkl"))) == 8          # 4 algorithms x 2 readings of the complete subset
    (blc,) = chunk_dir.glob("costs_BLC_n*_neurips19-*.pkl")
    blc.unlink()
    proc = _run_cli([name, "--quick", "--out", str(work), "--no-progress"], cwd=work, env_extra=experiments_snapshot)
    assert proc.returncode == 0, proc.stderr[-3000:]
    second = json.loads((work / f"{name}.json").read_text())
    assert second["checkpoints"]["reused"] == 7 and second["checkpoints"]["computed"] == 1
    assert second["results"] == first["results"] and second["claims"] == first["claims"]


# ----------------------------------------------------------------- resume, on a fake experiment
FAKE = textwrap.dedent('''
    """A fake experiment: four chunks, interrupted after two when FAKE_INTERRUPT is set."""
    import os

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from jaxcrawl.experiments import claim

    NAME = "fake_chunks"
    DESCRIPTION = "test double: four checkpointed chunks"


    def run(ctx):
        log = os.environ["FAKE_LOG"]

        def work(i):
            if os.environ.get("FAKE_INTERRUPT") and i == 2:
                raise KeyboardInterrupt
            with open(log, "a") as fh:
                fh.write(f"{i}\\n")
            return {"value": i * i + ctx.seed}

        done = ctx.run_chunks("fake", {f"chunk{i}": (lambda i=i: work(i)) for i in range(4)})
        total = sum(v["value"] for v in done.values())
        fig, ax = plt.subplots()
        ax.plot([0, 1], [0, total])
        ctx.savefig(fig)
        return dict(params=dict(chunks=4), results=dict(total=total),
                    claims=[claim("total_is_sum_of_squares", total == 14 + 4 * ctx.seed,
                                  description="0 + 1 + 4 + 9 (+ 4 seed)", tolerance="exact",
                                  paper="none: a test double")])
''')


@pytest.fixture
def fake_dir(tmp_path, monkeypatch):
    exp = tmp_path / "experiments"
    exp.mkdir()
    (exp / "fake_chunks.py").write_text(FAKE)
    log = tmp_path / "computed.log"
    monkeypatch.setenv("JAXCRAWL_EXPERIMENTS_DIR", str(exp))
    monkeypatch.setenv("FAKE_LOG", str(log))
    monkeypatch.delenv("FAKE_INTERRUPT", raising=False)
    return exp, log, tmp_path / "out"


def _main(argv):
    from jaxcrawl import cli

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(io.StringIO()):
        code = cli.main(["reproduce", *argv])
    return code, buf.getvalue()


def _computed(log: Path):
    return [int(x) for x in log.read_text().split()] if log.exists() else []


def test_interrupted_run_resumes_from_finished_chunks(fake_dir, monkeypatch):
    exp, log, out = fake_dir
    monkeypatch.setenv("FAKE_INTERRUPT", "1")
    code, text = _main(["fake_chunks", "--out", str(out)])
    assert code == 130 and "interrupted" in text
    assert _computed(log) == [0, 1]
    assert len(list((out / ".checkpoints" / "fake_chunks").glob("*.pkl"))) == 2
    assert not (out / "fake_chunks.json").exists()

    monkeypatch.delenv("FAKE_INTERRUPT")
    code, text = _main(["fake_chunks", "--out", str(out)])
    assert code == 0, text
    assert _computed(log) == [0, 1, 2, 3]           # only the unfinished chunks ran
    record = json.loads((out / "fake_chunks.json").read_text())
    assert record["checkpoints"] == dict(reused=2, computed=2,
                                         directory=str(out / ".checkpoints" / "fake_chunks"))
    assert record["results"]["total"] == 14 and record["claims"] == {"total_is_sum_of_squares": True}
    assert json.loads(text.strip().splitlines()[-1])["passed"] is True

    code, _ = _main(["fake_chunks", "--out", str(out)])  # everything reused
    assert code == 0 and _computed(log) == [0, 1, 2, 3]
    code, _ = _main(["fake_chunks", "--out", str(out), "--fresh"])  # nothing reused
    assert code == 0 and _computed(log) == [0, 1, 2, 3, 0, 1, 2, 3]


def test_checkpoints_are_not_reused_across_seeds_or_edited_sources(fake_dir):
    exp, log, out = fake_dir
    assert _main(["fake_chunks", "--out", str(out)])[0] == 0
    assert _main(["fake_chunks", "--out", str(out), "--seed", "1"])[0] == 0   # other seed: recompute
    assert _computed(log) == [0, 1, 2, 3] * 2
    record = json.loads((out / "fake_chunks.json").read_text())
    assert record["results"]["total"] == 18 and record["seed"] == 1
    (exp / "fake_chunks.py").write_text(FAKE + "\n# edited\n")              # edited source: recompute
    assert _main(["fake_chunks", "--out", str(out), "--seed", "1"])[0] == 0
    assert _computed(log) == [0, 1, 2, 3] * 3


def test_failed_claim_gives_exit_status_1(fake_dir):
    exp, log, out = fake_dir
    (exp / "fake_chunks.py").write_text(FAKE.replace("total == 14 + 4 * ctx.seed", "total == -1"))
    code, text = _main(["fake_chunks", "--out", str(out)])
    assert code == 1
    assert "FAIL  fake_chunks/total_is_sum_of_squares" in text
    summary = json.loads(text.strip().splitlines()[-1])
    assert summary["passed"] is False and summary["failed"] == ["fake_chunks/total_is_sum_of_squares"]


def test_folder_experiment_runs_from_the_command_line(fake_dir):
    exp, log, out = fake_dir
    proc = subprocess.run([sys.executable, "-m", "jaxcrawl.cli", "reproduce", "fake_chunks", "--out", str(out),
                           "--no-progress"], capture_output=True, text=True, timeout=300, cwd=out.parent,
                          env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1])["experiments"]["fake_chunks"]["passed"] is True
    assert (out / "fake_chunks.png").is_file()


def test_clear_errors(tmp_path, monkeypatch):
    monkeypatch.setenv("JAXCRAWL_EXPERIMENTS_DIR", str(tmp_path / "nowhere"))
    from jaxcrawl import cli

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        assert cli.main(["reproduce", "all"]) == 2
    assert "JAXCRAWL_EXPERIMENTS_DIR" in err.getvalue() and "not a directory" in err.getvalue()
    clash = tmp_path / "clash"
    clash.mkdir()
    (clash / "neurips19_fig1.py").write_text(FAKE)
    monkeypatch.setenv("JAXCRAWL_EXPERIMENTS_DIR", str(clash))
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        assert cli.main(["reproduce", "--list"]) == 2
    assert "already shipped" in err.getvalue()
    monkeypatch.delenv("JAXCRAWL_EXPERIMENTS_DIR")
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        assert cli.main(["reproduce", "no_such_figure"]) == 2
    assert "unknown experiment 'no_such_figure'" in err.getvalue()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        assert cli.main(["reproduce", "neurips19_fig1", "--data", str(tmp_path / "missing")]) == 2
    assert "--data" in err.getvalue()


def test_list_names_every_experiment():
    from jaxcrawl import cli

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert cli.main(["reproduce", "--list"]) == 0
    listed = {line.split()[0] for line in buf.getvalue().splitlines() if line.strip()}
    assert set(MINE) <= listed


def test_experiments_are_modules_of_the_package_and_ship_in_the_wheel():
    """`jaxcrawl reproduce` finds the experiments as modules of jaxcrawl.experiments (no path
    into a checkout), and setuptools' package discovery puts that package in the wheel."""
    import setuptools

    from jaxcrawl.cli import _reproduce

    shipped = {p.stem for p in EXPERIMENTS.glob("[!_]*.py")}
    assert set(MINE) <= shipped
    assert set(_reproduce._discover()) == shipped
    assert "jaxcrawl.experiments" in setuptools.find_packages(str(REPO), include=["jaxcrawl*"])


# ------------------------------------------------------------------------------ --data
def _write_dataset(d: Path, num_pages=600, complete_fraction=0.25, days=98, seed=0):
    """A small directory in the NeurIPS-19 data set's format: daily crawls for `days` days."""
    import numpy as np

    rng = np.random.default_rng(seed)
    imp = np.exp(2 + 2 * rng.standard_normal(num_pages))
    lam = np.exp(np.log(1 / 3) + 1.5 * rng.standard_normal(num_pages))
    comp = rng.uniform(size=num_pages) < complete_fraction
    changed = rng.uniform(size=(num_pages, days)) < -np.expm1(-lam[:, None])
    d.mkdir(parents=True, exist_ok=True)
    (d / "urlid_imp.txt").write_text("".join(f"{i}\t{float(imp[i])!r}\n" for i in range(num_pages)) + f"{num_pages}\t0\n")
    (d / "urlid_offset_history.txt").write_text("".join(
        f"{i}\t0.5\t[" + ", ".join(f"[1.0, {int(c)}]" for c in changed[i]) + "]\n" for i in range(num_pages)))
    (d / "urlid_chrate_compl_obs_hist.txt").write_text("".join(f"{i}\t{float(lam[i])!r}\n" for i in np.flatnonzero(comp)))
    return imp, lam, comp, changed


def test_crawl_problem_from_a_data_directory(tmp_path):
    """--data: importance as given, the given rate for complete pages, and for the others the
    MLE, which for equal daily intervals is -log(1 - U/N) (clipped when U = N or U = 0)."""
    import numpy as np

    from jaxcrawl.experiments import _common

    imp, lam, comp, changed = _write_dataset(tmp_path / "data")
    ctx = _common.Context("t", quick=True, seed=0, out=tmp_path / "out", data=tmp_path / "data")
    problem, info = _common.crawl_problem(ctx, 10)
    u, n = changed.sum(1), changed.shape[1]
    ok = comp | ((u > 0) & (u < n))          # the MLE clip keeps U = 0 pages at 1e-9 > 0: kept too
    mle = np.where(u == n, 25.0, np.where(u == 0, 1e-9, -np.log1p(-np.minimum(u, n - 1) / n)))
    expected_rate = np.where(comp, lam, mle)
    assert info["num_pages"] == len(imp) and info["dropped_pages"] == 1      # the importance-0 page
    assert info["num_complete"] == int(comp.sum())
    np.testing.assert_allclose(np.asarray(problem.importance), imp, rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(problem.complete), comp)
    np.testing.assert_allclose(np.asarray(problem.change_rate)[ok], expected_rate[ok], rtol=2e-4)
    assert float(problem.bandwidth) == pytest.approx(0.2 * len(imp))


@reproduce
@pytest.mark.slow
def test_neurips_figures_on_a_data_directory(tmp_path):
    """`--data DIR` end to end: with 25% complete pages LC beats BLC on binary cost, and the
    claim is expected to hold on real data (unlike on the 4%-complete synthetic default)."""
    _write_dataset(tmp_path / "data", num_pages=3000)
    out = tmp_path / "out"
    proc = _run_cli(["neurips19_fig1", "neurips19_fig2", "--quick", "--data", str(tmp_path / "data"),
                     "--out", str(out), "--no-progress"], cwd=tmp_path)
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    record = json.loads((out / "neurips19_fig1.json").read_text())
    assert record["params"]["source"]["source"] == str(tmp_path / "data")
    assert record["claim_details"]["lc_beats_blc_binary"]["expected"] is True
    assert record["claims"]["lc_beats_blc_binary"] is True
    assert record["results"]["complete_fraction_sweep"] is None


@reproduce
def test_quick_runs_report_both_readings(quick_run):
    """Where an outcome hinges on a reading of the paper, the claims use the faithful one and
    the JSON reports the other (results.other_readings)."""
    out, _, _ = quick_run
    fig1 = json.loads((out / "neurips19_fig1.json").read_text())
    assert fig1["params"]["complete_subset"] == "neurips19"
    lc = fig1["results"]["costs"]["LC"]
    assert lc["bandwidth_on_complete"] > lc["complete_share_of_pages"]          # NeurIPS-19 §7
    other = fig1["results"]["other_readings"]
    assert other["lc_complete_share_disproportionate"]["complete_subset=random"]["holds"] is False
    assert other["lc_beats_blc_binary"]["complete_subset=random"]["holds"] is False
    fig2 = json.loads((out / "neurips19_fig2.json").read_text())
    assert 2.0 <= fig2["results"]["harmonic_ratio_io_over_co"] <= 5.0           # §7: 2x, §9.5: ~5x
    fig6 = json.loads((out / "avrachenkov_fig6.json").read_text())
    assert fig6["claims"]["lln_rates_converge"] is True
    pooled = fig6["results"]["other_readings"]["lln_rates_converge"]["pooled_counts_times_current_rate"]
    assert pooled["holds"] is False
    avr = json.loads((out / "avrachenkov_fig2_5.json").read_text())
    by_k = avr["results"]["fig5c_long"]["best_beta_by_horizon"]
    assert len(by_k["k"]) == len(by_k["best"]) and by_k["best"][-1] == "0.6" and by_k["best"][0] != "0.6"


def test_items_per_call_follow_the_device(monkeypatch):
    """A CPU keeps the experiment's default; an accelerator takes as many items per call as
    half its memory holds by XLA's memory analysis of one item's call (never fewer than 1,
    never more than there are)."""
    import types

    import jax

    from jaxcrawl.experiments import _common

    mem = types.SimpleNamespace(argument_size_in_bytes=100, output_size_in_bytes=20, temp_size_in_bytes=130)
    one = lambda: types.SimpleNamespace(compile=lambda: types.SimpleNamespace(memory_analysis=lambda: mem))  # noqa: E731
    assert _common.per_call(20, 1, one) == 1  # this machine is a CPU
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    device = types.SimpleNamespace(memory_stats=lambda: {"bytes_limit": 2_000})
    monkeypatch.setattr(jax, "devices", lambda *a: [device])
    assert _common.per_call(20, 1, one) == 4  # 0.5 * 2000 // 250
    assert _common.per_call(3, 1, one) == 3
    device.memory_stats = lambda: {"bytes_limit": 100}
    assert _common.per_call(20, 1, one) == 1
