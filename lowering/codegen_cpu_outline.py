"""Outlining: fused loops of large graphs become shared functions, compiled once per shape.

Contract
- Numba's compile time grows faster than linearly with the size of one
  function, and an unrolled Python loop (100 RNN steps, forward and backward)
  repeats the same few fused loops hundreds of times. When a graph schedules
  at least ``OUTLINE_MIN_LOOPS`` loops, ``codegen_cpu.generate`` hands each
  loop's lines to an ``Outliner`` instead of the entry function.
- ``Outliner.call(lines, parallel)`` canonicalises the loop's source: value
  names (``v``/``t``/``r``/``%`` ids) and constant slots (``c``) are renumbered
  by first appearance, so two loops that differ only in which values they
  touch have the same text. Identical texts share one function
  (``@numba.njit(cache=True)``; Numba compiles it once per argument types). The
  function takes the values it reads that it does not define (first-appearance
  order) and the constants it uses, and returns the values it defines at top
  level (its stores and reductions). The returned line calls it from the
  entry with the real names.
- ``functions()`` is the source of every shared function, in creation order.
  Loops below the threshold stay inline: small graphs read exactly as before.
- Loop lines start at depth 1 (inside ``entry``), so they keep their
  indentation inside the shared function.
- Loops written for outlining read their extents from the shapes of the arrays
  they take (``extent_sources``: ``n<d> = v<id>.shape[j]``) instead of literals,
  so loops that differ only in shape (an RNN's ``dWx`` and ``dWh`` outer
  products) have one text and share one function. Keys ignore comments (those
  name the first caller's shapes). Extents are not passed as integer arguments:
  Numba would type the call's literals as ``Literal[int]`` and compile one
  specialisation per value.
"""
from __future__ import annotations

import re

from gradjit.lowering.schedule import REDUCTIONS

OUTLINE_MIN_LOOPS = 24
_NAME = re.compile(r"\b([vtrchs])(\d+)\b|%(\d+)")
_TOP_ASSIGN = re.compile(r"^    (v\d+) = ")


class Outliner:
    def __init__(self):
        self._funcs = {}   # canonical text -> (function name, source)

    def _canonical(self, lines):
        vmap, cmap = {}, {}

        def sub(m):
            kind, num, pct = m.group(1), m.group(2), m.group(3)
            if pct is not None:
                return f"%{vmap.setdefault(pct, len(vmap))}"
            if kind == "c":
                return f"c{cmap.setdefault(num, len(cmap))}"
            return f"{kind}{vmap.setdefault(num, len(vmap))}"
        text = _NAME.sub(sub, "\n".join(lines)).split("\n")   # (one pass; no line holds a newline)
        return text, vmap, cmap

    def call(self, lines, parallel):
        body, vmap, cmap = self._canonical(lines)
        assigned = {m.group(1) for ln in body for m in [_TOP_ASSIGN.match(ln)] if m}
        used = []
        for ln in body:
            for m in re.finditer(r"\bv(\d+)\b", ln):
                name = f"v{m.group(1)}"
                if name not in used:
                    used.append(name)
        ins = [n for n in used if n not in assigned]
        outs = [n for n in used if n in assigned]
        consts = [f"c{i}" for i in range(len(cmap))]
        # Keyed on the code without its comments: they name the first caller's shapes,
        # and loops that read their extents from their arguments differ only there.
        code = [c for c in (ln.split("  # ")[0] for ln in body) if not c.lstrip().startswith("#")]
        key = ("\n".join(code), tuple(ins), tuple(outs), parallel)
        entry = self._funcs.get(key)
        if entry is None:
            name = f"loop{len(self._funcs)}"
            opts = ', parallel=True' if parallel else ''
            # Called only from the entry: no Python or C wrapper to compile.
            src = [f'@numba.njit(cache=True, error_model="numpy", no_cpython_wrapper=True, '
                   f'no_cfunc_wrapper=True{opts})',
                   f"def {name}({', '.join(ins + consts)}):", *body,
                   f"    return ({', '.join(outs)}{',' if len(outs) == 1 else ''})"]
            entry = self._funcs[key] = (name, "\n".join(src))
        back = {v: k for k, v in vmap.items()}
        cback = {v: k for k, v in cmap.items()}
        real = lambda n: f"v{back[int(n[1:])]}"   # noqa: E731
        args = [real(n) for n in ins] + [f"c{cback[i]}" for i in range(len(cmap))]
        lhs = ", ".join(real(n) for n in outs) + ("," if len(outs) == 1 else "")
        return f"    {lhs} = {entry[0]}({', '.join(args)})" if outs else \
            f"    {entry[0]}({', '.join(args)})"

    def functions(self):
        return [src for _, src in self._funcs.values()]

    def __len__(self):
        return len(self._funcs)


def extent_sources(loop, inline):
    """Per dim of ``loop``'s space: ``(value, axis)`` of an array the loop reads (not one it
    defines, not an inlined constant) whose ``axis`` spans that dim, or None (a size-1 dim,
    or one every operand broadcasts along: it stays a literal)."""
    space, r = loop.shape, len(loop.shape)
    here = {v for n in loop.nodes for v in n.outputs}
    src = [None] * r
    # (members of another shape, schedule's unit_views, broadcast against their own)
    for v in (v for n in loop.nodes if n.outputs[0].shape == space or n.op in REDUCTIONS
              for v in n.inputs):
        if v in here or v in inline:
            continue
        for j in range(v.ndim):
            d = r - v.ndim + j
            if src[d] is None and space[d] != 1 and v.shape[j] == space[d]:
                src[d] = (v, j)
    return src
