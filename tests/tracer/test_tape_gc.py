"""The collector pause of tracer/tape.py: from a long tensor-mode step's entry PAUSE_AT
until its objects are gone, the young generation's threshold is raised; the caller's
thresholds come back then (or when the tape breaks). Counters, not clocks: collections
are counted with ``gc.callbacks``."""
import gc

import numpy as np
import pytest

import gradjit as gj
from gradjit.tracer import tape
from gradjit.tracer.tape import PAUSE_AT, PAUSED_THRESHOLD

CALLERS = (700, 10, 10)


@pytest.fixture
def collector():
    """The collector on with known thresholds (restored afterwards), and a fresh tape."""
    tape.take([])   # whatever an earlier test left on this thread's tape,
    tape.resume()   # and a pause of a long step still alive in it (an import's, a fixture's)
    was, old = gc.isenabled(), gc.get_threshold()
    gc.enable()
    gc.set_threshold(*CALLERS)
    yield
    tape.take([])
    gc.set_threshold(*old)
    gc.enable() if was else gc.disable()


def _leaves(n=8, seed=0):
    rng = np.random.default_rng(seed)
    w = gj.tensor(rng.normal(size=(n, n)) * 0.3, requires_grad=True)
    b = gj.tensor(rng.normal(size=(1, n)) * 0.1, requires_grad=True)
    xs = [gj.tensor(rng.normal(size=(1, n))) for _ in range(60)]   # 4 ops a step: 240
    return w, b, xs


def _rnn(w, b, xs, seen=None):
    h = xs[0]
    for x in xs:
        h = np.tanh(x + h @ w + b)
        if seen is not None:
            seen.append(gc.get_threshold()[0])
    return (h * h).sum()


def _reference(w, b, xs):
    W, B = w.detach().numpy(), b.detach().numpy()
    hs = [xs[0].numpy()]
    for x in xs:
        hs.append(np.tanh(x.numpy() + hs[-1] @ W + B))
    g = 2 * hs[-1]
    gw, gb = np.zeros_like(W), np.zeros_like(B)
    for k in range(len(xs), 0, -1):
        g = g * (1 - hs[k] ** 2)
        gw += hs[k - 1].T @ g
        gb += g
        g = g @ W.T
    return gw, gb


@pytest.mark.parametrize("steps", [1, 3])   # the general backward, then the fast one
def test_a_long_step_raises_the_threshold_until_its_objects_are_gone(collector, steps):
    w, b, xs = _leaves()
    gw, gb = _reference(w, b, xs)
    for _ in range(steps):   # a training loop: each loss is held until the next is made
        w.grad = b.grad = None
        seen = []
        loss = _rnn(w, b, xs, seen)
        k = PAUSE_AT // 4   # the RNN step whose ops reach entry PAUSE_AT
        assert set(seen[k + 1:]) == {PAUSED_THRESHOLD}
        loss.backward()
        assert gc.get_threshold()[0] == PAUSED_THRESHOLD and gc.isenabled()
        np.testing.assert_allclose(w.grad.numpy(), gw, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(b.grad.numpy(), gb, rtol=1e-10, atol=1e-12)
    del loss
    assert gc.get_threshold() == CALLERS


def test_the_first_step_starts_with_the_callers_threshold(collector):
    w, b, xs = _leaves()
    seen = []
    _rnn(w, b, xs, seen)
    assert seen[:PAUSE_AT // 4] == [CALLERS[0]] * (PAUSE_AT // 4)
    assert gc.get_threshold() == CALLERS   # (the step was dropped at once)


@pytest.mark.slow
def test_recorded_steps_run_no_young_collection(collector):
    # With the caller's threshold, each op's objects (tensor, node, lists) would trigger
    # young collections that walk the whole live step (fails without the pause).
    w, b, xs = _leaves()
    _rnn(w, b, xs).backward()   # compiled once
    runs = []

    def count(phase, info):
        if phase == "start":
            runs.append(info["generation"])
    gc.collect()
    gc.callbacks.append(count)
    try:
        held = []
        for _ in range(6):   # steps short of the pause, kept alive: collections run
            held.append(_rnn(w, b, xs[:PAUSE_AT // 4 - 1]))
            tape.take([])
        short = len(runs)
        del held
        gc.collect()
        runs.clear()
        for _ in range(4):
            _rnn(w, b, xs * 3).backward()   # 720 ops; the loss dropped at once
        during = len(runs)
    finally:
        gc.callbacks.remove(count)
    assert short > 0 and during <= 4   # (at most one a step: before its entry PAUSE_AT)


def test_short_steps_leave_the_thresholds_alone(collector):
    x = gj.tensor(np.linspace(-1.0, 1.0, 5))
    w = gj.tensor(np.ones(5), requires_grad=True)
    for _ in range(3):
        (np.tanh(x * w) ** 2).sum().backward()
        assert gc.get_threshold() == CALLERS


@pytest.mark.parametrize("callers", [(0, 10, 10), (200_000, 10, 10), "off"])
def test_the_callers_own_setting_is_kept(collector, callers):
    w, b, xs = _leaves()
    if callers == "off":
        gc.disable()
    else:
        gc.set_threshold(*callers)
    for _ in range(2):
        _rnn(w, b, xs).backward()   # (the loss dropped at once: the step is gone)
        if callers == "off":
            assert not gc.isenabled() and gc.get_threshold() == CALLERS
        else:
            assert gc.get_threshold() == callers and gc.isenabled()


def test_a_step_given_up_restores_the_thresholds(collector):
    w, b, xs = _leaves()

    def failing():
        loss = _rnn(w, b, xs)
        assert gc.get_threshold()[0] == PAUSED_THRESHOLD
        raise ValueError(f"the user's step fails after {loss.shape}")
    try:
        failing()
    except ValueError:
        assert gc.get_threshold()[0] == PAUSED_THRESHOLD   # the traceback holds the step
    # The exception is gone, the step's tensors with its frame, its long entry with them.
    assert gc.get_threshold() == CALLERS


def test_a_step_never_taken_keeps_it_raised_while_it_lives(collector):
    w, b, xs = _leaves()
    loss = _rnn(w, b, xs)
    tape.take([])   # the tape starts over (as a backward of another graph would)
    assert gc.get_threshold()[0] == PAUSED_THRESHOLD
    assert float(loss.detach().numpy()) >= 0.0
    del loss
    assert gc.get_threshold() == CALLERS


def test_a_tape_that_breaks_restores_them(collector):
    w, b, xs = _leaves()
    loss = _rnn(w, b, xs)
    tape.current().clear()   # what an input the tape cannot describe does
    assert gc.get_threshold() == CALLERS
    assert loss.shape == ()


def test_thresholds_changed_meanwhile_are_left_as_set(collector):
    w, b, xs = _leaves()
    _rnn(w, b, xs)
    loss = _rnn(w, b, xs)
    gc.set_threshold(5000, 10, 10)   # the caller's change during the step
    loss.backward()
    del loss
    assert gc.get_threshold() == (5000, 10, 10)


def test_a_first_compile_keeps_no_reference_to_the_users_step(collector):
    """Numba's compile leaves cyclic garbage holding its frames, and each frame its caller's:
    compiled on the caller's stack, the user's step (its tensors, the tape) stayed alive
    until a full collection. With the collector off, only reference counts free it."""
    import weakref
    from gradjit.runtime import tiers
    gc.disable()
    x = gj.tensor(np.random.default_rng(5).normal(size=(3, 11)), requires_grad=True)
    h = (x * 1.25).sinh()   # (a structure no other test compiles: the step compiles)
    alive = weakref.ref(h.grad_fn)   # (the tape's record of the step: its saved arrays)
    with tiers.forced("sync"):
        loss = (h @ h.T).sum()
        gj.reset_stats()
        loss.backward()
    assert gj.stats()["compiles"] >= 1
    del h, loss
    assert alive() is None
