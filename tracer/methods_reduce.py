"""Tensor methods of the reduction family (mixed into ``ArrayOps``).

Contract
- ``ReduceMethods`` gives ``Tensor`` and ``Tracer`` torch-named reductions
  over ``tracer/ops_reduce.py``: ``amin``, ``max`` / ``min`` (no dim: the
  value), ``prod``, ``var`` / ``std`` / ``var_mean`` / ``std_mean``
  (``correction`` or ``unbiased``, dims, ``keepdim``; NumPy's ``ddof`` maps to
  ``correction``), ``logsumexp``, ``norm`` (p = 1, 2, inf, -inf, 'fro', any
  p > 0; dims), ``nansum``, ``cumsum``, ``cumprod``, ``logcumsumexp``,
  ``cummax`` / ``cummin`` (values, int64 indices), ``sort`` (stable; values,
  indices), ``topk``, ``kthvalue``, ``median`` (no dim: the lower median's
  value; dim: values, indices) and ``dist``. Each (values, indices) pair is a
  ``values_indices`` named tuple (``.values``, ``.indices``), as torch's return types.
- ``topk`` / ``kthvalue`` / ``median(dim)`` are composites: ``sort`` then a
  ``narrow`` / ``select`` of values and indices (so ties resolve by position:
  the earliest index first, the lower median for even counts, as torch's
  values; torch's indices on ties are unspecified). ``median()`` is the op
  ``median`` (``tracer/ops_reduce.py``): the same lower median, its gradient split
  evenly over the elements equal to it, as torch. ``dist`` is
  ``(self - other).norm(p)``.
- Composites, differentiated through their parts: ``var`` is
  ``sum((x - mean)**2) / (N - correction)``, ``std`` its ``sqrt``; ``nansum``
  zeroes NaNs with ``where`` first.
- ``max(dim)`` / ``min(dim)`` return ``(values, indices)`` through the
  ``max.dim`` / ``min.dim`` kernels (``tracer/ops_index.py``); ``max(other)`` with a
  tensor (``gj.max(x, other)``) is torch's elementwise ``maximum`` (ties split the
  gradient half and half); any other non-int ``dim`` is a TypeError (NumPy's ``axis=``
  keyword still takes several axes: ``amax``).
"""
from __future__ import annotations

import collections
import math
import numbers

from gradjit.tracer.dispatch import apply, norm_dim, norm_dims
from gradjit.tracer.registry import GradjitError, user_site


def _count(shape, dims):
    n = 1
    for d in (range(len(shape)) if dims is None else dims):
        n *= shape[d]
    return n


class values_indices(collections.namedtuple("values_indices", ["values", "indices"])):
    """What torch's ``max(dim)``, ``sort``, ``topk`` ... return: a pair that is also
    read by name (``x.max(1).values``), as ``torch.return_types``."""
    __slots__ = ()


def _pair(res):
    return values_indices(*res)


class ReduceMethods:
    __slots__ = ()

    def amin(self, dim=(), keepdim=False, *, axis=None, keepdims=None):
        keepdim = keepdim if keepdims is None else keepdims
        dims = norm_dims(dim if axis is None else axis, self.ndim, "amin") or ()
        return apply("amin.default", [self], {"dim": dims, "keepdim": bool(keepdim)})

    def _minmax(self, name, dim, keepdim, axis):
        if axis is not None:   # NumPy's keyword: one axis or several, values only
            return getattr(self, "a" + name)(axis, keepdim)
        if dim is None:
            return getattr(self, "a" + name)((), keepdim)
        if hasattr(dim, "_const"):   # torch.max(input, other): elementwise, not a dim
            if keepdim:
                raise TypeError(f"{name}(): keepdim is not an argument of {name}(input, "
                                f"Tensor other), the elementwise {name}imum")
            return getattr(self, name + "imum")(dim)
        if not isinstance(dim, numbers.Integral):
            raise TypeError(f"{name}(): argument 'dim' must be int or a Tensor (other), not "
                            f"{type(dim).__name__} (several dims: a{name}(dim=...))")
        return _pair(self._minmax_dim(name, dim, keepdim))   # (methods_index.py)

    def max(self, dim=None, keepdim=False, *, axis=None, keepdims=None):
        return self._minmax("max", dim, keepdim if keepdims is None else keepdims, axis)

    def min(self, dim=None, keepdim=False, *, axis=None, keepdims=None):
        return self._minmax("min", dim, keepdim if keepdims is None else keepdims, axis)

    def prod(self, dim=None, keepdim=False, *, axis=None, keepdims=None):
        dim = dim if axis is None else axis
        keepdim = keepdim if keepdims is None else keepdims
        if dim is None:
            out = apply("prod.default", [self], {})
            return out.reshape((1,) * self.ndim) if keepdim and self.ndim else out
        if not isinstance(dim, numbers.Integral):
            raise TypeError(f"prod: dim must be one int, got {dim!r}")
        d = norm_dim(int(dim), self.ndim, "prod")
        return apply("prod.dim_int", [self], {"dim": d, "keepdim": bool(keepdim)})

    def var(self, dim=None, unbiased=None, keepdim=False, *, correction=None, axis=None,
            keepdims=None, ddof=None):
        keepdim = keepdim if keepdims is None else keepdims
        correction = correction if ddof is None else ddof
        dims = norm_dims(dim if axis is None else axis, self.ndim, "var") or None
        if correction is None:
            correction = 1 if unbiased is None or unbiased else 0
        # keywords for keepdim: these calls also run on tracers, whose sum/mean are NumPy's
        d = self - self.mean(dims, keepdim=True)
        return (d * d).sum(dims, keepdim=keepdim) / max(_count(self.shape, dims) - correction, 0)

    def std(self, dim=None, unbiased=None, keepdim=False, *, correction=None, axis=None,
            keepdims=None, ddof=None):
        # sqrt with gradient 0 where the variance is 0 (a constant slice), as torch's std
        return apply("_std_from_var.default", [ReduceMethods.var(
            self, dim, unbiased, keepdim, correction=correction, axis=axis, keepdims=keepdims,
            ddof=ddof)], {})

    def var_mean(self, dim=None, unbiased=None, keepdim=False, *, correction=None):
        return (ReduceMethods.var(self, dim, unbiased, keepdim, correction=correction),
                self.mean(norm_dims(dim, self.ndim, "var_mean") or None, keepdim=keepdim))

    def std_mean(self, dim=None, unbiased=None, keepdim=False, *, correction=None):
        return (ReduceMethods.std(self, dim, unbiased, keepdim, correction=correction),
                self.mean(norm_dims(dim, self.ndim, "std_mean") or None, keepdim=keepdim))

    def logsumexp(self, dim=None, keepdim=False):
        dims = norm_dims(dim, self.ndim, "logsumexp") or tuple(range(self.ndim))
        return apply("logsumexp.default", [self], {"dim": dims, "keepdim": bool(keepdim)})

    def norm(self, p="fro", dim=None, keepdim=False):
        if p == "fro" or p is None:
            p = 2
        if isinstance(p, str) or not isinstance(p, numbers.Real) or (p <= 0 and p != -math.inf):
            raise GradjitError(f"norm: p={p!r} is not supported (use 1, 2, inf, -inf, 'fro' or "
                               f"a positive number)", user_site())
        dims = norm_dims(dim, self.ndim, "norm") or None
        return apply("linalg_vector_norm.default", [self],
                     {"ord": float(p), "dim": dims, "keepdim": bool(keepdim)})

    def nansum(self, dim=None, keepdim=False, *, axis=None):
        from gradjit.tracer.api import where
        return where(self != self, 0.0, self).sum(dim if axis is None else axis, keepdim=keepdim)

    def cumsum(self, dim, *, axis=None):
        d = norm_dim(int(dim if axis is None else axis), self.ndim, "cumsum")
        return apply("cumsum.default", [self], {"dim": d})

    def _scan(self, name, dim, axis=None):
        d = norm_dim(int(dim if axis is None else axis), self.ndim, name)
        return apply(f"{name}.default", [self], {"dim": d})

    def cumprod(self, dim, *, axis=None):
        return self._scan("cumprod", dim, axis)

    def logcumsumexp(self, dim):
        return self._scan("logcumsumexp", dim)

    def cummax(self, dim):
        return _pair(self._scan("cummax", dim))

    def cummin(self, dim):
        return _pair(self._scan("cummin", dim))

    def sort(self, dim=-1, descending=False, *, stable=True):
        d = norm_dim(int(dim), self.ndim, "sort")
        return _pair(apply("sort.default", [self], {"dim": d, "descending": bool(descending)}))

    def argsort(self, dim=-1, descending=False, *, stable=True):
        return ReduceMethods.sort(self, dim, descending)[1]

    def topk(self, k, dim=-1, largest=True, sorted=True):
        d = norm_dim(int(dim), self.ndim, "topk")
        n = self.shape[d] if self.ndim else 1
        if not 0 <= k <= n:
            raise IndexError(f"topk: selected index k={k} out of range for a dimension of size {n}")
        v, i = ReduceMethods.sort(self, d, descending=largest)
        if not self.ndim:
            return _pair((v, i))
        return _pair((v.narrow(d, 0, k), i.narrow(d, 0, k)))

    def kthvalue(self, k, dim=-1, keepdim=False):
        d = norm_dim(int(dim), self.ndim, "kthvalue")
        n = self.shape[d] if self.ndim else 1
        if not 1 <= k <= n:
            raise IndexError(f"kthvalue: selected number k={k} out of range for a dimension of "
                             f"size {n}")
        return self._select_sorted(d, k - 1, keepdim)

    def _select_sorted(self, d, j, keepdim):
        v, i = ReduceMethods.sort(self, d)
        if not self.ndim:
            return _pair((v, i))
        v, i = v.narrow(d, j, 1), i.narrow(d, j, 1)
        return _pair((v, i) if keepdim else (v.squeeze(d), i.squeeze(d)))

    def median(self, dim=None, keepdim=False):
        if dim is None:
            flat = self.reshape(-1)
            if flat.shape[0] == 0:
                raise RuntimeError("median() of an empty tensor is not defined")
            return apply("median.default", [self], {})
        d = norm_dim(int(dim), self.ndim, "median")
        n = self.shape[d] if self.ndim else 1
        return self._select_sorted(d, (n - 1) // 2, keepdim)

    def sum_to_size(self, *size):
        """torch's: sum over the dims where ``size`` is 1 (or missing in front) so the result
        has ``size``; ``size`` must be expandable to ``self``'s shape."""
        size = tuple(size[0]) if len(size) == 1 and isinstance(size[0], (tuple, list)) \
            else tuple(size)
        shape = tuple(self.shape)
        lead = len(shape) - len(size)
        if lead < 0 or any(s not in (1, n) for s, n in zip(size, shape[lead:])):
            raise RuntimeError(f"size {{{list(size)}}} is not expandable to size "
                               f"{{{list(shape)}}}.")
        dims = tuple(range(lead)) + tuple(lead + i for i, s in enumerate(size)
                                          if s == 1 and shape[lead + i] != 1)
        out = self.sum(dims, keepdim=True) if dims else self
        return out.reshape(size)

    def dist(self, other, p=2):
        return (self - other).norm(p)
