"""The CUDA target at run time: availability, device arrays, compiled graphs.

Contract
- ``require(what)`` raises ``GradjitError`` saying what is missing (the
  ``numba-cuda`` package: ``pip install 'gradjit[cuda]'``; or a GPU, with the
  hint that ``NUMBA_ENABLE_CUDASIM=1`` set before Numba is imported runs the
  simulator). Nothing CUDA is imported until a CUDA request is made, so the
  CPU path never depends on it.
- ``compile_graph_cuda(graph) -> CudaExecutable``: the graph rendered by
  ``lowering/codegen_cuda.py``, written to ``<cache dir>/gjc_<content
  hash>.py`` and loaded under the same rules as CPU modules
  (``runtime/compiler.generated_module``: executed from the source, the entry's
  lock held). Kernels compile on first launch and are cached on disk through the
  verified store (runtime/numba_cache.py, numba-cuda's ``CUDACache``); ``STATS
  ["cuda_loads"]`` counts modules imported in this process. Graphs with region
  nodes (gj.scan & co.) or float16 values raise a ``GradjitError`` naming the
  construct or the op, at the user's line.
- ``CudaExecutable(arrays)`` takes host or device arrays (host ones are
  copied once per call), keeps ``consts`` on the device, and returns device
  arrays; 0-d values travel as 1-element arrays inside and are reshaped to
  ``()`` at the boundary. An index out of bounds (``IndexBoundsError``, from
  the launcher's check) leaves it at the user's line (``compiler.locate``).
- ``empty_cache()`` frees the intermediate device buffers compiled functions
  keep between calls (``lowering/cuda_device.Workspace``).
- ``run_op(op, arrays, attrs)``: one op on device arrays (eager tensors on
  CUDA), through the same pipeline as a one-node graph, cached per op,
  attributes and input types.
"""
from __future__ import annotations

import hashlib

import numpy as np

from gradjit.runtime.compiler import STATS, generated_module, locate
from gradjit.runtime.memory import Bounded
from gradjit.tracer import cache_store
from gradjit.tracer.device import is_device_array
from gradjit.tracer.tensor_device import _Spec   # shape and dtype, no data
from gradjit.tracer.ops_index import IndexBoundsError
from gradjit.tracer.registry import GradjitError

STATS.setdefault("cuda_loads", 0)
_REASON = None


def available():
    """(True, '') when CUDA requests can run here (a GPU, or the simulator), else
    (False, why)."""
    global _REASON
    if _REASON is None:
        try:
            import numba_cuda  # noqa: F401  (NVIDIA's maintained target, not numba's own)
            from numba import cuda
        except ImportError:
            _REASON = ("the CUDA target needs the 'numba-cuda' package, which is not installed "
                       "(pip install 'gradjit[cuda]')")
        else:
            _REASON = _probe(cuda)
    return _REASON == "", _REASON


def _probe(cuda):
    """'' when ``cuda`` (numba.cuda) can run kernels here, else why not, in words; a CUDA
    library that fails to load (libcudart, NVVM ...) is a reason, not a raw error."""
    hint = ("install a CUDA toolkit or NVIDIA's runtime wheel (pip install nvidia-cuda-runtime), "
            "or, without a GPU, set NUMBA_ENABLE_CUDASIM=1 before numba is imported (the simulator)")
    try:
        usable = cuda.is_available()
    except Exception as e:   # noqa: BLE001 - e.g. DynamicLibNotFoundError: libcudart.so
        return f"numba-cuda could not load the CUDA libraries ({type(e).__name__}: {e}); {hint}"
    if not usable:
        return ("numba-cuda found no usable CUDA GPU or driver (numba.cuda.is_available() is "
                "False); to run CUDA code without a GPU set NUMBA_ENABLE_CUDASIM=1 before numba "
                "is imported (the simulator)")
    try:
        return _load_target()
    except Exception as e:   # noqa: BLE001 - as above
        return f"numba-cuda could not load its CUDA target ({type(e).__name__}: {e}); {hint}"


def _load_target():
    """Load numba-cuda's typing and lowering registries now; '' or why they failed.

    numba-cuda (0.30.4 and earlier) registers ``np.row_stack`` unconditionally for
    NumPy >= 2.0, and NumPy 2.5 removed that alias: on the lent H200 (NumPy 2.5.2)
    every kernel's first compile raised AttributeError inside numba-cuda. The alias
    is put back only while the registries load (one module import, once per
    process), then removed, so user code still sees NumPy as it is."""
    from numba import config
    if config.ENABLE_CUDASIM:   # the simulator runs kernels as Python: no target to load
        return ""
    from numba.cuda.descriptor import cuda_target
    shim = not hasattr(np, "row_stack")
    if shim:
        np.row_stack = np.vstack
    try:
        cuda_target.target_context.refresh()
    except Exception as exc:   # noqa: BLE001  (a numba-cuda / NumPy mismatch: say so, once)
        import numba_cuda
        return (f"numba-cuda {numba_cuda.__version__} failed to load its CUDA target with NumPy "
                f"{np.__version__} ({type(exc).__name__}: {exc}); a numba-cuda release made for "
                f"this NumPy, or an older NumPy, is needed")
    finally:
        if shim:
            del np.row_stack
    return ""


def empty_cache():
    """Free the intermediate device buffers every compiled CUDA function keeps between
    calls (``cm.Workspace``); each allocates again on its next call."""
    import sys
    device = sys.modules.get("gradjit.lowering.cuda_device")
    if device is not None:   # nothing was compiled for CUDA otherwise
        device.empty_cache()


def require(what):
    ok, why = available()
    if not ok:
        raise GradjitError(f"{what}: device 'cuda' requested, but {why}")


def to_device(a):
    from numba import cuda
    if is_device_array(a):
        return a
    a = np.asarray(a)   # (np.ascontiguousarray would make a 0-d array 1-d)
    return cuda.to_device(a if a.flags.c_contiguous else a.copy(order="C"))


def to_host(a):
    return a.copy_to_host() if is_device_array(a) else np.asarray(a)


def load_module(source):
    import sys
    try:
        from numba.cuda.dispatcher import CUDACache
    except ImportError:   # (the simulator: its kernels have no disk cache)
        CUDACache = None
    h = hashlib.sha256(source.encode()).hexdigest()[:32]
    name = f"gradjit_cuda_{h}"
    if name not in sys.modules:
        store = cache_store.current()
        with cache_store.entry_lock(store, f"gjc_{h}"):
            if name not in sys.modules:
                generated_module(store, f"gjc_{h}", name, source, CUDACache)
                STATS["cuda_loads"] += 1
    return sys.modules[name]


class CudaExecutable:
    """A graph compiled for CUDA. Call with one array per graph input."""

    device = "cuda"

    def __init__(self, graph):
        from gradjit.lowering.codegen_cuda import generate_cuda
        gen = generate_cuda(graph)
        self.graph, self.source = graph, gen.source
        self.fn = load_module(gen.source).entry
        self.consts = to_device(gen.consts)
        self.in_types = [(v.shape, v.dtype) for v in graph.inputs]
        self.zero_d = [v.ndim == 0 for v in graph.outputs]

    def _arg(self, a, shape, dtype):
        if is_device_array(a):
            if a.dtype != dtype:
                raise GradjitError(f"CUDA graph {self.graph.name!r}: a device array of dtype "
                                   f"{a.dtype} where {np.dtype(dtype).name} was compiled for")
            return a.reshape((1,)) if a.ndim == 0 else a
        a = np.asarray(a, dtype=dtype)
        return to_device(a.reshape((1,)) if a.ndim == 0 else a)

    def __call__(self, arrays, callbacks=None):
        args = [self._arg(a, s, d) for a, (s, d) in zip(arrays, self.in_types)]
        try:
            res = self.fn(*args, self.consts)
        except IndexBoundsError as e:   # (the launcher's check: add the user's line)
            raise locate(e, self.graph, [to_host(a) for a in arrays]) from None
        return [r.reshape(()) if z else r for r, z in zip(res, self.zero_d)]


def compile_graph_cuda(graph):
    from gradjit.tracer.control_flow import REGION_OPS
    region = next((n for n in graph.nodes if n.op in REGION_OPS), None)
    if region is not None:
        # (a scan says which construct made it: gj.scan, gj.fori_loop, gj.while_loop)
        name = region.attrs.get("origin") or {
            "scan.default": "gj.scan / gj.fori_loop", "cond.default": "gj.cond",
            "call.default": "gj.checkpoint", "while.default": "gj.while_loop"}[region.op]
        raise GradjitError(f"{name} runs on the CPU only: the CUDA target has no loop or "
                           f"branch regions yet (use device='cpu')", region.site)
    _refuse_float16(graph)
    require(f"compiling graph {graph.name!r}")
    return CudaExecutable(graph)


def _refuse_float16(graph):
    """The CUDA generator has no float16 kernels (on the CPU such a graph runs on NumPy's
    interpreter: runtime/tiers.holds_float16; CUDA code has no host fallback): say where
    the float16 comes from and what to do, at the user's line."""
    f2 = np.dtype(np.float16)
    hint = ("the CUDA target has no float16 kernels; cast to float32 first "
            "(x.astype(np.float32)), or use device='cpu'")
    for k, v in enumerate(graph.inputs):
        if v.dtype == f2:
            reader = next((n for n in graph.nodes if v in n.inputs), None)
            what = "a constant the function reads" if v in graph.constants else f"input {k}"
            raise GradjitError(f"{what} is {v.type_str()}: {hint}",
                               reader.site if reader is not None else None)
    for n in graph.nodes:
        out = next((o for o in n.outputs if o.dtype == f2), None)
        if out is not None:
            ins = ", ".join(v.type_str() for v in n.inputs)
            raise GradjitError(f"op {n.op!r} on ({ins}) gives {out.type_str()} (NumPy's float "
                               f"math of int8 / uint8 / bool arrays gives float16): {hint}",
                               n.site)


_OPS = Bounded()


def run_op(op_name, arrays, attrs):
    """Eager CUDA execution of one op: a one-node graph, compiled once per signature."""
    from gradjit.lowering.passes import optimize
    from gradjit.tracer.dispatch import apply
    from gradjit.tracer.trace import trace
    key = (op_name, repr(sorted(attrs.items())),
           tuple((tuple(a.shape), np.dtype(a.dtype).str) for a in arrays))
    exe = _OPS.get(key)
    if exe is None:
        g, tracers, _ = trace([_Spec(a) for a in arrays], name=op_name)
        out = apply(op_name, tracers, dict(attrs))
        outs = out if isinstance(out, tuple) else (out,)
        g.outputs = [t.value for t in outs]
        opt = optimize(g)
        consts = [to_device(np.asarray(opt.constants[v])) for v in opt.inputs[len(arrays):]]
        exe = _OPS[key] = (compile_graph_cuda(opt), consts)
    exe, consts = exe
    return exe(list(arrays) + consts)
