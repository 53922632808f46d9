"""autograd's differential operators mapped onto gradjit transforms.

Contract (autograd's calling convention: ``op(fun, argnum=0)`` returns a function of
fun's arguments; a list ``argnum`` selects several):
grad / value_and_grad -> gj.grad / gj.value_and_grad; elementwise_grad -> gj.grad of
np.sum(fun); jacobian -> gj.jacrev; hessian -> gj.hessian; make_vjp -> gj.grad of
<fun(x), g>; make_jvp / deriv -> gj.jvp.
"""
import numpy as np
import gradjit as gj
from . import _trees as T


def _argnums(argnum):
    return tuple(argnum) if isinstance(argnum, list) else argnum


def grad(fun, argnum=0):
    return gj.grad(fun, argnums=_argnums(argnum))


def value_and_grad(fun, argnum=0):
    return gj.value_and_grad(fun, argnums=_argnums(argnum))


def elementwise_grad(fun, argnum=0):
    def summed(*args, **kwargs):
        return np.sum(fun(*args, **kwargs))
    return gj.grad(summed, argnums=_argnums(argnum))


def jacobian(fun, argnum=0):
    return gj.jacrev(fun, argnums=_argnums(argnum))


def hessian(fun, argnum=0):
    return gj.hessian(fun, argnums=_argnums(argnum))


def _unary(fun, argnum, args, kwargs):
    """(unary function of the selected argument(s), that value) -- autograd's unary_to_nary."""
    args = list(args)
    if isinstance(argnum, int):
        def unary(x):
            a = list(args); a[argnum] = x
            return fun(*a, **kwargs)
        return unary, args[argnum]
    def unary(x):
        a = list(args)
        for i, xi in zip(argnum, x):
            a[i] = xi
        return fun(*a, **kwargs)
    return unary, tuple(args[i] for i in argnum)


def vjp_of(f, x):
    """vjp function of unary f at x, via gj.grad of <f(x), g>."""
    def vjp(g):
        return gj.grad(lambda x_: T.inner(f(x_), g))(x)
    return vjp


def make_vjp(fun, argnum=0):
    def at(*args, **kwargs):
        f, x = _unary(fun, argnum, args, kwargs)
        return vjp_of(f, x), f(x)
    return at


def make_jvp(fun, argnum=0):
    def at(*args, **kwargs):
        f, x = _unary(fun, argnum, args, kwargs)
        return lambda v: gj.jvp(f, (x,), (v,))
    return at


def deriv(fun, argnum=0):
    def at(*args, **kwargs):
        f, x = _unary(fun, argnum, args, kwargs)
        return gj.jvp(f, (x,), (T.ones_like(x),))[1]
    return at
