"""Every `jaxcrawl` command in docs/cli.md and docs/io.md that uses the shipped example files
runs as written (from a copy of the checkout's examples/), and the README's Python quick
start prints what it says."""
import os
import re
import shlex
import shutil

import pytest

from jaxcrawl.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _documented_commands():
    cmds = []
    for name in ("docs/cli.md", "docs/io.md", "docs/schedule.md"):
        text = open(os.path.join(ROOT, name)).read()
        for block in re.findall(r"```(?:bash)?\n(.*?)```", text, flags=re.S):
            joined = re.sub(r"\\\n\s*", " ", block)
            for line in joined.splitlines():
                line = line.split("#")[0].strip()
                if line.startswith("jaxcrawl ") and ("examples/" in line or "plan.parquet" in line
                                                     or "pages.csv" in line):
                    cmds.append((name, line))
    return cmds


_OUTPUT_FLAGS = ("-o", "--output", "--urlfrontier", "--nutch", "--figure", "--out")


def test_documented_commands_leave_no_untracked_file_in_the_checkout():
    """What a documented command writes, run from the checkout as written, is a root-level
    file the checkout's .gitignore names (the tests run them in a temporary directory)."""
    ignored = set()
    for line in open(os.path.join(ROOT, ".gitignore")).read().splitlines():
        if line.startswith("/") and "*" not in line:
            ignored.add(line[1:])
    outputs = set()
    for _, line in _documented_commands():
        args = shlex.split(line)
        outputs.update(args[i + 1] for i, a in enumerate(args[:-1]) if a in _OUTPUT_FLAGS)
    assert outputs and outputs <= ignored, sorted(outputs - ignored)


@pytest.mark.long
def test_documented_commands_run_on_the_example_files(tmp_path, monkeypatch, capsys):
    shutil.copytree(os.path.join(ROOT, "examples"), tmp_path / "examples")
    monkeypatch.chdir(tmp_path)
    cmds = _documented_commands()
    assert len(cmds) >= 8
    # the io.md path first (its files feed the schedule examples), then the rest in order
    cmds.sort(key=lambda c: c[0] != "docs/io.md")
    for where, line in cmds:
        args = shlex.split(line)[1:]
        status = main(args + (["--quiet"] if args[0] in ("solve", "schedule", "estimate") else []))
        out = capsys.readouterr()
        assert status == 0, f"{where}: {line}\n{out.err}"


@pytest.mark.long
def test_readme_python_quick_start_prints_a_checkable_gradient(capsys):
    text = open(os.path.join(ROOT, "README.md")).read()
    code = re.search(r"## In Python\n\n```python\n(.*?)```", text, flags=re.S).group(1)
    exec(compile(code, "README.md", "exec"), {})
    last = capsys.readouterr().out.strip().splitlines()[-1].split()
    grad, expected = float(last[0]), float(last[1])
    assert grad == pytest.approx(expected, rel=1e-3) and grad == pytest.approx(-0.00116, rel=0.05)
