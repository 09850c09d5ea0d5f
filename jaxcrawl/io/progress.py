"""Progress bars for long reads, solves and writes (tqdm on stderr).

A bar appears only when the step takes more than a second, on a terminal, and not with
``--quiet``: piped or logged runs stay silent (their last line is the JSON summary).
"""
from __future__ import annotations

import sys
from typing import Any

__all__ = ["progress_bar"]


def progress_bar(total: int | None, desc: str, *, quiet: bool = False, unit: str = "rows",
                 force: bool = False) -> Any:
    """A ``tqdm`` bar on stderr, disabled when ``quiet`` or (unless ``force``) stderr is not
    a terminal, shown only after one second (``update(k)`` advances it; use it as a
    context manager)."""
    from tqdm.auto import tqdm

    disable = quiet or not (force or (hasattr(sys.stderr, "isatty") and sys.stderr.isatty()))
    return tqdm(total=total, desc=desc, unit=unit, unit_scale=True, disable=disable, delay=0.0 if force else 1.0,
                leave=False, file=sys.stderr)
