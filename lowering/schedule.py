"""Scheduling core shared by the code generators: fusion groups.

Contract
- ``schedule(graph) -> [Loop | Stmt]`` in execution order.
- A ``Loop`` runs one loop nest over an iteration shape. Its members are
  elementwise nodes whose output has that shape and reductions whose *input*
  has that shape (a reduction absorbs its producers). Member values live in
  registers; only values read outside the loop (or returned) are stored.
- A ``Stmt`` is a node that is not a loop body: matmul (BLAS), shape ops
  (views / reshapes) and kernels (scans, gathers: their own loop nest).
- Legality: a node joins an earlier loop only if every input is available
  when that loop runs (an elementwise member of it, or produced by an earlier
  step); a reduction's result is never read inside its own loop.
- Values of ``zeros_like`` / ``ones_like`` (and expansions of them) that only
  loops read are *inline constants*: no step computes them, readers use the
  literal. This keeps a gradient seed from splitting forward and backward
  loops. Nodes only such constants read are dead, except an index op whose traced
  index no live op checks (``unchecked_indices``: an index out of bounds raises, as
  NumPy and the interpreter do, even where its value is unused).
- ``schedule(graph) -> (steps, inline)``; ``Loop.stores`` / ``Loop.reductions``
  tell the emitter what to allocate. Targets (CPU, CUDA) only render; they
  never regroup.
- ``unit_views=True`` (the CPU generator): iteration shapes that differ only in
  size-1 dims (``(1, n)``, ``(n,)``) are one space. A view that only drops or
  adds size-1 dims of a loop's register joins that loop as an alias, and
  elementwise nodes of an equivalent shape join it too (a batch-of-one RNN's
  bias gradient: ``(1, n)`` product, ``(n,)`` view, ``(n,)`` sum, one loop; a
  view of an earlier loop's register stays a statement, a view not a copy). A
  member's array dims map to the loop's by the order of their non-1 dims
  (``unit_map``); reductions still need their exact space.
- ``row_passes=True`` (the CPU generator) fuses a matrix-vector product, the loop
  over its result and the transposed product back into one pass over the matrix's
  rows (``schedule_rows.py``: ``Loop.rows``).
- ``runs_apart=(T, N)`` (the CPU generator: its roller's ``MIN_REPS`` and
  ``ROLL_MIN_STEPS``): in a run of at least ``T`` repeated steps spanning at least ``N``
  nodes (an unrolled loop: ``runs.step_starts``; shorter runs are chance, four ``mul``
  in a row of W2's adjoint, and splitting them cost a pass), a node joins a loop made
  before its own step only to read one of that loop's registers that no other step of
  the run joined it for (an elementwise chain, each step reading the last, stays one pass
  over memory). Other joins of an earlier step's loop fuse unrelated work (``np.sin(x)``
  of each step's ``x`` of a list, ``x * scale`` of a ``scale`` made once before the
  loop): they save only a loop's overhead but merge every step's copy into one loop as
  long as the run, the roller then finds no repeated steps, and the compile grows with
  the trip count (an RNN over a list of 100 inputs: 12 s against 2 s without the ``sin``).
- Views float: a view statement (``FLOATING``: slices, squeezes, transposes ...) can run
  as soon as its input exists, so a node that reads it may join a loop made before the
  view's place in the graph (its readiness is its input's, not its own position), and the
  view is emitted just before its first reader. Why: an ODE's right-hand side reads rows of
  its state (``y[0]``, ``th[2]``) between elementwise ops; each view was a barrier, and an
  RK4 stage of one iteration space was five loops instead of one (compile time follows
  the statement count).
- ``recompute=True`` (the CPU generator) computes a cheap elementwise value again in
  the later loops that read it instead of storing it, where that moves fewer bytes
  (``schedule_remat.py``).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from gradjit.lowering.runs import step_starts
from gradjit.tracer.registry import get_op

REDUCTIONS = {"sum.default", "sum.dim_IntList", "amax.default", "amin.default", "prod.default",
              "prod.dim_int"}
CONSTANT_OPS = {"zeros_like.default": 0, "ones_like.default": 1}
# Views that keep the elements' order (C order in, C order out): a chain of them is a
# reshape of its start (lowering/passes.py drops round trips; codegen_cpu_sink.py looks
# through them to a stacked register).
ORDER_VIEWS = {"view.default", "squeeze.default", "squeeze.dim", "unsqueeze.default"}
FLOATING = {"view.default", "squeeze.default", "squeeze.dim", "unsqueeze.default",
            "permute.default", "transpose.int", "t.default", "slice.Tensor", "expand.default",
            "select.int"}


@dataclass(eq=False)
class Loop:
    shape: tuple
    nodes: list = field(default_factory=list)
    stores: list = field(default_factory=list)      # member values written to arrays
    members: set = field(default_factory=set)       # values computed in this loop
    rows: object = None   # a RowPass fused in (schedule_rows.py; CPU only), else None

    @property
    def reductions(self):
        return [n for n in self.nodes if n.op in REDUCTIONS]


@dataclass(eq=False)
class Stmt:
    node: object


def permutation(node):
    """The axis permutation of a ``permute`` / ``transpose`` / ``t`` node."""
    perm = list(range(node.inputs[0].ndim))
    if node.op == "permute.default":
        return list(node.attrs["dims"])
    if node.op == "transpose.int":
        d0, d1 = node.attrs["dim0"], node.attrs["dim1"]
        perm[d0], perm[d1] = perm[d1], perm[d0]
        return perm
    return perm[::-1]   # t: 0-d, 1-d or 2-d


def reduced_dims(node):
    """Dims of the reduction's input that are reduced."""
    ndim = node.inputs[0].ndim
    dim = node.attrs.get("dim")
    if isinstance(dim, int):   # prod.dim_int
        return (dim,)
    return tuple(range(ndim)) if not dim else tuple(dim)


UNIT_VIEW_OPS = {"view.default", "squeeze.default", "squeeze.dim", "unsqueeze.default",
                 "t.default", "transpose.int", "permute.default"}


def squeezed(shape):
    return tuple(n for n in shape if n != 1)


def unit_view(node):
    """``node`` is a view that only drops, adds or moves size-1 dims (same elements, same
    order)."""
    if node.op not in UNIT_VIEW_OPS:
        return False
    x, out = node.inputs[0], node.outputs[0]
    if squeezed(x.shape) != squeezed(out.shape) or not x.ndim or not out.ndim:
        return False
    if node.op in ("view.default", "squeeze.default", "squeeze.dim", "unsqueeze.default"):
        return True
    perm = permutation(node)   # a permutation: the non-1 dims keep their order
    kept = [d for d in perm if x.shape[d] != 1]
    return kept == sorted(kept)


def unit_map(shape, space):
    """Per dim of an array of ``shape`` in a loop over ``space`` (equal but for size-1 dims):
    the loop dim it follows (non-1 dims in order), or None (a size-1 dim: index 0)."""
    loop_dims = iter([d for d, n in enumerate(space) if n != 1])
    return [None if n == 1 else next(loop_dims) for n in shape]


def _space(node):
    kind = get_op(node.op).kind
    if node.op in REDUCTIONS:
        return node.inputs[0].shape
    if kind == "elementwise":
        return node.outputs[0].shape
    if kind in ("matmul", "shape", "kernel"):
        return None
    raise NotImplementedError(f"no code generation for op '{node.op}' (kind {kind}): it must be "
                              f"decomposed by lowering/passes.py before scheduling")


def _inline_constants(graph):
    users = graph.users()
    outputs = set(graph.outputs)
    inline = {}
    for node in graph.nodes:
        out = node.outputs[0]
        if node.op in CONSTANT_OPS:
            value = CONSTANT_OPS[node.op]
        elif node.op == "expand.default" and node.inputs[0] in inline:
            value = inline[node.inputs[0]]
        else:
            continue
        if out not in outputs and all(_space(u) is not None for u in users.get(out, [])):
            inline[out] = value
    # Nodes read only by inline constants (e.g. the loss under a seed) are dead, but for
    # index checks no live op makes (see ``unchecked_indices``).
    forced = set()
    while True:
        dead = set()
        # A multi-output node (max.dim) is dead only when every output is.
        for node in reversed(graph.nodes):
            outs = node.outputs
            if node in forced or any(o in inline or o in outputs for o in outs):
                continue
            readers = [u.outputs[0] for o in outs for u in users.get(o, [])]
            if readers and all(r in inline or r in dead for r in readers):
                dead.update(outs)
        more = unchecked_indices(graph, lambda n: n.outputs[0] not in dead) - forced
        if not more:
            return inline, dead
        forced |= more


# ops that check a traced index against a bound (inputs[1] against inputs[0].shape[dim])
CHECKS_INDEX = {"index_select.default", "index_add.default", "gather.default",
                "scatter_add.default"}


def _index_check(node):
    x = node.inputs[0]
    return node.inputs[1], (x.shape[node.attrs["dim"]] if x.ndim else 1)


def unchecked_indices(graph, kept):
    """The index ops of ``graph`` that ``kept(node)`` drops and whose traced index no kept
    op checks against the same bound. Dead code keeps them: NumPy raises for an index out
    of bounds even where the value is unused (``np.add.at(y, i, 1.0)`` in a gradient that
    reads nothing of ``y``), and so does the interpreter; compiled code must not answer."""
    ops = [n for n in graph.nodes if n.op in CHECKS_INDEX]
    checked = {_index_check(n) for n in ops if kept(n)}
    return {n for n in ops if not kept(n) and n.inputs[1] not in graph.constants
            and _index_check(n) not in checked}


def schedule(graph, unit_views=False, row_passes=False, recompute=False, runs_apart=None):
    inline, dead = _inline_constants(graph)
    # in a run of repeated steps, a node joins an earlier step's loop only to read its registers
    # (each register for one step of the run)
    starts = step_starts(graph.nodes, *runs_apart) if runs_apart else {}
    barrier, step_no, reasons = 0, 0, {}   # reasons: register -> the step that joined for it
    same = (lambda a, b: squeezed(a) == squeezed(b)) if unit_views else (  # noqa: E731
        lambda a, b: a == b)
    steps = []
    step_of = {}      # value -> index of the producing step
    ready = {}        # value -> index of the step after which it can be read (floating views:
    #                   their input's)
    elementwise_in = {}  # value -> Loop where it is a register (elementwise member)
    for pos, node in enumerate(graph.nodes):
        if pos in starts:
            barrier, step_no = len(steps), step_no + 1
            if starts[pos] != "step":   # (a run starts or ends: its reasons are done)
                reasons = {}
        if node.outputs[0] in inline or node.outputs[0] in dead:
            continue
        space = _space(node)
        # A unit-dims view joins the loop its input is a register of only when that loop is
        # the last step: joining an earlier one would store a copy far from its readers.
        alias = unit_views and unit_view(node) and steps and \
            elementwise_in.get(node.inputs[0]) is steps[-1]
        if alias:
            space = node.outputs[0].shape
        exact = node.op in REDUCTIONS or (space is not None and not unit_views)
        target = None
        if space is not None:
            for idx in range(len(steps) - 1, -1, -1):
                st = steps[idx]
                ok_here = isinstance(st, Loop) and (
                    st.shape == space if exact else same(st.shape, space)) and (
                    not alias or elementwise_in[node.inputs[0]] is st) and all(
                    ready.get(v, -1) < idx or elementwise_in.get(v) is st for v in node.inputs
                ) and (idx >= barrier or any(elementwise_in.get(v) is st and reasons.get(
                    v, step_no) == step_no for v in node.inputs))
                if ok_here:
                    target = idx
                    break
                if any(ready.get(v) == idx for v in node.inputs):
                    break
        if space is None or (alias and target is None):
            steps.append(Stmt(node))
            idx = len(steps) - 1
            space = None
        elif target is None:
            steps.append(Loop(space, [node]))
            idx = len(steps) - 1
        else:
            idx = target
            steps[idx].nodes.append(node)
            if idx < barrier:
                for v in node.inputs:
                    if elementwise_in.get(v) is steps[idx]:
                        reasons.setdefault(v, step_no)
        floats = space is None and node.op in FLOATING
        for v in node.outputs:
            step_of[v] = idx
            ready[v] = max((ready.get(u, -1) for u in node.inputs), default=-1) if floats \
                else idx
            if space is not None and node.op not in REDUCTIONS:
                elementwise_in[v] = steps[idx]
                steps[idx].members.add(v)
    # Which register values must be stored: read by another step, or returned.
    for node in graph.nodes:
        if node.outputs[0] in inline or node.outputs[0] in dead:
            continue
        home = steps[step_of[node.outputs[0]]]
        for v in node.inputs:
            loop = elementwise_in.get(v)
            if loop is not None and loop is not home and v not in loop.stores:
                loop.stores.append(v)
    for v in graph.outputs:
        loop = elementwise_in.get(v)
        if loop is not None and v not in loop.stores:
            loop.stores.append(v)
    steps = _views_before_readers(steps, step_of, ready)
    if recompute:
        from gradjit.lowering.schedule_remat import recompute as remat
        steps = remat(steps, graph, inline)
    if row_passes:
        from gradjit.lowering.schedule_rows import row_passes as fuse_rows
        steps = fuse_rows(steps, graph)
    return steps, inline


def _views_before_readers(steps, step_of, ready):
    """``steps`` with each floating view that a step before it reads moved to just before
    its first reader (with the floating views it reads in turn); the rest keep their order."""
    moved = {idx for idx, st in enumerate(steps) if isinstance(st, Stmt)
             and ready[st.node.outputs[0]] < idx}
    if not moved:
        return steps
    out, done = [], set()

    def emit(idx):
        if idx in done:
            return
        done.add(idx)
        for v in _reads(steps[idx]):
            j = step_of.get(v)
            if j in moved and j not in done:
                emit(j)
        out.append(steps[idx])

    for idx in range(len(steps)):
        emit(idx)
    return out


def _reads(step):
    if isinstance(step, Stmt):
        return step.node.inputs
    return [v for n in step.nodes for v in n.inputs]
