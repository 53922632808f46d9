"""Loops and branches written as such: ``gj.scan``, ``gj.fori_loop``, ``gj.while_loop``,
``gj.cond``, ``gj.checkpoint`` (JAX's semantics), recorded as region nodes.

Contract
- Called on concrete values (NumPy arrays, numbers, tensors) outside a trace, each runs as
  plain Python (a loop, an ``if``, a call), so it is also usable eagerly.
- Inside ``gj.jit`` / ``gj.grad`` & co., the body is traced once into a body ``Graph``
  (a ``Region`` attribute of one node), whatever the trip count: compile time does not
  grow with it. Values of enclosing traces the body reads become body inputs fed by the
  node (trace.py ``BodyTrace``); arrays met in the body are constants of the enclosing
  graph, fed the same way. A body input's order is: carried values, per-step slices,
  then those captured values.
- Region ops (their adjoints are lowering/adjoint_regions.py, their CPU code
  lowering/codegen_cpu_regions.py):
  ``scan`` inputs ``[init (n_carry), xs (n_x), captured]``, outputs ``[final carry,
  ys stacked (length, ...), carry stack (length, ...)]`` (the carry entering each step,
  which reverse mode reads; code generators skip it when nothing does); ``cond``
  inputs ``[pred, operands, captured]``, two bodies of one signature; ``call`` (a
  checkpoint: its reverse mode recomputes the body) and ``while`` (no reverse mode).
- Carried values keep their shape and dtype across a step; a body that changes them, or
  branches that return different types, raise ``GradjitError`` naming both.
- Weak types (JAX's; NEP 50's Python numbers) cross regions: a weak operand or carry (a
  traced Python-float argument, a Python number as an initial carry) is a weak body input,
  and a result is weak where every body that makes it returns a weak value. A weak carry
  whose step gives a strong value (or another dtype NumPy's rule allows) is traced again
  as that strong type (``fori_loop(0, n, lambda i, c: c + a32[i], 0.0)`` carries float32).
  ``fori_loop``'s index is a weak int (``c * i`` keeps ``c``'s dtype, as a Python loop).
"""
from __future__ import annotations

import numpy as np

from gradjit.tracer import pytree
from gradjit.tracer.interp import interpret
from gradjit.tracer.ir import Graph
from gradjit.tracer.api import apply
from gradjit.tracer.registry import GradjitError, MaxStepsError, defop, user_site
from gradjit.tracer.trace import BODIES, BodyTrace, Tracer, WeakTracer, constant


class Region:
    """A body graph as a node attribute: equal and hashed by its structure."""

    __slots__ = ("graph", "_key", "_hash")

    def __init__(self, graph):
        self.graph = graph
        self._key = graph.key()
        self._hash = hash(self._key)

    def __eq__(self, other):
        return isinstance(other, Region) and other._key == self._key

    def __hash__(self):
        return self._hash

    def __repr__(self):   # (node comments and IR printouts; the key is ``_key``)
        return f"<{self.graph.name}: {len(self.graph.nodes)} nodes>"


REGION_OPS = ("scan.default", "cond.default", "call.default", "while.default")
# CPU-only with them: the check that a while loop ran to its end (made only beside the scan a
# while_loop becomes, which device="cuda" refuses first)
CPU_ONLY_OPS = REGION_OPS + ("while_steps_check.default",)


# -- reference implementations (the interpreter; compiled code must agree) ----------------------
def _scan_impl(*arrays, body, n_carry, n_x, length, reverse, origin="gj.scan"):
    g = body.graph
    carry = [np.asarray(a) for a in arrays[:n_carry]]
    xs, caps = arrays[n_carry:n_carry + n_x], list(arrays[n_carry + n_x:])
    ys = [np.empty((length,) + v.shape, v.dtype) for v in g.outputs[n_carry:]]
    stack = [np.empty((length,) + v.shape, v.dtype) for v in g.inputs[:n_carry]]
    for k in (range(length - 1, -1, -1) if reverse else range(length)):
        for s, c in zip(stack, carry):
            s[k] = c
        out = interpret(g, carry + [np.asarray(x[k]) for x in xs] + caps)
        carry = out[:n_carry]
        for y, r in zip(ys, out[n_carry:]):
            y[k] = r
    return tuple(np.array(c) for c in carry) + tuple(ys) + tuple(stack)


def _cond_impl(pred, *arrays, true_body, false_body):
    return tuple(interpret((true_body if bool(pred) else false_body).graph, list(arrays)))


def _call_impl(*arrays, body):
    return tuple(interpret(body.graph, list(arrays)))


def _while_impl(*arrays, cond_body, body, n_carry):
    carry, caps = list(arrays[:n_carry]), list(arrays[n_carry:])
    while bool(interpret(cond_body.graph, carry + caps)[0]):
        carry = interpret(body.graph, carry + caps)
    return tuple(np.array(c) for c in carry)


def _steps_check_infer(types, _attrs):
    x, running = types
    if running.shape != () or np.dtype(running.dtype) != np.bool_:
        raise GradjitError("while_steps_check: running must be a boolean scalar")
    return [(x.shape, x.dtype)]


def _steps_check_impl(x, running, max_steps):
    if bool(running):
        raise MaxStepsError(max_steps)
    return np.array(x)


def _no_infer(name):
    def infer(_types, _attrs):
        raise GradjitError(f"{name}: region nodes are built by tracer/control_flow.py only")
    return infer


defop("scan(Tensor args, Region body, int n_carry, int n_x, int length, bool reverse) -> Tensor",
      "kernel", _no_infer("scan"), _scan_impl)
defop("cond(Tensor pred, Tensor args, Region true_body, Region false_body) -> Tensor",
      "kernel", _no_infer("cond"), _cond_impl)
defop("call(Tensor args, Region body) -> Tensor", "kernel", _no_infer("call"), _call_impl)
defop("while(Tensor args, Region cond_body, Region body, int n_carry) -> Tensor", "kernel",
      _no_infer("while"), _while_impl)
# ``self`` itself, once ``running`` (cond_fun still true after max_steps) is seen false:
# what gj.while_loop with max_steps returns, so no executor hands back a truncated loop
defop("while_steps_check(Tensor self, Tensor running, int max_steps) -> Tensor", "kernel",
      _steps_check_infer, _steps_check_impl)


# -- tracing a body -----------------------------------------------------------------------------
def _enclosing():
    """The graph being traced right now (innermost body first), or None outside a trace."""
    if BODIES.stack:
        return BODIES.stack[-1].graph
    from gradjit.tracer.coercion import _LOCAL
    graphs = getattr(_LOCAL, "graphs", None)
    return graphs[-1] if graphs else None


def enclosing_graph():
    """The graph being traced right now in this thread (innermost first), or None: a
    transform called there is part of that trace (runtime/transforms.py inlines it)."""
    return _enclosing()


def _as_weak(graph, x, what):
    """``_as_outer``, where a Python number or a weak tracer stays weak (JAX's weak types)."""
    t = _as_outer(graph, x, what)
    weak = x.__class__ is WeakTracer or (type(x) in (int, float) and t.dtype.kind in "if")
    return WeakTracer(t.graph, t.value) if weak else t


def _wrap(graph, vals, weak):
    """Tracers of a region node's outputs ``vals``: weak where ``weak`` says."""
    return [(WeakTracer if w else Tracer)(graph, v) for v, w in zip(vals, weak)]


def _as_outer(graph, x, what):
    """A leaf as a tracer of ``graph`` (the enclosing one)."""
    if isinstance(x, Tracer):
        if x.graph is graph:
            return x
        if BODIES.stack and id(x.graph) in BODIES.stack[-1].family:
            return BODIES.stack[-1].lift(x)
        raise GradjitError(f"{what}: a traced value escaped from another trace", user_site())
    a = np.asarray(getattr(x, "data", x))
    if a.dtype == object:
        raise GradjitError(f"{what}: leaves must be arrays or numbers, got {type(x).__name__}",
                           user_site())
    return constant(graph, a)


def trace_body(outer, fn, leaves_in, trees_in, what, slice_first=()):
    """Trace ``fn`` on fresh inputs like ``leaves_in`` (tracers of ``outer``; those whose
    index is in ``slice_first`` drop their first axis; weak ones give weak body inputs).
    Returns ``(graph, out_leaves (Values), out_tree, feeds (outer tracers of the captured
    inputs, in input order), weak (per out leaf: a weak tracer or a Python number))``."""
    from gradjit.tracer.coercion import traced_numpy
    g = Graph(f"{outer.name}.{what}")
    g.view_tree = {} if outer.view_tree is not None else None
    ins = []
    for k, t in enumerate(leaves_in):
        shape = t.shape[1:] if k in slice_first else t.shape
        kind = WeakTracer if t.__class__ is WeakTracer else Tracer
        ins.append(kind(g, g.add_input(shape, t.dtype)))
    args, it = [], iter(ins)
    for tree, n in trees_in:
        args.append(pytree.unflatten(tree, [next(it) for _ in range(n)]))
    with BodyTrace(g, outer) as body, traced_numpy(g):
        out = fn(*args)
        leaves, tree = pytree.flatten(out)
        outs = [_as_weak(g, x, what) for x in leaves]
        vals = [t.value for t in outs]
    fed = dict(body.feeds)
    feeds = []
    for v in g.inputs[len(ins):]:   # captured values and the body's own constants, in order
        feeds.append(fed[v] if v in fed else constant(outer, g.constants.pop(v)))
    g.constant_ids = {}
    g.outputs = vals
    return g, vals, tree, feeds, [t.__class__ is WeakTracer for t in outs]


def _types(vals):
    return [(tuple(v.shape), np.dtype(v.dtype)) for v in vals]


def _check_same(what, kind, got, want, tree_got, tree_want,
                hint="Cast inside the body (x.astype(...)) or make the initial value match"):
    if tree_got != tree_want:   # (a tuple for an array, a list for a tuple ...)
        raise GradjitError(f"{what}: {kind}: the structure differs; got "
                           f"{pytree.describe(tree_got)} where {pytree.describe(tree_want)} "
                           f"was expected", user_site())
    if got != want:
        show = lambda ts: ", ".join(f"{np.dtype(d).name}{list(s)}" for s, d in ts)  # noqa: E731
        raise GradjitError(f"{what}: {kind} must keep its structure, shapes and dtypes; got "
                           f"({show(got)}) where ({show(want)}) was expected. {hint}", user_site())


# -- the user API ---------------------------------------------------------------------------------
def scan(f, init, xs=None, length=None, reverse=False, unroll=1):
    """``(final_carry, stacked_ys)``: ``carry, y = f(carry, x)`` over the leading axis of
    ``xs`` (pytrees), as ``jax.lax.scan``. ``unroll`` is accepted for JAX compatibility."""
    return _scan(f, init, xs, length, reverse, "gj.scan")


def _scan(f, init, xs, length, reverse, what):
    """``scan``, whose errors name ``what`` (the construct the user called: gj.scan,
    gj.fori_loop, gj.while_loop); it stays in the node's attrs as ``origin``, so a target
    refusing the region names what the user wrote."""
    x_leaves, x_tree = pytree.flatten(xs)
    lengths = {int(np.shape(x)[0]) for x in x_leaves if np.ndim(x) >= 1}
    if any(np.ndim(x) == 0 for x in x_leaves):
        raise GradjitError(f"{what}: every leaf of xs needs a leading axis to scan over",
                           user_site())
    if length is not None:
        lengths.add(int(length))
    if len(lengths) != 1:
        raise GradjitError(f"{what}: {'give length= when xs is None' if not lengths else f'the leading axes of xs and length disagree: {sorted(lengths)}'}",
                           user_site())
    n = lengths.pop()
    outer = _enclosing()
    if outer is None:
        return _scan_eager(f, init, xs, x_leaves, x_tree, n, reverse)
    c_leaves, c_tree = pytree.flatten(init)
    c_in = [_as_weak(outer, c, what) for c in c_leaves]
    x_in = [_as_weak(outer, x, what) if x.__class__ is WeakTracer else _as_outer(outer, x, what)
            for x in x_leaves]
    nc, nx = len(c_in), len(x_in)

    def step(carry, x):
        res = f(carry, x)
        if not isinstance(res, tuple) or len(res) != 2:
            raise GradjitError(f"{what}: the body must return a pair (carry, y)", user_site())
        return res

    g, vals, tree, feeds, weak = trace_body(outer, step, c_in + x_in,
                                            [(c_tree, nc), (x_tree, nx)], "scan",
                                            slice_first=range(nc, nc + nx))
    out_c_tree, out_y_tree = tree[1][0], tree[1][1]
    got, want = _types(vals[:nc]), _types(g.inputs[:nc])
    promoted = _weak_promotions(c_in, weak[:nc], got, want) if out_c_tree == c_tree else None
    if promoted:   # (JAX's weak types: a weak initial carry takes the body's type)
        return _scan(f, pytree.unflatten(c_tree, promoted), xs, length, reverse, what)
    _check_same(what, "the carry", got, want, out_c_tree, c_tree)
    attrs = {"body": Region(g), "n_carry": nc, "n_x": nx, "length": n, "reverse": bool(reverse),
             "origin": what}
    types = ([(v.shape, v.dtype) for v in g.inputs[:nc]]
             + [((n,) + v.shape, v.dtype) for v in vals[nc:]]
             + [((n,) + v.shape, v.dtype) for v in g.inputs[:nc]])
    outs = outer.add_node("scan.default", [t.value for t in c_in + x_in + feeds], attrs, types,
                          outer.site_override or user_site())
    res = _wrap(outer, outs, weak) + [Tracer(outer, v) for v in outs[len(vals):]]
    return (pytree.unflatten(c_tree, res[:nc]),
            pytree.unflatten(out_y_tree, res[nc:nc + len(vals) - nc]))


def _weak_promotions(c_in, weak_out, got, want):
    """The initial carry (tracers ``c_in``) with each weak leaf whose body result is strong
    or of another dtype cast to the result's type (strong where the result is), as JAX
    promotes a weak carry, where NumPy's weak rule gives that dtype (a weak float64 beside
    float32 -> float32; not float -> int64); None when nothing changes or a non-weak leaf
    does not match (the caller's check then names it)."""
    out = list(c_in)
    for k, (x, w, (gs, gd), (ws, wd)) in enumerate(zip(c_in, weak_out, got, want)):
        if x.__class__ is not WeakTracer or (w and gd == wd):
            if (gs, gd) != (ws, wd):
                return None
            continue
        if gs != ws or np.result_type(gd, _PY[wd.kind]) != gd:
            return None
        t = Tracer(x.graph, x.value)
        t = t if gd == wd else t.astype(gd)
        out[k] = WeakTracer(t.graph, t.value) if w else t
    return out if any(a is not b for a, b in zip(out, c_in)) else None


_PY = {"c": 0j, "f": 0.0, "i": 0}   # a weak value's kind as a Python number (NumPy's rule)


def _scan_eager(f, init, xs, x_leaves, x_tree, n, reverse):
    carry, ys = init, []
    for k in (range(n - 1, -1, -1) if reverse else range(n)):
        carry, y = f(carry, pytree.unflatten(x_tree, [x[k] for x in x_leaves]))
        ys.append(y)
    if reverse:
        ys.reverse()
    if not ys:
        return carry, None
    y_leaves = [pytree.flatten(y)[0] for y in ys]
    _, y_tree = pytree.flatten(ys[0])
    stacked = [_stack([row[j] for row in y_leaves]) for j in range(len(y_leaves[0]))]
    return carry, pytree.unflatten(y_tree, stacked)


def _stack(items):
    from gradjit.tracer.tensor import Tensor
    if any(isinstance(i, Tensor) for i in items):
        from gradjit.tracer import stack
        return stack(items)
    return np.stack([np.asarray(i) for i in items])


def fori_loop(lower, upper, body_fun, init_val):
    """``body_fun(i, val)`` for ``i`` in ``range(lower, upper)``, as ``jax.lax.fori_loop``;
    the bounds must be Python ints (a traced bound: use ``gj.while_loop``)."""
    for b in (lower, upper):
        if isinstance(b, Tracer) or not isinstance(b, (int, np.integer)):
            raise GradjitError("gj.fori_loop: lower and upper must be Python ints (the trip "
                               "count is fixed when the function is traced); for a bound "
                               "computed from data use gj.while_loop", user_site())
    lower, upper = int(lower), int(upper)
    if _enclosing() is None:
        val = init_val
        for i in range(lower, upper):
            val = body_fun(i, val)
        return val
    steps = np.arange(lower, max(lower, upper), dtype=np.int64)
    if steps.size == 0:
        return init_val
    outer = _enclosing()
    steps = _as_outer(outer, steps, "gj.fori_loop")   # (the index is a weak int: a Python int's)
    return _scan(lambda c, i: (body_fun(i, c), None), init_val,
                 WeakTracer(steps.graph, steps.value), None, False, "gj.fori_loop")[0]


def while_loop(cond_fun, body_fun, init_val, max_steps=None):
    """``while cond_fun(val): val = body_fun(val)``, as ``jax.lax.while_loop``. Reverse mode
    needs ``max_steps`` (the loop is then a scan of that many steps whose body is a
    ``cond``: once ``cond_fun`` is false ``val`` passes through unchanged and the body
    does not run); without it the loop is forward-only."""
    outer = _enclosing()
    if outer is None:
        val, k = init_val, 0
        while bool(cond_fun(val)):
            if max_steps is not None and k >= max_steps:
                raise MaxStepsError(max_steps, user_site())
            val, k = body_fun(val), k + 1
        return val
    if max_steps is not None:
        def checked_body(val):
            new = body_fun(val)
            nl, nt = pytree.flatten(new)
            ol, ot = pytree.flatten(val)
            _check_same("gj.while_loop", "the loop value", _types(nl), _types(ol), nt, ot)
            return new

        def step(c, _):
            val, live = c
            live = np.logical_and(live, cond_fun(val))
            # once stopped, the body does not run (a cond, not a where over its result:
            # sqrt(x - 0.5) past the stop made NaN derivatives that 0 * NaN let through)
            return (cond(live, checked_body, lambda v: v, val), live), None
        (val, live), _ = _scan(step, (init_val, np.array(True)), None, int(max_steps), False,
                               "gj.while_loop")
        # cond_fun still true after the last step: the loop was cut short, an error when
        # the result (or its gradient, through the check's formula) is computed
        running = np.logical_and(live, cond_fun(val))
        leaves, tree = pytree.flatten(val)
        return pytree.unflatten(tree, [apply("while_steps_check.default", [x, running],
                                             {"max_steps": int(max_steps)}) for x in leaves])
    c_leaves, c_tree = pytree.flatten(init_val)
    c_in = [_as_weak(outer, c, "gj.while_loop") for c in c_leaves]
    nc = len(c_in)
    gb, bvals, btree, bfeeds, weak = trace_body(outer, body_fun, c_in, [(c_tree, nc)],
                                                "while_body")
    promoted = (_weak_promotions(c_in, weak, _types(bvals), _types(gb.inputs[:nc]))
                if btree == c_tree else None)
    if promoted:   # (a weak initial value takes the body's type, as JAX's)
        return while_loop(cond_fun, body_fun, pytree.unflatten(c_tree, promoted))
    gc, cvals, _, cfeeds, _ = trace_body(outer, cond_fun, c_in, [(c_tree, nc)], "while_cond")
    if len(cvals) != 1 or cvals[0].shape != () or cvals[0].dtype != np.bool_:
        raise GradjitError("gj.while_loop: cond_fun must return one boolean scalar",
                           user_site())
    _check_same("gj.while_loop", "the loop value", _types(bvals), _types(gb.inputs[:nc]),
                btree, c_tree)
    feeds = _merge_captures([gc, gb], [cfeeds, bfeeds], nc)
    outs = outer.add_node("while.default", [t.value for t in c_in + feeds],
                          {"cond_body": Region(gc), "body": Region(gb), "n_carry": nc},
                          [(v.shape, v.dtype) for v in gb.inputs[:nc]], user_site())
    return pytree.unflatten(c_tree, _wrap(outer, outs, weak))


def _merge_captures(graphs, feeds, n_lead):
    """Give the bodies one signature: the shared leading inputs, then every body's
    captured inputs (each body gets unused inputs for the others'). Returns all feeds."""
    extra = [[g.inputs.pop() for _ in range(len(g.inputs) - n_lead)][::-1] for g in graphs]
    for i, g in enumerate(graphs):
        for j, caps in enumerate(extra):
            g.inputs += caps if i == j else [g._new_value(v.shape, v.dtype) for v in caps]
    return [t for f in feeds for t in f]


def cond(pred, true_fun, false_fun, *operands):
    """``true_fun(*operands)`` if ``pred`` else ``false_fun(*operands)``, as
    ``jax.lax.cond``: with a traced ``pred`` both branches are traced and only the chosen
    one runs; they must return the same structure, shapes and dtypes."""
    outer = _enclosing()
    if outer is None or not isinstance(pred, Tracer):
        if isinstance(pred, Tracer):
            raise GradjitError("gj.cond: a traced predicate outside a trace", user_site())
        return true_fun(*operands) if bool(np.asarray(getattr(pred, "data", pred))) \
            else false_fun(*operands)
    if pred.shape != ():
        raise GradjitError(f"gj.cond: the predicate must be a scalar, got shape "
                           f"{tuple(pred.shape)}", user_site())
    p = _as_outer(outer, pred, "gj.cond")
    if p.dtype != np.bool_:
        p = p != 0
    o_leaves, o_tree = pytree.flatten(list(operands))
    o_in = [_as_weak(outer, x, "gj.cond") for x in o_leaves]
    n = len(o_in)
    gt, tv, tt, tf, tw = trace_body(outer, lambda ops: true_fun(*ops), o_in, [(o_tree, n)],
                                    "cond_true")
    gf, fv, ft, ff, fw = trace_body(outer, lambda ops: false_fun(*ops), o_in, [(o_tree, n)],
                                    "cond_false")
    _check_same("gj.cond", "the false branch's result", _types(fv), _types(tv), ft, tt,
                "Make both branches return the same (cast one: x.astype(...))")
    feeds = _merge_captures([gt, gf], [tf, ff], n)
    outs = outer.add_node("cond.default", [p.value] + [t.value for t in o_in + feeds],
                          {"true_body": Region(gt), "false_body": Region(gf)},
                          [(v.shape, v.dtype) for v in tv], user_site())
    return pytree.unflatten(tt, _wrap(outer, outs, [a and b for a, b in zip(tw, fw)]))


def checkpoint(fun=None, *, static_argnums=(), prevent_cse=True, policy=None):
    """``fun`` whose reverse mode recomputes its intermediate values instead of keeping
    them (``jax.checkpoint``): memory for compute. Inside a trace its call is one node.
    Keyword arguments are pytrees as positional ones; ``static_argnums`` name positional
    arguments passed through as they are (any Python object); ``prevent_cse`` and
    ``policy`` are JAX's knobs, accepted (gradjit saves nothing inside: ``policy=None``)."""
    import functools
    if fun is None:   # (@gj.checkpoint(static_argnums=...))
        return functools.partial(checkpoint, static_argnums=static_argnums,
                                 prevent_cse=prevent_cse, policy=policy)
    if policy is not None:
        raise NotImplementedError("gj.checkpoint(policy=...): gradjit recomputes everything "
                                  "inside a checkpoint; pass policy=None")
    statics = {static_argnums} if isinstance(static_argnums, int) else set(static_argnums)

    @functools.wraps(fun)
    def wrapped(*args, **kwargs):
        outer = _enclosing()
        if outer is None:
            return fun(*args, **kwargs)
        fixed = {k % len(args): args[k] for k in statics if -len(args) <= k < len(args)}
        dyn = [a for k, a in enumerate(args) if k not in fixed]
        leaves, tree = pytree.flatten([dyn, dict(kwargs)])
        traced = [k for k, x in enumerate(leaves) if pytree.is_traced_leaf(x)
                  or isinstance(x, Tracer)]
        ins = [_as_weak(outer, leaves[k], "gj.checkpoint") for k in traced]

        def call(*xs):
            full = list(leaves)
            for k, x in zip(traced, xs):
                full[k] = x
            dyn_in, kw = pytree.unflatten(tree, full)
            it = iter(dyn_in)
            return fun(*[fixed[k] if k in fixed else next(it) for k in range(len(args))], **kw)
        g, vals, out_tree, feeds, weak = trace_body(outer, call, ins,
                                                    [(_LEAF_TREE, 1)] * len(ins), "checkpoint")
        outs = outer.add_node("call.default", [t.value for t in ins + feeds],
                              {"body": Region(g)}, [(v.shape, v.dtype) for v in vals],
                              user_site())
        return pytree.unflatten(out_tree, _wrap(outer, outs, weak))
    return wrapped


_LEAF_TREE = pytree.flatten(0)[1]
