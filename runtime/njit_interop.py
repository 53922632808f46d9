"""Transforms called from the user's own ``@numba.njit`` code.

Contract
- ``numba.typeof(t)`` of a transform ``t`` (``gj.jit``, ``gj.grad``, ``gj.value_and_grad``)
  is the type of ``numba_callable(t)``: a Numba dispatcher taking ``t``'s array arguments
  and returning what ``t`` returns (arrays, 0-d results as scalars, tuples where ``t``
  returns tuples). So ``t`` works inside ``@njit`` code as a global, a closure variable or
  an argument, like any jitted function.
- It runs the compiled code of the signatures ``t`` has been compiled for (by calls from
  Python, or ``t.compile_for(*examples)``). Shapes are checked at run time: others raise
  ``TypeError`` naming ``t`` and the shapes it has. Calls with dtypes or dimensions it has
  no code for fail at typing with a ``TypingError`` that says the same. A new signature
  compiled later is seen by ``@njit`` functions compiled later.
- ``c_callable(t, examples)``: a ``numba.cfunc`` of ``t`` at the examples' signature, for C
  callers (``.address``, ``.ctypes``): ``void f(const T0 *a0, ..., T *out0, ...)``, one
  pointer per argument array (C order, the examples' shapes), then one per result array
  in the order of the result's leaves (a 0-d result: one element), written by the call.
- Not callable from ``@njit`` (a ``GradjitError`` at typing, saying why): CUDA transforms,
  signatures whose arguments are not plain C-contiguous arrays of at least one dimension
  (pytrees, static values, keywords, 0-d), results that are not arrays (``has_aux`` with
  non-array aux), transforms that update state (batch norm under tracing), Jacobians.
- A traced array (``Tracer``) passed to a ``@numba.njit`` function inside a traced function
  raises a ``GradjitError`` when Numba types it (``typeof``), naming the function and the
  user's line and saying what to write instead, where Numba said "non-precise type
  pyobject" at the decorator.
- Threads: from ``@njit`` code no Python runs around the compiled code to size its
  threads per call (runtime/threads.py). It runs on the caller's Numba thread count, and
  a transform whose code runs large products sets every BLAS library of the process to
  one thread for good when it becomes callable (logged once on the ``gradjit`` logger):
  its products run as blocks over Numba's threads, which BLAS threads would oversubscribe.
"""
from __future__ import annotations

import functools
import itertools
import os
import sys
import types as pytypes

import numba
import numpy as np
from numba.core import types
from numba.core.errors import TypingError
from numba.extending import overload, typeof_impl

from gradjit.runtime import threads, tiers
from gradjit.runtime.compiler import Executable
from gradjit.tracer import gensrc
from gradjit.tracer.registry import _OURS, GradjitError, Site
from gradjit.tracer.trace import Tracer

_SEQ = itertools.count()


def _define(what, lines, names):
    """The functions of generated ``lines``, loaded the project's one way (tracer/gensrc.py)
    as a module of their own: each stand-in closes over one transform's compiled entries,
    so two transforms with the same text must not share a module (``gensrc.load`` shares
    by content)."""
    source = f"# gradjit: {what}\n" + "\n".join(lines) + "\n"
    k = next(_SEQ)
    name = f"gj_njit_{k}"   # (and a path of its own: tracebacks show this stand-in's text)
    mod = gensrc.import_source(name, source, f"<gradjit {what} #{k}>", names)
    # Not a module afterwards: a user's ``@njit(cache=True)`` function that calls the
    # stand-in must not record it by module name, since the next process has no such
    # module when Numba's cache loads. Functions whose ``__module__`` is None and whose
    # globals lack ``__name__`` are what Numba calls dynamic: compiled from their globals
    # dict, their environment never recorded by name.
    sys.modules.pop(name, None)
    del mod.__dict__["__name__"]
    for v in list(mod.__dict__.values()):
        if isinstance(v, pytypes.FunctionType):
            v.__module__ = None
    return mod


def native(fn):
    """The Numba dispatcher of an executable's ``fn`` (runtime/threads.py may wrap it)."""
    if getattr(fn, "blas", False):
        threads.blas_single_for_good()
    return getattr(fn, "native", fn)


def _name(t):
    return f"gj.{type(t).__name__}({t.__name__})"


def _entries(t):
    """[(shapes, dtypes, exe, consts, outputs)] of ``t``'s compiled signatures that
    ``@njit`` code can call; ``outputs``: the structure of its result, as indices into
    the compiled entry's result tuple."""
    from gradjit.runtime.arguments import plain
    found = []
    for (layout, sig), (exe, consts, tree, _) in list(t._compiled.items()):
        exe = tiers.settled(exe)
        if not plain(layout) or type(exe) is not Executable or not exe.plain_in:
            continue
        try:
            outputs = t._unpack(tree, list(range(len(exe.graph.outputs))))
        except Exception:   # noqa: BLE001 - a result that is more than arrays: not callable
            continue
        if _indices(outputs):
            found.append((tuple(s for s, _ in sig), tuple(d for _, d in sig), exe, consts,
                          outputs))
    return found


def _indices(x):
    if isinstance(x, (tuple, list)):
        return all(_indices(e) for e in x)
    return type(x) is int


def _render(x):
    if isinstance(x, (tuple, list)):
        return "(" + "".join(_render(e) + ", " for e in x) + ")"
    return f"r[{x}]"


def numba_callable(t):
    """The Numba dispatcher standing for ``t`` in ``@njit`` code (see the contract)."""
    if getattr(t, "device", "cpu") == "cuda":
        raise GradjitError(f"{_name(t)}: a CUDA transform cannot be called from @njit code")
    entries = _entries(t)
    if not entries:
        half = any(tiers.holds_float16(tiers.settled(e[0]).graph) for e in list(t._compiled.values()))
        raise GradjitError(
            f"{_name(t)}: nothing compiled that @njit code can call. Call it once from Python "
            f"with plain arrays (or {type(t).__name__}.compile_for(*examples)) first: @njit "
            f"code reaches the compiled signatures, whose arguments must be C-contiguous "
            f"arrays and whose results arrays" + (
                " (a signature computing in float16, as np.exp of uint8 does, runs on NumPy: "
                "Numba has no float16)" if half else ""))
    stamp = tuple(id(e[2]) for e in entries)
    made = getattr(t, "_njit", None)
    if made is not None and made[0] == stamp:
        return made[1]
    arity = {len(e[0]) for e in entries}
    if len(arity) != 1:
        raise GradjitError(f"{_name(t)}: compiled with {sorted(arity)} arguments; @njit code "
                           f"can call a transform compiled for one number of arguments")
    args = ", ".join(f"a{i}" for i in range(arity.pop()))
    m = _define(f"njit stand-in for {_name(t)}",
                [f"def stub({args}):", "    raise NotImplementedError", "",
                 f"def typer({args}):", f"    return implement(({args},))", "",
                 f"def call({args}):", f"    return stub({args})"],
                {"implement": lambda argtypes: _implement(t, entries, argtypes)})
    overload(m.stub, jit_options={"error_model": "numpy"})(m.typer)
    disp = numba.njit(m.call)
    t._njit = (stamp, disp)
    return disp


def _implement(t, entries, argtypes):
    """The implementation of ``t`` for Numba argument types ``argtypes``: the entries of
    matching dtypes and dimensions, chosen by shape at run time."""
    fit = [e for e in entries
           if all(isinstance(a, types.Array) and a.layout == "C" and a.ndim == len(s)
                  and a.dtype == numba.from_dtype(d) for a, s, d in zip(argtypes, e[0], e[1]))]
    have = "; ".join(", ".join(f"{np.dtype(d).name}{list(s)}" for s, d in zip(e[0], e[1]))
                     for e in entries)
    if not fit:
        raise TypingError(f"{_name(t)}: called from @njit code with ({', '.join(map(str, argtypes))}),"
                          f" which it has no compiled code for. It has: {have}. Call it once from "
                          f"Python with such arrays (C-contiguous), or compile_for(*examples)")
    n = len(argtypes)
    params = ", ".join(f"a{i}" for i in range(n))
    lines = [f"def impl({params}):"]
    ns = {}
    for k, (shapes, _, exe, consts, outputs) in enumerate(fit):
        ns[f"e{k}"] = native(exe.fn)
        extra = list(consts) + [exe.consts]
        for j, c in enumerate(extra):
            ns[f"c{k}_{j}"] = np.ascontiguousarray(c)
        test = " and ".join(f"a{i}.shape == {tuple(s)}" for i, s in enumerate(shapes)) or "True"
        call_args = ", ".join([f"a{i}" for i in range(n)] +
                              [f"c{k}_{j}.copy()" for j in range(len(extra))])
        lines += [f"    if {test}:", f"        r = e{k}({call_args})",
                  f"        return {_render(outputs)}"]
    msg = (f"{_name(t)}: called from @njit code with argument shapes it was not compiled for; "
           f"it has: {have}")
    lines.append(f"    raise TypeError({msg!r})")
    return _define(f"njit implementation of {_name(t)}", lines, ns).impl


def c_callable(t, examples):
    t.compile_for(*examples)
    shapes = tuple(np.shape(a) for a in examples)
    dtypes = tuple(np.asarray(a).dtype for a in examples)
    entry = next((e for e in _entries(t) if e[0] == shapes and e[1] == dtypes), None)
    if entry is None:
        raise GradjitError(f"{_name(t)}: no C-callable form for these arguments (they must be "
                           f"arrays of at least one dimension, and the results arrays)")
    _, _, exe, consts, outputs = entry
    leaves = _leaves(outputs)
    outs = [exe.graph.outputs[i] for i in leaves]
    sig = types.void(*[types.CPointer(numba.from_dtype(d)) for d in dtypes],
                     *[types.CPointer(numba.from_dtype(v.dtype)) for v in outs])
    extra = list(consts) + [exe.consts]
    ns = {"e": native(exe.fn), "carray": numba.carray}
    ns.update({f"c{j}": np.ascontiguousarray(c) for j, c in enumerate(extra)})
    ins = [f"p{i}" for i in range(len(shapes))]
    lines = [f"def c_entry({', '.join(ins + [f'q{k}' for k in range(len(outs))])}):"]
    lines += [f"    a{i} = carray(p{i}, {tuple(s)})" for i, s in enumerate(shapes)]
    lines.append(f"    r = e({', '.join([f'a{i}' for i in range(len(shapes))] + [f'c{j}.copy()' for j in range(len(extra))])})")
    for k, (i, v) in enumerate(zip(leaves, outs)):
        lines.append(f"    q{k}[0] = r[{i}]" if v.ndim == 0 else
                     f"    carray(q{k}, {tuple(v.shape)})[...] = r[{i}]")
    return numba.cfunc(sig, error_model="numpy")(_define(f"C entry of {_name(t)}", lines, ns).c_entry)


def _leaves(x):
    if isinstance(x, (tuple, list)):
        return [i for e in x for i in _leaves(e)]
    return [x]


def install(cls):
    """Make instances of ``cls`` (runtime/transforms.py's base class) typeable by Numba."""
    @typeof_impl.register(cls)
    def _typeof(val, c):
        return types.Dispatcher(numba_callable(val))


# Numba's typing and the standard library's dispatch (functools) stand between the user's
# call of an @njit function and the typeof below: not the user's line.
_NOT_USERS = _OURS + (os.path.dirname(os.path.abspath(numba.__file__)) + os.sep,
                      functools.__file__, "<frozen")


@typeof_impl.register(Tracer)
def _typeof_tracer(val, c):
    """A traced array reached a ``@numba.njit`` function: Numba types concrete arrays only.
    The user's line is the first frame outside gradjit and Numba; the function is the
    dispatcher Numba's typing runs for (its ``typeof_pyval`` frame)."""
    f, name, site = sys._getframe(1), None, None
    while f is not None and site is None:
        fn = f.f_code.co_filename
        if fn.startswith(_NOT_USERS):
            d = f.f_locals.get("self") if f.f_code.co_name == "typeof_pyval" else None
            name = name or getattr(getattr(d, "py_func", None), "__qualname__", None)
        else:
            site = Site(fn, f.f_lineno)
        f = f.f_back
    raise GradjitError(
        f"a traced value (an array of shape {tuple(val.shape)}, {val.dtype}) reached the "
        f"@numba.njit function {name or ''!r}: inside gj.jit / gj.grad arrays are traced, and "
        f"Numba compiles for concrete arrays. Call the @njit function outside the traced "
        f"function (on its arguments or its result), write its body with NumPy calls in the "
        f"traced function, or pass gradjit's gradient into @njit code instead (the README's "
        f"'Gradients that travel: @njit code')", site)
