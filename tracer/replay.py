"""Replaying a recorded step: tensor mode's next step, checked against the last one.

Contract
- A training loop records the same step again and again. After a step's
  backward ran on the fast path (runtime/fast_backward.py), its tape is
  started over with that step as its expectation (``Tape.exp``, a
  ``Replay``: per entry the op's name as the front end was called with it,
  its attributes' exact key, its ``SEEN`` entry (tracer/seen.py) and
  the references of its inputs; the step's leaf types; its fast plan).
- While the next step matches it op by op (``Replay.matchers[n]``, the
  matcher of entry ``n``: same op name and attributes, every input the
  Tensor at the same reference: output 0 of the entry at the same position
  on this tape, or the leaf in the same slot, a new leaf having the recorded
  type and requires_grad), a deferred op is recorded without building its
  part of the structural key, without the type lookup and without counting
  unread entries: all of it is the expectation's, because the inputs' types
  and the wiring are. The matcher returns the output's type token (None:
  not matched, record the usual way). Meanwhile the tape holds the matched
  nodes and their leaves themselves (``nodes``, ``leaves``), not weak
  references (tracer/tape.py). When the whole step matched and its root is
  the last entry, ``backward()`` takes the expectation's plan without
  building or comparing the key.
- Each matcher is written out for its entry (``_factory``: Python source
  per form, i.e. number of inputs, which of them are leaves and the
  attribute form, loaded once per form and process as a module through
  tracer/gensrc.py; the entry's constants are closed over). Why: the checks are a handful of comparisons
  per input, and one generic matcher's loop over inputs and attribute forms
  cost about as much again.
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
  18.7 us a step (about 2.3 us per recorded op); replayed, about 15 with one
  generic matcher; with written-out matchers 14.5, against 16.9 for the
  generic one in the same alternating runs.
"""
from __future__ import annotations

import weakref

from numpy import ndarray

from gradjit.tracer import gensrc
from gradjit.tracer.gradfn import GradFn, _seq
from gradjit.tracer.tape import ADDED, PAUSE_AT, RESUME, _long, attrs_key, fn_key

SEEN_BY_PIECE = {}   # key piece -> (op name as called, attribute key or None, SEEN entry,
#                      the one attribute as (name, value) or None), filled by ``remember``
_MISSING = object()
Tensor = None        # set by tracer/tensor.py (imports run one way)
_NEW = object.__new__


class Replay:
    __slots__ = ("entries", "n", "parts", "offsets", "types", "plan", "epoch", "switches",
                 "matchers", "take")

    def __init__(self, entries, parts, offsets, types, switches):
        self.entries, self.n = entries, len(entries)
        self.matchers = matchers(entries, types)   # [entry's matcher] + [one past the last]
        self.parts, self.offsets, self.types = parts, offsets, types
        self.switches = switches
        self.plan = None   # runtime/fast_backward.py's plan for this step, and the epoch
        self.epoch = None  # of its plans it was made in
        self.take = None   # runtime/fast_backward.py's backward written out for this step


def remember(op_name, attrs, hit):
    """tracer/seen.py's ``SEEN`` got ``hit`` for ``op_name`` called with ``attrs``."""
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
    ex = Replay(entries, tuple(parts), tuple(offsets), tuple(tp.types), switches)
    return ex if ex.matchers is not None else None


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


def matchers(entries, types):
    """Per entry of the expectation, its matcher ``(tp, op_name, attrs, inputs) -> type
    token or None`` (the module's contract), then one that refuses any op beyond the
    last; None when a form's source cannot be loaded. ``types``: the step's leaf types,
    by slot."""
    out = []
    for n, (name, akey, hit, refs, one) in enumerate(entries):
        if name is None:   # an entry recorded at once: matched when it is added (``added``)
            out.append(_at_once)
            continue
        form = (tuple(r >= 0 for r in refs), 0 if akey is None else 1 if one else 2,
                n == PAUSE_AT)
        make = _FACTORIES.get(form) or _factory(form)
        if make is None:   # (the generated source could not be written: no replay)
            return None
        out.append(make(name, akey, one, hit, refs, [types[r] if r >= 0 else None
                                                      for r in refs], n))
    out.append(_beyond)
    return out


def _at_once(tp, op_name, attrs, inputs):
    return None


def _beyond(tp, op_name, attrs, inputs):
    return _miss(tp, inputs, None)


_FACTORIES = {}   # form -> factory of matchers


def _factory(form):
    """Compile the factory of matchers of ``form`` (see ``matchers``). A matcher checks, in
    this order: the op name, the input count, the attributes (the very object recorded
    when there was one, else an equal ``attrs_key``), then each input (a node: made by
    the entry at the same position of this tape generation; a leaf: a plain CPU Tensor
    in the same slot, or its first use, in slot order, with the recorded shape, dtype
    and requires_grad). It then makes the node as ``Tape.push`` would (edges, versions,
    key piece), appends it to ``tp.nodes`` and returns the output's type token. On a
    difference it returns ``_miss``'s None, having given back the slots it took."""
    leaves, amode, pause = form
    k = len(leaves)
    ins = [f"i{j}" for j in range(k)]
    miss0 = "return _miss(tp, inputs, None)"
    miss = "return _miss(tp, inputs, nl)" if any(leaves) else miss0
    src = ["def make(NAME, AKEY, ONE, HIT, REFS, TYPES, N):",
           "    OP, ATTRS, OUT_TYPES, PIECE, TY = HIT",
           "    OPN = OP.name"]
    for j, leaf in enumerate(leaves):
        src.append(f"    R{j} = REFS[{j}]" if leaf else f"    P{j} = ~REFS[{j}]")
        if leaf:
            src.append(f"    S{j}, D{j}, G{j} = TYPES[{j}][:3]")
    if amode == 1:
        src.append("    K, V = ONE")
    src += ["    def match(tp, op_name, attrs, inputs):",
            "        if (op_name is not NAME and op_name != NAME) or len(inputs) != %d:" % k,
            "            " + miss0]
    if amode == 0:
        src += ["        if attrs:", "            " + miss0]
    elif amode == 1:   # the very object recorded (a literal, a variable), else an equal key
        src += ["        if (len(attrs) != 1 or attrs.get(K, _MISSING) is not V) and (",
                "                not attrs or AKEY != attrs_key(attrs)):", "            " + miss0]
    else:
        src += ["        if not attrs or AKEY != attrs_key(attrs):", "            " + miss0]
    src.append(f"        {', '.join(ins)}, = inputs")
    src.append("        gen = tp.gen")
    if any(leaves):
        src.append("        nl = len(tp.leaves)")
    for j, leaf in enumerate(leaves):
        t = ins[j]
        if not leaf:   # output 0 of the entry at P: a Tensor that entry made on this tape
            src += ["        try:",
                    f"            s{j} = {t}.grad_fn",
                    f"            if s{j}._tgen != gen or s{j}._tpos != P{j}:",
                    "                " + miss,
                    "        except AttributeError:",
                    "            " + miss]
            continue
        src += [f"        if ({t}.__class__ is not Tensor or {t}._inference",
                f"                or {t}.grad_fn is not None",
                f"                or (d := {t}._data).__class__ is not ndarray):",
                "            " + miss,
                f"        v{j} = {t}._box[0]",
                f"        slot = tp.slots.get(id({t}))",
                "        if slot is None:   # a leaf's first use: the recorded type, in order",
                f"            if (R{j} != len(tp.leaves) or d.shape != S{j} or {t}._requires_grad "
                f"is not G{j}",
                f"                    or (d.dtype is not D{j} and d.dtype != D{j})):",
                "                " + miss,
                f"            tp.slots[id({t})] = R{j}",
                f"            tp.leaves.append({t})",
                f"            tp.first.append(v{j})",
                f"        elif slot != R{j}:",
                "            " + miss]
    edges = ", ".join(ins[j] if leaf else f"(s{j}, 0)" for j, leaf in enumerate(leaves))
    vers = ", ".join(f"v{j}" if leaf else "None" for j, leaf in enumerate(leaves))
    src += ["        fn = _NEW(GradFn)",
            "        fn.op = OPN",   # (one statement a slot: tracer/tape.py's push)
            "        fn.attrs = ATTRS",
            f"        fn.edges = [{edges}]",
            f"        fn.in_versions = [{vers}]",
            "        fn.out_types = OUT_TYPES",
            "        fn._key = PIECE",
            "        fn.out_data = None",
            "        fn.seq = next(_seq)",
            "        fn.freed = False",
            "        fn._versions = None",
            "        fn._tgen = gen",
            "        fn._tpos = N",
            "        tp.nodes.append(fn)"]
    if pause:
        src.append("        tp.long_ref = _long(fn)")
    src += ["        return TY", "    return match"]
    scope = dict(_miss=_miss, _MISSING=_MISSING, attrs_key=attrs_key, Tensor=Tensor,
                 ndarray=ndarray, _NEW=_NEW, GradFn=GradFn, _seq=_seq, _long=_long)
    mod = gensrc.load("match", f'"""gradjit generated: replay matchers of form {form}."""\n'
                      + "\n".join(src) + "\n", scope)
    make = _FACTORIES[form] = mod and mod.make
    return make


def _miss(tp, inputs, nl):
    """The op is not the expected one. The leaves the matcher gave slots to (beyond the first
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
    """Take ``fn``, a node recorded at once (tracer/tensor_eager.py's ``_eager``), as the
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
