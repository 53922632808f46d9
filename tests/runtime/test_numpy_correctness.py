"""NumPy-facing results that used to be silently wrong: each checked against NumPy itself.

Values against NumPy's own function; gradients against central finite differences
(float64) of NumPy's own function, in ``gj.grad`` compiled and interpreted
(``GRADJIT_EXECUTOR=numpy``), on several shapes (batched, size-1, 0-d where the
function has them); second order (``gj.grad`` of ``gj.grad``) against finite
differences of the first-order gradient where the backward is differentiable.

- eigh / eigvalsh of a non-symmetric matrix read one triangle (UPLO 'L' / 'U'):
  the gradient is zero on the other one. ``gj.linalg.eigh`` keeps torch's
  symmetric gradient.
- pow at a zero base: d/dy 0**y is 0 for y >= 0 (torch's convention, the limit
  for y > 0); d/dx x**y at 0 follows torch (0 for y = 0, 1 for y = 1); no NaN in
  reverse mode, forward mode (``gj.jvp``) or second order.
- std of a constant slice: gradient 0 (a subgradient), not 0/0.
- dtype promotion in np.linalg (float32 with float64 is float64, integers float64).
- ``np.array(tensor)`` copies (NumPy 2's ``__array__(copy=True)``): writing to it used to
  change the tensor; ``np.asarray`` shares, as with torch; ``copy=False`` never copies.
- A list holding a traced scalar among the parts of ``np.concatenate`` / ``hstack`` /
  ``stack`` / ``vstack`` became an array of Python objects, which crashed when the code ran;
  it is built from its elements as ``np.array`` of it would be.
- ``np.take(table, i)`` of a NumPy table and a traced index crashed (NumPy's dispatch does
  not look at the index); ``table[i]`` raises an error that says to write ``np.take``.
- A float base to an integer exponent array (``x ** n``, ``0.0 ** n``) raised
  ZeroDivisionError in compiled code at ``0.0 ** -1`` (Numba's integer power): inf as NumPy.
- ``np.searchsorted`` of a NaN query said 0 (it counted ``a < nan``): NaN sorts last, as in
  NumPy, NaNs inside ``a`` included.
- ``np.interp`` next to an infinite or NaN ``fp`` said NaN: NumPy gives ``fp[j]`` exactly at a
  knot, tries the right knot when the left one gives NaN (inf between), and with one sample
  point gives ``fp[0]`` for a NaN ``x``.
- ``np.convolve`` of a 0-d operand raised "too deep": NumPy makes it length 1 (``np.correlate``
  refuses it, as NumPy's).

np.dot's rules and np.cross / np.inner / np.trace / np.vdot / np.outer /
np.linalg.multi_dot: ``test_numpy_products.py`` (these helpers).
"""
from __future__ import annotations

import numpy as np
import pytest

import gradjit as gj
from tests.marks import COMPILED_SLOW
from gradjit.tracer.ops_reduce import std_from_var
from gradjit.tracer.trace import trace
from tests.fd import numerical_grad

_rng = np.random.default_rng(2024)


def _weights(f, args):
    return _rng.standard_normal(np.shape(f(*args)))


def check(f, args, argnums=None, W=None, rtol=1e-6, atol=1e-7):
    """f's value against NumPy's, and the gradient of sum(f * W) against finite differences."""
    argnums = tuple(range(len(args))) if argnums is None else argnums
    want = np.asarray(f(*args))
    got = np.asarray(gj.jit(lambda *a: f(*a))(*args))
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype, want.dtype)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    W = _weights(f, args) if W is None else W
    grads = gj.grad(lambda *a: (f(*a) * W).sum(), argnums=argnums)(*args)
    for i, g in zip(argnums, grads):
        fd = numerical_grad(lambda *a: f(*a) * W, args, i)
        np.testing.assert_allclose(g, fd, rtol=rtol, atol=atol, err_msg=f"input {i}")
    return W


def check_second_order(f, args, argnum=0, rtol=1e-5, atol=1e-6, W=None):
    """gj.grad of gj.grad: the gradient of sum(grad(x) * V) against finite differences
    of the (already checked) first-order gradient."""
    W = _weights(f, args) if W is None else W
    g = gj.grad(lambda *a: (f(*a) * W).sum(), argnums=argnum)
    V = _rng.standard_normal(np.shape(args[argnum]))
    got = gj.grad(lambda *a: (g(*a) * V).sum(), argnums=argnum)(*args)
    fd = numerical_grad(lambda *a: g(*a) * V, args, argnum)
    np.testing.assert_allclose(got, fd, rtol=rtol, atol=atol)


# -- 1. eigh / eigvalsh read one triangle ---------------------------------------------------------
def _nonsymmetric(*shape):
    """A non-symmetric matrix whose triangles (either one) have well separated eigenvalues."""
    n = shape[-1]
    return _rng.standard_normal(shape) * 0.3 + np.diag(np.arange(n) * 2.0)


def _eigvecs_sign_free(a, UPLO):
    return np.linalg.eigh(a, UPLO)[1] ** 2


@pytest.mark.parametrize("UPLO", ["L", "U"])
@COMPILED_SLOW
def test_eigh_gradient_is_numpys_on_non_symmetric_input(UPLO, executor):
    a = _nonsymmetric(3, 3)
    W = check(lambda x: np.linalg.eigvalsh(x, UPLO=UPLO), [a])
    g = gj.grad(lambda x: (np.linalg.eigvalsh(x, UPLO=UPLO) * W).sum())(a)
    unread = np.triu(g, 1) if UPLO == "L" else np.tril(g, -1)
    assert not unread.any()   # the triangle NumPy never reads
    check(lambda x: _eigvecs_sign_free(x, UPLO) + np.linalg.eigh(x, UPLO)[0][..., None, :], [a])


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("UPLO", ["L", "U"])
@COMPILED_SLOW
def test_eigh_vectors_are_numpys_with_their_signs(UPLO, dtype, executor):
    """LAPACK's eigenvector signs differ between UPLO='L' and 'U' (n >= 3 here): the
    vectors themselves, not only up to sign, are NumPy's, and so is their gradient. In
    float32 only up to sign: compiled code runs SciPy's LAPACK build, NumPy its own, and
    their float32 rounding may flip a sign."""
    a = np.stack([_nonsymmetric(5, 5), _nonsymmetric(5, 5) + np.eye(5)]).astype(dtype)
    got = gj.jit(lambda x: np.linalg.eigh(x, UPLO)[1])(a)
    want = np.linalg.eigh(a, UPLO)[1]
    assert got.dtype == want.dtype
    if dtype == np.float32:
        got = got * np.sign(np.sum(got * want, axis=-2, keepdims=True))
    np.testing.assert_allclose(got, want, atol=1e-12 if dtype == np.float64 else 1e-5)
    if dtype == np.float64:
        check(lambda x: np.linalg.eigh(x, UPLO)[1], [a[0]])


@pytest.mark.parametrize("shape", [(2, 3, 3), (1, 1), (2, 1, 1), (4, 4)])
@pytest.mark.parametrize("UPLO", ["L", "U"])
def test_eigh_shapes(shape, UPLO, interpreted):
    a = _nonsymmetric(*shape)
    check(lambda x: np.linalg.eigvalsh(x, UPLO), [a])
    check(lambda x: _eigvecs_sign_free(x, UPLO), [a])


@pytest.mark.parametrize("UPLO", ["L", "U"])
def test_eigh_second_order(UPLO, interpreted):
    a = _nonsymmetric(3, 3)
    check_second_order(lambda x: np.linalg.eigvalsh(x, UPLO), [a])
    check_second_order(lambda x: _eigvecs_sign_free(x, UPLO), [a])


def test_eigh_never_reads_the_other_triangle(interpreted):
    a = _nonsymmetric(3, 3)
    a[0, 2] = np.nan   # NumPy ignores it (UPLO='L'); so must the value and the gradient
    got = gj.jit(lambda x: np.linalg.eigvalsh(x))(a)
    np.testing.assert_allclose(got, np.linalg.eigvalsh(a), rtol=1e-12)
    g = gj.grad(lambda x: np.linalg.eigvalsh(x).sum())(a)
    assert np.isfinite(g).all() and g[0, 2] == 0


def test_eigh_integer_input_is_float64_and_bad_uplo_raises(interpreted):
    a = np.array([[2, 1], [5, 3]])
    got = gj.jit(lambda x: np.linalg.eigvalsh(x))(a)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, np.linalg.eigvalsh(a), rtol=1e-12)
    with pytest.raises(ValueError, match="UPLO"):
        gj.jit(lambda x: np.linalg.eigh(x, UPLO="X"))(a.astype(float))


def test_torch_style_eigh_keeps_torchs_symmetric_gradient(interpreted):
    """gj.linalg.eigh on tensors: values of the lower triangle (torch's UPLO='L' too) and the
    gradient torch gives, V diag(W) V' for sum(W * eigenvalues): symmetric, not NumPy's."""
    a = _nonsymmetric(3, 3)
    W = _rng.standard_normal(3)
    t = gj.tensor(a, requires_grad=True)
    w = gj.linalg.eigh(t).eigenvalues
    np.testing.assert_allclose(np.asarray(w.data), np.linalg.eigvalsh(a), rtol=1e-12)
    (w * W).sum().backward()
    V = np.linalg.eigh(a)[1]
    np.testing.assert_allclose(np.asarray(t.grad.data), V @ np.diag(W) @ V.T, atol=1e-12)


# -- 2. pow at a zero base ------------------------------------------------------------------------
# exponents >= 0: the gradient is the limit, 0 (at y = 0 by torch's convention)
Y = np.array([2.0, 0.0, 1.0, 3.0, 0.5, 1.5])
POW_FORMS = {"np.power": lambda y: np.power(0.0, y), "rpow": lambda y: 0.0 ** y,
             "const-array": lambda y: np.power(np.zeros(np.shape(y)), y)}


@pytest.mark.parametrize("form", sorted(POW_FORMS))
def test_pow_zero_base_exponent_gradient_is_zero(form, executor):
    f = POW_FORMS[form]
    for y in (Y, Y.reshape(2, 3), np.array(2.0), np.array([0.0])):
        np.testing.assert_array_equal(gj.jit(f)(y), f(y))
        g = gj.grad(lambda y: f(y).sum())(y)
        # 0 everywhere: the limit where y > 0, torch's convention at y = 0
        np.testing.assert_array_equal(g, np.zeros(np.shape(y)))
    pos = Y[Y > 0]   # finite differences of NumPy's function are defined there
    np.testing.assert_array_equal(numerical_grad(f, [pos], 0), np.zeros(pos.shape))


def test_pow_zero_base_negative_exponent_is_minus_inf_as_torch(interpreted):
    g = gj.grad(lambda y: np.power(0.0, y).sum())(np.array([-1.0, 2.0]))
    np.testing.assert_array_equal(g, [-np.inf, 0.0])


def test_pow_at_zero_base_both_gradients(executor):
    x = np.zeros(4)
    y = np.array([0.0, 1.0, 2.0, 3.0])
    gx, gy = gj.grad(lambda x, y: (x ** y).sum(), argnums=(0, 1))(x, y)
    np.testing.assert_array_equal(gx, [0.0, 1.0, 0.0, 0.0])   # d x**y / dx at 0 (torch)
    np.testing.assert_array_equal(gy, [0.0, 0.0, 0.0, 0.0])
    np.testing.assert_allclose(gx, numerical_grad(lambda x: x ** y, [x], 0), atol=1e-9)
    # broadcast: a (3,) base of zeros against (2, 3) exponents
    x3, y23 = np.zeros(3), np.array([[0.0, 1.0, 2.0], [2.0, 1.0, 0.0]])
    gx, gy = gj.grad(lambda x, y: (x ** y).sum(), argnums=(0, 1))(x3, y23)
    np.testing.assert_array_equal(gx, [0.0, 2.0, 0.0])
    np.testing.assert_array_equal(gy, np.zeros((2, 3)))


def test_pow_at_zero_base_tensor_mode(interpreted):
    x = gj.tensor(np.zeros(4), requires_grad=True)
    y = gj.tensor(np.array([0.0, 1.0, 2.0, 0.5]), requires_grad=True)
    (x ** y).sum().backward()
    np.testing.assert_array_equal(np.asarray(x.grad.data), [0.0, 1.0, 0.0, np.inf])
    np.testing.assert_array_equal(np.asarray(y.grad.data), np.zeros(4))


def test_pow_at_zero_base_forward_mode(executor):
    x, y, ones = np.zeros(4), np.array([0.0, 1.0, 2.0, 3.0]), np.ones(4)
    _, ty = gj.jvp(lambda y: np.power(0.0, y), (y,), (ones,))
    np.testing.assert_array_equal(ty, np.zeros(4))
    _, t = gj.jvp(lambda x, y: x ** y, (x, y), (ones, ones))
    np.testing.assert_array_equal(t, [0.0, 1.0, 0.0, 0.0])


@COMPILED_SLOW
def test_pow_at_zero_base_second_order(executor):
    x, y = np.zeros(4), np.array([0.0, 1.0, 2.0, 3.0])
    d = gj.grad(lambda x, y: (x ** y).sum())
    got = gj.grad(lambda x, y: d(x, y).sum())(x, y)   # diagonal of d2/dx2
    np.testing.assert_array_equal(got, [0.0, 0.0, 2.0, 0.0])
    np.testing.assert_allclose(got, numerical_grad(lambda x, y: d(x, y), [x, y], 0), atol=1e-6)
    dy = gj.grad(lambda y: np.power(0.0, y).sum())
    yy = np.array([0.5, 1.0, 2.0])
    np.testing.assert_array_equal(gj.grad(lambda y: dy(y).sum())(yy), np.zeros(3))


NEG_POW_FORMS = {"rpow": lambda y: (-2.0) ** y, "np.power": lambda y: np.power(-2.0, y),
                 "int-base": lambda y: (-2) ** y, "np.float64": lambda y: np.float64(-2.0) ** y}


@pytest.mark.parametrize("form", sorted(NEG_POW_FORMS))
def test_pow_negative_constant_base_exponent_gradient_is_nan(form, executor):
    """d(c ** y)/dy = c ** y * log(c) is NaN for a constant c < 0, as torch's and JAX's
    (building the backward raised "math domain error" from math.log)."""
    f, y = NEG_POW_FORMS[form], np.array([2.0, 3.0, 0.5])
    with np.errstate(invalid="ignore"):
        want = f(y)
    v, g = gj.value_and_grad(lambda y: f(y).sum())(y)
    np.testing.assert_array_equal(v, want.sum())
    np.testing.assert_array_equal(g, np.full(3, np.nan))
    np.testing.assert_array_equal(gj.jvp(f, (y,), (np.ones(3),))[1], np.full(3, np.nan))
    x = gj.tensor(y, requires_grad=True)
    f(x).sum().backward()
    np.testing.assert_array_equal(np.asarray(x.grad.data), np.full(3, np.nan))


def test_pow_away_from_zero_unchanged(interpreted):
    x = _rng.uniform(0.5, 2.0, (2, 3))
    y = _rng.uniform(-1.0, 2.0, (3,))
    check(lambda x, y: x ** y, [x, y])
    check(lambda y: np.power(1.7, y), [y])
    check_second_order(lambda x, y: x ** y, [x, y], 0)
    check_second_order(lambda x, y: x ** y, [x, y], 1)


# -- 3. std of a constant -------------------------------------------------------------------------
def _std_via_op(x, axis=None, ddof=0):
    """np.std spelled with std_from_var (what np.std becomes once wired to it)."""
    n = int(np.prod(x.shape)) if axis is None else x.shape[axis]
    d = x - np.mean(x, axis=axis, keepdims=True)
    return std_from_var(np.sum(d * d, axis=axis) / (n - ddof))


STD_INPUTS = [
    ("constant", np.ones(4), None),
    ("constant-row", np.array([[2.5, 2.5, 2.5], [1.0, 2.0, 4.0]]), 1),
    ("size-1-axis", np.array([[1.0], [3.0]]), 1),
    ("zeros-2d", np.zeros((2, 3)), 0),
    ("0-d", np.array(3.0), None),
]


@pytest.mark.parametrize("name, x, axis", STD_INPUTS, ids=[s[0] for s in STD_INPUTS])
@COMPILED_SLOW
def test_std_of_constant_has_zero_gradient(name, x, axis, executor):
    f = lambda x: _std_via_op(x, axis)   # noqa: E731
    np.testing.assert_allclose(gj.jit(f)(x), np.std(x, axis=axis), atol=1e-15)
    g = gj.grad(lambda x: f(x).sum())(x)
    fd = numerical_grad(lambda x: np.std(x, axis=axis), [x], 0)
    assert np.isfinite(g).all()
    np.testing.assert_allclose(g, fd, atol=1e-8)


def test_std_away_from_zero_and_second_order(interpreted):
    x = _rng.standard_normal((3, 4))
    for axis, ddof in [(None, 0), (0, 1), (1, 0)]:
        want = np.std(x, axis=axis, ddof=ddof)
        np.testing.assert_allclose(gj.jit(lambda x: _std_via_op(x, axis, ddof))(x), want)
        W = _weights(lambda x: want, [x])
        g = gj.grad(lambda x: (_std_via_op(x, axis, ddof) * W).sum())(x)
        fd = numerical_grad(lambda x: np.std(x, axis=axis, ddof=ddof) * W, [x], 0)
        np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8)
    check_second_order(lambda x: _std_via_op(x, 1), [x], W=_rng.standard_normal(3))
    # at a constant row: finite (0 is a valid choice there: std has no Hessian at 0)
    c = np.array([[1.0, 1.0, 1.0], [0.0, 1.0, 3.0]])
    d = gj.grad(lambda x: _std_via_op(x, 1).sum())
    h = gj.grad(lambda x: (d(x) * np.arange(6.0).reshape(2, 3)).sum())(c)
    assert np.isfinite(h).all() and not h[0].any()


def test_std_tensor_mode_forward_mode_and_float32(interpreted):
    x = gj.tensor(np.full((2, 3), 0.5), requires_grad=True)
    std_from_var(((x - x.mean(1, keepdim=True)) ** 2).mean(1)).sum().backward()
    np.testing.assert_array_equal(np.asarray(x.grad.data), np.zeros((2, 3)))
    _, t = gj.jvp(lambda x: _std_via_op(x, 1), (np.ones((2, 3)),), (np.ones((2, 3)),))
    np.testing.assert_array_equal(t, np.zeros(2))
    x32 = np.ones((2, 3), np.float32)
    g = gj.grad(lambda x: _std_via_op(x, 1).sum())(x32)
    assert g.dtype == np.float32 and not g.any()


def test_np_std_uses_the_masked_op(interpreted):
    g, (t,), _ = trace([np.ones(3)])
    g.outputs = [np.std(t).value]
    assert "_std_from_var.default" in {n.op for n in g.nodes}   # (np.std: numpy_reduce.np_std)
    x = np.array([[2.0, 2.0, 2.0], [1.0, 2.0, 4.0]])
    got = gj.grad(lambda x: np.std(x, axis=1).sum())(x)
    np.testing.assert_allclose(got, numerical_grad(lambda x: np.std(x, axis=1), [x], 0),
                               atol=1e-8)
    assert not got[0].any()


# -- 5. dtype promotion in np.linalg --------------------------------------------------------------
def _wc(n, *batch):
    return _rng.standard_normal(batch + (n, n)) * 0.3 + np.eye(n) * n


@COMPILED_SLOW
@pytest.mark.parametrize("bshape", [(3,), (3, 2), (2, 3, 1)])
def test_solve_promotes_float32_and_float64(bshape, executor):
    A = _wc(3)
    b32 = _rng.standard_normal(bshape).astype(np.float32)
    want = np.linalg.solve(A, b32)
    assert want.dtype == np.float64
    check(np.linalg.solve, [A, b32.astype(np.float64)])
    got = gj.jit(lambda A, b: np.linalg.solve(A, b))(A, b32)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-12)
    gA, gb = gj.grad(lambda A, b: np.linalg.solve(A, b).sum(), argnums=(0, 1))(A, b32)
    fd = numerical_grad(lambda A: np.linalg.solve(A, b32), [A], 0)
    np.testing.assert_allclose(gA, fd, rtol=1e-5, atol=1e-6)
    assert gb.dtype == np.float32   # a gradient keeps its input's dtype
    # float32 matrix, float64 right-hand side (a constant): float64 too
    got = gj.jit(lambda b: np.linalg.solve(A.astype(np.float32), b))(b32.astype(np.float64))
    assert got.dtype == np.float64


def test_linalg_promotion_elsewhere(interpreted):
    A, B = _wc(3), _rng.standard_normal((4, 2))
    tall = _rng.standard_normal((4, 3))
    sol = gj.jit(lambda a, b: np.linalg.lstsq(a, b)[0])(tall.astype(np.float32), B)
    assert sol.dtype == np.float64
    np.testing.assert_allclose(sol, np.linalg.lstsq(tall.astype(np.float32), B)[0], rtol=1e-6)
    ints = np.array([[2, 1], [1, 3]])
    for fn in (np.linalg.inv, np.linalg.det, np.linalg.pinv, np.linalg.cholesky):
        got = gj.jit(lambda x: fn(x) * 1.0)(ints)   # the traced input is int: a constant path
        assert got.dtype == np.float64, fn.__name__
        np.testing.assert_allclose(got, fn(ints), rtol=1e-12)
    check(lambda a: np.linalg.inv(a), [A])
    x32 = A.astype(np.float32)
    assert gj.jit(lambda x: np.linalg.inv(x))(x32).dtype == np.float32   # float32 alone stays


def test_np_array_of_a_tensor_is_a_copy_and_asarray_shares():
    t = gj.tensor(np.array([1.0, 2.0]))
    a = np.array(t)
    a[0] = 5.0
    np.testing.assert_array_equal(t.numpy(), [1.0, 2.0])
    b = np.asarray(t)
    b[1] = 7.0
    np.testing.assert_array_equal(t.numpy(), [1.0, 7.0])
    assert np.asarray(t, dtype=np.float32).dtype == np.float32
    assert np.shares_memory(np.asarray(t, copy=False), t.numpy())
    with pytest.raises(ValueError, match="copy=False"):
        np.asarray(t, dtype=np.float32, copy=False)


def _lists_of_scalars(a):
    return (np.concatenate([a, [a[0] * 2]]) ** 2).sum() + (np.hstack([a, (a[1], 1.0)]) ** 3).sum() \
        + (np.stack([a, [a[0] * 2, 1.0, a[2]]]) * np.arange(6.0).reshape(2, 3)).sum() \
        + np.vstack([a, (a[2], a[0], 0.5)]).prod()


def _table_lookup(xq):   # piecewise-linear interpolation in a NumPy table
    xg, yg = np.array([0.0, 0.2, 0.5, 0.9, 1.0]), np.array([1.0, 3.0, 2.0, 5.0, 4.0])
    i = np.clip(np.searchsorted(xg, xq) - 1, 0, 3)
    x0, x1 = np.take(xg, i), np.take(xg, i + 1, axis=0)
    t = (xq - x0) / (x1 - x0)
    return (np.take(yg, i) * (1 - t) + np.take(yg, i + 1) * t).sum()


@pytest.mark.parametrize("f", [_lists_of_scalars, _table_lookup])
@COMPILED_SLOW
def test_lists_of_traced_scalars_and_numpy_tables(f, executor):
    x = np.array([0.3, 0.55, 0.7])
    np.testing.assert_allclose(gj.jit(f)(x), f(x), rtol=1e-13)
    np.testing.assert_allclose(gj.grad(f)(x), numerical_grad(f, [x], 0), rtol=1e-6)


def test_a_numpy_table_indexed_by_a_traced_index_says_what_to_write(interpreted):
    table = np.array([1.0, 3.0, 2.0])

    def f(x):
        return (table[np.clip(x.astype(np.int64), 0, 2)] * x).sum()
    with pytest.raises(gj.GradjitError, match=r"np.take\(table, i, axis=0\)") as e:
        gj.grad(f)(np.array([0.5, 1.5]))
    assert "table[np.clip" in str(e.value)


@pytest.mark.parametrize("side", ["left", "right"])
def test_searchsorted_sorts_nan_last(side, executor):
    v = np.array([0.5, np.nan, 1.0, -np.inf, np.inf])
    f = lambda a, v: np.searchsorted(a, v, side=side)
    for a in (np.array([0.0, 1.0, 2.0]), np.array([0.0, 1.0, np.nan, np.nan])):
        got, want = gj.jit(f)(a, v), f(a, v)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


@COMPILED_SLOW
def test_interp_next_to_infinite_or_nan_fp_as_numpy(executor):
    xp = np.arange(4.0)
    xs = np.array([-1.0, 0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 4.0, np.nan, np.inf, -np.inf])
    f = lambda x, fp: np.interp(x, xp, fp)
    for fp in ([1.0, np.inf, -2.0, 4.0], [1.0, np.nan, -2.0, 4.0], [1.0, -np.inf, -np.inf, 4.0],
               [np.inf, np.inf, 1.0, 2.0]):
        fp = np.array(fp)
        np.testing.assert_array_equal(gj.jit(f)(xs, fp), f(xs, fp))
    one = lambda x: (np.interp(x, np.array([1.0]), np.array([5.0])),
                     np.interp(x, np.array([1.0]), np.array([5.0]), left=-1.0, right=7.0))
    x1 = np.array([np.nan, 0.0, 1.0, 2.0])
    for got, want in zip(gj.jit(one)(x1), one(x1), strict=True):
        np.testing.assert_array_equal(got, want)
    # finite data: the gradients are as before (finite differences of NumPy's interp)
    fp, x = np.array([1.0, 2.0, 3.0, 5.0]), np.array([0.5, 1.0, 1.2, 2.5])
    W = np.array([1.0, -2.0, 0.5, 3.0])
    g = gj.grad(lambda fp: (np.interp(x, xp, fp) * W).sum())(fp)
    np.testing.assert_allclose(g, numerical_grad(lambda fp: np.interp(x, xp, fp) * W, [fp], 0),
                               rtol=1e-6, atol=1e-8)
    xo = np.array([0.5, 1.2, 2.5])
    np.testing.assert_allclose(gj.grad(lambda x: np.interp(x, xp, fp).sum())(xo), [1.0, 1.0, 2.0])


@COMPILED_SLOW
def test_convolve_of_a_zero_d_operand_is_length_one(executor):
    x = np.array([1.0, -2.0, 3.5])
    check(lambda x: np.convolve(np.array(2.0), x), [x])
    check(lambda x: np.convolve(x, x[1], mode="same"), [x])
    check(lambda x: np.convolve(x[0], x[2], mode="valid"), [x])
    for f, depth in ((lambda x: np.correlate(np.array(2.0), x), "too small depth"),
                     (lambda x: np.convolve(np.ones((2, 2)), x), "too deep")):
        with pytest.raises(ValueError, match=depth):
            f(x)
        with pytest.raises(ValueError, match=depth):
            gj.jit(f)(x)


def test_float_base_to_integer_exponent_array_at_zero(executor):
    x, n = np.array([0.0, 2.0, 0.0]), np.array([-1, 2, -3])
    fns = (lambda a, b: a ** b, lambda a, b: 0.0 ** b, lambda a, b: a.astype(np.float32) ** b,
           lambda a, b: a ** np.array([-5, -5, -5]))
    with np.errstate(divide="ignore"):
        gots = gj.jit(lambda a, b: tuple(f(a, b) for f in fns))(x, n)
        for f, got in zip(fns, gots, strict=True):
            want = f(x, n)
            assert got.dtype == want.dtype
            np.testing.assert_array_equal(got, want)
