"""Shared test set-up: one compile cache per test process (fast, isolated).

GRADJIT_CACHE_DIR is set before gradjit is imported anywhere, so every test of a
process shares compiled code, and nothing touches the user's cache. Under
pytest-xdist each worker gets its own (tests count compiles and disk hits: another
worker's entries would change them); a directory made here is removed at the end.
A GRADJIT_CACHE_DIR you set yourself is used as it is. GRADJIT_TIERING defaults
to ``sync`` here.

The library helpers' machine code (BLAS blocks, LAPACK wrappers: seconds per dtype and
layout) is shared by every worker of a run, and by the processes tests start, through one
GRADJIT_LIBRARY_CACHE_DIR made by the first process (xdist's controller; workers inherit
it): each helper compiles once per run, not once per worker. Tests about where helpers are
stored, or that damage them, unset it.

Memory: a test process compiles thousands of structures, and each one held in memory
costs about 1 MiB (machine code, Numba's IR and type annotations). The suite bounds
what it holds the way a user would (``GRADJIT_CACHE_SIZE`` defaults to 32 entries per
table here) and empties gradjit's in-memory tables after each test module
(``gj.clear_cache()``; the disk cache stays, so a structure met again is loaded). Tests
of the bound itself set their own with ``gj.cache_size``.
"""
import atexit
import os
import shutil
import tempfile

if os.environ.get("GRADJIT_CACHE_DIR") in (None, os.environ.get("GRADJIT_TEST_CACHE_MADE")):
    _MADE = tempfile.mkdtemp(prefix="gradjit-test-cache-")
    os.environ["GRADJIT_CACHE_DIR"] = os.environ["GRADJIT_TEST_CACHE_MADE"] = _MADE
    # (also when the session never finishes: a usage error, an interrupted run)
    atexit.register(shutil.rmtree, _MADE, True)
else:
    _MADE = None
if os.environ.get("GRADJIT_LIBRARY_CACHE_DIR") is None:
    _LIB_MADE = tempfile.mkdtemp(prefix="gradjit-test-library-")
    os.environ["GRADJIT_LIBRARY_CACHE_DIR"] = _LIB_MADE
    atexit.register(shutil.rmtree, _LIB_MADE, True)
else:
    _LIB_MADE = None

# New structures compile before their first call returns (the suite counts compiles and
# compares compiled code); tests/runtime/test_tiers.py runs the background tier itself.
os.environ.setdefault("GRADJIT_TIERING", "sync")
os.environ.setdefault("GRADJIT_CACHE_SIZE", "32")

import numpy as np  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def _release_compiled_code():
    """Each test module's compiled code leaves memory when the module is done."""
    yield
    import gradjit as gj
    gj.clear_cache()


@pytest.fixture(scope="session", autouse=True)
def _library_helpers_in_the_test_cache():
    """Tests that call the library helpers directly (lowering/fastmath_cpu.py ...) before
    any generated module would otherwise compile them into Numba's own cache in the
    package's ``__pycache__``: they get gradjit's, in the test cache, from the start."""
    from gradjit.lowering import alloc_cpu, blas_cpu, fastmath_cpu, linalg_cpu, special_cpu  # noqa: F401
    from gradjit.runtime import numba_cache
    numba_cache.adopt_library()


@pytest.fixture
def interpreted(monkeypatch):
    """Run graphs with the NumPy reference interpreter (no compilation)."""
    monkeypatch.setenv("GRADJIT_EXECUTOR", "numpy")


@pytest.fixture(params=["numpy", "numba"])
def executor(request, monkeypatch):
    """Each test twice: on the NumPy reference interpreter and on compiled code."""
    if request.param == "numpy":
        monkeypatch.setenv("GRADJIT_EXECUTOR", "numpy")
    else:
        monkeypatch.delenv("GRADJIT_EXECUTOR", raising=False)
    return request.param


@pytest.fixture
def rng():
    return np.random.default_rng(0)


@pytest.fixture
def fresh_tape():
    """This thread's recording tape started over before and after the test (nothing an
    earlier test recorded or replays carries over)."""
    from gradjit.tracer import tape
    tape.take([])
    yield
    tape.take([])


class FastSteps:
    """``[0]``: backward calls the fast path (runtime/fast_backward.py) took since made."""

    def __init__(self):
        from gradjit.runtime.compiler import STATS
        self.stats, self.start = STATS, STATS["fast_steps"]

    def __getitem__(self, i):
        assert i == 0
        return self.stats["fast_steps"] - self.start


@pytest.fixture
def fast():
    """Counts backward calls the fast path (runtime/fast_backward.py) completed: through
    ``fast_backward`` or a replayed step's written-out backward (``Tensor.backward``)."""
    return FastSteps()


def pytest_sessionfinish(session, exitstatus):
    if _MADE is not None and os.environ.get("GRADJIT_CACHE_DIR") == _MADE:
        shutil.rmtree(_MADE, ignore_errors=True)
    if _LIB_MADE is not None and os.environ.get("GRADJIT_LIBRARY_CACHE_DIR") == _LIB_MADE:
        shutil.rmtree(_LIB_MADE, ignore_errors=True)


def pytest_terminal_summary(terminalreporter):
    """One line for the tests skipped because an optional oracle or extra is missing (torch,
    jax, numba-cuda, dask ...), so such skips are never silent."""
    missing = {}
    for rep in terminalreporter.stats.get("skipped", []):
        reason = str(rep.longrepr[-1]) if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
        if "could not import" in reason:
            name = reason.split("could not import", 1)[1].strip().split()[0].strip("'\":")
            missing[name] = missing.get(name, 0) + 1
    if missing:
        parts = ", ".join(f"{n} ({k} skips)" for n, k in sorted(missing.items()))
        terminalreporter.write_line(f"optional test oracles or extras not installed (tests or "
                                    f"modules skipped): {parts}")
