"""``x[index] = value`` on traced arrays, with NumPy's view semantics, and buffers.

Contract
- ``setitem(x, index, value)`` computes the assigned array out of place (NumPy's
  index rules with a concrete index: ints, slices, None, Ellipsis, integer
  arrays, boolean masks; the last write wins on repeats; or a traced boolean
  mask of ``x``'s shape with a scalar value), differentiably (the gradient
  reaches the untouched part of ``x`` and ``value``), and rebinds the tracer ``x``
  to it, so every name bound to that tracer sees the new values.
- Views behave as NumPy's: while a function traces, every view op a tracer goes
  through (reshape, transpose, basic slicing, squeeze …) is recorded in the
  graph's ``view_tree`` when NumPy's own op would return a view (decided by
  applying the op to an int8 probe of the parent's layout: a reshape of a
  transposed array is a copy, as in NumPy). An assignment into a view writes
  through to its base (the inverse of each view op), and every live view of the
  changed arrays is recomputed from them: ``row = x[0]; x[0, 1] = v`` changes
  ``row``, ``x.reshape(-1)[:2] = 0`` changes ``x``. Read-only views
  (``np.broadcast_to``) refuse assignment as NumPy does.
- Views are tracked by tracer object (weak references: a view no name holds is
  not recomputed), so copies (``x.copy()``, ``np.array(x)``) are independent and
  ``np.asarray(x)`` is ``x``.
- A traced integer index (an array or scalar, with slices, '...' and ints beside it:
  ``y[idx] = v``, ``y[:, idx] = v``) assigns with NumPy's semantics, out-of-range
  values raising IndexError when the code runs (``tracer/setitem_traced.py``); other
  traced indices (inside lists, two traced arrays) raise: their positions are not
  known while tracing.
- While a transform traces, ``np.zeros`` / ``np.ones`` / ``np.empty`` /
  ``np.full`` of a floating dtype called by the user's code return traced
  constants (``buffer``, wired by ``tracer/coercion.py``), so ``out =
  np.zeros(n); out[i] = f(x)`` traces.
"""
from __future__ import annotations

import weakref

import numpy as np

from gradjit.tracer.registry import GradjitError, user_site
from gradjit.tracer.setitem_traced import assign_along, traced_axis

# Graph ops whose NumPy counterpart may return a view of its input.
VIEW_OPS = frozenset({"view.default", "squeeze.default", "squeeze.dim", "unsqueeze.default",
                      "permute.default", "transpose.int", "t.default", "slice.Tensor",
                      "expand.default"})
_READ_ONLY = frozenset({"expand.default"})   # np.broadcast_to: a read-only view


def _concrete(i, Tracer):
    if isinstance(i, Tracer):
        raise GradjitError("x[index] = value with a traced index: its positions are not known "
                           "while gj.jit / gj.grad trace the function. Use np.where(mask, value, x) "
                           "or pass the index as a static argument (static_argnums)", user_site())
    if isinstance(i, (list, tuple)) and any(isinstance(j, Tracer) for j in i):
        return _concrete(next(j for j in i if isinstance(j, Tracer)), Tracer)
    return getattr(i, "data", i) if hasattr(i, "_apply") else i


def _probe_op(probe, op, a):
    """NumPy's own op on an int8 array of the parent's layout."""
    if op == "view.default":
        return np.reshape(probe, a["size"])
    if op == "squeeze.default":
        return np.squeeze(probe)
    if op == "squeeze.dim":
        return np.squeeze(probe, a["dim"])
    if op == "unsqueeze.default":
        return np.expand_dims(probe, a["dim"])
    if op == "permute.default":
        return np.transpose(probe, a["dims"])
    if op == "transpose.int":
        return np.swapaxes(probe, a["dim0"], a["dim1"])
    if op == "t.default":
        return probe.T
    if op == "slice.Tensor":
        return probe[(slice(None),) * a["dim"] + (slice(a["start"], a["end"], a["step"]),)]
    return np.broadcast_to(probe, a["size"])   # expand.default


class _Entry:
    __slots__ = ("ref", "parent", "op", "attrs", "probe", "kids")

    def __init__(self, ref, parent, op, attrs, probe):
        self.ref, self.parent, self.op, self.attrs, self.probe = ref, parent, op, attrs, probe
        self.kids = []


def _entry(tree, t):
    e = tree.get(id(t))
    if e is None or e.ref() is not t:   # not seen, or another object that had this id
        e = tree[id(t)] = _Entry(weakref.ref(t), None, None, None, np.empty(t.shape, np.int8))
    return e


def _own(tree, t):
    """``t``'s entry if it is a recorded view, else None."""
    e = tree.get(id(t))
    return e if e is not None and e.ref() is t else None


def note_view(parent, child, op, attrs):
    """Record ``child`` (made by view op ``op`` from ``parent``) as a view of it when NumPy's
    op would return one (``Tracer._apply`` calls this while a function traces)."""
    tree = parent.graph.view_tree
    pe = _entry(tree, parent)
    probe = _probe_op(pe.probe, op, attrs)
    if not np.may_share_memory(probe, pe.probe):   # NumPy would copy: an independent array
        return
    e = tree[id(child)] = _Entry(weakref.ref(child), parent, op, attrs, probe)
    pe.kids.append(e)


def forget_view(t):
    """``t`` is no view of anything (NumPy made a scalar or a copy): writes to it stay its own.
    Returns ``t``."""
    tree = t.graph.view_tree
    if tree is not None and _own(tree, t) is not None:
        del tree[id(t)]   # (its parent's kid entry is dropped lazily: _refresh checks _own)
    return t


def setitem(x, index, value):
    from gradjit.tracer.api import where
    Tracer = type(x)
    # (the value's own ndim: a NumPy scalar, a 0-d array or a traced 0-d value is a scalar
    # here as a Python number is; len of its shape, as np.ndim would ask a tracer for data)
    if (isinstance(index, Tracer) and index.dtype == np.bool_ and index.shape == x.shape
            and not isinstance(value, (list, tuple))
            and (len(value.shape) if hasattr(value, "shape") else np.ndim(value)) == 0):
        # x[mask] = scalar, a traced mask: differentiable in x and in a traced value
        new = where(index, value.astype(x.dtype) if isinstance(value, Tracer) else x._const(
            np.asarray(value, x.dtype)), x).astype(x.dtype)
    else:
        found = traced_axis(x, index, Tracer)
        if found is not None:   # a traced integer index (tracer/setitem_traced.py)
            basic, axis, idx = found
            whole = all(e == slice(None) for e in basic)
            sub = x if whole else x[basic]   # (a view: the write goes through to x)
            _write(sub, assign_along(sub, axis, idx, value).value, x.graph.view_tree)
            return
        index = tuple(_concrete(i, Tracer) for i in index) if isinstance(index, tuple) else \
            _concrete(index, Tracer)
        new = _assigned(x, index, value)
    _write(x, new.value, x.graph.view_tree)


def _assigned(x, index, value):
    """A new traced array: ``x`` with ``x[index] = value`` (a concrete index)."""
    from gradjit.tracer.api import apply, where
    n = int(np.prod(x.shape))
    pos = np.arange(n).reshape(x.shape)[index]
    flat_pos = np.asarray(pos).reshape(-1)
    targets, first_rev = np.unique(flat_pos[::-1], return_index=True)
    keep = (len(flat_pos) - 1 - first_rev).astype(np.int64)   # the last write of each target
    v = value if isinstance(value, type(x)) else x._const(np.asarray(value))
    v = v.astype(x.dtype)
    try:
        vals = v.broadcast_to(np.shape(pos)).reshape(-1)
    except Exception:
        raise ValueError(f"could not broadcast input array from shape {tuple(v.shape)} into "
                         f"shape {np.shape(pos)}") from None
    if len(keep) != len(flat_pos) or np.any(keep != np.arange(len(keep))):
        vals = apply("index_select.default", [vals, x._const(keep)], {"dim": 0})
    placed = apply("index_add.default", [x._const(np.zeros(n, x.dtype)),
                                         x._const(targets.astype(np.int64)), vals], {"dim": 0})
    mask = np.zeros(n, np.bool_)
    mask[targets] = True
    # a where, not a reshape: the result is a new array, not a view of anything
    return where(x._const(mask.reshape(x.shape)), placed.reshape(x.shape), x)


def _inverse(parent, op, a, new):
    """The parent's new value after its view (made by ``op``) became ``new``."""
    from gradjit.tracer.api import ArrayOps
    if op in ("view.default", "squeeze.default", "squeeze.dim", "unsqueeze.default"):
        return ArrayOps.reshape(new, parent.shape)
    if op == "permute.default":
        return ArrayOps.permute(new, tuple(int(i) for i in np.argsort(a["dims"])))
    if op == "transpose.int":
        return ArrayOps.transpose(new, a["dim0"], a["dim1"])
    if op == "t.default":
        return ArrayOps.t(new)
    index = (slice(None),) * a["dim"] + (slice(a["start"], a["end"], a["step"]),)
    return _assigned(parent, index, new)


def write(t, value):
    """``t`` (a tracer) holds ``value`` from now on, with NumPy's view semantics (``x op= y``)."""
    tree = t.graph.view_tree
    if tree is None:
        t.value = value
    else:
        _write(t, value, tree)


def _write(t, value, tree, skip=None):
    """``t`` holds ``value`` now: write through to its bases, then recompute their views."""
    e = _own(tree, t)
    if e is not None and e.parent is not None:
        if e.op in _READ_ONLY:
            raise ValueError("assignment destination is read-only")
        new_parent = _inverse(e.parent, e.op, e.attrs, type(t)(t.graph, value))
        t.value = value
        _write(e.parent, new_parent.value, tree, skip=e)   # its views, all but this one, follow
        _refresh(t, e, tree, skip)
        return
    t.value = value
    if e is not None:
        _refresh(t, e, tree, skip)


def _refresh(t, e, tree, skip=None):
    """Recompute the live views of ``t`` (but ``skip``) from its value, recursively."""
    live = []
    for k in e.kids:
        child = k.ref()
        if child is None or _own(tree, child) is not k:
            continue
        live.append(k)
        if k is not skip:
            child.value = type(t)._apply(k.op, [t], dict(k.attrs), view_of=False).value
            _refresh(child, k, tree)
    e.kids = live


def buffer(graph, make, args, kwargs):
    """``np.zeros(...)`` & co. inside a trace: a traced constant when the dtype is floating
    (a buffer the function may assign into), else the NumPy array; ``np.full`` of a traced
    fill value a traced array of any dtype."""
    from gradjit.tracer.trace import constant
    if make.__name__ == "full":
        fill = args[1] if len(args) > 1 else kwargs.get("fill_value")
        if hasattr(fill, "_apply"):   # a traced fill value
            return _traced_full(graph, fill, *args, **kwargs)
    array = make(*args, **kwargs)
    if isinstance(array, np.ndarray) and array.dtype.kind in "fc":
        return constant(graph, array)
    return array


def _traced_full(graph, fill, shape, fill_value=None, dtype=None, order="C", *, device=None,
                 like=None):
    """``np.full(shape, v)`` of a traced ``v`` (JAX's ``jnp.full``): zeros of the shape plus
    ``v`` cast to the dtype (``v``'s own when none is given, as NumPy), a new array the
    function may assign into, differentiable in ``v``."""
    from gradjit.tracer.trace import constant
    if like is not None or device not in (None, "cpu") or order not in ("C", "F", "K", "A"):
        raise GradjitError(f"np.full(..., {'like=' if like is not None else 'device='}) with a "
                           "traced fill value", user_site())
    dt = np.dtype(fill.dtype if dtype is None else dtype)
    shape = (int(shape),) if np.ndim(shape) == 0 else tuple(int(d) for d in shape)
    try:
        fits = np.broadcast_shapes(tuple(fill.shape), shape) == shape
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(f"could not broadcast input array from shape {tuple(fill.shape)} into "
                         f"shape {shape}\n  at {user_site()}")
    return constant(graph, np.zeros(shape, dt)) + fill.astype(dt)
