"""JAX-style Jacobian transforms: ``jacrev``, ``jacfwd``, ``hessian``, ``jvp``.

Contract
- ``jacrev(f, argnums)(*args)``: the Jacobian of ``f`` (any float output
  shape) w.r.t. each differentiated argument, shaped ``out.shape +
  arg.shape``; one reverse pass per output element, all of them in one
  compiled call (the seeds are the rows of an identity matrix, looped over
  inside the compiled code).
- ``jacfwd``: the same Jacobian by forward-mode products J e_j over the input
  basis, batched the same way. Forward products come from the forward pass of
  ``lowering/forward.py`` (``result:`` formulas, a custom Function's ``jvp``,
  or the linearised backward formula), exact, no finite differences.
- ``hessian(f) = jacfwd(grad(f))``; ``jvp(f, primals, tangents) -> (f(primals),
  J tangents)``.
- Called with tracers (nested in another transform) they trace inline.
"""
from __future__ import annotations

import numpy as np

from gradjit.lowering.adjoint import adjoint
from gradjit.lowering.forward import tangents as forward_tangents
from gradjit.runtime.function import custom_forward_rule, custom_rule
from gradjit.runtime.memory import Bounded
from gradjit.runtime.transforms import _norm_argnums, _Transformed, grad
from gradjit.tracer.api import apply
from gradjit.tracer import pytree
from gradjit.tracer.registry import GradjitError
from gradjit.tracer.trace import Tracer


def _rules():
    return {"custom_function": custom_rule(None, None)}


def _vjp(g, out, seed, xs):
    """Tracers of J^T seed w.r.t. each x (zeros where independent)."""
    res = adjoint(g, [out.value], [seed.value], [x.value for x in xs], _rules())
    return [Tracer(g, r) if r is not None else apply("zeros_like.default", [x], {})
            for x, r in zip(xs, res)]


def _jvp(g, out, xs, tangents):
    """Tracer of J t: forward mode (lowering/forward.py), zeros where independent."""
    (jt,) = forward_tangents(g, [x.value for x in xs],
                             [t.value if t is not None else None for t in tangents], [out.value],
                             _rules(), {"custom_function": custom_forward_rule})
    return Tracer(g, jt) if jt is not None else apply("zeros_like.default", [out], {})


class _Jac(_Transformed):
    def __init__(self, fn, argnums=0, static_argnums=(), static_argnames=()):
        super().__init__(fn, static_argnums, static_argnames=static_argnames)
        self.argnums = _norm_argnums(argnums)
        self.single = isinstance(argnums, int)

    def _diff_args(self, call):
        """The leaves of the differentiated arguments (pytrees) and their structures."""
        xs, trees = [], []
        for i in self.argnums:
            leaves, treedef = pytree.flatten(call[i])
            for a in leaves:
                if not isinstance(a, Tracer) or a.dtype.kind != "f":
                    raise GradjitError(f"gj.{type(self).__name__}: can only differentiate with "
                                       f"respect to floating-point arrays (argument {i})")
            xs.extend(Tracer(a.graph, a.value) for a in leaves)   # as passed (see grad)
            trees.append((treedef, len(leaves)))
        self._trees = trees
        return xs

    def _output(self, call):
        out = self.fn(*call, **call.kwargs)
        if not isinstance(out, Tracer) or out.dtype.kind != "f":
            raise GradjitError(f"gj.{type(self).__name__}: the function must return one "
                               f"floating-point array")
        return out

    def _per_arg(self, trees, res):
        per_arg, k = [], 0
        for treedef, n in trees:
            per_arg.append(pytree.unflatten(treedef, res[k:k + n]))
            k += n
        return per_arg[0] if self.single else tuple(per_arg)

    def _unpack(self, tree, results):
        shapes, trees = tree
        return self._per_arg(trees, [r.reshape(s) for r, s in zip(results, shapes)])


class jacrev(_Jac):
    def _trace_body(self, g, call, arg_values):
        xs = self._diff_args(call)
        out = self._output(call)
        n = max(out.value.size, 1)
        seed = Tracer(g, g.add_input(out.shape, out.dtype))
        g.constants[seed.value] = np.eye(n, dtype=out.dtype).reshape((n,) + out.shape)
        g.batched_inputs = [g.inputs.index(seed.value)]
        g.outputs = [r.value for r in _vjp(g, out, seed, xs)]
        return [out.shape + x.shape for x in xs], self._trees

    def _inline(self, call):
        xs, out = self._diff_args(call), self._output(call)
        g = out.graph
        rows = []
        for k in range(max(out.value.size, 1)):
            e = np.zeros(out.value.size, out.dtype)
            e[k] = 1
            rows.append(_vjp(g, out, out._const(e.reshape(out.shape)), xs))
        return self._per_arg(self._trees, [_stack([r[j] for r in rows], out.shape + x.shape)
                                           for j, x in enumerate(xs)])


class jacfwd(_Jac):
    def _trace_body(self, g, call, arg_values):
        xs = self._diff_args(call)
        out = self._output(call)
        shapes = []
        outs = []
        for x in xs:
            n = max(x.value.size, 1)
            t = Tracer(g, g.add_input(x.shape, x.dtype))
            g.constants[t.value] = np.eye(n, dtype=x.dtype).reshape((n,) + x.shape)
            g.batched_inputs = [g.inputs.index(t.value)]
            tangents = [t if y is x else None for y in xs]
            outs.append(_jvp(g, out, xs, tangents).value)
            shapes.append((x.shape, out.shape))
        if len(xs) > 1:
            raise GradjitError("gj.jacfwd: one differentiated argument at a time for now "
                               "(pass argnums=<int>)")
        g.outputs = outs
        return shapes

    def _unpack(self, tree, results):
        (xshape, oshape), r = tree[0], results[0]
        n_in = int(np.prod(xshape))
        m = r.reshape((n_in, int(np.prod(oshape)))).T
        return m.reshape(oshape + xshape)

    def _inline(self, call):
        return jacrev(self.fn, self.argnums[0] if self.single else self.argnums)._inline(call)


def _stack(rows, shape):
    flat = [r.reshape((1, -1)) for r in rows]
    n = len(flat)
    acc = None
    for k, r in enumerate(flat):
        sel = np.zeros((n, 1), r.dtype)
        sel[k, 0] = 1
        term = r._const(sel) @ r
        acc = term if acc is None else acc + term
    return acc.reshape(shape)


def hessian(fn, argnums=0, static_argnums=()):
    """The Hessian of a scalar function: ``jacfwd(grad(fn))``."""
    if not isinstance(argnums, int):
        raise GradjitError("gj.hessian: pass one argnum (an int)")
    return jacfwd(grad(fn, argnums=argnums, static_argnums=static_argnums), argnums=argnums,
                  static_argnums=static_argnums)


class jvp_fn(_Transformed):
    """``jvp(f)(primals..., tangents...)``: used by :func:`jvp`."""

    def __init__(self, fn, n):
        super().__init__(fn)
        self.n = n

    def _trace_body(self, g, call, arg_values):
        xs, ts = call[:self.n], call[self.n:]
        out = self.fn(*xs)
        g.outputs = [out.value, _jvp(g, out, list(xs), list(ts)).value]
        return None

    def _unpack(self, tree, results):
        return results[0], results[1]

    def _inline(self, call):
        xs, ts = list(call[:self.n]), list(call[self.n:])
        out = self.fn(*xs)
        return out, Tracer(out.graph, _jvp(out.graph, out, xs, ts).value)


_JVP_CACHE = Bounded()


def jvp(fn, primals, tangents):
    """``(fn(*primals), J(primals) @ tangents)``, compiled (cached per function)."""
    primals, tangents = tuple(primals), tuple(tangents)
    if len(primals) != len(tangents):
        raise ValueError(f"jvp: {len(primals)} primals but {len(tangents)} tangents")
    key = (fn, len(primals))
    f = _JVP_CACHE.get(key)
    if f is None:
        f = _JVP_CACHE[key] = jvp_fn(fn, len(primals))
    return f(*primals, *tangents)
