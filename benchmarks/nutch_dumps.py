"""Throughput and memory of the Nutch CrawlDb dump reader (:func:`jaxcrawl.io.read_nutch_dumps`).

Writes ``--days`` synthetic ``readdb -dump`` text files of ``--records`` records each (about
340 bytes a record with two metadata lines, as Nutch writes them; every page fetched each
day, a third of them changed), then reads them in a fresh process and prints records/s,
MB/s and the reader's peak RSS; ends with ONE JSON line.

    python benchmarks/nutch_dumps.py                  # 2 dumps of 1 million records
    python benchmarks/nutch_dumps.py --quick          # 2 dumps of 100,000 records
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import resource
import subprocess
import sys
import tempfile
import time


def java_date(epoch_s: int) -> str:
    return dt.datetime.fromtimestamp(epoch_s, dt.timezone.utc).strftime("%a %b %d %H:%M:%S UTC %Y")


def write_dump(path: str, records: int, day: int, t0: int = 1_780_000_000) -> None:
    """One dump: every page fetched on ``day``, its signature changing every third day."""
    with open(path, "w") as fh:
        for s in range(0, records, 10_000):
            out = []
            for i in range(s, min(s + 10_000, records)):
                fetch = t0 + (day + 1) * 86400 + i % 3571
                sig = f"{(i * 7919 + (day + i % 3) // 3) % 2**64:032x}"
                out.append(f"http://h{i % 5000}.example.com/page/{i}\tVersion: 7\nStatus: 2 (db_fetched)\n"
                           f"Fetch time: {java_date(fetch)}\nModified time: {java_date(fetch - 86400)}\n"
                           f"Retries since fetch: 0\nRetry interval: 86400 seconds (1 days)\nScore: 1.0\n"
                           f"Signature: {sig}\nMetadata: \n \t_pst_=success(1), lastModified=0\n"
                           f"\tContent-Type=text/html\n\n")
            fh.write("".join(out))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--days", type=int, default=2)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        from jaxcrawl.io import read_nutch_dumps

        t = time.perf_counter()
        h = read_nutch_dumps(args.child)
        seconds = time.perf_counter() - t
        print(json.dumps({"seconds": seconds, "observations": int(h.offsets[-1]),
                          "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
        return
    records = 100_000 if args.quick else args.records
    with tempfile.TemporaryDirectory() as tmp:
        paths = [os.path.join(tmp, f"dump-{d}.txt") for d in range(args.days)]
        for d, path in enumerate(paths):
            write_dump(path, records, d)
        size = sum(os.path.getsize(x) for x in paths)
        out = subprocess.run([sys.executable, __file__, "--child", *paths], check=True, capture_output=True,
                             text=True).stdout
        got = json.loads(out.strip().splitlines()[-1])
    total = records * args.days
    result = {"records": total, "bytes": size, "seconds": round(got["seconds"], 3),
              "records_per_s": round(total / got["seconds"]), "mb_per_s": round(size / 1e6 / got["seconds"], 1),
              "observations": got["observations"], "peak_rss_mb": round(got["peak_rss_mb"])}
    print(f"{total:,} records ({size / 1e6:.0f} MB) in {got['seconds']:.2f} s: {result['records_per_s']:,} records/s, "
          f"{result['mb_per_s']} MB/s, peak RSS {result['peak_rss_mb']} MB")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
