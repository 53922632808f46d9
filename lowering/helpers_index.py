"""Backward helpers of the indexing family (see ``helpers.py`` for the contract).

Every helper is written with differentiable tracer ops (the kernels of
``tracer/ops_index.py``), so second derivatives come from lowering again:
``slice`` and ``slice_backward`` are each other's adjoints (and ``cat`` is sliced), as are
``index_select`` / ``index_add`` and ``gather`` / ``scatter_add``.
"""
from __future__ import annotations

from gradjit.lowering.helpers import helper, zeros_of
from gradjit.tracer.api import apply


@helper
def slice_of(x, dim, start, end, step):
    """``x[..., start:end:step, ...]`` along ``dim`` (a strided view)."""
    return apply("slice.Tensor", [x], {"dim": dim, "start": start, "end": end, "step": step})


@helper
def slice_backward(grad, input_sizes, dim, start, end, step):
    return apply("slice_backward.default", [grad], {"input_sizes": tuple(input_sizes), "dim": dim,
                                                    "start": start, "end": end, "step": step})


@helper
def cat(tensors, dim):
    """One ``cat.default`` of ``tensors`` (the tangent of a concatenation)."""
    return apply("cat.default", list(tensors), {"dim": dim})


@helper
def cat_tensors_backward(grad, tensors, dim, grad_input_mask):
    """Each part's gradient: its own slice of ``grad`` along ``dim`` (a view; None where
    the mask says no gradient is needed)."""
    out, off = [], 0
    for t, needed in zip(tensors, grad_input_mask):
        n = t.shape[dim]
        out.append(slice_of(grad, dim, off, off + n, 1) if needed else None)
        off += n
    return out


@helper
def index_select_of(x, dim, index):
    return apply("index_select.default", [x, index], {"dim": dim})


@helper
def index_select_backward(grad, self, dim, index):
    """Zeros of ``self``'s shape with ``grad``'s slices added at ``index`` (repeats add up).
    torch passes ``self.sizes()``; here only ``self``'s static shape is read (``zeros_of``)."""
    return apply("index_add.default", [zeros_of(grad, self.shape), index, grad],
                 {"dim": dim, "alpha": 1})


@helper
def gather_of(x, dim, index):
    return apply("gather.default", [x, index], {"dim": dim, "sparse_grad": False})


@helper
def gather_backward(grad, self, dim, index, sparse_grad=False):
    return apply("scatter_add.default", [zeros_of(grad, self.shape), index, grad],
                 {"dim": dim})


@helper
def value_selecting_reduction_backward(grad, dim, indices, self, keepdim):
    """The gradient of max/min(dim) values: ``grad`` scattered to the selected ``indices``.
    (torch passes ``self.sizes()``; ``self`` here supplies the shape.)"""
    if self.ndim == 0:
        return grad
    if not keepdim:
        grad, indices = grad.unsqueeze(dim), indices.unsqueeze(dim)
    return gather_backward(grad, self, dim, indices)
