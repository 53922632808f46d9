"""Tensor methods of the elementwise math family (mixed into ``ArrayOps``).

Contract
- ``MathMethods`` gives ``Tensor`` and ``Tracer`` the torch-named methods of
  the ops in ``tracer/ops_math.py`` that take more than the array (``round``,
  ``clamp``, ``logit`` ...) and the composites (``clip``, ``square`` ...). Each
  normalises its arguments and calls ``apply``. The one-array methods (``x.sinh()``,
  ``x.arcsinh()``) come from the op records (tracer/api.py).
- Binary methods accept a tensor, a NumPy array or a Python scalar on either
  side (``dispatch.operands``: a scalar is weak, it takes the tensor's dtype).
- Composites (stated here, differentiated through their parts): ``square`` is
  ``pow(2)``; ``deg2rad`` / ``rad2deg`` multiply by a constant; ``clamp`` with
  tensor bounds is ``clamp_min.Tensor`` then ``clamp_max.Tensor``;
  ``addcmul`` / ``addcdiv`` are ``self + value * t1 * t2`` (``/ t2``);
  ``rsub(other, alpha)`` is ``other - alpha * self``; ``sinc`` is NumPy's ``np.sinc``
  composite; ``div(..., rounding_mode=...)`` is ``rounded_div`` (zero gradient).
"""
from __future__ import annotations

import math

import numpy as np

from gradjit.tracer.dispatch import _py, apply, common_dtype, is_scalar, operands


def binop(op, a, b):
    """``op`` on two operands, either of which may be a Python scalar or an array."""
    a, b = operands(a, b)
    return apply(op, [a, b], {})


def _binary(op):
    name = op.split(".")[0]

    def method(self, other):
        return binop(op, self, other)
    method.__name__ = name
    return method


def _is_bound_tensor(x):
    return x is not None and not is_scalar(_py(x))


class MathMethods:
    __slots__ = ()

    # -- unary functions: x.sinh() ... come from the op records (tracer/api.py) ---------
    def round(self, decimals=0):
        if decimals == 0:
            return apply("round.default", [self], {})
        return apply("round.decimals", [self], {"decimals": int(decimals)})

    def logit(self, eps=None):
        x = self if np.dtype(self.dtype).kind == "f" else self.to(np.float64)   # (1 - x: no wrap)
        return apply("logit.default", [x], {"eps": None if eps is None else float(eps)})

    def polygamma(self, n):
        if int(n) < 0:
            raise ValueError(f"polygamma(n): n must be non-negative, but got {n}")
        if int(n) == 0:
            return self.digamma()
        return apply("polygamma.default", [self], {"n": int(n)})

    def square(self):
        return self.pow(2)

    def deg2rad(self):
        return self * (math.pi / 180.0)

    def rad2deg(self):
        return self * (180.0 / math.pi)

    # -- clamping ---------------------------------------------------------------------------
    def clamp(self, min=None, max=None):
        if min is None and max is None:
            raise ValueError("clamp: at least one of 'min' or 'max' must not be None")
        if _is_bound_tensor(min) or _is_bound_tensor(max):
            out = self
            if min is not None:
                out = out.clamp_min(min)
            return out if max is None else out.clamp_max(max)
        return apply("clamp.default", [self], {"min": _py(min), "max": _py(max)})

    clip = clamp

    def clamp_min(self, min):
        if is_scalar(_py(min)):
            return apply("clamp_min.default", [self], {"min": _py(min)})
        return binop("clamp_min.Tensor", self, min)

    def clamp_max(self, max):
        if is_scalar(_py(max)):
            return apply("clamp_max.default", [self], {"max": _py(max)})
        return binop("clamp_max.Tensor", self, max)

    def nan_to_num(self, nan=0.0, posinf=None, neginf=None):
        return apply("nan_to_num.default", [self], {
            "nan": float(nan) if nan is not None else None,
            "posinf": None if posinf is None else float(posinf),
            "neginf": None if neginf is None else float(neginf)})

    # -- binary --------------------------------------------------------------------------------
    atan2, hypot = _binary("atan2.default"), _binary("hypot.default")
    maximum, minimum = _binary("maximum.default"), _binary("minimum.default")
    fmax, fmin = _binary("fmax.default"), _binary("fmin.default")
    fmod, remainder = _binary("fmod.Tensor"), _binary("remainder.Tensor")
    copysign, xlogy = _binary("copysign.Tensor"), _binary("xlogy.Tensor")
    logaddexp, logaddexp2 = _binary("logaddexp.default"), _binary("logaddexp2.default")
    arctan2 = atan2
    __mod__ = remainder

    def __rmod__(self, other):
        return binop("remainder.Tensor", other, self)

    def lerp(self, end, weight):
        a, b, w = operands(self, end, weight)
        return apply("lerp.Tensor", [a, b, w], {})

    def addcmul(self, tensor1, tensor2, value=1):
        prod = tensor1 * tensor2
        return self + (prod if value == 1 else prod * _py(value))

    def addcdiv(self, tensor1, tensor2, value=1):
        quot = tensor1 / tensor2
        return self + (quot if value == 1 else quot * _py(value))

    def sinc(self):
        """torch's normalized sinc, sin(pi x) / (pi x), 1 at 0: NumPy's ``np.sinc`` composite
        (its gradient at 0 is 0); integers and bools give the default float, float64."""
        from gradjit.tracer.numpy_ufuncs import _sinc   # (it imports this module)
        return _sinc(self if np.dtype(self.dtype).kind == "f" else self.to(np.float64))

    def rsub(self, other, alpha=1):
        scaled = self if alpha == 1 else self * _py(alpha)
        return other - scaled if not is_scalar(_py(other)) else _py(other) - scaled


def rounded_div(a, b, rounding_mode):
    """``a.div(b, rounding_mode=...)``, torch's: "trunc" rounds the quotient toward zero,
    "floor" down (NumPy's floor_divide: ``//``), in the operands' common dtype, so integers
    give integers (an integer division by zero gives 0, as NumPy's ``//``; torch raises).
    The gradient is zero, as torch's: the quotient is computed from detached operands and
    joined to them by a ``where`` whose other branch, their floors, takes the gradient."""
    if rounding_mode not in ("trunc", "floor"):
        raise ValueError(f"div expected rounding_mode to be one of None, 'trunc', or 'floor' "
                         f"but found {rounding_mode!r}")
    from gradjit.tracer.api import where
    from gradjit.tracer.numpy_shape import floor_divide   # (both import this module)
    a, b = operands(a, b)
    dt = common_dtype(a, [a, b])
    x, y = a.detach().to(dt), b.detach().to(dt)
    if rounding_mode == "floor":
        q = floor_divide(x, y)
    elif dt.kind == "f":
        q = (x / y).trunc()
    else:   # (exact below 2**53, as ``//``)
        q = where(y == 0, 0, (x.to(np.float64) / y.to(np.float64)).trunc()).to(dt)
    links = [t for t in (a, b) if np.dtype(t.dtype).kind == "f"
             and getattr(t, "_requires_grad", True)]
    if dt.kind != "f" or not links:
        return q
    link = links[0].floor() if len(links) == 1 else links[0].floor() + links[1].floor()
    return where(a._const(np.ones((), np.bool_)), q, link.to(dt))
