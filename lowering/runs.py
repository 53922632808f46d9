"""Runs of repeated steps in a sequence of node signatures (an unrolled Python loop).

Contract
- ``next_same(ids)``: for each position, the next position holding the same id
  (``len(ids)`` if none).
- ``find_run(ids, nxt, i, min_steps, min_nodes) -> (P, T) | None``: the longest-spanning
  run starting at ``i`` of ``T >= min_steps`` consecutive copies of a ``P``-id step,
  ``P * T >= min_nodes``.
- ``step_starts(nodes, min_steps, min_nodes=0) -> {position: "start" | "step" | "end"}``
  (runs of ``T >= min_steps`` steps spanning ``>= min_nodes`` nodes): where each
  run starts, where each of its later steps starts, and where it ends (so what follows,
  a last step that lacks some of the step's nodes, stays apart too), runs taken left to
  right, nodes compared by op and input and output types
  (attributes may differ: slice bounds, per-step numbers). ``lowering/schedule.py``
  keeps fusion inside a step with it; ``lowering/fold_loops.py`` folds runs with the
  two functions above and a stricter signature.
"""
from __future__ import annotations


def next_same(ids):
    out, last = [len(ids)] * len(ids), {}
    for k in range(len(ids) - 1, -1, -1):
        out[k] = last.get(ids[k], len(ids))
        last[ids[k]] = k
    return out


def find_run(ids, nxt, i, min_steps, min_nodes):
    n, best, j = len(ids), None, i
    for _ in range(8):   # the next few places the same node recurs: candidate periods
        j = nxt[j]
        if j >= n:
            break
        p = j - i
        if i + min_steps * p > n:
            break   # (later candidates are longer still)
        if ids[i + p - 1] != ids[i + 2 * p - 1] or ids[i + p // 2] != ids[i + p + p // 2]:
            continue   # (a cheap look before comparing whole steps)
        t = 1
        while i + (t + 1) * p <= n and ids[i + t * p:i + (t + 1) * p] == ids[i:i + p]:
            t += 1
        if t >= min_steps and p * t >= min_nodes and (best is None or p * t > best[0] * best[1]):
            best = (p, t)
    return best


def step_starts(nodes, min_steps, min_nodes=0):
    sigs = {}
    ids = [sigs.setdefault((n.op, tuple((v.shape, v.dtype.str) for v in n.inputs),
                            tuple((v.shape, v.dtype.str) for v in n.outputs)), len(sigs))
           for n in nodes]
    nxt = next_same(ids)
    starts, i = {}, 0
    while i < len(ids):
        run = find_run(ids, nxt, i, min_steps, min_nodes)
        if run is None:
            i += 1
            continue
        p, t = run
        starts.setdefault(i + p * t, "end")   # (where the run ends; another may start there)
        starts.update((i + k * p, "step") for k in range(1, t))
        starts[i] = "start"
        i += p * t
    return starts
