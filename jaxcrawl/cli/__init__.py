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
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import sys
from collections.abc import Sequence

__all__ = ["main", "build_parser", "COMMANDS", "EXIT_OK", "EXIT_USAGE", "EXIT_NOT_CONVERGED", "EXIT_INTERRUPTED"]

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
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"{__name__}.{name}").register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``jaxcrawl ARGV`` (default ``sys.argv[1:]``) and return its exit status.

    Errors are printed to stderr as ``jaxcrawl COMMAND: error: ...``: status 2 for bad
    arguments and malformed inputs (``ValueError``, ``OSError``), 3 for a solve that did
    not converge (:class:`jaxcrawl.NonConvergenceError`).  ``--x64`` runs the command
    inside ``jax.enable_x64(True)`` (the process-wide setting is left unchanged).
    """
    import jax

    from jaxcrawl import NonConvergenceError

    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_USAGE
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
