"""Cost of exact derivatives through lambda_crawl: implicit rule vs differentiating the loop.

    python benchmarks/differentiation.py [--pages 1000000] [--steps 30]

Reports, for reverse mode (jax.grad of the harmonic cost of the optimal plan w.r.t. all
change rates) through a mixed ``lambda_crawl`` in float32:
- the peak temporary memory XLA allocates (compiled ``memory_analysis``), with the implicit
  rule and with ``adjoint="unrolled"`` (autodiff through ``--steps`` iterations);
- the run time of both, after compilation, and of the forward solve alone, against a
  NumPy baseline: central finite differences are out of the question at this size, so the
  baseline is one NumPy forward solve (the cost of a *single* finite-difference
  coordinate).
The last line is one JSON object.
"""
import argparse
import json
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from solve import numpy_lambda_crawl  # noqa: E402

import jaxcrawl  # noqa: E402

from _common import best_time  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pages", type=int, default=1_000_000)
    ap.add_argument("--steps", type=int, default=30)
    args = ap.parse_args()
    n = args.pages
    p = jaxcrawl.synthetic(jax.random.key(0), n, dtype=jnp.float32)
    input_bytes = sum(np.asarray(a).nbytes for a in (p.importance, p.change_rate, p.complete))

    def loss(lam, adjoint):
        q = p.replace(change_rate=lam)
        return jaxcrawl.harmonic_cost(q, jaxcrawl.lambda_crawl(q, adjoint=adjoint, max_steps=args.steps))

    out = {"pages": n, "input_bytes": input_bytes}
    for adjoint in ("implicit", "unrolled"):
        g = jax.jit(jax.grad(lambda lam: loss(lam, adjoint)))
        mem = g.lower(p.change_rate).compile().memory_analysis()
        t = best_time(g, p.change_rate, repeat=3)
        out[f"{adjoint}_temp_bytes"] = int(mem.temp_size_in_bytes)
        out[f"{adjoint}_grad_seconds"] = t
        print(f"{adjoint:>9}: reverse-mode temp memory {mem.temp_size_in_bytes / 2**20:8.1f} MiB "
              f"({mem.temp_size_in_bytes / (4 * n):6.1f} page-sized float32 buffers), grad time {t * 1e3:8.1f} ms")
    fwd = jax.jit(lambda lam: loss(lam, "implicit"))
    t_fwd = best_time(fwd, p.change_rate)
    mu, lam, comp = (np.asarray(a) for a in (p.importance, p.change_rate, p.complete))
    t_np = best_time(lambda: numpy_lambda_crawl(mu, lam, comp, float(p.bandwidth)), repeat=3)
    out.update(forward_seconds=t_fwd, numpy_forward_seconds=t_np,
               grad_over_forward=out["implicit_grad_seconds"] / t_fwd,
               memory_ratio_unrolled_over_implicit=out["unrolled_temp_bytes"] / out["implicit_temp_bytes"],
               numpy_single_fd_coordinate_over_full_grad=t_np / out["implicit_grad_seconds"])
    print(f"forward solve + cost {t_fwd * 1e3:.1f} ms; full gradient costs {out['grad_over_forward']:.1f}x the forward; "
          f"one NumPy forward solve (= one finite-difference coordinate) {t_np * 1e3:.1f} ms")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
