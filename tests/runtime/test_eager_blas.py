"""Eager tensor-mode matmuls (runtime/eager_blas.py): large float products run on the
compiled code's BLAS, everything else on NumPy, with NumPy's results either way."""
import numpy as np
import pytest

import gradjit as gj
from gradjit.lowering import blas_cpu
from gradjit.runtime import eager_blas


@pytest.fixture
def routed(monkeypatch):
    """Names of the blas_cpu helpers the eager matmul called."""
    calls = []
    for name in ("mm", "smm"):
        real = getattr(blas_cpu, name)
        monkeypatch.setattr(blas_cpu, name,
                            lambda a, b, _n=name, _f=real: (calls.append(_n), _f(a, b))[1])
    return calls


@pytest.mark.parametrize("m, k, n, helper", [(64, 32, 40, "mm"), (4096, 16, 1, "mm"),
                                             (1, 64, 1024, "mm")])
def test_large_float_products_use_the_compiled_blas(m, k, n, helper, routed, rng):
    for dt in (np.float64, np.float32):
        a = rng.normal(size=(m, k)).astype(dt)
        b = rng.normal(size=(k, n)).astype(dt)
        r = gj.tensor(a) @ gj.tensor(b)
        assert r.dtype == dt and r.shape == (m, n)
        # (gemm sums in another order than NumPy's gemv: an absolute bound too)
        np.testing.assert_allclose(r.data, a @ b, rtol=1e-4 if dt == np.float32 else 1e-12,
                                   atol=1e-4 if dt == np.float32 else 1e-12)
    assert routed == [helper, helper]


def test_other_products_stay_on_numpy(routed, rng):
    big = rng.normal(size=(64, 64))
    ro = big.copy()
    ro.flags.writeable = False
    cases = [(rng.normal(size=(3, 4)), rng.normal(size=(4, 5))),        # small
             (big[:, ::2], rng.normal(size=(32, 64))),                   # strided
             (ro, big),                                                  # read-only
             (np.arange(64 * 64).reshape(64, 64), big.astype(np.int64))]  # integers
    for a, b in cases:
        r = gj.from_numpy(a) @ gj.from_numpy(b)   # shares the arrays (strides, flags)
        np.testing.assert_allclose(r.data, np.matmul(a, b), rtol=1e-12)
        assert r.dtype == np.matmul(a, b).dtype
    assert routed == []


def test_transposed_operand_and_gradient(rng):
    x = rng.normal(size=(256, 128))
    w = gj.tensor(rng.normal(size=(256, 8)), requires_grad=True)
    out = gj.tensor(x).T @ w                     # an F-ordered operand
    np.testing.assert_allclose(out.data, x.T @ w.data, rtol=1e-12)
    out.sum().backward()
    np.testing.assert_allclose(w.grad.data, x @ np.ones((128, 8)), rtol=1e-12)
    assert eager_blas.LARGE <= 256 * 128 * 8
