"""Fake ``autograd`` package: autograd 1.7.0's public API mapped onto gradjit.

Contract: ``import autograd`` (with ``bench/heldout/adapter`` first on sys.path) gives
grad, value_and_grad, elementwise_grad, jacobian, hessian, make_vjp, make_jvp, deriv
(differential_operators.py) and the submodules autograd's tests import. Anything the
adapter cannot express (autograd's primitive/VSpace internals) skips the test with
``ADAPTER-LIMITATION`` (adapter_limits.py), which the bench counts apart from gradjit
failures.

``autograd.numpy`` is plain NumPy (``.random``, ``.linalg``, ``.fft`` too): the tests' NumPy
calls then reach gradjit's tracers through NumPy's ``__array_ufunc__`` /
``__array_function__`` protocols, which is what the bench measures.
"""
import sys as _sys
import numpy as _np

from . import checker as _checker

_sys.modules[__name__ + ".numpy"] = _np
_sys.modules[__name__ + ".numpy.random"] = _np.random
_sys.modules[__name__ + ".numpy.linalg"] = _np.linalg
_sys.modules[__name__ + ".numpy.fft"] = _np.fft
# The checker is autograd.test_util; its file is not named test_*.py so that no pytest
# run over the repository collects it.
_sys.modules[__name__ + ".test_util"] = _checker
numpy = _np
test_util = _checker

from .differential_operators import (grad, value_and_grad, elementwise_grad, jacobian,  # noqa: E402,F401
                                     hessian, make_vjp, make_jvp, deriv)
from .builtins import isinstance, type, tuple, list, dict  # noqa: E402,F401
from .adapter_limits import primitive  # noqa: E402,F401
