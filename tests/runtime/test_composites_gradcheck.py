"""Second-order checks (gradgradcheck, interpreted) for the conv/pool/norm composites in
gj.nn.functional, and first-order finite-difference checks (tensor mode via gradcheck and
gj.grad vs tests/fd.py) for a handful of Tensor methods and gj.linalg.multi_dot; an
in-place op on a non-leaf tensor keeps its history."""
from __future__ import annotations

import numpy as np
import pytest

import gradjit as gj
from tests.fd import numerical_grad

F = gj.nn.functional
R = np.random.default_rng(7)


def _t(*s):
    return gj.tensor(R.standard_normal(s), requires_grad=True)


def _distinct(*s):   # well-separated values: no ties for max_pool
    n = int(np.prod(s))
    v = (R.permutation(n) * 0.37 - 0.2 * n).reshape(s)
    return gj.tensor(v, requires_grad=True)


def _pos(*s):
    return gj.tensor(R.uniform(0.5, 1.5, s), requires_grad=True)


def _smooth(y):
    """A smooth, non-linear weighting so the second derivative is non-trivial."""
    return (y * y).sum() * 0.5 + y.sum()


SECOND_ORDER = [
    ("conv1d", lambda x, w, b: F.conv1d(x, w, b, stride=1, padding=1),
     lambda: (_t(2, 2, 5), _t(2, 2, 3), _t(2))),
    ("conv2d_stride_pad_dil_groups",
     lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1, dilation=2, groups=2),
     lambda: (_t(1, 2, 5, 5), _t(2, 1, 2, 2), _t(2))),
    ("conv2d_plain", lambda x, w: F.conv2d(x, w), lambda: (_t(2, 2, 4, 4), _t(1, 2, 2, 2))),
    ("conv_transpose2d",
     lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1),
     lambda: (_t(1, 2, 3, 3), _t(2, 1, 3, 3), _t(1))),
    ("avg_pool2d", lambda x: F.avg_pool2d(x, 2, stride=1, padding=1, count_include_pad=False),
     lambda: (_t(1, 2, 4, 4),)),
    ("max_pool2d", lambda x: F.max_pool2d(x, 2, stride=2), lambda: (_distinct(1, 2, 4, 4),)),
    ("adaptive_avg_pool2d", lambda x: F.adaptive_avg_pool2d(x, (2, 3)), lambda: (_t(1, 2, 5, 4),)),
    ("interpolate_bilinear",
     lambda x: F.interpolate(x, size=(5, 4), mode="bilinear", align_corners=False),
     lambda: (_t(1, 2, 3, 3),)),
    ("interpolate_bilinear_ac",
     lambda x: F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=True),
     lambda: (_t(1, 1, 2, 3),)),
    ("batch_norm_training",
     lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True),
     lambda: (_t(2, 2, 3), _pos(2), _t(2))),
    ("group_norm", lambda x, w, b: F.group_norm(x, 1, w, b), lambda: (_t(2, 2, 3), _pos(2), _t(2))),
    ("instance_norm", lambda x, w, b: F.instance_norm(x, weight=w, bias=b),
     lambda: (_t(2, 2, 4), _pos(2), _t(2))),
    ("layer_norm", lambda x, w, b: F.layer_norm(x, (3,), w, b), lambda: (_t(2, 3), _pos(3), _t(3))),
    ("cdist", lambda a, b: F.cdist(a, b), lambda: (_t(3, 2), _t(2, 2) + 0.0)),
    ("unfold", lambda x: F.unfold(x, 2, padding=1, stride=2), lambda: (_t(1, 2, 3, 3),)),
    ("fold", lambda c: F.fold(c, (3, 3), 2), lambda: (_t(1, 4, 4),)),
    ("unfold_fold", lambda x: F.fold(F.unfold(x, 2) * F.unfold(x, 2), (3, 3), 2),
     lambda: (_t(1, 1, 3, 3),)),
]


@pytest.mark.parametrize("case", SECOND_ORDER, ids=[c[0] for c in SECOND_ORDER])
def test_second_order(case, interpreted):
    name, fn, make = case
    inputs = make()
    inputs = tuple(gj.tensor(t.data, requires_grad=True) for t in inputs)  # leaves
    # the op itself and a smooth scalar of it (non-trivial Hessian for linear ops)
    assert gj.autograd.gradgradcheck(fn, inputs)
    assert gj.autograd.gradgradcheck(lambda *xs: _smooth(fn(*xs)), inputs)


# ---- first-order: Tensor methods and multi_dot ---------------------------------------

def _away(*s):   # away from 0 and integers (fix/sgn kinks)
    return R.choice([-1.0, 1.0], s) * (R.integers(0, 3, s) + R.uniform(0.2, 0.8, s))


def _np_fix(x):
    return np.trunc(x)


FIRST_ORDER = [
    ("multi_dot", lambda a, b, c: gj.linalg.multi_dot([a, b, c]),
     lambda a, b, c: np.linalg.multi_dot([a, b, c]),
     lambda: [R.standard_normal((2, 3)), R.standard_normal((3, 4)), R.standard_normal((4, 2))]),
    ("div_", lambda x, y: (x * 2.0).div_(y), lambda x, y: (x * 2.0) / y,
     lambda: [R.standard_normal((2, 3)), R.uniform(0.5, 2.0, (2, 3))]),
    ("div_scalar", lambda x: (x * 2.0).div_(3.0), lambda x: (x * 2.0) / 3.0,
     lambda: [R.standard_normal((2, 3))]),
    ("div_const_tensor", lambda x: (x * 2.0).div_(gj.tensor(np.full((2, 3), 1.5))),
     lambda x: (x * 2.0) / 1.5, lambda: [R.standard_normal((2, 3))]),
    ("pow_", lambda x: (x + 3.0).pow_(2.5), lambda x: (x + 3.0) ** 2.5,
     lambda: [R.uniform(-0.5, 0.5, (2, 3))]),
    ("pow_tensor", lambda x, e: (x + 3.0).pow_(e), lambda x, e: (x + 3.0) ** e,
     lambda: [R.uniform(-0.5, 0.5, (2, 3)), R.uniform(0.5, 2.0, (2, 3))]),
    ("expand_as", lambda x, y: x.expand_as(y) * y, lambda x, y: np.broadcast_to(x, y.shape) * y,
     lambda: [R.standard_normal((1, 3)), R.standard_normal((2, 3))]),
    ("fix", lambda x: x.fix() * x, lambda x: _np_fix(x) * x, lambda: [_away(2, 3)]),
    ("fliplr", lambda x: x.fliplr() * x, lambda x: np.fliplr(x) * x,
     lambda: [R.standard_normal((3, 4))]),
    ("flipud", lambda x: x.flipud() * x, lambda x: np.flipud(x) * x,
     lambda: [R.standard_normal((3, 4))]),
    ("reshape_as", lambda x, y: x.reshape_as(y) * y, lambda x, y: x.reshape(y.shape) * y,
     lambda: [R.standard_normal((2, 6)), R.standard_normal((3, 4))]),
    ("select", lambda x: x.select(1, 2) * 3.0, lambda x: x[:, 2] * 3.0,
     lambda: [R.standard_normal((3, 4))]),
    ("select_neg", lambda x: x.select(-1, -1) ** 2, lambda x: x[..., -1] ** 2,
     lambda: [R.standard_normal((2, 3, 4))]),
    ("sgn", lambda x: x.sgn() * x * x, lambda x: np.sign(x) * x * x, lambda: [_away(2, 3)]),
    ("swapdims", lambda x, y: x.swapdims(0, 2) * y, lambda x, y: np.swapaxes(x, 0, 2) * y,
     lambda: [R.standard_normal((2, 3, 4)), R.standard_normal((4, 3, 2))]),
    ("view_as", lambda x, y: x.view_as(y) * y, lambda x, y: x.reshape(y.shape) * y,
     lambda: [R.standard_normal((4, 3)), R.standard_normal((2, 6))]),
]


# in-place methods are a tensor-mode feature: gj.grad's tracer has no div_/pow_ methods
TENSOR_ONLY = {"div_", "div_scalar", "div_const_tensor", "pow_", "pow_tensor"}


@pytest.mark.parametrize("case", FIRST_ORDER, ids=[c[0] for c in FIRST_ORDER])
def test_first_order(case, interpreted):
    name, fn, ref, make = case
    args = make()
    w = np.random.default_rng(1).standard_normal(np.shape(ref(*args)))
    ts = [gj.tensor(a, requires_grad=True) for a in args]
    assert gj.autograd.gradcheck(fn, tuple(ts))
    # values
    np.testing.assert_allclose(fn(*[gj.tensor(a) for a in args]).data, ref(*args),
                               rtol=1e-12, atol=1e-12, err_msg=name)
    # tensor mode .backward()
    ts = [gj.tensor(a, requires_grad=True) for a in args]
    (fn(*ts) * w).sum().backward()
    grads = None
    if name not in TENSOR_ONLY:
        grads = gj.grad(lambda *xs: (fn(*xs) * w).sum(), argnums=tuple(range(len(args))))(*args)
    for i in range(len(args)):
        expect = numerical_grad(lambda *a: ref(*a) * w, args, i)
        np.testing.assert_allclose(ts[i].grad.data, expect, rtol=1e-5, atol=1e-6, err_msg=name)
        if grads is not None:
            np.testing.assert_allclose(grads[i], expect, rtol=1e-5, atol=1e-6, err_msg=name)


def test_inplace_on_nonleaf_keeps_history(interpreted):
    x = gj.tensor(R.standard_normal((2, 3)), requires_grad=True)
    y = x * 1.0
    z = y.div_(2.0)
    assert z is y
    (y * y).sum().backward()
    np.testing.assert_allclose(x.grad.data, x.data / 2.0, rtol=1e-12)
