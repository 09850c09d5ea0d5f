"""Inputs as operators write them: estimates that are not the clip, spreadsheet tables with
blank cells, revisit floors above a complete page's change rate (periodic crawls beside its
signals), invalid inputs under ``jit`` reported as not converged, and float32 refusals that
say to solve in float64."""
import csv
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxcrawl
from jaxcrawl.cli._estimate import estimate_rates
from jaxcrawl.io import read_histories, read_problem

from helpers import run_cli as run

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE_HISTORIES = os.path.join(ROOT, "examples", "histories.csv")


def rows(path):
    with open(path, newline="") as fh:
        return {r["page_id"]: r for r in csv.DictReader(fh)}


# ------------------------------------------------------------------ safe estimation
def test_default_estimator_clips_no_page_of_the_documented_histories():
    h = read_histories(EXAMPLE_HISTORIES)
    default, _ = estimate_rates(h)
    assert np.all(default > 1e-9 * 1.01) and np.all(default < 25.0 * 0.99)
    # the plain MLE puts the histories with no change / a change at every crawl on the clip:
    # the prior is what keeps them off it
    # and it is the prior that does it: these histories include some with no change and
    # some with a change at every crawl, which the plain MLE puts on the clip
    changes = np.add.reduceat(h.obs_changed.astype(np.int64), np.r_[0, np.cumsum(h.num_observations)[:-1]])
    assert np.any(changes == 0) and np.any(changes == np.asarray(h.num_observations))


def test_naive_problem_table_is_solvable_and_clipped_pages_are_flagged(tmp_path):
    hist = tmp_path / "h.csv"
    hist.write_text("page_id,interval,changed,importance\n"
                    "a,1,0,1\na,2,0,1\n"        # no change seen: naive 0 -> the lower clip
                    "b,1,1,2\nb,1,0,2\n"
                    "c,0.5,1,1\nc,0.5,1,1\n")   # a change at every crawl
    code, out, err = run(["estimate", hist, "--estimator", "naive", "--columns", "problem",
                          "-o", tmp_path / "p.csv", "-q"])
    assert code == 0, err
    table = read_problem(tmp_path / "p.csv")  # change_rate > 0 is the reader's rule
    assert table.change_rate.min() == pytest.approx(1e-9, rel=1e-6)
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["pages_at_min_rate"] == 1 and "mle-smoothed" in " ".join(summary["clip_advice"])
    code, out, err = run(["estimate", hist, "--estimator", "naive", "--max-rate", "1.5", "-o", tmp_path / "f.csv",
                          "-q"])
    assert code == 0, err
    flags = {k: (r["clipped"], float(r["change_rate"])) for k, r in rows(tmp_path / "f.csv").items()}
    assert flags == {"a": ("low", pytest.approx(1e-9, rel=1e-6)), "b": ("", 0.5), "c": ("high", 1.5)}


# ------------------------------------------------ spreadsheet CSV + a complete page's floor
def test_spreadsheet_csv_with_blank_bounds_and_a_floor_above_a_change_rate_solves(tmp_path):
    # blank optional cells mean the default; page c is complete, changes every 30 days and
    # must be crawled at least every 14: every signal plus periodic crawls
    (tmp_path / "pages.csv").write_text(
        "page_id,importance,change_rate,complete,min_interval,max_interval\n"
        "a,1,0.5,0,,\n"
        "b,2,0.1,,1, \n"
        "c,1,0.0333333333333,1,,14\n"
        "d,3,1.5,1,,\n")
    code, out, err = run(["solve", "-i", tmp_path / "pages.csv", "--bandwidth", "1.5", "-o",
                          tmp_path / "plan.csv", "-q"])
    assert code == 0, err
    plan = {k: (float(r["rate"]), float(r["prob"])) for k, r in rows(tmp_path / "plan.csv").items()}
    assert plan["c"][0] == pytest.approx(1 / 14, rel=1e-5) and plan["c"][1] == pytest.approx(1.0)
    assert plan["b"][0] <= 1.0 + 1e-6  # min_interval 1 -> at most one crawl a day
    assert sum(r for r, _ in plan.values()) == pytest.approx(1.5, rel=1e-5)


@pytest.mark.parametrize("objective", ["harmonic", pytest.param("harmonic-approx", marks=pytest.mark.long)])
def test_floor_above_a_complete_pages_change_rate_is_periodic_and_kkt_holds(objective):
    rng = np.random.default_rng(7)
    n = 40
    imp = rng.uniform(0.2, 3.0, n)
    lam = rng.uniform(0.05, 2.0, n)
    comp = rng.random(n) < 0.4
    floor = np.where(rng.random(n) < 0.5, rng.uniform(0.0, 0.5, n), 0.0)
    comp[:5], lam[:5], floor[:5] = True, rng.uniform(0.02, 0.1, 5), rng.uniform(0.1, 0.5, 5)
    pinned = comp & (floor > lam)
    assert pinned.sum() >= 5
    R = 0.3 * lam.sum() + floor.sum()
    dtype = jnp.result_type(float)
    problem = jaxcrawl.CrawlProblem(jnp.asarray(imp, dtype), jnp.asarray(lam, dtype), R, jnp.asarray(comp))
    pol = jaxcrawl.solve(problem, objective, bounds=(jnp.asarray(floor, dtype), None))
    rate, prob = np.asarray(pol.rate, np.float64), np.asarray(pol.prob, np.float64)
    tol = 1e-10 if dtype == jnp.float64 else 2e-5
    assert bool(pol.converged)
    # the budget counts the periodic crawls; pinned pages crawl every signal plus rate - lam on a timer
    assert rate.sum() == pytest.approx(R, rel=tol * 10)
    np.testing.assert_allclose(rate[pinned], floor[pinned], rtol=tol)
    np.testing.assert_allclose(prob[pinned], 1.0)
    assert np.all(rate >= floor * (1 - tol)) and np.all(rate[comp] <= np.maximum(lam, floor)[comp] * (1 + tol))
    # the other pages are the optimum of the problem without the pinned pages and their budget
    rest = ~pinned
    sub = jaxcrawl.CrawlProblem(jnp.asarray(imp[rest], dtype), jnp.asarray(lam[rest], dtype),
                                R - floor[pinned].sum(), jnp.asarray(comp[rest]))
    ref = jaxcrawl.solve(sub, objective, bounds=(jnp.asarray(floor[rest], dtype), None))
    np.testing.assert_allclose(rate[rest], np.asarray(ref.rate), rtol=50 * tol, atol=50 * tol * R / n)
    if objective == "harmonic":  # KKT: one marginal value on the pages strictly inside their box
        hi = np.where(comp, lam, np.inf)
        inside = rest & (rate > floor * (1 + 1e-3)) & (rate < hi * (1 - 1e-3))
        marginal = np.where(comp, imp / rate, imp * lam / (rate * (rate + lam)))[inside]
        assert inside.sum() >= 5
        np.testing.assert_allclose(marginal, marginal.mean(), rtol=100 * tol)


# --------------------------------------------------------- invalid inputs under jit
BAD = [("importance", np.nan), ("importance", np.inf), ("importance", -1.0), ("change_rate", np.nan),
       ("change_rate", np.inf), ("change_rate", -0.5), ("change_rate", 0.0), ("bandwidth", np.nan),
       ("bandwidth", np.inf), ("bandwidth", -1.0), ("bandwidth", 0.0), ("lower", np.nan)]


@pytest.mark.parametrize("objective", ["harmonic", "harmonic-approx", "delay"] + [
    pytest.param(name, marks=pytest.mark.long) for name in ("binary", "binary-epsilon", "uniform")])
def test_invalid_inputs_under_jit_are_not_converged(objective):
    n = 6
    imp = np.tile([1.0, 2.0, 0.5, 1.0, 3.0, 0.7], (len(BAD) + 1, 1))
    lam = np.tile([0.3, 0.5, 1.0, 0.2, 2.0, 0.1], (len(BAD) + 1, 1))
    bw = np.ones(len(BAD) + 1)
    lower = np.zeros((len(BAD) + 1, n))
    for k, (name, value) in enumerate(BAD):  # row k: one bad value; the last row is valid
        if name == "bandwidth":
            bw[k] = value
        else:
            {"importance": imp, "change_rate": lam, "lower": lower}[name][k, -1] = value
    comp = np.zeros(n, bool)
    comp[0] = True

    @jax.jit
    def converged(i, c, b, lo):
        return jax.vmap(lambda i, c, b, lo: jaxcrawl.solve(jaxcrawl.CrawlProblem(i, c, b, comp), objective,
                                                           bounds=(lo, None)).converged)(i, c, b, lo)

    dtype = jnp.result_type(float)
    got = np.asarray(converged(*(jnp.asarray(a, dtype) for a in (imp, lam, bw, lower))))
    assert not got[:-1].any(), [BAD[k] for k in np.flatnonzero(got[:-1])]
    assert got[-1]


# --------------------------------------------------------- float32 rounding refusals
def test_a_cap_equal_to_the_sum_of_floors_solves_in_float64_and_says_so_in_float32():
    n = 12
    host = np.array([0] * 7 + [-1] * 5)
    floor = np.where(host == 0, 1 / 3, 0.0)
    dtype = jnp.result_type(float)
    problem = jaxcrawl.CrawlProblem(jnp.ones(n, dtype), jnp.full(n, 0.5, dtype), 3.0)
    caps = jaxcrawl.HostCaps(host, np.array([7 / 3]))
    if dtype == jnp.float32:
        with pytest.raises(ValueError, match="solve in float64"):
            jaxcrawl.solve(problem, "harmonic", caps=caps, bounds=(jnp.asarray(floor, dtype), None))
        rows = jaxcrawl.parallel.ProcessRows(np.ones(n), np.full(n, 0.5), np.zeros(n, bool), 3.0)
        with pytest.raises(ValueError, match="solve in float64"):  # the multi-process solve says so too
            jaxcrawl.solve(rows, "harmonic", caps=caps, bounds=(floor, None))
        return
    pol = jaxcrawl.solve(problem, "harmonic", caps=caps, bounds=(jnp.asarray(floor, dtype), None))
    rate = np.asarray(pol.rate)
    assert bool(pol.converged) and rate[:7].sum() == pytest.approx(7 / 3, rel=1e-12)
    assert rate.sum() == pytest.approx(3.0, rel=1e-12)


def test_a_plan_rate_float32_cannot_hold_is_named_or_harmless(tmp_path):
    """A plan written by an --x64 solve may hold rates float32 cannot.  One past float32's
    range is refused by schedule and evaluate --plan, naming the page and suggesting --x64;
    a tiny one (never crawled in float64 either) is timetabled as never crawled."""
    from helpers import expect_cli_error

    pages = tmp_path / "pages.csv"
    pages.write_text("page_id,importance,change_rate\na,1,1\nb,1,2\nc,1,0.5\n")
    plan = tmp_path / "plan.csv"
    out = tmp_path / "timetable.csv"
    schedule = ["schedule", "--plan", plan, "--horizon", "2", "-q", "-o", out]
    evaluate = ["evaluate", "-i", pages, "--plan", plan, "--bandwidth", "2", "--seeds", "2", "--horizon", "5",
                "--no-monte-carlo", "-q"]
    plan.write_text("page_id,rate,prob,periodic_rate\na,1,0,0\nb,1e300,0,0\nc,0.5,0,0\n")
    expect_cli_error(schedule, "page 'b'", "--x64")
    assert not out.exists()
    expect_cli_error(evaluate, "rate 1e+300 at page 'b' (data row 2", str(plan), "--x64", "would become inf")
    plan.write_text("page_id,rate,prob,periodic_rate\na,1,0,0\nb,1e-300,0,0\nc,0.5,0,0\n")
    for x64 in ([], ["--x64"]):
        code, _, err = run(schedule + x64)
        assert code == 0, err
        assert "b" not in [line.split(",")[1] for line in out.read_text().splitlines()[1:]]
