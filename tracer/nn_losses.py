"""``gj.nn.functional`` losses: torch.nn.functional semantics as composites.

Contract
- Same rules as ``tracer/nn_functional.py``: torch names, signatures and
  results; built from existing differentiable ops only (gradients of any order
  come from the parts); tensors or tracers; targets may be arrays.
- ``reduction`` is 'none' | 'mean' | 'sum' (kl_div also 'batchmean'); the
  legacy ``size_average`` / ``reduce`` flags map to it as in torch.
- ``mse_loss`` / ``l1_loss`` / ``huber_loss`` take torch 2.13's elementwise ``weight`` (the
  input's shape): the loss is multiplied by it; 'mean' is sum(w * loss) / sum(w) for mse and
  l1 but mean(w * loss) for huber, exactly as torch.
- Class-index targets (integer dtype) pick log-probabilities through a one-hot
  mask ``target == arange(C)`` built with comparisons (traceable: the target
  may be a tracer), so an ``ignore_index`` outside [0, C) needs no bounds
  check; ``cross_entropy`` with a floating target of the input's shape takes
  class probabilities. Weighted means divide by the summed target weights, and
  label smoothing mixes in ``-sum_c w_c log p_c / C`` exactly as torch does.
- Stable forms: ``binary_cross_entropy_with_logits`` and ``soft_margin_loss``
  use ``logaddexp(0, z)`` for ``log(1 + exp(z))``; ``binary_cross_entropy``
  clamps its logs at -100 like torch, through its own op (``_binary_cross_entropy``,
  tracer/ops_math.py) so that its gradient is torch's ``(p - t) / max(p (1 - p), 1e-12)``:
  finite at p = 0 or 1, where the clamped logs' chain gives 0 * inf = NaN. (The one op
  in these composites; its gradient in the target is the clamped value's, finite there.)
"""
from __future__ import annotations

import numpy as np

from gradjit.tracer.dispatch import apply, float_operand
from gradjit.tracer.methods_math import binop


__all__ = ["mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "binary_cross_entropy",
           "binary_cross_entropy_with_logits", "cross_entropy", "nll_loss", "kl_div",
           "soft_margin_loss"]


def _reduction(size_average, reduce, reduction):
    if size_average is None and reduce is None:
        return reduction
    if reduce is False:
        return "none"
    return "sum" if size_average is False else "mean"


def _reduce(loss, reduction):
    if reduction == "none":
        return loss
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    raise ValueError(f"{reduction} is not a valid value for reduction")


def _softplus0(z):
    return binop("logaddexp.default", 0.0, z)


def _weighted(loss, weight, input, reduction, mean_by_weight, name):
    """torch 2.13's elementwise ``weight`` (the input's shape): loss * weight, reduced;
    'mean' divides by sum(weight) for mse / l1 and by the element count for huber."""
    w = float_operand(weight, input)
    if tuple(w.shape) != tuple(input.shape):
        raise ValueError(f"{name}: Weights and input must have the same size (weight "
                         f"{tuple(w.shape)}, input {tuple(input.shape)})")
    loss = loss * w
    if reduction == "mean" and mean_by_weight:
        return loss.sum() / w.sum()
    return _reduce(loss, reduction)


def mse_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    d = input - float_operand(target, input)
    reduction = _reduction(size_average, reduce, reduction)
    if weight is not None:
        return _weighted(d * d, weight, input, reduction, True, "mse_loss")
    return _reduce(d * d, reduction)


def l1_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    loss = (input - float_operand(target, input)).abs()
    reduction = _reduction(size_average, reduce, reduction)
    if weight is not None:
        return _weighted(loss, weight, input, reduction, True, "l1_loss")
    return _reduce(loss, reduction)


def _huber(input, target, delta, scale_by_delta):
    from gradjit.tracer.api import where
    d = input - float_operand(target, input)
    a = d.abs()
    quad = d * d * 0.5
    if scale_by_delta:        # huber: 0.5 d^2 | delta (|d| - delta / 2)
        return where(a < delta, quad, (a - 0.5 * delta) * delta)
    return where(a < delta, quad / delta, a - 0.5 * delta)   # smooth_l1


def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction="mean", beta=1.0):
    reduction = _reduction(size_average, reduce, reduction)
    if beta == 0.0:
        return l1_loss(input, target, reduction=reduction)
    return _reduce(_huber(input, target, float(beta), False), reduction)


def huber_loss(input, target, reduction="mean", delta=1.0, weight=None):
    loss = _huber(input, target, float(delta), True)
    if weight is not None:
        return _weighted(loss, weight, input, reduction, False, "huber_loss")
    return _reduce(loss, reduction)


def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None,
                         reduction="mean"):
    t = float_operand(target, input)
    loss = apply("_binary_cross_entropy.default", [input, t], {})   # (torch's gradient at 0, 1)
    if weight is not None:
        loss = loss * float_operand(weight, input)
    return _reduce(loss, _reduction(size_average, reduce, reduction))


def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None, reduce=None,
                                     reduction="mean", pos_weight=None):
    t = float_operand(target, input)
    sp = _softplus0(-input)                    # -log sigmoid(x)
    if pos_weight is not None:
        sp = sp * ((float_operand(pos_weight, input) - 1.0) * t + 1.0)
    loss = (1.0 - t) * input + sp
    if weight is not None:
        loss = loss * float_operand(weight, input)
    return _reduce(loss, _reduction(size_average, reduce, reduction))


def _class_dim(input):
    return 0 if input.ndim == 1 else 1


def _weight_view(weight, input):
    w = float_operand(weight, input)
    cd = _class_dim(input)
    return w.reshape((w.shape[0],) + (1,) * (input.ndim - cd - 1))


def _pick(logp, target, weight, ignore_index):
    """(-w[t] * logp[t], w[t], valid) per sample, zero where target == ignore_index."""
    t = float_operand(target, logp)
    if np.dtype(t.dtype).kind not in "iu":
        raise TypeError(f"nll_loss: expected an integer class-index target, got {np.dtype(t.dtype).name}")
    cd = _class_dim(logp)
    c = logp.shape[cd]
    classes = np.arange(c, dtype=t.dtype).reshape((c,) + (1,) * (logp.ndim - cd - 1))
    onehot = (t.unsqueeze(cd) == float_operand(classes, t)).to(logp.dtype)
    if weight is not None:
        onehot = onehot * _weight_view(weight, logp)
    valid = (t != ignore_index).to(logp.dtype)
    w_t = onehot.sum(cd) * valid
    picked = (logp * onehot).sum(cd)
    return -picked * valid, w_t, valid


def _weighted_mean(total, w_t, valid):
    """total / sum(w_t), torch's 'mean' over the kept samples. Every sample ignored: the
    value is NaN (0 / 0) as torch's, but the gradient is zero as torch's (the quotient with a
    denominator of 1 carries it; the NaN is added as a constant), not 0 * inf = NaN."""
    from gradjit.tracer.api import where
    none_kept = valid.sum() == 0
    nan_if_none = where(none_kept, float("nan"), 0.0).to(total.dtype)   # (two scalars: float64)
    return total / where(none_kept, 1.0, w_t.sum()) + nan_if_none


def nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
             reduction="mean"):
    reduction = _reduction(size_average, reduce, reduction)
    loss, w_t, valid = _pick(input, target, weight, ignore_index)
    if reduction == "mean":
        return _weighted_mean(loss.sum(), w_t, valid)
    return _reduce(loss, reduction)


def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
                  reduction="mean", label_smoothing=0.0):
    reduction = _reduction(size_average, reduce, reduction)
    cd = _class_dim(input)
    c = input.shape[cd]
    logp = input.log_softmax(cd)
    eps = float(label_smoothing)
    t = float_operand(target, input)
    if np.dtype(t.dtype).kind == "f":         # class probabilities
        if eps > 0.0:
            t = t * (1.0 - eps) + eps / c
        prod = logp * t
        if weight is not None:
            prod = prod * _weight_view(weight, input)
        loss = -prod.sum(cd)
        if reduction == "mean":
            return loss.sum() / (input.numel() // c)
        return _reduce(loss, reduction)
    nll = nll_loss(logp, t, weight, ignore_index=ignore_index, reduction=reduction)
    if eps <= 0.0:
        return nll
    wl = logp * _weight_view(weight, input) if weight is not None else logp
    smooth = -wl.sum(cd) * (t != ignore_index).to(logp.dtype)
    if reduction == "mean":
        _, w_t, valid = _pick(logp, t, weight, ignore_index)
        smooth = _weighted_mean(smooth.sum(), w_t, valid)
    else:
        smooth = _reduce(smooth, reduction)
    return nll * (1.0 - eps) + smooth * (eps / c)


def kl_div(input, target, size_average=None, reduce=None, reduction="mean", log_target=False):
    reduction = _reduction(size_average, reduce, reduction)
    t = float_operand(target, input)
    loss = t.exp() * (t - input) if log_target else t.xlogy(t) - t * input
    if reduction == "batchmean":
        return loss.sum() / (input.shape[0] if input.ndim else 1)
    return _reduce(loss, reduction)


def soft_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    return _reduce(_softplus0(-float_operand(target, input) * input), _reduction(size_average, reduce, reduction))
