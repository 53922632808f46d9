"""CUDA kernel statements: indexing, scans and (values, indices) reductions.

Contract
- ``CUDA_KERNELS`` maps op name -> ``emit(e, node)`` for the CUDA emitter
  (``lowering/codegen_cuda.py``); semantics are the CPU kernels'
  (``codegen_cpu_index.py``, ``codegen_cpu_kernels.py``).
- Reads (``slice``, ``index_select``, ``gather``, ``slice_backward``) are
  gather kernels: one thread per output element, no write conflicts; ``cat`` is
  one per part, over the part's elements, each writing its own block.
- Accumulations into a copy of ``self`` (``index_add``, ``scatter_add``) use
  ``cuda.atomic.add``: duplicate indices add up, in an unspecified order (as
  on torch CUDA); the sum is exact up to float rounding order.
- Index values are bounds-checked as on the CPU: a thread that reads one
  outside ``[-n, n)`` makes no access and sets its op's flag (one int32 per
  index op in the module's ``cuda_pool.FLAGS`` array; ``e.checks`` lists the
  ops); the launcher reads the flags once, after its kernels
  (``cm.check_indices``: one small device-to-host copy per call, only in
  modules with index ops), and raises ``IndexBoundsError`` naming the op's
  first bad value (C order, found on the host).
- Scans (``cumsum``, ``cumprod``, ``logcumsumexp``, ``cummax``, ``cummin``)
  and ``max.dim`` / ``min.dim`` run one thread per lane (every index but
  ``dim``), serially along ``dim``: the CPU's recurrence, so ties and NaNs
  resolve identically.
- Linear algebra and ``sort`` come from ``codegen_cuda_linalg.py``. An op
  absent here raises ``NotImplementedError`` from the emitter;
  ``runtime/coverage.py`` reports it as CPU-only.
"""
from __future__ import annotations

import numpy as np

from gradjit.lowering.codegen_cpu_expr import acc_init
from gradjit.lowering.codegen_cuda import gather_kernel, ishape, launch, unravel
from gradjit.lowering.codegen_cuda_linalg import LINALG_CUDA
from gradjit.lowering.cuda_pool import FLAGS


def _idx(names):
    return ", ".join(names)


def _wrap(k, n):
    return f"{k} = {k} + {n} if {k} < 0 else {k}"


def _checked(e, node, index, at, n, axis):
    """Lines (no indent) reading ``index[at]`` into ``k``, wrapped once, with ``bad``
    true when it was outside ``[-n, n)`` (then the op's flag is set; see the contract)."""
    e.checks = getattr(e, "checks", [])
    e.checks.append(f"({node.op!r}, {axis}, {n}, v{index.id})")
    test = f"k >= {n}" if index.dtype.kind == "u" else f"k < -{n} or k >= {n}"
    return [f"k = v{index.id}[{at}]", f"bad = {test}", "if bad:",
            f"    {FLAGS}[{len(e.checks) - 1}] = 1", _wrap("k", n)]


def _zero(v):
    return "0.0" if v.dtype.kind == "f" else "False" if v.dtype == np.bool_ else "0"


def _slice(e, node):
    (x,), out, a = node.inputs, node.outputs[0], node.attrs
    dim, start, step = a["dim"], a["start"], a["step"]
    src = [f"i{d}" if d != dim else f"{start} + {step} * i{d}" for d in range(x.ndim)]
    e.alloc(out)
    gather_kernel(e, node, out, f"v{x.id}[{_idx(src)}]")


def _cat(e, node):
    """One copy kernel per part, each writing its own block of the result."""
    out, dim = node.outputs[0], node.attrs["dim"]
    e.alloc(out)
    off = 0
    for x in node.inputs:
        if x.size:
            at = [f"i{d}" if d != dim else f"{off} + i{d}" for d in range(x.ndim)]
            gather_kernel(e, node, out, f"v{x.id}[{_idx(f'i{d}' for d in range(x.ndim))}]",
                          shape=x.shape, at=at)
        off += x.shape[dim]


def _slice_backward(e, node):
    (g,), out, a = node.inputs, node.outputs[0], node.attrs
    dim, start, step = a["dim"], a["start"], a["step"]
    d = f"i{dim}"
    pre = [f"q = ({d} - {start}) // {step}",
           f"hit = ({d} - {start}) % {step} == 0 and q >= 0 and q < {g.shape[dim]}"]
    src = _idx(f"i{k}" if k != dim else "q" for k in range(out.ndim))
    zero = "0.0" if out.dtype.kind == "f" else "0"
    e.alloc(out)
    if g.size == 0:
        gather_kernel(e, node, out, zero)
        return
    # q is only read when hit (a select, so no out-of-range read happens on the device)
    gather_kernel(e, node, out, f"v{g.id}[{src}] if hit else {zero}", pre=pre)


def _index_select(e, node):
    (x, index), out, dim = node.inputs, node.outputs[0], node.attrs["dim"]
    pre = _checked(e, node, index, f"i{dim}" if index.ndim else "0", x.shape[dim], dim)
    src = _idx(f"i{d}" if d != dim else "k" for d in range(out.ndim))
    e.alloc(out)
    # (a select: a bad k is never read)
    gather_kernel(e, node, out, f"v{x.id}[{src}] if not bad else {_zero(out)}", pre=pre)


def _gather(e, node):
    (x, index), out, dim = node.inputs, node.outputs[0], node.attrs["dim"]
    if out.ndim == 0:
        e.alloc(out)
        gather_kernel(e, node, out, f"v{x.id}[0]")
        return
    here = [f"i{d}" for d in range(out.ndim)]
    pre = _checked(e, node, index, _idx(here), x.shape[dim], dim)
    src = _idx(h if d != dim else "k" for d, h in enumerate(here))
    e.alloc(out)
    gather_kernel(e, node, out, f"v{x.id}[{src}] if not bad else {_zero(out)}", pre=pre)


def _accumulate(e, node, x, src, index, dim, scale, per_index):
    """out = copy(x); then out[... k ...] += scale * src[...] for every src element."""
    out = node.outputs[0]
    e.alloc(out)
    e.hemit(f"v{out.id}.copy_to_device(v{x.id})", node)
    if src.size == 0:
        return
    e.begin()
    scale = scale(e)
    here = [f"i{d}" for d in range(src.ndim)]
    at = (_idx(here) if per_index else f"i{dim}") if index.ndim else "0"
    dst = _idx(h if d != dim else "k" for d, h in enumerate(here)) if src.ndim else "0"
    body = ["    i = cuda.grid(1)", "    stride = cuda.gridsize(1)", f"    while i < {src.size}:"]
    body += unravel(src.shape, range(src.ndim))
    body += ["        " + ln for ln in _checked(e, node, index, at, x.shape[dim] if x.ndim else 1,
                                                dim)]
    body += ["        if not bad:",
             f"            cuda.atomic.add(v{out.id}, {dst if src.ndim <= 1 else '(' + dst + ')'}, "
             f"{scale}v{src.id}"
             f"[{_idx(here) if src.ndim else '0'}])",
             "        i += stride"]
    e.kernel(e.name(), body, launch(src.size), f"atomic adds of %{src.id}")


def _index_add(e, node):
    (x, index, src), dim, alpha = node.inputs, node.attrs["dim"], node.attrs["alpha"]
    scale = (lambda em: "") if alpha == 1 else (
        lambda em: f"{em.const(alpha, node.outputs[0].dtype)} * ")
    _accumulate(e, node, x, src, index, dim, scale, per_index=False)


def _scatter_add(e, node):
    (x, index, src), dim = node.inputs, node.attrs["dim"]
    # scatter_add reads src over index's shape
    _accumulate(e, node, x, _Shaped(src, index.shape), index, dim, lambda em: "", per_index=True)


class _Shaped:
    """``src`` read over another (smaller or equal) shape, as scatter_add does."""

    def __init__(self, v, shape):
        self.id, self.shape, self.ndim = v.id, shape, len(shape)
        self.size = int(np.prod(shape)) if shape else 1


def _lanes(e, node, x, dim, lines_for, note):
    """One thread per lane of ``x`` along ``dim``: ``lines_for(depth)`` yields body lines
    with i<d> bound for every d != dim."""
    kept = [d for d in range(x.ndim) if d != dim]
    n = int(np.prod([x.shape[d] for d in kept])) if kept else 1
    e.begin()
    body = ["    i = cuda.grid(1)", "    stride = cuda.gridsize(1)", f"    while i < {n}:"]
    body += unravel(x.shape, kept)
    body += lines_for(2)
    body.append("        i += stride")
    e.kernel(e.name(), body, launch(n), note)


def _scan(init, combine):
    def emit(e, node):
        (x,), out = node.inputs, node.outputs[0]
        e.alloc(out)
        if out.ndim == 0:
            e.hemit(f"v{out.id}.copy_to_device(v{x.id})", node)
            return
        dim = node.attrs["dim"]
        idx = _idx(f"i{d}" for d in range(x.ndim))

        def lines(depth):
            ind = "    " * depth
            return [f"{ind}acc = {init(out.dtype)}",
                    f"{ind}for i{dim} in range({x.shape[dim]}):",
                    f"{ind}    acc = {combine.format(acc='acc', x=f'v{x.id}[{idx}]')}",
                    f"{ind}    v{out.id}[{idx}] = acc"]
        if x.size:
            _lanes(e, node, x, dim, lines, f"scan {node.op} along dim {dim}")
    return emit


def _extreme(cmp, scan):
    """cummax/cummin (scan=True) and max.dim/min.dim: first extreme wins, NaN wins."""
    def emit(e, node):
        (x,), (vals, inds) = node.inputs, node.outputs
        e.alloc(vals)
        e.alloc(inds)
        if x.ndim == 0:
            e.hemit(f"v{vals.id}.copy_to_device(v{x.id})", node)
            gather_kernel(e, None, inds, "0")
            return
        dim = node.attrs["dim"]
        keep = node.attrs.get("keepdim", False)
        at = lambda j: _idx(f"i{d}" if d != dim else j for d in range(x.ndim))  # noqa: E731
        if scan:
            o = at(f"i{dim}")
        else:
            o = _idx(f"i{d}" if d != dim else "0" for d in range(x.ndim) if keep or d != dim) or "0"

        def lines(depth):
            ind = "    " * depth
            res = [f"{ind}best = v{x.id}[{at('0')}]", f"{ind}bi = 0",
                   f"{ind}for i{dim} in range({x.shape[dim]}):",
                   f"{ind}    xv = v{x.id}[{at(f'i{dim}')}]",
                   f"{ind}    if best == best and (xv != xv or xv {cmp} best):",
                   f"{ind}        best = xv", f"{ind}        bi = i{dim}"]
            if scan:
                res += [f"{ind}    v{vals.id}[{o}] = best", f"{ind}    v{inds.id}[{o}] = bi"]
            else:
                res += [f"{ind}v{vals.id}[{o}] = best", f"{ind}v{inds.id}[{o}] = bi"]
            return res
        if x.size:
            _lanes(e, node, x, dim, lines, f"{node.op} along dim {dim}")
    return emit


CUDA_KERNELS = {
    "slice.Tensor": _slice, "slice_backward.default": _slice_backward,
    "cat.default": _cat,
    "index_select.default": _index_select, "gather.default": _gather,
    "index_add.default": _index_add, "scatter_add.default": _scatter_add,
    "cumsum.default": _scan(lambda dt: acc_init("sum.default", dt, exact=True), "{acc} + {x}"),
    "cumprod.default": _scan(lambda dt: acc_init("prod.default", dt, exact=True), "{acc} * {x}"),
    "logcumsumexp.default": _scan(lambda dt: "-math.inf", "cm.logaddexp({acc}, {x})"),
    "cummax.default": _extreme(">=", True), "cummin.default": _extreme("<=", True),
    "max.dim": _extreme(">", False), "min.dim": _extreme("<", False),
}
CUDA_KERNELS.update(LINALG_CUDA)   # linear algebra and sort (lowering/codegen_cuda_linalg.py)

__all__ = ["CUDA_KERNELS", "ishape"]
