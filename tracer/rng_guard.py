"""No silently frozen randomness: random draws while a function transform traces raise.

Contract
- A draw made while ``gj.jit`` / ``gj.grad`` trace a function happens once, at
  trace time; its numbers would become a constant of the compiled code and every
  later call would return the same "random" values. ``rng_guard(name, watch)``
  wraps a trace and raises ``RandomnessUnderTraceError`` when a draw happened:
  - gradjit's own draws (``gj.rand``/``gj.randn``/``gj.randint``, dropout)
    call ``check_draw`` and raise at once, naming the user's line;
  - NumPy's global stream (``np.random.normal`` …) and the NumPy generators in
    ``watch`` (those the function reaches through its globals, closure and
    static arguments: ``fingerprints_of``) are compared before and after.
- The fix the message gives: draw outside the transform and pass the numbers as
  an argument (a new draw per call), or make the function deterministic.
- A generator's state cannot say which thread drew: another thread drawing from the same
  generator during the trace (a data-loading thread on np.random's global stream) raises
  too, and then the message says so and how to avoid it (a generator per thread). Telling
  the threads apart would take stand-ins for np.random's functions in every thread, which
  miss draws made other ways (``scipy.stats``, ``from numpy.random import normal``): a
  frozen draw let through is worse than a refusal.
"""
from __future__ import annotations

import contextlib
import threading

import numpy as np

from gradjit.tracer.registry import GradjitError, user_site

_LOCAL = threading.local()

_ADVICE = ("the numbers would be drawn once, while the function is traced, and frozen into the "
           "compiled code: every call would return the same values. Draw them outside the "
           "transform and pass them in as an argument (e.g. noise = rng.normal(size=...); "
           "loss(w, noise)), or use the function without randomness (dropout: training=False)")


class RandomnessUnderTraceError(GradjitError, RuntimeError):
    pass


def active():
    return getattr(_LOCAL, "depth", 0) > 0


def check_draw(what):
    """Raise if ``what`` (a gradjit random draw) is made while a transform traces."""
    if active():
        raise RandomnessUnderTraceError(f"{what} was called while {_LOCAL.name} traced the "
                                        f"function: {_ADVICE}", user_site())


def _fingerprint(state):
    if isinstance(state, dict):
        return tuple((k, _fingerprint(v)) for k, v in sorted(state.items()))
    if isinstance(state, (tuple, list)):
        return tuple(_fingerprint(v) for v in state)
    if isinstance(state, np.ndarray):
        return state.tobytes()
    return state


def _state(gen):
    if isinstance(gen, np.random.Generator):
        return _fingerprint(gen.bit_generator.state)
    return _fingerprint(gen.get_state(legacy=False))


def _generators(objs):
    out = []
    for x in objs:
        x = getattr(x, "rng", x)   # a gj.Generator wraps an np.random.Generator
        if isinstance(x, (np.random.Generator, np.random.RandomState)) and not any(
                x is y for y in out):
            out.append(x)
    return out


def reachable(fn, extra=()):
    """Objects ``fn`` can reach without arguments: the globals its code names, its closure
    cells and defaults (recursively through nested code), plus ``extra``."""
    objs = list(extra)
    fn = getattr(fn, "__wrapped__", fn)
    code = getattr(fn, "__code__", None)
    if code is None:
        return objs
    glb = getattr(fn, "__globals__", {})
    stack = [code]
    while stack:
        c = stack.pop()
        objs.extend(glb[n] for n in c.co_names if n in glb)
        stack.extend(k for k in c.co_consts if hasattr(k, "co_names"))
    return objs + captured(fn)


def captured(fn):
    """The values ``fn`` holds itself: its closure cells' contents and its defaults."""
    out = []
    for cell in fn.__closure__ or ():
        try:
            out.append(cell.cell_contents)
        except ValueError:   # an empty cell
            pass
    return out + list(fn.__defaults__ or ())


@contextlib.contextmanager
def rng_guard(name, watch=()):
    from gradjit.tracer import creation   # (imports this module)
    gens = _generators([np.random.mtrand._rand, creation.default_generator, *watch])
    before = [_state(g) for g in gens]
    outer = getattr(_LOCAL, "name", None)
    _LOCAL.depth, _LOCAL.name = getattr(_LOCAL, "depth", 0) + 1, outer or name
    try:
        yield
    finally:
        _LOCAL.depth -= 1
        _LOCAL.name = outer
    for g, b in zip(gens, before):
        if _state(g) != b:
            what = ("np.random's global generator (np.random.*)" if g is np.random.mtrand._rand
                    else f"a random generator ({type(g).__name__})")
            other = (" (or another thread of this process drew from it meanwhile: give the "
                     "threads their own np.random.default_rng())"
                     if threading.active_count() > 1 else "")
            raise RandomnessUnderTraceError(f"{what} drew numbers while {name} traced the "
                                            f"function{other}: {_ADVICE}")
