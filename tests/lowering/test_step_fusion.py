"""Fusion stays inside a step of an unrolled loop (lowering/schedule.py, ``runs_apart``).

A step's own work that reads nothing carried (``np.sin(x)`` of each step's ``x`` of a
list argument, or ``x * scale`` of a value made before the loop) used to join the first
step's loop: one loop of T statements, which the
roller cannot roll, and a compile that grew with T. Counters, not clocks: the generated
module's lines are the same for two trip counts; the results are the interpreter's.
"""
from __future__ import annotations

import numpy as np
import pytest

import gradjit as gj
from gradjit.lowering.codegen_cpu import generate
from gradjit.tracer.interp import interpret
from gradjit.lowering.runs import step_starts
from gradjit.runtime.compiler import compile_graph


def rnn_over_a_list(Wx, Wh, b, xs):
    h = np.zeros((1, 5))
    for x in xs:
        u = np.sin(x) * 2.0            # the step's own input, nothing carried
        h = np.tanh(u @ Wx + h @ Wh + b)
    return (h ** 2).mean()


def rnn_over_slices(Wx, Wh, b, xs):
    h = np.zeros((1, 5))
    scale = np.exp(b[:3])              # made once, read by every step's own work
    for t in range(xs.shape[0]):
        u = np.cos(xs[t:t + 1]) * scale
        h = np.tanh(u @ Wx + h @ Wh + b)
    return (h ** 2).mean()


def rnn_scaled_list(Wx, Wh, b, xs):
    h = np.zeros((1, 5))
    scale = np.exp(b[:3])              # made once; each step's own work reads it
    for x in xs:
        h = np.tanh((x * scale) @ Wx + h @ Wh + b)
    return (h ** 2).mean()


def _args(T, listed, seed=0):
    rng = np.random.default_rng(seed)
    ws = (rng.standard_normal((3, 5)), rng.standard_normal((5, 5)) / 3,
          0.1 * rng.standard_normal(5))
    xs = rng.standard_normal((T, 3))
    return ws + ([x[None, :] for x in xs] if listed else xs,)


def _joint(fn, args):
    return gj.grad(fn, argnums=(0, 1, 2)).graphs(*args)[1]


@pytest.mark.parametrize("fn,listed", [(rnn_over_a_list, True), (rnn_over_slices, False),
                                       (rnn_scaled_list, True)])
def test_the_module_follows_the_step_not_the_trip_count(fn, listed):
    sources = [generate(_joint(fn, _args(T, listed))).source for T in (20, 30)]
    assert "# rolled:" in sources[0]
    assert len(sources[0].splitlines()) == len(sources[1].splitlines())


@pytest.mark.parametrize("fn,listed", [(rnn_over_a_list, True), (rnn_over_slices, False),
                                       (rnn_scaled_list, True)])
def test_rolled_code_computes_what_the_interpreter_does(fn, listed):
    g = _joint(fn, _args(24, listed))
    exe = compile_graph(g)
    ins = [np.random.default_rng(1).normal(size=v.shape).astype(v.dtype) for v in g.inputs]
    for got, want in zip(exe(ins), interpret(g, ins)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)


def test_step_starts_finds_each_step_of_a_run_and_nothing_else():
    class V:
        def __init__(self, shape):
            self.shape, self.dtype = shape, np.dtype(np.float64)

    class N:
        def __init__(self, op, shape=(2,)):
            self.op, self.inputs, self.outputs = op, [V(shape)], [V(shape)]

    body = ["sin.default", "mul.Tensor", "tanh.default"]
    nodes = [N("exp.default")] + [N(op) for _ in range(5) for op in body] + [N("sum.default")]
    assert step_starts(nodes, 4) == {1: "start", 4: "step", 7: "step", 10: "step",
                                     13: "step", 16: "end"}
    assert step_starts(nodes[:10], 4) == {}   # three steps: not a run
    other = [N("sin.default", (3,)) if k == 4 else n for k, n in enumerate(nodes)]
    assert 4 not in step_starts(other, 4)   # types differ: not the same step
    assert step_starts(nodes, 4, min_nodes=16) == {}   # 15 nodes: too short to matter


def test_a_chance_repeat_in_straight_line_code_keeps_its_one_loop():
    # W2's adjoint has four ``mul`` in a row: a "run" of four one-node steps. Kept apart,
    # its fused loop split in two (an extra pass over 1e6 elements); runs shorter than
    # the roller's 32 steps are left alone.
    def w2(x):
        a = np.sin(x)
        b = np.exp(-(a * a))
        c = np.log(1 + x * x)
        d = np.tanh(c - b)
        f = d / np.sqrt(x * x + 1)
        g = 1 / (1 + np.exp(-(f * 3 + a)))
        return (g * c + b * d).sum()
    src = generate(gj.grad(w2).graphs(np.linspace(0.1, 1.0, 1000))[1]).source
    assert src.count("    for i") == 1, src

