"""The reduction family at its edges: zeros, ties, infinities, dtypes, errors.

Gradchecks of every reduction live in ``cases_reduce.py``; here is what they
cannot see: torch's conventions at non-differentiable points and special values.
"""
from __future__ import annotations

import numpy as np
import pytest

import gradjit as gj
from tests.marks import COMPILED_SLOW


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
        return (a.std(1, unbiased=True) + a.norm(dim=1) + a.amin(1) + a.cumsum(1).sum(1)).sum()

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


# -- scans and order statistics ------------------------------------------------------------------
def test_cumprod_gradient_is_exact_with_zeros(interpreted):
    # d/dx_i sum_j cumprod_j: before the first zero out_j / x_i summed; at the first zero the
    # products with it replaced by 1; after it 0
    x = [2.0, 0.0, 3.0, 0.0, 5.0]
    g = _grad(lambda x: x.cumprod(0).sum(), x)
    np.testing.assert_array_equal(g, [1.0, 2.0 + 6.0 + 0.0 + 0.0, 0.0, 0.0, 0.0])
    g = _grad(lambda x: x.cumprod(0).sum(), [0.0, 2.0, 3.0])
    np.testing.assert_array_equal(g, [1.0 + 2.0 + 6.0, 0.0, 0.0])


@pytest.mark.parametrize("compiled", [False, True])
def test_scans_and_sort_values_match_numpy(compiled, monkeypatch):
    if not compiled:
        monkeypatch.setenv("GRADJIT_EXECUTOR", "numpy")
    x = np.array([[3.0, 1.0, 3.0, 0.5], [np.nan, 2.0, 1.0, 2.0], [1.0, 1.0, 4.0, 4.0]])

    def f(a):
        v, i = a.cummax(1)
        w, j = a.cummin(1)
        s, k = a.sort(dim=1, descending=True)
        return v, i, w, j, s, k, a.cumprod(1), a.logcumsumexp(1)
    v, i, w, j, s, k, p, lse = gj.jit(f)(x)
    np.testing.assert_array_equal(v, [[3, 3, 3, 3], [np.nan] * 4, [1, 1, 4, 4]])
    np.testing.assert_array_equal(i, [[0, 0, 2, 2], [0, 0, 0, 0], [0, 1, 2, 3]])  # ties: last
    np.testing.assert_array_equal(w, [[3, 1, 1, 0.5], [np.nan] * 4, [1, 1, 1, 1]])
    np.testing.assert_array_equal(j, [[0, 1, 1, 3], [0, 0, 0, 0], [0, 1, 1, 1]])
    np.testing.assert_array_equal(k[0], [0, 2, 1, 3])          # stable: ties keep their order
    np.testing.assert_array_equal(s[2], [4, 4, 1, 1])
    np.testing.assert_array_equal(k[2], [2, 3, 0, 1])
    np.testing.assert_allclose(p, np.cumprod(x, 1))
    with np.errstate(invalid="ignore"):
        np.testing.assert_allclose(lse, np.logaddexp.accumulate(x, 1))
    ints = np.array([[3, 1, 2], [0, 0, -1]], np.int64)
    s, k = gj.jit(lambda a: a.sort(dim=1))(ints)
    assert s.dtype == np.int64
    np.testing.assert_array_equal(s, np.sort(ints, 1))
    np.testing.assert_array_equal(gj.jit(lambda a: a.cumprod(0))(ints), np.cumprod(ints, 0))


def test_logcumsumexp_of_infinities():
    x = gj.tensor([-np.inf, -np.inf, 0.0, np.inf, 1.0])
    np.testing.assert_array_equal(x.logcumsumexp(0).data, [-np.inf, -np.inf, 0.0, np.inf, np.inf])


def test_order_statistics_follow_torch():
    x = gj.tensor([[4.0, 1.0, 3.0, 2.0], [0.0, 5.0, 5.0, 1.0]])
    v, i = x.median(1)
    np.testing.assert_array_equal(v.data, [2.0, 1.0])          # the lower median
    np.testing.assert_array_equal(i.data, [3, 3])
    assert x.median().item() == 2.0
    v, i = x.kthvalue(3, 1, keepdim=True)
    assert v.shape == (2, 1) and v.data.ravel().tolist() == [3.0, 5.0]
    v, i = x.topk(2)
    np.testing.assert_array_equal(v.data, [[4.0, 3.0], [5.0, 5.0]])
    np.testing.assert_array_equal(i.data, [[0, 2], [1, 2]])
    v, i = x.topk(1, dim=0, largest=False)
    np.testing.assert_array_equal(v.data, [[0.0, 1.0, 3.0, 1.0]])
    assert np.median(gj.tensor([1.0, 4.0, 2.0, 3.0])).item() == 2.5   # NumPy: the mean of two
    np.testing.assert_array_equal(np.sort(x).data, np.sort(x.data))
    np.testing.assert_array_equal(x.argsort(0).data, np.argsort(x.data, 0, kind="stable"))
    assert gj.tensor([3.0, 0.0]).dist(gj.tensor([0.0, 4.0])).item() == 5.0
    with pytest.raises(IndexError, match="topk"):
        x.topk(5)
    with pytest.raises(IndexError, match="kthvalue"):
        x.kthvalue(0)
    assert x.to(np.float32).sort(dim=-1)[0].dtype == np.float32
    assert x.to(np.float32).cumprod(1).dtype == np.float32


def test_gradient_goes_to_the_selected_index(interpreted):
    x = [1.0, 3.0, 3.0, 2.0]
    np.testing.assert_array_equal(_grad(lambda x: x.cummax(0)[0].sum(), x), [1.0, 1.0, 2.0, 0.0])
    np.testing.assert_array_equal(_grad(lambda x: x.sort(dim=0)[0][-1], x), [0.0, 0.0, 1.0, 0.0])
    np.testing.assert_array_equal(_grad(lambda x: x.median(), x), [0.0, 0.0, 0.0, 1.0])
    np.testing.assert_array_equal(_grad(lambda x: x.topk(2)[0].sum(), x), [0.0, 1.0, 1.0, 0.0])


def test_median_of_all_splits_its_gradient_over_ties_as_torch(interpreted):
    # torch's evenly_distribute_backward: every element equal to the median gets 1/count
    third = 1.0 / 3.0
    np.testing.assert_allclose(_grad(lambda x: x.median(), [2.0, 2.0, -1.0, 2.0, 5.0]),
                               [third, third, 0.0, third, 0.0])
    np.testing.assert_array_equal(_grad(lambda x: (x * 2.0).median(), [[1.0, 3.0], [3.0, 0.0]]),
                                  [[2.0, 0.0], [0.0, 0.0]])   # the lower median, no tie
    np.testing.assert_array_equal(_grad(lambda x: x.median(), 4.0), 1.0)
    x = gj.tensor(np.array([[2.0, 2.0], [-1.0, 2.0]]), requires_grad=True)
    m = x.median()
    assert m.item() == 2.0 and m.shape == ()
    (g,) = gj.autograd.grad(m * m, x, create_graph=True)      # 2 m / 3 at each tie
    np.testing.assert_allclose(g.data, [[4 / 3, 4 / 3], [0.0, 4 / 3]])
    (h,) = gj.autograd.grad(g.sum(), x)                         # d(2m)/dx = 2 / 3 each
    np.testing.assert_allclose(h.data, [[2 / 3, 2 / 3], [0.0, 2 / 3]])
    # NumPy's np.median keeps its own semantics (mean of the middle two; one element each)
    np.testing.assert_array_equal(gj.grad(lambda a: np.median(a))(np.array([2.0, 2.0, 1.0])),
                                  [1.0, 0.0, 0.0])


def test_median_of_all_matches_torch():
    torch = pytest.importorskip("torch")
    for vals in ([2.0, 2.0, -1.0, 2.0, 5.0], [[1.0, 1.0], [1.0, 1.0]], [3.0, 1.0, 1.0, 3.0]):
        t = torch.tensor(vals, dtype=torch.float64, requires_grad=True)
        t.median().backward()
        x = gj.tensor(np.array(vals), requires_grad=True)
        x.median().backward()
        np.testing.assert_allclose(x.grad.data, t.grad.numpy())


def test_values_and_indices_pairs_are_named_as_torchs(interpreted):
    x = gj.tensor(np.array([[1.0, 5.0, 3.0], [4.0, 2.0, 6.0]]), requires_grad=True)
    pairs = {"max": x.max(dim=1), "min": x.min(1), "sort": x.sort(1), "topk": x.topk(2, 1),
             "kthvalue": x.kthvalue(2, 1), "median": x.median(1), "cummax": x.cummax(1),
             "cummin": x.cummin(1)}
    for name, p in pairs.items():
        values, indices = p   # (still a pair)
        assert p.values is values and p.indices is indices and p[0] is values, name
        assert indices.dtype == np.int64, name
    np.testing.assert_array_equal(pairs["max"].indices.data, [1, 2])
    pairs["max"].values.sum().backward()
    np.testing.assert_array_equal(x.grad.data, [[0, 1, 0], [0, 0, 1]])


def test_tensor_std_of_a_constant_slice_has_gradient_zero_as_torch():
    # (sqrt's gradient at a zero variance was 0/0: NaN in the constant column)
    x = gj.tensor(np.array([[1.0, 2.0], [1.0, 5.0], [1.0, -1.0]]), requires_grad=True)
    x.std(dim=0).sum().backward()
    np.testing.assert_allclose(x.grad.data, [[0.0, 0.0], [0.0, 0.5], [0.0, -0.5]])
    one = gj.tensor(np.array([3.0]), requires_grad=True)
    one.std(unbiased=False).backward()
    np.testing.assert_array_equal(one.grad.data, [0.0])


def test_max_and_min_of_a_tensor_other_are_elementwise_as_torchs(executor):
    # torch.max(x, other) / x.min(other) are maximum / minimum (ties: half and half);
    # gradjit took the tensor for a dim and returned the overall max (a scalar)
    a = np.array([[-1.0, 5.0, 2.0], [4.0, -3.0, 0.5]])
    b = gj.tensor(np.array([1.0, 5.0, 1.0]))
    x = gj.tensor(a, requires_grad=True)
    m = gj.max(x, b)
    np.testing.assert_array_equal(m.data, [[1.0, 5.0, 2.0], [4.0, 5.0, 1.0]])   # torch 2.13
    np.testing.assert_array_equal(x.min(b).data, [[-1.0, 5.0, 1.0], [1.0, -3.0, 0.5]])
    np.testing.assert_array_equal(x.max(gj.tensor(0.0)).data, np.maximum(a, 0.0))
    (m.sum() + gj.min(x, b).sum()).backward()
    np.testing.assert_array_equal(x.grad.data, [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]])
    x.grad = None
    m = gj.max(x, b)
    m.sum().backward()
    np.testing.assert_array_equal(x.grad.data, [[0.0, 0.5, 1.0], [1.0, 0.0, 0.0]])
    for dim in (1.5, (0, 1), "1"):
        with pytest.raises(TypeError, match="argument 'dim' must be int or a Tensor"):
            x.max(dim)
    with pytest.raises(TypeError, match="keepdim is not an argument"):
        x.min(b, True)
    np.testing.assert_array_equal(x.max(axis=(0, 1)).data, 5.0)   # NumPy's keyword: amax


@COMPILED_SLOW
def test_numpy_median_and_quantiles_are_nan_for_a_slice_holding_a_nan(executor):
    # NumPy sorts a NaN last and returns NaN for the whole slice, whichever q; JAX too, with
    # a zero gradient for that slice (the other slices keep theirs)
    x = np.array([1.0, np.nan, 3.0, 4.0])
    m = x.reshape(2, 2)
    for fn in (np.median, lambda x: np.percentile(x, [0, 50, 100]),
               lambda x: np.quantile(x, 0.25), lambda x: np.median(x.reshape(2, 2), axis=1),
               lambda x: np.quantile(x.reshape(2, 2), [0.1, 1.0], axis=0, keepdims=True)):
        np.testing.assert_array_equal(gj.jit(fn)(x), fn(x))
    np.testing.assert_array_equal(gj.grad(np.median)(x), np.zeros(4))
    np.testing.assert_array_equal(
        gj.grad(lambda m: np.median(m, axis=1).sum())(m), [[0.0, 0.0], [0.5, 0.5]])
    np.testing.assert_array_equal(
        gj.grad(lambda m: np.percentile(m, 0, axis=1).sum())(m), [[0.0, 0.0], [1.0, 0.0]])
    # an infinity is no NaN: the median of [1, inf, 3, 4] is 3.5, its gradient unchanged
    y = np.array([1.0, np.inf, 3.0, 4.0])
    assert gj.jit(np.median)(y) == 3.5
    np.testing.assert_array_equal(gj.grad(np.median)(y), [0.0, 0.0, 0.5, 0.5])
