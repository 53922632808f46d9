"""Custom ``gj.autograd.Function``: torch's API, traced and opaque backwards, higher order.

Each test defines its own Function classes (the one-time log message and the
plan cache are per class). Values run on the reference interpreter except the
tests about compiled code (jit mode, compiled tensor-mode plans).
"""
from __future__ import annotations

import logging

import numpy as np
import pytest

import gradjit as gj
from gradjit.autograd import Function, once_differentiable

A = gj.autograd
X = np.array([0.5, -1.25, 2.0])


def leaf(values=X):
    return gj.tensor(np.array(values, dtype=np.float64), requires_grad=True)


def make_cube():
    class Cube(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x ** 3

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return 3 * x ** 2 * g

    return Cube


# --------------------------------------------------------------------------------------
# basics
# --------------------------------------------------------------------------------------

def test_forward_backward_save_for_backward(interpreted):
    Cube = make_cube()
    x = leaf()
    y = Cube.apply(x)
    np.testing.assert_allclose(y.data, X ** 3)
    assert y.requires_grad and not y.is_leaf
    (y * 2).sum().backward()
    np.testing.assert_allclose(x.grad.data, 6 * X ** 2)


def test_grad_fn_name(interpreted):
    Cube = make_cube()
    y = Cube.apply(leaf())
    assert y.grad_fn.name() == "CubeBackward"
    assert "CubeBackward" in repr(y.grad_fn)
    assert "CubeBackward" in repr(y)


def test_apply_without_grad_records_nothing(interpreted):
    Cube = make_cube()
    y = Cube.apply(gj.tensor(X))
    assert not y.requires_grad and y.grad_fn is None
    np.testing.assert_allclose(y.data, X ** 3)
    with gj.no_grad():
        z = Cube.apply(leaf())
    assert not z.requires_grad and z.grad_fn is None


def test_forward_runs_without_recording(interpreted):
    seen = {}

    class Probe(Function):
        @staticmethod
        def forward(ctx, x):
            seen["enabled"] = gj.is_grad_enabled()
            h = x * 2
            seen["records"] = h.grad_fn is not None
            return h

        @staticmethod
        def backward(ctx, g):
            return g * 2

    x = leaf()
    Probe.apply(x).sum().backward()
    assert seen == {"enabled": False, "records": False}
    np.testing.assert_allclose(x.grad.data, 2.0)


def test_needs_input_grad_and_non_tensor_arguments(interpreted):
    seen = {}

    class Affine(Function):
        @staticmethod
        def forward(ctx, a, k, b, name):
            seen["forward"] = ctx.needs_input_grad
            ctx.k = k
            ctx.name = name
            ctx.save_for_backward(a, b)
            return a * k + b, a * b

        @staticmethod
        def backward(ctx, g1, g2):
            seen["backward"] = tuple(ctx.needs_input_grad)
            seen["attrs"] = (ctx.k, ctx.name)
            a, b = ctx.saved_tensors
            ga = g1 * ctx.k + g2 * b if ctx.needs_input_grad[0] else None
            gb = g1 + g2 * a if ctx.needs_input_grad[2] else None
            return ga, None, gb, None

    a = leaf([1.0, 2.0])
    b = gj.tensor(np.array([3.0, 4.0]))
    u, v = Affine.apply(a, 3.0, b, "lbl")
    assert u.requires_grad and v.requires_grad
    assert u.grad_fn is v.grad_fn
    np.testing.assert_allclose(u.data, [6.0, 10.0])
    (u.sum() + (v * v).sum()).backward()
    assert seen["forward"] == (True, False, False, False)
    assert seen["backward"] == (True, False, False, False)
    assert seen["attrs"] == (3.0, "lbl")
    np.testing.assert_allclose(a.grad.data, 3.0 + 2 * (a.data * b.data) * b.data)
    assert b.grad is None

    # both tensors requiring grad
    a, b = leaf([1.0, 2.0]), leaf([3.0, 4.0])
    u, v = Affine.apply(a, -2.0, b, "other")
    (u.sum() + (v * v).sum()).backward()
    assert seen["backward"] == (True, False, True, False)
    np.testing.assert_allclose(a.grad.data, -2.0 + 2 * (a.data * b.data) * b.data)
    np.testing.assert_allclose(b.grad.data, 1.0 + 2 * (a.data * b.data) * a.data)


def test_multiple_outputs_only_one_used(interpreted):
    class SinCos(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x.sin(), x.cos()

        @staticmethod
        def backward(ctx, gs, gc):
            (x,) = ctx.saved_tensors
            return gs * x.cos() - gc * x.sin()

    x = leaf()
    s, c = SinCos.apply(x)
    (c * 2).sum().backward()                     # the unused output's gradient is zeros
    np.testing.assert_allclose(x.grad.data, -2 * np.sin(X))
    x = leaf()
    s, c = SinCos.apply(x)
    (s * c).sum().backward()
    np.testing.assert_allclose(x.grad.data, np.cos(X) ** 2 - np.sin(X) ** 2)


def test_setup_context_style(interpreted):
    class Scale(Function):
        @staticmethod
        def forward(x, k):
            return x * k

        @staticmethod
        def setup_context(ctx, inputs, output):
            x, k = inputs
            ctx.k = k
            ctx.save_for_backward(x, output)

        @staticmethod
        def backward(ctx, g):
            x, out = ctx.saved_tensors
            assert out.shape == x.shape
            return g * ctx.k, None

    x = leaf()
    y = Scale.apply(x, 4.0)
    np.testing.assert_allclose(y.data, 4 * X)
    (y * y).sum().backward()
    np.testing.assert_allclose(x.grad.data, 2 * 16 * X)


def test_vjp_is_an_alias_of_backward(interpreted):
    class Twice(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def vjp(ctx, g):
            return g * 2

    x = leaf()
    Twice.apply(x).sum().backward()
    np.testing.assert_allclose(x.grad.data, 2.0)


def test_defining_backward_and_vjp_is_an_error():
    msg = ("Implementing both 'backward' and 'vjp' for a custom Function is not allowed. You "
           "should only implement one of them.")
    with pytest.raises((TypeError, RuntimeError), match=msg):
        class Both(Function):
            @staticmethod
            def forward(ctx, x):
                return x * 2

            @staticmethod
            def backward(ctx, g):
                return g

            @staticmethod
            def vjp(ctx, g):
                return g

        Both.apply(leaf()).sum().backward()


def test_wrong_number_of_gradients(interpreted):
    class Mul(Function):
        @staticmethod
        def forward(ctx, x, y):
            return x * y

        @staticmethod
        def backward(ctx, g):
            return g

    with pytest.raises(RuntimeError, match=r"function MulBackward returned an incorrect number "
                                           r"of gradients \(expected 2, got 1\)"):
        Mul.apply(leaf(), leaf()).sum().backward()


def test_wrong_gradient_shape_opaque(interpreted):
    class Bad(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return gj.tensor(np.ones(5))

    with pytest.raises(RuntimeError, match=r"Function BadBackward returned an invalid gradient at "
                                           r"index 0 - got \[5\] but expected shape compatible "
                                           r"with \[3\]"):
        Bad.apply(leaf()).sum().backward()


def test_wrong_gradient_shape_traced(interpreted):
    class BadT(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g.sum()            # a scalar for a (3,) input: torch rejects it

    with pytest.raises(RuntimeError, match=r"Function BadTBackward returned an invalid gradient "
                                           r"at index 0"):
        BadT.apply(leaf()).sum().backward()


# --------------------------------------------------------------------------------------
# mark_non_differentiable, set_materialize_grads
# --------------------------------------------------------------------------------------

def test_mark_non_differentiable(interpreted):
    received = {}

    class WithMask(Function):
        @staticmethod
        def forward(ctx, x):
            mask = (x * 0.0) + 1.0
            ctx.mark_non_differentiable(mask)
            return x * 2, mask

        @staticmethod
        def backward(ctx, g, g_mask):
            received["mask_grad_given"] = g_mask is not None
            return g * 2 + g_mask * 0.0

    x = leaf()
    y, mask = WithMask.apply(x)
    assert y.requires_grad
    assert not mask.requires_grad and mask.grad_fn is None
    np.testing.assert_allclose(mask.data, 1.0)
    (y * 3).sum().backward()
    assert received["mask_grad_given"]
    np.testing.assert_allclose(x.grad.data, 6.0)


def test_mark_non_differentiable_opaque_receives_zero_gradient(interpreted):
    received = {}

    class WithMaskNp(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.arr = np.array(x.data)
            mask = gj.tensor(np.ones_like(x.data))
            ctx.mark_non_differentiable(mask)
            return x * 2, mask

        @staticmethod
        def backward(ctx, g, g_mask):
            received["g_mask"] = None if g_mask is None else np.array(g_mask.data)
            return g * 2

    x = leaf()
    y, mask = WithMaskNp.apply(x)
    assert not mask.requires_grad
    y.sum().backward()
    np.testing.assert_array_equal(received["g_mask"], np.zeros(3))
    np.testing.assert_allclose(x.grad.data, 2.0)


def test_set_materialize_grads_false(interpreted):
    received = []

    class Pair(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.set_materialize_grads(False)
            return x * 2, x * 3

        @staticmethod
        def backward(ctx, g1, g2):
            received.append((g1 is None, g2 is None))
            res = None
            if g1 is not None:
                res = g1 * 2
            if g2 is not None:
                res = g2 * 3 if res is None else res + g2 * 3
            return res

    x = leaf()
    a, b = Pair.apply(x)
    a.sum().backward()
    np.testing.assert_allclose(x.grad.data, 2.0)
    assert received[-1] == (False, True)
    x = leaf()
    a, b = Pair.apply(x)
    (b * b).sum().backward()
    np.testing.assert_allclose(x.grad.data, 2 * 3 * X * 3)
    assert received[-1] == (True, False)


def test_set_materialize_grads_false_opaque(interpreted):
    received = []

    class PairNp(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.set_materialize_grads(False)
            ctx.scale = np.array([2.0, 3.0])          # an array on ctx: opaque backward
            return x * 2, x * 3

        @staticmethod
        def backward(ctx, g1, g2):
            received.append((g1 is None, g2 is None))
            out = np.zeros(3)
            if g1 is not None:
                out += ctx.scale[0] * g1.data
            if g2 is not None:
                out += ctx.scale[1] * g2.data
            return gj.tensor(out)

    x = leaf()
    a, b = PairNp.apply(x)
    b.sum().backward()
    assert received == [(True, False)]
    np.testing.assert_allclose(x.grad.data, 3.0)


def test_materialized_by_default(interpreted):
    received = []

    class PairM(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2, x * 3

        @staticmethod
        def backward(ctx, g1, g2):
            received.append((g1 is None, g2 is None))
            return g1 * 2 + g2 * 3

    x = leaf()
    a, b = PairM.apply(x)
    a.sum().backward()
    assert received == [(False, False)]
    np.testing.assert_allclose(x.grad.data, 2.0)


# --------------------------------------------------------------------------------------
# traced vs opaque backward, higher order, once_differentiable
# --------------------------------------------------------------------------------------

def test_traced_backward_is_differentiable_again(interpreted):
    Cube = make_cube()
    x = leaf()
    (g,) = A.grad((Cube.apply(x) * x.sin()).sum(), x, create_graph=True)
    s, c = np.sin(X), np.cos(X)
    np.testing.assert_allclose(g.data, 3 * X ** 2 * s + X ** 3 * c)
    assert g.requires_grad and g.grad_fn is not None
    (h,) = A.grad(g.sum(), x, create_graph=True)
    np.testing.assert_allclose(h.data, 6 * X * s + 6 * X ** 2 * c - X ** 3 * s)
    (t,) = A.grad(h.sum(), x)
    np.testing.assert_allclose(t.data, 6 * s + 18 * X * c - 9 * X ** 2 * s - X ** 3 * c)


def test_traced_backward_gradgradcheck(interpreted):
    Cube = make_cube()
    assert A.gradcheck(Cube.apply, (leaf(),))
    assert A.gradgradcheck(Cube.apply, (leaf(),))


def test_opaque_backward_correct_and_logged_once(interpreted, caplog):
    class NpSin(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.x = np.array(x.data)                        # an array on ctx
            return gj.tensor(np.sin(x.data))

        @staticmethod
        def backward(ctx, g):
            return gj.tensor(np.cos(ctx.x) * g.data)        # NumPy on raw data

    with caplog.at_level(logging.INFO, logger="gradjit"):
        for k in range(3):
            x = leaf(X + k)
            (NpSin.apply(x) * x).sum().backward()
            np.testing.assert_allclose(x.grad.data, np.cos(X + k) * (X + k) + np.sin(X + k))
    msgs = [r for r in caplog.records if r.name == "gradjit" and "NpSin" in r.getMessage()]
    assert len(msgs) == 1
    assert msgs[0].levelno >= logging.INFO
    assert "callback" in msgs[0].getMessage()


def test_opaque_backward_using_numpy_on_saved_tensors(interpreted, caplog):
    class NpExp(Function):
        @staticmethod
        def forward(ctx, x):
            y = gj.tensor(np.exp(x.data))
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, g):
            (y,) = ctx.saved_tensors
            return gj.tensor(np.asarray(y.data) * np.asarray(g.data))

    with caplog.at_level(logging.INFO, logger="gradjit"):
        x = leaf()
        ((NpExp.apply(x)) ** 2).sum().backward()
    np.testing.assert_allclose(x.grad.data, 2 * np.exp(2 * X))
    assert any("NpExp" in r.getMessage() for r in caplog.records if r.name == "gradjit")


def test_opaque_between_traced_ops_and_hooks(interpreted):
    class NpDouble(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.tag = object()
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return gj.tensor(2 * np.asarray(g.data))

    x = leaf()
    h = x.exp()
    y = NpDouble.apply(h).tanh()
    h.register_hook(lambda g: g * 0.5)
    y.sum().backward()
    t = np.tanh(2 * np.exp(X))
    np.testing.assert_allclose(x.grad.data, (1 - t ** 2) * 2 * 0.5 * np.exp(X))


def test_once_differentiable_first_order(interpreted):
    class SqOnce(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x ** 2

        @staticmethod
        @once_differentiable
        def backward(ctx, g):
            assert not gj.is_grad_enabled()
            (x,) = ctx.saved_tensors
            return 2 * x * g

    x = leaf()
    (SqOnce.apply(x) * 3).sum().backward()
    np.testing.assert_allclose(x.grad.data, 6 * X)
    assert A.function.once_differentiable is once_differentiable


def test_once_differentiable_double_backward_raises(interpreted):
    class SqOnce2(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x ** 2

        @staticmethod
        @once_differentiable
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return 2 * x * g

    x = leaf()
    loss = (SqOnce2.apply(x) * x).sum()
    (g,) = A.grad(loss, x, create_graph=True)
    np.testing.assert_allclose(g.data, 3 * X ** 2)       # first order is right
    with pytest.raises(Exception, match="trying to differentiate twice a function that was "
                                        "marked with @once_differentiable"):
        A.grad(g.sum(), x)


def test_custom_function_in_jit_grad():
    class Sq(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return 2 * x * g

    f = gj.grad(lambda a: (Sq.apply(a) * np.sin(a)).sum())
    for a in (np.array([0.3, 1.2, -0.7]), np.array([2.0, -1.0, 0.1])):
        np.testing.assert_allclose(f(a), 2 * a * np.sin(a) + a * a * np.cos(a), rtol=1e-12)
    # and differentiated again through its (traced) backward
    ff = gj.grad(lambda a: gj.grad(lambda b: (Sq.apply(b) * b).sum())(a).sum())
    a = np.array([0.3, 1.2, -0.7])
    np.testing.assert_allclose(ff(a), 6 * a, rtol=1e-12)


def test_custom_function_multi_io_in_jit_grad():
    class Lin(Function):
        @staticmethod
        def forward(ctx, w, x, scale):
            ctx.save_for_backward(w, x)
            ctx.scale = scale
            return (x @ w) * scale, w.sum()

        @staticmethod
        def backward(ctx, g, gs):
            w, x = ctx.saved_tensors
            gw = (x.T @ g) * ctx.scale + gs
            gx = (g @ w.T) * ctx.scale
            return gw, gx, None

    def loss(w, x):
        y, s = Lin.apply(w, x, 0.5)
        return (np.tanh(y) ** 2).sum() + s * s

    rng = np.random.default_rng(3)
    w, x = rng.normal(size=(3, 2)), rng.normal(size=(4, 3))
    gw, gx = gj.grad(loss, argnums=(0, 1))(w, x)
    t = np.tanh(0.5 * x @ w)
    gy = 2 * t * (1 - t ** 2)
    np.testing.assert_allclose(gw, 0.5 * x.T @ gy + 2 * w.sum(), rtol=1e-10)
    np.testing.assert_allclose(gx, 0.5 * gy @ w.T, rtol=1e-10)


def test_custom_function_compiled_tensor_mode_plan_reused():
    class Sq3(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return 2 * x * g

    before = None
    for step in range(3):
        if step == 1:
            before = gj.stats()
        x = leaf(X + step)
        (Sq3.apply(x.tanh()) * 2.0).sum().backward()
        t = np.tanh(X + step)
        np.testing.assert_allclose(x.grad.data, 4 * t * (1 - t ** 2), rtol=1e-12)
    after = gj.stats()
    assert after["compiles"] == before["compiles"] and after["disk_hits"] == before["disk_hits"]


def test_opaque_backward_compiled_segments():
    class NpCube(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.x = np.array(x.data)
            return gj.tensor(ctx.x ** 3)

        @staticmethod
        def backward(ctx, g):
            return gj.tensor(3 * ctx.x ** 2 * np.asarray(g.data))

    for k in range(2):
        x = leaf(X + k)
        y = NpCube.apply(x.sin()).exp()
        y.sum().backward()
        s = np.sin(X + k)
        np.testing.assert_allclose(x.grad.data, np.exp(s ** 3) * 3 * s ** 2 * np.cos(X + k),
                                   rtol=1e-12)


# --------------------------------------------------------------------------------------
# gradcheck on custom Functions
# --------------------------------------------------------------------------------------

def test_gradcheck_on_custom_function_multi_input(interpreted):
    class Bilinear(Function):
        @staticmethod
        def forward(ctx, a, b, k):
            ctx.save_for_backward(a, b)
            ctx.k = k
            return (a * b).sin() * k

        @staticmethod
        def backward(ctx, g):
            a, b = ctx.saved_tensors
            c = (a * b).cos() * ctx.k * g
            return c * b, c * a, None

    a, b = leaf([0.3, -0.4]), leaf([1.5, 0.7])
    assert A.gradcheck(lambda u, v: Bilinear.apply(u, v, 2.0), (a, b))
    assert A.gradgradcheck(lambda u, v: Bilinear.apply(u, v, 2.0), (a, b))


def test_gradcheck_catches_wrong_custom_backward(interpreted):
    class Wrong(Function):
        @staticmethod
        def forward(ctx, a, b):
            ctx.save_for_backward(a, b)
            return a * b

        @staticmethod
        def backward(ctx, g):
            a, b = ctx.saved_tensors
            return g * b, g * b                         # d/db should be g * a

    a, b = leaf([0.3, -0.4]), leaf([1.5, 0.7])
    with pytest.raises(A.GradcheckError, match="Jacobian mismatch for output 0 with respect to "
                                               "input 1"):
        A.gradcheck(Wrong.apply, (a, b))
    assert A.gradcheck(Wrong.apply, (a, b), raise_exception=False) is False


def test_gradcheck_on_opaque_custom_function(interpreted):
    class NpTanh(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.y = np.tanh(x.data)
            return gj.tensor(ctx.y)

        @staticmethod
        def backward(ctx, g):
            return gj.tensor((1 - ctx.y ** 2) * g.data)

    assert A.gradcheck(NpTanh.apply, (leaf(),))


def test_gradcheck_on_opaque_custom_function_wrong(interpreted):
    class NpTanhWrong(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.y = np.tanh(x.data)
            return gj.tensor(ctx.y)

        @staticmethod
        def backward(ctx, g):
            return gj.tensor((1 - ctx.y) * g.data)

    with pytest.raises(A.GradcheckError, match="Jacobian mismatch for output 0 with respect to "
                                               "input 0"):
        A.gradcheck(NpTanhWrong.apply, (leaf(),))


# --------------------------------------------------------------------------------------
# plan reuse must not mix contexts or inputs
# --------------------------------------------------------------------------------------

def test_ctx_constants_differ_between_calls(interpreted):
    class ScaleK(Function):
        @staticmethod
        def forward(ctx, x, k):
            ctx.k = k
            return x * k

        @staticmethod
        def backward(ctx, g):
            return g * ctx.k, None

    for k in (2.0, 5.0, 2.0, -1.5):
        x = leaf()
        ScaleK.apply(x, k).sum().backward()
        np.testing.assert_allclose(x.grad.data, k)


def test_two_classes_same_structure_are_different_plans(interpreted):
    def make(k):
        class Same(Function):
            @staticmethod
            def forward(ctx, x):
                return x * 1.0

            @staticmethod
            def backward(ctx, g):
                return g * k

        return Same

    for k in (2.0, 3.0):
        x = leaf()
        make(k).apply(x).sum().backward()
        np.testing.assert_allclose(x.grad.data, k)


def test_same_tensor_passed_twice(interpreted):
    class MulF(Function):
        @staticmethod
        def forward(ctx, a, b):
            ctx.save_for_backward(a, b)
            return a * b

        @staticmethod
        def backward(ctx, g):
            a, b = ctx.saved_tensors
            return g * b, g * a

    x = leaf()
    MulF.apply(x, x).sum().backward()
    np.testing.assert_allclose(x.grad.data, 2 * X)
    x = leaf()
    y = MulF.apply(x * 3, x)
    y.retain_grad()
    (y * y).sum().backward()
    np.testing.assert_allclose(y.grad.data, 2 * 3 * X ** 2)
    np.testing.assert_allclose(x.grad.data, 2 * 3 * X ** 2 * 6 * X)


def test_gradcheck_on_non_contiguous_inputs_and_extra_none_gradients(interpreted):
    # gradcheck once perturbed a copy of Fortran-ordered / transposed data (a zero
    # Jacobian: a correct function reported wrong); a backward returning more gradients
    # than inputs, the extra ones None, is accepted as torch does
    class Twice(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2, None

    fortran = gj.tensor(np.asfortranarray(np.arange(1.0, 7.0).reshape(2, 3)), requires_grad=True)
    transposed = gj.tensor(np.arange(1.0, 7.0).reshape(3, 2)).T.detach().requires_grad_()
    for x in (fortran, transposed):
        assert A.gradcheck(lambda a: a * a, (x,))
        assert A.gradcheck(Twice.apply, (x,))
        assert A.gradgradcheck(lambda a: a * a * a, (x,))
    (Twice.apply(fortran) * fortran).sum().backward()
    np.testing.assert_allclose(fortran.grad.data, 4 * fortran.data)



def test_ctx_list_attribute(interpreted):
    # a list on ctx once made the plan key unhashable (TypeError from the plan table)
    class ScaleList(Function):
        @staticmethod
        def forward(ctx, x, ks):
            ctx.ks = ks
            return x * 1.0

        @staticmethod
        def backward(ctx, g):
            return g * ctx.ks[0], None

    for k in (2.0, 2.0, 3.0):
        x = leaf()
        ScaleList.apply(x, [k, 0]).sum().backward()
        np.testing.assert_allclose(x.grad.data, np.full(3, k))


def test_ctx_lists_tuples_dicts_of_plain_values(interpreted, caplog):
    # dicts on ctx made the backward opaque; lists, tuples and dicts of plain values,
    # nested, are traced and part of the plan key by type and value (-0.0 is not 0.0)
    class Conf(Function):
        @staticmethod
        def forward(ctx, x, ks, opts):
            ctx.ks, ctx.opts = ks, opts
            return x * 1.0

        @staticmethod
        def backward(ctx, g):
            return g * ctx.ks[0] * ctx.opts["scale"][1][0], None, None

    for ks, opts, want in (([2.0, 0], {"scale": (1, [3.0])}, 6.0),
                           ([2.0, 0], {"scale": (1, [3.0])}, 6.0),
                           ([5.0, 0], {"scale": (1, [3.0])}, 15.0),
                           ((5.0, 0), {"scale": [1, (-1.0,)]}, -5.0),
                           ([5.0, 0], {"scale": (1, [0.0])}, 0.0),
                           ([5.0, 0], {"scale": (1, [-0.0])}, -0.0)):
        x = leaf()
        Conf.apply(x, ks, opts).sum().backward()
        np.testing.assert_array_equal(x.grad.data, np.full(3, want))
        assert np.all(np.signbit(x.grad.data) == np.signbit(want))
    assert "Conf" not in caplog.text   # (not logged as opaque: traced)


# --------------------------------------------------------------------------------------
# values a traced backward reads from outside ctx are guarded, as a transform's
# --------------------------------------------------------------------------------------

_OUTSIDE_SCALE = 1.0
_OUTSIDE_W = gj.tensor(np.ones(3))


def test_backward_reading_closure_and_global_sees_new_values(executor):
    # the traced backward once kept the first value it read forever (the plan is reused)
    global _OUTSIDE_SCALE
    box = [1.0]

    class Outside(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1.0

        @staticmethod
        def backward(ctx, g):
            return g * box[0] * _OUTSIDE_SCALE

    try:
        for b, s in ((1.0, 1.0), (2.0, 1.0), (2.0, 1.0), (2.0, -3.0), (7.0, -3.0)):
            box[0], _OUTSIDE_SCALE = b, s
            x = leaf()
            Outside.apply(x).sum().backward()
            np.testing.assert_allclose(x.grad.data, np.full(3, b * s))
    finally:
        _OUTSIDE_SCALE = 1.0


def test_backward_reading_class_attribute_and_outside_tensor(interpreted):
    global _OUTSIDE_W

    class Attr(Function):
        k = 2.0

        @staticmethod
        def forward(ctx, x):
            return x * 1.0

        @staticmethod
        def backward(ctx, g):
            return g * Attr.k * _OUTSIDE_W

    def grad():
        x = leaf()
        Attr.apply(x).sum().backward()
        return x.grad.data

    try:
        np.testing.assert_allclose(grad(), np.full(3, 2.0))
        Attr.k = 5.0
        np.testing.assert_allclose(grad(), np.full(3, 5.0))
        _OUTSIDE_W = gj.tensor(np.array([1.0, -1.0, 3.0]))   # another tensor bound there
        np.testing.assert_allclose(grad(), [5.0, -5.0, 15.0])
        _OUTSIDE_W.mul_(2.0)                                   # written in place
        np.testing.assert_allclose(grad(), [10.0, -10.0, 30.0])
    finally:
        _OUTSIDE_W = gj.tensor(np.ones(3))


def test_backward_reading_outside_value_double_backward(interpreted):
    # create_graph replays the same plan: it sees the new value too
    box = [1.0]

    class Sq(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * x * box[0]

    for b in (2.0, 3.0):
        box[0] = b
        x = leaf()
        (g,) = A.grad(Sq.apply(x).sum(), x, create_graph=True)
        np.testing.assert_allclose(g.data, b * X)
        (h,) = A.grad(g.sum(), x)
        np.testing.assert_allclose(h.data, np.full(3, b))


def _sin_with_backward_through(cos_sign):
    """sin as a Function whose backward applies another Function (cos, with a backward of
    the given sign: -1 is cos's derivative, +1 a wrong one): torch's custom double
    backward. The inner one takes a non-tensor argument too."""
    class CosK(Function):
        @staticmethod
        def forward(ctx, a, k):
            ctx.save_for_backward(a)
            ctx.k = k
            return a.cos() * k

        @staticmethod
        def backward(ctx, g):
            (a,) = ctx.saved_tensors
            return g * a.sin() * (cos_sign * ctx.k), None

    class Sin(Function):
        @staticmethod
        def forward(ctx, a):
            ctx.save_for_backward(a)
            return a.sin()

        @staticmethod
        def backward(ctx, g):
            (a,) = ctx.saved_tensors
            return g * CosK.apply(a, 2.0) * 0.5

    return Sin


def test_function_applied_in_backward_double_backward_uses_its_backward(interpreted):
    # the double backward once differentiated the inner Function's forward (cos), not its
    # backward, in tensor mode (gj.grad and torch use the backward)
    Wrong = _sin_with_backward_through(+1.0)
    for _ in range(2):   # (the second time from the plan table)
        x = leaf()
        (g,) = A.grad(Wrong.apply(x).sum(), x, create_graph=True)
        np.testing.assert_allclose(g.data, np.cos(X))
        (h,) = A.grad(g.sum(), x)
        np.testing.assert_allclose(h.data, np.sin(X))   # (what the wrong backward says)
    nested = gj.grad(lambda a: gj.grad(lambda b: Wrong.apply(b).sum())(a).sum())(X)
    np.testing.assert_allclose(nested, np.sin(X))
    assert not A.gradgradcheck(Wrong.apply, (leaf(),), raise_exception=False)
    Right = _sin_with_backward_through(-1.0)
    x = leaf()
    (g,) = A.grad(Right.apply(x).sum(), x, create_graph=True)
    (h,) = A.grad(g.sum(), x, create_graph=True)
    np.testing.assert_allclose(h.data, -np.sin(X))
    (t,) = A.grad(h.sum(), x)
    np.testing.assert_allclose(t.data, -np.cos(X))
    assert A.gradgradcheck(Right.apply, (leaf(),))


# A backward with side effects runs at every backward, on real tensors (torch's
# semantics); a trace cached in the plan ran it once and gave stale gradients.

_SEEN = []


def _remember(g):
    _SEEN.append(g)


@pytest.mark.parametrize("executor_name", ["numpy", None])
def test_backward_with_side_effects_runs_every_time(monkeypatch, caplog, executor_name):
    if executor_name is None:
        monkeypatch.delenv("GRADJIT_EXECUTOR", raising=False)
    else:
        monkeypatch.setenv("GRADJIT_EXECUTOR", executor_name)
    log, calls = [], [0]

    class Probe(Function):   # counts its calls in a closure list, logs its gradients
        @staticmethod
        def forward(ctx, x):
            return x * 1

        @staticmethod
        def backward(ctx, g):
            calls[0] += 1
            log.append(g)
            return g * calls[0]

    class Count(Function):   # a class attribute counter
        n = 0

        @staticmethod
        def forward(ctx, x):
            return x * 1

        @staticmethod
        def backward(ctx, g):
            Count.n += 1
            return g * Count.n

    class LogOnly(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, g):
            x, = ctx.saved_tensors
            log.append(g)
            return 2.0 * x * g

    with caplog.at_level(logging.INFO, logger="gradjit"):
        for F in (Probe, Count):
            for step in range(1, 4):
                x = leaf([0.1, 0.5])
                (F.apply(x) * 2.0).sum().backward()
                np.testing.assert_array_equal(x.grad.data, [2.0 * step] * 2)   # torch: 2, 4, 6
        assert calls[0] == 3 and Count.n == 3
        assert len(log) == 3 and all(type(t) is gj.Tensor for t in log)
        np.testing.assert_array_equal(np.stack([t.data for t in log]), 2.0)
        log.clear()
        for step in range(3):
            x = leaf([0.1, 0.5])
            (LogOnly.apply(x) * 3.0).sum().backward()
            np.testing.assert_allclose(x.grad.data, [0.6, 3.0])
        assert len(log) == 3 and all(type(t) is gj.Tensor for t in log)
    assert "side effects" in caplog.text


def test_backward_changing_state_through_a_helper_is_found_by_its_guard(interpreted):
    # the code scan does not see into _remember; the guard recorded before the trace
    # sees the list it changed: later backwards run as Python, once each, on tensors
    class Helper(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1

        @staticmethod
        def backward(ctx, g):
            _remember(g)
            return g * 3.0

    _SEEN.clear()
    for step in range(3):
        x = leaf([0.1, 0.5])
        (Helper.apply(x) * 2.0).sum().backward()
        np.testing.assert_array_equal(x.grad.data, [6.0, 6.0])
    # (the first backward's trace ran it once with a tracer: its effect is done)
    assert len(_SEEN) == 4 and all(type(t) is gj.Tensor for t in _SEEN[1:])
    _SEEN.clear()


def test_backward_reading_outside_state_is_still_traced(interpreted, caplog):
    scale = [2.0]

    class Scaled(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1

        @staticmethod
        def backward(ctx, g):
            h = g * scale[0]
            return h

    with caplog.at_level(logging.INFO, logger="gradjit"):
        for s in (2.0, 2.0, 5.0):
            scale[0] = s
            x = leaf([0.1, 0.5])
            Scaled.apply(x).sum().backward()
            np.testing.assert_array_equal(x.grad.data, [s, s])
    assert "Scaled" not in caplog.text or "side effects" not in caplog.text
