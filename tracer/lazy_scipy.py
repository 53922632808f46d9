"""SciPy, imported on first use.

Contract
- ``special(name)`` / ``linalg(name)``: a callable that forwards its arguments to
  ``scipy.special.<name>`` / ``scipy.linalg.<name>``, importing that SciPy module on its
  first call (and keeping the function: later calls cost one Python call more).

Why: importing SciPy's special or linalg module costs about 0.15 s (most of it SciPy's
array-API layer), a third of ``import gradjit``, and the functions gradjit takes from it
(reference implementations of erf, lgamma, sigmoid, logsumexp, solve_triangular ...)
run only when such an op is evaluated in NumPy (the interpreter, tensor mode's eager
ops). Compiled code does not call them.
"""
from __future__ import annotations

import importlib


def _lazy(module, name):
    fn = None

    def call(*args, **kwargs):
        nonlocal fn
        if fn is None:
            fn = getattr(importlib.import_module(module), name)
        return fn(*args, **kwargs)
    call.__name__ = call.__qualname__ = name
    return call


def special(name):
    return _lazy("scipy.special", name)


def linalg(name):
    return _lazy("scipy.linalg", name)
