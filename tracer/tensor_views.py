"""Views of tensors in tensor mode: torch's base / view semantics for in-place ops.

Contract
- A tensor made from another by a view op (``view`` / ``reshape`` when NumPy would not
  copy, ``flatten``, ``t``, ``transpose``, ``permute``, ``movedim``, ``squeeze``,
  ``unsqueeze``, ``expand``, basic indexing ``y[1:]`` / ``y[0]`` / ``y[..., None]``,
  ``narrow``, ``split``, ``chunk``, ``diagonal``) is registered here with its root base (a strong
  reference, as torch's ``._base``) and the chain of ops that made it from that base; the
  base keeps weak references to its live views.
- An in-place op on a view (``_write_view``) rewrites the base as "the base with the
  view's region replaced" (the inverse layout op for views covering the whole base, an
  out-of-place assignment for slices: differentiable), writes that into the base
  (the base's ``_inplace``), and every live view of the base is re-derived from the new
  base (``refresh``): its value and its place in the graph. So views see the new values
  in both, and gradients are torch's. The version box a view had before is bumped, so a
  backward that saved its old value refuses it (torch's shared version counter).
- Views are re-derived in the grad mode they were made in (torch: a view of a tensor that
  requires grad keeps its grad_fn to the base after a no-grad write into the base);
  views no history reaches are re-derived in NumPy alone. ``detach()`` of a tensor with
  history or views is registered as a view (``detached``: shares the write-through, never
  the history). A write recorded nowhere (no_grad, detached) is made in NumPy alone
  (``_written_array``); the base's ``_inplace`` then keeps its history (tensor_inplace).
- torch's refusals, with its messages: an in-place write into a view whose elements share
  memory (an ``expand`` that broadcast, unless a slice picked one copy); a recorded one
  into an output of ``split`` / ``chunk`` / ``unbind`` (multi-output views), into a view
  made under no_grad, or into a view of a leaf that requires grad. Writes into
  ``diagonal`` / ``expand`` views go by element positions (no inverse layout op).
- Limit: a view's array is a copy of its region, so NumPy writes into ``v.data``,
  ``v.numpy()`` or ``np.asarray(v)`` do not reach the base (in-place ops do).
- Registration is switched off (``quiet``) while gradjit itself replays or inverts views.
"""
from __future__ import annotations

import threading
import weakref

import numpy as np

_OF = {}     # id(view) -> _View
_KIDS = {}   # id(base) -> {id(view): weakref to the view}
_STATE = threading.local()


class _View:
    # multi: (function name, output index) for an output of split / chunk / unbind, else None;
    # grad: the grad mode at creation; detached: made by detach() (shares the write-through,
    # never the history)
    __slots__ = ("ref", "base", "ops", "multi", "grad", "detached")

    def __init__(self, ref, base, ops, multi, grad, detached):
        self.ref, self.base, self.ops, self.multi = ref, base, ops, multi
        self.grad, self.detached = grad, detached


class quiet:
    """No registration inside (gradjit's own replays and inverses)."""

    def __enter__(self):
        _STATE.quiet = getattr(_STATE, "quiet", 0) + 1

    def __exit__(self, *exc):
        _STATE.quiet -= 1


def is_quiet():
    return getattr(_STATE, "quiet", 0) > 0


def info(t):
    v = _OF.get(id(t))
    return v if v is not None and v.ref() is t else None


def has_views(t):
    return id(t) in _KIDS


def _gone(key, base_key):
    def callback(_ref):
        _OF.pop(key, None)
        kids = _KIDS.get(base_key)
        if kids is not None:
            kids.pop(key, None)
            if not kids:
                del _KIDS[base_key]
    return callback


def register(src, out, op, multi=None, detached=False):
    """``out`` is a view of ``src`` made by ``op`` (a (method, args) pair; None: ``detach``)."""
    if out is src or is_quiet():
        return out
    from gradjit.tracer.modes import is_recording
    parent = info(src)
    mine = (op,) if op is not None else ()
    base, ops = (parent.base, parent.ops + mine) if parent is not None else (src, mine)
    if parent is not None:
        detached = detached or parent.detached
        multi = multi or parent.multi
    key, base_key = id(out), id(base)
    _OF[key] = _View(weakref.ref(out, _gone(key, base_key)), base, ops, multi, is_recording(),
                     detached)
    _KIDS.setdefault(base_key, {})[key] = _OF[key].ref
    return out


def reshape_is_view(src, shape):
    """Whether NumPy (as torch) reshapes ``src`` to ``shape`` without a copy, the root base
    taken as contiguous (an int8 probe of its layout)."""
    parent = info(src)
    if parent is None:
        return True
    probe = np.zeros(parent.base.shape, np.int8)
    p = probe
    for name, args in parent.ops:
        p = _probe(p, name, args)
    return np.may_share_memory(np.reshape(p, shape), probe)


def _probe(p, name, args):
    if name in ("reshape", "squeeze", "unsqueeze"):
        return np.reshape(p, args[-1])
    if name == "permute":
        return np.transpose(p, args[0])
    if name == "transpose":
        return np.swapaxes(p, *args)
    if name == "t":
        return p.T
    if name == "expand":
        return np.broadcast_to(p, args[0])
    if name == "diagonal":
        return np.diagonal(p, *args).copy()   # (not contiguous: a reshape of it copies)
    return p[args[0]]   # getitem (narrow / split: stored as their index)


def _one(x, name, args):
    if name in ("reshape", "squeeze", "unsqueeze"):
        return x.reshape(args[-1])
    if name == "getitem":
        return x[args[0]]
    return getattr(x, name)(*args)


def replay(base, ops):
    with quiet():
        x = base
        for name, args in ops:
            x = _one(x, name, args)
        return x


def _scatter(x, ops, new):
    """``x`` with the region that ``ops`` select replaced by ``new`` (out of place)."""
    if not ops:
        return new
    (name, args), rest = ops[0], ops[1:]
    if name in ("expand", "diagonal"):   # (no inverse layout op: by element positions)
        return _by_position(x, ops, new)
    y = _one(x, name, args)
    y = _scatter(y, rest, new)
    if name in ("reshape", "squeeze", "unsqueeze"):
        return y.reshape(x.shape)
    if name == "permute":
        return y.permute(tuple(int(i) for i in np.argsort(args[0])))
    if name in ("transpose", "t"):
        return getattr(y, name)(*args)
    return x._assigned(args[0], y)


def _positions(shape, ops):
    """The flat positions in a tensor of ``shape`` of the elements that ``ops`` select."""
    p = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
    for name, args in ops:
        p = _probe(p, name, args)
    return p


def _by_position(x, ops, new):
    pos = _positions(x.shape, ops).reshape(-1)
    flat = x.reshape(-1)._assigned(pos, new.reshape(-1))
    return flat.reshape(x.shape)


def _check_overlap(view, base, ops):
    """torch refuses an in-place write into a view where two elements share memory (an
    ``expand`` that broadcast, unless a later slice picked one copy)."""
    if not any(name == "expand" for name, _ in ops):
        return
    pos = _positions(base.shape, ops)
    if np.unique(pos).size != pos.size:
        raise RuntimeError("unsupported operation: more than one element of the written-to "
                           "tensor refers to a single memory location. Please clone() the "
                           f"tensor before performing the operation. (an in-place write into "
                           f"a view of shape {tuple(view.shape)} that expands a tensor of shape "
                           f"{tuple(base.shape)})")


def _written_array(array, ops, value):
    """A copy of ``array`` with the region that ``ops`` select replaced by ``value``: an
    untracked write in NumPy alone (through NumPy views of the copy where the ops make one,
    else by element positions), not through the recorded ops (a tenth of the time)."""
    new = np.array(array, copy=True)
    y = new
    for name, args in ops:
        if name in ("expand", "diagonal"):
            y = None
            break
        y = _probe(y, name, args)
    if isinstance(y, np.ndarray) and y.flags.writeable and np.may_share_memory(y, new):
        y[...] = value
    else:
        new.reshape(-1)[np.reshape(_positions(new.shape, ops), -1)] = np.reshape(value, -1)
    return new


def _view_array(array, ops):
    """The values of the view that ``ops`` make of ``array``, as a new array."""
    y = array
    for name, args in ops:
        y = _probe(y, name, args)
    return np.array(y, copy=True)


def detached(src, out):
    """``out = src.detach()``: registered as a view of ``src`` (torch's detach shares its
    memory) when writes into it must reach a history or views: ``src`` has history, is a
    view or has views. A leaf's detach shares its array and version counter already."""
    if src.grad_fn is not None or info(src) is not None or has_views(src):
        register(src, out, None, detached=True)
    return out


def write_view(view, v, result):
    """An in-place op on ``view`` (registered as ``v``) whose new value is ``result``."""
    from gradjit.tracer.modes import is_recording, no_grad
    base = v.base
    tracked = is_recording() and not v.detached and (base._requires_grad
                                                      or result._requires_grad)
    if tracked and v.multi:
        name, i = v.multi
        raise RuntimeError(f"Output {i} of {name} is a view and is being modified inplace. "
                           "This view is the output of a function that returns multiple views. "
                           "Such functions do not allow the output views to be modified inplace. "
                           "You should replace the inplace operation by an out-of-place one. "
                           f"(a view of shape {tuple(view.shape)} of a tensor of shape "
                           f"{tuple(base.shape)})")
    if tracked and not v.grad:
        raise RuntimeError("A view was created in no_grad mode and is being modified inplace "
                           "with grad mode enabled. Given that this use case is ambiguous and "
                           "error-prone, it is forbidden. You can clarify your code by moving "
                           "both the view and the inplace either both inside the no_grad block "
                           "(if you don't want the inplace to be tracked) or both outside (if "
                           "you want the inplace to be tracked). (a view of shape "
                           f"{tuple(view.shape)} of a tensor of shape {tuple(base.shape)})")
    if tracked and base.grad_fn is None and base._requires_grad:
        raise RuntimeError("a view of a leaf Variable that requires grad is being used in an "
                           "in-place operation.")
    if result.shape != view.shape:
        raise RuntimeError(f"output with shape {list(view.shape)} doesn't match the broadcast "
                           f"shape {list(result.shape)}")
    _check_overlap(view, base, v.ops)
    with quiet():
        if result.dtype != view.dtype:
            result = result.to(view.dtype)
        if v.detached or not tracked:   # (no history for the write: tensor_inplace._written)
            if isinstance(base.data, np.ndarray):
                new_base = type(base)(_written_array(base.data, v.ops, result.data))
            else:
                with no_grad():
                    new_base = _scatter(base, v.ops, result.detach())
        else:
            new_base = _scatter(base, v.ops, result)
    base._inplace(new_base)   # (refreshes every live view of base, ``view`` among them)
    return view


def refresh(base):
    """Re-derive every live view of ``base`` from its current value and history, in the
    grad mode it was made in (a view of a tensor that requires grad keeps its history to
    the base, as torch's, whatever the mode of the write)."""
    from gradjit.tracer.modes import set_grad_enabled, is_grad_enabled
    from gradjit.tracer.tensor_inplace import _move_retain
    kids = _KIDS.get(id(base))
    if not kids:
        return
    mode = is_grad_enabled()
    try:
        for key, ref in list(kids.items()):
            t = ref()
            v = _OF.get(key)
            if t is None or v is None or v.base is not base:
                continue
            grad = v.grad and not v.detached
            if not (grad and base._requires_grad) and isinstance(base._data, np.ndarray):
                t._box[0] += t._box is not base._box   # (see below)
                t._data = _view_array(base._data, v.ops)   # (no history: NumPy alone)
                if not v.detached:
                    t.grad_fn, t._index, t._requires_grad, t._ty = None, 0, False, None
                continue
            if grad != is_grad_enabled():
                set_grad_enabled(grad)
            r = replay(base, v.ops)
            if t._box is not base._box:
                t._box[0] += 1   # (a backward that saved the old value refuses it, as torch's)
            if v.detached:
                t._data = r.data
                continue   # (keeps its version counter: the base's, or a view's of it)
            if r.grad_fn is not None:
                _move_retain(t, r.grad_fn, r._index)
            elif r._box is not base._box:
                r._box[0] = t._box[0]   # (torch's views count the base's versions)
            t._data, t.grad_fn, t._index = r._data, r.grad_fn, r._index
            t._requires_grad, t._box, t._ty = r._requires_grad, r._box, r._ty
    finally:
        if is_grad_enabled() != mode:
            set_grad_enabled(mode)
