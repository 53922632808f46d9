"""Advanced (integer-array) indexing for ``__getitem__`` (``tracer/methods_index.py``).

Contract
- ``advanced(y, adv)``: ``y`` indexed by integer arrays or tensors ``adv`` =
  [(dim, array)], broadcast together, with the result dims where NumPy puts
  them; one ``index_select`` over the indexed dims permuted together and
  flattened. ``_concrete`` / ``_is_obj`` / ``_check_bounds`` are the helpers
  the index methods share; ``torch_split`` gives tensor assignment torch's order.
- Bounds: a concrete index is checked here (``IndexError`` in torch's words,
  naming the tensor's shape and the user's line) and wrapped. A traced one has
  no value yet: it is checked where it is read, at run time, by the index
  kernels (``IndexBoundsError``, NumPy's words: see ``tracer/ops_index.py``).
  A lone traced array goes to the ``index_select`` as it is (its kernel wraps
  and checks it along the user's axis); with several arrays each traced one is
  first wrapped and checked on its own (``_checked``), because the flat index
  they are combined into could be in range when one of them is not.
"""
from __future__ import annotations

import numpy as np

from gradjit.tracer.dispatch import apply
from gradjit.tracer.registry import user_site


def _is_obj(x):
    return hasattr(x, "_apply")


def _concrete(x):
    """The array behind an index, or None when it is traced (no value yet)."""
    if _is_obj(x):
        return np.asarray(x.data) if hasattr(x, "data") else None
    return np.asarray(x)


def _check_bounds(idx, n, dim, shape):
    if idx.dtype.kind not in "iu":
        raise IndexError(f"tensors used as indices must be integer or boolean, got dtype "
                         f"{idx.dtype.name}\n  at {user_site()}")
    if idx.size and (idx.max() >= n or idx.min() < -n):
        bad = idx[(idx >= n) | (idx < -n)].reshape(-1)[0]
        raise IndexError(f"index {bad} is out of bounds for dimension {dim} with size {n} "
                         f"(tensor of shape {tuple(shape)})\n  at {user_site()}")
    return np.where(idx < 0, idx + n, idx).astype(np.int64)


def _checked(a, n, d, ndim):
    """Traced index ``a`` into axis ``d`` (size ``n``) of an ``ndim``-D tensor, wrapped
    once: an ``index_select`` of ``arange(n)`` laid along axis ``d``, so the kernel's
    run-time check names the user's axis and size."""
    pos = a._const(np.arange(n, dtype=np.int64).reshape((1,) * d + (n,) + (1,) * (ndim - d - 1)))
    return apply("index_select.default", [pos, a.reshape(-1)], {"dim": d}).reshape(a.shape)


def torch_split(index):
    """A NumPy index of a tensor (``x[index] = v``) as two applied one after the other,
    giving torch's result where it differs from NumPy's: the ints first (basic indexing,
    a view), then the rest, so NumPy's placement rule for the advanced indices sees no
    ints (``methods_index.getitem``). None where no int stands beside an array."""
    items = index if isinstance(index, tuple) else (index,)

    def is_int(i):
        return isinstance(i, (int, np.integer)) and not isinstance(i, (bool, np.bool_))

    arrays = [not (i is None or i is Ellipsis or isinstance(i, slice) or is_int(i)) for i in items]
    if not (any(arrays) and any(map(is_int, items))):
        return None
    first, second = [], []
    for i, arr in zip(items, arrays):
        if is_int(i):
            first.append(i)
        elif arr:   # (a mask stands for as many dims as it has)
            a = np.asarray(i)
            first.extend([slice(None)] * (a.ndim if a.dtype == np.bool_ else 1))
            second.append(i)
        elif isinstance(i, slice):
            first.append(slice(None))
            second.append(i)
        else:   # (None: its new dim, made by the first, is kept by the second; Ellipsis)
            first.append(i)
            second.append(slice(None) if i is None else i)
    return tuple(first), tuple(second)


def advanced(y, adv):
    """``y`` indexed by integer arrays at dims ``adv`` (NumPy's placement rules)."""
    dims = [d for d, _ in adv]
    arrays = []
    for d, a in adv:
        c = _concrete(a)
        arrays.append(_check_bounds(c.astype(np.int64), y.shape[d], d, y.shape)
                      if c is not None else a)
    try:
        bshape = tuple(np.broadcast_shapes(*[tuple(a.shape) for a in arrays]))
    except ValueError:
        raise IndexError(f"shape mismatch: indexing arrays could not be broadcast together with "
                         f"shapes {', '.join(str(tuple(a.shape)) for a in arrays)}\n"
                         f"  at {user_site()}") from None
    sizes = [y.shape[d] for d in dims]
    strides = [int(np.prod(sizes[k + 1:])) for k in range(len(sizes))]
    if all(isinstance(a, np.ndarray) for a in arrays):
        flat = sum(np.broadcast_to(a, bshape) * s for a, s in zip(arrays, strides))
        flat = np.asarray(flat, np.int64).reshape(-1)
    else:
        like = next(a for a in arrays if _is_obj(a))
        flat = None
        for d, a, n, s in zip(dims, arrays, sizes, strides):
            if not _is_obj(a):
                a = like._const(a)   # checked and wrapped above
            elif len(dims) > 1:
                a = _checked(a, n, d, y.ndim)
            a = a.to(np.int64).expand(bshape)
            a = a * s if s != 1 else a
            flat = a if flat is None else flat + a
        flat = flat.reshape(-1)
    adjacent = dims == list(range(dims[0], dims[-1] + 1))
    others = [d for d in range(y.ndim) if d not in dims]
    q = dims[0] if adjacent else 0
    perm = others[:q] + dims + others[q:]
    y = y.permute(perm)
    shape = y.shape
    n_adv = len(dims)
    y = y.reshape(shape[:q] + (int(np.prod(sizes)),) + shape[q + n_adv:])
    y = apply("index_select.default", [y, flat], {"dim": q})
    return y.reshape(shape[:q] + bshape + shape[q + n_adv:])
