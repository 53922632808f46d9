"""Unit-dims views folded into the loops that read them (lowering/codegen_cpu_fold.py).

Counters, not clocks: which view statements a generated module still builds. Gradients
with folding equal, bit for bit, those of the code that builds every view, and finite
differences.
"""
import re

import numpy as np
import pytest

import gradjit as gj
from gradjit.lowering import codegen_cpu
from gradjit.lowering.codegen_cpu_fold import fold_axis, fold_index, view_folds
from gradjit.lowering.passes import optimize
from gradjit.lowering.schedule import schedule
from gradjit.runtime import plans
from gradjit.runtime.compiler import compile_graph
from gradjit.tracer.interp import interpret
from gradjit.tracer.trace import trace
from tests.fd import numerical_grad
from tests.lowering.test_roll import rnn_args_loss as _rnn

pytestmark = pytest.mark.slow   # (pyproject.toml: the default run skips it; CI runs it)

_VIEW_LINE = re.compile(r"# %\d+:\w+\[[\d,]*\] = (t|view|unsqueeze|squeeze|permute|transpose)\.")


def _views(src):
    """View statements built (not the copies of small transposes: al.contiguous)."""
    return sum(1 for ln in src.split("\n")
               if _VIEW_LINE.search(ln) and "al.contiguous(" not in ln)


def switched(flag, f, args, argnums, monkeypatch):
    """(source, results) of f's graph (joint with ``argnums``, else the forward) compiled
    with ``codegen_cpu.<flag>`` on, then off."""
    t = gj.jit(f) if argnums is None else gj.grad(f, argnums=argnums)
    opt = t.graphs(*args)[1]
    out = []
    for on in (True, False):
        monkeypatch.setattr(codegen_cpu, flag, on)
        monkeypatch.setattr(plans, "_CODE", [f"{flag} {on}"])   # no plan of the other setting
        exe = compile_graph(opt)
        out.append((exe.source, exe(list(args))))
    return out


def _both(f, args, argnums, monkeypatch):
    return switched("FOLD_VIEWS", f, args, argnums, monkeypatch)


def _rnn_args(rng, T, hidden=5, inp=3):
    return ([rng.normal(size=(inp, hidden)) / 2, rng.normal(size=(hidden, hidden)) / 3,
             0.1 * rng.normal(size=hidden), 0.1 * rng.normal(size=(1, hidden))]
            + [rng.normal(size=(1, inp)) for _ in range(T)])


@pytest.mark.parametrize("T", [3, 40], ids=["unrolled", "rolled"])
def test_batch_one_rnn_reads_h_instead_of_building_h_transposed(T, rng, monkeypatch):
    args = _rnn_args(rng, T)
    (src, got), (src_off, want) = _both(_rnn, args, (0, 1, 2), monkeypatch)
    # the weight gradients' outer products read h.T and x.T, (1, n) -> (n, 1) views
    assert _views(src_off) > 0 and _views(src) == 0, src
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    for i in (0, 1, 2):
        np.testing.assert_allclose(got[i], numerical_grad(_rnn, args, i), rtol=1e-6, atol=1e-9)


def _tanh_steps(w, *xs):
    acc = w * 0.0
    for x in xs:
        acc = acc + np.tanh(x.T * w)   # (32, 1) view of each step's (1, 32) x
    return (acc * acc).sum()


def test_an_outlined_loop_takes_its_extents_from_the_base(rng, monkeypatch):
    # rolled, each step's (32, 32) loop is a shared function reading its extents from the
    # shapes of what it takes: x itself, (1, 32), for dim 0 (its axis 1)
    args = [rng.normal(size=(32, 32)) / 4] + [rng.normal(size=(1, 32)) for _ in range(40)]
    (src, got), (src_off, want) = _both(_tanh_steps, args, (0,), monkeypatch)
    assert re.search(r"= loop\d+\(", src) and re.search(r"n0 = v\d+\.shape\[1\]", src), src
    assert _views(src) == 0 < _views(src_off)
    np.testing.assert_array_equal(got[0], want[0])
    args = [a[:4, :4] for a in args[:1]] + [a[:, :4] for a in args[1:3]]   # a small instance
    np.testing.assert_allclose(gj.grad(_tanh_steps)(*args), numerical_grad(_tanh_steps, args, 0),
                               rtol=1e-6, atol=1e-9)


def _kinds(x, y, z):
    a = x.T * y                                  # t: (1, 4) -> (4, 1)
    b = np.tanh(x.reshape(4, 1)) * z             # view: (1, 4) -> (4, 1)
    c = x.T.reshape(4, 1, 1) * z.reshape(4, 3, 1)   # a view of a view: folds to x
    d = x.reshape(4) * z.sum(1)                  # (1, 4) -> (4,)
    e = np.transpose(z.reshape(1, 4, 3), (1, 0, 2)).reshape(4, 3) * y   # unit-dim permute
    return (a * z).sum() + b.sum() + (c * c).sum() + d.sum() + (e ** 3).sum()


def test_every_kind_of_unit_view_folds_and_agrees(rng, monkeypatch):
    args = [rng.normal(size=s) for s in ((1, 4), (1, 3), (4, 3))]
    (src, got), (src_off, want) = _both(_kinds, args, (0, 1, 2), monkeypatch)
    assert _views(src) < _views(src_off), src
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    for i in range(3):
        np.testing.assert_allclose(got[i], numerical_grad(_kinds, args, i), rtol=1e-6, atol=1e-6)


def _graph(f, shapes, rng):
    vals = [rng.normal(size=s) for s in shapes]
    g, ins, _ = trace(vals, name="fold")
    g.outputs = [o.value for o in f(*ins)]
    return optimize(g), vals


def _check(graph, vals):
    exe = compile_graph(graph)
    for a, b in zip(exe(list(vals)), interpret(graph, list(vals))):
        np.testing.assert_allclose(a, b, rtol=1e-14)
    return exe.source


def test_a_view_a_matmul_or_the_caller_reads_is_built(rng):
    graph, vals = _graph(lambda x, w: [(w.T @ x.T).sum() + (x.T * 2.0).sum()], ((1, 4), (4, 3)),
                         rng)
    steps, _ = schedule(graph, unit_views=True, row_passes=True)
    assert view_folds(steps, graph) == {}
    # x.T, and w.T: a view BLAS reads in place (a small transpose is copied only for loops)
    assert _views(_check(graph, vals)) == 2
    graph, vals = _graph(lambda x: [x.T, (x.T * 2.0).sum()], ((1, 4),), rng)
    steps, _ = schedule(graph, unit_views=True, row_passes=True)
    assert view_folds(steps, graph) == {}
    assert _views(_check(graph, vals)) == 1


def test_chains_fold_to_the_first_array_that_is_not_a_view(rng):
    graph, vals = _graph(lambda x, y: [(x.T.reshape(4, 1, 1) * y).sum()], ((1, 4), (4, 3, 2)),
                         rng)
    steps, _ = schedule(graph, unit_views=True, row_passes=True)
    folds = view_folds(steps, graph)
    x = graph.inputs[0]
    assert len(folds) == 2 and set(folds.values()) == {x}
    assert _views(_check(graph, vals)) == 0


def test_index_and_axis_mapping():
    class V:
        def __init__(self, shape):
            self.shape, self.ndim = shape, len(shape)
    base, view = V((1, 1, 4, 1, 5)), V((4, 1, 5))
    folds = {view: base}
    assert fold_index(view, ["i0", "0", "i2"], folds) == (base, ["0", "0", "i0", "0", "i2"])
    assert fold_axis(view, 2, folds) == (base, 4)
    assert fold_index(base, ["a"], folds) == (base, ["a"])   # not a folded view: as is
    one, one_view = V((1, 1)), V((1,))                      # no dim but size-1 ones
    assert fold_index(one_view, ["0"], {one_view: one}) == (one, ["0", "0"])


@pytest.mark.parametrize("shape", [(1, 1), (1, 6), (6, 1)])
def test_size_one_views_in_broadcasting_loops(shape, rng):
    def f(x, y):
        return (np.tanh(x.reshape(-1)) * y).sum() + (x.T * x).sum()
    args = [rng.normal(size=shape), rng.normal(size=(shape[0] * shape[1],))]
    g = gj.grad(f, argnums=(0, 1))(*args)
    for i in (0, 1):
        np.testing.assert_allclose(g[i], numerical_grad(f, args, i), rtol=1e-6, atol=1e-9)
