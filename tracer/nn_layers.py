"""``gj.nn.functional`` layers: normalisation, distances, im2col, convolution, pooling, resizing.

Contract
- torch.nn.functional names, signatures and semantics, spelled as composites of existing
  differentiable ops, so this module adds no op, no formula and no code generation; the
  same code runs on eager ``Tensor``s and on ``Tracer``s (``gj.grad`` / ``gj.jit``):
  * padding: ``slice_backward`` placements (zeros); max pooling adds a constant -inf border;
  * ``unfold`` (im2col): one ``index_select`` of the flattened padded input with a constant
    index computed in NumPy; ``fold`` (col2im, unfold's adjoint): one ``index_add`` into zeros;
  * ``conv1d`` / ``conv2d``: ``unfold`` then a (grouped, broadcast) ``matmul``;
    ``conv_transpose2d``: the adjoint, ``fold`` of ``weight^T @ input``;
  * ``max_pool``: ``max(dim)`` over the unfolded window (gradient to the first maximum, as
    torch); ``avg_pool``: a sum over the window divided by the window size, or (padding with
    ``count_include_pad=False``) by a constant count of real elements;
  * ``adaptive_avg_pool2d`` and bilinear ``interpolate``: separable constant matrices
    (``A_h @ x @ A_w^T``) for any sizes; nearest ``interpolate``: ``index_select`` per dim.
- ``batch_norm`` / ``instance_norm`` with ``training`` / ``use_input_stats`` update the given
  ``running_mean`` / ``running_var`` (NumPy arrays or ``Tensor``s) in place, as torch:
  ``r = (1 - momentum) * r + momentum * stat`` with the unbiased batch variance. Under
  tracing (``gj.grad`` / ``gj.jit``) the statistic is a hidden result of the compiled
  function and the transform updates the caller's array after every call, the same way.
- Inputs and weights of a rank torch refuses raise as torch (``GradjitRuntimeError``, a
  RuntimeError; instance_norm's ValueError) naming the function, the ranks expected and the
  shape given, at the user's line (``_check_rank``, tracer/nn_functional.py), not an
  internal IndexError or a result for another layout.
- Not supported (raise ``NotImplementedError``): ``ceil_mode=True``, ``return_indices=True``,
  pooling/conv with more than 2 spatial dims, interpolate modes other than nearest / bilinear
  and ``momentum=None``.
"""
from __future__ import annotations

import math
import numbers

import numpy as np
from gradjit.tracer.dispatch import apply, float_operand
from gradjit.tracer.nn_functional import _check_rank, _const, front_all
from gradjit.tracer.registry import GradjitError, ShapeError, user_site

__all__ = ["batch_norm", "group_norm", "instance_norm", "cdist", "unfold", "fold", "conv1d",
           "conv2d", "conv_transpose2d", "max_pool1d", "max_pool2d", "avg_pool1d", "avg_pool2d",
           "adaptive_avg_pool2d", "interpolate"]


def _tup(v, n, name="argument"):
    if isinstance(v, numbers.Integral):
        return (int(v),) * n
    v = tuple(int(a) for a in v)
    if len(v) == 1:
        return v * n
    if len(v) != n:
        raise ValueError(f"{name}: expected {n} values, got {v}")
    return v


# -- normalisation -------------------------------------------------------------------------------
def _update_running(running, stat, momentum, op):
    """running <- (1 - momentum) * running + momentum * stat, in place, as torch. Traced
    (gj.jit / gj.grad): the statistic becomes a hidden result of the compiled function and
    the transform applies the update to the caller's array after each call
    (``Graph.running_updates``; runtime/transforms.py)."""
    from gradjit.tracer.tensor import Tensor
    from gradjit.tracer.trace import Tracer
    if running is None or momentum == 0:
        return
    if isinstance(stat, Tensor):
        arr = running.data if isinstance(running, Tensor) else running
        arr[...] = ((1.0 - momentum) * arr + momentum * stat.data.reshape(arr.shape)).astype(arr.dtype)
        return
    if isinstance(running, Tracer):      # an argument of the traced function
        target = ("arg", running.value)
    elif isinstance(running, (np.ndarray, Tensor)):   # captured: the same array every call
        target = ("array", running.data if isinstance(running, Tensor) else running)
    else:
        raise GradjitError(f"{op}: running statistics must be arrays to be updated in place, got "
                           f"{type(running).__name__}", user_site())
    stat.graph.running_updates.append((target, stat.value, float(momentum)))


def _affine(out, weight, bias, like):
    shape = (1, -1) + (1,) * (out.ndim - 2)
    if weight is not None:
        out = out * float_operand(weight, like).reshape(shape)
    return out if bias is None else out + float_operand(bias, like).reshape(shape)


def _normalize(x, dims, eps):
    mean = x.mean(dims, keepdim=True)
    centered = x - mean
    var = (centered * centered).mean(dims, keepdim=True)
    return centered * (var + eps).rsqrt(), mean, var


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False,
               momentum=0.1, eps=1e-5):
    if momentum is None:
        raise NotImplementedError("batch_norm: momentum=None (cumulative average) is not supported")
    _check_rank("batch_norm", "an input", input, 2, " (N, C, *)")
    dims = (0,) + tuple(range(2, input.ndim))
    if training:
        out, mean, var = _normalize(input, dims, eps)
        n = input.numel() // input.shape[1]
        if n <= 1:
            raise ValueError(f"Expected more than 1 value per channel when training, got input "
                             f"size {tuple(input.shape)}")
        _update_running(running_mean, mean, momentum, "batch_norm")
        _update_running(running_var, var * (n / (n - 1)), momentum, "batch_norm")
    else:
        shape = (1, -1) + (1,) * (input.ndim - 2)
        rm = float_operand(running_mean, input).reshape(shape)
        rv = float_operand(running_var, input).reshape(shape)
        out = (input - rm) * (rv + eps).rsqrt()
    return _affine(out, weight, bias, input)


def instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None,
                  use_input_stats=True, momentum=0.1, eps=1e-5):
    if input.ndim < 3:   # (torch: a ValueError, no spatial element to normalise over)
        raise ShapeError(f"instance_norm: expected an input of at least 3-D (N, C, *spatial), "
                         f"but got {input.ndim}-D of shape {tuple(input.shape)}", user_site())
    dims = tuple(range(2, input.ndim))
    if use_input_stats:
        out, mean, var = _normalize(input, dims, eps)
        n = int(np.prod(input.shape[2:]))
        if running_mean is not None:
            _update_running(running_mean, mean.mean(0), momentum, "instance_norm")
        if running_var is not None:
            _update_running(running_var, (var * (n / max(n - 1, 1))).mean(0), momentum,
                            "instance_norm")
    else:
        shape = (1, -1) + (1,) * (input.ndim - 2)
        out = ((input - float_operand(running_mean, input).reshape(shape))
               * (float_operand(running_var, input).reshape(shape) + eps).rsqrt())
    return _affine(out, weight, bias, input)


def group_norm(input, num_groups, weight=None, bias=None, eps=1e-5):
    _check_rank("group_norm", "an input", input, 2, " (N, C, *)")
    n, c = input.shape[0], input.shape[1]
    if c % num_groups:
        raise ValueError(f"group_norm: num_channels {c} must be divisible by num_groups {num_groups}")
    x = input.reshape(n, num_groups, -1)
    out, _, _ = _normalize(x, (2,), eps)
    return _affine(out.reshape(tuple(input.shape)), weight, bias, input)


def cdist(x1, x2, p=2.0, compute_mode=None):
    x2 = float_operand(x2, x1)
    diff = x1.unsqueeze(-2) - x2.unsqueeze(-3)          # (..., P, R, M)
    if p == 2.0:   # (sqrt with gradient 0 at distance 0, as torch: cdist(x, x)'s diagonal)
        return apply("_std_from_var.default", [(diff * diff).sum(-1)], {})
    if p == 1.0:
        return diff.abs().sum(-1)
    return diff.norm(p, -1)


# -- padding and im2col ----------------------------------------------------------------------------
def _pad(x, pads, value=0.0):
    """Pad the trailing len(pads) dims by pads[i] = (lo, hi) with a constant value."""
    k = len(pads)
    shape = list(x.shape)
    for i, (lo, hi) in enumerate(pads):
        d = x.ndim - k + i
        if lo or hi:
            n = shape[d]
            shape[d] = n + lo + hi
            x = apply("slice_backward.default", [x], {"input_sizes": tuple(shape), "dim": d,
                                                      "start": lo, "end": lo + n, "step": 1})
    if value != 0.0 and any(lo or hi for lo, hi in pads):
        border = np.full(tuple(shape[x.ndim - k:]), value, dtype=np.dtype(x.dtype))
        border[tuple(slice(lo, s - hi) for (lo, hi), s in zip(pads, border.shape))] = 0.0
        x = x + _const(x, border)
    return x


def _col_index(spatial, kernel, dilation, padding, stride):
    """Flat indices into the padded spatial grid, shape (K, L), and the output spatial size."""
    padded = [s + 2 * p for s, p in zip(spatial, padding)]
    out = [(sp - d * (k - 1) - 1) // st + 1 for sp, k, d, st in zip(padded, kernel, dilation, stride)]
    if any(o <= 0 for o in out):
        raise ValueError(f"unfold/conv/pool: kernel {kernel} with dilation {dilation} does not fit "
                         f"input spatial size {tuple(spatial)} padded by {padding}")
    n = len(spatial)
    kpos = np.meshgrid(*[np.arange(k) * d for k, d in zip(kernel, dilation)], indexing="ij")
    opos = np.meshgrid(*[np.arange(o) * s for o, s in zip(out, stride)], indexing="ij")
    strides = [int(np.prod(padded[i + 1:])) for i in range(n)]
    flat = sum((kpos[i].reshape(-1, 1) + opos[i].reshape(1, -1)) * strides[i] for i in range(n))
    return flat.astype(np.int64), padded, out


def _unfold_nd(x, kernel, dilation, padding, stride, pad_value=0.0):
    """(N, C, *S) -> (N, C, K, L) windows and the output spatial size."""
    idx, padded, out = _col_index(tuple(x.shape[2:]), kernel, dilation, padding, stride)
    xp = _pad(x, [(p, p) for p in padding], pad_value)
    cols = xp.reshape(x.shape[0], x.shape[1], int(np.prod(padded))).index_select(2, idx.reshape(-1))
    return cols.reshape(x.shape[0], x.shape[1], idx.shape[0], idx.shape[1]), out


def unfold(input, kernel_size, dilation=1, padding=0, stride=1):
    batched = input.ndim == 4
    x = input if batched else input.unsqueeze(0)
    if x.ndim != 4:
        raise NotImplementedError(f"unfold: only 3-D or 4-D input is supported, got {input.ndim}-D")
    args = [_tup(a, 2, "unfold") for a in (kernel_size, dilation, padding, stride)]
    cols, _ = _unfold_nd(x, *args)
    cols = cols.reshape(x.shape[0], -1, cols.shape[-1])
    return cols if batched else cols.squeeze(0)


def fold(input, output_size, kernel_size, dilation=1, padding=0, stride=1):
    batched = input.ndim == 3
    x = input if batched else input.unsqueeze(0)
    size, kernel, dil, pad, st = [_tup(a, 2, "fold") for a in
                                  (output_size, kernel_size, dilation, padding, stride)]
    idx, padded, _ = _col_index(size, kernel, dil, pad, st)
    k, l = idx.shape
    if x.shape[1] % k or x.shape[2] != l:
        raise ValueError(f"fold: expected input of shape (N, C*{k}, {l}), got {tuple(input.shape)}")
    n, c = x.shape[0], x.shape[1] // k
    zeros = _const(x, np.zeros((n, c, int(np.prod(padded))), dtype=np.dtype(x.dtype)))
    src = x.reshape(n, c, k * l)
    placed = apply("index_add.default", [zeros, _const(x, idx.reshape(-1)), src], {"dim": 2})
    y = placed.reshape(n, c, padded[0], padded[1])
    y = y[:, :, pad[0]:pad[0] + size[0], pad[1]:pad[1] + size[1]]
    return y if batched else y.squeeze(0)


# -- convolution -----------------------------------------------------------------------------------
def _conv(input, weight, bias, stride, padding, dilation, groups, nd, name):
    _check_rank(name, "an input", input, (nd + 1, nd + 2), " (unbatched or batched)")
    batched = input.ndim == nd + 2
    x = input if batched else input.unsqueeze(0)
    weight = float_operand(weight, input)
    _check_rank(name, "a weight", weight, (nd + 2,), " (out_channels, in_channels / groups, "
                "*kernel)")
    kernel = tuple(weight.shape[2:])
    stride, dilation = _tup(stride, nd, name), _tup(dilation, nd, name)
    if isinstance(padding, str):
        if padding == "valid":
            padding = (0,) * nd
        elif padding == "same":
            if any(s != 1 for s in stride):
                raise ValueError(f"{name}: padding='same' is not supported for strided convolutions")
            total = [d * (k - 1) for d, k in zip(dilation, kernel)]
            x = _pad(x, [(t // 2, t - t // 2) for t in total])
            padding = (0,) * nd
        else:
            raise ValueError(f"{name}: invalid padding string {padding!r}")
    padding = _tup(padding, nd, name)
    n, c = x.shape[0], x.shape[1]
    o = weight.shape[0]
    if c % groups or o % groups or weight.shape[1] * groups != c:
        raise ValueError(f"{name}: input with {c} channels, weight of shape {tuple(weight.shape)} "
                         f"and groups={groups} do not match")
    cols, out = _unfold_nd(x, kernel, dilation, padding, stride)        # (N, C, K, L)
    k, l = cols.shape[2], cols.shape[3]
    cols = cols.reshape(n, groups, (c // groups) * k, l)
    w = weight.reshape(groups, o // groups, (c // groups) * k)
    y = (w @ cols).reshape((n, o) + tuple(out))
    if bias is not None:
        y = y + float_operand(bias, input).reshape((1, o) + (1,) * nd)
    return y if batched else y.squeeze(0)


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    return _conv(input, weight, bias, stride, padding, dilation, groups, 1, "conv1d")


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    return _conv(input, weight, bias, stride, padding, dilation, groups, 2, "conv2d")


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                     dilation=1):
    _check_rank("conv_transpose2d", "an input", input, (3, 4), " (unbatched or batched)")
    batched = input.ndim == 4
    x = input if batched else input.unsqueeze(0)
    weight = float_operand(weight, input)
    _check_rank("conv_transpose2d", "a weight", weight, (4,), " (in_channels, out_channels / "
                "groups, kH, kW)")
    st, pad, opad, dil = [_tup(a, 2, "conv_transpose2d") for a in
                          (stride, padding, output_padding, dilation)]
    n, cin, h, w_ = x.shape
    kh, kw = weight.shape[2], weight.shape[3]
    cout = weight.shape[1] * groups
    size = [(s - 1) * t - 2 * p + d * (k - 1) + op + 1
            for s, t, p, d, k, op in zip((h, w_), st, pad, dil, (kh, kw), opad)]
    wt = weight.reshape(groups, cin // groups, (cout // groups) * kh * kw).swapaxes(1, 2)
    cols = wt @ x.reshape(n, groups, cin // groups, h * w_)              # (N, g, Cout/g*K, L)
    y = fold(cols.reshape(n, cout * kh * kw, h * w_), size, (kh, kw), dil, pad, st)
    if bias is not None:
        y = y + float_operand(bias, input).reshape(1, cout, 1, 1)
    return y if batched else y.squeeze(0)


# -- pooling ---------------------------------------------------------------------------------------
def _pool_args(x, kernel_size, stride, padding, dilation, nd, name, ceil_mode):
    _check_rank(name, "an input", x, (nd + 1, nd + 2), " (unbatched or batched)")
    if ceil_mode:
        raise NotImplementedError(f"{name}: ceil_mode=True is not supported")
    kernel = _tup(kernel_size, nd, name)
    stride = kernel if stride is None or (not isinstance(stride, numbers.Integral)
                                          and len(stride) == 0) else _tup(stride, nd, name)
    padding, dilation = _tup(padding, nd, name), _tup(dilation, nd, name)
    if any(2 * p > k for p, k in zip(padding, kernel)):
        raise ValueError(f"{name}: pad should be at most half of effective kernel size, but got "
                         f"pad={padding} and kernel_size={kernel}")
    batched = x.ndim == nd + 2
    return (x if batched else x.unsqueeze(0)), batched, kernel, stride, padding, dilation


def _max_pool(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices, nd, name):
    if return_indices:
        raise NotImplementedError(f"{name}: return_indices=True is not supported")
    x, batched, k, s, p, d = _pool_args(input, kernel_size, stride, padding, dilation, nd, name,
                                        ceil_mode)
    cols, out = _unfold_nd(x, k, d, p, s, pad_value=-math.inf)
    y = cols._minmax_dim("max", 2, False)[0].reshape(tuple(x.shape[:2]) + tuple(out))
    return y if batched else y.squeeze(0)


def _avg_pool(input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override,
              nd, name):
    x, batched, k, s, p, d = _pool_args(input, kernel_size, stride, padding, 1, nd, name, ceil_mode)
    cols, out = _unfold_nd(x, k, d, p, s)
    total = cols.sum(2).reshape(tuple(x.shape[:2]) + tuple(out))
    if divisor_override:
        y = total / float(divisor_override)
    elif count_include_pad or not any(p):
        y = total / float(np.prod(k))
    else:
        idx, _, _ = _col_index(tuple(x.shape[2:]), k, d, p, s)
        real = np.pad(np.ones(tuple(x.shape[2:])), [(q, q) for q in p]).reshape(-1)[idx].sum(0)
        y = total / _const(x, real.reshape(out).astype(np.dtype(x.dtype)))
    return y if batched else y.squeeze(0)


def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    return _max_pool(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices, 1,
                     "max_pool1d")


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    return _max_pool(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices, 2,
                     "max_pool2d")


def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
    return _avg_pool(input, kernel_size, stride, padding, ceil_mode, count_include_pad, None, 1,
                     "avg_pool1d")


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    return _avg_pool(input, kernel_size, stride, padding, ceil_mode, count_include_pad,
                     divisor_override, 2, "avg_pool2d")


# -- adaptive pooling and resizing: separable constant matrices ------------------------------------
def _adaptive_matrix(n_in, n_out):
    a = np.zeros((n_out, n_in))
    for i in range(n_out):
        lo, hi = (i * n_in) // n_out, -((-(i + 1) * n_in) // n_out)
        a[i, lo:hi] = 1.0 / (hi - lo)
    return a


def _separable(x, mh, mw):
    dt = np.dtype(x.dtype)
    return _const(x, mh.astype(dt)) @ x @ _const(x, mw.T.astype(dt))


def adaptive_avg_pool2d(input, output_size):
    _check_rank("adaptive_avg_pool2d", "an input", input, (3, 4), " (unbatched or batched)")
    sizes = (output_size,) * 2 if isinstance(output_size, numbers.Integral) else tuple(output_size)
    oh, ow = [int(s) if s is not None else input.shape[input.ndim - 2 + i] for i, s in enumerate(sizes)]
    h, w = input.shape[-2], input.shape[-1]
    return _separable(input, _adaptive_matrix(h, oh), _adaptive_matrix(w, ow))


def _src_scale(n_in, n_out, scale):
    return 1.0 / scale if scale is not None else n_in / n_out


def _linear_matrix(n_in, n_out, align_corners, scale):
    i = np.arange(n_out, dtype=np.float64)
    if align_corners:
        src = i * ((n_in - 1) / (n_out - 1)) if n_out > 1 else np.zeros(n_out)
    else:
        src = np.maximum((i + 0.5) * _src_scale(n_in, n_out, scale) - 0.5, 0.0)
    i0 = np.minimum(np.floor(src).astype(np.int64), n_in - 1)
    i1 = np.minimum(i0 + 1, n_in - 1)
    lam = src - i0
    m = np.zeros((n_out, n_in))
    np.add.at(m, (np.arange(n_out), i0), 1.0 - lam)
    np.add.at(m, (np.arange(n_out), i1), lam)
    return m


def interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                recompute_scale_factor=None, antialias=False):
    if input.ndim != 4:
        raise NotImplementedError(f"interpolate: only 4-D input is supported, got {input.ndim}-D")
    if (size is None) == (scale_factor is None):
        raise ValueError("interpolate: exactly one of size or scale_factor must be given")
    h, w = input.shape[2], input.shape[3]
    if size is not None:
        oh, ow = _tup(size, 2, "interpolate")
        scales = (None, None)
    else:
        sf = (float(scale_factor),) * 2 if isinstance(scale_factor, numbers.Number) \
            else tuple(float(s) for s in scale_factor)
        oh, ow = math.floor(h * sf[0]), math.floor(w * sf[1])
        scales = (None, None) if recompute_scale_factor else sf
    if mode == "nearest":
        if align_corners is not None:
            raise ValueError("align_corners option can only be set with the interpolating modes: "
                             "linear | bilinear | bicubic | trilinear")
        ih = np.minimum(np.floor(np.arange(oh) * _src_scale(h, oh, scales[0])).astype(np.int64), h - 1)
        iw = np.minimum(np.floor(np.arange(ow) * _src_scale(w, ow, scales[1])).astype(np.int64), w - 1)
        return input.index_select(2, ih).index_select(3, iw)
    if mode == "bilinear":
        ac = bool(align_corners)
        return _separable(input, _linear_matrix(h, oh, ac, scales[0]),
                          _linear_matrix(w, ow, ac, scales[1]))
    raise NotImplementedError(f"interpolate: mode {mode!r} is not supported (nearest, bilinear)")


front_all(globals(), __all__)   # (tracer/nn_functional.py: a tensor input, or NotATensorError)
