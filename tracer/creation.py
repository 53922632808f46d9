"""Creation and conversion functions (torch names and semantics): ``gj.zeros`` ...

Contract
- Every function returns a fresh leaf ``Tensor`` with no history (creation is
  not differentiable); ``requires_grad=True`` makes it a leaf that requires
  grad (float dtypes only, as torch). ``*size`` follows torch: ``zeros(2, 3)``,
  ``zeros((2, 3))`` and ``zeros([2, 3])`` agree.
- dtypes: ``dtype=`` takes anything ``np.dtype`` accepts. The default float
  dtype is float64 (NumPy's, and ``gj.tensor``'s), not torch's float32. As
  torch, ``arange`` / ``full`` infer int64 from all-integer arguments (bool
  for a bool fill) and ``randint`` returns int64.
- ``as_tensor(data, dtype=None)`` shares memory where NumPy can (a Tensor of
  the right dtype is returned as is); ``from_numpy`` / ``tensor`` are in
  ``tensor.py``.
- ``*_like(input, ...)`` take a ``Tensor``, an array or a tracer; on a tracer
  (inside ``gj.jit`` / ``gj.grad``) they return a graph constant of the same
  shape and (default) dtype, so traced code can build masks and buffers.
  ``empty`` / ``empty_like`` return zeros (deterministic).
- ``device=`` (``'cpu'``, ``'cuda'``, ``'cuda:0'`` or a ``gj.device``-like object, as
  ``gj.tensor`` takes it): the result is made on the host and copied to the GPU once. The
  ``*_like`` functions default to ``input``'s device (torch); on a tracer the transform's
  device decides, and ``device=`` is only checked.
- Randomness: ``Generator(seed)`` wraps ``np.random.default_rng``;
  ``manual_seed(seed)`` reseeds the default generator (and returns it);
  ``rand`` / ``randn`` / ``randint`` (and ``*_like``) draw from ``generator=``
  or the default one. Same seed, same numbers; the streams are NumPy's, not
  torch's.
"""
from __future__ import annotations

import numbers

import numpy as np

from gradjit.tracer.device import canonical, is_device_array
from gradjit.tracer.hooks import HOOKS
from gradjit.tracer.methods_creation import size_tuple
from gradjit.tracer.registry import real_only
from gradjit.tracer.rng_guard import check_draw
from gradjit.tracer.tensor import Tensor

_DEFAULT_FLOAT = np.dtype(np.float64)


def _leaf(array, requires_grad=False, device=None):
    array = np.asarray(array)
    if canonical(device) == "cuda":
        HOOKS.cuda.require("a creation function's device='cuda'")
        array = HOOKS.cuda.to_device(array)
    return Tensor(array, requires_grad=requires_grad)


def _float_dtype(dtype):
    return _DEFAULT_FLOAT if dtype is None else np.dtype(dtype)


def _scalar(x):
    x = getattr(x, "data", x)
    return x.item() if isinstance(x, (np.ndarray, np.generic)) else x


# -- conversion -------------------------------------------------------------------------------
def as_tensor(data, dtype=None, device=None):
    """``data`` as a Tensor, sharing memory when it already is one (or a NumPy array) of
    the requested dtype and device; lists and scalars are copied (as ``torch.as_tensor``)."""
    if isinstance(data, Tensor):
        out = data if dtype is None or np.dtype(dtype) == data.dtype else data.to(dtype)
        return out if device is None else out.to(device)
    if is_device_array(data):
        return as_tensor(Tensor(data), dtype, device)
    data = np.asarray(data, dtype=dtype)
    real_only(data.dtype, "gj.as_tensor's data")
    return _leaf(data, False, device) if device is not None else Tensor(data)


# -- filled ---------------------------------------------------------------------------------------
def full(size, fill_value, *, dtype=None, requires_grad=False, device=None):
    fill_value = _scalar(fill_value)
    if dtype is None:
        if isinstance(fill_value, bool):
            dtype = np.bool_
        elif isinstance(fill_value, numbers.Integral):
            dtype = np.int64
        elif isinstance(fill_value, numbers.Complex) and not isinstance(fill_value, numbers.Real):
            dtype = np.complex128
        else:
            dtype = _DEFAULT_FLOAT
    return _leaf(np.full(size_tuple((size,), "full"), fill_value, dtype), requires_grad, device)


def zeros(*size, dtype=None, requires_grad=False, device=None):
    return _leaf(np.zeros(size_tuple(size, "zeros"), _float_dtype(dtype)), requires_grad, device)


def ones(*size, dtype=None, requires_grad=False, device=None):
    return _leaf(np.ones(size_tuple(size, "ones"), _float_dtype(dtype)), requires_grad, device)


def empty(*size, dtype=None, requires_grad=False, device=None):
    return zeros(*size, dtype=dtype, requires_grad=requires_grad, device=device)


def eye(n, m=None, *, dtype=None, requires_grad=False, device=None):
    return _leaf(np.eye(int(n), None if m is None else int(m), dtype=_float_dtype(dtype)),
                 requires_grad, device)


# -- ranges ---------------------------------------------------------------------------------------
def arange(start, end=None, step=1, *, dtype=None, requires_grad=False, device=None):
    """``arange(end)`` or ``arange(start, end, step)``: int64 when every argument is an
    integer, else the default float dtype (torch)."""
    start, end, step = (_scalar(v) for v in (start, end, step))
    if end is None:
        start, end = 0, start
    if step == 0:
        raise RuntimeError("arange: step must be nonzero")
    if dtype is None:
        ints = all(isinstance(v, numbers.Integral) for v in (start, end, step))
        dtype = np.int64 if ints else _DEFAULT_FLOAT
    dtype = np.dtype(dtype)
    n = max(int(np.ceil((end - start) / step)), 0)
    return _leaf((start + step * np.arange(n, dtype=np.float64 if dtype.kind == "f" else np.int64)
                  ).astype(dtype), requires_grad, device)


def linspace(start, end, steps, *, dtype=None, requires_grad=False, device=None):
    steps = int(steps)
    if steps < 0:
        raise RuntimeError("linspace: number of steps must be non-negative")
    return _leaf(np.linspace(_scalar(start), _scalar(end), steps).astype(_float_dtype(dtype)),
                 requires_grad, device)


def logspace(start, end, steps, base=10.0, *, dtype=None, requires_grad=False, device=None):
    steps = int(steps)
    if steps < 0:
        raise RuntimeError("logspace: number of steps must be non-negative")
    return _leaf(np.logspace(_scalar(start), _scalar(end), steps, base=base)
                 .astype(_float_dtype(dtype)), requires_grad, device)


# -- *_like -----------------------------------------------------------------------------------------
def _like(input, array, requires_grad, device=None):
    """``array`` in ``input``'s front end: a graph constant for a tracer, else a leaf, on
    ``device`` (default: a Tensor's own, as torch's; else the host)."""
    if device is not None:
        canonical(device)   # (a bad name raises, traced or not)
    if hasattr(input, "_apply") and not isinstance(input, Tensor):
        if requires_grad:
            raise RuntimeError("requires_grad=True is not supported on a traced array "
                               "(gj.jit / gj.grad decide what is differentiated)")
        return input._const(array)
    if device is None:
        device = "cuda" if is_device_array(getattr(input, "_data", None)) else "cpu"
    return _leaf(array, requires_grad, device)


def _shape_dtype(input, dtype):
    if not hasattr(input, "shape") or not hasattr(input, "dtype"):
        input = np.asarray(input)
    return tuple(input.shape), (np.dtype(input.dtype) if dtype is None else np.dtype(dtype))


def full_like(input, fill_value, *, dtype=None, requires_grad=False, device=None):
    shape, dt = _shape_dtype(input, dtype)
    return _like(input, np.full(shape, _scalar(fill_value), dt), requires_grad, device)


def zeros_like(input, *, dtype=None, requires_grad=False, device=None):
    return full_like(input, 0, dtype=dtype, requires_grad=requires_grad, device=device)


def ones_like(input, *, dtype=None, requires_grad=False, device=None):
    return full_like(input, 1, dtype=dtype, requires_grad=requires_grad, device=device)


def empty_like(input, *, dtype=None, requires_grad=False, device=None):
    return zeros_like(input, dtype=dtype, requires_grad=requires_grad, device=device)


# -- random -----------------------------------------------------------------------------------------
class Generator:
    """A seedable random stream (``torch.Generator``) over ``np.random.default_rng``."""

    def __init__(self, seed=None):
        self.manual_seed(seed)

    def manual_seed(self, seed):
        self._seed = seed if seed is None else int(seed)
        self.rng = np.random.default_rng(self._seed)
        return self

    def initial_seed(self):
        return self._seed

    def get_state(self):
        return self.rng.bit_generator.state

    def set_state(self, state):
        self.rng.bit_generator.state = state
        return self

    def __repr__(self):
        return f"Generator(seed={self._seed})"


default_generator = Generator()


def manual_seed(seed):
    """Reseed the default generator (as ``torch.manual_seed``); returns it."""
    return default_generator.manual_seed(seed)


def _rng(generator):
    return (default_generator if generator is None else generator).rng


def _float_draw(kind, size, generator, dtype, requires_grad, device):
    dt = _float_dtype(dtype)
    if dt.kind != "f":
        raise TypeError(f"{kind}: dtype must be a floating point dtype, got {dt.name}")
    check_draw(f"gj.{kind}")
    rng = _rng(generator)
    a = rng.random(size) if kind == "rand" else rng.standard_normal(size)
    return _leaf(np.asarray(a).astype(dt), requires_grad, device)


def rand(*size, generator=None, dtype=None, requires_grad=False, device=None):
    """Uniform on [0, 1)."""
    return _float_draw("rand", size_tuple(size, "rand"), generator, dtype, requires_grad, device)


def randn(*size, generator=None, dtype=None, requires_grad=False, device=None):
    """Standard normal."""
    return _float_draw("randn", size_tuple(size, "randn"), generator, dtype, requires_grad,
                       device)


def randint(*args, size=None, generator=None, dtype=None, requires_grad=False, device=None):
    """``randint(high, size)`` or ``randint(low, high, size)``: integers in [low, high)."""
    args = list(args)
    if size is None:
        if not args or isinstance(args[-1], numbers.Integral):
            raise TypeError("randint: missing the size argument (a tuple of ints)")
        size = args.pop()
    if len(args) == 1:
        low, high = 0, args[0]
    elif len(args) == 2:
        low, high = args
    else:
        raise TypeError("randint(low=0, high, size): expected one or two bounds")
    low, high = int(_scalar(low)), int(_scalar(high))
    if high <= low:
        raise RuntimeError(f"randint: expected low < high, got low={low}, high={high}")
    check_draw("gj.randint")
    a = _rng(generator).integers(low, high, size_tuple((size,), "randint"))
    return _leaf(a.astype(np.int64 if dtype is None else dtype), requires_grad, device)


def rand_like(input, *, generator=None, dtype=None, requires_grad=False, device=None):
    shape, dt = _shape_dtype(input, dtype)
    return _like(input, _rng(generator).random(shape).astype(dt), requires_grad, device)


def randn_like(input, *, generator=None, dtype=None, requires_grad=False, device=None):
    shape, dt = _shape_dtype(input, dtype)
    return _like(input, np.asarray(_rng(generator).standard_normal(shape)).astype(dt),
                 requires_grad, device)


__all__ = ["as_tensor", "zeros", "ones", "full", "empty", "eye", "arange", "linspace",
           "logspace", "zeros_like", "ones_like", "full_like", "empty_like", "rand", "randn",
           "randint", "rand_like", "randn_like", "Generator", "manual_seed",
           "default_generator"]
