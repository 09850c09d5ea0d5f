"""The per-stage times of a command: they add up to the wall time, and a log gets one line per stage."""
import io
import time

from jaxcrawl.cli._stages import Stages


class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_stage_times_add_up_to_the_total():
    s = Stages("solve", stream=io.StringIO())
    with s.stage("read"):
        time.sleep(0.01)
    with s.stage("write"):
        pass
    with s.stage("read"):
        pass
    sec = s.seconds()
    assert set(sec) == {"read", "write", "other", "total"}
    assert sec["read"] >= 0.01
    assert abs(sec["read"] + sec["write"] + sec["other"] - sec["total"]) < 1e-3


def test_one_line_per_stage_in_a_log_none_on_a_terminal_or_quiet():
    log = io.StringIO()
    s = Stages("schedule", stream=log)
    with s.stage("read plan"):
        pass
    with s.stage("timetable"):
        pass
    lines = log.getvalue().splitlines()
    assert [ln.rsplit(" ", 2)[0] for ln in lines] == ["jaxcrawl schedule: read plan", "jaxcrawl schedule: timetable"]
    assert all(ln.endswith(" s") for ln in lines)
    tty = _Tty()
    with Stages("solve", stream=tty).stage("read"):
        pass
    quiet = io.StringIO()
    with Stages("solve", stream=quiet, quiet=True).stage("read"):
        pass
    assert tty.getvalue() == "" and quiet.getvalue() == ""
