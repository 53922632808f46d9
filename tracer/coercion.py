"""``np.array([x, 2 * y])``, ``np.asarray(x)`` and ``np.mean([a, b])`` on traced values.

Contract
- NumPy builds arrays from nested lists in C, asking each element for
  ``__array__``; a traced value has no data to give, and no protocol lets it
  take over. So while a function transform traces (``traced_numpy()``), the
  NumPy entry points that coerce their input (``np.array``, ``np.asarray``,
  ``np.asanyarray``, ``np.ascontiguousarray``, and every function of the
  protocol table whose first argument is one array) are wrapped: when that
  argument is a traced value or a (nested) list or tuple holding one, it
  becomes a traced array (``stack`` of the promoted elements, NumPy's dtype
  rules); anything else goes to NumPy untouched.
- The wrappers are installed once for all threads while at least one trace is
  running (a counter under a lock) and removed when the last one ends; a call
  from another thread with plain arrays pays one type check.
- ``np.zeros`` / ``np.ones`` / ``np.empty`` / ``np.full`` called by the tracing
  thread make traced constants when their dtype is floating (buffers the
  function may fill: ``tracer/tracer_setitem.py``); ``np.array`` of a traced
  value is a copy (a new tracer), ``np.asarray`` the same tracer.
"""
from __future__ import annotations

import contextlib
import dis
import os
import sys
import threading

import numpy as np

from gradjit.tracer.api import ArrayOps
from gradjit.tracer.methods_index import stack
from gradjit.tracer.registry import _OURS, GradjitError
from gradjit.tracer.tracer_setitem import buffer

_LOCK = threading.Lock()
_STATE = {"depth": 0, "saved": {}}
_LOCAL = threading.local()   # this thread's graphs being traced (innermost last)
_ORIGINAL_ARRAY = np.array
_BUFFERS = ("zeros", "ones", "empty", "full")
_COERCE = ("array", "asarray", "asanyarray", "ascontiguousarray")
# Functions whose first argument is a sequence of arrays: NumPy's dispatch already looks
# inside it, and converting it would change the meaning.
_SEQUENCE_FIRST = {"concatenate", "stack", "hstack", "vstack", "dstack", "column_stack",
                   "row_stack", "block", "einsum", "select", "meshgrid", "broadcast_arrays",
                   "atleast_1d", "atleast_2d", "atleast_3d", "array_split", "split", "piecewise"}


def _holds_traced(x, depth=0):
    if isinstance(x, ArrayOps):
        return True
    if isinstance(x, (list, tuple)) and depth < 32:
        return any(_holds_traced(v, depth + 1) for v in x)
    return False


def to_traced(x, like=None, dtype=None):
    """A nested list/tuple holding traced values as one traced array (NumPy's rules)."""
    if isinstance(x, ArrayOps):
        return x if dtype is None else x.astype(dtype)
    ref = like if like is not None else _first_traced(x)
    leaves = _leaves(x)
    dt = np.dtype(dtype) if dtype is not None else np.result_type(
        *[v.dtype if isinstance(v, ArrayOps) else np.asarray(v) if not isinstance(
            v, (int, float, complex, bool)) else v for v in leaves])
    out = _build(x, ref, dt)
    return out


def _first_traced(x):
    if isinstance(x, ArrayOps):
        return x
    for v in x:
        if _holds_traced(v):
            return _first_traced(v)
    return None


def _leaves(x):
    if isinstance(x, (list, tuple)):
        return [v for item in x for v in _leaves(item)]
    return [x]


def _build(x, ref, dt):
    if isinstance(x, (list, tuple)):
        parts = [_build(v, ref, dt) for v in x]
        if not parts:
            return ref._const(np.zeros((0,), dt))
        shapes = {tuple(p.shape) for p in parts}
        if len(shapes) > 1:
            raise ValueError(f"setting an array element with a sequence. The requested array "
                             f"has an inhomogeneous shape (parts of shapes {sorted(shapes)})")
        return stack(parts, 0)
    if isinstance(x, ArrayOps):
        return x if x.dtype == dt else x.astype(dt)
    return ref._const(np.asarray(x, dtype=dt))


def _coercer(orig):
    def coerce(a, dtype=None, *args, **kwargs):
        if isinstance(a, np.ndarray) or not _holds_traced(a):
            return orig(a, dtype, *args, **kwargs)
        name = f"np.{orig.__name__}"
        if args:
            raise TypeError(f"{name}: pass order, copy and ndmin by keyword for traced values")
        ndmin = int(kwargs.pop("ndmin", 0))
        if kwargs.pop("order", None) not in (None, "K", "A", "C"):
            raise GradjitError(f"{name}(..., order='F') is not supported for traced values")
        copy = kwargs.pop("copy", orig is _ORIGINAL_ARRAY)   # np.array copies by default
        for key in ("subok", "like", "device"):
            kwargs.pop(key, None)
        if kwargs:
            raise TypeError(f"{name}() got unexpected keyword arguments {sorted(kwargs)}")
        out = to_traced(a, dtype=dtype)
        if out is a and copy:   # a copy: later assignments to either one are not shared
            out = out._copy()
        if out.ndim < ndmin:
            out = out.reshape((1,) * (ndmin - out.ndim) + tuple(out.shape))
        return out
    coerce.__wrapped__ = orig
    return coerce


def _first_arg(orig):
    def call(*args, **kwargs):   # (no named first parameter: callers may pass it by keyword)
        if args and isinstance(args[0], (list, tuple)) and _holds_traced(args[0]):
            args = (to_traced(args[0]),) + args[1:]
        return orig(*args, **kwargs)
    call.__wrapped__ = orig
    return call


def _library_dirs():
    """gradjit's, NumPy's, SciPy's and Numba's folders: their own np.zeros calls make
    arrays, never buffers (only the user's code fills buffers)."""
    import importlib.util
    dirs = list(_OURS)
    for name in ("numpy", "scipy", "numba"):
        spec = importlib.util.find_spec(name)
        dirs.extend(spec.submodule_search_locations or []) if spec else None
    return tuple(os.path.join(d, "") if not d.startswith("<") else d for d in dirs)


_LIBRARY_DIRS = []


_CALLS = {}   # (code, instruction offset) -> is it a direct call of np.zeros & co.?


def _called_by_user():
    """Did the user's own line call np.zeros & co.? Not a library's Python code (its
    folder), and not C or Cython code (np.random.normal's np.empty: such calls make no
    frame, so the frame found is the user's, at the call of the C function): the call at
    the frame's current instruction must be of a name zeros, ones, empty or full."""
    if not _LIBRARY_DIRS:
        _LIBRARY_DIRS.append(_library_dirs())
    f = sys._getframe(2)
    code = f.f_code
    if code.co_filename.startswith(_LIBRARY_DIRS[0]):
        return False
    key = (code, f.f_lasti)
    hit = _CALLS.get(key)
    if hit is None:
        hit = _CALLS[key] = _names_a_buffer(code, f.f_lasti)
    return hit


_CALL_OPS = {"CALL", "CALL_FUNCTION", "CALL_METHOD", "CALL_FUNCTION_KW", "CALL_KW"}
_SKIP_OPS = {"CACHE", "PRECALL", "KW_NAMES", "EXTENDED_ARG", "NOP"}
_NAME_OPS = {"LOAD_METHOD", "LOAD_ATTR", "LOAD_GLOBAL", "LOAD_NAME", "LOAD_FAST", "LOAD_DEREF",
             "LOAD_CLASSDEREF", "LOAD_FAST_CHECK"}


def _names_a_buffer(code, lasti):
    """Is the call at bytecode offset ``lasti`` a call of a name in ``_BUFFERS``? Read from
    the bytecode (no source needed): walking back from the call over its arguments' net
    stack effect reaches the instruction that loaded the callee."""
    try:
        instrs = list(dis.get_instructions(code))
        # the instruction at lasti, or (3.11+) the call whose inline caches lasti is in
        i = max(k for k, ins in enumerate(instrs) if ins.offset <= lasti)
    except (TypeError, ValueError):
        return False
    call = instrs[i]
    if call.opname not in _CALL_OPS or call.arg is None:
        return False
    need = call.arg + (1 if call.opname in ("CALL_FUNCTION_KW", "CALL_KW") else 0)
    j = i - 1
    while j >= 0 and need > 0:
        ins = instrs[j]
        j -= 1
        if ins.opname in _SKIP_OPS:
            continue
        if ins.opname.startswith(("JUMP", "POP_JUMP", "FOR_ITER", "RETURN", "SEND")):
            return False   # control flow inside the arguments: not followed
        try:
            need -= dis.stack_effect(ins.opcode, ins.arg if ins.opcode >= dis.HAVE_ARGUMENT
                                     else None, jump=False)
        except ValueError:
            return False
    while j >= 0 and instrs[j].opname in _SKIP_OPS:
        j -= 1
    return need == 0 and j >= 0 and instrs[j].opname in _NAME_OPS and instrs[j].argval in _BUFFERS


def _buffer(orig):
    def make(*args, **kwargs):
        graphs = getattr(_LOCAL, "graphs", None)
        if not graphs or not _called_by_user():   # not tracing, or not the user's own call
            return orig(*args, **kwargs)
        return buffer(graphs[-1], orig, args, kwargs)
    make.__wrapped__ = orig
    return make


def _wrappers():
    from gradjit.tracer.numpy_protocol import _FUNCTIONS
    out = {name: _coercer(getattr(np, name)) for name in _COERCE}
    out.update({name: _buffer(getattr(np, name)) for name in _BUFFERS})
    for fn in _FUNCTIONS:
        name = getattr(fn, "__name__", None)
        if (name and name not in _SEQUENCE_FIRST and getattr(np, name, None) is fn
                and name not in out):
            out[name] = _first_arg(fn)
    return out


@contextlib.contextmanager
def traced_numpy(graph):
    stack = _LOCAL.__dict__.setdefault("graphs", [])
    stack.append(graph)
    with _LOCK:
        if _STATE["depth"] == 0:
            wrappers = _wrappers()
            _STATE["saved"] = {name: getattr(np, name) for name in wrappers}
            for name, w in wrappers.items():
                setattr(np, name, w)
        _STATE["depth"] += 1
    try:
        yield
    finally:
        stack.pop()
        with _LOCK:
            _STATE["depth"] -= 1
            if _STATE["depth"] == 0:
                for name, fn in _STATE["saved"].items():
                    setattr(np, name, fn)
                _STATE["saved"] = {}
