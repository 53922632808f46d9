"""The gradcheck case tables against torch.autograd (optional: skipped without torch).

Every case of ``CASES`` (``test_ops_gradcheck.py`` and the family modules) is a
function of tensors; many spell their op with torch method names, so the same
callable runs on ``torch.float64`` tensors that require grad. Values and
first-order gradients of ``sum(f(x) * W)`` must match gradjit's (NumPy
reference interpreter) to 1e-8.

A case is skipped (not failed) when it cannot run on torch tensors: a NumPy
function or a ``gj.*`` function applied to them (AttributeError / TypeError, or
torch's RuntimeError for ``numpy()`` on a tensor that requires grad), a
method torch spells differently, or an output that is not a torch tensor
(e.g. ``gj.stack`` of torch tensors). ``test_enough_cases_ran`` keeps the
oracle from passing vacuously.

Known torch-vs-NumPy semantic differences are excluded by name in ``_EXCLUDED``,
each with the difference it stands for.
"""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tests.runtime.test_ops_gradcheck import CASE_IDS, CASES, tensor_grads  # noqa: E402

MIN_RAN = 150

# case-id prefix -> the documented semantic difference (gradjit follows NumPy there)
_EXCLUDED: dict[str, str] = {}

_RESULTS: dict[str, str] = {}   # case id -> "ran" or "skip: why"


def _excluded(case):
    for prefix, why in _EXCLUDED.items():
        if case.id.startswith(prefix):
            return why
    return None


def _torch_run(case, arrays, W):
    """(value, grads) from torch, or a string saying why the case cannot run there."""
    ts = [torch.tensor(a, dtype=torch.float64, requires_grad=i in case.diff)
          for i, a in enumerate(arrays)]
    try:
        out = case.fn(*ts)
    except (AttributeError, TypeError) as e:
        return f"skip: {type(e).__name__}: {e}"
    except RuntimeError as e:
        if "numpy()" in str(e) or "requires grad" in str(e):
            return f"skip: RuntimeError: {e}"
        raise
    except ValueError as e:
        if "step must be greater than zero" in str(e):   # torch has no negative slice steps
            return f"skip: ValueError: {e}"
        raise
    if not isinstance(out, torch.Tensor):
        return f"skip: output is {type(out).__name__}"
    if not out.requires_grad:
        return "skip: torch output does not require grad"
    loss = (out * torch.as_tensor(W, dtype=out.dtype)).sum()
    try:
        grads = torch.autograd.grad(loss, [ts[i] for i in case.diff], allow_unused=True)
    except RuntimeError as e:
        if "is not implemented" in str(e):   # e.g. torch has no gradient of 2.0 % x w.r.t. x
            return f"skip: torch: {e}"
        raise
    grads = [np.zeros_like(arrays[i]) if g is None else g.detach().numpy()
             for i, g in zip(case.diff, grads)]
    return out.detach().numpy(), grads


def _check(case):
    why = _excluded(case)
    if why:
        return f"skip: excluded ({why})"
    arrays = case.arrays()
    W = case.weights(arrays)
    got = _torch_run(case, arrays, W)
    if isinstance(got, str):
        return got
    value, grads = got
    want = case.forward(*arrays)
    assert value.shape == np.shape(want), f"{case.id}: torch shape {value.shape} != {np.shape(want)}"
    np.testing.assert_allclose(value, want, rtol=1e-8, atol=1e-8, err_msg=f"{case.id} value")
    mine = tensor_grads(case, arrays, W)
    for k, (t, g) in enumerate(zip(grads, mine)):
        np.testing.assert_allclose(t, g, rtol=1e-8, atol=1e-8,
                                   err_msg=f"{case.id} gradient of input {case.diff[k]}")
    return "ran"


def _result(case):
    if case.id not in _RESULTS:
        try:
            _RESULTS[case.id] = _check(case)
        except Exception:
            _RESULTS[case.id] = "failed"
            raise
    return _RESULTS[case.id]


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_case_matches_torch(case, interpreted):
    r = _result(case)
    if r == "failed":
        pytest.fail(f"{case.id}: mismatch against torch (see the first failure)")
    if r != "ran":
        pytest.skip(r)


def test_enough_cases_ran(interpreted):
    for c in CASES:
        try:
            _result(c)
        except Exception:
            pass
    ran = sum(r == "ran" for r in _RESULTS.values())
    print(f"torch oracle: {ran} ran, {sum(r.startswith('skip') for r in _RESULTS.values())} "
          f"skipped, {sum(r == 'failed' for r in _RESULTS.values())} failed of {len(CASES)}")
    assert ran >= MIN_RAN, f"only {ran} of {len(CASES)} cases ran on torch"
