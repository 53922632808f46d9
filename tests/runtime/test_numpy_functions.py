"""The NumPy-function modules (tracer/numpy_ufuncs.py, numpy_joins.py, numpy_grids.py,
numpy_pad.py, the integer and boolean reductions of numpy_reduce.py, numpy_shape.py's
rollaxis / ndim / shape / size / tri*_indices_from, numpy_stats.py's average): values
against NumPy, gradients against central finite differences of NumPy itself.

Every forward case runs the same NumPy call on plain arrays (the oracle), on ``gj.tensor``s
(eager) and under ``gj.jit``; results must have NumPy's shape and dtype and exactly its
values (NaNs and the signs of zeros included). Every gradient case differentiates
``sum(f(x) * W)`` in float64 through ``gj.grad`` and in tensor mode (``.backward()``) and
compares with ``tests/fd.py``'s ``numerical_grad`` of the NumPy function. The rest: errors
(unknown / unsupported keywords name the function), int/bool outputs carry no gradient, a
compiled graph of the family agrees with the interpreter.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.special as sp
from scipy.special import logsumexp

import gradjit as gj
from tests.marks import COMPILED_SLOW
from gradjit.tracer.numpy_joins import c_, r_
from gradjit.tracer.numpy_methods import UnsupportedError
from tests.fd import numerical_grad

_RNG = np.random.default_rng(7)


def r(*shape):
    return _RNG.standard_normal(shape)


def distinct(*shape):   # spaced apart: no ties for argmax / ptp / sort, nowhere near 0
    n = int(np.prod(shape))
    return ((_RNG.permutation(n) - n / 2 + 0.31) * 0.37).reshape(shape)


SPECIAL = np.array([1.5, np.nan, np.inf, -np.inf, 0.0, -0.0, -2.0])
TIES = np.array([[1.0, 3.0, 3.0, -1.0], [2.0, 2.0, 0.0, 2.0], [0.5, 0.5, 0.5, 0.5]])
INTS = np.array([[3, 0, -2], [0, 5, 5]])
BOOLS = np.array([[True, False, True], [False, False, True]])
MASK = np.array([[True, False, True, True]])
X34 = r(3, 4)
COORD = np.array([0.0, 0.4, 1.1, 1.5, 2.6])


# -- forward: (id, fn, arrays) ---------------------------------------------------------------------
def F(name, fn, *arrays):
    return pytest.param(fn, arrays, id=name)


FORWARD = [
    F("argmax", lambda x: np.argmax(x), X34),
    F("argmax-axis1", lambda x: np.argmax(x, axis=1), X34),
    F("argmax-keepdims", lambda x: np.argmax(x, axis=0, keepdims=True), X34),
    F("argmax-none-keepdims", lambda x: np.argmax(x, keepdims=True), X34),
    F("argmax-ties", lambda x: np.argmax(x, -1), TIES),
    F("argmax-nan", lambda x: np.argmax(x), SPECIAL),
    F("argmax-0d", lambda x: np.argmax(x), np.array(2.0)),
    F("argmax-size1", lambda x: np.argmax(x, 0), np.array([[4.0]])),
    F("argmax-int", lambda x: np.argmax(x, 1), INTS),
    F("argmax-bool", lambda x: np.argmax(x, 0), BOOLS),
    F("argmin", lambda x: np.argmin(x, axis=-1), TIES),
    F("argmin-nan", lambda x: np.argmin(x), SPECIAL),
    F("argmin-keepdims", lambda x: np.argmin(x, 1, keepdims=True), X34),
    F("argsort", lambda x: np.argsort(x), X34),
    F("argsort-axis0", lambda x: np.argsort(x, axis=0), X34),
    F("argsort-none", lambda x: np.argsort(x, axis=None), X34),
    F("argsort-ties-stable", lambda x: np.argsort(x, kind="stable"), TIES),
    F("argsort-stable-kw", lambda x: np.argsort(x, axis=0, stable=True), TIES),
    F("argsort-quicksort", lambda x: np.argsort(x, kind="quicksort"), X34),
    F("argsort-nan", lambda x: np.argsort(x), SPECIAL),
    F("argsort-0d", lambda x: np.argsort(x), np.array(1.0)),
    F("any", lambda x: np.any(x > 1.0), X34),
    F("any-axis", lambda x: np.any(x > 0.5, axis=1), X34),
    F("any-tuple-keepdims", lambda x: np.any(x > 0.5, axis=(0, 1), keepdims=True), X34),
    F("any-float", lambda x: np.any(x, axis=0), np.array([[0.0, np.nan], [0.0, 0.0]])),
    F("any-where", lambda x: np.any(x > 0, axis=1, where=MASK), X34),
    F("any-empty", lambda x: np.any(x, axis=0), np.zeros((0, 3))),
    F("any-axis-empty-tuple", lambda x: np.any(x, axis=()), TIES),
    F("any-0d", lambda x: np.any(x), np.array(0.0)),
    F("all", lambda x: np.all(x != 0.5), TIES),
    F("all-axis", lambda x: np.all(x, axis=0), INTS),
    F("all-where", lambda x: np.all(x > -5, axis=-1, where=MASK, keepdims=True), X34),
    F("all-empty", lambda x: np.all(x), np.zeros((2, 0))),
    F("count_nonzero", lambda x: np.count_nonzero(x), INTS),
    F("count_nonzero-axis", lambda x: np.count_nonzero(x, axis=1, keepdims=True), TIES),
    F("isnan", lambda x: np.isnan(x), SPECIAL),
    F("isinf", lambda x: np.isinf(x), SPECIAL),
    F("isfinite", lambda x: np.isfinite(x), SPECIAL),
    F("isnan-int", lambda x: (np.isnan(x), np.isinf(x), np.isfinite(x)), INTS),
    F("logical_and", lambda a, b: np.logical_and(a > 0, b), X34, np.ones((3, 4)) * (X34 < 1)),
    F("logical_or", lambda a, b: np.logical_or(a, b > 0.5), SPECIAL, SPECIAL[::-1].copy()),
    F("logical_xor", lambda a: np.logical_xor(a > 0, MASK), X34),
    F("logical_not", lambda a: np.logical_not(a), SPECIAL),
    F("logical-scalar", lambda a: (np.logical_and(a, 1.0), np.logical_or(0, a)), INTS),
    F("bitwise-bool", lambda a: (np.bitwise_and(a > 0, MASK), np.bitwise_or(a > 1, a < -1),
                                 np.bitwise_xor(a > 0, True), np.invert(a > 0), MASK & (a > 0)),
      X34),
    F("fabs", lambda x: np.fabs(x), SPECIAL),
    F("fabs-int", lambda x: np.fabs(x), INTS),
    F("real-imag", lambda x: (np.real(x), np.imag(x)), X34),
    F("conj", lambda x: (np.conj(x), np.conjugate(x)), SPECIAL),
    F("angle", lambda x: np.angle(x), SPECIAL),
    F("angle-deg", lambda x: np.angle(x, deg=True), SPECIAL),
    F("angle-int", lambda x: np.angle(x), INTS),
    F("sinc", lambda x: np.sinc(x), np.array([0.0, 0.5, -1.0, 2.25, 1e-9])),
    F("sinc-0d", lambda x: np.sinc(x), np.array(0.3)),
    F("append", lambda a, b: np.append(a, b), X34, r(2)),
    F("append-axis", lambda a, b: np.append(a, b, axis=0), X34, r(1, 4)),
    F("append-scalar", lambda a: np.append(a, 2.5), INTS),
    F("atleast_1d", lambda a: np.atleast_1d(a), np.array(3.0)),
    F("atleast_2d-many", lambda a, b, c: np.atleast_2d(a, b, c), np.array(1.0), r(3), X34),
    F("atleast_3d-many", lambda a, b, c: np.atleast_3d(a, b, c), np.array(1.0), r(3), X34),
    F("column_stack", lambda a, b, c: np.column_stack([a, b, c]), r(3), r(3, 2), r(3)),
    F("dstack", lambda a, b: np.dstack((a, b)), r(3), r(1, 3)),
    F("dstack-2d", lambda a, b: np.dstack([a, b]), X34, X34),
    F("hstack-0d", lambda a, b: np.hstack([a, b]), np.array(1.0), r(2)),
    F("vstack-dtype", lambda a, b: np.vstack([a, b], dtype=np.float32), r(4), X34),
    F("concatenate-none", lambda a, b: np.concatenate((a, b), axis=None), X34, r(2, 2)),
    F("concatenate-mixed", lambda a: np.concatenate([a, np.ones((1, 4), np.float32)]), X34),
    F("stack-neg", lambda a, b: np.stack([a, b], axis=-1), X34, X34),
    F("array_split", lambda a: np.array_split(a, 3), r(7)),
    F("array_split-axis1", lambda a: np.array_split(a, 3, axis=1), X34),
    F("array_split-idx", lambda a: np.array_split(a, [1, 3, 10]), r(5, 2)),
    F("array_split-more", lambda a: np.array_split(a, 4), r(2, 3)),
    F("split", lambda a: np.split(a, [2, -1], axis=1), X34),
    F("hsplit", lambda a: np.hsplit(a, 2), X34),
    F("hsplit-1d", lambda a: np.hsplit(a, [1]), r(3)),
    F("vsplit", lambda a: np.vsplit(a, [1]), X34),
    F("dsplit", lambda a: np.dsplit(a, 2), r(2, 1, 4)),
    F("diff", lambda a: np.diff(a), X34),
    F("diff-n2-axis0", lambda a: np.diff(a, n=2, axis=0), r(4, 3)),
    F("diff-prepend-append", lambda a: np.diff(a, prepend=0.5, append=np.ones((3, 1))), X34),
    F("diff-bool", lambda a: np.diff(a > 0), X34),
    F("diff-n0-0d", lambda a: np.diff(a, 0), np.array(1.0)),
    F("diff-too-far", lambda a: np.diff(a, 5), r(3)),
    F("diff-int", lambda a: np.diff(a, axis=0), INTS),
    F("gradient", lambda a: np.gradient(a), r(5)),
    F("gradient-2d", lambda a: np.gradient(a), X34),
    F("gradient-spacing", lambda a: np.gradient(a, 0.5, axis=1, edge_order=2), X34),
    F("gradient-coords", lambda a: np.gradient(a, COORD, edge_order=2), r(5, 2)[:, 0].copy()),
    F("gradient-coords-2d", lambda a: np.gradient(a, 2.0, COORD[:4], edge_order=1), X34),
    F("gradient-uniform-coords", lambda a: np.gradient(a, np.arange(4) * 3), X34[0].copy()),
    F("gradient-int", lambda a: np.gradient(a, axis=-1), INTS),
    F("gradient-size2", lambda a: np.gradient(a), r(2)),
    F("gradient-traced-h", lambda a, h: np.gradient(a, h), r(4), np.array(0.3)),
    F("select", lambda a: np.select([a < -0.5, a > 0.5], [a * 2, a ** 2], -1.0), X34),
    F("select-scalars", lambda a: np.select([a > 0, a < -1], [1, 2]), X34),
    F("select-f32", lambda a: np.select([a > 0], [a.astype(np.float32)]), X34),
    F("select-bcast", lambda a: np.select([MASK], [a], default=a[0]), X34),
    F("rollaxis", lambda a: np.rollaxis(a, 2), r(2, 3, 4)),
    F("rollaxis-start", lambda a: np.rollaxis(a, 0, 3), r(2, 3, 4)),
    F("rollaxis-same", lambda a: np.rollaxis(a, -1, 2), r(2, 3, 4)),
    F("moveaxis-swapaxes", lambda a: np.swapaxes(np.moveaxis(a, 0, -1), 0, 1), r(2, 3, 4)),
    F("linspace", lambda a, b: np.linspace(a, b, 7), np.array(-1.0), np.array(2.5)),
    F("linspace-arrays", lambda a, b: np.linspace(a, b, 4, axis=-1), r(3), r(2, 1)),
    F("linspace-noend", lambda a: np.linspace(a, 3.0, 5, endpoint=False), np.array(0.25)),
    F("linspace-one", lambda a, b: np.linspace(a, b, 1), np.array(-1.0), np.array(2.5)),
    F("linspace-zero", lambda a, b: np.linspace(a, b, 0), r(2), r(2)),
    F("linspace-retstep", lambda a: np.linspace(0.0, a, 5, retstep=True), r(2)),
    F("linspace-dtype", lambda a, b: np.linspace(a, b, 6, dtype=int), np.array(-3.0),
      np.array(7.0)),
    F("ptp", lambda a: np.ptp(a), X34),
    F("ptp-axis", lambda a: np.ptp(a, axis=1, keepdims=True), X34),
    F("ptp-int", lambda a: np.ptp(a, 0), INTS),
    F("average", lambda a: np.average(a), X34),
    F("average-axis", lambda a: np.average(a, axis=0, keepdims=True), X34),
    F("average-weights", lambda a, w: np.average(a, 1, w), X34, r(4) ** 2 + 0.1),
    F("average-weights-full", lambda a, w: np.average(a, weights=w, returned=True), X34,
      X34 ** 2 + 0.1),
    F("average-weights-2axes", lambda a, w: np.average(a, (2, 0), w, returned=True),
      r(2, 3, 4), r(4, 2) ** 2 + 0.1),
    F("average-int", lambda a: np.average(a, axis=1, returned=True), INTS),
    F("nancumsum", lambda a: np.nancumsum(a), SPECIAL[[0, 1, 4, 6]].copy()),
    F("nancumsum-axis", lambda a: np.nancumsum(a, axis=0), np.where(X34 > 1, np.nan, X34)),
    F("nancumprod", lambda a: np.nancumprod(a, axis=1), np.where(X34 > 1, np.nan, X34)),
    F("nancumsum-int", lambda a: np.nancumsum(a), INTS.astype(np.int32)),
    F("meshgrid", lambda a, b: np.meshgrid(a, b), r(3), r(2)),
    F("meshgrid-ij-3", lambda a, b, c: np.meshgrid(a, b, c, indexing="ij"), r(3), r(2), r(1)),
    F("meshgrid-sparse", lambda a, b: np.meshgrid(a, b, sparse=True), r(3), r(2, 2)),
    F("outer", lambda a, b: np.outer(a, b), r(3), X34),
    F("triu_indices", lambda a: a[np.triu_indices(4, 1)], r(4, 4)),
    F("tril_indices_from", lambda a: a[np.tril_indices_from(a)], r(3, 3)),
    F("isnan-where", lambda a: np.where(np.isnan(a), 0.0, a), SPECIAL),
    # float32 stays float32, with NumPy's float32 rounding
    F("f32-sinc-angle", lambda a: (np.sinc(a), np.angle(a, deg=True)), X34.astype(np.float32)),
    F("f32-linspace", lambda a: np.linspace(a[0], 2.5, 5), X34.astype(np.float32)),
    F("f32-gradient", lambda a: np.gradient(a, COORD[:4], axis=1), X34.astype(np.float32)),
    F("f32-average", lambda a: np.average(a, 1, np.arange(1.0, 5.0, dtype=np.float32)),
      X34.astype(np.float32)),
    F("f32-pad", lambda a: (np.pad(a, 2, "linear_ramp", end_values=0.7), np.pad(a, 2, "mean")),
      X34.astype(np.float32)),
]

_PAD = [
    ("constant", {}, 2), ("constant", {"constant_values": -1.5}, ((1, 2), (0, 3))),
    ("constant", {"constant_values": ((1, 2), (3, 4))}, (1, 2)),
    ("edge", {}, ((2, 1), (1, 3))), ("reflect", {}, 1), ("reflect", {}, ((5, 2), (7, 1))),
    ("symmetric", {}, ((1, 2), (2, 0))), ("symmetric", {}, 9), ("wrap", {}, ((2, 6), (1, 1))),
    ("reflect", {"reflect_type": "odd"}, ((2, 1), (3, 3))),
    ("symmetric", {"reflect_type": "odd"}, 2), ("mean", {}, 2),
    ("mean", {"stat_length": ((1, 2), (2, 1))}, ((1, 2), (2, 0))),
    ("linear_ramp", {"end_values": ((1.0, -2.0), (0.5, 3.0))}, ((2, 1), (0, 3))),
    ("constant", {}, {1: (2, 1)}),
]
FORWARD += [F(f"pad-{m}-{k}", (lambda m, kw, w: lambda a: np.pad(a, w, mode=m, **kw))(m, kw, w),
              X34)
            for k, (m, kw, w) in enumerate(_PAD)]
FORWARD += [
    F("pad-1d-edge", lambda a: np.pad(a, (3, 2), "edge"), r(1)),
    F("pad-singleton-reflect", lambda a: np.pad(a, 2, "reflect"), r(1, 3)),
    F("pad-0d", lambda a: np.pad(a, 2), np.array(1.5)),
    F("pad-int-constant", lambda a: np.pad(a, 1, constant_values=7), INTS),
    F("pad-bool-wrap", lambda a: np.pad(a, 1, "wrap"), BOOLS),
]


def _equal(got, want, what):
    """Same shape, dtype and values (NaN where NumPy has NaN, the sign of zeros too)."""
    if isinstance(want, (tuple, list)):
        assert isinstance(got, (tuple, list)) and len(got) == len(want), what
        for g, w in zip(got, want):
            _equal(g, w, what)
        return
    g = np.asarray(got.data if isinstance(got, gj.Tensor) else got)
    w = np.asarray(want)
    assert g.shape == w.shape, f"{what}: shape {g.shape} != {w.shape}"
    assert g.dtype == w.dtype, f"{what}: dtype {g.dtype} != {w.dtype}"
    np.testing.assert_array_equal(g, w, err_msg=what)
    if g.dtype.kind == "f":
        assert np.array_equal(np.signbit(g), np.signbit(w)), f"{what}: signs of zeros"


@pytest.mark.parametrize("fn, arrays", FORWARD)
def test_forward_matches_numpy(fn, arrays, interpreted):
    want = fn(*arrays)
    _equal(fn(*[gj.tensor(a) for a in arrays]), want, "tensor")
    _equal(gj.jit(fn)(*arrays), want, "jit")


# -- gradients: (id, fn, arrays); every array is differentiated ----------------------------------
def G(name, fn, *arrays):
    return pytest.param(fn, arrays, id=name)


def _cat(parts):
    return np.concatenate([np.ravel(p) for p in parts])


GRADS = [
    G("fabs", lambda x: np.fabs(x), distinct(3, 4)),
    G("conj-real", lambda x: np.conj(x) * np.real(x) + np.imag(x), r(3)),
    G("angle", lambda x: np.angle(x) * x, distinct(2, 3)),
    G("sinc", lambda x: np.sinc(x), np.array([0.0, 0.3, -1.2, 2.5])),
    G("sinc-0d", lambda x: np.sinc(x), np.array(0.7)),
    G("append", lambda a, b: np.append(a, b), r(2, 3), r(4)),
    G("append-axis", lambda a, b: np.append(a, b, axis=1), r(2, 3), r(2, 1)),
    G("atleast", lambda a, b: _cat(np.atleast_3d(a, b)) * 2.0, np.array(0.5), r(3)),
    G("column_stack", lambda a, b: np.column_stack((a, b)), r(3), r(3, 2)),
    G("dstack-hstack-vstack", lambda a, b: _cat([np.dstack([a, b]), np.hstack([a, b]),
                                                 np.vstack([a, b])]), r(2, 3), r(2, 3)),
    G("row_stack", lambda a, b: np.row_stack([a, b]), r(3), r(2, 3)),
    G("array_split", lambda a: _cat([p * k for k, p in enumerate(np.array_split(a, 3), 1)]),
      r(7, 2)),
    G("hsplit-vsplit", lambda a: _cat([np.hsplit(a, 2)[1], np.vsplit(a, [1])[0] ** 2]), r(3, 4)),
    G("diff", lambda a: np.diff(a, 2, axis=0), r(4, 3)),
    G("diff-prepend-append", lambda a, p, q: np.diff(a, prepend=p, append=q), r(2, 3), r(2, 1),
      r(2, 2)),
    G("diff-size1", lambda a: np.diff(a, axis=0, prepend=0.0), r(1, 2)),
    G("gradient", lambda a: np.gradient(a), r(5)),
    G("gradient-2d", lambda a: _cat(np.gradient(a, 0.7, edge_order=2)), r(3, 4)),
    G("gradient-coords", lambda a: np.gradient(a, COORD, edge_order=2), r(5)),
    G("gradient-coords-e1", lambda a: np.gradient(a, COORD[:3], axis=0), r(3, 2)),
    G("gradient-wrt-spacing", lambda a, h: np.gradient(a, h, edge_order=2), r(4), np.array(0.6)),
    G("gradient-wrt-coords", lambda a, x: np.gradient(a, x), r(4), np.cumsum(r(4) ** 2 + 0.5)),
    G("select", lambda a, b: np.select([a < -0.5, a > 0.5], [a * 2, b], -1.0), distinct(3, 4),
      r(3, 4)),
    G("select-default", lambda a, d: np.select([a > 0], [a ** 2], d), distinct(2, 3), r(3)),
    G("rollaxis", lambda a: np.rollaxis(a, 2, 1) * np.arange(4.0)[:, None], r(2, 3, 4)),
    G("linspace", lambda a, b: np.linspace(a, b, 5) ** 2, np.array(-1.0), np.array(2.0)),
    G("linspace-arrays", lambda a, b: np.linspace(a, b, 4, endpoint=False, axis=1), r(3), r(2, 1)),
    G("linspace-one", lambda a, b: np.linspace(a, b, 1) * 3.0, r(2), r(2)),
    G("ptp", lambda a: np.ptp(a, axis=1), distinct(3, 4)),
    G("ptp-all", lambda a: np.ptp(a) * 1.0, distinct(2, 3)),
    G("average", lambda a: np.average(a, axis=(0, 1)), r(2, 3, 2)),
    G("average-weights", lambda a, w: np.average(a, 1, w), r(3, 4), r(4) ** 2 + 0.5),
    G("average-returned", lambda a, w: _cat(np.average(a, weights=w, returned=True)), r(2, 3),
      r(2, 3) ** 2 + 0.5),
    G("nancumsum", lambda a: np.nancumsum(np.where(a > 1.0, np.nan, a), axis=0), r(3, 4)),
    G("nancumprod", lambda a: np.nancumprod(np.where(a > 1.0, np.nan, a)), r(2, 3)),
    G("meshgrid", lambda a, b: _cat([m * k for k, m in enumerate(np.meshgrid(a, b), 2)]), r(3),
      r(2)),
    G("meshgrid-ij-sparse", lambda a, b: _cat(np.meshgrid(a, b, indexing="ij", sparse=True)),
      r(2), r(3)),
    G("isnan-where", lambda a: np.where(np.logical_or(np.isnan(a), np.isinf(a)), 0.0, a) ** 2,
      r(2, 3)),
    G("logical-select", lambda a: np.select([np.logical_and(a > 0, a < 1)], [a ** 3],
                                            np.sin(a)), distinct(2, 3)),
    G("argmax-take", lambda a: np.take_along_axis(a, np.argsort(a, axis=1), 1) ** 2,
      distinct(2, 3)),
    G("triu_indices", lambda a: a[np.triu_indices(3)] ** 2, r(3, 3)),
    G("fabs-0d", lambda x: np.fabs(x), np.array(-0.8)),
    G("append-0d", lambda a, b: np.append(a, b), np.array(0.3), np.array(-1.1)),
    G("average-0d", lambda a: np.average(a), np.array(0.9)),
    G("average-size1", lambda a, w: np.average(a, 0, w), r(1, 3), np.array([0.7])),
    G("meshgrid-size1", lambda a, b: _cat(np.meshgrid(a, b)), r(1), r(3)),
    G("array_split-size1", lambda a: _cat(np.array_split(a, 2, axis=1)), r(1, 1)),
    G("diff-size1-axis", lambda a: np.diff(a, axis=1, append=a[:, :1] * 2.0), r(3, 1)),
    G("gradient-size2-coords", lambda a: np.gradient(a, np.array([0.2, 0.7])), r(2)),
    G("pad-size1-odd", lambda a: np.pad(a, ((3, 2), (1, 4)), "reflect", reflect_type="odd"),
      r(1, 2)),
    G("pad-0d", lambda a: np.pad(a, 2, mode="constant", constant_values=1.0) * np.arange(5.0),
      np.array(0.4)),
]
GRADS += [G(f"pad-{m}-{k}", (lambda m, kw, w: lambda a: np.pad(a, w, mode=m, **kw) ** 2)(m, kw, w),
            r(3, 4)) for k, (m, kw, w) in enumerate(_PAD)]
GRADS += [G("pad-traced-constant", lambda a, c: np.pad(a, ((0, 1), (2, 0)), constant_values=c),
            r(2, 2), np.array(0.3))]


# The same checks over shapes from 0-d up, for every function that takes them (min ndim,
# min size of the last axis); values spaced apart so max / sort have no ties.
SWEEP = [
    ("fabs", lambda x: np.fabs(x), 0, 1), ("sinc", lambda x: np.sinc(x), 0, 1),
    ("angle-conj-real", lambda x: np.angle(x) + np.conj(x) * np.real(x), 0, 1),
    ("append", lambda x: np.append(x, x[..., :1] * 2.0 if x.ndim else x), 0, 1),
    ("atleast_3d", lambda x: np.atleast_3d(x) * 2.0, 0, 1),
    ("ptp", lambda x: np.ptp(x) * 1.0, 0, 1), ("ptp-axis", lambda x: np.ptp(x, -1), 1, 1),
    ("average", lambda x: np.average(x), 0, 1),
    ("average-weights", lambda x: np.average(x, -1, np.arange(1.0, x.shape[-1] + 1)), 1, 1),
    ("nancumsum", lambda x: np.nancumsum(x), 0, 1),
    ("nancumprod-axis", lambda x: np.nancumprod(x, -1), 1, 1),
    ("pad-constant", lambda x: np.pad(x, 1, constant_values=0.5), 0, 1),
    ("pad-edge", lambda x: np.pad(x, 2, "edge"), 0, 1),
    ("pad-reflect", lambda x: np.pad(x, 2, "reflect"), 0, 1),
    ("pad-symmetric", lambda x: np.pad(x, 3, "symmetric"), 0, 1),
    ("pad-wrap", lambda x: np.pad(x, 2, "wrap"), 0, 1),
    ("pad-odd", lambda x: np.pad(x, 2, "reflect", reflect_type="odd"), 0, 1),
    ("pad-mean", lambda x: np.pad(x, 1, "mean"), 0, 1),
    ("pad-ramp", lambda x: np.pad(x, 2, "linear_ramp", end_values=1.0), 0, 1),
    ("diff", lambda x: np.diff(x, axis=-1, prepend=0.0), 1, 1),
    ("gradient", lambda x: np.gradient(x, axis=-1), 1, 2),
    ("gradient-e2", lambda x: np.gradient(x, 0.5, axis=-1, edge_order=2), 1, 3),
    ("array_split", lambda x: _cat([p * k for k, p in enumerate(np.array_split(x, 2, -1), 1)]),
     1, 1),
    ("rollaxis", lambda x: np.rollaxis(x, -1) * 1.0, 1, 1),
    ("linspace", lambda x: np.linspace(x, x * 2.0 + 1.0, 3) ** 2, 0, 1),
    ("select", lambda x: np.select([x > 0], [x ** 2], x), 0, 1),
    ("meshgrid", lambda x: _cat(np.meshgrid(x, x * 3.0)), 0, 1),
    ("sort-by-argsort", lambda x: np.take_along_axis(x, np.argsort(x, -1), -1) ** 2, 1, 1),
]
SHAPES = [(), (1,), (5,), (1, 3), (3, 4), (2, 1, 3)]
GRADS += [G(f"{name}-{shape}", fn, distinct(*shape)) for name, fn, nd, n in SWEEP
          for shape in SHAPES if len(shape) >= nd and (not shape or shape[-1] >= n)]


@pytest.mark.parametrize("fn, arrays", GRADS)
def test_gradient_matches_finite_differences(fn, arrays, interpreted):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)   # np.row_stack
        out = fn(*arrays)
        W = np.random.default_rng(3).standard_normal(np.shape(out))
        fd = [numerical_grad(lambda *a: fn(*a) * W, list(arrays), i) for i in range(len(arrays))]
        argnums = tuple(range(len(arrays)))
        jg = gj.grad(lambda *a: (fn(*a) * W).sum(), argnums=argnums)(*arrays)
        ts = [gj.tensor(a, requires_grad=True) for a in arrays]
        got = fn(*ts)
        _equal(got, out, "tensor forward")
        (got * W).sum().backward()
    for k, (j, t, want) in enumerate(zip(jg, ts, fd)):
        np.testing.assert_allclose(j, want, rtol=1e-6, atol=1e-7, err_msg=f"gj.grad arg {k}")
        np.testing.assert_allclose(t.grad.data, want, rtol=1e-6, atol=1e-7,
                                   err_msg=f"tensor mode arg {k}")


# -- the rest -------------------------------------------------------------------------------------
def test_integer_and_bool_results_carry_no_gradient(interpreted):
    t = gj.tensor(X34, requires_grad=True)
    for out in (np.argmax(t), np.argsort(t, 0), np.any(t > 0), np.isnan(t), np.count_nonzero(t),
                np.logical_not(t), np.isfinite(t)):
        assert out.dtype.kind in "bi" and out.requires_grad is False and out.grad_fn is None
    g = gj.grad(lambda a: (a * np.argmax(a, 1)[:, None] + np.all(a > 0)).sum())(X34)
    np.testing.assert_array_equal(g, np.broadcast_to(np.argmax(X34, 1)[:, None], (3, 4)))


def test_traced_array_methods_reach_these_functions(interpreted):
    """A traced array's NumPy methods (tracer/numpy_methods.py) call the functions here."""
    for fn in (lambda x: x.argsort(axis=0), lambda x: (x > 0).all(axis=0),
               lambda x: x.argmax(1), lambda x: (x > 0).any(keepdims=True)):
        _equal(gj.jit(fn)(X34), fn(X34), "jit")


def test_searchsorted_method_and_refused_methods(executor):
    """x.searchsorted is np.searchsorted; the ndarray methods whose NumPy function is refused
    raise its clear error naming the method and the user's line (an AttributeError too:
    hasattr says False), not a bare AttributeError about ``Tracer``."""
    a, v = np.array([0.0, 1.0, 2.0]), np.array([0.5, 2.0, np.nan])
    f = lambda x, v: (x.searchsorted(v), x.searchsorted(v, side="right"),
                      x.searchsorted(v, "right"))
    _equal(gj.jit(f)(a, v), f(a, v), "searchsorted")
    for name in ("flat", "put", "compress", "choose", "partition", "argpartition", "resize"):
        with pytest.raises(UnsupportedError, match=rf"x\.{name}\b.* not supported") as e:
            gj.jit(lambda x: getattr(x, name))(a)
        assert isinstance(e.value, AttributeError) and "test_numpy_functions.py" in str(e.value)
    seen = []
    gj.jit(lambda x: (seen.append(hasattr(x, "put")), x)[1])(a)
    assert seen == [False]


def test_divmod_of_traced_arrays(executor):
    """divmod(x, y) of NumPy arrays is np.divmod: (x // y, x % y), either side traced."""
    x, n = np.array([0.5, -1.0, 2.0, -3.5]), np.array([7, -7, 3, 0])
    fns = (lambda x, n: divmod(x, 2.0), lambda x, n: divmod(3.0, x), lambda x, n: np.divmod(n, 2),
           lambda x, n: divmod(n, -2), lambda x, n: divmod(x, x[::-1]))
    with np.errstate(all="ignore"):
        _equal(gj.jit(lambda x, n: tuple(f(x, n) for f in fns))(x, n),
               tuple(f(x, n) for f in fns), "divmod")
    g = gj.grad(lambda x: (divmod(x, 2.0)[1] ** 2).sum())(x)
    np.testing.assert_allclose(g, 2 * np.remainder(x, 2.0))


def test_scipy_logsumexp(executor):
    """scipy.special.logsumexp traces (SciPy's own code met np.result_type and named SciPy's
    file), as the module's attribute and as a name bound by ``from scipy.special import``."""
    x = np.array([[0.5, -1.0, 2.0], [3.0, 700.0, -np.inf]])
    fns = (lambda x: sp.logsumexp(x), lambda x: logsumexp(x, axis=1),
           lambda x: logsumexp(x, axis=(0,), keepdims=True), lambda x: logsumexp(x > 0, 0),
           lambda x: logsumexp(x.astype(np.float32), -1))
    gots = gj.jit(lambda x: tuple(f(x) for f in fns))(x)
    for f, got in zip(fns, gots, strict=True):
        want = np.asarray(f(x))
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-6)
    f = lambda x: (logsumexp(x, axis=1) ** 2).sum()
    x = x[:, :2] / 100.0
    np.testing.assert_allclose(gj.grad(f)(x), numerical_grad(f, [x], 0), rtol=1e-6)
    for bad, what in ((lambda x: logsumexp(x, b=x), "b="), (lambda x: sp.logsumexp(
            x, return_sign=True), "return_sign=True")):
        with pytest.raises(UnsupportedError, match=rf"scipy\.special\.logsumexp\(\.\.\., {what}") \
                as e:
            gj.jit(bad)(x)
        assert "test_numpy_functions.py" in str(e.value)
    assert sp.logsumexp is logsumexp and logsumexp(np.zeros(2)) == np.log(2.0)   # (restored)


def test_scipy_linalg_on_a_traced_array_names_the_function(interpreted):
    """scipy.linalg.expm met the Tracer inside SciPy ("no attribute 'flags'"), and
    solve_triangular asked for its numbers: both name the function now."""
    import scipy.linalg as sl
    a = np.eye(3) * 0.1
    with pytest.raises(UnsupportedError, match=r"scipy\.linalg\.expm is not supported") as e:
        gj.grad(lambda a: sl.expm(a).sum())(a)
    assert "test_numpy_functions.py" in str(e.value)
    with pytest.raises(UnsupportedError, match=r"scipy\.linalg\.solve_triangular \(use gj"):
        gj.grad(lambda a: sl.solve_triangular(a, np.ones(3)).sum())(a)
    np.testing.assert_allclose(sl.expm(np.zeros((2, 2))), np.eye(2))   # (restored after)


@COMPILED_SLOW
def test_functions_held_in_closures_and_defaults_are_swapped_too(executor):
    """SciPy's logsumexp (and NumPy's buffers) reached through a closure cell, a default or
    a keyword default, not a global name: SciPy's own code ran and met np.result_type."""
    def make(reduce):
        return lambda x: reduce(x, axis=1).sum()

    def g(x, red=logsumexp, *, buf=np.zeros):
        b = buf(2)
        b[0] = red(x, axis=1)[0]
        return b.sum() + red(x)

    x = np.array([[0.5, -1.0], [2.0, 0.25]])
    for f in (make(logsumexp), make(sp.logsumexp), g):
        np.testing.assert_allclose(gj.jit(f)(x), f(x))
        np.testing.assert_allclose(gj.grad(f)(x), numerical_grad(f, [x], 0), rtol=1e-6)
    assert g.__defaults__ == (logsumexp,) and g.__kwdefaults__ == {"buf": np.zeros}   # (restored)


def test_more_values(interpreted):
    t = gj.tensor(X34)
    e = np.pad(t, ((1, 0), (2, 1)), mode="empty")   # NumPy leaves the values undefined: zeros
    assert e.shape == (4, 7) and e.dtype == X34.dtype and not e.data[0].any()
    np.testing.assert_array_equal(e.data[1:, 2:-1], X34)
    c = gj.tensor(np.array(-2.5))
    _equal(np.pad(t, 1, constant_values=c), np.pad(X34, 1, constant_values=-2.5), "traced cv")
    _equal(np.stack([t, X34], 1, dtype=np.float32), np.stack([X34, X34], 1, dtype=np.float32),
           "stack dtype")
    _equal(np.nancumsum(t, 1, dtype=np.float32), np.nancumsum(X34, 1, dtype=np.float32),
           "nancumsum dtype")
    _equal(np.hstack([t, X34], casting="unsafe", dtype=np.int64),
           np.hstack([X34, X34], casting="unsafe", dtype=np.int64), "hstack unsafe")
    with pytest.raises(TypeError, match="Cannot cast array data"):
        np.concatenate([t, X34], dtype=np.int64)
    with pytest.raises(ValueError, match="`kind` and keyword parameters can't be provided"):
        np.argsort(t, kind="stable", stable=True)
    _equal(np.linspace(gj.tensor(np.array(1.0)), 2.0, 5, retstep=True)[1],
           np.linspace(np.array(1.0), 2.0, 5, retstep=True)[1], "linspace step")


def test_row_stack_warns_as_numpy(interpreted):
    t = gj.tensor(r(3))
    with pytest.warns(DeprecationWarning, match="row_stack") as caught:
        out = np.row_stack([t, t])
    assert out.shape == (2, 3) and caught[0].filename == __file__   # the user's line


def test_shape_queries(interpreted):
    t = gj.tensor(np.ones((2, 3, 4)))
    assert np.ndim(t) == 3 and np.shape(t) == (2, 3, 4) and np.size(t) == 24
    assert np.size(t, 1) == 3 and np.size(t, (0, 2)) == 8
    seen = []
    gj.jit(lambda a: (seen.append((np.ndim(a), np.shape(a), np.size(a, -1))), a)[1])(
        np.ones((2, 5)))
    assert seen == [(2, (2, 5), 5)]


TRICKS = [lambda R, C: lambda a: R[a, 1.0, np.ones(2), 3:5],
          lambda R, C: lambda a: R["0,2,1", a[:2], a[2:]],
          lambda R, C: lambda a: R["-1,2,0", a, a],
          lambda R, C: lambda a: R["1,2", a[None], 2.0 * a[None]],
          lambda R, C: lambda a: C[a, a * 2, np.zeros(4)]]


@pytest.mark.parametrize("make", TRICKS, ids=[f"trick{k}" for k in range(len(TRICKS))])
def test_index_tricks(make, interpreted):
    """gradjit's ``r_`` / ``c_`` (NumPy's own cannot take traced arrays: they call np.array)."""
    want_fn, fn = make(np.r_, np.c_), make(r_, c_)
    x = r(4)
    _equal(fn(gj.tensor(x)), want_fn(x), "tensor")
    _equal(gj.jit(fn)(x), want_fn(x), "jit")
    g = gj.grad(lambda a: (fn(a) ** 2).sum())(x)
    np.testing.assert_allclose(g, numerical_grad(lambda a: want_fn(a) ** 2, [x], 0), rtol=1e-6,
                               atol=1e-7)


_DUPLICATE_AXES = [lambda a: np.sum(a, axis=(0, 0)), lambda a: np.mean(a, axis=(0, -2)),
                   lambda a: np.prod(a, axis=(1, 1)), lambda a: np.max(a, axis=(0, -2)),
                   lambda a: np.amin(a, axis=(-1, 1)), lambda a: np.var(a, axis=(0, 0)),
                   lambda a: np.std(a, axis=(1, -1)), lambda a: np.nansum(a, axis=(0, 0)),
                   lambda a: np.ptp(a, axis=(0, 0)), lambda a: np.any(a, axis=(0, -2)),
                   lambda a: np.all(a, axis=(1, 1)), lambda a: np.count_nonzero(a, axis=(0, 0)),
                   lambda a: a.sum(axis=(0, 0)), lambda a: a.max(axis=(1, -1)),
                   lambda a: np.add.reduce(a, axis=(0, 0)),
                   lambda a: np.squeeze(a[:1, :1], axis=(0, -2))]


@pytest.mark.parametrize("k", range(len(_DUPLICATE_AXES)))
def test_an_axis_named_twice_raises_as_numpy(k, interpreted):
    f = _DUPLICATE_AXES[k]
    with pytest.raises(ValueError, match="duplicate value in 'axis'"):
        f(X34)   # (NumPy's own)
    with pytest.raises(ValueError, match="duplicate value in 'axis'") as e:
        gj.jit(f)(X34)   # (it reduced the axis once)
    assert "test_numpy_functions.py" in str(e.value)   # the user's line
    if k < 12:   # (a tensor's methods are torch's)
        with pytest.raises(ValueError, match="duplicate value in 'axis'"):
            f(gj.tensor(X34))


def test_errors_name_the_function(interpreted):
    t = gj.tensor(X34)
    with pytest.raises(TypeError, match=r"argmax\(\) got an unexpected keyword argument 'axes'"):
        np.argmax(t, axes=1)   # NumPy's dispatcher refuses it before gradjit is asked
    from gradjit.tracer.numpy_protocol import _FUNCTIONS
    with pytest.raises(TypeError, match=r"np\.linspace\(\): .*unexpected keyword argument 'nm'"):
        _FUNCTIONS[np.linspace](t, t, nm=3)   # as called by code that skips the dispatcher
    with pytest.raises(TypeError, match=r"np\.append\(\): missing a required argument"):
        _FUNCTIONS[np.append](t)
    with pytest.raises(UnsupportedError, match=r"np\.argmax\(\.\.\., out=\.\.\.\)"):
        np.argmax(t, out=np.zeros((), np.int64))
    with pytest.raises(UnsupportedError, match=r"np\.any\(\.\.\., out=\.\.\.\)"):
        gj.jit(lambda a: np.any(a, out=np.zeros(()), axis=None))(X34)
    with pytest.raises(UnsupportedError, match="mode='median'"):
        np.pad(t, 1, mode="median")
    with pytest.raises(UnsupportedError, match="callable mode"):
        np.pad(t, 1, mode=lambda *a: None)
    with pytest.raises(ValueError, match="unsupported keyword arguments for mode 'edge'"):
        np.pad(t, 1, mode="edge", constant_values=2)
    with pytest.raises(ValueError, match="mode 'bogus' is not supported"):
        np.pad(t, 1, mode="bogus")
    with pytest.raises(ValueError, match="array split does not result in an equal division"):
        np.hsplit(t, 3)
    with pytest.raises(ValueError, match="vsplit only works on arrays of 2 or more"):
        np.vsplit(gj.tensor(r(3)), 3)
    with pytest.raises(ValueError, match="sort kind must be one of"):
        np.argsort(t, kind="bogo")
    with pytest.raises(TypeError, match="invalid entry 0 in condlist"):
        np.select([t], [t])
    with pytest.raises(ValueError, match="at least \\(edge_order \\+ 1\\) elements"):
        np.gradient(gj.tensor(r(2)), edge_order=2)
    with pytest.raises(ZeroDivisionError, match="Weights sum to zero"):
        np.average(t, axis=1, weights=np.zeros(4))
    # concrete weights under a trace: NumPy's check (it gave NaN); traced ones have no value
    for w in (np.zeros(4), np.array([1.0, -1.0, 0.0, 0.0]), [0.0, 0.0, 0.0, 0.0]):
        with pytest.raises(ZeroDivisionError, match="Weights sum to zero") as e:
            gj.jit(lambda a: np.average(a, axis=1, weights=w))(X34)
        assert "test_numpy_functions.py" in str(e.value)   # the user's line
    with pytest.raises(ZeroDivisionError, match="Weights sum to zero"):
        gj.jit(lambda a: np.average(a, axis=1, weights=np.zeros(4)))(X34)   # (made in the trace)
    with pytest.raises(ZeroDivisionError, match="Weights sum to zero"):
        gj.jit(lambda a: np.average(a, axis=(1, 0), weights=np.zeros((4, 3))))(X34)
    assert np.isnan(gj.jit(lambda w: np.average(X34, axis=1, weights=w))(np.zeros(4))).all()
    with pytest.raises(TypeError, match="Axis must be specified"):
        np.average(t, weights=np.ones(4))
    with pytest.raises(ValueError, match="order must be non-negative"):
        np.diff(t, -1)
    with pytest.raises(ValueError, match="Number of samples, -1, must be non-negative"):
        np.linspace(t, t, -1)
    with pytest.raises(TypeError, match="numpy boolean subtract"):
        np.ptp(t > 0)
    out = np.zeros((3, 4), bool)   # (a NumPy out= takes a result needing no gradient)
    assert np.isnan(t, out=out) is out and not out.any()
    with pytest.raises(TypeError, match="ufunc 'bitwise_and' not supported for the input types"):
        np.bitwise_and(gj.tensor(INTS), t)   # (NumPy's own refusal: a float operand)
    with pytest.raises(gj.ShapeError, match=r"np.stack: .* same shape, got \[\(3, 4\), \(4,\)\]"):
        np.stack([t, np.ones(4)])
    with pytest.raises(UnsupportedError, match="np.logical_xor.reduce"):
        np.logical_xor.reduce(t)
    assert np.asarray(np.logical_and.reduce(t > -10).data).all()   # (a supported one)


@pytest.mark.slow
def test_compiled_integer_and_bool_results():
    """The index / bool results of the family, from Numba-compiled code, equal NumPy's."""
    def f(a):
        return (np.argmax(a, 1), np.argmin(a), np.argsort(a, 0), np.any(a > 1.0, 0),
                np.all(a > -1.0, 1, keepdims=True), np.isnan(a), np.isfinite(a),
                np.logical_xor(a > 0, np.logical_not(a < -0.5)), np.count_nonzero(a > 0, 0))
    x = np.where(X34 > 1.5, np.nan, X34)
    _equal(gj.jit(f)(x), f(x), "compiled")


@pytest.mark.slow
def test_compiled_matches_interpreted(monkeypatch):
    """One graph through the family's ops, compiled by Numba, against the interpreter."""
    def f(a, b):
        parts = np.array_split(np.pad(a, ((1, 2), (2, 1)), mode="reflect"), 2, axis=1)
        g = np.gradient(np.diff(parts[0], axis=0, prepend=0.0), 0.5, axis=1, edge_order=2)
        s = np.select([np.logical_and(np.isfinite(a), a > 0)], [np.sinc(a)], np.fabs(b))
        lin = np.linspace(a[0, 0], b[0, 0], 4)
        return (g.sum() + np.average(s, 0, np.arange(1.0, 4.0)).sum() + (lin ** 2).sum()
                + np.ptp(np.column_stack([a, b]), 1).sum() + np.argmax(a, 1).sum())
    a, b = distinct(3, 3), r(3, 3)
    monkeypatch.setenv("GRADJIT_EXECUTOR", "numpy")
    want = gj.value_and_grad(f, argnums=(0, 1))(a, b)
    fd = [numerical_grad(f, [a, b], i) for i in range(2)]
    for k in range(2):
        np.testing.assert_allclose(want[1][k], fd[k], rtol=1e-6, atol=1e-7)
    monkeypatch.delenv("GRADJIT_EXECUTOR")
    got = gj.value_and_grad(f, argnums=(0, 1))(a, b)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
    for k in range(2):
        np.testing.assert_allclose(got[1][k], want[1][k], rtol=1e-10, atol=1e-12)


def test_triu_and_tril_keep_bool_and_integer_dtypes(executor):
    # (the zero filled in was an int: a bool mask became int64, and masked_fill refused it)
    b = np.ones((3, 3), bool)
    for f in (lambda m: np.triu(m, 1), lambda m: np.tril(m), lambda m: np.triu(m.astype(np.int8))):
        got, want = gj.jit(f)(b), f(b)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
    causal = gj.triu(gj.ones(3, 3, dtype=gj.bool), diagonal=1)
    assert causal.dtype == np.bool_
    s = gj.tensor(np.zeros((3, 3))).masked_fill(causal, -np.inf)
    np.testing.assert_array_equal(np.isinf(s.numpy()), np.triu(b, 1))


@pytest.mark.slow
def test_ufunc_out_writes_into_the_buffer_and_returns_it():
    """``out=`` (``np.add(a, b, out=a)``, ``x += y`` on an array made in the function): the
    result is written into the buffer, which is returned, as NumPy; the gradient flows
    through the write."""
    x, y = r(3), r(3)

    def f(x, y):
        b = np.zeros(3)
        got = np.multiply(x, y, out=b)
        c = x * 1.0
        np.add(c, y, out=c)
        d = np.sin(c, out=c)
        a = np.ones(3)
        a += x                       # (NumPy: np.add(a, x, out=a))
        return (b * d).sum() + (a ** 2).sum() + float(got is b) + float(d is c)

    assert np.isclose(gj.jit(f)(x, y), f(x, y), rtol=1e-13)
    for k in (0, 1):
        np.testing.assert_allclose(gj.grad(f, argnums=k)(x, y), numerical_grad(f, (x, y), k),
                                   rtol=1e-7, atol=1e-9)
    with pytest.raises(TypeError, match=r"Cannot cast ufunc 'add' output from dtype\('float64'\)"):
        gj.jit(lambda x: np.add(np.arange(3), x, out=np.arange(3)).sum())(x)
    t = gj.tensor(x, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"np.exp\(\.\.\., out=\.\.\.\): the result requires grad"):
        np.exp(t, out=np.zeros(3))
    u = t * 1.0
    assert np.exp(t, out=u) is u
    u.sum().backward()
    np.testing.assert_allclose(t.grad.data, np.exp(x), rtol=1e-13)
