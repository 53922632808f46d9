"""Loop rolling: repeated runs of scheduled steps become one ``for`` loop in the entry.

Contract
- Input: the emitted line blocks of the scheduled steps, in order
  (``Block(lines, defs, parallel)``; ``defs`` are the ids of the IR values the
  step defines). ``roll(blocks, values, out_ids, layouts)`` returns a list of
  items: an unchanged ``Block`` or a ``Rolled`` (its lines replace the blocks of
  the run).
- A *run* is ``T >= MIN_REPS`` consecutive iterations of a ``P``-step body
  whose code text is identical once value names and constant slots are
  renumbered by first appearance (the outliner's canonical form). An unrolled
  Python loop (RNN steps, forward and adjoint) is the case this exists for:
  rolled, the entry is as large as one step, whatever the step count, so Numba's
  compile time follows distinct structure, not trace length.
- Every name the body reads is classified from the IR ids it stands for in
  each iteration, and the run is rolled only when all are one of:
  *local* (defined in the same iteration); *invariant* (the same value in every
  iteration, defined before the run); *carry* (iteration ``k`` reads what
  iteration ``k-1`` defined at a fixed place, iteration 0 a value from before);
  *import* (a different value per iteration, all from before the run: read
  from an earlier run's stack at an affine index, or from a tuple of
  same-typed arrays built before the loop). Constant slots must be affine in
  ``k``. Anything else leaves the steps unrolled, so rolling never changes
  results, only code shape.
- Values a run defines that are read after it are written to a stack
  ``(T, *shape)`` per iteration; later runs read the stack, later unrolled steps
  get the value back by name after the loop. The template is iteration 0's
  code with loop-local names suffixed ``_`` (comments keep iteration 0's ids).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from gradjit.lowering.alloc_cpu import dtype_arg, shape_arg

MIN_REPS = 4
MAX_PERIOD = 64
_NAME = re.compile(r"\b([vtrchs])(\d+)\b")
_INT = re.compile(r"(?<![\w.+-])(\d+)(?![\w.])")   # an integer literal (slice bounds, indices)


@dataclass(eq=False)
class Block:
    lines: list
    defs: set
    parallel: bool = False
    is_loop: bool = False
    outlined: bool = False   # a loop already outlined: its one line calls the shared function


@dataclass(eq=False)
class Rolled:
    lines: list
    parallel: bool = False


@dataclass
class _Iter:
    text: str
    ids: list      # value id per canonical position
    slots: list    # const slot per canonical position
    lits: list     # integer literals in order of appearance
    defs: set = field(default_factory=set)
    names: set = field(default_factory=set)   # real 'v<id>' names in the code


def _code(line):
    s = line.strip()
    return "" if s.startswith("#") else line.split("  # ")[0]


def _canon(lines):
    ids, slots, lits, vmap, cmap = [], [], [], {}, {}

    def lit(m):
        lits.append(int(m.group(1)))
        return "#"

    def sub(m):
        kind, num = m.group(1), int(m.group(2))
        if kind == "c":
            if num not in cmap:
                cmap[num] = len(cmap)
                slots.append(num)
            return f"c{cmap[num]}"
        if num not in vmap:
            vmap[num] = len(vmap)
            ids.append(num)
        return f"{kind}{vmap[num]}"
    text = "\n".join(_NAME.sub(sub, _INT.sub(lit, c)) for c in map(_code, lines) if c)
    return text, ids, slots, lits


_ALLOC = re.compile(r"^(\s*)v(\d+) = al\.empty\(")


def _allocated_once(lines, n):
    """``v<n>`` is bound once, by ``al.empty`` (then filled in place)."""
    binds = [ln for ln in map(_code, lines) if re.match(rf"^\s*v{n} = ", ln)]
    return len(binds) == 1 and _ALLOC.match(binds[0]) is not None


def _copy_into(dst, src, shape):
    """Lines copying array ``src`` into ``dst`` (``'S[k'``: an open index) element by
    element; Numba compiles an array-into-slice assignment for seconds."""
    if not shape:
        return [f"        {dst}] = {src}"]
    out = [f"        {'    ' * d}for j{d} in range({n}):" for d, n in enumerate(shape)]
    idx = ", ".join(f"j{d}" for d in range(len(shape)))
    out.append(f"        {'    ' * len(shape)}{dst}, {idx}] = {src}[{idx}]")
    return out


def _last_only(roller, kinds, q, its, lo, hi):
    """Local position ``q`` feeds a carry and only its last iteration's value is read
    after the run: the carry variable holds it after the loop, no stack needed."""
    ids = [it.ids[q] for it in its]
    return ("carry", q) in kinds and roller._outside(ids, lo, hi) == [len(its) - 1]


def _affine(seq):
    """(a, b) with seq[k] == a + b*k for all k, else None."""
    a = seq[0]
    b = seq[1] - seq[0] if len(seq) > 1 else 0
    return (a, b) if all(s == a + b * k for k, s in enumerate(seq)) else None


def _find_runs(keys):
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


class _Roller:
    def __init__(self, blocks, values, out_ids, layouts, const_types, inputs, pack_inputs):
        self.blocks, self.values, self.layouts = blocks, values, layouts
        self.out_ids, self.const_types = out_ids, const_types
        self.inputs, self.pack_inputs = set(inputs), pack_inputs
        self.packs = []           # (name, [input value ids]) the runtime stacks per call
        self.why = []             # why candidate runs were not rolled
        self.by_name = set()      # ids rolled loops read by name (invariants, carry starts)
        self.stacks = {}          # value id -> (stack name, index) for values of rolled runs
        self.in_run = [None] * len(blocks)
        self.readers = {}         # value id -> block indices that read it
        self.loop_defs = set().union(*(b.defs for b in blocks if b.is_loop))
        for b, blk in enumerate(blocks):
            for _, num in ((m.group(1), int(m.group(2))) for c in map(_code, blk.lines)
                           for m in _NAME.finditer(c) if m.group(1) != "c"):
                if num not in blk.defs:
                    self.readers.setdefault(num, set()).add(b)

    # -- analysis ------------------------------------------------------------------
    def _iters(self, start, p, reps):
        its = []
        for k in range(reps):
            blks = self.blocks[start + k * p:start + (k + 1) * p]
            lines = [ln for b in blks for ln in b.lines]
            text, ids, slots, lits = _canon(lines)
            names = set(re.findall(r"\bv\d+\b", "\n".join(map(_code, lines))))
            its.append(_Iter(text, ids, slots, lits, set().union(*(b.defs for b in blks)), names))
        return its

    def _classify(self, its, lo, hi):
        """Per canonical position: ('local',) | ('inv',) | ('carry', q) | ('import', src);
        None when the iterations cannot be rolled (then no pack it made survives)."""
        saved = dict(self.stacks), list(self.packs)
        kinds = self._kinds(its, lo, hi)
        if kinds is None:
            self.stacks, self.packs = saved
        return kinds

    def _kinds(self, its, lo, hi):
        if any(it.text != its[0].text for it in its):
            return self._fail("iterations differ in code")
        all_defs = set().union(*(it.defs for it in its))
        first = {n: q for q, n in enumerate(its[0].ids)}
        kinds = []
        for j, n0 in enumerate(its[0].ids):
            ids = [it.ids[j] for it in its]
            if n0 in its[0].defs:
                # Same shapes and dtypes in every iteration: a literal that varies is then
                # an index or a slice bound, never a shape.
                v0 = self.values.get(n0)
                if not all(n in it.defs for n, it in zip(ids, its)) or (v0 is not None and any(
                        (self.values[n].shape, self.values[n].dtype) != (v0.shape, v0.dtype)
                        for n in ids)):
                    return self._fail(f"%{n0}: defined in some iterations only, or reshaped")
                kinds.append(("local",))
                continue
            if any(n in all_defs for n in ids[:1]):
                return self._fail(f"%{n0}: iteration 0 reads a value of a later iteration")
            if all(n == n0 for n in ids):
                kinds.append(("inv",))
                continue
            q = first.get(ids[1])
            if q is not None and ids[1] in its[0].defs and self._same_type(ids[1], n0) and all(
                    its[k - 1].ids[q] == ids[k] for k in range(1, len(its))):
                kinds.append(("carry", q))
                continue
            if any(n in all_defs for n in ids):
                return self._fail(f"%{n0}: read from an iteration other than the previous one")
            src = self._import_source(ids)
            if src is None:
                return self._fail(f"%{n0}: per-iteration values from mixed sources")
            kinds.append(("import", src))
        for j in range(len(its[0].slots)):
            if _affine([it.slots[j] for it in its]) is None:
                return self._fail("a constant slot that is not affine in the iteration")
            if len({self.const_types[it.slots[j]] for it in its}) != 1:
                return self._fail("a constant slot whose type changes with the iteration")
        for j in range(len(its[0].lits)):
            if _affine([it.lits[j] for it in its]) is None:
                return self._fail("an integer literal that is not affine in the iteration")
        # A local read outside the run must be storable (a named value, not a register),
        # unless only its last value is, through the carry that holds it.
        for j, kd in enumerate(kinds):
            if kd[0] == "local" and self._outside([it.ids[j] for it in its], lo, hi) and \
                    not _last_only(self, kinds, j, its, lo, hi):
                if not self._storable(its[0].ids[j]) or f"v{its[0].ids[j]}" not in its[0].names:
                    return self._fail(f"%{its[0].ids[j]}: read after the run but not storable")
        return kinds

    def _fail(self, why):
        self.why.append(why)   # kept for debugging a run that does not roll
        return None

    def _same_type(self, n, m):
        """A carry's value and its initial value have one Numba type (layout included)."""
        v, w = self.values.get(n), self.values.get(m)
        return v is not None and w is not None and v.dtype == w.dtype and v.ndim == w.ndim and (
            v.ndim == 0 or self.layouts.get(v, "C") == self.layouts.get(w, "C") != "A")

    def _storable(self, n):
        v = self.values.get(n)
        return v is not None and (v.ndim == 0 or self.layouts.get(v, "C") == "C")


    def _import_source(self, ids):
        if all(n in self.stacks for n in ids):
            names = {self.stacks[n][0] for n in ids}
            ab = _affine([self.stacks[n][1] for n in ids])
            if len(names) == 1 and ab is not None:
                return ("stack", names.pop(), ab)
            return None
        if any(n in self.stacks or n not in self.values for n in ids):
            return None
        vs = [self.values[n] for n in ids]
        sig = {(v.shape, str(v.dtype)) for v in vs}   # layouts: made C where unsure (_emit)
        if len(sig) != 1:
            return None
        if self.pack_inputs and len(set(ids)) == len(ids) and all(n in self.inputs for n in ids):
            # Graph inputs arrive stacked: the runtime packs them into one (T, *shape) array
            # (Numba compiles a 100-array argument list or tuple for seconds).
            name = f"P{len(self.packs)}"
            self.packs.append((name, list(ids)))
            for k, n in enumerate(ids):
                self.stacks[n] = (name, k)
            return ("stack", name, (0, 1))
        return ("tuple", ids)

    def _outside(self, ids, lo, hi):
        """Iterations whose value is read outside blocks [lo, hi) or returned."""
        return [k for k, n in enumerate(ids)
                if n in self.out_ids or any(b < lo or b >= hi for b in self.readers.get(n, ()))]

    # -- emission --------------------------------------------------------------------
    def _accept(self, r, start, p, its, kinds):
        """Register the run's stacks (later runs import from them) and its blocks."""
        lo, hi = start, start + p * len(its)
        exports = {}
        for j, kd in enumerate(kinds):
            ids = [it.ids[j] for it in its]
            if kd[0] == "local" and self._outside(ids, lo, hi) and \
                    not _last_only(self, kinds, j, its, lo, hi):
                exports[j] = f"S{r}_{j}"
                for kk, n in enumerate(ids):
                    self.stacks[n] = (exports[j], kk)
            elif kd[0] in ("inv", "carry"):
                self.by_name.add(ids[0])     # read by its name in the entry: must exist there
            elif kd[0] == "import" and kd[1][0] == "tuple":
                self.by_name.update(kd[1][1])
        for b in range(lo, hi):
            self.in_run[b] = r
        return exports

    def _emit(self, r, start, p, its, kinds, exports):
        T, k = len(its), f"it{r}"
        lo, hi = start, start + p * T
        it0 = its[0]
        pre, head, tail, post = [], [], [], []
        rename, direct = {}, {}
        template = [ln for blk in self.blocks[lo:lo + p] for ln in blk.lines]
        for j, kd in enumerate(kinds):
            n0 = it0.ids[j]
            ids = [it.ids[j] for it in its]
            if kd[0] == "local":
                rename[n0] = None   # suffix '_'
                if j in exports:
                    v = self.values[n0]
                    s = exports[j]
                    pre.append(f"    {s} = al.empty({shape_arg((T,) + tuple(v.shape))}, {dtype_arg(v.dtype)})")
                    if _allocated_once(template, n0):
                        direct[n0] = f"{s}[{k}]"    # computed in place, in its stack slot
                    else:
                        tail.extend(_copy_into(f"{s}[{k}", f"v{n0}_", v.shape))
                    for kk, n in enumerate(ids):
                        if n in self.out_ids or n in self.by_name or any(
                                self.in_run[b] is None and (b < lo or b >= hi)
                                for b in self.readers.get(n, ())):
                            post.append(f"    v{n} = {s}[{kk}]")
            elif kd[0] == "carry":
                name = f"C{r}_{j}"
                pre.append(f"    {name} = v{n0}")
                last = its[-1].ids[kd[1]]
                if _last_only(self, kinds, kd[1], its, lo, hi) and f"    v{last} = {name}" not in post:
                    post.append(f"    v{last} = {name}")
                rename[n0] = name
                tail.append(f"        {name} = v{it0.ids[kd[1]]}_")
            elif kd[0] == "import":
                rename[n0] = None
                src = kd[1]
                if src[0] == "stack":
                    (a, b) = src[2]
                    head.append(f"        v{n0}_ = {src[1]}[{a} + {b} * {k}]")
                else:
                    t = f"X{r}_{j}"
                    # Statement outputs may be F-ordered whatever the layout record says
                    # (LAPACK results): one layout, or the tuple cannot be indexed by k.
                    elems = [f"v{n}" if n in self.inputs or n in self.loop_defs
                             or not self.values[n].ndim else f"al.contiguous(v{n})"
                             for n in src[1]]
                    pre.append(f"    {t} = ({', '.join(elems)},)")
                    head.append(f"        v{n0}_ = {t}[{k}]")
        crename = {}
        for j, c0 in enumerate(it0.slots):
            a, b = _affine([it.slots[j] for it in its])
            if b:
                crename[c0] = f"c{c0}_"
                head.append(f"        c{c0}_ = {self.const_types[c0]}(consts[{a} + {b} * {k}])")

        def sub(m):
            kind, num = m.group(1), int(m.group(2))
            if kind == "c":
                return crename.get(num, m.group(0))
            if num in rename:   # a carry's name stands for its array (v), not for a
                r = rename[num]  # hoisted element of it (h): that one stays loop-local
                return r if r and kind == "v" else f"{kind}{num}_"
            return m.group(0)
        lits = [_affine([it.lits[j] for it in its]) for j in range(len(it0.lits))]
        count = iter(range(len(lits)))

        def lit(m):
            a, b = lits[next(count)]
            return m.group(0) if not b else f"({a} + {b} * {k})"
        body = []
        for ln in template:
            code, sep, comment = ln.partition("  # ")
            if not code.strip().startswith("#"):
                code = _INT.sub(lit, code)
            m = _ALLOC.match(code)
            if code.strip().startswith("#"):
                body.append("    " + ln)
            elif m and int(m.group(2)) in direct:
                body.append(f"    {m.group(1)}v{m.group(2)}_ = {direct[int(m.group(2))]}{sep}{comment}")
            else:
                body.append("    " + _NAME.sub(sub, code) + sep + comment)
        title = (f"    # rolled: {T} iterations of a {p}-step body (steps {lo}..{hi - 1}); "
                 f"iteration 0 shown, loop-local names end in '_'")
        lines = [title, *pre, f"    for {k} in range({T}):", *head, *body, *tail, *post]
        return Rolled(lines, any(b.parallel for b in self.blocks[lo:hi]))

    def roll(self):
        keys = [_canon(b.lines)[0] for b in self.blocks]
        plan = []
        for start, p, reps in _find_runs(keys):
            for d0, d1 in ((0, 0), (1, 0), (0, 1), (1, 1), (2, 0), (0, 2), (2, 2)):
                s, t = start + d0 * p, reps - d0 - d1
                if t < MIN_REPS:
                    continue
                its = self._iters(s, p, t)
                kinds = self._classify(its, s, s + p * t)
                if kinds is not None:
                    plan.append((s, p, its, kinds, self._accept(len(plan), s, p, its, kinds)))
                    break
        items, at = [], 0
        for r, (s, p, its, kinds, exports) in enumerate(plan):
            items.extend(self.blocks[at:s])
            items.append(self._emit(r, s, p, its, kinds, exports))
            at = s + p * len(its)
        items.extend(self.blocks[at:])
        return items, self.packs


def roll(blocks, values, out_ids, layouts, const_types, inputs=(), pack_inputs=False):
    """``(items, packs)``: the blocks with periodic runs replaced by ``Rolled`` loops (see
    the module contract), and the input packs those loops read. ``values``: IR value id ->
    Value; ``out_ids``: ids of graph outputs; ``layouts``: Value -> 'C' | 'F' | 'A' of
    statement outputs; ``const_types``: the numpy scalar type (source text) of each
    ``consts`` slot; ``inputs``: graph input ids. With ``pack_inputs``, a run that reads one
    graph input per iteration reads them from a pack ``P<j>`` (the entry's argument in
    their place, stacked by the runtime) instead of a tuple built in the entry."""
    return _Roller(blocks, values, set(out_ids), layouts, const_types, inputs, pack_inputs).roll()
