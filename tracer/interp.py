"""Reference interpreter: run any ``Graph`` op by op with the NumPy references.

Contract: ``interpret(graph, arrays) -> list of arrays`` for ``graph.outputs``,
given one array per ``graph.inputs``. No compilation; it is the oracle the
compiled code is tested against and the ``GRADJIT_EXECUTOR=numpy`` executor.
"""
from __future__ import annotations

import numpy as np

from gradjit.tracer.registry import get_op


def interpret(graph, arrays):
    env = dict(zip(graph.inputs, arrays))
    with np.errstate(all="ignore"):
        for node in graph.nodes:
            res = get_op(node.op).impl(*[env[v] for v in node.inputs], **node.attrs)
            res = res if isinstance(res, tuple) else (res,)
            for v, r in zip(node.outputs, res):
                env[v] = np.asarray(r).astype(v.dtype, copy=False)
    return [env[v] for v in graph.outputs]
