"""The user-facing op surface shared by ``Tensor`` (eager) and ``Tracer`` (jit).

Contract
- ``ArrayOps`` gives both classes the same torch-named methods, Python
  operators and NumPy protocols (``__array_ufunc__`` / ``__array_function__``).
  Every method normalises its arguments (dims, sizes, scalars) and calls
  ``apply(op_name, tensors, attrs)``.
- ``apply`` and argument normalisation live in ``tracer/dispatch.py`` (re-exported
  here); op families add their methods through mixins (``methods_*.py``)
  so this module stays the core surface.
- Composite user ops (``matmul``, ``softmax`` ...) are spelled here in terms of
  registered ops, so the IR only ever holds registered ops.
"""
from __future__ import annotations

import numpy as np

from gradjit.tracer.dispatch import (_py, apply, as_operand, is_scalar, norm_dim,  # noqa: F401
                                     norm_dims, numpy_rules, operands, promoting,
                                     register_frontend, strong)
from gradjit.tracer.methods_creation import CreationMethods
from gradjit.tracer.methods_index import IndexMethods
from gradjit.tracer.methods_scatter import ScatterMethods
from gradjit.tracer.methods_linalg import LinalgMethods
from gradjit.tracer.methods_logical import LogicalMethods
from gradjit.tracer.methods_math import MathMethods, rounded_div
from gradjit.tracer.methods_reduce import ReduceMethods
from gradjit.tracer.methods_shape import ShapeMethods
from gradjit.tracer import ops, ops_math  # noqa: F401  (the records the front ends come from)
from gradjit.tracer.registry import (OPS, GradjitError, GradjitRuntimeError, ShapeError, real_only,
                                     user_site)

# Binary ops: (tensor op, scalar op, reversed-scalar handler)
def _rdiv(t, s):
    return apply("mul.Scalar", [apply("reciprocal.default", [t], {})], {"other": s})


_REVERSED_CMP = {"gt": "lt", "lt": "gt", "ge": "le", "le": "ge", "eq": "eq", "ne": "ne"}


_TENSOR_OPS = {}   # binary name -> its Tensor-Tensor overload (no string building per call)

# NumPy unary ufuncs that are one registered op each (``OpDef.numpy``): ``__array_ufunc__``
# calls it straight away (tracer/numpy_protocol.py maps the rest).
UNARY_UFUNCS = {f: op.name for op in OPS.values() for f in op.numpy}


def _operator(name):
    """``a <op> b`` for an operator of ``binary``: a same-type tensor or a Python int/float
    ``b`` goes straight to the front end (``_apply``), the rest through ``binary``. The
    usual operators of a step run this, so it skips ``binary``'s and ``apply``'s checks
    (one front end: both operands are of ``a``'s type)."""
    tensor_op = "pow.Tensor_Tensor" if name == "pow" else f"{name}.Tensor"
    scalar_op, key = ("pow.Tensor_Scalar", "exponent") if name == "pow" else (f"{name}.Scalar",
                                                                              "other")

    def method(self, other):
        t = type(other)
        if t is type(self):
            if self._numpy_promotion or (d := self.dtype) is other.dtype or d == other.dtype:
                return self._apply(tensor_op, [self, other], {})
            return apply(tensor_op, [self, other], {})   # (tensor mode: torch's promotion)
        if t is float or t is int:
            return self._apply(scalar_op, [self], {key: other})
        return binary(name, self, other)
    method.__name__ = f"__{name}__"
    return method


def _reflected(name):
    """``b <op> a`` for the commutative ``add`` / ``mul``: a Python int/float ``b`` is the
    scalar overload on ``a``."""
    scalar_op = f"{name}.Scalar"

    def method(self, other):
        t = type(other)
        if t is float or t is int:
            return self._apply(scalar_op, [self], {"other": other})
        return binary(name, other, self)
    method.__name__ = f"__r{name}__"
    return method


def binary(name, a, b):
    if isinstance(a, ArrayOps):   # the usual cases first, without the general checks
        if isinstance(b, ArrayOps):
            op = _TENSOR_OPS.get(name)
            if op is None:
                op = _TENSOR_OPS[name] = "pow.Tensor_Tensor" if name == "pow" else f"{name}.Tensor"
            return apply(op, [a, b], {})
        if type(b) is float or type(b) is int:
            return (apply("pow.Tensor_Scalar", [a], {"exponent": b}) if name == "pow" else
                    apply(f"{name}.Scalar", [a], {"other": b}))
    if isinstance(a, np.generic) or isinstance(b, np.generic):
        a, b = strong(a, b), strong(b, a)
    a, b = _py(a), _py(b)
    for x in (a, b):
        if isinstance(x, complex):
            real_only(np.dtype(complex), f"{name}'s operand {x!r}")
    sa, sb = is_scalar(a), is_scalar(b)
    if sb and not sa:
        key = "exponent" if name == "pow" else "other"
        return apply(f"{name}.Scalar" if name != "pow" else "pow.Tensor_Scalar", [a], {key: b})
    if sa and not sb:
        if name in ("add", "mul"):
            return apply(f"{name}.Scalar", [b], {"other": a})
        if name == "sub":
            return apply("rsub.Scalar", [b], {"other": a})
        if name == "div":
            return _rdiv(b, a)
        if name == "pow":
            return apply("pow.Scalar", [b], {"self": a})
        return apply(f"{_REVERSED_CMP[name]}.Scalar", [b], {"other": a})
    op = "pow.Tensor_Tensor" if name == "pow" else f"{name}.Tensor"
    return apply(op, [a, b], {})


def where(condition, x, y):
    """``where(condition, x, y)``; a Python scalar becomes a 0-d tensor of the dtype NumPy
    gives it beside the other operand (NEP 50: uint8 with 3 is uint8, with 0.5 float64)."""
    ref = next((t for t in (x, y, condition) if hasattr(t, "_const")), None)
    if ref is None:
        raise TypeError("where: at least one of condition, x, y must be a gradjit tensor")
    other = y if is_scalar(x) else x
    dt = getattr(other, "dtype", None)
    args = [ref._const(_scalar_as(v, None if dt is None else np.result_type(dt, promoting(v, ref))))
            if is_scalar(v) and v is not condition else
            ref._const(np.asarray(v)) if is_scalar(v) else v for v in (condition, x, y)]
    return apply("where.self", args, {})


def _scalar_as(v, dtype):
    """Scalar ``v`` as a 0-d array of ``dtype``: a Python int out of an integer dtype's
    range wraps, as NumPy's ``where`` casts it (``where(c, u8, -1)`` holds 255); one out
    of int64 and uint64 raises NumPy's OverflowError."""
    v = np.asarray(v)
    return v if dtype is None else v.astype(dtype)


def matmul(a, b):
    """``a @ b`` (``ArrayOps.__matmul__`` is this function: no gradjit frame between the
    user's line and the front end, see the reductions' comment); ``b`` may be array-like."""
    both_tensors = type(b) is type(a)
    if not both_tensors:
        b = a._coerce(b)
    sa, sb = a.shape, b.shape
    if len(sa) == 2 and len(sb) == 2 and sa[1] == sb[0] and a.dtype == b.dtype:
        if type(a) is type(b):   # the usual case, without the general checks or apply's search
            return a._apply("mm.default", [a, b], {})
        return apply("mm.default", [a, b], {})
    da, db = a.ndim, b.ndim
    if da == 0 or db == 0:
        raise ShapeError(f"matmul: both arguments to matmul need to be at least 1D, but they are "
                         f"{da}D and {db}D", user_site())
    inner_a, inner_b = a.shape[-1], b.shape[-2] if db > 1 else b.shape[0]
    if inner_a != inner_b:
        raise ShapeError(f"matmul: shapes {tuple(a.shape)} and {tuple(b.shape)} cannot be multiplied "
                         f"({inner_a} != {inner_b}; inputs: {a.dtype}{list(a.shape)}, "
                         f"{b.dtype}{list(b.shape)})", user_site())
    if a.dtype != b.dtype and not numpy_rules(a) and both_tensors:
        raise GradjitRuntimeError(
            f"matmul: expected both operands to have the same dtype, but got: "
            f"{np.dtype(a.dtype).name} != {np.dtype(b.dtype).name} (inputs: "
            f"{a.dtype}{list(a.shape)}, {b.dtype}{list(b.shape)}; torch refuses mixed dtypes "
            f"here: cast one, b.to(a.dtype))\n  at {user_site()}")
    dt = np.result_type(a.dtype, b.dtype)
    a = a if a.dtype == dt else a.to(dt)
    b = b if b.dtype == dt else b.to(dt)
    if da == 2 and db == 2:
        return apply("mm.default", [a, b], {})
    if da <= 2 and db <= 2:
        a2 = a.unsqueeze(0) if da == 1 else a
        b2 = b.unsqueeze(1) if db == 1 else b
        out = apply("mm.default", [a2, b2], {})
        shape = (a.shape[0],) * (da == 2) + (b.shape[-1],) * (db == 2)
        return out.reshape(shape)
    a2 = a.unsqueeze(0) if da == 1 else a
    b2 = b.unsqueeze(-1) if db == 1 else b
    if a2.shape[-1] != b2.shape[-2]:
        raise ShapeError(f"matmul: shapes {a.shape} and {b.shape} cannot be multiplied", user_site())
    try:
        batch = tuple(np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2]))
    except ValueError:
        raise ShapeError(f"matmul: batch dimensions of {a.shape} and {b.shape} cannot be "
                         f"broadcast together", user_site()) from None
    nb = int(np.prod(batch))
    a3 = a2.expand(batch + a2.shape[-2:]).reshape((nb,) + a2.shape[-2:])
    b3 = b2.expand(batch + b2.shape[-2:]).reshape((nb,) + b2.shape[-2:])
    out = apply("bmm.default", [a3, b3], {})
    shape = batch + (a2.shape[-2],) * (da > 1) + (b2.shape[-1],) * (db > 1)
    return out.reshape(shape)


_TYPE_NAMES = {"float16": "HalfTensor", "float32": "FloatTensor", "float64": "DoubleTensor",
               "int8": "CharTensor", "uint8": "ByteTensor", "int16": "ShortTensor",
               "int32": "IntTensor", "int64": "LongTensor", "bool": "BoolTensor"}


class ArrayOps(MathMethods, ReduceMethods, ShapeMethods, IndexMethods, ScatterMethods,
               LinalgMethods, CreationMethods, LogicalMethods):
    """Mixin: torch-named methods and operators; subclasses define ``_apply``."""

    __slots__ = ()
    __array_priority__ = 1000
    __hash__ = object.__hash__
    _numpy_promotion = False   # torch's dtype promotion (dispatch.torch_operands); traced: NumPy's
    _numpy_indexing = False    # ints index first, as basic indexing (methods_index.getitem)

    # subclasses: shape, dtype properties; _apply(op, tensors, attrs); _const(array)
    @property
    def ndim(self):
        return len(self.shape)

    def dim(self):
        return len(self.shape)

    def size(self, d=None):
        return self.shape if d is None else self.shape[norm_dim(d, self.ndim)]

    def numel(self):
        return int(np.prod(self.shape))

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    # -- arithmetic -------------------------------------------------------------
    def add(self, other, alpha=1):
        if alpha != 1 and not is_scalar(other):
            return apply("add.Tensor", [self, other], {"alpha": _py(alpha)})
        return binary("add", self, other * alpha if alpha != 1 else other)

    def sub(self, other, alpha=1):
        if alpha != 1 and not is_scalar(other):
            return apply("sub.Tensor", [self, other], {"alpha": _py(alpha)})
        return binary("sub", self, other * alpha if alpha != 1 else other)

    def mul(self, other): return binary("mul", self, other)
    def div(self, other, *, rounding_mode=None):
        if rounding_mode is None:
            return binary("div", self, other)
        return rounded_div(self, other, rounding_mode)   # (torch's "trunc" / "floor")

    divide = div
    def true_divide(self, other): return binary("div", self, other)
    multiply = mul
    subtract = sub
    def pow(self, exponent): return binary("pow", self, exponent)
    def gt(self, other): return binary("gt", self, other)
    def lt(self, other): return binary("lt", self, other)
    def ge(self, other): return binary("ge", self, other)
    def le(self, other): return binary("le", self, other)
    def eq(self, other): return binary("eq", self, other)
    def ne(self, other): return binary("ne", self, other)

    __add__, __sub__, __mul__ = _operator("add"), _operator("sub"), _operator("mul")
    __truediv__, __pow__ = _operator("div"), _operator("pow")
    __gt__, __lt__, __ge__, __le__, __eq__, __ne__ = gt, lt, ge, le, eq, ne
    __radd__ = _reflected("add")
    def __rsub__(self, other): return binary("sub", other, self)
    __rmul__ = _reflected("mul")
    def __rtruediv__(self, other): return binary("div", other, self)
    def __rpow__(self, other): return binary("pow", other, self)
    # boolean masks: & | ^ ~ as NumPy's bitwise ufuncs on bools (tracer/numpy_ufuncs.py)
    def __and__(self, other): return np.bitwise_and(self, other)
    def __rand__(self, other): return np.bitwise_and(other, self)
    def __or__(self, other): return np.bitwise_or(self, other)
    def __ror__(self, other): return np.bitwise_or(other, self)
    def __xor__(self, other): return np.bitwise_xor(self, other)
    def __rxor__(self, other): return np.bitwise_xor(other, self)
    def __invert__(self): return np.invert(self)
    def __lshift__(self, other): return np.left_shift(self, other)
    def __rlshift__(self, other): return np.left_shift(other, self)
    def __rshift__(self, other): return np.right_shift(self, other)
    def __rrshift__(self, other): return np.right_shift(other, self)
    # (a tensor's // is torch's floor division: its promotion, zero gradient)
    def __floordiv__(self, other):
        return np.floor_divide(self, other) if numpy_rules(self) else rounded_div(self, other, "floor")

    def __rfloordiv__(self, other):
        return np.floor_divide(other, self) if numpy_rules(self) else rounded_div(other, self, "floor")

    def __neg__(self): return self._apply("neg.default", [self], {})
    def __pos__(self): return self
    def __abs__(self): return self._apply("abs.default", [self], {})
    __matmul__ = matmul
    def __rmatmul__(self, other): return matmul(self._coerce(other), self)

    def _coerce(self, x):
        return x if isinstance(x, ArrayOps) else self._const(np.asarray(x))

    # -- unary: x.tanh() ... come from the op records (_record_methods, below) ----------
    neg = __neg__
    negative = neg

    def to(self, dtype):
        dtype = np.dtype(dtype)
        return self if dtype == self.dtype else apply("_to_copy.default", [self], {"dtype": dtype})

    astype = to
    def float(self): return self.to(np.float32)
    def double(self): return self.to(np.float64)
    def half(self): return self.to(np.float16)
    def long(self): return self.to(np.int64)
    def int(self): return self.to(np.int32)
    def bool(self): return self.to(np.bool_)

    def type(self, dtype=None):
        """torch's ``x.type()`` (the type's name) and ``x.type(dtype)`` (``x.to(dtype)``)."""
        if dtype is None:
            return f"gradjit.{_TYPE_NAMES.get(np.dtype(self.dtype).name, 'Tensor')}"
        return self.to(dtype)

    def argmax(self, dim=None, keepdim=False):
        """torch's: the index of the largest value (of the flattened tensor when ``dim`` is
        None), an int64 tensor without gradient."""
        return self._arg_extreme("max", dim, keepdim)

    def argmin(self, dim=None, keepdim=False):
        return self._arg_extreme("min", dim, keepdim)

    def _arg_extreme(self, kind, dim, keepdim):
        if dim is None:
            i = self.reshape(-1)._minmax_dim(kind, 0, False)[1]
            return i.reshape((1,) * self.ndim) if keepdim else i
        return self._minmax_dim(kind, dim, keepdim)[1]

    # -- reductions ------------------------------------------------------------------
    # The usual full reduction (``x.sum()``, a loss) calls _apply itself: no checks to
    # run, and no frame between the user's line and _apply, where each one costs the line
    # lookup (registry.user_where) a frame object to make: 5% of a small training step.
    def _reduce(self, name, dim, keepdim):
        dims = norm_dims(dim, self.ndim, name)
        if not dims:
            if not keepdim:
                return apply(f"{name}.default", [self], {})
            dims = tuple(range(self.ndim))
        overload = {"sum": "sum.dim_IntList", "mean": "mean.dim"}[name]
        return apply(overload, [self], {"dim": dims, "keepdim": bool(keepdim)})

    # (``axis=`` / ``keepdims=``: NumPy's spellings, accepted as torch accepts ``axis``)
    def sum(self, dim=None, keepdim=False, *, axis=None, keepdims=None, dtype=None):
        keepdim = keepdim if keepdims is None else keepdims
        if dtype is not None:   # (torch: the input is cast first, the sum is in dtype)
            out = self.to(dtype).sum(dim, keepdim, axis=axis)
            return out if out.dtype == np.dtype(dtype) else out.to(dtype)
        if dim is None and axis is None and not keepdim:
            return self._apply("sum.default", [self], {})
        return self._reduce("sum", dim if axis is None else axis, keepdim)

    def mean(self, dim=None, keepdim=False, *, axis=None, keepdims=None, dtype=None):
        keepdim = keepdim if keepdims is None else keepdims
        if dtype is not None:   # (torch: the input is cast first, the mean is in dtype)
            if np.dtype(dtype).kind != "f":
                raise RuntimeError(f"mean(): could not infer output dtype. Optional dtype must "
                                   f"be either a floating point or complex dtype. Got: "
                                   f"{np.dtype(dtype).name}")
            return self.to(dtype).mean(dim, keepdim, axis=axis)
        if dim is None and axis is None and not keepdim:
            return self._apply("mean.default", [self], {})
        return self._reduce("mean", dim if axis is None else axis, keepdim)

    def amax(self, dim=(), keepdim=False, *, axis=None, keepdims=None):
        keepdim = keepdim if keepdims is None else keepdims
        dims = norm_dims(dim if axis is None else axis, self.ndim, "amax") or ()
        return apply("amax.default", [self], {"dim": dims, "keepdim": bool(keepdim)})

    # -- linear algebra ------------------------------------------------------------
    def mm(self, other): return apply("mm.default", [self, other], {})
    def bmm(self, other): return apply("bmm.default", [self, other], {})
    matmul = __matmul__   # (the module's matmul, which coerces ``other``)

    # -- nn ------------------------------------------------------------------------------
    def softmax(self, dim, dtype=None):
        x = self if dtype is None else self.to(dtype)   # (torch: cast first, then softmax)
        return apply("_softmax.default", [x], {"dim": norm_dim(dim, x.ndim), "half_to_float": False})

    def log_softmax(self, dim, dtype=None):
        x = self if dtype is None else self.to(dtype)
        return apply("_log_softmax.default", [x], {"dim": norm_dim(dim, x.ndim),
                                                   "half_to_float": False})

    # -- NumPy protocols (tables in numpy_protocol.py) -------------------------------------
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        op = UNARY_UFUNCS.get(ufunc)
        if op is not None and method == "__call__" and not kwargs and self.dtype.kind == "f":
            return self._apply(op, [self], {})   # np.tanh(t) ... (NumPy's dtype: t's own)
        return _protocol().array_ufunc(ufunc, method, inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):
        return _protocol().array_function(func, args, kwargs)


def _unary_method(op, name):
    def method(self):   # one operand: its own front end, without apply's search
        return self._apply(op, [self], {})
    method.__name__, method.__qualname__ = name, f"ArrayOps.{name}"
    return method


def _record_methods(cls):
    """The methods each op record names (``OpDef.methods``) on ``cls``. A name also written
    out by hand in ``cls`` or its mixins is an error: one of the two would silently win."""
    for op in OPS.values():
        for name in op.methods:
            owner = next((k for k in cls.__mro__ if name in vars(k)), None)
            if owner is not None:
                raise GradjitError(f"op {op.name}: its record names the method {name!r}, which "
                                   f"{owner.__name__} also defines (tracer/registry.py OpDef)")
            setattr(cls, name, _unary_method(op.name, name))


_record_methods(ArrayOps)
_PROTOCOL = []


def _protocol():
    """tracer/numpy_protocol.py, imported on first use (it builds on this module); kept
    here, since an import statement per NumPy call costs more than the dispatch."""
    if not _PROTOCOL:
        from gradjit.tracer import numpy_protocol
        _PROTOCOL.append(numpy_protocol)
    return _PROTOCOL[0]
