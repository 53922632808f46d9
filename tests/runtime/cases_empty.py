"""Gradcheck cases with size-0 (empty) inputs or outputs, one or more per op family.

Imported by ``test_ops_gradcheck.py``: every case runs first and second order in
tensor mode and ``gj.grad`` against float64 central differences, and against
torch where it is importable (``test_torch_oracle.py``). Every case is tagged
``empty`` (select them with ``-k empty``). Shapes are (0,), (0, 3), (3, 0),
(2, 0, 4) and zero batch / inner / outer matrix dims.

The informative cases are those where an empty tensor meets a non-empty one:
the non-empty input's gradient is then a real array of zeros (broadcast
against an empty operand, expanded to size 0, sliced or indexed to nothing,
multiplied through a zero inner dimension) or carries values past the empty
part (cat with empty parts). Cases whose output would be NaN or infinite
(mean of nothing, logsumexp of nothing) are kept out of this table, whose
finite differences would be NaN too; ``test_empty.py`` checks those values and
the errors of reductions without identity (amax / max / min of nothing).
"""
from __future__ import annotations

import sys

import numpy as np

import gradjit as gj
from tests.runtime.cases import away, case, distinct, normal, pos

_NO_INDEX = np.zeros(0, dtype=np.int64)


def _torch(x):
    """torch when ``x`` is a torch tensor (the oracle runs these cases on torch), else None."""
    return sys.modules["torch"] if type(x).__module__.startswith("torch") else None


def _lib(x):
    """The module spelling cat / stack / linalg / where for ``x``: torch's or gradjit's."""
    return _torch(x) or gj


def _idx(x, index):
    t = _torch(x)
    return t.as_tensor(index) if t else index


def _wc(a):
    """0.3 a + 3 I: well conditioned (torch's eye for torch tensors)."""
    t, n = _torch(a), a.shape[-1]
    return a * 0.3 + (t.eye(n, dtype=a.dtype) if t else np.eye(n)) * 3.0


def _einsum(eq, *xs):
    t = _torch(xs[0])
    return t.einsum(eq, *xs) if t else gj.linalg.einsum(eq, *xs)


def _e(name, fn, *specs, rep=False, tag=""):
    case(name, fn, *specs, rep=rep, tag=f"empty{'-' + tag if tag else ''}")


# -- elementwise: unary, binary, broadcasting against an empty operand ---------------------------
_e("exp", lambda x: x.exp(), normal(0))
_e("tanh", lambda x: np.tanh(x), normal(2, 0, 4))
_e("sigmoid", lambda x: x.sigmoid(), normal(3, 0))
_e("abs", lambda x: abs(x), away(0, 3))
_e("log", lambda x: x.log(), pos(0, 3))
_e("add.Tensor", lambda x, y: x + y, normal(0, 3), normal(3), tag="bcast")
_e("mul.Tensor", lambda x, y: x * y, normal(2, 0, 4), normal(0, 1), tag="bcast")
_e("div.Tensor", lambda x, y: x / y, normal(0, 3), pos(1, 3), tag="bcast")
_e("pow.Tensor_Tensor", lambda x, y: x ** y, pos(3, 0), normal(3, 1), tag="bcast")
_e("where.self", lambda x, y: _lib(x).where(x > 0, x, y * y), normal(0, 3), normal(3), tag="bcast")
# one graph per family runs compiled as well (rep=True): elementwise + broadcast + reductions
_e("composite", lambda x, y: (x.exp() * y).sum(0) + y.tanh() + (x * x).sum(), normal(0, 3),
   normal(3), rep=True, tag="elementwise")

# -- reductions: sum of nothing is 0, prod of nothing is 1, dims of size 0 survive ---------------
_e("sum", lambda x: x.sum(), normal(0, 3))
_e("sum.dim_IntList", lambda x: x.sum(0), normal(0, 3))
_e("sum.dim_IntList", lambda x: x.sum(1, keepdim=True), normal(3, 0), tag="keepdim")
_e("sum.dim_IntList", lambda x: x.sum((0, 2)), normal(2, 0, 4), tag="dims")
_e("mean.dim", lambda x: x.mean(0), normal(3, 0))
_e("prod", lambda x: x.prod(), normal(0))
_e("prod.dim_int", lambda x: x.prod(1), normal(3, 0))
_e("amax", lambda x: x.amax(1), distinct(0, 3))
_e("amin", lambda x: x.amin(-1), distinct(2, 0, 4))
_e("max.dim", lambda x: x.max(dim=1)[0], distinct(0, 3))
_e("logsumexp", lambda x: x.logsumexp(1), normal(0, 3))
_e("_softmax", lambda x: x.softmax(1), normal(3, 0))
_e("_log_softmax", lambda x: x.log_softmax(0), normal(0, 3))
_e("cumsum", lambda x: x.cumsum(0), normal(0, 3))
_e("cumprod", lambda x: x.cumprod(1), normal(3, 0))
_e("sort", lambda x: x.sort(dim=1)[0], distinct(3, 0))
_e("linalg_vector_norm", lambda x: _lib(x).linalg.vector_norm(x, dim=1), normal(0, 3))
_e("linalg_vector_norm", lambda x: _lib(x).linalg.vector_norm(x, 1, dim=0), normal(0, 3),
   tag="ord1")
_e("composite", lambda x, y: x.sum(1) * y + x.softmax(-1).sum(-1) + x.prod(1),
   normal(3, 0), normal(3), rep=True, tag="reductions")

# -- shape ops: views, expand to and from size 0 -------------------------------------------------
_e("view", lambda x: x.reshape(3, 0), normal(0, 3))
_e("view", lambda x: x.reshape(-1), normal(2, 0, 4), tag="flatten")
_e("permute", lambda x: x.permute(2, 0, 1), normal(2, 0, 4))
_e("transpose", lambda x: x.mT, normal(3, 0))
_e("expand", lambda x: x.expand(0, 3), normal(1, 3), tag="to-empty")
_e("expand", lambda x: x.expand(2, 0, 4), normal(0, 1), tag="from-empty")
_e("unsqueeze", lambda x: x.unsqueeze(1).squeeze(1), normal(0))
_e("flip", lambda x: x.flip(0), normal(0, 3))
_e("repeat", lambda x: gj.repeat(x, 2, 1), normal(0, 3))
_e("repeat", lambda x: gj.repeat(x, 0, 1), normal(2, 3), tag="zero-times")

# -- indexing: slices and index arrays that select nothing ----------------------------------------
_e("slice.Tensor", lambda x: x[2:1], normal(3, 4), tag="nothing")
_e("slice.Tensor", lambda x: x[1:], normal(3, 0))
_e("select.int", lambda x: x[0], normal(3, 0))
_e("narrow", lambda x: x.narrow(1, 1, 0), normal(2, 3))
_e("index.Tensor", lambda x: x[_idx(x, _NO_INDEX)], normal(3, 4))
_e("index.Tensor", lambda x: x[:, _idx(x, np.array([0, 0]))], normal(0, 3), tag="of-empty")
_e("index_select", lambda x: x.index_select(1, _idx(x, _NO_INDEX)), normal(2, 3))
_e("gather", lambda x: x.gather(1, _idx(x, np.zeros((2, 0), np.int64))), normal(2, 3))
_e("masked_select", lambda x: x[_idx(x, np.zeros((2, 3), bool))], normal(2, 3))
_e("composite", lambda x: (x[2:1].sum(0) + x[_idx(x, _NO_INDEX)].sum(0)
                           + x.narrow(0, 1, 0).sum(0) + x[0]),
   normal(3, 4), rep=True, tag="indexing")

# -- cat / stack with empty parts ------------------------------------------------------------------
_e("cat", lambda x, y: _lib(x).cat([x, y, x], 0), normal(0, 3), normal(2, 3))
_e("cat", lambda x, y: np.concatenate([y, x], 1), normal(2, 0), normal(2, 3), tag="np-dim1")
_e("cat", lambda x, y: _lib(x).cat([x, y]), normal(0, 3), normal(0, 3), tag="all-empty")
_e("stack", lambda x, y: _lib(x).stack([x, y], 1), normal(0, 3), normal(0, 3))
_e("composite", lambda x, y: _lib(x).cat([x, y * 2.0, x], 0).exp(), normal(0, 3), normal(2, 3),
   rep=True, tag="cat")

# -- matmul with a zero inner / outer / batch dim -----------------------------------------------
_e("mm", lambda a, b: a @ b, normal(3, 0), normal(0, 4), tag="inner")
_e("mm", lambda a, b: a @ b, normal(0, 3), normal(3, 4), tag="outer-rows")
_e("mm", lambda a, b: a @ b, normal(3, 4), normal(4, 0), tag="outer-cols")
_e("mm", lambda a, b: a @ b, normal(0, 3), normal(3, 0), tag="both-outer")
_e("mv", lambda a, v: a.mv(v), normal(3, 0), normal(0))
_e("dot", lambda a, b: a.dot(b), normal(0), normal(0))
_e("bmm", lambda a, b: a @ b, normal(2, 3, 0), normal(2, 0, 4), tag="inner")
_e("bmm", lambda a, b: a @ b, normal(0, 3, 2), normal(0, 2, 4), tag="batch")
_e("einsum", lambda a, b: _einsum("ij,jk->ik", a, b), normal(3, 0), normal(0, 4))
_e("linear", lambda x, w, b: _lib(x).nn.functional.linear(x, w, b), normal(0, 3), normal(4, 3),
   normal(4))
_e("composite", lambda a, b, c: (a @ b).tanh() + c @ (b.mT @ b), normal(3, 0), normal(0, 4),
   normal(3, 4), rep=True, tag="matmul")

# -- linear algebra on an empty batch --------------------------------------------------------------
_e("linalg_inv", lambda x: _lib(x).linalg.inv(x), normal(0, 3, 3))
_e("linalg_det", lambda x: _lib(x).linalg.det(x), normal(0, 2, 2))
_e("linalg_solve", lambda a, b: _lib(a).linalg.solve(a, b), normal(0, 3, 3), normal(0, 3, 2))
_e("linalg_solve", lambda a, b: _lib(a).linalg.solve(_wc(a), b), normal(3, 3),
   normal(3, 0), tag="no-rhs")
_e("linalg_solve_triangular", lambda a, b: _lib(a).linalg.solve_triangular(_wc(a), b, upper=True),
   normal(2, 3, 3), normal(2, 3, 0), tag="no-rhs")
_e("linalg_qr", lambda x: _lib(x).linalg.qr(x).R, normal(0, 3, 2))
_e("linalg_svd", lambda x: _lib(x).linalg.svdvals(x), normal(3, 0))
_e("composite", lambda x, a: (_lib(x).linalg.qr(x).Q.sum() + _lib(x).linalg.svdvals(x).sum()
                              + _lib(a).linalg.solve(_wc(a), x).sum(-1)),
   normal(3, 0), normal(3, 3), rep=True, tag="linalg")
