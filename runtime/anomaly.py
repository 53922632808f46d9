"""Anomaly mode: run a backward graph node by node and stop at the first NaN.

Contract: ``check_node(node, arrays)`` raises ``RuntimeError`` when an output
of a backward node holds NaN, naming the backward function of the forward op
the node belongs to (``Function 'MulBackward0' returned nan values in its 0th
output.``, as torch) and the user's line where that forward op was recorded.
``checked_run(graph, arrays, callbacks)`` executes with the NumPy references
(and host callbacks), checking every node; it is what ``backward`` uses while
``detect_anomaly`` is on (and its ``check_nan`` too, as torch: with
``check_nan=False`` nothing is checked), trading speed for a precise error.
``sites``, when given, maps a forward node position (``Site.pos``) and op to the line of
the graph being differentiated now: a backward graph is cached per structure, and
its own sites are the lines of the first graph of that structure.
"""
from __future__ import annotations

import numpy as np

from gradjit.runtime.segments import HOST
from gradjit.tracer.registry import get_op
from gradjit.tracer.gradfn import _backward_name


def check_node(node, arrays, sites=None):
    for k, a in enumerate(arrays):
        a = np.asarray(getattr(a, "data", a))
        if a.dtype.kind == "f" and np.isnan(a).any():
            site = node.site
            fwd = getattr(site, "op", None) or node.op
            if sites is not None and getattr(site, "pos", None) is not None:
                site = sites(site.pos, fwd) or site
            where = f"\n  the forward op was recorded at {site}" if site is not None else ""
            raise RuntimeError(f"Function '{_backward_name(fwd)}' returned nan values in its "
                               f"{k}th output.{where}")


def checked_run(graph, arrays, callbacks=(), sites=None):
    env = dict(zip(graph.inputs, arrays))
    with np.errstate(all="ignore"):
        for node in graph.nodes:
            ins = [env[v] for v in node.inputs]
            if node.op == HOST:
                res = callbacks[node.attrs["slot"]](*ins)
            else:
                res = get_op(node.op).impl(*ins, **node.attrs)
                res = res if isinstance(res, tuple) else (res,)
                res = [np.asarray(r).astype(v.dtype, copy=False) for r, v in zip(res, node.outputs)]
            check_node(node, res, sites)
            env.update(zip(node.outputs, res))
    return [env[v] for v in graph.outputs]
