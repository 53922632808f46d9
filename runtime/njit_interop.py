"""Transforms called from the user's own ``@numba.njit`` code.

Contract
- ``numba.typeof(t)`` of a transform ``t`` (``gj.jit``, ``gj.grad``, ``gj.value_and_grad``)
  is the type of ``numba_callable(t)``: a Numba dispatcher taking ``t``'s array arguments
  and returning what ``t`` returns (arrays, 0-d results as scalars, tuples where ``t``
  returns tuples). So ``t`` works inside ``@njit`` code as a global, a closure variable or
  an argument, like any jitted function.
- It runs the compiled code of the signatures ``t`` has been compiled for (by calls from
  Python, or ``t.compile_for(*examples)``). Shapes are checked at run time: others raise
  ``TypeError`` naming ``t`` and the shapes it has. Calls with dtypes, dimensions or
  layouts (not C-contiguous) it has no code for fail at typing with an ``NjitCallError``
  that says the same. A new signature compiled later is seen by ``@njit`` functions
  compiled later.
- ``c_callable(t, examples)``: a ``numba.cfunc`` of ``t`` at the examples' signature, for C
  callers (``.address``, ``.ctypes``): ``void f(const T0 *a0, ..., T *out0, ...)``, one
  pointer per argument array (C order, the examples' shapes), then one per result array
  in the order of the result's leaves (a 0-d result: one element), written by the call.
- Not callable from ``@njit`` (a ``GradjitError`` at typing, saying why and what works
  instead): CUDA transforms, Jacobians (``jacrev``, ``jacfwd``, ``hessian``: a ``gj.jit`` of
  a function calling one is callable), signatures whose arguments are not plain arrays of
  at least one dimension (pytrees, static values, keywords, 0-d), results that are not
  arrays (``has_aux`` with non-array aux), transforms that update state (batch norm under
  tracing), signatures that run on the NumPy interpreter (float16, ``GRADJIT_EXECUTOR=numpy``)
  or still compile in the background. A transform with no signature @njit code can call
  says so for each signature it has.
- Errors raised while Numba types the user's call are ``NjitCallError`` (a ``GradjitError``
  and a ``TypeError``), naming the user's line: not Numba's ``TypingError``, which Numba
  buries in a report of its own, so the message is the exception's.
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
import sysconfig
import types as pytypes

import numba
import numpy as np
from numba.core import types
from numba.extending import overload, typeof_impl

from gradjit.runtime import threads, tiers
from gradjit.runtime.compiler import Executable
from gradjit.tracer import gensrc, pytree
from gradjit.tracer.registry import _OURS, GradjitError, Site, _site
from gradjit.tracer.trace import Tracer

_SEQ = itertools.count()
_NUMBA = os.path.dirname(os.path.abspath(numba.__file__)) + os.sep
_GJ = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_STDLIB = sysconfig.get_paths()["stdlib"] + os.sep
_SITE = tuple({sysconfig.get_paths()[k] + os.sep for k in ("purelib", "platlib")})


class NjitCallError(GradjitError, TypeError):
    """A call from ``@njit`` code that gradjit has no code for. Not a Numba error: Numba
    lets other exceptions raised while it types a call through as they are, where its own
    ``TypingError`` would be one line deep in its report of the failed typing."""


class TracedIntoNjitError(GradjitError, TypeError):
    """A traced array reached a ``@numba.njit`` function. A ``TypeError`` as Numba's own
    refusal of an argument type: a transform's hot path (runtime/transforms.py) calls its
    compiled code with the caller's arguments and, on a ``TypeError``, goes the slow way
    (a traced argument there: the transform is part of the enclosing trace)."""


def _njit_site():
    """The user's line being typed: the location of the innermost step of Numba's typing
    (a ``loc``, or an ``inst``'s, of its frames) outside gradjit's stand-ins, else the first
    line of Python that is not Numba's, gradjit's or the standard library's (a transform
    passed as an argument is typed when the call dispatches). None when neither is found."""
    f = sys._getframe(1)
    while f is not None:
        name = f.f_code.co_filename
        if name.startswith(_NUMBA):
            loc = f.f_locals.get("loc") or getattr(f.f_locals.get("inst"), "loc", None)
            where = getattr(loc, "filename", None)
            if isinstance(where, str) and not where.startswith("<gradjit"):
                return _site(where, loc.line)
        elif not (name.startswith((_GJ, "<")) or
                  name.startswith(_STDLIB) and not name.startswith(_SITE)):
            return _site(name, f.f_lineno)
        f = f.f_back
    return None



def _const(c):
    """A stored constant as the compiled entry takes it: a 0-d one is a scalar of its dtype
    (``np.ascontiguousarray`` made it shape (1,), which the entry's signature refused:
    a TypingError from ``np.maximum(w, 0.0)``), any other a C array."""
    return np.asarray(c).dtype.type(c) if np.ndim(c) == 0 else np.ascontiguousarray(c)


def _const_arg(name, c):
    """The call's argument for constant ``name``: a copy of an array (the entry may write
    into its inputs), a scalar as it is."""
    return name if np.ndim(c) == 0 else f"{name}.copy()"

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


def _entries(t, refusals=None):
    """[(shapes, dtypes, exe, consts, outputs)] of ``t``'s compiled signatures that
    ``@njit`` code can call; ``outputs``: the structure of its result, as indices into
    the compiled entry's result tuple. ``refusals``: a list given gets, for each other
    signature, (its (shape, dtype) per traced leaf, why @njit code cannot call it)."""
    found = []
    for (layout, sig), (exe, consts, tree, _) in list(t._compiled.items()):
        exe = tiers.settled(exe)
        outputs, why = _callable(t, layout, sig, exe, tree)
        if why is None:
            found.append((tuple(s for s, _ in sig), tuple(d for _, d in sig), exe, consts,
                          outputs))
        elif refusals is not None:
            refusals.append((sig, why))
    return found


def _callable(t, layout, sig, exe, tree):
    """(the result's structure, None) for a signature @njit code can call, else
    (None, why not and what works instead)."""
    parts, kparts = layout
    if kparts:
        return None, (f"called with keyword argument(s) {', '.join(k for k, _ in kparts)}: "
                      f"@njit code passes arrays positionally")
    for i, (kind, treedef, *rest) in enumerate(parts):
        if kind == "static":
            return None, (f"argument {i} is static ({type(treedef.value).__name__}): @njit "
                          f"code passes arrays only; bind it in the function (a closure, "
                          f"functools.partial) and transform that")
        if treedef == ("none",):
            return None, f"argument {i} is None: @njit code passes arrays only"
        if treedef is not None:
            return None, (f"argument {i} is a pytree ({treedef[0]}): pytree arguments are not "
                          f"callable from @njit; pass its leaves as separate C-contiguous "
                          f"arrays, or one flat array (gj.ravel_pytree)")
        if rest[0] not in ((None,), (pytree.WEAK,)):   # (a Python float: 0-d, below)
            return None, (f"argument {i} is a {type(rest[0][0].value).__name__}, not an array: "
                          f"@njit code passes arrays only")
    zero = [str(i) for i, (s, _) in enumerate(sig) if s == ()]
    if zero:
        return None, (f"argument{'s' if len(zero) > 1 else ''} {', '.join(zero)} "
                      f"{'are' if len(zero) > 1 else 'is'} 0-d (a Python number or a 0-d "
                      f"array), which @njit code cannot pass: pass a one-element array "
                      f"(np.array([v])) and read v[0] in the function")
    if exe.__class__ is tiers.Tiered:
        return None, ("it is still compiling in the background: compile_for(*examples) "
                      "waits for it" if exe.failed is None else
                      f"its compile failed ({exe.failed!r}): it runs on the NumPy interpreter")
    if type(exe) is not Executable:
        if tiers.holds_float16(exe.graph):
            return None, ("it computes in float16 (as np.exp of uint8 does), which runs on "
                          "NumPy: Numba has no float16")
        if type(exe).__name__.startswith("Interpreted"):
            return None, ("it runs on the NumPy interpreter (GRADJIT_EXECUTOR=numpy, "
                          "gj.set_tiering('never'), or its compile failed): no compiled code")
        if hasattr(exe, "updates"):
            return None, ("it updates running statistics (batch norm in training) after each "
                          "call, which Python does around its compiled code")
        return None, ("its compiled code takes same-shaped arguments stacked into one array "
                      "(a loop over them was rolled), which Python does per call")
    try:
        outputs = t._unpack(tree, list(range(len(exe.graph.outputs))))
    except Exception:   # noqa: BLE001 - a result that is more than arrays: not callable
        outputs = None
    if outputs is None or not _indices(outputs):
        return None, ("its result is not arrays (has_aux with a value that is not an array, "
                      "or a result holding Python values)")
    return outputs, None


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
    _refuse_kind(t)
    refusals = []
    entries = _entries(t, refusals)
    if not entries:
        how = (f" Call it once from Python with plain arrays (or {type(t).__name__}"
               f".compile_for(*examples)) first.")
        if refusals:
            how = " Its compiled signatures cannot be called from @njit: " + "; ".join(
                f"({_leaves_text(sig)}): {why}" for sig, why in dict.fromkeys(refusals)) + "."
        raise NjitCallError(
            f"{_name(t)}: nothing compiled that @njit code can call.{how} @njit code reaches "
            f"the compiled signatures whose arguments are C-contiguous arrays of at least one "
            f"dimension, passed positionally, and whose results are arrays", _njit_site())
    stamp = tuple(id(e[2]) for e in entries)
    made = getattr(t, "_njit", None)
    if made is not None and made[0] == stamp:
        return made[1]
    arity = {len(e[0]) for e in entries}
    if len(arity) != 1:
        raise NjitCallError(f"{_name(t)}: compiled with {sorted(arity)} arguments; @njit code "
                            f"can call a transform compiled for one number of arguments",
                            _njit_site())
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


def _leaves_text(sig):
    return ", ".join(f"{np.dtype(d).name}{list(s)}" for s, d in sig)


def _refuse_kind(t):
    """Transforms no signature of which @njit (or C) code can call."""
    if getattr(t, "device", "cpu") == "cuda":
        raise NjitCallError(f"{_name(t)}: a CUDA transform cannot be called from @njit code",
                            _njit_site())
    if getattr(t, "jacobian", False):
        raise NjitCallError(
            f"{_name(t)}: Jacobian transforms (gj.jacrev, gj.jacfwd, gj.hessian) cannot be "
            f"called from @njit code: Python assembles their results from the compiled rows. "
            f"Call it from Python, or from @njit call a gj.jit of a function that calls it: "
            f"jac = gj.{type(t).__name__}(...); gj.jit(lambda *a: jac(*a)) traces the "
            f"Jacobian into one graph, which @njit code can call", _njit_site())


def _implement(t, entries, argtypes):
    """The implementation of ``t`` for Numba argument types ``argtypes``: the entries of
    matching dtypes and dimensions, chosen by shape at run time."""
    fit = [e for e in entries
           if all(isinstance(a, types.Array) and a.layout == "C" and a.ndim == len(s)
                  and a.dtype == numba.from_dtype(d) for a, s, d in zip(argtypes, e[0], e[1]))]
    have = "; ".join(", ".join(f"{np.dtype(d).name}{list(s)}" for s, d in zip(e[0], e[1]))
                     for e in entries)
    if not fit:
        layout = [a for a in argtypes if isinstance(a, types.Array) and a.layout != "C"]
        raise NjitCallError(
            f"{_name(t)}: called from @njit code with ({', '.join(map(str, argtypes))}), which "
            f"it has no compiled code for. It has: {have}. " + (
                "Arguments from @njit code must be C-contiguous arrays (np.ascontiguousarray "
                "in the @njit code copies one)" if layout else
                "Call it once from Python with such arrays (C-contiguous), or "
                "compile_for(*examples)"), _njit_site())
    n = len(argtypes)
    params = ", ".join(f"a{i}" for i in range(n))
    lines = [f"def impl({params}):"]
    ns = {}
    for k, (shapes, _, exe, consts, outputs) in enumerate(fit):
        ns[f"e{k}"] = native(exe.fn)
        extra = list(consts) + [exe.consts]
        for j, c in enumerate(extra):
            ns[f"c{k}_{j}"] = _const(c)
        test = " and ".join(f"a{i}.shape == {tuple(s)}" for i, s in enumerate(shapes)) or "True"
        call_args = ", ".join([f"a{i}" for i in range(n)] +
                              [_const_arg(f"c{k}_{j}", c) for j, c in enumerate(extra)])
        lines += [f"    if {test}:", f"        r = e{k}({call_args})",
                  f"        return {_render(outputs)}"]
    msg = (f"{_name(t)}: called from @njit code with argument shapes it was not compiled for; "
           f"it has: {have}")
    lines.append(f"    raise TypeError({msg!r})")
    return _define(f"njit implementation of {_name(t)}", lines, ns).impl


def c_callable(t, examples):
    _refuse_kind(t)
    t.compile_for(*examples)
    shapes = tuple(np.shape(a) for a in examples)
    dtypes = tuple(np.asarray(a).dtype for a in examples)
    entry = next((e for e in _entries(t) if e[0] == shapes and e[1] == dtypes), None)
    if entry is None:
        _, key, _ = pytree.split_args(examples, {}, t.static, t.static_names, t.__name__)
        got = t._compiled.get(key)
        why = None if got is None else _callable(t, key[0], key[1], tiers.settled(got[0]),
                                                 got[2])[1]
        raise GradjitError(f"{_name(t)}: no C-callable form for these arguments (they must be "
                           f"arrays of at least one dimension, and the results arrays)"
                           + (f": {why}" if why else ""))
    _, _, exe, consts, outputs = entry
    leaves = _leaves(outputs)
    outs = [exe.graph.outputs[i] for i in leaves]
    sig = types.void(*[types.CPointer(numba.from_dtype(d)) for d in dtypes],
                     *[types.CPointer(numba.from_dtype(v.dtype)) for v in outs])
    extra = list(consts) + [exe.consts]
    ns = {"e": native(exe.fn), "carray": numba.carray}
    ns.update({f"c{j}": _const(c) for j, c in enumerate(extra)})
    ins = [f"p{i}" for i in range(len(shapes))]
    lines = [f"def c_entry({', '.join(ins + [f'q{k}' for k in range(len(outs))])}):"]
    lines += [f"    a{i} = carray(p{i}, {tuple(s)})" for i, s in enumerate(shapes)]
    lines.append(f"    r = e({', '.join([f'a{i}' for i in range(len(shapes))] + [_const_arg(f'c{j}', c) for j, c in enumerate(extra)])})")
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
    raise TracedIntoNjitError(
        f"a traced value (an array of shape {tuple(val.shape)}, {val.dtype}) reached the "
        f"@numba.njit function {name or ''!r}: inside gj.jit / gj.grad arrays are traced, and "
        f"Numba compiles for concrete arrays. Call the @njit function outside the traced "
        f"function (on its arguments or its result), write its body with NumPy calls in the "
        f"traced function, or pass gradjit's gradient into @njit code instead (the README's "
        f"'Gradients that travel: @njit code')", site)
