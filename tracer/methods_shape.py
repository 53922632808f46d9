"""Tensor methods of the view family (mixed into ``ArrayOps``): reshape, permute, expand, ...

Contract
- ``ShapeMethods`` gives ``Tensor`` and ``Tracer`` torch's view methods (``reshape`` /
  ``view``, ``flatten``, ``permute``, ``transpose`` / ``swapaxes``, ``t``, ``T``, ``mT``,
  ``expand`` / ``broadcast_to``, ``squeeze``, ``unsqueeze``), each normalising its
  arguments (``-1`` sizes, negative dims) and emitting one registered shape op
  (``tracer/ops.py``), or returning ``self`` when nothing changes.
- NumPy's spellings of the same names on traced values (``x.reshape(2, 3, order=)``,
  ``x.transpose(0, 2, 1)``) are in ``tracer/numpy_methods.py``.
"""
from __future__ import annotations

import numpy as np

from gradjit.tracer.dispatch import apply, norm_dim, sizes_arg
from gradjit.tracer.registry import ShapeError, user_site


class ShapeMethods:
    __slots__ = ()

    def reshape(self, *shape, **kw):
        shape = sizes_arg("reshape", shape, kw.pop("shape", None), kw)
        shape = tuple(int(s) for s in shape)
        if shape.count(-1) == 1:
            known = int(np.prod([s for s in shape if s != -1]))
            if known == 0:   # 0 * anything: the -1 could be any size
                raise ShapeError(f"reshape: cannot reshape tensor of 0 elements into shape "
                                 f"{list(shape)} because the unspecified dimension size -1 can "
                                 f"be any value and is ambiguous", user_site())
            shape = tuple(self.numel() // max(known, 1) if s == -1 else s for s in shape)
        if shape == self.shape:
            return self
        return apply("view.default", [self], {"size": shape})

    view = reshape

    def reshape_as(self, other): return self.reshape(other.shape)
    view_as = reshape_as

    def flatten(self, start_dim=0, end_dim=-1):
        """torch's ``flatten(start_dim, end_dim)``: dims start..end merged into one (a 0-d
        tensor becomes shape (1,); nothing to merge returns ``self``)."""
        if not self.ndim:
            norm_dim(start_dim, 0, "flatten"), norm_dim(end_dim, 0, "flatten")
            return self.reshape(1)
        s, e = norm_dim(int(start_dim), self.ndim, "flatten"), norm_dim(int(end_dim), self.ndim,
                                                                        "flatten")
        if s > e:
            raise RuntimeError("flatten() has invalid args: start_dim cannot come after end_dim")
        if s == e:
            return self
        n = int(np.prod(self.shape[s:e + 1]))
        return self.reshape(self.shape[:s] + (n,) + self.shape[e + 1:])

    def unflatten(self, dim, sizes):
        """torch's: dim ``dim`` split into ``sizes`` (one -1 inferred): a view, as reshape."""
        sizes = tuple(int(s) for s in sizes)
        d = norm_dim(dim, self.ndim, "unflatten")
        n = self.shape[d]
        if not sizes:
            raise RuntimeError("unflatten: sizes must be non-empty")
        if sizes.count(-1) > 1:
            raise RuntimeError("unflatten: only one dimension can be inferred")
        known = int(np.prod([s for s in sizes if s != -1]))
        if -1 in sizes and known and n % known == 0:
            sizes = tuple(n // known if s == -1 else s for s in sizes)
        if -1 in sizes or int(np.prod(sizes)) != n:
            raise RuntimeError(f"unflatten: Provided sizes {list(sizes)} don't multiply up to "
                               f"the size of dim {d} ({n}) in the input tensor")
        return self.reshape(tuple(self.shape[:d]) + sizes + tuple(self.shape[d + 1:]))

    def permute(self, *dims, **kw):
        dims = sizes_arg("permute", dims, kw.pop("dims", None), kw)
        dims = tuple(norm_dim(int(d), self.ndim, "permute") for d in dims)
        if sorted(dims) != list(range(self.ndim)):
            raise ValueError(f"permute: dims {dims} is not a permutation of the {self.ndim} dims "
                             f"of a tensor of shape {self.shape}")
        if dims == tuple(range(self.ndim)):
            return self
        return apply("permute.default", [self], {"dims": dims})

    def transpose(self, dim0, dim1):
        d0, d1 = norm_dim(dim0, self.ndim), norm_dim(dim1, self.ndim)
        if d0 == d1:
            return self
        return apply("transpose.int", [self], {"dim0": min(d0, d1), "dim1": max(d0, d1)})

    swapaxes = transpose

    def t(self):
        if self.ndim > 2:
            raise ValueError(f"t() expects a tensor with <= 2 dimensions, but self is {self.ndim}D")
        return self if self.ndim < 2 else apply("t.default", [self], {})

    @property
    def T(self):
        return self.t() if self.ndim <= 2 else self.permute(tuple(range(self.ndim))[::-1])

    @property
    def mT(self):
        return self.swapaxes(-2, -1)

    def expand(self, *size, **kw):
        size = sizes_arg("expand", size, kw.pop("size", None), kw)
        lead = len(size) - self.ndim
        size = tuple(self.shape[i - lead] if s == -1 and i >= lead else int(s)
                     for i, s in enumerate(size))
        if size == self.shape:
            return self
        return apply("expand.default", [self], {"size": size, "implicit": False})

    broadcast_to = expand

    def expand_as(self, other): return self.expand(other.shape)

    def squeeze(self, dim=None):
        if dim is None:
            return self if 1 not in self.shape else apply("squeeze.default", [self], {})
        d = norm_dim(dim, self.ndim, "squeeze")
        if not self.ndim or self.shape[d] != 1:
            return self
        return apply("squeeze.dim", [self], {"dim": d})

    def unsqueeze(self, dim):
        return apply("unsqueeze.default", [self], {"dim": norm_dim(dim, self.ndim + 1, "unsqueeze")})
