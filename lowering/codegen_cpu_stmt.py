"""CPU code generator, statements: matrix products and shape ops (``codegen_cpu.py``'s
non-loop nodes), the rest through ``codegen_cpu_kernels.kernel_stmt``.

Contract
- ``stmt(e, node)`` emits the statement of ``node`` into the emitter ``e`` and
  records its result's memory order in ``e.layout`` ('C', 'F' or 'A' strided);
  a node no statement covers raises NotImplementedError naming the op.
- ``VIEW_OPS``: the ops whose statement may return a view of their input
  (the runtime copies such results before handing them out).
- A 2-D transpose is a view (F order), which BLAS reads in place; it is copied to C
  order only where a loop reads it (up to ``SMALL_TRANSPOSE`` elements): the row loop
  nest of a small product (``bl.smm``) or an elementwise loop, whose inner loop would
  stride across rows. Measured (bench/rules.py, steady gradient): copying every small
  transpose made a batch-1 GRU whose products go to BLAS 1.4x slower and a small MLP
  1.1x, while a copy feeding ``smm`` keeps W4 (RNN) 1.2x faster.
"""
from __future__ import annotations

from gradjit.lowering.alloc_cpu import dtype_arg, shape_arg
from gradjit.lowering.blas_cpu import blas_helper
from gradjit.lowering.codegen_cpu_kernels import kernel_stmt
from gradjit.lowering.schedule import permutation, squeezed

SMALL_TRANSPOSE = 4096   # elements: 2-D transposes up to this size are copied (C), not views


def _read_by_loops(e, v):
    """Does a loop read ``v`` (anything but a BLAS product, ``bl.mm``)?"""
    users = getattr(e, "_users", None)
    if users is None:
        users = e._users = e.graph.users()
    for n in users.get(v, ()):
        if n.op != "mm.default":
            return True
        m, k = n.inputs[0].shape
        if blas_helper(m, k, n.inputs[1].shape[1]) == "smm":
            return True
    return False


def unit_dims_view(x, src, dst):
    """Source of ``v<x>`` (C-contiguous, shape ``src``) viewed as ``dst`` by indexing, when
    the two differ only in size-1 dims and ``src``'s are all leading (``(1, n)`` as
    ``(n,)``, ``(n, 1)`` or ``(1, 1, n)``; ``(n,)`` as ``(1, n)``; ``(1, m, n)`` as
    ``(m, n)``): ``v[0][:, None]``. Size-1 dims are added to one non-1 dim only.
    Numba types such an index as a C array, as ``al.reshape`` would return, but compiles it
    for a fraction of the call (W4 has nine per entry: 0.08 s of its cold compile). None
    otherwise."""
    lead = next((k for k, n in enumerate(src) if n != 1), None)
    if lead is None or 1 in src[lead:] or squeezed(dst) != tuple(src[lead:]):
        return None
    out = f"v{x}[{', '.join('0' * lead)}]" if lead else f"v{x}"
    if len(dst) != len(src) - lead:
        if len(src) - lead != 1:   # Numba types None-indexing of 2-D and up as strided (A)
            return None
        out += f"[{', '.join('None' if n == 1 else ':' for n in dst)}]"
    return out


def _reshape(x, src, dst, layout="A"):
    """Source of a view / squeeze / unsqueeze of ``v<x>`` (``src``) as ``dst``."""
    if not src.ndim:
        return f"al.full({shape_arg(dst.shape)}, v{x}, {dtype_arg(dst.dtype)})" if dst.ndim else f"v{x}"
    if not dst.ndim:
        return f"v{x}[{', '.join('0' * src.ndim)}]"
    if layout == "C":   # already C: a view, and no contiguity overload to compile
        return unit_dims_view(x, src.shape, dst.shape) or f"al.reshape(v{x}, {shape_arg(dst.shape)})"
    return f"al.reshape(al.contiguous(v{x}), {shape_arg(dst.shape)})"


def stmt(e, node):
    """Matmul and shape statements. ``e.layout`` tracks which arrays are C, F or
    strided ('A'): np.dot on 'A' arrays costs seconds of Numba compile, so 2-D
    transposes are ``.T`` views (F) and strided operands are made contiguous."""
    op, ins, out = node.op, node.inputs, node.outputs[0]
    lay = e.layout
    a = [f"v{v.id}" for v in ins]
    layout = "C"
    if op == "mm.default":
        args = [f"al.contiguous({x})" if lay.get(v, "C") == "A" else x for x, v in zip(a, ins)]
        e.imports.add("from gradjit.lowering import blas_cpu as bl")
        m, k = ins[0].shape
        n = ins[1].shape[1]
        fn = blas_helper(m, k, n)
        e.emit(1, f"v{out.id} = bl.{fn}({args[0]}, {args[1]})", node)
    elif op == "bmm.default":
        args = [f"al.contiguous({x})" if lay.get(v, "C") != "C" else x for x, v in zip(a, ins)]
        for i, (x, y) in enumerate(zip(a, args)):
            if x != y:
                e.emit(1, f"{x}c = {y}")
                a[i] = f"{x}c"
        e.emit(1, f"v{out.id} = al.empty({shape_arg(out.shape)}, {dtype_arg(out.dtype)})", node)
        e.emit(1, f"for b in range({out.shape[0]}):")
        e.imports.add("from gradjit.lowering import blas_cpu as bl")
        e.emit(2, f"bl.mm_into(v{out.id}[b], {a[0]}[b], {a[1]}[b])")
    elif op in ("permute.default", "transpose.int", "t.default"):
        perm = permutation(node)
        if ins[0].ndim == 2 and 1 in ins[0].shape and lay.get(ins[0], "C") == "C":
            # A row or a column: its transpose has the same memory order (a C view).
            e.emit(1, f"v{out.id} = {_reshape(ins[0].id, ins[0], out, 'C')}", node)
        elif ins[0].ndim == 2 and ins[0].size <= SMALL_TRANSPOSE and _read_by_loops(e, out):
            # A copy of a few KiB: the loops that read it go along its rows.
            e.emit(1, f"v{out.id} = al.contiguous({a[0]}.T)", node)
        elif ins[0].ndim == 2:
            e.emit(1, f"v{out.id} = {a[0]}.T", node)
            layout = {"C": "F", "F": "C"}.get(lay.get(ins[0], "C"), "A")
        else:
            # (a cached helper: Numba compiles np.transpose with axes into every module that
            # calls it, about 5 s: most of a small batched matmul's compile)
            e.emit(1, f"v{out.id} = al.transpose({a[0]}, {tuple(perm)})", node)
            layout = "A"
    elif op in ("view.default", "squeeze.default", "squeeze.dim", "unsqueeze.default"):
        e.emit(1, f"v{out.id} = {_reshape(ins[0].id, ins[0], out, lay.get(ins[0], 'C'))}", node)
    elif kernel_stmt(e, node):
        layout = lay.get(out, "C")   # a kernel that emits a view (slice) records its layout
    else:
        raise NotImplementedError(f"CPU code generator: no statement for op '{op}'")
    lay[out] = layout


VIEW_OPS = {"view.default", "squeeze.default", "squeeze.dim", "unsqueeze.default",
             "permute.default", "transpose.int", "t.default", "slice.Tensor"}
