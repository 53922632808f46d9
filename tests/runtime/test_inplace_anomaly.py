"""In-place ops and version counters, inference tensors, anomaly mode, mark_dirty and
custom forward-mode rules: torch's behaviour and messages."""
import threading

import numpy as np
import pytest

import gradjit as gj

A = gj.autograd


def leaf(*values):
    return gj.tensor(np.array(values, dtype=np.float64), requires_grad=True)


def test_inplace_on_leaf_that_requires_grad_raises():
    x = leaf(1.0, 2.0)
    for op in (lambda: x.add_(1), lambda: x.mul_(2), lambda: x.zero_(), lambda: x.copy_(np.ones(2))):
        with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used "
                                               "in an in-place operation"):
            op()
    with gj.no_grad():
        x.sub_(0.5)                     # allowed: an optimiser step
    assert np.allclose(x.data, [0.5, 1.5]) and x._version == 1


def test_inplace_on_non_leaf_rewrites_history(interpreted):
    x = leaf(1.0, 2.0)
    y = x * 2
    y.add_(1)
    y *= 3
    assert y.grad_fn.name() == "MulBackward0" and y._version == 2
    (y * y).sum().backward()
    # y = 3 (2x + 1); d sum(y^2)/dx = 2 y * 6
    np.testing.assert_allclose(x.grad.data, 12 * 3 * (2 * x.data + 1))


def test_modifying_a_saved_output_raises_with_versions(interpreted):
    x = leaf(1.0, 2.0)
    y = x * 2
    z = (y * y).sum()                   # mul saves y
    y.mul_(3)
    with pytest.raises(RuntimeError, match=r"one of the variables needed for gradient computation "
                                           r"has been modified by an inplace operation: \[float64 "
                                           r"\[2\]\], which is output 0 of MulBackward0, is at "
                                           r"version 1; expected version 0 instead"):
        z.backward()


def test_modifying_a_saved_constant_raises(interpreted):
    x = leaf(1.0, 2.0)
    c = gj.tensor(np.array([3.0, 4.0]))
    loss = (x * c).sum()
    c.mul_(2)
    with pytest.raises(RuntimeError, match="which is an input of MulBackward0, is at version 1; "
                                           "expected version 0"):
        loss.backward()


def test_inplace_that_is_not_saved_is_fine(interpreted):
    x = leaf(1.0, 2.0)
    y = x * 2
    w = (y + 1).sum()                   # add does not save y
    y.mul_(5)
    w.backward()
    np.testing.assert_allclose(x.grad.data, [2.0, 2.0])


def test_copy_and_fill(interpreted):
    x = leaf(1.0, 2.0)
    y = x * 1.0
    src = leaf(5.0)
    y.copy_(src)                        # broadcast copy: the gradient flows to src only
    (y * y).sum().backward()
    np.testing.assert_array_equal(x.grad.data, [0.0, 0.0])   # (torch: zeros, not None)
    np.testing.assert_allclose(src.grad.data, [20.0])
    z = gj.tensor(np.ones(3))
    assert np.all(z.fill_(7.0).data == 7.0) and np.all(z.zero_().data == 0.0)


_IDX = np.array([[0, 1, 2, 0], [2, 0, 0, 1]])   # (repeated targets along dim 0)


def _np_scatter(x, dim, index, src, add=False):
    out = x.copy()
    for pos in np.ndindex(index.shape):
        tgt = list(pos)
        tgt[dim] = index[pos]
        v = src[pos] if np.ndim(src) else src
        out[tuple(tgt)] = out[tuple(tgt)] + v if add else v
    return out


def _np_index_add(x, a):
    out = x.copy()
    np.add.at(out, (slice(None), [0, 3, 0]), 2.0 * a[:, :3])
    return out


def _np_index_put(x, a):
    out = x.copy()
    out[[0, 2], [1, 3]] = a[0, :2]
    return out


# name, in-place program of (x, a, b) (self is a non-leaf copy of x, or a constant), NumPy
INPLACE_WITH_ARGUMENTS = [
    ("addcmul_", lambda x, a, b: (x * 1).addcmul_(a, b, value=0.5), lambda x, a, b: x + a * b / 2),
    ("addcdiv_", lambda x, a, b: (x * 1).addcdiv_(a, b, value=-2.0),
     lambda x, a, b: x - 2 * a / b),
    ("lerp_", lambda x, a, b: (x * 1).lerp_(a, b / 10), lambda x, a, b: x + b / 10 * (a - x)),
    ("scatter_", lambda x, a, b: (x * 1).scatter_(0, _IDX, a),
     lambda x, a, b: _np_scatter(x, 0, _IDX, a)),
    ("scatter_-value", lambda x, a, b: (x * 1).scatter_(1, np.array([[0], [3], [1]]), 2.5),
     lambda x, a, b: _np_scatter(x, 1, np.array([[0], [3], [1]]), 2.5)),
    ("scatter_-reduce-add", lambda x, a, b: (x * 1).scatter_(0, _IDX, a, reduce="add"),
     lambda x, a, b: _np_scatter(x, 0, _IDX, a, add=True)),
    ("scatter_add_", lambda x, a, b: (x * 1).scatter_add_(0, _IDX, a),
     lambda x, a, b: _np_scatter(x, 0, _IDX, a, add=True)),
    ("index_add_", lambda x, a, b: (x * 1).index_add_(1, np.array([0, 3, 0]), a[:, :3], alpha=2.0),
     lambda x, a, b: _np_index_add(x, a)),
    ("index_put_", lambda x, a, b: (x * 1).index_put_((np.array([0, 2]), np.array([1, 3])),
                                                      a[0, :2]),
     lambda x, a, b: _np_index_put(x, a)),
    ("addcmul_-constant-self", lambda x, a, b: gj.tensor(np.ones((3, 4))).addcmul_(x, a * b),
     lambda x, a, b: 1 + x * a * b),
    ("lerp_-constant-self", lambda x, a, b: gj.tensor(np.ones((3, 4))).lerp_(x, a),
     lambda x, a, b: 1 + a * (x - 1)),
]


@pytest.mark.parametrize("name,prog,ref", INPLACE_WITH_ARGUMENTS,
                         ids=[c[0] for c in INPLACE_WITH_ARGUMENTS])
def test_inplace_variants_with_tensor_arguments(interpreted, name, prog, ref):
    # the in-place forms optimizers call (v.mul_(b2).addcmul_(g, g, value=1 - b2)) were
    # missing: values against NumPy, gradients against central differences
    from tests.fd import numerical_grad
    rng = np.random.default_rng(3)
    arrays = [rng.normal(size=(3, 4)), rng.normal(size=(3, 4)), rng.normal(size=4) + 3.0]
    W = rng.normal(size=(3, 4))
    ts = [gj.tensor(a, requires_grad=True) for a in arrays]
    y = prog(*ts)
    assert y.requires_grad and y._version == 1
    np.testing.assert_allclose(y.data, ref(*arrays), rtol=1e-12, atol=1e-12)
    (y * W).sum().backward()
    for i, t in enumerate(ts):
        fd = numerical_grad(lambda *a: ref(*a) * W, arrays, i)
        got = np.zeros_like(fd) if t.grad is None else t.grad.data
        np.testing.assert_allclose(got, fd, rtol=1e-6, atol=1e-6, err_msg=f"{name}: input {i}")


def test_inplace_variants_refuse_leaves_and_step_an_optimizer(executor):
    x = leaf(1.0, 2.0)
    for op in (lambda: x.addcmul_(x, x), lambda: x.addcdiv_(x, x), lambda: x.lerp_(x, 0.5),
               lambda: x.scatter_(0, np.array([0]), 1.0)):
        with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used "
                                               "in an in-place operation"):
            op()
    with pytest.raises(NotImplementedError, match="reduce='multiply' is not supported"):
        (x * 1).scatter_(0, np.array([0]), 2.0, reduce="multiply")
    # Adam's moments and update, under no_grad, against NumPy
    p = leaf(0.5, -1.0, 2.0)
    m, v = gj.zeros(3), gj.zeros(3)
    pn, mn, vn = p.data.copy(), np.zeros(3), np.zeros(3)
    for step in range(1, 4):
        p.grad = None
        ((p * p).sum() + p.sin().sum()).backward()
        gn = 2 * pn + np.cos(pn)
        np.testing.assert_allclose(p.grad.data, gn, rtol=1e-12)
        with gj.no_grad():
            m.mul_(0.9).add_(p.grad, alpha=0.1)
            v.mul_(0.999).addcmul_(p.grad, p.grad, value=0.001)
            p.addcdiv_(m, v.sqrt().add_(1e-8), value=-0.01)
        mn = 0.9 * mn + 0.1 * gn
        vn = 0.999 * vn + 0.001 * gn * gn
        pn = pn - 0.01 * mn / (np.sqrt(vn) + 1e-8)
        np.testing.assert_allclose(p.data, pn, rtol=1e-12)
        assert v._version == 2 * step and p._version == step


def test_inplace_shape_mismatch():
    y = gj.tensor(np.ones(3))
    with pytest.raises(RuntimeError, match=r"output with shape \[3\] doesn't match the broadcast "
                                           r"shape \[2, 3\]"):
        y.add_(np.ones((2, 3)))


def test_inference_tensors():
    x = leaf(1.0, 2.0)
    with gj.inference_mode():
        t = x * 2
        assert not t.requires_grad and t.grad_fn is None
    with pytest.raises(RuntimeError, match="Inference tensors cannot be saved for backward"):
        (t * x).sum()
    with pytest.raises(RuntimeError, match="Inplace update to inference tensor outside "
                                           "InferenceMode is not allowed"):
        t.add_(1)


def test_inference_mode_is_thread_local():
    seen = {}

    def worker():
        seen["enabled"] = gj.is_grad_enabled()

    with gj.inference_mode():
        th = threading.Thread(target=worker)
        th.start()
        th.join()
    assert seen["enabled"] is True


def test_detect_anomaly_names_forward_op_and_line(interpreted):
    x = leaf(0.0, 1.0)
    with A.detect_anomaly():
        y = x.sqrt()  # anomaly-line
        z = (y * 0.0).sum()
        with pytest.raises(RuntimeError) as info:
            z.backward()
    msg = str(info.value)
    assert "Function 'SqrtBackward0' returned nan values in its 0th output." in msg
    assert "test_inplace_anomaly.py" in msg and "anomaly-line" in msg
    assert not A.is_anomaly_enabled()


def test_without_anomaly_mode_nan_passes_silently(interpreted):
    x = leaf(0.0, 1.0)
    (x.sqrt() * 0.0).sum().backward()
    assert np.isnan(x.grad.data[0])


def test_detect_anomaly_check_nan_false_lets_nan_through(interpreted):
    # torch: detect_anomaly(check_nan=False) records traces but does not raise on NaN
    for mode in (lambda: A.detect_anomaly(check_nan=False),
                 lambda: A.set_detect_anomaly(True, check_nan=False)):
        x = leaf(0.0, 1.0)
        with mode():
            (x.sqrt() * 0.0).sum().backward()
        assert np.isnan(x.grad.data[0]) and x.grad.data[1] == 0.0
        x = leaf(0.0, 1.0)
        with mode():
            g, = A.grad((x.sqrt() * 0.0).sum(), x, create_graph=True)
        assert np.isnan(g.data[0])


def _anomaly_line(x):
    return (x.sqrt() * 0.0).sum()  # first-line


def _anomaly_other_line(x):
    return (x.sqrt() * 0.0).sum()  # second-line


@pytest.mark.parametrize("create_graph", [False, True])
def test_detect_anomaly_names_the_current_recording_line(interpreted, create_graph):
    # two graphs of one structure share a cached backward plan: the error must name
    # the line that recorded the graph being differentiated, not the first one's
    for f, mark in ((_anomaly_line, "first-line"), (_anomaly_other_line, "second-line")):
        x = leaf(0.0, 1.0)
        with A.detect_anomaly(), pytest.raises(RuntimeError) as info:
            A.grad(f(x), x, create_graph=create_graph)
        assert "SqrtBackward0" in str(info.value) and mark in str(info.value)


def test_set_detect_anomaly_compiled_path():
    x = leaf(0.0, 4.0)
    with A.set_detect_anomaly(True):
        with pytest.raises(RuntimeError, match="SqrtBackward0"):
            (x.sqrt() * 0.0).sum().backward()


def test_mark_dirty_inplace_forward(interpreted):
    class AddOneInPlace(A.Function):
        @staticmethod
        def forward(ctx, a):
            a.data += 1.0
            ctx.mark_dirty(a)
            return a

        @staticmethod
        def backward(ctx, g):
            return g

    x = leaf(1.0, 2.0)
    y = x * 3
    out = AddOneInPlace.apply(y)
    assert out is y and y.grad_fn.name() == "AddOneInPlaceBackward" and y._version == 1
    (y * 2).sum().backward()
    np.testing.assert_allclose(x.grad.data, [6.0, 6.0])
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad has been used in an "
                                           "in-place operation"):
        AddOneInPlace.apply(leaf(1.0))


def test_custom_jvp_is_used_in_forward_mode(interpreted):
    class Scaled(A.Function):
        @staticmethod
        def forward(ctx, a):
            ctx.save_for_backward(a)
            return a * a

        @staticmethod
        def backward(ctx, g):
            (a,) = ctx.saved_tensors
            return g * 2 * a

        @staticmethod
        def jvp(ctx, t):
            (a,) = ctx.saved_tensors
            return t * 2 * a

    x = np.array([1.0, 2.0])
    _, jt = gj.jvp(lambda a: Scaled.apply(a).sum(), (x,), (np.array([1.0, 1.0]),))
    assert np.isclose(jt, 6.0)
    np.testing.assert_allclose(gj.jacfwd(lambda a: Scaled.apply(a))(x), np.diag(2 * x))


def test_setitem_is_a_differentiable_inplace_op(interpreted):
    from tests.fd import numerical_grad

    def forward(x, v):
        y = x * 2
        y[:, 1] = v
        y[0, [0, 0]] = v * 3            # repeated target: the last write wins, as NumPy
        return y * y

    x0, v0 = np.arange(1.0, 7.0).reshape(2, 3), np.array([10.0, 20.0])
    x, v = gj.tensor(x0, requires_grad=True), gj.tensor(v0, requires_grad=True)
    out = forward(x, v)
    ref = 2 * x0
    ref[:, 1] = v0
    ref[0, [0, 0]] = 3 * v0
    np.testing.assert_allclose(out.data, ref ** 2)
    out.sum().backward()

    def f(xa, va):
        return forward(gj.tensor(xa), gj.tensor(va)).data

    np.testing.assert_allclose(x.grad.data, numerical_grad(f, [x0, v0], 0), atol=1e-5)
    np.testing.assert_allclose(v.grad.data, numerical_grad(f, [x0, v0], 1), atol=1e-5)


def test_setitem_rules():
    x = leaf(1.0, 2.0, 3.0)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
        x[0] = 5.0
    with gj.no_grad():
        x[0] = 5.0                      # an optimiser-style update
    assert x.data[0] == 5.0 and x._version == 1
    m = gj.tensor(np.ones(4))
    m[np.array([True, False, True, False])] = 0.0
    np.testing.assert_array_equal(m.data, [0.0, 1.0, 0.0, 1.0])
    # traced arrays take assignments too (tests/runtime/test_tracer_setitem.py): the
    # assigned element no longer depends on a
    np.testing.assert_array_equal(gj.grad(lambda a: _assign(a))(np.ones(3)), [0.0, 1.0, 1.0])


def _assign(a):
    a[0] = 1.0
    return a.sum()
