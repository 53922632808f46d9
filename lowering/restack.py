"""Concatenations that put one value back together, rewritten as that value or a view of it.

Contract
- ``restack(graph, since=0) -> {old Value: new Value}`` rewrites ``graph`` in place,
  before the adjoint is built on it (as ``fold_loops``; the returned map and ``since``
  likewise).
- A concatenation is one ``cat.default`` node. When its parts are, in order and tiling
  the whole result, the width-1 slices ``B[k]`` of one value ``B`` along one dim ``e``
  (``slice.Tensor``, through ``squeeze`` / ``unsqueeze`` / ``view`` nodes, which keep C
  order), it is ``B`` itself with dim ``e`` moved to the cat's dim ``d``: each part with
  a size-1 dim at ``d`` (``np.stack(parts, axis=d)``) gives ``B`` permuted, each part
  without it (``np.concatenate(parts, axis=d)``) gives that permutation with dims ``d``
  and ``d + 1`` merged. When runs of such slices (``B[a], B[a + 1], ... B[b - 1]``) tile
  only part of the result, each run becomes one block ``B[a:b]`` (so laid out) and the
  concatenation keeps the other parts as they are: a loop whose first state is made
  apart from the others (its first step unrolled, the rest folded) stacks as one part
  and one block, not ``T`` parts. Anything else is left alone.
- The old node is left dead for ``optimize`` to drop; readers and outputs read the new
  value (callers holding other values move them with the returned map).
- Why: a Python loop that collects its states and stacks them is, once ``fold_loops``
  has made the loop a scan, the scan's stacked output sliced per step and stacked again:
  ``T`` slices put back together, and ``T`` slices again in the backward. (When a cat
  was a sum of ``T`` zero-padded placements, a 300-step Euler loop stacking its states
  took 160 s to compile; rewritten it is one view.)
"""
from __future__ import annotations

from gradjit.tracer.dispatch import apply
from gradjit.tracer.trace import Tracer

_VIEWS = {"squeeze.dim", "squeeze.default", "unsqueeze.default", "view.default"}


def restack(graph, since=0):
    producer = {v: n for n in graph.nodes for v in n.outputs}
    moved = {}
    for node in list(graph.nodes):
        if node.op != "cat.default" or node.outputs[0].id < since:
            continue
        mark = len(graph.nodes)
        new = _rebuilt(graph, node, producer)
        if new is None:
            del graph.nodes[mark:]   # (a block built, then the whole refused)
        else:
            rewire(graph, node, node.outputs[0], new, mark)
            moved[node.outputs[0]] = new
    return moved


def _unit_slice(src, producer):
    """``(B, e, k)`` when ``src`` is ``B[k]`` along dim ``e`` (through views), else None."""
    while producer.get(src) is not None and producer[src].op in _VIEWS:
        src = producer[src].inputs[0]
    s = producer.get(src)
    if s is None or s.op != "slice.Tensor" or s.attrs["step"] != 1:
        return None
    a = s.attrs
    if a["start"] is None or a["end"] != a["start"] + 1 or a["start"] < 0:
        return None
    return s.inputs[0], a["dim"], a["start"]


def _runs(parts, producer):
    """The parts in maximal runs: ``(first part index, count, (B, e, k0) | None)``, a run
    being consecutive unit slices ``B[k0], B[k0 + 1], ...`` of one ``B`` along one dim."""
    runs = []
    for i, p in enumerate(parts):
        u = _unit_slice(p, producer)
        if runs and u is not None and runs[-1][2] is not None:
            i0, n, (b, e, k0) = runs[-1]
            if u[0] is b and u[1] == e and u[2] == k0 + n and parts[i0].shape == p.shape:
                runs[-1] = (i0, n + 1, (b, e, k0))
                continue
        runs.append((i, 1, u))
    return runs


def _block(graph, base, e, k0, n, part, d, dtype):
    """``B[k0:k0+n]`` along ``e`` laid out as ``n`` parts of shape ``part`` stacked
    (or concatenated) at dim ``d``, or None when the parts are not ``B``'s slices so."""
    if base.dtype != dtype:
        return None
    rest = base.shape[:e] + base.shape[e + 1:]
    if part == rest[:d] + (1,) + rest[d:]:
        merge = False
    elif part == rest and d < len(rest):
        merge = True
    else:
        return None
    x = Tracer(graph, base)
    if (k0, n) != (0, base.shape[e]):
        x = x[(slice(None),) * e + (slice(k0, k0 + n),)]
    if e != d:
        perm = [i for i in range(base.ndim) if i != e]
        perm.insert(d, e)
        x = x.permute(*perm)
    if merge:
        x = x.reshape(part[:d] + (n * part[d],) + part[d + 1:])
    return x


def _rebuilt(graph, node, producer):
    """The cat of ``node`` with each run of slices of one ``B`` made one block of ``B``:
    ``B`` itself (permuted, merged) when one run tiles it, else a cat of fewer parts."""
    out, d, parts = node.outputs[0], node.attrs["dim"], node.inputs
    runs = _runs(parts, producer)
    if all(n < 2 for _, n, _ in runs):
        return None
    pieces = []
    for i0, n, u in runs:
        block = None if n < 2 else _block(graph, *u[:2], u[2], n, tuple(parts[i0].shape), d,
                                          out.dtype)
        if block is None:
            pieces += [Tracer(graph, v) for v in parts[i0:i0 + n]]
        else:
            pieces.append(block)
    if len(pieces) == len(parts):
        return None
    if len(pieces) == 1:
        x = pieces[0]
    else:
        x = apply("cat.default", pieces, {"dim": d})
    return x.value if tuple(x.value.shape) == tuple(out.shape) else None


def rewire(graph, last, old, new, mark):
    """Readers of ``old`` read ``new``; the nodes made for ``new`` (from ``mark`` on) move
    to right after ``last``, the node that made ``old`` (everything they read is before it).
    Also used by ``placements``."""
    added = graph.nodes[mark:]
    del graph.nodes[mark:]
    at = graph.nodes.index(last) + 1
    graph.nodes[at:at] = added
    for n in graph.nodes:
        n.inputs = [new if v is old else v for v in n.inputs]
    graph.outputs = [new if v is old else v for v in graph.outputs]
    graph.running_updates = [(a, new if b is old else b, c) for a, b, c in graph.running_updates]
