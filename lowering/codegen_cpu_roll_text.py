"""Loop rolling, the text side: canonical forms, periodic runs, and a run's partial tail.

Contract
- ``canon(lines) -> (text, ids, slots, lits, vnames)``: the code of ``lines``
  (comments dropped) with value names (``v``/``t``/``r``/``c``/``h``/``s`` + id)
  renumbered by first appearance, integer literals as ``#``; ``ids``: the value
  id per canonical position, ``slots``: the ``consts`` slot per constant
  position, ``lits``: the literals in order, ``vnames``: the ``v<id>`` names
  the code holds. Two iterations of an unrolled loop have one text.
- ``find_runs(keys)``: greedy maximal periodic runs ``[(start, period, reps)]``
  of at least ``MIN_REPS`` repetitions of up to ``MAX_PERIOD`` keys.
- ``affine(seq)``: ``(a, b)`` with ``seq[k] == a + b*k`` for every k, else None.
- ``allocated_once(lines, n)``: ``v<n>`` is bound once, by ``al.empty``;
  ``copy_into(dst, src, shape, depth)``: the lines that copy an array into a stack slot
  (also a scan's stacked outputs, lowering/codegen_cpu_regions.py).
- ``match_tail(template, tail)``: ``template`` holds a run's iteration-0 lines,
  ``tail`` the lines after the run. When each code line of the tail is, in
  order, a line of the template with the same text (names and literals
  abstracted) and the same IR op in its comment, under one consistent renaming
  (a position has one value, a value one position), returns the tail's
  ``(ids, slots, lits)`` per canonical position of the template, None where the
  tail lacks it; else None. An unrolled loop's last step often lacks what only a
  next step would read (an RNN's backward at t=1 makes no gradient for h0):
  ``codegen_cpu_roll`` runs that step as one more iteration, its missing lines
  computed and unused, instead of writing it out after the loop.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

MIN_REPS = 4
MAX_PERIOD = 64
NAME = re.compile(r"\b([vtrchs])(\d+)\b")
INT = re.compile(r"(?<![\w.+-])(\d+)(?![\w.])")   # an integer literal (slice bounds, indices)
_TOKEN = re.compile(f"{NAME.pattern}|{INT.pattern}")   # either (disjoint: a name starts a word)
_OP = re.compile(r"= ([\w.]+)\(")                   # the op of a line's IR comment


def code(line):
    c = _CODES.get(line)
    if c is None:   # (memoised: the roller asks for every line's code several times)
        if len(_CODES) >= 65536:
            _CODES.clear()
        c = _CODES[line] = "" if line.lstrip().startswith("#") else line.split("  # ")[0]
    return c


_CODES = {}


def canon(lines):
    ids, slots, lits, vmap, cmap, vnames = [], [], [], {}, {}, set()

    def sub(m):
        kind = m.group(1)
        if kind is None:   # an integer literal
            lits.append(int(m.group(3)))
            return "#"
        num = int(m.group(2))
        if kind == "c":
            if num not in cmap:
                cmap[num] = len(cmap)
                slots.append(num)
            return f"c{cmap[num]}"
        if kind == "v":
            vnames.add(m.group(0))
        if num not in vmap:
            vmap[num] = len(vmap)
            ids.append(num)
        return f"{kind}{vmap[num]}"
    # One pass over the joined code gives what a literal pass, then a name pass, per line
    # gave: the two patterns never overlap, and neither matches across a newline.
    text = _TOKEN.sub(sub, "\n".join(c for c in map(code, lines) if c))
    return text, ids, slots, lits, vnames


ALLOC = re.compile(r"^(\s*)v(\d+) = al\.empty\(")


def allocated_once(lines, n):
    """``v<n>`` is bound once, by ``al.empty`` (then filled in place)."""
    binds = [ln for ln in map(code, lines) if re.match(rf"^\s*v{n} = ", ln)]
    return len(binds) == 1 and ALLOC.match(binds[0]) is not None


def copy_into(dst, src, shape, depth=2):
    """Lines (indented ``depth`` levels) copying array ``src`` into ``dst`` (``'S[k'``: an
    open index) element by element; Numba compiles an array-into-slice assignment for
    seconds (its shape check and error message)."""
    pad = "    " * depth
    if not shape:
        return [f"{pad}{dst}] = {src}"]
    out = [f"{pad}{'    ' * d}for j{d} in range({n}):" for d, n in enumerate(shape)]
    idx = ", ".join(f"j{d}" for d in range(len(shape)))
    out.append(f"{pad}{'    ' * len(shape)}{dst}, {idx}] = {src}[{idx}]")
    return out


def affine(seq):
    """(a, b) with seq[k] == a + b*k for all k, else None."""
    a = seq[0]
    b = seq[1] - seq[0] if len(seq) > 1 else 0
    return (a, b) if all(s == a + b * k for k, s in enumerate(seq)) else None


def find_runs(keys):
    """Greedy maximal periodic runs: [(start, period, reps)]."""
    runs, i, n = [], 0, len(keys)
    while i < n:
        best = None
        for p in range(1, min(MAX_PERIOD, (n - i) // MIN_REPS) + 1):
            reps = 1
            while i + (reps + 1) * p <= n and keys[i + reps * p:i + (reps + 1) * p] == keys[i:i + p]:
                reps += 1
            if reps >= MIN_REPS and (best is None or p * reps > best[1] * best[2]):
                best = (i, p, reps)
        if best is None:
            i += 1
        else:
            runs.append(best)
            i += best[1] * best[2]
    return runs


@dataclass
class _Line:
    shape: str     # the code with names as their kind letter and literals as '#'
    op: str        # the IR op of the comment ('' without one)
    names: list    # (kind, id) in order
    lits: list     # integer literals in order


def _line(ln):
    c = code(ln)
    m = _OP.search(ln.partition("  # ")[2])
    lits = [int(x) for x in INT.findall(c)]
    body = INT.sub("#", c)
    return _Line(NAME.sub(lambda m: m.group(1), body), m.group(1) if m else "",
                 [(k, int(n)) for k, n in NAME.findall(body)], lits)


def match_tail(template, tail):
    tpl = [_line(ln) for ln in template if code(ln)]
    got = [_line(ln) for ln in tail if code(ln)]
    vmap, cmap, where, nlits = {}, {}, [], 0
    for t in tpl:   # canonical positions, numbered as canon() numbers them
        occ = [(k, (cmap if k == "c" else vmap).setdefault(n, len(cmap if k == "c" else vmap)))
               for k, n in t.names]
        where.append((occ, nlits))
        nlits += len(t.lits)
    ids, slots, lits = [None] * len(vmap), [None] * len(cmap), [None] * nlits
    owner = {}   # (kind class, tail id) -> position
    i = 0
    for g in got:
        while i < len(tpl) and not _unify(tpl[i], where[i], g, ids, slots, lits, owner):
            i += 1
        if i == len(tpl):
            return None
        i += 1
    return ids, slots, lits


def _unify(t, where, g, ids, slots, lits, owner):
    """Map ``g``'s names onto ``t``'s positions if consistent with the mapping so far (and
    commit); False (nothing changed) otherwise."""
    if t.shape != g.shape or t.op != g.op:
        return False
    new = {}
    for (kind, pos), (_, num) in zip(where[0], g.names):
        cls = "c" if kind == "c" else "v"
        table = slots if cls == "c" else ids
        cur = new.get((cls, pos), table[pos])
        if (cur is not None and cur != num) or owner.get((cls, num), pos) != pos or any(
                c == cls and p != pos and n == num for (c, p), n in new.items()):
            return False
        new[(cls, pos)] = num
    for (cls, pos), num in new.items():
        (slots if cls == "c" else ids)[pos] = num
        owner[(cls, num)] = pos
    lits[where[1]:where[1] + len(g.lits)] = g.lits
    return True
