"""The ``jaxcrawl`` command line: one module per command, parsing and printing only.

=====================  ===================================================================
command                module
=====================  ===================================================================
``jaxcrawl solve``     :mod:`jaxcrawl.cli.solve` -- optimal crawl rates for a page table
``jaxcrawl estimate``  :mod:`jaxcrawl.cli.estimate` -- change rates from crawl histories
``jaxcrawl schedule``  :mod:`jaxcrawl.cli.schedule` -- a plan's crawl timetable
``jaxcrawl reproduce`` :mod:`jaxcrawl.cli.reproduce` -- the papers' figures and claims
``jaxcrawl evaluate``  :mod:`jaxcrawl.cli.evaluate` -- a policy's costs and gap to the optimum
``jaxcrawl stream``    :mod:`jaxcrawl.cli.stream` -- rates for a page table on disk, streamed
``jaxcrawl sweep``     :mod:`jaxcrawl.cli.sweep` -- a resumable sync-bandit learner sweep
``jaxcrawl launch``    :mod:`jaxcrawl.cli.launch` -- N local processes of one distributed job
=====================  ===================================================================

Each module has ``register(subparsers)`` (adds its subcommand) and ``run(args) -> int``.
Exit status: 0 success; 1 a reproduced claim without its expected outcome; 2 bad
arguments or a malformed input file (the message names the file and line); 3 a solve that
did not converge, produced non-finite rates or missed the budget (no output written);
130 interrupted.

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
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["main", "build_parser", "COMMANDS", "EXIT_OK", "EXIT_USAGE", "EXIT_NOT_CONVERGED", "EXIT_INTERRUPTED",
           "compile_cache_dir", "setup_compile_cache"]

#: The subcommands, each a module ``jaxcrawl.cli.<name>``.
COMMANDS = ("solve", "estimate", "schedule", "reproduce", "evaluate")
COMMANDS += ("stream", "sweep", "launch")  # multi-process capable (jaxcrawl.cli.multiprocess)
EXIT_OK = 0
EXIT_USAGE = 2
EXIT_NOT_CONVERGED = 3
EXIT_INTERRUPTED = 130


def build_parser() -> argparse.ArgumentParser:
    """The ``jaxcrawl`` argument parser with every command of :data:`COMMANDS`."""
    import jaxcrawl

    parser = argparse.ArgumentParser(prog="jaxcrawl", description="Optimal freshness crawl scheduling in JAX.")
    parser.add_argument("--version", action="version", version=f"jaxcrawl {jaxcrawl.__version__}")
    parser.add_argument("--no-compile-cache", dest="compile_cache", action="store_false",
                        help="do not use the persistent compilation cache (see compile_cache_dir)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"{__name__}.{name}").register(sub)
    return parser


def compile_cache_dir() -> Path:
    """Where the command line keeps compiled programs: ``$JAXCRAWL_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/jaxcrawl/xla``, else ``~/.cache/jaxcrawl/xla``."""
    explicit = os.environ.get("JAXCRAWL_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "jaxcrawl" / "xla"


def setup_compile_cache(enabled: bool = True) -> Path | None:
    """Turn on JAX's persistent compilation cache in :func:`compile_cache_dir` (every
    program, however quick to compile).  Returns the directory, or None when ``enabled``
    is false, ``JAXCRAWL_COMPILE_CACHE=0`` is set, the directory cannot be created, or
    JAX already has a cache directory configured (which is then left as it is)."""
    import jax

    if not enabled or os.environ.get("JAXCRAWL_COMPILE_CACHE", "1") in ("0", "false", "no"):
        return None
    if jax.config.jax_compilation_cache_dir:
        return None
    path = compile_cache_dir()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    jax.config.update("jax_compilation_cache_dir", str(path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return path


def main(argv: Sequence[str] | None = None, *, compile_cache: bool | None = None) -> int:
    """Run ``jaxcrawl ARGV`` (default ``sys.argv[1:]``) and return its exit status.

    Errors are printed to stderr as ``jaxcrawl COMMAND: error: ...``: status 2 for bad
    arguments and malformed inputs (``ValueError``, ``OSError``), 3 for a solve that did
    not converge (:class:`jaxcrawl.NonConvergenceError`).  ``--x64`` runs the command
    inside ``jax.enable_x64(True)`` (the process-wide setting is left unchanged).
    ``compile_cache`` (default: on when ``argv`` is None, i.e. run as a program) uses
    :func:`setup_compile_cache` unless ``--no-compile-cache`` is given.
    """
    import jax

    from jaxcrawl import NonConvergenceError

    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_USAGE
    if (argv is None if compile_cache is None else compile_cache) and args.compile_cache:
        setup_compile_cache()
    scope = jax.enable_x64(True) if getattr(args, "x64", False) else contextlib.nullcontext()
    try:
        with scope:
            return int(args.func(args) or 0)
    except NonConvergenceError as err:
        print(f"jaxcrawl {args.command}: error: {err}", file=sys.stderr)
        return EXIT_NOT_CONVERGED
    except (ValueError, OSError) as err:
        print(f"jaxcrawl {args.command}: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"jaxcrawl {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
