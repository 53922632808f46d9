"""Device-side helpers that generated CUDA modules import as ``cm``.

Contract
- Imported only when a CUDA module is built or loaded (it imports
  ``numba.cuda``, which needs the optional ``numba-cuda`` package).
- Scalar helpers are ``cuda.jit(device=True, inline="always")`` so they
  inline into the kernel that calls them (``cuda.compile_ptx`` of a kernel
  needs no GPU then). ``floor`` / ``ceil`` / ``trunc`` / ``rint`` / ``fmod`` /
  ``logaddexp``: NumPy's scalar ufuncs are not available on CUDA, so the
  emitter rewrites ``np.floor(`` ... to ``cm.floor(`` ...; on a real device
  they are libdevice calls, under the simulator (whose libdevice is a stub)
  NumPy's.
- The special functions of ``lowering/special_cpu.py`` (erfinv, digamma,
  polygamma, remainder, logaddexp, logaddexp2, xlogy, clamp, logit) are the
  same Python source compiled as device functions: each CPU function's code
  object is rebound to globals where the other special functions are device
  functions too, so there is one definition of the math.
- Generic kernels that every module shares: ``mm_f32`` / ``mm_f64`` (tiled
  shared-memory matmul of two 2-D arrays of any strides) and ``bmm_*`` (the
  same with the batch on grid z). ``TILE`` fixes their block shape. Products
  with at least ``BIG`` outputs use the register-blocked ``mm_big_*`` /
  ``bmm_big_*`` (64 x 64 tiles, 4 x 4 outputs per thread).
- ``tview(a)``: a 2-D transpose as a strided view (numba-cuda's ``.T`` copies).
- ``Workspace(n)``: a generated module's reusable intermediate buffers;
  ``empty_cache()`` frees them all (``GRADJIT_CUDA_POOL=0``: no reuse).
- ``index_flags(n)`` / ``check_indices(flags, checks)``: the index ops' bounds
  flags of one launcher call (``codegen_cuda_kernels.py``): made zeroed, read
  after the kernels; a set flag raises ``IndexBoundsError`` for its op.
"""
from __future__ import annotations

import math
import os
import threading
import types
import weakref

import numba
import numpy as np
from numba import cuda

from gradjit.lowering import special_cpu
from gradjit.tracer.ops_index import wrap_index

SIMULATED = os.environ.get("NUMBA_ENABLE_CUDASIM", "0") == "1"
TILE = 16
_dev = cuda.jit(device=True, inline="always")

if SIMULATED:
    floor, ceil, trunc, rint, fmod = np.floor, np.ceil, np.trunc, np.rint, np.fmod
else:  # pragma: no cover - needs NVVM; exercised by the PTX tests
    from numba.cuda.cudadrv.devicearray import DeviceNDArray
    from numba.cuda import libdevice as _ld

    @_dev
    def floor(x):
        return _ld.floor(x)

    @_dev
    def ceil(x):
        return _ld.ceil(x)

    @_dev
    def trunc(x):
        return _ld.trunc(x)

    @_dev
    def rint(x):
        return _ld.rint(x)

    @_dev
    def fmod(x, y):
        return _ld.fmod(x, y)


@_dev
def logaddexp(a, b):
    if a == b:   # also both infinite: avoids inf - inf
        return a + math.log(2.0)
    m = a if a > b else b
    return m + math.log1p(math.exp(-abs(a - b)))


def _device_specials():
    """Device twins of special_cpu's jitted functions (same code objects)."""
    names = [n for n, f in vars(special_cpu).items() if hasattr(f, "py_func")]
    env = dict(vars(special_cpu))
    # NumPy scalar ufuncs they call have no CUDA lowering: the helpers above stand in.
    shim = types.ModuleType("gradjit_cuda_np")   # Numba types module attributes, not namespaces
    for k, v in dict(fmod=fmod, floor=floor, ceil=ceil, trunc=trunc, rint=rint, inf=np.inf,
                     nan=np.nan, float64=np.float64, float32=np.float32).items():
        setattr(shim, k, v)
    env["np"] = shim
    out = {}
    for n in names:
        py = getattr(special_cpu, n).py_func
        fn = types.FunctionType(py.__code__, env, n, py.__defaults__, py.__closure__)
        out[n] = _dev(fn)
    env.update(out)   # calls between special functions resolve to the device twins
    return out


globals().update({k: v for k, v in _device_specials().items() if k != "logaddexp"})


def _make_mm(nbt):
    def mm(A, B, C):
        sa = cuda.shared.array((TILE, TILE), nbt)
        sb = cuda.shared.array((TILE, TILE), nbt)
        tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
        row = cuda.blockIdx.y * TILE + ty
        col = cuda.blockIdx.x * TILE + tx
        m, k, n = A.shape[0], A.shape[1], B.shape[1]
        acc = nbt(0)
        for t in range((k + TILE - 1) // TILE):
            ka = t * TILE + tx
            kb = t * TILE + ty
            sa[ty, tx] = A[row, ka] if (row < m and ka < k) else nbt(0)
            sb[ty, tx] = B[kb, col] if (kb < k and col < n) else nbt(0)
            cuda.syncthreads()
            for j in range(TILE):
                acc += sa[ty, j] * sb[j, tx]
            cuda.syncthreads()
        if row < m and col < n:
            C[row, col] = acc

    def bmm(A, B, C):
        sa = cuda.shared.array((TILE, TILE), nbt)
        sb = cuda.shared.array((TILE, TILE), nbt)
        tx, ty, b = cuda.threadIdx.x, cuda.threadIdx.y, cuda.blockIdx.z
        row = cuda.blockIdx.y * TILE + ty
        col = cuda.blockIdx.x * TILE + tx
        m, k, n = A.shape[1], A.shape[2], B.shape[2]
        acc = nbt(0)
        for t in range((k + TILE - 1) // TILE):
            ka = t * TILE + tx
            kb = t * TILE + ty
            sa[ty, tx] = A[b, row, ka] if (row < m and ka < k) else nbt(0)
            sb[ty, tx] = B[b, kb, col] if (kb < k and col < n) else nbt(0)
            cuda.syncthreads()
            for j in range(TILE):
                acc += sa[ty, j] * sb[j, tx]
            cuda.syncthreads()
        if row < m and col < n:
            C[b, row, col] = acc

    return cuda.jit(mm), cuda.jit(bmm)


mm_f32, bmm_f32 = _make_mm(numba.float32)
mm_f64, bmm_f64 = _make_mm(numba.float64)
# Integer and bool products, as NumPy's: accumulated in int64, which wraps as every narrower
# integer type does, and stored cast to the output's type (bool: any a[i, j] and b[j, k]).
# Compiled lazily, once per operand type.
mm_int, bmm_int = _make_mm(numba.int64)

# Large products: a 64 x 64 output tile per block of 16 x 16 threads, each thread keeping a
# 4 x 4 block of C in registers (outer products of a column of A and a row of B staged in
# shared memory). Four times the work per shared-memory load of the 16 x 16 kernel.
BM, BK, TM = 64, 16, 4


@_dev
def _at2(X, b, i, j):
    return X[i, j]


@_dev
def _at3(X, b, i, j):
    return X[b, i, j]


@_dev
def _put2(X, b, i, j, v):
    X[i, j] = v


@_dev
def _put3(X, b, i, j, v):
    X[b, i, j] = v


@_dev
def _dims2(A, C):
    return C.shape[0], A.shape[1], C.shape[1]


@_dev
def _dims3(A, C):
    return C.shape[1], A.shape[2], C.shape[2]


def _make_blocked(nbt, at, put, dims):
    """The kernel for 2-D (at=_at2 ...) or batched 3-D operands (batch on grid z)."""
    def kernel(A, B, C):
        sa = cuda.shared.array((BK, BM), nbt)   # A's tile, transposed: sa[k, row]
        sb = cuda.shared.array((BK, BM), nbt)
        acc = cuda.local.array((TM, TM), nbt)
        ar = cuda.local.array(TM, nbt)
        br = cuda.local.array(TM, nbt)
        tx, ty, b = cuda.threadIdx.x, cuda.threadIdx.y, cuda.blockIdx.z
        tid = ty * 16 + tx
        row0, col0 = cuda.blockIdx.y * BM, cuda.blockIdx.x * BM
        m, k, n = dims(A, C)
        for i in range(TM):
            for j in range(TM):
                acc[i, j] = nbt(0)
        for t in range(0, k, BK):
            for step in range(4):   # 1024 elements of each tile, 256 threads
                e = tid + step * 256
                r, c = e // BK, e % BK
                gr, gc = row0 + r, t + c
                sa[c, r] = at(A, b, gr, gc) if (gr < m and gc < k) else nbt(0)
                r, c = e // BM, e % BM
                gr, gc = t + r, col0 + c
                sb[r, c] = at(B, b, gr, gc) if (gr < k and gc < n) else nbt(0)
            cuda.syncthreads()
            for kk in range(BK):
                for i in range(TM):
                    ar[i] = sa[kk, ty * TM + i]
                    br[i] = sb[kk, tx * TM + i]
                for i in range(TM):
                    for j in range(TM):
                        acc[i, j] += ar[i] * br[j]
            cuda.syncthreads()
        for i in range(TM):
            for j in range(TM):
                r, c = row0 + ty * TM + i, col0 + tx * TM + j
                if r < m and c < n:
                    put(C, b, r, c, acc[i, j])

    return cuda.jit(kernel)


mm_big_f32, mm_big_f64 = (_make_blocked(t, _at2, _put2, _dims2) for t in (numba.float32, numba.float64))
bmm_big_f32, bmm_big_f64 = (_make_blocked(t, _at3, _put3, _dims3) for t in (numba.float32, numba.float64))
BIG = 128 * 128   # output elements from which the register-blocked kernel is used


POOL = os.environ.get("GRADJIT_CUDA_POOL", "1") != "0"


class Workspace:
    """The intermediate device buffers of one generated module (``lowering/cuda_pool.py``).

    ``with ws as take:`` holds the lock while a call enqueues its kernels, so calls
    from several threads enqueue one after the other; all launch on the default
    stream, where one call's kernels finish before the next call's start, so a
    buffer is never written by one call while another still reads it. With
    per-thread default streams that order is gone, and every call allocates."""

    live = weakref.WeakSet()

    def __init__(self, n):
        self.bufs = [None] * n
        self.lock = threading.Lock()
        self.hand_out = (self.take if POOL and not numba.config.CUDA_PER_THREAD_DEFAULT_STREAM
                         else _fresh)
        Workspace.live.add(self)

    def take(self, slot, shape, dtype):
        a = self.bufs[slot]
        if a is None:
            a = self.bufs[slot] = cuda.device_array(shape, dtype)
        return a

    def __enter__(self):
        self.lock.acquire()
        return self.hand_out

    def __exit__(self, *exc):
        self.lock.release()


def _fresh(slot, shape, dtype):
    return cuda.device_array(shape, dtype)


def empty_cache():
    """Free every workspace's buffers (the next call of each module allocates again)."""
    for ws in list(Workspace.live):
        with ws.lock:
            ws.bufs = [None] * len(ws.bufs)


def tview(a):
    """The transpose of a 2-D device array as a view (swapped shape and strides, same memory).

    numba-cuda's ``DeviceNDArray.T`` is not a view: it copies through a transpose kernel
    that it defines, and so compiles, on every call (about 0.1 s each on the H200; W5's
    gradient took 128 ms instead of well under one). The simulator's arrays are NumPy
    arrays, whose ``.T`` is already a view."""
    if SIMULATED:
        return a.T
    return DeviceNDArray(a.shape[::-1], a.strides[::-1], a.dtype, stream=a.stream,
                         gpu_data=a.gpu_data)


def mm(a, b, out):
    """Launch the tiled matmul ``out = a @ b`` (2-D, float32, float64, integer or bool)."""
    m, n = out.shape
    if out.size == 0:
        return out
    f32 = out.dtype == np.float32
    if out.dtype.kind != "f":
        mm_int[((n + TILE - 1) // TILE, (m + TILE - 1) // TILE), (TILE, TILE)](*_signed(a, b, out))
        return out
    if out.size >= BIG:
        kern = mm_big_f32 if f32 else mm_big_f64
        kern[((n + BM - 1) // BM, (m + BM - 1) // BM), (16, 16)](a, b, out)
        return out
    kern = mm_f32 if f32 else mm_f64
    kern[((n + TILE - 1) // TILE, (m + TILE - 1) // TILE), (TILE, TILE)](a, b, out)
    return out


def _signed(*arrays):
    """uint64 operands as int64 (the same bits: the int64 kernel's wrapping sums are
    right), as Numba would type a uint64 load beside int64 as float64, losing bits."""
    return [x.view(np.int64) if x.dtype == np.uint64 else x for x in arrays]


def bmm(a, b, out):
    nb, m, n = out.shape
    if out.size == 0:
        return out
    if out.dtype.kind != "f":
        kern = bmm_int[((n + TILE - 1) // TILE, (m + TILE - 1) // TILE, nb), (TILE, TILE, 1)]
        kern(*_signed(a, b, out))
        return out
    if m * n >= BIG:
        kern = bmm_big_f32 if out.dtype == np.float32 else bmm_big_f64
        kern[((n + BM - 1) // BM, (m + BM - 1) // BM, nb), (16, 16, 1)](a, b, out)
        return out
    kern = bmm_f32 if out.dtype == np.float32 else bmm_f64
    kern[((n + TILE - 1) // TILE, (m + TILE - 1) // TILE, nb), (TILE, TILE, 1)](a, b, out)
    return out


def index_flags(n):
    """Zeroed int32 flags, one per index op of a launcher call (a fresh array each call:
    no zeroing kernel to launch, and concurrent calls never share one)."""
    return cuda.to_device(np.zeros(n, np.int32))


def check_indices(flags, checks):
    """After the kernels: for the first op whose flag is set, ``IndexBoundsError`` naming
    the first bad value of its index in C order, as NumPy would (its index array is
    copied to the host: error path only). ``checks``: (op, axis, size, index) per flag."""
    hit = flags.copy_to_host()
    for flag, (op, axis, n, index) in zip(hit, checks):
        if flag:
            wrap_index(op, index.copy_to_host() if hasattr(index, "copy_to_host") else index,
                       n, axis)
