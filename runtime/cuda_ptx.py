"""Compile every kernel of a generated CUDA module to PTX, without a GPU.

Contract
- ``ptx_check(graph, cc=(9, 0)) -> [(kernel name, argument types, PTX chars)]``
  renders the graph (``lowering/codegen_cuda.py``), then runs its host
  ``entry`` against stand-ins: ``cuda.device_array`` and the module's
  workspace return shape-only arrays (``cm.tview`` transposes them), and every
  launch (module kernels and the shared ``cm.mm`` / ``cm.bmm``) records its
  argument types instead of running. Each recorded kernel is then compiled
  with ``numba.cuda.compile_ptx`` (NVVM from the CUDA toolkit), so code the
  simulator accepts but a real GPU compiler rejects fails here. Needs
  ``numba-cuda`` and NVVM, not a driver; not under the simulator.
- Raises whatever NVVM / Numba raise, with the kernel's name prepended.
"""
from __future__ import annotations

import contextlib
import types

import numba
import numpy as np


class _Arr:
    """Shape, dtype and layout of a device array; enough for the host launcher."""

    def __init__(self, shape, dtype, layout="C"):
        self.shape, self.dtype, self.layout = tuple(shape), np.dtype(dtype), layout
        self.ndim = len(self.shape)
        self.size = int(np.prod(self.shape)) if self.shape else 1

    def reshape(self, shape):
        return _Arr(shape if isinstance(shape, tuple) else (shape,), self.dtype)

    @property
    def T(self):
        return _Arr(self.shape[::-1], self.dtype, "A")

    def copy_to_device(self, other):
        pass

    def nbtype(self):
        return numba.types.Array(numba.from_dtype(self.dtype), self.ndim, self.layout)


class _Launch:
    def __init__(self, name, kernel, log):
        self.name, self.kernel, self.log = name, kernel, log

    def __getitem__(self, config):
        def record(*args):
            self.log.append((self.name, self.kernel, tuple(
                a.nbtype() if isinstance(a, _Arr) else numba.typeof(a) for a in args)))
        return record


def ptx_check(graph, cc=(9, 0)):
    from numba import cuda

    from gradjit.lowering import cuda_device
    from gradjit.lowering.codegen_cuda import generate_cuda
    from gradjit.runtime.cuda import _load_target, load_module
    why = _load_target()   # numba-cuda's registries, loaded as a CUDA request would
    if why:
        raise RuntimeError(why)
    gen = generate_cuda(graph)
    mod = load_module(gen.source)
    log = []
    fake_cuda = types.SimpleNamespace(device_array=lambda shape, dtype: _Arr(
        shape if isinstance(shape, tuple) else (shape,), dtype))

    def shared(kind):
        def launch(a, b, out):   # both the small-tile and the register-blocked kernel
            t = {"f4": "f32", "f8": "f64"}.get(out.dtype.str[1:], "int")
            for name in (f"{kind}_{t}", f"{kind}_big_{t}")[:1 if t == "int" else 2]:
                log.append((f"cm.{name}", getattr(cuda_device, name),
                            (a.nbtype(), b.nbtype(), out.nbtype())))
        return launch

    env = dict(vars(mod))
    env["cuda"] = fake_cuda
    env["cm"] = types.SimpleNamespace(   # index ops' bounds flags: a stand-in, checked never
        mm=shared("mm"), bmm=shared("bmm"), tview=lambda a: a.T,
        index_flags=lambda n: _Arr((n,), np.int32), check_indices=lambda flags, checks: None)
    if "_WS" in env:   # the module's workspace hands out stand-ins too
        env["_WS"] = contextlib.nullcontext(lambda slot, shape, dtype: fake_cuda.device_array(shape, dtype))
    if "cl" in env:   # linear algebra / sort kernels (lowering/cuda_linalg.py)
        env["cl"] = types.SimpleNamespace(**{k: _Launch(f"cl.{k}", v, log) for k, v in
                                             vars(env["cl"]).items() if hasattr(v, "py_func")})
    for k, v in vars(mod).items():
        if hasattr(v, "py_func") and k != "entry":
            env[k] = _Launch(k, v, log)
    entry = types.FunctionType(mod.entry.__code__, env, "entry")
    entry(*[_Arr(v.shape if v.ndim else (1,), v.dtype) for v in graph.inputs],
          _Arr((len(gen.consts),), np.float64))
    results = []
    for name, kernel, argtypes in log:
        code = kernel.py_func.__code__
        key = (code.co_code, code.co_consts, code.co_names, code.co_varnames, argtypes, cc,
               kernel.py_func.__module__ if name.startswith("c") else "")
        size = _DONE.get(key)
        if size is None:   # identical kernels (same code, same types) compile once per process
            try:
                ptx, _ = cuda.compile_ptx(kernel.py_func, argtypes, cc=cc)
            except Exception as exc:
                raise type(exc)(f"PTX compilation of kernel {name} {argtypes} failed: {exc}") \
                    from exc
            size = _DONE[key] = len(ptx)
        results.append((name, argtypes, size))
    return results


_DONE = {}
