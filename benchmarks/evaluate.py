"""``jaxcrawl evaluate``'s matched heuristic: the documented-range search on an even sample of
pages (``match_in_range(..., sample_pages=4096)``, what ``evaluate`` runs) against the
search on every page (the baseline, measured in the same run), each followed by the chosen
setting's long run on every page.  Prints seconds (after one untimed compiling call), the
speed-up, and how far each chosen setting's volume on every page is from the bandwidth;
the last line is one JSON object.

    python benchmarks/evaluate.py [--num-pages 20000] [--crawler nutch-adaptive]
"""
from __future__ import annotations

import argparse
import json
import time

import jax
import numpy as np

import jaxcrawl
from jaxcrawl.learners import long_run, match_in_range
from jaxcrawl.policy_eval import MATCH_SAMPLE_PAGES


def matched(problem, crawler, sample):
    """Seconds of the search and the chosen setting's relative volume error on every page."""
    bw = float(problem.bandwidth)
    t0 = time.perf_counter()
    m = match_in_range(jax.random.key(1), crawler, problem, [bw], shrink_points=6, scale_points=16,
                       burn_in_fetches=32, num_fetches=128, sample_pages=sample)
    settings = {k: float(np.asarray(v).reshape(-1)[0]) for k, v in m.settings.items()}
    seconds = time.perf_counter() - t0
    lr = long_run(jax.random.key(2), crawler, problem, burn_in_fetches=64, num_fetches=128, **settings)
    return seconds, float(lr.crawl_rate) / bw - 1.0, float(lr.harmonic_cost)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--num-pages", type=int, default=20_000)
    ap.add_argument("--crawler", default="nutch-adaptive")
    args = ap.parse_args()
    n = args.num_pages
    syn = jax.jit(jaxcrawl.synthetic, static_argnums=1)(jax.random.key(0), n)
    problem = jaxcrawl.CrawlProblem(syn.importance, syn.change_rate, 0.2 * n, syn.complete)
    out = {}
    for label, sample in (("every_page", None), ("sample", MATCH_SAMPLE_PAGES)):
        matched(problem, args.crawler, sample)  # compiles
        seconds, off, cost = matched(problem, args.crawler, sample)
        out[label] = {"seconds": seconds, "volume_error": off, "harmonic_cost": cost}
        print(f"{label:<10} search {seconds:7.2f} s  volume on every page {100 * off:+.2f}%  harmonic {cost:.4g}")
    ratio = out["every_page"]["seconds"] / out["sample"]["seconds"]
    print(f"speed-up  {ratio:.1f}x ({n} pages, {args.crawler}, sample {MATCH_SAMPLE_PAGES})")
    print(json.dumps({"benchmark": "evaluate_matched", "num_pages": n, "crawler": args.crawler,
                      "sample_pages": MATCH_SAMPLE_PAGES, "speedup": ratio, "dtype": str(problem.change_rate.dtype),
                      **out}))


if __name__ == "__main__":
    main()
