"""JAX-style Jacobian transforms: ``jacrev``, ``jacfwd``, ``hessian``, ``jvp``.

Contract
- Arguments and results are pytrees (tracer/pytree.py), as in JAX. ``argnums`` is an int
  or a tuple; each differentiated argument may be a tuple, list, dict or namedtuple of
  float arrays; the function may return one float array or a pytree of them.
- ``jacrev(f, argnums)(*args)`` / ``jacfwd``: the Jacobian, structured as JAX's: the
  output's structure outside, the differentiated arguments' inside (for an int argnums
  that argument's structure, for a tuple a tuple of them); the block of output leaf ``o``
  and argument leaf ``x`` has shape ``o.shape + x.shape``. So jacfwd of a scalar function
  of a dict is a dict, of a function returning a dict a dict of dicts.
- One compiled call: every output leaf (``jacrev``: one reverse pass per output element)
  or every argument leaf (``jacfwd``: one forward product J e_j per input element) is an
  element of one flat batch of seeds, the rows of an identity matrix looped over inside
  the compiled code; each leaf reads its slice of the seed. Forward products come from
  the forward pass of ``lowering/forward.py`` (``result:`` formulas, a custom Function's
  ``jvp``, or the linearised backward formula), exact, no finite differences.
- ``has_aux=True`` (jacrev, jacfwd, hessian): ``f`` returns ``(value, aux)`` and the
  transform ``(jacobian, aux)``, as JAX's.
- ``hessian(f, argnums) = jacfwd(jacrev(f, argnums), argnums)``: nested structures (a
  dict argument gives a dict of dicts; argnums=(0, 1) gives ((H00, H01), (H10, H11)));
  a function with a non-scalar output has a Hessian per output element, as JAX's.
- ``jvp(f, primals, tangents) -> (f(*primals), J tangents)``: ``primals`` a tuple of
  pytrees, ``tangents`` the same structure (else TypeError) and shapes (else ValueError);
  both results have the structure of ``f``'s output (an integer output's tangent is 0);
  ``has_aux=True``: ``f`` returns ``(out, aux)``, jvp ``(out, tangent_out, aux)``.
- Called with tracers (nested in another transform) they trace inline.
"""
from __future__ import annotations

import numpy as np

from gradjit.lowering.adjoint import adjoint
from gradjit.lowering.forward import tangents as forward_tangents
from gradjit.runtime.function import custom_forward_rule, custom_rule
from gradjit.runtime.memory import Bounded
from gradjit.runtime.arguments import fresh_leaves, norm_argnums, single_argnum, split_aux
from gradjit.runtime.transforms import _Transformed
from gradjit.tracer.api import apply
from gradjit.tracer import pytree
from gradjit.tracer.registry import GradjitError
from gradjit.tracer.trace import Tracer, flatten_output, unflatten_output


def _rules():
    return {"custom_function": custom_rule(None, None)}


def _forward(g, xs, ts, outs):
    """Tracers of J t for each output (lowering/forward.py), zeros where independent."""
    jts = forward_tangents(g, [x.value for x in xs], [None if t is None else t.value for t in ts],
                           [o.value for o in outs], _rules(), {"custom_function": custom_forward_rule})
    return [Tracer(g, jt) if jt is not None else apply("zeros_like.default", [o], {})
            for o, jt in zip(outs, jts)]


def _reverse(g, outs, seeds, xs):
    """Tracers of sum_j J_j^T seed_j w.r.t. each x (zeros where independent)."""
    res = adjoint(g, [o.value for o in outs], [s.value for s in seeds], [x.value for x in xs],
                  _rules())
    return [Tracer(g, r) if r is not None else apply("zeros_like.default", [x], {})
            for x, r in zip(xs, res)]


def _flat_seed(g, leaves):
    """One batched graph input of the identity's rows over the leaves' elements, and each
    leaf's slice of it shaped (and typed) as the leaf; returns (slices, offsets)."""
    sizes = [int(np.prod(x.shape)) for x in leaves]
    n = max(sum(sizes), 1)
    dt = np.result_type(*[x.dtype for x in leaves]) if leaves else np.dtype(np.float64)
    seed = Tracer(g, g.add_input((n,), dt))
    g.constants[seed.value] = np.eye(n, dtype=dt)
    g.batched_inputs = [g.inputs.index(seed.value)]
    parts, offsets, k = [], [], 0
    for x, size in zip(leaves, sizes):
        part = seed[k:k + size].reshape(x.shape)
        parts.append(part if part.dtype == x.dtype else part.astype(x.dtype))
        offsets.append(k)
        k += size
    return parts, offsets


class _Jac(_Transformed):
    jacobian = True   # (not callable from @njit code: _unpack assembles the blocks in Python)

    def __init__(self, fn, argnums=0, has_aux=False, static_argnums=(), static_argnames=()):
        super().__init__(fn, static_argnums, static_argnames=static_argnames)
        self.argnums = norm_argnums(argnums)
        self.single = single_argnum(argnums)
        self.has_aux = bool(has_aux)

    def _diff_args(self, call):
        """The leaves of the differentiated arguments (as passed: the function may assign
        into its arguments) and, per argument, (structure, number of leaves)."""
        xs, trees = [], []
        for i in self.argnums:
            if i >= len(call):
                raise TypeError(f"gj.{type(self).__name__}: argnums={i} but the function was "
                                f"called with {len(call)} positional argument(s)")
            leaves, treedef = pytree.flatten(call[i])
            for a in leaves:
                if not isinstance(a, Tracer) or a.dtype.kind != "f":
                    raise GradjitError(f"gj.{type(self).__name__}: can only differentiate with "
                                       f"respect to floating-point arrays (argument {i})")
            xs.extend(Tracer(a.graph, a.value) for a in leaves)
            trees.append((treedef, len(leaves)))
        return xs, trees

    def _outputs(self, g, call):
        """The function's output leaves (tracers), its structure and its aux (has_aux)."""
        out, aux = self.fn(*call, **call.kwargs), None
        if self.has_aux:
            out, aux = split_aux(out, f"gj.{type(self).__name__}({self.__name__})")
        vals, tree = flatten_output(g, out)
        outs = [Tracer(g, v) for v in vals]
        if not outs or any(o.dtype.kind != "f" for o in outs):
            raise GradjitError(f"gj.{type(self).__name__}: the function must return a "
                               f"floating-point array or a pytree of them")
        return outs, tree, aux

    def _aux_outputs(self, g, aux):
        """has_aux: the aux leaves appended to the graph's outputs after the Jacobian's;
        returns (how many, structure) for ``_with_aux``."""
        if not self.has_aux:
            return 0, None
        vals, tree = flatten_output(g, aux, statics=True)
        g.outputs = list(g.outputs) + vals
        return len(vals), tree

    def _with_aux(self, jac, aux_part, results):
        """``jac``, or ``(jac, aux)``: each aux output is batched as every output of the
        compiled loop over seeds, and the same in every row (row 0 is taken)."""
        if not self.has_aux:
            return jac
        n, tree = aux_part
        return jac, unflatten_output(tree, [np.array(r[0]) for r in results[len(results) - n:]]
                                     if n else [])

    def _per_arg(self, trees, res):
        per_arg, k = [], 0
        for treedef, n in trees:
            per_arg.append(pytree.unflatten(treedef, res[k:k + n]))
            k += n
        return per_arg[0] if self.single else tuple(per_arg)

    def _structured(self, out_tree, trees, blocks):
        """blocks[j][i]: the block of output leaf j and argument leaf i."""
        return pytree.unflatten(out_tree, [self._per_arg(trees, row) for row in blocks])

    def _inline(self, call):
        """Inside another trace: one reverse pass per output element, stacked."""
        xs, trees = self._diff_args(fresh_leaves(call, self.argnums))
        g = xs[0].graph
        outs, out_tree, aux = self._outputs(g, call)
        blocks = []
        for o in outs:
            rows = []
            for k in range(max(o.value.size, 1)):
                e = np.zeros(o.value.size, o.dtype)
                if o.value.size:
                    e[k] = 1
                rows.append(_reverse(g, [o], [o._const(e.reshape(o.shape))], xs))
            blocks.append([_stack([r[i] for r in rows], o.shape + x.shape, o.value.size)
                           for i, x in enumerate(xs)])
        jac = self._structured(out_tree, trees, blocks)
        return (jac, aux) if self.has_aux else jac


class jacrev(_Jac):
    def _trace_body(self, g, call, arg_values):
        xs, trees = self._diff_args(call)
        outs, out_tree, aux = self._outputs(g, call)
        seeds, offsets = _flat_seed(g, outs)
        g.outputs = [r.value for r in _reverse(g, outs, seeds, xs)]
        return ([(tuple(o.shape), k) for o, k in zip(outs, offsets)],
                [tuple(x.shape) for x in xs], out_tree, trees, self._aux_outputs(g, aux))

    def _unpack(self, tree, results):
        outs, xshapes, out_tree, trees, aux_part = tree
        blocks = [[r[k:k + int(np.prod(oshape))].reshape(oshape + xshape)
                   for r, xshape in zip(results, xshapes)] for oshape, k in outs]
        return self._with_aux(self._structured(out_tree, trees, blocks), aux_part, results)


class jacfwd(_Jac):
    def _trace_body(self, g, call, arg_values):
        xs, trees = self._diff_args(call)
        outs, out_tree, aux = self._outputs(g, call)
        ts, offsets = _flat_seed(g, xs)
        g.outputs = [jt.value for jt in _forward(g, xs, ts, outs)]
        return ([tuple(o.shape) for o in outs],
                [(tuple(x.shape), k) for x, k in zip(xs, offsets)], out_tree, trees,
                self._aux_outputs(g, aux))

    def _unpack(self, tree, results):
        oshapes, xs, out_tree, trees, aux_part = tree
        blocks = []
        for r, oshape in zip(results, oshapes):   # r: (seeds,) + oshape, row j = J e_j
            size = int(np.prod(oshape))
            blocks.append([r[k:k + n].reshape((n, size)).T.reshape(oshape + xshape)
                           for xshape, k, n in ((s, k, int(np.prod(s))) for s, k in xs)])
        return self._with_aux(self._structured(out_tree, trees, blocks), aux_part, results)


def _stack(rows, shape, n):
    """Rows (tracers, one per output element) stacked into ``shape`` (an empty output: the
    one row stands for no element)."""
    if n == 0:
        return rows[0]._const(np.zeros(shape, rows[0].dtype))
    flat = [r.reshape((1, -1)) for r in rows]
    acc = None
    for k, r in enumerate(flat):
        sel = np.zeros((n, 1), r.dtype)
        sel[k, 0] = 1
        term = r._const(sel) @ r
        acc = term if acc is None else acc + term
    return acc.reshape(shape)


def hessian(fn, argnums=0, has_aux=False, static_argnums=()):
    """The Hessian: ``jacfwd(jacrev(fn, argnums), argnums)``, as JAX's, with its nested
    structure for pytree arguments and tuples of argnums (has_aux: ``(H, aux)``); a
    function returning an array of shape ``s`` gives blocks of ``s + x.shape + x.shape``."""
    return jacfwd(jacrev(fn, argnums=argnums, has_aux=has_aux, static_argnums=static_argnums),
                  argnums=argnums, has_aux=has_aux, static_argnums=static_argnums)


class jvp_fn(_Transformed):
    """``jvp(f)(primals..., tangents...)``: used by :func:`jvp`."""

    def __init__(self, fn, n, has_aux=False):
        super().__init__(fn)
        self.n, self.has_aux = n, bool(has_aux)

    def _pairs(self, call):
        """The primal leaves (as passed) and their tangent leaves (None: not float)."""
        xs, ts = pytree.flatten(list(call[:self.n]))[0], pytree.flatten(list(call[self.n:]))[0]
        pairs = [(Tracer(x.graph, x.value), None if x.dtype.kind != "f" else
                  t if isinstance(t, Tracer) else x._const(np.asarray(t, dtype=x.dtype)))
                 for x, t in zip(xs, ts) if isinstance(x, Tracer)]
        return [x for x, _ in pairs], [t for _, t in pairs]

    def _out(self, call):
        """The function's output and its aux (has_aux: the second of the pair it returns)."""
        out = self.fn(*call[:self.n])
        return split_aux(out, f"gj.jvp({self.__name__})") if self.has_aux else (out, None)

    def _trace_body(self, g, call, arg_values):
        xs, ts = self._pairs(call)
        out, aux = self._out(call)
        vals, tree = flatten_output(g, out)
        outs = [Tracer(g, v) for v in vals]
        g.outputs = vals + [t.value for t in _forward(g, xs, ts, outs)]
        aux_vals, aux_tree = flatten_output(g, aux, statics=True) if self.has_aux else ([], None)
        g.outputs += aux_vals
        return tree, len(vals), aux_tree, len(aux_vals)

    def _unpack(self, tree, results):
        tree, n, aux_tree, n_aux = tree
        primal_out = pytree.unflatten(tree, list(results[:n]))
        tangent_out = pytree.unflatten(tree, list(results[n:2 * n]))
        if not self.has_aux:
            return primal_out, tangent_out
        return primal_out, tangent_out, unflatten_output(aux_tree, list(results[2 * n:]))

    def _inline(self, call):
        call = fresh_leaves(call, range(self.n))
        xs, ts = self._pairs(call)
        out, aux = self._out(call)
        g = xs[0].graph
        vals, tree = flatten_output(g, out)
        tangent_out = pytree.unflatten(tree, _forward(g, xs, ts, [Tracer(g, v) for v in vals]))
        return (out, tangent_out, aux) if self.has_aux else (out, tangent_out)


_JVP_CACHE = Bounded()


def _shape_of(treedef, n):
    """A structure as the caller would write it, leaves shown as *."""
    return repr(pytree.unflatten(treedef, ["*"] * n)).replace("'*'", "*")


def jvp(fn, primals, tangents, has_aux=False):
    """``(fn(*primals), J(primals) @ tangents)``, compiled (cached per function); with
    ``has_aux`` ``fn`` returns ``(out, aux)`` and ``jvp`` ``(out, tangent_out, aux)``, as
    JAX's (aux is not differentiated)."""
    primals, tangents = tuple(primals), tuple(tangents)
    if len(primals) != len(tangents):
        raise ValueError(f"jvp: {len(primals)} primals but {len(tangents)} tangents")
    (pl, pt), (tl, tt) = pytree.flatten(primals), pytree.flatten(tangents)
    if pt != tt:
        raise TypeError(f"gj.jvp: primals and tangents must have the same structure, got "
                        f"{_shape_of(pt, len(pl))} and {_shape_of(tt, len(tl))}")
    for k, (p, t) in enumerate(zip(pl, tl)):
        if np.shape(p) != np.shape(t):
            raise ValueError(f"gj.jvp: the tangent of leaf {k} has shape {np.shape(t)}, its "
                             f"primal {np.shape(p)}")
    key = (fn, len(primals), bool(has_aux))
    f = _JVP_CACHE.get(key)
    if f is None:
        f = _JVP_CACHE[key] = jvp_fn(fn, len(primals), has_aux)
    return f(*primals, *tangents)
