"""``gradcheck`` / ``gradgradcheck``: finite differences against autograd (torch semantics).

Contract: ``gradcheck(func, inputs, eps=1e-6, atol=1e-5, rtol=1e-3,
raise_exception=True)`` compares, for every differentiable output and every
input that requires grad, the analytical Jacobian (one batched backward per
output) with central finite differences; a mismatch raises ``GradcheckError``
naming the output and input with both Jacobians (or returns False).
``gradgradcheck`` checks the gradients of the first-order gradients
(``create_graph=True``) the same way. Non-float64 inputs draw a warning, as in
torch: float32 differences are too coarse for these tolerances.

torch's other keywords are accepted: ``nondet_tol`` (the backward is run twice and
must agree within it: reentrancy), ``check_grad_dtypes`` (each gradient has its input's
dtype), ``check_backward_ad`` (False: the backward Jacobian is not compared),
``check_batched_grad`` (a batched backward, ``is_grads_batched``, equals one backward
per cotangent), ``check_forward_ad`` (``functional.jvp`` along random tangents equals
the finite-difference directional derivative). ``masked=True`` (sparse masked
semantics) raises NotImplementedError naming it.
"""
from __future__ import annotations

import warnings

import numpy as np

from gradjit.runtime.autograd import grad as _grad
from gradjit.tracer.modes import enable_grad
from gradjit.tracer.tensor import Tensor


class GradcheckError(RuntimeError):
    pass


def _as_tuple(x):
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def _numerical(func, inputs, i, outs_shape, eps):
    x = inputs[i]
    cols = []
    data = x.data   # perturbed in place and restored, element by element in C order
    for j in np.ndindex(data.shape):   # (not reshape(-1): a copy for Fortran or strided data)
        old = data[j]
        data[j] = old + eps
        with enable_grad():  # func may itself differentiate (gradgradcheck)
            hi = [np.array(o.data, np.float64) for o in _as_tuple(func(*inputs))]
        data[j] = old - eps
        with enable_grad():
            lo = [np.array(o.data, np.float64) for o in _as_tuple(func(*inputs))]
        data[j] = old
        cols.append([((h - l) / (2 * eps)).reshape(-1) for h, l in zip(hi, lo)])
    return [np.stack([c[k] for c in cols], axis=1) if cols else np.zeros((int(np.prod(s)), 0))
            for k, s in enumerate(outs_shape)]


def _analytical(outs, inputs, diff):
    table = {}
    for k, o in enumerate(outs):
        n = o.data.size
        if not (o.requires_grad and n):
            for i in diff:
                table[k, i] = np.zeros((n, inputs[i].data.size))
            continue
        eye = np.eye(n, dtype=o.dtype).reshape((n,) + o.shape)
        wrt = [inputs[i] for i in diff]
        try:
            res = _grad([o], wrt, [eye], retain_graph=True, allow_unused=True,
                        is_grads_batched=True)
            rows = [None if g is None else np.asarray(g.data, np.float64) for g in res]
        except NotImplementedError:  # Python callbacks in backward: one row at a time
            per_row = [_grad([o], wrt, [e], retain_graph=True, allow_unused=True) for e in eye]
            rows = [None if r[0] is None else np.stack([np.asarray(x[j].data, np.float64)
                                                        for x in per_row])
                    for j, r in enumerate(zip(*per_row))]
        for i, g in zip(diff, rows):
            table[k, i] = np.zeros((n, inputs[i].data.size)) if g is None else g.reshape(n, -1)
    return table


def _fail(raise_exception, msg):
    if raise_exception:
        raise GradcheckError(msg)
    return False


def _grad_dtypes(outs, inputs, diff):
    """The first gradient whose dtype is not its input's: (input index, got, want), or None."""
    for o in outs:
        if not o.requires_grad:
            continue
        seed = Tensor(np.ones(o.shape, o.dtype))
        res = _grad([o], [inputs[i] for i in diff], [seed], retain_graph=True, allow_unused=True)
        for i, g in zip(diff, res):
            if g is not None and g.dtype != inputs[i].dtype:
                return i, g.dtype, inputs[i].dtype
    return None


def _batched_mismatch(outs, inputs, diff, atol, rtol):
    """Output index whose batched backward (is_grads_batched) differs from one backward per
    cotangent row, or None."""
    rng = np.random.default_rng(0)
    wrt = [inputs[i] for i in diff]
    for k, o in enumerate(outs):
        if not (o.requires_grad and o.data.size):
            continue
        rows = rng.standard_normal((2,) + o.shape).astype(o.dtype)
        batched = _grad([o], wrt, [Tensor(rows)], retain_graph=True, allow_unused=True,
                        is_grads_batched=True)
        for b, r in enumerate(rows):
            one = _grad([o], wrt, [Tensor(r)], retain_graph=True, allow_unused=True)
            for gb, g1 in zip(batched, one):
                if (gb is None) != (g1 is None) or (g1 is not None and not np.allclose(
                        np.asarray(gb.data)[b], np.asarray(g1.data), rtol=rtol, atol=atol)):
                    return k
    return None


def _forward_mismatch(func, inputs, diff, eps, atol, rtol):
    """Output index whose jvp along a random tangent (forward mode) differs from the central
    difference along it, or None."""
    from gradjit.runtime.functional import jvp
    rng = np.random.default_rng(1)
    tangents = [rng.standard_normal(t.shape).astype(t.dtype) if i in diff else None
                for i, t in enumerate(inputs)]
    tensors = [i for i, t in enumerate(inputs) if isinstance(t, Tensor)]
    v = tuple(Tensor(tangents[i] if i in diff else np.zeros(inputs[i].shape, inputs[i].dtype))
              for i in tensors)

    def f(*ts):
        args = list(inputs)
        for i, t in zip(tensors, ts):
            args[i] = t
        return _as_tuple(func(*args))

    _, got = jvp(f, tuple(inputs[i] for i in tensors), v)
    got = _as_tuple(got)
    saved = [inputs[i].data.copy() for i in diff]
    outs = []
    for sign in (1.0, -1.0):
        for i in diff:
            inputs[i].data[...] = saved[diff.index(i)] + sign * eps * tangents[i]
        with enable_grad():
            outs.append([np.array(o.data, np.float64) for o in _as_tuple(func(*inputs))])
    for i in diff:
        inputs[i].data[...] = saved[diff.index(i)]
    for k, (g, hi, lo) in enumerate(zip(got, *outs)):
        if not np.allclose(np.asarray(g.data, np.float64), (hi - lo) / (2 * eps), rtol=rtol,
                           atol=atol):
            return k
    return None


def gradcheck(func, inputs, *, eps=1e-6, atol=1e-5, rtol=1e-3, raise_exception=True,
              nondet_tol=0.0, check_undefined_grad=True, check_grad_dtypes=False,
              check_batched_grad=False, check_batched_forward_grad=False,
              check_forward_ad=False, check_backward_ad=True, fast_mode=False, masked=None):
    if masked:
        raise NotImplementedError("gradcheck: masked=True (sparse masked semantics) is not "
                                  "supported by gradjit (dense tensors only)")
    if check_batched_forward_grad:
        raise NotImplementedError("gradcheck: check_batched_forward_grad=True is not supported "
                                  "(forward mode has no batched tangents)")
    if not (check_forward_ad or check_backward_ad):
        raise ValueError("Expected at least one of check_forward_ad or check_backward_ad to be "
                         "True")
    inputs = _as_tuple(inputs)
    diff = [i for i, t in enumerate(inputs) if isinstance(t, Tensor) and t.requires_grad]
    if not diff:
        raise ValueError("gradcheck expects at least one input tensor to require gradient, but "
                         "none of the them have requires_grad=True.")
    for i in diff:
        if inputs[i].dtype != np.float64:
            warnings.warn(f"Input #{i} requires gradient and is not a double precision floating "
                          f"point. This check will likely fail if all the inputs are not of "
                          f"double precision floating point.", stacklevel=2)
    with enable_grad():
        outs = _as_tuple(func(*inputs))
        if check_backward_ad:
            analytical = _analytical(outs, inputs, diff)
            again = _analytical(outs, inputs, diff)
            worst = max((np.max(np.abs(analytical[key] - again[key]), initial=0.0)
                         for key in analytical), default=0.0)
            if not worst <= nondet_tol:
                return _fail(raise_exception, f"Backward is not reentrant, i.e., running "
                             f"backward with same input and grad_output multiple times gives "
                             f"different values, although analytical gradient matches numerical "
                             f"gradient.The tolerance for nondeterminism was {nondet_tol}.")
        if check_grad_dtypes and (bad := _grad_dtypes(outs, inputs, diff)) is not None:
            return _fail(raise_exception, f"Gradient has dtype mismatch: the gradient of input "
                         f"{bad[0]} has dtype {bad[1]}, the input {bad[2]}")
        if check_batched_grad and check_backward_ad and \
                (k := _batched_mismatch(outs, inputs, diff, atol, rtol)) is not None:
            return _fail(raise_exception, f"While computing batched gradients, got: the batched "
                         f"backward (is_grads_batched=True) of output {k} differs from one "
                         f"backward per cotangent")
    if check_forward_ad and (k := _forward_mismatch(func, inputs, diff, eps, atol,
                                                      rtol)) is not None:
        return _fail(raise_exception, f"Jacobian computed with forward mode mismatch for output "
                     f"{k}: jvp along a random tangent differs from finite differences")
    if not check_backward_ad:
        return True
    shapes = [o.shape for o in outs]
    for i in diff:
        numerical = _numerical(func, inputs, i, shapes, eps)
        for k in range(len(outs)):
            a, n = analytical[k, i], numerical[k].reshape(analytical[k, i].shape)
            if not np.allclose(a, n, rtol=rtol, atol=atol):
                if not raise_exception:
                    return False
                raise GradcheckError(f"Jacobian mismatch for output {k} with respect to input {i},"
                                     f"\nnumerical:{n.T}\nanalytical:{a.T}\n")
    return True


def gradgradcheck(func, inputs, grad_outputs=None, *, eps=1e-6, atol=1e-5, rtol=1e-3,
                  gen_non_contig_grad_outputs=False, raise_exception=True, nondet_tol=0.0,
                  check_undefined_grad=True, check_grad_dtypes=False, check_batched_grad=False,
                  check_fwd_over_rev=False, check_rev_over_rev=True, fast_mode=False,
                  masked=False, seed=0):
    if check_fwd_over_rev:
        raise NotImplementedError("gradgradcheck: check_fwd_over_rev=True is not supported "
                                  "(forward mode over a create_graph backward)")
    if not check_rev_over_rev:
        return True
    inputs = _as_tuple(inputs)
    with enable_grad():
        outs = _as_tuple(func(*inputs))
    if grad_outputs is None:
        rng = np.random.default_rng(seed)
        grad_outputs = tuple(Tensor(rng.standard_normal(o.shape).astype(o.dtype),
                                    requires_grad=True) for o in outs if o.requires_grad)
    grad_outputs = _as_tuple(grad_outputs)
    n = len(inputs)
    diff = [i for i, t in enumerate(inputs) if isinstance(t, Tensor) and t.requires_grad]

    def first_order(*args):
        xs, gos = args[:n], args[n:]
        ys = [o for o in _as_tuple(func(*xs)) if o.requires_grad]
        gs = _grad(ys, [xs[i] for i in diff], list(gos), create_graph=True, allow_unused=True)
        return tuple(g for g in gs if g is not None)

    return gradcheck(first_order, inputs + grad_outputs, eps=eps, atol=atol, rtol=rtol,
                     raise_exception=raise_exception, nondet_tol=nondet_tol,
                     check_grad_dtypes=check_grad_dtypes, check_batched_grad=check_batched_grad,
                     masked=masked)
