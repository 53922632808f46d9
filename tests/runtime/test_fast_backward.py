"""``loss.backward()`` straight from the tape (runtime/fast_backward.py).

From the second step of a structure on, a plain backward of a deferred step is a key
lookup and one compiled call. Every case here runs a few steps and checks the results
against NumPy, and that anything the fast path does not handle (hooks, retain_grad,
in-place writes, anomaly mode, changed requires_grad, a second backward) gives what the
general path gives; intermediates the caller holds keep their recorded values.
"""
import numpy as np
import pytest

import gradjit as gj


pytestmark = pytest.mark.usefixtures("fresh_tape")


def _setup(rng):
    x = gj.tensor(rng.normal(size=(5, 3)))
    w = gj.tensor(rng.normal(size=(3,)), requires_grad=True)
    b = gj.tensor(rng.normal(size=()), requires_grad=True)
    return x, w, b


def _loss(x, w, b):
    return (np.tanh(x * w + b) ** 2).sum()


def _ref(x, w, b):
    t = np.tanh(x.data * w.data + b.data)
    d = 2 * t * (1 - t * t)
    return (t * t).sum(), (d * x.data).sum(0), d.sum()


def test_steps_hit_and_match_numpy(rng, fast):
    x, w, b = _setup(rng)
    for step in range(4):
        w.grad = b.grad = None
        loss = _loss(x, w, b)
        loss.backward()
        v, gw, gb = _ref(x, w, b)
        np.testing.assert_allclose(loss.data, v, rtol=1e-13)
        np.testing.assert_allclose(w.grad.data, gw, rtol=1e-12)
        np.testing.assert_allclose(b.grad.data, gb, rtol=1e-12)
        assert loss.grad_fn.freed and w.grad.shape == (3,) and b.grad.shape == ()
        with gj.no_grad():
            w.sub_(0.1 * w.grad)   # a training step: new values, same structure
    assert fast[0] == 3
    # .grad accumulates across backward calls, as in torch
    w.grad = b.grad = None
    _loss(x, w, b).backward()
    _loss(x, w, b).backward()
    np.testing.assert_allclose(w.grad.data, 2 * _ref(x, w, b)[1], rtol=1e-12)
    assert fast[0] == 5
    # the graph is freed: a second backward raises torch's error
    loss = _loss(x, w, b)
    loss.backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        loss.backward()


def test_what_the_fast_path_leaves_to_the_general_one(rng, fast, monkeypatch):
    x, w, b = _setup(rng)
    _loss(x, w, b).backward()
    _loss(x, w, b).backward()
    assert fast[0] >= 1   # (2 when an earlier test compiled this structure)
    n = fast[0]
    # a hook on a leaf
    seen = []
    h = w.register_hook(lambda g: seen.append(g.data.copy()))
    w.grad = None
    _loss(x, w, b).backward()
    np.testing.assert_allclose(seen[0], _ref(x, w, b)[1], rtol=1e-12)
    h.remove()
    # retain_grad on an intermediate, and a live pending intermediate
    u = x * w + b
    u.retain_grad()
    (np.tanh(u) ** 2).sum().backward()
    t = np.tanh(x.data * w.data + b.data)
    np.testing.assert_allclose(u.grad.data, 2 * t * (1 - t * t), rtol=1e-12)
    assert fast[0] == n
    u = x * w + b    # a live intermediate: the fast path computes it as recorded
    w.grad = None
    (np.tanh(u) ** 2).sum().backward()
    np.testing.assert_allclose(u.data, x.data * w.data + b.data, rtol=1e-15)
    np.testing.assert_allclose(w.grad.data, _ref(x, w, b)[1], rtol=1e-12)
    assert fast[0] == n + 1
    n += 1
    # b stops requiring grad: another key
    b.requires_grad_(False)
    w.grad = b.grad = None
    _loss(x, w, b).backward()
    assert b.grad is None
    np.testing.assert_allclose(w.grad.data, _ref(x, w, b)[1], rtol=1e-12)
    b.requires_grad_(True)
    # an in-place write to a leaf a saved value needs, between forward and backward
    assert fast[0] == n
    for _ in range(2):
        (x * w * w).sum().backward()
    assert fast[0] == n + 1
    n = fast[0]
    loss = (x * w * w).sum()
    with gj.no_grad():
        w.mul_(1.5)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()
    # ... and between two uses in one step of a known structure: the later use saw the
    # new version, the first (whose saved value the backward needs) the old one
    def two_uses(write):
        loss = (w * w).sum()
        if write:
            with gj.no_grad():
                w.mul_(1.0)
        return loss + (x * w).sum()
    for _ in range(2):
        w.grad = None
        two_uses(False).backward()
    assert fast[0] == n + 1
    n = fast[0]
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        two_uses(True).backward()
    # anomaly mode runs node by node
    with gj.autograd.detect_anomaly():
        w.grad = None
        _loss(x, w, b).backward()
    np.testing.assert_allclose(w.grad.data, _ref(x, w, b)[1], rtol=1e-12)
    assert fast[0] == n   # none of the above took the fast path
    # the interpreter switch is part of the key
    monkeypatch.setenv("GRADJIT_EXECUTOR", "numpy")
    for _ in range(2):
        w.grad = None
        _loss(x, w, b).backward()
        np.testing.assert_allclose(w.grad.data, _ref(x, w, b)[1], rtol=1e-12)
    assert fast[0] == n + 1


def test_gradients_never_share_memory(rng, fast):
    # both gradients are one value of the graph (and the seed broadcast): each .grad is
    # its own array all the same
    w = gj.tensor(rng.normal(size=(4,)), requires_grad=True)
    b = gj.tensor(rng.normal(size=(4,)), requires_grad=True)
    for _ in range(3):
        w.grad = b.grad = None
        (w + b).sum().backward()
        w.grad.data[...] = 7.0
        np.testing.assert_array_equal(b.grad.data, np.ones(4))
    assert fast[0] >= 2


def test_pending_nodes_set_every_slot(rng):
    # a pending node is built slot by slot (Tape.push and Tensor._apply), not by __init__
    from gradjit.tracer.gradfn import GradFn
    a = GradFn("mul.Tensor", {}, [], (((2,), np.dtype("f8")),), None, None)
    w = gj.tensor(rng.normal(size=(2,)), requires_grad=True)
    y = w * w
    assert y._data is None
    b = y.grad_fn
    for name in GradFn.__slots__:
        if name != "__weakref__":
            assert hasattr(b, name) or not hasattr(a, name), name


def test_tensors_and_replayed_nodes_set_every_slot(rng, fast):
    """Tensors of the hot paths (a pending one, a gradient, a recorded one) and a node
    of a replayed step are made slot by slot (tracer/tensor.py, tracer/replay.py)."""
    from gradjit.tracer import tape
    from gradjit.tracer.gradfn import GradFn
    from gradjit.tracer.tensor import Tensor, _recorded, plain_tensor
    w = gj.tensor(rng.normal(size=(2,)), requires_grad=True)
    for _ in range(4):
        w.grad = None
        (w * w).sum().backward()
    assert tape.current().exp is not None   # the next step replays
    y = w * w
    assert y._data is None and tape.current().exp is not None and fast[0] >= 2
    made = [y, plain_tensor(np.ones(2)), _recorded(np.ones(2), None), w.grad]
    for t in made:
        for name in Tensor.__slots__:
            if name != "__weakref__":
                assert hasattr(t, name), name
    ref = GradFn("mul.Tensor", {}, [], (((2,), np.dtype("f8")),), None, None)
    for name in GradFn.__slots__:
        if name != "__weakref__":
            assert hasattr(y.grad_fn, name) or not hasattr(ref, name), name


def test_hook_registered_after_the_forward_from_another_thread(rng, fast):
    """A hook on an intermediate, registered from another thread once the step is
    recorded, still runs: its node's tape is marked wherever the hook comes from."""
    import threading
    x, w, b = _setup(rng)
    for _ in range(2):
        w.grad = b.grad = None
        _loss(x, w, b).backward()
    n = fast[0]
    assert n >= 1
    u = x * w + b
    loss = (np.tanh(u) ** 2).sum()
    seen = []
    th = threading.Thread(target=lambda: u.register_hook(lambda g: seen.append(g.data.copy())))
    th.start()
    th.join()
    w.grad = b.grad = None
    loss.backward()
    t = np.tanh(x.data * w.data + b.data)
    np.testing.assert_allclose(seen[0], 2 * t * (1 - t * t), rtol=1e-12)
    np.testing.assert_allclose(w.grad.data, _ref(x, w, b)[1], rtol=1e-12)
    assert fast[0] == n   # the general path ran the hook
    w.grad = b.grad = None
    _loss(x, w, b).backward()   # the next step's tape is plain again
    assert fast[0] == n + 1


def test_leaf_data_replaced_after_its_use(rng, fast):
    """``w.data = ...`` between forward and backward: the tape's record of w's type no
    longer holds, so the step leaves the fast path; the recorded values are those of the
    old data, as eager ops would have computed them."""
    x, w, _ = _setup(rng)
    for _ in range(2):
        w.grad = None
        (x * w).sum().backward()
    n = fast[0]
    old = w.data
    loss = (x * w).sum()
    w.data = np.concatenate([old, old])[:3] * 2.0
    w.grad = None
    loss.backward()
    assert fast[0] == n
    np.testing.assert_allclose(loss.data, (x.data * old).sum(), rtol=1e-13)
    np.testing.assert_allclose(w.grad.data, x.data.sum(0), rtol=1e-13)
    # a new shape: the next step records it and compiles for it
    w.data = np.ones(1)
    w.grad = None
    for _ in range(2):
        w.grad = None
        (x * w).sum().backward()
        np.testing.assert_allclose(w.grad.data, [x.data.sum()], rtol=1e-13)
    assert fast[0] == n + 1


def test_threads_train_on_their_own_tapes(rng, fast):
    """Each thread records on its own tape: concurrent training steps all take the fast
    path after their first and match NumPy."""
    import threading
    cases = [_setup(np.random.default_rng(seed)) for seed in range(3)]
    errors = []

    def train(x, w, b):
        try:
            for _ in range(30):
                w.grad = b.grad = None
                _loss(x, w, b).backward()
                _, gw, gb = _ref(x, w, b)
                np.testing.assert_allclose(w.grad.data, gw, rtol=1e-12)
                np.testing.assert_allclose(b.grad.data, gb, rtol=1e-12)
        except Exception as e:   # noqa: BLE001 (reported by the main thread)
            errors.append(e)
    threads = [threading.Thread(target=train, args=c) for c in cases]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert not errors, errors
    assert fast[0] >= 3 * 28   # (the first step of each thread may compile or look up)


def test_the_call_forms_of_a_hit(rng, fast, monkeypatch):
    """A hit calls the compiled function with the leaves' arrays first when it takes every
    leaf in slot order (``_lead``), else argument by argument, else through the
    Executable: every form gives the general path's gradients, accumulated onto a
    ``.grad`` already there."""
    from gradjit.runtime import fast_backward as fb
    x, w, b = (gj.tensor(rng.normal(size=(4,)), requires_grad=i > 0) for i in range(3))
    for form in ("lead", "direct", "executable"):
        fb.forget()
        for step in range(3):
            w.grad = b.grad = None
            _loss(x, w, b).backward()
            if step == 0:   # registered: make the entry take the form under test
                (k, entry), = fb._FAST.items()
                assert entry[3] is not None and entry[5] == (1, 2)   # the lead, plain form
                if form != "lead":
                    entry = entry[:3] + (None,) + entry[4:]
                if form == "executable":
                    entry = entry[:2] + (None,) + entry[3:]
                fb._FAST[k] = entry
            _loss(x, w, b).backward()   # onto the .grad of the call before
            t = np.tanh(x.data * w.data + b.data)
            d = 2 * t * (1 - t * t)   # (elementwise: no sums, unlike _ref's)
            np.testing.assert_allclose(w.grad.data, 2 * d * x.data, rtol=1e-12)
            np.testing.assert_allclose(b.grad.data, 2 * d, rtol=1e-12)
    assert fast[0] == 3 * 5


def test_lead_needs_every_leaf_first_in_slot_order():
    from gradjit.runtime.fast_backward import _lead

    class Exe:
        consts = "consts"
    assert _lead(((0, None), (1, None), (-1, 2.5)), 2, Exe) == (2.5, "consts")
    assert _lead(((0, None), (1, None)), 2, Exe) == ("consts",)
    assert _lead(((1, None), (0, None), (-1, 2.5)), 2, Exe) is None    # another order
    assert _lead(((0, None), (-1, 2.5), (1, None)), 2, Exe) is None    # a constant first
    assert _lead(((0, None), (-1, 2.5)), 2, Exe) is None               # a leaf not taken
    assert _lead(None, 2, Exe) is None                                 # no direct form


def _counted_take():
    """Wrap the written-out backward of the tape's expectation: [steps it took, refused]."""
    from gradjit.tracer import tape
    ex = tape.current().exp
    assert ex is not None and ex.take is not None
    take, seen = ex.take, [0, 0]

    def counted(tp, root):
        out = take(tp, root)
        seen[0 if out else 1] += 1
        return out
    ex.take = counted
    return seen


def test_small_replayed_steps_take_the_written_out_backward(rng, fast):
    """A small step replayed whole takes ``_taker``'s backward, also when a value was read
    on the way (then freed); one holding a tensor of the step is refused by it and taken
    by the loop. Both right."""
    x, w, b = _setup(rng)
    for _ in range(3):
        w.grad = b.grad = None
        _loss(x, w, b).backward()
    seen, n = _counted_take(), fast[0]
    for step in range(3):
        if step:   # accumulates onto the .grad of the step before
            w.grad = b.grad = None
        loss = _loss(x, w, b)
        loss.backward()
        v, gw, gb = _ref(x, w, b)
        np.testing.assert_allclose(loss.data, v, rtol=1e-13)
        np.testing.assert_allclose(w.grad.data, gw * (1 + (step == 0)), rtol=1e-12)
        np.testing.assert_allclose(b.grad.data, gb * (1 + (step == 0)), rtol=1e-12)
        assert loss.grad_fn.freed and b.grad.data.shape == () and b.grad.dtype == np.float64
    assert seen == [3, 0]
    w.grad = b.grad = None
    t = np.tanh(x * w + b)          # held: its value is computed as recorded
    loss = (t ** 2).sum()
    loss.backward()
    np.testing.assert_allclose(t.data, np.tanh(x.data * w.data + b.data), rtol=1e-14)
    w.grad = b.grad = None
    u = x * w
    u.data                          # read on the way, then dropped
    loss = (np.tanh(u + b) ** 2).sum()
    node = u.grad_fn
    del u
    loss.backward()
    np.testing.assert_allclose(w.grad.data, _ref(x, w, b)[1], rtol=1e-12)
    assert node.out_data is None and node.freed
    assert seen == [4, 1] and fast[0] == n + 5


def test_a_step_with_an_entry_run_at_once_takes_the_written_out_backward(rng, fast):
    W = gj.tensor(rng.normal(size=(3, 4)), requires_grad=True)
    xb, yb = gj.tensor(rng.normal(size=(6, 3))), np.array([0, 3, 1, 1, 2, 0])

    def step():
        W.grad = None
        loss = -(xb @ W).log_softmax(1)[np.arange(6), yb].mean()   # (labels: run at once)
        loss.backward()
        return loss
    for _ in range(3):
        step()
    seen = _counted_take()
    loss = step()
    z = xb.data @ W.data
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    np.testing.assert_allclose(loss.data, -np.log(p[np.arange(6), yb]).mean(), rtol=1e-12)
    p[np.arange(6), yb] -= 1
    np.testing.assert_allclose(W.grad.data, xb.data.T @ p / 6, rtol=1e-12)
    assert seen == [1, 0]
    fns, stack = [], [loss.grad_fn]   # every node's values are freed
    while stack:
        f = stack.pop()
        fns.append(f)
        stack += [e[0] for e in f.edges if type(e) is tuple]
    assert all(f.out_data is None for f in fns) and any(f._vbox is None for f in fns)


def test_a_long_step_replays_without_a_written_out_backward(rng, fast):
    from gradjit.runtime.fast_backward import TAKE_MAX
    from gradjit.tracer import tape
    w = gj.tensor(rng.normal(size=(3,)), requires_grad=True)
    for _ in range(4):
        w.grad = None
        h = w
        for _ in range(TAKE_MAX):
            h = np.tanh(h) * 0.5
        h.sum().backward()
    ex = tape.current().exp
    assert ex is not None and ex.n > TAKE_MAX and ex.take is None and fast[0] == 3
    np.testing.assert_allclose(w.grad.data, _chain(w.data, TAKE_MAX), rtol=1e-12)


def _chain(v, k):
    """d/dw sum((tanh(.) * 0.5) applied k times)."""
    vals = [v]
    for _ in range(k):
        vals.append(0.5 * np.tanh(vals[-1]))
    g = np.ones_like(v)
    for u in reversed(vals[:-1]):
        g = g * 0.5 * (1 - np.tanh(u) ** 2)
    return g
