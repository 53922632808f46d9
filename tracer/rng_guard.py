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
- np.random's global stream and threads. A generator's state cannot say which thread drew,
  so while a trace runs np.random's functions (``np.random.normal`` ..., names the user's
  modules bound to them too: tracer/coercion.py) are ``global_draw`` stand-ins, in every
  thread:
  - called by a tracing thread, they raise at once, naming the user's line;
  - called by another thread (a data loader), they draw under a lock and hand each
    running trace the state before and after: a trace whose stream moved only by such
    draws, one after another from its own starting state, lets them pass.
  Any other move of the stream (``scipy.stats``, ``np.random.mtrand._rand``, a bound method
  kept elsewhere, in whichever thread) breaks that chain, and the trace raises, the message
  naming other threads when there are some (``StreamMovedError``): a frozen draw let
  through is worse than a refusal. A thread that had looked NumPy's function up just
  before the stand-ins came draws unseen once; so a transform meeting ``StreamMovedError``
  lets the other threads run a moment and traces once more, the stand-ins kept in place
  (runtime/transforms.py), and raises only if the stream moves unseen again.
- Other generators (the function's own, gradjit's default) are compared before and after
  only: a generator shared with another thread that draws meanwhile is refused, and the
  message says so (a generator per thread).
"""
from __future__ import annotations

import contextlib
import functools
import threading
import types

import numpy as np

from gradjit.tracer.registry import GradjitError, user_site

_LOCAL = threading.local()
_CHAIN_LOCK = threading.RLock()   # (a draw that calls another np.random function meanwhile)
_CHAINS = []   # running traces' chains of np.random's global stream (see the contract)


class _Chain:
    """One trace's account of np.random's global stream: the state other threads' draws
    left it in, and whether something else moved it."""

    def __init__(self, state):
        self.state, self.broken = state, False

_ADVICE = ("the numbers would be drawn once, while the function is traced, and frozen into the "
           "compiled code: every call would return the same values. Draw them outside the "
           "transform and pass them in as an argument (e.g. noise = rng.normal(size=...); "
           "loss(w, noise)), or use the function without randomness (dropout: training=False)")


class RandomnessUnderTraceError(GradjitError, RuntimeError):
    pass


class StreamMovedError(RandomnessUnderTraceError):
    """np.random's global stream moved by a draw no stand-in saw, while other threads run:
    the tracing thread's, or another thread's through a reference taken before the
    stand-ins were in place. A transform may trace once more to tell (runtime/transforms.py)."""


def active():
    return getattr(_LOCAL, "depth", 0) > 0


def check_draw(what):
    """Raise if ``what`` (a gradjit random draw) is made while a transform traces."""
    if active():
        raise RandomnessUnderTraceError(f"{what} was called while {_LOCAL.name} traced the "
                                        f"function: {_ADVICE}", user_site())


def global_draw(fn, args, kwargs):
    """``fn`` (one of np.random's functions) called while some trace runs (the contract)."""
    if active():
        raise RandomnessUnderTraceError(f"np.random.{fn.__name__} was called while {_LOCAL.name} "
                                        f"traced the function: {_ADVICE}", user_site())
    with _CHAIN_LOCK:
        if not _CHAINS:
            return fn(*args, **kwargs)
        before = _state(np.random.mtrand._rand)
        out = fn(*args, **kwargs)
        after = _state(np.random.mtrand._rand)
        for c in _CHAINS:
            if c.state == before:
                c.state = after
            else:
                c.broken = True
    return out


def _fingerprint(state):
    if isinstance(state, dict):
        return tuple((k, _fingerprint(v)) for k, v in sorted(state.items()))
    if isinstance(state, (tuple, list)):
        return tuple(_fingerprint(v) for v in state)
    if isinstance(state, np.ndarray):
        return state.tobytes()
    return state


def _state(gen):
    # (under the generator's own lock: a draw of another thread in flight, its GIL
    # released, finishes first and is seen whole)
    if isinstance(gen, np.random.Generator):
        with gen.bit_generator.lock:
            return _fingerprint(gen.bit_generator.state)
    with gen._bit_generator.lock:
        return _fingerprint(gen.get_state(legacy=False))


def _generators(objs):
    out = []
    for x in objs:
        try:
            x = getattr(x, "rng", x)   # a gj.Generator wraps an np.random.Generator
        except Exception:   # noqa: BLE001 (a __getattr__ raising KeyError: not one)
            continue
        if isinstance(x, (np.random.Generator, np.random.RandomState)) and not any(
                x is y for y in out):
            out.append(x)
    return out


def reachable(fn, extra=()):
    """Objects ``fn`` can reach without arguments: the globals its code names, its closure
    cells and defaults (recursively through nested code), plus ``extra``."""
    objs = list(extra)
    fn = getattr(fn, "__wrapped__", fn)
    if isinstance(fn, functools.partial):   # its bound arguments, then its function
        return reachable(fn.func, [*objs, *fn.args, *fn.keywords.values()])
    if not isinstance(fn, (types.FunctionType, type)) and hasattr(type(fn), "__call__") \
            and hasattr(fn, "__dict__"):   # a callable instance: its attributes, its __call__
        return reachable(getattr(type(fn).__call__, "__func__", type(fn).__call__),
                         [*objs, *vars(fn).values()])
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
    with _CHAIN_LOCK:
        before = [_state(g) for g in gens]
        chain = _Chain(before[0])
        _CHAINS.append(chain)
    outer = getattr(_LOCAL, "name", None)
    _LOCAL.depth, _LOCAL.name = getattr(_LOCAL, "depth", 0) + 1, outer or name
    try:
        yield
    finally:
        _LOCAL.depth -= 1
        _LOCAL.name = outer
        with _CHAIN_LOCK:
            _CHAINS.remove(chain)
            after = [_state(g) for g in gens]
    for g, b, a in zip(gens, before, after):
        if g is np.random.mtrand._rand and not chain.broken and a == chain.state:
            continue   # unmoved, or moved by other threads' draws only
        if a != b:
            what = ("np.random's global generator (np.random.*)" if g is np.random.mtrand._rand
                    else f"a random generator ({type(g).__name__})")
            others = threading.active_count() > 1
            other = (" (or another thread of this process drew from it meanwhile, through "
                     "a name gradjit could not swap: give the threads their own "
                     "np.random.default_rng())" if others else "")
            error = StreamMovedError if others and g is np.random.mtrand._rand else \
                RandomnessUnderTraceError
            raise error(f"{what} drew numbers while {name} traced the function{other}: "
                        f"{_ADVICE}")
