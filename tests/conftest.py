"""Test configuration: float32 (what users get by default) unless the x64 lane is on.

* Default lane: float32.  A test that needs float64 precision is marked
  ``@pytest.mark.x64``; it then runs inside ``jax.enable_x64(True)`` (in both lanes).
* x64 lane: ``JAXCRAWL_TEST_X64=1 python -m pytest`` turns float64 on for the whole run
  (``.ci/run`` runs the unit suite in both lanes).
* ``@pytest.mark.reproduce``: paper reproductions, run by ``.ci/run`` as their own step
  (``python -m pytest -m reproduce``); ``@pytest.mark.slow``: full-size checks.
"""
import os

import jax
import pytest

X64_LANE = os.environ.get("JAXCRAWL_TEST_X64", "") not in ("", "0")
if X64_LANE:
    jax.config.update("jax_enable_x64", True)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    if item.get_closest_marker("x64") is not None:
        with jax.enable_x64(True):
            return (yield)
    return (yield)
