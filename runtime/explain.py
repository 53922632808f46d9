"""``gj.explain``: show what gradjit does with a function or a tensor's graph.

Contract: ``explain(obj, *args, argnums=0, file=sys.stdout) -> str`` prints
(and returns) three sections: the forward IR as traced/recorded, the IR that
is compiled (the joint forward+adjoint graph for a function, the backward
graph for a tensor) after optimisation, and the generated Python source.
``obj`` is a plain function (its gradient w.r.t. ``argnums`` is explained),
a ``gj.jit`` / ``gj.grad`` / ``gj.value_and_grad`` function, or a Tensor
with recorded history (its backward is explained).
"""
from __future__ import annotations

import sys

import numpy as np

from gradjit.runtime.engine import build_plan
from gradjit.runtime.transforms import _Transformed, grad
from gradjit.tracer.record import History
from gradjit.tracer.tensor import Tensor


def explain(obj, *args, argnums=0, file=None):
    if isinstance(obj, Tensor):
        if obj.grad_fn is None:
            raise ValueError("explain: this tensor has no recorded history (is it a leaf, or was "
                             "it computed without requires_grad / under no_grad?)")
        hist = History([obj])
        forward = str(hist.graph())
        wrt = [hist.addr(t) for t in hist.leaves if t.requires_grad]
        plan = build_plan(hist, ((obj.shape, obj.dtype),), wrt)
        compiled, source = str(plan.bwd_graph), plan.exe.source
        title = "backward graph"
    else:
        fn = obj if isinstance(obj, _Transformed) else grad(obj, argnums=argnums)
        traced, opt, source = fn.graphs(*[np.asarray(a) if not np.isscalar(a) else a for a in args])
        forward, compiled = str(traced), str(opt)
        title = "compiled graph (forward + adjoint, optimised)"
    text = (f"== traced IR ==\n{forward}\n\n== {title} ==\n{compiled}\n\n"
            f"== generated source ==\n{source}")
    print(text, file=file or sys.stdout)
    return text
