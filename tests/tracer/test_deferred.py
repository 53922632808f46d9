"""Deferred forward in tensor mode (tracer/deferred.py, runtime/engine.py's joint path).

A recorded op's value is computed when first needed; ``backward()`` on a pending root
runs forward and backward as one compiled function. Every case is checked against the
same program run eagerly (``set_deferred(False)``) and against NumPy.
"""
import numpy as np
import pytest

import gradjit as gj
from gradjit.runtime import engine
from gradjit.tracer import deferred, tape


@pytest.fixture
def eager():
    """Run the block with the deferred forward off."""
    class Off:
        def __enter__(self):
            self.prev = deferred.set_deferred(False)

        def __exit__(self, *exc):
            deferred.set_deferred(self.prev)
    return Off


class _Joints:
    """``[0]``: runs of the joint (forward + backward) path, general or fast; ``[1]``:
    fast (runtime/fast_backward.py, from the second step of a structure on)."""

    def __init__(self, fast):
        self.fast, self.general = fast, 0

    def __getitem__(self, i):
        return self.general + self.fast[0] if i == 0 else self.fast[0]

    def __eq__(self, other):
        return [self[0], self[1]] == other

    def __repr__(self):
        return repr([self[0], self[1]])


@pytest.fixture
def joints(monkeypatch, fast):
    n = _Joints(fast)
    run = engine._run_joint

    def counted(*a):
        out = run(*a)
        n.general += out is not None
        return out
    monkeypatch.setattr(engine, "_run_joint", counted)
    return n


@pytest.fixture(autouse=True)
def fresh_tape():
    tape.take([])   # what earlier tests left on this thread's tape is not ours
    yield
    tape.take([])


def _leaves(rng, shapes=((4, 3), (3,), ()), dtype=np.float64):
    x = gj.tensor(rng.normal(size=shapes[0]).astype(dtype))
    w = gj.tensor(rng.normal(size=shapes[1]).astype(dtype), requires_grad=True)
    b = gj.tensor(rng.normal(size=shapes[2]).astype(dtype), requires_grad=True)
    return x, w, b


PROGRAMS = [
    lambda x, w, b: (np.tanh(x * w + b) ** 2).sum(),
    lambda x, w, b: ((x @ w) * b).exp().mean(),
    lambda x, w, b: (x * w).sum(0).sigmoid().sum() + b * b,
    lambda x, w, b: (x.T.reshape(-1) * 2.0 - b).abs().amax() + (w / (1.0 + w * w)).sum(),
    lambda x, w, b: gj.nn.functional.log_softmax(x * w, dim=1).sum() * b,
]


@pytest.mark.parametrize("prog", PROGRAMS)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_joint_backward_matches_eager(prog, dtype, rng, eager, joints):
    x, w, b = _leaves(rng, dtype=dtype)
    with eager():
        ref = prog(x, w, b)
        ref.backward()
    gw, gb = w.grad.data.copy(), b.grad.data.copy()
    tol = 1e-12 if dtype == np.float64 else 2e-5
    for step in range(3):
        w.grad = b.grad = None
        loss = prog(x, w, b)
        assert loss.grad_fn.out_data is None and loss.shape == () and loss.dtype == dtype
        loss.backward()
        np.testing.assert_allclose(loss.data, ref.data, rtol=tol)
        np.testing.assert_allclose(w.grad.data, gw, rtol=tol, atol=tol)
        np.testing.assert_allclose(b.grad.data, gb, rtol=tol, atol=tol)
        assert w.grad.dtype == dtype and loss.data.dtype == dtype
    assert joints == [3, 2]   # the first step compiles, the next two take the fast path


def test_compiles_once_and_hits_afterwards(rng):
    x, w, b = _leaves(rng, shapes=((5, 2), (2,), (1,)))
    before = gj.stats()
    for _ in range(4):
        (np.tanh(x * w + b) ** 2).sum().backward()
    after = gj.stats()
    built = (after["compiles"] + after["disk_hits"]) - (before["compiles"] + before["disk_hits"])
    assert built == 1 and after["memory_hits"] - before["memory_hits"] == 3


def test_pending_values_read_types_without_computing(rng):
    x, w, b = _leaves(rng)
    y = x * w + b
    assert y._data is None and y.shape == (4, 3) and y.ndim == 2 and y.dtype == np.float64
    assert y.numel() == 12 and len(y) == 4
    z = (y * y).sum(1)
    assert z._data is None
    np.testing.assert_allclose(z.data, ((x.data * w.data + b.data) ** 2).sum(1), rtol=1e-14)
    assert y._data is None and y.grad_fn.out_data is not None   # computed on the way, kept
    np.testing.assert_allclose(y.data, x.data * w.data + b.data, rtol=1e-15)
    assert y._data is y.grad_fn.out_data[0]   # read once: the Tensor has it now
    assert float(z.sum()) == pytest.approx(float(((x.data * w.data + b.data) ** 2).sum()))
    assert "tensor(" in repr(y)


def test_held_intermediates_keep_their_recorded_values(rng, joints):
    x, w, b = _leaves(rng)
    h = np.tanh(x * w)
    loss = (h * b).sum()
    loss.backward()
    assert joints[0] == 1
    np.testing.assert_allclose(h.data, np.tanh(x.data * w.data), rtol=1e-15)
    np.testing.assert_allclose(b.grad.data, np.tanh(x.data * w.data).sum(), rtol=1e-12)


def test_in_place_writes_see_no_deferred_value_change(rng):
    x, w, b = _leaves(rng)
    w0 = w.data.copy()
    y = x * w * w      # pending, reads w (and its backward needs w)
    with gj.no_grad():
        w.mul_(2.0)    # computes y first: y keeps w's value at its recording
    np.testing.assert_allclose(y.data, x.data * w0 * w0, rtol=1e-15)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()
    u = x * b
    u.add_(1.0)        # in place on a pending non-leaf
    np.testing.assert_allclose(u.data, x.data * b.data + 1.0, rtol=1e-15)
    u.sum().backward()
    np.testing.assert_allclose(b.grad.data, x.data.sum(), rtol=1e-12)


def test_setitem_and_numpy_reads_see_recorded_values(rng):
    x, w, b = _leaves(rng)
    v = gj.tensor(np.arange(3.0))
    y = w * 1.0 + v
    v[0] = 100.0       # a write into a leaf: deferred values are computed first
    np.testing.assert_allclose(y.data, w.data + np.arange(3.0), rtol=1e-15)


def test_memory_handed_out_to_numpy_writes_sees_recorded_values(rng):
    # w.data, t.numpy() and np.asarray(t) hand out the tensor's memory: NumPy writes into
    # it once reached ops recorded before them, still pending (torch computed them first)
    x, w, b = _leaves(rng)
    w0 = w.data.copy()
    y = (w * w).sum()
    w.data += 0.1
    z = (w * w).sum()
    np.testing.assert_allclose([y.item(), z.item() - y.item()],
                               [(w0 * w0).sum(), ((w0 + 0.1) ** 2 - w0 * w0).sum()], rtol=1e-12)
    v = gj.tensor(np.arange(3.0))
    u = (v * 2.0).sum()
    v.numpy()[:] += 1.0
    s = (v * 1.0).sum()
    np.asarray(v)[0] = 10.0
    assert (u.item(), s.item()) == (6.0, 6.0)   # (not 12: [1, 2, 3] * 2; not 15: [10, 2, 3])


def test_a_write_into_handed_out_memory_before_backward_keeps_the_forward(eager):
    # c.data[:] = ... between an op and backward(): the op's value was computed before the
    # write (torch's, and eager mode's: the forward ran), but the joint plan computed the
    # whole forward again from the written arrays: loss and gradients of the new c. The
    # backward reads c as it is now (torch's mul saved c itself): cos(w c_old) * c_new
    def run():
        w = gj.tensor(np.array([0.5, 1.0, 1.5]), requires_grad=True)
        c = gj.tensor(np.array([1.0, 2.0, 3.0]))
        y = (w * c).sin()
        c.data[:] = c.data + 1.0
        loss = y.sum()
        loss.backward()
        return loss.item(), np.asarray(w.grad)
    w, c = np.array([0.5, 1.0, 1.5]), np.array([1.0, 2.0, 3.0])
    for _ in range(3):   # (the second and third steps: the tape's fast path)
        value, grad = run()
        assert value == pytest.approx(np.sin(w * c).sum(), rel=1e-14)
        np.testing.assert_allclose(grad, np.cos(w * c) * (c + 1.0), rtol=1e-14)
    with eager():
        value, grad = run()
    np.testing.assert_allclose(grad, np.cos(w * c) * (c + 1.0), rtol=1e-14)


def test_a_replayed_step_computes_pending_values_before_handing_out_memory(rng):
    # while a step replays the last one, its pending nodes are the replay's (tape.fns is
    # empty): w.data[:] -= ... then missed them, and a loss still pending saw the new w
    X, Y = rng.normal(size=(8, 3)), rng.normal(size=(8, 2))
    w = gj.tensor(rng.normal(size=(3, 2)), requires_grad=True)
    for _ in range(5):
        loss = ((gj.tensor(X) @ w).tanh() - gj.tensor(Y)).pow(2).mean()
        loss.backward()
        again = ((gj.tensor(X) @ w).tanh() - gj.tensor(Y)).pow(2).mean()   # pending
        w.data[:] -= 0.1 * np.asarray(w.grad)
        w.grad = None
        assert again.item() == pytest.approx(loss.item(), rel=1e-12)   # (not the new w's)
        del again


def test_side_computations_and_broken_tapes_fall_back(rng, joints):
    x, w, b = _leaves(rng)
    side = (w * 3.0).sum()                         # not part of the loss
    loss = (x * w).sum() + b
    loss.backward()
    assert joints[0] == 0
    np.testing.assert_allclose(side.data, 3.0 * w.data.sum(), rtol=1e-14)
    np.testing.assert_allclose(w.grad.data, x.data.sum(0), rtol=1e-12)

    class Double(gj.autograd.Function):
        @staticmethod
        def forward(ctx, t):
            return t * 2.0

        @staticmethod
        def backward(ctx, g):
            return g * 2.0
    w.grad = None
    pre = w * w                                     # pending when the Function breaks the tape
    loss = Double.apply(pre).sum()
    loss.backward()
    np.testing.assert_allclose(pre.data, w.data * w.data, rtol=1e-15)
    np.testing.assert_allclose(w.grad.data, 4.0 * w.data, rtol=1e-12)


def test_general_path_features_on_a_deferred_forward(rng):
    x, w, b = _leaves(rng)
    # retain_grad, hooks on non-leaves, retain_graph, create_graph: computed, then the
    # general engine, as eager
    h = x * w
    h.retain_grad()
    (h * b).sum().backward()
    np.testing.assert_allclose(h.grad.data, np.full((4, 3), b.data), rtol=1e-15)
    seen = []
    w.grad = None
    h = x * w
    h.register_hook(lambda g: seen.append(g.shape))
    loss = (h ** 2).sum()
    loss.backward(retain_graph=True)
    loss.backward()
    assert seen == [(4, 3), (4, 3)]
    np.testing.assert_allclose(w.grad.data, 2 * (2 * x.data ** 2 * w.data).sum(0), rtol=1e-12)
    (gw,) = gj.autograd.grad((w ** 3).sum(), [w], create_graph=True)
    (gww,) = gj.autograd.grad(gw.sum(), [w])
    np.testing.assert_allclose(gww.data, 6 * w.data, rtol=1e-12)
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        loss = (x * w).sum()
        loss.backward()
        loss.backward()


def test_grad_api_and_leaf_hooks_on_the_joint_path(rng, joints):
    x, w, b = _leaves(rng)
    unused = gj.tensor(np.ones(2), requires_grad=True)
    gw, gu = gj.autograd.grad((x * w).sum() * 2.0, [w, unused], allow_unused=True)
    assert gu is None
    np.testing.assert_allclose(gw.data, 2 * x.data.sum(0), rtol=1e-12)
    with pytest.raises(RuntimeError, match="appears to not have been used"):
        gj.autograd.grad((x * w).sum(), [w, unused])
    w.register_hook(lambda g: g * 10.0)
    (x * w).sum().backward()
    np.testing.assert_allclose(w.grad.data, 10 * x.data.sum(0), rtol=1e-12)
    assert joints[0] == 2   # the failing call raised from inside it


def test_non_deferrable_ops_compute_their_inputs(rng):
    x, w, b = _leaves(rng)
    y = x * w
    z = y[1:3]                       # an index op: runs at once, on y's value
    assert z._data is not None
    np.testing.assert_allclose(z.data, (x.data * w.data)[1:3], rtol=1e-15)
    z.sum().backward()
    np.testing.assert_allclose(w.grad.data, x.data[1:3].sum(0), rtol=1e-12)


def test_off_switch_and_no_grad_run_at_once(rng, eager):
    x, w, b = _leaves(rng)
    with eager():
        assert (x * w)._data is not None
    with gj.no_grad():
        assert (x * w)._data is not None
    assert (x * 2.0)._data is not None      # nothing requires grad: nothing to record
    assert (x * w)._data is None


def test_tape_limit_computes_what_it_drops(rng, monkeypatch):
    monkeypatch.setattr(tape, "LIMIT", 5)
    tape.take([])
    x, w, b = _leaves(rng)
    ys = [w * float(k) for k in range(8)]   # the tape breaks at the sixth entry
    assert all(y._data is not None or y.grad_fn.out_data is not None for y in ys)
    for k, y in enumerate(ys):
        np.testing.assert_allclose(y.data, w.data * k, rtol=1e-15)
    tape.take([])


def test_untaken_forwards_trim_the_tape_instead_of_breaking_it(rng, monkeypatch, joints):
    """An evaluation loop without no_grad never takes the tape: its dead steps are dropped
    (Tape.trim; a tensor held from before does not stop it), so it stays deferred, and a
    later training step still hits the fast path."""
    monkeypatch.setattr(tape, "TRIM_MIN", 16)
    monkeypatch.setattr(tape, "LIMIT", 64)
    tape.take([])
    x, w, b = _leaves(rng)
    held = (x * w).sum()                     # alive throughout: never trimmed
    for _ in range(40):                       # 40 x 4 entries: past LIMIT without trimming
        val = (np.tanh(x * w + b) ** 2).sum()
    tp = tape.current()
    assert not tp.broken and len(tp.parts) < 64
    assert val._data is None                  # still deferred
    ref = (np.tanh(x.data * w.data + b.data) ** 2).sum()
    np.testing.assert_allclose(val.data, ref, rtol=1e-13)
    np.testing.assert_allclose(held.data, (x.data * w.data).sum(), rtol=1e-13)
    del val, held
    for _ in range(3):                        # a training step after it: general, then fast
        w.grad = b.grad = None
        (np.tanh(x * w + b) ** 2).sum().backward()
    t = np.tanh(x.data * w.data + b.data)
    np.testing.assert_allclose(w.grad.data, (2 * t * (1 - t * t) * x.data).sum(0), rtol=1e-12)
    np.testing.assert_allclose(b.grad.data, (2 * t * (1 - t * t)).sum(), rtol=1e-12)
    assert joints[0] == 3 and joints[1] >= 2   # (the first may hit a plan of another test)


def test_trim_renumbers_what_stays(rng, monkeypatch):
    """Live entries keep their wiring: positions and leaf slots are renumbered as if only
    they had been recorded; an entry whose readers all died is open again."""
    monkeypatch.setattr(tape, "TRIM_MIN", 6)
    tape.take([])
    x, w, b = _leaves(rng)
    with gj.no_grad():                        # versions: b 2, w 1, x 0
        b.add_(0.0)
        b.add_(0.0)
        w.add_(0.0)
    (x * w).sum()                             # dead at once
    y = b * b                                 # alive; its leaf b is met first once trimmed
    (y * x).sum()                             # dead: y's only reader
    (x * w).sum()                             # dead
    z = (y * w + x * w).sum()                 # the 6-entry check trims before z's sum
    tp = tape.current()
    assert len(tp.fns) == 5 and tp.open == 1
    assert [r() for r in tp.fns][0] is y.grad_fn and y.grad_fn._tpos == 0
    # flat: each entry's piece, then its inputs (leaf slot, or ~position of a node's output)
    refs = [tp.parts[1:3], tp.parts[4:6], tp.parts[7:9], tp.parts[10:12], tp.parts[13:]]
    assert refs == [[0, 0], [~0, 1], [2, 1], [~1, ~2], [~3]] and len(tp.parts) == 14
    assert [r() for r in tp.leaves] == [b, w, x]
    assert tp.first == [2, 1, 0]   # each kept leaf's version when first used, by new slot
    assert tp.types == [(t.shape, t.dtype, t.requires_grad) for t in (b, w, x)]
    z.backward()
    np.testing.assert_allclose(w.grad.data, (b.data ** 2 + x.data).sum(0), rtol=1e-13)
    np.testing.assert_allclose(b.grad.data, 2 * b.data * w.data.sum() * 4, rtol=1e-13)


def test_an_inference_tensor_after_a_grad_input_still_raises(rng):
    x, w, b = _leaves(rng)
    with gj.inference_mode():
        t = x * 2.0
    with pytest.raises(RuntimeError, match="Inference tensors cannot be saved for backward"):
        w * t


def test_joint_path_with_a_seed_and_inputs(rng, joints):
    x, w, b = _leaves(rng)
    seed = rng.normal(size=4)
    y = np.tanh(x @ w) * b                      # a vector root, pending
    y.backward(gj.tensor(seed), inputs=[w])      # only w accumulates
    t = np.tanh(x.data @ w.data)
    np.testing.assert_allclose(w.grad.data, x.data.T @ (seed * b.data * (1 - t * t)), rtol=1e-12)
    assert b.grad is None and joints[0] == 1
    np.testing.assert_allclose(y.data, t * b.data, rtol=1e-14)


def _nodes(t):
    """Every node of ``t``'s history, once each."""
    out, stack = {}, [t.grad_fn]
    while stack:
        fn = stack.pop()
        if id(fn) not in out:
            out[id(fn)] = fn
            stack += [e[0] for e in fn.edges if type(e) is tuple]
    return list(out.values())


@pytest.mark.parametrize("steps", [1, 3])   # the general joint path, then the fast one
def test_backward_keeps_only_the_values_of_held_tensors(rng, joints, steps):
    """A pending node knows whether a Tensor still holds it from its value box's count
    (GradFn.held): backward computes and keeps the values of held ones and frees every
    other node's."""
    x, w, b = _leaves(rng)
    for _ in range(steps):
        w.grad = None
        h = np.tanh(x * w)
        loss = ((h + 1.0) * b).sum()
        loss.backward()
    assert joints[0] == steps and joints[1] >= steps - 1   # (an earlier test may have compiled it)
    t = np.tanh(x.data * w.data)
    assert h._data is None   # (read below, from the value its node kept)
    assert {fn.op for fn in _nodes(loss) if fn.out_data is not None} == {"tanh.default"}
    assert all(fn.freed for fn in _nodes(loss))
    np.testing.assert_allclose(h.data, t, rtol=1e-15)
    np.testing.assert_allclose(w.grad.data, (x.data * (1 - t * t) * b.data).sum(0), rtol=1e-12)
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        loss.backward()


def test_an_alias_keeps_a_node_held(rng):
    x, w, _ = _leaves(rng)
    g = x * w
    fn = g.grad_fn
    assert g._data is None and fn.held()
    a = gj.Tensor(np.zeros(1), box=g._box)   # an alias: shares g's version box (as detach)
    del g
    assert fn.held()
    del a
    assert not fn.held()
    n = len(fn.versions)   # (reading versions keeps no reference to the box)
    assert n == 1
    assert not fn.held()
