"""The chain of docs/io.md "From archives to each crawler's file", run as written: archives
of pages with known change rates (examples/make_archives.py) -> estimate -> solve ->
schedule -> each crawler's file; the estimated rates checked against the known ones."""
import csv
import glob
import json
import os
import re
import shlex
import shutil
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("warcio")

from jaxcrawl.cli import main  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _chain_commands():
    text = open(os.path.join(ROOT, "docs/io.md")).read()
    section = text.split("## From archives to each crawler's file", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```sh\n(.*?)```", section, flags=re.S).group(1)
    return [shlex.split(line) for line in re.sub(r"\\\n\s*", " ", block).splitlines() if line.strip()]


def _rates(path):
    return {r["page_id"]: float(r["change_rate"]) for r in csv.DictReader(open(path))}


@pytest.mark.long
def test_archives_to_crawler_files_recover_the_known_rates(tmp_path, monkeypatch, capsys):
    shutil.copytree(os.path.join(ROOT, "examples"), tmp_path / "examples")
    monkeypatch.chdir(tmp_path)
    commands = _chain_commands()
    assert [c[:2] for c in commands] == [["python", "examples/make_archives.py"], ["jaxcrawl", "estimate"],
                                         ["jaxcrawl", "solve"], ["jaxcrawl", "schedule"], ["jaxcrawl", "schedule"]]
    for args in commands:
        args = [x for a in args for x in (sorted(glob.glob(a)) if "*" in a else [a])]
        if args[0] == "python":
            subprocess.run([sys.executable, *args[1:]], check=True, capture_output=True)
            continue
        assert main(args[1:] + ["--quiet"]) == 0, capsys.readouterr().err
        capsys.readouterr()

    # the same fetches as a history table (the generator's schedule) give the same estimates
    sys.path.insert(0, str(tmp_path / "examples"))
    try:
        from make_archives import schedule
    finally:
        sys.path.pop(0)
    urls, true_rate, captures = schedule()
    times, versions = {}, {}
    for t, p, kind, version in captures:
        if kind == "ok":
            times.setdefault(p, []).append(t)
            versions.setdefault(p, []).append(version)
    with open("table.csv", "w") as fh:
        fh.write("page_id,interval,changed,importance\n")
        for p, u in enumerate(urls):
            for w, c in zip(np.diff(times[p]).tolist(), (np.diff(versions[p]) > 0).tolist()):
                fh.write(f"{u},{w!r},{int(c)},1\n")
    assert main(["estimate", "table.csv", "--columns", "problem", "-o", "from-table.csv", "--quiet"]) == 0
    got, table = _rates("problem.csv"), _rates("from-table.csv")
    assert sorted(got) == sorted(urls)
    np.testing.assert_allclose([got[u] for u in urls], [table[u] for u in urls], rtol=1e-5)

    # against the known rates: z = (estimate - rate) / sigma, sigma from the Fisher information
    # of the page's own intervals at its true rate; asymptotically standard normal
    truth = _rates("archives/truth.csv")
    z = []
    for p, u in enumerate(urls):
        w, lam = np.diff(times[p]), truth[u]
        info = np.sum(w ** 2 * np.exp(-lam * w) / -np.expm1(-lam * w))
        z.append((got[u] - lam) * np.sqrt(info))
    z = np.asarray(z)
    assert np.mean(z ** 2) < 1.6 and abs(np.mean(z)) < 0.5 and np.max(np.abs(z)) < 6, (
        np.mean(z ** 2), np.mean(z), np.max(np.abs(z)))

    # each crawler's file holds every page; day 2's StormCrawler file is a _bulk body
    for name in ("frontier-1.jsonl", "frontier-2.jsonl", "status-1.jsonl"):
        assert sorted(json.loads(line).get("url") or json.loads(line)["known"]["info"]["url"]
                      for line in open(name)) == sorted(urls)
    assert sorted(line.split("\t")[0] for line in open("seeds-2.txt")) == sorted(urls)
    bulk = open("status-2.jsonl").read().splitlines()
    assert len(bulk) == 2 * len(urls) and all('"index"' in line for line in bulk[0::2])
