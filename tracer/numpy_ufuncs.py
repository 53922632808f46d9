"""NumPy's logical and bit ufuncs on traced arrays and tensors (for ``tracer/numpy_joins.py``).

Contract
- ``UFUNCS`` maps ``np.logical_and / or / xor``, ``np.bitwise_and / or / xor``,
  ``np.invert``, ``np.left_shift`` and ``np.right_shift`` to implementations with
  NumPy's values and result dtypes: of bools the logical ops (``where`` and comparisons),
  of integers the bit ops (the ``bitwise_*`` ops of tracer/ops_math.py, no gradient).
  Python ints are weak operands (``uint8 & 5`` is uint8); bools shift as int8; floats
  raise NumPy's own ``TypeError`` naming the ufunc.
"""
from __future__ import annotations

import numpy as np

from gradjit.tracer.api import ArrayOps as A
from gradjit.tracer.api import apply
from gradjit.tracer.api import where as _where
from gradjit.tracer.numpy_joins import is_obj, like_of, obj, truth, weak


def _logical(kind):
    def fn(a, b):
        like = like_of(a, b)
        a, b = truth(obj(a, like)), truth(obj(b, like))
        if kind == "and":
            return _where(a, b, False)
        if kind == "or":
            return _where(a, True, b)
        return A.ne(a, b)
    return fn


def _integer_operands(name, a, b):
    """``a``, ``b`` as gradjit objects of NumPy's result dtype for a bit operation, which
    NumPy has for bools and integers only (its own TypeError otherwise)."""
    like = like_of(a, b)
    dt = np.result_type(weak(a), weak(b))   # (a Python int is weak: uint8 & 5 is uint8)
    if dt.kind not in "biu":
        raise TypeError(f"ufunc '{name}' not supported for the input types, and the inputs "
                        f"could not be safely coerced to any supported types according to "
                        f"the casting rule ''safe'' (result type {dt.name})")
    return [x if is_obj(x) else obj(x, like, dt) for x in (a, b)]


def _bitwise(kind):
    """``&`` / ``|`` / ``^``: of bools the logical ops, of integers the bit operations."""
    logical = _logical(kind)

    def fn(a, b):
        a, b = _integer_operands(f"bitwise_{kind}", a, b)
        if a.dtype == np.bool_ and b.dtype == np.bool_:
            return logical(a, b)
        return apply(f"bitwise_{kind}.Tensor", [a, b], {})
    return fn


def _shift(side):
    def fn(a, b):
        a, b = _integer_operands(f"{side}_shift", a, b)
        dt = np.result_type(a.dtype, b.dtype)
        dt = np.dtype(np.int8) if dt == np.bool_ else dt   # (bools shift as int8, as NumPy)
        return apply(f"bitwise_{side}_shift.Tensor", [A.to(a, dt), A.to(b, dt)], {})
    return fn


def _invert(x):
    if x.dtype == np.bool_:
        return A.eq(x, False)
    if x.dtype.kind not in "iu":
        raise TypeError(f"ufunc 'invert' not supported for the input types ({x.dtype.name})")
    return apply("bitwise_not.default", [x], {})


UFUNCS = {
    np.logical_and: _logical("and"), np.logical_or: _logical("or"),
    np.logical_xor: _logical("xor"), np.invert: _invert,
    np.bitwise_and: _bitwise("and"), np.bitwise_or: _bitwise("or"),
    np.bitwise_xor: _bitwise("xor"), np.left_shift: _shift("left"),
    np.right_shift: _shift("right"),
}
