"""Gradcheck cases of the linear-algebra family (tracer/ops_linalg.py, linalg.py, methods_linalg.py).

Imported by ``test_ops_gradcheck.py``: every case runs first and second order in
tensor mode and ``gj.grad`` against float64 central differences. Inputs are
well-conditioned by construction, inside the case function, from ``normal``
draws (so the gradient flows through the construction):
- ``_wc(x)``: ``0.3 x + n I`` (invertible, condition number ~ 2);
- ``_spd(x)``: ``x x' + n I`` (symmetric positive definite: cholesky);
- ``_sym(x)``: ``0.2 (x + x') + diag(0, 3, 6, ...)`` (eigenvalues >= 2 apart);
- ``_sv(x)``: ``0.2 x + diag(1, 2, 3, ...)`` on the leading square (distinct
  singular values).
Eigen- and singular vectors are defined up to sign, so their cases use sign-free
functions (columns times their own sums, ``U diag(c) Vh``); of a full SVD only the
leading min(m, n) vectors (the others are any basis of a complement: their gradient
is ignored, as torch's, while finite differences would see them move). Batched shapes
(``(2, n, n)``) run wherever the op supports them. One ``rep=True`` graph per
group runs compiled.
"""
from __future__ import annotations

import numpy as np

import gradjit as gj
from tests.runtime.cases import case, normal

L = gj.linalg


def _eye(x, k=0):
    n = x.shape[-1]
    return np.eye(n) if not k else np.diag(np.arange(n) * float(k))


def _wc(x):
    return x * 0.3 + _eye(x) * x.shape[-1]


def _spd(x):
    return x @ x.mT + _eye(x) * x.shape[-1]


def _sym(x):
    return (x + x.mT) * 0.2 + _eye(x, 3)


def _sv(x):
    m, n = x.shape[-2:]
    d = np.zeros((m, n))
    d[np.arange(min(m, n)), np.arange(min(m, n))] = np.arange(1, min(m, n) + 1)
    return x * 0.2 + d


def _cols(V):
    """Sign-free: each column times its own sum."""
    return V * V.sum(-2, keepdim=True)


# -- products (composites of mm / bmm / mul / sum) ------------------------------------------------
case("mv", lambda a, v: a.mv(v), normal(3, 4), normal(4), rep=True)
case("mv", lambda a, v: L.mv(a, v), normal(1, 2), normal(2))
case("dot", lambda a, b: a.dot(b), normal(4), normal(4))
case("dot", lambda a, b: L.dot(a, b), normal(1), normal(1))
case("vdot", lambda a, b: np.vdot(a, b), normal(2, 3), normal(6), tag="np")
case("vdot", lambda a, b: a.vdot(b), normal(3), normal(3))
case("outer", lambda a, b: a.outer(b), normal(3), normal(4))
case("outer", lambda a, b: np.outer(a, b), normal(2, 2), normal(1), tag="np")
case("ger", lambda a, b: a.ger(b), normal(2), normal(3))
case("addmm", lambda c, a, b: c.addmm(a, b), normal(3, 2), normal(3, 4), normal(4, 2), rep=True)
case("addmm", lambda c, a, b: L.addmm(c, a, b, beta=0.5, alpha=-2.0), normal(2), normal(3, 4),
     normal(4, 2), tag="beta-alpha-bcast")
case("addmm", lambda c, a, b: c.addmm(a, b, beta=0), normal(3, 2), normal(3, 4), normal(4, 2),
     nondiff=[0], tag="beta0")
case("addmv", lambda c, a, v: c.addmv(a, v, alpha=2), normal(3), normal(3, 4), normal(4))
case("addmv", lambda c, a, v: L.addmv(c, a, v, beta=3), normal(), normal(2, 2), normal(2))
case("addr", lambda c, a, b: c.addr(a, b, beta=0.5), normal(3, 4), normal(3), normal(4))
case("addr", lambda c, a, b: L.addr(c, a, b), normal(1, 4), normal(2), normal(4))
case("baddbmm", lambda c, a, b: c.baddbmm(a, b, alpha=0.5), normal(2, 3, 2), normal(2, 3, 4),
     normal(2, 4, 2), rep=True)
case("baddbmm", lambda c, a, b: L.baddbmm(c, a, b, beta=2), normal(3, 1), normal(2, 3, 4),
     normal(2, 4, 1))
case("addbmm", lambda c, a, b: c.addbmm(a, b), normal(3, 2), normal(2, 3, 4), normal(2, 4, 2))
case("addbmm", lambda c, a, b: L.addbmm(c, a, b, beta=-1, alpha=3), normal(2), normal(1, 3, 4),
     normal(1, 4, 2))
case("trace", lambda a: a.trace(), normal(3, 3), rep=True)
case("trace", lambda a: np.trace(a), normal(2, 4), tag="np-rect")
case("trace", lambda a: L.trace(a), normal(1, 1))
case("kron", lambda a, b: a.kron(b), normal(2, 3), normal(2, 2), rep=True)
case("kron", lambda a, b: np.kron(a, b), normal(3), normal(2), tag="np")
case("kron", lambda a, b: L.kron(a, b), normal(2, 1, 2), normal(3, 2), tag="rank-mix")
case("tensordot", lambda a, b: L.tensordot(a, b), normal(2, 3, 4), normal(3, 4, 2), rep=True)
case("tensordot", lambda a, b: np.tensordot(a, b, axes=([0, 2], [1, 0])), normal(2, 3, 4),
     normal(4, 2), tag="np-axes")
case("tensordot", lambda a, b: L.tensordot(a, b, 0), normal(2), normal(3), tag="outer")
case("tensordot", lambda a, b: np.dot(a, b), normal(2, 3, 4), normal(4, 2), tag="np.dot-3d")

# -- einsum (permute / view / mul / sum / mm / bmm) ---------------------------------------------
for _eq, _shapes in [
    ("ij,jk->ik", [(3, 4), (4, 2)]), ("bij,bjk->bik", [(2, 3, 4), (2, 4, 2)]),
    ("ii->i", [(3, 3)]), ("ii", [(3, 3)]), ("ij->", [(2, 3)]), ("ij->ji", [(2, 3)]),
    ("i,j->ij", [(2,), (3,)]), ("i,i->", [(4,), (4,)]), ("ij,ij->i", [(2, 3), (2, 3)]),
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (3, 4, 2)]), ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]),
    ("bii->b", [(2, 3, 3)]), ("iij->j", [(2, 2, 3)]), ("ijk,ikl->jl", [(2, 3, 4), (2, 4, 2)]),
    ("i,ij,j", [(2,), (2, 3), (3,)]), ("ab,cd->abcd", [(1, 2), (2, 1)]),
    ("ij,kj", [(2, 3), (4, 3)]), ("i->", [(1,)]), ("", [()]),
]:
    case("einsum", (lambda eq: lambda *xs: L.einsum(eq, *xs))(_eq), *[normal(*s) for s in _shapes],
         tag=_eq.replace("->", "_to_") or "scalar")
case("einsum", lambda a, b: np.einsum("ij,jk->ik", a, b) + np.einsum("ik->ik", a @ b), normal(3, 4),
     normal(4, 2), tag="np", rep=True)
case("einsum", lambda a: L.einsum("ij,jk->ik", a, np.ones((4, 2))), normal(3, 4), tag="ndarray")

# -- gj.linalg: inverse, determinants, solvers --------------------------------------------------
case("linalg_inv", lambda x: L.inv(_wc(x)), normal(3, 3), rep=True)
case("linalg_inv", lambda x: np.linalg.inv(_wc(x)), normal(2, 3, 3), tag="np-batched")
case("linalg_inv", lambda x: _wc(x).inverse(), normal(1, 1), tag="method")
case("linalg_det", lambda x: L.det(_wc(x)), normal(3, 3), rep=True)
case("linalg_det", lambda x: np.linalg.det(_wc(x)), normal(2, 2, 2), tag="np-batched")
case("linalg_det", lambda x: x.det(), normal(2, 2), tag="raw")
case("linalg_slogdet", lambda x: L.slogdet(_wc(x) * -1.0).logabsdet, normal(3, 3))
case("linalg_slogdet", lambda x: np.linalg.slogdet(_wc(x))[1] * np.linalg.slogdet(x)[0],
     normal(2, 2, 2), tag="np-batched")
case("logdet", lambda x: L.logdet(_spd(x)), normal(3, 3))
case("logdet", lambda x: _spd(x).logdet(), normal(2, 2, 2), tag="batched")
case("linalg_solve", lambda a, b: L.solve(_wc(a), b), normal(3, 3), normal(3, 2), rep=True)
case("linalg_solve", lambda a, b: L.solve(_wc(a), b), normal(3, 3), normal(3), tag="vector")
case("linalg_solve", lambda a, b: np.linalg.solve(_wc(a), b), normal(2, 3, 3), normal(3, 1),
     tag="np-bcast")
case("linalg_solve", lambda a, b: L.solve(_wc(a), b, left=False), normal(2, 2), normal(3, 2),
     tag="right")
case("linalg_cholesky", lambda x: L.cholesky(_spd(x)), normal(3, 3), rep=True)
case("linalg_cholesky", lambda x: np.linalg.cholesky(_spd(x)), normal(2, 3, 3), tag="np-batched")
case("linalg_cholesky", lambda x: _spd(x).cholesky(upper=True), normal(2, 2), tag="upper")
case("cholesky_solve", lambda x, b: L.cholesky_solve(b, L.cholesky(_spd(x))), normal(3, 3),
     normal(3, 2))
case("cholesky_solve", lambda x, b: b.cholesky_solve(L.cholesky(_spd(x), upper=True), upper=True),
     normal(2, 2, 2), normal(2, 2, 1), tag="upper-batched")
for _up, _left, _unit in [(False, True, False), (True, True, False), (False, False, False),
                          (True, False, True), (False, True, True)]:
    case("linalg_solve_triangular",
         (lambda up, left, unit: lambda a, b: L.solve_triangular(
             _wc(a), b, upper=up, left=left, unitriangular=unit))(_up, _left, _unit),
         normal(3, 3), normal(3, 2) if _left else normal(2, 3),
         tag=f"upper={_up}-left={_left}-unit={_unit}", rep=(_up, _left, _unit) == (True, False, True))
case("linalg_solve_triangular", lambda a, b: L.solve_triangular(_wc(a), b, upper=False),
     normal(2, 2, 2), normal(2, 1), tag="batched")

# -- factorisations --------------------------------------------------------------------------------
case("linalg_qr", lambda x: L.qr(_wc(x)).Q + L.qr(_wc(x)).R, normal(3, 3), rep=True)
case("linalg_qr", lambda x: np.linalg.qr(_sv(x))[0], normal(4, 2), tag="np-tall-Q")
case("linalg_qr", lambda x: L.qr(_sv(x)).R, normal(2, 4, 3), tag="batched-R")
# wide (m < n): A = [X | Y] with X the leading square block (full rank by _sv)
case("linalg_qr", lambda x: L.qr(_sv(x)).R + L.qr(_sv(x)).Q.sum(-1, keepdim=True), normal(2, 4),
     tag="wide", rep=True)
case("linalg_qr", lambda x: L.qr(_sv(x)).Q, normal(3, 5), tag="wide-Q")
case("linalg_qr", lambda x: np.linalg.qr(_sv(x))[1], normal(2, 2, 3), tag="np-wide-batched-R")
case("linalg_qr", lambda x: L.qr(_sv(x), mode="complete").R, normal(2, 3), tag="wide-complete")
case("linalg_eigh", lambda x: L.eigh(_sym(x)).eigenvalues, normal(3, 3), tag="values")
case("linalg_eigh", lambda x: _cols(L.eigh(_sym(x)).eigenvectors), normal(3, 3), tag="vectors",
     rep=True)
case("linalg_eigh", lambda x: _cols(np.linalg.eigh(_sym(x))[1]) + np.linalg.eigvalsh(_sym(x))[..., None],
     normal(2, 3, 3), tag="np-batched")
case("linalg_eigh", lambda x: L.eigh(_sym(x), UPLO="U").eigenvalues, normal(2, 2), tag="upper")
case("linalg_svd", lambda x: L.svd(_sv(x)).S, normal(3, 3), tag="S")
case("linalg_svd", lambda x: (L.svd(_sv(x), full_matrices=False).U * np.arange(1.0, 3.0))
     @ L.svd(_sv(x), full_matrices=False).Vh, normal(4, 2), tag="UV-tall", rep=True)
case("linalg_svd", lambda x: _cols(L.svd(_sv(x), full_matrices=False).U)
     + L.svd(_sv(x), full_matrices=False).S, normal(2, 4), tag="U-wide")
case("linalg_svd", lambda x: _cols(np.linalg.svd(_sv(x), full_matrices=False)[2]), normal(2, 4),
     tag="np-Vh-wide")
case("linalg_svd", lambda x: _cols(np.linalg.svd(_sv(x), full_matrices=False)[2].mT), normal(4, 2),
     tag="np-V-tall")
case("linalg_svd", lambda x: L.svdvals(_sv(x)), normal(2, 3, 2), tag="batched-S")
# full_matrices: the leading k = min(m, n) columns of U (rows of Vh) and S, as torch
case("linalg_svd", lambda x: _cols(L.svd(_sv(x)).U[..., :2]) + L.svd(_sv(x)).S
     + L.svd(_sv(x)).Vh.sum(), normal(4, 2), tag="full-tall", rep=True)
case("linalg_svd", lambda x: _cols(np.linalg.svd(_sv(x))[2][..., :2, :].mT)
     * np.linalg.svd(_sv(x))[1][..., None, :], normal(2, 2, 3), tag="np-full-wide-batched")
case("linalg_pinv", lambda x: L.pinv(_sv(x)), normal(3, 2), rep=True)
case("linalg_pinv", lambda x: np.linalg.pinv(_sv(x)), normal(2, 3), tag="np-wide")
case("linalg_pinv", lambda x: _wc(x).pinverse(), normal(2, 2, 2), tag="batched")
case("lstsq", lambda a, b: L.lstsq(_sv(a), b).solution, normal(4, 2), normal(4, 3))
case("lstsq", lambda a, b: L.lstsq(_sv(a), b).residuals, normal(4, 2), normal(4), tag="residuals")
case("lstsq", lambda a, b: np.linalg.lstsq(_sv(a), b)[0], normal(2, 3), normal(2), tag="np-wide")

# -- norms ----------------------------------------------------------------------------------------
for _ord in ["fro", "nuc", 2, -2, 1, -1, np.inf, -np.inf]:
    case("matrix_norm", (lambda o: lambda x: L.matrix_norm(_sv(x), o))(_ord), normal(3, 2),
         tag=f"ord={_ord}")
case("matrix_norm", lambda x: L.matrix_norm(_sv(x), 1, dim=(0, 2), keepdim=True), normal(2, 3, 2),
     tag="dims-keepdim")
case("matrix_norm", lambda x: np.linalg.norm(_sv(x), "nuc", axis=(-2, -1)), normal(2, 3, 2),
     tag="np-batched")
case("matrix_norm", lambda x: np.linalg.norm(_sv(x), 2), normal(3, 3), tag="np")
case("vector_norm", lambda x: L.vector_norm(x, 3, dim=1), normal(3, 4), tag="p=3")
case("vector_norm", lambda x: L.vector_norm(x) + L.norm(x, 1), normal(2, 3), tag="all")
case("vector_norm", lambda x: np.linalg.vector_norm(x, axis=0, keepdims=True), normal(3, 2), tag="np")
