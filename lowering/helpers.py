"""Backward helpers callable from ``derivatives.yaml`` formulas.

Contract
- ``HELPERS`` maps a formula function name to a Python function that builds
  IR through tracer ops (``Tracer`` methods), so every helper is itself made of
  differentiable ops and higher-order derivatives come from lowering again.
- Helpers receive ``Tracer``s for tensors and plain Python values for
  attributes; they never see arrays or Numba.
- Names follow PyTorch's ``FunctionsManual.cpp`` where one exists.
"""
from __future__ import annotations

import numpy as np

from gradjit.tracer.api import apply, where as _where
from gradjit.tracer.trace import constant

HELPERS = {}


def helper(fn):
    HELPERS[fn.__name__] = fn
    return fn


@helper
def maybe_multiply(x, s):
    return x if s == 1 else x * s


@helper
def while_steps_check(x, running, max_steps):
    """``x`` once ``running`` is false (gj.while_loop cut short by max_steps raises)."""
    return apply("while_steps_check.default", [x, running], {"max_steps": max_steps})


@helper
def zeros_like(x):
    return apply("zeros_like.default", [x], {})


def zeros_of(like, shape):
    """Zeros of ``shape`` in ``like``'s dtype, made from a scalar constant: a formula that
    needs only an input's shape (torch: ``self.sizes()``) must not read the input itself,
    or the backward would save it (fed, version-checked against in-place writes, and
    counted as a dependence of a create_graph result)."""
    z = constant(like.graph, np.zeros((), like.dtype))
    return zeros_like(z.expand(tuple(shape)) if tuple(shape) else z)


@helper
def where(condition, a, b):
    return _where(condition, a, b)


@helper
def finite_reciprocal(x):
    """``1 / x``, with 0 where that is infinite (torch's atan2_backward: ``masked_fill_(
    recip.isinf(), 0)``). Differentiated again, the masked entries give 0 * inf = NaN
    (the reciprocal's own derivative), as torch's second derivative of atan2 at (0, 0)."""
    r = x.reciprocal()
    return where(r.abs() == float("inf"), 0, r)


@helper
def sum_to(x, shape):
    """Sum ``x`` down to ``shape`` (undo NumPy broadcasting)."""
    shape = tuple(shape)
    if x.shape == shape:
        return x
    lead = x.ndim - len(shape)
    dims = tuple(range(lead)) + tuple(
        lead + i for i, s in enumerate(shape) if s == 1 and x.shape[lead + i] != 1)
    if dims:
        x = x.sum(dims, keepdim=True)
    return x.reshape(shape)


@helper
def tanh_backward(grad, result):
    return grad * (1 - result * result)


@helper
def sigmoid_backward(grad, result):
    return grad * (result * (1 - result))


@helper
def threshold_backward(grad, self, threshold):
    return where(self > threshold, grad, 0)


@helper
def elu_backward(grad, alpha, scale, input_scale, is_result, self_or_result):
    return apply("elu_backward.default", [grad, self_or_result],
                 {"alpha": alpha, "scale": scale, "input_scale": input_scale,
                  "is_result": is_result})


@helper
def elu_double_backward(grad, grad_output, alpha, scale, input_scale, is_result, self_or_result):
    """torch's: the derivative of elu_backward in its self (or result) is masked with a
    strict ``< 0``, so every derivative past the first is 0 at 0."""
    if is_result:
        return where(self_or_result < 0, grad * grad_output * input_scale, 0)
    return where(self_or_result < 0, elu_backward(grad * grad_output * input_scale, alpha, scale,
                                                  input_scale, False, self_or_result), 0)


@helper
def pow_backward(grad, self, exponent):
    if exponent == 0:
        return zeros_like(grad)
    if exponent == 1:
        return grad
    if exponent == 2:
        return grad * (self * 2)
    return grad * (self.pow(exponent - 1) * exponent)


@helper
def pow_backward_self(grad, self, exponent):
    # exponent * self**(exponent - 1), 0 where exponent == 0 (x**0 is constant, even at x = 0).
    # The power inside uses exponent 1 there, so 0**-1 = inf never enters the graph: a
    # product 0 * inf in an untaken where branch makes the second derivative and the
    # linearised tangent (forward mode) NaN.
    safe = where(exponent == 0, 1, exponent)
    return where(exponent == 0, 0, grad * (exponent * self.pow(safe - 1)))


@helper
def pow_backward_exponent(grad, self, exponent, result):
    """d(self**exponent)/d exponent = result * log(self); 0 where self == 0 and exponent >= 0
    (the limit: 0**y is constant for y > 0), -inf where self == 0 and exponent < 0."""
    if isinstance(self, (int, float)):
        if self == 0:
            # a coefficient of the exponent alone: never 0 * inf, whatever is differentiated
            return grad * where(exponent >= 0, zeros_like(exponent),
                                zeros_like(exponent) - float("inf"))
        import math
        # log of a negative base is NaN, as NumPy's (math.log raised: no backward at all);
        # the gradient is NaN there, as torch's and JAX's
        return grad * (result * (math.log(self) if self > 0 or self != self else float("nan")))
    # log(1) = 0 replaces log(0) where the limit is 0, so no -inf reaches a product that a
    # where would mask afterwards (NaN in second order and in forward mode)
    masked = where(self == 0, where(exponent >= 0, 1, self), self)
    return grad * (result * masked.log())


@helper
def sum_backward(grad, sizes, dims, keepdim):
    if not keepdim and sizes:
        for d in sorted(dims if dims else range(len(sizes))):
            grad = grad.unsqueeze(d)
    return grad.expand(tuple(sizes))


@helper
def mean_backward(grad, sizes, dims, keepdim):
    count = 1
    for d in (dims if dims else range(len(sizes))):
        count *= sizes[d]
    return sum_backward(grad, sizes, dims, keepdim) / count


@helper
def restore_reduced_dims(output, dims, keepdim):
    if keepdim or not dims:
        return output
    for d in sorted(dims):
        output = output.unsqueeze(d)
    return output


@helper
def scale_grad_by_count(grad, mask, dims):
    mask = mask.to(grad.dtype)
    return (grad / mask.sum(dims if dims else None, keepdim=True)) * mask


@helper
def evenly_distribute_backward(grad, self, value):
    """``grad`` of a reduction to one of ``self``'s values, split evenly over every element
    equal to it (a NaN value: over the NaNs), as torch's median / nanmedian."""
    mask = where(value != value, self != self, self == value)
    return scale_grad_by_count(grad, mask, ())


@helper
def permute_backwards(grad, dims):
    inverse = [0] * len(dims)
    for i, d in enumerate(dims):
        inverse[d] = i
    return grad.permute(tuple(inverse))


@helper
def unsqueeze_to(grad, *args):
    if len(args) == 1:
        return grad.reshape(tuple(args[0]))
    dim, sizes = args
    return grad.unsqueeze(dim) if sizes[dim] == 1 else grad


@helper
def softmax_backward_data(grad, result, dim):
    return (grad - (grad * result).sum(dim, keepdim=True)) * result


@helper
def log_softmax_backward_data(grad, result, dim):
    return grad - result.exp() * grad.sum(dim, keepdim=True)


@helper
def not_implemented(reason=""):  # handled by the loader; listed so the name is known
    raise NotImplementedError(reason)


from gradjit.lowering import helpers_math  # noqa: E402,F401  (registers the family's helpers)
from gradjit.lowering import helpers_reduce  # noqa: E402,F401
from gradjit.lowering import helpers_index  # noqa: E402,F401
from gradjit.lowering import helpers_linalg  # noqa: E402,F401
