"""Tensor methods of the indexing and shape family (mixed into ``ArrayOps``), plus ``cat`` etc.

Contract
- ``IndexMethods`` gives ``Tensor`` and ``Tracer`` ``__getitem__`` and the
  torch-named methods over ``tracer/ops_index.py``; module functions ``cat``,
  ``stack`` (and the method spellings) take sequences of tensors.
- ``__getitem__`` follows NumPy (tensors: torch, where the two differ: an int
  beside an integer array is basic indexing, applied first, not an advanced index
  whose dim decides where the result dims go): ints, slices (any step, negative included),
  ``None``, ``Ellipsis`` give views (``slice.Tensor``, ``squeeze.dim``,
  ``unsqueeze``); integer arrays / tensors and boolean masks (advanced
  indexing, broadcast together; the result dims go where NumPy puts them)
  become one ``index_select`` over the advanced dims flattened
  (``tracer/advanced_index.py``). Boolean masks need concrete values (the
  result's shape depends on them): a traced mask raises a ``GradjitError``
  pointing at ``where``. Concrete indices are bounds-checked here
  (``IndexError`` naming the shape and the user's line), traced ones where
  they are read, at run time (``IndexBoundsError``, ``tracer/ops_index.py``).
- Composites (no ops of their own; each differentiated through its parts):
  cat is one ``cat.default`` node; stack is unsqueeze + cat;
  split / chunk / unbind / narrow / flip are slice views; roll is a cat of two
  slices; repeat / tile are view + expand + view; tril / triu are ``where``
  with a constant mask; diagonal is a strided slice of a flattened view;
  take_along_dim is expand + gather; masked_fill is ``where``.
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from gradjit.tracer.advanced_index import _check_bounds, _concrete, _is_obj
from gradjit.tracer.advanced_index import advanced as _advanced
from gradjit.tracer.dispatch import NUMPY_CALL, apply, common_dtype, norm_dim, sizes_arg
from gradjit.tracer.registry import GradjitError, ShapeError, user_site


def _slice(x, dim, start, end, step):
    n = x.shape[dim]
    if start == 0 and step == 1 and end is not None and end >= n:
        return x
    return apply("slice.Tensor", [x], {"dim": dim, "start": start, "end": end, "step": step})


def _norm_slice(s, n):
    start, stop, step = s.indices(n)
    if step < 0 and stop < 0:
        stop = None
    return start, stop, step


def _expand_items(x, index):
    """Index items with Ellipsis expanded and bool masks turned into int arrays."""
    items = []
    for it in (index if isinstance(index, tuple) else (index,)):
        if it is None or it is Ellipsis or isinstance(it, slice):
            items.append(it)
        elif isinstance(it, (bool, np.bool_)):
            raise GradjitError("indexing with a Python bool is not supported", user_site())
        elif isinstance(it, numbers.Integral):
            items.append(int(it))
        else:
            dt = np.dtype(it.dtype) if _is_obj(it) else np.asarray(it).dtype
            if isinstance(it, (list, tuple)) and np.size(it) == 0:
                # an empty list is an integer index in NumPy (and torch), not float64's
                it, dt = np.zeros(np.shape(it), np.int64), np.dtype(np.int64)
            if dt == np.bool_:
                arr = _concrete(it)
                if arr is None:
                    raise GradjitError("indexing with a traced boolean mask: the result's shape "
                                       "would depend on the mask's values; use gj.where(mask, x, 0) "
                                       "instead, or pass the mask as a constant array", user_site())
                items.append(("mask", arr))
            elif dt.kind in "iu":
                items.append(("array", it))
            else:
                raise IndexError(f"tensors used as indices must be integer or boolean, got dtype "
                                 f"{dt.name}\n  at {user_site()}")
    used = sum(1 if not isinstance(it, tuple) else (it[1].ndim if it[0] == "mask" else 1)
               for it in items if it is not None and it is not Ellipsis)
    if used > x.ndim:
        raise IndexError(f"too many indices for tensor of dimension {x.ndim} (shape "
                         f"{tuple(x.shape)}): {used} were indexed\n  at {user_site()}")
    if sum(it is Ellipsis for it in items) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    out = []
    for it in items:
        if it is Ellipsis:
            out.extend([slice(None)] * (x.ndim - used))
        elif isinstance(it, tuple) and it[0] == "mask":
            d = sum(1 for o in out if o is not None)
            m = it[1]
            if tuple(m.shape) != tuple(x.shape[d:d + m.ndim]):
                raise IndexError(f"the shape of the mask {tuple(m.shape)} does not match the shape "
                                 f"{tuple(x.shape[d:d + m.ndim])} of the indexed tensor "
                                 f"{tuple(x.shape)} at dim {d}\n  at {user_site()}")
            out.extend(("array", a) for a in np.nonzero(m))
        else:
            out.append(it)
    if Ellipsis not in items:
        out.extend([slice(None)] * (x.ndim - used))
    return out


def getitem(x, index):
    items = _expand_items(x, index)
    # An int beside an integer array: NumPy counts it as one more advanced index (its dim
    # takes part in where the result dims go); torch applies ints first, as basic indexing
    # (a (3, 4, 5) tensor's [1, :, [1, 4, 4]] is (3, 4) in NumPy, (4, 3) in torch)
    advanced = ((x._numpy_indexing or NUMPY_CALL.depth > 0)
                and any(isinstance(it, tuple) for it in items))
    y, d, adv = x, 0, []
    for it in items:
        if it is None:
            y = y.unsqueeze(d)
            d += 1
        elif isinstance(it, slice):
            y = _slice(y, d, *_norm_slice(it, y.shape[d]))
            d += 1
        elif isinstance(it, int) and not advanced:
            n = y.shape[d]
            if not -n <= it < n:
                raise IndexError(f"index {it} is out of bounds for dimension {d} with size {n} "
                                 f"(tensor of shape {tuple(x.shape)})\n  at {user_site()}")
            y = apply("squeeze.dim", [_slice(y, d, it % n, it % n + 1, 1)], {"dim": d})
        else:
            adv.append((d, np.asarray(it) if isinstance(it, int) else it[1]))
            d += 1
    return _advanced(y, adv) if adv else y


def _tensors(seq, op):
    seq = list(seq)
    if not seq:
        raise ValueError(f"{op}: expected a non-empty sequence of tensors")
    like = next((t for t in seq if _is_obj(t)), None)
    if like is None:
        raise TypeError(f"{op}: no gradjit tensor among the arguments")
    seq = [t if _is_obj(t) else like._const(np.asarray(t)) for t in seq]
    dt = common_dtype(like, seq)
    return [t.to(dt) for t in seq]


def cat(tensors, dim=0):
    """``torch.cat``: one ``cat.default`` node over every part (its gradient: one slice each)."""
    ts = _tensors(tensors, "cat")
    ref = ts[0]
    d = norm_dim(int(dim), ref.ndim, "cat")
    if ref.ndim == 0:
        raise ShapeError("cat: zero-dimensional tensor cannot be concatenated", user_site())
    for t in ts:
        if t.ndim != ref.ndim or any(a != b for k, (a, b) in enumerate(zip(t.shape, ref.shape))
                                     if k != d):
            raise ShapeError(f"cat: sizes of tensors must match except in dimension {d}; got "
                             f"shapes {', '.join(str(tuple(t.shape)) for t in ts)}", user_site())
    return apply("cat.default", ts, {"dim": d})   # (one part too: a new array, as torch)


def stack(tensors, dim=0):
    ts = _tensors(tensors, "stack")
    if any(t.shape != ts[0].shape for t in ts):
        raise ShapeError(f"stack: expects each tensor to be equal size, but got shapes "
                         f"{', '.join(str(tuple(t.shape)) for t in ts)}", user_site())
    d = norm_dim(int(dim), ts[0].ndim + 1, "stack")
    return cat([t.unsqueeze(d) for t in ts], d)


def _same_device(x, index, op):
    """torch's index_select / gather take the index on the tensor's device (indexing,
    ``x[idx]``, moves a CPU index along, as torch's): the index's values are read on the
    host here, so a mismatch would otherwise pass unseen."""
    on = getattr(x, "is_cuda", False)
    if _is_obj(index) and len(index.shape) and getattr(index, "is_cuda", on) != on:
        devs = "cuda:0 and cpu" if on else "cpu and cuda:0"
        raise RuntimeError(f"Expected all tensors to be on the same device, but found at least "
                           f"two devices, {devs}! (op {op}: the index of shape "
                           f"{tuple(index.shape)} is on {'cuda:0' if not on else 'cpu'}, the "
                           f"tensor of shape {tuple(x.shape)} on {'cuda:0' if on else 'cpu'})")


class IndexMethods:
    __slots__ = ()

    def __getitem__(self, index):
        return getitem(self, index)

    def narrow(self, dim, start, length):
        d = norm_dim(int(dim), self.ndim, "narrow")
        n = self.shape[d]
        start = int(start) + (n if start < 0 else 0)
        if not (0 <= start and 0 <= length and start + length <= n):
            raise IndexError(f"narrow: start ({start}) + length ({length}) exceeds dimension size "
                             f"({n}) of a tensor of shape {tuple(self.shape)}\n  at {user_site()}")
        return _slice(self, d, start, start + int(length), 1)

    def select(self, dim, index):
        d = norm_dim(int(dim), self.ndim, "select")
        return self[(slice(None),) * d + (int(index),)]

    def index_select(self, dim, index):
        d = norm_dim(int(dim), self.ndim, "index_select")
        _same_device(self, index, "index_select")
        c = _concrete(index)
        if c is not None:
            if c.dtype.kind not in "iu":
                raise TypeError(f"index_select: index must be an integer tensor, got {c.dtype.name}")
            index = _check_bounds(c.reshape(-1), max(self.shape[d], 0) if self.ndim else 1, d,
                                  self.shape)
        elif index.ndim == 0:
            index = index.reshape(1)
        x = self.reshape(1) if self.ndim == 0 else self
        out = apply("index_select.default", [x, index], {"dim": d})
        return out.reshape(()) if self.ndim == 0 else out

    def gather(self, dim, index):
        d = norm_dim(int(dim), self.ndim, "gather")
        _same_device(self, index, "gather")
        c = _concrete(index)
        if c is not None:
            index = _check_bounds(c, self.shape[d] if self.ndim else 1, d, self.shape)
        if self.ndim == 0:
            return apply("gather.default", [self.reshape(1), index.reshape(1)],
                         {"dim": 0}).reshape(())
        return apply("gather.default", [self, index], {"dim": d})

    def take_along_dim(self, indices, dim=None):
        indices = indices if _is_obj(indices) else np.asarray(indices)
        if dim is None:
            return self.reshape(-1).gather(0, indices.reshape(-1))
        d = norm_dim(int(dim), self.ndim, "take_along_dim")
        if len(indices.shape) != self.ndim:
            raise ShapeError(f"take_along_dim: indices of shape {tuple(indices.shape)} need the "
                             f"same rank as the input of shape {tuple(self.shape)}", user_site())
        shape = tuple(np.broadcast_shapes(tuple(self.shape[:d] + (1,) + self.shape[d + 1:]),
                                          tuple(indices.shape[:d] + (1,) + indices.shape[d + 1:])))
        x = self.expand(shape[:d] + (self.shape[d],) + shape[d + 1:])
        ishape = shape[:d] + (indices.shape[d],) + shape[d + 1:]
        c = _concrete(indices)
        idx = np.broadcast_to(c, ishape) if c is not None else indices.expand(ishape)
        return x.gather(d, idx)

    def take(self, index):
        index = index if _is_obj(index) else np.asarray(index)
        c = _concrete(index)
        shape = tuple(index.shape)
        flat = c.reshape(-1) if c is not None else index.reshape(-1)
        return self.reshape(-1).index_select(0, flat).reshape(shape)

    def masked_fill(self, mask, value):
        from gradjit.tracer.api import where
        if np.dtype(mask.dtype) != np.bool_:
            raise TypeError(f"masked_fill: expected a boolean mask, got dtype {np.dtype(mask.dtype).name}")
        return where(mask, value, self)

    def _minmax_dim(self, op, dim, keepdim):
        d = norm_dim(int(dim), self.ndim, op)
        return apply(f"{op}.dim", [self], {"dim": d, "keepdim": bool(keepdim)})

    def split(self, split_size_or_sections=None, dim=0, *, split_size=None):
        if (split_size_or_sections is None) == (split_size is None):
            raise TypeError("split() takes split_size_or_sections (or split_size=) once")
        if split_size is not None:
            split_size_or_sections = split_size
        d = norm_dim(int(dim), self.ndim, "split")
        n = self.shape[d]
        if isinstance(split_size_or_sections, numbers.Integral):
            k = int(split_size_or_sections)
            if k <= 0 and n:
                raise ValueError(f"split: split_size must be positive, got {k}")
            sizes = [min(k, n - s) for s in range(0, n, k)] if n else [0]
        else:
            sizes = [int(s) for s in split_size_or_sections]
            if sum(sizes) != n:
                raise ValueError(f"split: split sizes {sizes} do not sum to the size {n} of dim {d} "
                                 f"(tensor of shape {tuple(self.shape)})")
        out, off = [], 0
        for s in sizes:
            out.append(_slice(self, d, off, off + s, 1))
            off += s
        return tuple(out)

    def chunk(self, chunks, dim=0):
        d = norm_dim(int(dim), self.ndim, "chunk")
        return self.split(max(1, math.ceil(self.shape[d] / int(chunks))), d)

    def unbind(self, dim=0):
        d = norm_dim(int(dim), self.ndim, "unbind")
        return tuple(self.select(d, i) for i in range(self.shape[d]))

    def flip(self, *dims, **kw):
        dims = sizes_arg("flip", dims, kw.pop("dims", None), kw)
        y = self
        for d in sorted({norm_dim(int(k), self.ndim, "flip") for k in dims}):
            if y.shape[d] > 1:
                y = apply("slice.Tensor", [y], {"dim": d, "start": y.shape[d] - 1, "end": None,
                                                 "step": -1})
        return y

    def fliplr(self): return self.flip(1)
    def flipud(self): return self.flip(0)

    def roll(self, shifts, dims=None):
        if dims is None:
            return self.reshape(-1).roll(shifts, 0).reshape(self.shape)
        shifts = (shifts,) if isinstance(shifts, numbers.Integral) else tuple(shifts)
        dims = (dims,) if isinstance(dims, numbers.Integral) else tuple(dims)
        if len(shifts) != len(dims):
            raise ValueError(f"roll: shifts {shifts} and dims {dims} must have the same length")
        y = self
        for s, d in zip(shifts, dims):
            d = norm_dim(int(d), self.ndim, "roll")
            n = y.shape[d]
            s = int(s) % n if n else 0
            if s:
                y = cat([_slice(y, d, n - s, n, 1), _slice(y, d, 0, n - s, 1)], d)
        return y

    def repeat(self, *sizes):
        sizes = sizes[0] if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)) else sizes
        sizes = tuple(int(s) for s in sizes)
        if len(sizes) < self.ndim:
            raise ValueError(f"repeat: number of repeat dims ({len(sizes)}) can not be smaller than "
                             f"the number of dims of the tensor ({self.ndim})")
        shape = (1,) * (len(sizes) - self.ndim) + tuple(self.shape)
        y = self.reshape(tuple(k for s in shape for k in (1, s)))
        y = y.expand(tuple(k for r, s in zip(sizes, shape) for k in (r, s)))
        return y.reshape(tuple(r * s for r, s in zip(sizes, shape)))

    def tile(self, *dims, **kw):
        dims = sizes_arg("tile", dims, kw.pop("dims", None), kw)
        dims = tuple(int(k) for k in ((dims,) if isinstance(dims, numbers.Integral) else dims))
        return IndexMethods.repeat(self, (1,) * (self.ndim - len(dims)) + dims)

    def _tri(self, name, k, upper):
        if self.ndim < 2:
            raise ShapeError(f"{name}: input tensor must have at least 2 dimensions, got shape "
                             f"{tuple(self.shape)}", user_site())
        from gradjit.tracer.api import where
        m, n = self.shape[-2:]
        mask = ~np.tri(m, n, k - 1, dtype=bool) if upper else np.tri(m, n, k, dtype=bool)
        # (a zero of self's dtype: an int 0 made a bool mask int64, where NumPy and torch
        # keep bool: triu(ones(T, T, dtype=bool), 1) is attention's causal mask)
        return where(mask, self, self._const(np.zeros((), self.dtype)))

    def tril(self, diagonal=0): return self._tri("tril", int(diagonal), False)
    def triu(self, diagonal=0): return self._tri("triu", int(diagonal), True)

    def diagonal(self, offset=0, dim1=0, dim2=1):
        d1, d2 = norm_dim(int(dim1), self.ndim, "diagonal"), norm_dim(int(dim2), self.ndim,
                                                                      "diagonal")
        if d1 == d2:
            raise ValueError(f"diagonal: dim1 and dim2 cannot be identical, got {d1}")
        others = [d for d in range(self.ndim) if d not in (d1, d2)]
        y = self.permute(others + [d1, d2])
        m, n = y.shape[-2:]
        offset = int(offset)
        length = max(0, min(m, n - offset) if offset >= 0 else min(m + offset, n))
        start = offset if offset >= 0 else -offset * n
        y = y.reshape(y.shape[:-2] + (m * n,))
        if length == 0:
            return _slice(y, y.ndim - 1, 0, 0, 1)
        return _slice(y, y.ndim - 1, start, start + (length - 1) * (n + 1) + 1, n + 1)
