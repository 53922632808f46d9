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
  along ``dim`` (one pass, no temporaries). ``cumprod`` / ``logcumsumexp``
  (``np.logaddexp``, as the NumPy reference's ``accumulate``) are the same scan
  with another combine; ``cummax`` / ``cummin`` also carry the index. The running
  value is in the result's dtype (float32 scans as NumPy's, bit for bit), and every
  kernel's locals are named after its output (two scans or sorts of different dtypes
  in one function once shared a name: a Numba typing error, or an int64 running sum
  unified to float64).
- ``sort``: the same outer loops; each slice is copied and ``np.argsort``-ed
  (mergesort: stable, as the reference), then values and indices written out.
"""
from __future__ import annotations

import numpy as np

from gradjit.lowering.alloc_cpu import dtype_arg as _np_dtype, shape_arg

from gradjit.lowering.codegen_cpu_index import INDEX_KERNELS, scalar_value_index
from gradjit.lowering.codegen_cpu_math import _lit
from gradjit.lowering.codegen_cpu_regions import REGION_KERNELS
from gradjit.lowering.codegen_cpu_linalg import LINALG_KERNELS


def _cumsum(e, node):
    (x,), out = node.inputs, node.outputs[0]
    if out.ndim == 0:
        e.emit(1, f"v{out.id} = v{x.id}", node)
        return
    dim = node.attrs["dim"]
    e.emit(1, f"v{out.id} = al.empty({shape_arg(out.shape)}, {_np_dtype(out.dtype)})", node)
    depth = 1
    for d in range(out.ndim):
        if d != dim:
            e.emit(depth, f"for i{d} in range({out.shape[d]}):")
            depth += 1
    acc = f"acc{out.id}"   # (a name per op: two scans of other dtypes must not share one)
    e.emit(depth, f"{acc} = {_lit(0, out.dtype)}")   # (in the dtype: NumPy's running sum)
    e.emit(depth, f"for i{dim} in range({out.shape[dim]}):")
    idx = ", ".join(f"i{d}" for d in range(out.ndim))
    e.emit(depth + 1, f"{acc} += v{x.id}[{idx}]")
    e.emit(depth + 1, f"v{out.id}[{idx}] = {acc}")


def _scan_loops(e, node, out):
    """Outer loops over every dim of ``out`` but ``dim``; returns (depth, index text)."""
    dim = node.attrs["dim"]
    depth = 1
    for d in range(out.ndim):
        if d != dim:
            e.emit(depth, f"for i{d} in range({out.shape[d]}):")
            depth += 1
    return depth, ", ".join(f"i{d}" for d in range(out.ndim))


def _scan(init, combine):
    def emit(e, node):
        (x,), out = node.inputs, node.outputs[0]
        if out.ndim == 0:
            e.emit(1, f"v{out.id} = v{x.id}", node)
            return
        e.emit(1, f"v{out.id} = al.empty({shape_arg(out.shape)}, {_np_dtype(out.dtype)})", node)
        depth, idx = _scan_loops(e, node, out)
        acc = f"acc{out.id}"
        e.emit(depth, f"{acc} = {init(out.dtype)}")
        e.emit(depth, f"for i{node.attrs['dim']} in range({out.shape[node.attrs['dim']]}):")
        e.emit(depth + 1, f"{acc} = {combine.format(acc=acc, x=f'v{x.id}[{idx}]')}")
        e.emit(depth + 1, f"v{out.id}[{idx}] = {acc}")
    return emit


def _cumext(cmp):
    def emit(e, node):
        (x,), (vals, inds) = node.inputs, node.outputs
        if scalar_value_index(e, node):
            return
        dim = node.attrs["dim"]
        e.emit(1, f"v{vals.id} = al.empty({shape_arg(vals.shape)}, {_np_dtype(vals.dtype)})", node)
        e.emit(1, f"v{inds.id} = al.empty({shape_arg(inds.shape)}, np.int64)")
        depth, idx = _scan_loops(e, node, vals)
        first = ", ".join("0" if d == dim else f"i{d}" for d in range(x.ndim))
        best, bi, xv = (f"{n}{vals.id}" for n in ("best", "bi", "xv"))
        e.emit(depth, f"{best} = v{x.id}[{first}]")
        e.emit(depth, f"{bi} = 0")
        e.emit(depth, f"for i{dim} in range({x.shape[dim]}):")
        e.emit(depth + 1, f"{xv} = v{x.id}[{idx}]")
        e.emit(depth + 1, f"if {best} == {best} and ({xv} != {xv} or {xv} {cmp} {best}):")
        e.emit(depth + 2, f"{best} = {xv}")
        e.emit(depth + 2, f"{bi} = i{dim}")
        e.emit(depth + 1, f"v{vals.id}[{idx}] = {best}")
        e.emit(depth + 1, f"v{inds.id}[{idx}] = {bi}")
    return emit


def _sort(e, node):
    (x,), (vals, inds) = node.inputs, node.outputs
    if x.ndim == 0:
        e.emit(1, f"v{vals.id} = v{x.id}", node)
        e.emit(1, f"v{inds.id} = np.int64(0)")
        return
    dim, desc = node.attrs["dim"], node.attrs["descending"]
    e.emit(1, f"v{vals.id} = al.empty({shape_arg(vals.shape)}, {_np_dtype(vals.dtype)})", node)
    e.emit(1, f"v{inds.id} = al.empty({shape_arg(inds.shape)}, np.int64)")
    depth, idx = _scan_loops(e, node, vals)
    row = ", ".join(":" if d == dim else f"i{d}" for d in range(x.ndim))
    r, order = f"row{vals.id}", f"order{vals.id}"   # (names per op: sorts of two dtypes)
    key = r if x.dtype.kind not in "bu" else f"{r}.astype(np.int64)"
    e.emit(depth, f"{r} = v{x.id}[{row}].copy()")
    e.emit(depth, f"{order} = np.argsort({'-' if desc else ''}{key}, kind='mergesort')")
    e.emit(depth, f"for i{dim} in range({x.shape[dim]}):")
    e.emit(depth + 1, f"v{vals.id}[{idx}] = {r}[{order}[i{dim}]]")
    e.emit(depth + 1, f"v{inds.id}[{idx}] = {order}[i{dim}]")


KERNELS = {"cumsum.default": _cumsum,
           "cumprod.default": _scan(lambda dt: _lit(1, dt), "{acc} * {x}"),
           "logcumsumexp.default": _scan(lambda dt: "-np.inf" if dt == np.float64 else
                                           f"np.{np.dtype(dt).name}(-np.inf)",
                                           "np.logaddexp({acc}, {x})"),
           "cummax.default": _cumext(">="), "cummin.default": _cumext("<="),
           "sort.default": _sort}
KERNELS.update(INDEX_KERNELS)   # the indexing family (lowering/codegen_cpu_index.py)
KERNELS.update(LINALG_KERNELS)  # LAPACK calls (lowering/codegen_cpu_linalg.py)
KERNELS.update(REGION_KERNELS)  # loops and branches with bodies (lowering/codegen_cpu_regions.py)


def kernel_stmt(e, node):
    fn = KERNELS.get(node.op)
    if fn is None:
        return False
    fn(e, node)
    return True
