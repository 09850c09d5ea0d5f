"""``jaxcrawl evaluate`` (jaxcrawl.policy_eval).

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

import jaxcrawl
from jaxcrawl import CrawlProblem, cli
from jaxcrawl.io import read_plan, read_problem, write_problem
from jaxcrawl.policy_eval import plan_policy

Z = 4.0


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    d = tmp_path_factory.mktemp("evaluate")
    rng = np.random.default_rng(0)
    n = 300
    ids = np.array([f"https://example.org/{i}" for i in range(n)], object)
    write_problem(d / "pages.csv", ids, rng.lognormal(1.0, 1.0, n), np.exp(rng.normal(np.log(0.4), 1.0, n)),
                      rng.random(n) < 0.1)
    return d


def _last_json(capsys):
    out = capsys.readouterr().out
    return out, json.loads(out.strip().splitlines()[-1])


def _plan_policy_of(pages, plan, bandwidth):
    t = read_problem(pages)
    problem = CrawlProblem(jnp.asarray(t.importance, jnp.float32), jnp.asarray(t.change_rate, jnp.float32),
                           bandwidth, jnp.asarray(t.complete))
    p = read_plan(plan)
    order = {str(k): i for i, k in enumerate(p.page_id.tolist())}
    idx = np.array([order[str(k)] for k in t.page_id.tolist()])
    return problem, plan_policy(problem, p.rate[idx], p.prob[idx])


def _solve_plan(table, capsys):
    pages, plan = table / "pages.csv", table / "plan.csv"
    if not plan.exists():
        assert cli.main(["solve", "-i", str(pages), "-o", str(plan), "--bandwidth", "60"]) == 0
        capsys.readouterr()
    return pages, plan


@pytest.mark.long
def test_plan_evaluates_to_the_closed_forms_exactly(table, capsys):
    pages, plan = _solve_plan(table, capsys)
    assert cli.main(["evaluate", "-i", str(pages), "--bandwidth", "60", "--plan", str(plan),
                     "--no-monte-carlo"]) == 0
    out, summary = _last_json(capsys)
    (row,) = summary["results"]
    problem, policy = _plan_policy_of(pages, plan, 60.0)
    assert row["harmonic_cost"] == float(jaxcrawl.harmonic_cost(problem, policy))
    assert row["binary_cost"] == float(jaxcrawl.binary_cost(problem, policy))
    per_page = np.asarray(jaxcrawl.binary_cost(problem, policy, per_page=True), np.float64)
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
    assert heur["method"] == "monte carlo" and heur["executed_method"] == "simulated rule"
    assert heur["executed_harmonic_cost_se"] > 0 and heur["crawl_rate_se"] >= 0
    # the rule's per-page rates crawled as Poisson processes cost no less than the Poisson
    # optimum at their total (convexity); a page the rule did not crawl in the horizon has rate 0
    assert heur["binary_gap"] >= -1e-4 * heur["optimal_binary"]
    if heur["harmonic_cost"] is not None:
        assert heur["harmonic_gap"] >= -1e-4 * heur["optimal_harmonic"]
    else:
        assert heur["notes"]["pages_not_crawled_in_horizon"] >= 1
    assert 0 < heur["executed_fresh_fraction"] < 1
    assert binary["executed_method"] == "periodic closed form"
    assert binary["executed_binary_cost"] <= binary["binary_cost"] * (1 + 1e-5)  # periodic beats Poisson
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


@pytest.mark.long
def test_constraints_bounded_plan_has_zero_gap_and_capped_violations_are_flagged():
    """Under revisit bounds, a bounded LambdaCrawl plan evaluates to harmonic_cost/binary_cost
    exactly, breaks nothing and is 0 from the (bounded) optimum at its volume; with host
    caps that bind, the unconstrained plan is flagged over its caps and beats the capped
    optimum (its gap is negative: the caps cost freshness)."""
    import jaxcrawl
    from jaxcrawl.policy_eval import Constraints, evaluate_policy

    rng = np.random.default_rng(0)
    n = 200
    imp, lam = rng.lognormal(0.0, 1.0, n), rng.lognormal(np.log(0.5), 1.0, n)
    comp = rng.uniform(size=n) < 0.1
    problem = CrawlProblem(jnp.asarray(imp, jnp.float32), jnp.asarray(lam, jnp.float32), 40.0, jnp.asarray(comp))
    lo, hi = np.full(n, 0.02), np.where(comp, np.inf, 1.5)
    bounded = Constraints(min_rate=lo, max_rate=hi)
    pol = jaxcrawl.solve(problem, "harmonic", bounds=(lo, hi))
    rep = evaluate_policy(problem, pol, monte_carlo=False, constraints=bounded)
    assert rep.harmonic_cost == float(jaxcrawl.harmonic_cost(problem, pol))
    assert rep.binary_cost == float(jaxcrawl.binary_cost(problem, pol))
    assert rep.notes == {"violations": {}}
    assert abs(rep.harmonic_gap) <= 1e-5 * abs(rep.optimal_harmonic)
    # an unbounded optimum breaks the bounds (named), and is no worse than the bounded one
    free = jaxcrawl.solve(problem, "harmonic")
    rep = evaluate_policy(problem, free, monte_carlo=False, constraints=bounded)
    assert rep.notes["violations"]["pages_below_min_rate"] >= 1 and rep.harmonic_gap <= 1e-6
    # host caps that bind: the free plan is over them
    host = np.arange(n) % 4
    totals = np.bincount(host, weights=np.asarray(free.rate, np.float64))
    caps = Constraints(host_id=host, host_cap=np.where(np.arange(4) == 0, 0.5 * totals[0], np.inf))
    rep = evaluate_policy(problem, free, monte_carlo=False, constraints=caps)
    v = rep.notes["violations"]
    assert v["hosts_over_cap"] == 1 and v["worst_host"].startswith("#0")
    assert rep.harmonic_gap < 0  # below the capped optimum at the same volume
    rep = evaluate_policy(problem, "harmonic", monte_carlo=False, constraints=caps)  # solved under the caps
    assert rep.notes == {"violations": {}} and abs(rep.harmonic_gap) <= 1e-5 * abs(rep.optimal_harmonic)


@pytest.mark.long
def test_cli_evaluate_reads_bounds_and_host_caps(tmp_path, capsys):
    """`jaxcrawl evaluate` with the example page table (revisit-bound columns) and
    --host-caps: a plan solved by `jaxcrawl solve` under the same caps breaks nothing; the
    plan solved without caps is reported over them."""
    import os
    import shutil

    ex = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")
    shutil.copy(os.path.join(ex, "pages.csv"), tmp_path / "pages.csv")
    (tmp_path / "caps.csv").write_text("host_id,cap\nwww.site00.example,2\nwww.site01.example,3\n")  # they bind
    pages, caps = str(tmp_path / "pages.csv"), str(tmp_path / "caps.csv")
    assert cli.main(["solve", "--input", pages, "--host-caps", caps, "-o", str(tmp_path / "capped.csv"), "-q"]) == 0
    assert cli.main(["solve", "--input", pages, "-o", str(tmp_path / "free.csv"), "-q"]) == 0
    capsys.readouterr()
    for plan, over in (("capped.csv", False), ("free.csv", True)):
        assert cli.main(["evaluate", "--input", pages, "--host-caps", caps, "--plan", str(tmp_path / plan),
                         "--no-monte-carlo"]) == 0
        out = capsys.readouterr().out
        result = json.loads(out.strip().splitlines()[-1])["results"][0]
        assert ("hosts_over_cap" in result["notes"]["violations"]) == over, result["notes"]
        assert "revisit bounds; host caps" in out


@pytest.mark.long
def test_matched_rule_reports_its_documented_settings(table, capsys):
    """``NAME@matched``: the JSON row carries the settings used, inside the crawler's
    documented ranges, and says the bandwidth was reached; the long-run crawl volume of
    those settings, re-measured on fresh fetch chains, is the bandwidth within 3% plus 4
    standard errors.  (Its cost may fall below the optimum's: LambdaCrawl is optimal among
    Poisson crawl policies, and a rule whose minimum interval binds crawls fast pages
    near-periodically.)"""
    assert cli.main(["evaluate", "-i", str(table / "pages.csv"), "--bandwidth", "60", "--policy",
                     "stormcrawler-adaptive@matched", "--no-monte-carlo"]) == 0
    out, summary = _last_json(capsys)
    row = summary["results"][0]
    notes = row["notes"]
    assert notes["matching"] == "documented range" and notes["in_range"] is True and notes["reached"] is True
    assert 0 < notes["rate_incr"] <= 1 and 0 < notes["rate_decr"] <= 1
    assert 0 < notes["fetch_interval_min"] <= notes["fetch_interval_max"]
    assert row["method"] == "long run"
    assert abs(row["crawl_rate"] - 60.0) <= 0.03 * 60.0 + Z * row["crawl_rate_se"], row["crawl_rate"]
    assert row["harmonic_cost_se"] > 0 and "rate_incr=" in out
