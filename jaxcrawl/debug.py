"""Debug mode: find the first bad value inside ``jit`` / ``vmap``, by problem and page.

Under ``jax.jit`` and ``jax.vmap`` a NaN or a negative value in one problem of a batch does
not raise (the eager validation of :class:`jaxcrawl.CrawlProblem` needs concrete values);
it turns that problem's rates -- and, through a shared reduction, possibly others' -- into
NaN.  :func:`checked` wraps any function of problems (a solve, a batched solve, an
estimator) with :mod:`jax.experimental.checkify` checks that run *inside* the compiled
program and report the first offending value with its position::

    import jax, jax.numpy as jnp
    import jaxcrawl
    from jaxcrawl.debug import checked

    @jax.jit
    def solve_batch(importance, change_rate, bandwidth):  # the problems are built from traced arrays
        one = lambda i, c, b: jaxcrawl.solve(jaxcrawl.CrawlProblem(i, c, b), "harmonic")
        return jax.vmap(one)(importance, change_rate, bandwidth)

    imp = jnp.ones((8, 100)).at[3, 17].set(jnp.nan)
    checked(solve_batch)(imp, jnp.ones((8, 100)), jnp.full(8, 20.0))
    # jaxcrawl.debug.CheckError: argument 0 must not be NaN: problem 3, page 17, value nan

A :class:`~jaxcrawl.CrawlProblem` passed as an argument is checked by its own rules,
so a negative importance is caught as well as a NaN.  The arguments
of the wrapped function must be arrays or pytrees of arrays (close over anything else).

What is checked (the axes: the last axis of a per-page array is the page; the leading
axes, flattened, number the problems of a batch):

* inputs: every :class:`~jaxcrawl.CrawlProblem` among the arguments has ``importance``
  and ``change_rate`` finite and > 0 and ``bandwidth`` finite and > 0; every other
  floating-point array argument is NaN-free;
* outputs: every floating-point leaf is NaN-free, and every leaf named ``rate`` (a
  policy's rates) is finite and >= 0;
* optionally (``errors=jax.experimental.checkify.float_checks``) every NaN produced by an
  operation inside ``fn`` (checkify names the primitive; may also flag NaNs a solver
  produces on purpose and masks).

The checks cost one pass over the inputs and outputs; they are for debugging, not for
production runs.  On the command line, ``jaxcrawl solve --check`` runs its solve under
:func:`checked`; ``--check`` on the other commands runs them with JAX's ``jax_debug_nans``
(the first operation that produces a NaN).
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax.experimental import checkify

from .core.problem import CrawlProblem

__all__ = ["checked", "check_array", "CheckError"]


class CheckError(ValueError):
    """A value that :func:`checked` found bad (the message names the argument, the rule, the
    problem and page index and the value)."""


def _is_float(x: Any) -> bool:
    return hasattr(x, "dtype") and jnp.issubdtype(jnp.asarray(x).dtype, jnp.floating)


def check_array(x: Any, what: str, rule: str = "nan-free", *, per_page: bool = True) -> None:
    """Inside a checkified function: ``checkify.check`` that ``x`` obeys ``rule`` (one of
    ``"nan-free"``, ``"finite"``, ``"finite, >= 0"``, ``"finite, > 0"``), reporting the first
    offending element as ``problem P, page J`` (page only for 1-d, nothing for scalars;
    ``per_page=False``: one value per problem, reported as ``problem P``)."""
    x = jnp.asarray(x)
    if rule == "nan-free":
        bad = jnp.isnan(x)
        text = "must not be NaN"
    elif rule == "finite":
        bad = ~jnp.isfinite(x)
        text = "must be finite"
    elif rule == "finite, >= 0":
        bad = ~(jnp.isfinite(x) & (x >= 0))
        text = "must be finite and >= 0"
    elif rule == "finite, > 0":
        bad = ~(jnp.isfinite(x) & (x > 0))
        text = "must be finite and > 0"
    else:
        raise ValueError(f"rule must be one of 'nan-free', 'finite', 'finite, >= 0', 'finite, > 0'; got {rule!r}")
    if x.size == 0:
        return
    flat = bad.ravel()
    i = jnp.argmax(flat)
    value = x.ravel()[i]
    if not per_page and x.ndim >= 1:
        checkify.check(~flat.any(), f"{what} {text}: problem {{problem}}, value {{value}}", problem=i, value=value)
    elif x.ndim == 0:
        checkify.check(~bad, f"{what} {text}, got {{value}}", value=value)
    elif x.ndim == 1:
        checkify.check(~flat.any(), f"{what} {text}: page {{page}}, value {{value}}", page=i, value=value)
    else:
        pages = x.shape[-1]
        checkify.check(~flat.any(), f"{what} {text}: problem {{problem}}, page {{page}}, value {{value}}",
                       problem=i // pages, page=i % pages, value=value)


def _check_problem(problem: Any, what: str = "problem") -> None:
    """Inside a checkified function: the rules of :class:`jaxcrawl.CrawlProblem` on traced
    values (importance and change_rate finite and > 0 per page, bandwidth finite and > 0 per
    problem -- its leading axes are the problems)."""
    check_array(problem.importance, f"{what}: importance", "finite, > 0")
    check_array(problem.change_rate, f"{what}: change_rate", "finite, > 0")
    check_array(problem.bandwidth, f"{what}: bandwidth", "finite, > 0", per_page=False)


def _check_inputs(args: tuple, kwargs: dict) -> None:
    is_problem = lambda x: isinstance(x, CrawlProblem)  # noqa: E731
    tree = (args, kwargs)
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree, is_leaf=is_problem)[0]:
        name = _arg_name(path)
        if is_problem(leaf):
            _check_problem(leaf, name)
        elif _is_float(leaf):
            check_array(leaf, name, "nan-free")


def _check_outputs(out: Any) -> None:
    for path, leaf in jax.tree_util.tree_flatten_with_path(out)[0]:
        if not _is_float(leaf):
            continue
        name = "result" + jax.tree_util.keystr(path)
        last = path[-1] if path else None
        field = getattr(last, "name", getattr(last, "key", None))
        check_array(leaf, name, "finite, >= 0" if field == "rate" else "nan-free")


def _arg_name(path) -> str:
    (top, *rest) = path
    where, *sub = rest
    head = f"argument {where.idx}" if top.idx == 0 else f"argument {where.key!r}"
    return head + jax.tree_util.keystr(tuple(sub))


def checked(fn: Callable, *, errors: Any = checkify.user_checks) -> Callable:
    """``fn`` with debug checks: the wrapped function returns ``fn``'s result, or raises
    :class:`CheckError` naming the first bad value (argument or result, rule, problem and
    page index, value).

    ``fn`` may be jitted and vmapped (``checked(jax.jit(jax.vmap(solve)))``): the input
    and output checks are compiled programs of their own run on the batched arrays before
    and after ``fn`` (``fn`` itself runs unchanged), so a bad value is reported by problem
    index and page index.  ``errors``: the :mod:`jax.experimental.checkify` error set
    (default ``user_checks``, the checks above; ``float_checks`` or ``nan_checks`` also
    checkify ``fn`` itself, checking every operation inside it -- checkify cannot do so
    through a ``vmap`` of a ``while_loop``, i.e. a vmapped solve: there use the default).
    """

    check_in = jax.jit(checkify.checkify(_check_inputs))
    check_out = jax.jit(checkify.checkify(_check_outputs))
    whole = None if errors == checkify.user_checks else checkify.checkify(fn, errors=errors)

    def raise_on(err) -> None:
        msg = err.get()
        if msg is not None:
            raise CheckError(msg.replace(" (`check` failed)", ""))

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        raise_on(check_in(args, kwargs)[0])
        if whole is None:
            out = fn(*args, **kwargs)
        else:
            err, out = whole(*args, **kwargs)
            raise_on(err)
        raise_on(check_out(out)[0])
        return out

    return wrapper
