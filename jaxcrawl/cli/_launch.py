"""``jaxcrawl launch``: run a command as N local processes of one ``jax.distributed`` job.

``jaxcrawl launch -n 2 -- solve --input pages.csv --output plan.csv`` starts two
``jaxcrawl solve`` processes on this machine with a coordinator on a free local port
(CPU collectives over gloo), forwards their output with a ``[i]`` prefix, and stops them
all when one fails (:func:`jaxcrawl.cli.launch`).  A command whose first word
ends in ``.py`` is run as a Python script instead of a ``jaxcrawl`` subcommand.
"""
from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

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

    rest = list(args.rest)
    if rest and rest[0] == "--":
        rest = rest[1:]
    if not rest:
        raise ValueError("launch needs a command after '--', e.g. jaxcrawl launch -n 2 -- solve --num-pages 1000")
    if args.num_processes < 1:
        raise ValueError(f"--num-processes must be >= 1; got {args.num_processes}")
    cmd = [sys.executable, *rest] if rest[0].endswith(".py") else [sys.executable, "-m", "jaxcrawl.cli", *rest]
    return launch(cmd, args.num_processes, port=args.port, timeout=args.timeout)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on ``host`` a moment ago (for a local coordinator)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def launch(command: Sequence[str], num_processes: int, *, port: int | None = None,
           env: dict[str, str] | None = None, timeout: float | None = None, prefix: bool = True,
           stop_grace_seconds: float = 5.0, stream: Any = None) -> int:
    """Run ``command`` as ``num_processes`` local processes of one ``jax.distributed`` job.

    Each process gets ``JAX_COORDINATOR_ADDRESS=127.0.0.1:PORT``, ``JAX_NUM_PROCESSES`` and
    ``JAX_PROCESS_ID`` in its environment (what :func:`initialize` and the CLI's
    ``--coordinator`` / ``--num-processes`` / ``--process-id`` defaults read).  Their output
    is forwarded line by line with a ``[i]`` prefix.  When one process fails (non-zero
    status) the others are stopped (SIGTERM, then SIGKILL after ``stop_grace_seconds``);
    after ``timeout`` seconds all are stopped.

    Returns:
      0 when every process succeeded; else the first failure's status (``128 + signal``
      for a process killed by a signal; 124 on timeout).
    """
    if num_processes < 1:
        raise ValueError(f"num_processes must be >= 1; got {num_processes}")
    if not command:
        raise ValueError("launch needs a command")
    stream = sys.stdout if stream is None else stream
    port = free_port() if port is None else int(port)
    lock = threading.Lock()
    procs = []
    base = dict(os.environ if env is None else env)
    for i in range(num_processes):
        e = dict(base, JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{port}", JAX_NUM_PROCESSES=str(num_processes),
                 JAX_PROCESS_ID=str(i), PYTHONUNBUFFERED="1")
        procs.append(subprocess.Popen(list(command), env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True, errors="replace"))

    def forward(i, p):
        for line in p.stdout:
            with lock:
                stream.write((f"[{i}] " if prefix else "") + line)
                stream.flush()

    threads = [threading.Thread(target=forward, args=(i, p), daemon=True) for i, p in enumerate(procs)]
    for t in threads:
        t.start()

    def stop_all():
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        end = time.monotonic() + stop_grace_seconds
        for p in procs:
            try:
                p.wait(max(end - time.monotonic(), 0.01))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    status = 0
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        while True:
            codes = [p.poll() for p in procs]
            failed = [c for c in codes if c not in (None, 0)]
            if failed:
                c = failed[0]
                status = 128 - c if c < 0 else c
                stop_all()
                break
            if all(c == 0 for c in codes):
                break
            if deadline is not None and time.monotonic() > deadline:
                status = 124
                stop_all()
                break
            time.sleep(0.05)
    except KeyboardInterrupt:
        stop_all()
        status = 130
    for t in threads:
        t.join(timeout=5)
    return status
