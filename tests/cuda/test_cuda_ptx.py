"""Every kernel the CUDA generator writes compiles to PTX (NVVM), without a GPU.

The simulator (``tests/cuda/sim``) checks values but accepts Python that the real
CUDA compiler rejects; here each gradient graph of the representative op cases
(every family with a CUDA rendering) and of the nn cases is rendered, its host
launcher run against shape-only stand-ins, and every launched kernel compiled by
``numba.cuda.compile_ptx`` for sm_90 (the lent GPU's architecture), in float64
and float32. Skipped when numba-cuda or NVVM (a CUDA toolkit) is absent.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

import gradjit as gj
from gradjit.runtime.coverage import cuda_cpu_only
from tests.cuda.nn_cases import NN_CASES
from tests.runtime.test_ops_gradcheck import REPS


def _ptx_ready():
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        return "under the simulator compile_ptx is unavailable"
    try:
        import numba_cuda  # noqa: F401
        from numba import cuda, float64
        cuda.compile_ptx(lambda a: None, (float64[::1],), cc=(9, 0))
    except Exception as exc:  # ImportError, missing NVVM / NVRTC
        return f"numba-cuda with NVVM is not available: {type(exc).__name__}: {exc}"[:300]
    return None


_WHY = _ptx_ready()
pytestmark = pytest.mark.skipif(_WHY is not None, reason=str(_WHY))
CPU_ONLY = cuda_cpu_only()


def _graph(fn, arrays, argnums):
    _, opt, _ = gj.value_and_grad(fn, argnums=argnums).graphs(*arrays)
    return opt


def _check(opt):
    from gradjit.runtime.cuda_ptx import ptx_check
    if any(n.op in CPU_ONLY for n in opt.nodes):
        with pytest.raises(NotImplementedError, match="CUDA"):
            ptx_check(opt)
        return
    done = ptx_check(opt)
    assert done, "no kernel was launched"
    for name, _, size in done:
        assert size > 100, name


@pytest.mark.parametrize("case", REPS, ids=[c.id for c in REPS])
def test_rep_case_kernels_compile_to_ptx(case):
    dtype = np.float32 if zlib_even(case.id) else np.float64
    arrays = [a.astype(dtype) if a.dtype.kind == "f" else a for a in case.arrays()]
    try:
        W = case.weights(arrays).astype(arrays[case.diff[0]].dtype)
        opt = _graph(lambda *a: (case.fn(*a) * W).sum(), arrays, case.diff)
    except Exception:   # the case mixes in float64 constants: the CPU rejects float32 there
        arrays = case.arrays()
        W = case.weights(arrays)
        opt = _graph(lambda *a: (case.fn(*a) * W).sum(), arrays, case.diff)
    _check(opt)


@pytest.mark.parametrize("name", sorted(NN_CASES))
def test_nn_case_kernels_compile_to_ptx(name):
    fn, arrays, argnums = NN_CASES[name](np.float32)
    _check(_graph(fn, arrays, argnums))


def zlib_even(text):
    """Half the cases in float32, half in float64, chosen stably by name."""
    import zlib
    return zlib.crc32(text.encode()) % 2 == 0
