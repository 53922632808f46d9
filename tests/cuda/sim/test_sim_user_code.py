"""User programs on CUDA (not single ops): loops, integer arrays, tensor-mode indexing,
creation functions, and the errors for what the CUDA target cannot run.

Runs under Numba's CUDA simulator (``tests/cuda/test_cuda_sim.py`` starts ``tests/cuda/sim``
in a subprocess with ``NUMBA_ENABLE_CUDASIM=1``), or on a GPU with ``GRADJIT_TEST_GPU=1``.
Results are compared with the CPU path (itself checked against NumPy by the main suite)
or with NumPy; arrays are tiny (the simulator runs each GPU thread in Python).
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


def _euler(x):
    for _ in range(40):   # (unrolled by the trace; on the CPU folded into a scan)
        x = x + 0.01 * np.tanh(x)
    return x.sum()


def test_python_loop_runs_unrolled_on_cuda():
    """A plain Python loop is not a gj.scan the user wrote: CUDA runs it unrolled (folding
    it into a scan made the CUDA target refuse it as gj.scan)."""
    x = np.array([0.1, 0.5, -0.3])
    want = gj.grad(_euler)(x)
    np.testing.assert_allclose(gj.grad(_euler, device="cuda")(x), want, rtol=1e-12)
    np.testing.assert_allclose(gj.jit(_euler, device="cuda")(x), _euler(x), rtol=1e-12)
    # a transform inside a CUDA trace folds into the CUDA graph: stays unrolled too
    np.testing.assert_allclose(gj.jit(lambda x: gj.grad(_euler)(x), device="cuda")(x), want,
                               rtol=1e-12)


def test_refused_regions_name_the_users_construct():
    """gj.while_loop (a scan with a cond inside, once max_steps is given) and gj.fori_loop are
    named as the user wrote them, also from the reverse scan of gj.grad."""
    x = np.ones(3)
    progs = {"gj.while_loop": lambda x: gj.while_loop(lambda c: c.sum() < 10, lambda c: c * 2,
                                                      x, max_steps=10).sum(),
             "gj.fori_loop": lambda x: gj.fori_loop(0, 3, lambda i, c: c * 2, x).sum(),
             "gj.scan": lambda x: gj.scan(lambda c, _: (c * 2, None), x, length=3)[0].sum()}
    for name, f in progs.items():
        for t in (gj.grad(f, device="cuda"), gj.jit(f, device="cuda")):
            with pytest.raises(gj.GradjitError) as info:
                t(x)
            msg = str(info.value)
            assert msg.startswith(f"{name} runs on the CPU only") and "test_sim_user_code" in msg


def _index_cases(x, idx, mask, tgt):
    F = gj.nn.functional
    return {"index_select": lambda: x.index_select(1, idx), "x[:, idx]": lambda: x[:, idx],
            "x[[1, 0]]": lambda: x[[1, 0]], "x[:, mask]": lambda: x[:, mask],
            "gather": lambda: x.gather(1, idx.reshape(2, 1)), "take": lambda: x.take(idx),
            "cross_entropy": lambda: F.cross_entropy(x, tgt),
            "nll_loss": lambda: F.nll_loss(F.log_softmax(x, 1), tgt),
            "embedding": lambda: F.embedding(tgt, x.T),
            "conv1d": lambda: F.conv1d(x[None], x[:, None, :2].repeat(1, 2, 1)),
            "max_pool1d": lambda: F.max_pool1d(x[None], 2)}


def _index_results(device):
    xn = np.arange(6.0).reshape(2, 3) / 7
    x = gj.tensor(xn, device=device, requires_grad=True)
    idx = gj.tensor(np.array([0, 2]), device=device)
    mask = gj.tensor(np.array([True, False, True]), device=device)
    tgt = gj.tensor(np.array([2, 0]), device=device)
    out = {}
    for name, f in _index_cases(x, idx, mask, tgt).items():
        x.grad = None
        y = f()
        assert y.device == device, name
        (y * y).sum().backward()
        out[name] = (y.detach().cpu().numpy(), x.grad.cpu().numpy())
    return out


def test_tensor_indexing_on_cuda():
    """Integer and boolean indexing of CUDA tensors (and the nn functions built on it): the
    index arrays gradjit makes go to the device (each raised torch's device error)."""
    cpu, gpu = _index_results("cpu"), _index_results("cuda")
    for name in cpu:
        for g, c in zip(gpu[name], cpu[name]):
            np.testing.assert_allclose(g, c, rtol=1e-12, atol=1e-15, err_msg=name)


def test_cpu_index_tensor_beside_cuda_tensor():
    """A user's CPU tensor beside a CUDA tensor is still torch's error (index_select / gather
    and arithmetic); indexing x[idx] moves a CPU index along, as torch's."""
    x = gj.tensor(np.arange(6.0).reshape(2, 3), device="cuda")
    idx = gj.tensor(np.array([0, 2]))
    for f in (lambda: x.index_select(1, idx), lambda: x.gather(1, idx.reshape(2, 1)),
              lambda: x + gj.tensor(np.ones(3))):
        with pytest.raises(RuntimeError, match="same device"):
            f()
    with pytest.raises(RuntimeError, match="same device"):
        gj.tensor(np.ones((2, 3))).index_select(1, idx.cuda())
    np.testing.assert_array_equal(x[:, idx].cpu().numpy(), [[0.0, 2.0], [3.0, 5.0]])


def test_float16_is_refused_clearly():
    """NumPy's float math of uint8 / int8 gives float16, which the CUDA generator has no
    kernels for (the CPU runs such graphs on NumPy): a GradjitError naming the dtype, the
    remedy and the user's line, not the generator's NotImplementedError."""
    u8, f16 = np.array([4, 9], np.uint8), np.array([1.0, 2.0], np.float16)
    np.testing.assert_allclose(gj.jit(np.sqrt)(u8), [2.0, 3.0])   # (the CPU runs it)
    for t, a in ((gj.jit(lambda a: np.sqrt(a), device="cuda"), u8),
                 (gj.grad(lambda a: np.sin(a).sum(), device="cuda"), f16),
                 (gj.jit(lambda a: np.exp(a.astype(np.int8)), device="cuda"), u8.astype(float))):
        with pytest.raises(gj.GradjitError) as info:
            t(a)
        msg = str(info.value)
        assert "float16" in msg and "float32" in msg and "test_sim_user_code" in msg, msg


# (the simulator's int64 sums wrap, as the GPU's, and NumPy warns in the kernel's threads)
@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
def test_integer_and_bool_matmul_on_cuda():
    """Integer and bool products (a @ b, np.dot, np.matmul, einsum; tensors' @) run on CUDA
    with NumPy's dtype and values (the generator refused all but floats). uint64 beyond
    2**53 checks the int64 reinterpretation (a float64 path would lose bits)."""
    rng = np.random.default_rng(0)
    progs = [lambda a, b: a @ a, lambda a, b: np.dot(a, a.T), lambda a, b: np.matmul(a, b),
             lambda a, b: np.einsum("ij,bjk->bik", a, b)]
    for dt in (np.int64, np.int32, np.uint8, np.uint64, np.bool_):
        a = rng.integers(0, 5, (3, 3)).astype(dt)
        b = rng.integers(0, 5, (2, 3, 4)).astype(dt)
        if dt == np.uint64:
            a[0, 0] = 2**63 + 12345
        for f in progs:
            want = f(a, b)
            got = gj.jit(f, device="cuda")(a, b)
            assert got.dtype == want.dtype and np.array_equal(got, want), (dt, got, want)
    t = gj.tensor(np.arange(6).reshape(2, 3), device="cuda")
    np.testing.assert_array_equal((t @ t.T).cpu().numpy(), np.arange(6).reshape(2, 3)
                                  @ np.arange(6).reshape(2, 3).T)


def test_creation_functions_take_device():
    """torch's creation functions take device= (gj.tensor did, the others raised TypeError);
    *_like default to the input's device, as torch's."""
    from gradjit.tracer.tensor_device import Device
    made = {"zeros": gj.zeros(2, 3, device="cuda"), "ones": gj.ones((2,), device=Device("cuda")),
            "full": gj.full((2,), 3, device="cuda:0"), "empty": gj.empty(2, device="cuda"),
            "eye": gj.eye(2, dtype=gj.float64, device="cuda"),
            "arange": gj.arange(3, device="cuda"),
            "linspace": gj.linspace(0, 1, 3, device="cuda"),
            "logspace": gj.logspace(0, 1, 3, device="cuda"),
            "rand": gj.rand(2, device="cuda"), "randn": gj.randn(2, device="cuda"),
            "randint": gj.randint(0, 5, (2,), device="cuda"),
            "as_tensor": gj.as_tensor([1.0, 2.0], device="cuda"),
            "requires_grad": gj.zeros(2, device="cuda", requires_grad=True)}
    x = gj.tensor(np.ones((2, 3)), device="cuda")
    made.update({"zeros_like": gj.zeros_like(x), "ones_like": gj.ones_like(x),
                 "full_like": gj.full_like(np.ones(2), 2.0, device="cuda"),
                 "empty_like": gj.empty_like(x), "rand_like": gj.rand_like(x),
                 "randn_like": gj.randn_like(x)})
    for name, t in made.items():
        assert t.device == "cuda", name
    np.testing.assert_array_equal(made["eye"].cpu().numpy(), np.eye(2))
    np.testing.assert_array_equal(made["arange"].cpu().numpy(), [0, 1, 2])
    assert made["arange"].dtype == np.int64 and made["requires_grad"].requires_grad
    np.testing.assert_array_equal((x * gj.ones_like(x)).cpu().numpy(), np.ones((2, 3)))
    assert gj.ones_like(x, device="cpu").device == "cpu"
    assert gj.zeros(2, device="cpu").device == "cpu"
    with pytest.raises(ValueError, match="cpu, cuda"):
        gj.zeros(2, device="tpu")
