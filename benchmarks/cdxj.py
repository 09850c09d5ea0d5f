"""Throughput and memory of the CDXJ reader (:func:`jaxcrawl.io.read_cdx`).

Writes a synthetic CDXJ file of ``--lines`` captures (Common Crawl's key order: about 380
bytes a line; pages captured several times across the file, 10% redirects and errors),
then times, each in a fresh process: the imports alone, a plain Python loop over the file's
lines (the baseline; not with ``--gzip``), and the reader.  Prints lines/s, CPU seconds and
the peak RSS of the reader and of the imports alone, the wall and CPU seconds of the
``read_cdx`` call alone, and ends with ONE JSON line.  ``--threads 1`` gives the CPU cost
of a line without the second thread's overlap.

    python benchmarks/cdxj.py                 # 10 million lines
    python benchmarks/cdxj.py --quick         # 200,000 lines
    python benchmarks/cdxj.py --lines 1000000 --threads 1 --path /tmp/index.cdxj
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np


def write_cdxj(path: str, lines: int, pages: int, seed: int = 0) -> None:
    """A synthetic CDXJ file: ``lines`` captures of ``pages`` pages, in page-then-time order."""
    rng = np.random.default_rng(seed)
    per = np.maximum(1, np.round(lines / pages)).astype(int)
    chunk = 100_000
    status = np.array(["200"] * 18 + ["301", "404"])
    with open(path, "w") as fh:
        for lo in range(0, lines, chunk):
            i = np.arange(lo, min(lo + chunk, lines))
            page = i // per
            day = (i % per) * 7 + rng.integers(0, 3, i.size)
            ver = rng.integers(0, 4, i.size)
            st = status[rng.integers(0, status.size, i.size)]
            out = [f'com,example,www)/p/{p}.html 2024{1 + d // 28 % 12:02d}{1 + d % 28:02d}{h:02d}0000 '
                   f'{{"url": "https://www.example.com/p/{p}.html", "mime": "text/html", '
                   f'"mime-detected": "text/html", "status": "{s}", "digest": "sha1:{p:016d}{v:016X}", '
                   f'"length": "{1000 + p % 5000}", "offset": "{ii * 713}", '
                   f'"filename": "crawl-data/CC-MAIN-2024-10/segments/1707947473347.0/warc/x.warc.gz", '
                   f'"charset": "UTF-8", "languages": "eng"}}\n'
                   for p, d, h, v, s, ii in zip(page.tolist(), day.tolist(), (i % 24).tolist(), ver.tolist(),
                                                st.tolist(), i.tolist())]
            fh.write("".join(out))


_PEAK = "import resource; peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024\n"
_CHILD = {
    "imports": "import jaxcrawl.io._archives\nprint(0)\n" + _PEAK,
    "baseline": "import sys\nn = 0\nfor line in open(sys.argv[1], 'rb'):\n    n += 1\nprint(n)\n" + _PEAK,
    "reader": "import sys, time\nimport jaxcrawl.io._archives as A\nfrom jaxcrawl.io import read_cdx\n"
              "A._THREADS = int(sys.argv[2]) or A._THREADS\nc, w = time.process_time(), time.perf_counter()\n"
              "h = read_cdx(sys.argv[1])\nprint(time.process_time() - c, time.perf_counter() - w)\n"
              "print(h.report.rows_read, h.page_id.size, int(h.offsets[-1]))\n" + _PEAK,
}


def _timed(kind: str, path: str, threads: int = 0) -> tuple[float, float, float, list[str]]:
    """Wall seconds, CPU seconds and peak RSS (MiB) of one child process, and the lines it printed."""
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    code = _CHILD[kind] + "print(peak)\n"
    out = subprocess.run([sys.executable, "-c", code, path, str(threads)], capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if out.returncode:
        raise SystemExit(f"{kind} failed:\n{out.stderr[-3000:]}")
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    *printed, peak = out.stdout.strip().splitlines()
    return seconds, cpu, float(peak), printed


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lines", type=int, default=10_000_000)
    p.add_argument("--quick", action="store_true", help="200,000 lines")
    p.add_argument("--dir", default=None, help="where to write the file (default: a temporary directory)")
    p.add_argument("--gzip", action="store_true", help="write and read index.cdxj.gz")
    p.add_argument("--threads", type=int, default=0, help="blocks parsed at once (default: the reader's, 2)")
    p.add_argument("--path", default=None, help="the file to read, written there first (and kept) if missing")
    args = p.parse_args(argv)
    lines = 200_000 if args.quick else args.lines
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        path = args.path or os.path.join(tmp, "index.cdxj" + ".gz" * args.gzip)
        if not os.path.exists(path):
            t0 = time.perf_counter()
            write_cdxj(path.removesuffix(".gz"), lines, pages=max(1, lines // 5))
            if path.endswith(".gz"):
                subprocess.run(["gzip", "-1", path.removesuffix(".gz")], check=True)
            print(f"wrote {lines} lines ({os.path.getsize(path) / 2**20:.0f} MiB) in {time.perf_counter() - t0:.1f} s")
        size = os.path.getsize(path)
        imp_s, _, imp_rss, _ = _timed("imports", path)
        base_s = None if path.endswith(".gz") else _timed("baseline", path)[0]
        read_s, read_cpu, read_rss, (inner, got) = _timed("reader", path, args.threads)
    call_cpu, call_s = map(float, inner.split())  # the read_cdx call alone
    lines = int(got.split()[0])  # (a file given by --path may hold another count)
    load = os.getloadavg()[0]
    result = {
        "benchmark": "cdxj", "lines": lines, "bytes": size, "gzip": path.endswith(".gz"), "load_average": load,
        "baseline_seconds": base_s, "imports_seconds": imp_s, "reader_seconds": read_s,
        "reader_cpu_seconds": read_cpu, "threads": args.threads or None, "call_seconds": call_s,
        "call_cpu_seconds": call_cpu, "call_cpu_us_per_line": call_cpu / lines * 1e6,
        "call_lines_per_s": lines / call_s, "baseline_lines_per_s": lines / base_s if base_s else None,
        "reader_lines_per_s": lines / read_s, "reader_lines_per_s_after_imports": lines / (read_s - imp_s),
        "reader_vs_baseline": base_s / read_s if base_s else None, "peak_rss_mib": read_rss,
        "imports_rss_mib": imp_rss,
        "reader_bytes_per_line": (read_rss - imp_rss) * 2**20 / lines, "file_bytes_per_line": size / lines,
        "reader_out": got,
    }
    if base_s:
        print(f"python line loop  {lines / base_s:12,.0f} lines/s ({base_s:.2f} s)")
    print(f"read_cdx          {lines / read_s:12,.0f} lines/s ({read_s:.2f} s, of which {imp_s:.2f} s interpreter "
          f"start and imports; {read_cpu:.2f} CPU s); peak RSS {read_rss:.0f} MiB ({imp_rss:.0f} MiB after the "
          f"imports alone); load average {load:.1f}")
    print(f"  the read_cdx call {lines / call_s:12,.0f} lines/s ({call_s:.2f} s, {call_cpu:.2f} CPU s: "
          f"{call_cpu / lines * 1e6:.2f} CPU us a line)")
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
