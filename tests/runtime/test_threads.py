"""Threads: products as blocks over Numba's threads, BLAS on one thread meanwhile, thread
counts sized from the free cores (runtime/threads.py, lowering/blas_cpu.py)."""
import itertools
import threading

import numba
import numpy as np
import pytest

import gradjit as gj
from gradjit.lowering import blas_cpu as bl
from gradjit.runtime import threads

threadpoolctl = pytest.importorskip("threadpoolctl")


def _layouts(x):
    """x as a C array, an F array, and a transposed view of a C array (F layout)."""
    return [np.ascontiguousarray(x), np.asfortranarray(x), np.ascontiguousarray(x.T).T]


@pytest.mark.parametrize("dt", [np.float64, np.float32])
@pytest.mark.parametrize("mkn", [(3, 4, 5), (1, 4, 5), (3, 1, 5), (3, 4, 1), (1, 1, 1),
                                 (0, 3, 4), (3, 0, 4), (3, 4, 0), (300, 40, 100),
                                 (70, 90, 300), (513, 65, 7), (7, 65, 513)])
def test_blocked_product_matches_numpy(mkn, dt, rng):
    m, k, n = mkn
    a0, b0 = rng.standard_normal((m, k)).astype(dt), rng.standard_normal((k, n)).astype(dt)
    tol = dict(rtol=1e-4, atol=1e-4) if dt == np.float32 else dict(rtol=1e-12, atol=1e-12)
    before = numba.get_num_threads()
    try:
        for (a, b), nt in itertools.product(itertools.product(_layouts(a0), _layouts(b0)),
                                            (1, 2, 3)):
            numba.set_num_threads(min(nt, numba.config.NUMBA_NUM_THREADS))
            r = bl.mm(a, b)
            assert r.shape == (m, n) and r.dtype == dt and r.flags.c_contiguous
            np.testing.assert_allclose(r, a0 @ b0, **tol)
    finally:
        numba.set_num_threads(before)


def _blas_threads():
    return [i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"]


def test_threaded_call_runs_blas_on_one_thread_and_restores():
    import scipy.linalg.cython_blas  # noqa: F401 - the library compiled code calls
    seen = {}

    def body(x):
        seen["blas"] = _blas_threads()
        seen["numba"] = numba.get_num_threads()
        return x + 1

    call = threads.threaded(body, True)
    before_blas, before_numba = _blas_threads(), numba.get_num_threads()
    assert call(1) == 2
    assert seen["blas"] and set(seen["blas"]) == {1}
    assert 1 <= seen["numba"] <= before_numba
    assert _blas_threads() == before_blas and numba.get_num_threads() == before_numba
    assert call.native is body


def test_threaded_call_restores_after_an_error():
    before_blas, before_numba = _blas_threads(), numba.get_num_threads()

    def boom():
        raise ValueError("inside")
    with pytest.raises(ValueError, match="inside"):
        threads.threaded(boom, True)()
    assert _blas_threads() == before_blas and numba.get_num_threads() == before_numba


def test_fixed_thread_count(monkeypatch):
    monkeypatch.setattr(threads.cores, "fixed", None)
    gj.set_num_threads(1)
    try:
        seen = []
        threads.threaded(lambda: seen.append(numba.get_num_threads()), False)()
        assert seen == [1]
        assert gj.stats()["threads"]["fixed"] is True
    finally:
        gj.set_num_threads(None)
    for bad in (0, -1, 1.5, "2"):
        with pytest.raises(ValueError, match="set_num_threads"):
            gj.set_num_threads(bad)


class _FakeClock:
    """/proc/stat busy seconds and this process's CPU seconds, advanced by hand."""
    def __init__(self):
        self.busy = self.own = 0.0


@pytest.mark.parametrize("others,expect", [(0.0, 2), (0.1, 2), (0.6, 1), (1.0, 1), (1.9, 1),
                                           (3.0, 1)])
def test_free_cores_from_other_processes_load(monkeypatch, others, expect):
    c = threads._Cores()
    c.cpus, c.cap, c.fixed = [0, 1], 2, None
    clock = _FakeClock()
    monkeypatch.setattr(c, "busy_seconds", lambda: clock.busy)
    monkeypatch.setattr(threads.time, "process_time", lambda: clock.own)
    assert c.sample(10.0) == 2                      # no window yet: the allowed count
    clock.busy += 1.0 * (others + 0.8) * 0.5        # over 0.5 s: others, and 0.8 core of ours
    clock.own += 0.8 * 0.5
    assert c.sample(10.5) == expect
    assert c.sample(10.55) == expect                # within the window: no new sample


def test_free_cores_never_exceed_the_allowed_count():
    k = threads.cores()
    assert 1 <= k <= threads.cores.cap <= numba.config.NUMBA_NUM_THREADS


def _mlp_loss(W1, W2, X):
    return (np.tanh(X @ W1) @ W2).sum() ** 2 / X.shape[0]


def _mlp_grad_numpy(W1, W2, X):
    h = np.tanh(X @ W1)
    s = (h @ W2).sum()
    g = 2 * s / X.shape[0]
    dW2 = h.sum(0)[:, None] * g * np.ones((1, W2.shape[1]))
    dh = g * np.ones((X.shape[0], W2.shape[1])) @ W2.T
    return X.T @ (dh * (1 - h * h)), dW2


@pytest.mark.parametrize("nthreads", [1, 2])
def test_large_products_give_the_same_gradient_on_any_thread_count(nthreads, rng):
    W1, W2 = rng.standard_normal((96, 80)) / 10, rng.standard_normal((80, 70)) / 10
    X = rng.standard_normal((120, 96))
    assert X.shape[0] * 96 * 80 >= bl.PAR_MIN // 2    # products split over threads
    gj.set_num_threads(nthreads)
    try:
        got = gj.grad(_mlp_loss, argnums=(0, 1))(W1, W2, X)
        t = [gj.from_numpy(a) for a in (W1, W2, X)]
        t[0].requires_grad_(), t[1].requires_grad_()
        (gj.tanh(t[2] @ t[0]) @ t[1]).sum().pow(2).div(X.shape[0]).backward()
    finally:
        gj.set_num_threads(None)
    ref = _mlp_grad_numpy(W1, W2, X)
    for g, r in zip(got, ref):
        np.testing.assert_allclose(g, r, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(t[0].grad, ref[0], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(t[1].grad, ref[1], rtol=1e-10, atol=1e-12)


def test_threads_share_blas_setting_and_restore_it(rng):
    """Four threads computing gradients with large products at once: all right, and the
    BLAS libraries' own thread counts are back when the last one ends."""
    W1, W2 = rng.standard_normal((96, 80)) / 10, rng.standard_normal((80, 70)) / 10
    X = rng.standard_normal((120, 96))
    g = gj.grad(_mlp_loss, argnums=(0, 1))
    g(W1, W2, X)
    before = _blas_threads()
    ref = _mlp_grad_numpy(W1, W2, X)
    bad = []

    def work():
        for _ in range(20):
            for a, r in zip(g(W1, W2, X), ref):
                if not np.allclose(a, r, rtol=1e-10, atol=1e-12):
                    bad.append(1)
    ts = [threading.Thread(target=work) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not bad
    assert _blas_threads() == before and threads.blas.depth == 0
