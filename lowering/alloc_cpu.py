"""Array allocation for generated CPU code, compiled once per machine.

Contract
- ``empty(shape, dtype)``, ``full(shape, value, dtype)``, ``zeros(shape, dtype)``,
  ``contiguous(a)`` (``np.ascontiguousarray``), ``assign(dst, src)``
  (``dst[...] = src``, same shapes, not overlapping), ``transpose(a, axes)`` (``np.transpose``) and
  ``reshape(a, shape)``
  (``a.reshape(shape)``, ``a`` contiguous) are NumPy's. Generated modules call
  them (as ``al.empty`` ...) instead of NumPy directly: Numba then compiles
  those implementations once per machine and signature (``cache=True``;
  shapes are written with ``shape_arg``, so a signature is a rank, not a shape)
  instead of inside every generated function, where they cost 0.3-0.4 s of
  each cold compile (``reshape``: Numba's reshape lowering compiles a
  subroutine, ``normalize_reshape_value``, once per process, uncached).
  ``forceinline``: no call overhead in the caller's loops.
- ``total(a, n)``: the sum of the first ``n`` elements of a 1-D float array,
  in float64, over 16 lanes (then the lanes, then the tail). Large fused
  loops store the operand of their full-sum reductions block by block and
  call it per block, because a running scalar sum inside the loop is a chain
  LLVM may not reorder (no fast-math), which keeps the whole loop,
  transcendentals included, from vectorising. ``extreme(a, n, top)``: the max
  (``top``) or min of the first ``n`` elements over lanes the same way, NaN if
  one is NaN, for row reductions stored a row at a time (codegen_cpu.py).
- ``dtype_arg`` / ``shape_arg`` are the one spelling of dtypes and shapes in
  generated code; ``hoist_shapes`` names each literal shape an entry spells
  more than once, so Numba types and lowers it once.
"""
from __future__ import annotations

import re

import numba
import numpy as np

from gradjit.tracer.ir import dtype_name

jit = numba.njit(cache=True, error_model="numpy", forceinline=True)


def dtype_arg(dt):
    """Source text of a dtype argument (``np.float64`` ...) in generated code."""
    name = dtype_name(dt)
    return "np.bool_" if name == "bool" else f"np.{name}"


def shape_arg(dims):
    """Source text of a shape argument for these helpers: literal sizes as ``np.int64(k)``
    (names, e.g. ``n0``, as they are). Numba types a constant tuple such as ``(32, 8)``
    as literals, and compiles (and caches) a helper once per literal type: once per
    shape. A typed int gives one compile per rank, whatever the sizes."""
    out = [d if isinstance(d, str) and not d.isdigit() else f"np.int64({d})" for d in dims]
    return f"({', '.join(out)}{',' if len(out) == 1 else ''})"


_LITERAL_SHAPE = re.compile(r"\(np\.int64\(\d+\)(?:, np\.int64\(\d+\))*,?\)")


def hoist_shapes(lines, indent="    "):
    """``(decls, lines)``: each literal shape that ``lines`` spell (``shape_arg``) more than
    once becomes one local, ``shp<k> = (...)``, declared by ``decls``. Why: Numba types,
    lowers and optimises every ``np.int64(k)`` call of every spelling (W4: 0.04 s of a
    1.3 s compile). Comments are left as they are."""
    count = {}
    for ln in lines:
        for m in _LITERAL_SHAPE.finditer(ln.split("  # ")[0]):
            count[m.group(0)] = count.get(m.group(0), 0) + 1
    names = {t: f"shp{k}" for k, t in enumerate(t for t, c in count.items() if c > 1)}
    if not names:
        return [], list(lines)

    def sub(ln):
        code, sep, comment = ln.partition("  # ")
        return _LITERAL_SHAPE.sub(lambda m: names.get(m.group(0), m.group(0)), code) + sep + comment
    return [f"{indent}{n} = {t}" for t, n in names.items()], [sub(ln) for ln in lines]


@jit
def empty(shape, dtype):
    return np.empty(shape, dtype)


@jit
def full(shape, value, dtype):
    return np.full(shape, value, dtype)


@jit
def zeros(shape, dtype):
    return np.zeros(shape, dtype)


@jit
def contiguous(a):
    return np.ascontiguousarray(a)


# ``assign`` and ``transpose`` are written out per rank rather than as ``dst[...] = src``
# and ``np.transpose(a, axes)``: Numba's versions compile a formatted error message (its
# string machinery: about 3 s the first time a process compiles each, 0.4-1.5 s per
# signature after), where these loops and views compile in about 0.1 s.

def _ranked(name, table):
    """A function Numba types by its first argument's rank: ``table[ndim]``."""
    def stub(a, b):
        raise NotImplementedError(name)
    stub.__name__ = name

    @numba.extending.overload(stub, jit_options={"error_model": "numpy"})
    def typed(a, b):
        return table.get(a.ndim, table[-1])
    return stub


def _copy0(a, b):
    a.reshape((1,))[0] = b.reshape((1,))[0]   # (a 0-d array is contiguous)


def _copy1(a, b):
    for i in range(a.shape[0]):
        a[i] = b[i]


def _copy2(a, b):
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            a[i, j] = b[i, j]


def _copy3(a, b):
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            for k in range(a.shape[2]):
                a[i, j, k] = b[i, j, k]


def _copy4(a, b):
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            for k in range(a.shape[2]):
                for m in range(a.shape[3]):
                    a[i, j, k, m] = b[i, j, k, m]


def _copy_any(a, b):
    for idx in np.ndindex(a.shape):
        a[idx] = b[idx]


_copy = _ranked("copy", {0: _copy0, 1: _copy1, 2: _copy2, 3: _copy3, 4: _copy4,
                         -1: _copy_any})


def _view1(a, b):
    return np.lib.stride_tricks.as_strided(a, (a.shape[b[0]],), (a.strides[b[0]],))


def _view2(a, b):
    sh, st = a.shape, a.strides
    return np.lib.stride_tricks.as_strided(a, (sh[b[0]], sh[b[1]]), (st[b[0]], st[b[1]]))


def _view3(a, b):
    sh, st = a.shape, a.strides
    return np.lib.stride_tricks.as_strided(a, (sh[b[0]], sh[b[1]], sh[b[2]]),
                                           (st[b[0]], st[b[1]], st[b[2]]))


def _view4(a, b):
    sh, st = a.shape, a.strides
    return np.lib.stride_tricks.as_strided(a, (sh[b[0]], sh[b[1]], sh[b[2]], sh[b[3]]),
                                           (st[b[0]], st[b[1]], st[b[2]], st[b[3]]))


def _view5(a, b):
    sh, st = a.shape, a.strides
    return np.lib.stride_tricks.as_strided(
        a, (sh[b[0]], sh[b[1]], sh[b[2]], sh[b[3]], sh[b[4]]),
        (st[b[0]], st[b[1]], st[b[2]], st[b[3]], st[b[4]]))


def _view_any(a, b):
    return np.transpose(a, b)


_permuted = _ranked("permuted", {1: _view1, 2: _view2, 3: _view3, 4: _view4, 5: _view5,
                                 -1: _view_any})


@jit
def transpose(a, axes):
    """``np.transpose(a, axes)``: a view (``axes`` a permutation, as generated code passes)."""
    return _permuted(a, axes)


@jit
def assign(dst, src):
    """``dst[...] = src`` of two arrays of one shape that do not overlap (as generated code
    passes them: a fresh result into its slot of a batch)."""
    _copy(dst, src)


@jit
def reshape(a, shape):
    return a.reshape(shape)


LANES = 16


@jit
def total(a, n):
    m = n - n % LANES
    acc = np.zeros(LANES)
    for i in range(0, m, LANES):
        for k in range(LANES):   # independent lanes: vectorised, no reordering needed
            acc[k] += a[i + k]
    s = 0.0
    for k in range(LANES):
        s += acc[k]
    for i in range(m, n):
        s += a[i]
    return s


@jit
def _beats(x, cur, top):
    """Does x replace cur as the running max (top) or min? NaN wins and stays."""
    return x != x or (cur == cur and (x > cur if top else x < cur))


@jit
def extreme(a, n, top):
    """max (top) or min of a[:n], NaN if any element is NaN; -inf / inf when n == 0."""
    lim = -np.inf if top else np.inf
    m = n - n % LANES
    acc = np.full(LANES, lim)
    for i in range(0, m, LANES):
        for k in range(LANES):   # independent lanes: a select each, vectorised
            x = a[i + k]
            acc[k] = x if _beats(x, acc[k], top) else acc[k]
    s = lim
    for k in range(LANES):
        x = acc[k]
        s = x if _beats(x, s, top) else s
    for i in range(m, n):
        x = a[i]
        s = x if _beats(x, s, top) else s
    return s
