"""Backward helpers of the elementwise math family (see ``helpers.py`` for the contract).

Registered into the same ``HELPERS`` table; every helper builds IR from
differentiable tracer ops, so the formulas using them differentiate again.
"""
from __future__ import annotations

import math

from gradjit.lowering.helpers import helper, where


@helper
def polygamma(n, self):
    return self.polygamma(n)


@helper
def logit_backward(grad, self, eps):
    body = grad / (self * (1 - self))
    if eps is None:  # outside [0, 1] the function is undefined: NaN, as torch
        return where(self < 0, math.nan, where(self > 1, math.nan, body))
    return where(self < eps, 0, where(self > 1 - eps, 0, body))


@helper
def clamp_backward(grad, self, min, max):
    if min is None:
        return where(self <= max, grad, 0)
    if max is None:
        return where(self >= min, grad, 0)
    return where(self >= min, where(self <= max, grad, 0), 0)


@helper
def where_finite(self, a, b):
    """``a`` where ``self`` is finite, else ``b`` (|nan| < inf is false)."""
    return where(self.abs() < math.inf, a, b)


@helper
def xlogy_backward_self(grad, self, other):
    # d/dx x*log(y) = log(y); 0 where x == 0 and y <= 0 (torch masks that corner)
    body = grad * other.log()
    return where(self == 0, where(other <= 0, 0, body), body)


@helper
def binary_cross_entropy_backward(grad, self, target):
    """torch's: grad (p - t) / max(p (1 - p), 1e-12): 0 at p = t = 0 or 1, finite elsewhere
    at the ends (the clamp), and differentiable again (its derivative is torch's double
    backward, (p^2 - 2 p t + t) / (p (1 - p))^2, up to where the eps sits)."""
    return grad * (self - target) / ((1 - self) * self).clamp_min(1e-12)


@helper
def binary_cross_entropy_target_backward(grad, self):
    """d/dt of the clamped value: max(log1p(-p), -100) - max(log p, -100) (torch: -logit(p),
    the same but +-inf at p = 0 or 1)."""
    return grad * ((-self).log1p().clamp_min(-100.0) - self.log().clamp_min(-100.0))
