"""Creation and conversion (tracer/creation.py, tracer/methods_creation.py): torch's
names, argument conventions and dtype rules; constants inside gj.grad; seeded draws."""
from __future__ import annotations

import numpy as np
import pytest

import gradjit as gj


def test_filled_and_size_conventions():
    for t in (gj.zeros(2, 3), gj.zeros((2, 3)), gj.zeros([2, 3])):
        assert t.shape == (2, 3) and t.dtype == np.float64 and not t.requires_grad
        np.testing.assert_array_equal(t.data, 0)
    np.testing.assert_array_equal(gj.ones(3, dtype=np.float32).data, np.ones(3, np.float32))
    assert gj.ones(3, dtype=np.float32).dtype == np.float32
    assert gj.empty(0, 4).shape == (0, 4)
    assert gj.zeros(()).shape == ()
    assert gj.full((2,), 3).dtype == np.int64
    assert gj.full((2,), True).dtype == np.bool_
    assert gj.full((2,), 1.5).dtype == np.float64
    np.testing.assert_array_equal(gj.full([2, 2], 7.0, dtype=np.float32).data, np.full((2, 2), 7.0))
    np.testing.assert_array_equal(gj.eye(3).data, np.eye(3))
    np.testing.assert_array_equal(gj.eye(2, 3).data, np.eye(2, 3))
    with pytest.raises(RuntimeError):
        gj.zeros(-1)
    with pytest.raises(TypeError):
        gj.zeros(2.5)


def test_requires_grad_makes_a_leaf():
    w = gj.zeros(3, requires_grad=True)
    assert w.requires_grad and w.is_leaf
    (w * 2.0 + 1.0).sum().backward()
    np.testing.assert_array_equal(np.asarray(w.grad), [2.0, 2.0, 2.0])
    with pytest.raises(Exception, match="floating point"):
        gj.arange(3, requires_grad=True)


def test_ranges():
    t = gj.arange(5)
    assert t.dtype == np.int64
    np.testing.assert_array_equal(t.data, np.arange(5))
    np.testing.assert_array_equal(gj.arange(1, 10, 3).data, [1, 4, 7])
    t = gj.arange(0, 1, 0.25)
    assert t.dtype == np.float64
    np.testing.assert_allclose(t.data, [0.0, 0.25, 0.5, 0.75])
    np.testing.assert_array_equal(gj.arange(5, 0, -2).data, [5, 3, 1])
    assert gj.arange(3, dtype=np.float32).dtype == np.float32
    assert gj.arange(3, 1).shape == (0,)
    np.testing.assert_allclose(gj.linspace(0, 1, 5).data, np.linspace(0, 1, 5))
    np.testing.assert_allclose(gj.logspace(0, 2, 3).data, [1.0, 10.0, 100.0])
    np.testing.assert_allclose(gj.logspace(0, 3, 4, base=2).data, [1.0, 2.0, 4.0, 8.0])
    assert gj.linspace(0, 1, 4, dtype=np.float32).dtype == np.float32


def test_as_tensor_shares_memory():
    a = np.arange(4.0)
    t = gj.as_tensor(a)
    a[0] = 9.0
    assert t.data[0] == 9.0
    assert gj.as_tensor(t) is t
    assert gj.as_tensor(t, dtype=np.float32).dtype == np.float32
    assert gj.as_tensor([1, 2]).dtype == np.int64
    assert gj.from_numpy(a).data is a or np.shares_memory(gj.from_numpy(a).data, a)


def test_like_functions_on_tensors_and_arrays():
    x = gj.tensor(np.ones((2, 3), np.float32))
    for f, v in ((gj.zeros_like, 0), (gj.ones_like, 1), (gj.empty_like, 0)):
        t = f(x)
        assert t.shape == (2, 3) and t.dtype == np.float32
        np.testing.assert_array_equal(t.data, v)
    assert gj.full_like(x, 2.5).data[0, 0] == 2.5
    assert gj.zeros_like(x, dtype=np.int64).dtype == np.int64
    assert gj.ones_like(np.zeros(4)).shape == (4,)
    assert gj.zeros_like(x, requires_grad=True).requires_grad


@pytest.mark.parametrize("mode", ["tensor", "grad"])
def test_like_functions_inside_grad_are_constants(mode, interpreted):
    def f(x):
        m = gj.ones_like(x) * 3.0 + gj.zeros_like(x) + gj.full_like(x, 0.5)
        z = np.zeros_like(x) + np.ones_like(x) + x.new_ones(x.shape) + x.new_zeros(2, 3)
        return (x * m + z * x).sum() + x.new_full((3,), 2.0).sum()
    x = np.random.default_rng(0).standard_normal((2, 3))
    if mode == "grad":
        g = gj.grad(f)(x)
    else:
        t = gj.tensor(x, requires_grad=True)
        f(t).backward()
        g = np.asarray(t.grad)
    np.testing.assert_allclose(g, np.full((2, 3), 5.5))
    assert gj.grad(lambda x: (x * gj.ones_like(x, dtype=np.float32)).sum())(
        np.ones(2, np.float32)).dtype == np.float32


def test_new_methods_and_type_as():
    x = gj.tensor(np.ones(3, np.float32))
    assert x.new_zeros(2, 2).dtype == np.float32 and x.new_zeros((2, 2)).shape == (2, 2)
    assert x.new_ones(4, dtype=np.float64).dtype == np.float64
    assert x.new_full((2,), 3).data.tolist() == [3.0, 3.0]
    assert x.new_empty(2).shape == (2,)
    assert x.new_tensor([1, 2]).dtype == np.float32
    y = gj.tensor([1.0, 2.0], requires_grad=True)
    z = y.type_as(x)
    assert z.dtype == np.float32
    z.sum().backward()
    np.testing.assert_array_equal(np.asarray(y.grad), [1.0, 1.0])
    assert gj.tensor([1, 2]).type_as(y).dtype == np.float64


def test_clone_and_contiguous_are_differentiable():
    x = gj.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    c = x.clone()
    assert c.grad_fn is not None and c.data is not x.data
    (c * c).sum().backward()
    np.testing.assert_array_equal(np.asarray(x.grad), 2 * x.data)
    t = gj.tensor([1.0])
    assert t.clone().data is not t.data
    assert t.contiguous() is t
    x.grad = None
    xt = x.t().contiguous()
    assert xt.data.flags.c_contiguous or xt.grad_fn is not None
    (xt * xt).sum().backward()
    np.testing.assert_array_equal(np.asarray(x.grad), 2 * x.data)
    g = gj.grad(lambda a: (a.clone().contiguous() ** 2).sum())(np.array([1.0, 3.0]))
    np.testing.assert_array_equal(g, [2.0, 6.0])


def test_random_draws_are_seeded():
    a = gj.randn(3, 4, generator=gj.Generator(7))
    b = gj.randn(3, 4, generator=gj.Generator(7))
    np.testing.assert_array_equal(a.data, b.data)
    assert a.shape == (3, 4) and a.dtype == np.float64
    gj.manual_seed(3)
    r1 = gj.rand(5).data
    gj.manual_seed(3)
    np.testing.assert_array_equal(gj.rand(5).data, r1)
    assert np.all((r1 >= 0) & (r1 < 1))
    g = gj.Generator(1)
    first = gj.rand(2, generator=g).data
    assert not np.array_equal(gj.rand(2, generator=g).data, first)   # the stream advances
    assert g.manual_seed(1) is g and np.array_equal(gj.rand(2, generator=g).data, first)
    assert g.initial_seed() == 1
    i = gj.randint(3, 7, (100,), generator=gj.Generator(0))
    assert i.dtype == np.int64 and i.data.min() >= 3 and i.data.max() < 7
    assert gj.randint(5, (2, 2)).shape == (2, 2)
    assert gj.randint(0, 2, size=(3,)).shape == (3,)
    assert gj.randn(2, dtype=np.float32).dtype == np.float32
    w = gj.randn(2, 2, requires_grad=True)
    assert w.requires_grad and w.is_leaf
    assert gj.rand_like(w).shape == (2, 2) and gj.randn_like(w).dtype == np.float64
    with pytest.raises(TypeError):
        gj.rand(2, dtype=np.int64)
    with pytest.raises(RuntimeError):
        gj.randint(3, 3, (2,))
