"""gj.nn.functional layers (tracer/nn_layers.py): values vs loop-based NumPy references (and
torch when importable), float64 finite-difference gradients in tensor mode and under gj.grad
(interpreted), running-stat updates, and one compiled conv + pool graph vs the interpreter."""
from __future__ import annotations

import numpy as np
import pytest

import gradjit as gj
from tests.fd import numerical_grad

F = gj.nn.functional
R = np.random.default_rng(3)


def _n(*s):
    return R.standard_normal(s)


# -- NumPy references (explicit loops, independent of the im2col spelling) --------------------------
def _norm(x, dims, eps=1e-5):
    m = x.mean(dims, keepdims=True)
    return (x - m) / np.sqrt(x.var(dims, keepdims=True) + eps)


def _ch(v, nd):
    return v.reshape((1, -1) + (1,) * nd)


def _bn(x, w, b):
    return _norm(x, (0, 2, 3)) * _ch(w, 2) + _ch(b, 2)


def _gn(x, g, w, b):
    n = x.shape[0]
    return _norm(x.reshape(n, g, -1), (2,)).reshape(x.shape) * _ch(w, x.ndim - 2) + _ch(b, x.ndim - 2)


def _pad2(x, p, value=0.0):
    return np.pad(x, [(0, 0), (0, 0), (p[0], p[0]), (p[1], p[1])], constant_values=value)


def _out(n, k, s, p, d):
    return (n + 2 * p - d * (k - 1) - 1) // s + 1


def _unfold(x, k, d=(1, 1), p=(0, 0), s=(1, 1)):
    n, c, h, w = x.shape
    xp = _pad2(x, p)
    oh, ow = _out(h, k[0], s[0], p[0], d[0]), _out(w, k[1], s[1], p[1], d[1])
    out = np.zeros((n, c, k[0], k[1], oh * ow))
    for i in range(k[0]):
        for j in range(k[1]):
            for a in range(oh):
                for b in range(ow):
                    out[:, :, i, j, a * ow + b] = xp[:, :, a * s[0] + i * d[0], b * s[1] + j * d[1]]
    return out.reshape(n, c * k[0] * k[1], oh * ow)


def _fold(cols, size, k, d=(1, 1), p=(0, 0), s=(1, 1)):
    n, c = cols.shape[0], cols.shape[1] // (k[0] * k[1])
    oh, ow = _out(size[0], k[0], s[0], p[0], d[0]), _out(size[1], k[1], s[1], p[1], d[1])
    cols = cols.reshape(n, c, k[0], k[1], oh, ow)
    y = np.zeros((n, c, size[0] + 2 * p[0], size[1] + 2 * p[1]))
    for i in range(k[0]):
        for j in range(k[1]):
            for a in range(oh):
                for b in range(ow):
                    y[:, :, a * s[0] + i * d[0], b * s[1] + j * d[1]] += cols[:, :, i, j, a, b]
    return y[:, :, p[0]:p[0] + size[0], p[1]:p[1] + size[1]]


def _conv2d(x, w, b=None, s=(1, 1), p=(0, 0), d=(1, 1), g=1):
    n, _, h, wd = x.shape
    o, cg, kh, kw = w.shape
    xp = _pad2(x, p)
    oh, ow = _out(h, kh, s[0], p[0], d[0]), _out(wd, kw, s[1], p[1], d[1])
    y = np.zeros((n, o, oh, ow))
    og = o // g
    for gi in range(g):
        xs = xp[:, gi * cg:(gi + 1) * cg]
        for i in range(kh):
            for j in range(kw):
                patch = xs[:, :, i * d[0]:i * d[0] + s[0] * (oh - 1) + 1:s[0],
                           j * d[1]:j * d[1] + s[1] * (ow - 1) + 1:s[1]]
                y[:, gi * og:(gi + 1) * og] += np.einsum("ncab,oc->noab", patch,
                                                         w[gi * og:(gi + 1) * og, :, i, j])
    return y if b is None else y + _ch(b, 2)


def _conv_t2d(x, w, b=None, s=(1, 1), p=(0, 0), op=(0, 0), g=1, d=(1, 1)):
    n, cin, h, wd = x.shape
    _, og, kh, kw = w.shape
    oh = (h - 1) * s[0] - 2 * p[0] + d[0] * (kh - 1) + op[0] + 1
    ow = (wd - 1) * s[1] - 2 * p[1] + d[1] * (kw - 1) + op[1] + 1
    y = np.zeros((n, og * g, oh + 2 * p[0], ow + 2 * p[1]))
    cg = cin // g
    for gi in range(g):
        for a in range(h):
            for bb in range(wd):
                for i in range(kh):
                    for j in range(kw):
                        y[:, gi * og:(gi + 1) * og, a * s[0] + i * d[0], bb * s[1] + j * d[1]] += \
                            x[:, gi * cg:(gi + 1) * cg, a, bb] @ w[gi * cg:(gi + 1) * cg, :, i, j]
    y = y[:, :, p[0]:p[0] + oh, p[1]:p[1] + ow]
    return y if b is None else y + _ch(b, 2)


def _pool2d(x, k, s, p, kind, include_pad=True, d=(1, 1)):
    n, c, h, w = x.shape
    xp = _pad2(x, p, -np.inf if kind == "max" else 0.0)
    real = _pad2(np.ones((1, 1, h, w)), p)[0, 0]
    oh, ow = _out(h, k[0], s[0], p[0], d[0]), _out(w, k[1], s[1], p[1], d[1])
    y = np.zeros((n, c, oh, ow))
    for a in range(oh):
        for b in range(ow):
            rs = slice(a * s[0], a * s[0] + d[0] * (k[0] - 1) + 1, d[0])
            cs = slice(b * s[1], b * s[1] + d[1] * (k[1] - 1) + 1, d[1])
            win = xp[:, :, rs, cs]
            if kind == "max":
                y[:, :, a, b] = win.max((2, 3))
            else:
                y[:, :, a, b] = win.sum((2, 3)) / (k[0] * k[1] if include_pad else real[rs, cs].sum())
    return y


def _adaptive(x, oh, ow):
    h, w = x.shape[-2:]
    y = np.zeros(x.shape[:-2] + (oh, ow))
    for i in range(oh):
        for j in range(ow):
            r = slice(i * h // oh, -(-(i + 1) * h // oh))
            c = slice(j * w // ow, -(-(j + 1) * w // ow))
            y[..., i, j] = x[..., r, c].mean((-2, -1))
    return y


def _nearest(x, oh, ow):
    h, w = x.shape[-2:]
    ih = np.minimum((np.arange(oh) * (h / oh)).astype(int), h - 1)
    iw = np.minimum((np.arange(ow) * (w / ow)).astype(int), w - 1)
    return x[:, :, ih][:, :, :, iw]


def _bilinear(x, oh, ow, ac):
    h, w = x.shape[-2:]

    def src(i, n_in, n_out):
        if ac:
            return i * (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
        return max((i + 0.5) * n_in / n_out - 0.5, 0.0)
    y = np.zeros(x.shape[:2] + (oh, ow))
    for i in range(oh):
        for j in range(ow):
            sy, sx = src(i, h, oh), src(j, w, ow)
            y0, x0 = min(int(sy), h - 1), min(int(sx), w - 1)
            y1, x1 = min(y0 + 1, h - 1), min(x0 + 1, w - 1)
            ly, lx = sy - y0, sx - x0
            y[:, :, i, j] = ((1 - ly) * ((1 - lx) * x[:, :, y0, x0] + lx * x[:, :, y0, x1])
                             + ly * ((1 - lx) * x[:, :, y1, x0] + lx * x[:, :, y1, x1]))
    return y


RM, RV = _n(3), R.uniform(0.5, 2.0, 3)

CASES = [
    ("batch_norm_train", lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True), _bn,
     [_n(2, 3, 3, 2), _n(3), _n(3)]),
    ("batch_norm_eval", lambda x, w, b: F.batch_norm(x, RM, RV, w, b),
     lambda x, w, b: (x - _ch(RM, 2)) / np.sqrt(_ch(RV, 2) + 1e-5) * _ch(w, 2) + _ch(b, 2),
     [_n(2, 3, 2, 2), _n(3), _n(3)]),
    ("group_norm", lambda x, w, b: F.group_norm(x, 2, w, b), lambda x, w, b: _gn(x, 2, w, b),
     [_n(2, 4, 3), _n(4), _n(4)]),
    ("instance_norm", lambda x, w, b: F.instance_norm(x, weight=w, bias=b),
     lambda x, w, b: _norm(x, (2, 3)) * _ch(w, 2) + _ch(b, 2), [_n(2, 3, 3, 2), _n(3), _n(3)]),
    ("cdist", F.cdist, lambda a, b: np.sqrt(((a[:, None] - b[None]) ** 2).sum(-1)), [_n(4, 3), _n(5, 3)]),
    ("cdist_p1_batched", lambda a, b: F.cdist(a, b, p=1.0),
     lambda a, b: np.abs(a[:, :, None] - b[:, None]).sum(-1), [_n(2, 3, 2), _n(2, 4, 2)]),
    ("unfold", lambda x: F.unfold(x, (2, 3), dilation=(2, 1), padding=1, stride=(1, 2)),
     lambda x: _unfold(x, (2, 3), (2, 1), (1, 1), (1, 2)), [_n(2, 2, 4, 5)]),
    ("fold", lambda c: F.fold(c, (4, 5), (2, 3), dilation=(2, 1), padding=1, stride=(1, 2)),
     lambda c: _fold(c, (4, 5), (2, 3), (2, 1), (1, 1), (1, 2)), [_n(2, 12, 12)]),
    ("conv2d", lambda x, w, b: F.conv2d(x, w, b, stride=(2, 1), padding=1, dilation=(1, 2)),
     lambda x, w, b: _conv2d(x, w, b, (2, 1), (1, 1), (1, 2)), [_n(2, 3, 5, 6), _n(4, 3, 3, 2), _n(4)]),
    ("conv2d_groups_same", lambda x, w: F.conv2d(x, w, padding="same", groups=2, dilation=2),
     lambda x, w: _conv2d(np.pad(x, [(0, 0), (0, 0), (2, 2), (1, 1)]), w, None, d=(2, 2), g=2),
     [_n(2, 2, 5, 4), _n(4, 1, 3, 2)]),
    ("conv2d_valid", lambda x, w: F.conv2d(x, w, padding="valid"), lambda x, w: _conv2d(x, w),
     [_n(2, 3, 4, 4), _n(2, 3, 2, 2)]),
    ("conv1d", lambda x, w, b: F.conv1d(x, w, b, stride=2, padding=2, dilation=1, groups=3),
     lambda x, w, b: _conv2d(x[:, :, None], w[:, :, None], b, (1, 2), (0, 2), g=3)[:, :, 0],
     [_n(2, 3, 6), _n(3, 1, 3), _n(3)]),
    ("conv1d_same", lambda x, w: F.conv1d(x, w, padding="same"),
     lambda x, w: _conv2d(np.pad(x, [(0, 0), (0, 0), (1, 2)])[:, :, None], w[:, :, None])[:, :, 0],
     [_n(2, 2, 5), _n(3, 2, 4)]),
    ("conv_transpose2d", lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1),
     lambda x, w, b: _conv_t2d(x, w, b, (2, 2), (1, 1), (1, 1)), [_n(2, 3, 3, 2), _n(3, 2, 3, 3), _n(2)]),
    ("conv_transpose2d_groups", lambda x, w: F.conv_transpose2d(x, w, stride=(1, 2), groups=2, dilation=(2, 1)),
     lambda x, w: _conv_t2d(x, w, None, (1, 2), g=2, d=(2, 1)), [_n(2, 2, 3, 3), _n(2, 2, 2, 2)]),
    ("max_pool2d", lambda x: F.max_pool2d(x, 3, stride=2, padding=1),
     lambda x: _pool2d(x, (3, 3), (2, 2), (1, 1), "max"), [_n(2, 3, 5, 6)]),
    ("max_pool2d_dil", lambda x: F.max_pool2d(x, (2, 2), stride=1, dilation=(1, 2)),
     lambda x: _pool2d(x, (2, 2), (1, 1), (0, 0), "max", d=(1, 2)), [_n(2, 2, 4, 5)]),
    ("max_pool1d", lambda x: F.max_pool1d(x, 2), lambda x: _pool2d(x[:, :, None], (1, 2), (1, 2), (0, 0), "max")[:, :, 0],
     [_n(2, 3, 6)]),
    ("avg_pool2d", lambda x: F.avg_pool2d(x, 2, padding=1),
     lambda x: _pool2d(x, (2, 2), (2, 2), (1, 1), "avg"), [_n(2, 3, 5, 4)]),
    ("avg_pool2d_nopad_count", lambda x: F.avg_pool2d(x, (3, 2), stride=(2, 1), padding=1, count_include_pad=False),
     lambda x: _pool2d(x, (3, 2), (2, 1), (1, 1), "avg", include_pad=False), [_n(2, 2, 5, 4)]),
    ("avg_pool1d", lambda x: F.avg_pool1d(x, 3, stride=2, padding=1),
     lambda x: _pool2d(x[:, :, None], (1, 3), (1, 2), (0, 1), "avg")[:, :, 0], [_n(2, 3, 6)]),
    ("adaptive_avg_pool2d", lambda x: F.adaptive_avg_pool2d(x, (2, 3)), lambda x: _adaptive(x, 2, 3),
     [_n(2, 3, 4, 6)]),
    ("adaptive_avg_pool2d_uneven", lambda x: F.adaptive_avg_pool2d(x, 3), lambda x: _adaptive(x, 3, 3),
     [_n(2, 2, 5, 4)]),
    ("interp_nearest", lambda x: F.interpolate(x, size=(5, 3)), lambda x: _nearest(x, 5, 3), [_n(2, 2, 3, 4)]),
    ("interp_nearest_scale", lambda x: F.interpolate(x, scale_factor=2), lambda x: _nearest(x, 6, 4),
     [_n(2, 2, 3, 2)]),
    ("interp_bilinear", lambda x: F.interpolate(x, size=(5, 3), mode="bilinear"),
     lambda x: _bilinear(x, 5, 3, False), [_n(2, 2, 3, 4)]),
    ("interp_bilinear_ac", lambda x: F.interpolate(x, size=(4, 6), mode="bilinear", align_corners=True),
     lambda x: _bilinear(x, 4, 6, True), [_n(2, 3, 3, 4)]),
]
IDS = [c[0] for c in CASES]


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_values_match_numpy(case, interpreted):
    _, fn, ref, args = case
    out = fn(*map(gj.tensor, args))
    np.testing.assert_allclose(out.data, ref(*args), rtol=1e-10, atol=1e-12)
    out32 = fn(*[gj.tensor(a.astype(np.float32)) for a in args])
    assert out32.dtype == np.float32
    np.testing.assert_allclose(out32.data, ref(*args), rtol=2e-4, atol=2e-4)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_gradients_fd_tensor_and_grad(case, interpreted):
    name, fn, ref, args = case
    w = np.random.default_rng(1).standard_normal(np.shape(ref(*args)))
    ts = [gj.tensor(a, requires_grad=True) for a in args]
    (fn(*ts) * w).sum().backward()
    grads = gj.grad(lambda *xs: (fn(*xs) * w).sum(), argnums=tuple(range(len(args))))(*args)
    for i in range(len(args)):
        expect = numerical_grad(lambda *a: ref(*a) * w, args, i)
        np.testing.assert_allclose(ts[i].grad.data, expect, rtol=1e-5, atol=1e-6, err_msg=name)
        np.testing.assert_allclose(grads[i], expect, rtol=1e-5, atol=1e-6, err_msg=name)


def test_batch_norm_running_stats_in_place(interpreted):
    x = _n(4, 3, 2, 2)
    rm, rv = np.zeros(3), np.ones(3)
    F.batch_norm(gj.tensor(x), rm, rv, training=True, momentum=0.2)
    np.testing.assert_allclose(rm, 0.2 * x.mean((0, 2, 3)))
    np.testing.assert_allclose(rv, 0.8 + 0.2 * x.var((0, 2, 3), ddof=1))
    trm, trv = gj.tensor(np.zeros(3)), gj.tensor(np.ones(3))
    F.batch_norm(gj.tensor(x), trm, trv, training=True)
    np.testing.assert_allclose(trm.data, 0.1 * x.mean((0, 2, 3)))
    np.testing.assert_allclose(trv.data, 0.9 + 0.1 * x.var((0, 2, 3), ddof=1))
    irm, irv = np.zeros(3), np.ones(3)
    F.instance_norm(gj.tensor(x), irm, irv, momentum=0.5)
    np.testing.assert_allclose(irm, 0.5 * x.mean((2, 3)).mean(0))
    np.testing.assert_allclose(irv, 0.5 + 0.5 * x.var((2, 3), ddof=1).mean(0))
    with pytest.raises(ValueError, match="more than 1 value"):
        F.batch_norm(gj.tensor(_n(1, 3)), None, None, training=True)


def test_unbatched_and_errors(interpreted):
    x, w = _n(2, 4, 4), _n(3, 2, 2, 2)
    np.testing.assert_allclose(F.conv2d(gj.tensor(x), w).data, _conv2d(x[None], w)[0], rtol=1e-12)
    np.testing.assert_allclose(F.unfold(gj.tensor(x), 2).data, _unfold(x[None], (2, 2))[0], rtol=1e-12)
    np.testing.assert_allclose(F.max_pool2d(gj.tensor(x), 2).data,
                               _pool2d(x[None], (2, 2), (2, 2), (0, 0), "max")[0])
    with pytest.raises(ValueError, match="same"):
        F.conv2d(gj.tensor(x), w, stride=2, padding="same")
    with pytest.raises(ValueError, match="half"):
        F.max_pool2d(gj.tensor(x), 2, padding=2)
    with pytest.raises(NotImplementedError, match="ceil_mode"):
        F.avg_pool2d(gj.tensor(x), 2, ceil_mode=True)
    with pytest.raises(ValueError, match="divisible"):
        F.group_norm(gj.tensor(_n(2, 3, 2)), 2)


RANKS = [   # (call, message): torch refuses these ranks; gj raised IndexError or computed
    (lambda t: F.conv2d(t(4, 6), t(3, 4, 2, 2)), r"conv2d: expected an input of 3-D or 4-D.*\(4, 6\)"),
    (lambda t: F.conv2d(t(1, 2, 4, 6), t(3, 2, 2)), r"conv2d: expected a weight of 4-D.*\(3, 2, 2\)"),
    (lambda t: F.conv1d(t(2, 2, 4, 6), t(3, 2, 2)), r"conv1d: expected an input of 2-D or 3-D.*4-D"),
    (lambda t: F.conv_transpose2d(t(1, 2, 3, 3, 3), t(2, 2, 2, 2)), r"conv_transpose2d: expected an input"),
    (lambda t: F.conv_transpose2d(t(1, 2, 3, 3), t(2, 2, 2)), r"conv_transpose2d: expected a weight of 4-D"),
    (lambda t: F.max_pool2d(t(2, 2, 4, 6, 6), 2), r"max_pool2d: expected an input of 3-D or 4-D"),
    (lambda t: F.max_pool2d(t(6, 6), 2), r"max_pool2d: expected an input of 3-D or 4-D.*\(6, 6\)"),
    (lambda t: F.max_pool1d(t(6), 2), r"max_pool1d: expected an input of 2-D or 3-D"),
    (lambda t: F.avg_pool2d(t(2, 2, 4, 6, 6), 2), r"avg_pool2d: expected an input of 3-D or 4-D"),
    (lambda t: F.avg_pool1d(t(2, 2, 4, 6), 2), r"avg_pool1d: expected an input of 2-D or 3-D"),
    (lambda t: F.adaptive_avg_pool2d(t(4, 4), 2), r"adaptive_avg_pool2d: expected an input of 3-D"),
    (lambda t: F.linear(t(3, 3), t(2, 3, 3)), r"linear: expected a weight of 1-D or 2-D.*\(2, 3, 3\)"),
    (lambda t: F.prelu(t(2, 3, 4), t(3, 1)), r"prelu: expected a weight of 0-D or 1-D"),
    (lambda t: F.prelu(t(2, 3, 4), t(4)), r"prelu: Mismatch of parameter numbers"),
    (lambda t: F.batch_norm(t(3), np.zeros(3), np.ones(3)), r"batch_norm: expected an input of at least 2-D"),
    (lambda t: F.group_norm(t(4), 2), r"group_norm: expected an input of at least 2-D"),
]


@pytest.mark.parametrize("k", range(len(RANKS)))
def test_wrong_ranks_raise_as_torch(k):
    call, msg = RANKS[k]
    with pytest.raises(RuntimeError, match=msg) as info:
        call(lambda *s: gj.tensor(_n(*s)))
    assert "test_nn_layers.py" in str(info.value)       # the user's line
    with pytest.raises(RuntimeError, match=msg):        # traced alike
        gj.grad(lambda a: call(lambda *s: a * _n(*s)).sum())(1.0)


def test_instance_norm_rank_and_prelu_of_a_0d_input():
    with pytest.raises(ValueError, match=r"instance_norm: expected an input of at least 3-D.*\(2, 3\)"):
        F.instance_norm(gj.tensor(_n(2, 3)))
    # a 0-d input with a (1,) prelu weight stays 0-d, as torch
    assert F.prelu(gj.tensor(np.array(-2.0)), np.array([0.25])).shape == ()


def _net(w, b, x):
    h = F.relu(F.conv2d(x, w, b, padding=1))
    h = F.max_pool2d(h, 2) + F.avg_pool2d(h, 2)
    return (F.adaptive_avg_pool2d(h, 1) ** 2).sum()


@pytest.mark.slow
def test_compiled_conv_pool_matches_interpreter(monkeypatch):
    rng = np.random.default_rng(0)
    args = [rng.standard_normal((3, 2, 3, 3)), rng.standard_normal(3), rng.standard_normal((2, 2, 4, 4))]
    monkeypatch.delenv("GRADJIT_EXECUTOR", raising=False)
    v_c, g_c = gj.value_and_grad(_net, argnums=(0, 1, 2))(*args)
    monkeypatch.setenv("GRADJIT_EXECUTOR", "numpy")
    v_i, g_i = gj.value_and_grad(_net, argnums=(0, 1, 2))(*args)
    np.testing.assert_allclose(v_c, v_i, rtol=1e-12)
    for a, b in zip(g_c, g_i):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)


# -- torch (optional; only where it is installed) ---------------------------------------------------
def _torch_fn(name, tf, torch):
    rm, rv = torch.tensor(RM), torch.tensor(RV)
    return {
        "batch_norm_train": lambda x, w, b: tf.batch_norm(x, None, None, w, b, training=True),
        "batch_norm_eval": lambda x, w, b: tf.batch_norm(x, rm, rv, w, b),
        "group_norm": lambda x, w, b: tf.group_norm(x, 2, w, b),
        "instance_norm": lambda x, w, b: tf.instance_norm(x, weight=w, bias=b),
        "cdist": torch.cdist, "cdist_p1_batched": lambda a, b: torch.cdist(a, b, p=1.0),
        "unfold": lambda x: tf.unfold(x, (2, 3), dilation=(2, 1), padding=1, stride=(1, 2)),
        "fold": lambda c: tf.fold(c, (4, 5), (2, 3), dilation=(2, 1), padding=1, stride=(1, 2)),
        "conv2d": lambda x, w, b: tf.conv2d(x, w, b, stride=(2, 1), padding=1, dilation=(1, 2)),
        "conv2d_groups_same": lambda x, w: tf.conv2d(x, w, padding="same", groups=2, dilation=2),
        "conv2d_valid": lambda x, w: tf.conv2d(x, w, padding="valid"),
        "conv1d": lambda x, w, b: tf.conv1d(x, w, b, stride=2, padding=2, groups=3),
        "conv1d_same": lambda x, w: tf.conv1d(x, w, padding="same"),
        "conv_transpose2d": lambda x, w, b: tf.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1),
        "conv_transpose2d_groups": lambda x, w: tf.conv_transpose2d(x, w, stride=(1, 2), groups=2,
                                                                    dilation=(2, 1)),
        "max_pool2d": lambda x: tf.max_pool2d(x, 3, stride=2, padding=1),
        "max_pool2d_dil": lambda x: tf.max_pool2d(x, (2, 2), stride=1, dilation=(1, 2)),
        "max_pool1d": lambda x: tf.max_pool1d(x, 2),
        "avg_pool2d": lambda x: tf.avg_pool2d(x, 2, padding=1),
        "avg_pool2d_nopad_count": lambda x: tf.avg_pool2d(x, (3, 2), stride=(2, 1), padding=1,
                                                          count_include_pad=False),
        "avg_pool1d": lambda x: tf.avg_pool1d(x, 3, stride=2, padding=1),
        "adaptive_avg_pool2d": lambda x: tf.adaptive_avg_pool2d(x, (2, 3)),
        "adaptive_avg_pool2d_uneven": lambda x: tf.adaptive_avg_pool2d(x, 3),
        "interp_nearest": lambda x: tf.interpolate(x, size=(5, 3)),
        "interp_nearest_scale": lambda x: tf.interpolate(x, scale_factor=2),
        "interp_bilinear": lambda x: tf.interpolate(x, size=(5, 3), mode="bilinear"),
        "interp_bilinear_ac": lambda x: tf.interpolate(x, size=(4, 6), mode="bilinear", align_corners=True),
    }.get(name)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_against_torch(case, interpreted):
    torch = pytest.importorskip("torch")
    name, fn, _, args = case
    ts = [gj.tensor(a, requires_grad=True) for a in args]
    tt = [torch.tensor(a, requires_grad=True) for a in args]
    out, out_t = fn(*ts), _torch_fn(name, torch.nn.functional, torch)(*tt)
    np.testing.assert_allclose(out.data, out_t.detach().numpy(), rtol=1e-7, atol=1e-9)
    w = np.random.default_rng(2).standard_normal(out.shape)
    (out * w).sum().backward()
    (out_t * torch.tensor(w)).sum().backward()
    for a, b in zip(ts, tt):
        np.testing.assert_allclose(a.grad.data, b.grad.numpy(), rtol=1e-6, atol=1e-8, err_msg=name)


def test_batch_norm_running_stats_against_torch(interpreted):
    torch = pytest.importorskip("torch")
    x = _n(3, 2, 4)
    rm, rv, trm, trv = np.zeros(2), np.ones(2), torch.zeros(2, dtype=torch.float64), torch.ones(2, dtype=torch.float64)
    F.batch_norm(gj.tensor(x), rm, rv, training=True, momentum=0.3)
    torch.nn.functional.batch_norm(torch.tensor(x), trm, trv, training=True, momentum=0.3)
    np.testing.assert_allclose(rm, trm.numpy())
    np.testing.assert_allclose(rv, trv.numpy())
