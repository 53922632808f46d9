"""NumPy spellings of the indexing and shape family, for ``tracer/numpy_protocol.py``.

Contract: ``NUMPY_FUNCTIONS`` maps NumPy functions to the torch-named surface
(``tracer/methods_index.py``) with NumPy's argument names and semantics:
``np.split`` takes a number of equal sections or split *indices* (not sizes),
``np.roll`` / ``np.flip`` with ``axis=None`` act on every axis (flattened for
roll), ``np.take`` / ``np.take_along_axis`` with ``axis=None`` index the
flattened array. Unsupported keyword arguments raise ``UnsupportedError``.
"""
from __future__ import annotations

import numbers

import numpy as np

from gradjit.tracer.methods_index import IndexMethods, cat, stack
from gradjit.tracer.methods_index2 import NUMPY_FUNCTIONS as _INDEX2


def _split(a, indices_or_sections, axis=0):
    n = a.shape[axis]
    if isinstance(indices_or_sections, numbers.Integral):
        k = int(indices_or_sections)
        if k <= 0 or n % k:
            raise ValueError("array split does not result in an equal division")
        return list(a.split(n // k, axis))
    bounds = [0] + [min(max(int(i) + (n if i < 0 else 0), 0), n) for i in indices_or_sections] + [n]
    sizes = [max(b - a_, 0) for a_, b in zip(bounds, bounds[1:])]
    starts = bounds[:-1]
    return [a.narrow(axis, s, z) if z else a.narrow(axis, 0, 0) for s, z in zip(starts, sizes)]


def _flip(m, axis=None):
    return m.flip(tuple(range(m.ndim)) if axis is None else axis)


def _take(a, indices, axis=None):
    if axis is None:
        return IndexMethods.take(a, indices)
    idx = np.asarray(indices) if not hasattr(indices, "_apply") else indices
    shape = tuple(idx.shape)
    d = axis % a.ndim
    out = a.index_select(d, idx.reshape(-1))
    return out.reshape(a.shape[:d] + shape + a.shape[d + 1:])


def _hstack(tup):
    tup = list(tup)
    return cat(tup, 0 if tup[0].ndim == 1 else 1)


def _vstack(tup):
    return cat([t.reshape(1, -1) if t.ndim == 1 else t for t in tup], 0)


NUMPY_FUNCTIONS = {
    np.concatenate: lambda arrays, axis=0: cat(arrays, axis) if axis is not None else cat(
        [a.reshape(-1) for a in arrays], 0),
    np.stack: lambda arrays, axis=0: stack(arrays, axis),
    np.hstack: _hstack, np.vstack: _vstack,
    np.split: _split,
    np.flip: _flip,
    np.fliplr: lambda m: m.flip(1), np.flipud: lambda m: m.flip(0),
    np.roll: lambda a, shift, axis=None: a.roll(shift, axis),
    np.tile: lambda A, reps: A.tile(reps),
    np.tril: lambda m, k=0: m.tril(k), np.triu: lambda m, k=0: m.triu(k),
    np.diagonal: lambda a, offset=0, axis1=0, axis2=1: a.diagonal(offset, axis1, axis2),
    np.take_along_axis: lambda arr, indices, axis: arr.take_along_dim(indices, axis),
    np.take: _take,
}
NUMPY_FUNCTIONS.update(_INDEX2)   # np.rot90, np.repeat, np.diag, np.pad ... (methods_index2.py)
