"""Function transforms: ``jit``, ``grad``, ``value_and_grad`` (JAX-like).

Contract
- A transformed function is traced once per call signature (shape and dtype
  of each array argument, value of each static argument); the traced graph is
  optimised and compiled, and later calls with that signature only look the
  compiled callable up and call it.
- ``grad`` / ``value_and_grad`` compile forward and backward together: one
  graph holds the forward nodes, the seed and the adjoint, so fusion sees
  both and nothing is stored that the gradient does not read.
- Called with tracers (inside another transform), a transformed function
  traces inline into the caller's graph instead of compiling, so
  ``gj.grad(gj.grad(f))`` differentiates the first adjoint again.
"""
from __future__ import annotations

import functools
import inspect
import sys
import time
import types

import numpy as np

from gradjit.lowering.adjoint import adjoint
from gradjit.lowering.passes import optimize
from gradjit.runtime.compiler import Executable, PackedExecutable, compile_graph, gc_paused
from gradjit.runtime.guards import contiguous, entry_holds, guards_for
from gradjit.runtime.function import custom_rule
from gradjit.runtime import njit_interop, tiers
from gradjit.runtime.arguments import (Call, callable_name, constant_loss, first_tracer,
                                       fresh_leaves, has_tracer, norm_argnums, plain,
                                       single_argnum, split_aux, static_positions)
from gradjit.runtime.memory import Bounded
from gradjit.runtime.running_stats import hidden_updates, with_updates
from gradjit.runtime.cuda import compile_graph_cuda, require, to_device, to_host
from gradjit.tracer.api import apply
from gradjit.tracer.device import canonical, is_device_array
from gradjit.tracer.registry import GradjitError, MaxStepsError, user_site
from gradjit.tracer import pytree
from gradjit.lowering.fold_loops import fold_loops
from gradjit.tracer.coercion import swapped, traced_numpy
from gradjit.tracer.control_flow import enclosing_graph
from gradjit.tracer.ops_index import IndexBoundsError
from gradjit.tracer.rng_guard import StreamMovedError, reachable, rng_guard
from gradjit.tracer.trace import Tracer, constant, flatten_output, trace, unflatten_output


def _lookup(mod, qualname):
    obj = mod
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    return obj


def _first_param(fn):
    try:
        return next(iter(inspect.signature(fn).parameters), None)
    except (TypeError, ValueError):
        return None


def _rebuild(cls, fn, args, kwargs):
    return cls(fn, *args, **kwargs)


class _Transformed:
    def __new__(cls, fn=None, *args, **kwargs):
        if fn is None:   # used as @gj.jit(device="cuda") / @gj.grad(argnums=1): a decorator
            return functools.partial(cls, *args, **kwargs)
        self = super().__new__(cls)
        self._made_with = (fn, args, kwargs)   # (what pickling rebuilds it from)
        return self

    def __reduce__(self):
        """Pickled by reference: a module-level transform (``@gj.grad def f``) by its name,
        any other as its class, function and arguments, compiled code never included (the
        receiving process compiles, or loads from a shared disk cache). Lambdas and
        closures pickle with ``cloudpickle``, as any function does."""
        mod = sys.modules.get(getattr(self, "__module__", None) or "")
        name = getattr(self, "__qualname__", None)
        if mod is not None and name and "<" not in name and _lookup(mod, name) is self:
            return name
        fn, args, kwargs = self._made_with
        return _rebuild, (type(self), fn, args, kwargs)

    def __init__(self, fn, static_argnums=(), device=None, static_argnames=()):
        self.fn = fn
        self.static, self.static_names = static_positions(fn, static_argnums, static_argnames)
        self.device = canonical(device)
        if self.device == "cuda":
            require(f"gj.{type(self).__name__}({callable_name(fn)})")
        self._compiled = Bounded()   # signature -> (executable, constants, output tree)
        self._hot = None   # (dispatcher, trailing args, unpack or None) of the last signature
        functools.update_wrapper(self, fn, updated=())  # not __dict__: ours differs
        if "__name__" not in self.__dict__:   # a partial, a callable instance: none of its own
            self.__name__ = callable_name(fn)

    def __get__(self, obj, objtype=None):
        """A transform in a class body is a method, as the function it wraps would be:
        ``obj.method(x)`` calls it with ``obj`` first, an argument like any other (a
        hashable object is static: keyed by its hash, its arrays read as constants when
        traced; argnums and static_argnums count it)."""
        return self if obj is None else types.MethodType(self, obj)

    def __call__(self, *args, **kwargs):
        # Hot path: the compiled function of the last signature, called straight away. Numba
        # rejects other types and the generated entry rejects other shapes, both with a
        # TypeError (SignatureMismatch), and anything unusual goes the slow way.
        hot = self._hot
        if hot is not None and not kwargs and (hot[3] is None or hot[3].holds()):
            try:
                res = hot[0](*args, *hot[1])
            except (TypeError, IndexBoundsError, MaxStepsError):   # (slow path: the user's line)
                return self._call_slow(args, kwargs)
            return res if hot[2] is None else hot[2](res)
        return self._call_slow(args, kwargs)

    def entry_for(self, *args, **kwargs):
        """The executable these arguments' calls run now (None: not called with them yet)."""
        _, key, _ = pytree.split_args(args, kwargs, self.static, self.static_names, self.__name__)
        entry = self._compiled.get(key)
        return None if entry is None or not entry_holds(entry) else entry[0]

    def compile_for(self, *args, **kwargs):
        """Compile the signature of these example arguments (only their shapes, dtypes and
        static values are read) without calling the function; returns ``self``. What
        ``@njit`` code calling this transform runs (runtime/njit_interop.py)."""
        traced, key, layout = pytree.split_args(args, kwargs, self.static, self.static_names,
                                                self.__name__)
        entry = self._compiled.get(key)
        if entry is None or not entry_holds(entry, self):
            with gc_paused(), tiers.forced("sync"):
                self._compiled[key] = self._build(traced, layout)
        elif entry[0].__class__ is tiers.Tiered:   # compiling in the background: wait for it
            entry[0].join()
            if entry[0].failed is not None:
                raise entry[0].failed
            self._compiled[key] = (entry[0].ready,) + tuple(entry[1:])
        return self

    def cfunc(self, *examples):
        """A ``numba.cfunc`` of this transform at the examples' signature, for C callers:
        ``void f(const T *a0, ..., T *out0, ...)`` (runtime/njit_interop.py); its
        ``.address`` and ``.ctypes`` are what C code and ctypes take."""
        return njit_interop.c_callable(self, examples)

    def _make_hot(self, entry):
        exe, consts, tree, guard = entry
        packed = exe.__class__ is PackedExecutable and all(len(s) > 1 for s in exe.pack_shapes)
        if (exe.__class__ is not Executable and not packed) or not exe.plain_in:
            return None
        direct = exe.plain_out and self._identity_unpack(tree)
        unpack = None if direct else (
            lambda res: self._unpack(tree, res if exe.plain_out else exe.finish(res)))
        consts = tuple(c if contiguous(c) else np.ascontiguousarray(c) for c in consts)
        return exe.fast if packed else exe.fn, consts + (exe.consts,), unpack, guard

    def _identity_unpack(self, tree):
        return False

    def _call_slow(self, args, kwargs=None):
        kwargs = kwargs or {}
        # inside a trace (this thread's), a transform is part of it, as JAX's: its function
        # may close over the trace's values even where its arguments are concrete
        if has_tracer(args, kwargs) or (self.device != "cuda" and enclosing_graph() is not None):
            return self._inline(Call(args, kwargs))
        traced, key, layout = pytree.split_args(args, kwargs, self.static, self.static_names,
                                                self.__name__)
        entry = self._compiled.get(key)
        if entry is None or not entry_holds(entry, self):
            with gc_paused():   # tracing, lowering and the compile: see compiler.gc_paused
                entry = self._compiled[key] = self._build(traced, layout)
        elif entry[0].__class__ is tiers.Tiered and entry[0].ready is not None:
            entry = self._compiled[key] = (entry[0].ready,) + tuple(entry[1:])   # compiled now
        self._hot = self._make_hot(entry) if plain(layout) else None
        exe, consts, tree, _ = entry
        if self.device == "cuda":
            return self._call_cuda(exe, consts, tree, traced)
        arrays = tuple(np.asarray(a) for a in traced)
        return self._unpack(tree, exe(arrays + consts if consts else arrays))

    def _call_cuda(self, exe, consts, tree, arrays):
        res = exe(list(arrays) + list(consts))
        if not any(is_device_array(a) for a in arrays):   # host in, host out
            res = [to_host(r) for r in res]
        return self._unpack(tree, res)

    def _trace(self, args, kwargs=None):
        traced, _, layout = pytree.split_args(args, kwargs or {}, self.static, self.static_names,
                                              self.__name__)
        return self._trace_leaves(traced, layout)

    def _trace_leaves(self, traced, layout):
        g, tracers, arg_values = trace(traced, name=self.__name__,
                                       weak=pytree.weak_positions(layout))
        g.view_tree = {}   # NumPy views of the user's code (tracer/tracer_setitem.py)
        g.loop_regions = self.device != "cuda"   # (CUDA has no scans: loops stay unrolled)
        call_args, call_kwargs = pytree.join_args(layout, tracers)
        return g, Call(call_args, call_kwargs), arg_values

    def _build(self, traced, layout):
        with swapped():   # (np.random's stand-ins before the guard: tracer/rng_guard.py)
            try:
                g, tree, arg_values, statics = self._guarded_trace(traced, layout)
            except StreamMovedError:   # maybe another thread's draw the stand-ins missed
                time.sleep(0.01)       # (let the other threads run past it, then tell)
                g, tree, arg_values, statics = self._guarded_trace(traced, layout)
        g.view_tree = None
        updates = hidden_updates(g, arg_values)
        const_ins = g.inputs[len(arg_values):]
        consts = tuple(g.constants[v] for v in const_ins)
        # (after the trace: what it read from outside, checked before each later call)
        # (a constant NumPy made non-contiguous, Wt.T, goes to the hot path as a copy made
        # once: the arrays behind it are then compared at each call, not read live; so are
        # constants no node reads: a folded loop's per-step arrays, stacked into one copy)
        read = {v for n in g.nodes for v in n.inputs} | set(g.outputs)
        guard = guards_for(self.fn, statics, [c for v, c in zip(const_ins, consts)
                                              if v in read and contiguous(c)])
        # Jacobian transforms feed a batch of seeds through one compiled loop.
        batched = getattr(g, "batched_inputs", None)
        if self.device == "cuda":
            if batched is not None:
                raise GradjitError(f"{self.__name__}: batched (Jacobian) transforms run on the CPU "
                                   f"only; the CUDA target has no batched entry yet")
            exe = compile_graph_cuda(optimize(g))
            return with_updates(exe, updates), tuple(to_device(c) for c in consts), tree, guard
        return (with_updates(compile_graph(optimize(g), batched=batched), updates), consts, tree,
                guard)

    def _guarded_trace(self, traced, layout):
        g, call, arg_values = self._trace_leaves(traced, layout)
        statics = [x for x in pytree.flatten((list(call), call.kwargs))[0]
                   if not isinstance(x, Tracer)]
        with traced_numpy(g, self.fn), \
                rng_guard(f"gj.{type(self).__name__}({self.__name__})", reachable(self.fn, statics)):
            tree = self._trace_body(g, call, arg_values)
        return g, tree, arg_values, statics

    def graphs(self, *args, **kwargs):
        """(traced graph, optimised graph, generated source) for these arguments (gj.explain)."""
        g, call, arg_values = self._trace(args, kwargs)
        with traced_numpy(g, self.fn):
            self._trace_body(g, call, arg_values)
        opt = optimize(g)
        if self.device == "cuda":
            return g, opt, compile_graph_cuda(opt).source
        with tiers.forced("sync"):   # (the source that runs once compiled)
            return g, opt, compile_graph(opt, batched=getattr(g, "batched_inputs", None)).source


class jit(_Transformed):
    """Compile ``fn`` for each signature of its array arguments."""

    def _trace_body(self, g, call, arg_values):
        vals, tree = flatten_output(g, self.fn(*call, **call.kwargs), statics=True)
        g.outputs = vals
        fold_loops(g)   # (rewires g.outputs)
        return tree

    def _unpack(self, tree, results):
        return unflatten_output(tree, results)

    def _inline(self, call):
        return self.fn(*call, **call.kwargs)


class value_and_grad(_Transformed):
    """``(f(*args), d f / d args[argnums])``, forward and backward compiled together.

    Arguments are pytrees; the gradient of each argument in ``argnums`` has that
    argument's structure. ``has_aux``: ``f`` returns ``(value, aux)`` and the result is
    ``((value, aux), grads)`` (``grad``: ``(grads, aux)``)."""

    with_value = True

    def __init__(self, fn, argnums=0, has_aux=False, static_argnums=(), device=None,
                 static_argnames=()):
        super().__init__(fn, static_argnums, device, static_argnames)
        self.argnums = norm_argnums(argnums)
        self.single = single_argnum(argnums)
        self.has_aux = bool(has_aux)
        bad = self.static & set(self.argnums)
        if bad:
            raise ValueError(f"argnums {sorted(bad)} are also static_argnums; cannot differentiate")

    def _differentiate(self, call, fresh=False, graph=None):
        """Trace fn on ``call`` (tracers) and append its adjoint: (value, aux, grads).
        ``fresh`` (a transform called inside another's trace): each differentiated leaf
        is first copied into a value of its own, so the gradient counts only the paths
        through that argument, not those through other arguments computed from the same
        outer value (``grad(lambda a, b: a * b)(x, 2 * x)`` is ``2 * x``, as JAX's)."""
        name = f"gj.{type(self).__name__}({self.__name__})"
        for i in self.argnums:
            if i >= len(call):
                raise TypeError(f"{name}: argnums={i} but the function was called with "
                                f"{len(call)} positional argument(s)")
        if fresh:
            call = fresh_leaves(call, self.argnums)
        wrt, trees = [], []
        for i in self.argnums:
            leaves, treedef = pytree.flatten(call[i])
            for a in leaves:
                if not isinstance(a, Tracer) or a.dtype.kind != "f":
                    dt = getattr(a, "dtype", type(a).__name__)
                    hint = (" (argument 0 is the method's self: argnums=1 is the first "
                            "argument after it)" if i == 0 and _first_param(self.fn) == "self"
                            else "")
                    raise GradjitError(f"{name}: can only differentiate with respect to "
                                       f"floating-point arrays, but argument {i} holds "
                                       f"{'a leaf of ' if treedef is not None else ''}dtype {dt}"
                                       f"{hint}", user_site())
            # the values the caller passed: the function may assign into its arguments
            # (x[0] = v rebinds the tracer), and the gradient is w.r.t. what was passed
            wrt.extend(Tracer(a.graph, a.value) for a in leaves)
            trees.append((treedef, len(leaves)))
        out, aux = self.fn(*call, **call.kwargs), None
        if self.has_aux:
            out, aux = split_aux(out, name)
        const = None if isinstance(out, Tracer) else constant_loss(out)
        if const is not None:   # (torch would raise: nothing requires grad)
            ref = first_tracer(call)
            out = ref._const(const) if ref is not None else constant(graph, const)
        if not isinstance(out, Tracer):
            raise GradjitError(f"{name}: the function must return one array"
                               f"{' (and aux)' if self.has_aux else ''}, got "
                               f"{type(out).__name__}", user_site())
        # one element of any shape is a scalar, as torch's backward() and autograd take it
        if out.value.size != 1 or out.dtype.kind != "f":
            what = ("gradient only defined for scalar-output functions" if out.value.size != 1
                    else "the output must be floating point (a real-valued scalar, as torch's "
                         "and JAX's grad)")
            raise GradjitError(f"{name}: {what}; the output is {out.value.type_str()}",
                               out.value.node.site if out.value.node is not None else None)
        g = out.graph
        # Python loops the trace unrolled become scans before the adjoint is built on them
        held = [x for x in pytree.flatten(aux)[0] if isinstance(x, Tracer)]
        # (inside another trace, only the nodes the function made: after its fresh leaves)
        since = max(a.value.id for a in wrt) + 1 if fresh and wrt else 0
        moved = fold_loops(g, [out.value] + [x.value for x in held], since)
        if moved:
            out = Tracer(g, moved.get(out.value, out.value))
            aux = pytree.map_leaves(lambda x: Tracer(g, moved.get(x.value, x.value))
                                    if isinstance(x, Tracer) else x, aux)
        seed = apply("ones_like.default", [out], {})
        grads = adjoint(g, [out.value], [seed.value], [a.value for a in wrt],
                        {"custom_function": custom_rule(None, None)})
        res = [Tracer(g, gv) if gv is not None else apply("zeros_like.default", [a], {})
               for a, gv in zip(wrt, grads)]
        per_arg, k = [], 0
        for treedef, n in trees:
            per_arg.append(pytree.unflatten(treedef, res[k:k + n]))
            k += n
        return out, aux, (per_arg[0] if self.single else tuple(per_arg))

    def _trace_body(self, g, call, arg_values):
        value, aux, grads = self._differentiate(call, graph=g)
        aux_vals, aux_tree = flatten_output(g, aux, statics=True) if self.has_aux else ([], None)
        leaves, gtree = pytree.flatten(grads)
        g.outputs = ([value.value] if self.with_value else []) + aux_vals + [t.value for t in leaves]
        return len(aux_vals), aux_tree, gtree

    def _identity_unpack(self, tree):
        # grad with a tuple of argnums returns Numba's result tuple as it is
        _, _, gtree = tree
        return (not self.with_value and not self.has_aux and not self.single
                and gtree == ("tuple", (None,) * len(gtree[1])))

    def _unpack(self, tree, results):
        naux, aux_tree, gtree = tree
        res = list(results)
        k = 1 if self.with_value else 0
        aux = unflatten_output(aux_tree, res[k:k + naux]) if self.has_aux else None
        grads = pytree.unflatten(gtree, res[k + naux:])
        if self.with_value:
            return ((res[0], aux) if self.has_aux else res[0]), grads
        return (grads, aux) if self.has_aux else grads

    def _inline(self, call):
        value, aux, grads = self._differentiate(call, fresh=True)
        if self.with_value:
            return ((value, aux) if self.has_aux else value), grads
        return (grads, aux) if self.has_aux else grads


class grad(value_and_grad):
    """``d f / d args[argnums]`` of a scalar function; see ``value_and_grad``."""

    with_value = False


njit_interop.install(_Transformed)   # (Numba types a transform as the dispatcher standing for it)
