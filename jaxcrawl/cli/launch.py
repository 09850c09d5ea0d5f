"""``jaxcrawl launch``: run a command as N local processes of one ``jax.distributed`` job.

``jaxcrawl launch -n 2 -- solve --input pages.csv --output plan.csv`` starts two
``jaxcrawl solve`` processes on this machine with a coordinator on a free local port
(CPU collectives over gloo), forwards their output with a ``[i]`` prefix, and stops them
all when one fails (:func:`jaxcrawl.cli.launcher.launch`).  A command whose first word
ends in ``.py`` is run as a Python script instead of a ``jaxcrawl`` subcommand.
"""
from __future__ import annotations

import argparse
import sys

__all__ = ["register", "run"]


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``launch`` subcommand to an ``argparse`` subparsers object."""
    p = subparsers.add_parser(
        "launch", help="run a jaxcrawl command as N local processes of one jax.distributed job",
        description=("Run COMMAND (a jaxcrawl subcommand such as 'solve ...', 'stream ...', 'sweep ...', "
                     "or a script.py) as N processes on this machine, joined into one jax.distributed job "
                     "(a coordinator on 127.0.0.1, CPU collectives over gloo). Output is forwarded with a "
                     "[i] prefix; when one process fails the others are stopped and its status is returned."))
    p.add_argument("-n", "--num-processes", type=int, default=2, help="processes to start (default 2)")
    p.add_argument("--port", type=int, default=None, help="coordinator port (default: a free one)")
    p.add_argument("--timeout", type=float, default=None, help="stop every process after this many seconds")
    p.add_argument("rest", nargs=argparse.REMAINDER, metavar="-- COMMAND ...")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run ``jaxcrawl launch``; returns the job's exit status."""
    from .launcher import launch

    rest = list(args.rest)
    if rest and rest[0] == "--":
        rest = rest[1:]
    if not rest:
        raise ValueError("launch needs a command after '--', e.g. jaxcrawl launch -n 2 -- solve --num-pages 1000")
    if args.num_processes < 1:
        raise ValueError(f"--num-processes must be >= 1; got {args.num_processes}")
    cmd = [sys.executable, *rest] if rest[0].endswith(".py") else [sys.executable, "-m", "jaxcrawl.cli", *rest]
    return launch(cmd, args.num_processes, port=args.port, timeout=args.timeout)
