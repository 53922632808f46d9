"""Loops and branches written as such (tracer/control_flow.py): gj.scan, gj.fori_loop,
gj.while_loop, gj.cond, gj.checkpoint. Values against plain Python, gradients against
central differences, on the interpreter and on compiled code; the compiled module's size
and compile count do not depend on the trip count."""
import numpy as np
import pytest

import gradjit as gj
from tests.marks import COMPILED_SLOW
from gradjit.runtime import tiers
from tests.counters import lines_and_compiles
from tests.fd import numerical_grad


def _check(f, args, argnums=(0,), rtol=1e-6, atol=1e-8):
    want = f(*args)   # (plain Python: every construct runs eagerly outside a trace)
    np.testing.assert_allclose(gj.jit(f)(*args), want, rtol=1e-12, atol=1e-12)
    for k in argnums:
        got = gj.grad(f, argnums=k)(*args)
        np.testing.assert_allclose(got, numerical_grad(f, args, k), rtol=rtol, atol=atol)


def _rnn(w, xs):
    def step(h, x):
        h = np.tanh(h * w + x)
        return h, h.sum()
    h, ys = gj.scan(step, np.zeros(w.shape), xs)
    return (h ** 2).sum() + (ys * ys).sum()


@pytest.mark.parametrize("shape", [(), (3,), (2, 3)])
def test_scan_value_and_gradient(executor, rng, shape):
    w, xs = rng.normal(size=shape), rng.normal(size=(5,) + shape)
    _check(_rnn, (w, xs), argnums=(0, 1))


def test_scan_reverse_int_carry_and_captured_constant(executor, rng):
    table = np.array([0.5, -1.0, 2.0])   # an array the body closes over: a constant

    def f(w, xs):
        def step(c, x):
            h, k = c
            h = np.sin(h * w) + x * k * table
            return (h, k + 1), h * 2.0
        (h, k), ys = gj.scan(step, (np.ones(3), np.int64(1)), xs, reverse=True)
        return (h ** 2).sum() + (ys ** 3).sum() + k
    _check(f, (rng.normal(size=3), rng.normal(size=(4, 3))), argnums=(0, 1))


def test_scan_pytrees_length_and_no_ys(executor, rng):
    def f(w):
        def step(c, _):
            return {"h": np.sin(c["h"] * w), "n": c["n"] * 0.5}, None
        c, ys = gj.scan(step, {"h": np.ones(3), "n": np.float64(2.0)}, None, length=4)
        assert ys is None
        return (c["h"] ** 2).sum() + c["n"]
    _check(f, (rng.normal(size=3),))


def test_scan_of_length_zero(executor, rng):
    def f(w, xs):
        h, ys = gj.scan(lambda h, x: (h * x, h.sum()), w * 1.0, xs)
        return h.sum() + ys.sum()
    w = rng.normal(size=3)
    np.testing.assert_allclose(gj.grad(f)(w, np.zeros((0, 3))), np.ones(3))


@pytest.mark.slow   # (compiles several graphs; CI runs the slow suites too)
def test_nested_scans_and_second_order(executor, rng):
    def f(w, xs):
        def outer(c, x):
            def inner(h, y):
                return np.tanh(h * w + y * c.sum()), None
            h, _ = gj.scan(inner, x, xs)
            return c + h, h.sum()
        c, ys = gj.scan(outer, np.zeros(3), xs)
        return (c * c).sum() + ys.sum()
    w, xs = rng.normal(size=3), rng.normal(size=(3, 3))
    _check(f, (w, xs), argnums=(0, 1))

    def g(w):
        return (gj.grad(_rnn)(w, xs) ** 2).sum()
    np.testing.assert_allclose(gj.grad(g)(w), numerical_grad(g, (w,), 0, eps=1e-5),
                               rtol=1e-5, atol=1e-7)


def test_fori_loop(executor, rng):
    def f(w):
        return gj.fori_loop(0, 6, lambda i, v: np.tanh(v * w + i * 0.1), np.ones(3)).sum()
    _check(f, (rng.normal(size=3),))
    with pytest.raises(gj.GradjitError, match="Python ints"):
        gj.jit(lambda n, v: gj.fori_loop(0, n, lambda i, v: v, v))(np.int64(3), np.ones(2))


def test_while_loop(executor):
    def f(w):
        return gj.while_loop(lambda v: v[0] < 10.0, lambda v: v * 1.5 + w * w, w * 1.0,
                             max_steps=20).sum()
    _check(f, (np.array([0.5, 0.2, 0.1]),))

    def unbounded(w):
        return gj.while_loop(lambda v: v.sum() < 50, lambda v: v * 2.0, w)
    np.testing.assert_array_equal(gj.jit(unbounded)(np.ones(3)), [32.0, 32.0, 32.0])
    with pytest.raises(gj.GradjitError, match="max_steps"):
        gj.grad(lambda w: unbounded(w).sum())(np.ones(3))


def _doubling(max_steps):
    return lambda a: gj.while_loop(lambda c: c[1] < 5, lambda c: (c[0] * 2, c[1] + 1), (a, 0),
                                   max_steps=max_steps)[0]


@pytest.mark.parametrize("tiering", ["sync", "never"])   # (compiled / interpreted in numba)
@COMPILED_SLOW
def test_while_loop_cut_short_by_max_steps_raises(executor, tiering):
    # cond still true after max_steps steps: the loop once returned the truncated value
    # ([8, 8] for a gradient needing 5 steps: [32, 32]); now a RuntimeError at run time
    short, enough, a = _doubling(3), _doubling(5), np.ones(2)
    msg = (r"gj.while_loop: cond was still true after max_steps=3 steps; raise max_steps"
           r"(?s:.*)at File .*test_control_flow.py")
    with tiers.forced(tiering):
        calls = {"jit": gj.jit(short), "grad": gj.grad(lambda a: short(a).sum()),
                 "value_and_grad": gj.value_and_grad(lambda a: short(a).sum()),
                 "jacfwd": gj.jacfwd(short), "jacrev": gj.jacrev(short),
                 "hessian": gj.hessian(lambda a: (short(a) ** 2).sum()), "eager": short}
        for name, fn in calls.items():
            for _ in range(2):   # (the second call: the compiled hot path)
                with pytest.raises(RuntimeError, match=msg):
                    fn(a)
        np.testing.assert_array_equal(gj.jit(enough)(a), [32.0, 32.0])
        np.testing.assert_array_equal(gj.grad(lambda a: enough(a).sum())(a), [32.0, 32.0])
        np.testing.assert_array_equal(gj.jacrev(enough)(a), 32.0 * np.eye(2))


def test_while_loop_cut_short_inside_a_scan_body_raises(executor):
    def f(x):
        def step(c, _):
            v = gj.while_loop(lambda v: v.sum() < 100.0, lambda v: v * 3.0, c, max_steps=2)
            return v, None
        return gj.scan(step, x, None, length=2)[0].sum()
    with pytest.raises(RuntimeError, match="max_steps=2 steps"):
        gj.grad(f)(np.ones(2))
    with pytest.raises(RuntimeError, match="max_steps=2 steps"):
        gj.jit(f)(np.ones(2))
    np.testing.assert_allclose(gj.jit(f)(np.full(2, 30.0)), 180.0)   # (30 -> 90, then 90)


def test_while_loop_body_does_not_run_after_the_stop(executor):
    # with max_steps the loop is a scan; past the stop the body once still ran and its
    # result was dropped by a where: sqrt of a negative number there made a NaN derivative,
    # and 0 * NaN a NaN gradient. The loop: 2 -> 1.22 -> 0.85 -> 0.59 -> 0.30, stop
    def f(x):
        return gj.while_loop(lambda v: v.sum() > 0.5, lambda v: np.sqrt(v - 0.5), x,
                             max_steps=20).sum()
    x, eps = np.array([2.0]), 1e-6

    def plain(x):
        while x.sum() > 0.5:
            x = np.sqrt(x - 0.5)
        return x.sum()
    np.testing.assert_allclose(gj.grad(f)(x), (plain(x + eps) - plain(x - eps)) / (2 * eps),
                               rtol=1e-6)


def test_while_loop_forward_mode_needs_no_bound(executor):
    # a loop of the values and their tangents (as JAX's): the condition reads the values;
    # a captured array with a tangent (w) and a carried integer (the count) too
    def f(w):
        v, _ = gj.while_loop(lambda c: (c[0].sum() < 6.0) & (c[1] < 9),
                             lambda c: (np.sin(c[0]) * w + c[0] * 1.2, c[1] + 1), (w * 1.0, 0))
        return v

    w, t = np.array([0.5, 0.2, 0.1]), np.array([1.0, -0.5, 0.25])
    value, tangent = gj.jvp(f, (w,), (t,))
    with tiers.forced("never"):
        want = gj.jit(f)(w)
    eps = 1e-6
    np.testing.assert_allclose(value, want, rtol=1e-12)
    fd = (gj.jit(f)(w + eps * t) - gj.jit(f)(w - eps * t)) / (2 * eps)
    np.testing.assert_allclose(tangent, fd, rtol=1e-6)
    np.testing.assert_allclose(gj.jacfwd(f)(w) @ t, tangent, rtol=1e-12)


@COMPILED_SLOW
def test_cond_runs_one_branch_with_its_gradient(executor, rng):
    def f(w, xs):
        def yes(a, b):
            return np.sin(a) * b

        def no(a, b):
            return np.cos(a * w) + b
        return sum(gj.cond(x.sum() > 0, yes, no, w, x).sum() for x in xs)
    xs = np.array([[1.0, 2.0, 0.5], [-1.0, -2.0, 0.5], [0.3, 0.1, 0.2]])
    _check(f, (rng.normal(size=3), xs), argnums=(0, 1))

    def safe_log(x):   # the other branch's log(0) must not reach the gradient
        return gj.cond(x > 0, np.log, lambda x: x * 0.0, x)
    assert gj.grad(safe_log)(np.float64(0.0)) == 0.0
    assert gj.grad(safe_log)(np.float64(2.0)) == 0.5


@COMPILED_SLOW
def test_checkpoint(executor, rng):
    def f(w, x):
        g = gj.checkpoint(lambda a, b: np.tanh(a * b).sum() * np.exp(a).sum())
        return g(w, x) + g(w * 2, x)
    _check(f, (rng.normal(size=3), rng.normal(size=3)), argnums=(0, 1))


def test_tensor_mode_runs_eagerly(rng):
    w = gj.tensor(rng.normal(size=3), requires_grad=True)
    xs = rng.normal(size=(4, 3))
    h, ys = gj.scan(lambda h, x: (gj.tanh(h * w + gj.tensor(x)), (h * h).sum()),
                    gj.zeros(3), xs)
    ((h ** 2).sum() + ys.sum()).backward()
    want = numerical_grad(lambda w: _rnn_like(w, xs), (w.detach().numpy(),), 0)
    np.testing.assert_allclose(w.grad.numpy(), want, rtol=1e-6, atol=1e-8)


def _rnn_like(w, xs):
    h, total = np.zeros(3), 0.0
    for x in xs:
        total += (h * h).sum()
        h = np.tanh(h * w + x)
    return (h ** 2).sum() + total


def test_module_and_compiles_do_not_grow_with_length(rng):
    def loss(w, xs):
        def step(c, x):
            y, z = c
            dy = y * (1.0 - z) * w[0] + x
            dz = z * (y - 1.0) * w[1]
            return (y + 0.01 * dy, z + 0.01 * dz), (y * z).sum()
        (y, z), e = gj.scan(step, (np.ones(8), np.ones(8) * 0.5), xs)
        return (y ** 2).sum() + e.sum()
    w = np.array([1.1, 0.4])
    (l1, c1), (l2, c2) = [lines_and_compiles(lambda: gj.grad(loss), w,
                                             rng.normal(size=(t, 8)) * 0.1) for t in (10, 1000)]
    assert l1 == l2 and c1 == c2 <= 1


def test_errors_name_the_problem():
    with pytest.raises(gj.GradjitError, match="carry must keep"):
        gj.jit(lambda w: gj.scan(lambda c, x: (c.sum(), None), w, None, length=2)[0])(np.ones(3))
    with pytest.raises(gj.GradjitError, match="pair"):
        gj.jit(lambda w: gj.scan(lambda c, x: c, w, None, length=2))(np.ones(3))
    with pytest.raises(gj.GradjitError, match="both branches"):
        gj.jit(lambda w: gj.cond(w.sum() > 0, lambda a: a, lambda a: a.sum(), w))(np.ones(3))
    with pytest.raises(gj.GradjitError, match="length"):
        gj.jit(lambda w: gj.scan(lambda c, x: (c, None), w, None)[0])(np.ones(3))

    def writes_outside(w):
        out = np.zeros(3)

        def step(c, x):
            out[0] = c.sum()
            return c, None
        gj.scan(step, w, None, length=2)
        return out.sum()
    with pytest.raises(gj.GradjitError, match="cannot change outer arrays"):
        gj.jit(writes_outside)(np.ones(3))


@pytest.mark.slow   # (compiles several graphs; CI runs the slow suites too)
def test_forward_mode_through_scan(rng):
    w, xs = rng.normal(size=3), rng.normal(size=(4, 3))

    def f(w):
        return (gj.scan(lambda c, x: (np.tanh(c * w + x), None), np.ones(3), xs)[0] ** 2).sum()
    eps = 1e-5
    want = np.array([(gj.grad(f)(w + eps * e) - gj.grad(f)(w - eps * e)) / (2 * eps)
                     for e in np.eye(3)])
    np.testing.assert_allclose(gj.hessian(f)(w), want, rtol=1e-6, atol=1e-8)
    v = rng.normal(size=3)
    _, t = gj.jvp(f, (w,), (v,))
    np.testing.assert_allclose(t, gj.grad(f)(w) @ v, rtol=1e-10)

    def ys(w):
        return gj.scan(lambda c, x: (np.sin(c * w) + x, c), np.ones(3), xs)[1]
    np.testing.assert_allclose(gj.jacfwd(ys)(w), gj.jacrev(ys)(w), rtol=1e-10, atol=1e-12)


def test_a_strided_first_carry_is_copied_to_c_order_before_the_loop():
    # x.reshape(...)[::-1] is a strided view: as the loop's first carry beside the body's
    # C-ordered results, Numba typed the carry (and the loop's result) strided, and the
    # reshape after the loop failed to compile (found by the random programs, seed 407124).
    from gradjit.runtime import tiers

    def f(x):
        v5 = x.reshape((2, 8))[::-1]
        v6 = gj.fori_loop(0, 3, lambda i, c: np.sin(c) + 0.5 * c * v5, v5)
        return (v6[None, :, 1:2] * 3.0).sum() + (v6 * np.arange(16.0).reshape(2, 8)).sum()

    x = np.random.default_rng(0).random((4, 4))
    with tiers.forced("sync"):
        np.testing.assert_allclose(gj.jit(f)(x), f(x), rtol=1e-13)
        np.testing.assert_allclose(gj.grad(f)(x), numerical_grad(f, [x], 0), rtol=1e-6)


def test_a_changed_structure_is_named_in_the_error(interpreted):
    # (the message once showed the same leaf types twice: "got (float64[3]) where
    # (float64[3]) was expected")
    with pytest.raises(gj.GradjitError, match=r"gj.scan: the carry: the structure differs; "
                                              r"got \(\*, \*\) where \* was expected"):
        gj.jit(lambda x: gj.scan(lambda c, _: ((c, c), None), x, None, length=2)[0])(np.ones(3))
    with pytest.raises(gj.GradjitError, match=r"got \[\*, \*\] where \(\*, \*\) was expected"):
        gj.jit(lambda x: gj.cond(x.sum() > 0, lambda a: (a, a), lambda a: [a, a], x))(np.ones(3))


def test_checkpointed_functions_see_changed_globals_and_closures(executor):
    # (the guard did not walk into gj.checkpoint's wrapper: the values traced first stayed)
    scale = [0.5]
    factor = 0.5

    def body(c):
        return c * factor * scale[0]

    step = gj.checkpoint(body)
    g = gj.grad(lambda w: step(w).sum())
    np.testing.assert_allclose(g(np.ones(2)), [0.25, 0.25])
    scale[0] = 2.0
    np.testing.assert_allclose(g(np.ones(2)), [1.0, 1.0])
    factor = 3.0
    np.testing.assert_allclose(g(np.ones(2)), [6.0, 6.0])


def test_checkpoint_takes_keywords_and_static_arguments(executor):
    f = gj.checkpoint(lambda x, k=1.0, *, p: x * k + x ** p)
    x = np.array([0.5, 2.0])
    np.testing.assert_allclose(f(x, k=3.0, p=2.0), 3 * x + x ** 2)
    np.testing.assert_allclose(gj.grad(lambda x: f(x, k=3.0, p=2.0).sum())(x), 3 + 2 * x)
    np.testing.assert_allclose(gj.grad(lambda x, k: f(x, k=k, p=2.0).sum(), argnums=1)(x, 3.0),
                               x.sum())

    @gj.checkpoint(static_argnums=(1,))
    def powered(x, how):
        return {"square": x * x, "cube": x * x * x}[how]

    np.testing.assert_allclose(gj.grad(lambda x: powered(x, "cube").sum())(x), 3 * x ** 2)
    with pytest.raises(NotImplementedError, match="policy"):
        gj.checkpoint(lambda x: x, policy=object())


def test_loop_and_branch_errors_name_what_the_user_called(interpreted):
    w = np.ones(3)
    with pytest.raises(gj.GradjitError, match=r"gj.fori_loop: the carry must keep .*int64\[\]\) "
                                              r"where \(float64\[\]\)"):
        gj.jit(lambda w: gj.fori_loop(0, 3, lambda i, c: (c * w[i]).astype(np.int64), 0.5))(w)
    with pytest.raises(gj.GradjitError, match=r"gj.cond: the false branch's result .*float32\[3\]"
                                              r".*Make both branches return the same"):
        gj.jit(lambda x: gj.cond(x[0] > 0, lambda x: x, lambda x: x.astype(np.float32), x))(w)
    with pytest.raises(gj.GradjitError, match="gj.while_loop: the loop value"):
        gj.grad(lambda x: gj.while_loop(lambda v: v[0] < 2, lambda v: v.astype(np.float32), x,
                                        max_steps=3).sum())(w)


def test_a_python_number_as_initial_carry_takes_the_bodys_dtype(executor):
    # (JAX's weak types: fori_loop(0, n, body, 0) with a float body accumulates in float)
    w = np.array([1.5, 2.0, 0.5])
    assert float(gj.jit(lambda w: gj.fori_loop(0, 3, lambda i, c: c + w[i], 0))(w)) == 4.0
    np.testing.assert_allclose(
        gj.grad(lambda w: gj.fori_loop(0, 3, lambda i, c: c * w[0] + w[i], 0))(w),
        [3 * w[0] ** 2 + w[1], w[0], 1.0])   # (c3 = w0^3 + w1 w0 + w2)
    c, ys = gj.jit(lambda w: gj.scan(lambda c, x: (c + x, c), 0, w.astype(np.float32)))(w)
    # (a weak int 0 + float32 is float32: a NumPy loop from c = 0, and JAX's scan, agree)
    assert c.dtype == np.float32 and ys.dtype == np.float32
