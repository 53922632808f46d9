"""Argument handling shared by the NumPy-facing modules: unsupported keywords, axis
aliases, keepdims, dtype; NumPy's signature check and the operand helpers of the
NumPy-function modules.

Contract: ``UnsupportedError`` is the error for a NumPy call or argument gradjit does
not trace (``unsupported(what)`` raises it naming ``what`` and the user's line);
``unset`` refuses keywords given a value gradjit cannot honour; ``_axis`` / ``_keep``
take NumPy's ``axis`` / ``keepdims`` or torch's ``dim`` / ``keepdim`` spellings;
``no_repeats`` raises NumPy's error for an axis named twice.

The NumPy-function modules (numpy_ufuncs, numpy_reduce's integer and boolean
reductions, numpy_joins, numpy_pad, numpy_grids, numpy_stats, numpy_shape's
rollaxis / ndim / shape / size / tri*_indices_from), whose tables
``tracer/numpy_protocol.py`` merges, share one contract and the helpers below:
- NumPy's full signatures and values. No ops and no yaml entries of their own:
  each function is a composite of registered ops (the bit operations: ``bitwise_*``
  ops of tracer/ops_math.py), differentiated through its parts. Integer and
  boolean results (argmax, isnan, any ...) come from ops that carry no gradient.
- The torch-named surface is called *unbound* (``ArrayOps.sum(a, ...)``): a
  ``Tracer``'s own methods follow NumPy (``tracer/numpy_methods.py``), and an
  unbound call can never recurse back into NumPy's names.
- Function table entries are ``checked``: arguments are bound to the implementation's
  signature first, so an unknown keyword raises ``TypeError`` naming the NumPy
  function; a keyword NumPy accepts but gradjit cannot honour (``out=``,
  ``order=``) raises ``UnsupportedError`` (``unset``). Nothing is silently ignored.
- ``is_obj`` / ``like_of`` / ``obj``: gradjit arrays among the arguments, and the
  others as constants of their front end; ``weak``: Python numbers stay weak in
  ``np.result_type`` (NEP 50); ``probe``: the result dtype NumPy's own function
  gives; ``truth``: NumPy's truthiness; ``along``: a slice on one axis.
"""
from __future__ import annotations

import functools
import inspect
import numbers

import numpy as np

from gradjit.tracer.api import ArrayOps
from gradjit.tracer.registry import GradjitError, ShapeError, user_site


class UnsupportedError(GradjitError, TypeError):
    """A NumPy call or argument gradjit does not trace (also raised by numpy_protocol)."""


def unsupported(what):
    raise UnsupportedError(f"{what} is not supported on traced arrays; see the README's list "
                           f"of supported NumPy functions", user_site())


def _axis(name, axis, dim):
    if dim is not None:
        if axis is not None:
            raise TypeError(f"{name}() got both axis= and dim=")
        return dim
    return axis


def no_repeats(axis, ndim):
    """NumPy's ``ValueError`` for an axis named twice (``axis=(0, 0)``, or ``(0, -2)`` on
    2-D): torch's reductions take their dims as a set, so the check is made here. Axes out
    of range are left to the reduction's own bounds check (NumPy reports those first)."""
    if axis is None or isinstance(axis, numbers.Integral):
        return
    dims = [int(d) for d in axis]
    if all(-ndim <= d < max(ndim, 1) for d in dims) and \
            len({d % max(ndim, 1) for d in dims}) < len(dims):
        raise ShapeError("duplicate value in 'axis'", user_site())


def _keep(name, keepdims, keepdim):
    if keepdim is not None:
        return bool(keepdim)
    if keepdims is np._NoValue or keepdims is None:
        return False
    if not isinstance(keepdims, (bool, np.bool_, numbers.Integral)):
        raise TypeError(f"{name}(): keepdims must be a bool, got {type(keepdims).__name__}")
    return bool(keepdims)


def _dtype(name, a, dtype):
    return a if dtype is None else ArrayOps.to(a, np.dtype(dtype))


# -- the NumPy-function modules' helpers ----------------------------------------------------------
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
    return isinstance(x, ArrayOps)


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
    """``x`` as a gradjit array of ``like``'s front end (a constant unless it is one; a
    list or tuple holding gradjit arrays is built from them, as ``np.array`` of it)."""
    if is_obj(x):
        return x if dtype is None else ArrayOps.to(x, dtype)
    if isinstance(x, (list, tuple)):
        from gradjit.tracer.coercion import _holds_traced, to_traced
        if _holds_traced(x):   # ([a, [a[0] * 2]]: NumPy would make an array of the list)
            return to_traced(x, like, dtype)
    return like._const(np.asarray(x, dtype=dtype))


def probe(fn, *dtypes):
    """The dtype NumPy's ``fn`` gives for inputs of ``dtypes`` (and its TypeError if none)."""
    return np.asarray(fn(*(np.zeros(0, d) for d in dtypes))).dtype


def ndim_of(x):
    return x.ndim if is_obj(x) else np.ndim(x)


def weak(x):
    """What ``np.result_type`` should see for ``x``: Python numbers stay weak (NEP 50), and
    so do weak tracers (traced Python floats: tracer/trace.py ``WeakTracer``)."""
    if getattr(x, "_weak", False):
        return {"c": 0j, "f": 0.0, "i": 0}[x.dtype.kind]
    return x.dtype if is_obj(x) else x if type(x) in (int, float, complex) else np.asarray(x)


def truth(x):
    """``x != 0`` as bool (NaN counts as true, as NumPy's truthiness)."""
    return x if x.dtype == np.bool_ else ArrayOps.ne(x, 0)


def along(x, axis, sl):
    """``x[..., sl, ...]`` with ``sl`` on ``axis`` (NumPy's slicing rules)."""
    return x[(slice(None),) * axis + (sl,)]
