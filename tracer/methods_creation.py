"""Tensor methods of the creation family (mixed into ``ArrayOps``).

Contract
- ``new_zeros`` / ``new_ones`` / ``new_full`` / ``new_empty`` / ``new_tensor``
  build a constant of the caller's front end (``self._const``): a fresh leaf
  ``Tensor`` in tensor mode, a graph constant while tracing. The dtype defaults
  to ``self``'s (as torch); ``requires_grad=`` applies to Tensors only.
- ``type_as(other)`` is ``self.to(other.dtype)`` (differentiable between float
  dtypes); ``contiguous()`` returns ``self`` (tracers, and Tensors whose array is
  C-contiguous) or a differentiable copy (``clone``); ``clone()`` on a tracer is
  ``self`` (traced values are immutable). ``Tensor.clone`` lives in ``tensor.py``.
- Not differentiable: the new tensors have no history.
"""
from __future__ import annotations

import numbers

import numpy as np


def size_tuple(size, op="size"):
    """torch's ``*size`` convention: ``f(2, 3)``, ``f((2, 3))`` and ``f([2, 3])`` agree."""
    if len(size) == 1 and not isinstance(size[0], numbers.Integral):
        size = tuple(size[0])
    out = []
    for s in size:
        if not isinstance(s, numbers.Integral) or isinstance(s, bool):
            raise TypeError(f"{op}: size must be a tuple of ints, got {size!r}")
        if s < 0:
            raise RuntimeError(f"{op}: negative dimension {s}, size {tuple(size)}")
        out.append(int(s))
    return tuple(out)


class CreationMethods:
    __slots__ = ()

    def _new(self, array, requires_grad):
        out = self._const(array)
        if requires_grad:
            out.requires_grad_(True)
        return out

    def new_full(self, size, fill_value, *, dtype=None, requires_grad=False):
        return self._new(np.full(size_tuple((size,), "new_full"), fill_value,
                                 self.dtype if dtype is None else dtype), requires_grad)

    def new_zeros(self, *size, dtype=None, requires_grad=False):
        return self.new_full(size_tuple(size, "new_zeros"), 0, dtype=dtype,
                             requires_grad=requires_grad)

    def new_ones(self, *size, dtype=None, requires_grad=False):
        return self.new_full(size_tuple(size, "new_ones"), 1, dtype=dtype,
                             requires_grad=requires_grad)

    def new_empty(self, *size, dtype=None, requires_grad=False):
        return self.new_zeros(*size, dtype=dtype, requires_grad=requires_grad)

    def new_tensor(self, data, *, dtype=None, requires_grad=False):
        data = getattr(data, "data", data)
        return self._new(np.array(data, dtype=self.dtype if dtype is None else dtype),
                         requires_grad)

    def type_as(self, other):
        return self.to(other.dtype)

    def clone(self):
        return self._copy()   # tracers: a new tracer of the same value (Tensor overrides)

    def detach(self):
        """The values with no gradient (tracers: the ``detach`` op; Tensor overrides)."""
        return self._apply("detach.default", [self], {})

    def contiguous(self):
        data = getattr(self, "data", None)
        if isinstance(data, np.ndarray) and not data.flags.c_contiguous:
            return self.clone()
        return self


def stop_gradient(x):
    """``x``'s values, through which no gradient flows (JAX's ``stop_gradient``, torch's
    ``detach``), for a traced array or a tensor; arrays pass as they are."""
    return x.detach() if hasattr(x, "_apply") else x
