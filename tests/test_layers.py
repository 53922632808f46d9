"""The stages import one way (tracer -> lowering -> runtime), and the runtime reaches the
tracer only through tracer/hooks.py's table."""
from __future__ import annotations

import ast
import pathlib

import pytest

import gradjit as gj
from gradjit.runtime import autograd, cuda, eager_blas
from gradjit.tracer import hooks
from gradjit.tracer.registry import GradjitError, get_op

ROOT = pathlib.Path(__file__).resolve().parents[1]
LATER = {"tracer": ("gradjit.lowering", "gradjit.runtime"), "lowering": ("gradjit.runtime",)}


def _imports(path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield node.module


@pytest.mark.parametrize("stage", sorted(LATER))
def test_no_stage_imports_a_later_one(stage):
    bad = [f"{p.name}: {m}" for p in sorted((ROOT / stage).glob("*.py")) for m in _imports(p)
           if m.startswith(LATER[stage])]
    assert not bad, f"{stage}/ imports a later stage: {bad}"


def test_the_runtime_is_plugged_in_through_the_hook_table():
    assert hooks.HOOKS.backward is autograd.tensor_backward
    assert hooks.HOOKS.cuda is cuda
    assert get_op("mm.default").eager is eager_blas.eager_mm
    x = gj.tensor([1.0, 2.0], requires_grad=True)
    (x * x).sum().backward()
    assert x.grad.tolist() == [2.0, 4.0]


def test_a_missing_hook_says_so():
    with pytest.raises(GradjitError, match=r"runtime is not plugged in \(backward\)"):
        hooks._Missing("backward")(None)
    with pytest.raises(GradjitError, match=r"not plugged in \(cuda.to_device\)"):
        hooks._Missing("cuda").to_device



def test_unary_front_ends_come_from_the_op_records():
    """A one-array op's NumPy ufunc and methods are made from its registry record, so adding
    one touches the registry, derivatives.yaml and the CPU template only (docs/internals.md)."""
    import numpy as np

    from gradjit.lowering.formulas import load
    from gradjit.runtime.coverage import cpu_supported
    from gradjit.tracer.api import UNARY_UFUNCS, ArrayOps
    from gradjit.tracer.registry import OPS

    records = [op for op in OPS.values() if op.methods]
    assert len(records) >= 30
    entries = set(load())
    for op in records:
        for name in op.methods:
            assert getattr(ArrayOps, name).__qualname__ == f"ArrayOps.{name}", (op.name, name)
        for f in op.numpy:
            assert UNARY_UFUNCS[f] == op.name
        assert op.name in entries, f"{op.name}: no derivatives.yaml entry"
        assert cpu_supported(op), f"{op.name}: no CPU template"
    x = gj.tensor([0.25, 0.5], requires_grad=True)
    np.sinh(x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.cosh([0.25, 0.5]))
    g = gj.grad(lambda v: (v.arcsinh() + np.rint(v) + v.fix()).sum())(np.array([0.3, 1.7]))
    np.testing.assert_allclose(g, 1 / np.sqrt(1 + np.array([0.3, 1.7]) ** 2))

