"""gj.nn.functional: values vs NumPy references (and torch when importable), float64
finite-difference gradients in tensor mode and under gj.grad (interpreted), and one
compiled MLP + cross_entropy against the interpreter."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import special

import gradjit as gj
from tests.marks import COMPILED_SLOW
from tests.fd import numerical_grad

F = gj.nn.functional
R = np.random.default_rng(42)


def _n(*s):
    return R.standard_normal(s)


def _away(*s):   # |x| >= 0.3 and away from the +-0.5, 1, 3 kinks used below
    return R.choice([-1.0, 1.0], s) * R.uniform(0.3, 2.6, s) + 0.05


def _prob(*s):
    return R.uniform(0.1, 0.9, s)


def _pos(*s):
    return R.uniform(0.5, 2.0, s)


def _softmax(x, d):
    e = np.exp(x - x.max(d, keepdims=True))
    return e / e.sum(d, keepdims=True)


def _logsm(x, d):
    return np.log(_softmax(x, d))


def _sp(z):
    return np.logaddexp(0.0, z)


def _huber(d, delta, scaled):
    a = np.abs(d)
    if scaled:
        return np.where(a < delta, 0.5 * d * d, delta * (a - 0.5 * delta))
    return np.where(a < delta, 0.5 * d * d / delta, a - 0.5 * delta)


def _ce_idx(x, t, w=None, ignore=-100, red="mean", ls=0.0):
    c = x.shape[1]
    lp = _logsm(x, 1)
    w = np.ones(c) if w is None else w
    valid = t != ignore
    tc = np.where(valid, t, 0)
    picked = np.take_along_axis(lp, tc[:, None], 1)[:, 0]
    wt = w[tc] * valid
    nll = -picked * wt
    smooth = -(lp * w).sum(1) * valid
    if red == "none":
        return (1 - ls) * nll + ls / c * smooth
    if red == "sum":
        return (1 - ls) * nll.sum() + ls / c * smooth.sum()
    return (1 - ls) * nll.sum() / wt.sum() + ls / c * smooth.sum() / wt.sum()


def _ln(x, w, b, eps=1e-5):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) / np.sqrt(v + eps) * w + b


SA, SB = 0.7, -0.35
T_IDX = np.array([0, 2, 1, 2, 3])
T_IGN = np.array([0, -100, 1, 3, 3])
W_CLS = np.array([0.5, 1.0, 2.0, 1.5])
PADS = np.array([[0, 2, 1], [2, 2, 4]])
DROP_MASK = (np.random.default_rng(7).random((3, 4)) >= 0.3) / 0.7
SELU_A, SELU_S = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946

# name, gj fn, numpy reference, args (float arrays are differentiated unless listed in nondiff)
CASES = [
    ("relu", F.relu, lambda x: np.maximum(x, 0), [_away(3, 4)]),
    ("relu6", F.relu6, lambda x: np.clip(x, 0, 6), [np.array([-1.0, 0.5, 5.0, 7.0, 3.2])]),
    ("leaky_relu", lambda x: F.leaky_relu(x, 0.2), lambda x: np.where(x > 0, x, 0.2 * x), [_away(3, 4)]),
    ("elu", lambda x: F.elu(x, 1.3), lambda x: np.where(x > 0, x, 1.3 * np.expm1(x)), [_away(3, 4)]),
    ("celu", lambda x: F.celu(x, 0.8), lambda x: np.where(x > 0, x, 0.8 * np.expm1(x / 0.8)), [_away(2, 3)]),
    ("selu", F.selu, lambda x: SELU_S * np.where(x > 0, x, SELU_A * np.expm1(x)), [_away(5)]),
    ("gelu", F.gelu, lambda x: 0.5 * x * (1 + special.erf(x / math.sqrt(2))), [_n(3, 4)]),
    ("gelu_tanh", lambda x: F.gelu(x, approximate="tanh"),
     lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))), [_n(3, 4)]),
    ("silu", F.silu, lambda x: x / (1 + np.exp(-x)), [_n(3, 4)]),
    ("mish", F.mish, lambda x: x * np.tanh(_sp(x)), [_n(3, 4)]),
    ("softplus", lambda x: F.softplus(x, beta=2.0, threshold=3.0),
     lambda x: np.where(2 * x > 3, x, _sp(2 * x) / 2), [np.array([-30.0, -1.0, 0.0, 0.7, 1.4, 2.0, 40.0])]),
    ("softplus_default", F.softplus, _sp, [_n(2, 3) * 5]),
    ("softsign", F.softsign, lambda x: x / (1 + np.abs(x)), [_n(3, 4)]),
    ("softshrink", F.softshrink, lambda x: np.where(x > .5, x - .5, np.where(x < -.5, x + .5, 0)), [_away(3, 4)]),
    ("hardshrink", lambda x: F.hardshrink(x, 0.4), lambda x: np.where(np.abs(x) > .4, x, 0), [_away(3, 4)]),
    ("hardtanh", lambda x: F.hardtanh(x, -0.5, 1.0), lambda x: np.clip(x, -0.5, 1.0), [_away(3, 4)]),
    ("hardsigmoid", F.hardsigmoid, lambda x: np.clip(x / 6 + 0.5, 0, 1), [_away(3, 4) * 2]),
    ("hardswish", F.hardswish, lambda x: x * np.clip(x + 3, 0, 6) / 6, [_away(3, 4) * 2]),
    ("threshold", lambda x: F.threshold(x, 0.25, -2.0), lambda x: np.where(x > .25, x, -2.0), [_away(3, 4)]),
    ("glu", lambda x: F.glu(x, 0), lambda x: x[:2] / (1 + np.exp(-x[2:])), [_n(4, 3)]),
    ("glu_last", F.glu, lambda x: x[..., :3] / (1 + np.exp(-x[..., 3:])), [_n(2, 6)]),
    ("prelu", F.prelu, lambda x, w: np.where(x > 0, x, w[:, None] * x), [_away(2, 3, 4), _pos(3)]),
    ("sigmoid", F.sigmoid, special.expit, [_n(3, 4)]),
    ("tanh", F.tanh, np.tanh, [_n(3, 4)]),
    ("softmax", lambda x: F.softmax(x, -1), lambda x: _softmax(x, -1), [_n(3, 4)]),
    ("log_softmax", lambda x: F.log_softmax(x, dim=0), lambda x: _logsm(x, 0), [_n(3, 4)]),
    ("mse_loss", F.mse_loss, lambda x, y: ((x - y) ** 2).mean(), [_n(3, 4), _n(3, 4)]),
    ("mse_loss_none", lambda x, y: F.mse_loss(x, y, reduction="none"), lambda x, y: (x - y) ** 2, [_n(3), _n(3)]),
    ("l1_loss", lambda x, y: F.l1_loss(x, y, reduction="sum"), lambda x, y: np.abs(x - y).sum(),
     [_away(3, 4), np.zeros((3, 4))]),
    ("smooth_l1_loss", lambda x, y: F.smooth_l1_loss(x, y, beta=0.8), lambda x, y: _huber(x - y, 0.8, False).mean(),
     [_away(3, 4), np.zeros((3, 4))]),
    ("huber_loss", lambda x, y: F.huber_loss(x, y, delta=0.8, reduction="none"),
     lambda x, y: _huber(x - y, 0.8, True), [_away(3, 4), np.zeros((3, 4))]),
    # torch 2.13's elementwise weight: mse / l1 'mean' divide by sum(w), huber's by the count
    ("mse_loss_w", lambda x, y, w: F.mse_loss(x, y, weight=w),
     lambda x, y, w: (w * (x - y) ** 2).sum() / w.sum(), [_n(3, 4), _n(3, 4), _pos(3, 4)]),
    ("l1_loss_w", lambda x, y, w: F.l1_loss(x, y, weight=w),
     lambda x, y, w: (w * np.abs(x - y)).sum() / w.sum(), [_away(3, 4), np.zeros((3, 4)), _pos(3, 4)]),
    ("huber_loss_w", lambda x, y, w: F.huber_loss(x, y, delta=0.8, weight=w),
     lambda x, y, w: (w * _huber(x - y, 0.8, True)).mean(), [_away(3, 4), np.zeros((3, 4)), _pos(3, 4)]),
    ("mse_loss_w_sum", lambda x, y, w: F.mse_loss(x, y, reduction="sum", weight=w),
     lambda x, y, w: (w * (x - y) ** 2).sum(), [_n(3), _n(3), _pos(3)]),
    ("binary_cross_entropy", lambda x, y, w: F.binary_cross_entropy(x, y, weight=w),
     lambda x, y, w: (-(y * np.log(x) + (1 - y) * np.log(1 - x)) * w).mean(), [_prob(3, 4), _prob(3, 4), _pos(4)]),
    ("bce_with_logits", lambda x, y, p: F.binary_cross_entropy_with_logits(x, y, pos_weight=p, reduction="sum"),
     lambda x, y, p: -(p * y * np.log(special.expit(x)) + (1 - y) * np.log(1 - special.expit(x))).sum(),
     [_n(3, 4) * 3, _prob(3, 4), _pos(4)]),
    ("bce_with_logits_plain", F.binary_cross_entropy_with_logits,
     lambda x, y: (_sp(-x) + (1 - y) * x).mean(), [np.array([-800.0, -2.0, 0.0, 3.0, 800.0]), _prob(5)]),
    ("cross_entropy", lambda x, t: F.cross_entropy(x, t), lambda x, t: _ce_idx(x, t), [_n(5, 4), T_IDX]),
    ("cross_entropy_full", lambda x, t, w: F.cross_entropy(x, t, weight=w, ignore_index=-100, label_smoothing=0.2),
     lambda x, t, w: _ce_idx(x, t, w, ls=0.2), [_n(5, 4), T_IGN, W_CLS]),
    ("cross_entropy_none_ign3", lambda x, t: F.cross_entropy(x, t, ignore_index=3, reduction="none",
                                                             label_smoothing=0.1),
     lambda x, t: _ce_idx(x, t, ignore=3, red="none", ls=0.1), [_n(5, 4), T_IGN % 4]),
    ("cross_entropy_sum_w", lambda x, t: F.cross_entropy(x, t, weight=W_CLS, reduction="sum"),
     lambda x, t: _ce_idx(x, t, W_CLS, red="sum"), [_n(5, 4), T_IDX]),
    ("cross_entropy_probs", lambda x, p: F.cross_entropy(x, p, label_smoothing=0.1),
     lambda x, p: -(_logsm(x, 1) * (p * 0.9 + 0.1 / 4)).sum() / 5, [_n(5, 4), _softmax(_n(5, 4), 1)]),
    ("cross_entropy_nd", lambda x, t: F.cross_entropy(x, t),
     lambda x, t: -np.take_along_axis(_logsm(x, 1), t[:, None], 1).mean(), [_n(2, 3, 4), np.array([[0, 1, 2, 2], [1, 1, 0, 2]])]),
    ("nll_loss", lambda x, t: F.nll_loss(x, t, weight=W_CLS), lambda x, t:
     -(np.take_along_axis(x, t[:, None], 1)[:, 0] * W_CLS[t]).sum() / W_CLS[t].sum(), [_n(5, 4), T_IDX]),
    ("kl_div", lambda x, t: F.kl_div(x, t, reduction="batchmean"), lambda x, t: (t * (np.log(t) - x)).sum() / 3,
     [_n(3, 4), _pos(3, 4)]),
    ("kl_div_log", lambda x, t: F.kl_div(x, t, reduction="sum", log_target=True),
     lambda x, t: (np.exp(t) * (t - x)).sum(), [_n(3, 4), _n(3, 4)]),
    ("soft_margin_loss", F.soft_margin_loss, lambda x, y: _sp(-x * y).mean(), [_n(3, 4), np.sign(_n(3, 4))]),
    ("normalize", F.normalize, lambda x: x / np.linalg.norm(x, axis=1, keepdims=True), [_n(3, 4)]),
    ("normalize_p1", lambda x: F.normalize(x, p=1.0, dim=0), lambda x: x / np.abs(x).sum(0), [_away(3, 4)]),
    ("cosine_similarity", F.cosine_similarity, lambda a, b: (a * b).sum(1) / np.linalg.norm(a, axis=1)
     / np.linalg.norm(b, axis=1), [_n(3, 4), _n(3, 4)]),
    ("pairwise_distance", F.pairwise_distance, lambda a, b: np.linalg.norm(a - b + 1e-6, axis=-1),
     [_n(3, 4), _n(3, 4)]),
    ("linear", F.linear, lambda x, w, b: x @ w.T + b, [_n(2, 3, 4), _n(5, 4), _n(5)]),
    ("bilinear", F.bilinear, lambda a, b, w, c: np.einsum("ni,oij,nj->no", a, w, b) + c,
     [_n(3, 2), _n(3, 4), _n(5, 2, 4), _n(5)]),
    ("layer_norm", lambda x, w, b: F.layer_norm(x, (4,), w, b), _ln, [_n(2, 3, 4), _n(4), _n(4)]),
    ("layer_norm_2d", lambda x: F.layer_norm(x, (3, 4)),
     lambda x: (x - x.mean((1, 2), keepdims=True)) / np.sqrt(x.var((1, 2), keepdims=True) + 1e-5), [_n(2, 3, 4)]),
    ("dropout", lambda x: F.dropout(x, 0.3, generator=7), lambda x: x * DROP_MASK, [_n(3, 4)]),
    ("embedding", lambda i, w: F.embedding(i, w, padding_idx=2), lambda i, w: w[i], [PADS, _n(5, 3)]),
]
IDS = [c[0] for c in CASES]


def _floats(args):
    return [i for i, a in enumerate(args) if np.asarray(a).dtype.kind == "f"]


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_values_match_numpy(case, interpreted):
    _, fn, ref, args = case
    out = fn(*map(gj.tensor, args))
    np.testing.assert_allclose(out.data, ref(*args), rtol=1e-10, atol=1e-12)
    f32 = [a.astype(np.float32) if a.dtype.kind == "f" else a for a in args]
    out32 = fn(*map(gj.tensor, f32))
    assert out32.dtype == np.float32
    np.testing.assert_allclose(out32.data, ref(*args), rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_gradients_fd_tensor_and_grad(case, interpreted):
    name, fn, ref, args = case
    diff = _floats(args)
    out = ref(*args)
    w = np.random.default_rng(1).standard_normal(np.shape(out))
    ts = [gj.tensor(a, requires_grad=i in diff) for i, a in enumerate(args)]
    (fn(*ts) * w).sum().backward()
    jit_grads = gj.grad(lambda *xs: (fn(*xs) * w).sum(), argnums=tuple(diff))(*args)
    for k, i in enumerate(diff):
        expect = numerical_grad(lambda *a: ref(*[v.astype(o.dtype) for v, o in zip(a, args)]) * w, args, i)
        if name == "embedding":   # padding row 2 gets no gradient; the others count their uses
            expect[2] = 0.0
        np.testing.assert_allclose(ts[i].grad.data, expect, rtol=1e-5, atol=1e-6, err_msg=name)
        np.testing.assert_allclose(jit_grads[k], expect, rtol=1e-5, atol=1e-6, err_msg=name)


def test_second_order_through_composites(interpreted):
    x = _n(3, 4)
    for f in (F.gelu, F.mish, F.softplus, F.silu, lambda v: F.layer_norm(v, (4,)),
              lambda v: F.cross_entropy(v, np.array([0, 3, 1]), label_smoothing=0.1)):
        first = gj.grad(lambda u: f(u).sum())
        fd = numerical_grad(lambda v: first(v).sum(), [x], 0, eps=1e-5)
        xt = gj.tensor(x, requires_grad=True)
        (gx,) = gj.autograd.grad([f(xt).sum()], [xt], create_graph=True)
        gx.sum().backward()
        np.testing.assert_allclose(xt.grad.data, fd, rtol=1e-4, atol=1e-6)


_ELUS = [("elu", lambda v: F.elu(v), 1.0, 1.0, 1.0), ("elu2", lambda v: F.elu(v, 2.0), 2.0, 1.0, 1.0),
         ("celu", lambda v: F.celu(v, 0.7), 0.7, 1.0, 1 / 0.7),
         ("selu", F.selu, SELU_A, SELU_S, 1.0)]


@pytest.mark.parametrize("name, f, alpha, scale, k", _ELUS, ids=[e[0] for e in _ELUS])
@COMPILED_SLOW
def test_elu_family_derivatives_at_zero_and_elsewhere_as_torch(name, f, alpha, scale, k, executor):
    """torch's elu_backward: the first derivative at exactly 0 is the negative side's
    (alpha scale k); every higher derivative there is 0 (elu_double_backward masks < 0).
    Elsewhere: finite differences of each order (gradgradcheck), in both ways in."""
    xs = np.array([0.0, -0.5, 0.5, -2.0])
    neg = alpha * scale * k * np.exp(k * xs)
    x = gj.tensor(xs, requires_grad=True)
    (g,) = gj.autograd.grad(f(x).sum(), x, create_graph=True)
    (h,) = gj.autograd.grad(g.sum(), x, create_graph=True)
    (h3,) = gj.autograd.grad(h.sum(), x)
    np.testing.assert_allclose(g.data, np.where(xs > 0, scale, neg), rtol=1e-14)
    np.testing.assert_allclose(h.data, np.where(xs < 0, k * neg, 0.0), rtol=1e-14)
    np.testing.assert_allclose(h3.data, np.where(xs < 0, k * k * neg, 0.0), rtol=1e-13)
    first = gj.grad(lambda u: f(u).sum())
    np.testing.assert_allclose(first(xs), g.data, rtol=1e-14)
    np.testing.assert_allclose(gj.grad(lambda u: first(u).sum())(xs), h.data, rtol=1e-14)
    away = gj.tensor(np.array([[-1.3, 0.4, -0.2], [2.0, -0.7, 0.9]]), requires_grad=True)
    assert gj.autograd.gradcheck(f, (away,))
    assert gj.autograd.gradgradcheck(f, (away,))


def test_elu_family_at_zero_matches_torch():
    torch = pytest.importorskip("torch")
    TF = torch.nn.functional
    for ours, theirs in ((F.elu, TF.elu), (lambda v: F.celu(v, 0.7), lambda v: TF.celu(v, 0.7)),
                         (F.selu, TF.selu), (lambda v: F.elu(v, 2.0), lambda v: TF.elu(v, 2.0))):
        got, want = [], []
        for lib, fn, out in ((gj, ours, got), (torch, theirs, want)):
            x = lib.tensor([0.0, -0.5, 0.5, -3.0], dtype=lib.float64, requires_grad=True)
            (g,) = lib.autograd.grad(fn(x).sum(), x, create_graph=True)
            (h,) = lib.autograd.grad(g.sum(), x)
            out += [np.asarray(t.detach().numpy() if lib is torch else t.data) for t in (g, h)]
        for a, b in zip(got, want):   # (torch's celu rounds its alpha through float32)
            np.testing.assert_allclose(a, b, rtol=1e-7)


def test_stable_at_extremes_and_kinks(interpreted):
    x = gj.tensor(np.array([-1000.0, 0.0, 1000.0]), requires_grad=True)
    y = F.binary_cross_entropy_with_logits(x, np.array([1.0, 0.5, 0.0]), reduction="none")
    np.testing.assert_allclose(y.data, [1000.0, math.log(2), 1000.0])
    y.sum().backward()
    np.testing.assert_allclose(x.grad.data, [-1.0, 0.0, 1.0])
    z = gj.tensor(np.array([0.0, 6.0, 3.0, -3.0]), requires_grad=True)
    (F.relu6(z) + F.hardsigmoid(z)).sum().backward()   # no gradient at the bounds, as torch
    np.testing.assert_allclose(z.grad.data, [1 / 6, 0.0, 1.0, 0.0])   # relu6 inside at 3
    assert np.isfinite(F.softplus(gj.tensor(np.array([1e4, -1e4]))).data).all()


def test_dropout_seeded_eval_and_generator(interpreted):
    x = gj.tensor(np.ones((4, 5)), requires_grad=True)
    a, b = F.dropout(x, 0.5, generator=3), F.dropout(x, 0.5, generator=np.random.default_rng(3))
    np.testing.assert_array_equal(a.data, b.data)
    assert set(np.unique(a.data)) <= {0.0, 2.0}
    a.sum().backward()
    np.testing.assert_array_equal(x.grad.data, a.data)   # same mask in backward
    assert F.dropout(x, 0.5, training=False) is x
    np.testing.assert_array_equal(F.dropout(x, 0.5, generator=gj.Generator(3)).data, a.data)


def test_embedding_padding_row_keeps_value_no_grad(interpreted):
    w = _n(4, 2)
    idx = np.array([1, 0, 1, 3])
    g = gj.grad(lambda w: (F.embedding(idx, w, padding_idx=0) ** 2).sum())(w)
    np.testing.assert_allclose(g[0], 0.0)
    np.testing.assert_allclose(g[1], 4 * w[1])
    np.testing.assert_array_equal(F.embedding(gj.tensor(idx), gj.tensor(w), padding_idx=0).data, w[idx])


def test_errors():
    with pytest.raises(ValueError, match="reduction"):
        F.mse_loss(gj.tensor(np.ones(2)), np.ones(2), reduction="avg")
    with pytest.raises(ValueError, match="even"):
        F.glu(gj.tensor(np.ones(3)))
    with pytest.raises(ValueError, match="same size"):
        F.mse_loss(gj.tensor(np.ones(2)), np.ones(2), weight=np.ones(1))
    with pytest.raises(ValueError, match="approximate"):
        F.gelu(gj.tensor(np.ones(3)), approximate="fast")
    with pytest.raises(ValueError, match="dropout probability"):
        F.dropout(gj.tensor(np.ones(3)), 1.5)


def _mlp(w1, b1, w2, b2, x, t):
    h = F.gelu(F.linear(x, w1, b1))
    h = F.layer_norm(h, (h.shape[-1],))
    return F.cross_entropy(F.linear(h, w2, b2), t, label_smoothing=0.1)


@pytest.mark.slow
def test_compiled_mlp_cross_entropy_matches_interpreter(monkeypatch):
    rng = np.random.default_rng(0)
    args = [rng.standard_normal((6, 4)), rng.standard_normal(6), rng.standard_normal((3, 6)),
            rng.standard_normal(3), rng.standard_normal((5, 4)), np.array([0, 2, 1, 1, 2])]
    vg = gj.value_and_grad(_mlp, argnums=(0, 1, 2, 3))
    monkeypatch.delenv("GRADJIT_EXECUTOR", raising=False)
    v_c, g_c = vg(*args)
    ts = [gj.tensor(a, requires_grad=a.dtype.kind == "f" and i < 4) for i, a in enumerate(args)]
    _mlp(*ts).backward()
    monkeypatch.setenv("GRADJIT_EXECUTOR", "numpy")
    v_i, g_i = gj.value_and_grad(_mlp, argnums=(0, 1, 2, 3))(*args)
    np.testing.assert_allclose(v_c, v_i, rtol=1e-12)
    for a, b, t in zip(g_c, g_i, ts):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(t.grad.data, b, rtol=1e-9, atol=1e-12)


# -- torch (optional; only where it is installed) ---------------------------------------------------
# weights and soft-margin targets: torch refuses requires_grad there (we differentiate them)
TORCH_NODIFF = {"binary_cross_entropy": {2}, "bce_with_logits": {2}, "cross_entropy_full": {2},
                "soft_margin_loss": {1}}


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_against_torch(case, interpreted):
    torch = pytest.importorskip("torch")
    name, fn, _, args = case
    tf = torch.nn.functional
    diff = [i for i in _floats(args) if i not in TORCH_NODIFF.get(name, ())]
    ts = [gj.tensor(a, requires_grad=i in diff) for i, a in enumerate(args)]
    tt = [torch.tensor(a, requires_grad=i in diff) for i, a in enumerate(args)]
    fn_t = _torch_fn(name, tf, torch)
    if fn_t is None:
        pytest.skip(f"{name}: no direct torch spelling")
    out, out_t = fn(*ts), fn_t(*tt)
    np.testing.assert_allclose(out.data, out_t.detach().numpy(), rtol=1e-7, atol=1e-9)
    out.sum().backward()
    out_t.sum().backward()
    for i in diff:
        np.testing.assert_allclose(ts[i].grad.data, tt[i].grad.numpy(), rtol=1e-6, atol=1e-8)


def _torch_fn(name, tf, torch):
    w = torch.tensor(W_CLS)
    table = {
        "relu": tf.relu, "relu6": tf.relu6, "leaky_relu": lambda x: tf.leaky_relu(x, 0.2),
        "elu": lambda x: tf.elu(x, 1.3), "celu": lambda x: tf.celu(x, 0.8), "selu": tf.selu,
        "gelu": tf.gelu, "gelu_tanh": lambda x: tf.gelu(x, approximate="tanh"), "silu": tf.silu,
        "mish": tf.mish, "softplus": lambda x: tf.softplus(x, 2.0, 3.0), "softplus_default": tf.softplus,
        "softsign": tf.softsign, "softshrink": tf.softshrink, "hardshrink": lambda x: tf.hardshrink(x, 0.4),
        "hardtanh": lambda x: tf.hardtanh(x, -0.5, 1.0), "hardsigmoid": tf.hardsigmoid,
        "hardswish": tf.hardswish, "threshold": lambda x: tf.threshold(x, 0.25, -2.0),
        "glu": lambda x: tf.glu(x, 0), "glu_last": tf.glu, "prelu": tf.prelu, "sigmoid": torch.sigmoid,
        "tanh": torch.tanh, "softmax": lambda x: tf.softmax(x, -1), "log_softmax": lambda x: tf.log_softmax(x, 0),
        "mse_loss": tf.mse_loss, "mse_loss_none": lambda x, y: tf.mse_loss(x, y, reduction="none"),
        "l1_loss": lambda x, y: tf.l1_loss(x, y, reduction="sum"),
        "smooth_l1_loss": lambda x, y: tf.smooth_l1_loss(x, y, beta=0.8),
        "huber_loss": lambda x, y: tf.huber_loss(x, y, delta=0.8, reduction="none"),
        "mse_loss_w": lambda x, y, v: tf.mse_loss(x, y, weight=v),
        "l1_loss_w": lambda x, y, v: tf.l1_loss(x, y, weight=v),
        "huber_loss_w": lambda x, y, v: tf.huber_loss(x, y, delta=0.8, weight=v),
        "mse_loss_w_sum": lambda x, y, v: tf.mse_loss(x, y, reduction="sum", weight=v),
        "binary_cross_entropy": lambda x, y, v: tf.binary_cross_entropy(x, y, weight=v),
        "bce_with_logits": lambda x, y, p: tf.binary_cross_entropy_with_logits(x, y, pos_weight=p, reduction="sum"),
        "bce_with_logits_plain": tf.binary_cross_entropy_with_logits,
        "cross_entropy": tf.cross_entropy,
        "cross_entropy_full": lambda x, t, v: tf.cross_entropy(x, t, weight=v, label_smoothing=0.2),
        "cross_entropy_none_ign3": lambda x, t: tf.cross_entropy(x, t, ignore_index=3, reduction="none",
                                                                 label_smoothing=0.1),
        "cross_entropy_sum_w": lambda x, t: tf.cross_entropy(x, t, weight=w, reduction="sum"),
        "cross_entropy_probs": lambda x, p: tf.cross_entropy(x, p, label_smoothing=0.1),
        "cross_entropy_nd": tf.cross_entropy, "nll_loss": lambda x, t: tf.nll_loss(x, t, weight=w),
        "kl_div": lambda x, t: tf.kl_div(x, t, reduction="batchmean"),
        "kl_div_log": lambda x, t: tf.kl_div(x, t, reduction="sum", log_target=True),
        "soft_margin_loss": tf.soft_margin_loss, "normalize": tf.normalize,
        "normalize_p1": lambda x: tf.normalize(x, p=1.0, dim=0), "cosine_similarity": tf.cosine_similarity,
        "pairwise_distance": tf.pairwise_distance, "linear": tf.linear, "bilinear": tf.bilinear,
        "layer_norm": lambda x, a, b: tf.layer_norm(x, (4,), a, b), "layer_norm_2d": lambda x: tf.layer_norm(x, (3, 4)),
        "embedding": lambda i, v: tf.embedding(i, v, padding_idx=2),
    }
    return table.get(name)


def test_captured_arrays_are_read_at_each_call_not_copied_when_first_traced():
    # a batch buffer refilled between steps, and batch norm's running statistics: F.*
    # once cast them up front, so the compiled function kept their first values
    import gradjit.nn.functional as GF
    from gradjit.runtime import tiers
    with tiers.forced("never"):
        y = np.zeros(2)
        g = gj.grad(lambda w: GF.mse_loss(w, y))
        g(np.ones(2))
        y[:] = 5.0
        np.testing.assert_allclose(g(np.ones(2)), [-4.0, -4.0])
        y64 = np.zeros(2)     # float64 beside float32: cast in the graph, still read live
        g32 = gj.grad(lambda w: GF.mse_loss(w, y64))
        w = np.ones(2, np.float32)
        g32(w)
        y64[:] = 3.0
        out = g32(w)
        assert out.dtype == np.float32
        np.testing.assert_allclose(out, [-2.0, -2.0])
        rm, rv = np.zeros(3), np.ones(3)
        predict = gj.jit(lambda x: GF.batch_norm(x, rm, rv, training=False))
        x = np.arange(6.0).reshape(2, 3)
        predict(x)
        rm[:], rv[:] = 1.0, 4.0
        np.testing.assert_allclose(predict(x), (x - 1.0) / np.sqrt(4.0 + 1e-5))


@pytest.mark.slow
def test_cdist_of_a_set_with_itself_has_torchs_gradient():
    # the zero diagonal: sqrt's gradient at 0 was NaN everywhere
    x = gj.tensor(np.array([[0.0, 1.0], [2.0, 0.5]]), requires_grad=True)
    F.cdist(x, x).sum().backward()
    d = np.array([-2.0, 0.5]) / np.hypot(2.0, 0.5)
    np.testing.assert_allclose(x.grad.data, [2 * d, -2 * d])


@COMPILED_SLOW
def test_mean_over_all_ignored_targets_is_nan_with_zero_gradient(executor):
    # loss.sum() / w_t.sum() was 0 / 0: the gradient 0 * inf = NaN (torch: zeros, value NaN)
    x = _n(3, 4)
    t = np.full(3, -100)

    def f(x):
        return (F.cross_entropy(x, t) + F.cross_entropy(x, t, weight=W_CLS, label_smoothing=0.1)
                + F.nll_loss(x, t))
    val, g = gj.value_and_grad(f)(x)
    assert np.isnan(val)
    np.testing.assert_array_equal(g, np.zeros((3, 4)))
    xt = gj.tensor(x, requires_grad=True)
    out = f(xt)
    out.backward()
    assert np.isnan(out.data)
    np.testing.assert_array_equal(xt.grad.data, np.zeros((3, 4)))
    # some targets kept: the mean over them, as before
    t2 = np.array([1, -100, 3])
    g2 = gj.grad(lambda x: F.cross_entropy(x, t2))(x)
    np.testing.assert_allclose(g2, numerical_grad(lambda x: _ce_idx(x, t2), [x], 0), rtol=1e-6, atol=1e-8)


@COMPILED_SLOW
def test_binary_cross_entropy_gradient_at_saturated_probabilities(executor):
    # p exactly 0 or 1 (a saturated sigmoid): the chain through the clamped logs gave
    # 0 * inf = NaN; torch's gradient is (p - t) / max(p (1 - p), 1e-12)
    p = np.array([0.0, 1.0, 0.0, 1.0, 0.3, 0.5])
    t = np.array([0.0, 1.0, 0.3, 0.6, 0.2, 1.0])
    expect = (p - t) / np.maximum(p * (1 - p), 1e-12)
    g = gj.grad(lambda p: F.binary_cross_entropy(p, t, reduction="sum"))(p)
    np.testing.assert_allclose(g, expect, rtol=1e-12)
    pt = gj.tensor(p, requires_grad=True)
    F.binary_cross_entropy(pt, t, reduction="sum").backward()
    np.testing.assert_allclose(pt.grad.data, expect, rtol=1e-12)
    # the value keeps its logs clamped at -100; the target's gradient is the value's slope
    out = F.binary_cross_entropy(gj.tensor(p), t, reduction="none").data
    np.testing.assert_allclose(out[:4], [0.0, 0.0, 30.0, 40.0], atol=1e-12)
    gt = gj.grad(lambda t: F.binary_cross_entropy(p, t, reduction="sum"))(t)
    np.testing.assert_allclose(gt[:4], [100.0, -100.0, 100.0, -100.0])
    # second order, inside (0, 1): d2/dp2 = (p^2 - 2 p t + t) / (p (1 - p))^2
    q, z = np.array([0.2, 0.7, 0.5]), np.array([0.1, 0.9, 1.0])
    h = gj.grad(lambda q: gj.grad(lambda q: F.binary_cross_entropy(q, z, reduction="sum"))(q).sum())(q)
    np.testing.assert_allclose(h, (q * q - 2 * q * z + z) / (q * (1 - q)) ** 2, rtol=1e-10)


@COMPILED_SLOW
def test_class_index_target_out_of_bounds_raises(executor):
    # a target outside [0, C) that is not ignore_index was dropped from the loss (torch raises)
    x = _n(3, 5)
    for bad, shown in ((np.array([0, 7, 1]), 7), (np.array([0, -1, 1]), -1)):
        for f in (lambda x, t: F.cross_entropy(x, t), lambda x, t: F.nll_loss(x, t, weight=np.ones(5)),
                  lambda x, t: F.cross_entropy(x, t, label_smoothing=0.1)):
            with pytest.raises(IndexError, match=f"Target {shown} is out of bounds"):
                f(gj.tensor(x), gj.tensor(bad))            # known values: torch's words
            with pytest.raises(IndexError, match=f"Target {shown} is out of bounds"):
                gj.grad(lambda x: f(x, bad))(x)            # a constant of the trace
            with pytest.raises(IndexError, match="out of bounds"):
                gj.grad(f)(x, bad)                         # traced: checked when it runs
    ok = np.array([0, -100, 4])                            # ignore_index is not out of bounds
    np.testing.assert_allclose(gj.grad(F.cross_entropy)(x, ok),
                               numerical_grad(lambda x: _ce_idx(x, ok), [x], 0), rtol=1e-6, atol=1e-8)


def test_loss_targets_torch_refuses():
    x = gj.tensor(_n(3, 4))
    with pytest.raises(RuntimeError, match="integer class-index target"):
        F.cross_entropy(x, gj.tensor(np.array([0.0, 1.0, 2.0])))   # floats not of x's shape
    with pytest.raises(RuntimeError, match="integer class-index target"):
        F.nll_loss(x, np.array([0.0, 1.0, 2.0]))
    with pytest.raises(ValueError, match=r"target of shape \(2,\)"):
        F.cross_entropy(x, np.array([0, 1]))
    p = gj.tensor(_prob(3, 4))
    with pytest.raises(ValueError, match=r"target size \(4,\) that is different to the input size"):
        F.binary_cross_entropy(p, _prob(4))
    with pytest.raises(ValueError, match=r"Target size \(3, 1\) must be the same as input size"):
        F.binary_cross_entropy_with_logits(p, _prob(3, 1))


INPLACE = {
    "relu": (F.relu, lambda x: np.maximum(x, 0)),
    "relu6": (F.relu6, lambda x: np.clip(x, 0, 6)),
    "hardtanh": (lambda x, inplace: F.hardtanh(x, -0.5, 1.0, inplace), lambda x: np.clip(x, -0.5, 1.0)),
    "leaky_relu": (lambda x, inplace: F.leaky_relu(x, 0.2, inplace), lambda x: np.where(x > 0, x, 0.2 * x)),
    "elu": (lambda x, inplace: F.elu(x, 1.3, inplace), lambda x: np.where(x > 0, x, 1.3 * np.expm1(x))),
    "celu": (lambda x, inplace: F.celu(x, 0.8, inplace), lambda x: np.where(x > 0, x, 0.8 * np.expm1(x / 0.8))),
    "selu": (F.selu, lambda x: SELU_S * np.where(x > 0, x, SELU_A * np.expm1(x))),
    "silu": (F.silu, lambda x: x / (1 + np.exp(-x))),
    "mish": (F.mish, lambda x: x * np.tanh(_sp(x))),
    "hardsigmoid": (F.hardsigmoid, lambda x: np.clip(x / 6 + 0.5, 0, 1)),
    "hardswish": (F.hardswish, lambda x: x * np.clip(x + 3, 0, 6) / 6),
    "threshold": (lambda x, inplace: F.threshold(x, 0.25, -2.0, inplace), lambda x: np.where(x > .25, x, -2.0)),
    "dropout": (lambda x, inplace: F.dropout(x, 0.3, generator=7, inplace=inplace), lambda x: x * DROP_MASK),
}


@pytest.mark.parametrize("name", sorted(INPLACE))
def test_activation_inplace_writes_the_input(name, interpreted):
    # inplace=True was ignored: the input kept its values (torch overwrites it)
    fn, ref = INPLACE[name]
    x = _away(3, 4) * 2
    w = np.random.default_rng(3).standard_normal((3, 4))
    t = gj.tensor(x.copy())
    assert fn(t, inplace=True) is t
    np.testing.assert_allclose(t.data, ref(x), rtol=1e-12, atol=1e-12)
    # with history: the write is recorded, the gradient reaches the leaf
    leaf = gj.tensor(x, requires_grad=True)
    h = leaf * 1.0
    fn(h, inplace=True)
    (h * w).sum().backward()
    expect = numerical_grad(lambda v: ref(v) * w, [x], 0)
    np.testing.assert_allclose(leaf.grad.data, expect, rtol=1e-5, atol=1e-6)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        fn(gj.tensor(x, requires_grad=True), inplace=True)
    # traced: the name is rebound to the result (x[...] = y)

    def f(v):
        y = v * 1.0
        fn(y, inplace=True)
        return (y * w).sum()
    np.testing.assert_allclose(gj.grad(f)(x), expect, rtol=1e-5, atol=1e-6)


def test_plain_arrays_raise_a_clear_type_error_and_softmax_takes_dtype(interpreted):
    # F.* of plain arrays met ndarray.relu / as_operand's _const: an internal AttributeError
    x = _n(3, 4)
    for call in (lambda: F.relu(x), lambda: F.linear(x, _n(2, 4)), lambda: F.cross_entropy(x, T_IDX[:3]),
                 lambda: F.conv2d(_n(1, 1, 3, 3), _n(1, 1, 2, 2)), lambda: F.mse_loss(input=x, target=x)):
        with pytest.raises(TypeError, match=r"gj.nn.functional.\w+: argument 'input' must be a tensor, "
                                            r"not numpy.ndarray: pass gj.tensor\(x\)"):
            call()
    # an array beside a tensor (or a traced array) is a constant of its front end, as before
    w = _n(2, 4)
    np.testing.assert_allclose(F.linear(x, gj.tensor(w)).data, x @ w.T, rtol=1e-12)
    np.testing.assert_allclose(gj.grad(lambda w: F.linear(x, w).sum())(w), np.tile(x.sum(0), (2, 1)))
    # Tensor.softmax / log_softmax take torch's dtype
    t = gj.tensor(x)
    assert t.softmax(-1, dtype=gj.float32).dtype == np.float32
    assert t.log_softmax(1, dtype=gj.float32).dtype == np.float32
    np.testing.assert_allclose(t.log_softmax(0, dtype=gj.float32).data, _logsm(x, 0), rtol=1e-6)
