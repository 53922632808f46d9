"""CUDA gradients equal CPU gradients, under Numba's CUDA simulator.

Runs when ``NUMBA_ENABLE_CUDASIM=1`` was set before Numba was imported:
``tests/cuda/test_cuda_sim.py`` starts this module in such a subprocess (the
main test process has Numba's real CUDA target loaded). On a machine with a
GPU, ``GRADJIT_TEST_GPU=1`` runs the same tests on the real device instead
(``bench/gpu_device_run.sh`` does, with one process per core). Every op of the
gradcheck tables (the representative cases, and the first case of every other
op name) runs through ``gj.grad(..., device="cuda")`` and through the CPU
reference; results agree to 1e-10 relative in float64; the representative
cases also in float32, to 1e-5. Ops with no CUDA kernel must fail
with an error naming the op and the CUDA generator; ``CPU_ONLY`` lists them.
Inputs are small (the simulator runs each GPU thread in Python).
"""
from __future__ import annotations

import os

import numpy as np
import pytest

SIMULATED = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
ON_DEVICE = SIMULATED or os.environ.get("GRADJIT_TEST_GPU") == "1"
pytestmark = pytest.mark.skipif(not ON_DEVICE, reason="runs in the simulator subprocess of "
                                "test_cuda_sim.py, or on a GPU with GRADJIT_TEST_GPU=1")

if ON_DEVICE:
    import gradjit as gj
    from gradjit.runtime.coverage import cuda_cpu_only
    CPU_ONLY = cuda_cpu_only()
    from tests.runtime.test_ops_gradcheck import CASES, REPS
    # Every op: the representative cases, plus the first case of every other op name.
    _names = {c.name for c in REPS}
    EXTRA = []
    for _c in CASES:
        if _c.name not in _names and "empty" not in _c.tag:
            _names.add(_c.name)
            EXTRA.append(_c)
else:  # collected but skipped in the main process
    REPS, EXTRA, CPU_ONLY = [], [], set()
# float32 for every op on a real GPU; the simulator (Python per thread) takes the representatives.
ALL = ([(c, np.float64) for c in REPS + EXTRA]
       + [(c, np.float32) for c in (REPS if SIMULATED else REPS + EXTRA)])


# Eigen- and singular vectors are unique only up to sign; LAPACK (CPU) and the Jacobi
# kernels (CUDA) choose differently. A case whose value depends on those signs is
# checked on the device against central differences of the device's own forward.
SIGN_FREE = {"linalg_eigh", "linalg_svd"}


def _value(case, arrays, W, device):
    return np.asarray(gj.jit(lambda *a: (case.fn(*a) * W).sum(), device=device)(*arrays))


def _same_value(case, arrays, W):
    return np.allclose(_value(case, arrays, W, "cuda"), _value(case, arrays, W, None),
                       rtol=1e-6, atol=1e-9)


def _check_by_differences(case, arrays, W, gpu, dtype):
    if dtype != np.float64:
        return
    f = gj.jit(lambda *a: (case.fn(*a) * W).sum(), device="cuda")
    for k, i in enumerate(case.diff):
        fd = np.zeros_like(arrays[i])
        for idx in np.ndindex(arrays[i].shape):
            hi = [a.copy() for a in arrays]
            lo = [a.copy() for a in arrays]
            hi[i][idx] += 1e-6
            lo[i][idx] -= 1e-6
            fd[idx] = (np.asarray(f(*hi)) - np.asarray(f(*lo))) / 2e-6
        np.testing.assert_allclose(gpu[k], fd, rtol=1e-5, atol=1e-6, err_msg=f"gradient {k}")


def _grads(case, arrays, W, device):
    f = gj.grad(lambda *a: (case.fn(*a) * W).sum(), argnums=case.diff, device=device)
    return [np.asarray(g) for g in f(*arrays)]


@pytest.fixture
def interpreted_cpu(monkeypatch):
    """The CPU reference runs in the NumPy interpreter (no Numba compile per case; compiled
    CPU code is checked against it by the main suite). CUDA graphs ignore the setting."""
    monkeypatch.setenv("GRADJIT_EXECUTOR", "numpy")


@pytest.mark.parametrize("case,dtype", ALL,
                         ids=[f"{np.dtype(d).name}-{c.id}" for c, d in ALL])
def test_cuda_matches_cpu(case, dtype, interpreted_cpu):
    if SIMULATED and dtype == np.float32 and case.name.startswith("linalg_"):
        pytest.skip("float32 linear algebra: covered by the PTX tests; the simulator is slow")
    arrays = case.arrays(dtype=dtype)
    arrays = [a if i in case.diff else case.arrays()[i] for i, a in enumerate(arrays)]
    try:
        W = case.weights(arrays).astype(dtype)
        cpu = _grads(case, arrays, W, None)
    except Exception as exc:   # float32 not accepted by this op on the CPU either
        pytest.skip(f"CPU path rejects this case: {exc}")
    try:
        gpu = _grads(case, arrays, W, "cuda")
    except NotImplementedError as exc:
        assert "CUDA" in str(exc)
        assert any(op in str(exc) for op in CPU_ONLY), f"unlisted CPU-only op: {exc}"
        return
    rtol, atol = (1e-10, 1e-12) if dtype == np.float64 else (1e-5, 1e-6)
    if case.name in SIGN_FREE and not _same_value(case, arrays, W):
        return _check_by_differences(case, arrays, W, gpu, dtype)
    for k, (g, c) in enumerate(zip(gpu, cpu)):
        assert g.dtype == c.dtype and g.shape == c.shape
        np.testing.assert_allclose(g, c, rtol=rtol, atol=atol * max(1.0, np.abs(c).max(initial=0)),
                                   err_msg=f"gradient {k}")


if ON_DEVICE:
    from tests.cuda.nn_cases import NN_CASES
else:
    NN_CASES = {}


@pytest.mark.parametrize("name", sorted(NN_CASES))
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_nn_cuda_matches_cpu(name, dtype):
    fn, arrays, argnums = NN_CASES[name](dtype)
    cpu = gj.value_and_grad(fn, argnums=argnums)(*arrays)
    gpu = gj.value_and_grad(fn, argnums=argnums, device="cuda")(*arrays)
    rtol = 1e-10 if dtype == np.float64 else 1e-5
    for c, g in zip([cpu[0], *cpu[1]], [gpu[0], *gpu[1]]):
        assert isinstance(g, np.ndarray) and g.dtype == c.dtype
        np.testing.assert_allclose(g, c, rtol=rtol, atol=rtol * max(1.0, np.abs(c).max()))


def test_tensor_mode_on_cuda():
    """Tensors on the device: eager forward on the GPU, compiled backward, grads on device."""
    rng = np.random.default_rng(0)
    xn, wn = rng.standard_normal((4, 3)), rng.standard_normal((3, 2))
    x = gj.tensor(xn, device="cuda", requires_grad=True)
    w = gj.tensor(wn, device="cuda", requires_grad=True)
    assert x.device == "cuda" and str(x.device) == "cuda:0" and x.is_cuda
    loss = (np.tanh(x @ w) ** 2).sum()
    assert loss.device == "cuda" and "device='cuda:0'" in repr(loss)
    loss.backward()
    assert x.grad.device == "cuda" and w.grad.device == "cuda"
    xc, wc = gj.tensor(xn, requires_grad=True), gj.tensor(wn, requires_grad=True)
    (np.tanh(xc @ wc) ** 2).sum().backward()
    np.testing.assert_allclose(x.grad.cpu().numpy(), xc.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(w.grad.cpu().numpy(), wc.grad.numpy(), rtol=1e-12)
    (np.tanh(x @ w) ** 2).sum().backward()        # accumulates on the device
    np.testing.assert_allclose(x.grad.cpu().numpy(), 2 * xc.grad.numpy(), rtol=1e-12)
    with pytest.raises(RuntimeError, match="same device"):
        x + gj.tensor(np.ones((4, 3)))
    assert (x * 2.0).device == "cuda" and (x + gj.tensor(1.0)).device == "cuda"  # 0-d CPU moves
    with pytest.raises(TypeError, match="cpu"):
        x.detach().numpy()
    assert x.cpu().grad_fn.name() == "ToCopyBackward0"   # differentiable, as torch
    y = x.detach().cpu()
    assert y.device == "cpu" and np.array_equal(y.numpy(), xn)
    assert x.detach().to("cuda").device == "cuda"
    assert abs(x.sum().item() - xn.sum()) < 1e-12


def test_device_arrays_in_and_out():
    """Device arrays given to a cuda transform come back as device arrays (no host trip)."""
    from numba import cuda
    x = np.linspace(-1, 1, 12).reshape(3, 4)
    f = gj.grad(lambda x: (np.sin(x) * x).sum(), device="cuda")
    g = f(cuda.to_device(x))
    assert not isinstance(g, np.ndarray) and hasattr(g, "copy_to_host")
    np.testing.assert_allclose(g.copy_to_host(), np.sin(x) + x * np.cos(x), rtol=1e-12)
    np.testing.assert_allclose(f(x), np.sin(x) + x * np.cos(x), rtol=1e-12)
    jf = gj.jit(lambda x: (x.sum(axis=0), x.max()), device="cuda")
    s, m = jf(x)
    np.testing.assert_allclose(s, x.sum(axis=0))
    assert m.shape == () and m == x.max()


def test_device_copies_are_differentiable():
    """x.cuda() / .cpu() on tensors with history: the gradient comes back across, as torch."""
    rng = np.random.default_rng(1)
    xn, wn = rng.standard_normal((3, 4)), rng.standard_normal((4, 2))
    x, w = gj.tensor(xn, requires_grad=True), gj.tensor(wn, requires_grad=True)
    ((np.tanh(x @ w) ** 2).sum() + (x * x).sum()).backward()
    rx, rw = x.grad.numpy(), w.grad.numpy()

    x, w = gj.tensor(xn, requires_grad=True), gj.tensor(wn, device="cuda", requires_grad=True)
    xc = x.cuda()
    assert xc.grad_fn.name() == "ToCopyBackward0" and not xc.is_leaf and xc.device == "cuda"
    ((np.tanh(xc @ w) ** 2).sum() + (x * x).sum().cuda()).backward()
    assert x.grad.device == "cpu" and w.grad.device == "cuda"
    np.testing.assert_allclose(x.grad.numpy(), rx, rtol=1e-12)
    np.testing.assert_allclose(w.grad.cpu().numpy(), rw, rtol=1e-12)

    x, w = gj.tensor(xn, device="cuda", requires_grad=True), gj.tensor(wn, requires_grad=True)
    loss = (np.tanh((x * 1.0).cpu() @ w) ** 2).sum() + (x * x).sum().cpu()
    gx, gw = gj.autograd.grad(loss, [x, w])
    assert gx.device == "cuda" and gw.device == "cpu"
    np.testing.assert_allclose(gx.cpu().numpy(), rx, rtol=1e-12)
    np.testing.assert_allclose(gw.numpy(), rw, rtol=1e-12)

    x = gj.tensor(xn, requires_grad=True)
    loss = (x.cuda() * 2.0).sum()
    loss.backward()
    np.testing.assert_allclose(x.grad.numpy(), 2.0)
    loss.backward()   # (nothing saved is needed: a second backward runs, as torch's)
    np.testing.assert_allclose(x.grad.numpy(), 4.0)
    xc = x.cuda()
    loss = (xc * xc).sum()   # (the product saves its operands: freed by the first backward)
    loss.backward()
    with pytest.raises(RuntimeError, match="second time"):
        loss.backward()


def test_register_blocked_matmul_kernel():
    """Products with >= cm.BIG outputs take the 64 x 64 register-blocked kernel (also with a
    transposed operand and batched)."""
    from numba import cuda

    from gradjit.lowering import cuda_device as cm
    rng = np.random.default_rng(3)
    m, k, n = 128, 9, 128
    assert m * n >= cm.BIG
    A, B = rng.standard_normal((m, k)), rng.standard_normal((n, k))
    out = cuda.device_array((m, n))
    cm.mm(cuda.to_device(A), cuda.to_device(B).T, out)
    np.testing.assert_allclose(out.copy_to_host(), A @ B.T, rtol=1e-12, atol=1e-12)
    A3 = rng.standard_normal((1, m, k)).astype(np.float32)
    B3 = rng.standard_normal((1, k, n)).astype(np.float32)
    o3 = cuda.device_array((1, m, n), np.float32)
    cm.bmm(cuda.to_device(A3), cuda.to_device(B3), o3)
    np.testing.assert_allclose(o3.copy_to_host(), A3 @ B3, rtol=1e-5, atol=1e-5)


def test_transpose_is_a_view():
    """cm.tview: the 2-D transpose generated code uses shares the array's memory (numba-cuda's
    DeviceNDArray.T copies through a kernel it compiles on every call)."""
    from numba import cuda
    from gradjit.lowering import cuda_device as cm
    a = np.arange(12.0).reshape(3, 4)
    d = cuda.to_device(a)
    t = cm.tview(d)
    assert t.shape == (4, 3)
    np.testing.assert_array_equal(t.copy_to_host(), a.T)
    out = cuda.device_array((4, 4))
    cm.mm(t, d, out)   # a kernel reads the strided view
    np.testing.assert_allclose(out.copy_to_host(), a.T @ a)
    if not SIMULATED:
        assert t.device_ctypes_pointer.value == d.device_ctypes_pointer.value
        d[0, 1] = -1.0   # a write through the array shows through the view
        assert t.copy_to_host()[1, 0] == -1.0


def test_workspace_reuse_keeps_results_fresh():
    """Intermediates come from the module's workspace, reused call after call; results never
    do: a later call leaves an earlier call's gradients as they were."""
    from numba import cuda
    from gradjit.lowering import cuda_device as cm
    rng = np.random.default_rng(3)

    def loss(x, w, b):
        h = np.tanh(x @ w + b)
        return (h.T @ h).sum() + (h * h).mean()
    ins = [rng.standard_normal(s) for s in ((5, 4), (4, 3), (3,))]
    g = gj.grad(loss, argnums=(1, 2), device="cuda")
    first = g(*[cuda.to_device(a) for a in ins])
    kept = [a.copy_to_host() for a in first]
    ins2 = [a * -0.7 for a in ins]
    second = [a.copy_to_host() for a in g(*[cuda.to_device(a) for a in ins2])]
    for a, k in zip(first, kept):
        np.testing.assert_array_equal(a.copy_to_host(), k)
    cpu = gj.grad(loss, argnums=(1, 2))
    for got, want in zip(kept + second, list(cpu(*ins)) + list(cpu(*ins2))):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    assert any(any(b is not None for b in ws.bufs) for ws in cm.Workspace.live)
    from gradjit.runtime.cuda import empty_cache
    empty_cache()
    assert all(all(b is None for b in ws.bufs) for ws in cm.Workspace.live)
    again = [a.copy_to_host() for a in g(*[cuda.to_device(a) for a in ins])]
    for got, want in zip(again, kept):
        np.testing.assert_array_equal(got, want)


def test_torch_style_eigh_reads_the_named_triangle():
    """gj.linalg.eigh(A, UPLO) reads one triangle of a non-symmetric A, on CUDA as on the
    CPU (the Jacobi kernel once read the lower one for 'U' too)."""
    a = np.random.default_rng(2).standard_normal((2, 4, 4))
    for uplo in "LU":
        w = gj.jit(lambda a: gj.linalg.eigh(a, uplo)[0], device="cuda")(a)
        np.testing.assert_allclose(w, np.linalg.eigvalsh(a, uplo), rtol=1e-10, atol=1e-12)
