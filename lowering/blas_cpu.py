"""Matrix products for generated CPU code, compiled once per machine.

Contract
- ``mm(a, b)`` is ``np.dot(a, b)`` for 2-D arrays. Generated modules call it
  instead of ``np.dot``: Numba then compiles its dot implementation once per
  (dtype, layout) pair on this machine (``cache=True``, like the fast-math
  helpers) instead of inside every generated function, where it costs about
  half a second of each cold compile that has a matmul.
"""
from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, error_model="numpy")
def mm(a, b):
    return np.dot(a, b)
