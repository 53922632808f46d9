"""NumPy ufunc methods on traced arrays (tracer/numpy_ufunc_methods.py): values equal NumPy's,
gradients equal central finite differences in float64, on the interpreter and compiled;
what is not supported says so."""
import numpy as np
import pytest

import gradjit as gj

rng = np.random.default_rng(3)
X = rng.normal(size=(3, 4))
Y = rng.normal(size=5)


def _at_scatter(y):
    acc = np.zeros(3)
    np.add.at(acc, [0, 2, 0, 1, 0], y)   # (repeated indices accumulate)
    return (acc ** 2).sum()


def _at_subtract(x):
    x = x.copy()
    np.subtract.at(x, (np.array([0, 0, 2]), np.array([1, 1, 3])), 2.0 * x[0, 0])
    return (x ** 3).sum()


def _at_in_place_slice(x):
    np.add.at(x, slice(0, 2), x[2])
    return (x * x).sum()


CASES = {
    "add.reduce": (lambda x: (np.add.reduce(x) ** 2).sum(), X),
    "add.reduce/axis1-keepdims": (lambda x: (np.add.reduce(x, axis=1, keepdims=True) ** 2).sum(), X),
    "add.reduce/None": (lambda x: np.add.reduce(x, axis=None) ** 2, X),
    "add.reduce/1-d": (lambda y: np.add.reduce(y) ** 2, Y),
    "multiply.reduce": (lambda x: np.multiply.reduce(x, 1).sum(), X),
    "maximum.reduce": (lambda x: np.maximum.reduce(x).sum(), X),
    "minimum.reduce/initial": (lambda x: np.minimum.reduce(x, axis=0, initial=0.5).sum(), X),
    "logaddexp.reduce": (lambda x: np.logaddexp.reduce(x, axis=1).sum(), X),
    "add.accumulate": (lambda x: (np.add.accumulate(x, axis=1) ** 2).sum(), X),
    "multiply.accumulate": (lambda x: np.multiply.accumulate(x).sum(), X),
    "maximum.accumulate": (lambda x: np.maximum.accumulate(x, axis=1).sum(), X),
    "minimum.accumulate": (lambda y: (np.minimum.accumulate(y) * np.arange(5.0)).sum(), Y),
    "logaddexp.accumulate": (lambda x: np.logaddexp.accumulate(x).sum(), X),
    "multiply.outer": (lambda y: (np.multiply.outer(y, np.arange(3.0)) ** 2).sum(), Y),
    "subtract.outer": (lambda y: (np.subtract.outer(y, y) ** 2).sum(), Y),
    "hypot.outer/2-d": (lambda x: np.hypot.outer(x, x[0]).sum(), X),
    "add.at": (_at_scatter, Y),
    "subtract.at/tuple-index": (_at_subtract, X),
    "add.at/slice-in-place": (_at_in_place_slice, X),
}


def _fd(f, a, eps=1e-6):
    """Central differences of ``f`` (scalar or array valued) at ``a``: shape f(a).shape +
    a.shape."""
    cols = []
    for i in np.ndindex(a.shape):
        ap, am = a.copy(), a.copy()
        ap[i] += eps
        am[i] -= eps
        cols.append((np.asarray(f(ap)) - np.asarray(f(am))) / (2 * eps))
    out = np.stack(cols, axis=-1)
    return out.reshape(out.shape[:-1] + a.shape)


@pytest.mark.parametrize("name", CASES)
def test_value_and_gradient(name, executor):
    f, a = CASES[name]
    v, g = gj.value_and_grad(f)(a.copy())
    np.testing.assert_allclose(v, f(a.copy()), rtol=1e-12)
    np.testing.assert_allclose(g, _fd(f, a), rtol=1e-6, atol=1e-7)


def test_second_order_of_a_reduction_and_an_outer():
    f = lambda y: (np.logaddexp.reduce(np.multiply.outer(y, y), axis=1) ** 2).sum()  # noqa: E731
    h = gj.hessian(f)(Y)
    np.testing.assert_allclose(h, _fd(gj.grad(f), Y), rtol=1e-5, atol=1e-6)


def test_tensors_take_them_too():
    t = gj.tensor(X, requires_grad=True)
    np.add.reduce(t * t, axis=1).sum().backward()
    np.testing.assert_allclose(t.grad.data, 2 * X, rtol=1e-13)


_OUTSIDE = np.zeros(5)   # (made outside the traced function: a NumPy array there)


@pytest.mark.parametrize("call, what", [
    (lambda x: np.add.reduceat(x, [0, 2]).sum(), "np.add.reduceat"),
    (lambda x: np.multiply.at(x, [0], 2.0), "np.multiply.at"),
    (lambda x: np.add.at(_OUTSIDE, [0], x[0]), "a NumPy array"),
])
def test_the_rest_is_refused_by_name(call, what):
    with pytest.raises(gj.GradjitError, match=what):
        gj.grad(lambda y: (call(y), y.sum())[1])(Y)


def _assemble(v, rows, cols):
    # finite-element style assembly with the connectivity passed as (traced) arguments
    K = np.zeros((3, 3))
    np.add.at(K, (rows, cols), v)
    np.subtract.at(K, (cols, rows), 0.5 * v)
    return (K ** 2).sum()


def _rows_of(v, i):
    K = np.zeros((4, 2))
    np.add.at(K, i, v)   # (a 1-D index on the first axis: whole rows)
    return (K * np.arange(8.0).reshape(4, 2)).sum()


@pytest.mark.parametrize("f, args", [
    (_assemble, (np.array([1.0, 2.0, 3.0]), np.array([0, 1, -1]), np.array([1, 1, 2]))),
    (_rows_of, (np.ones((3, 2)), np.array([3, 0, 3]))),
], ids=["pairs", "rows"])
def test_at_with_traced_indices(f, args, executor):
    # (refused before: connectivity passed as an argument is traced)
    v, rest = args[0], args[1:]
    val, g = gj.value_and_grad(f)(*args)
    np.testing.assert_allclose(val, f(*args), rtol=1e-12)
    np.testing.assert_allclose(g, _fd(lambda v: f(v, *rest), v), rtol=1e-6, atol=1e-7)


def test_array_copy_modes_of_scipy():
    # SciPy's array layer passes np._CopyMode members for copy=: taken as None / True
    g = gj.grad(lambda x: np.array(x, copy=np._CopyMode.IF_NEEDED).sum()
                + np.array(x, copy=np._CopyMode.ALWAYS).sum())(Y)
    np.testing.assert_allclose(g, 2 * np.ones_like(Y))
