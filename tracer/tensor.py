"""``Tensor`` (torch.autograd-like): ops are recorded; values come from NumPy.

Contract
- ``Tensor.data`` is always a NumPy array (or a device array). An op on
  tensors checks its types at once; when grad mode is on and an input
  requires grad, it records a ``GradFn`` (tracer/gradfn.py: the op, its
  attributes, edges to its inputs, and its output arrays, which are the
  values backward may need). Recorded ops of the deferrable kinds compute
  their value when it is first read (tracer/deferred.py: ``_data`` is None
  until then, and ``data`` computes it); every other op runs its NumPy
  reference at once (tracer/tensor_eager.py). A step like the last one
  replays its record (tracer/replay.py); the front end's type cache is
  tracer/seen.py.
- Edges point at the producing ``GradFn`` (non-leaf) or at the input
  ``Tensor`` itself (leaf or constant), never at intermediate Tensor objects,
  so freeing ``GradFn.out_data`` after backward really frees the saved arrays.
- ``tracer/record.py`` turns the recorded history into an IR ``Graph``. The
  backward engine lives in ``runtime/`` and is reached through
  ``tracer/hooks.py`` (stages import one way).
- Hooks (``register_hook``) and ``retain_grad`` are stored where the engine
  finds them: on a leaf Tensor, or on the producing ``GradFn`` (by output
  index) for a non-leaf. Every array a GradFn saves carries a version box;
  in-place ops bump it, and backward refuses values whose version changed.
"""
from __future__ import annotations

from sys import _getframe
import weakref

import numpy as np

from gradjit.tracer import tape
from gradjit.tracer.registry import real_only, user_caller as _user_caller
from gradjit.tracer.tape import _local as _tape_local
from gradjit.tracer import replay as _replay
from gradjit.tracer.seen import SEEN as _SEEN, deferrable as _deferrable, seen as _seen
from gradjit.tracer.gradfn import FREED, GradFn, HookHandle, LeafHooks  # noqa: F401 (GradFn)
from gradjit.tracer.deferred import _ENABLED as _DEFER, _KINDS as _DEFER_KINDS, compute_pending
from gradjit.tracer.api import ArrayOps
from gradjit.tracer.modes import (enable_grad, is_grad_enabled, is_inference_mode_enabled,  # noqa: F401
                                  no_grad, set_grad_enabled, _state as _modes)
from gradjit.tracer.device import canonical, is_device_array
from gradjit.tracer.hooks import HOOKS
from gradjit.tracer.registry import (LAST_USER_CODE as _LAST_USER_CODE, GradjitError, bind_attrs,
                                     get_op, is_user_code as _is_user_code, user_site,
                                     user_where)
from gradjit.tracer.tensor_device import DeviceMethods
from gradjit.tracer.tensor_grad import GradMethods
from gradjit.tracer.tensor_inplace import InplaceMethods
from gradjit.tracer import tensor_views as views
from gradjit.tracer import tensor_eager as _eager_mod
from gradjit.tracer.tensor_eager import EagerMethods, compute as _compute


class Tensor(GradMethods, EagerMethods, InplaceMethods, DeviceMethods, ArrayOps):
    __slots__ = ("_data", "_requires_grad", "_grad", "grad_fn", "_index", "_hooks", "_box",
                 "_inference", "_ty", "__weakref__")

    def __init__(self, data, requires_grad=False, grad_fn=None, index=0, box=None):
        self._data = data   # None while pending (tracer/deferred.py)
        self._grad = None
        self.grad_fn = grad_fn
        self._index = index
        self._requires_grad = False
        self._hooks = None
        self._box = box if box is not None else [0]  # version counter, shared by aliases
        self._inference = is_inference_mode_enabled()
        self._ty = None   # a pending Tensor's type token (tracer/seen.py)
        if requires_grad:
            self.requires_grad = True

    # -- properties -----------------------------------------------------------------
    @property
    def data(self):
        d = self._data
        if d is None:   # a deferred op's value: computed now (with its pending inputs), or
            fn = self.grad_fn   # already, and kept by its node (GradFn.held)
            if fn.out_data is None:
                compute_pending([fn])
                if fn.out_data is None:   # (freed: cannot happen while this Tensor holds it)
                    raise RuntimeError(FREED)
            d = self._data = fn.out_data[self._index]
            if _user_caller(1):
                tape.handing_out(d)   # the caller may write into it (y.data[:] = 0)
        elif (tp := _tape_local.tape) is not None and tp.pending() and _user_caller(1):
            tape.handing_out(d)   # the caller may write into it (c.data[:] = ...)
        return d

    @data.setter
    def data(self, value):
        tape.forget(self)   # (its type recorded at first use may no longer hold)
        # torch's x.data = y takes y's array: a Tensor stored as the data broke every op
        self._data = value.data if isinstance(value, Tensor) else value

    @property
    def shape(self):
        d = self._data
        return tuple(d.shape) if d is not None else self.grad_fn.out_types[self._index][0]

    @property
    def dtype(self):
        d = self._data
        return d.dtype if d is not None else self.grad_fn.out_types[self._index][1]

    is_leaf = property(lambda self: self.grad_fn is None)

    @property
    def requires_grad(self):
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, flag):
        if flag and self.data.dtype.kind != "f":
            raise GradjitError(f"Only Tensors of floating point dtype can require gradients "
                               f"(got a tensor of dtype {self.data.dtype.name} and shape "
                               f"{self.data.shape})", user_site())
        if self.grad_fn is not None and not flag:
            raise RuntimeError("you can only change requires_grad flags of leaf variables.")
        if bool(flag) != self._requires_grad:
            tape.forget(self)   # (as the data setter)
        self._requires_grad = bool(flag)

    def requires_grad_(self, flag=True):
        self.requires_grad = flag
        return self

    def numpy(self):
        if is_device_array(self.data):
            raise TypeError("can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() "
                            "to copy the tensor to host memory first.")
        if self._requires_grad:
            raise RuntimeError("Can't call numpy() on Tensor that requires grad. "
                               "Use tensor.detach().numpy() instead.")
        if (tp := _tape_local.tape) is not None and tp.pending() and _user_caller(1):
            tape.handing_out(self.data)   # (shared memory the caller may write: as .data)
        return self.data

    def __array__(self, dtype=None, copy=None):
        # NumPy 2's protocol: copy=True (np.array's default) must not hand out the tensor's
        # own buffer, or writing to the "copy" would change the tensor; copy=False must
        # not copy (a dtype change then cannot be honoured).
        if is_device_array(self.data):
            self.numpy()
        data = self.data
        if (tp := _tape_local.tape) is not None and tp.pending() and _user_caller(1) \
                and not copy:
            tape.handing_out(data)   # (np.asarray(t) shares memory the caller may write)
        if dtype is not None and np.dtype(dtype) != data.dtype:
            if copy is False:
                raise ValueError(f"np.asarray(tensor, dtype={np.dtype(dtype).name}, copy=False): "
                                 f"the tensor is {data.dtype.name}, so a copy is needed")
            return data.astype(dtype)
        return data.copy() if copy else data

    def detach(self):
        # an alias: same data, same version counter; writes into it reach this tensor's
        # history and views (tracer/tensor_views.py)
        return views.detached(self, Tensor(self.data, box=self._box))

    @property
    def _version(self):
        return self._box[0]

    # -- hooks ----------------------------------------------------------------------------
    def register_hook(self, hook):
        """``hook(grad) -> Tensor or None`` runs when this tensor's gradient is computed;
        a returned tensor replaces the gradient. Returns a handle with ``remove()``."""
        if not self._requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        if self.grad_fn is None:
            if self._hooks is None:
                self._hooks = LeafHooks()
            hooks = self._hooks
        else:
            table = self.grad_fn.hooks = self.grad_fn.hooks or {}
            hooks = table.setdefault(self._index, [])
            tape.mark_special(self.grad_fn)
        hooks.append(hook)
        return HookHandle(hooks, hook)

    def retain_grad(self):
        """Keep ``.grad`` for this non-leaf tensor after backward (leaves always do)."""
        if not self._requires_grad:
            raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
        if self.grad_fn is not None:
            table = self.grad_fn.retains = self.grad_fn.retains or {}
            table[self._index] = weakref.ref(self)
            tape.mark_special(self.grad_fn)

    @property
    def retains_grad(self):
        fn = self.grad_fn
        return bool(fn is not None and fn.retains and self._index in fn.retains)

    def item(self):
        if self.data.size != 1:
            raise ValueError(f"a Tensor with {self.data.size} elements cannot be converted to Scalar")
        return self._host().item()

    def tolist(self):
        return self._host().tolist()

    def _host(self):
        return self.data.copy_to_host() if is_device_array(self.data) else self.data

    def __bool__(self):
        return bool(self.item())

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    def __repr__(self):
        body = np.array2string(self._host(), separator=", ", prefix="tensor(")
        extra = ", device='cuda:0'" if is_device_array(self.data) else ""
        if self.data.dtype != np.float64:
            extra += f", dtype={self.data.dtype.name}"
        if self.grad_fn is not None:
            extra += f", grad_fn={self.grad_fn!r}"
        elif self._requires_grad:
            extra += ", requires_grad=True"
        return f"tensor({body}{extra})"

    def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
        if (tp := _tape_local.tape) is not None and tp.handed:
            tape.check_handed(tp)   # (memory handed out and written: no joint plan)
        # A plain backward of a step that replayed (tracer/replay.py) whole: its backward as
        # runtime/fast_backward.py wrote it out (``take``: None when it does not apply).
        if (gradient is None and (tp := _tape_local.tape) is not None
                and (ex := tp.exp) is not None and ex.take is not None and self._data is None
                and not retain_graph and not create_graph and inputs is None
                and ex.take(tp, self)):
            return
        HOOKS.backward(self, gradient, retain_graph, create_graph, inputs)

    # -- ops ------------------------------------------------------------------------------
    def _const(self, array):
        """An array gradjit makes beside this tensor (an index, a mask, a fill), on its
        device: copied to the GPU once beside a CUDA tensor (a CPU array there is refused)."""
        a = np.asarray(array)
        d = self._data   # (None: a deferred op's value, always on the CPU)
        if d is not None and d.__class__ is not np.ndarray and is_device_array(d):
            return type(self)(HOOKS.cuda.to_device(np.ascontiguousarray(a)))
        return type(self)(a)

    @classmethod
    def _apply(cls, op_name, inputs, attrs):
        # The hot path: CPU tensors whose op, types and attributes were seen before skip
        # argument binding and shape inference (the cache holds their results) and are
        # recorded inline. Keep it lean: it runs once per op of every eager step.
        # The key: the op, each input's type (a pending input's type token, else its
        # array's shape and dtype: an int never equals a tuple, so the forms cannot
        # collide) and the attributes. A step like the last one replays its record instead
        # (tracer/replay.py: no type lookup, no key to build).
        tp = _tape_local.tape
        if (tp is not None and (ex := tp.exp) is not None and _modes.enabled and _DEFER[0]
                and (ty := ex.matchers[len(tp.nodes)](tp, op_name, attrs, inputs))):
            fn = tp.nodes[-1]   # recorded as the last step's entry
        else:
            key = [op_name]
            pending = False
            for x in inputs:
                if x.__class__ is not Tensor:
                    return cls._finish(*_compute(op_name, inputs, attrs))
                d = x._data
                if d is None:   # deferred: its type is recorded
                    key.append(x._ty)
                    pending = True
                elif d.__class__ is not np.ndarray:
                    return cls._finish(*_compute(op_name, inputs, attrs))
                else:
                    key += (d.shape, d.dtype)
            if attrs:
                key += tape.attrs_key(attrs)
            key = tuple(key)
            try:
                hit = _SEEN.get(key)
            except TypeError:            # an unhashable attribute
                return cls._finish(*_compute(op_name, inputs, attrs))
            if hit is None:
                if len(_SEEN) >= 8192:
                    _SEEN.clear()
                    _replay.SEEN_BY_PIECE.clear()
                op = get_op(op_name)
                if op.kind not in _DEFER_KINDS or not _DEFER[0]:
                    done = _compute(op_name, inputs, attrs)
                    _SEEN[key] = _seen(op_name, attrs, done[0], done[1], done[5], len(inputs),
                                       _deferrable(op, done[5]))
                    return cls._finish(*done)
                # Deferrable: only the types are needed now (their inference reads no
                # values, so pending inputs stand in as zero-size broadcasts of their types).
                bound = bind_attrs(op, attrs)
                out_types = op.infer([t._data if t._data is not None else
                                      np.broadcast_to(np.zeros((), t.dtype), t.shape)
                                      for t in inputs], bound)
                hit = _SEEN[key] = _seen(op_name, attrs, op, bound, out_types, len(inputs),
                                         _deferrable(op, out_types))
            op, attrs, out_types, piece, ty = hit
            fn = None
            if ty and _DEFER[0] and _modes.enabled:
                fn = (tp or tape.current()).push(op.name, attrs, inputs, out_types, piece)
            if fn is None:
                return cls._eager(op, attrs, inputs, out_types, piece, pending)
        # Recorded, pending (inline: the hot path of a step). The user's line, looked up
        # when read (GradFn.site): user_where(3), from _apply's caller's caller (only
        # gradjit calls _apply, and making the frame objects of the frames skipped unseen
        # is most of the walk's cost), written out for the usual case that frame is the
        # user's (registry.LAST_USER_CODE: the last such code object needs no look-up of
        # its file).
        try:
            f = _getframe(2)
            code = f.f_code
            if code is _LAST_USER_CODE[0] or _is_user_code(code):
                fn._site, fn._lasti = code, f.f_lasti
            else:
                fn._site = user_where(3)
        except ValueError:   # no Python caller there (an op called from C)
            fn._site = None
        t = _NEW(Tensor)
        t._data = None
        t._grad = None
        t.grad_fn = fn
        t._index = 0
        t._requires_grad = True
        t._hooks = None
        t._box = [0]
        t._inference = False
        t._ty = ty
        fn._vbox = t._box   # (also how backward tells it is held: GradFn.held)
        return t

    def clone(self):
        return self + np.zeros((), self.dtype) if self._requires_grad else Tensor(self.data.copy())

    def _mark(self, differentiable):
        if differentiable:
            self._requires_grad = True
        else:
            self.grad_fn = None  # integer/bool outputs never carry gradients
        return self


_replay.Tensor = Tensor
_eager_mod.Tensor = Tensor


def _recorded(data, fn):
    """``Tensor(data, grad_fn=fn)`` (requires_grad set when ``fn`` is given) without the
    general constructor (a fifth of its cost): the recording and backward hot paths."""
    t = _NEW(Tensor)
    t._data = data
    t._grad = None
    t.grad_fn = fn
    t._index = 0
    t._requires_grad = fn is not None
    t._hooks = None
    t._box = [0]
    t._inference = _modes.inference
    t._ty = None
    return t


_eager_mod.recorded = _recorded
_NEW = object.__new__


def plain_tensor(data):
    """``Tensor(data)`` without the general constructor (the backward fast path; written
    out, not ``_recorded(data, None)``: one call less per gradient). Every slot is set
    here, in ``_recorded`` and in ``_apply``, one statement each (a tuple to unpack
    costs more); tests/runtime/test_fast_backward.py checks all three."""
    t = _NEW(Tensor)
    t._data = data
    t._grad = None
    t.grad_fn = None
    t._index = 0
    t._requires_grad = False
    t._hooks = None
    t._box = [0]
    t._inference = _modes.inference
    t._ty = None
    return t


def accumulated(old, g):
    """``old`` (a leaf's ``.grad``) after a backward adds ``g`` (an array) to it: added into
    its own array, as torch accumulates (a reference to ``.grad`` sees the sum), when the
    array can hold the sum; else a new tensor."""
    d = old.data
    if (d.__class__ is np.ndarray and d.flags.writeable and d.shape == np.shape(g)
            and d.dtype == getattr(g, "dtype", None)):
        np.add(d, g, out=d)
        old._box[0] += 1   # (a version: backward refuses a value changed under it)
        return old
    return plain_tensor(d + g)


def tensor(data, requires_grad=False, dtype=None, device=None):
    """A new leaf tensor holding a copy of ``data`` (as ``torch.tensor``), on ``device``."""
    if isinstance(data, Tensor):
        data = data._host()
    elif is_device_array(data):
        data = data.copy_to_host()
    array = np.array(data, dtype=dtype, copy=True)
    real_only(array.dtype, "gj.tensor's data")
    if canonical(device) == "cuda":
        HOOKS.cuda.require("gj.tensor(..., device='cuda')")
        array = HOOKS.cuda.to_device(array)
    return Tensor(array, requires_grad=requires_grad)


def from_numpy(array):
    """A tensor sharing memory with ``array`` (as ``torch.from_numpy``)."""
    return Tensor(np.asarray(array))
