"""Transforms take their options before the function too: ``@gj.jit(static_argnums=1)``."""
import numpy as np

import gradjit as gj


def test_transforms_as_decorator_factories():
    @gj.grad(argnums=1)
    def f(a, b):
        return (a * b * b).sum()

    np.testing.assert_allclose(f(np.ones(3), np.full(3, 2.0)), 4.0)

    @gj.jit(static_argnums=1)
    def g(x, n):
        return x * n

    np.testing.assert_allclose(g(np.ones(2), 3), 3.0)

    @gj.value_and_grad(argnums=(0,))
    def h(x):
        return (x ** 3).sum()

    v, (gx,) = h(np.full(2, 2.0))
    assert v == 16.0
    np.testing.assert_allclose(gx, 12.0)
    assert gj.jit(lambda x: x + 1)(np.zeros(1))[0] == 1.0   # the plain form still works
