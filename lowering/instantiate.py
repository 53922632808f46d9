"""Interpret a parsed formula (tuple AST) into IR nodes.

Contract
- ``instantiate(entry, node, graph, grad_outs, mask)`` evaluates the entry's
  formulas for the inputs selected by ``mask`` (``grad_input_mask``) and
  returns one ``Value`` or ``None`` per tensor input of ``node``.
- Tensors in a formula are ``Tracer``s on ``graph``; arithmetic and method
  calls append nodes; attributes are plain Python values, so attribute
  arithmetic (``exponent - 1``) is folded at lowering time.
- Only AST shapes produced by ``formulas.parse_formula`` are accepted; names
  resolve in the formula's environment, functions in ``helpers.HELPERS``.
"""
from __future__ import annotations

import operator

from gradjit.lowering.helpers import HELPERS
from gradjit.tracer.api import ArrayOps
from gradjit.tracer.registry import GradjitError
from gradjit.tracer.trace import Tracer

_BIN = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
        "**": operator.pow}
_CMP = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
        ">": operator.gt, ">=": operator.ge}
_SPECIAL = {
    "conj": lambda x: x,  # real dtypes only
    "sizes": lambda x: tuple(x.shape), "sym_sizes": lambda x: tuple(x.shape),
    "dim": lambda x: x.ndim, "numel": lambda x: x.numel(), "sym_numel": lambda x: x.numel(),
    "scalar_type": lambda x: x.dtype,
}


def evaluate(tree, env):
    kind = tree[0]
    if kind == "const":
        return tree[1]
    if kind == "name":
        return env[tree[1]]
    if kind == "bin":
        return _BIN[tree[1]](evaluate(tree[2], env), evaluate(tree[3], env))
    if kind == "cmp":
        return _CMP[tree[1]](evaluate(tree[2], env), evaluate(tree[3], env))
    if kind == "neg":
        return -evaluate(tree[1], env)
    if kind == "pos":
        return evaluate(tree[1], env)
    if kind == "not":
        return not evaluate(tree[1], env)
    if kind == "if":
        return evaluate(tree[2], env) if evaluate(tree[1], env) else evaluate(tree[3], env)
    if kind == "tuple":
        return tuple(evaluate(t, env) for t in tree[1])
    if kind == "index":
        return env[tree[1]][evaluate(tree[2], env)]
    args = [evaluate(a, env) for a in tree[-2]]
    kwargs = {k: evaluate(v, env) for k, v in tree[-1]}
    if kind == "call":
        return HELPERS[tree[1]](*args, **kwargs)
    obj, name = evaluate(tree[1], env), tree[2]
    if name in _SPECIAL:
        return _SPECIAL[name](obj)
    # Formulas are written in torch's vocabulary; a Tracer's own methods follow NumPy
    # (tracer/numpy_methods.py), so the method is looked up on the torch-named surface.
    return getattr(ArrayOps, name)(obj, *args, **kwargs)


def bind_inputs(schema, graph, values):
    """The formula names of a node's input ``values`` (Tracers on ``graph``): one each, or
    a list for a ``Tensor[]`` argument. Also the groups (``Schema.input_groups``)."""
    groups = schema.input_groups(len(values))
    env = {n: [Tracer(graph, values[p]) for p in pos] if n == schema.list_arg else
           Tracer(graph, values[pos[0]]) for n, pos in groups.items()}
    return env, groups


def instantiate(entry, node, graph, grad_outs, mask):
    """``mask`` and ``grad_input_mask`` have one entry per node input (a ``Tensor[]``
    argument's parts each have their own); a formula of a ``Tensor[]`` input returns one
    gradient (or None) per part."""
    bound, groups = bind_inputs(entry.schema, graph, node.inputs)
    for name, pos in groups.items():
        if any(mask[p] for p in pos) and name in entry.not_implemented:
            raise GradjitError(f"the derivative for '{node.op}' is not implemented for input "
                               f"'{name}': {entry.not_implemented[name]}", node.site)
    env = dict(node.attrs)
    env.update(bound)
    results = [Tracer(graph, v) for v in node.outputs]
    env["result"] = results[0]
    env.update({f"result{i}": r for i, r in enumerate(results)})
    grads = [None if g is None else Tracer(graph, g) for g in grad_outs]
    env["grads"], env["grad"] = grads, grads[0]
    env["grad_input_mask"] = list(mask)
    out = [None] * len(node.inputs)
    for inputs, tree in entry.formulas.items():
        idx = [groups[i] for i in inputs]
        if not any(mask[p] for pos in idx for p in pos):
            continue
        if "grad" in entry.uses[inputs] and env["grad"] is None:
            continue  # undefined output gradient: this input gets none from it
        try:
            val = evaluate(tree, env)
        except GradjitError:
            raise
        except Exception as e:
            raise GradjitError(f"while building the backward of '{node.op}' for input(s) "
                               f"{', '.join(inputs)} from formula {entry.source[inputs]!r}: "
                               f"{type(e).__name__}: {e}", node.site) from e
        vals = val if len(inputs) > 1 else (val,)
        for name, pos, g in zip(inputs, idx, vals):
            parts = g if name == entry.schema.list_arg else (g,)
            for p, gp in zip(pos, parts):
                if mask[p] and gp is not None:
                    out[p] = gp.value
    return out
