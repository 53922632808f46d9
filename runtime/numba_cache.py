"""Numba's disk cache for gradjit's generated functions, through the verified store.

Contract
- ``attach(module, store, stamp, base)``: every Numba dispatcher defined in generated
  ``module`` (its source says no ``cache=``) gets a cache of class ``base`` (Numba's
  ``FunctionCache``, or numba-cuda's ``CUDACache``) whose files live in
  ``<cache dir>/numba/`` and go through ``tracer/cache_store.py``: the index and each
  data file are written with a keyed digest and read back only when they verify, so a
  damaged, edited or planted file is never unpickled or handed to LLVM: it is discarded
  with one warning and the function compiled again. ``stamp`` (the module's content
  hash) stands for the source's freshness: the file's mtime plays no part.
- ``adopt_library()``: every dispatcher a ``gradjit.lowering`` module defines with
  ``cache=True`` (the helpers generated code calls: BLAS blocks, fast-math and special
  functions, allocation) gets the same verified cache, in the library store
  (``cache_store.library()``: the current cache dir unless ``$GRADJIT_LIBRARY_CACHE_DIR``
  names one for several; resolved at each load and save; none: compiled in memory), its
  stamp the content hash of its source file. A helper is shared by many entries and
  processes, so its index is read, extended and written back under the helper's own
  entry lock. Called before every compile or load
  of an entry (new library modules may have been imported); cheap when nothing is new.
- A read-only store reads and never writes. Without a store (``None``) nothing is
  attached: the function compiles in memory.
- ``index_path(disp)``: the index file of ``disp``'s cache (tests and the recovery path).

Why our own cache file rather than Numba's: Numba's ``IndexDataCacheFile`` unpickles
whatever sits at its paths, and its locator picks a writable dir by itself (a read-only
cache dir sends it to another one; for the helpers, the package's own ``__pycache__``).
Its index is read, extended and written back without a lock: two processes compiling
different signatures of one helper at once (pytest-xdist, process pools) both name their
data file ``.1.nbc``, and the index one keeps can point at the other's machine code (a
spawned worker of CI then found its helper missing and compiled everything again). The
Cache class, its key and its (de)serialisation of compile results stay Numba's.
"""
from __future__ import annotations

import contextlib
import hashlib
import itertools
import os
import pickle
import sys

import numba

from gradjit.tracer import cache_store

_SPOT = "__gradjit_cache__"   # module global: (store, folder, stamp) for the locator
_CLASSES = {}   # base cache class -> gradjit's subclass


class _Locator:
    """Numba's cache locator protocol, pointing at the store's ``numba/`` folder."""

    def __init__(self, store, folder, stamp, lineno):
        self._store, self._path, self._stamp, self._lineno = store, folder, stamp, lineno
        self._py_file = os.path.join(folder, "generated")   # (Numba's warnings name it)

    def ensure_cache_path(self):
        self._store.folder(self._path)

    def get_cache_path(self):
        return self._path

    def get_source_stamp(self):
        return self._stamp

    def get_disambiguator(self):
        return str(self._lineno)

    @classmethod
    def from_function(cls, py_func, py_file):
        spot = py_func.__globals__.get(_SPOT)
        return None if spot is None else cls(*spot, py_func.__code__.co_firstlineno)


class VerifiedIndex:
    """Numba's index-and-data cache file protocol (``load``, ``save``, ``flush``) over the
    verified store. The index is one pickle of (Numba version, stamp, {key: data name}).
    ``store`` None: the store current at each use (a library helper's index)."""

    def __init__(self, store, filename_base, stamp, dump):
        self._fixed, self._base, self._stamp, self._dump = store, filename_base, stamp, dump

    def _where(self):
        """(store, its numba folder, this index's path), or None without a store."""
        store = self._fixed if self._fixed is not None else cache_store.library()
        if store is None:
            return None
        folder = store.path("numba")
        return store, folder, os.path.join(folder, self._base + ".nbi")

    def _locked(self, store):
        """A generated entry is saved under its entry's lock (runtime/compiler.py); a
        helper, shared by many entries and processes, under its own."""
        return contextlib.nullcontext() if self._fixed is not None else \
            cache_store.entry_lock(store, "lib." + self._base)

    def flush(self):
        where = self._where()
        if where is not None:
            self._save_index(where, {})

    def save(self, key, data):
        where = self._where()
        if where is None or not (where[0].writable and where[0].folder(where[1])):
            return
        store, folder, _ = where
        with self._locked(store):
            overloads = self._load_index(where)
            name = overloads.get(key)
            if name is None:
                used = set(overloads.values())
                name = next(n for n in (f"{self._base}.{i}.nbc" for i in itertools.count(1))
                            if n not in used)
                overloads[key] = name
                self._save_index(where, overloads)
            store.write(os.path.join(folder, name), self._dump(data))

    def load(self, key):
        where = self._where()
        if where is None:
            return None
        store, folder, _ = where
        name = self._load_index(where).get(key)
        if name is None:
            return None
        path = os.path.join(folder, name)
        raw = store.read(path)
        if raw is None:
            return None
        try:
            return pickle.loads(raw)
        except Exception:   # noqa: BLE001 - verified yet unreadable (another Python): rebuild
            store.discard(path, "verified but cannot be unpickled here")
            return None

    def _load_index(self, where):
        store, _, path = where
        raw = store.read(path)
        if raw is None:
            return {}
        try:
            version, stamp, overloads = pickle.loads(raw)
        except Exception:   # noqa: BLE001 - as above
            store.discard(path, "verified but cannot be unpickled here")
            return {}
        if version != numba.__version__ or stamp != self._stamp or not isinstance(overloads, dict):
            return {}
        return overloads

    def _save_index(self, where, overloads):
        store, _, path = where
        store.write(path, self._dump((numba.__version__, self._stamp, overloads)))


class _LibraryLocator(_Locator):
    """A library helper's locator: the folder is resolved at each use (``VerifiedIndex``
    with no fixed store), the stamp is its source file's content hash."""

    _STAMPS = {}   # source file -> its content hash

    def __init__(self, py_file, lineno):
        stamp = self._STAMPS.get(py_file)
        if stamp is None:
            with open(py_file, "rb") as f:
                stamp = self._STAMPS[py_file] = hashlib.sha256(f.read()).hexdigest()
        super().__init__(None, os.path.dirname(py_file), stamp, lineno)
        self._py_file = py_file

    def ensure_cache_path(self):
        pass   # (the store makes its folder when it writes)

    @classmethod
    def from_function(cls, py_func, py_file):
        return cls(py_file, py_func.__code__.co_firstlineno)


def _cache_class(base, locator=_Locator):
    cls = _CLASSES.get((base, locator))
    if cls is None:
        impl = type("Gradjit" + base._impl_class.__name__, (base._impl_class,),
                    {"_locator_classes": [locator]})
        cls = _CLASSES[base, locator] = type("Gradjit" + base.__name__, (base,),
                                             {"_impl_class": impl})
    return cls


def _verified(disp, base, locator, store, stamp=None):
    cache = _cache_class(base, locator)(disp.py_func)
    cache._cache_file = VerifiedIndex(store, cache._impl.filename_base,
                                      stamp or cache._impl.locator.get_source_stamp(),
                                      cache._cache_file._dump)
    disp._cache = cache


def attach(module, store, stamp, base):
    if store is None or base is None:
        return
    setattr(module, _SPOT, (store, store.path("numba"), stamp))
    for disp in list(vars(module).values()):
        if getattr(disp, "py_func", None) is None or not hasattr(disp, "_cache") \
                or getattr(disp.py_func, "__module__", None) != module.__name__:
            continue
        _verified(disp, base, _Locator, store, stamp)


_ADOPTED = set()   # library modules whose helpers have gradjit's cache
LIBRARY = "gradjit.lowering."


def adopt_library():
    for name in [n for n in list(sys.modules) if n.startswith(LIBRARY) and n not in _ADOPTED]:
        module = sys.modules.get(name)
        if module is None:
            continue
        _ADOPTED.add(name)
        for disp in list(vars(module).values()):
            cache = getattr(disp, "_cache", None)
            if getattr(disp, "py_func", None) is None or not hasattr(cache, "_impl") \
                    or getattr(disp.py_func, "__module__", None) != name \
                    or type(cache).__name__.startswith("Gradjit"):
                continue
            _verified(disp, type(cache), _LibraryLocator, None)


def index_path(disp):
    f = getattr(getattr(disp, "_cache", None), "_cache_file", None)
    where = f._where() if isinstance(f, VerifiedIndex) else None
    return None if where is None else where[2]
