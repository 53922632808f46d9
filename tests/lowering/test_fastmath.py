"""lowering/fastmath_cpu.py: accuracy in ulp, special values, and its use by the CPU generator.

Accuracy is measured inside compiled loops (the way generated code calls the functions,
vectorised) against NumPy evaluated in a wider type: long double (x86's 80-bit; where
long double is plain double, float64 inputs are skipped and float32 ones use float64).
NumPy at the same precision is held to a looser bound: its error adds to ours, and its
own float32 SIMD log/exp are up to ~3.5 ulp off.
"""
from __future__ import annotations

import functools
import re

import numba
import numpy as np
import pytest

import gradjit as gj
from gradjit.lowering import fastmath_cpu as fm
from gradjit.lowering.codegen_cpu import generate
from gradjit.lowering.codegen_cpu_math import FAST_OPS
from gradjit.lowering.passes import optimize
from gradjit.runtime.compiler import compile_graph
from gradjit.tracer.interp import interpret
from gradjit.tracer.trace import trace

F64, F32 = np.float64, np.float32
LD = np.longdouble
EXTENDED = np.finfo(LD).nmant >= 63
NAMES = ("exp", "expm1", "log", "log1p", "tanh", "sin", "cos")

# -- inputs: random over the whole useful range, plus every edge we know of ---------------------
EDGES = {
    "exp": [709.782712893384, 709.7827128933841, 709.78, 709.79, 710.0, -708.3964185322641,
            -708.4, -745.1332191019411, -745.1332191019412, -745.14, -746.0, -1000.0, 88.72,
            88.73, -87.33, -103.97, -104.0, 1e-20, -1e-20, 0.5 * np.log(2), np.log(2)],
    "expm1": [-37.0, -38.0, -40.0, -41.0, 40.0, 41.0, 56.0 * np.log(2), 0.35, 0.36, -0.35, 709.78,
              1e-10, -1e-10, 17.0, -17.0, 88.7],
    "log": [1.0, np.nextafter(1.0, 2), np.nextafter(1.0, 0), 2.2250738585072014e-308,
            1.1754943508222875e-38, 1.2e-38, np.sqrt(0.5), np.sqrt(2.0), 1e300, -1.0],
    "log1p": [-1.0, np.nextafter(-1.0, 0), -0.5, -1e-300, 1e-300, -2.0, 1e300, 2 ** 53, 1e-8],
    "tanh": [19.0, 19.1, 20.0, 21.0, 9.0, 10.0, 2 ** -27, 2 ** -26, 2 ** -12, 2 ** -13, 0.55,
             0.1733, 0.5 * np.log(3), 354.0, 355.0, 1e300],
    "sin": [np.pi, np.pi / 2, 2 * np.pi, 1e22, 1e300, 1.7976931348623157e308, 2 ** -27,
            2 ** -28, 2 ** -26, 355.0, 103993.0, 2.0 ** 50, 2.0 ** 60, 3e38],
}
EDGES["cos"] = EDGES["sin"]
SPECIAL = [0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, -5e-324, 1e-310, -1e-310, 1e-45, -1e-45,
           1.401298464324817e-45, 1.7976931348623157e308, -1.7976931348623157e308, 3.4e38]
RANGES = {   # (lo, hi) of uniform draws; plus log-uniform magnitudes of both signs
    "exp": [(-750, 750), (-2, 2), (-110, 95)],
    "expm1": [(-50, 720), (-1.5, 1.5), (-20, 90)],
    "log": [(0, 1e300), (0, 4), (0.5, 2)],
    "log1p": [(-1, 10), (-0.5, 0.5), (-1, 1e30)],
    "tanh": [(-30, 30), (-1.2, 1.2), (-0.2, 0.2)],
    "sin": [(-10, 10), (-1e6, 1e6), (-1e300, 1e300)],
    "cos": [(-10, 10), (-1e6, 1e6), (-1e300, 1e300)],
}


def _inputs(name, dtype, n=60000):
    rng = np.random.default_rng(abs(hash((name, dtype.__name__))) % 2 ** 32)
    parts = [rng.uniform(lo, hi, n) for lo, hi in RANGES[name]]
    mags = np.exp(rng.uniform(np.log(1e-320), np.log(1.7e308), n))
    parts.append(mags * rng.choice([-1.0, 1.0], n))
    x = np.concatenate(parts + [np.array(EDGES[name] + SPECIAL, dtype=np.float64)])
    with np.errstate(over="ignore"):
        return x.astype(dtype)


@functools.cache
def _loop(fn):
    @numba.njit(error_model="numpy")
    def run(a, out):
        for i in range(a.size):
            out[i] = fn(a[i])
    return run


def _fast(name, x):
    out = np.empty_like(x)
    _loop(getattr(fm, name + ("_f32" if x.dtype == F32 else "")))(x, out)
    return out


def _ulp(got, ref, dtype):
    """|got - ref| in ulps of ``dtype`` at the smaller of the two magnitudes; 0 where both
    are the same NaN/inf/value after rounding ``ref`` to ``dtype``."""
    with np.errstate(over="ignore", invalid="ignore"):
        r = ref.astype(dtype)
        small = np.minimum(np.abs(got.astype(F64)), np.abs(r.astype(F64))).astype(dtype)
        sp = np.maximum(np.spacing(small), np.finfo(dtype).smallest_subnormal).astype(LD)
        d = np.abs(got.astype(LD) - ref.astype(LD)) / sp
    same = (got == r) | (np.isnan(got) & np.isnan(r))
    return np.where(same, 0.0, np.where(np.isnan(d), np.inf, d))


def _ref(name, x):
    wide = x.astype(LD) if EXTENDED else x.astype(F64)   # float64 only serves float32 inputs
    with np.errstate(all="ignore"):
        return getattr(np, name)(wide)


@pytest.mark.parametrize("dtype", [F64, F32], ids=["float64", "float32"])
@pytest.mark.parametrize("name", NAMES)
def test_within_2_ulp_of_numpy_in_a_wider_type(name, dtype):
    if dtype == F64 and not EXTENDED:
        pytest.skip("long double is not extended precision here")
    x = _inputs(name, dtype)
    got = _fast(name, x)
    assert got.dtype == dtype
    err = _ulp(got, _ref(name, x), dtype)
    worst = int(np.argmax(err))
    assert err[worst] <= 2.0, f"{name}({x[worst]!r}) = {got[worst]!r}: {err[worst]:.2f} ulp"
    with np.errstate(all="ignore"):   # NumPy at the same precision: its error adds to ours
        same = getattr(np, name)(x)
    bound = 3.0 if dtype == F64 else 5.0
    assert _ulp(got, same.astype(LD), dtype).max() <= bound


@pytest.mark.parametrize("dtype", [F64, F32], ids=["float64", "float32"])
@pytest.mark.parametrize("name", NAMES)
def test_special_values_match_numpy_exactly(name, dtype):
    """NaN, +-inf, signed zeros, overflow to inf and underflow to 0 exactly as NumPy."""
    x = np.array(SPECIAL + EDGES[name], dtype=F64)
    with np.errstate(over="ignore"):
        x = x.astype(dtype)
    got = _fast(name, x)
    with np.errstate(all="ignore"):
        want = getattr(np, name)(x.astype(F64)).astype(dtype)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"{name} NaN at {x}")
    inf = np.isinf(want) | np.isinf(got)
    np.testing.assert_array_equal(got[inf], want[inf], err_msg=f"{name} inf at {x[inf]}")
    zero = (want == 0) | (got == 0)
    np.testing.assert_array_equal(got[zero], want[zero], err_msg=f"{name} zero at {x[zero]}")
    np.testing.assert_array_equal(np.signbit(got[zero]), np.signbit(want[zero]),
                                  err_msg=f"{name} signed zero at {x[zero]}")


def test_float32_versions_compute_in_float32():
    """exp, log and tanh in float32 never widen to double (twice the SIMD lanes)."""
    for name in ("exp", "log", "tanh"):
        fn = numba.njit(error_model="numpy")(getattr(fm, name + "_f32").py_func)  # uncached
        fn.compile((numba.float32,))
        assert fn.overloads[(numba.float32,)].signature.return_type == numba.float32
        ir = fn.inspect_llvm((numba.float32,))
        heads = [(b.split("(")[0], b) for b in ir.split("\ndefine ")[1:]]
        body = [b for h, b in heads if f"{name}_f32" in h and "cpython" not in h]
        assert body and all(" double " not in b and "fpext" not in b for b in body), name


@pytest.mark.parametrize("dtype", [F64, F32], ids=["float64", "float32"])
@pytest.mark.parametrize("name", NAMES)
def test_loops_calling_them_vectorise(name, dtype):
    """The point of the module: a loop over fm.<name> becomes SIMD code (LLVM vector types
    in the optimised IR) with no call left in it. Checked where AVX2 is there (gathers)."""
    import llvmlite.binding as llvm
    if "+avx2" not in llvm.get_host_cpu_features().flatten():
        pytest.skip("host without AVX2")
    x = _inputs(name, dtype, n=16)
    _fast(name, x)
    run = _loop(getattr(fm, name + ("_f32" if dtype == F32 else "")))
    ir = run.inspect_llvm(run.signatures[0])
    loop = [b for b in ir.split("\ndefine ")[1:]   # the native function, not its wrappers
            if re.search(r" @_ZN(?!7cpython)\S*3run", b.split("\n")[0])]
    assert len(loop) == 1 and f"x {'float' if dtype == F32 else 'double'}>" in loop[0], name
    libm = r"@(llvm\.)?(exp|expm1|log|log1p|tanh|sin|cos)(f|\.f32|\.f64|\.v\d+f\d+)?\("
    assert not re.search(libm, loop[0]), name      # no libm call (scalarised in the backend)


# -- the generator: fm.<name> when enabled, math.<name> otherwise ------------------------------
def _unary_graph(dtype):
    g, (x,), _ = trace([np.ones(8, dtype)], name="fastmath_ops")
    outs = [x.exp(), x.log(), x.tanh(), x.sin(), x.cos(), x.expm1(), x.log1p(), x.sigmoid()]
    g.outputs = [o.value for o in outs]
    return optimize(g)


@pytest.mark.parametrize("dtype", [F64, F32], ids=["float64", "float32"])
def test_generator_calls_fm_when_enabled(dtype, monkeypatch):
    monkeypatch.delenv("GRADJIT_FAST_MATH", raising=False)
    src = generate(_unary_graph(dtype)).source
    suffix = "_f32" if dtype == F32 else ""
    assert "from gradjit.lowering import fastmath_cpu as fm" in src
    for name in FAST_OPS:
        assert f"fm.{name}{suffix}(" in src, (name, src)
        assert f"math.{name}(" not in src, (name, src)
    assert f"/ ({'np.float32(1.0)' if dtype == F32 else '1.0'} + fm.exp{suffix}(-" in src  # sigmoid


def test_generator_uses_libm_when_disabled(monkeypatch):
    monkeypatch.setenv("GRADJIT_FAST_MATH", "0")
    src = generate(_unary_graph(F64)).source
    assert "fm." not in src and "fastmath_cpu" not in src
    for name in FAST_OPS:
        assert f"math.{name}(" in src, (name, src)


def test_scalar_code_keeps_libm(monkeypatch):
    """0-d values are straight-line code with no loop to vectorise: libm stays."""
    monkeypatch.delenv("GRADJIT_FAST_MATH", raising=False)
    g, (x,), _ = trace([np.array(0.5)], name="scalar_ops")
    g.outputs = [x.exp().value, x.tanh().value]
    src = generate(optimize(g)).source
    assert "math.exp(" in src and "math.tanh(" in src and "fm." not in src


def test_emitters_without_fast_math_keep_libm(monkeypatch):
    """A target that sets ``fast_math = False`` (CUDA) renders ``_expr`` with libm."""
    from gradjit.lowering import codegen_cpu as cg
    g = _unary_graph(F64)
    e = cg._Emitter(g)
    e.fast_math = False
    for node in g.nodes:
        if node.op.split(".")[0] in FAST_OPS | {"sigmoid"}:
            assert "fm." not in cg._expr(node, ["x"], e)
    assert not e.imports


# -- gradients: fused fast-math code agrees with libm code and with the interpreter ------------
def _loss(x, y):
    a = x.sin() * y.cos() + (x * x + 1.0).log() - (-(y * y)).exp()
    b = (a * 0.5).tanh() + (x * 0.1).expm1() * (y * y).log1p() + (a - y).sigmoid()
    return (a * b).sum()


@pytest.mark.parametrize("dtype", [F64, F32], ids=["float64", "float32"])
def test_gradients_with_fast_math_match_libm_and_interpreter(dtype, monkeypatch, rng):
    x = (rng.standard_normal((64, 33)) * 3).astype(dtype)
    y = (rng.standard_normal(33) * 2).astype(dtype)
    monkeypatch.delenv("GRADJIT_FAST_MATH", raising=False)
    opt = gj.grad(_loss, argnums=(0, 1)).graphs(x, y)[1]
    fast = compile_graph(opt)
    monkeypatch.setenv("GRADJIT_FAST_MATH", "0")
    slow = compile_graph(opt)
    assert "fm.tanh" in fast.source and "fm." not in slow.source
    oracle = interpret(opt, [x, y])
    tol = dict(rtol=1e-12, atol=1e-12) if dtype == F64 else dict(rtol=2e-5, atol=2e-5)
    for got, lib, want in zip(fast([x, y]), slow([x, y]), oracle):
        assert got.dtype == want.dtype
        np.testing.assert_allclose(got, lib, **tol)
        np.testing.assert_allclose(got, want, **tol)


def test_public_api_gradients_match_the_interpreter(monkeypatch, rng):
    """gj.grad and tensor .backward() (compiled, fast math on by default) against the
    NumPy interpreter (GRADJIT_EXECUTOR=numpy)."""
    x, y = rng.standard_normal((8, 5)), rng.standard_normal(5)

    def both():
        g = gj.grad(_loss, argnums=(0, 1))(x, y)
        tx, ty = gj.tensor(x, requires_grad=True), gj.tensor(y, requires_grad=True)
        _loss(tx, ty).backward()
        return list(g) + [np.asarray(tx.grad), np.asarray(ty.grad)]

    monkeypatch.delenv("GRADJIT_FAST_MATH", raising=False)
    got = both()
    monkeypatch.setenv("GRADJIT_EXECUTOR", "numpy")
    want = both()
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
