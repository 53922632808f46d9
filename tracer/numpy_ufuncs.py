"""NumPy's elementwise functions on traced arrays and tensors: the ufuncs gradjit
writes as composites (the NaN / infinity tests, fabs, conjugate, logical_not, the logical
and bit ufuncs) and the elementwise non-ufuncs (isreal / iscomplex, real / imag /
real_if_close, angle, sinc, select).

Contract
- ``NUMPY_UFUNCS`` and ``NUMPY_FUNCTIONS`` (the functions behind ``checked``) are what
  ``tracer/numpy_protocol.py`` merges into its tables; ``tracer/numpy_args.py``'s
  contract applies (NumPy's signatures and values, composites of registered ops,
  unknown keywords a ``TypeError`` naming the function).
- ``np.logical_and / or / xor``, ``np.bitwise_and / or / xor``, ``np.invert``,
  ``np.left_shift`` and ``np.right_shift`` have NumPy's values and result dtypes: of
  bools the logical ops (``where`` and comparisons), of integers the bit ops (the
  ``bitwise_*`` ops of tracer/ops_math.py, no gradient). Python ints are weak operands
  (``uint8 & 5`` is uint8); bools shift as int8; floats raise NumPy's own ``TypeError``
  naming the ufunc.
- real / imag / conj / angle take real input (gradjit has no complex dtypes):
  ``imag`` is zeros, ``angle`` 0 or pi (by the sign bit) with a zero gradient;
  ``iscomplex`` / ``isreal`` are concrete arrays (every element is real).
- ``np.select``: the first true condition wins; choices and default take NumPy's
  common dtype.
"""
from __future__ import annotations

import numpy as np

from gradjit.tracer.api import ArrayOps as A
from gradjit.tracer.api import apply
from gradjit.tracer.api import where as _where
from gradjit.tracer.creation import zeros_like
from gradjit.tracer.methods_math import binop
from gradjit.tracer.numpy_args import checked, is_obj, like_of, obj, probe, truth, weak


# -- NaN and infinity tests, fabs, conjugate, isreal / iscomplex ----------------------------------
def _isnan(x):
    return A.ne(x, x)   # False for integers and bools (x == x)


def _isinf(x):
    return A.eq(A.abs(x), np.inf) if x.dtype.kind == "f" else A.ne(x, x)


def _isfinite(x):
    return A.lt(A.abs(x), np.inf) if x.dtype.kind == "f" else A.eq(x, x)


def _fabs(x):
    return A.abs(A.to(x, probe(np.fabs, x.dtype)))   # ints become the float NumPy picks


def _conj(x):
    # a copy, as NumPy's: a Tensor returned as itself would alias under in-place ops
    return A.to(x, probe(np.conjugate, x.dtype)).clone()


def _real_test(real):
    """np.isreal / np.iscomplex: every element of a gradjit array is real (complex ones
    are refused where they enter, registry.real_only), whatever the values, so the answer
    is a concrete array (``if not np.iscomplex(x)`` may steer Python control flow)."""
    return lambda x: np.full(tuple(x.shape), real)


# -- logical and bit ufuncs -----------------------------------------------------------------------
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


# -- real-input complex helpers, sinc -------------------------------------------------------------
def _imag(val):
    return zeros_like(val)   # a constant: no gradient flows through it


def _angle(z, deg=False):
    """``arctan2(0, z)`` of real ``z``, spelled without atan2 (whose gradient is 0/0 at
    z == 0): pi where z's sign bit is set (-0.0 and -inf included), else 0, NaN kept."""
    x = A.to(z, probe(np.angle, z.dtype))
    neg = A.lt(binop("copysign.Tensor", 1.0, x), 0)
    a = _where(neg, x._const(np.asarray(np.pi, x.dtype)), x._const(np.zeros((), x.dtype)))
    a = _where(A.ne(x, x), x, a)
    return A.mul(a, 180 / np.pi) if deg else a


def _sinc(x):
    """NumPy's own formula: ``y = pi * x``; ``sin(y) / y`` with y = eps where y == 0."""
    y = A.mul(A.to(x, probe(np.sinc, x.dtype)), np.pi)
    y = _where(A.ne(y, 0), y, np.finfo(y.dtype).eps)
    return A.div(A.sin(y), y)


# -- select ---------------------------------------------------------------------------------------
def _select(condlist, choicelist, default=0):
    if len(condlist) != len(choicelist):
        raise ValueError("list of cases must be same length as list of conditions")
    if len(condlist) == 0:
        raise ValueError("select with an empty condition list is not possible")
    like = like_of(condlist, choicelist, default)
    try:
        dt = np.result_type(*[weak(c) for c in list(choicelist) + [default]])
    except TypeError as e:
        raise TypeError(f"Choicelist and default value do not have a common dtype: {e}") from None
    conds = [obj(c, like) for c in condlist]
    for i, c in enumerate(conds):
        if c.dtype != np.bool_:
            raise TypeError(f"invalid entry {i} in condlist: should be boolean ndarray")
    choices = [obj(c, like, dt) for c in choicelist]
    shape = tuple(np.broadcast_shapes(*[t.shape for t in conds + choices],
                                      default.shape if is_obj(default) else np.shape(default)))
    out = obj(default, like, dt)
    for cond, choice in zip(conds[::-1], choices[::-1]):   # the first true condition wins
        out = _where(cond, choice, out)
    return A.expand(out, shape)


NUMPY_UFUNCS = {
    np.isnan: _isnan, np.isinf: _isinf, np.isfinite: _isfinite,
    np.logical_not: lambda x: A.eq(x, 0), np.fabs: _fabs, np.conjugate: _conj,
    np.logical_and: _logical("and"), np.logical_or: _logical("or"),
    np.logical_xor: _logical("xor"), np.invert: _invert,
    np.bitwise_and: _bitwise("and"), np.bitwise_or: _bitwise("or"),
    np.bitwise_xor: _bitwise("xor"), np.left_shift: _shift("left"),
    np.right_shift: _shift("right"),
}
NUMPY_FUNCTIONS = {f: checked(f, impl) for f, impl in {
    np.iscomplex: _real_test(False), np.isreal: _real_test(True),
    np.real: lambda val: val, np.imag: _imag, np.real_if_close: lambda a, tol=100: a,
    np.angle: _angle, np.sinc: _sinc, np.select: _select,
}.items()}
