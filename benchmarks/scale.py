"""Web-scale solves: time, passes over the pages, bytes moved, memory; one device and eight.

    python benchmarks/scale.py [--sizes 100000 1000000 10000000 18500000] [--devices 8] [--processes 2]

For each size (float32, mixed problems with 4% complete pages, after compilation):
``lambda_crawl`` and ``binary_lambda_crawl`` time; passes over the page arrays (from
65,536 pages the search's passes and the write, ``jaxcrawl._src.search``; below, the
root-finder's steps + bracket + final evaluation + correction/write); bytes read per pass
(importance, change rate, complete mask); the ratio of the solve to ONE memory pass over
the same arrays measured in the same run (a NumPy dot product of importance and change
rate); XLA's compiled memory (arguments, outputs, temporaries) against the input bytes;
and the estimators (MLE, with its iterations and convergence) on the same pages with 8
observations each.  Then the same solve
with the pages sharded over ``--devices`` forced host devices (a subprocess with
XLA_FLAGS=--xla_force_host_platform_device_count=N).  The last line is one JSON object
with, among others, ``lambda_crawl_18.5M_seconds`` and ``lambda_crawl_18.5M_passes``.

``--processes N`` (N > 1) adds real multi-process solves: the same LambdaCrawl solve by
:func:`jaxcrawl.solve` of :class:`jaxcrawl.parallel.ProcessRows` in this process (1 process) and in a job of
N local processes (:func:`jaxcrawl.cli.launch`, gloo collectives over 127.0.0.1),
each process holding only its rows; keys ``processes1_solve_seconds_<size>``,
``processes<N>_solve_seconds_<size>`` and their ratio ``processes<N>_over_1_<size>``.
Only ``--sizes`` are run (e.g. ``--sizes 18500000 --devices 1 --processes 2``).
"""
import argparse
import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import jaxcrawl  # noqa: E402
from jaxcrawl import estimators  # noqa: E402

from _common import best_time  # noqa: E402

EXTRA_PASSES = 3  # the plain iteration's bracket + final evaluation + correction/write of the plan


def passes(sol, n):
    """Passes over the pages: the search's passes and the write for a large problem
    (jaxcrawl._src.search), else the plain iteration's steps and its extra passes."""
    from jaxcrawl._src import search

    return int(sol.num_steps) + (1 if n >= search.MIN_PAGES else EXTRA_PASSES)


def label(n):
    return f"{n / 1e6:g}M" if n >= 1e6 else f"{n / 1e3:g}k"


def measure(n, with_estimators=True, mesh=None):
    p = jaxcrawl.synthetic(jax.random.key(0), n, dtype=jnp.float32)
    if mesh is not None:
        from jaxcrawl.parallel import shard_pages
        p = shard_pages(p, mesh)
    bytes_per_pass = n * (4 + 4 + 1)
    r = {}
    lc = jax.jit(jaxcrawl.lambda_crawl)
    mem = lc.lower(p).compile().memory_analysis()
    r["lambda_crawl_seconds"] = best_time(lc, p, repeat=3)
    r["lambda_crawl_passes"] = passes(lc(p), n)
    r["peak_bytes"] = int(mem.argument_size_in_bytes + mem.output_size_in_bytes + mem.temp_size_in_bytes)
    r["peak_over_input"] = r["peak_bytes"] / bytes_per_pass
    r["temp_bytes"] = int(mem.temp_size_in_bytes)
    blc = jax.jit(jaxcrawl.binary_lambda_crawl)
    r["binary_lambda_crawl_seconds"] = best_time(blc, p, repeat=3)
    r["binary_lambda_crawl_passes"] = passes(blc(p), n)
    r["bytes_per_pass"] = bytes_per_pass
    if mesh is None:
        mu, lam = np.asarray(p.importance), np.asarray(p.change_rate)
        r["numpy_memory_pass_seconds"] = best_time(lambda: np.dot(mu, lam), repeat=5)
        r["solve_over_memory_pass"] = r["lambda_crawl_seconds"] / r["numpy_memory_pass_seconds"]
    if with_estimators:
        k = 8
        key_w, key_c = jax.random.split(jax.random.key(1))
        w = jax.random.exponential(key_w, (n, k), jnp.float32) + 1e-6
        changed = jax.random.uniform(key_c, (n, k)) < -jnp.expm1(-p.change_rate[:, None] * w)
        mle = jax.jit(estimators.mle)  # traced: eager validation is skipped, the timing is the estimator's
        r["mle_seconds"] = best_time(mle, w, changed, repeat=2)
        info = jax.jit(lambda w, c: estimators.mle(w, c, return_info=True))(w, changed)
        r["mle_passes"] = int(info.num_steps)  # iterations of the warm-started Newton (all pages)
        r["mle_all_converged"] = bool(info.converged.all())
        del w, changed, info
    return r


def solve_rows_time(n, repeat=3):
    """Best time of the solve of ProcessRows (LambdaCrawl, float32) on this process's rows of n pages."""
    from jaxcrawl import parallel

    p = jaxcrawl.synthetic(jax.random.key(0), n, dtype=jnp.float32)
    s, e = parallel.row_range(n)
    rows = [np.asarray(a)[s:e] for a in (p.importance, p.change_rate, p.complete)]
    del p
    bw = 0.2 * n
    src = parallel.ProcessRows(*rows, bw)
    sol = jaxcrawl.solve(src, "harmonic")
    assert sol.converged and src.num_pages == n
    return best_time(lambda: jaxcrawl.solve(src, "harmonic").dual, repeat=repeat), sol


def process_child(sizes):
    from jaxcrawl import parallel

    parallel.initialize()
    out = {}
    for n in sizes:
        seconds, sol = solve_rows_time(n)
        out[f"processes{jax.process_count()}_solve_seconds_{label(n)}"] = seconds
        out[f"processes{jax.process_count()}_dual_{label(n)}"] = sol.dual
        out[f"processes{jax.process_count()}_root_steps_{label(n)}"] = sol.num_steps
    print("RESULT " + json.dumps(out), flush=True)


def run_processes(sizes, num_processes):
    import io

    from jaxcrawl.cli import launch

    out = {}
    for n in sizes:
        seconds, sol = solve_rows_time(n)
        out[f"processes1_solve_seconds_{label(n)}"] = seconds
        out[f"processes1_dual_{label(n)}"] = sol.dual
    log = io.StringIO()
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.pop("XLA_FLAGS", None)
    status = launch([sys.executable, __file__, "--process-child", "--sizes", *map(str, sizes)],
                                num_processes, env=env, stream=log, timeout=3600)
    lines = [ln for ln in log.getvalue().splitlines() if ln.startswith("[0] RESULT ")]
    if status != 0 or not lines:
        print(f"{num_processes}-process run failed (status {status}):\n" + log.getvalue()[-3000:])
        return out
    out.update(json.loads(lines[-1][len("[0] RESULT "):]))
    for n in sizes:
        one, many = out[f"processes1_solve_seconds_{label(n)}"], out[f"processes{num_processes}_solve_seconds_{label(n)}"]
        out[f"processes{num_processes}_over_1_{label(n)}"] = many / one
        print(f"{label(n):>8} solve of ProcessRows (LambdaCrawl, float32): 1 process {one * 1e3:.1f} ms, "
              f"{num_processes} processes {many * 1e3:.1f} ms ({many / one:.2f}x); duals "
              f"{out[f'processes1_dual_{label(n)}']:.7g} / {out[f'processes{num_processes}_dual_{label(n)}']:.7g}")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000, 10_000_000, 18_500_000])
    ap.add_argument("--devices", type=int, default=8)
    ap.add_argument("--processes", type=int, default=1,
                    help="also time the solve in a job of this many local processes (jax.distributed)")
    ap.add_argument("--sharded-child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--process-child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    out = {}
    if args.process_child:
        process_child(args.sizes)
        return
    if args.sharded_child:
        from jaxcrawl.parallel import page_mesh
        mesh = page_mesh()
        for n in args.sizes:
            n = n - n % len(jax.devices())
            r = measure(n, with_estimators=False, mesh=mesh)
            out.update({f"sharded{len(jax.devices())}_{k}_{label(n)}": v for k, v in r.items()})
        print(json.dumps(out))
        return
    print(f"{'pages':>8} {'lambda_crawl':>13} {'passes':>6} {'BLC':>10} {'1 mem pass':>11} {'ratio':>6} "
          f"{'GB/pass':>8} {'peak/input':>10} {'MLE (8 obs)':>12}")
    for n in args.sizes:
        r = measure(n)
        out.update({f"{k.replace('_seconds', '')}_{label(n)}_seconds" if k.endswith("_seconds") else f"{k}_{label(n)}": v
                    for k, v in r.items()})
        out[f"lambda_crawl_{label(n)}_passes"] = r["lambda_crawl_passes"]
        print(f"{label(n):>8} {r['lambda_crawl_seconds'] * 1e3:>10.1f} ms {r['lambda_crawl_passes']:>6} "
              f"{r['binary_lambda_crawl_seconds'] * 1e3:>7.1f} ms {r['numpy_memory_pass_seconds'] * 1e3:>8.2f} ms "
              f"{r['solve_over_memory_pass']:>6.1f} {r['bytes_per_pass'] / 1e9:>8.3f} {r['peak_over_input']:>10.2f} "
              f"{r['mle_seconds'] * 1e3:>9.1f} ms")
    if args.devices > 1:
        env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={args.devices}")
        proc = subprocess.run([sys.executable, __file__, "--sharded-child", "--sizes", *map(str, args.sizes)],
                              env=env, capture_output=True, text=True)
        if proc.returncode == 0:
            child = json.loads(proc.stdout.strip().splitlines()[-1])
            out.update(child)
            for n in args.sizes:
                n8 = n - n % args.devices
                key = f"sharded{args.devices}_lambda_crawl_seconds_{label(n8)}"
                if key in child:
                    print(f"{label(n8):>8} sharded over {args.devices} host devices: lambda_crawl "
                          f"{child[key] * 1e3:.1f} ms, {child[f'sharded{args.devices}_lambda_crawl_passes_{label(n8)}']} passes")
        else:
            print("sharded run failed:\n" + proc.stderr[-2000:])
    if args.processes > 1:
        out.update(run_processes(args.sizes, args.processes))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
