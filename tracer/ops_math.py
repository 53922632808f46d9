"""The elementwise math family: unary functions, rounding, clamping and binary math.

Contract
- Each op is declared here once (schema = its ``derivatives.yaml`` ``name:``
  line) with its shape/dtype rule and NumPy reference; see ``tracer/ops.py``
  for the conventions (NEP 50 dtypes, normalised attributes).
- Float math on integer or bool inputs gives float64 (as NumPy); rounding ops
  keep the input dtype; ``clamp`` promotes with its scalar bounds.
- Binary ops have one Tensor-Tensor overload: the front end turns a Python
  scalar operand into a 0-d constant of the promoted dtype (weak scalar), so a
  scalar on either side reaches the same op.
- ``_binary_cross_entropy(p, t)`` is torch's elementwise binary cross entropy
  ``-(t max(log p, -100) + (1 - t) max(log1p(-p), -100))``: a composite (decomposed to
  those ops for code generation) with torch's gradient ``(p - t) / max(p (1 - p), 1e-12)``,
  finite at p = 0 or 1, where the chain through the clamped logs meets 0 * inf = NaN.
- ``elu(x, alpha, scale, input_scale)`` is torch's ELU family (celu: input_scale =
  1 / alpha; selu: its alpha and scale) and ``elu_backward`` its gradient: composites
  (decomposed to ``where`` / ``expm1`` / ``exp`` for code generation) with torch's formulas,
  whose kink at 0 no spelling in ``where`` + ``clamp`` can give: the first derivative at 0
  is the negative side's (``x <= 0``), every higher one the positive side's, 0 (``x < 0``).
- ``square``, ``deg2rad``, ``rad2deg``, ``addcmul``, ``addcdiv``, ``rsub`` with
  a tensor, ``clamp`` with tensor bounds and ``clip`` are composites spelled in
  the front end (``tracer/methods_math.py``) with the ops declared here.
"""
from __future__ import annotations

import builtins

import numpy as np

from gradjit.tracer.lazy_scipy import special as _special
from gradjit.tracer.ops import (C, E, _floaty, _in_result_dtype, broadcast_shapes, elementwise,
                               unary)
from gradjit.tracer.registry import defop

_POLYGAMMA = _special("polygamma")


def _rsqrt(x):
    return np.true_divide(1, np.sqrt(x))


def _frac(x):
    return x - np.trunc(x)


def _logit(x, eps):
    if eps is not None:
        x = np.clip(x, eps, 1 - eps)
    return np.log(x / (1 - x))


# -- unary (float results) ---------------------------------------------------------------
for _name, _fn in [
    ("exp2", np.exp2), ("expm1", np.expm1), ("log2", np.log2), ("log10", np.log10),
    ("log1p", np.log1p), ("tan", np.tan), ("sinh", np.sinh), ("cosh", np.cosh),
]:
    unary(_name, _fn, "float", _fn)
for _name, _fn in [("asin", np.arcsin), ("acos", np.arccos), ("atan", np.arctan),
                   ("asinh", np.arcsinh), ("acosh", np.arccosh), ("atanh", np.arctanh)]:
    unary(_name, _fn, "float", _fn, (_fn.__name__,))   # (x.arcsin() as x.asin())
unary("rsqrt", _rsqrt, "float")
for _name, _fn in [("erf", "erf"), ("erfc", "erfc"), ("erfinv", "erfinv"), ("lgamma", "gammaln"),
                   ("digamma", "psi")]:   # (scipy.special's ufuncs: tracer/numpy_protocol.py)
    unary(_name, _special(_fn), "float")

elementwise("logit(Tensor self, float? eps=None) -> Tensor", _logit, "float")
elementwise("polygamma(int n, Tensor self) -> Tensor", lambda x, n: _POLYGAMMA(n, x),
            "float")

# -- rounding (dtype kept; gradient zero almost everywhere) -------------------------------
for _name, _fn in [("floor", np.floor), ("ceil", np.ceil)]:
    unary(_name, _fn, "same", _fn)
unary("trunc", np.trunc, "same", np.trunc, ("fix",))
unary("frac", _frac, "same")
elementwise("round(Tensor self) -> Tensor", np.round, "same", (np.rint,))   # (x.round(decimals))
elementwise("round.decimals(Tensor self, *, int decimals) -> Tensor",
            lambda x, decimals: np.round(x, decimals), "same")


# -- clamping -----------------------------------------------------------------------------
def _clamp_infer(types, attrs):
    bounds = [attrs[k] for k in ("min", "max") if attrs.get(k) is not None]
    if not bounds:
        raise ValueError("clamp: at least one of 'min' or 'max' must not be None")
    return [(tuple(types[0].shape), np.result_type(types[0].dtype, *bounds))]


def _clamp(x, min, max):
    if x.dtype.kind in "iu":   # an int bound beyond the range clips as the range's end
        lo, hi = int(np.iinfo(x.dtype).min), int(np.iinfo(x.dtype).max)
        min, max = ((b if type(b) is not int else builtins.min(builtins.max(b, lo), hi))
                    for b in (min, max))
    if min is not None:
        x = np.where(x < min, min, x)    # NaN passes through; min > max gives max (torch)
    if max is not None:
        x = np.where(x > max, max, x)
    return x


defop("clamp(Tensor self, Scalar? min=None, Scalar? max=None) -> Tensor", E, _clamp_infer, _clamp)
elementwise("clamp_min(Tensor self, Scalar min) -> Tensor",
            lambda x, min: _clamp(x, min, None))
elementwise("clamp_max(Tensor self, Scalar max) -> Tensor",
            lambda x, max: _clamp(x, None, max))
elementwise("clamp_min.Tensor(Tensor self, Tensor min) -> Tensor",
            lambda x, m: np.where(x < m, m, x))
elementwise("clamp_max.Tensor(Tensor self, Tensor max) -> Tensor",
            lambda x, m: np.where(x > m, m, x))
elementwise("nan_to_num(Tensor self, float? nan=None, float? posinf=None, float? neginf=None) "
            "-> Tensor",
            lambda x, nan, posinf, neginf: np.nan_to_num(
                x, nan=0.0 if nan is None else nan, posinf=posinf, neginf=neginf), "same")


# -- binary --------------------------------------------------------------------------------
def _remainder(a, b):
    return np.remainder(a, b)


def _xlogy(x, y):
    with np.errstate(all="ignore"):
        out = np.where(x == 0, np.zeros((), np.result_type(x, y, np.float16)), x * np.log(y))
    return np.where(np.isnan(y), y, out)


def _logaddexp2(a, b):
    return np.logaddexp2(a, b)


def _lerp(a, b, w):
    # torch's two-sided form: exact at w == 0 and w == 1
    return np.where(np.abs(w) < 0.5, a + w * (b - a), b - (b - a) * (1 - w))


for _name, _fn, _rule in [
    ("atan2", np.arctan2, "float"), ("hypot", np.hypot, "float"),
    ("maximum", np.maximum, "promote"), ("minimum", np.minimum, "promote"),
    ("fmax", np.fmax, "promote"), ("fmin", np.fmin, "promote"),
    ("fmod.Tensor", np.fmod, "promote"), ("remainder.Tensor", _remainder, "promote"),
    ("copysign.Tensor", np.copysign, "float"), ("logaddexp", np.logaddexp, "float"),
    ("logaddexp2", _logaddexp2, "float"), ("xlogy.Tensor", _xlogy, "float"),
]:
    elementwise(f"{_name}(Tensor self, Tensor other) -> Tensor", _fn, _rule)


# integer (and bool) bit operations: NumPy's ufuncs, no gradient (integer results)
for _name, _fn in [("bitwise_and.Tensor", np.bitwise_and), ("bitwise_or.Tensor", np.bitwise_or),
                   ("bitwise_xor.Tensor", np.bitwise_xor),
                   ("bitwise_left_shift.Tensor", np.left_shift),
                   ("bitwise_right_shift.Tensor", np.right_shift)]:
    elementwise(f"{_name}(Tensor self, Tensor other) -> Tensor", _fn, "integral")
elementwise("bitwise_not(Tensor self) -> Tensor", np.invert, "integral")


def _lerp_infer(types, attrs):
    dt = np.result_type(*[t.dtype for t in types])
    if dt.kind != "f":
        raise TypeError(f"lerp.Tensor: expected floating point inputs, but got "
                        f"{', '.join(np.dtype(t.dtype).name for t in types)}")
    return [(broadcast_shapes("lerp.Tensor", types), dt)]


defop("lerp.Tensor(Tensor self, Tensor end, Tensor weight) -> Tensor", E, _lerp_infer, _lerp)


# -- binary cross entropy (nn.functional; tracer/nn_losses.py) ------------------------------------
# Its own op for its gradient, not its value: spelled with clamped logs, the chain at p = 0
# (or 1) multiplies log's inf by the clamp's zero: NaN where torch gives 0 (or a large finite
# number for a soft target). derivatives.yaml carries torch's formula.
def _bce(p, t):
    with np.errstate(divide="ignore", invalid="ignore"):
        return -(t * np.maximum(np.log(p), -100.0) + (1 - t) * np.maximum(np.log1p(-p), -100.0))


def _bce_infer(types, attrs):
    return [(broadcast_shapes("_binary_cross_entropy", types), _floaty(types, attrs))]


defop("_binary_cross_entropy(Tensor self, Tensor target) -> Tensor", C, _bce_infer,
      _in_result_dtype(_bce))


# -- ELU family (nn.functional.elu / celu / selu; tracer/nn_functional.py) ---------------------
# Own ops for their derivatives at 0 (see the contract); values as torch:
# x > 0: scale x; else alpha scale expm1(input_scale x).
def _elu(x, alpha, scale, input_scale):
    return np.where(x > 0, x * scale, np.expm1(np.minimum(x, 0) * input_scale) * (alpha * scale))


def _elu_backward(g, s, alpha, scale, input_scale, is_result):
    if is_result:   # s is the result: d/dx = input_scale (result + alpha scale) where <= 0
        neg = g * input_scale * (s + alpha * scale)
    else:
        neg = g * (input_scale * alpha * scale) * np.exp(np.minimum(s, 0) * input_scale)
    return np.where(s <= 0, neg, g * scale)


def _elu_infer(types, attrs):
    return [(broadcast_shapes("elu", types), _floaty(types, {}))]


defop("elu(Tensor self, Scalar alpha=1, Scalar scale=1, Scalar input_scale=1) -> Tensor", C,
      _elu_infer, _in_result_dtype(_elu))
defop("elu_backward(Tensor grad_output, Scalar alpha, Scalar scale, Scalar input_scale, "
      "bool is_result, Tensor self_or_result) -> Tensor", C, _elu_infer,
      _in_result_dtype(_elu_backward))
