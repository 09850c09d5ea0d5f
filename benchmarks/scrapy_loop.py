"""A real crawler closes the loop: freshness measured on a live local web, beside the prediction.

Every run starts a fresh :class:`jaxcrawl.scrapy.LocalWeb` (pages changing at Poisson times on
hosts of 127.0.0.1) and crawls it with four policies at the same request budget, each in its own
subprocess running ``jaxcrawl.scrapy.run_crawl`` (Scrapy), at the same time:

* ``plan``     -- the optimal plan solved from the true change rates (the oracle);
* ``learn``    -- jaxcrawl learning the rates online (estimate and re-solve every epoch);
* ``uniform``  -- every page at budget / n per day: what a Scrapy user does today;
* ``nutch-adaptive`` -- Nutch's AdaptiveFetchSchedule at its defaults.

Each crawl's fetch log (its SQLite state) is measured against the server's true change times
(:func:`jaxcrawl.scrapy.measure`: harmonic staleness, binary freshness) after a warm-up, and
beside it stands the closed forms' prediction for the same pages and rates
(:func:`jaxcrawl.scrapy.predict`: the oracle's and uniform's planned rates; for learn and
Nutch, the crawl rates each actually used).  Confidence intervals are over pages and runs:
given the rates, each page's time average is an independent variable whose expectation is
the prediction, so the standard error of a mean is that of the per-page deviations.

``--crawler reference`` replaces Scrapy by a small standard-library fetcher following the
periodic timetable (plan and uniform only), to check the web and the measurement alone.

Claims checked (exit status 1 when one fails): every crawl met the budget within 2%; the
plan beats uniform by the predicted margin of harmonic staleness within its 99.9% interval;
learning (which starts from the uniform plan: every page's rate estimate is 1 per day) ends with
a plan that closes at least half of uniform's gap to the oracle (the learner's last plan costed by
the closed form at the true rates; the measured per-epoch curve is printed and plotted beside it).

    python benchmarks/scrapy_loop.py --quick       # < 2 minutes: the .ci/run check
    python benchmarks/scrapy_loop.py               # full: also writes docs/figures/scrapy_loop.png

The last line printed is one JSON object.
"""
from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import math
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
POLICIES = ("plan", "learn", "uniform", "nutch-adaptive")
Z99 = 2.5758  # two-sided 99% normal quantile: the intervals reported
Z999 = 3.2905  # two-sided 99.9%: the margin claim's check (a true claim fails one run in a thousand)
QUICK = dict(pages=120, hosts=6, days=14.0, warm=4.0, seconds_per_day=1.0, runs=1, epoch_days=2.0)
FULL = dict(pages=300, hosts=12, days=24.0, warm=4.0, seconds_per_day=1.5, runs=3, epoch_days=3.0)


def make_pages(n, hosts, seed=0, sigma=0.0):
    """Change rates per day (0.1 + gamma of shape 0.3 and mean 1: most pages slow, a few fast),
    importance (log-normal of log-sd ``sigma``, mean 1; equal by default, so that learning starts
    from the uniform plan) and hosts (round robin)."""
    rng = np.random.default_rng(seed)
    change_rate = rng.gamma(0.3, 1.0 / 0.3, n) + 0.1
    importance = rng.lognormal(0.0, sigma, n)
    importance /= importance.mean()
    return change_rate, importance, np.arange(n) % hosts


def optimal_rates(change_rate, importance, budget, objective="harmonic"):
    import jax.numpy as jnp

    import jaxcrawl

    problem = jaxcrawl.CrawlProblem(jnp.asarray(importance), jnp.asarray(change_rate), float(budget))
    policy = jaxcrawl.solve(problem, objective)
    if not bool(policy.converged):
        raise RuntimeError("the oracle's solve did not converge")
    return np.asarray(policy.rate, np.float64)


# ------------------------------------------------------------------ reference crawler
def reference_worker(spec):
    """Fetch every URL periodically at its rate (golden-ratio phases) for ``days``; log to SQLite."""
    urls, rates = spec["urls"], np.asarray(spec["rates"], np.float64)
    spd, days = spec["seconds_per_day"], spec["days"]
    phase = (np.arange(len(urls)) * ((math.sqrt(5) - 1) / 2)) % 1.0
    counts = np.ceil(rates * days - phase).astype(int)
    page = np.repeat(np.arange(len(urls)), counts)
    k = np.arange(page.size) - np.repeat(np.cumsum(counts) - counts, counts)
    due = (k + phase[page]) / rates[page]
    order = np.argsort(due, kind="stable")
    con = sqlite3.connect(spec["state"])
    con.execute("CREATE TABLE IF NOT EXISTS fetches(url TEXT NOT NULL, fetched_at REAL NOT NULL, "
                "status INTEGER NOT NULL, digest TEXT, etag TEXT, last_modified TEXT)")
    conns = {}
    start = time.time()
    rows = []
    for i, t in zip(page[order].tolist(), due[order].tolist()):
        wait = start + t * spd - time.time()
        if wait > 0:
            time.sleep(wait)
        host, _, path = urls[i][len("http://"):].partition("/")
        conn = conns.get(host) or conns.setdefault(host, http.client.HTTPConnection(host, timeout=10))
        try:
            conn.request("GET", "/" + path)
            resp = conn.getresponse()
            body = resp.read()
        except (OSError, http.client.HTTPException):
            conns.pop(host).close()
            continue
        rows.append((urls[i], time.time(), resp.status, hashlib.sha1(body).hexdigest(), resp.getheader("ETag"),
                     resp.getheader("Last-Modified")))
        if len(rows) >= 200:
            con.executemany("INSERT INTO fetches VALUES (?, ?, ?, ?, ?, ?)", rows)
            con.commit()
            rows = []
    con.executemany("INSERT INTO fetches VALUES (?, ?, ?, ?, ?, ?)", rows)
    con.commit()
    con.close()
    return {"started_at": start, "requests": int(page.size), "converged": True}


# ----------------------------------------------------------------------------- runs
_SCRAPY_CALL = ("import json, sys; from jaxcrawl.scrapy import run_crawl; "
                "print(json.dumps(run_crawl(**json.load(sys.stdin)), default=str))")


def launch(crawler, policy, spec):
    """Start one crawl subprocess reading its arguments (JSON) from stdin."""
    import jaxcrawl

    # the crawl processes import the same jaxcrawl as this one
    env = dict(os.environ, PYTHONPATH=str(Path(jaxcrawl.__file__).resolve().parents[1]), JAX_PLATFORMS="cpu")
    if crawler == "reference":
        cmd = [sys.executable, __file__, "--reference-worker"]
    else:
        cmd = [sys.executable, "-c", _SCRAPY_CALL]
    spec_file = Path(spec.get("state", "x")).with_suffix(".json")
    spec_file.write_text(json.dumps(spec))
    with open(spec_file) as stdin:
        return subprocess.Popen(cmd, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=env, cwd=str(REPO))


def crawl_spec(crawler, policy, web, state, cfg, budget, change_rate, importance, plan_rates):
    urls = web.urls
    if crawler == "reference":
        rates = plan_rates if policy == "plan" else np.full(len(urls), budget / len(urls))
        return {"urls": urls, "rates": rates.tolist(), "seconds_per_day": cfg["seconds_per_day"],
                "days": cfg["days"], "state": str(state)}
    import inspect

    from jaxcrawl.scrapy import run_crawl

    accepted = inspect.signature(run_crawl).parameters
    spec = {"seeds": urls, "state": str(state), "policy": policy, "budget": budget,
            "seconds_per_day": cfg["seconds_per_day"], "days": cfg["days"], "objective": "harmonic",
            "epoch_days": cfg["epoch_days"]}
    if policy == "plan":
        spec["rates"] = dict(zip(urls, change_rate.tolist()))
    if "importance" in accepted:
        spec["importance"] = importance.tolist()  # one weight per seed
    return spec


def one_run(run, crawler, cfg, change_rate, importance, hosts, budget, plan_rates, workdir, policies):
    from jaxcrawl.scrapy import LocalWeb, measure

    n = change_rate.shape[0]
    delay = np.full(int(hosts.max()) + 1, 0.25 * (hosts.max() + 1) / budget)  # days; caps at 4x a host's share
    startup_days = 60.0 / cfg["seconds_per_day"]  # room for each crawl process to start
    parallel = cfg.get("parallel", False)
    lifetime = (1 if parallel else len(policies)) * (cfg["days"] + startup_days)
    web = LocalWeb(change_rate, hosts, np.zeros(n, bool), delay, seconds_per_day=cfg["seconds_per_day"],
                   seed=1000 + run, days=lifetime)
    out = {}
    with web:
        procs, summaries = {}, {}
        for policy in policies:
            state = workdir / f"run{run}-{policy}.sqlite"
            spec = crawl_spec(crawler, policy, web, state, cfg, budget, change_rate, importance, plan_rates)
            procs[policy] = (launch(crawler, policy, spec), state)
            if not parallel:  # one crawl at a time: on a small machine crawls at once slow each other
                summaries[policy] = _finish(procs[policy][0], policy, run, cfg)
        if parallel:
            for policy in policies:
                summaries[policy] = _finish(procs[policy][0], policy, run, cfg)
        truth = web.truth()
    spd = cfg["seconds_per_day"]
    started = {p: float(s.get("started_at") or _first_fetch(procs[p][1])) for p, s in summaries.items()}
    # the crawls run one after another (or start seconds apart): every crawl is measured over its
    # own window and epochs, on the same pages and the same true change process
    for policy, (_, state) in procs.items():
        s0 = started[policy]
        m = measure(truth, state, start=s0 + cfg["warm"] * spd, end=s0 + cfg["days"] * spd, importance=importance)
        num_epochs = int(cfg["days"] // cfg["epoch_days"])
        edges = s0 + np.arange(num_epochs + 1) * cfg["epoch_days"] * spd
        epochs = [measure(truth, state, start=a, end=b, importance=importance)["harmonic_staleness"]
                  for a, b in zip(edges[:-1], edges[1:])]
        out[policy] = dict(m, summary=summaries[policy], window_days=cfg["days"] - cfg["warm"], epochs=epochs,
                           final_rates=_final_rates(state, web.urls),
                           crawl_fetches=measure(truth, state, start=s0, end=s0 + cfg["days"] * spd)["num_fetches"])
    return out


def _finish(proc, policy, run, cfg):
    """Wait for one crawl process; its summary (the last line it printed, JSON)."""
    try:
        stdout, stderr = proc.communicate(timeout=90.0 + cfg["days"] * cfg["seconds_per_day"] * 1.5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise RuntimeError(f"the {policy} crawl of run {run} did not finish in time") from None
    if proc.returncode != 0:
        raise RuntimeError(f"the {policy} crawl of run {run} failed:\n{stderr[-3000:]}")
    return json.loads(stdout.strip().splitlines()[-1])


def _final_rates(state, urls):
    """The crawl rate of every page in the component's last plan (its ``pages`` table), or None."""
    con = sqlite3.connect(state)
    try:
        rows = dict(con.execute("SELECT url, rate FROM pages").fetchall())
    except sqlite3.DatabaseError:
        return None
    finally:
        con.close()
    rates = np.array([rows.get(u) if rows.get(u) is not None else np.nan for u in urls], np.float64)
    return None if np.isnan(rates).any() else rates


def _first_fetch(state):
    con = sqlite3.connect(state)
    try:
        return con.execute("SELECT MIN(fetched_at) FROM fetches").fetchone()[0]
    finally:
        con.close()


# ---------------------------------------------------------------------- statistics
def summarise(runs, policies, change_rate, importance, budget, plan_rates, days):
    from jaxcrawl.scrapy import predict

    n = change_rate.shape[0]
    planned = {"plan": plan_rates, "uniform": np.full(n, budget / n)}
    table = {}
    for policy in policies:
        harm_dev, fresh_dev, harm, fresh, pred_h, pred_b, budgets = [], [], [], [], [], [], []
        for run in runs:
            r = run[policy]
            used = r["fetches_per_page"] / r["window_days"]
            rates = planned.get(policy, used)
            pred = predict(change_rate, np.maximum(rates, 1e-9), importance=importance)
            harm_dev.append(importance * (r["harmonic_per_page"] - pred["harmonic_per_page"]))
            fresh_dev.append(importance * (r["fresh_per_page"] - pred["fresh_per_page"]))
            harm.append(r["harmonic_staleness"])
            fresh.append(r["binary_freshness"])
            pred_h.append(pred["harmonic_staleness"])
            pred_b.append(pred["binary_freshness"])
            budgets.append(r["crawl_fetches"] / days / budget)
        hd, fd = np.concatenate(harm_dev), np.concatenate(fresh_dev)
        table[policy] = {
            "harmonic": float(np.mean(harm)), "harmonic_ci99": Z99 * float(np.std(hd) / math.sqrt(hd.size)),
            "harmonic_predicted": float(np.mean(pred_h)),
            "binary": float(np.mean(fresh)), "binary_ci99": Z99 * float(np.std(fd) / math.sqrt(fd.size)),
            "binary_predicted": float(np.mean(pred_b)),
            "budget_ratio": [float(b) for b in budgets],
            "predicted_from": "planned rates" if policy in planned else "crawl rates used",
        }
    return table


def check_claims(runs, table, policies, change_rate, importance, budget, plan_rates):
    from jaxcrawl.scrapy import predict

    n = change_rate.shape[0]
    claims = {}
    claims["budget_within_2pct"] = all(abs(b - 1.0) <= 0.02 for p in policies for b in table[p]["budget_ratio"])
    if "plan" in policies and "uniform" in policies:
        pu = predict(change_rate, np.full(n, budget / n), importance=importance)
        pp = predict(change_rate, plan_rates, importance=importance)
        dev = np.concatenate([importance * ((r["uniform"]["harmonic_per_page"] - r["plan"]["harmonic_per_page"])
                                            - (pu["harmonic_per_page"] - pp["harmonic_per_page"])) for r in runs])
        measured = float(np.mean([r["uniform"]["harmonic_staleness"] - r["plan"]["harmonic_staleness"] for r in runs]))
        predicted = pu["harmonic_staleness"] - pp["harmonic_staleness"]
        se = float(np.std(dev) / math.sqrt(dev.size))
        claims["plan_margin"] = {"measured": measured, "predicted": predicted, "ci99": Z99 * se, "ci999": Z999 * se}
        claims["plan_beats_uniform_by_predicted_margin"] = bool(measured > 0 and abs(measured - predicted) <= Z999 * se)
    if {"plan", "learn", "uniform"} <= set(policies):
        curve = [{p: float(np.mean([r[p]["epochs"][k] for r in runs])) for p in ("plan", "learn", "uniform")}
                 for k in range(len(runs[0]["learn"]["epochs"]))]
        claims["learn_epochs"] = curve
        tail = curve[len(curve) // 2:]
        learn_gap = float(np.mean([c["learn"] - c["plan"] for c in tail]))
        uniform_gap = float(np.mean([c["uniform"] - c["plan"] for c in tail]))
        claims["learn_gap_last_half"] = {"learn_minus_plan": learn_gap, "uniform_minus_plan": uniform_gap}
        # the learner's last plan, costed by the closed form at the true rates: the learned plan's
        # staleness against the oracle's and against uniform's, the learner's starting plan
        final = [r["learn"]["final_rates"] for r in runs]
        if all(f is not None for f in final):
            learned = float(np.mean([predict(change_rate, np.maximum(f, 1e-9), importance=importance)
                                     ["harmonic_staleness"] for f in final]))
            oracle = predict(change_rate, plan_rates, importance=importance)["harmonic_staleness"]
            start = predict(change_rate, np.full(n, budget / n), importance=importance)["harmonic_staleness"]
            claims["learned_plan"] = {"learned": learned, "oracle": oracle, "uniform": start,
                                      "gap_closed": (start - learned) / (start - oracle)}
            claims["learning_approaches_oracle"] = bool(learned - oracle <= 0.5 * (start - oracle))
    return claims


def plot(table, claims, policies, path, cfg):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    x = np.arange(len(policies))
    for ax, key, label in ((axes[0], "harmonic", "harmonic staleness (lower is better)"),
                           (axes[1], "binary", "binary freshness (higher is better)")):
        ax.errorbar(x - 0.08, [table[p][key] for p in policies], yerr=[table[p][key + "_ci99"] for p in policies],
                    fmt="o", color="C0", capsize=4, label="measured (99% CI)")
        ax.scatter(x + 0.08, [table[p][key + "_predicted"] for p in policies], color="k", marker="D",
                   label="predicted")
        ax.set_xticks(x, policies)
        ax.set_ylabel(label)
        ax.legend()
    curve = claims.get("learn_epochs")
    if curve:
        first = int(math.ceil(cfg["warm"] / cfg["epoch_days"]))  # the epochs after the warm-up
        k = np.arange(first + 1, len(curve) + 1)
        for p, style in (("plan", "k-"), ("learn", "C0o-"), ("uniform", "C1--")):
            axes[2].plot(k, [c[p] for c in curve[first:]], style, label=f"{p} (measured)")
        for p, color in (("plan", "k"), ("uniform", "C1")):
            axes[2].axhline(table[p]["harmonic_predicted"], color=color, lw=0.8, ls=":")
        axes[2].set_xlabel(f"epoch ({cfg['epoch_days']:g} days)")
        axes[2].set_ylabel("harmonic staleness in the epoch")
        axes[2].legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the < 2 minute configuration (.ci/run)")
    ap.add_argument("--crawler", choices=("scrapy", "reference"), default="scrapy")
    ap.add_argument("--runs", type=int, default=None)
    ap.add_argument("--policies", default=None, help="comma-separated subset of " + ",".join(POLICIES))
    ap.add_argument("--seconds-per-day", type=float, default=None)
    ap.add_argument("--pages", type=int, default=None, help="pages (the budget is half a fetch per page a day)")
    ap.add_argument("--hosts", type=int, default=None)
    ap.add_argument("--days", type=float, default=None)
    ap.add_argument("--figure", default=str(REPO / "docs" / "figures" / "scrapy_loop.png"))
    ap.add_argument("--parallel", action="store_true", help="run a run's crawls at the same time")
    ap.add_argument("--keep", default=None, help="keep the crawl states (SQLite) in this folder")
    ap.add_argument("--reference-worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.reference_worker:
        print(json.dumps(reference_worker(json.load(sys.stdin))))
        return 0
    cfg = dict(QUICK if args.quick else FULL)
    if args.runs:
        cfg["runs"] = args.runs
    cfg["parallel"] = args.parallel
    for key in ("seconds_per_day", "pages", "hosts", "days"):
        if getattr(args, key):
            cfg[key] = getattr(args, key)
    if not (1 <= cfg["hosts"] <= cfg["pages"]):
        ap.error("--hosts must be between 1 and --pages")
    policies = POLICIES if args.crawler == "scrapy" else ("plan", "uniform")
    if args.policies:
        wanted = tuple(p.strip() for p in args.policies.split(","))
        if not set(wanted) <= set(policies):
            ap.error(f"--policies: choose from {', '.join(policies)}")
        policies = wanted
    change_rate, importance, hosts = make_pages(cfg["pages"], cfg["hosts"])
    budget = 0.5 * cfg["pages"]
    plan_rates = optimal_rates(change_rate, importance, budget)
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="jaxcrawl-scrapy-loop-") as tmp:
        folder = Path(args.keep or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        runs = [one_run(run, args.crawler, cfg, change_rate, importance, hosts, budget, plan_rates, folder,
                        policies) for run in range(cfg["runs"])]
    table = summarise(runs, policies, change_rate, importance, budget, plan_rates, cfg["days"])
    claims = check_claims(runs, table, policies, change_rate, importance, budget, plan_rates)
    print(f"{cfg['pages']} pages on {cfg['hosts']} hosts, budget {budget:g} crawls/day, {cfg['runs']} runs of "
          f"{cfg['days']:g} days ({cfg['seconds_per_day']:g} s/day), warm-up {cfg['warm']:g} days, crawler {args.crawler}")
    print(f"{'policy':>15} {'harmonic (99% CI)':>22} {'predicted':>9} {'binary (99% CI)':>20} {'predicted':>9} "
          f"{'budget met':>16}")
    for p in policies:
        t = table[p]
        ratios = ", ".join(f"{b:.3f}" for b in t["budget_ratio"])
        print(f"{p:>15} {t['harmonic']:>13.4f} ± {t['harmonic_ci99']:.4f} {t['harmonic_predicted']:>9.4f} "
              f"{t['binary']:>11.4f} ± {t['binary_ci99']:.4f} {t['binary_predicted']:>9.4f}   {ratios}")
    if "uniform" in table:
        for p in policies:
            print(f"{p:>15}: harmonic staleness {table[p]['harmonic'] / table['uniform']['harmonic']:.3f} x uniform's, "
                  f"binary freshness {table[p]['binary'] / table['uniform']['binary']:.3f} x uniform's")
    for k, c in enumerate(claims.get("learn_epochs", ())):
        print(f"epoch {k + 1:>2}: harmonic staleness " + "  ".join(f"{p} {v:.4f}" for p, v in c.items()))
    for name, value in claims.items():
        if name != "learn_epochs":
            print(f"{name}: {value}")
    if not args.quick:
        plot(table, claims, policies, Path(args.figure), cfg)
    checked = [k for k, v in claims.items() if isinstance(v, bool)]
    ok = all(claims[k] for k in checked)
    print(json.dumps({"benchmark": "scrapy_loop", "quick": args.quick, "crawler": args.crawler, "config": cfg,
                      "budget": budget, "policies": table, "claims": claims, "claims_ok": ok,
                      "seconds": round(time.time() - t0, 1)}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
