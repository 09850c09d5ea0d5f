"""The ``jaxcrawl`` command line: one private module per command, parsing and printing only.

=====================  ===================================================================
command                what it does
=====================  ===================================================================
``jaxcrawl solve``     optimal crawl rates for a page table (or the synthetic default)
``jaxcrawl estimate``  change rates from crawl histories
``jaxcrawl schedule``  a plan's crawl timetable
``jaxcrawl reproduce`` the papers' figures and claims
``jaxcrawl evaluate``  a policy's costs and gap to the optimum
``jaxcrawl stream``    rates for a page table on disk, streamed
``jaxcrawl sweep``     a resumable sync-bandit learner sweep
``jaxcrawl launch``    N local processes of one distributed job (also :func:`launch`)
=====================  ===================================================================

Each command's module ``jaxcrawl.cli._<name>`` has ``register(subparsers)`` and ``run(args) -> int``;
the options they share are in ``jaxcrawl.cli._options``.
Exit status: 0 success; 1 a reproduced claim without its expected outcome; 2 bad
arguments or a malformed input file (the message names the file and line); 3 a solve that
did not converge, produced non-finite rates or missed the budget (no output written);
130 interrupted by SIGINT (Ctrl-C), 143 terminated by SIGTERM (128 + the signal number, the
POSIX shell convention).  Either signal ends the command cleanly (:func:`main`): the
temporary file of an unfinished write is removed, an existing output is left as it was,
finished checkpoints are kept; run as a program, the process then ends with ``os._exit``
without tearing down the interpreter under JAX's running threads.  A signal is recorded
before it raises, so one whose exception Python loses (raised inside a garbage-collector
callback) or that arrives while the command imports JAX still ends the command the same
way (:mod:`jaxcrawl._src.interrupts`).

Compilation cache: run as a program (``jaxcrawl ...``, ``python -m jaxcrawl.cli ...``),
the command line keeps JAX's compiled programs in a persistent cache in the user's cache
directory (``$JAXCRAWL_CACHE_DIR``, else ``$XDG_CACHE_HOME/jaxcrawl/xla``, else
``~/.cache/jaxcrawl/xla``), so a second run on the same shapes starts without compiling.
``--no-compile-cache`` (or ``JAXCRAWL_COMPILE_CACHE=0``) turns it off;
programmatic calls ``main([...])`` leave JAX's configuration alone unless
``compile_cache=True`` is passed.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

import jax

import jaxcrawl
from jaxcrawl import NonConvergenceError
from jaxcrawl._src import fileio as _fileio
from jaxcrawl._src import interrupts as _interrupts

from ._launch import launch as launch

__all__ = ["main", "launch"]

#: The subcommands, each a module ``jaxcrawl.cli._<name>``.
COMMANDS = ("solve", "estimate", "schedule", "reproduce", "evaluate", "stream", "sweep", "launch")
EXIT_OK = 0
EXIT_USAGE = 2
EXIT_NOT_CONVERGED = 3
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143


Terminated = _interrupts.Terminated




def build_parser() -> argparse.ArgumentParser:
    """The ``jaxcrawl`` argument parser with every command of :data:`COMMANDS`."""

    parser = argparse.ArgumentParser(prog="jaxcrawl", description="Optimal freshness crawl scheduling in JAX.")
    parser.add_argument("--version", action="version", version=f"jaxcrawl {jaxcrawl.__version__}")
    parser.add_argument("--no-compile-cache", dest="compile_cache", action="store_false",
                        help="do not use the persistent compilation cache (see compile_cache_dir)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"{__name__}._{name}").register(sub)
        sub.choices[name].add_argument(
            "--check", action="store_true",
            help="debug mode: solve: check the inputs and rates inside jit and name the problem and page of "
                 "the first bad value (jaxcrawl.debug.checked); other commands: stop at the first NaN any JAX "
                 "operation produces (jax_debug_nans)")
    return parser


def compile_cache_dir() -> Path:
    """Where the command line keeps compiled programs: ``$JAXCRAWL_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/jaxcrawl/xla``, else ``~/.cache/jaxcrawl/xla``
    (:func:`jaxcrawl.compile_cache.compile_cache_dir`)."""
    from jaxcrawl.compile_cache import compile_cache_dir as default_dir

    return default_dir()


def setup_compile_cache(enabled: bool = True) -> Path | None:
    """Turn on JAX's persistent compilation cache in :func:`compile_cache_dir` (every
    program, however quick to compile) by :func:`jaxcrawl.compile_cache.enable_compile_cache`.
    Returns the directory, or None when ``enabled`` is false, ``JAXCRAWL_COMPILE_CACHE=0`` is
    set, the directory cannot be created, or JAX already has a cache directory configured
    (which is then left as it is)."""
    from jaxcrawl.compile_cache import enable_compile_cache

    if not enabled:
        return None
    return enable_compile_cache(override=False)


def main(argv: Sequence[str] | None = None, *, compile_cache: bool | None = None) -> int:
    """Run ``jaxcrawl ARGV`` (default ``sys.argv[1:]``) and return its exit status.

    Errors are printed to stderr as ``jaxcrawl COMMAND: error: ...``: status 2 for bad
    arguments and malformed inputs (``ValueError``, ``OSError``), 3 for a solve that did
    not converge (:class:`jaxcrawl.NonConvergenceError`).  ``--x64`` runs the command
    inside ``jax.enable_x64(True)`` (the process-wide setting is left unchanged).
    ``compile_cache`` (default: on when ``argv`` is None, i.e. run as a program) uses
    :func:`setup_compile_cache` unless ``--no-compile-cache`` is given.  ``--check`` (every
    command) runs ``solve``'s solve under :func:`jaxcrawl.debug.checked` (a bad value by
    problem and page: status 2) and the other commands with ``jax_debug_nans`` (a NaN
    produced by any operation: status 3).  SIGINT returns 130 and SIGTERM 143 (see the module
    documentation).
    """
    try:
        with _interrupts.handlers() as fired:
            try:
                status = _main(argv, compile_cache, fired)
            finally:
                _fileio.remove_leftovers()
    except (KeyboardInterrupt, Terminated) as err:  # at the very end, once the command was over
        status = EXIT_TERMINATED if isinstance(err, Terminated) else EXIT_INTERRUPTED
        print(f"jaxcrawl: {'terminated' if status == EXIT_TERMINATED else 'interrupted'} as the command "
              "ended (what it wrote is complete)", file=sys.stderr)
    if argv is None and (status in (EXIT_INTERRUPTED, EXIT_TERMINATED)
                         or (status != 0 and jax.distributed.is_initialized())):
        # run as a program and interrupted: end here, without the interpreter's teardown
        # racing JAX's/XLA's threads (which crashed with SIGSEGV after Ctrl-C); a process of a
        # failed multi-process job ends here too, not in jax.distributed's shutdown barrier,
        # where it would wait (minutes) for processes that wait for it in a collective
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(status)
    return status


#: The options that name what a command writes, files then directories (every other path
#: it is given is an input).
_OUTPUT_FILES = ("output", "urlfrontier", "nutch", "figure")
_OUTPUT_DIRECTORIES = ("out", "out_dir")
_OUTPUT_OPTIONS = _OUTPUT_FILES + _OUTPUT_DIRECTORIES


def _outputs(args: argparse.Namespace, names: tuple[str, ...]) -> list:
    return [getattr(args, name, None) for name in names]


def _main(argv: Sequence[str] | None, compile_cache: bool | None, fired: list[int]) -> int:
    """:func:`main` under the interrupt handlers: parse, run, map errors to exit statuses."""


    command = "?"
    try:
        _interrupts.raise_if_received()  # a signal while the command was importing

        parser = build_parser()
        args = parser.parse_args(argv)
        command = getattr(args, "command", None) or "?"
        if not getattr(args, "func", None):
            parser.print_help()
            return EXIT_USAGE
        if (argv is None if compile_cache is None else compile_cache) and args.compile_cache:
            setup_compile_cache()
        check = bool(getattr(args, "check", False))
        with (jax.enable_x64(True) if getattr(args, "x64", False) else contextlib.nullcontext(),
              jax.debug_nans(True) if check and command != "solve" else contextlib.nullcontext()):
            inputs = _fileio.command_inputs(v for k, v in vars(args).items() if k not in _OUTPUT_OPTIONS)
            with _fileio.command_outputs(inputs, _outputs(args, _OUTPUT_FILES), _outputs(args, _OUTPUT_DIRECTORIES)):
                status = int(args.func(args) or 0)  # every output renamed together at the end
        _interrupts.raise_if_received()  # a signal whose exception was lost (module documentation)
        if status == EXIT_INTERRUPTED and fired and fired[0] == signal.SIGTERM:
            status = EXIT_TERMINATED  # a command that handles the interrupt itself (reproduce)
        return status
    except NonConvergenceError as err:
        print(f"jaxcrawl {command}: error: {err}", file=sys.stderr)
        return EXIT_NOT_CONVERGED
    except FloatingPointError as err:  # --check: jax_debug_nans found an operation producing NaN
        first = str(err).splitlines()[0] if str(err) else "a NaN"
        print(f"jaxcrawl {command}: error: --check: {first}", file=sys.stderr)
        return EXIT_NOT_CONVERGED
    except (ValueError, OSError) as err:
        print(f"jaxcrawl {command}: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except MemoryError:  # a size no check foresaw: said plainly, no output written
        print(f"jaxcrawl {command}: error: out of memory (the problem is too large for this machine; "
              "lower the sizes, or use jaxcrawl stream)", file=sys.stderr)
        return EXIT_USAGE
    except RuntimeError as err:
        if "RESOURCE_EXHAUSTED" not in str(err):
            raise
        print(f"jaxcrawl {command}: error: out of device memory ({str(err).splitlines()[0][:200]}); lower the "
              "sizes, or use jaxcrawl stream", file=sys.stderr)
        return EXIT_USAGE
    except Terminated:
        print(f"jaxcrawl {command}: terminated (SIGTERM)", file=sys.stderr)
        return EXIT_TERMINATED
    except KeyboardInterrupt:
        print(f"jaxcrawl {command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
