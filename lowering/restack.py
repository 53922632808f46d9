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
  and ``d + 1`` merged. Anything else is left alone.
- The old node is left dead for ``optimize`` to drop; readers and outputs read the new
  value (callers holding other values move them with the returned map).
- Why: a Python loop that collects its states and stacks them is, once ``fold_loops``
  has made the loop a scan, the scan's stacked output sliced per step and stacked again:
  ``T`` slices put back together, and ``T`` slices again in the backward. (When a cat
  was a sum of ``T`` zero-padded placements, a 300-step Euler loop stacking its states
  took 160 s to compile; rewritten it is one view.)
"""
from __future__ import annotations

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
        if new is not None:
            rewire(graph, node, node.outputs[0], new, mark)
            moved[node.outputs[0]] = new
    return moved


def _rebuilt(graph, node, producer):
    """``B`` (permuted, merged) when the parts of cat ``node`` are the slices of one ``B``."""
    out, d, parts = node.outputs[0], node.attrs["dim"], node.inputs
    base, e = None, None
    for k, src in enumerate(parts):
        while producer.get(src) is not None and producer[src].op in _VIEWS:
            src = producer[src].inputs[0]
        s = producer.get(src)
        if s is None or s.op != "slice.Tensor" or s.attrs["step"] != 1:
            return None
        a = s.attrs
        if a["start"] != k or a["end"] != k + 1 or (base is not None and (
                s.inputs[0] is not base or a["dim"] != e)):
            return None
        base, e = s.inputs[0], a["dim"]
    if len(parts) != base.shape[e] or base.dtype != out.dtype:
        return None
    rest = base.shape[:e] + base.shape[e + 1:]
    part = tuple(parts[0].shape)
    if any(tuple(p.shape) != part for p in parts):
        return None
    sizes = tuple(out.shape)
    if part == rest[:d] + (1,) + rest[d:]:
        merge = False
    elif part == rest and d < len(rest):
        merge = True
    else:
        return None
    x = Tracer(graph, base)
    if e != d:
        perm = [i for i in range(base.ndim) if i != e]
        perm.insert(d, e)
        x = x.permute(*perm)
    if merge:
        x = x.reshape(sizes)
    return x.value


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
