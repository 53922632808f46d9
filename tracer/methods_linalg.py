"""Matrix products and tensor methods of the linear-algebra family (mixed into ``ArrayOps``).

Contract
- Free functions (torch names; also ``gj.linalg.*`` and, where NumPy has the
  name, ``np.*`` through ``__array_function__``): ``mv``, ``dot``, ``vdot``,
  ``outer`` / ``ger``, ``addmm``, ``addmv``, ``addr``, ``baddbmm``,
  ``addbmm``, ``trace``, ``kron``, ``tensordot``. ``LinalgMethods`` gives
  ``Tensor`` and ``Tracer`` the same as methods, plus ``inverse``, ``det``,
  ``logdet``, ``slogdet``, ``cholesky``, ``cholesky_solve``, ``pinverse``
  (delegating to ``tracer/linalg.py``).
- All are composites of ops with derivative formulas (none records an op of
  its own): products are ``matmul`` (``mm`` / ``bmm`` + ``view`` / ``expand``),
  ``outer`` is a broadcast ``mul``, the ``add*`` family is
  ``beta * input + alpha * product`` (``beta == 0`` ignores ``input``, NaNs
  included, as torch), ``trace`` is ``sum(A * I)`` with a constant identity,
  ``kron`` is a broadcast ``mul`` of interleaved unsqueezed operands then a
  ``view``, ``tensordot`` is ``permute`` / ``view`` / ``mm`` / ``view``.
- Shape errors are ``ShapeError``s naming the op, the shapes and the user's line.
"""
from __future__ import annotations

import numbers

import numpy as np

from gradjit.tracer.registry import ShapeError, user_site


def _fail(op, msg, *xs):
    shapes = " and ".join(str(tuple(x.shape)) for x in xs)
    raise ShapeError(f"{op}: {msg} (shapes {shapes})", user_site())


def _obj(*xs):
    like = next((x for x in xs if hasattr(x, "_apply")), None)
    if like is None:
        raise TypeError(f"no gradjit tensor among the arguments {[type(x).__name__ for x in xs]}")
    return [x if hasattr(x, "_apply") else like._const(np.asarray(x)) for x in xs]


def _ndims(op, x, n, name):
    if x.ndim != n:
        _fail(op, f"expected {name} to be {n}-D, but got {x.ndim}-D", x)


def matmul(a, b):
    a, b = _obj(a, b)
    return a.matmul(b)


def mv(mat, vec):
    mat, vec = _obj(mat, vec)
    _ndims("mv", mat, 2, "mat")
    _ndims("mv", vec, 1, "vec")
    if mat.shape[1] != vec.shape[0]:
        _fail("mv", "size mismatch", mat, vec)
    return mat @ vec


def dot(a, b):
    a, b = _obj(a, b)
    if a.ndim != 1 or b.ndim != 1 or a.shape != b.shape:
        _fail("dot", "expected two 1-D tensors of the same size", a, b)
    return a @ b


def vdot(a, b):
    return dot(a, b)   # real dtypes: conj(a) == a


def outer(a, b):
    a, b = _obj(a, b)
    _ndims("outer", a, 1, "the first argument")
    _ndims("outer", b, 1, "the second argument")
    return a.unsqueeze(1) * b.unsqueeze(0)


ger = outer


def _axpby(op, inp, prod, beta, alpha):
    if not isinstance(beta, numbers.Number) or not isinstance(alpha, numbers.Number):
        raise TypeError(f"{op}: beta and alpha must be Python numbers")
    try:
        np.broadcast_shapes(tuple(inp.shape), tuple(prod.shape))
    except ValueError:
        _fail(op, "input cannot be broadcast to the product's shape", inp, prod)
    scaled = prod if alpha == 1 else prod * alpha
    if beta == 0:
        return scaled.expand(np.broadcast_shapes(tuple(inp.shape), tuple(prod.shape)))
    return (inp if beta == 1 else inp * beta) + scaled


def addmm(input, mat1, mat2, *, beta=1, alpha=1):
    input, mat1, mat2 = _obj(input, mat1, mat2)
    _ndims("addmm", mat1, 2, "mat1")
    _ndims("addmm", mat2, 2, "mat2")
    return _axpby("addmm", input, mat1 @ mat2, beta, alpha)


def addmv(input, mat, vec, *, beta=1, alpha=1):
    input, mat, vec = _obj(input, mat, vec)
    return _axpby("addmv", input, mv(mat, vec), beta, alpha)


def addr(input, vec1, vec2, *, beta=1, alpha=1):
    input, vec1, vec2 = _obj(input, vec1, vec2)
    return _axpby("addr", input, outer(vec1, vec2), beta, alpha)


def _bmm(op, b1, b2):
    _ndims(op, b1, 3, "batch1")
    _ndims(op, b2, 3, "batch2")
    if b1.shape[0] != b2.shape[0] or b1.shape[2] != b2.shape[1]:
        _fail(op, "batch1 and batch2 cannot be multiplied", b1, b2)
    return b1.bmm(b2)


def baddbmm(input, batch1, batch2, *, beta=1, alpha=1):
    input, batch1, batch2 = _obj(input, batch1, batch2)
    return _axpby("baddbmm", input, _bmm("baddbmm", batch1, batch2), beta, alpha)


def addbmm(input, batch1, batch2, *, beta=1, alpha=1):
    input, batch1, batch2 = _obj(input, batch1, batch2)
    return _axpby("addbmm", input, _bmm("addbmm", batch1, batch2).sum(0), beta, alpha)


def trace(a):
    (a,) = _obj(a)
    _ndims("trace", a, 2, "the input")
    m, n = a.shape
    return (a * a._const(np.eye(m, n, dtype=a.dtype))).sum()


def kron(a, b):
    a, b = _obj(a, b)
    nd = max(a.ndim, b.ndim)
    a = a.reshape((1,) * (nd - a.ndim) + tuple(a.shape))
    b = b.reshape((1,) * (nd - b.ndim) + tuple(b.shape))
    # a -> (a0, 1, a1, 1, ...), b -> (1, b0, 1, b1, ...): the product interleaves the dims
    ai = a.reshape(tuple(s for d in a.shape for s in (d, 1)))
    bi = b.reshape(tuple(s for d in b.shape for s in (1, d)))
    return (ai * bi).reshape(tuple(x * y for x, y in zip(a.shape, b.shape)))


def tensordot(a, b, dims=2):
    a, b = _obj(a, b)
    if isinstance(dims, numbers.Integral):
        if dims < 0 or dims > min(a.ndim, b.ndim):
            _fail("tensordot", f"dims={dims} out of range", a, b)
        da, db = list(range(a.ndim - dims, a.ndim)), list(range(dims))
    else:
        da, db = dims
        da = [da] if isinstance(da, numbers.Integral) else list(da)
        db = [db] if isinstance(db, numbers.Integral) else list(db)
        da = [d % a.ndim for d in da]
        db = [d % b.ndim for d in db]
    if len(da) != len(db) or any(a.shape[i] != b.shape[j] for i, j in zip(da, db)):
        _fail("tensordot", f"contracted dims {da} and {db} do not match", a, b)
    fa = [d for d in range(a.ndim) if d not in da]
    fb = [d for d in range(b.ndim) if d not in db]
    k = int(np.prod([a.shape[d] for d in da])) if da else 1
    m = int(np.prod([a.shape[d] for d in fa])) if fa else 1
    n = int(np.prod([b.shape[d] for d in fb])) if fb else 1
    a2 = a.permute(fa + da).reshape(m, k)
    b2 = b.permute(db + fb).reshape(k, n)
    return (a2 @ b2).reshape(tuple(a.shape[d] for d in fa) + tuple(b.shape[d] for d in fb))


def _linalg():
    from gradjit.tracer import linalg
    return linalg


class LinalgMethods:
    __slots__ = ()

    def mv(self, vec): return mv(self, vec)
    def dot(self, other): return dot(self, other)
    def vdot(self, other): return vdot(self, other)
    def outer(self, other): return outer(self, other)
    def ger(self, other): return outer(self, other)
    def kron(self, other): return kron(self, other)
    def trace(self): return trace(self)

    def addmm(self, mat1, mat2, *, beta=1, alpha=1):
        return addmm(self, mat1, mat2, beta=beta, alpha=alpha)

    def addmv(self, mat, vec, *, beta=1, alpha=1):
        return addmv(self, mat, vec, beta=beta, alpha=alpha)

    def addr(self, vec1, vec2, *, beta=1, alpha=1):
        return addr(self, vec1, vec2, beta=beta, alpha=alpha)

    def baddbmm(self, batch1, batch2, *, beta=1, alpha=1):
        return baddbmm(self, batch1, batch2, beta=beta, alpha=alpha)

    def addbmm(self, batch1, batch2, *, beta=1, alpha=1):
        return addbmm(self, batch1, batch2, beta=beta, alpha=alpha)

    def inverse(self): return _linalg().inv(self)
    def det(self): return _linalg().det(self)
    def logdet(self): return _linalg().logdet(self)
    def slogdet(self): return _linalg().slogdet(self)
    def pinverse(self): return _linalg().pinv(self)

    def cholesky(self, upper=False):
        return _linalg().cholesky(self, upper=upper)

    def cholesky_solve(self, L, upper=False):
        return _linalg().cholesky_solve(self, L, upper)
