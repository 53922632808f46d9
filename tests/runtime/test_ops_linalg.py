"""The linear-algebra family beyond gradchecks: values against NumPy, dtypes, errors.

Gradients (first and second order, tensor mode and ``gj.grad``) are checked in
``cases_linalg.py``; here: forward values of every function and einsum spelling
against NumPy, float32 kept (interpreted and compiled, batched LAPACK loop),
and errors that name the op, the shapes and the user's line.
"""
from __future__ import annotations

import numpy as np
import pytest

import gradjit as gj
from tests.marks import SLOW_NUMBA
from tests.fd import numerical_grad

L = gj.linalg
_rng = np.random.default_rng(3)
A = _rng.standard_normal((3, 3)) + 3 * np.eye(3)
S = A @ A.T
B = _rng.standard_normal((3, 2))
R = _rng.standard_normal((4, 3))
a, s, b, r = map(gj.tensor, (A, S, B, R))


@pytest.mark.parametrize("name, got, want", [
    ("inv", lambda: L.inv(a), lambda: np.linalg.inv(A)),
    ("det", lambda: L.det(a), lambda: np.linalg.det(A)),
    ("slogdet", lambda: L.slogdet(-a).logabsdet, lambda: np.linalg.slogdet(-A)[1]),
    ("logdet", lambda: L.logdet(s), lambda: np.log(np.linalg.det(S))),
    ("solve", lambda: L.solve(a, b), lambda: np.linalg.solve(A, B)),
    ("cholesky", lambda: L.cholesky(s), lambda: np.linalg.cholesky(S)),
    ("cholesky_solve", lambda: L.cholesky_solve(b, L.cholesky(s)), lambda: np.linalg.solve(S, B)),
    ("solve_triangular", lambda: L.solve_triangular(a, b, upper=True),
     lambda: np.linalg.solve(np.triu(A), B)),
    ("qr", lambda: L.qr(r).R, lambda: np.linalg.qr(R)[1]),
    ("eigh", lambda: L.eigh(s).eigenvalues, lambda: np.linalg.eigh(S)[0]),
    ("svd", lambda: L.svd(r, full_matrices=False).S, lambda: np.linalg.svd(R)[1]),
    ("pinv", lambda: L.pinv(r), lambda: np.linalg.pinv(R)),
    ("lstsq", lambda: L.lstsq(r, gj.tensor(np.arange(8.0).reshape(4, 2))).solution,
     lambda: np.linalg.lstsq(R, np.arange(8.0).reshape(4, 2), rcond=None)[0]),
    ("matrix_norm-nuc", lambda: L.matrix_norm(r, "nuc"), lambda: np.linalg.norm(R, "nuc")),
    ("matrix_norm-inf", lambda: L.matrix_norm(r, np.inf), lambda: np.linalg.norm(R, np.inf)),
    ("matrix_norm--1", lambda: L.matrix_norm(r, -1), lambda: np.linalg.norm(R, -1)),
    ("kron", lambda: L.kron(a, r), lambda: np.kron(A, R)),
    ("tensordot", lambda: L.tensordot(r, a, ([1], [0])), lambda: np.tensordot(R, A, ([1], [0]))),
    ("trace", lambda: L.trace(r), lambda: np.trace(R)),
    ("addmm", lambda: L.addmm(gj.tensor(B[0]), a, b, beta=0.5, alpha=2),
     lambda: 0.5 * B[0] + 2 * A @ B),
])
def test_values_match_numpy(name, got, want, interpreted):
    np.testing.assert_allclose(np.asarray(got().data), want(), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("eq, shapes", [
    ("ij,jk->ik", [(2, 3), (3, 4)]), ("ii->i", [(3, 3)]), ("ii", [(3, 3)]),
    ("...ij,...jk", [(2, 1, 2, 3), (4, 3, 2)]), ("ijk->kji", [(2, 3, 4)]),
    ("ij,ij,ij->", [(2, 3), (2, 3), (2, 3)]), ("i,j,k->ijk", [(2,), (3,), (1,)]),
    ("iji->j", [(2, 3, 2)]), ("bij,bkj->bik", [(2, 3, 4), (2, 5, 4)]), ("a,a->a", [(1,), (3,)]),
    (" ij , jk ", [(2, 3), (3, 4)]),
])
def test_einsum_matches_numpy(eq, shapes, interpreted):
    xs = [_rng.standard_normal(s) for s in shapes]
    want = np.einsum(eq, *[np.broadcast_to(x, np.broadcast_shapes(*[s for s in shapes]))
                           if eq == "a,a->a" else x for x in xs])
    np.testing.assert_allclose(np.asarray(L.einsum(eq, *map(gj.tensor, xs)).data), want,
                               rtol=1e-12, atol=1e-12)
    got = gj.jit(lambda *a: np.einsum(eq, *a))(*xs)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("args", [
    ((2, 3), [0, 1], (3, 4), [1, 2], [0, 2]), ((2, 3), [0, 1], (3, 4), [1, 2]),
    ((3, 3), (0, 1), (1, 0)), ((3, 3), [0, 0]), ((2, 2, 3), [Ellipsis, 1], (3, 4), [1, 2]),
    ((2, 3), [0, 1], (3, 3), [1, 2], (3, 4), [2, 3], [0, 3]), ((2, 3), [0, 51], [51]),
], ids=str)
def test_einsum_sublist_form(args, interpreted):
    """np.einsum(a, [0, 1], b, [1, 2], [0, 2]): values as NumPy's, gradients as central
    differences of NumPy's, w.r.t. every operand."""
    xs = [_rng.standard_normal(args[k]) for k in range(0, 2 * (len(args) // 2), 2)]

    def f(*ops):
        call = []
        for k, x in enumerate(ops):
            call += [x, args[2 * k + 1]]
        return np.einsum(*call, *args[2 * len(ops):])
    np.testing.assert_allclose(gj.jit(f)(*xs), f(*xs), rtol=1e-12, atol=1e-12)
    w = _rng.standard_normal(np.shape(f(*xs)))
    grads = gj.grad(lambda *a: (f(*a) * w).sum(), argnums=tuple(range(len(xs))))(*xs)
    for k, x in enumerate(xs):
        num = numerical_grad(lambda *a: f(*a) * w, xs, k)
        np.testing.assert_allclose(grads[k], num, rtol=1e-6, atol=1e-8)


def test_einsum_sublist_form_implicit_output_in_integer_order(interpreted):
    a = _rng.standard_normal((2, 3))
    for labels in ([30, 0], [26, 25], [51, 0]):   # NumPy: 0-25 are 'A'-'Z', 26-51 'a'-'z'
        np.testing.assert_array_equal(gj.jit(lambda x: np.einsum(x, labels))(a),
                                      np.einsum(a, labels))


def test_einsum_sublist_form_errors(interpreted):
    with pytest.raises(ValueError, match="sublist form must be an integer"):
        gj.jit(lambda a: np.einsum(a, [0, "i"]))(np.ones((2, 2)))
    with pytest.raises(TypeError, match="list of integer labels"):
        gj.jit(lambda a: np.einsum(a, 0))(np.ones(2))


@pytest.mark.parametrize("executor", ["numpy", SLOW_NUMBA])
def test_float32_stays_float32_batched(executor, monkeypatch):
    if executor == "numpy":
        monkeypatch.setenv("GRADJIT_EXECUTOR", "numpy")
    else:
        monkeypatch.delenv("GRADJIT_EXECUTOR", raising=False)
    a = (_rng.standard_normal((2, 3, 3)) * 0.3 + 3 * np.eye(3)).astype(np.float32)
    b = _rng.standard_normal((2, 3, 2)).astype(np.float32)

    def f(a, b):
        return (L.inv(a).sum() + L.slogdet(a)[1].sum() + L.solve(a, b).sum()
                + L.eigh(a + a.mT)[0].sum() + L.det(a).sum())

    value, (ga, gb) = gj.value_and_grad(f, argnums=(0, 1))(a, b)
    assert value.dtype == np.float32 and ga.dtype == np.float32 and gb.dtype == np.float32
    monkeypatch.setenv("GRADJIT_EXECUTOR", "numpy")
    ra, rb = gj.grad(f, argnums=(0, 1))(a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_allclose(ga, ra, rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(gb, rb, rtol=1e-3, atol=1e-3)


def test_errors_name_op_shapes_and_line(interpreted):
    x = gj.tensor(np.ones((2, 3)))
    with pytest.raises(gj.ShapeError, match=r"linalg_inv: expected a batch of square matrices "
                                            r"\(\*, n, n\), got shape \(2, 3\)") as e:
        L.inv(x)
    assert "test_ops_linalg.py" in str(e.value)
    with pytest.raises(gj.ShapeError, match=r"einsum\('ij,jk->ik'\): label 'j' has sizes 3 and 2"):
        L.einsum("ij,jk->ik", x, gj.tensor(np.ones((2, 2))))
    with pytest.raises(gj.ShapeError, match=r"einsum\('ij->ik'\): output label 'k'"):
        L.einsum("ij->ik", x)
    with pytest.raises(gj.ShapeError, match=r"mv: size mismatch \(shapes \(2, 3\) and \(2,\)\)"):
        x.mv(gj.tensor(np.ones(2)))
    with pytest.raises(gj.ShapeError, match=r"linalg.solve: batch dims"):
        L.solve(gj.tensor(np.ones((2, 3, 3))), gj.tensor(np.ones((3, 3, 1))))
    with pytest.raises(TypeError, match="linalg_det: expected a floating point tensor"):
        L.det(gj.tensor(np.ones((2, 2), np.int64)))
    with pytest.raises(gj.GradjitError, match=r"linalg.qr: mode='raw' is not supported for "
                                              r"shape \(3, 2\)"):
        L.qr(x.mT, mode="raw")


def test_singular_det_forward_and_logdet_of_negative(interpreted):
    assert L.det(gj.tensor(np.zeros((2, 2)))).item() == 0.0
    assert np.isnan(L.logdet(gj.tensor(-np.eye(3))).item())       # det < 0: NaN, as torch
    s, l = L.slogdet(gj.tensor(-np.eye(3)))
    assert s.item() == -1.0 and l.item() == 0.0


def test_vector_norm_ord_0_is_differentiable_with_zero_gradient(interpreted):
    """As torch: the count of nonzeros requires grad (it was a bool sum, detached); its
    gradient is zero. NaN counts as nonzero; a negative ord is sum(|x|^ord)^(1/ord)."""
    t = gj.tensor(np.array([[1.0, 0.0, -2.0], [np.nan, 0.0, 0.0]]), requires_grad=True)
    n = L.vector_norm(t, ord=0, dim=1)
    assert n.requires_grad
    np.testing.assert_array_equal(n.detach().numpy(), [2.0, 1.0])
    n.sum().backward()
    np.testing.assert_array_equal(t.grad.numpy(), np.zeros((2, 3)))
    v = gj.tensor(np.array([1.0, -2.0, 4.0]), requires_grad=True)
    L.vector_norm(v, ord=-1).backward()
    want = numerical_grad(lambda x: np.linalg.norm(x, -1), [v.detach().numpy()], 0)
    np.testing.assert_allclose(v.grad.numpy(), want, rtol=1e-6)


def test_qr_mode_r_and_module_tensordot(interpreted):
    """torch's qr(mode='r'): (empty Q, reduced R) (it was refused); gj.tensordot was missing."""
    for shape in ((4, 3), (2, 3, 5)):
        x = _rng.standard_normal(shape)
        Q, R_ = L.qr(gj.tensor(x), mode="r")
        assert Q.shape == (0,)
        np.testing.assert_allclose(R_.numpy(), L.qr(gj.tensor(x)).R.numpy())
    t = gj.tensor(R, requires_grad=True)
    L.qr(t, mode="r").R.sum().backward()
    t2 = gj.tensor(R, requires_grad=True)
    L.qr(t2).R.sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), t2.grad.numpy())
    x, y = _rng.standard_normal((2, 3, 4)), _rng.standard_normal((4, 3, 5))
    got = gj.tensordot(gj.tensor(x), gj.tensor(y), dims=([1, 2], [1, 0]))
    np.testing.assert_allclose(got.numpy(), np.tensordot(x, y, axes=([1, 2], [1, 0])))
    z = _rng.standard_normal((3, 4, 2))   # (a NumPy array beside a tensor: a constant)
    np.testing.assert_allclose(gj.tensordot(gj.tensor(x), z, 2).numpy(), np.tensordot(x, z, 2))


def test_module_cdist_as_torch(interpreted):
    # (only gj.nn.functional.cdist existed; torch.cdist is a module function)
    a, b = np.array([[0.0, 1.0], [2.0, 2.0]]), np.array([[1.0, 1.0], [0.0, 0.0], [3.0, 4.0]])
    want = np.sqrt(((a[:, None] - b[None]) ** 2).sum(-1))
    np.testing.assert_allclose(gj.cdist(gj.tensor(a), gj.tensor(b)).numpy(), want)
    np.testing.assert_allclose(gj.cdist(gj.tensor(a), gj.tensor(b), p=1).numpy(),
                               np.abs(a[:, None] - b[None]).sum(-1))
