"""Dense linear algebra and sort on CUDA: one thread per matrix (or lane), serial inside.

Contract
- Imported by generated CUDA modules as ``cl`` (only when one needs it: this
  module imports ``numba.cuda``). Every kernel takes batched C-contiguous
  arrays (batch first: ``A[b, i, j]``), caller-allocated outputs and work
  buffers, and ``nb``; thread ``b`` owns matrix ``b``. The host side is
  ``lowering/codegen_cuda_linalg.py``.
- The algorithms are LAPACK's, so results match the CPU (NumPy / Numba's
  LAPACK) to rounding: LU with partial pivoting, first largest pivot wins
  (getrf) for inv / det / slogdet / solve; Cholesky (lower); substitution for
  triangular solves; Householder QR with LAPACK's reflector convention
  (``beta = -sign(alpha) * norm``; ``tau = 0`` when the column is already
  reduced), Q formed from the reflectors (geqrf + orgqr).
- eigh: cyclic Jacobi on the lower triangle (UPLO='L') or the upper one, eigenvalues ascending;
  svd: one-sided Jacobi, singular values descending; pinv from the SVD with
  the op's cutoff (``rcond`` x the largest singular value; NumPy's 1e-15 by default).
  Eigen- and singular vectors are unique only up to sign (as with LAPACK, whose signs differ):
  gradients of sign-invariant functions agree with the CPU.
- Missing basis columns (svd with full_matrices, rank deficiency) are
  completed by Gram-Schmidt over the unit vectors.
- No exceptions on a device: a singular matrix gives inf/NaN (where NumPy
  raises ``LinAlgError``), a non-positive-definite Cholesky NaN.
- Sizes are small in this setting (one thread does O(n^3) work); large
  matrices belong to cuSOLVER, which numba-cuda does not wrap.
"""
from __future__ import annotations

import math

from numba import cuda

_dev = cuda.jit(device=True, inline="always")
_MAX_SWEEPS = 60


@_dev
def _swap(x, b, i, p):
    t = x[b, i]
    x[b, i] = x[b, p]
    x[b, p] = t


@_dev
def _swap_cols(M, b, rows, i, p):
    for k in range(rows):
        t = M[b, k, i]
        M[b, k, i] = M[b, k, p]
        M[b, k, p] = t


@_dev
def _swap_rows(M, b, cols, i, p):
    for k in range(cols):
        t = M[b, i, k]
        M[b, i, k] = M[b, p, k]
        M[b, p, k] = t


@_dev
def _lu(W, piv, b, n):
    """In-place LU of W[b] with partial pivoting; returns the permutation's sign."""
    sign = 1.0
    for k in range(n):
        p = k
        mx = abs(W[b, k, k])
        for i in range(k + 1, n):
            if abs(W[b, i, k]) > mx:
                mx = abs(W[b, i, k])
                p = i
        piv[b, k] = p
        if p != k:
            sign = -sign
            _swap_rows(W, b, n, k, p)
        d = W[b, k, k]
        if d != 0:
            for i in range(k + 1, n):
                f = W[b, i, k] / d
                W[b, i, k] = f
                for j in range(k + 1, n):
                    W[b, i, j] -= f * W[b, k, j]
    return sign


@_dev
def _lu_solve(W, piv, X, b, n, k):
    """X[b] (n, k) holds B on entry and the solution of (LU) X = P B on exit."""
    for r in range(n):
        p = piv[b, r]
        if p != r:
            for c in range(k):
                t = X[b, r, c]
                X[b, r, c] = X[b, p, c]
                X[b, p, c] = t
    for c in range(k):
        for i in range(n):
            s = X[b, i, c]
            for j in range(i):
                s -= W[b, i, j] * X[b, j, c]
            X[b, i, c] = s
        for i in range(n - 1, -1, -1):
            s = X[b, i, c]
            for j in range(i + 1, n):
                s -= W[b, i, j] * X[b, j, c]
            X[b, i, c] = s / W[b, i, i]


@cuda.jit(cache=True)
def inv(A, W, piv, X, nb):
    b = cuda.grid(1)
    if b < nb:
        n = A.shape[1]
        for i in range(n):
            for j in range(n):
                W[b, i, j] = A[b, i, j]
                X[b, i, j] = 1.0 if i == j else 0.0
        _lu(W, piv, b, n)
        _lu_solve(W, piv, X, b, n, n)


@cuda.jit(cache=True)
def solve(A, B, W, piv, X, nb):
    b = cuda.grid(1)
    if b < nb:
        n, k = A.shape[1], B.shape[2]
        for i in range(n):
            for j in range(n):
                W[b, i, j] = A[b, i, j]
            for j in range(k):
                X[b, i, j] = B[b, i, j]
        _lu(W, piv, b, n)
        _lu_solve(W, piv, X, b, n, k)


@cuda.jit(cache=True)
def det(A, W, piv, sign_out, logabs_out, det_out, nb):
    """sign / log|det| (slogdet) and det of every matrix."""
    b = cuda.grid(1)
    if b < nb:
        n = A.shape[1]
        for i in range(n):
            for j in range(n):
                W[b, i, j] = A[b, i, j]
        s = _lu(W, piv, b, n)
        la = 0.0
        d = s
        for i in range(n):
            u = W[b, i, i]
            d *= u
            if u < 0:
                s = -s
            elif u == 0:
                s = 0.0
            la += math.log(abs(u)) if u != 0 else -math.inf
        sign_out[b] = s
        logabs_out[b] = la
        det_out[b] = d


@cuda.jit(cache=True)
def cholesky(A, L, nb):
    b = cuda.grid(1)
    if b < nb:
        n = A.shape[1]
        for i in range(n):
            for j in range(n):
                L[b, i, j] = 0.0
        for j in range(n):
            s = A[b, j, j]
            for k in range(j):
                s -= L[b, j, k] * L[b, j, k]
            d = math.sqrt(s)
            L[b, j, j] = d
            for i in range(j + 1, n):
                s = A[b, i, j]
                for k in range(j):
                    s -= L[b, i, k] * L[b, j, k]
                L[b, i, j] = s / d


@cuda.jit(cache=True)
def solve_triangular(A, B, X, upper, unit, nb):
    """A X = B for triangular A (left side; the host transposes for right-sided solves)."""
    b = cuda.grid(1)
    if b < nb:
        n, k = A.shape[1], B.shape[2]
        for c in range(k):
            for t in range(n):
                i = n - 1 - t if upper else t
                s = B[b, i, c]
                if upper:
                    for j in range(i + 1, n):
                        s -= A[b, i, j] * X[b, j, c]
                else:
                    for j in range(i):
                        s -= A[b, i, j] * X[b, j, c]
                X[b, i, c] = s if unit else s / A[b, i, i]


@_dev
def _complete(Q, b, m, have, want):
    """Columns have..want-1 of Q[b] (m rows): orthonormal completion of the first ``have``
    by Gram-Schmidt (twice) over the unit vectors, taking the largest residual first."""
    for c in range(have, want):
        best, bi = -1.0, 0
        for e in range(m):   # residual norm of unit vector e against columns 0..c-1
            r = 1.0
            for j in range(c):
                r -= Q[b, e, j] * Q[b, e, j]
            if r > best + 1e-12:
                best, bi = r, e
        for i in range(m):
            Q[b, i, c] = 1.0 if i == bi else 0.0
        for _ in range(2):
            for j in range(c):
                d = 0.0
                for i in range(m):
                    d += Q[b, i, j] * Q[b, i, c]
                for i in range(m):
                    Q[b, i, c] -= d * Q[b, i, j]
        nrm = 0.0
        for i in range(m):
            nrm += Q[b, i, c] * Q[b, i, c]
        nrm = math.sqrt(nrm)
        for i in range(m):
            Q[b, i, c] /= nrm


@cuda.jit(cache=True)
def qr(A, W, tau, Q, R, nb):
    """Householder QR: Q (m, q) = first q columns of H_0..H_{k-1}, R (r, n) = triu(W)[:r]."""
    b = cuda.grid(1)
    if b < nb:
        m, n = A.shape[1], A.shape[2]
        k = min(m, n)
        for i in range(m):
            for j in range(n):
                W[b, i, j] = A[b, i, j]
        for j in range(k):
            alpha = W[b, j, j]
            xn = 0.0
            for i in range(j + 1, m):
                xn += W[b, i, j] * W[b, i, j]
            if xn == 0.0:
                tau[b, j] = 0.0
                continue
            beta = -math.copysign(math.sqrt(alpha * alpha + xn), alpha)
            tau[b, j] = (beta - alpha) / beta
            scale = 1.0 / (alpha - beta)
            for i in range(j + 1, m):
                W[b, i, j] *= scale
            W[b, j, j] = beta
            for c in range(j + 1, n):   # apply H = I - tau v v^T (v_j = 1) to column c
                d = W[b, j, c]
                for i in range(j + 1, m):
                    d += W[b, i, j] * W[b, i, c]
                d *= tau[b, j]
                W[b, j, c] -= d
                for i in range(j + 1, m):
                    W[b, i, c] -= d * W[b, i, j]
        for i in range(R.shape[1]):
            for j in range(n):
                R[b, i, j] = W[b, i, j] if (j >= i and i < k) else 0.0
        q = Q.shape[2]
        for i in range(m):
            for c in range(q):
                Q[b, i, c] = 1.0 if i == c else 0.0
        for j in range(k - 1, -1, -1):
            t = tau[b, j]
            if t == 0.0:
                continue
            for c in range(q):
                d = Q[b, j, c]
                for i in range(j + 1, m):
                    d += W[b, i, j] * Q[b, i, c]
                d *= t
                Q[b, j, c] -= d
                for i in range(j + 1, m):
                    Q[b, i, c] -= d * W[b, i, j]


@_dev
def _jacobi_eig(S, V, b, n):
    """Cyclic Jacobi on symmetric S[b] (destroyed: eigenvalues on its diagonal), V[b] the
    eigenvectors (columns)."""
    for i in range(n):
        for j in range(n):
            V[b, i, j] = 1.0 if i == j else 0.0
    for _ in range(_MAX_SWEEPS):
        off, tot = 0.0, 0.0
        for i in range(n):
            for j in range(n):
                tot += S[b, i, j] * S[b, i, j]
                if i != j:
                    off += S[b, i, j] * S[b, i, j]
        if off <= 1e-30 * tot or off == 0.0:
            break
        for p in range(n - 1):
            for q in range(p + 1, n):
                apq = S[b, p, q]
                if apq == 0.0:
                    continue
                theta = (S[b, q, q] - S[b, p, p]) / (2.0 * apq)
                t = math.copysign(1.0, theta) / (abs(theta) + math.sqrt(theta * theta + 1.0))
                c = 1.0 / math.sqrt(t * t + 1.0)
                s = t * c
                for k in range(n):   # S <- J^T S J
                    skp, skq = S[b, k, p], S[b, k, q]
                    S[b, k, p] = c * skp - s * skq
                    S[b, k, q] = s * skp + c * skq
                for k in range(n):
                    spk, sqk = S[b, p, k], S[b, q, k]
                    S[b, p, k] = c * spk - s * sqk
                    S[b, q, k] = s * spk + c * sqk
                for k in range(n):
                    vkp, vkq = V[b, k, p], V[b, k, q]
                    V[b, k, p] = c * vkp - s * vkq
                    V[b, k, q] = s * vkp + c * vkq


@cuda.jit(cache=True)
def eigh(A, S, w, V, upper, nb):
    b = cuda.grid(1)
    if b < nb:
        n = A.shape[1]
        for i in range(n):
            for j in range(n):   # the lower triangle (UPLO='L'), or the upper one
                lo = A[b, i, j] if i >= j else A[b, j, i]
                S[b, i, j] = (A[b, j, i] if i >= j else A[b, i, j]) if upper else lo
        _jacobi_eig(S, V, b, n)
        for i in range(n):
            w[b, i] = S[b, i, i]
        for i in range(n):   # selection sort ascending, columns of V along
            p = i
            for j in range(i + 1, n):
                if w[b, j] < w[b, p]:
                    p = j
            if p != i:
                _swap(w, b, i, p)
                _swap_cols(V, b, n, i, p)


@cuda.jit(cache=True)
def svd(A, W, U, s, Vt, transposed, nb):
    """One-sided Jacobi on W = A (or A^T when ``transposed``, so W is tall: m >= n).
    U (m, mu), s (n,), Vt (nv, n) in W's orientation; the host swaps roles back."""
    b = cuda.grid(1)
    if b < nb:
        m, n = W.shape[1], W.shape[2]
        for i in range(m):
            for j in range(n):
                W[b, i, j] = A[b, j, i] if transposed else A[b, i, j]
        for i in range(Vt.shape[1]):
            for j in range(n):
                Vt[b, i, j] = 1.0 if i == j else 0.0
        for _ in range(_MAX_SWEEPS):
            rot = False
            for p in range(n - 1):
                for q in range(p + 1, n):
                    al, be, ga = 0.0, 0.0, 0.0
                    for i in range(m):
                        al += W[b, i, p] * W[b, i, p]
                        be += W[b, i, q] * W[b, i, q]
                        ga += W[b, i, p] * W[b, i, q]
                    if ga == 0.0 or abs(ga) <= 1e-15 * math.sqrt(al * be):
                        continue
                    rot = True
                    zeta = (be - al) / (2.0 * ga)
                    t = math.copysign(1.0, zeta) / (abs(zeta) + math.sqrt(1.0 + zeta * zeta))
                    c = 1.0 / math.sqrt(1.0 + t * t)
                    sn = c * t
                    for i in range(m):
                        wp, wq = W[b, i, p], W[b, i, q]
                        W[b, i, p] = c * wp - sn * wq
                        W[b, i, q] = sn * wp + c * wq
                    for i in range(n):   # V <- V J, stored transposed: rows p, q of Vt
                        vp, vq = Vt[b, p, i], Vt[b, q, i]
                        Vt[b, p, i] = c * vp - sn * vq
                        Vt[b, q, i] = sn * vp + c * vq
            if not rot:
                break
        for j in range(n):
            nrm = 0.0
            for i in range(m):
                nrm += W[b, i, j] * W[b, i, j]
            s[b, j] = math.sqrt(nrm)
        for i in range(n):   # sort descending; columns of W and rows of Vt along
            p = i
            for j in range(i + 1, n):
                if s[b, j] > s[b, p]:
                    p = j
            if p != i:
                _swap(s, b, i, p)
                _swap_cols(W, b, m, i, p)
                _swap_rows(Vt, b, n, i, p)
        good = 0
        for j in range(n):
            if s[b, j] > 1e-300:
                good = j + 1
        for j in range(good):
            for i in range(m):
                U[b, i, j] = W[b, i, j] / s[b, j]
        _complete(U, b, m, good, U.shape[2])


@cuda.jit(cache=True)
def pinv_from_svd(U, s, Vt, X, transposed, rcond, nb):
    """X = V diag(1/s, cut at rcond max s) U^T (in W's orientation; transposed -> X^T)."""
    b = cuda.grid(1)
    if b < nb:
        m, k, n = U.shape[1], s.shape[1], Vt.shape[2]
        cut = rcond * s[b, 0] if k else 0.0
        for i in range(n):
            for j in range(m):
                acc = 0.0
                for r in range(k):
                    if s[b, r] > cut:
                        acc += Vt[b, r, i] * U[b, j, r] / s[b, r]
                if transposed:
                    X[b, j, i] = acc
                else:
                    X[b, i, j] = acc


@cuda.jit(cache=True)
def sort_lanes(X, vals, inds, descending, nb):
    """Stable insertion sort of each row X[b, :] into vals/inds (NaN last, as NumPy)."""
    b = cuda.grid(1)
    if b < nb:
        n = X.shape[1]
        for i in range(n):
            x = X[b, i]
            j = i
            while j > 0:
                y = vals[b, j - 1]
                if descending:
                    before = (x > y) or (y != y and x == x)
                else:
                    before = (x < y) or (y != y and x == x)
                if not before:
                    break
                vals[b, j] = y
                inds[b, j] = inds[b, j - 1]
                j -= 1
            vals[b, j] = x
            inds[b, j] = i
