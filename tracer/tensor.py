"""Eager ``Tensor`` (torch.autograd-like): forward runs in NumPy, ops are recorded.

Contract
- ``Tensor.data`` is always a NumPy array. An op on tensors runs its NumPy
  reference at once; when grad mode is on and an input requires grad, it also
  records a ``GradFn`` (the op, its attributes, edges to its inputs, and its
  output arrays, which are the values backward may need).
- Edges point at the producing ``GradFn`` (non-leaf) or at the input
  ``Tensor`` itself (leaf or constant), never at intermediate Tensor objects,
  so freeing ``GradFn.out_data`` after backward really frees the saved arrays.
- ``record_graph(roots)`` turns the recorded history into an IR ``Graph``
  (nodes in recording order, so equal programs give equal structural keys)
  plus the arrays that feed it. The backward engine lives in ``runtime/`` and
  is attached as ``Tensor._engine`` at import time (stages import one way).
- Grad mode (``no_grad``, ``enable_grad``, ``set_grad_enabled``) is thread-local.
"""
from __future__ import annotations

import contextlib
import itertools
import threading

import numpy as np

from gradjit.tracer.api import ArrayOps
from gradjit.tracer.ir import Graph
from gradjit.tracer.registry import GradjitError, bind_attrs, get_op, user_site

_state = threading.local()
_seq = itertools.count()


def is_grad_enabled():
    return getattr(_state, "enabled", True)


class set_grad_enabled(contextlib.ContextDecorator):
    def __init__(self, mode):
        self.mode = bool(mode)
        self.prev = is_grad_enabled()
        _state.enabled = self.mode  # torch: takes effect on construction too

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        _state.enabled = self.prev
        return False


class _GradMode(contextlib.ContextDecorator):
    mode = True

    def __enter__(self):
        self.prev = is_grad_enabled()
        _state.enabled = self.mode
        return self

    def __exit__(self, *exc):
        _state.enabled = self.prev
        return False


class no_grad(_GradMode):
    mode = False


class enable_grad(_GradMode):
    mode = True


def _backward_name(op):
    base = op.split(".")[0].lstrip("_")
    return "".join(p.capitalize() for p in base.split("_")) + "Backward0"


class GradFn:
    """One recorded op. ``edges[i]`` is (GradFn, output index) or a Tensor."""

    __slots__ = ("op", "attrs", "edges", "out_types", "out_data", "seq", "site", "freed")

    def __init__(self, op, attrs, edges, out_types, out_data, site):
        self.op, self.attrs, self.edges = op, attrs, edges
        self.out_types, self.out_data, self.site = out_types, out_data, site
        self.seq = next(_seq)
        self.freed = False

    def name(self):
        return _backward_name(self.op)

    def __repr__(self):
        return f"<{self.name()}>"

    def release(self):
        self.out_data = None
        self.freed = True


class Tensor(ArrayOps):
    __slots__ = ("data", "_requires_grad", "grad", "grad_fn", "_index", "__weakref__")
    _engine = None  # set by gradjit.runtime: the compiled backward

    def __init__(self, data, requires_grad=False, grad_fn=None, index=0):
        self.data = data
        self.grad = None
        self.grad_fn = grad_fn
        self._index = index
        self._requires_grad = False
        if requires_grad:
            self.requires_grad = True

    # -- properties -----------------------------------------------------------------
    shape = property(lambda self: self.data.shape)
    dtype = property(lambda self: self.data.dtype)
    is_leaf = property(lambda self: self.grad_fn is None)

    @property
    def requires_grad(self):
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, flag):
        if flag and self.data.dtype.kind != "f":
            raise GradjitError(f"Only Tensors of floating point dtype can require gradients "
                               f"(got a tensor of dtype {self.data.dtype.name} and shape "
                               f"{self.data.shape})", user_site())
        if self.grad_fn is not None and not flag:
            raise RuntimeError("you can only change requires_grad flags of leaf variables.")
        self._requires_grad = bool(flag)

    def requires_grad_(self, flag=True):
        self.requires_grad = flag
        return self

    def numpy(self):
        if self._requires_grad:
            raise RuntimeError("Can't call numpy() on Tensor that requires grad. "
                               "Use tensor.detach().numpy() instead.")
        return self.data

    def __array__(self, dtype=None, copy=None):
        return self.data if dtype is None else self.data.astype(dtype)

    def detach(self):
        return Tensor(self.data)

    def item(self):
        if self.data.size != 1:
            raise ValueError(f"a Tensor with {self.data.size} elements cannot be converted to Scalar")
        return self.data.item()

    def tolist(self):
        return self.data.tolist()

    def __bool__(self):
        return bool(self.item())

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    def __repr__(self):
        body = np.array2string(self.data, separator=", ", prefix="tensor(")
        extra = ""
        if self.data.dtype != np.float64:
            extra += f", dtype={self.data.dtype.name}"
        if self.grad_fn is not None:
            extra += f", grad_fn={self.grad_fn!r}"
        elif self._requires_grad:
            extra += ", requires_grad=True"
        return f"tensor({body}{extra})"

    def backward(self, gradient=None, retain_graph=None, inputs=None):
        Tensor._engine.backward([self], None if gradient is None else [gradient],
                                retain_graph, inputs)

    # -- ops ------------------------------------------------------------------------------
    @classmethod
    def _const(cls, array):
        return cls(np.asarray(array))

    @classmethod
    def _apply(cls, op_name, inputs, attrs):
        op = get_op(op_name)
        attrs = bind_attrs(op, attrs)
        ts = [x if isinstance(x, Tensor) else Tensor(np.asarray(x)) for x in inputs]
        arrays = [t.data for t in ts]
        out_types = op.infer(arrays, attrs)
        with np.errstate(all="ignore"):
            res = op.impl(*arrays, **attrs)
        res = res if isinstance(res, tuple) else (res,)
        outs = [np.asarray(r).astype(dt, copy=False) for r, (_, dt) in zip(res, out_types)]
        record = is_grad_enabled() and any(t._requires_grad for t in ts)
        if not record:
            return _one([Tensor(o) for o in outs])
        edges = [(t.grad_fn, t._index) if t.grad_fn is not None else t for t in ts]
        fn = GradFn(op_name, attrs, edges, out_types, outs, user_site())
        return _one([Tensor(o, grad_fn=fn, index=i)._mark(dt.kind == "f")
                     for i, (o, (_, dt)) in enumerate(zip(outs, out_types))])

    def _mark(self, differentiable):
        if differentiable:
            self._requires_grad = True
        else:
            self.grad_fn = None  # integer/bool outputs never carry gradients
        return self


def _one(xs):
    return xs[0] if len(xs) == 1 else tuple(xs)


def tensor(data, requires_grad=False, dtype=None):
    """A new leaf tensor holding a copy of ``data`` (as ``torch.tensor``)."""
    if isinstance(data, Tensor):
        data = data.data
    return Tensor(np.array(data, dtype=dtype, copy=True), requires_grad=requires_grad)


def from_numpy(array):
    """A tensor sharing memory with ``array`` (as ``torch.from_numpy``)."""
    return Tensor(np.asarray(array))


class RecordedGraph:
    """The IR of recorded history; ``array(value)`` is the recorded array of any of
    its values (a leaf's data or a saved op output)."""

    def __init__(self, graph, roots, leaves, fns, producers):
        self.graph, self.roots, self.leaves, self.fns = graph, roots, leaves, fns
        self.producers = producers  # Value -> (GradFn, index) or Tensor

    def array(self, value):
        src = self.producers[value]
        if isinstance(src, Tensor):
            return src.data
        fn, i = src
        if fn.out_data is None:
            raise RuntimeError(_FREED)
        return fn.out_data[i]


_FREED = ("Trying to backward through the graph a second time (or directly access saved tensors "
          "after they have already been freed). Saved intermediate values of the graph are freed "
          "when you call .backward() or autograd.grad(). Specify retain_graph=True if you need to "
          "backward through the graph a second time or if you need to access saved tensors after "
          "calling backward.")


def record_graph(roots):
    """Build the forward IR reachable from ``roots`` (a list of Tensors)."""
    fns, stack = {}, [t.grad_fn for t in roots if t.grad_fn is not None]
    while stack:
        fn = stack.pop()
        if id(fn) in fns:
            continue
        if fn.freed:
            raise RuntimeError(_FREED)
        fns[id(fn)] = fn
        stack.extend(e[0] for e in fn.edges if isinstance(e, tuple))
    order = sorted(fns.values(), key=lambda f: f.seq)
    g = Graph("forward")
    values, leaves, producers = {}, {}, {}

    def leaf_value(t):
        v = leaves.get(id(t))
        if v is None:
            v = g.add_input(t.data.shape, t.data.dtype)
            leaves[id(t)] = v
            producers[v] = t
        return v

    for fn in order:
        ins = [values[(id(e[0]), e[1])] if isinstance(e, tuple) else leaf_value(e) for e in fn.edges]
        outs = g.add_node(fn.op, ins, fn.attrs, fn.out_types, fn.site)
        for i, v in enumerate(outs):
            values[(id(fn), i)] = v
            producers[v] = (fn, i)
    root_values = [values[(id(t.grad_fn), t._index)] if t.grad_fn is not None else leaf_value(t)
                   for t in roots]
    g.outputs = list(root_values)
    leaf_tensors = [(v, producers[v]) for v in g.inputs]
    return RecordedGraph(g, root_values, leaf_tensors, order, producers)
