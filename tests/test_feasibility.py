"""One feasibility rule on every path and objective: the bandwidth an all-signal problem
cannot use is refused by ``solve`` and ``stream`` alike (whatever the objective, with one
message); a refusal within float32 rounding says that float32 makes it infeasible and that
``--x64`` solves it; a revisit bound below an objective's own floor names the page (exit 2)
where the jitted command-line solve could only have come back not converged."""

import jax.numpy as jnp
import numpy as np
import pytest

import jaxcrawl
from jaxcrawl.core.bounds import check_usable_bandwidth
from jaxcrawl.core.solve import check_solvable
from jaxcrawl.io import write_page_table
from jaxcrawl.parallel import StreamedTable

from helpers import run_cli as run


def error_line(err):
    return [line for line in err.splitlines() if ": error: " in line][-1].split(": error: ", 1)[1]


# ------------------------------------------------------------------ all-signal bandwidth
def test_check_usable_bandwidth_is_the_rule():
    check_usable_bandwidth(2.4, 0, 2.5)  # below the total change rate
    check_usable_bandwidth(10.0, 1, 2.5)  # one page that is not complete: every bandwidth is usable
    with pytest.raises(ValueError, match="every page is complete and their total change rate is 2.5, but "
                                         "bandwidth is 2.5"):
        check_usable_bandwidth(2.5, 0, 2.5)
    with pytest.raises(ValueError, match="total change rate is 3.0, but bandwidth is 4.0"):  # a batch: the first bad
        check_usable_bandwidth(np.array([1.0, 4.0]), np.array([0, 0]), np.array([2.0, 3.0]))


@pytest.mark.parametrize("objective", ["binary", "harmonic", "binary-epsilon"])
def test_stream_refuses_the_bandwidth_an_all_signal_table_cannot_use_as_solve_does(tmp_path, objective):
    n = 5
    imp, lam, comp = np.arange(1.0, n + 1), np.full(n, 0.5), np.ones(n, bool)
    write_page_table(str(tmp_path / "table"), imp, lam, comp)
    with open(tmp_path / "pages.csv", "w") as fh:
        fh.write("page_id,importance,change_rate,complete\n")
        fh.writelines(f"p{i},{imp[i]},{lam[i]},1\n" for i in range(n))
    code, _, err_stream = run(["stream", "--table", tmp_path / "table", "--objective", objective, "--bandwidth", 10,
                               "-o", tmp_path / "rates.npy", "-q"])
    assert code == 2 and not (tmp_path / "rates.npy").exists()
    code, _, err_solve = run(["solve", "-i", tmp_path / "pages.csv", "--objective", objective, "--bandwidth", 10,
                              "-o", tmp_path / "plan.csv", "-q"])
    assert code == 2 and not (tmp_path / "plan.csv").exists()
    assert error_line(err_stream) == error_line(err_solve)
    assert "every page is complete and their total change rate is 2.5, but bandwidth is 10.0" in err_stream
    # the library: a streamed table and a problem in memory, one message
    with pytest.raises(ValueError) as streamed:
        StreamedTable(str(tmp_path / "table"), 10.0)
    with pytest.raises(ValueError) as in_memory:
        jaxcrawl.CrawlProblem(jnp.asarray(imp), jnp.asarray(lam), 10.0, jnp.asarray(comp))
    assert str(streamed.value) == str(in_memory.value)
    with pytest.raises(ValueError) as rows:  # rows spread over processes (here one)
        jaxcrawl.solve(jaxcrawl.parallel.ProcessRows(imp, lam, comp, 10.0), objective)
    assert str(rows.value) == str(in_memory.value)


@pytest.mark.long
def test_stream_of_an_all_signal_table_below_its_change_rate_still_solves(tmp_path):
    n = 4
    write_page_table(str(tmp_path / "table"), np.ones(n), np.full(n, 0.5), np.ones(n, bool))
    code, _, err = run(["stream", "--table", tmp_path / "table", "--objective", "binary", "--bandwidth", 1.5,
                        "-o", tmp_path / "rates.npy", "-q"])
    assert code == 0, err
    rate = np.load(tmp_path / "rates.npy")
    assert rate.sum() == pytest.approx(1.5, rel=1e-5)


# ------------------------------------------------------------------ float32 rounding
def _capped_pages(tmp_path):
    """7 pages of a.example with a revisit floor of 1/3 a day and a cap of 7/3: the cap equals
    the floors' sum, which float32 rounds above the float32 cap."""
    lines = ["page_id,importance,change_rate,max_interval"]
    lines += [f"http://a.example/{i},1,0.5,3" for i in range(7)]
    lines += [f"http://b{i}.example/,1,0.5," for i in range(5)]
    (tmp_path / "pages.csv").write_text("\n".join(lines) + "\n")
    (tmp_path / "caps.csv").write_text(f"host_id,cap\na.example,{7 / 3!r}\n")


@pytest.mark.long
def test_a_float32_cap_equal_to_its_floors_says_float32_rounding_and_x64(tmp_path):
    _capped_pages(tmp_path)
    argv = ["solve", "-i", tmp_path / "pages.csv", "--bandwidth", 3, "--host-caps", tmp_path / "caps.csv",
            "-o", tmp_path / "plan.csv", "-q"]
    code, _, err = run(argv)
    assert code == 2 and not (tmp_path / "plan.csv").exists()
    msg = error_line(err)
    assert "float32 rounding makes it infeasible" in msg and "--x64" in msg
    assert "host 'a.example'" in msg and "host 0" not in msg  # the host by name, not an index
    code, _, err = run(argv + ["--x64"])
    assert code == 0, err
    assert (tmp_path / "plan.csv").exists()


def test_a_bandwidth_over_the_caps_by_float32_rounding_says_x64():
    # every page on one host capped at 1: a bandwidth 1 + 1e-7 (float32: one ulp above 1) is
    # more than the caps allow by no more than the rounding of the inputs
    n = 7
    problem = jaxcrawl.CrawlProblem(jnp.ones(n, jnp.float32), jnp.full(n, 0.5, jnp.float32), 1 + 1e-7)
    caps = jaxcrawl.HostCaps(np.zeros(n, np.int32), np.array([1.0], np.float32))
    with pytest.raises(ValueError, match="exceeds the most the host caps allow.*float32 rounding makes it "
                                         "infeasible.*--x64"):
        check_solvable(problem, "harmonic", caps=caps)
    problem = jaxcrawl.CrawlProblem(jnp.ones(n, jnp.float32), jnp.full(n, 0.5, jnp.float32), 1.01)
    with pytest.raises(ValueError, match="exceeds the most the host caps allow") as err:  # not rounding: no hint
        check_solvable(problem, "harmonic", caps=caps)
    assert "--x64" not in str(err.value)


# ------------------------------------------------------------------ bounds under an objective's floor
def test_a_revisit_bound_below_the_binary_epsilon_floor_names_the_page(tmp_path):
    lines = ["page_id,importance,change_rate,min_interval"]
    lines += [f"http://a.example/{i},1,{0.3 + 0.1 * i},{20 if i == 2 else 0}" for i in range(7)]
    (tmp_path / "pages.csv").write_text("\n".join(lines) + "\n")
    # floor: epsilon R / n = 0.4 * 1.4 / 7 = 0.08 a day; page 2 may be crawled at most every 20 days (0.05)
    code, _, err = run(["solve", "-i", tmp_path / "pages.csv", "--objective", "binary-epsilon", "--bandwidth", 1.4,
                        "-o", tmp_path / "plan.csv", "-q"])
    assert code == 2 and not (tmp_path / "plan.csv").exists()
    msg = error_line(err)
    assert "page 'http://a.example/2'" in msg and "lower must be <= upper" in msg and "epsilon" in msg
    # the library says the same, naming the page when given the ids
    dtype = jnp.result_type(float)
    problem = jaxcrawl.CrawlProblem(jnp.ones(7, dtype), jnp.asarray(0.3 + 0.1 * np.arange(7), dtype), 1.4)
    upper = jnp.asarray(np.where(np.arange(7) == 2, 0.05, np.inf), dtype)
    ids = [f"http://a.example/{i}" for i in range(7)]
    with pytest.raises(ValueError, match=r"page 'http://a.example/2' has lower 0\.0799.* > upper 0\.05"):
        check_solvable(problem, jaxcrawl.binary(0.4), bounds=(None, upper), page_id=ids)
    with pytest.raises(ValueError, match="page 2 has lower"):  # an eager solve: by index
        jaxcrawl.solve(problem, jaxcrawl.binary(0.4), bounds=(None, upper))
    rows = jaxcrawl.parallel.ProcessRows(np.ones(7), 0.3 + 0.1 * np.arange(7), np.zeros(7, bool), 1.4,
                                         page_id=np.asarray(ids))
    with pytest.raises(ValueError, match=r"page 'http://a.example/2' has lower 0\.0799.* > upper 0\.05"):
        jaxcrawl.solve(rows, jaxcrawl.binary(0.4), bounds=(None, np.asarray(upper)))
