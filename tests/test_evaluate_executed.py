"""``jaxcrawl evaluate`` costs a plan as it is executed, through the real command line.

* A solver's plan with ``periodic_rate`` (complete pages pinned at a revisit floor above
  their change rate) evaluates to the plan's bandwidth, breaks none of the bounds it was
  solved under, and its Poisson costs are the library's ``harmonic_cost``/``binary_cost``
  of the plan's policy.
* Its executed (periodic) costs equal a plain NumPy/SciPy transcription of the closed
  form written here: a page crawled every ``1/rho`` costs
  ``mu (Ein(u) - 1 + (1 - e^-u)/u)`` harmonic and ``mu (1 - (1 - e^-u)/u)`` binary with
  ``u = lambda/rho`` (``Ein(u) = E1(u) + ln u + gamma``); a signal page ``-mu ln p`` and
  ``mu (1 - p)``, ``p = min(rate/lambda, 1)``.
* Crawl delays are host caps (``solve``'s rule): a plan solved under them breaks none, one
  solved without them is reported over them.
* A crawler's rule matched to the bandwidth crawls the bandwidth, and its Poisson cost (its
  per-page rates as Poisson processes) is never below the Poisson optimum at its volume.
"""
import json

import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import exp1

import jaxcrawl
from jaxcrawl import CrawlProblem, cli
from jaxcrawl.io import read_plan, read_problem
from jaxcrawl.policy_eval import plan_policy

GAMMA = 0.5772156649015329


def _pages(path, n=240, seed=0):
    """A page table whose slow complete pages carry a revisit floor above their change rate."""
    rng = np.random.default_rng(seed)
    imp = rng.lognormal(0.0, 0.8, n)
    lam = np.exp(rng.normal(np.log(0.5), 0.8, n))
    comp = (np.arange(n) % 8) == 0
    lam = np.where(comp & (np.arange(n) % 16 == 0), 0.05, lam)   # slow signalling pages
    max_iv = np.where(comp & (np.arange(n) % 16 == 0), 4.0, np.inf)  # floor 0.25 > 0.05
    hosts = [f"www.site{i % 4:02d}.example" for i in range(n)]
    lines = ["page_id,importance,change_rate,complete,min_interval,max_interval"]
    lines += [f"https://{h}/p{i}.html,{imp[i]:.6g},{lam[i]:.6g},{int(comp[i])},0,{max_iv[i]}"
              for i, h in enumerate(hosts)]
    path.write_text("\n".join(lines) + "\n")
    return path


def _run(capsys, argv):
    assert cli.main(argv) == 0, capsys.readouterr().err
    cap = capsys.readouterr()
    return cap, json.loads(cap.out.strip().splitlines()[-1])


def _periodic_reference(mu, lam, rate, prob):
    """The periodic execution's page-averaged (harmonic, binary) costs, in float64."""
    signal = prob > 0
    r = np.where(rate > 0, rate, 1.0)
    u = lam / r
    ein = exp1(u) + np.log(u) + GAMMA
    phi1 = -np.expm1(-u) / u
    harm = np.where(signal, -mu * np.log(np.minimum(rate / lam, 1.0)), mu * (ein - 1.0 + phi1))
    binary = np.where(signal, mu * (1.0 - np.minimum(rate / lam, 1.0)), mu * (1.0 - phi1))
    return harm.mean(), binary.mean()


@pytest.fixture(scope="module")
def solved(tmp_path_factory):
    d = tmp_path_factory.mktemp("executed")
    pages = _pages(d / "pages.csv")
    assert cli.main(["solve", "-i", str(pages), "-o", str(d / "plan.csv"), "--bandwidth", "50", "-q"]) == 0
    return pages, d / "plan.csv"


@pytest.mark.long
def test_plan_periodic_rate_is_honoured_volume_and_bounds(solved, capsys):
    pages, plan = solved
    p = read_plan(plan)
    assert np.sum(p.periodic_rate > 0) >= 5   # the fixture really has pinned signal pages
    cap, summary = _run(capsys, ["evaluate", "-i", str(pages), "--bandwidth", "50", "--plan", str(plan),
                                 "--no-monte-carlo"])
    (row,) = summary["results"]
    assert row["crawl_rate"] == pytest.approx(50.0, rel=1e-5)
    assert row["crawl_rate"] == pytest.approx(float(np.sum(p.rate)), rel=1e-5)
    assert row["notes"]["violations"] == {}
    # the Poisson cost is the library's cost of the plan's policy (periodic_rate included)
    t = read_problem(pages)
    order = {str(k): i for i, k in enumerate(p.page_id.tolist())}
    idx = np.array([order[str(k)] for k in t.page_id.tolist()])
    problem = CrawlProblem(jnp.asarray(t.importance, jnp.float32), jnp.asarray(t.change_rate, jnp.float32), 50.0,
                           jnp.asarray(t.complete))
    pol = plan_policy(problem, p.rate[idx], p.prob[idx], p.periodic_rate[idx])
    assert row["harmonic_cost"] == pytest.approx(float(jaxcrawl.harmonic_cost(problem, pol)), rel=1e-6)
    assert row["binary_cost"] == pytest.approx(float(jaxcrawl.binary_cost(problem, pol)), rel=1e-6)
    # the executed cost is the periodic closed form, written out above
    rate = np.where(p.prob[idx] > 0, p.prob[idx] * t.change_rate + p.periodic_rate[idx], p.rate[idx])
    h, b = _periodic_reference(t.importance, t.change_rate, rate, p.prob[idx])
    assert row["executed_method"] == "periodic closed form"
    assert row["executed_harmonic_cost"] == pytest.approx(h, rel=2e-4)
    assert row["executed_binary_cost"] == pytest.approx(b, rel=2e-4)
    # periodic crawling never costs more than Poisson crawling at the same rates
    assert row["executed_harmonic_cost"] <= row["harmonic_cost"] * (1 + 1e-5)
    assert row["executed_binary_cost"] <= row["binary_cost"] * (1 + 1e-5)
    # the plan is the (bounded) Poisson optimum: gap 0; the executed reference is the same plan run periodically
    assert abs(row["harmonic_gap"]) <= 1e-4 * row["optimal_harmonic"]
    assert abs(row["executed_harmonic_gap"]) <= 1e-4 * row["executed_reference_harmonic"]
    assert "Poisson" in cap.out and "executed" in cap.out and "not the optimum over periodic" in cap.out
    # one progress line per stage on a log (stderr is not a terminal here), the seconds itemised
    assert "jaxcrawl evaluate: read" in cap.err and "jaxcrawl evaluate: plan" in cap.err
    assert {"read", "plan", "other", "total"} <= set(summary["seconds"])


@pytest.mark.long
def test_plan_without_periodic_column_misses_the_floors(solved, capsys, tmp_path):
    """The same plan with its periodic_rate column dropped crawls less than the bandwidth and
    misses the revisit floors of exactly the pinned pages."""
    pages, plan = solved
    p = read_plan(plan)
    lines = ["page_id,rate,prob"] + [f"{i},{float(r)!r},{float(q)!r}" for i, r, q in zip(p.page_id.tolist(), p.rate, p.prob)]
    (tmp_path / "plain.csv").write_text("\n".join(lines) + "\n")
    _, summary = _run(capsys, ["evaluate", "-i", str(pages), "--bandwidth", "50", "--plan",
                               str(tmp_path / "plain.csv"), "--no-monte-carlo"])
    (row,) = summary["results"]
    pinned = int(np.sum(p.periodic_rate > 0))
    assert row["crawl_rate"] == pytest.approx(50.0 - float(np.sum(p.periodic_rate)), rel=1e-5)
    assert row["notes"]["violations"]["pages_below_min_rate"] == pinned


@pytest.mark.long
def test_crawl_delays_are_host_caps_as_for_solve(tmp_path, capsys):
    pages = _pages(tmp_path / "pages.csv")
    (tmp_path / "delays.csv").write_text("host,crawl_delay\nwww.site00.example,14400\nwww.site01.example,600\n")
    delays = str(tmp_path / "delays.csv")
    assert cli.main(["solve", "-i", str(pages), "--bandwidth", "50", "--crawl-delays", delays,
                     "-o", str(tmp_path / "polite.csv"), "-q"]) == 0
    assert cli.main(["solve", "-i", str(pages), "--bandwidth", "50", "-o", str(tmp_path / "free.csv"), "-q"]) == 0
    capsys.readouterr()
    for plan, over in (("polite.csv", False), ("free.csv", True)):
        cap, summary = _run(capsys, ["evaluate", "-i", str(pages), "--bandwidth", "50", "--crawl-delays", delays,
                                     "--plan", str(tmp_path / plan), "--no-monte-carlo"])
        row = summary["results"][0]
        assert ("hosts_over_cap" in row["notes"]["violations"]) == over, row["notes"]
        assert row["crawl_rate"] == pytest.approx(50.0, rel=1e-5)
        assert "host caps" in cap.out


@pytest.mark.long
def test_matched_rule_crawls_the_bandwidth_and_its_poisson_cost_is_above_the_optimum(tmp_path, capsys):
    pages = _pages(tmp_path / "pages.csv", n=400, seed=1)
    _, summary = _run(capsys, ["evaluate", "-i", str(pages), "--bandwidth", "80", "--policy",
                               "nutch-adaptive@matched", "--no-monte-carlo"])
    (row,) = summary["results"]
    assert row["notes"]["reached"] is True and row["method"] == "long run"
    assert abs(row["crawl_rate"] - 80.0) <= 0.03 * 80.0 + 4 * row["crawl_rate_se"], row["crawl_rate"]
    # Poisson cost at any per-page rates is at least the Poisson optimum at their total (convexity)
    assert row["harmonic_gap"] >= -1e-4 * row["optimal_harmonic"]
    assert row["binary_gap"] >= -1e-4 * row["optimal_binary"]
    assert row["executed_method"] == "long run" and row["executed_harmonic_cost_se"] > 0


def test_plan_policy_counts_periodic_crawls_of_signal_pages():
    """A signal page's policy rate is prob x change_rate plus its periodic_rate, so the plan's
    volume is the sum of its rate column; other pages keep their rate."""
    lam = np.array([0.05, 0.5, 2.0, 1.0])
    comp = np.array([1.0, 1.0, 0.0, 0.0])
    problem = CrawlProblem(jnp.ones(4, jnp.float32), jnp.asarray(lam, jnp.float32), 3.0, jnp.asarray(comp))
    rate = np.array([0.25, 0.3, 1.5, 0.95])
    prob = np.array([1.0, 0.6, 0.0, 0.0])
    periodic = np.array([0.2, 0.0, 0.0, 0.0])
    pol = plan_policy(problem, rate, prob, periodic)
    np.testing.assert_allclose(np.asarray(pol.rate, np.float64), rate, rtol=1e-6)
    assert np.asarray(pol.on_signal).tolist() == [True, True, False, False]
    # without the column the pinned page falls to its signal rate
    np.testing.assert_allclose(np.asarray(plan_policy(problem, rate, prob).rate)[0], 0.05, rtol=1e-6)
    with pytest.raises(ValueError, match="periodic_rate"):
        plan_policy(problem, rate, prob, -periodic)
