"""Graphs with Python callbacks: compiled segments around ``host_call`` nodes.

Contract
- ``host_call(graph, inputs, out_types, slot)`` appends a node that, at run
  time, calls ``callbacks[slot](*input arrays) -> output arrays`` in Python.
  Hooks on non-leaf tensors and opaque custom-Function backwards become such
  nodes; the callables are supplied per call, so one compiled plan serves
  every step while each step's own hooks and contexts run.
- ``compile_segmented(graph)`` returns an executable ``exe(arrays, callbacks)``.
  Without host calls it is one compiled graph; with them, the node list is
  cut at each host call into maximal runs, each run compiled on its own
  (``passes.extract``), values crossing a cut passed as arrays.
- ``replay(graph, tensors, callbacks)`` runs a graph eagerly through Tensor
  ops, so its results carry history (``create_graph=True``). A custom
  Function applied inside a traced backward (a ``custom_function`` node, its
  tensor arguments as inputs) is applied again, so the history records it and
  a further backward runs its own ``backward`` (torch's way to write a custom
  double backward), not the derivative of its forward.
"""
from __future__ import annotations

from gradjit.lowering.passes import extract
from gradjit.runtime.compiler import compile_graph
from gradjit.tracer.tensor import Tensor

HOST = "host_call"


def host_call(graph, inputs, out_types, slot):
    return graph.add_node(HOST, inputs, {"slot": slot}, out_types)


class Segmented:
    def __init__(self, graph):
        self.graph = graph
        self.parts = []
        nodes = graph.nodes
        later_use = _later_uses(graph)
        run = []
        for i, node in enumerate(nodes):
            if node.op == HOST:
                self._close(run, later_use, i)
                self.parts.append(("host", node))
                run = []
            else:
                run.append(node)
        self._close(run, later_use, len(nodes))
        self.source = "\n\n".join(p[1].source for p in self.parts if p[0] == "compiled")

    def _close(self, run, later_use, end):
        if not run:
            return
        made = {v for n in run for v in n.outputs}
        outs = [v for v in made if later_use.get(v, -1) >= end or v in self.graph.outputs]
        outs.sort(key=lambda v: v.id)
        sub, feeds = extract(self.graph, run, outs, name=f"{self.graph.name}_part{len(self.parts)}")
        self.parts.append(("compiled", compile_graph(sub), feeds, outs))

    def __call__(self, arrays, callbacks=()):
        env = dict(zip(self.graph.inputs, arrays))
        for part in self.parts:
            if part[0] == "host":
                node = part[1]
                res = callbacks[node.attrs["slot"]](*[env[v] for v in node.inputs])
                env.update(zip(node.outputs, res))
            else:
                _, exe, feeds, outs = part
                env.update(zip(outs, exe([env[v] for v in feeds])))
        return [env[v] for v in self.graph.outputs]


class _Plain:
    """A graph without host calls: one compiled function."""

    def __init__(self, graph):
        self.exe = compile_graph(graph)
        self.source = self.exe.source

    def __call__(self, arrays, callbacks=()):
        return self.exe(arrays)


def _later_uses(graph):
    last = {}
    for i, n in enumerate(graph.nodes):
        for v in n.inputs:
            last[v] = i
    return last


def compile_segmented(graph):
    if any(n.op == HOST for n in graph.nodes):
        return Segmented(graph)
    return _Plain(graph)


def replay(graph, tensors, callbacks=(), check=None):
    """Run ``graph`` op by op on Tensors (recording history); returns output Tensors.
    ``check(node, outputs)`` sees every node's results (anomaly mode)."""
    env = dict(zip(graph.inputs, tensors))
    for node in graph.nodes:
        ins = [env[v] for v in node.inputs]
        if node.op == HOST:
            res = callbacks[node.attrs["slot"]](*ins)
        elif node.op == "custom_function":
            res = _apply_function(node.attrs, ins)
        else:
            res = Tensor._apply(node.op, ins, node.attrs)
            res = res if isinstance(res, tuple) else (res,)
        if check is not None:
            check(node, res)
        env.update(zip(node.outputs, res))
    return [env[v] for v in graph.outputs]


def _apply_function(attrs, ins):
    it, args = iter(ins[:attrs["n_in"]]), attrs["ctx"]._args
    res = attrs["function"].apply(*[next(it) if is_t else a
                                    for is_t, a in zip(attrs["tensor_args"], args)])
    return res if isinstance(res, tuple) else (res,)
