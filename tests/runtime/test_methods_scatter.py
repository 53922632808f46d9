"""The scatter and placement methods (tracer/methods_scatter.py): values, gradients, errors.

scatter, index_put, index_add / scatter_add methods, masked_select, rot90,
repeat_interleave, diag, diag_embed, pad (constant, reflect, replicate,
circular), moveaxis, ravel, swapaxes. Values against NumPy (torch semantics
written out where NumPy has no twin); float64 finite-difference gradients in
tensor mode and ``gj.grad``, second order by Hessian-vector products, all
interpreted; one graph of the family runs compiled against the interpreter.
"""
from __future__ import annotations

import numpy as np
import pytest

import gradjit as gj
from tests.runtime.cases import Case, distinct, normal
from tests.runtime.test_ops_gradcheck import (check_close, check_hvp, fd_grads, jit_grads,
                                              tensor_grads)

F = gj.nn.functional
_IDX = np.array([[0, 1, 2, 0], [2, 0, 0, 1]])
_IDX_DUP = np.array([[1], [1], [0]])          # repeated targets along dim 0: last write wins
_MASK = np.array([[True, False, True, False], [False, False, True, True], [True] * 4])
_I0, _I1 = np.array([0, 2, 0]), np.array([1, -1, 1])  # index_put with a repeated target

CASES2 = [
    Case("scatter", lambda x, s: x.scatter(0, _IDX, s), (normal(3, 4), normal(3, 4))),
    Case("scatter", lambda x, s: x.scatter(0, _IDX_DUP, s), (normal(2, 3), normal(3, 2)),
         tag="dup-smaller-src"),
    Case("scatter", lambda x: x.scatter(1, np.array([[0], [3], [1]]), value=-2.0),
         (normal(3, 4),), tag="value"),
    Case("scatter", lambda x, s: x.scatter(0, np.array(0), s), (normal(), normal()), tag="0d"),
    Case("index_put", lambda x, v: x.index_put((_I0, _I1), v), (normal(3, 4), normal(3))),
    Case("index_put", lambda x, v: x.index_put((_I0,), v, accumulate=True), (normal(3, 2),
                                                                              normal(2)),
         tag="accumulate"),
    Case("index_put", lambda x, v: x.index_put((_MASK,), v), (normal(3, 4), normal())),
    Case("index_add", lambda x, s: x.index_add(1, np.array([0, -1, 0]), s, alpha=2.0),
         (normal(2, 3), normal(2, 3))),
    Case("scatter_add", lambda x, s: x.scatter_add(1, _IDX[:, :3], s), (normal(2, 3),
                                                                         normal(2, 4))),
    Case("masked_select", lambda x: x.masked_select(_MASK), (normal(3, 4),)),
    Case("masked_select", lambda x: x.masked_select(_MASK[0]), (normal(2, 4),), tag="bcast"),
    Case("rot90", lambda x: x.rot90(), (normal(2, 3),)),
    Case("rot90", lambda x: np.rot90(x, -1, (2, 0)), (normal(2, 3, 2),), tag="np"),
    Case("rot90", lambda x: x.rot90(2), (normal(1, 3),), tag="k2"),
    Case("repeat_interleave", lambda x: x.repeat_interleave(2), (normal(2, 2),)),
    Case("repeat_interleave", lambda x: x.repeat_interleave(np.array([2, 0, 1]), 1),
         (normal(2, 3),), tag="array"),
    Case("repeat_interleave", lambda x: np.repeat(x, 3, axis=0), (normal(1, 2),), tag="np"),
    Case("diag", lambda x: x.diag(), (normal(3),)),
    Case("diag", lambda x: np.diag(x, -1), (normal(2),), tag="np-vec"),
    Case("diag", lambda x: np.diag(x, 1), (normal(3, 4),), tag="np-mat"),
    Case("diag_embed", lambda x: x.diag_embed(), (normal(2, 3),)),
    Case("diag_embed", lambda x: x.diag_embed(1, 0, 2), (normal(2, 2),), tag="offset-dims"),
    Case("pad", lambda x: F.pad(x, (1, 2), value=0.5), (normal(2, 3),), tag="constant"),
    Case("pad", lambda x: F.pad(x, (0, 1, -1, 1)), (normal(3, 2),), tag="constant-crop"),
    Case("pad", lambda x: F.pad(x, (2, 1, 1, 1), mode="reflect"), (normal(3, 4),),
         tag="reflect"),
    Case("pad", lambda x: F.pad(x, (2, 3), mode="replicate"), (normal(2, 3),), tag="replicate"),
    Case("pad", lambda x: F.pad(x, (1, 2), mode="circular"), (normal(1, 3),), tag="circular"),
    Case("pad", lambda x: np.pad(x, ((1, 0), (0, 2)), mode="edge"), (normal(2, 2),), tag="np"),
    Case("moveaxis", lambda x: x.moveaxis(0, -1) * 1.5, (normal(2, 3, 2),)),
    Case("moveaxis", lambda x: np.moveaxis(x, [0, 1], [-1, 0]), (normal(2, 3, 1),), tag="np"),
    Case("ravel", lambda x: np.ravel(x).sin(), (normal(2, 3),)),
    Case("swapaxes", lambda x: np.swapaxes(x, 0, 2), (normal(2, 1, 3),)),
]
IDS = [c.id for c in CASES2]
assert len(set(IDS)) == len(IDS)


@pytest.mark.parametrize("case", CASES2, ids=IDS)
def test_first_order(case, interpreted):
    arrays = case.arrays()
    W = case.weights(arrays)
    fd = fd_grads(case, arrays, W)
    check_close(tensor_grads(case, arrays, W), fd, 1e-6, 1e-6, "tensor mode")
    check_close(jit_grads(case, arrays, W), fd, 1e-6, 1e-6, "jit mode")


@pytest.mark.parametrize("case", CASES2[::3], ids=IDS[::3])
def test_second_order(case, interpreted):
    check_hvp(case)


X = np.arange(12.0).reshape(3, 4)


def _torch_scatter(x, dim, index, src):
    out = x.copy()
    for pos in np.ndindex(index.shape):
        tgt = list(pos)
        tgt[dim] = index[pos]
        out[tuple(tgt)] = src[pos] if np.ndim(src) else src
    return out


def _torch_diag_embed(x, offset, d1, d2):
    n = x.shape[-1]
    m = n + abs(offset)
    out = np.zeros(x.shape[:-1] + (m, m))
    for i in range(n):
        out[..., i + max(-offset, 0), i + max(offset, 0)] = x[..., i]
    return np.moveaxis(out, (-2, -1), (d1, d2))


def test_values(interpreted):
    t = gj.tensor(X)
    src = -np.arange(12.0).reshape(3, 4) - 1
    np.testing.assert_array_equal(t.scatter(0, _IDX, gj.tensor(src)).data,
                                  _torch_scatter(X, 0, _IDX, src))
    np.testing.assert_array_equal(t.scatter(1, _IDX[:, :2], 7.0).data,
                                  _torch_scatter(X, 1, _IDX[:, :2], 7.0))
    want = X.copy()
    want[_I0, _I1] = [10.0, 20.0, 30.0]
    np.testing.assert_array_equal(t.index_put((_I0, _I1), gj.tensor([10.0, 20.0, 30.0])).data, want)
    want = X.copy()
    np.add.at(want, (_I0, _I1), 1.0)
    np.testing.assert_array_equal(t.index_put((_I0, _I1), 1.0, accumulate=True).data, want)
    np.testing.assert_array_equal(t.masked_select(_MASK).data, X[_MASK])
    for k in range(-1, 4):
        np.testing.assert_array_equal(t.rot90(k).data, np.rot90(X, k))
    np.testing.assert_array_equal(t.repeat_interleave(np.array([1, 0, 2]), 0).data,
                                  np.repeat(X, [1, 0, 2], 0))
    for k in (-2, 0, 1):
        np.testing.assert_array_equal(np.diag(t, k).data, np.diag(X, k))
        np.testing.assert_array_equal(np.diag(gj.tensor(X[0]), k).data, np.diag(X[0], k))
    x3 = np.arange(24.0).reshape(2, 3, 4)
    for off, d1, d2 in [(0, -2, -1), (1, 0, 2), (-2, 3, 1)]:
        np.testing.assert_array_equal(gj.tensor(x3).diag_embed(off, d1, d2).data,
                                      _torch_diag_embed(x3, off, d1, d2))
    for mode in ("constant", "reflect", "edge", "wrap"):
        np.testing.assert_array_equal(np.pad(t, ((1, 2), (3, 1)), mode=mode).data,
                                      np.pad(X, ((1, 2), (3, 1)), mode=mode))
    np.testing.assert_array_equal(np.pad(t, 1, constant_values=-1.0).data,
                                  np.pad(X, 1, constant_values=-1.0))
    np.testing.assert_array_equal(F.pad(t, (-1, 2, 0, 0), value=3.0).data,
                                  np.pad(X[:, 1:], ((0, 0), (0, 2)), constant_values=3.0))
    assert np.moveaxis(gj.tensor(x3), [0, 1], [-1, 0]).shape == np.moveaxis(x3, [0, 1],
                                                                             [-1, 0]).shape
    np.testing.assert_array_equal(gj.tensor(x3).movedim(2, 0).data, np.moveaxis(x3, 2, 0))
    np.testing.assert_array_equal(np.ravel(gj.tensor(x3)).data, x3.ravel())
    np.testing.assert_array_equal(gj.tensor(x3).swapaxes(0, 2).data, x3.swapaxes(0, 2))
    np.testing.assert_array_equal(gj.jit(lambda a: np.pad(a, 1, mode="reflect").rot90())(X),
                                  np.rot90(np.pad(X, 1, mode="reflect")))


def test_scatter_gradients_as_torch(interpreted):
    x = gj.tensor(X, requires_grad=True)
    s = gj.tensor(np.ones((3, 4)), requires_grad=True)
    x.scatter(0, _IDX[:1], s).sum().backward()
    want = np.ones((3, 4))
    want[_IDX[0], np.arange(4)] = 0.0
    np.testing.assert_array_equal(x.grad.data, want)        # zero where written
    np.testing.assert_array_equal(s.grad.data, [[1.0] * 4, [0.0] * 4, [0.0] * 4])


def test_errors(interpreted):
    t = gj.tensor(X)
    with pytest.raises(gj.GradjitError, match="masked_select: a traced mask"):
        gj.jit(lambda a: a.masked_select(a > 0))(X)
    with pytest.raises(gj.GradjitError, match="scatter: a traced index"):
        gj.jit(lambda a, i: a.scatter(0, i, 1.0))(X, _IDX)
    with pytest.raises(IndexError, match="index 3 is out of bounds for dimension 0"):
        t.scatter(0, _IDX + 1, 0.0)
    with pytest.raises(ValueError, match="padding size should be less than"):
        F.pad(t, (4, 0), mode="reflect")
    with pytest.raises(TypeError, match="np.pad\\(\\.\\.\\., mode='median'\\)"):   # symmetric works now
        np.pad(t, 1, mode="median")
    with pytest.raises(gj.ShapeError, match="rot90: expected total dims >= 2"):
        gj.tensor(X[0]).rot90()
    with pytest.raises(gj.ShapeError, match="diag: expected a 1-D or 2-D input"):
        gj.tensor(np.ones((2, 2, 2))).diag()


@pytest.mark.slow
def test_compiled_matches_interpreted(monkeypatch):
    def f(x, s):
        return (F.pad(x, (1, 1), mode="reflect").rot90()[:3, :3] * 2.0
                + x.scatter(0, _IDX[:, :3], s).repeat_interleave(2, 0)[:3]
                + x.diag_embed()[0, :3, :3] + x.masked_select(_MASK[:3, :3]).reshape(3, 2)[:, :1]
                + x.index_put((_I0, _I1 % 3), s[0], accumulate=True).moveaxis(0, 1))
    case = Case("scatter", f, (normal(3, 3), distinct(3, 3)))
    arrays = case.arrays()
    W = case.weights(arrays)
    monkeypatch.setenv("GRADJIT_EXECUTOR", "numpy")
    want = jit_grads(case, arrays, W)
    fd = fd_grads(case, arrays, W)
    check_close(want, fd, 1e-6, 1e-6, "interpreted")
    monkeypatch.delenv("GRADJIT_EXECUTOR")
    check_close(jit_grads(case, arrays, W), want, 1e-10, 1e-10, "compiled")
    check_close(tensor_grads(case, arrays, W), want, 1e-10, 1e-10, "compiled tensor mode")


def test_nonzero_and_argwhere_of_concrete_tensors_as_torch():
    cases = [(np.array([0., 1., 0., 2.]), [[1], [3]]), (np.array([[0, 3], [4, 0]]), [[0, 1], [1, 0]]),
             (np.array(2.0), np.zeros((1, 0))), (np.array(0.0), np.zeros((0, 0))),
             (np.zeros((2, 0)), np.zeros((0, 2)))]
    for arr, want in cases:
        t = gj.tensor(arr)
        for got in (t.nonzero(), gj.nonzero(t), t.argwhere(), gj.argwhere(t)):
            assert got.dtype == np.int64 and not got.requires_grad
            np.testing.assert_array_equal(got.numpy(), np.reshape(want, np.shape(want)))
        cols = t.nonzero(as_tuple=True)
        assert len(cols) == max(arr.ndim, 1)   # (torch: one for a 0-d tensor)
        for k, col in enumerate(cols):
            np.testing.assert_array_equal(col.numpy(), np.asarray(want)[:, k] if arr.ndim
                                          else np.zeros(len(want), np.int64))
    x = gj.tensor([1.0, 0.0, 3.0], requires_grad=True)
    np.testing.assert_array_equal((x * 2).nonzero().numpy(), [[0], [2]])   # (a non-leaf)
    with pytest.raises(gj.GradjitError, match="nonzero: a traced tensor"):
        gj.grad(lambda x: gj.nonzero(x).sum())(np.ones(3))
