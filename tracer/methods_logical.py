"""torch's value tests and logical methods: ``isfinite``, ``isnan``, ``isinf``,
``isposinf``, ``isneginf``, ``logical_not / and / or / xor``, ``all``, ``any``, and the
dtype queries ``is_floating_point``, ``is_complex``.

Contract
- Mixed into ``ArrayOps`` (tracer/api.py), so tensors get them as methods and
  ``gj.isfinite(t)`` ... as torch-style functions (tracer/torch_functions.py).
- Results are bool tensors (``all`` / ``any`` of a uint8 tensor: uint8, as torch's) made
  of comparisons, ``where`` and sums: no gradient, no op or formula of their own.
- Every call below is an unbound ``ArrayOps`` method: these also run on traced values
  (``gj.all(x)`` inside ``gj.grad``), whose own methods follow NumPy (``x.sum(axis)``).
- An integer or bool tensor is finite and never NaN or infinite (torch's).
"""
from __future__ import annotations

import numpy as np


def _A():
    from gradjit.tracer.api import ArrayOps   # (api.py mixes this class in)
    return ArrayOps


def _truth(x):
    """``x != 0`` as bool (a bool tensor as itself)."""
    return x if np.dtype(x.dtype) == np.bool_ else _A().ne(x, 0)


def _float(x):
    return np.dtype(x.dtype).kind == "f"


class LogicalMethods:
    __slots__ = ()

    # -- value tests --------------------------------------------------------------------
    def isnan(self):
        return _A().ne(self, self)   # (False everywhere for integers and bools)

    def isinf(self):
        A = _A()
        return A.eq(A.abs(self), np.inf) if _float(self) else A.ne(self, self)

    def isposinf(self):
        A = _A()
        return A.eq(self, np.inf) if _float(self) else A.ne(self, self)

    def isneginf(self):
        A = _A()
        return A.eq(self, -np.inf) if _float(self) else A.ne(self, self)

    def isfinite(self):
        A = _A()
        return A.lt(A.abs(self), np.inf) if _float(self) else A.eq(self, self)

    # -- logical ------------------------------------------------------------------------
    def logical_not(self):
        return _A().eq(_truth(self), False)

    def logical_and(self, other):
        from gradjit.tracer.api import where
        return where(_truth(self), _truth(self._coerce(other)), False)

    def logical_or(self, other):
        from gradjit.tracer.api import where
        return where(_truth(self), True, _truth(self._coerce(other)))

    def logical_xor(self, other):
        return _A().ne(_truth(self), _truth(self._coerce(other)))

    # -- reductions ---------------------------------------------------------------------
    def all(self, dim=None, keepdim=False):
        """torch's: whether every element (along ``dim``: an int or a tuple) is nonzero."""
        A = _A()
        misses = A.sum(A.to(A.logical_not(self), np.int64), dim, keepdim)
        return _anyall_dtype(self, A.eq(misses, 0))

    def any(self, dim=None, keepdim=False):
        """torch's: whether any element (along ``dim``: an int or a tuple) is nonzero."""
        A = _A()
        hits = A.sum(A.to(_truth(self), np.int64), dim, keepdim)
        return _anyall_dtype(self, A.gt(hits, 0))

    # -- dtype queries ------------------------------------------------------------------
    def is_floating_point(self):
        return _float(self)

    def is_complex(self):
        return np.dtype(self.dtype).kind == "c"   # (always False: gradjit is real-only)


def _anyall_dtype(x, result):
    return _A().to(result, np.uint8) if np.dtype(x.dtype) == np.uint8 else result
