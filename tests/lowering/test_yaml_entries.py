"""One parametrised test over every entry of the real derivatives.yaml.

For each entry: the op is registered, its schema round-trips, the op really is
recorded by the function it is tested through, and the gradient of a small
program containing it matches central finite differences (interpreted mode,
tensor API and ``gj.grad``). Adding a yaml entry without a case in ``CASES``
fails the test.
"""
import re
import zlib
from dataclasses import dataclass, field

import numpy as np
import pytest
import yaml

import gradjit as gj
from gradjit.lowering import formulas
from gradjit.tracer.api import apply
from gradjit.tracer.ops_reduce import std_from_var
from gradjit.tracer.registry import OPS, get_op, parse_schema
from gradjit.tracer.trace import trace
from tests.fd import numerical_grad


# -- input generators (deterministic per case) ---------------------------------------------
@dataclass
class Arg:
    shape: tuple
    kind: str = "any"   # any | pos | nonzero | bool | unit | gt1 | offint

    def make(self, rng):
        if self.kind == "bool":
            return rng.random(self.shape) > 0.5
        if self.kind == "pos":
            return rng.uniform(0.5, 2.0, self.shape)
        if self.kind == "unit":
            return rng.uniform(-0.9, 0.9, self.shape)
        if self.kind == "gt1":
            return rng.uniform(1.2, 3.0, self.shape)
        if self.kind == "offint":
            return rng.integers(-3, 3, self.shape) + rng.uniform(0.2, 0.8, self.shape)
        if self.kind == "nonzero":
            return rng.uniform(0.3, 1.5, self.shape) * rng.choice([-1.0, 1.0], self.shape)
        return rng.uniform(-1.0, 1.0, self.shape)

    @property
    def differentiable(self):
        return self.kind != "bool"


def U(*shape):
    return Arg(shape)


def P(*shape):
    return Arg(shape, "pos")


def NZ(*shape):
    return Arg(shape, "nonzero")


def B(*shape):
    return Arg(shape, "bool")


def UN(*shape):
    return Arg(shape, "unit")


def G1(*shape):
    return Arg(shape, "gt1")


def OI(*shape):
    return Arg(shape, "offint")


@dataclass
class Case:
    fn: object                   # tensors -> tensor or tuple of tensors
    args: list
    eps: float = 1e-6
    rtol: float = 1e-5
    atol: float = 1e-7
    extra: dict = field(default_factory=dict)


def C(fn, *args, **kw):
    return Case(fn, list(args), **kw)


def where(c, a, b):
    return gj.where(c, a, b)


def _i(x):
    """Integers from a float input (x * 8 truncated): bit operations' operands."""
    return (x * 8.0).to(np.int64)


# op name -> how to reach it through the user API. Every yaml entry needs one.
CASES = {
    # arithmetic
    "add.Tensor": C(lambda a, b: (a + b, a.add(b, alpha=2.5)), U(2, 3), U(3)),
    "add.Scalar": C(lambda a: a + 1.5, U(2, 3)),
    "sub.Tensor": C(lambda a, b: (a - b, a.sub(b, alpha=0.5)), U(2, 3), U(2, 1)),
    "sub.Scalar": C(lambda a: a - 1.5, U(4)),
    "rsub.Scalar": C(lambda a: 1.5 - a, U(4)),
    "mul.Tensor": C(lambda a, b: a * b, U(2, 3), U(2, 1)),
    "mul.Scalar": C(lambda a: a * 2.5, U(2, 3)),
    "div.Tensor": C(lambda a, b: a / b, U(2, 3), NZ(3)),
    "div.Scalar": C(lambda a: a / 2.5, U(2, 3)),
    "reciprocal.default": C(lambda a: a.reciprocal(), NZ(2, 3)),
    "neg.default": C(lambda a: -a, U(2, 3)),
    "pow.Tensor_Scalar": C(lambda a: (a ** 3, a ** 2, a ** 0.5, a ** -1, a ** 1.5), P(2, 3)),
    "pow.Tensor_Tensor": C(lambda a, b: a ** b, P(2, 3), U(3)),
    "pow.Scalar": C(lambda a: 2.0 ** a, U(2, 3)),
    # unary math
    "exp.default": C(lambda a: a.exp(), U(2, 3)),
    "log.default": C(lambda a: a.log(), P(2, 3)),
    "sin.default": C(lambda a: a.sin(), U(2, 3)),
    "cos.default": C(lambda a: a.cos(), U(2, 3)),
    "tanh.default": C(lambda a: a.tanh(), U(2, 3)),
    "sigmoid.default": C(lambda a: a.sigmoid(), U(2, 3)),
    "sqrt.default": C(lambda a: a.sqrt(), P(2, 3)),
    "abs.default": C(lambda a: abs(a), NZ(2, 3)),
    "relu.default": C(lambda a: a.relu(), NZ(2, 3)),
    "sign.default": C(lambda a: a.sign() * a, NZ(2, 3)),
    "zeros_like.default": C(lambda a: apply("zeros_like.default", [a], {}) + a * a, U(2, 3)),
    "ones_like.default": C(lambda a: apply("ones_like.default", [a], {}) * a.exp(), U(2, 3)),
    # no gradient through detach: the case's finite differences see none either (times 0)
    "detach.default": C(lambda a: a.exp() + apply("detach.default", [a], {}) * 0.0, U(2, 3)),
    "where.self": C(lambda c, a, b: where(c, a, b), B(2, 3), U(2, 3), U(3)),
    "_to_copy.default": C(lambda a: a.to(np.float32), U(2, 3), eps=1e-2, rtol=1e-3, atol=1e-4),
    # a no-grad write into a tensor with history (tracer/tensor_inplace.py): the value is
    # ``value``, the gradient goes to self as torch's; finite differences see that when the
    # written value moves with self (here it is self's own value)
    "_written.default": C(lambda a: apply("_written.default", [a * 2.0, a * 2.0], {}),
                          U(2, 3)),
    # (what gj.while_loop(..., max_steps=3) returns when traced; running: False here)
    "while_steps_check.default": C(lambda a: apply("while_steps_check.default",
                                                   [a * 1.5, a.sum() != a.sum()],
                                                   {"max_steps": 3}), U(2, 3)),
    # comparisons: used as a condition
    "gt.Tensor": C(lambda a, b: where(a > b, a, b * 2.0), U(2, 3), U(3)),
    "gt.Scalar": C(lambda a: where(a > 0.1, a, a * 2.0), NZ(2, 3)),
    "lt.Tensor": C(lambda a, b: where(a < b, a, b * 2.0), U(2, 3), U(3)),
    "lt.Scalar": C(lambda a: where(a < 0.1, a, a * 2.0), NZ(2, 3)),
    "ge.Tensor": C(lambda a, b: where(a >= b, a, b * 2.0), U(2, 3), U(3)),
    "ge.Scalar": C(lambda a: where(a >= 0.1, a, a * 2.0), NZ(2, 3)),
    "le.Tensor": C(lambda a, b: where(a <= b, a, b * 2.0), U(2, 3), U(3)),
    "le.Scalar": C(lambda a: where(a <= 0.1, a, a * 2.0), NZ(2, 3)),
    "eq.Tensor": C(lambda a, b: where(a == b, a, b * 2.0), U(2, 3), U(3)),
    "eq.Scalar": C(lambda a: where(a == 0.1, a, a * 2.0), NZ(2, 3)),
    "ne.Tensor": C(lambda a, b: where(a != b, a, b * 2.0), U(2, 3), U(3)),
    "ne.Scalar": C(lambda a: where(a != 0.1, a, a * 2.0), NZ(2, 3)),
    "bitwise_and.Tensor": C(lambda a, b: where((_i(a) & _i(b)) != 0, a, b * 2.0), U(2, 3), U(3)),
    "bitwise_or.Tensor": C(lambda a, b: where((_i(a) | _i(b)) > 2, a, b * 2.0), U(2, 3), U(3)),
    "bitwise_xor.Tensor": C(lambda a, b: where((_i(a) ^ _i(b)) > 2, a, b * 2.0), U(2, 3), U(3)),
    "bitwise_left_shift.Tensor": C(lambda a, b: where((_i(a) << 2) > 5, a, b * 2.0), U(2, 3),
                                   U(3)),
    "bitwise_right_shift.Tensor": C(lambda a, b: where((_i(a) >> 1) > 1, a, b * 2.0), U(2, 3),
                                    U(3)),
    "bitwise_not.default": C(lambda a, b: where(~_i(a) > -3, a, b * 2.0), U(2, 3), U(3)),
    # reductions
    "sum.default": C(lambda a: a.sum(), U(2, 3)),
    "sum.dim_IntList": C(lambda a: (a.sum(1), a.sum((0, 2), keepdim=True)), U(2, 3, 4)),
    "mean.default": C(lambda a: a.mean(), U(2, 3)),
    "mean.dim": C(lambda a: (a.mean(1), a.mean((0, 2), keepdim=True)), U(2, 3, 4)),
    "amax.default": C(lambda a: (a.amax(1), a.amax(), a.amax(0, keepdim=True)), U(3, 4)),
    # matrix products
    "mm.default": C(lambda a, b: a @ b, U(2, 3), U(3, 4)),
    "bmm.default": C(lambda a, b: a.bmm(b), U(2, 3, 4), U(2, 4, 5)),
    # shape
    "view.default": C(lambda a: a.reshape(6, 2), U(3, 4)),
    "expand.default": C(lambda a: a.expand(2, 4, 3), U(1, 3)),
    "permute.default": C(lambda a: a.permute(2, 0, 1), U(2, 3, 4)),
    "transpose.int": C(lambda a: a.transpose(0, 2), U(2, 3, 4)),
    "t.default": C(lambda a: a.t(), U(2, 3)),
    "squeeze.default": C(lambda a: a.squeeze(), U(2, 1, 3)),
    "squeeze.dim": C(lambda a: a.squeeze(1), U(2, 1, 3)),
    "unsqueeze.default": C(lambda a: a.unsqueeze(1), U(2, 3)),
    # softmax
    "_softmax.default": C(lambda a: a.softmax(1), U(3, 4)),
    "_log_softmax.default": C(lambda a: a.log_softmax(0), U(3, 4)),
    # unary math
    "exp2.default": C(lambda a: a.exp2(), U(2, 3)),
    "expm1.default": C(lambda a: a.expm1(), U(2, 3)),
    "log2.default": C(lambda a: a.log2(), P(2, 3)),
    "log10.default": C(lambda a: a.log10(), P(2, 3)),
    "log1p.default": C(lambda a: a.log1p(), P(2, 3)),
    "rsqrt.default": C(lambda a: a.rsqrt(), P(2, 3)),
    "tan.default": C(lambda a: a.tan(), U(2, 3)),
    "asin.default": C(lambda a: a.asin(), UN(2, 3)),
    "acos.default": C(lambda a: a.acos(), UN(2, 3)),
    "atan.default": C(lambda a: a.atan(), U(2, 3)),
    "sinh.default": C(lambda a: a.sinh(), U(2, 3)),
    "cosh.default": C(lambda a: a.cosh(), U(2, 3)),
    "asinh.default": C(lambda a: a.asinh(), U(2, 3)),
    "acosh.default": C(lambda a: a.acosh(), G1(2, 3)),
    "atanh.default": C(lambda a: a.atanh(), UN(2, 3)),
    "logit.default": C(lambda a: (a * 0.45 + 0.5).logit() + a.logit(eps=0.25), UN(2, 3)),
    "erf.default": C(lambda a: a.erf(), U(2, 3)),
    "erfc.default": C(lambda a: a.erfc(), U(2, 3)),
    "erfinv.default": C(lambda a: a.erfinv(), UN(2, 3)),
    "lgamma.default": C(lambda a: a.lgamma(), P(2, 3)),
    "digamma.default": C(lambda a: a.digamma(), P(2, 3)),
    "polygamma.default": C(lambda a: a.polygamma(2), P(2, 3)),
    "floor.default": C(lambda a: a.floor() * a, OI(2, 3)),
    "ceil.default": C(lambda a: a.ceil() * a, OI(2, 3)),
    "round.default": C(lambda a: a.round() * a, OI(2, 3)),
    "round.decimals": C(lambda a: a.round(1) * a, OI(2, 3)),
    "trunc.default": C(lambda a: a.trunc() * a, OI(2, 3)),
    "frac.default": C(lambda a: a.frac() * a, OI(2, 3)),
    "clamp.default": C(lambda a: a.clamp(-0.3, 0.4), U(2, 3)),
    "clamp_min.default": C(lambda a: a.clamp_min(0.1), U(2, 3)),
    "clamp_max.default": C(lambda a: a.clamp_max(0.1), U(2, 3)),
    "clamp_min.Tensor": C(lambda a, b: a.clamp_min(b), U(2, 3), U(3)),
    "clamp_max.Tensor": C(lambda a, b: a.clamp_max(b), U(2, 3), U(2, 1)),
    "nan_to_num.default": C(lambda a: a.nan_to_num() * a, U(2, 3)),
    # binary math
    "atan2.default": C(lambda a, b: a.atan2(b), U(2, 3), NZ(3)),
    "hypot.default": C(lambda a, b: a.hypot(b), U(2, 3), NZ(3)),
    "maximum.default": C(lambda a, b: a.maximum(b), U(2, 3), U(3)),
    "minimum.default": C(lambda a, b: a.minimum(b), U(2, 3), U(3)),
    "fmax.default": C(lambda a, b: a.fmax(b), U(2, 3), U(3)),
    "fmin.default": C(lambda a, b: a.fmin(b), U(2, 3), U(3)),
    "fmod.Tensor": C(lambda a, b: a.fmod(b), U(2, 3), P(3)),
    "remainder.Tensor": C(lambda a, b: a % b, U(2, 3), P(3)),
    "copysign.Tensor": C(lambda a, b: a.copysign(b), NZ(2, 3), NZ(3)),
    "logaddexp.default": C(lambda a, b: a.logaddexp(b), U(2, 3), U(3)),
    "logaddexp2.default": C(lambda a, b: a.logaddexp2(b), U(2, 3), U(3)),
    "xlogy.Tensor": C(lambda a, b: a.xlogy(b), U(2, 3), P(3)),
    "lerp.Tensor": C(lambda a, b, w: a.lerp(b, w), U(2, 3), U(3), UN(2, 1)),
    "_binary_cross_entropy.default": C(lambda a, t: gj.nn.functional.binary_cross_entropy(
        a.sigmoid(), t, reduction="none"), U(2, 3), U(2, 3)),
    # more reductions
    "amin.default": C(lambda a: (a.amin(1), a.amin(), a.amin(0, keepdim=True)), U(3, 4)),
    "prod.default": C(lambda a: a.prod(), NZ(2, 3)),
    "prod.dim_int": C(lambda a: (a.prod(1), a.prod(0, keepdim=True)), NZ(2, 3)),
    "logsumexp.default": C(lambda a: (a.logsumexp(1), a.logsumexp()), U(2, 3)),
    "_std_from_var.default": C(lambda a: (std_from_var(a), std_from_var(((a - a.mean()) ** 2)
                                                                        .mean())), P(2, 3)),
    "linalg_vector_norm.default": C(lambda a: (a.norm(), a.norm(1, 1), a.norm(3, 0)), NZ(2, 3)),
    "cumsum.default": C(lambda a: (a.cumsum(1), a.cumsum(0)), U(2, 3)),
    "cumprod.default": C(lambda a: (a.cumprod(1), a.cumprod(0)), NZ(2, 3)),
    "logcumsumexp.default": C(lambda a: (a.logcumsumexp(1), a.logcumsumexp(0)), U(2, 3)),
    "cummax.default": C(lambda a: (a.cummax(1)[0], a.cummax(0)[0]), U(3, 4)),
    "cummin.default": C(lambda a: (a.cummin(1)[0], a.cummin(0)[0]), U(3, 4)),
    "elu.default": C(lambda a: (gj.nn.functional.elu(a, 1.3), gj.nn.functional.selu(a),
                                gj.nn.functional.celu(a, 0.6)), U(3, 4)),
    "elu_backward.default": C(lambda g, a: (
        apply("elu_backward.default", [g, a], {"alpha": 1.3, "scale": 1.1, "input_scale": 0.7,
                                               "is_result": False}),
        apply("elu_backward.default", [g, a], {"alpha": 0.5, "scale": 1.0, "input_scale": 2.0,
                                               "is_result": True})), U(3, 4), U(3, 4)),
    "median.default": C(lambda a: a.median(), U(3, 4)),
    "sort.default": C(lambda a: (a.sort(dim=1)[0], a.sort(dim=0, descending=True)[0]), U(3, 4)),
    # indexing (tracer/ops_index.py)
    "slice.Tensor": C(lambda a: (a[1:, ::-2], a[..., 1]), U(3, 4)),
    "slice_backward.default": C(lambda a: gj.nn.functional.pad(a, (1, 2)), U(2, 3)),
    "cat.default": C(lambda a, b, c: gj.cat([a, b, c], 1), U(2, 3), U(2, 2), U(2, 1)),
    "index_select.default": C(lambda a: a[np.array([2, 0, 2, -1])], U(3, 2)),
    "index_add.default": C(lambda a, b: apply("index_add.default", [a, np.array([1, 1, 0]), b],
                                               {"dim": 0, "alpha": 2.5}), U(2, 3), U(3, 3)),
    "gather.default": C(lambda a: a.gather(1, np.array([[0, 0], [2, 1]])), U(2, 3)),
    "scatter_add.default": C(lambda a, b: apply("scatter_add.default",
                                                [a, np.array([[0, 0], [2, 1]]), b], {"dim": 1}),
                             U(2, 3), U(2, 2)),
    "max.dim": C(lambda a: (a.max(dim=1)[0], a.max(dim=0, keepdim=True)[0]), U(3, 4)),
    "min.dim": C(lambda a: (a.min(dim=1)[0], a.min(dim=-1, keepdim=True)[0]), U(3, 4)),
    # linear algebra (well-conditioned by construction: + 3 I, A A' + 3 I, distinct spectra)
    "linalg_inv.default": C(lambda a: gj.linalg.inv(a + np.eye(3) * 3), U(3, 3)),
    "linalg_det.default": C(lambda a: gj.linalg.det(a + np.eye(3) * 3), U(2, 3, 3)),
    "linalg_slogdet.default": C(lambda a: gj.linalg.slogdet(a - np.eye(3) * 3)[1], U(3, 3)),
    "linalg_solve.default": C(lambda a, b: gj.linalg.solve(a + np.eye(3) * 3, b), U(3, 3), U(3, 2)),
    "linalg_cholesky.default": C(lambda a: gj.linalg.cholesky(a @ a.mT + np.eye(3) * 3), U(3, 3)),
    "linalg_solve_triangular.default": C(lambda a, b: gj.linalg.solve_triangular(
        a + np.eye(3) * 3, b, upper=True), U(3, 3), U(3, 2)),
    "linalg_qr.default": C(lambda a: gj.linalg.qr(a + np.eye(3) * 3), U(3, 3)),
    "linalg_qr.complete": C(lambda a: gj.linalg.qr(a, mode="complete"), U(4, 2)),
    "linalg_eigh.default": C(lambda a: gj.linalg.eigh(a + a.mT + np.diag([0.0, 3.0, 6.0]))[0],
                             U(3, 3)),
    "linalg_svd.default": C(lambda a: gj.linalg.svdvals(a + np.diag([1.0, 3.0, 5.0])), U(3, 3)),
    "linalg_pinv.default": C(lambda a: gj.linalg.pinv(a + np.eye(3, 2) * 3), U(3, 2)),
}


# -- the entries of the real file ---------------------------------------------------------------
def _raw_entries():
    with open(formulas.default_path()) as f:
        raw = yaml.safe_load(f)
    return [(parse_schema(item["name"]).name, item) for item in raw]


RAW = _raw_entries()
ENTRIES = formulas.load()


def _outputs(res):
    return list(res) if isinstance(res, tuple) else [res]


def _weights(case, arrays):
    """Random cotangent weights, one per output (so softmax-like ops are really tested)."""
    outs = _outputs(case.fn(*[gj.tensor(a) for a in arrays]))
    rng = np.random.default_rng(1)
    return [rng.standard_normal(tuple(o.shape)) for o in outs]


def _forward_np(case, dtypes, weights):
    def f(*arrays):
        ts = [gj.tensor(np.asarray(a).astype(dt)) for a, dt in zip(arrays, dtypes)]
        outs = _outputs(case.fn(*ts))
        return sum(float(np.sum(np.asarray(o.data, np.float64) * w)) for o, w in zip(outs, weights))
    return f


@pytest.mark.parametrize("op_name, item", RAW, ids=[n for n, _ in RAW])
def test_yaml_entry(op_name, item, interpreted):
    # registered, and the schema round-trips
    op = get_op(op_name)
    assert " ".join(item["name"].split()) == " ".join(op.schema.text.split())
    assert parse_schema(item["name"]) == op.schema
    assert parse_schema(op.schema.text) == op.schema
    entry = ENTRIES[op_name]
    assert entry.schema is op.schema

    if op_name not in CASES:
        pytest.fail(f"derivatives.yaml entry {op_name!r} has no case in "
                    f"tests/lowering/test_yaml_entries.py CASES: add one that reaches the op "
                    f"through the user API")
    case = CASES[op_name]
    rng = np.random.default_rng(zlib.crc32(op_name.encode()))
    arrays = [a.make(rng) for a in case.args]
    dtypes = [a.dtype for a in arrays]
    diff = [i for i, a in enumerate(case.args) if a.differentiable]

    # the op is really in the graph the case builds
    g, tracers, _ = trace(arrays)
    g.outputs = [o.value for o in _outputs(case.fn(*tracers))]
    assert op_name in {n.op for n in g.nodes}, f"case for {op_name} does not record it:\n{g}"

    if all(entry.schema.tensor_args[i] in entry.not_implemented for i in diff):
        # not differentiable (linalg_qr.complete): both ways in raise the entry's reason
        reason = entry.not_implemented[entry.schema.tensor_args[diff[0]]]
        ts = [gj.tensor(a, requires_grad=True) for a in arrays]
        with pytest.raises(gj.GradjitError, match="not implemented .*" + re.escape(reason[:30])):
            sum(o.sum() for o in _outputs(case.fn(*ts))).backward()
        with pytest.raises(gj.GradjitError, match="not implemented .*" + re.escape(reason[:30])):
            gj.grad(lambda *xs: sum(o.sum() for o in _outputs(case.fn(*xs))))(*arrays)
        return

    weights = _weights(case, arrays)
    f = _forward_np(case, dtypes, weights)
    expected = [numerical_grad(f, arrays, i, eps=case.eps) for i in diff]

    # tensor API
    ts = [gj.tensor(a, requires_grad=i in diff) for i, a in enumerate(arrays)]
    outs = _outputs(case.fn(*ts))
    loss = sum((o * w).sum() for o, w in zip(outs, weights))
    got = gj.autograd.grad([loss], [ts[i] for i in diff])
    for i, e, gt in zip(diff, expected, got):
        np.testing.assert_allclose(np.asarray(gt), e, rtol=case.rtol, atol=case.atol,
                                   err_msg=f"{op_name}: tensor-mode gradient of input {i}")

    # function transform
    def loss_fn(*xs):
        return sum((o * w).sum() for o, w in zip(_outputs(case.fn(*xs)), weights))

    got = gj.grad(loss_fn, argnums=tuple(diff))(*arrays)
    for i, e, gt in zip(diff, expected, got):
        np.testing.assert_allclose(np.asarray(gt), e, rtol=case.rtol, atol=case.atol,
                                   err_msg=f"{op_name}: gj.grad gradient of input {i}")

    if op_name.startswith("bitwise_"):
        return   # operands of integers only: no float input to carry a gradient
    if entry.output_differentiability and not any(entry.output_differentiability):
        # no gradient flows through the op itself
        x = gj.tensor(arrays[diff[0]], requires_grad=True)
        y = apply(op_name, [x] + [gj.tensor(a) for a in arrays[1:]],
                  {a.name: 0.1 for a in op.schema.attr_args if a.type == "Scalar"})
        if y.requires_grad:
            (gx,) = gj.autograd.grad([y.sum()], [x], allow_unused=True)
            assert gx is None or not np.any(np.asarray(gx))
    else:
        assert entry.formulas, f"{op_name}: differentiable entry without formulas"


def test_no_stale_cases():
    names = {n for n, _ in RAW}
    assert set(CASES) <= names, sorted(set(CASES) - names)
    assert all(n in OPS for n in CASES)
