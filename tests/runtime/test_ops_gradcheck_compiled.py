"""Compiled and interpreted gradients agree, for one representative case per op.

Every case of ``test_ops_gradcheck.CASES`` marked ``rep=True`` (one per op or op
group, about 55) runs compiled (Numba) in tensor mode and in jit mode, and is
compared with the NumPy reference interpreter to 1e-10 in float64; each
compiles two graphs, so the whole module stays near 110 compiles. A second
call with new values reuses the compiled code (no recompilation) and must
agree as well. Two float32 cases check that float32 stays float32.

Tensor-mode backward plans are cached process-wide by graph structure; the
``_PLANS`` table is swapped for an empty one around each executor switch so a
plan built by an interpreted test elsewhere in the session is never reused
here (``test_executor_switch_applies_to_cached_tensor_plans`` checks that the
engine itself keeps the executors apart).
"""
from __future__ import annotations

import numpy as np
import pytest

import gradjit as gj
from gradjit.runtime import engine
from tests.runtime.test_ops_gradcheck import (REPS, Case, check_close, jit_grads, normal,
                                              tensor_grads)

pytestmark = pytest.mark.slow   # (pyproject.toml: the default run skips it; CI runs it)


def _use(monkeypatch, executor):
    if executor == "numpy":
        monkeypatch.setenv("GRADJIT_EXECUTOR", "numpy")
    else:
        monkeypatch.delenv("GRADJIT_EXECUTOR", raising=False)
    monkeypatch.setattr(engine, "_PLANS", {})


def _reference(case, arrays, W, monkeypatch):
    _use(monkeypatch, "numpy")
    ref = tensor_grads(case, arrays, W), jit_grads(case, arrays, W)
    for a, b in zip(*ref):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    return ref


@pytest.mark.parametrize("case", REPS, ids=[c.id for c in REPS])
def test_compiled_matches_interpreted(case, monkeypatch):
    a1, a2 = case.arrays(), case.arrays("second call")
    W1, W2 = case.weights(a1), case.weights(a2)
    ref1, ref2 = _reference(case, a1, W1, monkeypatch), _reference(case, a2, W2, monkeypatch)

    _use(monkeypatch, "numba")
    before = gj.stats()
    check_close(tensor_grads(case, a1, W1), ref1[0], 1e-10, 1e-10, "compiled tensor mode")
    # W is an argument (not differentiated) so the compiled function can be called again
    dgrad = gj.grad(lambda *a: (case.fn(*a[:-1]) * a[-1]).sum(), argnums=case.diff)
    check_close(list(dgrad(*a1, W1)), ref1[1], 1e-10, 1e-10, "compiled jit mode")
    mid = gj.stats()
    assert sum(mid[k] - before[k] for k in ("compiles", "disk_hits", "memory_hits")) >= 2

    # second call, new values: the compiled plan / function is reused, results still agree
    check_close(tensor_grads(case, a2, W2), ref2[0], 1e-10, 1e-10, "compiled tensor mode (reuse)")
    g2 = dgrad(*a2, W2)
    check_close(list(g2), ref2[1], 1e-10, 1e-10, "compiled jit mode (reuse)")
    after = gj.stats()
    for k in ("compiles", "disk_hits"):
        assert after[k] == mid[k], f"a second call with the same structure was recompiled ({k})"
    for g in g2:
        assert np.asarray(g).dtype == np.float64


F32_CASES = [
    Case("f32", lambda x, y: (np.tanh(x * y + 0.5) - x.sigmoid() / 2.0).sum(1),
         (normal(3, 4), normal(4)), tag="elementwise-sum"),
    Case("f32", lambda x, w, b: (x @ w + b).log_softmax(-1) + (x ** 2).mean(),
         (normal(3, 4), normal(4, 5), normal(5)), tag="matmul-logsoftmax"),
    # Python scalars are weak (NEP 50): none of these may promote to float64
    Case("f32", lambda x: (gj.where(x > 0.0, x, 0.0) + 2.0 ** x + 2.0 / (x * x + 1.0)
                           + (x * x + 0.5) ** 0.5 - x.amax(0) + x.softmax(0)
                           + x.mean(1, keepdim=True) + abs(x) - 1.5 * x.exp()),
         (normal(3, 4),), tag="scalars"),
]


@pytest.mark.parametrize("executor", ["numba", "numpy"])
@pytest.mark.parametrize("case", F32_CASES, ids=[c.id for c in F32_CASES])
def test_float32_gradients_stay_float32(case, executor, monkeypatch):
    a64 = case.arrays()
    W64 = case.weights(a64)
    ref = _reference(case, a64, W64, monkeypatch)[0]

    a32 = [a.astype(np.float32) for a in a64]
    W32 = W64.astype(np.float32)
    assert case.forward(*a32).dtype == np.float32
    _use(monkeypatch, executor)
    tg = tensor_grads(case, a32, W32)
    jg = jit_grads(case, a32, W32)
    for g in tg + jg:
        assert np.asarray(g).dtype == np.float32
    check_close(tg, ref, 1e-4, 1e-4, f"{executor} float32 tensor mode")
    check_close(jg, ref, 1e-4, 1e-4, f"{executor} float32 jit mode")


def test_executor_switch_applies_to_cached_tensor_plans(monkeypatch):
    """A backward structure first run interpreted (GRADJIT_EXECUTOR=numpy) must be
    compiled when the same structure later runs without the switch: the compiled
    path must not be silently replaced by the interpreter's cached plan."""
    x0 = np.linspace(0.1, 1.0, 7 * 11).reshape(7, 11)   # a shape no other test uses

    def step():
        x = gj.tensor(x0, requires_grad=True)
        (x.cos() * x.sqrt()).sum().backward()
        return x.grad.data

    monkeypatch.setenv("GRADJIT_EXECUTOR", "numpy")
    ref = step()
    monkeypatch.delenv("GRADJIT_EXECUTOR")
    before = gj.stats()
    got = step()
    after = gj.stats()
    np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-10)
    assert after["compiles"] + after["disk_hits"] > before["compiles"] + before["disk_hits"], (
        "the compiled run reused the interpreted plan: nothing was compiled or loaded")
