"""Compiled entries box their result arrays without a Python call (lowering/boxing_cpu.py).

Counts calls of Numba's unpickling helper (a profiler sees every Python-level call), never
clocks; the arrays the new boxing makes are checked for what Numba's own make.
"""
import sys
import uuid

import numba
import numpy as np
import pytest
from numba.core import pythonapi, types

import gradjit as gj
from gradjit.lowering.boxing_cpu import env_boxing
from gradjit.runtime import compiler


def _unpickles(fn, *args):
    """How many times ``fn(*args)`` calls ``numba.core.serialize._numba_unpickle``."""
    seen = []

    def prof(frame, event, arg):
        if event == "call" and frame.f_code.co_name == "_numba_unpickle":
            seen.append(frame.f_code.co_filename)
    sys.setprofile(prof)
    try:
        out = fn(*args)
    finally:
        sys.setprofile(None)
    return len(seen), out


def _source(body):
    # A fresh module each time (the uuid): Numba compiles it here, inside compiler.load.
    return (f"# {uuid.uuid4().hex}\nimport numba\nimport numpy as np\n\n\n"
            f"@numba.njit(cache=True)\ndef entry(a, b):\n    return {body}\n")


def _sig(*arrays):
    return tuple(numba.typeof(a) for a in arrays)


def test_a_gradient_call_unpickles_nothing():
    w = np.linspace(-1.0, 1.0, 50)
    g = gj.grad(lambda w, b: (np.tanh(w * 2.0 + b) ** 2).sum(), argnums=(0, 1))
    ref = g(w, 0.5 * w)
    n, got = _unpickles(g, w, 0.5 * w)
    assert n == 0
    t = np.tanh(2.0 * w + 0.5 * w)
    np.testing.assert_allclose(got[1], 2 * t * (1 - t * t), rtol=1e-12)
    np.testing.assert_allclose(got[0], 2 * got[1], rtol=1e-12)
    np.testing.assert_array_equal(ref[0], got[0])


def test_tensor_mode_backward_unpickles_nothing():
    x = gj.from_numpy(np.arange(1.0, 7.0).reshape(2, 3)).requires_grad_()

    def step():
        x.grad = None
        (x * x).sum().backward()
        return x.grad.numpy()
    step(), step()   # compiled, then the fast path's plan registered
    n, g = _unpickles(step)
    assert n == 0
    np.testing.assert_array_equal(g, 2 * np.arange(1.0, 7.0).reshape(2, 3))


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64, np.bool_])
def test_new_arrays_are_what_numba_makes(dtype):
    a = np.arange(12).reshape(3, 4).astype(dtype)
    fn = compiler.load(_source("a.copy(), b.T, a[1]"), _sig(a, a))
    n, (c, t, row) = _unpickles(fn, a, a)
    assert n == 0
    for r, ref in ((c, a), (t, a.T), (row, a[1])):
        assert type(r) is np.ndarray and r.dtype == dtype and r.flags.writeable
        np.testing.assert_array_equal(r, ref)
    assert c.flags.owndata is False and not np.shares_memory(c, a)   # NRT memory
    c[0, 0] = 1
    assert a[0, 0] == 0
    del fn   # the arrays own their memory past the function and each other
    assert c[0, 0] == 1 and row.sum() == a[1].sum()


def test_an_input_returned_is_the_callers_array():
    a, b = np.ones(4), np.zeros(4)
    fn = compiler.load(_source("a, b + 1.0"), _sig(a, b))
    n, (same, new) = _unpickles(fn, a, b)
    assert n == 0 and same is a
    np.testing.assert_array_equal(new, np.ones(4))


def test_the_swap_is_for_the_block_only():
    table = pythonapi._boxers.functions
    with env_boxing():
        inside = table[types.Array]
        with env_boxing():   # nested: the outer swap stands
            assert table[types.Array] is inside
        assert table[types.Array] is inside
    assert inside.original is table[types.Array]
    with pytest.raises(RuntimeError):
        with env_boxing():
            raise RuntimeError("a failed compile")
    assert getattr(table[types.Array], "original", None) is None

    @numba.njit   # the user's own code compiled outside: Numba's boxing, as before
    def user(a):
        return a + 1.0
    n, out = _unpickles(user, np.zeros(3))
    assert n >= 1
    np.testing.assert_array_equal(out, np.ones(3))


def test_generated_modules_stamp_the_boxing():
    g = gj.grad(lambda w: (w * w).sum())
    g(np.ones(3))
    texts = [open(m.__file__).read() for name, m in list(sys.modules.items())
             if name.startswith("gradjit_gen_")]
    generated = [t for t in texts if t.startswith('"""gradjit generated module')]
    assert generated and all("# gradjit.lowering.boxing_cpu " in t for t in generated)
