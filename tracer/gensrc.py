"""Generated Python source, loaded the project's one way: verified text, through importlib.

Contract
- ``load(kind, source, names)``: the module of ``source`` (cached by content), named
  ``gj_<kind>_<content hash>`` (one source is one module per process), with ``names`` as
  globals set before its body runs. Its file ``<cache dir>/py/<name>.py`` is written for
  readers and tracebacks (tracer/cache_store.py); the module runs from ``source`` itself.
- ``import_source(name, source, path, names)``: the module ``name`` (the one already in
  ``sys.modules`` if there is one), loaded by importlib from ``source`` itself under the
  file name ``path``; registered in ``sys.modules`` before its body runs (Numba's cache and
  pickles find generated functions by module name). Why not importlib's file loader: it
  would run the bytecode cached beside the file (``__pycache__/*.pyc``), which nothing
  verifies, and the file itself may have been changed; ``source`` is what the caller generated or
  read back verified. Where the file is not on disk, ``linecache`` gets the text, so
  tracebacks still show it.
- ``cache_dir()``: the configured cache dir's path (runtime/ uses tracer/cache_store.py
  through here and directly: the tracer stage cannot import runtime).
"""
from __future__ import annotations

import hashlib
import importlib.abc
import importlib.util
import linecache
import os
import sys

from gradjit.tracer import cache_store


def cache_dir():
    return cache_store.configured_dir()


class _Verified(importlib.abc.SourceLoader):
    """importlib's source loader over text already in memory: no file read, and no
    bytecode cache used or written (it has no ``path_stats``)."""

    def __init__(self, source, path):
        self.source, self.path = source, path

    def get_filename(self, fullname):
        return self.path

    def get_data(self, path):
        return self.source.encode()


def import_source(name, source, path, names=None):
    mod = sys.modules.get(name)
    if mod is not None:
        return mod
    loader = _Verified(source, path)
    mod = importlib.util.module_from_spec(importlib.util.spec_from_loader(name, loader,
                                                                          origin=path))
    mod.__file__ = path
    if names:
        mod.__dict__.update(names)
    if not os.path.exists(path):
        linecache.cache[path] = (len(source), None, source.splitlines(True), path)
    sys.modules[name] = mod   # before exec: Numba's cache must see a real module
    try:
        loader.exec_module(mod)
    except BaseException:
        del sys.modules[name]
        raise
    return mod


def module_path(store, folder, name, source):
    """Where module ``name`` lives: written in ``store`` (when there is one), else a name
    that is only a label (compiled in memory)."""
    if store is None:
        return os.path.join("<gradjit in memory>", folder, name + ".py")
    path = store.path(folder, name + ".py") if folder else store.path(name + ".py")
    if store.writable and folder:
        store.folder(store.path(folder))
    store.put_module(path, source)
    return path


def load(kind, source, names):
    name = f"gj_{kind}_{hashlib.sha256(source.encode()).hexdigest()[:20]}"
    mod = sys.modules.get(name)
    if mod is not None:
        return mod
    return import_source(name, source, module_path(cache_store.current(), "py", name, source),
                         names)
