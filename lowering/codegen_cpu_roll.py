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
- A *tail* (steps right after a run that are a part of an iteration:
  ``codegen_cpu_roll_text.match_tail``) joins the run as one more iteration when
  every name it reads still classifies with it; the lines it lacks then run too,
  unused, so every value they read must be readable in that iteration (a stack
  read in range, a constant slot clamped, no varying literal) and nothing after
  the run may read what they overwrite. A stack read one before a run's first
  iteration is that run's carry start (an RNN's h0), read by name.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from gradjit.lowering.alloc_cpu import dtype_arg, shape_arg
from gradjit.lowering.consts import const_read

from gradjit.lowering.codegen_cpu_roll_text import ALLOC as _ALLOC, INT as _INT, MIN_REPS
from gradjit.lowering.codegen_cpu_roll_text import NAME as _NAME, affine as _affine
from gradjit.lowering.codegen_cpu_roll_text import allocated_once as _allocated_once
from gradjit.lowering.codegen_cpu_roll_text import canon as _canon
from gradjit.lowering.codegen_cpu_roll_text import copy_into as _copy_into
from gradjit.lowering.codegen_cpu_roll_text import find_runs as _find_runs, match_tail


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
    text: object   # a key: equal between iterations exactly when their code is (_iters)
    ids: list      # value id per canonical position
    slots: list    # const slot per canonical position
    lits: list     # integer literals in order of appearance
    defs: set = field(default_factory=set)
    names: set = field(default_factory=set)   # real 'v<id>' names in the code
    partial: bool = False   # a tail: None in ids / slots / lits where it lacks a position


def _last_only(roller, kinds, q, its, lo, hi):
    """Local position ``q`` feeds a carry and only its last iteration's value is read
    after the run: the carry variable holds it after the loop, no stack needed."""
    ids = [it.ids[q] for it in its]
    return ("carry", q) in kinds and roller._outside(ids, lo, hi) == [len(its) - 1]


class _Roller:
    def __init__(self, blocks, values, out_ids, layouts, const_types, inputs, pack_inputs):
        self.blocks, self.values, self.layouts = blocks, values, layouts
        self.out_ids, self.const_types = out_ids, const_types
        self.inputs, self.pack_inputs = set(inputs), pack_inputs
        self.packs = []           # (name, [input value ids]) the runtime stacks per call
        self.why = []             # why candidate runs were not rolled
        self.by_name = set()      # ids rolled loops read by name (invariants, carry starts)
        self.stacks = {}          # value id -> (stack name, index) for values of rolled runs
        self.stack_len = {}       # stack name -> entries
        self.stack_init = {}      # stack name -> the value before its entry 0 (a carry start)
        self.in_run = [None] * len(blocks)
        self.canons = [_canon(b.lines) for b in blocks]   # per block, computed once
        self.readers = {}         # value id -> block indices that read it
        self.loop_defs = set().union(*(b.defs for b in blocks if b.is_loop))
        for b, blk in enumerate(blocks):
            for num in self.canons[b][1]:   # (the ids of its names but constants)
                if num not in blk.defs:
                    self.readers.setdefault(num, set()).add(b)

    # -- analysis ------------------------------------------------------------------
    def _iters(self, start, p, reps):
        """The iterations of a run, each composed from its blocks' canonical forms: its
        text is a key equal between two iterations exactly when their joined code's
        ``canon`` texts are (a run's k-th blocks have one ``canon`` text: ``find_runs``
        keys; what remains is which of them share values: the blocks' ids and constant
        slots renumbered over the iteration). Why: canonicalising each iteration's joined
        lines again cost the roller a second pass over most of its text (W4: the roller
        36 -> 24 ms, with the readers taken from the blocks' pass)."""
        its = []
        for k in range(reps):
            lo = start + k * p
            parts = self.canons[lo:lo + p]
            ids = list(dict.fromkeys(n for c in parts for n in c[1]))
            slots = list(dict.fromkeys(n for c in parts for n in c[2]))
            at, sat = {n: i for i, n in enumerate(ids)}, {n: i for i, n in enumerate(slots)}
            text = tuple((c[0], tuple(at[n] for n in c[1]), tuple(sat[n] for n in c[2]))
                         for c in parts)
            lits = [x for c in parts for x in c[3]]
            names = set().union(*(c[4] for c in parts))
            its.append(_Iter(text, ids, slots, lits,
                             set().union(*(b.defs for b in self.blocks[lo:lo + p])), names))
        return its

    def _tail(self, start, p, hi, q):
        """Blocks [hi, hi + q) as a partial iteration of the run's body, or None."""
        blks = self.blocks[hi:hi + q]
        lines = [ln for b in blks for ln in b.lines]
        m = match_tail([ln for b in self.blocks[start:start + p] for ln in b.lines], lines)
        if m is None:
            return None
        names = set().union(*(c[4] for c in self.canons[hi:hi + q]))   # (blocks' v-names)
        return _Iter("", *m, set().union(*(b.defs for b in blks)), names, partial=True)

    def _classify(self, its, lo, hi):
        """Per canonical position: ('local',) | ('inv',) | ('carry', q) | ('import', src);
        None when the iterations cannot be rolled (then no pack it made survives)."""
        saved = dict(self.stacks), list(self.packs)
        kinds = self._kinds(its, lo, hi)
        if kinds is None:
            self.stacks, self.packs = saved
        return kinds

    def _kinds(self, its, lo, hi):
        full = [it for it in its if not it.partial]
        tail = its[-1] if its[-1].partial else None
        last = len(its) - 1
        if any(it.text != its[0].text for it in full):
            return self._fail("iterations differ in code")
        all_defs = set().union(*(it.defs for it in its))
        first = {n: q for q, n in enumerate(its[0].ids)}
        kinds = []
        for j, n0 in enumerate(its[0].ids):
            ids = [it.ids[j] for it in its]
            got = [n for n in ids if n is not None]   # (a tail may lack the position)
            if n0 in its[0].defs:
                # Same shapes and dtypes in every iteration: a literal that varies is then
                # an index or a slice bound, never a shape.
                v0 = self.values.get(n0)
                if not all(n in it.defs for n, it in zip(ids, its) if n is not None) or (
                        v0 is not None and any((self.values[n].shape, self.values[n].dtype)
                                               != (v0.shape, v0.dtype) for n in got)):
                    return self._fail(f"%{n0}: defined in some iterations only, or reshaped")
                kinds.append(("local",))
                continue
            if any(n in all_defs for n in ids[:1]):
                return self._fail(f"%{n0}: iteration 0 reads a value of a later iteration")
            if all(n == n0 for n in got):
                kinds.append(("inv",))
                continue
            q = first.get(ids[1])
            if q is not None and ids[1] in its[0].defs and self._same_type(ids[1], n0) and all(
                    ids[k] is None or its[k - 1].ids[q] == ids[k] for k in range(1, len(its))):
                kinds.append(("carry", q))
                continue
            if any(n in all_defs for n in got):
                return self._fail(f"%{n0}: read from an iteration other than the previous one")
            src = self._import_source(ids) if tail is None else self._tail_import(ids)
            if src is None:
                return self._fail(f"%{n0}: per-iteration values from mixed sources")
            kinds.append(("import", src))
        for j in range(len(its[0].slots)):
            seq = [it.slots[j] for it in full]
            ab = _affine(seq)
            if ab is None:
                return self._fail("a constant slot that is not affine in the iteration")
            if tail is not None and tail.slots[j] is not None:
                if tail.slots[j] != ab[0] + ab[1] * last:
                    return self._fail("the tail's constant slot is not the next one")
                seq = seq + [tail.slots[j]]
            if len({self.const_types[s] for s in seq}) != 1:
                return self._fail("a constant slot whose type changes with the iteration")
        for j in range(len(its[0].lits)):
            ab = _affine([it.lits[j] for it in full])
            t = None if tail is None else tail.lits[j]
            if ab is None or (tail is not None and (
                    t != ab[0] + ab[1] * last if t is not None else ab[1] != 0)):
                return self._fail("an integer literal that is not affine in the iteration")
        # A tail joins only if it needs no stack of its own: a stack costs a store in every
        # iteration, more than the tail's lines outside the loop.
        if tail is not None and any(
                kd[0] == "local" and tail.ids[j] is not None and self._outside([tail.ids[j]], lo, hi)
                and not _last_only(self, kinds, j, its, lo, hi) for j, kd in enumerate(kinds)):
            return self._fail("the tail's values would need a stack")
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
            self.stack_len[name] = len(ids)
            for k, n in enumerate(ids):
                self.stacks[n] = (name, k)
            return ("stack", name, (0, 1))
        return ("tuple", ids)

    def _tail_import(self, ids):
        """An import source for a run with a tail (``ids[-1]``; None: the tail does not read
        it, but the iteration does, unused). The tail reads the same source one step
        further, or, one before a stack's first entry, that stack's carry start."""
        full, last = ids[:-1], ids[-1]
        if last is not None:
            src = self._import_source(ids)
            if src is not None:
                return src
        src = self._import_source(full)
        if src is None or src[0] != "stack":
            return None
        name, (a, b) = src[1], src[2]
        k = a + b * len(full)
        if last is None and 0 <= k < self.stack_len.get(name, 0):
            return src
        init = self.stack_init.get(name)
        if k == -1 and init is not None and last in (None, init) and self._same_type(init, full[0]):
            return src + (init,)
        return None

    def _outside(self, ids, lo, hi):
        """Iterations whose value is read outside blocks [lo, hi) or returned."""
        return [k for k, n in enumerate(ids) if n is not None and (
            n in self.out_ids or any(b < lo or b >= hi for b in self.readers.get(n, ())))]

    # -- emission --------------------------------------------------------------------
    def _accept(self, r, start, its, kinds, hi):
        """Register the run's stacks (later runs import from them) and its blocks."""
        lo = start
        exports = {}
        for j, kd in enumerate(kinds):
            ids = [it.ids[j] for it in its]
            if kd[0] == "local" and self._outside(ids, lo, hi) and \
                    not _last_only(self, kinds, j, its, lo, hi):
                exports[j] = f"S{r}_{j}"
                self.stack_len[exports[j]] = len(its)
                starts = [its[0].ids[c] for c, kc in enumerate(kinds) if kc == ("carry", j)]
                if starts:   # the value before entry 0: where the carry it feeds starts
                    self.stack_init[exports[j]] = starts[0]
                for kk, n in enumerate(ids):
                    if n is not None:
                        self.stacks[n] = (exports[j], kk)
            elif kd[0] in ("inv", "carry"):
                self.by_name.add(ids[0])     # read by its name in the entry: must exist there
            elif kd[0] == "import" and kd[1][0] == "tuple":
                self.by_name.update(kd[1][1])
            elif kd[0] == "import" and len(kd[1]) > 3:
                self.by_name.add(kd[1][3])   # a carry start, read by name in the last iteration
        for b in range(lo, hi):
            self.in_run[b] = r
        return exports

    def _emit(self, r, start, p, its, kinds, exports, hi):
        T, k = len(its), f"it{r}"
        lo = start
        full = [it for it in its if not it.partial]
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
                        if n is not None and (n in self.out_ids or n in self.by_name or any(
                                self.in_run[b] is None and (b < lo or b >= hi)
                                for b in self.readers.get(n, ()))):
                            post.append(f"    v{n} = {s}[{kk}]")
            elif kd[0] == "carry":
                name = f"C{r}_{j}"
                pre.append(f"    {name} = v{n0}")
                last = its[-1].ids[kd[1]]
                if last is not None and _last_only(self, kinds, kd[1], its, lo, hi) and \
                        f"    v{last} = {name}" not in post:
                    post.append(f"    v{last} = {name}")
                rename[n0] = name
                tail.append(f"        {name} = v{it0.ids[kd[1]]}_")
            elif kd[0] == "import":
                rename[n0] = None
                src = kd[1]
                if src[0] == "stack":
                    (a, b) = src[2]
                    read = f"{src[1]}[{a} + {b} * {k}]"
                    if len(src) > 3:   # the tail's read before entry 0: the carry start
                        read = f"{read} if {k} < {T - 1} else v{src[3]}"
                    head.append(f"        v{n0}_ = {read}")
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
        top = len(self.const_types) - 1
        for j, c0 in enumerate(it0.slots):
            a, b = _affine([it.slots[j] for it in full])
            if b:
                crename[c0] = f"c{c0}_"
                at = f"{a} + {b} * {k}"
                if not 0 <= a + b * (T - 1) <= top:   # a tail's missing line: read, unused;
                    # the slot before it, a plain branch (min/max are overloads Numba
                    # compiles in every process, uncached)
                    at = f"{at} if {k} < {T - 1} else {a + b * (T - 2)}"
                head.append(f"        c{c0}_ = {const_read(self.const_types[c0], at)}")

        def sub(m):
            kind, num = m.group(1), int(m.group(2))
            if kind == "c":
                return crename.get(num, m.group(0))
            if num in rename:   # a carry's name stands for its array (v), not for a
                r = rename[num]  # hoisted element of it (h): that one stays loop-local
                return r if r and kind == "v" else f"{kind}{num}_"
            return m.group(0)
        lits = [_affine([it.lits[j] for it in full]) for j in range(len(it0.lits))]
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
        part = f", the last one partial (steps {lo + p * (T - 1)}..{hi - 1})" if len(full) < T else ""
        title = (f"    # rolled: {T} iterations of a {p}-step body (steps {lo}..{hi - 1}{part}); "
                 f"iteration 0 shown, loop-local names end in '_'")
        lines = [title, *pre, f"    for {k} in range({T}):", *head, *body, *tail, *post]
        return Rolled(lines, any(b.parallel for b in self.blocks[lo:hi]))

    def roll(self):
        keys = [c[0] for c in self.canons]
        plan = []
        runs = _find_runs(keys)
        for i, (start, p, reps) in enumerate(runs):
            after = runs[i + 1][0] if i + 1 < len(runs) else len(self.blocks)
            for d0, d1 in ((0, 0), (1, 0), (0, 1), (1, 1), (2, 0), (0, 2), (2, 2)):
                s, t = start + d0 * p, reps - d0 - d1
                if t < MIN_REPS:
                    continue
                its, hi = self._iters(s, p, t), s + p * t
                # with a tail (the longest that classifies), else without
                tails = [(q, self._tail(s, p, hi, q)) for q in range(min(p, after - hi), 0, -1)] \
                    if not d1 else []
                for q, its_hi in [(q, (its + [tl], hi + q)) for q, tl in tails if tl] + [(0, (its, hi))]:
                    kinds = self._classify(its_hi[0], s, its_hi[1])
                    if kinds is not None:
                        break
                if kinds is not None:
                    r = len(plan)
                    plan.append((s, p, its_hi[0], kinds, its_hi[1],
                                 self._accept(r, s, its_hi[0], kinds, its_hi[1])))
                    break
        items, at = [], 0
        for r, (s, p, its, kinds, hi, exports) in enumerate(plan):
            items.extend(self.blocks[at:s])
            items.append(self._emit(r, s, p, its, kinds, exports, hi))
            at = hi
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
