"""The op-case machinery shared by the gradcheck suites: input kinds, ``Case``, ``case()``.

``CASES`` is filled by ``test_ops_gradcheck.py`` (the core ops) and by the
family modules it imports (``cases_math.py`` ...); see that module's docstring
for what each input kind is for. Kinds: ``normal``; ``pos`` (0.5..2);
``away`` (|x| >= 0.3); ``distinct`` (spaced >= 0.2 apart); ``ints`` (small
exact integers); ``unit`` (-0.9..0.9, inside asin/atanh/erfinv's domain);
``prob`` (0.1..0.9, logit); ``gt1`` (1.2..3, acosh); ``offint`` (-3..3 with a
fractional part in 0.2..0.8, away from floor/round jumps).
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

import gradjit as gj


def normal(*shape):
    return ("normal", shape)


def pos(*shape):
    return ("pos", shape)


def away(*shape):
    return ("away", shape)


def distinct(*shape):
    return ("distinct", shape)


def ints(*shape):
    return ("ints", shape)


def unit(*shape):
    return ("unit", shape)


def prob(*shape):
    return ("prob", shape)


def gt1(*shape):
    return ("gt1", shape)


def offint(*shape):
    return ("offint", shape)


def _make(kind, shape, rng):
    if kind == "unit":
        return rng.uniform(-0.9, 0.9, shape)
    if kind == "prob":
        return rng.uniform(0.1, 0.9, shape)
    if kind == "gt1":
        return rng.uniform(1.2, 3.0, shape)
    if kind == "offint":
        return rng.integers(-3, 3, shape) + rng.uniform(0.2, 0.8, shape)
    if kind == "normal":
        return rng.standard_normal(shape)
    if kind == "pos":
        return rng.uniform(0.5, 2.0, shape)
    if kind == "away":
        return rng.choice([-1.0, 1.0], shape) * rng.uniform(0.3, 1.5, shape)
    if kind == "distinct":
        n = int(np.prod(shape))
        vals = rng.permutation(n) * 0.25 - 0.125 * n + rng.uniform(0.0, 0.05, n)
        return vals.reshape(shape)
    if kind == "ints":
        return rng.integers(0, 3, shape).astype(np.float64)
    raise ValueError(kind)


def _shape_str(shape):
    return "(" + ",".join(map(str, shape)) + ")"


@dataclass(frozen=True)
class Case:
    name: str
    fn: object
    specs: tuple
    nondiff: tuple = ()
    rep: bool = False
    tag: str = ""

    @property
    def id(self):
        shapes = "".join(_shape_str(s) for _, s in self.specs)
        return f"{self.name}{'/' + self.tag if self.tag else ''}-{shapes}"

    @property
    def diff(self):
        return tuple(i for i in range(len(self.specs)) if i not in self.nondiff)

    def rng(self, salt=""):
        return np.random.default_rng(zlib.crc32((self.id + salt).encode()))

    def arrays(self, salt="", dtype=np.float64):
        rng = self.rng(salt)
        return [_make(kind, shape, rng).astype(dtype) for kind, shape in self.specs]

    def forward(self, *arrays):
        """The case's forward on plain arrays (eager, no recording)."""
        return self.fn(*map(gj.tensor, arrays)).data

    def weights(self, arrays):
        """Fixed random cotangent W (shape and dtype of the output): loss = sum(f * W)."""
        out = self.forward(*arrays)
        return self.rng("W").standard_normal(out.shape).astype(out.dtype)


CASES = []


def case(name, fn, *specs, nondiff=(), rep=False, tag=""):
    c = Case(name, fn, specs, tuple(nondiff), rep, tag)
    n = 1
    while any(o.id == c.id for o in CASES):   # same op and shapes, another spelling
        n += 1
        c = Case(name, fn, specs, tuple(nondiff), rep, f"{tag}{n}")
    CASES.append(c)


