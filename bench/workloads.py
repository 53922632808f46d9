"""The benchmark workloads, their inputs and their hand-written gradients.

Each workload is written once, as ``f(m, *args)`` over a namespace ``m`` of the few
non-operator functions it needs (tanh, exp, log_softmax, ...), so every engine runs the
same source. ``numpy_grad`` is the hand-written NumPy gradient, the reference every
engine is checked against (itself checked against central finite differences on a tiny
float64 instance). ``numba_grads.py`` holds the hand-written ``@njit`` gradients, the
practical limit for compiled CPU code (imported only by the engine that uses them).

  W1  sum(tanh(x*w + b)**2), 100 float64 elements, d/d(w, b): per-call overhead.
  W2  a 20-op elementwise chain then sum, 1e7 float64 elements (1e6 with --quick), d/dx.
  W3  MLP 784-512-512-10, tanh, batch 256, softmax cross-entropy against one-hot
      targets, float32, d/d(W1, b1, W2, b2, W3, b3).
  W4  tanh RNN h <- tanh(x_t @ Wx + h @ Wh + b), input 8, hidden 32, batch 1, 100 steps
      written as a Python loop over 100 separate (1, 8) arguments, loss sum(h_T**2),
      d/d(Wx, Wh, b).
  W5  least squares mean((X@w - y)**2) + 1e-3*sum(w**2), X 10000x100 float64, d/dw.
  W6  single-head self-attention: Q, K, V = X@Wq, X@Wk, X@Wv, P = row softmax(Q@K.T/8),
      loss sum((P@V)**2), X 512x64, weights 64x64, float32, d/d(Wq, Wk, Wv).
  W7  Lennard-Jones energy of 256 particles in 3-D, all pairs by broadcasting (256x256x3
      differences), eye and off-diagonal mask passed in, float64, d/dx.
  W8  matrix factorisation: pred = (U[i] * V[j]).sum(1) over 20000 observed (i, j) pairs
      (integer index arrays: gather, and scatter-add in the gradient), mean squared error
      + 1e-3 * L2, U 1000x32, V 800x32, float64, d/d(U, V).
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np

# -- the workloads, as source shared by every engine --------------------------------------------
def w1(m, x, w, b):
    return (m.tanh(x * w + b) ** 2).sum()


def w2(m, x):
    a = m.sin(x)
    b = m.exp(-(a * a))
    c = m.log(1 + x * x)
    d = m.tanh(c - b)
    e = m.sqrt(x * x + 1)
    f = d / e
    g = m.sigmoid(f * 3 + a)
    return (g * c + b * d).sum()


def w3(m, W1, b1, W2, b2, W3, b3, X, Y):
    h1 = m.tanh(X @ W1 + b1)
    h2 = m.tanh(h1 @ W2 + b2)
    z = h2 @ W3 + b3
    return -(Y * m.log_softmax(z)).sum() / X.shape[0]


def w4(m, Wx, Wh, b, h0, *xs):
    h = h0
    for x in xs:                         # unrolled by every tracing engine: 100 steps
        h = m.tanh(x @ Wx + h @ Wh + b)
    return (h * h).sum()


def w5(m, w, X, y):
    r = X @ w - y
    return (r * r).mean() + 1e-3 * (w * w).sum()


def w6(m, Wq, Wk, Wv, X):
    Q, K, V = X @ Wq, X @ Wk, X @ Wv
    P = m.softmax(Q @ K.T / Q.shape[1] ** 0.5)   # row softmax, the row max subtracted
    O = P @ V
    return (O * O).sum()


def w7(m, x, eye, mask):
    d = x[:, None, :] - x[None, :, :]
    r2 = (d * d).sum(-1) + eye           # eye: no 1/0 on the diagonal (masked out below)
    inv6 = 1 / r2 ** 3
    return (4 * (inv6 ** 2 - inv6) * mask).sum() / 2


def w8(m, U, V, i, j, r):
    pred = (U[i] * V[j]).sum(1)
    e = pred - r
    return (e * e).mean() + 1e-3 * ((U * U).sum() + (V * V).sum())


def _np_softmax(z):
    e = np.exp(z - z.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def _np_log_softmax(z):
    s = z - z.max(1, keepdims=True)
    return s - np.log(np.exp(s).sum(1, keepdims=True))


NP = SimpleNamespace(sin=np.sin, exp=np.exp, log=np.log, tanh=np.tanh, sqrt=np.sqrt,
                     sigmoid=lambda u: 1 / (1 + np.exp(-u)), log_softmax=_np_log_softmax,
                     softmax=_np_softmax)


# -- hand-written NumPy gradients (the reference) ----------------------------------------------
def w1_grad_numpy(x, w, b):
    t = np.tanh(x * w + b)
    d = 2 * t * (1 - t * t)
    return d * x, d


def w2_grad_numpy(x):
    a = np.sin(x)
    b = np.exp(-(a * a))
    q = 1 + x * x
    c = np.log(q)
    d = np.tanh(c - b)
    e = np.sqrt(q)
    g = NP.sigmoid(d / e * 3 + a)
    gu = c * g * (1 - g)                    # through g = sigmoid(u), u = 3 f + a
    gf = 3 * gu
    gd = b + gf / e
    gcb = gd * (1 - d * d)                  # through d = tanh(c - b)
    gc = g + gcb
    gb = d - gcb
    ga = gu - 2 * a * b * gb
    return (gc * 2 * x / q - gf * d / (e * e) * x / e + ga * np.cos(x),)


def w3_grad_numpy(W1, b1, W2, b2, W3, b3, X, Y):
    n = X.shape[0]
    h1 = np.tanh(X @ W1 + b1)
    h2 = np.tanh(h1 @ W2 + b2)
    z = h2 @ W3 + b3
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    dz = (p * Y.sum(1, keepdims=True) - Y) / np.asarray(n, X.dtype)   # one-hot: Y.sum(1) == 1
    dh2 = dz @ W3.T
    dz2 = dh2 * (1 - h2 * h2)
    dh1 = dz2 @ W2.T
    dz1 = dh1 * (1 - h1 * h1)
    return (X.T @ dz1, dz1.sum(0), h1.T @ dz2, dz2.sum(0), h2.T @ dz, dz.sum(0))


def w4_grad_numpy(Wx, Wh, b, h0, *xs):
    hs = [h0]
    for x in xs:
        hs.append(np.tanh(x @ Wx + hs[-1] @ Wh + b))
    dWx, dWh, db = np.zeros_like(Wx), np.zeros_like(Wh), np.zeros_like(b)
    dh = 2 * hs[-1]
    for t in range(len(xs) - 1, -1, -1):
        dz = dh * (1 - hs[t + 1] * hs[t + 1])
        dWx += xs[t].T @ dz
        dWh += hs[t].T @ dz
        db += dz.sum(0)
        dh = dz @ Wh.T
    return dWx, dWh, db


def w5_grad_numpy(w, X, y):
    r = X @ w - y
    return (X.T @ r * (2.0 / X.shape[0]) + 2e-3 * w,)


def w6_grad_numpy(Wq, Wk, Wv, X):
    c = Wq.shape[1] ** 0.5
    Q, K, V = X @ Wq, X @ Wk, X @ Wv
    P = _np_softmax(Q @ K.T / c)
    dO = 2 * (P @ V)
    dP = dO @ V.T
    dS = P * (dP - (dP * P).sum(1, keepdims=True)) / c     # softmax backward, then the scale
    return X.T @ (dS @ K), X.T @ (dS.T @ Q), X.T @ (P.T @ dO)


def w7_grad_numpy(x, eye, mask):
    d = x[:, None, :] - x[None, :, :]
    r2 = (d * d).sum(-1) + eye
    inv2 = 1 / r2
    inv6 = inv2 ** 3
    G = mask * (inv6 * (12 - 24 * inv6)) * inv2    # 2 dE/dr2[i, j] (the /2 of E included)
    A = G[:, :, None] * d                           # dE/dd[i, j]: dr2/dd = 2 d
    return (A.sum(1) - A.sum(0),)                   # d[i, j] = x[i] - x[j]


def w8_grad_numpy(U, V, i, j, r):
    Ui, Vj = U[i], V[j]
    g = ((Ui * Vj).sum(1) - r) * (2.0 / r.shape[0])
    dU, dV = 2e-3 * U, 2e-3 * V
    np.add.at(dU, i, g[:, None] * Vj)              # scatter-add: repeated indices accumulate
    np.add.at(dV, j, g[:, None] * Ui)
    return dU, dV


# -- specs: inputs, which arguments are differentiated, tolerances ------------------------------
RNN_STEPS, RNN_IN, RNN_HIDDEN, RNN_BATCH = 100, 8, 32, 1
ATT_N, ATT_D = 512, 64
LJ_GRID = (8, 8, 4)                                  # 256 particles
MF_USERS, MF_ITEMS, MF_RANK, MF_PAIRS = 1000, 800, 32, 20000


def make_inputs(name, quick=False, tiny=False, dtype=None):
    """The inputs of a workload. ``tiny`` shrinks every dimension for finite differences."""
    rng = np.random.default_rng(0)
    if name == "W1":
        n = 7 if tiny else 100
        return [rng.standard_normal(n) for _ in range(3)]
    if name == "W2":
        return [rng.standard_normal(7 if tiny else (10**6 if quick else 10**7))]
    if name == "W3":
        (d, h, k, n), dt = ((5, 4, 3, 6) if tiny else (784, 512, 10, 256)), dtype or np.float32
        dims = [d, h, h, k]
        args = []
        for i in range(3):
            args += [rng.standard_normal((dims[i], dims[i + 1])) / np.sqrt(dims[i]),
                     0.1 * rng.standard_normal(dims[i + 1])]
        X = rng.standard_normal((n, d))
        Y = np.eye(k)[rng.integers(0, k, n)]
        return [a.astype(dt) for a in args + [X, Y]]
    if name == "W4":
        T, i, h, B = (4, 3, 5, 2) if tiny else (RNN_STEPS, RNN_IN, RNN_HIDDEN, RNN_BATCH)
        return ([rng.standard_normal((i, h)) / np.sqrt(i), rng.standard_normal((h, h)) / np.sqrt(h),
                 0.1 * rng.standard_normal(h), np.zeros((B, h))]
                + [rng.standard_normal((B, i)) for _ in range(T)])
    if name == "W5":
        n, d = (9, 4) if tiny else (10000, 100)
        X = rng.standard_normal((n, d))
        return [rng.standard_normal(d), X, X @ rng.standard_normal(d) + 0.1 * rng.standard_normal(n)]
    if name == "W6":
        (n, d), dt = ((6, 4) if tiny else (ATT_N, ATT_D)), dtype or np.float32
        return [(rng.standard_normal((d, d)) / np.sqrt(d)).astype(dt) for _ in range(3)] \
            + [rng.standard_normal((n, d)).astype(dt)]
    if name == "W7":                     # a jittered grid, spacing 1.1: pairs >= 0.75 apart
        g = (2, 2, 2) if tiny else LJ_GRID
        x = 1.1 * np.stack(np.meshgrid(*map(np.arange, g), indexing="ij"), -1).reshape(-1, 3)
        x = x + rng.uniform(-0.1, 0.1, x.shape)
        n = x.shape[0]
        return [x, np.eye(n), 1 - np.eye(n)]
    if name == "W8":
        nu, nv, k, n = (6, 5, 3, 15) if tiny else (MF_USERS, MF_ITEMS, MF_RANK, MF_PAIRS)
        i, j = rng.integers(0, nu, n), rng.integers(0, nv, n)       # int64 indices
        U, V = 0.3 * rng.standard_normal((nu, k)), 0.3 * rng.standard_normal((nv, k))
        r = rng.integers(1, 6, n).astype(np.float64)                 # ratings 1..5
        return [U, V, i, j, r]
    raise KeyError(name)


SPEC = {   # argnums of the gradient, reference gradient, size label
    "W1": dict(f=w1, wrt=(1, 2), ref=w1_grad_numpy, size="n=100", dtype="float64"),
    "W2": dict(f=w2, wrt=(0,), ref=w2_grad_numpy, size="n=1e7", dtype="float64"),
    "W3": dict(f=w3, wrt=(0, 1, 2, 3, 4, 5), ref=w3_grad_numpy, size="784-512-512-10, B=256",
               dtype="float32"),
    "W4": dict(f=w4, wrt=(0, 1, 2), ref=w4_grad_numpy, size="T=100, H=32, B=1", dtype="float64"),
    "W5": dict(f=w5, wrt=(0,), ref=w5_grad_numpy, size="X 10000x100", dtype="float64"),
    "W6": dict(f=w6, wrt=(0, 1, 2), ref=w6_grad_numpy, size="attention, X 512x64",
               dtype="float32"),
    "W7": dict(f=w7, wrt=(0,), ref=w7_grad_numpy, size="Lennard-Jones, 256 particles",
               dtype="float64"),
    "W8": dict(f=w8, wrt=(0, 1), ref=w8_grad_numpy, size="U 1000x32, V 800x32, 20000 pairs",
               dtype="float64"),
}


def check_references(with_numba=True):
    """Every hand-written gradient (NumPy and Numba) against central finite differences of
    the workload itself, on a tiny float64 instance. Raises AssertionError if one is wrong."""
    for name, s in SPEC.items():
        args = make_inputs(name, tiny=True, dtype=np.float64)
        def f(*a, s=s):
            return float(s["f"](NP, *a))
        grads = {"numpy": s["ref"](*args)}
        if with_numba:
            from numba_grads import numba_grad
            nargs = args[:4] + [np.stack(args[4:])] if name == "W4" else args
            grads["numba"] = numba_grad(name)(*nargs)
        for k, i in enumerate(s["wrt"]):
            fd = np.empty(args[i].shape)
            for j in np.ndindex(args[i].shape):
                e = np.zeros(args[i].shape)
                e[j] = 1e-6
                hi, lo = list(args), list(args)
                hi[i], lo[i] = args[i] + e, args[i] - e
                fd[j] = (f(*hi) - f(*lo)) / 2e-6
            for who, g in grads.items():
                assert np.allclose(g[k], fd, rtol=1e-6, atol=1e-7), \
                    f"{name}: hand-written {who} gradient of argument {i} disagrees with " \
                    f"finite differences (max err {np.max(np.abs(g[k] - fd)):.3g})"
