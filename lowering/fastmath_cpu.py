"""Vectorisable transcendental functions for generated CPU code (``fm.<name>``).

Contract
- Scalar ``numba.njit`` functions a fused loop of a generated module calls
  instead of ``math.<name>``: ``exp expm1 log log1p tanh sin cos`` (float64)
  and the same names with ``_f32`` (float32 in, float32 out; exp, log, tanh
  computed in float32 with fewer terms: twice the SIMD lanes).
- Accuracy: within 2 ulp of the exact result (measured: < 1.5 ulp) on every
  input, with NumPy's special values: NaN -> NaN, exp(-inf) = 0, expm1(-inf)
  = -1, log(0) = -inf, log(x < 0) = NaN, log1p(-1) = -inf, tanh(+-inf) =
  +-1, sin/cos(+-inf) = NaN, signed zeros kept, subnormals in and out,
  overflow and underflow at the same thresholds. sin/cos reduce every finite
  argument with 2/pi to 159 bits; only arguments within ~2**-50 of a nonzero
  multiple of pi/2 beyond 2**50 can exceed 2 ulp (NumPy's own do too).
- Why: Numba lowers ``math.exp`` & co. to libm calls, and a call LLVM cannot
  vectorise (pip's llvmlite has no SVML) keeps the whole fused loop scalar.
  These bodies are straight-line arithmetic (Cody-Waite or table-driven
  reduction, minimax polynomial, exponent bits through the LLVM intrinsics
  below), special cases are selects on values already computed, never
  branches or calls, and every function is ``forceinline`` (LLVM
  ``alwaysinline``), so the caller's loop vectorises: 4-20x faster than libm.
- Polynomials are minimax for absolute error, fitted by a Remez exchange in
  80-bit long double, each several bits below half an ulp. No fast-math
  flags: ``(t + MAGIC) - MAGIC`` rounding and the error-free transformations
  need IEEE evaluation order; multiply-adds are ``llvm.fmuladd``.
"""
from __future__ import annotations

import math

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

jit = numba.njit(cache=True, error_model="numpy", forceinline=True)

F = np.float32
INF, NAN = np.inf, np.nan
_0, _1, _2, _H = F(0.0), F(1.0), F(2.0), F(0.5)    # exact in float32 and float64


# -- bit-level helpers (LLVM IR): integer ops on the float's own width vectorise -----------------
def _layout(t):
    """(int type, mantissa bits, exponent bias, bits of sqrt(1/2)) of a float type."""
    if t.bitwidth == 64:
        return ir.IntType(64), 52, 1023, 0x3FE6A09E667F3BCD
    return ir.IntType(32), 23, 127, 0x3F3504F3


def _ternary(name, llvm_name):
    def impl(typingctx, a, b, c):
        if not (isinstance(a, types.Float) and a == b == c):
            return None

        def codegen(context, builder, sig, args):
            t = args[0].type
            fn = builder.module.declare_intrinsic(llvm_name, [t], ir.FunctionType(t, [t] * 3))
            return builder.call(fn, args)
        return a(a, b, c), codegen
    impl.__name__ = impl.__qualname__ = name
    return intrinsic(impl)


_fma = _ternary("_fma", "llvm.fmuladd")   # a*b + c, fused where the CPU has FMA
_fma1 = _ternary("_fma1", "llvm.fma")     # a*b + c rounded once: exact products (sin/cos)
# (where the CPU lacks FMA, llvm.fma is a libm call: still correct, but the loop stays scalar)


def _unary(f64_only=False, returns_int=False):
    """An intrinsic of one float from ``build(builder, x, int type, mantissa bits,
    bias, bits of sqrt(1/2))``."""
    def deco(build):
        def impl(typingctx, x):
            if not isinstance(x, types.Float) or (f64_only and x != types.float64):
                return None

            def codegen(context, builder, sig, args):
                return build(builder, args[0], *_layout(sig.args[0]))
            return (types.int64 if returns_int else x)(x), codegen
        impl.__name__ = impl.__qualname__ = build.__name__
        return intrinsic(impl)
    return deco


@_unary()
def _pow2(b, t, ity, mant, bias, off):
    """2**k given t = k + MAGIC (k integral, |k| < 2**22): the low bits of t hold k
    in two's complement, so (bits(t) + bias) << mantissa is the float 2**k (the
    MAGIC bits shift out). No float->int conversion, which AVX2 cannot vectorise."""
    return b.bitcast(b.shl(b.add(b.bitcast(t, ity), ity(bias)), ity(mant)), t.type)


@_unary()
def _mant(b, x, ity, mant, bias, off):
    """m with x = m * 2**e, m in [sqrt(1/2), sqrt(2)), for a positive normal x."""
    j = b.sub(b.bitcast(x, ity), ity(off))
    return b.bitcast(b.add(b.and_(j, ity((1 << mant) - 1)), ity(off)), x.type)


@_unary()
def _expo(b, x, ity, mant, bias, off):
    """e (as a float) with x = m * 2**e, m in [sqrt(1/2), sqrt(2)), x positive normal.
    float64 converts int64 -> double with the MAGIC bits (AVX2 has no cvtqq2pd)."""
    e = b.ashr(b.sub(b.bitcast(x, ity), ity(off)), ity(mant))
    if mant == 23:
        return b.sitofp(e, x.type)
    return b.fsub(b.bitcast(b.add(e, ity(0x4338000000000000)), x.type),
                  ir.Constant(x.type, 6755399441055744.0))


@_unary(f64_only=True, returns_int=True)
def _ebits(b, x, ity, mant, bias, off):
    """The biased exponent field of a float64, as int64."""
    return b.and_(b.lshr(b.bitcast(x, ity), ity(52)), ity(0x7FF))


@_unary(f64_only=True)
def _mant53(b, x, ity, mant, bias, off):
    """The significand of a normal float64 as an integer-valued float in [2**52, 2**53)."""
    i = b.and_(b.bitcast(x, ity), ity((1 << 52) - 1))
    return b.bitcast(b.or_(i, ity(1075 << 52)), x.type)


# -- float64 --------------------------------------------------------------------------------------
MAGIC = 6755399441055744.0           # 1.5 * 2**52: x + MAGIC - MAGIC rounds x to an integer
LOG2E = 1.4426950408889634
LN2_HI = 0.6931471806019545          # ln 2 rounded to 32 bits: k * LN2_HI is exact
LN2_LO = -4.2009150715352495e-11     # ln 2 - LN2_HI
# expm1(r) = r + r**2 * Q(r), |r| <= ln2/2: minimax error 1.0e-16 on Q (<= 0.1 ulp of exp)
Q = (0.5000000000000001, 0.16666666666666674, 0.0416666666666241, 0.008333333333322195,
     0.0013888888917227438, 0.00019841269886622086, 2.4801521274623054e-05,
     2.7557242305324493e-06, 2.762009858929677e-07, 2.5110061038090864e-08)
# log(1+f) = f - s*(f - z*T(z)), s = f/(2+f), z = s**2 <= 0.0295: error 3.1e-16 on T
T = (0.666666666666667, 0.39999999999898445, 0.28571428626398215, 0.22222211073003975,
     0.18182893207448955, 0.15331597314288675, 0.14617868544545)


@jit
def _reduce(x):
    """(k, r_hi, r_lo): x = k*ln2 + r_hi + r_lo, |r| <= ln2/2, r_hi exact (Cody-Waite).
    r_lo is kept apart: where 2**k * r cancels against 2**k - 1 (expm1, k = 1) its
    rounding would be worth a whole ulp."""
    k = (x * LOG2E + MAGIC) - MAGIC
    return k, x - k * LN2_HI, -k * LN2_LO


@jit
def _expm1_tail(r):
    """expm1(r) - r for |r| <= ln2/2, Estrin's scheme (short dependency chains)."""
    r2 = r * r
    r4 = r2 * r2
    p01, p23 = _fma(Q[1], r, Q[0]), _fma(Q[3], r, Q[2])
    p45, p67, p89 = _fma(Q[5], r, Q[4]), _fma(Q[7], r, Q[6]), _fma(Q[9], r, Q[8])
    return r2 * _fma(_fma(p89, r4, _fma(p67, r2, p45)), r4, _fma(p23, r2, p01))


@jit
def _scale(p, k):
    """p * 2**k for |k| <= 1100, in two halves so 2**k itself need not be a normal
    float: the result rounds once, also when it is subnormal or overflows."""
    k1 = (k * 0.5 + MAGIC) - MAGIC
    return p * _pow2(k1 + MAGIC) * _pow2((k - k1) + MAGIC)


@jit
def exp(x):
    x = 710.0 if x > 710.0 else x            # inf -> inf, -inf -> 0 (NaN passes)
    x = -746.0 if x < -746.0 else x
    k, rh, rl = _reduce(x)
    hi = 1.0 + rh
    lo = (1.0 - hi) + rh                     # exact rounding error of 1 + rh
    return _scale(hi + (lo + (rl + _expm1_tail(rh + rl))), k)


@jit
def _expm1_mid(x):
    """expm1(x) = q + q_lo for |x| <= 58 ln2: (2**k - 1) + 2**k * r_hi first (exact
    when it cancels), then the small rest; q_lo is the rounding error of q."""
    k, rh, rl = _reduce(x)
    s = _pow2(k + MAGIC)
    h = _fma(s, rh, s - 1.0)
    t = rl + _expm1_tail(rh + rl)
    q = _fma(s, t, h)
    return q, _fma(s, t, h - q)              # h - q is exact (|s*t| << |h|)


@jit
def expm1(x):
    q, _ = _expm1_mid(40.0 if x > 40.0 else (-40.0 if x < -40.0 else x))  # < -38: -1
    e = exp(x)                               # beyond 40 the -1 is below the ulp; both are
    return x if x == 0.0 else (q if x <= 40.0 else e)   # computed (a select): keeps -0.0


@jit
def _tanh_q(q, ql):
    """(q + ql) / (q + ql + 2), with the rounding errors of q + 2 and of the division
    added back (error-free transformations): 2 ulp would be lost otherwise. Either
    float type (the constants are float32, exact in both)."""
    d = q + _2
    ed = (q - (d - _2)) if q < _2 else (_2 - (d - q))
    rd = _1 / d                              # one division, used twice
    t = q * rd
    rem = _fma(-t, d, q)                     # exact: t is within an ulp or two of q/d
    return t + (rem + ql - t * (ed + ql)) * rd


@jit
def tanh(x):
    a = abs(x)
    a = 20.0 if a > 20.0 else a              # tanh(20) rounds to 1 (NaN passes)
    q, ql = _expm1_mid(a + a)
    t = _tanh_q(q, ql)
    t = -t if x < 0.0 else t
    return x if a < 7.450580596923828e-09 else t   # |x| < 2**-27: tanh(x) rounds to x


@jit
def _log_pos(x):
    """log(x) for a positive finite x (subnormals scaled up by 2**52 first)."""
    sub = x < 2.2250738585072014e-308
    x = x * 4503599627370496.0 if sub else x
    e = _expo(x) - (52.0 if sub else 0.0)
    f = _mant(x) - 1.0
    s = f / (2.0 + f)
    z = s * s
    z2 = z * z
    t = _fma(_fma(_fma(T[6], z, T[5]), z2, _fma(T[4], z, T[3])), z2 * z,
             _fma(_fma(T[2], z, T[1]), z, T[0]))
    return _fma(e, LN2_HI, f - (s * (f - z * t) - e * LN2_LO))


@jit
def log(x):
    y = _log_pos(x)
    return y if (x > 0.0) & (x < INF) else (-INF if x == 0.0 else (x if x > 0.0 else NAN))


@jit
def log1p(x):
    u = 1.0 + x
    # log(u) plus the first-order correction for the rounding error of 1 + x
    y = _log_pos(u) + (x - (u - 1.0)) / u
    return x if x == 0.0 else (y if (u > 0.0) & (u < INF) else log(u))


# -- sin, cos: x * 2/pi mod 4 from a table, so every finite argument reduces exactly ------------
def _atan_inv(n, one):
    """atan(1/n) * one, alternating series in integers."""
    total, term, k, sign = 0, one // n, 1, 1
    while term:
        total, term, k, sign = total + sign * (term // k), term // (n * n), k + 2, -sign
    return total


def _two_over_pi_table(emin, emax, bits=1300):
    """For E in [emin, emax]: (2**E * 2/pi) mod 4 as three float64s t0 > t1 > t2
    (successive 53-bit pieces, 159 bits in all). pi from Machin's formula."""
    one = 1 << (bits + 32)
    pi = 16 * _atan_inv(5, one) - 4 * _atan_inv(239, one)
    tpi = (2 * one * one // pi) >> 32                 # floor(2/pi * 2**bits)
    mask = (4 << bits) - 1                            # (mod 4 << bits: a mask, not a division)
    out = ([0.0] * (emax - emin + 1), [0.0] * (emax - emin + 1), [0.0] * (emax - emin + 1))
    # (plain lists and locals: every process that loads generated code runs this, 1 ms)
    ldexp = math.ldexp
    for j, e in enumerate(range(emin, emax + 1)):
        f = ((tpi << e) if e >= 0 else (tpi >> -e)) & mask
        for piece in out:
            sh = f.bit_length() - 53
            if sh < 0:
                sh = 0
            top = f >> sh
            piece[j] = ldexp(top, sh - bits)
            f -= top << sh
    return tuple(np.array(piece, dtype=np.float64) for piece in out)


# Arguments |x| >= 2**-28 (biased exponent 995 ... 2047, inf/NaN included so that every
# lane's index is in bounds) index the table by exponent; smaller ones are their own sine.
# x = M * 2**E with an integer M < 2**53, and M * ((2**E * 2/pi) mod 4) = x * 2/pi
# (mod 4): products are exact (fma), so no cancellation is lost.
T0, T1, T2 = _two_over_pi_table(-80, 972)
PIO2_HI, PIO2_LO = 1.5707963267948966, 6.123233995736766e-17
B8 = 54043195528445952.0             # 1.5 * 2**55: (v + B8) - B8 rounds v to a multiple of 8
# sin r = r + r*z*S(z), cos r = 1 - z/2 + z*z*C(z), z = r*r <= (pi/4)**2: errors 1.3e-17, 5e-19
S = (-0.16666666666666666, 0.00833333333333095, -0.00019841269836759278,
     2.755731610276616e-06, -2.5051131864038344e-08, 1.5918129165430582e-10)
C = (0.041666666666666664, -0.0013888888888887398, 2.480158729876688e-05,
     -2.755731727217521e-07, 2.0876146333509287e-09, -1.1382635577653065e-11)


@jit
def _two_sum(a, b):
    s = a + b
    v = s - a
    return s, (a - (s - v)) + (b - v)


@jit
def _reduce_pio2(a):
    """(n, r_hi, r_lo) with a = (4j + n) * pi/2 + r, n in -2..2, |r| <= pi/4, for finite
    a >= 2**-28 (other lanes get garbage, selected away by the caller)."""
    e = _ebits(a)
    i = (e if e > 995 else 995) - 995        # in bounds for every lane (a two-sided clamp
    m = _mant53(a)                           # here stops LLVM from vectorising the gather)
    t0, t1 = T0[i], T1[i]
    ph = m * t0
    pl = _fma1(m, t0, -ph)
    qh = m * t1
    ql = _fma1(m, t1, -qh)
    s, e1 = _two_sum(ph - ((ph + B8) - B8), pl)         # ph mod 8 is exact; |pl| <= 2
    s, e2 = _two_sum(s, qh)
    k = (s + MAGIC) - MAGIC
    fh, fl = _two_sum(s - k, ((e1 + e2) + ql) + m * T2[i])
    rh = fh * PIO2_HI
    rl = _fma1(fh, PIO2_HI, -rh) + (fh * PIO2_LO + fl * PIO2_HI)
    return k - 4.0 * ((k * 0.25 + MAGIC) - MAGIC), rh, rl


@jit
def _sin_cos(a):
    """(n, sin r, cos r) for a = (4j + n) * pi/2 + r."""
    n, rh, rl = _reduce_pio2(a)
    z = rh * rh
    z2 = z * z
    ps = _fma(_fma(_fma(S[5], z, S[4]), z, S[3]), z2 * z, _fma(_fma(S[2], z, S[1]), z, S[0]))
    pc = _fma(_fma(_fma(C[5], z, C[4]), z, C[3]), z2 * z, _fma(_fma(C[2], z, C[1]), z, C[0]))
    hz = 0.5 * z
    w = 1.0 - hz                             # ((1 - w) - hz): the rounding error of w
    return (n, rh + _fma(rh * z, ps, rl * (1.0 - hz)),
            w + (((1.0 - w) - hz) + _fma(z2, pc, -rh * rl)))


@jit
def sin(x):
    a = abs(x)
    n, sn, cs = _sin_cos(a)
    y = cs if (n == 1.0) | (n == -1.0) else sn
    y = -y if (n == 2.0) | (n == -2.0) | (n == -1.0) else y
    y = (-y if x < 0.0 else y) if a < INF else NAN
    return x if a < 7.450580596923828e-09 else y   # |x| < 2**-27: sin(x) rounds to x


@jit
def cos(x):
    a = abs(x)
    n, sn, cs = _sin_cos(a)
    y = sn if (n == 1.0) | (n == -1.0) else cs
    y = -y if (n == 1.0) | (n == 2.0) | (n == -2.0) else y
    return 1.0 if a < 7.450580596923828e-09 else (y if a < INF else NAN)   # NaN: not tiny


# -- float32: the same algorithms, fewer terms, every constant float32 ---------------------------
MAGIC32 = F(12582912.0)               # 1.5 * 2**23
LOG2E32 = F(1.4426950408889634)
LN2_HI32 = F(0.693145751953125)       # 16 bits
LN2_LO32 = F(1.428606765330187e-06)
Q32 = tuple(map(F, (0.500000002696277, 0.1666657694267993, 0.0416663750436262,
                    0.00836318579016646, 0.001394113208683392)))           # error 6.2e-8
T32 = tuple(map(F, (0.6666668527170705, 0.3998871656988681, 0.29582150946307956)))  # 1.9e-7
INF32, NAN32 = F(np.inf), F(np.nan)


@jit
def _reduce_f32(x):
    k = (x * LOG2E32 + MAGIC32) - MAGIC32
    return k, x - k * LN2_HI32, -k * LN2_LO32


@jit
def _expm1_tail_f32(r):
    r2 = r * r
    return r2 * _fma(_fma(_fma(Q32[4], r, Q32[3]), r, Q32[2]), r2, _fma(Q32[1], r, Q32[0]))


@jit
def _scale_f32(p, k):
    k1 = (k * _H + MAGIC32) - MAGIC32
    return p * _pow2(k1 + MAGIC32) * _pow2((k - k1) + MAGIC32)


@jit
def exp_f32(x):
    x = F(89.0) if x > F(89.0) else x
    x = F(-104.0) if x < F(-104.0) else x
    k, rh, rl = _reduce_f32(x)
    hi = _1 + rh
    lo = (_1 - hi) + rh
    return _scale_f32(hi + (lo + (rl + _expm1_tail_f32(rh + rl))), k)


@jit
def _expm1_mid_f32(x):
    k, rh, rl = _reduce_f32(x)
    s = _pow2(k + MAGIC32)
    h = _fma(s, rh, s - _1)
    t = rl + _expm1_tail_f32(rh + rl)
    q = _fma(s, t, h)
    return q, _fma(s, t, h - q)


@jit
def tanh_f32(x):
    a = abs(x)
    a = F(10.0) if a > F(10.0) else a
    q, ql = _expm1_mid_f32(a + a)
    t = _tanh_q(q, ql)
    t = -t if x < _0 else t
    return x if a < F(0.000244140625) else t   # 2**-12


@jit
def _log_pos_f32(x):
    sub = x < F(1.1754943508222875e-38)
    x = x * F(8388608.0) if sub else x
    e = _expo(x) - (F(23.0) if sub else _0)
    f = _mant(x) - _1
    s = f / (_2 + f)
    z = s * s
    t = _fma(_fma(T32[2], z, T32[1]), z, T32[0])
    return _fma(e, LN2_HI32, f - (s * (f - z * t) - e * LN2_LO32))


@jit
def log_f32(x):
    y = _log_pos_f32(x)
    return y if (x > _0) & (x < INF32) else (-INF32 if x == _0 else (x if x > _0 else NAN32))


# Rarer in float32 code: computed in float64 and rounded (still vectorised, < 0.51 ulp).
@jit
def expm1_f32(x):
    return F(expm1(np.float64(x)))


@jit
def log1p_f32(x):
    return F(log1p(np.float64(x)))


@jit
def sin_f32(x):
    return F(sin(np.float64(x)))


@jit
def cos_f32(x):
    return F(cos(np.float64(x)))
