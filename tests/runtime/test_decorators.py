"""Transforms take their options before the function too (``@gj.jit(static_argnums=1)``),
and any callable: functions, ``functools.partial`` objects, callable instances; in a class
body they are methods (``obj.m(x)`` binds ``obj``)."""
import functools

import numpy as np
import pytest

import gradjit as gj
from tests.marks import COMPILED_SLOW


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


def _scaled(x, y, scale, n=2):
    return (x ** n * y).sum() * scale


class _Weighted:
    def __init__(self, w):
        self.w = w

    def __call__(self, x):
        return (x * self.w).sum()


@COMPILED_SLOW
def test_partials_and_callable_instances_in_every_transform(executor):
    """functools.partial objects and instances with __call__ have no __name__: every
    transform failed on them (AttributeError)."""
    x, y = np.array([1.0, 2.0, 3.0]), np.array([0.5, 1.0, 2.0])
    p = functools.partial(_scaled, y=y, scale=2.0)
    np.testing.assert_allclose(gj.grad(p)(x), 4 * x * y)
    v, g = gj.value_and_grad(p)(x)
    np.testing.assert_allclose(v, _scaled(x, y, 2.0))
    np.testing.assert_allclose(g, 4 * x * y)
    np.testing.assert_allclose(gj.jit(p)(x), _scaled(x, y, 2.0))
    np.testing.assert_allclose(gj.grad(p, static_argnames="n")(x, n=3), 6 * x ** 2 * y)
    np.testing.assert_allclose(gj.hessian(p)(x), np.diag(4 * y))
    np.testing.assert_allclose(gj.jacrev(functools.partial(np.multiply, 3.0))(x), 3 * np.eye(3))
    np.testing.assert_allclose(gj.jacfwd(functools.partial(np.multiply, 3.0))(x), 3 * np.eye(3))
    np.testing.assert_allclose(gj.jvp(p, (x,), (np.ones(3),))[1], (4 * x * y).sum())
    f = _Weighted(y)
    np.testing.assert_allclose(gj.grad(f)(x), y)
    np.testing.assert_allclose(gj.jit(f)(x), x @ y)
    assert gj.grad(f).__name__ == "_Weighted" and gj.jit(p).__name__ == "partial(_scaled)"


def test_a_generator_bound_in_a_partial_is_watched():
    """A partial's bound arguments are reachable like a closure's cells: drawing from a
    Generator bound there while tracing is the usual clear error, not frozen numbers."""
    rng = np.random.default_rng(0)

    def noisy(x, g):
        return (x * g.normal(size=3)).sum()
    with pytest.raises(gj.GradjitError, match="drew numbers while"):
        gj.grad(functools.partial(noisy, g=rng))(np.ones(3))


class _Model:
    def __init__(self, w):
        self.w = w

    @gj.jit
    def forward(self, x):
        return (x * self.w).sum()

    @gj.grad(argnums=1)
    def grad_x(self, x):
        return (x ** 2 * self.w).sum()

    @gj.value_and_grad(argnums=1, static_argnums=2)
    def power(self, x, n):
        return (x ** n * self.w).sum()

    @gj.grad
    def grad_self(self, x):
        return (x ** 2).sum()


def test_transforms_bind_self_as_methods(executor):
    """A transform in a class body is a method (descriptor protocol): obj.m(x) passes obj
    first, a static argument like any other hashable object, so each instance has its own
    trace (it called the function without self: missing argument)."""
    a, b = _Model(np.ones(3)), _Model(np.full(3, 2.0))
    x = np.array([1.0, 2.0, 3.0])
    for _ in range(2):
        assert a.forward(x) == 6.0 and b.forward(x) == 12.0
        np.testing.assert_allclose(a.grad_x(x), 2 * x)
        np.testing.assert_allclose(b.grad_x(x), 4 * x)
        v, g = b.power(x, 3)
        np.testing.assert_allclose(v, 2 * (x ** 3).sum())
        np.testing.assert_allclose(g, 6 * x ** 2)
    assert _Model.forward(a, x) == 6.0 and _Model.forward is _Model.__dict__["forward"]
    with pytest.raises(gj.GradjitError, match="argument 0 is the method's self: argnums=1"):
        a.grad_self(x)
