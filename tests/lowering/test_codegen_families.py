"""Every scalar template and kernel of the op families, run as plain Python.

The generated source of one forward graph per family is imported and its
``entry.py_func`` (the undecorated Python function, no Numba compile of the
entry) is called and compared with the reference interpreter. This checks every
template cheaply; the compiled suites (``test_ops_gradcheck_compiled.py``) compile
one small representative graph per family on top.
"""
import importlib.util
import re

import numpy as np
import pytest

from gradjit.lowering.codegen_cpu import generate
from gradjit.lowering.passes import optimize
from gradjit.tracer.interp import interpret
from gradjit.tracer.trace import trace


def _unary(x, p, u, g, o):
    return (x.exp2(), x.expm1(), x.atan(), x.sinh(), x.cosh(), x.asinh(), x.erf(), x.erfc(),
            p.log2(), p.log10(), p.log1p(), p.rsqrt(), p.lgamma(), p.digamma(), p.polygamma(2),
            u.tan(), u.asin(), u.acos(), u.atanh(), u.erfinv(), g.acosh(), (0.5 + 0.4 * u).logit(),
            u.logit(eps=0.2), o.floor(), o.ceil(), o.round(), o.round(1), o.round(-1), o.trunc(),
            o.frac(), x.clamp(-0.5, 0.5), x.clamp(min=0.1), x.clamp(max=0.1), x.clamp_min(0.2),
            x.clamp_max(0.2), x.clamp_min(o), x.clamp_max(o), (p.log() * x).nan_to_num(),
            (p.log() * x).nan_to_num(1.0, 2.0, -3.0), x.square(), x.deg2rad())


def _binary(x, y, p, w):
    return (x.atan2(p), x.hypot(p), x.maximum(y), x.minimum(y), x.fmax(y), x.fmin(y),
            x.fmod(p), x % p, x.copysign(y), x.logaddexp(y), x.logaddexp2(y), x.xlogy(p),
            x.lerp(y, w), x.lerp(y, w * 3.0), x.addcmul(y, p), x.addcdiv(y, p, value=2))


def _reductions(x, d):
    return (x.amin(1), x.amin(), x.amin((0,), keepdim=True), x.prod(), x.prod(1),
            x.prod(0, keepdim=True), x.logsumexp(1), x.logsumexp(), x.norm(), x.norm(1, 1),
            x.norm(float("inf"), 0), x.norm(float("-inf"), 1), x.norm(3, 1), x.var(1, unbiased=True), x.std(unbiased=True),
            x.cumsum(0), x.cumsum(1), d.cumsum(0), x.nansum())


def _arrays(rng, kinds, shape=(3, 4)):
    make = {"x": lambda: rng.standard_normal(shape), "y": lambda: rng.standard_normal(shape[1:]),
            "p": lambda: rng.uniform(0.5, 2.0, shape),
            "u": lambda: rng.uniform(-0.9, 0.9, shape), "w": lambda: rng.uniform(-0.9, 0.9, (3, 1)),
            "g": lambda: rng.uniform(1.2, 3.0, shape),
            "o": lambda: rng.integers(-3, 3, shape) + rng.uniform(0.2, 0.8, shape),
            "d": lambda: rng.standard_normal(())}
    return [make[k]() for k in kinds]


def _indexing(x, d):
    from gradjit.tracer.api import apply
    i = np.array([2, 0, -1, 2])
    v, k = x.max(dim=1)
    return (x[1:, ::-2], x[:, i], x[np.array([0, 2]), np.array([-1, 1])], x.gather(1, i[None].repeat(3, 0)),
            v, k, x.min(dim=0, keepdim=True)[0], d.max(dim=0)[0], x.flip(1), x.roll(1, 0), x.diagonal(1),
            apply("index_add.default", [x, i[:3], x[:, :3] * 2.0], {"dim": 1, "alpha": 0.5}),
            apply("scatter_add.default", [x, i[None, :2].repeat(3, 0), x], {"dim": 1}),
            apply("slice_backward.default", [x[:, ::-1]], {"input_sizes": (3, 6), "dim": 1,
                                                           "start": 5, "end": 1, "step": -1}))


FAMILIES = {"unary": (_unary, "xpugo"), "binary": (_binary, "xypw"), "reductions": (_reductions, "xd"),
            "indexing": (_indexing, "xd")}


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("family", FAMILIES)
def test_family_source_matches_interpreter(family, dtype, tmp_path):
    fn, kinds = FAMILIES[family]
    arrays = [a.astype(dtype) for a in _arrays(np.random.default_rng(0), kinds)]
    g, tracers, _ = trace(arrays, name=family)
    g.outputs = [o.value for o in fn(*tracers)]
    g = optimize(g)
    gen = generate(g)
    path = tmp_path / f"{family}.py"
    path.write_text(gen.source)
    spec = importlib.util.spec_from_file_location(f"gj_family_{family}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    feed = iter(arrays)   # captured constants (e.g. a where's 0) are graph inputs too
    inputs = [g.constants[v] if v in g.constants else next(feed) for v in g.inputs]
    with np.errstate(all="ignore"):
        got = mod.entry.py_func(*[a[()] if a.ndim == 0 else a for a in inputs], gen.consts)
    want = interpret(g, inputs)
    tol = 1e-12 if dtype == np.float64 else 1e-5
    for k, (a, b) in enumerate(zip(got, want)):
        np.testing.assert_allclose(np.asarray(a, b.dtype), b, rtol=tol, atol=tol,
                                   err_msg=f"{family} output {k}: {g.outputs[k].node}")
    assert "consts[" in gen.source    # scalar attributes are arguments, not literals


def test_no_array_assignments_into_slices():
    """Whole arrays stored into slices (``v[0:1, :] = g``, a scan's ``ys[k] = y``) make
    Numba compile its broadcast shape check and error message, seconds per module (the
    RK4 scan's cold compile: 16 to 9 s without them): generated code copies elements."""
    import gradjit as gj
    y0, th = np.linspace(0.5, 1.5, 8).reshape(2, 4), np.array([1.1, 0.4, 0.1, 0.4])

    def step(y, th):
        dy = np.stack([th[0] * y[0] - th[1] * y[0] * y[1], th[2] * y[0] * y[1] - th[3] * y[1]])
        y = y + 0.01 * dy
        return y, y * y

    def loss(th):
        y, ys = gj.scan(lambda y, _: step(y, th), y0, None, length=3)
        return ys.sum() + y[1:, :2].sum()

    from gradjit.tracer.coercion import traced_numpy
    f = gj.value_and_grad(loss)
    g, call, values = f._trace((th,))
    with traced_numpy(g, f.fn):
        f._trace_body(g, call, values)
    src = generate(optimize(g)).source
    assert "scan" in src and "for j0 in range(" in src   # (the element loops)
    whole = [ln for ln in src.splitlines()
             if re.match(r"^\s*v\d+\[[^\]]*\] = (v\d+|qk\d+_\d+|qr\d+\[\d+\])\s*(#.*)?$", ln)]
    assert not whole, whole
