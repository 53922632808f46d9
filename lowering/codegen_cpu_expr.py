"""CPU code generator, scalar expressions: what one element of an elementwise node or one
step of a reduction is, as Python source (``codegen_cpu._loop`` writes them into its loop
nests; the CUDA generator writes the same expressions into its kernels).

Contract
- ``_expr(node, a, e)``: the expression of elementwise ``node`` on the input
  expressions ``a``, cast to its dtype where that is a narrow integer (NumPy wraps each
  step there; Numba would compute in 64 bits); scalar attributes become ``consts`` slots (``e.const``),
  transcendentals ``fm.<name>`` where the emitter allows fast math. An op with
  no expression raises NotImplementedError naming it. Integer and bool operands of
  float math (``OpDef.float_math``: exp, sigmoid, atan2 ...) are cast to the float
  result dtype first (``-x`` of a uint8 would wrap around), and so is an integer exponent of
  a float power (Numba's integer power raises at ``0.0 ** -1``). An integer power with a
  traced signed exponent calls ``sp.int_power``, which raises NumPy's ValueError where
  the exponent is negative.
- ``acc_init(op, dtype, exact)`` / ``acc_update(op, tgt, x)``: a reduction's
  initial value (a literal) and its accumulation statement (NaN propagates
  through max and min); shared with the CUDA generator.
- ``_lit(x, dtype)``: a literal of that dtype (``codegen_cpu_math``'s, which the op
  family there needs first).
"""
from __future__ import annotations

import numpy as np

from gradjit.lowering.alloc_cpu import dtype_arg as _np_dtype
from gradjit.lowering.codegen_cpu_math import _lit, fast_fn, math_expr, out_of_range_compare
from gradjit.tracer.registry import get_op


def _expr(node, a, e):
    """The scalar expression of an elementwise node. ``a``: input expressions. A result
    of a narrow integer dtype is cast to it: Numba computes int8 ... int32 (and unsigned)
    arithmetic in 64 bits, NumPy wraps each step in the dtype (``(x << 7) > 0`` of int8)."""
    s = _raw_expr(node, a, e)
    out = node.outputs[0].dtype
    return f"{_np_dtype(out)}({s})" if out.kind in "iu" and out.itemsize < 8 else s


def _int_power(node, e):
    """Whether ``node`` raises an integer to a traced signed integer exponent, which
    NumPy refuses where negative (the exponent's values are not known at trace time)."""
    if node.outputs[0].dtype.kind not in "iu" or node.inputs[-1].dtype.kind != "i":
        return False
    e.imports.add("from gradjit.lowering import special_cpu as sp")
    return True


def _raw_expr(node, a, e):
    op, at = node.op, node.attrs
    out = node.outputs[0].dtype
    ref = node.inputs[0].dtype if node.inputs else out
    if out.kind == "f" and get_op(op).float_math:   # integers in float math: cast first
        a = [f"{_np_dtype(out)}({x})" if v.dtype.kind in "biu" else x
             for x, v in zip(a, node.inputs)]
        ref = out
    if op in ("pow.Tensor_Tensor", "pow.Scalar") and out.kind == "f" \
            and node.inputs[-1].dtype.kind in "biu":
        # a float base to an integer exponent in the float dtype: Numba's integer-exponent
        # power raises ZeroDivisionError at 0 ** -1, where NumPy gives inf
        a = [*a[:-1], f"{_np_dtype(out)}({a[-1]})"]
    one, zero = _lit(1, out), _lit(0, out)
    c = (lambda name: e.const(at[name], ref))
    base = op.split(".")[0]
    if op == "sigmoid.default":
        return f"{one} / ({one} + {fast_fn(e, 'exp', node) or 'math.exp'}(-{a[0]}))"
    if op in ("add.Tensor", "sub.Tensor"):
        sign = "+" if base == "add" else "-"
        return f"{a[0]} {sign} {a[1]}" if at["alpha"] == 1 else f"{a[0]} {sign} {c('alpha')} * {a[1]}"
    if op in ("add.Scalar", "sub.Scalar", "rsub.Scalar"):
        k = e.const(at["other"] * at["alpha"] if base != "rsub" else at["other"], ref)
        if base == "rsub":
            return f"{k} - {a[0]}" if at["alpha"] == 1 else f"{k} - {c('alpha')} * {a[0]}"
        return f"{a[0]} {'+' if base == 'add' else '-'} {k}"
    if op == "pow.Tensor_Scalar":
        x = a[0]
        # Small integer powers as products (as torch and XLA do): a call of pow costs
        # about 20 ns an element, the products a few cycles; within a few ulp of pow.
        special = {1: x, 2: f"{x} * {x}", 3: f"{x} * {x} * {x}", 4: f"({x} * {x}) * ({x} * {x})",
                   0.5: f"math.sqrt({x})", -0.5: f"{one} / math.sqrt({x})"}
        special.update({-k: f"{one} / ({special[k]})" for k in (1, 2, 3, 4)})
        if out.kind == "f" and at["exponent"] in special:
            return special[at["exponent"]]
        return f"{x} ** {c('exponent')}"
    if op == "pow.Scalar":
        k = e.const(at['self'], ref)
        return f"sp.int_power({k}, {a[0]})" if _int_power(node, e) else f"{k} ** {a[0]}"
    if op == "pow.Tensor_Tensor" and _int_power(node, e):
        return f"sp.int_power({a[0]}, {a[1]})"
    simple = {
        "mul.Tensor": "{0} * {1}", "div.Tensor": "{0} / {1}", "pow.Tensor_Tensor": "{0} ** {1}",
        "neg.default": "-{0}", "abs.default": "abs({0})", "expand.default": "{0}",
        "detach.default": "{0}", "_written.default": "{1}",
        "reciprocal.default": one + " / {0}",
        "relu.default": f"{zero} if {{0}} <= 0 else {{0}}",
        "sign.default": f"({one} if {{0}} > 0 else (-{one} if {{0}} < 0 else {{0}} * {zero}))",
        "zeros_like.default": zero, "ones_like.default": one,
        "where.self": "({1} if {0} else {2})",
    }
    if op in simple:
        return simple[op].format(*a)
    if op in ("mul.Scalar", "div.Scalar"):
        return f"{a[0]} {'*' if base == 'mul' else '/'} {c('other')}"
    cmps = {"gt": ">", "lt": "<", "ge": ">=", "le": "<=", "eq": "==", "ne": "!="}
    if base in cmps:
        if op.endswith(".Tensor"):
            return f"({a[0]} {cmps[base]} {a[1]})"
        known = out_of_range_compare(base, at["other"], ref)
        if known is not None:   # NumPy compares by value: ``u8 > -1`` is all True
            return f"({a[0]} {'==' if known else '!='} {a[0]})"
        return f"({a[0]} {cmps[base]} {c('other')})"
    if op == "_to_copy.default":
        return f"({a[0]} != 0)" if out == np.bool_ else f"{_np_dtype(out)}({a[0]})"
    family = math_expr(node, a, e)
    if family is not None:
        return family
    raise NotImplementedError(f"CPU code generator: no scalar expression for elementwise op '{op}'")


def acc_init(op, dt, exact=False):
    """The initial value of reduction ``op`` with result dtype ``dt``, as a literal.
    Floating sums and products start from a Python float unless ``exact``: Numba then
    accumulates float32 in float64 on the CPU; CUDA kernels (``exact``) keep the dtype."""
    dt = np.dtype(dt)
    if op == "amax.default":
        return ("-math.inf" if dt.kind == "f" else
                repr(int(np.iinfo(dt).min)) if dt.kind in "iu" else "False")
    if op == "amin.default":
        return ("math.inf" if dt.kind == "f" else
                repr(int(np.iinfo(dt).max)) if dt.kind in "iu" else "True")
    one = op in ("prod.default", "prod.dim_int")
    if dt.kind == "f" and not exact:
        return "1.0" if one else "0.0"
    return _lit(1 if one else 0, dt)


def _acc_init(node):
    return acc_init(node.op, node.outputs[0].dtype)


def acc_update(op, tgt, x):
    """The accumulation statement of reduction ``op`` (NaN propagates through max/min);
    shared with the CUDA generator."""
    if op == "amax.default":
        return f"{tgt} = {x} if ({x} > {tgt} or {x} != {x}) else {tgt}"
    if op == "amin.default":
        return f"{tgt} = {x} if ({x} < {tgt} or {x} != {x}) else {tgt}"
    if op in ("prod.default", "prod.dim_int"):
        return f"{tgt} *= {x}"
    return f"{tgt} += {x}"


def _acc_update(node, tgt, x):
    return acc_update(node.op, tgt, x)
