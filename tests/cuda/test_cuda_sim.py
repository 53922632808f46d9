"""Run the CUDA simulator suite (``tests/cuda/sim``) in subprocesses (two shards at once).

``NUMBA_ENABLE_CUDASIM=1`` must be set before Numba is imported, which this
process already did, so the simulator tests run in a child pytest. Skipped
when numba-cuda is not installed (the CPU-only install).
"""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow   # (pyproject.toml: the default run skips it; CI runs it)

try:
    import numba_cuda  # noqa: F401
    HAVE = True
except ImportError:
    HAVE = False

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


SHARDS = 2   # the simulator is single-threaded Python: one child per core halves the wait


@pytest.mark.skipif(not HAVE, reason="numba-cuda is not installed (pip install 'gradjit[cuda]')")
def test_simulator_suite_passes(tmp_path):
    suite = os.path.join(ROOT, "tests", "cuda", "sim")
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    listed = subprocess.run(cmd + ["--collect-only", suite], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=600)
    ids = [ln.strip() for ln in listed.stdout.splitlines() if "::" in ln]
    assert listed.returncode == 0 and ids, listed.stdout[-3000:] + listed.stderr[-2000:]
    procs = [subprocess.Popen(cmd + ids[k::SHARDS], cwd=ROOT, text=True,
                              env=dict(env, GRADJIT_CACHE_DIR=str(tmp_path / f"cache{k}")),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for k in range(SHARDS)]
    ran = 0
    for proc in procs:
        out, err = proc.communicate(timeout=1500)
        tail = out[-6000:] + err[-2000:]
        assert proc.returncode == 0, tail
        assert " passed" in out and "failed" not in out, tail
        counts = re.findall(r"(\d+) (passed|skipped|xfailed)", out.strip().splitlines()[-1])
        ran += sum(int(n) for n, _ in counts)
    assert ran == len(ids)   # every collected test ran in one shard
