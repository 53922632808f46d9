"""Function tracing for ``@gj.jit``: abstract values that record into a Graph.

Contract
- A ``Tracer`` stands for a ``Value`` of a ``Graph`` being built: it has a
  shape and a dtype but no contents. Ops on tracers (torch-named methods,
  operators, plain NumPy calls through the array protocols) append nodes.
- Arrays and Tensors met while tracing become graph inputs ("constants are
  arguments"): ``graph.constants`` maps such a Value to its array, so the
  compiled code receives them at call time and they never enter the source.
- Anything that needs a concrete value (``if x > 0:``, ``float(x)``,
  ``np.asarray(x)``) raises ``TracerValueError`` naming the user's line and
  saying what to write instead.
- ``trace(args)`` starts a graph with one input per array argument;
  ``flatten_output`` / ``unflatten_output`` convert the function's result.
"""
from __future__ import annotations

import dis
import sys
import threading

import numpy as np

from gradjit.tracer import pytree
from gradjit.tracer.api import ArrayOps
from gradjit.tracer.numpy_methods import NumpyMethods
from gradjit.tracer.dispatch import NUMPY_CALL
from gradjit.tracer.ir import Graph
from gradjit.tracer.registry import (GradjitError, _user_frame, bind_attrs, get_op, real_only,
                                     user_site)
from gradjit.tracer.tracer_setitem import VIEW_OPS, forget_view, note_view, setitem, write


class TracerValueError(GradjitError, TypeError):
    pass


class TracerStoreError(GradjitError, ValueError):
    """A traced value stored into a NumPy array (``out[i] = v``); a ValueError, as NumPy's.
    Storing one element, NumPy replaces any error of the value's ``__float__`` by its own
    "setting an array element with a sequence" (a traced value has ``__getitem__``: a
    sequence to NumPy), so the error is also kept in ``PENDING_STORE`` for this thread,
    and ``tracer/coercion.traced_numpy`` raises it in place of NumPy's."""


PENDING_STORE = threading.local()   # .error: the last TracerStoreError of this thread

_ADVICE = ("the value of a traced array is not known while gj.jit / gj.grad trace the function, so it "
           "cannot steer Python control flow ({what}). Use np.where(cond, a, b) (or gj.where) to "
           "select values, or mark the argument static with gj.jit(f, static_argnums=...) if it is a "
           "configuration value.")


_ARRAY_ADVICE = (
    "NumPy asked for the numbers of a traced array (np.asarray of it), which are not known "
    "while gj.jit / gj.grad trace the function. Either a NumPy function gradjit does not "
    "trace received it (the README's section 'NumPy inside gj.jit / gj.grad' lists those "
    "that are traced), or a list of traced arrays went where NumPy makes one array of it: "
    "a ufunc method such as np.maximum.reduce([a, b]) or np.add.accumulate([a, b]); "
    "stack the list first (np.maximum.reduce(np.stack([a, b]))).")


_STORE_ADVICE = ("a traced value cannot be stored into a NumPy array (out[i] = v): this array "
                 "was made outside the traced function, by a library, with an integer dtype, "
                 "or by a zeros / empty / full name gradjit did not reach (bound outside the "
                 "traced function's module and the user functions it calls). Make the array "
                 "inside the function with np.zeros / np.empty / np.full of a float dtype or "
                 "np.zeros_like(x) (traced buffers you can assign into), or collect the values "
                 "in a list and np.stack them")


def _storing_into_array():
    """Is the user's current instruction a subscript store (``out[i] = v``)?"""
    f = _user_frame(2)
    if f is None:
        return False
    return dis.opname[f.f_code.co_code[f.f_lasti]] in ("STORE_SUBSCR", "STORE_SLICE")


def _indexing_an_array():
    """Is the user's current instruction a subscript load (``table[i]``, NumPy reading a
    traced index ``i`` of a NumPy array)?"""
    f = _user_frame(2)
    return f is not None and dis.opname[f.f_code.co_code[f.f_lasti]] in ("BINARY_SUBSCR",
                                                                         "BINARY_SLICE")


_NUMPY_DIR = np.__file__.rsplit("/", 1)[0].rsplit("\\", 1)[0]


def _c_call_text():
    """The user's call expression (``np.float64(v)``) when C code called straight from the
    user's line asked for a traced array's numbers (NumPy's scalar types do: no protocol
    intercepts ``np.float64(v)``), else None. Read from the CALL instruction's columns."""
    import linecache
    f = sys._getframe(2)   # (the caller of __array__)
    if f is not _user_frame(2) or f.f_code.co_filename.startswith(_NUMPY_DIR):
        return None
    code = f.f_code
    if not dis.opname[code.co_code[f.f_lasti]].startswith("CALL"):
        return None
    line, end, col, end_col = list(code.co_positions())[f.f_lasti // 2]
    if None in (line, end, col, end_col) or line != end:
        return None
    text = linecache.getline(code.co_filename, line)[col:end_col]
    return text or None


_INDEX_ADVICE = ("a NumPy array indexed by a traced array (table[i]): NumPy asks for the index's "
                 "numbers, which are not known while gj.jit / gj.grad trace the function. "
                 "Write np.take(table, i, axis=0) (traced, with its gradient), or index a traced "
                 "array: a function argument, or a buffer filled inside the function.")


class Tracer(NumpyMethods, ArrayOps):
    __slots__ = ("graph", "value", "__weakref__")   # (weak: tracer_setitem's view tree)

    def __init__(self, graph, value):
        self.graph = graph
        self.value = value

    shape = property(lambda self: self.value.shape)
    dtype = property(lambda self: self.value.dtype)

    def __repr__(self):
        return f"Tracer({self.value!r})"

    def _fail(self, what):
        if _storing_into_array():
            PENDING_STORE.error = TracerStoreError(_STORE_ADVICE, user_site())
            raise PENDING_STORE.error
        raise TracerValueError(_ADVICE.format(what=what), user_site())

    def __bool__(self):
        self._fail("`if`, `while`, `and`, `or`, `not` or bool() on a traced array")

    def __float__(self):
        self._fail("float() of a traced array")

    def __int__(self):
        self._fail("int() of a traced array")

    def __format__(self, spec):
        if not spec:   # f"{x}" / str.format: its repr, as any object's
            return object.__format__(self, spec)
        raise TracerValueError(
            f"the value of a traced array is not known while gj.jit / gj.grad trace the "
            f"function, so it cannot be formatted (a format spec {spec!r}: f\"{{x:{spec}}}\"). "
            f"Return the value (gj.value_and_grad, or has_aux=True for extra outputs) and "
            f"format it outside the traced function.", user_site())

    def __complex__(self):
        self._fail("complex() of a traced array")

    def __round__(self, ndigits=None):
        """``round(x, n)`` of a traced scalar: ``np.round(x, n)``, as NumPy's scalars (a zero
        gradient, as JAX's round); ``round(x)`` gives a Python int, which needs the value."""
        if self.ndim:   # (NumPy's arrays have no __round__, only its scalars)
            raise TypeError(f"type numpy.ndarray doesn't define __round__ method (round() of a "
                            f"traced array of shape {tuple(self.shape)}: use np.round(x, n))\n"
                            f"  at {user_site()}")
        if ndigits is None:
            self._fail("round() of a traced scalar without ndigits, which gives a Python int; "
                       "np.round(x) keeps it traced")
        return np.round(self, ndigits)

    def __index__(self):
        self._fail("a traced array used as an index or size")

    def item(self):
        self._fail(".item() of a traced array")

    def tolist(self):
        self._fail(".tolist() of a traced array")

    def _writable(self, what):
        body = BODIES.stack[-1] if BODIES.stack else None
        if body is not None and self.graph is not body.graph and id(self.graph) in body.family:
            raise GradjitError(f"{what} inside the body of gj.scan / gj.fori_loop / "
                               "gj.while_loop / gj.cond / gj.checkpoint, on an array made "
                               "outside it: a body cannot change outer arrays. Pass the array "
                               "in the loop's carry and return the changed one", user_site())

    def __getitem__(self, index):
        out = ArrayOps.__getitem__(self, index)
        if out.ndim == 0 and not (index is Ellipsis
                                  or isinstance(index, tuple)
                                  and any(i is Ellipsis for i in index)):
            # NumPy gives a scalar here (``v[i]`` of a vector, ``a[()]``): a copy, not a view,
            # so ``s = v[-1]; s *= 2`` leaves ``v`` as it was
            return out.copy() if out is self else forget_view(out)
        return out

    def __setitem__(self, index, value):
        self._writable("x[index] = value")
        setitem(self, index, value)   # rebinds this tracer (tracer/tracer_setitem.py)

    def _op_assign(self, sign, result):
        """``x op= y`` as NumPy: ``x``'s own memory holds the result (cast to its dtype,
        'same_kind', and never broadcast larger), so every name bound to ``x``, its base
        and its other views see it (tracer/tracer_setitem.py's write-through)."""
        if result is NotImplemented:
            return result
        self._writable(f"x {sign} y")
        if tuple(result.shape) != tuple(self.shape):
            raise ValueError(f"non-broadcastable output operand with shape {tuple(self.shape)} "
                             f"doesn't match the broadcast shape {tuple(result.shape)}\n"
                             f"  at {user_site()}")
        if result.dtype != self.dtype:
            if not np.can_cast(result.dtype, self.dtype, casting="same_kind"):
                raise TypeError(f"x {sign} y: cannot cast the result from dtype('{result.dtype}') "
                                f"to dtype('{self.dtype}') with casting rule 'same_kind'\n"
                                f"  at {user_site()}")
            result = result.astype(self.dtype)
        write(self, result.value)
        return self

    def _copy(self):
        """A new tracer of the same value: a NumPy copy, which later assignments to either
        one do not share."""
        return Tracer(self.graph, self.value)

    def __array__(self, dtype=None, copy=None):
        if _storing_into_array():
            self._fail("np.asarray() of a traced array")
        if _indexing_an_array():
            raise TracerValueError(_INDEX_ADVICE, user_site())
        call = _c_call_text()
        if call is not None:
            raise TracerValueError(
                f"{call}: NumPy asked for the numbers of a traced array, which are not known "
                f"while gj.jit / gj.grad trace the function (NumPy's scalar types such as "
                f"np.float64(v) / np.float32(v) make a number of it, which no protocol lets "
                f"gradjit trace). For a cast write v.astype(np.float64) (traced, with its "
                f"gradient); for a number, return the value from the traced function.",
                user_site())
        # Not control flow: NumPy wants the numbers, in a call gradjit does not trace.
        raise TracerValueError(_ARRAY_ADVICE, user_site())

    def _const(self, array):
        return constant(self.graph, array)

    @classmethod
    def _apply(cls, op_name, inputs, attrs, view_of=True):
        g = next(x.graph for x in inputs if isinstance(x, Tracer))
        body = BODIES.stack[-1] if BODIES.stack else None
        if body is not None and g is not body.graph and id(g) in body.family:
            g = body.graph   # a loop body reads an outer value: it becomes a body input
        op = get_op(op_name)
        attrs = bind_attrs(op, attrs)
        weak_out = False
        if any(x.__class__ is WeakTracer for x in inputs):
            inputs, weak_out = _weak_operands(op, inputs)
        vals = []
        for k, x in enumerate(inputs):
            if isinstance(x, Tracer):
                if x.graph is not g:
                    if body is None or g is not body.graph or id(x.graph) not in body.family:
                        raise GradjitError(f"{op_name}: a traced value escaped from another "
                                           f"trace (it was stored outside the function and "
                                           f"reused)", user_site())
                    x = body.lift(x)
                    inputs = [*inputs[:k], x, *inputs[k + 1:]]
                vals.append(x.value)
            else:
                vals.append(constant(g, np.asarray(x)).value)
        site = g.site_override or user_site()
        out_types = op.infer(vals, attrs)
        for _, dt in out_types:   # (x * 1j: a complex result of real operands)
            real_only(np.dtype(dt), f"the result of {op_name}")
        outs = g.add_node(op_name, vals, attrs, out_types, site)
        res = [(WeakTracer if weak_out and v.dtype.kind in "ifc" else Tracer)(g, v) for v in outs]
        if op_name in VIEW_OPS and view_of and g.view_tree is not None:
            note_view(inputs[0], res[0], op_name, attrs)   # NumPy's view semantics
        return res[0] if len(res) == 1 else tuple(res)


class WeakTracer(Tracer):
    """A traced Python float argument (or a value computed from such ones by Python
    operators alone; a loop index or carried Python number of tracer/control_flow.py, an
    int64 one for an int): weakly typed, as a Python number is to NumPy 2 (NEP 50) and a weak
    type to JAX. Its Value is float64 (the number's own precision); where it meets a
    strong operand in an op with an elementwise promotion, ``_weak_operands`` casts it to
    the dtype NumPy gives that operand and a Python float (float32 array * 0.5: float32)."""
    __slots__ = ()

    _weak = True

    @staticmethod
    def _weakly(t):
        return WeakTracer(t.graph, t.value)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        NUMPY_CALL.depth += 1   # (a ufunc's result is strong: np.exp(0.5) is an np.float64)
        try:
            return Tracer.__array_ufunc__(self, ufunc, method, *inputs, **kwargs)
        finally:
            NUMPY_CALL.depth -= 1

    def __array_function__(self, func, types, args, kwargs):
        # a NumPy function's result is an array, strong (np.transpose(0.5) is a float64
        # array), even one that hands its argument back
        NUMPY_CALL.depth += 1
        try:
            return strong(Tracer.__array_function__(self, func, types, args, kwargs))
        finally:
            NUMPY_CALL.depth -= 1

    def __round__(self, ndigits=None):   # (round(0.5, 3) is a Python float: weak)
        return WeakTracer._weakly(strong(Tracer.__round__(self, ndigits)))


def strong(x):
    """``x`` with a weak tracer as a strong one of its dtype (NumPy's arrays are strong);
    tuples and lists of results element by element."""
    if isinstance(x, (tuple, list)):
        return type(x)(strong(v) for v in x)
    return Tracer(x.graph, x.value) if x.__class__ is WeakTracer else x


Tracer._weak = False


_PY_ZERO = {"c": 0j, "f": 0.0, "i": 0}   # a weak tracer's kind as a Python number


def _weak_operands(op, inputs):
    """``(inputs, weak result?)`` of an op reading weak tracers. Beside strong operands,
    in an op NumPy promotes elementwise, each weak one is cast to NumPy's dtype for the
    strong dtypes and a Python scalar of the weak one's kind; an op whose tensors are all
    weak gives a weak float result when a Python operator made it (``lam * 2``, ``-lam``),
    not a NumPy function (``np.exp(lam)`` is a strong float64, as NumPy's)."""
    rule = getattr(op, "promotion", "")
    first = 1 if rule == "where" else 0   # (where's condition takes no part)
    strong = [np.dtype(x.dtype) if hasattr(x, "dtype") else np.asarray(x).dtype
              for x in inputs[first:] if x.__class__ is not WeakTracer]
    if not strong:
        return inputs, op.kind == "elementwise" and NUMPY_CALL.depth == 0
    if not rule:   # (not elementwise: the number is an array to NumPy, float64)
        return inputs, False
    out = list(inputs)
    for k in range(first, len(out)):
        x = out[k]
        if x.__class__ is WeakTracer:
            dt = np.result_type(*strong, _PY_ZERO[x.dtype.kind])
            if dt != x.dtype:
                out[k] = Tracer(x.graph, x.value).astype(dt)
    return out, False


def _augmented(sign, op):
    def method(self, other):
        return self._op_assign(sign, getattr(self, op)(other))
    method.__name__ = f"__i{op[2:]}"
    return method


for _sign, _op in (("+=", "__add__"), ("-=", "__sub__"), ("*=", "__mul__"),
                   ("/=", "__truediv__"), ("//=", "__floordiv__"), ("**=", "__pow__"),
                   ("%=", "__mod__"), ("@=", "__matmul__"), ("&=", "__and__"), ("|=", "__or__"),
                   ("^=", "__xor__"), ("<<=", "__lshift__"), (">>=", "__rshift__")):
    setattr(Tracer, f"__i{_op[2:]}", _augmented(_sign, _op))   # x op= y: Tracer._op_assign


class _Bodies(threading.local):
    def __init__(self):
        self.stack = []   # BodyTrace of each loop / branch body being traced, innermost last


BODIES = _Bodies()


class BodyTrace:
    """A region body being traced (tracer/control_flow.py). Tracers of the enclosing
    graphs that the body reads become body inputs (``lift``); ``feeds`` pairs each such
    input with the tracer of the directly enclosing graph that feeds it."""

    def __init__(self, graph, parent):
        self.graph, self.parent = graph, parent
        self.up = BODIES.stack[-1] if BODIES.stack else None
        self.family = {id(graph), id(parent)} | (self.up.family if self.up is not None and
                                                 self.up.graph is parent else set())
        self.map = {}     # enclosing Value -> body Value
        self.feeds = []   # (body input Value, enclosing-graph Tracer)

    def lift(self, t):
        if t.graph is self.graph:
            return t
        v = self.map.get(t.value)
        if v is None:
            outer = t if t.graph is self.parent else self.up.lift(t)
            v = self.map[t.value] = self.graph.add_input(t.value.shape, t.value.dtype)
            self.feeds.append((v, outer))
        return Tracer(self.graph, v)

    def __enter__(self):
        BODIES.stack.append(self)
        return self

    def __exit__(self, *exc):
        BODIES.stack.pop()


def constant(graph, array):
    """A graph input fed with ``array`` at call time (not baked into source)."""
    array = np.asarray(getattr(array, "data", array))
    if array.dtype == object:   # (NumPy made an array of a list holding traced values)
        raise GradjitError("an array of Python objects met the trace: a list mixing traced "
                           "values and numbers where gradjit does not build one array of it; "
                           "make it one array first (np.array([...]) or np.stack)", user_site())
    real_only(array.dtype, "an array the traced function captured or made")
    if array.ndim == 0:  # scalars: one input per (dtype, value), e.g. the 0 of where(c, g, 0)
        key = ("scalar", array.dtype.str, array.tobytes())  # exact bits: -0.0 is not 0.0
        v = graph.constant_ids.get(key)
        if v is None:
            v = graph.constant_ids[key] = graph.add_input((), array.dtype)
            graph.constants[v] = array
        return Tracer(graph, v)
    v = graph.constant_ids.get(id(array))
    if v is None or graph.constants[v] is not array:
        v = graph.add_input(array.shape, array.dtype)
        graph.constants[v] = array
        graph.constant_ids[id(array)] = v  # one input per captured array (CSE sees it)
    return Tracer(graph, v)


def _as_tracer(graph, x):
    return x if isinstance(x, Tracer) else constant(graph, x)


def trace(args, name="jit", weak=()):
    """A new graph with one input per array in ``args`` (``None`` entries are skipped);
    ``weak``: the positions in ``args`` of Python floats, traced weakly (``WeakTracer``)."""
    g = Graph(name)
    tracers, arg_values = [], []
    for a in args:
        if a is None:
            tracers.append(None)
            continue
        if not hasattr(a, "shape") or not hasattr(a, "dtype"):  # device arrays stay put
            a = np.asarray(a)
        real_only(a.dtype, f"argument {len(arg_values)} of the traced function (shape {tuple(a.shape)})")
        v = g.add_input(tuple(a.shape), np.dtype(a.dtype))
        arg_values.append(v)
        tracers.append((WeakTracer if len(tracers) in weak else Tracer)(g, v))
    return g, tracers, arg_values


def flatten_output(graph, out, statics=False):
    """``(values, tree)``: the leaves of a result made of tuples, lists, dicts and
    namedtuples (nested, tracer/pytree.py), in order, and the structure to rebuild it; a
    leaf is a tracer, array or number. ``statics``: a leaf that is neither (a str, bytes,
    any other object) is no graph output but part of ``tree``, given back as the very
    object (``unflatten_output``): compiled code cannot return it, and the interpreter
    must not give back something else."""
    leaves, tree = pytree.flatten(out)
    vals, kept = [], []
    for i, x in enumerate(leaves):
        if not isinstance(x, Tracer):
            if statics and not _numeric(x):
                kept.append((i, x))
                continue
            x = np.asarray(x)
            if x.dtype == object:
                raise TypeError(f"{graph.name}: a traced function must return arrays, numbers, "
                                f"or tuples, lists, dicts and namedtuples of them; got "
                                f"{type(out).__name__}")
        vals.append(_as_tracer(graph, x).value)
    return vals, (StaticLeaves(tree, tuple(kept)) if kept else tree)


def _numeric(x):
    """A leaf that becomes an array output: a number, a numeric or boolean array."""
    if isinstance(x, (str, bytes)):
        return False
    try:
        return np.asarray(x).dtype.kind in "biufc"
    except Exception:   # (an object NumPy cannot convert is static)
        return False


class StaticLeaves:
    """A result's structure and its static leaves: ``(position among the leaves,
    object)`` pairs put back between the graph's outputs."""

    __slots__ = ("tree", "kept")

    def __init__(self, tree, kept):
        self.tree, self.kept = tree, kept


def unflatten_output(tree, items):
    if tree.__class__ is StaticLeaves:
        items = list(items)
        for i, x in tree.kept:   # (ascending positions: each insert lands in place)
            items.insert(i, x)
        tree = tree.tree
    return pytree.unflatten(tree, list(items))
