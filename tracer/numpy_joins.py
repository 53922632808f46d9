"""More NumPy functions and ufuncs on traced arrays and tensors (for ``tracer/numpy_protocol.py``).

Contract
- Three modules map NumPy callables to implementations with NumPy's full
  signatures and values: this one (the shared helpers; the ufuncs isnan,
  isfinite, isinf, logical_not, fabs, conjugate (logical_and / or / xor and the bit
  ops: ``tracer/numpy_ufuncs.py``); iscomplex, isreal (concrete: gradjit arrays are real); argmax, argmin, argsort, any, all,
  count_nonzero, ptp, nancumsum, nancumprod; concatenate, stack, hstack,
  vstack, row_stack, dstack, column_stack with ``dtype=`` / ``casting=``,
  append, atleast_1d/2d/3d; linspace with traced ends), ``tracer/numpy_pad.py``
  (pad) and ``tracer/numpy_extra2.py`` (the rest, and the checked tables
  ``NUMPY_FUNCTIONS`` / ``NUMPY_UFUNCS`` that ``tracer/numpy_protocol.py`` merges).
- No ops and no yaml entries of their own: each is a composite of registered
  ops (the bit operations: ``bitwise_*`` ops of tracer/ops_math.py), differentiated
  through its parts. Integer and boolean results (argmax,
  isnan, any ...) come from ops that carry no gradient.
- The torch-named surface is called *unbound* (``ArrayOps.sum(a, ...)``): a
  ``Tracer``'s own methods follow NumPy (``tracer/numpy_methods.py``), and an
  unbound call can never recurse back into NumPy's names.
- Arguments are checked against the implementation's signature first, so an
  unknown keyword raises ``TypeError`` naming the NumPy function; a keyword
  NumPy accepts but gradjit cannot honour (``out=``, ``order=``) raises
  ``UnsupportedError``. Nothing is silently ignored. Values equal NumPy's; the
  one freedom taken: sorts are stable whatever ``kind`` says (ties keep their
  order, which every NumPy kind is allowed to return).
- ``np.linspace``: ``arange * step + start``, the last sample ``stop`` itself
  when ``endpoint`` (NumPy's special case for a step that underflows to 0 is
  not taken: a traced step has no value to branch on).
"""
from __future__ import annotations

import functools
import inspect
import operator
import sys
import warnings

import numpy as np
from numpy.lib.array_utils import normalize_axis_index

from gradjit.tracer.api import ArrayOps as A
from gradjit.tracer.api import where as _where
from gradjit.tracer.methods_index import cat
from gradjit.tracer.numpy_args import unsupported
from gradjit.tracer.numpy_reduce import np_max, np_min
from gradjit.tracer.registry import _OURS, ShapeError, user_site

_BIG = np.dtype(np.int64)
_F64 = np.dtype(np.float64)


# -- shared helpers ---------------------------------------------------------------------------
def checked(npfunc, impl):
    """``impl`` behind a signature check, so bad arguments raise ``TypeError`` naming
    ``np.<name>`` (a lambda's own message would name ``<lambda>``)."""
    name = f"np.{npfunc.__name__}"
    sig = inspect.signature(impl)

    @functools.wraps(impl)
    def fn(*args, **kwargs):
        try:
            sig.bind(*args, **kwargs)
        except TypeError as e:
            raise TypeError(f"{name}(): {e}") from None
        return impl(*args, **kwargs)
    return fn


def given(v):
    return v is not None and v is not np._NoValue


def unset(name, **kw):
    """``UnsupportedError`` for keywords NumPy has but gradjit cannot honour, if given."""
    for key, v in kw.items():
        if given(v):
            unsupported(f"{name}(..., {key}=...)")


def keep(keepdims):
    return False if keepdims is np._NoValue or keepdims is None else bool(keepdims)


def is_obj(x):
    return isinstance(x, A)


def like_of(*xs):
    """The first gradjit array among ``xs`` (looked for one level into lists/tuples)."""
    for x in xs:
        if is_obj(x):
            return x
        if isinstance(x, (list, tuple)):
            for y in x:
                if is_obj(y):
                    return y
    raise TypeError("no gradjit array among the arguments")


def obj(x, like, dtype=None):
    """``x`` as a gradjit array of ``like``'s front end (a constant unless it is one)."""
    if is_obj(x):
        return x if dtype is None else A.to(x, dtype)
    return like._const(np.asarray(x, dtype=dtype))


def probe(fn, *dtypes):
    """The dtype NumPy's ``fn`` gives for inputs of ``dtypes`` (and its TypeError if none)."""
    return np.asarray(fn(*(np.zeros(0, d) for d in dtypes))).dtype


def ndim_of(x):
    return x.ndim if is_obj(x) else np.ndim(x)


def weak(x):
    """What ``np.result_type`` should see for ``x``: Python numbers stay weak (NEP 50)."""
    return x.dtype if is_obj(x) else x if type(x) in (int, float, complex) else np.asarray(x)


def truth(x):
    """``x != 0`` as bool (NaN counts as true, as NumPy's truthiness)."""
    return x if x.dtype == np.bool_ else A.ne(x, 0)


def along(x, axis, sl):
    """``x[..., sl, ...]`` with ``sl`` on ``axis`` (NumPy's slicing rules)."""
    return x[(slice(None),) * axis + (sl,)]


# -- ufuncs ---------------------------------------------------------------------------------------
def _isnan(x):
    return A.ne(x, x)   # False for integers and bools (x == x)


def _isinf(x):
    return A.eq(A.abs(x), np.inf) if x.dtype.kind == "f" else A.ne(x, x)


def _isfinite(x):
    return A.lt(A.abs(x), np.inf) if x.dtype.kind == "f" else A.eq(x, x)


def _fabs(x):
    return A.abs(A.to(x, probe(np.fabs, x.dtype)))   # ints become the float NumPy picks


def _conj(x):
    # a copy, as NumPy's: a Tensor returned as itself would alias under in-place ops
    return A.to(x, probe(np.conjugate, x.dtype)).clone()


def _real_test(real):
    """np.isreal / np.iscomplex: every element of a gradjit array is real (complex ones
    are refused where they enter, registry.real_only), whatever the values, so the answer
    is a concrete array (``if not np.iscomplex(x)`` may steer Python control flow)."""
    return lambda x: np.full(tuple(x.shape), real)


NUMPY_UFUNCS = {
    np.isnan: _isnan, np.isinf: _isinf, np.isfinite: _isfinite,
    np.logical_not: lambda x: A.eq(x, 0), np.fabs: _fabs, np.conjugate: _conj,
}   # (+ the logical and bit ufuncs of tracer/numpy_ufuncs.py, merged by numpy_extra2.py)


# -- reductions to integers and booleans ----------------------------------------------------------
def _argext(kind):
    def fn(a, axis=None, out=None, *, keepdims=np._NoValue):
        unset(f"np.arg{kind}", out=out)
        if axis is None:
            i = A._minmax_dim(A.reshape(a, -1), kind, 0, False)[1]
            return A.reshape(i, (1,) * a.ndim) if keep(keepdims) else i
        return A._minmax_dim(a, kind, axis, keep(keepdims))[1]
    return fn


def _argsort(a, axis=-1, kind=None, order=None, *, stable=None):
    unset("np.argsort", order=order)
    if kind is not None and stable is not None:
        raise ValueError("`kind` and keyword parameters can't be provided at the same time. "
                         "Use only one of them.")
    if kind is not None and not (isinstance(kind, str) and kind[:1].lower() in ("q", "m", "h",
                                                                                "s")):
        raise ValueError(f"sort kind must be one of 'quick', 'heap', or 'stable' (got {kind!r})")
    if axis is None or a.ndim == 0:   # NumPy: the flattened array (a 0-d one gives shape (1,))
        a, axis = A.reshape(a, -1), 0
    return A.sort(a, axis)[1]


def _count(t, axis, keepdims):
    """How many True in bool ``t`` along ``axis`` (int64); ``axis=()`` reduces nothing."""
    if axis == ():
        return A.to(t, _BIG)
    return A.sum(t, axis, keep(keepdims))


def _anyall(kind):
    def fn(a, axis=None, out=None, keepdims=np._NoValue, *, where=np._NoValue):
        unset(f"np.{kind}", out=out)
        t = truth(a)
        if given(where) and where is not True:   # masked-out elements are neutral
            t = _where(obj(where, t), t, kind == "all")
        if kind == "all":
            return A.eq(_count(A.eq(t, False), axis, keepdims), 0)
        return A.gt(_count(t, axis, keepdims), 0)
    return fn


def _count_nonzero(a, axis=None, *, keepdims=False):
    return _count(truth(a), axis, keepdims)


def _ptp(a, axis=None, out=None, keepdims=np._NoValue):
    unset("np.ptp", out=out)
    if a.dtype == np.bool_:
        raise TypeError("numpy boolean subtract, the `-` operator, is not supported, use the "
                        "bitwise_xor, the `^` operator, or the logical_xor function instead.")
    if axis == ():
        return A.sub(a, a)
    return A.sub(np_max(a, axis, None, keepdims), np_min(a, axis, None, keepdims))


def _nanscan(kind, fill):
    def fn(a, axis=None, dtype=None, out=None):
        unset(f"np.nan{kind}", out=out)
        if a.dtype.kind in "fc":
            a = _where(A.ne(a, a), fill, a)
        if dtype is not None:
            a = A.to(a, dtype)
        elif a.dtype.kind in "biu" and a.dtype.itemsize < 8:   # NumPy accumulates in int_
            a = A.to(a, np.uint64 if a.dtype.kind == "u" else np.int64)
        if axis is None:
            a, axis = A.reshape(a, -1), 0
        return getattr(A, kind)(a, axis)
    return fn


# -- joining --------------------------------------------------------------------------------------
def _cast(name, arrays, dtype=None, casting="same_kind"):
    """``arrays`` as gradjit arrays of one front end, cast to ``dtype`` as NumPy would."""
    arrays = list(arrays)
    if not arrays:
        raise ValueError("need at least one array to concatenate")
    like = like_of(*arrays)
    ts = [obj(x, like) for x in arrays]
    if dtype is None:
        return ts
    dt = np.dtype(dtype)
    for t in ts:
        if not np.can_cast(t.dtype, dt, casting):
            raise TypeError(f"{name}: Cannot cast array data from {t.dtype!r} to {dt!r} "
                            f"according to the rule {casting!r}")
    return [A.to(t, dt) for t in ts]


def _concatenate(arrays, axis=0, out=None, *, dtype=None, casting="same_kind"):
    unset("np.concatenate", out=out)
    ts = _cast("np.concatenate", arrays, dtype, casting)
    if axis is None:
        return cat([A.reshape(t, -1) for t in ts], 0)
    return cat(ts, axis)


def _stack(arrays, axis=0, out=None, *, dtype=None, casting="same_kind"):
    unset("np.stack", out=out)
    ts = _cast("np.stack", arrays, dtype, casting)
    if any(t.shape != ts[0].shape for t in ts):
        raise ShapeError(f"np.stack: all input arrays must have the same shape, got "
                         f"{[tuple(t.shape) for t in ts]}", user_site())
    d = normalize_axis_index(axis, ts[0].ndim + 1)
    return cat([A.unsqueeze(t, d) for t in ts], d)


def _at_least(n):
    """NumPy's atleast_{n}d for one gradjit array (plain arrays go to NumPy)."""
    np_fn = {1: np.atleast_1d, 2: np.atleast_2d, 3: np.atleast_3d}[n]

    def one(x):
        if not is_obj(x):
            return np_fn(x)
        shape = {0: (1,) * n, 1: {1: x.shape, 2: (1,) + x.shape, 3: (1,) + x.shape + (1,)}[n],
                 2: x.shape + (1,) * (n == 3)}.get(x.ndim, x.shape)
        return A.reshape(x, shape)

    def fn(*arys):
        out = tuple(one(x) for x in arys)
        return out[0] if len(out) == 1 else out
    return fn, one


_atleast_1d, _one_1d = _at_least(1)
_atleast_2d, _one_2d = _at_least(2)
_atleast_3d, _one_3d = _at_least(3)


def _joiner(name, one, axis_of):
    """hstack / vstack / dstack: each part through ``one`` (atleast_nd), then concatenate."""
    def fn(tup, *, dtype=None, casting="same_kind"):
        ts = _cast(f"np.{name}", tup, dtype, casting)
        ts = [one(t) for t in ts]
        return cat(ts, axis_of(ts))
    return fn


_hstack = _joiner("hstack", _one_1d, lambda ts: 0 if ts[0].ndim == 1 else 1)
_vstack = _joiner("vstack", _one_2d, lambda ts: 0)
_dstack_any = _joiner("dstack", _one_3d, lambda ts: 2)


def _row_stack(tup, *, dtype=None, casting="same_kind"):
    # deprecated in NumPy 2.x: NumPy's warning, at the user's line (gradjit's frames skipped)
    f, level = sys._getframe(), 1
    while f is not None and f.f_code.co_filename.startswith(_OURS):
        f, level = f.f_back, level + 1
    warnings.warn("`row_stack` alias is deprecated. Use `np.vstack` directly.",
                  DeprecationWarning, stacklevel=level)
    return _vstack(tup, dtype=dtype, casting=casting)


def _column_stack(tup):
    ts = _cast("np.column_stack", tup)
    return cat([A.reshape(t, (-1, 1)) if t.ndim < 2 else t for t in ts], 1)


def _append(arr, values, axis=None):
    like = like_of(arr, values)
    arr, values = obj(arr, like), obj(values, like)
    if axis is None:
        arr, values, axis = A.reshape(arr, -1), A.reshape(values, -1), 0
    return cat([arr, values], axis)


# -- linspace -------------------------------------------------------------------------------------
def _linspace(start, stop, num=50, endpoint=True, retstep=False, dtype=None, axis=0, *,
              device=None):
    num = operator.index(num)
    if num < 0:
        raise ValueError(f"Number of samples, {num}, must be non-negative.")
    if device not in (None, "cpu"):
        raise ValueError(f'Device not understood. Only "cpu" is allowed, but received: {device}')
    div = num - 1 if endpoint else num
    like = like_of(start, stop)
    dt = np.result_type(weak(start), weak(stop))
    dt = dt if dt.kind in "fc" else _F64
    start, stop = obj(start, like, dt), obj(stop, like, dt)
    delta = A.sub(stop, start)
    y = like._const(np.arange(0, num, dtype=dt).reshape((-1,) + (1,) * delta.ndim))
    if div > 0:
        step = A.div(delta, div)
        y = A.mul(y, step)
    else:   # no samples, or one with endpoint: NumPy's step is NaN
        step = np.nan
        y = A.mul(y, delta)
    y = A.add(y, start)
    if endpoint and num > 1:   # the last sample is stop itself
        y = cat([along(y, 0, slice(None, -1)), A.unsqueeze(A.expand(stop, delta.shape), 0)], 0)
    if axis != 0:
        y = A.moveaxis(y, 0, axis)
    if dtype is not None:
        y = A.to(A.floor(y) if np.issubdtype(dtype, np.integer) else y, dtype)
    return (y, step) if retstep else y


TABLE = {
    np.iscomplex: _real_test(False), np.isreal: _real_test(True),
    np.argmax: _argext("max"), np.argmin: _argext("min"), np.argsort: _argsort,
    np.any: _anyall("any"), np.all: _anyall("all"), np.count_nonzero: _count_nonzero,
    np.ptp: _ptp, np.nancumsum: _nanscan("cumsum", 0), np.nancumprod: _nanscan("cumprod", 1),
    np.append: _append, np.atleast_1d: _atleast_1d, np.atleast_2d: _atleast_2d,
    np.atleast_3d: _atleast_3d, np.concatenate: _concatenate, np.stack: _stack,
    np.hstack: _hstack, np.vstack: _vstack, np.dstack: lambda tup: _dstack_any(tup),
    np.column_stack: _column_stack, np.linspace: _linspace,
}
if hasattr(np, "row_stack"):   # deprecated in NumPy 2.0; gone in some later release
    TABLE[np.row_stack] = _row_stack
