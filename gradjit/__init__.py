"""gradjit: torch-grade automatic differentiation for NumPy code, compiled by Numba.

Two ways in, one pipeline (tracer -> lowering -> runtime):

- function transforms: ``gj.jit``, ``gj.grad``, ``gj.value_and_grad``;
- tensors: ``gj.tensor(..., requires_grad=True)``, ``.backward()``,
  ``gj.autograd.grad``.

This package is the public facade only: re-exports, no logic.
"""
import numpy as _np

from gradjit import autograd
from gradjit.runtime.compiler import cache_dir, reset_stats, stats
from gradjit.runtime.explain import explain
from gradjit.runtime.memory import cache_size, clear_cache
from gradjit.runtime.threads import set_num_threads
from gradjit.runtime.tiers import set_tiering, wait as wait_compiled
from gradjit.runtime.jacobians import hessian, jacfwd, jacrev, jvp
from gradjit.runtime.transforms import grad, jit, value_and_grad
from gradjit.tracer.deferred import set_deferred
from gradjit.tracer.modes import inference_mode, is_inference_mode_enabled
from gradjit.tracer import (GradjitError, ShapeError, Tensor, TracerValueError, enable_grad,
                            from_numpy, is_grad_enabled, no_grad, set_grad_enabled, tensor, where)
from gradjit.tracer import cat, stack
from gradjit.tracer.methods_creation import stop_gradient
from gradjit.tracer.control_flow import checkpoint, cond, fori_loop, scan, while_loop
from gradjit.tracer.numpy_joins import c_, r_
from gradjit.tracer.pytree import flatten as tree_flatten, ravel_pytree, unflatten as tree_unflatten
from gradjit.tracer import linalg
from gradjit import nn
from gradjit.tracer.creation import (Generator, arange, as_tensor, empty, empty_like, eye, full,
                                     full_like, linspace, logspace, manual_seed, ones, ones_like,
                                     rand, rand_like, randint, randn, randn_like, zeros, zeros_like)
from gradjit.tracer.torch_functions import FUNCTIONS as _FUNCTIONS
from gradjit.runtime import autograd as _engine
from gradjit.runtime import cuda as _cuda
from gradjit.runtime import eager_blas as _eager_blas
from gradjit.runtime import blas_probe as _blas_probe
from gradjit.runtime import numba_patches as _numba_patches
from gradjit.tracer import hooks as _hooks

# tracer/ cannot import runtime/: the runtime plugs itself in, here only (tracer/hooks.py)
_hooks.install(backward=_engine.tensor_backward, cuda=_cuda,
               numba_type=_numba_patches.numpy_function_type,
               numba_ready=_blas_probe.prepare,
               eager={"mm.default": _eager_blas.eager_mm})

# torch-style functions (gj.add, gj.atan2, gj.logsumexp, gj.einsum ...) where gradjit has no
# name of its own (gj.where, gj.stack ... stay as they are)
globals().update({k: v for k, v in _FUNCTIONS.items() if k not in globals()})

# torch's dtype names (gj.float32, gj.long ...): NumPy's dtypes, which tensors use
float16 = half = _np.float16
float32 = float = _np.float32
float64 = double = _np.float64
int8, int16, uint8 = _np.int8, _np.int16, _np.uint8
int32 = int = _np.int32
int64 = long = _np.int64
bool = _np.bool_  # noqa: A001 (torch.bool)

__version__ = "0.1.0"
__all__ = ["autograd", "jit", "grad", "value_and_grad", "jacrev", "jacfwd", "hessian", "jvp", "explain", "tensor", "from_numpy",
           "Tensor", "no_grad", "inference_mode", "is_inference_mode_enabled", "enable_grad", "set_grad_enabled", "is_grad_enabled", "where", "cat", "stack",
           "linalg", "as_tensor", "zeros", "ones", "full", "empty", "eye", "arange", "linspace",
           "logspace", "zeros_like", "ones_like", "full_like", "empty_like", "rand", "randn", "randint",
           "rand_like", "randn_like", "Generator", "manual_seed", "stats", "reset_stats", "cache_dir", "cache_size", "clear_cache", "set_num_threads", "set_tiering", "wait_compiled", "set_deferred", "GradjitError", "ShapeError", "TracerValueError",
           "stop_gradient", "scan", "fori_loop", "while_loop", "cond", "checkpoint", "r_", "c_", "tree_flatten", "tree_unflatten", "ravel_pytree"]
