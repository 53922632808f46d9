"""Neural-network cases shared by the CUDA simulator and PTX tests.

``NN_CASES[name](dtype) -> (fn, arrays, argnums)``: a scalar loss of a
``gj.nn.functional`` layer on small inputs (the simulator runs each GPU thread
in Python: ≤ 1e3 elements), differentiated with respect to ``argnums``.
"""
from __future__ import annotations

import numpy as np

import gradjit as gj

F = gj.nn.functional


def _rng(name):
    import zlib
    return np.random.default_rng(zlib.crc32(name.encode()))


def _mlp(dt):
    r = _rng("mlp")
    W1, b1 = r.standard_normal((6, 8)).astype(dt), r.standard_normal(8).astype(dt)
    W2, b2 = r.standard_normal((8, 3)).astype(dt), r.standard_normal(3).astype(dt)
    X, y = r.standard_normal((5, 6)).astype(dt), np.array([0, 2, 1, 1, 0])

    def f(W1, b1, W2, b2, X, y):
        return F.cross_entropy(np.tanh(X @ W1 + b1) @ W2 + b2, y)
    return f, (W1, b1, W2, b2, X, y), (0, 1, 2, 3)


def _norms(dt):
    r = _rng("norms")
    x, w, b = (r.standard_normal(s).astype(dt) for s in ((4, 3, 5), (5,), (5,)))
    return (lambda x, w, b: (F.layer_norm(x, (5,), w, b) ** 2).sum()
            + F.softmax(x, dim=1).max()), (x, w, b), (0, 1, 2)


def _conv(dt):
    r = _rng("conv")
    x, k = r.standard_normal((2, 2, 4, 4)).astype(dt), r.standard_normal((2, 2, 3, 3)).astype(dt)
    return (lambda x, k: (F.max_pool2d(F.relu(F.conv2d(x, k, padding=1)), 2) ** 2).sum()), \
        (x, k), (0, 1)


def _embedding(dt):
    r = _rng("embedding")
    E, idx = r.standard_normal((7, 4)).astype(dt), np.array([[1, 3, 3], [0, 6, 1]])
    return (lambda E, idx: (F.embedding(idx, E) ** 2).sum()), (E, idx), (0,)


def _losses(dt):
    r = _rng("losses")
    a, t = r.standard_normal((4, 3)).astype(dt), r.uniform(0.1, 0.9, (4, 3)).astype(dt)
    return (lambda a, t: F.binary_cross_entropy_with_logits(a, t) + F.smooth_l1_loss(a, t)
            + F.kl_div(F.log_softmax(a, dim=1), t, reduction="batchmean")), (a, t), (0,)


NN_CASES = {"mlp_cross_entropy": _mlp, "layer_norm_softmax": _norms, "conv_pool": _conv,
            "embedding": _embedding, "losses": _losses}
