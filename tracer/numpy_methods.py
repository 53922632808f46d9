"""NumPy's array methods for traced values, and NumPy's reductions as functions.

Contract
- Inside ``gj.jit`` / ``gj.grad`` a ``Tracer`` stands for a NumPy array, so its
  methods follow NumPy (names, defaults, keywords, results): ``x.var()`` has
  ``ddof=0``, ``x.max(1)`` returns the values, ``x.size`` is the element count,
  ``x.transpose(0, 2, 1)`` permutes, ``x.repeat(2, axis=0)`` repeats elements.
  ``gj.Tensor`` keeps torch's vocabulary (``tracer/api.py``).
- ``NumpyMethods`` is mixed into ``Tracer`` ahead of ``ArrayOps``. A method and
  the NumPy function of the same name share one implementation
  (``tracer/numpy_reduce.py``'s ``np_sum`` …, or the method calls ``np.<name>``
  itself, which dispatches to the protocol table), written on the torch-named
  surface called unbound, so nothing recurses into NumPy's names.
- Torch's forms still work where NumPy has no meaning for them, so code written
  for tensors (gradjit's nn layers and backward helpers, users' torch-style code)
  runs on tracers: torch's keywords (``dim=``, ``keepdim=``, ``unbiased=``,
  ``descending=``) select torch's behaviour (``x.max(dim=1)`` is ``(values,
  indices)``), a bool in NumPy's ``dtype`` slot is torch's ``keepdim``, two dims
  given to ``transpose`` of a tensor that is not 2-D swap them, and ``x.size``
  is an int that, called, gives torch's ``size()``. A NumPy call never reaches
  these forms (NumPy raises for each of them).
- Keywords NumPy accepts but gradjit cannot honour on traced values (``out=``,
  ``where=``, ``initial=``, ``order='F'``) raise ``UnsupportedError`` naming the
  method; unknown keywords raise ``TypeError`` as NumPy's would. Nothing is
  silently ignored.
"""
from __future__ import annotations

import numbers

import numpy as np

from gradjit.tracer.api import ArrayOps
from gradjit.tracer.numpy_args import UnsupportedError, unset, unsupported  # noqa: F401
from gradjit.tracer.numpy_reduce import (np_cumprod, np_cumsum, np_max, np_mean, np_min,
                                         np_prod, np_squeeze, np_std, np_sum, np_trace,
                                         np_transpose, np_var)
from gradjit.tracer.registry import GradjitError, user_site


class _Size(int):
    """NumPy's ``x.size`` (an int) that also answers torch's ``x.size()`` / ``x.size(d)``."""

    def __new__(cls, n, shape):
        self = super().__new__(cls, n)
        self.shape = shape
        return self

    def __call__(self, d=None):
        return self.shape if d is None else self.shape[d]


class UnsupportedMethodError(UnsupportedError, AttributeError):
    """An ndarray method or attribute gradjit does not trace; an AttributeError too, so
    ``hasattr(x, "put")`` is False for a traced array, as for anything without it."""


def _refused(name, why):
    """An ndarray attribute whose NumPy function is refused on traced arrays: reading it
    raises UnsupportedMethodError naming it and the user's line (not a bare
    AttributeError saying ``Tracer`` lacks it)."""
    def get(self):
        what = f"x.{name}" if name == "flat" else f"x.{name}() (np.{name})"
        raise UnsupportedMethodError(f"{what} is not supported on traced arrays"
                                     f"{why}; see the README's list of supported NumPy "
                                     f"functions", user_site())
    return property(get)


class NumpyMethods:
    """NumPy's ndarray methods for ``Tracer`` (see the module contract)."""

    __slots__ = ()
    _numpy_promotion = True   # NumPy scalars are strong operands (api._strong)
    _numpy_indexing = True    # an int beside an integer array is advanced (methods_index)

    @property
    def size(self):
        return _Size(int(np.prod(self.shape)), self.shape)

    @property
    def itemsize(self):
        return np.dtype(self.dtype).itemsize

    @property
    def nbytes(self):
        return self.size * self.itemsize

    sum, mean, prod = np_sum, np_mean, np_prod
    max, min, var, std = np_max, np_min, np_var, np_std
    cumsum, cumprod = np_cumsum, np_cumprod
    squeeze, trace = np_squeeze, np_trace

    def transpose(self, *axes):
        if not axes or axes == (None,):
            return np_transpose(self)
        if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
            axes = tuple(axes[0])
        if len(axes) == 2 and self.ndim != 2:   # torch's transpose(dim0, dim1)
            return ArrayOps.transpose(self, *axes)
        return np_transpose(self, axes)

    def reshape(self, *shape, order="C", copy=None):
        if order != "C":
            from gradjit.tracer.numpy_shape import reshape
            return reshape(self, shape[0] if len(shape) == 1 else shape, order)
        return ArrayOps.reshape(self, *shape)

    def flatten(self, order="C", end_dim=-1):
        if isinstance(order, numbers.Integral):   # torch's flatten(start_dim, end_dim)
            s, e = order % max(self.ndim, 1), end_dim % max(self.ndim, 1)
            if not self.ndim or s >= e:
                return ArrayOps.reshape(self, self.shape or (1,))
            n = int(np.prod(self.shape[s:e + 1]))
            return ArrayOps.reshape(self, self.shape[:s] + (n,) + self.shape[e + 1:])
        return self.ravel(order)._copy()   # NumPy's flatten copies (ravel may view)

    def ravel(self, order="C"):
        from gradjit.tracer.numpy_shape import ravel
        return ravel(self, order)

    def __pos__(self):
        return self._copy()   # +x is a new array

    # NumPy has no bool loop for power and remainder: bools go through its int8 one (bool
    # ** True is int8), which the ufunc's own dtype resolution gives (tracer/ufunc_dtypes.py),
    # and bool ** 2 is np.square (NumPy's fast path for a Python 2): int8, where ** 3 is int64.
    # Other dtypes promote as the ops' rule does, on the fast path.
    def __pow__(self, other):
        if self.dtype == np.bool_:
            return np.square(self) if type(other) is int and other == 2 else np.power(self, other)
        return ArrayOps.__pow__(self, other)

    def __rpow__(self, other):
        if self.dtype == np.bool_:
            return np.power(other, self)
        return ArrayOps.__rpow__(self, other)

    def __mod__(self, other):
        if self.dtype == np.bool_:
            return np.remainder(self, other)
        return ArrayOps.__mod__(self, other)

    def __divmod__(self, other):   # (NumPy arrays: np.divmod, (x // y, x % y))
        return np.divmod(self, other)

    def __rdivmod__(self, other):
        return np.divmod(other, self)

    def __rmod__(self, other):
        if self.dtype == np.bool_:
            return np.remainder(other, self)
        return ArrayOps.__rmod__(self, other)

    def copy(self, order="C"):
        return self._copy()

    def astype(self, dtype, order="K", casting="unsafe", subok=True, copy=True):
        out = ArrayOps.to(self, dtype)
        return out._copy() if out is self and copy else out

    def repeat(self, repeats, axis=None):
        return np.repeat(self, repeats, axis)

    def sort(self, axis=-1, kind=None, order=None, *, stable=None, dim=None, descending=None):
        if dim is not None or descending is not None or isinstance(kind, (bool, np.bool_)):
            return ArrayOps.sort(self, axis if dim is None else dim,   # torch's (values, indices)
                                 bool(kind) if descending is None else descending)
        if axis is None:   # NumPy's own refusal: an in-place sort keeps the shape
            raise TypeError("'NoneType' object cannot be interpreted as an integer")
        self[...] = np.sort(self, axis=axis, kind=kind, order=order)   # views see it, as NumPy's

    def argsort(self, axis=-1, kind=None, order=None, *, stable=None, dim=None,
                descending=None):
        if dim is not None or descending is not None or isinstance(kind, (bool, np.bool_)):
            return ArrayOps.argsort(self, axis if dim is None else dim,
                                    bool(kind) if descending is None else descending)
        return np.argsort(self, axis=axis, kind=kind, order=order)

    def argmax(self, axis=None, out=None, *, keepdims=False):
        return np.argmax(self, axis=axis, out=out, keepdims=keepdims)

    def argmin(self, axis=None, out=None, *, keepdims=False):
        return np.argmin(self, axis=axis, out=out, keepdims=keepdims)

    def all(self, axis=None, out=None, keepdims=False, *, where=np._NoValue):
        return np.all(self, axis=axis, out=out, keepdims=keepdims, where=where)

    def any(self, axis=None, out=None, keepdims=False, *, where=np._NoValue):
        return np.any(self, axis=axis, out=out, keepdims=keepdims, where=where)

    def dot(self, b, out=None):
        unset("dot", out=out)
        return np.dot(self, b)

    def clip(self, min=None, max=None, out=None, **kw):
        unset("clip", out=out)
        if kw:
            raise TypeError(f"clip() got unexpected keyword arguments {sorted(kw)}")
        return np.clip(self, min, max)

    def take(self, indices, axis=None, out=None, mode=None):
        unset("take", out=out, mode=mode)
        return np.take(self, indices, axis=axis)

    def conj(self):
        return self._copy()

    conjugate = conj

    @property
    def real(self):
        return self

    @property
    def imag(self):
        return np.zeros_like(self)

    def diagonal(self, offset=0, axis1=0, axis2=1, *, dim1=None, dim2=None):
        return ArrayOps.diagonal(self, offset, axis1 if dim1 is None else dim1,
                                 axis2 if dim2 is None else dim2)

    def view(self, *args, dtype=None, type=None):
        """NumPy's ``x.view()`` (the same values) and ``x.view(dtype)`` of the same dtype;
        torch's ``x.view(*shape)`` from code written for tensors."""
        if type is not None:
            unsupported("x.view(type=...)")
        if dtype is None and len(args) == 1 and not isinstance(args[0], (numbers.Integral,
                                                                          tuple, list)):
            dtype, args = args[0], ()
        if dtype is not None:
            if np.dtype(dtype) != np.dtype(self.dtype):
                unsupported(f"x.view({np.dtype(dtype).name}) (reinterpreting the bytes)")
            return self
        return ArrayOps.reshape(self, *args) if args else self

    def nonzero(self):
        raise GradjitError("nonzero() of a traced array has a data-dependent shape, which "
                           "gj.jit / gj.grad cannot trace: use np.where(cond, a, b) to select "
                           "values", user_site())

    def searchsorted(self, v, side="left", sorter=None):
        return np.searchsorted(self, v, side=side, sorter=sorter)

    flat = _refused("flat", ": index x.ravel() instead")
    put = _refused("put", " (it writes in place): write x = np.where(mask, v, x) or "
                          "x[idx] = v")
    compress = _refused("compress", " (its shape depends on the condition's values): use "
                                    "np.where(cond, x, 0), or index with a NumPy mask")
    choose = _refused("choose", ": select with np.where or np.select")
    partition = _refused("partition", ": np.sort gives a partitioned order")
    argpartition = _refused("argpartition", ": np.argsort gives a partitioning order")
    resize = _refused("resize", " (it resizes in place)")

    def fill(self, value):
        raise GradjitError("x.fill(v) writes in place, which traced arrays cannot do: write "
                           "x = np.full_like(x, v)", user_site())
