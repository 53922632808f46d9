"""CPU code generator: unit-dims views folded into the loops that read them.

Contract
- ``view_folds(steps, graph) -> {view value: base value}``. A statement that is a
  unit-dims view (``schedule.unit_view``: the same elements in the same order, size-1
  dims dropped, added or moved) folds when every node that reads it is a member of a
  fused loop without a row pass and it is not a graph output. Its statement is not
  emitted; the loops read its base instead (``fold_index``), and a loop that takes its
  extents from the view's shape takes them from the base's matching axis
  (``fold_axis``). A view of a folded view folds to the first base that is not one.
- Why: Numba lowers a view statement (``v[0][:, None]``, ``al.reshape``) to some 280
  LLVM instructions, an index into the base costs nothing more than the index into the
  view. A batch-of-one RNN's weight gradients read ``h.T`` for every step: W4 had four
  such views per entry (about 15% of its LLVM instructions).
- Only the CPU generator folds; a view read by a statement (a matmul, another shape op
  that does not fold) or returned is still built.
"""
from __future__ import annotations

from gradjit.lowering.schedule import Loop, Stmt, unit_view


def view_folds(steps, graph):
    in_loop = {n for st in steps if isinstance(st, Loop) and st.rows is None for n in st.nodes}
    users = graph.users()
    outputs = set(graph.outputs)
    views = [st.node for st in steps if isinstance(st, Stmt) and unit_view(st.node)]
    foldable = set()   # view nodes: decided last to first, so a view read only by views
    for node in reversed(views):   # that fold folds too
        v = node.outputs[0]
        readers = users.get(v, ())
        if v not in outputs and readers and all(n in foldable or n in in_loop for n in readers):
            foldable.add(node)
    folds = {}
    for node in views:
        if node in foldable:
            base = node.inputs[0]
            folds[node.outputs[0]] = folds.get(base, base)
    return folds


def _pairs(v, base):
    """Positions of the non-1 dims of ``v`` and of ``base``, matched in order."""
    return zip([j for j, n in enumerate(v.shape) if n != 1],
               [j for j, n in enumerate(base.shape) if n != 1])


def fold_index(v, idx, folds):
    """``(value, index strings)`` to read for ``v`` indexed by ``idx`` (one string per
    dim of ``v``): the base and its index when ``v`` folds, else ``v`` and ``idx``."""
    base = folds.get(v)
    if base is None:
        return v, idx
    out = ["0"] * base.ndim
    for j, k in _pairs(v, base):
        out[k] = idx[j]
    return base, out


def fold_axis(v, axis, folds):
    """``(value, axis)`` whose shape gives the extent of ``v``'s non-1 ``axis``."""
    base = folds.get(v)
    if base is None:
        return v, axis
    return base, dict(_pairs(v, base))[axis]
