"""``jaxcrawl evaluate`` (jaxcrawl.cli.evaluate, jaxcrawl.policy_eval).

* A LambdaCrawl plan written by ``jaxcrawl solve`` evaluates to exactly
  ``harmonic_cost`` / ``binary_cost`` of the plan's policy, and its Monte-Carlo figures
  are within 4 standard errors of them; the gap to the optimum at the same volume is 0
  for the harmonic cost.
* Heuristic rows are Monte Carlo with standard errors, and no policy beats the optimum
  at its own crawl volume (beyond 4 SE).
* Bad input is rejected with exit status 2 and a message naming the argument.
"""
import json

import jax.numpy as jnp
import numpy as np
import pytest

from jaxcrawl import cli, objectives
from jaxcrawl.io import read_plan_csv, read_problem_csv, write_problem_csv
from jaxcrawl.policy_eval import plan_policy
from jaxcrawl.problem import CrawlProblem

Z = 4.0


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    d = tmp_path_factory.mktemp("evaluate")
    rng = np.random.default_rng(0)
    n = 300
    ids = np.array([f"https://example.org/{i}" for i in range(n)], object)
    write_problem_csv(d / "pages.csv", ids, rng.lognormal(1.0, 1.0, n), np.exp(rng.normal(np.log(0.4), 1.0, n)),
                      rng.random(n) < 0.1)
    return d


def _last_json(capsys):
    out = capsys.readouterr().out
    return out, json.loads(out.strip().splitlines()[-1])


def _plan_policy_of(pages, plan, bandwidth):
    t = read_problem_csv(pages)
    problem = CrawlProblem(jnp.asarray(t.importance, jnp.float32), jnp.asarray(t.change_rate, jnp.float32),
                           bandwidth, jnp.asarray(t.complete))
    p = read_plan_csv(plan)
    order = {str(k): i for i, k in enumerate(p.page_id.tolist())}
    idx = np.array([order[str(k)] for k in t.page_id.tolist()])
    return problem, plan_policy(problem, p.rate[idx], p.prob[idx])


def _solve_plan(table, capsys):
    pages, plan = table / "pages.csv", table / "plan.csv"
    if not plan.exists():
        assert cli.main(["solve", "-i", str(pages), "-o", str(plan), "--bandwidth", "60"]) == 0
        capsys.readouterr()
    return pages, plan


def test_plan_evaluates_to_the_closed_forms_exactly(table, capsys):
    pages, plan = _solve_plan(table, capsys)
    assert cli.main(["evaluate", "-i", str(pages), "--bandwidth", "60", "--plan", str(plan),
                     "--no-monte-carlo"]) == 0
    out, summary = _last_json(capsys)
    (row,) = summary["results"]
    problem, policy = _plan_policy_of(pages, plan, 60.0)
    assert row["harmonic_cost"] == float(objectives.harmonic_cost(problem, policy))
    assert row["binary_cost"] == float(objectives.binary_cost(problem, policy))
    per_page = np.asarray(objectives.binary_cost(problem, policy, per_page=True), np.float64)
    assert row["fresh_fraction"] == pytest.approx(1 - per_page.sum() / np.asarray(problem.importance).sum(), rel=1e-5)
    assert row["crawl_rate"] == pytest.approx(60.0, rel=1e-5)
    # a LambdaCrawl plan is the harmonic optimum at its own volume; the binary one is lower
    assert row["harmonic_gap"] == pytest.approx(0.0, abs=1e-4 * row["harmonic_cost"])
    assert row["binary_gap"] > 0
    assert row["monte_carlo"] is None and "plan:" in out


@pytest.mark.long
def test_plan_monte_carlo_is_within_4_se_of_the_closed_forms(table, capsys):
    pages, plan = _solve_plan(table, capsys)
    assert cli.main(["evaluate", "-i", str(pages), "--bandwidth", "60", "--plan", str(plan), "--horizon", "40",
                     "--seeds", "4"]) == 0
    out, summary = _last_json(capsys)
    (row,) = summary["results"]
    assert "(simulated)" in out
    mc = row["monte_carlo"]
    assert mc["overflow"] == 0
    for f in ("harmonic_cost", "binary_cost", "fresh_fraction", "crawl_rate"):
        assert abs(mc[f] - row[f]) <= Z * mc[f + "_se"], (f, mc[f], row[f], mc[f + "_se"])


@pytest.mark.long
def test_heuristic_and_optimal_rows(table, capsys, tmp_path):
    pages = table / "pages.csv"
    fig = tmp_path / "fig.png"
    assert cli.main(["evaluate", "-i", str(pages), "--bandwidth", "60", "--compare", "binary,heritrix-wait",
                     "--horizon", "10", "--burn-in", "30", "--no-monte-carlo", "--figure", str(fig)]) == 0
    out, summary = _last_json(capsys)
    binary, heur = summary["results"]
    assert binary["method"] == "closed form" and binary["binary_gap"] == pytest.approx(0.0, abs=1e-4)
    assert binary["monte_carlo"] is None
    assert heur["method"] == "monte carlo" and heur["harmonic_cost_se"] > 0 and heur["crawl_rate_se"] >= 0
    # nothing beats the optimum at its own crawl volume
    assert heur["harmonic_gap"] >= -Z * heur["harmonic_cost_se"]
    assert heur["binary_gap"] >= -Z * heur["binary_cost_se"]
    assert 0 < heur["fresh_fraction"] < 1
    assert fig.exists() and fig.stat().st_size > 1000


@pytest.mark.parametrize("argv, message", [
    (["--policy", "no-such-policy"], "unknown policy"),
    ([], "--plan"),
    (["--policy", "harmonic", "--seeds", "1"], "--seeds"),
])
def test_bad_arguments_exit_2(table, capsys, argv, message):
    code = cli.main(["evaluate", "-i", str(table / "pages.csv"), "--no-monte-carlo", *argv])
    assert code == 2
    assert message in capsys.readouterr().err
