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
  from another thread with plain arrays pays one type check. Numba compiling
  meanwhile in another thread (gradjit's background tier, generated code calling
  ``np.copy`` or ``np.empty``; the user's own ``@njit`` code) sees a wrapper where it
  looks up ``np.<name>``: each wrapper is a ``Stand`` whose ``_numba_type_`` (Numba's
  typeof protocol) is the Numba type of NumPy's own function, from the runtime
  (``HOOKS.numba_type``, tracer/hooks.py), so such compiles type it as NumPy's.
- Numba's modules that implement NumPy's functions read ``np.<name>`` once, when first
  imported (at Numba's first compile of the process); one imported while the stand-ins
  were in place registered a stand-in, and that function (``np.tril`` ...) was
  "unsupported" in every later compile of the process. So before any swap,
  ``HOOKS.numba_ready()`` imports them (runtime/blas_probe.py ``prepare``: a few ms, once;
  ``numba.np.arrayobj`` and ``numba.np.linalg``, the others naming swapped functions, are
  imported with gradjit's own helpers). tests/runtime/test_numba_patches.py checks a
  process whose first compile happens inside a trace.
- Names bound to those NumPy functions elsewhere (``from numpy import zeros``,
  ``z = np.zeros``) are swapped the same way in the globals of the traced function
  and of the user's functions it reaches (through its globals, modules, closure
  and defaults: tracer/user_code.py; ``traced_numpy(graph, fn)``), each dict counted like the module and
  restored by the last trace using it (a name rebound meanwhile is left alone).
- SciPy's Python functions that trace (``scipy.special.logsumexp``: tracer/scipy_functions.py)
  are swapped in their module, when it is imported, and where names are bound to them.
- np.random's functions drawing from its global stream are swapped too (and names bound to
  them): ``rng_guard.global_draw`` tells the tracing thread's draws from other threads'.
- ``np.zeros`` / ``np.ones`` / ``np.empty`` / ``np.full`` called by the tracing
  thread make traced constants when their dtype is floating (buffers the
  function may fill: ``tracer/tracer_setitem.py``); ``np.array`` of a traced
  value is a copy (a new tracer), ``np.asarray`` the same tracer.
"""
from __future__ import annotations

import contextlib
import sys
import threading

import numpy as np

from gradjit.tracer.api import ArrayOps
from gradjit.tracer import user_code
from gradjit.tracer.hooks import HOOKS, Stand
from gradjit.tracer.methods_index import stack
from gradjit.tracer.registry import GradjitError
from gradjit.tracer.rng_guard import global_draw
from gradjit.tracer.scipy_functions import SCIPY_FUNCTIONS, SCIPY_REFUSED
from gradjit.tracer.trace import PENDING_STORE, strong
from gradjit.tracer.tracer_setitem import buffer

_LOCK = threading.Lock()
_STATE = {"depth": 0, "saved": {}, "by_id": {}, "globals": {}}
# saved: np's names -> originals; by_id: id(original) -> (original, wrapper); globals:
# id(dict) -> [dict, traces using it, {name: (original, wrapper)}]
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
    # (a Python number in a list is not weak here: NumPy makes it an array first, so
    # [float32 value, 1.0] is float64)
    dt = np.dtype(dtype) if dtype is not None else np.result_type(
        *[v.dtype if isinstance(v, ArrayOps) else np.asarray(v).dtype for v in leaves])
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
        if copy is np._CopyMode.IF_NEEDED or copy is np._CopyMode.NEVER:   # (SciPy's spelling
            copy = False                                                # of None / False)
        elif copy is np._CopyMode.ALWAYS:
            copy = True
        for key in ("subok", "like", "device"):
            kwargs.pop(key, None)
        if kwargs:
            raise TypeError(f"{name}() got unexpected keyword arguments {sorted(kwargs)}")
        out = to_traced(a, dtype=dtype)
        if getattr(out, "_weak", False):   # (an array is strong: np.asarray(0.5) is float64)
            out = strong(out)
        if out is a and copy:   # a copy: later assignments to either one are not shared
            out = out._copy()
        if out.ndim < ndmin:
            out = out.reshape((1,) * (ndmin - out.ndim) + tuple(out.shape))
        return out
    coerce.__wrapped__ = orig
    return coerce


_ARRAY_ARGS = {"append": 2}   # functions whose first n arguments are each one array


def _first_arg(orig):
    n = _ARRAY_ARGS.get(orig.__name__, 1)

    def call(*args, **kwargs):   # (no named first parameter: callers may pass it by keyword)
        if any(isinstance(a, (list, tuple)) for a in args[:n]):
            args = tuple(to_traced(a) if isinstance(a, (list, tuple)) and _holds_traced(a) else a
                         for a in args[:n]) + args[n:]
        if args and isinstance(args[0], np.ndarray):
            # a traced argument NumPy's dispatch does not look at (np.take(table, i): only
            # the table): the table becomes a constant, so gradjit's function takes the call
            ref = next((a for a in (*args[1:], *kwargs.values()) if isinstance(a, ArrayOps)),
                       None)
            if ref is not None:
                args = (ref._const(args[0]),) + args[1:]
        return orig(*args, **kwargs)
    call.__wrapped__ = orig
    return call


def _buffer(orig):
    def make(*args, **kwargs):
        graphs = getattr(_LOCAL, "graphs", None)
        traced_fill = orig is np.full and any(
            hasattr(v, "_apply") for v in (*args[1:2], kwargs.get("fill_value")))
        if not graphs or not (traced_fill or user_code.called_by_user()):
            return orig(*args, **kwargs)   # not tracing, or not the user's own call
        return buffer(graphs[-1], orig, args, kwargs)
    make.__wrapped__ = orig
    return make


def _wrappers():
    """{(module, name): stand-in} for the NumPy functions a trace swaps."""
    from gradjit.tracer.numpy_protocol import _FUNCTIONS
    out = {name: Stand(_coercer(getattr(np, name)), getattr(np, name)) for name in _COERCE}
    out.update({name: Stand(_buffer(getattr(np, name)), getattr(np, name)) for name in _BUFFERS})
    # np.r_[a, b] / np.c_[...]: NumPy's objects call np.array on each item, which no
    # protocol intercepts; while tracing they are gradjit's (NumPy's own on plain items)
    from gradjit.tracer.numpy_joins import c_, r_
    out.update(r_=r_, c_=c_)
    for fn in _FUNCTIONS:
        name = getattr(fn, "__name__", None)
        if (name and name not in _SEQUENCE_FIRST and getattr(np, name, None) is fn
                and name not in out):
            out[name] = Stand(_first_arg(fn), fn)
    swaps = {(np, name): w for name, w in out.items()}
    swaps.update({(np.random, name): Stand(_draw(fn), fn) for name, fn in _global_draws()})
    for module, name, impl in SCIPY_FUNCTIONS + SCIPY_REFUSED:   # (tracer/scipy_functions.py)
        mod = sys.modules.get(module)   # (imported by the caller, else nobody can call it)
        if mod is not None and callable(getattr(mod, name, None)):
            swaps[(mod, name)] = Stand(_traced_or(impl, getattr(mod, name)), getattr(mod, name))
    return swaps


def _traced_or(impl, orig):
    """``impl`` where an argument is traced (or a tensor), ``orig`` for anything else."""
    def call(*args, **kwargs):
        if any(isinstance(a, ArrayOps) for a in (*args, *kwargs.values())):
            return impl(*args, **kwargs)
        return orig(*args, **kwargs)
    call.__wrapped__ = orig
    return call


def _global_draws():
    """np.random's functions that draw from (or reseed) its global stream."""
    stream = np.random.mtrand._rand
    for name in dir(np.random):
        fn = getattr(np.random, name)
        if name != "get_state" and (getattr(fn, "__self__", None) is stream or name in (
                "seed", "ranf", "sample")):
            yield name, fn


def _draw(orig):
    def draw(*args, **kwargs):
        return global_draw(orig, args, kwargs)
    draw.__wrapped__ = orig
    return draw


class _Held:
    """A user function's closure cells, defaults and keyword defaults as a mapping: names
    bound there are swapped as globals are (``make(logsumexp)``, ``def f(x, red=np.zeros)``)."""
    __slots__ = ("f",)

    def __init__(self, f):
        self.f = f

    def items(self):
        """((kind, position, the name the code reads it by), value) pairs."""
        f, code = self.f, self.f.__code__
        for i, cell in enumerate(f.__closure__ or ()):
            try:
                yield ("cell", i, code.co_freevars[i]), cell.cell_contents
            except ValueError:   # an empty cell
                pass
        first = code.co_argcount - len(f.__defaults__ or ())
        yield from ((("default", i, code.co_varnames[first + i]), v)
                    for i, v in enumerate(f.__defaults__ or ()))
        yield from ((("kw", k, k), v) for k, v in (f.__kwdefaults__ or {}).items())

    def get(self, key):
        return dict(self.items()).get(key)

    def __setitem__(self, key, value):
        kind, k, _ = key
        if kind == "cell":
            self.f.__closure__[k].cell_contents = value
        elif kind == "default":
            self.f.__defaults__ = self.f.__defaults__[:k] + (value,) + self.f.__defaults__[k + 1:]
        else:
            self.f.__kwdefaults__[k] = value


def _patch_globals(ns):
    """Swap the wrapped NumPy functions bound in ``ns`` (a globals dict: ``from numpy import
    zeros``; a function: its cells and defaults) for their wrappers, or count one more trace
    using the swap already made (under _LOCK)."""
    entry = _STATE["globals"].get(id(ns))
    if entry is not None and entry[0] is ns:
        entry[1] += 1
        return
    by_id, swapped = _STATE["by_id"], {}
    glb = ns if isinstance(ns, dict) else _Held(ns)
    for name, val in list(glb.items()):
        hit = by_id.get(id(val))
        if hit is not None and hit[0] is val:
            glb[name] = hit[1]
            swapped[name] = hit
            read_as = name if isinstance(name, str) else name[2]
            if (getattr(val, "__name__", None) in _BUFFERS
                    and read_as not in user_code.BUFFER_NAMES):   # z = np.zeros
                user_code.BUFFER_NAMES.add(read_as)
                user_code.CALLS.clear()
    _STATE["globals"][id(ns)] = [ns, 1, swapped]


def _unpatch_globals(ns):
    entry = _STATE["globals"].get(id(ns))
    if entry is None or entry[0] is not ns:
        return
    entry[1] -= 1
    if entry[1] == 0:
        del _STATE["globals"][id(ns)]
        glb = ns if isinstance(ns, dict) else _Held(ns)
        for name, (orig, wrapper) in entry[2].items():
            if glb.get(name) is wrapper:
                glb[name] = orig


@contextlib.contextmanager
def traced_numpy(graph, fn=None):
    stack = _LOCAL.__dict__.setdefault("graphs", [])
    stack.append(graph)
    PENDING_STORE.error = None
    dicts = user_code.user_namespaces(fn) if fn is not None else []
    _install(dicts)
    try:
        yield
    except ValueError as e:   # NumPy's own error for a traced value stored into its array
        pending, PENDING_STORE.error = getattr(PENDING_STORE, "error", None), None
        if pending is not None and e is not pending and "with a sequence" in str(e):
            raise pending from None
        raise
    finally:
        stack.pop()
        _uninstall(dicts)


@contextlib.contextmanager
def swapped():
    """NumPy's stand-ins in place (for all threads) across several traces: a transform that
    may trace its function again (runtime/transforms.py) keeps them from one to the next."""
    _install(())
    try:
        yield
    finally:
        _uninstall(())


def _install(dicts):
    HOOKS.numba_ready()   # (before any swap: see the contract)
    with _LOCK:
        if _STATE["depth"] == 0:
            wrappers = _wrappers()
            _STATE["saved"] = {(mod, name): getattr(mod, name) for mod, name in wrappers}
            _STATE["by_id"] = {id(orig): (orig, wrappers[key])
                               for key, orig in _STATE["saved"].items()}
            for (mod, name), w in wrappers.items():
                setattr(mod, name, w)
        _STATE["depth"] += 1
        for glb in dicts:
            _patch_globals(glb)


def _uninstall(dicts):
    with _LOCK:
        for glb in dicts:
            _unpatch_globals(glb)
        _STATE["depth"] -= 1
        if _STATE["depth"] == 0:
            for (mod, name), fn in _STATE["saved"].items():
                setattr(mod, name, fn)
            _STATE["saved"], _STATE["by_id"] = {}, {}
