"""Concatenations that put one value back together, rewritten as that value or a view of it.

Contract
- ``restack(graph, roots=()) -> {old Value: new Value}`` rewrites ``graph`` in place, before
  the adjoint is built on it (as ``fold_loops``; ``roots`` and the returned map likewise).
- A concatenation is traced as a sum of zero-padded placements (``methods_index.cat``:
  ``slice_backward`` nodes summed by a chain of ``add.Tensor``). When the placed parts are,
  in order and tiling the whole result, the width-1 slices ``B[k]`` of one value ``B``
  along one dim ``e`` (``slice.Tensor``, through ``squeeze`` / ``unsqueeze`` / ``view``
  nodes, which keep C order), the sum is ``B`` itself with dim ``e`` moved to the
  placement dim ``d``: each part with a size-1 dim at ``d`` (``np.stack(parts, axis=d)``)
  gives ``B`` permuted, each part without it (``np.concatenate(parts, axis=d)``) gives
  that permutation with dims ``d`` and ``d + 1`` merged. Anything else is left alone.
- The old chain is left dead for ``optimize`` to drop; readers, outputs and roots read
  the new value.
- Why: a Python loop that collects its states and stacks them is, once ``fold_loops``
  has made the loop a scan, the scan's stacked output sliced per step and stacked again:
  ``T`` placements of a ``(T, ...)`` array, ``O(T^2)`` work and ``O(T)`` nodes in the
  forward and again in the backward. A 300-step Euler loop stacking its states took
  160 s to compile; rewritten it is one view.
"""
from __future__ import annotations

from gradjit.tracer.trace import Tracer

_VIEWS = {"squeeze.dim", "squeeze.default", "unsqueeze.default", "view.default"}


def restack(graph, roots=()):
    users = graph.users()
    producer = {v: n for n in graph.nodes for v in n.outputs}
    held = set(graph.outputs) | set(roots) | {u[1] for u in graph.running_updates}
    moved = {}
    done = set()
    for node in reversed(list(graph.nodes)):
        if node in done or node.op != "add.Tensor":
            continue
        chain = _chain(node, producer, users, held)
        if chain is None:
            continue
        adds, parts = chain
        done.update(adds)
        mark = len(graph.nodes)
        new = _rebuilt(graph, node.outputs[0], parts, producer)
        if new is not None:
            _rewire(graph, node, node.outputs[0], new, mark)
            moved[node.outputs[0]] = new
    if moved:
        for k in [k for k, v in moved.items() if v in moved]:
            moved[k] = moved[moved[k]]
    return moved


def _chain(last, producer, users, held):
    """The adds of a concatenation ending at ``last`` and its placements in order, or None."""
    adds, parts, cur = [], [], last
    while True:
        if cur.op != "add.Tensor" or cur.attrs.get("alpha", 1) != 1:
            return None
        a, b = cur.inputs
        pb = producer.get(b)
        if pb is None or pb.op != "slice_backward.default" or len(users.get(b, ())) != 1:
            return None
        adds.append(cur)
        parts.append(pb)
        pa = producer.get(a)
        if pa is None or len(users.get(a, ())) != 1 or a in held:
            return None
        if pa.op == "slice_backward.default":
            parts.append(pa)
            return adds, parts[::-1]
        cur = pa


def _rebuilt(graph, out, parts, producer):
    """``B`` (permuted, merged) when ``parts`` tile ``out`` with the slices of one ``B``."""
    sb0 = parts[0].attrs
    d, sizes = sb0["dim"], tuple(sb0["input_sizes"])
    if sizes != tuple(out.shape) or any(p.attrs["dim"] != d or p.attrs["step"] != 1
                                        or tuple(p.attrs["input_sizes"]) != sizes
                                        for p in parts):
        return None
    base, e, pos = None, None, 0
    for k, p in enumerate(parts):
        if p.attrs["start"] != pos:
            return None
        pos = p.attrs["end"]
        src = p.inputs[0]
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
    if pos != sizes[d] or len(parts) != base.shape[e] or base.dtype != out.dtype:
        return None
    rest = base.shape[:e] + base.shape[e + 1:]
    part = tuple(parts[0].inputs[0].shape)
    if any(tuple(p.inputs[0].shape) != part for p in parts):
        return None
    stacked = rest[:d] + (1,) + rest[d:]
    if part == stacked and sizes == rest[:d] + (len(parts),) + rest[d:]:
        merge = False
    elif part == rest and d < len(rest) and sizes == (
            rest[:d] + (len(parts) * rest[d],) + rest[d + 1:]):
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


def _rewire(graph, last, old, new, mark):
    """Readers of ``old`` read ``new``; the nodes made for ``new`` (from ``mark`` on) move
    to right after ``last``, the chain's final add (everything ``new`` reads is before it)."""
    added = graph.nodes[mark:]
    del graph.nodes[mark:]
    at = graph.nodes.index(last) + 1
    graph.nodes[at:at] = added
    for n in graph.nodes:
        n.inputs = [new if v is old else v for v in n.inputs]
    graph.outputs = [new if v is old else v for v in graph.outputs]
    graph.running_updates = [(a, new if b is old else b, c) for a, b, c in graph.running_updates]
