"""NumPy's result dtypes (and the values computed in them), compiled and interpreted.

The conformance table (tests/conformance) checks these on the interpreter; here the same
rules run through the Numba code generator too (the ``executor`` fixture), in ``gj.jit``,
``gj.grad`` and tensor mode:

- float ufuncs of int8 / uint8 / bool give float16, of int16 / uint16 float32 (NumPy's
  smallest float loop; Numba has no float16, so such a graph runs on the interpreter);
- np.reciprocal of integers is integer, np.square of bool int8;
- sum / prod / cumsum / cumprod of unsigned integers accumulate in uint64; with an integer
  ``dtype=`` their result (mean's too, truncated) is in it;
- scipy.special.xlogy(float32 array, Python float) is float64 (SciPy's loop);
- bit operations (& | ^ ~ << >>) of integers of every width, bools and Python ints (weak:
  uint8 & 5 is uint8), shift counts past the width included;
- a NumPy scalar operand is strong (float32 array * np.float64(2) is float64), a Python
  number weak (float32 array * 2.0 stays float32); torch tensors keep torch's weak rule;
- np.linalg.qr(a, mode='complete') of a tall matrix: NumPy's (m, m) Q, and a gradient
  that raises a GradjitError saying why;
- arguments in non-native byte order (``>f8``) are their native values to a transform.
- what NumPy refuses is refused at trace time with NumPy's exception and message and the
  user's line (the compiled tier computed numbers): an integer to a negative integer power,
  a Python int out of an integer array's range (NEP 50), ``-`` of bools;
- bool ** 2 is int8 (NumPy's square), bool ** True and bool % True int8 (its int8 loops).
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.special as sp

import gradjit as gj
from tests.marks import COMPILED_SLOW
from gradjit.runtime.tiers import holds_float16
from gradjit.tracer.numpy_args import UnsupportedError
from gradjit.tracer.trace import trace
from tests.fd import numerical_grad

_X = np.array([[1, 2, 3], [4, 5, 7]])


def _same(got, want, rtol=1e-12):
    got = np.asarray(got)
    assert got.shape == want.shape and got.dtype == want.dtype, (got.dtype, want.dtype)
    if want.dtype.kind == "f" and want.dtype.itemsize < 8:
        rtol = 1e-3 if want.dtype.itemsize == 2 else 1e-6
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol,
                               equal_nan=True)


_FLOAT_UFUNCS = [np.exp, np.log, np.sqrt, np.sin, np.tanh, np.log1p, np.arctan, np.cbrt,
                 np.rint, np.deg2rad, sp.expit, sp.erf, sp.logit]


@pytest.mark.parametrize("dt", [np.uint8, np.int8, np.bool_, np.int16, np.uint16, np.int32])
def test_float_ufuncs_of_narrow_integers(dt, executor):
    x = _X.astype(dt)
    with np.errstate(all="ignore"):
        # every ufunc in one traced function: one compile per dtype, not one per ufunc
        gots = gj.jit(lambda a: tuple(uf(a) for uf in _FLOAT_UFUNCS))(x)
        for uf, got in zip(_FLOAT_UFUNCS, gots, strict=True):
            want = uf(x)
            _same(got, want)
            _same(uf(gj.tensor(x)), want)


@pytest.mark.parametrize("dt", [np.int64, np.int32, np.int8, np.uint8, np.uint16, np.bool_])
def test_reciprocal_of_integers_is_integer(dt, executor):
    x = np.array([[-2, -1, 1], [2, 3, 1]]).astype(dt) if dt != np.bool_ else _X > 2
    with np.errstate(divide="ignore", invalid="ignore"):   # (1 / False)
        want = np.reciprocal(x)
        _same(gj.jit(lambda a: np.reciprocal(a))(x), want)
        _same(np.reciprocal(gj.tensor(x)), want)
        # the float reciprocal (and 1 / x of integers) is unchanged
        _same(gj.jit(lambda a: 1 / a)(x), 1 / x)
        _same(gj.jit(lambda a: np.reciprocal(a * 0.5))(x), np.reciprocal(x * 0.5))


def test_square_of_bool_and_binary_ufuncs_of_narrow_integers(executor):
    b = _X > 2
    _same(gj.jit(lambda a: np.square(a))(b), np.square(b))
    u, i8 = _X.astype(np.uint8), _X.astype(np.int8)
    for f in (np.arctan2, np.hypot, np.logaddexp, np.power, np.divide):
        _same(gj.jit(lambda a, c: f(a, c))(u, i8), f(u, i8))
    _same(gj.jit(lambda a: np.multiply(a, np.float32(1.5)))(i8), np.multiply(i8, np.float32(1.5)))
    _same(gj.jit(lambda a: a - np.full(3, 4, np.uint8))(u), u - np.full(3, 4, np.uint8))
    _same(gj.jit(lambda a: np.heaviside(a - 3, np.full(3, 0.5)))(i8),
          np.heaviside(i8 - 3, np.full(3, 0.5)))


@pytest.mark.parametrize("dt", [np.uint8, np.uint16, np.uint32, np.uint64, np.int8, np.bool_])
def test_sum_prod_cumsum_accumulators(dt, executor):
    x = _X.astype(dt)
    fs = (np.sum, lambda a: np.sum(a, axis=1), lambda a: np.prod(a, axis=0), np.prod,
          np.cumsum, lambda a: np.cumprod(a, axis=1), lambda a: np.sum(a, axis=()),
          lambda a: np.add.reduce(a), lambda a: a.sum(0))
    gots = gj.jit(lambda a: tuple(f(a) for f in fs))(x)   # (one compile per dtype)
    for f, got in zip(fs, gots, strict=True):
        want = f(x)
        _same(got, want)
        _same(f(gj.tensor(x)), want)


@pytest.mark.parametrize("x", [np.array([[0.6, 1.7, -2.2], [1.4, 0.2, 3.9]]) * 3,
                               _X.astype(np.int16)], ids=["float", "int16"])
def test_integer_dtype_of_reductions_and_scans(x, executor):
    # the result is in dtype= (it was int64, and mean's float64); NumPy accumulates in it:
    # int8 products wrap, and the mean's quotient truncates toward zero ([1, 5, -6] -> 0)
    fs = (lambda a: np.sum(a, axis=0, dtype=np.int32), lambda a: np.sum(a, dtype=np.uint8),
          lambda a: np.cumsum(a, dtype=np.int32), lambda a: np.cumprod(a, axis=1, dtype=np.int16),
          lambda a: np.prod(a * 5, axis=0, dtype=np.int8), lambda a: np.nansum(a, dtype=np.int32),
          lambda a: np.nancumsum(a, axis=0, dtype=np.int32),
          lambda a: np.mean(a, axis=1, dtype=np.int64), lambda a: np.mean(a, dtype=np.int32),
          lambda a: np.mean(a, axis=0, dtype=np.int64, keepdims=True),
          lambda a: np.mean(a, axis=1, dtype=np.int64, where=np.array([True, False, True])),
          lambda a: np.trace(a, dtype=np.int32), lambda a: np.sum(a, axis=1, dtype=np.float32),
          lambda a: np.sum(a, initial=0.5))
    methods = (lambda a: a.sum(axis=1, dtype=np.int32), lambda a: a.mean(axis=1, dtype=np.int64),
               lambda a: a.cumprod(dtype=np.int32))   # (NumPy's: a traced array's methods)
    gots = gj.jit(lambda a: tuple(f(a) for f in fs + methods))(x)   # (one compile per dtype)
    for f, got in zip(fs + methods, gots, strict=True):
        _same(got, f(x))
    for f in fs:
        _same(f(gj.tensor(x)), f(x))
    _same(gj.tensor(x).sum(1, dtype=np.int32), np.sum(x, 1, dtype=np.int32))   # (torch's too)
    with pytest.raises(UnsupportedError, match=r"np.var\(\.\.\., dtype=int64\)"):
        gj.jit(lambda a: np.var(a, axis=1, dtype=np.int64))(x)


def test_xlogy_float32_with_python_float(executor):
    x = np.array([0.0, 0.5, 2.0], np.float32)
    for f in (lambda a: sp.xlogy(a, 1.7), lambda a: sp.xlogy(a, np.float32(1.7)),
              lambda a: sp.xlogy(1.7, a + 1)):
        _same(gj.jit(f)(x), f(x), rtol=1e-6)
        _same(f(gj.tensor(x)), f(x), rtol=1e-6)


def test_gradient_through_a_float16_intermediate(executor):
    u, w = np.array([1, 2, 3], np.uint8), np.array([0.5, -1.5, 2.0])

    def f(w, u):
        return (w * np.exp(u) + np.sqrt(u) * w ** 2).sum()

    assert np.exp(u).dtype == np.float16
    np.testing.assert_allclose(gj.jit(f)(w, u), f(w, u), rtol=1e-12)
    fd = numerical_grad(lambda w: f(w, u), [w], 0)   # (NumPy's f: float16 exp and sqrt)
    np.testing.assert_allclose(gj.grad(f)(w, u), fd, rtol=1e-7)
    t = gj.tensor(w, requires_grad=True)
    f(t, u).backward()
    np.testing.assert_allclose(np.asarray(t.grad), fd, rtol=1e-7)


def test_float16_graphs_run_on_the_interpreter():
    g, (t,), _ = trace([np.ones(3, np.uint8)])
    g.outputs = [np.exp(t).value]
    assert holds_float16(g)
    g, (t,), _ = trace([np.ones(3, np.int32)])
    g.outputs = [np.exp(t).value]
    assert not holds_float16(g)


@COMPILED_SLOW
@pytest.mark.parametrize("shape", [(4, 2), (2, 5, 3), (3, 1), (3, 0), (3, 3), (2, 4)])
def test_qr_complete_forward(shape, executor):
    a = np.random.default_rng(3).standard_normal(shape)
    q, r = gj.jit(lambda a: np.linalg.qr(a, mode="complete"))(a)
    q0, r0 = np.linalg.qr(a, mode="complete")
    _same(q, q0)
    _same(r, r0)
    qt, rt = np.linalg.qr(gj.tensor(a), mode="complete")
    _same(np.asarray(qt), q0)
    _same(np.asarray(rt), r0)
    # Q's square part still carries a gradient when the matrix is not tall
    if shape[-2] <= shape[-1] and 0 not in shape:
        g = gj.grad(lambda a: (np.linalg.qr(a, mode="complete")[1] ** 2).sum())(a)
        fd = numerical_grad(lambda a: np.linalg.qr(a, mode="complete")[1] ** 2, [a], 0)
        np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8)


def test_qr_complete_of_a_tall_matrix_has_no_gradient(executor):
    a = np.random.default_rng(4).standard_normal((4, 2))
    why = r"mode='complete'\) is not differentiable when A has more rows than columns"
    with pytest.raises(gj.GradjitError, match=why) as e:
        gj.grad(lambda a: np.linalg.qr(a, mode="complete")[1].sum())(a)
    assert "test_numpy_dtypes.py" in str(e.value)   # the user's line
    t = gj.tensor(a, requires_grad=True)
    with pytest.raises(gj.GradjitError, match=why):
        np.linalg.qr(t, mode="complete")[0].sum().backward()
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # the reduced mode is differentiable as before
        g = gj.grad(lambda a: np.linalg.qr(a)[1].sum())(a)
    np.testing.assert_allclose(g, numerical_grad(lambda a: np.linalg.qr(a)[1], [a], 0),
                               rtol=1e-6, atol=1e-8)


def test_float_math_on_unsigned_operands_does_not_wrap(executor):
    # -x and 1 - x of a uint8 wrap around; NumPy casts to the float loop first
    u8, u32 = _X.astype(np.uint8), _X.astype(np.uint32)
    for f, x in [(sp.expit, u8), (lambda a: np.logaddexp(a, -a), u32),
                 (lambda a: np.exp(-a), u8), (lambda a: sp.logit(a / 8), u8)]:
        with np.errstate(all="ignore"):
            _same(gj.jit(f)(x), f(x))


def test_where_promotes_python_scalars_as_numpy(executor):
    u, b = _X.astype(np.uint8), _X > 2
    for f in (lambda c, a: np.where(c, a, 0.5), lambda c, a: np.where(c, 2.5, a),
              lambda c, a: np.where(c, a, 3), lambda c, a: np.where(c, 1.0, 0),
              lambda c, a: np.where(c, a * 1.0, np.float32(2))):
        _same(gj.jit(f)(b, u), f(b, u))
    x32 = _X.astype(np.float32)
    _same(gj.jit(lambda c, a: np.where(c, a, 0.5))(b, x32), np.where(b, x32, 0.5))


_MASK = np.array([True, False, True])
_OPERATORS = [lambda x, s: x * s, lambda x, s: s * x, lambda x, s: x - s, lambda x, s: s - x,
              lambda x, s: x / s, lambda x, s: s / x, lambda x, s: x ** s, lambda x, s: s + x,
              lambda x, s: x > s, lambda x, s: x % s, lambda x, s: np.where(_MASK, x, s),
              lambda x, s: np.clip(x, s, s * 2), lambda x, s: x.clip(None, s),
              lambda x, s: np.maximum(x, s)]


@pytest.mark.parametrize("scalar", [np.float64(2.0), np.float32(2.0), np.int64(2), np.int8(2),
                                    2.0, 2], ids=lambda s: f"{type(s).__name__}")
@pytest.mark.parametrize("dt", [np.float32, np.float64, np.int32, np.int64])
def test_numpy_scalars_are_strong_operands(dt, scalar, executor):
    x = np.array([1, 2, 3]).astype(dt)
    # every operator in one traced function: one compile per case, not one per operator
    got = gj.jit(lambda a: tuple(op(a, scalar) for op in _OPERATORS))(x)
    for op, g in zip(_OPERATORS, got, strict=True):
        _same(g, op(x, scalar))
    if np.dtype(dt).kind == "f":   # the gradient arrives in the input's dtype, right
        g = gj.grad(lambda a: (a * scalar * a).sum())(x)
        assert g.dtype == x.dtype
        np.testing.assert_allclose(g, 2 * float(scalar) * x, rtol=1e-6)


def test_torch_tensors_keep_numpy_scalars_weak():
    t = gj.tensor(np.ones(3, np.float32))
    assert (t * np.float64(2.0)).dtype == np.float32


_BIT_OPS = [lambda a, b: a & b, lambda a, b: np.bitwise_or(a, b), lambda a, b: a ^ b,
            lambda a, b: np.left_shift(a, b), lambda a, b: a >> b, lambda a, b: ~a,
            lambda a, b: a & 3, lambda a, b: a >> 2, lambda a, b: 5 | a]


@pytest.mark.parametrize("db", [np.int64, np.uint8, np.bool_])
@pytest.mark.parametrize("da", [np.int64, np.int32, np.uint8, np.int8, np.bool_])
def test_bit_operations(da, db, executor):
    rng = np.random.default_rng(0)
    a = rng.integers(-100, 100, (2, 3)).astype(da)
    b = (np.array([[0, 1, 7], [8, 63, 70]]) if db == np.int64 else
         rng.integers(0, 9, (2, 3))).astype(db)
    ops, wants = [], []
    for op in _BIT_OPS:
        try:
            wants.append(op(a, b))
            ops.append(op)
        except TypeError:
            with pytest.raises(TypeError):
                gj.jit(op)(a, b)
    # the operations NumPy takes, in one traced function: one compile per case, not nine
    gots = gj.jit(lambda x, y: tuple(op(x, y) for op in ops))(a, b)
    for op, got, want in zip(ops, gots, wants, strict=True):
        assert got.dtype == want.dtype and np.array_equal(got, want), (op, got, want)
    with pytest.raises(TypeError, match="bitwise_and"):
        gj.jit(lambda x: x & 1)(np.ones(2))


_NARROW = [lambda x, c: (x << 7) > 0, lambda x, c: (x << c) // 3, lambda x, c: (x << 1) >> 1,
           lambda x, c: (x + x) > 0, lambda x, c: (x * x) % 7, lambda x, c: (x + x) * 0.5,
           lambda x, c: -x + 1, lambda x, c: (x.astype(np.int16) * 300) // 7]


@pytest.mark.parametrize("dt", [np.int8, np.uint8, np.int16, np.uint32])
def test_narrow_integers_wrap_at_every_step(dt, executor):
    """Compiled loops compute narrow integers in 64 bits unless each step is cast back:
    ``(x << 7) > 0`` of int8 is False everywhere in NumPy."""
    x = np.array([1, -3, 64, -128, 127, 100]).astype(dt)
    c = np.array([7, 1, 2, 9, 3, 5]).astype(dt)
    gots = gj.jit(lambda x, c: tuple(op(x, c) for op in _NARROW))(x, c)   # (one compile)
    for op, got in zip(_NARROW, gots, strict=True):
        with np.errstate(all="ignore"):
            want = op(x, c)
        assert got.dtype == want.dtype and np.array_equal(got, want), (op, got, want)


def test_non_native_byte_order_arguments(executor):
    """Big-endian arrays are converted to native order at the argument boundary (Numba
    raised NumbaNotImplementedError for '>f8'): the same values, the native signature."""
    xb, xn = np.array([1.0, 2.0], dtype=">f8"), np.array([1.0, 2.0])
    g = gj.grad(lambda x: (x ** 2).sum())
    for x in (xb, xn, xb):   # (the hot path of a native signature meets '>f8' too)
        np.testing.assert_array_equal(g(x), [2.0, 4.0])
    assert g(xb).dtype == np.float64 and len(g._compiled) == 1
    ib = np.array([3, 4], dtype=">i4")
    got = gj.grad(lambda p, b: (p["a"] * b).sum())({"a": xb}, ib)
    np.testing.assert_array_equal(got["a"], [3.0, 4.0])
    np.testing.assert_array_equal(gj.jit(lambda x, b: x * b)(xb, ib), xn * ib)
    np.testing.assert_array_equal(gj.jacrev(lambda x: x * 2)(xb), 2 * np.eye(2))


@COMPILED_SLOW
def test_lists_and_quantile_q_promote_as_numpy(executor):
    # np.array([float32 value, 1.0]) is float64 (NumPy makes the Python number an array
    # first: not weak there) and np.percentile(float32, [10, 90]) too (q as an array); a
    # Python-number q and quantile's integer q promote nothing
    x = np.array([0.5, -1.0, 2.0, 3.0], np.float32)
    cases = [lambda x: np.array([x[0], 1.0]), lambda x: np.asarray([x[0], 2]),
             lambda x: np.array([x[:2], [1.0, 2.0]]), lambda x: np.array([x[0], True]),
             lambda x: np.percentile(x, [10, 90]), lambda x: np.quantile(x, np.float64(0.5)),
             lambda x: np.quantile(x, [0, 1])]
    f = gj.jit(lambda x: tuple(c(x) for c in cases))
    for got, c in zip(f(x), cases):
        _same(got, np.asarray(c(x)), rtol=1e-6)


@pytest.mark.parametrize("dt", [np.int64, np.int8, np.uint16])
def test_integer_fmod_takes_the_dividends_sign(dt, executor):
    # compiled code once used Numba's integer np.fmod, which gives the divisor's sign
    # (np.fmod(-7, 2) was 1; NumPy, as C: -1); a divisor of 0 gives 0 as NumPy
    a = np.array([-7, -3, 3, 7, -1, 0, 5, -8, 9])
    b = np.array([2, 2, -2, -2, 3, 3, 0, -3, 4])
    if np.dtype(dt).kind == "u":
        a, b = np.abs(a), np.abs(b)
    a, b = a.astype(dt), b.astype(dt)
    with np.errstate(divide="ignore"):
        want = np.fmod(a, b), np.fmod(a, dt(3))
        got = gj.jit(lambda a, b: (np.fmod(a, b), np.fmod(a, dt(3))))(a, b)
    for g, w in zip(got, want):
        _same(g, w)


@pytest.mark.parametrize("dt", [np.int64, np.bool_])
@COMPILED_SLOW
def test_integer_and_bool_products(dt, executor):
    # integer and bool matmul has no BLAS: compiled code once failed to type (a Numba
    # TypingError, and with the source on disk, every later process); now NumPy's loop
    rng = np.random.default_rng(0)
    r = lambda *s: (rng.integers(0, 2, s) if dt is np.bool_ else rng.integers(-60, 60, s)).astype(dt)
    a, b, v = r(3, 4), r(4, 5), r(4)
    f = lambda a, b, v: (a @ b, v @ b, a @ v, np.dot(a[:1], b), np.einsum("ij,jk->ik", a, b))
    for got, want in zip(gj.jit(f)(a, b, v), f(a, b, v)):
        _same(got, want)


def test_a_failed_compile_runs_on_the_interpreter(monkeypatch, caplog):
    # a compile that fails in the caller's thread (sync mode, or a structure whose source
    # is on disk) is as a failed background compile: a warning, and the interpreter's result
    from gradjit.runtime import compiler
    def broken(graph, batched):
        raise RuntimeError("a compile that fails")
    monkeypatch.setattr(compiler, "_compile_graph", broken)
    gj.set_tiering("sync")
    try:
        gj.reset_stats()
        with caplog.at_level("WARNING", logger="gradjit"):
            g = gj.grad(lambda x: (np.tanh(x) * x).sum())(np.array([0.5, -1.0]))
    finally:
        gj.set_tiering(None)
    x = np.array([0.5, -1.0])
    np.testing.assert_allclose(g, np.tanh(x) + x / np.cosh(x) ** 2)
    assert gj.stats()["failed_compiles"] == 1 and "a compile that fails" in caplog.text


_REFUSED = [(lambda a: a ** -1, np.array([2, 3]), ValueError, "Integers to negative integer powers"),
            (lambda a: a ** np.int64(-2), np.array([2, 3], np.int8), ValueError,
             "Integers to negative integer powers"),
            (lambda a: a + 300, np.array([1], np.int8), OverflowError,
             "Python integer 300 out of bounds for int8"),
            (lambda a: a * -1, np.array([1], np.uint8), OverflowError,
             "Python integer -1 out of bounds for uint8"),
            (lambda a: a + 2 ** 63, np.array([1]), OverflowError, "too large"),
            (lambda a: a // 300, np.array([1], np.int8), OverflowError, "300 out of bounds"),
            (lambda a: np.maximum(a, 300), np.array([1], np.int8), OverflowError,
             "300 out of bounds"),
            (lambda a: -a, np.array([True, False]), TypeError, "The numpy boolean negative"),
            (lambda a: a - a, np.array([True, False]), TypeError, "numpy boolean subtract"),
            (lambda a: np.sign(a), np.array([True, False]), TypeError, "ufunc 'sign'")]


@pytest.mark.parametrize("k", range(len(_REFUSED)))
def test_what_numpy_refuses_is_refused_at_trace_time(k, executor):
    f, x, exc, msg = _REFUSED[k]
    with pytest.raises(exc, match=msg):
        with np.errstate(all="ignore"):
            f(x)   # (NumPy's own refusal, so the test checks the premise)
    with pytest.raises(exc, match=msg) as e:
        gj.jit(f)(x)
    assert "test_numpy_dtypes.py" in str(e.value).splitlines()[-1]   # the user's line


def test_integer_power_to_a_traced_negative_exponent_raises_numpys_error(executor):
    # (the exponent's values are known only when it runs: the compiled tier's integer
    # power answered 1 ** -1 = 1 and 2 ** -1 = 0)
    f = gj.jit(lambda a, n: (a ** n, 2 ** n))
    a = np.array([1, 2, 3])
    for n in (np.array([-1, 2, 1]), np.array([1, 1, -2], np.int8)):
        with pytest.raises(ValueError, match="Integers to negative integer powers"):
            a ** n
        with pytest.raises(ValueError, match="Integers to negative integer powers"):
            f(a, n)
    for n in (np.array([0, 2, 1]), np.array([3, 1, 2], np.uint8)):
        for got, want in zip(f(a, n), (a ** n, 2 ** n), strict=True):
            _same(got, want)


def test_bool_powers_and_remainders_are_numpys_int8(executor):
    b = np.array([True, False])
    fns = (lambda b: b ** 2, lambda b: b ** 3, lambda b: b ** True, lambda b: b ** b,
           lambda b: 2 ** b, lambda b: np.power(b, 2), lambda b: b % True, lambda b: b % 2)
    gots = gj.jit(lambda b: tuple(f(b) for f in fns))(b)
    for f, got in zip(fns, gots, strict=True):
        _same(got, f(b))
