"""CUDA kernels' scalar constants hold their values (lowering/consts.py): a Python int out
of the operand's range is not wrapped into it, integers beyond 2**53 are not rounded.
Runs under the simulator subprocess of tests/cuda/test_cuda_sim.py (or on a GPU)."""
from __future__ import annotations

import os

import numpy as np
import pytest

ON_DEVICE = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" or os.environ.get("GRADJIT_TEST_GPU") == "1"
pytestmark = pytest.mark.skipif(not ON_DEVICE, reason="runs in the simulator subprocess of "
                                "test_cuda_sim.py, or on a GPU with GRADJIT_TEST_GPU=1")

U8 = np.array([1, 2, 3], np.uint8)
I32 = np.array([1, -2, 3], np.int32)
U64 = np.array([1, 2, 3], np.uint64)
CASES = [(lambda a: a > -1, U8), (lambda a: np.clip(a, -3, 3), U8), (lambda a: a > 2**40, I32),
         (lambda a: np.clip(a, -2**40, 2**40), I32), (lambda a: np.where(a > 1, a, -1), U8),
         (lambda a: a * 6364136223846793005 + 1442695040888963407, U64)]


@pytest.mark.parametrize("k", range(len(CASES)))
def test_cuda_constants_match_numpy(k):
    import gradjit as gj
    f, x = CASES[k]
    with np.errstate(over="ignore"):
        want = np.asarray(f(x))
        got = np.asarray(gj.jit(f, device="cuda")(x))
    assert got.dtype == want.dtype and np.array_equal(got, want), (got, want)
