"""Bad inputs and faults by class: no silent wrong answer, no input or earlier output lost, an
error (never a traceback) naming the argument and the rule, signals honoured on every path,
and the fast paths agreeing with the exact readers they stand for."""
import errno
import gzip
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import jax
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import jaxcrawl
import jaxcrawl.io as jio
from jaxcrawl import cli
from jaxcrawl._src import fileio, interrupts
from jaxcrawl.parallel import ProcessRows

from helpers import TINY_PAGES
from helpers import expect_cli_error as expect_error
from helpers import run_cli as run

PAGES = TINY_PAGES


def npy_table(d, importance, change_rate, complete=None):
    os.makedirs(d, exist_ok=True)
    n = len(importance)
    for name, a in (("importance", np.asarray(importance, np.float64)), ("change_rate", np.asarray(change_rate)),
                    ("complete", np.zeros(n, bool) if complete is None else np.asarray(complete))):
        np.save(os.path.join(d, name + ".npy"), a)
    return str(d)


# ------------------------------------------------------------------ silent wrong answers
def _interval_table(tmp_path):
    n = 40
    rng = np.random.default_rng(0)
    imp, lam = rng.uniform(0.5, 2, n), rng.uniform(0.1, 3, n)
    lo_iv = np.where(np.arange(n) % 4 == 0, 5.0, 0.0)       # at most one crawl per 5 units
    hi_iv = np.where(np.arange(n) % 4 == 1, 2.0, np.inf)    # at least one per 2 units
    jio.write_problem(tmp_path / "t.csv", np.arange(n), imp, lam, min_interval=lo_iv, max_interval=hi_iv)
    pq.write_table(pa.table({"page_id": np.arange(n), "importance": imp, "change_rate": lam,
                             "min_interval": lo_iv, "max_interval": hi_iv}), tmp_path / "t.parquet")
    for name in ("t.csv", "t.parquet"):
        parts = [jio.read_local_rows(str(tmp_path / name), i, 2) for i in range(2)]
        np.testing.assert_array_equal(np.concatenate([p.min_interval for p in parts]), lo_iv)
        np.testing.assert_array_equal(np.concatenate([p.max_interval for p in parts]), hi_iv)
    return n, lo_iv, hi_iv


def test_process_rows_read_the_tables_interval_columns(tmp_path):
    """The multi-process readers return min_interval/max_interval (CSV and Parquet)."""
    _interval_table(tmp_path)


@pytest.mark.long
def test_process_rows_solve_inside_the_tables_interval_columns(tmp_path):
    """The multi-process solve keeps every rate inside [1/max_interval, 1/min_interval]."""
    n, lo_iv, hi_iv = _interval_table(tmp_path)
    src = ProcessRows.read(str(tmp_path / "t.parquet"), 0.5 * n)
    rate = np.asarray(jaxcrawl.solve(src, "harmonic").rate, np.float64)
    slack = 1e-5
    assert np.all(rate[lo_iv > 0] <= (1 / lo_iv[lo_iv > 0]) * (1 + slack))
    assert np.all(rate[np.isfinite(hi_iv)] >= (1 / hi_iv[np.isfinite(hi_iv)]) * (1 - slack))
    assert np.any(rate[lo_iv > 0] >= (1 / lo_iv[lo_iv > 0]) * (1 - slack))  # the bounds bind


def test_process_rows_refuse_a_repeated_page_id():
    ids = np.asarray(["a", "b", "c", "b"], object)
    with pytest.raises(ValueError, match=r"duplicate page_id 'b': rows 2 and 4"):
        ProcessRows(np.ones(4), np.ones(4), np.zeros(4, bool), 1.0, page_id=ids)
    ProcessRows(np.ones(4), np.ones(4), np.zeros(4, bool), 1.0, page_id=np.asarray(["a", "b", "c", "bb"], object))


def test_process_rows_without_pages_say_so():
    with pytest.raises(ValueError, match="no pages"):
        ProcessRows(np.zeros(0), np.zeros(0), np.zeros(0, bool), 0.0)


def test_id_hashes_see_an_id_as_its_text():
    """Two processes may hold one id as int64 (all their ids numeric) and as text: the
    cross-process check compares ids as text."""
    from jaxcrawl.parallel._processes import _id_hashes

    a = _id_hashes(np.asarray([17, 3, -5], np.int64))
    b = _id_hashes(np.asarray(["17", "3", "-5"], object))
    np.testing.assert_array_equal(a, b)
    c = _id_hashes(np.asarray(["ab", "ba", "a", "b", "\u00e9", "aa"], object))
    assert len({tuple(r) for r in c.tolist()}) == 6
    np.testing.assert_array_equal(_id_hashes(np.asarray(["ab", "ba", "a", "b", "\u00e9", "aa"], object), chunk=4), c)


def test_parquet_uint64_ids_are_never_wrapped(tmp_path):
    big = 2**64 - 1
    pq.write_table(pa.table({"page_id": pa.array([1, big], pa.uint64()), "importance": [1.0, 2.0],
                             "change_rate": [1.0, 1.0]}), tmp_path / "u.parquet")
    for ids in (jio.read_problem(tmp_path / "u.parquet").page_id,
                jio.read_local_rows(str(tmp_path / "u.parquet"), 0, 1).page_id):
        assert [str(x) for x in ids.tolist()] == ["1", str(big)]
    pq.write_table(pa.table({"page_id": pa.array([b"a", b"b"], pa.binary()), "importance": [1.0, 2.0],
                             "change_rate": [1.0, 1.0]}), tmp_path / "b.parquet")  # bytes are not text ids
    for read in (jio.read_problem, lambda p: jio.read_local_rows(str(p), 0, 1)):
        with pytest.raises(jio.TableError, match="page_id must be text or an integer, got b'a'"):
            read(tmp_path / "b.parquet")


def test_jsonl_ids_beyond_int64_keep_every_id_as_written(tmp_path):
    (tmp_path / "t.jsonl").write_text('{"page_id": 3, "importance": 1, "change_rate": 1}\n'
                                      '{"page_id": 18446744073709551616, "importance": 1, "change_rate": 1}\n')
    assert jio.read_problem(tmp_path / "t.jsonl").page_id.tolist() == ["3", "18446744073709551616"]
    (tmp_path / "f.jsonl").write_text('{"page_id": 3.0, "importance": 1, "change_rate": 1}\n')
    with pytest.raises(jio.TableError, match="page_id must be text or an integer, got 3.0"):
        jio.read_problem(tmp_path / "f.jsonl")


@pytest.mark.parametrize("name,text", [
    ("t.csv", "page_id,importance,change_rate\na ,1,1\n"),
    ("t.csv", 'page_id,importance,change_rate\n"\u00a0a",1,1\n'),
    ("t.jsonl", '{"page_id": " a", "importance": 1, "change_rate": 1}\n'),
])
def test_ids_are_never_silently_stripped(tmp_path, name, text):
    (tmp_path / name).write_text(text, encoding="utf-8")
    with pytest.raises(jio.TableError, match="has leading or trailing blanks"):
        jio.read_problem(tmp_path / name)


def test_stream_refuses_bad_values_of_an_npy_table(tmp_path):
    bad = npy_table(tmp_path / "neg", [1.0, -2.0, 1.0], [1.0, 1.0, 1.0])
    expect_error(["stream", "--table", bad], "row 2: importance must be finite and > 0, got -2.0")
    nan = npy_table(tmp_path / "nan", [1.0, 1.0], [1.0, np.nan])
    expect_error(["stream", "--table", nan], "row 2: change_rate must be finite and > 0")
    comp = npy_table(tmp_path / "comp", [1.0, 1.0], [1.0, 1.0], np.asarray([0, 2], np.int8))
    expect_error(["stream", "--table", comp], "row 2: complete must be")
    empty = npy_table(tmp_path / "empty", [], [])
    expect_error(["stream", "--table", empty], "no pages")
    with pytest.raises(ValueError, match="row 2: importance"):
        jio.read_local_rows(bad, 0, 1)


def test_mapping_rows_whose_page_id_starts_with_a_hash_are_data(tmp_path):
    (tmp_path / "hosts.csv").write_text("# a comment before the header\npage_id,host_id\n#p1,h\np2,h\n")
    (tmp_path / "caps.csv").write_text("# pages: hosts.csv\nhost_id,cap\nh,1\n# not a comment: a host\n")
    with pytest.raises(jio.TableError, match="cap"):  # a '#' line after the header is a row (here a bad one)
        jio.read_host_caps(tmp_path / "caps.csv", ["#p1", "p2"])
    (tmp_path / "caps.csv").write_text("# pages: hosts.csv\nhost_id,cap\nh,1\n")
    host_id, cap = jio.read_host_caps(tmp_path / "caps.csv", ["#p1", "p2", "p3"])
    assert host_id.tolist() == [0, 0, -1] and cap.tolist() == [1.0]


def test_integer_columns_hold_64_bit_integers():
    col = jio.Column("URL_ID", "integer")
    assert col.parse(str(2**63 - 1)) == 2**63 - 1
    for text in (str(2**63), str(-(2**63) - 1), "99999999999999999999"):
        with pytest.raises(Exception, match="out of range"):
            col.parse(text)


@pytest.mark.parametrize("argv,needle", [
    (["--exploration", "-1"], "--exploration is a probability in (0, 1]"),
    (["--exploration", "nan"], "--exploration"),
    (["--learning-rates", "0.1,nan"], "--learning-rates must be finite and > 0"),
    (["--update-interval", "inf"], "--update-interval must be finite and > 0"),
    (["--instances", "100000000", "--seeds", "1000000"], "the limit here is"),
])
def test_sweep_refuses_hyperparameters_out_of_range(argv, needle):
    expect_error(["sweep", *argv], needle)


# -------------------------------------------------------------- inputs and outputs kept
def test_stream_output_inside_the_table_directory_is_refused(tmp_path):
    d = npy_table(tmp_path / "t", [1.0, 2.0], [1.0, 1.0])
    before = {n: (tmp_path / "t" / n).read_bytes() for n in os.listdir(d)}
    for out in (os.path.join(d, "importance.npy"), os.path.join(d, "rates.npy")):
        expect_error(["stream", "--table", d, "--output", out], "inside the input directory")
    os.symlink(d, tmp_path / "link")  # the table's directory under another name
    expect_error(["stream", "--table", d, "--output", tmp_path / "link" / "rates.npy"], "inside the input directory")
    assert {n: (tmp_path / "t" / n).read_bytes() for n in os.listdir(d)} == before


def test_an_output_inside_the_robots_directory_is_refused(tmp_path):
    robots = tmp_path / "robots"
    robots.mkdir()
    (robots / "a.example.txt").write_text("User-agent: *\nCrawl-delay: 10\n")
    (tmp_path / "p.csv").write_text("page_id,importance,change_rate\nhttp://a.example/x,1,1\n")
    expect_error(["solve", "--input", tmp_path / "p.csv", "--robots", robots, "--output", robots / "a.example.txt"],
                 "inside the input directory")
    assert (robots / "a.example.txt").read_text() == "User-agent: *\nCrawl-delay: 10\n"


def test_evaluate_figure_never_replaces_the_page_table(tmp_path):
    (tmp_path / "p.csv").write_text(PAGES)
    expect_error(["evaluate", "--input", tmp_path / "p.csv", "--policy", "harmonic", "--figure", tmp_path / "p.csv"],
                 "input file")
    assert (tmp_path / "p.csv").read_text() == PAGES


def test_outputs_are_renamed_together_only_when_every_one_is_complete(tmp_path):
    """An error in a later output leaves the earlier ones as they were; on success all appear."""
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    a.write_text("old\n")
    with pytest.raises(OSError):
        with fileio.command_outputs():
            fileio.write_file(a, lambda fh: fh.write("new\n"))
            assert a.read_text() == "old\n"  # not yet renamed
            fileio.write_file(tmp_path / "missing" / "b.csv", lambda fh: fh.write("x"))
    assert a.read_text() == "old\n" and sorted(os.listdir(tmp_path)) == ["a.csv"]
    with fileio.command_outputs(inputs=[tmp_path / "in.csv"]):
        fileio.write_file(a, lambda fh: fh.write("new\n"))
        fileio.write_file(b, lambda fh: fh.write("b\n"))
    assert a.read_text() == "new\n" and b.read_text() == "b\n"
    with pytest.raises(ValueError, match="input file"), fileio.command_outputs(inputs=[a]):
        fileio.write_file(tmp_path / "." / "a.csv", lambda fh: fh.write("x"))
    os.link(a, tmp_path / "hard.csv")
    with pytest.raises(ValueError, match="input file"), fileio.command_outputs(inputs=[a]):
        fileio.write_file(tmp_path / "hard.csv", lambda fh: fh.write("x"))
    assert a.read_text() == "new\n"


def test_a_memory_mapped_output_gets_its_space_before_it_is_mapped(tmp_path, monkeypatch):
    """A full disk is an OSError naming the file and leaves nothing behind (no SIGBUS later)."""
    def full(fd, offset, length):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    m = fileio.output_memmap(tmp_path / "ok.npy", np.float32, 1000)
    assert os.path.getsize(tmp_path / "ok.npy") >= 4000 and m.shape == (1000,)
    del m
    monkeypatch.setattr(os, "posix_fallocate", full)
    with pytest.raises(OSError, match="cannot allocate") as info:
        fileio.output_memmap(tmp_path / "r.npy", np.float64, 1 << 20)
    assert info.value.errno == errno.ENOSPC and not (tmp_path / "r.npy").exists()


@pytest.mark.long
def test_stream_on_a_full_disk_is_an_error_and_keeps_the_old_output(tmp_path, monkeypatch):
    d = npy_table(tmp_path / "t", [1.0, 2.0, 0.5], [1.0, 0.5, 3.0])
    (tmp_path / "r.npy").write_bytes(b"old")
    monkeypatch.setattr(os, "posix_fallocate", lambda fd, o, n: (_ for _ in ()).throw(OSError(errno.ENOSPC, "full")))
    expect_error(["stream", "--table", d, "--output", tmp_path / "r.npy", "--bandwidth", "1"], "cannot allocate")
    assert (tmp_path / "r.npy").read_bytes() == b"old"
    assert sorted(os.listdir(tmp_path)) == ["r.npy", "t"]


@pytest.mark.long
def test_a_failing_later_output_of_solve_keeps_the_plan(tmp_path, monkeypatch):
    """The plan is written first, the seed list fails (a full disk, say): the plan stays as it was."""
    import jaxcrawl.cli._solve as solve_cli

    def full_disk(path, *args, **kwargs):
        def fill(fh):
            fh.write("partial")
            raise OSError(errno.ENOSPC, f"{path}: no space left on device")

        fileio.write_file(path, fill)

    monkeypatch.setattr(solve_cli, "write_nutch_seeds", full_disk)
    (tmp_path / "p.csv").write_text("page_id,importance,change_rate\nhttp://a.example/x,1,1\nhttp://b.example/y,2,1\n")
    (tmp_path / "plan.csv").write_text("old plan\n")
    code, out, err = run(["solve", "--input", tmp_path / "p.csv", "--output", tmp_path / "plan.csv",
                          "--bandwidth", "1", "--nutch", tmp_path / "seeds.txt"])
    assert code == 2 and "no space left" in err and "Traceback" not in err
    assert (tmp_path / "plan.csv").read_text() == "old plan\n"
    assert sorted(os.listdir(tmp_path)) == ["p.csv", "plan.csv"]


# -------------------------------------------------------- errors, not tracebacks
def test_a_truncated_gzip_table_is_an_error_naming_the_file(tmp_path):
    body = b"page_id,importance,change_rate\n" + b"".join(b"p%d,1,1\n" % i for i in range(20000))
    data = gzip.compress(body)
    for name in ("t.csv.gz", "t.jsonl.gz"):
        raw = data if name.endswith("csv.gz") else gzip.compress(
            b"".join(b'{"page_id": "p%d", "importance": 1, "change_rate": 1}\n' % i for i in range(20000)))
        (tmp_path / name).write_bytes(raw[: len(raw) // 2])
        with pytest.raises(ValueError, match="truncated or corrupt gzip file"):
            jio.read_problem(tmp_path / name)
    expect_error(["solve", "--input", tmp_path / "t.csv.gz"], "t.csv.gz: truncated or corrupt gzip file")


def test_absurd_sizes_are_refused_before_anything_is_allocated(tmp_path):
    expect_error(["solve", "--num-pages", str(10**15)], "--num-pages", "the limit here is")
    expect_error(["evaluate", "--policy", "harmonic", "--num-pages", str(10**15)], "--num-pages", "the limit here is")
    (tmp_path / "plan.csv").write_text("page_id,rate,prob\na,1,0\nb,2,0\n")
    expect_error(["schedule", "--plan", tmp_path / "plan.csv", "--horizon", "1e15"], "--horizon", "the limit here is")
    (tmp_path / "p.csv").write_text(PAGES)
    evaluate = ["evaluate", "--input", tmp_path / "p.csv", "--policy", "harmonic"]
    expect_error([*evaluate, "--seeds", str(10**15)], "--seeds", "the limit here is")
    for value in ("nan", "inf", "1e400"):
        expect_error([*evaluate, "--horizon", value], "--horizon must be a finite number")
    expect_error([*evaluate, "--burn-in=-inf"], "--burn-in must be a finite number")


def test_values_a_float32_stream_cannot_hold_are_refused(tmp_path):
    d = npy_table(tmp_path / "t", [1.0, 1e-300], [1.0, 1.0])
    expect_error(["stream", "--table", d, "--bandwidth", "1"], "row 2: importance 1e-300 is not a finite number > 0 "
                 "in float32")


def test_errors_name_the_output_and_the_file_not_a_temporary(tmp_path):
    (tmp_path / "p.csv").write_text(PAGES)
    err = expect_error(["solve", "--input", tmp_path / "p.csv", "--output", tmp_path / "nodir" / "plan.csv"],
                       "plan.csv: cannot write the output (no such directory")
    assert ".tmp_" not in err
    expect_error(["solve", "--input", tmp_path / "p.csv", "--host-caps", tmp_path], "is a directory")
    expect_error(["solve", "--input", tmp_path / "p.csv", "--host-caps", tmp_path / "no.csv"], "no.csv: no such file")


def test_a_truncated_npy_array_is_named(tmp_path):
    d = npy_table(tmp_path / "t", [1.0, 2.0], [1.0, 1.0])
    with open(os.path.join(d, "change_rate.npy"), "r+b") as fh:
        fh.truncate(60)
    expect_error(["stream", "--table", d], "change_rate.npy: not a readable .npy array")
    expect_error(["solve", "--input", d], "change_rate.npy: not a readable .npy array")


def test_neurips19_url_id_beyond_int64_is_a_row_error(tmp_path):
    from test_dataset import write_dataset

    d = write_dataset(str(tmp_path / "d"), imp=["5\t1", "99999999999999999999\t1"], urls=False, hosts=False,
                      comp=False)
    with pytest.raises(ValueError, match=r"urlid_imp.txt:2: URL_ID '99999999999999999999' is out of range"):
        jio.load_crawl_dataset(d)
    ds = jio.load_crawl_dataset(d, errors="skip")
    assert ds.url_id.tolist() == [5] and ds.report.files["importance"].skipped_by_reason == {"bad URL_ID": 1}


# ----------------------------------------------------- fast paths = exact readers
@pytest.mark.parametrize("history", ["[[+1, 0]]", "[[ .25, 1]]", "[[1., 0]]", "[[01, 1]]", "[[-.5, 0]]",
                                     "[[1.5, 0], [2, 1]]", "[[0.25,1]]", "[ [1e-3, 0] ]", "[]"])
def test_neurips19_histories_are_read_as_json_on_every_path(tmp_path, history):
    """The vectorised readers accept a history exactly when ``json.loads`` (the exact
    parser) reads it as a list of [interval > 0, 0 or 1] pairs."""
    from test_dataset import write_dataset

    try:
        pairs = json.loads(history)
        expected = [float(w) for w, _ in pairs]
    except ValueError:
        expected = None
    d = write_dataset(str(tmp_path / "d"), hist=[f"5\t1\t{history}", "7\t0.5\t[]"], urls=False, hosts=False,
                      comp=False)
    if expected is None:
        with pytest.raises(ValueError, match="urlid_offset_history.txt:1: history"):
            jio.load_crawl_dataset(d, dtype=np.float64)
    else:
        ds = jio.load_crawl_dataset(d, dtype=np.float64)
        row = ds.url_id.tolist().index(5)
        assert ds.intervals[row][ds.mask[row]].tolist() == expected


@pytest.mark.parametrize("shift", range(0, 40, 3))
def test_a_quoted_line_break_straddling_the_process_split_is_one_record(tmp_path, shift):
    """Every split of the bytes gives each record (also one whose quoted id holds a line
    break) to exactly one process: the parts concatenate to the whole table."""
    pad = "x" * shift
    ids = [f"p{pad}", 'multi\nline "id"\nhere', "q", "r\r\ns", "t"]
    jio.write_problem(tmp_path / "t.csv", np.asarray(ids, object), np.ones(5), np.arange(1, 6, dtype=float))
    whole = jio.read_problem(tmp_path / "t.csv")
    for nproc in (2, 3):
        parts = [jio.read_local_rows(str(tmp_path / "t.csv"), i, nproc) for i in range(nproc)]
        assert np.concatenate([p.page_id for p in parts]).tolist() == whole.page_id.tolist()
        np.testing.assert_array_equal(np.concatenate([p.change_rate for p in parts]), whole.change_rate)


# ---------------------------------------------------------------------------- signals
def test_the_console_script_is_recognised_as_the_command():
    python = sys.executable
    assert interrupts._is_command([python, "/venv/bin/jaxcrawl", "solve"], "/venv/bin/jaxcrawl")
    assert interrupts._is_command(["/venv/bin/jaxcrawl", "solve"])
    assert interrupts._is_command([python, "-m", "jaxcrawl.cli", "solve"])
    assert not interrupts._is_command([python, "-c", "pass"], "-c")
    assert not interrupts._is_command([python, "/usr/bin/pytest"], "/usr/bin/pytest")


def test_initialize_turns_the_preemption_notifier_off(monkeypatch):
    """JAX's preemption notifier takes SIGTERM over (a worker would swallow it and exit 0):
    the job is joined without it, and the command's handlers are installed again."""
    import jaxcrawl.parallel._processes as P

    calls = {}
    monkeypatch.setattr(jax.distributed, "is_initialized", lambda: False)
    monkeypatch.setattr(jax.distributed, "initialize", lambda **kw: calls.setdefault("kw", kw))
    monkeypatch.setattr(interrupts, "rearm", lambda: calls.setdefault("rearm", True))
    monkeypatch.setattr(P, "page_mesh", lambda devices, axis: "mesh")
    before = jax.config.jax_enable_preemption_service
    try:
        assert P.initialize("127.0.0.1:1", 2, 0, cpu_collectives=None) == "mesh"
        assert jax.config.jax_enable_preemption_service is False and calls.get("rearm")
    finally:
        jax.config.update("jax_enable_preemption_service", before)


@pytest.mark.long
def test_a_signal_is_honoured_inside_compiled_code(tmp_path):
    """A command stuck in a compiled loop (no Python handler can run) still ends with
    128 + SIGTERM within the grace period, removing its temporary outputs."""
    script = textwrap.dedent(f"""
        import jax, jax.numpy as jnp, sys
        from jaxcrawl._src import fileio, interrupts
        with interrupts.handlers():
            with fileio.command_outputs():
                fileio.write_file({str(tmp_path / 'out.txt')!r}, lambda fh: fh.write('x'))
                print('ready', flush=True)
                jax.jit(lambda x: jax.lax.while_loop(lambda v: v >= 0, lambda v: (v + 1) % 1000, x))(jnp.int32(0))  # endless
        print('not reached', flush=True)
    """)
    env = dict(os.environ, JAXCRAWL_SIGNAL_GRACE="1")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                            text=True)
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(timeout=60)
    finally:
        proc.kill()
    assert code == 128 + signal.SIGTERM, proc.stderr.read()
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_blanks_around_ids_are_judged_alike_by_the_columnar_and_the_exact_reader(tmp_path, monkeypatch, suffix):
    """Python's ``str.isspace`` blanks (tab, NBSP, ideographic space, U+001C...) around an id
    are refused by both readers; other characters (U+200B is not a blank) are kept by both."""
    import jaxcrawl.io._tables as tables

    chars = ["", " ", "\t", "\x1c", "\x1f", "\xa0", "\u2003", "\u200b", "\u3000", "\x85", "x"]
    ids = [f"{a}p{i}{b}" for i, (a, b) in enumerate((a, b) for a in chars for b in chars)]
    jio.write_table(tmp_path / f"t{suffix}", {"page_id": np.asarray(ids, object), "importance": np.ones(len(ids)),
                                              "change_rate": np.ones(len(ids))})

    def read():
        t = jio.read_table(tmp_path / f"t{suffix}", _page_schema(), errors="skip")
        return t["page_id"].tolist(), t.report.skipped_by_reason

    columnar = read()
    from jaxcrawl.io._formats import read_arrow
    from jaxcrawl.io._schema import RowLog

    assert read_arrow(str(tmp_path / f"t{suffix}"), _page_schema(), RowLog(tmp_path, "skip")) is not None
    monkeypatch.setattr(tables, "read_arrow", lambda *a, **k: None)
    exact = read()
    assert columnar == exact
    assert columnar[0] == [x for x in ids if x == x.strip()]


def _page_schema():
    return jio.Schema("page table", (jio.Column("page_id"), jio.Column("importance", "number"),
                                     jio.Column("change_rate", "number")), key="page_id")


@pytest.mark.parametrize("exc", [MemoryError(), RuntimeError("RESOURCE_EXHAUSTED: Out of memory allocating 8e12 bytes")])
def test_running_out_of_memory_is_an_error_not_a_traceback(monkeypatch, exc):
    import jaxcrawl.cli._sweep as sweep

    def exhausted(args):
        raise exc

    monkeypatch.setattr(sweep, "run", exhausted)
    expect_error(["sweep"], "out of", "memory")


@pytest.mark.long
def test_sigint_while_the_console_script_starts_is_recorded(tmp_path):
    """The console script (a file named ``jaxcrawl`` run by the interpreter) records a SIGINT
    that arrives while it imports JAX, and exits 130 without writing its output."""
    script = tmp_path / "bin" / "jaxcrawl"
    script.parent.mkdir()
    script.write_text("import sys\nfrom jaxcrawl.cli import main\nsys.exit(main())\n")
    (tmp_path / "p.csv").write_text(PAGES)
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(jaxcrawl.__file__))))
    proc = subprocess.Popen([sys.executable, str(script), "solve", "--input", str(tmp_path / "p.csv"), "--output",
                             str(tmp_path / "plan.csv")], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.time() + 30
    while time.time() < deadline:  # wait until jaxcrawl is being imported (its handlers recorded)
        with open(f"/proc/{proc.pid}/maps") as fh:
            if "jaxlib" in fh.read() or proc.poll() is not None:
                break
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, (proc.returncode, err[-2000:])
    assert not (tmp_path / "plan.csv").exists()


@pytest.mark.long
def test_sweep_checkpoints_survive_a_later_failure_and_resume(tmp_path, capsys, monkeypatch):
    """The sweep's chunks and manifest are finished work: written as each chunk ends (not at
    the command's end), so a failure in a later chunk keeps them and a rerun resumes."""
    import jaxcrawl.learners._sweep as sweep_impl

    out = tmp_path / "sweep"
    argv = ["sweep", "--instances", "1", "--arms", "3", "--seeds", "2", "--steps", "3",
            "--learning-rates", "0.1,0.2", "--out-dir", str(out)]
    real = sweep_impl.save_tree
    calls = []

    def fail_second(*a, **k):
        calls.append(a[0])
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(*a, **k)

    monkeypatch.setattr(sweep_impl, "save_tree", fail_second)
    assert cli.main(argv) != 0
    monkeypatch.undo()
    manifest = json.loads((out / "manifest.json").read_text())
    assert sorted(manifest["finished"]) == ["0"]
    capsys.readouterr()
    assert cli.main(argv) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["computed_chunks"] == [1]
