"""``gj.explain``: show what gradjit does with a function or a tensor's graph.

Contract: ``explain(obj, *args, argnums=0, has_aux=False, static_argnums=(),
static_argnames=(), file=sys.stdout, **kwargs) -> str`` prints
(and returns) three sections: the forward IR as traced/recorded, the IR that
is compiled (the joint forward+adjoint graph for a function, for a tensor,
what its ``backward()`` would run now: its deferred forward and backward compiled together
when the recording tape holds its history, else the backward graph) after
optimisation, and the generated Python source, then what runs: the tier (compiled code, or the
NumPy interpreter while Numba compiles in the background, or the interpreter alone)
and the compiled code's cache entry. Explaining a tensor changes nothing
about which plan its backward runs.
``obj`` is a plain function (the ``gj.grad`` of it that ``argnums``, ``has_aux``,
``static_argnums`` and ``static_argnames`` make is explained), a ``gj.jit`` / ``gj.grad`` /
``gj.value_and_grad`` function (or any transform: explained with its own options, so
giving those options too is an error), or a Tensor with recorded history (its backward is
explained; it takes no arguments).
The arguments (``*args`` and the function's keyword arguments ``**kwargs``) reach the
transform as a call passes them: pytrees split into their leaves, static arguments and
keywords as a call's, so the graph shown is the one that call runs. A keyword argument of
the function named as one of explain's own (``argnums``, ``file``, ...) cannot be passed
through: explain ``gj.grad(f)`` of a function that binds it (``functools.partial``).
"""
from __future__ import annotations

import sys

from gradjit.runtime import tiers
from gradjit.runtime.compiler import entry_of
from gradjit.runtime.engine import build_joint_plan, build_plan
from gradjit.runtime.transforms import _Transformed, grad
from gradjit.tracer.modes import is_anomaly_enabled
from gradjit.tracer.record import History
from gradjit.tracer.tensor import Tensor


_UNSET = object()   # (an option not given: a transform's own options are then used)


def explain(obj, *args, argnums=_UNSET, has_aux=_UNSET, static_argnums=_UNSET,
            static_argnames=_UNSET, file=None, **kwargs):
    options = {k: v for k, v in (("argnums", argnums), ("has_aux", has_aux),
                                 ("static_argnums", static_argnums),
                                 ("static_argnames", static_argnames)) if v is not _UNSET}
    if isinstance(obj, Tensor):
        if args or kwargs or options:
            raise TypeError("explain(tensor) takes no arguments nor options: it explains what "
                            "the tensor's backward() runs")
    elif isinstance(obj, _Transformed):
        if options:
            raise TypeError(f"explain(gj.{type(obj).__name__}({obj.__name__}), ...): "
                            f"{', '.join(options)} given to explain, but a transform is "
                            f"explained with its own options: give them to the transform")
    else:
        obj = grad(obj, **options)
    with tiers.forced("sync"):   # (the source that runs once compiled, whatever the tier)
        return _explain(obj, args, kwargs, file)


def _tier(exe):
    """The tier an executable (or what a plan runs) serves its calls on now."""
    exe = getattr(exe, "exe", exe)
    if exe is None:
        return "not called with these arguments yet: compiled (or tiered) on the first call"
    if exe.__class__ is tiers.Tiered:
        if exe.ready is not None:
            return "compiled code (Numba); the first calls ran on the NumPy interpreter"
        if exe.failed is not None:
            return f"NumPy interpreter: the background compile failed ({exe.failed!r})"
        return "NumPy interpreter, while Numba compiles in the background"
    if exe.__class__.__name__ in ("Interpreted", "InterpretedBatched"):
        return "NumPy interpreter (GRADJIT_EXECUTOR=numpy, or tiering 'never')"
    return "compiled code (Numba)"


def _explain(obj, args, kwargs, file):
    if isinstance(obj, Tensor):
        if obj.grad_fn is None:
            raise ValueError("explain: this tensor has no recorded history (is it a leaf, or was "
                             "it computed without requires_grad / under no_grad?)")
        # What backward() would run now: the deferred forward and the backward compiled
        # together when the recording tape holds the whole history (runtime/engine.py's
        # _run_joint, whose plan the fast path then reuses), else the backward graph alone.
        hist = History.peek([obj])
        forward = str(hist.graph())
        leaves = [t for t in hist.leaves if t.requires_grad and id(t) not in hist.cuts]
        if (obj._data is None and hist.taped and not (hist.cuts or hist.extras or hist.stale
                                                      or is_anomaly_enabled())):
            targets = tuple(dict.fromkeys(("in", hist.leaf_pos[id(t)]) for t in leaves))
            plan = build_joint_plan(hist, ((obj.shape, obj.dtype),), targets)
            title = "joint graph (the deferred forward and the backward, optimised)"
        else:
            plan = build_plan(hist, ((obj.shape, obj.dtype),), [hist.addr(t) for t in leaves])
            title = "backward graph"
        compiled, source = str(plan.bwd_graph), plan.exe.source
        tier = _tier(plan.exe)
    else:
        # The arguments as given: the transform splits them as its calls do (pytree leaves,
        # statics, keywords), so the graph shown is the one a call with them runs.
        traced, opt, source = obj.graphs(*args, **kwargs)
        forward, compiled = str(traced), str(opt)
        tier = _tier(obj.entry_for(*args, **kwargs))
        title = "compiled graph (forward + adjoint, optimised)"
    entry = entry_of(source) if source.lstrip().startswith('"""gradjit generated') else "none"
    text = (f"== traced IR ==\n{forward}\n\n== {title} ==\n{compiled}\n\n"
            f"== generated source ==\n{source}\n\n== what runs ==\ntier: {tier}\n"
            f"cached entry: {entry}\n")
    print(text, file=file or sys.stdout)
    return text
