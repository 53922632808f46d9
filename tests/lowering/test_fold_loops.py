"""Python loops a trace unrolled fold back into scans (lowering/fold_loops.py): the same
numbers (bit for bit on the interpreter), gradients against central differences, and a
compiled module whose size and compile count do not follow the trip count."""
import numpy as np
import pytest

import gradjit as gj
from tests.marks import COMPILED_SLOW
from gradjit.runtime import tiers
from gradjit.lowering.fold_loops import fold_loops
from gradjit.tracer.coercion import traced_numpy
from gradjit.tracer.interp import interpret
from gradjit.tracer.trace import trace
from tests.counters import lines_and_compiles
from tests.fd import numerical_grad


def _traced(fn, args):
    g, tracers, _ = trace(args)
    g.view_tree = {}
    with traced_numpy(g):
        out = fn(*tracers)
    g.view_tree = None
    g.outputs = [o.value for o in (out if isinstance(out, (list, tuple)) else [out])]
    return g


def _run(g, args):
    return interpret(g, list(args) + [g.constants[v] for v in g.inputs[len(args):]])


def _rnn(w, xs):
    h, total, hs = np.zeros(3), 0.0, []
    for t in range(xs.shape[0] - 1):
        h = np.tanh(h * w + xs[t + 1] * 0.5)
        total = total + (h * h).sum() * 2.0
        hs.append(h)
    return [total, np.stack(hs).sum(0), h]


def _no_slices(w, xs):
    h = w * 1.0
    for _ in range(40):
        h = np.sin(h) * w + np.cos(h * 0.3) - h * h * 0.01
    return [(h * h).sum()]


def _varying_scalar(w, xs):   # a Python number that changes each step: a per-step input
    h = w * 1.0
    for t in range(40):
        h = np.sin(h) * (t + 1.0) + h * h * 0.01 - t / 40 + (2 * t - h) / (t + 3)
    return [h.sum()]


def _varying_scalar_f32(w, xs):
    h = w.astype(np.float32)
    for t in range(60):
        h = np.cos(h) * (0.1 * t) + h * np.float32(0.5) + t
    return [h.sum()]


def _varying_exponent(w, xs):   # an attribute that is not a float op's number: unrolled
    h = w * 1.0
    for t in range(40):
        h = np.sin(h) + np.tanh(h) ** (1 + t) * 0.01
    return [h.sum()]


def _separate_arrays(w, xs):   # each step reads another argument (W4's shape): not stacked
    h = w * 1.0
    for x in [xs * 1.0 + k for k in range(40)]:
        h = np.tanh(h * w + x[0]) + h * 0.5
    return [h.sum()]


@pytest.mark.parametrize("fn, folds", [(_rnn, True), (_no_slices, True),
                                       (_varying_scalar, True), (_varying_scalar_f32, True),
                                       (_varying_exponent, False), (_separate_arrays, False)])
def test_folding_keeps_every_number(rng, fn, folds):
    args = [rng.normal(size=3), rng.normal(size=(41, 3))]
    g = _traced(fn, args)
    want, n = _run(g, args), len(g.nodes)
    tanhs = sum(nd.op == "tanh.default" for nd in g.nodes)
    fold_loops(g)
    if folds:
        assert any(nd.op == "scan.default" for nd in g.nodes) and len(g.nodes) < n
    else:   # the loop stays unrolled (_separate_arrays' list of 40 x * 1.0 + k may fold)
        assert tanhs == 40 == sum(nd.op == "tanh.default" for nd in g.nodes)
    for a, b in zip(_run(g, args), want):
        np.testing.assert_array_equal(a, b)


@pytest.mark.slow   # (compiles several graphs; CI runs the slow suites too)
def test_folded_loops_differentiate(executor, rng):
    w, xs = rng.normal(size=3), rng.normal(size=(41, 3))

    def loss(w, xs):
        total, stacked, h = _rnn(w, xs)
        return total + (stacked * w).sum() + h.sum()
    np.testing.assert_allclose(gj.grad(loss)(w, xs), numerical_grad(loss, (w, xs), 0),
                               rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(gj.grad(loss, argnums=1)(w, xs),
                               numerical_grad(loss, (w, xs), 1), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(gj.jit(loss)(w, xs), loss(w, xs), rtol=1e-12)

    def timed(w, xs):   # a Python number per step (t) becomes a per-step input
        h = w * 1.0
        for t in range(60):
            h = np.tanh(h * 0.9 + t / 60) * (1 + t / 120) - (t - h) / (t + 2)
        return (h * h).sum()
    assert gj.explain(timed, w, xs).count("scan.default") > 0
    np.testing.assert_allclose(gj.grad(timed)(w, xs), numerical_grad(timed, (w, xs), 0),
                               rtol=1e-6, atol=1e-8)


@pytest.mark.slow   # (two compiles: with the slow suites, which .ci/run runs)
def test_compiled_module_follows_the_step_not_the_trip_count(rng):
    def loss(w, xs):
        h, total = np.zeros(4), 0.0
        for t in range(xs.shape[0]):
            h = np.tanh(h * w + xs[t])
            total = total + (h * h).sum()
        return total
    w = rng.normal(size=4)
    (l1, c1), (l2, c2) = [lines_and_compiles(lambda: gj.grad(loss), w, rng.normal(size=(t, 4)))
                          for t in (40, 400)]
    assert l1 == l2 and c1 == c2 <= 1


def test_switch_turns_folding_off(rng, monkeypatch):
    monkeypatch.setenv("GRADJIT_FOLD_LOOPS", "0")
    args = [rng.normal(size=3), rng.normal(size=(41, 3))]
    g = _traced(_rnn, args)
    assert fold_loops(g) == {} and not any(nd.op == "scan.default" for nd in g.nodes)


def _short_elementwise(T):   # 5 elementwise nodes a step: under MIN_NODES at both T
    def f(w, xs):
        h = w * 1.0
        for _ in range(T):
            h = h + 0.01 * (np.sin(h) - w * h)
        return [(h * h).sum()]
    return f


def _short_with_matmul(w, xs):   # the same length with a matmul a step: rolled, not folded
    h, A = w * 1.0, np.outer(w, w) * 0.1
    for _ in range(8):
        h = h + 0.01 * (np.sin(h) - A @ h)
    return [(h * h).sum()]


def test_short_loops_of_elementwise_steps_fold(rng):
    # Unrolled, such steps fuse into one loop as long as the loop, which the roller cannot
    # roll: the compile grew with T. Steps with a matmul roll, and stay unrolled.
    args = [rng.normal(size=3), rng.normal(size=(41, 3))]
    for T in (8, 40):
        g = _traced(_short_elementwise(T), args)
        assert len(g.nodes) < 256
        want = _run(g, args)
        fold_loops(g)
        assert sum(nd.op == "scan.default" for nd in g.nodes) == 1
        for a, b in zip(_run(g, args), want):
            np.testing.assert_array_equal(a, b)
    g = _traced(_short_with_matmul, args)
    fold_loops(g)
    assert not any(nd.op == "scan.default" for nd in g.nodes)
    g = _traced(_short_elementwise(4), args)   # 20 nodes: too short to matter
    fold_loops(g)
    assert not any(nd.op == "scan.default" for nd in g.nodes)


# -- a transform traced inside another: its rewrites leave the enclosing function alone --
def outer_keeps_a_loop_value(x):
    h, hs = x, []
    for _ in range(40):   # (40 steps: a run fold_loops folds)
        h = np.sin(h) * 1.01 + 0.1
        hs.append(h)
    g = gj.grad(lambda a: (a ** 2).sum())(x)
    return (hs[10] * g).sum() + h.sum()


def outer_keeps_a_sliced_value(x):
    z = x * 2.0 + 1.0
    g = gj.grad(lambda a: (a ** 3).sum())(z[0:2])
    return z.sum() + g.sum()


@pytest.mark.parametrize("fn", [outer_keeps_a_loop_value, outer_keeps_a_sliced_value])
def test_a_transform_inside_a_trace_leaves_the_enclosing_values_alone(fn):
    # the inner gradient's folding once rewrote the outer function's values,
    # which it then read: KeyError in the graph passes
    x = np.linspace(0.1, 1.0, 5)
    with tiers.forced("never"):
        value = gj.jit(fn)(x)
        grad = gj.grad(fn)(x)
        fd = numerical_grad(fn, (x,), 0)
    h = x
    hs = []
    for _ in range(40):
        h = np.sin(h) * 1.01 + 0.1
        hs.append(h)
    expect = ((hs[10] * 2 * x).sum() + h.sum() if fn is outer_keeps_a_loop_value else
              (x * 2.0 + 1.0).sum() + (3 * (x[:2] * 2.0 + 1.0) ** 2).sum())
    np.testing.assert_allclose(value, expect, rtol=1e-12)
    np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-8)


@COMPILED_SLOW
def test_steps_that_differ_in_the_sign_of_a_zero_stay_apart(executor):
    # 0.0 == -0.0: steps alternating between them were merged, every step taking the first
    # one's zero (arctan2 then gave +pi where NumPy gives -pi)
    def f(x):
        h = x
        for t in range(16):
            y = np.abs(h) * (0.0 if t % 2 == 0 else -0.0)
            h = np.tanh(h + y)
        return np.arctan2(y, -1.0)
    zeros = [np.zeros(3) if t % 2 == 0 else -np.zeros(3) for t in range(16)]

    def g(x):
        h = x
        for z in zeros:   # (per-step arrays: equal values, other bits)
            y = np.abs(h) * z
            h = np.tanh(h + y)
        return np.arctan2(y, -1.0)
    x = np.zeros(3)
    np.testing.assert_array_equal(gj.jit(f)(x), f(x))
    np.testing.assert_array_equal(gj.jit(g)(x), g(x))


@COMPILED_SLOW
def test_a_folded_loops_large_per_step_arrays_are_checked_at_each_call(executor):
    # the per-step arrays W[t] (over 64 KiB: read live when used as they are) were stacked
    # into one copy at the fold, and the guard only checked that W still held them: a
    # change to W[15] afterwards was never seen
    W = [np.full(9000, 0.5) for _ in range(16)]

    def f(x):
        h = x
        for t in range(16):
            h = np.tanh(h * W[t] + 0.1)
        return h
    x = np.ones(9000)
    F = gj.jit(f)
    np.testing.assert_allclose(F(x), f(x), rtol=1e-12)
    W[15][:] = -3.0
    np.testing.assert_allclose(F(x), f(x), rtol=1e-12)
