"""NumPy's products on traced arrays, checked against NumPy itself (as test_numpy_correctness).

- ``np.dot`` follows its own rules, not matmul's: a 0-d operand multiplies; N-D with
  M-D (M >= 2) sums over the last axis of ``a`` and the second-to-last of ``b``; a
  traced array's ``.dot`` is the same function; mixed dtypes promote as NumPy.
- ``np.cross`` (2- and 3-vectors, ``axisa`` / ``axisb`` / ``axisc`` / ``axis``),
  ``np.inner``, ``np.trace`` (offset, axis1, axis2), ``np.vdot``, ``np.outer``,
  ``np.linalg.multi_dot``, ``np.linalg.cross``: values, gradients against finite
  differences of NumPy's function, second order for the bilinear ones.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import gradjit as gj
from tests.marks import COMPILED_SLOW
from tests.fd import numerical_grad
from tests.runtime.test_numpy_correctness import (_rng, _weights, check,  # noqa: F401
                                                  check_second_order)


# -- 4. np.dot's own rules ------------------------------------------------------------------------
DOT_SHAPES = [((), (3,)), ((3, 4), ()), ((), ()), ((3,), (3,)), ((2, 3), (3,)), ((3,), (3, 2)),
              ((2, 3), (3, 4)), ((2, 3, 4), (4,)), ((4,), (2, 4, 3)), ((2, 3, 4), (4, 5)),
              ((2, 3, 4), (5, 4, 2)), ((1, 1, 2), (3, 2, 1)), ((2, 1, 3), (1, 3, 2))]


@pytest.mark.parametrize("sa, sb", DOT_SHAPES, ids=[f"{a}-{b}" for a, b in DOT_SHAPES])
def test_np_dot_shapes(sa, sb, interpreted):
    a, b = _rng.standard_normal(sa), _rng.standard_normal(sb)
    check(np.dot, [a, b])
    check(lambda a, b: a.dot(b), [a, b])   # a traced array's method: the same rules


@COMPILED_SLOW
@pytest.mark.parametrize("sa, sb", [((2, 3, 4), (5, 4, 2)), ((), (3,))])
def test_np_dot_compiled_and_second_order(sa, sb, executor):
    a, b = _rng.standard_normal(sa), _rng.standard_normal(sb)
    check(np.dot, [a, b])
    # bilinear: d/da of <grad_b, V> is nonzero, so second order is a real check
    W = _weights(np.dot, [a, b])
    gb = gj.grad(lambda a, b: (np.dot(a, b) * W).sum(), argnums=1)
    V = _rng.standard_normal(sb)
    got = gj.grad(lambda a, b: (gb(a, b) * V).sum())(a, b)
    np.testing.assert_allclose(got, numerical_grad(lambda a, b: gb(a, b) * V, [a, b], 0),
                               rtol=1e-6, atol=1e-8)


def test_np_dot_scalar_mixed_dtypes_and_errors(interpreted):
    b = _rng.standard_normal((2, 3))
    np.testing.assert_allclose(gj.grad(lambda b: np.dot(2.0, b).sum())(b), np.full((2, 3), 2.0))
    a32 = _rng.standard_normal((2, 3)).astype(np.float32)
    c64 = _rng.standard_normal((3, 2))
    got = gj.jit(lambda a: np.dot(a, c64))(a32)
    assert got.dtype == np.dot(a32, c64).dtype == np.float64
    np.testing.assert_allclose(got, np.dot(a32, c64), rtol=1e-12)
    with pytest.raises(ValueError, match="not aligned"):
        gj.jit(lambda a, b: np.dot(a, b))(_rng.standard_normal((2, 3, 4)),
                                          _rng.standard_normal((2, 3, 2)))


# -- 6. np.cross, np.inner, np.trace, np.vdot, np.outer, np.linalg.multi_dot ----------------------
CROSS = [((3,), (3,), {}), ((4, 1, 3), (2, 3), {}), ((5, 2), (3,), {}), ((3,), (2, 2), {}),
         ((2,), (2,), {}), ((3, 2), (3, 2), {}), ((3, 4), (4, 3), {"axisa": 0}),
         ((3, 2), (2, 3), {"axisa": 0, "axisc": 0}), ((2, 3, 1), (3,), {"axisa": 1, "axisc": 1}),
         ((3, 2), (3, 2), {"axis": 0}), ((1, 3), (1, 3), {})]


@pytest.mark.parametrize("sa, sb, kw", CROSS, ids=[f"{a}-{b}-{k}" for a, b, k in CROSS])
def test_np_cross(sa, sb, kw, interpreted):
    a, b = _rng.standard_normal(sa), _rng.standard_normal(sb)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)   # NumPy 2 warns on 2-vectors
        check(lambda a, b: np.cross(a, b, **kw), [a, b])


@COMPILED_SLOW
def test_np_cross_compiled_second_order_and_errors(executor):
    a, b = _rng.standard_normal((2, 3)), _rng.standard_normal((2, 3))
    check(np.cross, [a, b])
    check_second_order(np.cross, [a, b], 0)
    check(lambda a, b: np.linalg.cross(a, b), [a, b])
    with pytest.raises(ValueError, match="2 or 3"):
        gj.jit(lambda a, b: np.cross(a, b))(_rng.standard_normal(4), _rng.standard_normal(3))


INNER = [((), (3,)), ((3,), ()), ((3,), (3,)), ((2, 3), (3,)), ((3,), (4, 3)), ((2, 3), (4, 3)),
         ((2, 1, 3), (5, 3))]


@pytest.mark.parametrize("sa, sb", INNER, ids=[f"{a}-{b}" for a, b in INNER])
def test_np_inner(sa, sb, interpreted):
    check(np.inner, [_rng.standard_normal(sa), _rng.standard_normal(sb)])


TRACE = [((3, 3), {}), ((2, 4), {"offset": 1}), ((4, 2), {"offset": -1}), ((2, 3, 4), {}),
         ((2, 3, 4), {"offset": -1, "axis1": 1, "axis2": 2}), ((2, 3, 4), {"axis1": 2, "axis2": 0}),
         ((1, 1), {}), ((2, 3), {"offset": 5})]


@pytest.mark.parametrize("shape, kw", TRACE, ids=[f"{s}-{k}" for s, k in TRACE])
def test_np_trace(shape, kw, interpreted):
    check(lambda a: np.trace(a, **kw) * 1.0, [_rng.standard_normal(shape)])


@COMPILED_SLOW
def test_vdot_outer_multi_dot(executor):
    check(np.vdot, [_rng.standard_normal((2, 3)), _rng.standard_normal(6)])
    check(np.vdot, [np.array(2.0), np.array(3.0)])
    check(np.outer, [_rng.standard_normal((2, 3)), _rng.standard_normal(2)])
    check(np.outer, [np.array(2.0), _rng.standard_normal(3)])
    check(lambda a, b, c: np.linalg.multi_dot([a, b, c]),
          [_rng.standard_normal(4), _rng.standard_normal((4, 5)), _rng.standard_normal((5, 3))])
    check(lambda a, b: np.linalg.multi_dot([a, b]),
          [_rng.standard_normal((2, 3)), _rng.standard_normal(3)])
    check(lambda x: np.trace(x), [_rng.standard_normal((3, 3))])
    check_second_order(lambda a, b: np.outer(a, b), [_rng.standard_normal(3),
                                                     _rng.standard_normal(2)], 0)
    with pytest.raises(ValueError):
        gj.jit(lambda a, b: np.vdot(a, b))(_rng.standard_normal(3), _rng.standard_normal(4))
    with pytest.raises(ValueError):
        gj.jit(lambda a, b: np.linalg.multi_dot([a, b]))(_rng.standard_normal((2, 2, 2)),
                                                          _rng.standard_normal((2, 2)))
