"""NumPy's linear-algebra functions on traced values, with NumPy's own rules.

Contract
- ``NUMPY_FUNCTIONS`` maps ``np.linalg.*``, ``np.dot``, ``np.vdot``,
  ``np.inner``, ``np.outer``, ``np.cross``, ``np.trace``, ``np.kron``,
  ``np.tensordot`` and ``np.einsum`` to functions that follow NumPy (shapes,
  dtypes, which triangle is read), built on ``tracer/linalg.py`` and
  ``tracer/methods_linalg.py``. It reaches the protocol table as
  ``tracer/linalg.py``'s ``NUMPY_FUNCTIONS`` (``tracer/numpy_protocol.py``).
- Dtypes promote as NumPy's: every operand, traced or not, is cast to the
  ``np.result_type`` of all of them (Python scalars are weak, NEP 50), so
  ``solve(float64, float32)`` is float64. Factorisations and solvers work in
  floating point: integer and bool operands become float64, as NumPy's linalg
  casts them.
- ``eigh`` / ``eigvalsh`` read one triangle (``UPLO`` 'L', the default, or
  'U') and factorise the symmetric matrix it stands for
  (``tril(a) + tril(a, -1)^T``), so the gradient is zero on the unread
  triangle and matches finite differences of NumPy's function for any input
  (``gj.linalg.eigh`` keeps torch's gradient, the symmetric one).
- ``numpy_dot(a, b)`` is ``np.dot`` (and a traced array's ``.dot``): a 0-d
  operand multiplies; otherwise a sum over the last axis of ``a`` and the
  second-to-last of ``b`` (its only axis when 1-D), shape
  ``a.shape[:-1] + b.shape[:-2] + b.shape[-1:]``.
- ``cross``: 2- and 3-vectors along ``axisa`` / ``axisb`` (a 2-vector has z = 0),
  result vectors along ``axisc`` (``axis`` sets all three); two 2-vectors give
  the z-component alone, as NumPy.
- Everything is a composite of ops with derivative formulas (none records an op
  of its own), so first and higher derivatives come from those ops.
"""
from __future__ import annotations

import numbers

import numpy as np

from gradjit.tracer import linalg as L
from gradjit.tracer.dispatch import apply
from gradjit.tracer.einsum import sublist_form
from gradjit.tracer.methods_index import stack
from gradjit.tracer.methods_linalg import kron, tensordot
from gradjit.tracer.numpy_args import UnsupportedError
from gradjit.tracer.registry import GradjitError, ShapeError, user_site


def _is_obj(x):
    return hasattr(x, "_apply")


def _dtype_of(x):
    if _is_obj(x):
        return x.dtype
    if isinstance(x, (numbers.Number, np.bool_)) and not isinstance(x, np.generic):
        return x   # a Python scalar: weak in np.result_type (NEP 50)
    return np.asarray(x).dtype


def operands(*xs, floating=False):
    """``xs`` as gradjit values of NumPy's common dtype (float64 for integers when
    ``floating``: NumPy's linalg computes in floating point)."""
    like = next(x for x in xs if _is_obj(x))
    dt = np.result_type(*[_dtype_of(x) for x in xs])
    if floating and dt.kind != "f":
        dt = np.dtype(np.float64)
    out = [x if _is_obj(x) else like._const(np.asarray(x)) for x in xs]
    return [x if x.dtype == dt else x.to(dt) for x in out]


def _floating(fn):
    """``fn`` with its first argument cast to floating point (NumPy's linalg input rule)."""
    def wrapped(a, *args, **kwargs):
        return fn(operands(a, floating=True)[0], *args, **kwargs)
    wrapped.__name__ = getattr(fn, "__name__", "np_linalg")
    return wrapped


def _square(op, a):
    L._need(op, a)
    if a.shape[-1] != a.shape[-2]:
        raise ShapeError(f"{op}: last 2 dimensions of the array must be square, got shape "
                         f"{tuple(a.shape)}", user_site())


# -- factorisations and solvers --------------------------------------------------------------
def symmetric_from_triangle(a, UPLO="L"):
    """The symmetric matrix whose ``UPLO`` triangle is ``a``'s: what NumPy's eigh reads.
    Built with ``where`` (tril / triu), so the unread triangle never enters the values,
    not even as NaN times 0, and receives a zero gradient."""
    if UPLO not in ("L", "U"):
        raise ValueError(f"UPLO argument must be 'L' or 'U', got {UPLO!r}")
    if UPLO == "L":
        return a.tril() + a.tril(-1).mT
    return a.triu() + a.triu(1).mT


def eigh(a, UPLO="L"):
    (a,) = operands(a, floating=True)
    _square("np.linalg.eigh", a)
    return L.eigh(symmetric_from_triangle(a, UPLO), UPLO)   # (UPLO: LAPACK's signs for it)


def cholesky(a, upper=False):
    """NumPy reads one triangle (the lower; ``upper=True``: the upper), so the gradient is
    zero on the other, as finite differences of NumPy's function say."""
    _square("np.linalg.cholesky", a)
    return L.cholesky(symmetric_from_triangle(a, "U" if upper else "L"), upper=upper)


def _axis_arg(axis):
    """NumPy's norms take None, an int or a tuple (a list is refused, as NumPy does)."""
    if axis is not None and not isinstance(axis, (tuple, numbers.Integral)):
        raise TypeError(f"'axis' must be None, an integer or a tuple of integers, got "
                        f"{axis!r}\n  at {user_site()}")


def vector_norm(x, axis=None, keepdims=False, ord=2):
    _axis_arg(axis)
    if axis is not None:
        return L.vector_norm(x, ord, axis, keepdims)
    out = L.vector_norm(x.reshape(-1), ord)
    return out.reshape((1,) * x.ndim) if keepdims else out


def eigvalsh(a, UPLO="L"):
    return eigh(a, UPLO).eigenvalues


def solve(a, b):
    """NumPy 2: ``b`` is a vector only when 1-D (else a stack of matrices)."""
    a, b = operands(a, b, floating=True)
    _square("np.linalg.solve", a)
    return L.solve(a, b) if b.ndim == 1 else L._solve_mat(a, b)


def lstsq(a, b, rcond=None):
    """NumPy's lstsq: ``a`` 2-D, ``b`` 1-D or 2-D; the cutoff and the residuals' rule are
    ``tracer/linalg.py``'s (residuals of shape (k,) only for m > n and rank n: NumPy's
    empty array otherwise; while tracing a of rank < n, which is not known yet, gives NaN)."""
    a, b = operands(a, b, floating=True)
    for x, name in ((a, "a"), (b, "b")):
        if x.ndim > 2 or (x is a and x.ndim < 2):
            raise np.linalg.LinAlgError(
                f"np.linalg.lstsq: {x.ndim}-dimensional array given ({name} of shape "
                f"{tuple(x.shape)}). Array must be two-dimensional\n  at {user_site()}")
    res = L.lstsq(a, b, rcond)
    k = b.shape[-1] if b.ndim == 2 else 1
    residuals = res.residuals.reshape((k if res.residuals.shape[-1:] != (0,) else 0,))
    return res.solution, residuals, res.rank.astype(np.int32), res.singular_values


def svd(a, full_matrices=True, compute_uv=True, hermitian=False):
    (a,) = operands(a, floating=True)
    if hermitian:
        return _svd_hermitian(a, compute_uv)
    return L.svd(a, full_matrices) if compute_uv else L.svdvals(a)


def _svd_hermitian(a, compute_uv):
    """NumPy's ``hermitian=True``: from ``eigh`` (which reads the lower triangle only), the
    singular values |w| in descending order, the signs of w moved into ``Vh``."""
    if not compute_uv:
        return np.sort(np.abs(eigvalsh(a)), axis=-1)[..., ::-1]
    w, v = eigh(a)
    order = np.argsort(np.abs(w), axis=-1)[..., ::-1]
    s = np.take_along_axis(np.abs(w), order, -1)
    sign = np.take_along_axis(np.sign(w), order, -1)
    u = np.take_along_axis(v, order[..., None, :], -1)
    return L.SVDResult(u, s, np.swapaxes(u * sign[..., None, :], -1, -2))


_NO_RTOL = object()


def pinv(a, rcond=None, hermitian=False, *, rtol=_NO_RTOL):
    """NumPy's cutoff: singular values up to ``rcond`` (default 1e-15; ``rtol``: NumPy 2's
    spelling) times the largest count as zero. A non-hermitian matrix with one cutoff is the
    ``linalg_pinv`` op (its gradient follows the cutoff); others are built from ``svd`` as
    NumPy builds them."""
    (a,) = operands(a, floating=True)
    if rcond is None:
        rcond = 1e-15 if rtol is _NO_RTOL else (
            max(a.shape[-2:]) * np.finfo(a.dtype).eps if rtol is None else rtol)
    elif rtol is not _NO_RTOL:
        raise ValueError("`rtol` and `rcond` can't be both set.")
    if not hermitian and not hasattr(rcond, "_apply") and np.ndim(rcond) == 0 and rcond >= 0:
        return apply("linalg_pinv.default", [a], {"rcond": float(rcond)})
    u, s, vt = svd(a, full_matrices=False, hermitian=hermitian)
    cutoff = np.asarray(rcond)[..., None] * s.max(axis=-1, keepdims=True)
    large = s > cutoff
    inv = np.where(large, 1.0 / np.where(large, s, 1.0), 0.0)   # (no 1/0 on either side)
    return np.swapaxes(vt, -1, -2) @ (inv[..., None] * np.swapaxes(u, -1, -2))


def qr(a, mode="reduced"):
    (a,) = operands(a, floating=True)
    if mode == "r":
        return L.qr(a).R
    return L.qr(a, mode)


def norm(x, ord=None, axis=None, keepdims=False):
    (x,) = operands(x, floating=True)
    _axis_arg(axis)
    # NumPy: an ord with no axis means every axis, a vector's or a matrix's norm only
    if isinstance(axis, (tuple, list)) and len(axis) > 2 or (
            axis is None and ord is not None and x.ndim not in (1, 2)):
        raise ShapeError("Improper number of dimensions to norm.", user_site())
    if isinstance(axis, (tuple, list)) and len(axis) == 2 or (axis is None and x.ndim == 2
                                                              and ord is not None):
        return L.matrix_norm(x, "fro" if ord is None else ord, axis or (-2, -1), keepdims)
    if ord is not None and not isinstance(ord, str) and np.isfinite(ord) and ord <= 0:
        return _small_ord_norm(x, ord, axis, keepdims)
    if axis is None:
        out = L.vector_norm(x.reshape(-1), 2 if ord is None else ord)
        return out.reshape((1,) * x.ndim) if keepdims else out
    return L.vector_norm(x, 2 if ord is None else ord, axis, keepdims)


def _small_ord_norm(x, ord, axis, keepdims):
    """NumPy's vector norms of ord 0 (the count of nonzeros) and ord < 0
    (``sum(|x|**ord) ** (1/ord)``), which torch's vector_norm does not define."""
    flat = axis is None
    v = x.reshape(-1) if flat else x
    ax = None if flat else axis
    if ord == 0:
        out = (v != 0).astype(x.dtype).sum(axis=ax, keepdims=keepdims and not flat)
    else:
        out = ((abs(v) ** ord).sum(axis=ax, keepdims=keepdims and not flat)) ** (1.0 / ord)
    return out.reshape((1,) * x.ndim) if flat and keepdims else out


def multi_dot(arrays, *, out=None):
    if out is not None:
        raise GradjitError("np.linalg.multi_dot(..., out=...) is not supported on traced arrays",
                           user_site())
    if len(arrays) < 2:
        raise ValueError("Expecting at least two arrays.")
    xs = operands(*arrays)
    for i, x in enumerate(xs):
        ends = i in (0, len(xs) - 1)
        if x.ndim != 2 and not (ends and x.ndim == 1):
            raise ShapeError(f"np.linalg.multi_dot: array {i} has {x.ndim} dimensions (2 are "
                             f"needed; the first and last may be 1-D)", user_site())
    result = xs[0]
    for x in xs[1:]:
        result = result @ x
    return result


# -- products ---------------------------------------------------------------------------------
def _aligned(op, a, b, ia, ib):
    if a.shape[ia] != b.shape[ib]:
        raise ShapeError(f"{op}: shapes {tuple(a.shape)} and {tuple(b.shape)} not aligned: "
                         f"{a.shape[ia]} (dim {ia % a.ndim}) != {b.shape[ib]} "
                         f"(dim {ib % b.ndim})", user_site())


def numpy_dot(a, b, out=None):
    if out is not None:
        raise GradjitError("np.dot(..., out=...) is not supported on traced arrays", user_site())
    a, b = operands(a, b)
    if a.ndim == 0 or b.ndim == 0:
        return a * b
    _aligned("np.dot", a, b, -1, -2 if b.ndim > 1 else 0)
    if a.ndim == 1 or b.ndim <= 2:
        return a @ b   # matmul agrees with dot here (it differs only for a N-D, b >= 3-D)
    return tensordot(a, b, ([a.ndim - 1], [b.ndim - 2]))


def vdot(a, b):
    a, b = operands(a, b)
    if np.prod(a.shape) != np.prod(b.shape):
        raise ShapeError(f"np.vdot: vectors have different sizes (shapes "
                         f"{tuple(a.shape)} and {tuple(b.shape)})", user_site())
    return a.reshape(-1) @ b.reshape(-1)


def inner(a, b):
    a, b = operands(a, b)
    if a.ndim == 0 or b.ndim == 0:
        return a * b
    _aligned("np.inner", a, b, -1, -1)
    if b.ndim == 1:
        return a @ b
    if a.ndim == 1:
        return b @ a
    return tensordot(a, b, ([a.ndim - 1], [b.ndim - 1]))


def outer(a, b, out=None):
    if out is not None:
        raise GradjitError("np.outer(..., out=...) is not supported on traced arrays", user_site())
    a, b = operands(a, b)
    return a.reshape(-1).unsqueeze(1) * b.reshape(-1).unsqueeze(0)


def trace(a, offset=0, axis1=0, axis2=1, dtype=None, out=None):
    if out is not None:
        raise GradjitError("np.trace(..., out=...) is not supported on traced arrays", user_site())
    (a,) = operands(a)
    if a.ndim < 2:
        raise ValueError(f"np.trace: diag requires an array of at least two dimensions, got "
                         f"shape {tuple(a.shape)}")
    if dtype is not None:
        a = a.to(np.dtype(dtype))
    out = a.diagonal(int(offset), axis1, axis2).sum(-1)
    # (an integer sum is int64: the result is in dtype, as NumPy's, which sums in it)
    return out if dtype is None or out.dtype == np.dtype(dtype) else out.to(np.dtype(dtype))


def _component(v, i):
    return v.select(-1, i) if i < v.shape[-1] else None   # None: the z of a 2-vector, 0


def cross(a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
    a, b = operands(a, b)
    if axis is not None:
        axisa = axisb = axisc = axis
    if a.ndim < 1 or b.ndim < 1:
        raise ValueError("np.cross: at least one array has zero dimension")
    a, b = a.moveaxis(axisa, -1), b.moveaxis(axisb, -1)
    if a.shape[-1] not in (2, 3) or b.shape[-1] not in (2, 3):
        raise ValueError(f"np.cross: incompatible dimensions for cross product (dimension must "
                         f"be 2 or 3), got shapes {tuple(a.shape)} and {tuple(b.shape)} with "
                         f"the vector axis moved last")
    a0, a1, a2 = (_component(a, i) for i in range(3))
    b0, b1, b2 = (_component(b, i) for i in range(3))
    z = a0 * b1 - a1 * b0
    if a2 is None and b2 is None:
        return z   # two 2-vectors: the z-component alone (axisc plays no part, as NumPy)
    if a2 is None:
        x, y = a1 * b2, -(a0 * b2)
    elif b2 is None:
        x, y = -(a2 * b1), a2 * b0
    else:
        x, y = a1 * b2 - a2 * b1, a2 * b0 - a0 * b2
    out = stack([x, y, z], -1)
    return out.moveaxis(-1, axisc)


def _linalg_cross(x1, x2, /, *, axis=-1):
    a, b = operands(x1, x2)
    if a.shape[axis] != 3 or b.shape[axis] != 3:
        raise ValueError(f"np.linalg.cross: both input arrays must be (arrays of) 3-dimensional "
                         f"vectors, got shapes {tuple(a.shape)} and {tuple(b.shape)}")
    return cross(a, b, axis=axis)


def _linalg_outer(x1, x2, /):
    a, b = operands(x1, x2)
    if a.ndim != 1 or b.ndim != 1:
        raise ValueError(f"np.linalg.outer: input arrays must be one-dimensional, got shapes "
                         f"{tuple(a.shape)} and {tuple(b.shape)}")
    return outer(a, b)


def _np_einsum(subscripts, *operands, out=None, dtype=None, order="K", casting="safe",
               optimize=False):
    """np.einsum: ``optimize`` only chooses a contraction order (the result is the same);
    ``dtype`` casts the operands (a cast ``casting`` forbids raises NumPy's TypeError);
    ``out=`` and a non-default ``order`` are refused."""
    if out is not None or order not in ("K", "C", "A"):
        raise UnsupportedError("np.einsum(..., out=/order=) is not supported on traced arrays",
                               user_site())
    if not isinstance(subscripts, str):   # the sublist form: einsum(a, [0, 1], b, [1, 2])
        subscripts, operands = sublist_form((subscripts,) + operands)
    if dtype is not None:
        for i, o in enumerate(operands):   # NumPy's casting rule (default 'safe')
            have = o.dtype if hasattr(o, "_apply") else np.asarray(o).dtype
            if not np.can_cast(have, dtype, casting):
                raise TypeError(f"Iterator operand {i} dtype could not be cast from "
                                f"{have!r} to {np.dtype(dtype)!r} according to the rule "
                                f"{casting!r}\n  at {user_site()}")
        operands = [o.astype(dtype) if hasattr(o, "_apply") else np.asarray(o, dtype)
                    for o in operands]
    return L.einsum(subscripts, *operands)


NUMPY_FUNCTIONS = {
    np.linalg.inv: _floating(L.inv), np.linalg.det: _floating(L.det),
    np.linalg.slogdet: _floating(L.slogdet), np.linalg.solve: solve,
    np.linalg.cholesky: _floating(cholesky),
    np.linalg.qr: qr, np.linalg.eigh: eigh, np.linalg.eigvalsh: eigvalsh, np.linalg.svd: svd,
    np.linalg.pinv: pinv,
    np.linalg.lstsq: lstsq, np.linalg.norm: norm, np.linalg.multi_dot: multi_dot,
    np.linalg.matrix_norm: _floating(lambda x, keepdims=False, ord="fro": L.matrix_norm(
        x, ord, keepdim=keepdims)),
    np.linalg.vector_norm: _floating(vector_norm),
    np.linalg.cross: _linalg_cross, np.linalg.outer: _linalg_outer,
    np.linalg.trace: lambda x, /, *, offset=0, dtype=None: trace(x, offset, -2, -1, dtype),
    np.outer: outer, np.vdot: vdot, np.inner: inner, np.cross: cross, np.trace: trace,
    np.dot: numpy_dot, np.kron: kron,
    np.tensordot: lambda a, b, axes=2: tensordot(a, b, axes),
    np.einsum: _np_einsum,
}
