"""Tiered execution: a new structure runs at once on the NumPy interpreter while Numba
compiles it in a background thread; the compiled code takes over when it is ready.

Contract
- ``mode()``: ``"background"`` (default), ``"sync"`` (wait for the compile, as before)
  or ``"never"`` (stay on the interpreter), from ``set_tiering(mode)``, else
  ``$GRADJIT_TIERING``. ``forced("sync")`` overrides it for the calling thread (code
  that needs compiled code now: ``compile_for``, ``gj.explain``).
- ``holds_float16(graph)``: such a graph runs on the interpreter only (Numba has no
  float16; ``runtime/compiler.compile_graph`` asks).
- ``wants_background(graph)``: background mode, and the structure's generated source is
  not on disk (a warm cache loads in milliseconds: it is loaded, not tiered).
- ``Tiered(graph, build)``: ``exe(arrays)`` returns what the compiled executable returns,
  from the interpreter (``runtime/compiler.Interpreted``, counted in
  ``STATS["interpreted_calls"]``) until ``build()`` has returned in its thread, then
  from the compiled executable (``.ready``). The compile is queued when the first call
  has returned (or at ``wait``): Numba's compile holds the GIL most of the time, so a
  compile running beside the first call would slow the first result about twofold (an
  RK4 ``gj.scan`` of 1000 steps: 2.2 s -> 0.85 s to the first gradient). A build that
  raises leaves the structure on the interpreter, with one warning on the ``gradjit``
  logger (``compile_failed``: so does a compile in the caller's thread, sync mode or a
  structure found on disk; counted in ``STATS["failed_compiles"]``). ``join()`` waits for the compiled code, compiling it in the calling thread if
  the compile thread has not started it.
- One compile thread per process, taking the queued structures in order (a daemon: a
  process that exits first leaves no partial cache entry, writes being atomic). Why one:
  Numba compiles one function at a time anyway, and a thread per structure (a loop over
  100 input shapes) meant 100 threads waiting on its lock, each with its own malloc arena
  (RSS 1-3 MiB per structure instead of 0.3) and its own "taking long" warning.
- ``settled(exe)``: the compiled executable of a ready ``Tiered``, else ``exe``.
- ``wait(timeout=None)`` (``gj.wait_compiled``): block until every background compile
  of this process has ended; True when none is left.
- Fork: a process forked while a compile runs in the background would inherit the
  compiler's locks held by a thread it does not have, and hang at its first compile; so
  ``os.fork`` (``multiprocessing``'s fork start method included) first waits for the
  background compiles to end (``os.register_at_fork``).
- Logging on the ``gradjit`` logger: INFO when a background compile starts and ends,
  WARNING when one takes longer than ``SLOW_S`` seconds (once, while it runs) or fails.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque

import numpy as np

MODES = ("background", "sync", "never")
SLOW_S = 10.0
STATS = {"interpreted_calls": 0, "background_compiles": 0, "failed_compiles": 0}
_LOG = logging.getLogger("gradjit")
_SET = [None]
_LOCAL = threading.local()
_PENDING = set()
_PENDING_LOCK = threading.Lock()
_QUEUE = deque()                 # Tiered structures waiting for the compile thread, in order
_COND = threading.Condition()    # guards _QUEUE, _THREAD and each Tiered's _state
_THREAD = [None]


def _worker():
    """Start the compile thread unless it runs (under _COND)."""
    t = _THREAD[0]
    if t is None or not t.is_alive():   # (none yet, or this is a forked child)
        t = _THREAD[0] = threading.Thread(target=_work, daemon=True, name="gradjit-compile")
        t.start()


def _work():
    while True:
        with _COND:
            while not _QUEUE:
                _COND.wait()
            t = _QUEUE.popleft()
            t._state = "running"
        t._run()


def set_tiering(mode):
    """How new structures run before their compile ends: 'background', 'sync' or 'never'
    (``None``: back to ``$GRADJIT_TIERING``, else 'background')."""
    if mode is not None and mode not in MODES:
        raise ValueError(f"gj.set_tiering: mode must be one of {MODES} or None, got {mode!r}")
    _SET[0] = mode


def mode():
    m = getattr(_LOCAL, "mode", None) or _SET[0] or os.environ.get("GRADJIT_TIERING") or "background"
    if m not in MODES:
        raise ValueError(f"GRADJIT_TIERING must be one of {MODES}, got {m!r}")
    return m


class forced:
    """``with forced("sync"):`` this thread's new structures use that mode."""

    def __init__(self, m):
        self.m = m

    def __enter__(self):
        self.prev, _LOCAL.mode = getattr(_LOCAL, "mode", None), self.m

    def __exit__(self, *exc):
        _LOCAL.mode = self.prev


def holds_float16(graph):
    """Does ``graph`` hold a float16 value (NumPy's result of np.exp of uint8 & co.)? Numba's
    CPU target has no float16 type, so such a graph stays on the interpreter (NumPy's own
    float16 loops: its values are NumPy's exactly)."""
    f2 = np.dtype(np.float16)
    return (any(v.dtype == f2 for v in graph.inputs)
            or any(o.dtype == f2 for n in graph.nodes for o in n.outputs))


def wants_background(graph):
    if mode() != "background":
        return False
    from gradjit.runtime import plans
    from gradjit.tracer import cache_store
    return not plans.stored(graph, "entry", True, cache_store.current())


def compile_failed(graph, e):
    """Log that the compile of ``graph`` failed (its calls stay on the interpreter)."""
    STATS["failed_compiles"] += 1
    _LOG.warning("gradjit: the compile of %r failed (%s: %s); it stays on the NumPy "
                 "interpreter", graph.name, type(e).__name__,
                 (str(e).strip().splitlines() or [""])[0][:300])


class Tiered:
    """A structure on the interpreter until its compiled executable is ready."""

    def __init__(self, graph, build):
        from gradjit.runtime.compiler import Interpreted
        self.graph, self.ready, self.failed = graph, None, None
        self.interp = Interpreted(graph)
        self.source = "# compiling in the background (gj.wait_compiled() waits for it)\n"
        self.done = threading.Event()
        self._build_fn, self._state = build, "new"   # -> queued -> running (-> done set)
        with _PENDING_LOCK:
            _PENDING.add(self)
        STATS["background_compiles"] += 1

    def start(self):
        """Queue the compile for the compile thread (once)."""
        if self._state == "new":
            with _COND:
                if self._state == "new":
                    self._state = "queued"
                    _QUEUE.append(self)
                    _worker()
                    _COND.notify()

    def join(self):
        """Wait for the compiled code (``compile_for``, ``@njit`` callers): a compile the
        thread has not started yet runs here, in the calling thread, instead of waiting
        behind other structures' compiles."""
        with _COND:
            mine = self._state in ("new", "queued")
            if mine:
                if self._state == "queued":
                    _QUEUE.remove(self)
                self._state = "running"
        if mine:
            self._run()
        self.done.wait()

    def _run(self):
        t0 = time.perf_counter()
        name, n = self.graph.name, len(self.graph.nodes)
        _LOG.info("gradjit: compiling %r (%d ops) in the background", name, n)
        slow = threading.Timer(SLOW_S, lambda: _LOG.warning(
            "gradjit: the compile of %r (%d ops) has taken %.0f s so far; calls run on the "
            "NumPy interpreter meanwhile", name, n, SLOW_S))
        slow.daemon = True
        slow.start()
        try:
            exe = self._build_fn()
            self.source = exe.source
            self.ready = exe
            _LOG.info("gradjit: compiled %r in %.2f s; compiled code takes over", name,
                      time.perf_counter() - t0)
        except Exception as e:   # noqa: BLE001 - the interpreter keeps serving the calls
            self.failed = e
            compile_failed(self.graph, e)
        finally:
            slow.cancel()
            self._build_fn = None   # (the graph and closures it holds)
            self.done.set()
            with _PENDING_LOCK:
                _PENDING.discard(self)

    def __call__(self, arrays):
        exe = self.ready
        if exe is not None:
            return exe(arrays)
        STATS["interpreted_calls"] += 1
        try:
            return self.interp(arrays)
        finally:
            self.start()


def settled(exe):
    """The compiled executable behind a ready ``Tiered``; anything else unchanged."""
    if exe.__class__ is Tiered and exe.ready is not None:
        return exe.ready
    return exe


def wait(timeout=None):
    """Block until this process's background compiles end (``timeout`` seconds at most);
    True when none is left."""
    end = None if timeout is None else time.monotonic() + timeout
    while True:
        with _PENDING_LOCK:
            pending = list(_PENDING)
        if not pending:
            return True
        left = None if end is None else end - time.monotonic()
        if left is not None and left <= 0:
            return False
        for p in pending:
            p.start()
        with _COND:   # (queued work has a thread, even if the last one died)
            if _QUEUE:
                _worker()
        pending[0].done.wait(left)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=wait)
