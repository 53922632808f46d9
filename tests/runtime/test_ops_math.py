"""The elementwise math family at its edges: ties, bounds, NaN, dtypes, errors.

Finite-difference gradchecks of every op live in ``cases_math.py`` (run by
``test_ops_gradcheck.py``); here are the behaviours gradchecks cannot see:
torch's conventions at non-differentiable points, dtype rules, the compiled
special functions against SciPy, and error messages.
"""
from __future__ import annotations

import numpy as np
import pytest
from scipy import special

import gradjit as gj
from tests.marks import COMPILED_SLOW
from gradjit.lowering import special_cpu as sp
from gradjit.runtime import tiers


def _grads(fn, *arrays):
    ts = [gj.tensor(np.asarray(a, dtype=np.float64), requires_grad=True) for a in arrays]
    fn(*ts).sum().backward()
    tensor_mode = [np.asarray(t.grad) for t in ts]
    jit_mode = gj.grad(lambda *xs: fn(*xs).sum(), argnums=tuple(range(len(arrays))))(*arrays)
    for a, b in zip(tensor_mode, jit_mode):
        np.testing.assert_array_equal(a, b)
    return tensor_mode


def test_edges_follow_torch(executor):
    """One graph (compiled once) with every convention at a kink, as torch defines it."""
    x = np.array([-1.0, 0.0, 0.5, 1.0, 2.0])
    y = np.array([-1.0, 1.0, 0.5, np.nan, 0.0])

    def f(x, y):
        return (x.clamp(-1.0, 1.0)            # inclusive bounds: gradient 1 at -1 and 1
                + 10.0 * x.maximum(y)          # ties split half and half
                + 100.0 * x.fmax(y)            # ties and NaN other go to self
                + 1000.0 * x.floor())          # zero gradient, not undefined

    gx, gy = _grads(f, x, y)
    np.testing.assert_array_equal(gx, [1 + 5 + 100, 1 + 0 + 0, 1 + 5 + 100, 1 + 10 + 100, 10 + 100])
    np.testing.assert_array_equal(gy[[0, 1, 2, 4]], [5.0, 10 + 100, 5.0, 0.0])


def test_log_family_at_zero(interpreted):
    x = gj.tensor(np.array([0.0, 1.0]), requires_grad=True)
    y = x.log2() + x.log10() + (x - 1.0).log1p()
    assert np.isneginf(y.data[0])
    y.sum().backward()
    assert np.isposinf(x.grad.data[0])


def test_rounding_gradient_is_zeros_in_tensor_mode(interpreted):
    x = gj.tensor(np.array([0.4, 1.6, -2.5]), requires_grad=True)
    (x.floor() + x.ceil() + x.round() + x.trunc()).sum().backward()
    np.testing.assert_array_equal(x.grad.data, np.zeros(3))


def test_sign_gradient_is_zeros_not_none_in_tensor_mode(interpreted):
    # torch: x.sign() requires grad and backward through it leaves zeros, not None
    x = gj.tensor(np.array([0.4, -1.6, 0.0]), requires_grad=True)
    s = x.sign()
    assert s.requires_grad
    s.sum().backward()
    np.testing.assert_array_equal(x.grad.data, np.zeros(3))
    x.grad = None
    (x.sgn() * x).sum().backward()
    np.testing.assert_array_equal(x.grad.data, [1.0, -1.0, 0.0])


def test_round_is_half_to_even_like_numpy_and_torch(interpreted):
    x = np.array([0.5, 1.5, 2.5, -0.5, 0.25])
    out = gj.jit(lambda a: a.round() + 10 * a.round(1))(x)
    np.testing.assert_array_equal(out, np.round(x) + 10 * np.round(x, 1))


def test_builtin_round_of_a_traced_scalar_is_np_round(executor):
    # NumPy's scalars define __round__ (round(x[0], 1) is np.round); a zero gradient, as
    # JAX's; round(x) gives a Python int, which needs the value; arrays have no __round__
    x = np.array([[1.26, 2.5], [3.14159, -1.55]])
    f = lambda a: (round(a[0, 0], 1), round(a[1, 1], 0), round(a[1, 0] * 100, -1),
                   round(a.astype(np.float32)[0, 0], 1), round(a.astype(np.int64)[0, 1] * 13, -1))
    for got, want in zip(gj.jit(f)(x), f(x), strict=True):
        assert got.dtype == want.dtype and got == want
    np.testing.assert_array_equal(gj.grad(lambda a: round(a[0, 0], 1) + 2.0 * a[0, 1])(x),
                                  [[0.0, 2.0], [0.0, 0.0]])
    with pytest.raises(gj.TracerValueError, match="round"):
        gj.jit(lambda a: round(a[0, 0]))(x)
    with pytest.raises(TypeError, match="__round__"):
        gj.jit(lambda a: round(a[0], 1))(x)


def test_nan_to_num_values_and_gradient(interpreted):
    x = np.array([np.nan, np.inf, -np.inf, 1.5])
    o1, o2 = gj.jit(lambda a: (a.nan_to_num(nan=1.0, posinf=2.0), np.nan_to_num(a)))(x)
    np.testing.assert_array_equal(o1, np.nan_to_num(x, nan=1.0, posinf=2.0))
    np.testing.assert_array_equal(o2, np.nan_to_num(x))
    g = gj.grad(lambda a: a.nan_to_num().sum())(x)
    np.testing.assert_array_equal(g, [0.0, 0.0, 0.0, 1.0])


def test_scalars_on_either_side_keep_float32(executor, monkeypatch):
    x = np.linspace(0.13, 0.87, 6, dtype=np.float32).reshape(2, 3)

    def f(a):
        return (np.maximum(a, 0.5) + np.arctan2(1.0, a) + 2.0 % a + a.clamp(0.2, 0.7) + a.erfinv()
                + a.lerp(1.0, 0.25) + a.digamma()).sum()

    value, g = gj.value_and_grad(f)(x)
    assert value.dtype == np.float32 and g.dtype == np.float32
    monkeypatch.setenv("GRADJIT_EXECUTOR", "numpy")   # the float64 reference, interpreted
    want = gj.grad(f)(x.astype(np.float64))
    np.testing.assert_allclose(g, want, rtol=1e-4, atol=1e-4)


def test_integer_inputs_promote_like_numpy(interpreted):
    i = gj.tensor(np.array([1, 2, 3]))
    assert i.exp2().dtype == np.float64 and i.floor().dtype == np.int64
    assert i.maximum(2).dtype == np.int64 and i.maximum(2.5).dtype == np.float64
    assert i.clamp(0, 2).dtype == np.int64 and i.clamp(0.5, 2).dtype == np.float64
    np.testing.assert_array_equal((i % 2).data, [1, 0, 1])


def test_tensor_mode_promotes_as_torch(executor):
    """torch's rule: dimensioned tensors before 0-d ones, by category (bool < int < float);
    Python scalars weak; float64 the default float. The NumPy front end keeps NumPy's."""
    f32, i64 = np.array([1.5, -2.0], np.float32), np.array([3, 4])
    t = gj.tensor
    cases = [(t(f32) * t(i64), np.float32), (t(f32) + t(np.array(2.0)), np.float32),
             (t(np.int32([1, 2])) + t(np.array(5)), np.int32), (t(i64) * t(np.float32(2)), np.float32),
             (t([True, False]) + t(np.int32(2)), np.int32), (t(i64) * 0.5, np.float64),
             (t(i64) / t(i64), np.float64), (t(f32) * 0.5, np.float32),
             (t(i64) * t(np.array([1], np.float16)), np.float16),
             (gj.maximum(t(f32), t(i64)), np.float32), (gj.atan2(t(f32), t(np.array(1.0))), np.float32),
             (gj.cat([t(f32), t(i64)]), np.float32), (gj.where(t([True, False]), t(f32), t(np.array(2.0))), np.float32),
             (t(f32) ** t(i64), np.float32), (t(np.array(2.0)) * t(np.array(2, np.int32)), np.float64)]
    for got, want in cases:
        assert got.dtype == want, (got, want)
    np.testing.assert_array_equal((t(f32) * t(i64)).data, f32 * np.float32(i64))
    # comparisons compute in the promoted dtype: 2**24 + 1 is 2**24 in float32 (torch: True)
    assert (t([2 ** 24 + 1]) == t(np.float32([2 ** 24]))).item()
    # the gradient reaches the float32 leaf in its dtype (a cast node, recorded and compiled)
    w = t(f32, requires_grad=True)
    with tiers.forced("sync"):
        for _ in range(2):   # (the second step replays the first's record)
            w.grad = None
            y = ((w * t(i64) + t(np.array(0.5))) / t(i64)).sum()
            y.backward()
            assert y.dtype == np.float32 and w.grad.dtype == np.float32
            np.testing.assert_allclose(w.grad.data, np.ones(2))
    # NumPy's rule where gradjit traces NumPy code, and in NumPy functions given tensors
    assert gj.jit(lambda a, b: a * b)(f32, i64).dtype == np.float64
    assert np.multiply(t(f32), t(i64)).dtype == np.float64
    assert gj.jit(lambda a, b: np.concatenate([a, b]))(f32, i64).dtype == np.float64


def test_tensor_matmul_of_two_dtypes_is_refused_as_torch(interpreted):
    # (torch: "expected m1 and m2 to have the same dtype"; it promoted to float64 here)
    a, b = gj.tensor(np.ones((2, 3), np.float32)), gj.tensor(np.ones((3, 2)))
    for f in (lambda: a @ b, lambda: gj.matmul(a, b), lambda: a @ gj.tensor(np.ones(3, int))):
        with pytest.raises(RuntimeError, match=r"same dtype.*float32 != (float64|int64)") as e:
            f()
        assert "test_ops_math.py" in str(e.value).splitlines()[-1]   # the user's line
    assert np.matmul(a, b).dtype == np.float64   # NumPy's function keeps NumPy's rule
    assert gj.jit(lambda a, b: a @ b)(a.data, b.data).dtype == np.float64


def test_div_rounding_modes_as_torch(executor):
    """torch's div(..., rounding_mode): "trunc" toward zero, "floor" down; integers stay
    integers; the gradient is zero (at a zero divisor too)."""
    t = gj.tensor
    a, b = np.array([-7, 7, -8]), np.array([2, -2, 2])
    q = gj.div(t(a), t(b), rounding_mode="floor")
    assert q.dtype == np.int64
    np.testing.assert_array_equal(q.data, [-4, -4, -4])
    np.testing.assert_array_equal(t(a).div(t(b), rounding_mode="trunc").data, [-3, -3, -4])
    np.testing.assert_array_equal((t(a) // t(b)).data, [-4, -4, -4])
    assert t(np.int8([3])).div(2, rounding_mode="floor").dtype == np.int8
    assert gj.div(t(np.float32([3.0])), t([2]), rounding_mode="floor").dtype == np.float32
    assert (t([5]) // t(np.float32([2.0]))).dtype == np.float32
    np.testing.assert_array_equal(t([3]).div(0.5, rounding_mode="floor").data, [6.0])
    with pytest.raises(ValueError, match="rounding_mode"):
        t([1.0]).div(t([2.0]), rounding_mode="round")
    x = t(np.array([-7.5, 7.5, -0.0, 1.0, -1.0, 0.0]), requires_grad=True)
    y = t(np.array([2.0, -2.0, 1.0, 0.0, 0.0, 0.0]), requires_grad=True)
    fl, tr = x.div(y, rounding_mode="floor"), gj.div(x, y, rounding_mode="trunc")
    np.testing.assert_array_equal(fl.data, [-4.0, -4.0, -0.0, np.inf, -np.inf, np.nan])
    np.testing.assert_array_equal(np.signbit(fl.data[:3]), [True, True, True])
    np.testing.assert_array_equal(tr.data, [-3.0, -3.0, -0.0, np.inf, -np.inf, np.nan])
    assert fl.requires_grad and tr.requires_grad
    with tiers.forced("sync"):
        (fl + tr * 2.0).sum().backward()
    np.testing.assert_array_equal(x.grad.data, np.zeros(6))
    np.testing.assert_array_equal(y.grad.data, np.zeros(6))


def test_sinc_as_torch(executor):
    """torch.sinc: sin(pi x) / (pi x), 1 at 0 (np.sinc's op), with its gradient; integers
    give the default float, float64."""
    xs = np.array([0.0, 0.3, -1.5, 2.0])
    x = gj.tensor(xs, requires_grad=True)
    y = gj.sinc(x)
    np.testing.assert_allclose(y.data, np.sinc(xs), rtol=1e-15, atol=1e-17)
    with tiers.forced("sync"):
        (x.sinc() * 2.0).sum().backward()
    px = np.pi * xs[1:]
    want = np.r_[0.0, (np.cos(px) * px - np.sin(px)) / (px * xs[1:])]
    np.testing.assert_allclose(x.grad.data, 2.0 * want, rtol=1e-12, atol=1e-15)
    assert gj.tensor(np.int8([0, 1])).sinc().dtype == np.float64
    assert gj.tensor(np.float32([0.5])).sinc().dtype == np.float32
    g = gj.grad(lambda a: (a.sinc() + a.div(2.0, rounding_mode="floor")).sum())(xs)
    np.testing.assert_allclose(g, want, rtol=1e-12, atol=1e-15)


@COMPILED_SLOW
def test_atan2_gradient_at_the_origin_is_zero_as_torch(executor):
    """torch's atan2_backward masks 1 / (y^2 + x^2) to 0 where it is infinite: at (0, 0),
    and where the sum underflows; elsewhere the usual x / r^2, -y / r^2."""
    ys, xs = np.array([0.0, 1.0, 0.5, 0.0]), np.array([0.0, 0.0, -2.0, 1e-200])
    gy, gx = _grads(gj.atan2, ys, xs)
    np.testing.assert_array_equal(gy, [0.0, 0.0, -2.0 / 4.25, 0.0])
    np.testing.assert_allclose(gx, [0.0, -1.0, -0.5 / 4.25, 0.0], rtol=1e-15)
    # second order: finite differences away from the origin
    y = gj.tensor(np.array([0.3, -1.2, 2.0]), requires_grad=True)
    x = gj.tensor(np.array([0.7, 0.4, -1.5]), requires_grad=True)
    assert gj.autograd.gradcheck(gj.atan2, (y, x))
    assert gj.autograd.gradgradcheck(gj.atan2, (y, x))
    # at the origin torch's second derivative is 0 * inf = NaN (the masked reciprocal's own
    # derivative); off it, it is finite
    y = gj.tensor(np.array([0.0, 1.0]), requires_grad=True)
    x = gj.tensor(np.array([0.0, 0.0]), requires_grad=True)
    gy, gx = gj.autograd.grad(gj.atan2(y, x).sum(), (y, x), create_graph=True)
    hy, hx = gj.autograd.grad((gy * gy + gx * 3.0).sum(), (y, x))
    assert np.isnan(hy.data[0]) and np.isnan(hx.data[0])
    np.testing.assert_array_equal([hy.data[1], hx.data[1]], [3.0, 0.0])


def test_atan2_gradients_match_torch():
    torch = pytest.importorskip("torch")
    ys, xs = [0.0, 1.0, 0.5, 0.0, -3.0], [0.0, 0.0, -2.0, 1e-200, 0.0]
    got, want = [], []
    for lib, out in ((gj, got), (torch, want)):
        y = lib.tensor(ys, dtype=lib.float64, requires_grad=True)
        x = lib.tensor(xs, dtype=lib.float64, requires_grad=True)
        gy, gx = lib.autograd.grad(lib.atan2(y, x).sum(), (y, x), create_graph=True)
        hy, hx = lib.autograd.grad((gy * gy + gx * 3.0).sum(), (y, x))
        out += [np.asarray(t.detach().numpy() if lib is torch else t.data) for t in (gy, gx, hy, hx)]
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-14)


@pytest.mark.parametrize("name, ours, ref, xs", [
    ("erfinv", sp.erfinv, special.erfinv,
     np.r_[np.linspace(-0.999999, 0.999999, 401), 1 - 1e-15, -1 + 1e-12, 0.0, 1.0, -1.0]),
    ("digamma", sp.digamma, special.psi, np.r_[np.linspace(-7.3, 40.0, 401), 1e-8, 0.0]),
    ("polygamma1", lambda x: sp.polygamma(1, x), lambda x: special.polygamma(1, x),
     np.linspace(-5.3, 30.0, 301)),
    ("polygamma3", lambda x: sp.polygamma(3, x), lambda x: special.polygamma(3, x),
     np.linspace(0.05, 30.0, 301)),
])
def test_compiled_special_functions_match_scipy(name, ours, ref, xs):
    got = np.array([ours(float(x)) for x in xs])
    want = ref(xs)
    np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-11)


def test_special_function_domains():
    assert np.isnan(sp.erfinv(1.5)) and np.isnan(sp.digamma(-2.0))
    assert sp.digamma(0.0) == -np.inf     # torch's convention
    for a, b in [(5.5, 2.0), (-5.5, 2.0), (5.5, -2.0), (-4.0, 2.0), (0.0, -3.0)]:
        assert sp.remainder(a, b) == np.remainder(a, b)
        assert np.signbit(sp.remainder(a, b)) == np.signbit(np.remainder(a, b))
    for a, b in [(-np.inf, -np.inf), (np.inf, np.inf), (1000.0, -1000.0), (3.0, 3.0)]:
        assert sp.logaddexp(a, b) == np.logaddexp(a, b)
        assert sp.logaddexp2(a, b) == np.logaddexp2(a, b)


def test_errors_name_op_shapes_and_line(interpreted):
    x = gj.tensor(np.ones((2, 3)))
    with pytest.raises(gj.ShapeError) as e:
        x.atan2(gj.tensor(np.ones(4)))
    msg = str(e.value)
    assert "atan2" in msg and "(2, 3)" in msg and "(4,)" in msg and "test_ops_math.py" in msg
    with pytest.raises(ValueError, match="clamp: at least one"):
        x.clamp()
    with pytest.raises(TypeError, match="lerp.Tensor: expected floating point"):
        gj.tensor(np.ones(2, np.int64)).lerp(gj.tensor(np.ones(2, np.int64)), 1)
