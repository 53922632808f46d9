"""Views float (lowering/schedule.py): an elementwise node that reads a slice, squeeze or
transpose joins a loop made before the view's place in the graph, and the view is emitted
before its first reader. An ODE right-hand side that unpacks its state and parameters row
by row is then one loop per iteration space, not one per view. Counters (loops in the
schedule, lines of the module) and values (the interpreter's, central differences)."""
from __future__ import annotations

import numpy as np
import pytest

import gradjit as gj
from gradjit.lowering.schedule import Loop, Stmt, schedule
from gradjit.tracer.interp import interpret


def lotka_volterra(y, th):
    a = th[0] * y[0] - th[1] * y[0] * y[1]
    b = th[2] * y[0] * y[1] - th[3] * y[1]
    return (a * a + np.sin(b)).sum()


def rk4_stage(y, th):
    k = np.stack([th[0] * y[0] - th[1] * y[0] * y[1], th[2] * y[0] * y[1] - th[3] * y[1]])
    y2 = y + 0.05 * k
    return (np.tanh(y2[0]) * y2[1] + y2.T[:, 0]).sum()


def _args(seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform(0.5, 1.5, size=(2, 64)), np.array([1.1, 0.4, 0.1, 0.4])


def _graph(fn, args, which=0):
    return gj.grad(fn, argnums=(0, 1)).graphs(*args)[which]


def test_a_right_hand_side_read_row_by_row_is_one_loop():
    g = _graph(lotka_volterra, _args())
    steps, _ = schedule(g, unit_views=True)
    loops = [s for s in steps if isinstance(s, Loop)]
    assert len([lp for lp in loops if lp.shape in ((64,), (1, 64))]) == 1, steps


def test_every_view_comes_before_its_readers_and_after_its_input():
    g = _graph(rk4_stage, _args())
    steps, inline = schedule(g, unit_views=True)
    made = set(g.inputs) | set(inline)
    for st in steps:
        nodes = [st.node] if isinstance(st, Stmt) else st.nodes
        inside = {v for n in nodes for v in n.outputs}
        for n in nodes:
            assert all(v in made or v in inside for v in n.inputs), (n, st)
        made |= inside


@pytest.mark.parametrize("fn", [lotka_volterra, rk4_stage])
def test_compiled_gradients_match_the_interpreter_and_differences(fn):
    args = _args(1)
    df = gj.grad(fn, argnums=(0, 1))
    got = df(*args)
    joint = _graph(fn, args, 1)
    want = interpret(joint, list(args))
    for a, b in zip(got, want[-2:]):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
    eps, (y, th) = 1e-6, args
    for k in range(4):
        e = np.zeros(4)
        e[k] = eps
        fd = (fn(y, th + e) - fn(y, th - e)) / (2 * eps)
        np.testing.assert_allclose(got[1][k], fd, rtol=1e-6, atol=1e-8)


def test_the_forward_of_a_stage_is_one_loop_per_space_and_dependence():
    # the right-hand side's rows (one loop), the stacked update (2, 64), the loss's rows
    src = gj.jit(rk4_stage).graphs(*_args())[2]
    assert src.count("# loop over (64,)") == 2, src
    assert src.count("# loop over (2, 64)") == 1, src
