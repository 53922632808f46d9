"""Scatter and placement methods (mixed into ``ArrayOps``): writes at given positions
(scatter, index_put, index_add), selections and placements through an index computed
here (masked_select, repeat_interleave, diag, pad), and a few axis methods (rot90,
moveaxis, ravel, swapdims).

Contract
- ``ScatterMethods`` gives ``Tensor`` and ``Tracer`` the torch-named methods
  ``scatter``, ``index_put``, ``index_add``, ``scatter_add``, ``masked_select``,
  ``nonzero`` / ``argwhere`` (of concrete tensors),
  ``rot90``, ``repeat_interleave``, ``diag``, ``diag_embed``, ``moveaxis`` /
  ``movedim``, ``ravel``, ``swapdims``; the module function ``pad`` is
  ``torch.nn.functional.pad`` (modes constant, reflect, replicate, circular).
- No ops and no yaml entries of their own: every method is a composite of
  registered ops, differentiated through its parts:
  rot90 is flip + transpose; repeat_interleave, reflect / replicate / circular
  pad and masked_select are ``index_select`` with an index computed here;
  diag / diag_embed place the vector with ``index_add`` into zeros (a 2-D
  ``diag`` is ``diagonal``); constant pad is a ``slice_backward`` placement
  plus a constant fill (negative pads crop); moveaxis is ``permute``;
  ``index_add`` / ``scatter_add`` are the ops of ``tracer/ops_index.py``.
- ``scatter`` (src tensor or scalar ``value``) and ``index_put`` with
  ``accumulate=False`` are out of place, as torch: the result is ``self`` with
  the written positions replaced; written as ``where(mask, index_add(zeros,
  positions, values), self)`` over a flat view, so the gradient to ``self`` is
  zero at the written positions and the gradient to ``src`` / ``values`` is the
  output gradient gathered there. On repeated targets the last write wins (torch
  leaves the choice undefined); the overwritten duplicates get no gradient.
- Indices that decide positions (scatter / index_put indices, masked_select's
  mask, repeat_interleave's repeats) need concrete values: a traced one raises
  a ``GradjitError`` naming the method. ``index_add`` / ``scatter_add`` also
  take traced indices (bounds are checked only for concrete ones).
"""
from __future__ import annotations

import numbers

import numpy as np

from gradjit.tracer.dispatch import apply, norm_dim
from gradjit.tracer.methods_index import _check_bounds, _concrete, _is_obj, _slice
from gradjit.tracer.registry import GradjitError, ShapeError, user_site


def _need_concrete(x, what, method):
    c = _concrete(x)
    if c is None:
        raise GradjitError(f"{method}: a traced {what}: the positions written or selected would "
                           f"depend on traced values; pass the {what} as a constant array",
                           user_site())
    return c


def _zeros(like, shape):
    return like._const(np.zeros(shape, like.dtype))


def _place_flat(self, flat_pos, vals, op):
    """``self`` (flattened) with positions ``flat_pos`` overwritten by ``vals`` (last wins)."""
    from gradjit.tracer.api import where
    n = int(np.prod(self.shape))
    flat_pos = np.asarray(flat_pos, np.int64).reshape(-1)
    vals = vals.to(self.dtype).reshape(-1)
    if flat_pos.size == 0:
        return self
    targets, first_rev = np.unique(flat_pos[::-1], return_index=True)
    keep = (len(flat_pos) - 1 - first_rev).astype(np.int64)   # last occurrence of each target
    if len(keep) != len(flat_pos) or np.any(keep != np.arange(len(keep))):
        vals = apply("index_select.default", [vals, self._const(keep)], {"dim": 0})
    placed = apply("index_add.default", [_zeros(self, (n,)), self._const(targets.astype(np.int64)),
                                         vals], {"dim": 0})
    mask = np.zeros(n, np.bool_)
    mask[targets] = True
    return where(self._const(mask), placed, self.reshape(-1)).reshape(self.shape)


def _pad_index(n, lo, hi, mode):
    j = np.arange(-lo, n + hi)
    if mode == "replicate":
        return np.clip(j, 0, n - 1)
    if mode == "circular":
        return j % n
    if max(lo, hi) >= n:
        raise ValueError(f"pad: padding size should be less than the corresponding input "
                         f"dimension for mode 'reflect', got padding ({lo}, {hi}) for size {n}")
    j = np.abs(j)
    return np.where(j >= n, 2 * (n - 1) - j, j)


def pad(input, pad, mode="constant", value=None):
    """``torch.nn.functional.pad``: ``pad`` lists (left, right) pairs from the last dim back."""
    pad = tuple(int(p) for p in pad)
    if len(pad) % 2 or len(pad) // 2 > input.ndim:
        raise ValueError(f"pad: padding length {len(pad)} must be even and at most twice the "
                         f"number of dims ({input.ndim}) of the input of shape {tuple(input.shape)}")
    if mode not in ("constant", "reflect", "replicate", "circular"):
        raise NotImplementedError(f"pad: mode {mode!r} (supported: constant, reflect, replicate, "
                                  f"circular)")
    if mode != "constant" and value:
        raise ValueError(f"pad: padding mode {mode!r} doesn't take in value argument")
    y = input
    pairs = [(input.ndim - 1 - k, pad[2 * k], pad[2 * k + 1]) for k in range(len(pad) // 2)]
    inner = []
    for d, lo, hi in pairs:
        if lo < 0 or hi < 0:   # negative padding crops
            n = y.shape[d]
            y = _slice(y, d, max(-lo, 0), n - max(-hi, 0), 1)
            lo, hi = max(lo, 0), max(hi, 0)
        n = y.shape[d]
        if not lo and not hi:
            continue
        if mode == "constant":
            size = tuple(s + lo + hi if k == d else s for k, s in enumerate(y.shape))
            y = apply("slice_backward.default", [y], {"input_sizes": size, "dim": d, "start": lo,
                                                      "end": lo + n, "step": 1})
            inner.append((d, lo, lo + n))
        else:
            y = y.index_select(d, _pad_index(n, lo, hi, mode))
    if mode == "constant" and value and inner:
        fill = np.full(y.shape, value, y.dtype)
        inside = [slice(None)] * y.ndim
        for d, a, b in inner:
            inside[d] = slice(a, b)
        fill[tuple(inside)] = 0
        y = y + y._const(fill)
    return y


def _moveaxis_perm(ndim, source, destination, name):
    src = (source,) if isinstance(source, numbers.Integral) else tuple(source)
    dst = (destination,) if isinstance(destination, numbers.Integral) else tuple(destination)
    if len(src) != len(dst):
        raise ValueError(f"{name}: source {src} and destination {dst} must have the same number "
                         f"of elements")
    src = [norm_dim(int(s), ndim, name) for s in src]
    dst = [norm_dim(int(s), ndim, name) for s in dst]
    if len(set(src)) != len(src) or len(set(dst)) != len(dst):
        raise ValueError(f"{name}: repeated dim in source {src} or destination {dst}")
    order = [k for k in range(ndim) if k not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return order


class ScatterMethods:
    __slots__ = ()

    # -- scatter family ------------------------------------------------------------
    def index_add(self, dim, index, source, *, alpha=1):
        d = norm_dim(int(dim), max(self.ndim, 1), "index_add")
        c = _concrete(index)
        if c is not None:
            index = self._const(_check_bounds(c.reshape(-1), self.shape[d] if self.ndim else 1, d,
                                              self.shape))
        source = source if _is_obj(source) else self._const(np.asarray(source, self.dtype))
        if self.ndim == 0:
            return apply("index_add.default", [self.reshape(1), index.reshape(1),
                                               source.reshape(1)], {"dim": 0, "alpha": alpha}
                         ).reshape(())
        return apply("index_add.default", [self, index, source.to(self.dtype)],
                     {"dim": d, "alpha": alpha})

    def scatter_add(self, dim, index, src):
        d = norm_dim(int(dim), max(self.ndim, 1), "scatter_add")
        c = _concrete(index)
        if c is not None:
            index = self._const(_check_bounds(c, self.shape[d] if self.ndim else 1, d, self.shape))
        src = src if _is_obj(src) else self._const(np.asarray(src, self.dtype))
        if src.ndim == len(index.shape):   # only src's leading index-shaped block is read
            for k, n in enumerate(index.shape):
                src = _slice(src, k, 0, n, 1)
        return apply("scatter_add.default", [self, index, src.to(self.dtype)], {"dim": d})

    def scatter(self, dim, index, src=None, *, value=None, reduce=None):
        if src is None and value is None:
            raise TypeError("scatter: expected src (a tensor) or value (a number)")
        if src is not None and value is None and not _is_obj(src) and np.ndim(src) == 0:
            src, value = None, src
        if reduce == "add":   # torch's (deprecated) reduce: scatter_add's values
            if src is None:
                src = self._const(np.full(np.shape(_need_concrete(index, "index", "scatter")),
                                          value, self.dtype))
            return self.scatter_add(dim, index, src)
        if reduce is not None:
            raise NotImplementedError(f"scatter: reduce={reduce!r} is not supported (only "
                                      f"reduce='add', which is scatter_add)")
        d = norm_dim(int(dim), max(self.ndim, 1), "scatter")
        idx = _need_concrete(index, "index", "scatter")
        if self.ndim == 0:
            return self.reshape(1).scatter(0, idx.reshape(1), value=value,
                                           src=None if src is None else src.reshape(1)).reshape(())
        if idx.ndim != self.ndim or any(i > s for k, (i, s) in enumerate(zip(idx.shape, self.shape))
                                        if k != d):
            raise ShapeError(f"scatter: index of shape {tuple(idx.shape)} does not fit self of "
                             f"shape {tuple(self.shape)} along dim {d}", user_site())
        idx = _check_bounds(idx, self.shape[d], d, self.shape)
        grid = list(np.indices(idx.shape, sparse=True))
        grid[d] = idx
        pos = np.arange(int(np.prod(self.shape))).reshape(self.shape)[tuple(grid)]
        if src is None:
            vals = self._const(np.full(idx.shape, value, self.dtype))
        else:
            src = src if _is_obj(src) else self._const(np.asarray(src, self.dtype))
            if src.ndim != idx.ndim or any(i > s for i, s in zip(idx.shape, src.shape)):
                raise ShapeError(f"scatter: index of shape {tuple(idx.shape)} does not fit src of "
                                 f"shape {tuple(src.shape)}", user_site())
            vals = src
            for k, n in enumerate(idx.shape):
                vals = _slice(vals, k, 0, n, 1)
        return _place_flat(self, pos, vals, "scatter")

    def index_put(self, indices, values, accumulate=False):
        """Functional ``torch.index_put``: ``indices`` is a tuple of index arrays (or masks)."""
        idx = tuple(_need_concrete(i, "index", "index_put") if i is not None else None
                    for i in (indices if isinstance(indices, (tuple, list)) else (indices,)))
        idx = tuple(slice(None) if i is None else i for i in idx)
        pos = np.arange(int(np.prod(self.shape))).reshape(self.shape)[idx]
        values = values if _is_obj(values) else self._const(np.asarray(values, self.dtype))
        values = values.to(self.dtype).expand(np.shape(pos))
        if accumulate:
            flat = self.reshape(-1)
            return apply("index_add.default", [flat, self._const(np.asarray(pos, np.int64)
                                                                 .reshape(-1)),
                                               values.reshape(-1)], {"dim": 0}).reshape(self.shape)
        return _place_flat(self, pos, values, "index_put")

    def masked_select(self, mask):
        m = _need_concrete(mask, "mask", "masked_select")
        if m.dtype != np.bool_:
            raise TypeError(f"masked_select: expected a boolean mask, got dtype {m.dtype.name}")
        try:
            shape = tuple(np.broadcast_shapes(tuple(self.shape), m.shape))
        except ValueError:
            raise ShapeError(f"masked_select: mask of shape {m.shape} does not broadcast with "
                             f"the input of shape {tuple(self.shape)}", user_site()) from None
        flat = np.flatnonzero(np.broadcast_to(m, shape)).astype(np.int64)
        return self.expand(shape).reshape(-1).index_select(0, flat)

    def nonzero(self, as_tuple=False):
        """torch's ``x.nonzero()``: the int64 positions (n, ndim) of the nonzero elements in
        C order; ``as_tuple``: one 1-D tensor per dimension. Of a concrete tensor only: a
        traced one's count would depend on its values."""
        c = _need_concrete(self, "tensor", "nonzero")
        pos = np.argwhere(c).astype(np.int64)
        if not as_tuple:
            return self._const(pos)
        cols = pos.T if c.ndim else [np.zeros(len(pos), np.int64)]   # (torch's 0-d: one dim)
        return tuple(self._const(np.ascontiguousarray(p)) for p in cols)

    def argwhere(self):
        """torch's ``x.argwhere()``: ``x.nonzero()``."""
        return ScatterMethods.nonzero(self)

    # -- shape ---------------------------------------------------------------------
    def rot90(self, k=1, dims=(0, 1)):
        dims = tuple(dims)
        if len(dims) != 2:
            raise ValueError(f"rot90: expected total rotation dims == 2, but got dims = {len(dims)}")
        if self.ndim < 2:
            raise ShapeError(f"rot90: expected total dims >= 2, but got total dims = {self.ndim}",
                             user_site())
        d0, d1 = norm_dim(int(dims[0]), self.ndim, "rot90"), norm_dim(int(dims[1]), self.ndim,
                                                                       "rot90")
        if d0 == d1:
            raise ValueError(f"rot90: expected rotation dims to be different, but got dim0 = {d0} "
                             f"and dim1 = {d1}")
        k = int(k) % 4
        if k == 0:
            return self
        if k == 2:
            return self.flip(d0, d1)
        if k == 1:
            return self.flip(d1).swapaxes(d0, d1)
        return self.flip(d0).swapaxes(d0, d1)

    def repeat_interleave(self, repeats, dim=None, *, output_size=None):
        x = self.reshape(-1) if dim is None else self
        d = 0 if dim is None else norm_dim(int(dim), self.ndim, "repeat_interleave")
        r = _need_concrete(repeats, "repeats", "repeat_interleave") \
            if _is_obj(repeats) else np.asarray(repeats)
        n = x.shape[d]
        if r.ndim and r.shape != (n,) and r.shape != (1,):
            raise ValueError(f"repeat_interleave: repeats must have the same size as input along "
                             f"dim {d} ({n}), got shape {r.shape}")
        if np.any(r < 0):
            raise ValueError("repeat_interleave: repeats can not be negative")
        idx = np.repeat(np.arange(n, dtype=np.int64), r.reshape(-1) if r.ndim else int(r))
        if output_size is not None and int(output_size) != len(idx):
            raise ValueError(f"repeat_interleave: output_size {output_size} does not match the "
                             f"{len(idx)} repeated elements")
        return x.index_select(d, idx)

    def diag_embed(self, offset=0, dim1=-2, dim2=-1):
        if self.ndim == 0:
            raise ShapeError("diag_embed: expected an input with at least 1 dimension", user_site())
        offset = int(offset)
        nd = self.ndim + 1
        d1, d2 = norm_dim(int(dim1), nd, "diag_embed"), norm_dim(int(dim2), nd, "diag_embed")
        if d1 == d2:
            raise ValueError(f"diag_embed: diagonal dimensions cannot be identical {d1}, {d2}")
        n = self.shape[-1]
        m = n + abs(offset)
        batch = tuple(self.shape[:-1])
        b = int(np.prod(batch))
        i = np.arange(n, dtype=np.int64)
        pos = (i + max(-offset, 0)) * m + i + max(offset, 0)
        y = apply("index_add.default", [_zeros(self, (b, m * m)), self._const(pos),
                                        self.reshape(b, n)], {"dim": 1})
        y = y.reshape(batch + (m, m))
        return y.moveaxis((nd - 2, nd - 1), (d1, d2))

    def diag(self, diagonal=0):
        if self.ndim == 1:
            return self.diag_embed(diagonal)
        if self.ndim == 2:
            return self.diagonal(diagonal)
        raise ShapeError(f"diag: expected a 1-D or 2-D input, got shape {tuple(self.shape)}",
                         user_site())

    def moveaxis(self, source, destination):
        return self.permute(_moveaxis_perm(self.ndim, source, destination, "moveaxis"))

    movedim = moveaxis

    def ravel(self):
        return self.reshape(-1)

    def swapdims(self, dim0, dim1):
        return self.swapaxes(dim0, dim1)


# -- NumPy spellings (merged into tracer/numpy_index.py's table) ---------------------------------
def _np_repeat(a, repeats, axis=None):
    return a.repeat_interleave(repeats, axis)


def _np_diag(v, k=0):
    return v.diag(k)


NUMPY_FUNCTIONS = {
    np.rot90: lambda m, k=1, axes=(0, 1): m.rot90(k, axes),
    np.repeat: _np_repeat,
    np.diag: _np_diag,
    np.moveaxis: lambda a, source, destination: a.moveaxis(source, destination),
    np.swapaxes: lambda a, axis1, axis2: a.swapaxes(axis1, axis2),
}
