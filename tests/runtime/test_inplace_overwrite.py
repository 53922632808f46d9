"""In-place ops that replace a tensor's value (``fill_``, ``zero_``, ``copy_``), in-place ops
on constants, and ``retain_grad`` across in-place ops: values and gradients as torch's.

Expected numbers were computed with torch 2.13 (float64) and are written out, so the tests
run without torch. Each case runs on both executors (the ``executor`` fixture: the NumPy
reference interpreter and compiled code) and with the deferred forward on and off
(tracer/deferred.py), since each of those paths once gave its own wrong answer.
"""
import numpy as np
import pytest

import gradjit as gj

V = np.array([0.5, -1.0, 2.0])
U = np.array([3.0, 4.0, 5.0])


@pytest.fixture(params=[True, False], ids=["deferred", "eager"])
def deferred(request):
    prev = gj.set_deferred(request.param)
    yield request.param
    gj.set_deferred(prev)


def fill_then_use(x, y):
    h = x * 2
    c = h * 3                  # c keeps the old value of h
    h.fill_(1.5)               # h is the constant 1.5 now
    return (c * h).sum()


def zero_then_add(x, y):
    h = x.clone()
    h.zero_()
    h.add_(x * x)              # h = x**2
    return (h * h).sum()


def copy_constant(x, y):
    h = x * 2
    h.copy_(gj.tensor(U))
    return (h * x).sum()


def fill_only(x, y):           # the old history gets a zero gradient (torch's FillBackward)
    h = x * 2
    h.fill_(1.5)
    return (h * 1.0).sum()


def copy_leaf(x, y):           # the gradient goes to the source, zero to the old value
    h = y * 1
    h.copy_(x)
    return (h * h).sum()


def copy_into_constant(x, y):  # a constant that copies x starts requiring grad
    h = gj.zeros(3)
    h.copy_(x)
    assert h.requires_grad
    h.mul_(x)
    return (h * h).sum()


def copy_broadcast(x, y):
    h = y * 1
    h.copy_(x[1:2])
    return (h * y).sum()


# (program, loss, x.grad, y.grad): torch 2.13
CASES = [
    (fill_then_use, 13.5, [9.0, 9.0, 9.0], None),
    (zero_then_add, 17.0625, [0.5, -4.0, 32.0], None),
    (copy_constant, 7.5, [3.0, 4.0, 5.0], None),
    (fill_only, 4.5, [0.0, 0.0, 0.0], None),
    (copy_leaf, 5.25, [1.0, -2.0, 4.0], [0.0, 0.0, 0.0]),
    (copy_into_constant, 17.0625, [0.5, -4.0, 32.0], None),
    (copy_broadcast, -12.0, [0.0, 12.0, 0.0], [-1.0, -1.0, -1.0]),
]


@pytest.mark.parametrize("program, loss, xg, yg", CASES, ids=[c[0].__name__ for c in CASES])
def test_overwrite_makes_the_old_history_a_zero_gradient(program, loss, xg, yg, executor,
                                                         deferred):
    x, y = gj.tensor(V, requires_grad=True), gj.tensor(U, requires_grad=True)
    out = program(x, y)
    out.backward()
    assert np.isclose(float(out), loss)
    np.testing.assert_allclose(x.grad.data, xg)
    if yg is None:
        assert y.grad is None
    else:
        np.testing.assert_allclose(y.grad.data, yg)


def test_overwrite_under_no_grad_keeps_the_history(deferred):
    # torch: an in-place op under no_grad is not recorded; the tensor keeps its grad_fn
    x = gj.tensor(V, requires_grad=True)
    h = x * 2
    with gj.no_grad():
        h.zero_()
    assert h.grad_fn is not None and h.requires_grad and h._version == 1
    c = gj.tensor(U)
    c.fill_(2.0)
    assert not c.requires_grad and np.all(c.data == 2.0)


def test_retain_grad_follows_the_tensor_hooks_stay_with_their_version(executor, deferred):
    # torch: h.grad is the gradient w.r.t. h's value after mul_ (2 h = 12 x); a hook
    # registered before mul_ sees the gradient w.r.t. the old value (3 * 12 x)
    for _ in range(2):   # the second step replays the first one's record
        x = gj.tensor(V, requires_grad=True)
        h = x * 2
        seen = []
        h.register_hook(lambda g: seen.append(np.array(g.data)))
        h.retain_grad()
        h.mul_(3)
        assert h.retains_grad
        (h * h).sum().backward()
        np.testing.assert_allclose(h.grad.data, [6.0, -12.0, 24.0])
        np.testing.assert_allclose(seen[0], [18.0, -36.0, 72.0])
        np.testing.assert_allclose(x.grad.data, [36.0, -72.0, 144.0])


def const_mul(x):
    c = gj.tensor(U)
    c.mul_(x)
    return c.sum()


def const_div(x):
    c = gj.tensor(U)
    c.div_(x)
    c.add_(1)
    return (c * c).sum()


def const_pow(x):
    c = gj.tensor(U)
    c.pow_(x)
    return c.sum()


def const_chain(x):
    c = gj.tensor(np.array([0.3, 0.7, -0.2]))
    c.mul_(x)
    c.add_(c)
    c.pow_(2)
    return c.sum()


# (program, loss, x.grad): torch 2.13
CONST_CASES = [
    (const_mul, 7.5, [3.0, 4.0, 5.0]),
    (const_div, 70.25, [-168.0, 24.0, -8.75]),
    (const_pow, 26.98205080756888, [1.902852301792692, 0.34657359027997264, 40.23594781085251]),
    (const_chain, 2.69, [0.36, -3.92, 0.64]),
]


@pytest.mark.parametrize("program, loss, xg", CONST_CASES, ids=[c[0].__name__ for c in CONST_CASES])
def test_inplace_op_on_a_constant_saves_its_old_value(program, loss, xg, executor, deferred):
    # c.mul_(x) on a constant c: mul's backward reads c's value before the write, which
    # was saved as c itself, so backward saw it changed (a false version error)
    x = gj.tensor(V, requires_grad=True)
    out = program(x)
    out.backward()
    assert np.isclose(float(out), loss)
    np.testing.assert_allclose(x.grad.data, xg)


@pytest.mark.parametrize("view", [lambda h: h.reshape(-1), lambda h: h.T, lambda h: h.unsqueeze(0)],
                         ids=["reshape", "T", "unsqueeze"])
def test_an_in_place_op_on_the_base_of_a_saved_view_raises(view, deferred):
    # a view shares its base's memory (and, in torch, its version counter): saved, then
    # its base changed in place, backward read the changed values (a silently wrong
    # gradient); torch raises, and so does gradjit now, for results and for constants
    V = np.arange(1.0, 7.0).reshape(2, 3)
    x = gj.tensor(V, requires_grad=True)
    h = x * 2
    r = view(h)
    y = (r * r).sum()
    h.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()
    w = gj.tensor(V.copy())
    y = (view(w) * view(x)).sum() * 1.0
    w.mul_(2.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()


def test_a_reshape_numpy_copies_is_no_view(deferred):
    # h.T.reshape(-1) is a copy (NumPy's and torch's): h's in-place op does not touch it
    x = gj.tensor(np.arange(1.0, 7.0).reshape(2, 3), requires_grad=True)
    h = x * 2
    r = h.T.reshape(-1)
    y = (r * r).sum()
    h.add_(1.0)
    y.backward()
    np.testing.assert_allclose(x.grad.data, 8 * x.data)


# -- backward formulas that read an input's shape only (index / gather backward) ---------------
# torch saves only the sizes, so a later in-place write to that input is no error. Expected
# numbers from torch 2.13 (float64).
def _index_case(k, c):
    if k == "fancy":
        c[[0]] = c[[0]] + 1.0
    elif k == "mask":
        c[c > 2] = c[c > 2] * 2
    elif k == "read_then_write":
        c[[1, 0]]
        c[0] = 7.0
    else:
        c.gather(1, gj.tensor(np.array([[0], [2]])))
        c[1] = 3.0


@pytest.mark.parametrize("unrelated", [False, True], ids=["alone", "with_unrelated_graph"])
@pytest.mark.parametrize("k, want", [
    ("fancy", [[2.0, 4.0, 6.0], [6.0, 8.0, 10.0]]),
    ("mask", [[0.0, 2.0, 4.0], [24.0, 32.0, 40.0]]),
    ("read_then_write", [[0.0, 0.0, 0.0], [6.0, 8.0, 10.0]]),
    ("gather_then_write", [[0.0, 2.0, 4.0], [0.0, 0.0, 0.0]])])
def test_shape_only_uses_are_not_version_checked(k, want, unrelated, deferred, executor):
    other = gj.tensor(np.ones(3), requires_grad=True) * 2.0 if unrelated else None
    a = gj.tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
    c = a * 1.0
    _index_case(k, c)
    (c ** 2).sum().backward()
    np.testing.assert_array_equal(a.grad.data, want)
    del other
