"""``gj.linalg``: torch.linalg-named functions on gradjit tensors (eager and traced).

Contract
- Functions take ``Tensor`` or ``Tracer`` arguments (NumPy arrays beside them
  become constants) and call the ops of ``tracer/ops_linalg.py`` or compose
  registered ops; NumPy's ``np.linalg.*`` reach them through
  ``__array_function__`` (``tracer/numpy_protocol.py``) by way of
  ``tracer/numpy_linalg.py``, which adds NumPy's rules (dtype promotion, the
  triangle eigh reads, np.dot's shapes) and is re-exported here as
  ``NUMPY_FUNCTIONS`` and ``numpy_dot``.
- Batch dims broadcast (``expand``) before two-operand solvers; a vector
  right-hand side (``B.ndim == A.ndim - 1``) is solved as a column.
- Composites (no op of their own, differentiated through their parts):
  ``logdet`` = ``logabsdet + log(sign)`` (NaN for a negative determinant, as
  torch); ``cholesky_solve`` = two triangular solves; ``lstsq`` = ``pinv(A) @ B``
  with lstsq's cutoff (the minimum-norm solution, as NumPy's gelsd); ``matrix_norm`` from
  ``vector_norm``, ``amax``/``amin`` and ``svd``; ``svdvals`` the S of ``svd``.
- Products (``mv`` ... ``einsum``) are re-exported from ``methods_linalg.py``.
- ``qr``: ``mode='reduced'`` (any m, n; differentiable for wide matrices too,
  as torch) and ``'complete'`` (when m <= n the same factorisation; for m > n
  ``linalg_qr.complete``, whose gradient raises as torch's does); ``svd``:
  ``full_matrices`` gives the full U / Vh of a non-square matrix (its gradient
  ignores the columns past min(m, n), as torch).
"""
from __future__ import annotations

import math
from collections import namedtuple

import numpy as np

from gradjit.tracer.dispatch import apply, norm_dims
from gradjit.tracer.einsum import einsum  # noqa: F401
from gradjit.tracer.registry import GradjitError, ShapeError, user_site

SlogdetResult = namedtuple("SlogdetResult", "sign logabsdet")
QRResult = namedtuple("QRResult", "Q R")
EighResult = namedtuple("EighResult", "eigenvalues eigenvectors")
SVDResult = namedtuple("SVDResult", "U S Vh")
LstsqResult = namedtuple("LstsqResult", "solution residuals rank singular_values")


def _obj(x, like):
    return x if hasattr(x, "_apply") else like._const(np.asarray(x, dtype=like.dtype))


def _pair(op, a, b):
    like = a if hasattr(a, "_apply") else b
    if not hasattr(like, "_apply"):   # (as apply() says it for one-operand functions)
        raise TypeError(f"{op}: no gradjit tensor among the arguments "
                        f"{[type(a).__name__, type(b).__name__]}")
    return _obj(a, like), _obj(b, like)


def _need(op, x, rank=2):
    if x.ndim < rank:
        raise ShapeError(f"{op}: expected a tensor with at least {rank} dims (*, m, n), got "
                         f"shape {tuple(x.shape)}", user_site())


def _bcast_batch(op, a, b, b_rank=2):
    try:
        batch = tuple(np.broadcast_shapes(a.shape[:-2], b.shape[:b.ndim - b_rank]))
    except ValueError:
        raise ShapeError(f"{op}: batch dims of A {tuple(a.shape)} and B {tuple(b.shape)} cannot "
                         f"be broadcast together", user_site()) from None
    return (a.expand(batch + a.shape[-2:]), b.expand(batch + b.shape[b.ndim - b_rank:]))


def inv(A):
    _need("linalg.inv", A)
    return apply("linalg_inv.default", [A], {})


def det(A):
    _need("linalg.det", A)
    return apply("linalg_det.default", [A], {})


def slogdet(A):
    _need("linalg.slogdet", A)
    return SlogdetResult(*apply("linalg_slogdet.default", [A], {}))


def logdet(A):
    sign, logabs = slogdet(A)
    return logabs + sign.log()


def _is_vector_rhs(A, B):
    return B.ndim == 1 or (B.ndim == A.ndim - 1 and tuple(B.shape) == tuple(A.shape[:-1]))


def solve(A, B, *, left=True):
    A, B = _pair("linalg.solve", A, B)
    _need("linalg.solve", A)
    if _is_vector_rhs(A, B):
        return solve(A, B.unsqueeze(-1), left=left).squeeze(-1)
    return _solve_mat(A, B) if left else _solve_mat(A.mT, B.mT).mT   # X A = B: A' X' = B'


def _solve_mat(A, B):
    _need("linalg.solve", B)
    A, B = _bcast_batch("linalg.solve", A, B)
    return apply("linalg_solve.default", [A, B], {})


def cholesky(A, *, upper=False):
    _need("linalg.cholesky", A)
    if upper:   # reads the upper triangle: U = cholesky(A^T)^T
        return apply("linalg_cholesky.default", [A.mT], {}).mT
    return apply("linalg_cholesky.default", [A], {})


def solve_triangular(A, B, *, upper, left=True, unitriangular=False):
    A, B = _pair("linalg.solve_triangular", A, B)
    _need("linalg.solve_triangular", A)
    _need("linalg.solve_triangular", B)
    A, B = _bcast_batch("linalg.solve_triangular", A, B)
    return apply("linalg_solve_triangular.default", [A, B],
                 {"upper": bool(upper), "left": bool(left), "unitriangular": bool(unitriangular)})


def cholesky_solve(B, L, upper=False):
    """Solve A X = B given the Cholesky factor of A (lower L, or upper U = L^T)."""
    B, L = _pair("linalg.cholesky_solve", B, L)
    if upper:
        L = L.mT
    Y = solve_triangular(L, B, upper=False)
    return solve_triangular(L.mT, Y, upper=True)


def qr(A, mode="reduced"):
    """torch's modes: 'reduced', 'complete', and 'r' (Q an empty tensor, R the reduced
    one; unlike torch's, R here is differentiable: its gradient is the reduced QR's)."""
    _need("linalg.qr", A)
    if mode == "r":
        return QRResult(A._const(np.zeros((0,), A.dtype)),
                        apply("linalg_qr.default", [A], {})[1])
    if mode == "complete" and A.shape[-2] <= A.shape[-1]:
        mode = "reduced"   # Q is square already: the same factorisation
    if mode == "complete":   # Q (m, m): a forward only (its yaml entry says why)
        return QRResult(*apply("linalg_qr.complete", [A], {}))
    if mode != "reduced":
        raise GradjitError(f"linalg.qr: mode={mode!r} is not supported for shape "
                           f"{tuple(A.shape)} (only 'reduced', 'complete' and 'r')", user_site())
    return QRResult(*apply("linalg_qr.default", [A], {}))


def eigh(A, UPLO="L"):
    _need("linalg.eigh", A)
    if UPLO not in ("L", "U"):
        raise ValueError(f"linalg.eigh: UPLO must be 'L' or 'U', got {UPLO!r}")
    return EighResult(*apply("linalg_eigh.default", [A], {"upper": UPLO == "U"}))


def eigvalsh(A, UPLO="L"):
    return eigh(A, UPLO).eigenvalues


def svd(A, full_matrices=True):
    _need("linalg.svd", A)
    full = bool(full_matrices) and A.shape[-1] != A.shape[-2]   # square: the same either way
    return SVDResult(*apply("linalg_svd.default", [A], {"full_matrices": full}))


def svdvals(A):
    return svd(A, full_matrices=False).S


def pinv(A):
    _need("linalg.pinv", A)
    return apply("linalg_pinv.default", [A], {})


def lstsq_cutoff(dtype, m, n, rcond):
    """The relative cutoff of lstsq's singular values (NumPy / LAPACK gelsd): rcond, or
    eps * max(m, n) when None; a negative rcond means eps (machine precision)."""
    eps = float(np.finfo(dtype).eps)
    if rcond is None:
        return eps * max(m, n)
    rcond = float(rcond)   # (a traced rcond raises here: the cutoff must be a number)
    return eps if rcond < 0 else rcond


def _known(x):
    """The numbers of ``x`` when they are known now (an eager tensor), else None."""
    return None if type(x).__name__ == "Tracer" or not hasattr(x, "data") else np.asarray(x.data)


def lstsq(A, B, rcond=None):
    """Minimum-norm least squares (any rank), as NumPy's lstsq and torch's gelsd driver:
    singular values at or below ``rcond * max(S)`` (``rcond=None``: eps * max(m, n)) count
    as zero, so solution = pinv_k(A) @ B (the ``linalg_pinv`` op with that cutoff, whose
    gradient follows the truncation), rank = the count above the cutoff.
    residuals (squared 2-norms of the columns of A X - B) exist only when m > n and A has
    full column rank, a shape that depends on A's numbers: known for an eager tensor
    (empty, shape (0,) / (*, 0), when any matrix is rank deficient, as torch); while
    tracing they are not, so the residuals have shape (*, k) and are NaN where A turns out
    rank deficient at run time (never a value for a problem with no residuals)."""
    A, B = _pair("linalg.lstsq", A, B)
    _need("linalg.lstsq", A)
    vec = B.ndim == A.ndim - 1
    Bm = B.unsqueeze(-1) if vec else B
    if Bm.shape[-2] != A.shape[-2]:
        raise ShapeError(f"linalg.lstsq: A {tuple(A.shape)} and B {tuple(B.shape)} do not match "
                         f"(rows {A.shape[-2]} != {Bm.shape[-2]})", user_site())
    m, n = A.shape[-2:]
    tol = lstsq_cutoff(A.dtype, m, n, rcond)
    X = apply("linalg_pinv.default", [A], {"rcond": tol}) @ Bm
    S = svdvals(A)
    rank = (S > S.amax(-1, keepdim=True) * tol).sum(-1) if min(m, n) else \
        A._const(np.zeros(A.shape[:-2], np.int64))
    r = ((A @ X - Bm) ** 2).sum(-2) if m > n else None
    known = _known(rank)
    if r is not None and known is not None and (known < n).any():
        r = None
    elif r is not None and known is None:   # traced: NaN where the rank is below n
        r = apply("where.self", [(rank == n).unsqueeze(-1), r,
                                 A._const(np.array(np.nan, A.dtype))], {})
    if r is None:
        r = A._const(np.zeros(tuple(A.shape[:-2]) + (0,), A.dtype))
    if vec:
        X = X.squeeze(-1)
        r = r.squeeze(-1) if r.shape[-1] == 1 else r
    return LstsqResult(X, r, rank, S)


def vector_norm(x, ord=2, dim=None, keepdim=False):
    dims = norm_dims(dim, x.ndim, "linalg.vector_norm") or None
    if not isinstance(ord, (int, float, np.integer, np.floating)) or math.isnan(ord):
        raise GradjitError(f"linalg.vector_norm: ord={ord!r} is not supported (use a number, "
                           f"inf or -inf)", user_site())
    if ord == 0:   # the count of nonzeros (NaN counts), differentiable with a zero gradient
        nonzero = x.sign().abs().nan_to_num(nan=1.0)   # (as torch's: sign's derivative is 0)
        return nonzero.sum(dims, keepdim=keepdim)
    if ord < 0 and ord != -math.inf:   # sum(|x|^ord)^(1/ord): 0 where an entry is 0
        return (x.abs() ** float(ord)).sum(dims, keepdim=keepdim) ** (1.0 / ord)
    return apply("linalg_vector_norm.default", [x],
                 {"ord": float(ord), "dim": dims, "keepdim": bool(keepdim)})


def matrix_norm(A, ord="fro", dim=(-2, -1), keepdim=False):
    _need("linalg.matrix_norm", A)
    d0, d1 = norm_dims(dim[0], A.ndim)[0], norm_dims(dim[1], A.ndim)[0]
    if d0 == d1:
        raise ValueError(f"linalg.matrix_norm: dims must be different, got {dim}")
    if ord == "fro":
        return vector_norm(A, 2, (d0, d1), keepdim)
    if ord in ("nuc", 2, -2):
        perm = [i for i in range(A.ndim) if i not in (d0, d1)] + [d0, d1]
        S = svdvals(A.permute(perm))
        out = S.sum(-1) if ord == "nuc" else (S.amax(-1) if ord == 2 else S.amin(-1))
    elif ord in (1, -1, math.inf, -math.inf):
        first, second = (d0, d1) if ord in (1, -1) else (d1, d0)
        s = A.abs().sum(first, keepdim=True)
        out = s.amax(second, keepdim=True) if ord > 0 else s.amin(second, keepdim=True)
        return out if keepdim else out.squeeze(max(d0, d1)).squeeze(min(d0, d1))
    else:
        raise GradjitError(f"linalg.matrix_norm: ord={ord!r} is not supported (use 'fro', "
                           f"'nuc', 1, -1, 2, -2, inf or -inf)", user_site())
    if keepdim:
        out = out.unsqueeze(min(d0, d1)).unsqueeze(max(d0, d1))
    return out


def norm(A, ord=None, dim=None, keepdim=False):
    """torch.linalg.norm: a vector norm, or a matrix norm for a string ord / two dims."""
    if isinstance(ord, str) or (dim is not None and not isinstance(dim, int) and len(dim) == 2) \
            or (ord is not None and dim is None and A.ndim == 2):
        return matrix_norm(A, "fro" if ord is None else ord, dim or (-2, -1), keepdim)
    return vector_norm(A if dim is not None or ord is None else A.reshape(-1),
                       2 if ord is None else ord, dim, keepdim)


def multi_dot(tensors):
    out = tensors[0]
    for t in tensors[1:]:
        out = out @ t
    return out


from gradjit.tracer.methods_linalg import (addbmm, addmm, addmv, addr, baddbmm, dot,  # noqa: E402
                                           ger, kron, matmul, mv, outer, tensordot, trace, vdot)

__all__ = ["inv", "det", "slogdet", "logdet", "solve", "cholesky", "cholesky_solve",
           "solve_triangular", "qr", "eigh", "eigvalsh", "svd", "svdvals", "pinv", "lstsq",
           "vector_norm", "matrix_norm", "norm", "multi_dot", "einsum", "mv", "dot", "vdot",
           "outer", "ger", "addmm", "addmv", "addr", "baddbmm", "addbmm", "trace", "kron",
           "tensordot", "matmul"]


# -- NumPy spellings (merged into numpy_protocol._FUNCTIONS): NumPy's own rules for shapes,
# dtypes and eigh's triangle, in tracer/numpy_linalg.py (imported last: it builds on the above)
from gradjit.tracer.numpy_linalg import NUMPY_FUNCTIONS, numpy_dot  # noqa: E402,F401
