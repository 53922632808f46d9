"""Forward mode: append the tangent (Jacobian-vector product) computation of a graph.

Contract
- ``tangents(graph, inputs, tangents, outputs, rules=None)`` appends nodes
  computing, for each of ``outputs``, the directional derivative along
  ``tangents`` of ``inputs`` (``None``: the output does not depend on them).
- It walks the nodes forward with a dict of tangents (absent = zero). A node
  uses, in order: a forward rule from ``rules`` (e.g. a custom Function's
  ``jvp``), the ``result:`` formula of its ``derivatives.yaml`` entry when it
  has one (names ``self_t``, ``other_t`` ... are the input tangents), else
  the *linearisation* of its backward formula: with a seed ``u`` the VJP
  ``J^T u`` is linear in ``u``, so ``J t`` is the gradient w.r.t. ``u`` of
  ``<J^T u, t>`` (one adjoint over the few nodes of that formula). Every
  route is exact and built from ordinary ops, so it compiles, fuses and can be
  differentiated again.
"""
from __future__ import annotations

import numpy as np

from gradjit.lowering.adjoint import _differentiable, adjoint, attributed, entries, rule_for
from gradjit.lowering.helpers import sum_to
from gradjit.lowering.instantiate import bind_inputs, evaluate, instantiate
from gradjit.tracer.api import apply
from gradjit.tracer.trace import Tracer


def _formula_tangent(entry, node, graph, ts):
    env = dict(node.attrs)
    env.update(bind_inputs(entry.schema, graph, node.inputs)[0])
    filled = [t if t is not None else apply("zeros_like.default", [Tracer(graph, v)], {}).value
              for v, t in zip(node.inputs, ts)]
    env.update({f"{n}_t": v for n, v in bind_inputs(entry.schema, graph, filled)[0].items()})
    outs = [Tracer(graph, v) for v in node.outputs]
    env["result"] = outs[0]
    env.update({f"result{i}": r for i, r in enumerate(outs)})
    res = evaluate(entry.forward, env)
    return [r.value for r in (res if isinstance(res, tuple) else (res,))]


def _linearised(entry, node, graph, ts, rules):
    mask = [t is not None and v.dtype.kind == "f" for v, t in zip(node.inputs, ts)]
    start = len(graph.nodes)   # (the VJP's nodes come after: only they read the us)
    us = []
    for v in node.outputs:
        u = graph.add_input(v.shape, v.dtype)  # any value: the VJP is linear in u
        graph.constants[u] = np.zeros(v.shape, v.dtype)
        us.append(u)
    if callable(entry):
        vjps = entry(graph, node, us, mask)
    else:
        vjps = instantiate(entry, node, graph, us, mask)
    total = None
    for v, g, t, m in zip(node.inputs, vjps, ts, mask):
        if not m or g is None:
            continue
        g = Tracer(graph, g)
        if g.shape != v.shape:
            g = sum_to(g, v.shape)
        term = (g.to(v.dtype) * Tracer(graph, t)).sum()
        total = term if total is None else total + term
    if total is None:
        return [None] * len(node.outputs)
    seed = apply("ones_like.default", [total], {})
    return adjoint(graph, [total.value], [seed.value], us, rules, start=start)


def tangents(graph, inputs, tangent_values, outputs, rules=None, forward_rules=None):
    from gradjit.lowering.adjoint_regions import FORWARD_RULES, RULES as regions
    table = dict(entries(), **regions, **(rules or {}))   # (regions linearised: scans ...)
    forward_rules = dict(FORWARD_RULES, **(forward_rules or {}))
    tan = {v: t for v, t in zip(inputs, tangent_values) if t is not None}
    n_forward = len(graph.nodes)
    for node in graph.nodes[:n_forward]:
        ts = [tan.get(v) for v in node.inputs]
        if all(t is None for t in ts):
            continue
        entry = rule_for(table, node)
        with attributed(graph, node):
            outs = None
            if forward_rules and node.op in forward_rules:
                outs = forward_rules[node.op](graph, node, ts)  # None: no rule for this node
            if outs is None and getattr(entry, "forward", None) is not None:
                outs = _formula_tangent(entry, node, graph, ts)
            if outs is None:
                outs = _linearised(entry, node, graph, ts, rules)
        for i, (v, t) in enumerate(zip(node.outputs, outs)):
            if t is not None and (callable(entry) or _differentiable(entry, i, v)):
                tan[v] = t if t.dtype == v.dtype else Tracer(graph, t).to(v.dtype).value
    return [tan.get(o) for o in outputs]
