"""``gj.autograd.functional``: vjp, jvp, jacobian, hessian, hvp, vhp (torch semantics).

Contract
- ``func`` takes Tensors and returns a Tensor or a tuple of Tensors;
  ``inputs`` is a Tensor or a tuple of Tensors. Inputs are re-wrapped as fresh
  leaves that require grad, so the caller's tensors are never modified.
- Results are plain (detached) Tensors unless ``create_graph=True``, in which
  case they carry history and can be differentiated again.
- ``strict=True`` raises when an output does not depend on an input, and in
  hessian / hvp / vhp when a first derivative does not (a linear function:
  torch's messages); otherwise such derivatives are zeros.
- ``jvp`` and ``hvp`` use the double-backward identity (J v is the gradient
  with respect to u of <J^T u, v>), exact and compiled like every backward;
  ``vectorize=True`` computes all Jacobian rows with one batched backward.
"""
from __future__ import annotations

import numpy as np

from gradjit.runtime.autograd import grad as _grad
from gradjit.tracer.modes import enable_grad
from gradjit.tracer.tensor import Tensor


def _tuple(x):
    return (tuple(x), True) if isinstance(x, (tuple, list)) else ((x,), False)


def _prepare(inputs, create_graph):
    ins, is_tuple = _tuple(inputs)
    out = []
    for i, t in enumerate(ins):
        if not isinstance(t, Tensor):
            raise TypeError(f"The inputs given to the function must be either a Tensor or a tuple "
                            f"of Tensors but the value at index {i} has type {type(t).__name__}.")
        if create_graph and t.requires_grad:
            out.append(t)  # keep the caller's history: results differentiate back through it
        else:
            out.append(Tensor(t.data, requires_grad=True))
    return tuple(out), is_tuple


def _outputs(res):
    outs, is_tuple = _tuple(res)
    for i, o in enumerate(outs):
        if not isinstance(o, Tensor):
            raise TypeError(f"The outputs of the user-provided function given to the function must "
                            f"be either a Tensor or a tuple of Tensors but the value at index {i} "
                            f"has type {type(o).__name__}.")
    return outs, is_tuple


def _grads(outputs, inputs, grad_outputs, create_graph, strict, subject="The output",
           batched=False):
    diff = [(o, g) for o, g in zip(outputs, grad_outputs) if o.requires_grad]
    if not diff:
        res = (None,) * len(inputs)
    else:
        res = _grad([o for o, _ in diff], list(inputs), [g for _, g in diff], retain_graph=True,
                    create_graph=create_graph, allow_unused=True, is_grads_batched=batched)
    out = []
    for i, (t, g) in enumerate(zip(inputs, res)):
        if g is None:
            if strict:
                raise RuntimeError(f"{subject} of the user-provided function is independent of "
                                   f"input {i}. This is not allowed in strict mode.")
            lead = (np.asarray(getattr(grad_outputs[0], "data", grad_outputs[0])).shape[0],) \
                if batched else ()
            g = Tensor(np.zeros(lead + t.shape, t.dtype))
        out.append(g if create_graph else Tensor(g.data))
    return out


def _check_jacobian(jac, strict):
    """hessian / hvp / vhp in strict mode: each first derivative must depend on the inputs
    (torch's check and message; a linear function's is a constant)."""
    if strict:
        for i, g in enumerate(jac):
            if not g.requires_grad:
                raise RuntimeError(
                    f"While computing the hessian, found that the jacobian of the user-provided "
                    f"function with respect to input {i} is independent of the input. This is "
                    f"not allowed in strict mode. You should ensure that your function is twice "
                    f"differentiable and that the jacobian depends on the inputs (this would be "
                    f"violated by a linear function for example).")


def _unwrap(xs, is_tuple):
    return tuple(xs) if is_tuple else xs[0]


def _detach(outs, create_graph):
    return [o if create_graph else Tensor(o.data) for o in outs]


def _vectors(v, like, name):
    if v is None:
        if len(like) != 1 or like[0].data.size != 1:
            raise RuntimeError(f"The vector v can only be None if the {name} is a single Tensor "
                               f"with a single element.")
        return [Tensor(np.ones(like[0].shape, like[0].dtype))]
    vs, _ = _tuple(v)
    if len(vs) != len(like):
        raise RuntimeError(f"v has {len(vs)} elements but the {name} has {len(like)}")
    for i, (a, b) in enumerate(zip(vs, like)):
        shape = tuple(np.shape(getattr(a, "data", a)))
        if shape != tuple(b.shape):
            raise RuntimeError(f"Mismatch in shape: v[{i}] has a shape of {shape} and the "
                               f"{name}[{i}] has a shape of {b.shape}.")
    return [a if isinstance(a, Tensor) else Tensor(np.asarray(a, b.dtype)) for a, b in zip(vs, like)]


def vjp(func, inputs, v=None, create_graph=False, strict=False):
    with enable_grad():
        ins, in_tuple = _prepare(inputs, create_graph)
        outs, out_tuple = _outputs(func(*ins))
        vs = _vectors(v, outs, "output")
        res = _grads(outs, ins, vs, create_graph, strict)
    return _unwrap(_detach(outs, create_graph), out_tuple), _unwrap(res, in_tuple)


def jvp(func, inputs, v=None, create_graph=False, strict=False):
    with enable_grad():
        ins, in_tuple = _prepare(inputs, create_graph)
        outs, out_tuple = _outputs(func(*ins))
        vs = _vectors(v, ins, "input")
        us = [Tensor(np.zeros(o.shape, o.dtype), requires_grad=True) for o in outs]
        g = _grads(outs, ins, us, True, strict)
        pairs = [(x, w) for x, w in zip(g, vs) if x.requires_grad]
        if not pairs:
            res = [Tensor(np.zeros(o.shape, o.dtype)) for o in outs]
        else:
            res = _grads([x for x, _ in pairs], us, [w for _, w in pairs], create_graph, strict,
                         "The output")
    return _unwrap(_detach(outs, create_graph), out_tuple), _unwrap(res, out_tuple)


def jacobian(func, inputs, create_graph=False, strict=False, vectorize=False,
             strategy="reverse-mode"):
    if strategy not in ("reverse-mode", "forward-mode"):
        raise ValueError('Expected strategy to be either "forward-mode" or "reverse-mode".')
    with enable_grad():
        ins, in_tuple = _prepare(inputs, create_graph)
        outs, out_tuple = _outputs(func(*ins))
        table = []
        for o in outs:
            n = o.data.size
            what = f"Output {len(table)}"
            if vectorize and n and not create_graph:
                eye = np.eye(n, dtype=o.dtype).reshape((n,) + o.shape)
                try:
                    rows = _grads([o], ins, [eye], create_graph, strict, what, True)
                    table.append([r.reshape(o.shape + t.shape) for r, t in zip(rows, ins)])
                    continue
                except NotImplementedError:
                    pass  # Python callbacks in backward: row by row below
            per_in = [[] for _ in ins]
            for k in range(n):
                e = np.zeros(n, o.dtype)
                e[k] = 1.0
                for j, r in enumerate(_grads([o], ins, [e.reshape(o.shape)], create_graph, strict,
                                             what)):
                    per_in[j].append(r)
            table.append([_stack(rows, o.shape, t, create_graph) for rows, t in zip(per_in, ins)])
    if not out_tuple and not in_tuple:
        return table[0][0]
    if not out_tuple:
        return tuple(table[0])
    if not in_tuple:
        return tuple(row[0] for row in table)
    return tuple(tuple(row) for row in table)


def _stack(rows, out_shape, t, create_graph):
    if not rows:
        return Tensor(np.zeros(out_shape + t.shape, t.dtype))
    if create_graph:
        flat = [r.reshape((1,) + t.shape) for r in rows]
        acc = flat[0]
        for r in flat[1:]:
            acc = _concat(acc, r)
        return acc.reshape(out_shape + t.shape)
    return Tensor(np.stack([r.data for r in rows]).reshape(out_shape + t.shape))


def _concat(a, b):
    # Differentiable concatenation along dim 0 from ops we have: pad each with zeros
    # through a selection matrix (small Jacobians only).
    na, nb = a.shape[0], b.shape[0]
    ea = np.zeros((na + nb, na), a.dtype)
    ea[:na, :na] = np.eye(na)
    eb = np.zeros((na + nb, nb), b.dtype)
    eb[na:, :] = np.eye(nb)
    fa = a.reshape(na, -1)
    fb = b.reshape(nb, -1)
    return (Tensor(ea) @ fa + Tensor(eb) @ fb).reshape((na + nb,) + a.shape[1:])


def hessian(func, inputs, create_graph=False, strict=False, vectorize=False,
            outer_jacobian_strategy="reverse-mode"):
    ins, in_tuple = _tuple(inputs)

    def jac_func(*xs):
        outs, _ = _outputs(func(*xs))
        if len(outs) != 1 or outs[0].data.size != 1:
            raise RuntimeError("The Tensor returned by the function given to hessian should "
                               "contain a single element")
        g = _grads([outs[0].reshape(())], xs, [np.ones((), outs[0].dtype)], True, strict)
        _check_jacobian(g, strict)
        return tuple(g) if in_tuple else g[0]

    return jacobian(jac_func, inputs, create_graph=create_graph, strict=strict,
                    vectorize=vectorize, strategy=outer_jacobian_strategy)


def vhp(func, inputs, v=None, create_graph=False, strict=False):
    with enable_grad():
        ins, in_tuple = _prepare(inputs, create_graph)
        outs, _ = _outputs(func(*ins))
        if len(outs) != 1 or outs[0].data.size != 1:
            raise RuntimeError("The function given in vhp should return a single Tensor with a "
                               "single element.")
        vs = _vectors(v, ins, "input")
        g = _grads([outs[0].reshape(())], ins, [np.ones((), outs[0].dtype)], True, strict)
        _check_jacobian(g, strict)
        pairs = [(x, w) for x, w in zip(g, vs) if x.requires_grad]
        if pairs:
            res = _grads([x for x, _ in pairs], ins, [w for _, w in pairs], create_graph, strict,
                         "The jacobian")
        else:
            res = [Tensor(np.zeros(t.shape, t.dtype)) for t in ins]
    return _detach(outs, create_graph)[0], _unwrap(res, in_tuple)


def hvp(func, inputs, v=None, create_graph=False, strict=False):
    # The Hessian of a scalar function is symmetric, so H v = (v^T H)^T.
    return vhp(func, inputs, v, create_graph, strict)
