"""Random draws under tracing beside other threads (tracer/rng_guard.py): np.random's
functions are stand-ins while a trace runs, so another thread drawing from the global
stream meanwhile lets the trace pass, the tracing thread's own draw raises at once, and a
move of the stream nothing saw is refused."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import gradjit as gj
from gradjit.tracer.rng_guard import RandomnessUnderTraceError, StreamMovedError


class _Loader:
    """A thread that draws with ``draw`` each time the traced function asks it to, and
    waits for it: the draw falls inside the trace, deterministically."""

    def __init__(self, draw):
        self.draw, self.out = draw, []
        self.ask, self.done, self.stop = threading.Event(), threading.Event(), False
        self.thread = threading.Thread(target=self._run)
        self.thread.start()

    def _run(self):
        while True:
            self.ask.wait()
            self.ask.clear()
            if self.stop:
                return
            self.out.append(self.draw())
            self.done.set()

    def draw_now(self):   # (called by the traced function)
        self.done.clear()
        self.ask.set()
        assert self.done.wait(30)

    def close(self):
        self.stop = True
        self.ask.set()
        self.thread.join()


@pytest.fixture
def loader(request):
    made = []

    def make(draw):
        made.append(_Loader(draw))
        return made[-1]
    yield make
    for m in made:
        m.close()


@pytest.mark.parametrize("draw", [lambda: np.random.normal(size=3),
                                  lambda: np.random.permutation(5).astype(float),
                                  lambda: np.random.rand(2)])
def test_another_threads_draws_during_the_trace_pass_and_keep_numpys_stream(loader, draw):
    ld = loader(draw)

    def f(x):
        ld.draw_now()
        return (np.sin(x) * x).sum()
    np.random.seed(5)
    g = gj.grad(f)(np.linspace(0.1, 1.0, 4))
    x = np.linspace(0.1, 1.0, 4)
    assert np.allclose(g, np.cos(x) * x + np.sin(x), rtol=1e-12)
    np.random.seed(5)
    assert np.array_equal(ld.out[0], draw())   # the same numbers NumPy's own function gives


def test_the_tracing_threads_own_draw_raises_at_once_naming_the_line(loader):
    loader(lambda: np.random.normal())   # (another thread alive)
    with pytest.raises(RandomnessUnderTraceError, match=r"np\.random\.normal was called") as e:
        gj.grad(lambda x: (x * np.random.normal()).sum())(np.ones(2))
    assert "test_rng_guard_threads.py" in str(e.value)


def test_a_draw_no_stand_in_sees_is_refused_naming_other_threads(loader):
    loader(lambda: None)
    stream = np.random.mtrand._rand   # (not a name gradjit swaps)
    with pytest.raises(StreamMovedError, match="or another thread"):
        gj.grad(lambda x: (x * stream.normal()).sum())(np.ones(2))


def test_another_thread_drawing_through_a_reference_kept_from_before_is_refused(loader):
    kept = np.random.normal   # taken before the trace: NumPy's own function, unseen
    ld = loader(lambda: kept(size=2))

    def f(x):
        ld.draw_now()
        return (x * x).sum()
    with pytest.raises(StreamMovedError, match="or another thread"):
        gj.grad(f)(np.ones(2))
    assert len(ld.out) == 2   # traced twice: once more after letting the threads run


def test_numpys_functions_are_back_after_the_trace():
    before = np.random.normal
    gj.grad(lambda x: (x * x).sum())(np.ones(3))
    assert np.random.normal is before
