"""Every self-contained Python example of the guides runs as written (a block whose first
line is an import), each in a fresh namespace and an empty working directory."""
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GUIDES = ("concepts.md", "objectives.md", "solvers.md", "differentiation.md", "research.md", "scale.md", "scrapy.md")


def _examples():
    out = []
    for name in GUIDES:
        text = open(os.path.join(ROOT, "docs", name), encoding="utf-8").read()
        for i, block in enumerate(re.findall(r"```python\n(.*?)```", text, flags=re.S)):
            if block.lstrip().startswith(("import ", "from ")):
                out.append(pytest.param(block, id=f"{name}[{i}]"))
    return out


@pytest.mark.long
@pytest.mark.parametrize("code", _examples())
def test_guide_example_runs(code, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "example", "exec"), {"__name__": "__example__"})


def test_every_guide_has_a_runnable_example():
    ids = {p.id.split("[")[0] for p in _examples()}
    assert ids == set(GUIDES)
