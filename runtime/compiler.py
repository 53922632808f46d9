"""Compile a Graph to a callable, with an in-memory table and Numba's disk cache.

Contract
- ``compile_graph(graph) -> Executable``: ``exe(arrays)`` takes one array per
  ``graph.inputs`` and returns one array per ``graph.outputs``.
- Source goes to ``<cache dir>/gj_<content hash>.py``: written once (atomic
  rename; an existing file is never rewritten, its mtime is part of Numba's
  cache key), registered in ``sys.modules`` before it executes (otherwise
  Numba's cache records ``<dynamic>``), compiled with ``@njit(cache=True)``
  for the exact argument types while holding a file lock (Numba updates its
  cache index without one), with gradjit's changes to Numba swapped in for the
  compile (runtime/numba_patches.py: the module's optimisation levels, called
  helpers bound to their loaded code, result arrays boxed without a Python call).
  The helpers' cached code is loaded first, and a cached entry whose helpers
  cannot be is compiled again (runtime/links.py). Later lazy compiles are disabled so every
  compilation goes through here and is counted. A disk hit is read without
  ``Dispatcher.compile`` (``_load_cached``): that skips Numba's registry refresh,
  most of a warm process's first-gradient time.
- ``STATS``: per-process counters. Every compile request ends in exactly one
  of ``compiles`` (Numba compiled), ``disk_hits`` (loaded from Numba's cache)
  or ``memory_hits`` (already loaded in this process). ``stats()`` adds the
  generated-source cache's ``plan_hits`` / ``plan_misses``.
- Cache dir: ``$GRADJIT_CACHE_DIR``, else ``$XDG_CACHE_HOME/gradjit``, else
  ``~/.cache/gradjit``. ``GRADJIT_EXECUTOR=numpy`` swaps the compiled code for
  the reference interpreter; so does a float16 value in the graph (Numba has none).
- Generated source is itself cached on disk (``runtime/plans.py``), so a warm
  process neither generates nor compiles.
- Tiering (runtime/tiers.py): a structure whose source is not on disk gets a
  ``Tiered`` executable (the interpreter until a background thread has compiled it),
  unless ``gj.set_tiering``/``$GRADJIT_TIERING`` say ``sync`` or ``never``.
- An index out of bounds raised by compiled code (``IndexBoundsError``), or a
  ``gj.while_loop`` cut short by its ``max_steps`` (``MaxStepsError``), leaves an
  executable's call at the user's line of the op that met it (``locate``).
"""
from __future__ import annotations

import contextlib
import gc
import hashlib
import os
import sys
import threading
import time
import warnings

import numba
import numpy as np
from numba.core import sigutils
from numba.core.caching import FunctionCache
from numba.core.compiler_lock import global_compiler_lock
from numba.core.errors import NumbaPerformanceWarning
from numba.core.runtime import rtsys

from gradjit.lowering.blas_cpu import PAR_MIN
from gradjit.lowering.codegen_batched import batched_source
from gradjit.lowering.codegen_cpu import SignatureMismatch
from gradjit.runtime import memory, numba_cache, numba_patches, plans, threads, tiers
from gradjit.tracer import cache_store, gensrc
from gradjit.tracer.gensrc import cache_dir  # noqa: F401 - (gj.cache_dir)
from gradjit.runtime.levels import GENERATED
from gradjit.runtime.links import compile_fresh, load_links, save_links
from gradjit.tracer.interp import interpret
from gradjit.tracer.ops_index import IndexBoundsError
from gradjit.tracer.registry import MaxStepsError

STATS = {"compiles": 0, "disk_hits": 0, "memory_hits": 0, "compile_seconds": 0.0,
         "fast_steps": 0,   # (backward() calls runtime/fast_backward.py took)
         "guard_retraces": 0}   # (traces again: a value read from outside changed)
_MODULES = {}  # content hash -> its entries in _LOADED (the module is released at 0)


def _evicted(key, disp):
    """``_LOADED`` dropped ``key``: the module goes with its last entry, unless another
    thread is loading from it right now (then it stays, and that thread counts it again)."""
    h = key[0]
    _MODULES[h] = _MODULES.get(h, 1) - 1
    if _MODULES[h] > 0:
        return
    del _MODULES[h]
    lock = cache_store.thread_lock(f"gj_{h}")
    if lock.acquire(blocking=False):
        try:
            mod = sys.modules.pop(f"{GENERATED}{h}", None)
            if mod is not None:
                memory.release_module(mod)
        finally:
            lock.release()


_LOADED = memory.Bounded(_evicted)   # (content hash, signature, name) -> dispatcher


def stats():
    return dict(STATS, **plans.STATS, **memory.STATS, **tiers.STATS, threads=threads.info())


def reset_stats():
    for k in STATS:
        STATS[k] = 0 if k != "compile_seconds" else 0.0
    for k in tiers.STATS:
        tiers.STATS[k] = 0
    for table in (plans.STATS, memory.STATS):
        for k in table:
            table[k] = 0


def _numba_type(v):
    t = numba.from_dtype(v.dtype)
    return numba.types.Array(t, v.ndim, "C") if v.ndim else t


def load(source, signature, name="entry"):
    """The compiled dispatcher ``name`` of ``source`` for ``signature`` (counted in STATS)."""
    h = hashlib.sha256(source.encode()).hexdigest()[:32]
    key = (h, signature, name)
    disp = _LOADED.get(key)
    if disp is not None:
        STATS["memory_hits"] += 1
        return disp
    memory.unload_pending()
    store = cache_store.current()
    t0 = time.perf_counter()
    with cache_store.entry_lock(store, f"gj_{h}"):
        disp = _LOADED.get(key)   # (another thread may have loaded it while this one waited)
        if disp is not None:
            STATS["memory_hits"] += 1
            return disp
        mod = generated_module(store, f"gj_{h}", f"{GENERATED}{h}", source, FunctionCache)
        disp = getattr(mod, name)
        hits = sum(disp.stats.cache_hits.values())
        disp._can_compile = True  # may have been disabled for another signature
        # The helpers its code calls load first (runtime/links.py); where they cannot,
        # its cached code must not be loaded (its calls would not resolve): compile it.
        links = None if store is None else store.path(
            "numba", f"gj_{h}.{hashlib.sha256(repr(signature).encode()).hexdigest()[:16]}.links")
        ready = links is not None and load_links(links, _load_cached, store)
        if not (ready and _load_verified(disp, signature, store)):
            with warnings.catch_warnings(), numba_patches.compiling(mod):
                warnings.simplefilter("ignore", NumbaPerformanceWarning)
                if ready:
                    disp.compile(signature)
                else:
                    compile_fresh(disp, signature)
            if links is not None:
                save_links(disp, signature, links, store)
        disp.disable_compile()
        if sum(disp.stats.cache_hits.values()) > hits:
            STATS["disk_hits"] += 1
        else:
            STATS["compiles"] += 1
    STATS["compile_seconds"] += time.perf_counter() - t0
    remember(key, disp)
    return disp


def entry_of(source):
    """Where the compiled code of ``source`` is: its cache entry, and whether this
    process holds it (gj.explain)."""
    h = hashlib.sha256(source.encode()).hexdigest()[:32]
    store = cache_store.current()
    where = "compiled in memory only (no usable cache dir)" if store is None else \
        os.path.join(store.root, f"gj_{h}.py")
    held = _MODULES.get(h, 0)
    return f"gj_{h}: {where}; " + (f"loaded in this process ({held} signature(s))" if held
                                   else "not loaded in this process")


def generated_module(store, file_name, module_name, source, cache_base):
    """The generated module of ``source``: its file written for readers (where there is a
    store), executed from ``source``, its dispatchers given gradjit's verified Numba cache
    (runtime/numba_cache.py) of class ``cache_base``, and so are the library helpers it
    calls."""
    mod = sys.modules.get(module_name)
    if mod is None:
        path = gensrc.module_path(store, "", file_name, source)
        mod = gensrc.import_source(module_name, source, path)
        numba_cache.attach(mod, store, file_name, cache_base)
    numba_cache.adopt_library()   # (the helpers it calls, in modules it may have imported now)
    return mod


def _load_verified(disp, signature, store):
    """``_load_cached``, where anything that goes wrong loading a verified entry (it was
    written by another Numba or LLVM, say) discards it and reads as a miss."""
    try:
        return _load_cached(disp, signature)
    except Exception as e:   # noqa: BLE001 - a cache is never the reason a gradient fails
        path = numba_cache.index_path(disp)
        if path is not None:
            store.discard(path, f"its code could not be loaded ({type(e).__name__}: {e})")
        return False


def remember(key, disp):
    if key not in _LOADED:
        _MODULES[key[0]] = _MODULES.get(key[0], 0) + 1
    _LOADED[key] = disp


def _load_cached(disp, signature):
    """Load ``signature`` from Numba's disk cache without ``disp.compile``; False on a miss.

    Why: ``Dispatcher.compile`` refreshes the target context before it reads the cache,
    importing and registering every Numba implementation module (0.15-0.3 s, most of
    a warm process's first gradient). Cached machine code needs none of that; it needs
    only the runtime (NRT) symbols, which ``rtsys.initialize`` installs. A compile that
    follows in this process still refreshes (Numba's compiler does so itself). This
    leans on Numba internals: where they are missing (another Numba layout) it falls
    back to ``disp.compile``; an unreadable cache entry raises, as Numba's own load does.
    """
    try:
        cache, ctx = disp._cache, disp.targetctx
        load = cache._load_overload
    except AttributeError:
        return False
    with global_compiler_lock:
        rtsys.initialize(ctx)
        args, _ = sigutils.normalize_signature(signature)
        if tuple(args) in disp.overloads:
            return False
        cres = load(signature, ctx)
        if cres is None:
            return False
        ctx.insert_user_function(cres.entry_point, cres.fndesc, [cres.library])
        disp.add_overload(cres)
        disp._cache_hits[signature] += 1
    return True


class Executable:
    """A compiled graph. ``__call__`` is the hot path: keep it thin."""

    __slots__ = ("fn", "consts", "scalar_in", "out_dtypes", "graph", "source", "plain_in",
                 "plain_out")

    def __init__(self, fn, consts, graph, source):
        self.fn, self.consts, self.graph, self.source = fn, consts, graph, source
        self.scalar_in = tuple(v.ndim == 0 for v in graph.inputs)
        self.out_dtypes = tuple(v.dtype if v.ndim == 0 else None for v in graph.outputs)
        self.plain_in = not any(self.scalar_in)
        self.plain_out = all(d is None for d in self.out_dtypes)

    def __call__(self, arrays):
        try:
            try:
                if self.plain_in:
                    res = self.fn(*arrays, self.consts)
                else:
                    res = self.fn(*[a[()] if s else a for a, s in zip(arrays, self.scalar_in)],
                                  self.consts)
            except _RUN_TIME_ERRORS:
                raise
            except (TypeError, IndexError):
                # Non-contiguous, read-only, Python scalars or other dtypes: coerce, then call.
                res = self.fn(*[np.array(a, dtype=v.dtype, order="C")[()] if s else
                                np.array(a, dtype=v.dtype, order="C")
                                for a, s, v in zip(arrays, self.scalar_in, self.graph.inputs)],
                              self.consts)
        except _RUN_TIME_ERRORS as e:
            raise locate(e, self.graph, arrays) from None
        return res if self.plain_out else self.finish(res)

    def finish(self, res):
        """0-d results come back from Numba as scalars: make them 0-d arrays."""
        return [r if d is None else np.asarray(r, d) for r, d in zip(res, self.out_dtypes)]


class PackedExecutable(Executable):
    """A compiled graph whose entry reads runs of same-shaped inputs (one per iteration of
    a rolled loop) as one stacked array: they are packed here, per call."""

    __slots__ = ("loose", "packs", "pack_shapes")

    def __init__(self, fn, consts, graph, source, packs):
        super().__init__(fn, consts, graph, source)
        packed = {i for p in packs for i in p}
        self.loose = tuple(i for i in range(len(graph.inputs)) if i not in packed)
        self.packs = packs
        self.pack_shapes = tuple((len(p),) + graph.inputs[p[0]].shape for p in packs)

    def __call__(self, arrays):
        ins = self.graph.inputs
        args = [_c_array(arrays[i], ins[i].dtype) for i in self.loose]
        args = [a[()] if s else a for a, s in zip(args, (self.scalar_in[i] for i in self.loose))]
        try:
            res = self.fn(*args, *self._stack(arrays, check=False), self.consts)
        except _RUN_TIME_ERRORS as e:
            raise locate(e, self.graph, arrays) from None
        return res if self.plain_out else self.finish(res)

    def fast(self, *xs):
        """The transforms' hot path: ``xs`` are the graph inputs then ``consts``. Packs
        are checked for shape (the entry guards only its own arguments); anything that does
        not fit raises a TypeError and the caller takes the slow path (``__call__``)."""
        return self.fn(*[xs[i] for i in self.loose], *self._stack(xs, check=True), xs[-1])

    def _stack(self, arrays, check):
        """One stacked array per pack. ``check``: reject other shapes (SignatureMismatch)
        instead of coercing them."""
        out = []
        for p, shape in zip(self.packs, self.pack_shapes):
            part = [arrays[i] for i in p]
            if check and any(getattr(a, "shape", None) != shape[1:] for a in part):
                raise SignatureMismatch("gradjit: a packed argument's shape differs")
            dt = self.graph.inputs[p[0]].dtype
            out.append(np.array(part, dtype=dt) if len(shape) == 1 else
                       np.concatenate(part, dtype=None if check else dt).reshape(shape))
        return out


def _c_array(a, dt):
    """``a`` as a writable C-contiguous array of ``dt`` (no copy when it already is one)."""
    a = np.array(a, dtype=dt, order="C", copy=None)
    return a if a.flags.writeable else a.copy()


# what generated code raises at run time, without the user's line (``locate`` adds it)
_RUN_TIME_ERRORS = (IndexBoundsError, MaxStepsError)


def locate(err, graph, arrays):
    """``err``, an ``IndexBoundsError`` the compiled code of ``graph`` raised (its source
    holds no user line: one source serves every graph of a structure), at the line of
    the node that met a bad index: the reference interpreter runs the graph again on the
    same arrays and raises at the first such node (error path only). ``err`` itself when
    the arrays do not fit the graph (a batched call: ``_only_site``) or the interpreter
    finds nothing."""
    if err.site is not None:
        return err
    if len(arrays) != len(graph.inputs) or any(
            np.shape(a) != v.shape for a, v in zip(arrays, graph.inputs)):
        return _only_site(err, graph)
    try:
        interpret(graph, [np.asarray(a) for a in arrays])
    except _RUN_TIME_ERRORS as found:
        return found
    except Exception:   # noqa: BLE001 - any other failure: the compiled error stands
        pass
    return err


def _only_site(err, graph):
    """A batched call's ``MaxStepsError`` at its loop's line, when the graph (bodies too)
    has one ``gj.while_loop`` of that ``max_steps``; else ``err`` as it is."""
    sites, todo = set(), [graph]
    while todo:
        for n in todo.pop().nodes:
            todo += [a.graph for a in n.attrs.values() if hasattr(a, "graph")]
            if n.op == "while_steps_check.default" and n.site is not None and \
                    n.attrs["max_steps"] == getattr(err, "max_steps", None):
                sites.add(str(n.site))
                site = n.site
    return err.located(site) if len(sites) == 1 else err


class Interpreted:
    """``GRADJIT_EXECUTOR=numpy``: run the graph op by op in NumPy."""

    def __init__(self, graph):
        self.graph = graph
        self.source = "# GRADJIT_EXECUTOR=numpy: interpreted, no generated source\n"

    def __call__(self, arrays):
        return [np.array(r) for r in interpret(self.graph, [np.asarray(a) for a in arrays])]


@contextlib.contextmanager
def gc_paused():
    """The cyclic collector off for the block, then as the caller had it.

    Why: code generation and a Numba compile allocate about a million objects and free
    almost nothing cyclic, yet each allocation burst triggers collections that scan the
    whole heap, Numba's included: 0.07-0.1 s of W4's 1.4 s cold first gradient.

    On the way out, the objects still young (the compile's survivors: after W4's, most
    of the process's 140,000 tracked objects) are moved to the oldest generation
    (``gc.freeze`` then ``gc.unfreeze``, each a list splice) instead of being scanned by
    the first collection after the block: that scan took 35-40 ms of W4's first gradient.
    The compile's cyclic garbage (W4: 64,000 objects, 0.5 MiB) waits for the next full
    collection. Skipped where the caller froze objects itself (``gc.get_freeze_count()``):
    unfreezing would release theirs."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            if gc.get_freeze_count() == 0:
                gc.freeze()
                gc.unfreeze()
            gc.enable()


def compile_graph(graph, batched=None):
    """An executable for ``graph``; with ``batched`` (input indices), those inputs carry a
    leading batch dimension and every output gains one (see lowering/codegen_batched)."""
    if os.environ.get("GRADJIT_EXECUTOR", "numba") == "numpy" or tiers.holds_float16(graph) \
            or tiers.mode() == "never":
        return Interpreted(graph) if batched is None else InterpretedBatched(graph, batched)
    if batched is None:
        if tiers.wants_background(graph):
            return tiers.Tiered(graph, lambda: _compile_in_background(graph))
    try:
        if not plans.stored(graph, "entry", batched is None, cache_store.current()):
            return _compile_apart(graph, batched)
        with gc_paused():   # (a load from disk: no type inference, no such garbage)
            return _compile_graph(graph, batched)
    except Exception as e:   # noqa: BLE001 - as a background compile's failure: never the
        # reason a gradient fails (nor, its source on disk, every later process's)
        tiers.compile_failed(graph, e)
        return Interpreted(graph) if batched is None else InterpretedBatched(graph, batched)


def _compile_apart(graph, batched):
    """``_compile_graph`` on a thread of its own, the caller waiting for it.

    Why: Numba's type inference raises and catches exceptions whose tracebacks hold their
    frames, and each frame its caller's: cyclic garbage that ``gc_paused`` sends to the
    oldest generation. On the caller's stack that garbage reached every frame above the
    compile, and with them the user's step (a tensor-mode tape, its saved arrays) until
    the next full collection; a thread's stack ends at the thread. Only for a structure
    not on disk: loading one runs no type inference, and a load on a thread of its own
    left the caller's malloc arena small, so that a step allocating large arrays paid
    page faults at each call (tensor-mode W8: 15% slower, measured)."""
    done = []

    def run():
        try:
            with gc_paused():
                done.append((True, _compile_graph(graph, batched)))
        except BaseException as e:   # noqa: BLE001 - raised again in the caller's thread
            done.append((False, e))

    t = threading.Thread(target=run, daemon=True, name="gradjit-compile-sync")
    t.start()
    t.join()
    ok, value = done[0]
    if not ok:
        raise value
    return value


def _compile_in_background(graph):
    with gc_paused():
        return _compile_graph(graph, None)


def _compile_graph(graph, batched):
    gen = plans.generated(graph, "entry", batched is None, cache_store.current())
    types = [_numba_type(v) for v in graph.inputs]
    consts_t = numba.types.Array(numba.float64, 1, "C")
    if batched is None and gen.packs:
        packed = {i for p in gen.packs for i in p}
        types = [t for i, t in enumerate(types) if i not in packed] + [
            numba.types.Array(numba.from_dtype(graph.inputs[p[0]].dtype),
                              graph.inputs[p[0]].ndim + 1, "C") for p in gen.packs]
        return PackedExecutable(_run_on_threads(load(gen.source, tuple(types) + (consts_t,)),
                                                graph, gen), gen.consts, graph, gen.source, gen.packs)
    if batched is None:
        return Executable(_run_on_threads(load(gen.source, tuple(types) + (consts_t,)), graph, gen),
                          gen.consts, graph, gen.source)
    src = batched_source(graph, gen.source, batched)
    for i in batched:
        v = graph.inputs[i]
        types[i] = numba.types.Array(numba.from_dtype(v.dtype), v.ndim + 1, "C")
    exe = Executable(_run_on_threads(load(src, tuple(types) + (consts_t,), "entry_batched"), graph,
                                     gen), gen.consts, graph, src)
    exe.scalar_in = tuple(s and i not in batched for i, s in enumerate(exe.scalar_in))
    exe.plain_in = not any(exe.scalar_in)
    exe.out_dtypes = (None,) * len(graph.outputs)
    exe.plain_out = True
    return exe


def _large_products(graph):
    """True when some matrix product of ``graph`` is large enough to run over threads."""
    for n in graph.nodes:
        if n.op in ("mm.default", "bmm.default"):
            a, b = n.inputs[0].shape, n.inputs[1].shape
            if a[-2] * a[-1] * b[-1] >= PAR_MIN:
                return True
    return False


def _run_on_threads(fn, graph, gen):
    """``fn`` itself, or, when it runs parallel loops or large products, ``fn`` sized to
    the cores free at each call (runtime/threads.py); ``.native`` keeps the dispatcher."""
    big = _large_products(graph)
    return threads.threaded(fn, big) if gen.parallel or big else fn


class InterpretedBatched(Interpreted):
    def __init__(self, graph, batched):
        super().__init__(graph)
        self.batched = set(batched)

    def __call__(self, arrays):
        n = len(arrays[min(self.batched)])
        rows = [super(InterpretedBatched, self).__call__(
            [a[k] if i in self.batched else a for i, a in enumerate(arrays)]) for k in range(n)]
        return [np.stack([r[j] for r in rows]) for j in range(len(self.graph.outputs))]
