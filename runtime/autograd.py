"""``backward`` and ``grad``: torch.autograd's argument handling and messages.

Contract: validate arguments exactly as ``torch.autograd`` does (same
messages), turn ``grad_tensors`` / ``grad_outputs`` into seeds, call
``engine.run_backward``, and deliver the results: accumulated into ``.grad``
(``backward``, including retained non-leaf gradients) or returned as a tuple
of Tensors (``grad``).
- As torch's engine, the backward runs with grad mode set to ``create_graph``
  (so ``create_graph=True`` records under ``no_grad``, and hooks run without
  recording otherwise); inference mode still wins (tracer/modes.py).
- After ``backward`` accumulated a leaf's ``.grad``, its post-accumulate-grad
  hooks run (tracer/tensor_grad.py).
"""
from __future__ import annotations

import math
import warnings

import numpy as np

from gradjit.runtime.engine import run_backward
from gradjit.runtime.fast_backward import fast_backward
from gradjit.tracer.registry import GradjitRuntimeError
from gradjit.runtime.crossing import moved, source
from gradjit.tracer.device import is_device_array
from gradjit.tracer.modes import set_grad_enabled
from gradjit.tracer.tensor import Tensor, accumulated
from gradjit.tracer.tensor_grad import run_post_accumulate_hooks


def _as_list(x):
    if x is None:
        return None
    return list(x) if isinstance(x, (list, tuple)) else [x]


def _seeds(outputs, grad_outputs, batched=False):
    grad_outputs = _as_list(grad_outputs) or [None] * len(outputs)
    if len(grad_outputs) != len(outputs):
        raise RuntimeError(f"got {len(outputs)} tensors and {len(grad_outputs)} gradients")
    seeds = []
    for i, (o, g) in enumerate(zip(outputs, grad_outputs)):
        if not isinstance(o, Tensor):
            raise TypeError(f"outputs[{i}] is a {type(o).__name__}, not a gradjit Tensor")
        if not o.requires_grad:
            raise RuntimeError(f"element {i} of tensors does not require grad and does not have a "
                               f"grad_fn")
        if g is None:
            if batched:
                raise RuntimeError("is_grads_batched=True requires every grad_output to be given")
            if math.prod(o.shape) != 1:
                made_by = (f", the result of {o.grad_fn.op} ({o.grad_fn.name()})"
                           if o.grad_fn is not None else "")
                raise GradjitRuntimeError("grad can be implicitly created only for scalar outputs "
                                   f"(outputs[{i}] has shape {o.shape}{made_by}); pass a gradient "
                                   f"of that shape", o.grad_fn.site if o.grad_fn else None)
            seeds.append(np.ones(o.shape, o.dtype))
            continue
        if not isinstance(g, (Tensor, np.ndarray, float, int)):
            raise TypeError(f"gradients can be either Tensors or None, but got {type(g).__name__}")
        arr = np.asarray(getattr(g, "data", g), dtype=o.dtype)
        if batched and arr.shape[1:] != o.shape:
            raise RuntimeError(
                f"If `is_grads_batched=True`, we interpret the first dimension of each grad_output "
                f"as the batch dimension. The sizes of the remaining dimensions are expected to "
                f"match the shape of corresponding output, but a mismatch was detected: "
                f"grad_output[{i}] has a shape of {arr.shape} and output[{i}] has a shape of "
                f"{o.shape}. If you only want some tensors in `grad_output` to be considered "
                f"batched, consider using vmap.")
        if not batched and arr.shape != o.shape:
            raise RuntimeError(f"Mismatch in shape: grad_output[{i}] has a shape of {arr.shape} and "
                               f"output[{i}] has a shape of {o.shape}.")
        # Keep Tensors (their history matters with create_graph); arrays as arrays.
        seeds.append(g if isinstance(g, Tensor) and g.dtype == o.dtype else arr)
    return seeds


def _accumulate(t, g):
    # (``_grad``: the engine's gradients have the leaf's type; tracer/tensor_grad.py)
    old = t._grad
    if isinstance(g, Tensor):
        t._grad = g if old is None else old + g
    else:
        if is_device_array(g):   # a fresh device array from the compiled backward: no copy
            t._grad = Tensor(g) if old is None else old.detach() + Tensor(g)
        else:
            t._grad = Tensor(np.array(g)) if old is None else accumulated(old, g)


_UNTRIED = object()   # backward's _fast_key: the fast path was not tried yet


def tensor_backward(t, gradient, retain_graph, create_graph, inputs):
    """``Tensor.backward``: a plain ``loss.backward()`` of a deferred step tries the fast
    path (runtime/fast_backward.py) before ``backward``'s argument handling."""
    if (gradient is None and t._data is None and not retain_graph and not create_graph
            and inputs is None):
        fast_key = fast_backward(t)
        if fast_key is True:
            return
        return backward([t], None, retain_graph, create_graph, inputs=None, _fast_key=fast_key)
    backward([t], None if gradient is None else [gradient], retain_graph, create_graph,
             inputs=inputs)


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False,
             grad_variables=None, inputs=None, _fast_key=_UNTRIED):
    fast_key = None if _fast_key is _UNTRIED else _fast_key
    root = tensors[0] if type(tensors) is list and len(tensors) == 1 else tensors
    if (_fast_key is _UNTRIED and type(root) is Tensor and root._data is None
            and grad_tensors is None and not retain_graph and not create_graph
            and grad_variables is None and inputs is None):   # (runtime/fast_backward.py)
        fast_key = fast_backward(root)
        if fast_key is True:
            return
    if grad_variables is not None:
        warnings.warn("'grad_variables' is deprecated. Use 'grad_tensors' instead.", stacklevel=2)
        if grad_tensors is not None:
            raise RuntimeError("'grad_tensors' and 'grad_variables' (deprecated) arguments both "
                               "passed to backward(). Please only use 'grad_tensors'.")
        grad_tensors = grad_variables
    roots = _as_list(tensors)
    seeds = _seeds(roots, grad_tensors)
    wrt = None
    if inputs is not None:
        wrt = _as_list(inputs)
        if not wrt:
            raise RuntimeError("'inputs' argument to backward() cannot be empty.")
    crossings = []
    with set_grad_enabled(create_graph):
        wrt_out, grads, retained = run_backward(roots, seeds, wrt, retain_graph, create_graph,
                                                crossings=crossings, fast_key=fast_key)
        for t, g in zip(wrt_out, grads):
            if g is not None:
                _accumulate(t, g)
                if t._hooks and t.grad_fn is None:
                    run_post_accumulate_hooks(t)
        for t, g in retained:
            if t is not None and g is not None:
                _accumulate(t, g)
    for k, (fn, g) in enumerate(crossings):   # continue on the other device
        last = k == len(crossings) - 1
        backward([source(fn)], [moved(fn, g)], retain_graph if last else True, create_graph,
                 inputs=wrt)


def _across(wrt, grads, crossings, retain_graph, create_graph):
    """grad() through device copies: the chain rule through each copy, summed per input."""
    out = [None if g is None else g if isinstance(g, Tensor) else Tensor(g) for g in grads]
    for k, (fn, g) in enumerate(crossings):
        last = k == len(crossings) - 1
        sub = grad([source(fn)], wrt, [moved(fn, g)], retain_graph if last else True,
                   create_graph, allow_unused=True)
        out = [a if b is None else b if a is None else a + b for a, b in zip(out, sub)]
    return out


def _batched_with_graph(roots, wrt, seeds, retain_graph, allow_unused, materialize_grads):
    """``is_grads_batched`` with ``create_graph``: one differentiable backward per row of
    the seeds, stacked. The batched plan computes numbers, not a graph; a row at a time
    records each row's history (as torch's vmap fallback does), so the result has one."""
    from gradjit.tracer.methods_index import stack
    n = seeds[0].shape[0]
    rows = []
    for k in range(n):
        rows.append(grad(roots, wrt, [s[k] for s in seeds],
                         retain_graph=True if k < n - 1 else retain_graph, create_graph=True,
                         allow_unused=allow_unused, materialize_grads=materialize_grads))
    return tuple(None if rows[0][j] is None else stack([r[j] for r in rows])
                 for j in range(len(wrt)))


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False,
         only_inputs=True, allow_unused=None, is_grads_batched=False, materialize_grads=False):
    if not only_inputs:
        warnings.warn("only_inputs argument is deprecated and is ignored now (defaults to True). "
                      "To accumulate gradient for other parts of the graph, please use "
                      "gradjit.autograd.backward.", stacklevel=2)
    if allow_unused is None:
        allow_unused = materialize_grads
    if materialize_grads and not allow_unused:
        raise ValueError("Expected allow_unused to be True or not passed when materialize_grads=True, "
                         "but got: allow_unused=False.")
    roots = _as_list(outputs)
    wrt = _as_list(inputs)
    if not wrt:
        raise RuntimeError("grad requires non-empty inputs.")
    seeds = _seeds(roots, grad_outputs, is_grads_batched)
    for i, t in enumerate(wrt):
        if not isinstance(t, Tensor) or not t.requires_grad:
            raise RuntimeError(f"One of the differentiated Tensors (inputs[{i}]) does not require "
                               f"grad")
    if is_grads_batched and create_graph and seeds[0].shape[0]:
        return _batched_with_graph(roots, wrt, seeds, retain_graph, allow_unused,
                                   materialize_grads)
    crossings = []
    with set_grad_enabled(create_graph):
        _, grads, retained = run_backward(roots, seeds, wrt, retain_graph, create_graph,
                                          allow_unused, batched=is_grads_batched,
                                          crossings=crossings)
        if crossings:
            grads = _across(wrt, grads, crossings, retain_graph, create_graph)
        if not is_grads_batched:   # torch fills retain_grad tensors here too (asked ones
            # included); a batch of seeds has no one gradient to keep
            retained = retained + [(t, g) for t, g in zip(wrt, grads) if t.retains_grad]
            for t, g in retained:
                if t is not None and g is not None:
                    _accumulate(t, g)
    if not allow_unused and any(g is None for g in grads):   # (checked here after crossings)
        i = next(k for k, g in enumerate(grads) if g is None)
        raise RuntimeError(f"One of the differentiated Tensors appears to not have been used "
                           f"in the graph (inputs[{i}]). Set allow_unused=True if this is "
                           f"the desired behavior.")
    out = []
    for t, g in zip(wrt, grads):
        if g is None and materialize_grads:
            shape = ((seeds[0].shape[0],) if is_grads_batched else ()) + t.shape
            g = np.zeros(shape, t.dtype)
        out.append(None if g is None else g if isinstance(g, Tensor) else Tensor(g))
    return tuple(out)
