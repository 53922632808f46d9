"""NumPy spellings of the indexing and shape family, for ``tracer/numpy_protocol.py``.

Contract: ``NUMPY_FUNCTIONS`` maps NumPy functions to the torch-named surface
(``tracer/methods_index.py``) with NumPy's argument names and semantics:
``np.flip`` with ``axis=None`` acts on every axis; ``_take`` (used by
``tracer/numpy_shape.py``'s ``np.take``) and ``np.take_along_axis`` with
``axis=None`` index the flattened array. Joins and splits live in
``tracer/numpy_joins.py``, roll / tril / take in ``tracer/numpy_shape.py``.
"""
from __future__ import annotations

import numpy as np

from gradjit.tracer.methods_index import IndexMethods
from gradjit.tracer.methods_scatter import NUMPY_FUNCTIONS as _SCATTER


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


NUMPY_FUNCTIONS = {
    np.flip: _flip,
    np.fliplr: lambda m: m.flip(1), np.flipud: lambda m: m.flip(0),
    np.tile: lambda A, reps: A.tile(reps),
    np.diagonal: lambda a, offset=0, axis1=0, axis2=1: a.diagonal(offset, axis1, axis2),
    np.take_along_axis: lambda arr, indices, axis: arr.take_along_dim(indices, axis),
}
NUMPY_FUNCTIONS.update(_SCATTER)   # np.rot90, np.repeat, np.diag ... (methods_scatter.py)
