"""Buffers made with names imported from NumPy: ``from numpy import zeros`` in the traced
function's module (or a module of a function it calls) traces like ``np.zeros`` does, in
both executors; the names are swapped only while tracing; where a traced value still meets
a real NumPy array, the error is gradjit's, naming the user's line (not NumPy's "setting an
array element with a sequence")."""
from __future__ import annotations

import threading

import numpy as np
import pytest
from numpy import array, ones, zeros
from numpy import zeros as zz

import gradjit as gj
from tests.marks import COMPILED_SLOW
import tests.runtime.buffer_helpers as helpers
from tests.fd import numerical_grad
from tests.runtime.buffer_helpers import FILLER, padded, squares_into

_ORIGINAL = (np.zeros, np.ones, np.array)
OUTSIDE = zeros(3)   # made at import: a real array


def repro(x):
    out = zeros(3)
    out[0] = x[0] * 2
    out[1:] = x[1:] ** 2
    return out.sum()


def _check(f, x):
    np.testing.assert_allclose(gj.jit(f)(x), f(x), rtol=1e-12)
    np.testing.assert_allclose(gj.grad(lambda x: (f(x) * np.arange(1.0, 1.0 + np.size(f(x))).reshape(
        np.shape(f(x)))).sum())(x), numerical_grad(
        lambda x: f(x) * np.arange(1.0, 1.0 + np.size(f(x))).reshape(np.shape(f(x))), [x], 0),
        rtol=1e-6, atol=1e-8)


def test_the_reported_repro(executor):
    x = np.arange(3.0) + 1
    np.testing.assert_allclose(gj.grad(repro)(x), [2.0, 4.0, 6.0])
    assert gj.jit(repro)(x) == repro(x)


def test_aliases_ones_and_array(executor):
    def f(x):
        a = zz(2)
        a[1] = x[0] * x[1]
        b = ones((2, 2))
        b[0] = x[:2]
        c = array([x[0], x[1] ** 2, 3.0])
        return a.sum() + b.sum() + c
    _check(f, np.array([0.5, -1.5, 2.0]))


def test_full_of_a_traced_fill_value(executor):
    # np.full(n, v) of a traced v (a Python float argument is traced): an array of v's dtype,
    # differentiable in v as jnp.full, that the function may assign into
    def f(v):
        b = np.full(3, v)
        b[0] = 0.0
        return (b * np.arange(1.0, 4.0)).sum() + np.full((2, 2), v * v, np.float32).sum()
    assert gj.jit(f)(1.5) == f(1.5)
    assert gj.grad(f)(1.5) == 5.0 + 8 * 1.5
    x = np.array([0.5, -1.5, 2.0])
    _check(lambda x: np.full((2, 3), x) * np.full(3, fill_value=x[1]), x)
    assert gj.jit(lambda v: np.full(2, v, dtype=int))(2.7).dtype == np.int_
    with pytest.raises(ValueError, match=r"from shape \(3,\) into shape \(2, 2\)"):
        gj.jit(lambda x: np.full((2, 2), x))(x)


@COMPILED_SLOW
def test_functions_of_other_modules(executor):
    def f(x):
        return squares_into(x) + helpers.squares_into(x) * 2 + padded(x)[1:-1]
    _check(f, np.array([0.5, -1.5, 2.0]))


def test_methods_and_partials_are_followed(executor):
    import functools
    x = np.array([0.5, -1.5, 2.0])
    np.testing.assert_allclose(gj.jit(FILLER.fill)(x), [0.5, 1.0])
    np.testing.assert_allclose(gj.grad(lambda x: gj.jit(functools.partial(padded))(x).sum())(x),
                               np.ones(3))


def test_names_are_swapped_only_while_tracing():
    seen = []

    def f(x):
        seen.append(type(zeros(1)).__name__)   # the tracing thread: a traced buffer
        t = threading.Thread(target=lambda: seen.append(type(zeros(1)).__name__))
        t.start()   # another thread, not tracing: NumPy's array
        t.join()
        return (x * 2).sum()
    gj.grad(f)(np.ones(2))
    assert seen == ["Tracer", "ndarray"]
    assert zeros is _ORIGINAL[0] and zz is _ORIGINAL[0] and array is _ORIGINAL[2]
    assert helpers.z is _ORIGINAL[0] and helpers.full is np.full
    assert (np.zeros, np.ones, np.array) == _ORIGINAL
    assert isinstance(zeros(2), np.ndarray) and not OUTSIDE.any()


def test_nested_transforms_restore_once_done(executor):
    g = gj.grad(repro)
    h = gj.grad(lambda x: (g(x) * np.array([1.0, 2.0, 3.0])).sum())
    np.testing.assert_allclose(h(np.arange(3.0) + 1), [0.0, 4.0, 6.0])
    assert zeros is _ORIGINAL[0]


def _outside_scalar(x):
    OUTSIDE[0] = x[0]
    return OUTSIDE.sum()


def _outside_slice(x):
    OUTSIDE[1:] = x[1:]
    return OUTSIDE.sum()


def _int_buffer(x):
    out = zeros(3, dtype=int)
    out[0] = x[0]
    return out


@pytest.mark.parametrize("f, line", [(_outside_scalar, "OUTSIDE[0] = x[0]"),
                                     (_outside_slice, "OUTSIDE[1:] = x[1:]"),
                                     (_int_buffer, "out[0] = x[0]"),
                                     (lambda x: FILLER.fill(x), "out[0] = x[0]")])
def test_real_arrays_receiving_traced_values_are_clear_errors(f, line):
    with pytest.raises(gj.GradjitError, match="cannot be stored into a NumPy array") as e:
        gj.jit(f)(np.arange(3.0))
    assert isinstance(e.value, ValueError)   # (as NumPy's own, but saying what happened)
    assert line in str(e.value) and "sequence" not in str(e.value)
    assert not OUTSIDE.any()


def test_library_code_still_gets_arrays(executor):
    np.testing.assert_allclose(gj.jit(helpers.library_style)(np.ones(2)), [2.0, 2.0, 2.0])
