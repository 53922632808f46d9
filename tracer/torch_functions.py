"""torch-style module functions: ``gj.add(a, b, alpha=2)``, ``gj.atan2(y, x)``, ``gj.einsum``,
``gj.tensordot``, ``gj.cdist``.

Contract: ``FUNCTIONS`` maps each torch-named method of the op surface
(``ArrayOps``) to a function of the same name taking the tensor first, as
``torch.<name>(input, ...)`` does, and returning what ``input.<name>(...)``
returns on a tensor: the same values, and the same views (``gj.narrow(h, ...)``
writes through to ``h`` as ``h.narrow(...)`` does). On a ``Tensor`` it calls the
tensor's own method (the class may override the op-surface one: views, ``clone``,
``detach``); on a traced value it calls the torch-named method unbound (a traced
value's own methods follow NumPy). A first argument that is not a gradjit value
becomes a constant beside the first gradjit value among the others, or a
``gj.tensor``.
"""
from __future__ import annotations

import numpy as np

from gradjit.tracer.api import ArrayOps
from gradjit.tracer.einsum import einsum
from gradjit.tracer.methods_linalg import tensordot

# Methods that are not torch module functions (conversions, constructors, shape queries).
_NOT_FUNCTIONS = {"to", "type_as", "astype", "float", "double", "view", "view_as", "reshape_as",
                  "expand_as", "contiguous", "size", "dim", "expand", "new_empty", "new_full",
                  "new_ones", "new_tensor", "new_zeros", "index_put", "half", "long", "int",
                  "bool", "type"}   # (torch.half, torch.long ... are dtypes: gradjit/__init__)


_TENSOR = []   # (Tensor, tensor), imported at the first call: tensor.py imports the API


def _tensor():
    if not _TENSOR:
        from gradjit.tracer.tensor import Tensor, tensor
        _TENSOR.extend((Tensor, tensor))
    return _TENSOR


def _function(name):
    method = getattr(ArrayOps, name)

    def fn(input, *args, **kwargs):
        Tensor, tensor = _TENSOR or _tensor()
        if not isinstance(input, ArrayOps):
            like = next((a for a in args if isinstance(a, ArrayOps)), None)
            input = like._const(np.asarray(input)) if like is not None else tensor(input)
        if isinstance(input, Tensor):
            return getattr(input, name)(*args, **kwargs)   # (its class's: views, clone ...)
        return method(input, *args, **kwargs)
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"``gj.{name}(input, ...)``: torch's ``{name}``, as ``input.{name}(...)`` on a tensor."
    return fn


FUNCTIONS = {name: _function(name) for name in dir(ArrayOps)
             if not name.startswith("_") and name not in _NOT_FUNCTIONS
             and callable(getattr(ArrayOps, name)) and not isinstance(getattr(ArrayOps, name), property)}
FUNCTIONS["einsum"] = einsum
FUNCTIONS["tensordot"] = tensordot   # (torch.tensordot(a, b, dims=2); no tensor method)


def cdist(x1, x2, p=2.0, compute_mode=None):
    """``torch.cdist``: pairwise p-norm distances (``gj.nn.functional.cdist``)."""
    from gradjit.tracer.nn_layers import cdist as pairwise   # (nn_layers imports the API)
    return pairwise(x1, x2, p=p, compute_mode=compute_mode)


FUNCTIONS["cdist"] = cdist
