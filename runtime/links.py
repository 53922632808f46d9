"""Helpers a generated entry calls: bound to their loaded code, not copied into its own.

Contract
- ``shared_helpers()``: runtime/compiler.py compiles a generated module inside this block.
  When Numba finalises a library that defines a generated module's function, each library
  it would link in that holds a *called* helper (an overload of a gradjit.lowering
  dispatcher without ``forceinline``: blas_cpu's ``smm``, ``ger``, ``outer``, ...) whose
  code is already in Numba's JIT is left out of the library's module: the entry's calls
  bind to the helper's loaded code, which is where they bound anyway. Its module for
  linking (what a user's ``@njit`` caller links in, and what Numba's disk cache keeps
  beside the machine code) still carries the helpers, so such callers compile as before.
- ``save_links(disp, signature, path)`` (after a compile) records at ``path`` the helper
  overloads the compiled entry calls and does not carry: (module, function, argument
  types, symbol) each, the symbol being what the entry's machine code calls. It also
  records helpers whose copies it carries (symbol None), which are worth loading first:
  the JIT then binds the calls to their own (optimised) code, not the copies.
- ``load_links(path, load) -> bool`` (before the entry's cached code is loaded in another
  process) loads the recorded helpers with ``load`` (runtime/compiler.py's
  ``_load_cached``) and says whether every helper the entry needs is loaded under the
  symbol its code calls. False (no readable record, a helper's cache gone or compiled
  anew here, under another symbol) means the cached entry must not be loaded: an
  unresolved call makes Numba's JIT end the process. ``compile_fresh`` compiles it then.
- ``compile_fresh(disp, signature)``: ``disp.compile`` without reading Numba's disk cache
  (it still writes it).
- ``STATS["linked"]`` counts helper overloads ``load_links`` loaded, ``STATS["shared"]``
  the helper libraries left out of a compiled library (tests read both).

Why: Numba links every callee's module into the caller's and optimises and emits the
copies again, whether or not LLVM inlines them. The RNN benchmark's entry calls three such
helpers (a third of its optimised IR): leaving them out saves about 55 ms of a 0.65 s
compile (alternating in-process compiles, medians of 8).
Where Numba's internals differ, nothing is hooked and every callee is linked as Numba does.
"""
from __future__ import annotations

import contextlib
import importlib
import pickle
import sys
import types

from numba.core.compiler_lock import global_compiler_lock

from gradjit.tracer import cache_store
from gradjit.runtime.levels import generated_library

STATS = {"linked": 0, "shared": 0}
_ACTIVE = [False]    # inside shared_helpers()
_LINKING = [False]   # inside the finalisation of a generated library


@contextlib.contextmanager
def shared_helpers():
    """Leave already-loaded called helpers out of generated libraries made in the block."""
    if _ORIGINAL is None:
        yield
        return
    with global_compiler_lock:
        old, _ACTIVE[0] = _ACTIVE[0], True
        try:
            yield
        finally:
            _ACTIVE[0] = old


def _helper_overloads(modules):
    """(module name, function name, dispatcher, argument types, compile result) of every
    compiled overload of a dispatcher in ``modules`` (name -> gradjit.lowering module)."""
    from numba.core.registry import CPUDispatcher
    for name, mod in modules:
        if name.startswith("gradjit.lowering.") and mod is not None:
            for fname, helper in vars(mod).items():
                if isinstance(helper, CPUDispatcher):
                    for args, c in helper.overloads.items():
                        yield name, fname, helper, args, c


def _called_helpers():
    """library -> (module, function, argument types, symbol) of every compiled overload of
    a gradjit.lowering dispatcher that is called, not inlined (no ``forceinline``)."""
    return {c.library: (name, fname, args, c.fndesc.mangled_name)
            for name, fname, helper, args, c in _helper_overloads(list(sys.modules.items()))
            if not helper.targetoptions.get("forceinline")}


def _finalize(self):
    if not (_ACTIVE[0] and self._linking_libraries and generated_library(self)):
        return _ORIGINAL(self)
    helpers = _called_helpers()
    kept, shared = [], {}
    for lib in self._linking_libraries:
        if lib in helpers and lib._finalized:
            shared[lib] = helpers[lib]
        else:
            kept.append(lib)
            shared.update(getattr(lib, "_gj_shared", {}))   # (an outlined function's)
    if shared:
        self._linking_libraries = kept
        self._gj_shared = shared
        self._get_module_for_linking = types.MethodType(_module_for_linking, self)
        STATS["shared"] += len(shared)
    old, _LINKING[0] = _LINKING[0], True
    try:
        return _ORIGINAL(self)
    finally:
        _LINKING[0] = old


def _module_for_linking(self):
    """Numba's module for linking, with the left-out helpers linked back in, except for the
    generated library being finalised (it binds to the loaded helpers as well)."""
    base = type(self)._get_module_for_linking(self)
    if _LINKING[0]:
        return base
    full = getattr(self, "_gj_full", None)
    if full is None:
        full = base.clone()
        for lib in self._gj_shared:
            full.link_in(lib._get_module_for_linking(), preserve=True)
        self._gj_full = full
    return full


def save_links(disp, signature, path, store=None):
    """Record the helpers the compiled ``signature`` of ``disp`` calls (see above), in
    ``store`` (default: the current one), verified on reading (tracer/cache_store.py)."""
    try:
        lib = disp.overloads[tuple(signature)].library
        links = list(getattr(lib, "_gj_shared", {}).values())
        kept = {f.name for f in lib._final_module.functions if not f.is_declaration}
        mods = [(m.__name__, m) for m in disp.py_func.__globals__.values()
                if isinstance(m, types.ModuleType)]
        links += [(name, fname, args, None) for name, fname, _, args, c in _helper_overloads(mods)
                  if c.fndesc.mangled_name in kept]
        (store or cache_store.current()).write(path, pickle.dumps(links))
    except Exception:   # noqa: BLE001 - without a record the next process compiles it again
        return


def load_links(path, load, store=None):
    """Load the helpers recorded at ``path``; True when the entry's calls will resolve.
    A record that does not verify is not unpickled (and not ready)."""
    raw = (store or cache_store.current()).read(path)
    if raw is None:
        return False
    try:
        links = pickle.loads(raw)
    except Exception:   # noqa: BLE001 - verified but of another Python: compiled again
        return False
    if not isinstance(links, list):
        return False
    ready = True
    for link in links:
        try:
            module, fname, args, symbol = link
        except (TypeError, ValueError):   # (a record of another layout)
            return False
        helper = None
        if module.startswith("gradjit.lowering."):   # (only helpers are recorded)
            try:
                helper = getattr(importlib.import_module(module), fname)
                if load(helper, args):
                    STATS["linked"] += 1
            except Exception:   # noqa: BLE001 - then the entry is compiled again
                helper = None
        if symbol is not None:
            c = getattr(helper, "overloads", {}).get(tuple(args))
            ready = ready and c is not None and c.fndesc.mangled_name == symbol \
                and c.library._finalized
    return ready


class _NoRead:
    """A Numba cache that reads nothing and writes through."""

    def __init__(self, cache):
        self._cache = cache

    def load_overload(self, sig, target_context):
        return None

    def __getattr__(self, name):
        return getattr(self._cache, name)


def compile_fresh(disp, signature):
    """``disp.compile(signature)``, reading nothing from Numba's disk cache: what it holds
    for this signature may call helpers this process has not loaded. Nor do the other
    functions of its module that it calls (``entry_batched`` calls ``entry``): their cached
    code may call such helpers too (an LLVM "Symbol not found" abort, the process gone)."""
    with global_compiler_lock:
        mod = disp.py_func.__module__
        own = [d for d in list(disp.py_func.__globals__.values())
               if getattr(d, "_cache", None) is not None
               and getattr(getattr(d, "py_func", None), "__module__", None) == mod]
        saved = [(d, d._cache) for d in own]
        for d, cache in saved:
            d._cache = _NoRead(cache)
        try:
            disp.compile(signature)
        finally:
            for d, cache in saved:
                d._cache = cache


try:   # Numba's own method this module stands in for (links every callee's copy)
    from numba.core.codegen import CPUCodeLibrary
    _ORIGINAL = CPUCodeLibrary.finalize
    CPUCodeLibrary._get_module_for_linking  # noqa: B018 - (the method the copies come from)
except (ImportError, AttributeError):   # another Numba layout: Numba links every callee
    _ORIGINAL = None
# Read here, never swapped here: runtime/numba_patches.py swaps it in for each compile's block.
SWAPS = () if _ORIGINAL is None else ((CPUCodeLibrary, "finalize", _finalize),)
