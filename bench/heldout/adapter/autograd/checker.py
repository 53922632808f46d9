"""autograd.test_util re-implemented on gradjit (same calling convention, own code).

Installed as ``autograd.test_util`` by the package's __init__ (this file is not named
test_*.py, so pytest never collects it).

check_grads(fun, argnum=0, modes=['fwd','rev'], order=2)(*args, **kwargs):
  rev: for random input direction u and output cotangent w,
       <u, gj.grad(x -> <fun(x), w>)(x)>  ==  <w, central-FD of fun along u>
  fwd: gj.jvp(fun, (x,), (u,))[1] == central-FD along u (compared through a random inner product)
  order>1: recurse on (x, w) -> gj.grad(x -> <fun(x), w>)(x)  (rev) and
           (x, u) -> gj.jvp(fun, (x,), (u,))[1]  (fwd), w.r.t. both arguments, as autograd does:
           higher orders differentiate through gradjit's own transforms (nested tracing).
Tolerances as autograd's: |a-b| < 1e-6 or |a-b|/|a+b| < 1e-6, FD step 1e-6.
"""
from itertools import product
import numpy as np
import gradjit as gj
from . import _trees as T
from .differential_operators import _unary

TOL = 1e-6
RTOL = 1e-6
EPS = 1e-6
# Per-test counters, reset and read by heldout_plugin.py: real-valued checks run, complex
# ones skipped. A test whose every check was complex is excluded from the pass rate.
STATS = {"checks": 0, "complex_skipped": 0}


def scalar_close(a, b):
    return abs(a - b) < TOL or abs(a - b) / abs(a + b) < RTOL


def _name(f):
    return getattr(f, "__name__", repr(f))


def numerical_jvp(f, x):
    def jvp(u):
        fp = f(T.axpy(EPS / 2, u, x))
        fm = f(T.axpy(-EPS / 2, u, x))
        return T.map_leaves(lambda a, b: (np.asarray(a, float) - np.asarray(b, float)) / EPS, fp, fm)
    return jvp


def _check_shapes(what, got, want_tree):
    if T.shapes(got) != T.shapes(want_tree):
        raise AssertionError(f"GRADCHECK {what} shape mismatch: got {T.shapes(got)}, "
                             f"expected {T.shapes(want_tree)}")


def check_vjp(f, x):
    y = f(x)
    u, w = T.randn_like(x), T.randn_like(y)
    g = gj.grad(lambda x_: T.inner(f(x_), w))(x)
    g_leaves = T.leaves_like(x, g)
    _check_shapes("rev gradient", g_leaves, x)
    exact = sum(float(np.sum(a * np.asarray(b))) for a, b in zip(T.leaves(u), g_leaves))
    numeric = float(T.inner(w, numerical_jvp(f, x)(u)))
    assert scalar_close(numeric, exact), (
        f"GRADCHECK rev mismatch in {_name(f)}: analytic {exact!r} numeric {numeric!r}")


def check_jvp(f, x):
    u = T.randn_like(x)
    exact = gj.jvp(f, (x,), (u,))[1]
    numeric = numerical_jvp(f, x)(u)
    ex_leaves = T.leaves_like(numeric, exact)
    _check_shapes("fwd tangent", ex_leaves, numeric)
    v = T.randn_like(numeric)
    a = sum(float(np.sum(np.asarray(p) * q)) for p, q in zip(ex_leaves, T.leaves(v)))
    b = float(T.inner(numeric, v))
    assert scalar_close(a, b), (
        f"GRADCHECK fwd mismatch in {_name(f)}: analytic {a!r} numeric {b!r}")


def _check_unary(f, x, modes, order):
    if T.is_complex(x):   # real-valued cases only: skipped and counted, the test goes on
        STATS["complex_skipped"] += 1
        return
    STATS["checks"] += 1
    if "fwd" in modes:
        check_jvp(f, x)
        if order > 1:
            def jvp_f(x, u):
                return gj.jvp(f, (x,), (u,))[1]
            jvp_f.__name__ = f"jvp_{_name(f)}"
            check_grads(jvp_f, (0, 1), modes, order=order - 1)(x, T.randn_like(x))
    if "rev" in modes:
        check_vjp(f, x)
        if order > 1:
            def vjp_f(x, w):
                return gj.grad(lambda x_: T.inner(f(x_), w))(x)
            vjp_f.__name__ = f"vjp_{_name(f)}"
            check_grads(vjp_f, (0, 1), modes, order=order - 1)(x, T.randn_like(f(x)))


def check_grads(fun, argnum=0, modes=['fwd', 'rev'], order=2):
    assert all(m in ("fwd", "rev") for m in modes)
    argnum = tuple(argnum) if isinstance(argnum, list) else argnum

    def checked(*args, **kwargs):
        f, x = _unary(fun, argnum, args, kwargs)
        f.__name__ = _name(fun)
        _check_unary(f, x, modes, order)
    return checked


def combo_check(fun, *args, **kwargs):
    """Every combination of the argument and keyword values given; combinations with a
    complex-valued input are skipped (real-valued cases only) and counted."""
    def _combo(*arg_lists, **kw_lists):
        kv = [[(k, v) for v in vs] for k, vs in kw_lists.items()]
        for a in product(*arg_lists):
            for k in product(*kv):
                if T.is_complex(list(a)) or T.is_complex([v for _, v in k]):
                    STATS["complex_skipped"] += 1
                    continue
                check_grads(fun, *args, **kwargs)(*a, **dict(k))
    return _combo


def check_equivalent(x, y):
    _check_shapes("equivalent", T.leaves_like(x, y), x)
    v = T.randn_like(x)
    assert scalar_close(float(T.inner(x, v)), float(T.inner(y, v))), "Value mismatch"
