"""Tensors on a device: ``.device``, ``.to(device)``, ``.cpu()``, ``.cuda()``, eager CUDA ops.

Contract
- A CUDA tensor's ``data`` is a numba-cuda device array; a CPU tensor's is a
  NumPy array. ``Tensor._cuda`` is ``gradjit.runtime.cuda`` (plugged in at
  import, as ``_engine``: tracer/ never imports runtime/).
- ``device_apply(op, ts, attrs)``: an op whose tensor inputs include a CUDA
  tensor runs on the device through the compiled pipeline (``run_op``); 0-d
  CPU tensors and Python scalars are moved along (as torch allows), any
  other CPU array raises torch's "Expected all tensors to be on the same
  device" error. Returns (output arrays, output types) or None for CPU ops.
- Moving data between devices is a copy. Moving a tensor that requires grad
  is not differentiable yet: it raises, telling the user to create the leaf
  on the device (``gj.tensor(x, device="cuda", requires_grad=True)``) or to
  ``detach()`` first; nothing is silently cut from the graph.
"""
from __future__ import annotations

import numpy as np

from gradjit.tracer.device import canonical, is_device_array


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


def device_apply(cls, op, op_name, ts, attrs):
    arrays = [t.data for t in ts]
    if not any(is_device_array(a) for a in arrays):
        return None
    cuda = cls._cuda
    moved = []
    for a in arrays:
        if not is_device_array(a):
            if np.ndim(a):
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
        if self._requires_grad:
            raise RuntimeError(f"moving a tensor that requires grad to '{device}' is not "
                               f"differentiable in gradjit yet: create the leaf on the device "
                               f"(gj.tensor(x, device='{device}', requires_grad=True)) or move "
                               f"x.detach()")
        if device == "cuda":
            self._cuda.require("Tensor.to('cuda')")
            return type(self)(self._cuda.to_device(np.asarray(self.data)))
        return type(self)(self._cuda.to_host(self.data))
