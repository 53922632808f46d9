"""np.linalg options that change the result: ``hermitian=True`` of svd / pinv (NumPy reads
the lower triangle through eigh), pinv's ``rcond`` / ``rtol`` cutoff, and NumPy's errors
for shapes it refuses. Each was once ignored (a silently different value and gradient)
or gave an error naming an internal op."""
import numpy as np
import pytest

import gradjit as gj
from tests.fd import numerical_grad
from tests.marks import COMPILED_SLOW
from tests.runtime.test_numpy_correctness import check

_rng = np.random.default_rng(7)
# symmetric plus noise above the diagonal: NumPy's hermitian path never reads that noise
_A = np.array([[4.0, 1.0, 0.0], [0.0, 3.0, 1.0], [0.0, 0.0, 2.0]])
_B = _rng.normal(size=(3, 3)) + 0.3 * np.triu(_rng.normal(size=(3, 3)))
_BATCH = _rng.normal(size=(2, 3, 3))


@COMPILED_SLOW
@pytest.mark.parametrize("a", [_A, _B, _BATCH], ids=["upper", "noisy", "batched"])
def test_svd_hermitian_is_numpys(a, executor):
    check(lambda x: np.linalg.svd(x, hermitian=True, compute_uv=False), [a])
    # U and Vh up to NumPy's own signs: the reconstruction and |U| are sign-free
    check(lambda x: (lambda u, s, vh: u @ (s[..., None] * vh))(*np.linalg.svd(x, hermitian=True)),
          [a])
    check(lambda x: np.abs(np.linalg.svd(x, hermitian=True)[0]), [a])


@COMPILED_SLOW
@pytest.mark.parametrize("a", [_A, _B], ids=["upper", "noisy"])
def test_pinv_hermitian_is_numpys(a, executor):
    check(lambda x: np.linalg.pinv(x, hermitian=True), [a])


@COMPILED_SLOW
def test_pinv_cutoffs_are_numpys(executor):
    # rcond=0.5 drops the singular values below half the largest: a lower-rank result
    s = np.linalg.svd(_B, compute_uv=False)
    assert (s < 0.5 * s[0]).any()
    check(lambda x: np.linalg.pinv(x, rcond=0.5), [_B])
    check(lambda x: np.linalg.pinv(x, rtol=1e-10), [_B])
    with pytest.raises(ValueError, match="can't be both set"):
        gj.jit(lambda x: np.linalg.pinv(x, rcond=0.1, rtol=0.1))(_B)


def test_linalg_shape_errors_are_numpys(interpreted):
    with pytest.raises(ValueError, match=r"np.linalg.cholesky: last 2 dimensions .* square.*\(4, 3\)"):
        gj.grad(lambda a: np.linalg.cholesky(a).sum())(np.ones((4, 3)))
    with pytest.raises(ValueError, match="Improper number of dimensions to norm"):
        gj.jit(lambda a: np.linalg.norm(a, axis=(0, 1, 2)))(np.ones((2, 2, 2)))
    # an ord with no axis: every axis, so only 1-D and 2-D (it was the flat 2-norm)
    for ord_, shape in [(2, (2, 2, 2)), ("fro", (1, 2, 2)), (1, (2, 1, 2)), (np.inf, ())]:
        with pytest.raises(ValueError, match="Improper number of dimensions to norm") as e:
            gj.jit(lambda a: np.linalg.norm(a, ord=ord_))(np.ones(shape))
        assert "test_numpy_linalg_options.py" in str(e.value)   # the user's line
    assert gj.jit(lambda a: np.linalg.norm(a))(np.ones((2, 2, 2))) == np.linalg.norm(np.ones(8))


# -- lstsq: rcond, the residuals' rule, 2-D only ---------------------------------------------------
def _orth(n):
    return np.linalg.qr(_rng.normal(size=(n, n)))[0]


# a singular value of 0.02 under rcond=0.1: dropped (it was inverted: rcond fed only the rank)
_LOW = {"tall": _orth(4)[:, :3] @ np.diag([2.0, 1.0, 0.02]) @ _orth(3),
        "wide": _orth(3) @ np.diag([2.0, 1.0, 0.02]) @ _orth(5)[:3]}


@pytest.mark.parametrize("shape", ["tall", "wide"])
@COMPILED_SLOW
def test_lstsq_rcond_drops_singular_values_with_their_gradient(shape, executor):
    a = _LOW[shape]
    b = _rng.normal(size=(a.shape[0], 2))
    check(lambda a, b: np.linalg.lstsq(a, b, rcond=0.1)[0], [a, b], rtol=1e-5)
    check(lambda a, b: np.linalg.lstsq(a, b, rcond=0.1)[2] * a.sum(), [a, b])


def test_lstsq_rcond_second_order_and_tensor_mode(interpreted):
    from tests.runtime.test_numpy_correctness import check_second_order
    a, b = _LOW["tall"], _rng.normal(size=4)
    check_second_order(lambda a: np.linalg.lstsq(a, b, rcond=0.1)[0], [a])
    # no NaN at repeated singular values (the identity), nor at an exact rank deficiency
    for m in (np.eye(3), np.diag([1.0, 0.0, 0.0])):
        g = gj.grad(lambda a: np.linalg.lstsq(a, np.ones(3), rcond=0.5)[0].sum())
        h = gj.grad(lambda a: (g(a) ** 2).sum())(m)
        assert np.isfinite(h).all()
    t = gj.tensor(a, requires_grad=True)
    gj.linalg.lstsq(t, gj.tensor(b[:, None]), rcond=0.1).solution.sum().backward()
    want = numerical_grad(lambda a: np.linalg.lstsq(a, b, rcond=0.1)[0], [a], 0)
    np.testing.assert_allclose(t.grad.numpy(), want, rtol=1e-5, atol=1e-7)
    # rcond=None: eps * max(m, n), not pinv's 1e-15 (a singular value between the two)
    c = np.array([[1.0, 0.0], [0.0, 1.5e-15], [0.0, 0.0]])
    np.testing.assert_array_equal(gj.jit(lambda c: np.linalg.lstsq(c, np.ones(3))[0])(c),
                                  np.linalg.lstsq(c, np.ones(3))[0])


def test_lstsq_residuals_follow_numpys_rank_rule(interpreted):
    """NumPy: residuals (k,) only for m > n and rank n, else empty. A traced a's rank is not
    known while tracing: (k,) then, NaN where the rank is below n (never a number)."""
    deficient, full = np.array([[1.0, 2.0], [2.0, 4.0], [3.0, 6.0]]), _LOW["tall"]
    b = np.array([1.0, 0.0, 1.0])
    res = gj.jit(lambda a, b: np.linalg.lstsq(a, b)[1])
    assert np.linalg.lstsq(deficient, b)[1].shape == (0,)
    got = res(deficient, b)
    assert got.shape == (1,) and np.isnan(got).all()
    got = gj.jit(lambda a: np.linalg.lstsq(a, np.ones((4, 2)), rcond=0.1)[1])(full)
    assert got.shape == (2,) and np.isnan(got).all()
    np.testing.assert_allclose(res(full, np.ones(4)), np.linalg.lstsq(full, np.ones(4))[1])
    assert res(full[:3].T, np.ones(3)).shape == (0,)   # m <= n: none
    # an eager tensor's rank is known: the exact rule (torch's, whose gelsd agrees)
    L = gj.linalg
    assert L.lstsq(gj.tensor(deficient), gj.tensor(b[:, None])).residuals.shape == (0,)
    r = L.lstsq(gj.tensor(full), gj.tensor(np.ones((4, 1)))).residuals
    np.testing.assert_allclose(r.numpy(), np.linalg.lstsq(full, np.ones((4, 1)))[1])
    assert L.lstsq(gj.tensor(full), gj.tensor(np.ones((4, 1))), rcond=0.1).residuals.shape == (0,)


def test_lstsq_of_a_stack_is_numpys_error(interpreted):
    a, b = np.ones((2, 4, 3)) + np.eye(4, 3), np.ones((2, 4, 2))
    with pytest.raises(np.linalg.LinAlgError, match="3-dimensional array given.*two-dimensional"):
        gj.jit(lambda a, b: np.linalg.lstsq(a, b)[0])(a, b)
    with pytest.raises(np.linalg.LinAlgError, match="3-dimensional array given"):
        gj.jit(lambda a, b: np.linalg.lstsq(a, b)[0])(a[0], b)


def test_vector_norm_negative_and_small_ords_are_numpys(interpreted):
    """np.linalg.vector_norm(v, ord=-1) raised 'not supported' (np.linalg.norm(v, -1) worked)."""
    x = np.array([[1.0, -2.0, 4.0], [0.5, 3.0, -1.0]])
    for ord_ in (-1, -2, -0.5, 0.5):
        for axis, keepdims in ((None, False), (1, True), (0, False)):
            check(lambda v: np.linalg.vector_norm(v, axis=axis, keepdims=keepdims, ord=ord_), [x])
    assert gj.jit(lambda v: np.linalg.vector_norm(v, ord=-1))(np.array([0.0, 2.0])) == 0.0


def test_norm_axis_list_and_einsum_casting_are_numpys_errors(interpreted):
    a = np.ones((2, 3))
    with pytest.raises(TypeError, match="'axis' must be None, an integer or a tuple"):
        gj.jit(lambda a: np.linalg.norm(a, 1, axis=[1, 0]))(a)
    with pytest.raises(TypeError, match="'axis' must be None, an integer or a tuple"):
        gj.jit(lambda a: np.linalg.vector_norm(a, axis=[1]))(a)
    with pytest.raises(TypeError, match=r"could not be cast from dtype\('float64'\) to "
                                        r"dtype\('float32'\) according to the rule 'safe'"):
        gj.jit(lambda a: np.einsum("ij->i", a, dtype=np.float32))(a)
    got = gj.jit(lambda a: np.einsum("ij->i", a, dtype=np.float32, casting="same_kind"))(a)
    assert got.dtype == np.float32 and (got == 3).all()
    assert gj.jit(lambda a: np.einsum("ij->i", a.astype(np.float32), dtype=np.float64))(a).dtype \
        == np.float64
    assert gj.jit(lambda a: np.linalg.norm(a, axis=np.int64(1)))(a).shape == (2,)
