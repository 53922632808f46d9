"""gj.jacfwd, gj.jacrev, gj.hessian and gj.jvp on pytrees, with JAX's result structures.

Each block against the other transform and against central finite differences (float64)
of NumPy's own function, in both executors.
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np
import pytest

import gradjit as gj
from tests.marks import COMPILED_SLOW
from tests.fd import numerical_grad

_rng = np.random.default_rng(17)
P = {"w": _rng.standard_normal((3, 2)), "b": _rng.standard_normal(2)}
X = _rng.standard_normal((4, 3))


def h(p, x):
    return (np.tanh(x @ p["w"] + p["b"]) ** 2).sum()


def layer(p, x):
    """A pytree output: a dict of a matrix and a scalar."""
    return {"y": np.tanh(x @ p["w"] + p["b"]), "s": (p["w"] ** 2).sum() * p["b"][0]}


def _with(p, key, value):
    q = dict(p)
    q[key] = value
    return q


def _fd_param(f, p, key, x):
    """d f(p, x) / d p[key], shaped f(...).shape + p[key].shape."""
    out = np.asarray(f(p, x))
    J = np.zeros(out.shape + p[key].shape)
    for idx in np.ndindex(out.shape):
        J[idx] = numerical_grad(lambda v: np.asarray(f(_with(p, key, v), x))[idx], [p[key]], 0)
    return J


@COMPILED_SLOW
def test_jacfwd_of_a_scalar_function_of_a_dict(executor):
    Jf, Jr, g = gj.jacfwd(h)(P, X), gj.jacrev(h)(P, X), gj.grad(h)(P, X)
    assert set(Jf) == {"w", "b"} and Jf["w"].shape == (3, 2) and Jf["b"].shape == (2,)
    for k in P:
        np.testing.assert_allclose(Jf[k], Jr[k], rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(Jf[k], g[k], rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(Jf[k], _fd_param(h, P, k, X), rtol=1e-6, atol=1e-8)
    # several argnums: a tuple (the dict's structure, then x's array)
    (Jp, Jx) = gj.jacfwd(h, argnums=(0, 1))(P, X)
    np.testing.assert_allclose(Jp["w"], g["w"], rtol=1e-12)
    np.testing.assert_allclose(Jx, numerical_grad(lambda x: h(P, x), [X], 0), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("transform", ["jacfwd", "jacrev"])
@COMPILED_SLOW
def test_pytree_outputs_dict_of_dicts(transform, executor):
    J = getattr(gj, transform)(layer)(P, X)
    assert set(J) == {"y", "s"} and all(set(J[o]) == {"w", "b"} for o in J)
    for o in ("y", "s"):
        for k in ("w", "b"):
            want = _fd_param(lambda p, x: layer(p, x)[o], P, k, X)
            assert J[o][k].shape == want.shape, (o, k)
            np.testing.assert_allclose(J[o][k], want, rtol=1e-6, atol=1e-8)


def test_jacfwd_equals_jacrev_on_lists_tuples_and_namedtuples(executor):
    Pair = namedtuple("Pair", "a b")

    def f(args, x):
        (u, v), pair = args
        return np.sin(u * x[:2]).sum() * v + pair.a @ pair.b

    args = ([np.array([0.3, -0.7]), np.array(1.5)], Pair(np.array([1.0, 2.0]), np.array([0.5, 0.2])))
    x = np.array([1.1, 0.4, 2.0])
    Jf, Jr = gj.jacfwd(f)(args, x), gj.jacrev(f)(args, x)
    assert isinstance(Jf, tuple) and isinstance(Jf[0], list) and isinstance(Jf[1], Pair)
    for a, b in zip(gj.tree_flatten(Jf)[0], gj.tree_flatten(Jr)[0]):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


@COMPILED_SLOW
def test_hessian_of_a_dict_is_a_dict_of_dicts(executor):
    H = gj.hessian(h)(P, X)
    g = gj.grad(h)
    for k1 in P:
        for k2 in P:
            assert H[k1][k2].shape == P[k1].shape + P[k2].shape
            want = _fd_param(lambda p, x: g(p, x)[k1], P, k2, X)
            np.testing.assert_allclose(H[k1][k2], want, rtol=1e-5, atol=1e-7)
    # symmetric: H[w][b] is H[b][w] with its axes swapped
    np.testing.assert_allclose(H["w"]["b"], np.moveaxis(H["b"]["w"], 0, -1), atol=1e-12)
    # and equal to reverse over reverse
    Hr = gj.jacrev(gj.grad(h))(P, X)
    for k1 in P:
        for k2 in P:
            np.testing.assert_allclose(H[k1][k2], Hr[k1][k2], rtol=1e-10, atol=1e-12)


@COMPILED_SLOW
def test_hessian_with_several_argnums(executor):
    H = gj.hessian(h, argnums=(0, 1))(P, X)
    # JAX's structure: the gradient's structure outside, (dict, array) inside each leaf
    assert isinstance(H, tuple) and set(H[0]) == {"w", "b"} and isinstance(H[1], tuple)
    assert H[0]["w"][0]["b"].shape == (3, 2, 2) and H[0]["w"][1].shape == (3, 2, 4, 3)
    assert H[1][0]["w"].shape == (4, 3, 3, 2) and H[1][1].shape == (4, 3, 4, 3)
    gx = gj.grad(h, argnums=1)
    want = np.stack([numerical_grad(lambda x: gx(P, x)[i], [X], 0) for i in np.ndindex(4, 3)])
    np.testing.assert_allclose(H[1][1], want.reshape(4, 3, 4, 3), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(H[0]["b"][1], np.moveaxis(H[1][0]["b"], (0, 1), (1, 2)),
                               atol=1e-12)


def test_jvp_with_pytrees(executor):
    tp = {"w": _rng.standard_normal((3, 2)), "b": _rng.standard_normal(2)}
    tx = _rng.standard_normal((4, 3))
    out, t = gj.jvp(h, (P, X), (tp, tx))
    eps = 1e-6
    shifted = [h({k: P[k] + s * eps * tp[k] for k in P}, X + s * eps * tx) for s in (1, -1)]
    np.testing.assert_allclose(out, h(P, X), rtol=1e-12)
    np.testing.assert_allclose(t, (shifted[0] - shifted[1]) / (2 * eps), rtol=1e-6)
    # a pytree output: both results have its structure
    out, t = gj.jvp(layer, (P, X), (tp, tx))
    assert set(out) == set(t) == {"y", "s"}
    for o in ("y", "s"):
        fd = (layer({k: P[k] + eps * tp[k] for k in P}, X + eps * tx)[o]
              - layer({k: P[k] - eps * tp[k] for k in P}, X - eps * tx)[o]) / (2 * eps)
        np.testing.assert_allclose(out[o], layer(P, X)[o], rtol=1e-12)
        np.testing.assert_allclose(t[o], fd, rtol=1e-5, atol=1e-8)
    # J t agrees with the Jacobian
    J = gj.jacfwd(h, argnums=(0, 1))(P, X)
    np.testing.assert_allclose(gj.jvp(h, (P, X), (tp, tx))[1], sum(
        (J[0][k] * tp[k]).sum() for k in P) + (J[1] * tx).sum(), rtol=1e-10)


def test_jvp_structure_errors():
    tp = {"w": np.ones((3, 2)), "b": np.ones(2)}
    with pytest.raises(TypeError, match="same structure"):
        gj.jvp(h, (P, X), ({"w": np.ones((3, 2))}, X))
    with pytest.raises(TypeError, match="same structure"):
        gj.jvp(h, (P, X), ([tp["w"], tp["b"]], X))
    with pytest.raises(ValueError, match="shape"):
        gj.jvp(h, (P, X), (tp, np.ones(3)))


@COMPILED_SLOW
def test_jacobians_inside_another_transform(executor):
    W = _rng.standard_normal((3, 2))

    def f(p):
        return (gj.jacfwd(h)(p, X)["w"] * W).sum() + gj.jacrev(h)(p, X)["b"].sum()

    def f_np(w, b):
        g = gj.grad(h)({"w": w, "b": b}, X)
        return (g["w"] * W).sum() + g["b"].sum()

    got = gj.grad(f)(P)
    np.testing.assert_allclose(got["w"], numerical_grad(f_np, [P["w"], P["b"]], 0), rtol=1e-5,
                               atol=1e-7)
    np.testing.assert_allclose(got["b"], numerical_grad(f_np, [P["w"], P["b"]], 1), rtol=1e-5,
                               atol=1e-7)


@COMPILED_SLOW
def test_jacobians_and_hessian_with_has_aux(executor):
    """has_aux=True: ``(jacobian, aux)`` as JAX's; the aux as grad's has_aux gives it (arrays,
    static leaves as returned), also nested in another transform."""
    x = np.array([0.5, 1.0, 2.0])

    def f(x):
        return np.sin(x), {"m": x.mean(), "tag": "t"}
    for jac in (gj.jacrev, gj.jacfwd):
        for _ in range(2):
            J, aux = jac(f, has_aux=True)(x)
            np.testing.assert_allclose(J, np.diag(np.cos(x)), atol=1e-15)
            assert aux["tag"] == "t" and np.asarray(aux["m"]).shape == ()
            np.testing.assert_allclose(aux["m"], x.mean())
    H, aux = gj.hessian(lambda x: ((x ** 3).sum(), x.sum()), has_aux=True)(x)
    np.testing.assert_allclose(H, np.diag(6 * x))
    np.testing.assert_allclose(aux, x.sum())
    nested = gj.grad(lambda x: gj.jacrev(f, has_aux=True)(x)[0].sum()
                     + gj.jacfwd(f, has_aux=True)(x)[1]["m"])(x)
    np.testing.assert_allclose(nested, -np.sin(x) + 1 / 3)
    with pytest.raises(gj.GradjitError, match="has_aux=True needs the function to return a pair"):
        gj.jacrev(np.sin, has_aux=True)(x)


@COMPILED_SLOW
def test_hessian_of_a_vector_or_pytree_output_as_jax(executor):
    # (gj.hessian was jacfwd(grad): a non-scalar output raised; JAX's is jacfwd(jacrev))
    x = np.array([0.3, -0.7, 1.1])
    H = gj.hessian(lambda a: np.sin(a) * a[0])(x)
    assert H.shape == (3, 3, 3)
    for i in range(3):   # the Hessian of output element i, by finite differences of gj.grad
        gi = lambda a, i=i: np.sin(a[i]) * a[0]
        col = [numerical_grad(lambda a, j=j: gj.grad(gi)(a)[j], [x], 0) for j in range(3)]
        np.testing.assert_allclose(H[i], np.array(col), atol=1e-6)
    out = gj.hessian(lambda p: {"o": np.tanh(p["w"] * p["b"][0])})({"w": x, "b": x[:2]})
    assert out["o"]["w"]["b"].shape == (3, 3, 2) and out["o"]["b"]["b"].shape == (3, 2, 2)
    s = gj.hessian(lambda a: (np.sin(a) * a[0]).sum())(x)   # a scalar output: (3, 3) as before
    np.testing.assert_allclose(s, H.sum(0), atol=1e-12)


def test_jvp_with_has_aux_as_jax(executor):
    x, t = np.array([0.3, -0.7]), np.array([1.0, 2.0])
    f = lambda w: (np.sin(w) * 2, {"n": (w ** 2).sum(), "tag": "s"})   # noqa: E731
    out, tangent, aux = gj.jvp(f, (x,), (t,), has_aux=True)
    np.testing.assert_allclose(out, np.sin(x) * 2)
    np.testing.assert_allclose(tangent, np.cos(x) * 2 * t)
    assert aux["tag"] == "s" and float(aux["n"]) == pytest.approx((x ** 2).sum())
    # inside another transform: the tangent is differentiable, the aux passes through
    g = gj.grad(lambda w: gj.jvp(lambda v: (np.sin(v) * w, w.sum()), (w,), (t,),
                                 has_aux=True)[1].sum())(x)
    np.testing.assert_allclose(g, (np.cos(x) - x * np.sin(x)) * t)   # d/dw of cos(w) w t
    assert len(gj.jvp(np.sin, (x,), (t,))) == 2
