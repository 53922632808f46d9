"""Higher-order derivatives: ``create_graph=True`` in tensor mode and nested ``gj.grad``.

Checked against analytic derivatives and against central differences of
first-order gradients. Tensor-mode values run on the reference interpreter
(``create_graph`` replays the backward through Tensor ops); the nested
``gj.grad`` tests compile (a handful of graphs).
"""
from __future__ import annotations

import numpy as np
import pytest

import gradjit as gj

A = gj.autograd
X = np.array([0.3, -0.8, 1.4])


def leaf(values=X):
    return gj.tensor(np.array(values, dtype=np.float64), requires_grad=True)


# --------------------------------------------------------------------------------------
# tensor mode
# --------------------------------------------------------------------------------------

def test_create_graph_gradients_carry_history(interpreted):
    x = leaf()
    (g,) = A.grad((x ** 4).sum(), x, create_graph=True)
    assert isinstance(g, gj.Tensor)
    assert g.requires_grad and g.grad_fn is not None and not g.is_leaf
    (g2,) = A.grad((x ** 4).sum(), x)             # without create_graph: plain
    assert g2.grad_fn is None and not g2.requires_grad


@pytest.mark.parametrize("fn,derivs", [
    (lambda x: x ** 4,
     [lambda x: 4 * x ** 3, lambda x: 12 * x ** 2, lambda x: 24 * x]),
    (lambda x: x.exp() * x.sin(),
     [lambda x: np.exp(x) * (np.sin(x) + np.cos(x)), lambda x: 2 * np.exp(x) * np.cos(x),
      lambda x: 2 * np.exp(x) * (np.cos(x) - np.sin(x))]),
    (lambda x: (x * 2).tanh(),
     [lambda x: 2 * (1 - np.tanh(2 * x) ** 2),
      lambda x: -8 * np.tanh(2 * x) * (1 - np.tanh(2 * x) ** 2),
      lambda x: -16 * (1 - np.tanh(2 * x) ** 2) * (1 - 3 * np.tanh(2 * x) ** 2)]),
    (lambda x: 1.0 / (x * x + 1.0),
     [lambda x: -2 * x / (x * x + 1) ** 2, lambda x: (6 * x * x - 2) / (x * x + 1) ** 3,
      lambda x: 24 * x * (1 - x * x) / (x * x + 1) ** 4]),
], ids=["pow4", "exp_sin", "tanh", "rational"])
def test_first_second_third_order(interpreted, fn, derivs):
    x = leaf()
    y = fn(x).sum()
    out = y
    for k, d in enumerate(derivs):
        last = k == len(derivs) - 1
        (out,) = A.grad(out.sum() if k else out, x, create_graph=not last)
        np.testing.assert_allclose(out.data, d(X), rtol=1e-10, atol=1e-12)
        assert out.requires_grad == (not last)


def test_fourth_order(interpreted):
    x = leaf()
    g = (x ** 5).sum()
    for _ in range(4):
        (g,) = A.grad(g.sum(), x, create_graph=True)
    np.testing.assert_allclose(g.data, 120 * X, rtol=1e-12)


def test_backward_create_graph_then_grad_of_dot_grad(interpreted):
    x = leaf()
    (x.exp() * x.sin()).sum().backward(create_graph=True)
    assert x.grad.grad_fn is not None
    np.testing.assert_allclose(x.grad.data, np.exp(X) * (np.sin(X) + np.cos(X)))
    (h,) = A.grad(x.grad.sum(), x)
    np.testing.assert_allclose(h.data, 2 * np.exp(X) * np.cos(X))


def test_backward_create_graph_twice_gives_second_derivative(interpreted):
    x = leaf()
    (x ** 3).sum().backward(create_graph=True)
    g = x.grad
    x.grad = None
    g.sum().backward()
    np.testing.assert_allclose(x.grad.data, 6 * X)


def test_create_graph_retains_graph_by_default(interpreted):
    x = leaf()
    y = (x ** 3).sum()
    (g,) = A.grad(y, x, create_graph=True)
    (g_again,) = A.grad(y, x)                       # not freed by the first call
    np.testing.assert_allclose(g_again.data, g.data)


def test_mixed_partials(interpreted):
    x, y = leaf([0.5, 1.5]), leaf([2.0, -1.0])
    f = (x * x * y.sin()).sum()
    gx, gy = A.grad(f, [x, y], create_graph=True)
    np.testing.assert_allclose(gx.data, 2 * x.data * np.sin(y.data))
    (dxy,) = A.grad(gx.sum(), y)                   # d^2 f / dx dy
    np.testing.assert_allclose(dxy.data, 2 * x.data * np.cos(y.data))
    (dyx,) = A.grad(gy.sum(), x)
    np.testing.assert_allclose(dyx.data, 2 * x.data * np.cos(y.data))


def test_gradient_wrt_grad_outputs(interpreted):
    x = leaf()
    v = leaf([1.0, -2.0, 0.5])
    (g,) = A.grad(x ** 2, x, grad_outputs=v, create_graph=True)
    np.testing.assert_allclose(g.data, 2 * X * v.data)
    gx, gv = A.grad(g.sum(), [x, v])
    np.testing.assert_allclose(gv.data, 2 * X)
    np.testing.assert_allclose(gx.data, 2 * v.data)


def test_matmul_broadcast_second_order(interpreted, rng):
    W = leaf(rng.normal(size=(3, 2)))
    b = leaf(rng.normal(size=(2,)))
    x = gj.tensor(rng.normal(size=(4, 3)))
    loss = ((x @ W + b) ** 3).sum()
    gW, gb = A.grad(loss, [W, b], create_graph=True)
    z = x.data @ W.data + b.data
    np.testing.assert_allclose(gb.data, (3 * z ** 2).sum(0))
    (hb,) = A.grad(gb.sum(), b)
    np.testing.assert_allclose(hb.data, (6 * z).sum(0))


def _mlp_loss(w1, w2, x, y):
    return (((x @ w1).tanh() @ w2 - y) ** 2).mean()


def test_tanh_mlp_hessian_vector_product_vs_finite_differences(interpreted, rng):
    x, y = gj.tensor(rng.normal(size=(6, 3))), gj.tensor(rng.normal(size=(6, 2)))
    W1, W2 = rng.normal(size=(3, 4)), rng.normal(size=(4, 2))
    V1, V2 = rng.normal(size=(3, 4)), rng.normal(size=(4, 2))

    def grads(a, b, create_graph=False):
        w1, w2 = leaf(a), leaf(b)
        g = A.grad(_mlp_loss(w1, w2, x, y), [w1, w2], create_graph=create_graph)
        return w1, w2, g

    w1, w2, (g1, g2) = grads(W1, W2, create_graph=True)
    hv1, hv2 = A.grad((g1 * gj.tensor(V1)).sum() + (g2 * gj.tensor(V2)).sum(), [w1, w2])
    eps = 1e-6
    _, _, (p1, p2) = grads(W1 + eps * V1, W2 + eps * V2)
    _, _, (m1, m2) = grads(W1 - eps * V1, W2 - eps * V2)
    np.testing.assert_allclose(hv1.data, (p1.data - m1.data) / (2 * eps), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(hv2.data, (p2.data - m2.data) / (2 * eps), rtol=1e-5, atol=1e-7)


def test_second_order_compiled_tensor_mode(rng):
    # create_graph=True from a compiled first-order plan (the plan is compiled, the replay
    # is eager) agrees with the analytic second derivative.
    x = leaf(rng.normal(size=(5,)))
    (g,) = A.grad((x.exp() * x.sin()).sum(), x, create_graph=True)
    (h,) = A.grad(g.sum(), x)
    xd = x.data
    np.testing.assert_allclose(h.data, 2 * np.exp(xd) * np.cos(xd), rtol=1e-12)


# --------------------------------------------------------------------------------------
# jit mode: gj.grad of gj.grad
# --------------------------------------------------------------------------------------

def test_jit_grad_of_grad_third_order():
    f = lambda x: (np.sin(x) * x ** 3).sum()                        # noqa: E731
    g1 = gj.grad(f)
    g2 = gj.grad(lambda x: g1(x).sum())
    g3 = gj.grad(lambda x: g2(x).sum())
    x = np.array([0.5, 1.0, -2.0])
    s, c = np.sin(x), np.cos(x)
    np.testing.assert_allclose(g1(x), c * x ** 3 + 3 * x ** 2 * s, rtol=1e-12)
    np.testing.assert_allclose(g2(x), -s * x ** 3 + 6 * x ** 2 * c + 6 * x * s, rtol=1e-12)
    np.testing.assert_allclose(g3(x), -c * x ** 3 - 9 * x ** 2 * s + 18 * x * c + 6 * s,
                               rtol=1e-12)
    # a second call with new values reuses every compiled function
    before = gj.stats()
    x2 = x + 0.25
    s, c = np.sin(x2), np.cos(x2)
    np.testing.assert_allclose(g3(x2), -c * x2 ** 3 - 9 * x2 ** 2 * s + 18 * x2 * c + 6 * s,
                               rtol=1e-12)
    assert gj.stats()["compiles"] == before["compiles"]


def test_jit_grad_of_grad_matches_tensor_mode(rng):
    def f(w, x):
        return (np.tanh(x @ w) ** 2).sum()

    w0, x0 = rng.normal(size=(3, 2)), rng.normal(size=(4, 3))
    gg = gj.grad(lambda w, x: (gj.grad(f)(w, x) ** 2).sum())(w0, x0)
    with_tensors = leaf(w0)
    (g,) = A.grad(((gj.tensor(x0) @ with_tensors).tanh() ** 2).sum(), with_tensors,
                  create_graph=True)
    (expected,) = A.grad((g ** 2).sum(), with_tensors)
    np.testing.assert_allclose(gg, expected.data, rtol=1e-10, atol=1e-12)


def test_jit_mixed_partial():
    # d/dy of (d/dx f) for f = sum(x^2 * exp(y))
    def f(x, y):
        return (x * x * np.exp(y)).sum()

    dxy = gj.grad(lambda x, y: gj.grad(f, argnums=0)(x, y).sum(), argnums=1)
    x, y = np.array([1.0, 2.0]), np.array([0.5, -0.5])
    np.testing.assert_allclose(dxy(x, y), 2 * x * np.exp(y), rtol=1e-12)


# --------------------------------------------------------------------------------------
# nested transforms differentiate their own arguments (no perturbation confusion)
# --------------------------------------------------------------------------------------

def _fd(f, x, eps=1e-6):
    x = np.asarray(x, dtype=np.float64)
    g = np.zeros_like(x)
    for k in range(x.size):
        d = np.zeros_like(x)
        d.flat[k] = eps
        g.flat[k] = (f(x + d) - f(x - d)) / (2 * eps)
    return g


_NESTED = {   # outer(x) -> scalar; an inner transform's arguments share x
    "grad": lambda x: np.sin(gj.grad(lambda a, b: (a * b).sum())(x, 2 * x)).sum(),
    "grad_same_arg_twice": lambda x: gj.grad(lambda a, b: (a * a * b).sum())(x, x).sum(),
    "value_and_grad": lambda x: gj.value_and_grad(lambda a, b: (a * b).sum())(x, x * x)[1].sum(),
    "jacrev": lambda x: gj.jacrev(lambda a, b: a * b)(x, x * x).sum(),
    "jacfwd": lambda x: gj.jacfwd(lambda a, b: a * b)(x, x * x).sum(),
    "hessian": lambda x: gj.hessian(lambda a, b: (a * a * b).sum())(x, x * x).sum(),
    "jvp_closure": lambda x: gj.jvp(lambda a: a * x, (x,), (np.ones(3),))[1].sum(),
    "jvp_constant_leaves": lambda x: gj.jvp(lambda l: l[0] * l[1], ([x, 2.0],),
                                            ([np.ones(3), 1.0],))[1].sum(),
}
# the same outer functions with the inner derivative written out by hand
_BY_HAND = {
    "grad": lambda x: np.sin(2 * x).sum(),
    "grad_same_arg_twice": lambda x: (2 * x * x).sum(),
    "value_and_grad": lambda x: (x * x).sum(),
    "jacrev": lambda x: (x * x).sum(),
    "jacfwd": lambda x: (x * x).sum(),
    "hessian": lambda x: (2 * x * x).sum(),
    "jvp_closure": lambda x: x.sum(),
    "jvp_constant_leaves": lambda x: (2.0 + x).sum(),
}


@pytest.mark.parametrize("name", sorted(_NESTED))
def test_nested_transforms_differentiate_their_own_arguments(name, interpreted):
    f, ref = _NESTED[name], _BY_HAND[name]
    np.testing.assert_allclose(gj.jit(f)(X), ref(X), rtol=1e-12)
    np.testing.assert_allclose(gj.grad(f)(X), _fd(ref, X), rtol=1e-6, atol=1e-8)


def test_nested_grad_compiled_is_not_the_total_derivative():
    f = _NESTED["grad"]
    np.testing.assert_allclose(gj.grad(f)(X), 2 * np.cos(2 * X), rtol=1e-12)


def test_a_transform_called_with_concrete_arguments_inside_a_trace_is_part_of_it():
    # grad / jit called with concrete arguments inside another transform's trace, closing
    # over its traced value, once traced apart and raised "a traced value escaped"; as
    # JAX's, they are part of the enclosing trace (d/dx x * (d/dy x*y) = 2x)
    assert gj.grad(lambda x: x * gj.grad(lambda y: x * y)(2.0))(3.0) == 6.0
    np.testing.assert_array_equal(
        gj.grad(lambda x: gj.jit(lambda y: x * y)(np.array([2.0])).sum())(np.array([3.0])), [2.0])
    inner = gj.jit(lambda y: y * 2.0)   # called outside first: its compiled entry is not
    inner(np.ones(2))                   # the enclosing trace's business
    np.testing.assert_array_equal(
        gj.grad(lambda x: (x * inner(np.ones(2))).sum())(np.ones(2)), [2.0, 2.0])
    np.testing.assert_allclose(
        gj.grad(lambda x: gj.jacrev(lambda y: x * y ** 2)(np.array([1.0, 2.0])).sum())(
            np.array([3.0, 4.0])), [2.0, 4.0])


def test_create_graph_gradient_of_a_selection_does_not_require_grad_as_torch(interpreted):
    # the backward of sort / indexing / gather / max(dim) reads grad, integer indices and the
    # input's shape only: with grad_output not requiring grad, neither does the gradient
    # (torch); sort's indices fed back to that backward carry no gradient either
    x = gj.tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
    sel = [lambda t: t.sort()[0], lambda t: t[[1, 0]], lambda t: t[t > 2],
           lambda t: t.index_select(1, gj.tensor(np.array([2, 0]))),
           lambda t: t.gather(1, gj.tensor(np.array([[0], [2]]))), lambda t: t.max(1)[0],
           lambda t: t.topk(2)[0], lambda t: t.median(1)[0]]
    for f in sel:
        (g,) = gj.autograd.grad(f(x).sum(), x, create_graph=True)
        assert not g.requires_grad
    seed = gj.tensor(np.ones(3), requires_grad=True)
    (g,) = gj.autograd.grad(x.sort()[0], x, grad_outputs=seed.expand(2, 3), create_graph=True)
    assert g.requires_grad   # (it depends on a grad_output that requires grad)
