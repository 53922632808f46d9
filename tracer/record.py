"""Recorded history -> IR: the bridge from eager tensors to the graph pipeline.

Contract
- ``record_graph(roots)`` walks the ``GradFn``s reachable from ``roots`` and
  builds a forward ``Graph`` whose nodes are in recording order (so equal
  programs give equal structural keys) and whose inputs are the leaves and
  constants met. ``RecordedGraph.array(value)`` returns the recorded array of
  any of its values (a leaf's data or a saved op output); ``value_of(tensor)``
  the Value of a tensor in it (or None).
- Also collected, in graph order: hooks and retain_grad requests on values,
  and the contexts of custom Function nodes, with a structural description
  (``extras_key``) that joins the plan key.
"""
from __future__ import annotations

from gradjit.tracer.ir import Graph
from gradjit.tracer.tensor import Tensor

class RecordedGraph:
    """The IR of recorded history and where its values come from."""

    def __init__(self, graph, roots, producers, values, fns):
        self.graph, self.roots, self.fns = graph, roots, fns
        self.producers = producers  # Value -> (GradFn, index) or Tensor
        self._values = values       # (id(GradFn), index) or id(Tensor) -> Value
        self.leaves = [(v, producers[v]) for v in graph.inputs]
        # Per value with hooks / retain_grad (non-leaf), and per custom Function node.
        self.hooked = [v for v in self._outputs() if _hooks_of(producers[v])]
        self.retained = [v for v in self._outputs() if _retainer(producers[v]) is not None]
        self.custom = [n for n in graph.nodes if n.op == "custom_function"]

    def _outputs(self):
        return [v for n in self.graph.nodes for v in n.outputs]

    def value_of(self, t):
        if t.grad_fn is not None:
            return self._values.get((id(t.grad_fn), t._index))
        return self._values.get(id(t))

    def array(self, value):
        src = self.producers[value]
        if isinstance(src, Tensor):
            for fn, version in self.leaf_uses.get(value, ()):
                if src._box[0] != version:
                    raise RuntimeError(
                        f"one of the variables needed for gradient computation has been modified "
                        f"by an inplace operation: [{value.dtype.name} {list(value.shape)}], which "
                        f"is an input of {fn.name()}, is at version {src._box[0]}; expected "
                        f"version {version} instead.")
            return src.data
        fn, i = src
        if fn.out_data is None:
            raise RuntimeError(_FREED)
        box, version = fn.versions[i]
        if box[0] != version:
            raise RuntimeError(
                f"one of the variables needed for gradient computation has been modified by an "
                f"inplace operation: [{value.dtype.name} {list(value.shape)}], which is output {i} "
                f"of {fn.name()}, is at version {box[0]}; expected version {version} instead.")
        return fn.out_data[i]

    def hooks(self, value):
        return _hooks_of(self.producers[value])

    def retainer(self, value):
        return _retainer(self.producers[value])

    def ctx(self, node):
        return self.producers[node.outputs[0]][0].ctx

    def extras_key(self):
        """What besides the graph structure shapes the backward: hook and retain positions,
        custom Function contexts (their structural fingerprint)."""
        return (tuple(v.id for v in self.hooked), tuple(v.id for v in self.retained),
                tuple(self.ctx(n).fingerprint() for n in self.custom))


def _hooks_of(src):
    if isinstance(src, Tensor):
        return src._hooks or ()
    fn, i = src
    return (fn.hooks or {}).get(i, ())


def _retainer(src):
    if isinstance(src, Tensor):
        return None
    fn, i = src
    ref = (fn.retains or {}).get(i)
    return ref() if ref is not None else None


_FREED = ("Trying to backward through the graph a second time (or directly access saved tensors "
          "after they have already been freed). Saved intermediate values of the graph are freed "
          "when you call .backward() or autograd.grad(). Specify retain_graph=True if you need to "
          "backward through the graph a second time or if you need to access saved tensors after "
          "calling backward.")


def record_graph(roots):
    """Build the forward IR reachable from ``roots`` (a list of Tensors)."""
    fns, stack = {}, [t.grad_fn for t in roots if t.grad_fn is not None]
    while stack:
        fn = stack.pop()
        if id(fn) in fns:
            continue
        if fn.freed:
            raise RuntimeError(_FREED)
        fns[id(fn)] = fn
        stack.extend(e[0] for e in fn.edges if isinstance(e, tuple))
    order = sorted(fns.values(), key=lambda f: f.seq)
    g = Graph("forward")
    values, producers = {}, {}

    def leaf_value(t):
        v = values.get(id(t))
        if v is None:
            v = values[id(t)] = g.add_input(t.data.shape, t.data.dtype)
            producers[v] = t
        return v

    leaf_uses = {}
    for fn in order:
        ins = [values[(id(e[0]), e[1])] if isinstance(e, tuple) else leaf_value(e) for e in fn.edges]
        for e, v, version in zip(fn.edges, ins, fn.in_versions):
            if version is not None:
                leaf_uses.setdefault(v, []).append((fn, version))
        attrs = fn.attrs if fn.ctx is None else dict(fn.attrs, slot=len(
            [n for n in g.nodes if n.op == "custom_function"]))
        outs = g.add_node(fn.op, ins, attrs, fn.out_types, fn.site)
        for i, v in enumerate(outs):
            values[(id(fn), i)] = v
            producers[v] = (fn, i)
    root_values = [values[(id(t.grad_fn), t._index)] if t.grad_fn is not None else leaf_value(t)
                   for t in roots]
    g.outputs = list(root_values)
    rec = RecordedGraph(g, root_values, producers, values, order)
    rec.leaf_uses = leaf_uses
    return rec
