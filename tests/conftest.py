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


@pytest.fixture
def rng():
    return np.random.default_rng(0)
