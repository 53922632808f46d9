"""CUDA requests where CUDA cannot run fail clearly; CPU code never needs CUDA."""
from __future__ import annotations

import os

import numpy as np
import pytest

import gradjit as gj
from gradjit.runtime import cuda as gcuda

pytestmark = pytest.mark.skipif(os.environ.get("NUMBA_ENABLE_CUDASIM") == "1",
                                reason="the simulator makes CUDA available")


def _unavailable(monkeypatch, why):
    monkeypatch.setattr(gcuda, "_REASON", why)


def test_missing_package_is_named(monkeypatch):
    _unavailable(monkeypatch, "the CUDA target needs the 'numba-cuda' package, which is not "
                              "installed (pip install 'gradjit[cuda]')")
    with pytest.raises(gj.GradjitError, match=r"numba-cuda.*gradjit\[cuda\]"):
        gj.grad(lambda x: (x * x).sum(), device="cuda")
    with pytest.raises(gj.GradjitError, match="device 'cuda' requested"):
        gj.tensor(np.ones(3), device="cuda")
    with pytest.raises(gj.GradjitError, match="numba-cuda"):
        gj.tensor(np.ones(3)).to("cuda")


def test_no_gpu_is_explained():
    ok, why = gcuda.available()
    if ok:
        pytest.skip("a CUDA device is available here")
    with pytest.raises(gj.GradjitError) as info:
        gj.jit(lambda x: x + 1, device="cuda")
    msg = str(info.value)
    assert "device 'cuda' requested" in msg and ("numba-cuda" in msg or "NUMBA_ENABLE_CUDASIM" in msg)


def test_bad_device_names():
    with pytest.raises(ValueError, match="cpu, cuda"):
        gj.tensor(np.ones(2), device="tpu")
    with pytest.raises(ValueError, match="cuda:1"):
        gj.grad(lambda x: x.sum(), device="cuda:1")


def test_cpu_tensors_report_cpu():
    t = gj.tensor(np.ones(2))
    assert t.device == "cpu" and t.device != "cuda"
    assert str(t.device) == "cpu" and not t.is_cuda
    assert t.cpu() is t and t.to("cpu") is t and t.to(np.float32).dtype == np.float32


def test_regions_are_refused_on_cuda():
    from gradjit.runtime.cuda import compile_graph_cuda
    from gradjit.tracer.control_flow import scan
    from gradjit.tracer.trace import trace
    from gradjit.tracer.coercion import traced_numpy
    g, (x,), _ = trace([np.ones(3)])
    with traced_numpy(g):
        g.outputs = [scan(lambda c, _: (c * 2.0, None), x, None, length=3)[0].value]
    with pytest.raises(gj.GradjitError, match="CPU only"):
        compile_graph_cuda(g)


def test_coverage_lists_cuda_for_every_entry():
    from gradjit.runtime.coverage import cuda_cpu_only, report, rows
    # loops and branches with bodies are CPU-only for now (and the while loop's step check,
    # made only beside one); device="cuda" refuses them clearly
    from gradjit.tracer.control_flow import CPU_ONLY_OPS
    table = rows()
    missing = [r.op for r in table if r.cpu and not r.cuda and r.op not in CPU_ONLY_OPS]
    assert not missing, missing
    assert cuda_cpu_only() == set(CPU_ONLY_OPS)
    text = report(table)
    assert " cuda " in text.splitlines()[0] and "CUDA code generation" in text.splitlines()[-1]


def test_generated_cuda_source_is_readable_without_numba_cuda():
    """Rendering needs no numba-cuda: one fused grid-stride kernel, a two-pass reduction."""
    from gradjit.lowering.codegen_cuda import generate_cuda
    x = np.linspace(-1, 1, 300)
    _, opt, _ = gj.value_and_grad(lambda x: (np.tanh(x * 2.0) ** 2).sum()).graphs(x)
    src = generate_cuda(opt).source
    assert src.count("@cuda.jit\n") == 2            # fused loop + final pass
    assert "stride = cuda.gridsize(1)" in src and "cuda.shared.array(256" in src
    assert "math.tanh(" in src and "  # %" in src              # libm on the GPU; IR comments
    assert "2.0" not in src.split("def entry")[0].replace("numba.float64", "")  # consts are args


def test_a_cuda_library_that_does_not_load_is_a_reason_not_a_raw_error():
    from gradjit.runtime import cuda as gcuda

    class Missing:
        @staticmethod
        def is_available():
            raise OSError("libcudart.so: cannot open shared object file")   # (as numba-cuda's)

    why = gcuda._probe(Missing)
    assert "could not load the CUDA libraries" in why and "libcudart.so" in why
    assert "NUMBA_ENABLE_CUDASIM=1" in why

    class NoGPU:
        @staticmethod
        def is_available():
            return False
    assert "no usable CUDA GPU" in gcuda._probe(NoGPU)


def test_an_integer_power_to_a_traced_exponent_is_refused_on_cuda():
    # NumPy raises at a negative exponent; a kernel cannot, so it would answer 0 or 1
    from gradjit.lowering.codegen_cuda import generate_cuda
    _, opt, _ = gj.jit(lambda a, n: a ** n).graphs(np.arange(3), np.arange(3))
    with pytest.raises(NotImplementedError, match="pow.Tensor_Tensor.*traced integer exponent"):
        generate_cuda(opt)
