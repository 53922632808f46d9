"""Array allocation for generated CPU code, compiled once per machine.

Contract
- ``empty(shape, dtype)``, ``full(shape, value, dtype)``, ``zeros(shape, dtype)``
  and ``contiguous(a)`` (``np.ascontiguousarray``) are NumPy's. Generated modules allocate through them (as ``al.empty`` ...)
  instead of calling ``np.empty`` (...) directly: Numba then compiles its allocation
  implementations once per machine and signature (``cache=True``) instead of
  inside every generated function, where they cost 0.3-0.4 s of each cold
  compile. ``forceinline``: no call overhead in the caller's loops.
"""
from __future__ import annotations

import numba
import numpy as np

jit = numba.njit(cache=True, error_model="numpy", forceinline=True)


@jit
def empty(shape, dtype):
    return np.empty(shape, dtype)


@jit
def full(shape, value, dtype):
    return np.full(shape, value, dtype)


@jit
def zeros(shape, dtype):
    return np.zeros(shape, dtype)


@jit
def contiguous(a):
    return np.ascontiguousarray(a)
