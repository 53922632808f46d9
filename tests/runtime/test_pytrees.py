"""Function transforms take and return pytrees; non-array arguments are static.

Gradients are compared with central finite differences of the same NumPy function.
"""
import collections

import numpy as np
import pytest

import gradjit as gj
from gradjit.tracer import pytree
from tests.fd import numerical_grad

P = collections.namedtuple("P", "w b")


def _loss(w, b, x):
    return np.tanh(x @ w + b).sum()


@pytest.fixture
def data(rng):
    return rng.normal(size=(3, 2)), rng.normal(size=2), rng.normal(size=(4, 3))


def _fd(w, b, x):
    return numerical_grad(_loss, [w, b, x], 0), numerical_grad(_loss, [w, b, x], 1)


@pytest.mark.parametrize("kind", ["dict", "list", "tuple", "namedtuple", "nested"])
def test_grad_of_a_pytree_has_its_structure(kind, data):
    w, b, x = data
    gw, gb = _fd(w, b, x)
    if kind == "dict":
        params, f = {"w": w, "b": b}, lambda p, x: _loss(p["w"], p["b"], x)
        want = {"w": gw, "b": gb}
    elif kind == "list":
        params, f = [w, b], lambda p, x: _loss(p[0], p[1], x)
        want = [gw, gb]
    elif kind == "tuple":
        params, f = (w, b), lambda p, x: _loss(p[0], p[1], x)
        want = (gw, gb)
    elif kind == "namedtuple":
        params, f = P(w, b), lambda p, x: _loss(p.w, p.b, x)
        want = P(gw, gb)
    else:
        params = {"layer": [w, {"bias": b}], "unused": None}
        f = lambda p, x: _loss(p["layer"][0], p["layer"][1]["bias"], x)  # noqa: E731
        want = {"layer": [gw, {"bias": gb}], "unused": None}
    got = gj.grad(f)(params, x)
    assert type(got) is type(want)
    got_leaves, got_tree = pytree.flatten(got)
    want_leaves, want_tree = pytree.flatten(want)
    assert got_tree == want_tree
    for g, e in zip(got_leaves, want_leaves):
        np.testing.assert_allclose(g, e, rtol=1e-6, atol=1e-8)


def test_ordered_and_default_dicts_keep_their_type(data, executor):
    """Gradients and results of an OrderedDict are OrderedDicts (as JAX's), of a
    defaultdict defaultdicts with the same default_factory (they came back plain dicts)."""
    w, b, x = data
    od = collections.OrderedDict(w=w, b=b)
    g = gj.grad(lambda p, x: _loss(p["w"], p["b"], x))(od, x)
    assert type(g) is collections.OrderedDict and list(g) == ["w", "b"]
    np.testing.assert_allclose(g["w"], _fd(w, b, x)[0], rtol=1e-6, atol=1e-8)
    dd = collections.defaultdict(list, w=w, b=b)
    g = gj.grad(lambda p, x: _loss(p["w"], p["b"], x))(dd, x)
    assert type(g) is collections.defaultdict and g.default_factory is list
    np.testing.assert_allclose(g["b"], _fd(w, b, x)[1], rtol=1e-6, atol=1e-8)
    out = gj.jit(lambda w: collections.OrderedDict(a=w, b=2 * w))(w)
    assert type(out) is collections.OrderedDict and list(out) == ["a", "b"]
    np.testing.assert_allclose(out["b"], 2 * w)
    assert type(pytree.ravel_pytree(od)[1](pytree.ravel_pytree(od)[0])) is collections.OrderedDict


def test_tuple_argument_is_not_stacked(data):
    w, b, x = data
    f = gj.jit(lambda p: (p[0] * 2, p[1] + 1))
    a, c = f((w, b))
    np.testing.assert_allclose(a, w * 2)
    np.testing.assert_allclose(c, b + 1)


def test_argnums_over_pytrees_and_value_and_grad(data):
    w, b, x = data
    gw, gb = _fd(w, b, x)
    gx = numerical_grad(_loss, [w, b, x], 2)
    f = lambda p, x: _loss(p["w"], p["b"], x)  # noqa: E731
    v, (gp, gxx) = gj.value_and_grad(f, argnums=(0, 1))({"w": w, "b": b}, x)
    np.testing.assert_allclose(v, _loss(w, b, x))
    np.testing.assert_allclose(gp["w"], gw, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(gp["b"], gb, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(gxx, gx, rtol=1e-6, atol=1e-8)


def test_has_aux(data):
    w, b, x = data

    def f(w):
        y = x @ w + b
        return (y ** 2).sum(), {"mean": y.mean(), "y": y}
    g, aux = gj.grad(f, has_aux=True)(w)
    np.testing.assert_allclose(g, 2 * x.T @ (x @ w + b))
    np.testing.assert_allclose(aux["y"], x @ w + b)
    (v, aux2), g2 = gj.value_and_grad(f, has_aux=True)(w)
    np.testing.assert_allclose(v, ((x @ w + b) ** 2).sum())
    np.testing.assert_allclose(aux2["mean"], (x @ w + b).mean())
    np.testing.assert_allclose(g2, g)
    with pytest.raises(gj.GradjitError, match="has_aux=True needs the function to return a pair"):
        gj.grad(lambda w: (w ** 2).sum(), has_aux=True)(w)


def test_non_array_arguments_are_static(data):
    w, b, x = data
    f = gj.grad(lambda s, a, c: np.einsum(s, a, c).sum(), argnums=(1, 2))
    ga, gc = f("ij,jk->ik", x, w)
    np.testing.assert_allclose(ga, np.ones((4, 2)) @ w.T)
    np.testing.assert_allclose(gc, x.T @ np.ones((4, 2)))
    powers = gj.grad(lambda x, n: (x ** n).sum())
    np.testing.assert_allclose(powers(w, 2), 2 * w)
    np.testing.assert_allclose(powers(w, 3), 3 * w ** 2)   # a new static value: a new trace
    assert len(powers._compiled) == 2
    powers(w, 3)
    assert len(powers._compiled) == 2
    act = gj.grad(lambda x, fn, flag: fn(x).sum() if flag else x.sum())
    np.testing.assert_allclose(act(w, np.sin, True), np.cos(w))
    np.testing.assert_allclose(act(w, np.sin, False), np.ones_like(w))
    # classes are static too (np.ndarray has shape and dtype descriptors, not values)
    cast = gj.grad(lambda x, t, kinds: (x.astype(t) ** 2).sum() if t in kinds else 0.0)
    np.testing.assert_allclose(cast(w, np.float64, (np.ndarray, np.float64)), 2 * w)
    np.testing.assert_allclose(cast(w, list, (tuple,)), 0 * w)


def test_keyword_arguments_and_static_argnames(data):
    w, b, x = data
    f = gj.grad(lambda x, scale=1.0, power=2: (scale * x ** power).sum(), static_argnames="power")
    np.testing.assert_allclose(f(w), 2 * w)
    np.testing.assert_allclose(f(w, scale=3.0, power=3), 9 * w ** 2)
    np.testing.assert_allclose(f(w, 0.5, 2), w)
    j = gj.jit(lambda a, n: a.reshape(n, -1), static_argnums=1)
    assert j(x, 2).shape == (2, 6)


def test_clear_errors_for_arguments_and_outputs(data, executor):
    """An integer or bool output says it must be floating point (it said "scalar-output");
    argnums of any integral type are taken (np.int64 raised a TypeError of tuple()); a
    static name or position the function does not take is a ValueError, as JAX's."""
    w = data[1]
    for bad in (lambda x: (x > 0).sum(), lambda x: (x > 0).any()):
        with pytest.raises(gj.GradjitError, match="output must be floating point"):
            gj.grad(bad)(w)
    with pytest.raises(gj.GradjitError, match="scalar-output"):
        gj.grad(lambda x: x * 2)(w)
    f = lambda a, b: (a * b).sum()  # noqa: E731
    np.testing.assert_allclose(gj.grad(f, argnums=np.int64(1))(w, 2 * w), w)
    ga, gb = gj.value_and_grad(f, argnums=(np.int32(0), 1))(w, 2 * w)[1]
    np.testing.assert_allclose(ga, 2 * w)
    with pytest.raises(TypeError, match="argnums must be an int"):
        gj.grad(f, argnums=True)
    with pytest.raises(ValueError, match=r"static_argnames \['foo'\] are not parameters"):
        gj.jit(lambda x, n=1: x * n, static_argnames="foo")
    with pytest.raises(ValueError, match=r"static_argnums=\(3,\), but .* takes 1"):
        gj.jit(lambda x: x, static_argnums=3)
    # **kwargs and *args take any name or position
    np.testing.assert_allclose(gj.jit(lambda x, **kw: x * kw["n"], static_argnames="n")(w, n=2),
                               2 * w)
    np.testing.assert_allclose(gj.jit(lambda *a: a[0] * a[1], static_argnums=1)(w, 3), 3 * w)


def test_python_float_is_traced_not_static(data):
    w = data[0]
    f = gj.jit(lambda a, s: a * s)
    np.testing.assert_allclose(f(w, 2.0), 2 * w)
    np.testing.assert_allclose(f(w, 3.0), 3 * w)
    assert len(f._compiled) == 1


def test_unhashable_static_leaf_is_a_clear_error(data):
    w = data[0]
    with pytest.raises(TypeError, match="neither an array nor hashable"):
        gj.jit(lambda a, s: a)(w, {1, 2})


def test_jit_returns_namedtuples_and_nested_structures(data):
    w, b, x = data
    out = gj.jit(lambda w, b: {"p": P(w * 2, b), "n": [b.sum(), None]})(w, b)
    assert isinstance(out["p"], P) and out["n"][1] is None
    np.testing.assert_allclose(out["p"].w, 2 * w)


def test_non_array_outputs_come_back_as_they_are(data, executor):
    """str, bytes and other objects a function returns are static outputs, given back by
    Python on both tiers (compiled code garbled a str, and crashed on bytes or a str in
    aux); numbers still come back as arrays."""
    w = data[0]
    f = gj.jit(lambda x, tag: (x.sum(), tag, b"ab", np.sin, 3))
    for _ in range(2):   # (the first call traces, the second runs the cached entry)
        s, tag, raw, fn, n = f(w, "hello")
        assert (tag, raw, fn) == ("hello", b"ab", np.sin) and type(tag) is str
        np.testing.assert_allclose(s, w.sum())
        assert np.asarray(n) == 3
    g = gj.grad(lambda x: ((x ** 2).sum(), {"name": "run1", "m": x.mean()}), has_aux=True)
    for _ in range(2):
        gx, aux = g(w)
        np.testing.assert_allclose(gx, 2 * w)
        assert aux["name"] == "run1"
        np.testing.assert_allclose(aux["m"], w.mean())


def test_jacrev_of_a_dict(data):
    w = data[0]
    jac = gj.jacrev(lambda p: np.sin(p["a"]) * p["c"])({"a": w[:, 0], "c": w[:, 1]})
    np.testing.assert_allclose(jac["a"], np.diag(np.cos(w[:, 0]) * w[:, 1]))
    np.testing.assert_allclose(jac["c"], np.diag(np.sin(w[:, 0])))


def test_nested_grad_over_pytrees(data):
    w = data[0]
    inner = gj.grad(lambda p: (p["a"] ** 3).sum())
    outer = gj.grad(lambda p: inner(p)["a"].sum())
    np.testing.assert_allclose(outer({"a": w})["a"], 6 * w)


def test_ravel_pytree_round_trip(data):
    w, b, _ = data
    flat, unravel = pytree.ravel_pytree({"w": w, "b": [b, np.float32(2.0)]})
    assert flat.shape == (w.size + b.size + 1,)
    back = unravel(flat)
    np.testing.assert_array_equal(back["w"], w)
    assert back["b"][1].dtype == np.float32
