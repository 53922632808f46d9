"""Outlining: an unrolled loop's repeated fused loops compile once, however many steps.

Counters, not clocks: the number of distinct shared functions in the generated module
does not grow with the number of unrolled steps, and the outlined code computes the
same gradient as the NumPy reference interpreter. Outlining is the fallback for large
graphs that loop rolling (``test_roll.py``) cannot roll, so rolling is switched off here.
"""
import numpy as np
import pytest

import gradjit as gj
from gradjit.lowering import codegen_cpu
from gradjit.lowering.codegen_cpu import generate
from gradjit.lowering.codegen_cpu_outline import OUTLINE_MIN_LOOPS
from gradjit.lowering.passes import optimize


@pytest.fixture(autouse=True)
def _no_rolling(monkeypatch):
    monkeypatch.setattr(codegen_cpu, "ROLL_MIN_STEPS", 10 ** 9)


def _rnn(T, hidden=4, seed=0, inp=3):
    rng = np.random.default_rng(seed)
    args = [rng.standard_normal((inp, hidden)) / 2, rng.standard_normal((hidden, hidden)) / 3,
            0.1 * rng.standard_normal(hidden), np.zeros((1, hidden))]
    args += [rng.standard_normal((1, inp)) for _ in range(T)]

    def loss(Wx, Wh, b, h, *xs):
        for x in xs:   # a Python loop: unrolled by tracing
            h = np.tanh(x @ Wx + h @ Wh + b)
        return (h * h).sum()
    return loss, args


def _source(T, inp=3):
    loss, args = _rnn(T, inp=inp)
    f = gj.grad(loss, argnums=(0, 1, 2))
    g, call_args, arg_values = f._trace(args)
    f._trace_body(g, call_args, arg_values)
    return generate(optimize(g)).source


def test_distinct_loops_do_not_grow_with_steps():
    src30, src100 = _source(30), _source(100)
    n30, n100 = src30.count("\ndef loop"), src100.count("\ndef loop")
    assert 0 < n100 <= 10, n100
    assert n30 == n100
    assert src100.count(" = loop") > 2 * 100   # every step calls the shared functions


def test_loops_differing_only_in_shape_share_a_function():
    # input width 3 or 4 (= hidden): the same loops but for the extents, which the shared
    # functions read from their arguments' shapes, so the same number of functions
    n3, n4 = _source(30, inp=3).count("\ndef loop"), _source(30, inp=4).count("\ndef loop")
    assert 0 < n3 == n4, (n3, n4)
    assert "n0 = v" in _source(30, inp=3)


def test_small_graphs_stay_inline():
    src = _source(3)
    assert "def loop" not in src and OUTLINE_MIN_LOOPS > 3 * 3


def test_outlined_gradient_matches_interpreter(monkeypatch):
    loss, args = _rnn(12)
    got = gj.grad(loss, argnums=(0, 1, 2))(*args)
    assert "def loop" in _source(12)
    monkeypatch.setenv("GRADJIT_EXECUTOR", "numpy")
    want = gj.grad(loss, argnums=(0, 1, 2))(*args)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
