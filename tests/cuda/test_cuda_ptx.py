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
from tests.runtime.test_ops_gradcheck import CASES, REPS


def _ptx_ready():
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        return "under the simulator compile_ptx is unavailable"
    try:
        import numba_cuda  # noqa: F401
        from numba import cuda, float64

        from gradjit.runtime.cuda import _load_target
        if _load_target():   # as gradjit loads it (NumPy 2.5 needs the row_stack alias)
            return f"numba-cuda cannot load its target here: {_load_target()}"[:300]
        cuda.compile_ptx(lambda a: None, (float64[::1],), cc=(9, 0))
    except Exception as exc:  # ImportError, missing NVVM / NVRTC
        return f"numba-cuda with NVVM is not available: {type(exc).__name__}: {exc}"[:300]
    return None


_WHY = _ptx_ready()
pytestmark = [pytest.mark.skipif(_WHY is not None, reason=str(_WHY)),
              pytest.mark.slow]   # (pyproject.toml: the default run skips it; CI runs it)
CPU_ONLY = cuda_cpu_only()


def _graph(fn, arrays, argnums):
    """The optimised joint graph of value_and_grad (traced only: no CPU compile)."""
    from gradjit.lowering.passes import optimize
    f = gj.value_and_grad(fn, argnums=argnums)
    g, call_args, arg_values = f._trace(arrays)
    f._trace_body(g, call_args, arg_values)
    return optimize(g)


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


# Kernel templates the representative cases do not reach (sort lanes, scans with other
# combines, slogdet's outputs, ...): the first case of each of these ops.
_MORE = ("sort", "topk", "median", "kthvalue", "cummax", "cummin", "cumprod", "logcumsumexp",
         "linalg_slogdet", "prod", "prod.dim_int", "take", "roll", "masked_select", "lstsq",
         "cholesky_solve", "max.dim", "min.dim", "amin", "logsumexp")
MORE = [next(c for c in CASES if c.name == n and "empty" not in c.tag) for n in _MORE
        if any(c.name == n and "empty" not in c.tag for c in CASES)]


@pytest.mark.parametrize("case", MORE, ids=[c.id for c in MORE])
def test_more_kernel_templates_compile_to_ptx(case):
    arrays = case.arrays()
    W = case.weights(arrays)
    _check(_graph(lambda *a: (case.fn(*a) * W).sum(), arrays, case.diff))


@pytest.mark.parametrize("name", sorted(NN_CASES))
def test_nn_case_kernels_compile_to_ptx(name):
    fn, arrays, argnums = NN_CASES[name](np.float32)
    _check(_graph(fn, arrays, argnums))


def zlib_even(text):
    """Half the cases in float32, half in float64, chosen stably by name."""
    import zlib
    return zlib.crc32(text.encode()) % 2 == 0


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_every_elementwise_op_compiles_to_ptx(dtype):
    """One graph holding every registered elementwise op (sample attributes, as the
    coverage table builds them): its fused kernel compiles, so every scalar template does."""
    from gradjit.runtime.coverage import _sample_node
    from gradjit.tracer.ir import Graph
    from gradjit.tracer.registry import OPS
    g = Graph("all_elementwise")
    x, y, z = (g.add_input((4, 3), dtype) for _ in range(3))
    cond = g.add_input((4, 3), np.bool_)
    count = 0
    for name, op in sorted(OPS.items()):
        if op.kind != "elementwise" or name == "_to_copy.default":
            continue
        sample = _sample_node(op)
        args = [cond if a == "condition" else v for a, v in zip(op.schema.tensor_args, (x, y, z))]
        try:
            types = op.infer(args, sample.attrs)
        except Exception:   # noqa: BLE001  (an op that wants other operand kinds)
            continue
        g.outputs.extend(g.add_node(name, args, sample.attrs, types, None))
        count += 1
    assert count > 80
    from gradjit.runtime.cuda_ptx import ptx_check
    done = ptx_check(g)
    assert len(done) == 1 and done[0][2] > 1000   # one fused kernel


def test_target_loads_where_numpy_lacks_row_stack():
    """NumPy 2.5 removed ``np.row_stack``, which numba-cuda 0.30 registers unconditionally:
    its first kernel compile failed on the lent H200. gradjit loads the target with the alias
    put back for that moment only (``runtime/cuda._load_target``). A fresh process, since the
    registries load once per process."""
    import subprocess
    import sys
    code = "\n".join([
        "import numpy as np",
        "from gradjit.runtime import cuda as gc",   # scipy star-imports NumPy: import first
        "if hasattr(np, 'row_stack'): del np.row_stack",   # NumPy 2.5 as seen on the H200
        "assert gc._load_target() == ''",
        "assert not hasattr(np, 'row_stack')",       # user code sees NumPy as it is
        "from numba import cuda, float64",
        "ptx, _ = cuda.compile_ptx(lambda a: None, (float64[::1],), cc=(9, 0))",
        "print('ptx', len(ptx))"])
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "ptx" in r.stdout, r.stderr[-3000:]


@pytest.mark.parametrize("dtype", [np.int64, np.int8, np.uint64, np.bool_])
def test_integer_matmul_kernels_compile_to_ptx(dtype):
    """Integer and bool products take the int64-accumulating kernels (cm.mm_int / bmm_int)."""
    from gradjit.lowering.passes import optimize
    from gradjit.runtime.cuda_ptx import ptx_check
    f = gj.jit(lambda a, b: (a @ a, np.matmul(b, b)))
    g, call_args, arg_values = f._trace((np.ones((3, 3), dtype), np.ones((2, 3, 3), dtype)))
    f._trace_body(g, call_args, arg_values)
    done = ptx_check(optimize(g))
    assert {name for name, _, _ in done} == {"cm.mm_int", "cm.bmm_int"}
    assert all(size > 100 for _, _, size in done)
