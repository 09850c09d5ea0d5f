"""Check that the built API reference documents every public name of jaxcrawl.

Usage: python .ci/check_api_docs.py SITE_DIR (after ``mkdocs build``).  A public name is one
listed in a public module's ``__all__`` (or, without ``__all__``, a non-underscore name
defined in it); it is documented when the site has an anchor for it, either in its own
module or, for a re-export, in the module that defines it.  Exits 1 listing the missing ones.
"""
import importlib
import pkgutil
import re
import sys
import types
from pathlib import Path


def main(site: str) -> int:
    ids = set()
    for page in Path(site).rglob("*.html"):
        ids |= set(re.findall(r'id="(jaxcrawl[\w.]*)"', page.read_text(encoding="utf-8")))
    import jaxcrawl

    modules = ["jaxcrawl"] + [m.name for m in pkgutil.walk_packages(jaxcrawl.__path__, "jaxcrawl.")
                              if not any(part.startswith("_") for part in m.name.split("."))]
    exposed = []  # (module, name, object) for every public name of every public module
    for name in modules:
        mod = importlib.import_module(name)
        public = getattr(mod, "__all__", None)
        if public is None:
            public = [n for n, v in vars(mod).items() if not n.startswith("_")
                      and getattr(v, "__module__", None) == name]
        exposed += [(name, n, getattr(mod, n)) for n in public
                    if not isinstance(getattr(mod, n), types.ModuleType)]
    # an object is documented if any module exposing it (or the module defining it) has an anchor
    documented = set()
    for name, n, v in exposed:
        home = f"{getattr(v, '__module__', '')}.{getattr(v, '__qualname__', n)}"
        if f"{name}.{n}" in ids or home in ids:
            documented.add(id(v))
    missing = [f"{name}.{n}" for name, n, v in exposed if id(v) not in documented]
    print(f"API reference: {len(ids)} anchors, {len(modules)} public modules, {len(missing)} public names missing")
    for m in missing:
        print("  missing:", m)
    return 1 if missing else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1] if len(sys.argv) > 1 else "site"))
