"""Graph passes: decomposition, common-subexpression elimination, dead code, splitting.

Contract
- ``optimize(graph)`` returns a new graph computing the same outputs with
  composite ops (``mean``, ``_softmax``, ``_log_softmax``, ``logsumexp``,
  ``linalg_vector_norm``, ``median``, ``elu``, ``elu_backward``, ``_std_from_var``, ``_binary_cross_entropy``) decomposed into the primitive ops the code
  generators emit, sums over size-1 dims only made views, duplicate nodes
  merged (CSE), chains of shape-only views that end at their start's shape dropped (a
  keepdim sum viewed as 0-d, then unsqueezed back: the value itself), sums of
  zero-padded placements regrouped into concatenations
  (``lowering/placements.py``) and dead nodes removed (DCE). Inputs and their order are kept,
  so callers keep feeding the same arrays; captured constants travel along.
- ``extract(graph, nodes, outputs)`` cuts the sub-graph made of ``nodes``
  (used for tensor-mode backward: the forward already ran eagerly). Its inputs
  are the outside values it reads, in first-use order; it returns the new
  graph and, per new input, the original value that feeds it.
"""
from __future__ import annotations

from gradjit.lowering.placements import merge_placements
from gradjit.lowering.schedule import ORDER_VIEWS, unchecked_indices
from gradjit.tracer.control_flow import Region
from gradjit.tracer.api import where
from gradjit.tracer.dispatch import apply
from gradjit.tracer.ir import Graph, _key_attr
from gradjit.tracer.ops import reduces_nothing
from gradjit.tracer.trace import Tracer


def _count(shape, dims):
    n = 1
    for d in (dims if dims else range(len(shape))):
        n *= shape[d]
    return n


def _shifted(x, dims):
    # minus the max along dims, for exp's range; a size-0 dim has no max (amax rejects it)
    # and nothing to shift
    return x if reduces_nothing(x.shape, dims) else x - x.amax(dims, keepdim=True)


def _softmax(x, dim, half_to_float):
    e = _shifted(x, (dim,)).exp()
    return e / e.sum(dim, keepdim=True)


def _log_softmax(x, dim, half_to_float):
    z = _shifted(x, (dim,))
    return z - z.exp().sum(dim, keepdim=True).log()


def _custom_function(*ins, function, n_in, tensor_args, ctx=None):
    # A traced custom Function node: inputs are (its tensor arguments, the forward's
    # results, traced inline); it returns the latter. Only its adjoint is special.
    return tuple(ins[n_in:])


def _logsumexp(x, dim, keepdim):
    # shift by the max (infinite maxima shift by 0, so all -inf gives -inf as torch); over
    # zero elements the sum is 0 and the result -inf, as torch
    if reduces_nothing(x.shape, dim):
        out = x.exp().sum(dim, keepdim=True).log()
        return out if keepdim else out.reshape(tuple(s for i, s in enumerate(x.shape)
                                                     if i not in dim))
    m = x.amax(dim, keepdim=True).nan_to_num(0.0, 0.0, 0.0)
    out = (x - m).exp().sum(dim, keepdim=True).log() + m
    return out if keepdim else out.reshape(tuple(s for i, s in enumerate(x.shape) if i not in dim))


def _vector_norm(x, ord, dim, keepdim):
    if ord == 2:
        return (x * x).sum(dim, keepdim=keepdim).sqrt()
    a = x.abs()
    if ord == 1:
        return a.sum(dim, keepdim=keepdim)
    if ord == float("inf"):
        return a.amax(dim or (), keepdim)
    if ord == float("-inf"):
        return a.amin(dim or (), keepdim)
    return a.pow(ord).sum(dim, keepdim=keepdim).pow(1.0 / ord)


def _median(x):
    # the lower median: its value is a selection from the sort; only its gradient is its own
    v = apply("sort.default", [x.reshape((-1,))], {"dim": 0, "descending": False})[0]
    return v.narrow(0, (v.shape[0] - 1) // 2, 1).reshape(())


def _scaled(x, c):
    return x if c == 1 else x * c


def _elu(x, alpha, scale, input_scale):
    neg = _scaled(x.clamp_max(0.0), input_scale).expm1() * (alpha * scale)
    return where(x > 0, _scaled(x, scale), neg)


def _elu_backward(g, s, alpha, scale, input_scale, is_result):
    if is_result:
        neg = _scaled(g, input_scale) * (s + alpha * scale)
    else:
        neg = g * (_scaled(s.clamp_max(0.0), input_scale).exp() * (input_scale * alpha * scale))
    return where(s <= 0, neg, _scaled(g, scale))


def _outer(a, b):
    # (m, 1) @ (1, n) is a broadcast multiply: written so it fuses into the elementwise
    # loop that consumes it (an unrolled RNN's weight gradients: dW += h.T @ dz) instead
    # of a BLAS call and a temporary, which cost more than the multiply at these sizes
    return a * b


def _unit_sum(x, dim, keepdim=False, dtype=None):
    # A sum over size-1 dims only (sum_to of a batch of one: an RNN's bias gradient) is
    # its input, or a view of it: no accumulator, no reduction loop, no copy
    return x if keepdim else x.reshape(tuple(s for i, s in enumerate(x.shape)
                                             if i not in _dims(dim, x.ndim)))


def _bce(p, t):
    return -(t * p.log().clamp_min(-100.0) + (1 - t) * (-p).log1p().clamp_min(-100.0))


def _dims(dim, ndim):
    return {d % ndim for d in (dim if isinstance(dim, (tuple, list)) else (dim,))}


def _sums_unit_dims(node, x):
    dim = node.attrs.get("dim")
    return (bool(dim) and x.ndim > 0 and node.outputs[0].dtype == x.dtype
            and all(x.shape[d] == 1 for d in _dims(dim, x.ndim)))


DECOMPOSITIONS = {
    "custom_function": _custom_function,
    "sum.dim_IntList": _unit_sum,
    "mean.default": lambda x: x.sum() / x.numel(),
    "mean.dim": lambda x, dim, keepdim: x.sum(dim, keepdim=keepdim) / _count(x.shape, dim),
    "_softmax.default": _softmax,
    "_log_softmax.default": _log_softmax,
    "logsumexp.default": _logsumexp,
    "linalg_vector_norm.default": _vector_norm,
    "median.default": _median,
    "elu.default": _elu,                            # (its gradient differs from the parts')
    "elu_backward.default": _elu_backward,
    "_std_from_var.default": lambda x: x.sqrt(),   # its gradient differs from sqrt's, not its value
    "_binary_cross_entropy.default": _bce,          # (likewise)
    "mm.default": _outer,
}
# Decompositions that apply only to some nodes (the others keep their node): (node, *ins).
APPLIES = {"mm.default": lambda node, a, b: a.shape[1] == 1 and a.dtype == b.dtype,
           "sum.dim_IntList": _sums_unit_dims}


def _always(node, *ins):
    return True


def optimize(graph):
    return dce(merge_placements(rebuild(graph)))


def rebuild(graph, decompose=True, cse=True):
    new = Graph(graph.name)
    vmap = {}
    start = {}   # new value made by an ORDER_VIEWS chain -> the chain's first input
    returned = set(graph.outputs)
    for v in graph.inputs:
        nv = new.add_input(v.shape, v.dtype)
        vmap[v] = nv
        if v in graph.constants:
            new.constants[nv] = graph.constants[v]
    seen = {}
    for node in graph.nodes:
        ins = [vmap[v] for v in node.inputs]
        key = (node.op, tuple(v.id for v in ins), tuple((k, _key_attr(a)) for k, a in node.attrs.items()))
        if cse and key in seen:
            outs = seen[key]
        elif node.op in ORDER_VIEWS and node.outputs[0] not in returned and \
                start.get(ins[0], ins[0]).shape == node.outputs[0].shape:
            outs = [start.get(ins[0], ins[0])]   # (a round trip: the value itself)
        elif decompose and node.op in DECOMPOSITIONS and APPLIES.get(node.op, _always)(node, *ins):
            new.site_override = node.site
            res = DECOMPOSITIONS[node.op](*[Tracer(new, v) for v in ins], **node.attrs)
            new.site_override = None
            outs = [r.value for r in (res if isinstance(res, tuple) else (res,))]
        else:
            attrs = {k: _optimized_region(a) for k, a in node.attrs.items()}
            outs = new.add_node(node.op, ins, attrs,
                                [(v.shape, v.dtype) for v in node.outputs], node.site)
        seen[key] = outs
        if node.op in ORDER_VIEWS and outs[0] is not start.get(ins[0], ins[0]):
            start[outs[0]] = start.get(ins[0], ins[0])
        vmap.update(zip(node.outputs, outs))
    new.outputs = [vmap[v] for v in graph.outputs]
    return new


def _optimized_region(a):
    """A region's body is optimised with its node (decompositions, CSE, dead code)."""
    if isinstance(a, Region) and not getattr(a.graph, "optimized", False):
        body = optimize(a.graph)
        body.optimized = True
        return Region(body)
    return a


def dce(graph):
    """Nodes no output needs are removed, except an op whose traced index no kept op
    checks against the same bound: NumPy raises for an index out of bounds even where the
    value is unused (``np.add.at(y, i, 1.0)`` in a gradient that does not read ``y``), and
    so does the interpreter; compiled code must not answer instead."""
    forced = set()
    while True:
        live = set(graph.outputs)
        keep = []
        for node in reversed(graph.nodes):
            if node in forced or any(v in live for v in node.outputs):
                keep.append(node)
                live.update(node.inputs)
        kept = set(keep)
        more = unchecked_indices(graph, lambda n: n in kept) - forced
        if not more:
            break
        forced |= more
    graph.nodes = keep[::-1]
    return graph


def extract(graph, nodes, outputs, name="backward"):
    new = Graph(name)
    inside = {v for n in nodes for v in n.outputs}
    vmap, feeds = {}, []

    def outer(v):
        if v not in vmap:
            nv = new.add_input(v.shape, v.dtype)
            vmap[v] = nv
            feeds.append(v)
            if v in graph.constants:
                new.constants[nv] = graph.constants[v]
        return vmap[v]

    for node in nodes:
        ins = [vmap[v] if v in inside else outer(v) for v in node.inputs]
        outs = new.add_node(node.op, ins, node.attrs, [(v.shape, v.dtype) for v in node.outputs],
                            node.site)
        vmap.update(zip(node.outputs, outs))
    new.outputs = [vmap[v] if v in inside else outer(v) for v in outputs]
    return new, feeds


def prune_inputs(graph):
    """Drop inputs nothing reads; return the indices of the kept ones."""
    used = {v for n in graph.nodes for v in n.inputs} | set(graph.outputs)
    kept = [i for i, v in enumerate(graph.inputs) if v in used]
    graph.inputs = [graph.inputs[i] for i in kept]
    return kept
