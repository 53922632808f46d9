"""Random draws under tracing (tracer/rng_guard.py) when other threads draw too: another
thread's draws from NumPy's global stream during a trace are not the trace's."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import gradjit as gj
from gradjit.tracer.hooks import Stand
from gradjit.tracer.rng_guard import RandomnessUnderTraceError


def test_another_threads_draws_during_a_trace_are_not_the_traces():
    go, done = threading.Event(), threading.Event()

    def loader():   # a data-loading thread drawing from np.random's global stream
        go.wait(30)
        np.random.normal(size=3)
        done.set()

    t = threading.Thread(target=loader)
    t.start()

    def loss(x):
        go.set()        # (runs while gj.grad traces: the other thread draws meanwhile)
        assert done.wait(30)
        return (x * x).sum()

    try:
        g = gj.grad(loss)(np.arange(3.0))
    finally:
        go.set()
        t.join()
    np.testing.assert_array_equal(g, [0.0, 2.0, 4.0])
    assert not isinstance(np.random.normal, Stand)   # NumPy's own again after the trace


def test_the_traces_own_draw_still_raises_beside_other_threads():
    stop = threading.Event()
    t = threading.Thread(target=stop.wait, args=(30,))
    t.start()
    try:
        with pytest.raises(RandomnessUnderTraceError, match="or another thread"):
            gj.grad(lambda x: (x * np.random.normal()).sum())(np.ones(2))
        with pytest.raises(RandomnessUnderTraceError):   # not through np.random.*: the state
            gj.grad(lambda x: (x * np.random.mtrand._rand.normal()).sum())(np.ones(4))
    finally:
        stop.set()
        t.join()


def test_numba_compiles_np_random_while_a_trace_runs():
    """np.random.* are stand-ins while a trace runs; Numba still types them as NumPy's."""
    import numba

    from gradjit.tracer.rng_guard import rng_guard

    with rng_guard("a trace"):
        assert isinstance(np.random.normal, Stand)

        @numba.njit
        def draws(n):   # (Numba's own generator: NumPy's global stream is not touched)
            np.random.seed(1)
            return np.random.normal(0.0, 1.0, n).sum() + np.random.rand()

        assert np.isfinite(draws(3))
