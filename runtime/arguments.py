"""How a function transform sees its arguments.

Contract
- ``Call(args, kwargs)``: the positional arguments a traced function is called with
  (tracers where the caller's arrays were), ``kwargs`` its keyword arguments.
- ``callable_name(fn)``: a function's name, also for partials and callable instances.
- ``norm_argnums`` / ``single_argnum``: argnums as a tuple of ints (any integral type);
  whether it was one. ``static_positions``: static positions and names, each completed
  from the other through the function's signature (as JAX's), a ValueError for a name or
  position the function does not take. ``split_aux``: a has_aux function's pair.
- ``has_tracer``: a call made inside another trace (the transform then traces inline).
- ``plain(layout)``: every argument one traced array, no keywords (the hot path).
- ``fresh_leaves(call, positions)``: for a transform inside another's trace, each
  differentiated leaf as a value of its own (no perturbation confusion).
- ``first_tracer(call)``; ``constant_loss(out)``: a returned number that depends on no
  argument, as the float array whose gradient is zeros.
"""
from __future__ import annotations

import functools
import inspect
import operator

import numpy as np

from gradjit.tracer import pytree
from gradjit.tracer.api import apply
from gradjit.tracer.registry import GradjitError, user_site
from gradjit.tracer.trace import Tracer


def callable_name(fn):
    """A name for messages and graphs: the function's, that of a partial's function, or a
    callable instance's class (neither of those has a ``__name__``)."""
    name = getattr(fn, "__name__", None)
    if isinstance(name, str):
        return name
    if isinstance(fn, functools.partial):
        return f"partial({callable_name(fn.func)})"
    return type(fn).__name__


def single_argnum(argnums):
    """True for one integral argnum (an int, np.int64 ...: anything with __index__), which
    gives one gradient rather than a tuple; bool is no argnum (as JAX's)."""
    if isinstance(argnums, (bool, np.bool_)):
        raise TypeError(f"argnums must be an int or a sequence of ints, got {argnums!r}")
    try:
        operator.index(argnums)
    except TypeError:
        return False
    return True


def norm_argnums(argnums):
    """argnums as a tuple of Python ints (integral NumPy scalars accepted)."""
    seq = (argnums,) if single_argnum(argnums) else argnums
    try:
        return tuple(operator.index(i) for i in seq)
    except TypeError:
        raise TypeError(f"argnums must be an int or a sequence of ints, got {argnums!r}") from None


def split_aux(out, name):
    """``(value, aux)`` of a has_aux function's result, or a GradjitError saying what the
    function returned instead."""
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise GradjitError(f"{name}: has_aux=True needs the function to return a pair "
                           f"(value, aux), got {type(out).__name__}", user_site())
    return out[0], out[1]


def first_tracer(call):
    """The first tracer among a call's arguments and keyword arguments (None if none)."""
    return next((x for x in pytree.flatten((list(call), call.kwargs))[0]
                 if isinstance(x, Tracer)), None)


def constant_loss(out):
    """A function's value that depends on no argument, as a float array (its gradient is
    zeros, as JAX's and autograd's), or None when ``out`` is not a real number or a
    one-element real array."""
    if isinstance(out, (bool, np.bool_)) or not isinstance(
            out, (int, float, np.integer, np.floating, np.ndarray)):
        return None
    a = np.asarray(out)
    if a.size != 1 or a.dtype.kind not in "fiu":
        return None
    return a if a.dtype.kind == "f" else a.astype(np.float64)


def fresh_leaves(call, positions):
    """Inside an enclosing trace (a transform called by a traced function): each
    floating-point leaf of ``call[i]`` for ``i`` in ``positions`` replaced by a copy
    node, a value of its own, so the transform differentiates w.r.t. that argument alone
    and not through other arguments computed from the same outer value
    (``grad(lambda a, b: a * b)(x, 2 * x)`` is ``2 * x``; a closure over ``x`` is a
    constant of ``jvp(lambda a: a * x, (x,), ...)``), as JAX's. Python numbers and arrays
    there become constants of the trace first (of the enclosing trace's graph when the
    call holds no tracer: ``grad(lambda y: x * y)(2.0)`` inside a trace over ``x``)."""
    ref = first_tracer(call)
    if ref is None:
        from gradjit.tracer.control_flow import enclosing_graph
        ref = Tracer(enclosing_graph(), None)

    def fresh(a):
        if not isinstance(a, Tracer):
            if not isinstance(a, (float, np.floating, np.ndarray)) or np.asarray(a).dtype.kind != "f":
                return a
            a = ref._const(np.asarray(a))
        return apply("_to_copy.default", [a], {"dtype": a.dtype}) if a.dtype.kind == "f" else a
    for i in positions:
        if i < len(call):
            call[i] = pytree.map_leaves(fresh, call[i])
    return call


def static_positions(fn, static_argnums, static_argnames):
    """Static positions and names, each completed from the other through fn's signature
    (as JAX does), so a static argument is static however the caller passes it."""
    pos, names = set(norm_argnums(static_argnums)), set(
        (static_argnames,) if isinstance(static_argnames, str) else static_argnames)
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return frozenset(pos), frozenset(names)
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    # a name or position the function cannot take would silently never be static (JAX's
    # errors); *args and **kwargs take any
    kinds = {p.kind for p in params}
    unknown = names - {p.name for p in params if p.kind != p.POSITIONAL_ONLY}
    if unknown and inspect.Parameter.VAR_KEYWORD not in kinds:
        raise ValueError(f"static_argnames {sorted(unknown)} are not parameters of "
                         f"{callable_name(fn)} (its parameters: {[p.name for p in params]})")
    beyond = sorted(i for i in pos if not -len(positional) <= i < len(positional))
    if beyond and inspect.Parameter.VAR_POSITIONAL not in kinds:
        raise ValueError(f"static_argnums={tuple(beyond)}, but {callable_name(fn)} takes "
                         f"{len(positional)} positional argument(s)")
    pos |= {positional.index(n) for n in names if n in positional}
    names |= {positional[i] for i in pos if 0 <= i < len(positional)}
    return frozenset(pos), frozenset(names)


class Call(list):
    """The positional arguments a traced function is called with (tracers where the
    caller's arrays were); ``kwargs`` holds its keyword arguments."""

    def __init__(self, args, kwargs):
        super().__init__(args)
        self.kwargs = kwargs


def has_tracer(args, kwargs):
    leaves, _ = pytree.flatten((args, kwargs))
    return any(isinstance(x, Tracer) for x in leaves)


def plain(layout):
    """True when every argument is one traced array and none is a keyword: the compiled
    entry can then be called with the caller's own arguments (the hot path)."""
    parts, kparts = layout
    return not kparts and all(p[0] == "tree" and p[1] is None and p[2] == (None,) for p in parts)
