"""Kernel statements for the CPU code generator: ops with a loop nest of their own.

Contract
- ``kernel_stmt(e, node) -> bool`` emits the statement lines of a ``kernel``
  op (``tracer/registry.py`` kinds) into the emitter ``e`` and returns True,
  or returns False when the op is not a kernel it knows. ``codegen_cpu._stmt``
  asks here for anything that is not matmul or a view.
- Kernels read their inputs through ordinary indexing (any layout) and write a
  fresh C-contiguous output; their producers and consumers stay in the fused
  loops around them.
- ``cumsum``: outer loops over every dim but ``dim``, an inner running sum
  along ``dim`` (one pass, no temporaries).
"""
from __future__ import annotations

import numpy as np

from gradjit.lowering.codegen_cpu_index import INDEX_KERNELS
from gradjit.lowering.codegen_cpu_linalg import LINALG_KERNELS


def _np_dtype(dt):
    return f"np.{np.dtype(dt).name}" if np.dtype(dt) != np.bool_ else "np.bool_"


def _cumsum(e, node):
    (x,), out = node.inputs, node.outputs[0]
    if out.ndim == 0:
        e.emit(1, f"v{out.id} = v{x.id}", node)
        return
    dim = node.attrs["dim"]
    e.emit(1, f"v{out.id} = np.empty({out.shape}, {_np_dtype(out.dtype)})", node)
    depth = 1
    for d in range(out.ndim):
        if d != dim:
            e.emit(depth, f"for i{d} in range({out.shape[d]}):")
            depth += 1
    e.emit(depth, f"acc = {'0.0' if out.dtype.kind == 'f' else '0'}")
    e.emit(depth, f"for i{dim} in range({out.shape[dim]}):")
    idx = ", ".join(f"i{d}" for d in range(out.ndim))
    e.emit(depth + 1, f"acc += v{x.id}[{idx}]")
    e.emit(depth + 1, f"v{out.id}[{idx}] = acc")


KERNELS = {"cumsum.default": _cumsum}
KERNELS.update(INDEX_KERNELS)   # the indexing family (lowering/codegen_cpu_index.py)
KERNELS.update(LINALG_KERNELS)  # LAPACK calls (lowering/codegen_cpu_linalg.py)


def kernel_stmt(e, node):
    fn = KERNELS.get(node.op)
    if fn is None:
        return False
    fn(e, node)
    return True
