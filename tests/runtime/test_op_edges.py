"""Ops at their edges, against torch's documented behaviour (issue 3).

Expected values are torch 2.x's (checked against torch.autograd with float64):

- clamp / clamp_min / clamp_max at a bound: the value passes through with
  gradient 1 (torch's mask is ``min <= x <= max``, inclusive); outside it is 0.
- abs at 0: gradient ``sign(0) = 0``. relu at 0: gradient 0 (mask ``x > 0``).
- ties: full reductions ``max()`` / ``amax`` / ``amin`` and ``amax(dim)`` split
  the gradient evenly between the tied elements; ``max(dim)`` / ``min(dim)``
  (values, indices) send it all to the index they return (the first); binary
  ``maximum`` / ``minimum`` give each side half at equal inputs.
- log(0) = -inf with gradient +inf; sqrt(0) = 0 with gradient +inf.
- division by zero: IEEE (1/0 = inf, -1/0 = -inf, 0/0 = nan), gradients follow
  the formula (d/dy of x/y at y=0 is -x/0**2: -inf, inf or nan).
- pow with base 0: ``0**2`` has gradient 0, ``0**0.5`` gradient inf, ``0**0``
  is 1 with gradient 0; tensor exponent: ``0**y`` has gradient 0 w.r.t. y
  (torch masks the ``log(0)`` term where the base is 0).
- size-0 dims: sum of an empty tensor is 0, mean is nan, elementwise ops and
  matmul over an empty contraction give zeros; gradients are empty arrays of
  the input shapes.

``gj.cat([empty, x])`` gives the size-0 input a (0, 3) zero gradient, as torch.
"""
from __future__ import annotations

import numpy as np
import pytest

import gradjit as gj
from tests.marks import COMPILED_SLOW

inf, nan = np.inf, np.nan


def _grads(f, *xs):
    ts = [gj.tensor(np.asarray(x, dtype=np.float64), requires_grad=True) for x in xs]
    out = f(*ts)
    out.sum().backward()
    return np.asarray(out.data), [None if t.grad is None else np.asarray(t.grad.data) for t in ts]


def _eq(got, want):
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want, dtype=np.float64))


CASES = {
    "clamp-at-bounds": (lambda x: x.clamp(-1.0, 1.0), [[-1.0, 0.0, 1.0, 2.0]],
                        [-1.0, 0.0, 1.0, 1.0], [[1.0, 1.0, 1.0, 0.0]]),
    "clamp_min-at-bound": (lambda x: x.clamp_min(0.0), [[0.0, 1.0, -1.0]],
                           [0.0, 1.0, 0.0], [[1.0, 1.0, 0.0]]),
    "clamp_max-at-bound": (lambda x: x.clamp_max(0.0), [[0.0, -1.0, 1.0]],
                           [0.0, -1.0, 0.0], [[1.0, 1.0, 0.0]]),
    "abs-at-0": (lambda x: x.abs(), [[0.0, -1.0]], [0.0, 1.0], [[0.0, -1.0]]),
    "relu-at-0": (lambda x: x.relu(), [[0.0, -1.0, 1.0]], [0.0, 0.0, 1.0], [[0.0, 0.0, 1.0]]),
    "max-all-ties-split": (lambda x: x.max(), [[1.0, 3.0, 3.0]], 3.0, [[0.0, 0.5, 0.5]]),
    "amax-ties-split": (lambda x: x.amax(), [[1.0, 3.0, 3.0]], 3.0, [[0.0, 0.5, 0.5]]),
    "amin-ties-split": (lambda x: x.amin(), [[1.0, 1.0, 3.0]], 1.0, [[0.5, 0.5, 0.0]]),
    "amax-dim-ties-split": (lambda x: x.amax(1), [[[2.0, 2.0, 1.0]]], [2.0],
                            [[[0.5, 0.5, 0.0]]]),
    "max-dim-ties-first": (lambda x: x.max(1)[0], [[[2.0, 2.0, 1.0]]], [2.0],
                           [[[1.0, 0.0, 0.0]]]),
    "min-dim-ties-first": (lambda x: x.min(1)[0], [[[1.0, 1.0, 2.0]]], [1.0],
                           [[[1.0, 0.0, 0.0]]]),
    "maximum-ties-split": (lambda x, y: x.maximum(y), [[1.0, 2.0], [1.0, 3.0]], [1.0, 3.0],
                           [[0.5, 0.0], [0.5, 1.0]]),
    "minimum-ties-split": (lambda x, y: x.minimum(y), [[1.0, 2.0], [1.0, 3.0]], [1.0, 2.0],
                           [[0.5, 1.0], [0.5, 0.0]]),
    "log-of-0": (lambda x: x.log(), [[0.0, 1.0]], [-inf, 0.0], [[inf, 1.0]]),
    "sqrt-at-0": (lambda x: x.sqrt(), [[0.0, 4.0]], [0.0, 2.0], [[inf, 0.25]]),
    "div-by-0": (lambda x, y: x / y, [[1.0, -1.0, 0.0], [0.0, 0.0, 0.0]], [inf, -inf, nan],
                 [[inf, inf, inf], [-inf, inf, nan]]),
    "pow-0-base-e2": (lambda x: x ** 2, [[0.0]], [0.0], [[0.0]]),
    "pow-0-base-e0.5": (lambda x: x ** 0.5, [[0.0]], [0.0], [[inf]]),
    "pow-0-base-e0": (lambda x: x ** 0, [[0.0]], [1.0], [[0.0]]),
    "pow-0-base-tensor-exp": (lambda x, y: x ** y, [[0.0, 0.0], [2.0, 0.0]], [0.0, 1.0],
                              [[0.0, 0.0], [0.0, 0.0]]),
    "sum-empty": (lambda x: x.sum(), [np.zeros((0, 3))], 0.0, [np.zeros((0, 3))]),
    "mean-empty": (lambda x: x.mean(), [np.zeros((0, 3))], nan, [np.zeros((0, 3))]),
    "mean-empty-dim0": (lambda x: x.mean(0), [np.zeros((0, 3))], [nan, nan, nan],
                        [np.zeros((0, 3))]),
    "mul-empty-broadcast": (lambda x, y: x * y, [np.zeros((0, 3)), np.ones(3)],
                            np.zeros((0, 3)), [np.zeros((0, 3)), np.zeros(3)]),
    "matmul-empty-contraction": (lambda x, y: x @ y, [np.zeros((2, 0)), np.zeros((0, 3))],
                                 np.zeros((2, 3)), [np.zeros((2, 0)), np.zeros((0, 3))]),
    "matmul-empty-rows": (lambda x, y: x @ y, [np.zeros((0, 2)), np.ones((2, 3))],
                          np.zeros((0, 3)), [np.zeros((0, 2)), np.zeros((2, 3))]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_edge_matches_torch(name, interpreted):
    f, xs, value, grads = CASES[name]
    out, got = _grads(f, *xs)
    _eq(out, value)
    assert len(got) == len(grads)
    for g, w in zip(got, grads):
        assert g is not None
        assert g.shape == np.shape(w)
        _eq(g, w)


def test_cat_with_empty_values_and_grad_of_the_nonempty_input(interpreted):
    out, (ge, gx) = _grads(lambda e, x: gj.cat([e, x]), np.zeros((0, 3)), np.ones((2, 3)))
    _eq(out, np.ones((2, 3)))
    _eq(gx, np.ones((2, 3)))


def test_cat_empty_input_gets_an_empty_gradient_as_torch(interpreted):
    _, (ge, _) = _grads(lambda e, x: gj.cat([e, x]), np.zeros((0, 3)), np.ones((2, 3)))
    assert ge is not None and ge.shape == (0, 3)


def test_edges_in_one_compiled_gradient():
    """gj.grad through the compiled path: clamp bounds, relu/abs at 0, ties, log/sqrt of 0."""
    def f(x):
        return (x.clamp(0.0, 1.0) + x.relu() + x.abs() + x.log() + x.sqrt()).sum() + x.amax()

    x = np.array([0.0, 1.0, 1.0, 0.5])
    g = gj.grad(f)(x)
    # clamp: 1 at both bounds; relu: 0 at 0; abs: 0 at 0; log: inf at 0; sqrt: inf at 0;
    # amax: tie between the two 1.0s split as 0.5 each
    want = np.array([1 + 0 + 0 + inf + inf,
                     1 + 1 + 1 + 1.0 + 0.5 + 0.5,
                     1 + 1 + 1 + 1.0 + 0.5 + 0.5,
                     1 + 1 + 1 + 2.0 + 0.5 / np.sqrt(0.5)])
    _eq(g, want)


@pytest.mark.parametrize("x", [np.array([1.5, 0.0, 2.0, -1.0, 3.0]), np.array([0.0, 2.0, 0.0, 1.0, 3.0]),
                               np.array([0.0, 0.0, 0.0, 1.0, 2.0])], ids=["one-zero", "two", "three"])
@COMPILED_SLOW
def test_cumprod_second_derivative_at_zeros(x, executor):
    # H[a, b] = sum_j w_j prod_{k <= j, k != a, b} x_k (a != b, both <= j). The backward once
    # gave a constant 0 after a slice's first zero, so rows of the Hessian through it were lost
    w = np.array([0.3, -1.2, 0.7, 2.0, 0.5])
    n = x.size
    want = np.array([[0.0 if a == b else sum(w[j] * np.prod(np.delete(x[:j + 1], [a, b]))
                                              for j in range(max(a, b), n))
                      for b in range(n)] for a in range(n)])
    f = lambda v: (np.cumprod(v) * w).sum()
    np.testing.assert_allclose(gj.hessian(f)(x), want, atol=1e-12)
    if x[1] == 0:   # along an axis of a 2-D input: rows do not meet
        X = np.stack([x, x[::-1]])
        h = gj.hessian(lambda v: (np.cumprod(v, axis=1) * w).sum())(X)
        np.testing.assert_allclose(h[0, :, 0, :], want, atol=1e-12)
        np.testing.assert_allclose(h[0, :, 1, :], 0.0)


def test_flatten_takes_torchs_start_and_end_dims():
    # x.flatten(1) (CNN features) raised TypeError: flatten took no arguments
    y = gj.tensor(np.arange(24.0).reshape(2, 3, 4))
    assert y.flatten(1).shape == (2, 12) and gj.flatten(y, 1).shape == (2, 12)
    assert y.flatten(0, -2).shape == (6, 4) and y.flatten().shape == (24,)
    assert y.flatten(1, 1) is y                       # nothing merged: the input (torch)
    assert gj.tensor(3.0).flatten().shape == (1,)     # 0-d: shape (1,) as torch
    with pytest.raises(RuntimeError, match="start_dim cannot come after end_dim"):
        y.flatten(2, 1)
    with pytest.raises(IndexError, match="Dimension out of range"):
        y.flatten(3)


@pytest.mark.parametrize("x", [np.array([2.0, 0.0, 3.0]), np.array([0.0, 0.0, 3.0]),
                               np.array([[2.0, 0.0], [0.5, 3.0]])], ids=["one-zero", "two", "2d"])
@COMPILED_SLOW
def test_prod_second_derivative_at_zeros(x, executor):
    # H[i, j] = the product of the entries but i and j; the backward once masked the
    # gradient of the non-zero entries to a constant 0 where one input was zero, so the
    # Hessian lost those rows (two zeros: all of it)
    flat = x.reshape(-1)
    want = np.array([[np.prod(np.delete(flat, [i, j])) if i != j else 0.0
                      for j in range(flat.size)] for i in range(flat.size)])
    np.testing.assert_allclose(gj.hessian(lambda v: np.prod(v))(x),
                               want.reshape(x.shape + x.shape), atol=1e-12)
    if x.ndim == 2:   # along an axis: each column's product
        h = gj.hessian(lambda v: (np.prod(v, axis=0) * np.array([1.0, 2.0])).sum())(x)
        np.testing.assert_allclose(h[:, 0, :, 1], 0.0)   # (columns do not meet)
        np.testing.assert_allclose(h[1, 1, 0, 1], 1.0 * 2.0)


@COMPILED_SLOW
def test_scans_and_sorts_of_two_dtypes_in_one_function(executor):
    # the CPU kernels' locals (row, order, acc, best) were shared by every scan and sort of
    # a function: a float sort beside an int argsort failed to type in Numba, and an int64
    # running sum beside a float one was unified to float64 (2**60 + 1 lost its 1)
    x = np.array([0.3, -1.2, 2.0, 0.5])
    big = np.array([2 ** 60, 1, 3, 5])
    x32 = np.full(1000, 0.1, np.float32)

    def f(x, b, x32):
        return (x * np.argsort(np.argsort(x)), np.sort(x) + np.sort(x.astype(np.float32)),
                np.cumsum(b), np.cumsum(x), np.cumprod(b), np.maximum.accumulate(b),
                np.maximum.accumulate(x), np.cumsum(x32))   # float32: NumPy's running sum
    for got, want in zip(gj.jit(f)(x, big, x32), f(x, big, x32)):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
    g = gj.grad(lambda x: (np.sort(x) * np.arange(4.0) + x * np.argsort(x)).sum())(x)
    np.testing.assert_array_equal(g, [2.0, 0.0, 6.0, 4.0])
