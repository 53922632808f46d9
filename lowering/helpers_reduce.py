"""Backward helpers of the reduction family (see ``helpers.py`` for the contract).

Every helper is written with differentiable tracer ops, so second derivatives
come from lowering the backward graph again.
"""
from __future__ import annotations

import math

from gradjit.lowering.helpers import helper, restore_reduced_dims, scale_grad_by_count, where
from gradjit.lowering.helpers_index import gather_backward
from gradjit.tracer.methods_index import cat


@helper
def prod_backward(grad, self, result, dim, keepdim):
    """d prod / d x_i = product of the others: the product of the entries before i times
    the product of those after it (exclusive cumulative products from both ends). No
    division, so exact with zeros, and differentiable again: the second derivative at a
    zero entry is the product of the remaining ones (a where-masked result / x_i had the
    right value but a zero derivative there)."""
    g = grad if dim is None else restore_reduced_dims(grad, (dim,), keepdim)
    if self.ndim == 0:
        return g
    x, d = (self.reshape(-1), 0) if dim is None else (self, dim)
    others = _exclusive_cumprod(x, d) * _exclusive_cumprod(x.flip(d), d).flip(d)
    return g * (others.reshape(self.shape) if dim is None else others)


def _exclusive_cumprod(x, d):
    """prod_{k < i} x_k along ``d`` (1 at the first position)."""
    n = x.shape[d]
    if n <= 1:
        return x * 0 + 1
    one = x.narrow(d, 0, 1) * 0 + 1
    return cat([one, x.narrow(d, 0, n - 1)], d).cumprod(d)


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


def _reverse_cumsum(x, dim):
    """sum_{j >= i} x_j along ``dim``, summed from the end (no cancellation of a large
    total, unlike sum - cumsum + x)."""
    return x.flip(dim).cumsum(dim).flip(dim)


@helper
def cumprod_backward(grad, self, dim, result):
    """d out_j / d x_i = prod_{k <= j, k != i} x_k, exact with zeros, and exact to second
    order: before the first zero i0 of a slice it is out_j / x_i; at i0 it is the cumprod
    of the slice with that zero replaced by 1 (y); after it, x_i0 times the same gradient
    taken over y. That last value is 0, but written as x_i0 times something its derivative
    with respect to x_i0 is the product of the others (a plain 0 lost it: Hessians at a
    zero were wrong)."""
    if self.ndim == 0:
        return grad
    first, after, y = _first_zero(self, dim)
    x0 = where(first, self, 0).sum(dim, keepdim=True)   # x_i0 itself (0), as a factor
    later = x0 * _cumprod_grad(grad, y, dim, y.cumprod(dim), *_first_zero(y, dim))
    return where(where(first, False, after), later,
                 _cumprod_grad(grad, self, dim, result, first, after, y))


def _first_zero(x, dim):
    """(the first zero of each slice, positions at or after it, x with it replaced by 1)."""
    zero = x == 0
    nz = zero.to(x.dtype).cumsum(dim)
    first = where(zero, nz == 1, False)
    return first, nz > 0, where(first, 1, x)


def _cumprod_grad(grad, x, dim, result, first, after, y):
    """The gradient's value (first order): out_j / x_i before the first zero, the sum of
    grad times the cumprod of y at it, 0 after it."""
    before = _reverse_cumsum(grad * result, dim) / where(after, 1, x)
    at_zero = where(after, grad * y.cumprod(dim), 0).sum(dim, keepdim=True)
    return where(after, where(first, at_zero, 0), before)


@helper
def logcumsumexp_backward(grad, self, result, dim):
    """d out_j / d x_i = exp(x_i - out_j) for j >= i: exp(x_i - m) times the reverse
    cumsum of grad * exp(m - out), with m the slice max (the shift cancels)."""
    if self.ndim == 0:
        return grad
    m = self.amax((dim,), keepdim=True)
    return (self - m).exp() * _reverse_cumsum(grad * (m - result).exp(), dim)


@helper
def cummaxmin_backward(grad, self, indices, dim):
    """Each output's gradient added at the input position it was taken from."""
    if self.ndim == 0:
        return grad
    return gather_backward(grad, self, dim, indices)


@helper
def std_from_var_backward(grad, result):
    """d std / d var = 1 / (2 std), and 0 where std == 0 (tracer/ops_reduce.py says why).
    The denominator is 1 there, so neither a second derivative nor a forward-mode tangent
    meets the inf of 1 / 0 behind the mask (0 * inf would be NaN)."""
    zero = result == 0
    return grad * where(zero, 0, 0.5 / where(zero, 1, result))
