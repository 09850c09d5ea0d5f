"""``jaxcrawl reproduce``: regenerate the papers' figures and check their claims.

``jaxcrawl reproduce NAME [NAME ...]|all [--quick] [--out DIR] [--seed S] [--data DIR] [--fresh]``
runs the experiments of the package :mod:`jaxcrawl.experiments` (one module per paper figure;
``jaxcrawl reproduce --list`` lists them).  For each it writes

* ``DIR/NAME.json`` -- the numbers, the parameters, the seed, the jaxcrawl and JAX
  versions, the time taken, ``claims`` (claim name -> true/false: does the paper's finding
  hold on our numbers) and ``claim_details`` (each claim's description, tolerance, the
  paper's statement, the expected outcome and the numbers behind it);
* ``DIR/NAME.png`` -- the figure;

prints whether each claim holds, and ends by printing one JSON object (the summary of
all claims) as its last line.  The exit status is 0 when every claim has its expected
outcome, 1 when one does not (or an experiment raised), 130 when interrupted.

Finished chunks of work are stored under ``DIR/.checkpoints/NAME/`` (a
:class:`jaxcrawl.io.CheckpointStore`, every file written atomically); running the same
command again after an interruption resumes where it stopped (``--fresh`` ignores them).
The environment variable ``JAXCRAWL_EXPERIMENTS_DIR`` names a folder of further experiment
scripts (``NAME.py``, same contract as the shipped modules), listed and run beside them.
"""
from __future__ import annotations

import argparse
import datetime
import importlib
import importlib.util
import json
import os
import pkgutil
import platform
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from jaxcrawl._src.fileio import immediate, write_file
from jaxcrawl.io import CheckpointStore

__all__ = ["register", "run"]

_ENV_DIR = "JAXCRAWL_EXPERIMENTS_DIR"
_PACKAGE = "jaxcrawl.experiments"


def _discover() -> dict[str, Path]:
    """``{NAME: source file}``: the modules of :mod:`jaxcrawl.experiments` (not starting with
    ``_``), then the ``*.py`` scripts of ``$JAXCRAWL_EXPERIMENTS_DIR``.  The package is located,
    not imported, so listing needs no matplotlib."""
    found = {info.name: Path(info.module_finder.path) / f"{info.name}.py"
             for info in pkgutil.iter_modules(_package_dirs())
             if not info.name.startswith("_") and not info.ispkg}
    found = dict(sorted(found.items()))
    folder = os.environ.get(_ENV_DIR)
    if folder:
        directory = Path(folder).resolve()
        if not directory.is_dir():
            raise ValueError(f"{_ENV_DIR}={folder}: not a directory (it names a folder of experiment scripts)")
        for path in sorted(directory.glob("*.py")):
            if path.name.startswith("_"):
                continue
            if path.stem in found:
                raise ValueError(f"{path}: experiment {path.stem!r} is already shipped in {_PACKAGE}; rename it")
            found[path.stem] = path
    return found


def _package_dirs() -> list[str]:
    """The folders of :mod:`jaxcrawl.experiments` (located, not imported)."""
    spec = importlib.util.find_spec(_PACKAGE)
    return list(spec.submodule_search_locations or []) if spec is not None else []


def _is_shipped(path: Path) -> bool:
    return any(Path(p).resolve() == path.resolve().parent for p in _package_dirs())


def _description(name: str, path: Path) -> str:
    """An experiment's ``DESCRIPTION`` string, read from its source (not imported)."""
    import ast

    if path.is_file():
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "DESCRIPTION" for t in node.targets):
                try:
                    return str(ast.literal_eval(node.value))
                except ValueError:
                    break
    return str(_load(name, path).DESCRIPTION)


def _load(name: str, path: Path) -> ModuleType:
    """Import an experiment: a module of :mod:`jaxcrawl.experiments`, or a script of
    ``$JAXCRAWL_EXPERIMENTS_DIR`` (its folder goes on ``sys.path`` for its own helpers)."""
    try:
        import matplotlib  # noqa: F401  (function-level: the figures' optional dependency)

        if _is_shipped(path):
            module = importlib.import_module(f"{_PACKAGE}.{name}")
        else:
            path = Path(path).resolve()
            folder = str(path.parent)
            if folder not in sys.path:
                sys.path.insert(0, folder)
            spec = importlib.util.spec_from_file_location(f"jaxcrawl_experiment_{name}", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
    except ModuleNotFoundError as err:
        if err.name and err.name.split(".")[0] == "matplotlib":
            raise ValueError("the reproductions draw figures with matplotlib, which is not installed: "
                             "pip install 'jaxcrawl[plots]' (or '.[plots]' in a checkout)") from None
        raise
    for attr in ("NAME", "DESCRIPTION", "run"):
        if not hasattr(module, attr):
            raise ValueError(f"{path}: an experiment must define {attr} (see jaxcrawl.experiments)")
    if module.NAME != name:
        raise ValueError(f"{path}: NAME is {module.NAME!r} but the file is {path.name} (they must match)")
    return module


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("names", nargs="*", metavar="NAME",
                   help="experiment NAME(s), or 'all' (see --list)")
    p.add_argument("--quick", action="store_true",
                   help="reduced sizes (a few minutes for all; what CI runs) instead of the papers' sizes")
    p.add_argument("--out", default="results", help="output directory (default: ./results)")
    p.add_argument("--seed", type=int, default=0, help="base random seed (default 0)")
    p.add_argument("--data", default=None,
                   help="NeurIPS-19 data set directory (its published file format); used by the "
                        "NeurIPS-19 figures instead of the synthetic generator")
    p.add_argument("--fresh", action="store_true", help="ignore stored checkpoints and recompute everything")
    p.add_argument("--list", action="store_true", help="list the experiments and exit")
    p.add_argument("--no-progress", action="store_true", help="no progress bars on stderr")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``reproduce`` subcommand to an ``argparse`` subparsers object."""
    p = subparsers.add_parser(
        "reproduce",
        help="regenerate the papers' figures and check their claims",
        description=(
            "Run the paper reproductions shipped in jaxcrawl.experiments: "
            "`jaxcrawl reproduce NAME` or `jaxcrawl reproduce all`. Writes OUT/NAME.json (numbers, "
            "parameters, seed, version, time, claims) and OUT/NAME.png, prints whether each claim "
            "holds, and ends with one JSON summary line. Exit status 1 if a claim does not have its "
            "expected outcome. Interrupted runs resume from OUT/.checkpoints."
        ),
    )
    _add_arguments(p)
    p.set_defaults(func=run)


def _versions() -> dict[str, Any]:
    import jax

    import jaxcrawl

    return dict(jaxcrawl=getattr(jaxcrawl, "__version__", "unknown"), jax=jax.__version__,
                python=platform.python_version(), machine=platform.machine(),
                processor=platform.processor() or platform.machine(), cpu_count=os.cpu_count())


def _print_claims(name: str, claims: Sequence[Any], stream: Any) -> None:
    for c in claims:
        status = "PASS" if c.passed else "FAIL"
        tag = "holds" if c.holds else "does NOT hold"
        extra = ""
        if not c.expected:
            extra = " [paper finding not reproduced here, as documented]"
        stream.write(f"  {status}  {name}/{c.name}: {tag}{extra}\n        {c.description} "
                     f"(tolerance: {c.tolerance})\n")
        if c.note and (not c.holds or not c.passed):
            stream.write(f"        note: {c.note}\n")


def _run_one(module: ModuleType, args: argparse.Namespace) -> dict[str, Any]:
    """Run one experiment module; write NAME.json (atomically) and check NAME.png; return the
    record."""
    # function-level: jaxcrawl.experiments imports matplotlib (an optional dependency)
    from jaxcrawl.experiments import Context, to_jsonable

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ctx = Context(module.NAME, quick=args.quick, seed=args.seed, out=out, data=args.data,
                          source_file=getattr(module, "__file__", None), fresh=args.fresh,
                          progress=not args.no_progress)
    if ctx.figure_path.exists():
        ctx.figure_path.unlink()
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    store: CheckpointStore = ctx.store
    result = module.run(ctx)
    seconds = time.perf_counter() - t0
    if not isinstance(result, dict) or "claims" not in result:
        raise ValueError(f"{module.NAME}.run must return a dict with 'claims'")
    claims = list(result["claims"])
    names = [c.name for c in claims]
    if len(set(names)) != len(names):
        raise ValueError(f"{module.NAME}: duplicate claim names {names}")
    if not ctx.figure_path.is_file():
        raise ValueError(f"{module.NAME}.run did not write its figure {ctx.figure_path} (use ctx.savefig)")
    record = dict(
        experiment=module.NAME,
        description=module.DESCRIPTION,
        quick=bool(args.quick),
        seed=int(args.seed),
        data=args.data,
        versions=_versions(),
        started=started,
        seconds=round(seconds, 3),
        checkpoints=dict(reused=store.reused, computed=store.computed, directory=str(store.directory)),
        params=result.get("params", {}),
        results=result.get("results", {}),
        claims={c.name: bool(c.holds) for c in claims},
        claim_details={c.name: c.as_dict() for c in claims},
        passed=all(c.passed for c in claims),
        paper_findings_not_reproduced=[c.name for c in claims if not c.holds],
        notes=result.get("notes", []),
        figure=ctx.figure_path.name,
    )
    payload = json.dumps(to_jsonable(record), indent=1, allow_nan=False) + "\n"
    write_file(out / f"{module.NAME}.json", lambda fh: fh.write(payload))  # atomic, normal permissions
    record["_claims"] = claims
    return record


def run(args: argparse.Namespace) -> int:
    """Run the ``reproduce`` subcommand (``args`` from :func:`register`'s parser)."""
    available = _discover()
    if args.list:  # read each script's DESCRIPTION without importing it (no matplotlib needed)
        for name, path in available.items():
            print(f"{name:28s} {_description(name, path)}")
        return 0
    requested = list(args.names)
    if not requested:
        raise ValueError("give an experiment NAME or 'all' (see `jaxcrawl reproduce --list`)")
    if args.data is not None and not Path(args.data).is_dir():
        raise ValueError(f"--data {args.data}: not a directory")
    if "all" in requested:
        names = list(available)
        if not names:
            raise ValueError(f"no experiments found in {_PACKAGE}")
    else:
        unknown = [n for n in requested if n not in available]
        if unknown:
            raise ValueError(f"unknown experiment {unknown[0]!r}; available: {', '.join(available) or 'none'}")
        names = list(dict.fromkeys(requested))

    out = sys.stdout
    summary = dict(reproduce=names, quick=bool(args.quick), seed=int(args.seed), out=str(args.out),
                   data=args.data, experiments={}, claims={}, failed=[], errors={}, not_reproduced=[])
    t_all = time.perf_counter()
    try:
        for name in names:
            module = _load(name, available[name])
            size = "quick" if args.quick else "full size"
            out.write(f"== {name} ({size}): {module.DESCRIPTION}\n")
            out.flush()
            try:
                with immediate():  # an experiment's outputs are kept when a later one fails or is interrupted
                    record = _run_one(module, args)
            except KeyboardInterrupt:
                raise
            except Exception as err:  # one broken experiment must not hide the others' results
                if len(names) == 1:
                    raise
                traceback.print_exc()
                summary["errors"][name] = f"{type(err).__name__}: {err}"
                out.write(f"  ERROR {name}: {type(err).__name__}: {err}\n")
                continue
            _print_claims(name, record["_claims"], out)
            out.write(f"  -> {Path(args.out) / (name + '.json')}, {Path(args.out) / (name + '.png')} "
                      f"({record['seconds']:.1f} s; checkpoints reused {record['checkpoints']['reused']}, "
                      f"computed {record['checkpoints']['computed']})\n")
            out.flush()
            summary["experiments"][name] = dict(passed=record["passed"], seconds=record["seconds"],
                                                claims=record["claims"])
            for c in record["_claims"]:
                summary["claims"][f"{name}/{c.name}"] = bool(c.holds)
                if not c.passed:
                    summary["failed"].append(f"{name}/{c.name}")
                if not c.holds:
                    summary["not_reproduced"].append(f"{name}/{c.name}")
    except KeyboardInterrupt:
        out.write(f"\ninterrupted: finished chunks are stored in {Path(args.out) / '.checkpoints'}; "
                  "run the same command again to resume\n")
        out.flush()
        return 130
    summary["seconds"] = round(time.perf_counter() - t_all, 3)
    summary["passed"] = not summary["failed"] and not summary["errors"]
    n_claims = len(summary["claims"])
    out.write(f"{n_claims - len(summary['failed'])}/{n_claims} claims have their expected outcome"
              + (f"; failed: {', '.join(summary['failed'])}" if summary["failed"] else "")
              + (f"; errors in: {', '.join(summary['errors'])}" if summary["errors"] else "") + "\n")
    out.write(json.dumps(summary) + "\n")
    out.flush()
    return 0 if summary["passed"] else 1

