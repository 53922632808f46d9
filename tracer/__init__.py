"""Stage 1: the IR, the op registry, eager Tensors and function tracing.

Imports nothing from ``gradjit.lowering`` or ``gradjit.runtime``.
"""
from gradjit.tracer import ops, ops_math, ops_reduce  # noqa: F401  (register the op set)
from gradjit.tracer import ops_index  # noqa: F401
from gradjit.tracer import ops_linalg  # noqa: F401
from gradjit.tracer.methods_index import cat, stack
from gradjit.tracer.api import register_frontend, where
from gradjit.tracer.ir import Graph, Node, Value
from gradjit.tracer.registry import OPS, GradjitError, ShapeError, get_op
from gradjit.tracer.tensor import (Tensor, enable_grad, from_numpy, is_grad_enabled, no_grad,
                                   set_grad_enabled, tensor)
from gradjit.tracer.trace import Tracer, TracerValueError

# A Tracer anywhere among an op's arguments means the call is being traced.
register_frontend(Tracer)
register_frontend(Tensor)

__all__ = ["Graph", "Node", "Value", "OPS", "get_op", "GradjitError", "ShapeError", "Tensor",
           "tensor", "from_numpy", "no_grad", "enable_grad", "set_grad_enabled",
           "is_grad_enabled", "Tracer", "TracerValueError", "where", "cat", "stack"]
