"""Reference interpreter: run any ``Graph`` op by op with the NumPy references.

Contract: ``interpret(graph, arrays) -> list of arrays`` for ``graph.outputs``,
given one array per ``graph.inputs``. No compilation; it is the oracle the
compiled code is tested against and the ``GRADJIT_EXECUTOR=numpy`` executor.
An index out of bounds (``IndexBoundsError`` from a reference) and a while loop cut short
(``MaxStepsError``) are raised at the node's recorded user line (``node.site``).
"""
from __future__ import annotations

import numpy as np

from gradjit.tracer.ops_index import IndexBoundsError
from gradjit.tracer.registry import MaxStepsError, get_op


def interpret(graph, arrays):
    env = dict(zip(graph.inputs, arrays))
    with np.errstate(all="ignore"):
        for node in graph.nodes:
            try:
                res = get_op(node.op).impl(*[env[v] for v in node.inputs], **node.attrs)
            except (IndexBoundsError, MaxStepsError) as e:
                raise e.located(node.site) from None
            res = res if isinstance(res, tuple) else (res,)
            for v, r in zip(node.outputs, res):
                env[v] = np.asarray(r).astype(v.dtype, copy=False)
    return [env[v] for v in graph.outputs]
