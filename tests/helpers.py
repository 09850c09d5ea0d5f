"""Helpers shared by the test modules: finite differences, tree closeness, compile counts.

* :func:`fd_grad`, :func:`fd_jvp` -- central finite differences (evaluated in float64 NumPy
  when the function allows it; pick ``eps`` for the dtype you test in);
* :func:`tree_allclose`, :func:`assert_tree_allclose` -- pytree closeness with tolerances
  chosen from the leaves' dtype (:func:`default_tolerance`);
* :func:`count_compiles` -- how many XLA compilations (and traces) ran inside a ``with``
  block, through the public ``jax.monitoring`` listeners (no private attributes such as
  ``jitted._cache_size()``);
* :func:`host_capped` -- ``jaxcrawl.solve`` with host caps, with each host's total rate and
  whether its cap binds computed from the policy (what the capped-solve tests check);
* :func:`run_cli`, :func:`expect_cli_error` -- the command line in this process, its exit
  status and printed output; a refused run's status 2 and message (``TINY_PAGES``: a
  three-page table).
"""
from __future__ import annotations

import contextlib
import dataclasses
import io
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "fd_grad",
    "fd_jvp",
    "default_tolerance",
    "tree_allclose",
    "assert_tree_allclose",
    "rel_err",
    "CompileLog",
    "count_compiles",
    "BACKEND_COMPILE_EVENT",
    "JAXPR_TRACE_EVENT",
    "Capped",
    "host_capped",
    "TINY_PAGES",
    "run_cli",
    "expect_cli_error",
]


# --------------------------------------------------------------------- finite differences
def fd_jvp(f: Callable[..., Any], x: Any, v: Any, eps: float = 1e-6) -> Any:
    """Central difference ``(f(x + eps v) - f(x - eps v)) / (2 eps)``: the directional
    derivative of ``f`` at ``x`` along ``v`` (``x``, ``v`` and the output may be pytrees)."""
    xp = jax.tree_util.tree_map(lambda a, d: a + eps * d, x, v)
    xm = jax.tree_util.tree_map(lambda a, d: a - eps * d, x, v)
    fp, fm = f(xp), f(xm)
    return jax.tree_util.tree_map(lambda p, m: (p - m) / (2 * eps), fp, fm)


def fd_grad(f: Callable[[Any], Any], x: Any, eps: float = 1e-6, *, relative: bool = False) -> np.ndarray:
    """Central-difference gradient of the scalar function ``f`` at the array ``x``.

    One pair of evaluations per element of ``x``; the result has ``x``'s shape (float64).
    With ``relative=True`` the step of element ``i`` is ``eps * max(|x_i|, tiny)``, which suits
    arguments spread over many orders of magnitude.
    """
    x = np.asarray(x, dtype=np.float64)
    flat = x.reshape(-1)
    g = np.zeros_like(flat)
    for i in range(flat.size):
        h = eps * max(abs(flat[i]), 1e-300) if relative else eps
        xp = flat.copy()
        xm = flat.copy()
        xp[i] += h
        xm[i] -= h
        fp = float(f(xp.reshape(x.shape)))
        fm = float(f(xm.reshape(x.shape)))
        g[i] = (fp - fm) / (2 * h)
    return g.reshape(x.shape)


# ------------------------------------------------------------------------ tree closeness
_TOLERANCES = {
    # dtype name: (rtol, atol)
    "float16": (1e-2, 1e-3),
    "bfloat16": (2e-2, 1e-2),
    "float32": (1e-5, 1e-6),
    "float64": (1e-10, 1e-12),
}


def default_tolerance(dtype: Any) -> tuple[float, float]:
    """``(rtol, atol)`` for comparing results computed in ``dtype`` (exact for non-floats)."""
    dtype = np.dtype(dtype) if not isinstance(dtype, str) else np.dtype(jnp.dtype(dtype))
    if jnp.issubdtype(dtype, jnp.complexfloating):
        dtype = np.dtype(np.finfo(dtype).dtype)
    if not jnp.issubdtype(dtype, jnp.floating):
        return 0.0, 0.0
    return _TOLERANCES.get(dtype.name, (1e-5, 1e-6))


def _leaf_tolerance(a: Any, b: Any) -> tuple[float, float]:
    """The looser of the two leaves' default tolerances (comparing float32 with float64
    uses float32's)."""
    ta = default_tolerance(np.asarray(a).dtype)
    tb = default_tolerance(np.asarray(b).dtype)
    return max(ta[0], tb[0]), max(ta[1], tb[1])


def _mismatches(actual: Any, expected: Any, rtol: float | None, atol: float | None) -> list[str]:
    la, ta = jax.tree_util.tree_flatten(actual)
    lb, tb = jax.tree_util.tree_flatten(expected)
    if ta != tb:
        return [f"tree structures differ: {ta} vs {tb}"]
    problems = []
    paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(actual)[0]]
    for path, a, b in zip(paths, la, lb):
        a_np, b_np = np.asarray(a), np.asarray(b)
        if a_np.shape != b_np.shape:
            problems.append(f"{path or '<root>'}: shape {a_np.shape} vs {b_np.shape}")
            continue
        r, t = _leaf_tolerance(a_np, b_np)
        r = r if rtol is None else rtol
        t = t if atol is None else atol
        if not (jnp.issubdtype(a_np.dtype, jnp.inexact) or jnp.issubdtype(b_np.dtype, jnp.inexact)):
            if not np.array_equal(a_np, b_np):
                problems.append(f"{path or '<root>'}: values differ (exact comparison)")
            continue
        a64 = a_np.astype(np.complex128 if np.iscomplexobj(a_np) else np.float64)
        b64 = b_np.astype(np.complex128 if np.iscomplexobj(b_np) else np.float64)
        if not np.allclose(a64, b64, rtol=r, atol=t, equal_nan=True):
            err = np.abs(a64 - b64)
            bad = ~np.isclose(a64, b64, rtol=r, atol=t, equal_nan=True)
            problems.append(f"{path or '<root>'}: {int(bad.sum())}/{bad.size} elements differ "
                            f"(max abs err {np.nanmax(np.where(bad, err, 0)):.3g}, rtol={r:g}, atol={t:g})")
    return problems


def tree_allclose(actual: Any, expected: Any, *, rtol: float | None = None, atol: float | None = None) -> bool:
    """Whether two pytrees have the same structure, shapes and close leaves.

    Float leaves are compared with ``rtol``/``atol`` (default: :func:`default_tolerance`
    of the looser dtype of the pair), NaNs equal to NaNs; other leaves must be equal.
    """
    return not _mismatches(actual, expected, rtol, atol)


def assert_tree_allclose(actual: Any, expected: Any, *, rtol: float | None = None,
                         atol: float | None = None, err_msg: str = "") -> None:
    """:func:`tree_allclose` as an assertion that names the leaves that differ."""
    problems = _mismatches(actual, expected, rtol, atol)
    if problems:
        raise AssertionError((err_msg + "\n" if err_msg else "") + "\n".join(problems))


def rel_err(actual: Any, expected: Any, floor: float = 1e-300) -> float:
    """Largest element-wise relative error ``|a - b| / max(|b|, floor)`` (in float64)."""
    a = np.asarray(actual, dtype=np.float64)
    b = np.asarray(expected, dtype=np.float64)
    return float(np.max(np.abs(a - b) / np.maximum(np.abs(b), floor), initial=0.0))


# -------------------------------------------------------------------------- compile counts
# The event names jax (0.4.3x .. 0.10) reports through jax.monitoring's duration listeners:
# one BACKEND_COMPILE_EVENT per XLA executable built (a miss of the in-memory cache of a
# jitted function, whether or not the persistent compilation cache supplies the binary), one
# JAXPR_TRACE_EVENT per Python trace of a function to a jaxpr.
BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
JAXPR_TRACE_EVENT = "/jax/core/compile/jaxpr_trace_duration"


def _bare(fun_name: str) -> str:
    """``"jit(f)"`` -> ``"f"`` (compile events carry the wrapper's name, trace events not)."""
    if fun_name.startswith("jit(") and fun_name.endswith(")"):
        return fun_name[4:-1]
    return fun_name


@dataclasses.dataclass
class CompileLog:
    """What :func:`count_compiles` saw: ``(event, fun_name)`` pairs, in order."""

    events: list[tuple[str, str]] = dataclasses.field(default_factory=list)

    def _count(self, event: str, name: str | None) -> int:
        return sum(1 for e, f in self.events if e == event and (name is None or _bare(f) == name))

    def compiles(self, name: str | None = None) -> int:
        """XLA compilations, optionally only of the function named ``name`` (its
        ``__name__``; jax reports it as ``jit(name)``)."""
        return self._count(BACKEND_COMPILE_EVENT, name)

    def traces(self, name: str | None = None) -> int:
        """Traces to a jaxpr, optionally only of the function named ``name``."""
        return self._count(JAXPR_TRACE_EVENT, name)

    @property
    def count(self) -> int:
        """All XLA compilations seen (same as :meth:`compiles` with no name)."""
        return self.compiles()

    def names(self, event: str = BACKEND_COMPILE_EVENT) -> list[str]:
        """The function names of the recorded ``event`` (compilations by default)."""
        return [_bare(f) for e, f in self.events if e == event]


@contextlib.contextmanager
def count_compiles() -> Iterator[CompileLog]:
    """Record the compilations and traces that happen inside the ``with`` block::

        f = jax.jit(g)
        f(x)                         # warm up
        with count_compiles() as log:
            f(2 * x)
        assert log.compiles("g") == 0

    Note that op-by-op (eager) JAX calls compile small executables too; filter by the
    jitted function's name (``log.compiles("g")``) or do the eager work outside the block.
    Uses ``jax.monitoring.register_event_duration_secs_listener`` (public API).
    """
    log = CompileLog()

    def listener(event: str, duration_secs: float, **kwargs: Any) -> None:
        if event in (BACKEND_COMPILE_EVENT, JAXPR_TRACE_EVENT):
            log.events.append((event, str(kwargs.get("fun_name", ""))))

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        yield log
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)


# ---------------------------------------------------------------------- host-capped solves
class Capped(NamedTuple):
    """A host-capped solve and what the tests check on it: ``host_dual`` (each host's
    multiplier), ``host_rate`` (each host's total rate) and ``binding`` (multiplier > 0 or
    the total at the cap to 4 ulps)."""

    policy: Any
    host_dual: Any
    host_rate: Any
    binding: Any


def host_capped(problem: Any, host_id: Any, cap: Any, objective: Any = "harmonic", **options: Any) -> Capped:
    """``jaxcrawl.solve(problem, objective, caps=HostCaps(host_id, cap), **options)`` with
    the host totals (a one-hot product: differentiable, batched over leading axes)."""
    import jaxcrawl

    pol = jaxcrawl.solve(problem, objective, caps=jaxcrawl.HostCaps(host_id, cap), **options)
    cap = jnp.asarray(cap, pol.rate.dtype)
    onehot = (jnp.asarray(host_id)[:, None] == jnp.arange(cap.shape[-1])).astype(pol.rate.dtype)
    host_rate = pol.rate @ onehot
    binding = (pol.host_dual > 0) | (host_rate >= cap * (1 - 4 * jnp.finfo(pol.rate.dtype).eps))
    return Capped(pol, pol.host_dual, host_rate, binding)


def subprocess_env() -> dict[str, str]:
    """The environment of a ``jaxcrawl`` subprocess in the tests: this checkout first on the
    path, the CPU backend, no inherited XLA flags (e.g. a forced host device count)."""
    import os

    import jaxcrawl

    env = dict(os.environ)
    here = os.path.dirname(os.path.dirname(os.path.abspath(jaxcrawl.__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH")) if p)
    env["JAX_PLATFORMS"] = "cpu"
    env.pop("XLA_FLAGS", None)
    return env


# --------------------------------------------------------------------- the command line
TINY_PAGES = "page_id,importance,change_rate\na,1,1\nb,2,0.5\nc,0.5,3\n"


def run_cli(argv: list[Any]) -> tuple[int, str, str]:
    """``jaxcrawl.cli.main(argv)`` in this process: (exit status, stdout, stderr)."""
    from jaxcrawl import cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


def expect_cli_error(argv: list[Any], *needles: str) -> str:
    """Run the command line and check that it refused the run (status 2, no traceback) with a
    message holding every ``needle``; returns the message."""
    code, out, err = run_cli(argv)
    assert code == 2, (code, out, err)
    assert "Traceback" not in err
    for needle in needles:
        assert needle in err, (needle, err)
    return err
