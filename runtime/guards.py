"""Guards: a compiled entry runs only while what the function read from outside still holds.

Contract
- A transform traces its function once per signature; values the function reads from
  outside its arguments (globals, closure cells, defaults, attributes of static objects
  and of the user's objects it names) are read at that moment. ``guards_for(fn, statics,
  consts)`` walks what the traced function can reach by name (``tracer/user_code``'s walk:
  the user's functions and modules it names, their closures and defaults; an object's
  attributes whose names occur in the code walked) and returns a ``Guard``, or None when
  nothing found can change. The transform checks ``Guard.holds()`` before each call of
  the entry and traces again when it fails (a new entry for the same signature: compiled
  code of the same structure comes from the cache), so a changed global, closure value
  or object attribute is never silently ignored (JAX's ``jit`` would keep the old value;
  NumPy, ``jax.grad`` and torch read the new one, and so does gradjit).
- What is checked, per value found:
  - a NumPy array: the same object is still bound there, and its contents are unchanged
    (a snapshot is compared), except for an array the compiled code reads at each call
    anyway (a graph constant that is the array or a view of it: ``consts``) larger than
    ``LIVE_CHECK_BYTES``: for it only the binding is checked (a value NumPy computed from
    it while tracing, ``X.mean(0)`` with ``X`` changed in place, is then not seen: the
    README says to pass such data as an argument);
  - a Python or NumPy scalar, str, bytes, None: the same type and value;
  - a tuple, list or dict: the same object, length and keys, and each item by these rules
    (up to ``MAX_ITEMS``);
  - a user function, module or object: the same object (its names are walked);
  - anything else (classes, library functions and objects): the same object.
- Modules and functions of NumPy, SciPy, Numba, the standard library and installed
  packages are not walked (``user_code.foreign``). A walk stops after ``MAX_VALUES``.
- Calls from ``@njit`` code do not check guards: the entries they link are those compiled.
"""
from __future__ import annotations

import functools
import sys
import types

import numpy as np

from gradjit.tracer.user_code import foreign, function_of

LIVE_CHECK_BYTES = 1 << 16   # (a compare of 64 KiB costs a few microseconds per call)
MAX_ITEMS = 256
MAX_VALUES = 2048
_MISSING = object()
_SCALARS = (bool, int, float, complex, str, bytes, type(None), np.generic)


def _same_value(a, b):
    if type(a) is not type(b):
        return False
    if isinstance(a, np.generic) and a.dtype != b.dtype:
        return False
    try:
        return bool(a == b) or (a != a and b != b)   # (NaN: unchanged)
    except Exception:   # noqa: BLE001 (an exotic scalar: fall back to identity)
        return a is b


def _same_array(a, snap):
    if a.shape != snap.shape or a.dtype != snap.dtype:
        return False
    if a.nbytes <= 4096:
        return a.tobytes() == snap.tobytes()   # (bitwise: NaNs and signed zeros too)
    return np.array_equal(a, snap, equal_nan=a.dtype.kind in "fc")


class Guard:
    """The checks, made once, as one generated expression (``holds``: about 0.1 us a
    check, where a loop over them took 0.3)."""
    __slots__ = ("checks", "holds")

    def __init__(self, checks):
        self.checks = checks
        env = {"M": _MISSING, "same_value": _same_value, "same_array": _same_array,
               "read": _read}
        terms = []
        for i, (kind, where, key, want) in enumerate(checks):
            env[f"w{i}"], env[f"k{i}"], env[f"v{i}"] = where, key, want
            terms.append(_TERMS[kind](where, i))
        src = "def holds():\n    try:\n        return (" + "\n                and ".join(
            terms or ["True"]) + ")\n    except (ValueError, KeyError, IndexError, TypeError):\n" \
            "        return False\n"   # (an emptied cell, a removed item: changed)
        exec(compile(src, "<gradjit guard>", "exec"), env)
        self.holds = env["holds"]

    def changed(self):
        """A description of the first check that fails (for the log), or None."""
        for c in self.checks:
            if not Guard([c]).holds():
                kind, where, key, _ = c
                if kind == 3:
                    return f"the contents of an array of shape {where.shape}"
                return key if isinstance(key, str) else f"{type(where).__name__}[{key!r}]"
        return None


def _binding(where, i):
    if type(where) is types.CellType:
        return f"w{i}.cell_contents"
    return f"w{i}.get(k{i}, M)" if isinstance(where, dict) else f"w{i}[k{i}]"


_TERMS = {
    0: lambda w, i: f"w{i}.get(k{i}, M) is v{i}",          # a name bound in a namespace
    1: lambda w, i: f"w{i}.cell_contents is v{i}",         # a closure cell
    2: lambda w, i: f"({_binding(w, i)} is v{i} or same_value(read(w{i}, k{i}), v{i}))",  # scalar
    3: lambda w, i: (f"(w{i}.shape == v{i}.shape and w{i}.tobytes() == v{i}.tobytes())"
                     if w.nbytes <= 4096 else f"same_array(w{i}, v{i})"),   # contents
    4: lambda w, i: f"len(w{i}) == v{i}[0]",               # a container's length
    5: lambda w, i: f"{_binding(w, i)} is v{i}",           # an item of a container
}


def _read(where, key):
    if type(where) is types.CellType:
        try:
            return where.cell_contents
        except ValueError:
            return _MISSING
    try:
        return where[key]
    except (KeyError, IndexError, TypeError):
        return _MISSING


class _Walk:
    def __init__(self, live):
        self.live = live          # arrays the compiled code reads at each call
        self.checks, self.seen, self.names = [], set(), set()
        self.functions, self.spaces = [], []   # to walk; namespaces (module/object dicts)
        self.bound_at = set()     # (id(namespace), name) already checked

    def bound(self, where, key, value, cell=False):
        """``value`` is what ``where[key]`` (or the cell ``where``) holds now."""
        if isinstance(value, _SCALARS):
            self.checks.append((2, where, key, value))
            return
        if cell:
            self.checks.append((1, where, key, value))
        elif isinstance(where, dict):
            self.checks.append((0, where, key, value))
        else:
            self.checks.append((5, where, key, value))
        self.value(value)

    def value(self, v):
        if id(v) in self.seen or len(self.seen) >= MAX_VALUES:
            return
        self.seen.add(id(v))
        if isinstance(v, np.ndarray):
            if not (v.nbytes > LIVE_CHECK_BYTES and any(np.may_share_memory(v, c)
                                                        for c in self.live)):
                self.checks.append((3, v, None, v.copy()))
        elif isinstance(v, (tuple, list)):
            if len(v) <= MAX_ITEMS:
                if isinstance(v, list):
                    self.checks.append((4, v, None, (len(v), None)))
                for i, x in enumerate(v):
                    self.bound(v, i, x)
        elif isinstance(v, dict):
            if len(v) <= MAX_ITEMS:
                self.checks.append((4, v, None, (len(v), list(v))))
                for k, x in v.items():
                    self.bound(v, k, x)
        elif isinstance(v, types.ModuleType):
            if not foreign(getattr(v, "__file__", None) or "<frozen"):
                self.spaces.append((vars(v), None))
        elif isinstance(v, type):
            pass   # a class: its binding is checked, its attributes are not walked
        elif isinstance(v, types.MethodType):
            self.value(v.__func__)
            self.value(v.__self__)
        elif isinstance(v, types.FunctionType):
            if not foreign(v.__code__.co_filename):
                self.functions.append(v)
        elif isinstance(v, functools.partial):   # its function, bound arguments and keywords
            self.value(v.func)
            self.value(v.args)
            self.value(v.keywords)
        else:
            f = function_of(v) if callable(v) else None   # (a partial, a transform, a
            if f is not None and f is not v:                # callable object: its function)
                self.value(f)
            if _users(type(v)) and hasattr(v, "__dict__"):
                self.spaces.append((vars(v), type(v)))   # the attributes the code names

    def run(self, fn, statics):
        self.value(fn)
        for s in statics:
            self.value(s)
        while self.functions or self._spaces_grow():
            while self.functions:
                self.function(self.functions.pop())
        return self.checks

    def _spaces_grow(self):
        """Bind the names the walked code uses in every namespace reached; True when that
        reached more functions to walk."""
        k = 0
        while k < len(self.spaces):   # (binding a name may reach more namespaces)
            d, cls = self.spaces[k]
            k += 1
            for n in sorted(self.names):
                if (id(d), n) in self.bound_at:
                    continue
                if n in d:
                    self.bound_at.add((id(d), n))
                    self.bound(d, n, d[n])
                elif cls is not None and isinstance(getattr(cls, n, None), types.FunctionType):
                    self.bound_at.add((id(d), n))
                    self.value(getattr(cls, n))   # a method the code calls: walked
        return bool(self.functions)

    def function(self, f):
        self.names |= _names_in(f.__code__)
        glb = f.__globals__
        self.spaces.append((glb, None))
        for cell in f.__closure__ or ():
            try:
                self.bound(cell, None, cell.cell_contents, cell=True)
            except ValueError:   # an empty cell
                pass
        for v in f.__defaults__ or ():
            self.value(v)
        for v in (f.__kwdefaults__ or {}).values():
            self.value(v)


def _users(cls):
    """Whether instances of ``cls`` are the user's objects (not a library's)."""
    name = getattr(cls, "__module__", None) or ""
    mod = sys.modules.get(name)
    if mod is None or name == "__main__":   # (a script, a notebook, a class made by exec)
        return True
    return not foreign(getattr(mod, "__file__", None) or "<frozen")


def _names_in(code):
    names, stack = set(), [code]
    while stack:
        c = stack.pop()
        names.update(c.co_names)
        stack.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
    return names


def guards_for(fn, statics, consts):
    """The ``Guard`` of a trace of ``fn`` with these static arguments, whose compiled code
    reads the arrays ``consts`` at each call; None when there is nothing to check."""
    checks = _Walk([c for c in consts if isinstance(c, np.ndarray)]).run(fn, statics)
    return Guard(checks) if checks else None

