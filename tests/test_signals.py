"""Interrupts: SIGINT exits 130 and SIGTERM 143 (docs/cli.md, "Exit status"), cleanly.

For every signal: the process ends with the documented status (SIGKILL: killed, -9), a file
that existed before the run is byte-identical, no temporary file (``.tmp_*`` or
``*.partial.npy``) is left next to the output, and an interrupted ``reproduce`` resumes
from its checkpoints to the results of an uninterrupted run.

The in-process tests (default suite) send the signal to the test process itself while a
plan is being written (inside :func:`jaxcrawl.io.atomic_write`); the
subprocess tests (``long``) start ``python -m jaxcrawl.cli ...`` and signal it mid-run.
"""
import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from jaxcrawl import cli

REPO = Path(__file__).resolve().parents[1]
EXPERIMENTS = REPO / "jaxcrawl" / "experiments"
STATUS = {signal.SIGINT: 130, signal.SIGTERM: 143}


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.startswith(".tmp_") or p.name.endswith(".partial.npy"))


def _quiet_main(argv):
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
        code = cli.main(argv)
    return code, err.getvalue()


@pytest.mark.usefixtures("fresh_sigint")
@pytest.mark.parametrize("sig", [signal.SIGINT, pytest.param(signal.SIGTERM, marks=pytest.mark.long)])
def test_signal_while_writing_a_plan_keeps_the_old_plan(tmp_path, monkeypatch, sig):
    from jaxcrawl.io import _formats as formats

    real = formats.atomic_write
    seen = []

    def write_then_signal(path, write_fn, **kw):
        def fill(tmp):
            write_fn(tmp)
            seen.append(os.path.getsize(tmp))
            os.kill(os.getpid(), sig)  # the handler raises in this (main) thread
            time.sleep(5)  # not reached: the signal interrupts the sleep
            raise AssertionError("the signal did not interrupt the write")
        return real(path, fill, **kw)

    monkeypatch.setattr(formats, "atomic_write", write_then_signal)
    out = tmp_path / "plan.csv"
    out.write_bytes(b"page_id,rate,prob\nold,1,0\n")
    before = out.read_bytes()
    previous = signal.getsignal(sig)
    code, err = _quiet_main(["solve", "--num-pages", "64", "-q", "-o", str(out)])
    assert code == STATUS[sig], err
    assert seen and seen[0] > len(before)  # the new plan was (almost) complete when the signal came
    assert out.read_bytes() == before
    assert _leftovers(tmp_path) == []
    assert signal.getsignal(sig) is previous  # handlers restored after the command
    assert ("terminated" if sig == signal.SIGTERM else "interrupted") in err


def test_an_interrupt_at_any_line_of_a_write_leaves_no_temporary(tmp_path):
    """An interrupt between any two lines of the atomic write (CI caught one right after the
    temporary was created) leaves the old output whole and, once the command ends
    (``remove_leftovers``, as ``jaxcrawl.cli.main`` does), no temporary file."""
    from jaxcrawl._src import fileio

    out = tmp_path / "plan.csv"
    old = b"page_id,rate,prob\nold,1,0\n"

    def write(tmp):
        Path(tmp).write_bytes(b"page_id,rate,prob\nnew,2,0\n")

    lines = 0  # the number of fileio lines one uninterrupted write runs
    def count(frame, event, arg):
        nonlocal lines
        if event == "line" and frame.f_code.co_filename == fileio.__file__:
            lines += 1
        return count
    sys.settrace(count)
    try:
        fileio.atomic_write(out, write)
    finally:
        sys.settrace(None)
    assert lines > 10
    for k in range(lines):
        out.write_bytes(old)
        seen = 0
        def interrupt_at_k(frame, event, arg):
            nonlocal seen
            if event == "line" and frame.f_code.co_filename == fileio.__file__:
                seen += 1
                if seen == k + 1:
                    raise KeyboardInterrupt
            return interrupt_at_k
        sys.settrace(interrupt_at_k)
        try:
            fileio.atomic_write(out, write)
        except KeyboardInterrupt:
            pass
        finally:
            sys.settrace(None)
        fileio.remove_leftovers()
        assert out.read_bytes() in (old, b"page_id,rate,prob\nnew,2,0\n"), k
        assert _leftovers(tmp_path) == [], k


def _lose_a_signal(sig):
    """Deliver ``sig`` and swallow the exception its handler raises, as Python does when the
    handler runs inside a garbage-collector callback (JAX registers one)."""
    try:
        os.kill(os.getpid(), sig)
        time.sleep(5)  # not reached: the signal interrupts the sleep
        raise AssertionError("the signal did not interrupt the sleep")
    except KeyboardInterrupt:
        pass


@pytest.mark.usefixtures("fresh_sigint")
@pytest.mark.parametrize("sig", [signal.SIGINT, pytest.param(signal.SIGTERM, marks=pytest.mark.long)])
def test_an_interrupt_lost_where_it_was_raised_still_ends_the_command(tmp_path, monkeypatch, sig):
    """CI found ``solve`` exiting 0 after a SIGINT whose KeyboardInterrupt was raised (and lost)
    in JAX's gc callback: the write must still be abandoned and the status be 130/143."""
    from jaxcrawl.io import _formats as formats

    real = formats.atomic_write

    def write_and_lose_a_signal(path, write_fn, **kw):
        def fill(tmp):
            write_fn(tmp)
            _lose_a_signal(sig)
        return real(path, fill, **kw)

    monkeypatch.setattr(formats, "atomic_write", write_and_lose_a_signal)
    out = tmp_path / "plan.csv"
    out.write_bytes(b"page_id,rate,prob\nold,1,0\n")
    before = out.read_bytes()
    code, err = _quiet_main(["solve", "--num-pages", "64", "-q", "-o", str(out)])
    assert code == STATUS[sig], err
    assert out.read_bytes() == before
    assert _leftovers(tmp_path) == []


@pytest.mark.usefixtures("fresh_sigint")
def test_a_lost_interrupt_keeps_the_finished_checkpoint_then_stops(tmp_path):
    from jaxcrawl._src import interrupts
    from jaxcrawl.io import CheckpointStore

    store = CheckpointStore(tmp_path, "fp")
    store.save("before", 1)  # outside a command: nothing recorded, nothing raised
    with interrupts.handlers():
        _lose_a_signal(signal.SIGINT)
        with pytest.raises(KeyboardInterrupt):
            store.save("chunk", np.arange(3))
        assert interrupts.received() == signal.SIGINT
    assert interrupts.received() is None
    ok, value = store.load("chunk")
    assert ok and np.array_equal(value, np.arange(3))
    assert _leftovers(tmp_path) == []


class _SignalOnEnter:
    """A lock that sends ``sig`` to this process as it is taken: the handler raises on the
    first line of the handlers' removal, before it marks the command as ended."""

    def __init__(self, lock, sig):
        self.lock, self.sig, self.sent = lock, sig, False

    def __enter__(self):
        if not self.sent:
            self.sent = True
            os.kill(os.getpid(), self.sig)
        return self.lock.__enter__()

    def __exit__(self, *exc):
        return self.lock.__exit__(*exc)


def _watchdogs():
    import threading

    return [t for t in threading.enumerate() if t.name == "jaxcrawl-signal-watchdog"]


@pytest.mark.usefixtures("fresh_sigint")
def test_a_signal_as_the_handlers_are_removed_still_removes_them(monkeypatch):
    from jaxcrawl._src import interrupts

    monkeypatch.setattr(interrupts, "_lock", _SignalOnEnter(interrupts._lock, signal.SIGINT))
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt):
        with interrupts.handlers():
            assert len(_watchdogs()) == 1
    assert _watchdogs() == []
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert signal.getsignal(signal.SIGTERM) is before
    assert signal.set_wakeup_fd(-1) == -1  # no wakeup descriptor left behind
    assert (interrupts._received, interrupts._raised, interrupts._armed) == ([], [], False)


@pytest.mark.usefixtures("fresh_sigint")
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_as_a_command_ends_keeps_its_output_and_says_so(tmp_path, monkeypatch, sig):
    from jaxcrawl._src import interrupts

    monkeypatch.setattr(interrupts, "_lock", _SignalOnEnter(interrupts._lock, sig))
    out = tmp_path / "plan.jsonl"
    code, err = _quiet_main(["solve", "--num-pages", "64", "-q", "-o", str(out)])
    assert code == STATUS[sig], err
    assert "as the command ended (what it wrote is complete)" in err
    assert len(out.read_text().splitlines()) == 64
    assert _leftovers(tmp_path) == [] and _watchdogs() == []
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


@pytest.mark.long
def test_second_signal_during_cleanup_is_ignored(tmp_path, monkeypatch):
    """A second Ctrl-C while the first unwinds must not interrupt the temporary file's removal."""
    from jaxcrawl._src import fileio as checkpoint
    from jaxcrawl.io import _formats as formats

    real_remove = checkpoint.os.remove
    removed = []

    def remove_after_another_signal(p):
        os.kill(os.getpid(), signal.SIGINT)
        real_remove(p)
        removed.append(p)

    def fill_and_interrupt(path, write_fn, **kw):
        def fill(tmp):
            write_fn(tmp)
            monkeypatch.setattr(checkpoint.os, "remove", remove_after_another_signal)
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        return checkpoint.atomic_write(path, fill, **kw)

    monkeypatch.setattr(formats, "atomic_write", fill_and_interrupt)
    out = tmp_path / "plan.csv"
    code, _ = _quiet_main(["solve", "--num-pages", "64", "-q", "-o", str(out)])
    monkeypatch.undo()
    assert code == 130 and len(removed) == 1
    assert not out.exists() and _leftovers(tmp_path) == []


# --------------------------------------------------------------------------- subprocesses

def _env(**extra):
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               JAXCRAWL_COMPILE_CACHE="0", **extra)
    env.pop("JAXCRAWL_TEST_X64", None)
    return env


def _start(argv, cwd, **env):
    return subprocess.Popen([sys.executable, "-m", "jaxcrawl.cli", *argv], cwd=cwd, env=_env(**env),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for(pred, proc, timeout=120.0, poll=0.02):
    t0 = time.monotonic()
    while not pred():
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"the command ended (status {proc.returncode}) before the signal:\n{err[-2000:]}")
        if time.monotonic() - t0 > timeout:
            proc.kill()
            pytest.fail("timed out waiting for the command to get going")
        time.sleep(poll)


def _signal_and_check(proc, sig, tmp_path, protected):
    before = {p: p.read_bytes() for p in protected}
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    expected = -9 if sig == signal.SIGKILL else STATUS[sig]
    assert proc.returncode == expected, err[-3000:]
    assert "Segmentation" not in err and "Traceback" not in err, err[-3000:]
    for p, b in before.items():
        assert p.read_bytes() == b, p
    if sig != signal.SIGKILL:  # a killed process cannot clean up; its temporary file has a .tmp_ name
        assert _leftovers(tmp_path) == []
    return out, err


def _tmp_appeared(directory: Path):
    return lambda: any(p.name.startswith(".tmp_") for p in directory.iterdir())


def _big_problem(tmp_path, n=400_000):
    rng = np.random.default_rng(0)
    path = tmp_path / "pages.csv"
    with open(path, "w") as fh:
        fh.write("page_id,importance,change_rate\n")
        imp, lam = rng.lognormal(size=(2, n))
        fh.writelines(f"p{i},{imp[i]:.6g},{lam[i]:.6g}\n" for i in range(n))
    return path


@pytest.mark.long
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_solve_signalled_while_writing(tmp_path, sig):
    src = _big_problem(tmp_path)
    out = tmp_path / "plan.csv"
    out.write_text("page_id,rate,prob\nold,1,0\n")
    proc = _start(["solve", "-i", str(src), "--bandwidth", "1000", "-q", "-o", str(out)], tmp_path)
    _wait_for(_tmp_appeared(tmp_path), proc)
    _signal_and_check(proc, sig, tmp_path, [src, out])


@pytest.mark.long
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_solve_signalled_while_reading(tmp_path, sig):
    src = _big_problem(tmp_path, n=1_000_000)
    out = tmp_path / "plan.csv"
    out.write_text("page_id,rate,prob\nold,1,0\n")
    proc = _start(["solve", "-i", str(src), "--bandwidth", "1000", "-q", "-o", str(out)], tmp_path)
    # after the command's handlers are installed (python and jax imported: the table is being
    # read or solved), not after a fixed delay, which a loaded machine can spend importing
    _wait_for(_catches(proc.pid, signal.SIGTERM), proc)
    time.sleep(0.2)
    _signal_and_check(proc, sig, tmp_path, [src, out])


@pytest.mark.long
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_solve_signalled_while_importing(tmp_path, sig):
    """The first second or two of a command import JAX, before the command's handlers exist;
    ``jaxcrawl/__init__.py`` records a signal there (SIGTERM is caught from that point: Python
    itself only catches SIGINT), and the command ends with the documented status, no traceback."""
    src = _big_problem(tmp_path, n=1_000)
    out = tmp_path / "plan.csv"
    out.write_text("page_id,rate,prob\nold,1,0\n")
    proc = _start(["solve", "-i", str(src), "--bandwidth", "10", "-q", "-o", str(out)], tmp_path)
    maps = Path(f"/proc/{proc.pid}/maps")
    if not maps.exists():
        proc.kill()
        pytest.skip("needs /proc/PID/status and /proc/PID/maps (Linux)")
    _wait_for(_catches(proc.pid, signal.SIGTERM), proc, poll=0.001)
    # still importing: jaxlib's extension is not loaded yet (it is once the command's own
    # handlers are installed, which is what this test must not wait for)
    assert "jaxlib" not in maps.read_text()
    _, err = _signal_and_check(proc, sig, tmp_path, [src, out])
    assert ("terminated" if sig == signal.SIGTERM else "interrupted") in err


def _catches(pid, sig):
    """Whether process ``pid`` has a handler for ``sig`` (Linux: the SigCgt mask of
    /proc/PID/status; elsewhere, a 3 s delay)."""
    status = Path(f"/proc/{pid}/status")
    if not status.exists():
        t0 = time.monotonic()
        return lambda: time.monotonic() - t0 > 3.0

    def caught():
        with contextlib.suppress(OSError):
            for line in status.read_text().splitlines():
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (int(sig) - 1) & 1)
        return False
    return caught


@pytest.mark.long
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_estimate_signalled_while_writing(tmp_path, sig):
    rng = np.random.default_rng(1)
    n, k = 200_000, 3
    src = tmp_path / "histories.csv"
    with open(src, "w") as fh:
        fh.write("page_id,interval,changed,importance\n")
        ch = rng.random((n, k)) < 0.5
        fh.writelines(f"p{i},1,{int(ch[i, j])},1\n" for i in range(n) for j in range(k))
    out = tmp_path / "estimates.csv"
    out.write_text("page_id,importance,change_rate,half_width,num_observations,complete\nold,1,1,0,1,0\n")
    proc = _start(["estimate", str(src), "-q", "-o", str(out)], tmp_path)
    _wait_for(_tmp_appeared(tmp_path), proc)
    _signal_and_check(proc, sig, tmp_path, [src, out])


@pytest.mark.long
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_schedule_signalled_while_writing(tmp_path, sig):
    n = 20_000
    plan = tmp_path / "plan.csv"
    with open(plan, "w") as fh:
        fh.write("page_id,rate,prob\n")
        fh.writelines(f"p{i},{1 + i % 7},0\n" for i in range(n))
    out = tmp_path / "timetable.csv"
    out.write_text("time,page_id\n0,old\n")
    proc = _start(["schedule", "-p", str(plan), "--horizon", "30", "-q", "-o", str(out)], tmp_path)
    _wait_for(_tmp_appeared(tmp_path), proc)
    _signal_and_check(proc, sig, tmp_path, [plan, out])


SLOW_EXPERIMENT = textwrap.dedent('''
    """slow_chunks: a test double whose chunks run JAX work (threads inside XLA) for a while."""
    import os
    import time

    import _common
    from _common import claim

    NAME = "slow_chunks"
    DESCRIPTION = "test double: four chunks of JAX work"


    def run(ctx):
        import jax
        import jax.numpy as jnp

        log = os.environ["SLOW_LOG"]
        f = jax.jit(lambda x: jnp.sort(jnp.cumsum(jnp.sin(x) ** 2))[-1])

        def work(i):
            with open(log, "a") as fh:
                fh.write(f"start {i}\\n")
            x = jnp.arange(1_000_000, dtype=jnp.float32) + i
            t0, acc = time.monotonic(), 0.0
            while time.monotonic() - t0 < 1.5:
                acc = float(f(x))
            with open(log, "a") as fh:
                fh.write(f"done {i}\\n")
            return {"value": float(f(x)) + ctx.seed}

        done = ctx.run_chunks("slow", {f"chunk{i}": (lambda i=i: work(i)) for i in range(4)})
        total = sum(v["value"] for v in done.values())
        fig, axes = _common.new_figure(1, 1)
        axes[0, 0].plot([0, 1], [0, total])
        ctx.savefig(fig)
        return dict(params=dict(chunks=4), results=dict(total=total),
                    claims=[claim("total_is_positive", total > 0, description="a sum of squares",
                                  tolerance="exact", paper="none: a test double")])
''')


@pytest.mark.long
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_reproduce_signalled_resumes_to_identical_results(tmp_path, sig):
    pytest.importorskip("matplotlib")
    import shutil

    exp = tmp_path / "experiments"
    exp.mkdir()
    shutil.copy(EXPERIMENTS / "_common.py", exp / "_common.py")
    (exp / "slow_chunks.py").write_text(SLOW_EXPERIMENT)
    log = tmp_path / "log.txt"
    env = dict(JAXCRAWL_EXPERIMENTS_DIR=str(exp), SLOW_LOG=str(log), MPLBACKEND="Agg")
    out = tmp_path / "out"
    proc = _start(["reproduce", "slow_chunks", "--quick", "--out", str(out)], tmp_path, **env)
    _wait_for(lambda: log.exists() and "start 1" in log.read_text(), proc)  # chunk 0 done, chunk 1 computing
    text, err = _signal_and_check(proc, sig, tmp_path, [])
    if sig != signal.SIGKILL:
        assert "run the same command again to resume" in text
    assert not (out / "slow_chunks.json").exists()
    for d in (out / ".checkpoints" / "slow_chunks", out):
        if d.exists():
            assert [p for p in d.iterdir() if p.name.startswith(".tmp_")] == [] or sig == signal.SIGKILL
    done_before = log.read_text().count("done")
    assert done_before >= 1

    rerun = subprocess.run([sys.executable, "-m", "jaxcrawl.cli", "reproduce", "slow_chunks", "--quick",
                            "--out", str(out)], cwd=tmp_path, env=_env(**env), capture_output=True, text=True,
                           timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    record = json.loads((out / "slow_chunks.json").read_text())
    assert record["checkpoints"]["reused"] == done_before
    assert record["checkpoints"]["reused"] + record["checkpoints"]["computed"] == 4

    fresh = tmp_path / "fresh"
    full = subprocess.run([sys.executable, "-m", "jaxcrawl.cli", "reproduce", "slow_chunks", "--quick",
                           "--out", str(fresh)], cwd=tmp_path, env=_env(**env), capture_output=True, text=True,
                          timeout=300)
    assert full.returncode == 0, full.stderr[-3000:]
    assert json.loads((fresh / "slow_chunks.json").read_text())["results"] == record["results"]


@pytest.mark.long
def test_an_ignored_sigint_stays_ignored(tmp_path, monkeypatch):
    """nohup / a background job of a non-interactive shell: SIGINT is SIG_IGN and the command
    must not start honouring it (Python's own rule for SIGINT)."""
    from jaxcrawl.io import _formats as formats

    real = formats.atomic_write

    def write_then_signal(path, write_fn, **kw):
        def fill(tmp):
            write_fn(tmp)
            os.kill(os.getpid(), signal.SIGINT)
        return real(path, fill, **kw)

    monkeypatch.setattr(formats, "atomic_write", write_then_signal)
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        out = tmp_path / "plan.csv"
        code, err = _quiet_main(["solve", "--num-pages", "64", "-q", "-o", str(out)])
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)
    assert code == 0, err
    assert out.read_text().startswith("page_id,rate,prob,periodic_rate\n") and len(out.read_text().splitlines()) == 65
    assert _leftovers(tmp_path) == []
