"""Reverse mode of region nodes (tracer/control_flow.py): each adjoint is a region again.

Contract
- ``RULES`` maps each region op to an adjoint rule of lowering/adjoint.py's
  ``rules`` form: ``rule(graph, node, grad_outs, mask) -> [Value | None]``.
- ``scan``: a reverse scan. Its body is the forward body followed by that body's
  adjoint (``vjp_body``), so each step recomputes the body's intermediates from the
  carry the forward scan stacked, instead of storing them: memory is the carries,
  compute about two forward bodies per step. Its carries are the carry cotangent and
  the running sum of the captured values' cotangents; its slices are the stacked
  carries, the xs, the ys' cotangents (and the stacked carries' own cotangents, which
  reach them when this adjoint is itself differentiated).
- ``cond``: a cond of the two branches' adjoint bodies, on the same predicate.
- ``call`` (``gj.checkpoint``): a call of the body's adjoint body, which recomputes.
- ``while``: no reverse mode; a clear error says to give ``max_steps``. Forward mode
  (``FORWARD_RULES``, lowering/forward.py) is a while loop of values and tangents.
- Because every adjoint is a region node of the same kinds, the result differentiates
  again (higher order). Cotangents that are absent are zeros of the right type.
"""
from __future__ import annotations

from gradjit.lowering.helpers import zeros_like
from gradjit.tracer.control_flow import Region
from gradjit.tracer.ir import Graph
from gradjit.tracer.registry import GradjitError
from gradjit.tracer.trace import Tracer, constant


def _is_float(v):
    return v.dtype.kind == "f"


def _add(g, a, b):
    return (Tracer(g, a) + Tracer(g, b)).value


def _zeros(g, like):
    return zeros_like(Tracer(g, like)).value


def _copy_into(g, body, ins):
    """``body``'s nodes appended to ``g``, reading ``ins`` for its inputs: its outputs."""
    vmap = dict(zip(body.inputs, ins))
    for node in body.nodes:
        outs = g.add_node(node.op, [vmap[v] for v in node.inputs], node.attrs,
                          [(v.shape, v.dtype) for v in node.outputs], node.site)
        vmap.update(zip(node.outputs, outs))
    return [vmap[v] for v in body.outputs]


def vjp_body(body, name, lead=()):
    """A graph: inputs ``lead`` types, then ``body``'s inputs, then one cotangent per float
    output of ``body``; outputs: the cotangent of each float input of ``body`` (zeros
    where it does not depend). Returns ``(graph, lead inputs, body inputs, seeds,
    grads, consts)`` so callers can add outputs of their own; ``consts`` are the
    constants the formulas made (``[(input Value, array)]``, taken out of the graph's
    inputs): the caller feeds them, after every other input."""
    from gradjit.lowering.adjoint import adjoint
    g = Graph(name)
    lead_in = [g.add_input(s, d) for s, d in lead]
    ins = [g.add_input(v.shape, v.dtype) for v in body.inputs]
    outs = _copy_into(g, body, ins)
    seeds = [g.add_input(v.shape, v.dtype) if _is_float(v) else None for v in body.outputs]
    wrt = [v for v in ins if _is_float(v)]
    grads = adjoint(g, outs, seeds, wrt)
    grads = [gr if gr is not None else _zeros(g, w) for gr, w in zip(grads, wrt)]
    consts = [(v, g.constants.pop(v)) for v in list(g.constants)]
    g.inputs = [v for v in g.inputs if all(v is not c for c, _ in consts)]
    g.constant_ids = {}
    return g, lead_in, ins, seeds, grads, consts


def _fed(graph, consts):
    return [constant(graph, a).value for _, a in consts]


def _seed(graph, g, v):
    return g if g is not None else _zeros(graph, v)


def scan_rule(graph, node, grad_outs, mask):
    a = node.attrs
    body = a["body"].graph
    nc, nx, n = a["n_carry"], a["n_x"], a["length"]
    ny = len(body.outputs) - nc
    ins = node.inputs
    init, xs, caps = ins[:nc], ins[nc:nc + nx], ins[nc + nx:]
    c_out, ys, stack = node.outputs[:nc], node.outputs[nc:nc + ny], node.outputs[nc + ny:]
    g_c, g_y, g_s = grad_outs[:nc], grad_outs[nc:nc + ny], grad_outs[nc + ny:]
    fc = [i for i in range(nc) if _is_float(init[i])]
    fy = [j for j in range(ny) if _is_float(ys[j])]
    fx = [i for i in range(nx) if _is_float(xs[i])]
    fk = [i for i in range(len(caps)) if _is_float(caps[i])]
    with_s = any(g_s[i] is not None for i in fc)
    # reverse body: carries (carry cotangents, captured cotangent sums), slices (stacked
    # carries, xs, ys' cotangents [, stacked carries' cotangents]), then captured values
    lead = [(caps[i].shape, caps[i].dtype) for i in fk]
    vg, lead_in, b_ins, seeds, grads, consts = vjp_body(body, f"{body.name}.reverse", lead)
    # vjp_body's inputs are lead, then body inputs (carry, x, caps), then seeds; the scan
    # convention wants lead (carries), then slices, then captured: reorder.
    b_c, b_x, b_k = b_ins[:nc], b_ins[nc:nc + nx], b_ins[nc + nx:]
    y_seeds = [seeds[nc + j] for j in fy]
    c_seeds = [seeds[i] for i in fc]
    s_cots = [vg.add_input(init[i].shape, init[i].dtype) for i in fc] if with_s else []
    # The carry cotangent entering a step is the seed of the body's carry outputs.
    vg.inputs = (c_seeds + lead_in + b_c + b_x + y_seeds + s_cots + b_k + [v for v, _ in consts])
    float_ins = [v for v in b_ins if _is_float(v)]
    gmap = dict(zip(float_ins, grads))
    g_carry = [gmap[b_c[i]] for i in fc]
    if with_s:
        g_carry = [_add(vg, gc, sc) for gc, sc in zip(g_carry, s_cots)]
    acc = [_add(vg, lead_in[j], gmap[b_k[i]]) for j, i in enumerate(fk)]
    vg.outputs = g_carry + acc + [gmap[b_x[i]] for i in fx]
    # the cotangent inputs that are not float (int carries, int ys) were never made
    seeds_in = ([_seed(graph, g_c[i], c_out[i]) for i in fc]
                + [_zeros(graph, caps[i]) for i in fk])
    slices = (list(stack) + list(xs) + [_seed(graph, g_y[j], ys[j]) for j in fy]
              + ([_seed(graph, g_s[i], stack[i]) for i in fc] if with_s else []))
    n_carry = len(fc) + len(fk)
    types = ([(v.shape, v.dtype) for v in vg.outputs[:n_carry]]
             + [((n,) + v.shape, v.dtype) for v in vg.outputs[n_carry:]]
             + [((n,) + v.shape, v.dtype) for v in vg.inputs[:n_carry]])
    outs = graph.add_node("scan.default", seeds_in + slices + list(caps) + _fed(graph, consts),
                          {"body": Region(vg), "n_carry": n_carry, "n_x": len(slices),
                           "length": n, "reverse": not a["reverse"],
                           "origin": a.get("origin", "gj.scan")}, types)
    res = [None] * len(ins)
    for k, i in enumerate(fc):
        res[i] = outs[k]
    for k, i in enumerate(fk):
        res[nc + nx + i] = outs[len(fc) + k]
    for k, i in enumerate(fx):
        res[nc + i] = outs[n_carry + k]
    return [r if m else None for r, m in zip(res, mask)]


def _branch_adjoint(body, name):
    g, _, ins, seeds, grads, consts = vjp_body(body, name)
    g.inputs = ins + [s for s in seeds if s is not None] + [v for v, _ in consts]
    g.outputs = grads
    return g, consts


def _seeds_for(graph, node, grad_outs):
    return [_seed(graph, gr, v) for gr, v in zip(grad_outs, node.outputs) if _is_float(v)]


def _float_results(node, outs, offset, mask):
    res, it = [None] * len(node.inputs), iter(outs)
    for k, v in enumerate(node.inputs[offset:], offset):
        if _is_float(v):
            res[k] = next(it)
    return [r if m else None for r, m in zip(res, mask)]


def cond_rule(graph, node, grad_outs, mask):
    t, t_consts = _branch_adjoint(node.attrs["true_body"].graph, "cond_true.reverse")
    f, f_consts = _branch_adjoint(node.attrs["false_body"].graph, "cond_false.reverse")
    # one signature for both: each gets (unused) inputs for the other's constants
    t.inputs += [t._new_value(v.shape, v.dtype) for v, _ in f_consts]
    f.inputs[len(f.inputs) - len(f_consts):len(f.inputs) - len(f_consts)] = [
        f._new_value(v.shape, v.dtype) for v, _ in t_consts]
    seeds = _seeds_for(graph, node, grad_outs)
    outs = graph.add_node("cond.default", list(node.inputs) + seeds + _fed(graph, t_consts)
                          + _fed(graph, f_consts),
                          {"true_body": Region(t), "false_body": Region(f)},
                          [(v.shape, v.dtype) for v in t.outputs])
    return _float_results(node, outs, 1, mask)


def call_rule(graph, node, grad_outs, mask):
    b, consts = _branch_adjoint(node.attrs["body"].graph, "checkpoint.reverse")
    outs = graph.add_node("call.default", list(node.inputs) + _seeds_for(graph, node, grad_outs)
                          + _fed(graph, consts),
                          {"body": Region(b)}, [(v.shape, v.dtype) for v in b.outputs])
    return _float_results(node, outs, 0, mask)


def while_rule(graph, node, grad_outs, mask):
    raise GradjitError("gj.while_loop: reverse-mode differentiation needs a bound on the "
                       "number of steps: pass max_steps=N (the loop then runs at most N "
                       "steps, and its gradient is exact for every loop that ends sooner)",
                       node.site)


def while_forward(graph, node, ts):
    """Forward mode of ``while``: a while loop of the values and their tangents, the body
    followed by its tangents, the condition on the values alone (as JAX's), so no bound
    on the steps is needed. Returns the tangent of each output (None: not float)."""
    from gradjit.lowering.forward import tangents
    a = node.attrs
    body, cond, nc = a["body"].graph, a["cond_body"].graph, a["n_carry"]
    carries, caps = node.inputs[:nc], node.inputs[nc:]
    tc = [k for k, v in enumerate(carries) if _is_float(v)]          # tangents carried
    tk = [k for k, t in enumerate(ts[nc:]) if t is not None]        # captures with tangents
    g = Graph(f"{body.name}.jvp")
    b_in = [g.add_input(v.shape, v.dtype) for v in body.inputs]
    t_c = [g.add_input(body.inputs[k].shape, body.inputs[k].dtype) for k in tc]
    t_k = [g.add_input(body.inputs[nc + k].shape, body.inputs[nc + k].dtype) for k in tk]
    outs = _copy_into(g, body, b_in)
    t_out = tangents(g, [b_in[k] for k in tc] + [b_in[nc + k] for k in tk], t_c + t_k,
                     [outs[k] for k in tc])
    t_out = [t if t is not None else _zeros(g, outs[k]) for t, k in zip(t_out, tc)]
    consts = [(v, g.constants.pop(v)) for v in list(g.constants)]
    g.constant_ids = {}
    # one signature for both bodies: values, their tangents, captures, their tangents, constants
    g.inputs = b_in[:nc] + t_c + b_in[nc:] + t_k + [v for v, _ in consts]
    g.outputs = outs + t_out
    c = Graph(f"{cond.name}.jvp")
    c_in = [c.add_input(v.shape, v.dtype) for v in cond.inputs]
    c_out = _copy_into(c, cond, c_in)
    unused = lambda vs: [c._new_value(v.shape, v.dtype) for v in vs]   # noqa: E731
    c.inputs = c_in[:nc] + unused(t_c) + c_in[nc:] + unused(t_k) + unused([v for v, _ in consts])
    c.outputs = c_out
    init_t = [ts[k] if ts[k] is not None else _zeros(graph, carries[k]) for k in tc]
    res = graph.add_node("while.default", list(carries) + init_t + list(caps)
                         + [ts[nc + k] for k in tk] + _fed(graph, consts),
                         {"cond_body": Region(c), "body": Region(g), "n_carry": nc + len(tc)},
                         [(v.shape, v.dtype) for v in carries]
                         + [(carries[k].shape, carries[k].dtype) for k in tc], node.site)
    out = [None] * nc
    for j, k in enumerate(tc):
        out[k] = res[nc + j]
    return out


RULES = {"scan.default": scan_rule, "cond.default": cond_rule, "call.default": call_rule,
         "while.default": while_rule}
FORWARD_RULES = {"while.default": while_forward}   # (no reverse mode to linearise)
