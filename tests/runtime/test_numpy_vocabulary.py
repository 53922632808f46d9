"""Traced values behave as NumPy arrays; tensors as torch tensors; randomness is explicit.

Forward values are compared with NumPy itself, gradients with central differences.
"""
import re

import numpy as np
import pytest
from numpy import r_

import gradjit as gj
from gradjit.tracer.rng_guard import RandomnessUnderTraceError
from tests.fd import numerical_grad

X = np.array([[3.0, -1.0, 2.5, 0.5], [1.0, 4.0, -2.0, 0.25], [0.75, 2.0, 1.5, -3.0]])

def _sorted_in_place(a, axis=-1):
    b = a * 1.0
    v = b[0]            # a view: it sees the sort, as NumPy's
    b.sort(axis=axis)
    return b * 2.0 + v


METHODS = {   # name: f(a) written as a NumPy user writes it
    "var": lambda a: a.var(), "std": lambda a: a.std(), "std_ddof": lambda a: a.std(ddof=1),
    "var_axis": lambda a: a.var(axis=0, keepdims=True),
    "max_axis0": lambda a: a.max(0), "max_axis1": lambda a: a.max(1),
    "min_kw": lambda a: a.min(axis=-1, keepdims=True), "max": lambda a: a.max(),
    "sum_axis0": lambda a: a.sum(axis=0), "sum_tuple": lambda a: a.sum(axis=(0, 1)),
    "mean_kw": lambda a: a.mean(axis=-1, keepdims=True), "prod": lambda a: a.prod(axis=1),
    "transpose": lambda a: a.transpose(), "transpose_axes": lambda a: a.transpose(1, 0),
    "T": lambda a: a.T, "copy": lambda a: a.copy() * 2, "flatten": lambda a: a.flatten(),
    "ravel": lambda a: a.ravel(), "reshape": lambda a: a.reshape(2, 6),
    "reshape_tuple": lambda a: a.reshape((4, 3)), "cumsum": lambda a: a.cumsum(axis=1),
    "cumsum_flat": lambda a: a.cumsum(), "cumprod": lambda a: a.cumprod(axis=0),
    "dot": lambda a: a.dot(a.T), "size": lambda a: a / a.size, "squeeze": lambda a: a[None].squeeze(0),
    "astype": lambda a: a.astype(np.float32).astype(np.float64), "clip": lambda a: a.clip(-1.5, 2.2),
    "trace": lambda a: a.trace(), "diagonal": lambda a: a.diagonal(),
    "round": lambda a: a.round(1), "real": lambda a: a.real + a.conj(), "swapaxes": lambda a: a.swapaxes(0, 1),
    "take": lambda a: a.take([0, 5]), "take_axis": lambda a: a.take([2, 0], axis=1),
    "np_max_axis0": lambda a: np.max(a, axis=0), "np_amax0": lambda a: np.amax(a, 0),
    "np_min_axis0": lambda a: np.min(a, axis=0), "np_std": lambda a: np.std(a, axis=1),
    "np_var_ddof": lambda a: np.var(a, ddof=1), "np_transpose": lambda a: np.transpose(a, (1, 0)),
    "np_sum_dtype": lambda a: np.sum(a, axis=0, dtype=np.float64),
    "np_prod_keep": lambda a: np.prod(a, axis=0, keepdims=True),
    "np_cumsum_none": lambda a: np.cumsum(a), "np_sort_none": lambda a: np.sort(a, axis=None),
    "np_squeeze": lambda a: np.squeeze(a[:, :1], axis=1), "np_trace": lambda a: np.trace(a, 1),
    "np_reshape": lambda a: np.reshape(a, (6, 2)), "np_array": lambda a: np.array([a[0], 2 * a[1]]),
    "np_asarray": lambda a: np.asarray(a) * 2, "np_mean_list": lambda a: np.mean([a[0], a[1]]),
    "np_array_mixed": lambda a: np.array([[a[0, 0], 1.0], [2.0, a[1, 1]]]),
    "np_r_": lambda a: np.r_[a[0], 3.0, a[1] * 2], "np_c_": lambda a: np.c_[a[0], a[2]],
    "np_r_directive": lambda a: np.r_["0,2", a[0], a[1]],
    "np_r_list": lambda a: np.r_[a[0], [a[1, 0], 1.0]],
    "np_append_lists": lambda a: np.append([a[0, 0], a[1, 1]], [a[2, 2], 1.0]), "r_imported": lambda a: r_[a[1], a[2]],
    "np_iscomplex": lambda a: np.iscomplex(a), "np_isreal": lambda a: np.isreal(a[0]),
    "sort_in_place": _sorted_in_place, "sort_in_place_axis0": lambda a: _sorted_in_place(a, 0),
}


@pytest.mark.parametrize("name", sorted(METHODS))
def test_traced_methods_follow_numpy(name, interpreted):
    f = METHODS[name]
    want = f(X.copy())
    got = gj.jit(f)(X)
    assert np.shape(got) == np.shape(want)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    if np.asarray(want).dtype.kind == "f" and name not in ("round", "astype"):
        g = gj.grad(lambda a: (f(a) * np.arange(1, np.size(want) + 1).reshape(np.shape(want))).sum())(X)
        fd = numerical_grad(lambda a: f(a) * np.arange(1, np.size(want) + 1).reshape(np.shape(want)),
                            [X], 0)
        np.testing.assert_allclose(g, fd, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["var", "max_axis0", "transpose_axes", "np_array", "size",
                                  "sort_in_place"])
def test_traced_methods_compiled(name):
    f = METHODS[name]
    np.testing.assert_allclose(gj.jit(f)(X), f(X.copy()), rtol=1e-12)


def test_numpy_forms_that_cannot_trace_are_clear_errors():
    with pytest.raises(TypeError, match="NoneType"):   # NumPy's own error
        gj.jit(lambda a: a.sort(axis=None))(X)
    with pytest.raises(gj.GradjitError, match="data-dependent shape"):
        gj.jit(lambda a: a.nonzero())(X)
    with pytest.raises(gj.GradjitError, match="out="):
        gj.jit(lambda a: a.sum(out=np.empty(())))(X)
    with pytest.raises(TypeError):
        gj.jit(lambda a: np.sum(a, bogus=1))(X)


def test_torch_forms_still_work_on_traced_values(interpreted):
    v, i = gj.jit(lambda a: a.max(dim=1))(X)
    np.testing.assert_array_equal(i, X.argmax(1))
    np.testing.assert_allclose(gj.jit(lambda a: a.var(1, unbiased=True))(X), X.var(1, ddof=1))
    np.testing.assert_allclose(gj.jit(lambda a: a.sum(1, True))(X), X.sum(1, keepdims=True))
    assert gj.jit(lambda a: a.size(1) * a)(X).shape == X.shape


def test_tensor_methods_take_numpy_keywords():
    t = gj.tensor(X, requires_grad=True)
    np.testing.assert_allclose(np.asarray(t.sum(axis=0, keepdims=True)), X.sum(0, keepdims=True))
    np.testing.assert_allclose(np.asarray(t.std(ddof=0)), X.std())
    np.testing.assert_allclose(np.asarray(t.max(axis=1, keepdims=True)), X.max(1, keepdims=True))
    assert t.var().item() == pytest.approx(X.var(ddof=1))     # torch's default stays
    t.amax(axis=0, keepdims=True).sum().backward()
    np.testing.assert_allclose(np.asarray(t.grad), (X == X.max(0)).astype(float))


def test_torch_style_module_functions(interpreted):
    a, b = gj.tensor([1.0, 2.0], requires_grad=True), gj.tensor([3.0, 4.0])
    np.testing.assert_allclose(np.asarray(gj.add(a, b, alpha=2)), [7.0, 10.0])
    np.testing.assert_allclose(np.asarray(gj.atan2(a, b)), np.arctan2([1, 2], [3, 4]))
    np.testing.assert_allclose(np.asarray(gj.maximum(a, b)), [3.0, 4.0])
    np.testing.assert_allclose(np.asarray(gj.outer(a, b)), np.outer([1, 2], [3, 4]))
    np.testing.assert_allclose(np.asarray(gj.einsum("i,i->", a, b)), 11.0)
    gj.logsumexp(a, 0).backward()
    np.testing.assert_allclose(np.asarray(a.grad), np.exp([1, 2]) / np.exp([1, 2]).sum())
    # on traced values too, with torch's semantics (dims swapped, not permuted)
    np.testing.assert_allclose(gj.jit(lambda x: gj.transpose(x[None], 0, 2))(X), X[None].transpose(2, 1, 0))


def test_stop_gradient_and_detach():
    x = np.array([0.5, 2.0, -1.0])
    np.testing.assert_allclose(gj.grad(lambda x: (x * gj.stop_gradient(x)).sum())(x), x)
    np.testing.assert_allclose(gj.grad(lambda x: (x * x.detach() ** 2).sum())(x), x ** 2)
    second = gj.grad(lambda x: gj.grad(lambda y: (y ** 2 * gj.stop_gradient(y)).sum())(x).sum())
    np.testing.assert_allclose(second(x), 2 * x)


@pytest.mark.parametrize("draw", ["global", "generator", "gj", "dropout"])
def test_random_draws_under_tracing_raise(draw):
    rng = np.random.default_rng(0)
    fns = {
        "global": lambda x: (x * np.random.normal(size=x.shape)).sum(),
        "generator": lambda x: (x * rng.normal(size=x.shape)).sum(),
        "gj": lambda x: (x * gj.randn(3)).sum(),
        "dropout": lambda x: gj.nn.functional.dropout(x, 0.5).sum(),
    }
    with pytest.raises(RandomnessUnderTraceError, match="frozen into the compiled code"):
        gj.grad(fns[draw])(np.ones(3))


def test_random_draws_outside_tracing_are_fine():
    rng = np.random.default_rng(0)
    f = gj.grad(lambda x, noise: (x * noise).sum())
    n1, n2 = rng.normal(size=3), rng.normal(size=3)
    np.testing.assert_allclose(f(np.ones(3), n1), n1)
    np.testing.assert_allclose(f(np.ones(3), n2), n2)
    assert gj.nn.functional.dropout(gj.tensor(np.ones(4)), 0.5).shape == (4,)   # eager: allowed
    np.testing.assert_allclose(gj.grad(lambda x: gj.nn.functional.dropout(x, 0.5, training=False)
                                       .sum())(np.ones(3)), np.ones(3))


def test_realness_is_known_while_tracing(interpreted):
    f = lambda x: np.sum(x * x) if not np.iscomplex(x).any() and np.isreal(x).all() else 0.0
    np.testing.assert_allclose(gj.grad(f)(X), 2 * X)


@pytest.mark.parametrize("executor", ["numpy", "numba"], indirect=True)
def test_constant_and_one_element_outputs(executor):
    """A value that depends on no argument has zero gradients (JAX's and autograd's
    answer); a one-element output of any shape is a scalar (torch's backward takes it)."""
    c = np.ones((3, 2))
    np.testing.assert_array_equal(gj.grad(lambda x: np.sum(c))(X), np.zeros_like(X))
    assert gj.grad(lambda l: 1.0)([]) == []
    value, g = gj.value_and_grad(lambda x, y: 2.0, argnums=(0, 1))(X, X[0, 0])
    assert value == 2.0 and np.all(g[0] == 0) and g[1] == 0
    x = X[:1]
    value, g = gj.value_and_grad(lambda x: np.sum(x * x, axis=1, keepdims=True))(x)
    assert value.shape == (1, 1)
    np.testing.assert_allclose(g, 2 * x)
    with pytest.raises(gj.GradjitError, match="scalar-output"):
        gj.grad(lambda x: x[0])(X)


def test_complex_values_are_refused_where_they_enter(interpreted):
    """gradjit computes with real numbers; complex arrays would meet real-only formulas
    (np.real / np.conj as the identity) or crash in Numba, so they raise at the door."""
    z = np.array([1 + 1j, 2 + 0j])
    for call in (lambda: gj.jit(lambda z: np.real(z))(z),
                 lambda: gj.grad(lambda x: (x * z).real.sum())(np.ones(2)),
                 lambda: gj.jit(lambda x: (x * 1j).imag)(np.ones(2)),
                 lambda: gj.tensor(z), lambda: gj.as_tensor(z)):
        with pytest.raises(gj.GradjitError, match="complex128: gradjit computes with real"):
            call()


@pytest.mark.parametrize("dtype", [np.longdouble, object, "U3"])
def test_dtypes_numba_cannot_compile_are_refused_where_they_enter(dtype, executor):
    """A long double (float128) or object array computed on the interpreter and crashed in
    Numba: refused at argument binding in both tiers, as complex arrays are."""
    a = np.array([1, 2]).astype(dtype)
    if np.dtype(dtype).kind == "f" and np.dtype(dtype).itemsize <= 8:
        pytest.skip("long double is float64 on this platform")
    for call in (lambda: gj.jit(lambda x: (x * x).sum())(a),
                 lambda: gj.grad(lambda x: (x * x).sum())(a),
                 lambda: gj.jit(lambda x: x + a)(np.ones(2)),
                 lambda: gj.tensor(a), lambda: gj.as_tensor(a)):
        with pytest.raises(gj.GradjitError, match=re.escape(np.dtype(dtype).name) + ": gradjit "
                           "computes with bool, integer and float16|array of Python objects") as e:
            call()
        assert "test_numpy_vocabulary.py" in str(e.value)
