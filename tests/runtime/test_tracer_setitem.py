"""``x[i] = v`` on traced arrays and preallocated buffers: NumPy's values, exact gradients,
and NumPy's view semantics (an assignment through a view changes its base and its
other views)."""
import numpy as np
import pytest

import gradjit as gj
from tests.fd import numerical_grad


def _fill(x):
    out = np.zeros((3, 2))
    for i in range(3):
        out[i] = x[i] * np.array([1.0, 2.0])
    out[:, 1] += x ** 2
    out[np.array([0, 0]), 0] = x[1:] * 3.0      # repeated index: the last write wins
    out[out.shape[0] - 1] = np.sin(x[:2])
    return out


def _scan(x):
    traj = np.empty((4, x.size))
    traj[0] = x
    for t in range(1, 4):
        traj[t] = traj[t - 1] + 0.1 * np.tanh(traj[t - 1])
    return traj


def _mask(x):
    y = x.copy()
    y[x > 1.5] = 0.0
    y[..., 0] = -y[..., 0]
    return y


@pytest.mark.parametrize("f", [_fill, _scan, _mask], ids=["fill", "scan", "mask"])
def test_assignment_matches_numpy_and_finite_differences(f):
    x = np.array([0.5, 1.25, 2.0])
    np.testing.assert_allclose(gj.jit(f)(x), f(x.copy()))
    w = np.arange(1.0, np.size(f(x)) + 1).reshape(np.shape(f(x)))
    g = gj.grad(lambda x: (f(x) * w).sum())(x)
    np.testing.assert_allclose(g, numerical_grad(lambda x: f(x) * w, [x], 0), rtol=1e-6,
                               atol=1e-8)


def test_traced_mask_takes_any_zero_d_value(executor):
    # a NumPy scalar, a 0-d array or a traced 0-d value is a scalar for x[mask] = v, as a
    # Python float is (np.ndim of the value's shape tuple said 1 and refused them)
    x = np.array([[0.5, 1.25, 2.0], [3.0, -1.0, 1.75]])
    for v in (0.5, np.float64(0.5), np.array(0.5), np.float32(0.25), np.int64(2)):
        def f(b, v=v):
            c = b * 1.0
            c[c > 1.0] = v
            return c
        np.testing.assert_array_equal(gj.jit(f)(x), f(x.copy()))

    def traced(b):
        c = b * 1.0
        c[c > 1.0] = b.sum() * 0.5   # differentiable in b through the value too
        return c * c
    np.testing.assert_allclose(gj.jit(traced)(x), traced(x.copy()))
    w = np.arange(1.0, 7.0).reshape(2, 3)
    g = gj.grad(lambda b: (traced(b) * w).sum())(x)
    np.testing.assert_allclose(g, numerical_grad(lambda b: traced(b) * w, [x], 0), rtol=1e-6,
                               atol=1e-6)


def test_copies_do_not_share_assignments(interpreted):
    def f(x):
        y, z, c = x.copy(), np.array(x), np.copy(x)
        y[0], z[1], c[2] = 10.0, 20.0, 30.0
        a = np.asarray(x)            # the same array: shares the assignment
        a[0] = -1.0
        return x, y, z, c
    x = np.array([1.0, 2.0, 3.0])
    for got, want in zip(gj.jit(f)(x), f(x.copy())):
        np.testing.assert_allclose(got, want)


def _stale_view(x):
    x = x * 1.0
    row = x[0]
    x[0, 1] = 5.0                  # row sees it
    return row * 2 + x[1]


def _through_reshape(x):
    mask = np.ones(x.shape)
    mask.reshape(-1)[:2] = 0.0     # writes mask
    return x * mask


def _transposed(x):
    y = x * 1.0
    y.T[0] = 7.0                   # column 0 of y
    z = y.T.reshape(-1)            # NumPy copies here: z is independent
    z[0] = -1.0
    return y, z


def _nested(x):
    y = x * 1.0
    v = y[:, 1:]
    w = v[0]
    w[0] = x[0, 0] * 3             # y[0, 1], v[0, 0] and w[0] all change
    return y.sum() + v.sum() * 2 + w.sum() * 4


@pytest.mark.parametrize("f", [_stale_view, _through_reshape, _transposed, _nested])
def test_views_share_assignments_as_numpy_views_do(f):
    x = np.arange(6.0).reshape(2, 3) + 1
    got, want = gj.jit(f)(x), f(x.copy())
    for g, w in zip(got if isinstance(got, tuple) else [got], want if isinstance(want, tuple)
                    else [want]):
        np.testing.assert_allclose(g, w)
    if not isinstance(want, tuple):
        wt = np.arange(1.0, np.size(want) + 1).reshape(np.shape(want))
        np.testing.assert_allclose(gj.grad(lambda x: (f(x) * wt).sum())(x),
                                   numerical_grad(lambda x: f(x) * wt, [x], 0), rtol=1e-6)


def test_read_only_views_refuse_assignment(interpreted):
    def f(x):
        b = np.broadcast_to(x[0], (2, 3))
        b[0, 0] = 1.0
        return b
    with pytest.raises(ValueError, match="read-only"):
        gj.jit(f)(np.ones((2, 3)))


def test_traced_index_and_outside_arrays_are_clear_errors(interpreted):
    x = np.arange(3.0)
    # a traced integer index assigns (tests/runtime/test_setitem_traced_index.py); one
    # inside a list does not
    np.testing.assert_array_equal(gj.jit(lambda x, i: (lambda y: (y.__setitem__(i, 1.0), y)[1])(
        x * 1.0))(x, np.array([2])), [0.0, 1.0, 1.0])
    with pytest.raises(gj.GradjitError, match="traced index"):
        gj.jit(lambda x, i: (lambda y: (y.__setitem__([i], 1.0), y)[1])(x * 1.0))(x, np.array(1))
    ints = np.zeros(3, dtype=np.int64)

    def into_int_buffer(x):
        out = np.zeros(3, dtype=np.int64)
        out[0] = x[0]
        return out
    with pytest.raises(gj.GradjitError, match="cannot be stored into a NumPy array") as e:
        gj.jit(into_int_buffer)(x)
    assert isinstance(e.value, ValueError) and "out[0] = x[0]" in str(e.value)
    assert not ints.any()


def test_library_arrays_stay_arrays_inside_a_trace(interpreted):
    x = np.array([1.0, 2.0])
    np.testing.assert_allclose(gj.jit(lambda x: np.pad(x, 1) + np.zeros(4, dtype=int))(x),
                               [0.0, 1.0, 2.0, 0.0])
    assert isinstance(np.zeros(2), np.ndarray)      # outside a trace: NumPy's own


# -- x op= y: NumPy writes the result into x's own memory -----------------------------------
def _normalize_(v):
    v /= np.linalg.norm(v)   # (an in-place helper: the caller's array changes)


def _helper_in_place(x):
    y = x.copy()
    _normalize_(y)
    return y * np.arange(1.0, 5.0)


def _through_slice(x):
    y = x * 1.0
    v = y[1:]
    v *= 2.0
    v -= x[:-1]
    return y


def _through_reshape_and_reverse(x):
    y = x.copy()
    m = y.reshape(2, 2)
    m **= 2
    r = y[::-1]
    r += np.sin(x)
    return y


def _row_of_a_buffer(x):
    out = np.zeros((2, 4))
    row = out[1]
    row += x
    row /= 3.0
    return out


def _alias_and_stale_view(x):
    y = x * 1.0
    head = y[:2]           # a view of y: sees the change below
    z = y                  # the same array
    z *= x
    return np.concatenate([y, head])


def _int_array(x):
    k = (x > 2.5).astype(np.int64)
    k += 1
    k *= 3
    return x * k


def _scalars_are_copies(x):
    # NumPy: ``y[i]`` of a vector and ``a[()]`` are scalars (copies); ``m[i]`` of a matrix,
    # ``for row in m`` and ``v[..., i]`` are views (a scalar once wrote through: wrong values)
    y = x.copy()
    last = y[-1]
    last *= 1.5
    m = np.outer(x, x)
    s = m[1, 0]
    s *= 3.0
    for v in x:
        v += 1.0
    for row in m:
        row += 1.0
    e = m[0][..., 1]
    e += 10.0
    c = y.sum()[()]
    c += 1.0
    return np.concatenate([y + last, m.reshape(-1) * s, (c + x)[:1]])


@pytest.mark.parametrize("f", [_helper_in_place, _through_slice, _through_reshape_and_reverse,
                               _row_of_a_buffer, _alias_and_stale_view, _int_array,
                               _scalars_are_copies])
def test_augmented_assignment_writes_into_the_array_as_numpy(f, interpreted):
    # (``v *= 2`` on a view once only rebound the name: the base kept its old values)
    x = np.array([1.0, 2.0, 3.0, 4.0])
    np.testing.assert_allclose(gj.jit(f)(x), f(x.copy()), rtol=1e-13)
    w = np.arange(1.0, np.size(f(x)) + 1).reshape(np.shape(f(x)))
    np.testing.assert_allclose(gj.grad(lambda x: (f(x) * w).sum())(x),
                               numerical_grad(lambda x: f(x) * w, [x], 0), rtol=1e-6, atol=1e-8)


def test_augmented_assignment_compiled():
    x = np.array([1.0, 2.0, 3.0, 4.0])
    f = _through_slice
    np.testing.assert_allclose(gj.grad(lambda x: (f(x) ** 2).sum())(x),
                               numerical_grad(lambda x: f(x) ** 2, [x], 0), rtol=1e-6)


def test_augmented_assignment_refuses_what_numpy_refuses(interpreted):
    x = np.array([1.0, 2.0, 3.0])

    def grows(x):
        y = x[:1] * 1.0
        y += x             # (1,) += (3,): NumPy cannot broadcast into y
        return y

    def to_int(x):
        k = (x > 1.0).astype(np.int64)
        k += x             # float into int: not 'same_kind'
        return k
    with pytest.raises(ValueError, match="non-broadcastable output operand"):
        gj.jit(grows)(x)
    with pytest.raises(TypeError, match="same_kind"):
        gj.jit(to_int)(x)
    with pytest.raises(ValueError, match="read-only"):
        gj.jit(lambda x: np.broadcast_to(x, (2, 3)).__iadd__(1.0))(x)

    def outer_in_body(x):
        acc = x * 1.0

        def body(c, xi):
            c += xi            # a carry: the body's own
            return c, c * acc
        total, _ = gj.scan(body, x * 0.0, np.stack([x, x]))
        acc += total       # fine: outside the body
        return acc
    np.testing.assert_allclose(gj.jit(outer_in_body)(x), 3 * x)

    def writes_outer(x):
        acc = x * 1.0

        def body(c, xi):
            nonlocal acc
            acc += xi
            return c, c
        gj.scan(body, x, np.stack([x, x]))
        return acc
    with pytest.raises(gj.GradjitError, match="a body cannot change outer arrays"):
        gj.jit(writes_outer)(x)
