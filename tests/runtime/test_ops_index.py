"""The indexing and shape family at its edges: values vs NumPy, repeats, ties, errors.

Gradchecks live in ``cases_index.py``; here: forward values against NumPy for
many index forms, gradients of repeated indices, max/min ties and NaN (as
torch), traced integer indices, and the error messages (op, shapes, line).
"""
from __future__ import annotations

import numpy as np
import pytest

import gradjit as gj
from tests.marks import COMPILED_SLOW
from gradjit.runtime import tiers

X = np.arange(24.0).reshape(2, 3, 4)
INDICES = [0, -1, (slice(None), 1), (Ellipsis, slice(None, None, -1)), (None, 1, slice(0, 3, 2)),
           (np.array([1, 0, 1]),), (slice(None), np.array([[0, 2], [1, 1]]), np.array([1, 3])),
           (np.array([1, 0]), slice(None), np.array([0, 3])), X > 10, (0, X[0] > 3), (),
           (Ellipsis, None, 2), (1, np.array([0, 2]), slice(None, None, -2)), (slice(5, None),),
           (slice(None), slice(-1, -4, -1)), [np.array([1])]]


@pytest.mark.parametrize("k", range(len(INDICES)))
def test_getitem_matches_numpy(k, interpreted):
    idx = INDICES[k]
    idx = tuple(idx) if isinstance(idx, list) else idx
    np.testing.assert_array_equal(gj.tensor(X)[idx].data, X[idx])
    np.testing.assert_array_equal(gj.jit(lambda a: a[idx])(X), X[idx])


def test_repeated_indices_accumulate(interpreted):
    x = gj.tensor(np.ones(3), requires_grad=True)
    x[np.array([0, 0, 2, 0])].sum().backward()
    np.testing.assert_array_equal(x.grad.data, [3.0, 0.0, 1.0])
    g = gj.grad(lambda a: a.gather(0, np.array([1, 1])).sum())(np.ones(3))
    np.testing.assert_array_equal(g, [0.0, 2.0, 0.0])


@COMPILED_SLOW
def test_tensor_ints_index_first_as_torch(executor):
    """torch applies an int index first, as basic indexing: [1, :, [1, 4, 4]] of a (3, 4, 5)
    tensor is (4, 3) there; NumPy's rule (int and array separated: their dims first) gives
    (3, 4), which traced NumPy code keeps. Assignment takes torch's shape too."""
    x = np.arange(60.0).reshape(3, 4, 5)
    idx, W = (1, slice(None), [1, 4, 4]), np.arange(12.0).reshape(4, 3)
    t = gj.tensor(x, requires_grad=True)
    y = t[idx]
    assert y.shape == (4, 3)
    np.testing.assert_array_equal(y.data, x[1][:, [1, 4, 4]])
    with tiers.forced("sync"):
        (y * gj.tensor(W)).sum().backward()
    want = np.zeros_like(x)
    np.add.at(want[1], (slice(None), [1, 4, 4]), W)
    np.testing.assert_array_equal(t.grad.data, want)
    x4 = np.arange(120.0).reshape(2, 3, 4, 5)
    np.testing.assert_array_equal(gj.tensor(x4)[..., 1, :, [0, 2]].data, x4[:, 1][..., [0, 2]])
    assert gj.jit(lambda a: a[1, :, [1, 4, 4]])(x).shape == (3, 4)
    # x[idx] = v: v of torch's shape, without and with gradient
    idx = (1, slice(None), [1, 4, 0])
    z = gj.tensor(x)
    z[idx] = gj.tensor(W)
    want = x.copy()
    want[1][:, [1, 4, 0]] = W
    np.testing.assert_array_equal(z.data, want)
    v = gj.tensor(W, requires_grad=True)
    z = gj.tensor(x) * 1.0
    z[idx] = v
    np.testing.assert_array_equal(z.data, want)
    (z * gj.tensor(x)).sum().backward()
    np.testing.assert_array_equal(v.grad.data, x[1][:, [1, 4, 0]])


@pytest.mark.parametrize("executor", ["numpy", "numba"])
def test_max_min_dim_ties_and_nan_as_torch(executor, monkeypatch):
    if executor == "numpy":
        monkeypatch.setenv("GRADJIT_EXECUTOR", "numpy")
    x = gj.tensor(np.array([[1.0, 3.0, 3.0], [np.nan, 2.0, np.nan]]), requires_grad=True)
    v, i = x.max(dim=1)
    assert i.dtype == np.int64 and not i.requires_grad
    np.testing.assert_array_equal(i.data, [1, 0])
    v[0].backward()
    np.testing.assert_array_equal(x.grad.data, [[0.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    fv, fi = gj.jit(lambda a: a.min(dim=0))(np.array([[2.0, 1.0], [2.0, 0.0]]))
    np.testing.assert_array_equal(fi, [0, 1])


def test_traced_integer_index(interpreted):
    def f(x, i):
        return (x[i] * 2.0).sum() + x[:, i[0]].sum()
    x, i = np.arange(9.0).reshape(3, 3), np.array([[2, -1], [0, 0]])
    np.testing.assert_allclose(gj.jit(f)(x, i), f(gj.tensor(x), i).item())
    t = gj.tensor(x, requires_grad=True)
    f(t, i).backward()
    np.testing.assert_array_equal(gj.grad(f)(x, i), t.grad.data)


@COMPILED_SLOW
def test_traced_integer_scalar_beside_ints_and_none_in_a_tuple_index(executor):
    # a tuple index holding a traced scalar was searched for '...' with ==, which compared
    # the traced entry (and failed); each entry is now tested by identity
    a = np.random.default_rng(3).standard_normal((4, 5))
    fns = (lambda a: a[np.argmax(a[:, 0]), 3], lambda a: a[3, np.argmin(a[0])],
           lambda a: a[np.argmax(a[:, 0]), None, 2:], lambda a: a[np.argmax(a[:, 0]), ...])
    for fn in fns:
        np.testing.assert_array_equal(gj.jit(fn)(a), fn(a))
    g = np.zeros_like(a)
    g[np.argmax(a[:, 0]), 3] = 1.0
    np.testing.assert_array_equal(gj.grad(fns[0])(a), g)


@COMPILED_SLOW
def test_empty_list_index_is_an_integer_index_as_numpy(executor):
    # np.asarray([]) is float64, but NumPy (and torch) index with an empty list as intp
    a = np.arange(12.0).reshape(3, 4)
    for idx in ([], [[]], ([],), ([], 0), (slice(None), [])):
        got, want = gj.jit(lambda a: a[idx] * 2.0)(a), a[idx] * 2.0
        assert got.shape == want.shape and got.dtype == want.dtype
    assert gj.tensor(a)[[]].shape == (0, 4)
    np.testing.assert_array_equal(gj.grad(lambda a: a[[]].sum() + a[0, 0])(a),
                                  np.eye(1, 12).reshape(3, 4))

    def put(a):
        b = a * 1.0
        b[[]] = 5.0
        return b
    np.testing.assert_array_equal(gj.jit(put)(a), a)


def test_float32_and_compiled_views():
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    def f(a):
        return (a[::-1, 1::2].sin() * gj.cat([a[:, :2], a[:, 2:]], 0)[:3, :2]).sum() + a.max(dim=1)[0].sum()
    v, g = gj.value_and_grad(f)(x)
    assert v.dtype == np.float32 and g.dtype == np.float32


def test_errors(interpreted):
    x = gj.tensor(np.ones((2, 3)))
    with pytest.raises(IndexError, match=r"index 3 is out of bounds for dimension 1 with size 3 "
                                          r"\(tensor of shape \(2, 3\)\)[\s\S]*test_ops_index.py"):
        x[:, 3]
    with pytest.raises(IndexError, match="index 5 is out of bounds for dimension 0"):
        x[np.array([0, 5])]
    with pytest.raises(IndexError, match="too many indices for tensor of dimension 2"):
        x[0, 0, 0]
    with pytest.raises(IndexError, match="must be integer or boolean"):
        x[np.array([0.5])]
    with pytest.raises(gj.GradjitError, match="traced boolean mask"):
        gj.jit(lambda a: a[a > 0])(np.ones(3))
    with pytest.raises(gj.ShapeError, match=r"cat: sizes of tensors must match except in "
                                            r"dimension 0; got shapes \(2, 3\), \(2, 2\)"):
        gj.cat([x, gj.tensor(np.ones((2, 2)))])
    with pytest.raises(gj.ShapeError, match="gather.default: index of shape"):
        x.gather(1, np.zeros((3, 3), np.int64))
    with pytest.raises(gj.ShapeError, match="tril: input tensor must have at least 2 dimensions"):
        gj.tensor(np.ones(3)).tril()
    with pytest.raises(IndexError, match="Dimension out of range"):
        x.max(dim=2)


def test_torch_keyword_forms_of_sizes():
    x = gj.tensor(np.arange(6.0).reshape(2, 3))
    assert x.flip(dims=[0]).data.tolist() == x.flip(0).data.tolist()
    assert x.permute(dims=(1, 0)).shape == (3, 2) and x.reshape(shape=(3, 2)).shape == (3, 2)
    assert x.expand(size=(2, 2, 3)).shape == (2, 2, 3) and x.tile(dims=(2,)).shape == (2, 6)
    assert [t.shape for t in x.split(split_size=1, dim=0)] == [(1, 3), (1, 3)]
    with pytest.raises(TypeError, match="both by position and by keyword"):
        x.flip(0, dims=[1])
    with pytest.raises(TypeError, match="unexpected keyword argument 'axis'"):
        x.permute(axis=(1, 0))
