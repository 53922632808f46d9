"""NumPy's real / imag / angle / sinc, the split family, rollaxis, ndim / shape / size,
tril/triu_indices_from, diff, gradient, select, average, meshgrid; ``r_`` / ``c_``; and
the checked tables of numpy_joins, numpy_ufuncs, numpy_pad and this module.

Contract
- The third part of ``tracer/numpy_joins.py`` (whose contract applies: NumPy's
  signatures and values, composites of registered ops, unknown keywords a
  ``TypeError`` naming the function, unhonourable ones ``UnsupportedError``).
  ``NUMPY_FUNCTIONS`` (this module's, numpy_joins's and numpy_pad's, each
  behind ``checked``) and ``NUMPY_UFUNCS`` are what ``tracer/numpy_protocol.py``
  merges into its tables.
- real / imag / conj / angle take real input (gradjit has no complex dtypes):
  ``imag`` is zeros, ``angle`` 0 or pi (by the sign bit) with a zero gradient.
- ``np.gradient`` is NumPy's formula, term for term: second-order central
  differences inside, ``edge_order`` 1 or 2 one-sided ones at the ends;
  spacing a scalar (traced too) or coordinates (a NumPy array is checked for
  uniform spacing as NumPy does; traced coordinates always take the
  non-uniform formula, equal up to rounding).
- ``np.average`` checks that weights do not sum to zero only when they are
  concrete (a traced sum has no value yet).
- ``r_`` / ``c_``: NumPy's ``np.r_`` / ``np.c_`` call ``np.array`` on each item,
  which no protocol intercepts (a Tensor would silently lose its gradient);
  these objects follow NumPy's index-trick rules (slices, scalars, arrays,
  ``'axis,ndmin,trans1d'`` directives) and concatenate with the traced ops.
  Matrix directives ('r', 'c', strings of rows) are refused.
"""
from __future__ import annotations

import numbers

import numpy as np
from numpy.lib.array_utils import normalize_axis_index, normalize_axis_tuple

from gradjit.tracer.api import ArrayOps as A
from gradjit.tracer.api import where as _where
from gradjit.tracer.creation import zeros_like
from gradjit.tracer.methods_index import _concrete, cat
from gradjit.tracer.methods_math import binop
from gradjit.tracer.numpy_joins import (NUMPY_UFUNCS, TABLE, along, checked, is_obj,  # noqa: F401
                                        keep, like_of, ndim_of, obj, probe, unsupported, weak)
from gradjit.tracer.numpy_ufuncs import UFUNCS as _LOGIC_UFUNCS
from gradjit.tracer.numpy_pad import TABLE as _PAD_TABLE

NUMPY_UFUNCS = {**NUMPY_UFUNCS, **_LOGIC_UFUNCS}

_F64 = np.dtype(np.float64)


# -- real-input complex helpers, sinc -------------------------------------------------------------
def _imag(val):
    return zeros_like(val)   # a constant: no gradient flows through it


def _angle(z, deg=False):
    """``arctan2(0, z)`` of real ``z``, spelled without atan2 (whose gradient is 0/0 at
    z == 0): pi where z's sign bit is set (-0.0 and -inf included), else 0, NaN kept."""
    x = A.to(z, probe(np.angle, z.dtype))
    neg = A.lt(binop("copysign.Tensor", 1.0, x), 0)
    a = _where(neg, x._const(np.asarray(np.pi, x.dtype)), x._const(np.zeros((), x.dtype)))
    a = _where(A.ne(x, x), x, a)
    return A.mul(a, 180 / np.pi) if deg else a


def _sinc(x):
    """NumPy's own formula: ``y = pi * x``; ``sin(y) / y`` with y = eps where y == 0."""
    y = A.mul(A.to(x, probe(np.sinc, x.dtype)), np.pi)
    y = _where(A.ne(y, 0), y, np.finfo(y.dtype).eps)
    return A.div(A.sin(y), y)


# -- splitting ------------------------------------------------------------------------------------
def _array_split(ary, indices_or_sections, axis=0):
    """NumPy's algorithm: sections of sizes n//k + 1 first, or split points as slices."""
    d = normalize_axis_index(axis, ary.ndim)
    n = ary.shape[d]
    try:
        points = [0] + list(indices_or_sections) + [n]
    except TypeError:
        k = int(indices_or_sections)
        if k <= 0:
            raise ValueError("number sections must be larger than 0.") from None
        each, extras = divmod(n, k)
        points = np.cumsum([0] + extras * [each + 1] + (k - extras) * [each]).tolist()
    return [along(ary, d, slice(int(s), int(e))) for s, e in zip(points, points[1:])]


def _split(ary, indices_or_sections, axis=0):
    try:
        len(indices_or_sections)
    except TypeError:
        if ary.shape[normalize_axis_index(axis, ary.ndim)] % indices_or_sections:
            raise ValueError("array split does not result in an equal division") from None
    return _array_split(ary, indices_or_sections, axis)


def _split_on(name, min_ndim, axis_of):
    def fn(ary, indices_or_sections):
        if ary.ndim < min_ndim:
            raise ValueError(f"{name} only works on arrays of {min_ndim} or more dimensions")
        return _split(ary, indices_or_sections, axis_of(ary))
    return fn


# -- axes and sizes -------------------------------------------------------------------------------
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
    return A.permute(a, axes)


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


# -- diff -----------------------------------------------------------------------------------------
def _diff(a, n=1, axis=-1, prepend=np._NoValue, append=np._NoValue):
    if n == 0:
        return a
    if n < 0:
        raise ValueError("order must be non-negative but got " + repr(n))
    like = like_of(a, prepend, append)
    a = obj(a, like)
    if a.ndim == 0:
        raise ValueError("diff requires input that is at least one dimensional")
    d = normalize_axis_index(axis, a.ndim)
    parts = []
    for p in (prepend, a, append):
        if p is not np._NoValue:
            p = obj(p, like)
            parts.append(A.expand(p, a.shape[:d] + (1,) + a.shape[d + 1:]) if p.ndim == 0 else p)
    a = cat(parts, d) if len(parts) > 1 else a
    for _ in range(n):
        hi, lo = along(a, d, slice(1, None)), along(a, d, slice(None, -1))
        a = A.ne(hi, lo) if a.dtype == np.bool_ else A.sub(hi, lo)
    return a


# -- gradient -------------------------------------------------------------------------------------
def _spacing(h, n):
    """An axis' spacing as NumPy reduces it: a scalar, or the differences of coordinates."""
    if ndim_of(h) == 0:
        return h
    if ndim_of(h) != 1:
        raise ValueError("distances must be either scalars or 1d")
    if len(h) != n:
        raise ValueError("when 1d, distances must match the length of the corresponding "
                         "dimension")
    if is_obj(h):   # traced coordinates: no value to test for uniform spacing
        h = h if h.dtype.kind in "fc" else A.to(h, _F64)
        return A.sub(along(h, 0, slice(1, None)), along(h, 0, slice(None, -1)))
    h = np.asarray(h)
    diffx = np.diff(h.astype(_F64) if np.issubdtype(h.dtype, np.integer) else h)
    return diffx[0] if (diffx == diffx[0]).all() else diffx


def _coef(c, like, axis, ndim):
    """A spacing or coefficient as an operand: NumPy values become constants (a NumPy
    float64 scalar promotes float32 as in NumPy; a Python float stays weak); arrays are
    laid along ``axis``."""
    if isinstance(c, (np.ndarray, np.generic)):
        c = obj(c, like)
    shape = (1,) * axis + (-1,) + (1,) * (ndim - axis - 1)
    return A.reshape(c, shape) if ndim_of(c) else c


def _grad_axis(f, ax, h, edge_order):
    if f.shape[ax] < edge_order + 1:
        raise ValueError("Shape of array too small to calculate a numerical gradient, at least "
                         "(edge_order + 1) elements are required.")

    def s(start, stop):
        return along(f, ax, slice(start, stop))

    def lin(a, b, c, fa, fb, fc):
        a, b, c = map(co, (a, b, c))
        return a * fa + b * fb + c * fc

    def co(v):
        return _coef(v, f, ax, f.ndim)

    if ndim_of(h) == 0:
        inner = (s(2, None) - s(None, -2)) / co(2. * h)
    else:
        dx1, dx2 = h[0:-1], h[1:]
        inner = lin(-dx2 / (dx1 * (dx1 + dx2)), (dx2 - dx1) / (dx1 * dx2),
                    dx1 / (dx2 * (dx1 + dx2)), s(None, -2), s(1, -1), s(2, None))
    uniform = ndim_of(h) == 0
    if edge_order == 1:
        first = (s(1, 2) - s(0, 1)) / co(h if uniform else h[0])
        last = (s(-1, None) - s(-2, -1)) / co(h if uniform else h[-1])
    else:
        if uniform:
            a, b, c = -1.5 / h, 2. / h, -0.5 / h
        else:
            dx1, dx2 = h[0], h[1]
            a, b, c = (-(2. * dx1 + dx2) / (dx1 * (dx1 + dx2)), (dx1 + dx2) / (dx1 * dx2),
                       -dx1 / (dx2 * (dx1 + dx2)))
        first = lin(a, b, c, s(0, 1), s(1, 2), s(2, 3))
        if uniform:
            a, b, c = 0.5 / h, -2. / h, 1.5 / h
        else:
            dx1, dx2 = h[-2], h[-1]
            a, b, c = (dx2 / (dx1 * (dx1 + dx2)), -(dx2 + dx1) / (dx1 * dx2),
                       (2. * dx2 + dx1) / (dx2 * (dx1 + dx2)))
        last = lin(a, b, c, s(-3, -2), s(-2, -1), s(-1, None))
    return cat([first, inner, last], ax)


def _gradient(f, *varargs, axis=None, edge_order=1):
    like = like_of(f, *varargs)
    f = obj(f, like)
    axes = tuple(range(f.ndim)) if axis is None else normalize_axis_tuple(axis, f.ndim)
    if not varargs:
        dx = [1.0] * len(axes)
    elif len(varargs) == 1 and ndim_of(varargs[0]) == 0:
        dx = list(varargs) * len(axes)
    elif len(varargs) == len(axes):
        dx = [_spacing(h, f.shape[ax]) for h, ax in zip(varargs, axes)]
    else:
        raise TypeError("invalid number of arguments")
    if edge_order > 2:
        raise ValueError("'edge_order' greater than 2 not supported")
    if f.dtype == np.bool_:
        raise TypeError("numpy boolean subtract, the `-` operator, is not supported, use the "
                        "bitwise_xor, the `^` operator, or the logical_xor function instead.")
    otype = f.dtype if f.dtype.kind in "fc" else _F64   # integers: float64, as NumPy
    f = A.to(f, otype)
    outs = [A.to(_grad_axis(f, ax, h, edge_order), otype) for ax, h in zip(axes, dx)]
    return outs[0] if len(axes) == 1 else tuple(outs)


# -- select ---------------------------------------------------------------------------------------
def _select(condlist, choicelist, default=0):
    if len(condlist) != len(choicelist):
        raise ValueError("list of cases must be same length as list of conditions")
    if len(condlist) == 0:
        raise ValueError("select with an empty condition list is not possible")
    like = like_of(condlist, choicelist, default)
    try:
        dt = np.result_type(*[weak(c) for c in list(choicelist) + [default]])
    except TypeError as e:
        raise TypeError(f"Choicelist and default value do not have a common dtype: {e}") from None
    conds = [obj(c, like) for c in condlist]
    for i, c in enumerate(conds):
        if c.dtype != np.bool_:
            raise TypeError(f"invalid entry {i} in condlist: should be boolean ndarray")
    choices = [obj(c, like, dt) for c in choicelist]
    shape = tuple(np.broadcast_shapes(*[t.shape for t in conds + choices],
                                      default.shape if is_obj(default) else np.shape(default)))
    out = obj(default, like, dt)
    for cond, choice in zip(conds[::-1], choices[::-1]):   # the first true condition wins
        out = _where(cond, choice, out)
    return A.expand(out, shape)


def _sum(x, axes, keepdims):
    return x if axes == () else A.sum(x, axes, keepdims)


def _average(a, axis=None, weights=None, returned=False, *, keepdims=np._NoValue):
    like = like_of(a, weights)
    a = obj(a, like)
    axes = None if axis is None else normalize_axis_tuple(axis, a.ndim, argname="axis")
    kd = keep(keepdims)
    if weights is None:
        x = a if a.dtype.kind in "fc" else A.to(a, _F64)
        avg = x if axes == () else A.mean(x, axes, kd)
        scl = like._const(np.full(avg.shape, a.numel() / avg.numel(), avg.dtype))
    else:
        w = obj(weights, like)
        if a.shape != w.shape:
            if axes is None:
                raise TypeError("Axis must be specified when shapes of a and weights differ.")
            if w.shape != tuple(a.shape[ax] for ax in axes):
                raise ValueError("Shape of weights must be consistent with shape of a along "
                                 "specified axis.")
            w = A.permute(w, tuple(int(k) for k in np.argsort(axes)))
            w = A.reshape(w, tuple(s if ax in axes else 1 for ax, s in enumerate(a.shape)))
        rdt = np.result_type(a.dtype, w.dtype, *("f8",) * (a.dtype.kind in "biu"))
        w = A.to(w, rdt)
        scl = _sum(w, axes, kd)
        known = _concrete(scl)
        if known is not None and np.any(known == 0.0):
            raise ZeroDivisionError("Weights sum to zero, can't be normalized")
        avg = A.div(_sum(A.mul(A.to(a, rdt), w), axes, kd), scl)
        scl = A.expand(scl, avg.shape)
    return (avg, scl) if returned else avg


def _meshgrid(*xi, copy=True, sparse=False, indexing="xy"):
    if indexing not in ("xy", "ij"):
        raise ValueError("Valid values for `indexing` are 'xy' and 'ij'.")
    like = like_of(*xi)
    s0 = (1,) * len(xi)
    out = [A.reshape(obj(x, like), s0[:i] + (-1,) + s0[i + 1:]) for i, x in enumerate(xi)]
    if indexing == "xy" and len(xi) > 1:   # x varies along columns, y along rows
        out[0] = A.reshape(out[0], (1, -1) + s0[2:])
        out[1] = A.reshape(out[1], (-1, 1) + s0[2:])
    if not sparse:
        shape = tuple(np.broadcast_shapes(*[t.shape for t in out]))
        out = [A.expand(t, shape) for t in out]
    return out if sparse and not copy else tuple(out)


# -- r_ / c_ --------------------------------------------------------------------------------------
class _IndexConcat:
    """``np.r_`` / ``np.c_`` for gradjit arrays (NumPy's AxisConcatenator rules)."""

    def __init__(self, numpy_twin, axis, ndmin, trans1d):
        self._np, self.axis, self.ndmin, self.trans1d = numpy_twin, axis, ndmin, trans1d

    def __getitem__(self, key):
        key = key if isinstance(key, tuple) else (key,)
        like = next((k for k in key if is_obj(k)), None)
        if like is None:   # nothing traced: NumPy's own
            return self._np[key]
        axis, ndmin, trans1d = self.axis, self.ndmin, self.trans1d
        items, kinds = [], []
        for k, item in enumerate(key):
            if isinstance(item, str):
                if k != 0:
                    raise ValueError("special directives must be the first entry.")
                if item in ("r", "c") or ";" in item:
                    unsupported(f"r_/c_ matrix directive {item!r}")
                try:   # 'axis' or 'axis,ndmin' or 'axis,ndmin,trans1d'
                    vec = [int(v) for v in item.split(",")]
                except ValueError:
                    raise ValueError(f"unknown special directive {item!r}") from None
                axis, ndmin, trans1d = (vec + [ndmin, trans1d][len(vec) - 1:])[:3]
                continue
            if isinstance(item, (list, tuple)):   # [v[0], 1.0]: traced values inside a list
                from gradjit.tracer.coercion import _holds_traced, to_traced
                item = to_traced(item, like) if _holds_traced(item) else item
            if isinstance(item, slice) or not is_obj(item) and type(item) not in np.ScalarType:
                new = np.r_[item] if isinstance(item, slice) else np.asarray(item)
                if isinstance(item, slice) and ndmin > 1:
                    new = np.array(new, ndmin=ndmin)
                    new = new.swapaxes(-1, trans1d) if trans1d != -1 else new
                item = like._const(new)
            if is_obj(item):
                nd = item.ndim
                if nd < ndmin:
                    item = A.reshape(item, (1,) * (ndmin - nd) + item.shape)
                    if trans1d != -1:
                        k2, k1 = ndmin - nd, trans1d + (ndmin - nd + 1) * (trans1d < 0)
                        ax = list(range(ndmin))
                        item = A.permute(item, ax[:k1] + ax[k2:] + ax[k1:k2])
                kinds.append(item.dtype)
            else:   # a Python or NumPy scalar: weak in the result type, as NumPy's
                kinds.append(item)
            items.append(item)
        dt = np.result_type(*kinds)
        parts = [A.to(t, dt) if is_obj(t) else like._const(np.array(t, ndmin=ndmin, dtype=dt))
                 for t in items]
        return cat(parts, axis)


r_ = _IndexConcat(np.r_, 0, 1, -1)
c_ = _IndexConcat(np.c_, -1, 2, 0)

_TABLE2 = {
    np.real: lambda val: val, np.imag: _imag, np.real_if_close: lambda a, tol=100: a, np.angle: _angle, np.sinc: _sinc,
    np.split: _split, np.array_split: _array_split,
    np.hsplit: _split_on("hsplit", 1, lambda a: 1 if a.ndim > 1 else 0),
    np.vsplit: _split_on("vsplit", 2, lambda a: 0),
    np.dsplit: _split_on("dsplit", 3, lambda a: 2),
    np.diff: _diff, np.gradient: _gradient, np.select: _select, np.average: _average,
    np.meshgrid: _meshgrid, np.rollaxis: _rollaxis, np.ndim: lambda a: a.ndim,
    np.shape: lambda a: tuple(a.shape), np.size: _size,
    np.tril_indices_from: _tri_indices_from(np.tril_indices),
    np.triu_indices_from: _tri_indices_from(np.triu_indices),
}
NUMPY_FUNCTIONS = {f: checked(f, impl) for f, impl in {**TABLE, **_PAD_TABLE, **_TABLE2}.items()}

