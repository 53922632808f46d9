"""Tensor-mode backward engine: ``backward`` and ``grad`` over recorded history.

Contract
- The recorded history reachable from the outputs becomes a forward Graph
  (``tracer.tensor.record_graph``); its structural key plus the positions of
  the inputs asked for and the seed types select a *plan* from an in-memory
  table. A miss runs the adjoint, cuts out the backward nodes (the forward
  already ran eagerly), optimises and compiles them; a hit only gathers the
  arrays the compiled backward reads and calls it. So a given graph
  structure compiles once per process (and once per machine, via the disk
  cache).
- Semantics and messages follow ``torch.autograd``: implicit seeds only for
  scalar outputs, accumulation into ``.grad`` of leaves, ``retain_graph``
  (saved arrays are released after backward unless retained),
  ``allow_unused``.
"""
from __future__ import annotations

import os

import numpy as np

from gradjit.lowering.adjoint import adjoint
from gradjit.lowering.passes import extract, optimize, prune_inputs
from gradjit.runtime.compiler import STATS, compile_graph
from gradjit.tracer.registry import GradjitError
from gradjit.tracer.tensor import Tensor, record_graph

_PLANS = {}


class Plan:
    __slots__ = ("exe", "feeds", "has_grad", "bwd_graph")

    def __init__(self, exe, feeds, has_grad, bwd_graph):
        self.exe, self.feeds, self.has_grad, self.bwd_graph = exe, feeds, has_grad, bwd_graph


def _locate(graph, value):
    """Structural address of a forward value: ('in', i) or ('node', j, k)."""
    if value.node is None:
        return ("in", graph.inputs.index(value))
    return ("node", graph.nodes.index(value.node), value.index)


def _resolve(rec, addr):
    g = rec.graph
    v = g.inputs[addr[1]] if addr[0] == "in" else g.nodes[addr[1]].outputs[addr[2]]
    return rec.array(v)


def build_plan(rec, seed_types, wrt):
    g = rec.graph
    n_forward = len(g.nodes)
    seeds = [g.add_input(s, d) for s, d in seed_types]
    grads = adjoint(g, rec.roots, seeds, wrt)
    outs = [x for x in grads if x is not None]
    bwd, feeds = extract(g, g.nodes[n_forward:], outs)
    bwd = optimize(bwd)
    kept = prune_inputs(bwd)
    spec = []
    for i in kept:
        v = feeds[i]
        if v in seeds:
            spec.append(("seed", seeds.index(v)))
        elif v in g.constants:  # made by a formula (e.g. the 0 of a where)
            spec.append(("const", g.constants[v]))
        else:
            spec.append(_locate(g, v))
    return Plan(compile_graph(bwd), spec, [x is not None for x in grads], bwd)


def run_backward(roots, seeds, wrt_tensors, retain_graph, allow_unused=True):
    """Gradients (arrays or None) of sum(<seed, root>) w.r.t. ``wrt_tensors``
    (``None``: every leaf that requires grad). Returns (wrt tensors, grads)."""
    rec = record_graph(roots)
    if wrt_tensors is None:
        wrt_tensors = [t for _, t in rec.leaves if t.requires_grad]
    index = {id(t): v for v, t in rec.leaves}
    wrt = []
    for i, t in enumerate(wrt_tensors):
        if t.grad_fn is not None:
            raise GradjitError(f"inputs[{i}] is not a leaf tensor: gradients with respect to "
                               f"intermediate tensors are not supported yet")
        wrt.append(index.get(id(t)))
    present = [w for w in wrt if w is not None]
    seed_types = tuple((s.shape, s.dtype) for s in seeds)
    key = (rec.graph.key(), tuple(rec.graph.inputs.index(w) for w in present), seed_types,
           os.environ.get("GRADJIT_EXECUTOR"))  # a plan is compiled or interpreted
    plan = _PLANS.get(key)
    if plan is None:
        plan = _PLANS[key] = build_plan(rec, seed_types, present)
    else:
        STATS["memory_hits"] += 1
    arrays = [seeds[a[1]] if a[0] == "seed" else a[1] if a[0] == "const" else _resolve(rec, a)
              for a in plan.feeds]
    results = iter(plan.exe(arrays))
    by_value = {w: (next(results) if has else None) for w, has in zip(present, plan.has_grad)}
    if not retain_graph:
        for fn in rec.fns:
            fn.release()
    out = [None if w is None else by_value[w] for w in wrt]
    if not allow_unused:
        for i, g in enumerate(out):
            if g is None:
                raise RuntimeError(f"One of the differentiated Tensors appears to not have been used "
                                   f"in the graph (inputs[{i}]). Set allow_unused=True if this is "
                                   f"the desired behavior.")
    return wrt_tensors, out


def _as_list(x):
    if x is None:
        return None
    return list(x) if isinstance(x, (list, tuple)) else [x]


def _seeds(outputs, grad_outputs, name):
    grad_outputs = _as_list(grad_outputs) or [None] * len(outputs)
    if len(grad_outputs) != len(outputs):
        raise RuntimeError(f"{name}: got {len(grad_outputs)} gradients for {len(outputs)} outputs")
    seeds = []
    for i, (o, g) in enumerate(zip(outputs, grad_outputs)):
        if not isinstance(o, Tensor):
            raise TypeError(f"{name}: outputs[{i}] is a {type(o).__name__}, not a gradjit Tensor")
        if not o.requires_grad:
            raise RuntimeError(f"element {i} of tensors does not require grad and does not have a "
                               f"grad_fn")
        if g is None:
            if o.data.size != 1:
                made_by = (f", the result of {o.grad_fn.op} ({o.grad_fn.name()})"
                           if o.grad_fn is not None else "")
                raise GradjitError("grad can be implicitly created only for scalar outputs "
                                   f"(outputs[{i}] has shape {o.shape}{made_by}); pass a gradient "
                                   f"of that shape", o.grad_fn.site if o.grad_fn else None)
            seeds.append(np.ones(o.shape, o.dtype))
            continue
        g = np.asarray(getattr(g, "data", g), dtype=o.dtype)
        if g.shape != o.shape:
            raise RuntimeError(f"Mismatch in shape: grad_output[{i}] has a shape of {g.shape} and "
                               f"output[{i}] has a shape of {o.shape}.")
        seeds.append(g)
    return seeds


def backward(tensors, grad_tensors=None, retain_graph=None, inputs=None):
    roots = _as_list(tensors)
    seeds = _seeds(roots, grad_tensors, "backward")
    wrt = None
    if inputs is not None:
        wrt = _as_list(inputs)
        if not wrt:
            raise RuntimeError("'inputs' argument to backward() cannot be empty.")
    wrt, grads = run_backward(roots, seeds, wrt, retain_graph)
    for t, g in zip(wrt, grads):
        if g is not None:
            t.grad = Tensor(g) if t.grad is None else Tensor(t.grad.data + g)


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, allow_unused=False):
    roots = _as_list(outputs)
    wrt = _as_list(inputs)
    seeds = _seeds(roots, grad_outputs, "grad")
    for i, t in enumerate(wrt):
        if not isinstance(t, Tensor) or not t.requires_grad:
            raise RuntimeError(f"One of the differentiated Tensors (inputs[{i}]) does not require "
                               f"grad")
    _, grads = run_backward(roots, seeds, wrt, retain_graph, allow_unused)
    return tuple(None if g is None else Tensor(g) for g in grads)
