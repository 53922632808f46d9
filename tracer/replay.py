"""Replaying a recorded step: tensor mode's next step, checked against the last one.

Contract
- A training loop records the same step again and again. After a step's
  backward ran on the fast path (runtime/fast_backward.py), its tape is
  started over with that step as its expectation (``Tape.exp``, a
  ``Replay``: per entry the op's name as the front end was called with it,
  its attributes' exact key, its ``_SEEN`` result (tracer/tensor.py) and
  the references of its inputs; the step's leaf types; its fast plan).
- While the next step matches it op by op (``match``: same op name and
  attributes, every input the Tensor at the same reference: output 0 of the
  entry at the same position on this tape, or the leaf in the same slot,
  a new leaf having the recorded type and requires_grad), a deferred op is
  recorded without building its part of the structural key, without the
  type lookup and without counting unread entries: all of it is the
  expectation's, because the inputs' types and the wiring are. Meanwhile
  the tape holds the matched nodes and their leaves themselves (``nodes``,
  ``leaves``), not weak references (tracer/tape.py). When the whole step
  matched and its root is the last entry, ``backward()`` takes the
  expectation's plan without building or comparing the key.
- An op that runs at once (not deferred: indexing by labels, say) is
  matched when its node is added to the tape (``added``: its key piece and
  inputs). An op that records nothing (no input requires grad: a metric
  between steps) and an optimizer's in-place updates (``Tape.flush``) leave
  the replay on.
- At the first difference (or anything that reads the tape's key, its
  unread count or adds an entry another way) ``resume`` rebuilds the key
  parts, the read flags and the unread count of the entries matched so far
  from the expectation, and the tape goes on as if it had recorded them
  itself. So a replayed step and a recorded one leave the same tape.
- Why: recording is most of a small step's time. W1 in tensor mode took
  18.7 us a step (about 2.3 us per recorded op); replayed, about 15.
"""
from __future__ import annotations

import weakref

from numpy import ndarray

from gradjit.tracer.gradfn import GradFn, _seq
from gradjit.tracer.tape import ADDED, PAUSE_AT, RESUME, _long, attrs_key, fn_key

SEEN_BY_PIECE = {}   # key piece -> (op name as called, attribute key or None, _SEEN result,
#                      the one attribute as (name, value) or None), filled by ``remember``
_MISSING = object()
Tensor = None        # set by tracer/tensor.py (imports run one way)
_NEW = object.__new__


class Replay:
    __slots__ = ("entries", "n", "parts", "offsets", "types", "plan", "epoch", "switches")

    def __init__(self, entries, parts, offsets, types, switches):
        self.entries, self.n = entries, len(entries)
        self.parts, self.offsets, self.types = parts, offsets, types
        self.switches = switches
        self.plan = None   # runtime/fast_backward.py's plan for this step, and the epoch
        self.epoch = None  # of its plans it was made in


def remember(op_name, attrs, hit):
    """tracer/tensor.py's ``_SEEN`` got ``hit`` for ``op_name`` called with ``attrs``."""
    SEEN_BY_PIECE[hit[3]] = (op_name, attrs_key(attrs) if attrs else None, hit,
                             next(iter(attrs.items())) if len(attrs) == 1 else None)


def build(tp, fns, switches):
    """The ``Replay`` of the step on tape ``tp`` (its nodes ``fns``, all alive), or None when
    a node was not recorded as a deferred op or its op's lookup is gone."""
    entries, offsets, parts, at = [], [], tp.parts, 0
    for fn in fns:
        offsets.append(at)
        n_in = len(fn.edges)
        refs = tuple(parts[at + 1:at + 1 + n_in])
        if any(type(r) is not int for r in refs):   # (an output other than 0 is read)
            return None
        if fn._vbox is not None:   # deferred (tracer/tensor.py): matched by the front end
            seen = SEEN_BY_PIECE.get(fn._key)
            if seen is None:
                return None
            entries.append((seen[0], seen[1], seen[2], refs, seen[3]))
        elif len(fn.out_types) == 1 and fn.ctx is None:   # run at once: matched when added
            entries.append((None, fn._key, None, refs, None))
        else:
            return None
        at += 1 + n_in
    offsets.append(at)
    return Replay(entries, tuple(parts), tuple(offsets), tuple(tp.types), switches)


def resume(tp):
    """Leave replay: the tape's key parts, read flags and unread count for the entries matched
    so far, as recording them would have made them."""
    ex = tp.exp
    tp.exp = None
    fns = tp.fns   # (empty while replaying)
    for i, f in enumerate(tp.nodes):
        fns.append(weakref.ref(f) if i != PAUSE_AT else tp.long_ref)
    tp.nodes.clear()
    tp.long_ref = None
    tp.leaves[:] = [weakref.ref(t) for t in tp.leaves]
    tp.types.extend(ex.types[:len(tp.leaves)])   # (each checked at its first use)
    n = len(fns)
    tp.parts.extend(ex.parts[:ex.offsets[n]])
    fed = [False] * n
    for entry in ex.entries[:n]:
        for r in entry[3]:
            if r < 0:
                fed[~r] = True
    tp.fed.extend(fed)
    tp.open = fed.count(False)


def match(tp, op_name, attrs, inputs):
    """Record ``op_name(*inputs, **attrs)`` as the expectation's next entry (its node is then
    ``tp.nodes[-1]``): the type token of its output when it matches, else None (the caller
    records it the usual way: ``_miss``). Leaves met for the first time are given their
    slots as the usual way would."""
    ex = tp.exp
    n = len(tp.nodes)
    if n >= ex.n:
        return _miss(tp, inputs, None)
    name, akey, hit, refs, one = ex.entries[n]
    if name is None:   # an entry recorded at once: matched when it is added (``added``)
        return None
    if (name is not op_name and name != op_name) or len(refs) != len(inputs):
        return _miss(tp, inputs, None)
    if akey is not None or attrs:   # exactly the attributes recorded (tape.attrs_key), or
        if not attrs or akey is None or (   # the very objects (a literal, a variable)
                (one is None or len(attrs) != 1 or attrs.get(one[0], _MISSING) is not one[1])
                and akey != attrs_key(attrs)):
            return _miss(tp, inputs, None)
    gen, nl = tp.gen, len(tp.leaves)
    edges, in_versions = [], []
    for t, r in zip(inputs, refs):
        if r < 0:   # output 0 of the entry at ~r: a Tensor that entry made on this tape
            try:    # (nothing else holds its node, and none is an inference tensor)
                src = t.grad_fn
                if src._tgen != gen or src._tpos != ~r:
                    src = None
            except AttributeError:   # not a Tensor, or a leaf (grad_fn None)
                src = None
            if src is None:
                return _miss(tp, inputs, nl)
            edges.append((src, 0))
            in_versions.append(None)
            continue
        v = _leaf(tp, ex, t, r, None)
        if v is None:
            return _miss(tp, inputs, nl)
        edges.append(t)
        in_versions.append(v)
    op, attrs, out_types, piece, ty = hit
    fn = _NEW(GradFn)
    fn.op, fn.attrs, fn.edges, fn.in_versions, fn.out_types, fn._key = (
        op.name, attrs, edges, in_versions, out_types, piece)
    fn.out_data, fn.seq, fn.freed = None, next(_seq), False
    fn._versions, fn._tgen, fn._tpos = None, gen, n
    tp.nodes.append(fn)   # (held until replay stops or the step is taken: all of them feed
    if n == PAUSE_AT:     # the last one, so the graph holds them anyway)
        tp.long_ref = _long(fn)
    return ty   # (the caller makes the node's Tensor, as for a node recorded the usual way)


def _miss(tp, inputs, nl):
    """The op is not the expected one. The leaves ``match`` gave slots to (beyond the first
    ``nl``) lose them again; then replay stops (``resume``), unless the op records nothing
    (no input requires grad: ``Tape.push`` would not take it), which leaves the tape as it
    was: a metric computed between steps does not end the replay. Returns None."""
    if nl is not None and len(tp.leaves) > nl:
        for t in tp.leaves[nl:]:
            del tp.slots[id(t)]
        del tp.leaves[nl:], tp.first[nl:]
    for t in inputs:
        if getattr(t, "_requires_grad", False):
            resume(tp)
            return None
    return None


def added(tp, fn):
    """Take ``fn``, a node recorded at once (tracer/tensor.py's ``_eager``), as the
    expectation's next entry: True when it is that entry, else False after ``resume``."""
    ex = tp.exp
    n = len(tp.nodes)
    if n < ex.n:
        name, piece, _, refs, _ = ex.entries[n]
        if name is None and (fn._key or fn_key(fn)) == piece and len(fn.edges) == len(refs):
            gen = tp.gen
            for e, r, v in zip(fn.edges, refs, fn.in_versions):
                if type(e) is tuple:
                    src = e[0]
                    if r >= 0 or e[1] or src._tgen != gen or src._tpos != ~r:
                        break
                elif r < 0 or _leaf(tp, ex, e, r, v) is None:
                    break
            else:
                fn._tgen, fn._tpos = gen, n
                tp.nodes.append(fn)
                if n == PAUSE_AT:
                    tp.long_ref = _long(fn)
                return True
    resume(tp)
    return False


def _leaf(tp, ex, t, r, v):
    """When ``t`` is the expectation's leaf of slot ``r``: its version (``v``, else its
    current one); else None. A leaf met for the first time gets its slot here, as the
    usual way would give it: its type and requires_grad must be the recorded ones."""
    if t.__class__ is not Tensor or t._inference or t.grad_fn is not None or (
            (d := t._data).__class__ is not ndarray):
        return None
    if v is None:
        v = t._box[0]
    slot = tp.slots.get(id(t))
    if slot is None:   # a leaf's first use: the recorded type, in the recorded order
        lt = ex.types[r]
        if (r != len(tp.leaves) or d.shape != lt[0] or t._requires_grad is not lt[2]
                or (d.dtype is not lt[1] and d.dtype != lt[1])):
            return None
        tp.slots[id(t)] = r
        tp.leaves.append(t)   # (weak references and types once replay stops: resume)
        tp.first.append(v)
        return v
    return v if slot == r else None


RESUME[0] = resume
ADDED[0] = added
