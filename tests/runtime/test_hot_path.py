"""The call path of a compiled transform: the last signature's function is called
straight away, and anything it does not fit (other shapes, dtypes, layouts, non-arrays,
tracers) is rejected by Numba or by the entry's own shape guard and takes the slow path.

Counters and results, not clocks.
"""
import numpy as np
import pytest

import gradjit as gj
from gradjit.lowering.codegen_cpu import SignatureMismatch


def loss(x, w, b):
    return (np.tanh(x * w + b) ** 2).sum()


def reference(x, w, b):
    t = np.tanh(x * w + b)
    d = 2 * t * (1 - t * t)
    return d * x, d


def test_alternating_signatures_give_each_its_own_result(rng):
    g = gj.grad(loss, argnums=(1, 2))
    small = [rng.normal(size=5) for _ in range(3)]
    big = [rng.normal(size=9) for _ in range(3)]
    f32 = [a.astype(np.float32) for a in small]
    strided = [rng.normal(size=10)[::2] for _ in range(3)]
    for args in (small, big, small, f32, big, strided, small):
        got = g(*args)
        want = reference(*[np.asarray(a, dtype=np.float64) for a in args])
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-5 if args is f32 else 1e-12)


def test_hot_path_compiles_nothing_new(rng):
    g = gj.grad(loss, argnums=(1, 2))
    args = [rng.normal(size=13) for _ in range(3)]
    g(*args)
    gj.reset_stats()
    for _ in range(5):
        g(*args)
    assert gj.stats()["compiles"] == 0 and gj.stats()["memory_hits"] == 0


def test_generated_entry_guards_its_shapes(rng):
    g = gj.grad(loss, argnums=(1, 2))
    args = [rng.normal(size=6) for _ in range(3)]
    g(*args)
    fn = g._hot[0]
    with pytest.raises(SignatureMismatch, match="argument shapes differ"):
        fn(*[rng.normal(size=7) for _ in range(3)], *g._hot[1])
    assert issubclass(SignatureMismatch, TypeError)


def test_value_and_grad_and_jit_hot_paths(rng):
    x, w, b = (rng.normal(size=4) for _ in range(3))
    vg = gj.value_and_grad(loss, argnums=1)
    jf = gj.jit(lambda x, w: {"a": x * w, "b": (x - w).sum()})
    for _ in range(3):
        v, d = vg(x, w, b)
        np.testing.assert_allclose(v, loss(x, w, b), rtol=1e-12)
        np.testing.assert_allclose(d, reference(x, w, b)[0], rtol=1e-12)
        out = jf(x, w)
        np.testing.assert_allclose(out["a"], x * w)
        np.testing.assert_allclose(out["b"], (x - w).sum())
