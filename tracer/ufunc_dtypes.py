"""NumPy's result dtypes for ufunc calls on traced arrays and tensors.

Contract
- ``conform(ufunc, inputs, call)`` returns ``call(*inputs)`` (gradjit's form of the
  ufunc, from tracer/numpy_protocol.py) with the dtype(s) NumPy's own ufunc gives for
  these operands: ``np.exp`` of uint8 / int8 / bool is float16 and of int16 float32,
  ``np.square`` of bool int8, ``np.reciprocal`` of integers integer,
  ``scipy.special.xlogy(float32 array, 1.7)`` float64 (SciPy's loops), an int8 array
  times ``np.float32(2)`` float32.
- NumPy's dtypes come from NumPy: the ufunc applied once to one-element operands of the
  same dtypes (Python scalars stay Python scalars: NEP 50's weak scalars), remembered per
  (ufunc, operand types). Where NumPy refuses the operands (no loop for them, ``-`` of
  bools, a Python int out of an integer array's range: int8 array // 300), its error is
  raised, as a builtin exception with the user's line: the Python ints are checked on
  empty arrays of the other operands' dtypes at each call (their value matters).
- Where gradjit's result differs, the operands are cast to NumPy's loop dtype first, as
  NumPy does (its float16 exp of uint8 is the exp of the float16 values), when the ufunc
  has such a homogeneous loop; what still differs is cast at the end (an integer
  reciprocal is 1.0 / x truncated, which is how NumPy's integer loop computes it).
  The casts are learned per key, so later calls cast first and build nothing twice.
"""
from __future__ import annotations

import numpy as np

from gradjit.tracer.registry import numpy_refusal

_PY_SCALARS = {bool: True, int: 1, float: 1.0, complex: 1j}
_CACHE = {}   # (ufunc, operand types) -> [NumPy's result dtypes or None, cast first?]


def _kind(x):
    t = type(x)
    if t in _PY_SCALARS:
        return t
    if getattr(x, "_weak", False):   # a traced Python float argument (tracer/trace.py)
        return {"c": complex, "f": float, "i": int}[x.dtype.kind]
    dt = getattr(x, "dtype", None)
    if dt is not None:   # arrays, traced values, tensors, NumPy scalars (strong, as arrays)
        return np.dtype(dt)
    try:
        return np.asarray(x).dtype
    except Exception:   # noqa: BLE001  (not array-like: NumPy decides what to make of it)
        return None


def _run(ufunc, args):
    """``ufunc(*args)``; NumPy's refusal of them raised with the user's line."""
    try:
        with np.errstate(all="ignore"):
            return ufunc(*args)
    except (TypeError, OverflowError, ValueError) as e:
        raise numpy_refusal(e) from None


def _probe(ufunc, kinds):
    """NumPy's result dtypes for operands of these kinds (None: not NumPy's to say: an
    operand it cannot type, a dtype gradjit refuses elsewhere)."""
    if any(k is None or (isinstance(k, np.dtype) and k.kind not in "biufc") for k in kinds):
        return None
    out = _run(ufunc, [np.ones(1, k) if isinstance(k, np.dtype) else _PY_SCALARS[k]
                       for k in kinds])
    return tuple(np.asarray(o).dtype for o in (out if isinstance(out, tuple) else (out,)))


def _int_range(ufunc, inputs, kinds):
    """NEP 50: a Python int beside an integer or bool array must fit its dtype (NumPy raises
    OverflowError); checked on empty arrays, with the int's own value."""
    if any(k is int for k in kinds) and any(isinstance(k, np.dtype) and k.kind in "biu"
                                            for k in kinds):
        _run(ufunc, [np.empty(0, k) if isinstance(k, np.dtype) else x
                     for x, k in zip(inputs, kinds)])


def _homogeneous(ufunc, dt):
    """Has ``ufunc`` a loop taking and giving ``dt`` only (``ff->f``)?"""
    c = dt.char
    return f"{c * ufunc.nin}->{c * ufunc.nout}" in ufunc.types


def _dtypes(res):
    outs = res if isinstance(res, tuple) else (res,)
    return tuple(np.dtype(getattr(o, "dtype", None) or np.asarray(o).dtype) for o in outs)


def _cast_operands(inputs, dt):
    return [x.astype(dt) if hasattr(x, "_apply") and x.dtype != dt else x for x in inputs]


def conform(ufunc, inputs, call):
    key = (ufunc, *map(_kind, inputs))
    if any(k is int for k in key):
        _int_range(ufunc, inputs, key[1:])
    entry = _CACHE.get(key)
    if entry is None:
        want = _probe(ufunc, key[1:])
        entry = _CACHE[key] = [want, want is not None and len(set(want)) == 1
                               and _homogeneous(ufunc, want[0]) and None]
    want, cast_first = entry
    if want is None:
        return call(*inputs)
    if cast_first:
        inputs = _cast_operands(inputs, want[0])
    res = call(*inputs)
    if _dtypes(res) == want:
        return res
    if cast_first is None:   # learned now: cast the operands to NumPy's loop dtype first
        entry[1] = True
        res = call(*_cast_operands(inputs, want[0]))
        if _dtypes(res) == want:
            return res
    outs = res if isinstance(res, tuple) else (res,)
    fixed = tuple(o if np.dtype(o.dtype) == w else o.astype(w) for o, w in zip(outs, want))
    return fixed if isinstance(res, tuple) else fixed[0]
