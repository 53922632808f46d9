"""A concatenation that rebuilds one value from its slices is that value (lowering/restack.py).

The case it exists for: a Python loop that collects its states and stacks them. Its cost
must follow the loop's step, not its length (counters: generated lines, compiles), and
every form (np.stack at any axis, np.array, np.concatenate) must give NumPy's values and
central differences' gradients, rewritten or not. The rewrite is made on the graph, so the
forms are checked on the NumPy interpreter (tiering 'never': no Numba compile each) and
the compiled code once.
"""
from __future__ import annotations

import collections

import numpy as np
import pytest

import gradjit as gj
from gradjit.lowering.passes import optimize
from gradjit.runtime import tiers
from gradjit.tracer.coercion import traced_numpy


def _euler(T, how="stack", axis=0, order=None):
    def f(k, x0):
        x, states = x0, []
        for _ in range(T):
            x = x + 0.01 * (-k * x + np.sin(x))
            states.append(x)
        if order is not None:
            states = [states[i] for i in order]
        if how == "stack":
            S = np.stack(states, axis=axis)
        elif how == "array":
            S = np.array(states)
        else:
            S = np.concatenate(states, axis=axis)
        w = np.arange(S.size).reshape(S.shape) % 7   # (every element weighs differently)
        return (S ** 2 * w).mean()
    return f


def _ops(fn, *args, argnums=(0, 1)):
    """The ops of the optimised joint graph (traced, not compiled)."""
    f = gj.grad(fn, argnums=argnums)
    g, call, values = f._trace(args)
    with traced_numpy(g, fn):
        f._trace_body(g, call, values)
    return collections.Counter(n.op for n in optimize(g).nodes)


def _fd(f, k, x0, eps=1e-6):
    out = np.zeros_like(k)
    for i in np.ndindex(k.shape):
        kp, km = k.copy(), k.copy()
        kp[i] += eps
        km[i] -= eps
        out[i] = (f(kp, x0) - f(km, x0)) / (2 * eps)
    return out


@pytest.fixture
def args():
    rng = np.random.default_rng(0)
    return rng.random((3, 4)) + 0.5, rng.random((3, 4))


CASES = [("stack", 0), ("stack", 1), ("stack", 2), ("stack", -1), ("array", 0),
         ("concat", 0), ("concat", 1), ("concat", -1)]


@pytest.mark.parametrize("how,axis", CASES)
def test_a_folded_loops_states_stacked_are_the_scans_output(how, axis, args):
    f = _euler(60, how, axis)   # (60 steps of 6 nodes: folded into a scan)
    ops = _ops(f, *args)
    assert ops["scan.default"] == 2 and ops["cat.default"] == 0, ops
    with tiers.forced("never"):
        gk, _ = gj.grad(f, argnums=(0, 1))(*args)
        value = gj.jit(f)(*args)
    np.testing.assert_allclose(value, f(*args), rtol=1e-13)
    np.testing.assert_allclose(gk, _fd(f, *args), rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("order", [list(range(59, -1, -1)), list(range(0, 60, 2)),
                                   list(range(60)) + [3]])
def test_other_selections_of_the_states_are_left_as_they_are_and_right(order, args):
    f = _euler(60, order=order)
    assert _ops(f, *args)["cat.default"] > 0
    with tiers.forced("never"):
        gk, _ = gj.grad(f, argnums=(0, 1))(*args)
    np.testing.assert_allclose(gk, _fd(f, *args), rtol=1e-6, atol=1e-9)


def test_compiled_module_and_compiles_follow_the_step_not_the_length(args, tmp_path,
                                                                     monkeypatch):
    monkeypatch.setenv("GRADJIT_CACHE_DIR", str(tmp_path))
    lines = []
    for T in (100, 400):
        g = gj.grad(_euler(T), argnums=(0, 1))
        before = gj.stats()["compiles"]
        with tiers.forced("sync"):
            gk, _ = g(*args)
        assert gj.stats()["compiles"] - before == 1
        lines.append(len(g.graphs(*args)[2].splitlines()))
        with tiers.forced("never"):
            np.testing.assert_allclose(gk, gj.grad(_euler(T), argnums=(0, 1))(*args)[0],
                                       rtol=1e-12)
    assert lines[0] == lines[1]


def test_slices_of_an_argument_stacked_back_are_the_argument():
    x = np.arange(12.0).reshape(3, 4)
    rows = lambda x: (np.stack([x[0], x[1], x[2]]) ** 2).sum()           # noqa: E731
    cols = lambda x: (np.stack([x[:, j] for j in range(4)], axis=1) ** 3).sum()  # noqa: E731
    swapped = lambda x: (np.stack([x[1], x[0], x[2]]) * x).sum()          # noqa: E731
    for fn, rewritten in ((rows, True), (cols, True), (swapped, False)):
        ops = _ops(fn, x, argnums=0)
        assert (ops["cat.default"] == 0) == rewritten, ops
        with tiers.forced("never"):
            np.testing.assert_allclose(gj.grad(fn)(x), _fd(lambda a, _: fn(a), x, None),
                                       rtol=1e-6)
            out = gj.jit(lambda x: np.stack([x[0], x[1], x[2]]))(x)
        assert not np.shares_memory(out, x) and (out == x).all()


def _rk4(T, x0):
    """An RK4 loop whose first state is a NumPy array: its first step reads that array's
    rows as NumPy numbers (no nodes), so it is traced apart and the others fold."""
    def rhs(y, th):
        return np.stack([th[0] * y[0] - th[1] * y[0] * y[1], th[2] * y[0] * y[1] - th[3] * y[1]])

    def f(th):
        y, states = x0, []
        for _ in range(T):
            k1 = rhs(y, th)
            k2 = rhs(y + 0.005 * k1, th)
            k3 = rhs(y + 0.005 * k2, th)
            k4 = rhs(y + 0.01 * k3, th)
            y = y + 0.01 / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
            states.append(y)
        S = np.stack(states)
        return (S ** 2 * (np.arange(S.size).reshape(S.shape) % 5)).mean()
    return f


def _midpoint(T, x0):
    """A loop whose first state is a NumPy array the step reads at three places (each read
    captures a copy), each step two stages of the same shape."""
    def f(k):
        x, states = x0, []
        for _ in range(T):
            x = x + 0.01 * np.sin(k * (x + 0.005 * np.sin(k * x)))
            states.append(x)
        S = np.stack(states)
        return (S ** 2 * (np.arange(S.size).reshape(S.shape) % 5)).mean()
    return f


def _cat_parts(fn, *args, shape=None):
    """Parts of each concatenation (of result ``shape``, if given) in the joint graph, and
    how many scans it holds."""
    f = gj.grad(fn)
    g, call, values = f._trace(args)
    with traced_numpy(g, fn):
        f._trace_body(g, call, values)
    g = optimize(g)
    return ([len(n.inputs) for n in g.nodes if n.op == "cat.default"
             and (shape is None or n.outputs[0].shape == shape)],
            sum(n.op == "scan.default" for n in g.nodes))


def test_states_of_a_loop_from_a_numpy_array_stack_as_one_block(args):
    k, x0 = args
    th = np.array([1.1, 0.4, 0.1, 0.4])
    for f, arg, shape, want in (
            (_midpoint(60, x0), k, (60, 3, 4), []),   # all 60 steps fold: the scan's output
            (_rk4(8, x0[:2] + 0.5), th, (8, 2, 4), [2])):   # first state, one block of 7
        parts, scans = _cat_parts(f, arg, shape=shape)
        assert scans == 2 and parts == want, (parts, scans)
        with tiers.forced("never"):
            np.testing.assert_allclose(gj.jit(f)(arg), f(arg), rtol=1e-13)
            np.testing.assert_allclose(gj.grad(f)(arg), _fd(lambda a, _: f(a), arg, None),
                                       rtol=1e-6, atol=1e-9)


def test_runs_of_slices_inside_a_longer_concatenation_become_blocks():
    x = np.arange(1.0, 13.0).reshape(6, 2)
    fns = [lambda x: np.stack([x[0] * 2, x[1], x[2], x[3], x[5]]),
           lambda x: np.concatenate([x[:, 0], x[:, 1], np.ones(2)]),
           lambda x: np.stack([x[4], x[5], x[0], x[1]], axis=1)]
    want_parts = [[3], [2], [2]]   # (x[0] * 2, x[1:4], x[5]); (x.T merged, ones); 2 blocks
    for stacked, want in zip(fns, want_parts):
        fn = lambda x, stacked=stacked: (stacked(x) ** 3 * 1.5).sum()   # noqa: E731
        assert _cat_parts(fn, x, shape=stacked(x).shape)[0] == want
        with tiers.forced("never"):
            np.testing.assert_allclose(gj.jit(fn)(x), fn(x), rtol=1e-13)
            np.testing.assert_allclose(gj.grad(fn)(x), _fd(lambda a, _: fn(a), x, None),
                                       rtol=1e-6)


@pytest.mark.slow   # (two compiles)
def test_a_loop_from_a_numpy_array_compiles_to_one_module_whatever_its_length(args, tmp_path,
                                                                              monkeypatch):
    monkeypatch.setenv("GRADJIT_CACHE_DIR", str(tmp_path))
    x0, th = args[1][:2] + 0.5, np.array([1.1, 0.4, 0.1, 0.4])
    lines = []
    for T in (80, 320):   # (both past the sizes where fusion choices change)
        g = gj.grad(_rk4(T, x0))
        with tiers.forced("sync"):
            gk = g(th)
        lines.append(len(g.graphs(th)[2].splitlines()))
        with tiers.forced("never"):
            np.testing.assert_allclose(gk, gj.grad(_rk4(T, x0))(th), rtol=1e-12)
    assert lines[0] == lines[1]
