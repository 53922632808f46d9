"""Device names and device arrays, without importing any CUDA package.

Contract
- ``is_device_array(x)``: True for numba-cuda device arrays (they carry
  ``__cuda_array_interface__``) and the simulator's fake ones; never imports
  ``numba.cuda``, so CPU-only code pays nothing.
- ``canonical(device)``: 'cpu' or 'cuda' from the spellings torch accepts
  ('cuda', 'cuda:0', 'cpu', or an object with ``.type``); anything else raises
  a ``ValueError`` naming the bad device.
"""
from __future__ import annotations


def is_device_array(x):
    return hasattr(x, "__cuda_array_interface__") or type(x).__name__ == "FakeCUDAArray"


def canonical(device):
    if device is None:
        return "cpu"
    name = getattr(device, "type", device)
    if isinstance(name, str):
        base, _, index = name.partition(":")
        if base in ("cpu", "cuda") and (not index or (base == "cuda" and index == "0")):
            return base
    raise ValueError(f"Expected one of cpu, cuda device type at start of device string: {device!r} "
                     f"(gradjit supports 'cpu' and 'cuda' / 'cuda:0')")
