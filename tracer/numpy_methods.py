"""NumPy's array methods for traced values, and NumPy's reductions as functions.

Contract
- Inside ``gj.jit`` / ``gj.grad`` a ``Tracer`` stands for a NumPy array, so its
  methods follow NumPy (names, defaults, keywords, results): ``x.var()`` has
  ``ddof=0``, ``x.max(1)`` returns the values, ``x.size`` is the element count,
  ``x.transpose(0, 2, 1)`` permutes, ``x.repeat(2, axis=0)`` repeats elements.
  ``gj.Tensor`` keeps torch's vocabulary (``tracer/api.py``).
- ``NumpyMethods`` is mixed into ``Tracer`` ahead of ``ArrayOps``. Its methods
  and the NumPy functions of the protocol table (``np.sum`` …, in
  ``tracer/numpy_protocol.py``) share one implementation each (``np_sum`` …),
  written on the torch-named surface called *unbound* (``ArrayOps.sum(a, …)``),
  so they work on tensors and tracers alike and never recurse into NumPy's names.
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
from gradjit.tracer.ops_reduce import std_from_var
from gradjit.tracer.registry import GradjitError, user_site


class UnsupportedError(GradjitError, TypeError):
    """A NumPy call or argument gradjit does not trace (also raised by numpy_protocol)."""


def unsupported(what):
    raise UnsupportedError(f"{what} is not supported on traced arrays; see the README's list "
                           f"of supported NumPy functions", user_site())


def _unset(name, **given):
    """Raise for keywords that were given a value gradjit cannot honour."""
    for key, value in given.items():
        if value is not None and value is not np._NoValue:
            unsupported(f"{name}(..., {key}=...)")


def _axis(name, axis, dim):
    if dim is not None:
        if axis is not None:
            raise TypeError(f"{name}() got both axis= and dim=")
        return dim
    return axis


def _keep(name, keepdims, keepdim):
    if keepdim is not None:
        return bool(keepdim)
    if keepdims is np._NoValue or keepdims is None:
        return False
    if not isinstance(keepdims, (bool, np.bool_, numbers.Integral)):
        raise TypeError(f"{name}(): keepdims must be a bool, got {type(keepdims).__name__}")
    return bool(keepdims)


def _dtype(name, a, dtype):
    return a if dtype is None else ArrayOps.to(a, np.dtype(dtype))


def _reducer(torch_name):
    def fn(a, axis=None, dtype=None, out=None, keepdims=np._NoValue, initial=np._NoValue,
           where=np._NoValue, *, dim=None, keepdim=None):
        name = f"np.{torch_name}"
        _unset(name, out=out, initial=initial, where=where)
        if isinstance(dtype, (bool, np.bool_)):   # torch's x.sum(dim, keepdim)
            dtype, keepdim = None, bool(dtype)
        a = _dtype(name, a, dtype)
        axis = _axis(name, axis, dim)
        keep = _keep(name, keepdims, keepdim)
        if torch_name == "prod":
            return _prod(a, axis, keep)
        return getattr(ArrayOps, torch_name)(a, axis, keep)
    fn.__name__ = f"np_{torch_name}"
    return fn


def _prod(a, axis, keep):
    if axis is None or isinstance(axis, numbers.Integral):
        return ArrayOps.prod(a, axis, keep)
    out = a
    for d in sorted((int(d) % max(a.ndim, 1) for d in axis), reverse=True):
        out = ArrayOps.prod(out, d, keep)
    return out


np_sum, np_mean, np_prod = _reducer("sum"), _reducer("mean"), _reducer("prod")


def _extremum(kind):
    def fn(a, axis=None, out=None, keepdims=np._NoValue, initial=np._NoValue,
           where=np._NoValue, *, dim=None, keepdim=None):
        name = f"np.{kind}"
        if dim is not None or isinstance(out, (bool, np.bool_)):   # torch's (values, indices)
            return getattr(ArrayOps, kind)(a, axis if dim is None else dim,
                                           bool(out) if keepdim is None else keepdim)
        _unset(name, out=out, initial=initial, where=where)
        dims = () if axis is None else axis
        return getattr(ArrayOps, f"a{kind}")(a, dims, _keep(name, keepdims, keepdim))
    fn.__name__ = f"np_{kind}"
    return fn


np_max, np_min = _extremum("max"), _extremum("min")


def _moment(kind):
    def fn(a, axis=None, dtype=None, out=None, ddof=0, keepdims=np._NoValue,
           where=np._NoValue, mean=np._NoValue, correction=np._NoValue, *, dim=None,
           keepdim=None, unbiased=None):
        name = f"np.{kind}"
        if dim is not None or keepdim is not None or unbiased is not None:   # torch's form
            return getattr(ArrayOps, kind)(a, axis if dim is None else dim, unbiased,
                                           bool(keepdim), axis=None)
        _unset(name, out=out, where=where, mean=mean)
        if correction is not np._NoValue:
            if ddof != 0:
                raise ValueError("ddof and correction can't be provided simultaneously.")
            ddof = correction
        a = _dtype(name, a, dtype)
        axis = _axis(name, axis, dim)
        return _var_std(kind, a, axis, ddof, _keep(name, keepdims, keepdim))
    fn.__name__ = f"np_{kind}"
    return fn


def _var_std(kind, a, axis, ddof, keep):
    var = ArrayOps.var(a, axis, keepdim=keep, correction=ddof)
    return var if kind == "var" else std_of_var(var)


def std_of_var(var):
    """The square root of a variance, with a zero gradient where it is 0 (a constant
    slice: NumPy users get 0, not NaN; tracer/ops_reduce.py's ``_std_from_var``)."""
    return std_from_var(var)


np_var, np_std = _moment("var"), _moment("std")


def _scan(kind):
    def fn(a, axis=None, dtype=None, out=None, *, dim=None):
        name = f"np.{kind}"
        _unset(name, out=out)
        a = _dtype(name, a, dtype)
        axis = _axis(name, axis, dim)
        if axis is None:
            return getattr(ArrayOps, kind)(ArrayOps.reshape(a, -1), 0)
        return getattr(ArrayOps, kind)(a, axis)
    fn.__name__ = f"np_{kind}"
    return fn


np_cumsum, np_cumprod = _scan("cumsum"), _scan("cumprod")


def np_transpose(a, axes=None):
    if axes is None:
        return ArrayOps.permute(a, tuple(range(a.ndim))[::-1])
    axes = tuple(int(d) for d in axes)
    if len(axes) != a.ndim:
        raise ValueError("axes don't match array")
    return ArrayOps.permute(a, axes)


def np_squeeze(a, axis=None):
    if axis is None:
        return ArrayOps.squeeze(a)
    axes = (axis,) if isinstance(axis, numbers.Integral) else tuple(axis)
    dims = sorted({int(d) % max(a.ndim, 1) for d in axes}, reverse=True)
    for d in dims:
        if a.shape[d] != 1:
            raise ValueError("cannot select an axis to squeeze out which has size not equal to one")
    for d in dims:
        a = ArrayOps.squeeze(a, d)
    return a


def np_trace(a, offset=0, axis1=0, axis2=1, dtype=None, out=None):
    _unset("np.trace", out=out)
    a = _dtype("np.trace", a, dtype)
    return ArrayOps.sum(ArrayOps.diagonal(a, offset, axis1, axis2), -1)


class _Size(int):
    """NumPy's ``x.size`` (an int) that also answers torch's ``x.size()`` / ``x.size(d)``."""

    def __new__(cls, n, shape):
        self = super().__new__(cls, n)
        self.shape = shape
        return self

    def __call__(self, d=None):
        return self.shape if d is None else self.shape[d]


class NumpyMethods:
    """NumPy's ndarray methods for ``Tracer`` (see the module contract)."""

    __slots__ = ()

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
            unsupported(f"reshape(..., order={order!r})")
        return ArrayOps.reshape(self, *shape)

    def flatten(self, order="C", end_dim=-1):
        if isinstance(order, numbers.Integral):   # torch's flatten(start_dim, end_dim)
            s, e = order % max(self.ndim, 1), end_dim % max(self.ndim, 1)
            if not self.ndim or s >= e:
                return ArrayOps.reshape(self, self.shape or (1,))
            n = int(np.prod(self.shape[s:e + 1]))
            return ArrayOps.reshape(self, self.shape[:s] + (n,) + self.shape[e + 1:])
        if order != "C":
            unsupported(f"flatten(order={order!r})")
        return ArrayOps.reshape(self, -1)

    def ravel(self, order="C"):
        return self.flatten(order)

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
        raise GradjitError("x.sort() sorts a NumPy array in place, which traced arrays cannot "
                           "do: write x = np.sort(x, axis)", user_site())

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
        _unset("dot", out=out)
        return np.dot(self, b)

    def clip(self, min=None, max=None, out=None, **kw):
        _unset("clip", out=out)
        if kw:
            raise TypeError(f"clip() got unexpected keyword arguments {sorted(kw)}")
        return np.clip(self, min, max)

    def take(self, indices, axis=None, out=None, mode=None):
        _unset("take", out=out, mode=mode)
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

    def nonzero(self):
        raise GradjitError("nonzero() of a traced array has a data-dependent shape, which "
                           "gj.jit / gj.grad cannot trace: use np.where(cond, a, b) to select "
                           "values", user_site())

    def fill(self, value):
        raise GradjitError("x.fill(v) writes in place, which traced arrays cannot do: write "
                           "x = np.full_like(x, v)", user_site())
