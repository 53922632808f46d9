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

import numpy as np

from gradjit.lowering.adjoint import adjoint
from gradjit.lowering.passes import optimize
from gradjit.runtime.compiler import Executable, PackedExecutable, compile_graph, gc_paused
from gradjit.runtime.function import custom_rule
from gradjit.runtime.cuda import compile_graph_cuda, require, to_device, to_host
from gradjit.tracer.api import apply
from gradjit.tracer.device import canonical, is_device_array
from gradjit.tracer.registry import GradjitError, user_site
from gradjit.tracer.trace import Tracer, flatten_output, trace, unflatten_output


def _hidden_updates(g, arg_values):
    """Append the statistics of ``g.running_updates`` (batch_norm under tracing) to the
    graph's outputs; returns [(target, momentum)] with target ('arg', position) or
    ('array', the captured array)."""
    out = []
    for (kind, ref), stat, momentum in g.running_updates:
        g.outputs.append(stat)
        out.append((("arg", arg_values.index(ref)) if kind == "arg" else ("array", ref), momentum))
    return out


class _Updating:
    """An executable whose last results are running statistics: it applies
    ``r = (1 - momentum) * r + momentum * stat`` to each target after the call and returns
    the other results. Never an ``Executable``, so calls take the slow path that has
    the arguments."""

    def __init__(self, exe, updates):
        self.exe, self.updates = exe, updates
        self.graph, self.source = exe.graph, exe.source

    def __call__(self, arrays):
        res = list(self.exe(arrays))
        stats = res[len(res) - len(self.updates):]
        for ((kind, ref), momentum), stat in zip(self.updates, stats):
            arr = np.asarray(arrays[ref]) if kind == "arg" else ref
            stat = to_host(stat)
            arr[...] = ((1.0 - momentum) * arr + momentum * stat.reshape(arr.shape)).astype(arr.dtype)
        return res[:len(res) - len(self.updates)]


def _with_updates(exe, updates):
    return _Updating(exe, updates) if updates else exe


def _norm_argnums(argnums):
    return (argnums,) if isinstance(argnums, int) else tuple(argnums)


class _Transformed:
    def __new__(cls, fn=None, *args, **kwargs):
        if fn is None:   # used as @gj.jit(device="cuda") / @gj.grad(argnums=1): a decorator
            return functools.partial(cls, *args, **kwargs)
        return super().__new__(cls)

    def __init__(self, fn, static_argnums=(), device=None):
        self.fn = fn
        self.static = frozenset(_norm_argnums(static_argnums))
        self.device = canonical(device)
        if self.device == "cuda":
            require(f"gj.{type(self).__name__}({getattr(fn, '__name__', 'f')})")
        self._compiled = {}
        self._hot = None   # (dispatcher, trailing args, unpack or None) of the last signature
        functools.update_wrapper(self, fn, updated=())  # not __dict__: ours differs

    def _signature(self, args):
        sig = []
        for i, a in enumerate(args):
            if i in self.static:
                sig.append(("static", a))
            else:
                if not is_device_array(a):
                    a = np.asarray(a)
                sig.append((tuple(a.shape), np.dtype(a.dtype)))
        return tuple(sig)

    def __call__(self, *args):
        # Hot path: the compiled function of the last signature, called straight away. Numba
        # rejects other types and the generated entry rejects other shapes, both with a
        # TypeError (SignatureMismatch), and anything unusual goes the slow way.
        hot = self._hot
        if hot is not None:
            try:
                res = hot[0](*args, *hot[1])
            except TypeError:
                return self._call_slow(args)
            return res if hot[2] is None else hot[2](res)
        return self._call_slow(args)

    def _make_hot(self, entry):
        exe, consts, tree = entry
        packed = exe.__class__ is PackedExecutable and all(len(s) > 1 for s in exe.pack_shapes)
        if (exe.__class__ is not Executable and not packed) or not exe.plain_in or self.static:
            return None
        direct = exe.plain_out and self._identity_unpack()
        unpack = None if direct else (
            lambda res: self._unpack(tree, res if exe.plain_out else exe.finish(res)))
        return exe.fast if packed else exe.fn, consts + (exe.consts,), unpack

    def _identity_unpack(self):
        return False

    def _call_slow(self, args):
        if any(isinstance(a, Tracer) for a in args):
            return self._inline(args)
        try:
            sig = self._signature(args)
            entry = self._compiled.get(sig)
        except TypeError:
            raise TypeError(f"{self.__name__}: static arguments must be hashable") from None
        if entry is None:
            with gc_paused():   # tracing, lowering and the compile: see compiler.gc_paused
                entry = self._compiled[sig] = self._build(args)
        self._hot = self._make_hot(entry)
        exe, consts, tree = entry
        if self.device == "cuda":
            return self._call_cuda(exe, consts, tree, args)
        arrays = tuple(np.asarray(a) for i, a in enumerate(args) if i not in self.static)
        return self._unpack(tree, exe(arrays + consts if consts else arrays))

    def _call_cuda(self, exe, consts, tree, args):
        arrays = [a for i, a in enumerate(args) if i not in self.static]
        res = exe(arrays + list(consts))
        if not any(is_device_array(a) for a in arrays):   # host in, host out
            res = [to_host(r) for r in res]
        return self._unpack(tree, res)

    def _trace(self, args):
        g, tracers, arg_values = trace([None if i in self.static else a for i, a in enumerate(args)],
                                       name=getattr(self.fn, "__name__", "fn"))
        call_args = [a if i in self.static else t for i, (a, t) in enumerate(zip(args, tracers))]
        return g, call_args, arg_values

    def _build(self, args):
        g, call_args, arg_values = self._trace(args)
        tree = self._trace_body(g, call_args, arg_values)
        updates = _hidden_updates(g, arg_values)
        consts = tuple(g.constants[v] for v in g.inputs[len(arg_values):])
        # Jacobian transforms feed a batch of seeds through one compiled loop.
        batched = getattr(g, "batched_inputs", None)
        if self.device == "cuda":
            if batched is not None:
                raise GradjitError(f"{self.__name__}: batched (Jacobian) transforms run on the CPU "
                                   f"only; the CUDA target has no batched entry yet")
            exe = compile_graph_cuda(optimize(g))
            return _with_updates(exe, updates), tuple(to_device(c) for c in consts), tree
        return _with_updates(compile_graph(optimize(g), batched=batched), updates), consts, tree

    def graphs(self, *args):
        """(traced graph, optimised graph, generated source) for these arguments (gj.explain)."""
        g, call_args, arg_values = self._trace(args)
        self._trace_body(g, call_args, arg_values)
        opt = optimize(g)
        if self.device == "cuda":
            return g, opt, compile_graph_cuda(opt).source
        return g, opt, compile_graph(opt, batched=getattr(g, "batched_inputs", None)).source


class jit(_Transformed):
    """Compile ``fn`` for each signature of its array arguments."""

    def _trace_body(self, g, call_args, arg_values):
        vals, tree = flatten_output(g, self.fn(*call_args))
        g.outputs = vals
        return tree

    def _unpack(self, tree, results):
        return unflatten_output(tree, results)

    def _inline(self, args):
        return self.fn(*args)


class value_and_grad(_Transformed):
    """``(f(*args), d f / d args[argnums])``, forward and backward compiled together."""

    with_value = True

    def __init__(self, fn, argnums=0, static_argnums=(), device=None):
        super().__init__(fn, static_argnums, device)
        self.argnums = _norm_argnums(argnums)
        self.single = isinstance(argnums, int)
        bad = self.static & set(self.argnums)
        if bad:
            raise ValueError(f"argnums {sorted(bad)} are also static_argnums; cannot differentiate")

    def _differentiate(self, call_args):
        """Trace fn on ``call_args`` (tracers) and append its adjoint: (value, grads)."""
        out = self.fn(*call_args)
        name = f"gj.{type(self).__name__}({getattr(self.fn, '__name__', 'f')})"
        if not isinstance(out, Tracer):
            raise GradjitError(f"{name}: the function must return one array, got "
                               f"{type(out).__name__}", user_site())
        if out.shape != () or out.dtype.kind != "f":
            raise GradjitError(f"{name}: gradient only defined for scalar-output functions; "
                               f"the output is {out.value.type_str()}", out.value.node.site
                               if out.value.node is not None else None)
        wrt = []
        for i in self.argnums:
            a = call_args[i]
            if not isinstance(a, Tracer) or a.dtype.kind != "f":
                dt = getattr(a, "dtype", type(a).__name__)
                raise GradjitError(f"{name}: can only differentiate with respect to floating-point "
                                   f"arrays, but argument {i} has dtype {dt}", user_site())
            wrt.append(a)
        g = out.graph
        seed = apply("ones_like.default", [out], {})
        grads = adjoint(g, [out.value], [seed.value], [a.value for a in wrt],
                        {"custom_function": custom_rule(None, None)})
        res = [Tracer(g, gv) if gv is not None else apply("zeros_like.default", [a], {})
               for a, gv in zip(wrt, grads)]
        return out, (res[0] if self.single else tuple(res))

    def _trace_body(self, g, call_args, arg_values):
        value, grads = self._differentiate(call_args)
        flat = [grads] if self.single else list(grads)
        g.outputs = ([value.value] if self.with_value else []) + [t.value for t in flat]

    def _identity_unpack(self):
        # grad with a tuple of argnums returns Numba's result tuple as it is
        return not self.with_value and not self.single

    def _unpack(self, tree, results):
        if self.with_value:
            return results[0], (results[1] if self.single else tuple(results[1:]))
        return results[0] if self.single else tuple(results)

    def _inline(self, args):
        value, grads = self._differentiate(list(args))
        return (value, grads) if self.with_value else grads


class grad(value_and_grad):
    """``d f / d args[argnums]`` of a scalar function; see ``value_and_grad``."""

    with_value = False
