"""torch API used in training loops: isfinite / isnan / isinf / isposinf / isneginf,
logical_not / and / or / xor, all / any, mean / sum with dtype=, F.one_hot, unflatten,
is_floating_point / is_complex. Expected values are torch 2.13's (the tests do not need
torch; where it is installed it is the oracle too)."""
import numpy as np
import pytest

import gradjit as gj

F = gj.nn.functional
V = np.array([1.0, np.inf, -np.inf, np.nan, 0.0])


def test_value_tests_are_bool_without_gradient():
    x = gj.tensor(V, requires_grad=True)
    want = {"isfinite": [1, 0, 0, 0, 1], "isnan": [0, 0, 0, 1, 0], "isinf": [0, 1, 1, 0, 0],
            "isposinf": [0, 1, 0, 0, 0], "isneginf": [0, 0, 1, 0, 0],
            "logical_not": [0, 0, 0, 0, 1]}
    for name, w in want.items():
        for r in (getattr(x, name)(), getattr(gj, name)(x)):
            assert r.dtype == np.bool_ and not r.requires_grad and r.grad_fn is None, name
            assert r.tolist() == [bool(v) for v in w], name
    i = gj.tensor(np.array([3, 0, -2]))   # integers: finite, never NaN or infinite
    assert i.isfinite().tolist() == [True] * 3 and i.isnan().tolist() == [False] * 3
    assert i.isinf().tolist() == [False] * 3 and i.isposinf().tolist() == [False] * 3
    assert i.logical_not().tolist() == [False, True, False]


def test_logical_binary_ops_broadcast():
    a = gj.tensor(np.array([[1.0, 0.0, 2.0]]))
    b = gj.tensor(np.array([[0], [5]]))
    assert a.logical_and(b).tolist() == [[False, False, False], [True, False, True]]
    assert a.logical_or(b).tolist() == [[True, False, True], [True, True, True]]
    assert a.logical_xor(b).tolist() == [[True, False, True], [False, True, False]]
    assert a.logical_and(1).tolist() == [[True, False, True]]
    assert gj.logical_or(a, b).dtype == np.bool_


def test_all_any():
    x = gj.tensor(np.array([[1.0, 0.0, 2.0], [3.0, 4.0, 5.0]]), requires_grad=True)
    assert x.all().item() is False and x.any().item() is True
    assert x.all(1).tolist() == [False, True] and x.any(0).tolist() == [True, True, True]
    assert x.all(dim=(0, 1)).item() is False and x.all(1, keepdim=True).shape == (2, 1)
    assert gj.all(x > -1).item() is True and gj.any(x > 4, 1).tolist() == [False, True]
    assert not x.all().requires_grad
    assert gj.zeros(0).all().item() is True and gj.zeros(0).any().item() is False
    u = gj.tensor(np.array([1, 2], dtype=np.uint8)).all()   # (torch: uint8 stays uint8)
    assert u.dtype == np.uint8 and u.item() == 1
    assert gj.isfinite(x).all().item() is True   # the training-loop idiom


def test_mean_and_sum_with_dtype_cast_first():
    t = gj.tensor(np.arange(6).reshape(2, 3))
    m = t.mean(dtype=gj.float32)
    assert m.dtype == np.float32 and m.item() == 2.5
    assert gj.mean(t, dtype=gj.float64).item() == 2.5
    np.testing.assert_array_equal(t.mean(1, dtype=gj.float64).numpy(), [1.0, 4.0])
    assert gj.sum(t, dtype=gj.float32).dtype == np.float32
    with pytest.raises(RuntimeError, match=r"mean\(\): could not infer output dtype. Optional"):
        t.mean(dtype=gj.int64)
    x = gj.tensor(np.array([1.0, 2.0, 4.0]), requires_grad=True)
    x.mean(dtype=gj.float32).backward()   # the gradient comes back in x's dtype
    assert x.grad.dtype == np.float64
    np.testing.assert_allclose(x.grad.numpy(), [1 / 3] * 3, rtol=1e-7)


def test_one_hot():
    r = F.one_hot(gj.tensor(np.array([0, 2, 1])))
    assert r.dtype == np.int64 and r.tolist() == [[1, 0, 0], [0, 0, 1], [0, 1, 0]]
    assert F.one_hot(gj.tensor(np.array([[0], [3]])), 5).shape == (2, 1, 5)
    assert F.one_hot(gj.tensor(np.zeros(0, np.int64)), 3).shape == (0, 3)
    with pytest.raises(RuntimeError, match=r"^Class values must be non-negative\."):
        F.one_hot(gj.tensor(np.array([-1, 2])))
    with pytest.raises(RuntimeError, match=r"^Class values must be smaller than num_classes\."):
        F.one_hot(gj.tensor(np.array([0, 3])), 3)
    with pytest.raises(RuntimeError, match=r"^one_hot is only applicable to index tensor"):
        F.one_hot(gj.tensor(np.array([0.0, 1.0])))
    with pytest.raises(RuntimeError, match=r"^Can not infer total number of classes"):
        F.one_hot(gj.tensor(np.zeros(0, np.int64)))


def test_one_hot_traced_needs_num_classes():
    f = gj.jit(lambda a: F.one_hot(a, 4))
    np.testing.assert_array_equal(f(np.array([1, 3])), [[0, 1, 0, 0], [0, 0, 0, 1]])
    with pytest.raises(gj.GradjitError, match="num_classes=-1"):
        gj.jit(lambda a: F.one_hot(a))(np.array([1, 3]))


def test_unflatten_is_a_view_with_torchs_errors():
    x = gj.tensor(np.arange(12.0).reshape(2, 6), requires_grad=True)
    h = x * 1.0
    u = h.unflatten(1, (3, -1))
    assert u.shape == (2, 3, 2) and gj.unflatten(h, -1, (2, 3)).shape == (2, 2, 3)
    np.testing.assert_array_equal(u.detach().numpy(), np.arange(12.0).reshape(2, 3, 2))
    u.mul_(2.0)   # a view: writes through to h, as torch's
    h.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.full((2, 6), 2.0))
    with pytest.raises(RuntimeError, match=r"Provided sizes \[4, 2\] don't multiply up to the "
                                           r"size of dim 1 \(6\)"):
        h.unflatten(1, (4, 2))
    with pytest.raises(RuntimeError, match="sizes must be non-empty"):
        h.unflatten(1, ())
    with pytest.raises(RuntimeError, match="only one dimension can be inferred"):
        h.unflatten(1, (-1, -1))


def test_dtype_queries():
    assert gj.tensor([1.0]).is_floating_point() and gj.tensor([1.0], dtype=gj.float32).is_floating_point()
    assert not gj.tensor([1]).is_floating_point() and not gj.tensor([True]).is_floating_point()
    assert not gj.tensor([1.0]).is_complex() and gj.is_floating_point(gj.tensor([1.0]))


def test_traced_value_tests_and_reductions():
    def f(w):
        keep = gj.isfinite(w).logical_and(w > 0)
        return (w * w * keep).sum() + gj.any(w > 5) * 1.0
    np.testing.assert_allclose(gj.grad(f)(np.array([1.0, -2.0, 3.0])), [2.0, 0.0, 6.0])


def test_against_torch():
    torch = pytest.importorskip("torch")
    x, xt = gj.tensor(V), torch.tensor(V)
    for name in ("isfinite", "isnan", "isinf", "isposinf", "isneginf", "logical_not"):
        assert getattr(x, name)().tolist() == getattr(xt, name)().tolist(), name
    a = np.array([[1.0, 0.0, 2.0], [3.0, 4.0, 5.0]])
    for dim in (None, 0, 1, (0, 1)):
        for kind in ("all", "any"):
            args = () if dim is None else (dim,)
            assert (getattr(gj.tensor(a), kind)(*args).tolist()
                    == getattr(torch.tensor(a), kind)(*args).tolist()), (kind, dim)
    idx = np.array([[2, 0], [1, 4]])
    assert (F.one_hot(gj.tensor(idx)).tolist()
            == torch.nn.functional.one_hot(torch.tensor(idx)).tolist())
    i = np.arange(6).reshape(2, 3)
    assert (gj.tensor(i).mean(dtype=gj.float32).item()
            == torch.tensor(i).mean(dtype=torch.float32).item())
    assert (gj.tensor(a).unflatten(1, (-1, 1)).shape
            == tuple(torch.tensor(a).unflatten(1, (-1, 1)).shape))
