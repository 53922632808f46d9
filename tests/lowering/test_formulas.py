"""derivatives.yaml: the formula parser (never eval) and the validating loader."""
import builtins
import os
import textwrap

import numpy as np
import pytest
import yaml

import gradjit as gj
import gradjit.lowering.adjoint as adjoint_mod
import gradjit.runtime.engine as engine_mod
from gradjit.lowering import formulas
from gradjit.lowering.formulas import FormulaError, load, parse_formula
from gradjit.lowering.instantiate import evaluate
from gradjit.tracer.registry import OPS

MUL = "mul.Tensor(Tensor self, Tensor other) -> Tensor"
EXP = "exp(Tensor self) -> Tensor"


# -- parser: accepted ------------------------------------------------------------------
@pytest.mark.parametrize("text, tree", [
    ("grad", ("name", "grad")),
    ("grads[0]", ("index", "grads", ("const", 0))),
    ("grad * other", ("bin", "*", ("name", "grad"), ("name", "other"))),
    ("-grad / (2 * result)",
     ("bin", "/", ("neg", ("name", "grad")), ("bin", "*", ("const", 2), ("name", "result")))),
    ("grad ** 2 - 1.5 + x", ("bin", "+", ("bin", "-", ("bin", "**", ("name", "grad"), ("const", 2)),
                                            ("const", 1.5)), ("name", "x"))),
    ("self.sin()", ("method", ("name", "self"), "sin", (), ())),
    ("self.pow(exponent - 1)",
     ("method", ("name", "self"), "pow", (("bin", "-", ("name", "exponent"), ("const", 1)),), ())),
    ("grad.sum(dim, keepdim=True)",
     ("method", ("name", "grad"), "sum", (("name", "dim"),), (("keepdim", ("const", True)),))),
    ("self.t().mm(grad)",
     ("method", ("method", ("name", "self"), "t", (), ()), "mm", (("name", "grad"),), ())),
    ("sum_to(grad, self.sizes())",
     ("call", "sum_to", (("name", "grad"), ("method", ("name", "self"), "sizes", (), ())), ())),
    ("maybe_multiply(-grad, alpha)",
     ("call", "maybe_multiply", (("neg", ("name", "grad")), ("name", "alpha")), ())),
    ("a if grad_input_mask[0] else b",
     ("if", ("index", "grad_input_mask", ("const", 0)), ("name", "a"), ("name", "b"))),
    ("(grad, grads[1])", ("tuple", (("name", "grad"), ("index", "grads", ("const", 1))))),
    ("result == self", ("cmp", "==", ("name", "result"), ("name", "self"))),
    ('not_implemented("why")', ("call", "not_implemented", (("const", "why"),), ())),
])
def test_parser_accepts(text, tree):
    assert parse_formula(text) == tree


def test_parser_accepts_every_real_formula():
    with open(formulas.default_path()) as f:
        raw = yaml.safe_load(f)
    n = 0
    for item in raw:
        for key, text in item.items():
            if key in formulas.KNOWN_KEYS or str(text).strip() == "non_differentiable":
                continue
            assert isinstance(parse_formula(text, item["name"]), tuple)
            n += 1
    assert n > 40


# -- parser: rejected ------------------------------------------------------------------
@pytest.mark.parametrize("text", [
    "grad +",
    "grad * (other",
    "",
    "grad; other",
    "x = grad",
    "grad.frobnicate()",
    "a and b",
    "a < b < c",
    "x[1:2]",
    "{1: grad}",
    "f(**kw)",
    "f(*args)",
    "f'{grad}'",
    "grad @ other",
    "grad.sin",                     # attribute read, not a call
    "grad.T",
])
def test_parser_rejects_malformed(text):
    with pytest.raises(FormulaError):
        parse_formula(text)


@pytest.mark.parametrize("text", [
    "__import__('os').system('x')",
    "__import__('os')",
    "self.__class__",
    "self.__class__.__mro__",
    "grad.__add__(grad)",
    "__builtins__",
    "__builtins__['eval']",
    "_private",
    "lambda: 0",
    "(lambda x: x)(grad)",
    "[g for g in grads]",
    "{g for g in grads}",
    "sum(g for g in grads)",
    "(x := grad)",
    "grad.to(self.__class__)",
])
def test_parser_rejects_unsafe(text):
    with pytest.raises(FormulaError) as ei:
        parse_formula(text, "mul.Tensor")
    assert "mul.Tensor" in str(ei.value)


def test_parse_error_names_entry_and_text():
    with pytest.raises(FormulaError) as ei:
        parse_formula("grad.frobnicate(1)", "exp(Tensor self) -> Tensor")
    msg = str(ei.value)
    assert "exp(Tensor self) -> Tensor" in msg
    assert "grad.frobnicate(1)" in msg and "frobnicate" in msg


def test_formulas_are_never_executed(tmp_path, monkeypatch):
    """Formulas that would create a file if run: parse, load and evaluate never run them."""
    target = tmp_path / "pwned"
    p = str(target)

    def no_eval(*a, **k):
        raise AssertionError("eval/exec called on a formula")

    monkeypatch.setattr(builtins, "eval", no_eval)
    monkeypatch.setattr(builtins, "exec", no_eval)
    evil = [
        f"__import__('os').system('touch {p}')",
        f"open({p!r}, 'w').close()",
        f"__import__('pathlib').Path({p!r}).touch()",
        f"[open({p!r}, 'w') for _ in (1,)]",
        f"(lambda: open({p!r}, 'w'))()",
    ]
    for text in evil:
        with pytest.raises(FormulaError):
            parse_formula(text, "exp")
    # Parses (it is a plain call) but names no helper: the loader rejects it ...
    tree = parse_formula(f"open({p!r}, 'w')")
    yml = tmp_path / "d.yaml"
    yml.write_text(f"- name: {EXP}\n  self: open({p!r}, 'w')\n")
    with pytest.raises(FormulaError, match="open"):
        load(str(yml))
    # ... and even the interpreter only resolves functions in the helper registry.
    with pytest.raises(KeyError):
        evaluate(tree, {})
    assert not target.exists()


def test_real_yaml_loads_without_eval(monkeypatch):
    def no_eval(*a, **k):
        raise AssertionError("eval/exec called while loading derivatives.yaml")

    monkeypatch.setattr(builtins, "eval", no_eval)
    monkeypatch.setattr(builtins, "exec", no_eval)
    entries = load()
    assert "mul.Tensor" in entries


# -- loader on small yaml files ----------------------------------------------------------
def write_yaml(tmp_path, text):
    p = tmp_path / "derivatives.yaml"
    p.write_text(textwrap.dedent(text))
    return str(p)


def load_error(tmp_path, text):
    with pytest.raises(FormulaError) as ei:
        load(write_yaml(tmp_path, text))
    return str(ei.value)


def test_loader_accepts_small_file(tmp_path):
    entries = load(write_yaml(tmp_path, f"""
        - name: {MUL}
          self: grad * other
          other: grad * self
        - name: {EXP}
          self: grad * result
    """))
    assert set(entries) == {"mul.Tensor", "exp.default"}
    e = entries["mul.Tensor"]
    assert e.uses[("self",)] == {"grad", "other"}
    assert e.uses[("other",)] == {"grad", "self"}
    assert entries["exp.default"].uses[("self",)] == {"grad", "result"}


def test_loader_joint_formula_and_grads(tmp_path):
    entries = load(write_yaml(tmp_path, f"""
        - name: {MUL}
          "self, other": "(grads[0] * other if grad_input_mask[0] else None, grads[0] * self)"
    """))
    assert ("self", "other") in entries["mul.Tensor"].formulas


@pytest.mark.parametrize("body, offending", [
    pytest.param("self: grad * bogus\n  other: grad * self", "bogus", id="unknown-name"),
    pytest.param("self: frobnicate(grad)\n  other: grad * self", "frobnicate", id="unknown-helper"),
    pytest.param("self: grad.frobnicate()\n  other: grad * self", "frobnicate", id="unknown-method"),
    pytest.param("self: grad * other\n  bogus_input: grad", "bogus_input", id="input-not-in-schema"),
    pytest.param("self: grad * other", "['other']", id="missing-formula"),
    pytest.param("self: grad * grads[0]\n  other: grad * self", "grads", id="mixes-grad-and-grads"),
    pytest.param("self: grad *\n  other: grad * self", "grad *", id="syntax-error"),
    pytest.param("self: grad.__class__\n  other: grad", "__class__", id="dunder-attribute"),
])
def test_loader_rejects_with_entry_name_and_offending_text(tmp_path, body, offending):
    lines = [f"- name: {EXP}", "  self: grad * result", f"- name: {MUL}"]
    lines += ["  " + line.strip() for line in body.split("\n")]
    msg = load_error(tmp_path, "\n".join(lines) + "\n")
    assert f"name: {MUL}" in msg, msg
    assert offending in msg, msg


def test_loader_mixing_message_is_pointed(tmp_path):
    msg = load_error(tmp_path, f"""
        - name: {MUL}
          self: grad * grads[0]
          other: grad * self
    """)
    assert "illegally mixes use of 'grad' and 'grads'" in msg
    assert "grad * grads[0]" in msg


def test_loader_unknown_schema(tmp_path):
    msg = load_error(tmp_path, """
        - name: frobnicate(Tensor self) -> Tensor
          self: grad
    """)
    assert "name: frobnicate(Tensor self) -> Tensor" in msg
    assert "op registry" in msg


def test_loader_schema_differs_from_registered(tmp_path):
    msg = load_error(tmp_path, """
        - name: mul.Tensor(Tensor self, Tensor other, int extra) -> Tensor
          self: grad * other
          other: grad * self
    """)
    assert "mul.Tensor(Tensor self, Tensor other, int extra) -> Tensor" in msg
    assert MUL in msg  # points at the schema that is registered


def test_loader_malformed_schema(tmp_path):
    msg = load_error(tmp_path, """
        - name: mul.Tensor Tensor self
          self: grad
    """)
    assert "mul.Tensor Tensor self" in msg


def test_loader_missing_name(tmp_path):
    msg = load_error(tmp_path, """
        - self: grad
    """)
    assert "name" in msg


def test_loader_duplicate_entry(tmp_path):
    msg = load_error(tmp_path, f"""
        - name: {EXP}
          self: grad * result
        - name: {EXP}
          self: grad * result
    """)
    assert f"name: {EXP}" in msg and "duplicate" in msg


def test_loader_non_differentiable_and_output_differentiability(tmp_path):
    entries = load(write_yaml(tmp_path, """
        - name: where.self(Tensor condition, Tensor self, Tensor other) -> Tensor
          condition: non_differentiable
          self: where(condition, grad, 0)
          other: where(condition, 0, grad)
        - name: gt.Tensor(Tensor self, Tensor other) -> Tensor
          output_differentiability: [False]
    """))
    assert entries["where.self"].non_differentiable == {"condition"}
    assert entries["gt.Tensor"].output_differentiability == [False]


def test_loader_not_implemented_records_reason(tmp_path):
    entries = load(write_yaml(tmp_path, f"""
        - name: {MUL}
          self: grad * other
          other: not_implemented("other is off today")
    """))
    assert entries["mul.Tensor"].not_implemented == {"other": "other is off today"}


# -- the real file -------------------------------------------------------------------------
def test_real_yaml_loads():
    entries = load()
    with open(formulas.default_path()) as f:
        raw = yaml.safe_load(f)
    assert len(entries) == len(raw)
    for name, e in entries.items():
        assert name in OPS
        assert e.schema is OPS[name].schema
        for inputs in e.formulas:
            assert set(inputs) <= set(e.schema.tensor_args)
            assert e.uses[inputs] <= ({"grad", "grads", "result", "grad_input_mask"}
                                      | {a.name for a in e.schema.args}
                                      | {f"result{i}" for i in range(len(e.schema.returns))})


# -- not_implemented at lowering time -----------------------------------------------------------
@pytest.fixture
def mul_other_not_implemented(tmp_path, monkeypatch):
    patched = load(write_yaml(tmp_path, f"""
        - name: {MUL}
          self: grad * other
          other: not_implemented("no gradient for the right factor")
    """))
    table = dict(adjoint_mod.entries())
    table.update(patched)
    monkeypatch.setattr(adjoint_mod, "_ENTRIES", table)
    monkeypatch.setattr(engine_mod, "_PLANS", {})  # no plan built with the real table


def test_not_implemented_only_when_requested_tensor(interpreted, mul_other_not_implemented):
    xs, ys = np.array([1.0, 2.0, 3.0]), np.array([4.0, 5.0, 6.0])
    x = gj.tensor(xs, requires_grad=True)
    (x * gj.tensor(ys)).sum().backward()  # other's gradient is not requested: fine
    np.testing.assert_allclose(np.asarray(x.grad), ys)

    y = gj.tensor(ys, requires_grad=True)
    loss = (x * y).sum()  # not-implemented-forward
    with pytest.raises(gj.GradjitError) as ei:
        loss.backward()
    msg = str(ei.value)
    assert "mul.Tensor" in msg
    assert "'other'" in msg
    assert "no gradient for the right factor" in msg
    assert os.path.basename(__file__) in msg
    assert "loss = (x * y).sum()  # not-implemented-forward" in msg


def test_not_implemented_only_when_requested_grad(interpreted, mul_other_not_implemented):
    def f(x, y):
        return (x * y).sum()  # not-implemented-in-grad

    xs, ys = np.array([1.0, 2.0]), np.array([3.0, 4.0])
    np.testing.assert_allclose(gj.grad(f, argnums=0)(xs, ys), ys)
    with pytest.raises(gj.GradjitError) as ei:
        gj.grad(f, argnums=1)(xs, ys)
    msg = str(ei.value)
    assert "mul.Tensor" in msg and "'other'" in msg
    assert "no gradient for the right factor" in msg
    assert "return (x * y).sum()  # not-implemented-in-grad" in msg
