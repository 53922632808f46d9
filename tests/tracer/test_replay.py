"""Replaying the last step (tracer/replay.py).

After a step's backward ran on the fast path, the next step of the same structure is
recorded against it. Each case runs a few steps so the expectation exists, then a step
that differs somewhere (op, attributes, wiring, leaf type or order, length, hooks,
requires_grad, switches) and checks: the gradients are NumPy's, and the tape holds
exactly what recording the step from scratch gives (key parts, read flags, unread
count, leaves, their first versions and types).
"""
import numpy as np
import pytest

import gradjit as gj
from gradjit.runtime import fast_backward as fb
from gradjit.tracer import replay, tape


pytestmark = pytest.mark.usefixtures("fresh_tape")


def _setup(rng, n=6):   # (not test_fast_backward's shapes: its counts start from no plan)
    x = gj.tensor(rng.normal(size=(n, 3)))
    w = gj.tensor(rng.normal(size=(3,)), requires_grad=True)
    b = gj.tensor(rng.normal(size=()), requires_grad=True)
    return x, w, b


def _loss(x, w, b):
    return (np.tanh(x * w + b) ** 2).sum()


def _ref(x, w, b, p=2):
    t = np.tanh(x.data * w.data + b.data)
    d = p * t ** (p - 1) * (1 - t * t)
    return (d * x.data).sum(0), d.sum()


def _state():
    """What the tape holds (its leaves by identity, but for constants made by the step)."""
    tp = tape.current()
    if tp.exp is not None:   # still replaying: what the tape holds once it stops
        replay.resume(tp)
    leaves = [r() for r in tp.leaves]
    return (list(tp.parts), list(tp.fed), tp.open,
            [id(t) if t.requires_grad else None for t in leaves], list(tp.first),
            list(tp.types), tp.broken)


def _warm(x, w, b, loss=_loss, steps=3):
    for _ in range(steps):
        w.grad = b.grad = None
        loss(x, w, b).backward()
    assert tape.current().exp is not None   # the next step replays


def _compare(forward, warm):
    """The tape after ``forward()`` recorded against an expectation (``warm()`` made it)
    and recorded from scratch; returns the first run's output."""
    warm()
    out = forward()
    replayed = _state()
    tape.take([])
    assert tape.current().exp is None
    again = forward()
    assert _state() == replayed
    del again
    return out


def test_a_replayed_step_records_what_recording_does(rng, fast):
    x, w, b = _setup(rng)
    _warm(x, w, b)
    before = fast[0]
    for _ in range(3):
        w.grad = b.grad = None
        loss = _loss(x, w, b)
        tp = tape.current()
        assert tp.exp is not None and tp.parts == [] and len(tp.nodes) == 5 and not tp.fns
        loss.backward()
        gw, gb = _ref(x, w, b)
        np.testing.assert_allclose(w.grad.data, gw, rtol=1e-12)
        np.testing.assert_allclose(b.grad.data, gb, rtol=1e-12)
    assert fast[0] == before + 3
    # a whole replayed step, its tape resumed, is the recorded one
    _compare(lambda: _loss(x, w, b), lambda: _warm(x, w, b))


@pytest.mark.parametrize("variant", [
    "other_reduction", "pow_float", "pow_three", "leaf_order", "new_leaf_shape", "extra_op",
    "other_wiring", "non_tensor"])
def test_a_step_that_differs_leaves_replay_and_is_right(rng, fast, variant):
    x, w, b = _setup(rng)
    x7 = gj.tensor(rng.normal(size=(7, 3)))
    forward, check = {
        "other_reduction": (lambda: (np.tanh(x * w + b) ** 2).mean(),
                            lambda: [g / x.data.size for g in _ref(x, w, b)]),
        "pow_float": (lambda: (np.tanh(x * w + b) ** 2.0).sum(), lambda: _ref(x, w, b)),
        "pow_three": (lambda: (np.tanh(x * w + b) ** 3).sum(), lambda: _ref(x, w, b, 3)),
        "leaf_order": (lambda: (np.tanh(w * x + b) ** 2).sum(), lambda: _ref(x, w, b)),
        "new_leaf_shape": (lambda: _loss(x7, w, b), lambda: _ref(x7, w, b)),
        "extra_op": (lambda: _loss(x, w, b) * 3.0, lambda: [3 * g for g in _ref(x, w, b)]),
        "other_wiring": (lambda: (np.tanh(x * w + b) * np.tanh(x * w + b)).sum(),
                         lambda: _ref(x, w, b)),
        "non_tensor": (lambda: (np.tanh(x * w + b) ** 2).sum(), lambda: _ref(x, w, b)),
    }[variant]
    if variant == "non_tensor":   # a NumPy array where the expectation has a leaf
        xs = x.data
        forward = (lambda: (np.tanh(w * xs + b) ** 2).sum())
    loss = _compare(forward, lambda: _warm(x, w, b))
    w.grad = b.grad = None
    loss.backward()
    gw, gb = check()
    np.testing.assert_allclose(w.grad.data, gw, rtol=1e-11)
    np.testing.assert_allclose(b.grad.data, gb, rtol=1e-11)


def test_attributes_match_exactly(fast):
    """x * 0.0 and x * -0.0 are different steps (so are 2 and 2.0: see pow_float)."""
    w = gj.tensor(np.array([1.0, 2.0]), requires_grad=True)

    def step(c):
        w.grad = None
        (w * c).sum().backward()
    out = _compare(lambda: (w * -0.0).sum(), lambda: [step(0.0) for _ in range(3)])
    w.grad = None
    out.backward()
    assert np.signbit(w.grad.data).all()
    step(0.0)
    assert not np.signbit(w.grad.data).any()


def test_same_typed_leaves_by_first_use(rng, fast):
    """Leaves are slotted by first use: (c * a) replays (a * c); (a * a) does not."""
    a, c = (gj.tensor(rng.normal(size=(3,)), requires_grad=True) for _ in range(2))

    def step(u, v):
        a.grad = c.grad = None
        (u * v).sum().backward()
    for _ in range(3):
        step(a, c)
    n = fast[0]
    step(c, a)
    assert fast[0] == n + 1
    np.testing.assert_allclose(a.grad.data, c.data, rtol=1e-15)
    np.testing.assert_allclose(c.grad.data, a.data, rtol=1e-15)
    step(a, a)
    np.testing.assert_allclose(a.grad.data, 2 * a.data, rtol=1e-15)
    assert c.grad is None
    _compare(lambda: (a * a).sum(), lambda: [step(a, c) for _ in range(3)])


def test_a_prefix_of_the_step_takes_the_general_path(rng, fast):
    x, w, b = _setup(rng)

    def loss(x, w, b):
        return (x * w + b).sum() * 2.0
    short = _compare(lambda: (x * w + b).sum(), lambda: _warm(x, w, b, loss))
    w.grad = b.grad = None
    short.backward()
    np.testing.assert_allclose(w.grad.data, x.data.sum(0), rtol=1e-13)
    np.testing.assert_allclose(b.grad.data, x.data.size, rtol=1e-13)


@pytest.mark.parametrize("variant", ["same", "keepdim", "dim", "wiring", "condition"])
def test_three_inputs_and_two_attributes(rng, fast, variant):
    """Matchers are written out per form (tracer/replay.py): a three-input op and a
    reduction with two attributes replay, and a step differing in one of them is right."""
    a = gj.tensor(rng.normal(size=(4, 3)), requires_grad=True)
    b = gj.tensor(rng.normal(size=(4, 3)), requires_grad=True)
    c = gj.tensor(rng.normal(size=(4, 3)) > 0)
    d = gj.tensor(rng.normal(size=(4, 3)) > 0)

    def loss(c=c, u=a, v=b, dim=1, keepdim=True):
        return (gj.where(c, u, v) * a).sum(dim, keepdim=keepdim).sum()

    def warm():
        for _ in range(3):
            a.grad = b.grad = None
            loss().backward()
        assert tape.current().exp is not None
    kwargs = {"same": {}, "keepdim": {"keepdim": False}, "dim": {"dim": 0},
              "wiring": {"u": b, "v": a}, "condition": {"c": d}}[variant]
    replays = []

    def forward():
        out = loss(**kwargs)
        replays.append(tape.current().exp is not None)
        return out
    out = _compare(forward, warm)
    # another condition of the same type is the same step (a leaf is matched by its slot)
    assert replays == [variant in ("same", "condition"), False]
    a.grad = b.grad = None
    out.backward()
    m = (d if variant == "condition" else c).data
    if variant == "wiring":   # where(m, b, a) * a
        ga, gb = np.where(m, 0, 2 * a.data) + np.where(m, b.data, 0), np.where(m, a.data, 0)
    else:                     # where(m, a, b) * a
        ga, gb = np.where(m, 2 * a.data, b.data), np.where(m, 0, a.data)
    np.testing.assert_allclose(a.grad.data, ga, rtol=1e-14)
    np.testing.assert_allclose(b.grad.data, gb, rtol=1e-14)


def test_each_matcher_form_is_compiled_once(rng, fast):
    x, w, b = _setup(rng)
    _warm(x, w, b)
    forms = dict(replay._FACTORIES)
    made = tape.current().exp.matchers
    fb.forget()   # (every plan and expectation dropped: the next steps build them anew)
    _warm(x, w, b, steps=4)
    again = tape.current().exp.matchers
    assert replay._FACTORIES == forms
    assert len(again) == len(made) == 6 and again[0] is not made[0]


def test_alternating_structures(rng, fast):
    x, w, b = _setup(rng)

    def other(x, w, b):
        return (x * w + b).sum()
    for step in range(8):
        w.grad = b.grad = None
        (_loss if step % 2 else other)(x, w, b).backward()
        gw, gb = _ref(x, w, b) if step % 2 else (x.data.sum(0), x.data.size)
        np.testing.assert_allclose(w.grad.data, gw, rtol=1e-12)
        np.testing.assert_allclose(b.grad.data, gb, rtol=1e-12)
    assert fast[0] >= 4


def test_hooks_retain_grad_and_requires_grad_in_a_replayed_step(rng, fast):
    x, w, b = _setup(rng)
    _warm(x, w, b)
    seen = []
    w.grad = b.grad = None
    h = np.tanh(x * w + b)
    h.register_hook(lambda g: seen.append(g.data.copy()))
    h.retain_grad()
    (h ** 2).sum().backward()
    t = np.tanh(x.data * w.data + b.data)
    np.testing.assert_allclose(seen[0], 2 * t, rtol=1e-13)
    np.testing.assert_allclose(h.grad.data, 2 * t, rtol=1e-13)
    _warm(x, w, b)
    b.requires_grad_(False)
    w.grad = b.grad = None
    _loss(x, w, b).backward()
    np.testing.assert_allclose(w.grad.data, _ref(x, w, b)[0], rtol=1e-12)
    assert b.grad is None


def test_an_in_place_write_during_a_replayed_step_is_refused(rng):
    x, w, b = _setup(rng)
    _warm(x, w, b)
    loss = _loss(x, w, b)
    with gj.no_grad():
        x.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


def test_no_grad_and_a_changed_switch(rng, fast, monkeypatch):
    x, w, b = _setup(rng)
    _warm(x, w, b)
    with gj.no_grad():
        y = _loss(x, w, b)
    assert y.grad_fn is None and y.data == pytest.approx(np.tanh(x.data * w.data + b.data)
                                                          .__pow__(2).sum())
    _warm(x, w, b)
    monkeypatch.setenv("GRADJIT_FAST_MATH", "0")
    n = fast[0]
    w.grad = b.grad = None
    _loss(x, w, b).backward()   # another plan key: the general path
    assert fast[0] == n
    gw, gb = _ref(x, w, b)
    np.testing.assert_allclose(w.grad.data, gw, rtol=1e-12)


def test_forgotten_plans_are_not_replayed(rng, fast):
    x, w, b = _setup(rng)
    _warm(x, w, b)
    fb.forget()
    n = fast[0]
    w.grad = b.grad = None
    _loss(x, w, b).backward()
    assert fast[0] == n   # the expectation's plan is gone: the general path
    np.testing.assert_allclose(w.grad.data, _ref(x, w, b)[0], rtol=1e-12)


def test_an_abandoned_replayed_step_is_freed_by_the_next_op(rng):
    """The matched nodes are held while replaying: a step dropped without backward lives
    until the next recorded op stops the replay, then goes (and a long step's collector
    pause with it)."""
    import gc
    import weakref
    from gradjit.tracer.tape import PAUSE_AT, PAUSED_THRESHOLD
    w = gj.tensor(rng.normal(size=(4, 4)) * 0.3, requires_grad=True)
    xs = [gj.tensor(rng.normal(size=(1, 4))) for _ in range(PAUSE_AT // 2 + 2)]

    def step():
        h = xs[0]
        for x in xs:   # two ops a step: past entry PAUSE_AT
            h = np.tanh(x + h @ w)
        return (h * h).sum()
    old = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    try:
        for _ in range(3):
            w.grad = None
            step().backward()
        assert tape.current().exp is not None
        loss = step()
        node = weakref.ref(loss.grad_fn)
        del loss
        assert node() is not None and gc.get_threshold()[0] == PAUSED_THRESHOLD
        (xs[0] * 2.0).sum()   # records nothing: the replay goes on
        assert node() is not None and gc.get_threshold()[0] == PAUSED_THRESHOLD
        (w * 2.0).sum()       # the next recorded op: not the expected one
        assert node() is None and gc.get_threshold()[0] == 700
    finally:
        gc.set_threshold(*old)


def test_equal_attributes_made_anew_each_step_replay(rng, fast):
    """An attribute that is a new object every step (a computed scale) still matches."""
    w = gj.tensor(rng.normal(size=(4,)), requires_grad=True)
    for step in range(5):
        c = float(str(0.25 + step * 0))   # equal, never the same object
        w.grad = None
        y = w * c
        if step >= 2:
            assert tape.current().exp is not None and tape.current().parts == []
        (y * y).sum().backward()
        np.testing.assert_allclose(w.grad.data, 2 * c * c * w.data, rtol=1e-15)
    assert fast[0] >= 4


def _classifier(rng):
    W = gj.tensor(rng.normal(size=(4, 3)) * 0.5, requires_grad=True)
    X = rng.normal(size=(8, 4))
    y = rng.integers(0, 3, size=8)
    return W, X, y


def _nll(W, xb, yb):
    lp = (xb @ W).log_softmax(1)
    return -(lp[np.arange(len(yb)), yb]).mean()   # (index_select: run at once, not deferred)


def _nll_grad(W, xb, yb):
    z = xb @ W.data
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    p[np.arange(len(yb)), yb] -= 1
    return xb.T @ p / len(yb)


def test_a_training_loop_with_label_indexing_and_updates_replays(rng, fast):
    """Ops run at once (indexing by labels) are matched when recorded; the optimizer's
    in-place updates and a metric between steps leave the replay on."""
    W, X, y = _classifier(rng)
    replayed = 0
    for step in range(8):
        xb = gj.tensor(X)   # a new leaf each step, as a batch is
        W.grad = None
        loss = _nll(W, xb, y)
        replayed += tape.current().exp is not None
        want = _nll_grad(W, X, y)
        loss.backward()
        np.testing.assert_allclose(W.grad.data, want, rtol=1e-12)
        with gj.no_grad():
            W.sub_(0.5 * W.grad)
        accuracy = ((xb @ W.detach()).numpy().argmax(1) == y).mean()   # grad mode on
        assert 0 <= accuracy <= 1
    assert replayed == 6 and fast[0] == 7


def test_a_step_that_differs_after_an_entry_run_at_once(rng, fast):
    W, X, y = _classifier(rng)

    def warm():
        for _ in range(3):
            W.grad = None
            _nll(W, gj.tensor(X), y).backward()
    for forward, xb, yb in [
            (lambda: _nll(W, gj.tensor(X[:5]), y[:5]), X[:5], y[:5]),   # other shapes
            (lambda: _nll(W, gj.tensor(X), y) * 2.0, X, y),             # an op more
            (lambda: -(gj.tensor(X) @ W).log_softmax(1)[np.arange(8), y].sum() / 8.0, X, y)]:
        loss = _compare(forward, warm)
        W.grad = None
        loss.backward()
        scale = 2.0 if loss.grad_fn.op == "mul.Scalar" else 1.0
        np.testing.assert_allclose(W.grad.data, scale * _nll_grad(W, xb, yb), rtol=1e-12)


def test_a_metric_that_fails_part_way_keeps_the_tape_exact(rng):
    """An op that records nothing but matched a leaf slot before differing gives the slot
    back: the step's tape is then what recording it gives."""
    x, w, b = _setup(rng)
    c = gj.tensor(rng.normal(size=x.shape))

    def forward():
        (x * c).sum()       # slot 0 is x's in the expectation: given, then taken back
        return _loss(x, w, b)
    loss = _compare(forward, lambda: _warm(x, w, b))
    w.grad = b.grad = None
    loss.backward()
    gw, gb = _ref(x, w, b)
    np.testing.assert_allclose(w.grad.data, gw, rtol=1e-12)


# -- random steps: a step, then a variant of it, against the eager reference ------------------
_UNARY = ("tanh", "exp", "pow2", "scale")
_BINARY = ("add", "mul", "sub")


def _program(rng, n_ops=6):
    """A random step over values 0-2 (leaves): (kind, argument indices, constant) per op."""
    ops = []
    for k in range(n_ops):
        n_values = 3 + k
        if rng.random() < 0.5:
            ops.append((str(rng.choice(_UNARY)), (int(rng.integers(n_values)),),
                        float(rng.choice([0.5, 2.0, -0.0]))))
        else:
            ops.append((str(rng.choice(_BINARY)), tuple(int(i) for i in rng.integers(n_values,
                                                                                   size=2)), 0.0))
    return ops


def _variant(rng, ops):
    """The same step, or one with a different op, wiring or constant at a random place."""
    ops = list(ops)
    what = int(rng.integers(4))
    if what == 0:
        return ops
    k = int(rng.integers(len(ops)))
    kind, args, c = ops[k]
    if what == 1:
        kind = {"tanh": "exp", "exp": "tanh", "pow2": "tanh", "scale": "exp", "add": "mul",
                "mul": "sub", "sub": "add"}[kind]
    elif what == 2:
        args = tuple(int(rng.integers(3 + k)) for _ in args)
    else:
        c = {0.5: 2.0, 2.0: -0.0, -0.0: 0.5}[c]
        kind = "scale" if kind in _UNARY else kind
        args = args[:1] if kind == "scale" else args
    ops[k] = (kind, args, c)
    return ops


def _run(ops, leaves):
    vals = list(leaves)
    for kind, args, c in ops:
        a = [vals[i] for i in args]
        vals.append({"tanh": lambda: np.tanh(a[0]), "exp": lambda: np.exp(a[0] * 0.1),
                     "pow2": lambda: a[0] ** 2, "scale": lambda: a[0] * c,
                     "add": lambda: a[0] + a[1], "mul": lambda: a[0] * a[1],
                     "sub": lambda: a[0] - a[1]}[kind]())
    loss = (vals[0] * vals[1]).sum()   # (requires grad) and every op's value feeds it
    for v in vals[3:]:
        loss = loss + v.sum()
    return loss


@pytest.mark.parametrize("seed", [pytest.param(s, marks=pytest.mark.slow) if s >= 12 else s
                                  for s in range(24)])   # (seeds 12+: the slow suites)
def test_random_steps_and_variants_match_the_eager_reference(seed, fast):
    rng = np.random.default_rng(seed)
    leaves = [gj.tensor(rng.normal(size=(3,)) * 0.5, requires_grad=i < 2) for i in range(3)]
    a = _program(rng)
    b = _variant(rng, a)

    def reference(ops):
        prev = gj.set_deferred(False)
        try:
            for t in leaves[:2]:
                t.grad = None
            _run(ops, leaves).backward()
            return [None if t.grad is None else t.grad.data.copy() for t in leaves[:2]]
        finally:
            gj.set_deferred(prev)

    want_a, want_b = reference(a), reference(b)
    tape.take([])

    def warm():
        for _ in range(3):
            for t in leaves[:2]:
                t.grad = None
            _run(a, leaves).backward()
            _same(leaves[:2], want_a)
        assert tape.current().exp is not None   # the variant is recorded against it
    loss = _compare(lambda: _run(b, leaves), warm)
    for t in leaves[:2]:
        t.grad = None
    loss.backward()
    _same(leaves[:2], want_b)


def _same(leaves, want):
    for t, w in zip(leaves, want):   # (a leaf the step does not use keeps no gradient)
        assert (t.grad is None) == (w is None)
        if w is not None:
            np.testing.assert_allclose(t.grad.data, w, rtol=1e-12, atol=1e-15)


def test_generated_matchers_are_files_loaded_through_importlib(rng, fast, monkeypatch):
    """tracer/gensrc.py: the matchers' source is a file in the cache directory, imported
    as a module; where it cannot be written, steps are recorded without replay, right."""
    import os
    import sys
    from gradjit.tracer import gensrc
    x, w, b = _setup(rng)
    _warm(x, w, b)
    make = tape.current().exp.matchers[0]
    mod = sys.modules[make.__module__]
    assert mod.__file__.startswith(os.path.join(gensrc.cache_dir(), "py"))
    assert os.path.basename(mod.__file__) == mod.__name__ + ".py"
    fb.forget()
    monkeypatch.setattr(replay, "_FACTORIES", {})
    monkeypatch.setattr(gensrc, "load", lambda kind, source, names: None)
    for _ in range(4):
        w.grad = b.grad = None
        _loss(x, w, b).backward()
        assert tape.current().exp is None
        gw, gb = _ref(x, w, b)
        np.testing.assert_allclose(w.grad.data, gw, rtol=1e-12)
        np.testing.assert_allclose(b.grad.data, gb, rtol=1e-12)
    fb.forget()   # (the plans made meanwhile hold no replay: later tests must not get them)
