"""Guards: a compiled entry runs only while what the function read from outside still holds.

Contract
- A transform traces its function once per signature; values the function reads from
  outside its arguments (globals, closure cells, defaults, attributes of objects and
  classes it names or gets as static arguments, modules it imports) are read at that
  moment. ``guards_for(fn, statics, consts)`` walks what the traced function can reach and
  returns a ``Guard``, or None when nothing found can change. The transform checks
  ``Guard.holds()`` before each call of the entry and traces again when it fails (a new
  entry for the same signature: compiled code of the same structure comes from the
  cache), so a changed global, closure value or attribute is never silently ignored (JAX's
  ``jit`` would keep the old value; NumPy, ``jax.grad`` and torch read the new one).
- The walk: the code of each user function reached (its nested code too) gives the global
  names it loads, the attribute names it uses and the modules it imports (``dis``); its
  closure cells and defaults are values reached (the defaults tuple and keyword-defaults dict
  bound to the function, then their items). A global name is bound in that function's
  globals only; attribute names are bound in every user module, object and class reached
  (an object's own attribute, a ``__slots__`` slot, else the class attribute it would read,
  with a check that the object does not shadow it). Every function of a user class reached
  is walked (methods, properties, class and static methods, dunders), so code reached
  through ``super()``, a property or ``obj[k]`` counts. When walked code calls ``getattr``,
  ``vars`` or ``setattr``, every attribute of the objects reached is bound (names built at
  run time). Library code (``user_code.foreign``) is not walked; its objects are checked by
  identity, and their attributes the code names; a library's function (a decorator's
  wrapper, ``gj.checkpoint``'s) leads on to the callables it holds (``__wrapped__``, its
  closure cells), so the user's function inside is walked.
- What is checked, per value found:
  - a NumPy array: the same object still bound there, and its contents unchanged (a
    snapshot), except for an array the compiled code reads at each call anyway (a graph
    constant that is it or a view of it: ``consts``) larger than ``LIVE_CHECK_BYTES``:
    only its binding (a value NumPy computed from it while tracing, ``X.mean(0)`` with
    ``X`` changed in place, is then not seen). A compared array larger than that is
    logged once (a compare per call: pass it as an argument);
  - a Python or NumPy scalar, str, bytes, None: the same type and value (``-0.0`` is not
    ``0.0``, NaN is NaN);
  - a tuple, list, deque or mapping (dict, ``MappingProxyType``, ``ChainMap``): the same
    length (a mapping: the same keys in the same order) and each item by these rules;
    above ``MAX_ITEMS`` items, a container of scalars is compared with a snapshot, any
    other only by length; a set, ``array.array`` or bytearray: equal to a snapshot;
  - a weak proxy: as the object it refers to (its attributes, through it);
  - a gradjit Tensor: its array (``W.data = a`` rebinds it, ``W.mul_(2)`` writes it) as
    an array read from outside;
  - functions, modules, classes, other objects: the same object.
- ``holds()`` is one generated expression; any exception in it counts as a change.
- Calls from ``@njit`` code do not check guards: the entries they link are those compiled.
"""
from __future__ import annotations

import array
import collections
import dis
import functools
import logging
import math
import sys
import types
import weakref

import numpy as np

from gradjit.runtime.compiler import STATS
from gradjit.tracer import gensrc
from gradjit.tracer.tensor import Tensor
from gradjit.tracer.user_code import foreign, function_of

LIVE_CHECK_BYTES = 1 << 16   # (a compare of 64 KiB costs a few microseconds per call)
MAX_ITEMS = 256
MAX_VALUES = 4096
_LOG = logging.getLogger("gradjit")
_MISSING = object()
_SCALARS = (bool, int, float, complex, str, bytes, type(None), np.generic)
_ANY_ATTRIBUTE = {"getattr", "vars", "setattr", "hasattr"}   # names built at run time
_NAMESPACES = ("SimpleNamespace", "Namespace")   # (types', argparse's: configuration objects)


def _same_value(a, b):
    if type(a) is not type(b):
        return False
    if isinstance(a, np.generic) and a.dtype != b.dtype:
        return False
    if isinstance(a, (float, np.floating)):
        if a != a:
            return b != b   # (NaN: unchanged)
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)   # (-0.0 is not 0.0)
    try:
        return bool(a == b)
    except Exception:   # noqa: BLE001 (an exotic scalar: identity)
        return a is b


def _same_array(a, snap):
    if a.shape != snap.shape or a.dtype != snap.dtype:
        return False
    if a.dtype.kind == "O":   # (items compared by identity: their own contents are theirs)
        return all(x is y for x, y in zip(a.ravel().tolist(), snap.ravel().tolist()))
    if a.nbytes <= LIVE_CHECK_BYTES:
        return a.tobytes() == snap.tobytes()   # (bitwise: NaNs and signed zeros too)
    return np.array_equal(a, snap, equal_nan=a.dtype.kind in "fc")


class Guard:
    """The checks, made once, as one generated expression (``holds``: about 0.05 us a
    check, where a loop over them took 0.3). At least one check (``guards_for``)."""
    __slots__ = ("checks", "holds")

    def __init__(self, checks):
        self.checks = checks
        terms, names, values = [], [], []
        for i, (kind, where, key, want) in enumerate(checks):
            names += [f"w{i}", f"k{i}", f"v{i}"]
            values += [where, key, want]
            terms.append(_TERMS[kind](where, key, i))
        # one module per shape of checks (loaded as all generated code is: tracer/gensrc.py);
        # its factory closes over this guard's objects
        src = ('"""gradjit generated: the checks of a transform\'s guard (runtime/guards.py)."""\n\n\n'
               "def make(objects):\n"
               f"    ({', '.join(names)}) = objects\n\n"
               "    def holds():\n        try:\n            return (" +
               "\n                    and ".join(terms or ["True"]) +
               ")\n        except Exception:\n            return False\n    return holds\n")
        self.holds = gensrc.load("guard", src, _HELPERS).make(tuple(values))

    def changed(self):
        """A description of the first check that fails (for the log), or None."""
        for c in self.checks:
            if not Guard([c]).holds():
                kind, where, key, _ = c
                if kind == 3:
                    return f"the contents of an array of shape {where.shape}"
                return key if isinstance(key, str) else f"{type(where).__name__}[{key!r}]"
        return None


def _read(where, key):
    if type(where) is types.CellType:
        return where.cell_contents
    if key.__class__ is _Attr:
        return getattr(where, key.name, _MISSING)
    return where[key]


class _Attr:
    """A key read with ``getattr`` (a ``__slots__`` slot)."""
    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return self.name


def _binding(where, key, i):
    if type(where) is types.CellType:
        return f"w{i}.cell_contents"
    if key.__class__ is _Attr:
        return f"getattr(w{i}, k{i}.name, M)"
    return f"w{i}.get(k{i}, M)" if isinstance(where, (dict, types.MappingProxyType)) else f"w{i}[k{i}]"


_TERMS = {
    0: lambda w, k, i: f"{_binding(w, k, i)} is v{i}",                      # a binding
    2: lambda w, k, i: (f"({_binding(w, k, i)} is v{i} or "                  # a scalar's value
                        f"same_value(read(w{i}, k{i}), v{i}))"),
    3: lambda w, k, i: (f"(w{i}.shape == v{i}.shape and w{i}.tobytes() == v{i}.tobytes())"
                        if w.nbytes <= 4096 and w.dtype.kind != "O"
                        else f"same_array(w{i}, v{i})"),                     # contents
    4: lambda w, k, i: f"len(w{i}) == v{i}",                                # a length
    5: lambda w, k, i: f"list(w{i}) == v{i}",                               # a dict's keys
    6: lambda w, k, i: f"k{i} not in w{i}",                                 # not shadowed
    7: lambda w, k, i: f"w{i} == v{i}",                                     # big, scalars
}


@functools.lru_cache(maxsize=1024)
def _code_names(code):
    """(global names loaded, attribute names used, modules imported, whether names are
    built at run time) of ``code`` and the code nested in it."""
    globs, attrs, mods, stack = set(), set(), set(), [code]
    while stack:
        c = stack.pop()
        for ins in dis.get_instructions(c):
            op = ins.opname
            if op in ("LOAD_GLOBAL", "LOAD_NAME"):
                globs.add(ins.argval)
            elif op in ("LOAD_ATTR", "LOAD_METHOD", "LOAD_SUPER_ATTR", "IMPORT_FROM"):
                attrs.add(ins.argval)
            elif op == "IMPORT_NAME":
                mods.add(ins.argval)
        stack.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
    return frozenset(globs), frozenset(attrs), frozenset(mods), bool(globs & _ANY_ATTRIBUTE)


def _users(cls):
    """Whether ``cls`` is the user's class (not a library's)."""
    name = getattr(cls, "__module__", None) or ""
    mod = sys.modules.get(name)
    if mod is None or name == "__main__":   # (a script, a notebook, a class made by exec)
        return True
    return not foreign(getattr(mod, "__file__", None) or "<frozen")


def _full(cell):
    try:
        cell.cell_contents
        return True
    except ValueError:   # an empty cell
        return False


class _Walk:
    def __init__(self, live):
        self.live = live          # arrays the compiled code reads at each call
        self.checks, self.seen, self.attrs, self.any_attr = [], set(), set(), False
        self.values, self.functions, self.spaces = [], [], []   # work lists (no recursion)
        self.bound_at = set()     # (id(namespace), name) already checked
        self.compared = 0         # bytes of arrays compared at each call

    def bound(self, where, key, value):
        """``value`` is what ``where[key]`` (a cell: its contents) holds now."""
        self.checks.append((2 if isinstance(value, _SCALARS) else 0, where, key, value))
        self.values.append(value)

    def value(self, v):
        if id(v) in self.seen or len(self.seen) >= MAX_VALUES or isinstance(v, _SCALARS):
            return
        self.seen.add(id(v))
        if isinstance(v, np.ndarray):
            if not (v.nbytes > LIVE_CHECK_BYTES and any(np.may_share_memory(v, c)
                                                        for c in self.live)):
                self.checks.append((3, v, None, v.copy()))
                self.compared += v.nbytes
        elif isinstance(v, (tuple, list, dict, collections.deque, types.MappingProxyType,
                            collections.ChainMap)):
            self.container(v)
        elif isinstance(v, (set, frozenset, array.array, bytearray)):   # (compared whole)
            self.checks.append((7, v, None, bytes(v) if isinstance(v, bytearray) else
                                array.array(v.typecode, v) if isinstance(v, array.array)
                                else type(v)(v)))
            if isinstance(v, (set, frozenset)):
                self.values += [x for x in v if not isinstance(x, _SCALARS)][:MAX_ITEMS]
        elif isinstance(v, Tensor):   # (its array, bound and compared as an array read)
            self.bound(v, _Attr("_data"), v.data)
        elif isinstance(v, weakref.ProxyTypes):   # (its object's attributes, through it)
            self.spaces.append(("object", v))
            self.values.append(v.__class__)
        elif isinstance(v, types.ModuleType):
            if not foreign(getattr(v, "__file__", None) or "<frozen"):
                self.spaces.append(("module", v))
        elif isinstance(v, type):
            if _users(v):
                self.spaces.append(("class", v))
        elif isinstance(v, types.FunctionType):
            if not foreign(v.__code__.co_filename):
                self.functions.append(v)
            else:   # a library's wrapper (a decorator, gj.checkpoint): the callables it holds
                held = [getattr(v, "__wrapped__", None)] + [c.cell_contents for c in
                                                            v.__closure__ or () if _full(c)]
                self.values += [x for x in held if callable(x)]
        elif isinstance(v, types.MethodType):
            self.values += [v.__func__, v.__self__]
        elif isinstance(v, (property, classmethod, staticmethod)):
            self.values += [getattr(v, n, None) for n in ("fget", "fset", "__func__")]
        elif isinstance(v, functools.partial):   # its function, bound arguments and keywords
            self.values += [v.func, v.args, v.keywords]
        else:
            try:   # (an object whose attribute look-up raises is checked by identity only)
                f = function_of(v) if callable(v) else None   # (a transform, a callable object)
                if f is not None and f is not v:
                    self.values.append(f)
                if _users(type(v)) or type(v).__name__ in _NAMESPACES:
                    if hasattr(type(v), "__slots__") or isinstance(vars(v), dict):
                        self.spaces.append(("object", v))
                        self.values.append(type(v))
            except Exception:   # noqa: BLE001
                pass

    def container(self, v):
        mapping = not isinstance(v, (tuple, list, collections.deque))
        items = list(v.items()) if mapping else list(enumerate(v))
        if mapping:
            self.checks.append((5, v, None, list(v)))
        elif not isinstance(v, tuple):
            self.checks.append((4, v, None, len(v)))
        if len(items) <= MAX_ITEMS:
            for k, x in items:
                self.bound(v, k, x)
        elif all(isinstance(x, _SCALARS) for _, x in items):   # (one compare in C)
            self.checks.append((7, v, None, dict(v) if mapping else type(v)(v)))

    def run(self, fn, statics):
        self.values += [fn, *statics]
        while self.values or self.functions or self._spaces_grow():
            while self.values:
                self.value(self.values.pop())
            while self.functions:
                self.function(self.functions.pop())
        if self.compared > LIVE_CHECK_BYTES:
            _LOG.info("%s reads arrays from outside (%.1f MB) compared at each call: pass "
                      "large data as arguments", getattr(fn, "__name__", "the function"),
                      self.compared / 2 ** 20)
        return self.checks

    def _spaces_grow(self):
        """Bind the attribute names the walked code uses in every namespace reached; True
        when that reached more values."""
        for kind, x in self.spaces:
            if kind == "class":
                for c in type.mro(x):
                    if _users(c) and ("walked", id(c)) not in self.bound_at:
                        self.bound_at.add(("walked", id(c)))
                        self.values += [m for m in vars(c).values()
                                        if isinstance(m, (types.FunctionType, property,
                                                          classmethod, staticmethod))]
            try:
                own = vars(x)
            except TypeError:   # (__slots__ only)
                own = {}
            names = (set(own) | self.attrs) if kind == "object" and self.any_attr else self.attrs
            for n in sorted(names, key=str):
                if (id(x), n) in self.bound_at:
                    continue
                self.bound_at.add((id(x), n))
                if n in own:
                    self.bound(own, n, own[n])
                elif kind != "module":
                    self._class_level(x, kind, own, n)
        return bool(self.values or self.functions)

    def _class_level(self, x, kind, own, n):
        """``x.n`` found on the class (a slot, a class attribute), not the object itself."""
        cls = x if kind == "class" else x.__class__   # (a weak proxy: its object's class)
        for c in type.mro(cls):
            if n in vars(c):
                attr = vars(c)[n]
                if isinstance(attr, types.MemberDescriptorType) and kind == "object":
                    val = getattr(x, n, _MISSING)   # a __slots__ slot of the object
                    if val is not _MISSING:
                        self.bound(x, _Attr(n), val)
                elif kind == "object" and isinstance(own, dict):
                    self.checks.append((6, own, n, None))   # (the object does not shadow it)
                    self.bound(vars(c), n, attr)
                elif kind == "class":
                    self.bound(vars(c), n, attr)
                return

    def function(self, f):
        globs, attrs, mods, any_attr = _code_names(f.__code__)
        self.attrs |= attrs
        self.any_attr |= any_attr
        glb = f.__globals__
        for n in sorted(globs):
            if n in glb and (id(glb), n) not in self.bound_at:
                self.bound_at.add((id(glb), n))
                self.bound(glb, n, glb[n])
        for m in mods:   # (imported in the function body: sys.modules holds it)
            self.values.append(sys.modules.get(m))
        for cell in f.__closure__ or ():
            try:
                self.bound(cell, None, cell.cell_contents)
            except ValueError:   # an empty cell
                pass
        # the defaults tuple and dict as bound to the function (``f.__defaults__ = (3.0,)``
        # replaces them: the same objects still there), then their items as values read
        # (a function without them is not checked: defaults given later change no call the
        # traced code makes, and each check costs every call of a small gradient ~0.15 us)
        if f.__defaults__ is not None:
            self.bound(f, _Attr("__defaults__"), f.__defaults__)
        if f.__kwdefaults__ is not None:
            self.bound(f, _Attr("__kwdefaults__"), f.__kwdefaults__)


def guards_for(fn, statics, consts):
    """The ``Guard`` of a trace of ``fn`` with these static arguments, whose compiled code
    reads the arrays ``consts`` at each call; None when there is nothing to check."""
    checks = _Walk([c for c in consts if isinstance(c, np.ndarray)]).run(fn, statics)
    return Guard(checks) if checks else None

RETRACE_WARN = 8   # traces again for changed outside values before the log says it louder


def contiguous(c):
    """Whether a constant can go to the hot path as it is (compiled entries take C arrays)."""
    return not isinstance(c, np.ndarray) or c.flags.c_contiguous


def entry_holds(entry, transform=None):
    """Whether what a transform entry's trace read from outside still holds (``entry[3]``
    is its Guard or None); when not, and ``transform`` is given, it is logged and counted."""
    guard = entry[3]
    if guard is None or guard.holds():
        return True
    if transform is not None:
        transform._retraced = n = getattr(transform, "_retraced", 0) + 1
        (_LOG.warning if n == RETRACE_WARN else _LOG.info)(
            "%s: %r, read from outside the function, changed since it was traced: traced "
            "again%s", transform.__name__, guard.changed(),
            f" ({n} times; pass values that change as arguments)" if n >= RETRACE_WARN else "")
        STATS["guard_retraces"] += 1
    return False


_HELPERS = {"M": _MISSING, "same_value": _same_value, "same_array": _same_array, "read": _read}
