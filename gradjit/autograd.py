"""``gj.autograd``: the torch.autograd-shaped API (thin wrappers, no logic)."""
from gradjit.runtime.engine import backward, grad
from gradjit.tracer.tensor import enable_grad, is_grad_enabled, no_grad, set_grad_enabled

__all__ = ["backward", "grad", "no_grad", "enable_grad", "set_grad_enabled", "is_grad_enabled"]
