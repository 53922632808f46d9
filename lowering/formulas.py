"""Load ``derivatives.yaml`` and parse its formulas into a small expression AST.

Contract
- ``load(path=None) -> {op_name: Entry}``. Every entry is validated on load:
  its ``name:`` must be the schema of a registered op, every key must be an
  input of that schema (or one of the known keys), every formula must parse
  and use only known names (schema arguments, ``grad``/``grads``, ``result``,
  ``grad_input_mask``, helpers, whitelisted methods). Violations raise
  ``FormulaError`` naming the entry and the offending text.
- Formulas are parsed with Python's expression grammar (``ast.parse`` in
  ``eval`` mode, a parser, not an evaluator) and converted to tuples; nodes
  outside the whitelist (attribute reads, lambdas, comprehensions, dunder
  names ...) are rejected. Nothing is ever passed to ``eval``.
- ``Entry.formulas`` maps a tuple of input names (one, or several for a joint
  formula ``"self, other": f(grad_input_mask)``) to an AST; ``Entry.uses``
  records which inputs and results each formula reads (what backward saves).
"""
from __future__ import annotations

import ast
import os
from dataclasses import dataclass, field

import yaml

from gradjit.tracer.registry import OPS, parse_schema

# Methods a formula may call on a tensor (see lowering/instantiate.py for their meaning).
METHODS = frozenset("""
    sin cos exp log sqrt tanh sigmoid sign sgn abs neg reciprocal relu pow sum mean amax
    t transpose permute reshape view expand expand_as reshape_as squeeze unsqueeze mm bmm matmul
    softmax log_softmax mul div add sub gt lt ge le eq ne to conj sizes sym_sizes dim numel
    sym_numel scalar_type
    rsqrt sinh cosh digamma polygamma floor trunc log1p expm1 erfinv amin prod cumsum
    logsumexp norm
""".split())
KNOWN_KEYS = {"name", "output_differentiability", "dispatch", "result"}
_BINOPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.Pow: "**"}
_CMPOPS = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}


class FormulaError(ValueError):
    pass


@dataclass
class Entry:
    name: str                 # op name, e.g. "mul.Tensor"
    schema: object
    formulas: dict = field(default_factory=dict)      # (input names) -> AST
    non_differentiable: set = field(default_factory=set)
    not_implemented: dict = field(default_factory=dict)  # input -> reason
    output_differentiability: list | None = None
    uses: dict = field(default_factory=dict)          # (input names) -> set of names read
    forward: tuple | None = None                      # ``result:`` tangent formula (forward mode)
    source: dict = field(default_factory=dict)        # (input names) -> formula text


def _fail(entry_name, msg, text=None):
    where = f"derivatives.yaml entry 'name: {entry_name}'"
    raise FormulaError(f"{where}: {msg}" + (f" in formula {text!r}" if text is not None else ""))


def parse_formula(text, entry_name="<formula>"):
    """Parse one formula into a tuple AST; raises FormulaError on anything unsupported."""
    try:
        tree = ast.parse(str(text).strip(), mode="eval")
    except SyntaxError as e:
        _fail(entry_name, f"syntax error ({e.msg})", text)
    return _convert(tree.body, entry_name, text)


def _convert(n, entry, text):
    def c(x):
        return _convert(x, entry, text)

    if isinstance(n, ast.Constant) and isinstance(n.value, (int, float, bool, type(None), str)):
        return ("const", n.value)
    if isinstance(n, ast.Name):
        if n.id.startswith("_"):
            _fail(entry, f"name {n.id!r} is not allowed", text)
        return ("name", n.id)
    if isinstance(n, ast.BinOp) and type(n.op) in _BINOPS:
        return ("bin", _BINOPS[type(n.op)], c(n.left), c(n.right))
    if isinstance(n, ast.UnaryOp) and isinstance(n.op, (ast.USub, ast.UAdd, ast.Not)):
        return ({ast.USub: "neg", ast.UAdd: "pos", ast.Not: "not"}[type(n.op)], c(n.operand))
    if isinstance(n, ast.Compare) and len(n.ops) == 1 and type(n.ops[0]) in _CMPOPS:
        return ("cmp", _CMPOPS[type(n.ops[0])], c(n.left), c(n.comparators[0]))
    if isinstance(n, ast.IfExp):
        return ("if", c(n.test), c(n.body), c(n.orelse))
    if isinstance(n, (ast.Tuple, ast.List)):
        return ("tuple", tuple(c(e) for e in n.elts))
    if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name):
        return ("index", c(n.value)[1], c(n.slice))
    if isinstance(n, ast.Call):
        args = tuple(c(a) for a in n.args)
        kwargs = tuple((k.arg, c(k.value)) for k in n.keywords if k.arg)
        if len(kwargs) != len(n.keywords):
            _fail(entry, "**kwargs are not allowed", text)
        if isinstance(n.func, ast.Name):
            return ("call", c(n.func)[1], args, kwargs)
        if isinstance(n.func, ast.Attribute):
            if n.func.attr not in METHODS:
                _fail(entry, f"unknown method .{n.func.attr}() (allowed: {', '.join(sorted(METHODS))})",
                      text)
            return ("method", c(n.func.value), n.func.attr, args, kwargs)
    _fail(entry, f"unsupported syntax {type(n).__name__}", text)


def names_used(tree, out=None):
    out = set() if out is None else out
    if isinstance(tree, tuple):
        if tree and tree[0] == "name":
            out.add(tree[1])
        elif tree and tree[0] == "call":
            out.add(("call", tree[1]))
        elif tree and tree[0] == "index":
            out.add(tree[1])
        for t in tree[1:]:
            names_used(t, out)
    return out


def default_path():
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.join(os.path.dirname(here), "derivatives.yaml")


def _norm(s):
    return " ".join(str(s).split())


def load(path=None, helpers=None):
    """Read, validate and return ``{op_name: Entry}``."""
    if helpers is None:
        from gradjit.lowering.helpers import HELPERS as helpers
    path = path or default_path()
    with open(path) as f:
        # libyaml's safe loader where PyYAML has it: the same documents, ~10x faster to
        # parse, and this parse is on every process's path to its first gradient.
        raw = yaml.load(f, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or []
    by_schema = {_norm(op.schema.text): op for op in OPS.values()}
    entries = {}
    for item in raw:
        if not isinstance(item, dict) or "name" not in item:
            raise FormulaError(f"derivatives.yaml: every entry needs a 'name:' line, got {item!r}")
        name = item["name"]
        try:
            schema = parse_schema(name)
        except ValueError as e:
            _fail(name, str(e))
        op = by_schema.get(_norm(name))
        if op is None:
            _fail(name, "no op with this schema in the op registry (gradjit/tracer/ops.py)"
                        + (f"; the registered schema is {OPS[schema.name].schema.text!r}"
                           if schema.name in OPS else ""))
        if op.name in entries:
            _fail(name, "duplicate entry")
        entries[op.name] = _entry(name, op, item, helpers)
    return entries


def _forward_formula(name, op, text, helpers):
    """A ``result:`` entry: the output tangent in terms of inputs, ``<input>_t`` tangents and
    results (forward mode)."""
    tree = parse_formula(text, name)
    allowed = {a.name for a in op.schema.args} | {f"{t}_t" for t in op.schema.tensor_args} | {
        "result"} | {f"result{i}" for i in range(len(op.schema.returns))}
    _check_names(name, tree, text, allowed, helpers, " in the forward (result:) formula")
    return tree


def _check_names(name, tree, text, allowed, helpers, where=""):
    """Every name a formula reads must be allowed, every function a helper; returns the names."""
    used = names_used(tree)
    for u in used:
        if isinstance(u, tuple):
            if u[1] not in helpers:
                _fail(name, f"unknown function {u[1]!r} (not in the helper registry, "
                            f"gradjit/lowering/helpers.py)", text)
        elif u not in allowed:
            _fail(name, f"unknown name {u!r}{where}", text)
    return used


def _entry(name, op, item, helpers):
    e = Entry(op.name, op.schema, output_differentiability=item.get("output_differentiability"))
    arg_names = {a.name for a in op.schema.args}
    tensor_inputs = set(op.schema.tensor_args)
    allowed = arg_names | {"grad", "grads", "result", "grad_input_mask"} | {
        f"result{i}" for i in range(len(op.schema.returns))}
    for key, text in item.items():
        if key == "result":
            e.forward = _forward_formula(name, op, text, helpers)
            continue
        if key in KNOWN_KEYS:
            continue
        inputs = tuple(k.strip() for k in str(key).split(","))
        bad = [i for i in inputs if i not in tensor_inputs]
        if bad:
            _fail(name, f"{bad[0]!r} is not a tensor input of the schema (inputs: "
                        f"{sorted(tensor_inputs)})")
        if _norm(text) == "non_differentiable":
            e.non_differentiable.update(inputs)
            continue
        tree = parse_formula(text, name)
        if tree[0] == "call" and tree[1] == "not_implemented":
            e.not_implemented.update({i: tree[2][0][1] if tree[2] else "" for i in inputs})
            continue
        used = _check_names(name, tree, text, allowed, helpers)
        if "grad" in used and "grads" in used:
            _fail(name, "illegally mixes use of 'grad' and 'grads'; use only 'grads'", text)
        e.formulas[inputs] = tree
        e.source[inputs] = str(text)
        e.uses[inputs] = {u for u in used if isinstance(u, str)}
    covered = set(e.non_differentiable) | set(e.not_implemented) | {
        i for k in e.formulas for i in k}
    missing = tensor_inputs - covered
    if missing and e.output_differentiability not in ([False] * len(op.schema.returns),):
        _fail(name, f"no formula for input(s) {sorted(missing)}; give one, or mark it "
                    f"'non_differentiable' or not_implemented(\"...\")")
    return e
