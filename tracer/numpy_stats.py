"""NumPy's quantile / percentile, average, cov / corrcoef, polyval, convolve / correlate,
interp, searchsorted and linalg.matrix_power on traced values.

Contract
- ``tracer/numpy_args.py``'s contract applies: NumPy's signatures and values,
  composites of registered ops, so first and higher derivatives come from those ops;
  unknown keywords a ``TypeError`` naming the function, unhonourable ones
  ``UnsupportedError``. ``NUMPY_FUNCTIONS`` is what ``tracer/numpy_protocol.py``
  merges into its table.
- ``quantile`` / ``percentile``: ``method='linear'`` (NumPy's default) with concrete ``q``
  (a number or an array: its dimensions come first in the result), ``axis`` None or one
  int, ``keepdims``; the sorted values are interpolated, so the gradient goes to the two
  order statistics around each quantile.
- ``average``: weights checked not to sum to zero (NumPy's ``ZeroDivisionError``) when
  they are concrete: a NumPy array or a tensor's values (traced ones have no value yet:
  their zero sum gives NaN).
- ``cov`` / ``corrcoef``: ``m``, ``y``, ``rowvar``, ``bias``, ``ddof``, ``dtype``; weights
  are refused. ``corrcoef`` clips to [-1, 1] as NumPy does.
- ``convolve`` / ``correlate``: 1-D, modes 'full', 'same', 'valid', either operand traced,
  as windows of the zero-padded longer operand times the other.
- ``polyval``: Horner's rule over the coefficients (a traced array or a list of values).
- ``matrix_power``: repeated squaring; ``n < 0`` inverts first, ``n == 0`` is the identity.
- ``interp``: NumPy's piecewise-linear rule, ``left`` / ``right`` included (``period`` is
  refused); any of ``x``, ``xp``, ``fp`` traced. Each ``x`` finds its segment by counting
  the ``xp`` at or below it (a comparison against every ``xp``: memory ``x.size * xp.size``),
  then gathers the segment's ends; the gradient is the slope for ``x`` and the two
  interpolation weights for ``fp``.
- ``searchsorted``: the count of ``a`` below ``v`` ('left') or at or below it ('right'),
  which is NumPy's answer for a sorted ``a``; int64, no gradient. ``sorter`` is refused.
  NaN sorts last as in NumPy: a NaN ``v`` counts every number of ``a`` ('left') or all of
  ``a`` ('right'); NaNs in ``a`` are never below a number.
"""
from __future__ import annotations

import numbers

import numpy as np
from numpy.lib.array_utils import normalize_axis_tuple

from gradjit.tracer.api import ArrayOps as A
from gradjit.tracer.api import where
from gradjit.tracer.methods_index import cat
from gradjit.tracer.numpy_args import checked, is_obj, keep, like_of, obj, unsupported
from gradjit.tracer.registry import GradjitError, user_site

_F64 = np.dtype(np.float64)


class WeightsSumToZeroError(GradjitError, ZeroDivisionError):
    """NumPy's error for ``np.average`` weights summing to zero, with the user's line."""


def _quantile(a, q, axis=None, out=None, overwrite_input=False, method="linear",
              keepdims=False, *, weights=None, interpolation=None, name="quantile"):
    if out is not None or weights is not None or (interpolation or method) != "linear":
        unsupported(f"np.{name}(..., {'out=' if out is not None else 'weights=' if weights is not None else 'method=' + repr(interpolation or method)})")
    if is_obj(q):
        unsupported(f"np.{name} with a traced q")
    like = like_of(a)
    a = obj(a, like)
    qa = np.asarray(q, dtype=np.float64)
    if name == "percentile":
        if np.any((qa < 0) | (qa > 100)):
            raise ValueError("Percentiles must be in the range [0, 100]")
        qa = qa / 100.0
    elif np.any((qa < 0) | (qa > 1)):
        raise ValueError("Quantiles must be in the range [0, 1]")
    if a.dtype.kind not in "fc":
        a = A.to(a, np.float64)
    shape = tuple(a.shape)
    if axis is None:
        x, ax = A.reshape(a, (-1,)), 0
    else:
        if not isinstance(axis, numbers.Integral):
            unsupported(f"np.{name} over several axes")
        ax = int(axis) % max(a.ndim, 1)
        x = a
    n = x.shape[ax]
    if n == 0:
        raise IndexError(f"np.{name}: cannot take a quantile of an empty axis")
    s = A.sort(x, ax)[0]
    pos = qa.reshape(-1) * (n - 1)
    lo = np.floor(pos).astype(np.int64)
    hi = np.minimum(lo + 1, n - 1)
    t = pos - lo
    below, above = A.index_select(s, ax, lo), A.index_select(s, ax, hi)
    # the result's dtype: NumPy's promotion with q as it uses it (a Python number is weak;
    # a list or an array is not: float32 data with q=[10, 90] gives float64, as percentile
    # divides the integers by 100; quantile's integer q promotes nothing)
    qdt, weak = np.asarray(q).dtype, type(q) in (int, float, bool)
    if name == "percentile" and not weak:
        qdt = np.true_divide(np.ones(1, qdt), 100).dtype
    dt = s.dtype if weak or qdt.kind not in "fc" else \
        np.result_type(s.dtype, qdt)
    if dt != s.dtype:
        s, below, above = (A.to(v, dt) for v in (s, below, above))
    tt = like._const(t.astype(dt).reshape((-1,) + (1,) * (s.ndim - ax - 1)))
    diff = A.sub(above, below)
    res = A.add(below, A.mul(diff, tt))   # NumPy's lerp (below the midpoint; equal up to rounding)
    # a NaN sorts last; NumPy's quantile is NaN for every q of a slice holding one (JAX's
    # too, with a zero gradient there, as where gives)
    last = s.narrow(ax, n - 1, 1)
    res = where(A.ne(last, last), np.nan, res)
    res = A.movedim(res, ax, 0) if ax else res
    rest = tuple(res.shape[1:])
    if keepdims:
        rest = (tuple(1 for _ in shape) if axis is None else
                tuple(1 if d == ax else e for d, e in enumerate(shape)))
    return A.reshape(res, qa.shape + rest)


def _percentile(a, q, axis=None, out=None, overwrite_input=False, method="linear",
                keepdims=False, *, weights=None, interpolation=None):
    return _quantile(a, q, axis, out, overwrite_input, method, keepdims, weights=weights,
                     interpolation=interpolation, name="percentile")


def _quantile_np(a, q, axis=None, out=None, overwrite_input=False, method="linear",
                 keepdims=False, *, weights=None, interpolation=None):
    return _quantile(a, q, axis, out, overwrite_input, method, keepdims, weights=weights,
                     interpolation=interpolation)


def _variables(v, name, like, dtype, rowvar):
    """``v`` as (variables, observations): 2-D, rows the variables (NumPy's ``cov`` rule)."""
    x = obj(v, like, dtype)
    if x.ndim > 2:
        raise ValueError(f"{name} has more than 2 dimensions")
    x = A.reshape(x, (1, -1)) if x.ndim < 2 else x
    return A.permute(x, (1, 0)) if not rowvar and x.shape[0] != 1 else x


def _cov(m, y=None, rowvar=True, bias=False, ddof=None, fweights=None, aweights=None, *,
         dtype=None):
    if fweights is not None or aweights is not None:
        unsupported("np.cov(..., fweights= or aweights=)")
    like = like_of(m, y)
    rdt = np.result_type(*(np.asarray(v).dtype if not is_obj(v) else v.dtype
                           for v in (m, y) if v is not None), np.float64) if dtype is None \
        else np.dtype(dtype)
    x = _variables(m, "m", like, rdt, rowvar)
    if y is not None:
        x = cat([x, _variables(y, "y", like, rdt, rowvar)], 0)
    ddof = (0 if bias else 1) if ddof is None else int(ddof)
    fact = x.shape[1] - ddof
    xc = A.sub(x, A.mean(x, (1,), True))
    c = A.div(A.matmul(xc, A.permute(xc, (1, 0))), float(max(fact, 0)))
    return A.reshape(c, tuple(d for d in c.shape if d != 1)) if 1 in c.shape else c


def _corrcoef(x, y=None, rowvar=True, bias=np._NoValue, ddof=np._NoValue, *, dtype=None):
    c = _cov(x, y, rowvar, dtype=dtype)
    if c.ndim == 0:
        return A.div(c, c)
    d = A.sqrt(A.diagonal(c, 0, 0, 1))
    c = A.div(A.div(c, A.reshape(d, (-1, 1))), A.reshape(d, (1, -1)))
    return A.clamp(c, -1.0, 1.0)


def _polyval(p, x):
    like = like_of(p, x)
    x = obj(x, like)
    coeffs = list(p) if isinstance(p, (list, tuple)) else None
    if coeffs is None:
        pa = obj(p, like)
        if pa.ndim != 1:
            unsupported("np.polyval with a coefficient array that is not 1-D")
        coeffs = [pa[k] for k in range(pa.shape[0])]
    y = A.mul(x, 0)   # (NumPy starts from zeros_like(x): x's shape and dtype)
    for c in coeffs:
        y = A.add(A.mul(y, x), c if is_obj(c) else like._const(np.asarray(c)))
    return y


def _windows(a, v, name):
    """(the longer operand padded, the shorter one, its length): NumPy swaps so the
    longer one slides under the shorter."""
    like = like_of(a, v)
    a, v = obj(a, like), obj(v, like)
    if name == "convolve":   # (NumPy's convolve makes its operands 1-D: ndmin=1; correlate not)
        a, v = (A.reshape(t, (1,)) if t.ndim == 0 else t for t in (a, v))
    if a.ndim != 1 or v.ndim != 1:
        depth = "too deep" if max(a.ndim, v.ndim) > 1 else "of too small depth"
        raise ValueError(f"np.{name}: object {depth} for desired array (1-D operands only)")
    if a.shape[0] == 0 or v.shape[0] == 0:
        raise ValueError(f"{'a' if a.shape[0] == 0 else 'v'} cannot be empty")
    return like, a, v


def _full(like, a, v):
    """The full convolution of 1-D ``a`` and ``v`` (length n + m - 1)."""
    n, m = a.shape[0], v.shape[0]
    dt = np.result_type(a.dtype, v.dtype)
    a, v = A.to(a, dt), A.to(v, dt)
    if n < m:
        a, v, n, m = v, a, m, n
    pad = like._const(np.zeros(m - 1, dt))
    ap = cat([pad, a, pad], 0) if m > 1 else a
    idx = np.arange(n + m - 1)[:, None] + np.arange(m)[None, :]
    win = ap[idx]   # (n + m - 1, m): each output's window
    return A.sum(A.mul(win, A.flip(v, (0,))), (1,)), n, m


def _mode_slice(full, n, m, mode, name, late=False):
    """``full`` (n >= m: the longer and shorter lengths) cut to ``mode``. ``late``: the
    centre of an even window rounds up (NumPy's correlate of a shorter first operand)."""
    if mode in ("full", 2):
        return full
    if mode in ("same", 1):
        start = m // 2 if late else (m - 1) // 2
        return full[start:start + n]
    if mode in ("valid", 0):
        return full[m - 1:n]
    raise ValueError(f"np.{name}: mode must be one of 'valid', 'same', or 'full' (got {mode!r})")


def _convolve(a, v, mode="full"):
    like, a, v = _windows(a, v, "convolve")
    full, n, m = _full(like, a, v)
    return _mode_slice(full, n, m, mode, "convolve")


def _correlate(a, v, mode="valid"):
    like, a, v = _windows(a, v, "correlate")
    late = a.shape[0] < v.shape[0]   # (NumPy correlates the swapped pair, then reverses)
    full, n, m = _full(like, a, A.flip(v, (0,)))   # (real operands: no conjugate)
    return _mode_slice(full, n, m, mode, "correlate", late)


def _matrix_power(a, n):
    if not isinstance(n, numbers.Integral):
        raise TypeError("exponent must be an integer")
    like = like_of(a)
    a = obj(a, like)
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise np.linalg.LinAlgError("Last 2 dimensions of the array must be square")
    if n == 0:
        eye = np.broadcast_to(np.eye(a.shape[-1], dtype=a.dtype), tuple(a.shape)).copy()
        return like._const(eye)
    if n < 0:
        a, n = np.linalg.inv(a), -n
    result, base = None, a
    while n:
        if n & 1:
            result = base if result is None else A.matmul(result, base)
        n >>= 1
        if n:
            base = A.matmul(base, base)
    return result


def _interp(x, xp, fp, left=None, right=None, period=None):
    if period is not None:
        unsupported("np.interp(..., period=...)")
    like = like_of(x, xp, fp)
    dt = np.result_type(*(v.dtype if is_obj(v) else np.asarray(v).dtype for v in (x, xp, fp)),
                        np.float64)
    x, xp, fp = obj(x, like, dt), obj(xp, like, dt), obj(fp, like, dt)
    if xp.ndim != 1 or fp.ndim != 1:
        raise ValueError("object too deep for desired array (xp and fp are 1-D)")
    k = xp.shape[0]
    if k == 0:
        raise ValueError("array of sample points is empty")
    if fp.shape[0] != k:
        raise ValueError("fp and xp are not of the same length.")
    flat = A.reshape(x, (-1, 1))
    if k == 1:
        # fp[0] for every x that is neither below nor above xp[0], NaN included (as NumPy)
        y = A.expand(A.reshape(fp, (1, 1)), tuple(flat.shape))
    else:
        below = A.sum(A.to(A.le(A.reshape(xp, (1, k)), flat), np.int64), (1,))
        j = A.clamp(A.sub(below, 1), 0, k - 2)
        j1 = A.add(j, 1)
        x0, x1 = A.index_select(xp, 0, j), A.index_select(xp, 0, j1)
        y0, y1 = A.index_select(fp, 0, j), A.index_select(fp, 0, j1)
        xf = A.reshape(flat, (-1,))
        slope = A.div(A.sub(y1, y0), A.sub(x1, x0))
        y = A.add(A.mul(slope, A.sub(xf, x0)), y0)
        # NumPy's steps where fp holds an infinity or a NaN: a NaN from the left knot is
        # tried again from the right one (fp = [1, inf, -2] at 1.5 gives inf), then fp[j]
        # where both knots are equal; exactly fp[j] at a knot; a NaN x stays NaN
        y_right = A.add(A.mul(slope, A.sub(xf, x1)), y1)
        y_right = where(A.ne(y_right, y_right) & A.eq(y0, y1), y0, y_right)
        y = where(A.ne(y, y), y_right, y)
        y = where(A.eq(xf, x0), y0, y)
        y = where(A.ne(xf, xf), xf, y)
        y = A.reshape(y, (-1, 1))
    lo = fp[0] if left is None else obj(left, like, dt)
    hi = fp[k - 1] if right is None else obj(right, like, dt)
    y = where(A.lt(flat, xp[0]), lo, where(A.gt(flat, xp[k - 1]), hi, y))
    y = where(A.eq(flat, xp[k - 1]), fp[k - 1], y)   # (exactly fp[-1] there, as NumPy)
    return A.reshape(y, tuple(x.shape))


def _searchsorted(a, v, side="left", sorter=None):
    if sorter is not None:
        unsupported("np.searchsorted(..., sorter=...)")
    if side not in ("left", "right"):
        raise ValueError(f"side must be 'left' or 'right' (got {side!r})")
    like = like_of(a, v)
    a, v = obj(a, like), obj(v, like)
    if a.ndim != 1:
        raise ValueError("object too deep for desired array (a is 1-D)")
    dt = np.result_type(a.dtype, v.dtype)
    col = A.reshape(A.to(v, dt), (-1, 1))
    row = A.reshape(A.to(a, dt), (1, -1))
    hits = A.lt(row, col) if side == "left" else A.le(row, col)
    if dt.kind == "f":
        # NumPy sorts NaN last: a NaN query goes after every number of ``a`` ('left': before
        # the NaNs of ``a``; 'right': after them), where the plain comparison says 0
        from gradjit.tracer.api import where
        nan_v = A.ne(col, col)
        hits = where(nan_v, A.eq(row, row) if side == "left" else True, hits)
    return A.reshape(A.sum(A.to(hits, np.int64), (1,)), tuple(v.shape))


def _sum(x, axes, keepdims):
    return x if axes == () else A.sum(x, axes, keepdims)


def _known(x):
    """The values of a constant gradjit array (a tensor's, or a traced value's that is a
    graph constant: an array NumPy made while tracing, which the guards retrace on when
    it changes), or None for a traced value that has none yet."""
    if hasattr(x, "data"):
        return np.asarray(x.data)
    consts = getattr(getattr(x, "graph", None), "constants", None)
    return None if consts is None else consts.get(x.value)


def _average(a, axis=None, weights=None, returned=False, *, keepdims=np._NoValue):
    like = like_of(a, weights)
    a = obj(a, like)
    axes = None if axis is None else normalize_axis_tuple(axis, a.ndim, argname="axis")
    kd = keep(keepdims)
    if weights is None:
        x = a if a.dtype.kind in "fc" else A.to(a, _F64)
        avg = x if axes == () else A.mean(x, axes, kd)
        scl = like._const(np.full(avg.shape, a.numel() / avg.numel(), avg.dtype))
    else:
        w = w0 = obj(weights, like)
        if a.shape != w.shape:
            if axes is None:
                raise TypeError("Axis must be specified when shapes of a and weights differ.")
            if w.shape != tuple(a.shape[ax] for ax in axes):
                raise ValueError("Shape of weights must be consistent with shape of a along "
                                 "specified axis.")
            w = A.permute(w, tuple(int(k) for k in np.argsort(axes)))
            w = A.reshape(w, tuple(s if ax in axes else 1 for ax, s in enumerate(a.shape)))
        rdt = np.result_type(a.dtype, w.dtype, *("f8",) * (a.dtype.kind in "biu"))
        w = A.to(w, rdt)
        scl = _sum(w, axes, kd)
        # NumPy's check needs the weights' values: a NumPy array's or a tensor's. Traced
        # weights have none while tracing, so a zero sum of theirs gives NaN (0 / 0).
        known = _known(w0)
        if known is not None and known.shape != a.shape and axes:   # (laid out as w)
            known = known.transpose(np.argsort(axes)).reshape(w.shape)
        if known is not None and np.any(np.sum(known, axis=axes, dtype=rdt) == 0):
            raise WeightsSumToZeroError("Weights sum to zero, can't be normalized", user_site())
        avg = A.div(_sum(A.mul(A.to(a, rdt), w), axes, kd), scl)
        scl = A.expand(scl, avg.shape)
    return (avg, scl) if returned else avg


NUMPY_FUNCTIONS = {f: checked(f, impl) for f, impl in {
    np.interp: _interp, np.searchsorted: _searchsorted,
    np.quantile: _quantile_np, np.percentile: _percentile, np.cov: _cov,
    np.corrcoef: _corrcoef, np.polyval: _polyval, np.convolve: _convolve,
    np.correlate: _correlate, np.linalg.matrix_power: _matrix_power, np.average: _average,
}.items()}
