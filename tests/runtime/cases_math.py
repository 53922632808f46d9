"""Gradcheck cases of the elementwise math family (tracer/ops_math.py).

Imported by ``test_ops_gradcheck.py`` so the cases join ``CASES`` (first and second
order, tensor mode and ``gj.grad``). Each op runs on a matrix (through NumPy
where NumPy has the name), a 0-d value and a size-1 broadcast shape; binary ops
also broadcast against each other and take a Python scalar on either side.
One small ``rep=True`` graph per group (unary, binary) also runs compiled;
every scalar template is checked without compiling in
``tests/lowering/test_codegen_families.py``.
"""
from __future__ import annotations

import numpy as np
from scipy import special

from tests.runtime.cases import away, case, gt1, normal, offint, pos, prob, unit

# name, input kind, matrix spelling (NumPy/SciPy where it exists), method spelling
_UNARY = [
    ("exp2", normal, np.exp2, lambda x: x.exp2()),
    ("expm1", normal, np.expm1, lambda x: x.expm1()),
    ("log2", pos, np.log2, lambda x: x.log2()),
    ("log10", pos, np.log10, lambda x: x.log10()),
    ("log1p", pos, np.log1p, lambda x: x.log1p()),
    ("rsqrt", pos, lambda x: x.rsqrt(), lambda x: x.rsqrt()),
    ("tan", unit, np.tan, lambda x: x.tan()),
    ("asin", unit, np.arcsin, lambda x: x.asin()),
    ("acos", unit, np.arccos, lambda x: x.arccos()),
    ("atan", normal, np.arctan, lambda x: x.atan()),
    ("sinh", normal, np.sinh, lambda x: x.sinh()),
    ("cosh", normal, np.cosh, lambda x: x.cosh()),
    ("asinh", normal, np.arcsinh, lambda x: x.asinh()),
    ("acosh", gt1, np.arccosh, lambda x: x.acosh()),
    ("atanh", unit, np.arctanh, lambda x: x.atanh()),
    ("logit", prob, special.logit, lambda x: x.logit()),
    ("erf", normal, special.erf, lambda x: x.erf()),
    ("erfc", normal, special.erfc, lambda x: x.erfc()),
    ("erfinv", unit, special.erfinv, lambda x: x.erfinv()),
    ("lgamma", pos, special.gammaln, lambda x: x.lgamma()),
    ("digamma", pos, special.psi, lambda x: x.digamma()),
]
for _name, _kind, _np_fn, _method in _UNARY:
    case(_name, _np_fn, _kind(3, 4))
    case(_name, _method, _kind())
    case(_name, _method, _kind(2, 1, 3))
case("logit", lambda x: x.logit(eps=0.2), unit(3, 4), tag="eps")   # clamped region included
case("lgamma", lambda x: x.lgamma(), offint(2, 3), tag="negative")
case("digamma", lambda x: x.digamma(), offint(2, 3), tag="negative")
case("polygamma", lambda x: x.polygamma(1), pos(3, 4))
case("polygamma", lambda x: x.polygamma(2), offint(), tag="n=2")
case("square", np.square, normal(3, 4), tag="np")
case("square", lambda x: x.square(), normal(), tag="method")
case("deg2rad", np.deg2rad, normal(3, 4), tag="np")
case("deg2rad", lambda x: np.radians(x) + x.deg2rad(), normal(), tag="method")
case("rad2deg", np.rad2deg, normal(2, 1), tag="np")
case("rad2deg", lambda x: np.degrees(x) + x.rad2deg(), normal(), tag="method")


def _unary_rep(p, u, o):
    """A small graph of the family (special functions, rounding, clamping): compiled."""
    return p.digamma() + u.erfinv() + o.floor() * u + u.clamp(-0.5, 0.5) + p.log1p()


case("unary-math", _unary_rep, pos(3, 4), unit(3, 4), offint(3, 4), rep=True)

# -- rounding: zero gradient; times x so the case has a non-zero one -----------------------------
for _name, _np_fn in [("floor", np.floor), ("ceil", np.ceil), ("round", np.round),
                      ("trunc", np.trunc)]:
    case(_name, (lambda f: lambda x: f(x) * x)(_np_fn), offint(3, 4), tag="np")
    case(_name, (lambda m: lambda x: getattr(x, m)() * x)(_name), offint(), tag="method")
case("round", lambda x: np.rint(x) + x, offint(2, 1), tag="rint")
case("round.decimals", lambda x: x.round(1) * x, offint(3, 4))
case("round.decimals", lambda x: np.round(x, -1) + x, offint(2, 3), tag="np")
case("frac", lambda x: x.frac() * x, offint(3, 4))
case("frac", lambda x: x.frac(), offint(), tag="alone")

# -- clamping ---------------------------------------------------------------------------------
case("clamp", lambda x: x.clamp(-0.5, 0.5), normal(3, 4))
case("clamp", lambda x: np.clip(x, -0.5, None), normal(3, 4), tag="np-min")
case("clamp", lambda x: x.clip(max=0.25), normal(), tag="max")
case("clamp", lambda x: x.clamp(min=-0.1, max=0.3), normal(2, 1, 3), tag="kw")
case("clamp_min", lambda x: x.clamp_min(0.1), normal(3, 4))
case("clamp_max", lambda x: x.clamp_max(0.1), normal(3, 4))
case("clamp_min.Tensor", lambda x, m: x.clamp_min(m), normal(3, 4), normal(4))
case("clamp_max.Tensor", lambda x, m: x.clamp_max(m), normal(3, 4), normal())
case("clamp.Tensor", lambda x, lo, hi: x.clamp(lo, hi + 1.5), normal(3, 4), normal(4),
     normal(3, 1))
case("clamp.Tensor", lambda x, lo: np.clip(x, lo, 0.5), normal(2, 3), normal(), tag="np-mixed")
case("nan_to_num", lambda x: x.nan_to_num() * x, normal(3, 4))
case("nan_to_num", lambda x: np.nan_to_num(np.log(x), neginf=-5.0), pos(2, 1), tag="np")


# -- binary -----------------------------------------------------------------------------------
# name, (method), kinds of the two operands
_BINARY = [
    ("atan2", np.arctan2, normal, away), ("hypot", np.hypot, normal, away),
    ("maximum", np.maximum, normal, normal), ("minimum", np.minimum, normal, normal),
    ("fmax", np.fmax, normal, normal), ("fmin", np.fmin, normal, normal),
    ("fmod.Tensor", np.fmod, normal, pos), ("remainder.Tensor", np.remainder, normal, pos),
    ("copysign.Tensor", np.copysign, away, away), ("logaddexp", np.logaddexp, normal, normal),
    ("logaddexp2", np.logaddexp2, normal, normal), ("xlogy.Tensor", special.xlogy, normal, pos),
]
for _name, _fn, _ka, _kb in _BINARY:
    case(_name, _fn, _ka(3, 4), _kb(4))
    case(_name, _fn, _ka(), _kb(2, 3))
    case(_name, _fn, _ka(2, 1, 3), _kb(4, 1))
    case(_name, (lambda f: lambda x: f(x, 0.75))(_fn), _ka(2, 3), tag="scalar-right")
    case(_name, (lambda f: lambda y: f(1.25, y))(_fn), _kb(3), tag="scalar-left")
case("maximum", lambda x, y: x.maximum(y), normal(3, 4), normal(4), tag="method")
case("minimum", lambda x, y: x.minimum(y), normal(1), normal(), tag="method")
case("atan2", lambda x, y: x.arctan2(y), normal(3), away(3), tag="method")
case("remainder.Tensor", lambda x, y: x % y, normal(3, 4), pos(4), tag="%")
case("remainder.Tensor", lambda y: 2.5 % y, pos(3), tag="r%")
case("fmod.Tensor", lambda x, y: x.fmod(y), normal(3, 4), pos(), tag="method")
case("xlogy.Tensor", lambda x, y: x.xlogy(y), normal(3), pos(2, 1), tag="method")
case("lerp.Tensor", lambda x, y, w: x.lerp(y, w), normal(3, 4), normal(4), unit(3, 1))
case("lerp.Tensor", lambda x, y: x.lerp(y, 0.3), normal(), normal(2, 2), tag="scalar-w")
case("lerp.Tensor", lambda x, y, w: x.lerp(y, w * 3.0), normal(2, 3), normal(2, 3), unit(2, 3),
     tag="w>0.5")
case("addcmul", lambda x, a, b: x.addcmul(a, b, value=0.5), normal(3, 4), normal(4), normal(3, 1))
case("addcdiv", lambda x, a, b: x.addcdiv(a, b, value=-2), normal(3, 4), normal(4), pos(3, 1))
case("rsub", lambda x, y: x.rsub(y, alpha=2), normal(3, 4), normal(4))
case("rsub", lambda x: x.rsub(1.5), normal(), tag="scalar")
case("true_divide", lambda x, y: x.true_divide(y) + np.divide(x, y), normal(3), pos(3))


def _binary_rep(x, y, p, w):
    return np.maximum(x, y) + x % p + x.lerp(y, w) + np.arctan2(x, 2.0)


case("binary-math", _binary_rep, normal(3, 4), normal(4), pos(3, 4), unit(3, 1), rep=True)
