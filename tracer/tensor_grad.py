"""``Tensor.grad`` as a checked attribute (mixed into ``Tensor``, tracer/tensor.py).

Contract
- Reading ``t.grad`` gives the stored gradient (a Tensor, or None).
- Assigning it checks as torch does, with torch's messages: None or a Tensor
  (TypeError otherwise), not the tensor itself, of the tensor's shape and dtype,
  on its device. A gradient of another shape used to be stored and to break (or
  silently broadcast into) the next accumulation.
- ``register_post_accumulate_grad_hook(hook)`` (leaves only, torch's errors):
  ``hook(tensor)`` runs after backward accumulated the leaf's ``.grad``
  (runtime/autograd.py's ``backward``; ``autograd.grad`` accumulates nothing).
- ``is_inference()``: made under inference mode (tracer/modes.py).
- gradjit's own writers (the backward engines: runtime/autograd.py,
  runtime/fast_backward.py, and the constructors) store ``_grad`` directly: their
  gradients have the tensor's type by construction, and they run once per leaf of
  every step.
"""
from __future__ import annotations

from gradjit.tracer.device import is_device_array
from gradjit.tracer.gradfn import HookHandle, LeafHooks


class GradMethods:
    """Mixed into Tensor (which holds the ``_grad`` slot)."""

    __slots__ = ()

    @property
    def grad(self):
        return self._grad

    @grad.setter
    def grad(self, g):
        if g is not None:
            _check_grad(self, g)
        self._grad = g

    def is_inference(self):
        return self._inference

    def register_post_accumulate_grad_hook(self, hook):
        """``hook(self) -> None`` runs after backward accumulated this leaf's ``.grad``
        (in the grad mode of that backward: off unless create_graph=True, as torch).
        Returns a handle with ``remove()``."""
        if not self._requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        if self.grad_fn is not None:
            raise RuntimeError("post accumulate grad hooks cannot be registered on non-leaf "
                               "tensors")
        if self._hooks is None:
            self._hooks = LeafHooks()
        self._hooks.post.append(hook)
        return HookHandle(self._hooks.post, hook)


def run_post_accumulate_hooks(t):
    """After ``t.grad`` was accumulated: its post-accumulate-grad hooks. What a hook
    returns is ignored, as torch does, when it is None or a Tensor (``p.add_(...)``
    returns ``p``); anything else raises, as torch's TypeError."""
    for h in list(t._hooks.post):
        r = h(t)
        if r is not None and not isinstance(r, GradMethods):
            raise TypeError(f"a post accumulate grad hook must return None, but {h!r} "
                            f"returned a {type(r).__name__}")


def _check_grad(t, g):
    if not isinstance(g, GradMethods):
        raise TypeError(f"assigned grad expected to be a Tensor or None but got grad of type "
                        f"{type(g).__name__}")
    if g is t:
        raise RuntimeError("can't assign Variable as its own grad")
    if is_device_array(g.data) != is_device_array(t.data):
        raise RuntimeError("assigned grad has data located on a different device")
    if g.dtype != t.dtype:
        raise RuntimeError(f"attempting to assign a gradient with dtype '{g.dtype.name}' to a "
                           f"tensor with dtype '{t.dtype.name}'. The gradient must match the "
                           f"tensor's dtype")
    if tuple(g.shape) != tuple(t.shape):
        raise RuntimeError(f"attempting to assign a gradient of size '{list(g.shape)}' to a "
                           f"tensor of size '{list(t.shape)}'. Please ensure that the gradient "
                           f"and the tensor are the same size")
