"""The NumPy conformance table (in the style of PyTorch's OpInfo).

One ``OpInfo`` per NumPy function / ufunc of gradjit's dispatch table
(``gradjit.tracer.numpy_protocol._FUNCTIONS`` / ``_UFUNCS``, plus scipy.special's
ufuncs that join it once SciPy is imported) and per NumPy method or operator of
traced arrays (``tracer/numpy_methods.py``: ``ndarray.var``, ``ndarray.__add__``).
Each record holds

- ``fn(*arrays, **kwargs)``: plain NumPy code calling the function. The same
  code is the reference (run on NumPy arrays) and the subject (run under
  ``gj.jit`` / ``gj.grad`` on traced arrays, or on ``gj.tensor`` values);
  ``args`` are the arrays that get traced, ``kwargs`` stay static (Python
  values, constant NumPy arrays).
- ``samples(rng)``: the sample inputs: several shapes ((), (1,), (3,), (2, 3),
  (1, 4), (2, 3, 4), empty (0, 3) where NumPy allows) and the documented
  argument variants (axis None / int / negative / tuple, keepdims, dtype,
  ddof, ord ...). Inputs are drawn in the function's domain (positive for
  log / sqrt, distinct values for max / sort, off the jumps of floor / round,
  away from the kinks of abs / clip / maximum) so that central finite
  differences are meaningful.
- flags: ``differentiable`` (gradient checked against finite differences),
  ``second_order`` (Hessian-vector product checked too), ``tensor_mode``
  (``np.<fn>(gj.tensor(...))`` checked; off for methods, since tensors keep
  torch's method vocabulary), ``values_defined`` (off for ``empty_like``).
- ``bugs``: known gradjit bugs and gaps (``Bug``: the checks that fail and a
  predicate on the sample), which the tests mark ``xfail(strict=True)`` so that
  each one is visible and turns into a failure once fixed. Most are gathered
  in ``KNOWN_BUGS`` at the end; gaps probed by dedicated samples (a keyword
  NumPy has and gradjit refuses) sit with their record.

``SKIP`` lists dispatch-table entries without an OpInfo (with the reason);
``METHOD_SKIP`` the ndarray methods of traced arrays without one. The test
module checks that everything is accounted for. ``table_size()`` is what
``python -m gradjit coverage`` reports. This module imports only NumPy, gradjit
and (when installed) scipy.special, not pytest, so the coverage command can load it.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

F8, F4, I8, B = np.float64, np.float32, np.int64, np.bool_


# -- samples and records ---------------------------------------------------------------------------
@dataclass
class Sample:
    args: tuple                     # the arrays that are traced (order = fn's positional args)
    kwargs: dict = field(default_factory=dict)   # static arguments
    desc: str = ""
    grad: bool = True               # check the gradient (only float64 args are differentiated)
    hvp: bool | None = None         # None: chosen by the table (a few small float64 samples)
    grad_args: tuple | None = None  # which args to differentiate (default: every float64 one)

    def differentiable_args(self):
        if self.grad_args is not None:
            return tuple(self.grad_args)
        return tuple(i for i, a in enumerate(self.args)
                     if isinstance(a, np.ndarray) and a.dtype == F8)

    def describe(self):
        parts = [_fmt(a) for a in self.args]
        parts += [f"{k}={_fmt_kw(v)}" for k, v in self.kwargs.items()]
        text = ",".join(parts)
        return f"{self.desc}:{text}" if self.desc else text


def _fmt(a):
    if isinstance(a, np.ndarray):
        short = {"float64": "f8", "float32": "f4", "int64": "i8", "bool": "b1"}.get(
            a.dtype.name, a.dtype.name)
        return short + "(" + ",".join(map(str, a.shape)) + ")"
    return repr(a)


def _fmt_kw(v):
    if isinstance(v, np.ndarray):
        return "arr" + _fmt(v)[2:]
    if isinstance(v, type) or isinstance(v, np.dtype):
        return np.dtype(v).name
    return repr(v).replace(" ", "")


@dataclass
class Bug:
    """A known gradjit bug or gap: ``checks`` fail on the samples where ``when`` holds."""
    checks: tuple
    reason: str
    when: Callable = lambda s: True


@dataclass
class OpInfo:
    name: str                       # "np.sum", "np.linalg.norm", "ndarray.var"
    fn: Callable                    # fn(*arrays, **kwargs): plain NumPy code
    samples: Callable               # samples(rng) -> list[Sample]
    funcs: tuple = ()               # the dispatch-table keys this record covers
    method: str | None = None       # the ndarray method covered (methods of traced arrays)
    differentiable: bool = True
    second_order: bool = True
    supports_empty: bool = True     # informational: whether the samples include empty arrays
    tensor_mode: bool = True
    values_defined: bool = True     # False: compare shape and dtype only (np.empty_like)
    rtol: float = 1e-12
    atol: float = 1e-12
    grad_rtol: float = 1e-5
    grad_atol: float = 1e-7
    bugs: list = field(default_factory=list)
    n_hvp: int = 2                  # how many samples get the second-order check
    _cases: list | None = field(default=None, repr=False)

    def cases(self):
        """The samples (drawn once, from a seed of the name: the same on every run)."""
        if self._cases is None:
            rng = np.random.default_rng(zlib.crc32(self.name.encode()))
            cases = list(self.samples(rng))
            for s in cases:   # NumPy scalars (a 0-d draw plus noise) become 0-d arrays
                s.args = tuple(np.asarray(a) if isinstance(a, np.generic) else a
                               for a in s.args)
                if any(_is_f4(v) for v in s.kwargs.values()):
                    s.grad = False   # a float32 cast: float64 finite differences mean nothing
            n = 0
            for s in cases:
                if s.hvp is None:
                    size = sum(s.args[i].size for i in s.differentiable_args())
                    s.hvp = bool(self.second_order and self.differentiable and s.grad
                                 and 0 < size <= 12 and n < self.n_hvp)
                n += bool(s.hvp)
            self._cases = cases
        return self._cases

    def bug(self, sample, check):
        """The reason a known bug makes ``check`` fail on ``sample``, or None."""
        for b in self.bugs:
            if check in b.checks and b.when(sample):
                return b.reason
        return None


def _is_f4(v):
    try:
        return isinstance(v, (type, np.dtype, str)) and np.dtype(v) == np.float32
    except Exception:   # noqa: BLE001  (not a dtype: 'ij,jk', 'wrap' ...)
        return False


ALL_CHECKS = ("forward", "grad", "grad2", "tensor")


def bug(reason, *checks, when=lambda s: True):
    return Bug(tuple(checks) or ALL_CHECKS, reason, when)


def kw(**match):
    """A predicate: the sample's kwargs include ``match``."""
    return lambda s: all(k in s.kwargs and _same(s.kwargs[k], v) for k, v in match.items())


def _same(a, b):
    try:
        return bool(np.all(a == b)) and type(a) is type(b)
    except Exception:
        return a is b


def desc_is(*descs):
    return lambda s: s.desc in descs


# -- drawing inputs --------------------------------------------------------------------------------
SHAPES = [(), (1,), (3,), (2, 3), (1, 4), (2, 3, 4)]
EMPTY = (0, 3)


def draw(rng, shape, domain="real", dtype=F8):
    """An array of ``shape`` in ``domain`` (see the module docstring)."""
    n = int(np.prod(shape))
    if domain == "real":
        x = rng.standard_normal(shape)
    elif domain == "pos":
        x = rng.uniform(0.5, 2.0, shape)
    elif domain == "unit":
        x = rng.uniform(-0.8, 0.8, shape)
    elif domain == "prob":
        x = rng.uniform(0.15, 0.85, shape)
    elif domain == "gt1":
        x = rng.uniform(1.3, 3.0, shape)
    elif domain == "nonzero":
        x = rng.choice([-1.0, 1.0], shape) * rng.uniform(0.3, 2.0, shape)
    elif domain == "distinct":   # all different (gaps >= 0.3) and away from 0
        x = ((rng.permutation(n) - (n - 1) / 2) * 0.5 + 0.25
             + rng.uniform(-0.1, 0.1, n)).reshape(shape)
    elif domain == "offgrid":   # fractional parts in [0.15, 0.35]: off integers and halves
        x = rng.integers(-3, 3, shape) + 0.25 + rng.uniform(-0.1, 0.1, shape)
    elif domain == "halfgrid":   # k + 0.5 (+-0.1): fmod / remainder by ~1
        x = rng.integers(-3, 3, shape) + 0.5 + rng.uniform(-0.1, 0.1, shape)
    elif domain == "grid":      # near-integers as floats: ties and equalities happen
        x = rng.integers(-1, 2, shape).astype(F8)
    elif domain == "special":   # forward only: NaN, +-inf, +-0 and ordinary values
        pool = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.5, -2.5, 0.7])
        x = pool[np.arange(n) % len(pool)].reshape(shape)
    elif domain == "int":
        x = rng.integers(-3, 4, shape)
    elif domain == "intpos":
        x = rng.integers(1, 5, shape)
    elif domain == "bool":
        x = rng.random(shape) < 0.5
    else:
        raise ValueError(domain)
    if domain in ("int", "intpos") and dtype is F8:
        dtype = I8
    if domain == "bool" and dtype is F8:
        dtype = B
    return np.asarray(x, dtype=dtype)


def _int_domain(domain):
    return {"real": "int", "pos": "intpos", "nonzero": "intpos", "distinct": "int",
            "offgrid": "int"}.get(domain)


# -- 1. unary ufuncs and elementwise functions -----------------------------------------------------
def unary_samples(domain="real", ints=True, f32=True, special=True, extra=None):
    def gen(rng):
        out = [Sample((draw(rng, s, domain),)) for s in SHAPES]
        out.append(Sample((draw(rng, EMPTY, domain),)))
        if f32:
            out.append(Sample((draw(rng, (2, 3), domain, F4),)))
        idom = _int_domain(domain)
        if ints and idom:
            out.append(Sample((draw(rng, (2, 3), idom),)))
        if special:
            out.append(Sample((draw(rng, (8,), "special"),), desc="special", grad=False))
        if extra:
            out += extra(rng)
        return out
    return gen


def _ufunc_fn(uf):
    def fn(*a, **kwargs):
        lhs, rhs = kwargs.pop("lhs", None), kwargs.pop("rhs", None)
        args = ([lhs] if lhs is not None else []) + list(a) + ([rhs] if rhs is not None else [])
        return uf(*args, **kwargs)
    return fn


def qualname(f):
    mod = getattr(f, "__module__", None) or ""
    if isinstance(f, np.ufunc):
        special = None
        try:
            import scipy.special as special
        except ImportError:
            pass
        if special is not None and getattr(special, f.__name__, None) is f:
            return f"scipy.special.{f.__name__}"
        return f"np.{f.__name__}"
    if mod.startswith("numpy.linalg") or getattr(np.linalg, f.__name__, None) is f:
        return f"np.linalg.{f.__name__}"
    return f"np.{f.__name__}"


OPS: list[OpInfo] = []


def add(name_or_func, fn=None, samples=None, funcs=None, **flags):
    if isinstance(name_or_func, str):
        name = name_or_func
        funcs = funcs or ()
    else:
        name = qualname(name_or_func)
        funcs = funcs or (name_or_func,)
        if fn is None:
            fn = (_ufunc_fn(name_or_func) if isinstance(name_or_func, np.ufunc)
                  else (lambda f: lambda *a, **k: f(*a, **k))(name_or_func))
    op = OpInfo(name, fn, samples, tuple(funcs), **flags)
    OPS.append(op)
    return op


_NOGRAD = dict(second_order=False)   # a zero gradient: the first-order check is enough

UNARY = [
    (np.negative, "real", {}), (np.absolute, "nonzero", {}), (np.fabs, "nonzero", {}),
    (np.sign, "nonzero", _NOGRAD), (np.exp, "real", {}), (np.exp2, "real", {}),
    (np.expm1, "real", {}), (np.log, "pos", {}), (np.log2, "pos", {}), (np.log10, "pos", {}),
    (np.log1p, "pos", {}), (np.sin, "real", {}), (np.cos, "real", {}), (np.tan, "unit", {}),
    (np.tanh, "real", {}), (np.sqrt, "pos", {}), (np.reciprocal, "nonzero", {}),
    (np.arcsin, "unit", {}), (np.arccos, "unit", {}), (np.arctan, "real", {}),
    (np.sinh, "real", {}), (np.cosh, "real", {}), (np.arcsinh, "real", {}),
    (np.arccosh, "gt1", {}), (np.arctanh, "unit", {}), (np.floor, "offgrid", _NOGRAD),
    (np.ceil, "offgrid", _NOGRAD), (np.rint, "offgrid", _NOGRAD),
    (np.trunc, "offgrid", _NOGRAD), (np.square, "real", {}), (np.deg2rad, "real", {}),
    (np.rad2deg, "real", {}), (np.radians, "real", {}), (np.degrees, "real", {}),
    (np.conjugate, "real", {}),
]
for _f, _dom, _flags in UNARY:
    add(_f, samples=unary_samples(_dom), **_flags)

# functions of one array, elementwise
add(np.fix, samples=unary_samples("offgrid"), **_NOGRAD)
add(np.real, samples=unary_samples("real"))
add(np.imag, samples=unary_samples("real"), **_NOGRAD)
add(np.angle, samples=unary_samples("nonzero", extra=lambda rng: [
    Sample((draw(rng, (2, 3), "nonzero"),), {"deg": True})]), **_NOGRAD)
add(np.cbrt, samples=unary_samples("nonzero", extra=lambda rng: [
    Sample((np.array([0.0, 8.0, -27.0]),), desc="zero and cubes", grad=False)]))
add(np.heaviside, samples=lambda rng: [   # a zero gradient in x1; x2 where x1 == 0
    Sample((draw(rng, (2, 3), "nonzero"), draw(rng, (2, 3)))),
    Sample((np.array([-1.0, 0.0, 2.0, 0.0]), draw(rng, (4,))), desc="zeros", grad=False),
    Sample((draw(rng, (3,), "nonzero"), draw(rng, ())), desc="broadcast"),
    Sample((draw(rng, (2, 3), "nonzero").astype(F4), draw(rng, ()).astype(F4)), grad=False),
    Sample((draw(rng, (4,), "special"), draw(rng, (4,))), desc="special", grad=False)],
    **_NOGRAD)
add(np.sinc, samples=unary_samples("real", extra=lambda rng: [
    Sample((np.array([0.0, 1.0, -2.0, 0.5]),), desc="zeros and integers")]))
add(np.copy, samples=unary_samples("real", extra=lambda rng: [
    Sample((draw(rng, (2, 3)),), {"order": "C"})]))
add(np.nan_to_num, samples=lambda rng: [
    *[Sample((draw(rng, s),)) for s in SHAPES], Sample((draw(rng, EMPTY),)),
    Sample((draw(rng, (8,), "special"),), desc="special", grad=False),
    Sample((draw(rng, (8,), "special"),), {"nan": 1.5, "posinf": 9.0, "neginf": -9.0},
           desc="special", grad=False),
    Sample((draw(rng, (8,), "special", F4),), desc="special"),
    Sample((draw(rng, (2, 3), "int"),)),
])


def _round_samples(rng):
    out = [Sample((draw(rng, s, "offgrid"),)) for s in SHAPES]
    out.append(Sample((draw(rng, EMPTY, "offgrid"),)))
    out.append(Sample((draw(rng, (2, 3), "offgrid") / 10,), {"decimals": 1}))
    out.append(Sample((draw(rng, (2, 3), "offgrid") * 10,), {"decimals": -1}))
    out.append(Sample((draw(rng, (2, 3), "offgrid", F4),)))
    out.append(Sample((draw(rng, (2, 3), "int") * 17,), {"decimals": -1}))
    out.append(Sample((draw(rng, (8,), "special"),), desc="special", grad=False))
    return out


add(np.round, samples=_round_samples, **_NOGRAD)
add(np.around, samples=_round_samples, **_NOGRAD)

# predicates and logical ufuncs: boolean results, forward only
_PRED = dict(differentiable=False, second_order=False)
add(np.real_if_close, samples=unary_samples("grid", ints=False))   # (real: the array itself)
for _f in (np.iscomplex, np.isreal):   # (real arrays: a concrete answer)
    add(_f, samples=unary_samples("grid", ints=False), **_PRED)
for _f in (np.isnan, np.isinf, np.isfinite):
    add(_f, samples=unary_samples("special", ints=False, special=False, extra=lambda rng: [
        Sample((draw(rng, (2, 3), "int"),)), Sample((draw(rng, (2, 3), "bool"),))]), **_PRED)
add(np.logical_not, samples=unary_samples("grid", ints=False, extra=lambda rng: [
    Sample((draw(rng, (2, 3), "bool"),)), Sample((draw(rng, (2, 3), "int"),))]), **_PRED)
add(np.invert, samples=lambda rng: [
    Sample((draw(rng, s, "bool"),)) for s in SHAPES + [EMPTY]] + [
    Sample((draw(rng, (2, 3), "int"),), desc="int")], **_PRED)


# -- 2. binary ufuncs ------------------------------------------------------------------------------
BIN_SHAPES = [((), ()), ((3,), (3,)), ((2, 3), (2, 3)), ((2, 3), (3,)), ((2, 1), (1, 3)),
              ((1, 4), (2, 3, 4)), ((2, 3, 4), ()), ((1,), (2, 3)), ((0, 3), (3,))]


def binary_samples(da="real", db="real", ints=True, f32=True, scalars=(1.7, 0.6), extra=None):
    def gen(rng):
        out = [Sample((draw(rng, sa, da), draw(rng, sb, db))) for sa, sb in BIN_SHAPES]
        # a Python scalar or a constant NumPy array on either side (not traced)
        out.append(Sample((draw(rng, (2, 3), da),), {"rhs": scalars[0]}))
        out.append(Sample((draw(rng, (2, 3), db),), {"lhs": scalars[1]}))
        out.append(Sample((draw(rng, (3,), da),), {"rhs": draw(rng, (2, 3), db)}))
        if f32:
            out.append(Sample((draw(rng, (2, 3), da, F4), draw(rng, (2, 3), db, F4))))
            out.append(Sample((draw(rng, (2, 3), da, F4), draw(rng, (3,), db))))
            out.append(Sample((draw(rng, (2, 3), da, F4),), {"rhs": scalars[0]}))
        ia, ib = _int_domain(da), _int_domain(db)
        if ints and ia and ib:
            out.append(Sample((draw(rng, (2, 3), ia), draw(rng, (2, 3), ib))))
            out.append(Sample((draw(rng, (2, 3), ia), draw(rng, (3,), db))))
        if extra:
            out += extra(rng)
        return out
    return gen


def minmax_samples(rng):
    out = []
    for sa, sb in BIN_SHAPES:
        a = draw(rng, sa, "int") + rng.uniform(-0.1, 0.1, sa)
        b = draw(rng, sb, "int") + 0.5 + rng.uniform(-0.1, 0.1, sb)
        out.append(Sample((a, b)))
    out.append(Sample((draw(rng, (2, 3), "offgrid"),), {"rhs": 0.0}))
    out.append(Sample((draw(rng, (2, 3), "offgrid"),), {"lhs": 0.0}))
    out.append(Sample((draw(rng, (2, 3), "offgrid", F4), draw(rng, (2, 3), "offgrid", F4))))
    out.append(Sample((draw(rng, (2, 3), "int"), draw(rng, (2, 3), "int"))))
    out.append(Sample((draw(rng, (8,), "special"), draw(rng, (8,), "real")), desc="special",
                      grad=False))
    out.append(Sample((draw(rng, (8,), "real"), draw(rng, (8,), "special")), desc="special",
                      grad=False))
    return out


def mod_samples(rng):
    def den(s):
        return rng.choice([-1.0, 1.0], s) * (1 + rng.uniform(-0.02, 0.02, s))
    out = [Sample((draw(rng, sa, "halfgrid"), den(sb))) for sa, sb in BIN_SHAPES]
    out.append(Sample((draw(rng, (2, 3), "halfgrid"),), {"rhs": 1.0}))
    out.append(Sample((den((2, 3)),), {"lhs": 2.5}))
    out.append(Sample((draw(rng, (2, 3), "halfgrid", F4), den((2, 3)).astype(F4))))
    out.append(Sample((draw(rng, (2, 3), "int") * 3, draw(rng, (2, 3), "intpos")), desc="int"))
    out.append(Sample((draw(rng, (8,), "special"), draw(rng, (8,), "nonzero")),
                      desc="special", grad=False))
    return out


for _f, _da, _db, _flags in [
        (np.add, "real", "real", {}), (np.subtract, "real", "real", {}),
        (np.multiply, "real", "real", {}), (np.true_divide, "real", "nonzero", {}),
        (np.power, "pos", "real", {}), (np.arctan2, "nonzero", "nonzero", {}),
        (np.hypot, "nonzero", "nonzero", {}), (np.copysign, "nonzero", "nonzero", {}),
        (np.logaddexp, "real", "real", {}), (np.logaddexp2, "real", "real", {})]:
    extra = None
    if _f is np.add:   # ufunc keywords NumPy accepts
        extra = lambda rng: [Sample((draw(rng, (2, 3)), draw(rng, (2, 3))), {"dtype": F4},
                                    desc="ufunc-dtype", grad=False)]
    if _f is np.power:
        extra = lambda rng: [Sample((draw(rng, (2, 3), "real"),), {"rhs": 2}),
                             Sample((draw(rng, (2, 3), "real"),), {"rhs": 3.0}),
                             Sample((draw(rng, (2, 3), "int"), draw(rng, (2, 3), "intpos")))]
    add(_f, samples=binary_samples(_da, _db, ints=_f is not np.power, extra=extra))

for _f in (np.maximum, np.minimum, np.fmax, np.fmin):
    add(_f, samples=minmax_samples)
for _f in (np.fmod, np.remainder, np.floor_divide, np.divmod):   # (floor_divide: a zero gradient)
    add(_f, samples=mod_samples)

for _f in (np.greater, np.less, np.greater_equal, np.less_equal, np.equal, np.not_equal):
    add(_f, samples=binary_samples("grid", "grid", ints=False, scalars=(0.0, 1.0),
                                   extra=lambda rng: [
                                       Sample((draw(rng, (2, 3), "int"), draw(rng, (3,), "int"))),
                                       Sample((draw(rng, (8,), "special"),
                                               draw(rng, (8,), "special")[::-1].copy()))]),
        **_PRED)


def logical_samples(rng):
    out = [Sample((draw(rng, sa, "bool"), draw(rng, sb, "bool"))) for sa, sb in BIN_SHAPES]
    out.append(Sample((draw(rng, (2, 3), "grid"), draw(rng, (2, 3), "bool"))))
    out.append(Sample((draw(rng, (2, 3), "grid"), draw(rng, (3,), "grid"))))
    out.append(Sample((draw(rng, (2, 3), "bool"),), {"rhs": True}))
    return out


for _f in (np.logical_and, np.logical_or, np.logical_xor):
    add(_f, samples=logical_samples, **_PRED)
for _f in (np.bitwise_and, np.bitwise_or, np.bitwise_xor):
    add(_f, samples=lambda rng: [
        *[Sample((draw(rng, sa, "bool"), draw(rng, sb, "bool"))) for sa, sb in BIN_SHAPES],
        *[Sample((draw(rng, sa, "int"), draw(rng, sb, "int"))) for sa, sb in BIN_SHAPES]],
        **_PRED)   # (Python ints beside narrow arrays: tests/runtime/test_numpy_dtypes.py)


def _shift_samples(rng):
    counts = np.array([[0, 1, 7], [8, 63, 70]])   # beyond the width: everything shifted out
    return [*[Sample((draw(rng, sa, "int"), np.abs(draw(rng, sb, "int")) % 9))
              for sa, sb in BIN_SHAPES],
            Sample((draw(rng, (2, 3), "int"), counts), desc="wide counts"),
            Sample((-np.abs(draw(rng, (2, 3), "int")) - 1, counts), desc="negative, wide counts")]


for _f in (np.left_shift, np.right_shift):
    add(_f, samples=_shift_samples, **_PRED)


# -- 3. reductions ---------------------------------------------------------------------------------
def _reduce_cases(axis_tuple=True, keepdims=True, empty=True, empty_all=True):
    """(shape, kwargs) of a reduction's axis / keepdims variants."""
    cases = [((), {}), ((1,), {}), ((3,), {}), ((2, 3), {}), ((2, 3, 4), {}),
             ((3,), {"axis": 0}), ((3,), {"axis": -1}), ((2, 3), {"axis": 0}),
             ((2, 3), {"axis": 1}), ((2, 3), {"axis": -1}), ((1, 4), {"axis": 0}),
             ((2, 3, 4), {"axis": 1}), ((2, 3, 4), {"axis": -3})]
    if keepdims:
        cases += [((2, 3), {"axis": 1, "keepdims": True}), ((2, 3), {"keepdims": True}),
                  ((2, 3), {"axis": 0, "keepdims": False}), ((), {"keepdims": True})]
    if axis_tuple:
        cases += [((2, 3, 4), {"axis": (0, 2)}), ((2, 3, 4), {"axis": (-1, -3)}),
                  ((2, 3), {"axis": (0, 1)}), ((2, 3), {"axis": ()})]
        if keepdims:
            cases += [((2, 3, 4), {"axis": (0, 2), "keepdims": True})]
    if empty:
        cases += [(EMPTY, {"axis": 1})]   # a reduction over size 3 of nothing: shape (0,)
        if empty_all:
            cases += [(EMPTY, {}), (EMPTY, {"axis": 0})]
    return cases


def reduce_samples(domain="real", *, axis_tuple=True, keepdims=True, empty=True,
                   empty_all=True, extra=None, ints=True, f32=True):
    def gen(rng):
        out = [Sample((draw(rng, s, domain),), dict(k))
               for s, k in _reduce_cases(axis_tuple, keepdims, empty, empty_all)]
        if f32:
            out.append(Sample((draw(rng, (2, 3), domain, F4),), {"axis": 0}))
        idom = _int_domain(domain)
        if ints and idom:
            out.append(Sample((draw(rng, (2, 3), idom),), {"axis": 1}))
            out.append(Sample((draw(rng, (2, 3), "bool"),)))
        if extra:
            out += extra(rng)
        return out
    return gen


def _dtype_variants(domain):
    return lambda rng: [
        Sample((draw(rng, (2, 3), domain),), {"axis": 0, "dtype": F4}, grad=False),
        Sample((draw(rng, (2, 3), _int_domain(domain)),), {"dtype": F8}),
        Sample((draw(rng, (2, 3), domain, F4),), {"axis": 1, "dtype": F8}, grad=False),
    ]


_WHERE_MASK = np.array([[True, False, True], [True, True, False]])

for _f, _dom in [(np.sum, "real"), (np.mean, "real"), (np.prod, "nonzero")]:
    extra = (lambda f, dom: lambda rng: _dtype_variants(dom)(rng)
             + [Sample((draw(rng, (2, 3), dom),), {"axis": 1, "where": _WHERE_MASK},
                       desc="where")]
             + ([Sample((draw(rng, (2, 3), dom),), {"axis": 1, "initial": 1.5},
                        desc="initial")] if f is not np.mean else []))(_f, _dom)
    add(_f, samples=reduce_samples(_dom, extra=extra))

for _f in (np.max, np.amax, np.min, np.amin):
    add(_f, samples=reduce_samples("distinct", empty_all=False, extra=lambda rng: [
        Sample((draw(rng, (2, 3), "distinct"),), {"axis": 1, "initial": -9.0}, desc="initial"),
        Sample((draw(rng, (2, 3), "distinct"),), {"axis": 1, "initial": 9.0, "where": _WHERE_MASK},
               desc="where"),
        Sample((draw(rng, (2, 3), "special"),), {"axis": 1}, desc="special", grad=False)]))


def _moment_extra(rng):
    return [Sample((draw(rng, (2, 3)),), {"ddof": 1}), Sample((draw(rng, (2, 3)),), {"axis": 1,
                                                                                     "ddof": 1}),
            Sample((draw(rng, (2, 3, 4)),), {"axis": (0, 2), "ddof": 2, "keepdims": True}),
            Sample((draw(rng, (2, 3)),), {"axis": 0, "correction": 1}),
            Sample((draw(rng, (2, 3)),), {"ddof": 1.5}),
            Sample((draw(rng, (4,)),), {"dtype": F4}, grad=False),
            Sample((np.full((2, 3), 0.7),), {"axis": 1}, desc="constant"),
            Sample((draw(rng, (2, 3)),), {"axis": 1, "where": _WHERE_MASK}, desc="where"),
            Sample((draw(rng, (2, 3)),), {"axis": 1, "keepdims": True,
                                          "mean": np.zeros((2, 1))}, desc="mean=")]


for _f in (np.var, np.std):
    add(_f, samples=reduce_samples("real", extra=_moment_extra))

add(np.nansum, samples=reduce_samples("real", extra=lambda rng: [
    Sample((np.where(rng.random((2, 3)) < 0.3, np.nan, draw(rng, (2, 3))),), {"axis": 1},
           desc="nan"),
    Sample((np.where(rng.random((2, 3)) < 0.3, np.nan, draw(rng, (2, 3))),), desc="nan"),
    Sample((draw(rng, (2, 3)),), {"axis": 0, "dtype": F4}, desc="dtype", grad=False)]))


def _median_cases(rng):
    out = [Sample((draw(rng, s, "distinct"),), dict(k)) for s, k in [
        ((3,), {}), ((4,), {}), ((1,), {}), ((), {}), ((2, 3), {}), ((2, 3), {"axis": 0}),
        ((2, 3), {"axis": -1}), ((2, 4), {"axis": 1, "keepdims": True}),
        ((2, 3), {"keepdims": True}), ((2, 3, 4), {"axis": 1}), ((2, 3, 4), {"axis": (0, 2)}),
        ((2, 3, 4), {"axis": (-1, 0), "keepdims": True}), (EMPTY, {"axis": 1})]]
    out.append(Sample((draw(rng, (2, 3), "int"),), {"axis": 1}))
    out.append(Sample((draw(rng, (2, 3), "distinct", F4),)))
    return out


add(np.median, samples=_median_cases)

add(np.ptp, samples=reduce_samples("distinct", empty_all=False, ints=False, extra=lambda rng: [
    Sample((draw(rng, (2, 3), "int"),), {"axis": 1})]))


def _average_samples(rng):
    out = [Sample((draw(rng, s),), dict(k)) for s, k in [
        ((3,), {}), ((2, 3), {}), ((2, 3), {"axis": 0}), ((2, 3, 4), {"axis": (0, 2)}),
        ((2, 3), {"axis": 1, "keepdims": True}), ((), {})]]
    out += [
        Sample((draw(rng, (2, 3)), draw(rng, (2, 3), "pos"))),
        Sample((draw(rng, (2, 3)), draw(rng, (3,), "pos")), {"axis": 1}),
        Sample((draw(rng, (2, 3)), draw(rng, (2,), "pos")), {"axis": 0, "keepdims": True}),
        Sample((draw(rng, (2, 3, 4)), draw(rng, (2, 4), "pos")), {"axis": (0, 2)}),
        Sample((draw(rng, (2, 3, 4)), draw(rng, (4, 2), "pos")), {"axis": (2, 0)}),
        Sample((draw(rng, (2, 3)), draw(rng, (2, 3), "pos")), {"axis": 1, "returned": True}),
        Sample((draw(rng, (2, 3), "int"),), {"axis": 0}),
        Sample((draw(rng, (2, 3), "real", F4),), {"axis": 0}),
    ]
    return out


def _average_fn(a, w=None, **kw):
    return np.average(a, weights=w, **kw)


add("np.average", _average_fn, _average_samples, funcs=(np.average,))

for _f in (np.argmax, np.argmin):
    add(_f, samples=reduce_samples("distinct", axis_tuple=False, empty_all=False,
                                   extra=lambda rng: [
                                       Sample((draw(rng, (2, 3, 4), "distinct"),),
                                              {"axis": 1, "keepdims": True}),
                                       Sample((draw(rng, (2, 3), "grid"),), {"axis": 1},
                                              desc="ties"),
                                       Sample((draw(rng, (8,), "special"),), desc="nan")]),
        **_PRED)

for _f in (np.any, np.all):
    add(_f, samples=reduce_samples("grid", extra=lambda rng: [
        Sample((draw(rng, (2, 3), "special"),), {"axis": 1}),
        Sample((draw(rng, (2, 3), "grid"),), {"axis": 1, "where": _WHERE_MASK})]), **_PRED)

add(np.count_nonzero, samples=lambda rng: [
    Sample((draw(rng, s, "grid"),), dict(k)) for s, k in [
        ((), {}), ((3,), {}), ((2, 3), {}), ((2, 3), {"axis": 0}), ((2, 3), {"axis": -1}),
        ((2, 3, 4), {"axis": (0, 2)}), ((2, 3), {"axis": 1, "keepdims": True}), (EMPTY, {}),
        (EMPTY, {"axis": 0})]] + [Sample((draw(rng, (2, 3), "bool"),), {"axis": 0}),
                                  Sample((draw(rng, (2, 3), "int"),))], **_PRED)


# scans
def scan_samples(domain="real", nan=False):
    def gen(rng):
        out = [Sample((draw(rng, s, domain),), dict(k)) for s, k in [
            ((), {}), ((1,), {}), ((3,), {}), ((2, 3), {}), ((2, 3), {"axis": 0}),
            ((2, 3), {"axis": 1}), ((2, 3), {"axis": -1}), ((2, 3, 4), {"axis": -2}),
            ((1, 4), {"axis": 0}), ((2, 3, 4), {}), (EMPTY, {"axis": 0}), (EMPTY, {})]]
        out.append(Sample((draw(rng, (2, 3), domain),), {"axis": 1, "dtype": F4}, grad=False))
        out.append(Sample((draw(rng, (2, 3), domain, F4),), {"axis": 0}))
        out.append(Sample((draw(rng, (2, 3), "int"),), {"axis": 1}))
        out.append(Sample((draw(rng, (2, 3), "bool"),), {"axis": 0}))
        if nan:
            x = np.where(rng.random((2, 4)) < 0.3, np.nan, draw(rng, (2, 4), domain))
            out.append(Sample((x,), {"axis": 1}, desc="nan"))
            out.append(Sample((x,), desc="nan"))
        return out
    return gen


add(np.cumsum, samples=scan_samples("real"))
add(np.cumprod, samples=scan_samples("nonzero"))
add(np.nancumsum, samples=scan_samples("real", nan=True))
add(np.nancumprod, samples=scan_samples("nonzero", nan=True))


def sort_samples(rng):
    out = [Sample((draw(rng, s, "distinct"),), dict(k)) for s, k in [
        ((1,), {}), ((3,), {}), ((2, 3), {}), ((2, 3), {"axis": 0}), ((2, 3), {"axis": -1}),
        ((2, 3, 4), {"axis": 1}), ((2, 3), {"axis": None}), ((2, 3, 4), {"axis": None}),
        ((), {"axis": None}), (EMPTY, {"axis": 0}), (EMPTY, {}),
        ((2, 3), {"kind": "stable"}), ((2, 3), {"axis": 0, "stable": True})]]
    out.append(Sample((draw(rng, (2, 4), "grid"),), {"axis": 1, "kind": "stable"}, desc="ties",
                      grad=False))
    out.append(Sample((draw(rng, (2, 3), "int"),), {"axis": 1}))
    out.append(Sample((draw(rng, (8,), "special"),), desc="nan", grad=False))
    return out


add(np.sort, samples=sort_samples)
add(np.argsort, samples=sort_samples, **_PRED)


# -- 4. shapes and layout --------------------------------------------------------------------------
def shaped(cases, domain="real", dtypes=True):
    """Samples of (shape, kwargs) pairs, plus a float32 and an int64 one of the first 2-D case."""
    def gen(rng):
        out = [Sample((draw(rng, s, domain),), dict(k)) for s, k in cases]
        if dtypes:
            s, k = next(((s, k) for s, k in cases if len(s) >= 2), cases[0])
            out.append(Sample((draw(rng, s, domain, F4),), dict(k)))
            out.append(Sample((draw(rng, s, "int"),), dict(k)))
        return out
    return gen


def _reshape(a, **k):
    return np.reshape(a, **k)


add("np.reshape", _reshape, shaped([
    ((2, 3), {"shape": (3, 2)}), ((2, 3), {"shape": (-1,)}), ((2, 3), {"shape": 6}),
    ((2, 3, 4), {"shape": (4, -1)}), ((), {"shape": (1, 1)}), ((1,), {"shape": ()}),
    ((3,), {"shape": (3, 1)}), (EMPTY, {"shape": (3, 0)}), (EMPTY, {"shape": (-1, 3, 1)}),
    ((2, 3), {"shape": (3, 2), "order": "F"})]), funcs=(np.reshape,))

add(np.transpose, samples=shaped([
    ((2, 3), {}), ((2, 3, 4), {}), ((2, 3, 4), {"axes": (1, 0, 2)}),
    ((2, 3, 4), {"axes": (-1, 0, 1)}), ((3,), {}), ((), {}), ((1, 4), {"axes": [1, 0]}),
    (EMPTY, {})]))
add(np.squeeze, samples=shaped([
    ((1, 4), {}), ((1, 3, 1), {}), ((1, 3, 1), {"axis": 0}), ((1, 3, 1), {"axis": -1}),
    ((1, 3, 1), {"axis": (0, 2)}), ((1,), {}), ((), {}), ((2, 3), {}), ((1, 0, 3), {"axis": 0})]))
add(np.expand_dims, samples=shaped([
    ((2, 3), {"axis": 0}), ((2, 3), {"axis": -1}), ((2, 3), {"axis": 1}), ((), {"axis": 0}),
    ((2, 3), {"axis": (0, 3)}), ((3,), {"axis": (-1, 0)}), (EMPTY, {"axis": 1})]))
add(np.broadcast_to, samples=shaped([
    ((3,), {"shape": (2, 3)}), ((), {"shape": (2, 2)}), ((1, 4), {"shape": (3, 4)}),
    ((2, 1), {"shape": (2, 2, 3)}), ((3,), {"shape": (0, 3)}), ((2, 3), {"shape": (2, 3)}),
    ((1,), {"shape": 4})]))
add(np.ravel, samples=shaped([
    ((2, 3), {}), ((2, 3, 4), {}), ((), {}), ((3,), {}), (EMPTY, {}),
    ((2, 3), {"order": "F"}), ((2, 3), {"order": "C"})]))
add(np.moveaxis, samples=shaped([
    ((2, 3, 4), {"source": 0, "destination": -1}), ((2, 3, 4), {"source": -1, "destination": 0}),
    ((2, 3, 4), {"source": (0, 1), "destination": (2, 0)}), ((2, 3), {"source": 0,
                                                                   "destination": 1}),
    ((3,), {"source": 0, "destination": 0}), (EMPTY, {"source": 0, "destination": 1})]))
add(np.swapaxes, samples=shaped([
    ((2, 3), {"axis1": 0, "axis2": 1}), ((2, 3, 4), {"axis1": 0, "axis2": -1}),
    ((2, 3, 4), {"axis1": 1, "axis2": 1}), ((3,), {"axis1": 0, "axis2": -1}),
    (EMPTY, {"axis1": 0, "axis2": 1})]))
add(np.rollaxis, samples=shaped([
    ((2, 3, 4), {"axis": 2}), ((2, 3, 4), {"axis": 0, "start": 2}),
    ((2, 3, 4), {"axis": -1, "start": 1}), ((2, 3, 4), {"axis": 1, "start": 3}),
    ((2, 3), {"axis": 1}), (EMPTY, {"axis": 1})]))

for _f in (np.atleast_1d, np.atleast_2d, np.atleast_3d):
    add(_f, samples=lambda rng: [
        *[Sample((draw(rng, s),)) for s in SHAPES + [EMPTY]],
        Sample((draw(rng, ()), draw(rng, (3,)), draw(rng, (2, 3)))),
        Sample((draw(rng, (2, 3), "int"),))])

add(np.flip, samples=shaped([
    ((3,), {}), ((2, 3), {}), ((2, 3), {"axis": 0}), ((2, 3), {"axis": -1}),
    ((2, 3, 4), {"axis": (0, 2)}), ((2, 3, 4), {"axis": None}), ((), {}), (EMPTY, {"axis": 1})]))
add(np.fliplr, samples=shaped([((2, 3), {}), ((2, 3, 4), {}), ((1, 4), {}), (EMPTY, {})]))
add(np.flipud, samples=shaped([((2, 3), {}), ((3,), {}), ((2, 3, 4), {}), (EMPTY, {})]))
add(np.rot90, samples=shaped([
    ((2, 3), {}), ((2, 3), {"k": 2}), ((2, 3), {"k": 3}), ((2, 3), {"k": -1}),
    ((2, 3), {"k": 4}), ((2, 3, 4), {"axes": (1, 2)}), ((2, 3, 4), {"k": 1, "axes": (2, 0)}),
    ((1, 4), {}), (EMPTY, {})]))
add(np.roll, samples=shaped([
    ((3,), {"shift": 1}), ((2, 3), {"shift": 2}), ((2, 3), {"shift": -1, "axis": 0}),
    ((2, 3), {"shift": 4, "axis": 1}), ((2, 3, 4), {"shift": (1, -2), "axis": (0, 2)}),
    ((2, 3, 4), {"shift": 1, "axis": (0, 1)}), ((2, 3), {"shift": (1, 1), "axis": (1, 1)}),
    ((), {"shift": 1}), (EMPTY, {"shift": 1, "axis": 1}), (EMPTY, {"shift": 1})]))
add(np.tile, samples=shaped([
    ((3,), {"reps": 2}), ((2, 3), {"reps": (2, 1)}), ((2, 3), {"reps": (2, 1, 2)}),
    ((2, 3, 4), {"reps": 2}), ((), {"reps": 3}), ((), {"reps": (2, 2)}), ((2, 3), {"reps": 0}),
    (EMPTY, {"reps": 2})]))


def _repeat_samples(rng):
    out = shaped([
        ((3,), {"repeats": 2}), ((2, 3), {"repeats": 2}), ((2, 3), {"repeats": 2, "axis": 0}),
        ((2, 3), {"repeats": 3, "axis": -1}), ((), {"repeats": 3}),
        ((2, 3), {"repeats": np.array([1, 0, 2]), "axis": 1}),
        ((2, 3), {"repeats": [2, 1], "axis": 0}), ((2, 3), {"repeats": 0, "axis": 0}),
        (EMPTY, {"repeats": 2, "axis": 0})])(rng)
    return out


add(np.repeat, samples=_repeat_samples)

for _f in (np.tril, np.triu):
    add(_f, samples=shaped([
        ((3, 3), {}), ((2, 3), {"k": 1}), ((3, 2), {"k": -1}), ((2, 3, 3), {}),
        ((2, 3), {"k": 5}), ((3,), {}), ((1, 1), {}), (EMPTY, {})]))

add(np.diagonal, samples=shaped([
    ((3, 3), {}), ((2, 3), {"offset": 1}), ((3, 2), {"offset": -1}),
    ((2, 3, 4), {"axis1": 1, "axis2": 2}), ((2, 3, 4), {"offset": 1, "axis1": -1, "axis2": 0}),
    ((2, 3), {"offset": 5}), (EMPTY, {})]))
add(np.diag, samples=shaped([
    ((3,), {}), ((3,), {"k": 1}), ((3,), {"k": -2}), ((3, 3), {}), ((2, 3), {"k": 1}),
    ((3, 2), {"k": -1}), ((1,), {}), ((0,), {}), (EMPTY, {})]))


def _trace_cases(fn_name):
    if fn_name == "np.linalg.trace":
        return shaped([((3, 3), {}), ((2, 3), {"offset": 1}), ((2, 3, 3), {}),
                       ((2, 3, 4), {"offset": -1}), ((2, 3), {"dtype": F4}), (EMPTY, {})])
    return shaped([
        ((3, 3), {}), ((2, 3), {"offset": 1}), ((3, 2), {"offset": -1}),
        ((2, 3, 4), {"axis1": 1, "axis2": 2}), ((2, 3, 4), {"offset": 1, "axis1": 2, "axis2": 0}),
        ((2, 3), {"dtype": F4}), (EMPTY, {})])


add(np.trace, samples=_trace_cases("np.trace"))
add(np.linalg.trace, samples=_trace_cases("np.linalg.trace"))


def _take_samples(rng):
    x23, x234 = draw(rng, (2, 3)), draw(rng, (2, 3, 4))
    return [
        Sample((x23,), {"indices": np.array([0, 5, 2])}),
        Sample((x23,), {"indices": 4}),
        Sample((x23,), {"indices": np.array([2, 0, 2]), "axis": 1}),
        Sample((x23,), {"indices": np.array([-1, 0]), "axis": 0}),
        Sample((x234,), {"indices": np.array([[0, 3], [1, 1]]), "axis": -1}),
        Sample((x234,), {"indices": 1, "axis": 1}),
        Sample((draw(rng, (3,)),), {"indices": np.array([], dtype=I8)}),
        Sample((draw(rng, EMPTY),), {"indices": np.array([1, 2]), "axis": 1}),
        Sample((draw(rng, (2, 3), "int"),), {"indices": np.array([1, 3])}),
        Sample((x23,), {"indices": np.array([0, 7]), "mode": "wrap"}, desc="mode"),
        Sample((x23,), {"indices": np.array([0, 7]), "mode": "clip"}, desc="mode"),
    ]


add(np.take, samples=_take_samples)


def _take_along_fn(arr, indices=None, **k):
    return np.take_along_axis(arr, indices, **k)


def _take_along_samples(rng):
    x23 = draw(rng, (2, 3), "distinct")
    return [
        Sample((x23,), {"indices": np.argsort(x23, axis=1), "axis": 1}),
        Sample((x23,), {"indices": np.array([[0, 1, 0]]), "axis": 0}),
        Sample((x23,), {"indices": np.array([[2], [0]]), "axis": -1}),
        Sample((draw(rng, (2, 3, 4)),), {"indices": np.zeros((2, 1, 4), I8), "axis": 1}),
        Sample((draw(rng, (5,)),), {"indices": np.array([4, 0, 0]), "axis": 0}),
        Sample((draw(rng, (2, 3)),), {"indices": np.array([5, 0]), "axis": None}),
        Sample((draw(rng, (2, 3), "int"),), {"indices": np.array([[1], [2]]), "axis": 1}),
    ]


add("np.take_along_axis", _take_along_fn, _take_along_samples, funcs=(np.take_along_axis,))


def _pad_samples(rng):
    x3, x23 = draw(rng, (3,)), draw(rng, (2, 3))
    cases = [
        (x3, {"pad_width": 2}), (x23, {"pad_width": 1}), (x23, {"pad_width": ((1, 0), (0, 2))}),
        (x23, {"pad_width": (1, 2)}), (x23, {"pad_width": 1, "constant_values": 1.5}),
        (x23, {"pad_width": 1, "constant_values": ((1.0, 2.0), (3.0, 4.0))}),
        (x23, {"pad_width": 2, "mode": "edge"}), (x23, {"pad_width": (2, 1), "mode": "wrap"}),
        (x23, {"pad_width": 2, "mode": "reflect"}), (x3, {"pad_width": 5, "mode": "reflect"}),
        (x23, {"pad_width": 2, "mode": "symmetric"}),
        (x23, {"pad_width": 2, "mode": "reflect", "reflect_type": "odd"}),
        (x23, {"pad_width": 1, "mode": "mean"}),
        (x23, {"pad_width": 2, "mode": "mean", "stat_length": 2}),
        (x23, {"pad_width": 2, "mode": "linear_ramp"}),
        (x23, {"pad_width": 2, "mode": "linear_ramp", "end_values": (1.0, -1.0)}),
        (x23, {"pad_width": 1, "mode": "empty"}),
        (draw(rng, (2, 3, 4)), {"pad_width": ((0, 0), (1, 1), (2, 0))}),
        (draw(rng, ()), {"pad_width": 0}), (draw(rng, EMPTY), {"pad_width": ((0, 0), (1, 1))}),
        (draw(rng, (2, 3), "int"), {"pad_width": 1, "mode": "mean"}),
        (draw(rng, (2, 3), "real", F4), {"pad_width": 1, "mode": "reflect"}),
        (draw(rng, (2, 3), "distinct"), {"pad_width": 1, "mode": "maximum"}),
        (draw(rng, (2, 3), "distinct"), {"pad_width": 1, "mode": "minimum"}),
        (draw(rng, (2, 3), "distinct"), {"pad_width": 1, "mode": "median"}),
    ]
    out = [Sample((a,), k) for a, k in cases]
    for s in out:
        if s.kwargs.get("mode") == "empty":
            s.desc = "empty-mode"
    return out


def _pad_fn(a, **k):
    return np.pad(a, **k)


add("np.pad", _pad_fn, _pad_samples, funcs=(np.pad,), bugs=[
    bug("gap: np.pad modes maximum / minimum / median raise UnsupportedError",
        when=lambda s: s.kwargs.get("mode") in ("maximum", "minimum", "median"))])


def _pad_empty_fn(a, **k):   # mode='empty' leaves the padding undefined: compare the rest
    y = np.pad(a, **k)
    return y[(slice(1, -1),) * y.ndim]


OPS[-1].fn = lambda a, **k: (_pad_empty_fn if k.get("mode") == "empty" else _pad_fn)(a, **k)


# joining and splitting: the arrays are separate traced arguments
def _joiner(f):
    return lambda *xs, **k: f(list(xs), **k)


def join_samples(cases):
    def gen(rng):
        out = []
        for shapes, k in cases:
            out.append(Sample(tuple(draw(rng, s) for s in shapes), dict(k)))
        out.append(Sample((draw(rng, cases[0][0][0], "real", F4), draw(rng, cases[0][0][1]))))
        out.append(Sample((draw(rng, cases[0][0][0], "int"), draw(rng, cases[0][0][1]))))
        out.append(Sample((draw(rng, cases[0][0][0]), draw(rng, cases[0][0][1])),
                          dict(cases[0][1], dtype=F4), grad=False))
        return out
    return gen


add("np.concatenate", _joiner(np.concatenate), join_samples([
    (((2, 3), (1, 3)), {}), (((2, 3), (2, 1)), {"axis": 1}), (((2, 3), (2, 2)), {"axis": -1}),
    (((3,), (2,), (1,)), {}), (((2, 3), (4,)), {"axis": None}), (((2, 3),), {}),
    (((0, 3), (2, 3)), {}), (((2, 3, 4), (2, 1, 4)), {"axis": 1})]), funcs=(np.concatenate,))
add("np.stack", _joiner(np.stack), join_samples([
    (((2, 3), (2, 3)), {}), (((2, 3), (2, 3)), {"axis": -1}), (((3,), (3,), (3,)), {"axis": 1}),
    (((), ()), {}), (((0, 3), (0, 3)), {"axis": 1}), (((2, 3),), {"axis": 2})]),
    funcs=(np.stack,))
_STACKS = {
    np.hstack: [(((2, 3), (2, 3)), {}), (((3,), (2,)), {}), (((), ()), {}), (((2, 3),), {}),
                (((2, 3, 4), (2, 1, 4)), {}), (((2, 1), (2, 3)), {}), (((0, 3), (0, 3)), {})],
    np.vstack: [(((2, 3), (2, 3)), {}), (((3,), (3,)), {}), (((), ()), {}), (((2, 3),), {}),
                (((2, 3, 4), (1, 3, 4)), {}), (((1, 3), (3,)), {}), (((0, 3), (2, 3)), {})],
    np.dstack: [(((2, 3), (2, 3)), {}), (((3,), (3,)), {}), (((), ()), {}), (((2, 3),), {}),
                (((2, 3, 4), (2, 3, 1)), {}), (((0, 3), (0, 3)), {})],
    np.column_stack: [(((2, 3), (2, 1)), {}), (((3,), (3,)), {}), (((), ()), {}),
                      (((3,), (3, 2)), {}), (((2, 3),), {}), (((0,), (0, 2)), {})],
}
if hasattr(np, "row_stack"):   # deprecated in NumPy 2.0 (warns, as gradjit's does)
    _STACKS[np.row_stack] = _STACKS[np.vstack]
for _f, _cases in _STACKS.items():
    op = add("np." + _f.__name__, _joiner(_f), join_samples(_cases), funcs=(_f,))
    if _f in (np.dstack, np.column_stack):   # no dtype= / casting= in NumPy's
        op.samples = (lambda g: lambda rng: [s for s in g(rng) if "dtype" not in s.kwargs])(
            op.samples)


def _append_samples(rng):
    return [
        Sample((draw(rng, (3,)), draw(rng, (2,)))),
        Sample((draw(rng, (2, 3)), draw(rng, (1, 3))), {"axis": 0}),
        Sample((draw(rng, (2, 3)), draw(rng, (2, 2))), {"axis": -1}),
        Sample((draw(rng, (2, 3)), draw(rng, (4,)))),
        Sample((draw(rng, ()), draw(rng, ()))),
        Sample((draw(rng, EMPTY), draw(rng, (1, 3))), {"axis": 0}),
        Sample((draw(rng, (3,)),), {"values": 2.5}, desc="const"),
        Sample((draw(rng, (3,), "int"), draw(rng, (2,)))),
    ]


def _append_fn(a, b=None, values=None, **k):
    return np.append(a, b if values is None else values, **k)


add("np.append", _append_fn, _append_samples, funcs=(np.append,))


def _split_samples(name):
    def gen(rng):
        x6, x23, x234 = draw(rng, (6,)), draw(rng, (2, 4)), draw(rng, (2, 4, 6))
        cases = {
            "split": [(x6, {"indices_or_sections": 3}), (x6, {"indices_or_sections": [1, 4]}),
                      (x23, {"indices_or_sections": 2, "axis": 1}),
                      (x23, {"indices_or_sections": [1], "axis": 0}),
                      (x234, {"indices_or_sections": [2, 10], "axis": -1}),
                      (x6, {"indices_or_sections": [-2]}),
                      (x6, {"indices_or_sections": [4, 2]}),
                      (draw(rng, EMPTY), {"indices_or_sections": 3, "axis": 1})],
            "array_split": [(x6, {"indices_or_sections": 4}), (x6, {"indices_or_sections": [1, 4]}),
                            (x23, {"indices_or_sections": 3, "axis": 1}),
                            (x234, {"indices_or_sections": 4, "axis": 2}),
                            (draw(rng, (3,)), {"indices_or_sections": 5})],
            "hsplit": [(x6, {"indices_or_sections": 2}), (x23, {"indices_or_sections": 2}),
                       (x23, {"indices_or_sections": [1, 3]})],
            "vsplit": [(x23, {"indices_or_sections": 2}), (x234, {"indices_or_sections": [1]})],
            "dsplit": [(x234, {"indices_or_sections": 3}), (x234, {"indices_or_sections": [1, 5]})],
        }[name]
        out = [Sample((a,), k) for a, k in cases]
        out.append(Sample((draw(rng, cases[0][0].shape, "int"),), dict(cases[0][1])))
        return out
    return gen


def _split_fn(f):
    return lambda a, **k: f(a, **k)


for _f in (np.split, np.array_split, np.hsplit, np.vsplit, np.dsplit):
    add("np." + _f.__name__, _split_fn(_f), _split_samples(_f.__name__), funcs=(_f,))


def _trapezoid_samples(rng):
    y = draw(rng, (3, 4))
    return [Sample((draw(rng, (5,)),)), Sample((y,)), Sample((y,), {"dx": 0.5, "axis": 0}),
            Sample((y, np.array([0.0, 0.4, 1.5, 2.0]))), Sample((y[0], draw(rng, (4,))),
                                                               desc="x traced"),
            Sample((draw(rng, (2, 3, 4)),), {"axis": 1}), Sample((draw(rng, (1,)),))]


add(np.trapezoid, samples=_trapezoid_samples)


def _diff_samples(rng):
    x23 = draw(rng, (2, 4))
    return [
        Sample((draw(rng, (4,)),)), Sample((x23,)), Sample((x23,), {"axis": 0}),
        Sample((x23,), {"n": 2}), Sample((x23,), {"n": 0}), Sample((x23,), {"n": 5}),
        Sample((draw(rng, (2, 3, 4)),), {"axis": -2}), Sample((draw(rng, (1,)),)),
        Sample((draw(rng, EMPTY),), {"axis": 0}),
        Sample((x23, draw(rng, (2, 1))), {"axis": 1}, desc="prepend"),
        Sample((x23, draw(rng, (2, 4))), {"axis": 0, "prepend": 0.5}, desc="prepend+append"),
        Sample((x23,), {"append": 1.0, "n": 2}),
        Sample((draw(rng, (2, 4), "int"),)), Sample((draw(rng, (5,), "bool"),)),
    ]


def _diff_fn2(a, b=None, **k):
    if b is not None:
        if "prepend" in k:
            k["append"] = b
        else:
            k["prepend"] = b
    return np.diff(a, **k)


add("np.diff", _diff_fn2, _diff_samples, funcs=(np.diff,))


def _gradient_fn(f, *spacing, **k):
    return np.gradient(f, *spacing, **k)


def _gradient_samples(rng):
    x = draw(rng, (3, 4))
    coords = np.array([0.0, 0.5, 1.5, 1.75])
    return [
        Sample((draw(rng, (4,)),)), Sample((x,)), Sample((x,), {"axis": 1}),
        Sample((x,), {"axis": (0,)}), Sample((x,), {"edge_order": 2}),
        Sample((draw(rng, (5,)), np.array(0.5))),
        Sample((x, np.array(2.0), np.array(0.5))),
        Sample((x, coords), {"axis": 1}),
        Sample((x, np.arange(3.0) * 0.5 + np.array([0, 0.1, 0]), coords), {"edge_order": 2}),
        Sample((draw(rng, (2, 3, 4)),), {"axis": -1}),
        Sample((draw(rng, (3, 4), "int"),)),
        Sample((draw(rng, (2, 3), "real", F4),)),
    ]


add("np.gradient", _gradient_fn, _gradient_samples, funcs=(np.gradient,))


def _where_samples(rng):
    out = []
    for sc, sa, sb in [((2, 3), (2, 3), (2, 3)), ((3,), (2, 3), ()), ((2, 1), (1, 3), (2, 3)),
                       ((), (3,), (3,)), ((0, 3), (3,), (0, 3)), ((2, 3, 4), (4,), (3, 1))]:
        out.append(Sample((draw(rng, sc, "bool"), draw(rng, sa), draw(rng, sb))))
    out.append(Sample((draw(rng, (2, 3), "grid"), draw(rng, (2, 3)), draw(rng, (2, 3)))))
    out.append(Sample((draw(rng, (2, 3), "bool"), draw(rng, (2, 3), "real", F4),
                       draw(rng, (2, 3)))))
    out.append(Sample((draw(rng, (2, 3), "bool"), draw(rng, (2, 3), "int"),
                       draw(rng, (3,), "real", F4))))
    out.append(Sample((draw(rng, (2, 3), "bool"), draw(rng, (2, 3))), {"y": 0.0}, desc="scalar"))
    return out


def _where_fn(c, x, y=None, **k):
    return np.where(c, x, k.get("y") if y is None else y)


add("np.where", _where_fn, _where_samples, funcs=(np.where,))


def _select_fn(*arrays, n=1, **k):
    conds, choices = list(arrays[:n]), list(arrays[n:2 * n])
    if len(arrays) > 2 * n:
        k["default"] = arrays[2 * n]
    return np.select(conds, choices, **k)


add("np.select", _select_fn, lambda rng: [
    Sample((draw(rng, (2, 3), "bool"), draw(rng, (2, 3))), {"n": 1}),
    Sample((draw(rng, (2, 3), "bool"), draw(rng, (2, 3), "bool"), draw(rng, (2, 3)),
            draw(rng, (3,))), {"n": 2}),
    Sample((draw(rng, (2, 3), "bool"), draw(rng, (2, 3)), draw(rng, (2, 3))), {"n": 1},
           desc="default"),
    Sample((draw(rng, (3,), "bool"), draw(rng, (2, 3))), {"n": 1, "default": 1.5}),
    Sample((draw(rng, (3,), "bool"), draw(rng, (3,), "int")), {"n": 1}),
    Sample((draw(rng, (0, 3), "bool"), draw(rng, (0, 3))), {"n": 1}),
], funcs=(np.select,))


def _clip_fn(a, lo=None, hi=None, **k):
    if lo is not None:
        k["a_min"] = lo
    if hi is not None:
        k["a_max"] = hi
    return np.clip(a, **k)


def _clip_samples(rng):
    def off(shape):   # off the bounds -0.5 and 0.75 by at least 0.1
        return np.where(rng.random(shape) < 0.5, -1, 1) * rng.uniform(0.1, 0.4, shape) + \
            rng.choice([-0.5, 0.75], shape)
    out = [Sample((off(s),), {"a_min": -0.5, "a_max": 0.75}) for s in SHAPES + [EMPTY]]
    out += [
        Sample((off((2, 3)),), {"a_min": None, "a_max": 0.75}),
        Sample((off((2, 3)),), {"a_min": -0.5, "a_max": None}),
        Sample((off((2, 3)), np.full((3,), -0.5), np.full((2, 1), 0.75))),
        Sample((off((2, 3)),), {"min": -0.5, "max": 0.75}, desc="min/max"),
        Sample((off((2, 3)).astype(F4),), {"a_min": -0.5, "a_max": 0.75}),
        Sample((draw(rng, (2, 3), "int"),), {"a_min": -1, "a_max": 2}),
        Sample((draw(rng, (8,), "special"),), {"a_min": -0.5, "a_max": 0.75}, grad=False),
    ]
    return out


add("np.clip", _clip_fn, _clip_samples, funcs=(np.clip,))


def _meshgrid_samples(rng):
    return [
        Sample((draw(rng, (3,)), draw(rng, (2,)))),
        Sample((draw(rng, (3,)), draw(rng, (2,))), {"indexing": "ij"}),
        Sample((draw(rng, (3,)), draw(rng, (2,)), draw(rng, (4,))), {"indexing": "ij"}),
        Sample((draw(rng, (3,)), draw(rng, (2,))), {"sparse": True}),
        Sample((draw(rng, (3,)),)), Sample((draw(rng, (2, 2)), draw(rng, (3,)))),
        Sample((draw(rng, (0,)), draw(rng, (2,)))),
    ]


add(np.meshgrid, samples=_meshgrid_samples)


def _linspace_fn(start, stop, **k):
    return np.linspace(start, stop, **k)


add("np.linspace", _linspace_fn, lambda rng: [
    Sample((draw(rng, ()), draw(rng, ()))), Sample((draw(rng, ()), draw(rng, ())), {"num": 5}),
    Sample((draw(rng, ()), draw(rng, ())), {"num": 4, "endpoint": False}),
    Sample((draw(rng, ()), draw(rng, ())), {"num": 1}),
    Sample((draw(rng, ()), draw(rng, ())), {"num": 0}),
    Sample((draw(rng, (3,)), draw(rng, (3,))), {"num": 4}),
    Sample((draw(rng, (2, 1)), draw(rng, (3,))), {"num": 3, "axis": -1}),
    Sample((draw(rng, ()), draw(rng, ())), {"num": 3, "retstep": True}),
    Sample((draw(rng, (), "int"), draw(rng, (), "int") + 10), {"num": 4}),
    Sample((draw(rng, ()) * 10, draw(rng, ()) * 10), {"num": 4, "dtype": I8}),
    Sample((draw(rng, (), "real", F4), draw(rng, (), "real", F4)), {"num": 3}),
], funcs=(np.linspace,))


def _like_samples(fill):
    def gen(rng):
        extra = {"value": 2.5} if fill == "full" else {}
        out = [Sample((draw(rng, s),), dict(extra)) for s in SHAPES + [EMPTY]]
        out += [Sample((draw(rng, (2, 3)),), dict(extra, dtype=I8)),
                Sample((draw(rng, (2, 3), "int"),), dict(extra)),
                Sample((draw(rng, (2, 3), "real", F4),), dict(extra)),
                Sample((draw(rng, (2, 3)),), dict(extra, shape=(3, 2)), desc="shape")]
        if fill == "full":
            out.append(Sample((draw(rng, (2, 3)), draw(rng, ())), desc="traced fill"))
            out.append(Sample((draw(rng, (2, 3)),), {"fill_value": 2.5}, desc="fill_value="))
        return out
    return gen


def _like_fn(f):
    def fn(a, v=None, value=None, **k):
        v = value if v is None else v
        return f(a, **k) if v is None else f(a, v, **k)
    return fn


for _f in (np.zeros_like, np.ones_like, np.empty_like, np.full_like):
    add("np." + _f.__name__, _like_fn(_f), _like_samples(_f.__name__.split("_")[0]),
        funcs=(_f,), values_defined=_f is not np.empty_like, second_order=False,
        differentiable=_f is not np.empty_like)


# functions of the shape: the result (an int, a tuple) enters the arithmetic
add("np.ndim", lambda a: a * np.ndim(a), shaped([((s), {}) for s in SHAPES + [EMPTY]]),
    funcs=(np.ndim,))
add("np.shape", lambda a: a.reshape(np.shape(a)[::-1]) if np.ndim(a) else a + len(np.shape(a)),
    shaped([((s), {}) for s in SHAPES + [EMPTY]]), funcs=(np.shape,))
add("np.size", lambda a, **k: a * np.size(a, **k), shaped([
    ((2, 3), {}), ((2, 3), {"axis": 0}), ((2, 3, 4), {"axis": -1}), ((), {}), (EMPTY, {})]),
    funcs=(np.size,))
for _f in (np.tril_indices_from, np.triu_indices_from):
    add("np." + _f.__name__, (lambda f: lambda a, **k: a[f(a, **k)])(_f), shaped([
        ((3, 3), {}), ((3, 4), {"k": 1}), ((4, 3), {"k": -1}), ((1, 1), {})]), funcs=(_f,))


# -- 5. products and linear algebra ----------------------------------------------------------------
def pairs(cases, extra=None):
    def gen(rng):
        out = [Sample((draw(rng, sa), draw(rng, sb)), dict(k)) for sa, sb, k in cases]
        sa, sb, k = cases[min(2, len(cases) - 1)]
        out.append(Sample((draw(rng, sa, "real", F4), draw(rng, sb, "real", F4)), dict(k)))
        out.append(Sample((draw(rng, sa, "real", F4), draw(rng, sb)), dict(k)))
        out.append(Sample((draw(rng, sa, "int"), draw(rng, sb, "int")), dict(k)))
        if extra:
            out += extra(rng)
        return out
    return gen


add(np.matmul, samples=pairs([
    ((3,), (3,), {}), ((2, 3), (3,), {}), ((2, 3), (3, 4), {}), ((3,), (3, 2), {}),
    ((2, 2, 3), (3, 4), {}), ((2, 1, 2, 3), (3, 3, 2), {}), ((1, 4), (4, 1), {}),
    ((0, 3), (3, 2), {}), ((2, 0), (0, 3), {}), ((2, 3, 4), (2, 4, 1), {})]))
add(np.dot, samples=pairs([
    ((3,), (3,), {}), ((2, 3), (3,), {}), ((2, 3), (3, 4), {}), ((), (2, 3), {}),
    ((2, 3), (), {}), ((3,), (3, 2), {}), ((2, 3, 4), (4,), {}), ((2, 3), (2, 3, 4), {}),
    ((2, 3, 4), (3, 4, 2), {}), ((0, 3), (3,), {})]))
add(np.vdot, samples=pairs([((3,), (3,), {}), ((2, 3), (3, 2), {}), ((2, 3), (6,), {}),
                            ((), (), {}), ((0,), (0,), {})]))
add(np.inner, samples=pairs([
    ((3,), (3,), {}), ((2, 3), (3,), {}), ((2, 3), (4, 3), {}), ((), (2, 3), {}),
    ((2, 3, 4), (2, 4), {}), ((3,), (2, 2, 3), {}), ((0, 3), (3,), {})]))
add(np.outer, samples=pairs([((3,), (2,), {}), ((2, 3), (2,), {}), ((), (3,), {}),
                             ((0,), (3,), {})]))
add(np.linalg.outer, samples=pairs([((3,), (2,), {}), ((1,), (4,), {}), ((0,), (3,), {})]))
add(np.kron, samples=pairs([
    ((2,), (3,), {}), ((2, 2), (2, 3), {}), ((2, 3), (3,), {}), ((), (2, 2), {}),
    ((2, 1, 2), (2, 2), {}), ((0, 2), (2, 2), {})]))
add(np.tensordot, samples=pairs([
    ((2, 3), (3, 4), {"axes": 1}), ((2, 3, 4), (3, 4, 2), {}), ((2, 3), (2, 3), {"axes": 2}),
    ((2, 3), (4, 2), {"axes": ([0], [1])}), ((2, 3, 4), (4, 3), {"axes": ((1, 2), (1, 0))}),
    ((2, 3), (4,), {"axes": 0}), ((2, 3, 4), (4, 2), {"axes": (-1, 0)}),
    ((0, 3), (3, 2), {"axes": 1})]))


def _cross_samples(rng):
    return [Sample((draw(rng, sa), draw(rng, sb)), k) for sa, sb, k in [
        ((3,), (3,), {}), ((2, 3), (2, 3), {}), ((2, 3), (3,), {}), ((2,), (2,), {}),
        ((2,), (3,), {}), ((3,), (2,), {}), ((3, 2), (3, 2), {"axis": 0}),
        ((3, 2), (2, 3), {"axisa": 0, "axisb": 1}), ((2, 3), (2, 3), {"axisc": 0}),
        ((4, 2), (4, 3), {}), ((0, 3), (3,), {})]] + [
        Sample((draw(rng, (2, 3), "real", F4), draw(rng, (3,))), {}),
        Sample((draw(rng, (2, 3), "int"), draw(rng, (2, 3), "int")), {})]


add(np.cross, samples=_cross_samples)
add(np.linalg.cross, samples=lambda rng: [
    Sample((draw(rng, sa), draw(rng, sb)), k) for sa, sb, k in [
        ((3,), (3,), {}), ((2, 3), (3,), {}), ((3, 2), (3, 2), {"axis": 0}), ((0, 3), (0, 3), {})]])


def _einsum_fn(*ops, subscripts=""):
    return np.einsum(subscripts, *ops)


def _einsum_samples(rng):
    cases = [("ij,jk->ik", (2, 3), (3, 4)), ("ij,jk", (2, 3), (3, 4)), ("i,i->", (3,), (3,)),
             ("i,j->ij", (3,), (2,)), ("ij->ji", (2, 3)), ("ii->i", (3, 3)), ("ii", (3, 3)),
             ("ij->", (2, 3)), ("bij,bjk->bik", (2, 2, 3), (2, 3, 2)),
             ("...ij,...jk->...ik", (2, 2, 3), (3, 2)), ("ij,ij->i", (2, 3), (2, 3)),
             ("i,i,i->", (3,), (3,), (3,)), ("ijk->kji", (2, 3, 4)), ("i->", (0,)),
             ("ji", (2, 3)), ("...i->...", (2, 3))]
    out = [Sample(tuple(draw(rng, s) for s in shapes), {"subscripts": sub})
           for sub, *shapes in cases]
    out.append(Sample((draw(rng, (2, 3), "real", F4), draw(rng, (3,))),
                      {"subscripts": "ij,j->i"}))
    out.append(Sample((draw(rng, (2, 3), "int"), draw(rng, (3,), "int")),
                      {"subscripts": "ij,j->i"}))
    return out


add("np.einsum", _einsum_fn, _einsum_samples, funcs=(np.einsum,))


def spd(rng, shape):
    a = rng.standard_normal(shape)
    n = shape[-1]
    return a @ np.swapaxes(a, -1, -2) + n * np.eye(n)


def well(rng, shape):
    """A well-conditioned square matrix (stack)."""
    n = shape[-1]
    return rng.standard_normal(shape) * 0.4 + np.eye(n) * 1.5


def _sq_samples(rng, extra=()):
    out = [Sample((well(rng, s),)) for s in [(3, 3), (1, 1), (2, 2, 2), (2, 1, 3, 3)]]
    out.append(Sample((-well(rng, (3, 3)),), desc="negative det"))
    out.append(Sample((well(rng, (3, 3)).astype(F4),)))
    out.append(Sample((np.array([[2, 1], [1, 3]]),)))
    out.append(Sample((np.zeros((0, 3, 3)),)))
    return out + list(extra)


add(np.linalg.inv, samples=_sq_samples, rtol=1e-10, atol=1e-12)
add(np.linalg.det, samples=_sq_samples, rtol=1e-10, atol=1e-12)
add(np.linalg.slogdet, samples=_sq_samples, rtol=1e-10, atol=1e-12)
add(np.linalg.solve, samples=lambda rng: [
    Sample((well(rng, (3, 3)), draw(rng, (3,)))), Sample((well(rng, (3, 3)), draw(rng, (3, 2)))),
    Sample((well(rng, (2, 3, 3)), draw(rng, (2, 3, 1)))),
    Sample((well(rng, (2, 3, 3)), draw(rng, (3,)))),
    Sample((well(rng, (1, 1)), draw(rng, (1,)))),
    Sample((well(rng, (3, 3)), draw(rng, (3, 0)))),
    Sample((well(rng, (3, 3)).astype(F4), draw(rng, (3,)))),
    Sample((np.array([[2, 1], [1, 3]]), np.array([1, 2]))),
], rtol=1e-10, atol=1e-12)
add(np.linalg.cholesky, samples=lambda rng: [
    Sample((spd(rng, s),)) for s in [(3, 3), (1, 1), (2, 3, 3)]] + [
    Sample((spd(rng, (3, 3)),), {"upper": True}),
    Sample((spd(rng, (3, 3)).astype(F4),)), Sample((np.array([[4, 2], [2, 3]]),))],
    rtol=1e-10, atol=1e-12)


def _qr_fn(a, **k):
    return np.linalg.qr(a, **k)


add("np.linalg.qr", _qr_fn, lambda rng: [
    Sample((draw(rng, (3, 3)),)), Sample((draw(rng, (4, 3)),)), Sample((draw(rng, (2, 4, 3)),)),
    Sample((draw(rng, (4, 3)),), {"mode": "r"}), Sample((draw(rng, (3, 3)),), {"mode": "complete"}),
    # (complete, m > n: the forward only; its gradient raises, as torch's:
    # tests/runtime/test_numpy_correctness.py)
    Sample((draw(rng, (4, 2)),), {"mode": "complete"}, grad=False),
    Sample((draw(rng, (2, 5, 3)),), {"mode": "complete"}, grad=False), Sample((draw(rng, (2, 3)),)),
    Sample((draw(rng, (3, 3), "real", F4),)), Sample((draw(rng, (3, 2), "int"),)),
], funcs=(np.linalg.qr,), rtol=1e-10, atol=1e-12)


def _sym(rng, shape):   # well separated eigenvalues, not symmetric (each UPLO reads a triangle)
    n = shape[-1]
    return rng.standard_normal(shape) * 0.3 + np.diag(np.arange(n) * 2.0)


def _eigh_fn(a, **k):   # eigenvectors up to sign: v * v[0] is sign-free
    w, v = np.linalg.eigh(a, **k)
    return w, v * v[..., :1, :]


def _eigh_samples(rng):
    return [Sample((_sym(rng, s),), k) for s, k in [
        ((3, 3), {}), ((3, 3), {"UPLO": "U"}), ((1, 1), {}), ((2, 3, 3), {}), ((2, 2), {})]] + [
        Sample((_sym(rng, (3, 3)).astype(F4),)), Sample((np.array([[2, 1], [5, 3]]),)),
        Sample((np.zeros((0, 2, 2)),))]


add("np.linalg.eigh", _eigh_fn, _eigh_samples, funcs=(np.linalg.eigh,), rtol=1e-10, atol=1e-12,
    grad_rtol=1e-5, grad_atol=1e-6)
add(np.linalg.eigvalsh, samples=_eigh_samples, rtol=1e-10, atol=1e-12)


def _svd_fn(a, **k):
    r = np.linalg.svd(a, **k)
    if not k.get("compute_uv", True):
        return r
    u, s, vh = r   # singular vectors up to a common sign: u * u[0] and vh * vh[:, 0]
    k = s.shape[-1]   # (full_matrices completes U / Vh with an arbitrary basis: not compared)
    u, vh = u[..., :, :k], vh[..., :k, :]
    return u * u[..., :1, :], s, vh * vh[..., :, :1]


def _svd_samples(rng):
    return [Sample((draw(rng, s),), k) for s, k in [
        ((3, 3), {}), ((4, 3), {"full_matrices": False}), ((2, 3), {"full_matrices": False}),
        ((3, 2), {"compute_uv": False}), ((2, 3, 2), {"full_matrices": False}), ((1, 1), {}),
        ((4, 2), {}), ((2, 4), {"compute_uv": False})]] + [
        Sample((draw(rng, (3, 3), "real", F4),), {"compute_uv": False}),
        Sample((draw(rng, (3, 2), "int"),), {"compute_uv": False})]


add("np.linalg.svd", _svd_fn, _svd_samples, funcs=(np.linalg.svd,), rtol=1e-10, atol=1e-12,
    grad_atol=1e-6)
add(np.linalg.pinv, samples=lambda rng: [
    Sample((draw(rng, s),)) for s in [(3, 3), (4, 3), (2, 3), (2, 3, 2), (1, 1)]] + [
    Sample((draw(rng, (3, 2), "real", F4),)), Sample((draw(rng, (3, 2), "int"),)),
    Sample((draw(rng, (3, 3)),), {"hermitian": False}),
    Sample((draw(rng, (3, 3)),), {"rcond": 1e-10})], rtol=1e-10, atol=1e-12)


def _lstsq_samples(rng):
    return [
        Sample((draw(rng, (4, 3)), draw(rng, (4,)))),
        Sample((draw(rng, (4, 2)), draw(rng, (4, 3)))),
        Sample((well(rng, (3, 3)), draw(rng, (3,)))), Sample((draw(rng, (2, 3)), draw(rng, (2,)))),
        Sample((draw(rng, (4, 3)), draw(rng, (4,))), {"rcond": None}),
        Sample((draw(rng, (4, 3), "int"), draw(rng, (4,), "int"))),
    ]


add(np.linalg.lstsq, samples=_lstsq_samples, rtol=1e-10, atol=1e-12, grad_atol=1e-6)


def _norm_samples(rng):
    v = [Sample((draw(rng, s, "nonzero"),), k) for s, k in [
        ((3,), {}), ((3,), {"ord": 1}), ((3,), {"ord": 2}), ((3,), {"ord": 3}),
        ((3,), {"ord": 0.5}), ((), {}), ((2, 3), {}), ((2, 3, 4), {}), ((2, 3), {"axis": 1}),
        ((2, 3), {"axis": 0, "keepdims": True}), ((2, 3), {"keepdims": True}),
        ((0,), {}), ((2, 3, 4), {"axis": -1, "ord": 1}),
        ((2, 3), {"axis": (0, 1)}), ((2, 3, 4), {"axis": (1, 2)}),
        ((3, 3), {"ord": "fro"}), ((3, 3), {"ord": "nuc"}), ((3, 2), {"ord": 2}),
        ((2, 3), {"ord": -2})]]
    v += [Sample((draw(rng, (4,), "distinct"),), {"ord": np.inf}),
          Sample((draw(rng, (4,), "distinct"),), {"ord": -np.inf}),
          Sample((draw(rng, (4,), "nonzero"),), {"ord": 0}),
          Sample((draw(rng, (4,), "nonzero"),), {"ord": -1}),
          Sample((draw(rng, (3, 3), "distinct"),), {"ord": 1}),
          Sample((draw(rng, (3, 3), "distinct"),), {"ord": -1}),
          Sample((draw(rng, (3, 3), "distinct"),), {"ord": np.inf}),
          Sample((draw(rng, (3, 3), "distinct"),), {"ord": -np.inf}),
          Sample((draw(rng, (2, 3), "int"),)), Sample((draw(rng, (3,), "real", F4),))]
    return v


add(np.linalg.norm, samples=_norm_samples, rtol=1e-10, atol=1e-12, grad_atol=1e-6)
add(np.linalg.vector_norm, samples=lambda rng: [
    Sample((draw(rng, s, "nonzero"),), k) for s, k in [
        ((3,), {}), ((2, 3), {}), ((2, 3), {"axis": 1}), ((2, 3, 4), {"axis": (0, 2)}),
        ((2, 3), {"axis": 0, "keepdims": True}), ((3,), {"ord": 1}), ((3,), {"ord": 3}),
        ((), {}), ((0, 3), {}), ((2, 3), {"keepdims": True})]] + [
    Sample((draw(rng, (4,), "distinct"),), {"ord": np.inf}),
    Sample((draw(rng, (2, 3), "int"),))], rtol=1e-10, atol=1e-12)
add(np.linalg.matrix_norm, samples=lambda rng: [
    Sample((draw(rng, s, "nonzero"),), k) for s, k in [
        ((3, 3), {}), ((2, 3, 3), {}), ((3, 3), {"keepdims": True}), ((3, 2), {"ord": "nuc"}),
        ((3, 2), {"ord": 2}), ((0, 2, 2), {})]] + [
    Sample((draw(rng, (3, 3), "distinct"),), {"ord": 1}),
    Sample((draw(rng, (3, 3), "distinct"),), {"ord": np.inf}),
    Sample((draw(rng, (2, 3), "int"),))], rtol=1e-10, atol=1e-12)
add("np.linalg.multi_dot", _joiner(np.linalg.multi_dot), lambda rng: [
    Sample(tuple(draw(rng, s) for s in shapes)) for shapes in [
        ((2, 3), (3, 4)), ((3,), (3, 4), (4,)), ((2, 3), (3, 4), (4, 2)), ((3,), (3, 2)),
        ((2, 3), (3, 1), (1, 4), (4,))]] + [
    Sample((draw(rng, (2, 3), "real", F4), draw(rng, (3, 2))))], funcs=(np.linalg.multi_dot,))


# scipy.special's ufuncs: in the table once scipy.special is imported (numpy_protocol.py)
try:
    import scipy.special as _sp
except ImportError:   # pragma: no cover
    _sp = None
if _sp is not None:
    for _n, _dom in [("erf", "real"), ("erfc", "real"), ("erfinv", "unit"), ("gammaln", "pos"),
                     ("psi", "pos"), ("expit", "real"), ("logit", "prob")]:
        add(getattr(_sp, _n), samples=unary_samples(_dom, ints=False))
    add(_sp.xlogy, samples=binary_samples("real", "pos", ints=False))


# -- 6. ndarray methods of traced arrays -----------------------------------------------------------
def method(name, fn, samples, **flags):
    return add(f"ndarray.{name}", fn, samples, method=name, tensor_mode=False, **flags)


def _m(name):
    return lambda x, *a, **k: getattr(x, name)(*a, **k)


for _mn, _dom in [("sum", "real"), ("mean", "real"), ("prod", "nonzero")]:
    method(_mn, _m(_mn), reduce_samples(_dom, extra=_dtype_variants(_dom)))
for _mn in ("max", "min"):
    method(_mn, _m(_mn), reduce_samples("distinct", empty_all=False))
for _mn in ("var", "std"):
    method(_mn, _m(_mn), reduce_samples("real", extra=lambda rng: [
        Sample((draw(rng, (2, 3)),), {"ddof": 1}),
        Sample((draw(rng, (2, 3)),), {"axis": 1, "ddof": 1, "keepdims": True})]))
method("cumsum", _m("cumsum"), scan_samples("real"))
method("cumprod", _m("cumprod"), scan_samples("nonzero"))
method("squeeze", _m("squeeze"), shaped([
    ((1, 4), {}), ((1, 3, 1), {"axis": 0}), ((1, 3, 1), {"axis": (0, 2)}), ((), {})]))
method("trace", _m("trace"), shaped([((3, 3), {}), ((2, 3), {"offset": 1}),
                                     ((2, 3, 4), {"axis1": 1, "axis2": 2})]))


def _transpose_m(x, axes=None, spread=False):
    if axes is None:
        return x.transpose()
    return x.transpose(*axes) if spread else x.transpose(axes)


method("transpose", _transpose_m, shaped([
    ((2, 3), {}), ((2, 3, 4), {}), ((2, 3, 4), {"axes": (2, 0, 1)}),
    ((2, 3, 4), {"axes": (2, 0, 1), "spread": True}), ((2, 3), {"axes": (1, 0), "spread": True}),
    ((3,), {}), ((), {}), (EMPTY, {})]))


def _reshape_m(x, shape=None, spread=False, **k):
    return x.reshape(*shape, **k) if spread else x.reshape(shape, **k)


method("reshape", _reshape_m, shaped([
    ((2, 3), {"shape": (3, 2)}), ((2, 3), {"shape": (3, 2), "spread": True}),
    ((2, 3, 4), {"shape": (-1,)}), ((2, 3), {"shape": (6, 1), "spread": True}),
    ((), {"shape": (1,)}), (EMPTY, {"shape": (3, -1)}),
    ((2, 3), {"shape": (3, 2), "order": "F"})]))
for _mn in ("flatten", "ravel"):
    method(_mn, _m(_mn), shaped([((2, 3), {}), ((2, 3, 4), {}), ((), {}), (EMPTY, {}),
                                     ((2, 3), {"order": "F"})]))
method("copy", _m("copy"), shaped([((2, 3), {}), ((), {}), (EMPTY, {})]))
method("astype", _m("astype"), lambda rng: [
    Sample((draw(rng, (2, 3)),), {"dtype": F4}, grad=False),
    Sample((draw(rng, (2, 3)),), {"dtype": F8}),
    Sample((draw(rng, (2, 3), "offgrid"),), {"dtype": I8}),
    Sample((draw(rng, (2, 3), "grid"),), {"dtype": B}),
    Sample((draw(rng, (2, 3), "int"),), {"dtype": F8}),
    Sample((draw(rng, (2, 3), "bool"),), {"dtype": F8}),
    Sample((draw(rng, (2, 3), "real", F4),), {"dtype": F8}),
    Sample((draw(rng, ()),), {"dtype": F8}),
    Sample((draw(rng, EMPTY),), {"dtype": F4}, grad=False),
    Sample((draw(rng, (2, 3)),), {"dtype": "float32"}, grad=False),
    Sample((draw(rng, (2, 3)),), {"dtype": F8, "copy": False}),
])
method("repeat", _m("repeat"), shaped([
    ((2, 3), {"repeats": 2}), ((2, 3), {"repeats": 2, "axis": 0}),
    ((2, 3), {"repeats": [1, 0, 2], "axis": 1}), ((), {"repeats": 2})]))
method("argsort", _m("argsort"), lambda rng: [
    Sample((draw(rng, s, "distinct"),), k) for s, k in [
        ((3,), {}), ((2, 3), {"axis": 0}), ((2, 3), {}), ((2, 3), {"axis": None})]],
    **_PRED)
for _mn in ("argmax", "argmin"):
    method(_mn, _m(_mn), lambda rng: [
        Sample((draw(rng, s, "distinct"),), k) for s, k in [
            ((3,), {}), ((2, 3), {"axis": 0}), ((2, 3), {"axis": -1, "keepdims": True}),
            ((2, 3, 4), {"axis": 1})]], **_PRED)
for _mn in ("all", "any"):
    method(_mn, _m(_mn), lambda rng: [
        Sample((draw(rng, s, "grid"),), k) for s, k in [
            ((3,), {}), ((2, 3), {"axis": 0}), ((2, 3), {"axis": 1, "keepdims": True}),
            ((2, 3, 4), {"axis": (0, 2)}), (EMPTY, {})]], **_PRED)
method("dot", lambda x, y: x.dot(y), pairs([((3,), (3,), {}), ((2, 3), (3, 4), {}),
                                             ((2, 3), (3,), {}), ((), (3,), {})]))
method("clip", lambda x, **k: x.clip(**k), lambda rng: [
    Sample((rng.choice([-1.0, 1.0], s) * rng.uniform(0.6, 1.5, s),), k) for s, k in [
        ((2, 3), {"min": -1.0, "max": 1.0}), ((3,), {"max": 0.5}), ((2, 3), {"min": 0.2}),
        ((), {"min": -0.3, "max": 0.3})]])
method("take", _m("take"), lambda rng: [
    Sample((draw(rng, (2, 3)),), {"indices": np.array([0, 4, 4])}),
    Sample((draw(rng, (2, 3)),), {"indices": np.array([[2], [0]]), "axis": 1}),
    Sample((draw(rng, (2, 3)),), {"indices": 1, "axis": 0})])
for _mn in ("conj", "conjugate"):
    method(_mn, _m(_mn), unary_samples("real", special=False))
method("real", lambda x: x.real, unary_samples("real", special=False))
method("imag", lambda x: x.imag, unary_samples("real", special=False), **_NOGRAD)
method("T", lambda x: x.T, shaped([((2, 3), {}), ((2, 3, 4), {}), ((3,), {}), ((), {})]))
method("mT", lambda x: x.mT, shaped([((2, 3), {}), ((2, 3, 4), {}), ((1, 4), {})]))
method("diagonal", _m("diagonal"), shaped([
    ((3, 3), {}), ((2, 3), {"offset": 1}), ((2, 3, 4), {"axis1": 1, "axis2": 2})]))
method("round", _m("round"), lambda rng: [
    Sample((draw(rng, (2, 3), "offgrid"),)), Sample((draw(rng, (2, 3), "offgrid") / 10,),
                                                    {"decimals": 1}),
    Sample((draw(rng, ()),))], **_NOGRAD)
method("swapaxes", lambda x, axis1, axis2: x.swapaxes(axis1, axis2), shaped([
    ((2, 3), {"axis1": 0, "axis2": 1}), ((2, 3, 4), {"axis1": -1, "axis2": 0})]))

# Python operators (ndarray.__add__ ...): a Python scalar or a NumPy array on either side
import operator as _op  # noqa: E402

for _dunder, _fn, _da, _db, _flags in [
        ("add", _op.add, "real", "real", {}), ("sub", _op.sub, "real", "real", {}),
        ("mul", _op.mul, "real", "real", {}), ("truediv", _op.truediv, "real", "nonzero", {}),
        ("pow", _op.pow, "pos", "real", {}), ("floordiv", _op.floordiv, None, None, _NOGRAD),
        ("mod", _op.mod, None, None, {}), ("eq", _op.eq, "grid", "grid", _PRED),
        ("ne", _op.ne, "grid", "grid", _PRED), ("lt", _op.lt, "grid", "grid", _PRED),
        ("le", _op.le, "grid", "grid", _PRED), ("gt", _op.gt, "grid", "grid", _PRED),
        ("ge", _op.ge, "grid", "grid", _PRED)]:
    _samples = mod_samples if _da is None else binary_samples(
        _da, _db, ints=_dunder != "pow", scalars=(1.7, 0.6) if _da != "grid" else (0.0, 1.0))
    method(f"__{_dunder}__", _ufunc_fn(_fn), _samples, **_flags)
for _dunder, _fn in [("and", _op.and_), ("or", _op.or_), ("xor", _op.xor)]:
    method(f"__{_dunder}__", _ufunc_fn(_fn), lambda rng: [
        Sample((draw(rng, sa, "bool"), draw(rng, sb, "bool"))) for sa, sb in BIN_SHAPES] + [
        Sample((draw(rng, (2, 3), "bool"),), {"rhs": True}),
        Sample((draw(rng, (2, 3), "bool"),), {"lhs": draw(rng, (3,), "bool")})], **_PRED)
method("__matmul__", _ufunc_fn(_op.matmul), pairs([
    ((3,), (3,), {}), ((2, 3), (3,), {}), ((2, 3), (3, 4), {}), ((2, 2, 3), (3, 4), {}),
    ((0, 3), (3, 2), {})], extra=lambda rng: [
    Sample((draw(rng, (3,)),), {"lhs": draw(rng, (2, 3))}),
    Sample((draw(rng, (2, 3)),), {"rhs": draw(rng, (3, 2))})]))
for _dunder, _fn, _dom, _flags in [("neg", _op.neg, "real", {}), ("pos", _op.pos, "real", {}),
                                   ("abs", abs, "nonzero", {})]:
    method(f"__{_dunder}__", (lambda f: lambda x: f(x))(_fn), unary_samples(_dom), **_flags)
method("__invert__", lambda x: ~x, lambda rng: [Sample((draw(rng, s, "bool"),))
                                                for s in SHAPES + [EMPTY]], **_PRED)

# attributes that are Python values (shape, ndim, size ...): they enter the arithmetic
for _mn, _fn in [("shape", lambda x: x.reshape(x.shape[::-1]) if x.ndim else x * 2.0),
                   ("ndim", lambda x: x * x.ndim), ("size", lambda x: x * x.size),
                   ("itemsize", lambda x: x * x.itemsize), ("nbytes", lambda x: x * x.nbytes),
                   ("dtype", lambda x: x.astype(x.dtype) * 2)]:
    method(_mn, _fn, shaped([((2, 3), {}), ((), {}), (EMPTY, {}), ((2, 3, 4), {})]))
method("view", lambda x: x.view() * 2.0, shaped([((2, 3), {}), ((), {})]))


# -- narrower dtypes and edge cases added to a few records ----------------------------------------
U8 = np.uint8


def _small(rng, dtype, shape=(2, 3)):
    return rng.integers(1, 5, shape).astype(dtype)


def extend(name, more):
    op = next(o for o in OPS if o.name == name)
    op.samples = (lambda g: lambda rng: list(g(rng)) + list(more(rng)))(op.samples)


for _n in ("np.sum", "np.prod", "np.cumsum", "np.mean", "np.max"):
    extend(_n, lambda rng: [Sample((_small(rng, np.int32),), {"axis": 0}),
                            Sample((_small(rng, U8),))])
for _n in ("np.exp", "np.sqrt", "np.negative", "np.absolute"):
    extend(_n, lambda rng: [Sample((_small(rng, np.int32),)), Sample((_small(rng, U8),))])
extend("np.add", lambda rng: [Sample((_small(rng, np.int32), _small(rng, U8))),
                              Sample((_small(rng, U8),), {"rhs": 3})])
extend("np.square", lambda rng: [Sample((draw(rng, (2, 3), "bool"),), desc="bool")])


# NumPy picks the smallest float loop that holds the integer type (float16 for int8, uint8 and
# bool, float32 for int16; SciPy's ufuncs have no float16 loop), and keeps integer loops for
# np.reciprocal / np.square: every float ufunc of the table on each narrow integer type.
def _narrow(rng):
    return [Sample((_small(rng, dt),), desc=np.dtype(dt).name)
            for dt in (np.int8, U8, np.int16, np.uint16)] + [
        Sample((draw(rng, (2, 3), "bool"),), desc="bool")]


for _n in ("np.exp", "np.exp2", "np.expm1", "np.log", "np.log2", "np.log10", "np.log1p",
           "np.sin", "np.cos", "np.tan", "np.tanh", "np.sqrt", "np.arcsin", "np.arccos",
           "np.arctan", "np.sinh", "np.cosh", "np.arcsinh", "np.arccosh", "np.arctanh",
           "np.rint", "np.deg2rad", "np.rad2deg", "np.radians", "np.degrees", "np.cbrt",
           "np.reciprocal", "np.square", "scipy.special.erf", "scipy.special.erfc",
           "scipy.special.erfinv", "scipy.special.gammaln", "scipy.special.psi",
           "scipy.special.expit", "scipy.special.logit"):
    extend(_n, _narrow)
extend("np.reciprocal", lambda rng: [Sample((np.array([[-2, -1, 1], [2, 3, 1]], dt),),
                                            desc="signed") for dt in (np.int64, np.int32)])
for _n in ("np.arctan2", "np.hypot", "np.copysign", "np.logaddexp", "np.logaddexp2",
           "np.heaviside", "np.power", "np.divide", "np.multiply", "np.subtract"):
    extend(_n, lambda rng: [Sample((_small(rng, U8), _small(rng, U8))),
                            Sample((_small(rng, np.int8), _small(rng, np.int16))),
                            Sample((_small(rng, U8),), {"rhs": 3})])
extend("np.multiply", lambda rng: [Sample((_small(rng, np.int8),), {"rhs": np.float32(1.5)})])
extend("scipy.special.xlogy", lambda rng: [Sample((_small(rng, U8), _small(rng, U8)))])
extend("np.median", lambda rng: [Sample((draw(rng, EMPTY),), desc="empty")])


# An integer dtype= gives that dtype (NumPy accumulates in it: int8 products wrap, the mean's
# quotient truncates), of float input (off the integers, so the casts truncate exactly) and of
# integer input.
def _int_dtype_samples(rng):
    x = rng.integers(-9, 9, (2, 3)) + 0.25 + rng.uniform(-0.1, 0.1, (2, 3))
    return [Sample((x,), {"axis": 0, "dtype": np.int32}, desc="int dtype", grad=False),
            Sample((x,), {"dtype": np.int64}, desc="int dtype", grad=False),
            Sample((rng.integers(-9, 9, (2, 3)) * 3.5,), {"axis": 1, "dtype": np.int8},
                   desc="int dtype", grad=False),
            Sample((_small(rng, np.int16),), {"axis": 1, "dtype": np.int32}, grad=False),
            Sample((_small(rng, np.int64) * 7,), {"dtype": np.int8}, grad=False)]


for _n in ("np.sum", "np.prod", "np.mean", "np.nansum", "np.cumsum", "np.cumprod",
           "np.nancumsum", "np.nancumprod", "ndarray.sum", "ndarray.prod", "ndarray.mean",
           "ndarray.cumsum", "ndarray.cumprod"):
    extend(_n, _int_dtype_samples)


# initial= on an empty reduction is the result (max / min too, which have no identity); it is
# cast to the reduction's dtype (an int64 max with initial=2.5 stays int64); where it beats
# every element the elements get no gradient
def _initial_samples(big):
    return lambda rng: [
        Sample((np.zeros(EMPTY),), {"axis": 0, "initial": -1.5}, desc="empty initial"),
        Sample((np.zeros(EMPTY),), {"initial": 2.0}, desc="empty initial"),
        Sample((np.zeros((2, 0)),), {"axis": 1, "keepdims": True, "initial": 0.5},
               desc="empty initial"),
        Sample((np.zeros((2, 0, 3)),), {"axis": (0, 1), "initial": 0.5}, desc="empty initial"),
        Sample((_small(rng, np.int64),), {"axis": 0, "initial": 2.5}, desc="int initial"),
        Sample((draw(rng, (2, 3), "distinct"),), {"axis": 1, "initial": big},
               desc="initial wins")]


for _n, _big in [("np.max", 9.0), ("np.amax", 9.0), ("np.min", -9.0), ("np.amin", -9.0),
                 ("np.sum", 9.0), ("np.prod", 9.0)]:
    extend(_n, _initial_samples(_big))


# -- known gradjit bugs (each xfail(strict=True) in the tests: a fix turns it into XPASS) ---------
KNOWN_BUGS = [   # ([OpInfo names], bug(reason, checks..., when=predicate on the sample))
]
_BY_NAME = {op.name: op for op in OPS}
for _names, _bug in KNOWN_BUGS:
    for _n in _names:
        _BY_NAME[_n].bugs.append(_bug)


# -- statistics, series, matrix powers (tracer/numpy_stats.py) ------------------------------------
def _quantile_samples(scale):
    def gen(rng):
        x35, x234 = draw(rng, (3, 5)), draw(rng, (2, 3, 4))
        q = lambda *v: [scale * e for e in v] if len(v) > 1 else scale * v[0]  # noqa: E731
        return [Sample((draw(rng, (7,)),), {"q": q(0.3)}),
                Sample((x35,), {"q": q(0.1, 0.5, 0.9), "axis": 1}),
                Sample((x35,), {"q": q(0.25), "axis": 0, "keepdims": True}),
                Sample((x35,), {"q": q(1.0)}), Sample((x35,), {"q": q(0.0), "axis": 1}),
                Sample((x234,), {"q": q(0.6), "axis": -1}),
                Sample((x234,), {"q": q(0.2, 0.7), "keepdims": True}),
                Sample((draw(rng, (1,)),), {"q": q(0.5)}),
                Sample((draw(rng, (6,), "real", F4),), {"q": q(0.4)}),
                Sample((draw(rng, (2, 5), "int"),), {"q": q(0.5), "axis": 1})]
    return gen


add(np.quantile, samples=_quantile_samples(1.0))
add(np.percentile, samples=_quantile_samples(100.0))


def _cov_samples(rng):
    x36 = draw(rng, (3, 6))
    return [Sample((x36,)), Sample((draw(rng, (6,)),)), Sample((draw(rng, (5, 3)),), {"rowvar": False}),
            Sample((x36,), {"bias": True}), Sample((x36,), {"ddof": 2}),
            Sample((draw(rng, (6,)), draw(rng, (6,))), desc="m and y"),
            Sample((draw(rng, (2, 5)), draw(rng, (1, 5))), desc="m and y rows"),
            Sample((draw(rng, (3, 4), "real", F4),)), Sample((draw(rng, (2, 5), "int"),))]


add(np.cov, samples=_cov_samples, rtol=1e-10)
add(np.corrcoef, samples=lambda rng: [
    Sample((draw(rng, (3, 6)),)), Sample((draw(rng, (6,)),)),
    Sample((draw(rng, (6,)), draw(rng, (6,))), desc="x and y"),
    Sample((draw(rng, (5, 3)),), {"rowvar": False}), Sample((draw(rng, (2, 5), "int"),))],
    rtol=1e-10, atol=1e-12)
add(np.polyval, samples=lambda rng: [
    Sample((draw(rng, (4,)), draw(rng, (3,)))), Sample((draw(rng, (3,)), draw(rng, (2, 3)))),
    Sample((draw(rng, (1,)), draw(rng, ()))), Sample((draw(rng, (5,)), draw(rng, (1, 4)))),
    Sample((draw(rng, (3,), "int"), draw(rng, (4,)))), Sample((draw(rng, (3,)), draw(rng, (4,), "int")))])


def _series_samples(rng):
    out = []
    for mode in ("full", "same", "valid"):
        out += [Sample((draw(rng, (6,)), draw(rng, (3,))), {"mode": mode}),
                Sample((draw(rng, (3,)), draw(rng, (6,))), {"mode": mode}, desc="v longer"),
                # (an even shorter first operand: correlate's 'same' window starts a step later)
                Sample((draw(rng, (2,)), draw(rng, (5,))), {"mode": mode}, desc="v longer, a even"),
                Sample((draw(rng, (4,)), draw(rng, (4,))), {"mode": mode})]
    return out + [Sample((draw(rng, (1,)), draw(rng, (1,)))),
                  Sample((draw(rng, (5,), "int"), draw(rng, (2,), "int"))),
                  Sample((draw(rng, (5,), "real", F4), draw(rng, (2,))))]


add(np.convolve, samples=_series_samples)
add(np.correlate, samples=_series_samples)
add(np.linalg.matrix_power, samples=lambda rng: [
    Sample((well(rng, (3, 3)),), {"n": n}) for n in (0, 1, 2, 3, 5, -1, -2)] + [
    Sample((well(rng, (2, 3, 3)),), {"n": 2}), Sample((np.array([[2, 1], [1, 3]]),), {"n": 3}),
    Sample((well(rng, (2, 2)).astype(F4),), {"n": 2})], rtol=1e-10, atol=1e-12)


def _interp_samples(rng):
    xp = np.array([-1.0, -0.2, 0.3, 1.1, 2.0])
    x = np.array([-1.5, -0.7, 0.05, 0.29, 0.8, 1.5, 2.5, -0.21])   # (off the sample points)
    return [Sample((x, xp, draw(rng, (5,)))), Sample((x.reshape(2, 4), xp, draw(rng, (5,)))),
            Sample((np.array(0.4), xp, draw(rng, (5,)))),
            Sample((x, xp, draw(rng, (5,))), {"left": -3.0, "right": 4.0}),
            Sample((x, xp[:1], draw(rng, (1,))), desc="one sample point"),
            Sample((x, xp, draw(rng, (5,), "int")), desc="int fp"),
            Sample((x.astype(F4), xp, draw(rng, (5,)))), Sample((np.zeros(0), xp, draw(rng, (5,))))]


add(np.interp, samples=_interp_samples)
add(np.searchsorted, samples=lambda rng: [
    Sample((np.sort(draw(rng, (6,))), draw(rng, (4,)))),
    Sample((np.array([0.0, 1.0, 1.0, 2.0]), np.array([[1.0, 0.5], [2.0, -1.0]])), {"side": "right"}),
    Sample((np.array([0.0, 1.0, 1.0, 2.0]), np.array([1.0, 3.0, 0.0]))),
    Sample((np.array([1, 3, 5]), np.array(4))), Sample((np.sort(draw(rng, (5,))), draw(rng, (0,))))],
    differentiable=False)
method("searchsorted", _m("searchsorted"), lambda rng: [
    Sample((np.sort(draw(rng, (6,))), draw(rng, (4,)))),
    Sample((np.array([0.0, 1.0, np.nan]), np.array([1.0, np.nan, -np.inf])), {"side": "right"}),
    Sample((np.array([0.0, 1.0, np.nan]), np.array([1.0, np.nan, np.inf])))], differentiable=False)


# -- what is not in the table, and why -------------------------------------------------------------
SKIP = {
    # (entries of the dispatch table without an OpInfo: none today. Add one here with the
    # reason, e.g. "the inputs are not arrays", rather than leaving it unaccounted for.)
}

METHOD_SKIP = {
    "fill": "writes in place; traced arrays refuse it by design (GradjitError with advice)",
    "sort": "NumPy's x.sort() sorts in place; traced arrays refuse it by design (np.sort)",
    "nonzero": "a data-dependent shape: refused by design under gj.jit / gj.grad",
    "item": "a Python number of a traced value: refused by design (TracerValueError)",
    "tolist": "Python lists of a traced value: refused by design (TracerValueError)",
    **{m: f"np.{m} is not traced: x.{m} raises its UnsupportedError naming the method"
       for m in ("put", "compress", "choose", "partition", "argpartition", "resize")},
    "flat": "an iterator of a traced array: refused (UnsupportedError; index x.ravel())",
}


def dispatch_table():
    """{NumPy callable: 'np.name'} of gradjit's NumPy dispatch table (plus scipy.special's
    ufuncs, which join it once scipy.special is imported)."""
    from gradjit.tracer import numpy_protocol as P
    keys = list(P._FUNCTIONS) + list(P._UFUNCS)
    try:
        import scipy.special as special
        keys += [getattr(special, n) for n, _ in P._SCIPY_UNARY + P._SCIPY_BINARY]
    except ImportError:   # pragma: no cover
        pass
    return {k: qualname(k) for k in dict.fromkeys(keys)}


def traced_methods():
    """The public ndarray attributes that traced arrays have."""
    from gradjit.tracer.trace import Tracer
    return sorted(n for n in dir(np.ndarray) if not n.startswith("_") and hasattr(Tracer, n))


def table_size():
    """(OpInfos, dispatch-table entries covered, ndarray methods covered, sample cases)."""
    covered = {f for op in OPS for f in op.funcs}
    methods = {op.method for op in OPS if op.method}
    return len(OPS), len(covered), len(methods), sum(len(op.cases()) for op in OPS)
