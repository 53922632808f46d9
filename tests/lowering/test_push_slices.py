"""Slices of computed values are computed from their operands' slices (lowering/push_slices.py).

The case it exists for: an ODE right-hand side that unpacks its state (``y[0]``) and packs
its derivative (``np.stack``), inside a solver step that adds such stacks. Checked: the
rewrite happens (no slice reads an elementwise result or a concatenation afterwards, in
the graph and in scan bodies), every form it meets (broadcast operands, negative steps,
parts of concatenations, squeezes, values also read whole, slices that are results, an
enclosing trace) gives NumPy's values and central differences' gradients, the graph never
more than doubles, and a transform traced inside another leaves the enclosing function's
values alone (they may still be read after it returns).
"""
from __future__ import annotations

import numpy as np
import pytest

import gradjit as gj
from gradjit.runtime import tiers
from gradjit.tracer.coercion import traced_numpy
from gradjit.tracer.control_flow import Region
from gradjit.tracer.registry import get_op
from tests.fd import numerical_grad

DT = 0.05


def _rhs(y, th):
    return np.stack([th[0] * y[0] - th[1] * y[0] * y[1],
                     th[2] * y[0] * y[1] - th[3] * y[1]])


def _rk4(y, th):
    k1 = _rhs(y, th)
    k2 = _rhs(y + 0.5 * DT * k1, th)
    k3 = _rhs(y + 0.5 * DT * k2, th)
    k4 = _rhs(y + DT * k3, th)
    return y + DT / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)


def rk4_scan(th, y0):
    def step(y, _):
        y = _rk4(y, th)
        return y, (y * y).sum()
    _, e = gj.scan(step, y0, None, length=6)
    return e.sum()


def rk4_loop(th, y0):   # (a Python loop: folded into a scan, then pushed)
    y, tot = y0, 0.0
    for _ in range(40):
        y = _rk4(y, th)
        tot = tot + (y * y).sum()
    return tot


def broadcast(a, b):    # operands without the dim, of size 1 in it, 0-d; negative steps
    z = np.sin(a * b[0] + b[0, 0] * a[:, :1] + a[:1] * 0.5) * 2.0
    u = np.cos(a * b)
    return ((z[::-2] * z[1]).sum() + u[0].sum() * u[1:3].sum() + u[0:0].sum()) ** 2


def overlapping(a, b):  # slices that overlap: left as they are (no element computed twice)
    z = np.sin(a * b)
    return (z[0] * z[0:2]).sum() + z[1:].sum()


def cat_parts(a, b):    # slices covering parts of a concatenation wholly and partly
    w = np.concatenate([a[0], b[1] * 2.0, np.exp(a[1])])
    return (w[1:5] ** 2).sum() + (w[2:3] * w[5:8]).sum() + w[::2].sum()


def squeezed(a, b):     # a squeeze reads the elementwise result
    z = (a[:1] * b[0] + b[:1]).squeeze(0)
    return (np.cos(z) * z).sum()


def read_whole(a, b):   # a value also read whole is left as it is
    z = a * b + 1.0
    return (z[0] * z.sum()).sum() + (z[1] ** 2).sum()


def slice_is_result(a, b):
    z = np.tanh(a - b)
    return z[1, 2] * 3.0


def nested(a, b):      # a gradient traced inside the function: its slices pushed
    inner = gj.grad(lambda y: (np.stack([y[0] * y[1], y[1] + y[0]])[1] ** 3).sum())
    return (inner(a * b) * a).sum()


def inner_squeezed(a, b):   # the inner adjoint squeezes a sum of two identical products
    inner = gj.grad(lambda x: (x[None] * x[None] * b[None]).sum())
    return (inner(a) * b).sum()


PROGRAMS = {"inner_squeezed": inner_squeezed, "rk4_scan": rk4_scan, "rk4_loop": rk4_loop, "broadcast": broadcast,
            "cat_parts": cat_parts, "overlapping": overlapping, "squeezed": squeezed, "read_whole": read_whole,
            "slice_is_result": slice_is_result, "nested": nested}


def _args(name):
    rng = np.random.default_rng(3)
    if name.startswith("rk4"):
        return np.array([1.1, 0.4, 0.1, 0.4]), rng.uniform(0.5, 1.5, (2, 5))
    return rng.uniform(0.5, 1.5, (3, 4)), rng.uniform(0.5, 1.5, (3, 4))


def _graph(fn, args):
    """The joint graph of ``gj.grad(fn)``, as the adjoint was built on it."""
    f = gj.grad(fn, argnums=(0, 1))
    g, call, values = f._trace(args)
    with traced_numpy(g, fn):
        f._trace_body(g, call, values)
    return g


def _left_to_push(nodes, outputs):
    """Slices (and squeezes) among ``nodes`` that the rewrite should have pushed: of a
    concatenation along its dim, or of an elementwise result that only they read (and
    not a result), in ``nodes`` and every region body among them."""
    readers, bad = {}, []
    for n in nodes:
        for v in n.inputs:
            readers.setdefault(v, []).append(n)
    for n in nodes:
        for a in n.attrs.values():
            if isinstance(a, Region):
                bad += _left_to_push(a.graph.nodes, a.graph.outputs)
        x = n.inputs[0] if n.inputs else None
        if n.op not in ("slice.Tensor", "squeeze.dim") or x.node is None:
            continue
        p = x.node
        if p.op == "cat.default":
            if n.op == "slice.Tensor" and n.attrs["dim"] % x.ndim == p.attrs["dim"] % x.ndim \
                    and n.attrs["step"] == 1:
                bad.append(n)
        elif get_op(p.op).kind == "elementwise" and x not in outputs and all(
                r.op in ("slice.Tensor", "squeeze.dim") for r in readers[x]):
            bad.append(n)
    return bad


def _forward_part(g):
    """The forward's nodes: those before the seed of the adjoint."""
    k = next(i for i, n in enumerate(g.nodes) if n.op == "ones_like.default")
    return g.nodes[:k]


@pytest.mark.parametrize("name", ["rk4_scan", "rk4_loop", "broadcast", "squeezed", "nested"])
def test_the_forward_reads_no_slice_of_a_computed_value(name):
    fn = PROGRAMS[name]
    g = _graph(fn, _args(name))
    fwd = _forward_part(g)
    assert not _left_to_push(fwd, [fwd[-1].outputs[0]])
    if name == "broadcast":   # (z and u went: their slices' parts are computed instead)
        assert not any(n.op in ("sin.default", "cos.default") and n.outputs[0].shape == (3, 4)
                       for n in fwd)
    if name.startswith("rk4"):
        assert any(n.op == "scan.default" for n in fwd)


def test_overlapping_slices_leave_the_value_whole():
    fwd = _forward_part(_graph(overlapping, _args("overlapping")))
    assert [n.outputs[0].shape for n in fwd if n.op == "sin.default"] == [(3, 4)]


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_values_and_gradients_on_the_interpreter(name):
    fn, args = PROGRAMS[name], _args(name)
    with tiers.forced("never"):   # (and eager inner gradients: ``nested``)
        value = gj.jit(fn)(*args)
        grads = gj.grad(fn, argnums=(0, 1))(*args)
        np.testing.assert_allclose(value, fn(*args), rtol=1e-12)
        for i in (0, 1):
            np.testing.assert_allclose(grads[i], numerical_grad(fn, args, i), rtol=1e-6,
                                       atol=1e-8)


@pytest.mark.parametrize("name", [pytest.param("rk4_scan", marks=pytest.mark.slow),
                                  pytest.param("broadcast", marks=pytest.mark.slow),
                                  "cat_parts"])   # (compiles of seconds: the slow suite)
def test_compiled_gradients_and_second_order(name):
    fn, args = PROGRAMS[name], _args(name)
    with tiers.forced("sync"):
        grads = gj.grad(fn, argnums=(0, 1))(*args)
    for i in (0, 1):
        np.testing.assert_allclose(grads[i], numerical_grad(fn, args, i), rtol=1e-6, atol=1e-8)
    if name == "rk4_scan":
        return
    v = np.random.default_rng(5).standard_normal(args[0].shape)
    hvp = lambda a, b: (gj.grad(fn)(a, b) * v).sum()   # noqa: E731
    with tiers.forced("never"):   # (a Hessian-vector product, against differences)
        got = gj.grad(hvp)(*args)
        fd = numerical_grad(hvp, args, 0, eps=1e-5)
    np.testing.assert_allclose(got, fd, rtol=1e-5, atol=1e-6)


def test_many_slices_of_one_value_at_most_double_the_graph():
    def many(a):
        z = np.sin(a * 2.0 + 1.0) * a
        return sum((z[i] * z[i]).sum() for i in range(a.shape[0]))

    a = np.random.default_rng(1).random((60, 3))
    base = len(_graph(lambda a, b: (np.sin(a * 2.0 + 1.0) * a).sum() + b.sum(),
                      (a, a)).nodes)
    g = _graph(lambda a, b: many(a) + b.sum(), (a, a))
    assert len(_forward_part(g)) <= 2 * 3 * a.shape[0] + base
    with tiers.forced("never"):
        np.testing.assert_allclose(gj.grad(many)(a), numerical_grad(many, (a,), 0), rtol=1e-6)


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
    # the inner gradient's rewrites once folded or pushed the outer function's values,
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
