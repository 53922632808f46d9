"""``gj.nn.functional``: torch.nn.functional activations and layers as composites.

Contract
- Every function takes torch.nn.functional's name, signature and semantics and
  is spelled in terms of existing differentiable ops (``where``, ``clamp``,
  ``logaddexp``, ``erf``, ``matmul``, ``index_select`` ...), so it adds no op,
  no formula and no code generation: gradients (any order) come from the parts,
  and the same code runs on eager ``Tensor``s and on ``Tracer``s (``gj.grad``).
  Exception: elu / celu / selu are the op ``elu`` (``tracer/ops_math.py``) with torch's
  formulas, for their derivatives at exactly 0 (first: the negative side's; higher: 0).
- Kinks follow torch where a ``where`` can say it: relu6 / hardtanh /
  hardsigmoid pass no gradient at their bounds; leaky_relu / threshold /
  hardshrink / softshrink select with strict comparisons as torch does.
  Known difference: hardswish at exactly x = 3 has gradient 1 (torch: 1.5).
- Arrays and Python scalars beside a tensor become constants of its front end; that holds
  for the first argument (``input``) too. Where no argument is a tensor or a traced array
  (plain NumPy arrays outside ``gj.grad`` / ``gj.jit``), every function raises
  ``NotATensorError`` (a TypeError) naming itself and saying to pass ``gj.tensor(x)``, as
  torch.nn.functional needs tensors (``torch_front``, applied to every public function of
  the nn_* modules).
- ``inplace=True`` (relu, relu6, hardtanh, leaky_relu, elu, celu, selu, silu, mish,
  hardsigmoid, hardswish, threshold, dropout) writes the result into the input and returns
  it, as torch: a ``Tensor`` through its in-place machinery (``x.relu_()``'s: the version
  counter is bumped, a leaf that requires grad refuses under grad mode); a traced array
  (``gj.grad`` / ``gj.jit``) by assignment ``x[...] = result``, so every name bound to it,
  and its views, see the new values there too (the caller's own array is not written:
  traced functions are pure).
- ``dropout`` draws its mask with NumPy from ``generator`` (an
  ``np.random.Generator``, a ``gj.Generator`` or an int seed) and multiplies by it as a constant,
  so backward uses the same mask. Under ``gj.jit`` / ``gj.grad`` a mask drawn at
  trace time would be frozen into the compiled code, so dropout raises there
  (``tracer/rng_guard.py``) unless ``generator`` is an int seed (the same mask
  on every call, as eager calls with that seed give).
- ``embedding(padding_idx=p)``: row p keeps its value in the output but gets
  no gradient (``_stop_gradient``: ``detach``, for tensors and tracers alike).
- Losses live in ``tracer/nn_losses.py`` (re-exported by ``gradjit.nn.functional``).
"""
from __future__ import annotations

import functools
import inspect
import math
import numbers

import numpy as np

from gradjit.tracer.api import where
from gradjit.tracer.dispatch import apply, as_operand, float_operand, norm_dim
from gradjit.tracer.methods_math import binop
from gradjit.tracer.registry import GradjitError, GradjitRuntimeError, user_site
from gradjit.tracer.rng_guard import check_draw


__all__ = ["relu", "relu6", "leaky_relu", "elu", "celu", "selu", "gelu", "silu", "mish",
           "softplus", "softsign", "softshrink", "hardshrink", "hardtanh", "hardsigmoid",
           "hardswish", "threshold", "glu", "prelu", "sigmoid", "tanh", "softmax",
           "log_softmax", "normalize", "cosine_similarity", "pairwise_distance", "linear",
           "bilinear", "layer_norm", "dropout", "embedding", "one_hot"]

_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def _const(like, array):
    """An array made here (nobody writes it later): cast to like's float dtype up front."""
    a = np.asarray(array)
    if a.dtype.kind == "f" and np.dtype(like.dtype).kind == "f":
        a = a.astype(like.dtype, copy=False)
    return float_operand(a, like)


def _check_rank(name, what, x, ranks, layout=""):
    """Refuse ``x`` (``what`` of ``name``) unless its ndim is in ``ranks``: torch's
    RuntimeError, naming the ranks, the layout and the shape given, at the user's line.
    ``ranks``: a tuple, or an int k for "at least k-D"."""
    if x.ndim not in (ranks if isinstance(ranks, tuple) else range(ranks, 64)):
        want = (" or ".join(f"{r}-D" for r in ranks) if isinstance(ranks, tuple)
                else f"at least {ranks}-D")
        raise GradjitRuntimeError(f"{name}: expected {what} of {want}{layout}, but got "
                                  f"{x.ndim}-D of shape {tuple(x.shape)}", user_site(2))


class NotATensorError(GradjitError, TypeError):
    """A ``gj.nn.functional`` function called with no tensor and no traced array."""


def _is_array_like_tensor(a):
    return hasattr(a, "_apply")          # a Tensor or a Tracer (arrays and scalars have none)


def torch_front(fn):
    """``fn`` (a torch.nn.functional-shaped function, first parameter the input) with its
    input checked: a plain array or scalar becomes a constant of the front end of another
    argument that is a tensor or tracer, and with none there it raises NotATensorError (the
    parts would meet ``ndarray.relu``: an internal AttributeError)."""
    first = next(iter(inspect.signature(fn).parameters))

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        x = args[0] if args else kwargs.get(first)
        if x is None or _is_array_like_tensor(x):
            return fn(*args, **kwargs)
        like = next((a for a in (*args[1:], *kwargs.values()) if _is_array_like_tensor(a)), None)
        if like is None:
            raise NotATensorError(
                f"gj.nn.functional.{fn.__name__}: argument {first!r} must be a tensor, not "
                f"{type(x).__module__}.{type(x).__name__}: pass gj.tensor(x), as torch needs "
                f"tensors (inside gj.grad / gj.jit: a traced argument)", user_site())
        x = as_operand(x, like)
        return fn(x, *args[1:], **kwargs) if args else fn(*args, **{**kwargs, first: x})
    return wrapper


def front_all(namespace, names):
    """Apply ``torch_front`` to each public function ``names`` of a module's namespace."""
    for name in names:
        namespace[name] = torch_front(namespace[name])


def _softplus0(z):
    """log(1 + exp(z)), stable for any z (logaddexp(0, z))."""
    return binop("logaddexp.default", 0.0, z)


def _stop_gradient(x):
    """x's values with a zero gradient."""
    return x.detach()


# -- activations ---------------------------------------------------------------------------
def _act(input, inplace, fn, name):
    """fn(input); with ``inplace=True`` written into ``input`` and ``input`` returned, as
    torch: a Tensor through its in-place machinery (``Tensor._apply_inplace``: version bump,
    a leaf that requires grad refuses), a traced array by assignment (``x[...] = y``,
    tracer/tracer_setitem.py: every name bound to it, and its views, see the new values)."""
    if not inplace:
        return fn(input)
    if hasattr(input, "_apply_inplace"):
        return input._apply_inplace(fn, f"{name}(inplace=True)")
    input[...] = fn(input)
    return input


def relu(input, inplace=False):
    return _act(input, inplace, lambda x: x.relu(), "relu")


def hardtanh(input, min_val=-1.0, max_val=1.0, inplace=False):
    return _act(input, inplace, lambda x: where(x <= min_val, float(min_val),
                                                where(x >= max_val, float(max_val), x)), "hardtanh")


def relu6(input, inplace=False):
    return hardtanh(input, 0.0, 6.0, inplace)


def leaky_relu(input, negative_slope=0.01, inplace=False):
    return _act(input, inplace, lambda x: where(x > 0, x, x * float(negative_slope)), "leaky_relu")


def _elu(x, alpha, scale=1.0, input_scale=1.0):
    return apply("elu.default", [x], {"alpha": float(alpha), "scale": float(scale),
                                      "input_scale": float(input_scale)})


def elu(input, alpha=1.0, inplace=False):
    return _act(input, inplace, lambda x: _elu(x, alpha), "elu")


def celu(input, alpha=1.0, inplace=False):
    return _act(input, inplace, lambda x: _elu(x, alpha, 1.0, 1.0 / float(alpha)), "celu")


def selu(input, inplace=False):
    return _act(input, inplace, lambda x: _elu(x, _SELU_ALPHA, _SELU_SCALE), "selu")


def gelu(input, approximate="none"):
    if approximate == "none":
        return input * 0.5 * ((input * (1.0 / math.sqrt(2.0))).erf() + 1.0)
    if approximate == "tanh":
        inner = (input + input * input * input * 0.044715) * math.sqrt(2.0 / math.pi)
        return input * 0.5 * (inner.tanh() + 1.0)
    raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")


def silu(input, inplace=False):
    return _act(input, inplace, lambda x: x * x.sigmoid(), "silu")


def softplus(input, beta=1.0, threshold=20.0):
    b = float(beta)
    soft = _softplus0(input * b) / b if b != 1.0 else _softplus0(input)
    return where(input * b > threshold, input, soft)


def mish(input, inplace=False):
    return _act(input, inplace, lambda x: x * _softplus0(x).tanh(), "mish")


def softsign(input):
    return input / (input.abs() + 1.0)


def softshrink(input, lambd=0.5):
    lam = float(lambd)
    return where(input > lam, input - lam, where(input < -lam, input + lam, 0.0))


def hardshrink(input, lambd=0.5):
    lam = float(lambd)
    return where(input.abs() > lam, input, 0.0)


def hardsigmoid(input, inplace=False):
    return _act(input, inplace, lambda x: relu6(x + 3.0) / 6.0, "hardsigmoid")


def hardswish(input, inplace=False):
    return _act(input, inplace, lambda x: x * relu6(x + 3.0) / 6.0, "hardswish")


def threshold(input, threshold, value, inplace=False):
    return _act(input, inplace, lambda x: where(x > threshold, x, float(value)), "threshold")


def glu(input, dim=-1):
    d = norm_dim(dim, input.ndim, "glu")
    if input.shape[d] % 2:
        raise ValueError(f"glu: halving dimension must be even, but dimension {d} is size "
                         f"{input.shape[d]}")
    a, b = input.chunk(2, d)
    return a * b.sigmoid()


def prelu(input, weight):
    weight = float_operand(weight, input)
    _check_rank("prelu", "a weight", weight, (0, 1), " (a scalar or one per channel)")
    channels = input.shape[1] if input.ndim >= 2 else 1
    if weight.numel() not in (1, channels):
        raise GradjitRuntimeError(f"prelu: Mismatch of parameter numbers and input channel size: "
                                  f"a weight of shape {tuple(weight.shape)} for an input of "
                                  f"shape {tuple(input.shape)} ({channels} channels)", user_site())
    if weight.numel() == 1:
        weight = weight.reshape(())      # (a (1,) weight keeps a 0-d input 0-d, as torch)
    elif input.ndim >= 2:
        weight = weight.reshape((weight.shape[0],) + (1,) * (input.ndim - 2))
    return where(input > 0, input, input * weight)


def sigmoid(input):
    return input.sigmoid()


def tanh(input):
    return input.tanh()


def _softmax_dim(ndim):
    return 0 if ndim in (0, 1, 3) else 1     # torch's legacy implicit dim


def softmax(input, dim=None, _stacklevel=3, dtype=None):
    x = input if dtype is None else input.to(dtype)
    return x.softmax(_softmax_dim(x.ndim) if dim is None else dim)


def log_softmax(input, dim=None, _stacklevel=3, dtype=None):
    x = input if dtype is None else input.to(dtype)
    return x.log_softmax(_softmax_dim(x.ndim) if dim is None else dim)


# -- distances and normalisation ------------------------------------------------------------
def normalize(input, p=2.0, dim=1, eps=1e-12, out=None):
    return input / input.norm(p, dim, keepdim=True).clamp_min(eps)


def cosine_similarity(x1, x2, dim=1, eps=1e-8):
    x2 = float_operand(x2, x1)
    shape = tuple(np.broadcast_shapes(tuple(x1.shape), tuple(x2.shape)))
    x1, x2 = x1.expand(shape), x2.expand(shape)
    n1 = x1.norm(2, dim, keepdim=True).clamp_min(eps)
    n2 = x2.norm(2, dim, keepdim=True).clamp_min(eps)
    return ((x1 / n1) * (x2 / n2)).sum(dim)


def pairwise_distance(x1, x2, p=2.0, eps=1e-6, keepdim=False):
    x2 = float_operand(x2, x1)
    diff = x1 - x2 + eps
    return diff.norm(p, -1, keepdim) if diff.ndim else diff.abs()


def linear(input, weight, bias=None):
    weight = float_operand(weight, input)
    _check_rank("linear", "a weight", weight, (1, 2), " (out_features, in_features)")
    out = input @ (weight.t() if weight.ndim == 2 else weight)
    return out if bias is None else out + float_operand(bias, input)


def bilinear(input1, input2, weight, bias=None):
    weight, input2 = float_operand(weight, input1), float_operand(input2, input1)
    o, i, j = weight.shape
    tmp = (input1 @ weight.permute(1, 0, 2).reshape(i, o * j)).reshape(tuple(input1.shape[:-1]) + (o, j))
    out = (tmp * input2.unsqueeze(-2)).sum(-1)
    return out if bias is None else out + float_operand(bias, input1)


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    if isinstance(normalized_shape, numbers.Integral):
        normalized_shape = (int(normalized_shape),)
    k = len(normalized_shape)
    if tuple(input.shape[input.ndim - k:]) != tuple(normalized_shape):
        raise ValueError(f"layer_norm: normalized_shape {tuple(normalized_shape)} does not match "
                         f"the trailing dims of an input of shape {tuple(input.shape)}")
    dims = tuple(range(input.ndim - k, input.ndim))
    centered = input - input.mean(dims, keepdim=True)
    var = (centered * centered).mean(dims, keepdim=True)
    out = centered * (var + eps).rsqrt()
    if weight is not None:
        out = out * float_operand(weight, input)
    return out if bias is None else out + float_operand(bias, input)


# -- randomness and lookup ---------------------------------------------------------------------
def dropout(input, p=0.5, training=True, inplace=False, *, generator=None):
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0.0:
        return input
    if p == 1.0:
        return _act(input, inplace, lambda x: x * 0.0, "dropout")
    if not isinstance(generator, numbers.Integral):   # a seed is deterministic: no draw to freeze
        check_draw("dropout (training=True)")
    rng = getattr(generator, "rng", generator)        # gj.Generator wraps an np Generator
    rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    mask = (rng.random(tuple(input.shape)) >= p).astype(input.dtype) / np.asarray(1.0 - p, input.dtype)
    return _act(input, inplace, lambda x: x * _const(x, mask.astype(x.dtype)), "dropout")


def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0,
              scale_grad_by_freq=False, sparse=False):
    if max_norm is not None or scale_grad_by_freq:
        raise NotImplementedError("embedding: max_norm and scale_grad_by_freq are not supported")
    idx = float_operand(input, weight) if not hasattr(input, "_apply") else input
    if np.dtype(idx.dtype).kind not in "iu":
        raise TypeError(f"embedding: indices must be integers, got {np.dtype(idx.dtype).name}")
    n, d = weight.shape
    rows = weight.index_select(0, idx.reshape(-1))
    if padding_idx is not None:
        pad = int(padding_idx) + (n if padding_idx < 0 else 0)
        keep = (idx.reshape(-1, 1) != pad).to(weight.dtype)
        rows = rows * keep + _stop_gradient(rows) * (1.0 - keep)
    return rows.reshape(tuple(idx.shape) + (d,))


def one_hot(tensor, num_classes=-1):
    """torch's: int64 rows with a 1 at each class index (shape ``(*tensor.shape, C)``);
    ``num_classes=-1``: C is the largest value + 1. The values are checked where they are
    known (a tensor); a traced index needs ``num_classes`` (the shape depends on it), and
    its values out of [0, C) give rows of zeros."""
    if np.dtype(tensor.dtype) != np.int64:
        raise GradjitRuntimeError("one_hot is only applicable to index tensor of type "
                                  "LongTensor.", user_site())
    known = None if _is_traced(tensor) else np.asarray(tensor.detach())
    if known is not None and known.size:
        if known.min() < 0:
            raise GradjitRuntimeError("Class values must be non-negative.", user_site())
        if num_classes != -1 and known.max() >= num_classes:
            raise GradjitRuntimeError("Class values must be smaller than num_classes.",
                                      user_site())
    if num_classes == -1:
        if known is None:
            raise GradjitError("one_hot: num_classes=-1 infers the number of classes from the "
                               "values, which are not known inside gj.grad / gj.jit: pass "
                               "num_classes", user_site())
        if not known.size:
            raise GradjitRuntimeError("Can not infer total number of classes from empty tensor.",
                                      user_site())
        num_classes = int(known.max()) + 1
    classes = as_operand(np.arange(int(num_classes), dtype=np.int64), tensor)
    return tensor.reshape(tuple(tensor.shape) + (1,)).eq(classes).to(np.int64)


def _is_traced(x):
    from gradjit.tracer.tensor import Tensor   # (tensor.py imports this module's API)
    return not isinstance(x, Tensor)


front_all(globals(), __all__)
