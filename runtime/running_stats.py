"""Running statistics a traced function updates (batch_norm in training under a transform).

Contract
- ``hidden_updates(g, arg_values)``: the statistics recorded in ``g.running_updates``
  appended to the graph's outputs; returns ``[(target, momentum)]``, target
  ``('arg', position)`` or ``('array', the captured array)``.
- ``with_updates(exe, updates)``: ``exe`` itself when there are none, else an executable
  that applies ``r = (1 - momentum) * r + momentum * stat`` to each target after the call
  and returns the other results (the way torch's module updates its buffers in place).
"""
from __future__ import annotations

import numpy as np

from gradjit.runtime.cuda import to_host


def hidden_updates(g, arg_values):
    """Append the statistics of ``g.running_updates`` (batch_norm under tracing) to the
    graph's outputs; returns [(target, momentum)] with target ('arg', position) or
    ('array', the captured array)."""
    out = []
    for (kind, ref), stat, momentum in g.running_updates:
        g.outputs.append(stat)
        out.append((("arg", arg_values.index(ref)) if kind == "arg" else ("array", ref), momentum))
    return out


class Updating:
    """An executable whose last results are running statistics: it applies
    ``r = (1 - momentum) * r + momentum * stat`` to each target after the call and returns
    the other results. Never an ``Executable``, so calls take the slow path that has
    the arguments."""

    def __init__(self, exe, updates):
        self.exe, self.updates = exe, updates
        self.graph, self.source = exe.graph, exe.source

    def __call__(self, arrays):
        res = list(self.exe(arrays))
        stats = res[len(res) - len(self.updates):]
        for ((kind, ref), momentum), stat in zip(self.updates, stats):
            arr = np.asarray(arrays[ref]) if kind == "arg" else ref
            stat = to_host(stat)
            arr[...] = ((1.0 - momentum) * arr + momentum * stat.reshape(arr.shape)).astype(arr.dtype)
        return res[:len(res) - len(self.updates)]


def with_updates(exe, updates):
    return Updating(exe, updates) if updates else exe
