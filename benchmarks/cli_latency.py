"""First-call latency of ``jaxcrawl solve`` on the embedded default, cold and warm.

Runs ``python -m jaxcrawl.cli solve -o OUT`` as a fresh process: once with the persistent
compilation cache turned off (``--no-compile-cache``), once with an empty cache directory
(cold: everything compiles and is stored), then ``--repeats`` times with that directory
filled (warm: the compiled programs are read back).  Reports the wall time of each (the
whole process: interpreter start, imports, the embedded problem, the solve, the write)
and the number of cached programs.  The last line printed is one JSON object.

Usage: ``python benchmarks/cli_latency.py [--repeats 2]``
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def run_solve(out: Path, env: dict, *flags: str) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "jaxcrawl.cli", *flags, "solve", "-o", str(out)], env=env,
                   check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        env = dict(os.environ, JAXCRAWL_CACHE_DIR=str(tmp / "cache"))
        env.pop("JAXCRAWL_COMPILE_CACHE", None)
        out = tmp / "plan.csv"
        no_cache = run_solve(out, env, "--no-compile-cache")
        cold = run_solve(out, env)
        warm = [run_solve(out, env) for _ in range(args.repeats)]
        cached = len(list((tmp / "cache").iterdir()))
    print(f"jaxcrawl solve (embedded default), whole process: no cache {no_cache:.2f} s, cold cache "
          f"{cold:.2f} s, warm cache {min(warm):.2f} s (best of {args.repeats}); {cached} cached programs")
    print(json.dumps(dict(benchmark="cli_latency", no_cache_seconds=round(no_cache, 2),
                          cold_seconds=round(cold, 2), warm_seconds=round(min(warm), 2),
                          warm_runs=[round(w, 2) for w in warm], cached_programs=cached,
                          cpu_count=os.cpu_count())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
