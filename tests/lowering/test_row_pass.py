"""Row passes (lowering/schedule_rows.py): ``X @ w``, the elementwise work on its result
and the product back through ``X.T`` are one parallel pass over X's rows. Gradients equal
the closed forms (and finite differences); graphs the pass does not fit keep BLAS."""
import numpy as np
import pytest

import gradjit as gj
from gradjit.lowering import blas_cpu
from gradjit.lowering.schedule_rows import ROW_PASS_MIN
from tests.fd import numerical_grad


def _least_squares(w, X, y):
    r = X @ w - y
    return (r * r).mean() + 1e-3 * (w * w).sum()


def _least_squares_grad(w, X, y):
    return 2 * X.T @ (X @ w - y) / X.shape[0] + 2e-3 * w


def _logistic(w, X, y):
    return np.log1p(np.exp(-y * (X @ w))).mean()


def _logistic_t(w, X, y):   # w @ X.T: the product is a row, the gradient c' @ X
    return np.log1p(np.exp(-y * (w @ X.T))).mean()


def _logistic_ref(w, X, y):
    z = -y * (X @ w)
    return np.log1p(np.exp(z)).mean(), X.T @ (-y / (1 + np.exp(-z))) / X.shape[0]


def _fused(src):
    """(row passes, BLAS calls) in a generated module."""
    return src.count("bl.rowdot("), sum(src.count(f"bl.{f}(") for f in ("mm", "mv", "vm"))


@pytest.mark.parametrize("shape, dtype", [((4000, 70), np.float64),     # a partial last block
                                          ((3000, 100), np.float32),
                                          ((2, ROW_PASS_MIN // 2), np.float64)])   # few long rows
def test_least_squares_gradient_is_one_pass_over_x(shape, dtype, rng):
    X = rng.normal(size=shape).astype(dtype)
    y = rng.normal(size=shape[0]).astype(dtype)
    w = rng.normal(size=shape[1]).astype(dtype)
    vg = gj.value_and_grad(_least_squares)   # the loss is a sum in the pass: per block
    assert _fused(vg.graphs(w, X, y)[2]) == (1, 0)
    value, got = vg(w, X, y)
    assert got.dtype == dtype and value.dtype == dtype
    w64, X64, y64 = (a.astype(np.float64) for a in (w, X, y))
    ref = _least_squares_grad(w64, X64, y64)
    tol = 1e-12 if dtype == np.float64 else 2e-4
    assert float(value) == pytest.approx(_least_squares(w64, X64, y64), rel=tol)
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol * np.abs(ref).max())


def test_least_squares_matches_finite_differences(rng):
    X, y, w = rng.normal(size=(3000, 90)), rng.normal(size=3000), rng.normal(size=90)
    np.testing.assert_allclose(gj.grad(_least_squares)(w, X, y),
                               numerical_grad(_least_squares, (w, X, y), 0), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("f", [_logistic, _logistic_t])
def test_logistic_regression_value_and_gradient(f, rng):
    X = rng.normal(size=(5000, 60))
    y = np.where(rng.random(5000) > 0.5, 1.0, -1.0)
    w = 0.1 * rng.normal(size=60)
    vg = gj.value_and_grad(f)
    assert _fused(vg.graphs(w, X, y)[2]) == (1, 0)
    value, grad = vg(w, X, y)
    ref_value, ref_grad = _logistic_ref(w, X, y)
    assert float(value) == pytest.approx(ref_value, rel=1e-13)
    np.testing.assert_allclose(grad, ref_grad, rtol=1e-11, atol=1e-15)


def test_gradient_wrt_the_matrix_too(rng):
    # dX reads the loop's value as well: it is stored for that product, the pass still runs
    X, y, w = rng.normal(size=(3000, 90)), rng.normal(size=3000), rng.normal(size=90)
    g = gj.grad(_least_squares, argnums=(0, 1))
    assert _fused(g.graphs(w, X, y)[2])[0] == 1
    gw, gX = g(w, X, y)
    np.testing.assert_allclose(gw, _least_squares_grad(w, X, y), rtol=1e-12)
    np.testing.assert_allclose(gX, 2 * np.outer(X @ w - y, w) / 3000, rtol=1e-10, atol=1e-16)


def test_tensor_mode_backward(rng):
    X, y = rng.normal(size=(3000, 90)), rng.normal(size=3000)
    w0 = rng.normal(size=90)
    w = gj.tensor(w0, requires_grad=True)
    for _ in range(3):   # a training loop: the second step takes the fast path
        w.grad = None
        loss = _least_squares(w, gj.tensor(X), gj.tensor(y))
        loss.backward()
        np.testing.assert_allclose(w.grad.numpy(), _least_squares_grad(w0, X, y), rtol=1e-12)
        assert float(loss) == pytest.approx(_least_squares(w0, X, y), rel=1e-13)


def test_small_or_unfit_graphs_keep_blas(rng):
    X, y, w = rng.normal(size=(100, 20)), rng.normal(size=100), rng.normal(size=20)
    assert _fused(gj.grad(_least_squares).graphs(w, X, y)[2]) == (0, 2)   # below ROW_PASS_MIN
    X, y, w = rng.normal(size=(3000, 90)), rng.normal(size=3000), rng.normal(size=90)

    def with_max(w, X, y):   # a max over the rows is no sum: the loop cannot be split in blocks
        r = X @ w - y
        return (r * r).max() + (r * r).sum()
    g = gj.grad(with_max)
    assert _fused(g.graphs(w, X, y)[2]) == (0, 2)
    r = X @ w - y
    i = np.argmax(r * r)
    np.testing.assert_allclose(g(w, X, y), 2 * r[i] * X[i] + 2 * X.T @ r, rtol=1e-12)


def test_row_helpers(rng):
    m = rng.normal(size=(5, 37))
    x = rng.normal(size=(37, 1))
    assert blas_cpu.rowdot(m, 3, x) == pytest.approx(float(m[3] @ x[:, 0]), rel=1e-13)
    m[2, 5] = np.nan
    assert np.isnan(blas_cpu.rowdot(m, 2, x))
    p = np.zeros(37)
    blas_cpu.rowaxpy(p, 2.5, m, 1)
    np.testing.assert_array_equal(p, 2.5 * m[1])
    np.testing.assert_allclose(blas_cpu.colsum(m[[0, 1, 3, 4]]), m[[0, 1, 3, 4]].sum(0), rtol=1e-14)


def test_second_order_hessian_vector_product(rng):
    # d/dw (grad(w) . v) = H v = 2 X.T (X v) / n + 2e-3 v: itself a row pass
    X, y = rng.normal(size=(3000, 90)), rng.normal(size=3000)
    w, v = rng.normal(size=90), rng.normal(size=90)
    hvp = gj.grad(lambda w, X, y, v: (gj.grad(_least_squares)(w, X, y) * v).sum())
    assert _fused(hvp.graphs(w, X, y, v)[2]) == (1, 0)
    np.testing.assert_allclose(hvp(w, X, y, v), 2 * X.T @ (X @ v) / 3000 + 2e-3 * v, rtol=1e-11)


def test_graphs_without_large_products_skip_the_analysis(rng, monkeypatch):
    # the analysis runs per candidate product, not per step: an unrolled RNN's thousand
    # steps of small products must not pay for a map of every step's readers each
    from gradjit.lowering import schedule_rows
    calls = []
    real = schedule_rows._readers
    monkeypatch.setattr(schedule_rows, "_readers", lambda steps: calls.append(1) or real(steps))

    def rnn(Wh, h, *xs):
        for x in xs:
            h = np.tanh(x + h @ Wh)
        return (h * h).sum()
    Wh, h = 0.1 * rng.normal(size=(16, 16)), rng.normal(size=(1, 16))
    xs = [rng.normal(size=(1, 16)) for _ in range(40)]
    g = gj.grad(rnn)
    assert "rolled:" in g.graphs(Wh, h, *xs)[2]
    assert calls == []


@pytest.mark.parametrize("f", [_least_squares, _logistic])   # a running sum, a stored one
def test_results_do_not_depend_on_the_thread_count(f, rng):
    # sums over parallel blocks are kept per block and added in block order
    import numba
    X, w = rng.normal(size=(6000, 70)), 0.1 * rng.normal(size=70)
    y = np.where(rng.random(6000) > 0.5, 1.0, -1.0)
    vg = gj.value_and_grad(f)
    value, grad = vg(w, X, y)
    threads = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        value1, grad1 = vg(w, X, y)
    finally:
        numba.set_num_threads(threads)
    assert float(value1) == float(value)
    np.testing.assert_array_equal(grad1, grad)
