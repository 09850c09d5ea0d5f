"""Test configuration: float32 (what users get by default) unless the x64 lane is on.

* Default lane: float32.  A test that needs float64 precision is marked
  ``@pytest.mark.x64``; it then runs inside ``jax.enable_x64(True)`` (in both lanes).
* x64 lane: ``JAXCRAWL_TEST_X64=1 python -m pytest`` turns float64 on for the whole run
  (``.ci/run`` runs the unit suite in both lanes).
* ``@pytest.mark.reproduce``: paper reproductions, run by ``.ci/run`` as their own step
  (``python -m pytest -m reproduce``); ``@pytest.mark.long``: checks of 5 s or more
  on 2 cores (end-to-end statistics, references at size, the guides' examples), their own float32 step (``python -m pytest -m long``), so that the
  default command stays within 5 minutes on 2 cores; ``@pytest.mark.slow``: full-size checks.
* A test may not change the float width of the rest of the run: one that leaves
  ``jax_enable_x64`` changed (``jax.config.update`` instead of the marker) fails.

Shared helpers (finite differences, tree closeness, compile counts) are in ``helpers.py``,
NumPy reference algorithms in ``reference.py``; import them by module name.
"""
import os

import jax
import pytest

X64_LANE = os.environ.get("JAXCRAWL_TEST_X64", "") not in ("", "0")
if X64_LANE:
    jax.config.update("jax_enable_x64", True)


def pytest_report_header(config):
    lane = "float64 (JAXCRAWL_TEST_X64=1)" if X64_LANE else "float32 (JAXCRAWL_TEST_X64=1 for the float64 lane)"
    return f"jaxcrawl: {lane} lane, jax {jax.__version__}"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    before = jax.config.jax_enable_x64
    try:
        if item.get_closest_marker("x64") is not None:
            with jax.enable_x64(True):
                return (yield)
        return (yield)
    finally:
        after = jax.config.jax_enable_x64
        if after != before:
            jax.config.update("jax_enable_x64", before)
            raise RuntimeError(f"{item.nodeid} left jax_enable_x64={after} (was {before}); "
                               "use @pytest.mark.x64 or jax.enable_x64() as a context manager")
