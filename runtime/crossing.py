"""Gradients across device copies (``x.to("cuda")`` / ``.cpu()`` on tensors with history).

Contract
- A device copy is a ``GradFn`` with a ``boundary`` leaf (tracer/tensor_device.py).
  ``tracer/record.History`` stops there (recording it in ``History.cuts``), so
  each device's graph compiles on its own; ``engine.run_backward(...,
  crossings=[])`` reports the gradient that reaches each copy.
- ``source(fn)``: a Tensor for the copy's input (the leaf itself, or a
  non-leaf view of the producing node's output), ``moved(fn, g)``: the
  gradient carried back to that input's device (a differentiable move when it
  has history, so ``create_graph`` keeps working).
- ``runtime/autograd.py`` runs one device's backward with the boundary leaves
  among its targets, then continues on the other side with the moved
  gradients as seeds: torch's engine does the same walk in one pass.
"""
from __future__ import annotations

from gradjit.tracer.device import is_device_array
from gradjit.tracer.tensor import Tensor


def source(fn):
    e = fn.edges[0]
    if isinstance(e, Tensor):
        return e
    src_fn, i = e
    if src_fn.out_data is None or src_fn.out_data[i] is None:
        raise RuntimeError("Trying to backward through the graph a second time (or directly "
                           "access saved tensors after they have already been freed).")
    t = Tensor(src_fn.out_data[i], grad_fn=src_fn, index=i)
    t._requires_grad = True
    return t


def moved(fn, g):
    """``g`` (array or Tensor, on the copy's device) moved to the source's device."""
    src = source(fn)
    g = g if isinstance(g, Tensor) else Tensor(g)
    want = "cuda" if is_device_array(src.data) else "cpu"
    return g.to(want)
