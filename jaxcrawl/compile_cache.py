"""An opt-in persistent cache of compiled programs: ``jaxcrawl.enable_compile_cache()``.

Nothing runs on import; the command line calls it for every command unless
``--no-compile-cache`` or ``JAXCRAWL_COMPILE_CACHE=0``.  The directory is JAX's own
(``jax_compilation_cache_dir``), keyed by program, JAX/XLA version and device.
"""
from __future__ import annotations

import os
from pathlib import Path

__all__ = ["enable_compile_cache"]

_OFF = ("0", "false", "no")


def compile_cache_dir() -> Path:
    """The default cache directory: ``$JAXCRAWL_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/jaxcrawl/xla``, else ``~/.cache/jaxcrawl/xla``."""
    explicit = os.environ.get("JAXCRAWL_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "jaxcrawl" / "xla"


def enable_compile_cache(path: str | os.PathLike | None = None, *, min_compile_seconds: float = 0.0,
                         override: bool = True) -> Path | None:
    """Turn on JAX's persistent compilation cache for this process; returns its directory.

    Args:
      path: the cache directory (created if missing); ``None``: :func:`compile_cache_dir`.
      min_compile_seconds: cache only programs that took at least this long to compile
        (default 0: every program, so a command's many small programs load from disk too).
      override: replace a cache directory JAX already has configured (default).  With
        ``False`` an existing configuration is left as it is and ``None`` is returned.

    Returns ``None`` (and changes nothing) when ``JAXCRAWL_COMPILE_CACHE=0`` is set, when
    the directory cannot be created, or (``override=False``) when JAX already has a cache
    directory.  A process that compiled programs before this call keeps them in memory;
    only the programs compiled after it are written to and read from the directory.
    """
    import jax

    if os.environ.get("JAXCRAWL_COMPILE_CACHE", "1").lower() in _OFF:
        return None
    if not override and jax.config.jax_compilation_cache_dir:
        return None
    if not (min_compile_seconds >= 0):
        raise ValueError(f"min_compile_seconds must be >= 0; got {min_compile_seconds!r}")
    directory = compile_cache_dir() if path is None else Path(path).expanduser()
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    jax.config.update("jax_compilation_cache_dir", str(directory))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", float(min_compile_seconds))
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return directory
