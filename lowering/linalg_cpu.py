"""LAPACK calls for generated CPU code, compiled once per machine.

Contract
- ``inv``, ``det``, ``slogdet``, ``solve``, ``cholesky``, ``qr``, ``eigh``, ``pinv``,
  ``svd(a, full_matrices)``: NumPy's ``np.linalg`` functions of one matrix (Numba's
  implementations, so results are typed as Numba types them: ``inv`` / ``solve`` /
  ``pinv`` in Fortran order ..., see codegen_cpu_linalg.py's ``_LAYOUT``).
- ``solve_triangular_left(a, b, upper, unit)`` / ``solve_triangular_right(...)``: the
  solution of ``T x = b`` / ``x T = b`` for ``T`` the upper or lower triangle of ``a``
  (unit diagonal when ``unit``): ``np.linalg.solve`` on the masked triangle; the left
  form's result is Fortran-ordered, the right form's C-ordered.
- ``qr_complete(a)``: ``np.linalg.qr(a, mode='complete')`` of an (m, n) matrix, m > n
  (Numba's has only the reduced mode): the QR of A padded with zero columns to a
  square, R cut back to n columns. The padding's Householder reflectors are the
  identity (tau = 0 for a zero column), so Q is what LAPACK's orgqr makes from A's n
  reflectors: NumPy's Q.
- ``eigh_upper64(a)`` / ``eigh_upper32(a)``: ``np.linalg.eigh(a, UPLO='U')`` (Numba's has
  only 'L'), through Numba's own LAPACK entry, so the eigenvector signs are LAPACK's for
  the upper triangle, as NumPy's. Unlike Numba's eigh it does not check for NaN (NumPy
  returns NaNs, as this does).

Why helpers: written inline in a generated function, each ``np.linalg`` call is typed,
lowered and optimised again in every module that has one: about 1-3 s each, and
``solve`` first compiles Numba's formatted shape-mismatch message (about 3 s more in a
process). Here each compiles once per machine and signature (``cache=True``); not
inlined, so a generated module only calls it.
"""
from __future__ import annotations

import numba
import numpy as np

jit = numba.njit(cache=True, error_model="numpy")

# One function per call, written out: Numba's disk cache names a dispatcher's files by its
# qualified name and line, so wrappers made by one factory would share an index, and
# ``inv`` and ``det`` of one signature would load each other's code.


@jit
def inv(a):
    return np.linalg.inv(a)


@jit
def det(a):
    return np.linalg.det(a)


@jit
def slogdet(a):
    return np.linalg.slogdet(a)


@jit
def solve(a, b):
    return np.linalg.solve(a, b)


@jit
def cholesky(a):
    return np.linalg.cholesky(a)


@jit
def qr(a):
    return np.linalg.qr(a)


@jit
def eigh(a):
    return np.linalg.eigh(a)


@jit
def pinv(a, rcond):
    return np.linalg.pinv(a, rcond)


@jit
def svd(a, full_matrices):
    return np.linalg.svd(a, full_matrices=full_matrices)


@jit
def _triangle(a, upper, unit):
    n = a.shape[-1]
    t = np.zeros((n, n), a.dtype)
    for i in range(n):
        for j in range(i, n) if upper else range(i + 1):
            t[i, j] = a[i, j]
        if unit:
            t[i, i] = 1
    return t


@jit
def solve_triangular_left(a, b, upper, unit):
    return np.linalg.solve(_triangle(a, upper, unit), b)


@jit
def solve_triangular_right(a, b, upper, unit):
    # x T = b  <=>  T' x' = b'
    return np.ascontiguousarray(np.linalg.solve(_triangle(a, upper, unit).T.copy(),
                                                np.ascontiguousarray(b.T)).T)


@jit
def qr_complete(a):
    m, n = a.shape
    pad = np.zeros((m, m), a.dtype)
    for i in range(m):   # (a loop: an array assignment compiles Numba's formatted error)
        for j in range(n):
            pad[i, j] = a[i, j]
    q, r = np.linalg.qr(pad)
    return q, np.ascontiguousarray(r[:, :n])


def _xxxevd(dtype):
    """Numba's own LAPACK entry for ``np.linalg.eigh`` (a symbol of its helper library,
    resolved by name, so generated code that calls it still caches): Numba's
    ``np.linalg.eigh`` fixes ``uplo`` to 'L'; this one takes it."""
    t = numba.from_dtype(np.dtype(dtype))
    return numba.types.ExternalFunction("numba_ez_xxxevd", numba.types.intc(
        numba.types.char, numba.types.char, numba.types.char, numba.types.intp,
        numba.types.CPointer(t), numba.types.intp, numba.types.CPointer(t)))


def _eigh_upper(dtype, kind):
    evd = _xxxevd(dtype)

    @numba.njit(cache=True, error_model="numpy")
    def eigh_upper(a):
        """``np.linalg.eigh(a, UPLO='U')`` of a square matrix: LAPACK's ``syevd`` on the
        upper triangle, so the eigenvectors' signs are NumPy's for 'U' (they differ from
        'L''s). Eigenvectors in Fortran order, as Numba's eigh."""
        n = a.shape[-1]
        v = a.T.copy().T               # a Fortran-order copy: LAPACK overwrites it
        w = np.empty(n, a.dtype)
        if evd(kind, 86, 85, n, v.ctypes, n, w.ctypes) != 0:   # jobz 'V', uplo 'U'
            raise ValueError("eigh: LAPACK syevd did not converge")
        return w, v
    return eigh_upper


# generated code calls la.eigh_upper64 / la.eigh_upper32 (codegen_cpu_linalg.py)
eigh_upper64, eigh_upper32 = _eigh_upper(np.float64, ord("d")), _eigh_upper(np.float32, ord("s"))
