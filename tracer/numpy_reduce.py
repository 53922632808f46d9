"""NumPy's reductions and array-shaped functions on traced values and tensors.

Contract
- ``np_sum``, ``np_mean``, ``np_prod``, ``np_max``, ``np_min``, ``np_var``,
  ``np_std``, ``np_cumsum``, ``np_cumprod``, ``np_transpose``, ``np_squeeze``,
  ``np_trace``: NumPy's signature and semantics (``axis`` None / int / negative /
  tuple / ``()``, ``keepdims``, ``dtype``, ``ddof`` / ``correction``, ``where=``,
  ``initial=``, ``mean=``; integers and bools averaged in float64), one
  implementation each for ``np.<name>`` (tracer/numpy_protocol.py) and the
  methods of traced values (tracer/numpy_methods.py).
- ``dtype=``: the result is in it (NumPy accumulates in it: an integer ``mean`` truncates
  its quotient); ``var`` / ``std`` refuse an integer one. ``initial=`` is cast to the
  reduction's dtype and gives an empty max / min its value. An axis named twice raises
  NumPy's ``ValueError``.
- Written on the torch-named surface called unbound (``ArrayOps.sum(a, …)``), so
  they run on tensors and tracers alike and never recurse into NumPy's names.
- Torch's forms reach torch's behaviour (``dim=``/``keepdim=``/``unbiased=``
  select it; a bool in the ``dtype`` slot is ``keepdim``): see numpy_methods.
- The reductions to integers and booleans (argmax, argmin, argsort, any, all,
  count_nonzero, ptp, nancumsum, nancumprod) are the checked ``NUMPY_FUNCTIONS``
  that ``tracer/numpy_protocol.py`` merges (``tracer/numpy_args.py``'s contract:
  unknown keywords a ``TypeError`` naming the function, ``out=`` an
  ``UnsupportedError``). Their results carry no gradient. The one freedom taken:
  sorts are stable whatever ``kind`` says (ties keep their order, which every
  NumPy kind is allowed to return).
"""
from __future__ import annotations

import numbers

import numpy as np

from gradjit.tracer.api import ArrayOps
from gradjit.tracer.api import where as _where
from gradjit.tracer.numpy_args import (_axis, _dtype, _keep, checked, given, keep,
                                       no_repeats, obj, truth, unset, unsupported)
from gradjit.tracer.ops import _sum_dtype
from gradjit.tracer.ops_reduce import std_from_var

_BIG = np.dtype(np.int64)


def _no_axes(axis):
    """``axis=()``: NumPy reduces over no axis (the result is elementwise)."""
    return axis is not None and not isinstance(axis, numbers.Integral) and len(tuple(axis)) == 0


def _floating(a):
    """mean / var / std of integers and bools are computed in float64, as NumPy's."""
    return ArrayOps.to(a, np.float64) if np.dtype(a.dtype).kind in "iub" else a


def _mask(a, where):
    """NumPy's ``where=`` of a reduction: a boolean array broadcast to ``a``'s shape."""
    m = where if hasattr(where, "_apply") else a._const(np.asarray(where, dtype=bool))
    return ArrayOps.expand(m, a.shape) if tuple(m.shape) != tuple(a.shape) else m


def _reducer(torch_name):
    def fn(a, axis=None, dtype=None, out=None, keepdims=np._NoValue, initial=np._NoValue,
           where=np._NoValue, *, dim=None, keepdim=None):
        from gradjit.tracer.api import where as select
        name = f"np.{torch_name}"
        unset(name, out=out)
        if isinstance(dtype, (bool, np.bool_)):   # torch's x.sum(dim, keepdim)
            dtype, keepdim = None, bool(dtype)
        a = _dtype(name, a, dtype)
        axis = _axis(name, axis, dim)
        no_repeats(axis, a.ndim)
        keep = _keep(name, keepdims, keepdim)
        if given(initial) and torch_name == "mean":
            raise TypeError("mean() got an unexpected keyword argument 'initial'")
        if torch_name == "mean":
            if dtype is not None and np.dtype(dtype).kind in "biu":
                return _exact_mean(a, axis, np.dtype(dtype), keep, where)
            a = _floating(a)
        if given(where):
            m = _mask(a, where)
            if torch_name == "mean":
                return (np_sum(select(m, a, 0), axis, keepdims=keep)
                        / np_sum(ArrayOps.to(m, a.dtype), axis, keepdims=keep))
            a = select(m, a, 0 if torch_name == "sum" else 1)
        if _no_axes(axis):   # no axis reduced, yet the sum's dtype (uint8 -> uint64)
            dt = a.dtype if torch_name == "mean" else _sum_dtype(a.dtype)
            out = a.clone() if dt == a.dtype else ArrayOps.to(a, dt)
        elif torch_name == "prod":
            out = _prod(a, axis, keep)
        else:
            out = getattr(ArrayOps, torch_name)(a, axis, keep)
        out = _in_dtype(out, dtype)
        if given(initial):
            init = _initial(initial, out.dtype)
            out = out + init if torch_name == "sum" else out * init
        return out
    fn.__name__ = f"np_{torch_name}"
    return fn


def _in_dtype(out, dtype):
    """The result in the ``dtype=`` asked for: NumPy accumulates in it, while the sum of
    the cast input is int64 for any integer (sums and products wrap the same way in
    int32 as in int64 cast to int32, so the values agree)."""
    return out if dtype is None or out.dtype == np.dtype(dtype) else ArrayOps.to(out, dtype)


def _initial(initial, dt):
    """``initial=`` in the reduction's dtype, as NumPy casts it (an int array's sum with
    ``initial=0.5`` stays int64, a float32 max with ``np.float64`` initial float32)."""
    if hasattr(initial, "_apply"):
        return ArrayOps.to(initial, dt)
    return np.asarray(initial).astype(dt)[()]


def _exact_mean(a, axis, dt, keep, where):
    """``np.mean`` with an integer or bool ``dtype``: NumPy sums in ``dt`` and divides
    back into it (an unsafe cast: the quotient truncates toward zero). ``a`` is in ``dt``."""
    s = np_sum(a, axis, dt, keepdims=keep, where=where)
    if given(where):
        n = np_sum(ArrayOps.to(_mask(a, where), np.float64), axis, keepdims=keep)
    else:
        n = float(np.prod([a.shape[d] for d in _axes(axis, a.ndim)]))
    return ArrayOps.to(s / n, dt)


def _prod(a, axis, keep):
    if axis is None or isinstance(axis, numbers.Integral):
        return ArrayOps.prod(a, axis, keep)
    out = a
    for d in sorted((int(d) % max(a.ndim, 1) for d in axis), reverse=True):
        out = ArrayOps.prod(out, d, keep)
    return out


np_sum, np_mean, np_prod = _reducer("sum"), _reducer("mean"), _reducer("prod")


def np_nansum(a, axis=None, dtype=None, out=None, keepdims=np._NoValue, initial=np._NoValue,
              where=np._NoValue):
    """``np.nansum``: NaNs count as zero."""
    from gradjit.tracer.api import where as select
    return np_sum(select(a != a, 0, a), axis, dtype, out, keepdims, initial, where)


def _extremum(kind):
    def fn(a, axis=None, out=None, keepdims=np._NoValue, initial=np._NoValue,
           where=np._NoValue, *, dim=None, keepdim=None):
        from gradjit.tracer.api import where as select
        name = f"np.{kind}"
        if dim is not None or isinstance(out, (bool, np.bool_)):   # torch's (values, indices)
            return getattr(ArrayOps, kind)(a, axis if dim is None else dim,
                                           bool(out) if keepdim is None else keepdim)
        unset(name, out=out)
        no_repeats(axis, a.ndim)
        keep = _keep(name, keepdims, keepdim)
        if given(initial):
            initial = _initial(initial, a.dtype)
        if given(where):
            if not given(initial):
                raise ValueError(f"reduction operation '{kind}imum' does not have an identity, "
                                 f"so to use a where mask one has to specify 'initial'")
            a = select(_mask(a, where), a, initial)
        if given(initial) and _empty(a, axis):
            return _filled(a, axis, keep, initial)
        if _no_axes(axis):
            res = a.clone()
        else:
            res = getattr(ArrayOps, f"a{kind}")(a, () if axis is None else axis, keep)
        if given(initial):   # (a tie with initial sends half the gradient to a: maximum's rule)
            res = getattr(ArrayOps, f"{kind}imum")(res, initial)
        return res
    fn.__name__ = f"np_{kind}"
    return fn


def _empty(a, axis):
    """Whether the reduction is over no element (only ``initial=`` gives it a value)."""
    return not _no_axes(axis) and any(a.shape[d] == 0 for d in _axes(axis, a.ndim))


def _filled(a, axis, keep, initial):
    """An empty max / min with ``initial``: that value in the result's shape. Nothing of
    ``a`` reaches it, so its gradient is zero (an empty array, as ``a`` is)."""
    shape = np.sum(np.zeros(tuple(a.shape), bool), axis=axis, keepdims=keep).shape
    if hasattr(initial, "_apply"):
        return ArrayOps.expand(initial, shape).clone()
    return a._const(np.full(shape, initial, a.dtype))


np_max, np_min = _extremum("max"), _extremum("min")


def _moment(kind):
    def fn(a, axis=None, dtype=None, out=None, ddof=0, keepdims=np._NoValue,
           where=np._NoValue, mean=np._NoValue, correction=np._NoValue, *, dim=None,
           keepdim=None, unbiased=None):
        name = f"np.{kind}"
        if dim is not None or keepdim is not None or unbiased is not None:   # torch's form
            return getattr(ArrayOps, kind)(a, axis if dim is None else dim, unbiased,
                                           bool(keepdim), axis=None)
        unset(name, out=out)
        if correction is not np._NoValue:
            if ddof != 0:
                raise ValueError("ddof and correction can't be provided simultaneously.")
            ddof = correction
        if dtype is not None and np.dtype(dtype).kind in "biu":
            # NumPy truncates the mean, the squares and the quotient into dtype (and its std
            # of an array fails casting the sqrt back): refused rather than approximated
            unsupported(f"{name}(..., dtype={np.dtype(dtype).name}) (an integer dtype)")
        no_repeats(axis, a.ndim)
        a = _floating(_dtype(name, a, dtype))
        keep = _keep(name, keepdims, keepdim)
        if given(where) or given(mean) or _no_axes(axis):
            return _masked_moment(kind, a, axis, ddof, keep, where, mean)
        return _var_std(kind, a, axis, ddof, keep)
    fn.__name__ = f"np_{kind}"
    return fn


def _masked_moment(kind, a, axis, ddof, keep, where, mean):
    """var / std with NumPy's ``where=``, a given ``mean=`` or ``axis=()``."""
    from gradjit.tracer.api import where as select
    m = _mask(a, where) if given(where) else None
    w = ArrayOps.to(m, a.dtype) if m is not None else None
    n = (np_sum(w, axis, keepdims=True) if w is not None else
         float(np.prod([a.shape[d] for d in _axes(axis, a.ndim)])))
    if not given(mean):
        mean = np_sum(a if w is None else w * a, axis, keepdims=True) / n
    d = a - mean
    sq = d * d if m is None else select(m, d * d, 0)
    count = n if keep or not hasattr(n, "_apply") else np_sum(w, axis, keepdims=False)
    var = np_sum(sq, axis, keepdims=keep) / (count - ddof)
    return var if kind == "var" else std_of_var(var)


def _axes(axis, ndim):
    if axis is None:
        return range(ndim)
    axes = (axis,) if isinstance(axis, numbers.Integral) else tuple(axis)
    return [int(d) % max(ndim, 1) for d in axes]


def _var_std(kind, a, axis, ddof, keep):
    var = ArrayOps.var(a, axis, keepdim=keep, correction=ddof)
    return var if kind == "var" else std_of_var(var)


def std_of_var(var):
    """The square root of a variance, with a zero gradient where it is 0 (a constant
    slice: NumPy users get 0, not NaN; tracer/ops_reduce.py's ``_std_from_var``)."""
    return std_from_var(var)


np_var, np_std = _moment("var"), _moment("std")


def _scan(kind):
    def fn(a, axis=None, dtype=None, out=None, *, dim=None):
        name = f"np.{kind}"
        unset(name, out=out)
        a = _dtype(name, a, dtype)
        axis = _axis(name, axis, dim)
        if axis is None:
            return _in_dtype(getattr(ArrayOps, kind)(ArrayOps.reshape(a, -1), 0), dtype)
        return _in_dtype(getattr(ArrayOps, kind)(a, axis), dtype)
    fn.__name__ = f"np_{kind}"
    return fn


np_cumsum, np_cumprod = _scan("cumsum"), _scan("cumprod")


def np_transpose(a, axes=None):
    if axes is None:
        return ArrayOps.permute(a, tuple(range(a.ndim))[::-1])
    axes = tuple(int(d) for d in axes)
    if len(axes) != a.ndim:
        raise ValueError("axes don't match array")
    return ArrayOps.permute(a, axes)


def np_squeeze(a, axis=None):
    if axis is None:
        return ArrayOps.squeeze(a)
    no_repeats(axis, a.ndim)
    axes = (axis,) if isinstance(axis, numbers.Integral) else tuple(axis)
    dims = sorted({int(d) % max(a.ndim, 1) for d in axes}, reverse=True)
    for d in dims:
        if a.shape[d] != 1:
            raise ValueError("cannot select an axis to squeeze out which has size not equal to one")
    for d in dims:
        a = ArrayOps.squeeze(a, d)
    return a


def np_trace(a, offset=0, axis1=0, axis2=1, dtype=None, out=None):
    unset("np.trace", out=out)
    a = _dtype("np.trace", a, dtype)
    return _in_dtype(ArrayOps.sum(ArrayOps.diagonal(a, offset, axis1, axis2), -1), dtype)


# -- reductions to integers and booleans ----------------------------------------------------------
def _argext(kind):
    def fn(a, axis=None, out=None, *, keepdims=np._NoValue):
        unset(f"np.arg{kind}", out=out)
        if axis is None:
            i = ArrayOps._minmax_dim(ArrayOps.reshape(a, -1), kind, 0, False)[1]
            return ArrayOps.reshape(i, (1,) * a.ndim) if keep(keepdims) else i
        return ArrayOps._minmax_dim(a, kind, axis, keep(keepdims))[1]
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
        a, axis = ArrayOps.reshape(a, -1), 0
    return ArrayOps.sort(a, axis)[1]


def _count(t, axis, keepdims):
    """How many True in bool ``t`` along ``axis`` (int64); ``axis=()`` reduces nothing."""
    if axis == ():
        return ArrayOps.to(t, _BIG)
    no_repeats(axis, t.ndim)
    return ArrayOps.sum(t, axis, keep(keepdims))


def _anyall(kind):
    def fn(a, axis=None, out=None, keepdims=np._NoValue, *, where=np._NoValue):
        unset(f"np.{kind}", out=out)
        t = truth(a)
        if given(where) and where is not True:   # masked-out elements are neutral
            t = _where(obj(where, t), t, kind == "all")
        if kind == "all":
            return ArrayOps.eq(_count(ArrayOps.eq(t, False), axis, keepdims), 0)
        return ArrayOps.gt(_count(t, axis, keepdims), 0)
    return fn


def _count_nonzero(a, axis=None, *, keepdims=False):
    return _count(truth(a), axis, keepdims)


def _ptp(a, axis=None, out=None, keepdims=np._NoValue):
    unset("np.ptp", out=out)
    if a.dtype == np.bool_:
        raise TypeError("numpy boolean subtract, the `-` operator, is not supported, use the "
                        "bitwise_xor, the `^` operator, or the logical_xor function instead.")
    if axis == ():
        return ArrayOps.sub(a, a)
    return ArrayOps.sub(np_max(a, axis, None, keepdims), np_min(a, axis, None, keepdims))


def _nanscan(kind, fill):
    def fn(a, axis=None, dtype=None, out=None):
        unset(f"np.nan{kind}", out=out)
        if a.dtype.kind in "fc":
            a = _where(ArrayOps.ne(a, a), fill, a)
        if dtype is not None:
            a = ArrayOps.to(a, dtype)
        elif a.dtype.kind in "biu" and a.dtype.itemsize < 8:   # NumPy accumulates in int_
            a = ArrayOps.to(a, np.uint64 if a.dtype.kind == "u" else np.int64)
        if axis is None:
            a, axis = ArrayOps.reshape(a, -1), 0
        return _in_dtype(getattr(ArrayOps, kind)(a, axis), dtype)
    return fn


NUMPY_FUNCTIONS = {f: checked(f, impl) for f, impl in {
    np.argmax: _argext("max"), np.argmin: _argext("min"), np.argsort: _argsort,
    np.any: _anyall("any"), np.all: _anyall("all"), np.count_nonzero: _count_nonzero,
    np.ptp: _ptp, np.nancumsum: _nanscan("cumsum", 0), np.nancumprod: _nanscan("cumprod", 1),
}.items()}
