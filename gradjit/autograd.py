"""``gj.autograd``: the torch.autograd-shaped API (thin wrappers, no logic)."""
from gradjit.runtime import function
from gradjit.runtime.autograd import backward, grad
from gradjit.runtime.function import Function, FunctionCtx, once_differentiable
from gradjit.tracer.modes import (detect_anomaly, enable_grad, inference_mode,
                                  is_anomaly_enabled, is_grad_enabled, no_grad, set_detect_anomaly,
                                  set_grad_enabled)

__all__ = ["backward", "grad", "Function", "FunctionCtx", "once_differentiable", "function",
           "no_grad", "enable_grad", "set_grad_enabled", "is_grad_enabled", "inference_mode",
           "detect_anomaly", "set_detect_anomaly", "is_anomaly_enabled"]
from gradjit.runtime import functional  # noqa: E402
from gradjit.runtime.checks import GradcheckError, gradcheck, gradgradcheck  # noqa: E402

__all__ += ["functional", "gradcheck", "gradgradcheck", "GradcheckError"]
