"""Recomputation (lowering/schedule_remat.py): a cheap elementwise value that later loops
read is computed again there instead of stored, where that moves fewer bytes.

Counters, not clocks: the arrays a generated module allocates, and where a node's line
sits. Gradients with recomputation equal, bit for bit, those of the code that stores,
and finite differences.
"""
import numpy as np
import pytest

import gradjit as gj
from gradjit.lowering import codegen_cpu, schedule_remat
from gradjit.lowering.codegen_cpu import generate
from gradjit.lowering.passes import optimize
from gradjit.runtime import plans
from gradjit.runtime.compiler import compile_graph
from gradjit.tracer.interp import interpret
from gradjit.tracer.trace import trace
from tests.fd import numerical_grad

pytestmark = pytest.mark.slow   # (pyproject.toml: the default run skips it; CI runs it)


def _mlp(W1, b1, W2, W3, X):
    h1 = np.tanh(X @ W1 + b1)
    h2 = np.tanh(h1 @ W2)
    return (h2 @ W3).sum()


def _mlp_args(rng, batch, dtype):
    return [rng.normal(size=s).astype(dtype) / 4
            for s in ((40, 64), (64,), (64, 64), (64, 3), (batch, 40))]


def _stored(src):
    return src.count("al.empty(")


def _sources_and_gradients(f, args, argnums, monkeypatch):
    """(source, gradients) of f's joint graph with recomputation on, then off."""
    opt = gj.grad(f, argnums=argnums).graphs(*args)[1]
    out = []
    for on in (True, False):
        monkeypatch.setattr(codegen_cpu, "RECOMPUTE", on)
        # the plan cache keys generated text by the generator's code: a switched flag
        # must not read the other setting's plan
        monkeypatch.setattr(plans, "_CODE", [f"recompute {on}"])
        exe = compile_graph(opt)
        out.append((exe.source, exe(list(args))))
    return out


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_tanh_layers_read_h_instead_of_storing_one_minus_h_squared(dtype, rng, monkeypatch):
    args = _mlp_args(rng, 64, dtype)   # 64 x 64 loops: MIN_ELEMENTS
    (src, got), (src_off, want) = _sources_and_gradients(_mlp, args, (0, 1, 2, 3), monkeypatch)
    assert _stored(src) == _stored(src_off) - 2, src
    # 1 - h*h is computed in the backward loops, each of which stores the product with it
    for line in [ln for ln in src.split("\n") if "rsub.Scalar" in ln]:
        t = line.split("=")[0].strip()
        assert f" * {t}  #" in src, src
    for a, b in zip(got, want):
        assert a.dtype == dtype
        np.testing.assert_array_equal(a, b)


def test_recomputed_gradient_matches_finite_differences(rng, monkeypatch):
    monkeypatch.setattr(schedule_remat, "MIN_ELEMENTS", 1)
    args = [rng.normal(size=s) / 2 for s in ((5, 6), (6,), (6, 6), (6, 2), (7, 5))]
    (src, got), (src_off, _) = _sources_and_gradients(_mlp, args, (0, 1, 2, 3), monkeypatch)
    assert _stored(src) == _stored(src_off) - 2
    for i, g in enumerate(got):
        np.testing.assert_allclose(g, numerical_grad(_mlp, args, i), rtol=1e-7, atol=1e-9)


def test_small_values_stay_stored(rng, monkeypatch):
    args = _mlp_args(rng, 8, np.float64)   # 8 x 64 loops: below MIN_ELEMENTS
    (src, _), (src_off, _) = _sources_and_gradients(_mlp, args, (0, 1, 2, 3), monkeypatch)
    assert src == src_off


# Graphs of three steps:  p = make_p(x0, x1) (loop L);  q = x0 @ w (a statement);
# r = combine(p, q, x0) (loop M, after the statement). L stores p for M only, unless said.
N = 80


def _graph(make_p, combine=lambda p, q, x0: p + q, extra_out=False, p_to_matmul=False):
    vals = [np.linspace(0.1, 0.9, N * N).reshape(N, N), np.full((N, N), 0.5), np.eye(N) / 2]
    g, (x0, x1, w), _ = trace(vals, name="remat")
    p = make_p(x0, x1)
    q = (p if p_to_matmul else x0) @ w
    g.outputs = [combine(p, q, x0).value] + ([p.value] if extra_out else [])
    return optimize(g), vals


def _recomputed(graph, vals, op):
    """Is every line of ``op`` after the matmul (in M), and does the code compute the
    interpreter's result?"""
    src = generate(graph).source
    lines = src.split("\n")
    mm = next(i for i, ln in enumerate(lines) if "bl.mm(" in ln)
    at = [i for i, ln in enumerate(lines) if f"= {op}(" in ln]
    assert at, src
    exe = compile_graph(graph)
    for a, b in zip(exe(list(vals)), interpret(graph, list(vals))):
        np.testing.assert_allclose(a, b, rtol=1e-14)
    return all(i > mm for i in at), src


def test_a_loop_left_with_nothing_to_store_is_removed():
    done, src = _recomputed(*_graph(lambda a, b: a * a), "mul.Tensor")
    assert done and src.count("# loop over") == 1 and _stored(src) == 1


def test_transcendentals_stay_stored():
    done, src = _recomputed(*_graph(lambda a, b: a.exp()), "exp.default")
    assert not done and src.count("# loop over") == 2


@pytest.mark.parametrize("kw", [dict(p_to_matmul=True), dict(extra_out=True)],
                         ids=["read-by-a-matmul", "returned"])
def test_values_a_statement_or_the_caller_reads_stay_stored(kw):
    done, src = _recomputed(*_graph(lambda a, b: a * a, **kw), "mul.Tensor")
    assert not done and src.count("# loop over") == 2


def test_chains_need_their_leaves_stored_anyway():
    # p = exp(x0) * x0: recomputing p needs exp(x0), which nothing stores
    done, _ = _recomputed(*_graph(lambda a, b: a.exp() * a), "exp.default")
    assert not done


def test_only_recomputation_that_moves_fewer_bytes():
    # p = x0 * x1 needs two arrays M does not read: as many bytes as p's store and read
    done, _ = _recomputed(*_graph(lambda a, b: a * b), "mul.Tensor")
    assert not done
    # the same p when M reads x0 anyway: one more array, half what storing p moves
    done, _ = _recomputed(*_graph(lambda a, b: a * b, combine=lambda p, q, x0: p + q * x0),
                          "mul.Tensor")
    assert done


def _rnn_graphs(loss):
    """The joint graph (gj.grad) and the tensor-mode backward graph of a rolled RNN."""
    from gradjit.runtime.engine import build_plan
    from gradjit.tracer.record import History
    from tests.lowering import test_roll
    # (the two-layer RNN at 12 steps: its 36 took a minute to compile, every size eligible)
    steps = 36 if loss == "rnn_running_loss" else 12
    f, args = getattr(test_roll, loss), test_roll._rnn_args(steps)
    joint = gj.grad(f, argnums=(0, 1, 2)).graphs(*args)[1]
    ts = [gj.tensor(a, requires_grad=i < 3) for i, a in enumerate(args)]
    out = f(*ts)
    hist = History([out])
    plan = build_plan(hist, ((out.shape, out.dtype),),
                      [hist.addr(t) for t in hist.leaves if t.requires_grad])
    return [joint, plan.bwd_graph]


@pytest.mark.parametrize("loss", ["rnn_running_loss", "rnn_two_layer_loss"])
def test_every_size_eligible_rolled_rnn_gradients_match_the_interpreter(loss, monkeypatch, rng):
    # With no size floor the pass meets what the floor keeps it from in practice: 0-d
    # values (scalar carries, never recomputed: they are registers), and chains that
    # share nodes with one recomputed into the same loop before (the shared nodes move
    # ahead with the new chain). The rolled or outlined code must still compute what the
    # interpreter does, on any inputs.
    graphs = _rnn_graphs(loss)
    floors = [generate(g).source for g in graphs]
    monkeypatch.setattr(schedule_remat, "MIN_ELEMENTS", 1)
    monkeypatch.setattr(plans, "_CODE", [f"recompute everything {loss}"])
    for g, floor in zip(graphs, floors):
        exe = compile_graph(g)
        assert exe.source != floor   # (rolled, or its loops outlined)
        assert "# rolled:" in exe.source or "\ndef loop" in exe.source
        ins = [rng.normal(size=v.shape).astype(v.dtype) for v in g.inputs]
        for got, want in zip(exe(ins), interpret(g, ins)):
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
