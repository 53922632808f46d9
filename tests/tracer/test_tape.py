"""The recording tape (tracer/tape.py) and the eager hot path (Tensor._apply).

Counters, not clocks: the usual step's backward takes its key from the tape (no graph
walk), the key equals the walked one, and every case the tape cannot describe falls back
to the walk with the same results.
"""
import numpy as np
import pytest

import gradjit as gj
from gradjit.tracer import record, tape


@pytest.fixture
def walks(monkeypatch):
    """Count graph walks (History(roots)); History.of uses the tape when it can."""
    n = [0]
    init = record.History.__init__

    def counted(self, roots):
        n[0] += 1
        init(self, roots)
    monkeypatch.setattr(record.History, "__init__", counted)
    return n


def _step(x, w, b):
    return (np.tanh(x * w + b) ** 2).sum()


def _leaves(seed=0):
    rng = np.random.default_rng(seed)
    x = gj.tensor(rng.normal(size=(4, 3)))
    w = gj.tensor(rng.normal(size=(3,)), requires_grad=True)
    b = gj.tensor(rng.normal(size=()), requires_grad=True)
    return x, w, b


def _expected(x, w, b):
    t = np.tanh(x.data * w.data + b.data)
    g = 2 * t * (1 - t * t)
    return (g * x.data).sum(0), g.sum()


def test_training_step_backward_takes_the_tape(walks):
    x, w, b = _leaves()
    tape.take([])   # start from an empty tape
    for _ in range(3):
        w.grad = b.grad = None
        _step(x, w, b).backward()
        gw, gb = _expected(x, w, b)
        np.testing.assert_allclose(w.grad.data, gw, rtol=1e-12)
        np.testing.assert_allclose(b.grad.data, gb, rtol=1e-12)
    assert walks[0] == 0


@pytest.mark.parametrize("build", [
    lambda x, w, b: _step(x, w, b),
    lambda x, w, b: (w * w + x * w).sum() * b,                  # a leaf used twice
    lambda x, w, b: ((x @ w) * 0.0 + (x @ w) * -0.0).sum() + b,  # signed zero attributes
    lambda x, w, b: (x * w).sum(1).max() + (w ** 3).mean() - b,
    # output 1 of a two-output op: the key's (position, index) form, not ~position
    lambda x, w, b: np.linalg.slogdet((x * w) @ (x * w).T + 5.0 * np.eye(4))[1] * b,
])
def test_tape_key_equals_the_walked_key(build):
    x, w, b = _leaves(1)
    tape.take([])
    loss = build(x, w, b)
    walked = record.History([loss]).key
    fast = record.History.of([loss])
    assert tape.take([loss]) is None   # History.of took the tape
    assert fast.key == walked


def test_untaken_cases_fall_back_to_the_walk(walks):
    x, w, b = _leaves(2)
    # a side computation that is not part of the loss
    tape.take([])
    side = (w * 2).sum()
    loss = _step(x, w, b)
    loss.backward()
    assert walks[0] == 1
    np.testing.assert_allclose(w.grad.data, _expected(x, w, b)[0], rtol=1e-12)
    # a graph continued after a backward (retain_graph): its first part is on an old tape
    w.grad = None
    h = (x * w).sum()
    h.backward(retain_graph=True)   # the tape holds exactly h's history
    assert walks[0] == 1
    (h * 3).backward()
    assert walks[0] == 2
    np.testing.assert_allclose(w.grad.data, 4 * x.data.sum(0), rtol=1e-12)
    del side


def test_hooks_and_retain_grad_still_seen(walks):
    x, w, b = _leaves(3)
    tape.take([])
    h = x * w
    h.retain_grad()
    seen = []
    h.register_hook(lambda g: seen.append(g.shape))
    (h.sum() * 2).backward()
    assert walks[0] == 0
    np.testing.assert_allclose(h.grad.data, np.full((4, 3), 2.0))
    assert seen == [(4, 3)]


def test_inplace_change_of_a_used_leaf_is_reported_on_the_fast_path():
    x, w, b = _leaves(4)
    tape.take([])
    c = gj.tensor(np.ones(3))
    loss = (w * c).sum()
    c.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


def test_hot_path_keeps_dtypes_and_signed_zero_attributes():
    a = gj.tensor(np.arange(3))           # int64
    for _ in range(2):                     # second time through the cache
        assert (a * 2).dtype == np.int64
        assert (a * 2.0).dtype == np.float64
        assert (a * True).dtype == np.int64
        f = gj.tensor(np.ones(2, np.float32))
        assert (f * 2.0).dtype == np.float32
        z = gj.tensor(np.ones(2))
        assert np.signbit((z * -0.0).data).all() and not np.signbit((z * 0.0).data).any()


def test_tape_holds_no_graph_alive():
    import gc
    import weakref
    x, w, b = _leaves(5)
    tape.take([])
    loss = _step(x, w, b)
    ref = weakref.ref(loss.grad_fn)
    del loss
    gc.collect()
    assert ref() is None
