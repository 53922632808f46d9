"""Matrix products for generated CPU code, compiled once per machine.

Contract
- ``mm(a, b)`` is ``np.dot(a, b)`` for 2-D arrays; ``mv(a, b)`` the same for a
  ``b`` of one column and ``vm(a, b)`` for an ``a`` of one row: they call BLAS
  gemv (matrix-vector), faster than gemm with a dimension of 1 once the matrix
  is large (``blas_helper`` picks; for small ones the extra reshapes cost more).
  Results are C arrays of the 2-D product's shape. The helpers are
  ``forceinline``: no call overhead in the caller's loops.
- Generated modules call these instead of ``np.dot``: Numba then compiles its
  dot implementation once per (dtype, layout) pair on this machine
  (``cache=True``, like the fast-math helpers) instead of inside every
  generated function, where it costs about half a second of each cold compile
  that has a matmul.
"""
from __future__ import annotations

import numba
import numpy as np

jit = numba.njit(cache=True, error_model="numpy", forceinline=True)
GEMV_MIN = 4096   # matrix elements from which a one-row / one-column product uses gemv


def blas_helper(m, k, n):
    """The helper's name for an (m, k) @ (k, n) product."""
    if n == 1 and k > 1 and m * k >= GEMV_MIN:
        return "mv"
    if m == 1 and k > 1 and k * n >= GEMV_MIN:
        return "vm"
    return "mm"


@jit
def mm(a, b):
    return np.dot(a, b)


@jit
def mv(a, b):
    return np.dot(a, np.ascontiguousarray(b).reshape(b.shape[0])).reshape((a.shape[0], 1))


@jit
def vm(a, b):
    return np.dot(np.ascontiguousarray(a).reshape(a.shape[1]), b).reshape((1, b.shape[1]))


# Row passes (lowering/schedule_rows.py): one pass over a matrix's rows does the work of
# a gemv and a transposed gemv. The dot product may reassociate (as BLAS does): without
# it the sum is one chain of dependent adds, which does not vectorise.
@numba.njit(cache=True, error_model="numpy", forceinline=True, fastmath={"reassoc", "contract"})
def rowdot(m, i, x):
    """sum_j m[i, j] * x[j, 0], in m's dtype."""
    s = m.dtype.type(0)   # (starting from the first product instead costs 10% in W5)
    for j in range(m.shape[1]):
        s += m[i, j] * x[j, 0]
    return s


@jit
def rowaxpy(p, r, m, i):
    """p += r * m[i, :]."""
    for j in range(m.shape[1]):
        p[j] += r * m[i, j]


@jit
def colsum(p):
    """The sum of p's rows (per-block partial products), in block order."""
    out = p[0].copy()
    for b in range(1, p.shape[0]):
        for j in range(p.shape[1]):
            out[j] += p[b, j]
    return out
