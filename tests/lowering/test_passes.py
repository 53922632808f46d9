"""Graph passes: DCE, CSE, decomposition of composite ops, ``extract``."""
import numpy as np
import pytest

import gradjit as gj

from gradjit.lowering.passes import dce, extract, optimize, prune_inputs, rebuild
from gradjit.lowering.schedule import schedule
from gradjit.tracer.interp import interpret
from gradjit.tracer.registry import get_op
from gradjit.tracer.trace import trace


def ops(g):
    return [n.op for n in g.nodes]


def values_of(g, arrays, vals):
    """The arrays of arbitrary values of ``g`` (interpreted)."""
    saved = g.outputs
    g.outputs = list(vals)
    try:
        return interpret(g, arrays)
    finally:
        g.outputs = saved


@pytest.fixture
def xy(rng):
    return rng.standard_normal((3, 4)), rng.standard_normal((3, 4))


# -- dead code -------------------------------------------------------------------------
def test_dce_removes_unused_nodes(xy):
    g, (x, y), _ = trace(xy)
    a = x * y
    dead = (x.exp() + y).sin()          # a whole dead chain
    _ = dead.sum()
    out = a.sum()
    g.outputs = [out.value]
    before = ops(g)
    assert before.count("sin.default") == 1
    dce(g)
    assert ops(g) == ["mul.Tensor", "sum.default"]
    assert g.inputs[0] is x.value and g.inputs[1] is y.value  # inputs are kept
    (res,) = interpret(g, list(xy))
    np.testing.assert_allclose(res, np.sum(xy[0] * xy[1]))


def test_dce_keeps_everything_live(xy):
    g, (x, y), _ = trace(xy)
    a = x * y
    g.outputs = [a.exp().value, (a + x).value]
    n = len(g.nodes)
    dce(g)
    assert len(g.nodes) == n


def test_optimize_removes_dead_nodes_and_keeps_inputs(xy):
    g, (x, y), _ = trace(xy)
    _ = y.tanh()
    g.outputs = [x.exp().value]
    opt = optimize(g)
    assert ops(opt) == ["exp.default"]
    assert [(v.shape, v.dtype) for v in opt.inputs] == [(v.shape, v.dtype) for v in g.inputs]
    assert prune_inputs(opt) == [0]
    assert len(opt.inputs) == 1


# -- common subexpressions ----------------------------------------------------------------
def test_cse_merges_duplicates(xy):
    g, (x, y), _ = trace(xy)
    out = x * y + x * y
    g.outputs = [out.value]
    assert ops(g).count("mul.Tensor") == 2
    opt = optimize(g)
    assert ops(opt) == ["mul.Tensor", "add.Tensor"]
    mul, add = opt.nodes
    assert add.inputs == [mul.outputs[0], mul.outputs[0]]
    np.testing.assert_allclose(interpret(opt, list(xy))[0], 2 * xy[0] * xy[1])


def test_cse_merges_chains(xy):
    g, (x, y), _ = trace(xy)
    out = (x * y).exp().sum(1) + (x * y).exp().sum(1)
    g.outputs = [out.value]
    opt = optimize(g)
    assert ops(opt) == ["mul.Tensor", "exp.default", "sum.dim_IntList", "add.Tensor"]
    np.testing.assert_allclose(interpret(opt, list(xy))[0], interpret(g, list(xy))[0])


def test_cse_does_not_merge_different_nodes(xy):
    g, (x, y), _ = trace(xy)
    outs = [x * 2.0, x * 3.0, x * y, x * x, x.sum(0), x.sum(1)]
    g.outputs = [o.value for o in outs]
    opt = optimize(g)
    assert len(opt.nodes) == len(outs)
    for a, b in zip(interpret(opt, list(xy)), interpret(g, list(xy))):
        np.testing.assert_allclose(a, b)


def test_cse_without_flag(xy):
    g, (x, y), _ = trace(xy)
    g.outputs = [(x * y + x * y).value]
    assert ops(rebuild(g, cse=False)).count("mul.Tensor") == 2


# -- decomposition -----------------------------------------------------------------------
COMPOSITES = {
    "mean": (lambda x: x.mean(), "mean.default"),
    "mean.dim": (lambda x: x.mean(1), "mean.default"),
    "mean.dim-keepdim": (lambda x: x.mean((0, 2), keepdim=True), "mean.dim"),
    "softmax": (lambda x: x.softmax(1), "_softmax.default"),
    "softmax-last": (lambda x: x.softmax(-1), "_softmax.default"),
    "log_softmax": (lambda x: x.log_softmax(0), "_log_softmax.default"),
    "log_softmax-mid": (lambda x: x.log_softmax(1), "_log_softmax.default"),
}


@pytest.mark.parametrize("name", COMPOSITES)
def test_decomposition_gives_same_values(name, rng):
    fn, _ = COMPOSITES[name]
    arr = rng.standard_normal((3, 4, 5)) * 3
    g, (x,), _ = trace([arr])
    g.outputs = [fn(x).value]
    composite = {n.op for n in g.nodes}
    assert composite & {"mean.default", "mean.dim", "_softmax.default", "_log_softmax.default"}
    opt = optimize(g)
    for n in opt.nodes:
        assert get_op(n.op).kind != "composite", opt
        assert not n.op.startswith("mean"), opt
    (want,) = interpret(g, [arr])
    (got,) = interpret(opt, [arr])
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    schedule(opt)  # the code generators can handle what is left


def test_decomposition_float32_keeps_dtype(rng):
    arr = rng.standard_normal((4, 6)).astype(np.float32)
    g, (x,), _ = trace([arr])
    g.outputs = [x.softmax(1).value, x.log_softmax(0).value, x.mean(1).value]
    opt = optimize(g)
    for a, b, v in zip(interpret(opt, [arr]), interpret(g, [arr]), opt.outputs):
        assert v.dtype == np.float32 and a.dtype == np.float32
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_decomposition_keeps_user_site(rng):
    g, (x,), _ = trace([rng.standard_normal((2, 3))])
    out = x.softmax(1)  # softmax-site
    g.outputs = [out.value]
    site = g.nodes[0].site
    assert site is not None and "softmax-site" in site.text
    opt = optimize(g)
    assert len(opt.nodes) > 1
    assert all(n.site is not None and n.site.lineno == site.lineno for n in opt.nodes)


def test_decomposition_is_numerically_stable():
    arr = np.array([[1000.0, 1001.0, 999.0], [-1000.0, -1002.0, -1001.0]])
    g, (x,), _ = trace([arr])
    g.outputs = [x.softmax(1).value, x.log_softmax(1).value]
    sm, lsm = interpret(optimize(g), [arr])
    assert np.all(np.isfinite(sm)) and np.all(np.isfinite(lsm))
    np.testing.assert_allclose(sm.sum(1), 1.0)
    np.testing.assert_allclose(np.exp(lsm), sm)


# -- constants ---------------------------------------------------------------------------
def test_optimize_keeps_captured_constants(rng):
    c = rng.standard_normal(4)
    g, (x,), _ = trace([rng.standard_normal(4)])
    g.outputs = [(x * c).exp().value]
    (cv,) = g.constants
    opt = optimize(g)
    assert len(opt.inputs) == len(g.inputs)
    new_cv = opt.inputs[g.inputs.index(cv)]
    np.testing.assert_array_equal(opt.constants[new_cv], c)


# -- extract -----------------------------------------------------------------------------
def test_extract_cut_gives_correct_feeds(xy):
    g, (x, y), _ = trace(xy)
    a = x * y
    b = a.exp()
    c = b + y
    d = c.sum()
    g.outputs = [d.value]
    nodes = [b.value.node, c.value.node]
    sub, feeds = extract(g, nodes, [c.value])
    # inputs: the outside values read, in first-use order
    assert feeds == [a.value, y.value]
    assert [(v.shape, v.dtype) for v in sub.inputs] == [(v.shape, v.dtype) for v in feeds]
    assert ops(sub) == ["exp.default", "add.Tensor"]
    fed = values_of(g, list(xy), feeds)
    (got,) = interpret(sub, fed)
    (want,) = values_of(g, list(xy), [c.value])
    np.testing.assert_allclose(got, want)


def test_extract_outputs_outside_the_cut(xy):
    g, (x, y), _ = trace(xy)
    a = x * y
    b = a.exp()
    sub, feeds = extract(g, [b.value.node], [b.value, a.value, x.value])
    assert feeds == [a.value, x.value]
    assert len(sub.outputs) == 3
    got = interpret(sub, values_of(g, list(xy), feeds))
    want = values_of(g, list(xy), [b.value, a.value, x.value])
    for p, q in zip(got, want):
        np.testing.assert_allclose(p, q)


def test_extract_carries_constants(rng):
    c = rng.standard_normal(3)
    g, (x,), _ = trace([rng.standard_normal(3)])
    a = x.sin()
    b = a * c
    g.outputs = [b.value]
    (cv,) = g.constants
    sub, feeds = extract(g, [b.value.node], [b.value])
    assert feeds == [a.value, cv]
    assert list(sub.constants) == [sub.inputs[1]]
    np.testing.assert_array_equal(sub.constants[sub.inputs[1]], c)


def test_extract_of_adjoint_nodes_matches_whole_graph(xy):
    """The tensor-mode backward: cut the adjoint nodes off a recorded forward."""
    from gradjit.lowering.adjoint import adjoint

    g, (x, y), _ = trace(xy)
    loss = ((x * y).tanh() - y).sum()
    g.outputs = [loss.value]
    n_forward = len(g.nodes)
    seed = g.add_input((), np.float64)
    (gx,) = adjoint(g, [loss.value], [seed], [x.value])
    sub, feeds = extract(g, g.nodes[n_forward:], [gx])
    sub = optimize(sub)
    arrays = list(xy) + [np.array(1.0)]
    fed = values_of(g, arrays, feeds)
    (got,) = interpret(sub, fed)
    t = np.tanh(xy[0] * xy[1])
    np.testing.assert_allclose(got, (1 - t * t) * xy[1])


def test_a_round_trip_of_views_is_the_value_itself(rng):
    # a keepdim sum viewed as 0-d and unsqueezed back (a parameter's gradient), and a
    # reshape there and back: no view left between the values and their readers
    def f(x, y):
        s = x.sum(axis=0, keepdims=True)[:1]         # (1,)
        back = s.reshape(()).reshape((1,)) * 2.0
        z = y.reshape(12).reshape(4, 3).reshape(3, 4)
        return back, z * y, z.reshape(4, 3)          # (a returned view stays a node)
    x, y = rng.standard_normal((4,)), rng.standard_normal((3, 4))
    g = gj.jit(f).graphs(x, y)[0]
    assert sum(n.op == "view.default" for n in g.nodes) == 6   # (as traced)
    o = optimize(g)
    views = [n for n in o.nodes if n.op in ("view.default", "unsqueeze.default",
                                            "squeeze.dim", "squeeze.default")]
    assert len(views) == 1 and views[0].outputs[0] in o.outputs, ops(o)
    for a, b in zip(interpret(o, [x, y]), f(x, y)):
        np.testing.assert_allclose(a, b)
