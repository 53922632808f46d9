"""Backward helpers of the reduction family (see ``helpers.py`` for the contract).

Every helper is written with differentiable tracer ops, so second derivatives
come from lowering the backward graph again.
"""
from __future__ import annotations

import math

from gradjit.lowering.helpers import helper, restore_reduced_dims, scale_grad_by_count, where


@helper
def prod_backward(grad, self, result, dim, keepdim):
    """d prod / d x_i = product of the others, exact with zeros: where no input
    is zero it is result / x_i; where exactly one is, only that position gets
    the product of the non-zeros; with two or more zeros every gradient is 0."""
    dims = None if dim is None else (dim,)
    g = grad if dims is None else restore_reduced_dims(grad, dims, keepdim)
    zero = self == 0
    nonzero = where(zero, 1, self)
    if dims is None:
        p, count = nonzero.prod(), zero.to(self.dtype).sum()
    else:
        p = nonzero.prod(dim, keepdim=True)
        count = zero.to(self.dtype).sum(dims, keepdim=True)
    others = where(zero, where(count == 1, p, 0), where(count == 0, p / nonzero, 0))
    return g * others


@helper
def logsumexp_backward(grad, self, result, dim, keepdim):
    g = restore_reduced_dims(grad, dim, keepdim)
    return g * (self - restore_reduced_dims(result, dim, keepdim)).exp()


@helper
def norm_backward(grad, self, ord, result, dim, keepdim):
    g = restore_reduced_dims(grad, dim, keepdim)
    r = restore_reduced_dims(result, dim, keepdim)
    if ord == 1:
        return g * self.sgn()
    if ord == 2:   # 0 at a zero norm (torch), not 0/0
        return g * where(r == 0, 0, self / r)
    if math.isinf(ord):   # evenly among the entries that attain the max / min
        return scale_grad_by_count(g, self.abs() == r, dim) * self.sgn()
    body = g * (self * self.abs().pow(ord - 2)) / r.pow(ord - 1)
    return where(self == 0, 0, body)


@helper
def cumsum_backward(grad, dim):
    """Reverse cumulative sum along ``dim``: sum - cumsum + grad."""
    if grad.ndim == 0:
        return grad
    return grad.sum(dim, keepdim=True) - grad.cumsum(dim) + grad
