"""Passes over the pages of a large solve, counted (not timed): the search of
``jaxcrawl._src.search`` against the plain iteration it replaces at scale."""
import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import jaxcrawl
from jaxcrawl._src import budget as _budget
from jaxcrawl._src import search as _search

FULL = 18_500_000
SOLVERS = {"lambda_crawl": jaxcrawl.lambda_crawl, "binary_lambda_crawl": jaxcrawl.binary_lambda_crawl}
REDUCTIONS = {"reduce_sum", "reduce_max", "reduce_min", "argmax", "argmin", "reduce_and", "reduce_or",
              "reduce_prod", "reduce_precision_never"}


def executed_passes(monkeypatch, solver, problem):
    """The solve under ``jit`` with every pass over all ``n`` pages ticking a host counter
    when it runs (inside the loops too): ``(solution, passes, reads of the written plan)``."""
    n = problem.num_pages
    ticks = []

    def counted(orig, name):
        def method(self, *args):
            if self.n == n:
                jax.debug.callback(lambda: ticks.append(name))
            return orig(self, *args)
        return method

    for cls in (_budget.ArrayPages, _budget.BuiltPages):
        for name in ("reduce", "map", "total"):
            monkeypatch.setattr(cls, name, counted(getattr(cls, name), name))
    jax.clear_caches()
    sol = jax.block_until_ready(jax.jit(solver)(problem))
    jax.effects_barrier()
    jax.clear_caches()
    return sol, sum(t != "total" for t in ticks), sum(t == "total" for t in ticks)


def page_reductions(fn, *args, n):
    """``(in a pass, elsewhere)``: the reductions over ``n``-page operands in the program of
    ``fn``, by whether they lie in the reducer's name scope."""
    inside, outside = [], []

    def walk(jaxpr):
        for eqn in jaxpr.eqns:
            if eqn.primitive.name in REDUCTIONS and any(
                    getattr(v.aval, "shape", ())[-1:] == (n,) for v in eqn.invars if hasattr(v, "aval")):
                (inside if _budget.PASS_SCOPE in str(eqn.source_info.name_stack) else outside).append(eqn)
            for sub in jax.extend.core.jaxprs_in_params(eqn.params):
                walk(sub)

    walk(jax.make_jaxpr(fn)(*args).jaxpr)
    return inside, outside


@pytest.mark.parametrize("name", sorted(SOLVERS))
def test_every_page_reduction_of_a_large_solve_is_a_counted_pass(name):
    """No reduction over the pages hides outside the reducer: the checks, the importance
    unit and the log-gap test ride in the search's first pass."""
    n = 4 * _search.MIN_PAGES
    problem = jaxcrawl.synthetic(jax.random.key(1), n)
    inside, outside = page_reductions(SOLVERS[name], problem, n=n)
    assert inside and not outside, [str(e.primitive) + " " + str(e.source_info.name_stack) for e in outside]


@pytest.mark.parametrize("name", sorted(SOLVERS))
def test_a_small_solve_keeps_the_plain_iteration(name):
    """Below the threshold the importance unit (the largest importance) rides with the checks'
    statistics and the limits' in the plain iteration's first pass: no reduction of its own."""
    n = _search.MIN_PAGES // 2
    problem = jaxcrawl.synthetic(jax.random.key(2), n)
    inside, outside = page_reductions(SOLVERS[name], problem, n=n)
    assert inside and not outside, [str(e.primitive) + " " + str(e.source_info.name_stack) for e in outside]


@pytest.mark.parametrize("n", [1_000_000, pytest.param(FULL, marks=pytest.mark.long)], ids=["1M", "18.5M"])
@pytest.mark.parametrize("x64", [False, pytest.param(True, marks=(pytest.mark.x64, pytest.mark.long))], ids=["float32", "float64"])
@pytest.mark.parametrize("name", ["lambda_crawl", pytest.param("binary_lambda_crawl", marks=pytest.mark.long)])
def test_at_most_four_passes(monkeypatch, name, x64, n):
    """Mixed LambdaCrawl and BinaryLambdaCrawl on the benchmark problem (4% complete; 18.5M
    pages in the long lane): at most 4 passes over the pages -- the search's passes plus the
    write -- with the plain solve's tolerance: converged and the budget met."""
    dtype = jnp.float64 if x64 else jnp.float32
    problem = jaxcrawl.synthetic(jax.random.key(0), n, dtype=dtype)
    sol, passes, plan_reads = executed_passes(monkeypatch, SOLVERS[name], problem)
    assert bool(sol.converged)
    assert passes == int(sol.num_steps) + 1  # the search's passes and the write
    assert passes <= 4, passes
    assert plan_reads == 1  # the budget check of the written plan
    rtol = float(jaxcrawl._src.rootfind.default_rtol(dtype))
    total = float(np.sum(np.asarray(sol.rate, np.float64)))
    assert abs(total - float(problem.bandwidth)) <= 2 * rtol * float(problem.bandwidth)


@pytest.mark.parametrize("name", ["lambda_crawl", pytest.param("binary_lambda_crawl", marks=pytest.mark.long)])
def test_search_and_plain_iteration_agree(monkeypatch, name):
    """The same problem above and below the search's threshold (the plain iteration forced by
    raising it): the same dual to the tolerance, the same rates to it."""
    n = 2 * _search.MIN_PAGES
    problem = jaxcrawl.synthetic(jax.random.key(3), n)
    fast = jax.jit(SOLVERS[name])(problem)
    monkeypatch.setattr(_search, "MIN_PAGES", 10 * n)
    jax.clear_caches()
    plain = jax.jit(SOLVERS[name])(problem)
    jax.clear_caches()
    assert bool(fast.converged) and bool(plain.converged)
    tol = 4 * float(jaxcrawl._src.rootfind.default_rtol(jnp.float32))
    assert abs(float(fast.dual) / float(plain.dual) - 1) <= 8 * tol
    np.testing.assert_allclose(np.asarray(fast.rate), np.asarray(plain.rate), rtol=16 * tol, atol=1e-6)


@pytest.mark.long
@pytest.mark.parametrize("name", sorted(SOLVERS))
def test_the_accelerator_choices_on_this_machine(monkeypatch, name):
    """The search as an accelerator runs it (16 and 8 candidates per pass; the sample solved
    by fixed passes without a loop), run here: converged within 4 passes over the pages, the
    budget met, the dual of the CPU's choices to the tolerance."""
    n = 4 * _search.MIN_PAGES
    problem = jaxcrawl.synthetic(jax.random.key(4), n)
    cpu = jax.jit(SOLVERS[name])(problem)
    monkeypatch.setattr(_search, "BACKEND", "gpu")
    sol, passes, _ = executed_passes(monkeypatch, SOLVERS[name], problem)
    assert bool(sol.converged) and bool(cpu.converged)
    assert passes == int(sol.num_steps) + 1 <= 4
    tol = 4 * float(jaxcrawl._src.rootfind.default_rtol(jnp.float32))
    assert abs(float(sol.dual) / float(cpu.dual) - 1) <= 8 * tol
    assert abs(float(jnp.sum(sol.rate)) / float(problem.bandwidth) - 1) <= tol


@pytest.mark.long
@pytest.mark.parametrize("name", ["harmonic", "binary"])
def test_rows_of_processes_at_scale_equal_the_in_memory_solve(name):
    """The search on pages with padding rows (``jaxcrawl.parallel.ProcessRows``, one process):
    the in-memory solve's dual and rates."""
    from jaxcrawl import parallel

    n = _search.MIN_PAGES + 1
    problem = jaxcrawl.synthetic(jax.random.key(5), n)
    mem = jaxcrawl.solve(problem, name)
    src = parallel.ProcessRows(np.asarray(problem.importance), np.asarray(problem.change_rate),
                               np.asarray(problem.complete), float(problem.bandwidth))
    rows = jaxcrawl.solve(src, name)
    assert bool(mem.converged) and bool(rows.converged)
    tol = 4 * float(jaxcrawl._src.rootfind.default_rtol(jnp.float32))
    assert abs(float(rows.dual) / float(mem.dual) - 1) <= tol
    np.testing.assert_allclose(np.asarray(rows.rate), np.asarray(mem.rate), rtol=16 * tol, atol=1e-6)


@pytest.mark.long
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(log_bandwidth=st.floats(-6.0, 6.0), log_boost=st.floats(0.0, 12.0), name=st.sampled_from(["harmonic", "binary"]))
def test_property_search_equals_plain_iteration(monkeypatch, log_bandwidth, log_boost, name):
    """Bandwidths from 1e-6 to 1e6 times the default and one page up to 1e12 times more
    important than the rest (a sample that misses the page that takes the budget): the search
    and the plain iteration both converge, meet the budget and find the same dual."""
    n = 2 * _search.MIN_PAGES
    base = jaxcrawl.synthetic(jax.random.key(11), n)
    imp = np.asarray(base.importance).copy()
    imp[12345] *= 10.0 ** log_boost
    problem = jaxcrawl.CrawlProblem(jnp.asarray(imp), base.change_rate, base.bandwidth * 10.0 ** log_bandwidth,
                                    base.complete)
    fast = jaxcrawl.solve(problem, name)
    monkeypatch.setattr(_search, "MIN_PAGES", 10 * n)
    jax.clear_caches()  # the plain iteration traced anew
    plain = jaxcrawl.solve(problem, name)
    monkeypatch.setattr(_search, "MIN_PAGES", n // 2)
    jax.clear_caches()
    assert int(plain.num_steps) != int(fast.num_steps) or float(plain.dual) != float(fast.dual)
    tol = 4 * float(jaxcrawl._src.rootfind.default_rtol(jnp.float32))
    assert bool(fast.converged) and bool(plain.converged)
    assert abs(float(jnp.sum(fast.rate)) / float(problem.bandwidth) - 1) <= tol
    assert abs(float(fast.dual) / float(plain.dual) - 1) <= 8 * tol


_PASS_OPS = ("max", "argmax", "min", "argmin", "sum", "max", "argmin")


@jax.jit
def _jit_reductions(a, b):
    from jaxcrawl._src.passes import reduce_arrays

    # (and a pass of one extreme with its position: the unstacked form)
    return reduce_arrays((a, a, b, b, a, b, a), _PASS_OPS) + reduce_arrays((b, b), ("min", "argmin"))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.sampled_from([1, 7, 200]), ties=st.booleans(), special=st.sampled_from(["none", "nan", "inf", "-inf"]),
       seed=st.integers(0, 2**16))
def test_a_pass_reduction_equals_numpys(n, ties, special, seed):
    """Every reduction of a pass, stacked or paired (an extreme and its position from one
    reduction), is NumPy's: the sums to rounding, the extremes and their first positions
    exactly, NaN the largest as in ``jnp.max``/``jnp.argmax``."""
    rng = np.random.default_rng(seed)
    a = rng.normal(size=n).astype(np.float32)
    b = rng.normal(size=n).astype(np.float32)
    if ties:  # repeated extremes: the first position wins
        a[rng.integers(0, n, 3)] = a.max()
        b[rng.integers(0, n, 3)] = b.min()
    if special != "none":
        a[rng.integers(0, n)] = float(special)
        b[rng.integers(0, n)] = float(special)
    ops = _PASS_OPS
    arrays = (a, b)

    got = _jit_reductions(*map(jnp.asarray, arrays))
    af, bf = a.astype(np.float64), b.astype(np.float64)

    def first_max(v):
        return int(np.flatnonzero(np.isnan(v))[0]) if np.isnan(v).any() else int(np.argmax(v))

    def first_min(v):
        return int(np.flatnonzero(np.isnan(v))[0]) if np.isnan(v).any() else int(np.argmin(v))

    want = (np.max(af), first_max(af), np.min(bf), first_min(bf), np.sum(af), np.max(bf), first_min(af),
            np.min(bf), first_min(bf))
    for g, w, op in zip(got, want, ops + ("min", "argmin"), strict=True):
        if op.startswith("arg"):
            assert int(g) == w, (op, int(g), w)
        elif op == "sum":
            np.testing.assert_allclose(float(g), w, rtol=1e-5, atol=1e-5 * n)
        else:
            np.testing.assert_equal(float(g), w)


def test_integer_extremes_with_their_positions():
    """Integer arrays keep their own reductions (the paired form is for floating ones)."""
    from jaxcrawl._src.passes import reduce_arrays

    k = np.array([3, 9, 1, 9, 1], np.int32)
    got = jax.jit(lambda v: reduce_arrays((v, v, v, v), ("max", "argmax", "min", "argmin")))(jnp.asarray(k))
    assert [int(g) for g in got] == [9, 1, 1, 2]


def test_a_paired_extreme_has_its_pages_derivative():
    """The extreme read from its position's reduction differentiates as the page at that
    position (forward and reverse mode), as a solve under ``grad`` needs."""
    from jaxcrawl._src.passes import reduce_arrays

    x = jnp.asarray([1.0, 5.0, 3.0, 5.0, -2.0])

    def extremes(v):
        top, _, low, _ = reduce_arrays((v, v, 2 * v, 2 * v), ("max", "argmax", "min", "argmin"))
        return top + low

    np.testing.assert_array_equal(np.asarray(jax.grad(extremes)(x)), [0.0, 1.0, 0.0, 0.0, 2.0])
    np.testing.assert_array_equal(np.asarray(jax.jacfwd(extremes)(x)), [0.0, 1.0, 0.0, 0.0, 2.0])
