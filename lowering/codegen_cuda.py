"""CUDA code generator: a scheduled Graph -> the source of a numba-cuda module.

Contract
- ``generate_cuda(graph) -> Generated(source, consts, parallel=False)``. The
  module defines kernels (``@cuda.jit``) and a host launcher ``entry(<one
  device array per graph input>, consts)`` that allocates device arrays,
  launches the kernels in schedule order and returns a tuple of device
  arrays, one per graph output. Only index ops' bounds flags reach the host.
  Intermediates no result aliases come from the module's ``cm.Workspace``
  (``lowering/cuda_pool.py``): allocated once, reused by later calls.
- The schedule is the CPU generator's (``lowering/schedule.py``): targets
  only render. A ``Loop`` becomes grid-stride kernels over its flat index
  space (the multi-index is unravelled in registers), with the same scalar
  expressions as the CPU (``codegen_cpu_expr._expr``, scalar libm math: on a GPU
  ``math.exp`` is the fast path), rewritten where NumPy scalar ufuncs have no
  CUDA lowering (``cm.floor`` ...; ``lowering/cuda_device.py``).
- Reductions: a loop's reductions are grouped by their reduced dims. A full
  reduction accumulates per thread over the grid-stride loop, then a
  shared-memory tree per block writes one partial per block, and a second
  one-block kernel reduces the partials: deterministic (fixed launch shape,
  fixed order), no atomics. A partial reduction runs one thread per kept
  element, looping serially over the reduced dims. Each group is its own
  kernel, recomputing the loop's elementwise members it needs (registers);
  the first kernel also writes the loop's stores.
- 0-d values live on the device as 1-element arrays (read ``v[0]``); the
  runtime reshapes at the boundary.
- Statements: matmul/bmm launch the shared tiled kernels (``cm.mm``); 2-D
  transposes are strided views (``cm.tview``: numba-cuda's ``.T`` copies
  through a kernel it compiles per call; kernels index any strides); N-D
  permutes and reshapes of strided arrays are gather kernels; index/scan
  kernels live in ``lowering/codegen_cuda_kernels.py``. An op with no CUDA rendering raises
  ``NotImplementedError`` naming it (``cuda_supported`` asks first).
- Launch configuration is chosen from sizes at generation time: a power of
  two threads per block (32..256) and enough blocks to cover the space, at
  most ``MAX_BLOCKS`` (grid-stride beyond).
"""
from __future__ import annotations

import re

import numpy as np

from gradjit.lowering.alloc_cpu import dtype_arg as _np_dtype
from gradjit.lowering.codegen_cpu import Generated, _describe, _index, helper_stamps
from gradjit.lowering.codegen_cpu_expr import _expr, _lit, acc_init, acc_update
from gradjit.lowering.consts import const_key, const_read, const_slots, const_type
from gradjit.lowering.cuda_pool import entry_lines
from gradjit.lowering.schedule import Loop, permutation, reduced_dims, schedule

MAX_BLOCKS = 1024
# NumPy scalar calls with no CUDA lowering -> device helpers (lowering/cuda_device.py).
_REWRITE = {"np.floor(": "cm.floor(", "np.ceil(": "cm.ceil(", "np.trunc(": "cm.trunc(",
            "np.rint(": "cm.rint(", "np.fmod(": "cm.fmod(", "np.logaddexp(": "cm.logaddexp(",
            "sp.": "cm."}
_ALLOWED_NP = re.compile(r"np\.(float32|float64|int64|int32|int8|int16|uint8|bool_)\(|np\.inf")


def threads_for(n):
    t = 32
    while t < n and t < 256:
        t *= 2
    return t


def launch(n):
    """(blocks, threads) for a grid-stride loop over ``n`` elements."""
    t = threads_for(n)
    return max(1, min((n + t - 1) // t, MAX_BLOCKS)), t


def ishape(v):
    """The device shape of a value: 0-d values are 1-element arrays."""
    return v.shape if v.ndim else (1,)


def _acc_inits(reds, pad):
    """The accumulators' first values (in their own dtype: a float32 sum stays float32)."""
    return [f"{pad}r{n.outputs[0].id} = {acc_init(n.op, n.outputs[0].dtype, exact=True)}"
            for n in reds]


_combine = acc_update   # the CPU's accumulation statements, NaN-propagating max/min


class CudaEmitter:
    """Collects kernels (``self.kernels``) and host lines (``self.host``). ``const`` and
    ``imports`` mirror the CPU emitter so ``codegen_cpu_expr._expr`` can render into it."""

    fast_math = False   # GPU libm is the fast path; never the CPU's vectorised kernels

    def __init__(self, graph):
        self.graph = graph
        self.kernels = []
        self.host = []
        self.const_values = []
        self.layout = {}
        self.imports = set()
        self._kconsts = None
        self._nk = 0

    def const(self, value, dtype):
        t = const_type(value, dtype)   # a type that holds the value (lowering/consts.py)
        k, slots = len(self.const_values), const_slots(value, t)
        self.const_values += slots
        self._kconsts.append(f"c{k} = {const_read(const_key(t, len(slots)), k)}")
        return f"c{k}"

    def name(self, prefix="k"):
        self._nk += 1
        return f"{prefix}{self._nk}"

    def hemit(self, text, node=None):
        comment = f"  # {_describe(node)}" if node is not None else ""
        self.host.append("    " + text + comment)

    def alloc(self, v, name=None, shape=None, dtype=None):
        """Every device allocation of the launcher is this line (``cuda_pool`` rewrites it)."""
        shape = ishape(v) if shape is None else shape
        dtype = v.dtype if dtype is None else dtype
        self.hemit(f"{name or f'v{v.id}'} = cuda.device_array({shape}, {_np_dtype(dtype)})")

    def expr(self, node, args):
        s = _expr(node, args, self)
        for k, r in _REWRITE.items():
            s = s.replace(k, r)
        if "np." in _ALLOWED_NP.sub("", s):
            raise NotImplementedError(f"CUDA code generator: op '{node.op}' renders as '{s}', "
                                      f"which has no CUDA lowering")
        if "cm.int_power(" in s:   # (a kernel cannot raise NumPy's error at a negative one)
            raise NotImplementedError(
                f"CUDA code generator: op '{node.op}' raises integers to a traced integer "
                f"exponent, which NumPy refuses where negative; a CUDA kernel cannot raise "
                f"that error. Make the base or the exponent float, or run it on the CPU")
        return s

    def kernel(self, name, body, grid, note=""):
        """Add kernel ``name`` whose body lines (depth 1 = kernel level) are ``body``; its
        arguments are the ``vN``/``pN`` arrays the body names, then ``consts``; launch it."""
        text = "\n".join(body)
        names = sorted(set(re.findall(r"\b([vp]\d+)\b", text)), key=lambda s: (s[0], int(s[1:])))
        head = ["@cuda.jit",
                f"def {name}({', '.join(names + ['consts'])}):" + (f"  # {note}" if note else "")]
        pro = ["    " + c for c in self._kconsts]
        self.kernels.append("\n".join(head + pro + body))
        self.hemit(f"{name}[{grid[0]}, {grid[1]}]({', '.join(names + ['consts'])})")

    def begin(self):
        self._kconsts = []


def unravel(shape, dims, flat="i", depth=2):
    """Lines turning the flat index ``flat`` into ``i<d>`` for ``dims`` (C order)."""
    out = []
    ind = "    " * depth
    dims = list(dims)
    if not dims:
        return out
    if len(dims) == 1:
        return [f"{ind}i{dims[0]} = {flat}"]
    out.append(f"{ind}j = {flat}")
    for d in reversed(dims[1:]):
        out.append(f"{ind}i{d} = j % {shape[d]}")
        out.append(f"{ind}j = j // {shape[d]}")
    out.append(f"{ind}i{dims[0]} = j")
    return out


def _reader(space, inline, regs):
    def read(v):
        if v in regs:
            return regs[v]
        if v in inline:
            return _lit(inline[v], v.dtype)
        return f"v{v.id}[0]" if v.ndim == 0 else _index(v, space)
    return read


def _members(e, loop, inline, depth, stores):
    """Lines computing every elementwise member (registers) and, if ``stores``, the stores."""
    space, regs = loop.shape, {}
    read = _reader(space, inline, regs)
    ind = "    " * depth
    lines = []
    for n in loop.nodes:
        if n in loop.reductions:
            continue
        out = n.outputs[0]
        regs[out] = f"t{out.id}"
        lines.append(f"{ind}t{out.id} = {e.expr(n, [read(v) for v in n.inputs])}  # {_describe(n)}")
    if stores:
        r = len(space)
        for v in loop.stores:
            tgt = f"v{v.id}[{', '.join(f'i{d}' for d in range(r))}]" if v.ndim else f"v{v.id}[0]"
            lines.append(f"{ind}{tgt} = {regs[v]}")
    return lines, read


def _loop(e, loop, inline):
    space = loop.shape
    r = len(space)
    size = int(np.prod(space)) if space else 1
    for v in loop.stores:
        e.alloc(v)
    groups = {}
    for n in loop.reductions:
        dims = tuple(sorted(reduced_dims(n)))
        groups.setdefault(dims if len(dims) < r else "full", []).append(n)
    if not groups:
        groups = {None: []}
    stores = True
    for dims, reds in groups.items():
        e.begin()
        name = e.name()
        if dims is None or dims == "full":
            blocks, threads = launch(size)
            body = ["    i = cuda.grid(1)", "    stride = cuda.gridsize(1)"]
            body += _acc_inits(reds, "    ")
            body.append(f"    while i < {size}:")
            body += unravel(space, range(r))
            lines, read = _members(e, loop, inline, 2, stores)
            body += lines
            body += ["        " + _combine(n.op, f"r{n.outputs[0].id}", read(n.inputs[0])) +
                     f"  # {_describe(n)}" for n in reds]
            body.append("        i += stride")
            for n in reds:
                body += _block_tree(e, n, threads)
            for n in reds:
                e.alloc(n.outputs[0], name=f"p{n.outputs[0].id}", shape=blocks)
                e.alloc(n.outputs[0])
            e.kernel(name, body, (blocks, threads), f"loop over {space}")
            for n in reds:
                _finish(e, n, blocks)
        else:
            kept = [d for d in range(r) if d not in dims]
            nk = int(np.prod([space[d] for d in kept]))
            blocks, threads = launch(nk)
            body = ["    i = cuda.grid(1)", "    stride = cuda.gridsize(1)",
                    f"    while i < {nk}:"]
            body += unravel(space, kept)
            body += _acc_inits(reds, "        ")
            depth = 2
            for d in dims:
                body.append("    " * depth + f"for i{d} in range({space[d]}):")
                depth += 1
            lines, read = _members(e, loop, inline, depth, stores)
            body += lines
            body += ["    " * depth + _combine(n.op, f"r{n.outputs[0].id}", read(n.inputs[0])) +
                     f"  # {_describe(n)}" for n in reds]
            for n in reds:
                out = n.outputs[0]
                keep = n.attrs.get("keepdim", False)
                idx = [("0" if d in dims else f"i{d}") for d in range(r) if keep or d not in dims]
                body.append(f"        v{out.id}[{', '.join(idx) or '0'}] = r{out.id}")
                e.alloc(out)
            body.append("        i += stride")
            e.kernel(name, body, (blocks, threads), f"loop over {space}, reducing dims {dims}")
        stores = False


def _nbtype(dt):
    return f"numba.{np.dtype(dt).name}" if np.dtype(dt) != np.bool_ else "numba.boolean"


def _block_tree(e, n, threads):
    """Shared-memory tree of one reduction; thread 0 writes the block's partial."""
    o = n.outputs[0].id
    return [f"    sm{o} = cuda.shared.array({threads}, {_nbtype(n.outputs[0].dtype)})",
            f"    sm{o}[cuda.threadIdx.x] = r{o}",
            "    cuda.syncthreads()",
            f"    s = {threads // 2}",
            "    while s > 0:",
            "        if cuda.threadIdx.x < s:",
            f"            a{o} = sm{o}[cuda.threadIdx.x]",
            f"            x{o} = sm{o}[cuda.threadIdx.x + s]",
            "            " + _combine(n.op, f"a{o}", f"x{o}"),
            f"            sm{o}[cuda.threadIdx.x] = a{o}",
            "        cuda.syncthreads()",
            "        s //= 2",
            "    if cuda.threadIdx.x == 0:",
            f"        p{o}[cuda.blockIdx.x] = sm{o}[0]"]


def _finish(e, n, blocks):
    """Second pass: one block reduces the per-block partials into the output."""
    out = n.outputs[0]
    o = out.id
    threads = threads_for(blocks)
    e.begin()
    body = [f"    r{o} = {acc_init(n.op, out.dtype, exact=True)}",
            "    i = cuda.threadIdx.x",
            f"    while i < {blocks}:",
            "        " + _combine(n.op, f"r{o}", f"p{o}[i]"),
            f"        i += {threads}"]
    body += _block_tree(e, n, threads)[:-1]
    zeros = ", ".join("0" for _ in ishape(out))
    body.append(f"        v{o}[{zeros}] = sm{o}[0]")
    e.kernel(e.name("f"), body, (1, threads), f"final pass of %{o}")


def gather_kernel(e, node, out, value, shape=None, pre=(), flat_out=False, at=None):
    """A kernel writing ``out[i...] = value`` over ``shape`` (default: out's); ``value``
    is an expression in ``i0..``; ``pre`` are lines (depth 2) before it; ``at``: the
    index expressions of the element written, when not ``i0..`` themselves."""
    shape = out.shape if shape is None else shape
    r = len(shape)
    size = int(np.prod(shape)) if shape else 1
    e.begin()
    body = ["    i = cuda.grid(1)", "    stride = cuda.gridsize(1)", f"    while i < {size}:"]
    body += unravel(shape, range(r))
    body += ["        " + p for p in pre]
    if flat_out:
        tgt = f"p{out.id}[i]"
    else:
        at = [f"i{d}" for d in range(r)] if at is None else at
        tgt = f"v{out.id}[{', '.join(at)}]" if out.ndim else f"v{out.id}[0]"
    body += [f"        {tgt} = {value}", "        i += stride"]
    e.kernel(e.name(), body, launch(size), _describe(node) if node is not None else "copy")


def contiguous(e, v, node=None):
    """The name of a C-contiguous device array holding ``v`` (a copy if strided)."""
    if e.layout.get(v, "C") == "C":
        return f"v{v.id}"
    src = f"v{v.id}[{', '.join(f'i{d}' for d in range(v.ndim))}]"
    e.alloc(v, name=f"p{v.id}", shape=v.size)
    gather_kernel(e, node, v, src, flat_out=True)
    e.hemit(f"p{v.id} = p{v.id}.reshape({ishape(v)})")
    return f"p{v.id}"


def _stmt(e, node):
    from gradjit.lowering.codegen_cuda_kernels import CUDA_KERNELS
    op, ins, out = node.op, node.inputs, node.outputs[0]
    if op in ("mm.default", "bmm.default"):   # (any real dtype: lowering/cuda_device.mm)
        e.alloc(out)
        e.hemit(f"cm.{op.split('.')[0]}(v{ins[0].id}, v{ins[1].id}, v{out.id})", node)
        e.layout[out] = "C"
    elif op in ("permute.default", "transpose.int", "t.default"):
        perm = permutation(node)
        if out.ndim <= 1 or perm == list(range(out.ndim)):
            e.hemit(f"v{out.id} = v{ins[0].id}", node)
            e.layout[out] = e.layout.get(ins[0], "C")
        elif out.ndim == 2:
            e.hemit(f"v{out.id} = cm.tview(v{ins[0].id})", node)
            e.layout[out] = "A"
        else:   # out[i...] = x[j...] with j[perm[d]] = i[d]
            src = [None] * out.ndim
            for d, p in enumerate(perm):
                src[p] = f"i{d}"
            e.alloc(out)
            gather_kernel(e, node, out, f"v{ins[0].id}[{', '.join(src)}]")
            e.layout[out] = "C"
    elif op in ("view.default", "squeeze.default", "squeeze.dim", "unsqueeze.default"):
        src = contiguous(e, ins[0], node)
        e.hemit(f"v{out.id} = {src}.reshape({ishape(out)})", node)
        e.layout[out] = "C"
    elif op in CUDA_KERNELS:
        CUDA_KERNELS[op](e, node)
        e.layout.setdefault(out, "C")
    else:
        raise NotImplementedError(f"CUDA code generator: no kernel for op '{op}'")


def generate_cuda(graph, name="entry"):
    e = CudaEmitter(graph)
    steps, inline = schedule(graph)
    for step in steps:
        if isinstance(step, Loop):
            _loop(e, step, inline)
        else:
            _stmt(e, step.node)
    # Results never share memory with the caller's arrays (nor with each other's views).
    rets = []
    for v in graph.outputs:
        src = f"v{v.id}"
        if v in graph.inputs or e.layout.get(v, "C") != "C" or _is_view(graph, v):
            e.alloc(v, name=f"o{v.id}")
            e.hemit(f"o{v.id}.copy_to_device({contiguous(e, v)})")
            src = f"o{v.id}"
        rets.append(src)
    args = ", ".join([f"v{v.id}" for v in graph.inputs] + ["consts"])
    imports = ["from gradjit.lowering import cuda_device as cm"]
    if "cl" in e.imports:
        imports.append("from gradjit.lowering import cuda_linalg as cl")
    header = [f'"""gradjit generated CUDA module: {len(graph.nodes)} IR nodes, graph '
              f'{graph.name!r}."""',
              "import math", "", "import numba", "import numpy as np", "from numba import cuda", "",
              *imports, *helper_stamps(imports + ["from gradjit.lowering import special_cpu as sp"]),
              "", ""]
    body = "\n\n\n".join(e.kernels)
    entry = entry_lines(name, args, e.host, rets, getattr(e, "checks", ()))
    src = "\n".join(header) + body + ("\n\n\n" if body else "") + "\n".join(entry) + "\n"
    return Generated(src, np.array(e.const_values, dtype=np.float64), False)


_VIEWS = {"view.default", "squeeze.default", "squeeze.dim", "unsqueeze.default", "permute.default",
          "transpose.int", "t.default", "slice.Tensor"}


def _is_view(graph, v):
    """True if ``v`` is a view chain of a graph input (reshape of an argument...)."""
    seen = v
    while seen.node is not None and seen.node.op in _VIEWS:
        seen = seen.node.inputs[0]
    return seen is not v and seen in graph.inputs
