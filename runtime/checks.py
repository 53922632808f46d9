"""``gradcheck`` / ``gradgradcheck``: finite differences against autograd (torch semantics).

Contract: ``gradcheck(func, inputs, eps=1e-6, atol=1e-5, rtol=1e-3,
raise_exception=True)`` compares, for every differentiable output and every
input that requires grad, the analytical Jacobian (one batched backward per
output) with central finite differences; a mismatch raises ``GradcheckError``
naming the output and input with both Jacobians (or returns False).
``gradgradcheck`` checks the gradients of the first-order gradients
(``create_graph=True``) the same way. Non-float64 inputs draw a warning, as in
torch: float32 differences are too coarse for these tolerances.
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


def gradcheck(func, inputs, *, eps=1e-6, atol=1e-5, rtol=1e-3, raise_exception=True,
              check_undefined_grad=True, fast_mode=False):
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
        analytical = _analytical(outs, inputs, diff)
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
                  gen_non_contig_grad_outputs=False, raise_exception=True, seed=0):
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
                     raise_exception=raise_exception)
