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
