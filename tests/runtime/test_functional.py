"""``gj.autograd.functional`` (torch semantics) and the jit Jacobian transforms.

``vjp``, ``jvp``, ``jacobian``, ``hessian``, ``hvp``, ``vhp`` run on the
reference interpreter and are checked against analytic derivatives;
``gj.jacrev``, ``gj.jacfwd``, ``gj.hessian`` and ``gj.jvp`` compile (about
seven graphs) and are checked against analytic derivatives and central
differences of compiled gradients.
"""
from __future__ import annotations

import numpy as np
import pytest

import gradjit as gj

F = gj.autograd.functional
X = np.array([0.3, -0.8, 1.4])


def T(values):
    return gj.tensor(np.array(values, dtype=np.float64))


def arr(t):
    return np.asarray(t.data)


# --------------------------------------------------------------------------------------
# vjp / jvp
# --------------------------------------------------------------------------------------

def test_vjp_single(interpreted):
    v = np.array([1.0, -2.0, 0.5])
    out, g = F.vjp(lambda a: a.exp() * a, T(X), T(v))
    np.testing.assert_allclose(arr(out), np.exp(X) * X)
    np.testing.assert_allclose(arr(g), np.exp(X) * (1 + X) * v)
    assert out.grad_fn is None and g.grad_fn is None


def test_vjp_scalar_output_default_v(interpreted):
    out, g = F.vjp(lambda a: (a * a).sum(), T(X))
    np.testing.assert_allclose(arr(out), (X * X).sum())
    np.testing.assert_allclose(arr(g), 2 * X)


def test_vjp_v_none_needs_single_element_output(interpreted):
    with pytest.raises(RuntimeError, match="The vector v can only be None if the"):
        F.vjp(lambda a: a * 2, T(X))


def test_vjp_tuple_inputs_and_outputs(interpreted):
    a, b = T([1.0, 2.0]), T([3.0, -1.0])
    va, vb = T([1.0, 1.0]), T([2.0, -1.0])
    outs, (ga, gb) = F.vjp(lambda p, q: (p * q, p.sin()), (a, b), (va, vb))
    assert isinstance(outs, tuple) and len(outs) == 2
    np.testing.assert_allclose(arr(ga), arr(b) * arr(va) + np.cos(arr(a)) * arr(vb))
    np.testing.assert_allclose(arr(gb), arr(a) * arr(va))


def test_vjp_strict(interpreted):
    a, b = T([1.0, 2.0]), T([3.0, 4.0])
    _, (ga, gb) = F.vjp(lambda p, q: (p * 2).sum(), (a, b))
    np.testing.assert_array_equal(arr(gb), 0.0)                  # not strict: zeros
    with pytest.raises(RuntimeError, match=r"The output of the user-provided function is "
                                           r"independent of input 1\. This is not allowed in "
                                           r"strict mode\."):
        F.vjp(lambda p, q: (p * 2).sum(), (a, b), strict=True)


def test_vjp_shape_mismatch(interpreted):
    # torch: "v has invalid size: should be ... but got ..."
    with pytest.raises(RuntimeError, match=r"v\[0\] has a shape of|v has invalid size"):
        F.vjp(lambda a: a * 2, T(X), T([1.0, 2.0]))
    with pytest.raises(RuntimeError, match=r"v\[0\] has a shape of|v has invalid size"):
        F.jvp(lambda a: a * 2, T(X), T([1.0, 2.0]))


def test_jvp(interpreted):
    v = np.array([1.0, 0.5, -2.0])
    out, jv = F.jvp(lambda a: a.sin() * a, T(X), T(v))
    np.testing.assert_allclose(arr(out), np.sin(X) * X)
    np.testing.assert_allclose(arr(jv), (np.cos(X) * X + np.sin(X)) * v)


def test_jvp_matrix_and_tuple_inputs(interpreted, rng):
    W, x = rng.normal(size=(3, 4)), rng.normal(size=(4,))
    dW, dx = rng.normal(size=(3, 4)), rng.normal(size=(4,))
    out, jv = F.jvp(lambda w, z: (w @ z).tanh(), (T(W), T(x)), (T(dW), T(dx)))
    t = np.tanh(W @ x)
    np.testing.assert_allclose(arr(jv), (1 - t ** 2) * (dW @ x + W @ dx), rtol=1e-12)


def test_inputs_are_not_modified(interpreted):
    x = gj.tensor(X, requires_grad=True)
    F.jacobian(lambda a: a ** 2, x)
    F.vjp(lambda a: (a ** 2).sum(), x)
    F.hessian(lambda a: (a ** 3).sum(), x)
    assert x.grad is None and x.requires_grad and x.is_leaf
    c = T(X)
    F.jacobian(lambda a: a ** 2, c)
    assert not c.requires_grad and c.grad is None


def test_non_tensor_inputs_rejected(interpreted):
    with pytest.raises(TypeError, match="must be either a Tensor or a tuple of Tensors"):
        F.jacobian(lambda a: a, X)
    with pytest.raises(TypeError, match="must be either a Tensor or a tuple of Tensors"):
        F.vjp(lambda a: 3.0, T(X))


# --------------------------------------------------------------------------------------
# jacobian
# --------------------------------------------------------------------------------------

def test_jacobian_single(interpreted):
    J = F.jacobian(lambda a: a.exp() * a, T(X))
    assert isinstance(J, gj.Tensor) and J.shape == (3, 3)
    np.testing.assert_allclose(arr(J), np.diag(np.exp(X) * (1 + X)))


def test_jacobian_matrix_shapes(interpreted, rng):
    W, x = rng.normal(size=(2, 3)), rng.normal(size=(3,))
    J = F.jacobian(lambda w: (w @ T(x)).sin(), T(W))
    assert J.shape == (2, 2, 3)
    c = np.cos(W @ x)
    np.testing.assert_allclose(arr(J), np.einsum("ik,l->ikl", np.diag(c), x), rtol=1e-12)


def test_jacobian_tuple_inputs_and_outputs(interpreted):
    a, b = T([1.0, 2.0, 3.0]), T([2.0, 0.5, -1.0])
    (Jpa, Jpb), (Jsa, Jsb) = F.jacobian(lambda p, q: (p * q, (p * p).sum()), (a, b))
    np.testing.assert_allclose(arr(Jpa), np.diag(arr(b)))
    np.testing.assert_allclose(arr(Jpb), np.diag(arr(a)))
    assert Jsa.shape == (3,) and Jsb.shape == (3,)
    np.testing.assert_allclose(arr(Jsa), 2 * arr(a))
    np.testing.assert_array_equal(arr(Jsb), 0.0)
    # tuple inputs, single output / single input, tuple outputs
    Ja, Jb = F.jacobian(lambda p, q: p * q, (a, b))
    np.testing.assert_allclose(arr(Ja), np.diag(arr(b)))
    J1, J2 = F.jacobian(lambda p: (p * 2, p.sum()), a)
    np.testing.assert_allclose(arr(J1), 2 * np.eye(3))
    np.testing.assert_allclose(arr(J2), np.ones(3))


def test_jacobian_vectorize_equals_loop(interpreted, rng):
    W, x = rng.normal(size=(3, 2)), rng.normal(size=(4, 3))

    def f(w, z):
        h = (z @ w).tanh()
        return h * h, (h.sum() * w).sin()

    ins = (T(W), T(x))
    loop = F.jacobian(f, ins)
    vec = F.jacobian(f, ins, vectorize=True)
    for row_l, row_v in zip(loop, vec):
        for a, b in zip(row_l, row_v):
            assert a.shape == b.shape
            np.testing.assert_allclose(arr(a), arr(b), rtol=1e-12, atol=1e-14)


def test_jacobian_create_graph_differentiable(interpreted):
    x = gj.tensor(X, requires_grad=True)
    J = F.jacobian(lambda a: a ** 3, x, create_graph=True)
    assert J.requires_grad and J.grad_fn is not None
    np.testing.assert_allclose(arr(J), np.diag(3 * X ** 2))
    (g,) = gj.autograd.grad(J.sum(), x)
    np.testing.assert_allclose(arr(g), 6 * X)
    J0 = F.jacobian(lambda a: a ** 3, gj.tensor(X, requires_grad=True))
    assert J0.grad_fn is None and not J0.requires_grad


def test_jacobian_strict_independent_output(interpreted):
    a, b = T([1.0, 2.0]), T([3.0, 4.0])
    (Ja, Jb) = F.jacobian(lambda p, q: p * 2, (a, b))
    np.testing.assert_array_equal(arr(Jb), 0.0)
    with pytest.raises(RuntimeError, match=r"Output 0 of the user-provided function is "
                                           r"independent of input 1\. This is not allowed in "
                                           r"strict mode\."):
        F.jacobian(lambda p, q: p * 2, (a, b), strict=True)


def test_jacobian_strict_message_mentions_strict_mode(interpreted):
    a, b = T([1.0, 2.0]), T([3.0, 4.0])
    with pytest.raises(RuntimeError, match=r"independent of input 1.*strict mode"):
        F.jacobian(lambda p, q: p * 2, (a, b), strict=True)


def test_jacobian_bad_strategy(interpreted):
    with pytest.raises(ValueError, match="Expected strategy to be either"):
        F.jacobian(lambda a: a, T(X), strategy="sideways")


# --------------------------------------------------------------------------------------
# hessian / hvp / vhp
# --------------------------------------------------------------------------------------

def _quartic(a):
    return (a ** 4).sum() + (a.sin() * a).sum()


def _quartic_hessian(x):
    return np.diag(12 * x ** 2 + 2 * np.cos(x) - x * np.sin(x))


def test_hessian(interpreted):
    H = F.hessian(_quartic, T(X))
    assert H.shape == (3, 3)
    np.testing.assert_allclose(arr(H), _quartic_hessian(X), rtol=1e-12)
    Hv = F.hessian(_quartic, T(X), vectorize=True)
    np.testing.assert_allclose(arr(Hv), arr(H), rtol=1e-12)


def test_hessian_non_diagonal_and_tuple_inputs(interpreted):
    a, b = T([0.5, -1.0]), T([2.0, 0.3])

    def f(p, q):
        return (p * q.exp()).sum() + (p * p).sum() * q.sum()

    (Haa, Hab), (Hba, Hbb) = F.hessian(f, (a, b))
    pa, qb = arr(a), arr(b)
    np.testing.assert_allclose(arr(Haa), 2 * qb.sum() * np.eye(2))
    np.testing.assert_allclose(arr(Hab), np.diag(np.exp(qb)) + 2 * pa[:, None] * np.ones(2))
    np.testing.assert_allclose(arr(Hba), arr(Hab).T)
    np.testing.assert_allclose(arr(Hbb), np.diag(pa * np.exp(qb)))


def test_hessian_of_matrix_argument(interpreted, rng):
    W, x = rng.normal(size=(2, 3)), rng.normal(size=(3,))
    H = F.hessian(lambda w: ((w @ T(x)).sin()).sum(), T(W))
    assert H.shape == (2, 3, 2, 3)
    s = np.sin(W @ x)
    expected = np.einsum("ik,l,m->ilkm", np.diag(-s), x, x)
    np.testing.assert_allclose(arr(H), expected, rtol=1e-12, atol=1e-14)


def test_hessian_requires_scalar_function(interpreted):
    with pytest.raises(RuntimeError, match="should contain a single element"):
        F.hessian(lambda a: a * a, T(X))


def test_hvp_and_vhp(interpreted):
    v = np.array([1.0, -0.5, 2.0])
    val, hv = F.hvp(_quartic, T(X), T(v))
    np.testing.assert_allclose(arr(val), (X ** 4).sum() + (np.sin(X) * X).sum())
    np.testing.assert_allclose(arr(hv), _quartic_hessian(X) @ v, rtol=1e-12)
    val2, vh = F.vhp(_quartic, T(X), T(v))
    np.testing.assert_allclose(arr(vh), v @ _quartic_hessian(X), rtol=1e-12)


def test_hvp_tuple_inputs_vs_hessian(interpreted):
    a, b = T([0.5, -1.0]), T([2.0, 0.3])
    va, vb = T([1.0, 2.0]), T([-1.0, 0.5])

    def f(p, q):
        return (p * q.exp()).sum() + (p * p).sum() * q.sum()

    (Haa, Hab), (Hba, Hbb) = F.hessian(f, (a, b))
    _, (ha, hb) = F.hvp(f, (a, b), (va, vb))
    H = np.block([[arr(Haa), arr(Hab)], [arr(Hba), arr(Hbb)]])
    hv = H @ np.concatenate([arr(va), arr(vb)])
    np.testing.assert_allclose(np.concatenate([arr(ha), arr(hb)]), hv, rtol=1e-12)
    _, (wa, wb) = F.vhp(f, (a, b), (va, vb))
    np.testing.assert_allclose(np.concatenate([arr(wa), arr(wb)]), hv, rtol=1e-12)


@pytest.mark.parametrize("name", ["hvp", "vhp", "hessian"])
def test_second_order_strict_refuses_a_linear_function(interpreted, name):
    # torch: the jacobian of a linear function is independent of the input; hvp / vhp
    # returned zeros in strict mode
    op = getattr(F, name)
    msg = (r"While computing the hessian, found that the jacobian of the user-provided "
           r"function with respect to input {} is independent of the input\. This is not "
           r"allowed in strict mode\.")
    x, v = T(X), T([1.0, -0.5, 2.0])
    args = (x,) if name == "hessian" else (x, v)
    with pytest.raises(RuntimeError, match=msg.format(0)):
        op(lambda a: (a * 2).sum(), *args, strict=True)
    res = op(lambda a: (a * 2).sum(), *args)   # not strict: zeros
    np.testing.assert_array_equal(arr(res if name == "hessian" else res[1]), 0.0)
    pair = ((x, x),) if name == "hessian" else ((x, x), (v, v))
    with pytest.raises(RuntimeError, match=msg.format(1)):   # only the second is linear
        op(lambda a, b: (a * a).sum() + (b * 2).sum(), *pair, strict=True)
    op(lambda a, b: (a * a).sum() * (b * b).sum(), *pair, strict=True)   # both depend: fine


def test_hvp_create_graph(interpreted):
    x = gj.tensor(X, requires_grad=True)
    v = T([1.0, 1.0, 1.0])
    _, hv = F.hvp(lambda a: (a ** 4).sum(), x, v, create_graph=True)
    np.testing.assert_allclose(arr(hv), 12 * X ** 2)
    (g,) = gj.autograd.grad(hv.sum(), x)
    np.testing.assert_allclose(arr(g), 24 * X)


# --------------------------------------------------------------------------------------
# jit transforms: gj.jacrev, gj.jacfwd, gj.hessian, gj.jvp (compiled)
# --------------------------------------------------------------------------------------

def _tanh_layer(W, x):
    return np.tanh(W @ x)


def _mlp_loss(W1, W2, X_, Y_):
    return ((np.tanh(X_ @ W1) @ W2 - Y_) ** 2).mean()


@pytest.fixture(scope="module")
def layer_data():
    r = np.random.default_rng(7)
    return r.normal(size=(3, 4)), r.normal(size=(4,))


def test_jacrev_matrix_argument(layer_data):
    W, x = layer_data
    J = gj.jacrev(_tanh_layer)(W, x)
    t = np.tanh(W @ x)
    assert J.shape == (3, 3, 4)
    np.testing.assert_allclose(J, np.einsum("ik,l->ikl", np.diag(1 - t ** 2), x), atol=1e-14)
    # new values, same signature: same compiled code, right values
    before = gj.stats()["compiles"]
    J2 = gj.jacrev(_tanh_layer)
    W2 = W * 0.5
    t2 = np.tanh(W2 @ x)
    np.testing.assert_allclose(J2(W2, x), np.einsum("ik,l->ikl", np.diag(1 - t2 ** 2), x),
                               atol=1e-14)
    assert gj.stats()["compiles"] - before <= 1       # a new transform object may compile once


def test_jacfwd_equals_jacrev_and_analytic(layer_data):
    W, x = layer_data
    Jf = gj.jacfwd(_tanh_layer)(W, x)
    t = np.tanh(W @ x)
    np.testing.assert_allclose(Jf, np.einsum("ik,l->ikl", np.diag(1 - t ** 2), x), atol=1e-14)


def test_jacrev_several_argnums(layer_data):
    W, x = layer_data
    JW, Jx = gj.jacrev(_tanh_layer, argnums=(0, 1))(W, x)
    t = np.tanh(W @ x)
    assert JW.shape == (3, 3, 4) and Jx.shape == (3, 4)
    np.testing.assert_allclose(Jx, (1 - t ** 2)[:, None] * W, atol=1e-14)


@pytest.mark.slow
def test_hessian_of_mlp_loss_vs_finite_differences_of_grad():
    r = np.random.default_rng(11)
    W1, W2 = r.normal(size=(3, 4)), r.normal(size=(4, 2))
    X_, Y_ = r.normal(size=(5, 3)), r.normal(size=(5, 2))
    H = gj.hessian(_mlp_loss)(W1, W2, X_, Y_)
    assert H.shape == (3, 4, 3, 4)
    g = gj.grad(_mlp_loss)
    eps = 1e-6
    Hfd = np.zeros_like(H)
    for idx in np.ndindex(3, 4):
        d = np.zeros((3, 4))
        d[idx] = eps
        Hfd[(slice(None), slice(None)) + idx] = (g(W1 + d, W2, X_, Y_)
                                                 - g(W1 - d, W2, X_, Y_)) / (2 * eps)
    np.testing.assert_allclose(H, Hfd, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(H.reshape(12, 12), H.reshape(12, 12).T, atol=1e-12)  # symmetric
    # reverse-over-reverse agrees
    Hr = gj.jacrev(gj.grad(_mlp_loss))(W1, W2, X_, Y_)
    np.testing.assert_allclose(Hr, H, rtol=1e-10, atol=1e-12)


def test_jit_jvp(layer_data):
    W, x = layer_data
    dW = np.ones_like(W) * 0.1
    dx = np.linspace(-1, 1, 4)
    out, jv = gj.jvp(_tanh_layer, (W, x), (dW, dx))
    t = np.tanh(W @ x)
    np.testing.assert_allclose(out, t, rtol=1e-12)
    np.testing.assert_allclose(jv, (1 - t ** 2) * (dW @ x + W @ dx), rtol=1e-12)
    # vs finite differences of the function
    eps = 1e-6
    fd = (np.tanh((W + eps * dW) @ (x + eps * dx)) - np.tanh((W - eps * dW) @ (x - eps * dx)))
    np.testing.assert_allclose(jv, fd / (2 * eps), rtol=1e-6, atol=1e-9)
    # cached per function: a second call compiles nothing
    before = gj.stats()
    gj.jvp(_tanh_layer, (W * 2, x), (dW, dx))
    assert gj.stats()["compiles"] == before["compiles"]
    assert gj.stats()["disk_hits"] == before["disk_hits"]


def test_jvp_primals_tangents_count():
    with pytest.raises(ValueError):
        gj.jvp(_tanh_layer, (np.ones((2, 2)), np.ones(2)), (np.ones((2, 2)),))


# --------------------------------------------------------------------------------------
# gradcheck / gradgradcheck
# --------------------------------------------------------------------------------------

def _leaf(values):
    return gj.tensor(np.array(values, dtype=np.float64), requires_grad=True)


def test_gradcheck_passes_on_correct_functions(interpreted):
    A = gj.autograd
    a, b = _leaf([0.3, -0.7, 1.1]), _leaf([[0.5], [1.5], [-0.2]])
    assert A.gradcheck(lambda p: (p.exp() * p.sin()).sum(), (a,))
    assert A.gradcheck(lambda p, q: ((p * q).tanh(), (p @ q).sin(), p / (q * q + 1.0)), (a, b))
    assert A.gradcheck(lambda p: p ** 3, a)                  # a bare tensor for inputs
    # inputs that do not require grad are left alone
    c = gj.tensor(np.array([2.0, 3.0, 4.0]))
    assert A.gradcheck(lambda p, k: p * k, (a, c))


def test_gradgradcheck_passes_on_correct_functions(interpreted):
    A = gj.autograd
    a, b = _leaf([0.3, -0.7]), _leaf([1.2, 0.4])
    assert A.gradgradcheck(lambda p: (p.exp() * p.sin()), (a,))
    assert A.gradgradcheck(lambda p, q: ((p * q).tanh(), (p * p) / (q * q + 1.0)), (a, b))


def test_gradcheck_error_names_output_and_input(interpreted):
    A = gj.autograd
    assert issubclass(A.GradcheckError, RuntimeError)

    class HalfWrong(gj.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            ctx.save_for_backward(a, b)
            return a + b, a * b

        @staticmethod
        def backward(ctx, g1, g2):
            a, b = ctx.saved_tensors
            return g1 + g2 * b, g1 + g2 * b * 2.0            # d(a*b)/db is wrong

    a, b = _leaf([0.3, -0.7]), _leaf([1.2, 0.4])
    with pytest.raises(A.GradcheckError, match="Jacobian mismatch for output 1 with respect to "
                                               "input 1"):
        A.gradcheck(HalfWrong.apply, (a, b))
    assert A.gradcheck(HalfWrong.apply, (a, b), raise_exception=False) is False


def test_gradgradcheck_catches_wrong_double_backward(interpreted):
    A = gj.autograd

    class CubeConstSaved(gj.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            x2 = gj.tensor(x.data * x.data)                   # saved as a constant
            ctx.save_for_backward(x2)
            return x ** 3

        @staticmethod
        def backward(ctx, g):
            (x2,) = ctx.saved_tensors
            return 3 * x2 * g                                 # right value, wrong derivative

    x = _leaf([0.3, -0.7])
    assert A.gradcheck(CubeConstSaved.apply, (x,))
    with pytest.raises(A.GradcheckError, match="Jacobian mismatch"):
        A.gradgradcheck(CubeConstSaved.apply, (x,))
    assert A.gradgradcheck(CubeConstSaved.apply, (x,), raise_exception=False) is False


def test_gradcheck_float32_warns(interpreted):
    A = gj.autograd
    x = gj.tensor(np.array([0.3, -0.7], dtype=np.float32), requires_grad=True)
    with pytest.warns(UserWarning, match="Input #0 requires gradient and is not a double "
                                         "precision floating point"):
        A.gradcheck(lambda p: p * 2, (x,), eps=1e-3, atol=1e-2, raise_exception=False)


def test_gradcheck_needs_an_input_requiring_grad(interpreted):
    with pytest.raises(ValueError, match="gradcheck expects at least one input tensor to require "
                                         "gradient"):
        gj.autograd.gradcheck(lambda p: p * 2, (gj.tensor(X),))
