"""Scalar constants of generated code: which type a scalar attribute is emitted in, and how
it is stored in (and read back from) the ``consts`` float64 argument. Shared by the CPU and
CUDA emitters and the loop roller.

Contract
- ``const_type(value, dtype)``: the dtype a constant ``value`` used with operand dtype
  ``dtype`` is emitted in: NumPy's weak-scalar rule (``np.result_type``) where that type
  holds the value exactly; a Python int out of an integer dtype's range (``u8 > -1``,
  ``i32 > 2**40``: NumPy compares by value) is emitted in int64, else uint64, else float64,
  never wrapped into the operand's dtype. Ops whose NumPy result is not the one a wider
  operand gives (comparisons, clip bounds out of range) fold the value first
  (``codegen_cpu_math.int_bounds``).
- ``const_slots(value, t)``: the float64 slot values holding ``value`` in type ``t``:
  one, or two (high and low 32 bits) for an integer a float64 does not hold exactly
  (``|v| > 2**53``: ``x * 6364136223846793005`` of uint64 must not round).
- ``const_key(t, n)`` / ``const_read(key, at)``: the ``const_types`` entry of a constant
  of type ``t`` stored in ``n`` slots, and the source that reads it from slot ``at`` (an
  expression).
"""
from __future__ import annotations

import numpy as np

from gradjit.lowering.alloc_cpu import dtype_arg as _np_dtype

_EXACT = 2 ** 53   # float64 holds every integer of at most this magnitude


def _is_int(value):
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def const_type(value, dtype):
    dtype = np.dtype(dtype)
    if isinstance(value, (bool, np.bool_)):
        return dtype
    t = np.result_type(dtype, value)
    if t.kind in "iu" and _is_int(value):
        for cand in (t, np.dtype(np.int64), np.dtype(np.uint64)):
            if cand.kind in "iu" and np.iinfo(cand).min <= int(value) <= np.iinfo(cand).max:
                return cand
        return np.dtype(np.float64)
    return t


def const_slots(value, t):
    if np.dtype(t).kind in "iu" and _is_int(value) and abs(int(value)) > _EXACT:
        hi, lo = divmod(int(value), 2 ** 32)
        return [float(hi), float(lo)]
    return [float(value)]


def const_key(t, n):
    return _np_dtype(t) if n == 1 else f"{_np_dtype(t)}:2"


def const_read(key, at):
    if not key.endswith(":2"):
        return f"{key}(consts[{at}])"
    t = key[:-2]
    return f"({t}({t}(consts[{at}]) * {t}(4294967296) + {t}(consts[({at}) + 1])))"
