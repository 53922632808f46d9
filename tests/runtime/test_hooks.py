"""``Tensor.register_hook``, ``retain_grad`` and ``retains_grad``, as in torch.

Hooks on non-leaf tensors are Python callbacks between compiled segments;
the tests that are about compiled plans (each step's own hook runs with a
plan compiled once) run compiled, the rest on the reference interpreter.
"""
from __future__ import annotations

import numpy as np
import pytest

import gradjit as gj

A = gj.autograd
X = np.array([1.0, 2.0, 3.0])


def leaf(values=X):
    return gj.tensor(np.asarray(values, dtype=np.float64), requires_grad=True)


# --------------------------------------------------------------------------------------
# leaf hooks
# --------------------------------------------------------------------------------------

def test_leaf_hook_sees_gradient_and_keeps_it_when_returning_none(interpreted):
    x = leaf()
    seen = []
    x.register_hook(lambda g: seen.append(np.array(g.data)))
    (x * x).sum().backward()
    assert len(seen) == 1
    np.testing.assert_allclose(seen[0], 2 * X)
    np.testing.assert_allclose(x.grad.data, 2 * X)


def test_leaf_hook_receives_a_tensor(interpreted):
    x = leaf()
    kinds = []
    x.register_hook(lambda g: kinds.append(type(g)))
    (x * 3).sum().backward()
    assert kinds == [gj.Tensor]


def test_leaf_hook_replaces_gradient(interpreted):
    x = leaf()
    x.register_hook(lambda g: g * 10)
    (x * x).sum().backward()
    np.testing.assert_allclose(x.grad.data, 20 * X)
    # autograd.grad sees the hooked value too (as torch)
    (g,) = A.grad((x * x).sum(), x)
    np.testing.assert_allclose(g.data, 20 * X)
    np.testing.assert_allclose(x.grad.data, 20 * X)   # grad() does not accumulate


def test_leaf_hook_runs_before_accumulation(interpreted):
    x = leaf()
    x.register_hook(lambda g: g + 1)
    (x * 2).sum().backward()
    (x * 2).sum().backward()
    # each call's gradient is hooked before it is added: (2 + 1) twice
    np.testing.assert_allclose(x.grad.data, [6.0, 6.0, 6.0])


# --------------------------------------------------------------------------------------
# non-leaf hooks
# --------------------------------------------------------------------------------------

def test_non_leaf_hook_replaces_gradient_flowing_upstream(interpreted):
    x = leaf()
    h = x * 2
    seen = []

    def hook(g):
        seen.append(np.array(g.data))
        return g * 10

    h.register_hook(hook)
    (h * h).sum().backward()
    np.testing.assert_allclose(seen[0], 2 * (2 * X))       # d/dh sum(h^2) = 2h
    np.testing.assert_allclose(x.grad.data, 10 * 2 * (2 * X) * 2)


def test_non_leaf_hook_returning_none_keeps_gradient(interpreted):
    x = leaf()
    h = x.sin()
    calls = []
    h.register_hook(lambda g: calls.append(1))
    (h * h).sum().backward()
    assert calls == [1]
    np.testing.assert_allclose(x.grad.data, 2 * np.sin(X) * np.cos(X))


def test_non_leaf_hook_with_grad(interpreted):
    x = leaf()
    h = x.exp()
    h.register_hook(lambda g: g * 0.5)
    (g,) = A.grad((h * 3).sum(), x)
    np.testing.assert_allclose(g.data, 1.5 * np.exp(X))


def test_several_hooks_run_in_registration_order(interpreted):
    x = leaf()
    h = x * 1.0
    order = []

    def first(g):
        order.append(("first", np.array(g.data)))
        return g * 2

    def second(g):
        order.append(("second", np.array(g.data)))
        return g + 1

    def third(g):
        order.append(("third", np.array(g.data)))

    h.register_hook(first)
    h.register_hook(second)
    h.register_hook(third)
    h.sum().backward()
    assert [n for n, _ in order] == ["first", "second", "third"]
    np.testing.assert_allclose(order[0][1], 1.0)
    np.testing.assert_allclose(order[1][1], 2.0)
    np.testing.assert_allclose(order[2][1], 3.0)
    np.testing.assert_allclose(x.grad.data, 3.0)


def test_several_leaf_hooks_in_order(interpreted):
    x = leaf()
    x.register_hook(lambda g: g * 2)
    x.register_hook(lambda g: g - 1)
    (x * 1.0).sum().backward()
    np.testing.assert_allclose(x.grad.data, 1.0)          # (1 * 2) - 1


def test_handle_remove(interpreted):
    x = leaf()
    h = x * 2
    calls = []
    handle = h.register_hook(lambda g: calls.append("h") or g * 100)
    leaf_handle = x.register_hook(lambda g: calls.append("x"))
    handle.remove()
    leaf_handle.remove()
    handle.remove()                       # removing twice is harmless
    (h * h).sum().backward()
    assert calls == []
    np.testing.assert_allclose(x.grad.data, 8 * X)


def test_handle_remove_between_steps(interpreted):
    x = leaf()
    calls = []
    handle = x.register_hook(lambda g: calls.append(1) or g * 0)
    (x * x).sum().backward()
    np.testing.assert_allclose(x.grad.data, 0.0)
    handle.remove()
    (x * x).sum().backward()
    assert calls == [1]
    np.testing.assert_allclose(x.grad.data, 2 * X)


def test_hook_on_tensor_without_grad_rejected(interpreted):
    t = gj.tensor(X)
    with pytest.raises(RuntimeError, match="cannot register a hook on a tensor that doesn't "
                                           "require gradient"):
        t.register_hook(lambda g: g)


def test_hook_returning_wrong_shape_raises(interpreted):
    x = leaf()
    h = x * 2
    h.register_hook(lambda g: gj.tensor(np.ones(5)))
    with pytest.raises(RuntimeError, match="shape"):
        (h * h).sum().backward()


def test_hook_under_create_graph_is_differentiated_through(interpreted):
    x = leaf()
    h = x ** 3
    h.register_hook(lambda g: g * 3)
    (g,) = A.grad(h.sum(), x, create_graph=True)
    np.testing.assert_allclose(g.data, 9 * X ** 2)
    (gg,) = A.grad(g.sum(), x)
    np.testing.assert_allclose(gg.data, 18 * X)


# --------------------------------------------------------------------------------------
# retain_grad / retains_grad
# --------------------------------------------------------------------------------------

def test_retain_grad_on_non_leaf(interpreted):
    x = leaf()
    h = x * 2
    k = h.exp()
    assert not h.retains_grad
    h.retain_grad()
    assert h.retains_grad and not k.retains_grad
    k.sum().backward()
    np.testing.assert_allclose(h.grad.data, np.exp(2 * X))
    np.testing.assert_allclose(x.grad.data, 2 * np.exp(2 * X))
    assert k.grad is None                    # not retained


def test_retains_grad_property_on_leaf(interpreted):
    x = leaf()
    assert not x.retains_grad               # torch: leaves report False
    x.retain_grad()                         # a no-op for a leaf
    assert not x.retains_grad
    (x * x).sum().backward()
    np.testing.assert_allclose(x.grad.data, 2 * X)


def test_retain_grad_requires_grad(interpreted):
    with pytest.raises(RuntimeError, match="can't retain_grad on Tensor that has "
                                           "requires_grad=False"):
        gj.tensor(X).retain_grad()


def test_retained_grad_accumulates(interpreted):
    x = leaf()
    h = x * 2
    h.retain_grad()
    y = (h * h).sum()
    y.backward(retain_graph=True)
    y.backward()
    np.testing.assert_allclose(h.grad.data, 2 * 2 * (2 * X))
    np.testing.assert_allclose(x.grad.data, 2 * 2 * (2 * X) * 2)


def test_retained_grad_sees_hook_result(interpreted):
    # torch >= 2.0: the retains_grad hook runs after the tensor's other hooks.
    x = leaf()
    h = x * 2
    h.retain_grad()
    h.register_hook(lambda g: g * 10)
    (h * h).sum().backward()
    np.testing.assert_allclose(h.grad.data, 10 * 2 * (2 * X))
    np.testing.assert_allclose(x.grad.data, 10 * 2 * (2 * X) * 2)


def test_retain_grad_with_inputs_restriction(interpreted):
    a, b = leaf(), leaf([4.0, 5.0, 6.0])
    h = a * b
    h.retain_grad()
    (h * h).sum().backward(inputs=[a])
    np.testing.assert_allclose(a.grad.data, 2 * a.data * b.data * b.data)
    assert b.grad is None


# --------------------------------------------------------------------------------------
# compiled plans reused across steps, each step with its own hooks
# --------------------------------------------------------------------------------------

def _delta(before):
    after = gj.stats()
    return {k: after[k] - before[k] for k in ("compiles", "disk_hits")}


def test_compiled_plan_runs_each_steps_own_non_leaf_hook(rng):
    w = leaf(rng.normal(size=(4,)))
    results = []
    before = None
    for step, k in enumerate([2.0, -3.0, 0.5, 7.0]):
        if step == 1:
            before = gj.stats()
        x = gj.tensor(rng.normal(size=(4,)))
        h = (w * x).tanh()
        calls = []
        h.register_hook(lambda g, k=k, calls=calls: calls.append(k) or g * k)
        w.grad = None
        (h * h).sum().backward()
        assert calls == [k]
        t = np.tanh(w.data * x.data)
        np.testing.assert_allclose(w.grad.data, k * 2 * t * (1 - t ** 2) * x.data, rtol=1e-12)
        results.append(w.grad.data.copy())
    assert _delta(before) == {"compiles": 0, "disk_hits": 0}


def test_compiled_plan_runs_each_steps_own_leaf_hook(rng):
    before = None
    for step, k in enumerate([3.0, 5.0, -1.0]):
        if step == 1:
            before = gj.stats()
        w = leaf(rng.normal(size=(3, 2)))
        w.register_hook(lambda g, k=k: g * k)
        x = gj.tensor(rng.normal(size=(5, 3)))
        ((x @ w).sin()).sum().backward()
        expected = x.data.T @ np.cos(x.data @ w.data)
        np.testing.assert_allclose(w.grad.data, k * expected, rtol=1e-12)
    assert _delta(before) == {"compiles": 0, "disk_hits": 0}


def test_compiled_plan_with_and_without_hook(rng):
    # A hooked step and a plain step of the same program are different plans; both right,
    # and the hook of an earlier step never leaks into a later one.
    x0 = rng.normal(size=(4,))
    for hooked in (True, False, True, False):
        w = leaf(x0)
        h = w.exp()
        if hooked:
            h.register_hook(lambda g: g * 0.0)
        (h * 2.0).sum().backward()
        np.testing.assert_allclose(w.grad.data, 0.0 if hooked else 2 * np.exp(x0), rtol=1e-12)


def test_leaf_hook_runs_once_for_a_leaf_used_twice(interpreted):
    x = leaf()
    calls = []
    x.register_hook(lambda g: calls.append(np.array(g.data)))
    (x * x + x.exp()).sum().backward()
    assert len(calls) == 1                          # on the summed gradient, once
    np.testing.assert_allclose(calls[0], 2 * X + np.exp(X))


# --------------------------------------------------------------------------------------
# post-accumulate-grad hooks
# --------------------------------------------------------------------------------------

def test_post_accumulate_grad_hook_sees_the_accumulated_grad(interpreted):
    x = leaf()
    seen = []
    h = x.register_post_accumulate_grad_hook(
        lambda p: seen.append((p is x, np.array(p.grad.data), gj.is_grad_enabled())))
    x.register_hook(lambda g: g * 10)   # a gradient hook runs first, as torch
    (x * x).sum().backward()
    assert len(seen) == 1 and seen[0][0] and seen[0][2] is False   # (backward's no-grad mode)
    np.testing.assert_allclose(seen[0][1], 20 * X)
    (x * 2).sum().backward()
    np.testing.assert_allclose(seen[1][1], 20 * X + 20)   # after accumulating
    A.grad((x * 2).sum(), x)   # autograd.grad accumulates nothing: no call
    w = leaf()
    (x * w).sum().backward(inputs=[w])   # x not accumulated: no call
    assert len(seen) == 2
    h.remove()
    (x * 2).sum().backward()
    assert len(seen) == 2


def test_post_accumulate_grad_hook_errors_as_torch(interpreted):
    with pytest.raises(RuntimeError, match="post accumulate grad hooks cannot be registered on "
                                           "non-leaf tensors"):
        (leaf() * 2).register_post_accumulate_grad_hook(lambda p: None)
    with pytest.raises(RuntimeError, match="cannot register a hook on a tensor that doesn't "
                                           "require gradient"):
        gj.tensor(X).register_post_accumulate_grad_hook(lambda p: None)
    x = leaf()
    x.register_post_accumulate_grad_hook(lambda p: 1)
    with pytest.raises(TypeError, match="must return None"):
        (x * 2).sum().backward()


def test_post_accumulate_grad_hook_steps_an_optimizer(executor):
    # torch's documented use: the update in the hook, each step (steps a compiled or
    # replayed backward would otherwise take without looking at the leaf's hooks)
    p = leaf([1.0, 2.0])
    ref = np.array([1.0, 2.0])
    p.register_post_accumulate_grad_hook(lambda t: t.add_(t.grad, alpha=-0.1))
    for _ in range(4):
        p.grad = None
        (p * p).sum().backward()
        ref = ref - 0.1 * 2 * ref
        np.testing.assert_allclose(p.data, ref)
