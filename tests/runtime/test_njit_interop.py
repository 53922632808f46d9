"""Transforms called from the user's own @njit code (runtime/njit_interop.py): as a global, a
closure variable or an argument, with the results of calls from Python, clear errors
for what was not compiled, and user functions that Numba caches across processes."""
import os
import subprocess
import sys
import textwrap

import numba
import numpy as np
import pytest

import gradjit as gj


def loss(w, x):
    return (np.tanh(x @ w) ** 2).sum() + 0.5 * (w * w).sum()


@pytest.fixture
def data():
    rng = np.random.default_rng(0)
    return rng.normal(size=3), rng.normal(size=(8, 3))


def test_global_closure_and_argument(data):
    w, x = data
    df = gj.grad(loss)
    want = df(w, x)

    @numba.njit
    def as_argument(g, w, x, lr, n):
        for _ in range(n):
            w = w - lr * g(w, x)
        return w

    ref = w.copy()
    for _ in range(20):
        ref = ref - 0.1 * df(ref, x)
    np.testing.assert_allclose(as_argument(df, w, x, 0.1, 20), ref, rtol=1e-12)

    def make():
        h = df

        @numba.njit
        def closure(w, x):
            return 2.0 * h(w, x)
        return closure
    np.testing.assert_allclose(make()(w, x), 2 * want, rtol=1e-12)
    global _DF
    _DF = df
    np.testing.assert_allclose(_global(w, x), want, rtol=1e-12)


_DF = None


@numba.njit
def _global(w, x):
    return _DF(w, x)


def test_value_and_grad_and_jit_return_what_python_gets(data):
    w, x = data
    vg = gj.value_and_grad(loss, argnums=(0, 1)).compile_for(w, x)
    f = gj.jit(lambda w, x: (np.sin(x @ w), w * 2.0)).compile_for(w, x)

    @numba.njit
    def both(w, x):
        v, (gw, gx) = vg(w, x)
        a, b = f(w, x)
        return v, gw, gx, a, b

    v, gw, gx, a, b = both(w, x)
    (v0, (gw0, gx0)), (a0, b0) = vg(w, x), f(w, x)
    assert float(v) == pytest.approx(float(v0), rel=1e-13)
    for got, want in ((gw, gw0), (gx, gx0), (a, a0), (b, b0)):
        np.testing.assert_allclose(got, want, rtol=1e-13)


def test_several_shapes_are_chosen_at_run_time(data):
    df = gj.grad(loss)
    small, big = (np.ones(2), np.ones((4, 2))), (np.ones(5), np.ones((3, 5)))
    df(*small)
    df(*big)

    @numba.njit
    def call(w, x):
        return df(w, x)
    np.testing.assert_allclose(call(*small), df(*small), rtol=1e-13)
    np.testing.assert_allclose(call(*big), df(*big), rtol=1e-13)
    with pytest.raises(TypeError, match=r"not compiled for.*float64\[2\]"):
        call(np.ones(3), np.ones((4, 3)))


def test_clear_errors_for_what_has_no_code(data):
    w, x = data
    fresh = gj.grad(loss)

    @numba.njit
    def use(w, x):
        return fresh(w, x)
    with pytest.raises(gj.GradjitError, match="nothing compiled that @njit code can call"):
        use(w, x)
    fresh(w, x)

    @numba.njit
    def use32(w, x):
        return fresh(w, x)
    # gradjit's message is the exception's own (a Numba TypingError buried it in Numba's
    # report), naming the user's line
    with pytest.raises(gj.GradjitError, match=r"^gj.grad\(loss\): called from @njit code with "
                       r"\(array\(float32, 1d, C\).*no compiled code for.*It has: float64\[3\], "
                       r"float64\[8, 3\]\. (?s:.*)at File .*line \d+:\s+return fresh\(w, x\)$"):
        use32(w.astype(np.float32), x.astype(np.float32))
    with pytest.raises(TypeError, match=r"^gj.grad\(loss\): called from @njit code with "
                       r"\(array\(float64, 1d, C\), array\(float64, 2d, F\)\).*must be "
                       r"C-contiguous"):
        use32(w, np.asfortranarray(x))


def _refused(t, *match):
    @numba.njit
    def call(a, b):
        return t(a, b)
    with pytest.raises(gj.GradjitError) as got:
        call(np.ones(3), np.ones((8, 3)))
    for m in match:
        assert m in str(got.value)
    assert "Call it once from Python" not in str(got.value)
    assert 'line ' in str(got.value) and "return t(a, b)" in str(got.value)


def test_what_njit_code_cannot_call_is_refused_saying_why(data, monkeypatch):
    # (the reasons come before the executor's: the interpreter spares the compiles)
    monkeypatch.setenv("GRADJIT_EXECUTOR", "numpy")
    w, x = data
    _refused(gj.jacrev(lambda w, x: np.tanh(x @ w)).compile_for(w, x),
             "gj.jacrev(<lambda>): Jacobian transforms", "cannot be called from @njit code",
             "gj.jit(lambda *a: jac(*a))")
    _refused(gj.hessian(loss).compile_for(w, x), "Jacobian transforms")
    _refused(gj.grad(lambda p, x: loss(p["w"], x)).compile_for({"w": w}, x),
             "argument 0 is a pytree (dict)", "gj.ravel_pytree")
    _refused(gj.grad(lambda s, x: (x * s).sum()).compile_for(2.0, x),
             "(float64[], float64[8, 3]): argument 0 is 0-d", "one-element array")
    _refused(gj.grad(loss).compile_for(w, x=x), "keyword argument(s) x")


def test_a_jacobian_traced_into_a_jit_is_callable_from_njit(data):
    w, x = data
    jac = gj.jacrev(lambda w, x: np.tanh(x @ w))
    inside = gj.jit(lambda *a: jac(*a)).compile_for(w, x)

    @numba.njit
    def call(w, x):
        return inside(w, x)
    want = (1 - np.tanh(x @ w) ** 2)[:, None] * x
    np.testing.assert_allclose(call(w, x), want, rtol=1e-13)


@pytest.mark.slow   # (fresh processes: CI's slow suite runs it)
def test_user_functions_cached_by_numba_across_processes(tmp_path):
    (tmp_path / "usermod.py").write_text(textwrap.dedent("""
        import numpy as np, numba, gradjit as gj
        def loss(w, x):
            return (np.tanh(x @ w) ** 2).sum() + 0.5 * (w * w).sum()
        df = gj.grad(loss).compile_for(np.ones(3), np.ones((8, 3)))
        @numba.njit(cache=True)
        def descend(w, x, lr, n):
            for _ in range(n):
                w = w - lr * df(w, x)
            return w
    """))
    run = textwrap.dedent("""
        import json, numpy as np, gradjit as gj, usermod
        rng = np.random.default_rng(0)
        w, x = rng.normal(size=3), rng.normal(size=(8, 3))
        out = usermod.descend(w, x, 0.1, 30)
        ref = w.copy()
        for _ in range(30):
            ref = ref - 0.1 * usermod.df(ref, x)
        print(json.dumps({"same": bool(np.allclose(out, ref, rtol=1e-12)),
                          "numba_hits": sum(usermod.descend.stats.cache_hits.values()),
                          "compiles": gj.stats()["compiles"]}))
    """)
    env = {k: v for k, v in os.environ.items() if k != "GRADJIT_EXECUTOR"}
    env.update(GRADJIT_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=str(tmp_path))
    import json
    outs = [json.loads(subprocess.run([sys.executable, "-c", run], env=env, cwd=tmp_path,
                                      capture_output=True, text=True, check=True)
                       .stdout.strip().splitlines()[-1]) for _ in range(2)]
    assert outs[0]["same"] and outs[1]["same"]
    assert outs[1]["numba_hits"] == 1 and outs[1]["compiles"] == 0


def test_a_c_callable_writes_the_results(data):
    import ctypes
    w, x = data
    vg = gj.value_and_grad(loss, argnums=(0, 1))
    cf = vg.cfunc(w, x)
    value, gw, gx = np.zeros(1), np.zeros_like(w), np.zeros_like(x)
    ptr = [a.ctypes.data_as(ctypes.POINTER(ctypes.c_double)) for a in (w, x, value, gw, gx)]
    cf.ctypes(*ptr)
    v0, (gw0, gx0) = vg(w, x)
    assert value[0] == pytest.approx(float(v0), rel=1e-13) and cf.address
    np.testing.assert_allclose(gw, gw0, rtol=1e-13)
    np.testing.assert_allclose(gx, gx0, rtol=1e-13)


@numba.njit
def _twice(v):
    return v * 2.0


def test_a_traced_value_passed_to_njit_code_says_what_to_write(interpreted):
    """Numba said "non-precise type pyobject" at the decorator; the error names the @njit
    function, the user's line and the ways out."""
    with pytest.raises(gj.GradjitError, match=r"traced value .* reached the @numba.njit "
                                              r"function '_twice'.*outside the traced") as e:
        gj.grad(lambda x: (_twice(x) ** 2).sum())(np.ones(3))
    assert "test_njit_interop.py" in str(e.value) and "_twice(x)" in str(e.value)
    np.testing.assert_array_equal(_twice(np.ones(2)), [2.0, 2.0])   # (outside: as before)


def test_zero_dimensional_constants_reach_njit_and_c_callers():
    # (a ReLU's 0.0 or logaddexp's is a 0-d constant of the compiled entry: the @njit wrapper
    # and the C callable passed it as shape (1,), a Numba TypingError)
    import ctypes
    w = np.array([0.5, -1.0, 2.0])
    t = gj.grad(lambda w: (np.maximum(w, 0.0) + np.logaddexp(0.0, w)).sum())
    d = t.compile_for(w)

    @numba.njit
    def step(w):
        return w - 0.1 * d(w)

    want = (w > 0) + 1 / (1 + np.exp(-w))
    np.testing.assert_allclose(step(w), w - 0.1 * want, rtol=1e-13)
    cf, out = t.cfunc(w), np.zeros(3)
    cf.ctypes(*[a.ctypes.data_as(ctypes.POINTER(ctypes.c_double)) for a in (w, out)])
    np.testing.assert_allclose(out, want, rtol=1e-13)
