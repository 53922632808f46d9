"""CPU kernel statements of the indexing family (``tracer/ops_index.py``).

Contract
- ``INDEX_KERNELS`` maps op name -> ``emit(e, node)``; ``codegen_cpu_kernels``
  merges it into its ``KERNELS`` table. Emitters write lines into the CPU
  emitter ``e`` (one comment per statement names the IR node).
- ``slice.Tensor`` is a NumPy basic-slicing view (``v[:, a:b:c]``; its layout
  is recorded as strided, ``'A'``); ``slice_backward`` assigns into zeros;
  ``cat`` copies each part into an empty result, one loop nest (and one block, so that
  the roller makes same-shaped parts one loop) per part.
- ``index_select`` / ``gather`` read, ``index_add`` / ``scatter_add`` add into
  a copy of ``self``, each in one loop nest over the index (or source) shape;
  negative indices wrap once (``k += n``) so traced indices behave as NumPy's.
  ``index_add``'s ``alpha`` is a ``consts`` argument.
- Every index value is bounds-checked where it is read (Numba does not check):
  outside ``[-n, n)`` (unsigned dtypes: ``>= n``) raises
  ``IndexBoundsError(op, index, axis, n)`` (``tracer/ops_index.py``) from the
  compiled code, before any access. Only structural text and the value go in:
  the user's line is added by the runtime (``runtime/compiler.py``), so graphs
  of one structure still share a source. In the loop it is a range test and a
  branch never taken (a 2^20-index gather plus its scatter-add gradient: within
  the timing noise of the unchecked loops, at LLVM -O1 and -O3).
- ``max.dim`` / ``min.dim``: loops over the kept dims, one pass along ``dim``
  keeping the first extreme (a NaN wins, as torch), writing values and int64
  indices.
- Slice bounds, dims and shapes are structural (part of the graph key, like
  every shape) and are written in the source; scalar values never are.
"""
from __future__ import annotations

import numpy as np

from gradjit.lowering.alloc_cpu import dtype_arg as _dt, shape_arg


def _sl_text(ndim, dim, start, end, step):
    s = f"{start}:{'' if end is None else end}" + ("" if step == 1 else f":{step}")
    return ", ".join([":"] * dim + [s] + [":"] * (ndim - dim - 1))


def _loops(e, shape, depth=1, order=None):
    for d in (range(len(shape)) if order is None else order):
        e.emit(depth, f"for i{d} in range({shape[d]}):")
        depth += 1
    return depth


def _idx(names):
    return ", ".join(names)


def _slice(e, node):
    (x,), out, a = node.inputs, node.outputs[0], node.attrs
    e.emit(1, f"v{out.id} = v{x.id}[{_sl_text(x.ndim, a['dim'], a['start'], a['end'], a['step'])}]",
           node)
    e.layout[out] = "A"


def _slice_backward(e, node):
    (g,), out, a = node.inputs, node.outputs[0], node.attrs
    e.emit(1, f"v{out.id} = al.zeros({shape_arg(out.shape)}, {_dt(out.dtype)})", node)
    if g.size:
        # an element loop, not ``v[sl] = g``: Numba compiles an array assignment's shape
        # check with its error message (seconds of string formatting code) into every module
        dim = a["dim"]
        rows = range(out.shape[dim])[slice(a["start"], a["end"], a["step"])]
        depth = _loops(e, g.shape)
        dst = [f"i{d}" if d != dim else f"{rows.start} + {rows.step} * i{d}" for d in range(g.ndim)]
        e.emit(depth, f"v{out.id}[{_idx(dst)}] = v{g.id}[{_idx(f'i{d}' for d in range(g.ndim))}]")


def _cat(e, node):
    out, dim = node.outputs[0], node.attrs["dim"]
    e.emit(1, f"v{out.id} = al.empty({shape_arg(out.shape)}, {_dt(out.dtype)})", node)
    off = 0
    for k, x in enumerate(node.inputs):   # each part after the last (element loops: see above)
        if k:
            e.breaks.append(len(e.lines))   # a block per part (codegen_cpu.generate)
        if x.size:
            depth = _loops(e, x.shape)
            dst = [f"i{d}" if d != dim else f"{off} + i{d}" for d in range(x.ndim)]
            e.emit(depth, f"v{out.id}[{_idx(dst)}] = v{x.id}[{_idx(f'i{d}' for d in range(x.ndim))}]")
        off += x.shape[dim]


def _wrapped(e, depth, node, index, at, n, axis):
    """Lines setting ``k<id>`` to ``index[at]``, checked against ``n``, wrapped once;
    returns that name."""
    k, j = f"k{node.outputs[0].id}", f"j{node.outputs[0].id}"   # (j: the value as read)
    unsigned = index.dtype.kind == "u"
    e.emit(depth, f"{j} = v{index.id}[{at}]")
    # The raw value's range, tested before the wrap: the wrapped value's (k < 0 or
    # k >= n) made LLVM's -O3 (parallel modules) run the gather loop 5x slower.
    e.emit(depth, f"if {j} >= {n}:" if unsigned else f"if {j} < -{n} or {j} >= {n}:")
    e.emit(depth + 1, f"raise IndexBoundsError({node.op!r}, {j}, {axis}, {n})")
    e.emit(depth, f"{k} = {j}" if unsigned else f"{k} = {j} + {n} if {j} < 0 else {j}")
    e.imports.add("from gradjit.tracer.ops_index import IndexBoundsError")
    return k


def _index_select(e, node):
    (x, index), out, dim = node.inputs, node.outputs[0], node.attrs["dim"]
    e.emit(1, f"v{out.id} = al.empty({shape_arg(out.shape)}, {_dt(out.dtype)})", node)
    depth = _loops(e, out.shape, 1, [dim])
    k = _wrapped(e, depth, node, index, f"i{dim}", x.shape[dim], dim)
    depth = _loops(e, out.shape, depth, [d for d in range(out.ndim) if d != dim])
    src = [f"i{d}" if d != dim else k for d in range(out.ndim)]
    dst = [f"i{d}" for d in range(out.ndim)]
    e.emit(depth, f"v{out.id}[{_idx(dst)}] = v{x.id}[{_idx(src)}]")


def _index_add(e, node):
    (x, index, src), out, dim = node.inputs, node.outputs[0], node.attrs["dim"]
    alpha = node.attrs["alpha"]
    scale = "" if alpha == 1 else f"{e.const(alpha, out.dtype)} * "
    e.emit(1, f"v{out.id} = np.copy(v{x.id})", node)
    depth = _loops(e, src.shape, 1, [dim])
    k = _wrapped(e, depth, node, index, f"i{dim}", x.shape[dim], dim)
    depth = _loops(e, src.shape, depth, [d for d in range(src.ndim) if d != dim])
    dst = [f"i{d}" if d != dim else k for d in range(src.ndim)]
    e.emit(depth, f"v{out.id}[{_idx(dst)}] += {scale}v{src.id}[{_idx(f'i{d}' for d in range(src.ndim))}]")


def _gather(e, node):
    (x, index), out, dim = node.inputs, node.outputs[0], node.attrs["dim"]
    e.emit(1, f"v{out.id} = al.empty({shape_arg(out.shape)}, {_dt(out.dtype)})", node)
    here = [f"i{d}" for d in range(out.ndim)]
    depth = _loops(e, out.shape)
    k = _wrapped(e, depth, node, index, _idx(here), x.shape[dim], dim)
    src = [h if d != dim else k for d, h in enumerate(here)]
    e.emit(depth, f"v{out.id}[{_idx(here)}] = v{x.id}[{_idx(src)}]")


def _scatter_add(e, node):
    (x, index, src), out, dim = node.inputs, node.outputs[0], node.attrs["dim"]
    e.emit(1, f"v{out.id} = np.copy(v{x.id})", node)
    here = [f"i{d}" for d in range(index.ndim)]
    depth = _loops(e, index.shape)
    k = _wrapped(e, depth, node, index, _idx(here), x.shape[dim], dim)
    dst = [h if d != dim else k for d, h in enumerate(here)]
    e.emit(depth, f"v{out.id}[{_idx(dst)}] += v{src.id}[{_idx(here)}]")


def scalar_value_index(e, node):
    """(values, indices) ops on a 0-d input: the value itself and index 0. True if emitted."""
    (x,), (vals, inds) = node.inputs, node.outputs
    if x.ndim:
        return False
    e.emit(1, f"v{vals.id} = v{x.id}", node)
    e.emit(1, f"v{inds.id} = np.int64(0)")
    return True


def _minmax(cmp):
    def emit(e, node):
        (x,), (vals, inds) = node.inputs, node.outputs
        if scalar_value_index(e, node):
            return
        dim, keep = node.attrs["dim"], node.attrs["keepdim"]
        scalar = vals.ndim == 0
        if not scalar:
            e.emit(1, f"v{vals.id} = al.empty({shape_arg(vals.shape)}, {_dt(vals.dtype)})", node)
            e.emit(1, f"v{inds.id} = al.empty({shape_arg(inds.shape)}, np.int64)")
        kept = [d for d in range(x.ndim) if d != dim]
        best, bi, xv, j = (f"{n}{vals.id}" for n in ("best", "bi", "xv", "j"))
        depth = _loops(e, x.shape, 1, kept)
        at = lambda j: _idx(f"i{d}" if d != dim else j for d in range(x.ndim))  # noqa: E731
        e.emit(depth, f"{best} = v{x.id}[{at('0')}]", node if scalar else None)
        e.emit(depth, f"{bi} = 0")
        e.emit(depth, f"for {j} in range(1, {x.shape[dim]}):")
        e.emit(depth + 1, f"{xv} = v{x.id}[{at(j)}]")
        e.emit(depth + 1, f"if ({xv} {cmp} {best} or {xv} != {xv}) and {best} == {best}:")
        e.emit(depth + 2, f"{best} = {xv}")
        e.emit(depth + 2, f"{bi} = {j}")
        if scalar:
            e.emit(1, f"v{vals.id} = {best}")
            e.emit(1, f"v{inds.id} = np.int64({bi})")
            return
        o = _idx(f"i{d}" if d != dim else "0" for d in range(x.ndim) if keep or d != dim)
        e.emit(depth, f"v{vals.id}[{o}] = {best}")
        e.emit(depth, f"v{inds.id}[{o}] = {bi}")
    return emit


INDEX_KERNELS = {
    "slice.Tensor": _slice, "slice_backward.default": _slice_backward, "cat.default": _cat,
    "index_select.default": _index_select, "index_add.default": _index_add,
    "gather.default": _gather, "scatter_add.default": _scatter_add,
    "max.dim": _minmax(">"), "min.dim": _minmax("<"),
}
