"""Argument handling shared by the NumPy-facing modules: unsupported keywords, axis
aliases, keepdims, dtype.

Contract: ``UnsupportedError`` is the error for a NumPy call or argument gradjit does
not trace (``unsupported(what)`` raises it naming ``what`` and the user's line);
``_unset`` refuses keywords given a value gradjit cannot honour; ``_axis`` / ``_keep``
take NumPy's ``axis`` / ``keepdims`` or torch's ``dim`` / ``keepdim`` spellings.
"""
from __future__ import annotations

import numbers

import numpy as np

from gradjit.tracer.api import ArrayOps
from gradjit.tracer.registry import GradjitError, user_site


class UnsupportedError(GradjitError, TypeError):
    """A NumPy call or argument gradjit does not trace (also raised by numpy_protocol)."""


def unsupported(what):
    raise UnsupportedError(f"{what} is not supported on traced arrays; see the README's list "
                           f"of supported NumPy functions", user_site())


def _unset(name, **given):
    """Raise for keywords that were given a value gradjit cannot honour."""
    for key, value in given.items():
        if value is not None and value is not np._NoValue:
            unsupported(f"{name}(..., {key}=...)")


def _axis(name, axis, dim):
    if dim is not None:
        if axis is not None:
            raise TypeError(f"{name}() got both axis= and dim=")
        return dim
    return axis


def _keep(name, keepdims, keepdim):
    if keepdim is not None:
        return bool(keepdim)
    if keepdims is np._NoValue or keepdims is None:
        return False
    if not isinstance(keepdims, (bool, np.bool_, numbers.Integral)):
        raise TypeError(f"{name}(): keepdims must be a bool, got {type(keepdims).__name__}")
    return bool(keepdims)


def _dtype(name, a, dtype):
    return a if dtype is None else ArrayOps.to(a, np.dtype(dtype))
