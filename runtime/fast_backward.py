"""``loss.backward()`` of a training step, straight from the recording tape.

Contract
- ``fast_backward(root)`` handles the common case of tensor mode: a plain
  ``backward()`` (no gradient, inputs, retain_graph or create_graph) on a
  pending root (tracer/deferred.py) whose whole history is this thread's
  recording tape, with no hooks, ``retain_grad``, anomaly mode or stale
  leaf. Then backward is a key lookup and one call of
  the joint (forward + backward) plan that ``runtime/engine.py`` compiled for
  an earlier step of the same structure: no ``History``, no seed checks, no
  address tables. It gives exactly what the general path gives (the root's
  value, ``.grad`` accumulated on every leaf that requires grad, values of
  the step's tensors the caller still holds computed as recorded, the graph
  freed, the tape started over).
- Otherwise it changes nothing and returns the step's key (None when there
  is none) for the general path to ``register`` its joint plan under, so
  the next step of the same structure hits.
- The key is the tape's structural parts plus each leaf's shape, dtype and
  requires_grad, and the environment switches the general plan key holds.
- A small step that replays (tracer/replay.py) gets this function written out
  for it once its Replay is made (``_taker``: ``Replay.take``; generated
  source loaded through tracer/gensrc.py), and
  ``Tensor.backward`` calls that first: the same checks and results for the
  usual case (nothing of the step held but the root), one call deep.
"""
from __future__ import annotations

import os
from operator import attrgetter
from sys import getrefcount

import numpy as np

from gradjit.lowering.codegen_cpu_stmt import VIEW_OPS
from gradjit.runtime.compiler import STATS, Executable
from gradjit.runtime import tiers
from gradjit.runtime.memory import Bounded
from gradjit.tracer import gensrc, replay, tape
from gradjit.tracer.deferred import compute_pending
from gradjit.tracer.gradfn import kept
from gradjit.tracer.modes import _anomaly as _ANOMALY
from gradjit.tracer.tensor import accumulated, plain_tensor

_FAST = Bounded()   # (least recently used go: runtime/memory.py) key -> (Executable, feeds, direct arguments or None, _lead's or None,
#             ((target slot, shared, 0-d dtype or None), ...), the target slots when no
#             gradient needs a copy or a cast (else None), out shape, out dtype, [the
#             step's tracer/replay.Replay once made, False when it cannot be made])
_DATA = attrgetter("_data")

try:   # the environment switches, read without os.environ.get's per-call encoding (0.6 us)
    _RAW = os.environ._data
    _NAMES = tuple(os.environ.encodekey(n) for n in ("GRADJIT_EXECUTOR", "GRADJIT_FAST_MATH"))

    def _switches():
        return _RAW.get(_NAMES[0]), _RAW.get(_NAMES[1])
except AttributeError:   # another os.environ layout: the public way
    def _switches():
        return os.environ.get("GRADJIT_EXECUTOR"), os.environ.get("GRADJIT_FAST_MATH")


def _key(tp, root):
    """The fast key of ``root``'s step and the tape's leaves, or (None, None) when the tape
    does not hold exactly its history (the checks ``tape.take`` makes, without taking),
    a node on it has hooks or retain_grad, or a leaf has a hook or was written in place
    since its first use. A key is (tape parts, leaf types, switches): the types are the
    tape's, recorded at first use (a leaf whose data or requires_grad is replaced since
    breaks the tape). A list, not a tuple, so the one-entry memo in front of ``_FAST``
    compares it without a copy."""
    if tp.exp is not None:
        replay.resume(tp)   # (the key's parts and the unread count are needed)
    fn = root.grad_fn
    if tp.open != 1 and not tp.broken:
        tp.trim()   # dead side computations leave entries open (as tape.take)
    if (tp.broken or tp.open != 1 or fn is None or fn._tgen != tp.gen
            or fn._tpos != len(tp.fns) - 1 or root._index != 0 or tp.special):
        return None, None
    leaves = _leaves(tp)
    return (None, None) if leaves is None else ([tp.parts, tp.types, _switches()], leaves)


def _leaves(tp):
    """The tape's leaves, or None when one is gone, has a hook or was written in place since
    its first use (the general path raises)."""
    leaves = []   # (a loop, not a list comprehension and a loop: half the time)
    for r, v in zip(tp.leaves, tp.first):
        t = r()
        if t is None or t._hooks or t._box[0] != v:
            return None
        leaves.append(t)
    return leaves


def _lookup(k):
    """The plan registered for key ``k``: the last hit's when ``k`` equals its key (a
    training loop asks for one key again and again: comparing lists costs half of
    hashing them), else ``_FAST``'s."""
    last = _LAST[0]
    if last is not None and last[0] == k:
        return last[1]
    hit = _FAST.get(_frozen(k))
    if hit is not None:
        _LAST[0] = ([list(k[0]), list(k[1]), k[2]], hit)   # (the tape reuses its lists)
    return hit


def _frozen(k):
    return tuple(k[0]), tuple(k[1]), k[2]


_LAST = [None]   # [(key as lists, plan)] of the last fast hit
_EPOCH = [0]     # bumped by ``forget``: the tapes' expectations made before no longer hold


def forget():
    """Forget every plan: the next step of any structure takes the general path."""
    _FAST.clear()
    _LAST[0] = None
    _EPOCH[0] += 1


def register(k, plan, targets):
    """Remember the general path's joint plan for key ``k`` (``targets``: the leaf slots
    whose gradients the plan returns, in order)."""
    exe = getattr(plan.exe, "exe", None)   # a plan without host calls: one Executable
    if exe is not None:
        exe = tiers.settled(exe)
        if exe.__class__ is tiers.Tiered:   # still compiling: a later step registers it
            return
    if k is not None and exe is not None and not plan.slots:
        k = _frozen(k)
        outs = plan.bwd_graph.outputs
        shape, dtype = outs[0].shape, outs[0].dtype
        seed = np.ones(shape, dtype)   # read only by the compiled code: one per plan
        feeds = tuple((kind, seed if kind == "seed" else v) for kind, v in plan.feeds)
        direct = _direct(exe, feeds)
        # 0-d results come back from Numba as scalars: their dtype (else None) per output
        out_dt = exe.out_dtypes if direct is not None else (None,) * len(outs)
        targets = tuple(zip(targets, _shared(exe, outs)[1:], out_dt[1:]))
        plain = (tuple(slot for slot, _, _ in targets)
                 if not any(shared or dt is not None for _, shared, dt in targets) else None)
        _FAST[k] = (exe, feeds, direct, _lead(direct, len(k[1]), exe), targets, plain, shape,
                    dtype, [None])   # (the last: its Replay once made, False if none)


def _lead(direct, n_leaves, exe):
    """When the compiled function takes every leaf, in slot order, before its constants: the
    arguments after the leaves (a hit passes ``*map(_DATA, leaves), *lead``); else None."""
    if direct is None or [s for s, _ in direct[:n_leaves]] != list(range(n_leaves)) or any(
            s >= 0 for s, _ in direct[n_leaves:]):
        return None
    return tuple(v for _, v in direct[n_leaves:]) + (exe.consts,)


def _direct(exe, feeds):
    """The arguments of ``exe.fn`` as (leaf slot, None) or (-1, constant), constants made
    what the compiled code takes (0-d: a scalar), so a hit calls the compiled function
    without ``Executable.__call__``'s per-argument pass; None when a leaf is 0-d (the
    general call makes it a scalar)."""
    if type(exe) is not Executable:   # (a packed or interpreted plan: the general call)
        return None
    spec = []
    for (kind, v), scalar in zip(feeds, exe.scalar_in):
        if kind == "in":
            if scalar:
                return None
            spec.append((v, None))
        else:
            spec.append((-1, _scalar(v) if scalar else v))
    return tuple(spec)


def _scalar(v):
    """A 0-d constant as the compiled code takes it: a scalar; float64 as a Python float,
    which Numba's dispatcher types without a look-up (a NumPy scalar costs one)."""
    v = np.asarray(v)[()]
    return v.item() if v.dtype == np.float64 else v


def _shared(exe, outs):
    """Per output: may its array share memory with another output's? Those gradients are
    copied before they become a ``.grad``. Compiled code never returns the caller's
    arrays (lowering/codegen_cpu.py copies them), but one value returned twice, or a
    view, may share; the interpreter copies every result."""
    if not isinstance(exe, Executable):
        return [False] * len(outs)
    return [outs.count(v) > 1 or (v.node is not None and v.node.op in VIEW_OPS) for v in outs]


def fast_backward(root):
    """Run ``root.backward()`` on the fast path: True when done, else the key (or None) for
    the general path to register its plan under."""
    if _ANOMALY["enabled"]:
        return None
    tp = tape._local.tape or tape.current()
    ex, fn, leaves, args = tp.exp, root.grad_fn, None, None
    if (ex is not None and len(tp.nodes) == ex.n and fn._tgen == tp.gen and fn._tpos == ex.n - 1
            and not root._index and not tp.special and ex.epoch == _EPOCH[0]
            and _switches() == ex.switches):   # replayed whole (tracer/replay.py): its plan
        leaves, args = tp.leaves, []   # (Tensors while replaying; checked as in _leaves)
        for t, v in zip(leaves, tp.first):
            if t._hooks or t._box[0] != v:
                leaves = args = None
                break
            args.append(t._data)
        hit, nodes = ex.plan, tp.nodes
    if leaves is None:
        k, leaves = _key(tp, root)
        if k is None:
            return None
        hit = _lookup(k)
        if hit is None:
            return k
        ex = hit[8][0]
        nodes = [r() for r in tp.fns]
    # Which of the step's tensors does the caller still hold (GradFn.held, written out)?
    # The root, and usually no other: then only the root's node and nodes whose values
    # were computed on the way are freed; no one can reach the others (they die with the
    # root's node; a walk from the root stops at its freed node).
    live, spent = 0, []   # (all alive: every entry feeds the root's)
    for f in nodes:
        if f._vbox is not None and getrefcount(f._vbox) > 2:
            live += 1
        elif f.out_data is not None:
            spent.append(f)
    fns = None
    if live > 1:   # tensors of this step the caller holds get their recorded values
        fns = list(nodes)
        compute_pending([f for f in fns[:-1] if f.held()])
    if ex is None:   # the next step of this structure replays this one's record
        ex = hit[8][0] = replay.build(tp, nodes, k[2]) or False
        if ex:
            ex.plan, ex.epoch = hit, _EPOCH[0]
            ex.take = _taker(ex, hit)
    exe, feeds, direct, lead, targets, plain, shape, dtype, _ = hit
    tp.restart(ex or None)   # taken: the next step records afresh, expecting this one
    res = None
    try:   # scalars stay as Numba returns them: made arrays below
        if lead is not None:
            res = exe.fn(*(args if args is not None else map(_DATA, leaves)), *lead)
        elif direct is not None:
            res = exe.fn(*[leaves[s]._data if s >= 0 else v for s, v in direct], exe.consts)
    except (TypeError, IndexError):   # other layouts: Executable.__call__ coerces
        pass
    if res is None:
        res = exe([leaves[v]._data if kind == "in" else v for kind, v in feeds])
    value = res[0]
    if value.__class__ is not np.ndarray or value.dtype != dtype:
        value = np.array(value, dtype)   # (a 0-d result is a scalar; faster than asarray)
    root._data = value if value.shape == shape else value.reshape(shape)
    if fns is not None:   # (their Tensors read the values kept: GradFn.release)
        for f in fns:
            f.release()
    else:
        fn.out_data, fn.freed = None, True
        for f in spent:   # (an eager node's Tensor the caller holds keeps its value: kept)
            f.out_data, f.freed = kept(f.out_data), True
    i = 0
    if plain is not None:   # the usual case: each gradient as it comes
        for slot in plain:
            i += 1
            t = leaves[slot]
            t._grad = plain_tensor(res[i]) if t._grad is None else accumulated(t._grad, res[i])
    else:
        for slot, shared, dt in targets:
            i += 1
            g = res[i]
            if dt is not None:
                g = np.asarray(g, dt)
            elif shared:
                g = np.array(g)
            t = leaves[slot]
            t._grad = plain_tensor(g) if t._grad is None else accumulated(t._grad, g)
    STATS["memory_hits"] += 1
    STATS["fast_steps"] += 1
    return True


TAKE_MAX = 32    # entries and leaves: a longer step takes ``fast_backward``'s loops
_TAKERS = {}     # form -> factory of takers


def _taker(ex, hit):
    """``fast_backward`` written out for the Replay ``ex`` of plan ``hit``: a function
    ``(tape, root) -> True`` that takes a step which replayed ``ex`` whole, or returns
    None having changed nothing (the caller goes on as before). It takes the usual case
    only: no tensor of the step held but the root, the compiled function called directly
    (a plain Executable); else None. Why: a small step's backward is mostly these
    checks, and written out for its number of leaves, entries and gradients, with the
    plan's constants closed over, they cost much less (W1: about 1 us less a step)."""
    exe, feeds, _, _, targets, _, shape, dtype, _ = hit
    n, n_leaves = ex.n, len(ex.types)
    if type(exe) is not Executable or not n_leaves or n > TAKE_MAX or n_leaves > TAKE_MAX:
        return None
    spec, consts = [], [exe.consts]   # per argument: (leaf slot, 0-d) or (-1, const index)
    for (kind, v), scalar in zip(feeds, exe.scalar_in):
        if kind == "in":
            spec.append((v, scalar))
        else:
            consts.append(_scalar(v) if scalar else v)
            spec.append((-1, len(consts) - 1))
    form = (tuple(e[0] is None for e in ex.entries), n_leaves, tuple(spec),
            tuple((slot, shared, dt is not None) for slot, shared, dt in targets))
    if len(_TAKERS) >= 256:
        _TAKERS.clear()
    make = _TAKERS.get(form) or _take_factory(form)
    return make and make(ex, exe, feeds, consts, targets, shape, dtype)


def _take_factory(form):
    """Compile the factory of takers of ``form`` (see ``_taker``): the same checks as
    ``fast_backward``'s replay branch and held-node loop, then the same call, value,
    frees (the root's node and those whose values were computed on the way) and
    gradients."""
    at_once, n_leaves, spec, grads = form
    n = len(at_once)
    ls = [f"l{j}" for j in range(n_leaves)]
    ns = [f"n{j}" if j < n - 1 else "_" for j in range(n)]
    n_consts = 1 + sum(s < 0 for s, _ in spec)
    src = ["def make(EX, EXE, FEEDS, CONSTS, TARGETS, SHAPE, DTYPE):",
           "    FN = EXE.fn",
           f"    {''.join(f'C{j}, ' for j in range(n_consts))}= CONSTS",
           "    D = [t[2] for t in TARGETS]   # (casts of 0-d gradients)",
           "    def take(tp, root):",
           "        fn = root.grad_fn",
           f"        if (len(tp.nodes) != {n} or fn._tgen != tp.gen or fn._tpos != {n - 1}",
           "                or root._index or tp.special or EX.epoch != _EPOCH[0]",
           "                or _ANOMALY['enabled'] or _switches() != EX.switches):",
           "            return None",
           f"        {', '.join(ls)}, = tp.leaves",
           f"        {', '.join(f'f{j}' for j in range(n_leaves))}, = tp.first",
           "        if (" + "\n                or ".join(
               f"l{j}._hooks or l{j}._box[0] != f{j}" for j in range(n_leaves)) + "):",
           "            return None"]
    held = [f"getrefcount(n{j}._vbox) > 2" for j in range(n - 1) if not at_once[j]]
    if n > 1:
        src.append(f"        {', '.join(ns)}, = tp.nodes")
    if held:   # a tensor of the step held: fast_backward's loop computes its value
        src += ["        if (" + "\n                or ".join(held) + "):",
                "            return None"]
    args = ", ".join([f"C{c}" if s < 0 else f"l{s}._data[()]" if c else f"l{s}._data"
                      for s, c in spec] + ["C0"])
    src += ["        tp.restart(EX)",
            "        try:",
            f"            res = FN({args})",
            "        except (TypeError, IndexError):   # (other layouts: Executable.__call__)",
            f"            res = EXE([({', '.join(ls)},)[v]._data if kind == 'in' else v "
            "for kind, v in FEEDS])",
            "        value = res[0]",
            "        if value.__class__ is not ndarray or value.dtype != DTYPE:",
            "            value = array(value, DTYPE)",
            "        root._data = value if value.shape == SHAPE else value.reshape(SHAPE)",
            "        fn.out_data, fn.freed = None, True"]
    for j in range(n - 1):   # values computed on the way (run at once, or read) go, but
        # those of ops run at once whose Tensor the caller holds (GradFn's kept)
        src += [f"        if n{j}.out_data is not None:",
                f"            n{j}.out_data, n{j}.freed = "
                f"{'kept(n%d.out_data)' % j if at_once[j] else 'None'}, True"]
    for i, (slot, shared, cast) in enumerate(grads):
        src.append(f"        g = res[{i + 1}]")
        if cast:
            src.append(f"        g = asarray(g, D[{i}])")
        elif shared:
            src.append("        g = array(g)")
        src.append(f"        l{slot}._grad = plain_tensor(g) if l{slot}._grad is None else "
                   f"accumulated(l{slot}._grad, g)")
    src += ["        STATS['memory_hits'] += 1", "        STATS['fast_steps'] += 1",
            "        return True", "    return take"]
    scope = dict(_EPOCH=_EPOCH, _ANOMALY=_ANOMALY, _switches=_switches, getrefcount=getrefcount,
                 kept=kept,
                 ndarray=np.ndarray, array=np.array, asarray=np.asarray,
                 plain_tensor=plain_tensor, accumulated=accumulated, STATS=STATS)
    mod = gensrc.load("take", f'"""gradjit generated: the fast backward of {n}-entry steps'
                      f' of one form."""\n' + "\n".join(src) + "\n", scope)
    make = _TAKERS[form] = mod and mod.make
    return make
