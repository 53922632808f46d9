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
- Other threads: a generator's state cannot say which thread drew. So while any trace
  runs, NumPy's global-stream functions (``np.random.normal`` ...) are stand-ins that
  count draws per thread (``hooks.Stand``: Numba compiling meanwhile still types them as
  NumPy's); a change of the global stream that only other threads' counted draws explain
  is theirs, not the trace's (a data-loading thread drawing meanwhile made the first
  gradient raise). Otherwise it raises, naming both possibilities when other threads run.
"""
from __future__ import annotations

import collections
import contextlib
import threading

import numpy as np

from gradjit.tracer.hooks import Stand
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


_SWAP_LOCK = threading.Lock()
_SWAP = {"traces": 0, "saved": {}}   # traces running (any thread); np.random's own functions
_DRAWS = collections.Counter()   # thread ident -> draws through np.random.* while traces run


def _counted(fn):
    def draw(*args, **kwargs):
        _DRAWS[threading.get_ident()] += 1   # (each thread writes its own key)
        return fn(*args, **kwargs)
    return draw


def _global_stream_functions():
    rand = np.random.mtrand._rand
    return {n: f for n in dir(np.random) if (f := getattr(np.random, n, None)) is not None
            and (getattr(f, "__self__", None) is rand or n == "seed")}


def _start_counting():
    with _SWAP_LOCK:
        if _SWAP["traces"] == 0:
            _SWAP["saved"] = _global_stream_functions()
            for n, f in _SWAP["saved"].items():
                setattr(np.random, n, Stand(_counted(f), f))
        _SWAP["traces"] += 1
        return dict(_DRAWS)


def _stop_counting(start):
    """The threads that drew through np.random.* since ``start``, and how often."""
    with _SWAP_LOCK:
        _SWAP["traces"] -= 1
        if _SWAP["traces"] == 0:
            for n, f in _SWAP["saved"].items():
                setattr(np.random, n, f)
            _SWAP["saved"] = {}
        return {k: v - start.get(k, 0) for k, v in _DRAWS.items() if v != start.get(k, 0)}


@contextlib.contextmanager
def rng_guard(name, watch=()):
    from gradjit.tracer import creation   # (imports this module)
    gens = _generators([np.random.mtrand._rand, creation.default_generator, *watch])
    start = _start_counting()   # (counting spans both state readings: see the contract)
    before = [_state(g) for g in gens]
    outer = getattr(_LOCAL, "name", None)
    _LOCAL.depth, _LOCAL.name = getattr(_LOCAL, "depth", 0) + 1, outer or name
    try:
        yield
        after = [_state(g) for g in gens]
    finally:
        _LOCAL.depth -= 1
        _LOCAL.name = outer
        drawn = _stop_counting(start)
    me = threading.get_ident()
    for g, b, a in zip(gens, before, after):
        if a != b:
            if (g is np.random.mtrand._rand and not drawn.get(me)
                    and any(k != me for k in drawn)):
                continue   # other threads' draws (see the contract)
            what = ("np.random's global generator (np.random.*)" if g is np.random.mtrand._rand
                    else f"a random generator ({type(g).__name__})")
            # (a generator's state cannot say which thread drew: another thread of this
            #  process drawing from the same generator meanwhile looks the same)
            other = (" (or another thread of this process drew from it meanwhile: give the "
                     "threads their own np.random.default_rng())"
                     if threading.active_count() > 1 else "")
            raise RandomnessUnderTraceError(f"{what} drew numbers while {name} traced the "
                                            f"function{other}: {_ADVICE}")
