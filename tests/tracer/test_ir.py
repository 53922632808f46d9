"""The IR: readable printer, structural key (tensor recording and jit tracing)."""
import numpy as np
import pytest

import gradjit as gj
from gradjit.tracer.ir import Graph, format_node
from gradjit.tracer.record import History
from gradjit.tracer.trace import trace


# -- helpers -------------------------------------------------------------------------
def _program(x, y, op="tanh", exponent=2, dim=1, wire="x"):
    """A small program on tensors or tracers; the keywords vary one structural aspect."""
    h = getattr(x * y, op)()
    other = x if wire == "x" else y
    return ((h - other) ** exponent).sum(dim).mean()


def tensor_key(xs, ys, **kw):
    x = gj.tensor(xs, requires_grad=True)
    y = gj.tensor(ys)
    loss = _program(x, y, **kw)
    return History([loss]).graph().key()


def jit_key(xs, ys, **kw):
    g, (x, y), _ = trace([xs, ys])
    g.outputs = [_program(x, y, **kw).value]
    return g.key()


KEYS = {"tensor": tensor_key, "jit": jit_key}


def arrays(shape=(2, 3), dtype=np.float64, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(shape).astype(dtype), rng.standard_normal(shape).astype(dtype)


# -- printer -------------------------------------------------------------------------
def test_printer_one_line_per_node_with_ops_and_shapes():
    x = gj.tensor(np.ones((2, 3)), requires_grad=True)
    w = gj.tensor(np.ones((3, 4)))
    loss = (x @ w).tanh().sum()
    g = History([loss]).graph()
    text = str(g)
    lines = text.splitlines()
    # header, one line per node, return, closing brace
    assert len(lines) == len(g.nodes) + 3, text
    assert lines[0].startswith(g.name + "(")
    assert "float64[2,3]" in lines[0] and "float64[3,4]" in lines[0]
    body = lines[1:-2]
    for line, node in zip(body, g.nodes):
        assert line.strip() == format_node(node)
        assert node.op in line
        for v in node.outputs:
            assert v.type_str() in line
    assert [n.op for n in g.nodes] == ["mm.default", "tanh.default", "sum.default"]
    assert "float64[2,4]" in body[0] and "float64[]" in body[2]
    assert lines[-2].strip().startswith("return")
    assert lines[-1] == "}"


def test_printer_shows_attributes_and_outputs():
    g, (x,), _ = trace([np.ones((4, 5), np.float32)], name="f")
    out = (x.sum(1, keepdim=True) * 0.5).exp()
    g.outputs = [out.value]
    text = str(g)
    assert text.splitlines()[0] == "f(%0:float32[4,5]) {"
    assert "sum.dim_IntList(%0, dim=(1,), keepdim=True)" in text
    assert "mul.Scalar(" in text and "other=0.5" in text
    assert "float32[4,1]" in text
    assert f"return (%{out.value.id})" in text


def test_printer_handmade_graph():
    g = Graph("hand")
    a = g.add_input((3,), np.float64)
    b = g.add_input((), np.float64)
    (c,) = g.add_node("mul.Tensor", [a, b], {}, [((3,), np.dtype(np.float64))])
    g.outputs = [c]
    assert str(g) == ("hand(%0:float64[3], %1:float64[]) {\n"
                      "  %2:float64[3] = mul.Tensor(%0, %1)\n"
                      "  return (%2)\n"
                      "}")


# -- structural key --------------------------------------------------------------------
@pytest.mark.parametrize("mode", KEYS)
def test_key_equal_for_same_program_on_different_values(mode):
    key = KEYS[mode]
    k1 = key(*arrays(seed=0))
    k2 = key(*arrays(seed=1))
    assert k1 == k2
    assert hash(k1) == hash(k2)


@pytest.mark.parametrize("mode", KEYS)
@pytest.mark.parametrize("change", [
    pytest.param(dict(shape=(2, 4)), id="shape"),
    pytest.param(dict(dtype=np.float32), id="dtype"),
    pytest.param(dict(op="sin"), id="op"),
    pytest.param(dict(exponent=3), id="attr-exponent"),
    pytest.param(dict(dim=0), id="attr-dim"),
    pytest.param(dict(wire="y"), id="wiring"),
])
def test_key_differs_when_structure_differs(mode, change):
    key = KEYS[mode]
    change = dict(change)
    base = key(*arrays())
    shape = change.pop("shape", (2, 3))
    dtype = change.pop("dtype", np.float64)
    other = key(*arrays(shape, dtype, seed=5), **change)
    assert base != other


def test_key_tensor_and_jit_record_the_same_ops():
    xs, ys = arrays()
    x = gj.tensor(xs, requires_grad=True)
    rec = History([_program(x, gj.tensor(ys))]).graph()
    g, (tx, ty), _ = trace([xs, ys])
    g.outputs = [_program(tx, ty).value]
    assert [n.op for n in rec.nodes] == [n.op for n in g.nodes]
    assert [n.attrs for n in rec.nodes] == [n.attrs for n in g.nodes]


def test_key_jit_captured_constant_values_are_not_in_key():
    """Arrays captured while tracing are graph inputs: their contents never enter the key."""
    def keyed(c):
        g, (x,), _ = trace([np.ones(3)])
        g.outputs = [(x * c).sum().value]
        return g, g.key()

    g1, k1 = keyed(np.array([1.0, 2.0, 3.0]))
    g2, k2 = keyed(np.array([7.0, 8.0, 9.0]))
    assert k1 == k2
    assert len(g1.constants) == 1 and len(g1.inputs) == 2
    _, k3 = keyed(np.ones(3, np.float32))
    assert k3 != k1  # a captured constant's dtype is structure


def test_key_wiring_of_outputs():
    g1, (x, y), _ = trace([np.ones(3), np.ones(3)])
    a, b = x.exp(), y.exp()
    g1.outputs = [a.value, b.value]
    g2, (x2, y2), _ = trace([np.ones(3), np.ones(3)])
    a2, b2 = x2.exp(), y2.exp()
    g2.outputs = [b2.value, a2.value]
    assert g1.key() != g2.key()


def test_key_distinguishes_signed_zero_attribute():
    def keyed(s):
        g, (x,), _ = trace([np.ones(3)])
        g.outputs = [(x * s).value]
        return g.key()

    assert keyed(0.0) != keyed(-0.0)
    assert keyed(2.0) == keyed(2.0)


@pytest.mark.parametrize("transform", ["jit", "grad"])
def test_key_through_public_transforms(interpreted, transform):
    """``gj.jit`` / ``gj.grad`` trace the same structure for equal signatures."""
    def f(x, y):
        return _program(x, y)

    fn = getattr(gj, transform)(f)
    g1, opt1, _ = fn.graphs(*arrays(seed=0))
    g2, opt2, _ = fn.graphs(*arrays(seed=1))
    assert g1.key() == g2.key() and opt1.key() == opt2.key()
    g3, _, _ = fn.graphs(*arrays((2, 4), seed=0))
    assert g3.key() != g1.key()
    g4, _, _ = fn.graphs(*arrays(dtype=np.float32))
    assert g4.key() != g1.key()
