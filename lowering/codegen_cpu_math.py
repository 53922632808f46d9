"""Scalar templates of the elementwise math family for the CPU code generator.

Contract
- ``math_expr(node, a, e) -> str | None``: the scalar expression of one
  elementwise node of ``tracer/ops_math.py`` given its input expressions
  ``a`` (register names or array reads; they may appear more than once), or
  ``None`` when the op is not in this family. ``codegen_cpu_expr._expr`` asks here
  after its own operators, so every op keeps joining the surrounding fused loop.
- Scalar attributes (bounds, eps, decimals' scale) are ``consts`` slots
  (``e.const``), never literals; small structural numbers of an op's
  definition (0, 1, 0.5, 2) are literals of the output dtype, as in ``_expr``.
- Functions Numba lacks (erfinv, digamma, polygamma, remainder, logaddexp,
  logit with eps ...) come from ``lowering/special_cpu.py``, imported by the
  module as ``sp`` when used (``e.imports``).
- ``fast_fn(e, name, node)``: the vectorisable ``fm.<name>`` of
  ``lowering/fastmath_cpu.py`` (``fm.<name>_f32`` for float32) to call instead
  of ``math.<name>`` when the emitter's ``fast_math`` is on (the CPU emitter's
  default; off for CUDA and under ``GRADJIT_FAST_MATH=0``) and ``name`` is in
  ``FAST_OPS``; else ``None``. ``codegen_cpu_expr._expr`` uses it too.
"""
from __future__ import annotations

import numpy as np

# Functions whose fm.<name> beat Numba's scalar libm call inside a fused loop (they
# vectorise: 4-20x faster, float64 and float32, measured with bench/run.py and a plain
# loop over 1e7 elements) while staying within 2 ulp; anything else keeps libm.
FAST_OPS = frozenset({"exp", "expm1", "log", "log1p", "tanh", "sin", "cos"})
_FAST_DTYPES = {np.dtype(np.float64): "", np.dtype(np.float32): "_f32"}

_MATH = {   # one-array functions: op name -> scalar function (CPU and CUDA code)
    "exp": "math.exp", "log": "math.log", "sin": "math.sin", "cos": "math.cos",
    "tanh": "math.tanh", "sqrt": "math.sqrt",
    "expm1": "math.expm1", "log2": "math.log2", "log10": "math.log10", "log1p": "math.log1p",
    "tan": "math.tan", "asin": "math.asin", "acos": "math.acos", "atan": "math.atan",
    "sinh": "math.sinh", "cosh": "math.cosh", "asinh": "math.asinh", "acosh": "math.acosh",
    "atanh": "math.atanh", "erf": "math.erf", "erfc": "math.erfc", "lgamma": "math.lgamma",
    "floor": "np.floor", "ceil": "np.ceil", "trunc": "np.trunc", "round": "np.rint",
}
_SPECIAL = {"erfinv.default": 1, "digamma.default": 1, "remainder.Tensor": 2,
            "logaddexp.default": 2, "logaddexp2.default": 2, "xlogy.Tensor": 2}
_BINARY = {
    "atan2.default": "math.atan2({0}, {1})",
    "hypot.default": "math.hypot({0}, {1})",
    "copysign.Tensor": "math.copysign({0}, {1})",
    "fmod.Tensor": "np.fmod({0}, {1})",
    # NaN-propagating maximum/minimum; fmax/fmin ignore a NaN operand
    "maximum.default": "({0} if ({0} > {1} or {0} != {0}) else {1})",
    "minimum.default": "({0} if ({0} < {1} or {0} != {0}) else {1})",
    "fmax.default": "({0} if ({0} >= {1} or {1} != {1}) else {1})",
    "fmin.default": "({0} if ({0} <= {1} or {1} != {1}) else {1})",
    "clamp_min.Tensor": "({1} if {0} < {1} else {0})",
    "clamp_max.Tensor": "({1} if {0} > {1} else {0})",
    "bitwise_and.Tensor": "({0} & {1})", "bitwise_or.Tensor": "({0} | {1})",
    "bitwise_xor.Tensor": "({0} ^ {1})",
}


def _lit(x, dt):
    dt = np.dtype(dt)
    if dt == np.float64 or dt.kind != "f":
        return repr(float(x)) if dt.kind == "f" else repr(int(x))
    return f"np.{dt.name}({float(x)!r})"


def fast_fn(e, name, node):
    out = node.outputs[0]
    dt = np.dtype(out.dtype)
    # 0-d values are straight-line scalar code: nothing to vectorise, libm is as fast
    if (not getattr(e, "fast_math", False) or name not in FAST_OPS or dt not in _FAST_DTYPES
            or out.ndim == 0 or any(np.dtype(v.dtype) != dt for v in node.inputs)):
        return None
    e.imports.add("from gradjit.lowering import fastmath_cpu as fm")
    return f"fm.{name}{_FAST_DTYPES[dt]}"


def _special(e, name, args):
    e.imports.add("from gradjit.lowering import special_cpu as sp")
    return f"sp.{name}({', '.join(args)})"


def math_expr(node, a, e):
    op, at = node.op, node.attrs
    out = node.outputs[0].dtype
    ref = node.inputs[0].dtype
    base = op.split(".")[0]
    one = _lit(1, out)
    if op.endswith(".default") and base in _MATH:
        return f"{fast_fn(e, base, node) or _MATH[base]}({a[0]})"
    if op == "fmod.Tensor" and out.kind != "f":
        # C's remainder (the dividend's sign) from the floor one: they differ by the divisor
        # when the operands' signs differ (Numba's integer np.fmod gives the floor one)
        r = f"({a[0]} % {a[1]})"
        return f"({r} - {a[1]} if ({r} != 0 and ({a[0]} < 0) != ({a[1]} < 0)) else {r})"
    if op in _BINARY:
        return _BINARY[op].format(*a)
    if op in _SPECIAL:
        if op == "remainder.Tensor" and out.kind != "f":
            return f"({a[0]} % {a[1]})"
        return _special(e, base, a)
    if op == "bitwise_not.default":
        return f"(~{a[0]})" if out != np.bool_ else f"(not {a[0]})"
    if op in ("bitwise_left_shift.Tensor", "bitwise_right_shift.Tensor"):
        # NumPy's: a count outside [0, bits) shifts everything out (0, or -1 for a
        # negative value shifted right); Numba's (LLVM's) shift is undefined there
        w, zero = 8 * out.itemsize, f"({a[0]} - {a[0]})"
        if op.startswith("bitwise_left"):
            return f"(({a[0]} << {a[1]}) if 0 <= {a[1]} < {w} else {zero})"
        return (f"(({a[0]} >> {a[1]}) if 0 <= {a[1]} < {w} else "
                f"(~{zero} if {a[0]} < 0 else {zero}))")
    if op == "exp2.default":
        return f"{_lit(2, out)} ** {a[0]}"
    if op == "rsqrt.default":
        return f"{one} / math.sqrt({a[0]})"
    if op == "frac.default":
        return f"({a[0]} - np.trunc({a[0]}))"
    if op == "polygamma.default":
        return _special(e, "polygamma", [repr(int(at["n"])), a[0]])
    if op == "logit.default":
        if at["eps"] is None:
            return f"{fast_fn(e, 'log', node) or 'math.log'}({a[0]} / ({one} - {a[0]}))"
        lo, hi = e.const(at["eps"], out), e.const(1.0 - at["eps"], out)
        return _special(e, "logit", [a[0], lo, hi])
    if op == "round.decimals":
        d = int(at["decimals"])
        k = e.const(10.0 ** abs(d), ref)
        return f"np.rint({a[0]} * {k}) / {k}" if d >= 0 else f"np.rint({a[0]} / {k}) * {k}"
    if op in ("clamp.default", "clamp_min.default", "clamp_max.default"):
        lo = at.get("min") if base != "clamp_max" else None
        hi = at.get("max") if base != "clamp_min" else None
        lo, hi = int_bounds(lo, out), int_bounds(hi, out)   # (an integer result only)
        x = a[0]
        if lo is not None and hi is not None:
            return _special(e, "clamp", [x, e.const(lo, ref), e.const(hi, ref)])
        if lo is not None:
            c = e.const(lo, ref)
            return f"({c} if {x} < {c} else {x})"
        c = e.const(hi, ref)
        return f"({c} if {x} > {c} else {x})"
    if op == "nan_to_num.default":
        x = a[0]
        if out.kind != "f":
            return x
        info = np.finfo(out)
        n = e.const(0.0 if at["nan"] is None else at["nan"], out)
        p = e.const(info.max if at["posinf"] is None else at["posinf"], out)
        m = e.const(info.min if at["neginf"] is None else at["neginf"], out)
        return f"({n} if {x} != {x} else ({p} if {x} == np.inf else ({m} if {x} == -np.inf else {x})))"
    if op == "lerp.Tensor":
        x, y, w = a
        half = _lit(0.5, out)
        return f"({x} + {w} * ({y} - {x}) if abs({w}) < {half} else {y} - ({y} - {x}) * ({one} - {w}))"
    return None


def _int_range(value, dtype):
    """``dtype``'s (min, max) where ``value`` is a Python int and ``dtype`` an integer
    dtype (NumPy then compares and clips by value, whatever the range); else None."""
    if dtype.kind not in "iu" or not isinstance(value, (int, np.integer)) \
            or isinstance(value, (bool, np.bool_)):
        return None
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def int_bounds(value, dtype):
    """A clip bound moved into ``dtype``'s range: ``np.clip(u8, -3, 3)`` is
    ``np.clip(u8, 0, 3)``; the bound emitted as a uint8 -3 would wrap to 253."""
    r = _int_range(value, dtype)
    return value if r is None or value is None else min(max(int(value), r[0]), r[1])


def out_of_range_compare(base, value, dtype):
    """The constant result (True / False) of comparison ``base`` (gt, lt, ge, le, eq, ne)
    of every ``dtype`` element with an int ``value`` out of its range; None otherwise."""
    r = _int_range(value, dtype)
    if r is None or r[0] <= value <= r[1]:
        return None
    above = value > r[1]   # every element is below the value
    return {"gt": not above, "ge": not above, "lt": above, "le": above,
            "eq": False, "ne": True}[base]
