"""Hand-written Numba gradients of the workloads (see workloads.py): what an expert writes
with ``@njit`` by hand, our practical limit. ``cache=True``: a second process loads the
machine code (from ``$NUMBA_CACHE_DIR`` when set, else ``bench/__pycache__``)."""
import math

import numpy as np
from numba import njit, prange


@njit(cache=True, fastmath=False)
def _w1_numba(x, w, b):
    dw, db = np.empty_like(x), np.empty_like(x)
    for i in range(x.shape[0]):
        t = math.tanh(x[i] * w[i] + b[i])
        d = 2.0 * t * (1.0 - t * t)
        dw[i] = d * x[i]
        db[i] = d
    return dw, db


@njit(cache=True, parallel=True)
def _w2_numba(x):
    out = np.empty_like(x)
    for i in prange(x.shape[0]):
        xi = x[i]
        a = math.sin(xi)
        b = math.exp(-(a * a))
        q = 1.0 + xi * xi
        c = math.log(q)
        d = math.tanh(c - b)
        e = math.sqrt(q)
        g = 1.0 / (1.0 + math.exp(-(d / e * 3.0 + a)))
        gu = c * g * (1.0 - g)
        gf = 3.0 * gu
        gcb = (b + gf / e) * (1.0 - d * d)
        ga = gu - 2.0 * a * b * (d - gcb)
        out[i] = (g + gcb) * 2.0 * xi / q - gf * d / (e * e) * xi / e + ga * math.cos(xi)
    return out


@njit(cache=True)
def _w3_numba(W1, b1, W2, b2, W3, b3, X, Y):
    n = X.shape[0]
    h1 = X @ W1
    for i in range(n):
        for j in range(h1.shape[1]):
            h1[i, j] = math.tanh(h1[i, j] + b1[j])
    h2 = h1 @ W2
    for i in range(n):
        for j in range(h2.shape[1]):
            h2[i, j] = math.tanh(h2[i, j] + b2[j])
    dz = h2 @ W3
    inv_n = np.float32(1.0) / np.float32(n)
    for i in range(n):                       # softmax cross-entropy backward, in place
        mx = dz[i, 0] + b3[0]
        for j in range(dz.shape[1]):
            dz[i, j] += b3[j]
            mx = max(mx, dz[i, j])
        s = np.float32(0.0)
        ysum = np.float32(0.0)
        for j in range(dz.shape[1]):
            dz[i, j] = math.exp(dz[i, j] - mx)
            s += dz[i, j]
            ysum += Y[i, j]
        for j in range(dz.shape[1]):
            dz[i, j] = (dz[i, j] / s * ysum - Y[i, j]) * inv_n
    dW3 = h2.T @ dz
    db3 = _colsum(dz)
    dz2 = dz @ W3.T
    for i in range(n):
        for j in range(dz2.shape[1]):
            dz2[i, j] *= np.float32(1.0) - h2[i, j] * h2[i, j]
    dW2 = h1.T @ dz2
    db2 = _colsum(dz2)
    dz1 = dz2 @ W2.T
    for i in range(n):
        for j in range(dz1.shape[1]):
            dz1[i, j] *= np.float32(1.0) - h1[i, j] * h1[i, j]
    dW1 = X.T @ dz1
    return dW1, _colsum(dz1), dW2, db2, dW3, db3


@njit(cache=True)
def _colsum(a):
    out = np.zeros(a.shape[1], a.dtype)
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            out[j] += a[i, j]
    return out


@njit(cache=True)
def _w4_numba(Wx, Wh, b, h0, xs):
    # xs: (T, B, I). Plain loops: at hidden 32, batch 1 a BLAS call costs more than it does.
    T, B, I = xs.shape
    H = Wh.shape[0]
    hs = np.empty((T + 1, B, H))
    hs[0] = h0
    for t in range(T):
        for i in range(B):
            for j in range(H):
                s = b[j]
                for k in range(I):
                    s += xs[t, i, k] * Wx[k, j]
                for k in range(H):
                    s += hs[t, i, k] * Wh[k, j]
                hs[t + 1, i, j] = math.tanh(s)
    dWx, dWh, db = np.zeros_like(Wx), np.zeros_like(Wh), np.zeros_like(b)
    dh = 2.0 * hs[T]
    dz = np.empty((B, H))
    for t in range(T - 1, -1, -1):
        for i in range(B):
            for j in range(H):
                h = hs[t + 1, i, j]
                dz[i, j] = dh[i, j] * (1.0 - h * h)
                db[j] += dz[i, j]
        for i in range(B):
            for k in range(I):
                for j in range(H):
                    dWx[k, j] += xs[t, i, k] * dz[i, j]
            for k in range(H):
                for j in range(H):
                    dWh[k, j] += hs[t, i, k] * dz[i, j]
            for k in range(H):
                s = 0.0
                for j in range(H):
                    s += dz[i, j] * Wh[k, j]
                dh[i, k] = s
    return dWx, dWh, db


@njit(cache=True)
def _w5_numba(w, X, y):
    r = X @ w - y
    return X.T @ r * (2.0 / X.shape[0]) + 2e-3 * w


@njit(cache=True)
def _w6_numba(Wq, Wk, Wv, X):
    n = X.shape[0]
    ic = np.float32(1.0 / Wq.shape[1] ** 0.5)
    Q, K, V = X @ Wq, X @ Wk, X @ Wv
    P = (Q * ic) @ K.T
    for i in range(n):                       # row softmax, in place
        mx = P[i, 0]
        for j in range(n):
            mx = max(mx, P[i, j])
        s = np.float32(0.0)
        for j in range(n):
            e = np.exp(P[i, j] - mx)         # np.exp: stays float32 (math.exp: float64)
            P[i, j] = e
            s += e
        inv = np.float32(1.0) / s
        for j in range(n):
            P[i, j] *= inv
    dO = P @ V
    dO *= np.float32(2.0)
    dS = dO @ V.T                            # dP, then the softmax backward in place
    for i in range(n):
        s = np.float32(0.0)
        for j in range(n):
            s += dS[i, j] * P[i, j]
        for j in range(n):
            dS[i, j] = P[i, j] * (dS[i, j] - s) * ic
    return X.T @ (dS @ K), X.T @ (dS.T @ Q), X.T @ (P.T @ dO)


@njit(cache=True)
def _w7_numba(x, eye, mask):
    # every ordered pair (the mask need not be symmetric), the force added to both ends
    n, D = x.shape
    dx = np.zeros_like(x)
    for i in range(n):
        for j in range(n):
            r2 = eye[i, j]
            for k in range(D):
                t = x[i, k] - x[j, k]
                r2 += t * t
            inv2 = 1.0 / r2
            inv6 = inv2 * inv2 * inv2
            g = mask[i, j] * inv6 * (12.0 - 24.0 * inv6) * inv2
            for k in range(D):
                f = g * (x[i, k] - x[j, k])
                dx[i, k] += f
                dx[j, k] -= f
    return dx


@njit(cache=True)
def _w8_numba(U, V, i, j, r):
    dU, dV = 2e-3 * U, 2e-3 * V
    K = U.shape[1]
    scale = 2.0 / r.shape[0]
    for p in range(r.shape[0]):              # one pass: gather, residual, scatter-add
        a, b = i[p], j[p]
        s = 0.0
        for k in range(K):
            s += U[a, k] * V[b, k]
        g = (s - r[p]) * scale
        for k in range(K):
            dU[a, k] += g * V[b, k]
            dV[b, k] += g * U[a, k]
    return dU, dV


def numba_grad(name):
    """args -> tuple of gradients; W4 takes the sequence stacked as one (T, B, 8) array."""
    if name == "W1":
        return lambda x, w, b: _w1_numba(x, w, b)
    if name == "W2":
        return lambda x: (_w2_numba(x),)
    if name == "W3":
        return _w3_numba
    if name == "W4":
        return lambda Wx, Wh, b, h0, xs: _w4_numba(Wx, Wh, b, h0, xs)
    if name == "W5":
        return lambda w, X, y: (_w5_numba(w, X, y),)
    if name == "W6":
        return _w6_numba
    if name == "W7":
        return lambda x, eye, mask: (_w7_numba(x, eye, mask),)
    if name == "W8":
        return _w8_numba
    raise KeyError(name)
