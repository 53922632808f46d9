"""A Python float argument of a transform is weakly typed, as in NumPy 2 (NEP 50) and JAX:
float32 code given ``0.5`` stays float32; ``np.float64(0.5)`` and ``np.array(0.5)`` are
strong and promote to float64, as NumPy's. Dtypes and values are compared with NumPy
running the same function; gradients with central finite differences in float64."""
import numpy as np
import pytest

import gradjit as gj
from tests.fd import numerical_grad

W32 = np.array([0.5, -1.25, 2.0], np.float32)

CASES = {
    "mul": lambda a, s: a * s,
    "radd": lambda a, s: s + a,
    "rsub": lambda a, s: s - a,
    "div": lambda a, s: s / a,
    "pow": lambda a, s: np.abs(a) ** s,
    "rpow": lambda a, s: s ** a,
    "where": lambda a, s: np.where(a > 0, a, s),
    "maximum": lambda a, s: np.maximum(a, s),
    "compare": lambda a, s: np.where(a > s, a, 0 * a),
    "scalar_math": lambda a, s: (s * s + 1 - s / 2 - -s) * a,   # weak all along
    "np_scalar": lambda a, s: s * np.float32(2) + a,            # strong f32 beside weak
    "ufunc_of_weak": lambda a, s: np.exp(s) * a,                # np.exp(0.5): np.float64
    "element": lambda a, s: a[0] * s,
    # a NumPy function's result is a strong array, even one handing its argument back
    "asarray": lambda a, s: a * np.asarray(s),
    "transpose": lambda a, s: a * np.transpose(s),
    "reshape": lambda a, s: a * np.reshape(s, ()),
    # Python's round() of a float is a Python float: weak; np.select's default is weak
    "round": lambda a, s: a * round(s, 3),
    "select": lambda a, s: np.select([a > 1], [a], default=s),
}
ARGS = {"python float": 0.5, "np.float64": np.float64(0.5), "0-d array": np.array(0.5)}


@pytest.mark.parametrize("arg", list(ARGS))
@pytest.mark.parametrize("name", list(CASES))
def test_jit_dtype_follows_numpy(name, arg):
    f, s = CASES[name], ARGS[arg]
    if name == "round" and arg == "0-d array":
        pytest.skip("NumPy's arrays have no __round__ (gradjit raises the same TypeError)")
    want, got = np.asarray(f(W32, s)), np.asarray(gj.jit(f)(W32, s))
    assert got.dtype == want.dtype, (name, arg)
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_weak_and_strong_calls_do_not_share_a_compiled_entry():
    f = gj.jit(lambda a, s: a * s)
    assert f(W32, 0.5).dtype == np.float32
    assert f(W32, np.float64(0.5)).dtype == np.float64
    assert f(W32, 0.25).dtype == np.float32
    assert f(W32, np.array(0.5)).dtype == np.float64
    np.testing.assert_allclose(f(W32, 0.25), W32 * 0.25)


def _loss(w, lam):
    return lam * (w ** 2).sum() + 0.5 * lam ** 2


def test_value_and_grad_keep_float32():
    v, (gw, glam) = gj.value_and_grad(_loss, argnums=(0, 1))(W32, 0.1)
    want = _loss(W32, 0.1)
    assert v.dtype == want.dtype == np.float32 and gw.dtype == np.float32
    np.testing.assert_allclose(v, want, rtol=1e-6)
    np.testing.assert_allclose(gw, 2 * 0.1 * W32, rtol=1e-6)
    # the gradient of the Python float itself: a float64 0-d array, as before
    assert np.asarray(glam).dtype == np.float64 and np.shape(glam) == ()
    np.testing.assert_allclose(glam, (W32.astype(np.float64) ** 2).sum() + 0.1, rtol=1e-6)
    assert gj.grad(_loss)(W32, 0.1).dtype == np.float32


def test_grad_wrt_python_float_matches_finite_differences():
    w = W32.astype(np.float64)
    g = gj.grad(lambda w, lam: np.tanh(w * lam).sum() * lam, argnums=1)(w, 0.7)
    fd = numerical_grad(lambda w, lam: np.tanh(w * lam).sum() * lam, [w, np.array(0.7)], 1)
    np.testing.assert_allclose(g, fd, rtol=1e-6)


@pytest.mark.parametrize("transform", ["jacfwd", "jacrev"])
def test_jacobians_keep_float32(transform):
    f = lambda a, s: np.tanh(a * s) + s * a ** 2   # noqa: E731
    jac = getattr(gj, transform)
    J = jac(f)(W32, 0.5)
    assert f(W32, 0.5).dtype == np.float32 and J.dtype == np.float32
    np.testing.assert_allclose(J, np.diag(0.5 / np.cosh(0.5 * W32) ** 2 + 2 * 0.5 * W32),
                               rtol=1e-5)
    Js = jac(f, argnums=1)(W32, 0.5)
    np.testing.assert_allclose(Js, W32 / np.cosh(0.5 * W32) ** 2 + W32 ** 2, rtol=1e-5)
    assert jac(f)(W32, np.float64(0.5)).shape == (3, 3)


def test_python_float_in_a_pytree_and_nested_transform():
    g = gj.grad(lambda p, x: (p["w"] * p["s"] * x).sum())({"w": W32, "s": 2.0}, W32)
    assert g["w"].dtype == np.float32
    np.testing.assert_allclose(g["w"], 2.0 * W32, rtol=1e-6)
    np.testing.assert_allclose(g["s"], (W32 * W32).sum(), rtol=1e-6)
    outer = gj.jit(lambda w, s: gj.grad(lambda a, t: (a * t).sum())(w, s))
    assert outer(W32, 0.5).dtype == np.float32


def test_against_jax_weak_types():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy

    def loss(xp):
        return lambda w, lam: ((lam * xp.maximum(w, 0.1) ** 2).sum()
                               + xp.where(w > 0, w, lam).sum() * lam)
    w = np.linspace(-1, 1, 4).astype(np.float32)
    v, g = gj.value_and_grad(loss(np), argnums=(0, 1))(w, 0.3)
    jv, jg = jax.value_and_grad(loss(jnp), argnums=(0, 1))(jnp.asarray(w), 0.3)
    assert v.dtype == jv.dtype == np.float32 and g[0].dtype == jg[0].dtype == np.float32
    np.testing.assert_allclose(v, jv, rtol=1e-6)
    np.testing.assert_allclose(g[0], jg[0], rtol=1e-6)
    np.testing.assert_allclose(g[1], jg[1], rtol=1e-6)


# -- weak types through regions (checkpoint, cond, loops), as JAX's (x64) and a NumPy loop ---
BODY = lambda a, b: (np.sin(a * b) * b).sum()   # noqa: E731
REGIONS = {
    "checkpoint": lambda a, b: gj.checkpoint(BODY)(a, b),
    "checkpoint_result": lambda a, b: gj.checkpoint(lambda u, v: v * 3)(a, b) * a,
    "cond_operand": lambda a, b: gj.cond(a[0] > 0, BODY, BODY, a, b),
    "cond_result": lambda a, b: gj.cond(a[0] > 0, lambda u, v: v, lambda u, v: 2 * v, a, b) * a,
    "cond_mixed": lambda a, b: gj.cond(a[0] > 0, lambda u, v: v,
                                       lambda u, v: u.sum().astype(np.float64), a, b) * a,
    "scan_init": lambda a, b: gj.scan(lambda c, xi: (c * xi, c), b, a)[1],
    "scan_weak_carry": lambda a, b: gj.scan(lambda c, xi: (c * 2, xi), b, a)[0] * a,
    "fori_literal": lambda a, b: gj.fori_loop(0, 3, lambda i, c: c + a[i], 0.0),
    "fori_index": lambda a, b: gj.fori_loop(1, 3, lambda i, c: c * i, a),
    "fori_index_float": lambda a, b: gj.fori_loop(0, 3, lambda i, c: c + 0.1 * i, a),
    "fori_int_carry": lambda a, b: gj.fori_loop(0, 3, lambda i, c: c * 2 + i, 1) * a,
    "fori_weak_float": lambda a, b: gj.fori_loop(0, 3, lambda i, c: c * 2.0, b) * a,
    "while_weak": lambda a, b: gj.while_loop(lambda c: c < 10.0, lambda c: c * 2.0, b) * a,
}
JAX_DTYPES = {k: "float64" if k == "cond_mixed" else "float32" for k in REGIONS}


def _python_loops(name, a, b):
    """The NumPy program each region case stands for (Python loops and branches)."""
    if name == "fori_index":
        for i in range(1, 3):
            a = a * i
        return a
    if name == "fori_literal":
        c = 0.0
        for i in range(3):
            c = c + a[i]
        return c
    return None


@pytest.mark.parametrize("name", list(REGIONS))
def test_regions_keep_weak_types(executor, name):
    got = np.asarray(gj.jit(REGIONS[name])(W32, 0.5))
    assert got.dtype == JAX_DTYPES[name], name
    want = _python_loops(name, W32, 0.5)
    if want is not None:
        assert np.asarray(want).dtype == got.dtype
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_fori_index_gradient_keeps_float32():
    g = gj.grad(lambda a: gj.fori_loop(1, 4, lambda i, c: c * i, a).sum())(W32)
    assert g.dtype == np.float32
    np.testing.assert_allclose(g, np.full(3, 6.0), rtol=1e-6)


def test_regions_against_jax_weak_types():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    lax = jax.lax
    ref = {
        "scan_init": lambda a, b: lax.scan(lambda c, xi: (c * xi, c), b, a)[1],
        "fori_literal": lambda a, b: lax.fori_loop(0, 3, lambda i, c: c + a[i], 0.0),
        "fori_index": lambda a, b: lax.fori_loop(1, 3, lambda i, c: c * i, a),
        "fori_int_carry": lambda a, b: lax.fori_loop(0, 3, lambda i, c: c * 2 + i, 1) * a,
        "while_weak": lambda a, b: lax.while_loop(lambda c: c < 10.0, lambda c: c * 2.0, b) * a,
        "cond_result": lambda a, b: lax.cond(a[0] > 0, lambda u, v: v, lambda u, v: 2 * v, a, b) * a,
    }
    for name, f in ref.items():
        assert str(jax.jit(f)(W32, 0.5).dtype) == JAX_DTYPES[name], name
