"""Gradient checks of every op against central finite differences (interpreted).

This module holds the op-case table (also used by ``test_ops_gradcheck_compiled.py``)
and the checks that run in the NumPy reference interpreter (no compilation):
first order in tensor mode and jit mode against finite differences, second
order (jit mode, Hessian-vector products) against finite differences of the
first gradient, and the non-differentiable paths through comparisons.

One ``Case`` is a function of gradjit objects (Tensors in tensor mode, tracers
in jit mode) plus how to make its inputs. Inputs are built so every case stays
away from non-differentiable points: ``pos`` for log / sqrt / fractional powers
/ denominators, ``away`` (|x| >= 0.3) for abs / relu / sign-dependent paths,
``distinct`` (values spaced >= 0.2 apart) for amax, ``ints`` (exact small
integers) for eq / ne conditions. Inputs listed in ``nondiff`` only feed
comparisons (conditions) and are never perturbed by finite differences.

``rep=True`` marks the single representative case of an op (or of an op
group) that is also run compiled, so the compile count of the suite stays
small. Every case also gets the second-order check: its loss squares the
output, so even piecewise-linear ops (abs, relu, amax, where) have a non-zero
Hessian away from their kinks.
"""
from __future__ import annotations

import numpy as np
import pytest

import gradjit as gj
from tests.fd import numerical_grad
from tests.runtime.cases import (CASES, Case, away, case, distinct, ints, normal,  # noqa: F401
                                 pos)

# A constant (not differentiated) matrix for the numpy-array @ tensor case.
_M = np.random.default_rng(7).standard_normal((3, 4))

# -- add / sub / mul / div --------------------------------------------------------------
case("add.Tensor", lambda x, y: x + y, normal(3, 4), normal(3, 4))
case("add.Tensor", lambda x, y: x + y, normal(3, 4), normal(4), rep=True)
case("add.Tensor", lambda x, y: np.add(x, y), normal(2, 1, 4), normal(3, 1), tag="np")
case("add.Tensor", lambda x, y: x + y, normal(), normal(2, 3))
case("add.Tensor", lambda x, y: x + y, normal(1), normal())
case("add.Tensor", lambda x, y: x + y, normal(), normal())
case("add.Tensor", lambda x, y: x.add(y, alpha=2.5), normal(3, 4), normal(1, 4), tag="alpha",
     rep=True)
case("add.Tensor", lambda x, y: x.add(y, alpha=-3), normal(2), normal(3, 1), tag="alpha")
case("add.Scalar", lambda x: x + 1.5, normal(3, 4), rep=True)
case("add.Scalar", lambda x: x + 1.5, normal())
case("add.Scalar", lambda x: 2.0 + x, normal(2, 3), tag="radd")
case("add.Scalar", lambda x: x.add(1.5, alpha=2), normal(1, 3), tag="alpha")
case("add.Scalar", lambda x: np.add(x, 0.25), normal(1), tag="np")

case("sub.Tensor", lambda x, y: x - y, normal(3, 4), normal(3, 4))
case("sub.Tensor", lambda x, y: np.subtract(x, y), normal(4), normal(3, 1), tag="np",
     rep=True)
case("sub.Tensor", lambda x, y: x - y, normal(2, 3), normal())
case("sub.Tensor", lambda x, y: x - y, normal(), normal(1, 2))
case("sub.Tensor", lambda x, y: x.sub(y, alpha=-0.5), normal(2, 3), normal(3), tag="alpha",
     rep=True)
case("sub.Tensor", lambda x, y: x.sub(y, alpha=2), normal(), normal(2), tag="alpha")
case("sub.Scalar", lambda x: x - 2.0, normal(3, 4), rep=True)
case("sub.Scalar", lambda x: x - 2.0, normal())
case("sub.Scalar", lambda x: x.sub(0.5, alpha=3), normal(2, 1), tag="alpha")
case("rsub.Scalar", lambda x: 2.0 - x, normal(3, 4), rep=True)
case("rsub.Scalar", lambda x: 2.0 - x, normal())
case("rsub.Scalar", lambda x: np.subtract(2.0, x), normal(1, 3), tag="np")

case("mul.Tensor", lambda x, y: x * y, normal(3, 4), normal(3, 4))
case("mul.Tensor", lambda x, y: np.multiply(x, y), normal(2, 1, 4), normal(3, 1), tag="np",
     rep=True)
case("mul.Tensor", lambda x, y: x * y, normal(), normal(3))
case("mul.Tensor", lambda x, y: x * y, normal(1, 1), normal(2, 3))
case("mul.Tensor", lambda x: x * x, normal(3, 4), tag="same-input")
case("mul.Scalar", lambda x: x * 3.0, normal(3, 4), rep=True)
case("mul.Scalar", lambda x: 3.0 * x, normal(), tag="rmul")
case("mul.Scalar", lambda x: -0.5 * x, normal(1, 4), tag="rmul")

case("div.Tensor", lambda x, y: x / y, normal(3, 4), pos(3, 4))
case("div.Tensor", lambda x, y: np.true_divide(x, y), normal(2, 1, 4), pos(3, 1), tag="np",
     rep=True)
case("div.Tensor", lambda x, y: x / y, normal(), pos(2, 3))
case("div.Tensor", lambda x, y: x / y, normal(2, 3), pos())
case("div.Tensor", lambda x, y: x.div(y), pos(1), pos(3, 1), tag="method")
case("div.Tensor", lambda x: x / x.sin(), pos(2, 2), tag="same-input")
case("div.Scalar", lambda x: x / 4.0, normal(3, 4), rep=True)
case("div.Scalar", lambda x: x / 4.0, normal())
case("div.Scalar", lambda x: x.div(-0.5), normal(1, 3), tag="method")
case("reciprocal", lambda x: 2.0 / x, pos(3, 4), tag="rdiv", rep=True)
case("reciprocal", lambda x: 2.0 / x, pos(), tag="rdiv")
case("reciprocal", lambda x: x.reciprocal(), pos(2, 1), tag="method")
case("reciprocal", lambda x: np.reciprocal(x), away(3), tag="np")

case("neg", lambda x: -x, normal(3, 4), rep=True)
case("neg", lambda x: -x, normal())
case("neg", lambda x: np.negative(x), normal(1, 3), tag="np")
case("neg", lambda x: x.neg(), normal(2, 1, 2), tag="method")

# -- pow -------------------------------------------------------------------------------
def _pow_op(e):
    return lambda x: x ** e


def _pow_method(e):
    return lambda x: x.pow(e)


for _e, _kind in [(2, normal), (0.5, pos), (3, normal), (-1, pos), (1.5, pos), (2.0, normal),
                  (-0.5, pos)]:
    case("pow.Tensor_Scalar", _pow_op(_e), _kind(3, 4), tag=f"e={_e}")
    case("pow.Tensor_Scalar", _pow_method(_e), _kind(), tag=f"e={_e}")
case("pow.Tensor_Scalar", lambda x: np.power(x, 3), normal(2, 1), tag="np")
case("pow.Tensor_Scalar", lambda x: x ** -1, away(2, 3), tag="e=-1-negative-base")
case("pow.Tensor_Scalar", lambda x: x ** -2, away(3), tag="e=-2-negative-base")
case("pow.Tensor_Scalar", lambda x: x ** 1, normal(2, 2), tag="e=1")
# every exponent in one graph: the compiled representative
case("pow.Tensor_Scalar", lambda x: x ** 2 + x ** 0.5 + x ** 3 + x ** -1 + x ** 1.5,
     pos(3, 4), tag="mixed", rep=True)
case("pow.Tensor_Tensor", lambda x, y: x ** y, pos(3, 4), normal(3, 4))
case("pow.Tensor_Tensor", lambda x, y: x ** y, pos(2, 1, 3), normal(4, 1), rep=True)
case("pow.Tensor_Tensor", lambda x, y: x ** y, pos(), normal(2, 2))
case("pow.Tensor_Tensor", lambda x, y: np.power(x, y), pos(3), normal(1), tag="np")
case("pow.Tensor_Tensor", lambda x, y: x.pow(y), pos(2, 3), normal(), tag="method")
case("pow.Scalar", lambda x: 2.0 ** x, normal(3, 4), rep=True)
case("pow.Scalar", lambda x: 2.0 ** x, normal())
case("pow.Scalar", lambda x: np.power(3.0, x), normal(1, 3), tag="np")
case("pow.Scalar", lambda x: 0.5 ** x, normal(2, 1), tag="base<1")

# -- unary math ------------------------------------------------------------------------
_UNARY = [
    ("exp", normal, lambda x: np.exp(x), lambda x: x.exp()),
    ("log", pos, lambda x: np.log(x), lambda x: x.log()),
    ("sin", normal, lambda x: np.sin(x), lambda x: x.sin()),
    ("cos", normal, lambda x: np.cos(x), lambda x: x.cos()),
    ("tanh", normal, lambda x: np.tanh(x), lambda x: x.tanh()),
    ("sigmoid", normal, lambda x: x.sigmoid(), lambda x: x.sigmoid()),
    ("sqrt", pos, lambda x: np.sqrt(x), lambda x: x.sqrt()),
    ("abs", away, lambda x: np.abs(x), lambda x: abs(x)),
    ("relu", away, lambda x: x.relu(), lambda x: x.relu()),
]
for _name, _kind, _np_fn, _method in _UNARY:
    case(_name, _np_fn, _kind(3, 4), rep=True)
    case(_name, _method, _kind())
    case(_name, _np_fn, _kind(1))
    case(_name, _method, _kind(2, 1, 3))
case("abs", lambda x: x.abs(), away(4), tag="method")
case("log", lambda x: np.log(x * x), away(2, 3), tag="of-square")

# -- reductions ------------------------------------------------------------------------
case("sum", lambda x: x.sum(), normal(3, 4), rep=True)
case("sum", lambda x: x.sum(), normal())
case("sum", lambda x: x.sum(), normal(1))
case("sum", lambda x: np.sum(x), normal(2, 3, 4), tag="np")
case("sum.dim_IntList", lambda x: x.sum(1), normal(3, 4), rep=True)
case("sum.dim_IntList", lambda x: x.sum((0, 2)), normal(2, 3, 4))
case("sum.dim_IntList", lambda x: x.sum(-1, keepdim=True), normal(3, 4), tag="keepdim")
case("sum.dim_IntList", lambda x: x.sum(dim=(0, -1), keepdim=True), normal(2, 3, 4),
     tag="keepdim")
case("sum.dim_IntList", lambda x: x.sum(keepdim=True), normal(2, 3), tag="all-keepdim")
case("sum.dim_IntList", lambda x: np.sum(x, axis=0), normal(1, 3), tag="np")
case("sum.dim_IntList", lambda x: np.sum(x, axis=-1, keepdims=True), normal(2, 3), tag="np")
case("sum.dim_IntList", lambda x: x.sum(0), normal(4), tag="to-0d")
case("sum.dim_IntList", lambda x: x.sum(axis=-2), normal(2, 1, 3), tag="size1")
case("sum.dim_IntList", lambda x: x.sum(0, keepdim=True), normal(), tag="0d")
case("mean.dim", lambda x: x.mean(0), normal(), tag="0d")
case("amax", lambda x: x.amax(0, keepdim=True), distinct(), tag="0d")
case("mean", lambda x: x.mean(), normal(3, 4), rep=True)
case("mean", lambda x: x.mean(), normal())
case("mean", lambda x: np.mean(x), normal(2, 3, 4), tag="np")
case("mean.dim", lambda x: x.mean(0), normal(3, 4), rep=True)
case("mean.dim", lambda x: x.mean((0, 2), keepdim=True), normal(2, 3, 4), tag="keepdim")
case("mean.dim", lambda x: np.mean(x, axis=-1), normal(3, 4), tag="np")
case("mean.dim", lambda x: x.mean(-1, keepdim=True), normal(1, 5), tag="keepdim")
case("mean.dim", lambda x: x.mean(0), normal(1, 3), tag="size1")
case("mean.dim", lambda x: x.mean((0, 1)), normal(2, 3), tag="all-dims")
case("amax", lambda x: x.amax(), distinct(3, 4), rep=True, tag="all")
case("amax", lambda x: x.amax(1), distinct(3, 4), rep=True)
case("amax", lambda x: x.amax(-1, keepdim=True), distinct(2, 3, 4),
     tag="keepdim")
case("amax", lambda x: x.amax((0, 2)), distinct(2, 3, 4))
case("amax", lambda x: x.amax((0, 2), keepdim=True), distinct(2, 3, 4),
     tag="keepdim")
case("amax", lambda x: np.max(x, axis=0), distinct(3, 4), tag="np.max")
case("amax", lambda x: np.amax(x), distinct(5), tag="np.amax")
case("amax", lambda x: x.amax(0), distinct(1, 4), tag="size1")
case("amax", lambda x: x.amax(), distinct(), tag="all")
case("amax", lambda x: x.amax() * x, distinct(2, 3), tag="reuse")

# -- matrix products -----------------------------------------------------------------------
case("mm", lambda x, y: x.mm(y), normal(3, 4), normal(4, 2), rep=True)
case("mm", lambda x, y: x.mm(y), normal(1, 4), normal(4, 1))
case("mm", lambda x, y: x.mm(y), normal(3, 1), normal(1, 2), tag="outer")
case("mm", lambda x, y: np.dot(x, y), normal(2, 3), normal(3, 3), tag="np.dot")
case("mm", lambda x: x.mm(x.t()), normal(3, 2), tag="same-input")
case("matmul", lambda x, y: x @ y, normal(4), normal(4), tag="1d@1d", rep=True)
case("matmul", lambda x, y: x @ y, normal(3, 4), normal(4), tag="2d@1d", rep=True)
case("matmul", lambda x, y: x @ y, normal(4), normal(4, 3), tag="1d@2d", rep=True)
case("matmul", lambda x, y: x.matmul(y), normal(3, 4), normal(4, 2), tag="2d@2d")
case("matmul", lambda x, y: x @ y, normal(1), normal(1, 3), tag="1d@2d")
case("matmul", lambda x, y: x @ y, normal(2, 3, 4), normal(2, 4, 5), tag="batched", rep=True)
case("matmul", lambda x, y: x @ y, normal(2, 3, 4), normal(4, 5), tag="batch-bcast", rep=True)
case("matmul", lambda x, y: x @ y, normal(3, 4), normal(2, 4, 5), tag="batch-bcast")
case("matmul", lambda x, y: x @ y, normal(2, 1, 3, 4), normal(3, 4, 2), tag="batch-bcast",
     rep=True)
case("matmul", lambda x, y: np.matmul(x, y), normal(1, 3, 4), normal(2, 4, 1), tag="np")
case("matmul", lambda x, y: x @ y, normal(4), normal(2, 4, 3), tag="1d@3d")
case("matmul", lambda x, y: x @ y, normal(2, 3, 4), normal(4), tag="3d@1d")
case("matmul", lambda x: _M @ x, normal(4, 2), tag="ndarray@tensor")
case("bmm", lambda x, y: x.bmm(y), normal(2, 3, 4), normal(2, 4, 5), rep=True)
case("bmm", lambda x, y: x.bmm(y), normal(1, 1, 3), normal(1, 3, 2))

# -- shape ---------------------------------------------------------------------------------
case("t", lambda x: x.t(), normal(3, 4), rep=True)
case("t", lambda x: x.T, normal(2, 3), tag=".T")
case("t", lambda x: x.t(), normal(4), tag="1d")
case("t", lambda x: x.t() * x.t(), normal(1, 3), tag="reuse")
case("transpose", lambda x: x.transpose(0, 2), normal(2, 3, 4), rep=True)
case("transpose", lambda x: x.transpose(-1, 0), normal(3, 4))
case("transpose", lambda x: x.swapaxes(1, 2), normal(2, 3, 1), tag="swapaxes")
case("transpose", lambda x: x.mT, normal(2, 3, 4), tag="mT")
case("permute", lambda x: x.permute(2, 0, 1), normal(2, 3, 4), rep=True)
case("permute", lambda x: x.permute((1, 0)), normal(3, 4))
case("permute", lambda x: x.T, normal(2, 3, 4), tag=".T")
case("permute", lambda x: np.transpose(x), normal(2, 3, 4), tag="np")
case("permute", lambda x: np.transpose(x, (1, 0, 2)), normal(2, 3, 4), tag="np")
case("permute", lambda x: x.permute(0, 2, 1), normal(1, 3, 2))
case("view", lambda x: x.reshape(4, 3), normal(3, 4), tag="reshape", rep=True)
case("view", lambda x: x.reshape(-1), normal(2, 3, 4), tag="reshape")
case("view", lambda x: x.view(2, -1, 3), normal(3, 4), tag="view")
case("view", lambda x: x.reshape(1, 1), normal(), tag="reshape")
case("view", lambda x: x.reshape(()), normal(1), tag="reshape")
case("view", lambda x: np.reshape(x, (6, 2)), normal(3, 4), tag="np")
case("view", lambda x: x.flatten(), normal(2, 2), tag="flatten")
case("view", lambda x: x.flatten(1), normal(2, 3, 4), tag="flatten")   # (CNN features)
case("view", lambda x: x.flatten(0, -2), normal(2, 3, 4), tag="flatten")
case("view", lambda x: gj.flatten(x, 1), normal(2, 3, 1), tag="flatten-fn")
case("view", lambda x: x.view((-1, 2)), normal(2, 1, 2), tag="view")
case("expand", lambda x: x.expand(3, 4), normal(1, 4), rep=True)
case("expand", lambda x: x.expand(2, 3, 4), normal(3, 1))
case("expand", lambda x: np.broadcast_to(x, (2, 3)), normal(), tag="np")
case("expand", lambda x: x.expand(-1, 4), normal(3, 1), tag="-1")
case("expand", lambda x: x.broadcast_to((2, 1, 3)), normal(3), tag="broadcast_to")
case("expand", lambda x: x.expand(1, 1), normal(), tag="0d")
case("squeeze", lambda x: x.squeeze(), normal(1, 3, 1, 4), rep=True)
case("squeeze", lambda x: np.squeeze(x), normal(1, 1), tag="np-to-0d")
case("squeeze.dim", lambda x: x.squeeze(0), normal(1, 3), rep=True)
case("squeeze.dim", lambda x: x.squeeze(-1), normal(3, 1))
case("squeeze.dim", lambda x: np.squeeze(x, axis=1), normal(2, 1, 3), tag="np")
case("squeeze.dim", lambda x: x.squeeze(0), normal(1), tag="to-0d")
case("unsqueeze", lambda x: x.unsqueeze(0), normal(3, 4), rep=True)
case("unsqueeze", lambda x: x.unsqueeze(-1), normal(3, 4))
case("unsqueeze", lambda x: x.unsqueeze(0), normal(), tag="0d")
case("unsqueeze", lambda x: np.expand_dims(x, 1), normal(2, 3), tag="np")

# -- where and comparisons ----------------------------------------------------------------
case("where", lambda c, x, y: np.where(c > 0, x, y), away(3, 4), normal(3, 4), normal(3, 4),
     nondiff=[0], rep=True)
case("where", lambda c, x, y: np.where(c > 0, x, y), away(3, 1), normal(1, 4), normal(4),
     nondiff=[0], tag="bcast")
case("where", lambda c, x, y: gj.where(c > 0, x, y), away(3, 4), normal(), normal(3, 4),
     nondiff=[0], tag="gj-0d-branch")
case("where", lambda c, x, y: gj.where(c > 0, x, y), away(), normal(2), normal(2, 1),
     nondiff=[0], tag="gj-0d-cond")
case("where", lambda c, x: gj.where(c > 0, x, 0.0), away(2, 3), normal(2, 3), nondiff=[0],
     tag="gj-scalar-other", rep=True)
case("where", lambda c, x: gj.where(c < 0, 2.0, x), away(2, 3), normal(3), nondiff=[0],
     tag="gj-scalar-self")
case("where", lambda c, x: np.where(c > 0, x, 0.0), away(), normal(2, 2), nondiff=[0],
     tag="np-scalar-other")
case("where", lambda c, x: np.where(c > 0, -1.5, x), away(2, 2), normal(2, 2), nondiff=[0],
     tag="np-scalar-self")
case("where", lambda x, y: np.where(x > y, x, y), normal(3, 4), normal(3, 4),
     tag="max")
case("where", lambda x: gj.where(x > 0.0, x, 0.1 * x), away(2, 3),
     tag="leaky-relu")
case("where", lambda x: np.where(x > 0.0, x * x, x.sin()), away(2, 3), tag="both-branches")

_CMPS = [
    ("gt.Tensor", lambda c, d: c > d, normal, normal),
    ("gt.Scalar", lambda c, d: c > 0.0, normal, normal),
    ("gt.Scalar", lambda c, d: 0.0 < c, normal, normal),          # reversed: 0 < c is c > 0
    ("lt.Tensor", lambda c, d: c < d, normal, normal),
    ("lt.Scalar", lambda c, d: c < 0.0, normal, normal),
    ("ge.Tensor", lambda c, d: c >= d, ints, ints),
    ("ge.Scalar", lambda c, d: c >= 1.0, ints, ints),
    ("le.Tensor", lambda c, d: np.less_equal(c, d), ints, ints),
    ("le.Scalar", lambda c, d: 1.0 >= c, ints, ints),            # reversed: le.Scalar
    ("eq.Tensor", lambda c, d: c == d, ints, ints),
    ("eq.Scalar", lambda c, d: np.equal(c, 1.0), ints, ints),
    ("ne.Tensor", lambda c, d: c != d, ints, ints),
    ("ne.Scalar", lambda c, d: c.ne(2.0), ints, ints),
]


def _gj_where_by(cmp):
    return lambda c, d, x: gj.where(cmp(c, d), x, x * x)


def _np_where_by(cmp):
    return lambda c, d, x: np.where(cmp(c, d), x.exp(), -x)


for _i, (_name, _cmp, _kc, _kd) in enumerate(_CMPS):
    case(_name, _gj_where_by(_cmp), _kc(3, 4), _kd(3, 4), normal(3, 4), nondiff=[0, 1],
         tag=f"where{_i}")
    case(_name, _np_where_by(_cmp), _kc(2, 1), _kd(3), normal(1, 3), nondiff=[0, 1],
         tag=f"where{_i}")


def _all_cmps(c, d, k, j, x):
    out = x
    for i, (_, cmp, kc, _) in enumerate(_CMPS):
        a, b = (c, d) if kc is normal else (k, j)
        out = out + gj.where(cmp(a, b), x * float(i + 1), x * x)
    return out


# every comparison in one graph: the compiled representative
case("comparisons", _all_cmps, normal(3, 4), normal(3, 4), ints(3, 4), ints(3, 4), normal(3, 4),
     nondiff=[0, 1, 2, 3], rep=True)

# -- softmax -------------------------------------------------------------------------------
def _softmax_like(method, dim, scale=1.0):
    return lambda x: getattr(x * scale if scale != 1.0 else x, method)(dim)


for _name, _m in [("_softmax", "softmax"), ("_log_softmax", "log_softmax")]:
    case(_name, _softmax_like(_m, -1), normal(3, 4), rep=True)
    case(_name, _softmax_like(_m, 0), normal(3, 4))
    case(_name, _softmax_like(_m, 1), normal(2, 3, 4))
    case(_name, _softmax_like(_m, 0), normal(1, 4), tag="size1")
    case(_name, _softmax_like(_m, 0), normal(4))
    case(_name, _softmax_like(_m, 0), normal(), tag="0d")
    case(_name, _softmax_like(_m, -1, 20.0), normal(2, 5), tag="large")

# -- composites (several ops, values used twice) -------------------------------------------
case("composite", lambda x, w, b: np.tanh(x @ w + b).mean(0), normal(3, 4), normal(4, 2),
     normal(2), tag="mlp", rep=True)
case("composite", lambda x, y: (x.sigmoid() * y).sum(0).log_softmax(0), normal(3, 4),
     normal(4), tag="sig-logsoftmax")
case("composite", lambda x: (x - x.amax(-1, keepdim=True)).exp().sum(-1).log(), distinct(2, 4),
     tag="logsumexp")
case("composite", lambda x, y: ((x - y) ** 2).mean() + (x * y).sum() / 3.0, normal(2, 3),
     normal(3), tag="mse")
# 0-d inputs and a 0-d output, and size-1 dims, through the compiled path too
case("composite", lambda x, y: (x * y).sum() + x.exp() - (2.0 / x.sigmoid()) + y.amax() ** 2,
     normal(), distinct(3), tag="0d", rep=True)
case("composite", lambda x, y: (x @ y).squeeze(0).softmax(0) * x.sum(1, keepdim=True).squeeze(),
     normal(1, 3), normal(3, 1), tag="size1", rep=True)

from tests.runtime import cases_index, cases_math, cases_reduce  # noqa: E402,F401  (family cases)
from tests.runtime import cases_linalg  # noqa: E402,F401  (linear algebra)
from tests.runtime import cases_empty  # noqa: E402,F401  (size-0 inputs, every family)

CASE_IDS = [c.id for c in CASES]
assert len(set(CASE_IDS)) == len(CASE_IDS), [i for i in CASE_IDS if CASE_IDS.count(i) > 1]
REPS = [c for c in CASES if c.rep]


# -- gradient helpers (shared with the compiled checks) -----------------------------------------
def tensor_grads(case, arrays, W):
    """Tensor mode: loss.backward() on leaves that require grad; their .grad arrays."""
    ts = [gj.tensor(a, requires_grad=i in case.diff) for i, a in enumerate(arrays)]
    loss = (case.fn(*ts) * W).sum()
    loss.backward()
    for i, t in enumerate(ts):
        if i in case.diff:
            assert t.grad is not None, f"{case.id}: input {i} got no gradient"
        else:
            assert t.grad is None
    return [ts[i].grad.data for i in case.diff]


def jit_grads(case, arrays, W):
    """Jit mode: gj.grad(f, argnums=diff)(*arrays)."""
    g = gj.grad(lambda *a: (case.fn(*a) * W).sum(), argnums=case.diff)(*arrays)
    assert isinstance(g, tuple) and len(g) == len(case.diff)
    return list(g)


def fd_grads(case, arrays, W):
    return [numerical_grad(lambda *a: case.forward(*a) * W, arrays, i) for i in case.diff]


def check_close(got, want, rtol, atol, what):
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        g = np.asarray(g)
        assert g.shape == np.shape(w), f"{what} gradient {k}: shape {g.shape} != {np.shape(w)}"
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"{what} gradient {k}")


# -- first order ------------------------------------------------------------------------------
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_first_order_matches_finite_differences(case, interpreted):
    arrays = case.arrays()
    W = case.weights(arrays)
    fd = fd_grads(case, arrays, W)

    tg = tensor_grads(case, arrays, W)
    assert all(g.dtype == np.float64 for g in tg)
    check_close(tg, fd, 1e-6, 1e-6, "tensor mode")

    jg = jit_grads(case, arrays, W)
    assert all(np.asarray(g).dtype == np.float64 for g in jg)
    check_close(jg, fd, 1e-6, 1e-6, "jit mode")

    value, vg = gj.value_and_grad(lambda *a: (case.fn(*a) * W).sum(), argnums=case.diff)(*arrays)
    np.testing.assert_allclose(value, np.sum(case.forward(*arrays) * W), rtol=1e-12, atol=1e-12)
    check_close(list(vg), jg, 1e-12, 1e-12, "value_and_grad vs grad")


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_autograd_grad_matches_backward(case, interpreted):
    """gj.autograd.grad returns the same gradients as .backward() (no accumulation)."""
    arrays = case.arrays("autograd")
    W = case.weights(arrays)
    ts = [gj.tensor(a, requires_grad=i in case.diff) for i, a in enumerate(arrays)]
    loss = (case.fn(*ts) * W).sum()
    grads = gj.autograd.grad([loss], [ts[i] for i in case.diff])
    assert all(t.grad is None for t in ts)
    check_close([g.data for g in grads], tensor_grads(case, arrays, W), 1e-12, 1e-12,
                "autograd.grad vs backward")


# -- second order -----------------------------------------------------------------------------
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_second_order_hvp_matches_finite_differences(case, interpreted):
    """d/dx_j sum(grad_i(f)(x) * v) == FD of the first gradient, for all pairs i, j.

    The loss is sum(f(x)**2 * W) so even for ops linear in x the Hessian is not zero
    and differentiating the backward graph exercises the op's formula again."""
    check_hvp(case)


def check_hvp(case):
    """Hessian-vector products of ``sum(f(x)**2 * W)`` against finite differences of the
    first gradient, for every pair of differentiable arguments (shared with other op
    families' tests)."""
    arrays = case.arrays("second")
    W = case.weights(arrays)

    def loss(*a):
        out = case.fn(*a)
        return (out * out * W).sum()

    rng = case.rng("v")
    for i in case.diff:
        v = rng.standard_normal(arrays[i].shape)
        g_i = gj.grad(loss, argnums=i)
        hv = gj.grad(lambda *a, g_i=g_i, v=v: (g_i(*a) * v).sum(), argnums=case.diff)(*arrays)
        fd = [numerical_grad(lambda *a, g_i=g_i, v=v: g_i(*a) * v, arrays, j) for j in case.diff]
        check_close(hv, fd, 1e-5, 1e-5, f"d/dx_j <grad_{i}, v>")


# -- non-differentiable paths -------------------------------------------------------------------
_CMP_FNS = [
    ("gt", lambda x, y: x > y), ("lt", lambda x, y: x < y), ("ge", lambda x, y: x >= y),
    ("le", lambda x, y: x <= y), ("eq", lambda x, y: x == y), ("ne", lambda x, y: x != y),
    ("gt-scalar", lambda x, y: x > 0.0), ("lt-scalar", lambda x, y: x < 0.0),
    ("ge-scalar", lambda x, y: x >= 0.0), ("le-scalar", lambda x, y: x <= 0.0),
    ("eq-scalar", lambda x, y: x == 1.0), ("ne-scalar", lambda x, y: x != 1.0),
    ("reversed-scalar", lambda x, y: 0.0 < x), ("np.greater", lambda x, y: np.greater(x, y)),
    ("bcast", lambda x, y: x.sum(0) > y),
]


@pytest.mark.parametrize("name, cmp", _CMP_FNS, ids=[n for n, _ in _CMP_FNS])
def test_comparison_results_are_bool_and_not_differentiable(name, cmp, interpreted):
    x0 = np.array([[1.0, -2.0, 3.0], [1.0, 0.5, -1.0]])
    y0 = np.array([1.0, 0.0, 3.0])
    x = gj.tensor(x0, requires_grad=True)
    y = gj.tensor(y0, requires_grad=True)
    r = cmp(x * 1.0, y)            # from a non-leaf too
    assert r.dtype == np.bool_
    assert r.requires_grad is False
    assert r.grad_fn is None
    np.testing.assert_array_equal(r.data, cmp(x0, y0))
    r = cmp(x, y)
    assert r.dtype == np.bool_ and r.requires_grad is False and r.grad_fn is None
    # in jit mode the traced comparison is bool as well
    seen = []
    gj.grad(lambda a, b: (seen.append(cmp(a, b).dtype), (a * b).sum())[1])(x0, y0)
    assert seen == [np.dtype(np.bool_)]


def _cmp_only(x, y):
    """x reaches the output only through a comparison; y through a where branch."""
    return gj.where(x > 0.0, y * 2.0, y.sin()).sum() + gj.where(x < y, 1.0, 0.0).sum()


def test_gradient_through_comparison_only_is_none_in_tensor_mode(interpreted):
    x0, y0 = np.array([[0.5, -1.0], [2.0, -0.3]]), np.array([0.7, -0.4])
    x = gj.tensor(x0, requires_grad=True)
    y = gj.tensor(y0, requires_grad=True)
    loss = _cmp_only(x, y)
    loss.backward()
    assert x.grad is None
    want = numerical_grad(lambda a, b: _cmp_only(gj.tensor(a), gj.tensor(b)).data, [x0, y0], 1)
    np.testing.assert_allclose(y.grad.data, want, rtol=1e-6, atol=1e-6)

    x = gj.tensor(x0, requires_grad=True)
    y = gj.tensor(y0, requires_grad=True)
    gx, gy = gj.autograd.grad([_cmp_only(x, y)], [x, y], allow_unused=True)
    assert gx is None
    np.testing.assert_allclose(gy.data, want, rtol=1e-6, atol=1e-6)

    x = gj.tensor(x0, requires_grad=True)
    y = gj.tensor(y0, requires_grad=True)
    with pytest.raises(RuntimeError, match="allow_unused"):
        gj.autograd.grad([_cmp_only(x, y)], [x, y])


def test_comparison_only_output_does_not_require_grad(interpreted):
    x = gj.tensor(np.array([0.5, -1.0, 2.0]), requires_grad=True)
    out = gj.where(x > 0.0, 1.0, -1.0).sum()   # no differentiable path at all
    assert out.requires_grad is False
    with pytest.raises(RuntimeError, match="does not require grad"):
        out.backward()


def test_gradient_through_comparison_only_is_zero_in_jit_mode(interpreted):
    x0, y0 = np.array([[0.5, -1.0], [2.0, -0.3]]), np.array([0.7, -0.4])
    gx, gy = gj.grad(_cmp_only, argnums=(0, 1))(x0, y0)
    assert gx.shape == x0.shape and gx.dtype == np.float64
    np.testing.assert_array_equal(gx, np.zeros_like(x0))
    want = numerical_grad(lambda a, b: _cmp_only(gj.tensor(a), gj.tensor(b)).data, [x0, y0], 1)
    np.testing.assert_allclose(gy, want, rtol=1e-6, atol=1e-6)
    # a function whose only dependence on x is a comparison: gradient is all zeros
    g = gj.grad(lambda a: gj.where(a > 0.0, 2.0, -3.0).sum() + 0.0 * 1.0)(x0)
    np.testing.assert_array_equal(g, np.zeros_like(x0))
