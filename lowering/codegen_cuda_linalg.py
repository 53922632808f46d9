"""Host side of the CUDA linear-algebra and sort statements (kernels: ``cuda_linalg.py``).

Contract
- ``LINALG_CUDA`` maps op name -> ``emit(e, node)`` for the CUDA emitter;
  ``codegen_cuda_kernels.CUDA_KERNELS`` merges it. Each emitter views its
  operands as batched 3-D C-contiguous arrays (``(nb, m, n)``; strided
  operands are copied first), allocates outputs and work buffers on the
  device, launches one ``cl.<kernel>`` thread per matrix, and reshapes the
  results to the op's output shapes. Nothing returns to the host.
- Right-sided triangular solves and wide SVD / pinv are computed on
  transposed copies (``X A = B`` is ``A^T X^T = B^T``; the SVD of a wide
  matrix is the transposed SVD of its transpose).
- ``sort`` moves ``dim`` last into a lane buffer, sorts each lane, and moves
  values and indices back.
- Work buffers are named ``p<1000000 + k>`` so they never meet value names.
"""
from __future__ import annotations

import numpy as np

from gradjit.lowering.codegen_cuda import contiguous, ishape, launch, unravel


def _tmp(e, shape, dtype):
    e._ntmp = getattr(e, "_ntmp", 0) + 1
    name = f"p{1000000 + e._ntmp}"
    e.alloc(None, name=name, shape=tuple(shape), dtype=dtype)
    return name


def _batched(e, v, node):
    """(name of a (nb, r, c) C-contiguous view of v, nb, r, c)."""
    src = contiguous(e, v, node)
    r, c = v.shape[-2:]
    nb = int(np.prod(v.shape[:-2])) if v.ndim > 2 else 1
    e.imports.add("cl")
    e._ntmp = getattr(e, "_ntmp", 0) + 1
    name = f"p{1000000 + e._ntmp}"
    e.hemit(f"{name} = {src}.reshape({(nb, r, c)})")
    return name, nb, r, c


def _copy_kernel(e, dst, src_expr, shape, note):
    """dst[i0, i1, ...] = src_expr (in i0..) over ``shape``; dst a C buffer of that shape."""
    size = int(np.prod(shape)) if shape else 1
    e.begin()
    body = ["    i = cuda.grid(1)", "    stride = cuda.gridsize(1)", f"    while i < {size}:"]
    body += unravel(shape, range(len(shape)))
    idx = ", ".join(f"i{d}" for d in range(len(shape)))
    body += [f"        {dst}[{idx}] = {src_expr}", "        i += stride"]
    e.kernel(e.name(), body, launch(size), note)


def _transposed(e, name, nb, r, c, dtype):
    """A new (nb, c, r) buffer holding the last-two-dims transpose of ``name``."""
    t = _tmp(e, (nb, c, r), dtype)
    _copy_kernel(e, t, f"{name}[i0, i2, i1]", (nb, c, r), "batched transpose")
    return t


def _launch(e, kernel, args, nb, node):
    blocks, threads = launch(nb)
    e.hemit(f"cl.{kernel}[{blocks}, {threads}]({', '.join(args)}, {nb})", node)


def _out(e, o, name):
    e.hemit(f"v{o.id} = {name}.reshape({ishape(o)})")
    e.layout[o] = "C"


def _inv(e, node):
    a, nb, n, _ = _batched(e, node.inputs[0], node)
    out = node.outputs[0]
    W, piv, X = _tmp(e, (nb, n, n), out.dtype), _tmp(e, (nb, n), np.int64), \
        _tmp(e, (nb, n, n), out.dtype)
    _launch(e, "inv", [a, W, piv, X], nb, node)
    _out(e, out, X)


def _solve(e, node):
    a, nb, n, _ = _batched(e, node.inputs[0], node)
    bb, _, _, k = _batched(e, node.inputs[1], node)
    out = node.outputs[0]
    W, piv, X = _tmp(e, (nb, n, n), out.dtype), _tmp(e, (nb, n), np.int64), \
        _tmp(e, (nb, n, k), out.dtype)
    _launch(e, "solve", [a, bb, W, piv, X], nb, node)
    _out(e, out, X)


def _det(e, node):
    a, nb, n, _ = _batched(e, node.inputs[0], node)
    dt = node.outputs[-1].dtype
    W, piv = _tmp(e, (nb, n, n), dt), _tmp(e, (nb, n), np.int64)
    sign, logabs, det = (_tmp(e, (nb,), dt) for _ in range(3))
    _launch(e, "det", [a, W, piv, sign, logabs, det], nb, node)
    if node.op == "linalg_det.default":
        _out(e, node.outputs[0], det)
    else:
        _out(e, node.outputs[0], sign)
        _out(e, node.outputs[1], logabs)


def _cholesky(e, node):
    a, nb, n, _ = _batched(e, node.inputs[0], node)
    L = _tmp(e, (nb, n, n), node.outputs[0].dtype)
    _launch(e, "cholesky", [a, L], nb, node)
    _out(e, node.outputs[0], L)


def _solve_triangular(e, node):
    at, out = node.attrs, node.outputs[0]
    a, nb, n, _ = _batched(e, node.inputs[0], node)
    bb, _, r, c = _batched(e, node.inputs[1], node)
    upper, unit = bool(at["upper"]), bool(at.get("unitriangular", False))
    if at.get("left", True):
        X = _tmp(e, (nb, r, c), out.dtype)
        _launch(e, "solve_triangular", [a, bb, X, str(upper), str(unit)], nb, node)
        _out(e, out, X)
        return
    aT = _transposed(e, a, nb, n, n, out.dtype)
    bT = _transposed(e, bb, nb, r, c, out.dtype)
    XT = _tmp(e, (nb, c, r), out.dtype)
    _launch(e, "solve_triangular", [aT, bT, XT, str(not upper), str(unit)], nb, node)
    _out(e, out, _transposed(e, XT, nb, c, r, out.dtype))


def _qr(e, node):
    a, nb, m, n = _batched(e, node.inputs[0], node)
    Qv, Rv = node.outputs
    dt = Qv.dtype
    W, tau = _tmp(e, (nb, m, n), dt), _tmp(e, (nb, max(1, min(m, n))), dt)
    Q = _tmp(e, (nb, m, Qv.shape[-1]), dt)
    R = _tmp(e, (nb, Rv.shape[-2], n), dt)
    _launch(e, "qr", [a, W, tau, Q, R], nb, node)
    _out(e, Qv, Q)
    _out(e, Rv, R)


def _eigh(e, node):
    a, nb, n, _ = _batched(e, node.inputs[0], node)
    wv, Vv = node.outputs
    S, w, V = _tmp(e, (nb, n, n), wv.dtype), _tmp(e, (nb, n), wv.dtype), _tmp(e, (nb, n, n), wv.dtype)
    _launch(e, "eigh", [a, S, w, V, str(bool(node.attrs["upper"]))], nb, node)
    _out(e, wv, w)
    _out(e, Vv, V)


def _svd_core(e, node, full):
    """Launch the Jacobi SVD in the tall orientation; returns (U, s, Vt, M, N, flipped)."""
    a, nb, m, n = _batched(e, node.inputs[0], node)
    dt = node.outputs[0].dtype
    flip = m < n
    M, N = (n, m) if flip else (m, n)
    W = _tmp(e, (nb, M, N), dt)
    U = _tmp(e, (nb, M, M if full else N), dt)
    s, Vt = _tmp(e, (nb, N), dt), _tmp(e, (nb, N, N), dt)
    _launch(e, "svd", [a, W, U, s, Vt, str(flip)], nb, node)
    return U, s, Vt, nb, M, N, flip


def _svd(e, node):
    Uv, Sv, Vhv = node.outputs
    full = bool(node.attrs.get("full_matrices", False))
    U, s, Vt, nb, M, N, flip = _svd_core(e, node, full)
    _out(e, Sv, s)
    if not flip:
        _out(e, Uv, U)
        _out(e, Vhv, Vt)
        return
    # A = W^T = (U S Vt)^T = Vt^T S U^T: U_A = Vt^T, Vh_A = U^T
    _out(e, Uv, _transposed(e, Vt, nb, N, N, Uv.dtype))
    _out(e, Vhv, _transposed(e, U, nb, M, M if full else N, Uv.dtype))


def _pinv(e, node):
    U, s, Vt, nb, M, N, flip = _svd_core(e, node, False)
    out = node.outputs[0]
    X = _tmp(e, (nb,) + tuple(out.shape[-2:]), out.dtype)
    _launch(e, "pinv_from_svd", [U, s, Vt, X, str(flip), repr(float(node.attrs["rcond"]))],
            nb, node)
    _out(e, out, X)


def _sort(e, node):
    (x,), (vals, inds) = node.inputs, node.outputs
    e.imports.add("cl")
    if x.ndim == 0:
        e.alloc(vals)
        e.alloc(inds)
        e.hemit(f"v{vals.id}.copy_to_device(v{x.id})", node)
        _copy_kernel(e, f"v{inds.id}", "0", (1,), "index of a 0-d sort")
        return
    dim, desc = node.attrs["dim"], bool(node.attrs["descending"])
    n = x.shape[dim]
    rest = [d for d in range(x.ndim) if d != dim]
    lane_shape = tuple(x.shape[d] for d in rest) + (n,)
    nb = int(np.prod(lane_shape[:-1])) if rest else 1
    src = contiguous(e, x, node)
    perm = rest + [dim]   # lane buffer dims -> x dims
    lanes = _tmp(e, lane_shape, x.dtype)
    xs = [None] * x.ndim
    for k, d in enumerate(perm):
        xs[d] = f"i{k}"
    _copy_kernel(e, lanes, f"{src}[{', '.join(xs)}]", lane_shape, "sort: dim last")
    sv, si = _tmp(e, lane_shape, vals.dtype), _tmp(e, lane_shape, np.int64)
    _launch(e, "sort_lanes", [f"{lanes}.reshape({(nb, n)})", f"{sv}.reshape({(nb, n)})",
                              f"{si}.reshape({(nb, n)})", str(desc)], nb, node)
    back = [None] * x.ndim   # out index i<d> (x dims) -> lane index
    for k, d in enumerate(perm):
        back[k] = f"i{d}"
    e.alloc(vals)
    e.alloc(inds)
    _copy_kernel(e, f"v{vals.id}", f"{sv}[{', '.join(back)}]", vals.shape, "sort: values back")
    _copy_kernel(e, f"v{inds.id}", f"{si}[{', '.join(back)}]", inds.shape, "sort: indices back")


LINALG_CUDA = {
    "linalg_inv.default": _inv, "linalg_solve.default": _solve, "linalg_det.default": _det,
    "linalg_slogdet.default": _det, "linalg_cholesky.default": _cholesky,
    "linalg_solve_triangular.default": _solve_triangular, "linalg_qr.default": _qr,
    "linalg_qr.complete": _qr,   # (the kernel builds as many columns of Q as it holds)
    "linalg_eigh.default": _eigh, "linalg_svd.default": _svd, "linalg_pinv.default": _pinv,
    "sort.default": _sort,
}
