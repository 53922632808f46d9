"""Scalar special functions for generated CPU code (``numba.njit``, no Python objects).

Contract
- Generated modules that need one of these import this module as ``sp`` and
  call ``sp.<name>(...)`` inside their fused loops; every function is a pure
  scalar function of floats, compiled with ``cache=True`` and inlined by LLVM.
- Semantics follow the NumPy/SciPy references of ``tracer/ops_math.py`` (which
  the interpreter runs), so compiled and interpreted results agree to
  rounding: ``erfinv`` (±1 -> ±inf, |x| > 1 -> nan), ``digamma`` (0 -> -inf
  (torch), negative integers -> nan), ``polygamma(n >= 1, x)``,
  ``remainder`` (sign of the divisor, as ``np.remainder``), ``logaddexp``,
  ``logaddexp2``, ``xlogy``, ``clamp`` and ``logit`` (with its eps bounds);
  ``int_power`` raises NumPy's ValueError at a negative exponent (Numba's integer
  power answers 0 or 1 there).
- Only ``math`` and arithmetic: Numba lacks ``math.erfinv`` / ``digamma``.
"""
from __future__ import annotations

import math

import numba
import numpy as np

_PI = math.pi
_LN2 = math.log(2.0)
# Bernoulli numbers B_2k, k = 1..8 (asymptotic series of digamma/polygamma)
_B2K = (1.0 / 6.0, -1.0 / 30.0, 1.0 / 42.0, -1.0 / 30.0, 5.0 / 66.0, -691.0 / 2730.0,
        7.0 / 6.0, -3617.0 / 510.0)

jit = numba.njit(cache=True, error_model="numpy")


@jit
def erfinv(x):
    if x != x or x < -1.0 or x > 1.0:
        return math.nan
    if x == 1.0:
        return math.inf
    if x == -1.0:
        return -math.inf
    # Giles' single-precision approximation, then Newton steps on erf(y) = x.
    w = -math.log((1.0 - x) * (1.0 + x))
    if w < 5.0:
        w -= 2.5
        p = 2.81022636e-08
        for c in (3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087,
                  -0.00125372503, -0.00417768164, 0.246640727, 1.50140941):
            p = c + p * w
    else:
        w = math.sqrt(w) - 3.0
        p = -0.000200214257
        for c in (0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773,
                  -0.0076224613, 0.00943887047, 1.00167406, 2.83297682):
            p = c + p * w
    y = p * x
    # Newton on erf(y) = x; near |x| = 1 on erfc(|y|) = 1 - |x| (no cancellation)
    a, q = abs(x), 1.0 - abs(x)
    s = 1.0 if x >= 0.0 else -1.0
    y = abs(y)
    for _ in range(6):
        d = 2.0 / math.sqrt(_PI) * math.exp(-y * y)
        if d == 0.0:
            break
        if a > 0.5:  # Newton on log(erfc(y)) = log(q): the tail is exponential
            c = math.erfc(y)
            step = (math.log(c) - math.log(q)) * c / d
        else:
            step = -(math.erf(y) - a) / d
        y += step
        if abs(step) <= 1e-16 * abs(y):
            break
    return s * y


@jit
def digamma(x):
    if x != x:
        return x
    if x <= 0.0 and x == math.floor(x):
        return -math.inf if x == 0.0 else math.nan
    acc = 0.0
    if x < 0.0:  # reflection: psi(x) = psi(1 - x) - pi / tan(pi x)
        acc = -_PI / math.tan(_PI * x)
        x = 1.0 - x
    while x < 10.0:
        acc -= 1.0 / x
        x += 1.0
    inv2 = 1.0 / (x * x)
    s, p = 0.0, 1.0
    for k in range(len(_B2K)):
        p *= inv2
        s += _B2K[k] / (2.0 * (k + 1)) * p
    return acc + math.log(x) - 0.5 / x - s


@jit
def polygamma(n, x):
    """psi^(n)(x) for n >= 1: recurrence up to x >= n + 15, then the asymptotic series."""
    if x != x:
        return x
    if x <= 0.0 and x == math.floor(x):
        return math.nan
    sign = 1.0 if n % 2 == 1 else -1.0
    fact = math.gamma(n + 1.0)
    acc = 0.0
    while x < n + 15.0:
        acc += 1.0 / x ** (n + 1)
        x += 1.0
    # (n-1)!/x^n + n!/(2 x^(n+1)) + sum_k B_2k (2k+n-1)! / ((2k)! x^(2k+n))
    tail = math.gamma(n * 1.0) / x ** n + fact / (2.0 * x ** (n + 1))
    for k in range(1, len(_B2K) + 1):
        tail += (_B2K[k - 1] * math.exp(math.lgamma(2.0 * k + n) - math.lgamma(2.0 * k + 1.0))
                 / x ** (2 * k + n))
    return sign * (fact * acc + tail)


@jit
def int_power(a, b):
    if b < 0:
        raise ValueError("Integers to negative integer powers are not allowed.")
    return a ** b


@jit
def remainder(a, b):
    m = np.fmod(a, b)
    if m != 0.0:
        if (b < 0.0) != (m < 0.0):
            m += b
    else:
        m = math.copysign(0.0, b) * 1.0 if b == b else m
    return m


@jit
def logaddexp(a, b):
    if a == b:
        return a + _LN2
    d = a - b
    if d > 0.0:
        return a + math.log1p(math.exp(-d))
    if d <= 0.0:
        return b + math.log1p(math.exp(d))
    return d  # nan


@jit
def logaddexp2(a, b):
    if a == b:
        return a + 1.0
    d = a - b
    if d > 0.0:
        return a + math.log1p(2.0 ** (-d)) / _LN2
    if d <= 0.0:
        return b + math.log1p(2.0 ** d) / _LN2
    return d


@jit
def xlogy(x, y):
    if y != y:
        return y
    if x == 0.0:
        return 0.0 * x
    return x * math.log(y)


@jit
def clamp(x, lo, hi):
    y = lo if x < lo else x
    return hi if y > hi else y


@jit
def logit(x, lo, hi):
    z = clamp(x, lo, hi)
    return math.log(z / (1.0 - z))
