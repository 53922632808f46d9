"""In-place ops of ``Tensor`` (``add_``, ``mul_``, ``copy_``, ``fill_``, ``x[i] = v`` ...).

Contract
- Each in-place op is computed out of place through the recorded ops, then
  written into this tensor's array (``_inplace``), which becomes the output of
  the recorded node; the version counter (``_box``) is bumped, so backward
  refuses values a later in-place op changed. Leaves that require grad refuse
  in-place ops while grad mode is on, as in torch.
- The other in-place variants (``exp_``, ``clamp_``, ``addcmul_``, ``addcdiv_``,
  ``lerp_``, ``scatter_``, ``index_add_`` ...: ``_INPLACE_VARIANTS``) run the
  out-of-place method and write its result the same way.
- ``copy_`` / ``fill_`` / ``zero_`` overwrite: with grad mode on and a tensor that
  requires grad on either side they record ``where(True, src, self)``, so the old
  history gets a zero gradient and ``src`` all of it (torch's CopyBackwards /
  FillBackward); a constant that copies a tensor requiring grad starts requiring it.
- ``retain_grad`` follows the tensor to its new version (``.grad`` is the gradient
  w.r.t. the value after the last in-place op); hooks stay with the version they were
  registered on, as torch's.
- A tensor made by basic indexing of another (``y[1:]``, ``y[0]``, ``y[i]`` with a 0-d
  integer tensor, ``y[..., None]``) or another view op is, as in torch, a view: an
  in-place op on it changes ``y`` (tracer/tensor_views.py).
- A write recorded nowhere (no_grad) into a tensor with history keeps that history, as
  torch's keeps the grad_fn: later ops read the new value, gradients flow through the old
  node (``_written``); only a backward that saved the old value refuses it (versions).
- Mixed into ``Tensor`` (tracer/tensor.py), which this module imports lazily.
"""
from __future__ import annotations

import numpy as np

from gradjit.tracer import tape, tensor_views as views
from gradjit.tracer.dispatch import norm_dim
from gradjit.tracer.advanced_index import torch_split
from gradjit.tracer.device import is_device_array
from gradjit.tracer.modes import is_recording, is_inference_mode_enabled


def _int_scalar(i):
    """A 0-d integer Tensor or array (``for i in gj.arange(n): x[i]``): an int index."""
    d = getattr(i, "data", i) if isinstance(i, _tensor_class()) else i
    return isinstance(d, np.ndarray) and d.ndim == 0 and d.dtype.kind in "iu"


def _basic(index):
    items = index if isinstance(index, tuple) else (index,)
    return all(i is None or i is Ellipsis or isinstance(i, (int, np.integer, slice))
               and not isinstance(i, bool) or _int_scalar(i) for i in items)


def _norm_index(index):
    items = index if isinstance(index, tuple) else (index,)
    return tuple(int(i) if isinstance(i, np.integer) or _int_scalar(i) else i for i in items)


def _tensor_class():
    from gradjit.tracer.tensor import Tensor
    return Tensor


class InplaceMethods:
    """Mixed into Tensor."""

    __slots__ = ()

    # -- views (tracer/tensor_views.py) ------------------------------------------------
    def __getitem__(self, index):
        if _basic(index):
            items = _norm_index(index)
            with views.quiet():
                out = super().__getitem__(items[0] if len(items) == 1 else items)
            return views.register(self, out, ("getitem", (items,)))
        with views.quiet():
            return super().__getitem__(index)

    def reshape(self, *shape, **kw):
        with views.quiet():
            out = super().reshape(*shape, **kw)
        if out is self or views.is_quiet() or not views.reshape_is_view(self, out.shape):
            return out   # (a copy, as torch's reshape of a tensor it cannot view)
        return views.register(self, out, ("reshape", (out.shape,)))

    def view(self, *shape, **kw):
        with views.quiet():
            out = super().reshape(*shape, **kw)
        if out is self or views.is_quiet():
            return out
        if not views.reshape_is_view(self, out.shape):
            raise RuntimeError(f"view size is not compatible with input tensor's size and stride "
                               f"(at least one dimension spans across two contiguous subspaces). "
                               f"Use .reshape(...) instead. (shape {list(self.shape)} to "
                               f"{list(out.shape)})")
        return views.register(self, out, ("reshape", (out.shape,)))

    def squeeze(self, dim=None):
        out = super().squeeze(dim)
        return views.register(self, out, ("reshape", (out.shape,)))

    def unsqueeze(self, dim):
        out = super().unsqueeze(dim)
        return views.register(self, out, ("reshape", (out.shape,)))

    def permute(self, *dims, **kw):
        out = super().permute(*dims, **kw)
        if out is self:
            return out
        return views.register(self, out, ("permute", (_perm_of(self, dims, kw),)))

    def transpose(self, dim0, dim1):
        out = super().transpose(dim0, dim1)
        return views.register(self, out, ("transpose", (dim0, dim1)))

    swapaxes = transpose

    def t(self):
        out = super().t()
        return views.register(self, out, ("t", ()))

    def expand(self, *size, **kw):
        out = super().expand(*size, **kw)
        return views.register(self, out, ("expand", (out.shape,)))

    broadcast_to = expand

    def narrow(self, dim, start, length):
        with views.quiet():
            out = super().narrow(dim, start, length)
        d = norm_dim(int(dim), self.ndim, "narrow")
        start = int(start) + (self.shape[d] if start < 0 else 0)
        index = (slice(None),) * d + (slice(start, start + int(length)),)
        return views.register(self, out, ("getitem", (index,)))

    def diagonal(self, offset=0, dim1=0, dim2=1):
        out = super().diagonal(offset, dim1, dim2)
        return views.register(self, out, ("diagonal", (offset, dim1, dim2)))

    def split(self, split_size_or_sections=None, dim=0, *, split_size=None):
        with views.quiet():
            outs = super().split(split_size_or_sections, dim, split_size=split_size)
        d, off = norm_dim(int(dim), self.ndim, "split"), 0
        for i, out in enumerate(outs):
            n = out.shape[d]
            index = (slice(None),) * d + (slice(off, off + n),)
            views.register(self, out, ("getitem", (index,)),
                           multi=("Split", i) if len(outs) > 1 else None)
            off += n
        return outs

    def unbind(self, dim=0):
        with views.quiet():
            outs = super().unbind(dim)
        d = norm_dim(int(dim), self.ndim, "unbind")
        for i, out in enumerate(outs):
            views.register(self, out, ("getitem", ((slice(None),) * d + (i,),)),
                           multi=("Unbind", i))
        return outs

    def _inplace(self, result):
        """Write ``result`` (computed out of place, recorded with edges to the old self)
        into this tensor's array and make this tensor the output of that node."""
        v = views.info(self)
        if v is not None:   # a view: the base is rewritten, and the view re-derived from it
            return views.write_view(self, v, result)
        if result.grad_fn is None and self.grad_fn is not None \
                and not is_inference_mode_enabled():
            result = _written(self, result)
        tape.flush()   # deferred values computed before the write (tracer/deferred.py)
        if self._inference and not is_inference_mode_enabled():
            raise RuntimeError("Inplace update to inference tensor outside InferenceMode is not "
                               "allowed. You can make a clone to get a normal tensor before doing "
                               "inplace update.")
        if result.shape != self.shape:
            raise RuntimeError(f"output with shape {list(self.shape)} doesn't match the broadcast "
                               f"shape {list(result.shape)}")
        if is_device_array(self.data):
            src = result.data if result.dtype == self.dtype else result.to(self.dtype).data
            self.data.copy_to_device(src)
        else:
            np.copyto(self.data, result.data, casting="unsafe")
        self._box[0] += 1
        fn = result.grad_fn
        if fn is not None:
            fn.out_data[result._index] = self.data
            fn.versions[result._index] = (self._box, self._box[0])
            _move_retain(self, fn, result._index)
            self.grad_fn, self._index, self._requires_grad = fn, result._index, True
        views.refresh(self)
        return self

    def _apply_inplace(self, fn, name, *others):
        """``fn(self)`` written into this tensor (``<name>``: torch's in-place variant, and
        ``F.relu(x, inplace=True)`` ...), computed from ``_original`` (the backward of some
        of these reads the input, which the write replaces; ``others``: the operands)."""
        self._check_inplace(name)
        return self._inplace(fn(self._original(*others)))

    def _check_inplace(self, name):
        if is_recording() and self.grad_fn is None and self._requires_grad:
            raise RuntimeError(f"a leaf Variable that requires grad is being used in an in-place "
                               f"operation ({name}).")

    def add_(self, other, alpha=1):
        self._check_inplace("add_")
        return self._inplace(self.add(other, alpha=alpha))

    def sub_(self, other, alpha=1):
        self._check_inplace("sub_")
        return self._inplace(self.sub(other, alpha=alpha))

    def _original(self, *others):
        """The value before an in-place op, for ops whose backward reads it (mul, div,
        pow, lerp ...): a recorded copy, as torch saves the original ``self`` for such
        ops. A constant combined with a tensor that requires grad is saved as a snapshot:
        the write would otherwise change the saved value (a false version error)."""
        if not is_recording():
            return self
        if self._requires_grad:
            return self + np.zeros((), self.dtype)
        if any(getattr(o, "_requires_grad", False) for o in others):
            return _tensor_class()(self.data.copy())
        return self

    def mul_(self, other):
        self._check_inplace("mul_")
        return self._inplace(self._original(other).mul(other))

    def div_(self, other, *, rounding_mode=None):
        self._check_inplace("div_")
        return self._inplace(self._original(other).div(other, rounding_mode=rounding_mode))

    def pow_(self, exponent):
        self._check_inplace("pow_")
        return self._inplace(self._original(exponent).pow(exponent))

    def copy_(self, src):
        """Copy ``src`` (broadcast, cast) into this tensor; gradient flows to ``src`` only."""
        self._check_inplace("copy_")
        Tensor = _tensor_class()
        src = src if isinstance(src, Tensor) else Tensor(np.asarray(src))
        return self._inplace(self._overwritten(src.expand(self.shape).to(self.dtype)))

    def zero_(self):
        return self.fill_(0)

    def fill_(self, value):
        self._check_inplace("fill_")
        return self._inplace(self._overwritten(
            _tensor_class()(np.full(self.shape, value, self.dtype))))

    def detach_(self):
        """Make this tensor a leaf that does not require grad, keeping its values (torch's)."""
        self.data   # (a deferred value: computed first)
        self.grad_fn, self._index, self._requires_grad = None, 0, False
        return self

    def _overwritten(self, new):
        """``new`` as the result of an op that replaces this tensor's value. Recorded as
        ``where(True, new, self)`` when either side requires grad: the old history then
        gets a zero gradient instead of keeping its place in the graph (its recorded
        value would stand in for ``new``), and ``new`` gets the whole gradient even when
        it is a leaf (``expand`` / ``to`` of a leaf return the leaf, with no node)."""
        if is_recording() and (self._requires_grad or new._requires_grad):
            from gradjit.tracer.api import where
            if is_device_array(self.data) and not is_device_array(new.data):
                new = new.to(device="cuda")   # (differentiable; ops never mix devices)
            return where(_tensor_class()(np.ones((), np.bool_)), new, self)
        return new

    def __setitem__(self, index, value):
        """``x[index] = value`` with NumPy's index rules (ints, slices, None, Ellipsis,
        integer arrays, masks; the last write wins on repeats), ints applied first as
        torch's (``torch_split``). On a tensor with history
        or a value that requires grad it is a recorded, differentiable in-place op:
        gradients flow to the untouched part of ``x`` and to ``value``. On a view it
        writes through to the base (tracer/tensor_views.py)."""
        Tensor = _tensor_class()
        tape.flush()   # deferred values computed before the write (tracer/deferred.py)
        index = _concrete_index(index, Tensor)
        v = value if isinstance(value, Tensor) else None
        if not (is_recording() and (self._requires_grad or (v is not None and v._requires_grad))):
            if views.info(self) is not None or self.grad_fn is not None:
                # (a view: through the base, whose array its own may copy; a tensor with
                # history: its new value is fed to later ops, ``_written``)
                new = Tensor(np.array(self.data, copy=True))
                new.__setitem__(index, value)
                self._inplace(new)
                return
            split = torch_split(index)
            if split is None:
                self.data[index] = np.asarray(getattr(value, "data", value))
            else:
                self.data[split[0]][split[1]] = np.asarray(getattr(value, "data", value))
            self._box[0] += 1
            views.refresh(self)
            return
        self._check_inplace("__setitem__")
        self._inplace(self._assigned(index, value))

    def _assigned(self, index, value):
        """This tensor with ``value`` assigned at ``index``, out of place (recorded)."""
        Tensor = _tensor_class()
        from gradjit.tracer.api import apply, where
        index = _concrete_index(index, Tensor)
        split = torch_split(index)   # (ints first, as torch: x[1, :, [1, 4]] is (4, 2) there)
        v = value if isinstance(value, Tensor) else None
        n = self.data.size
        pos = np.arange(n).reshape(self.shape)
        pos = pos[index] if split is None else pos[split[0]][split[1]]
        flat_pos = np.asarray(pos).reshape(-1)
        targets, first_rev = np.unique(flat_pos[::-1], return_index=True)
        keep = (len(flat_pos) - 1 - first_rev).astype(np.int64)  # last occurrence of each target
        with views.quiet():
            v = (v if v is not None else Tensor(np.asarray(value))).to(self.dtype)
            vals = v.expand(np.shape(pos)).reshape(-1)
            if len(keep) != len(flat_pos) or np.any(keep != np.arange(len(keep))):
                vals = apply("index_select.default", [vals, Tensor(keep)], {"dim": 0})
            placed = apply("index_add.default", [Tensor(np.zeros(n, self.dtype)),
                                                 Tensor(targets.astype(np.int64)), vals],
                           {"dim": 0})
            mask = np.zeros(n, np.bool_)
            mask[targets] = True
            return where(Tensor(mask), placed, self.reshape(-1)).reshape(self.shape)

    __iadd__ = add_
    __isub__ = sub_
    __imul__ = mul_
    __itruediv__ = div_


def _inplace_variant(name):
    """``x.<name>_(...)``: ``x.<name>(...)`` written into ``x`` (torch's in-place variant),
    computed from ``_original`` (the backward of some of these reads the input, which
    the write replaces)."""
    def method(self, *args, **kwargs):
        return self._apply_inplace(lambda src: getattr(src, name)(*args, **kwargs), f"{name}_",
                                   *args, *kwargs.values())
    method.__name__ = method.__qualname__ = f"{name}_"
    return method


_INPLACE_VARIANTS = (
    "exp", "log", "log1p", "expm1", "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "neg", "abs",
    "sin", "cos", "reciprocal", "floor", "ceil", "round", "trunc", "clamp", "clamp_min",
    "clamp_max", "masked_fill", "square", "sign", "sinc",
    # with tensor arguments (optimizers: addcmul_, addcdiv_, lerp_)
    "addcmul", "addcdiv", "lerp", "scatter", "scatter_add", "index_add", "index_put")


def _written(t, value):
    """``value`` (computed without history) as the new value of ``t``, which has history:
    torch's no-grad in-place write into such a tensor keeps its grad_fn, and later ops
    read the new value. Recorded (grad mode on for it alone) as ``_written(t, value)``:
    the value is ``value``'s, the gradient goes to ``t``'s old node, and the deferred
    engine, which computes forwards again from the leaves, reads the written array (a
    constant) instead of computing ``t`` again from its history."""
    from gradjit.tracer.dispatch import apply
    from gradjit.tracer.modes import enable_grad
    Tensor = _tensor_class()
    with views.quiet():
        if value.dtype != t.dtype:
            value = value.to(t.dtype)
        value = Tensor(np.array(value.data, copy=True))
        with enable_grad():
            return apply("_written.default", [t, value], {})


def _move_retain(t, fn, index):
    """``t.retain_grad()`` asked on its old version now asks on the new one (``fn``'s
    output ``index``), as torch's retains_grad follows the tensor."""
    old = t.grad_fn
    if old is None or not old.retains or old.retains.get(t._index, lambda: None)() is not t:
        return
    ref = old.retains.pop(t._index)
    table = fn.retains = fn.retains or {}
    table[index] = ref
    tape.mark_special(fn)


def _perm_of(t, dims, kw):
    from gradjit.tracer.dispatch import sizes_arg
    dims = sizes_arg("permute", dims, kw.get("dims"), {})
    return tuple(norm_dim(int(d), t.ndim, "permute") for d in dims)


def _concrete_index(index, Tensor):
    def one(i):
        return i.data if isinstance(i, Tensor) else i
    return tuple(one(i) for i in index) if isinstance(index, tuple) else one(index)


for _name in _INPLACE_VARIANTS:
    setattr(InplaceMethods, f"{_name}_", _inplace_variant(_name))
