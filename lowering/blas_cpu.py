"""Matrix products for generated CPU code, compiled once per machine.

Contract
- ``mm(a, b)`` is ``np.dot(a, b)`` for 2-D arrays (BLAS gemm, one-row and one-column
  products included: ``blas_helper`` picks). ``mm_into(out, a, b)`` writes the product
  into ``out`` (a view: a batch's slice).
  ``smm(a, b)`` is the same product as a loop nest, for a row times a small
  matrix, where a BLAS call's overhead is most of the cost (``SMALL_ROW``).
  ``outer(x, y)`` / ``ger(x, y, acc)`` are rank-1 updates of two rows, ``x.T @ y``
  alone or added to ``acc`` (``codegen_cpu_outer.py`` emits them).
  Results are C arrays of the 2-D product's shape.
- One thread pool: a product of at least ``PAR_MIN`` multiply-adds runs as blocks of
  the result's rows (or columns, whichever dimension is longer) over Numba's threads
  (``numba.get_num_threads()`` of the caller), each block one BLAS gemm on the
  operands' memory (strided views, no copies). BLAS itself must then run on one
  thread: ``runtime/threads.py`` sets that around every compiled call that multiplies.
  Why: SciPy's OpenBLAS and Numba's OpenMP pool each keep their idle workers spinning
  after a call; alternating the two (a BLAS product, then a parallel loop) had each
  pool's workers wait for cores the other's spinners held: a 512x64 attention gradient
  took 16 ms on two idle cores, 3.8 ms with one pool (and 5 ms on one thread).
- Generated modules call these instead of ``np.dot``: Numba then compiles its
  dot implementation once per (dtype, layout) pair on this machine
  (``cache=True``, like the fast-math helpers) instead of inside every
  generated function, where it costs about half a second of each cold compile
  that has a matmul.
- The products are called, not inlined (no ``forceinline``): runtime/links.py
  then keeps their code out of the caller's module, which LLVM would otherwise
  optimise and emit again in every generated module (the MLP benchmark's cold
  first gradient: 1.030 -> 0.946 s, medians of 4 alternating fresh processes;
  steady time within noise). A call costs nanoseconds; a BLAS product, a
  microsecond or more. The row-pass helpers, called in inner loops, stay inlined.
"""
from __future__ import annotations

import numba
import numpy as np
from numba.extending import overload

# Numba's own binding of BLAS gemm (the one its np.dot calls): takes leading dimensions,
# so a block of a C or F operand is passed in place. Private to Numba, used only here.
from numba.np.linalg import _BLAS, ensure_blas, get_blas_kind

jit = numba.njit(cache=True, error_model="numpy", forceinline=True)
# BLAS products: called, not inlined (see the contract)
called = numba.njit(cache=True, error_model="numpy")
# A row times a small matrix ((1, k) @ (k, n), k <= n, k * n <= SMALL_ROW): a loop nest
# (smm) costs less than a BLAS call. In an @njit loop, ns per product, BLAS / smm:
# (1,8)@(8,32) 133/69, (1,16)@(16,64) 200/119, (1,32)@(32,32) 207/176 (float64; float32
# 129/135 there); k > n (1,64)@(64,16) 189/247, and m > 1 (8,8)@(8,8) 104/165 lose. The
# batch-1 RNN's steps are such products: W4 steady 128 -> 113 us.
SMALL_ROW = 1024


def blas_helper(m, k, n):
    """The helper's name for an (m, k) @ (k, n) product. One-row and one-column products
    are gemm calls too: NumPy's gemv through ``np.dot`` was no faster in any case measured
    ((4000, 50), (200, 64), (64, 64), (1000, 500) times a column or a row: gemm 0.8-1.0x
    its time; bench/rules.py's linear regression 0.9x), and cost a helper of its own."""
    if m == 1 and k <= n and k * n <= SMALL_ROW:
        return "smm"
    return "mm"


# Multiply-adds (m*k*n) from which a product is split over the threads (where OpenBLAS
# starts using its threads): a parallel launch
# costs a few microseconds, a single-threaded gemm of 2**18 multiply-adds about 10 us.
PAR_MIN = 1 << 18
# The caller's thread count (what numba.get_num_threads() returns), by the symbol Numba's
# parallel loops read it through: numba.get_num_threads() itself compiles to an address
# that Numba's disk cache refuses to store.
_threads = numba.types.ExternalFunction("get_num_threads", numba.types.intp())
# Numba registers its threading layer's symbols (get_num_threads, allocate_sched, ...) when
# the layer starts. ``mm`` is not parallel itself, so loading it from the disk cache would
# not start the layer, and the parallel split linked into it would not resolve: start it.
numba.get_num_threads()


def gemm_into(out, a, b):
    """out[...] = a @ b for 2-D views each with one unit stride (compiled code only)."""
    raise NotImplementedError("gemm_into is called from compiled code only")


@overload(gemm_into, jit_options={"error_model": "numpy"})
def _gemm_into(out, a, b):
    if not isinstance(a.dtype, numba.types.Float):   # integers, bools: no BLAS (NumPy's
        return _loop_product                          # own loop; ints wrap, bools OR)
    ensure_blas()
    fn = _BLAS().numba_xxgemm(a.dtype)
    kind = ord(get_blas_kind(a.dtype))
    dt = numba.np.numpy_support.as_dtype(a.dtype)

    def impl(out, a, b):
        m, k = a.shape
        n = b.shape[1]
        if m == 0 or n == 0:
            return
        if k == 0:
            out[:] = 0
            return
        one, zero = np.ones(1, dt), np.zeros(1, dt)
        # Row-major C = A @ B is column-major C^T = B^T @ A^T: BLAS reads each row-major
        # operand as its transpose, and a column-major one transposed ('t').
        tb, ldb = _side(b)
        ta, lda = _side(a)
        ldc = out.strides[0] // out.itemsize if m > 1 else n
        fn(kind, tb, ta, n, m, k, one.ctypes, b.ctypes, ldb, a.ctypes, lda,
           zero.ctypes, out.ctypes, ldc)
    return impl


def _loop_product(out, a, b):
    m, k = a.shape
    n = b.shape[1]
    for i in range(m):
        for j in range(n):
            out[i, j] = 0
        for p in range(k):
            aip = a[i, p]
            for j in range(n):
                out[i, j] += aip * b[p, j]


@numba.njit(cache=True, error_model="numpy", forceinline=True)
def _side(x):
    """(BLAS transpose flag, leading dimension) of a row- or column-major view x."""
    r, c = x.shape
    s0, s1 = x.strides[0] // x.itemsize, x.strides[1] // x.itemsize
    if (c == 1 or s1 == 1) and (r == 1 or s0 >= c):
        return ord("n"), (s0 if r > 1 else c)
    return ord("t"), (s1 if c > 1 else r)


@called
def mm(a, b):
    """a @ b. The product itself (``mm_into``) takes strided ('A') views: compiled once per
    dtype on a machine (about 2.5 s with the parallel split), not once more per layout pair
    of the operands (0.5 s each); only this wrapper is compiled per pair."""
    out = np.empty((a.shape[0], b.shape[1]), a.dtype)
    mm_into(out[:, ::1], a[:, ::1], b[:, ::1])
    return out


@called
def mm_into(out, a, b):
    """out[...] = a @ b for a 2-D view ``out`` (``mm``'s result, or a batched product's
    slice: no temporary, and no array assignment in the caller (Numba compiles one into every module that has
    one: about 1.5 s each, most of a small batched matmul's compile)."""
    m, k = a.shape
    n = b.shape[1]
    if m * k * n < PAR_MIN or max(m, n) < 4:
        gemm_into(out, a, b)
    else:
        # As strided ('A') views: the parallel split compiles once per dtype on a machine
        # (about 2 s each), not once per layout pair of the operands.
        _split(out[:, ::1], a[:, ::1], b[:, ::1])


@numba.njit(cache=True, error_model="numpy", parallel=True)
def _split(out, a, b):
    """out = a @ b, blocks of out's rows (or columns) over the caller's threads."""
    m, n = out.shape
    nt = _threads()
    if nt == 1 or max(m, n) < 2 * nt:
        gemm_into(out, a, b)
    elif m >= n:
        for t in numba.prange(nt):
            lo, hi = t * m // nt, (t + 1) * m // nt
            gemm_into(out[lo:hi], a[lo:hi], b)
    else:
        for t in numba.prange(nt):
            lo, hi = t * n // nt, (t + 1) * n // nt
            gemm_into(out[:, lo:hi], a, b[:, lo:hi])


# Not forceinline, no wrappers: one copy per module however many products call it. W4's
# cold first gradient is BLAS's within noise this way (medians of 10 alternating fresh
# processes: jit 0.948 vs 0.940 s, tensor mode 0.927 vs 0.929 s); inlined at every call
# site it was 1.018 vs 0.994 s. Only generated code calls it (no Python entry).
@numba.njit(cache=True, error_model="numpy", no_cpython_wrapper=True, no_cfunc_wrapper=True)
def smm(a, b):
    """a @ b as a loop nest, for products too small to pay for a BLAS call."""
    m, k = a.shape
    n = b.shape[1]
    out = np.zeros((m, n), a.dtype)
    for i in range(m):
        for p in range(k):
            x = a[i, p]
            for j in range(n):
                out[i, j] += x * b[p, j]
    return out


# Row passes (lowering/schedule_rows.py): one pass over a matrix's rows does the work of
# a gemv and a transposed gemv. The dot product may reassociate (as BLAS does): without
# it the sum is one chain of dependent adds, which does not vectorise.
@numba.njit(cache=True, error_model="numpy", forceinline=True, fastmath={"reassoc", "contract"})
def rowdot(m, i, x):
    """sum_j m[i, j] * x[j, 0], in m's dtype."""
    s = m.dtype.type(0)   # (starting from the first product instead costs 10% in W5)
    for j in range(m.shape[1]):
        s += m[i, j] * x[j, 0]
    return s


@jit
def rowaxpy(p, r, m, i):
    """p += r * m[i, :]."""
    for j in range(m.shape[1]):
        p[j] += r * m[i, j]


@jit
def colsum(p):
    """The sum of p's rows (per-block partial products), in block order."""
    out = p[0].copy()
    for b in range(1, p.shape[0]):
        for j in range(p.shape[1]):
            out[j] += p[b, j]
    return out


# Rank-1 updates (codegen_cpu_outer.py): an outer product, alone or added to an accumulator
# (a batch-of-one layer's weight gradient, dW += x.T @ g, for every step of an unrolled RNN).
# A cached helper instead of a fused loop: the loop was a function of its own in every
# generated module that has one, compiled in every cold process (W4: 0.1 s of 0.9). Not
# forceinline, no wrappers (as smm). x and y are rows, (1, m) and (1, n): the caller passes
# a column's .T. Kept this small because every module that calls a helper links its code
# and optimises it again (a body with a branch per orientation: +0.05 s of W4's compile).
@numba.njit(cache=True, error_model="numpy", no_cpython_wrapper=True, no_cfunc_wrapper=True)
def outer(x, y):
    """x.T @ y for rows x (1, m) and y (1, n): (m, n) in x's dtype."""
    m, n = x.shape[1], y.shape[1]
    out = np.empty((m, n), x.dtype)
    for i in range(m):
        h = x[0, i]
        for j in range(n):
            out[i, j] = h * y[0, j]
    return out


@numba.njit(cache=True, error_model="numpy", no_cpython_wrapper=True, no_cfunc_wrapper=True)
def ger(x, y, acc):
    """acc + x.T @ y for rows x (1, m) and y (1, n): a new (m, n) array in acc's dtype."""
    m, n = acc.shape
    out = np.empty((m, n), acc.dtype)
    for i in range(m):
        h = x[0, i]
        for j in range(n):
            out[i, j] = acc[i, j] + h * y[0, j]
    return out
