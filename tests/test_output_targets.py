"""Outputs that are not regular files and inputs that cannot be read twice, through the command
line: a symlink output is written through (its target replaced, the link kept), a FIFO or a
character device is streamed into (never replaced by a regular file), a block device is
refused; every run has temporaries of its own; a table read from a FIFO is read once."""
import contextlib
import os
import stat
import threading

import numpy as np
import pytest

from jaxcrawl._src import chunks, fileio

from helpers import TINY_PAGES
from helpers import run_cli as run

PAGES = TINY_PAGES


def solve(tmp_path, output, *extra, table=None):
    if table is None:
        table = tmp_path / "pages.csv"
        table.write_text(PAGES)
    code, out, err = run(["solve", "--input", table, "--bandwidth", "2", "--output", output, "-q", *extra])
    assert code == 0, (out, err)
    return out, err


def reference_plan(tmp_path):
    solve(tmp_path, tmp_path / "reference.csv")
    return (tmp_path / "reference.csv").read_bytes()


def test_a_symlink_output_is_written_through_and_the_link_kept(tmp_path):
    expected = reference_plan(tmp_path)
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "plan.csv"
    target.write_text("old\n")
    link = tmp_path / "plan.csv"
    os.symlink(target, link)
    solve(tmp_path, link)
    assert os.path.islink(link) and os.readlink(link) == str(target)
    assert target.read_bytes() == expected
    assert sorted(os.listdir(tmp_path / "real")) == ["plan.csv"]  # no temporary left next to the target


def test_a_dangling_symlink_output_creates_its_target(tmp_path):
    expected = reference_plan(tmp_path)
    link = tmp_path / "plan.csv"
    os.symlink(tmp_path / "new.csv", link)
    solve(tmp_path, link)
    assert os.path.islink(link) and (tmp_path / "new.csv").read_bytes() == expected


def test_a_fifo_output_is_streamed_into_and_stays_a_fifo(tmp_path):
    expected = reference_plan(tmp_path)
    fifo = tmp_path / "plan.fifo.csv"
    os.mkfifo(fifo)
    r = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader, so the run's writer can open it
    w = os.open(fifo, os.O_WRONLY)  # and a writer of our own: the reader sees EOF only when we close it
    try:
        solve(tmp_path, fifo)
        assert stat.S_ISFIFO(os.lstat(fifo).st_mode), "the FIFO was replaced"
    finally:
        os.close(w)
        os.set_blocking(r, True)
        with open(r, "rb") as fh:
            got = fh.read()
    assert got == expected


def test_a_failed_run_writes_nothing_into_a_fifo(tmp_path):
    (tmp_path / "bad.csv").write_text("page_id,importance,change_rate\na,1,-1\n")
    fifo = tmp_path / "plan.fifo"
    os.mkfifo(fifo)
    r = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    w = os.open(fifo, os.O_WRONLY)
    code, _, err = run(["solve", "--input", tmp_path / "bad.csv", "--bandwidth", "1", "--output", fifo])
    os.close(w)
    os.set_blocking(r, True)
    with open(r, "rb") as fh:
        assert fh.read() == b""
    assert code == 2 and "change_rate" in err and stat.S_ISFIFO(os.lstat(fifo).st_mode)


def _fake_stat(path_of_interest, mode_bits):
    real_stat = os.stat

    def fake(path, *args, **kwargs):
        st = real_stat(path, *args, **kwargs)
        if os.fspath(path) == os.fspath(path_of_interest):
            fields = list(st)
            fields[0] = mode_bits | 0o666
            return os.stat_result(fields)
        return st
    return fake


def test_a_character_device_output_is_streamed_into(tmp_path, monkeypatch):
    """A character device (as /dev/stdout or /dev/null are) is written through, never
    replaced: a FIFO under tmp_path that os.stat reports as a character device stands for it."""
    expected = reference_plan(tmp_path)
    dev = tmp_path / "device"
    os.mkfifo(dev)
    r = os.open(dev, os.O_RDONLY | os.O_NONBLOCK)
    w = os.open(dev, os.O_WRONLY)
    monkeypatch.setattr(os, "stat", _fake_stat(dev, stat.S_IFCHR))
    assert fileio.output_target(dev) == (str(dev), True)
    try:
        solve(tmp_path, dev)
    finally:
        monkeypatch.undo()
        os.close(w)
        os.set_blocking(r, True)
        with open(r, "rb") as fh:
            got = fh.read()
    assert got == expected and stat.S_ISFIFO(os.lstat(dev).st_mode)


def test_a_block_device_output_is_refused_before_the_work(tmp_path, monkeypatch):
    (tmp_path / "pages.csv").write_text(PAGES)
    dev = tmp_path / "disk"
    dev.write_text("data\n")
    monkeypatch.setattr(os, "stat", _fake_stat(dev, stat.S_IFBLK))
    code, _, err = run(["solve", "--input", tmp_path / "pages.csv", "--bandwidth", "2", "--output", dev])
    monkeypatch.undo()
    assert code == 2 and f"{dev}: is a block device; refusing to write it" in err
    assert dev.read_text() == "data\n" and sorted(os.listdir(tmp_path)) == ["disk", "pages.csv"]


def _npy_table(d, importance, change_rate):
    os.makedirs(d, exist_ok=True)
    np.save(os.path.join(d, "importance.npy"), np.asarray(importance, np.float64))
    np.save(os.path.join(d, "change_rate.npy"), np.asarray(change_rate, np.float64))
    np.save(os.path.join(d, "complete.npy"), np.zeros(len(importance), bool))
    return str(d)


@pytest.mark.long
def test_two_stream_runs_on_one_output_have_temporaries_of_their_own(tmp_path, monkeypatch):
    """A second run on the same output, started while the first one's rates are mapped,
    neither truncates nor removes the first one's file: each run ends with its own rates."""
    a = _npy_table(tmp_path / "a", [1.0, 2.0, 0.5], [1.0, 0.5, 3.0])
    b = _npy_table(tmp_path / "b", [3.0, 1.0, 1.0, 2.0], [0.2, 0.5, 1.0, 4.0])
    out = tmp_path / "rates.npy"
    real_memmap = chunks.output_memmap
    seen = []

    def memmap_then_second_run(path, *args, **kwargs):
        m = real_memmap(path, *args, **kwargs)
        seen.append(os.fspath(path))
        if len(seen) == 1:  # the first run's file is mapped: the second run starts and finishes
            code, _, err = run(["stream", "--table", b, "--output", out, "--bandwidth", "2", "-q"])
            assert code == 0, err
            assert os.path.exists(path) and os.path.getsize(path) >= m.nbytes, "the second run took the file"
        return m

    monkeypatch.setattr(chunks, "output_memmap", memmap_then_second_run)
    code, _, err = run(["stream", "--table", a, "--output", out, "--bandwidth", "1", "-q"])
    monkeypatch.undo()
    assert code == 0, err
    assert len(seen) == 2 and seen[0] != seen[1]
    rates = np.load(out)
    assert rates.shape == (3,) and abs(float(rates.sum()) - 1.0) < 1e-3  # the first run's (finished last)
    run(["stream", "--table", a, "--output", tmp_path / "alone.npy", "--bandwidth", "1", "-q"])
    np.testing.assert_array_equal(rates, np.load(tmp_path / "alone.npy"))
    assert sorted(os.listdir(tmp_path)) == ["a", "alone.npy", "b", "rates.npy"]  # no temporary left


def _feed(fifo, data: bytes, done: threading.Event):
    """Write ``data`` into the FIFO once; then, until ``done``, give EOF to any reader that
    opens it again (a second reading sees an empty file instead of waiting forever)."""
    with open(fifo, "wb") as fh:
        fh.write(data)
    while not done.wait(0.05):
        with contextlib.suppress(OSError):
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # ENXIO while no reader waits


@pytest.mark.parametrize("name", ["pages.csv", pytest.param("pages.jsonl", marks=pytest.mark.long),
                                  pytest.param("pages.csv.gz", marks=pytest.mark.long)])
def test_a_table_from_a_fifo_is_read_once(tmp_path, name):
    import gzip
    import json

    rows = [r.split(",") for r in PAGES.splitlines()]
    if name.endswith(".jsonl"):
        data = "".join(json.dumps(dict(zip(rows[0], r))) + "\n" for r in rows[1:]).encode()
    else:
        data = gzip.compress(PAGES.encode()) if name.endswith(".gz") else PAGES.encode()
    regular = tmp_path / ("regular_" + name)
    regular.write_bytes(data)
    solve(tmp_path, tmp_path / "expected.csv", table=regular)
    fifo = tmp_path / name
    os.mkfifo(fifo)
    done = threading.Event()
    feeder = threading.Thread(target=_feed, args=(fifo, data, done), daemon=True)
    feeder.start()
    try:
        code, out, err = run(["solve", "--input", fifo, "--bandwidth", "2", "--output", tmp_path / "plan.csv", "-q"])
    finally:
        done.set()
        feeder.join(10)
    assert code == 0, (out, err)
    assert (tmp_path / "plan.csv").read_bytes() == (tmp_path / "expected.csv").read_bytes()
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


@pytest.mark.long
def test_histories_from_a_fifo_are_read_once(tmp_path):
    data = b"page_id,interval,changed\na,1.5,0\na,1.0,1\nb,2.0,1\nb,0.5,0\n"
    (tmp_path / "regular.csv").write_bytes(data)
    assert run(["estimate", tmp_path / "regular.csv", "-o", tmp_path / "expected.csv", "-q"])[0] == 0
    fifo = tmp_path / "histories.csv"
    os.mkfifo(fifo)
    done = threading.Event()
    feeder = threading.Thread(target=_feed, args=(fifo, data, done), daemon=True)
    feeder.start()
    try:
        code, out, err = run(["estimate", fifo, "-o", tmp_path / "got.csv", "-q"])
    finally:
        done.set()
        feeder.join(10)
    assert code == 0, (out, err)
    assert (tmp_path / "got.csv").read_bytes() == (tmp_path / "expected.csv").read_bytes()
