"""Reverse mode: append the adjoint of a graph, formula by formula.

Contract
- ``adjoint(graph, outputs, seeds, wrt)`` appends to ``graph`` the nodes that
  compute d(sum_i <seeds[i], outputs[i]>)/d(wrt[j]) and returns, for each
  ``wrt[j]``, a ``Value`` or ``None`` (no dependence: the gradient is zero and
  is not materialised).
- Like micrograd: walk the nodes in reverse topological order with a dict of
  accumulated cotangents; an absent entry means zero. Only nodes on a path
  from ``wrt`` to ``outputs`` are differentiated, and only the inputs that
  need a gradient are asked for (``grad_input_mask``).
- Like PyTorch's engine: a gradient is summed back to its input's shape when
  the op broadcast (``sum_to``) and cast to the input's dtype; a value used
  twice accumulates; non-differentiable outputs stop the walk.
- Because formulas are built from ordinary ops, the result can be fed to
  ``adjoint`` again (higher order).
- Extension points for the runtime (which owns hooks and custom Functions):
  ``rules`` maps an op name to ``rule(graph, node, grad_outs, mask) -> [Value |
  None]`` used instead of a yaml entry; ``on_grad(value, cot) -> cot`` sees
  each intermediate value's complete cotangent just before it flows into the
  value's producer, and may replace it (hooks).
"""
from __future__ import annotations

import contextlib

from gradjit.lowering.formulas import load
from gradjit.lowering.helpers import sum_to
from gradjit.lowering.instantiate import instantiate
from gradjit.tracer.registry import GradjitError
from gradjit.tracer.trace import Tracer

_ENTRIES = None


def entries():
    global _ENTRIES
    if _ENTRIES is None:
        _ENTRIES = load()
    return _ENTRIES


def _differentiable(entry, index, value):
    od = getattr(entry, "output_differentiability", None)
    return value.dtype.kind == "f" and (od is None or od[index])


def rule_for(table, node):
    """The derivative entry (yaml Entry or runtime rule) of ``node``; a clear error if none."""
    entry = table.get(node.op)
    if entry is None:
        raise GradjitError(f"no derivative formula for '{node.op}': it has no entry in "
                           f"derivatives.yaml", node.site)
    return entry


@contextlib.contextmanager
def attributed(graph, node, pos=None):
    """Nodes added meanwhile carry ``node``'s line and op (errors, anomaly mode), and
    ``pos``, its position in ``graph.nodes`` (see ``Site``)."""
    graph.site_override = node.site.for_op(node.op, pos) if node.site is not None else None
    try:
        yield
    finally:
        graph.site_override = None


def adjoint(graph, outputs, seeds, wrt, rules=None, on_grad=None, start=0):
    """``start``: no node before ``graph.nodes[start]`` reads ``wrt`` (they were made
    after it), so the sweeps skip them (forward mode linearises each node this way: a
    sweep over the whole graph per node was quadratic in its length)."""
    from gradjit.lowering.adjoint_regions import RULES as regions   # (it calls adjoint)
    table = dict(entries(), **regions, **(rules or {}))
    n_forward = len(graph.nodes)
    # Forward sweep: which values depend differentiably on wrt.
    active = set(wrt)
    for node in graph.nodes[start:]:
        if any(v in active for v in node.inputs):
            entry = table.get(node.op)
            for i, v in enumerate(node.outputs):
                if entry is None or _differentiable(entry, i, v):
                    active.add(v)
    cot = {}

    def accumulate(v, g):
        if g.shape != v.shape:
            g = sum_to(Tracer(graph, g), v.shape).value
        if g.dtype != v.dtype:
            g = Tracer(graph, g).to(v.dtype).value
        cot[v] = g if v not in cot else (Tracer(graph, cot[v]) + Tracer(graph, g)).value

    for out, seed in zip(outputs, seeds):
        if seed is not None and out in active:
            accumulate(out, seed)
    for pos in range(n_forward - 1, start - 1, -1):
        node = graph.nodes[pos]
        if on_grad is not None:
            for v in node.outputs:
                if v in cot:
                    cot[v] = on_grad(v, cot[v])
        grad_outs = [cot.get(v) for v in node.outputs]
        if all(g is None for g in grad_outs):
            continue
        mask = [v in active and v.dtype.kind == "f" for v in node.inputs]
        if not any(mask):
            continue
        entry = rule_for(table, node)
        with attributed(graph, node, pos):
            if callable(entry):
                grads = entry(graph, node, grad_outs, mask)
            else:
                grads = instantiate(entry, node, graph, grad_outs, mask)
            for v, g, m in zip(node.inputs, grads, mask):
                if m and g is not None:
                    accumulate(v, g)
    return [cot.get(w) for w in wrt]
