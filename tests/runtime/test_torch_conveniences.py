"""torch's small conveniences on tensors: argmax / argmin, dtype casts and names, sum's
dtype, the in-place variants of unary ops (``x.exp_()`` ...) and ``detach_``. Values as
torch 2.13 gives them (checked there; the tests do not need torch)."""
import numpy as np
import pytest

import gradjit as gj

A = np.array([[1.5, -2.0, 3.0], [0.5, 4.0, -1.0]])


def test_argmax_argmin_and_casts():
    x = gj.tensor(A, requires_grad=True)
    assert x.argmax().item() == 4 and x.argmax().dtype == np.int64
    assert x.argmax(dim=1).tolist() == [2, 1] and gj.argmax(x, 0).tolist() == [0, 1, 0]
    assert x.argmin(1, keepdim=True).tolist() == [[1], [2]]
    assert gj.tensor(np.array([2.0, 5.0, 5.0])).argmax().item() == 1   # (first of ties)
    assert (x.long().dtype, x.int().dtype, x.bool().dtype, x.half().dtype) == (
        np.int64, np.int32, np.bool_, np.float16)
    assert x.type() == "gradjit.DoubleTensor" and x.float().type() == "gradjit.FloatTensor"
    assert x.type(gj.float32).dtype == np.float32 and gj.long is np.int64 and gj.bool is np.bool_
    s = x.sum(dtype=gj.float32)
    assert s.dtype == np.float32 and s.item() == pytest.approx(6.0)
    s.backward()
    np.testing.assert_array_equal(x.grad.data, np.ones_like(A))


@pytest.mark.parametrize("name, args", [
    ("exp", ()), ("tanh", ()), ("sigmoid", ()), ("relu", ()), ("abs", ()), ("neg", ()),
    ("clamp", (0.0, 1.0)), ("clamp_min", (0.0,)), ("square", ()), ("floor", ()),
])
def test_in_place_unary_variants_match_their_out_of_place_op(name, args, executor):
    x = gj.tensor(A, requires_grad=True)
    h = x * 1.5
    out = getattr(h, name + "_")(*args)
    assert out is h
    (h * h).sum().backward()
    got = x.grad.data.copy()
    x.grad = None
    ref = getattr(x * 1.5, name)(*args)
    np.testing.assert_allclose(h.data, ref.data, rtol=1e-15)
    (ref * ref).sum().backward()
    np.testing.assert_allclose(got, x.grad.data, rtol=1e-13)


def test_in_place_variants_refuse_leaves_and_masked_fill_():
    x = gj.tensor(A, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"leaf Variable .* in-place operation \(exp_\)"):
        x.exp_()
    h = x * 1.0
    h.masked_fill_(gj.tensor(A > 0), 0.0)
    (h * h).sum().backward()
    np.testing.assert_allclose(x.grad.data, np.where(A > 0, 0.0, 2 * A))


def test_detach_in_place_makes_a_leaf():
    x = gj.tensor(A, requires_grad=True)
    y = x * 2
    assert y.detach_() is y and not y.requires_grad and y.grad_fn is None and y.is_leaf
    np.testing.assert_array_equal(y.data, 2 * A)


def test_sum_to_size_as_torch():
    a = np.arange(24.0).reshape(2, 3, 4)
    x = gj.tensor(a, requires_grad=True)
    y = x.sum_to_size(3, 1)
    np.testing.assert_array_equal(y.data, a.sum(axis=(0, 2)).reshape(3, 1))
    (y * y).sum().backward()
    np.testing.assert_array_equal(x.grad.data, np.broadcast_to(2 * a.sum(axis=(0, 2))[:, None],
                                                               a.shape))
    assert x.sum_to_size((2, 1, 1)).shape == (2, 1, 1) and x.sum_to_size(4).shape == (4,)
    assert x.sum_to_size(2, 3, 4).shape == (2, 3, 4)
    with pytest.raises(RuntimeError, match=r"size \{\[3, 2\]\} is not expandable to size"):
        x.sum_to_size(3, 2)
    g = gj.grad(lambda v: (v.sum_to_size(3, 1) ** 2).sum())(a)
    np.testing.assert_array_equal(g, x.grad.data)
