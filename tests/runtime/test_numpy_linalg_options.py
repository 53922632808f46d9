"""np.linalg options that change the result: ``hermitian=True`` of svd / pinv (NumPy reads
the lower triangle through eigh), pinv's ``rcond`` / ``rtol`` cutoff, and NumPy's errors
for shapes it refuses. Each was once ignored (a silently different value and gradient)
or gave an error naming an internal op."""
import numpy as np
import pytest

import gradjit as gj
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
