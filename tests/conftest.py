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


def _map_limit() -> int:
    try:
        with open("/proc/sys/vm/max_map_count") as fh:
            return int(fh.read())
    except (OSError, ValueError):
        return 0


def _mappings() -> int:
    try:
        with open("/proc/self/maps", "rb") as fh:
            return fh.read().count(b"\n")
    except OSError:
        return 0


#: The kernel's limit on a process's memory mappings, and the count at which a test worker
#: drops its compiled executables (half the limit; after a clearing, half-way from what is
#: left to the limit).
MAP_LIMIT = _map_limit()
_map_budget = [MAP_LIMIT // 2]


def pytest_runtest_teardown(item, nextitem):
    """XLA's CPU backend maps a few regions of memory for every executable it compiles, and
    JAX's caches keep them all; a worker that runs a few hundred compiling tests reaches the
    kernel's ``vm.max_map_count`` (65,530), where the next compile fails in LLVM ("Cannot
    allocate memory") and XLA then crashes the process with a segmentation fault.  Past the
    budget, the caches are cleared (later tests compile again; nothing else changes)."""
    if MAP_LIMIT and _mappings() > _map_budget[0]:
        import gc

        jax.clear_caches()
        gc.collect()
        _map_budget[0] = max(_map_budget[0], (_mappings() + MAP_LIMIT) // 2)


@pytest.fixture
def fresh_sigint():
    """SIGINT as a fresh interpreter has it (Python's ``default_int_handler``, reinstalled at
    the OS level), and no signal state left in :mod:`jaxcrawl._src.interrupts`, for the tests
    that send SIGINT to this process.  Another test of the same worker may leave SIGINT
    ignored or taken over by native code; the fixture warns when it finds that, so the
    report shows it, and restores what it found afterwards."""
    import gc
    import signal
    import warnings

    from jaxcrawl._src import interrupts

    # hypothesis times garbage collections by a gc callback that runs Python code; a SIGINT
    # handled inside it was seen lost (an unraisable KeyboardInterrupt in that callback) in
    # workers that had run a hypothesis test, so these tests run without it
    callbacks = list(gc.callbacks)
    gc.callbacks[:] = [cb for cb in callbacks if not getattr(cb, "__module__", "").startswith("hypothesis")]

    found = signal.getsignal(signal.SIGINT)
    if found is not signal.default_int_handler:
        warnings.warn(f"SIGINT was {found!r} before this test, not Python's default handler", stacklevel=1)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    state = (list(interrupts._received), list(interrupts._raised), interrupts._armed)
    if any(state):
        warnings.warn(f"jaxcrawl's signal state (received, raised, armed) was left as {state!r}", stacklevel=1)
    del interrupts._received[:], interrupts._raised[:]
    interrupts._closing = interrupts._armed = False
    try:
        yield
    finally:
        gc.callbacks[:] = callbacks
        if found is not None:
            signal.signal(signal.SIGINT, found)


@pytest.fixture(autouse=True)
def _sigint_handled_by_python():
    """Each test starts with SIGINT handled by Python at the OS level, as in a fresh
    interpreter, so that a child process does not inherit an ignored SIGINT: some test of
    a worker was seen to leave SIGINT ignored (the signal tests then failed for SIGINT
    only).  A warning names it when that is found."""
    import signal
    import warnings

    current = signal.getsignal(signal.SIGINT)
    if current is signal.SIG_IGN or current is None:
        warnings.warn(f"SIGINT was {current!r} when this test started; reset to Python's handler", stacklevel=1)
        signal.signal(signal.SIGINT, signal.default_int_handler)
    elif current is signal.default_int_handler:
        signal.signal(signal.SIGINT, signal.default_int_handler)  # the OS-level handler too
    yield
