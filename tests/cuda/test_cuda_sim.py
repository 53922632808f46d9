"""Run the CUDA simulator suite (``tests/cuda/sim``) in a subprocess.

``NUMBA_ENABLE_CUDASIM=1`` must be set before Numba is imported, which this
process already did, so the simulator tests run in a child pytest. Skipped
when numba-cuda is not installed (the CPU-only install).
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

try:
    import numba_cuda  # noqa: F401
    HAVE = True
except ImportError:
    HAVE = False

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.skipif(not HAVE, reason="numba-cuda is not installed (pip install 'gradjit[cuda]')")
def test_simulator_suite_passes(tmp_path):
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", GRADJIT_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           os.path.join(ROOT, "tests", "cuda", "sim")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500)
    tail = proc.stdout[-6000:] + proc.stderr[-2000:]
    assert proc.returncode == 0, tail
    assert " passed" in proc.stdout and "failed" not in proc.stdout, tail
