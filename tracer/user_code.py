"""Reading the user's code while a trace runs (for tracer/coercion.py).

Contract
- ``user_namespaces(fn)``: the globals dicts of ``fn`` and of the user's functions it
  reaches by name (its globals, attributes of the user's modules it names, closure cells,
  defaults), and those functions that hold values in closure cells or defaults. Files of gradjit, NumPy, SciPy, Numba, the standard library and installed
  packages are not the user's (``foreign``): their names are left alone.
- ``called_by_user()``, from a NumPy stand-in's wrapper: whether the line that called it
  is the user's own call of a name in ``BUFFER_NAMES`` (``np.zeros`` & co. and the
  aliases tracer/coercion.py found), read from the caller's bytecode (no source needed);
  answers are cached per call site in ``CALLS`` (cleared when an alias is added).
"""
from __future__ import annotations

import dis
import functools
import os
import sys
import sysconfig
import types

from gradjit.tracer.registry import _OURS
from gradjit.tracer.rng_guard import captured

BUFFER_NAMES = {"zeros", "ones", "empty", "full"}   # (+ aliases: ``z = np.zeros``)


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
_STDLIB = os.path.join(sysconfig.get_paths()["stdlib"], "")


CALLS = {}   # (code, instruction offset) -> is it a direct call of np.zeros & co.?


def called_by_user():
    """Did the user's own line call np.zeros & co.? Not a library's Python code (its
    folder), and not C or Cython code (np.random.normal's np.empty: such calls make no
    frame, so the frame found is the user's, at the call of the C function): the call at
    the frame's current instruction must be of a name zeros, ones, empty or full."""
    if not _LIBRARY_DIRS:
        _LIBRARY_DIRS.append(_library_dirs())
    f = sys._getframe(3)   # (this, the wrapper, Stand.__call__, the caller)
    code = f.f_code
    if code.co_filename.startswith(_LIBRARY_DIRS[0]):
        return False
    key = (code, f.f_lasti)
    hit = CALLS.get(key)
    if hit is None:
        hit = CALLS[key] = _names_a_buffer(code, f.f_lasti)
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
    return (need == 0 and j >= 0 and instrs[j].opname in _NAME_OPS
            and instrs[j].argval in BUFFER_NAMES)


def function_of(x):
    """The Python function behind a callable (a transform's, a partial's, a method's); None
    when there is none, or when looking raises (an object whose ``__getattr__`` raises
    KeyError for names it lacks)."""
    try:
        return _function_of(x)
    except Exception:   # noqa: BLE001
        return None


def _function_of(x):
    for _ in range(8):
        if isinstance(x, types.FunctionType):
            return x
        if isinstance(x, functools.partial):
            x = x.func
        elif isinstance(x, types.MethodType):
            x = x.__func__
        elif getattr(x, "__wrapped__", None) is not None:
            x = x.__wrapped__
        elif not isinstance(x, type) and isinstance(getattr(type(x), "__call__", None),
                                                    types.FunctionType):
            x = type(x).__call__
        else:
            return None
    return None


def _names_in(code):
    names, stack = set(), [code]
    while stack:
        c = stack.pop()
        names.update(c.co_names)
        stack.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
    return names


def foreign(filename):
    """A file of gradjit, NumPy, SciPy, Numba, the standard library or an installed
    package: not the user's code, whose globals are left as they are."""
    if not _LIBRARY_DIRS:
        _LIBRARY_DIRS.append(_library_dirs())
    return (filename.startswith(_LIBRARY_DIRS[0] + ("<frozen", _STDLIB))
            or f"{os.sep}site-packages{os.sep}" in filename
            or f"{os.sep}dist-packages{os.sep}" in filename)


def user_namespaces(fn, limit=256):
    """The globals dicts of ``fn`` and of the user's functions it reaches by name (its
    globals, attributes of the user's modules it names, closure cells, defaults), and those
    functions themselves where they hold values (their cells and defaults bind names too)."""
    out, seen, todo = {}, set(), [fn]
    while todo and len(seen) < limit:
        f = function_of(todo.pop())
        if f is None or id(f) in seen:
            continue
        seen.add(id(f))
        if foreign(f.__code__.co_filename):
            continue
        glb = f.__globals__
        out[id(glb)] = glb
        if f.__closure__ or f.__defaults__ or f.__kwdefaults__:
            out[id(f)] = f
        names = _names_in(f.__code__)
        for n in names:
            v = glb.get(n)
            if isinstance(v, types.ModuleType):   # mod.helper(...): the user's modules only
                if not foreign(getattr(v, "__file__", None) or "<frozen"):
                    todo.extend(v.__dict__[m] for m in names if m in v.__dict__)
            elif v is not None:
                todo.append(v)
        todo.extend(captured(f))
    return list(out.values())
