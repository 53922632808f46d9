"""CPU statements of the linear-algebra kernels (``tracer/ops_linalg.py``): LAPACK via Numba.

Contract
- ``LINALG_KERNELS`` maps each ``linalg_*`` op to an emitter
  ``fn(e, node)`` (merged into ``codegen_cpu_kernels.KERNELS``). Each op is one
  call per matrix of a cached helper of ``linalg_cpu.py`` (``la.solve`` ...: Numba's
  ``np.linalg``, lowered to LAPACK, compiled once per machine):
  a plain statement for a 2-D input; for batched inputs ``(*, m, n)`` the
  operands are made C-contiguous and viewed as ``(B, m, n)``, a loop over B
  writes fresh output arrays, which are then viewed with the batch shape.
- ``linalg_qr.complete`` (m > n) is ``la.qr_complete``; ``linalg_solve_triangular`` is
  ``la.solve_triangular_left`` / ``_right`` (``np.linalg.solve`` on the masked triangle).
- 0-d results (``det`` / ``slogdet`` of one matrix) are scalars cast to the
  output dtype, as everywhere in the generated code.
- An op whose results are all empty (a size-0 batch, matrix or right-hand side)
  emits empty arrays and no LAPACK call (Numba's wrappers reject empty operands).
- Each result's memory order is recorded in ``e.layout`` (codegen_cpu_stmt): Numba's
  LAPACK wrappers return most 2-D results in Fortran order (``inv``, ``solve``, ``pinv``,
  ``eigh``'s vectors, ``svd``'s ``u`` / ``vt``: typed 'F'; ``qr``'s ``q``: 'A'), so a
  view of one (``.ravel()``, ``reshape``, ``np.trace`` / ``np.diagonal``, which trace
  to ``view``) is made contiguous before ``al.reshape`` (Numba's reshape cannot give a
  C-order view of an F array: "incompatible shape for array"). ``_LAYOUT``: the 2-D
  results' orders per op; an op missing from it records 'A' (unknown, made contiguous
  where that matters). 1-D results and the batched form's results are C.
"""
from __future__ import annotations

import numpy as np

from gradjit.lowering.alloc_cpu import dtype_arg as _np_dtype, shape_arg


def _call(node, args):
    """The expression computing the op's result(s) for 2-D operands ``args``."""
    op, at = node.op, node.attrs
    a = args[0]
    if op == "linalg_eigh.default" and at["upper"]:   # Numba's eigh has only UPLO='L'
        bits = 64 if node.inputs[0].dtype == np.float64 else 32
        return f"la.eigh_upper{bits}({a})"
    if op == "linalg_pinv.default":
        return f"la.pinv({a}, {float(at['rcond'])!r})"
    if op == "linalg_svd.default":
        return f"la.svd({a}, {bool(at['full_matrices'])})"
    if op == "linalg_solve_triangular.default":
        side = "left" if at["left"] else "right"
        return (f"la.solve_triangular_{side}({a}, {args[1]}, {bool(at['upper'])}, "
                f"{bool(at['unitriangular'])})")
    name = "qr_complete" if op == "linalg_qr.complete" else op[len("linalg_"):-len(".default")]
    return f"la.{name}({', '.join(args)})"


# Memory order (as Numba types it) of each 2-D result of the single-matrix call.
_LAYOUT = {"linalg_inv.default": ("F",), "linalg_pinv.default": ("F",),
           "linalg_solve.default": ("F",), "linalg_cholesky.default": ("C",),
           "linalg_qr.default": ("A", "F"), "linalg_qr.complete": ("A", "C"),
           "linalg_eigh.default": ("C", "F"),
           "linalg_svd.default": ("F", "C", "F")}


def _layouts(node):
    """The memory order of each result of the single-matrix call of ``node``."""
    if node.op == "linalg_solve_triangular.default":
        order = ("F",) if node.attrs["left"] else ("C",)   # np.linalg.solve | .T.copy()
    else:
        order = _LAYOUT.get(node.op, ())
    return [order[i] if i < len(order) and o.ndim >= 2 else ("A" if o.ndim >= 2 else "C")
            for i, o in enumerate(node.outputs)]


def _linalg(e, node):
    e.imports.add("from gradjit.lowering import linalg_cpu as la")
    ins, outs = node.inputs, node.outputs
    batch = tuple(ins[0].shape[:-2])
    names = [f"v{o.id}" for o in outs]
    if all(0 in o.shape for o in outs):   # nothing to compute; Numba's LAPACK rejects empties
        for n, o in zip(names, outs):
            e.emit(1, f"{n} = al.empty({shape_arg(o.shape)}, {_np_dtype(o.dtype)})", node)
        return
    if not batch:
        args = [f"al.contiguous(v{v.id})" for v in ins]
        lhs = ", ".join(f"{n}_r" if o.ndim == 0 else n for n, o in zip(names, outs))
        e.emit(1, f"{lhs} = {_call(node, args)}", node)
        for n, o in zip(names, outs):
            if o.ndim == 0:
                e.emit(1, f"{n} = {_np_dtype(o.dtype)}({n}_r)")
        for o, lay in zip(outs, _layouts(node)):
            e.layout[o] = lay
        return
    nb = int(np.prod(batch))
    for v in ins:
        e.emit(1, f"v{v.id}_b = al.reshape(al.contiguous(v{v.id}), {shape_arg((nb,) + tuple(v.shape[-2:]))})")
    for n, o in zip(names, outs):
        tail = tuple(o.shape[len(batch):])
        e.emit(1, f"{n}_b = al.empty({shape_arg((nb,) + tail)}, {_np_dtype(o.dtype)})")
    e.emit(1, f"for b in range({nb}):", node)
    args = [f"v{v.id}_b[b]" for v in ins]
    tmps = [f"{n}_t" for n in names]
    e.emit(2, f"{', '.join(tmps)} = {_call(node, args)}")
    for n, t, o in zip(names, tmps, outs):
        # (an array into a batch's slice through a cached helper: Numba compiles an array
        # assignment into every module that has one)
        tail = len(o.shape) - len(batch)
        e.emit(2, f"al.assign({n}_b[b], {t})" if tail else f"{n}_b[b] = {t}")
    for n, o in zip(names, outs):
        e.emit(1, f"{n} = al.reshape({n}_b, {shape_arg(o.shape)})")


LINALG_KERNELS = {f"linalg_{name}.default": _linalg for name in (
    "inv", "det", "slogdet", "solve", "cholesky", "solve_triangular", "qr", "eigh", "svd", "pinv")}
LINALG_KERNELS["linalg_qr.complete"] = _linalg
