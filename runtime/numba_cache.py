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
- A read-only store reads and never writes. Without a store (``None``) nothing is
  attached: the function compiles in memory.
- ``index_path(disp)``: the index file of ``disp``'s cache (tests and the recovery path).

Why our own cache file rather than Numba's: Numba's ``IndexDataCacheFile`` unpickles
whatever sits at its paths, and its locator picks a writable dir by itself (a read-only
cache dir sends it to another one). The Cache class, its key and its (de)serialisation
of compile results stay Numba's.
"""
from __future__ import annotations

import itertools
import os
import pickle

import numba

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
    verified store. The index is one pickle of (Numba version, stamp, {key: data name})."""

    def __init__(self, store, folder, filename_base, stamp, dump):
        self._store, self._folder, self._stamp, self._dump = store, folder, stamp, dump
        self._index_path = os.path.join(folder, filename_base + ".nbi")
        self._pattern = filename_base + ".{:d}.nbc"

    def flush(self):
        self._save_index({})

    def save(self, key, data):
        overloads = self._load_index()
        name = overloads.get(key)
        if name is None:
            used = set(overloads.values())
            name = next(n for n in (self._pattern.format(i) for i in itertools.count(1))
                        if n not in used)
            overloads[key] = name
            self._save_index(overloads)
        self._store.write(os.path.join(self._folder, name), self._dump(data))

    def load(self, key):
        name = self._load_index().get(key)
        if name is None:
            return None
        path = os.path.join(self._folder, name)
        raw = self._store.read(path)
        if raw is None:
            return None
        try:
            return pickle.loads(raw)
        except Exception:   # noqa: BLE001 - verified yet unreadable (another Python): rebuild
            self._store.discard(path, "verified but cannot be unpickled here")
            return None

    def _load_index(self):
        raw = self._store.read(self._index_path)
        if raw is None:
            return {}
        try:
            version, stamp, overloads = pickle.loads(raw)
        except Exception:   # noqa: BLE001 - as above
            self._store.discard(self._index_path, "verified but cannot be unpickled here")
            return {}
        if version != numba.__version__ or stamp != self._stamp or not isinstance(overloads, dict):
            return {}
        return overloads

    def _save_index(self, overloads):
        self._store.write(self._index_path, self._dump((numba.__version__, self._stamp, overloads)))


def _cache_class(base):
    cls = _CLASSES.get(base)
    if cls is None:
        impl = type("Gradjit" + base._impl_class.__name__, (base._impl_class,),
                    {"_locator_classes": [_Locator]})
        cls = _CLASSES[base] = type("Gradjit" + base.__name__, (base,), {"_impl_class": impl})
    return cls


def attach(module, store, stamp, base):
    if store is None or base is None:
        return
    folder = store.path("numba")
    setattr(module, _SPOT, (store, folder, stamp))
    for disp in list(vars(module).values()):
        if getattr(disp, "py_func", None) is None or not hasattr(disp, "_cache") \
                or getattr(disp.py_func, "__module__", None) != module.__name__:
            continue
        cache = _cache_class(base)(disp.py_func)
        cache._cache_file = VerifiedIndex(store, cache.cache_path, cache._impl.filename_base,
                                          stamp, cache._cache_file._dump)
        disp._cache = cache


def index_path(disp):
    f = getattr(getattr(disp, "_cache", None), "_cache_file", None)
    return getattr(f, "_index_path", None)
