"""Custom autograd Functions (``gj.autograd.Function``), as in torch.

Contract
- ``class F(Function)`` with static ``forward(ctx, *args)`` (or ``forward(*args)``
  plus ``setup_context(ctx, inputs, output)``) and ``backward(ctx, *grads)``
  (or ``vjp``; defining both is an error). ``F.apply(*args)`` runs forward
  without recording and, when an input requires grad, records one node
  (op ``custom_function``) whose backward node is named ``FBackward``.
- Backward, in tensor mode: the user's ``backward`` is first *traced* with
  tracers for the gradients and saved tensors, so it joins the compiled
  backward graph (and is differentiable again). If it cannot be traced (it
  calls NumPy on raw data, keeps arrays on ``ctx`` ...) or is marked
  ``once_differentiable``, it runs as a Python callback between compiled
  segments (``host_call``), with a one-time log message. The context's plain
  attributes (numbers, strings, and lists, tuples and dicts of them, nested)
  are part of the plan key, by type and value; any other attribute makes the
  backward opaque. Values the traced backward reads from outside (globals,
  closure cells, class attributes, tensors) are guarded as a transform's are
  (``runtime/guards.py``): a change rebuilds the plan (``runtime/engine.py``).
- A backward with side effects outside it (it counts calls, logs its gradients,
  sets a global or a class attribute) is never traced into a plan: a trace runs
  it once, with tracers, and a cached plan never again. It runs as a Python
  callback on real Tensors at every backward, as torch runs it (``_effects``).
  Found from its code before any trace (stores to globals, closure cells,
  attributes of outside objects; item stores or mutating method calls with an
  outside container in reach), and after a trace by a guard recorded before it
  (outside values that the trace changed): then the class is marked and later
  backwards run it as Python (that one trace's effects have happened).
- In ``gj.jit`` / ``gj.grad`` (tracer arguments), forward and backward are
  both traced; the forward's ops are computed but not differentiated (the
  node's rule is the user's backward).
"""
from __future__ import annotations

import collections
import dis
import functools
import logging
import types

import numpy as np

from gradjit.runtime.segments import host_call
from gradjit.tracer.api import apply as _apply_op
from gradjit.tracer.modes import is_recording, no_grad, set_grad_enabled
from gradjit.tracer.registry import GradjitError, user_site
from gradjit.tracer.tape import flush
from gradjit.tracer.tensor import GradFn, Tensor
from gradjit.tracer.trace import Tracer

log = logging.getLogger("gradjit")
_LOGGED = set()
_PLAIN = (int, float, bool, str, type(None), np.dtype)


class FunctionCtx:
    _INTERNAL = {"to_save", "needs_input_grad", "non_differentiable", "materialize_grads",
                 "dirty", "_saved", "_saved_map", "_args"}

    def __init__(self):
        self.to_save = ()
        self.needs_input_grad = ()
        self.non_differentiable = set()
        self.materialize_grads = True
        self.dirty = set()
        self._saved = None
        self._saved_map = None

    def save_for_backward(self, *tensors):
        self.to_save = tensors

    @property
    def saved_tensors(self):
        if self._saved is None:
            return tuple(self.to_save)
        return tuple(self._saved)

    def mark_non_differentiable(self, *tensors):
        self.non_differentiable.update(id(t) for t in tensors)

    def set_materialize_grads(self, value):
        self.materialize_grads = bool(value)

    def mark_dirty(self, *tensors):
        self.dirty.update(id(t) for t in tensors)

    def _user_attrs(self):
        return {k: v for k, v in vars(self).items() if k not in self._INTERNAL}

    def opaque(self):
        return any(not _is_plain(v) for v in self._user_attrs().values())

    def fingerprint(self):
        if self.opaque():
            return ("opaque",)
        return (tuple(self.needs_input_grad), self.materialize_grads,
                tuple((k, _frozen(v)) for k, v in sorted(self._user_attrs().items())))


def _is_plain(v):
    if isinstance(v, (tuple, list)):
        return all(_is_plain(x) for x in v)
    if isinstance(v, dict):
        return all(_is_plain(k) and _is_plain(x) for k, x in v.items())
    return isinstance(v, _PLAIN)


def _frozen(v):
    """A hashable key of a plain value: its type with it (so 1, 1.0 and True, or a list
    and a tuple, are different keys) and a float's bits (-0.0 is not 0.0; NaN equals
    itself, where ``nan == nan`` would miss the plan every time)."""
    if isinstance(v, (tuple, list)):
        return (type(v), tuple(_frozen(x) for x in v))
    if isinstance(v, dict):
        return (type(v), tuple((_frozen(k), _frozen(x)) for k, x in v.items()))
    if isinstance(v, float):
        return (type(v), v.hex())
    return (type(v), v)


def once_differentiable(backward):
    """First-order only: a double backward through this Function raises."""
    @functools.wraps(backward)
    def wrapper(ctx, *grads):
        with no_grad():
            return backward(ctx, *grads)
    wrapper._gj_once_differentiable = True
    return wrapper


class _FunctionMeta(type):
    def __init__(cls, name, bases, ns):
        super().__init__(name, bases, ns)
        if "backward" in ns and "vjp" in ns:
            raise TypeError("Implementing both 'backward' and 'vjp' for a custom Function is not "
                            "allowed. You should only implement one of them.")
        if "vjp" in ns:
            cls.backward = ns["vjp"]


class Function(metaclass=_FunctionMeta):
    @staticmethod
    def forward(ctx, *args):
        raise NotImplementedError("You must implement the forward function for custom "
                                  "autograd.Function.")

    @staticmethod
    def setup_context(ctx, inputs, output):
        raise NotImplementedError("setup_context is not implemented.")

    @staticmethod
    def backward(ctx, *grads):
        raise NotImplementedError("You must implement either the backward or vjp method for your "
                                  "custom autograd.Function to use it with backward mode AD.")

    @classmethod
    def _forward(cls, ctx, args):
        if "setup_context" in {k for c in cls.__mro__[:-1] if c is not Function for k in vars(c)}:
            out = cls.forward(*args)
            cls.setup_context(ctx, args, out)
            return out
        return cls.forward(ctx, *args)

    @classmethod
    def apply(cls, *args):
        if any(isinstance(a, Tracer) for a in args):
            return _apply_traced(cls, args)
        ctx = FunctionCtx()
        ctx.needs_input_grad = tuple(isinstance(a, Tensor) and a.requires_grad for a in args)
        flush()   # a forward may write its inputs (mark_dirty): deferred values first
        with no_grad():
            out = cls._forward(ctx, args)
        single = not isinstance(out, tuple)
        outs = [o if isinstance(o, Tensor) else Tensor(np.asarray(o)) for o in
                ((out,) if single else out)]
        if not (is_recording() and any(ctx.needs_input_grad)):
            return outs[0] if single else tuple(outs)
        tensors = [a for a in args if isinstance(a, Tensor)]
        for t in tensors:
            if id(t) in ctx.dirty and t.grad_fn is None and t.requires_grad:
                raise RuntimeError("a leaf Variable that requires grad has been used in an in-place "
                                   "operation.")
        edges = [(t.grad_fn, t._index) if t.grad_fn is not None else t for t in tensors]
        in_pos = {id(t): i for i, t in enumerate(tensors)}
        out_pos = {id(o): j for j, o in enumerate(outs)}
        saved_map, extra = [], []
        for s in ctx.to_save:
            if s is None:
                saved_map.append(None)
            elif id(s) in out_pos:
                saved_map.append(("out", out_pos[id(s)]))
            elif id(s) in in_pos:
                saved_map.append(("in", in_pos[id(s)]))
            else:
                saved_map.append(("extra", len(extra)))
                extra.append(s)
        edges += [(t.grad_fn, t._index) if t.grad_fn is not None else t for t in extra]
        attrs = {"function": cls, "n_in": len(tensors),
                 "tensor_args": tuple(isinstance(a, Tensor) for a in args)}
        fn = GradFn("custom_function", attrs, edges, [(o.shape, o.dtype) for o in outs],
                    [o.data for o in outs], user_site())
        fn.ctx = ctx
        ctx._saved_map = saved_map
        res = []
        for j, o in enumerate(outs):
            if id(o) in ctx.dirty:
                o.grad_fn, o._index = fn, j
                o._box[0] += 1
            else:
                o = Tensor(o.data, grad_fn=fn, index=j, box=o._box)
            if id(outs[j]) in ctx.non_differentiable or o.dtype.kind != "f":
                o.grad_fn = None
            else:
                o._requires_grad = True
            res.append(o)
        fn.versions = [(o._box, o._box[0]) for o in res]
        ctx._saved = [None if m is None else res[m[1]] if m[0] == "out" else
                      tensors[m[1]] if m[0] == "in" else extra[m[1]] for m in saved_map]
        return res[0] if single else tuple(res)


def _apply_traced(cls, args):
    ctx = FunctionCtx()
    ctx.needs_input_grad = tuple(isinstance(a, Tracer) and a.dtype.kind == "f" for a in args)
    # (the other arguments, for a replay that applies the Function again: segments.replay)
    ctx._args = tuple(None if isinstance(a, Tracer) else a for a in args)
    out = cls._forward(ctx, args)
    single = not isinstance(out, tuple)
    outs = list((out,) if single else out)
    g = next(a.graph for a in args if isinstance(a, Tracer))
    outs = [o if isinstance(o, Tracer) else Tracer(g, g.add_input(np.shape(o), np.asarray(o).dtype))
            for o in outs]
    tracers = [a for a in args if isinstance(a, Tracer)]
    attrs = {"function": cls, "n_in": len(tracers), "ctx": ctx,
             "tensor_args": tuple(isinstance(a, Tracer) for a in args)}
    vals = g.add_node("custom_function", [t.value for t in tracers] + [o.value for o in outs],
                      attrs, [(o.shape, o.dtype) for o in outs], g.site_override or user_site())
    res = [Tracer(g, v) for v in vals]
    return res[0] if single else tuple(res)


def _per_tensor(cls, res, tensor_args):
    res = res if isinstance(res, tuple) else (res,)
    if len(res) > len(tensor_args) and all(r is None for r in res[len(tensor_args):]):
        res = res[:len(tensor_args)]   # (torch drops extra gradients that are all None)
    if len(res) != len(tensor_args):
        raise RuntimeError(f"function {cls.__name__}Backward returned an incorrect number of "
                           f"gradients (expected {len(tensor_args)}, got {len(res)})")
    return [r for r, is_t in zip(res, tensor_args) if is_t]


class _TracedCtx:
    """What the user's backward sees while it is traced: the real context's attributes,
    with saved tensors replaced by tracers of the corresponding graph values."""

    def __init__(self, ctx, saved, needs):
        self.__dict__.update(ctx._user_attrs())
        self.saved_tensors = tuple(saved)
        self.needs_input_grad = needs
        self.materialize_grads = ctx.materialize_grads


def custom_rule(hist, slots, traced=None):
    """The adjoint rule for ``custom_function`` nodes (see ``lowering.adjoint``); ``hist``
    is the tensor-mode History (None when tracing under gj.grad). Each backward traced
    into the plan is appended to the list ``traced`` (for the plan's guard)."""
    def rule(graph, node, grad_outs, mask):
        cls, n_in = node.attrs["function"], node.attrs["n_in"]
        ctx = node.attrs.get("ctx") or hist.ctx(node.attrs["node"])
        outs = [Tracer(graph, v) for v in node.outputs]
        needs = _expand_needs(node.attrs["tensor_args"], mask[:n_in])
        once = getattr(cls.backward, "_gj_once_differentiable", False)
        effects = hist is not None and _effects(cls.backward)
        if hist is None or not (once or effects or ctx.opaque()):
            if hist is None:
                saved = ctx.to_save
            else:
                saved = [None if m is None else outs[m[1]] if m[0] == "out" else
                         Tracer(graph, node.inputs[m[1] if m[0] == "in" else n_in + m[1]])
                         for m in ctx._saved_map]
            grads = [Tracer(graph, g) if g is not None else
                     (_apply_op("zeros_like.default", [o], {}) if ctx.materialize_grads else None)
                     for g, o in zip(grad_outs, outs)]
            before = None if hist is None else _guard_of(cls.backward)
            try:
                res = cls.backward(_TracedCtx(ctx, saved, needs), *grads)
                if before is not None and not before.holds():   # it changed outside state
                    _EFFECTS[cls.backward] = f"changed {before.changed()!r} when traced"
                    raise _Impure()
                res = _per_tensor(cls, res, node.attrs["tensor_args"])
                if not all(isinstance(r, Tracer) or r is None for r in res):
                    raise TypeError("backward returned non-tensor gradients")
                for i, (r, v) in enumerate(zip(res, node.inputs)):
                    _check_grad_shape(cls, i, r, v.shape)
                if traced is not None:
                    traced.append(cls.backward)
                return [r.value if r is not None else None for r in res] + \
                    [None] * (len(node.inputs) - n_in)
            except _InvalidGradient:
                raise
            except _Impure:
                _log_once(cls, f"has side effects ({_EFFECTS[cls.backward]})")
            except (GradjitError, TypeError, ValueError, AttributeError) as e:
                if hist is None:
                    raise GradjitError(f"custom Function {cls.__name__}: its backward could not be "
                                       f"traced ({e}); inside gj.jit / gj.grad a custom backward "
                                       f"must use gradjit ops", node.site) from e
                _log_once(cls, f"could not be traced ({type(e).__name__}: {e})")
        else:
            _log_once(cls, "is once_differentiable" if once else
                      f"has side effects ({effects})" if effects else
                      "keeps non-tensor state on ctx")
        need_idx = [i for i in range(n_in) if mask[i]]
        defined = tuple(g is not None for g in grad_outs)
        slots.append(("custom", (node.attrs["node"], tuple(need_idx), defined)))
        res = host_call(graph, [g for g in grad_outs if g is not None],
                        [(node.inputs[i].shape, node.inputs[i].dtype) for i in need_idx],
                        len(slots) - 1)
        values = [None] * len(node.inputs)
        for i, v in zip(need_idx, res):
            values[i] = v
        return values
    return rule


class _InvalidGradient(GradjitError, RuntimeError):
    pass


class _Impure(Exception):
    pass


_EFFECTS = {}   # backward function -> why it has side effects ("" when it has none)
_MUTATORS = {"append", "appendleft", "extend", "extendleft", "insert", "pop", "popleft",
             "popitem", "update", "setdefault", "add", "discard", "remove", "clear", "sort",
             "reverse", "write", "writelines", "put", "put_nowait", "send", "fill", "itemset",
             "__setitem__", "__delitem__", "__iadd__", "__setattr__", "register_buffer"}
_EFFECT_CALLS = {"print", "setattr", "delattr", "exec", "open", "input", "breakpoint"}
_INERT = (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType,
          types.MethodType, functools.partial, int, float,
          complex, str, bytes, bool, type(None), tuple, frozenset)


def _container(v):
    """Whether an outside value is state a backward could change in place: a container,
    or an object of a user class (not a module, class, function or Tensor)."""
    if isinstance(v, (list, dict, set, bytearray, np.ndarray, collections.deque)):
        return True
    return hasattr(v, "__dict__") and not isinstance(v, _INERT + (Tensor, Function))


def _guard_of(fn):
    """A guard of what ``fn`` reads from outside, recorded before a trace runs it (None
    when there is nothing to check)."""
    from gradjit.runtime.guards import guards_for
    try:
        return guards_for(fn, (), ())
    except Exception:   # (a walk that fails checks nothing: the code scan still ran)
        return None


def _effects(fn):
    """Why the backward ``fn`` has side effects outside it, read from its code, or ""
    (memoised; a trace that changed outside state sets it too, ``custom_rule``)."""
    why = _EFFECTS.get(fn)
    if why is None:
        why = _EFFECTS[fn] = _scan(fn)
    return why


def _scan(fn):
    fn = getattr(fn, "__func__", fn)
    code = getattr(fn, "__code__", None)
    if code is None:
        return ""
    cells = dict(zip(code.co_freevars, fn.__closure__ or ()))

    def outside(name, kind):   # the value a global / free name is bound to now
        try:
            if kind == "free":
                return cells[name].cell_contents
            return fn.__globals__.get(name, getattr(fn.__globals__.get("__builtins__"), name,
                                                     None))
        except (KeyError, ValueError):
            return None

    todo, mutable = [code], False
    while todo:
        c = todo.pop()
        todo += [k for k in c.co_consts if isinstance(k, types.CodeType)]
        prev = None
        for ins in dis.get_instructions(c):
            op, arg = ins.opname, ins.argval
            if op in ("STORE_GLOBAL", "DELETE_GLOBAL"):
                return f"sets the global {arg!r}"
            if op in ("STORE_DEREF", "DELETE_DEREF") and arg in c.co_freevars:
                return f"sets the closure variable {arg!r}"
            if op in ("STORE_ATTR", "DELETE_ATTR") and (prev is None or prev.opname not in (
                    "LOAD_FAST", "LOAD_DEREF") or prev.argval in c.co_freevars):
                # (obj.a = v loads obj just before; obj.a += v leaves SWAPs between)
                return f"sets the attribute {arg!r} of an object it does not make"
            if op in ("LOAD_GLOBAL", "LOAD_NAME") and arg in _EFFECT_CALLS:
                return f"calls {arg}()"
            if op in ("LOAD_GLOBAL", "LOAD_DEREF", "LOAD_NAME"):
                kind = "free" if op == "LOAD_DEREF" and arg in c.co_freevars else "global"
                if op != "LOAD_DEREF" or kind == "free":
                    mutable = mutable or _container(outside(arg, kind))
            if op in ("STORE_SUBSCR", "DELETE_SUBSCR") and mutable:
                return "stores into an outside container"
            if (op in ("LOAD_METHOD", "LOAD_ATTR") and arg in _MUTATORS and prev is not None
                    and (prev.opname == "LOAD_ATTR" and mutable or prev.opname in (
                        "LOAD_GLOBAL", "LOAD_DEREF", "LOAD_NAME") and _container(
                        outside(prev.argval, "free" if prev.opname == "LOAD_DEREF" and
                                prev.argval in c.co_freevars else "global")))):
                return f"calls .{arg}() on an outside object"
            prev = ins
    return ""


def _check_grad_shape(cls, i, r, shape):
    """As torch: a gradient must have the input's shape or one the input broadcasts to."""
    if r is None or tuple(r.shape) == tuple(shape):
        return
    try:
        ok = np.broadcast_shapes(tuple(shape), tuple(r.shape)) == tuple(r.shape)
    except ValueError:
        ok = False
    if not ok:
        raise _InvalidGradient(f"Function {cls.__name__}Backward returned an invalid gradient at "
                               f"index {i} - got {list(r.shape)} but expected shape compatible "
                               f"with {list(shape)}")


def _expand_needs(tensor_args, mask):
    it = iter(mask)
    return tuple(bool(next(it)) if is_t else False for is_t in tensor_args)


def _log_once(cls, why):
    if cls not in _LOGGED:
        _LOGGED.add(cls)
        log.warning("gradjit: the backward of custom Function %s %s; it runs as a Python callback "
                    "between compiled segments", cls.__name__, why)


def custom_callback(hist, j, need_idx, defined, create_graph):
    """The Python callable behind a custom Function's ``host_call`` for this step (op
    ``j`` of ``hist``); its inputs are the defined output gradients (``defined``)."""
    fn = hist.order[j]
    cls, ctx = fn.attrs["function"], fn.ctx
    out_types = list(fn.out_types)
    in_types = [(e.shape, e.dtype) if isinstance(e, Tensor) else e[0].out_types[e[1]]
                for e in fn.edges]
    tensor_args = fn.attrs["tensor_args"]
    once = getattr(cls.backward, "_gj_once_differentiable", False)

    def run(*given):
        as_tensor = any(isinstance(d, Tensor) for d in given)
        it = iter(given)
        grads = []
        for j, d in enumerate(defined):
            if d:
                g = next(it)
                grads.append(g if isinstance(g, Tensor) else Tensor(np.asarray(g)))
            else:
                grads.append(Tensor(np.zeros(*out_types[j])) if ctx.materialize_grads else None)
        with set_grad_enabled(create_graph and not once):
            res = cls.backward(ctx, *grads)
        res = _per_tensor(cls, res, tensor_args)
        out = []
        for i in need_idx:
            r = res[i]
            shape, dt = in_types[i]
            r = Tensor(np.zeros(shape, dt)) if r is None else (
                r if isinstance(r, Tensor) else Tensor(np.asarray(r, dt)))
            if tuple(r.shape) != tuple(shape):
                raise RuntimeError(f"Function {cls.__name__}Backward returned an invalid gradient "
                                   f"at index {i} - got {list(r.shape)} but expected shape "
                                   f"compatible with {list(shape)}")
            out.append(r)
        if as_tensor and once and create_graph:
            out = _poison(out, [g for g in grads if g is not None and g.requires_grad], cls)
        return out if as_tensor else [np.asarray(r.data, dtype=in_types[i][1])
                                      for r, i in zip(out, need_idx)]
    return run


def _poison(outs, grad_inputs, cls):
    """Results of a once_differentiable backward under create_graph: differentiating
    them again raises (as torch)."""
    if not grad_inputs:
        return outs
    edges = [(t.grad_fn, t._index) if t.grad_fn is not None else t for t in grad_inputs]
    fn = GradFn("once_differentiable", {"function": cls}, edges,
                [(o.shape, o.dtype) for o in outs], [o.data for o in outs], user_site())
    res = [Tensor(o.data, grad_fn=fn, index=i)._mark(True) for i, o in enumerate(outs)]
    fn.versions = [(r._box, r._box[0]) for r in res]
    return res


def once_differentiable_rule(graph, node, grad_outs, mask):
    raise GradjitError("trying to differentiate twice a function that was marked with "
                       "@once_differentiable", node.site)


def custom_forward_rule(graph, node, tangents):
    """Forward mode through a traced custom Function: its ``jvp(ctx, *tangents)`` when the
    class defines one (None otherwise: the caller linearises the backward instead)."""
    cls = node.attrs["function"]
    if "jvp" not in {k for c in cls.__mro__ if c is not Function for k in vars(c)}:
        return None
    n_in = node.attrs["n_in"]
    ts = [Tracer(graph, t) if t is not None else
          _apply_op("zeros_like.default", [Tracer(graph, v)], {})
          for v, t in zip(node.inputs[:n_in], tangents[:n_in])]
    it = iter(ts)
    args = [next(it) if is_t else None for is_t in node.attrs["tensor_args"]]
    res = cls.jvp(node.attrs["ctx"], *args)
    res = res if isinstance(res, tuple) else (res,)
    return [r.value if isinstance(r, Tracer) else None for r in res]
