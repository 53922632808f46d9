"""Grad modes: ``no_grad``, ``enable_grad``, ``set_grad_enabled``, ``inference_mode``.

Contract: thread-local flags read by the eager front end when it decides
whether to record an op. Each mode is a context manager and a decorator, with
or without parentheses (``@no_grad``, ``@no_grad()``, as torch); each decorated
call enters a fresh context, so recursion and threads restore the right mode.
Two flags, as torch's: the grad mode (what ``is_grad_enabled`` reports) and
inference mode; an op records only when grad mode is on and inference mode off
(``_state.enabled`` caches that, the flag the eager front end reads: the
recording sites call ``is_recording``). So ``enable_grad`` inside
``inference_mode()`` turns the grad mode on but records nothing, and
``inference_mode(False)`` leaves inference mode and turns the grad mode on
(torch's ``InferenceMode(false)`` sets grad mode to ``not enabled``). Tensors
created under inference mode are inference tensors (``Tensor.is_inference``):
they can never join a recorded graph later.
``detect_anomaly`` / ``set_detect_anomaly`` (process-wide, as in torch) make
backward check every node for NaN and name the forward op and line.
"""
from __future__ import annotations

import contextlib
import threading

class _State(threading.local):
    """Per-thread flags, set on each thread's first use: reading a thread-local attribute
    that is missing costs an exception (about 0.35 us), and the eager front end reads
    these on every op."""

    def __init__(self):
        self.grad = True        # the grad mode
        self.inference = False  # inference mode
        self.enabled = True     # records: grad and not inference (kept by _set)


_state = _State()


def _set(grad, inference):
    _state.grad, _state.inference = grad, inference
    _state.enabled = grad and not inference


def is_grad_enabled():
    return _state.grad


def is_recording():
    """Whether an op run now records history (grad mode on, inference mode off)."""
    return _state.enabled


class set_grad_enabled(contextlib.ContextDecorator):
    """Like torch: called plainly it switches the mode at once; as a context manager
    it restores the previous mode on exit; as a decorator it leaves the current mode
    alone and applies ``mode`` around every call."""

    def __init__(self, mode):
        self.mode = bool(mode)
        self.prev = is_grad_enabled()
        _set(self.mode, _state.inference)

    def __call__(self, fn):
        _set(self.prev, _state.inference)  # decorating must not change the mode now
        return super().__call__(fn)

    def _recreate_cm(self):
        return _GradMode(self.mode)

    def __enter__(self):
        _set(self.mode, _state.inference)
        return self

    def __exit__(self, *exc):
        _set(self.prev, _state.inference)
        return False


class _GradMode(contextlib.ContextDecorator):
    """Sets the grad mode on entry, restores the previous one on exit."""

    mode = True

    def __init__(self, mode=None):
        if mode is not None:
            self.mode = bool(mode)

    def _recreate_cm(self):
        # one context per call: a shared one kept the outer call's previous mode in
        # ``prev``, so a recursive decorated function left grad mode off after it returned
        return _GradMode(self.mode)

    def __enter__(self):
        self.prev = is_grad_enabled()
        _set(self.mode, _state.inference)
        return self

    def __exit__(self, *exc):
        _set(self.prev, _state.inference)
        return False


def _bare(cls, func):
    """``@cls`` without parentheses: ``func`` decorated (torch accepts this form; taken
    for a mode argument, the function made a truthy mode and a wrong wrapper)."""
    if not callable(func) or isinstance(func, bool):
        raise TypeError(f"{cls.__name__}() takes no mode argument; use it as a context "
                        f"manager or a decorator (got {func!r})")
    return cls()(func)


class no_grad(_GradMode):
    mode = False

    def __new__(cls, orig_func=None):
        return super().__new__(cls) if orig_func is None else _bare(cls, orig_func)

    def __init__(self, orig_func=None):
        pass


class enable_grad(_GradMode):
    mode = True

    def __new__(cls, orig_func=None):
        return super().__new__(cls) if orig_func is None else _bare(cls, orig_func)

    def __init__(self, orig_func=None):
        pass


def is_inference_mode_enabled():
    return _state.inference


class inference_mode(contextlib.ContextDecorator):
    def __new__(cls, mode=True):
        if isinstance(mode, bool) or not callable(mode):
            return super().__new__(cls)
        return cls()(mode)   # ``@inference_mode`` without parentheses (torch accepts it)

    def __init__(self, mode=True):
        self.mode = bool(mode)

    def _recreate_cm(self):
        return inference_mode(self.mode)   # (one context per call, as _GradMode's)

    def __enter__(self):
        self.prev = (_state.grad, _state.inference)
        # as torch's InferenceMode(mode): grad mode becomes ``not mode``, so
        # inference_mode(False) records again even inside inference_mode() or no_grad()
        _set(not self.mode, self.mode)
        return self

    def __exit__(self, *exc):
        _set(*self.prev)
        return False


_anomaly = {"enabled": False, "check_nan": True}


def is_anomaly_enabled():
    return _anomaly["enabled"]


def is_anomaly_check_nan_enabled():
    return _anomaly["check_nan"]


class set_detect_anomaly(contextlib.ContextDecorator):
    def __init__(self, mode, check_nan=True):
        self.prev = dict(_anomaly)
        _anomaly.update(enabled=bool(mode), check_nan=bool(check_nan))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        _anomaly.update(self.prev)
        return False


class detect_anomaly(contextlib.ContextDecorator):
    def __init__(self, check_nan=True):
        self.check_nan = check_nan

    def __enter__(self):
        self.prev = dict(_anomaly)
        _anomaly.update(enabled=True, check_nan=bool(self.check_nan))
        return self

    def __exit__(self, *exc):
        _anomaly.update(self.prev)
        return False
