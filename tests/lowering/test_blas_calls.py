"""Matmuls in generated CPU code: which BLAS helper each shape gets, and that each gives
NumPy's product (C and transposed operands, empty and one-row/one-column shapes)."""
import numpy as np
import pytest

import gradjit as gj
from gradjit.lowering import codegen_cpu


def _source(f, *args):
    return gj.jit(f).graphs(*args)[2]


@pytest.mark.parametrize("m, k, n, helper", [
    (2048, 4, 1, "bl.mm("),   # one column of a large matrix: gemm (gemv was no faster)
    (1, 4, 2048, "bl.mm("),   # one row: the same
    (6, 5, 1, "bl.mm("),
    (3, 1, 4, "bl.outer("),   # outer product: the cached rank-1 helper, no BLAS call
    (4, 5, 3, "bl.mm("),
    (1, 8, 32, "bl.smm("),    # a row times a small matrix (an RNN step): a loop nest
    (1, 32, 32, "bl.smm("),
    (1, 64, 16, "bl.mm("),    # k > n: BLAS is faster
    (1, 40, 40, "bl.mm("),    # more than SMALL_ROW elements
])
def test_helper_by_shape(m, k, n, helper, rng):
    a, b = rng.normal(size=(m, k)), rng.normal(size=(k, n))
    assert helper in _source(lambda x, y: x @ y, a, b)
    np.testing.assert_allclose(gj.jit(lambda x, y: x @ y)(a, b), a @ b, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_small_row_product_matches_numpy_for_every_layout(dtype, rng):
    import numba

    from gradjit.lowering.blas_cpu import smm

    @numba.njit
    def call(x, y):   # smm has no Python entry: generated code calls it
        return smm(x, y)
    a = rng.normal(size=(1, 8)).astype(dtype)
    b = rng.normal(size=(8, 32)).astype(dtype)
    tol = 1e-14 if dtype == np.float64 else 1e-6
    wide = rng.normal(size=(3, 16, 64)).astype(dtype)
    for x, y in [(a, b), (a, np.asfortranarray(b)), (a, b.T.copy().T),
                 (wide[1, 4:5, ::8], wide[2, ::2, ::2])]:   # strided views
        got = call(x, y)
        assert got.dtype == dtype and got.flags.c_contiguous
        np.testing.assert_allclose(got, x @ y, rtol=tol, atol=tol)
    assert call(np.ones((1, 0), dtype), np.ones((0, 5), dtype)).tolist() == [[0.0] * 5]


def test_outer_product_fuses_into_its_consumer(rng):
    # dW += h.T @ dz in an unrolled RNN's backward: one pass, no product temporary; exactly
    # that is the cached rank-1 update (lowering/codegen_cpu_outer.py), anything more a loop
    a, b, c = rng.normal(size=(5, 1)), rng.normal(size=(1, 4)), rng.normal(size=(5, 4))
    src = _source(lambda a, b, c: c + a @ b, a, b, c)
    assert "= bl.ger(v0.T, v1, v2)" in src and "for i" not in src   # (the column as a row)
    src = _source(lambda a, b, c: c + 2.0 * (a @ b), a, b, c)
    assert "bl." not in src and src.count("for i1 in") == 1
    assert "h0 = v0[i0, 0]" in src   # the column's element is read once per row
    np.testing.assert_allclose(gj.jit(lambda a, b, c: c + 2.0 * (a @ b))(a, b, c),
                               c + 2.0 * (a @ b), rtol=1e-14)
    np.testing.assert_allclose(gj.jit(lambda a, b, c: c + a @ b)(a, b, c), c + a @ b, rtol=1e-14)
    g = gj.grad(lambda a, b, c: ((c + a @ b) ** 2).sum(), argnums=(0, 1))(a, b, c)
    r = 2 * (c + a @ b)
    np.testing.assert_allclose(g[0], r @ b.T, rtol=1e-12)
    np.testing.assert_allclose(g[1], a.T @ r, rtol=1e-12)


def test_small_transposes_are_copied_only_where_a_loop_reads_them(rng):
    """BLAS reads a transposed view in place; the row loop nest of a small product (smm)
    and elementwise loops get a C copy (codegen_cpu_stmt.py)."""
    w, h = rng.normal(size=(32, 32)), rng.normal(size=(4, 32))
    src = _source(lambda h, w: h @ w.T, h, w)                  # (4, 32) @ (32, 32): gemm
    assert "bl.mm(" in src and "al.contiguous(" not in src and ".T  #" in src
    r = rng.normal(size=(1, 32))
    src = _source(lambda r, w: r @ w.T, r, w)                  # a row: the loop nest
    assert "bl.smm(" in src and "al.contiguous(v1.T)" in src
    for f, args in ((lambda h, w: h @ w.T, (h, w)), (lambda r, w: r @ w.T, (r, w)),
                    (lambda h, w: (h @ w.T) * w.T[:4], (h, w))):
        np.testing.assert_allclose(gj.jit(f)(*args), f(*args), rtol=1e-12)
    g = gj.grad(lambda h, w: ((h @ w.T) ** 2).sum(), argnums=(0, 1))(h, w)
    p = 2 * (h @ w.T)
    np.testing.assert_allclose(g[0], p @ w, rtol=1e-12)
    np.testing.assert_allclose(g[1], p.T @ h, rtol=1e-12)


def test_gemv_with_large_transposed_and_empty_operands(rng):
    big = codegen_cpu.SMALL_TRANSPOSE + 1           # its transpose stays an F view
    x = rng.normal(size=(big, 2)).astype(np.float32)
    r = rng.normal(size=(big, 1)).astype(np.float32)
    src = _source(lambda x, r: x.T @ r, x, r)
    assert "bl.mm(" in src and ".T  #" in src          # the view, not a copy
    np.testing.assert_allclose(gj.jit(lambda x, r: x.T @ r)(x, r), x.T @ r, rtol=1e-4)
    np.testing.assert_allclose(gj.jit(lambda x, r: r.T @ x)(x, r), r.T @ x, rtol=1e-4)
    e = rng.normal(size=(0, 3))
    assert gj.jit(lambda e, v: e @ v)(e, rng.normal(size=(3, 1))).shape == (0, 1)


def test_batched_products_and_permutes_call_cached_helpers(rng):
    """A batched matmul's gradient writes each batch's product in place (bl.mm_into) and
    permutes through al.transpose: no array assignment or np.transpose with axes in the
    generated module (Numba compiles those into every module: 5-7 s for (5, 4, 4))."""
    a = rng.normal(size=(5, 4, 4))
    src = gj.grad(lambda a: (a @ a).sum()).graphs(a)[2]
    assert "bl.mm_into(" in src and "al.transpose(" in src
    assert "np.transpose(" not in src and "] = bl." not in src
    g = gj.grad(lambda a: (a @ a).sum())(a)
    o, at = np.ones_like(a), np.swapaxes(a, 1, 2)
    np.testing.assert_allclose(g, o @ at + at @ o, rtol=1e-12)


def test_batched_linalg_results_are_assigned_through_a_helper(rng):
    a = rng.normal(size=(3, 4, 4)) + 4 * np.eye(4)
    f = (lambda a: np.linalg.inv(a).sum())
    src = gj.grad(f).graphs(a)[2]
    assert "al.assign(" in src
    inv = np.linalg.inv(a)
    want = -np.swapaxes(inv, 1, 2) @ np.ones_like(a) @ np.swapaxes(inv, 1, 2)
    np.testing.assert_allclose(gj.grad(f)(a), want, rtol=1e-10)


@pytest.mark.parametrize("name,f", [
    ("solve", lambda a, b: np.linalg.solve(a, b).sum()),
    ("slogdet", lambda a, b: np.linalg.slogdet(a)[1] + b.sum()),
    ("cholesky", lambda a, b: (np.linalg.cholesky(a @ a.T) * b[:, None]).sum()),
    ("solve_triangular", lambda a, b: (np.linalg.solve(np.triu(a), b) * b).sum()),
])
def test_lapack_calls_are_cached_helpers_not_inline_numpy(rng, name, f):
    """Each np.linalg call of generated code goes through linalg_cpu (compiled once per
    machine), none inline; the gradients are still NumPy's (central differences)."""
    a = rng.normal(size=(4, 4)) + 4 * np.eye(4)
    b = rng.normal(size=4)
    src = gj.grad(f, argnums=(0, 1)).graphs(a, b)[2]
    assert "np.linalg." not in src and "la." in src
    ga, gb = gj.grad(f, argnums=(0, 1))(a, b)
    for x, g, i in ((a, ga, 0), (b, gb, 1)):
        fd = np.zeros_like(x)
        for idx in np.ndindex(x.shape):
            e = np.zeros_like(x)
            e[idx] = 1e-6
            args_p, args_m = [a, b], [a, b]
            args_p[i], args_m[i] = x + e, x - e
            fd[idx] = (f(*args_p) - f(*args_m)) / 2e-6
        np.testing.assert_allclose(g, fd, rtol=1e-5, atol=1e-7)


def test_triangular_solve_goes_through_its_helper(rng):
    a = rng.normal(size=(4, 4)) + 4 * np.eye(4)
    b = rng.normal(size=(4, 2))
    for left in (True, False):
        f = (lambda a, b, left=left: gj.linalg.solve_triangular(
            a, b if left else b.T, upper=True, left=left, unitriangular=not left).sum())
        assert "la.solve_triangular_" + ("left" if left else "right") in gj.grad(f).graphs(a, b)[2]
        t = np.triu(a, 0 if left else 1) + (0 if left else np.eye(4))
        want = np.linalg.solve(t, b) if left else np.linalg.solve(t.T, b).T
        np.testing.assert_allclose(gj.jit(f)(a, b), want.sum(), rtol=1e-12)


def test_linalg_functions_of_arrays_only_say_so():
    for f in (lambda: gj.linalg.solve(np.eye(2), np.ones(2)),
              lambda: gj.linalg.solve_triangular(np.eye(2), np.ones((2, 1)), upper=True)):
        with pytest.raises(TypeError, match="linalg.solve.*no gradjit tensor among the arguments"):
            f()
