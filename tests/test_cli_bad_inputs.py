"""Bad and extreme inputs on the command line: a correct result or a clear error, no lost file.

Every case runs ``jaxcrawl.cli.main(argv)`` in-process and asserts

* the exit status (2: bad argument or input, naming the argument or ``file:line``; 3: a
  result the final guard refused, naming what failed and the first page),
* that every file present before the run (inputs and a previous output) is byte-identical
  afterwards, and that no temporary file is left next to them,

or, for an extreme input that is valid, that the written result is correct (rates finite,
summing to the bandwidth).  Page ids that need quoting round-trip from ``solve`` and
``estimate`` to ``schedule``.
"""
import contextlib
import io
import json
import os
from pathlib import Path

import numpy as np
import pytest

from jaxcrawl import cli

PAGES = "page_id,importance,change_rate\na,1,1\nb,2,0.5\nc,0.5,3\n"
PLAN = "page_id,rate,prob\na,1,0\nb,2,0\nc,0.5,0\n"
HIST = "page_id,interval,changed\na,1,1\na,1,0\nb,2,1\n"
OLD = b"previous output, must survive\n"


def run(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


def snapshot(directory: Path) -> dict:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


def expect_error(tmp_path, argv, status, *needles):
    before = snapshot(tmp_path)
    code, out, err = run(argv)
    assert code == status, (code, out[-500:], err)
    for needle in needles:
        assert needle in err, (needle, err)
    assert snapshot(tmp_path) == before  # nothing changed, nothing new (no temporary file)
    return err


@pytest.fixture
def files(tmp_path):
    (tmp_path / "pages.csv").write_text(PAGES)
    (tmp_path / "plan.csv").write_text(PLAN)
    (tmp_path / "hist.csv").write_text(HIST)
    (tmp_path / "out.csv").write_bytes(OLD)
    return tmp_path


# ----------------------------------------------------------------- malformed page tables

@pytest.mark.parametrize("body,needle", [
    ("page_id,importance,change_rate\na,1,1\nb,nan,1\n", "pages.csv:3: importance must be finite and > 0, got 'nan'"),
    ("page_id,importance,change_rate\na,1,1\nb,1,-2\n", "pages.csv:3: change_rate must be finite and > 0"),
    ("page_id,importance,change_rate\na,0,1\n", "pages.csv:2: importance must be finite and > 0, got '0'"),
    ("page_id,importance,change_rate\na,inf,1\n", "pages.csv:2: importance"),
    ("page_id,importance,change_rate\na,1e400,1\n", "pages.csv:2: importance"),
    ("page_id,importance,change_rate\na,x,1\n", "pages.csv:2: importance"),
    ("", "pages.csv: empty file"),
    ("page_id,importance,change_rate\n", "pages.csv: no pages"),
    ("page_id,imp,change_rate\na,1,1\n", "pages.csv:1: header"),
    ("page_id,importance\na,1\n", "pages.csv:1"),
    ("page_id,importance,change_rate\na,1,1\nb,1\n", "pages.csv:3"),
    ("page_id,importance,change_rate\na,1,1\na,2,1\n", "pages.csv:3: duplicate page_id 'a' (first on line 2)"),
    ("page_id,importance,change_rate\na,1,1\n,2,1\n", "pages.csv:3: empty page_id"),
])
def test_solve_malformed_table(files, body, needle):
    (files / "pages.csv").write_text(body)
    expect_error(files, ["solve", "-i", files / "pages.csv", "--bandwidth", 1, "-o", files / "out.csv", "-q"],
                 2, needle)


@pytest.mark.parametrize("flag,value", [("--bandwidth", 0), ("--bandwidth", -1), ("--bandwidth", "nan"),
                                        ("--bandwidth", "inf"), ("--bandwidth-fraction", 0),
                                        ("--bandwidth-fraction", "-0.5"), ("--bandwidth-fraction", "inf")])
def test_solve_bad_bandwidth_names_the_argument(files, flag, value):
    expect_error(files, ["solve", "-i", files / "pages.csv", flag, value, "-o", files / "out.csv", "-q"],
                 2, f"{flag} must be finite and > 0")


@pytest.mark.parametrize("flag,value,needle", [("--max-steps", 0, "--max-steps must be >= 1"),
                                               ("--rtol", 0, "--rtol must be in (0, 1)"),
                                               ("--rtol", "nan", "--rtol must be in (0, 1)"),
                                               ("--max-interval", 0, "--max-interval must be > 0"),
                                               ("--num-pages", 0, "--num-pages must be >= 1")])
def test_solve_bad_options(files, flag, value, needle):
    argv = ["solve", "-i", files / "pages.csv", "--bandwidth", 1, flag, value, "-o", files / "out.csv", "-q"]
    if flag == "--num-pages":
        argv = ["solve", flag, value, "-o", files / "out.csv", "-q"]
    expect_error(files, argv, 2, needle)


# ----------------------------------------------------------------- outputs over inputs

@pytest.mark.parametrize("spelling", ["same", "relative", "symlink", "hardlink"])
def test_output_equal_to_input_is_refused(files, spelling, monkeypatch):
    src = files / "pages.csv"
    out = {"same": src, "relative": files / "." / "pages.csv", "symlink": files / "link.csv",
           "hardlink": files / "hard.csv"}[spelling]
    if spelling == "symlink":
        os.symlink(src, out)
    if spelling == "hardlink":
        os.link(src, out)
    expect_error(files, ["solve", "-i", src, "--bandwidth", 1, "-o", out, "-q"], 2,
                 "the output is the input file")


def test_every_command_refuses_its_input_as_output(files):
    expect_error(files, ["estimate", files / "hist.csv", "-o", files / "hist.csv", "-q"], 2,
                 "the output is the input file")
    expect_error(files, ["schedule", "-p", files / "plan.csv", "--horizon", 1, "-o", files / "plan.csv", "-q"],
                 2, "the output is the input file")


# ----------------------------------------------------------------- estimate

@pytest.mark.parametrize("body,needle", [
    ("page_id,interval,changed\na,nan,1\n", "hist.csv:2: interval must be finite and > 0"),
    ("page_id,interval,changed\na,-1,1\n", "hist.csv:2: interval must be finite and > 0"),
    ("page_id,interval,changed\na,0,1\n", "hist.csv:2: interval"),
    ("page_id,interval,changed\na,1,2\n", "hist.csv:2: changed"),
    ("page_id,interval,changed\n,1,1\n", "hist.csv:2: empty page_id"),
    ("page_id,interval,changed,importance\na,1,1,2\na,1,0,3\n", "hist.csv:3: importance must be the same"),
    ("", "hist.csv"),
    ("page_id,interval\na,1\n", "hist.csv:1"),
])
def test_estimate_malformed_histories_keep_the_old_output(files, body, needle):
    (files / "hist.csv").write_text(body)
    expect_error(files, ["estimate", files / "hist.csv", "-o", files / "out.csv", "-q"], 2, needle)


@pytest.mark.parametrize("flag,value", [("--min-rate", 0), ("--min-rate", "nan"), ("--max-rate", "nan"),
                                        ("--smoothing", 0)])
def test_estimate_bad_options(files, flag, value):
    expect_error(files, ["estimate", files / "hist.csv", flag, value, "-o", files / "out.csv", "-q"], 2, flag)


# ----------------------------------------------------------------- schedule

@pytest.mark.parametrize("body,needle", [
    ("page_id,rate,prob\na,nan,0\n", "plan.csv:2: rate"),
    ("page_id,rate,prob\na,-1,0\n", "plan.csv:2: rate"),
    ("page_id,rate,prob\na,1,2\n", "plan.csv:2: prob"),
    ("page_id,rate,prob\na,1,0\na,2,0\n", "plan.csv:3: duplicate page_id 'a' (first on line 2)"),
    ("page_id,rate,prob\na,1,0\n,2,0\n", "plan.csv:3: empty page_id"),
    ("page_id,rate\na,1\n", "plan.csv:1"),
    ("", "plan.csv"),
])
def test_schedule_malformed_plan(files, body, needle):
    (files / "plan.csv").write_text(body)
    expect_error(files, ["schedule", "-p", files / "plan.csv", "--horizon", 2, "-o", files / "out.csv", "-q"],
                 2, needle)


@pytest.mark.parametrize("flag,value,needle", [("--horizon", 0, "--horizon"), ("--horizon", -1, "--horizon"),
                                               ("--horizon", "nan", "--horizon"), ("--start", "inf", "--start"),
                                               ("--start", "2026-13-45", "--start")])
def test_schedule_bad_options(files, flag, value, needle):
    options = {"--horizon": 2, flag: value}
    argv = ["schedule", "-p", files / "plan.csv", "-o", files / "out.csv", "-q"]
    for k, v in options.items():
        argv += [k, v]
    expect_error(files, argv, 2, needle)


def test_schedule_rate_beyond_float32_is_refused_in_float32_and_timetabled_in_float64(files):
    (files / "plan.csv").write_text("page_id,rate,prob\na,1e39,0\nb,1,0\n")
    expect_error(files, ["schedule", "-p", files / "plan.csv", "--horizon", "1e-38", "-o", files / "out.csv", "-q"],
                 2, "non-finite rates for 1 pages (first: page 'a'", "--x64")


@pytest.mark.parametrize("start", [pytest.param("1e6", marks=pytest.mark.long), "1.7e9"])
def test_schedule_epoch_seconds_start_in_float32_is_the_float64_timetable(files, start):
    """``--start`` in epoch seconds in float32 (the window's place on each page's grid is
    computed in float64, times since the start in float32): the same crawls as --x64 -- the
    same rows of pages, times within float32 rounding over the window -- and, on this plan
    (periods dividing --start), the same crawls as --start 0."""
    argv = ["schedule", "-p", files / "plan.csv", "--horizon", 4, "--phase", "zero", "-q"]
    assert run(argv + ["-o", files / "t0.csv"])[0] == 0
    code, out, err = run(argv + ["--start", start, "-o", files / "t32.csv"])
    assert code == 0, err
    assert run(argv + ["--start", start, "-o", files / "t64.csv", "--x64"])[0] == 0
    rows = {k: [r.split(",") for r in (files / f"{k}.csv").read_text().splitlines()[1:]] for k in ("t0", "t32", "t64")}
    assert [r[1] for r in rows["t32"]] == [r[1] for r in rows["t64"]]
    t32, t64 = (np.array([float(r[0]) for r in rows[k]]) for k in ("t32", "t64"))
    np.testing.assert_allclose(t32 - float(start), t64 - float(start), rtol=0, atol=4 * 4 * np.finfo(np.float32).eps)
    assert sorted(r[1] for r in rows["t0"]) == sorted(r[1] for r in rows["t32"])
    summary = json.loads(out.splitlines()[-1])
    assert summary["max_count_deviation"] < 1


@pytest.mark.long
def test_schedule_epoch_seconds_start_in_float64_is_the_shifted_timetable(files):
    argv = ["schedule", "-p", files / "plan.csv", "--horizon", 4, "--phase", "zero", "-q", "--x64"]
    assert run(argv + ["-o", files / "t0.csv"])[0] == 0
    assert run(argv + ["--start", "1.7e9", "-o", files / "t1.csv"])[0] == 0
    t0 = (files / "t0.csv").read_text().splitlines()
    t1 = (files / "t1.csv").read_text().splitlines()
    assert len(t0) == len(t1) == 1 + 4 * (1 + 2 + 0.5)
    assert sorted(r.split(",")[1] for r in t0[1:]) == sorted(r.split(",")[1] for r in t1[1:])


# ----------------------------------------------------------------- the final guard

def _broken_solve(monkeypatch, where=1):
    """jaxcrawl.solve with a NaN rate planted at page ``where`` (what a numerical failure gives)."""
    import jaxcrawl

    real = jaxcrawl.solve

    def broken(problem, utility, **kw):
        pol = real(problem, utility, **kw)
        return pol._replace(rate=pol.rate.at[where].set(np.nan))

    monkeypatch.setattr(jaxcrawl, "solve", broken)


def test_guard_refuses_non_finite_rates(files, monkeypatch):
    _broken_solve(monkeypatch)
    err = expect_error(files, ["solve", "-i", files / "pages.csv", "--bandwidth", 2, "-o", files / "out.csv", "-q"],
                       3, "non-finite rates for 1 pages (first: page 'b'", "--x64", "no plan written")
    assert "--x64" in err


@pytest.mark.long
def test_guard_in_float64_does_not_suggest_x64(files, monkeypatch):
    _broken_solve(monkeypatch)
    err = expect_error(files, ["solve", "-i", files / "pages.csv", "--bandwidth", 2, "-o", files / "out.csv", "-q",
                               "--x64"], 3, "non-finite rates for 1 pages (first: page 'b'")
    assert "--x64 (float64) may help" not in err  # already in float64


@pytest.mark.long
def test_check_names_the_page_of_a_bad_rate(files, monkeypatch):
    _broken_solve(monkeypatch, where=2)
    expect_error(files, ["solve", "-i", files / "pages.csv", "--bandwidth", 2, "-o", files / "out.csv", "-q",
                         "--check"], 2, "result.rate must be finite and >= 0: page 2, value nan")


@pytest.mark.long
def test_guard_refuses_a_solve_stopped_by_its_step_cap(files):
    rng = np.random.default_rng(0)
    imp, lam = rng.lognormal(size=(2, 200)) * [[1], [1e3]]
    (files / "pages.csv").write_text("page_id,importance,change_rate\n" + "".join(
        f"p{i},{float(imp[i])!r},{float(lam[i])!r}\n" for i in range(200)))
    expect_error(files, ["solve", "-i", files / "pages.csv", "--bandwidth", 3, "--max-steps", 1, "--rtol", 1e-6,
                         "-o", files / "out.csv", "-q"], 3, "did not converge", "raise --max-steps")


@pytest.mark.long
@pytest.mark.parametrize("bandwidth", ["1e-20", "1e15", "1e30"])
def test_extreme_bandwidth_is_solved_or_refused(files, bandwidth):
    """A bandwidth far from the page count: the plan is right (finite, budget met) or refused."""
    before = snapshot(files)
    code, out, err = run(["solve", "-i", files / "pages.csv", "--bandwidth", bandwidth, "-o", files / "out.csv",
                          "-q"])
    if code == 0:
        plan = np.genfromtxt(files / "out.csv", delimiter=",", names=True, dtype=None, encoding=None)
        assert np.all(np.isfinite(plan["rate"])) and np.all(plan["rate"] >= 0)
        np.testing.assert_allclose(plan["rate"].sum(), float(bandwidth), rtol=1e-5)
    else:
        assert code in (2, 3) and "error" in err
        assert snapshot(files) == before


@pytest.mark.long
def test_stream_guard_writes_nothing_on_failure(files):
    from jaxcrawl.io import write_page_table

    rng = np.random.default_rng(1)
    imp, lam = rng.lognormal(size=(2, 300)) * [[1], [1e3]]
    write_page_table(str(files / "table"), imp, lam, np.zeros(300, bool))
    rates = files / "rates.npy"
    rates.write_bytes(OLD)
    expect_error(files, ["stream", "--table", files / "table", "--bandwidth", 3, "--max-steps", 1, "--rtol", 1e-6,
                         "-o", rates], 3, "did not converge", "no rates written")
    assert run(["stream", "--table", files / "table", "--bandwidth", 3, "-o", rates])[0] == 0
    assert abs(float(np.load(rates).sum(dtype=np.float64)) - 3) < 1e-4
    assert sorted(p.name for p in files.iterdir()) == sorted(["hist.csv", "out.csv", "pages.csv", "plan.csv",
                                                              "rates.npy", "table"])


# ----------------------------------------------------------------- page ids through the chain

IDS = ['x,y', 'q"t', "new\nline", "'single'", "http://h/p?a=1,b=2", "ünï"]


def test_quoted_ids_round_trip_solve_to_schedule(tmp_path):
    import csv

    src = tmp_path / "pages.csv"
    with open(src, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["page_id", "importance", "change_rate"])
        for i, pid in enumerate(IDS):
            w.writerow([pid, 1 + i, 0.5 + i])
    assert run(["solve", "-i", src, "--bandwidth", 30, "-o", tmp_path / "plan.csv", "-q"])[0] == 0
    with open(tmp_path / "plan.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["page_id"] for r in rows] == IDS
    code, out, err = run(["schedule", "-p", tmp_path / "plan.csv", "--horizon", 1, "-o", tmp_path / "tt.csv", "-q"])
    assert code == 0, err
    with open(tmp_path / "tt.csv", newline="") as fh:
        seen = {r["page_id"] for r in csv.DictReader(fh)}
    assert seen == set(IDS)


@pytest.mark.long
def test_quoted_ids_round_trip_estimate_to_solve(tmp_path):
    import csv

    src = tmp_path / "hist.csv"
    with open(src, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["page_id", "interval", "changed", "importance"])
        for i, pid in enumerate(IDS):
            w.writerow([pid, 1, 1, 1 + i])
            w.writerow([pid, 2, 0, 1 + i])
    assert run(["estimate", src, "--columns", "problem", "-o", tmp_path / "est.csv", "-q"])[0] == 0
    assert run(["solve", "-i", tmp_path / "est.csv", "--bandwidth", 3, "-o", tmp_path / "plan.csv", "-q"])[0] == 0
    with open(tmp_path / "plan.csv", newline="") as fh:
        assert [r["page_id"] for r in csv.DictReader(fh)] == IDS


def test_check_result_verdicts_in_order():
    """The one final guard: not converged beats non-finite values, which beat another
    process's non-finite count, which beats a missed budget; a finite plan within tolerance
    passes; --x64 is suggested only in float32 and only where precision can help."""
    from jaxcrawl.cli._options import check_result

    ids = np.array(["a", "b", "c"])
    good = np.array([1.0, 2.0, 3.0])
    bad = np.array([1.0, np.nan, np.inf])
    kw = dict(bandwidth=6.0, tolerance=1e-6, dtype=np.float32)
    assert check_result({"rates": good}, ids, **kw) is None
    msg = check_result({"rates": bad}, ids, converged=False, num_steps=4, residual_before=3.0, **kw)
    assert "did not converge" in msg and "after 4 steps" in msg and "0.5 of the bandwidth" in msg
    assert "--x64" not in msg  # more steps, not more precision
    msg = check_result({"rates": bad}, ids, nonfinite_total=5, **kw)
    assert "non-finite rates for 2 pages (first: page 'b', value nan" in msg and "--x64" in msg
    msg = check_result({"rates": good}, ids, nonfinite_total=5, what="the solve (process 1)", **kw)
    assert msg.startswith("the solve (process 1) produced non-finite values for 5 pages in other processes")
    msg = check_result({"rates": good + 1e-3}, ids, **kw)
    assert "off the bandwidth 6 by 0.003" in msg and "--x64" in msg
    assert check_result({"rates": good + 1e-3}, ids, bandwidth=6.0, tolerance=1e-2, dtype=np.float64) is None
    assert "--x64" not in check_result({"rates": good + 1e-3}, ids, bandwidth=6.0, tolerance=1e-6, dtype=np.float64)


def test_solve_validates_file_values_in_the_working_dtype(tmp_path):
    """importance 1e-300 is a valid float64 in the file but 0 in float32: the error names
    the column, the page, the file and float32, suggests --x64, and writes nothing; with
    --x64 the same file solves."""
    (tmp_path / "tiny.csv").write_text("page_id,importance,change_rate\na,1.0,1.0\nb,1e-300,2.0\n")
    expect_error(tmp_path, ["solve", "--input", tmp_path / "tiny.csv", "-q", "-o", tmp_path / "plan.csv"], 2,
                 "importance 1e-300 at page 'b' (data row 2 of", "tiny.csv", "float32", "--x64")
    assert run(["solve", "--input", tmp_path / "tiny.csv", "-q", "--x64", "-o", tmp_path / "plan.csv"])[0] == 0


# ----------------------------------------------------------------- help and durations
def test_a_bad_duration_suffix_lists_the_accepted_suffixes(files):
    expect_error(files, ["solve", "-i", files / "pages.csv", "--bandwidth", "1", "--min-interval", "6x",
                         "-o", files / "out.csv", "-q"], 2, "--min-interval", "suffixes s, m, h, d, w")


def _help(*argv):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as stop:
        cli.build_parser().parse_args([*argv, "--help"])
    assert stop.value.code == 0
    return out.getvalue()


def test_help_names_the_interval_columns_and_no_file_of_the_checkout():
    text = _help("solve")
    assert "min_interval" in text and "max_interval" in text
    for name in ("",) + cli.COMMANDS:  # a pip install has no docs/ directory
        text = _help(*([name] if name else []))
        assert "docs/" not in text and ".md" not in text, name


@pytest.mark.usefixtures("fresh_sigint")
def test_a_sigint_inside_a_gc_callback_is_raised_after_the_collection(monkeypatch):
    """Raised inside a garbage-collector callback (JAX registers one), a KeyboardInterrupt is
    unraisable: printed as a traceback and lost.  The command's handler delivers it again."""
    import gc
    import signal
    import sys
    import time

    from jaxcrawl._src import interrupts

    unraisable = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    monkeypatch.setattr(interrupts, "GRACE_SECONDS", 600.0)  # a lost signal fails the test, not the run

    def in_collection(phase, info):
        if phase == "start":
            os.kill(os.getpid(), signal.SIGINT)
            sum(range(1000))  # the handler runs between these bytecodes, inside the callback

    with interrupts.handlers():
        gc.callbacks.append(in_collection)
        try:
            gc.collect()
        finally:
            gc.callbacks.remove(in_collection)
        with pytest.raises(KeyboardInterrupt):
            time.sleep(2)
        assert interrupts.received() == signal.SIGINT
    assert unraisable == []
