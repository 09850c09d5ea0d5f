"""``jaxcrawl estimate``: crawl histories in, estimated change rates (with confidence
half-widths) out.

Input is either a directory in the NeurIPS-19 data set format (see
:mod:`jaxcrawl.dataset`) or a CSV of histories with header
``page_id,interval,changed[,importance]`` (one row per observation, in time order within
each page).  Output is a CSV with one row per page.  With a data set directory and
``--columns problem`` this is the NeurIPS-19 ``ProcessRawData`` step in one invocation:
every URL's change rate is estimated from its whole history (complete-observation URLs
keep their given rate) and ``page_id,importance,change_rate,complete`` is written, ready
for ``jaxcrawl solve --input``.
"""
from __future__ import annotations

import csv
import json
import os
import sys
import time
from typing import NamedTuple

import numpy as np

__all__ = ["register", "run"]

ESTIMATORS = ("mle", "moment-matching", "mle-smoothed", "naive")


def register(subparsers) -> None:
    """Add the ``estimate`` subcommand to an ``argparse`` subparsers object."""
    p = subparsers.add_parser(
        "estimate",
        help="estimate change rates (and confidence half-widths) from crawl histories",
        description=(
            "Estimate every page's change rate from its crawl history. INPUT is a directory "
            "in the NeurIPS-19 data set format (urlid_imp.txt, urlid_offset_history.txt, ...) "
            "or a CSV with header page_id,interval,changed[,importance] (one row per "
            "observation). Writes a CSV page_id,importance,change_rate,half_width,"
            "num_observations,complete (or, with --columns problem, the solve-ready table "
            "page_id,importance,change_rate,complete). half_width is the Learning-to-Crawl "
            "Lemma 3 bound (partial observations) or Lemma 8 bound (complete-observation "
            "pages, over the page's monitored time) for --delta. The last line printed is "
            "one JSON object."
        ),
    )
    p.add_argument("input", help="data set directory or CSV of histories")
    p.add_argument("--output", "-o", help="CSV to write (default: print only the summary)")
    p.add_argument("--estimator", choices=ESTIMATORS, default="mle",
                   help="mle: L2C eq. 6 / NeurIPS-19 eq. 10 (default); moment-matching: L2C eq. 7; "
                        "mle-smoothed: NeurIPS-19 Alg. 4 line 11; naive: changes per unit time")
    p.add_argument("--delta", type=float, default=0.05, help="confidence level 1-delta of the half-widths (default 0.05)")
    p.add_argument("--min-rate", type=float, default=1e-9, help="lower clip of the estimates (default 1e-9)")
    p.add_argument("--max-rate", type=float, default=25.0, help="upper clip of the estimates (default 25)")
    p.add_argument("--smoothing", type=float, default=0.5, help="imaginary interval length for mle-smoothed (default 0.5)")
    p.add_argument("--window", type=float, default=None,
                   help="mle-smoothed only: use the history suffix of this length (time units) before each page's last crawl")
    p.add_argument("--columns", choices=("full", "problem"), default="full",
                   help="full: with half-widths and counts (default); problem: page_id,importance,change_rate,complete "
                        "for `jaxcrawl solve` (pages with importance <= 0 are left out and counted)")
    p.add_argument("--errors", choices=("raise", "skip"), default="raise",
                   help="malformed input lines: raise (default) or skip and count them")
    p.add_argument("--max-observations", type=int, default=None,
                   help="data set input: keep only each page's most recent observations")
    p.add_argument("--batch-size", type=int, default=65536, help="pages per estimation batch (default 65536)")
    p.add_argument("--x64", action="store_true", help="estimate in float64")
    p.set_defaults(func=run)


class _Histories(NamedTuple):
    page_id: np.ndarray
    importance: np.ndarray  # NaN where unknown
    intervals: np.ndarray
    changed: np.ndarray
    mask: np.ndarray
    complete: np.ndarray
    complete_rate: np.ndarray
    source: str
    report: dict


def _read_history_csv(path: str, errors: str) -> _Histories:
    """Read ``page_id,interval,changed[,importance]`` (header required)."""
    order = {}
    rows_w, rows_z, rows_imp = [], [], []
    skipped, reasons, examples = 0, {}, []
    read = 0

    def bad(lineno, reason, msg):
        nonlocal skipped
        full = f"{path}:{lineno}: {msg}"
        if errors == "raise":
            raise ValueError(full + " (pass --errors skip to count and skip malformed lines)")
        skipped += 1
        reasons[reason] = reasons.get(reason, 0) + 1
        if len(examples) < 10:
            examples.append(full)

    with open(path, newline="") as fh:
        reader = csv.reader(fh)
        try:
            header = [h.strip().lower() for h in next(reader)]
        except StopIteration:
            raise ValueError(f"{path}: the file is empty (expected a header page_id,interval,changed[,importance])") from None
        if header and header[0] == "url_id":
            header[0] = "page_id"
        if header[:3] != ["page_id", "interval", "changed"] or len(header) > 4 or (
            len(header) == 4 and header[3] != "importance"
        ):
            raise ValueError(f"{path}:1: header must be 'page_id,interval,changed[,importance]', got {','.join(header)!r}")
        ncols = len(header)
        for lineno, row in enumerate(reader, start=2):
            if not row or (len(row) == 1 and not row[0].strip()):
                continue
            if len(row) != ncols:
                bad(lineno, "wrong number of fields", f"expected {ncols} fields, got {len(row)}")
                continue
            pid = row[0].strip()
            if not pid:
                bad(lineno, "bad page_id", "page_id is empty")
                continue
            try:
                w = float(row[1])
            except ValueError:
                bad(lineno, "bad interval", f"interval {row[1]!r} is not a number")
                continue
            if not (np.isfinite(w) and w > 0):
                bad(lineno, "bad interval", f"interval must be finite and > 0, got {row[1]!r}")
                continue
            z = row[2].strip()
            if z not in ("0", "1"):
                bad(lineno, "bad changed", f"changed must be 0 or 1, got {row[2]!r}")
                continue
            imp = np.nan
            if ncols == 4:
                try:
                    imp = float(row[3])
                except ValueError:
                    bad(lineno, "bad importance", f"importance {row[3]!r} is not a number")
                    continue
                if not (np.isfinite(imp) and imp >= 0):
                    bad(lineno, "bad importance", f"importance must be finite and >= 0, got {row[3]!r}")
                    continue
            idx = order.setdefault(pid, len(order))
            if idx == len(rows_w):
                rows_w.append([])
                rows_z.append([])
                rows_imp.append(imp)
            elif ncols == 4 and rows_imp[idx] != imp:
                bad(lineno, "inconsistent importance",
                    f"importance {imp!r} differs from {rows_imp[idx]!r} given earlier for page {pid!r}")
                continue
            rows_w[idx].append(w)
            rows_z[idx].append(z == "1")
            read += 1
    if not order:
        raise ValueError(f"{path}: no observations after the header")
    n = len(order)
    k = max(len(r) for r in rows_w)
    intervals = np.zeros((n, k))
    changed = np.zeros((n, k), dtype=bool)
    mask = np.zeros((n, k), dtype=bool)
    for i, (w, z) in enumerate(zip(rows_w, rows_z)):
        intervals[i, : len(w)] = w
        changed[i, : len(z)] = z
        mask[i, : len(w)] = True
    report = {"rows_read": read, "rows_skipped": skipped, "skipped_by_reason": reasons, "examples": examples}
    return _Histories(
        np.asarray(list(order), dtype=object), np.asarray(rows_imp, dtype=float), intervals, changed, mask,
        np.zeros(n, dtype=bool), np.full(n, np.nan), path, report,
    )


def _read_dataset(directory: str, errors: str, max_observations, dtype) -> _Histories:
    from .dataset import load_crawl_dataset

    ds = load_crawl_dataset(directory, errors=errors, max_observations=max_observations, dtype=dtype)
    rep = ds.report
    report = {
        "rows_read": rep.rows_read,
        "rows_skipped": rep.rows_skipped,
        "files": {role: {"rows_read": f.rows_read, "rows_skipped": f.rows_skipped,
                         "skipped_by_reason": f.skipped_by_reason, "examples": list(f.examples)}
                  for role, f in rep.files.items()},
        "missing_files": list(rep.missing_files),
        "joins": rep.joins,
        "summary": rep.summary(),
    }
    return _Histories(ds.url_id, ds.importance, ds.intervals, ds.changed, ds.mask, ds.complete,
                      ds.complete_change_rate, directory, report)


def _estimate_batches(h: _Histories, args, dtype):
    """Rates and half-widths for every page, in fixed-size padded batches (one compile)."""
    import jax
    import jax.numpy as jnp

    from . import estimators as est

    lo, hi = args.min_rate, args.max_rate
    n, k = h.intervals.shape
    k = max(k, 1)

    def rate_fn(w, c, m):
        if args.estimator == "mle":
            return est.mle(w, c, m, min_rate=lo, max_rate=hi)
        if args.estimator == "moment-matching":
            return est.moment_matching(w, c, m, min_rate=lo, max_rate=hi)
        if args.estimator == "mle-smoothed":
            return est.mle_smoothed(w, c, m, window=args.window, smoothing=args.smoothing, min_rate=lo, max_rate=hi)
        return est.naive(w, c, m)

    @jax.jit
    def batch_fn(w, c, m):
        rate = rate_fn(w, c, m)
        hw3 = est.lemma3_halfwidth(w, m, delta=args.delta, min_rate=lo, max_rate=hi)
        hw8 = est.lemma8_halfwidth(w, m, delta=args.delta, min_rate=lo, max_rate=hi)
        return rate, hw3, hw8

    bs = max(1, min(int(args.batch_size), n))
    rates = np.empty(n)
    hw3 = np.empty(n)
    hw8 = np.empty(n)
    for start in range(0, n, bs):
        stop = min(start + bs, n)
        w = np.zeros((bs, k), dtype)
        c = np.zeros((bs, k), bool)
        m = np.zeros((bs, k), bool)
        kk = h.intervals.shape[1]
        w[: stop - start, :kk] = h.intervals[start:stop]
        c[: stop - start, :kk] = h.changed[start:stop]
        m[: stop - start, :kk] = h.mask[start:stop]
        r, a, b = jax.block_until_ready(batch_fn(jnp.asarray(w), jnp.asarray(c), jnp.asarray(m)))
        rates[start:stop] = np.asarray(r)[: stop - start]
        hw3[start:stop] = np.asarray(a)[: stop - start]
        hw8[start:stop] = np.asarray(b)[: stop - start]
    # Complete-observation pages keep their given rate (clipped into the admissible range);
    # their half-width is Lemma 8 over the page's monitored time.
    comp = h.complete
    rates = np.where(comp, np.clip(np.nan_to_num(h.complete_rate, nan=lo), lo, hi), rates)
    half = np.where(comp, hw8, hw3)
    return rates, half


def _fmt(x: float) -> str:
    return "" if not np.isfinite(x) else f"{x:.10g}"


def run(args) -> int:
    """Run ``jaxcrawl estimate``; returns the process exit code."""
    import jax

    if args.x64:
        jax.config.update("jax_enable_x64", True)
    if not (0 < args.delta < 1):
        raise ValueError(f"--delta must lie in (0, 1); got {args.delta}")
    if not (np.isfinite(args.min_rate) and args.min_rate > 0):
        raise ValueError(f"--min-rate must be finite and > 0; got {args.min_rate}")
    if not (np.isfinite(args.max_rate) and args.max_rate > args.min_rate):
        raise ValueError(f"--max-rate must be finite and > --min-rate; got {args.max_rate}")
    if args.window is not None and not args.window > 0:
        raise ValueError(f"--window must be > 0; got {args.window}")
    if args.window is not None and args.estimator != "mle-smoothed":
        raise ValueError("--window applies to --estimator mle-smoothed only")
    if not args.smoothing > 0:
        raise ValueError(f"--smoothing must be > 0; got {args.smoothing}")
    if args.batch_size < 1:
        raise ValueError(f"--batch-size must be >= 1; got {args.batch_size}")
    if not os.path.exists(args.input):
        raise ValueError(f"{args.input}: no such file or directory")

    dtype = np.float64 if args.x64 else np.float32
    t0 = time.perf_counter()
    if os.path.isdir(args.input):
        h = _read_dataset(args.input, args.errors, args.max_observations, dtype)
    else:
        if args.max_observations is not None:
            raise ValueError("--max-observations applies to data set directories only")
        h = _read_history_csv(args.input, args.errors)
    read_seconds = time.perf_counter() - t0
    n = h.page_id.shape[0]

    t0 = time.perf_counter()
    rates, half = _estimate_batches(h, args, dtype)
    est_seconds = time.perf_counter() - t0
    nobs = h.mask.sum(axis=1)
    has_importance = bool(np.all(np.isfinite(h.importance))) if n else False
    left_out = 0
    if args.output:
        with open(args.output, "w", newline="") as fh:
            if args.columns == "problem":
                if not has_importance:
                    raise ValueError("--columns problem needs importance scores (a data set directory, "
                                     "or an importance column in the CSV)")
                fh.write("page_id,importance,change_rate,complete\n")
                for pid, imp, r, c in zip(h.page_id, h.importance, rates, h.complete):
                    if not imp > 0:
                        left_out += 1
                        continue
                    fh.write(f"{pid},{imp:.10g},{r:.10g},{int(c)}\n")
            else:
                fh.write("page_id,importance,change_rate,half_width,num_observations,complete\n")
                for pid, imp, r, hw, k, c in zip(h.page_id, h.importance, rates, half, nobs, h.complete):
                    fh.write(f"{pid},{_fmt(imp)},{r:.10g},{_fmt(hw)},{int(k)},{int(c)}\n")

    summary = {
        "input": h.source,
        "estimator": args.estimator,
        "num_pages": int(n),
        "num_complete": int(h.complete.sum()),
        "num_observations": int(nobs.sum()),
        "rows_read": int(h.report["rows_read"]),
        "rows_skipped": int(h.report["rows_skipped"]),
        "delta": args.delta,
        "min_rate": args.min_rate,
        "max_rate": args.max_rate,
        "rate_median": float(np.median(rates)) if n else None,
        "pages_at_min_rate": int(np.sum(rates <= args.min_rate)),
        "pages_at_max_rate": int(np.sum(rates >= args.max_rate)),
        "read_seconds": read_seconds,
        "estimate_seconds": est_seconds,
        "dtype": np.dtype(dtype).name,
    }
    if "joins" in h.report:
        summary["joins"] = h.report["joins"]
        summary["missing_files"] = h.report["missing_files"]
    if args.output:
        summary["output"] = args.output
        summary["columns"] = args.columns
        if args.columns == "problem":
            summary["pages_left_out_nonpositive_importance"] = left_out
    print(f"input        {h.source}: {n} pages ({summary['num_complete']} complete), "
          f"{summary['num_observations']} observations")
    if "summary" in h.report:
        for line in h.report["summary"].splitlines():
            print(f"             {line}")
    else:
        print(f"             read {summary['rows_read']} rows, skipped {summary['rows_skipped']}"
              + (f" {h.report['skipped_by_reason']}" if summary["rows_skipped"] else ""))
    print(f"estimator    {args.estimator}, clipped to [{args.min_rate:g}, {args.max_rate:g}]; "
          f"{summary['pages_at_min_rate']} pages at the lower clip, {summary['pages_at_max_rate']} at the upper")
    print(f"time         read {read_seconds:.2f} s, estimate {est_seconds:.2f} s")
    if args.output:
        print(f"output       {args.output} ({args.columns} columns"
              + (f", {left_out} pages with importance <= 0 left out" if left_out else "") + ")")
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":  # pragma: no cover
    import argparse

    parser = argparse.ArgumentParser(prog="jaxcrawl")
    register(parser.add_subparsers(dest="command"))
    a = parser.parse_args(sys.argv[1:])
    sys.exit(run(a))
