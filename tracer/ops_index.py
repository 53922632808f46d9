"""The indexing family: strided slices, gathers, scatter-adds and max/min with indices.

Contract
- Each op is declared here once (schema = its ``derivatives.yaml`` ``name:``
  line) with its shape/dtype rule and NumPy reference; conventions as in
  ``tracer/ops.py``. Attributes arrive normalised by the front end
  (``tracer/methods_index.py``): ``dim`` is one non-negative int; ``slice``'s
  ``start`` / ``step`` are ints with ``step != 0`` and ``end`` an int or None
  (None: past the first element, for a negative step), as ``slice.indices``
  gives them.
- All of them are ``kernel`` ops for the code generators (their own loop nest
  or a NumPy view statement, ``lowering/codegen_cpu_index.py``):
  ``slice.Tensor`` is a strided view (negative steps allowed, unlike torch);
  ``slice_backward`` writes its input into zeros of ``input_sizes``; ``cat``
  (``Tensor[]``: any number of inputs, of one dtype and ndim >= 1) writes each part
  after the last along ``dim``, no zeros; ``index_select`` / ``gather`` read through an
  integer index; ``index_add`` / ``scatter_add`` accumulate into a copy of
  ``self`` (repeated indices add up); ``max.dim`` / ``min.dim`` return the
  values and int64 indices (first occurrence; NaN wins, as torch).
- Index tensors must have an integer dtype; negative indices count from the
  end in every op (NumPy), including ``gather`` where torch would refuse them.
  Every executor checks index values when it runs them (traced indices have no
  value at trace time): outside ``[-size, size)`` raises ``IndexBoundsError``
  (an ``IndexError``) in NumPy's words plus the op and, where known, the
  user's line. The references here check; the CPU and CUDA code generators
  emit the same check (``lowering/codegen_cpu_index.py``).
- Composites spelled in the front end with these ops plus views: basic and
  advanced ``__getitem__``, stack, split, chunk, unbind, narrow, flip,
  roll, repeat, tile, tril, triu, diagonal, take_along_dim, masked_fill, take.
"""
from __future__ import annotations

import numpy as np

from gradjit.tracer.ops import _types_str
from gradjit.tracer.registry import GradjitError, ShapeError, defop, user_site

K = "kernel"


def _sl(ndim, dim, s):
    return (slice(None),) * dim + (s,) + (slice(None),) * (ndim - dim - 1)


def _slice_len(n, start, end, step):
    return len(range(start, -1 if end is None else end, step))


def _check_int(op, t):
    if np.dtype(t.dtype).kind not in "iu":
        raise TypeError(f"{op}: expected an integer index tensor, but got dtype "
                        f"{np.dtype(t.dtype).name} (shape {tuple(t.shape)})")


class IndexBoundsError(GradjitError, IndexError):
    """An index value outside ``[-size, size)`` met at run time by ``op`` (an IR op name)
    along ``axis``. Generated code raises it with ``(op, index, axis, size)`` only (what
    the source may hold: structural, or the value); ``located`` adds the user's line
    (``Site``; its ``op`` names the forward op a gradient node came from)."""

    def __init__(self, op, index, axis, size, site=None):
        self.op, self.index, self.axis, self.size = op, int(index), int(axis), int(size)
        grad = f" (in the gradient of {site.op})" if getattr(site, "op", None) else ""
        GradjitError.__init__(self, f"{op}{grad}: index {self.index} is out of bounds for axis "
                                    f"{self.axis} with size {self.size}", site)

    def located(self, site):
        """The same error at ``site`` (self when there is none, or one already)."""
        if site is None or self.site is not None:
            return self
        return IndexBoundsError(self.op, self.index, self.axis, self.size, site)

    def __reduce__(self):
        return type(self), (self.op, self.index, self.axis, self.size, self.site)


def wrap_index(op, index, n, axis):
    """``index`` as int64 in ``[0, n)`` (negatives wrapped once); IndexBoundsError naming
    the first value (C order) outside ``[-n, n)``, as NumPy's fancy indexing does."""
    index = np.asarray(index)
    bad = (index >= n) if index.dtype.kind == "u" else (index < -n) | (index >= n)
    if bad.any():
        raise IndexBoundsError(op, index[bad].flat[0], axis, n)
    index = index.astype(np.int64)
    return np.where(index < 0, index + n, index)


# -- strided view and its adjoint ---------------------------------------------------------
def _slice_infer(types, a):
    (t,) = types
    shape = list(t.shape)
    shape[a["dim"]] = _slice_len(shape[a["dim"]], a["start"], a["end"], a["step"])
    return [(tuple(shape), t.dtype)]


defop("slice.Tensor(Tensor self, int dim=0, SymInt? start=None, SymInt? end=None, SymInt step=1) "
      "-> Tensor", K, _slice_infer,
      lambda x, dim, start, end, step: np.array(x[_sl(x.ndim, dim, slice(start, end, step))]))


def _slice_backward_infer(types, a):
    (g,) = types
    sizes = tuple(a["input_sizes"])
    want = list(sizes)
    want[a["dim"]] = _slice_len(sizes[a["dim"]], a["start"], a["end"], a["step"])
    if tuple(want) != tuple(g.shape):
        raise ShapeError(f"slice_backward.default: gradient of shape {tuple(g.shape)} does not "
                         f"fit slice {a['start']}:{a['end']}:{a['step']} of dim {a['dim']} of "
                         f"{sizes}", user_site())
    return [(sizes, g.dtype)]


def _slice_backward(g, input_sizes, dim, start, end, step):
    out = np.zeros(tuple(input_sizes), g.dtype)
    out[_sl(out.ndim, dim, slice(start, end, step))] = g
    return out


defop("slice_backward(Tensor grad_output, SymInt[] input_sizes, int dim, SymInt start, "
      "SymInt? end, SymInt step) -> Tensor", K, _slice_backward_infer, _slice_backward)



def _cat_infer(types, a):
    ref, d = types[0], a["dim"]
    for t in types:
        if len(t.shape) != len(ref.shape) or any(x != y for k, (x, y) in
                                                 enumerate(zip(t.shape, ref.shape)) if k != d):
            raise ShapeError(f"cat.default: sizes of tensors must match except in dimension {d}; "
                             f"got {_types_str(types)}", user_site())
    if len({np.dtype(t.dtype) for t in types}) != 1:
        raise TypeError(f"cat.default: parts must share one dtype (the front end casts them); "
                        f"got {_types_str(types)}")
    shape = list(ref.shape)
    shape[d] = sum(t.shape[d] for t in types)
    return [(tuple(shape), ref.dtype)]


defop("cat(Tensor[] tensors, int dim=0) -> Tensor", K, _cat_infer,
      lambda *parts, dim: np.concatenate(parts, axis=dim))

# -- gathers and scatter-adds ----------------------------------------------------------------
def _index_select_infer(types, a):
    t, idx = types
    _check_int("index_select.default", idx)
    if len(idx.shape) != 1:
        raise ShapeError(f"index_select.default: index must be 1-D, got shape {tuple(idx.shape)} "
                         f"(inputs: {_types_str(types)})", user_site())
    shape = list(t.shape)
    shape[a["dim"]] = idx.shape[0]
    return [(tuple(shape), t.dtype)]


defop("index_select(Tensor self, int dim, Tensor index) -> Tensor", K, _index_select_infer,
      lambda x, index, dim: np.take(
          x, wrap_index("index_select.default", index, x.shape[dim], dim), axis=dim))


def _index_add_infer(types, a):
    t, idx, src = types
    _check_int("index_add.default", idx)
    want = list(t.shape)
    if len(idx.shape) == 1:
        want[a["dim"]] = idx.shape[0]
    if len(idx.shape) != 1 or tuple(src.shape) != tuple(want):
        raise ShapeError(f"index_add.default: source of shape {tuple(src.shape)} and index of "
                         f"shape {tuple(idx.shape)} do not fit self of shape {tuple(t.shape)} "
                         f"along dim {a['dim']}", user_site())
    return [(tuple(t.shape), t.dtype)]


def _index_add(x, index, source, dim, alpha):
    out = np.array(x, copy=True)
    idx = wrap_index("index_add.default", index, x.shape[dim], dim)
    moved = np.moveaxis(out, dim, 0)
    np.add.at(moved, idx, np.moveaxis(source if alpha == 1 else source * alpha, dim, 0))
    return out


defop("index_add(Tensor self, int dim, Tensor index, Tensor source, *, Scalar alpha=1) -> Tensor",
      K, _index_add_infer, _index_add)


def _gather_check(op, t, idx, dim, src=None):
    _check_int(op, idx)
    bad = len(idx.shape) != len(t.shape) or any(
        i > s for d, (i, s) in enumerate(zip(idx.shape, t.shape)) if d != dim)
    if src is not None:
        bad = bad or len(src.shape) != len(idx.shape) or any(
            i > s for i, s in zip(idx.shape, src.shape))
    if bad:
        raise ShapeError(f"{op}: index of shape {tuple(idx.shape)} does not fit self of shape "
                         f"{tuple(t.shape)}" + (f" and src of shape {tuple(src.shape)}"
                                                if src is not None else "")
                         + f" along dim {dim} (same rank; at most self's size off dim {dim})",
                         user_site())


def _grid(op, index, dim, n):
    """Index tuple addressing, for every entry of ``index``, its target along ``dim``."""
    grid = list(np.indices(index.shape, sparse=True))
    grid[dim] = wrap_index(op, index, n, dim)
    return tuple(grid)


def _gather_infer(types, a):
    t, idx = types
    _gather_check("gather.default", t, idx, a["dim"])
    return [(tuple(idx.shape), t.dtype)]


defop("gather(Tensor self, int dim, Tensor index, *, bool sparse_grad=False) -> Tensor", K,
      _gather_infer,
      lambda x, index, dim, sparse_grad: x[_grid("gather.default", index, dim, x.shape[dim])])


def _scatter_add_infer(types, a):
    t, idx, src = types
    _gather_check("scatter_add.default", t, idx, a["dim"], src)
    return [(tuple(t.shape), t.dtype)]


def _scatter_add(x, index, src, dim):
    out = np.array(x, copy=True)
    np.add.at(out, _grid("scatter_add.default", index, dim, x.shape[dim]),
              src[tuple(slice(0, s) for s in index.shape)])
    return out


defop("scatter_add(Tensor self, int dim, Tensor index, Tensor src) -> Tensor", K,
      _scatter_add_infer, _scatter_add)


# -- max / min along a dim: values and indices -------------------------------------------------
def _minmax_infer(types, a):
    (t,) = types
    shape = tuple(t.shape)
    if shape and shape[a["dim"]] == 0:
        raise ShapeError(f"max/min(dim={a['dim']}): cannot reduce over a zero-size dimension "
                         f"(input shape {shape})", user_site())
    if not shape:
        out = ()
    elif a["keepdim"]:
        out = shape[:a["dim"]] + (1,) + shape[a["dim"] + 1:]
    else:
        out = shape[:a["dim"]] + shape[a["dim"] + 1:]
    return [(out, t.dtype), (out, np.dtype(np.int64))]


def _minmax(arg):
    def impl(x, dim, keepdim):
        if x.ndim == 0:
            return np.array(x), np.zeros((), np.int64)
        i = np.expand_dims(arg(x, axis=dim), dim)
        v = np.take_along_axis(x, i, dim)
        if not keepdim:
            v, i = np.squeeze(v, dim), np.squeeze(i, dim)
        return v, i.astype(np.int64)
    return impl


defop("max.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)", K,
      _minmax_infer, _minmax(np.argmax))
defop("min.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)", K,
      _minmax_infer, _minmax(np.argmin))
