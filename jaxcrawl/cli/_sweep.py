"""``jaxcrawl sweep``: a resumable sweep of a synchronization-bandit learner (ICML-20).

Runs MirrorSync / AsyncMirrorSync / AsyncPSGDSync (Kolobov, Bubeck & Zimmert, ICML-20) on
``--instances`` random polynomial-cost synchronization bandits (``--arms`` arms each) ×
``--seeds`` seeds × a learning-rate grid with :func:`jaxcrawl.learners.run_sweep`:
one compiled call per grid chunk, every finished chunk checkpointed in ``--out-dir`` so an
interrupted sweep resumes.  With several processes (``jaxcrawl launch -n N -- sweep ...``,
``--coordinator/--num-processes/--process-id``, or ``--distributed`` on a cluster) the runs
are split over the processes, each checkpoints its own chunks, and process 0 prints the
whole result.  Prints, per learning rate, the mean final policy cost (ICML-20 Lemma 1's
:math:`J(r)`) over instances and seeds; the last line is one JSON object.
"""
from __future__ import annotations

import argparse
import json
import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxcrawl._src.fileio import immediate
from jaxcrawl._src.limits import check_size
from jaxcrawl.learners import SyncHyperparams, async_mirror_sync, async_psgd_sync, mirror_sync, run_sweep
from jaxcrawl.sync_bandits import polynomial_bandit

from ._options import (
    add_process_arguments,
    join,
)

__all__ = ["register", "run"]

LEARNERS = ("mirror-sync", "async-mirror-sync", "async-psgd-sync")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``sweep`` subcommand to an ``argparse`` subparsers object."""

    p = subparsers.add_parser(
        "sweep", help="a resumable seeds x instances x learning-rate sweep of a sync-bandit learner (ICML-20)",
        description=("Sweep a synchronization-bandit learner over random instances, seeds and learning rates; "
                     "checkpoints every finished chunk in --out-dir and resumes from it."))
    p.add_argument("--learner", choices=LEARNERS, default="async-mirror-sync")
    p.add_argument("--instances", type=int, default=2, help="random bandit instances (default 2)")
    p.add_argument("--arms", type=int, default=20, help="arms per instance (default 20)")
    p.add_argument("--seeds", type=int, default=8, help="seeds per instance (default 8)")
    p.add_argument("--steps", type=int, default=30, help="learner steps per run (default 30)")
    p.add_argument("--learning-rates", default="0.05,0.1,0.2,0.4", help="comma-separated grid of eta")
    p.add_argument("--exploration", type=float, default=0.1, help="probe probability epsilon (default 0.1)")
    p.add_argument("--update-interval", type=float, default=2.0, help="asynchronous update interval (default 2)")
    p.add_argument("--chunk-size", type=int, default=1, help="grid points per compiled call (default 1)")
    p.add_argument("--seed", type=int, default=0, help="master seed (default 0)")
    p.add_argument("--out-dir", help="checkpoint directory (resumes when it holds this sweep's chunks)")
    p.add_argument("--x64", action="store_true", help="run in float64")
    add_process_arguments(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run ``jaxcrawl sweep``; returns the exit status."""
    join(args)
    for name in ("instances", "arms", "seeds", "steps", "chunk_size"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1; got {getattr(args, name)}")
    try:
        rates = [float(v) for v in args.learning_rates.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"--learning-rates must be comma-separated numbers; got {args.learning_rates!r}") from None
    if not rates or not all(math.isfinite(r) and r > 0 for r in rates):
        raise ValueError(f"--learning-rates must be finite and > 0; got {args.learning_rates!r}")
    # the learners' ranges (a probe probability outside (0, 1] never ends a probe loop)
    if not (math.isfinite(args.exploration) and 0 < args.exploration <= 1):
        raise ValueError(f"--exploration is a probability in (0, 1]; got {args.exploration}")
    if not (math.isfinite(args.update_interval) and args.update_interval > 0):
        raise ValueError(f"--update-interval must be finite and > 0; got {args.update_interval}")
    check_size("--instances x --seeds x --arms x --steps", float(args.instances) * args.seeds * args.arms
               * args.steps * min(args.chunk_size, 1 + len(rates)), 64, "learner values")
    learner = {"mirror-sync": mirror_sync, "async-mirror-sync": async_mirror_sync,
               "async-psgd-sync": async_psgd_sync}[args.learner]()
    key = jax.random.key(args.seed)
    bandits = jax.vmap(lambda k: polynomial_bandit(k, args.arms))(
        jax.random.split(jax.random.fold_in(key, 1), args.instances))
    g = len(rates)
    grid = SyncHyperparams(jnp.asarray(rates), jnp.full(g, args.exploration), jnp.full(g, args.update_interval))

    def progress(c, _):
        print(f"chunk {c} stored", flush=True)

    with immediate():  # each finished chunk and the manifest are kept when a later chunk fails or is interrupted
        res = run_sweep(jax.random.fold_in(key, 2), learner, bandits, grid, num_seeds=args.seeds,
                        num_steps=args.steps, chunk_size=args.chunk_size, out_dir=args.out_dir, on_chunk=progress)
    cost = np.asarray(res.outputs.policy_cost)  # (G, P, S, steps)
    final = cost[..., -1].reshape(g, -1)
    summary = dict(learner=args.learner, instances=args.instances, seeds=args.seeds, steps=args.steps,
                   learning_rates=rates, final_cost_mean=final.mean(axis=1).tolist(),
                   final_cost_se=(final.std(axis=1, ddof=1) / np.sqrt(final.shape[1])).tolist()
                   if final.shape[1] > 1 else None,
                   computed_chunks=list(res.computed_chunks), num_chunks=res.num_chunks, out_dir=args.out_dir,
                   process=jax.process_index(), num_processes=jax.process_count())
    for r, m in zip(rates, summary["final_cost_mean"]):
        print(f"eta {r:<8g} mean final cost {m:.6g}")
    print(json.dumps(summary))
    return 0
