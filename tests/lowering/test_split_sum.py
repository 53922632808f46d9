"""Full sums inside large fused loops are stored and summed after the loop (al.total), so
the loop still vectorises; results equal NumPy's, for every lane/tail split."""
import re

import numpy as np
import pytest

import gradjit as gj
from gradjit.lowering import alloc_cpu, codegen_cpu


@pytest.mark.parametrize("n", [0, 1, 15, 16, 17, 100, 1000])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_total_is_the_sum(n, dtype, rng):
    a = rng.normal(size=n + 5).astype(dtype)   # only the first n count
    assert alloc_cpu.total(a, n) == pytest.approx(float(a[:n].astype(np.float64).sum()), rel=1e-12,
                                                  abs=1e-12)


def _loss(x, w):
    return (np.tanh(x * w) ** 2).sum() + np.exp(-x * x).sum()


@pytest.mark.parametrize("shape, dtype", [((192, 192), np.float32),   # blocks of 21 rows
                                          ((40000,), np.float64),       # a partial last block
                                          ((3, 100, 120), np.float64),  # blocks along dim 1
                                          ((2, 40000), np.float64),     # along the last dim
                                          ((codegen_cpu.PARALLEL_MIN,), np.float64),
                                          ((2, codegen_cpu.PARALLEL_MIN // 2), np.float64),
                                          ((1, codegen_cpu.PARALLEL_MIN), np.float64)])
def test_value_and_grad_of_a_large_loop(shape, dtype, rng):
    x = rng.normal(size=shape).astype(dtype)
    w = rng.normal(size=shape[-1:]).astype(dtype)
    vg = gj.value_and_grad(_loss, argnums=(0, 1))
    src = vg.graphs(x, w)[2]
    assert src.count("= al.total(") == 2
    assert not re.search(r"\bm(in|ax)\(", src)   # overloads Numba would compile per process
    for name, tup in re.findall(r"^    (shp\d+) = (\(.*\))$", src, re.M):   # hoist_shapes
        src = re.sub(rf"\b{name}\b", tup, src)
    # no block buffer holds more than SPLIT_BLOCK elements, whatever the shape
    bufs = re.findall(r"s\d+ = al.empty\(\(((?:np\.int64\(\d+\),? ?)+)\)", src)
    assert len(bufs) == 2
    for buf in bufs:
        sizes = [int(k) for k in re.findall(r"np\.int64\((\d+)\)", buf)]
        assert sizes and np.prod(sizes) <= codegen_cpu.SPLIT_BLOCK
    value, (gx, gw) = vg(x, w)
    t = np.tanh(x.astype(np.float64) * w)
    tol = 1e-10 if dtype == np.float64 else 1e-4
    ref = (t ** 2).sum() + np.exp(-x.astype(np.float64) ** 2).sum()
    assert float(value) == pytest.approx(ref, rel=tol)
    assert value.dtype == dtype
    d = 2 * t * (1 - t * t)
    np.testing.assert_allclose(gx, d * w - 2 * x * np.exp(-x.astype(np.float64) ** 2), rtol=tol * 10,
                               atol=tol)
    np.testing.assert_allclose(gw, (d * x).reshape(-1, shape[-1]).sum(0), rtol=tol * 10, atol=tol)


def _plain(x, w):
    return ((x * w) ** 2).sum() + (x * x + 1.0).sum()


def test_small_loops_keep_their_running_sum(rng):
    # no vector math in the loop: a running sum does not keep anything from vectorising
    x, w = rng.normal(size=(10, 20)), rng.normal(size=20)
    src = gj.value_and_grad(_plain).graphs(x, w)[2]
    assert "al.total(" not in src and re.search(r"\br\d+ \+= ", src)
    value, gx = gj.value_and_grad(_plain)(x, w)
    assert float(value) == pytest.approx(((x * w) ** 2).sum() + (x * x + 1.0).sum(), rel=1e-13)
    np.testing.assert_allclose(gx, 2 * x * w * w + 2 * x, rtol=1e-13)


@pytest.mark.parametrize("n", [codegen_cpu.VEC_SUM_MIN - 1, codegen_cpu.VEC_SUM_MIN, 200])
def test_small_loops_with_vector_math_store_then_sum(n, rng):
    # a running sum would keep the loop's tanh/exp scalar: from VEC_SUM_MIN elements on, the
    # summands are stored and al.total adds them after the loop
    x = rng.normal(size=n)
    w = rng.normal(size=n)
    src = gj.value_and_grad(_loss).graphs(x, w)[2]
    split = n >= codegen_cpu.VEC_SUM_MIN
    assert ("al.total(" in src) == split
    assert "for b0" not in src   # one block: no block loop
    value, gx = gj.value_and_grad(_loss)(x, w)
    t = np.tanh(x * w)
    assert float(value) == pytest.approx((t ** 2).sum() + np.exp(-x * x).sum(), rel=1e-13)
    np.testing.assert_allclose(gx, 2 * t * (1 - t * t) * w - 2 * x * np.exp(-x * x), rtol=1e-12,
                               atol=1e-14)


@pytest.mark.parametrize("shape", [(1, 64), (3, 40), (2, 1, 50)])
def test_one_block_of_a_small_space_has_no_block_loop(shape, rng):
    # a space that fits in one block is stored whole, then summed: no one-trip block loop
    x = rng.normal(size=shape)
    w = rng.normal(size=shape[-1:])
    src = gj.value_and_grad(_loss, argnums=(0, 1)).graphs(x, w)[2]
    assert src.count("= al.total(") == 2 and "for b0" not in src and "lo0" not in src
    value, (gx, gw) = gj.value_and_grad(_loss, argnums=(0, 1))(x, w)
    t = np.tanh(x * w)
    assert float(value) == pytest.approx((t ** 2).sum() + np.exp(-x * x).sum(), rel=1e-13)
    d = 2 * t * (1 - t * t)
    np.testing.assert_allclose(gx, d * w - 2 * x * np.exp(-x * x), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(gw, (d * x).reshape(-1, shape[-1]).sum(0), rtol=1e-12, atol=1e-14)
