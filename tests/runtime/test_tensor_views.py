"""Views in tensor mode follow torch: an in-place op on a view rewrites its base, and one on
a base is seen by its views, in the values and in the gradients (tracer/tensor_views.py).
Oracles: central finite differences of the same program's values (always), torch (when
installed); both the deferred and the eager forward."""
import numpy as np
import pytest

import gradjit as gj
from gradjit.tracer import deferred
from tests.fd import numerical_grad

X = np.array([0.3, -0.7, 1.1, 0.5])


@pytest.fixture(params=[True, False], ids=["deferred", "eager"])
def mode(request):
    prev = deferred.set_deferred(request.param)
    yield
    deferred.set_deferred(prev)


def _p_write_view(m, a):
    c = a * 1.0
    c.view(2, 2)[0, 0] = 5.0
    return (c ** 2).sum()


def _p_t_mul(m, a):
    c = a * 1.0
    v = c.view(2, 2).t()
    v.mul_(2)
    return (c ** 2).sum() + (v * c.view(2, 2)).sum()


def _p_flatten_exp(m, a):
    c = a.reshape(2, 2) * 1.0
    c.flatten().exp_()
    return (c * c).sum()


def _p_reshape_row(m, a):
    c = a * 1.0
    c.reshape(2, 2)[1] = c[:2] * 3.0
    return (c ** 3).sum()


def _p_permute_clamp(m, a):
    c = a.reshape(2, 2) * 1.0
    c.permute(1, 0).clamp_(-0.5, 0.6)
    return (c * a.reshape(2, 2)).sum()


def _p_base_then_view(m, a):
    c = a * 1.0
    d = c.reshape(4, 1)
    e = c.view(2, 2).t()
    f = c[..., None]
    c.mul_(a)
    return c.sum() + (d * d).sum() + (e * e.t()).sum() + f.exp().sum()


def _p_slices(m, a):
    c = a * 1.0
    c[1:] *= 0.5
    c[1] += a[0] * a[3]
    s = c[::2]
    c.sin_()
    return (c ** 2).sum() + (s * 3.0).sum()


def _p_view_of_view(m, a):
    c = a * 1.0
    d = c.view(2, 2).transpose(0, 1)[0]
    c.sin_()
    d.mul_(3.0)
    return (c * c).sum() + d.sum()


def _p_expand_read(m, a):
    c = a * 1.0
    d = c.expand(3, 4)
    u = c.unsqueeze(0).squeeze(0).movedim(0, 0)
    c.mul_(2.0)
    return (d * d).sum() + u.sum()


def _p_narrow_copy(m, a):
    c = a * 1.0
    n = c.narrow(0, 1, 2)
    n.copy_(a[:2] * a[2:])
    c.view(2, 2)[:, 1].fill_(0.25)
    return (c ** 2).sum() + n.sum()


PROGRAMS = [_p_write_view, _p_t_mul, _p_flatten_exp, _p_reshape_row, _p_permute_clamp,
            _p_base_then_view, _p_slices, _p_view_of_view, _p_expand_read, _p_narrow_copy]


def _run(m, prog, x):
    a = m.tensor(x, requires_grad=True)
    loss = prog(m, a)
    loss.backward()
    return float(loss.detach()), np.asarray(a.grad.detach() if m is not gj else a.grad)


@pytest.mark.parametrize("prog", PROGRAMS, ids=lambda p: p.__name__[3:])
def test_views_gradients_match_finite_differences(mode, prog):
    value, grad = _run(gj, prog, X)
    with gj.no_grad():
        def f(x):
            return float(prog(gj, gj.tensor(x)))
        assert value == pytest.approx(f(X))
    np.testing.assert_allclose(grad, numerical_grad(f, [X], 0), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("prog", PROGRAMS, ids=lambda p: p.__name__[3:])
def test_views_match_torch(mode, prog):
    torch = pytest.importorskip("torch")
    value, grad = _run(gj, prog, X)
    tv, tg = _run(torch, prog, X)
    assert value == pytest.approx(tv)
    np.testing.assert_allclose(grad, tg, rtol=1e-10, atol=1e-12)


def test_the_values_of_views_and_bases_follow_each_other(mode):
    a = gj.tensor(np.arange(6.0), requires_grad=True)
    c = a * 1.0
    d = c.view(2, 3).t()
    s = c[1:3]
    d[0, 1] = -1.0        # c[3]
    s.mul_(10.0)          # c[1], c[2]
    np.testing.assert_allclose(np.asarray(c.detach()), [0, 10, 20, -1, 4, 5])
    np.testing.assert_allclose(np.asarray(d.detach()), [[0, -1], [10, 4], [20, 5]])
    np.testing.assert_allclose(np.asarray(s.detach()), [10, 20])


def test_python_augmented_assignment_into_slices_and_optimizer_updates(mode):
    E = gj.tensor(np.arange(6.0).reshape(3, 2), requires_grad=True)
    with gj.no_grad():
        E[1:3] *= 0.5
        E[0] += 1.0
    np.testing.assert_allclose(E.data, [[1, 2], [1, 1.5], [2, 2.5]])
    c = E * 1.0
    c[1:] *= 0.5
    (c ** 2).sum().backward()
    np.testing.assert_allclose(E.grad.data, 2 * E.data * [[1], [0.25], [0.25]])


def test_a_saved_value_changed_through_a_view_or_its_base_is_refused(mode):
    a = gj.tensor(X, requires_grad=True)
    c = a * 1.0
    d = c.view(2, 2).t()
    e = (d * d).sum()
    c.mul_(2.0)           # d's memory changed: torch's shared version counter
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        e.backward()
    c = a * 1.0
    e = (c * c).sum()
    c.view(2, 2)[0].zero_()
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        e.backward()


def test_in_place_writes_torch_refuses_raise(mode):
    a = gj.tensor(X, requires_grad=True)
    with pytest.raises(RuntimeError, match="view of a leaf Variable"):
        a.view(2, 2).mul_(2.0)
    c = a * 1.0
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        c.expand(3, 4).mul_(2.0)
    with pytest.raises(RuntimeError, match="returns multiple views"):
        c.split(2)[0].mul_(2.0)
    with pytest.raises(RuntimeError, match="Use .reshape"):
        c.view(2, 2).t().view(4)
    r = c.view(2, 2).t().reshape(4)   # a copy (as torch's): writing it leaves c alone
    r.add_(1.0)
    np.testing.assert_allclose(np.asarray(c.detach()), X)
    # copies stay free to change: advanced indexing, clone()
    y = c[[0, 2]]
    y.add_(1.0)
    s = c[1:].clone()
    s.mul_(2.0)
    np.testing.assert_allclose(np.asarray(c.detach()), X)


@pytest.mark.parametrize("write", ["slice", "whole", "detach", "setitem", "detach_slice"])
def test_a_no_grad_write_into_a_tensor_with_history_is_its_new_value(mode, write):
    # torch: b keeps its grad_fn (a * 2), later ops read the written value, and the gradient
    # through a * 2 is 2 * grad (expected numbers from torch 2.13)
    a = gj.tensor([1.0, 2.0, 3.0], requires_grad=True)
    b = a * 2
    with gj.no_grad():
        {"slice": lambda: b[1:].mul_(3), "whole": lambda: b.mul_(3),
         "detach": lambda: b.detach().mul_(3), "setitem": lambda: b.__setitem__(0, 7.0),
         "detach_slice": lambda: b[1:].detach().mul_(3)}[write]()
    assert b.grad_fn is not None and b.requires_grad
    loss = (b * b).sum()
    loss.backward()
    value, grad = {"slice": (472.0, [8, 48, 72]), "whole": (504.0, [24, 48, 72]),
                   "detach": (504.0, [24, 48, 72]), "setitem": (101.0, [28, 16, 24]),
                   "detach_slice": (472.0, [8, 48, 72])}[write]
    assert float(loss) == value
    np.testing.assert_allclose(a.grad.data, grad)


def test_a_no_grad_write_refuses_only_a_backward_that_saved_the_old_value(mode):
    a = gj.tensor([1.0, 2.0, 3.0], requires_grad=True)
    b = a.exp()
    c = (b * b).sum()     # saved b before the write
    with gj.no_grad():
        b.mul_(3.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        c.backward()
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        (b * 1.0).sum().backward()   # exp's backward reads its (old) result: torch refuses too


def test_views_of_a_flat_parameter_vector_train_with_sgd(mode):
    theta = np.linspace(-1, 1, 8)
    params = gj.tensor(theta.copy(), requires_grad=True)
    w, b = params[:6].view(2, 3), params[6:]
    x = gj.tensor(np.ones(3))
    for _ in range(3):
        ((w @ x + b) ** 2).sum().backward()
        with gj.no_grad():
            params -= 0.1 * params.grad
        params.grad = None
        assert w.requires_grad and w.grad_fn is not None and b.grad_fn is not None
        W, B = theta[:6].reshape(2, 3), theta[6:]
        r = W @ np.ones(3) + B
        theta = theta - 0.1 * np.concatenate([(2 * np.outer(r, np.ones(3))).ravel(), 2 * r])
        np.testing.assert_allclose(params.data, theta)
        np.testing.assert_allclose(w.data, theta[:6].reshape(2, 3))


def test_views_share_writes_made_through_int_tensor_indices_and_detach(mode):
    x = gj.tensor(np.arange(6.0).reshape(3, 2))
    for i in gj.arange(2):
        x[i].mul_(10)
    x[np.int64(2)].add_(1)
    v = x[2]
    v.detach().add_(100)
    np.testing.assert_allclose(x.data, [[0, 10], [20, 30], [105, 106]])
    np.testing.assert_allclose(v.data, [105, 106])


def test_retain_grad_of_a_view_follows_an_in_place_op_on_its_base(mode):
    a = gj.tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
    b = a * 1
    v = b[1]
    v.retain_grad()
    b.mul_(2)
    (v ** 2).sum().backward()
    np.testing.assert_allclose(v.grad.data, [12, 16, 20])   # torch 2.13


def test_a_view_made_without_grad_refuses_a_tracked_in_place_op(mode):
    a = gj.tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
    b = a * 2
    with gj.no_grad():
        v = b[1]
        w = a[0]
    with pytest.raises(RuntimeError, match="A view was created in no_grad mode and is being "
                                           "modified inplace with grad mode enabled"):
        v.mul_(3)
    with pytest.raises(RuntimeError, match="A view was created in no_grad mode"):
        w.mul_(3)
    with gj.no_grad():
        v.mul_(3)   # both inside: allowed, untracked
    np.testing.assert_allclose(b.data, [[0, 2, 4], [18, 24, 30]])


def test_multi_output_views_refuse_only_tracked_in_place_ops(mode):
    W = gj.tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
    with gj.no_grad():
        for p in W.chunk(3, dim=1):
            p.mul_(0.5)
        for r in W.unbind(0):
            r.add_(1.0)
    np.testing.assert_allclose(W.data, [[1, 1.5, 2], [2.5, 3, 3.5]])
    y = gj.tensor(np.arange(4.0))
    y.split(2)[0].zero_()
    y.unbind()[3].fill_(-1.0)
    np.testing.assert_allclose(y.data, [0, 0, 2, -1])
    b = W * 2
    with pytest.raises(RuntimeError, match="Output 1 of Unbind is a view and is being modified"):
        b.unbind()[1].mul_(2)
    with pytest.raises(RuntimeError, match="Output 0 of Split is a view and is being modified"):
        b.chunk(2, dim=1)[0].mul_(2)


def test_an_expand_sliced_back_to_one_copy_takes_in_place_writes(mode):
    a = gj.tensor(np.arange(6.0).reshape(2, 3))
    a.unsqueeze(0).expand(3, 2, 3)[0].add_(1)
    np.testing.assert_allclose(a.data, np.arange(6.0).reshape(2, 3) + 1)
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        a.unsqueeze(0).expand(3, 2, 3)[:, 0].add_(1)
    a = gj.tensor(np.arange(6.0).reshape(2, 3))
    v = a[1]
    a.add_(1)
    assert (a._version, v._version) == (1, 1)   # torch's shared version counter
    c = gj.tensor(X, requires_grad=True) * 1.0
    c.unsqueeze(0).expand(2, 4)[1].mul_(3.0)
    (c * c).sum().backward()
