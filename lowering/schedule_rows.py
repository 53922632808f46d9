"""Row passes: a matrix-vector product, the elementwise loop over its result and the
transposed product back through the same matrix, fused into one pass over the rows.

Contract
- ``row_passes(steps, graph)`` (the CPU generator's schedule, after fusion groups)
  finds, for a 2-D matrix ``M`` of shape (n, k) with ``n * k >= ROW_PASS_MIN``:
  ``u = mm(M, a)`` (a of shape (k, 1)) or ``u = mm(a', t(M))`` (a' of shape
  (1, k): ``w @ X.T``); one ``Loop`` over ``n`` elements (one
  dim not 1) that is the only reader of ``u`` (directly or through a unit-dims
  view) and whose full reductions are sums, with no partial reduction; and
  ``g = mm(t(M), c)`` or ``g = mm(c', M)``, ``c`` a member of that loop (or a
  unit-dims view of one). It then drops the statements of both products (and
  the views only they read) and sets ``loop.rows`` to a ``RowPass``: the loop
  computes ``u``'s element of each row as a dot product with the row, and adds
  ``c``'s element times the row into ``g``. Everything else is unchanged.
- Why: a linear model's gradient (least squares, logistic regression, any loss
  of ``X @ w``) reads ``X`` twice through BLAS, forward and back; the pass
  reads it once, and the elementwise work between rides along. W5 (10000 x 100)
  goes from 2 gemv calls to one pass over X's 8 MB.
- Legality: ``M`` and ``a`` are produced before the loop (they are ``u``'s
  inputs, and ``u`` is read first in the loop), ``g`` only after it (its
  statement followed the loop), so moving both products into the loop keeps
  every value's producer before its readers.
"""
from __future__ import annotations

from dataclasses import dataclass

from gradjit.lowering.schedule import (UNIT_VIEW_OPS, Loop, Stmt, permutation, squeezed,
                                      unit_view)

ROW_PASS_MIN = 1 << 18   # elements of M: below this, two BLAS calls are as fast
TRANSPOSES = ("t.default", "transpose.int", "permute.default")


@dataclass(eq=False)
class RowPass:
    matrix: object      # M, (n, k)
    vector: object      # a, (k, 1); or (1, k) when the product is a' @ M.T
    product: object     # u = M @ a (n, 1) or a' @ M.T (1, n): a register in the loop
    aliases: tuple      # unit-dims views of u the loop reads (the same register)
    back: object        # the node g = M.T @ c (or c' @ M)
    source: object      # c's register value in the loop


def _readers(steps):
    """value -> the steps that read it (a step: a Loop or a Stmt)."""
    out = {}
    for st in steps:
        nodes = st.nodes if isinstance(st, Loop) else [st.node]
        for n in nodes:
            for v in n.inputs:
                out.setdefault(v, []).append(st)
        if isinstance(st, Loop) and st.rows is not None:   # a fused pass reads M and a
            for v in (st.rows.matrix, st.rows.vector):
                out.setdefault(v, []).append(st)
    return out


def _match(steps, readers, outputs, i):
    """The row pass starting at the product statement ``steps[i]``, or None."""
    node = steps[i].node
    if node.op != "mm.default":
        return None
    x, y = node.inputs
    u = node.outputs[0]
    drop = [steps[i]]
    if x.ndim == 2 and y.shape == (x.shape[1], 1) and not _base(x)[1]:   # M @ a
        m, a = _base(x)[0], y
    elif x.shape[:1] == (1,) and y.ndim == 2 and _base(y)[1]:   # a' @ M.T
        m, a = _base(y)[0], x
    else:
        return None
    n, k = m.shape
    if m.dtype.kind != "f" or u.dtype != m.dtype or n * k < ROW_PASS_MIN or u in outputs:
        return None
    loops, aliases = set(), []
    for st in readers.get(u, []):
        if isinstance(st, Stmt) and unit_view(st.node) and st.node.outputs[0] not in outputs:
            aliases.append(st.node.outputs[0])
            drop.append(st)
            loops.update(readers.get(st.node.outputs[0], [None]))
        else:
            loops.add(st)
    if len(loops) != 1:
        return None
    loop = loops.pop()
    if not isinstance(loop, Loop) or squeezed(loop.shape) != (n,) or loop.rows is not None:
        return None
    red = loop.reductions
    if any(r.op != "sum.default" or r.attrs.get("dim") for r in red):
        return None
    for j in range(steps.index(loop) + 1, len(steps)):
        st = steps[j]
        back = st.node if isinstance(st, Stmt) else None
        if back is None or back.op != "mm.default" or back.outputs[0] in outputs:
            continue
        c = _back_source(back, m, loop, steps, n)
        if c is not None:
            return loop, RowPass(m, a, u, tuple(aliases), back, c), drop + [st]
    return None


def _base(v):
    """(matrix, transposed): the matrix the 2-D ``v`` is, through any chain of 2-D
    transposes (``t(t(X))`` is ``X``: backward formulas transpose transposes)."""
    flip = False
    while (v.node is not None and v.node.op in TRANSPOSES and v.node.inputs
           and v.node.inputs[0].ndim == 2 and permutation(v.node) == [1, 0]):
        v, flip = v.node.inputs[0], not flip
    return v, flip


def _back_source(back, m, loop, steps, n):
    """c, when ``back`` is ``M.T @ c`` or ``c' @ M`` (through any transposes of M) with
    ``c`` a member of ``loop`` or a unit-dims view of one; else None."""
    x, y = back.inputs
    if x.shape == (1, n) and y.ndim == 2 and _base(y) == (m, False):
        vec = x
    elif y.shape == (n, 1) and x.ndim == 2 and _base(x) == (m, True):
        vec = y
    else:
        return None
    if back.outputs[0].dtype != m.dtype or vec.dtype != m.dtype:
        return None
    if vec in loop.members:
        return vec
    st = next((s for s in steps if isinstance(s, Stmt) and vec in s.node.outputs), None)
    if st is None or not unit_view(st.node) or st.node.inputs[0] not in loop.members:
        return None
    return st.node.inputs[0]   # (its view statement is dropped when nothing else reads it)


def _dead_views(steps, outputs):
    """``(steps, readers)``: ``steps`` without the transposes and views no step reads any
    more (those that only fed the fused products), and their readers map."""
    while True:
        readers = _readers(steps)
        dead = [s for s in steps if isinstance(s, Stmt) and s.node.op in UNIT_VIEW_OPS
                and not any(readers.get(v) or v in outputs for v in s.node.outputs)]
        if not dead:
            return steps, readers
        steps = [s for s in steps if s not in dead]


def _candidate(step):
    """A product large enough to start a row pass (cheap: checked on every step, so a
    graph of a thousand steps (an unrolled RNN) pays nothing for the analysis)."""
    return isinstance(step, Stmt) and step.node.op == "mm.default" and any(
        v.ndim == 2 and v.shape[0] * v.shape[1] >= ROW_PASS_MIN for v in step.node.inputs)


def row_passes(steps, graph):
    """``steps`` with each row pass found fused into its loop (see the contract)."""
    outputs = set(graph.outputs)
    readers = None   # built when a candidate needs it, again after each fusion
    i = 0
    while i < len(steps):
        if not _candidate(steps[i]):
            i += 1
            continue
        if readers is None:
            readers = _readers(steps)
        found = _match(steps, readers, outputs, i)
        if found is None:
            i += 1
            continue
        loop, rp, drop = found
        loop.rows = rp
        steps, readers = _dead_views([s for s in steps if s not in drop], outputs)
        # c was stored for the product's view; the pass reads its register instead.
        c = rp.source
        if c in loop.stores and c not in outputs and all(st is loop for st in readers.get(c, [])):
            loop.stores.remove(c)
        i = 0
    return steps
