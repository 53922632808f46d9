"""Sums of zero-padded placements become concatenations.

Contract
- ``merge_placements(graph) -> graph`` rewrites ``graph`` in place (called by
  ``passes.optimize`` on the graph it rebuilt, before dead code is dropped) and returns it.
- A *sum* is a tree of ``add.Tensor`` nodes (``alpha`` 1, one dtype and shape throughout)
  whose inner values are read once, by the tree. Its leaves that are *placements*
  (``slice_backward`` with step 1, read only by the sum) of one dim into one shape are
  regrouped: the parts placed at the same rows are added first (arrays of the part's
  size), then runs of touching rows are concatenated (``cat``) and placed once, or not at
  all where a run covers the whole dim. Placements whose rows partly overlap another
  group's stay as they are. The other leaves are added as before. A sum is rewritten only
  when that removes a placement.
- Why: the gradient of a value read through several of its slices (``a, b, c, d = th``,
  ``u, v = y``, ``x[:, :3]`` beside ``x[:, 3:]``) is the sum of one zero-filled array of
  the value's full shape per slice read. An ODE right-hand side that unpacks its state and
  parameters at every step made a dozen full-size zero fills and adds per step; regrouped
  they are one concatenation per value and step, and small adds.
- Addition is reassociated (parts first), so results can differ from the traced order in
  the last bits, as any sum the code generators reorder.
"""
from __future__ import annotations

from gradjit.lowering.restack import rewire
from gradjit.tracer.api import apply
from gradjit.tracer.trace import Tracer


def merge_placements(graph):
    users = graph.users()
    held = set(graph.outputs)
    for node in list(graph.nodes):
        if node.op != "add.Tensor" or not _summing(node):
            continue
        out = node.outputs[0]
        (reader,) = users.get(out, (None,)) if len(users.get(out, ())) == 1 else (None,)
        if out not in held and reader is not None and _summing(reader):
            continue   # not the root: its sum is part of the reader's
        leaves = _leaves(node, users, held)
        mark = len(graph.nodes)
        new = _regrouped(graph, leaves, users)
        if new is None:
            continue
        added = graph.nodes[mark:]
        rewire(graph, node, out, new, mark)
        for n in added:   # (kept up to date, not recomputed: one pass over the graph)
            for v in n.inputs:
                users.setdefault(v, []).append(n)
        users[new] = users.pop(out, [])
        if out in held:
            held.add(new)
    return graph


def _summing(node):
    """An add of two operands of the result's dtype and shape (no broadcast, no cast)."""
    if node.op != "add.Tensor" or node.attrs.get("alpha", 1) != 1:
        return False
    out = node.outputs[0]
    return all(v.shape == out.shape and v.dtype == out.dtype for v in node.inputs)


def _leaves(root, users, held):
    leaves, todo = [], list(root.inputs)
    while todo:
        v = todo.pop()
        p = v.node
        if (p is not None and p.op == "add.Tensor" and _summing(p) and v not in held
                and len(users.get(v, ())) == 1):
            todo.extend(p.inputs)
        else:
            leaves.append(v)
    return leaves


def _placed(v, users):
    """(dim, sizes, start, end) of a placement read once, else None."""
    p = v.node
    if p is None or p.op != "slice_backward.default" or len(users.get(v, ())) != 1:
        return None
    a = p.attrs
    if a["step"] != 1 or a["end"] is None:
        return None
    return a["dim"], tuple(a["input_sizes"]), a["start"], a["end"]


def _regrouped(graph, leaves, users):
    groups, rest = {}, []
    for v in leaves:
        where = _placed(v, users)
        if where is None:
            rest.append(v)
        else:
            groups.setdefault(where[:2], {}).setdefault(where[2:], []).append(v.node.inputs[0])
    plans = {key: _runs(sorted(rows)) for key, rows in groups.items()}
    total = sum(len(parts) for rows in groups.values() for parts in rows.values())
    placed = 0   # placements left after the rewrite: overlapping parts, runs short of the dim
    for (dim, sizes), (runs, loose) in plans.items():
        placed += sum(len(groups[(dim, sizes)][r]) for r in loose)
        placed += sum((run[0][0], run[-1][1]) != (0, sizes[dim]) for run in runs)
    if placed >= total:
        return None   # (decided before any node is made)
    terms = [Tracer(graph, v) for v in rest]
    for (dim, sizes), (runs, loose) in plans.items():
        rows = groups[(dim, sizes)]
        for lo, hi in loose:   # rows overlapping other rows: placed as they were
            terms += [_place(Tracer(graph, part), dim, sizes, lo, hi) for part in rows[(lo, hi)]]
        for run in runs:
            parts = [_sum(graph, rows[r]) for r in run]
            block = parts[0] if len(parts) == 1 else apply("cat.default", parts, {"dim": dim})
            lo, hi = run[0][0], run[-1][1]
            terms.append(block if (lo, hi) == (0, sizes[dim]) else
                         _place(block, dim, sizes, lo, hi))
    out = terms[0]
    for t in terms[1:]:
        out = out + t
    return out.value


def _runs(rows):
    """Sorted distinct (start, end) rows as (runs of touching rows, rows that overlap
    another: left alone)."""
    overlapping = set()
    for (a, b), (c, d) in zip(rows, rows[1:]):
        if c < b:
            overlapping.update({(a, b), (c, d)})
    runs = []
    for r in rows:
        if r in overlapping:
            continue
        if runs and runs[-1][-1][1] == r[0]:
            runs[-1].append(r)
        else:
            runs.append([r])
    return runs, sorted(overlapping)


def _sum(graph, parts):
    s = Tracer(graph, parts[0])
    for p in parts[1:]:
        s = s + Tracer(graph, p)
    return s


def _place(x, dim, sizes, lo, hi):
    return apply("slice_backward.default", [x], {"input_sizes": sizes, "dim": dim,
                                                 "start": lo, "end": hi, "step": 1})
