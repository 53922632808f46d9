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
- In-place writes into an ``expand`` view that broadcast raise torch's error, as do
  in-place writes into the outputs of ``split`` / ``chunk`` (torch's multi-output views);
  one into a ``diagonal`` raises (no inverse here): a clear error, never a stale base.
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
    __slots__ = ("ref", "base", "ops", "multi")

    def __init__(self, ref, base, ops, multi):
        self.ref, self.base, self.ops, self.multi = ref, base, ops, multi


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


def register(src, out, op, multi=False):
    """``out`` is a view of ``src`` made by ``op`` (a (method, args) pair)."""
    if out is src or is_quiet():
        return out
    parent = info(src)
    base, ops = (parent.base, parent.ops + (op,)) if parent is not None else (src, (op,))
    key, base_key = id(out), id(base)
    _OF[key] = _View(weakref.ref(out, _gone(key, base_key)), base, ops, multi)
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
    y = _one(x, name, args)
    y = _scatter(y, rest, new)
    if name in ("reshape", "squeeze", "unsqueeze"):
        return y.reshape(x.shape)
    if name == "permute":
        return y.permute(tuple(int(i) for i in np.argsort(args[0])))
    if name == "diagonal":
        raise RuntimeError(f"an in-place write into a diagonal() view (of a tensor of shape "
                           f"{tuple(x.shape)}) is not supported by gradjit: write into the base "
                           f"(x[i, i] = v) or call .clone() on the diagonal")
    if name in ("transpose", "t"):
        return getattr(y, name)(*args)
    if name == "expand":
        if int(np.prod(args[0])) != int(np.prod(x.shape)):
            raise RuntimeError("unsupported operation: more than one element of the written-to "
                               "tensor refers to a single memory location. Please clone() the "
                               f"tensor before performing the operation. (an in-place write into "
                               f"an expand of shape {tuple(x.shape)} to {tuple(args[0])})")
        return y.reshape(x.shape)
    return x._assigned(args[0], y)


def write_view(view, v, result):
    """An in-place op on ``view`` (registered as ``v``) whose new value is ``result``."""
    from gradjit.tracer.modes import is_recording
    base = v.base
    if v.multi:
        raise RuntimeError("Output 0 of SplitBackward0 is a view and is being modified inplace. "
                           "This view is the output of a function that returns multiple views. "
                           "Such functions do not allow the output views to be modified inplace. "
                           "You should replace the inplace operation by an out-of-place one. "
                           f"(a view of shape {tuple(view.shape)} of a tensor of shape "
                           f"{tuple(base.shape)})")
    if is_recording() and base.grad_fn is None and base._requires_grad:
        raise RuntimeError("a view of a leaf Variable that requires grad is being used in an "
                           "in-place operation.")
    if result.shape != view.shape:
        raise RuntimeError(f"output with shape {list(view.shape)} doesn't match the broadcast "
                           f"shape {list(result.shape)}")
    with quiet():
        if result.dtype != view.dtype:
            result = result.to(view.dtype)
        new_base = _scatter(base, v.ops, result)
    base._inplace(new_base)   # (refreshes every live view of base, ``view`` among them)
    return view


def refresh(base):
    """Re-derive every live view of ``base`` from its current value and history."""
    kids = _KIDS.get(id(base))
    if not kids:
        return
    for key, ref in list(kids.items()):
        t = ref()
        v = _OF.get(key)
        if t is None or v is None or v.base is not base:
            continue
        r = replay(base, v.ops)
        if t._box is not base._box:
            t._box[0] += 1   # (a backward that saved the old value refuses it, as torch's)
        t._data, t.grad_fn, t._index = r._data, r.grad_fn, r._index
        t._requires_grad, t._box, t._ty = r._requires_grad, r._box, r._ty
