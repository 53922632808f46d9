"""Child process of test_numba_patches.py: gradients of a few program kinds, saved to argv[1].

The programs reach every change runtime/numba_patches.py makes: BLAS products and called
helpers (links), fused elementwise loops with transcendentals (levels), a folded Python loop,
several result arrays (boxing)."""
import sys

import numpy as np

import gradjit as gj
from gradjit.runtime import compiler, numba_patches


def mlp(w1, w2, x):
    h = np.tanh(x @ w1)
    return np.sum((h @ w2) ** 2) / x.shape[0]


def rnn(w, h0, xs):
    h, tot = h0, 0.0
    for t in range(6):
        h = np.tanh(w @ h + xs[t])
        tot = tot + np.sum(h * h)
    return tot


def stats(a, b):
    z = np.exp(-a) * np.log1p(b * b) + np.maximum(a, 0.1)
    return np.mean(z, axis=0).sum() + np.std(a[1:, ::2]) + np.max(b, axis=1).sum()


def main(out):
    r = np.random.default_rng(0)
    cases = {
        "mlp": (mlp, (0, 1), (r.standard_normal((8, 16)), r.standard_normal((16, 3)),
                              r.standard_normal((5, 8)))),
        "rnn": (rnn, (0, 1), (0.3 * r.standard_normal((4, 4)), r.standard_normal(4),
                              r.standard_normal((6, 4)))),
        "stats": (stats, (0, 1), (r.standard_normal((6, 7)), r.standard_normal((6, 7)))),
    }
    saved = {}
    for name, (fn, argnums, args) in cases.items():
        value, grads = gj.value_and_grad(fn, argnums=argnums)(*args)
        saved[f"{name}.value"] = np.asarray(value)
        for i, g in enumerate(grads):
            saved[f"{name}.grad{i}"] = g
    x = gj.tensor(r.standard_normal((5, 8)), requires_grad=True)
    w = gj.tensor(r.standard_normal((8, 3)), requires_grad=True)
    for _ in range(2):   # a tensor-mode step, twice (the second one replays)
        x.grad = w.grad = None
        (gj.sigmoid(x @ w) ** 2).sum().backward()
    saved["tensor.x"], saved["tensor.w"] = x.grad.numpy(), w.grad.numpy()
    saved["blocks"] = np.array(numba_patches.STATS["blocks"])
    saved["compiles"] = np.array(compiler.STATS["compiles"])
    np.savez(out, **saved)


if __name__ == "__main__":
    main(sys.argv[1])
