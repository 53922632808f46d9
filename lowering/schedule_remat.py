"""Recomputation: a cheap elementwise value is computed again where it is read, not stored.

Contract
- ``recompute(steps, graph, inline)`` (the CPU generator's schedule, after fusion
  groups, before row passes) looks at each value ``v`` a ``Loop`` ``L`` stores only
  for later loops to read. ``v`` is recomputed in each of those loops instead, and
  ``L`` no longer stores it, when all of this holds:
  - ``v`` has ``MIN_ELEMENTS`` or more (never 0-d: a scalar is a local, storing it
    costs nothing) and is not a graph output; no statement (matmul, view, kernel)
    reads it;
  - every reader is a later ``Loop`` over exactly ``v``'s shape, and so is ``L``;
  - ``v`` comes from a chain of at most ``MAX_CHAIN`` nodes of ``L``, all of them
    ``CHEAP`` arithmetic of that shape, whose other inputs (the leaves) stay
    arrays whatever this pass decides: graph inputs, statement results, reduction
    results, inline constants, and values stored for a reason this pass keeps (a
    statement or a loop of another shape reads them, they are outputs, 0-d, or
    leaves of a chain recomputed before);
  - fewer bytes move: the leaves a reader does not read already (their sizes) weigh
    less than ``v``'s store plus its reads (its size times one plus the readers).
- The readers get the chain's nodes (the same Node objects) before their first
  member that reads a chain value (chain nodes a reader computes already move up
  with them); ``L`` drops ``v`` from its stores, then every member no longer
  stored or read in ``L`` (a value kept only for the dropped store).
- Results are bitwise the same: the same operations in the same order and dtype.
- Why: the joint forward+backward graph of ``tanh`` layers stores ``1 - h*h`` in
  the forward loop for the backward loop that multiplies it, while ``h`` itself is
  stored anyway for the next matmul. Reading ``h`` there instead saves a write and
  a buffer per layer (W3: two 512 KB arrays per gradient).
"""
from __future__ import annotations

from gradjit.lowering.schedule import REDUCTIONS, Loop

MAX_CHAIN = 4
# Values smaller than this stay stored: their store is a few cache lines, while a loop
# that recomputes them is a different loop to compile (an unrolled RNN's first step would
# get a function of its own: W4 cold compile +0.1 s for nothing measurable at run time).
MIN_ELEMENTS = 1 << 12
CHEAP = frozenset((
    "add.Tensor", "add.Scalar", "sub.Tensor", "sub.Scalar", "rsub.Scalar", "mul.Tensor",
    "mul.Scalar", "neg.default", "abs.default", "relu.default", "expand.default",
    "maximum.default", "minimum.default", "clamp.default", "clamp_min.default",
    "clamp_max.default", "where.self", "sign.default", "eq.Scalar", "eq.Tensor", "ne.Scalar",
    "ne.Tensor", "lt.Scalar", "lt.Tensor", "le.Scalar", "le.Tensor", "gt.Scalar", "gt.Tensor",
    "ge.Scalar", "ge.Tensor"))


def _size(v):
    return v.size * v.dtype.itemsize   # bytes


def _reads(loop):
    """The values a loop reads as arrays or scalars (inputs that are not its members)."""
    return {v for n in loop.nodes for v in n.inputs if v not in loop.members}


def recompute(steps, graph, inline):
    outputs = set(graph.outputs)
    producer = {}   # member value -> (its Loop, its node)
    for st in steps:
        if isinstance(st, Loop):
            for n in st.nodes:
                if n.op not in REDUCTIONS:
                    for v in n.outputs:
                        producer[v] = (st, n)
    readers = {}    # value -> the other steps that read it
    for st in steps:
        reads = _reads(st) if isinstance(st, Loop) else set(st.node.inputs)
        for v in reads:
            readers.setdefault(v, []).append(st)
    position = {id(st): i for i, st in enumerate(steps)}

    pinned = set()  # leaves of recomputed chains: their stores stay

    def candidate(v):
        loop = producer.get(v, (None,))[0]
        return (loop is not None and v in loop.stores and v not in outputs and v.ndim > 0
                and v.size >= MIN_ELEMENTS and v not in pinned
                and v.shape == loop.shape and readers.get(v)
                and all(isinstance(r, Loop) and r.shape == v.shape
                        and position[id(r)] > position[id(loop)] for r in readers[v]))

    def stays(u):   # an array (or scalar) whatever this pass decides
        return (u in inline or u not in producer
                or (u in producer[u][0].stores and not candidate(u)))

    def chain(v, loop):
        """The nodes of ``loop`` that compute v from leaves that stay, in loop order, and
        the leaves; None if v is not cheap to recompute."""
        nodes, leaves, todo = set(), set(), [v]
        while todo:
            u = todo.pop()
            owner, n = producer.get(u, (None, None))
            if owner is loop and (u is v or u not in loop.stores or not stays(u)):
                if n.op not in CHEAP or u.shape != loop.shape or len(nodes) >= MAX_CHAIN:
                    return None
                if n not in nodes:
                    nodes.add(n)
                    todo.extend(n.inputs)
            elif stays(u):
                leaves.add(u)
            else:
                return None
        return [n for n in loop.nodes if n in nodes], leaves

    for v in [v for v in producer if candidate(v)]:
        loop = producer[v][0]
        found = chain(v, loop) if candidate(v) else None
        if found is None:
            continue
        nodes, leaves = found
        cost = sum(_size(u) for r in readers[v] for u in leaves
                   if u not in inline and u.ndim and u not in _reads(r))
        if cost >= _size(v) * (1 + len(readers[v])):
            continue
        made = {u for n in nodes for u in n.outputs}
        for r in readers.pop(v):
            # The chain goes before the first member reading any of its values. Chain
            # nodes r computes already (recomputed there for another value) move with it:
            # their inputs are leaves or chain values, so the earliest place is safe.
            r.nodes[:] = [n for n in r.nodes if n not in nodes]
            first = next(i for i, n in enumerate(r.nodes) if made.intersection(n.inputs))
            r.nodes[first:first] = nodes
            r.members.update(made)
            for u in leaves:
                if r not in readers.setdefault(u, []):
                    readers[u].append(r)
        pinned.update(leaves)
        loop.stores.remove(v)
        before = _reads(loop)
        _drop_dead(loop)
        for u in before - _reads(loop):   # values only the dropped members read
            readers[u].remove(loop)
    # A loop whose every value is now computed where it is read has nothing left to do.
    # (Row passes come after this pass: no loop carries one yet.)
    return [st for st in steps if not isinstance(st, Loop) or st.nodes]


def _drop_dead(loop):
    """Remove members whose values are neither stored nor read by a later member."""
    needed = set(loop.stores)
    keep = []
    for n in reversed(loop.nodes):
        if n.op in REDUCTIONS or any(v in needed for v in n.outputs):
            keep.append(n)
            needed.update(n.inputs)
    kept = set(map(id, keep))
    for n in loop.nodes:
        if id(n) not in kept:
            loop.members.difference_update(n.outputs)
    loop.nodes[:] = keep[::-1]
