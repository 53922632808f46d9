"""Scalar constants of generated code (lowering/consts.py) hold their values exactly.

- A Python int out of the operand dtype's range was emitted in that dtype and wrapped
  (``uint8(-1)`` is 255): compiled ``u8 > -1`` was all False, ``np.clip(u8, -3, 3)`` all 3,
  ``i32 > 2**40`` all True, while the interpreter (NumPy) compares and clips by value.
- Integers beyond 2**53 were stored as float64 and rounded (``u64 * 6364136223846793005``).
- ``np.where(u8 > 1, u8, -1)`` raised OverflowError; NumPy casts the scalar (255).
Each case runs on the interpreter and on compiled code (``executor``) against NumPy 2.
"""
from __future__ import annotations

import numpy as np
import pytest

import gradjit as gj

U8 = np.array([1, 2, 3], np.uint8)
I8 = np.array([1, -2, 100], np.int8)
I32 = np.array([1, -2, 3], np.int32)
I64 = np.array([1, -2, 3], np.int64)
U64 = np.array([1, 2, 2**64 - 1], np.uint64)

CASES = [
    ("u8 > -1", lambda a: a > -1, U8), ("u8 <= -1", lambda a: a <= -1, U8),
    ("-1 < u8", lambda a: -1 < a, U8), ("u8 == -1", lambda a: a == -1, U8),
    ("u8 != 256", lambda a: a != 256, U8), ("i8 > 300", lambda a: a > 300, I8),
    ("i8 >= -129", lambda a: a >= -129, I8), ("i8 == 1000", lambda a: a == 1000, I8 * 0 - 24),
    ("i32 > 2**40", lambda a: a > 2**40, I32), ("i64 > 2**70", lambda a: a > 2**70, I64),
    ("i64 < -2**70", lambda a: a < -2**70, I64), ("i64 >= 2**63", lambda a: a >= 2**63, I64),
    ("u64 > -1", lambda a: a > -1, U64),
    ("i64 == 2**62+1", lambda a: a * 0 + 2**62 == 2**62 + 1, I64),
    ("clip u8", lambda a: np.clip(a, -3, 3), U8), ("clip u8 wide", lambda a: np.clip(a, -3, 300), U8),
    ("clip u8 lo", lambda a: np.clip(a, -1, None), U8), ("clip u8 hi", lambda a: np.clip(a, None, 300), U8),
    ("clip i32", lambda a: np.clip(a, -2**40, 2**40), I32),
    ("clip i64", lambda a: np.clip(a, -2**70, 2**70), I64),
    ("clip u8 float", lambda a: np.clip(a, -3, 2.5), U8),
    ("clip u8 none", lambda a: np.clip(a, -1, 255), U8), ("clip u8 crossed", lambda a: np.clip(a, 5, 2), U8),
    ("lcg u64", lambda a: a * 6364136223846793005 + 1442695040888963407, U64),
    ("i64 + big", lambda a: a + (2**62 + 1), I64), ("big - i64", lambda a: -(2**62 + 1) - a, I64),
    ("where u8 -1", lambda a: np.where(a > 1, a, -1), U8),
    ("where u8 300", lambda a: np.where(a > 1, 300, a), U8),
    ("sum of mask", lambda a: (a > -1).sum(), U8),
]


@pytest.mark.parametrize("name, f, x", CASES, ids=[c[0] for c in CASES])
def test_scalar_constants_match_numpy(executor, name, f, x):
    with np.errstate(over="ignore"):
        want = np.asarray(f(x))
        got = np.asarray(gj.jit(f)(x))
    assert got.dtype == want.dtype and np.array_equal(got, want), (got, want)


def test_gradient_through_an_out_of_range_mask(executor):
    g = gj.grad(lambda w, k: (w * (k > -1)).sum())(np.ones(3), U8)
    np.testing.assert_array_equal(g, np.ones(3))


@pytest.mark.parametrize("f", [lambda a: a + 300, lambda a: a * -1, lambda a: a % 300,
                               lambda a: a // 300, lambda a: a ** 300, lambda a: np.maximum(a, -1),
                               lambda a: a & -1, lambda a: 300 - a],
                         ids=["add", "mul", "remainder", "floor_divide", "pow", "maximum", "and", "rsub"])
def test_out_of_range_arithmetic_raises_as_numpy(f):
    with pytest.raises(OverflowError, match="out of bounds for uint8"):
        f(U8)
    with pytest.raises(OverflowError, match="out of bounds for uint8"):
        gj.jit(f)(U8)


@pytest.mark.parametrize("lo, hi", [(300, None), (None, -1), (-5, -1)])
def test_clip_bound_out_of_range_raises_as_numpy(lo, hi):
    for f in (lambda a: np.clip(a, lo, hi), gj.jit(lambda a: np.clip(a, lo, hi))):
        with pytest.raises(OverflowError, match="out of bounds for uint8"):
            f(U8)


def test_tensor_clamp_far_bounds(executor):
    x = gj.tensor(I64)
    np.testing.assert_array_equal(np.asarray(x.clamp(-2**70, 2**70)), I64)
    got = gj.jit(lambda a: np.clip(a, -2**70, 2))(I64)
    np.testing.assert_array_equal(np.asarray(got), np.clip(I64, -2**70, 2))


def test_constant_types_and_slots():
    from gradjit.lowering.consts import const_slots, const_type
    assert const_type(-1, np.uint8) == np.int64 and const_type(3, np.uint8) == np.uint8
    assert const_type(2**63, np.int64) == np.uint64 and const_type(2**70, np.int32) == np.float64
    assert const_type(0.5, np.float32) == np.float32 and const_type(True, np.uint8) == np.uint8
    v = 6364136223846793005
    hi, lo = const_slots(v, np.dtype(np.uint64))
    assert int(hi) * 2**32 + int(lo) == v and const_slots(3, np.dtype(np.int64)) == [3.0]
