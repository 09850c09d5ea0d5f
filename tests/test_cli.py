import json

import numpy as np
import pytest

import jaxcrawl
from jaxcrawl import CrawlProblem
from jaxcrawl.cli import main


def last_json(capsys):
    out = capsys.readouterr().out.strip().splitlines()
    return json.loads(out[-1])


@pytest.mark.x64
def test_solve_csv_roundtrip(tmp_path, capsys):
    rng = np.random.default_rng(0)
    n = 50
    mu, lam = rng.lognormal(size=(2, n))
    comp = rng.random(n) < 0.2
    src = tmp_path / "pages.csv"
    with open(src, "w") as fh:
        fh.write("page_id,importance,change_rate,complete\n")
        for i in range(n):
            fh.write(f"url{i},{float(mu[i])!r},{float(lam[i])!r},{int(comp[i])}\n")
    out = tmp_path / "plan.csv"
    assert main(["solve", "-i", str(src), "-o", str(out), "--bandwidth", "10", "--x64"]) == 0
    summary = last_json(capsys)
    plan = np.genfromtxt(out, delimiter=",", names=True, dtype=None, encoding=None)
    assert list(plan["page_id"]) == [f"url{i}" for i in range(n)]
    p = CrawlProblem(mu, lam, 10.0, comp)
    pol = jaxcrawl.lambda_crawl(p)
    np.testing.assert_allclose(plan["rate"], pol.rate, rtol=1e-9)
    np.testing.assert_allclose(plan["prob"], pol.prob, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(summary["harmonic_cost"], float(jaxcrawl.harmonic_cost(p, pol)), rtol=1e-9)
    np.testing.assert_allclose(summary["dual"], float(pol.dual), rtol=1e-9)


@pytest.mark.parametrize("objective", ["harmonic", "harmonic-approx", "binary", "binary-epsilon", "delay",
                                       pytest.param("uniform", marks=pytest.mark.long)])
def test_solve_synthetic_default_every_objective(objective, capsys):
    assert main(["solve", "--num-pages", "500", "--objective", objective]) == 0
    s = last_json(capsys)
    assert s["num_pages"] == 500 and abs(s["budget_residual"]) <= 1e-5 * 100
    assert s["converged"] is True and abs(s["budget_residual"]) <= s["budget_tolerance"]


@pytest.mark.parametrize(
    "content, needle",
    [
        ("page_id,importance,change_rate\na,1,1\nb,-1,1\n", ":3: importance must be finite and > 0"),
        ("page_id,importance,change_rate\na,1,1\nb,1\n", ":3: expected 3 fields"),
        ("page_id,importance,change_rate\na,1,x\n", ":2: change_rate 'x' is not a number"),
        ("page_id,importance,change_rate,complete\na,1,1,maybe\n", ":2: complete must be a boolean"),
        ("id,imp,rate\na,1,1\n", ":1: header"),
        ("", "empty"),
        ("page_id,importance,change_rate\n", "no pages"),
        ("page_id,importance,change_rate\na,1,nan\n", ":2: change_rate must be finite"),
    ],
)
def test_malformed_csv_names_the_line(tmp_path, capsys, content, needle):
    src = tmp_path / "bad.csv"
    src.write_text(content)
    assert main(["solve", "-i", str(src)]) == 2
    err = capsys.readouterr().err
    assert needle in err and "bad.csv" in err


def test_bandwidth_the_problem_cannot_use(tmp_path, capsys):
    src = tmp_path / "all_complete.csv"
    src.write_text("page_id,importance,change_rate,complete\na,1,1,1\nb,1,2,1\n")
    assert main(["solve", "-i", str(src), "--bandwidth", "5"]) == 2
    assert "bandwidth exceeds what the problem can use" in capsys.readouterr().err


def test_version_and_reproduce_list_without_matplotlib(monkeypatch, capsys):
    import sys

    import jaxcrawl
    from jaxcrawl.cli import main

    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0 and capsys.readouterr().out.strip() == f"jaxcrawl {jaxcrawl.__version__}"
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # "not installed"
    assert main(["reproduce", "--list"]) == 0
    out = capsys.readouterr().out
    assert "neurips19_fig1" in out and "Traceback" not in out
    assert main(["reproduce", "neurips19_fig1", "--quick"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pip install 'jaxcrawl[plots]'" in err[0]
