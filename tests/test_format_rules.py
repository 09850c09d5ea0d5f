"""One rule for every format, through the command line: a key or column named twice is an error
in CSV, JSON Lines and Parquet alike; a Parquet column must hold one value per row; a history
interval float32 cannot hold is refused (suggesting --x64), never turned into inf; an output
that cannot be written (a file-size limit) is named."""
import json
import os
import subprocess
import sys
import textwrap

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from helpers import TINY_PAGES
from helpers import expect_cli_error as expect_error
from helpers import run_cli as run

PAGES = TINY_PAGES


@pytest.mark.parametrize("line", [1, 3])
def test_a_json_lines_key_named_twice_is_refused_as_a_csv_column_is(tmp_path, line):
    rows = ['{"page_id": "a", "importance": 1, "change_rate": 1}',
            '{"page_id": "b", "importance": 2, "change_rate": 0.5}',
            '{"page_id": "c", "importance": 0.5, "change_rate": 3}']
    rows[line - 1] = rows[line - 1][:-1] + ', "importance": 9}'
    (tmp_path / "p.jsonl").write_text("\n".join(rows) + "\n")
    expect_error(["solve", "--input", tmp_path / "p.jsonl", "--bandwidth", "1", "--output", tmp_path / "o.csv"],
                 f"p.jsonl:{line}: field 'importance' appears twice")
    assert not (tmp_path / "o.csv").exists()
    (tmp_path / "p.csv").write_text("page_id,importance,change_rate,importance\na,1,1,9\n")
    expect_error(["solve", "--input", tmp_path / "p.csv", "--bandwidth", "1"], "p.csv:1:", "'importance' appears twice")


def test_a_repeated_json_lines_key_is_counted_and_skipped_with_errors_skip(tmp_path):
    text = ('{"page_id": "a", "interval": 1, "changed": 1}\n{"page_id": "a", "interval": 2, "changed": 0}\n'
            '{"page_id": "b", "interval": 1, "interval": 5, "changed": 1}\n{"page_id": "b", "interval": 3, '
            '"changed": 0}\n')
    (tmp_path / "h.jsonl").write_text(text)
    expect_error(["estimate", tmp_path / "h.jsonl"], "h.jsonl:3: field 'interval' appears twice")
    code, out, err = run(["estimate", tmp_path / "h.jsonl", "--errors", "skip", "-q"])
    assert code == 0, err
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["rows_skipped"] == 1 and summary["skipped_by_reason"] == {"repeated field": 1}


def test_a_parquet_file_with_two_columns_of_one_name_is_named(tmp_path):
    t = pa.Table.from_arrays([pa.array(["a", "b"]), pa.array([1.0, 2.0]), pa.array([1.0, 0.5]), pa.array([5.0, 6.0])],
                             names=["page_id", "importance", "change_rate", "importance"])
    pq.write_table(t, tmp_path / "p.parquet")
    expect_error(["solve", "--input", tmp_path / "p.parquet", "--bandwidth", "1"],
                 f"{tmp_path / 'p.parquet'}: ", "column 'importance' appears twice")


def test_a_parquet_list_column_is_named(tmp_path):
    t = pa.table({"page_id": ["a", "b"], "importance": [1.0, 2.0], "change_rate": pa.array([[1.0], [0.5, 2.0]])})
    pq.write_table(t, tmp_path / "p.parquet")
    expect_error(["solve", "--input", tmp_path / "p.parquet", "--bandwidth", "1"],
                 f"{tmp_path / 'p.parquet'}: column 'change_rate' holds list<")


def test_a_history_interval_float32_cannot_hold_is_refused_suggesting_x64(tmp_path):
    (tmp_path / "h.csv").write_text("page_id,interval,changed\na,0.5,1\na,1e300,1\nb,2,1\nb,1,0\n")
    err = expect_error(["estimate", tmp_path / "h.csv", "-o", tmp_path / "e.csv"],
                       "h.csv:3: interval 1e+300 is outside float32's normal range", "--x64")
    assert "--errors skip" not in err and not (tmp_path / "e.csv").exists()
    (tmp_path / "tiny.csv").write_text("page_id,interval,changed\na,1e-300,1\n")
    expect_error(["estimate", tmp_path / "tiny.csv"], "tiny.csv:2: interval 1e-300", "would become 0")


@pytest.mark.long
@pytest.mark.x64
def test_a_history_interval_beyond_float32_is_estimated_in_float64(tmp_path):
    """With --x64 the long interval counts: page a changed in each of its intervals, so its
    maximum-likelihood rate is the largest the clip allows; b's is its own."""
    (tmp_path / "h.csv").write_text("page_id,interval,changed\na,0.5,1\na,1e300,1\nb,2,1\nb,1,0\n")
    code, out, err = run(["estimate", tmp_path / "h.csv", "--x64", "--estimator", "mle", "-o", tmp_path / "e.csv",
                          "-q"])
    assert code == 0, err
    lines = (tmp_path / "e.csv").read_text().splitlines()
    assert lines[1].split(",")[0] == "a" and lines[1].split(",")[4] == "2"  # both observations of a are used


@pytest.mark.long
def test_a_file_size_limit_is_named_by_the_output(tmp_path):
    """``ulimit -f``: EFBIG while writing names the output file (and no temporary is left)."""
    (tmp_path / "p.csv").write_text("page_id,importance,change_rate\n"
                                    + "".join(f"page{i:05d},1,{1 + i % 7}\n" for i in range(2000)))
    script = textwrap.dedent(f"""
        import resource, signal, sys
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
        from jaxcrawl import cli
        sys.exit(cli.main(["solve", "--input", {str(tmp_path / "p.csv")!r}, "--bandwidth", "100",
                           "--output", {str(tmp_path / "plan.jsonl")!r}, "-q"]))
    """)
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 2, p.stderr[-2000:]
    assert f"{tmp_path / 'plan.jsonl'}: cannot write the output (file too large" in p.stderr, p.stderr[-2000:]
    assert "Traceback" not in p.stderr
    assert sorted(os.listdir(tmp_path)) == ["p.csv"]


def test_no_float_column_of_a_page_table_is_silently_narrowed(tmp_path):
    """The page table's rule (an existing one) and the histories' are the same: named, --x64."""
    (tmp_path / "p.csv").write_text("page_id,importance,change_rate\na,1,1\nb,1e300,1\n")
    expect_error(["solve", "--input", tmp_path / "p.csv", "--bandwidth", "1"], "importance 1e+300", "--x64")
