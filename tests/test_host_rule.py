"""One host rule (``jaxcrawl.io.canonical_host``: case, IDNA, one trailing dot, userinfo,
default ports) for host caps, crawl delays, robots.txt files, page -> host mappings, URL
page ids and URLFrontier queue keys; a caps or crawl-delay row that matches no page is an
error naming it (``--unmatched-hosts warn``: a warning)."""
import csv
import json

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from jaxcrawl import io as jio
from jaxcrawl._src.hostmap import url_host
from jaxcrawl.io import canonical_host
from jaxcrawl.io._crawler import _queue_key

from helpers import run_cli as run


def summary(stdout):
    return json.loads(stdout.strip().splitlines()[-1])


def plan_rates(path):
    with open(path, newline="") as fh:
        return {r["page_id"]: float(r["rate"]) for r in csv.DictReader(fh)}


# ------------------------------------------------------------------ the rule itself
@pytest.mark.parametrize("text, key", [
    ("WWW.SITE00001.DE", "www.site00001.de"),
    ("slow.example.", "slow.example"),
    ("Bücher.DE", "xn--bcher-kva.de"),
    ("xn--bcher-kva.de", "xn--bcher-kva.de"),
    ("bücher\u3002de", "xn--bcher-kva.de"),  # the ideographic full stop separates labels too
    ("user:pw@Example.com:443", "example.com"),
    ("example.com:80", "example.com"),
    ("example.com:8080", "example.com:8080"),
    ("example.com:08080", "example.com:8080"),
    ("HTTP://Example.COM.:80/a?b#c", "example.com"),
    ("https://example.com:443", "example.com"),
    ("https://example.com:8443/x", "example.com:8443"),
    ("http://u@bücher.de/", "xn--bcher-kva.de"),
    ("[::1]", "::1"),
    ("[::1]:443", "::1"),
    ("[::1]:8080", "[::1]:8080"),
    ("http://[2001:DB8::1]:8080/x", "[2001:db8::1]:8080"),
    ("example.com/robots.txt", "example.com"),
    ("H7", "h7"),  # a host id of a page -> host table: lower-cased, no IDNA needed
])
def test_canonical_host_examples(text, key):
    assert canonical_host(text) == key
    assert canonical_host(key) == key


@pytest.mark.parametrize("text, message", [
    ("a..b", "empty label"),
    (".a", "empty label"),
    (".", "empty host"),
    ("ex.com:70000", "port 70000"),
    ("a.\u00ad.b", r"label '\\xad' has no IDNA ASCII form"),  # maps to nothing: an empty label
    ("x" * 60 + "é.de", "has no IDNA ASCII form"),  # longer than 63 once encoded
])
def test_canonical_host_refuses_naming_the_host(text, message):
    with pytest.raises(ValueError, match=message):
        canonical_host(text)


_ASCII = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-"
_label = st.text(st.sampled_from(list(_ASCII) + list("äöüßéÉ日本ñ")), min_size=1, max_size=12)
_host = st.lists(_label, min_size=1, max_size=4).map(".".join)


@settings(max_examples=300, deadline=None)
@given(_host, st.sampled_from(["", ":80", ":443"]), st.sampled_from(["", "user@", "u:p@"]),
       st.sampled_from(["", "http://", "https://", "HTTPS://"]), st.booleans(), st.booleans())
def test_host_rule_is_idempotent_and_ignores_case_dot_port_userinfo(host, port, userinfo, scheme, dot, upper):
    try:
        key = canonical_host(host)
    except ValueError:
        assume(False)
    assert canonical_host(key) == key  # idempotent
    assert key == key.lower() and key.isascii()
    spelt = ("".join(c.upper() if c.isascii() else c for c in host) if upper else host) + ("." if dot else "")
    assert canonical_host(f"{userinfo}{spelt}{port}") == key  # case, one trailing dot, default port, userinfo
    if scheme:
        assert canonical_host(f"{scheme}{userinfo}{spelt}{port}/p?q#f") == key
        assert url_host(f"{scheme}{spelt}{port}/p") == key == _queue_key(f"{scheme}{spelt}{port}/p")
    assert canonical_host(f"{spelt}:8080") == f"{key}:8080"  # any other port: a host of its own


# ------------------------------------------------------------------ the command line
def _pages(tmp_path, hosts, per_host=4):
    lines = ["page_id,importance,change_rate"]
    for h in hosts:
        lines += [f"http://{h}/p{i},{1 + i},{0.5 + 0.25 * i}" for i in range(per_host)]
    (tmp_path / "pages.csv").write_text("\n".join(lines) + "\n")
    return tmp_path / "pages.csv"


@pytest.mark.long
def test_a_caps_row_in_capitals_caps_its_host(tmp_path):
    pages = _pages(tmp_path, ["www.site00001.de", "other.example"])
    ids = [f"http://{h}/p{i}" for h in ("www.site00001.de", "other.example") for i in range(4)]
    for host in ("www.site00001.de", "WWW.SITE00001.DE", "https://user@www.site00001.de.:443"):
        (tmp_path / "caps.csv").write_text(f"host_id,cap\n{host},0.5\n")
        caps = jio.read_host_caps(str(tmp_path / "caps.csv"), ids)
        assert list(caps.host_id) == [0] * 4 + [-1] * 4 and list(caps.cap) == [0.5]
    code, out, err = run(["solve", "-i", pages, "--bandwidth", 4, "--host-caps", tmp_path / "caps.csv",
                          "-o", tmp_path / "plan.csv", "-q"])
    assert code == 0, err
    rates = plan_rates(tmp_path / "plan.csv")
    assert sum(r for p, r in rates.items() if "site00001" in p) == pytest.approx(0.5, rel=1e-5)  # the cap binds
    assert summary(out)["num_binding_hosts"] == 1


def test_a_crawl_delay_host_with_a_trailing_dot_is_its_pages_host(tmp_path):
    pages = _pages(tmp_path, ["slow.example", "fast.example"])
    (tmp_path / "delays.csv").write_text("host,crawl_delay\nslow.example.,43200\n")  # 2 fetches a day
    code, out, err = run(["solve", "-i", pages, "--bandwidth", 4, "--crawl-delays", tmp_path / "delays.csv",
                          "-o", tmp_path / "plan.csv", "-q"])
    assert code == 0, err
    assert summary(out)["num_crawl_delay_hosts"] == 1
    rates = plan_rates(tmp_path / "plan.csv")
    assert sum(r for p, r in rates.items() if "slow" in p) <= 2 * (1 + 1e-5)
    # robots.txt files are read by the same rule: a file named in capitals with a dot
    robots = tmp_path / "robots"
    robots.mkdir()
    (robots / "SLOW.Example..txt").write_text("User-agent: *\nCrawl-delay: 43200\n")
    index, delay, names = jio.read_crawl_delays(str(robots), list(rates))
    assert list(names) == ["slow.example"] and list(delay) == [43200.0]
    assert sorted(np.flatnonzero(index >= 0)) == [i for i, p in enumerate(rates) if "slow" in p]


def test_rows_and_mappings_of_one_host_by_the_rule(tmp_path):
    ids = ["p1", "p2", "p3"]
    (tmp_path / "map.csv").write_text("page_id,host_id\np1,Bücher.DE.\np2,xn--bcher-kva.de\np3,other\n")
    (tmp_path / "caps.csv").write_text("host_id,cap\nBÜCHER.de,2\n")
    caps = jio.read_host_caps(str(tmp_path / "caps.csv"), ids, pages_path=str(tmp_path / "map.csv"))
    assert list(caps.host_id) == [0, 0, -1] and list(caps.cap) == [2.0]
    # two rows of one host are refused, naming both lines
    (tmp_path / "dup.csv").write_text("host_id,cap\nexample.com,2\nEXAMPLE.com.,3\n")
    with pytest.raises(jio.TableError, match=r"dup\.csv:3: host_id 'EXAMPLE.com.' is the host 'example.com' of "
                                             r"line 2"):
        jio.read_host_caps(str(tmp_path / "dup.csv"), ["http://example.com/"])
    (tmp_path / "bad.csv").write_text("host,crawl_delay\na..b,2\n")
    with pytest.raises(jio.TableError, match=r"bad\.csv:2: host: host 'a..b': empty label"):
        jio.read_crawl_delays(str(tmp_path / "bad.csv"), ["http://a.b/"])


@pytest.mark.parametrize("option, header", [("--host-caps", "host_id,cap"), ("--crawl-delays", "host,crawl_delay")])
def test_a_row_that_matches_no_page_is_an_error_naming_it_or_a_warning(tmp_path, option, header):
    pages = _pages(tmp_path, ["a.example", "b.example"])
    (tmp_path / "hosts.csv").write_text(f"{header}\na.example,3600\nA.EXAMPLE.ORG,3600\n")
    argv = ["solve", "-i", pages, "--bandwidth", 2, option, tmp_path / "hosts.csv", "-o", tmp_path / "plan.csv",
            "-q"]
    code, _, err = run(argv)
    assert code == 2 and not (tmp_path / "plan.csv").exists()
    assert "hosts.csv:3:" in err and "'A.EXAMPLE.ORG' (host 'a.example.org') matches no page's host" in err
    assert "--unmatched-hosts warn" in err
    code, _, err = run(argv + ["--unmatched-hosts", "warn"])
    assert code == 0, err
    assert "jaxcrawl: warning: " in err and "hosts.csv:3:" in err and "'A.EXAMPLE.ORG'" in err
    assert (tmp_path / "plan.csv").exists()


@pytest.mark.long
def test_schedule_shares_the_unmatched_hosts_rule(tmp_path):
    pages = _pages(tmp_path, ["a.example"])
    assert run(["solve", "-i", pages, "--bandwidth", 2, "-o", tmp_path / "plan.csv", "-q"])[0] == 0
    (tmp_path / "delays.csv").write_text("host,crawl_delay\na.example,60\nnone.example,60\n")
    argv = ["schedule", "-p", tmp_path / "plan.csv", "--horizon", "1d", "--start", "2026-01-05T00:00:00Z",
            "--crawl-delays", tmp_path / "delays.csv", "-o", tmp_path / "tt.csv", "-q"]
    code, _, err = run(argv)
    assert code == 2 and "delays.csv:3:" in err and "'none.example'" in err
    code, _, err = run(argv + ["--unmatched-hosts", "warn"])
    assert code == 0 and "warning" in err


@pytest.mark.long
def test_evaluate_shares_the_unmatched_hosts_rule(tmp_path):
    pages = _pages(tmp_path, ["a.example", "b.example"])
    (tmp_path / "caps.csv").write_text("host_id,cap\na.example,0.5\nnone.example,1\n")
    argv = ["evaluate", "-i", pages, "--bandwidth", 2, "--policy", "harmonic", "--no-monte-carlo",
            "--host-caps", tmp_path / "caps.csv", "-q"]
    code, _, err = run(argv)
    assert code == 2 and "caps.csv:3:" in err and "'none.example' matches no page's host" in err
    assert "--unmatched-hosts warn" in err
    code, out, err = run(argv + ["--unmatched-hosts", "warn"])
    assert code == 0, err
    assert "jaxcrawl: warning: " in err and "caps.csv:3:" in err and "'none.example'" in err
    # the row is ignored: the same evaluation as without it (the matched row still caps its host)
    (tmp_path / "caps1.csv").write_text("host_id,cap\na.example,0.5\n")
    code, ref, _ = run([*argv[:-3], "--host-caps", tmp_path / "caps1.csv", "-q"])
    assert code == 0
    got, want = summary(out), summary(ref)
    got.pop("seconds", None), want.pop("seconds", None)
    assert got == want


def test_process_rows_name_a_host_whose_cap_is_below_its_floors():
    import jaxcrawl

    hid = np.asarray([0, 0, 1, -1], np.int32)
    caps = jaxcrawl.HostCaps(hid, np.asarray([0.5, 4.0]))
    bounds = (np.asarray([1.0, 1.0, 0.0, 0.0]), None)  # host 0's pages need 2 crawls a day, its cap is 0.5
    rows = jaxcrawl.parallel.ProcessRows(np.ones(4), np.ones(4), np.zeros(4, bool), 3.0,
                                         host_names=["slow.example", "b.example"])
    with pytest.raises(ValueError, match=r"caps: host 'slow\.example''s cap 0\.5 is below the sum of its pages' "
                                         r"lower bounds 2\.0"):
        jaxcrawl.solve(rows, jaxcrawl.harmonic(), caps=caps, bounds=bounds)
    rows = jaxcrawl.parallel.ProcessRows(np.ones(4), np.ones(4), np.zeros(4, bool), 3.0)
    with pytest.raises(ValueError, match=r"caps: host 0 \(its index into caps\.cap\)'s cap 0\.5"):
        jaxcrawl.solve(rows, jaxcrawl.harmonic(), caps=caps, bounds=bounds)


@pytest.mark.long
def test_a_job_of_two_processes_judges_caps_rows_by_every_process_pages(tmp_path):
    """Process 0 holds a.example's pages, process 1 b.example's: their rows are matched (each
    by the other process's pages too), none.example's row by no process is an error naming
    it (--unmatched-hosts warn: one warning), and a host's infeasible cap is named."""
    import subprocess
    import sys

    import helpers

    lines = ["page_id,importance,change_rate,max_interval"]
    lines += [f"http://{h}/p{i:02d},1.5,0.75,{iv}" for h, iv in (("a.example", "inf"), ("b.example", "1"))
              for i in range(16)]
    (tmp_path / "pages.csv").write_text("\n".join(lines) + "\n")
    (tmp_path / "caps.csv").write_text("host_id,cap\na.example,2\nb.example,20\nnone.example,1\n")
    timeout = 240

    def launch(caps, *extra):
        cmd = [sys.executable, "-m", "jaxcrawl.cli", "launch", "-n", "2", "--timeout", str(timeout), "--",
               "solve", "-i", tmp_path / "pages.csv", "--bandwidth", 20, "--host-caps", caps,
               "-o", tmp_path / "plan.csv", "--gather-output", "-q", *extra]
        proc = subprocess.run([str(a) for a in cmd], env=helpers.subprocess_env(), capture_output=True, text=True,
                              timeout=timeout + 30)
        return proc.returncode, proc.stdout + proc.stderr

    code, text = launch(tmp_path / "caps.csv")
    assert code != 0 and not (tmp_path / "plan.csv").exists(), text[-3000:]
    assert "caps.csv:4:" in text and "'none.example' matches no page's host" in text, text[-3000:]
    assert "'a.example' matches" not in text and "'b.example' matches" not in text
    code, text = launch(tmp_path / "caps.csv", "--unmatched-hosts", "warn")
    assert code == 0, text[-3000:]
    assert text.count("matches no page's host; the row is ignored") == 1 and "caps.csv:4:" in text
    rates = plan_rates(tmp_path / "plan.csv")
    assert sum(r for p, r in rates.items() if "a.example" in p) == pytest.approx(2, rel=1e-4)  # at its cap
    # b.example's 16 pages each need a crawl a day: a cap of 10 is infeasible, named by its host
    (tmp_path / "tight.csv").write_text("host_id,cap\na.example,2\nb.example,10\n")
    code, text = launch(tmp_path / "tight.csv")
    assert code != 0 and "caps: host 'b.example''s cap 10.0 is below" in text, text[-3000:]


def test_urlfrontier_queue_keys_follow_the_host_rule(tmp_path):
    urls = ["http://Ex.COM.:80/a", "https://user@ex.com/b", "http://ex.com:8080/c", "http://bücher.de/d", "p17"]
    jio.write_urlfrontier(tmp_path / "f.jsonl", urls, [1.0] * 5, [2e9] * 5)
    keys = [json.loads(line)["known"]["info"]["key"] for line in open(tmp_path / "f.jsonl", encoding="utf-8")]
    assert keys == ["ex.com", "ex.com", "ex.com:8080", "xn--bcher-kva.de", "p17"]


@pytest.mark.parametrize("seed", range(6))
def test_a_host_mapping_file_agrees_with_a_row_by_row_reading(tmp_path, seed):
    """The page -> host mapping is matched by hashing (every row at once); its hosts, and the
    line its first error names, are those of reading the file a row at a time."""
    from jaxcrawl._src.hostmap import canonical_host
    from jaxcrawl.io import _hosts
    from jaxcrawl.io._schema import TableError

    rng = np.random.default_rng(seed)
    n = 60
    page_id = np.arange(n) * 3 if seed % 2 else np.asarray([f"p{i}" for i in range(n)], object)
    pool = ["a.example", "A.Example.", "b.example:80", "b.example:8080", "ÉCOLE.fr", "http://x.com/", "c.example"]
    if seed >= 2:
        pool.append("a..b")  # refused by the host rule
    rows = rng.permutation(n + 10)[:n]  # some rows name a page the problem does not have
    lines = ["page_id,host_id"] + [f"{str(page_id[r]) if r < n else 'zz' + str(r)},{rng.choice(pool)}"
                                   for r in rows.tolist()]
    path = tmp_path / "map.csv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")

    def reference(unknown):
        pos = {str(p): i for i, p in enumerate(page_id.tolist())}
        out = [None] * n
        for lineno, line in enumerate(lines[1:], start=2):
            p, h = line.split(",")
            i = pos.get(p)
            if i is None:
                if unknown == "error":
                    return lineno, "is not one of the problem's pages"
                continue
            try:
                out[i] = canonical_host(h)
            except ValueError:
                return lineno, "host_id"
        return out

    for unknown in ("error", "ignore"):
        want = reference(unknown)
        if isinstance(want, tuple):
            with pytest.raises(TableError) as err:
                _hosts._page_hosts(page_id, path, unknown)
            assert f"{path}:{want[0]}:" in str(err.value) and want[1] in str(err.value)
            continue
        got = _hosts._page_hosts(page_id, path, unknown)
        assert [got.values[c] if c >= 0 else None for c in got.codes.tolist()] == want
        assert len(set(got.values)) == len(got.values)
