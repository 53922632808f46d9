"""Batched backward plans (``is_grads_batched=True``).

Contract: ``compile_batched(graph, seed_inputs)`` returns ``exe(arrays,
callbacks)`` that evaluates the backward graph for every row of the seed
inputs (which carry a leading batch dimension) in one compiled call, the
loop over the batch being inside the compiled code. Graphs with Python
callbacks (hooks, opaque custom Functions) cannot run inside that loop and
are rejected with a clear error.
"""
from __future__ import annotations

from gradjit.runtime.compiler import compile_graph
from gradjit.runtime.segments import HOST


class _Batched:
    def __init__(self, graph, seed_inputs):
        if any(n.op == HOST for n in graph.nodes):
            raise NotImplementedError(
                "is_grads_batched=True: this graph calls Python during backward (a hook on a "
                "non-leaf tensor or a custom Function whose backward could not be traced); "
                "batched gradients need a backward that compiles as a whole")
        self.exe = compile_graph(graph, batched=seed_inputs)
        self.source = self.exe.source

    def __call__(self, arrays, callbacks=()):
        return self.exe(arrays)


def compile_batched(graph, seed_inputs):
    return _Batched(graph, seed_inputs)
