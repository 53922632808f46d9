"""Backward helpers of the linear-algebra family (see ``helpers.py`` for the contract).

Every helper is written with differentiable tracer ops (matmul, the linalg ops
of ``tracer/ops_linalg.py``, elementwise ops, constant masks), so second
derivatives come from lowering the backward graph again. Matrices are
``(*, m, n)``; ``.mT`` swaps the last two dims; identity and triangle masks
are constants broadcast over batch dims. Results are the gradient with respect
to every entry of the input (the solvers' triangle-only reads are respected:
entries an op never reads get zero).

Formulas (X' the transpose, G the incoming gradient, I the identity):
- inv:  -X' G X'  with X = inv(A)
- det:  G adj(A)' = G det(A) inv(A)', from cofactors (small n) or the SVD near singular A
  (see _adjugate_t);
  slogdet: G_logabsdet inv(A)' (not finite at an exactly singular A, as torch)
- solve: G_B = solve(A', G);  G_A = -G_B X'
- solve_triangular (left):  G_B = solve_tri(A', G);  G_A = -tri(G_B X')
- cholesky: Phi = tril(L' G_L) with its diagonal halved, symmetrised;
  G_A = L'^-1 Phi L^-1
- qr (m >= n): M = R G_R' - G_Q' Q;  G_A = (G_Q + Q copyltu(M)) R'^-1
- qr (m < n): A = [X | Y], R = [U | V]: G_Y = Q G_V, and G_X is the m >= n formula
  for X = Q U with G_Q + Y G_V' in place of G_Q
- eigh: G_A = V (diag(G_w) + F o skew(V' G_V)) V',  F_ij = 1 / (w_j - w_i)
- svd: U [diag(G_S) + (F o (U'G_U - G_U'U)) S + S (F o (V'G_V - G_V'V))] V'
  plus the parts of G_U, G_V outside the column spaces, F_ij = 1/(s_j^2 - s_i^2);
  full_matrices: the first k = min(m, n) columns of U and G_U (rows of Vh, G_Vh)
  only, as torch (the rest span an arbitrary basis of a complement)
- pinv (constant rank): -X' G X' + (I - A X) G' X X' + X' X G' (I - X A); with a cutoff
  rcond that drops nonzero singular values, the SVD formula of _pinv_truncated
"""
from __future__ import annotations

import numpy as np

from gradjit.lowering.helpers import helper, where
from gradjit.lowering.helpers_index import slice_backward, slice_of
from gradjit.tracer.dispatch import apply
from gradjit.tracer.methods_index import cat


def _eye(like, n):
    return like._const(np.eye(n, dtype=like.dtype))


def _tril(like, n, k=0):
    return like._const(np.tril(np.ones((n, n), dtype=like.dtype), k))


def _inv(a):
    return apply("linalg_inv.default", [a], {})


def _tri_solve(a, b, upper, left=True, unitriangular=False):
    return apply("linalg_solve_triangular.default", [a, b],
                 {"upper": upper, "left": left, "unitriangular": unitriangular})


@helper
def inv_backward(grad, result):
    return -(result.mT @ grad @ result.mT)


def _mat(x):
    """A batch of scalars as a batch of 1 x 1 matrices (broadcasts against (*, n, n))."""
    return x.unsqueeze(-1).unsqueeze(-1)


def _near_singular(A, det):
    """|det A| <= sqrt(eps) times Hadamard's bound prod_j |A e_j|: det(A) inv(A) loses
    accuracy there (inv fails outright at an exactly singular A). Not differentiated."""
    cols = apply("linalg_vector_norm.default", [A],
                 {"ord": 2.0, "dim": (A.ndim - 2,), "keepdim": False})
    return det.abs() <= cols.prod(-1) * float(np.sqrt(np.finfo(A.dtype).eps))


_COFACTOR_MAX_N = 6   # (the second-order graph holds n^2 (n-1)^2 minors: small n only)


def _cofactors(A, n):
    """adj(A)' entry by entry: (-1)^(i+j) det(A without row i and column j), the minors
    cut out by constant selection matrices. Its derivative is the det op's again, on the
    (n-1) x (n-1) minors: finite and exact at any rank (no SVD is differentiated)."""
    if n == 1:
        return A * 0 + 1
    drop = np.stack([np.delete(np.eye(n, dtype=A.dtype), i, 0) for i in range(n)])  # (n, n-1, n)
    rows = A._const(drop[:, None])                     # (n, 1, n-1, n): without row i
    cols = A._const(np.swapaxes(drop, -1, -2)[None])   # (1, n, n, n-1): without column j
    minors = rows @ A.unsqueeze(-3).unsqueeze(-3) @ cols   # (*, n, n, n-1, n-1)
    sign = np.where(np.add.outer(np.arange(n), np.arange(n)) % 2, -1.0, 1.0).astype(A.dtype)
    return apply("linalg_det.default", [minors], {}) * A._const(sign)


def _adjugate_t(A, det):
    """adj(A)' = d det(A) / dA for any A: det(A) inv(A)' where A is well away from singular,
    else the cofactors (n <= _COFACTOR_MAX_N; their derivative is finite and exact at any
    rank: the second derivative of det at rank <= n - 2 too), or for larger n the SVD
    A = U S Vh: sign(det U det Vh) U diag(prod_{j != i} s_j) Vh (rank n-1: nonzero;
    rank <= n-2: 0, whose derivative divides by equal singular values: NaN). Each branch
    reads a stand-in where the other one is taken (I for inv; diag(1..n), distinct
    singular values, for svd), so neither fails nor feeds a NaN into the second
    derivative through the branch not taken."""
    n = A.shape[-1]
    eye = _eye(A, n)
    sing = _mat(_near_singular(A, det))
    regular = _mat(det) * _inv(where(sing, eye, A)).mT
    if n <= _COFACTOR_MAX_N:
        return where(sing, _cofactors(where(sing, A, eye), n), regular)
    spread = A._const(np.diag(np.arange(1, n + 1)).astype(A.dtype))
    U, S, Vh = apply("linalg_svd.default", [where(sing, A, spread)], {"full_matrices": False})
    sign = (apply("linalg_det.default", [U], {}) * apply("linalg_det.default", [Vh], {})).sign()
    others = (S.unsqueeze(-2) * (1 - eye) + eye).prod(-1)      # row i: s with s_i -> 1
    singular = (U * (others * sign.unsqueeze(-1)).unsqueeze(-2)) @ Vh
    return where(sing, singular, regular)


@helper
def det_backward(grad, self, result):
    return _mat(grad) * _adjugate_t(self, result)


@helper
def slogdet_backward(grad_logabsdet, self, sign):
    """G inv(A)'. At an exactly singular A (sign 0, logabsdet -inf) the gradient is not
    finite: inv(A) is replaced by I (it would raise) and divided by 0, so entries are
    +-inf or NaN, as torch's are there."""
    if grad_logabsdet is None:
        return None
    singular = _mat(sign == 0)
    inv_t = _inv(where(singular, _eye(self, self.shape[-1]), self)).mT
    return _mat(grad_logabsdet) * inv_t / (1 - singular.to(self.dtype))


@helper
def solve_backward_B(grad, A):
    return apply("linalg_solve.default", [A.mT, grad], {})


@helper
def solve_backward_A(grad, A, result):
    return -(solve_backward_B(grad, A) @ result.mT)


def _triangle(like, n, upper, unitriangular):
    mask = _tril(like, n, -1 if unitriangular else 0)
    return mask.mT if upper else mask


@helper
def solve_triangular_backward_B(grad, self, upper, left, unitriangular):
    return _tri_solve(self.mT, grad, not upper, left, unitriangular)


@helper
def solve_triangular_backward_A(grad, self, result, upper, left, unitriangular):
    gB = solve_triangular_backward_B(grad, self, upper, left, unitriangular)
    g = gB @ result.mT if left else result.mT @ gB
    return -(g * _triangle(grad, self.shape[-1], upper, unitriangular))


@helper
def cholesky_backward(grad, result):
    L, n = result, result.shape[-1]
    P = (L.mT @ grad) * _tril(grad, n)
    phi = (P + (P * _tril(grad, n, -1)).mT) * 0.5
    Y = _tri_solve(L.mT, phi, True)                 # L'^-1 phi
    return _tri_solve(L, Y, False, left=False)      # (L'^-1 phi) L^-1


def _copyltu(M, n):
    low = M * _tril(M, n, -1)
    return low + low.mT + M * _eye(M, n)


def _qr_tall_backward(gQ, gR, Q, R, n):
    """m >= n: M = R G_R' - G_Q' Q;  G_A = (G_Q + Q copyltu(M)) R'^-1."""
    M = None
    if gR is not None:
        M = R @ gR.mT
    if gQ is not None:
        M = -(gQ.mT @ Q) if M is None else M - gQ.mT @ Q
    b = Q @ _copyltu(M, n)
    if gQ is not None:
        b = gQ + b
    return _tri_solve(R.mT, b, False, left=False)   # b R'^-1


@helper
def qr_backward(grads, A, Q, R):
    gQ, gR = grads[0], grads[1]
    m, n = A.shape[-2:]
    if m >= n:
        return _qr_tall_backward(gQ, gR, Q, R, n)
    # m < n: A = [X | Y] with X square, R = [U | V]: X = Q U is a square QR and
    # V = Q' Y, so Y's gradient is Q G_V and Q gets Y G_V' on top of G_Q.
    last = A.ndim - 1
    U, gU, gY = slice_of(R, last, 0, m, 1), None, None
    if gR is not None:
        gU, gV = slice_of(gR, last, 0, m, 1), slice_of(gR, last, m, n, 1)
        YgV = slice_of(A, last, m, n, 1) @ gV.mT
        gQ = YgV if gQ is None else gQ + YgV
        gY = Q @ gV
    gX = _qr_tall_backward(gQ, gU, Q, U, m)
    if gY is None:   # only Q was used: Y does not move it
        return slice_backward(gX, A.shape, last, 0, m, 1)
    return cat([gX, gY], last)


def _off_diag_inverse(E, n):
    """1 / E off the diagonal, 0 on it (E has zeros on its diagonal)."""
    eye = _eye(E, n)
    return (1 - eye) / (E + eye)


@helper
def eigh_backward(grads, eigenvalues, eigenvectors):
    gw, gV = grads[0], grads[1]
    V, w, n = eigenvectors, eigenvalues, eigenvectors.shape[-1]
    inner = None
    if gV is not None:
        M = V.mT @ gV
        F = _off_diag_inverse(w.unsqueeze(-2) - w.unsqueeze(-1), n)
        inner = F * ((M - M.mT) * 0.5)
    if gw is not None:
        D = gw.unsqueeze(-1) * _eye(gw, n)
        inner = D if inner is None else inner + D
    return V @ inner @ V.mT


@helper
def svd_backward(grads, A, U, S, Vh, full_matrices=False):
    gU, gS, gVh = grads
    m, n = A.shape[-2:]
    k = S.shape[-1]
    if full_matrices:   # as torch: the columns of U / rows of Vh past k are ignored
        last = A.ndim - 1
        U, Vh = slice_of(U, last, 0, k, 1), slice_of(Vh, last - 1, 0, k, 1)
        gU = None if gU is None else slice_of(gU, last, 0, k, 1)
        gVh = None if gVh is None else slice_of(gVh, last - 1, 0, k, 1)
    V = Vh.mT
    inner = None

    def add(x):
        nonlocal inner
        inner = x if inner is None else inner + x

    if gS is not None:
        add(gS.unsqueeze(-1) * _eye(gS, k))
    if gU is not None or gVh is not None:
        s2 = S * S
        F = _off_diag_inverse(s2.unsqueeze(-2) - s2.unsqueeze(-1), k)
    if gU is not None:
        J = U.mT @ gU
        add((F * (J - J.mT)) * S.unsqueeze(-2))
    if gVh is not None:
        gV = gVh.mT
        K = V.mT @ gV
        add(S.unsqueeze(-1) * (F * (K - K.mT)))
    out = U @ inner @ Vh
    if gU is not None and m > k:
        out = out + ((gU - U @ (U.mT @ gU)) / S.unsqueeze(-2)) @ Vh
    if gVh is not None and n > k:
        gVt = gVh          # (G_V)' = G_Vh
        out = out + U @ ((gVt - (gVt @ V) @ Vh) / S.unsqueeze(-1))
    return out


def _pinv_constant_rank(G, A, X):
    T1 = G.mT @ (X @ X.mT)
    T2 = (X.mT @ X) @ G.mT
    return -(X.mT @ G @ X.mT) + (T1 - A @ (X @ T1)) + (T2 - (T2 @ X) @ A)


def _pinv_truncated(G, A, X, rcond, m, n):
    """The derivative of X = pinv_k(A) = h(A'A) A' (h(l) = 1/l above the cutoff, else 0)
    when the dropped singular values are not zero: Daleckii-Krein for h over the
    eigenpairs (v_i, l_i = s_i^2) of A'A: G_A = A (Z + Z') + G' X X' with
    Z = V (H o V' W V) V', W = G A, H_ij h's divided difference: -1/(l_i l_j) (both kept),
    1/(l_i (l_i - l_j)) (i kept, j not), 0 (neither), all finite (kept l exceed the
    cutoff, dropped ones do not). V is the reduced SVD's; for n > m the null space of A
    (l = 0, dropped) adds D W P + P W D, D = (X X')^2, P = I - V V' (a basis of it would
    be an arbitrary completion, whose gradient the SVD does not give)."""
    U, S, Vh = apply("linalg_svd.default", [A], {"full_matrices": False})
    V = Vh.mT
    keep, lam = S > S.amax(-1, keepdim=True) * rcond, S * S
    li, lj, ki, kj = lam.unsqueeze(-1), lam.unsqueeze(-2), keep.unsqueeze(-1), keep.unsqueeze(-2)
    both, cross, cross_t = ki & kj, ki & ~kj, ~ki & kj
    one = lam._const(np.ones((), lam.dtype))
    H = (where(both, -1 / where(both, li * lj, one), 0 * one)
         + where(cross, 1 / where(cross, li * (li - lj), one), 0 * one)
         + where(cross_t, 1 / where(cross_t, lj * (lj - li), one), 0 * one))
    W = G @ A
    Y = W + W.mT
    Z2 = V @ (H * (V.mT @ Y @ V)) @ V.mT
    h = X @ X.mT
    if n > m:
        D, P = h @ h, _eye(A, n) - V @ V.mT
        Z2 = Z2 + D @ Y @ P + P @ Y @ D
    return A @ Z2 + G.mT @ h


@helper
def pinv_backward(grad, self, result, rcond=1e-15):
    """Constant rank (Golub-Pereyra, from X and A alone): exact where the singular values
    pinv drops are 0, or below rounding (rcond <= 16 eps max(m, n), which NumPy's pinv and
    lstsq defaults are). A larger rcond may drop nonzero singular values; the subspaces
    they leave then turn with A, which _pinv_truncated's SVD formula follows. It is taken
    only where |A - A X A| (the dropped part) is above rounding: elsewhere its SVD reads a
    stand-in with distinct singular values, so repeated ones (A = I, exact rank
    deficiency) feed no NaN into second derivatives."""
    X, A, G = result, self, grad
    m, n = A.shape[-2:]
    low = _pinv_constant_rank(G, A, X)
    tol = 16 * float(np.finfo(A.dtype).eps) * max(m, n)
    if rcond <= tol or min(m, n) == 0:
        return low
    R = A - A @ (X @ A)
    exact = _mat((R * R).sum((-2, -1)) <= (A * A).sum((-2, -1)) * (tol * tol))
    k = min(m, n)
    spread = np.zeros((m, n), A.dtype)   # (the SVD's backward is finite at distinct values)
    spread[np.arange(k), np.arange(k)] = np.arange(k, 0, -1)
    stand_in = where(exact, A._const(spread), A)
    return where(exact, low, _pinv_truncated(G, stand_in, X, float(rcond), m, n))
