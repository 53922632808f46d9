"""Rank-1 updates (lowering/codegen_cpu_outer.py): an outer product, alone or added to an
accumulator, calls the cached helpers ``bl.outer`` / ``bl.ger`` instead of a fused loop.

Counters, not clocks: which lines the generated module has. The helpers agree with NumPy
for every orientation of their operands; gradients with the helpers equal, bit for bit,
those of the loops, and finite differences.
"""
import numba
import numpy as np
import pytest

import gradjit as gj
from gradjit.lowering import codegen_cpu
from gradjit.lowering.blas_cpu import ger, outer
from tests.fd import numerical_grad
from tests.lowering.test_roll import rnn_args_loss as _rnn
from tests.lowering.test_view_fold import switched


@numba.njit
def _outer(x, y):   # the helpers have no Python entry: generated code calls them
    return outer(x, y)


@numba.njit
def _ger(x, y, acc):
    return ger(x, y, acc)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("m, n", [(5, 4), (1, 4), (5, 1), (1, 1), (0, 3)])
def test_helpers_match_numpy_for_rows_of_every_layout(m, n, dtype, rng):
    col = rng.normal(size=(m, 1)).astype(dtype)
    row = rng.normal(size=(1, n)).astype(dtype)
    acc = rng.normal(size=(m, n)).astype(dtype)
    wide = rng.normal(size=(3, 2, 2 * n + 1)).astype(dtype)
    strided = wide[1, :1, 1::2][:, :n]   # a (1, n) row with a stride of 2
    for x in (col.T.copy(), col.T):      # a C row, a column's .T (F)
        for y in (row, strided, row.T.copy().T):
            got = _outer(x, y)
            assert got.dtype == dtype and got.shape == (m, n) and got.flags.c_contiguous
            np.testing.assert_array_equal(got, col * y)
            np.testing.assert_array_equal(_ger(x, y, acc), acc + col * y)


def test_a_column_operand_is_passed_as_its_transpose(rng):
    a, b, c = rng.normal(size=(5, 1)), rng.normal(size=(1, 4)), rng.normal(size=(5, 4))
    src = gj.jit(lambda a, b, c: c + a @ b).graphs(a, b, c)[2]
    assert "= bl.ger(v0.T, v1, v2)" in src
    np.testing.assert_array_equal(gj.jit(lambda a, b, c: c + a @ b)(a, b, c), c + a * b)
    # (4, 1) @ (1, 5) of views of a row and a column: they fold to b itself and a's .T
    src = gj.jit(lambda a, b: b.T @ a.T).graphs(a, b)[2]
    assert "= bl.outer(v1, v0.T)" in src, src
    np.testing.assert_array_equal(gj.jit(lambda a, b: b.T @ a.T)(a, b), b.T * a.T)


def _both(f, args, argnums, monkeypatch):
    return switched("RANK_ONE", f, args, argnums, monkeypatch)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("T", [3, 40], ids=["unrolled", "rolled"])
def test_rnn_weight_gradients_call_the_helpers(T, dtype, rng, monkeypatch):
    args = [(rng.normal(size=s) / 3).astype(dtype)
            for s in [(3, 6), (6, 6), (6,), (1, 6)] + [(1, 3)] * T]
    (src, got), (src_off, want) = _both(_rnn, args, (0, 1, 2), monkeypatch)
    # the first term of each weight gradient is an outer product, every later one is added
    assert src.count("= bl.outer(") == 2 and "= bl.ger(" in src, src
    assert "bl.outer(" not in src_off and "bl.ger(" not in src_off
    for a, b in zip(got, want):
        assert a.dtype == dtype
        np.testing.assert_array_equal(a, b)
    if dtype == np.float64:
        for i in (0, 1, 2):
            np.testing.assert_allclose(got[i], numerical_grad(_rnn, args, i),
                                       rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("case", ["scaled", "subtracted", "mixed dtypes", "3-d"])
def test_other_loops_stay_loops(case, rng, monkeypatch):
    a, b, c = rng.normal(size=(5, 1)), rng.normal(size=(1, 4)), rng.normal(size=(5, 4))
    f = {"scaled": lambda a, b, c: c + 2.0 * (a @ b),
         "subtracted": lambda a, b, c: c - a @ b,
         "mixed dtypes": lambda a, b, c: c.astype(np.float32) + a @ b,
         "3-d": lambda a, b, c: c[None] + (a @ b)[None]}[case]
    (src, got), (src_off, want) = _both(f, [a, b, c], None, monkeypatch)
    assert "bl.ger(" not in src
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_allclose(got[0], f(a, b, c), rtol=1e-6)


def test_a_loop_large_enough_to_run_in_parallel_stays_a_loop(rng, monkeypatch):
    monkeypatch.setattr(codegen_cpu, "PARALLEL_MIN", 16)
    a, b, c = rng.normal(size=(5, 1)), rng.normal(size=(1, 4)), rng.normal(size=(5, 4))
    (src, got), _ = _both(lambda a, b, c: c + a @ b, [a, b, c], None, monkeypatch)
    assert "bl.ger(" not in src and "prange" in src
    np.testing.assert_allclose(got[0], c + a @ b, rtol=1e-14)
