"""What the later stages plug into the tracer: one table, filled once at ``import gradjit``.

Contract
- tracer/ never imports lowering/ or runtime/ (stages import one way). Everything it calls
  of them is reached through ``HOOKS``, and ``install`` is the only way in:
  - ``HOOKS.backward(root, gradient, retain_graph, create_graph, inputs)``:
    ``Tensor.backward``'s engine (runtime/autograd.py's ``tensor_backward``);
  - ``HOOKS.cuda``: device arrays (runtime/cuda.py: ``require``, ``to_device``,
    ``to_host``, ``run_op`` ...);
  - ``HOOKS.numba_ready()``: Numba's implementations of NumPy's functions imported, before
    a trace puts stand-ins into NumPy's namespace (runtime/blas_probe.py ``prepare``);
  - ``HOOKS.numba_type(fn)``: the type Numba's CPU target gives NumPy's function ``fn``, or
    None (runtime/numba_patches.py; tracer/coercion.py's stand-ins report it to Numba);
  - ``install(eager={op name: fn})``: eager implementations of registered ops
    (``OpDef.eager``; runtime/eager_blas.py: products on the compiled code's BLAS).
- ``Stand(call, fn)``: a NumPy function's stand-in while a trace runs (tracer/coercion.py):
  calls go to ``call``; Numba, compiling meanwhile in another thread,
  types it as ``fn`` itself (``_numba_type_``, from ``HOOKS.numba_type``).
- ``gradjit/__init__.py`` calls ``install`` once. Before that (the tracer imported on its
  own) a hook raises a ``GradjitError`` saying what is missing, never ``None`` errors.
"""
from __future__ import annotations

import functools

from gradjit.tracer.registry import GradjitError, get_op


class _Missing:
    """A hook nobody installed: any use says so."""

    def __init__(self, name):
        self._name = name

    def __call__(self, *args, **kwargs):
        _missing(self._name)

    def __getattr__(self, attr):
        if attr.startswith("__"):   # (copy, pickle and repr probes)
            raise AttributeError(attr)
        _missing(f"{self._name}.{attr}")


def _missing(what):
    raise GradjitError(f"gradjit's runtime is not plugged in ({what}): it is installed by "
                       f"gradjit/__init__.py (tracer/hooks.py)")


class _Hooks:
    backward = _Missing("backward")
    cuda = _Missing("cuda")
    numba_type = staticmethod(lambda fn: None)   # (no runtime: nothing compiles)
    numba_ready = staticmethod(lambda: None)


HOOKS = _Hooks()


def install(*, backward, cuda, numba_type, numba_ready, eager=()):
    """Plug the runtime in: the tensor backward, the CUDA module, Numba's types of NumPy's
    functions and its registries, eager op kernels."""
    HOOKS.backward, HOOKS.cuda = backward, cuda
    HOOKS.numba_type, HOOKS.numba_ready = numba_type, numba_ready
    for name, fn in dict(eager).items():
        get_op(name).eager = fn


class Stand:
    """NumPy's function ``orig`` while a trace runs: calls go to ``call``; to Numba it is
    ``orig`` (``_numba_type_``), so a compile in another thread meanwhile is unaffected."""

    def __init__(self, call, orig):
        self._call = call
        # NumPy's own __name__, __qualname__, __module__, __doc__ and __wrapped__: code that
        # reads them meanwhile (numpy.ma's import reads np.angle.__qualname__) sees NumPy's
        functools.update_wrapper(self, orig, updated=())

    def __call__(self, *args, **kwargs):
        return self._call(*args, **kwargs)

    @property
    def _numba_type_(self):   # (read by Numba's typeof when it types np.<name>)
        return HOOKS.numba_type(self.__wrapped__)

    def __repr__(self):
        return f"<gradjit's stand-in for {self.__wrapped__!r} while tracing>"
