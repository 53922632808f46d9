"""The op set: schema, shape/dtype rule and NumPy reference of every op.

Contract
- Each op is declared here exactly once through ``registry.defop``; its
  schema text is the ``name:`` line of its ``derivatives.yaml`` entry.
- Attributes arrive normalised by the front end (``tracer/api.py``): dims are
  sorted tuples of non-negative ints, sizes are concrete tuples, scalars are
  Python numbers, dtypes are ``np.dtype``.
- Dtype rules follow NumPy 2 (NEP 50: Python scalars are weak), so a float32
  tensor times ``0.5`` stays float32. Float-only math on integers gives float64.
  Tensor mode keeps torch's rule by casting the operands first where the two differ
  (``OpDef.promotion``, tracer/dispatch.torch_operands): every op sees NumPy's.
"""
from __future__ import annotations

import numpy as np

from gradjit.tracer import lazy_scipy
from gradjit.tracer.registry import ShapeError, defop, numpy_refusal, user_site

E, R, M, S, C = "elementwise", "reduction", "matmul", "shape", "composite"
_F8 = np.dtype(np.float64)


def _types_str(types):
    return ", ".join(f"{np.dtype(t.dtype).name}{list(t.shape)}" for t in types)


def broadcast_shapes(op, types):
    try:
        return tuple(np.broadcast_shapes(*[t.shape for t in types]))
    except ValueError:
        raise ShapeError(
            f"{op}: shapes {' and '.join(str(tuple(t.shape)) for t in types)} cannot be broadcast "
            f"together (inputs: {_types_str(types)})", user_site()) from None


def _scalars(attrs):
    return [v for k, v in attrs.items() if k in ("other", "exponent", "self") and isinstance(v, (int, float))]


def _promote(types, attrs):
    return np.result_type(*[t.dtype for t in types], *_scalars(attrs))


def _floaty(types, attrs):
    dt = _promote(types, attrs)
    return dt if dt.kind == "f" else np.dtype(np.float64)


def _integral(types, attrs):
    """Bit operations: NumPy has them for bools and integers only."""
    dt = _promote(types, attrs)
    if dt.kind not in "biu":
        raise TypeError(f"bit operations take bools and integers, got "
                        f"{', '.join(np.dtype(t.dtype).name for t in types)}")
    return dt


_RULES = {
    "promote": _promote,
    "integral": _integral,
    "float": _floaty,
    "same": lambda types, attrs: np.dtype(types[0].dtype),
    "bool": lambda types, attrs: np.dtype(np.bool_),
}


def _numpy_refuses(impl, types, attrs):
    """Raise what NumPy raises for these operand dtypes and scalar attributes: its typing
    (``-`` of bools, ``np.sign`` of bools) and NEP 50's range of a Python int beside an
    integer array (int8 + 300). The reference runs on empty arrays of the operands' dtypes,
    so only NumPy's typing and scalar conversion can raise, never a value."""
    try:
        with np.errstate(all="ignore"):
            impl(*[np.empty(0, t.dtype) for t in types], **attrs)
    except (TypeError, OverflowError, ValueError) as e:
        raise numpy_refusal(e) from None


def _negative_int_power(types, attrs):
    """NumPy's refusal of a negative integer exponent of an integer base, where the exponent
    is known now (a Python or NumPy int, or a 0-d constant of the trace; a traced exponent's
    values are not)."""
    e = attrs.get("exponent")
    graph = getattr(types[-1], "graph", None)   # (a traced Value; eager tensors: arrays)
    if e is None and graph is not None and types[1].dtype.kind in "iu":
        known = graph.constants.get(types[1])
        e = int(known) if known is not None and np.ndim(known) == 0 else None
    if (types[0].dtype.kind in "biu" and isinstance(e, int) and not isinstance(e, bool)
            and e < 0):
        raise ValueError(f"Integers to negative integer powers are not allowed. (an array of "
                         f"{np.dtype(types[0].dtype).name} to the power {e}: make the base "
                         f"float, x.astype(float) ** {e})\n  at {user_site()}")


def _ew(rule, name, impl=None):
    dtype_of = _RULES[rule]
    check = impl if rule != "float" else None   # (float math: NumPy takes every dtype)
    negative_power = name in ("pow.Tensor_Scalar", "pow.Tensor_Tensor")

    def infer(types, attrs):
        if check is not None:
            for t in types:
                if t.dtype.kind in "biu":   # (only integers and bools can be refused)
                    _numpy_refuses(check, types, attrs)
                    if negative_power:
                        _negative_int_power(types, attrs)
                    break
        return [(broadcast_shapes(name, types), dtype_of(types, attrs))]
    return infer


def _in_result_dtype(impl):
    """A float op's reference run on integer operands cast to the op's result dtype first:
    NumPy's own loop for int8 / uint8 / bool is float16 (np.log of uint8), whose rounding
    the float64 result of the rule would keep, unlike the compiled code."""
    def run(*arrays, **attrs):
        for a in arrays:   # (a loop, no generator: eager tensors run this per op)
            if getattr(a, "dtype", _F8).kind in "biu":
                break
        else:
            return impl(*arrays, **attrs)
        dt = _floaty([np.asarray(a) for a in arrays], attrs)
        return impl(*[np.asarray(a).astype(dt) if np.asarray(a).dtype.kind in "biu" else a
                      for a in arrays], **attrs)
    return run


def elementwise(schema, impl, rule="promote", numpy=(), methods=()):
    """Declare an elementwise op; ``numpy`` / ``methods``: its front ends (OpDef)."""
    name = schema.split("(")[0]
    if rule != "float":
        op = defop(schema, E, _ew(rule, name, impl), impl)
    else:
        op = defop(schema, E, _ew(rule, name), _in_result_dtype(impl))
        op.float_math = True
    if rule != "same":
        op.promotion = rule
    op.numpy, op.methods = tuple(numpy), tuple(methods)
    return op


def unary(name, impl, rule, numpy=None, aliases=()):
    """A one-array op whose front ends are ``np.<ufunc>(x)`` (``numpy``, when it is one) and
    the methods ``x.<name>()`` and ``x.<alias>()``: the whole front end of a new unary op."""
    return elementwise(f"{name}(Tensor self) -> Tensor", impl, rule,
                       () if numpy is None else (numpy,), (name, *aliases))


# -- elementwise -------------------------------------------------------------
def _recip(x):
    return np.true_divide(1, x)


for _name, _fn in [("exp", np.exp), ("log", np.log), ("sin", np.sin), ("cos", np.cos),
                   ("tanh", np.tanh), ("sqrt", np.sqrt), ("reciprocal", np.reciprocal)]:
    unary(_name, _recip if _fn is np.reciprocal else _fn, "float", _fn)
unary("sigmoid", lazy_scipy.special("expit"), "float")
unary("abs", np.abs, "same", np.absolute)
unary("sign", np.sign, "same", np.sign, ("sgn",))
unary("relu", lambda x: np.maximum(x, np.zeros((), x.dtype)), "same")
elementwise("neg(Tensor self) -> Tensor", np.negative, "same", (np.negative,))   # (x.neg(): api.py)
for _name, _fn in [("zeros_like", np.zeros_like), ("ones_like", np.ones_like),
                   ("detach", np.copy)]:   # (detach: stop_gradient, the values without gradient)
    elementwise(f"{_name}(Tensor self) -> Tensor", _fn, "same")


def _axpy(a, b, alpha, sign=1):
    b = b if alpha == 1 else alpha * b
    return a + b if sign == 1 else a - b   # (not a + -1 * b: -1 is no uint8, NEP 50)


elementwise("add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor",
            lambda a, b, alpha: _axpy(a, b, alpha))
elementwise("add.Scalar(Tensor self, Scalar other, Scalar alpha=1) -> Tensor",
            lambda a, other, alpha: _axpy(a, other, alpha))
elementwise("sub.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor",
            lambda a, b, alpha: _axpy(a, b, alpha, -1))
elementwise("sub.Scalar(Tensor self, Scalar other, Scalar alpha=1) -> Tensor",
            lambda a, other, alpha: _axpy(a, other, alpha, -1))
elementwise("rsub.Scalar(Tensor self, Scalar other, Scalar alpha=1) -> Tensor",
            lambda a, other, alpha: other - (a if alpha == 1 else alpha * a))
elementwise("mul.Tensor(Tensor self, Tensor other) -> Tensor", np.multiply)
elementwise("mul.Scalar(Tensor self, Scalar other) -> Tensor", lambda a, other: a * other)
elementwise("div.Tensor(Tensor self, Tensor other) -> Tensor", np.true_divide, "float")
elementwise("div.Scalar(Tensor self, Scalar other) -> Tensor",
            lambda a, other: np.true_divide(a, other), "float")
elementwise("pow.Tensor_Scalar(Tensor self, Scalar exponent) -> Tensor",
            lambda a, exponent: np.power(a, exponent))
elementwise("pow.Tensor_Tensor(Tensor self, Tensor exponent) -> Tensor", np.power)
elementwise("pow.Scalar(Scalar self, Tensor exponent) -> Tensor",
            lambda e, self: np.power(self, e))


def _where_infer(types, attrs):
    cond = types[0]
    if np.dtype(cond.dtype) != np.bool_:
        raise TypeError(f"where.self: expected condition to be a boolean tensor, but got a tensor "
                        f"with dtype {np.dtype(cond.dtype).name}")
    return [(broadcast_shapes("where.self", types), np.result_type(types[1].dtype, types[2].dtype))]


defop("where.self(Tensor condition, Tensor self, Tensor other) -> Tensor", E, _where_infer,
      np.where).promotion = "where"

def _written_infer(types, attrs):
    return [(tuple(types[0].shape), types[0].dtype)]


# ``value`` with the gradient passed to ``self``: a no-grad in-place write into a tensor with
# history (tracer/tensor_inplace.py): torch keeps its grad_fn, and later ops read the new value
defop("_written(Tensor self, Tensor value) -> Tensor", E, _written_infer,
      lambda a, value: np.array(value, copy=True))

for _cmp, _fn in [("gt", np.greater), ("lt", np.less), ("ge", np.greater_equal),
                  ("le", np.less_equal), ("eq", np.equal), ("ne", np.not_equal)]:
    elementwise(f"{_cmp}.Tensor(Tensor self, Tensor other) -> Tensor", _fn, "bool")
    elementwise(f"{_cmp}.Scalar(Tensor self, Scalar other) -> Tensor",
                (lambda f: lambda a, other: f(a, other))(_fn), "bool")


def _to_copy_infer(types, attrs):
    return [(tuple(types[0].shape), np.dtype(attrs["dtype"]))]


defop("_to_copy(Tensor self, *, ScalarType dtype) -> Tensor", E, _to_copy_infer,
      lambda a, dtype: np.asarray(a).astype(dtype))


def _expand_infer(types, attrs):
    size = tuple(attrs["size"])
    (t,) = types
    if len(size) < len(t.shape) or np.broadcast_shapes(size, t.shape) != size:
        raise ShapeError(f"expand.default: the shape {tuple(t.shape)} cannot be expanded to {size} "
                         f"(input {_types_str(types)})", user_site())
    return [(size, t.dtype)]


# expand is elementwise for the code generators: a broadcasting read of its input.
defop("expand(Tensor self, SymInt[] size, *, bool implicit=False) -> Tensor", E, _expand_infer,
      lambda a, size, implicit: np.broadcast_to(a, size))


# -- reductions ----------------------------------------------------------------
def _reduced_shape(shape, dim, keepdim):
    dims = range(len(shape)) if dim is None else dim
    if keepdim:
        return tuple(1 if i in dims else s for i, s in enumerate(shape))
    return tuple(s for i, s in enumerate(shape) if i not in dims)


def _sum_dtype(dt):
    """NumPy's accumulator of sum / prod / cumsum / cumprod: bools and signed integers add up
    in int64, unsigned integers in uint64, anything else in its own dtype."""
    dt = np.dtype(dt)
    if dt.kind == "u":
        return np.dtype(np.uint64)
    return np.dtype(np.int64) if dt.kind in "bi" else dt


def _float_only(op, dt):
    if np.dtype(dt).kind != "f":
        raise TypeError(f"{op}: could not infer output dtype. Input dtype must be a floating point "
                        f"dtype, but got {np.dtype(dt).name}")
    return np.dtype(dt)


def _axes(dim):
    return None if dim is None or dim == () else tuple(dim)


defop("sum(Tensor self) -> Tensor", R,
      lambda t, a: [((), _sum_dtype(t[0].dtype))],
      lambda x: np.asarray(np.sum(x, dtype=_sum_dtype(x.dtype))))
defop("sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False) -> Tensor", R,
      lambda t, a: [(_reduced_shape(t[0].shape, a["dim"], a["keepdim"]), _sum_dtype(t[0].dtype))],
      lambda x, dim, keepdim: np.asarray(np.sum(x, axis=_axes(dim), keepdims=keepdim,
                                                dtype=_sum_dtype(x.dtype))))
defop("mean(Tensor self) -> Tensor", R,
      lambda t, a: [((), _float_only("mean", t[0].dtype))],
      lambda x: np.asarray(np.mean(x)))
defop("mean.dim(Tensor self, int[1]? dim, bool keepdim=False) -> Tensor", R,
      lambda t, a: [(_reduced_shape(t[0].shape, a["dim"], a["keepdim"]),
                     _float_only("mean.dim", t[0].dtype))],
      lambda x, dim, keepdim: np.asarray(np.mean(x, axis=_axes(dim), keepdims=keepdim)))


def reduces_nothing(shape, dims):
    """True when a reduction over ``dims`` (empty or None: every dim) has no element to reduce.
    A 0-d tensor (whose "dim 0" is itself, as softmax(dim=0) of a scalar) has one element."""
    shape = tuple(shape)
    return 0 in shape if not dims or not shape else any(shape[d] == 0 for d in dims)


def nonempty_reduction(op, shape, dims):
    """A reduction without identity (max, min) over zero elements is an error, as in torch."""
    shape = tuple(shape)
    if not reduces_nothing(shape, dims):
        return
    if not dims:
        raise ShapeError(f"{op}(): Expected reduction dim to be specified for input.numel() == 0 "
                         f"(input shape {shape}). Specify the reduction dim with the 'dim' "
                         f"argument.", user_site())
    d = next(d for d in dims if shape[d] == 0)
    raise ShapeError(f"{op}(): Expected reduction dim {d} to have non-zero size (input shape "
                     f"{shape})", user_site())


def _minmax_reduced(op):
    def infer(t, a):
        nonempty_reduction(op, t[0].shape, a["dim"])
        return [(_reduced_shape(t[0].shape, a["dim"] or None, a["keepdim"]), t[0].dtype)]
    return infer


defop("amax(Tensor self, int[1] dim=[], bool keepdim=False) -> Tensor", R, _minmax_reduced("amax"),
      lambda x, dim, keepdim: np.asarray(np.amax(x, axis=_axes(dim), keepdims=keepdim)))


# -- matmul ------------------------------------------------------------------------
def _mm_infer(op, rank):
    def infer(types, attrs):
        a, b = types
        ok = (len(a.shape) == rank == len(b.shape) and a.shape[-1] == b.shape[-2]
              and a.shape[:-2] == b.shape[:-2])
        if not ok:
            raise ShapeError(f"{op}: shapes {tuple(a.shape)} and {tuple(b.shape)} cannot be "
                             f"multiplied (inputs: {_types_str(types)})", user_site())
        if np.dtype(a.dtype) != np.dtype(b.dtype):
            raise TypeError(f"{op}: expected both inputs to have the same dtype, but got "
                            f"{np.dtype(a.dtype).name} != {np.dtype(b.dtype).name}")
        return [(tuple(a.shape[:-1]) + (b.shape[-1],), np.dtype(a.dtype))]
    return infer


defop("mm(Tensor self, Tensor mat2) -> Tensor", M, _mm_infer("mm.default", 2), np.matmul)
defop("bmm(Tensor self, Tensor mat2) -> Tensor", M, _mm_infer("bmm.default", 3), np.matmul)


# -- shape ---------------------------------------------------------------------------
def _view_infer(types, attrs):
    (t,) = types
    size = tuple(attrs["size"])
    if int(np.prod(size)) != int(np.prod(t.shape)):
        raise ShapeError(f"view.default: shape {size} is invalid for input of size "
                         f"{int(np.prod(t.shape))} (input {_types_str(types)})", user_site())
    return [(size, t.dtype)]


def _shape_op(schema, shape_fn, impl):
    return defop(schema, S, lambda t, a: [(shape_fn(tuple(t[0].shape), **a), t[0].dtype)], impl)


defop("view(Tensor self, SymInt[] size) -> Tensor", S, _view_infer,
      lambda x, size: np.reshape(x, size))
_shape_op("permute(Tensor self, int[] dims) -> Tensor",
          lambda s, dims: tuple(s[d] for d in dims), lambda x, dims: np.transpose(x, dims))


def _swap(s, dim0, dim1):
    s = list(s)
    s[dim0], s[dim1] = s[dim1], s[dim0]
    return tuple(s)


_shape_op("transpose.int(Tensor self, int dim0, int dim1) -> Tensor", _swap,
          lambda x, dim0, dim1: np.swapaxes(x, dim0, dim1))
_shape_op("t(Tensor self) -> Tensor", lambda s: s[::-1], lambda x: x.T)
_shape_op("squeeze(Tensor self) -> Tensor", lambda s: tuple(d for d in s if d != 1), np.squeeze)
_shape_op("squeeze.dim(Tensor self, int dim) -> Tensor",
          lambda s, dim: s[:dim] + s[dim + 1:] if s[dim] == 1 else s,
          lambda x, dim: np.squeeze(x, dim) if x.shape[dim] == 1 else x)
_shape_op("unsqueeze(Tensor self, int dim) -> Tensor", lambda s, dim: s[:dim] + (1,) + s[dim:],
          lambda x, dim: np.expand_dims(x, dim))


# -- composite (own formula; decomposed before code generation) -----------------------
def _shift(x, dim):
    """x minus its max along ``dim`` (an empty x: nothing to shift, and no max to take)."""
    return x - np.amax(x, axis=dim, keepdims=True) if x.size else x


def _softmax(x, dim, half_to_float):
    e = np.exp(_shift(x, dim))
    return e / np.sum(e, axis=dim, keepdims=True)


def _log_softmax(x, dim, half_to_float):
    z = _shift(x, dim)
    return z - np.log(np.sum(np.exp(z), axis=dim, keepdims=True))


def _softmax_infer(types, attrs):
    return [(tuple(types[0].shape), _float_only("softmax", types[0].dtype))]


defop("_softmax(Tensor self, int dim, bool half_to_float) -> Tensor", C, _softmax_infer, _softmax)
defop("_log_softmax(Tensor self, int dim, bool half_to_float) -> Tensor", C, _softmax_infer,
      _log_softmax)
