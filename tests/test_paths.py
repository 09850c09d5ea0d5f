"""One solve, every page source: ``jaxcrawl.solve`` of pages in memory, of a table streamed
chunk by chunk (:class:`jaxcrawl.parallel.StreamedTable`: ``.npy`` directory, CSV and Parquet
page tables) and of rows spread over processes (:class:`jaxcrawl.parallel.ProcessRows`, one
process here; two in tests/test_distributed.py) gives the same plan and dual, with host caps
and revisit bounds, for every built-in objective (float64: rates to 1e-12 of the largest
rate, duals to 1e-12 relative).  An option a source cannot honour is an error naming it."""
import jax
import numpy as np
import pytest

import jaxcrawl
from jaxcrawl.io import read_problem, write_page_table, write_problem
from jaxcrawl.parallel import ProcessRows, StreamedTable

N, H = 600, 5
CHUNK = 256  # three chunks, the last one padded
OBJECTIVES = {
    "harmonic": jaxcrawl.harmonic,
    "binary": jaxcrawl.binary,
    "binary(0.25)": lambda: jaxcrawl.binary(0.25),
    "binary-epsilon": lambda: "binary-epsilon",
    "delay": jaxcrawl.delay,
    "uniform": jaxcrawl.uniform,
}
FORMATS = ["table", "table.parquet", "table.csv"]


def pages(seed=0, n=N):
    rng = np.random.default_rng(seed)
    imp = rng.lognormal(0.0, 1.5, n)
    lam = rng.lognormal(-0.5, 1.0, n)
    comp = rng.random(n) < 0.2
    return imp, lam, comp, 0.3 * n


def limits(objective, problem):
    """Revisit bounds (a floor on some incomplete pages, a ceiling on others) and host caps
    half-way between each even host's floors and its share of the bounded optimum (so
    they bind, and stay above the floors, BLC-epsilon's included); odd hosts uncapped."""
    n, R = problem.num_pages, float(problem.bandwidth)
    rng = np.random.default_rng(1)
    pick = rng.random(n)
    comp = np.asarray(problem.complete) != 0
    lower = np.where((pick < 0.1) & ~comp, 2.0 * R / n, 0.0)
    upper = np.where(pick > 0.9, 0.6 * R / n, np.inf)  # above the BLC-epsilon floors
    host = (np.arange(n) % (H + 1) - 1).astype(np.int32)  # -1: no host
    free = np.asarray(jaxcrawl.solve(problem, objective, bounds=(lower, upper)).rate)
    obj = jaxcrawl.objective(objective)
    floor = np.maximum(lower, np.asarray(obj.page_bounds(obj.params(problem), R, n, np.float64)[0]))
    has = host >= 0
    total = np.bincount(host[has], weights=free[has], minlength=H)
    least = np.bincount(host[has], weights=floor[has], minlength=H)
    cap = np.where(np.arange(H) % 2 == 0, least + 0.5 * (total - least), np.inf)
    return (lower, upper), jaxcrawl.HostCaps(host, cap)


def assert_same(got, want, what):
    rate, ref = np.asarray(got.rate, np.float64), np.asarray(want.rate, np.float64)
    assert rate.shape == ref.shape, what
    assert bool(got.converged) and bool(want.converged), what
    err = np.max(np.abs(rate - ref))
    assert err <= 1e-12 * np.max(ref), (what, err / np.max(ref))
    assert abs(float(got.dual) - float(want.dual)) <= 1e-12 * abs(float(want.dual)), \
        (what, float(got.dual), float(want.dual))
    if want.host_dual is not None:
        kd, kw = np.asarray(got.host_dual, np.float64), np.asarray(want.host_dual, np.float64)
        assert np.max(np.abs(kd - kw)) <= 1e-12 * max(np.max(kw), abs(float(want.dual))), (what, kd, kw)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """The problem as a ``.npy`` table, a Parquet and a CSV page table."""
    d = tmp_path_factory.mktemp("paths")
    imp, lam, comp, _ = pages()
    write_page_table(str(d / "table"), imp, lam, comp)
    for name in FORMATS[1:]:
        write_problem(str(d / name), np.arange(N), imp, lam, comp)
    return d


def problem_of(path):
    """The problem exactly as a source reads it from ``path`` (a CSV's printed digits)."""
    t = read_problem(str(path))
    return jaxcrawl.CrawlProblem(np.asarray(t.importance, np.float64), np.asarray(t.change_rate, np.float64),
                                 pages()[3], np.asarray(t.complete, bool))


@pytest.mark.x64
@pytest.mark.long
@pytest.mark.parametrize("name", OBJECTIVES)
def test_process_rows_and_streamed_table_equal_in_memory(files, name):
    """In memory vs ProcessRows (caps and bounds, and neither) vs a StreamedTable of the
    ``.npy`` table (bounds; streamed solves take no caps)."""
    objective = OBJECTIVES[name]()
    problem = problem_of(files / "table")
    bounds, caps = limits(objective, problem)
    imp, lam, comp = (np.asarray(a) for a in (problem.importance, problem.change_rate, problem.complete))
    R = float(problem.bandwidth)
    capped = jaxcrawl.solve(problem, objective, caps=caps, bounds=bounds)
    assert np.any(np.asarray(capped.host_dual) > 0), name  # the caps bind
    rows = ProcessRows(imp, lam, comp, R)
    assert rows.start == 0 and rows.num_pages == N
    assert_same(jaxcrawl.solve(rows, objective, caps=caps, bounds=bounds), capped, f"{name} rows capped")
    assert_same(jaxcrawl.solve(rows, objective), jaxcrawl.solve(problem, objective), f"{name} rows")
    bounded = jaxcrawl.solve(problem, objective, bounds=bounds)
    rate = np.asarray(bounded.rate)
    assert np.any(rate <= bounds[0] * (1 + 1e-12)) or np.any(rate >= bounds[1] * (1 - 1e-12)), name
    src = StreamedTable(files / "table", R, chunk_size=CHUNK, progress=False)
    streamed = jaxcrawl.solve(src, objective, bounds=bounds)
    assert_same(streamed, bounded, f"{name} streamed")
    np.testing.assert_array_equal(np.asarray(streamed.on_signal), np.asarray(bounded.on_signal))


@pytest.mark.x64
@pytest.mark.parametrize("fmt", [pytest.param(f, marks=pytest.mark.long) if f == "table" else f for f in FORMATS])
@pytest.mark.parametrize("name", [n if n == "harmonic" else pytest.param(n, marks=pytest.mark.long)
                                  for n in OBJECTIVES])
def test_page_table_files_equal_in_memory(files, fmt, name, tmp_path):
    """ProcessRows.read of a ``.npy`` directory, a Parquet and a CSV page table (caps and
    bounds) and a StreamedTable of the table read from the file (bounds, the plan written
    to a ``.npy`` file) equal the in-memory solve of the values in the file."""
    objective = OBJECTIVES[name]()
    problem = problem_of(files / fmt)
    bounds, caps = limits(objective, problem)
    R = float(problem.bandwidth)
    rows = ProcessRows.read(str(files / fmt), R)
    np.testing.assert_array_equal(np.asarray(rows.page_id).astype(np.int64), np.arange(N))
    assert_same(jaxcrawl.solve(rows, objective, caps=caps, bounds=bounds),
                jaxcrawl.solve(problem, objective, caps=caps, bounds=bounds), f"{name} {fmt} rows")
    table = read_problem(str(files / fmt))
    src = StreamedTable(table, R, chunk_size=CHUNK, out=str(tmp_path / "rate.npy"), progress=False)
    streamed = jaxcrawl.solve(src, objective, bounds=bounds)
    assert streamed.prob is None and streamed.on_signal is None  # the plan went to the file
    bounded = jaxcrawl.solve(problem, objective, bounds=bounds)
    assert_same(streamed, bounded, f"{name} {fmt} streamed")
    assert np.max(np.abs(np.load(tmp_path / "rate.npy") - np.asarray(bounded.rate))) <= 1e-12 * np.max(bounded.rate)


def test_harmonic_approx_in_memory_only(files):
    """LambdaCrawlApprox couples pages: solved in memory, refused by name by the streamed
    and the process sources."""
    problem = problem_of(files / "table")
    pol = jaxcrawl.solve(problem, "harmonic-approx")
    assert bool(pol.converged)
    R = float(problem.bandwidth)
    imp, lam, comp = (np.asarray(a) for a in (problem.importance, problem.change_rate, problem.complete))
    for src in (StreamedTable(files / "table", R, chunk_size=CHUNK, progress=False), ProcessRows(imp, lam, comp, R)):
        for objective in ("harmonic-approx", jaxcrawl.harmonic_approx()):
            with pytest.raises(ValueError, match="harmonic-approx"):
                jaxcrawl.solve(src, objective)


def test_an_option_a_source_cannot_honour_is_an_error_naming_it(files):
    problem = problem_of(files / "table")
    R = float(problem.bandwidth)
    imp, lam, comp = (np.asarray(a) for a in (problem.importance, problem.change_rate, problem.complete))
    stream = StreamedTable(files / "table", R, chunk_size=CHUNK, progress=False)
    rows = ProcessRows(imp, lam, comp, R)
    caps = jaxcrawl.HostCaps(np.zeros(N, np.int32), np.array([R]))
    with pytest.raises(ValueError, match="caps"):
        jaxcrawl.solve(stream, "harmonic", caps=caps)
    for src in (stream, rows):
        with pytest.raises(ValueError, match="adjoint"):
            jaxcrawl.solve(src, "harmonic", adjoint="unrolled")
    assert stream.num_passes == 0  # refused before any read of the table
    bad = [("max_steps", dict(max_steps=0)), ("max_steps", dict(max_steps=2.5)), ("max_steps", dict(max_steps=True)),
           ("rtol", dict(rtol=0.0)), ("rtol", dict(rtol=1.0)), ("rtol", dict(rtol=float("nan"))),
           ("adjoint", dict(adjoint="forward")), ("throw", dict(throw="yes"))]
    for src in (problem, stream, rows):
        for name, option in bad:
            with pytest.raises(ValueError, match=name):
                jaxcrawl.solve(src, "harmonic", **option)


@pytest.mark.long
@pytest.mark.x64
def test_sources_report_non_convergence_like_in_memory(files):
    """One root-finding step is not enough on any source: converged is False everywhere,
    and throw=True raises NonConvergenceError."""
    problem = problem_of(files / "table")
    R = float(problem.bandwidth)
    imp, lam, comp = (np.asarray(a) for a in (problem.importance, problem.change_rate, problem.complete))
    for src in (problem, StreamedTable(files / "table", R, chunk_size=CHUNK, progress=False),
                ProcessRows(imp, lam, comp, R)):
        assert not bool(jaxcrawl.solve(src, "harmonic", max_steps=1).converged), type(src).__name__
        with pytest.raises(jaxcrawl.NonConvergenceError):
            jax.block_until_ready(jaxcrawl.solve(src, "harmonic", max_steps=1, throw=True).rate)
