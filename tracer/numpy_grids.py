"""NumPy's sampled grids and differences on them, on traced arrays and tensors:
linspace, meshgrid, diff, gradient.

Contract
- ``NUMPY_FUNCTIONS`` (each entry behind ``checked``) is what ``tracer/numpy_protocol.py``
  merges into its table; ``tracer/numpy_args.py``'s contract applies (NumPy's signatures
  and values, composites of registered ops, unknown keywords a ``TypeError`` naming the
  function).
- ``np.linspace``: ``arange * step + start``, the last sample ``stop`` itself
  when ``endpoint`` (NumPy's special case for a step that underflows to 0 is
  not taken: a traced step has no value to branch on). ``_linspace`` is also
  ``tracer/numpy_pad.py``'s linear ramp.
- ``np.gradient`` is NumPy's formula, term for term: second-order central
  differences inside, ``edge_order`` 1 or 2 one-sided ones at the ends;
  spacing a scalar (traced too) or coordinates (a NumPy array is checked for
  uniform spacing as NumPy does; traced coordinates always take the
  non-uniform formula, equal up to rounding).
"""
from __future__ import annotations

import operator

import numpy as np
from numpy.lib.array_utils import normalize_axis_index, normalize_axis_tuple

from gradjit.tracer.api import ArrayOps as A
from gradjit.tracer.methods_index import cat
from gradjit.tracer.numpy_args import along, checked, is_obj, like_of, ndim_of, obj, weak

_F64 = np.dtype(np.float64)


# -- linspace -------------------------------------------------------------------------------------
def _linspace(start, stop, num=50, endpoint=True, retstep=False, dtype=None, axis=0, *,
              device=None):
    num = operator.index(num)
    if num < 0:
        raise ValueError(f"Number of samples, {num}, must be non-negative.")
    if device not in (None, "cpu"):
        raise ValueError(f'Device not understood. Only "cpu" is allowed, but received: {device}')
    div = num - 1 if endpoint else num
    like = like_of(start, stop)
    dt = np.result_type(weak(start), weak(stop))
    dt = dt if dt.kind in "fc" else _F64
    start, stop = obj(start, like, dt), obj(stop, like, dt)
    delta = A.sub(stop, start)
    y = like._const(np.arange(0, num, dtype=dt).reshape((-1,) + (1,) * delta.ndim))
    if div > 0:
        step = A.div(delta, div)
        y = A.mul(y, step)
    else:   # no samples, or one with endpoint: NumPy's step is NaN
        step = np.nan
        y = A.mul(y, delta)
    y = A.add(y, start)
    if endpoint and num > 1:   # the last sample is stop itself
        y = cat([along(y, 0, slice(None, -1)), A.unsqueeze(A.expand(stop, delta.shape), 0)], 0)
    if axis != 0:
        y = A.moveaxis(y, 0, axis)
    if dtype is not None:
        y = A.to(A.floor(y) if np.issubdtype(dtype, np.integer) else y, dtype)
    return (y, step) if retstep else y


# -- meshgrid -------------------------------------------------------------------------------------
def _meshgrid(*xi, copy=True, sparse=False, indexing="xy"):
    if indexing not in ("xy", "ij"):
        raise ValueError("Valid values for `indexing` are 'xy' and 'ij'.")
    like = like_of(*xi)
    s0 = (1,) * len(xi)
    out = [A.reshape(obj(x, like), s0[:i] + (-1,) + s0[i + 1:]) for i, x in enumerate(xi)]
    if indexing == "xy" and len(xi) > 1:   # x varies along columns, y along rows
        out[0] = A.reshape(out[0], (1, -1) + s0[2:])
        out[1] = A.reshape(out[1], (-1, 1) + s0[2:])
    if not sparse:
        shape = tuple(np.broadcast_shapes(*[t.shape for t in out]))
        out = [A.expand(t, shape) for t in out]
    return out if sparse and not copy else tuple(out)


# -- diff -----------------------------------------------------------------------------------------
def _diff(a, n=1, axis=-1, prepend=np._NoValue, append=np._NoValue):
    if n == 0:
        return a
    if n < 0:
        raise ValueError("order must be non-negative but got " + repr(n))
    like = like_of(a, prepend, append)
    a = obj(a, like)
    if a.ndim == 0:
        raise ValueError("diff requires input that is at least one dimensional")
    d = normalize_axis_index(axis, a.ndim)
    parts = []
    for p in (prepend, a, append):
        if p is not np._NoValue:
            p = obj(p, like)
            parts.append(A.expand(p, a.shape[:d] + (1,) + a.shape[d + 1:]) if p.ndim == 0 else p)
    a = cat(parts, d) if len(parts) > 1 else a
    for _ in range(n):
        hi, lo = along(a, d, slice(1, None)), along(a, d, slice(None, -1))
        a = A.ne(hi, lo) if a.dtype == np.bool_ else A.sub(hi, lo)
    return a


# -- gradient -------------------------------------------------------------------------------------
def _spacing(h, n):
    """An axis' spacing as NumPy reduces it: a scalar, or the differences of coordinates."""
    if ndim_of(h) == 0:
        return h
    if ndim_of(h) != 1:
        raise ValueError("distances must be either scalars or 1d")
    if len(h) != n:
        raise ValueError("when 1d, distances must match the length of the corresponding "
                         "dimension")
    if is_obj(h):   # traced coordinates: no value to test for uniform spacing
        h = h if h.dtype.kind in "fc" else A.to(h, _F64)
        return A.sub(along(h, 0, slice(1, None)), along(h, 0, slice(None, -1)))
    h = np.asarray(h)
    diffx = np.diff(h.astype(_F64) if np.issubdtype(h.dtype, np.integer) else h)
    return diffx[0] if (diffx == diffx[0]).all() else diffx


def _coef(c, like, axis, ndim):
    """A spacing or coefficient as an operand: NumPy values become constants (a NumPy
    float64 scalar promotes float32 as in NumPy; a Python float stays weak); arrays are
    laid along ``axis``."""
    if isinstance(c, (np.ndarray, np.generic)):
        c = obj(c, like)
    shape = (1,) * axis + (-1,) + (1,) * (ndim - axis - 1)
    return A.reshape(c, shape) if ndim_of(c) else c


def _grad_axis(f, ax, h, edge_order):
    if f.shape[ax] < edge_order + 1:
        raise ValueError("Shape of array too small to calculate a numerical gradient, at least "
                         "(edge_order + 1) elements are required.")

    def s(start, stop):
        return along(f, ax, slice(start, stop))

    def lin(a, b, c, fa, fb, fc):
        a, b, c = map(co, (a, b, c))
        return a * fa + b * fb + c * fc

    def co(v):
        return _coef(v, f, ax, f.ndim)

    if ndim_of(h) == 0:
        inner = (s(2, None) - s(None, -2)) / co(2. * h)
    else:
        dx1, dx2 = h[0:-1], h[1:]
        inner = lin(-dx2 / (dx1 * (dx1 + dx2)), (dx2 - dx1) / (dx1 * dx2),
                    dx1 / (dx2 * (dx1 + dx2)), s(None, -2), s(1, -1), s(2, None))
    uniform = ndim_of(h) == 0
    if edge_order == 1:
        first = (s(1, 2) - s(0, 1)) / co(h if uniform else h[0])
        last = (s(-1, None) - s(-2, -1)) / co(h if uniform else h[-1])
    else:
        if uniform:
            a, b, c = -1.5 / h, 2. / h, -0.5 / h
        else:
            dx1, dx2 = h[0], h[1]
            a, b, c = (-(2. * dx1 + dx2) / (dx1 * (dx1 + dx2)), (dx1 + dx2) / (dx1 * dx2),
                       -dx1 / (dx2 * (dx1 + dx2)))
        first = lin(a, b, c, s(0, 1), s(1, 2), s(2, 3))
        if uniform:
            a, b, c = 0.5 / h, -2. / h, 1.5 / h
        else:
            dx1, dx2 = h[-2], h[-1]
            a, b, c = (dx2 / (dx1 * (dx1 + dx2)), -(dx2 + dx1) / (dx1 * dx2),
                       (2. * dx2 + dx1) / (dx2 * (dx1 + dx2)))
        last = lin(a, b, c, s(-3, -2), s(-2, -1), s(-1, None))
    return cat([first, inner, last], ax)


def _gradient(f, *varargs, axis=None, edge_order=1):
    like = like_of(f, *varargs)
    f = obj(f, like)
    axes = tuple(range(f.ndim)) if axis is None else normalize_axis_tuple(axis, f.ndim)
    if not varargs:
        dx = [1.0] * len(axes)
    elif len(varargs) == 1 and ndim_of(varargs[0]) == 0:
        dx = list(varargs) * len(axes)
    elif len(varargs) == len(axes):
        dx = [_spacing(h, f.shape[ax]) for h, ax in zip(varargs, axes)]
    else:
        raise TypeError("invalid number of arguments")
    if edge_order > 2:
        raise ValueError("'edge_order' greater than 2 not supported")
    if f.dtype == np.bool_:
        raise TypeError("numpy boolean subtract, the `-` operator, is not supported, use the "
                        "bitwise_xor, the `^` operator, or the logical_xor function instead.")
    otype = f.dtype if f.dtype.kind in "fc" else _F64   # integers: float64, as NumPy
    f = A.to(f, otype)
    outs = [A.to(_grad_axis(f, ax, h, edge_order), otype) for ax, h in zip(axes, dx)]
    return outs[0] if len(axes) == 1 else tuple(outs)


NUMPY_FUNCTIONS = {f: checked(f, impl) for f, impl in {
    np.linspace: _linspace, np.diff: _diff, np.gradient: _gradient, np.meshgrid: _meshgrid,
}.items()}
