"""Tensors on a device: ``.device``, ``.to(device)``, ``.cpu()``, ``.cuda()``, eager CUDA ops.

Contract
- A CUDA tensor's ``data`` is a numba-cuda device array; a CPU tensor's is a
  NumPy array. ``HOOKS.cuda`` is ``gradjit.runtime.cuda`` (tracer/hooks.py:
  tracer/ never imports runtime/).
- ``device_apply(op, ts, attrs)``: an op whose tensor inputs include a CUDA
  tensor runs on the device through the compiled pipeline (``run_op``); 0-d
  CPU tensors and Python scalars are moved along (as torch allows), and so are
  the inputs numbered in ``made`` (arrays that were no tensor: gradjit's own
  index arrays and constants); any other CPU tensor raises torch's "Expected
  all tensors to be on the same device" error. Returns (output arrays, output
  types) or None for CPU ops. ``Tensor._const`` beside a CUDA tensor makes its
  constant on the device.
- Moving data between devices is a copy, and differentiable: the result's
  ``grad_fn`` (``ToCopyBackward0``) holds a ``boundary`` leaf standing for it
  on the new device. Each device's history compiles on its own (one graph
  never spans devices); the engine computes the boundary leaf's gradient,
  moves it back and continues backward on the other side.
"""
from __future__ import annotations

import numpy as np

from gradjit.tracer.device import canonical, is_device_array
from gradjit.tracer.hooks import HOOKS
from gradjit.tracer.modes import is_recording


class Device:
    """torch.device-like: ``type`` is 'cpu' or 'cuda'; compares equal to its spellings."""

    __slots__ = ("type",)

    def __init__(self, type_):
        self.type = type_

    def __eq__(self, other):
        try:
            return canonical(other) == self.type
        except ValueError:
            return False

    def __hash__(self):
        return hash(self.type)

    def __str__(self):
        return "cuda:0" if self.type == "cuda" else "cpu"

    def __repr__(self):
        return f"device(type='{self.type}'{', index=0' if self.type == 'cuda' else ''})"


class _Spec:
    __slots__ = ("shape", "dtype", "ndim", "size")

    def __init__(self, a):
        self.shape, self.dtype = tuple(a.shape), np.dtype(a.dtype)
        self.ndim, self.size = len(self.shape), int(np.prod(self.shape)) if self.shape else 1


def device_apply(cls, op, op_name, ts, attrs, made=()):
    arrays = [t.data for t in ts]
    if not any(is_device_array(a) for a in arrays):
        return None
    cuda = HOOKS.cuda
    moved = []
    for k, a in enumerate(arrays):
        if not is_device_array(a):
            if np.ndim(a) and k not in made:
                raise RuntimeError(f"Expected all tensors to be on the same device, but found at "
                                   f"least two devices, cuda:0 and cpu! (op {op_name}: a CPU "
                                   f"array of shape {tuple(np.shape(a))} beside CUDA tensors)")
            a = cuda.to_device(np.asarray(a))
        moved.append(a)
    out_types = op.infer([_Spec(a) for a in moved], attrs)
    return cuda.run_op(op_name, moved, attrs), out_types


class DeviceMethods:
    """Mixed into Tensor."""

    __slots__ = ()

    @property
    def device(self):
        return Device("cuda" if is_device_array(self.data) else "cpu")

    @property
    def is_cuda(self):
        return is_device_array(self.data)

    def to(self, *args, dtype=None, device=None, copy=False):
        for a in args:
            try:
                device = canonical(a)
            except (ValueError, TypeError):
                dtype = a
        out = self
        if device is not None and canonical(device) != self.device.type:
            out = out._moved(canonical(device))
        if dtype is not None and np.dtype(dtype) != out.dtype:
            out = out._apply("_to_copy.default", [out], {"dtype": np.dtype(dtype)})
        return out.clone() if copy and out is self else out

    astype = to

    def cpu(self):
        return self.to("cpu")

    def cuda(self, device=None):
        canonical(device if device is not None else "cuda")
        return self.to("cuda")

    def _moved(self, device):
        if device == "cuda":
            HOOKS.cuda.require("Tensor.to('cuda')")
            data = HOOKS.cuda.to_device(np.asarray(self.data))
        else:
            data = HOOKS.cuda.to_host(self.data)
        cls = type(self)
        if not (self._requires_grad and is_recording()):
            return cls(data)
        # Differentiable copy: a node whose backward moves the gradient back. Each device's
        # graph compiles on its own; ``boundary`` is the leaf that stands for this node on
        # the new device, and the engine carries its gradient across (runtime/autograd.py).
        from gradjit.tracer.registry import user_site
        from gradjit.tracer.tensor import GradFn
        edge = (self.grad_fn, self._index) if self.grad_fn is not None else self
        fn = GradFn("_to_copy.device", {"device": device}, [edge],
                    [(self.shape, self.dtype)], [data], user_site())
        out = cls(data, grad_fn=fn)
        out._requires_grad = True
        fn.versions = [(out._box, 0)]
        fn.boundary = cls(data, requires_grad=True, box=out._box)
        return out
