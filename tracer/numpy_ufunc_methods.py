"""NumPy ufunc methods on traced arrays: ``reduce``, ``accumulate``, ``outer`` and ``at``.

Contract: ``call(ufunc, method, fn, inputs, kwargs)`` runs ``ufunc.method(*inputs,
**kwargs)`` (``fn``: the ufunc's traced form, from tracer/numpy_protocol.py) with NumPy's
semantics, or raises ``UnsupportedError`` naming the method (``np.add.reduceat``).
- ``reduce``: ``np.add``, ``multiply``, ``maximum``, ``minimum``, ``logaddexp``,
  ``logical_and``, ``logical_or``; ``axis`` defaults to 0 as in NumPy (None: every axis,
  a tuple: those), with ``keepdims``, and ``initial`` / ``where`` where ``np.sum`` & co.
  take them.
- ``accumulate``: ``add``, ``multiply``, ``maximum``, ``minimum``, ``logaddexp`` along
  ``axis`` (default 0).
- ``outer``: every binary ufunc that traces: ``op(a[..., None, ...], b)``.
- ``at``: ``np.add.at`` / ``np.subtract.at`` with any NumPy index of concrete integers,
  slices or masks: repeated indices accumulate, and the first operand, a traced array, is
  updated in place (rebound, as ``x[i] = v`` is: tracer/tracer_setitem.py). Traced indices,
  other ufuncs and a NumPy first operand are refused.
"""
from __future__ import annotations

import numpy as np

from gradjit.tracer.api import ArrayOps, apply
from gradjit.tracer.numpy_args import UnsupportedError
from gradjit.tracer import numpy_reduce as nm
from gradjit.tracer.methods_reduce import ReduceMethods
from gradjit.tracer.registry import user_site


def _all(a, axis=None, out=None, keepdims=False, initial=np._NoValue, where=np._NoValue):
    return np.all(a, axis=axis, keepdims=keepdims)   # (tensors and tracers alike)


def _any(a, axis=None, out=None, keepdims=False, initial=np._NoValue, where=np._NoValue):
    return np.any(a, axis=axis, keepdims=keepdims)


def _logsumexp(a, axis=None, out=None, keepdims=False, initial=np._NoValue, where=np._NoValue):
    dims = tuple(range(a.ndim)) if axis is None else axis
    return ReduceMethods.logsumexp(a, dims, keepdims)


_REDUCE = {np.add: nm.np_sum, np.multiply: nm.np_prod, np.maximum: nm.np_max,
           np.minimum: nm.np_min, np.logaddexp: _logsumexp, np.logical_and: _all,
           np.logical_or: _any}
_ACCUMULATE = {np.add: lambda a, d: ReduceMethods.cumsum(a, d),
               np.multiply: lambda a, d: ReduceMethods.cumprod(a, d),
               np.maximum: lambda a, d: ReduceMethods.cummax(a, d)[0],
               np.minimum: lambda a, d: ReduceMethods.cummin(a, d)[0],
               np.logaddexp: lambda a, d: ReduceMethods.logcumsumexp(a, d)}


def _refuse(name, why=""):
    raise UnsupportedError(f"{name} is not supported on traced arrays{why}", user_site())


def _traced(x, like):
    return x if isinstance(x, ArrayOps) else like._const(np.asarray(x))


def call(ufunc, method, fn, inputs, kwargs, name):
    what = f"{name}.{method}"
    if method == "reduce" and ufunc in _REDUCE:
        a, *rest = inputs
        if rest:
            _refuse(what, " with more than one operand")
        axis = kwargs.pop("axis", 0)
        dtype, out = kwargs.pop("dtype", None), kwargs.pop("out", None)
        if dtype is not None or out is not None or set(kwargs) - {"keepdims", "initial", "where"}:
            _refuse(what, f" with {sorted(set(kwargs) | {'dtype', 'out'} - {'keepdims'})}")
        a = _traced(a, next(x for x in inputs if isinstance(x, ArrayOps)))
        if a.ndim == 0 and axis == 0:
            axis = None
        return _REDUCE[ufunc](a, axis, keepdims=kwargs.get("keepdims", False),
                              **{k: kwargs[k] for k in ("initial", "where") if k in kwargs})
    if method == "accumulate" and ufunc in _ACCUMULATE:
        (a,) = inputs
        axis = kwargs.pop("axis", 0)
        if kwargs.pop("dtype", None) is not None or kwargs.pop("out", None) is not None or kwargs:
            _refuse(what, " with dtype=, out= or other keywords")
        return _ACCUMULATE[ufunc](a, axis)
    if method == "outer" and fn is not None and len(inputs) == 2 and not kwargs:
        a, b = inputs
        like = a if isinstance(a, ArrayOps) else b
        a, b = _traced(a, like), _traced(b, like)
        return fn(a.reshape(tuple(a.shape) + (1,) * b.ndim), b)
    if method == "at" and ufunc in (np.add, np.subtract) and len(inputs) == 3 and not kwargs:
        return _at(ufunc, *inputs, what=what)
    _refuse(what)


def _at(ufunc, a, index, b, what):
    if not isinstance(a, ArrayOps):
        _refuse(what, ": the array updated in place is a NumPy array, and a traced value "
                "cannot be stored in one (make it inside the traced function, e.g. np.zeros)")
    parts = index if isinstance(index, tuple) else (index,)
    if any(isinstance(p, ArrayOps) for p in parts):
        pos = _traced_positions(a, parts, what)
    else:
        pos = np.arange(int(np.prod(a.shape)), dtype=np.int64).reshape(a.shape)[index]
    vals = _traced(b, a).to(a.dtype).expand(np.shape(pos))
    if ufunc is np.subtract:
        vals = -vals
    pos = pos.reshape(-1) if isinstance(pos, ArrayOps) else a._const(np.asarray(pos).reshape(-1))
    added = apply("index_add.default", [a.reshape(-1), pos, vals.reshape(-1)],
                  {"dim": 0}).reshape(a.shape)
    a[...] = added
    return None


def _traced_positions(a, parts, what):
    """Flat positions in ``a`` of ``a[parts]`` (integer arrays, some traced, for the leading
    axes; the trailing axes whole), as traced int64 values: negative indices count from the
    end, out-of-range ones raise when the code runs (index_add checks them)."""
    if len(parts) > a.ndim or not all(
            isinstance(p, (int, np.integer)) or np.dtype(getattr(p, "dtype", "f")).kind in "iu"
            for p in parts):
        _refuse(what, " with traced indices beside slices or non-integer indices")
    shape, k = tuple(a.shape), len(parts)
    flat = None
    for j, p in enumerate(parts):
        p = _traced(p, a).to(np.int64)
        p = _where(p < 0, p + shape[j], p)
        term = p * int(np.prod(shape[j + 1:k], dtype=np.int64))
        flat = term if flat is None else flat + term
    trailing = int(np.prod(shape[k:], dtype=np.int64))
    lead = tuple(flat.shape)
    return (flat.reshape(lead + (1,) * (a.ndim - k)) * trailing
            + a._const(np.arange(trailing, dtype=np.int64).reshape(shape[k:])))


def _where(cond, x, y):
    from gradjit.tracer.api import where
    return where(cond, x, y)
