"""``np.pad`` on traced arrays and tensors.

Contract
- ``NUMPY_FUNCTIONS`` (behind ``checked``) is what ``tracer/numpy_protocol.py``
  merges into its table.
- NumPy's signature, checks, messages and values (``tracer/numpy_args.py``'s
  contract). NumPy pads axis after axis, each axis a map of the lines along
  it, so each axis is done on its own, by registered ops (gradients through
  them): edge / wrap / reflect / symmetric select source indices with
  ``index_select`` (``np.pad`` of an ``arange`` gives them, at any width, by
  NumPy's own rules); constant (and ``empty``, as zeros: NumPy leaves those
  undefined) places the array with ``slice_backward`` and fills with ``where``
  (a traced scalar ``constant_values`` too, differentiated); ``mean`` is the
  mean of the ``stat_length`` window (rounded for integers); ``linear_ramp``
  is the traced ``np.linspace`` from the end value to the edge; odd reflection
  follows NumPy's rounds (``2 * edge - mirrored chunk``, the padded part
  reused when the width exceeds the axis). maximum / minimum / median and
  callable modes raise ``UnsupportedError``.
"""
from __future__ import annotations

import numpy as np

from gradjit.tracer.api import ArrayOps as A
from gradjit.tracer.api import where as _where
from gradjit.tracer.methods_index import cat
from gradjit.tracer.methods_scatter import pad as _torch_pad
from gradjit.tracer.numpy_args import along, checked, is_obj, unsupported
from gradjit.tracer.numpy_grids import _linspace


def _pairs(x, ndim, as_index=False):
    """NumPy's ``_as_pairs``: ``x`` as ``ndim`` (before, after) pairs."""
    if x is None:
        return [(None, None)] * ndim
    x = np.array(x)
    if as_index:
        x = np.round(x).astype(np.intp, copy=False)
        if x.size and x.min() < 0:
            raise ValueError("index can't contain negative values")
    if x.ndim < 3 and x.size == 1:
        return [(x.ravel()[0],) * 2] * ndim
    if x.ndim < 3 and x.size == 2 and x.shape != (2, 1):
        return [tuple(x.ravel())] * ndim
    return [tuple(p) for p in np.broadcast_to(x, (ndim, 2)).tolist()]


def _pad_width(pad_width, ndim):
    if isinstance(pad_width, dict):   # NumPy 2.3+: {axis: width or (before, after)}
        seq = [(0, 0)] * ndim
        for ax, w in pad_width.items():
            seq[ax] = (w, w) if isinstance(w, int) else tuple(w)
        pad_width = seq
    if np.asarray(pad_width).dtype.kind != "i":
        raise TypeError("`pad_width` must be of integral type.")
    return [(int(lo), int(hi)) for lo, hi in _pairs(pad_width, ndim, as_index=True)]


def _pad_constant(y, d, lo, hi, values):
    n, nd = y.shape[d], y.ndim
    flat = (0, 0) * (nd - 1 - d) + (lo, hi)   # torch's pad order: from the last dim back
    y = _torch_pad(y, flat)
    for side, width, v in ((0, lo, values[0]), (1, hi, values[1])):
        if not width:
            continue
        mask = np.zeros(n + lo + hi, np.bool_)
        mask[slice(0, lo) if side == 0 else slice(lo + n, None)] = True
        v = A.to(v, y.dtype) if is_obj(v) else y._const(np.asarray(v).astype(y.dtype))
        y = _where(y._const(mask.reshape((-1,) + (1,) * (nd - 1 - d))), v, y)
    return y


def _pad_mean(y, d, lo, hi, lengths):
    """Each side: the mean of the first / last ``stat_length`` values of the line (all of
    it by default), rounded for integer arrays, as NumPy's ``_get_stats``."""
    n = y.shape[d]
    x = y if y.dtype.kind == "f" else A.to(y, np.float64)
    parts = []
    for first, width, length in ((True, lo, lengths[0]), (False, hi, lengths[1])):
        m = n if length is None or length > n else int(length)
        stat = A.mean(along(x, d, slice(0, m) if first else slice(n - m, n)), d, True)
        stat = stat if y.dtype.kind == "f" else A.to(A.round(stat), y.dtype)
        parts.append(A.expand(stat, y.shape[:d] + (width,) + y.shape[d + 1:]))
    return cat([parts[0], y, parts[1]], d)


def _pad_ramp(y, d, lo, hi, ends):
    """Each side: ``np.linspace`` from the end value to the edge (endpoint excluded)."""
    n = y.shape[d]
    left = _linspace(ends[0], A.squeeze(along(y, d, slice(0, 1)), d), lo, endpoint=False,
                     dtype=y.dtype, axis=d)
    right = _linspace(ends[1], A.squeeze(along(y, d, slice(n - 1, n)), d), hi, endpoint=False,
                      dtype=y.dtype, axis=d)
    return cat([left, y, A.flip(right, d)], d)


def _pad_odd(y, d, lo, hi, include_edge):
    """Odd reflection, NumPy's rounds (``_set_reflect_both``): each round mirrors at most
    the filled part about its current edge value e as ``2 * e - chunk``."""
    n = y.shape[d]
    while lo > 0 or hi > 0:
        filled = y.shape[d]
        if include_edge:
            old, off = filled // n * n, 1
        else:
            old, off = (filled - 1) // (n - 1) * (n - 1), 0
        parts = [y]
        if lo > 0:
            k = min(old, lo)
            chunk = A.flip(along(y, d, slice(1 - off, k - off + 1)), d)
            parts.insert(0, A.sub(A.mul(along(y, d, slice(0, 1)), 2), chunk))
            lo -= k
        if hi > 0:
            k = min(old, hi)
            chunk = A.flip(along(y, d, slice(filled - 1 + off - k, filled - 1 + off)), d)
            parts.append(A.sub(A.mul(along(y, d, slice(filled - 1, filled)), 2), chunk))
            hi -= k
        y = cat(parts, d)
    return y


_INDEX_MODES = ("edge", "wrap", "reflect", "symmetric")
_ALLOWED = {"empty": [], "edge": [], "wrap": [], "constant": ["constant_values"],
            "linear_ramp": ["end_values"], "maximum": ["stat_length"], "mean": ["stat_length"],
            "median": ["stat_length"], "minimum": ["stat_length"],
            "reflect": ["reflect_type"], "symmetric": ["reflect_type"]}
_PAD_KW = {"constant": "constant_values", "linear_ramp": "end_values", "mean": "stat_length"}


def _pad(array, pad_width, mode="constant", **kwargs):
    if callable(mode):
        unsupported("np.pad with a callable mode")
    nd = array.ndim
    cv = kwargs.get("constant_values")
    traced_cv = is_obj(cv)
    try:   # NumPy's checks of the mode and its keywords, NumPy's words
        bad = set(kwargs) - set(_ALLOWED[mode])
    except KeyError:
        raise ValueError(f"mode '{mode}' is not supported") from None
    if bad:
        raise ValueError(f"unsupported keyword arguments for mode '{mode}': {bad}")
    if mode in ("maximum", "minimum", "median"):
        unsupported(f"np.pad(..., mode={mode!r})")
    if traced_cv and cv.ndim:
        unsupported("np.pad with traced constant_values of more than one value")
    widths = _pad_width(pad_width, nd)
    if mode == "empty":   # undefined values in NumPy: zeros here
        mode, kwargs = "constant", {}
    reflect_type = kwargs.get("reflect_type", "even")
    key = _PAD_KW.get(mode)
    per_axis = (None if kwargs.get(key) is None else [(cv, cv)] * nd if traced_cv
                else _pairs(kwargs[key], nd, as_index=key == "stat_length"))
    y = array
    for d, (lo, hi) in enumerate(widths):
        if not (lo or hi):
            continue
        if mode == "constant":
            y = _pad_constant(y, d, lo, hi, per_axis[d] if per_axis else (0, 0))
            continue
        if y.shape[d] == 0:
            raise ValueError(f"can't extend empty axis {d} using modes other than 'constant' or "
                             f"'empty'")
        if mode in _INDEX_MODES and reflect_type != "odd":   # NumPy: anything else is even
            # the source index of each output position, NumPy's rules at any width
            y = A.index_select(y, d, np.pad(np.arange(y.shape[d]), (lo, hi), mode=mode))
        elif mode in ("reflect", "symmetric"):   # odd; a singleton is edge-padded (NumPy's legacy)
            y = (A.index_select(y, d, np.zeros(lo + hi + 1, np.int64)) if y.shape[d] == 1
                 else _pad_odd(y, d, lo, hi, mode == "symmetric"))
        elif mode == "mean":
            y = _pad_mean(y, d, lo, hi, per_axis[d] if per_axis else (None, None))
        else:
            y = _pad_ramp(y, d, lo, hi, per_axis[d] if per_axis else (0, 0))
    return y


NUMPY_FUNCTIONS = {np.pad: checked(np.pad, _pad)}
