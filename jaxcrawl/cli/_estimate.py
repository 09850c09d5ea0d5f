"""``jaxcrawl estimate``: crawl histories in, estimated change rates (with confidence
half-widths) out.

Input is either a directory in the NeurIPS-19 data set format
(:func:`jaxcrawl.io.load_crawl_dataset`), a table of histories with header
``page_id,interval,changed[,importance]`` (:func:`jaxcrawl.io.read_histories`; one row per
observation, in time order within each page), or what crawlers keep: CDX/CDXJ indexes
(``--from-cdx``, :func:`jaxcrawl.io.read_cdx`), WARC files (``--from-warc``,
:func:`jaxcrawl.io.read_warc`) or Nutch CrawlDb dumps (``--from-nutch-dumps``,
:func:`jaxcrawl.io.read_nutch_dumps`), whose intervals are in ``--time-unit``.
Output is a CSV with one row per page.  With a data set directory and ``--columns
problem`` this is the NeurIPS-19 ``ProcessRawData`` step in one invocation: every URL's
change rate is estimated from its whole history (complete-observation URLs keep their
given rate) and ``page_id,importance,change_rate,complete`` is written, ready for
``jaxcrawl solve --input``.

The default estimator is the smoothed MLE (NeurIPS-19 Alg. 4 line 11): the MLE with a
prior of one imaginary changed and one imaginary unchanged interval of ``--smoothing``
time units.  The plain MLE puts every history with no change at ``--min-rate`` and every
history that changed at each crawl at ``--max-rate`` (the clip, not an estimate); the
prior keeps such histories at finite, positive rates (about ``1/T`` for a history of
length ``T`` with no change).  Every estimator's rate, ``naive`` included, lies in
``[--min-rate, --max-rate]``; pages at a bound are flagged ``low``/``high`` in the
``clipped`` column, counted in the report, and the report says what to do about them.
"""
from __future__ import annotations

import argparse
import json
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxcrawl import estimators as est
from jaxcrawl._src.timeunits import TIME_UNITS
from jaxcrawl.io import (
    CrawlDataset,
    Histories,
    TableError,
    check_output,
    read_cdx,
    read_histories,
    read_nutch_dumps,
    read_warc,
    write_estimates,
    write_problem,
)

from ._options import (
    check_result,
)

__all__ = ["register", "run", "estimate_rates", "ESTIMATORS"]

#: The ``--estimator`` choices.
ESTIMATORS = ("mle-smoothed", "mle", "moment-matching", "naive")
_SKIP_HINT = "(pass --errors skip to count and skip malformed lines)"


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``estimate`` subcommand to an ``argparse`` subparsers object."""
    p = subparsers.add_parser(
        "estimate",
        help="estimate change rates (and confidence half-widths) from crawl histories",
        description=(
            "Estimate every page's change rate from its crawl history. INPUT is a directory "
            "in the NeurIPS-19 data set format (urlid_imp.txt, urlid_offset_history.txt, ...) "
            "or a CSV with header page_id,interval,changed[,importance] (one row per "
            "observation); or, instead of INPUT, crawl archives (--from-cdx, --from-warc) or Nutch CrawlDb "
            "dumps (--from-nutch-dumps), with intervals in --time-unit. Writes a CSV page_id,importance,change_rate,half_width,"
            "num_observations,complete,clipped (or, with --columns problem, the solve-ready table "
            "page_id,importance,change_rate,complete). half_width is the Learning-to-Crawl "
            "Lemma 3 bound (partial observations) or Lemma 8 bound (complete-observation "
            "pages, over the page's monitored time) for --delta; clipped is low/high for a page "
            "whose rate is --min-rate/--max-rate (the clip, not an estimate). The last line printed "
            "is one JSON object."
        ),
    )
    p.add_argument("input", nargs="?", help="data set directory or CSV of histories (or one of --from-cdx, "
                                            "--from-warc, --from-nutch-dumps)")
    p.add_argument("--from-cdx", nargs="+", metavar="FILE",
                   help="histories from CDXJ or classic CDX capture indexes (.gz too; several files are merged): "
                        "consecutive status-200 captures of a page (revisits included) give one interval, "
                        "changed when their payload digests differ; redirects and errors give none")
    p.add_argument("--from-warc", nargs="+", metavar="FILE",
                   help="histories from WARC files (response and revisit records; needs the archives extra, "
                        "pip install \"jaxcrawl[archives]\"), by --from-cdx's rules")
    p.add_argument("--from-nutch-dumps", nargs="+", metavar="DUMP",
                   help="histories from Nutch CrawlDb dumps (readdb -dump), in the order they were taken")
    p.add_argument("--time-unit", choices=tuple(TIME_UNITS), default=None,
                   help="--from-cdx/--from-warc/--from-nutch-dumps: the unit of the intervals, hence of the "
                        "rates written (default days)")
    p.add_argument("--output", "-o", help="CSV to write (default: print only the summary); never an input")
    p.add_argument("--estimator", choices=ESTIMATORS, default="mle-smoothed",
                   help="mle-smoothed (default): NeurIPS-19 Alg. 4 line 11, the MLE with one imaginary "
                        "changed and one unchanged interval of --smoothing (no clipped rate for a history "
                        "with no change or with a change at every crawl); mle: L2C eq. 6 / NeurIPS-19 "
                        "eq. 10 (clips such histories); moment-matching: L2C eq. 7; naive: changes per unit "
                        "time (biased low). Every rate is clipped to [--min-rate, --max-rate]")
    p.add_argument("--delta", type=float, default=0.05, help="confidence level 1-delta of the half-widths (default 0.05)")
    p.add_argument("--min-rate", type=float, default=1e-9, help="lower clip of the estimates (default 1e-9)")
    p.add_argument("--max-rate", type=float, default=25.0, help="upper clip of the estimates (default 25)")
    p.add_argument("--smoothing", type=float, default=0.5,
                   help="mle-smoothed's prior: the length of its imaginary changed and unchanged intervals, in "
                        "the histories' time unit (default 0.5)")
    p.add_argument("--window", type=float, default=None,
                   help="mle-smoothed only: use the history suffix of this length (time units) before each page's last crawl")
    p.add_argument("--columns", choices=("full", "problem"), default="full",
                   help="full: with half-widths and counts (default); problem: page_id,importance,change_rate,complete "
                        "for `jaxcrawl solve` (pages with importance <= 0 are left out and counted; "
                        "--from-cdx/--from-warc/--from-nutch-dumps give every page importance 1)")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    p.add_argument("--errors", choices=("raise", "skip"), default="raise",
                   help="malformed input lines: raise (default) or skip and count them")
    p.add_argument("--max-observations", type=int, default=None,
                   help="data set input: keep only each page's most recent observations")
    p.add_argument("--batch-size", type=int, default=65536, help="pages per estimation batch (default 65536)")
    p.add_argument("--x64", action="store_true", help="estimate in float64")
    p.set_defaults(func=run)


def estimate_rates(histories: Histories, estimator: str = "mle-smoothed", *, delta: float = 0.05,
                   min_rate: float = 1e-9, max_rate: float = 25.0, smoothing: float = 0.5,
                   window: float | None = None, batch_size: int = 65536,
                   dtype: type = np.float32) -> tuple[np.ndarray, np.ndarray]:
    """Rates and confidence half-widths of every page of ``histories``
    (:class:`jaxcrawl.io.Histories`), in padded batches of pages of similar
    history length.

    Pages are grouped by their number of observations rounded up to a power of two (at least
    8), and each group is padded only to its own width, in batches of at most
    ``batch_size`` pages and about 4M observation slots: memory is proportional to the
    total number of observations (at most twice it, plus one batch), not to pages times the
    longest history -- one page with 20,000 observations among 20,000 short ones no longer
    pads all of them to 20,000.  One compilation per group width (and per batch height,
    a power of two).

    Complete-observation pages keep their given rate and get the Lemma 8 half-width over
    their monitored time; the others get the ``estimator``'s rate and the Lemma 3
    half-width.  Every rate is clipped into ``[min_rate, max_rate]`` (``naive`` too: no
    change observed gives ``min_rate``, not 0, so a solve accepts the table).
    """

    lo, hi = min_rate, max_rate
    count = histories.num_observations
    n = count.shape[0]

    def rate_fn(w, c, m):
        if estimator == "mle":
            return est.mle(w, c, m, min_rate=lo, max_rate=hi)
        if estimator == "moment-matching":
            return est.moment_matching(w, c, m, min_rate=lo, max_rate=hi)
        if estimator == "mle-smoothed":
            return est.mle_smoothed(w, c, m, window=window, smoothing=smoothing, min_rate=lo, max_rate=hi)
        if estimator == "naive":
            return jnp.clip(est.naive(w, c, m), lo, hi)
        raise ValueError(f"estimator must be one of {ESTIMATORS}; got {estimator!r}")

    @jax.jit
    def batch_fn(w, c, m):
        rate = rate_fn(w, c, m)
        hw3 = est.lemma3_halfwidth(w, m, delta=delta, min_rate=lo, max_rate=hi)
        hw8 = est.lemma8_halfwidth(w, m, delta=delta, min_rate=lo, max_rate=hi)
        return rate, hw3, hw8

    def pow2(v):
        return 1 << max(int(v) - 1, 0).bit_length()

    rates, hw3, hw8 = np.empty(n), np.empty(n), np.empty(n)
    width = np.maximum(8, np.asarray([pow2(v) for v in np.unique(count)]))  # per distinct count
    group_width = dict(zip(np.unique(count).tolist(), width.tolist()))
    page_width = np.asarray([group_width[v] for v in count.tolist()], np.int64) if n else np.zeros(0, np.int64)
    for k in np.unique(page_width).tolist():
        pages = np.flatnonzero(page_width == k)
        bs = max(1, min(int(batch_size), (1 << 22) // k, pow2(pages.size)))
        for start in range(0, pages.size, bs):
            part = pages[start:start + bs]
            w, c, m = histories.padded(part, width=k)
            pad = bs - part.size
            if pad:
                w, c, m = (np.concatenate([a, np.zeros((pad, k), a.dtype)]) for a in (w, c, m))
            r, a, b = jax.block_until_ready(batch_fn(jnp.asarray(w.astype(dtype, copy=False)), jnp.asarray(c),
                                                     jnp.asarray(m)))
            rates[part] = np.asarray(r)[: part.size]
            hw3[part] = np.asarray(a)[: part.size]
            hw8[part] = np.asarray(b)[: part.size]
    comp = histories.complete
    rates = np.where(comp, np.clip(np.nan_to_num(histories.complete_change_rate, nan=lo), lo, hi), rates)
    return rates, np.where(comp, hw8, hw3)


_SOURCES = ("--from-cdx", "--from-warc", "--from-nutch-dumps")


def _source(args: argparse.Namespace) -> tuple[str, list[str]]:
    """The input's kind (``"input"`` or one of :data:`_SOURCES`) and its files; exactly one."""
    given = [(flag, getattr(args, flag[2:].replace("-", "_"), None)) for flag in _SOURCES]
    given = [(flag, list(files)) for flag, files in given if files]
    if args.input is not None:
        given.insert(0, ("input", [args.input]))
    if len(given) != 1:
        names = " and ".join("INPUT" if f == "input" else f for f, _ in given)
        raise ValueError(f"estimate reads one source: INPUT (a history table or data set directory), "
                         f"{', '.join(_SOURCES)}; got " + (names if given else "none"))
    if given[0][0] == "input" and args.time_unit is not None:
        raise ValueError("--time-unit applies to --from-cdx, --from-warc and --from-nutch-dumps (a history "
                         "table's intervals are already in its own unit)")
    return given[0]


def _read_source(args: argparse.Namespace, kind: str, files: list[str], dtype: type) -> Histories:
    unit = args.time_unit or "days"
    if kind == "--from-cdx":
        return read_cdx(files, errors=args.errors, unit=unit, dtype=dtype, hint=_SKIP_HINT)
    if kind == "--from-warc":
        return read_warc(files, errors=args.errors, unit=unit, dtype=dtype, hint=_SKIP_HINT)
    if kind == "--from-nutch-dumps":
        return read_nutch_dumps(files, errors=args.errors, unit=unit, dtype=dtype)
    return read_histories(args.input, errors=args.errors, dtype=dtype, max_observations=args.max_observations,
                          hint=_SKIP_HINT, quiet=getattr(args, "quiet", False))


def _check_args(args: argparse.Namespace) -> None:
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


def _clip_advice(args: argparse.Namespace, low: int, high: int, complete: int) -> list[str]:
    """What to do about the pages whose rate is a bound of the clip range (empty: none)."""
    where = ("the output's clipped column names them" if args.columns == "full" and args.output else
             "--columns full writes a clipped column naming them")
    out = []
    if (low or high) and args.estimator in ("mle", "moment-matching", "naive"):
        out.append(f"{low + high} crawled pages sit at the clip ({low} low: no change seen, {high} high: a change "
                   f"at every crawl), a bound and not an estimate; --estimator mle-smoothed (the default) gives "
                   f"them finite rates from a prior of one changed and one unchanged --smoothing interval; "
                   f"{where}")
    elif low or high:
        out.append(f"{low + high} crawled pages sit at the clip ({low} low, {high} high) even with the prior: "
                   f"lower --min-rate / raise --max-rate if such rates are plausible, or lengthen --smoothing; "
                   f"{where}")
    if complete:
        out.append(f"{complete} complete pages have a given change rate outside [--min-rate, --max-rate] "
                   f"(clipped); widen the range to keep their rates")
    return out


def run(args: argparse.Namespace) -> int:
    """Run ``jaxcrawl estimate``; returns the process exit code."""

    _check_args(args)
    kind, files = _source(args)
    if kind != "input" and args.max_observations is not None:
        raise ValueError("--max-observations applies to a data set directory INPUT only")
    inputs = ([os.path.join(args.input, name) for name in CrawlDataset.FILES.values()]
              if kind == "input" and os.path.isdir(args.input) else files)
    check_output(args.output, *inputs)
    dtype = np.float64 if args.x64 else np.float32
    t0 = time.perf_counter()
    try:
        h = _read_source(args, kind, files, dtype)
    except TableError as err:
        if (err.reason or "").startswith("interval outside"):  # not a malformed line: --x64, not --errors skip
            raise
        raise err.with_hint(_SKIP_HINT) from None
    read_seconds = time.perf_counter() - t0
    n = h.page_id.shape[0]
    if kind != "input":  # archives and CrawlDb dumps rank no page above another: importance 1 each
        h = h._replace(importance=np.ones(n))
    has_importance = bool(np.all(np.isfinite(h.importance))) if n else False
    if args.output and args.columns == "problem" and not has_importance:
        raise ValueError("--columns problem needs importance scores (a data set directory, "
                         "or an importance column in the CSV)")

    t0 = time.perf_counter()
    rates, half = estimate_rates(h, args.estimator, delta=args.delta, min_rate=args.min_rate,
                                 max_rate=args.max_rate, smoothing=args.smoothing, window=args.window,
                                 batch_size=args.batch_size, dtype=dtype)
    est_seconds = time.perf_counter() - t0
    nobs = h.num_observations
    left_out = 0
    # a rate at a bound of the clip range (as the estimator returns it, in its dtype) is the clip
    low = rates <= float(np.asarray(args.min_rate, dtype))
    high = rates >= float(np.asarray(args.max_rate, dtype))
    clipped = np.where(low, "low", np.where(high, "high", ""))

    failure = check_result({"change rates": rates}, h.page_id, dtype=dtype, what="the estimator")
    if failure is not None:
        raise ValueError(failure + ("; no estimates written" if args.output else ""))
    if args.output:
        if args.columns == "problem":
            keep = h.importance > 0
            left_out = int(n - keep.sum())
            write_problem(args.output, h.page_id[keep], h.importance[keep], rates[keep], h.complete[keep])
        else:
            write_estimates(args.output, h.page_id, h.importance, rates, half, nobs, h.complete, clipped)

    report = h.report
    dataset = kind == "input" and os.path.isdir(h.source)  # a LoadReport (joins, missing files), else a FileReport
    summary = {
        "input": h.source,
        "estimator": args.estimator,
        "num_pages": int(n),
        "num_complete": int(h.complete.sum()),
        "num_observations": int(nobs.sum()),
        "rows_read": int(report.rows_read),
        "rows_skipped": int(report.rows_skipped),
        "delta": args.delta,
        "min_rate": args.min_rate,
        "max_rate": args.max_rate,
        "rate_median": float(np.median(rates)) if n else None,
        "pages_at_min_rate": int(np.sum(low)),
        "pages_at_max_rate": int(np.sum(high)),
        "read_seconds": read_seconds,
        "estimate_seconds": est_seconds,
        "dtype": np.dtype(dtype).name,
    }
    if dataset:
        summary["joins"] = report.joins
        summary["missing_files"] = list(report.missing_files)
    else:
        summary["skipped_by_reason"] = report.skipped_by_reason
    if kind != "input":
        summary["source"] = kind[2:]
        summary["time_unit"] = args.time_unit or "days"
        if hasattr(report, "captures"):
            summary["captures"] = dict(report.captures)
    if args.output:
        summary["output"] = args.output
        summary["columns"] = args.columns
        if args.columns == "problem":
            summary["pages_left_out_nonpositive_importance"] = left_out
    print(f"input        {h.source}: {n} pages ({summary['num_complete']} complete), "
          f"{summary['num_observations']} observations")
    if dataset:
        for line in report.summary().splitlines():
            print(f"             {line}")
    else:
        print(f"             read {summary['rows_read']} rows, skipped {summary['rows_skipped']}"
              + (f" {report.skipped_by_reason}" if summary["rows_skipped"] else ""))
    if "captures" in summary:
        print("             captures " + ", ".join(f"{k} {v}" for k, v in summary["captures"].items()))
    print(f"estimator    {args.estimator}, clipped to [{args.min_rate:g}, {args.max_rate:g}]; "
          f"{summary['pages_at_min_rate']} pages at the lower clip, {summary['pages_at_max_rate']} at the upper")
    advice = _clip_advice(args, int(np.sum(low & ~h.complete)), int(np.sum(high & ~h.complete)),
                          int(np.sum((low | high) & h.complete)))
    if advice:
        summary["clip_advice"] = advice
        for line in advice:
            print(f"             {line}")
    print(f"time         read {read_seconds:.2f} s, estimate {est_seconds:.2f} s")
    if args.output:
        print(f"output       {args.output} ({args.columns} columns"
              + (f", {left_out} pages with importance <= 0 left out" if left_out else "") + ")")
    print(json.dumps(summary))
    return 0
