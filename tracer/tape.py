"""The recording tape: the forward's structural key, built while the forward is recorded.

Contract
- The eager front end ``add``s every GradFn it records on the CPU (with a
  differentiable output) to this thread's tape: ``parts`` gets its key piece
  (``fn_key``: op, attributes, output types, number of inputs) and then one
  ``ref`` per input: a leaf slot (numbered by first use) for a leaf or constant
  Tensor, ``~position`` for output 0 of a node on this tape, ``(position,
  output index)`` for another output. ``parts`` is flat (no tuple per entry:
  it is rebuilt every step, and the piece fixes how many refs follow). That is
  exactly the numbering ``tracer.record.History`` gives a graph whose nodes
  are the tape's entries, and the key it builds. ``first`` and ``types`` hold
  each leaf's version, and (shape, dtype, requires_grad), at its first use;
  ``forget`` breaks the tape when a leaf's data or requires_grad is replaced
  after that, and ``special`` is set when a node on it gets a hook or
  ``retain_grad``, from any thread (runtime/fast_backward.py reads both
  instead of checking every leaf and node).
- ``take(roots)`` starts the tape over and returns what it recorded
  (``Taken``) when that is exactly the history of the single root: the root's
  node is the last entry and every other entry feeds a later one (so, by
  induction from the end, every entry is reachable from the root and, being
  reachable, alive). Otherwise it returns None and the caller walks the graph.
  So ``backward()`` on the usual training step costs a lookup of the key built
  here, not a walk of the graph.
- Whatever the tape cannot describe breaks it until the next take: an input
  made by a node from before the last take or by a node not on the tape
  (custom Functions, device copies), or more than ``LIMIT`` entries (after
  ``trim`` dropped the entries no live node can reach).
- The tape holds weak references only: it never keeps a graph or a leaf alive;
  but while it replays the last step (tracer/replay.py) it holds the nodes that
  matched (``nodes``) and their leaves (``leaves``: Tensors then) until the
  step is taken or replay stops (at the first difference, or the next step's
  first recorded op): every one of them feeds the last node, so the graph
  holds them anyway until then, and an abandoned step is kept until the next
  recorded op.
- Deferred nodes (tracer/deferred.py) are made here (``push``: node and entry
  in one pass over the inputs, read as Tensors) and stay pending only while
  they are on the current tape: ``add`` returns False when it did not take a
  node, ``push`` None, and
  ``flush`` (also run when entries are dropped) computes every pending one.
- A long step (``PAUSE_AT`` entries or more) raises the cyclic garbage
  collector's first threshold to ``PAUSED_THRESHOLD`` allocations until its
  objects are gone (the node of its entry ``PAUSE_AT`` dies: after its
  backward, once the caller drops the loss, or when it is given up), or the tape
  breaks (``clear``). Why: a step's nodes and tensors live until then, so each
  young collection meanwhile walks all of them and promotes them towards the
  oldest generation, whose full collections walk every object of the process:
  an unrolled RNN step (500 ops) spent most of its time collecting (W4 in
  tensor mode, mean step: 4.4-6.7 ms before, 1.9-2.0 ms now; 7.8-10.1 ms and
  2.0-2.6 ms with torch and JAX imported). The tape's objects hold no
  reference cycles (their counts free them). A raised threshold rather than
  ``gc.disable`` keeps collecting (less often) should a step stay alive for good;
  in a training loop that holds each loss until the next one is made, it stays
  raised for the loop. The caller's thresholds come back unless changed
  meanwhile. The collector is the process's: the latest long step of any
  thread holds the raise.
"""
from __future__ import annotations

import gc
import itertools
import threading
import weakref

import numpy as np

from gradjit.tracer.gradfn import GradFn, _seq
from gradjit.tracer.ir import _key_attr

LIMIT = 200_000
TRIM_MIN = 4096   # entries before the first look for dead ones (``Tape.trim``)
_gens = itertools.count(1)   # generation numbers, unique across threads


class _Local(threading.local):
    def __init__(self):   # (a missing thread-local attribute costs an exception to read)
        self.tape = None


_local = _Local()
_NEW = object.__new__
FLUSH = []   # [compute_pending(fns)], set by tracer/deferred.py (imports run one way)
RESUME = [None]   # [replay.resume(tape)], set by tracer/replay.py: leave replay
ADDED = [None]    # [replay.added(tape, fn)], set by tracer/replay.py: a node recorded at once


PAUSE_AT = 64                # entries: a step this long has its collections paused
PAUSED_THRESHOLD = 100_000   # young-generation threshold meanwhile (the default is 700)
_PAUSED = [None, None]   # [weak ref to the latest long step's entry PAUSE_AT node, the
#                          thresholds it replaced] while raised, else [None, None]


def _long(fn):
    """The tape's weak reference to entry ``PAUSE_AT``'s node: the threshold is raised
    until that node (the latest long step's) dies."""
    ref = weakref.ref(fn, _step_gone)
    if _PAUSED[1] is None:
        old = gc.get_threshold()
        if not 0 < old[0] < PAUSED_THRESHOLD:
            return ref   # the caller's setting already collects this rarely, or never
        gc.set_threshold(PAUSED_THRESHOLD, *old[1:])
        _PAUSED[1] = old
    _PAUSED[0] = ref
    return ref


def _step_gone(ref):
    if _PAUSED[0] is ref:
        resume()


def resume():
    """The caller's thresholds again, if a long step raised them."""
    old, _PAUSED[0], _PAUSED[1] = _PAUSED[1], None, None
    if old is not None and gc.get_threshold()[0] == PAUSED_THRESHOLD:
        gc.set_threshold(*old)


_PIECES = {}
_piece_ids = itertools.count(1)


def key_of(op, attrs, out_types, n_in):
    """A node's piece of the structural key: a positive int standing for (op, attributes
    (exact), output types, number of inputs), interned in this process so that keys of
    long histories hash and compare as ints. Ids are never reused, so dropping the table
    (it is bounded) cannot make an old key match a new piece."""
    k = (op, tuple((a, _key_attr(v)) for a, v in attrs.items()),
         tuple((s, d.str) for s, d in out_types), n_in)
    i = _PIECES.get(k)
    if i is None:
        if len(_PIECES) >= 65536:   # (attributes that change every step, e.g. x * lr)
            _PIECES.clear()
        i = _PIECES[k] = next(_piece_ids)
    return i


def ref_of(pos, index):
    """The key's reference to output ``index`` of the node at ``pos`` (a leaf's is its
    slot, an int >= 0): output 0, the usual one, as a negative int (no tuple to make)."""
    return ~pos if index == 0 else (pos, index)


def attrs_key(attrs):
    """Attributes as exact parts of the eager front end's lookup key (tracer/tensor.py):
    with their types (1 == 1.0 == True, yet dtypes differ) and floats by their bits
    (-0.0 == 0.0, yet the results' signs differ)."""
    out = []
    for k, v in attrs.items():
        t = type(v)
        if t is float:
            v = v.hex()
        elif t is tuple:
            v = tuple((type(e), e.hex() if type(e) is float else e) for e in v)
        out += (k, t, v)
    return out


def fn_key(fn):
    """A recorded node's piece of the structural key (cached on the node)."""
    k = fn._key
    if k is None:
        k = fn._key = key_of(fn.op, fn.attrs, fn.out_types, len(fn.edges))
    return k


class Tape:
    __slots__ = ("gen", "fns", "parts", "fed", "open", "slots", "leaves", "first", "types",
                 "broken", "special", "trim_at", "held", "exp", "nodes", "long_ref",
                 "handed", "__weakref__")

    def __init__(self):
        self.gen = next(_gens)
        self.fns, self.parts, self.fed = [], [], []
        self.open = 0            # entries no later entry reads
        self.slots, self.leaves = {}, []   # id(leaf) -> slot; weak refs by slot
        self.held = []           # the last step's leaves (restart)
        self.first = []          # by slot: the leaf's version at its first use (versions
        #                          only grow: every use saw the current one iff the first did)
        self.types = []          # by slot: (shape, dtype, requires_grad) at its first use
        self.broken = False
        self.special = False     # a node here has hooks or retain_grad (mark_special)
        self.trim_at = TRIM_MIN
        self.exp = None          # the step expected next (tracer/replay.py), while it matches,
        self.nodes = []          # and the nodes that matched it (strong references, until it
        self.long_ref = None     # stops: replay.resume), entry PAUSE_AT's _long reference
        self.handed = []         # (array, its copy): memory handed out while entries wait
        with _TAPES_LOCK:   # (two threads making tapes at once must both be listed)
            _TAPES[:] = [r for r in _TAPES if r() is not None] + [weakref.ref(self)]

    def restart(self, exp=None):
        """Start over as a new tape would (a new generation, nothing recorded), reusing
        this one's lists: the fast backward path (runtime/fast_backward.py) takes the
        tape after every step, and a new Tape is nine objects to make and free. ``exp``:
        the step expected next (tracer/replay.py), or None."""
        self.gen = next(_gens)
        self.slots.clear()
        self.first.clear()
        if self.exp is not None:   # replayed (tracer/replay.py): the key's lists stayed
            self.leaves = []       # empty, the leaves are Tensors (the list is the
            self.nodes.clear()     # caller's now), and nothing broke it
            self.long_ref = None
        else:
            self.fns.clear()   # (written out: a loop over them costs half as much again)
            self.parts.clear()
            self.fed.clear()
            self.types.clear()
            # the leaves' weak references stay alive one more step: a step that uses the
            # same leaves again gets them back from weakref.ref instead of new ones
            self.leaves, self.held = self.held, self.leaves
            self.leaves.clear()
            self.open = 0
            self.broken = False
            self.trim_at = TRIM_MIN
        self.special = False
        self.exp = exp
        if self.handed:
            self.handed = []

    def add(self, fn):
        """Record ``fn``; False when the tape is (or just got) broken and did not take it."""
        if self.exp is not None and ADDED[0](self, fn):   # the replayed step's next entry
            return True
        n = self._room()
        if n is None:
            return False
        for e in fn.edges:
            if type(e) is tuple and e[0]._tgen != self.gen:
                return self.clear()
        self._enter(fn, n)
        self.fns.append(weakref.ref(fn) if n != PAUSE_AT else _long(fn))
        return True

    def push(self, op, attrs, inputs, out_types, piece):
        """Record a deferred node (tracer/deferred.py) of ``op`` on the Tensors ``inputs``:
        its ``GradFn`` is built from the same pass over the inputs that wires its entry
        (the hot path of a tensor-mode step, written out flat: every call saved here is
        saved on every op of every step; ``add`` takes a node already built). Returns
        the GradFn (its ``site``, ``_vbox`` and ``_out`` are the caller's to set), or
        None when there is nothing to defer: no input requires grad, an input is an
        inference tensor, or the tape is (or, meeting an input it cannot describe, gets)
        broken."""
        if self.broken:
            return None
        record = False   # (checked first: the pass below changes the tape)
        for t in inputs:
            if t._inference:   # the eager path raises torch's error
                return None
            if t._requires_grad:   # (a recorded input always does)
                record = True
        if not record:
            return None   # (nor does a replay stop for it: tracer/replay.py's _miss)
        if self.exp is not None:
            RESUME[0](self)
        n = len(self.fns)
        if n >= self.trim_at or n >= LIMIT:
            n = self._room()
            if n is None:
                return None
        edges, in_versions = [], []
        gen, fed, parts = self.gen, self.fed, self.parts
        parts.append(piece)
        for t in inputs:
            src = t.grad_fn
            if src is None:
                v = t._box[0]
                edges.append(t)
                in_versions.append(v)
                slot = self.slots.get(id(t))
                if slot is None:
                    slot = self._leaf(t, v)
                parts.append(slot)
            elif src._tgen != gen:
                self.clear()
                return None
            else:
                i, p = t._index, src._tpos
                edges.append((src, i))
                in_versions.append(None)
                parts.append(~p if i == 0 else (p, i))   # (ref_of, inline)
                if not fed[p]:
                    fed[p] = True
                    self.open -= 1
        fn = _NEW(GradFn)
        fn.op = op   # (one statement a slot: a tuple to unpack costs a sixth more)
        fn.attrs = attrs
        fn.edges = edges
        fn.in_versions = in_versions
        fn.out_types = out_types
        fn._key = piece
        fn.out_data = None
        fn.seq = next(_seq)
        fn.freed = False
        fn._versions = None
        fn._tgen = gen
        fn._tpos = n   # (hooks ...: GradFn's defaults)
        self.fns.append(weakref.ref(fn) if n != PAUSE_AT else _long(fn))
        fed.append(False)
        self.open += 1
        return fn

    def _leaf(self, t, version):
        """A new slot for leaf (or constant) ``t``, first used at ``version``."""
        slot = self.slots[id(t)] = len(self.leaves)
        self.leaves.append(weakref.ref(t))
        self.first.append(version)
        d = t._data
        self.types.append((d.shape, d.dtype, t._requires_grad))
        return slot

    def _room(self):
        """The next entry's position; None when the tape is broken or, even trimmed, full
        (it then breaks)."""
        if self.broken:
            return None
        n = len(self.fns)
        if n >= self.trim_at:
            n = self.trim()
        if n >= LIMIT:
            self.clear()
            return None
        return n

    def _enter(self, fn, n):
        """Append ``fn``'s part of the key (its inputs: made on this tape, or leaves) as
        entry ``n``; the caller appends its weak reference to ``fns``."""
        fed, parts = self.fed, self.parts
        parts.append(fn._key or fn_key(fn))
        for e, v in zip(fn.edges, fn.in_versions):
            if type(e) is tuple:
                p = e[0]._tpos
                parts.append(ref_of(p, e[1]))
                if not fed[p]:
                    fed[p] = True
                    self.open -= 1
                continue
            slot = self.slots.get(id(e))
            if slot is None:
                slot = self._leaf(e, e._box[0] if v is None else v)
            parts.append(slot)
        fed.append(False)
        self.open += 1
        fn._tgen, fn._tpos = self.gen, n

    def trim(self):
        """Drop the entries whose node is dead (a live node holds its inputs, so no live
        entry reads them) and renumber the rest in order, leaf slots by first use, as if
        only they had been recorded. A forward that is never taken (an evaluation loop
        without no_grad) so keeps the tape at the size of what is alive instead of
        growing it until it breaks. Run when the tape reaches ``trim_at``, which then
        doubles past what stays: linear time overall. Returns the new length."""
        if self.exp is not None:
            RESUME[0](self)
        n = len(self.fns)
        alive = [(r, f) for r, f in ((r, r()) for r in self.fns) if f is not None]
        if len(alive) < n:
            self.fns, self.parts, self.fed = [], [], []
            self.slots, self.leaves, self.first, self.types = {}, [], [], []
            self.open = 0
            for q, (r, f) in enumerate(alive):   # (inputs first: they are older)
                self._enter(f, q)
                self.fns.append(r)   # (kept: entry PAUSE_AT's may be _long's)
        self.trim_at = max(TRIM_MIN, 2 * len(alive))
        return len(alive)

    def pending(self):
        """Whether deferred nodes may wait here (recorded, or matched while replaying)."""
        return bool(self.fns) or (self.exp is not None and bool(self.nodes))

    def clear(self):
        """Broken until the next take; drop what was recorded (computing its deferred
        nodes first: a pending node must always be on the current tape). Returns False."""
        if self.exp is not None:
            RESUME[0](self)
        self.broken = True
        resume()
        self.flush()
        self.fns, self.parts, self.fed, self.slots, self.leaves = [], [], [], {}, []
        self.first, self.types, self.handed = [], [], []
        return False

    def written(self):
        """Whether memory handed out while entries were recorded (``handing_out``) was
        written since: then the joint plan, which computes the forward again from the
        arrays, must not run (``check_handed``)."""
        return any(not np.array_equal(a, copy, equal_nan=a.dtype.kind in "fc")
                   for a, copy in self.handed)

    def flush(self):
        """Compute every deferred node recorded here (tracer/deferred.py)."""
        if self.exp is not None:   # replaying: its nodes (an optimizer's in-place updates
            if self.nodes and FLUSH:   # between steps find none, and the replay goes on)
                FLUSH[0](list(self.nodes))
            return
        if self.fns and FLUSH:
            FLUSH[0]([r() for r in self.fns])


class Taken:
    __slots__ = ("fns", "leaves", "parts", "first")

    def __init__(self, fns, leaves, parts, first):
        self.fns, self.leaves, self.parts, self.first = fns, leaves, parts, first


def current():
    tape = _local.tape
    if tape is None:
        tape = _local.tape = Tape()
    return tape


_TAPES = []   # weak references to every tape alive, of any thread (tapes are made rarely:
#              see restart; a list, not a WeakSet: forget runs on every ``t.data = ...``)
_TAPES_LOCK = threading.Lock()


def forget(t):
    """``t``'s data or requires_grad is being replaced: a tape that has it as a leaf
    recorded its type at first use, which no longer holds: it breaks (the general
    backward path walks the graph)."""
    for r in _TAPES:
        tp = r()
        if tp is not None and id(t) in tp.slots and not tp.broken:
            tp.clear()


def mark_special(fn):
    """``fn`` got a hook or ``retain_grad``: the tape it is on, if any, is special."""
    if fn._tgen:
        for r in _TAPES:
            tp = r()
            if tp is not None and tp.gen == fn._tgen:
                tp.special = True


def flush():
    """Compute the deferred nodes on this thread's tape (before an in-place write)."""
    tape = _local.tape
    if tape is not None:
        tape.flush()


def handing_out(array):
    """The user's code gets a tensor's own ``array`` (``.data``, ``.numpy()``,
    ``np.asarray``) while entries are recorded on this thread's tape: it may write into it
    (``c.data[:] = ...``). Deferred values are computed now, from what the arrays hold
    now (torch's forward ran before the write), and a copy of ``array`` is kept: if it
    was written when the step's backward starts (``check_handed``), the tape breaks and
    the backward starts from the computed values, where the joint plan would compute them
    again from the written arrays. Reading (``W.data`` for a metric) keeps the fast path."""
    tape = _local.tape
    if tape is not None and tape.pending():
        tape.flush()
        if isinstance(array, np.ndarray):
            tape.handed.append((array, array.copy()))


def check_handed(tape):
    """Before a backward takes ``tape``: break it if handed-out memory was written."""
    if tape.handed and tape.written():
        tape.clear()


def take(roots):
    tape = current()
    _local.tape = Tape()
    taken = _taken(tape, roots)
    tape.handed = []   # (checked: its copies would only keep the arrays alive, GradFn.kept)
    return taken


def peek(roots):
    """What ``take(roots)`` would return, leaving the tape in place (``gj.explain`` shows
    the plan a backward() would run without changing which one it runs)."""
    return _taken(current(), roots, flush=False)


def _taken(tape, roots, flush=True):
    check_handed(tape)
    if tape.exp is not None:
        RESUME[0](tape)
    if tape.open != 1 and not tape.broken:
        tape.trim()   # dead side computations (an evaluation forward) leave entries open
    if tape.broken or tape.open != 1 or len(roots) != 1:
        if flush:
            tape.flush()   # entries the new tape does not know: none may stay pending
        return None
    fn = roots[0].grad_fn
    if fn is None or fn._tgen != tape.gen or fn._tpos != len(tape.fns) - 1:
        if flush:
            tape.flush()
        return None
    fns = [r() for r in tape.fns]
    leaves = [r() for r in tape.leaves]
    if any(f is None for f in fns) or any(t is None for t in leaves):
        if flush:
            tape.flush()
        return None   # cannot happen when the entries are all reachable; stay safe
    return Taken(fns, leaves, tape.parts, tape.first)
