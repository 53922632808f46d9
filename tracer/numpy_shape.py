"""NumPy's own signatures for shape, selection and fill functions whose torch-named
counterparts differ (order='F', tuple axes, modes, keywords); NumPy's axis and size
queries.

Contract: ``NUMPY_FUNCTIONS`` / ``NUMPY_UFUNCS`` map NumPy callables to
implementations with NumPy's full signature and semantics, merged late into the
protocol table (tracer/numpy_protocol.py), so they replace earlier, narrower
entries: ``np.ravel`` / ``np.reshape`` with ``order='F'``, ``np.roll`` with a
tuple ``axis`` and one shift, ``np.where`` with a non-bool condition,
``np.full_like`` with ``fill_value=`` or a traced fill value, ``np.median``
with a tuple ``axis`` and of an empty array, ``np.expand_dims`` with a tuple,
``np.take`` with ``mode``, ``np.clip`` with NumPy 2.1's ``min=`` / ``max=``,
``np.floor_divide`` (``//``), ``np.divmod`` (``divmod``) and ``np.rint`` of integers. Keywords gradjit cannot
honour raise ``UnsupportedError``. ``np.rollaxis``, ``np.ndim`` / ``np.shape`` /
``np.size`` (Python values: shapes are concrete) and ``np.tril_indices_from`` /
``np.triu_indices_from`` (plain index arrays) are behind ``checked``
(tracer/numpy_args.py's contract).
"""
from __future__ import annotations

import numbers

import numpy as np
from numpy.lib.array_utils import normalize_axis_index, normalize_axis_tuple

from gradjit.tracer.api import ArrayOps, where
from gradjit.tracer.dispatch import promoting
from gradjit.tracer.methods_reduce import ReduceMethods
from gradjit.tracer.numpy_args import checked, unsupported
from gradjit.tracer.numpy_reduce import np_transpose


def _order(name, order):
    if order not in ("C", "F", None):
        unsupported(f"{name}(..., order={order!r}) (traced arrays have no memory layout: "
                    f"use 'C' or 'F')")
    return order or "C"


def reshape(a, shape=None, order="C", *, newshape=None, copy=None):
    shape = shape if newshape is None else newshape
    shape = (shape,) if isinstance(shape, numbers.Integral) else tuple(shape)
    if _order("np.reshape", order) == "C":
        return ArrayOps.reshape(a, shape)
    # column-major: reverse the axes, reshape to the reversed shape, reverse back
    return np_transpose(ArrayOps.reshape(np_transpose(a), shape[::-1]))


def ravel(a, order="C"):
    return reshape(a, -1, order)


def roll(a, shift, axis=None):
    if axis is not None and not isinstance(axis, numbers.Integral):
        axis = tuple(axis)
        if isinstance(shift, numbers.Integral):
            shift = (shift,) * len(axis)
        shift, axis = np.broadcast_arrays(np.asarray(shift), np.asarray(axis))
        shift, axis = tuple(int(s) for s in shift.ravel()), tuple(int(d) for d in axis.ravel())
    return ArrayOps.roll(a, shift, axis)


def np_where(condition, x=np._NoValue, y=np._NoValue):
    if x is np._NoValue and y is np._NoValue:
        unsupported("np.where(condition) with one argument (np.nonzero: a data-dependent shape)")
    dt = condition.dtype if hasattr(condition, "dtype") else np.asarray(condition).dtype
    if np.dtype(dt) != np.bool_:
        condition = condition != 0 if hasattr(condition, "_apply") else \
            np.asarray(condition).astype(bool)
    return where(condition, x, y)


def full_like(a, fill_value, dtype=None, order="K", subok=True, shape=None, *, device=None):
    dt = np.dtype(dtype) if dtype is not None else np.dtype(a.dtype)
    if hasattr(fill_value, "_apply"):   # a traced or tensor fill value: its gradient flows
        return ArrayOps.to(fill_value, dt) + np.zeros_like(a, dtype=dt, shape=shape)
    if shape is not None:
        return a._const(np.full(shape, fill_value, dt))
    from gradjit.tracer import creation
    return creation.full_like(a, fill_value, dtype=dt)


def median(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    """NumPy's median: the mean of the two middle values for an even count; NaN for none."""
    if out is not None:
        unsupported("np.median(..., out=)")
    if np.dtype(a.dtype).kind in "iub":
        a = ArrayOps.to(a, np.float64)
    nd = a.ndim
    axes = tuple(range(nd)) if axis is None else (
        (axis,) if isinstance(axis, numbers.Integral) else tuple(axis))
    axes = tuple(sorted(int(d) % max(nd, 1) for d in axes))
    rest = [d for d in range(nd) if d not in axes]
    x = ArrayOps.permute(a, rest + list(axes)) if nd else a
    count = int(np.prod([a.shape[d] for d in axes]))
    x = ArrayOps.reshape(x, tuple(a.shape[d] for d in rest) + (count,) if nd else (1,))
    n = x.shape[-1]
    if n == 0:
        out = ArrayOps.sum(x, -1) * np.nan
    else:
        v = ReduceMethods.sort(x, -1)[0]
        out = ArrayOps.mean(v.narrow(-1, (n - 1) // 2, 2 - n % 2), -1)
        # a NaN sorts last; NumPy's median is NaN for a slice holding one (JAX's too, with a
        # zero gradient there, as where gives)
        last = ArrayOps.reshape(v.narrow(-1, n - 1, 1), tuple(out.shape))
        out = where(ArrayOps.ne(last, last), np.nan, out)
    if keepdims:
        out = ArrayOps.reshape(out, tuple(1 if d in axes else a.shape[d] for d in range(nd)))
    return out


def expand_dims(a, axis):
    axes = (axis,) if isinstance(axis, numbers.Integral) else tuple(axis)
    n = a.ndim + len(axes)
    axes = sorted(int(d) % n for d in axes)
    if len(set(axes)) != len(axes):
        raise ValueError("repeated axis")
    shape, it = [], iter(a.shape)
    for d in range(n):
        shape.append(1 if d in axes else next(it))
    return ArrayOps.reshape(a, tuple(shape))


def take(a, indices, axis=None, out=None, mode="raise"):
    from gradjit.tracer.numpy_index import _take
    if out is not None:
        unsupported("np.take(..., out=)")
    if mode not in ("raise", "wrap", "clip"):
        raise ValueError(f"clipmode not understood: {mode!r}")
    if mode != "raise":
        n = int(np.prod(a.shape)) if axis is None else a.shape[int(axis) % a.ndim]
        if hasattr(indices, "_apply"):
            indices = np.remainder(indices, n) if mode == "wrap" else np.clip(indices, 0, n - 1)
        else:
            idx = np.asarray(indices)
            indices = idx % n if mode == "wrap" else np.clip(idx, 0, n - 1)
    return _take(a, indices, axis)


def clip(a, a_min=np._NoValue, a_max=np._NoValue, out=None, *, min=np._NoValue,
         max=np._NoValue, **kwargs):
    if out is not None or kwargs:
        unsupported(f"np.clip(..., {'out=' if out is not None else sorted(kwargs)})")
    lo = a_min if min is np._NoValue else min
    hi = a_max if max is np._NoValue else max
    lo = None if lo is np._NoValue else lo
    hi = None if hi is np._NoValue else hi
    if lo is None and hi is None:
        raise ValueError("One of max or min must be given")
    if a.dtype.kind in "iu":   # NumPy's _clip: a Python int bound past the dtype's end is none
        info = np.iinfo(a.dtype)
        lo = None if type(lo) is int and lo <= info.min else lo
        hi = None if type(hi) is int and hi >= info.max else hi
        for v in (lo, hi):
            if type(v) is int and not info.min <= v <= info.max:
                raise OverflowError(f"Python integer {v} out of bounds for {a.dtype}")
        if lo is None and hi is None:
            return np.copy(a)   # (NumPy: np.positive, a copy)
    bounds = [promoting(v, a) for v in (lo, hi) if isinstance(v, np.generic)]
    if bounds and np.result_type(a.dtype, *bounds) != a.dtype:   # strong NumPy scalars
        a = ArrayOps.to(a, np.result_type(a.dtype, *bounds))
    return ArrayOps.clamp(a, lo, hi) if not (hasattr(lo, "_apply") or hasattr(hi, "_apply")) \
        else _clip_traced(a, lo, hi)


def _clip_traced(a, lo, hi):
    out = a if lo is None else np.maximum(a, lo)
    return out if hi is None else np.minimum(out, hi)


def _tri(name):
    def fn(m, k=0):
        if m.ndim == 1:   # NumPy: the row repeated into a square matrix
            m = ArrayOps.expand(m, (m.shape[0], m.shape[0]))
        return getattr(ArrayOps, name)(m, k)
    fn.__name__ = name
    return fn


def _rollaxis(a, axis, start=0):
    n = a.ndim
    axis = normalize_axis_index(axis, n)
    start = start + n if start < 0 else start
    if not 0 <= start < n + 1:
        raise np.exceptions.AxisError(f"'start' arg requires {-n} <= start < {n + 1}")
    start -= axis < start
    if axis == start:
        return a
    axes = [k for k in range(n) if k != axis]
    axes.insert(start, axis)
    return ArrayOps.permute(a, axes)


def _size(a, axis=None):
    if axis is None:
        return int(np.prod(a.shape))
    if isinstance(axis, numbers.Integral):
        return a.shape[normalize_axis_index(axis, a.ndim)]
    return int(np.prod([a.shape[d] for d in normalize_axis_tuple(axis, a.ndim)]))


def _tri_indices_from(np_fn):
    def fn(arr, k=0):
        if arr.ndim != 2:
            raise ValueError("input array must be 2-d")
        return np_fn(arr.shape[-2], k=k, m=arr.shape[-1])   # positions only: plain arrays
    return fn


def floor_divide(a, b):
    """``a // b`` as NumPy's ``npy_divmod`` computes it (``(a - fmod(a, b)) / b``, moved to
    the floor; ``a / b`` where ``b`` is 0, 0 for integers), so infinities and signed zeros
    match; its gradient is zero almost everywhere."""
    dt = np.result_type(getattr(a, "dtype", a), getattr(b, "dtype", b))
    if dt.kind in "iub":
        a, b = (ArrayOps.to(v, np.float64) if hasattr(v, "_apply") else np.asarray(v, np.float64)
                for v in (a, b))
    mod = np.fmod(a, b)
    div = (a - mod) / b
    div = np.where((mod != 0) & ((b < 0) != (mod < 0)), div - 1.0, div)
    low = np.floor(div)
    q = np.where(div - low > 0.5, low + 1.0, low)
    q = np.where(div == 0, np.copysign(0.0, a / b), q)   # the sign of the quotient's zero
    q = np.where(b == 0, 0.0 if dt.kind in "iub" else a / b, q)
    return ArrayOps.to(q, dt) if hasattr(q, "_apply") else np.asarray(q).astype(dt)


def cbrt(x):
    """The real cube root, sign(x) |x|^(1/3). At 0 its derivative is infinite; the gradient
    there is 0 (both branches of the where are finite), so a cube root of a value that is
    locally 0 (x * (x > 0) for x < 0) gets the right zero instead of 0 * inf = NaN."""
    x = ArrayOps.to(x, np.float64) if np.dtype(x.dtype).kind in "iub" else x
    zero = x == 0
    safe = np.where(zero, 1.0, x)
    return np.where(zero, 0.0 * x, np.sign(safe) * np.abs(safe) ** (1.0 / 3.0))


def heaviside(x1, x2):
    """0 below zero, 1 above, ``x2`` at zero (a zero gradient in ``x1``)."""
    dt = np.result_type(getattr(x1, "dtype", x1), getattr(x2, "dtype", x2))
    out = np.where(x1 == 0, x2, np.where(x1 > 0, 1.0, 0.0))
    return np.where(x1 != x1, x1, out).astype(dt)   # NaN stays NaN


def trapezoid(y, x=None, dx=1.0, axis=-1):
    """The trapezoidal rule along ``axis``: sum of (y[i+1] + y[i]) / 2 * (x[i+1] - x[i])."""
    n = y.shape[axis]
    hi, lo = (np.take(y, np.arange(1, n), axis=axis), np.take(y, np.arange(0, n - 1), axis=axis))
    if x is None:
        d = dx
    else:
        xs = x if hasattr(x, "_apply") else np.asarray(x)
        d = np.diff(xs, axis=axis if np.ndim(xs) > 1 else -1)
        if np.ndim(xs) == 1 and y.ndim > 1:
            shape = [1] * y.ndim
            shape[axis] = n - 1
            d = d.reshape(shape)
    return np.sum((hi + lo) * d / 2.0, axis=axis)


def rint(x):
    x = ArrayOps.to(x, np.float64) if np.dtype(x.dtype).kind in "iub" else x
    return ArrayOps.round(x)


NUMPY_FUNCTIONS = {
    np.reshape: reshape, np.ravel: ravel, np.roll: roll, np.where: np_where,
    np.full_like: full_like, np.median: median, np.expand_dims: expand_dims, np.take: take,
    np.clip: clip, np.tril: _tri("tril"), np.triu: _tri("triu"),
}
NUMPY_FUNCTIONS[np.trapezoid] = trapezoid
NUMPY_FUNCTIONS.update({f: checked(f, impl) for f, impl in {
    np.rollaxis: _rollaxis, np.ndim: lambda a: a.ndim, np.shape: lambda a: tuple(a.shape),
    np.size: _size, np.tril_indices_from: _tri_indices_from(np.tril_indices),
    np.triu_indices_from: _tri_indices_from(np.triu_indices),
}.items()})
def divmod_(a, b):
    """``np.divmod`` (and ``divmod(x, y)`` of a traced array): ``(a // b, a % b)``."""
    return floor_divide(a, b), np.remainder(a, b)


NUMPY_UFUNCS = {np.floor_divide: floor_divide, np.rint: rint, np.cbrt: cbrt,
                np.heaviside: heaviside, np.divmod: divmod_}
