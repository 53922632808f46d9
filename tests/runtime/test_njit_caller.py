"""A compiled gradient's entry is an ordinary Numba dispatcher: user ``@njit`` code calls
it (the generated module has no C-callable wrapper, which only Numba's first-class
function types would use)."""
import numba
import numpy as np

import gradjit as gj
from gradjit.runtime.compiler import compile_graph


def _loss(x, w):
    return (np.tanh(x * w) ** 2).sum()


def test_user_njit_code_calls_the_compiled_gradient(rng):
    x, w = rng.normal(size=50), rng.normal(size=50)
    opt = gj.grad(_loss, argnums=1).graphs(x, w)[1]
    exe = compile_graph(opt)
    assert "no_cfunc_wrapper=True" in exe.source
    entry = exe.fn

    @numba.njit
    def descend(x, w, consts, steps, lr):
        for _ in range(steps):
            (g,) = entry(x, w, consts)
            w = w - lr * g
        return w

    got = descend(x, w.copy(), exe.consts, 3, 0.1)
    want = w.copy()
    for _ in range(3):
        want = want - 0.1 * gj.grad(_loss, argnums=1)(x, want)
    np.testing.assert_allclose(got, want, rtol=1e-13)
