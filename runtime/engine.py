"""Tensor-mode backward engine: ``backward`` and ``grad`` over recorded history.

Contract
- The recorded history reachable from the outputs becomes a forward Graph
  (``tracer.record``); its structural key, plus the positions of the values
  asked for, the seed types, hook/retain positions and custom-Function
  fingerprints, selects a *plan* from an in-memory table. A miss runs the
  adjoint, cuts out the backward nodes (the forward already ran eagerly),
  optimises and compiles them; a hit only gathers the arrays the compiled
  backward reads and calls it. So a given graph structure compiles once per
  process (and once per machine, via the disk cache).
- What a traced custom-Function backward read from outside ctx and its
  arguments (globals, closure cells, class attributes, tensors) was baked into
  the plan: the plan carries a ``runtime/guards.py`` Guard of those backwards
  (None when they read nothing that can change), checked on each hit; when a
  value changed the plan is built again (as a transform traces again).
- Hooks on non-leaf tensors and opaque custom-Function backwards are
  ``host_call`` nodes (``runtime/segments.py``); each call supplies that
  step's own callables. Hooks on leaves run on the final gradient.
- ``create_graph=True`` replays the backward graph through Tensor ops, so
  the gradients carry history and can be differentiated again, to any order.
- ``is_grads_batched=True`` runs one compiled backward over the batch of
  seeds (``runtime/batched.py``).
- Semantics and messages follow ``torch.autograd``.
"""
from __future__ import annotations

import logging
import os

import numpy as np

from gradjit.lowering.adjoint import adjoint
from gradjit.lowering.passes import dce, extract, optimize, prune_inputs
from gradjit.runtime.anomaly import check_node, checked_run
from gradjit.runtime.compiler import STATS
from gradjit.runtime.memory import Bounded
from gradjit.runtime.cuda import compile_graph_cuda
from gradjit.runtime.fast_backward import register
from gradjit.runtime.function import custom_rule, once_differentiable_rule
from gradjit.runtime.guards import RETRACE_WARN, guards_for
from gradjit.runtime.segments import compile_segmented, host_call, replay
from gradjit.tracer.modes import is_anomaly_check_nan_enabled, is_anomaly_enabled
from gradjit.tracer.record import History, _cut, address, value_at
from gradjit.tracer.device import is_device_array
from gradjit.tracer.gradfn import FREED
from gradjit.tracer.registry import OPS
from gradjit.tracer.tensor import Tensor, compute_pending

_PLANS = Bounded()   # history key -> Plan (runtime/memory.py: least recently used go)
_LOG = logging.getLogger("gradjit")
_REBUILT = {}   # traced backwards' names -> plans built again for outside values that changed


class Plan:
    __slots__ = ("exe", "feeds", "targets", "slots", "bwd_graph", "batched", "guard", "guarded",
                 "replay", "readers")

    def __init__(self, guard=None, guarded=(), replay=None, readers=None, **kw):
        self.guard, self.guarded, self.replay = guard, guarded, replay
        self.readers = readers or {}
        for k, v in kw.items():
            setattr(self, k, v)


def _holds(plan):
    """Whether what the plan's traced custom backwards read from outside is unchanged;
    when not, it is logged (louder after ``RETRACE_WARN`` times) and counted."""
    if plan.guard is None or plan.guard.holds():
        return True
    n = _REBUILT[plan.guarded] = _REBUILT.get(plan.guarded, 0) + 1
    (_LOG.warning if n == RETRACE_WARN else _LOG.info)(
        "backward: %r, read from outside by %s, changed since it was traced: traced "
        "again%s", plan.guard.changed(), " and ".join(plan.guarded),
        f" ({n} times; keep values that change on ctx)" if n >= RETRACE_WARN else "")
    STATS["guard_retraces"] += 1
    return False


def build_plan(hist, seed_types, targets, batched=False, device="cpu"):
    """Adjoint + cut + optimise + compile for the history's structure. ``targets`` are
    addresses (see ``tracer.record``); the plan's feeds are addresses too."""
    g = hist.graph()
    n_forward = len(g.nodes)
    seeds = [g.add_input(s, d) for s, d in seed_types]
    slots, traced = [], []
    hooked = {value_at(g, ("node", j, k)) for j, fn in enumerate(hist.order)
              for k, hs in (fn.hooks or {}).items() if hs}

    def on_grad(v, cot):
        if v not in hooked:
            return cot
        slots.append(("hook", address(g, v)))
        return host_call(g, [cot], [(v.shape, v.dtype)], len(slots) - 1)[0]

    rules = {"custom_function": custom_rule(hist, slots, traced),
             "once_differentiable": once_differentiable_rule}
    grads = adjoint(g, g.outputs, seeds, [value_at(g, a) for a in targets], rules, on_grad)
    outs = [x for x in grads if x is not None]
    raw, feeds = extract(g, g.nodes[n_forward:], outs)
    readers = _readers(raw, g, seeds, feeds)
    bwd = optimize(raw)
    before = list(bwd.inputs)  # optimize may append constants (decompositions)
    spec = [("const", bwd.constants[before[i]]) if i >= len(feeds) else _feed(g, seeds, feeds[i])
            for i in prune_inputs(bwd)]
    if device == "cuda":
        if batched or slots:
            raise NotImplementedError("CUDA backward: hooks on non-leaf tensors, opaque custom "
                                      "Function backwards and is_grads_batched run on the CPU "
                                      "only (the CUDA target has no host calls yet)")
        exe = compile_graph_cuda(bwd)
    elif batched:
        from gradjit.runtime.batched import compile_batched
        exe = compile_batched(bwd, [i for i, s in enumerate(spec) if s[0] == "seed"])
    else:
        exe = compile_segmented(bwd)
    # (the constants are fed at each call: read live, as a transform's constants)
    guard = guards_for(traced[0], traced[1:], [s[1] for s in spec if s[0] == "const"]) \
        if traced else None
    return Plan(exe=exe, feeds=spec, targets=[x is not None for x in grads], slots=slots,
                bwd_graph=bwd, batched=batched, guard=guard,
                guarded=tuple(sorted({f.__qualname__ for f in traced})),
                replay=_replay_graph(raw, g, seeds, feeds), readers=readers)


def _feed(g, seeds, v):
    """The plan's feed spec of forward value ``v``: a seed, a constant, or an address."""
    if v in seeds:
        return ("seed", seeds.index(v))
    if v in g.constants:  # made by a formula (e.g. the 0 of a where)
        return ("const", g.constants[v])
    return address(g, v)


def _readers(raw, g, seeds, feeds):
    """address -> positions of the forward ops whose backward formulas read the value
    there (their saved values, in torch's terms): a backward node carries the position
    of the op it was made for (``Site.pos``); -1 for a reader that names none."""
    out = {}
    fed = dict(zip(raw.inputs, feeds))
    for n in raw.nodes:
        pos = getattr(n.site, "pos", None)
        for v in n.inputs:
            if v in fed:
                out.setdefault(v, set()).add(-1 if pos is None else pos)
    for v in raw.outputs:   # (a gradient that is a forward value itself)
        if v in fed:
            out.setdefault(v, set()).add(-1)
    by_addr = {}
    for v, ps in out.items():
        a = _feed(g, seeds, fed[v])
        if a[0] not in ("seed", "const"):
            by_addr[a] = frozenset(ps)
    return by_addr


def _replay_graph(raw, g, seeds, feeds):
    """(graph, feed spec) that ``create_graph`` replays when a traced backward applied a
    custom Function or has a composite op (``elu_backward``, ``_softmax`` ...): the
    unoptimised backward, where that Function or op is still a node (optimize decomposes
    them into their parts, whose derivatives can differ from the op's formula: elu's at 0),
    a Function with only its tensor arguments as inputs (replay applies it again: its
    inlined forward is dead). None when there is none (the optimised graph is replayed)."""
    found = [n for n in raw.nodes if n.op == "custom_function"]
    if not found and not any(n.op in OPS and OPS[n.op].kind == "composite" for n in raw.nodes):
        return None   # (a composite op, e.g. elu_backward, keeps its node: its own formula)
    for n in found:
        n.inputs = n.inputs[:n.attrs["n_in"]]
    dce(raw)
    return raw, [_feed(g, seeds, feeds[i]) for i in prune_inputs(raw)]


def _hook_callback(hooks, create_graph):
    def run(grad):
        as_tensor = isinstance(grad, Tensor)
        g = grad if as_tensor else Tensor(grad)
        for h in list(hooks):
            r = h(g)
            if r is not None:
                g = r if isinstance(r, Tensor) else Tensor(np.asarray(r, g.dtype))
        if g.shape != grad.shape:
            raise RuntimeError(f"hook returned a gradient of shape {g.shape}; expected {grad.shape}")
        return [g if as_tensor else np.asarray(g.data, dtype=grad.dtype)]
    return run


def _callbacks(hist, plan, create_graph):
    from gradjit.runtime.function import custom_callback
    cbs = []
    for kind, where in plan.slots:
        if kind == "hook":
            cbs.append(_hook_callback(hist.hooks(where), create_graph))
        else:
            cbs.append(custom_callback(hist, *where, create_graph))
    return cbs


def _seed_array(s):
    s = getattr(s, "data", s)
    return s if is_device_array(s) else np.asarray(s)


def build_joint_plan(hist, seed_types, targets):
    """One function for a deferred forward and its backward: inputs are the leaves and
    the seeds; outputs the root's value, then the gradients of ``targets`` (leaves)."""
    g = hist.graph()
    n_leaves = len(g.inputs)
    seeds = [g.add_input(s, d) for s, d in seed_types]
    grads = adjoint(g, g.outputs, seeds, [value_at(g, a) for a in targets],
                    {"once_differentiable": once_differentiable_rule})
    g.outputs = [g.outputs[0]] + [x for x in grads if x is not None]
    g = optimize(g)
    before = list(g.inputs)
    spec = []
    for i in prune_inputs(g):
        v = before[i]
        spec.append(("const", g.constants[v]) if v in g.constants else
                    ("in", i) if i < n_leaves else ("seed", i - n_leaves))
    return Plan(exe=compile_segmented(g), feeds=spec, targets=[x is not None for x in grads],
                slots=[], bwd_graph=g, batched=False)


def _run_joint(hist, root, seeds, wrt_tensors, allow_unused, fast_key=None):
    """backward() of a deferred forward whose whole history is the tape: the forward runs
    compiled together with the backward. None when the request needs the general path."""
    leaf_pos, wrt = hist.leaf_pos, []
    for t in wrt_tensors:
        i = leaf_pos.get(id(t))
        if i is None and t.grad_fn is not None:
            return None   # a non-leaf: the general path
        wrt.append(None if i is None else ("in", i))
    if hist.stale:
        return None
    # Tensors of this history the caller still holds get their values as recorded.
    compute_pending([fn for fn in hist.order[:-1] if fn.held()])
    targets = tuple(dict.fromkeys(a for a in wrt if a is not None))
    # (the seed has the root's type, which the history's key holds)
    key = ("joint", hist.key, targets, os.environ.get("GRADJIT_EXECUTOR"),
           os.environ.get("GRADJIT_FAST_MATH"))
    plan = _PLANS.get(key)
    if plan is None:
        plan = _PLANS[key] = build_joint_plan(hist, ((root.shape, root.dtype),), targets)
    else:
        STATS["memory_hits"] += 1
    arrays = [_seed_array(seeds[a[1]]) if a[0] == "seed" else a[1] if a[0] == "const"
              else hist.leaves[a[1]]._data for a in plan.feeds]
    results = iter(plan.exe(arrays, ()))
    fn = root.grad_fn
    value = np.asarray(next(results)).astype(fn.out_types[0][1], copy=False)
    root._data = value.reshape(fn.out_types[0][0])
    by_addr = {a: (next(results) if has else None) for a, has in zip(targets, plan.targets)}
    hist.release()
    register(fast_key, plan, [a[1] for a, has in zip(targets, plan.targets) if has])
    out = [None if a is None else by_addr[a] for a in wrt]
    return wrt_tensors, _leaf_results(wrt_tensors, out, allow_unused, False), []


def _check_not_freed(hist, plan):
    """torch's rule for a second backward through a graph an earlier one freed: it fails
    when a freed op's backward needs its saved values (any array its formula reads: the
    first backward freed them, saved leaves included; a freed custom Function's saved
    tensors); one that reads none (y = (x + 1).sum()) runs and accumulates again. A new
    op's backward may read the value of a freed op (h = x + 3 backwarded, then h * h):
    that value is not one the freed op saved, and the caller's h still holds it."""
    order = hist.order
    for a in plan.feeds:
        if a[0] in ("seed", "const"):
            continue
        # (a deferred op never computed in a graph whose root was: a joint backward ran
        # it inside and freed only the nodes it computed, runtime/fast_backward.py)
        if any(p < 0 or order[p].freed or order[p].out_data is None
               for p in plan.readers.get(a, (-1,))):
            raise RuntimeError(FREED)
    if any(fn.ctx is not None and fn.freed for fn in order):
        raise RuntimeError(FREED)


def _on_paths(hist, retained, present):
    """The ``retain_grad`` tensors whose op torch's engine runs: those on a path from the
    roots to a tensor asked for (their ops lead to one); ``grad(y, x)`` or
    ``backward(inputs=...)`` leaves the others' ``.grad`` alone."""
    asked, reach, pos = set(present), set(), hist.pos
    for j, fn in enumerate(hist.order):
        for e in map(_cut, fn.edges):
            if isinstance(e, tuple):
                k = pos.get(id(e[0]))
                if k in reach or ("node", k, e[1]) in asked:
                    reach.add(j)
                    break
            elif ("in", hist.leaf_pos.get(id(e))) in asked:
                reach.add(j)
                break
    return [(a, t) for a, t in retained if a[1] in reach]


def _leaf_results(wrt_tensors, out, allow_unused, create_graph, across=False):
    """Run leaf hooks on the gradients and refuse unused inputs (torch's message)."""
    for i, (t, g) in enumerate(zip(wrt_tensors, out)):
        if g is not None and t.grad_fn is None and t._hooks:
            out[i] = _hook_callback(t._hooks, create_graph)(g)[0]
        if g is None and not allow_unused and not across:
            raise RuntimeError(f"One of the differentiated Tensors appears to not have been used "
                               f"in the graph (inputs[{i}]). Set allow_unused=True if this is "
                               f"the desired behavior.")
    return out


def run_backward(roots, seeds, wrt_tensors, retain_graph=None, create_graph=False,
                 allow_unused=True, batched=False, crossings=None, fast_key=None):
    """Gradients of sum(<seed, root>) w.r.t. ``wrt_tensors`` (``None``: every leaf that
    requires grad). Returns (wrt tensors, grads, [(retaining tensor, grad)]). With a list
    ``crossings``, the gradient reaching each device copy the graph ends at is appended to
    it as (copy's GradFn, gradient), for the caller to carry across."""
    if retain_graph is None:
        retain_graph = create_graph
    hist = History.of(roots)
    if wrt_tensors is None:
        wrt_tensors = [t for t in hist.leaves if t.requires_grad and id(t) not in hist.cuts]
    if roots[0]._data is None:   # a deferred forward (tracer/deferred.py)
        if (hist.taped and not (retain_graph or batched or hist.cuts or hist.extras
                                or is_anomaly_enabled())):
            done = _run_joint(hist, roots[0], seeds, wrt_tensors, allow_unused, fast_key)
            if done is not None:
                return done
        compute_pending(hist.order)
    n_wrt = len(wrt_tensors)
    if crossings is not None and hist.cuts:
        if batched:
            raise NotImplementedError("is_grads_batched=True through a device copy (.to/.cpu/"
                                      ".cuda) is not supported")
        wrt_tensors = list(wrt_tensors) + [fn.boundary for fn in hist.cuts.values()]
    wrt = [hist.addr(t) for t in wrt_tensors]
    present = list(dict.fromkeys(a for a in wrt if a is not None))
    retained = [(a, t) for a, t in hist.retained() if a not in present]
    if retained:
        retained = _on_paths(hist, retained, present)
    targets = present + [a for a, _ in retained]
    seed_types = tuple((s.shape[1:] if batched else s.shape, s.dtype) for s in seeds)
    device = "cuda" if any(is_device_array(t.data) for t in roots) else "cpu"
    key = (hist.key, tuple(targets), seed_types, batched, device,
           os.environ.get("GRADJIT_EXECUTOR"),  # a plan is compiled or interpreted
           os.environ.get("GRADJIT_FAST_MATH"))
    plan = _PLANS.get(key)
    if plan is None or not _holds(plan):
        plan = _PLANS[key] = build_plan(hist, seed_types, targets, batched, device)
    else:
        STATS["memory_hits"] += 1
    if hist.freed:
        _check_not_freed(hist, plan)
    cbs = _callbacks(hist, plan, create_graph) if plan.slots else ()
    checking = is_anomaly_enabled() and is_anomaly_check_nan_enabled()
    sites = lambda j, op: (hist.order[j].site if j < len(hist.order) and hist.order[j].op == op
                           else None)   # (node j of hist.graph() is op j)
    if create_graph:
        graph, spec = plan.replay or (plan.bwd_graph, plan.feeds)
        feeds = [seeds[a[1]] if a[0] == "seed" else Tensor(a[1]) if a[0] == "const"
                 else hist.tensor(a) for a in spec]
        feeds = [f if isinstance(f, Tensor) else Tensor(np.asarray(f)) for f in feeds]
        results = replay(graph, feeds, cbs,
                         (lambda n, r: check_node(n, r, sites)) if checking else None)
    else:
        arrays = [_seed_array(seeds[a[1]]) if a[0] == "seed"
                  else a[1] if a[0] == "const" else hist.array(a) for a in plan.feeds]
        if checking:  # node by node, to name the op that made a NaN
            results = checked_run(plan.bwd_graph, arrays, cbs, sites)
        else:
            results = plan.exe(arrays, cbs)
    results = iter(results)
    by_addr = {a: (next(results) if has else None) for a, has in zip(targets, plan.targets)}
    if not retain_graph:
        feeds = arrays = None   # (a value only they hold is freed: GradFn.kept)
        hist.release()
    out = [None if a is None else by_addr[a] for a in wrt]
    across = len(wrt_tensors) > n_wrt   # an unused input here may be reached across a copy
    out = _leaf_results(wrt_tensors, out, allow_unused, create_graph, across)
    if across:
        crossings.extend((hist.cuts[id(t)], g) for t, g in zip(wrt_tensors[n_wrt:], out[n_wrt:])
                         if g is not None)
        wrt_tensors, out = wrt_tensors[:n_wrt], out[:n_wrt]
    return wrt_tensors, out, [(t, by_addr[a]) for a, t in retained]
