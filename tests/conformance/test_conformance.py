"""NumPy conformance of every function in gradjit's dispatch table (``opinfo.py``).

For each (OpInfo, sample):

- ``test_forward``: ``gj.jit(fn)(*args)`` equals NumPy's ``fn(*args)``: the same
  structure, shapes, dtypes and values (NaN where NumPy has NaN; ``rtol`` 1e-12
  for float64, 1e-5 for float32).
- ``test_grad``: ``gj.grad`` of ``sum(fn(*args) * W)`` (``W`` a fixed random
  weight of the output's shape, so the check is not just the sum) against
  central finite differences of NumPy's ``fn`` in float64 (``tests/fd.py``).
- ``test_grad2`` (flagged samples): the Hessian-vector product
  ``gj.grad(sum(gj.grad(...)(x) * V))`` against finite differences of the
  first-order gradient.
- ``test_tensor``: ``fn(*gj.tensor(args, requires_grad=True))``: the value
  equals NumPy's, and ``.backward()`` leaves the finite-difference gradient in
  ``.grad``.

All of these run on the NumPy reference interpreter (``GRADJIT_EXECUTOR=numpy``:
no compilation); ``test_compiled`` runs a few representative samples through
the Numba code generator (each distinct program compiles, ~0.5 s).

Known gradjit bugs and gaps are ``xfail(strict=True)`` with their reason
(``OpInfo.bugs``), so each is visible and fails loudly once fixed.
"""
from __future__ import annotations

import functools
import os
import traceback
import warnings
import zlib

import numpy as np
import pytest

import gradjit as gj
from tests.conformance.opinfo import (METHOD_SKIP, OPS, SKIP, dispatch_table,
                                      traced_methods)
from tests.fd import numerical_grad


@pytest.fixture(autouse=True, scope="module")
def _interpreter():
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GRADJIT_EXECUTOR", "numpy")
        yield


def compact_failures(test):
    """Report a failure as its message and the last few frames, without pytest's traceback
    (formatting one re-parses the table module per frame: seconds per expected failure)."""
    @functools.wraps(test)
    def run(*args, **kwargs):
        try:
            with quiet():   # tensor mode may compute lazily: its warnings come anywhere
                return test(*args, **kwargs)
        except Exception as e:   # noqa: BLE001
            frames = traceback.extract_tb(e.__traceback__)[-4:]
            where = "\n".join(f"  {os.path.relpath(f.filename)}:{f.lineno} in {f.name}"
                              for f in frames)
            message = f"{type(e).__name__}: {e}\n{where}"
        pytest.fail(message, pytrace=False)   # outside the except: no chained traceback
    return run


# -- helpers ---------------------------------------------------------------------------------------
def leaves(x):
    """The arrays of a result (tuples, lists and namedtuples flattened, in order)."""
    if isinstance(x, (tuple, list)):
        return [y for item in x for y in leaves(item)]
    return [x]


def structure(x):
    if isinstance(x, (tuple, list)):
        return [structure(y) for y in x]
    return "leaf"


class quiet:
    """NumPy's warnings (mean of empty, log of 0 ...) and gradjit's alike: not the subject."""

    def __enter__(self):
        self._w = warnings.catch_warnings()
        self._w.__enter__()
        warnings.simplefilter("ignore")
        self._e = np.errstate(all="ignore")
        self._e.__enter__()

    def __exit__(self, *exc):
        self._e.__exit__(*exc)
        self._w.__exit__(*exc)


_REF = {}


def reference(op, s):
    """NumPy's result (leaves as arrays), its structure and the weights W (cached)."""
    key = id(s)
    if key not in _REF:
        with quiet():
            out = op.fn(*s.args, **s.kwargs)
        outs = [np.asarray(y) for y in leaves(out)]
        rng = np.random.default_rng(zlib.crc32((op.name + s.describe()).encode()))
        W = [rng.standard_normal(y.shape) if y.dtype.kind == "f" else None for y in outs]
        _REF[key] = (outs, structure(out), W)
    return _REF[key]


def float_leaves(op, s):
    try:
        W = reference(op, s)[2]
    except Exception:   # noqa: BLE001  (reported by test_every_sample_runs_in_numpy)
        return []
    return [i for i, W in enumerate(W) if W is not None]


def grad_applicable(op, s):
    return (op.differentiable and s.grad and bool(s.differentiable_args())
            and bool(float_leaves(op, s)))


def assert_same(got, want, op, what=""):
    got = np.asarray(got)
    assert got.shape == want.shape, f"{what}shape {got.shape} != NumPy's {want.shape}"
    assert got.dtype == want.dtype, f"{what}dtype {got.dtype} != NumPy's {want.dtype}"
    if not op.values_defined:
        return
    if want.dtype.kind == "f" and want.dtype.itemsize < 8:   # float32 (float16: 1e-3)
        rtol = atol = 1e-3 if want.dtype.itemsize < 4 else 1e-5
    else:
        rtol, atol = op.rtol, op.atol
    if want.dtype.kind in "fc":
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True,
                                   err_msg=f"{what}values differ from NumPy's")
    else:
        np.testing.assert_array_equal(got, want, err_msg=f"{what}values differ from NumPy's")


def check_forward(op, s, out):
    want, want_tree, _ = reference(op, s)
    assert structure(out) == want_tree, f"result structure {structure(out)} != {want_tree}"
    for i, (g, w) in enumerate(zip(leaves(out), want)):
        assert_same(g, w, op, f"output {i}: " if len(want) > 1 else "")


def weighted_sum(op, s, out):
    """sum_i (out_i * W_i).sum() over the floating-point outputs (traced or NumPy)."""
    _, _, W = reference(op, s)
    outs = leaves(out)
    total = None
    for i in float_leaves(op, s):
        term = (outs[i] * W[i]).sum()
        total = term if total is None else total + term
    return total


def numpy_loss(op, s):
    def loss(*args):   # (the tests run inside ``quiet``)
        return np.asarray(weighted_sum(op, s, op.fn(*args, **s.kwargs)), dtype=np.float64)
    return loss


_FD = {}


def fd_grads(op, s, loss=None):
    """Central differences (float64, eps 1e-6) of the weighted sum, per differentiated arg
    (of NumPy's function: computed once per sample; or of ``loss``)."""
    if loss is None:
        if id(s) not in _FD:
            _FD[id(s)] = fd_grads(op, s, numpy_loss(op, s))
        return _FD[id(s)]
    out = []
    for i in s.differentiable_args():
        def f(x, i=i):
            args = list(s.args)
            args[i] = x
            return loss(*args)
        out.append(numerical_grad(f, [s.args[i]], 0))
    return out


def assert_grad(got, want, op, what, atol=None):
    got = np.asarray(got)
    assert got.shape == want.shape, f"{what}: gradient shape {got.shape} != {want.shape}"
    scale = max(1.0, float(np.abs(want).max())) if want.size else 1.0
    np.testing.assert_allclose(got, want, rtol=op.grad_rtol,
                               atol=(atol or op.grad_atol) * scale,
                               err_msg=f"{what}: gradient differs from finite differences")


def traced_loss(op, s):
    def loss(*args):
        return weighted_sum(op, s, op.fn(*args, **s.kwargs))
    return loss


# -- parametrisation -------------------------------------------------------------------------------
CASES = [(op, i, s) for op in OPS for i, s in enumerate(op.cases())]


def applicable(op, s, check):
    if check == "forward":
        return True
    if check == "grad":
        return grad_applicable(op, s)
    if check == "grad2":
        return bool(s.hvp) and grad_applicable(op, s)
    if check == "tensor":
        return op.tensor_mode
    raise ValueError(check)


def params(check):
    out = []
    for op, i, s in CASES:
        if not applicable(op, s, check):
            continue
        reason = op.bug(s, check)
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        out.append(pytest.param(op, s, id=f"{op.name}-{i}-{s.describe()}", marks=marks))
    return out


# -- the checks ------------------------------------------------------------------------------------
@pytest.mark.parametrize("op,s", params("forward"))
@compact_failures
def test_forward(op, s):
    out = gj.jit(lambda *a: op.fn(*a, **s.kwargs))(*s.args)
    check_forward(op, s, out)


@pytest.mark.parametrize("op,s", params("grad"))
@compact_failures
def test_grad(op, s):
    argnums = s.differentiable_args()
    got = gj.grad(traced_loss(op, s), argnums=argnums)(*s.args)
    for i, g, want in zip(argnums, got, fd_grads(op, s)):
        assert_grad(g, want, op, f"argument {i}")


@pytest.mark.parametrize("op,s", params("grad2"))
@compact_failures
def test_grad2(op, s):
    argnums = s.differentiable_args()
    rng = np.random.default_rng(zlib.crc32(("V" + op.name + s.describe()).encode()))
    V = [rng.standard_normal(s.args[i].shape) for i in argnums]
    g = gj.grad(traced_loss(op, s), argnums=argnums)

    def hv(*args):   # sum_j grad_j(args) * V_j: its gradient is the Hessian times V
        total = None
        for gj_, v in zip(g(*args), V):
            term = (gj_ * v).sum()
            total = term if total is None else total + term
        return total

    got = gj.grad(hv, argnums=argnums)(*s.args)
    want = fd_grads(op, s, loss=lambda *a: np.asarray(hv(*a), dtype=np.float64))
    for i, gg, w in zip(argnums, got, want):
        assert_grad(gg, w, op, f"argument {i} (second order)", atol=1e-6)


@pytest.mark.parametrize("op,s", params("tensor"))
@compact_failures
def test_tensor(op, s):
    diff = s.differentiable_args() if grad_applicable(op, s) else ()
    ts = [gj.tensor(a, requires_grad=i in diff) for i, a in enumerate(s.args)]
    out = op.fn(*ts, **s.kwargs)
    check_forward(op, s, out)
    if not diff:
        return
    loss = weighted_sum(op, s, out)
    want = fd_grads(op, s)
    if not getattr(loss, "requires_grad", False):   # the output does not depend on the inputs
        for i, w in zip(diff, want):
            assert not np.any(w), f"argument {i}: the result lost its gradient"
        return
    loss.backward()
    for i, w in zip(diff, want):
        g = ts[i].grad
        assert_grad(np.zeros_like(w) if g is None else np.asarray(g), w, op, f"argument {i}")


# A few samples per family through the compiled (Numba) path: each compiles a forward and a
# gradient program (0.2-1 s each; some features cost seconds on first use in a process:
# concatenate, solve, sort, returning a view), so the list stays short (12 samples,
# 24 programs).
COMPILED = [("np.exp", "f8(2,3)"), ("np.divide", "f8(2,3),f8(3)"),
            ("np.maximum", "f8(2,1),f8(1,3)"), ("np.sum", "f8(2,3,4),axis=(0,2)"),
            ("np.max", "f8(2,3),axis=-1"), ("np.var", "f8(2,3),axis=1"),
            ("np.cumsum", "f8(2,3),axis=0"), ("np.where", "b1(3),f8(2,3),f8()"),
            ("np.clip", "f8(2,3),a_min=-0.5,a_max=0.75"), ("np.matmul", "f8(2,3),f8(3,4)"),
            ("np.take", "f8(2,3),indices=arr(3),axis=1"),
            ("np.cumprod", "f8(2,3),axis=1")]


def _compiled_params():
    by = {op.name: op for op in OPS}
    out = []
    for name, desc in COMPILED:
        op = by[name]
        i, s = next((i, s) for i, s in enumerate(op.cases()) if s.describe() == desc)
        reason = op.bug(s, "forward") or op.bug(s, "grad")
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        out.append(pytest.param(op, s, id=f"{name}-{i}-{desc}", marks=marks))
    return out


@pytest.mark.parametrize("op,s", _compiled_params())
@compact_failures
def test_compiled(op, s, monkeypatch):
    monkeypatch.delenv("GRADJIT_EXECUTOR", raising=False)
    out = gj.jit(lambda *a: op.fn(*a, **s.kwargs))(*s.args)
    check_forward(op, s, out)
    if grad_applicable(op, s):
        argnums = s.differentiable_args()
        got = gj.grad(traced_loss(op, s), argnums=argnums)(*s.args)
        for i, g, want in zip(argnums, got, fd_grads(op, s)):
            assert_grad(g, want, op, f"argument {i}")


# -- the table itself ------------------------------------------------------------------------------
def test_every_dispatch_table_entry_has_an_opinfo():
    covered = {f for op in OPS for f in op.funcs}
    missing = [name for f, name in dispatch_table().items() if f not in covered and f not in SKIP]
    assert not missing, f"dispatch-table entries without an OpInfo (or a SKIP reason): {missing}"
    stale = [k for k in SKIP if k in covered]
    assert not stale, f"SKIP entries that have an OpInfo: {stale}"


def test_every_traced_method_has_an_opinfo():
    covered = {op.method for op in OPS if op.method}
    missing = [m for m in traced_methods() if m not in covered and m not in METHOD_SKIP]
    assert not missing, f"ndarray methods of traced arrays without an OpInfo: {missing}"


def test_every_sample_runs_in_numpy():
    """The table's own sanity: NumPy accepts every sample (a sample NumPy rejects checks
    nothing), and names are unique."""
    bad = []
    for op, i, s in CASES:
        try:
            reference(op, s)
        except Exception as e:   # noqa: BLE001
            bad.append(f"{op.name}-{i}-{s.describe()}: {type(e).__name__}: {e}")
    assert not bad, "\n".join(bad)
    names = [op.name for op in OPS]
    assert len(names) == len(set(names)), "duplicate OpInfo names"


def test_coverage_command_reports_the_table_size():
    from gradjit.runtime import coverage
    from tests.conformance.opinfo import table_size
    n_ops, n_funcs, n_methods, n_samples = table_size()
    line = coverage.conformance_line()
    assert line.startswith(f"NumPy conformance table: {n_ops} OpInfos covering {n_funcs}/"), line
    assert f"{n_methods} ndarray methods, {n_samples} sample cases" in line
    assert "not installed" in coverage.conformance_line("/nonexistent/opinfo.py")
