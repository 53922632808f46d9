"""Python loops a trace unrolled, folded back into ``scan`` region nodes.

Contract
- ``fold_loops(graph, roots=()) -> {old Value: new Value}`` rewrites ``graph`` in place
  (its inputs and constants kept; constant inputs may be added) so that each long run of
  repeated steps becomes one ``scan`` node (tracer/control_flow.py) whose body is one step:
  the compiled module, and the adjoint built on it, then follow the step, not the trip
  count. ``roots`` are values the caller still holds (the loss, aux results); the
  returned map says where each one moved (a value not in it did not move). Only nodes
  whose values are numbered ``since`` or later are rewritten: a transform called inside
  another's trace rewrites the nodes its own call made, never the enclosing function's,
  whose Python code may still hold any of its values.
- A *run* is ``T >= MIN_STEPS`` consecutive copies of a ``P``-node step, ``T * P >=
  MIN_NODES`` (``MIN_NODES_FUSING`` when every node of the step is elementwise or a view), whose nodes match op for op (ops, attributes, types) and whose every input
  is, in every step: *local* (made earlier in the same step), *carried* (made by the
  previous step at a fixed place; the first step reads a value from before the run),
  *invariant* (one value from before the run), a *constant* per step of one type (the
  constants are stacked into one new constant input), or a *slice* ``x[a + b*k]`` of one
  value from before the run (``slice.Tensor`` of width 1: the slices become one strided
  slice before the scan). The only attributes a step may vary are those slices' bounds
  and the Python number of a float ``add`` / ``sub`` / ``rsub`` / ``mul`` / ``div``
  (``h * t``): that op becomes its tensor form on a per-step 0-d value of the operand's
  dtype, stacked into one new constant input. Values of a step read
  after the run are the scan's outputs: the last step's carried values, or stacked
  per-step results sliced again where they are read. Anything else leaves the graph as
  it is, so folding never changes what is computed, only its shape.
- Only the forward graph is folded (before the adjoint), so reverse mode is the scan's
  reverse scan (lowering/adjoint_regions.py). ``GRADJIT_FOLD_LOOPS=0`` turns folding off,
  and so does ``graph.loop_regions = False`` (a graph for the CUDA target, which has no
  region nodes: the unrolled loop runs there as the user wrote it).
- Then concatenations that rebuild one value from its slices (the program stacking the
  per-step values of a loop) become that value (lowering/restack.py), folded or not.
"""
from __future__ import annotations

import os

import numpy as np

from gradjit.lowering.restack import restack
from gradjit.lowering.runs import find_run, next_same
from gradjit.tracer.control_flow import Region
from gradjit.tracer.ir import Graph, _key_attr
from gradjit.tracer.registry import get_op
from gradjit.tracer.api import apply
from gradjit.tracer.trace import Tracer

MIN_STEPS = 3     # a loop of fewer steps stays unrolled
MIN_NODES = 256   # nodes a run must span: smaller unrolled runs compile about as fast as a scan
# ... unless every node of its step is elementwise or a view: unrolled, such steps fuse
# into one loop that grows with the trip count, which the code generator's roller cannot
# roll (an Euler loop over 16 states: 0.43, 0.57 and 1.5 s cold at T = 3, 6 and 30,
# folded 0.68 s at each, and no slower per call at 16 to 1e5 states). Steps with a
# matmul, a reduction or a kernel split into loops per step, which the roller rolls.
MIN_NODES_FUSING = 32
MAX_MULTIPLE = 8   # a step tried as up to this many copies of the shortest repeat found
_FUSING_KINDS = ("elementwise", "shape")
_VARYING = {"slice.Tensor": ("start", "end")}   # attributes a step may vary (x[t])
# ... and a Python number a float op takes (``h * t``): the op on a per-step 0-d value of
# the operand's dtype, (Tensor op, operands swapped)
_SCALAR_OPS = {"mul.Scalar": ("mul.Tensor", False), "add.Scalar": ("add.Tensor", False),
               "sub.Scalar": ("sub.Tensor", False), "div.Scalar": ("div.Tensor", False),
               "rsub.Scalar": ("sub.Tensor", True)}
_VARYING.update({op: ("other",) for op in _SCALAR_OPS})


def _sig(node):
    skip = _VARYING.get(node.op, ())
    return (node.op, tuple((k, _key_attr(a)) for k, a in node.attrs.items() if k not in skip),
            tuple((v.shape, v.dtype.str) for v in node.outputs),
            tuple((v.shape, v.dtype.str) for v in node.inputs))


class _Reject(Exception):
    pass


def fold_loops(graph, roots=(), since=0):
    moved = {}
    if graph.loop_regions and len(graph.nodes) >= MIN_NODES_FUSING \
            and os.environ.get("GRADJIT_FOLD_LOOPS", "1") != "0":
        moved = _fold_runs(graph, roots, since)
    # the per-step values a folded loop stacked, when the program stacks them again
    more = restack(graph, since)
    moved = {k: more.get(v, v) for k, v in moved.items()}
    moved.update({k: v for k, v in more.items() if k not in moved})
    return moved


def _fold_runs(graph, roots, since):
    moved = {}
    sigs = {}
    ids = [sigs.setdefault(_sig(n), len(sigs)) for n in graph.nodes]
    nxt = next_same(ids)
    i = next((k for k, n in enumerate(graph.nodes) if n.outputs[0].id >= since), len(ids))
    while i < len(ids):
        run = find_run(ids, nxt, i, MIN_STEPS, MIN_NODES_FUSING)
        if run is not None and run[0] * run[1] < MIN_NODES and not all(
                get_op(n.op).kind in _FUSING_KINDS for n in graph.nodes[i:i + run[0]]):
            run = None
        if run is None:
            i += 1
            continue
        p, t = run
        folded = _fold_multiple(graph, i, p, t, roots)
        if folded is None:   # left unrolled; its rotations would fail alike: skip the run
            i += p * t
            continue
        size, new = folded
        moved.update({k: new.get(v, v) for k, v in moved.items()})
        moved.update({k: v for k, v in new.items() if k not in moved})
        roots = [moved.get(r, r) for r in roots]
        ids[i:i + p * t] = [-1 - k for k in range(size)]   # (new nodes start no run)
        nxt = next_same(ids)
        i += size
    return moved


def _fold_multiple(graph, s, p, t, roots):
    """``_fold`` of the run, or else of its period taken 2, 3, ... ``MAX_MULTIPLE`` times:
    a step may repeat a shorter sequence (a midpoint or RK step evaluates the same
    right-hand side at each stage), whose copies are not themselves steps."""
    for m in range(1, MAX_MULTIPLE + 1):
        if t // m < MIN_STEPS:
            break
        try:
            return _fold(graph, s, p * m, t // m, roots)
        except _Reject:
            continue
    return None


def _fold(graph, s, p, t, roots):
    nodes = graph.nodes
    steps = [nodes[s + k * p:s + (k + 1) * p] for k in range(t)]
    where = {}   # Value -> (step, node index in step, output index)
    for k, step in enumerate(steps):
        for j, node in enumerate(step):
            for o, v in enumerate(node.outputs):
                where[v] = (k, j, o)
    before = set(graph.inputs) | {v for n in nodes[:s] for v in n.outputs}
    # -- classify every input of the step ---------------------------------------------------
    feeds = {}      # (j, m) -> ("local", j', o) | ("carry", j', o, init) | ("inv", v) | ...
    for j in range(p):
        for m in range(len(steps[0][j].inputs)):
            us = [steps[k][j].inputs[m] for k in range(t)]
            feeds[(j, m)] = _classify(graph, us, where, before, j)
    for j in range(p):   # attributes vary only in x[a + b*k] slices and float ops' numbers
        n0 = steps[0][j]
        key0 = _attrs_key(n0.attrs)   # (numbers by their bits: -0.0 is not 0.0)
        if n0.op in _VARYING and any(_attrs_key(steps[k][j].attrs) != key0 for k in range(t)):
            if n0.op in _SCALAR_OPS:
                x, out = n0.inputs[0], n0.outputs[0]
                others = [steps[k][j].attrs["other"] for k in range(t)]
                if (x.dtype.kind != "f" or out.dtype != x.dtype or not all(
                        isinstance(c, (int, float)) and not isinstance(c, bool) for c in others)):
                    raise _Reject
                feeds[("scalar", j)] = ("scalar", np.array(others, dtype=x.dtype))
                continue
            if feeds[(j, 0)][0] != "inv" or not _affine_slice(steps, j):
                raise _Reject
            feeds[("slice", j)] = ("slice",)
    # -- who reads step values from outside the run -------------------------------------------
    after = nodes[s + p * t:]
    outside = {}    # (j, o) -> set of steps k whose value is read after the run
    for node in after:
        for v in node.inputs:
            if v in where:
                k, j, o = where[v]
                outside.setdefault((j, o), set()).add(k)
    keep = list(graph.outputs) + list(roots) + [u[1] for u in graph.running_updates]
    for v in keep:
        if v in where:
            k, j, o = where[v]
            outside.setdefault((j, o), set()).add(k)
    return _rewrite(graph, s, p, t, steps, feeds, outside)


def _attrs_key(attrs):
    return tuple((k, _key_attr(v)) for k, v in attrs.items())


def _classify(graph, us, where, before, j):
    w0 = where.get(us[0])
    if w0 is not None:
        if w0[0] == 0 and w0[1] < j and all(where.get(u) == (k, w0[1], w0[2])
                                           for k, u in enumerate(us)):
            return ("local", w0[1], w0[2])
        raise _Reject   # (a value of another step, read at no fixed place)
    if us[0] not in before:
        raise _Reject
    if len(us) > 1 and us[1] in where:
        w1 = where[us[1]]
        if w1[0] == 0 and all(where.get(u) == (k - 1, w1[1], w1[2])
                              for k, u in enumerate(us) if k):
            return ("carry", w1[1], w1[2], us[0])
        raise _Reject
    if all(u is us[0] for u in us):
        return ("inv", us[0])
    if all(u in before and u in graph.constants for u in us):
        arrays = [graph.constants[u] for u in us]
        if all(_same_constant(a, arrays[0]) for a in arrays):
            return ("inv", us[0])
        return ("const", us)
    raise _Reject


def _same_constant(a, b):
    # (equal bits: -0.0 is not 0.0, a NaN is itself)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def _same_value(graph, u, v):
    """``u`` and ``v`` hold the same numbers: one value, or two captured constants with
    equal contents. A NumPy array the program reads at several places is captured at
    each (a loop whose first state is a NumPy array reads it in every stage of its first
    step: an RK4 solver's four), so its copies must count as one first value."""
    return u is v or (u in graph.constants and v in graph.constants
                      and _same_constant(graph.constants[u], graph.constants[v]))


def _affine_slice(steps, j):
    a = [steps[k][j].attrs for k in range(len(steps))]
    if a[0]["step"] != 1 or any(x["end"] - x["start"] != 1 for x in a):
        return False
    if any(x["start"] is None or x["start"] < 0 for x in a):
        return False
    b = a[1]["start"] - a[0]["start"]
    return b > 0 and all(x["start"] == a[0]["start"] + k * b for k, x in enumerate(a))


def _rewrite(graph, s, p, t, steps, feeds, outside):
    first = steps[0]
    mark = len(graph.nodes)
    body = Graph(f"{graph.name}.loop")
    carry_in = {}   # (step node, output) -> (None, the first step's value from before)
    for (j, m), f in sorted(((k, f) for k, f in feeds.items() if isinstance(k[0], int)),
                            key=lambda kv: kv[0]):
        if f[0] == "carry":
            key = (f[1], f[2])
            if key in carry_in and not _same_value(graph, carry_in[key][1], f[3]):
                raise _Reject   # one carried value, two different first values
            carry_in.setdefault(key, (None, f[3]))
    carries = list(carry_in)
    for j, o in carries:
        v, init = first[j].outputs[o], carry_in[(j, o)][1]
        if (v.shape, v.dtype) != (init.shape, init.dtype):
            raise _Reject   # (the loop changes the carried value's type: unrolled it stays)
    c_vals = {key: body.add_input(first[key[0]].outputs[key[1]].shape,
                                  first[key[0]].outputs[key[1]].dtype) for key in carries}
    x_vals, x_outer = {}, []
    for j, node in enumerate(first):   # x[a + b*k] slices, per-step numbers and constants
        if ("slice", j) in feeds:
            x_vals[("slice", j)] = body.add_input(node.outputs[0].shape, node.outputs[0].dtype)
            x_outer.append(_stacked_slice(graph, steps, j))
        elif ("scalar", j) in feeds:
            values = feeds[("scalar", j)][1]
            x_vals[("scalar", j)] = body.add_input((), values.dtype)
            nv = graph.add_input(values.shape, values.dtype)
            graph.constants[nv] = values
            x_outer.append(nv)
    for (j, m), f in sorted(feeds.items(), key=lambda kv: str(kv[0])):
        if f[0] == "const" and isinstance(j, int) and (j, m) not in x_vals:
            v = first[j].inputs[m]
            x_vals[(j, m)] = body.add_input(v.shape, v.dtype)
            stacked = np.stack([graph.constants[u] for u in f[1]])
            nv = graph.add_input(stacked.shape, stacked.dtype)
            graph.constants[nv] = stacked
            x_outer.append(nv)
    cap_vals = {}
    vmap = {}
    for j, node in enumerate(first):
        if ("slice", j) in feeds:
            vmap[node.outputs[0]] = x_vals[("slice", j)]
            continue
        ins = []
        for m, u in enumerate(node.inputs):
            f = feeds[(j, m)]
            if f[0] == "local":
                ins.append(vmap[first[f[1]].outputs[f[2]]])
            elif f[0] == "carry":
                ins.append(c_vals[(f[1], f[2])])
            elif f[0] == "const":
                ins.append(x_vals[(j, m)])
            else:
                v = f[1]
                if v not in cap_vals:
                    cap_vals[v] = body.add_input(v.shape, v.dtype)
                ins.append(cap_vals[v])
        op, attrs = node.op, node.attrs
        if ("scalar", j) in feeds:   # the step's number is a body input now
            op, swap = _SCALAR_OPS[op]
            ins = [x_vals[("scalar", j)], ins[0]] if swap else [ins[0], x_vals[("scalar", j)]]
            attrs = {k: a for k, a in attrs.items() if k == "alpha"}
        outs = body.add_node(op, ins, attrs, [(v.shape, v.dtype) for v in node.outputs],
                             node.site)
        vmap.update(zip(node.outputs, outs))
    # body outputs: next carries, then per-step values read after the run
    ys = [key for key in sorted(outside) if not (key in carry_in and outside[key] == {t - 1})]
    body.inputs = [c_vals[k] for k in carries] + list(x_vals.values()) + list(cap_vals.values())
    body.outputs = ([vmap[first[j].outputs[o]] for j, o in carries]
                    + [vmap[first[j].outputs[o]] for j, o in ys])
    nc = len(carries)
    types = ([(v.shape, v.dtype) for v in body.outputs[:nc]]
             + [((t,) + v.shape, v.dtype) for v in body.outputs[nc:]]
             + [((t,) + v.shape, v.dtype) for v in body.inputs[:nc]])
    graph.site_override = first[0].site
    try:
        outs = graph.add_node("scan.default", [carry_in[k][1] for k in carries] + x_outer
                              + list(cap_vals), {"body": Region(body), "n_carry": nc,
                                                 "n_x": len(x_vals), "length": t,
                                                 "reverse": False},
                              types, first[0].site)
        new = {}   # old Value (a step's) -> new Value after the run
        for i, key in enumerate(carries):
            if t - 1 in outside.get(key, ()):
                new[steps[t - 1][key[0]].outputs[key[1]]] = outs[i]
        for i, (j, o) in enumerate(ys):
            stacked = Tracer(graph, outs[nc + i])
            for k in sorted(outside[(j, o)]):
                new[steps[k][j].outputs[o]] = stacked[k].value
    finally:
        graph.site_override = None
    added = graph.nodes[mark:]
    rest = graph.nodes[s + p * t:mark]
    for node in rest:
        node.inputs = [new.get(v, v) for v in node.inputs]
    graph.outputs = [new.get(v, v) for v in graph.outputs]
    graph.running_updates = [(a, new.get(b, b), c) for a, b, c in graph.running_updates]
    graph.nodes = graph.nodes[:s] + added + rest
    return len(added), new


def _stacked_slice(graph, steps, j):
    """One value of shape ``(T,) + slice shape``: the steps' ``x[a + b*k]`` slices."""
    a = [steps[k][j].attrs for k in range(len(steps))]
    d, lo = a[0]["dim"], a[0]["start"]
    b = a[1]["start"] - lo if len(a) > 1 else 1
    x = Tracer(graph, steps[0][j].inputs[0])
    sl = apply("slice.Tensor", [x], {"dim": d, "start": lo, "end": a[-1]["start"] + 1, "step": b})
    sl = apply("unsqueeze.default", [sl], {"dim": d + 1})
    perm = [d] + [i for i in range(sl.value.ndim) if i != d]
    return apply("permute.default", [sl], {"dims": tuple(perm)}).value
