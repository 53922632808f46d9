"""The reduction family beyond sum/mean/amax: amin, prod, logsumexp, vector norms, cumsum.

Contract
- Declared once each (schema = the ``derivatives.yaml`` ``name:`` line), with
  shape/dtype rule and NumPy reference; conventions as in ``tracer/ops.py``
  (dims arrive as sorted non-negative tuples, ``dim`` of ``*.dim_int`` and
  ``cumsum`` as one non-negative int).
- ``amin`` / ``prod`` are loop reductions for the code generators;
  ``logsumexp`` and ``linalg_vector_norm`` are composites with formulas of their
  own, decomposed into primitive loops before code generation
  (``lowering/passes.py``); ``cumsum`` is a kernel (its own loop nest).
- ``median`` (no dim) is a composite with a formula of its own: in value the lower
  median of the flattened, sorted input (decomposed to ``sort`` + ``select``), its
  gradient split evenly over the elements equal to it (torch).
- ``_std_from_var`` is ``std`` from a variance: ``sqrt`` in value (a composite,
  decomposed to ``sqrt`` for code generation), with gradient 0 where the
  variance is 0 (see its ``derivatives.yaml`` entry); ``std_from_var(v)``
  records it.
- Front-end composites (no op of their own, ``tracer/methods_reduce.py``):
  ``max()`` / ``min()`` are ``amax`` / ``amin`` over every dim; ``var`` /
  ``std`` (+ ``_mean``) are spelled with mean, sub, mul, sum and sqrt;
  ``nansum`` is ``where(x != x, 0, x).sum``; ``norm`` calls
  ``linalg_vector_norm``.
"""
from __future__ import annotations

import numpy as np

from gradjit.tracer import lazy_scipy
from gradjit.tracer.dispatch import apply
from gradjit.tracer.ops import (R, C, _axes, _float_only, _minmax_reduced, _reduced_shape,
                               _sum_dtype, reduces_nothing)
from gradjit.tracer.registry import ShapeError, defop, user_site

_LOGSUMEXP = lazy_scipy.special("logsumexp")

K = "kernel"


defop("amin(Tensor self, int[1] dim=[], bool keepdim=False) -> Tensor", R, _minmax_reduced("amin"),
      lambda x, dim, keepdim: np.asarray(np.amin(x, axis=_axes(dim), keepdims=keepdim)))

defop("prod(Tensor self) -> Tensor", R, lambda t, a: [((), _sum_dtype(t[0].dtype))],
      lambda x: np.asarray(np.prod(x, dtype=_sum_dtype(x.dtype))))
defop("prod.dim_int(Tensor self, int dim, bool keepdim=False) -> Tensor", R,
      lambda t, a: [(_reduced_shape(t[0].shape, (a["dim"],), a["keepdim"]),
                     _sum_dtype(t[0].dtype))],
      lambda x, dim, keepdim: np.asarray(np.prod(x, axis=dim, keepdims=keepdim,
                                                 dtype=_sum_dtype(x.dtype))))


def _float_reduced(op):
    return lambda t, a: [(_reduced_shape(t[0].shape, a["dim"] or None, a["keepdim"]),
                          _float_only(op, t[0].dtype))]


def _logsumexp(x, dim, keepdim):
    return np.asarray(_LOGSUMEXP(x, axis=_axes(dim), keepdims=keepdim))


defop("logsumexp(Tensor self, int[1] dim, bool keepdim=False) -> Tensor", C,
      _float_reduced("logsumexp"), _logsumexp)


def _vector_norm(x, ord, dim, keepdim):
    a = np.abs(x)
    ax = _axes(dim)
    if ord == float("inf"):
        return np.asarray(np.amax(a, axis=ax, keepdims=keepdim))
    if ord == -float("inf"):
        return np.asarray(np.amin(a, axis=ax, keepdims=keepdim))
    if ord == 1:
        return np.asarray(np.sum(a, axis=ax, keepdims=keepdim))
    if ord == 2:
        return np.asarray(np.sqrt(np.sum(a * a, axis=ax, keepdims=keepdim)))
    return np.asarray(np.sum(a ** ord, axis=ax, keepdims=keepdim) ** (1.0 / ord))


def _vector_norm_infer(t, a):
    if abs(a["ord"]) == float("inf") and reduces_nothing(t[0].shape, a["dim"]):
        raise ShapeError(f"linalg.vector_norm cannot compute the {a['ord']} norm on an empty "
                         f"tensor because the operation does not have an identity (input shape "
                         f"{tuple(t[0].shape)}, dim {a['dim']})", user_site())
    return _float_reduced("linalg_vector_norm")(t, a)


defop("linalg_vector_norm(Tensor self, Scalar ord=2, int[1]? dim=None, bool keepdim=False) "
      "-> Tensor", C, _vector_norm_infer, _vector_norm)

defop("cumsum(Tensor self, int dim) -> Tensor", K,
      lambda t, a: [(tuple(t[0].shape), _sum_dtype(t[0].dtype))],
      lambda x, dim: np.cumsum(x, axis=dim, dtype=_sum_dtype(x.dtype)) if x.ndim else x.copy())


# -- scans and order statistics (kernels: a loop nest along ``dim`` each) -----------------------
# ``dim`` arrives non-negative; a 0-d input is its own scan / sort (index 0).
def _same_shape(dtype_rule):
    return lambda t, a: [(tuple(t[0].shape), dtype_rule(t[0].dtype))]


def _with_indices(t, a):
    return [(tuple(t[0].shape), t[0].dtype), (tuple(t[0].shape), np.dtype(np.int64))]


defop("cumprod(Tensor self, int dim) -> Tensor", K, _same_shape(_sum_dtype),
      lambda x, dim: np.cumprod(x, axis=dim, dtype=_sum_dtype(x.dtype)) if x.ndim else x.copy())


def _logcumsumexp(x, dim):
    if x.ndim == 0:
        return x.copy()
    with np.errstate(all="ignore"):
        return np.logaddexp.accumulate(x, axis=dim)


defop("logcumsumexp(Tensor self, int dim) -> Tensor", K,
      _same_shape(lambda dt: _float_only("logcumsumexp", dt)), _logcumsumexp)


def _cumext(better):
    """cummax / cummin: the running extreme and where it was last attained (ties move
    the index forward, as torch); a NaN, once met, stays."""
    def impl(x, dim):
        if x.ndim == 0:
            return x.copy(), np.zeros((), np.int64)
        xm = np.moveaxis(x, dim, -1)
        vals, inds = np.empty_like(xm), np.zeros(xm.shape, np.int64)
        best, bi = xm[..., 0].copy(), np.zeros(xm.shape[:-1], np.int64)
        for j in range(xm.shape[-1]):
            v = xm[..., j]
            take = (best == best) & ((v != v) | better(v, best)) if j else np.ones(best.shape, bool)
            best = np.where(take, v, best)
            bi = np.where(take, j, bi)
            vals[..., j], inds[..., j] = best, bi
        return np.moveaxis(vals, -1, dim), np.moveaxis(inds, -1, dim)
    return impl


defop("cummax(Tensor self, int dim) -> (Tensor values, Tensor indices)", K, _with_indices,
      _cumext(np.greater_equal))
defop("cummin(Tensor self, int dim) -> (Tensor values, Tensor indices)", K, _with_indices,
      _cumext(np.less_equal))


def _sort(x, dim, descending):
    """Stable sort along ``dim`` (ties keep their order, also descending)."""
    if x.ndim == 0:
        return x.copy(), np.zeros((), np.int64)
    key = x.astype(np.int64) if x.dtype.kind in "bu" else x
    i = np.argsort(-key if descending else key, axis=dim, kind="stable").astype(np.int64)
    return np.take_along_axis(x, i, dim), i


defop("sort(Tensor self, int dim=-1, bool descending=False) -> (Tensor values, Tensor indices)",
      K, _with_indices, _sort)


# -- median of all elements --------------------------------------------------------------------
# Its own op (not sort + select in the front end) because its gradient is not the
# gradient of a selection: torch splits it evenly over every element equal to the median
# (``evenly_distribute_backward``). In value it is the lower median of the stably sorted
# elements, so code generation decomposes it to exactly that (``lowering/passes.py``).
def _median(x):
    flat = np.sort(x.reshape(-1), kind="stable")
    return np.asarray(flat[(flat.shape[0] - 1) // 2])


defop("median(Tensor self) -> Tensor", C, lambda t, a: [((), t[0].dtype)], _median)


# -- std from a variance -----------------------------------------------------------------------
# Its own op, not sqrt: at a variance of 0 (a constant slice) sqrt's derivative is +inf and
# the chain gives 0 * inf = NaN, while std (a norm of the deviations) has 0 as a
# subgradient there. Masking is right only because a variance is at its minimum (zero
# gradient) wherever it is 0, so it cannot move into sqrt: sqrt itself keeps +inf.
def _std_from_var_infer(t, a):
    dt = np.dtype(t[0].dtype)
    return [(tuple(t[0].shape), dt if dt.kind == "f" else np.dtype(np.float64))]


defop("_std_from_var(Tensor self) -> Tensor", C, _std_from_var_infer, np.sqrt)


def std_from_var(var):
    """``std`` given ``var`` (a variance, so >= 0): ``sqrt(var)``, gradient 0 where var == 0."""
    return apply("_std_from_var.default", [var], {})
