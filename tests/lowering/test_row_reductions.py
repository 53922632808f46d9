"""Row reductions (a sum, max or min along the innermost loop of a fused loop, rows of
ROW_BUFFER_MIN elements or more) are stored a row at a time and reduced after the row
(lowering/codegen_cpu.py): same values as NumPy, NaN and infinities included, and the
same gradients as finite differences."""
import numpy as np
import pytest

import gradjit as gj
from gradjit.lowering.codegen_cpu import ROW_BUFFER_MIN
from tests.fd import numerical_grad

N = ROW_BUFFER_MIN + 45     # (a row that is not a multiple of the 16 lanes)


def _specials(x):
    x = x.copy()
    x[1, 3] = np.nan
    x[2, :] = -np.inf
    x[3, 7] = np.inf
    return x


@pytest.mark.parametrize("dt", [np.float64, np.float32])
@pytest.mark.parametrize("keep", [False, True])
def test_row_sum_max_min_match_numpy(dt, keep, rng):
    x = _specials(rng.standard_normal((6, N)).astype(dt))

    def f(x):
        y = np.exp(x * 0.5)      # an elementwise op fused in the same loop
        return y.sum(axis=1, keepdims=keep), y.max(axis=1, keepdims=keep), y.min(axis=-1, keepdims=keep)
    got = gj.jit(f)(x)
    with np.errstate(invalid="ignore", over="ignore"):
        want = f(x)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-5 if dt == np.float32 else 1e-12)


def test_reduction_over_inner_dims_of_a_3d_space(rng):
    x = rng.standard_normal((3, 4, N))
    f = gj.jit(lambda x: (np.sin(x).sum(axis=(1, 2)), np.cos(x).max(axis=2), (x * x).sum(axis=-1)))
    got = f(x)
    want = (np.sin(x).sum(axis=(1, 2)), np.cos(x).max(axis=2), (x * x).sum(axis=-1))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)


def _softmax_loss(z, w):
    m = z.max(axis=1, keepdims=True)
    e = np.exp(z - m)
    p = e / e.sum(axis=1, keepdims=True)
    return (p * w).sum()


def test_row_softmax_gradient_matches_finite_differences(rng):
    z, w = rng.standard_normal((3, N)), rng.standard_normal((3, N))
    g = gj.grad(_softmax_loss)(z, w)
    np.testing.assert_allclose(g, numerical_grad(_softmax_loss, [z, w], 0), rtol=1e-6, atol=1e-8)
    t = gj.from_numpy(z).requires_grad_()
    (t.softmax(1) * gj.from_numpy(w)).sum().backward()
    np.testing.assert_allclose(t.grad, g, rtol=1e-10, atol=1e-12)
