"""Outlining: fused loops of large graphs become shared functions, compiled once per shape.

Contract
- Numba's compile time grows faster than linearly with the size of one
  function, and an unrolled Python loop (100 RNN steps, forward and backward)
  repeats the same few fused loops hundreds of times. When a graph schedules
  at least ``OUTLINE_MIN_LOOPS`` loops, ``codegen_cpu.generate`` hands each
  loop's lines to an ``Outliner`` instead of the entry function.
- ``Outliner.call(lines, parallel)`` canonicalises the loop's source: value
  names (``v``/``t``/``r``/``%`` ids) and constant slots (``c``) are renumbered
  by first appearance in the code (then in the comments), so two loops that
  differ only in which values they touch have the same text. Identical texts
  share one function (``@numba.njit``; Numba compiles it once per argument
  types). It has no disk cache entry of its own: Numba links a callee's code
  into its caller's, so the entry's cache entry holds it, and an entry of its
  own was written and never read (W4: 16 ms of the cold first gradient). The
  function takes the values it reads that it does not define (first-appearance
  order) and the constants it uses, and returns the values it defines at top
  level (its stores and reductions). The returned line calls it from the
  entry with the real names.
- ``finish(lines)`` (the entry's lines, once every loop is outlined) redirects
  the calls of a loop that stores one value bare to that loop's *adding form*
  (the same code adding an accumulator argument before the store) when that
  form is a shared function too, passing zeros (``al.zeros``) as the
  accumulator: an unrolled loop's weight gradient stores its first term and
  adds every later one, and one function compiles instead of two. Only when
  every call of the bare loop is at the entry's top level (the zeros take the
  shape of the value the call defines).
- ``functions()`` is the source of every shared function still called, in
  creation order. Loops below the threshold stay inline: small graphs read
  exactly as before.
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

from gradjit.lowering.alloc_cpu import dtype_arg, shape_arg
from gradjit.lowering.schedule import REDUCTIONS
from gradjit.tracer.registry import split_top

OUTLINE_MIN_LOOPS = 24
_NAME = re.compile(r"\b([vtrchs])(\d+)\b|%(\d+)")
_TOP_ASSIGN = re.compile(r"^    (v\d+) = ")
_V = re.compile(r"\bv\d+\b")
_CALL = re.compile(r"^(\s+)(.*?) = (loop\d+)\((.*)\)$")
_ONE_OUT = re.compile(r"v(\d+),")


class Outliner:
    def __init__(self, values=None):
        self._funcs = {}     # key -> (function name, source)
        self._acc = {}       # key -> [(key of its accumulating form, argument order)]
        self._values = values or {}   # value id -> Value (the shapes of zero accumulators)
        self._dropped = set()   # keys whose calls finish() redirected

    @staticmethod
    def _canonical(lines):
        """The code of ``lines`` (comments cut), names numbered by first appearance, and
        a function that gives the whole lines (comments numbered after the code) for a
        new function's source. Keyed on the code alone: two loops with the same code have
        the same names whatever their comments say."""
        vmap, cmap = {}, {}

        def sub(m):
            kind, num, pct = m.group(1), m.group(2), m.group(3)
            if pct is not None:
                return f"%{vmap.setdefault(pct, len(vmap))}"
            if kind == "c":
                return f"c{cmap.setdefault(num, len(cmap))}"
            return f"{kind}{vmap.setdefault(num, len(vmap))}"
        split = [ln.partition("  # ") for ln in lines]
        # (one pass over the joined code: no line holds a newline)
        code = _NAME.sub(sub, "\n".join(c for c, _, _ in split)).split("\n")

        def body():
            notes = _NAME.sub(sub, "\n".join(n for _, _, n in split)).split("\n")
            return [c + sep + n for c, (_, sep, _), n in zip(code, split, notes)]
        return code, body, vmap, cmap

    def _key(self, lines, parallel):
        code, body, vmap, cmap = self._canonical(lines)
        assigned = {m.group(1) for ln in code for m in [_TOP_ASSIGN.match(ln)] if m}
        used = list(dict.fromkeys(m.group(0) for ln in code for m in _V.finditer(ln)))
        ins = [n for n in used if n not in assigned]
        outs = [n for n in used if n in assigned]
        # Comment lines are dropped from the key: they name the first caller's shapes, and
        # loops that read their extents from their arguments differ only there.
        key = ("\n".join(c for c in code if c.strip() and not c.lstrip().startswith("#")),
               tuple(ins), tuple(outs), parallel)
        return key, body, vmap, cmap

    def call(self, lines, parallel):
        key, body, vmap, cmap = self._key(lines, parallel)
        ins, outs = list(key[1]), list(key[2])
        entry = self._funcs.get(key)
        if entry is None:
            name = f"loop{len(self._funcs)}"
            consts = [f"c{i}" for i in range(len(cmap))]
            opts = ', parallel=True' if parallel else ''
            # Called only from the entry: no Python or C wrapper to compile, no cache entry.
            src = [f'@numba.njit(error_model="numpy", no_cpython_wrapper=True, '
                   f'no_cfunc_wrapper=True, pipeline_class=pl.Lean{opts})',
                   f"def {name}({', '.join(ins + consts)}):", *body(),
                   f"    return ({', '.join(outs)}{',' if len(outs) == 1 else ''})"]
            entry = self._funcs[key] = (name, "\n".join(src))
            self._acc[key] = self._accumulating_forms(lines, parallel, key, vmap)
        back = {v: k for k, v in vmap.items()}
        cback = {v: k for k, v in cmap.items()}
        real = lambda n: f"v{back[int(n[1:])]}"   # noqa: E731
        args = [real(n) for n in ins] + [f"c{cback[i]}" for i in range(len(cmap))]
        lhs = ", ".join(real(n) for n in outs) + ("," if len(outs) == 1 else "")
        return f"    {lhs} = {entry[0]}({', '.join(args)})" if outs else \
            f"    {entry[0]}({', '.join(args)})"

    def _accumulating_forms(self, lines, parallel, key, vmap):
        """Keys of the loop that also adds an accumulator to its one output (``t = acc[idx]
        + x`` before the store), each with its argument order: the indices of this loop's
        arguments, None where the accumulator goes. Why: an unrolled loop's gradient sums
        one term per step; the first term is stored bare and every later one added, so
        the same loop is written twice (W4: a 55 ms compile for the bare one). Called with
        zeros, the adding form gives the same values (x + 0.0 == x; a -0.0 becomes 0.0)."""
        if len(key[2]) != 1:
            return []
        back = {v: k for k, v in vmap.items()}
        out = back[int(key[2][0][1:])]
        codes = [ln.partition("  # ")[0] for ln in lines]
        store = re.compile(rf"^(\s+)v{out}\[([^\]]+)\] = t{out}$")
        hits = [k for k, c in enumerate(codes) if store.match(c)]
        if len(hits) != 1 or sum(len(re.findall(rf"\bv{out}\b", c)) for c in codes) != 2:
            return []
        fresh = 1 + max(int(m.group(2) or m.group(3)) for ln in lines for m in _NAME.finditer(ln))
        tmp, acc = f"t{fresh}", f"v{fresh + 1}"
        k = hits[0]
        ind, idx = store.match(codes[k]).groups()
        renamed = [re.sub(rf"\bt{out}\b", tmp, c) for c in codes]
        mine = {f"v{back[int(n[1:])]}": j for j, n in enumerate(key[1])}   # real name -> arg
        forms = []
        for add in (f"{acc}[{idx}] + {tmp}", f"{tmp} + {acc}[{idx}]"):
            new = (renamed[:k] + [f"{ind}t{out} = {add}", f"{ind}v{out}[{idx}] = t{out}"]
                   + renamed[k + 1:])
            key2, _, vmap2, _ = self._key(new, parallel)
            back2 = {v: k for k, v in vmap2.items()}
            order = [mine.get(f"v{back2[int(n[1:])]}") for n in key2[1]]
            if order.count(None) == 1:   # (the accumulator; every other argument is ours)
                forms.append((key2, order))
        return forms

    def finish(self, lines):
        """``lines`` with each call of a loop whose accumulating form is also a shared
        function redirected to that form (a zero accumulator), when every call of it is
        at the entry's top level (the zeros take the shape of the value it defines); the
        bare loop is then not emitted (``functions``)."""
        sites = {}
        for k, ln in enumerate(lines):
            m = _CALL.match(ln)
            if m:
                sites.setdefault(m.group(3), []).append((k, m))
        plan = {}
        for key, (name, _) in self._funcs.items():
            target = next((t for t in self._acc.get(key, ()) if t[0] in self._funcs), None)
            calls = sites.get(name, ())
            outs = [_ONE_OUT.fullmatch(m.group(2)) for _, m in calls]
            if target and calls and all(m.group(1) == "    " for _, m in calls) and all(
                    o and int(o.group(1)) in self._values for o in outs):
                plan[key] = target
        plan = {k: t for k, t in plan.items() if t[0] not in plan}   # (no chains)
        out = list(lines)
        for key, (key2, order) in plan.items():
            for k, m in sites[self._funcs[key][0]]:
                v = self._values[int(_ONE_OUT.fullmatch(m.group(2)).group(1))]
                args = split_top(m.group(4))
                zero = f"al.zeros({shape_arg(v.shape)}, {dtype_arg(v.dtype)})"
                new = [zero if j is None else args[j] for j in order] + args[len(key[1]):]
                out[k] = f"    {m.group(2)} = {self._funcs[key2][0]}({', '.join(new)})"
        self._dropped = set(plan)
        return out

    def functions(self):
        return [src for key, (_, src) in self._funcs.items() if key not in self._dropped]


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
