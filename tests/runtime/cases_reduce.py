"""Gradcheck cases of the reduction family (tracer/ops_reduce.py, methods_reduce.py).

Imported by ``test_ops_gradcheck.py``: every case runs first and second order in
tensor mode and ``gj.grad``. Shapes cover dims, negative dims, keepdim, size-1
dims and 0-d inputs; ``distinct`` inputs keep amin/max/inf-norm away from ties;
prod gets inputs with one and with two exact zeros. One graph per group runs
compiled (``rep=True``).
"""
from __future__ import annotations

import numpy as np

from tests.runtime.cases import away, case, distinct, normal


def _with_zeros(k):
    """x with k entries of its first row set to exactly 0 (prod's special cases)."""
    def fn(x):
        mask = np.ones(x.shape)
        mask.reshape(-1)[:k] = 0.0
        return x * mask
    return fn


# amin / max / min
case("amin", lambda x: x.amin(), distinct(3, 4), tag="all")
case("amin", lambda x: x.amin(1), distinct(3, 4))
case("amin", lambda x: x.amin((0, 2), keepdim=True), distinct(2, 3, 4), tag="keepdim")
case("amin", lambda x: np.min(x, axis=-1), distinct(3, 4), tag="np.min")
case("amin", lambda x: np.amin(x), distinct(1, 5), tag="np.amin")
case("amin", lambda x: x.amin(), distinct(), tag="0d")
case("max", lambda x: x.max() + x.min(), distinct(3, 4), tag="all")
case("max", lambda x: np.max(x, axis=(0, 1)), distinct(2, 3, 2), tag="np-dims")

# prod, with and without zeros
case("prod", lambda x: x.prod(), away(3, 4))
case("prod", lambda x: x.prod(), normal())
case("prod", lambda x: np.prod(x), away(2, 3), tag="np")
case("prod", lambda x: x.prod(keepdim=True), away(2, 2), tag="keepdim")
case("prod.dim_int", lambda x: x.prod(1), away(3, 4))
case("prod.dim_int", lambda x: x.prod(-1, keepdim=True), away(2, 3, 2), tag="keepdim")
case("prod.dim_int", lambda x: np.prod(x, axis=0), away(1, 4), tag="np")
case("prod.dim_int", lambda x: x.prod(0), normal(), tag="0d")
case("prod", lambda x: _with_zeros(1)(x).prod(), away(2, 3), tag="one-zero")
case("prod", lambda x: _with_zeros(2)(x).prod(), away(2, 3), tag="two-zeros")
case("prod.dim_int", lambda x: _with_zeros(1)(x).prod(1), away(2, 3), tag="one-zero")
case("prod.dim_int", lambda x: _with_zeros(2)(x).prod(1), away(2, 3), tag="two-zeros")

# var / std (+ _mean)
case("var", lambda x: x.var(unbiased=True), normal(3, 4))
case("var", lambda x: x.var(1, keepdim=True), normal(3, 4), tag="dim")
case("var", lambda x: x.var((0, 2), unbiased=False), normal(2, 3, 4), tag="biased")
case("var", lambda x: np.var(x, axis=0, ddof=1), normal(4, 2), tag="np-ddof")
case("var", lambda x: np.var(x), normal(1, 5), tag="np")
case("std", lambda x: x.std(-1, unbiased=True), normal(3, 4))
case("std", lambda x: x.std(correction=0), normal(2, 3), tag="correction")
case("std", lambda x: np.std(x, axis=1, keepdims=True), normal(3, 4), tag="np")
case("var_mean", lambda x: x.var_mean(1)[0] * x.var_mean(1)[1], normal(3, 4))
case("std_mean", lambda x: x.std_mean(0, keepdim=True)[0] + x.std_mean()[1], normal(3, 4))

# logsumexp
case("logsumexp", lambda x: x.logsumexp(1), normal(3, 4))
case("logsumexp", lambda x: x.logsumexp(), normal(2, 3), tag="all")
case("logsumexp", lambda x: x.logsumexp((0, 2), keepdim=True), normal(2, 3, 2), tag="keepdim")
case("logsumexp", lambda x: (x * 30.0).logsumexp(-1), normal(2, 4), tag="large")
case("logsumexp", lambda x: x.logsumexp(0), normal(), tag="0d")

# norms
for _p, _kind in [(2, normal), (1, away), (float("inf"), distinct), (float("-inf"), distinct),
                  (3, away), (0.5, away)]:
    case("linalg_vector_norm", (lambda p: lambda x: x.norm(p, 1))(_p), _kind(3, 4), tag=f"p={_p}")
    case("linalg_vector_norm", (lambda p: lambda x: x.norm(p))(_p), _kind(2, 3), tag=f"p={_p}")
case("linalg_vector_norm", lambda x: x.norm(), normal(2, 3), tag="fro")
case("linalg_vector_norm", lambda x: x.norm("fro", (0, 1), keepdim=True), normal(2, 3, 2),
     tag="fro-dims")
case("linalg_vector_norm", lambda x: np.linalg.norm(x, axis=-1), normal(3, 4), tag="np")
case("linalg_vector_norm", lambda x: np.linalg.norm(x), normal(3, 4), tag="np-all")
case("linalg_vector_norm", lambda x: x.norm(), away(), tag="0d")

# nansum, cumsum
case("nansum", lambda x: x.nansum() + np.nansum(x, axis=0).sum(), normal(3, 4))
case("nansum", lambda x: np.nansum(np.log(x), axis=1), normal(3, 4), tag="with-nan")
case("cumsum", lambda x: x.cumsum(1), normal(3, 4))
case("cumsum", lambda x: x.cumsum(0), normal(3, 2, 2), tag="dim0")
case("cumsum", lambda x: np.cumsum(x, axis=-1), normal(2, 3, 4), tag="np")
case("cumsum", lambda x: np.cumsum(x), normal(2, 3), tag="np-flat")
case("cumsum", lambda x: x.cumsum(0), normal(), tag="0d")
case("cumsum", lambda x: x.cumsum(0) * x, normal(1), tag="size1")

# cumprod (with exact zeros), logcumsumexp, cummax / cummin
case("cumprod", lambda x: x.cumprod(1), away(3, 4))
case("cumprod", lambda x: x.cumprod(0), away(3, 2, 2), tag="dim0")
case("cumprod", lambda x: np.cumprod(x, axis=-1), normal(2, 3), tag="np")
case("cumprod", lambda x: np.cumprod(x), away(2, 3), tag="np-flat")
case("cumprod", lambda x: x.cumprod(0), normal(), tag="0d")
case("cumprod", lambda x: _with_zeros(1)(x).cumprod(1), away(2, 4), tag="one-zero")
case("cumprod", lambda x: _with_zeros(2)(x).cumprod(1), away(2, 4), tag="two-zeros")
case("cumprod", lambda x: (_with_zeros(1)(x) + 0.0).cumprod(0), away(3, 2), tag="zero-dim0")
case("logcumsumexp", lambda x: x.logcumsumexp(1), normal(3, 4))
case("logcumsumexp", lambda x: x.logcumsumexp(0), normal(3, 2, 2), tag="dim0")
case("logcumsumexp", lambda x: (x * 20.0).logcumsumexp(-1), normal(2, 4), tag="large")
case("logcumsumexp", lambda x: x.logcumsumexp(0), normal(), tag="0d")
case("cummax", lambda x: x.cummax(1)[0], distinct(3, 4))
case("cummax", lambda x: x.cummax(0)[0] * x, distinct(3, 2), tag="dim0")
case("cummax", lambda x: x.cummax(0)[0], distinct(), tag="0d")
case("cummin", lambda x: x.cummin(-1)[0], distinct(2, 5))
case("cummin", lambda x: x.cummin(0)[0], distinct(4, 2), tag="dim0")

# sort and its composites: topk, kthvalue, median; dist
case("sort", lambda x: x.sort(dim=-1)[0], distinct(3, 4))
case("sort", lambda x: x.sort(dim=0, descending=True)[0] * x, distinct(3, 2), tag="desc")
case("sort", lambda x: np.sort(x, axis=0), distinct(2, 3, 2), tag="np")
case("sort", lambda x: np.sort(x), distinct(5), tag="np-1d")
case("sort", lambda x: x.sort(dim=0)[0], distinct(), tag="0d")
case("sort", lambda x: x.sort(dim=1)[0], distinct(3, 1), tag="size1")
case("topk", lambda x: x.topk(2)[0], distinct(3, 4))
case("topk", lambda x: x.topk(2, dim=0, largest=False)[0], distinct(3, 4), tag="smallest")
case("kthvalue", lambda x: x.kthvalue(2)[0], distinct(3, 4))
case("kthvalue", lambda x: x.kthvalue(1, 0, keepdim=True)[0], distinct(3, 2), tag="keepdim")
case("median", lambda x: x.median(), distinct(3, 4), tag="all")
case("median", lambda x: x.median(1)[0], distinct(3, 5))
case("median", lambda x: x.median(0, keepdim=True)[0], distinct(4, 2), tag="even")
case("median", lambda x: np.median(x, axis=1), distinct(2, 4), tag="np-even")
case("median", lambda x: np.median(x), distinct(3, 3), tag="np")
case("dist", lambda x, y: x.dist(y), normal(3, 4), normal(3, 4))
case("dist", lambda x, y: x.dist(y, 1), away(3, 4), normal(4), tag="p=1")
case("dist", lambda x, y: x.dist(y, 3), away(2, 3), normal(2, 3), tag="p=3")


def _reduce_all(x, d):
    return x.prod(1) + (x.cumsum(1) * x).sum(1) + d.amin(1)


case("reductions", _reduce_all, away(3, 4), distinct(3, 4), rep=True)


def _scans_all(x, d):
    return ((x.cumprod(1) + x.logcumsumexp(1)) * d.cummax(1)[0] + d.cummin(0)[0]
            + d.sort(dim=1)[0] * x + d.median(1, keepdim=True)[0])


case("scans", _scans_all, away(3, 4), distinct(3, 4), rep=True)
