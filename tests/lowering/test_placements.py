"""Sums of zero-padded placements become concatenations (lowering/placements.py).

The gradient of a value read through several slices is a sum of full-size zero-filled
placements, one per slice read; regrouped, it is the parts summed per rows, concatenated,
and placed at most once. Each case: the placements the optimised gradient graph keeps
(a counter), and the gradient against central differences, compiled and interpreted.
"""
from __future__ import annotations

import collections

import numpy as np
import pytest

import gradjit as gj
from gradjit.lowering.passes import optimize
from gradjit.runtime import tiers
from gradjit.tracer.coercion import traced_numpy
from tests.fd import numerical_grad


def _ops(fn, *args):
    f = gj.grad(fn, argnums=tuple(range(len(args))))
    g, call, values = f._trace(args)
    with traced_numpy(g, fn):
        f._trace_body(g, call, values)
    return collections.Counter(n.op for n in optimize(g).nodes)


def unpacked(th, y):          # every component read, at several steps: one cat each
    loss = 0.0
    for _ in range(3):
        a, b, c, d = th
        u, v = y
        y = y + 0.1 * np.stack([a * u - b * u * v, c * u * v - d * v])
        loss = loss + (y ** 2).sum()
    return loss


def some_rows(th, y):         # rows 1 and 2 of 4 (touching): one cat, placed once
    return (th[1] * y[0] + np.sin(th[2]) * y[1]).sum()


def apart(th, y):             # rows 0 and 3: not touching, two placements as before
    return (th[0] * y[0] + th[3] * y[1]).sum()


def overlapping(th, y):       # rows 0:3 and 2:4 overlap: left alone
    return (np.sin(th[:3]).sum() * y[0] + np.cos(th[2:]).sum() * y[1]).sum()


def columns(th, y):           # y: along dim 1, beside a non-placement term (th[0]: kept)
    return (np.exp(y[:, :10]).sum() + (y[:, 10:] ** 2).sum() + (y * th[0]).sum())


CASES = [(unpacked, 0), (some_rows, 1), (apart, 2), (overlapping, 2), (columns, 1)]


@pytest.mark.parametrize("fn,kept", CASES, ids=[f.__name__ for f, _ in CASES])
def test_placements_regrouped_and_gradients_right(fn, kept):
    rng = np.random.default_rng(0)
    th, y = np.array([1.0, 0.4, 0.3, 0.8]) + 0.1 * rng.random(4), 1 + rng.random((2, 16))
    ops = _ops(fn, th, y)
    assert ops["slice_backward.default"] == kept, ops
    want = [numerical_grad(fn, [th, y], k) for k in (0, 1)]
    for tier in ("never", "sync"):
        with tiers.forced(tier):
            got = gj.grad(fn, argnums=(0, 1))(th, y)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-8)


def test_tensor_mode_unpacking_gets_the_same_gradient():
    rng = np.random.default_rng(1)
    th, y = np.array([1.0, 0.4, 0.3, 0.8]), 1 + rng.random((2, 16))
    tt, ty = gj.tensor(th, requires_grad=True), gj.tensor(y, requires_grad=True)
    a, b, c, d = tt
    u, v = ty
    ((a * u - b * u * v) ** 2 + (c * u * v - d * v) ** 2).sum().backward()

    def f(th, y):
        a, b, c, d = th
        u, v = y
        return ((a * u - b * u * v) ** 2 + (c * u * v - d * v) ** 2).sum()
    np.testing.assert_allclose(tt.grad.numpy(), numerical_grad(f, [th, y], 0), rtol=1e-6)
    np.testing.assert_allclose(ty.grad.numpy(), numerical_grad(f, [th, y], 1), rtol=1e-6)
