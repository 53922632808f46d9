"""How a compiled entry hands its result arrays to Python: no Python call per array.

Contract
- Inside ``env_boxing()``, Numba functions being compiled box every array they
  return as Numba itself does (``NRT_adapt_ndarray_to_python_acqref``: a new
  NumPy array that owns the NRT memory, or the parent array when the result is
  an input) with one difference: the array's Python class is read from the
  function's environment constants, as Numba already reads the dtype, instead
  of being unpickled at every return.
- Why: Numba embeds the class (``np.ndarray``) as a pickle and calls the Python
  function ``numba.core.serialize._numba_unpickle`` for each array it boxes,
  about 250 ns per returned array: half the cost of calling a small compiled
  gradient that returns two arrays (1.09 -> 0.58 us measured on such a call).
- The swap is made under Numba's compiler lock (other threads' compiles wait on
  it), for the block only: user code compiled elsewhere in the process keeps
  Numba's own boxing. Where Numba's internals are not the ones this expects
  (``_boxers.functions``, the C adaptor's name) it changes nothing.
- Generated CPU modules stamp this file's hash (lowering/codegen_cpu.py), so
  code compiled with another version of this boxing is never read back from
  Numba's disk cache.
"""
from __future__ import annotations

import contextlib
import importlib

from llvmlite import ir
from numba.core import cgutils, pythonapi, types
from numba.core.compiler_lock import global_compiler_lock
from numba.np import numpy_support

_ADAPT = "NRT_adapt_ndarray_to_python_acqref"


def _box_array(original):
    def box_array(typ, val, c):
        if not c.context.enable_nrt:   # (no NRT: Numba returns the parent array)
            return original(typ, val, c)
        env, b, api = c.env_manager, c.builder, c.pyapi
        dtype = env.read_const(env.add_const(numpy_support.as_dtype(typ.dtype)))
        # Borrowed, like the dtype: the adaptor takes no reference to the class. Should the
        # environment be missing at run time both are NULL and the adaptor raises on the
        # dtype before it reads the class.
        cls = env.read_const(env.add_const(typ.box_type))
        i32 = ir.IntType(32)
        fn = api._get_function(ir.FunctionType(api.pyobj, [api.voidptr, api.pyobj, i32, i32,
                                                           api.pyobj]), name=_ADAPT)
        ptr = cgutils.alloca_once_value(b, val)
        ndim, writable = (c.context.get_constant(types.int32, int(v))
                          for v in (typ.ndim, typ.mutable))
        out = b.call(fn, [b.bitcast(ptr, api.voidptr), cls, ndim, writable, dtype])
        c.context.nrt.decref(b, typ, val)   # the adaptor acquired its own reference
        return out
    box_array.original = original
    return box_array


@contextlib.contextmanager
def env_boxing():
    """Compile with the boxing described above inside the block."""
    try:   # Numba registers its boxers when a compile first needs them: now, not after
        importlib.import_module("numba.core.boxing")
    except ImportError:
        pass
    table = getattr(getattr(pythonapi, "_boxers", None), "functions", None)
    original = table.get(types.Array) if isinstance(table, dict) else None
    if original is None or getattr(original, "original", None) is not None:
        yield   # another Numba layout, or already swapped (a nested compile)
        return
    with global_compiler_lock:
        table[types.Array] = _box_array(original)
        try:
            yield
        finally:
            table[types.Array] = original
