"""Recorded history -> IR: the bridge from eager tensors to the graph pipeline.

Contract
- ``History(roots)`` walks the ``GradFn``s reachable from ``roots`` once, in
  recording order, and gives what a backward call needs on its hot path
  without building any IR: ``key`` (the structural key: ops, attributes,
  types and wiring, in the recording tape's flat form (tracer/tape.py), so a
  walked and a taped history of one structure have one key; hook/retain
  positions, custom-Function fingerprints),
  addresses of tensors (``addr``: ``("in", i)`` for the i-th leaf met,
  ``("node", j, k)`` for output k of the j-th recorded op) and the arrays at
  those addresses (``array``, with freed-graph and in-place version checks).
  A node an earlier backward freed does not stop the walk (``freed`` says one was met):
  as in torch, a second backward fails only when it needs values that were freed.
- ``History.graph()`` builds, on demand, the forward ``Graph`` with the same
  numbering: input i is leaf i, node j is op j. So a plan compiled from one
  step's graph is fed from any later step's History with an equal key.
"""
from __future__ import annotations

import numpy as np

from gradjit.tracer.gradfn import FREED as _FREED
from gradjit.tracer.ir import Graph
from gradjit.tracer.tape import fn_key as _fn_key, peek, ref_of, take
from gradjit.tracer.tensor import Tensor
from gradjit.tracer.tracer_setitem import VIEW_OPS as _VIEW_OPS



def _cut(e):
    """An edge with a device copy behind it ends this device's graph: the copy's proxy
    leaf (``GradFn.boundary``, see tracer/tensor_device.py) stands for it."""
    if isinstance(e, tuple) and e[0].boundary is not None:
        return e[0].boundary
    return e


class History:
    @classmethod
    def of(cls, roots):
        """``History(roots)``, from the recording tape when it holds exactly the roots'
        history (tracer/tape.py), so the usual backward does not walk the graph. Takes the
        tape: call it once per backward."""
        taken = take(roots)
        return cls(roots) if taken is None else cls._from_tape(roots, taken)

    @classmethod
    def peek(cls, roots):
        """``of(roots)`` without taking the tape (what a backward() now would get)."""
        taken = peek(roots)
        return cls(roots) if taken is None else cls._from_tape(roots, taken)

    @classmethod
    def _from_tape(cls, roots, taken):
        self = cls.__new__(cls)
        self.taped = True
        self.cuts, self.order, self.leaves = {}, taken.fns, taken.leaves
        self._pos = None   # built when asked (pos): a joint backward never needs it
        self.leaf_pos = {id(t): i for i, t in enumerate(self.leaves)}
        self.stale = {slot: _last_stale_use(self.order, t) for slot, t in enumerate(self.leaves)
                      if t._box[0] != taken.first[slot]}   # (versions only grow)
        self.roots = [("node", len(self.order) - 1, roots[0]._index)]
        leaf_types = tuple((t._data.shape, t._data.dtype.str) for t in self.leaves)
        self.extras = self._extras()
        self.key = (tuple(taken.parts), leaf_types, tuple(self.roots), self.extras)
        return self

    def _extras(self):
        """Hook / retain_grad positions and custom-Function fingerprints, per node."""
        return tuple((j, tuple(k for k, h in (fn.hooks or {}).items() if h),
                      tuple(sorted(fn.retains or ())),
                      fn.ctx.fingerprint() if fn.ctx is not None else None)
                     for j, fn in enumerate(self.order)
                     if fn.hooks or fn.retains or fn.ctx is not None)

    taped = False   # built from the recording tape (``of``), not by a walk
    freed = False   # the walk met a node an earlier backward freed (runtime/engine.py)

    def __init__(self, roots):
        # Device copies met on the way ({id(proxy leaf): copy's GradFn}): this graph ends at
        # them; runtime/autograd.py carries their gradients to the other device.
        self.cuts = {id(t.grad_fn.boundary): t.grad_fn for t in roots
                     if t.grad_fn is not None and t.grad_fn.boundary is not None}
        roots = [t if t.grad_fn is None or t.grad_fn.boundary is None else t.grad_fn.boundary
                 for t in roots]
        fns, stack = {}, [t.grad_fn for t in roots if t.grad_fn is not None]
        while stack:
            fn = stack.pop()
            if id(fn) in fns:
                continue
            if fn.freed:   # a backward freed it: fine unless its values are needed (freed)
                self.freed = True
            fns[id(fn)] = fn
            for e in fn.edges:
                if isinstance(e, tuple) and e[0].boundary is not None:
                    self.cuts[id(e[0].boundary)] = e[0]
                elif isinstance(e, tuple):
                    stack.append(e[0])
        self.order = order = sorted(fns.values(), key=lambda f: f.seq)
        self._pos = pos = {id(fn): j for j, fn in enumerate(order)}
        self.leaves, self.leaf_pos, self.stale = [], {}, {}
        parts = []
        for j, fn in enumerate(order):
            parts.append(_fn_key(fn))
            for e, version in zip(map(_cut, fn.edges), fn.in_versions):
                if isinstance(e, tuple):
                    parts.append(ref_of(pos[id(e[0])], e[1]))
                    continue
                i = self.leaf_pos.get(id(e))
                if i is None:
                    i = self.leaf_pos[id(e)] = len(self.leaves)
                    self.leaves.append(e)
                if version is not None and e._box[0] != version:
                    self.stale[i] = (fn, version)
                parts.append(i)
        for t in roots:  # a leaf root (x.backward() on a leaf) is an input of the graph
            if t.grad_fn is None and id(t) not in self.leaf_pos:
                self.leaf_pos[id(t)] = len(self.leaves)
                self.leaves.append(t)
        self.roots = [self.addr(t) for t in roots]
        leaf_types = tuple((t._data.shape, t._data.dtype.str) for t in self.leaves)
        self.extras = self._extras()
        self.key = (tuple(parts), leaf_types, tuple(self.roots), self.extras)

    @property
    def pos(self):
        """id(GradFn) -> its position in ``order``."""
        if self._pos is None:
            self._pos = {id(fn): j for j, fn in enumerate(self.order)}
        return self._pos

    def addr(self, t):
        if t.grad_fn is not None and t.grad_fn.boundary is not None:
            t = t.grad_fn.boundary
        if t.grad_fn is not None:
            j = self.pos.get(id(t.grad_fn))
            return None if j is None else ("node", j, t._index)
        i = self.leaf_pos.get(id(t))
        return None if i is None else ("in", i)

    def array(self, addr):
        if addr[0] == "in":
            t = self.leaves[addr[1]]
            if addr[1] in self.stale:
                fn, version = self.stale[addr[1]]
                raise RuntimeError(
                    f"one of the variables needed for gradient computation has been modified by an "
                    f"inplace operation: [{t.dtype.name} {list(t.shape)}], which is an input of "
                    f"{fn.name()}, is at version {t._box[0]}; expected version {version} instead.")
            return t._data
        fn, i = self.order[addr[1]], addr[2]
        if fn.out_data is None or fn.out_data[i] is None:
            raise RuntimeError(_FREED)
        box, version = fn.versions[i]
        if box[0] == version and fn.op in _VIEW_OPS:
            box, version = _base_version(fn, i) or (box, version)
        if box[0] != version:
            dt, shape = fn.out_types[i][1], fn.out_types[i][0]
            raise RuntimeError(
                f"one of the variables needed for gradient computation has been modified by an "
                f"inplace operation: [{dt.name} {list(shape)}], which is output {i} of "
                f"{fn.name()}, is at version {box[0]}; expected version {version} instead.")
        return fn.out_data[i]

    def tensor(self, addr):
        """A Tensor for the value at ``addr`` that carries its history (create_graph)."""
        if addr[0] == "in":
            return self.leaves[addr[1]]
        self.array(addr)
        fn, i = self.order[addr[1]], addr[2]
        # (an integer output, sort's indices, carries no gradient: as when it was made)
        return Tensor(fn.out_data[i], grad_fn=fn, index=i,
                      box=fn.versions[i][0])._mark(fn.out_types[i][1].kind == "f")

    def hooks(self, addr):
        fn, i = self.order[addr[1]], addr[2]
        return (fn.hooks or {}).get(i, ())

    def retained(self):
        """(address, tensor) of every live non-leaf tensor that asked for retain_grad."""
        out = []
        for j, fn in enumerate(self.order):
            for i, ref in sorted((fn.retains or {}).items()):
                t = ref()
                if t is not None:
                    out.append((("node", j, i), t))
        return out

    def ctx(self, j):
        return self.order[j].ctx

    def release(self):
        for fn in self.order:
            fn.release()

    # -- the IR ---------------------------------------------------------------------
    def graph(self):
        """A new forward Graph (input i = leaf i, node j = op j; outputs = the roots).
        Custom Function nodes carry ``node=j`` so rules can find their context."""
        g = Graph("forward")
        ins = [g.add_input(t._data.shape, t._data.dtype) for t in self.leaves]
        for j, fn in enumerate(self.order):
            args = [g.nodes[e[0]].outputs[e[1]] if isinstance(e, tuple) else ins[e]
                    for e in _refs(fn, self)]
            g.add_node(fn.op, args, fn.attrs if fn.ctx is None else dict(fn.attrs, node=j),
                       fn.out_types, fn.site)
        g.outputs = [value_at(g, a) for a in self.roots]
        return g


def _base_version(fn, i):
    """(version box, version) of the base of view output ``i`` of ``fn`` when an in-place
    op changed that base since (its memory is the view's: torch's views share their base's
    version counter), else None. A result NumPy copied (a reshape of a transposed array)
    shares no memory with its base and is not a view of it."""
    e, out = fn.edges[0], fn.out_data[i]
    if isinstance(e, tuple):
        base_fn, k = e
        if (base_fn.out_data is None or base_fn.out_data[k] is None
                or not np.may_share_memory(out, base_fn.out_data[k])):
            return None
        box, version = base_fn.versions[k]
        if box[0] != version:
            return box, version
        return _base_version(base_fn, k) if base_fn.op in _VIEW_OPS else None
    version = fn.in_versions[0]
    if version is None or e._data is None or not np.may_share_memory(out, e._data):
        return None
    return (e._box, version) if e._box[0] != version else None


def _last_stale_use(order, t):
    """(node, version) of the last use of leaf ``t`` that saw a version other than its
    current one (the tape records only each leaf's first version)."""
    return [(fn, v) for fn in order for e, v in zip(fn.edges, fn.in_versions)
            if e is t and v != t._box[0]][-1]


def _refs(fn, hist):
    return [(hist.pos[id(e[0])], e[1]) if isinstance(e, tuple) else hist.leaf_pos[id(e)]
            for e in map(_cut, fn.edges)]


def value_at(graph, addr):
    return graph.inputs[addr[1]] if addr[0] == "in" else graph.nodes[addr[1]].outputs[addr[2]]


def address(graph, value):
    """The structural address of a forward value (inverse of ``History.value``)."""
    if value.node is None:
        return ("in", graph.inputs.index(value))
    return ("node", graph.nodes.index(value.node), value.index)
