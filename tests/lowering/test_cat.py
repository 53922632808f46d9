"""Concatenation is one n-ary node (``cat.default``, a ``Tensor[]`` op) in every mode.

Its gradient is one slice view per part and its tangent one ``cat`` of the parts'
tangents; nothing is zero-filled or summed, so its work and its node count follow the
parts, not parts x result (a sum of zero-padded placements made ``gj.stack`` of 1,000
vectors of 1,000 take 7 s). Checked against NumPy's values and central differences, first
and second order, forward mode, mixed dtypes and many parts; counters, not clocks.
"""
from __future__ import annotations

import collections
import re

import numpy as np
import pytest

import gradjit as gj
from gradjit.lowering.codegen_cpu import generate
from gradjit.lowering.passes import optimize
from gradjit.runtime import tiers
from gradjit.runtime.compiler import compile_graph
from gradjit.tracer.interp import interpret
from gradjit.tracer.coercion import traced_numpy
from tests.fd import numerical_grad


def _ops(fn, *args, argnums=0):
    f = gj.grad(fn, argnums=argnums)
    g, call, values = f._trace(args)
    with traced_numpy(g, fn):
        f._trace_body(g, call, values)
    return collections.Counter(n.op for n in optimize(g).nodes)


def _parts_loss(n):
    def f(*xs):
        s = np.stack([np.sin(x) for x in xs], axis=1)     # (4, n)
        w = np.arange(s.size).reshape(s.shape) % 5 + 1.0
        return (s ** 2 * w).sum()
    return f


@pytest.mark.parametrize("n", [2, 40])
def test_a_concatenation_is_one_node_and_its_gradient_slices(n):
    rng = np.random.default_rng(n)
    xs = [rng.standard_normal(4) for _ in range(n)]
    f = _parts_loss(n)
    ops = _ops(f, *xs, argnums=tuple(range(n)))
    assert ops["cat.default"] == 1 and ops["slice_backward.default"] == 0, ops
    with tiers.forced("never"):
        got = gj.grad(f, argnums=tuple(range(n)))(*xs)
    for k in (0, n - 1):
        np.testing.assert_allclose(got[k], numerical_grad(lambda *a: f(*a), xs, k), rtol=1e-6)


def test_compiled_matches_numpy_along_every_dim_with_unequal_parts():
    rng = np.random.default_rng(1)
    a, b, c = rng.standard_normal((2, 3, 1)), rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 3, 2))

    def f(a, b, c):
        s = np.concatenate([a * 2, np.exp(b), c], axis=-1)
        t = np.concatenate([s, s[:1] * 3], axis=0)
        return (t ** 2 * np.arange(t.size).reshape(t.shape)).sum(), t

    with tiers.forced("sync"):
        (val, t), grads = gj.value_and_grad(f, argnums=(0, 1, 2), has_aux=True)(a, b, c)
    np.testing.assert_allclose(t, f(a, b, c)[1], rtol=1e-14)
    np.testing.assert_allclose(val, f(a, b, c)[0], rtol=1e-13)
    for k, g in enumerate(grads):
        np.testing.assert_allclose(g, numerical_grad(lambda *z: f(*z)[0], [a, b, c], k),
                                   rtol=1e-6, atol=1e-5)   # (entries up to 4e3)


def test_second_order_and_forward_mode_through_cat():
    rng = np.random.default_rng(2)
    x, y = rng.standard_normal(3), rng.standard_normal(2)

    def f(x, y):
        s = np.concatenate([x * y.sum(), np.sin(y), x[:1] * y[:1]])
        return (s ** 3).sum()

    with tiers.forced("never"):
        gx = gj.grad(f, argnums=0)
        h = gj.hessian(lambda x: f(x, y))(x)
        _, tangent = gj.jvp(lambda x, y: np.concatenate([x * y.sum(), np.sin(y)]) ** 2,
                            (x, y), (np.ones(3), np.full(2, 0.5)))
    fd_h = np.stack([numerical_grad(lambda z: gx(z, y)[k], [x], 0) for k in range(3)])
    np.testing.assert_allclose(h, fd_h, rtol=1e-5, atol=1e-7)
    g = lambda t: np.concatenate([(x + t) * (y + t / 2).sum(), np.sin(y + t / 2)]) ** 2
    eps = 1e-6
    np.testing.assert_allclose(tangent, (g(eps) - g(-eps)) / (2 * eps), rtol=1e-6, atol=1e-8)


def test_parts_of_mixed_dtypes_promote_as_numpy():
    x32, x64 = np.ones(2, np.float32), np.arange(3.0)
    i = np.arange(2)
    f = lambda a, b: np.concatenate([a, b, i])   # noqa: E731
    with tiers.forced("sync"):
        got = gj.jit(f)(x32, x64)
    assert got.dtype == f(x32, x64).dtype == np.float64
    np.testing.assert_array_equal(got, f(x32, x64))
    g = gj.grad(lambda a, b: (f(a, b) ** 2).sum(), argnums=(0, 1))(x32, x64)
    assert g[0].dtype == np.float32
    np.testing.assert_allclose(g[0], 2 * x32)
    np.testing.assert_allclose(g[1], 2 * x64)


@pytest.mark.slow
def test_tensor_mode_stack_of_many_parts():
    rng = np.random.default_rng(3)
    xs = [gj.tensor(rng.standard_normal(50), requires_grad=True) for _ in range(40)]
    y = gj.stack(xs)
    assert y.grad_fn is not None and y.shape == (40, 50)
    (y * y).sum().backward()
    for k in (0, 20, 39):
        np.testing.assert_allclose(xs[k].grad.numpy(), 2 * xs[k].detach().numpy())


def test_shape_mismatch_names_the_op_and_shapes():
    with pytest.raises(ValueError, match=r"cat: sizes of tensors must match except in "
                                         r"dimension 1.*\(2, 3\), \(3, 3\)"):
        gj.cat([gj.tensor(np.ones((2, 3))), gj.tensor(np.ones((3, 3)))], 1)


def _stack_of_args(*xs):
    return (np.stack(xs, axis=1) * 3.0).sum(axis=0)


def test_copies_of_same_shaped_parts_roll_into_one_loop():
    # One block per part: the roller makes them one loop, so the copy code does not grow
    # with the number of parts (it was one loop nest per part).
    def copies(n):
        g = gj.jit(_stack_of_args).graphs(*[np.ones(3)] * n)[1]
        src = generate(g).source
        assert "# rolled:" in src
        return sum(1 for ln in src.splitlines() if "for i" in ln)
    assert copies(40) == copies(90)
    g = gj.jit(_stack_of_args).graphs(*[np.ones(3)] * 40)[1]
    ins = [np.random.default_rng(k).normal(size=v.shape) for k, v in enumerate(g.inputs)]
    for got, want in zip(compile_graph(g)(ins), interpret(g, ins)):
        np.testing.assert_array_equal(got, want)


def test_one_part_is_a_new_array_not_the_part():
    t = gj.tensor(np.arange(3.0), requires_grad=True)
    c = gj.cat([t])
    assert c is not t and c.grad_fn is not None
    (c * c).sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), 2 * np.arange(3.0))


def _stacked_rows(y, w, f32=True):
    # rows computed in one loop and stacked (an ODE's right-hand side), along each dim
    a, b = np.sin(y[0]) * w, y[0] * y[1] - w
    s = (np.stack([a, b]) ** 2).sum() + (np.stack([a, b], axis=1) * y.T).sum()
    return s + (np.stack([a.astype(np.float32), b.astype(np.float32)]) ** 2).sum() if f32 else s


def test_parts_computed_in_one_loop_are_written_into_the_result_by_it(monkeypatch):
    rng = np.random.default_rng(3)
    y, w = rng.uniform(0.5, 1.5, size=(2, 16)), rng.uniform(0.5, 1.5, size=16)
    src = gj.jit(_stacked_rows).graphs(y, w)[2]
    # no copy nests: each stack's blocks stored by the loop of the rows (the float32 one's
    # parts are the loop's casts)
    assert "cat.default" not in src, src
    assert any(re.search(r"v\d+\[0, i0\] = t\d+", ln) for ln in src.splitlines()), src
    assert any(re.search(r"v\d+\[i0, 1\] = t\d+", ln) for ln in src.splitlines()), src
    np.testing.assert_allclose(gj.jit(_stacked_rows)(y, w), _stacked_rows(y, w), rtol=1e-6)
    got = gj.grad(_stacked_rows, argnums=(0, 1))(y, w)
    monkeypatch.setenv("GRADJIT_EXECUTOR", "numpy")
    want = gj.grad(_stacked_rows, argnums=(0, 1))(y, w)
    monkeypatch.delenv("GRADJIT_EXECUTOR")
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    got = gj.grad(lambda y, w: _stacked_rows(y, w, False), argnums=(0, 1))(y, w)
    for k in range(2):
        want = numerical_grad(lambda y, w: _stacked_rows(y, w, False), (y, w), k)
        np.testing.assert_allclose(got[k], want, rtol=1e-6, atol=1e-7)
