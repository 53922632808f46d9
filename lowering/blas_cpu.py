"""Matrix products for generated CPU code, compiled once per machine.

Contract
- ``mm(a, b)`` is ``np.dot(a, b)`` for 2-D arrays; ``mv(a, b)`` the same for a
  ``b`` of one column and ``vm(a, b)`` for an ``a`` of one row: they call BLAS
  gemv (matrix-vector), which is several times faster than gemm with a
  dimension of 1. Results are C arrays of the 2-D product's shape.
- Generated modules call these instead of ``np.dot``: Numba then compiles its
  dot implementation once per (dtype, layout) pair on this machine
  (``cache=True``, like the fast-math helpers) instead of inside every
  generated function, where it costs about half a second of each cold compile
  that has a matmul.
"""
from __future__ import annotations

import numba
import numpy as np

jit = numba.njit(cache=True, error_model="numpy")


@jit
def mm(a, b):
    return np.dot(a, b)


@jit
def mv(a, b):
    return np.dot(a, np.ascontiguousarray(b).reshape(b.shape[0])).reshape((a.shape[0], 1))


@jit
def vm(a, b):
    return np.dot(np.ascontiguousarray(a).reshape(a.shape[1]), b).reshape((1, b.shape[1]))
