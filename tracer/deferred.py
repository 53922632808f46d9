"""Deferred forward for tensor mode: a recorded op's value is computed when first needed.

Contract
- On the eager hot path (``Tensor._apply``: CPU tensors, a signature seen
  before), an op that records a node and is of a kind in ``_KINDS`` (elementwise,
  reduction, matmul, shape and composite ops: pure, with no value-dependent
  errors, so deferring changes no error) with one floating-point output is
  recorded *without* running: its Tensor is pending (``_data is None``) and
  its ``GradFn.out_data`` is None until ``compute_pending``. Shape, dtype and the
  structural key come from the recorded output types.
- A pending value is computed (NumPy, as the eager path would have) when it
  is read (``Tensor.data`` and everything built on it), when an in-place op
  is about to write any tensor (``flush``: every pending node on this
  thread's tape, so none can see the write), and when the tape drops entries
  it recorded (``flush`` again: pending nodes always sit on the current tape).
- ``backward()`` on a pending root whose whole history is the tape runs one
  compiled function for forward *and* backward (``runtime/engine.py``), so a
  training step's forward costs a record per op, not a NumPy call per op;
  tensors of that history still alive are computed first, so their values
  are those of the recording time. A computed value stays in its node's
  ``out_data`` (the Tensor takes it when first read, ``Tensor.data``); backward
  keeps it for nodes a Tensor still holds (``GradFn.held``) and frees the rest.
- The user's code reaching a tensor's memory (``t.data``, ``t.numpy()``,
  ``np.asarray(t)``: ``tracer/tensor.py``) computes every pending node first,
  so NumPy writes through it (``w.data += 0.1``) never reach a value recorded
  before. Semantics differ from eager only for NumPy writes into the array a
  ``from_numpy`` tensor shares, between an op and the point its value is
  computed: the value then sees the write. ``set_deferred(False)`` (or ``GRADJIT_DEFER=0``) records and
  runs every op at once, as before.
"""
from __future__ import annotations

import os

import numpy as np

from gradjit.tracer import tape
from gradjit.tracer.gradfn import FREED
from gradjit.tracer.registry import get_op

_KINDS = ("elementwise", "reduction", "matmul", "shape", "composite")
_ENABLED = [os.environ.get("GRADJIT_DEFER", "1") != "0"]


try:   # NumPy's floating-point error state, set without np.errstate's per-call overhead
    from numpy._core._ufunc_config import _extobj_contextvar
    from numpy._core.umath import _make_extobj
    _IGNORE = _make_extobj(all="ignore")

    def _quiet():
        return _extobj_contextvar.set(_IGNORE)

    def _loud(token):
        _extobj_contextvar.reset(token)
except ImportError:   # another NumPy layout: the public (slower) way
    def _quiet():
        state = np.errstate(all="ignore")
        state.__enter__()
        return state

    def _loud(state):
        state.__exit__(None, None, None)


def set_deferred(flag):
    """Turn the deferred forward on or off (this process); returns the previous setting.
    Off: every recorded op computes its value at once."""
    prev = _ENABLED[0]
    _ENABLED[0] = bool(flag)
    return prev


def _pending(fn):
    return fn.out_data is None and not fn.freed


def compute_pending(fns):
    """Compute every pending node among ``fns`` and their pending ancestors, in recording
    order (NumPy, as the eager path)."""
    todo, stack, seen = [], [f for f in fns if f is not None and _pending(f)], set()
    while stack:
        f = stack.pop()
        if id(f) in seen:
            continue
        seen.add(id(f))
        todo.append(f)
        for e in f.edges:
            if type(e) is tuple and _pending(e[0]):
                stack.append(e[0])
    if not todo:
        return
    todo.sort(key=lambda f: f.seq)
    tok = _quiet()
    try:
        for f in todo:
            op = get_op(f.op)
            args = []
            for e in f.edges:
                if type(e) is tuple:
                    src = e[0].out_data
                    if src is None or src[e[1]] is None:   # freed by an earlier backward
                        raise RuntimeError(FREED)
                    args.append(src[e[1]])
                else:
                    args.append(e.data)
            res = (op.eager or op.impl)(*args, **f.attrs)
            f.out_data = [np.asarray(res).astype(f.out_types[0][1], copy=False)]
    finally:
        _loud(tok)


tape.FLUSH.append(compute_pending)
