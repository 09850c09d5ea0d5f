"""The package's shape: no import cycles, no private names across modules, a small public
surface that the API reference lists in full, and code that speaks of the product only."""
from __future__ import annotations

import ast
import importlib
import pkgutil
import re
import subprocess
import sys
import types
from pathlib import Path

import jaxcrawl

ROOT = Path(jaxcrawl.__file__).resolve().parent
REPO = ROOT.parent
MAX_PUBLIC = 216


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]):
    """``(target module, imported name or None)`` of every import in the file, at any depth."""
    is_pkg = path.name == "__init__.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, None
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_pkg else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module
            for a in node.names:
                sub = f"{target}.{a.name}"
                yield (sub, None) if sub in modules else (target, a.name)


def _owner(target: str, modules) -> str | None:
    while target and target not in modules:
        target = target.rpartition(".")[0]
    return target or None


def test_no_import_cycles():
    """Module-level and function-level imports both count (a package's ``__init__`` is its own
    node; ``import a.b`` depends on ``a.b``)."""
    modules = _modules()
    graph = {m: set() for m in modules}
    for m, path in modules.items():
        for target, _ in _imports(m, path, modules):
            if target.startswith("jaxcrawl"):
                owner = _owner(target, modules)
                if owner and owner != m:
                    graph[m].add(owner)
    # Tarjan's strongly connected components
    index, low, stack, on, cycles, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    sys.setrecursionlimit(10_000)
    for v in graph:
        if v not in index:
            visit(v)
    assert cycles == []


def test_private_names_stay_home():
    """No module imports an underscore name from another package's module, except from
    ``jaxcrawl._src``; ``_src`` imports nothing public."""
    modules = _modules()
    bad = []
    for m, path in modules.items():
        for target, name in _imports(m, path, modules):
            if not target.startswith("jaxcrawl"):
                continue
            if target.startswith("jaxcrawl._src"):
                continue
            if m.startswith("jaxcrawl._src"):
                bad.append(f"{m} imports public {target}")
            elif name and name.startswith("_") and not name.startswith("__"):
                bad.append(f"{m} imports {target}.{name}")
            elif any(p.startswith("_") for p in target.split(".")[1:]) and \
                    _package(_owner(target, modules) or target, modules).rpartition(".")[0] != _package(m, modules) \
                    and _package(_owner(target, modules) or target, modules) != _package(m, modules):
                bad.append(f"{m} imports private module {target}")
    assert bad == []


def _package(name: str, modules) -> str:
    path = modules.get(name)
    return name if path is not None and path.name == "__init__.py" else name.rpartition(".")[0]


def public_names() -> dict[str, object]:
    """``{qualified name: object}`` of everything reachable from ``jaxcrawl`` and the
    ``__all__`` of its public modules (modules themselves excluded)."""
    names = {}
    mods = [jaxcrawl] + [importlib.import_module(m.name) for m in pkgutil.walk_packages(jaxcrawl.__path__, "jaxcrawl.")
                         if not any(p.startswith("_") for p in m.name.split(".")[1:])]
    for mod in mods:
        listed = getattr(mod, "__all__", None)
        if listed is None:
            listed = [n for n in vars(mod) if not n.startswith("_")] if mod is jaxcrawl else []
        for n in listed:
            obj = getattr(mod, n)
            if not isinstance(obj, types.ModuleType):
                names[f"{mod.__name__}.{n}"] = obj
    return names


def test_public_surface_is_small_and_unshadowed():
    names = public_names()
    distinct = {id(v) for v in names.values()}
    assert len(distinct) <= MAX_PUBLIC, f"{len(distinct)} public names"
    # no public attribute of a package is something other than the module of the same name
    for m in pkgutil.walk_packages(jaxcrawl.__path__, "jaxcrawl."):
        parent, _, leaf = m.name.rpartition(".")
        owner = importlib.import_module(parent)
        if hasattr(owner, leaf):
            assert isinstance(getattr(owner, leaf), types.ModuleType), f"{parent}.{leaf} shadows its module"


def test_import_installs_no_signal_handler():
    code = ("import signal; before = signal.getsignal(signal.SIGINT); import jaxcrawl; "
            "assert signal.getsignal(signal.SIGINT) is before")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def _api_blocks() -> list[tuple[str, set | None]]:
    """``(module, members or None for all of its __all__)`` of every ``::: module`` of docs/api."""
    blocks = []
    for page in (REPO / "docs" / "api").glob("*.md"):
        lines = page.read_text(encoding="utf-8").splitlines()
        for i, line in enumerate(lines):
            found = re.match(r"^::: (jaxcrawl[\w.]*)\s*$", line)
            if not found:
                continue
            members = None
            for nxt in lines[i + 1:i + 8]:
                if nxt.startswith(":::"):
                    break
                listed = re.search(r"members:\s*\[(.*)\]", nxt)
                if listed:
                    members = {x.strip() for x in listed.group(1).split(",")}
                    break
            blocks.append((found.group(1), members))
    return blocks


def test_api_reference_lists_every_public_name():
    """Each public name is rendered on an API page: its module is rendered whole
    (``::: module``) or the name is in the ``members`` of its module's block."""
    blocks = _api_blocks()
    names = public_names()
    shown = {id(obj) for q, obj in names.items()
             if any(b == q.rpartition(".")[0] and (m is None or q.rpartition(".")[2] in m) for b, m in blocks)}
    assert sorted(q for q, obj in names.items() if id(obj) not in shown) == []


# the pattern is assembled from pieces so that this file does not match it
HISTORY = re.compile("|".join(["st" + "op [0-9]", "is" + "sue [0-9]", r"\(lo" + "ad", "lo" + "ad [0-9~≈]"]), re.I)


def test_the_product_speaks_of_itself():
    """No development steps, issue numbers or machine loads in the package, the guides, the
    README or the tests."""
    files = [*ROOT.rglob("*.py"), *(REPO / "docs").rglob("*.md"), REPO / "README.md", *(REPO / "tests").rglob("*.py")]
    hits = [f"{f.relative_to(REPO)}:{i}" for f in files if f.exists()
            for i, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1)
            if HISTORY.search(line)]
    assert hits == []


def _doc_and_code_lines(path: Path) -> tuple[int, int]:
    src = path.read_text(encoding="utf-8")
    doc = set()
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                doc.update(range(first.lineno, first.end_lineno + 1))
    lines = src.splitlines()
    comments = {i for i, line in enumerate(lines, 1) if line.strip().startswith("#")}
    code = {i for i, line in enumerate(lines, 1) if line.strip() and i not in doc and i not in comments}
    return len(doc | comments), len(code)


def test_no_module_has_more_docstring_than_code():
    heavy = []
    for path in ROOT.rglob("*.py"):
        doc, code = _doc_and_code_lines(path)
        if doc > code:
            heavy.append(f"{path.relative_to(REPO)}: {doc} docstring/comment lines, {code} code lines")
    assert heavy == []
