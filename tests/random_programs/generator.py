"""Random small NumPy programs, their NumPy/finite-difference oracle, and the check of
gradjit against it.

A program is data: input names, shapes and values, then a list of ``Step``s (one
vocabulary construct each, with the Python source lines it stands for), then a scalar
loss over every value no later step reads.  The same data

- runs as plain NumPy (``Program.function()`` executes the rendered source with ``np``),
- renders to readable source (``Program.source()``, ``Program.repro()``), and
- is traced by gradjit (``gj.jit`` / ``gj.grad`` of that same function).

Programs are built by ``build_program(drawer)``, where a drawer supplies the random
choices: ``RandomDrawer`` (``random.Random``; the fast CLI in bench/random_programs.py)
or ``HypothesisDrawer`` (``programs()``, a hypothesis strategy for the test suite).
While a program is built every step is run in NumPy on the drawn inputs, and a step is
kept only when its value is finite, not huge, not empty, and away from kinks
(``abs``, ``maximum``, ``sort``, ``max``, ``clip`` ... see ``_DELTA``).

``check_program(prog)`` is the oracle: gradjit's forward equals NumPy's, its gradient
w.r.t. every input equals central finite differences (two 4-point stencils that must
agree first; otherwise the program is discarded).  ``GradjitError``s are refusals;
every other exception is a crash; a wrong number is a failure.

Vocabulary features are named (``Cand.feature``, e.g. ``"reduce.var"``,
``"index.bool_mask"``); ``build_program(..., exclude=...)`` leaves out the features
listed, and ``KNOWN_BUGS`` maps the features that currently hit a gradjit bug to a
description of that bug: CI excludes them, ``bench/random_programs.py --all`` keeps them.
"""
from __future__ import annotations

import contextlib
import linecache
import os
import random
import re
import warnings
import zlib
from dataclasses import dataclass, field

import numpy as np

# feature (or feature prefix) -> the gradjit bug it hits.  CI leaves these out; the CLI
# includes them with --all.  Remove an entry once the bug is fixed.
KNOWN_BUGS: dict[str, str] = {}

_DELTA = 0.01          # least distance of a value from a kink (abs, max ties, clip bounds ...)
_MAX_ABS = 1e3         # largest magnitude of any intermediate value
_MAX_SIZE = 120        # largest number of elements of any intermediate value
_MAX_NDIM = 4


# ----------------------------------------------------------------------------- drawers

class RandomDrawer:
    """Random choices from ``random.Random(seed)`` (fast, for the CLI)."""

    def __init__(self, seed):
        self.r = random.Random(seed)

    def int(self, lo, hi):
        return self.r.randint(lo, hi)

    def choice(self, seq):
        seq = list(seq)
        return seq[self.r.randrange(len(seq))]

    def bool(self, p=0.5):
        return self.r.random() < p

    def weighted(self, pairs):
        items, weights = zip(*pairs)
        return self.r.choices(items, weights=weights)[0]


class HypothesisDrawer:
    """Random choices drawn through hypothesis (``draw`` of an ``st.composite``)."""

    def __init__(self, draw):
        from hypothesis import strategies as st
        self.draw, self.st = draw, st

    def int(self, lo, hi):
        return self.draw(self.st.integers(lo, hi))

    def choice(self, seq):
        seq = list(seq)
        return seq[self.draw(self.st.integers(0, len(seq) - 1))]

    def bool(self, p=0.5):
        return self.draw(self.st.integers(0, 999)) < int(p * 1000)

    def weighted(self, pairs):
        total = sum(w for _, w in pairs)
        k = self.draw(self.st.integers(0, total - 1))
        for item, w in pairs:
            if k < w:
                return item
            k -= w
        return pairs[-1][0]


# ----------------------------------------------------------------------------- program

@dataclass
class Step:
    feature: str          # vocabulary name, e.g. "ufunc.tanh"
    out: str              # the value this step assigns
    reads: tuple          # names of the values it reads
    src: str              # Python source lines (may be several) assigning ``out``


@dataclass
class Program:
    input_names: list
    inputs: list          # float64 arrays
    steps: list
    loss_terms: list      # [(value name, weight source)]
    seed: int = 0
    features: set = field(default_factory=set)
    register_source: bool = True   # False: exec'd without linecache (as python -c / stdin)

    # -- rendering
    def body_lines(self):
        lines = []
        for s in self.steps:
            lines.extend(s.src.split("\n"))
        terms = []
        for name, w in self.loss_terms:
            terms.append(f"({name} * {w}).sum()")
        lines.append("return " + " + ".join(terms))
        return lines

    def source(self, name="f"):
        args = ", ".join(self.input_names)
        return f"def {name}({args}):\n" + "\n".join("    " + ln for ln in self.body_lines()) + "\n"

    def inputs_source(self):
        out = []
        for n, a in zip(self.input_names, self.inputs):
            a = np.asarray(a)
            out.append(f"{n} = np.array({a.tolist()!r})" if a.ndim else f"{n} = np.array({float(a)!r})")
        return "\n".join(out)

    def repro(self, note=""):
        """A self-contained script that shows the problem."""
        names = ", ".join(self.input_names)
        nums = ", ".join(str(i) for i in range(len(self.inputs)))
        head = "".join(f"# {ln}\n" for ln in note.strip().splitlines()) if note else ""
        if not self.register_source:   # as python -c or stdin: no source for the function
            body = (f"src = \'\'\'\n{self.source()}\'\'\'\n"
                    f"exec(compile(src, '<generated>', 'exec'))   # source not in linecache\n")
        else:
            body = self.source()
        return (f"{head}import numpy as np\nimport gradjit as gj\n\n{body}\n"
                f"{self.inputs_source()}\n"
                f"print(f({names}), gj.jit(f)({names}))\n"
                f"print(gj.grad(f, argnums=({nums},))({names}))\n")

    # -- execution
    def function(self, name="f"):
        """The program as a Python function. Its source is registered in ``linecache``
        (as IPython does for a cell), so it reads like code from a file: error messages
        quote its lines, and gradjit's source-reading paths see it."""
        src = self.source(name)
        filename = f"<random program {self.seed}-{zlib.crc32(src.encode()):08x}>"
        if self.register_source:
            linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
        ns = {"np": np, "gj": _gj()}
        exec(compile(src, filename, "exec"), ns)
        return ns[name]

    def with_loss_on(self, names):
        """The same program, with its loss over ``names`` only and the steps those
        values do not need dropped (for shrinking)."""
        need, keep = set(names), []
        for s in reversed(self.steps):
            if s.out in need:
                keep.append(s)
                need.update(s.reads)
        keep.reverse()
        weights = dict(self.loss_terms)
        terms = [(n, weights.get(n) or _weight_src(_value_shape(self, n), 0)) for n in names]
        feats = {s.feature for s in keep} | (set() if self.register_source else {"program.no_source"})
        return Program(list(self.input_names), list(self.inputs), keep, terms, self.seed,
                       feats, self.register_source)


def _value_shape(prog, name):
    ns = {"np": np, "gj": _gj()}
    ns.update(zip(prog.input_names, [np.array(a) for a in prog.inputs]))
    for s in prog.steps:
        exec(s.src, ns)
        if s.out == name:
            break
    return np.shape(ns[name])


def _weight_src(shape, k):
    lo, hi = [(-1.1, 1.3), (0.5, 1.5), (-0.7, 0.9), (1.2, -0.4)][k % 4]
    n = int(np.prod(shape, dtype=int))
    if shape == ():
        return repr([1.3, -0.8, 0.6, 1.7][k % 4])
    if n == 1:
        return f"np.full({shape!r}, {lo!r})"
    return f"np.linspace({lo}, {hi}, {n}).reshape({shape!r})"


# ----------------------------------------------------------------------------- builder

@dataclass
class Cand:
    feature: str
    src: str                      # uses {o} for the output name
    reads: tuple
    margins: tuple = ()           # callables ns -> array of distances to kinks; exact
    #                               zeros are ties of copies or locally constant values (fine)
    strict: tuple = ()            # the same, exact zeros included (kinks such as hypot(0, 0)
    #                               whose chain rule gives 0/0 even where the value is constant)


class _Reject(Exception):
    pass


class Builder:
    def __init__(self, d, exclude=()):
        self.d = d
        self.exclude = tuple(exclude)
        self.env = {}             # name -> value
        self.order = []           # names, in creation order
        self.steps = []
        self.n = 0

    def ok(self, feature):
        return not any(feature == e or feature.startswith(e + ".") for e in self.exclude)

    # -- choosing values
    def pick(self, pred=lambda v: True, avoid=()):
        names = [n for n in self.order if n not in avoid and pred(self.env[n])]
        if not names:
            return None
        if self.d.bool(0.55):
            return names[-1]
        return self.d.choice(names)

    def shape(self, n):
        return np.shape(self.env[n])

    def ndim(self, n):
        return np.ndim(self.env[n])

    def val(self, n):
        return np.asarray(self.env[n])

    def axis(self, nd, allow_none=True, allow_tuple=True):
        """An axis argument's source for an array of ndim ``nd``: None, int (maybe
        negative) or tuple; ``None`` only for 0-d."""
        opts = []
        if allow_none:
            opts.append("none")
        if nd >= 1:
            opts += ["int", "int", "neg"]
        if nd >= 2 and allow_tuple:
            opts.append("tuple")
        kind = self.d.choice(opts) if opts else "none"
        if kind == "none":
            return None
        if kind == "int":
            return self.d.int(0, nd - 1)
        if kind == "neg":
            return self.d.int(-nd, -1)
        k = self.d.int(2 if nd > 2 else 2, nd)
        axes = list(range(nd))
        chosen = []
        for _ in range(k):
            a = self.d.choice(axes)
            axes.remove(a)
            chosen.append(a if self.d.bool(0.7) else a - nd)
        return tuple(chosen)

    # -- adding a step
    def try_add(self, cand):
        out = f"v{self.n + 1}"
        src = cand.src.replace("{o}", out)
        ns = {"np": np, "gj": _gj()}
        ns.update(self.env)
        try:
            with np.errstate(all="raise"), warnings.catch_warnings():
                warnings.simplefilter("error")
                exec(src, ns)
        except Exception:
            return False
        val = ns[out]
        arr = np.asarray(val)
        if arr.dtype != np.float64 or arr.ndim > _MAX_NDIM or arr.size == 0 or arr.size > _MAX_SIZE:
            return False
        if not np.all(np.isfinite(arr)) or np.max(np.abs(arr)) > _MAX_ABS:
            return False
        for m in cand.margins:
            try:
                with np.errstate(all="ignore"):
                    dist = np.abs(np.asarray(m(ns), dtype=float)).ravel()
            except Exception:
                return False
            dist = dist[dist != 0]          # exact ties/zeros: copies of one value (fine)
            if dist.size and dist.min() < _DELTA:
                return False
        for m in cand.strict:
            try:
                with np.errstate(all="ignore"):
                    dist = np.abs(np.asarray(m(ns), dtype=float)).ravel()
            except Exception:
                return False
            if dist.size and dist.min() < _DELTA:
                return False
        if isinstance(val, np.ndarray) and not val.flags.owndata and val.base is not None:
            val = val.copy()                # (a view: later steps never write it anyway)
        self.n += 1
        self.env[out] = val
        self.order.append(out)
        self.steps.append(Step(cand.feature, out, tuple(cand.reads), src))
        return True


# ----------------------------------------------------------------------------- inputs

def _draw_shape(d, max_size=20):
    nd = d.weighted([(0, 1), (1, 3), (2, 4), (3, 2)])
    while True:
        shape = tuple(d.weighted([(1, 2), (2, 3), (3, 3), (4, 3), (5, 2)]) for _ in range(nd))
        if int(np.prod(shape, dtype=int)) <= max_size:
            return shape
        nd = max(nd - 1, 0) if d.bool(0.3) else nd


def _related_shape(d, base):
    kind = d.weighted([("same", 4), ("broadcast", 4), ("other", 2)])
    if kind == "same":
        return base
    if kind == "other":
        return _draw_shape(d)
    drop = d.int(0, len(base))
    s = list(base[drop:])
    for i in range(len(s)):
        if d.bool(0.3):
            s[i] = 1
    return tuple(s)


def _draw_values(seed, shapes):
    """Distinct values away from 0 and from each other (few accidental ties and kinks)."""
    rng = np.random.default_rng(seed)
    sizes = [int(np.prod(s, dtype=int)) for s in shapes]
    total = sum(sizes)
    grid = np.concatenate([np.linspace(-2.4, -0.15, 46), np.linspace(0.15, 2.4, 46)])
    step = grid[1] - grid[0]
    idx = rng.choice(grid.size, size=total, replace=False)
    vals = grid[idx] + rng.uniform(-0.3, 0.3, size=total) * step
    out, k = [], 0
    for s, n in zip(shapes, sizes):
        out.append(np.array(vals[k:k + n].reshape(s), dtype=np.float64))
        k += n
    return out


# ----------------------------------------------------------------------------- vocabulary
#
# Each generator takes the Builder and returns a Cand (or None when nothing fits).

def _f(x):
    return repr(float(x))


def _bshape(a, b):
    try:
        return np.broadcast_shapes(a, b)
    except ValueError:
        return None


_UNARY = [
    ("ufunc.tanh", "np.tanh({a})", None),
    ("ufunc.sin", "np.sin({a})", None),
    ("ufunc.cos", "np.cos({a})", None),
    ("ufunc.exp", "np.exp({a})", None),
    ("ufunc.exp_neg_sq", "np.exp(-{a} ** 2)", None),
    ("ufunc.log_sq1", "np.log({a} ** 2 + 1)", None),
    ("ufunc.log1p_exp", "np.log1p(np.exp({a}))", None),
    ("ufunc.sqrt_sq1", "np.sqrt({a} ** 2 + 1)", None),
    ("ufunc.arctan", "np.arctan({a})", None),
    ("ufunc.sigmoid", "1 / (1 + np.exp(-{a}))", None),
    ("ufunc.square", "np.square({a})", None),
    ("ufunc.neg", "-{a}", None),
    ("ufunc.expm1", "np.expm1({a})", None),
    ("ufunc.sinh", "np.sinh({a})", None),
    ("ufunc.cosh", "np.cosh({a})", None),
    ("ufunc.abs", "np.abs({a})", "zero"),
    ("ufunc.abs_method", "abs({a})", "zero"),
    ("ufunc.relu", "np.maximum({a}, 0.0)", "zero"),
    ("ufunc.leaky_relu", "np.where({a} > 0, {a}, 0.1 * {a})", "zero"),
    ("ufunc.sign_mul", "np.sign({a}) * {a} ** 2", "zero"),
    ("ufunc.log_pos", "np.log({a})", "pos"),
    ("ufunc.sqrt_pos", "np.sqrt({a})", "pos"),
    ("ufunc.log_abs", "np.log(np.abs({a}))", "zero"),
    ("ufunc.reciprocal", "1.0 / {a}", "zero"),
    ("ufunc.reciprocal_np", "np.reciprocal({a})", "zero"),
]

_POWERS = ["2", "3", "0.5", "1.5", "-1", "-0.5", "2.5", "4"]


def g_unary(b):
    feat, tmpl, kink = b.d.choice(_UNARY)
    if not b.ok(feat):
        return None
    a = b.pick()
    margins = ()
    if kink == "zero":
        margins = (lambda ns, a=a: ns[a],)
    elif kink == "pos":
        if np.min(b.val(a)) < 0.05:
            return None
    return Cand(feat, "{o} = " + tmpl.format(a=a), (a,), margins)


def g_power(b):
    a = b.pick()
    p = b.d.choice(_POWERS)
    form = b.d.choice(["pow_sq1", "np_power", "pos_base", "int_pow"])
    if form == "pow_sq1":
        src = f"{{o}} = ({a} ** 2 + 0.5) ** {p}"
    elif form == "np_power":
        src = f"{{o}} = np.power({a} * {a} + 1, {p})"
    elif form == "pos_base":
        if np.min(b.val(a)) < 0.1:
            return None
        src = f"{{o}} = {a} ** {p}"
    else:
        src = f"{{o}} = {a} ** {b.d.choice(['2', '3', '4'])}"
    feat = "power." + form
    return Cand(feat, src, (a,)) if b.ok(feat) else None


def g_scalar_arith(b):
    a = b.pick()
    c = _f(b.d.choice([0.5, 1.25, 2.0, -1.5, 3.0, 0.75]))
    form = b.d.choice(["{a} * {c}", "{c} * {a}", "{a} + {c}", "{c} - {a}", "{a} - {c}",
                       "{a} / {c}", "{c} / ({a} ** 2 + 1)", "{a} * 2", "1 - {a}"])
    feat = "arith.scalar"
    return Cand(feat, "{o} = " + form.format(a=a, c=c), (a,)) if b.ok(feat) else None


_BINARY = [
    ("arith.add", "{a} + {b}", None, True),
    ("arith.sub", "{a} - {b}", None, False),
    ("arith.mul", "{a} * {b}", None, True),
    ("arith.div_sq1", "{a} / ({b} ** 2 + 1)", None, True),
    ("arith.div_tanh", "{a} / (1.5 + np.tanh({b}))", None, True),
    ("arith.div_exp", "{a} / np.exp({b})", None, True),
    ("arith.np_add", "np.add({a}, {b})", None, True),
    ("arith.np_multiply", "np.multiply({a}, {b})", None, True),
    ("arith.np_subtract", "np.subtract({a}, {b})", None, False),
    ("arith.np_divide", "np.divide({a}, {b} ** 2 + 0.5)", None, True),
    ("ufunc.maximum", "np.maximum({a}, {b})", "diff", False),
    ("ufunc.minimum", "np.minimum({a}, {b})", "diff", False),
    ("ufunc.where_gt", "np.where({a} > {b}, {a}, {b})", "diff", False),
    ("ufunc.where_lt_mix", "np.where({a} < {b}, {a} * {b}, {a} - {b})", "diff", False),
    ("ufunc.arctan2", "np.arctan2({a}, {b})", "rad", False),
    ("ufunc.hypot", "np.hypot({a}, {b})", "rad", False),
    ("ufunc.sq_plus", "{a} ** 2 + {b}", None, True),
    ("ufunc.fmax", "np.fmax({a}, {b})", "diff", False),
]


def g_binary(b):
    feat, tmpl, kink, self_ok = b.d.choice(_BINARY)
    if not b.ok(feat):
        return None
    a = b.pick()
    sa = b.shape(a)
    if b.d.bool(0.15) and self_ok:
        c = a
    else:
        c = b.pick(lambda v: _bshape(np.shape(v), sa) is not None, avoid=(a,))
        if c is None:
            return None
    if b.d.bool(0.5):
        a, c = c, a
    margins, strict = (), ()
    if kink == "diff":
        margins = (lambda ns, a=a, c=c: ns[a] - ns[c],)
    elif kink == "rad":
        strict = (lambda ns, a=a, c=c: np.hypot(ns[a], ns[c]),)
    return Cand(feat, "{o} = " + tmpl.format(a=a, b=c), (a, c), margins, strict)


def _axis_src(ax):
    return repr(ax)


def _top2_gap(x, axis, largest=True):
    """Gap between the largest (smallest) value and the next different one along axis
    (None, int or tuple)."""
    x = np.asarray(x)
    if x.ndim == 0:
        return np.array([1.0])
    axes = tuple(range(x.ndim)) if axis is None else (
        (axis,) if isinstance(axis, int) else tuple(axis))
    axes = tuple(a % x.ndim for a in axes)
    rows = np.moveaxis(x, axes, tuple(range(x.ndim - len(axes), x.ndim)))
    rows = rows.reshape(-1, int(np.prod([x.shape[a] for a in axes], dtype=int)))
    gaps = []
    for row in rows:
        top = row.max() if largest else row.min()
        rest = row[row != top]
        if rest.size:
            gaps.append(abs(top - (rest.max() if largest else rest.min())))
    return np.array(gaps or [1.0])


def _sorted_gaps(x, axis):
    x = np.asarray(x)
    if axis is None:
        x, axis = x.ravel(), 0
    s = np.sort(x, axis=axis)
    return np.diff(s, axis=axis)


_REDUCE = ["sum", "mean", "max", "min", "prod", "std", "var", "amax", "amin"]


def g_reduce(b):
    fn = b.d.choice(_REDUCE)
    a = b.pick()
    nd = b.ndim(a)
    form = b.d.weighted([("np", 5), ("method", 4), ("positional", 1)])
    if fn in ("amax", "amin") and form == "method":
        form = "np"
    ax = b.axis(nd)
    keep = b.d.bool(0.3)
    ddof = 1 if fn in ("std", "var") and b.d.bool(0.35) else 0
    feat = f"reduce.{fn}"
    if isinstance(ax, tuple):
        feat += ".axis_tuple"
    if not b.ok(feat) or (keep and not b.ok("reduce.keepdims")):
        return None
    kw = []
    if form == "positional" and ax is not None:
        args = [_axis_src(ax)]
    else:
        args = []
        if ax is not None or b.d.bool(0.2):
            kw.append(f"axis={_axis_src(ax)}")
    if ddof:
        kw.append("ddof=1")
    if keep:
        kw.append("keepdims=True")
    allargs = ", ".join(args + kw)
    if form == "method":
        src = f"{{o}} = {a}.{fn}({allargs})"
    else:
        src = f"{{o}} = np.{fn}({a}{', ' + allargs if allargs else ''})"
    margins, strict = (), ()
    if fn in ("max", "amax", "min", "amin"):
        margins = (lambda ns, a=a, ax=ax, lg=fn in ("max", "amax"): _top2_gap(ns[a], ax, lg),)
    elif fn == "std":
        strict = (_out_margin,)      # away from std == 0 (sqrt's kink)
    if fn == "prod" and b.val(a).size > 12:
        return None
    return Cand(feat, src, (a,), margins, strict)


def _out_margin(ns):
    """The newest value (this step's output)."""
    name = max((k for k in ns if re.fullmatch(r"v\d+", k)), key=lambda k: int(k[1:]))
    return np.asarray(ns[name])


def g_norm(b):
    a = b.pick()
    nd = b.ndim(a)
    form = b.d.choice(["full", "axis", "ord1", "fro", "keep"])
    if form == "full":
        src = f"{{o}} = np.linalg.norm({a})"
    elif form == "axis":
        if nd < 1:
            return None
        src = f"{{o}} = np.linalg.norm({a}, axis={b.d.int(-nd, nd - 1)})"
    elif form == "keep":
        if nd < 1:
            return None
        src = f"{{o}} = np.linalg.norm({a}, axis={b.d.int(-nd, nd - 1)}, keepdims=True)"
    elif form == "ord1":
        if nd != 1:
            return None
        src = f"{{o}} = np.linalg.norm({a}, ord=1)"
    else:
        if nd != 2:
            return None
        src = f"{{o}} = np.linalg.norm({a}, 'fro')"
    feat = "linalg.norm." + form
    if form == "ord1":
        return Cand(feat, src, (a,), (lambda ns, a=a: ns[a],)) if b.ok(feat) else None
    return Cand(feat, src, (a,), (), (_out_margin,)) if b.ok(feat) else None


def g_cum(b):
    fn = b.d.choice(["cumsum", "cumprod"])
    a = b.pick()
    nd = b.ndim(a)
    if fn == "cumprod" and b.val(a).size > 10:
        return None
    form = b.d.choice(["np_axis", "np_flat", "method"])
    if form == "np_flat" or nd == 0:
        src = f"{{o}} = np.{fn}({a})"
        form = "np_flat"
    elif form == "np_axis":
        src = f"{{o}} = np.{fn}({a}, axis={b.d.int(-nd, nd - 1)})"
    else:
        src = f"{{o}} = {a}.{fn}(axis={b.d.int(-nd, nd - 1)})"
    feat = f"cum.{fn}.{form}"
    return Cand(feat, src, (a,)) if b.ok(feat) else None


def g_sort(b):
    a = b.pick(lambda v: np.ndim(v) >= 1)
    if a is None:
        return None
    nd = b.ndim(a)
    form = b.d.choice(["default", "axis", "none", "inplace"])
    if form == "default":
        src, ax = f"{{o}} = np.sort({a})", -1
    elif form == "axis":
        ax = b.d.int(-nd, nd - 1)
        src = f"{{o}} = np.sort({a}, axis={ax})"
    elif form == "none":
        src, ax = f"{{o}} = np.sort({a}, axis=None)", None
    else:
        ax = b.d.int(-nd, nd - 1)
        src = f"{{o}} = {a}.copy()\n{{o}}.sort(axis={ax})"
    feat = "sort." + form
    return Cand(feat, src, (a,), (lambda ns, a=a, ax=ax: _sorted_gaps(ns[a], ax),)) \
        if b.ok(feat) else None


def g_softmax(b):
    a = b.pick(lambda v: np.ndim(v) >= 1)
    if a is None:
        return None
    nd = b.ndim(a)
    ax = b.d.int(-nd, nd - 1)
    form = b.d.choice(["softmax", "log_softmax", "logsumexp", "softmax_all"])
    if form == "softmax":
        src = (f"{{o}}_e = np.exp({a} - {a}.max(axis={ax}, keepdims=True))\n"
               f"{{o}} = {{o}}_e / {{o}}_e.sum(axis={ax}, keepdims=True)")
    elif form == "log_softmax":
        src = (f"{{o}}_m = np.max({a}, axis={ax}, keepdims=True)\n"
               f"{{o}} = {a} - {{o}}_m - np.log(np.sum(np.exp({a} - {{o}}_m), axis={ax}, keepdims=True))")
    elif form == "logsumexp":
        src = (f"{{o}}_m = {a}.max()\n"
               f"{{o}} = {{o}}_m + np.log(np.exp({a} - {{o}}_m).sum())")
    else:
        src = f"{{o}} = np.exp({a}) / np.sum(np.exp({a}))"
    feat = "composite." + form
    return Cand(feat, src, (a,)) if b.ok(feat) else None


def g_clip(b):
    a = b.pick()
    v = b.val(a).ravel()
    lo, hi = np.quantile(v, [0.2, 0.8]) if v.size > 2 else (v.min() - 0.5, v.max() + 0.5)
    lo, hi = round(float(lo) - 0.013, 3), round(float(hi) + 0.017, 3)
    if lo >= hi:
        return None
    form = b.d.choice(["np", "method", "lower_only", "upper_only"])
    if form == "np":
        src = f"{{o}} = np.clip({a}, {lo!r}, {hi!r})"
    elif form == "method":
        src = f"{{o}} = {a}.clip({lo!r}, {hi!r})"
    elif form == "lower_only":
        src = f"{{o}} = np.clip({a}, {lo!r}, None)"
    else:
        src = f"{{o}} = np.clip({a}, None, {hi!r})"
    feat = "clip." + form
    return Cand(feat, src, (a,), (lambda ns, a=a: ns[a] - lo, lambda ns, a=a: ns[a] - hi)) \
        if b.ok(feat) else None


def _factor_shape(d, size):
    """A random shape of ``size`` elements (1-3 dims, maybe size-1 dims)."""
    dims, rest = [], size
    ndims = d.int(1, 3)
    for _ in range(ndims - 1):
        divs = [k for k in range(1, rest + 1) if rest % k == 0]
        k = d.choice(divs)
        dims.append(k)
        rest //= k
    dims.append(rest)
    return tuple(dims)


def g_reshape(b):
    a = b.pick()
    size = b.val(a).size
    form = b.d.choice(["method", "np", "varargs", "minus1", "ravel", "flatten", "flat_m1"])
    new = _factor_shape(b.d, size)
    if form in ("minus1",):
        i = b.d.int(0, len(new) - 1)
        new = tuple(-1 if j == i else s for j, s in enumerate(new))
    if form == "method":
        src = f"{{o}} = {a}.reshape({new!r})"
    elif form == "np":
        src = f"{{o}} = np.reshape({a}, {new!r})"
    elif form == "varargs":
        src = f"{{o}} = {a}.reshape({', '.join(map(str, new))})"
    elif form == "minus1":
        src = f"{{o}} = {a}.reshape({new!r})"
    elif form == "ravel":
        src = f"{{o}} = {b.d.choice(['np.ravel(' + a + ')', a + '.ravel()'])}"
    elif form == "flatten":
        src = f"{{o}} = {a}.flatten()"
    else:
        src = f"{{o}} = {a}.reshape(-1)"
    feat = "shape.reshape." + form
    return Cand(feat, src, (a,)) if b.ok(feat) else None


def g_transpose(b):
    a = b.pick(lambda v: np.ndim(v) >= 2)
    if a is None:
        return None
    nd = b.ndim(a)
    perm = list(range(nd))
    for i in range(nd - 1, 0, -1):
        j = b.d.int(0, i)
        perm[i], perm[j] = perm[j], perm[i]
    perm = tuple(perm)
    form = b.d.choice(["T", "np", "np_axes", "method_axes", "method_varargs", "swapaxes",
                       "swapaxes_method", "moveaxis"])
    if form == "T":
        src = f"{{o}} = {a}.T"
    elif form == "np":
        src = f"{{o}} = np.transpose({a})"
    elif form == "np_axes":
        src = f"{{o}} = np.transpose({a}, {perm!r})"
    elif form == "method_axes":
        src = f"{{o}} = {a}.transpose({perm!r})"
    elif form == "method_varargs":
        src = f"{{o}} = {a}.transpose({', '.join(map(str, perm))})"
    elif form in ("swapaxes", "swapaxes_method"):
        i, j = b.d.int(-nd, nd - 1), b.d.int(-nd, nd - 1)
        src = (f"{{o}} = np.swapaxes({a}, {i}, {j})" if form == "swapaxes"
               else f"{{o}} = {a}.swapaxes({i}, {j})")
    else:
        i, j = b.d.int(-nd, nd - 1), b.d.int(-nd, nd - 1)
        src = f"{{o}} = np.moveaxis({a}, {i}, {j})"
    feat = "shape.transpose." + form
    return Cand(feat, src, (a,)) if b.ok(feat) else None


def g_expand_squeeze(b):
    form = b.d.choice(["expand_dims", "none_index", "none_mid", "squeeze", "squeeze_axis",
                       "squeeze_method", "broadcast_to", "atleast_2d"])
    if form.startswith("squeeze"):
        a = b.pick(lambda v: 1 in np.shape(v))
        if a is None:
            return None
        ones = [i for i, s in enumerate(b.shape(a)) if s == 1]
        k = b.d.choice(ones)
        if b.d.bool(0.4):
            k -= b.ndim(a)
        src = {"squeeze": f"{{o}} = np.squeeze({a})",
               "squeeze_axis": f"{{o}} = np.squeeze({a}, axis={k})",
               "squeeze_method": f"{{o}} = {a}.squeeze({k})"}[form]
    else:
        a = b.pick(lambda v: np.ndim(v) < _MAX_NDIM)
        if a is None:
            return None
        nd = b.ndim(a)
        if form == "expand_dims":
            src = f"{{o}} = np.expand_dims({a}, {b.d.int(-nd - 1, nd)})"
        elif form == "none_index":
            src = f"{{o}} = {a}[None]"
        elif form == "none_mid":
            if nd < 1:
                return None
            src = f"{{o}} = {a}[{b.d.choice([':, None', '..., None', 'None, :'])}]"
        elif form == "broadcast_to":
            src = f"{{o}} = np.broadcast_to({a}, ({b.d.int(2, 3)},) + {a}.shape)"
        else:
            src = f"{{o}} = np.atleast_2d({a})"
    feat = "shape." + form
    return Cand(feat, src, (a,)) if b.ok(feat) else None


def g_join(b):
    a = b.pick(lambda v: np.ndim(v) < _MAX_NDIM)
    if a is None:
        return None
    sa = b.shape(a)
    c = b.pick(lambda v: np.shape(v) == sa) if b.d.bool(0.8) else a
    nd = len(sa)
    form = b.d.choice(["concatenate", "concatenate_default", "stack", "stack_axis", "vstack",
                       "hstack", "np_array", "concatenate3", "concatenate_diff"])
    if form in ("concatenate", "concatenate_default", "vstack", "hstack", "concatenate3") and nd == 0:
        return None
    reads = (a, c)
    if form == "concatenate":
        src = f"{{o}} = np.concatenate([{a}, {c}], axis={b.d.int(-nd, nd - 1)})"
    elif form == "concatenate_default":
        src = f"{{o}} = np.concatenate(({a}, {c}))"
    elif form == "concatenate3":
        src = f"{{o}} = np.concatenate([{a}, {c}, {a}], axis={b.d.int(-nd, nd - 1)})"
    elif form == "concatenate_diff":
        # same shape except along the axis
        if nd == 0:
            return None
        ax = b.d.int(0, nd - 1)
        e = b.pick(lambda v: np.ndim(v) == nd and all(
            s == t for i, (s, t) in enumerate(zip(np.shape(v), sa)) if i != ax), avoid=(a,))
        if e is None:
            return None
        src = f"{{o}} = np.concatenate([{a}, {e}], axis={ax})"
        reads = (a, e)
    elif form == "stack":
        src = f"{{o}} = np.stack([{a}, {c}])"
    elif form == "stack_axis":
        src = f"{{o}} = np.stack([{a}, {c}], axis={b.d.int(-nd - 1, nd)})"
    elif form == "vstack":
        src = f"{{o}} = np.vstack([{a}, {c}])"
    elif form == "hstack":
        src = f"{{o}} = np.hstack([{a}, {c}])"
    else:
        src = f"{{o}} = np.array([{a}, {c}])"
    feat = "join." + form
    return Cand(feat, src, reads) if b.ok(feat) else None


def g_array_of_scalars(b):
    a = b.pick()
    c = b.pick(avoid=(a,)) or a
    ra = b.d.choice(["sum", "mean", "max", "min"])
    rc = b.d.choice(["sum", "mean", "max", "min"])
    src = f"{{o}} = np.array([{a}.{ra}(), {c}.{rc}(), 1.5])"
    feat = "join.np_array_scalars"
    margins = []
    for n, r in ((a, ra), (c, rc)):
        if r in ("max", "min"):
            margins.append(lambda ns, n=n, lg=(r == "max"): _top2_gap(ns[n], None, lg))
    return Cand(feat, src, (a, c), tuple(margins)) if b.ok(feat) else None


def g_flip_roll(b):
    a = b.pick(lambda v: np.ndim(v) >= 1)
    if a is None:
        return None
    nd = b.ndim(a)
    form = b.d.choice(["flip", "flip_axis", "slice_rev", "roll", "roll_axis", "fliplr",
                       "flipud", "roll_tuple"])
    if form == "flip":
        src = f"{{o}} = np.flip({a})"
    elif form == "flip_axis":
        src = f"{{o}} = np.flip({a}, axis={b.d.int(-nd, nd - 1)})"
    elif form == "slice_rev":
        src = f"{{o}} = {a}[::-1]"
    elif form == "roll":
        src = f"{{o}} = np.roll({a}, {b.d.int(-3, 3)})"
    elif form == "roll_axis":
        src = f"{{o}} = np.roll({a}, {b.d.int(-3, 3)}, axis={b.d.int(-nd, nd - 1)})"
    elif form == "roll_tuple":
        if nd < 2:
            return None
        src = f"{{o}} = np.roll({a}, ({b.d.int(-2, 2)}, {b.d.int(-2, 2)}), axis=(0, {nd - 1}))"
    elif form == "fliplr":
        if nd < 2:
            return None
        src = f"{{o}} = np.fliplr({a})"
    else:
        src = f"{{o}} = np.flipud({a})"
    feat = "shape." + form
    return Cand(feat, src, (a,)) if b.ok(feat) else None


def g_tile_repeat(b):
    a = b.pick(lambda v: np.size(v) <= 30)
    if a is None:
        return None
    nd = b.ndim(a)
    form = b.d.choice(["tile_int", "tile_tuple", "repeat_flat", "repeat_axis", "repeat_method",
                       "repeat_list"])
    if form == "tile_int":
        src = f"{{o}} = np.tile({a}, {b.d.int(1, 3)})"
    elif form == "tile_tuple":
        reps = tuple(b.d.int(1, 3) for _ in range(b.d.int(1, max(1, nd + 1))))
        src = f"{{o}} = np.tile({a}, {reps!r})"
    elif form == "repeat_flat":
        src = f"{{o}} = np.repeat({a}, {b.d.int(1, 3)})"
    elif form in ("repeat_axis", "repeat_method"):
        if nd == 0:
            return None
        ax = b.d.int(-nd, nd - 1)
        r = b.d.int(1, 3)
        src = (f"{{o}} = np.repeat({a}, {r}, axis={ax})" if form == "repeat_axis"
               else f"{{o}} = {a}.repeat({r}, axis={ax})")
    else:
        if nd == 0:
            return None
        ax = b.d.int(0, nd - 1)
        reps = [b.d.int(0, 2) for _ in range(b.shape(a)[ax])]
        if sum(reps) == 0:
            reps[0] = 1
        src = f"{{o}} = np.repeat({a}, {reps!r}, axis={ax})"
    feat = "shape." + form
    return Cand(feat, src, (a,)) if b.ok(feat) else None


def _basic_index(d, shape):
    """A basic index (ints, slices, maybe Ellipsis / None) for shape, as source."""
    nd = len(shape)
    m = d.int(1, nd)
    parts = []
    for i in range(m):
        n = shape[i]
        kind = d.weighted([("int", 3), ("slice", 4), ("full", 2), ("step", 2), ("neg", 1)])
        if kind == "int":
            k = d.int(-n, n - 1)
            parts.append(str(k))
        elif kind == "full":
            parts.append(":")
        elif kind == "slice":
            lo = d.int(0, n - 1)
            hi = d.int(lo + 1, n)
            parts.append(f"{lo}:{hi}" if hi != n or d.bool() else f"{lo}:")
        elif kind == "step":
            parts.append(d.choice(["::2", "1::2", "::-1", "::-2"]))
        else:
            parts.append(f"{-n + d.int(0, n - 1)}:" if d.bool() else f":{-1 if n > 1 else 1}")
    if m < nd and d.bool(0.3):
        parts.append("...")
    if d.bool(0.1):
        parts.insert(d.int(0, len(parts)), "None")
    return ", ".join(parts)


def g_index(b):
    form = b.d.weighted([("basic", 5), ("ellipsis_int", 1), ("int_array", 3),
                         ("int_array_axis1", 2), ("two_arrays", 1), ("bool_mask", 2),
                         ("bool_mask_rows", 2), ("take", 1), ("scalar_elem", 1),
                         ("diag", 1), ("trace", 1), ("tril", 1), ("diagonal", 1)])
    need = {"int_array_axis1": 2, "two_arrays": 2, "bool_mask_rows": 1, "diag": 1, "trace": 2,
            "tril": 2, "diagonal": 2}.get(form, 1)
    a = b.pick(lambda v: np.ndim(v) >= need)
    if a is None:
        return None
    sh = b.shape(a)
    nd = len(sh)
    if form == "basic":
        src = f"{{o}} = {a}[{_basic_index(b.d, sh)}]"
    elif form == "ellipsis_int":
        src = f"{{o}} = {a}[..., {b.d.int(-sh[-1], sh[-1] - 1)}]"
    elif form in ("int_array", "take"):
        k = b.d.int(1, 5)
        idx = [b.d.int(-sh[0], sh[0] - 1) for _ in range(k)]
        if form == "take":
            ax = b.d.int(0, nd - 1)
            idx = [b.d.int(0, sh[ax] - 1) for _ in range(k)]
            src = f"{{o}} = np.take({a}, np.array({idx!r}), axis={ax})"
        else:
            src = f"{{o}} = {a}[np.array({idx!r})]" if b.d.bool() else f"{{o}} = {a}[{idx!r}]"
    elif form == "int_array_axis1":
        idx = [b.d.int(0, sh[1] - 1) for _ in range(b.d.int(1, 4))]
        src = f"{{o}} = {a}[:, np.array({idx!r})]"
    elif form == "two_arrays":
        k = b.d.int(1, 4)
        i0 = [b.d.int(0, sh[0] - 1) for _ in range(k)]
        i1 = [b.d.int(0, sh[1] - 1) for _ in range(k)]
        src = f"{{o}} = {a}[np.array({i0!r}), np.array({i1!r})]"
    elif form == "bool_mask":
        mask = (np.cos(np.arange(b.val(a).size) * 1.7 + b.d.int(0, 5)) > 0).reshape(sh)
        if not mask.any():
            return None
        src = f"{{o}} = {a}[np.array({mask.tolist()!r})]"
    elif form == "bool_mask_rows":
        mask = [b.d.bool() for _ in range(sh[0])]
        if not any(mask):
            mask[0] = True
        src = f"{{o}} = {a}[np.array({mask!r})]"
    elif form == "scalar_elem":
        idx = tuple(b.d.int(0, s - 1) for s in sh)
        src = f"{{o}} = {a}[{', '.join(map(str, idx))}] * {a}"
    elif form == "diag":
        if nd > 2:
            return None
        src = f"{{o}} = np.diag({a})"
    elif form == "trace":
        if nd != 2:
            return None
        src = f"{{o}} = np.trace({a})"
    elif form == "diagonal":
        if nd != 2:
            return None
        src = f"{{o}} = {a}.diagonal()" if b.d.bool() else f"{{o}} = np.diagonal({a})"
    else:
        src = f"{{o}} = np.{b.d.choice(['tril', 'triu'])}({a}{b.d.choice(['', ', 1', ', -1'])})"
    feat = "index." + form
    return Cand(feat, src, (a,)) if b.ok(feat) else None


def g_split(b):
    a = b.pick(lambda v: np.ndim(v) >= 1 and any(s % 2 == 0 for s in np.shape(v)))
    if a is None:
        return None
    axes = [i for i, s in enumerate(b.shape(a)) if s % 2 == 0]
    ax = b.d.choice(axes)
    form = b.d.choice(["split", "array_split"])
    part = b.d.int(0, 1)
    src = (f"{{o}} = np.split({a}, 2, axis={ax})[{part}]" if form == "split"
           else f"{{o}} = np.array_split({a}, 2, axis={ax})[{part}]")
    feat = "shape." + form
    return Cand(feat, src, (a,)) if b.ok(feat) else None


def g_matmul(b):
    form = b.d.choice(["matmul", "dot", "np_matmul", "const_rhs", "gram", "outer", "inner",
                       "vecdot", "batched", "const_lhs"])
    if form == "const_rhs":
        a = b.pick(lambda v: np.ndim(v) >= 1)
        if a is None:
            return None
        k = b.shape(a)[-1]
        n = b.d.int(1, 4)
        w = _weight_src((k, n), b.d.int(0, 3)) if b.d.bool(0.8) else _weight_src((k,), 1)
        src = f"{{o}} = {a} @ {w}"
        reads = (a,)
    elif form == "const_lhs":
        a = b.pick(lambda v: np.ndim(v) in (1, 2))
        if a is None:
            return None
        k = b.shape(a)[0]
        src = f"{{o}} = {_weight_src((b.d.int(1, 3), k), b.d.int(0, 3))} @ {a}"
        reads = (a,)
    elif form == "gram":
        a = b.pick(lambda v: np.ndim(v) == 2)
        if a is None:
            return None
        src = f"{{o}} = {a} @ {a}.T" if b.d.bool() else f"{{o}} = {a}.T.dot({a})"
        reads = (a,)
    elif form in ("outer", "inner", "vecdot"):
        a = b.pick(lambda v: np.ndim(v) == 1)
        if a is None:
            return None
        if form == "outer":
            c = b.pick(lambda v: np.ndim(v) == 1 and np.size(v) <= 6) or a
            src = f"{{o}} = np.outer({a}, {c})"
        else:
            n = b.shape(a)[0]
            c = b.pick(lambda v: np.shape(v) == (n,), avoid=(a,)) or a
            src = f"{{o}} = np.inner({a}, {c})" if form == "inner" else f"{{o}} = {a} @ {c}"
        reads = (a, c)
    elif form == "batched":
        a = b.pick(lambda v: np.ndim(v) == 3)
        if a is None:
            return None
        B, m, k = b.shape(a)
        c = b.pick(lambda v: np.ndim(v) in (2, 3) and np.shape(v)[-2] == k and (
            np.ndim(v) == 2 or np.shape(v)[0] in (1, B)))
        if c is None:
            src = f"{{o}} = {a} @ np.swapaxes({a}, -1, -2)"
            reads = (a,)
        else:
            src = f"{{o}} = np.matmul({a}, {c})"
            reads = (a, c)
    else:
        a = b.pick(lambda v: np.ndim(v) in (1, 2))
        if a is None:
            return None
        k = b.shape(a)[-1]
        c = b.pick(lambda v: np.ndim(v) in (1, 2) and np.shape(v)[0] == k)
        if c is None:
            return None
        op = {"matmul": f"{a} @ {c}", "dot": f"np.dot({a}, {c})",
              "np_matmul": f"np.matmul({a}, {c})"}[form]
        if form == "dot" and b.d.bool(0.3):
            op = f"{a}.dot({c})"
        src = f"{{o}} = {op}"
        reads = (a, c)
    feat = "matmul." + form
    return Cand(feat, src, reads) if b.ok(feat) else None


def g_einsum(b):
    a = b.pick(lambda v: 1 <= np.ndim(v) <= 3)
    if a is None:
        return None
    sh = b.shape(a)
    nd = len(sh)
    opts = []
    if nd == 1:
        opts += [("i->", (a,)), ("i,i->", (a, a))]
        c = b.pick(lambda v: np.shape(v) == sh, avoid=(a,))
        if c:
            opts += [("i,i->", (a, c)), ("i,j->ij", (a, c)), ("i,i->i", (a, c))]
    elif nd == 2:
        opts += [("ij->ji", (a,)), ("ij->i", (a,)), ("ij->j", (a,)), ("ij->", (a,)),
                 ("ij,ij->i", (a, a)), ("ij,kj->ik", (a, a))]
        if sh[0] == sh[1]:
            opts += [("ii->", (a,)), ("ii->i", (a,))]
        c = b.pick(lambda v: np.ndim(v) == 2 and np.shape(v)[0] == sh[1])
        if c:
            opts.append(("ij,jk->ik", (a, c)))
        c = b.pick(lambda v: np.shape(v) == sh, avoid=(a,))
        if c:
            opts += [("ij,ij->j", (a, c)), ("ij,ij->", (a, c))]
        c = b.pick(lambda v: np.shape(v) == (sh[1],))
        if c:
            opts.append(("ij,j->i", (a, c)))
    else:
        opts += [("bij->bji", (a,)), ("bij->b", (a,)), ("...j->...", (a,)),
                 ("bij,bkj->bik", (a, a))]
        c = b.pick(lambda v: np.ndim(v) == 3 and np.shape(v)[0] == sh[0]
                   and np.shape(v)[1] == sh[2])
        if c:
            opts.append(("bij,bjk->bik", (a, c)))
    spec, reads = b.d.choice(opts)
    src = f"{{o}} = np.einsum({spec!r}, {', '.join(reads)})"
    feat = "einsum"
    return Cand(feat, src, tuple(reads)) if b.ok(feat) else None


def g_assign(b):
    a = b.pick(lambda v: np.ndim(v) >= 1)
    if a is None:
        return None
    sh = b.shape(a)
    form = b.d.choice(["set_index", "set_slice_expr", "iadd_slice", "set_scalar",
                       "set_mask", "set_int_array", "set_from_other", "iop_view"])
    if form == "set_index":
        i = b.d.int(-sh[0], sh[0] - 1)
        src = f"{{o}} = {a}.copy()\n{{o}}[{i}] = np.tanh({a}[{i}]) * 2.0"
        reads = (a,)
    elif form == "set_slice_expr":
        idx = _basic_index(b.d, sh)
        src = f"{{o}} = {a}.copy()\n{{o}}[{idx}] = {{o}}[{idx}] ** 2"
        reads = (a,)
    elif form == "iadd_slice":
        idx = _basic_index(b.d, sh)
        src = f"{{o}} = {a}.copy()\n{{o}}[{idx}] += 1.5 * {a}[{idx}]"
        reads = (a,)
    elif form == "iop_view":   # x op= y on a view (or a copied scalar): NumPy's write-through
        idx = _basic_index(b.d, sh)
        src = (f"{{o}} = {a}.copy()\n_v = {{o}}[{idx}]\n_v *= 1.5\n"
               f"_v += np.sin({a}[{idx}])")
        reads = (a,)
    elif form == "set_scalar":
        idx = ", ".join(str(b.d.int(0, s - 1)) for s in sh)
        c = b.pick(lambda v: np.ndim(v) == 0) or None
        val = f"{c} * 3.0" if c else "0.25"
        src = f"{{o}} = {a}.copy()\n{{o}}[{idx}] = {val}"
        reads = (a, c) if c else (a,)
    elif form == "set_mask":
        mask = (np.sin(np.arange(b.val(a).size) * 2.3 + b.d.int(0, 5)) > 0).reshape(sh)
        src = f"{{o}} = {a}.copy()\n{{o}}[np.array({mask.tolist()!r})] = 0.0"
        reads = (a,)
    elif form == "set_int_array":
        idx = sorted({b.d.int(0, sh[0] - 1) for _ in range(b.d.int(1, 3))})
        src = f"{{o}} = {a}.copy()\n{{o}}[np.array({idx!r})] = -{a}[np.array({idx!r})]"
        reads = (a,)
    else:
        # value from another traced array, broadcast into a row / slice
        tail = sh[1:]
        c = b.pick(lambda v: _bshape(np.shape(v), tail) == tail, avoid=(a,))
        if c is None:
            return None
        i = b.d.int(0, sh[0] - 1)
        src = f"{{o}} = {a}.copy()\n{{o}}[{i}] = {c}"
        reads = (a, c)
    feat = "assign." + form
    return Cand(feat, src, reads) if b.ok(feat) else None


def g_loop(b):
    a = b.pick(lambda v: np.ndim(v) >= 1 and np.shape(v)[0] <= 5)
    if a is None:
        return None
    sh = b.shape(a)
    n = sh[0]
    form = b.d.choice(["fill_rows", "fill_reduce", "rnn", "rnn_store", "accumulate"])
    if form == "fill_rows":
        src = (f"{{o}} = np.zeros({sh!r})\n"
               f"for i in range({n}):\n"
               f"    {{o}}[i] = np.tanh({a}[i]) * (i + 1.0)")
    elif form == "fill_reduce":
        src = (f"{{o}} = np.zeros({n})\n"
               f"for i in range({n}):\n"
               f"    {{o}}[i] = ({a}[i] ** 2).sum()")
    elif form == "rnn":
        src = (f"{{o}} = np.zeros({sh[1:]!r})\n"
               f"for i in range({n}):\n"
               f"    {{o}} = np.tanh(0.5 * {{o}} + {a}[i])")
    elif form == "rnn_store":
        src = (f"{{o}}_h = np.zeros({sh[1:]!r})\n"
               f"{{o}} = np.zeros({sh!r})\n"
               f"for i in range({n}):\n"
               f"    {{o}}_h = np.tanh(0.5 * {{o}}_h + {a}[i])\n"
               f"    {{o}}[i] = {{o}}_h")
    else:
        src = (f"{{o}} = np.zeros_like({a}[0])\n"
               f"for i in range({n}):\n"
               f"    {{o}} = {{o}} + np.sin({a}[i]) / (i + 1)")
    feat = "loop." + form
    return Cand(feat, src, (a,)) if b.ok(feat) else None


def g_like(b):
    a = b.pick()
    form = b.d.choice(["ones_like", "zeros_like", "full_like", "diff", "average", "mean_sq"])
    if form == "ones_like":
        src = f"{{o}} = np.ones_like({a}) * 2.0 + {a}"
    elif form == "zeros_like":
        src = f"{{o}} = np.zeros_like({a}) - {a}"
    elif form == "full_like":
        src = f"{{o}} = {a} * np.full_like({a}, 0.5)"
    elif form == "diff":
        if b.ndim(a) < 1 or b.shape(a)[-1] < 2:
            return None
        src = f"{{o}} = np.diff({a})"
    elif form == "average":
        src = f"{{o}} = np.average({a})"
    else:
        src = f"{{o}} = np.mean(({a} - {a}.mean()) ** 2)"
    feat = "misc." + form
    return Cand(feat, src, (a,)) if b.ok(feat) else None


_UNARY2 = [
    ("ufunc2.log2_sq1", "np.log2({a} ** 2 + 1)", None),
    ("ufunc2.log10_sq1", "np.log10({a} ** 2 + 1)", None),
    ("ufunc2.exp2", "np.exp2({a})", None),
    ("ufunc2.pow2_scalar_base", "2.0 ** {a}", None),
    ("ufunc2.arcsin", "np.arcsin(0.9 * np.tanh({a}))", None),
    ("ufunc2.arccos", "np.arccos(0.9 * np.tanh({a}))", None),
    ("ufunc2.arcsinh", "np.arcsinh({a})", None),
    ("ufunc2.arctanh", "np.arctanh(0.9 * np.tanh({a}))", None),
    ("ufunc2.tan", "np.tan(0.5 * np.tanh({a}))", None),
    ("ufunc2.cbrt", "np.cbrt({a})", "zero"),
    ("ufunc2.fabs", "np.fabs({a})", "zero"),
    ("ufunc2.float_pow_neg_base", "{a} ** 2.0", None),
    ("ufunc2.np_power_3f", "np.power({a}, 3.0)", None),
    ("ufunc2.pow_builtin", "pow({a}, 2)", None),
    ("ufunc2.logaddexp_self", "np.logaddexp({a}, 0.5 * {a})", None),
    ("ufunc2.positive", "+{a}", None),
    ("ufunc2.sinc", "np.sinc({a})", "zero"),
    ("ufunc2.deg2rad", "np.deg2rad({a}) * 50.0", None),
    ("ufunc2.float64_scalar", "np.float64(1.5) * {a}", None),
    ("ufunc2.astype", "{a}.astype(np.float64) * 1.5", None),
    ("ufunc2.asarray", "np.asarray({a}) + 1.0", None),
    ("ufunc2.np_array_copy", "np.array({a}) * 2.0", None),
    ("ufunc2.nan_to_num", "np.nan_to_num({a})", None),
    ("ufunc2.round_mix", "{a} + np.round({a})", "half"),
    ("ufunc2.floor_mix", "{a} * np.floor({a})", "int"),
    ("ufunc2.fmod", "np.fmod({a}, 1.0)", "int"),
    ("ufunc2.mod", "{a} % 1.0", "int"),
]


def g_unary2(b):
    feat, tmpl, kink = b.d.choice(_UNARY2)
    if not b.ok(feat):
        return None
    a = b.pick()
    margins = ()
    if kink == "zero":
        margins = (lambda ns, a=a: ns[a],)
    elif kink == "int":      # jumps at integers (exact integers excluded: none occur)
        margins = (lambda ns, a=a: ns[a] - np.round(ns[a]),)
    elif kink == "half":
        margins = (lambda ns, a=a: ns[a] - np.floor(ns[a]) - 0.5,)
    if kink in ("int", "half"):
        strict = margins
        return Cand(feat, "{o} = " + tmpl.format(a=a), (a,), (), strict)
    return Cand(feat, "{o} = " + tmpl.format(a=a), (a,), margins)


def g_binary2(b):
    form = b.d.choice(["tensor_pow_pos", "logaddexp", "copysign_abs", "bool_mul", "where_const",
                       "arange_mul", "count_mul", "mean_bool", "heaviside_mul", "true_divide",
                       "scalar_from_shape", "size_div"])
    a = b.pick()
    sa = b.shape(a)
    c = b.pick(lambda v: _bshape(np.shape(v), sa) is not None, avoid=(a,)) or a
    reads, margins, strict = (a, c), (), ()
    if form == "tensor_pow_pos":
        src = f"{{o}} = ({a} ** 2 + 0.5) ** (0.5 * np.tanh({c}))"
    elif form == "logaddexp":
        src = f"{{o}} = np.logaddexp({a}, {c})"
    elif form == "copysign_abs":
        src = f"{{o}} = np.copysign({a}, {c})"
        margins = (lambda ns: ns[a], lambda ns: ns[c])
    elif form == "bool_mul":
        src = f"{{o}} = {a} * ({c} > 0)"
        reads, margins = (a, c), (lambda ns: ns[c],)
    elif form == "where_const":
        mask = (np.cos(np.arange(b.val(a).size) * 1.3) > 0).reshape(sa)
        src = f"{{o}} = np.where(np.array({mask.tolist()!r}), {a}, -2.0 * {a})"
        reads = (a,)
    elif form == "arange_mul":
        if not sa:
            return None
        src = f"{{o}} = {a} * np.arange({sa[-1]})"
        reads = (a,)
    elif form == "count_mul":
        src = f"{{o}} = {a} * (({c} > 0).sum() + 1)"
        margins = (lambda ns: ns[c],)
    elif form == "mean_bool":
        src = f"{{o}} = {a} * np.mean({c} > 0.3)"
        margins = (lambda ns: ns[c] - 0.3,)
    elif form == "heaviside_mul":
        src = f"{{o}} = {a} * np.heaviside({c}, 0.5)"
        margins = (lambda ns: ns[c],)
    elif form == "true_divide":
        src = f"{{o}} = np.true_divide({a}, np.exp({c}))"
    elif form == "scalar_from_shape":
        if not sa:
            return None
        src = f"{{o}} = {a} / {a}.shape[0] + {a}.size"
        reads = (a,)
    else:
        src = f"{{o}} = {a}.sum() / {a}.size - {a}"
        reads = (a,)
    feat = "binary2." + form
    return Cand(feat, src, reads, margins, strict) if b.ok(feat) else None


def _spd_src(a, n):
    """A well-conditioned n x n matrix built from traced a (size >= n*n not needed)."""
    return f"(np.resize({a}.ravel(), {n * n}).reshape({n}, {n}) * 0.3 + 2.0 * np.eye({n}))"


def g_linalg(b):
    form = b.d.choice(["inv", "solve", "det", "slogdet", "norm2", "nuc", "pinv", "cholesky",
                       "eigvalsh", "qr_r", "svd_s", "matrix_power", "solve_vec", "trace_inv"])
    a = b.pick(lambda v: np.size(v) >= 4)
    if a is None:
        return None
    nd = b.ndim(a)
    sz = b.val(a).size
    n = b.d.int(2, 3) if sz >= 9 else 2
    m = f"(({a}).ravel()[:{n * n}].reshape({n}, {n}) * 0.3 + 2.0 * np.eye({n}))"
    reads = (a,)
    strict = ()
    if form == "inv":
        src = f"{{o}} = np.linalg.inv({m})"
    elif form == "solve":
        c = b.pick(lambda v: np.size(v) >= n, avoid=(a,)) or a
        src = f"{{o}} = np.linalg.solve({m}, {c}.ravel()[:{n}].reshape({n}, 1))"
        reads = (a, c)
    elif form == "solve_vec":
        src = f"{{o}} = np.linalg.solve({m}, np.arange(1.0, {n + 1}))"
    elif form == "det":
        src = f"{{o}} = np.linalg.det({m})"
    elif form == "slogdet":
        src = f"{{o}}_s, {{o}} = np.linalg.slogdet({m})"
    elif form == "norm2":
        if nd != 2:
            return None
        src = f"{{o}} = np.linalg.norm({a}, 2)"
        strict = (lambda ns: np.diff(np.linalg.svd(ns[a], compute_uv=False)[:2]) if min(
            b.shape(a)) > 1 else 1.0,)
    elif form == "nuc":
        if nd != 2:
            return None
        src = f"{{o}} = np.linalg.norm({a}, 'nuc')"
        strict = (lambda ns: np.linalg.svd(ns[a], compute_uv=False),)
    elif form == "pinv":
        src = f"{{o}} = np.linalg.pinv({m})"
    elif form == "cholesky":
        src = f"{{o}}_m = {m}\n{{o}} = np.linalg.cholesky({{o}}_m @ {{o}}_m.T)"
    elif form == "eigvalsh":
        src = f"{{o}}_m = {m}\n{{o}} = np.linalg.eigvalsh({{o}}_m + {{o}}_m.T)"
        strict = (lambda ns: np.diff(_out_margin(ns)),)      # distinct eigenvalues
    elif form == "qr_r":
        src = f"{{o}} = np.abs(np.linalg.qr({m})[1])"
    elif form == "svd_s":
        src = f"{{o}} = np.linalg.svd({m}, compute_uv=False)"
        strict = (lambda ns: np.diff(_out_margin(ns)), _out_margin)   # distinct, nonzero
    elif form == "matrix_power":
        src = f"{{o}} = np.linalg.matrix_power({m}, {b.d.int(2, 3)})"
    else:
        src = f"{{o}} = np.trace(np.linalg.inv({m}))"
    feat = "linalg." + form
    return Cand(feat, src, reads, (), strict) if b.ok(feat) else None


def g_stats(b):
    form = b.d.choice(["median", "median_axis", "percentile", "quantile", "ptp", "argmax_index",
                       "take_along_axis", "argsort_index", "average_weights", "cov", "corrcoef"])
    a = b.pick(lambda v: np.ndim(v) >= 1)
    if a is None:
        return None
    nd = b.ndim(a)
    sh = b.shape(a)
    margins, strict = (), ()
    if form == "median":
        src = f"{{o}} = np.median({a})"
        margins = (lambda ns: _sorted_gaps(ns[a], None),)
    elif form == "median_axis":
        ax = b.d.int(-nd, nd - 1)
        src = f"{{o}} = np.median({a}, axis={ax})"
        margins = (lambda ns: _sorted_gaps(ns[a], ax),)
    elif form == "percentile":
        src = f"{{o}} = np.percentile({a}, {b.d.choice([25, 50, 90])})"
        margins = (lambda ns: _sorted_gaps(ns[a], None),)
    elif form == "quantile":
        ax = b.d.int(-nd, nd - 1)
        src = f"{{o}} = np.quantile({a}, {b.d.choice([0.2, 0.5, 0.75])}, axis={ax})"
        margins = (lambda ns: _sorted_gaps(ns[a], ax),)
    elif form == "ptp":
        src = f"{{o}} = np.ptp({a})"
        margins = (lambda ns: _top2_gap(ns[a], None, True), lambda ns: _top2_gap(ns[a], None, False))
    elif form == "argmax_index":
        src = f"{{o}} = {a}.ravel()[np.argmax({a})] * {a}"
        margins = (lambda ns: _top2_gap(ns[a], None, True),)
    elif form == "take_along_axis":
        ax = b.d.int(0, nd - 1)
        src = f"{{o}} = np.take_along_axis({a}, np.argsort({a}, axis={ax}), axis={ax})"
        margins = (lambda ns: _sorted_gaps(ns[a], ax),)
    elif form == "argsort_index":
        if nd != 1:
            return None
        src = f"{{o}} = {a}[np.argsort({a})]"
        margins = (lambda ns: _sorted_gaps(ns[a], 0),)
    elif form == "average_weights":
        src = f"{{o}} = np.average({a}, axis=0, weights=np.linspace(0.5, 1.5, {sh[0]}))"
    elif form == "cov":
        if nd != 2 or sh[1] < 2:
            return None
        src = f"{{o}} = np.cov({a})"
    else:
        if nd != 2 or sh[1] < 2:
            return None
        src = f"{{o}} = np.corrcoef({a})"
        strict = (lambda ns: np.std(ns[a], axis=1),)
    feat = "stats." + form
    return Cand(feat, src, (a,), margins, strict) if b.ok(feat) else None


def g_inplace(b):
    a = b.pick()
    form = b.d.choice(["imul_copy", "iadd_other", "isub_mean", "idiv", "ipow", "temp_iadd",
                       "add_at", "put_along"])
    sa = b.shape(a)
    reads = (a,)
    if form == "imul_copy":
        src = f"{{o}} = {a}.copy()\n{{o}} *= 2.0"
    elif form == "iadd_other":
        c = b.pick(lambda v: _bshape(np.shape(v), sa) == sa, avoid=(a,))
        if c is None:
            return None
        src = f"{{o}} = {a}.copy()\n{{o}} += {c}"
        reads = (a, c)
    elif form == "isub_mean":
        src = f"{{o}} = {a}.copy()\n{{o}} -= {{o}}.mean()"
    elif form == "idiv":
        src = f"{{o}} = {a} * 1.0\n{{o}} /= 3.0"
    elif form == "ipow":
        src = f"{{o}} = {a} + 0.0\n{{o}} **= 2"
    elif form == "temp_iadd":
        src = f"{{o}} = np.tanh({a})\n{{o}} += {a}"
    elif form == "add_at":
        if not sa:
            return None
        idx = [b.d.int(0, sa[0] - 1) for _ in range(b.d.int(1, 4))]
        src = (f"{{o}} = np.zeros({sa!r})\n"
               f"np.add.at({{o}}, np.array({idx!r}), {a}[np.array({idx!r})] * 2.0)")
    else:
        if not sa:
            return None
        src = (f"{{o}} = np.zeros_like({a})\n"
               f"{{o}}[...] = {a}")
    feat = "inplace." + form
    return Cand(feat, src, reads) if b.ok(feat) else None


def g_listy(b):
    a = b.pick(lambda v: np.ndim(v) >= 1 and np.shape(v)[0] <= 5)
    if a is None:
        return None
    n = b.shape(a)[0]
    form = b.d.choice(["stack_comprehension", "builtin_sum", "np_sum_list", "np_min_list",
                       "array_comprehension", "list_append_concat", "zip_rows", "enumerate_rows",
                       "builtin_max_gen"])
    margins = ()
    if form == "stack_comprehension":
        src = f"{{o}} = np.stack([np.tanh({a}[i]) * (i + 1) for i in range({n})])"
    elif form == "builtin_sum":
        src = f"{{o}} = sum({a}[i] ** 2 for i in range({n}))"
    elif form == "np_sum_list":
        src = f"{{o}} = np.sum([{a}[i] for i in range({n})], axis=0)"
    elif form == "np_min_list":
        src = f"{{o}} = np.min([{a}.sum(), ({a} ** 2).sum(), 3.0])"
        margins = (lambda ns: np.diff(np.sort(np.array([ns[a].sum(), (ns[a] ** 2).sum(), 3.0]))),)
    elif form == "array_comprehension":
        src = f"{{o}} = np.array([{a}[i].sum() for i in range({n})])"
    elif form == "list_append_concat":
        src = (f"{{o}}_parts = []\n"
               f"for i in range({n}):\n"
               f"    {{o}}_parts.append(np.sin({a}[i]).ravel())\n"
               f"{{o}} = np.concatenate({{o}}_parts)")
    elif form == "zip_rows":
        src = f"{{o}} = np.stack([r * w for r, w in zip({a}, np.linspace(0.5, 1.5, {n}))])"
    elif form == "enumerate_rows":
        src = (f"{{o}} = 0.0\n"
               f"for i, row in enumerate({a}):\n"
               f"    {{o}} = {{o}} + (i + 1.0) * np.cos(row)")
    else:
        src = f"{{o}} = np.maximum.reduce([{a}[i] for i in range({n})])"
        margins = (lambda ns: _top2_gap(ns[a], 0, True),)
    feat = "list." + form
    return Cand(feat, src, (a,), margins) if b.ok(feat) else None


def g_misc2(b):
    form = b.d.choice(["pad_const", "pad_tuple", "pad_edge", "pad_reflect", "cross", "kron",
                       "convolve", "interp", "trapezoid", "polyval", "triu_indices", "diff2",
                       "split_unequal", "eye_mul", "diag_diag", "outer_2d", "meshgrid_mul",
                       "dot_nd_1d", "vdot", "tensordot", "ix_"])
    a = b.pick(lambda v: np.ndim(v) >= 1)
    if a is None:
        return None
    nd, sh = b.ndim(a), b.shape(a)
    reads, margins = (a,), ()
    if form == "pad_const":
        src = f"{{o}} = np.pad({a}, 1)"
    elif form == "pad_tuple":
        pads = tuple((b.d.int(0, 2), b.d.int(0, 1)) for _ in range(nd))
        src = f"{{o}} = np.pad({a}, {pads!r}, mode='constant', constant_values=0.5)"
    elif form == "pad_edge":
        src = f"{{o}} = np.pad({a}, 1, mode='edge')"
    elif form == "pad_reflect":
        if min(sh) < 2:
            return None
        src = f"{{o}} = np.pad({a}, 1, mode='reflect')"
    elif form == "cross":
        if sh[-1] != 3:
            return None
        src = f"{{o}} = np.cross({a}, np.tanh({a}) + np.array([0.1, -0.2, 0.3]))"
    elif form == "kron":
        if b.val(a).size > 8:
            return None
        src = f"{{o}} = np.kron({a}, np.array([1.0, -0.5]))"
    elif form == "convolve":
        if nd != 1:
            return None
        mode = b.d.choice(["full", "same", "valid"])
        src = f"{{o}} = np.convolve({a}, np.array([0.25, 0.5, -0.25]), mode={mode!r})"
    elif form == "interp":
        src = f"{{o}} = np.interp({a}, np.linspace(-3.0, 3.0, 7), np.cos(np.linspace(-3.0, 3.0, 7)))"
        margins = (lambda ns: ns[a] - np.round(ns[a]),)
    elif form == "trapezoid":
        fn = "trapezoid" if hasattr(np, "trapezoid") else "trapz"
        src = f"{{o}} = np.{fn}({a}, axis={b.d.int(-nd, nd - 1)})"
    elif form == "polyval":
        src = f"{{o}} = np.polyval(np.array([0.5, -1.0, 2.0]), {a})"
    elif form == "triu_indices":
        if nd != 2 or sh[0] != sh[1]:
            return None
        src = f"{{o}} = {a}[np.triu_indices({sh[0]})]"
    elif form == "diff2":
        if sh[0] < 3:
            return None
        src = f"{{o}} = np.diff({a}, n=2, axis=0)"
    elif form == "split_unequal":
        if sh[0] < 3:
            return None
        src = f"{{o}} = np.split({a}, [1, {sh[0] - 1}])[{b.d.int(0, 2)}]"
    elif form == "eye_mul":
        if nd != 2 or sh[0] != sh[1]:
            return None
        src = f"{{o}} = np.eye({sh[0]}) * {a} + {a}"
    elif form == "diag_diag":
        if nd != 2:
            return None
        src = f"{{o}} = np.diag(np.diag({a}))"
    elif form == "outer_2d":
        if b.val(a).size > 10:
            return None
        src = f"{{o}} = np.outer({a}, np.array([1.0, 2.0]))"
    elif form == "meshgrid_mul":
        if nd != 1:
            return None
        src = f"{{o}}_g, {{o}}_h = np.meshgrid({a}, np.array([1.0, 2.0]))\n{{o}} = {{o}}_g * {{o}}_h"
    elif form == "dot_nd_1d":
        src = f"{{o}} = np.dot({a}, np.linspace(0.5, 1.5, {sh[-1]}))"
    elif form == "vdot":
        src = f"{{o}} = np.vdot({a}, np.tanh({a}))"
    elif form == "tensordot":
        src = f"{{o}} = np.tensordot({a}, np.tanh({a}), axes={nd})"
    else:
        if nd != 2:
            return None
        src = f"{{o}} = {a}[np.ix_([0, {sh[0] - 1}], [{sh[1] - 1}, 0])]"
    feat = "misc2." + form
    return Cand(feat, src, reads, margins) if b.ok(feat) else None


def _gj():
    import gradjit
    return gradjit


# one step each, "{a}" the value read and {o} the value written (with any suffix)
_TRANSFORM_FORMS = {
    "grad_shared": "{o} = gj.grad(lambda p, q: (np.sin(p) * q).sum())({a}, {a} * 2.0)",
    "grad_closure": "{o} = gj.grad(lambda p: (np.tanh(p) * {a}).sum())({a})",
    "value_and_grad": ("{o}_v, {o}_g = gj.value_and_grad(lambda p, q: (p * p * q).sum())"
                       "({a}, {a} + 1.0)\n{o} = {o}_g + {o}_v"),
    "jvp": "{o} = gj.jvp(lambda p: np.sin(p) * {a}, ({a},), (np.ones_like({a}),))[1]",
    "jacfwd": "{o} = gj.{form}(lambda p: np.sin(p) * (p * {a}).sum())({a})",
    "jacrev": "{o} = gj.{form}(lambda p: np.sin(p) * (p * {a}).sum())({a})",
    "hessian": "{o} = gj.hessian(lambda p: (np.sin(p) * {a}).sum() * p.sum())({a})",
    "fori_loop": "{o} = gj.fori_loop(0, 3, lambda i, c: np.sin(c) + 0.5 * c * {a}, {a})",
    "while_loop": ("{o} = gj.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, np.tanh(c[1]) "
                   "+ 0.5 * {a}), (0, {a}), max_steps=4)[1]"),
    "cond": "{o} = gj.cond({a}.sum() > 0, lambda v: v * {a}, lambda v: np.sin(v), {a})",
    "checkpoint": "{o} = gj.checkpoint(lambda v: np.tanh(v) * v)({a})",
    "scan": "{o}_c, {o} = gj.scan(lambda c, r: (np.tanh(0.5 * c + r), c * r), {a}[0] * 0.5, {a})",
    "scan_reverse": ("{o}_c, {o} = gj.scan(lambda c, r: (np.tanh(0.5 * c + r), c * r), "
                     "{a}[0] * 0.5, {a}, reverse=True)"),
}


def g_transform(b):
    """gradjit's own transforms and loops inside the program: nested derivatives whose
    arguments share a value with the outer trace, closures over traced values, and
    scan / fori_loop / while_loop / cond / checkpoint bodies."""
    a = b.pick(lambda v: 1 <= np.size(v) <= 24)
    if a is None:
        return None
    sh = b.shape(a)
    forms = ["grad_shared", "grad_closure", "value_and_grad", "jvp", "fori_loop", "cond",
             "checkpoint", "while_loop"]
    if len(sh) >= 1 and sh[0] <= 5:
        forms += ["scan", "scan_reverse"]
    if len(sh) == 1 and sh[0] <= 5:
        forms += ["jacfwd", "jacrev", "hessian"]
    form = b.d.choice(forms)
    src = _TRANSFORM_FORMS[form].replace("{a}", a).replace("{form}", form)
    margins = (lambda ns, a=a: np.sum(ns[a]),) if form == "cond" else ()
    feat = ("control." if form in ("fori_loop", "while_loop", "cond", "checkpoint", "scan",
                                   "scan_reverse") else "transform.") + form
    return Cand(feat, src, (a,), margins) if b.ok(feat) else None


GENERATORS = [
    (g_unary, 12), (g_power, 3), (g_scalar_arith, 3), (g_binary, 10), (g_reduce, 8),
    (g_norm, 2), (g_cum, 2), (g_sort, 2), (g_softmax, 2), (g_clip, 2), (g_reshape, 4),
    (g_transpose, 3), (g_expand_squeeze, 3), (g_join, 3), (g_array_of_scalars, 1),
    (g_flip_roll, 2), (g_tile_repeat, 2), (g_index, 5), (g_split, 1), (g_matmul, 4),
    (g_einsum, 2), (g_assign, 3), (g_loop, 2), (g_like, 2),
    (g_unary2, 4), (g_binary2, 3), (g_linalg, 2), (g_stats, 2), (g_inplace, 2), (g_listy, 2),
    (g_misc2, 3), (g_transform, 3),
]


def build_program(d, exclude=(), min_steps=2, max_steps=12):
    """A random program drawn with drawer ``d``; features in ``exclude`` are left out."""
    n_in = d.weighted([(1, 3), (2, 4), (3, 3)])
    base = _draw_shape(d)
    shapes = [base] + [_related_shape(d, base) for _ in range(n_in - 1)]
    seed = d.int(0, 2 ** 31 - 1)
    names = ["x", "y", "z"][:n_in]
    inputs = _draw_values(seed, shapes)
    b = Builder(d, exclude)
    b.env.update(zip(names, inputs))
    b.order.extend(names)
    target = d.int(min_steps, max_steps)
    tries = 0
    while len(b.steps) < target and tries < 40 * target:
        tries += 1
        gen = d.weighted(GENERATORS)
        try:
            cand = gen(b)
        except _Reject:
            cand = None
        if cand is not None:
            b.try_add(cand)
    read = set()
    for s in b.steps:
        read.update(s.reads)
    leaves = [s.out for s in b.steps if s.out not in read]
    if not leaves:
        leaves = [names[0]]
    terms = [(n, _weight_src(np.shape(b.env[n]), k)) for k, n in enumerate(leaves)]
    feats = {s.feature for s in b.steps}
    registered = not (b.ok("program.no_source") and d.bool(0.1))
    if not registered:
        feats.add("program.no_source")
    return Program(names, inputs, b.steps, terms, seed, feats, registered)


def programs(exclude=(), min_steps=2, max_steps=12):
    """Hypothesis strategy of random programs."""
    from hypothesis import strategies as st

    @st.composite
    def _programs(draw):
        return build_program(HypothesisDrawer(draw), exclude, min_steps, max_steps)

    return _programs()


def random_program(seed, exclude=(), min_steps=2, max_steps=12):
    return build_program(RandomDrawer(seed), exclude, min_steps, max_steps)


# ----------------------------------------------------------------------------- oracle

def _fd(f, inputs, k, h):
    """4-point central differences of f w.r.t. inputs[k] (O(h^4))."""
    x = inputs[k]
    g = np.zeros(x.shape)
    args = [np.array(a, copy=True) for a in inputs]
    for idx in np.ndindex(x.shape):
        vals = []
        for s in (2.0, 1.0, -1.0, -2.0):
            args[k] = np.array(x, copy=True)
            args[k][idx] += s * h
            vals.append(float(f(*args)))
        g[idx] = (-vals[0] + 8.0 * vals[1] - 8.0 * vals[2] + vals[3]) / (12.0 * h)
    return g


@dataclass
class Oracle:
    value: float
    scale: float          # sum of |loss terms|: the scale of rounding in the value
    grads: list           # finite-difference gradients, one per input
    noise: list           # |difference| of the two stencils, one per input
    gscale: float
    stable: bool


def oracle(prog, f=None):
    f = f or prog.function()
    inputs = [np.array(a, dtype=np.float64) for a in prog.inputs]
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        value = float(f(*inputs))
        # scale: the same loss with every term made positive
        ns = {"np": np, "gj": _gj()}
        ns.update(zip(prog.input_names, [np.array(a) for a in inputs]))
        for s in prog.steps:
            exec(s.src, ns)
        scale = sum(float(np.sum(np.abs(np.asarray(ns[n]) * eval(w, {"np": np}))))
                    for n, w in prog.loss_terms)
        grads, noise, stable = [], [], True
        for k in range(len(inputs)):
            g1 = _fd(f, inputs, k, 1e-3)
            g2 = _fd(f, inputs, k, 2.5e-4)
            if not (np.all(np.isfinite(g1)) and np.all(np.isfinite(g2))):
                stable = False
            grads.append(g1)
            noise.append(np.abs(g1 - g2))
    gscale = max([float(np.max(np.abs(g))) for g in grads if g.size] + [0.0])
    if stable:
        for g, n in zip(grads, noise):
            if np.any(n > 1e-6 * np.abs(g) + 1e-8 * gscale + 1e-11 * scale + 1e-12):
                stable = False
    return Oracle(value, scale, grads, noise, gscale, stable)


@dataclass
class Outcome:
    kind: str             # pass | refused | wrong | crash | discard
    stage: str = ""       # jit | grad
    detail: str = ""
    error: BaseException | None = None
    prog: Program | None = None


@contextlib.contextmanager
def executor(name):
    """GRADJIT_EXECUTOR set to ``name`` (``"numpy"``, or None for compiled) inside; for
    compiled, GRADJIT_TIERING=sync too (the first call must run the compiled code, not
    the interpreter that serves it while a background compile runs)."""
    old = {k: os.environ.get(k) for k in ("GRADJIT_EXECUTOR", "GRADJIT_TIERING")}
    if name is None:
        os.environ.pop("GRADJIT_EXECUTOR", None)
        os.environ["GRADJIT_TIERING"] = "sync"
    else:
        os.environ["GRADJIT_EXECUTOR"] = name
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def check_program(prog, orc=None):
    """Run ``prog`` through gj.jit and gj.grad and compare with the oracle."""
    import gradjit as gj
    f = prog.function()
    orc = orc or oracle(prog, f)
    if not orc.stable:
        return Outcome("discard", detail="finite differences unstable (kink nearby)", prog=prog)
    inputs = [np.array(a, dtype=np.float64) for a in prog.inputs]
    argnums = tuple(range(len(inputs)))
    for stage in ("jit", "grad"):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                if stage == "jit":
                    got = gj.jit(f)(*[a.copy() for a in inputs])
                else:
                    got = gj.grad(f, argnums=argnums)(*[a.copy() for a in inputs])
        except Exception as e:  # noqa: BLE001  (classified below)
            kind = "refused" if isinstance(e, gj.GradjitError) else "crash"
            return Outcome(kind, stage, f"{type(e).__name__}: {e}", e, prog)
        if stage == "jit":
            v = np.asarray(got)
            if v.shape != () or not np.isfinite(v) or \
                    abs(float(v) - orc.value) > 1e-10 * (abs(orc.value) + orc.scale) + 1e-300:
                return Outcome("wrong", stage, f"value {v!r} != NumPy {orc.value!r} "
                               f"(abs diff {abs(float(np.asarray(v, float).sum()) - orc.value):.3g})",
                               prog=prog)
        else:
            if not isinstance(got, tuple) or len(got) != len(inputs):
                return Outcome("wrong", stage, f"grad returned {type(got).__name__} of "
                               f"{len(got) if isinstance(got, tuple) else '?'} for "
                               f"{len(inputs)} inputs", prog=prog)
            for k, (g, fd, noise) in enumerate(zip(got, orc.grads, orc.noise)):
                g = np.asarray(g)
                name = prog.input_names[k]
                if g.shape != fd.shape:
                    return Outcome("wrong", stage, f"d/d{name}: shape {g.shape} != {fd.shape}",
                                   prog=prog)
                tol = 1e-5 * np.abs(fd) + 1e-7 * orc.gscale + 10 * noise + 1e-10 * orc.scale + 1e-12
                err = np.abs(g - fd)
                if not np.all(np.isfinite(g)) or np.any(err > tol):
                    bad = np.argmax(np.where(np.isfinite(err), err - tol, np.inf))
                    i = np.unravel_index(bad, fd.shape) if fd.shape else ()
                    return Outcome("wrong", stage,
                                   f"d/d{name}{list(i) if i else ''}: gradjit {g[i]!r} vs finite "
                                   f"differences {fd[i]!r}\n  gradjit d/d{name} = "
                                   f"{np.array2string(g, precision=6)}\n  fd      d/d{name} = "
                                   f"{np.array2string(fd, precision=6)}", prog=prog)
    # One input read from outside, changed between calls. Guards (runtime/guards.py) sit
    # in front of every executor alike, so the interpreter's runs check them without
    # paying a compile for each program's second function.
    from .outside import check_outside
    out = check_outside(prog, orc) if os.environ.get("GRADJIT_EXECUTOR") == "numpy" else None
    return Outcome("pass", prog=prog) if out is None else out


def known_bug_features():
    return tuple(KNOWN_BUGS)


def normalize_message(msg):
    """A refusal's message without the numbers, shapes, names and source lines that
    vary between programs (for grouping)."""
    first = msg.split("\n  at ")[0].strip().splitlines()[0] if msg.strip() else msg
    first = re.sub(r'at File "[^"]*", line \d+:.*?(?=\) is |$)', "at <line>", first)
    first = re.sub(r"\bv\d+\b", "v", first)
    first = re.sub(r"\(\s*[\d, ]*\)", "(shape)", first)
    first = re.sub(r"-?\d+(\.\d+)?(e-?\d+)?", "N", first)
    return first[:160]


def shrink(prog, fails):
    """A smaller program that still ``fails`` (a predicate on Program): the loss over
    one value only (the earliest that fails), steps it does not need dropped, then steps
    replaced by their input where shapes allow."""
    best = prog
    names = [s.out for s in prog.steps]
    for n in names:                          # earliest value whose loss alone fails
        cand = prog.with_loss_on([n])
        if len(cand.steps) < len(best.steps):
            try:
                if fails(cand):
                    best = cand
                    break
            except Exception:
                pass
    return best
