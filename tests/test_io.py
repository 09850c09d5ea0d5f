"""jaxcrawl.io: the one table reader (file:line errors naming the column and the rule), atomic
writes, refusing to overwrite inputs, and the CLI's exit status 3 when a solve fails."""
import json
import os
import stat

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxcrawl
from jaxcrawl import io as jio
from jaxcrawl import synthetic
from jaxcrawl.cli import main
from jaxcrawl.io._schema import Batch, RowError, Source
from jaxcrawl.io._tables import register_format

PAGES = jio.Schema("page table", (jio.Column("page_id"),
                                  jio.Column("importance", "number", minimum=0.0, exclusive_minimum=True),
                                  jio.Column("change_rate", "number", minimum=0.0, exclusive_minimum=True)),
                   key="page_id", rows="pages")


def last_json(capsys):
    out = capsys.readouterr()
    return json.loads(out.out.strip().splitlines()[-1]), out.err


def write(path, text):
    path.write_text(text)
    return str(path)


def read_caps(path):
    """The caps table ``path`` read for one URL page."""
    return jio.read_host_caps(path, ["https://h/x"])


def read_mapping(path):
    """The page -> host table ``path`` read through a caps table beside it."""
    caps = os.path.join(os.path.dirname(path), "caps.csv")
    with open(caps, "w") as fh:
        fh.write("host_id,cap\nh,1\n")
    return jio.read_host_caps(caps, ["p"], pages_path=path)


# ------------------------------------------------------------------------ the reader
@pytest.mark.parametrize("reader, text, line, column, message", [
    (jio.read_problem, "page_id,importance,change_rate\na,1,1\nb,0,1\n", 3, "importance",
     "importance must be finite and > 0, got '0'"),
    (jio.read_problem, "page_id,importance,change_rate\na,1,inf\n", 2, "change_rate",
     "change_rate must be finite and > 0, got 'inf'"),
    (jio.read_problem, "page_id,importance,change_rate,complete\na,1,1,2\n", 2, "complete",
     "complete must be a boolean (1/0/true/false/yes/no), got '2'"),
    (jio.read_problem, "page_id,importance,change_rate\na,1,1\na,2,2\n", 3, "page_id",
     "duplicate page_id 'a' (first on line 2)"),
    (jio.read_problem, "page_id,importance,change_rate\n a ,1,1\n", 2, "page_id",
     "page_id ' a ' has leading or trailing blanks (ids are used as written: remove them)"),
    (jio.read_problem, "page_id,importance,change_rate\n\n\n ,1,1\n", 4, "page_id", "empty page_id"),
    (jio.read_plan, "page_id,rate,prob\na,1,-0.5\n", 2, "prob", "prob must be in [0, 1], got '-0.5'"),
    (jio.read_plan, "page_id,rate,prob\na,nan,0\n", 2, "rate", "rate must be finite and >= 0, got 'nan'"),
    (jio.read_histories, "page_id,interval,changed\na,1,0\na,2,yes\n", 3, "changed",
     "changed must be 0 or 1, got 'yes'"),
    (jio.read_histories, "page_id,interval,changed,importance\na,1,0,2\nb,1,1,3\na,1,1,2.5\n", 4,
     "importance", "importance must be the same on every row of page_id 'a': got 2.5, 2.0 on line 2"),
    (read_caps, "# c\nhost_id,cap\nh,0\n", 3, "cap", "cap must be > 0 (or inf), got '0'"),
    (read_mapping, "page_id,host_id\np, \n", 2, "host_id", "empty host_id"),
])
def test_malformed_rows_name_file_line_column_and_rule(tmp_path, reader, text, line, column, message):
    path = write(tmp_path / "t.csv", text)
    with pytest.raises(jio.TableError) as info:
        reader(path)
    err = info.value
    assert isinstance(err, ValueError)
    assert (err.path, err.line, err.column, err.message) == (path, line, column, message)
    assert str(err).startswith(f"{path}:{line}: {message}")


@pytest.mark.parametrize("text, needle", [
    ("", "t.csv: empty file (expected a header page_id,importance,change_rate[,complete][,min_interval][,max_interval])"),
    ("\n\npage_id,importance\n", "t.csv:3: header must be 'page_id,importance,change_rate[,complete][,min_interval][,max_interval]' "
                                 "(missing column 'change_rate')"),
    ("page_id,importance,change_rate,colour\n", "t.csv:1: header must be 'page_id,importance,"
                                                "change_rate[,complete][,min_interval][,max_interval]' (unknown column 'colour')"),
    ("page_id,importance,Page_ID\n", "(column 'page_id' appears twice)"),
    ("page_id,importance,change_rate\na,1\n", "t.csv:2: expected 3 fields, got 2"),
    ("page_id,importance,change_rate\n", "t.csv: no pages after the header"),
    (b"page_id,importance,change_rate\na,1,1\n\xff,1,1\n", "t.csv:3: not valid UTF-8 text"),
])
def test_file_level_errors(tmp_path, text, needle):
    path = tmp_path / "t.csv"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(ValueError) as info:
        jio.read_problem(str(path))
    assert needle in str(info.value)
    with pytest.raises(ValueError, match="no such file"):
        jio.read_problem(str(tmp_path / "missing.csv"))


def test_header_by_name_any_order_quoting_and_bom(tmp_path):
    path = tmp_path / "t.csv"
    path.write_bytes("\ufeffChange_Rate,page_id,importance\n2,\"a,b\",1.5\n0.5,\"say \"\"hi\"\"\",3\n".encode())
    t = jio.read_problem(str(path))
    assert list(t.page_id) == ["a,b", 'say "hi"']
    np.testing.assert_array_equal(t.importance, [1.5, 3.0])
    np.testing.assert_array_equal(t.change_rate, [2.0, 0.5])
    np.testing.assert_array_equal(t.complete, [False, False])  # optional column's default
    # ... and what write_plan writes, read_plan reads back (ids quoted as needed)
    out = str(tmp_path / "plan.csv")
    jio.write_plan(out, t.page_id, [0.25, 1e-12], [0.0, 1.0])
    plan = jio.read_plan(out)
    assert list(plan.page_id) == ["a,b", 'say "hi"']
    np.testing.assert_array_equal(plan.rate, [0.25, 1e-12])
    np.testing.assert_array_equal(plan.prob, [0.0, 1.0])


def test_skip_mode_counts_every_malformed_row_by_reason(tmp_path):
    rows = ["page_id,interval,changed,importance"]
    rows += ["a,1,0,2", "a,x,0,2", "b,2,1,", "b,1,1,1", "c,1,2,1", "", "c,0.5,1,1", "d,1", "a,3,1,2"]
    path = write(tmp_path / "h.csv", "\n".join(rows) + "\n")
    h = jio.read_histories(path, errors="skip")
    rep = h.report
    assert rep.rows_read == 4 and rep.rows_skipped == 4 and rep.blank_lines == 1 and rep.header_lines == 1
    assert rep.skipped_by_reason == {"bad interval": 1, "bad importance": 1, "bad changed": 1,
                                     "wrong number of fields": 1}
    assert rep.examples[0] == f"{path}:3: interval 'x' is not a number"
    assert list(h.page_id) == ["a", "b", "c"]
    np.testing.assert_array_equal(h.mask.sum(axis=1), [2, 1, 1])
    np.testing.assert_array_equal(h.intervals[0], [1.0, 3.0])
    # "b,2,1," has an empty importance: skipped, so b's importance is its next row's
    np.testing.assert_array_equal(h.importance, [2.0, 1.0, 1.0])
    with pytest.raises(jio.TableError, match=r"h\.csv:3: interval 'x' is not a number \(pass errors='skip'"):
        jio.read_histories(path)


def test_batches_keep_row_order_and_first_error(tmp_path):
    """Rows are validated in batches; the result and the first error do not depend on them."""
    n = 1000
    lines = "".join(f"p{i},{i + 1},{(i % 7) + 1}\n" for i in range(n))
    path = write(tmp_path / "t.csv", "page_id,importance,change_rate\n" + lines)
    for size in (1, 7, 10_000):
        t = jio.read_table(path, PAGES, batch_size=size)
        np.testing.assert_array_equal(t["importance"], np.arange(1, n + 1))
        np.testing.assert_array_equal(t.line, np.arange(2, n + 2))
    bad = write(tmp_path / "b.csv", "page_id,importance,change_rate\n" + lines + "p1,1,1\nq,1\n")
    for size in (1, 64, 10_000):
        with pytest.raises(jio.TableError, match=r"b\.csv:1002: duplicate page_id 'p1' \(first on line 3\)"):
            jio.read_table(bad, PAGES, batch_size=size)


def test_a_new_format_plugs_into_the_same_validation(tmp_path):
    """register_format: a pipe-separated toy format gets the same rules and messages."""
    def open_psv(path, comments):
        with open(path) as fh:
            lines = fh.read().splitlines()
        header = lines[0].split("|")

        def batches(size):
            rows = [(i + 2, line.split("|")) for i, line in enumerate(lines[1:])]
            yield Batch(np.asarray([r[0] for r in rows]), [[r[1][j] for r in rows] for j in range(len(header))],
                               [])

        return Source(path, header, 1, batches)

    register_format(".jaxcrawl-test-psv", open_psv)
    good = write(tmp_path / "p.jaxcrawl-test-psv", "page_id|rate|prob\na|1.5|0\nb|2|0.5\n")
    plan = jio.read_plan(good)
    assert list(plan.page_id) == ["a", "b"] and list(plan.rate) == [1.5, 2.0]
    bad = write(tmp_path / "q.jaxcrawl-test-psv", "page_id|rate|prob\na|1.5|0\nb|-2|0.5\n")
    with pytest.raises(jio.TableError, match=r"q\.jaxcrawl-test-psv:3: rate must be finite and >= 0, got '-2'"):
        jio.read_plan(bad)


def test_column_parse_and_parse_many_agree():
    col = jio.Column("x", "number", minimum=0.0, exclusive_minimum=True)
    values = ["1", " 2.5 ", "0", "-1", "nan", "inf", "1e999", "", "abc", "1_000", "0x10", "+3"]
    parsed, bad = col.parse_many(values)
    for v, p, b in zip(values, parsed, bad):
        try:
            assert col.parse(v) == p and not b
        except RowError:
            assert b
    cap = jio.Column("cap", "number", minimum=0.0, exclusive_minimum=True, finite=False)
    assert cap.parse("inf") == np.inf and cap.rule == "> 0 (or inf)"


# ------------------------------------------------------------------------- writing
@pytest.mark.parametrize("interrupt", [ValueError, KeyboardInterrupt])
def test_atomic_write_leaves_the_old_file_when_writing_fails_midway(tmp_path, interrupt):
    path = tmp_path / "plan.csv"
    path.write_text("old content\n")

    def fill(tmp):
        with open(tmp, "w") as fh:
            fh.write("page_id\n0\n1\n")  # part of the file written, then the failure
            fh.flush()
            raise interrupt("disk full")

    with pytest.raises(interrupt):
        jio.atomic_write(path, fill)
    assert path.read_text() == "old content\n"
    assert sorted(os.listdir(tmp_path)) == ["plan.csv"]  # no temporary file left behind


def test_written_files_get_normal_permissions(tmp_path):
    path = tmp_path / "plan.csv"
    jio.write_plan(path, ["a"], [1.0], [0.0])
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o666 & ~mask
    os.chmod(path, 0o640)
    jio.write_plan(path, ["a"], [2.0], [0.0])  # a rewrite keeps the file's mode
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o640


def test_check_output_refuses_the_input(tmp_path):
    src = write(tmp_path / "pages.csv", "x\n")
    with pytest.raises(ValueError, match="refusing to overwrite"):
        jio.check_output(src, None, src)
    os.symlink(src, tmp_path / "link.csv")
    with pytest.raises(ValueError, match="refusing to overwrite"):
        jio.check_output(str(tmp_path / "link.csv"), src)
    with pytest.raises(ValueError, match="is a directory"):
        jio.check_output(str(tmp_path), src)
    jio.check_output(str(tmp_path / "other.csv"), src)


def test_page_table_roundtrip(tmp_path):
    t = jio.write_page_table(tmp_path / "pages", [1.0, 2.0], [0.5, 0.25], [False, True])
    assert t.num_pages == 2 and list(t.complete) == [False, True]
    assert t.directory == str(tmp_path / "pages") and list(t.page_id) == [0, 1]
    assert sorted(os.listdir(tmp_path / "pages")) == ["change_rate.npy", "complete.npy", "importance.npy"]
    again = jio.read_problem(tmp_path / "pages")  # the one reader: a file or a .npy directory
    assert isinstance(again, jio.PageTable) and list(again.change_rate) == [0.5, 0.25]
    np.testing.assert_array_equal(jio.PageTable(tmp_path / "pages").importance, [1.0, 2.0])
    mem = jio.PageTable.from_arrays(["a", "b"], [1.0, 2.0], [0.5, 0.25])
    assert mem.directory is None and list(mem.complete) == [False, False] and len(mem) == 2
    assert [c[0] for c in mem.chunks(1)] == [0, 1]
    p = jaxcrawl.synthetic(jax.random.key(0), 10)
    assert p.importance.shape == (10,) and jaxcrawl.synthetic is synthetic


# ------------------------------------------------------------- the CLI's safety net
def pages_csv(tmp_path, n=60):
    rng = np.random.default_rng(0)
    mu, lam = rng.lognormal(size=(2, n))
    return write(tmp_path / "pages.csv", "page_id,importance,change_rate\n" + "".join(
        f"u{i},{float(mu[i])!r},{float(lam[i])!r}\n" for i in range(n)))


def test_output_equal_to_input_is_refused(tmp_path, capsys):
    src = pages_csv(tmp_path)
    before = open(src).read()
    assert main(["solve", "-i", src, "-o", src]) == 2
    assert "refusing to overwrite" in capsys.readouterr().err
    rel = os.path.relpath(src)
    assert main(["solve", "-i", src, "-o", rel]) == 2
    assert open(src).read() == before
    plan = write(tmp_path / "plan.csv", "page_id,rate,prob\na,1,0\n")
    assert main(["schedule", "-p", plan, "-o", plan]) == 2
    assert "refusing to overwrite" in capsys.readouterr().err
    assert open(plan).read() == "page_id,rate,prob\na,1,0\n"


def test_estimate_refuses_to_overwrite_a_data_set_file(tmp_path):
    from jaxcrawl.cli import _estimate as estimate

    d = tmp_path / "ds"
    d.mkdir()
    (d / "urlid_imp.txt").write_text("1\t1\n")
    (d / "urlid_offset_history.txt").write_text("1\t0\t[[1, 0]]\n")
    import argparse
    parser = argparse.ArgumentParser()
    estimate.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["estimate", str(d), "-o", str(d / "urlid_imp.txt")])
    with pytest.raises(ValueError, match="refusing to overwrite"):
        args.func(args)
    assert (d / "urlid_imp.txt").read_text() == "1\t1\n"


def test_non_convergence_exits_3_and_leaves_the_output_alone(tmp_path, capsys):
    out = tmp_path / "plan.csv"
    out.write_text("previous plan\n")
    assert main(["solve", "--num-pages", "300", "--max-steps", "1", "-o", str(out)]) == 3
    summary, err = last_json(capsys)
    assert summary["converged"] is False and "output" not in summary and summary["root_steps"] == 1
    assert "did not converge" in err and "--max-steps" in err and "no plan written" in err
    assert out.read_text() == "previous plan\n"
    assert sorted(os.listdir(tmp_path)) == ["plan.csv"]


@pytest.mark.parametrize("defect, needle", [
    ("nan", "non-finite rates for 1 pages (first: page 'u3'"),
    ("off-budget", "off the bandwidth"),
])
def test_bad_plans_exit_3_and_write_nothing(tmp_path, capsys, monkeypatch, defect, needle):
    """A solve that claims convergence but returns NaN or misses the budget is still refused."""
    def fake_solve(problem, utility, **options):
        n = problem.importance.shape[-1]
        rate = jnp.full((n,), problem.bandwidth / n)
        rate = rate.at[3].set(jnp.nan) if defect == "nan" else rate * 1.01
        return jaxcrawl.make_policy(problem, rate, 1.0, jnp.zeros(()), 5, converged=True)

    monkeypatch.setattr(jaxcrawl, "solve", fake_solve)
    src = pages_csv(tmp_path)
    out = tmp_path / "plan.csv"
    assert main(["solve", "-i", src, "-o", str(out), "--bandwidth", "6"]) == 3
    summary, err = last_json(capsys)
    assert summary["converged"] is True and needle in summary["error"] and needle in err
    assert not out.exists()
