"""Outlining: an unrolled loop's repeated fused loops compile once, however many steps.

Counters, not clocks: the number of distinct shared functions in the generated module
does not grow with the number of unrolled steps, and the outlined code computes the
same gradient as the NumPy reference interpreter. Outlining is the fallback for large
graphs that loop rolling (``test_roll.py``) cannot roll, so rolling is switched off here.
"""
import re
from types import SimpleNamespace

import numpy as np
import pytest

import gradjit as gj
from gradjit.lowering import codegen_cpu
from gradjit.lowering.codegen_cpu import generate
from gradjit.lowering.codegen_cpu_outline import OUTLINE_MIN_LOOPS, Outliner
from gradjit.lowering.passes import optimize


@pytest.fixture(autouse=True)
def _no_rolling(monkeypatch):
    monkeypatch.setattr(codegen_cpu, "ROLL_MIN_STEPS", 10 ** 9)
    # The RNN's weight-gradient outer products would call the cached rank-1 helpers
    # (codegen_cpu_outer.py); here they stay loops, the loops these tests outline.
    monkeypatch.setattr(codegen_cpu, "RANK_ONE", False)


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
    # The shared functions read their extents from their arguments' shapes. Input width 4
    # (= hidden) makes both weight gradients' outer products (4, 4), so they fuse into one
    # pass where width 3 keeps two: other loops, but as few, whatever the trip count.
    for inp in (3, 4):
        n30, n60 = (_source(t, inp=inp).count("\ndef loop") for t in (30, 60))
        assert 0 < n30 == n60 <= 10, (inp, n30, n60)
    assert "n0 = v" in _source(30, inp=3)


def test_first_term_of_a_sum_calls_the_adding_loop_with_zeros():
    # dWh and dWx sum one outer product per step; the first one, stored bare, is the
    # same loop as the later ones (which add it to the running sum) given a zero sum
    src = _source(30)
    first = [ln for ln in src.split("\n") if "al.zeros(" in ln]
    assert len(first) == 2, first
    name = re.search(r"= (loop\d+)\(", first[0]).group(1)
    assert src.count(f"= {name}(") == 2 * 30
    assert "al.zeros((np.int64(4), np.int64(4)), np.float64)" in first[0] + first[1]


def _outer(out, a, b, add=None):
    """An outlined outer-product loop's lines: ``v<out> = v<a> (column) * v<b> (row)``,
    stored bare, or (``add``: the accumulator's name and index, which operand first) added
    to an accumulator, the product then in ``t<out - 1>``."""
    prod = f"t{out - 1}" if add else f"t{out}"
    lines = [f"    # loop over (3, 4): %{out}", f"    n0 = v{a}.shape[0]",
             f"    n1 = v{b}.shape[1]", f"    v{out} = al.empty((n0, n1), np.float64)",
             "    for i0 in range(n0):", f"        h{a} = v{a}[i0, 0]",
             "        for i1 in range(n1):",
             f"            {prod} = h{a} * v{b}[0, i1]  # %{out} = mul.Tensor(%{a}, %{b})"]
    if add:
        acc, index, acc_first = add
        term = f"{acc}[{index}] + {prod}" if acc_first else f"{prod} + {acc}[{index}]"
        lines.append(f"            t{out} = {term}  # %{out} = add.Tensor(%5, %{out - 1})")
    return lines + [f"            v{out}[i0, i1] = t{out}"]


_BARE = _outer(10, 1, 2)


def _adding(acc_index="i0, i1", acc_first=True):
    return _outer(21, 3, 4, add=("v5", acc_index, acc_first))


@pytest.mark.parametrize("acc_first", [True, False])
def test_outliner_redirects_a_bare_loop_to_its_adding_form(acc_first):
    o = Outliner({10: SimpleNamespace(shape=(3, 4), dtype=np.dtype(np.float32))})
    lines = [o.call(_BARE, False), o.call(_adding(acc_first=acc_first), False)]
    assert lines == ["    v10, = loop0(v1, v2)", "    v21, = loop1(v3, v4, v5)"]
    assert o.finish(lines) == [
        "    v10, = loop1(v1, v2, al.zeros((np.int64(3), np.int64(4)), np.float32))",
        "    v21, = loop1(v3, v4, v5)"]
    (src,) = o.functions()
    assert src.startswith("@numba.njit") and "def loop1(" in src


def test_outliner_keeps_a_bare_loop_without_a_matching_adding_form():
    o = Outliner({10: SimpleNamespace(shape=(3, 4), dtype=np.dtype(np.float64))})
    lines = [o.call(_BARE, False), o.call(_adding(acc_index="0, i1"), False)]
    assert o.finish(lines) == lines and len(o.functions()) == 2
    # nor one called inside a loop of the entry (a rolled body): the zeros' shape is
    # that of the value a top-level call defines
    o = Outliner({10: SimpleNamespace(shape=(3, 4), dtype=np.dtype(np.float64))})
    lines = ["    " + o.call(_BARE, False), o.call(_adding(), False)]
    assert o.finish(lines) == lines and len(o.functions()) == 2
    # nor a parallel loop by a serial one
    o = Outliner({10: SimpleNamespace(shape=(3, 4), dtype=np.dtype(np.float64))})
    lines = [o.call(_BARE, True), o.call(_adding(), False)]
    assert o.finish(lines) == lines and len(o.functions()) == 2


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
