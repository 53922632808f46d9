"""``gj.autograd.backward`` / ``gj.autograd.grad``: arguments, messages and memory, as torch.

Values run on the NumPy reference interpreter (the ``interpreted`` fixture)
except the few tests that are about compiled plans (``is_grads_batched``
compiled once). Messages follow ``torch.autograd``; where torch itself has
changed the quoting of a name over versions (``'inputs'`` / `` `inputs` ``)
both spellings are accepted.
"""
from __future__ import annotations

import gc
import threading
import warnings
import weakref

import numpy as np
import pytest

import gradjit as gj

A = gj.autograd
Q = "[`']"  # torch quotes argument names with ' (older) or ` (newer)

FREED = "Trying to backward through the graph a second time"


def leaf(values, dtype=np.float64):
    return gj.tensor(np.asarray(values, dtype=dtype), requires_grad=True)


# --------------------------------------------------------------------------------------
# implicit gradients and shape checks
# --------------------------------------------------------------------------------------

def test_implicit_grad_only_for_scalar_outputs(interpreted):
    x = leaf([1.0, 2.0, 3.0])
    y = x * 2
    msg = "grad can be implicitly created only for scalar outputs"
    with pytest.raises(Exception, match=msg):
        y.backward()
    with pytest.raises(Exception, match=msg):
        A.backward([y])
    with pytest.raises(Exception, match=msg):
        A.grad(y, x)
    assert x.grad is None


def test_implicit_grad_error_is_a_runtime_error(interpreted):
    # torch raises RuntimeError; code ported from torch catches that.
    x = leaf([1.0, 2.0, 3.0])
    with pytest.raises(RuntimeError, match="grad can be implicitly created only for scalar"):
        (x * 2).backward()


def test_implicit_grad_for_single_element_outputs(interpreted):
    x = leaf([1.0, 2.0, 3.0])
    (x * x).sum().reshape(1).backward()       # shape (1,): one element, as torch allows
    np.testing.assert_allclose(x.grad.data, [2.0, 4.0, 6.0])
    (g,) = A.grad((x ** 3).sum(), x)
    np.testing.assert_allclose(g.data, [3.0, 12.0, 27.0])


def test_explicit_gradient_for_non_scalar(interpreted):
    x = leaf([1.0, 2.0, 3.0])
    v = np.array([1.0, -1.0, 0.5])
    (x * x).backward(gj.tensor(v))
    np.testing.assert_allclose(x.grad.data, 2 * np.array([1.0, 2.0, 3.0]) * v)
    (g,) = A.grad(x.exp(), x, grad_outputs=gj.tensor(v))
    np.testing.assert_allclose(g.data, np.exp([1.0, 2.0, 3.0]) * v)


def test_mismatch_in_shape_backward_and_grad(interpreted):
    x = leaf([1.0, 2.0, 3.0])
    a, b = x * 2, (x * 3).sum()
    pat = (r"Mismatch in shape: grad_output\[0\] has a shape of .*2.* and output\[0\] has a "
           r"shape of .*3")
    with pytest.raises(RuntimeError, match=pat):
        a.backward(gj.tensor(np.ones(2)))
    with pytest.raises(RuntimeError, match=pat):
        A.grad([a], [x], grad_outputs=[gj.tensor(np.ones(2))], retain_graph=True)
    # The index names the offending pair.
    pat1 = (r"Mismatch in shape: grad_output\[1\] has a shape of .* and output\[1\] has a "
            r"shape of ")
    with pytest.raises(RuntimeError, match=pat1):
        A.grad([a, b], [x], grad_outputs=[gj.tensor(np.ones(3)), gj.tensor(np.ones(4))])
    with pytest.raises(RuntimeError, match=pat1):
        A.backward([a, b], grad_tensors=[gj.tensor(np.ones(3)), gj.tensor(np.ones((1, 1)))])
    assert x.grad is None


def test_mismatch_in_shape_batched_variant(interpreted):
    x = leaf([1.0, 2.0, 3.0])
    y = x * 2
    with pytest.raises(RuntimeError) as info:
        A.grad(y, x, grad_outputs=gj.tensor(np.ones((2, 4))), is_grads_batched=True)
    msg = str(info.value)
    assert msg.startswith("If `is_grads_batched=True`, we interpret the first dimension of each "
                          "grad_output as the batch dimension.")
    assert "grad_output[0] has a shape of" in msg and "output[0] has a shape of" in msg
    assert "consider using vmap" in msg


def test_output_without_grad_fn_rejected(interpreted):
    x = gj.tensor(np.ones(3))
    with pytest.raises(RuntimeError, match="element 0 of tensors does not require grad and does "
                                           "not have a grad_fn"):
        (x * 2).sum().backward()


def test_grad_wrt_tensor_not_requiring_grad(interpreted):
    x = leaf([1.0, 2.0])
    c = gj.tensor(np.ones(2))
    with pytest.raises(RuntimeError, match="One of the differentiated Tensors"):
        A.grad((x * c).sum(), [x, c])


# --------------------------------------------------------------------------------------
# deprecated and rejected arguments
# --------------------------------------------------------------------------------------

def test_grad_variables_deprecated_but_works(interpreted):
    x = leaf([1.0, 2.0, 3.0])
    y = x * 2
    with pytest.warns(Warning, match=f"{Q}grad_variables{Q} is deprecated. Use "
                                     f"{Q}grad_tensors{Q} instead."):
        A.backward([y], grad_variables=[gj.tensor(np.array([1.0, 2.0, 3.0]))])
    np.testing.assert_allclose(x.grad.data, [2.0, 4.0, 6.0])


def test_grad_variables_and_grad_tensors_both_given(interpreted):
    x = leaf([1.0, 2.0, 3.0])
    y = x * 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(RuntimeError, match=f"{Q}grad_tensors{Q} and {Q}grad_variables{Q} "
                                               r"\(deprecated\) arguments both passed to "
                                               f"{Q}?backward\\(\\){Q}?"):
            A.backward([y], grad_tensors=[gj.tensor(np.ones(3))],
                       grad_variables=[gj.tensor(np.ones(3))])
    assert x.grad is None


def test_empty_inputs_rejected_by_backward(interpreted):
    x = leaf([1.0, 2.0])
    y = (x * x).sum()
    with pytest.raises(RuntimeError, match=f"{Q}inputs{Q} argument to {Q}?backward\\(\\){Q}? "
                                           "cannot be empty"):
        A.backward([y], inputs=[])
    with pytest.raises(RuntimeError, match="cannot be empty"):
        y.backward(inputs=[])
    assert x.grad is None


def test_empty_inputs_rejected_by_grad(interpreted):
    x = leaf([1.0, 2.0])
    y = (x * x).sum()
    # torch 2.x: "`inputs` argument to `grad()` cannot be empty."; older: "grad requires
    # non-empty inputs."
    with pytest.raises(RuntimeError, match=r"non-empty inputs|cannot be empty"):
        A.grad(y, [])
    with pytest.raises(RuntimeError, match=r"non-empty inputs|cannot be empty"):
        A.grad(y, ())


def test_only_inputs_false_warns(interpreted):
    x = leaf([1.0, 2.0])
    with pytest.warns(Warning, match="only_inputs argument is deprecated and is ignored now"):
        (g,) = A.grad((x * x).sum(), x, only_inputs=False)
    np.testing.assert_allclose(g.data, [2.0, 4.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        A.grad((x * x).sum(), x)                  # the default does not warn


@pytest.mark.parametrize("bad", ["a", [1.0, 2.0, 3.0], {"g": 1}, object()],
                         ids=["str", "list", "dict", "object"])
def test_non_tensor_grad_tensors_are_type_errors(interpreted, bad):
    x = leaf([1.0, 2.0, 3.0])
    y = x * 2
    with pytest.raises(TypeError, match="gradients can be either Tensors or None, but got "
                                        + type(bad).__name__):
        A.backward([y], grad_tensors=[bad])
    with pytest.raises(TypeError, match="gradients can be either Tensors or None"):
        A.grad([y], [x], grad_outputs=[bad])


def test_grad_tensors_none_entry_means_implicit(interpreted):
    x = leaf([1.0, 2.0, 3.0])
    s, v = (x * x).sum(), x * 3
    A.backward([s, v], grad_tensors=[None, gj.tensor(np.ones(3))])
    np.testing.assert_allclose(x.grad.data, 2 * np.array([1.0, 2.0, 3.0]) + 3)


def test_grad_outputs_count_mismatch(interpreted):
    x = leaf([1.0, 2.0])
    with pytest.raises(RuntimeError):
        A.grad([(x * x).sum()], [x], grad_outputs=[None, None])


# --------------------------------------------------------------------------------------
# allow_unused, materialize_grads, inputs=
# --------------------------------------------------------------------------------------

def test_allow_unused(interpreted):
    x, z = leaf([1.0, 2.0]), leaf([5.0, 6.0, 7.0])
    y = (x * x).sum()
    with pytest.raises(RuntimeError, match="appears to not have been used in the graph.*"
                                           "allow_unused=True"):
        A.grad(y, [x, z], retain_graph=True)
    with pytest.raises(RuntimeError, match="appears to not have been used in the graph"):
        A.grad(y, [x, z], retain_graph=True, allow_unused=False)
    gx, gz = A.grad(y, [x, z], allow_unused=True)
    np.testing.assert_allclose(gx.data, [2.0, 4.0])
    assert gz is None


def test_materialize_grads(interpreted):
    x, z = leaf([1.0, 2.0]), leaf([[5.0, 6.0, 7.0]])
    y = (x * x).sum()
    gx, gz = A.grad(y, [x, z], materialize_grads=True, retain_graph=True)
    np.testing.assert_allclose(gx.data, [2.0, 4.0])
    assert isinstance(gz, gj.Tensor)
    assert gz.shape == (1, 3) and gz.dtype == np.float64
    np.testing.assert_array_equal(gz.data, 0.0)
    gx, gz = A.grad(y, [x, z], materialize_grads=True, allow_unused=True)
    np.testing.assert_array_equal(gz.data, 0.0)
    with pytest.raises(ValueError, match="Expected allow_unused to be True or not passed when "
                                         "materialize_grads=True, but got: allow_unused=False."):
        A.grad((x * x).sum(), [x, z], materialize_grads=True, allow_unused=False)


def test_inputs_restricts_accumulation_to_leaves(interpreted):
    a, b = leaf([1.0, 2.0]), leaf([3.0, 4.0])
    (a * b).sum().backward(inputs=[a])
    np.testing.assert_allclose(a.grad.data, [3.0, 4.0])
    assert b.grad is None
    A.backward([(a * b).sum()], inputs=[b])
    np.testing.assert_allclose(a.grad.data, [3.0, 4.0])  # untouched by the second call
    np.testing.assert_allclose(b.grad.data, [1.0, 2.0])


def test_inputs_may_name_a_non_leaf(interpreted):
    x = leaf([1.0, 2.0, 3.0])
    h = x * 2
    y = (h * h).sum()
    y.backward(inputs=[h])
    np.testing.assert_allclose(h.grad.data, 2 * 2 * np.array([1.0, 2.0, 3.0]))
    assert x.grad is None


def test_inputs_single_tensor_not_list(interpreted):
    a, b = leaf([1.0, 2.0]), leaf([3.0, 4.0])
    A.backward((a * b).sum(), inputs=b)
    assert a.grad is None
    np.testing.assert_allclose(b.grad.data, [1.0, 2.0])


def test_grad_does_not_touch_dot_grad(interpreted):
    x = leaf([1.0, 2.0])
    (g,) = A.grad((x * x).sum(), x)
    assert isinstance(g, gj.Tensor) and g.grad_fn is None and not g.requires_grad
    assert x.grad is None


def test_grad_returns_tuple_for_several_inputs_and_outputs(interpreted):
    a, b = leaf([1.0, 2.0]), leaf([3.0, 4.0])
    y1, y2 = (a * b).sum(), (a * a).sum()
    ga, gb = A.grad([y1, y2], [a, b])                 # sum of both outputs' gradients
    np.testing.assert_allclose(ga.data, [3.0 + 2.0, 4.0 + 4.0])
    np.testing.assert_allclose(gb.data, [1.0, 2.0])


def test_accumulation_into_grad_across_calls(interpreted):
    x = leaf([1.0, 2.0, 3.0])
    for k in range(1, 4):
        (x * x).sum().backward()
        np.testing.assert_allclose(x.grad.data, k * 2 * np.array([1.0, 2.0, 3.0]))
    (x.exp()).sum().backward()                          # another structure adds to it too
    np.testing.assert_allclose(x.grad.data, 6 * np.array([1.0, 2.0, 3.0]) + np.exp([1.0, 2, 3]))
    x.grad = None
    (x * 4).sum().backward()
    np.testing.assert_allclose(x.grad.data, [4.0, 4.0, 4.0])


def test_shared_subexpression_used_twice(interpreted):
    x = leaf([0.5, -1.0])
    h = x.tanh()
    (h * h + h).sum().backward()
    t = np.tanh([0.5, -1.0])
    np.testing.assert_allclose(x.grad.data, (2 * t + 1) * (1 - t ** 2))


# --------------------------------------------------------------------------------------
# retain_graph and releasing saved values
# --------------------------------------------------------------------------------------

def test_second_backward_without_retain_graph_raises(interpreted):
    x = leaf([1.0, 2.0])
    y = (x.exp() * x).sum()
    y.backward()
    with pytest.raises(RuntimeError, match=FREED):
        y.backward()
    with pytest.raises(RuntimeError, match=FREED):
        A.grad(y, x)


@pytest.mark.parametrize("deferred", [True, False], ids=["deferred", "eager"])
def test_second_backward_that_needs_no_saved_values_runs_as_torchs(executor, deferred):
    # torch fails a second backward only when it needs saved tensors the first freed
    # (leaves a node saved included); gradjit refused every freed graph
    prev = gj.set_deferred(deferred)
    try:
        for _ in range(2):   # the second step replays the first one's record
            x = leaf([1.0, 2.0])
            y = (x + 1).sum()
            y.backward()
            y.backward()
            np.testing.assert_array_equal(x.grad.data, [2.0, 2.0])
            (g,) = A.grad(y, x)
            np.testing.assert_array_equal(g.data, [1.0, 1.0])
            z = y * 2.0               # new ops on top of the freed graph
            z.backward()
            np.testing.assert_array_equal(x.grad.data, [4.0, 4.0])
            for saving in (lambda: (x * x).sum(), lambda: x.exp().sum(),
                           lambda: (x * gj.tensor(np.array([1.0, 2.0]))).sum()):
                y = saving()
                y.backward()
                with pytest.raises(RuntimeError, match=FREED):
                    y.backward()
                with pytest.raises(RuntimeError, match=FREED):
                    (y * 3.0).backward()
    finally:
        gj.set_deferred(prev)


def test_assigning_grad_and_data_checks_as_torch(executor):
    # x.grad = a tensor of another shape was stored (and broke or broadcast into the
    # next accumulation); x.data = a gj tensor stored the Tensor as the data
    x = leaf([1.0, 1.0, 1.0])
    with pytest.raises(RuntimeError, match=r"attempting to assign a gradient of size '\[2\]' "
                                           r"to a tensor of size '\[3\]'"):
        x.grad = gj.ones(2)
    with pytest.raises(RuntimeError, match="attempting to assign a gradient with dtype"):
        x.grad = gj.tensor(np.ones(3, np.float32))
    with pytest.raises(TypeError, match="assigned grad expected to be a Tensor or None but "
                                        "got grad of type ndarray"):
        x.grad = np.ones(3)
    with pytest.raises(RuntimeError, match="can't assign Variable as its own grad"):
        x.grad = x
    assert x.grad is None
    x.grad = gj.tensor(np.array([1.0, 2.0, 3.0]))
    (x * 2).sum().backward()
    np.testing.assert_array_equal(x.grad.data, [3.0, 4.0, 5.0])
    x.data = gj.tensor(np.array([5.0, 6.0, 7.0]))
    assert type(x.data) is np.ndarray and x.requires_grad and x.is_leaf
    for _ in range(2):   # (the second step replays the first one's record)
        x.grad = None
        (x * x).sum().backward()
        np.testing.assert_array_equal(x.grad.data, [10.0, 12.0, 14.0])   # torch 2.13


def test_grad_also_frees_the_graph(interpreted):
    x = leaf([1.0, 2.0])
    y = (x.sin() * x).sum()
    A.grad(y, x)
    with pytest.raises(RuntimeError, match="Specify retain_graph=True"):
        A.grad(y, x)


SAVES_NOTHING = {"add": lambda x: x + 3.0, "reshape": lambda x: x.reshape(2, 1),
                 "transpose": lambda x: x.reshape(2, 1).t(), "cat": lambda x: gj.cat([x, x]),
                 "slice": lambda x: x[0:1] + 0.0}


@pytest.mark.parametrize("deferred", [True, False], ids=["deferred", "eager"])
@pytest.mark.parametrize("make", sorted(SAVES_NOTHING))
def test_new_graph_on_a_freed_graph_that_saved_nothing_runs(executor, deferred, make):
    # h = x + 3; h.sum().backward(); (h * h).sum().backward(): the second graph's mul
    # reads h, a value no freed op saved (torch: x.grad = 1 + 2 (x + 3) = [9, 11]);
    # gradjit refused any read of a freed graph's values. Expected values: 1 from the
    # first backward plus d/dx sum(h * h) = 2 h dh/dx, summed where h repeats x.
    prev = gj.set_deferred(deferred)
    try:
        for _ in range(2):   # the second step replays the first one's record
            x = leaf([1.0, 2.0])
            h = SAVES_NOTHING[make](x)
            h.sum().backward()
            first = x.grad.data.copy()
            (h * h).sum().backward()
            x2 = leaf([1.0, 2.0])
            (g,) = A.grad((SAVES_NOTHING[make](x2) ** 2).sum(), x2)
            np.testing.assert_allclose(x.grad.data, first + g.data)
            if make == "add":
                np.testing.assert_allclose(x.grad.data, [9.0, 11.0])
            # a freed op that saved values still refuses
            h = x.exp()
            h.sum().backward()
            with pytest.raises(RuntimeError, match=FREED):
                (h * h).sum().backward()
    finally:
        gj.set_deferred(prev)


def test_new_graph_on_a_freed_graph_matches_torch(interpreted):
    torch = pytest.importorskip("torch")
    for name, make in SAVES_NOTHING.items():
        for second in (lambda h: h * h, lambda h: h.exp(), lambda h: h.sum() * 2.0):
            got = []
            for lib in (torch, gj):
                x = lib.tensor([1.0, 2.0], dtype=lib.float64, requires_grad=True)
                h = make(x) if lib is gj else SAVES_NOTHING_TORCH[name](torch, x)
                h.sum().backward()
                second(h).sum().backward()
                got.append(np.asarray(x.grad.tolist() if lib is torch else x.grad.data))
            np.testing.assert_allclose(got[1], got[0], err_msg=name)


SAVES_NOTHING_TORCH = {"add": lambda t, x: x + 3.0, "reshape": lambda t, x: x.reshape(2, 1),
                       "transpose": lambda t, x: x.reshape(2, 1).t(),
                       "cat": lambda t, x: t.cat([x, x]), "slice": lambda t, x: x[0:1] + 0.0}


def test_retain_graph_allows_second_backward(interpreted):
    x = leaf([1.0, 2.0])
    y = (x.exp() * x).sum()
    y.backward(retain_graph=True)
    y.backward(retain_graph=True)
    expected = np.exp([1.0, 2.0]) * (1 + np.array([1.0, 2.0]))
    np.testing.assert_allclose(x.grad.data, 2 * expected)
    (g,) = A.grad(y, x)             # retain_graph=None: frees now
    np.testing.assert_allclose(g.data, expected)
    with pytest.raises(RuntimeError, match=FREED):
        y.backward()


def test_saved_arrays_released_after_backward(interpreted):
    x = leaf(np.linspace(0.1, 1.0, 1000))
    h = x.exp()
    fn = h.grad_fn
    ref = weakref.ref(h.data)            # computed now (the forward is deferred until read)
    assert fn.out_data[0] is ref()
    y = (h * h).sum()
    del h
    gc.collect()
    assert ref() is not None             # still saved for backward
    y.backward()
    gc.collect()
    assert fn.out_data is None
    assert ref() is None                 # the array itself is gone


def test_saved_arrays_kept_with_retain_graph(interpreted):
    x = leaf([1.0, 2.0])
    h = x.exp()
    fn = h.grad_fn
    y = (h * h).sum()
    y.backward(retain_graph=True)
    assert fn.out_data is not None
    del h   # (a Tensor still holding its value would keep it: GradFn.held)
    y.backward()
    assert fn.out_data is None


def test_other_graphs_not_freed(interpreted):
    # Freeing one graph leaves an independent graph on the same leaf intact.
    x = leaf([1.0, 2.0])
    y1 = (x.exp()).sum()
    y2 = (x.sin()).sum()
    y1.backward()
    y2.backward()
    np.testing.assert_allclose(x.grad.data, np.exp([1.0, 2.0]) + np.cos([1.0, 2.0]))


# --------------------------------------------------------------------------------------
# is_grads_batched
# --------------------------------------------------------------------------------------

def _mlp(x, w1, w2):
    return ((x @ w1).tanh() @ w2).sin()


def test_is_grads_batched_equals_loop_of_vjps(interpreted, rng):
    x = gj.tensor(rng.normal(size=(4, 3)))
    w1 = gj.tensor(rng.normal(size=(3, 5)), requires_grad=True)
    w2 = gj.tensor(rng.normal(size=(5, 2)), requires_grad=True)
    out = _mlp(x, w1, w2)
    V = rng.normal(size=(6, 4, 2))
    g1, g2 = A.grad(out, [w1, w2], grad_outputs=gj.tensor(V), is_grads_batched=True,
                    retain_graph=True)
    assert g1.shape == (6, 3, 5) and g2.shape == (6, 5, 2)
    for k in range(6):
        l1, l2 = A.grad(out, [w1, w2], grad_outputs=gj.tensor(V[k]), retain_graph=True)
        np.testing.assert_allclose(g1.data[k], l1.data, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(g2.data[k], l2.data, rtol=1e-12, atol=1e-12)


def test_is_grads_batched_materialize_has_batch_dim(interpreted):
    x, z = leaf([1.0, 2.0]), leaf([1.0, 2.0, 3.0])
    gx, gz = A.grad(x * x, [x, z], grad_outputs=gj.tensor(np.eye(2)), is_grads_batched=True,
                    materialize_grads=True)
    np.testing.assert_allclose(gx.data, np.diag([2.0, 4.0]))
    assert gz.shape == (2, 3)
    np.testing.assert_array_equal(gz.data, 0.0)


def test_is_grads_batched_compiled_once(rng):
    def step(seed):
        r = np.random.default_rng(seed)
        w = gj.tensor(r.normal(size=(3, 4)), requires_grad=True)
        x = gj.tensor(r.normal(size=(5, 3)))
        out = (x @ w).tanh() * 1.5
        V = r.normal(size=(7, 5, 4))
        (g,) = A.grad(out, w, grad_outputs=gj.tensor(V), is_grads_batched=True)
        t = np.tanh(x.data @ w.data)
        expected = np.einsum("ij,bjk->bik", x.data.T, V * 1.5 * (1 - t ** 2))
        np.testing.assert_allclose(g.data, expected, rtol=1e-10, atol=1e-12)

    step(1)
    before = gj.stats()
    step(2)
    after = gj.stats()
    assert after["compiles"] == before["compiles"]
    assert after["disk_hits"] == before["disk_hits"]
    assert after["memory_hits"] > before["memory_hits"]


def test_is_grads_batched_requires_given_grad_outputs(interpreted):
    x = leaf([1.0, 2.0])
    with pytest.raises(RuntimeError):
        A.grad((x * x).sum(), x, is_grads_batched=True)


# --------------------------------------------------------------------------------------
# grad modes
# --------------------------------------------------------------------------------------

def test_no_grad_context_and_decorator(interpreted):
    x = leaf([1.0, 2.0])
    with gj.no_grad():
        assert not gj.is_grad_enabled()
        y = x * 2
    assert gj.is_grad_enabled()
    assert not y.requires_grad and y.grad_fn is None

    @gj.no_grad()
    def f(t):
        assert not gj.is_grad_enabled()
        return t * 2

    assert not f(x).requires_grad
    assert gj.is_grad_enabled()
    assert A.no_grad is gj.no_grad


def test_grad_modes_decorate_without_parentheses_and_recursion_restores_the_mode():
    # torch accepts @no_grad / @enable_grad / @inference_mode: gradjit took the function
    # for a mode argument and returned a wrong wrapper (f(x) gave a function back)
    x = leaf([1.0, 2.0])

    @gj.no_grad
    def f(t):
        return t * 2

    @gj.enable_grad
    def g(t):
        return t * 3

    @gj.inference_mode
    def h(t):
        return t * 4

    assert f.__name__ == "f" and not f(x).requires_grad and gj.is_grad_enabled()
    with gj.no_grad():
        assert g(x).requires_grad and not gj.is_grad_enabled()
    assert not h(x).requires_grad and gj.is_grad_enabled()
    with pytest.raises(TypeError, match="takes no mode argument"):
        gj.no_grad(False)

    # each call enters its own context: a recursive call restored the outer call's mode
    # from a shared one and left grad mode off for good
    @gj.no_grad()
    def down(n):
        return down(n - 1) if n else gj.is_grad_enabled()

    @gj.inference_mode()
    def down_inf(n):
        return down_inf(n - 1) if n else gj.is_grad_enabled()

    assert down(3) is False and gj.is_grad_enabled()
    assert down_inf(3) is False and gj.is_grad_enabled()


def test_enable_grad_inside_no_grad(interpreted):
    x = leaf([1.0, 2.0])
    with gj.no_grad():
        with gj.enable_grad():
            y = x * 2
        z = x * 2
        assert not gj.is_grad_enabled()

        @gj.enable_grad()
        def f(t):
            return t * 3

        w = f(x)
        assert not gj.is_grad_enabled()
    assert y.requires_grad and y.grad_fn is not None
    assert not z.requires_grad
    assert w.requires_grad
    w.sum().backward()
    np.testing.assert_allclose(x.grad.data, [3.0, 3.0])


def test_set_grad_enabled_context_and_function(interpreted):
    x = leaf([1.0, 2.0])
    with gj.set_grad_enabled(False):
        assert not gj.is_grad_enabled()
        assert not (x * 2).requires_grad
        with gj.set_grad_enabled(True):
            assert (x * 2).requires_grad
        assert not gj.is_grad_enabled()
    assert gj.is_grad_enabled()
    gj.set_grad_enabled(False)          # as a function, as torch
    try:
        assert not gj.is_grad_enabled()
    finally:
        gj.set_grad_enabled(True)
    assert gj.is_grad_enabled()


def test_set_grad_enabled_decorator(interpreted):
    x = leaf([1.0, 2.0])

    @gj.set_grad_enabled(False)
    def f(t):
        return gj.is_grad_enabled(), (t * 2).requires_grad

    try:
        assert gj.is_grad_enabled(), "decorating must not change the current grad mode"
        for _ in range(2):                           # every call, not only the first
            assert f(x) == (False, False)
            assert gj.is_grad_enabled()
    finally:
        A.set_grad_enabled(True)


def test_inference_mode(interpreted):
    x = leaf([1.0, 2.0])
    assert A.inference_mode is gj.inference_mode
    with gj.inference_mode():
        assert not gj.is_grad_enabled()
        y = x * 2
    assert gj.is_grad_enabled()
    assert not y.requires_grad and y.grad_fn is None
    # An inference tensor can never be saved for a recorded graph later.
    w = leaf([3.0, 4.0])
    with pytest.raises(RuntimeError, match="Inference tensors cannot be saved for backward"):
        y * w

    @gj.inference_mode()
    def f(t):
        return t * 3

    assert not f(x).requires_grad
    assert gj.is_grad_enabled()
    with gj.inference_mode(False):
        assert gj.is_grad_enabled()
        assert (x * 2).requires_grad


def test_inference_mode_false_records_again_inside_inference_mode(interpreted):
    # torch's inference_mode(mode) sets grad mode to ``not mode``: inference_mode(False)
    # records again inside inference_mode() and no_grad() (it only ever turned grad off)
    x = leaf([1.0, 2.0, 3.0])
    with gj.inference_mode():
        assert gj.is_inference_mode_enabled()
        with gj.inference_mode(False):
            assert gj.is_grad_enabled() and not gj.is_inference_mode_enabled()
            y = x * 2
            c = gj.ones(3)
        z = x * 2
    assert y.requires_grad and not y.is_inference() and not c.is_inference()
    assert not z.requires_grad and z.is_inference() and not x.is_inference()
    y.sum().backward()
    np.testing.assert_allclose(x.grad.data, [2.0, 2.0, 2.0])
    with gj.no_grad():
        with gj.inference_mode(False):
            assert gj.is_grad_enabled() and (x * 2).requires_grad
        assert not gj.is_grad_enabled()
    with gj.inference_mode():
        with gj.inference_mode(False):
            with gj.no_grad():
                assert not (x * 2).requires_grad
            assert (x * 2).requires_grad
        assert not gj.is_grad_enabled() and not (x * 2).requires_grad
    assert gj.is_grad_enabled()


@pytest.mark.parametrize("switch", ["enable_grad", "set_grad_enabled"])
def test_enable_grad_inside_inference_mode_records_nothing(interpreted, switch):
    # torch: inference mode wins over enable_grad (grad mode reads True, nothing recorded)
    x = leaf([1.0, 2.0])
    with gj.inference_mode():
        with (gj.enable_grad() if switch == "enable_grad" else gj.set_grad_enabled(True)):
            assert gj.is_grad_enabled()
            z = x * 2
            x.add_(1.0)   # in place on a leaf that requires grad: allowed, as not recorded
        with gj.no_grad():
            with gj.enable_grad():
                assert not (x * 2).requires_grad
    assert not z.requires_grad and z.grad_fn is None and z.is_inference()
    np.testing.assert_allclose(x.data, [2.0, 3.0])
    assert (x * 2).requires_grad


def test_grad_create_graph_records_under_no_grad(interpreted):
    # torch's engine runs the backward with grad mode = create_graph
    x = leaf([0.3, -1.2, 0.7])
    y = (x ** 3).sum()
    with gj.no_grad():
        (g,) = A.grad(y, x, create_graph=True)
        assert not gj.is_grad_enabled()
    assert g.requires_grad
    np.testing.assert_allclose(g.data, 3 * x.data ** 2)
    (gg,) = A.grad(g.sum(), x)
    np.testing.assert_allclose(gg.data, 6 * x.data)
    y1, y2 = (x ** 3).sum(), (x ** 3).sum()
    with gj.no_grad():   # backward(create_graph=True): .grad carries history, accumulated twice
        y1.backward(create_graph=True)
        y2.backward(create_graph=True)
    assert x.grad.requires_grad
    (gg,) = A.grad(x.grad.sum(), x)
    np.testing.assert_allclose(gg.data, 12 * x.data)
    y = (x ** 3).sum()
    with gj.inference_mode():   # inference mode still wins
        (g,) = A.grad(y, x, create_graph=True)
    assert not g.requires_grad and g.is_inference()
    with gj.enable_grad():   # and without create_graph the result has no history
        (g,) = A.grad((x ** 3).sum(), x)
    assert not g.requires_grad


def test_grad_modes_restore_on_exception(interpreted):
    with pytest.raises(ValueError):
        with gj.no_grad():
            raise ValueError
    assert gj.is_grad_enabled()
    with pytest.raises(ValueError):
        with gj.inference_mode():
            raise ValueError
    assert gj.is_grad_enabled()


@pytest.mark.parametrize("mode", ["no_grad", "set_grad_enabled", "inference_mode"])
def test_grad_modes_are_thread_local(interpreted, mode):
    x = leaf([1.0, 2.0])
    entered, checked = threading.Event(), threading.Event()
    seen = {}

    def worker():
        cm = {"no_grad": gj.no_grad, "inference_mode": gj.inference_mode,
              "set_grad_enabled": lambda: gj.set_grad_enabled(False)}[mode]()
        with cm:
            seen["inside"] = gj.is_grad_enabled()
            seen["records"] = (x * 2).requires_grad
            entered.set()
            checked.wait(10)
        seen["after"] = gj.is_grad_enabled()

    t = threading.Thread(target=worker)
    t.start()
    try:
        assert entered.wait(10)
        # The other thread is inside its no-grad block right now; this one is not.
        assert gj.is_grad_enabled()
        y = x * 2
        assert y.requires_grad and y.grad_fn is not None
    finally:
        checked.set()
        t.join(10)
    assert seen == {"inside": False, "records": False, "after": True}

    with gj.no_grad():   # and the other way round: a fresh thread starts with grad enabled
        res = {}
        th = threading.Thread(target=lambda: res.update(on=gj.is_grad_enabled(),
                                                        rec=(x * 2).requires_grad))
        th.start()
        th.join(10)
    assert res == {"on": True, "rec": True}



# --------------------------------------------------------------------------------------
# small cases torch handles
# --------------------------------------------------------------------------------------

def test_output_that_is_the_input_leaf(interpreted):
    x = leaf([1.0, 2.0])
    (g,) = A.grad(x, x, grad_outputs=gj.tensor(np.array([3.0, 4.0])))
    np.testing.assert_allclose(g.data, [3.0, 4.0])
    x.backward(gj.tensor(np.array([5.0, 6.0])))
    np.testing.assert_allclose(x.grad.data, [5.0, 6.0])


def test_detach_stops_gradient(interpreted):
    x = leaf([1.0, 2.0])
    d = x.detach() * 2
    assert not d.requires_grad
    (g,) = A.grad((d * x).sum(), x)
    np.testing.assert_allclose(g.data, [2.0, 4.0])


def test_float32_gradients_stay_float32(interpreted):
    x = gj.tensor(np.array([1.0, 2.0], dtype=np.float32), requires_grad=True)
    (x * x).sum().backward()
    assert x.grad.dtype == np.float32
    (g,) = A.grad((x ** 3).sum(), x, create_graph=True)
    (h,) = A.grad(g.sum(), x)
    assert g.dtype == np.float32 and h.dtype == np.float32
    np.testing.assert_allclose(h.data, [6.0, 12.0])


def test_grad_accumulates_into_the_same_tensor_as_torch():
    # a reference to .grad sees the sum of later backward calls (torch adds in place);
    # each path: the fast replayed step, the general engine, retain_graph
    w = gj.tensor(np.array([1.0, 2.0]), requires_grad=True)
    (w * 3.0).sum().backward()
    g = w.grad
    for _ in range(3):
        (w * w).sum().backward()
    assert w.grad is g
    np.testing.assert_allclose(g.data, [3.0 + 3 * 2.0, 3.0 + 3 * 4.0])
    x = gj.tensor(np.array([1.0, 2.0]), requires_grad=True)
    y = (x * x).sum()
    y.backward(retain_graph=True)
    first = x.grad
    y.backward()
    assert x.grad is first
    np.testing.assert_allclose(first.data, [4.0, 8.0])


def test_is_grads_batched_with_create_graph_is_differentiable(interpreted, rng):
    # torch allows it (its vmap fallback); each row's history is kept, so the Jacobian
    # rows it returns can be differentiated again.
    x0 = rng.normal(size=3)

    def jac_sum(x0, batched):
        x = leaf(x0)
        y = (x ** 3).sum() * x
        if batched:
            (J,) = A.grad(y, x, grad_outputs=gj.tensor(np.eye(3)), is_grads_batched=True,
                          create_graph=True)
        else:
            J = gj.stack([A.grad(y, x, grad_outputs=gj.tensor(e), create_graph=True,
                                 retain_graph=True)[0] for e in np.eye(3)])
        (J * gj.tensor(np.arange(9.0).reshape(3, 3))).sum().backward()
        return J.data, x.grad.data

    J, gx = jac_sum(x0, True)
    J_ref, gx_ref = jac_sum(x0, False)
    s = (x0 ** 3).sum()
    np.testing.assert_allclose(J, 3 * np.outer(x0, x0 ** 2) + s * np.eye(3), rtol=1e-12)
    np.testing.assert_allclose(J, J_ref, rtol=1e-12)
    np.testing.assert_allclose(gx, gx_ref, rtol=1e-12)
    # finite differences of the weighted Jacobian sum, as a second oracle
    W = np.arange(9.0).reshape(3, 3)
    F = lambda x: (W * (3 * np.outer(x, x ** 2) + (x ** 3).sum() * np.eye(3))).sum()
    fd = [(F(x0 + h) - F(x0 - h)) / 2e-6 for h in np.eye(3) * 1e-6]
    np.testing.assert_allclose(gx, fd, rtol=1e-6)


@pytest.mark.slow
def test_gradcheck_takes_torchs_keywords():
    y = gj.tensor(np.array([0.3, -1.2, 2.0]), requires_grad=True)
    x = gj.tensor(np.array([0.7, 0.4, -1.5]), requires_grad=True)
    kw = dict(check_batched_grad=True, nondet_tol=0.0, check_grad_dtypes=True, masked=False)
    assert gj.autograd.gradcheck(gj.atan2, (y, x), check_forward_ad=True, **kw)
    assert gj.autograd.gradcheck(lambda a: a.sin() * a, (x,), check_forward_ad=True,
                                 check_backward_ad=False)
    assert gj.autograd.gradgradcheck(gj.atan2, (y, x), **kw)
    with pytest.raises(ValueError, match="check_forward_ad or check_backward_ad"):
        gj.autograd.gradcheck(gj.atan2, (y, x), check_backward_ad=False)
    with pytest.raises(NotImplementedError, match="masked"):
        gj.autograd.gradcheck(gj.atan2, (y, x), masked=True)
    with pytest.raises(NotImplementedError, match="check_fwd_over_rev"):
        gj.autograd.gradgradcheck(gj.atan2, (y, x), check_fwd_over_rev=True)


# --------------------------------------------------------------------------------------
# retain_grad under autograd.grad (torch fills .grad of retaining tensors it reaches)
# --------------------------------------------------------------------------------------

def _retain_cases(lib):
    """(name, value of .grad or None) for the cases below, with ``lib`` torch or gradjit."""
    out = {}

    def mk():
        x = lib.tensor([1.0, 2.0], dtype=lib.float64, requires_grad=True)
        h = x ** 2
        h.retain_grad()
        return x, h

    def arr(t):
        return None if t is None else np.array(t.tolist() if lib is not gj else t.data)

    x, h = mk()
    lib.autograd.grad(h.sum(), x, retain_graph=True)
    out["grad"] = arr(h.grad)
    lib.autograd.grad((h * 3.0).sum(), x)
    out["accumulates"] = arr(h.grad)
    x, h = mk()
    lib.autograd.grad(h.sum(), h)
    out["asked"] = arr(h.grad)
    x, h = mk()
    w = lib.tensor([1.0, 1.0], dtype=lib.float64, requires_grad=True)
    g = w * 2.0
    g.retain_grad()
    lib.autograd.grad((h + g).sum(), x)
    out["off_path"], out["on_path"] = arr(g.grad), arr(h.grad)
    x = lib.tensor([1.0, 2.0], dtype=lib.float64, requires_grad=True)
    x2 = x ** 2
    x2.retain_grad()
    h = x2 * 1.0
    h.retain_grad()
    k = h * 3.0
    k.retain_grad()
    lib.autograd.grad((k * 2.0).sum(), h)
    out["upstream"], out["input"], out["between"] = arr(x2.grad), arr(h.grad), arr(k.grad)
    x, h = mk()
    w = lib.tensor([1.0, 1.0], dtype=lib.float64, requires_grad=True)
    g = w * 2.0
    g.retain_grad()
    (h + g).sum().backward(inputs=[x])
    out["backward_inputs_off_path"] = arr(g.grad)
    return out


EXPECTED_RETAINED = {"grad": [1.0, 1.0], "accumulates": [4.0, 4.0], "asked": [1.0, 1.0],
                     "off_path": None, "on_path": [1.0, 1.0], "upstream": None,
                     "input": [6.0, 6.0], "between": [2.0, 2.0],
                     "backward_inputs_off_path": None}


def test_grad_fills_retained_grads_on_its_paths(interpreted):
    # h.retain_grad(); autograd.grad(h.sum(), x) left h.grad None (torch: [1, 1]); only
    # tensors whose ops torch runs (on a path to an input asked for) get one
    got = _retain_cases(gj)
    for name, want in EXPECTED_RETAINED.items():
        if want is None:
            assert got[name] is None, name
        else:
            np.testing.assert_allclose(got[name], want, err_msg=name)


def test_grad_fills_retained_grads_as_torch(interpreted):
    torch = pytest.importorskip("torch")
    ref, got = _retain_cases(torch), _retain_cases(gj)
    for name in ref:
        assert (ref[name] is None) == (got[name] is None), name
        if ref[name] is not None:
            np.testing.assert_allclose(got[name], ref[name], err_msg=name)
