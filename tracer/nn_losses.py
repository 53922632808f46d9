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
- Class-index targets (integer dtype, the input's shape less the class dim) pick
  log-probabilities with a ``gather`` along the class dim (ignored samples gather class 0
  and are masked). A target outside [0, C) that is not ``ignore_index`` raises, as torch:
  ``TargetBoundsError`` (an IndexError, "Target 7 is out of bounds.") when its values are
  known (eager tensors, arrays, constants of a trace), else the gather's run-time bounds
  check (``IndexBoundsError``; a negative target t shows there as index t - C, moved out of
  the range the gather would wrap). ``cross_entropy`` with a floating target of the input's
  shape takes class probabilities; any other floating target raises as torch
  (RuntimeError: class indices must be integers). ``binary_cross_entropy(_with_logits)``
  refuse a target not of the input's shape (ValueError), as torch: no broadcasting. Weighted means divide by the summed target weights, and
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
from gradjit.tracer.nn_functional import front_all
from gradjit.tracer.registry import GradjitError, GradjitRuntimeError, ShapeError, user_site


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
    if tuple(t.shape) != tuple(input.shape):
        raise ShapeError(f"binary_cross_entropy: Using a target size {tuple(t.shape)} that is "
                         f"different to the input size {tuple(input.shape)} is deprecated. Please "
                         f"ensure they have the same size.", user_site(2))
    loss = apply("_binary_cross_entropy.default", [input, t], {})   # (torch's gradient at 0, 1)
    if weight is not None:
        loss = loss * float_operand(weight, input)
    return _reduce(loss, _reduction(size_average, reduce, reduction))


def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None, reduce=None,
                                     reduction="mean", pos_weight=None):
    t = float_operand(target, input)
    if tuple(t.shape) != tuple(input.shape):
        raise ShapeError(f"binary_cross_entropy_with_logits: Target size {tuple(t.shape)} must be "
                         f"the same as input size {tuple(input.shape)}", user_site(2))
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


class TargetBoundsError(GradjitError, IndexError):
    """A class-index target outside [0, C) that is not ``ignore_index`` (torch's IndexError)."""


def _known(t):
    """t's values where they are known now (an eager tensor, a constant of the trace), else None."""
    from gradjit.tracer.tensor import Tensor
    if isinstance(t, Tensor):
        return t.data
    graph = getattr(t, "graph", None)
    return None if graph is None else graph.constants.get(t.value)


def _index_target(logp, target, name):
    """target as an integer operand of logp's shape less its class dim (or raise, as torch)."""
    t = float_operand(target, logp)
    cd = _class_dim(logp)
    if np.dtype(t.dtype).kind not in "iu":
        raise GradjitRuntimeError(
            f"{name}: expected an integer class-index target (target dtype to be Long or Byte), "
            f"but got {np.dtype(t.dtype).name} of shape {tuple(t.shape)}; class probabilities "
            f"need the input's shape {tuple(logp.shape)}", user_site(3))
    want = tuple(logp.shape[:cd]) + tuple(logp.shape[cd + 1:])
    if tuple(t.shape) != want:
        raise ShapeError(f"{name}: a class-index target of shape {tuple(t.shape)} does not "
                         f"match an input of shape {tuple(logp.shape)} (expected {want})",
                         user_site(3))
    return t


def _pick(logp, t, weight, ignore_index, name="nll_loss"):
    """(-w[t] * logp[t], w[t], valid) per sample, zero where target == ignore_index.

    A gather along the class dim: its index is bounds-checked when it runs (traced targets),
    so a target outside [0, C) raises instead of picking nothing. Ignored samples gather
    class 0 (masked after); a negative target is moved below -C, since the gather would wrap
    it (NumPy's negative indices): it is reported as index t - C. Known targets are checked
    here first, in torch's words."""
    from gradjit.tracer.api import where
    cd = _class_dim(logp)
    c = logp.shape[cd]
    known = _known(t)
    if known is not None:
        known = np.asarray(known)
        bad = (known != ignore_index) & ((known < 0) | (known >= c))
        if bad.any():
            raise TargetBoundsError(f"{name}: Target {known[bad].flat[0]} is out of bounds. "
                                    f"(classes 0..{c - 1}, ignore_index={ignore_index}, input "
                                    f"{tuple(logp.shape)})", user_site(3))
    keep = t != ignore_index
    valid = keep.to(logp.dtype)
    idx = where(keep, where(t < 0, t - c, t), 0)
    picked = logp.gather(cd, idx.unsqueeze(cd)).squeeze(cd)
    if weight is None:
        w_t = valid
    else:
        w = float_operand(weight, logp)
        w_t = w.index_select(0, idx.reshape(-1)).reshape(tuple(idx.shape)) * valid
    return -picked * w_t, w_t, valid


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
    t = _index_target(input, target, "nll_loss")
    loss, w_t, valid = _pick(input, t, weight, ignore_index)
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
    if np.dtype(t.dtype).kind == "f" and tuple(t.shape) == tuple(input.shape):   # probabilities
        if eps > 0.0:
            t = t * (1.0 - eps) + eps / c
        prod = logp * t
        if weight is not None:
            prod = prod * _weight_view(weight, input)
        loss = -prod.sum(cd)
        if reduction == "mean":
            return loss.sum() / (input.numel() // c)
        return _reduce(loss, reduction)
    t = _index_target(logp, t, "cross_entropy")
    loss, w_t, valid = _pick(logp, t, weight, ignore_index, "cross_entropy")
    nll = _weighted_mean(loss.sum(), w_t, valid) if reduction == "mean" else _reduce(loss, reduction)
    if eps <= 0.0:
        return nll
    wl = logp * _weight_view(weight, input) if weight is not None else logp
    smooth = -wl.sum(cd) * valid
    if reduction == "mean":
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


front_all(globals(), __all__)   # (tracer/nn_functional.py: a tensor input, or NotATensorError)
