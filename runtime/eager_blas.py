"""Eager (tensor-mode) matrix products on the BLAS the compiled code uses.

Contract
- ``eager_mm`` is the eager implementation of ``mm.default`` (installed through
  tracer/hooks.py by ``gradjit/__init__.py``): large
  float32 / float64 products of writable C- or F-contiguous arrays run through
  ``lowering.blas_cpu`` (Numba's BLAS, the one every compiled gradient calls);
  anything else runs NumPy's ``matmul``, the op's reference implementation,
  which the interpreter and the tests keep using.
- Why: NumPy and Numba (through SciPy) bundle separate OpenBLAS builds, each
  with its own thread pool whose workers spin for a while after a call. An
  eager forward on NumPy's pool followed by a compiled backward on SciPy's had
  the two pools fighting over the cores: the least-squares workload (W5,
  10000x100) took 8-11 ms per tensor-mode step instead of about 0.6 ms on two
  cores. Small products stay on NumPy (single-threaded there, and cheaper to
  call).
"""
from __future__ import annotations

import numpy as np

LARGE = 1 << 15   # m*k*n from which OpenBLAS runs a product on several threads


def eager_mm(a, b):
    m, k = a.shape
    n = b.shape[1]
    if (m * k * n >= LARGE and a.dtype == b.dtype and a.dtype.char in "fd"
            and _plain(a) and _plain(b)):
        from gradjit.lowering import blas_cpu as bl
        name = bl.blas_helper(m, k, n)
        if name == "mm" and m * k * n >= bl.PAR_MIN:
            return _threaded_mm(a, b)
        return getattr(bl, name)(a, b)
    return np.matmul(a, b)


def _threaded_mm(a, b):
    """A large product over the free cores, one thread pool (runtime/threads.py)."""
    global _threaded_mm
    from gradjit.lowering import blas_cpu as bl
    from gradjit.runtime import threads
    _threaded_mm = threads.threaded(bl.mm, True)
    return _threaded_mm(a, b)


def _plain(x):
    """An array Numba's BLAS helpers take without a new specialisation."""
    f = x.flags
    return f.writeable and f.aligned and (f.c_contiguous or f.f_contiguous)
