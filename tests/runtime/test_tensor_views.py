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
