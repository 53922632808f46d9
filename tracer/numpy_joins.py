"""NumPy's joining and splitting functions on traced arrays and tensors: concatenate,
stack, hstack, vstack, row_stack, dstack, column_stack, append, atleast_1d/2d/3d; split,
array_split, hsplit, vsplit, dsplit; and ``r_`` / ``c_``.

Contract
- ``NUMPY_FUNCTIONS`` (each entry behind ``checked``) is what ``tracer/numpy_protocol.py``
  merges into its table; ``tracer/numpy_args.py``'s contract applies (NumPy's signatures
  and values, composites of registered ops, unknown keywords a ``TypeError`` naming the
  function, ``out=`` an ``UnsupportedError``).
- The joins take ``dtype=`` / ``casting=`` as NumPy (its ``TypeError`` for a cast the
  rule refuses); plain arrays among the parts become constants. ``row_stack`` warns as
  NumPy 2.x does, at the user's line.
- The splits are slices on one axis (views: ``tracer/numpy_protocol.py``'s
  ``_VIEW_FUNCTIONS``), by NumPy's algorithm for sections and split points.
- ``r_`` / ``c_``: NumPy's ``np.r_`` / ``np.c_`` call ``np.array`` on each item,
  which no protocol intercepts (a Tensor would silently lose its gradient);
  these objects follow NumPy's index-trick rules (slices, scalars, arrays,
  ``'axis,ndmin,trans1d'`` directives) and concatenate with the traced ops.
  Matrix directives ('r', 'c', strings of rows) are refused.
"""
from __future__ import annotations

import sys
import warnings

import numpy as np
from numpy.lib.array_utils import normalize_axis_index

from gradjit.tracer.api import ArrayOps as A
from gradjit.tracer.methods_index import cat
from gradjit.tracer.numpy_args import along, checked, is_obj, like_of, obj, unset, unsupported
from gradjit.tracer.registry import _OURS, ShapeError, user_site


# -- joining --------------------------------------------------------------------------------------
def _cast(name, arrays, dtype=None, casting="same_kind"):
    """``arrays`` as gradjit arrays of one front end, cast to ``dtype`` as NumPy would."""
    arrays = list(arrays)
    if not arrays:
        raise ValueError("need at least one array to concatenate")
    like = like_of(*arrays)
    ts = [obj(x, like) for x in arrays]
    if dtype is None:
        return ts
    dt = np.dtype(dtype)
    for t in ts:
        if not np.can_cast(t.dtype, dt, casting):
            raise TypeError(f"{name}: Cannot cast array data from {t.dtype!r} to {dt!r} "
                            f"according to the rule {casting!r}")
    return [A.to(t, dt) for t in ts]


def _concatenate(arrays, axis=0, out=None, *, dtype=None, casting="same_kind"):
    unset("np.concatenate", out=out)
    ts = _cast("np.concatenate", arrays, dtype, casting)
    if axis is None:
        return cat([A.reshape(t, -1) for t in ts], 0)
    return cat(ts, axis)


def _stack(arrays, axis=0, out=None, *, dtype=None, casting="same_kind"):
    unset("np.stack", out=out)
    ts = _cast("np.stack", arrays, dtype, casting)
    if any(t.shape != ts[0].shape for t in ts):
        raise ShapeError(f"np.stack: all input arrays must have the same shape, got "
                         f"{[tuple(t.shape) for t in ts]}", user_site())
    d = normalize_axis_index(axis, ts[0].ndim + 1)
    return cat([A.unsqueeze(t, d) for t in ts], d)


def _at_least(n):
    """NumPy's atleast_{n}d for one gradjit array (plain arrays go to NumPy)."""
    np_fn = {1: np.atleast_1d, 2: np.atleast_2d, 3: np.atleast_3d}[n]

    def one(x):
        if not is_obj(x):
            return np_fn(x)
        shape = {0: (1,) * n, 1: {1: x.shape, 2: (1,) + x.shape, 3: (1,) + x.shape + (1,)}[n],
                 2: x.shape + (1,) * (n == 3)}.get(x.ndim, x.shape)
        return A.reshape(x, shape)

    def fn(*arys):
        out = tuple(one(x) for x in arys)
        return out[0] if len(out) == 1 else out
    return fn, one


_atleast_1d, _one_1d = _at_least(1)
_atleast_2d, _one_2d = _at_least(2)
_atleast_3d, _one_3d = _at_least(3)


def _joiner(name, one, axis_of):
    """hstack / vstack / dstack: each part through ``one`` (atleast_nd), then concatenate."""
    def fn(tup, *, dtype=None, casting="same_kind"):
        ts = _cast(f"np.{name}", tup, dtype, casting)
        ts = [one(t) for t in ts]
        return cat(ts, axis_of(ts))
    return fn


_hstack = _joiner("hstack", _one_1d, lambda ts: 0 if ts[0].ndim == 1 else 1)
_vstack = _joiner("vstack", _one_2d, lambda ts: 0)
_dstack_any = _joiner("dstack", _one_3d, lambda ts: 2)


def _row_stack(tup, *, dtype=None, casting="same_kind"):
    # deprecated in NumPy 2.x: NumPy's warning, at the user's line (gradjit's frames skipped)
    f, level = sys._getframe(), 1
    while f is not None and f.f_code.co_filename.startswith(_OURS):
        f, level = f.f_back, level + 1
    warnings.warn("`row_stack` alias is deprecated. Use `np.vstack` directly.",
                  DeprecationWarning, stacklevel=level)
    return _vstack(tup, dtype=dtype, casting=casting)


def _column_stack(tup):
    ts = _cast("np.column_stack", tup)
    return cat([A.reshape(t, (-1, 1)) if t.ndim < 2 else t for t in ts], 1)


def _append(arr, values, axis=None):
    like = like_of(arr, values)
    arr, values = obj(arr, like), obj(values, like)
    if axis is None:
        arr, values, axis = A.reshape(arr, -1), A.reshape(values, -1), 0
    return cat([arr, values], axis)



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

_TABLE = {
    np.append: _append, np.atleast_1d: _atleast_1d, np.atleast_2d: _atleast_2d,
    np.atleast_3d: _atleast_3d, np.concatenate: _concatenate, np.stack: _stack,
    np.hstack: _hstack, np.vstack: _vstack, np.dstack: lambda tup: _dstack_any(tup),
    np.column_stack: _column_stack,
    np.split: _split, np.array_split: _array_split,
    np.hsplit: _split_on("hsplit", 1, lambda a: 1 if a.ndim > 1 else 0),
    np.vsplit: _split_on("vsplit", 2, lambda a: 0),
    np.dsplit: _split_on("dsplit", 3, lambda a: 2),
}
if hasattr(np, "row_stack"):   # deprecated in NumPy 2.0; gone in some later release
    _TABLE[np.row_stack] = _row_stack
NUMPY_FUNCTIONS = {f: checked(f, impl) for f, impl in _TABLE.items()}
