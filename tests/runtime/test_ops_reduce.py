"""The reduction family at its edges: zeros, ties, infinities, dtypes, errors.

Gradchecks of every reduction live in ``cases_reduce.py``; here is what they
cannot see: torch's conventions at non-differentiable points and special values.
"""
from __future__ import annotations

import numpy as np
import pytest

import gradjit as gj


def _grad(fn, x):
    t = gj.tensor(np.asarray(x, dtype=np.float64), requires_grad=True)
    fn(t).backward()
    g = gj.grad(fn)(np.asarray(x, dtype=np.float64))
    np.testing.assert_array_equal(np.asarray(t.grad), g)
    return g


def test_prod_gradient_with_zeros_is_the_product_of_the_others(interpreted):
    np.testing.assert_array_equal(_grad(lambda x: x.prod(), [2.0, 0.0, 3.0]), [0.0, 6.0, 0.0])
    np.testing.assert_array_equal(_grad(lambda x: x.prod(), [0.0, 0.0, 3.0]), [0.0, 0.0, 0.0])
    np.testing.assert_array_equal(_grad(lambda x: x.prod(1).sum(), [[2.0, 0.0], [3.0, 4.0]]),
                                  [[0.0, 2.0], [4.0, 3.0]])


def test_amin_and_inf_norm_split_ties_evenly(interpreted):
    np.testing.assert_array_equal(_grad(lambda x: x.amin(), [1.0, 1.0, 2.0]), [0.5, 0.5, 0.0])
    np.testing.assert_array_equal(_grad(lambda x: x.norm(float("inf")), [-2.0, 2.0, 1.0]),
                                  [-0.5, 0.5, 0.0])


def test_norm_at_zero_has_zero_gradient(interpreted):
    np.testing.assert_array_equal(_grad(lambda x: x.norm(), [0.0, 0.0]), [0.0, 0.0])


def test_special_values(interpreted):
    x = gj.tensor(np.array([[-np.inf, -np.inf], [np.inf, 1.0]]))
    np.testing.assert_array_equal(x.logsumexp(1).data, [-np.inf, np.inf])
    assert np.isnan(gj.tensor(np.ones(3)).var(correction=3).data)   # 0 / 0, as torch
    assert np.isnan(gj.tensor(np.ones(1)).var().data)         # N - correction = 0: 0/0
    n = gj.tensor(np.array([1.0, np.nan, 2.0]))
    assert n.nansum().item() == 3.0 and np.isnan(n.sum().item())


@pytest.mark.parametrize("executor", ["numpy", "numba"])
def test_float32_stays_float32(executor, monkeypatch):
    if executor == "numpy":
        monkeypatch.setenv("GRADJIT_EXECUTOR", "numpy")
    else:
        monkeypatch.delenv("GRADJIT_EXECUTOR", raising=False)
    x = np.linspace(0.5, 2.0, 8, dtype=np.float32).reshape(2, 4)

    def f(a):
        return (a.std(1) + a.norm(dim=1) + a.amin(1) + a.cumsum(1).sum(1)).sum()

    value, g = gj.value_and_grad(f)(x)
    assert value.dtype == np.float32 and g.dtype == np.float32
    monkeypatch.setenv("GRADJIT_EXECUTOR", "numpy")   # the float64 reference, interpreted
    np.testing.assert_allclose(g, gj.grad(f)(x.astype(np.float64)), rtol=1e-4, atol=1e-4)


def test_errors(interpreted):
    x = gj.tensor(np.ones((2, 3)))
    with pytest.raises(gj.GradjitError, match="norm: p='nuc' is not supported"):
        x.norm("nuc")
    with pytest.raises(IndexError, match="Dimension out of range"):
        x.cumsum(2)
    with pytest.raises(TypeError, match="logsumexp: could not infer output dtype"):
        gj.tensor(np.ones(3, np.int64)).logsumexp()
