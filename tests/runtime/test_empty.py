"""Size-0 (empty) tensors: the values, errors and dtypes beyond the gradcheck table.

Gradients of every op family on empty shapes are checked against finite
differences (first and second order, tensor mode and ``gj.grad``) and torch by
the case table ``cases_empty.py``. Here, as torch defines them:
- reductions of nothing: sum 0, prod 1, vector norm 0, mean / var / std NaN,
  logsumexp -inf, softmax over a size-0 dim empty; eager, interpreted and
  compiled (``gj.jit``) agree, and their gradients are empty arrays;
- reductions without identity (amax / amin / max / min, inf-norms) over
  nothing raise a ``ShapeError`` naming the op, the shape and the user's line,
  in tensor mode and at trace time under ``gj.grad``; NumPy's ``initial=`` is the
  value of such a reduction (an empty gradient);
- ``reshape`` with ``-1`` of an empty tensor is ambiguous and raises;
- float32 gradients of empty inputs stay float32 (interpreted and compiled).
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import gradjit as gj
from tests.marks import SLOW_NUMBA

L = gj.linalg
X, Z = np.empty((0, 3)), np.empty((3, 0))


def _values(x, z, linalg=L):
    """Reductions over nothing: every entry of the results reduces zero elements."""
    return (x.sum(), x.prod(), x.mean(), x.var(unbiased=True), x.std(0, unbiased=True), x.mean(0), z.sum(1), z.prod(1),
            z.mean(1), z.logsumexp(1), x.logsumexp(0), linalg.vector_norm(x),
            linalg.vector_norm(z, 1, 1), z.softmax(1), x.log_softmax(0), z.cumsum(1))


_WANT = [0.0, 1.0, np.nan, np.nan, [np.nan] * 3, [np.nan] * 3, [0.0] * 3, [1.0] * 3,
         [np.nan] * 3, [-np.inf] * 3, [-np.inf] * 3, 0.0, [0.0] * 3, Z, X, Z]


def _check_values(got):
    assert len(got) == len(_WANT)
    for k, (g, w) in enumerate(zip(got, _WANT)):
        g = np.asarray(getattr(g, "data", g))
        assert g.shape == np.shape(w) and g.dtype == np.float64, (k, g.shape, g.dtype)
        np.testing.assert_array_equal(g, w, err_msg=f"value {k}")


@pytest.mark.parametrize("executor", ["numpy", SLOW_NUMBA])
def test_reductions_of_nothing_match_torch_semantics(executor, monkeypatch):
    if executor == "numpy":
        monkeypatch.setenv("GRADJIT_EXECUTOR", "numpy")
    else:
        monkeypatch.delenv("GRADJIT_EXECUTOR", raising=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)   # NumPy's "mean of empty slice"
        _check_values(_values(gj.tensor(X), gj.tensor(Z)))
        _check_values(gj.jit(_values)(X, Z))

        def loss(x, z):
            return sum(v.sum() for v in _values(x, z))

        gx, gz = gj.grad(loss, argnums=(0, 1))(X, Z)
        assert gx.shape == X.shape and gz.shape == Z.shape and gx.dtype == np.float64
        tx, tz = gj.tensor(X, requires_grad=True), gj.tensor(Z, requires_grad=True)
        loss(tx, tz).backward()
        assert tx.grad.shape == X.shape and tz.grad.shape == Z.shape


def test_reductions_of_nothing_against_torch(interpreted):
    torch = pytest.importorskip("torch")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # torch / NumPy warn about zero degrees of freedom
        want = _values(*(torch.tensor(a, dtype=torch.float64) for a in (X, Z)), torch.linalg)
        got = _values(gj.tensor(X), gj.tensor(Z))
    for k, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_array_equal(g.data, w.numpy(), err_msg=f"value {k}")


_NO_IDENTITY = [
    ("amax(dim)", lambda x: x.amax(1), (2, 0, 4), r"amax\(\): Expected reduction dim 1 to have "
                                                  r"non-zero size \(input shape \(2, 0, 4\)\)"),
    ("amax()", lambda x: x.amax(), (0,), r"amax\(\): Expected reduction dim to be specified for "
                                         r"input.numel\(\) == 0"),
    ("max()", lambda x: x.max(), (0, 3), r"Expected reduction dim to be specified"),
    ("min()", lambda x: np.min(x), (3, 0), r"amin\(\): Expected reduction dim to be specified"),
    ("amin(dim)", lambda x: x.amin(0), (0, 3), r"amin\(\): Expected reduction dim 0 to have "
                                               r"non-zero size"),
    ("max(dim)", lambda x: x.max(dim=1)[0], (3, 0), r"cannot reduce over a zero-size dimension"),
    ("inf-norm", lambda x: L.vector_norm(x, np.inf), (0,), r"cannot compute the inf norm on an "
                                                          r"empty tensor"),
    ("-inf-norm", lambda x: L.vector_norm(x, -np.inf, dim=0), (0, 3), r"-inf norm on an empty"),
    ("softmax-then-max", lambda x: x.softmax(0).amax(0), (0, 2), r"reduction dim 0"),
]


@pytest.mark.parametrize("name, fn, shape, match", _NO_IDENTITY, ids=[c[0] for c in _NO_IDENTITY])
def test_reductions_without_identity_raise(name, fn, shape, match, interpreted):
    x = np.empty(shape)
    with pytest.raises(gj.ShapeError, match=match) as e:
        fn(gj.tensor(x, requires_grad=True))
    assert "test_empty.py" in str(e.value)          # the user's line
    with pytest.raises(gj.ShapeError, match=match) as e:   # at trace time, not in compiled code
        gj.grad(lambda a: fn(a).sum())(x)
    assert "test_empty.py" in str(e.value)


def test_reductions_without_identity_over_non_empty_dims_of_empty_tensors(interpreted):
    """amax over a non-empty dim of an empty tensor is legal (an empty result), as torch."""
    x = gj.tensor(np.empty((0, 3)), requires_grad=True)
    out = x.amax(1) + x.max(dim=1)[0] + L.vector_norm(x, np.inf, dim=1)
    assert out.shape == (0,)
    out.sum().backward()
    assert x.grad.shape == (0, 3)


def test_numpy_initial_is_the_value_of_an_empty_reduction(executor):
    """NumPy's ``initial=`` gives max / min over nothing a value (it raised the ShapeError
    above); the gradient of such a result with respect to the empty input is empty."""
    def f(x):
        return (np.max(x, axis=0, initial=-1.0), np.amin(x, initial=2.0),
                np.min(x.T, axis=1, keepdims=True, initial=0.5), x.max(axis=0, initial=3.0),
                np.maximum.reduce(x, axis=0, initial=1.5), np.sum(x, axis=0, initial=2.0),
                np.prod(x, initial=3.0), np.max(x, axis=1, initial=1.0))
    for got, want in zip(gj.jit(f)(X), f(X), strict=True):
        assert np.asarray(got).dtype == want.dtype
        np.testing.assert_array_equal(got, want)
    g = gj.grad(lambda x: sum((v * 1.5).sum() for v in f(x)))(X)
    assert g.shape == X.shape and g.dtype == X.dtype


def test_reshape_minus_one_of_empty_is_ambiguous(interpreted):
    with pytest.raises(gj.ShapeError, match=r"cannot reshape tensor of 0 elements into shape "
                                            r"\[0, -1\].*ambiguous"):
        gj.tensor(X).reshape(0, -1)
    assert gj.tensor(X).reshape(-1).shape == (0,)    # -1 alone: the one size that fits


@pytest.mark.parametrize("executor", ["numpy", "numba"])
def test_float32_empty_gradients_stay_float32(executor, monkeypatch):
    if executor == "numpy":
        monkeypatch.setenv("GRADJIT_EXECUTOR", "numpy")
    else:
        monkeypatch.delenv("GRADJIT_EXECUTOR", raising=False)
    x, w = np.empty((0, 3), np.float32), np.ones((3, 2), np.float32)

    def f(x, w):
        return (x @ w).tanh().sum() + (w * x.sum(0)[:, None]).sum()

    gx, gw = gj.grad(f, argnums=(0, 1))(x, w)
    assert gx.dtype == gw.dtype == np.float32 and gx.shape == (0, 3)
    np.testing.assert_array_equal(gw, np.zeros((3, 2), np.float32))
    tx, tw = gj.tensor(x, requires_grad=True), gj.tensor(w, requires_grad=True)
    f(tx, tw).backward()
    assert tx.grad.dtype == tw.grad.dtype == np.float32
    np.testing.assert_array_equal(tw.grad.data, np.zeros((3, 2), np.float32))
