"""Dispatch core shared by the op-surface modules: front ends and argument normalisation.

Contract
- ``apply(op_name, tensors, attrs)`` picks the front end by argument type (a
  ``Tracer`` anywhere means the call is being traced) and lets it run or record
  the op. Front ends register with ``register_frontend`` in priority order.
- ``norm_dim`` / ``norm_dims`` turn user dims (negative, int or sequence) into
  sorted non-negative tuples with torch's IndexError text; ``is_scalar`` tells
  Python numbers from arrays; ``as_operand`` turns a Python scalar met beside a
  tensor into a 0-d constant tensor of the promoted dtype (NEP 50: the scalar
  is weak), so binary ops need only a Tensor-Tensor overload.
- Tensor mode promotes dtypes as torch does (``torch_dtype``: dimensioned tensors
  before 0-d ones, by category bool < integer < float; a Python scalar is weak, as
  in NEP 50, and float64 is the default float dtype): ``apply`` casts a Tensor op's
  operands first where NumPy's rule would give another dtype (``torch_operands``),
  so the ops, their references and code generators know NumPy's rule only.
  Traced arrays (``_numpy_promotion``) keep NumPy's, and so do tensors while a NumPy
  function or ufunc runs on them (``numpy_rules``: ``np.gradient(t)`` has NumPy's values).
- Imports nothing but the registry, so ``api.py`` and the method mixins
  (``methods_*.py``) can all build on it.
"""
from __future__ import annotations

import numbers
import threading

import numpy as np

from gradjit.tracer.registry import OPS

_FRONTENDS = []


def register_frontend(cls):
    _FRONTENDS.append(cls)
    return cls


def apply(op, tensors, attrs):
    for cls in _FRONTENDS:
        for t in tensors:
            if isinstance(t, cls):
                if len(tensors) > 1 and not cls._numpy_promotion:
                    tensors = torch_operands(op, tensors)
                return cls._apply(op, tensors, attrs)
    raise TypeError(f"{op}: no gradjit tensor among the arguments {[type(t).__name__ for t in tensors]}")


class _Rules(threading.local):
    depth = 0   # > 0 while a NumPy function or ufunc runs on tensors (tracer/numpy_protocol.py)


NUMPY_CALL = _Rules()


def numpy_rules(x):
    """Whether NumPy's rules (promotion, indexing) hold for ``x``: a traced array, or a
    tensor inside a NumPy function (whose composites must give NumPy's values)."""
    return x._numpy_promotion or NUMPY_CALL.depth > 0


_CATEGORY = {"b": 0, "u": 1, "i": 1, "f": 2}


def torch_dtype(dtypes, ndims):
    """torch's result dtype of tensors of ``dtypes`` and ``ndims``: the highest category
    (bool < integer < float) decides; the dimensioned tensors of that category promote
    among themselves, or, where none is of it, the 0-d ones (float32[3] * int64[3] and
    float32[3] * 0-d float64 are float32; int64[3] * 0-d float32 is float32)."""
    cats = [_CATEGORY.get(np.dtype(d).kind, 3) for d in dtypes]
    top = max(cats)
    dims = [d for d, c, n in zip(dtypes, cats, ndims) if c == top and n]
    return np.result_type(*(dims or [d for d, c in zip(dtypes, cats) if c == top]))


def _float_or_default(dt):
    return dt if dt.kind == "f" else np.dtype(np.float64)


def torch_operands(op, tensors):
    """A Tensor op's operands, those whose dtype differs from torch's common dtype cast to
    it where NumPy's rule would compute in another dtype (float32[3] * int64[3]: int64 to
    float32). Operands of one dtype, and ops without an elementwise promotion, pass."""
    d0 = tensors[0].dtype   # (the usual case first, NumPy's dtypes being singletons:
    for t in tensors:       # every op of a step runs this)
        d = t.dtype
        if d is not d0 and d != d0:
            break
    else:
        return tensors
    rule = getattr(OPS.get(op), "promotion", "")
    if not rule or NUMPY_CALL.depth:
        return tensors
    first = 1 if rule == "where" else 0   # (where's condition takes no part)
    parts = tensors[first:]
    dts = [np.dtype(t.dtype) for t in parts]
    if all(d == dts[0] for d in dts):
        return tensors
    common, numpy_common = torch_dtype(dts, [len(t.shape) for t in parts]), np.result_type(*dts)
    if rule == "float":   # (integer operands compute in the float result dtype)
        common, numpy_common = _float_or_default(common), _float_or_default(numpy_common)
    if common == numpy_common:
        return tensors
    return list(tensors[:first]) + [t if d == common else
                                    t._apply("_to_copy.default", [t], {"dtype": common})
                                    for t, d in zip(parts, dts)]


def common_dtype(like, tensors):
    """The dtype ``tensors`` (gradjit objects beside ``like``) promote to (cat, stack):
    NumPy's rule for traced arrays, torch's for tensors."""
    dts = [np.dtype(t.dtype) for t in tensors]
    if numpy_rules(like):
        return np.result_type(*dts)
    return torch_dtype(dts, [len(t.shape) for t in tensors])


def is_scalar(x):
    return isinstance(x, numbers.Number) and not isinstance(x, np.ndarray)


def _py(x):
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, int) and type(x) is not int and not isinstance(x, bool):
        return int(x)   # an int subclass (a traced value's .size) is a weak Python int too
    return x


def norm_dim(d, ndim, op="dim"):
    n = max(ndim, 1)
    if not -n <= d < n:
        raise IndexError(f"{op}: Dimension out of range (expected to be in range of [{-n}, {n - 1}], "
                         f"but got {d})")
    return d % n if ndim else 0


def norm_dims(dim, ndim, op="dim"):
    if dim is None:
        return None
    if isinstance(dim, numbers.Integral):
        dim = (dim,)
    dims = tuple(sorted({norm_dim(int(d), ndim, op) for d in dim}))
    return dims if ndim else ()


def strong(x, other):
    """A NumPy scalar beside a traced array is strong in NumPy's promotion (NEP 50:
    float32 array * np.float64(2) is float64), unlike a Python number: where that changes
    the result dtype it becomes a 0-d constant. Torch tensors keep torch's rule (weak)."""
    if (isinstance(x, np.generic) and getattr(other, "_numpy_promotion", False)
            and (getattr(other, "_weak", False)   # (a weak traced Python float: 0.5 * f32(2))
                 or np.result_type(other.dtype, x) != np.result_type(other.dtype, x.item()))):
        return other._const(np.asarray(x))
    return x


def promoting(x, like):
    """What ``np.result_type`` should see for scalar ``x`` beside ``like``: a NumPy scalar
    as itself where ``like`` follows NumPy (strong), else a Python number (weak)."""
    return x if isinstance(x, np.generic) and getattr(like, "_numpy_promotion", False) else _py(x)


def sizes_arg(op, args, keyword, rest=None):
    """Torch's forms of a sizes argument: ``f(2, 3)``, ``f((2, 3))``, ``f(dims=(2, 3))``
    (``keyword``: the keyword's value, None when not given); other keywords are refused."""
    if rest:
        raise TypeError(f"{op}() got an unexpected keyword argument {next(iter(rest))!r}")
    if keyword is not None:
        if args:
            raise TypeError(f"{op}() got its sizes both by position and by keyword")
        args = (keyword,)
    return args[0] if len(args) == 1 and isinstance(args[0], (tuple, list)) else args


def float_operand(x, like):
    """``as_operand``, where a float array meets ``like``'s float dtype in the graph (a cast
    node), so the constant is the caller's array itself, read at each call: a batch buffer
    refilled between calls is seen (a copy cast up front kept its first values)."""
    if not hasattr(x, "_apply"):
        a = np.asarray(x)
        if a.dtype.kind == "f" and np.dtype(like.dtype).kind == "f":
            c = as_operand(a, like)
            return c if c.dtype == like.dtype else c.to(like.dtype)
    return as_operand(x, like)


def as_operand(x, like):
    """``x`` as a gradjit object: tensors pass, scalars and arrays become constants of
    ``like``'s front end; a Python scalar takes the promoted dtype of ``like`` (weak), a
    NumPy scalar beside a traced array keeps its own (strong, as NumPy's)."""
    x = strong(x, like)
    x = _py(x)
    if hasattr(x, "_apply"):
        return x
    if is_scalar(x):
        dt = np.result_type(like.dtype, x)
        c = like._const(np.asarray(x, dtype=dt))
        return like._weakly(c) if getattr(like, "_weak", False) else c   # (lam + 1: weak)
    return like._const(np.asarray(x))


def operands(*xs):
    """Coerce a mix of tensors, arrays and scalars against the first tensor among them."""
    like = next((x for x in xs if hasattr(x, "_apply")), None)
    if like is None:
        raise TypeError(f"no gradjit tensor among the arguments {[type(x).__name__ for x in xs]}")
    return [as_operand(x, like) for x in xs]
