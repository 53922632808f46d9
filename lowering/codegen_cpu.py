"""CPU code generator: a scheduled Graph -> the source of a Numba module.

Contract
- ``generate(graph) -> Generated(source, consts, parallel)``. The module
  defines ``entry(<one arg per graph input>, consts)`` decorated
  ``@numba.njit(error_model="numpy", no_cfunc_wrapper=True, pipeline_class=pl.Lean)``
  (its disk cache is attached by the runtime: runtime/numba_cache.py) (Numba's passes less those generated code never needs:
  lowering/pipeline_cpu.py) returning a tuple of the graph outputs (Python and ``@njit`` code call it as a
  dispatcher; the C-callable wrapper, which only Numba's first-class function
  types use, was 6% of a W4 module's optimised IR: cold compile -12 ms). 0-d
  values are scalars (arguments, locals, results); the runtime converts at the
  boundary. ``LLVM_OPT``, a module constant, is the LLVM optimisation level the
  runtime compiles the module at: 1, or 3 when the entry runs a loop in parallel.
  ``CODEGEN_OPT = 0``, where the code is large and its loops little work
  (``fast_codegen``), has its machine code made at LLVM's code-generation
  level 0 (runtime/levels.py); without it, at Numba's.
- Scalar attributes (``other``, ``alpha``, ``exponent`` ...) are read from the
  ``consts`` float64 array argument, never written into the source, so graphs
  that differ only in such values share one source file and one compilation.
  A few exponents (2, 1, 0.5, -1) are specialised in source because they
  change the instruction, not just a number.
- Every emitted line carries a comment with the IR node it comes from.
- Transcendentals (exp, log, tanh, sin, ...) call the vectorisable
  ``fm.<name>`` of ``lowering/fastmath_cpu.py`` (<= 2 ulp) instead of scalar
  libm, so fused loops vectorise; ``GRADJIT_FAST_MATH=0`` (read per
  ``generate`` call) keeps ``math.<name>``, and emitters with ``fast_math``
  false (CUDA) always do.
- Graphs with many loops (unrolled Python loops) outline each loop into a
  shared function, identical loops sharing one (``codegen_cpu_outline.py``),
  so compile time follows distinct structure, not graph length. In graphs
  long enough to roll, loops of ``OUTLINE_BIG`` elements or more are outlined
  before rolling: LLVM vectorises them better in a function of their own.
  Outlined loops read their extents from their arguments' shapes (``n<d> =
  v<id>.shape[j]``), so loops that differ only in shape share one function.
- Matrix products and shape ops are statements (``codegen_cpu_stmt.py``);
  generated code spells shapes and dtypes with ``alloc_cpu.shape_arg`` /
  ``dtype_arg``.
- One loop nest per ``Loop`` of the schedule; ``prange`` on the outer loop only
  when the loop is large (``PARALLEL_MIN`` elements) and no reduction there
  races; ``parallel=True`` is set only when some loop uses it. Where the
  ``prange`` runs over blocks, each full sum keeps one partial per block, added
  in block order after the loop: the result does not depend on the thread count.
- A loop that carries a row pass (``Loop.rows``, ``schedule_rows.py``) runs over
  blocks of the matrix's rows, in parallel, in a function of its own; its extra
  lines come from ``codegen_cpu_rows.py``.
- A unit-dims view that only fused loops read is not built: they index its base
  (``codegen_cpu_fold.py``, ``FOLD_VIEWS``). A loop that is exactly an outer product,
  or one added to an accumulator, calls a cached rank-1 helper instead
  (``codegen_cpu_outer.py``, ``RANK_ONE``), unless it is large enough to run in parallel.
"""
from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass

import numpy as np

from gradjit.lowering.consts import const_key, const_read, const_slots, const_type
from gradjit.lowering.alloc_cpu import dtype_arg as _np_dtype, hoist_shapes, shape_arg
from gradjit.lowering.codegen_cpu_expr import _acc_init, _acc_update, _expr, _lit
from gradjit.lowering.codegen_cpu_fold import fold_axis, fold_index, view_folds
from gradjit.lowering.codegen_cpu_math import FAST_OPS
from gradjit.lowering.codegen_cpu_outer import rank_one
from gradjit.lowering.codegen_cpu_outline import OUTLINE_MIN_LOOPS, Outliner, extent_sources
from gradjit.lowering.codegen_cpu_roll import Block, roll
from gradjit.lowering.codegen_cpu_roll_text import MIN_REPS
from gradjit.lowering.codegen_cpu_rows import rows_axpy, rows_block, rows_dot, rows_end, rows_start
from gradjit.lowering.codegen_cpu_sink import plan_sinks, stores as sink_store
from gradjit.lowering.codegen_cpu_stmt import SMALL_TRANSPOSE, VIEW_OPS, stmt  # noqa: F401
from gradjit.lowering.schedule import (REDUCTIONS, Loop, Stmt, reduced_dims, schedule,
                                      unit_map, unit_view)
from gradjit.tracer.ir import Node, format_node
from gradjit.tracer.registry import get_op

PARALLEL_MIN = 1 << 18
SPLIT_BLOCK = 1 << 12     # elements per block of a stored sum (32 KiB in float64)
VEC_SUM_MIN = 64          # elements: a full sum in a loop that calls vector math is stored
#                           per block, then summed (below it the running sum's scalar math
#                           costs less than compiling al.total in a cold process: the RNN's
#                           32, cold 0.97 -> 0.92 s)
VEC_OPS = FAST_OPS | {"sigmoid"}   # ops whose CPU expression calls fm.<name> (sigmoid: exp)
RECOMPUTE = True      # cheap values computed again where read, not stored (schedule_remat.py)
FOLD_VIEWS = True     # unit-dims views only loops read are not built (codegen_cpu_fold.py)
RANK_ONE = True       # outer products (+ an accumulator) call cached helpers (codegen_cpu_outer.py)
ROLL_MIN_STEPS = 32   # smaller graphs read exactly as scheduled
OUTLINE_BIG = 256     # elements: in graphs that roll, loops this large become shared functions
# A module's LLVM level (``LLVM_OPT``, applied by runtime/compiler.py). Level 1 cuts cold
# compiles (W3 1.2-1.6 -> 1.05 s, W4 1.15 -> 1.09 s), steady times equal or better; a
# parallel entry keeps Numba's 3 (W2's fused loop is 8% slower at 1).
LLVM_OPT_SERIAL, LLVM_OPT_PARALLEL = 1, 3
# Machine code at LLVM's code-generation level 0 (``CODEGEN_OPT``, runtime/levels.py) for a
# graph long enough to roll whose loops do little work: its machine code is emitted 5x
# faster (the RNN's cold first gradient 1.03 -> 0.95 s; steady time, elementwise loops
# equal), but a loop that carries a value from one iteration to the next, a sum, keeps it
# in memory at level 0, not in a register (an in-cache sum of 20,000 squares: +25%). So:
# at most FAST_CODEGEN_SUMS elements visited by loops that reduce, FAST_CODEGEN_WORK by
# all loops, per call.
FAST_CODEGEN_SUMS, FAST_CODEGEN_WORK = 1 << 14, 1 << 18


def fast_codegen(steps):
    """Machine code at level 0 for these scheduled steps: many of them (code that rolls),
    their loops little work (``FAST_CODEGEN_SUMS`` / ``FAST_CODEGEN_WORK``)."""
    if len(steps) < ROLL_MIN_STEPS:
        return False
    loops = [(int(math.prod(s.shape)), bool(s.reductions)) for s in steps if isinstance(s, Loop)]
    return (sum(n for n, _ in loops) <= FAST_CODEGEN_WORK
            and sum(n for n, sums in loops if sums) <= FAST_CODEGEN_SUMS)


class SignatureMismatch(TypeError):
    """Raised by a generated entry called with argument shapes it was not generated for
    (its loops have the shapes baked in). A TypeError, like Numba's own rejection of other
    argument types, so callers fall back to their signature lookup on either."""


_GUARD_MSG = "gradjit: argument shapes differ from the ones this function was compiled for"


@dataclass
class Generated:
    source: str
    consts: np.ndarray
    parallel: bool
    packs: tuple = ()   # (input positions, ...) per pack argument, after the loose inputs


class _Emitter:
    def __init__(self, graph):
        self.graph = graph
        self.lines = []
        self.const_values = []
        self.const_types = []   # numpy scalar type (source text) per consts slot
        self.layout = {}  # Value -> "C" | "F" | "A" for statement outputs (others are C)
        self.prologue = []
        self.parallel = False
        self.imports = set()  # extra import lines (e.g. the special-function module)
        self.fast_math = True  # fm.<name> (vectorisable) instead of math.<name> where faster
        self.folds = {}   # unit-dims view -> the base loops read instead (codegen_cpu_fold)
        self.functions = {}   # name -> source of a region body's function (codegen_cpu_regions)
        # Line numbers where a statement's lines start another block: a cat's parts are
        # copied one block each, so the roller makes many same-shaped copies one loop.
        self.breaks = []
        self.sinks = {}   # Loop -> the cat blocks it stores (codegen_cpu_sink.py)

    # -- constants ---------------------------------------------------------------
    def const(self, value, dtype):
        """A new ``consts`` slot per use: never shared by value, so the source cannot
        depend on which constants happen to be equal."""
        t = const_type(value, dtype)   # a type that holds the value (lowering/consts.py)
        k, slots = len(self.const_values), const_slots(value, t)
        key = const_key(t, len(slots))
        self.const_values += slots
        self.const_types += [key] + ["-"] * (len(slots) - 1)
        # one prologue line per slot (the pad is never read, so dropped as unused)
        self.prologue += [f"    c{k} = {const_read(key, k)}"] + [""] * (len(slots) - 1)
        return f"c{k}"

    def emit(self, depth, text, node=None):
        comment = f"  # {_describe(node)}" if node is not None else ""
        self.lines.append("    " * depth + text + comment)


def _describe(node):
    """The IR line of ``node`` with scalar-constant values elided (they are ``consts``)."""
    scalars = _SCALAR_ATTRS.get(node.op)
    if scalars is None:
        scalars = _SCALAR_ATTRS[node.op] = frozenset(
            a.name for a in get_op(node.op).schema.attr_args if a.type == "Scalar")
    shown = Node(node.op, node.inputs, {k: ("<const>" if k in scalars else v)
                                        for k, v in node.attrs.items()})
    shown.outputs = node.outputs
    return format_node(shown).replace("'<const>'", "<const>")


_SCALAR_ATTRS = {}   # op name -> its scalar attributes' names


def _index(v, space, fixed=(), shape=None, folds=None):
    """Index expression reading ``v`` (broadcast against ``space``) inside the loop nest.
    ``fixed``: dims of the space that have no loop (size 1), indexed 0. ``shape``: the
    reading node's output shape where it differs from ``space`` in size-1 dims only (a
    member by schedule's ``unit_views``): ``v`` broadcasts against it instead, and its
    dims follow the loop's by ``unit_map``."""
    r, k = len(space), v.ndim
    idx = []
    if shape is not None and tuple(shape) != tuple(space):
        m = unit_map(shape, space)
        for j in range(k):
            d = m[len(shape) - k + j]
            idx.append("0" if v.shape[j] == 1 or d is None or d in fixed else f"i{d}")
    else:
        for j in range(k):
            d = r - k + j
            idx.append("0" if (v.shape[j] == 1 and space[d] != 1) or d in fixed else f"i{d}")
    v, idx = fold_index(v, idx, folds or {})   # a folded view: its base (codegen_cpu_fold)
    return f"v{v.id}[{', '.join(idx)}]"


def _split_sum(n, space, vec=False):
    """A full float sum over ``VEC_SUM_MIN`` or more elements in a loop that calls
    vectorisable math (``vec``): stored per block, then summed. A running sum keeps the
    loop from vectorising, and a scalar ``fm.tanh`` is several times slower than the vector
    one (bench/rules.py, value_and_grad: W1 1.2x, logistic regression 1.06x). A loop of
    plain arithmetic keeps its running sum: stored, W7's pairwise energy took 2x as long
    and no program of bench/rules.py was faster (the former ``SPLIT_SUM_MIN``, 2**15)."""
    size = int(math.prod(space))
    return (vec and size >= VEC_SUM_MIN and len(reduced_dims(n)) == len(space) and len(space)
            and n.op == "sum.default" and n.outputs[0].dtype.kind == "f")


ROW_REDUCTIONS = ("sum.dim_IntList", "amax.default", "amin.default")
# Row length from which a row reduction is buffered: the buffer is allocated once per
# row (about 0.1 us), so shorter rows (e.g. the 3 coordinates of a pairwise distance)
# keep the running update.
ROW_BUFFER_MIN = 256


def _row_reduction(n, space, loops, blocked):
    """Is ``n`` a float sum / max / min over (at least) the innermost loop's dim, in a
    loop that is not blocked, with a row long enough to pay for a buffer?"""
    return (not blocked and len(loops) > 0 and loops[-1] in reduced_dims(n)
            and space[loops[-1]] >= ROW_BUFFER_MIN
            and n.op in ROW_REDUCTIONS and n.inputs[0].dtype.kind == "f"
            and n.outputs[0].dtype == n.inputs[0].dtype)


def _vector_math(e, loop):
    """Does the loop call a vectorisable fast-math function (lowering/fastmath_cpu.py)?"""
    return getattr(e, "fast_math", False) and any(
        n.op.split(".")[0] in VEC_OPS and n.outputs[0].ndim for n in loop.nodes)


def _loop(e, loop, inline, generic=False):
    """``generic`` (a loop bound for a shared function): the extents are read from the
    shapes of the arrays it reads (``n<d>``), so loops that differ only in shape share
    one compiled function; a dim no such array spans stays a literal."""
    space = loop.shape
    r = len(space)
    regs = {}
    vec = _vector_math(e, loop)
    rp = loop.rows   # a row pass (lowering/schedule_rows.py): blocks of rows, in parallel
    # Not with a split sum or a row pass: their blocks are written with the extents' values.
    generic = generic and rp is None and not any(_split_sum(n, space, vec)
                                                 for n in loop.reductions)
    src = extent_sources(loop, inline) if generic else [None] * r
    ext = [str(space[d]) if src[d] is None else f"n{d}" for d in range(r)]

    hoisted = {}   # h<id of the array read> -> index expression, read once per innermost loop

    def read(v, shape=None):
        if v in regs:
            return regs[v]
        if v in inline:
            return _lit(inline[v], v.dtype)
        if v.ndim == 0:
            return f"v{v.id}"
        idx = _index(v, space, fixed, shape, e.folds)
        if loops and f"i{loops[-1]}" not in re.findall(r"\bi\d+\b", idx):
            # Invariant in the innermost loop (a broadcast operand, e.g. an outer product's
            # column): read it once before that loop. LLVM cannot hoist the load itself,
            # since the loop's stores might alias it, and then it does not vectorise. Named
            # after the array read (a folded view's base: the roller maps names to ids).
            name = "h" + idx[1:idx.index("[")]
            if hoisted.setdefault(name, idx) == idx:
                return name
        return idx

    names = ", ".join(f"%{n.outputs[0].id}" for n in loop.nodes)
    e.emit(1, f"# loop over {space}: {names}")
    for d, s in enumerate(src):
        if s is not None:
            s = fold_axis(*s, e.folds)
            e.emit(1, f"n{d} = v{s[0].id}.shape[{s[1]}]")
    for v in loop.stores:
        if v.ndim:
            shp = ext if v.shape == space else v.shape   # a unit-dims member: its own shape
            e.emit(1, f"v{v.id} = al.empty({shape_arg(shp)}, {_np_dtype(v.dtype)})")
    for out in dict.fromkeys(sk[0] for sk in e.sinks.get(loop, ())):
        e.emit(1, f"v{out.id} = al.empty({shape_arg(out.shape)}, {_np_dtype(out.dtype)})")
    scalar_red, array_red, split = [], [], []
    size = int(math.prod(space))
    for n in loop.reductions:
        out = n.outputs[0]
        dims = reduced_dims(n)
        if _split_sum(n, space, vec):
            # Stored per block of SPLIT_BLOCK elements, summed per block (al.total): a
            # running sum would keep the whole loop from vectorising; a block, not the
            # whole space, keeps the buffer in cache and the peak memory flat.
            split.append(n)
        elif len(dims) == r:
            scalar_red.append(n)
        else:
            array_red.append(n)
            fill = _acc_init(n)
            keep = n.attrs.get("keepdim", False)
            shp = shape_arg([("1" if d in dims else ext[d]) for d in range(r) if keep or d not in dims])
            e.emit(1, f"v{out.id} = al.full({shp}, {fill}, {_np_dtype(out.dtype)})")
    # The outer loop runs over the first dim that is not 1 (size-1 dims get no loop, below):
    # a (1, n) space, e.g. a (1, n) and an (n,) value in one loop (unit_views), is parallel too
    d0 = next((d for d in range(r) if space[d] != 1), 0)
    par = ((size >= PARALLEL_MIN or rp is not None) and r > 0 and space[d0] > 1
           and not any(d0 in reduced_dims(n) for n in array_red)
           and all(n.op == "sum.default" for n in scalar_red))
    e.parallel |= par
    rng0 = "prange" if par else "range"
    j = rows = rest = 0
    blocked = bool(split) or rp is not None
    if rp is not None:   # blocks of rows of the matrix (the space's one dim that is not 1)
        j, rest = d0, 1
        rows = rows_start(e, rp, space[j], SPLIT_BLOCK)
    elif split:   # blocks along dim j, the first whose trailing dims fit in a block
        j = next(d for d in range(r) if int(math.prod(space[d + 1:])) <= SPLIT_BLOCK)
        rest = int(math.prod(space[j + 1:]))
        rows = min(max(1, SPLIT_BLOCK // rest), space[j])   # (a small space: one block)
    # Blocks run in parallel (prange over them): each full reduction keeps one partial per
    # block, summed in block order after the loop. A running total would be Numba's
    # parallel reduction: more to compile (W5: 0.15 s) and a result that varies with the
    # number of threads.
    nblocks = -(-space[j] // rows) if blocked else 0
    partial = par and blocked and j == d0
    # One block (a small space, e.g. a (1, 32) loss): no block loop, its buffers and sums
    # at the top (tensor-mode W4: 12 fewer lines to type and lower).
    one = blocked and rp is None and nblocks == 1 and not partial
    for n in split + scalar_red:
        init = _acc_init(n) if n in scalar_red else "0.0"
        e.emit(1, f"r{n.outputs[0].id} = " + (f"al.zeros({shape_arg([nblocks])}, np.float64)"
                                              if partial else init))
    # Size-1 dims get no loop (index 0): a one-trip range loop is a dozen Numba IR
    # instructions to type and lower for nothing (RNN steps are (1, hidden) loops).
    loops = [d for d in range(r) if space[d] != 1 or (blocked and not one and d == j)]
    fixed = set(range(r)) - set(loops)
    ix = (lambda d: "0" if d in fixed else f"i{d}")   # noqa: E731
    depth = block = 1
    for n in split if one else ():
        e.emit(1, f"s{n.outputs[0].id} = al.empty({shape_arg(space[j:])}, "
                  f"{_np_dtype(n.inputs[0].dtype)})")
    for d in loops:
        rng = rng0 if d == d0 else "range"
        if blocked and not one and d == j:   # b0 over blocks, lo0 <= i_j < hi0, a buffer per sum
            e.emit(depth, f"for b0 in {rng}({nblocks}):")
            e.emit(depth + 1, f"lo0 = b0 * {rows}")
            # (a branch, not min(): Numba compiles its min overload in every process)
            e.emit(depth + 1, f"hi0 = lo0 + {rows} if lo0 + {rows} < {space[d]} else {space[d]}")
            for n in split:
                buf = (rows,) + tuple(space[d + 1:])
                e.emit(depth + 1, f"s{n.outputs[0].id} = al.empty({shape_arg(buf)}, "
                                  f"{_np_dtype(n.inputs[0].dtype)})")
            if rp is not None:
                rows_block(e, rp, depth + 1)
            for n in scalar_red if partial else ():
                e.emit(depth + 1, f"s{n.outputs[0].id} = {_acc_init(n)}")
            depth += 1
            block = depth   # the per-block sums go here, after the block's loops
            e.emit(depth, f"for i{d} in range(lo0, hi0):")
        else:
            e.emit(depth, f"for i{d} in {rng}({ext[d]}):")
        depth += 1
    inner = len(e.lines) - 1   # the innermost 'for' line: hoisted reads go before it
    # Reductions along the innermost loop (a row's sum or max): the row is stored in a
    # buffer and reduced after that loop (al.total / al.extreme, over lanes). Accumulated
    # in place, the target's element is loaded and stored every step (the loop's other
    # stores might alias it), and the whole loop, exp included, does not vectorise:
    # a 512x512 softmax's passes ran 5-10x slower.
    rowwise = [n for n in array_red if _row_reduction(n, space, loops, blocked)]
    bufs = [f"s{n.outputs[0].id} = al.empty(({ext[loops[-1]]},), {_np_dtype(n.inputs[0].dtype)})"
            for n in rowwise]
    if rp is not None:
        rows_dot(e, rp, depth, f"i{j}", regs)
    for n in loop.nodes:
        out = n.outputs[0]
        # (an elementwise member of another shape reads its inputs against its own shape)
        x = read(n.inputs[0]) if n.op in REDUCTIONS or unit_view(n) else None
        if n in split:
            idx = ", ".join([ix(j) if one else f"i{j} - lo0"] + [ix(d) for d in range(j + 1, r)])
            e.emit(depth, f"s{out.id}[{idx}] = {x}", n)
        elif n in scalar_red:
            e.emit(depth, _acc_update(n, f"{'s' if partial else 'r'}{out.id}", x), n)
        elif n in rowwise:
            e.emit(depth, f"s{out.id}[i{loops[-1]}] = {x}", n)
        elif n in array_red:
            dims = reduced_dims(n)
            keep = n.attrs.get("keepdim", False)
            idx = [("0" if d in dims else ix(d)) for d in range(r) if keep or d not in dims]
            tgt = f"v{out.id}[{', '.join(idx)}]"
            e.emit(depth, _acc_update(n, tgt, x), n)
        elif unit_view(n):   # a unit-dims view of a register (schedule's unit_views): itself
            regs[out] = x
        else:
            regs[out] = f"t{out.id}"
            e.emit(depth, f"t{out.id} = {_expr(n, [read(v, out.shape) for v in n.inputs], e)}", n)
    e.lines[inner:inner] = ["    " * (depth - 1) + line for line in
                            [f"{name} = {idx}" for name, idx in hoisted.items()] + bufs]
    for v in loop.stores:
        dims = range(r) if v.shape == space else unit_map(v.shape, space)
        tgt = f"v{v.id}[{', '.join('0' if d is None else ix(d) for d in dims)}]" if v.ndim \
            else f"v{v.id}"
        e.emit(depth, f"{tgt} = {regs[v]}")
    for sk in e.sinks.get(loop, ()):   # a cat's parts, into their blocks
        e.emit(depth, f"{sink_store(sk, space, ix)} = {regs[sk[2]]}")
    for n in rowwise:   # after the innermost loop: the row's reduction into its element
        k, dims = n.outputs[0].id, reduced_dims(n)
        keep = n.attrs.get("keepdim", False)
        tgt = f"v{k}[{', '.join(('0' if d in dims else ix(d)) for d in range(r) if keep or d not in dims)}]"
        if n.op == "sum.dim_IntList":
            e.emit(depth - 1, f"{tgt} += al.total(s{k}, {ext[loops[-1]]})")
        else:
            e.emit(depth - 1, f"r{k} = al.extreme(s{k}, {ext[loops[-1]]}, {n.op == 'amax.default'})")
            e.emit(depth - 1, _acc_update(n, tgt, f"r{k}"))
    if rp is not None:
        rows_axpy(e, rp, depth, f"i{j}", regs)
    for n in split:
        k = n.outputs[0].id
        count = f"np.int64({rows * rest})" if one else f"(hi0 - lo0) * {rest}"
        tot = f"al.total(al.reshape(s{k}, {shape_arg([rows * rest])}), {count})"
        e.emit(block, f"r{k}[b0] = {tot}" if partial else f"r{k} += {tot}")
    for n in scalar_red if partial else ():
        e.emit(block, f"r{n.outputs[0].id}[b0] = s{n.outputs[0].id}")
    for n in scalar_red + split:
        out = n.outputs[0]
        acc = f"al.total(r{out.id}, {nblocks})" if partial else f"r{out.id}"
        val = f"{_np_dtype(out.dtype)}({acc})"
        if out.ndim:  # keepdim over every dim
            e.emit(1, f"v{out.id} = al.full({shape_arg(out.shape)}, {val}, {_np_dtype(out.dtype)})", n)
        else:
            e.emit(1, f"v{out.id} = {val}", n)
    if rp is not None:
        rows_end(e, rp)


_STAMPS = {}


def _decorator(parallel):
    return (f'@numba.njit(error_model="numpy", no_cfunc_wrapper=True, '
            f'pipeline_class=pl.Lean{", parallel=True" if parallel else ""})')


def helper_stamps(import_lines, compiled_with=()):
    """``# module sha`` comment lines for the gradjit helper modules a generated module
    imports, and for the modules named in ``compiled_with`` (lowering modules that shape
    how it compiles). Their code ends up in the compiled function, so an edit must change
    the generated source (its content hash names the file and Numba's cache entry)."""
    mods = [f"gradjit.lowering.{p[3]}" for p in map(str.split, import_lines)
            if len(p) >= 4 and p[0] == "from" and p[1] == "gradjit.lowering"]
    return [f"# {mod} {_stamp(mod)}"
            for mod in sorted(mods) + [f"gradjit.lowering.{m}" for m in compiled_with]]


def _stamp(mod):
    if mod not in _STAMPS:
        import hashlib
        import importlib.util
        with open(importlib.util.find_spec(mod).origin, "rb") as f:
            _STAMPS[mod] = hashlib.sha256(f.read()).hexdigest()[:16]
    return _STAMPS[mod]


@dataclass
class Part:
    """A graph as one function of a module (a region body): its text, the functions it
    calls (``name -> text``), the import lines and constants it needs."""
    text: str
    functions: dict
    imports: set
    consts: list


def _rank_one(loop, inline, folds):
    """The loop's lines if it is an outer product a cached helper computes, else None."""
    return RANK_ONE and int(math.prod(loop.shape)) < PARALLEL_MIN and \
        rank_one(loop, inline, folds)


def generate(graph, name="entry", pack_inputs=False, part=False):
    e = _Emitter(graph)
    e.fast_math = os.environ.get("GRADJIT_FAST_MATH", "1") != "0"
    steps, inline = schedule(graph, unit_views=True, row_passes=True,
                            recompute=RECOMPUTE, runs_apart=(MIN_REPS, ROLL_MIN_STEPS))
    rolls = len(steps) + sum(len(s.node.inputs) - 1 for s in steps if isinstance(s, Stmt)
                             and s.node.op == "cat.default") >= ROLL_MIN_STEPS
    values = {v.id: v for v in graph.inputs}
    values.update((v.id, v) for n in graph.nodes for v in n.outputs)
    outliner = Outliner(values) if rolls else None
    # Without rolling, every loop is outlined when there are this many (see below).
    outline_every = not rolls and sum(isinstance(s, Loop) for s in steps) >= OUTLINE_MIN_LOOPS
    e.folds = view_folds(steps, graph) if FOLD_VIEWS else {}
    e.sinks, sunk = plan_sinks(steps, graph, {s for s in steps if isinstance(s, Loop)
                                              and not _rank_one(s, inline, e.folds)})
    blocks = []
    for step in steps:
        if step in sunk or isinstance(step, Stmt) and step.node.outputs[0] in e.folds:
            continue   # a view only loops read (they index its base), or a cat's part
        mark, par = len(e.lines), e.parallel
        e.parallel = False
        big = False
        # (a loop that might run in parallel stays a loop)
        r1 = isinstance(step, Loop) and _rank_one(step, inline, e.folds)
        if r1:   # an outer product, or one added to an accumulator: a cached helper
            e.imports.add("from gradjit.lowering import blas_cpu as bl")
            e.emit(1, *r1)
            defs = {v.id for n in step.nodes for v in n.outputs}
        elif isinstance(step, Loop):
            big = rolls and int(math.prod(step.shape)) >= OUTLINE_BIG
            _loop(e, step, inline, generic=big or outline_every)
            defs = {v.id for n in step.nodes for v in n.outputs}
            defs |= {sk[0].id for sk in e.sinks.get(step, ())}
        else:
            stmt(e, step.node)
            defs = {v.id for v in step.node.outputs}
            if e.breaks:   # the later blocks only fill what the first one made
                cuts = [mark] + e.breaks + [len(e.lines)]
                blocks.extend(Block(e.lines[a:b], defs if k == 0 else set(), e.parallel)
                              for k, (a, b) in enumerate(zip(cuts[:-1], cuts[1:])))
                e.breaks = []
                del e.lines[mark:]
                e.parallel = par
                continue
        block = Block(e.lines[mark:], defs, e.parallel, isinstance(step, Loop) and not r1)
        if isinstance(step, Loop) and step.rows is not None:
            # A row pass runs in parallel: in a function of its own, Numba's parallel
            # compile (several times a serial one) covers only it, not the whole entry.
            if outliner is None:
                outliner = Outliner(values)
            block = Block([outliner.call(block.lines, block.parallel)], defs, False, True, True)
        elif big:
            # A loop of an unrolled Python loop's step, called from the rolled loop: LLVM
            # vectorises it in a small function of its own, not inside the large entry
            # (W4: 183 -> 136 us per gradient, +0.26 s of compile).
            block = Block([outliner.call(block.lines, block.parallel)], defs, False, True, True)
        blocks.append(block)
        del e.lines[mark:]
        e.parallel = par
    if rolls:
        blocks, packs = roll(blocks, values, [v.id for v in graph.outputs], e.layout,
                             e.const_types, [v.id for v in graph.inputs], pack_inputs)
    else:
        packs = []
    loose = sum(isinstance(b, Block) and b.is_loop and not b.outlined for b in blocks)
    outline_all = loose >= OUTLINE_MIN_LOOPS
    if outline_all and outliner is None:
        outliner = Outliner(values)
    for b in blocks:
        if outline_all and isinstance(b, Block) and b.is_loop and not b.outlined:
            e.lines.append(outliner.call(b.lines, b.parallel))   # prange lives in the callee
        else:
            e.lines.extend(b.lines)
            e.parallel |= b.parallel
    if outliner is not None:
        e.lines = outliner.finish(e.lines)
    # Constants are loaded in the prologue only where a line still reads them (a rolled
    # loop reads its per-iteration constants inside the loop).
    used = set(re.findall(r"\bc(\d+)\b", "\n".join(ln.split("  # ")[0] for ln in e.lines)))
    e.prologue = [ln for k, ln in enumerate(e.prologue) if str(k) in used]
    # Results must never share memory with the caller's arrays: copy inputs and views
    # of inputs (reshape/transpose/slice statements return views) when returned.
    aliases = set(graph.inputs)
    for node in graph.nodes:
        if node.op in VIEW_OPS and node.inputs[0] in aliases:
            aliases.update(node.outputs)
    rets = [f"v{v.id}.copy()" if v in aliases and v.ndim else f"v{v.id}" for v in graph.outputs]
    packed = {n: (name, k) for name, ids in packs for k, n in enumerate(ids)}
    args = ", ".join([f"v{v.id}" for v in graph.inputs if v.id not in packed]
                     + [name for name, _ in packs] + ["consts"])
    named = set(re.findall(r"\bv(\d+)\b", "\n".join(ln.split("  # ")[0] for ln in e.lines + rets)))
    e.prologue += [f"    v{n} = {name}[{k}]" for n, (name, k) in packed.items() if str(n) in named]
    guards = [f"v{v.id}.shape != {tuple(v.shape)}" for v in graph.inputs
              if v.ndim and v.id not in packed]
    if guards:
        e.prologue[:0] = [f"    if {' or '.join(guards)}:",
                          f"        raise SignatureMismatch({_GUARD_MSG!r})"]
        e.imports.add("from gradjit.lowering.codegen_cpu import SignatureMismatch")
    decls, e.lines = hoist_shapes(e.lines)
    e.prologue += decls
    shared = [] if outliner is None else [f + "\n\n" for f in outliner.functions()]
    if part:   # (no module around it: codegen_cpu_regions.py puts it in the caller's)
        body = e.prologue + e.lines + [f"    return ({', '.join(rets)}{',' if len(rets) == 1 else ''})"]
        text = "".join(shared) + "\n".join([_decorator(e.parallel), f"def {name}({args}):"] + body)
        return Part(text + "\n", e.functions, e.imports, list(e.const_values))
    shared += [f + "\n\n" for f in e.functions.values()]
    if re.search(r"(?<![\w.])al\.\w+\(", "\n".join(e.prologue + e.lines + shared)):   # (any helper)
        e.imports.add("from gradjit.lowering import alloc_cpu as al")
    e.imports.add("from gradjit.lowering import pipeline_cpu as pl")   # (Numba's passes it runs)
    header = [
        f'"""gradjit generated module: {len(graph.nodes)} IR nodes, graph {graph.name!r}."""',
        "import math",
        "",
        "import numba",
        "import numpy as np",
        "from numba import prange",
        *sorted(e.imports),
        *helper_stamps(e.imports, compiled_with=("boxing_cpu",)),   # (runtime/compiler.py)
        "",
        f"LLVM_OPT = {LLVM_OPT_PARALLEL if e.parallel else LLVM_OPT_SERIAL}",
        *(["CODEGEN_OPT = 0"] if fast_codegen(steps) and not e.parallel else []),
        "",
        "",
        _decorator(e.parallel),
        f"def {name}({args}):",
    ]
    body = e.prologue + e.lines + [f"    return ({', '.join(rets)}{',' if len(rets) == 1 else ''})"]
    src = "\n".join(header[:-2]) + "\n" + "\n".join(shared) + "\n".join(header[-2:] + body) + "\n"
    pos = {v.id: i for i, v in enumerate(graph.inputs)}
    return Generated(src, np.array(e.const_values, dtype=np.float64), e.parallel,
                     tuple(tuple(pos[n] for n in ids) for _, ids in packs))
