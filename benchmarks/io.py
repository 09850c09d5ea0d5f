"""I/O at data-set scale: `jaxcrawl solve` end to end from Parquet and CSV, and the NeurIPS-19
loader, each against a baseline measured in the same run.

    python benchmarks/io.py [--num-pages 18500000] [--history-lines 18500000] [--dir DIR]
                            [--only solve|loader]

1. A synthetic page table (integer ids, importance, change_rate, complete) is written as
   Parquet and CSV (not timed).  Baseline: pyarrow alone reading the input and writing a
   plan-shaped output (ids + two float64 columns) in the same format.  Measured:
   ``jaxcrawl solve --input pages.X --output plan.X`` in a fresh process (wall time,
   including Python and JAX start-up and compilation) and its own read/solve/write split.
2. A history file in the data set's format (``URL_ID <TAB> offset <TAB> [[w, z], ...]``, 5
   pairs a line) is generated; the loader reads it (fresh process; peak RSS against the
   bytes of the arrays it returns).  Baseline: a per-line Python parser (``_stream`` +
   ``_parse_history``), timed on the first 200,000 lines and scaled.

Prints the figures and, last, one JSON object.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np


def _pages(n: int, directory: str) -> tuple[str, str]:
    import pyarrow as pa
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    table = pa.table({
        "page_id": pa.array(np.arange(n, dtype=np.int64) * 7 + 1000),
        "importance": pa.array(rng.lognormal(0.0, 1.0, n)),
        "change_rate": pa.array(rng.lognormal(np.log(0.3), 1.0, n)),
        "complete": pa.array((rng.random(n) < 0.04).astype(np.int8)),
    })
    pq_path, csv_path = os.path.join(directory, "pages.parquet"), os.path.join(directory, "pages.csv")
    pq.write_table(table, pq_path)
    pcsv.write_csv(table, csv_path, pcsv.WriteOptions(quoting_style="none"))
    return pq_path, csv_path


def _pyarrow_alone(path: str, out: str) -> float:
    """pyarrow reading the page table and writing a plan-shaped table (same format)."""
    import pyarrow as pa
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    t0 = time.perf_counter()
    if path.endswith(".parquet"):
        t = pq.read_table(path)
    else:
        t = pcsv.read_csv(path)
    plan = pa.table({"page_id": t["page_id"], "rate": t["importance"], "prob": t["change_rate"]})
    if out.endswith(".parquet"):
        pq.write_table(plan, out)
    else:
        pcsv.write_csv(plan, out, pcsv.WriteOptions(quoting_style="none"))
    return time.perf_counter() - t0


def _run(cmd: list[str]) -> tuple[float, dict, int]:
    """Wall time, last JSON line and peak RSS (KiB) of a child process."""
    env = dict(os.environ)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
    import resource

    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return wall, json.loads(proc.stdout.strip().splitlines()[-1]), rss


def _history(n: int, directory: str, pairs: int = 5) -> str:
    """The data set's importance and history files for ``n`` URLs (vectorised with Arrow)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    rng = np.random.default_rng(1)
    os.makedirs(directory, exist_ok=True)
    hist = os.path.join(directory, "urlid_offset_history.txt")
    imp = os.path.join(directory, "urlid_imp.txt")
    block = 1 << 20
    with open(hist, "wb") as fh, open(imp, "wb") as fi:
        for s in range(0, n, block):
            m = min(block, n - s)
            ids = pc.cast(pa.array(np.arange(s, s + m)), pa.string())
            w = [pc.cast(pa.array(np.round(rng.uniform(0.5, 3.0, m), 5)), pa.string()) for _ in range(pairs)]
            z = [pc.cast(pa.array((rng.random(m) < 0.4).astype(np.int64)), pa.string()) for _ in range(pairs)]
            parts = []
            for k in range(pairs):
                parts += ["[" if k == 0 else ", [", w[k], ", ", z[k], "]"]
            history = pc.binary_join_element_wise("[", *parts, "]", "")
            lines = pc.binary_join_element_wise(ids, w[0], history, "\t")
            fh.write(pc.binary_join_element_wise(lines, "", "\n").buffers()[2].to_pybytes()[:])
            imps = pc.cast(pa.array(np.round(rng.lognormal(size=m), 6)), pa.string())
            il = pc.binary_join_element_wise(ids, imps, "\t")
            fi.write(pc.binary_join_element_wise(il, "", "\n").buffers()[2].to_pybytes())
    return directory


def _baseline_loader(directory: str, lines: int = 200_000) -> float:
    """Seconds per line of the per-line parser the loader used before (``_stream``)."""
    from jaxcrawl.io._neurips19 import _OFFSET, _URL_ID, _parse_history, _stream
    from jaxcrawl.io._schema import RowLog

    sample = os.path.join(directory, "sample.txt")
    with open(os.path.join(directory, "urlid_offset_history.txt"), "rb") as src, open(sample, "wb") as dst:
        for _ in range(lines):
            dst.write(src.readline())
    out = []

    def row(f, lineno):
        out.append((_URL_ID.parse(f[0]), _OFFSET.parse(f[1]), _parse_history(f[2])))

    t0 = time.perf_counter()
    _stream(sample, RowLog(sample), 3, row)
    dt = time.perf_counter() - t0
    os.remove(sample)
    return dt / lines


_LOAD = """
import json, resource, sys, time
from jaxcrawl.io import load_crawl_dataset
t0 = time.perf_counter()
ds = load_crawl_dataset(sys.argv[1])
dt = time.perf_counter() - t0
arrays = sum(a.nbytes for a in ds[:-1])
print(json.dumps({"seconds": dt, "pages": int(ds.url_id.size), "observations": int(ds.mask.sum()),
                  "array_bytes": arrays, "peak_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--num-pages", type=int, default=18_500_000)
    ap.add_argument("--history-lines", type=int, default=18_500_000)
    ap.add_argument("--dir", default=None, help="work directory (default: a temporary one)")
    ap.add_argument("--only", choices=("solve", "loader"), default=None, help="run one of the two parts")
    args = ap.parse_args()
    work = args.dir or tempfile.mkdtemp(prefix="jaxcrawl-io-bench-")
    os.makedirs(work, exist_ok=True)
    result: dict = {"num_pages": args.num_pages, "history_lines": args.history_lines,
                    "load_average": os.getloadavg()}
    py = [sys.executable, "-m", "jaxcrawl.cli"]

    pq_in, csv_in = _pages(args.num_pages, work) if args.only != "loader" else (None, None)
    for fmt, src in (("parquet", pq_in), ("csv", csv_in)) if args.only != "loader" else ():
        base = _pyarrow_alone(src, os.path.join(work, f"pa_plan.{fmt}"))
        wall, summary, _ = _run(py + ["solve", "--input", src, "--output", os.path.join(work, f"plan.{fmt}"),
                                      "--quiet"])
        inproc = summary["read_seconds"] + summary["solve_seconds"] + summary["write_seconds"]
        result[fmt] = {"pyarrow_read_write_s": base, "solve_process_wall_s": wall,
                       "solve_read_s": summary["read_seconds"], "solve_solve_s": summary["solve_seconds"],
                       "solve_write_s": summary["write_seconds"], "solve_in_process_s": inproc,
                       "ratio_in_process_to_pyarrow": inproc / base, "ratio_wall_to_pyarrow": wall / base,
                       "converged": summary["converged"]}
        print(f"{fmt:8s} pyarrow read+write {base:6.2f} s | jaxcrawl solve: read {summary['read_seconds']:.2f} s, "
              f"solve {summary['solve_seconds']:.2f} s (incl. compile), write {summary['write_seconds']:.2f} s = "
              f"{inproc:.2f} s in process ({inproc / base:.2f}x pyarrow), {wall:.2f} s wall with start-up "
              f"({wall / base:.2f}x)")

    if args.only == "solve":
        result["load_average_end"] = os.getloadavg()
        print(json.dumps(result))
        return
    hdir = os.path.join(work, "dataset")
    marker = os.path.join(hdir, ".lines")  # a generated data set is reused by later runs with --dir
    if not (os.path.exists(marker) and open(marker).read() == str(args.history_lines)):
        _history(args.history_lines, hdir)
        with open(marker, "w") as fh:
            fh.write(str(args.history_lines))
    per_line = _baseline_loader(hdir)
    proc = subprocess.run([sys.executable, "-c", _LOAD, hdir], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-2000:])
    measured = json.loads(proc.stdout.strip().splitlines()[-1])
    baseline = per_line * args.history_lines
    result["loader"] = dict(measured, baseline_per_line_us=per_line * 1e6, baseline_scaled_s=baseline,
                            speedup=baseline / measured["seconds"],
                            rss_over_arrays=measured["peak_rss_kib"] * 1024 / measured["array_bytes"])
    print(f"loader   {args.history_lines} lines: {measured['seconds']:.1f} s (per-line parser: "
          f"{per_line * 1e6:.1f} us/line -> {baseline:.0f} s, {baseline / measured['seconds']:.1f}x); peak RSS "
          f"{measured['peak_rss_kib'] / 2**20:.2f} GiB = {result['loader']['rss_over_arrays']:.2f}x the arrays returned")
    result["load_average_end"] = os.getloadavg()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
