"""``python -m gradjit coverage``: which ``derivatives.yaml`` entries are compiled and tested.

Contract
- ``rows() -> [Row]``: one row per entry of our ``derivatives.yaml`` (file
  order) with the op's kind, whether the CPU code generator can emit it
  (``cpu``) and whether it appears in the ``CASES`` table of
  ``tests/lowering/test_yaml_entries.py`` (``tested``; ``None`` when the tests
  are not installed beside the package, e.g. from a wheel).
- CPU support by kind: ``elementwise`` ops need a scalar template
  (``codegen_cpu_expr._expr`` does not raise ``NotImplementedError`` for them),
  ``reduction`` ops a loop accumulator (``schedule.REDUCTIONS``), ``kernel``
  ops an emitter (``codegen_cpu_kernels.KERNELS``), ``composite`` ops a
  decomposition (``passes.DECOMPOSITIONS``), ``matmul`` / ``shape`` ops a
  statement in ``codegen_cpu_stmt.stmt``. The check runs the emitter on a
  throw-away node built from the schema; nothing is compiled.
- The tests' ``CASES`` keys are read with ``ast`` (the test module is never
  imported). ``report() -> str`` is the table plus totals; ``main()`` prints it.
- Composite ops (second section): ``composite_rows() -> [CompositeRow]``, one
  row per public function of ``gj.nn.functional`` and ``gj.linalg`` and per
  public method of ``Tensor`` that is not itself a registered (yaml-backed) op
  name; such ops have no formula of their own and are recorded as the
  registered ops they decompose into (``via``). Tensor utilities that are not
  ops (``backward``, ``numpy``, ``size`` ...) are left out. ``tested`` is
  whether the name occurs as a word in the sources under ``tests/`` (``None``
  when the tests are absent). ``report()`` appends this section and its totals.
- NumPy conformance (last line): ``conformance_line()`` imports the OpInfo table
  ``tests/conformance/opinfo.py`` (located like the yaml tests) and reports its size
  (OpInfos, dispatch-table entries covered, ndarray methods, sample cases), or
  "not installed" when the tests are not beside the package.
"""
from __future__ import annotations

import ast
import inspect
import os
import re
from dataclasses import dataclass

import numpy as np
import yaml

from gradjit.lowering import codegen_cpu, codegen_cpu_expr, codegen_cpu_stmt, formulas
from gradjit.lowering.codegen_cpu_kernels import KERNELS
from gradjit.lowering.passes import DECOMPOSITIONS
from gradjit.lowering.schedule import REDUCTIONS
from gradjit.tracer.ir import Graph, Node
from gradjit.tracer.registry import OPS, parse_schema


@dataclass
class Row:
    op: str
    kind: str
    cpu: bool
    tested: bool | None
    cuda: bool = False


_ATTR_SAMPLES = {"Scalar": 1.0, "Scalar?": 1.0, "int": 0, "SymInt": 0, "bool": False,
                 "float": 1.0, "ScalarType": np.dtype(np.float64)}


def _sample_node(op):
    g = Graph("coverage")
    ins = [g.add_input((2, 2), np.bool_ if a == "condition" else np.float64)
           for a in op.schema.tensor_args]
    attrs = {}
    for a in op.schema.attr_args:
        if a.has_default:
            attrs[a.name] = a.default
        elif a.type.endswith("[]") or "[" in a.type:
            attrs[a.name] = (0, 1) if a.name in ("dims",) else (2, 2)
        else:
            attrs[a.name] = _ATTR_SAMPLES.get(a.type, 1)
    node = Node(op.name, ins, attrs)
    node.outputs = [g._new_value((2, 2), np.float64, node, i) for i in range(len(op.schema.returns))]
    return node


def _emits(fn):
    try:
        fn()
    except NotImplementedError:
        return False
    except Exception:   # the emitter knew the op and only disliked the sample attributes
        return True
    return True


def cpu_supported(op):
    kind = op.kind
    if op.name in DECOMPOSITIONS:   # mean, softmax ...: emitted as the ops they decompose into
        return True
    if kind == "reduction":
        return op.name in REDUCTIONS
    if kind == "kernel":
        return op.name in KERNELS
    if kind == "composite":
        return op.name in DECOMPOSITIONS
    node = _sample_node(op)
    e = codegen_cpu._Emitter(Graph("coverage"))
    if kind == "elementwise":
        return _emits(lambda: codegen_cpu_expr._expr(node, ["a", "b", "c"][:len(node.inputs)], e))
    return _emits(lambda: codegen_cpu_stmt.stmt(e, node))


def cuda_supported(op):
    """Whether the CUDA generator (lowering/codegen_cuda.py) renders ``op``; rendering needs
    no numba-cuda, so this works on any machine."""
    from gradjit.lowering import codegen_cuda
    from gradjit.lowering.codegen_cuda_kernels import CUDA_KERNELS
    kind = op.kind
    if op.name in DECOMPOSITIONS:
        return True
    if kind == "reduction":
        return op.name in REDUCTIONS
    if kind == "kernel":
        return op.name in CUDA_KERNELS
    if kind == "composite":
        return False
    node = _sample_node(op)
    e = codegen_cuda.CudaEmitter(Graph("coverage"))
    e.begin()
    if kind == "elementwise":
        return _emits(lambda: e.expr(node, ["a", "b", "c"][:len(node.inputs)]))
    return _emits(lambda: codegen_cuda._stmt(e, node))


def cuda_cpu_only():
    """Registered ops the CPU generator emits and the CUDA generator does not."""
    return {name for name, op in OPS.items() if cpu_supported(op) and not cuda_supported(op)}


def tested_ops(path=None):
    """Keys of ``CASES`` in tests/lowering/test_yaml_entries.py, or None if it is absent."""
    path = path or os.path.join(os.path.dirname(formulas.default_path()), "tests", "lowering",
                                "test_yaml_entries.py")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        tree = ast.parse(f.read())
    for node in ast.walk(tree):
        if (isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "CASES"
                                                 for t in node.targets)
                and isinstance(node.value, ast.Dict)):
            return {k.value for k in node.value.keys if isinstance(k, ast.Constant)}
    return set()


def rows(yaml_path=None, tests_path=None):
    with open(yaml_path or formulas.default_path()) as f:
        raw = yaml.safe_load(f) or []
    tested = tested_ops(tests_path)
    out = []
    for item in raw:
        name = parse_schema(item["name"]).name
        op = OPS.get(name)
        out.append(Row(name, op.kind if op else "unregistered", bool(op) and cpu_supported(op),
                       None if tested is None else name in tested, bool(op) and cuda_supported(op)))
    return out


def report(table=None):
    table = rows() if table is None else table
    width = max([len(r.op) for r in table] + [2])
    yn = {True: "yes", False: "NO", None: "?"}
    lines = [f"{'op':<{width}}  {'kind':<12}  cpu  cuda  tested", "-" * (width + 32)]
    lines += [f"{r.op:<{width}}  {r.kind:<12}  {yn[r.cpu]:<3}  {yn[r.cuda]:<4}  {yn[r.tested]}"
              for r in table]
    n = len(table)
    cpu = sum(r.cpu for r in table)
    tested = ("?" if any(r.tested is None for r in table) else sum(r.tested for r in table))
    both = sum(bool(r.cpu and r.tested) for r in table)
    cuda = sum(r.cuda for r in table)
    lines.append("-" * (width + 32))
    lines.append(f"total: {n} derivatives.yaml entries; CPU code generation {cpu}/{n}; "
                 f"CUDA code generation {cuda}/{n}; tested {tested}/{n}; both {both}/{n}")
    return "\n".join(lines)


@dataclass
class CompositeRow:
    op: str          # "gj.nn.functional.cross_entropy", "gj.linalg.lstsq", "Tensor.var"
    via: str         # how it is differentiated
    tested: bool | None


# Tensor methods that are utilities, not ops (no forward value to differentiate).
_NOT_OPS = {"backward", "register_hook", "retain_grad", "requires_grad_", "numpy", "item",
            "tolist", "dim", "size", "numel", "new_empty", "new_full", "new_ones", "new_tensor",
            "new_zeros"}


def _registered_names():
    return {k.split(".")[0] for k in OPS}


def _public_functions(module):
    names = getattr(module, "__all__", None) or [n for n in dir(module) if not n.startswith("_")]
    out = []
    for n in sorted(set(names)):
        obj = getattr(module, n, None)
        if (callable(obj) and not isinstance(obj, type) and not inspect.ismodule(obj)
                and getattr(obj, "__module__", "").startswith("gradjit")):
            out.append(n)
    return out


def composite_ops():
    """(qualified name, bare name) of every composite: not a registered op name."""
    import gradjit.nn.functional as F
    from gradjit.tracer import linalg
    from gradjit.tracer.tensor import Tensor
    reg = _registered_names()
    out = [(f"gj.nn.functional.{n}", n) for n in _public_functions(F) if n not in reg]
    out += [(f"gj.linalg.{n}", n) for n in _public_functions(linalg)
            if n not in reg and f"linalg_{n}" not in reg]
    for n in sorted(dir(Tensor)):
        if n.startswith("_") or n in reg or n in _NOT_OPS:
            continue
        if inspect.isfunction(inspect.getattr_static(Tensor, n)):
            out.append((f"Tensor.{n}", n))
    return out


def _tests_text(tests_dir=None):
    tests_dir = tests_dir or os.path.join(os.path.dirname(formulas.default_path()), "tests")
    if not os.path.isdir(tests_dir):
        return None
    parts = []
    for root, _, files in os.walk(tests_dir):
        for fn in files:
            if fn.endswith(".py"):
                with open(os.path.join(root, fn), encoding="utf-8") as f:
                    parts.append(f.read())
    return "\n".join(parts)


def composite_rows(tests_dir=None):
    text = _tests_text(tests_dir)
    return [CompositeRow(q, "decomposes into registered ops",
                         None if text is None else re.search(rf"\b{re.escape(n)}\b", text) is not None)
            for q, n in composite_ops()]


def composite_report(table=None):
    table = composite_rows() if table is None else table
    width = max([len(r.op) for r in table] + [2])
    yn = {True: "yes", False: "NO", None: "?"}
    lines = ["composite ops (no formula of their own)",
             f"{'op':<{width}}  {'backward':<31}  tested", "-" * (width + 41)]
    lines += [f"{r.op:<{width}}  {r.via:<31}  {yn[r.tested]}" for r in table]
    n = len(table)
    tested = ("?" if any(r.tested is None for r in table) else sum(r.tested for r in table))
    lines.append("-" * (width + 41))
    lines.append(f"total: {n} composite ops; decompose into registered ops {n}/{n}; "
                 f"tested {tested}/{n}")
    return "\n".join(lines)


def conformance_path():
    """tests/conformance/opinfo.py beside the package (a source checkout), else None."""
    path = os.path.join(os.path.dirname(formulas.default_path()), "tests", "conformance",
                        "opinfo.py")
    return path if os.path.exists(path) else None


def conformance_line(path=None):
    """One line on the NumPy conformance table (tests/conformance/opinfo.py): its size, or
    'not installed' when the tests are not beside the package (e.g. from a wheel)."""
    import importlib.util
    path = path or conformance_path()
    if path is None or not os.path.exists(path):
        return "NumPy conformance table: not installed (tests/conformance/opinfo.py is absent)"
    import sys
    name = "_gradjit_conformance_opinfo"
    spec = importlib.util.spec_from_file_location(name, path)
    table = importlib.util.module_from_spec(spec)
    sys.modules[name] = table   # its dataclasses look their module up while it executes
    try:
        spec.loader.exec_module(table)
    finally:
        sys.modules.pop(name, None)
    n_ops, n_funcs, n_methods, n_samples = table.table_size()
    total = len(table.dispatch_table())
    return (f"NumPy conformance table: {n_ops} OpInfos covering {n_funcs}/{total} NumPy "
            f"dispatch-table entries and {n_methods} ndarray methods, {n_samples} sample cases "
            f"(tests/conformance/opinfo.py)")


def main():
    print(report())
    print()
    print(composite_report())
    print()
    print(conformance_line())
    return 0
