"""``x[idx] = v`` with a traced integer index (an argument of the traced function).

Contract
- ``traced_axis(x, index, Tracer)``: None when no entry of ``index`` is traced, else
  ``(basic, axis, idx)``: the index with the traced entry replaced by a full slice
  (``x[basic]`` is a view of ``x``, or ``x`` itself when it is all full slices), the axis
  of that view the traced entry indexes, and the traced entry. Supported: one traced
  integer array (any shape) or scalar among slices, Ellipsis and ints, where NumPy lays the
  indexed positions where the view has that axis (the ints and the array adjacent, or no
  slice before the array: ``y[idx]``, ``y[idx, :]``, ``y[:, idx]``, ``y[idx, 2]``). Anything
  else raises a GradjitError naming what is refused and the user's line.
- ``assign_along(sub, axis, idx, value)``: ``sub`` with ``sub[(:,) * axis + (idx,)] = value``
  in NumPy's semantics, as a new traced array: negative indices count from the end, the
  last write wins on repeated indices, ``value`` broadcasts to the indexed shape (idx's
  shape in place of the axis), an index outside ``[-n, n)`` raises ``IndexBoundsError``
  (an IndexError) when it runs, compiled or interpreted (the ``index_add`` kernel's check).
  Gradients: zero for ``sub`` at the written positions, the gathered cotangent for
  ``value``, zero for a write a later duplicate overwrites.
- Built from registered ops only: ``sort`` finds the last write of each target (equal
  targets are adjacent after a stable sort), ``index_add`` places the kept values and
  counts the writes per position, ``where`` merges.
"""
from __future__ import annotations

import numpy as np

from gradjit.tracer.registry import GradjitError, user_site


def _refuse(why):
    raise GradjitError(f"x[index] = value with a traced index: {why}. Supported: one traced "
                       f"integer array or scalar with slices, '...' and ints (y[idx] = v, "
                       f"y[idx, :] = v, y[:, idx] = v); or pass the index as a static argument "
                       f"(static_argnums)", user_site())


def traced_axis(x, index, Tracer):
    entries = index if isinstance(index, tuple) else (index,)
    if not any(isinstance(e, Tracer) for e in entries):
        return None
    traced = [k for k, e in enumerate(entries) if isinstance(e, Tracer)]
    if len(traced) > 1:
        _refuse("more than one traced index")
    (t,) = traced
    idx = entries[t]
    if idx.dtype.kind not in "iu":
        _refuse(f"a traced {idx.dtype.name} index (integer arrays only; a traced boolean mask "
                f"of x's shape with a scalar value works)")
    if sum(e is Ellipsis for e in entries) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    for e in entries:
        if not (e is Ellipsis or isinstance(e, (slice, Tracer))
                or (isinstance(e, (int, np.integer)) and not isinstance(e, bool))):
            _refuse(f"an index entry {e!r} beside it (slices, '...' and ints only)")
    # expand the Ellipsis so every entry names one axis of x
    n_axes = sum(1 for e in entries if e is not Ellipsis)
    if n_axes > x.ndim:
        raise IndexError(f"too many indices for array: array is {x.ndim}-dimensional, but "
                         f"{n_axes} were indexed")
    full = []
    for e in entries:
        full.extend([slice(None)] * (x.ndim - n_axes) if e is Ellipsis else [e])
    full.extend([slice(None)] * (x.ndim - len(full)))
    t = next(k for k, e in enumerate(full) if isinstance(e, Tracer))
    ints = [k for k, e in enumerate(full) if not isinstance(e, (slice, Tracer))]
    adv = sorted(ints + [t])
    adjacent = adv == list(range(adv[0], adv[-1] + 1))
    slices_before = sum(1 for e in full[:t] if isinstance(e, slice))
    if not adjacent and slices_before:   # NumPy moves the indexed dims first there
        _refuse("ints and the traced array separated by a slice")
    basic = tuple(slice(None) if k == t else e for k, e in enumerate(full))
    return basic, slices_before, idx


def assign_along(sub, axis, idx, value):
    from gradjit.tracer.api import apply, where
    from gradjit.tracer.methods_index import cat
    shape = tuple(sub.shape)
    n, before, after = shape[axis], shape[:axis], shape[axis + 1:]
    target = before + tuple(idx.shape) + after
    flat = idx.reshape(-1) if idx.ndim != 1 else idx
    k = int(flat.shape[0])
    v = value if isinstance(value, type(sub)) else sub._const(np.asarray(value))
    v = v.astype(sub.dtype)
    try:
        v = v.broadcast_to(target)
    except Exception:   # noqa: BLE001  (a ShapeError of expand: NumPy's words instead)
        raise ValueError(f"shape mismatch: value array of shape {tuple(v.shape)} could not be "
                         f"broadcast to indexing result of shape {target}") from None
    if k == 0:
        return sub
    v = v.reshape(before + (k,) + after)
    along = (1,) * len(before), (1,) * len(after)   # a (k,) or (n,) mask laid along the axis
    if k > 1:   # last write wins: keep the last of each run of equal targets after sorting
        w = flat if flat.dtype.kind == "u" else flat.astype(np.int64)
        if flat.dtype.kind != "u":
            w = where(w < 0, w + n, w)
        s, perm = apply("sort.default", [w], {"dim": 0, "descending": False})
        last = cat([s[:-1] != s[1:], sub._const(np.ones(1, np.bool_))], 0).astype(np.int64)
        kept = apply("index_add.default", [sub._const(np.zeros(k, np.int64)), perm, last],
                     {"dim": 0}) > 0
        v = where(kept.reshape(along[0] + (k,) + along[1]), v, sub._const(
            np.zeros((), sub.dtype)))
    placed = apply("index_add.default", [sub._const(np.zeros(shape, sub.dtype)), flat, v],
                   {"dim": axis})
    writes = apply("index_add.default", [sub._const(np.zeros(n, np.int64)), flat,
                                         sub._const(np.ones(k, np.int64))], {"dim": 0})
    written = (writes > 0).reshape(along[0] + (n,) + along[1])
    return where(written, placed, sub)
