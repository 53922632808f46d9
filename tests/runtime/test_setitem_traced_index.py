"""``y[idx] = v`` with a traced integer index (an argument, or computed: ``np.argmax``).

NumPy's semantics in both executors: negative indices wrap, the last write wins on repeated
indices, the value broadcasts; out-of-range indices raise IndexError when the code runs.
Gradients against central finite differences of NumPy's own function: zero for ``y`` at the
written positions, the gathered cotangent for the value (zero for overwritten writes).
"""
from __future__ import annotations

import numpy as np
import pytest

import gradjit as gj
from tests.marks import COMPILED_SLOW
from tests.fd import numerical_grad

_rng = np.random.default_rng(5)


def g2(x, idx):
    y = np.zeros(4)
    y[idx] = x
    return (y ** 2).sum()


def test_the_reported_repro(executor):
    x, idx = np.array([1.5, -2.0]), np.array([0, 3])
    assert gj.jit(g2)(x, idx) == g2(x, idx)
    np.testing.assert_allclose(gj.grad(g2)(x, idx), [3.0, -4.0])
    # repeated targets: the last write wins, the overwritten value gets no gradient
    for dup in ([1, 1], [3, -1], [-4, 0]):
        idx = np.array(dup)
        assert gj.jit(g2)(x, idx) == g2(x, idx)
        np.testing.assert_allclose(gj.grad(g2)(x, idx), [0.0, -4.0])


def _assign(index_of):
    """f(y, v, idx) = sum(W * y') with y' = y with y'[index_of(idx)] = v (NumPy's)."""
    def f(y, v, idx, W):
        y = y.copy()
        y[index_of(idx)] = v
        return (y * W).sum() + (y ** 2).sum() * 0.1
    return f


# (y shape, value shape, index array, how the index is placed, label)
CASES = [
    ((5,), (3,), [4, -5, 2], lambda i: i, "1d"),
    ((5,), (), [1, 3, 1], lambda i: i, "1d-scalar-value-dups"),
    ((5,), (4,), [0, 0, 0, 0], lambda i: i, "1d-all-same"),
    ((5, 3), (2, 3), [3, -1], lambda i: i, "rows"),
    ((5, 3), (3,), [2, 2, 0], lambda i: (i, slice(None)), "rows-broadcast-dups"),
    ((3, 5), (3, 2), [4, 1], lambda i: (slice(None), i), "columns"),
    ((3, 5), (2,), [-1, 4], lambda i: (slice(None), i), "columns-dups-broadcast"),
    ((4, 3, 2), (2, 2), [1, 3], lambda i: (i, 1), "with-an-int"),
    ((2, 3, 4), (2, 3, 2), [0, 3], lambda i: (Ellipsis, i), "ellipsis"),
    ((2, 5), (2, 2), [0, 4], lambda i: (slice(None), i), "columns-2"),
    ((6,), (2, 2), [[0, 5], [5, -6]], lambda i: i, "2d-index-dups"),
    ((5, 2), (1, 2), [[3]], lambda i: i, "2d-index-one"),
    ((4, 3), (3, 2), [2, 0], lambda i: (slice(1, None), i), "after-a-slice"),
]


@COMPILED_SLOW
@pytest.mark.parametrize("yshape, vshape, idx, place, label", CASES, ids=[c[-1] for c in CASES])
def test_against_numpy_and_finite_differences(yshape, vshape, idx, place, label, executor):
    y, v = _rng.standard_normal(yshape), _rng.standard_normal(vshape)
    idx = np.array(idx)
    f = _assign(place)
    W = _rng.standard_normal(yshape)
    want = f(y, v, idx, W)
    np.testing.assert_allclose(gj.jit(f)(y, v, idx, W), want, rtol=1e-12)
    gy, gv = gj.grad(f, argnums=(0, 1))(y, v, idx, W)
    np.testing.assert_allclose(gy, numerical_grad(lambda y: f(y, v, idx, W), [y], 0),
                               rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(gv, numerical_grad(lambda v: f(y, v, idx, W), [v], 0),
                               rtol=1e-6, atol=1e-8)
    # the forward values themselves
    def values(y, v, idx):
        y = y * 1.0
        y[place(idx)] = v
        return y
    np.testing.assert_allclose(gj.jit(values)(y, v, idx), values(y, v, idx), rtol=1e-12)


@COMPILED_SLOW
def test_index_dtypes_and_a_traced_scalar_index(executor):
    x = np.array([0.3, 2.0, -1.0, 0.5])

    def onehot_at_max(x):
        y = np.zeros(4)
        y[np.argmax(x)] = 1.0
        return y

    np.testing.assert_array_equal(gj.jit(onehot_at_max)(x), [0.0, 1.0, 0.0, 0.0])
    for dt in (np.int32, np.int8, np.uint8, np.uint64):
        idx = np.array([3, 1, 3], dt)
        np.testing.assert_allclose(gj.grad(g2)(np.array([1.0, 2.0, 3.0]), idx), [0.0, 4.0, 6.0])
    i0 = np.array(2)   # a 0-d integer argument

    def at(x, i):
        y = x * 1.0
        y[i] = -7.0
        return y
    np.testing.assert_array_equal(gj.jit(at)(x, i0), [0.3, 2.0, -7.0, 0.5])
    np.testing.assert_array_equal(gj.grad(lambda x, i: (at(x, i) * x).sum())(x, np.array(-1)),
                                  [0.6, 4.0, -2.0, -7.0])


@pytest.mark.parametrize("bad", [[0, 4], [-5, 1], [7]])
def test_out_of_range_raises_index_error(bad, executor):
    x = np.ones(len(bad))
    with pytest.raises(IndexError, match=f"index {bad[-1] if bad != [-5, 1] else -5} is out of "
                                         f"bounds for axis 0 with size 4") as e:
        gj.grad(g2)(x, np.array(bad))
    assert "test_setitem_traced_index.py" in str(e.value)   # the user's line
    with pytest.raises(IndexError):
        gj.jit(g2)(x, np.array(bad))
    # the same compiled code with good indices afterwards
    np.testing.assert_allclose(gj.grad(g2)(x, np.array([3] * len(bad))), [0.0] * (len(bad) - 1)
                               + [2.0])


@COMPILED_SLOW
def test_second_order(executor):
    x, idx = np.array([0.5, -1.0, 2.0]), np.array([2, 0, 2])

    def f(x, idx):
        y = np.ones(3) * x.sum()
        y[idx] = x ** 3
        return (y ** 2).sum()
    g = gj.grad(f)
    V = np.array([1.0, -2.0, 0.5])
    h = gj.grad(lambda x, idx: (g(x, idx) * V).sum())(x, idx)
    fd = numerical_grad(lambda x: g(x, idx) * V, [x], 0)
    np.testing.assert_allclose(h, fd, rtol=1e-5, atol=1e-7)


def test_unsupported_forms_are_clear_errors(interpreted):
    x, idx = np.ones((3, 4, 5)), np.array([0, 1])

    def two_traced(x, i, j):
        y = x * 1.0
        y[i, j] = 0.0
        return y
    with pytest.raises(gj.GradjitError, match="more than one traced index"):
        gj.jit(two_traced)(x, idx, idx)

    def separated(x, i):
        y = x * 1.0
        y[0, :, i] = 0.0
        return y
    with pytest.raises(gj.GradjitError, match="separated by a slice") as e:
        gj.jit(separated)(x, idx)
    assert "y[0, :, i] = 0.0" in str(e.value)

    def in_a_list(x, i):
        y = x * 1.0
        y[[i[0], 2]] = 0.0
        return y
    with pytest.raises(gj.GradjitError, match="traced index"):
        gj.jit(in_a_list)(x, idx)
