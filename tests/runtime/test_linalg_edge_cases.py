"""Linear-algebra edge cases: det at singular matrices, slogdet there, wide QR, full SVD.

Also batch_norm's running statistics under tracing (a functional-transform gap).

- ``det``'s gradient is the transposed adjugate at any matrix: checked against
  exact cofactors and finite differences at rank n-1 and rank n-2 (exact and
  rounded), zero and regular matrices, batched with regular ones, in tensor
  mode and ``gj.grad``, interpreted and compiled; second order (Hessian-vector
  products) at rank n-1 and rank <= n-2 (zero matrices) against finite differences of
  the adjugate. torch
  agrees when it differentiates with ``create_graph=True`` (its SVD path);
  its plain first-order path gives 0 at exactly singular inputs, which is not
  the derivative (``test_det_gradient_against_torch`` shows both).
- ``slogdet`` / ``logdet`` at an exactly singular matrix: sign 0, logabsdet
  -inf, a non-finite gradient (as torch) rather than an exception.
- ``qr`` of wide matrices and ``svd(full_matrices=True)`` of non-square ones
  against torch's gradients (finite differences: ``cases_linalg.py``).
"""
from __future__ import annotations

import numpy as np
import pytest

import gradjit as gj
from tests.fd import numerical_grad

pytestmark = pytest.mark.slow   # (pyproject.toml: the default run skips it; CI runs it)

L = gj.linalg
_rng = np.random.default_rng(11)


def _orth(n):
    return np.linalg.qr(_rng.standard_normal((n, n)))[0]


def _cofactor_t(A):
    """adj(A)' entry by entry: (-1)^(i+j) det(A without row i and column j)."""
    n = A.shape[-1]
    C = np.empty_like(A)
    for i in range(n):
        for j in range(n):
            minor = np.delete(np.delete(A, i, -2), j, -1)
            C[..., i, j] = (-1) ** (i + j) * (np.linalg.det(minor) if n > 1 else 1.0)
    return C


SINGULAR = {
    "rank2-exact": np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0]]),
    "rank1-exact": np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [3.0, 6.0, 9.0]]),
    "rank2-rounded": _orth(3) @ np.diag([2.0, 0.5, 0.0]) @ _orth(3),
    "rank1-rounded": _orth(3) @ np.diag([1.5, 0.0, 0.0]) @ _orth(3),
    "zero-column": np.array([[1.0, 0.0, 2.0], [3.0, 0.0, -1.0], [0.5, 0.0, 4.0]]),
    "zero": np.zeros((3, 3)),
    "regular": _rng.standard_normal((3, 3)),
}
SECOND_ORDER = ["rank2-exact", "rank2-rounded", "zero-column", "regular"]


def _use(monkeypatch, executor):
    if executor == "numpy":
        monkeypatch.setenv("GRADJIT_EXECUTOR", "numpy")
    else:
        monkeypatch.delenv("GRADJIT_EXECUTOR", raising=False)


@pytest.mark.parametrize("executor", ["numpy", "numba"])
def test_det_gradient_is_the_adjugate_at_singular_matrices(executor, monkeypatch):
    _use(monkeypatch, executor)
    dgrad = gj.grad(lambda a: L.det(a))
    for name, A in SINGULAR.items():
        want = _cofactor_t(A)
        fd = numerical_grad(np.linalg.det, [A], 0)
        np.testing.assert_allclose(want, fd, atol=1e-8, err_msg=name)
        t = gj.tensor(A, requires_grad=True)
        L.det(t).backward()
        np.testing.assert_allclose(t.grad.data, want, atol=1e-12, err_msg=f"{name} tensor mode")
        np.testing.assert_allclose(dgrad(A), want, atol=1e-12, err_msg=f"{name} gj.grad")
    # batched: singular and regular matrices side by side, each takes its own branch
    batch = np.stack([SINGULAR["rank2-exact"], SINGULAR["regular"], SINGULAR["rank1-rounded"]])
    W = _rng.standard_normal(3)
    got = gj.grad(lambda a: (L.det(a) * W).sum())(batch)
    np.testing.assert_allclose(got, W[:, None, None] * _cofactor_t(batch), atol=1e-12)


@pytest.mark.parametrize("executor", ["numpy", "numba"])
def test_det_second_order_at_rank_n_minus_1(executor, monkeypatch):
    """d/dA <adj(A)', V> against finite differences of the exact adjugate."""
    _use(monkeypatch, executor)
    V = _rng.standard_normal((3, 3))
    first = gj.grad(lambda a: L.det(a))
    hvp = gj.grad(lambda a: (first(a) * V).sum())
    for name in SECOND_ORDER:
        A = SINGULAR[name]
        want = numerical_grad(lambda a: _cofactor_t(a) * V, [A], 0)
        np.testing.assert_allclose(hvp(A), want, atol=1e-7, err_msg=name)
        t = gj.tensor(A, requires_grad=True)
        (g,) = gj.autograd.grad([L.det(t)], [t], create_graph=True)
        (h,) = gj.autograd.grad([(g * V).sum()], [t])
        np.testing.assert_allclose(h.data, want, atol=1e-7, err_msg=f"{name} tensor mode")


@pytest.mark.parametrize("executor", ["numpy", "numba"])
def test_det_second_order_at_rank_n_minus_2_or_less(executor, monkeypatch):
    """Rank <= n-2: adj(A) = 0, its derivative is not (2 x 2 zero: the constant Hessian of
    a00 a11 - a01 a10). It went through the SVD's backward at repeated zero singular
    values: NaN. Batched with a regular matrix, and in tensor mode."""
    _use(monkeypatch, executor)
    mats = [np.zeros((2, 2)), SINGULAR["rank1-exact"], SINGULAR["rank1-rounded"],
            SINGULAR["zero"], np.diag([1.0, 0.0, 0.0])]
    for A in mats:
        V = _rng.standard_normal(A.shape)
        first = gj.grad(lambda a: L.det(a))
        got = gj.grad(lambda a: (first(a) * V).sum())(A)
        want = numerical_grad(lambda a: _cofactor_t(a) * V, [A], 0)
        np.testing.assert_allclose(got, want, atol=1e-7, err_msg=str(A))
    h = gj.hessian(lambda a: L.det(a))(np.zeros((2, 2))).reshape(4, 4)
    np.testing.assert_array_equal(h, [[0, 0, 0, 1], [0, 0, -1, 0], [0, -1, 0, 0], [1, 0, 0, 0]])
    B = np.stack([SINGULAR["zero"], SINGULAR["regular"], SINGULAR["rank1-exact"]])
    V = _rng.standard_normal(B.shape)
    t = gj.tensor(B, requires_grad=True)
    (g,) = gj.autograd.grad([L.det(t).sum()], [t], create_graph=True)
    (h,) = gj.autograd.grad([(g * V).sum()], [t])
    want = numerical_grad(lambda a: _cofactor_t(a) * V, [B], 0)
    np.testing.assert_allclose(h.data, want, atol=1e-7)


def test_det_gradient_against_torch(interpreted):
    torch = pytest.importorskip("torch")
    for name, A in SINGULAR.items():
        ta = torch.tensor(A, requires_grad=True)
        (g_svd,) = torch.autograd.grad(torch.linalg.det(ta), ta, create_graph=True)
        t = gj.tensor(A, requires_grad=True)
        L.det(t).backward()
        np.testing.assert_allclose(t.grad.data, g_svd.detach().numpy(), atol=1e-12, err_msg=name)
    # torch's plain first-order path at a matrix its LU finds exactly singular: 0, not the
    # adjugate. Whether LU rounds this det to exactly 0 depends on torch's LAPACK build.
    ta = torch.tensor(SINGULAR["rank2-exact"], requires_grad=True)
    d = torch.linalg.det(ta)
    d.backward()
    if d.item() == 0.0:
        assert not ta.grad.numpy().any() and _cofactor_t(SINGULAR["rank2-exact"]).any()


@pytest.mark.parametrize("executor", ["numpy", "numba"])
def test_slogdet_and_logdet_at_singular_matrices(executor, monkeypatch):
    _use(monkeypatch, executor)
    A = SINGULAR["rank2-exact"]
    t = gj.tensor(A, requires_grad=True)
    sign, logabs = L.slogdet(t)
    assert sign.item() == 0.0 and logabs.item() == -np.inf
    logabs.backward()
    assert not np.isfinite(t.grad.data).all()
    g = gj.grad(lambda a: L.logdet(a))(A)
    assert g.shape == (3, 3) and not np.isfinite(g).all()
    # a regular matrix in the same batch keeps its finite, exact gradient
    R = SINGULAR["regular"]
    g = gj.grad(lambda a: L.slogdet(a)[1].sum())(np.stack([A, R]))
    np.testing.assert_allclose(g[1], np.linalg.inv(R).T, rtol=1e-12)
    assert not np.isfinite(g[0]).all()


def test_slogdet_at_singular_against_torch(interpreted):
    torch = pytest.importorskip("torch")
    A = SINGULAR["rank1-exact"]
    ta = torch.tensor(A, requires_grad=True)
    s, l = torch.linalg.slogdet(ta)
    l.backward()
    gs, gl = L.slogdet(gj.tensor(A))
    assert (gs.item(), gl.item()) == (s.item(), l.item())
    t = gj.tensor(A, requires_grad=True)
    L.slogdet(t)[1].backward()
    assert not np.isfinite(ta.grad.numpy()).all() and not np.isfinite(t.grad.data).all()


def _torch_grad(torch, fn, A, W):
    ta = torch.tensor(A, requires_grad=True)
    outs = fn(ta, torch.linalg)
    sum(((o * torch.tensor(w)).sum() for o, w in zip(outs, W)), torch.zeros((), dtype=ta.dtype)) \
        .backward()
    return ta.grad.numpy()


def _gj_grads(fn, A, W):
    t = gj.tensor(A, requires_grad=True)
    sum(((o * w).sum() for o, w in zip(fn(t, L), W)), 0.0).backward()
    g = gj.grad(lambda a: sum(((o * w).sum() for o, w in zip(fn(a, L), W)), 0.0))(A)
    return t.grad.data, g


def _svd_sign_free(usv):
    """S and the leading k = min(m, n) singular vectors times their own sums (sign-free), plus
    the columns of U past k (any basis of a complement: their gradient is ignored)."""
    U, S, Vh = usv
    k = S.shape[-1]
    Uk, Vk = U[..., :k], Vh[..., :k, :]
    return S, Uk * Uk.sum(-2, keepdim=True), Vk * Vk.sum(-1, keepdim=True), U[..., k:]


_FACTORS = [
    ("qr-wide", lambda a, lib: tuple(lib.qr(a)), (2, 4)),
    ("qr-wide-batched", lambda a, lib: tuple(lib.qr(a)), (2, 3, 5)),
    ("qr-wide-Q-only", lambda a, lib: (lib.qr(a).Q,), (3, 4)),
    ("qr-wide-R-only", lambda a, lib: (lib.qr(a).R,), (2, 3)),
    ("svd-full-tall", lambda a, lib: _svd_sign_free(lib.svd(a, full_matrices=True)), (4, 2)),
    ("svd-full-wide-batched", lambda a, lib: _svd_sign_free(lib.svd(a, full_matrices=True)),
     (2, 2, 3)),
]


@pytest.mark.parametrize("name, fn, shape", _FACTORS, ids=[f[0] for f in _FACTORS])
def test_wide_qr_and_full_svd_against_torch(name, fn, shape, interpreted):
    """Every output weighted at random: the same values (but a complement's basis) and the
    same gradients as torch."""
    torch = pytest.importorskip("torch")
    A = _rng.standard_normal(shape)
    outs = fn(gj.tensor(A), L)
    touts = fn(torch.tensor(A), torch.linalg)
    for o, to in list(zip(outs, touts))[:3]:
        np.testing.assert_allclose(o.data, to.numpy(), atol=1e-12, err_msg=name)
    W = [_rng.standard_normal(o.shape) for o in outs]
    want = _torch_grad(torch, fn, A, W)
    for g in _gj_grads(fn, A, W):
        np.testing.assert_allclose(g, want, rtol=1e-10, atol=1e-10, err_msg=name)


def test_full_svd_values_and_ignored_columns(interpreted):
    A = _rng.standard_normal((4, 2))
    U, S, Vh = L.svd(gj.tensor(A))
    nU, nS, nVh = np.linalg.svd(A)
    assert U.shape == (4, 4) and Vh.shape == (2, 2)
    np.testing.assert_allclose(U.data, nU, atol=1e-12)
    np.testing.assert_allclose(U.data.T @ U.data, np.eye(4), atol=1e-12)
    # a loss on the columns past min(m, n) only: no gradient (they are any basis), as torch
    g = gj.grad(lambda a: np.linalg.svd(a)[0][:, 2:].sum())(A)
    np.testing.assert_array_equal(g, np.zeros_like(A))
    # square: full_matrices changes nothing
    B = A[:2] + 2 * np.eye(2)
    g1 = gj.grad(lambda a: (L.svd(a, full_matrices=True).U * [1.0, 2.0]).sum())(B)
    g2 = gj.grad(lambda a: (L.svd(a, full_matrices=False).U * [1.0, 2.0]).sum())(B)
    np.testing.assert_array_equal(g1, g2)


# -- batch_norm running statistics under tracing -------------------------------------------------
def _bn_reference(x, rm, rv, calls, momentum, w=None):
    """Tensor mode, in place (as torch): the buffers after ``calls`` training steps."""
    for _ in range(calls):
        gj.nn.functional.batch_norm(gj.tensor(x), rm, rv, w, training=True, momentum=momentum)
    return rm, rv


@pytest.mark.parametrize("transform", ["grad", "jit", "value_and_grad"])
def test_batch_norm_running_stats_updated_under_tracing(transform, interpreted):
    """Arguments and captured arrays: updated after every call, exactly as tensor mode."""
    F = gj.nn.functional
    x = _rng.standard_normal((4, 3, 2))
    rm_ref, rv_ref = _bn_reference(x, np.zeros(3), np.ones(3), 2, 0.3)
    rm, rv = np.zeros(3), np.ones(3)              # passed as arguments
    f = getattr(gj, transform)(
        lambda x, rm, rv: F.batch_norm(x, rm, rv, training=True, momentum=0.3).pow(2).sum())
    f(x, rm, rv)
    f(x, rm, rv)                                  # the second call starts from the new values
    np.testing.assert_allclose(rm, rm_ref, rtol=1e-12)
    np.testing.assert_allclose(rv, rv_ref, rtol=1e-12)
    cm, cv = np.zeros(3), np.ones(3)              # captured by the function
    h = getattr(gj, transform)(lambda x: F.batch_norm(x, cm, cv, training=True,
                                                      momentum=0.3).pow(2).sum())
    h(x)
    h(x)
    np.testing.assert_allclose(cm, rm_ref, rtol=1e-12)
    np.testing.assert_allclose(cv, rv_ref, rtol=1e-12)


def test_batch_norm_traced_gradient_and_instance_norm(interpreted):
    F = gj.nn.functional
    x, w = _rng.standard_normal((5, 3, 4)), _rng.standard_normal(3)
    rm, rv = np.zeros(3), np.ones(3)
    gx = gj.grad(lambda x, w: F.batch_norm(x, rm, rv, w, training=True).pow(2).sum())(x, w)
    xt = gj.tensor(x, requires_grad=True)
    rm_t, rv_t = np.zeros(3), np.ones(3)
    F.batch_norm(xt, rm_t, rv_t, gj.tensor(w), training=True).pow(2).sum().backward()
    np.testing.assert_allclose(gx, xt.grad.numpy(), rtol=1e-10)
    np.testing.assert_allclose(rm, rm_t, rtol=1e-12)
    im, iv = np.zeros(3), np.ones(3)
    gj.jit(lambda x: F.instance_norm(x, im, iv).sum())(x)
    im_t, iv_t = np.zeros(3), np.ones(3)
    F.instance_norm(gj.tensor(x), im_t, iv_t)
    np.testing.assert_allclose(im, im_t, rtol=1e-12)
    np.testing.assert_allclose(iv, iv_t, rtol=1e-12)
    # eval mode reads the buffers and leaves them alone; momentum 0 updates nothing
    gj.grad(lambda x: F.batch_norm(x, rm, rv).pow(2).sum())(x)
    gj.grad(lambda x: F.batch_norm(x, rm, rv, training=True, momentum=0.0).pow(2).sum())(x)
    np.testing.assert_allclose(rm, rm_t, rtol=1e-12)
    with pytest.raises(gj.GradjitError, match="running statistics must be arrays"):
        gj.jit(lambda x: F.batch_norm(x, [0.0] * 3, [1.0] * 3, training=True).sum())(x)
