"""Private internals of jaxcrawl: root-finding, the implicit rule, special functions, checks.

Nothing here is public API; public modules import from ``jaxcrawl._src`` and re-export
what users need.  Modules outside ``_src`` never import each other's underscore names.
"""
