"""The linear-algebra family: matrix factorisations and solvers (``gj.linalg``).

Contract
- Each op is declared here once (schema = its ``derivatives.yaml`` ``name:``
  line) with its shape/dtype rule and NumPy reference; conventions as in
  ``tracer/ops.py``. All are ``kernel`` ops: the CPU code generator emits one
  LAPACK call per matrix (``lowering/codegen_cpu_linalg.py``), looping over
  leading batch dims.
- Inputs are float32 / float64 matrices ``(*, m, n)`` (square where the math
  needs it); results keep the input dtype. Batch dims of two-operand ops must
  already match: the front end (``tracer/linalg.py``) broadcasts them with
  ``expand`` first, and turns a vector right-hand side into a column.
- ``linalg_qr`` is the reduced QR, ``linalg_qr.complete`` NumPy's mode='complete' (the
  front end uses it for m > n only: Q is (m, m), R (m, n); not differentiable, as in
  torch); ``linalg_svd`` the reduced SVD, or with
  ``full_matrices`` (set by the front end for non-square inputs only) the full
  ``U`` (m, m) and ``Vh`` (n, n); ``linalg_eigh`` reads the lower triangle (as
  NumPy's default ``UPLO='L'``; ``upper``: the upper one, and LAPACK's eigenvector
  signs for it, which differ; CUDA's Jacobi reads the triangle, its signs are its own); ``linalg_solve_triangular`` reads only the
  triangle named by ``upper`` (and not the diagonal when ``unitriangular``).
- Composites spelled in the front end with these and the core ops (no op of
  their own): logdet, cholesky_solve, lstsq, matrix_norm, vector_norm, and the
  products mv, dot, vdot, outer/ger, addmm, addmv, addr, baddbmm, addbmm,
  trace, kron, tensordot, einsum (``tracer/methods_linalg.py``).
"""
from __future__ import annotations

import numpy as np

from gradjit.tracer import lazy_scipy
from gradjit.tracer.ops import _types_str
from gradjit.tracer.registry import ShapeError, defop, user_site

_SOLVE_TRIANGULAR = lazy_scipy.linalg("solve_triangular")

K = "kernel"


def _check(op, types, square=True, rank=2):
    for t in types:
        dt = np.dtype(t.dtype)
        if dt.kind != "f":
            raise TypeError(f"{op}: expected a floating point tensor, but got dtype {dt.name} "
                            f"(inputs: {_types_str(types)})")
        if len(t.shape) < rank or (square and t.shape[-1] != t.shape[-2]):
            what = "square matrices" if square else "matrices"
            raise ShapeError(f"{op}: expected a batch of {what} (*, n, n), got shape "
                             f"{tuple(t.shape)} (inputs: {_types_str(types)})", user_site())
    if len({np.dtype(t.dtype) for t in types}) > 1:
        raise TypeError(f"{op}: expected all inputs to have the same dtype, got "
                        f"{_types_str(types)}")
    return np.dtype(types[0].dtype)


def _batched(fn, empty):
    """Apply a 2-D function over leading batch dims (tuples of results stacked);
    ``empty(*arrays)`` is the result of an empty batch (no matrix to call ``fn`` on)."""
    def impl(*arrays, **kw):
        a0 = arrays[0]
        if a0.ndim == 2:
            return fn(*arrays, **kw)
        if a0.size == 0:
            return empty(*arrays)
        batch = a0.shape[:-2]
        nb = int(np.prod(batch))   # not -1: ambiguous for an empty operand
        flat = [a.reshape((nb,) + a.shape[-2:]) for a in arrays]
        outs = [fn(*xs, **kw) for xs in zip(*flat)]
        if isinstance(outs[0], tuple):
            return tuple(np.stack([o[k] for o in outs]).reshape(batch + np.shape(outs[0][k]))
                         for k in range(len(outs[0])))
        return np.stack(outs).reshape(batch + np.shape(outs[0]))
    return impl


def _same_infer(op):
    def infer(types, attrs):
        dt = _check(op, types)
        return [(tuple(types[0].shape), dt)]
    return infer


defop("linalg_inv(Tensor A) -> Tensor", K, _same_infer("linalg_inv"), np.linalg.inv)


def _det_infer(types, attrs):
    dt = _check("linalg_det", types)
    return [(tuple(types[0].shape[:-2]), dt)]


defop("linalg_det(Tensor A) -> Tensor", K, _det_infer, lambda a: np.asarray(np.linalg.det(a)))


def _slogdet_infer(types, attrs):
    dt = _check("linalg_slogdet", types)
    b = tuple(types[0].shape[:-2])
    return [(b, dt), (b, dt)]


def _slogdet(a):
    s, l = np.linalg.slogdet(a)
    return np.asarray(s), np.asarray(l)


defop("linalg_slogdet(Tensor A) -> (Tensor sign, Tensor logabsdet)", K, _slogdet_infer, _slogdet)


def _solve_infer(op):
    def infer(types, attrs):
        a, b = types
        dt = _check(op, [a])
        _check(op, [b], square=False)
        if tuple(a.shape[:-2]) != tuple(b.shape[:-2]) or b.shape[-2] != a.shape[-1]:
            raise ShapeError(f"{op}: A {tuple(a.shape)} and B {tuple(b.shape)} do not match "
                             f"(A is (*, n, n), B is (*, n, k) with the same batch dims)",
                             user_site())
        if np.dtype(b.dtype) != dt:
            raise TypeError(f"{op}: expected A and B to have the same dtype, got "
                            f"{_types_str(types)}")
        return [(tuple(b.shape), dt)]
    return infer


defop("linalg_solve(Tensor A, Tensor B) -> Tensor", K, _solve_infer("linalg_solve"),
      np.linalg.solve)
defop("linalg_cholesky(Tensor self) -> Tensor", K, _same_infer("linalg_cholesky"),
      np.linalg.cholesky)


def _tri_solve(a, b, upper, left, unitriangular):
    if not left:   # X A = B  <=>  A^T X^T = B^T
        return _tri_solve(a.T, b.T, not upper, True, unitriangular).T
    return _SOLVE_TRIANGULAR(a, b, lower=not upper, unit_diagonal=unitriangular)


def _tri_infer(types, attrs):
    a, b = types
    op = "linalg_solve_triangular"
    dt = _check(op, [a])
    _check(op, [b], square=False)
    n = b.shape[-2] if attrs["left"] else b.shape[-1]
    if tuple(a.shape[:-2]) != tuple(b.shape[:-2]) or n != a.shape[-1]:
        raise ShapeError(f"{op}: A {tuple(a.shape)} and B {tuple(b.shape)} do not match "
                         f"(left={attrs['left']})", user_site())
    return [(tuple(b.shape), dt)]


defop("linalg_solve_triangular(Tensor self, Tensor B, *, bool upper, bool left=True, "
      "bool unitriangular=False) -> Tensor", K, _tri_infer,
      _batched(_tri_solve, lambda a, b: np.empty(b.shape, np.result_type(a, b))))


def _qr_infer(types, attrs):
    dt = _check("linalg_qr", types, square=False)
    *b, m, n = types[0].shape
    k = min(m, n)
    return [(tuple(b) + (m, k), dt), (tuple(b) + (k, n), dt)]


defop("linalg_qr(Tensor A) -> (Tensor Q, Tensor R)", K, _qr_infer,
      lambda a: tuple(np.linalg.qr(a, mode="reduced")))


def _qr_complete_infer(types, attrs):
    dt = _check("linalg_qr.complete", types, square=False)
    *b, m, n = types[0].shape
    return [(tuple(b) + (m, m), dt), (tuple(b) + (m, n), dt)]


defop("linalg_qr.complete(Tensor A) -> (Tensor Q, Tensor R)", K, _qr_complete_infer,
      lambda a: tuple(np.linalg.qr(a, mode="complete")))


def _eigh_infer(types, attrs):
    dt = _check("linalg_eigh", types)
    s = tuple(types[0].shape)
    return [(s[:-1], dt), (s, dt)]


defop("linalg_eigh(Tensor self, bool upper=False) -> (Tensor eigenvalues, Tensor eigenvectors)", K,
      _eigh_infer, lambda a, upper: tuple(np.linalg.eigh(a, "U" if upper else "L")))


def _svd_infer(types, attrs):
    dt = _check("linalg_svd", types, square=False)
    *b, m, n = types[0].shape
    k = min(m, n)
    b = tuple(b)
    if attrs["full_matrices"]:
        return [(b + (m, m), dt), (b + (k,), dt), (b + (n, n), dt)]
    return [(b + (m, k), dt), (b + (k,), dt), (b + (k, n), dt)]


defop("linalg_svd(Tensor A, bool full_matrices=False) -> (Tensor U, Tensor S, Tensor Vh)", K,
      _svd_infer, lambda a, full_matrices: tuple(np.linalg.svd(a, full_matrices=full_matrices)))


def _pinv_infer(types, attrs):
    dt = _check("linalg_pinv", types, square=False)
    s = tuple(types[0].shape)
    return [(s[:-2] + (s[-1], s[-2]), dt)]


defop("linalg_pinv(Tensor self, float rcond=1e-15) -> Tensor", K, _pinv_infer,
      lambda a, rcond: np.linalg.pinv(a, rcond))
