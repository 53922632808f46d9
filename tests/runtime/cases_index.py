"""Gradcheck cases of the indexing and shape family (tracer/ops_index.py, methods_index.py).

Imported by ``test_ops_gradcheck.py``: every case runs first and second order in
tensor mode and ``gj.grad``. Shapes cover negative indices and steps, None,
Ellipsis, size-1 dims, 0-d inputs (max/min(dim), gather), repeated indices
(their gradients add up) and boolean masks. Index arrays are constants captured
by the case. Two graphs of the family run compiled (``rep=True``).
"""
from __future__ import annotations

import numpy as np

import gradjit as gj
from tests.runtime.cases import case, distinct, normal

_I = np.array([2, 0, -1, 2])          # repeated and negative
_MASK = np.array([[True, False, True, True], [False, False, True, False], [True] * 4])

# basic indexing: views
case("getitem", lambda x: x[1], normal(3, 4), tag="int")
case("getitem", lambda x: x[-1, 1:3], normal(3, 4), tag="neg-int")
case("getitem", lambda x: x[:, ::-2], normal(3, 5), tag="neg-step")
case("getitem", lambda x: x[::-1, 3:0:-2], normal(2, 5), tag="neg-step-bounds")
case("getitem", lambda x: x[None, ..., 1], normal(2, 3, 2), tag="none-ellipsis")
case("getitem", lambda x: x[..., None], normal(), tag="0d")
case("getitem", lambda x: x[0, 0], normal(1, 1), tag="size1")
case("getitem", lambda x: x[1:1], normal(3, 2), tag="empty")
# advanced indexing: gathers, repeated indices accumulate
case("getitem", lambda x: x[_I], normal(3, 2), tag="int-array")
case("getitem", lambda x: x[:, _I], normal(2, 3), tag="int-array-dim1")
case("getitem", lambda x: x[np.array([[0, 1], [1, 1]]), np.array([2, -3])], normal(2, 3),
     tag="two-arrays")
case("getitem", lambda x: x[np.array([1, 0]), :, np.array([0, 2])], normal(2, 2, 3),
     tag="separated")
case("getitem", lambda x: x[_MASK], normal(3, 4), tag="bool-mask")
case("getitem", lambda x: x[:, _MASK[0]], normal(2, 4), tag="bool-mask-dim1")
case("index_select", lambda x: x.index_select(1, _I), normal(2, 3))
case("index_select", lambda x: x.index_select(0, np.array(0)), normal(), tag="0d")
case("gather", lambda x: x.gather(1, np.array([[0, 0, 2], [1, -1, 1]])), normal(2, 3))
case("gather", lambda x: x.gather(0, np.array([[1], [1], [0]])), normal(2, 2), tag="smaller")
case("take_along_dim", lambda x: x.take_along_dim(np.array([[1, 0]]), 1), normal(3, 2))
case("take_along_dim", lambda x: np.take_along_axis(x, np.array([[2], [0]]), -1), normal(2, 3),
     tag="np")
case("take", lambda x: np.take(x, [[0, 5], [5, 2]]), normal(2, 3))
case("masked_fill", lambda x: x.masked_fill(_MASK, 0.5), normal(3, 4))
case("max.dim", lambda x: x.max(dim=1)[0], distinct(3, 4))
case("max.dim", lambda x: x.max(dim=-1, keepdim=True)[0], distinct(2, 3), tag="keepdim")
case("max.dim", lambda x: x.max(dim=0)[0], distinct(), tag="0d")
case("min.dim", lambda x: x.min(dim=0)[0] * x.min(dim=0)[1], distinct(3, 4))
case("min.dim", lambda x: x.min(dim=0)[0], distinct(1, 4), tag="size1")

# shape
case("cat", lambda x, y: gj.cat([x, y, x], 1), normal(2, 3), normal(2, 1))
case("cat", lambda x, y: np.concatenate([x, y]), normal(1, 3), normal(2, 3), tag="np")
case("stack", lambda x, y: gj.stack([x, y], -1), normal(2, 3), normal(2, 3))
case("stack", lambda x, y: np.stack([x, y]), normal(), normal(), tag="0d")
case("split", lambda x: x.split([1, 2], 1)[1] * x.split(2)[0].sum(), normal(3, 3))
case("split", lambda x: np.split(x, [1], axis=-1)[0], normal(2, 3), tag="np")
case("chunk", lambda x: x.chunk(2, 0)[1], normal(3, 2))
case("unbind", lambda x: x.unbind(1)[0] * x.unbind(1)[2], normal(2, 3))
case("narrow", lambda x: x.narrow(-1, 1, 2), normal(2, 4))
case("flip", lambda x: x.flip(0, -1), normal(2, 3))
case("flip", lambda x: np.flip(x), normal(3), tag="np")
case("roll", lambda x: x.roll(1, 1), normal(2, 3))
case("roll", lambda x: np.roll(x, -4), normal(2, 3), tag="np-flat")
case("repeat", lambda x: gj.repeat(x, 2, 1, 3), normal(2, 2))
case("tile", lambda x: np.tile(x, (2, 1)), normal(3))
case("tril", lambda x: x.tril(), normal(3, 3))
case("triu", lambda x: np.triu(x, 1), normal(2, 3, 4))
case("diagonal", lambda x: x.diagonal(), normal(3, 4))
case("diagonal", lambda x: x.diagonal(-1, 2, 0), normal(3, 2, 4), tag="offset-dims")


def _indexing_all(x, d):
    v, i = d.max(dim=1)
    return (x[:, ::-2].sum(1) + x[:, _I[:2]].prod(1) + x.gather(1, _I[None, :3].repeat(3, 0)).sum(1)
            + v[:3] * i[:3] + d.min(dim=0, keepdim=True)[0][0, :3] + x[:, :3][_MASK[:, :3]].sum())


def _shape_all(x):
    return (gj.cat([x, x.flip(1)], 0).roll(1, 0).tril(1)[2:5] + gj.repeat(x, 1, 1).triu()
            + x.diagonal()[None, :] * gj.stack(x.chunk(3, 1), 0).sum(0).sum(1, keepdim=True))


case("indexing", _indexing_all, normal(3, 4), distinct(4, 3), rep=True)
case("shape", _shape_all, normal(3, 3), rep=True)
