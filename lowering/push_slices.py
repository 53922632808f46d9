"""Slices of computed values, computed from the slices of what they are made of.

Contract
- ``push_slices(graph, roots=(), since=0) -> {old Value: new Value}`` rewrites ``graph``
  in place, before the adjoint is built on it (as ``fold_loops``; the returned map and
  ``since`` likewise), and the bodies of its region nodes (scans, branches, calls) the
  same way.
- Slices (``slice.Tensor``) of a concatenation along its dim, of step 1, are the parts
  they cover (sliced where they cover them partly), concatenated again when more than
  one; the concatenation stays for its other readers.
- A value ``X`` made by an elementwise op is *pushed* when every reader of ``X`` is a
  slice or a squeeze of a size-1 dim (``squeeze.dim``), their results together are no
  larger than ``X`` (overlapping slices would compute some elements twice), and ``X`` is
  neither a graph output, a root the caller holds, nor a running update: each reader
  ``X[s]`` becomes the op on ``a[s]`` for each operand ``a`` (the same slice or squeeze
  of the same dim, counted from the right as broadcasting aligns; an operand without
  that dim, or of size 1 in it, is read whole), and ``X``'s node goes.
- Operands sliced are pushed in turn, so a chain of elementwise ops read only through
  slices computes only the slices, and no more elements than before. Identical readers
  share one new value. Each of ``k`` readers gets its own node, so pushing stops where
  the graph would more than double (a value cut into many slices keeps its loop).
- Only nodes whose values are numbered ``since`` or later are rewritten (see
  ``fold_loops``).
- Why: an ODE right-hand side unpacks its state (``x, v = y``, ``y[0]``) and packs its
  derivative (``np.stack``); a solver step adds such stacks (``y + h * k1``) and unpacks
  the sum in the next stage. Unpushed, every stage is a stack, a whole-array loop, then
  row slices of it (an RK4 step: eight loops and as many temporary arrays); pushed, the
  rows flow through, the loops fuse, and the adjoint has no slice / concatenation
  adjoints to build for them.
"""
from __future__ import annotations

from gradjit.tracer.api import apply
from gradjit.tracer.control_flow import Region
from gradjit.tracer.registry import get_op
from gradjit.tracer.trace import Tracer

_SLICE = "slice.Tensor"
_SQUEEZE = "squeeze.dim"
_READERS = (_SLICE, _SQUEEZE)
_SHAPED = {"expand.default"}   # elementwise, but its attributes name the result's shape


def push_slices(graph, roots=(), since=0):
    for node in graph.nodes:
        if node.outputs[0].id < since:
            continue
        for k, a in list(node.attrs.items()):
            if isinstance(a, Region) and _pushable_inside(a.graph):
                push_slices(a.graph)
                node.attrs[k] = Region(a.graph)   # (its key follows the new body)
    return _Pusher(graph, roots, since).run()


def _pushable_inside(body):
    return any(n.op in _READERS for n in body.nodes) or any(
        isinstance(a, Region) for n in body.nodes for a in n.attrs.values())


class _Pusher:
    def __init__(self, graph, roots, since):
        self.g, self.since = graph, since
        self.kept = set(graph.outputs) | set(roots) | {u[1] for u in graph.running_updates}
        self.producer = {v: n for n in graph.nodes for v in n.outputs}
        self.readers = {}
        for n in graph.nodes:
            for v in n.inputs:
                self.readers.setdefault(v, []).append(n)
        self.moved = {}

    def run(self):
        work = [n.inputs[0] for n in self.g.nodes if n.op in _READERS]
        limit = 2 * len(self.g.nodes)
        while work:
            x = work.pop()
            readers = self._pushable(x)
            if readers and self._fits(x, readers, limit):
                work.extend(self._push(x, readers))
        for k in self.moved:   # (a value replaced by one replaced later: the last)
            while self.moved[k] in self.moved:
                self.moved[k] = self.moved[self.moved[k]]
        return self.moved

    def _fits(self, x, readers, limit):
        """Whether the graph stays within ``limit`` nodes, whatever the push adds: per
        reader, the op's node and a slice of each operand (a cat's parts add none)."""
        p = self.producer[x]
        grows = 0 if p.op == "cat.default" else len(readers) * (1 + len(p.inputs))
        return len(self.g.nodes) + grows <= limit

    def _pushable(self, x):
        """The readers of ``x`` to push into its producer (none: leave ``x`` alone)."""
        p = self.producer.get(x)
        rs = self.readers.get(x, ())
        if p is None or len(p.outputs) != 1 or not rs or x.id < self.since:
            return ()
        if p.op == "cat.default":   # (slices of parts: no work repeated, whoever reads x)
            d = p.attrs["dim"] % x.ndim
            if any(v.dtype != x.dtype for v in p.inputs):
                return ()
            return [r for r in rs if r.op == _SLICE and r.attrs["dim"] % x.ndim == d
                    and _bounds(r, x.shape[d])[2] == 1]
        if x in self.kept or get_op(p.op).kind != "elementwise" or p.op in _SHAPED:
            return ()
        if not all(r.op == _SLICE or (r.op == _SQUEEZE and x.shape[r.attrs["dim"] % x.ndim] == 1)
                   for r in rs):
            return ()
        # no more elements computed than before (overlapping slices would compute some twice)
        parts = {(r.op, tuple(r.attrs.items())): r.outputs[0].size for r in rs}
        return list(rs) if sum(parts.values()) <= x.size else ()

    def _push(self, x, readers):
        """Replace ``readers`` of ``x``; return the values read anew (to push next)."""
        p = self.producer[x]
        fresh = []
        made = {}   # (identical readers, as a loop's body has: one new value, made at
        #             the first one's place, before any of them is read)
        for s in sorted(readers, key=self.g.nodes.index):
            key = (s.op, tuple(s.attrs.items()))
            if key in made:
                self._replace(s, s.outputs[0], made[key], len(self.g.nodes))
                continue
            mark = len(self.g.nodes)
            self.g.site_override = s.site
            try:
                new = (self._cat_slice if p.op == "cat.default" else self._op_part)(p, s, fresh)
            finally:
                self.g.site_override = None
            old = s.outputs[0]
            assert new.shape == old.shape and new.dtype == old.dtype, (p.op, new, old)
            self._replace(s, old, new, mark)
            made[key] = new
            fresh.append(new)   # (a slice of a slice, or a squeeze of one, reads it)
        if not self.readers.get(x) and x not in self.kept:
            self.g.nodes.remove(p)
            for v in p.inputs:
                self.readers[v] = [r for r in self.readers[v] if r is not p]
        return fresh

    def _slice(self, v, s, dim, fresh):
        a = dict(s.attrs, dim=dim)
        if _bounds(s, v.shape[dim], dim) == (0, v.shape[dim], 1):
            return v
        out = apply(_SLICE, [Tracer(self.g, v)], a).value
        fresh.append(v)
        return out

    def _op_part(self, p, s, fresh):
        """Elementwise ``p`` on its operands' parts that reader ``s`` reads."""
        x = p.outputs[0]
        d = s.attrs["dim"] % x.ndim
        ins = []
        for v in p.inputs:
            e = d - (x.ndim - v.ndim)
            if e < 0 or (v.shape[e] == 1 and x.shape[d] != 1):
                ins.append(v)   # broadcast along the sliced dim: read whole
            elif s.op == _SQUEEZE:
                ins.append(apply(_SQUEEZE, [Tracer(self.g, v)], {"dim": e}).value)
                fresh.append(v)
            else:
                ins.append(self._slice(v, s, e, fresh))
        return apply(p.op, [Tracer(self.g, v) for v in ins], dict(p.attrs)).value

    def _cat_slice(self, p, s, fresh):
        x = p.outputs[0]
        d = p.attrs["dim"] % x.ndim
        lo, hi, _ = _bounds(s, x.shape[d])
        pieces, at = [], 0
        for v in p.inputs:
            w = v.shape[d]
            a, b = max(lo, at), min(hi, at + w)
            if a < b:
                pieces.append(v if (a, b) == (at, at + w) else apply(
                    _SLICE, [Tracer(self.g, v)],
                    {"dim": d, "start": a - at, "end": b - at, "step": 1}).value)
                if (a, b) != (at, at + w):
                    fresh.append(v)
            at += w
        if len(pieces) == 1:
            return pieces[0]
        if not pieces:   # an empty slice: an empty part of the first input's kind
            return apply(_SLICE, [Tracer(self.g, p.inputs[0])],
                         {"dim": d, "start": 0, "end": 0, "step": 1}).value
        return apply("cat.default", [Tracer(self.g, v) for v in pieces], {"dim": d}).value

    def _replace(self, s, old, new, mark):
        """Slice node ``s`` (making ``old``) gives way to the nodes made from ``mark`` on
        (making ``new``), at its place: everything they read is made before it."""
        g = self.g
        added = g.nodes[mark:]
        del g.nodes[mark:]
        at = g.nodes.index(s)
        g.nodes[at:at + 1] = added
        for n in added:
            self.producer.update({v: n for v in n.outputs})
            for v in n.inputs:
                self.readers.setdefault(v, []).append(n)
        for r in self.readers.pop(old, ()):
            r.inputs = [new if v is old else v for v in r.inputs]
            self.readers.setdefault(new, []).append(r)
        if old in self.kept:   # the slice itself is an output, a root or a running update
            g.outputs = [new if v is old else v for v in g.outputs]
            self.kept = {new if v is old else v for v in self.kept}
            g.running_updates = [(a, new if b is old else b, c) for a, b, c in g.running_updates]
        self.moved[old] = new
        src = s.inputs[0]
        self.readers[src] = [r for r in self.readers[src] if r is not s]


def _bounds(s, n, dim=None):
    a = s.attrs
    return slice(a["start"], a["end"], a["step"]).indices(n)
