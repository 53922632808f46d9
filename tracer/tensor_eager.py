"""``Tensor``'s ops that are not deferred: run at once (``_eager``), wrapped and recorded
(``_finish``), or computed the general way (``compute``: any inputs, any device).

Contract
- ``Tensor._apply`` (tracer/tensor.py) sends here the ops it does not defer
  (kinds tracer/deferred.py does not take, deferral off, grad mode off) and the
  inputs its hot path does not handle (non-Tensors, device arrays, unhashable
  attributes). ``_eager`` runs the op's NumPy reference now and records a node
  holding its values when an input requires grad (added to the recording tape,
  which a replayed step matches: tracer/replay.py's ``added``); ``_finish``
  wraps computed outputs and records their node (torch's error for inference
  tensors that would be saved).
- Mixed into ``Tensor``; tracer/tensor.py sets ``Tensor`` and ``recorded`` here
  once the class exists (this module is imported first).
"""
from __future__ import annotations

import numpy as np

from gradjit.tracer import tape
from gradjit.tracer.deferred import _loud, _quiet
from gradjit.tracer.gradfn import GradFn
from gradjit.tracer.modes import is_recording
from gradjit.tracer.registry import bind_attrs, get_op, user_site, user_where
from gradjit.tracer.tensor_device import device_apply
from gradjit.tracer.tracer_setitem import VIEW_OPS

Tensor = None     # set by tracer/tensor.py
recorded = None   # tracer/tensor.py's ``_recorded``


def _unrecorded(op, out, inputs):
    """A result with no history. A view of its input (NumPy shares the memory) shares the
    input's version counter, as torch's views do: an in-place op on either is then seen by
    a backward that saved the other."""
    if op.name in VIEW_OPS and isinstance(out, np.ndarray) and inputs \
            and np.may_share_memory(out, inputs[0]._data):
        return Tensor(out, box=inputs[0]._box)
    return Tensor(out)


class EagerMethods:
    """Mixed into Tensor."""

    __slots__ = ()

    @classmethod
    def _eager(cls, op, attrs, inputs, out_types, piece, pending):
        """``_apply``'s op run at once (not deferred): NumPy now, and a node with the
        values when recorded."""
        tok = _quiet()
        try:
            res = (op.eager or op.impl)(*[t.data for t in inputs] if pending else
                                        [t._data for t in inputs], **attrs)
        finally:
            _loud(tok)
        if type(res) is tuple:
            return cls._finish(op, attrs, inputs, True, [
                np.asarray(r).astype(dt, copy=False) for r, (_, dt) in zip(res, out_types)],
                out_types, piece)
        out = np.asarray(res).astype(out_types[0][1], copy=False)
        record = inference = False
        for t in inputs:
            record = record or t._requires_grad
            inference = inference or t._inference
        if not record or not is_recording():
            return _unrecorded(op, out, inputs)
        if inference:   # _finish raises torch's error
            return cls._finish(op, attrs, inputs, True, [out], out_types, piece)
        fn = GradFn(op.name, attrs, [(t.grad_fn, t._index) if t.grad_fn is not None else t
                                     for t in inputs], out_types, [out], user_where(4))
        fn._key = piece
        t = recorded(out, fn)
        if out.dtype.kind == "f":
            tape.current().add(fn)
        else:
            t.grad_fn, t._requires_grad = None, False
        fn.versions = [(t._box, 0)]
        return t

    @classmethod
    def _finish(cls, op, attrs, ts, on_cpu, outs, out_types, piece=None):
        """Wrap the results; record a GradFn when grad mode is on and an input needs grad."""
        record = inference = False
        for t in ts:
            record = record or t._requires_grad
            inference = inference or t._inference
        if not record or not is_recording():
            return one([Tensor(o) for o in outs]) if len(outs) != 1 else _unrecorded(op, outs[0], ts)
        if inference:
            raise RuntimeError("Inference tensors cannot be saved for backward. To work around you "
                               "can make a clone to get a normal tensor and use it in autograd.")
        edges = [(t.grad_fn, t._index) if t.grad_fn is not None else t for t in ts]
        fn = GradFn(op.name, attrs, edges, out_types, outs, user_site())
        fn._key = piece
        res = [Tensor(o, grad_fn=fn, index=i)._mark(dt.kind == "f")
               for i, (o, (_, dt)) in enumerate(zip(outs, out_types))]
        fn.versions = [(t._box, 0) for t in res]
        if on_cpu and any(t.grad_fn is not None for t in res):
            tape.current().add(fn)
        return one(res)


def compute(op_name, inputs, attrs):
    """Run an op the general way: any inputs, any device. Returns ``_finish``'s arguments."""
    op = get_op(op_name)
    attrs = bind_attrs(op, attrs)
    ts = [x if isinstance(x, Tensor) else Tensor(np.asarray(x)) for x in inputs]
    # (arrays that are not tensors: gradjit's own constants, an index array; beside a CUDA
    # tensor they are copied to the device, where a CPU tensor is torch's device error)
    made = [k for k, x in enumerate(inputs) if not isinstance(x, Tensor)]
    on_device = device_apply(Tensor, op, op_name, ts, attrs, made)
    if on_device is not None:
        return (op, attrs, ts, False) + tuple(on_device)
    arrays = [t.data for t in ts]
    out_types = op.infer(arrays, attrs)
    with np.errstate(all="ignore"):
        res = (op.eager or op.impl)(*arrays, **attrs)
    res = res if isinstance(res, tuple) else (res,)
    outs = [np.asarray(r).astype(dt, copy=False) for r, (_, dt) in zip(res, out_types)]
    return op, attrs, ts, True, outs, out_types


def one(xs):
    return xs[0] if len(xs) == 1 else tuple(xs)
