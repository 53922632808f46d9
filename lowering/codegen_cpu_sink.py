"""Concatenations written by the loop that computes their parts (the CPU generator).

Contract
- ``plan_sinks(steps, graph, loops) -> (sinks, skipped)``: for each ``cat.default``
  statement whose every part is a register of one of ``loops`` (the Loops the generator
  writes with ``_loop``: not rank-one helpers), reached from the register through views
  that nothing else reads (``unsqueeze`` of a stacked row, say), with the cat's dtype:
  ``sinks[loop]`` lists ``(cat value, part, register, offset, dim)`` and ``skipped`` holds the
  cat statement and those views, which the generator no longer emits. The loop allocates
  the cat's result and stores each part's elements into its block (``stores``); a
  register that only the cat and its own loop read is no longer stored on its own
  (removed from ``loop.stores``).
- ``stores(sink, space, ix)``: the index expression of the part's block in the cat's
  result for the loop's current element (``ix(d)``: the loop's index of space dim ``d``).
Why: ``np.stack([f(y), g(y)])`` of rows computed in one loop (an ODE's right-hand side)
was two allocations, two unsqueezes and two copy nests after the loop; the RK4 scan body
had nine such stacks, a fifth of its lines, and Numba's compile follows the line count.
"""
from __future__ import annotations

from gradjit.lowering.schedule import ORDER_VIEWS, REDUCTIONS, Loop, Stmt, squeezed, unit_map


def plan_sinks(steps, graph, loops):
    users, outputs = graph.users(), set(graph.outputs)
    home = {v: st for st in steps if isinstance(st, Loop) and st in loops
            for n in st.nodes if n.op not in REDUCTIONS for v in n.outputs}
    view_step = {st.node.outputs[0]: st for st in steps if isinstance(st, Stmt)}
    sinks, skipped = {}, set()
    for st in steps:
        if not (isinstance(st, Stmt) and st.node.op == "cat.default"):
            continue
        cat = st.node
        out, dim = cat.outputs[0], cat.attrs["dim"]
        found, views, off = [], [], 0
        for part in cat.inputs:
            v, chain = part, []
            while v not in home:
                vs = view_step.get(v)
                if vs is None or vs.node.op not in ORDER_VIEWS or v in outputs \
                        or len(users.get(v, [])) != 1:
                    break
                chain.append(vs)
                v = vs.node.inputs[0]
            if v not in home or v.dtype != out.dtype \
                    or squeezed(part.shape) != squeezed(home[v].shape):
                break
            found.append((out, part, v, off, dim))
            views += chain
            off += part.shape[dim]
        loop = {home[v] for _, _, v, _, _ in found}
        if len(found) != len(cat.inputs) or len(loop) != 1:
            continue
        sinks.setdefault(loop.pop(), []).extend(found)
        skipped.add(st)
        skipped.update(views)
    # A register only sunk parts and its own loop read is no longer stored on its own.
    gone = {s.node for s in skipped}
    for loop, found in sinks.items():
        inside = set(loop.nodes)
        for _, _, v, _, _ in found:
            if v in loop.stores and v not in outputs and \
                    all(u in gone or u in inside for u in users.get(v, [])):
                loop.stores.remove(v)
    return sinks, skipped


def stores(sink, space, ix):
    out, part, _, off, dim = sink
    idx = ["0" if d is None else ix(d) for d in unit_map(part.shape, space)]
    idx[dim] = str(off) if idx[dim] == "0" else f"{off} + {idx[dim]}"
    return f"v{out.id}[{', '.join(idx)}]"
