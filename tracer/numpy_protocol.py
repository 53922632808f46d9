"""NumPy protocols: which NumPy ufuncs and functions trace, and as what.

Contract: ``array_ufunc`` / ``array_function`` implement ``__array_ufunc__`` /
``__array_function__`` for ``ArrayOps`` (Tensor and Tracer) by mapping each
supported NumPy callable to the torch-named op surface of ``tracer/api.py``.
Anything else raises ``UnsupportedError`` naming the NumPy function, the
supported list and the user's line; nothing silently falls back to NumPy. While one
runs, tensors follow NumPy's promotion and indexing too (``dispatch.numpy_rules``).
"""
from __future__ import annotations

import inspect
import sys

import numpy as np

from gradjit.tracer.api import UNARY_UFUNCS, ArrayOps, apply, binary, matmul
from gradjit.tracer.dispatch import NUMPY_CALL
from gradjit.tracer.registry import GradjitRuntimeError
from gradjit.tracer.methods_math import binop
from gradjit.tracer import numpy_reduce as nm
from gradjit.tracer import numpy_ufunc_methods
from gradjit.tracer.methods_reduce import ReduceMethods
from gradjit.tracer.numpy_args import UnsupportedError  # noqa: F401  (raised here too)
from gradjit.tracer.registry import user_site
from gradjit.tracer.ufunc_dtypes import conform


def array_ufunc(ufunc, method, inputs, kwargs):
    NUMPY_CALL.depth += 1   # (tensors too follow NumPy's rules in it: dispatch.numpy_rules)
    try:
        return _array_ufunc(ufunc, method, inputs, kwargs)
    finally:
        NUMPY_CALL.depth -= 1


def _array_ufunc(ufunc, method, inputs, kwargs):
    fn = _UFUNCS.get(ufunc)
    if fn is None and _scipy_ufuncs():
        fn = _UFUNCS.get(ufunc)
    dtype = kwargs.pop("dtype", None) if method == "__call__" and fn is not None else None
    if dtype is not None:   # the loop's dtype: the operands are cast to it first
        inputs = [x.astype(dtype) if isinstance(x, ArrayOps) else np.asarray(x, dtype)
                  for x in inputs]
    if method != "__call__":   # reduce, accumulate, outer, at (tracer/numpy_ufunc_methods.py)
        return _fresh(numpy_ufunc_methods.call(ufunc, method, fn, list(inputs), dict(kwargs),
                                               _ufunc_name(ufunc)))
    out = kwargs.pop("out", None) if fn is not None else None
    if fn is None or kwargs:
        _unsupported(_ufunc_name(ufunc) + (f" with {sorted(kwargs)}" if kwargs else ""))
    res = _fresh(conform(ufunc, inputs, fn))   # NumPy's result dtype (tracer/ufunc_dtypes.py)
    return res if out is None else _into(ufunc, res, out)


def _into(ufunc, res, out):
    """``out=``: the result written into the given arrays (``x += y`` on a NumPy array,
    ``np.add(a, b, out=a)``), which are returned, as NumPy does. A traced buffer takes the
    write as any assignment (tracer/tracer_setitem.py, a Tensor's in-place rules); a NumPy
    array refuses a traced value with the assignment's own error. Casting is NumPy's
    ``same_kind``: a float result is not written into an integer array."""
    outs = out if isinstance(out, tuple) else (out,)
    results = res if isinstance(res, tuple) else (res,)
    if len(outs) != len(results):
        raise ValueError(f"{_ufunc_name(ufunc)}: 'out' must have {len(results)} array(s), "
                         f"got {len(outs)}")
    for o, r in zip(outs, results):
        if o is None:
            continue
        if not np.can_cast(r.dtype, o.dtype, "same_kind"):
            raise TypeError(f"Cannot cast ufunc '{ufunc.__name__}' output from {r.dtype!r} to "
                            f"{np.dtype(o.dtype)!r} with casting rule 'same_kind'")
        if getattr(r, "requires_grad", False) and not isinstance(o, ArrayOps):
            # (as torch: its out= functions refuse an input that requires grad)
            raise GradjitRuntimeError(f"{_ufunc_name(ufunc)}(..., out=...): the result requires "
                               f"grad, and a NumPy array given as out= cannot carry it; "
                               f"write into a tensor, or drop out=", user_site())
        o[...] = r
    return outs[0] if len(outs) == 1 else outs


def _ufunc_name(ufunc):
    """How the caller spelled ``ufunc``: ``np.exp``, ``scipy.special.gamma``, else its name."""
    name = ufunc.__name__
    if getattr(np, name, None) is ufunc:
        return f"np.{name}"
    special = sys.modules.get("scipy.special")
    return f"scipy.special.{name}" if getattr(special, name, None) is ufunc else name


def array_function(func, args, kwargs):
    fn = _FUNCTIONS.get(func)
    if fn is None:
        _unsupported(_numpy_name(func))
    NUMPY_CALL.depth += 1
    try:
        res = fn(*args, **kwargs)
    except TypeError as e:
        _bad_arguments(func, fn, args, kwargs, e)
        raise
    finally:
        NUMPY_CALL.depth -= 1
    return res if func in _VIEW_FUNCTIONS else _fresh(res)


# NumPy functions that return views of their input (writes through them reach it: the view
# tree of tracer/tracer_setitem.py). Every other function returns a new array: a new tracer
# object, even when gradjit's implementation ends in a view op or returns its input.
_VIEW_FUNCTIONS = {np.reshape, np.ravel, np.transpose, np.swapaxes, np.moveaxis, np.rollaxis,
                   np.squeeze, np.expand_dims, np.atleast_1d, np.atleast_2d, np.atleast_3d,
                   np.flip, np.fliplr, np.flipud, np.rot90, np.diagonal, np.broadcast_to,
                   np.real, np.split, np.array_split, np.hsplit, np.vsplit, np.dsplit}


def _fresh(res):
    """A traced result as a new array (``_copy``: not a registered view, not an input)."""
    if isinstance(res, (tuple, list)):
        items = [_fresh(r) for r in res]
        return type(res)(*items) if hasattr(type(res), "_fields") else type(res)(items)
    graph = getattr(res, "graph", None)
    if graph is not None and graph.view_tree is not None:
        return res._copy()
    return res


def _bad_arguments(func, fn, args, kwargs, error):
    """Re-raise an argument error (an unknown keyword, too many arguments) naming the NumPy
    function, not gradjit's implementation of it; other TypeErrors pass unchanged."""
    try:
        inspect.signature(fn).bind(*args, **kwargs)
    except TypeError as e:
        raise TypeError(f"np.{func.__name__}: {e} (gradjit follows NumPy's signature: "
                        f"{func.__name__}{inspect.signature(func) if _has_sig(func) else '(...)'})"
                        ) from error
    except ValueError:   # no signature to check against
        pass


def _has_sig(func):
    try:
        inspect.signature(func)
        return True
    except (TypeError, ValueError):
        return False


def _unsupported(what):
    raise UnsupportedError(f"{what} is not supported on gradjit tensors and traced arrays yet "
                           f"(the README's section 'NumPy inside gj.jit / gj.grad' lists the "
                           f"{len(_NAMES)} functions that are)", user_site())


def _numpy_name(func):
    """``np.linalg.eig``, ``np.fft.fft``, ``np.sum``: the name a caller wrote."""
    module = getattr(func, "__module__", "") or ""
    if getattr(np, func.__name__, None) is func or not module.startswith("numpy"):
        return f"np.{func.__name__}"
    public = module.replace("numpy.", "").split("._")[0].split(".")[0]
    return f"np.{public}.{func.__name__}" if public and public != "numpy" else f"np.{func.__name__}"


def _as_obj(x, like):
    return x if isinstance(x, ArrayOps) else like._const(np.asarray(x))


def _first(*xs):
    return next(x for x in xs if isinstance(x, ArrayOps))


def _unary_fn(op):
    return lambda x: apply(op, [x], {})


_UFUNCS = {
    np.add: lambda a, b: binary("add", a, b), np.subtract: lambda a, b: binary("sub", a, b),
    np.multiply: lambda a, b: binary("mul", a, b), np.true_divide: lambda a, b: binary("div", a, b),
    np.power: lambda a, b: binary("pow", a, b), np.greater: lambda a, b: binary("gt", a, b),
    np.less: lambda a, b: binary("lt", a, b), np.greater_equal: lambda a, b: binary("ge", a, b),
    np.less_equal: lambda a, b: binary("le", a, b), np.equal: lambda a, b: binary("eq", a, b),
    np.not_equal: lambda a, b: binary("ne", a, b),
    **{f: _unary_fn(op) for f, op in UNARY_UFUNCS.items()},
    np.matmul: lambda a, b: matmul(_as_obj(a, _first(a, b)), _as_obj(b, _first(a, b))),
}


def _method(name):
    return lambda x: getattr(x, name)()


# The elementwise math family (tracer/ops_math.py): a unary ufunc that is one op comes from
# the op's record (UNARY_UFUNCS, above); those that are composites map to their methods,
# binary ufuncs to their op with a scalar or array allowed on either side.
_UFUNCS.update({f: _method(m) for f, m in [
    (np.square, "square"), (np.deg2rad, "deg2rad"), (np.rad2deg, "rad2deg"),
    (np.radians, "deg2rad"), (np.degrees, "rad2deg"),
]})
def _binary(op):
    return lambda a, b: binop(op, a, b)


_UFUNCS.update({f: _binary(op) for f, op in [
    (np.arctan2, "atan2.default"), (np.hypot, "hypot.default"), (np.maximum, "maximum.default"),
    (np.minimum, "minimum.default"), (np.fmax, "fmax.default"), (np.fmin, "fmin.default"),
    (np.fmod, "fmod.Tensor"), (np.remainder, "remainder.Tensor"),
    (np.copysign, "copysign.Tensor"), (np.logaddexp, "logaddexp.default"),
    (np.logaddexp2, "logaddexp2.default"),
]})
# scipy.special's ufuncs, by name: added to the table the first time a ufunc call misses
# it while scipy.special is imported (a caller can only pass one of them after importing
# it; gradjit does not import SciPy itself: tracer/lazy_scipy.py).
_SCIPY_UNARY = [("erf", "erf"), ("erfc", "erfc"), ("erfinv", "erfinv"), ("gammaln", "lgamma"),
                ("psi", "digamma"), ("expit", "sigmoid"), ("logit", "logit")]
_SCIPY_BINARY = [("xlogy", "xlogy.Tensor")]
_SCIPY_ADDED = [False]


def _scipy_ufuncs():
    """Add scipy.special's ufuncs to the table if it is imported now; True if added."""
    special = sys.modules.get("scipy.special")
    if _SCIPY_ADDED[0] or special is None:
        return False
    _SCIPY_ADDED[0] = True
    _UFUNCS.update({getattr(special, f): _method(m) for f, m in _SCIPY_UNARY})
    _UFUNCS.update({getattr(special, f): _binary(op) for f, op in _SCIPY_BINARY})
    return True


def _np_sort(a, axis=-1, kind=None, order=None, *, stable=None):
    if order is not None:
        _unsupported("np.sort(..., order=...)")
    if axis is None:
        return ReduceMethods.sort(a.reshape(-1), 0)[0]
    return ReduceMethods.sort(a, axis)[0]


_FUNCTIONS = {
    # NumPy's reductions: one implementation each (tracer/numpy_reduce.py); reshape, where,
    # clip, median ... with NumPy's own signatures are in tracer/numpy_shape.py (_TABLES below)
    np.sum: nm.np_sum, np.mean: nm.np_mean, np.prod: nm.np_prod,
    np.amax: nm.np_max, np.max: nm.np_max, np.amin: nm.np_min, np.min: nm.np_min,
    np.var: nm.np_var, np.std: nm.np_std, np.cumsum: nm.np_cumsum, np.cumprod: nm.np_cumprod,
    np.transpose: nm.np_transpose, np.squeeze: nm.np_squeeze,
    np.broadcast_to: lambda a, shape: a.expand(shape),
    np.round: lambda a, decimals=0: a.round(decimals),
    np.around: lambda a, decimals=0: a.round(decimals),
    np.fix: lambda a: a.trunc(),
    np.nan_to_num: lambda x, copy=True, nan=0.0, posinf=None, neginf=None: x.nan_to_num(
        nan, posinf, neginf),
}


_FUNCTIONS.update({
    np.nansum: nm.np_nansum,
    np.sort: _np_sort,
})
from gradjit.tracer import creation as _cr  # noqa: E402


def _np_like(fill):
    def fn(a, *args, dtype=None, order="K", subok=True, shape=None, device=None):
        if shape is not None:   # a constant of another shape, a's dtype
            dt = np.dtype(dtype) if dtype is not None else np.dtype(a.dtype)
            value = args[0] if fill == "full" else (1 if fill == "ones" else 0)
            if hasattr(value, "_apply"):
                return value.astype(dt) + a._const(np.zeros(shape, dt))
            return a._const(np.full(shape, value, dt))
        if fill == "full":
            (value,) = args
            return _cr.full_like(a, value, dtype=dtype)
        return getattr(_cr, f"{fill}_like")(a, dtype=dtype)
    return fn


_FUNCTIONS.update({   # constants of the caller's front end (tracer/creation.py)
    np.zeros_like: _np_like("zeros"), np.ones_like: _np_like("ones"),
    np.empty_like: _np_like("empty"), np.full_like: _np_like("full"),
    np.copy: lambda a, order="K", subok=False: a.clone(),
})
# The NumPy-function modules whose tables are merged, in this order: a later table's entry
# replaces an earlier one's (numpy_shape's NumPy signatures replace narrower entries).
from gradjit.tracer import (linalg, numpy_grids, numpy_index, numpy_joins,  # noqa: E402
                            numpy_pad, numpy_shape, numpy_stats, numpy_ufuncs)

_TABLES = (
    linalg,         # np.linalg.*, np.einsum, np.tensordot ... (tracer/linalg.py)
    numpy_index,    # np.flip, np.rot90, np.repeat, np.diag, np.moveaxis ...
    nm,             # (numpy_reduce) np.argmax, np.any, np.ptp, np.nancumsum ...
    numpy_ufuncs,   # np.isnan, np.logical_and, np.invert ...; np.real, np.sinc, np.select
    numpy_joins,    # np.concatenate, np.stack, np.split, np.append ...
    numpy_pad,      # np.pad
    numpy_grids,    # np.linspace, np.meshgrid, np.diff, np.gradient
    numpy_shape,    # NumPy's own signatures where torch's differ; np.ndim, np.rollaxis ...
    numpy_stats,    # np.quantile, np.average, np.cov, np.convolve, np.polyval ...
)
for _module in _TABLES:
    _FUNCTIONS.update(_module.NUMPY_FUNCTIONS)
    _UFUNCS.update(getattr(_module, "NUMPY_UFUNCS", {}))
_NAMES = ({f.__name__ for f in list(_UFUNCS) + list(_FUNCTIONS)}
          | {f for f, _ in _SCIPY_UNARY + _SCIPY_BINARY})
