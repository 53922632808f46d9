"""Shared test set-up: one compile cache per test session (fast, isolated).

GRADJIT_CACHE_DIR is set before gradjit is imported anywhere, so every test in
the session shares compiled code, and nothing touches the user's cache.
"""
import os
import tempfile

os.environ.setdefault("GRADJIT_CACHE_DIR", tempfile.mkdtemp(prefix="gradjit-test-cache-"))

import numpy as np  # noqa: E402
import pytest  # noqa: E402


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
